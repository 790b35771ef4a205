/*
 * usbmon_read: read events from a usbmon binary device with read(),
 * MON_IOCX_GET or MON_IOCX_GETX and print them in the `Nu` text format; or
 * check poll.
 *
 *   usbmon_read read|get|getx DEVICE COUNT
 *   usbmon_read poll DEVICE
 *   usbmon_read fcntl DEVICE   (on a quiet bus) O_NONBLOCK set and cleared
 *                              with fcntl after open, as pcap_setnonblock
 *                              does, governs read, GETX and MFETCH
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../examples/usbmon.h"

static void on_alarm(int sig)
{
	(void)sig;
}

/* Print how read, GETX and MFETCH end on an empty ring. */
static void try_all(int fd, const char *what)
{
	static unsigned char buf[4096];
	struct usbmon_packet h;
	struct mon_bin_get g = { &h, buf, sizeof(buf) };
	uint32_t vec[4];
	struct mon_bin_mfetch f = { vec, 4, 0 };
	ssize_t n = read(fd, buf, sizeof(buf));
	printf("%s: read -> %zd %s\n", what, n, n < 0 ? strerror(errno) : "");
	int r = ioctl(fd, MON_IOCX_GETX, &g);
	printf("%s: GETX -> %d %s\n", what, r, r < 0 ? strerror(errno) : "");
	r = ioctl(fd, MON_IOCX_MFETCH, &f);
	printf("%s: MFETCH -> %d %s\n", what, r, r < 0 ? strerror(errno) : "");
}

int main(int argc, char **argv)
{
	const char *mode = argv[1];
	int fd = open(argv[2], O_RDONLY);
	if (fd < 0) {
		perror(argv[2]);
		return 1;
	}
	if (strcmp(mode, "poll") == 0) {
		struct pollfd p = { fd, POLLIN, 0 };
		int n = poll(&p, 1, 0);
		printf("poll(0) -> %d revents=%#x\n", n, p.revents);
		n = poll(&p, 1, 10000);
		printf("poll(10s) -> %d revents=%#x\n", n, p.revents);
		return 0;
	}
	if (strcmp(mode, "fcntl") == 0) {
		/* Blocking calls end with EINTR from a 300 ms alarm. */
		struct sigaction sa = { 0 };
		sa.sa_handler = on_alarm;
		sigaction(SIGALRM, &sa, NULL);
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
		try_all(fd, "set after open");
		int fd2 = open(argv[2], O_RDONLY | O_NONBLOCK);
		fcntl(fd2, F_SETFL, fcntl(fd2, F_GETFL) & ~O_NONBLOCK);
		for (int i = 0; i < 3; i++) {
			ualarm(300000, 0);
			static unsigned char b[64];
			ssize_t n = i == 0 ? read(fd2, b, sizeof(b)) : 0;
			struct usbmon_packet h;
			struct mon_bin_get g = { &h, b, sizeof(b) };
			uint32_t vec[4];
			struct mon_bin_mfetch f = { vec, 4, 0 };
			int r = i == 0 ? (int)n : ioctl(fd2, i == 1 ? MON_IOCX_GETX : MON_IOCX_MFETCH, i == 1 ? (void *)&g : (void *)&f);
			printf("cleared after open: %s -> %d %s\n", i == 0 ? "read" : i == 1 ? "GETX" : "MFETCH", r, r < 0 ? strerror(errno) : "");
		}
		return 0;
	}
	long count = atol(argv[3]);
	static unsigned char buf[1 << 20];
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	for (long i = 0; i < count; i++) {
		struct usbmon_packet h;
		memset(&h, 0, sizeof(h));
		if (strcmp(mode, "read") == 0) {
			/* Read the 48-byte header in two pieces, then the data. */
			if (read(fd, &h, 20) != 20 || read(fd, (char *)&h + 20, 28) != 28) {
				perror("read header");
				return 1;
			}
			ssize_t n = h.len_cap ? read(fd, buf, sizeof(buf)) : 0;
			if (n != (ssize_t)h.len_cap) {
				fprintf(stderr, "read data: %zd of %u\n", n, h.len_cap);
				return 1;
			}
			if (h.xfer_type == 0)
				h.ndesc = h.s.iso.numdesc < 128 ? h.s.iso.numdesc : 128;
		} else {
			struct mon_bin_get g = { &h, buf, sizeof(buf) };
			unsigned long cmd = strcmp(mode, "get") == 0 ? MON_IOCX_GET : MON_IOCX_GETX;
			if (ioctl(fd, cmd, &g) < 0) {
				perror(mode);
				return 1;
			}
			if (cmd == MON_IOCX_GET && h.xfer_type == 0)
				h.ndesc = h.s.iso.numdesc < 128 ? h.s.iso.numdesc : 128;
		}
		usbmon_print_u(stdout, &h, buf);
	}
	fflush(stdout);
	struct mon_bin_stats st;
	if (ioctl(fd, MON_IOCG_STATS, &st) == 0)
		fprintf(stderr, "queued %u dropped %u\n", st.queued, st.dropped);
	return 0;
}
