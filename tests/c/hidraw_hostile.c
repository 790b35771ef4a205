/*
 * hidraw's node under hostile and odd calls, with raw system calls: each
 * line is a call and its result (the return value, or -ERRNO), for
 * tests/hidraw.rs to compare with what hidraw.c gives.
 *
 *   hidraw_hostile [--no-read] [--revoke] NODE SYSFS_REPORT_DESCRIPTOR
 *                                        (the device there; --no-read: no
 *                                        read(2) nor poll, for a device
 *                                        that sends nothing, as qemu's idle
 *                                        keyboard in scripts/kernel-vm;
 *                                        --revoke: HIDIOCREVOKE on a second
 *                                        open, for a character device: a
 *                                        FUSE file's caller cannot pass it
 *                                        NULL)
 *   hidraw_hostile --gone NODE CTL_COMMAND...          (the device unplugged
 *                                                       by the command meanwhile)
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/hidraw.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef HIDIOCREVOKE /* Linux 6.12's; Debian 12's headers are older */
#define HIDIOCREVOKE _IOW('H', 0x0D, int)
#endif

static long r(long v)
{
	return v < 0 ? -errno : v;
}

static void show(const char *what, long v)
{
	printf("%s %ld\n", what, v);
}

static int gone(char **argv)
{
	int fd = open(argv[2], O_RDWR);
	if (fd < 0)
		return 1;
	pid_t p = fork();
	if (p == 0) {
		execvp(argv[3], argv + 3);
		_exit(127);
	}
	int st;
	waitpid(p, &st, 0);
	/* What was queued before the unplug is read; then EIO. */
	unsigned char b[64];
	long n;
	int reports = 0;
	while ((n = r(read(fd, b, sizeof b))) > 0)
		reports++;
	show("read_after_unplug", n);
	struct pollfd pfd = { fd, POLLIN | POLLOUT, 0 };
	poll(&pfd, 1, 0);
	show("poll_err_hup", (pfd.revents & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP));
	int size;
	show("ioctl_after_unplug", r(ioctl(fd, HIDIOCGRDESCSIZE, &size)));
	unsigned char w[2] = { 0, 1 };
	show("write_after_unplug", r(write(fd, w, 2)));
	show("open_after_unplug", r(open(argv[2], O_RDWR)));
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--gone"))
		return gone(argv);
	int reads = 1, revoke = 0;
	for (; argv[1] && !strncmp(argv[1], "--", 2); argv++) {
		if (!strcmp(argv[1], "--no-read"))
			reads = 0;
		else if (!strcmp(argv[1], "--revoke"))
			revoke = 1;
	}
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	unsigned char sys[4096];
	int sfd = open(argv[2], O_RDONLY);
	long slen = read(sfd, sys, sizeof sys);
	close(sfd);

	int size = -1;
	show("rdescsize", r(ioctl(fd, HIDIOCGRDESCSIZE, &size)));
	show("size_is_sysfs_length", size == slen);
	struct hidraw_report_descriptor d;
	memset(&d, 0xee, sizeof d);
	d.size = HID_MAX_DESCRIPTOR_SIZE;
	show("rdesc_4096", r(ioctl(fd, HIDIOCGRDESC, &d)));
	d.size = 5;
	show("rdesc_5", r(ioctl(fd, HIDIOCGRDESC, &d)));
	show("rdesc_5_bytes", !memcmp(d.value, sys, 5) && d.value[5] == 0xee);
	d.size = size;
	show("rdesc_all", r(ioctl(fd, HIDIOCGRDESC, &d)));
	show("rdesc_is_sysfs", !memcmp(d.value, sys, size));
	struct hidraw_devinfo info;
	show("rawinfo", r(ioctl(fd, HIDIOCGRAWINFO, &info)));
	printf("info %u %04hx %04hx\n", info.bustype, info.vendor, info.product);
	char name[256];
	long n = r(ioctl(fd, HIDIOCGRAWNAME(sizeof name), name));
	printf("name %ld %s\n", n, n > 0 ? name : "");
	memset(name, 0, sizeof name);
	show("name_4", r(ioctl(fd, HIDIOCGRAWNAME(4), name)));
	printf("name_4_is %s\n", name);
	n = r(ioctl(fd, HIDIOCGRAWPHYS(sizeof name), name));
	printf("phys %ld %s\n", n, n > 0 ? name : "");
	n = r(ioctl(fd, HIDIOCGRAWUNIQ(sizeof name), name));
	printf("uniq %ld %s\n", n, n > 0 ? name : "");

	unsigned char big[16385] = { 0 };
	show("write_1", r(write(fd, big, 1)));
	show("write_16385", r(write(fd, big, sizeof big)));
	show("gfeature_1", r(ioctl(fd, HIDIOCGFEATURE(1), big)));
	show("sfeature_1", r(ioctl(fd, HIDIOCSFEATURE(1), big)));
	/* a report ID the device does not know: qemu's keyboard answers
	 * any GET_REPORT with its keys */
	big[0] = 0xff;
	show("gfeature_id_ff", r(ioctl(fd, HIDIOCGFEATURE(16), big)));
	show("not_H", r(ioctl(fd, _IOC(_IOC_READ, 'X', 4, 8), big)));
	show("H_write_name", r(ioctl(fd, _IOC(_IOC_WRITE, 'H', 4, 8), big)));
	show("H_unknown", r(ioctl(fd, _IOC(_IOC_READ, 'H', 0x30, 8), big)));
	if (reads) {
		show("read_0", r(read(fd, big, 0)) >= 0 ? 0 : -1);
		unsigned char rep[64];
		show("read_3", r(read(fd, rep, 3)));
	}
	struct pollfd p = { fd, POLLOUT, 0 };
	show("poll", r(poll(&p, 1, -1)));
	/* writable always: poll returns at once */
	show("poll_out", (p.revents & POLLOUT) == POLLOUT);

	long opened = 0;
	for (int i = 0; i < 10000; i++) {
		int f = open(argv[1], O_RDWR);
		if (f >= 0) {
			opened++;
			close(f);
		}
	}
	show("opens", opened);
	show("still_works", r(ioctl(fd, HIDIOCGRDESCSIZE, &size)));
	if (revoke) {
		int f2 = open(argv[1], O_RDWR | O_NONBLOCK);
		unsigned char w[2] = { 0, 0 };
		show("revoke_arg", r(ioctl(f2, HIDIOCREVOKE, &size)));
		show("revoke", r(ioctl(f2, HIDIOCREVOKE, NULL)));
		show("revoked_read", r(read(f2, big, 8)));
		show("revoked_write", r(write(f2, w, 2)));
		show("revoked_ioctl", r(ioctl(f2, HIDIOCGRDESCSIZE, &size)));
		struct pollfd q = { f2, POLLIN | POLLOUT, 0 };
		poll(&q, 1, 0);
		show("revoked_poll_err_hup", (q.revents & (POLLERR | POLLHUP)) == (POLLERR | POLLHUP));
		close(f2);
		show("others_work", r(ioctl(fd, HIDIOCGRDESCSIZE, &size)));
	}
	close(fd);
	return 0;
}
