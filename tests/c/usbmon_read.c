/*
 * usbmon_read: read events from a usbmon binary device with read(),
 * MON_IOCX_GET or MON_IOCX_GETX and print them in the `Nu` text format; or
 * check poll.
 *
 *   usbmon_read read|get|getx DEVICE COUNT
 *   usbmon_read poll DEVICE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../examples/usbmon.h"

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
