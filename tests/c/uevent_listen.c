/* uevent_listen: print the kernel's uevents (netlink group 1, from port id
 * 0) as they come, one line each: the payload's NUL-separated fields
 * joined by " | ". Only USB's, and with NAME only those of the device NAME
 * (the last part of DEVPATH is NAME or NAME:C.I). Stops after N events or
 * SECS seconds. The same program
 * runs on the kernel in qemu (scripts/kernel-vm) and inside monfs run, so
 * that the two sequences can be compared. "ready" is printed once the
 * socket is bound.
 *
 *   uevent_listen SECS N [NAME]
 */
#define _GNU_SOURCE
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <linux/netlink.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4)
		return 2;
	const char *name = argc == 4 ? argv[3] : NULL;
	int secs = atoi(argv[1]), n = atoi(argv[2]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_KOBJECT_UEVENT);
	struct sockaddr_nl a = { .nl_family = AF_NETLINK, .nl_groups = 1 };
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("netlink");
		return 1;
	}
	printf("ready\n");
	time_t end = time(NULL) + secs;
	static char buf[8192];
	while (n > 0 && time(NULL) < end) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 500) <= 0)
			continue;
		struct sockaddr_nl from;
		socklen_t fl = sizeof(from);
		ssize_t len = recvfrom(fd, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &fl);
		if (len <= 0 || from.nl_pid != 0)
			continue;
		buf[len] = 0;
		if (!memmem(buf, len, "SUBSYSTEM=usb", sizeof("SUBSYSTEM=usb")))
			continue; /* the same events on both sides: USB's */
		if (name) {
			const char *at = strchr(buf, '@');
			const char *last = at ? strrchr(at, '/') : NULL;
			size_t k = strlen(name);
			if (!last || strncmp(last + 1, name, k) != 0 ||
			    (last[1 + k] != 0 && last[1 + k] != ':'))
				continue;
		}
		for (ssize_t i = 0; i < len; i++)
			if (buf[i] == 0 && i + 1 < len)
				fputs(" | ", stdout);
			else if (buf[i])
				putchar(buf[i]);
		putchar('\n');
		n--;
	}
	return n > 0;
}
