/*
 * usbmon_hdr: dump the raw binary headers of a usbmon device, one event per
 * line, every field as a number and the captured data in hex, for
 * kernel-vm's structural comparison.
 *
 *   usbmon_hdr get|getx DEVICE COUNT SECONDS
 *
 * Reads with MON_IOCX_GET (48-byte header) or MON_IOCX_GETX (64-byte header)
 * until COUNT events or SECONDS seconds (or SIGTERM), then prints
 * "END events=N stats_queued=Q stats_dropped=D" and exits 0. Output is line
 * buffered so nothing is lost when the guest script stops it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "usbmon.h"

static volatile sig_atomic_t stop;
static void on_sig(int s)
{
	(void)s;
	stop = 1;
}

int main(int argc, char **argv)
{
	if (argc != 5 || (strcmp(argv[1], "get") && strcmp(argv[1], "getx"))) {
		fprintf(stderr, "usage: %s get|getx DEVICE COUNT SECONDS\n", argv[0]);
		return 2;
	}
	int getx = strcmp(argv[1], "getx") == 0;
	long count = atol(argv[3]);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sig; /* no SA_RESTART: the blocking ioctl returns EINTR */
	sigaction(SIGALRM, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	int fd = open(argv[2], O_RDONLY);
	if (fd < 0) {
		printf("OPEN_ERROR errno=%d\n", errno);
		return 1;
	}
	alarm((unsigned)atoi(argv[4]));
	static unsigned char data[1 << 16];
	long n = 0;
	while (!stop && n < count) {
		struct usbmon_packet h;
		memset(&h, 0xa5, sizeof(h)); /* so that unwritten header bytes show */
		struct mon_bin_get g = { &h, data, sizeof(data) };
		if (ioctl(fd, getx ? MON_IOCX_GETX : MON_IOCX_GET, &g) < 0) {
			if (errno == EINTR)
				continue;
			printf("IOCTL_ERROR errno=%d\n", errno);
			break;
		}
		n++;
		printf("id=%llx type=%d xfer=%u ep=%u dev=%u bus=%u flag_setup=%d flag_data=%d "
		       "ts_sec=%lld ts_usec=%d status=%d length=%u len_cap=%u "
		       "setup=%02x%02x%02x%02x%02x%02x%02x%02x",
		       (unsigned long long)h.id, h.type, h.xfer_type, h.epnum, h.devnum, h.busnum,
		       h.flag_setup, h.flag_data, (long long)h.ts_sec, h.ts_usec, h.status, h.length,
		       h.len_cap, h.s.setup[0], h.s.setup[1], h.s.setup[2], h.s.setup[3], h.s.setup[4],
		       h.s.setup[5], h.s.setup[6], h.s.setup[7]);
		if (getx)
			printf(" interval=%d start_frame=%d xfer_flags=%#x ndesc=%u", h.interval,
			       h.start_frame, h.xfer_flags, h.ndesc);
		else
			/* GET fills only 48 bytes: the rest must be our 0xa5 fill */
			printf(" tail=%02x%02x%02x%02x", ((unsigned char *)&h)[48],
			       ((unsigned char *)&h)[52], ((unsigned char *)&h)[56],
			       ((unsigned char *)&h)[60]);
		/* the captured data, so that descriptors can be compared byte for byte */
		printf(" data=");
		unsigned int nd = h.len_cap < sizeof(data) ? h.len_cap : sizeof(data);
		for (unsigned int i = 0; i < nd; i++)
			printf("%02x", data[i]);
		if (nd == 0)
			printf("-");
		printf("\n");
	}
	struct mon_bin_stats st = { 0, 0 };
	ioctl(fd, MON_IOCG_STATS, &st);
	printf("END events=%ld stats_queued=%u stats_dropped=%u\n", n, st.queued, st.dropped);
	return 0;
}
