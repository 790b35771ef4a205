/*
 * usbmon_mmap: read /dev/usbmonN through the mmap ring, the way
 * Documentation/usb/usbmon.rst's pseudo-code does: one MON_IOCX_MFETCH per
 * batch of events, skipping '@' fillers, flushing what was processed on the
 * next fetch. Prints each event in the `Nu` text format.
 *
 *   cc -O2 -o usbmon_mmap examples/usbmon_mmap.c
 *   ./usbmon_mmap MOUNT/dev/usbmon1 [COUNT] [BATCH] [RING_SIZE]
 *
 * COUNT events (default: until interrupted), BATCH offsets per ioctl
 * (default 128), RING_SIZE bytes (default: the device's).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "usbmon.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DEVICE [COUNT] [BATCH] [RING_SIZE]\n", argv[0]);
		return 2;
	}
	long count = argc > 2 ? atol(argv[2]) : -1;
	unsigned int batch = argc > 3 ? (unsigned int)atoi(argv[3]) : 128;
	long want_ring = argc > 4 ? atol(argv[4]) : 0;
	int fd = open(argv[1], O_RDONLY);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	if (want_ring > 0 && ioctl(fd, MON_IOCT_RING_SIZE, want_ring) < 0) {
		perror("MON_IOCT_RING_SIZE");
		return 1;
	}
	int ring_size = ioctl(fd, MON_IOCQ_RING_SIZE);
	if (ring_size < 0) {
		perror("MON_IOCQ_RING_SIZE");
		return 1;
	}
	unsigned char *ring = mmap(NULL, ring_size, PROT_READ, MAP_SHARED, fd, 0);
	if (ring == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	uint32_t *vec = calloc(batch, sizeof(*vec));
	struct mon_bin_mfetch fetch = { .offvec = vec, .nfetch = batch, .nflush = 0 };
	long seen = 0, fillers = 0;
	setvbuf(stdout, NULL, _IOFBF, 1 << 16);
	while (count < 0 || seen < count) {
		fetch.nfetch = batch;
		if (ioctl(fd, MON_IOCX_MFETCH, &fetch) < 0) {
			if (errno == EINTR)
				continue;
			perror("MON_IOCX_MFETCH");
			return 1;
		}
		unsigned int n = fetch.nfetch;
		for (unsigned int i = 0; i < n; i++) {
			const struct usbmon_packet *h = (const void *)(ring + vec[i]);
			if (h->type == '@') {
				fillers++;
				continue;
			}
			if (count < 0 || seen < count)
				usbmon_print_u(stdout, h, (const unsigned char *)h + 64);
			seen++;
		}
		fetch.nflush = n;
	}
	fflush(stdout);
	struct mon_bin_stats st;
	if (ioctl(fd, MON_IOCG_STATS, &st) == 0)
		fprintf(stderr, "events %ld fillers %ld queued %u dropped %u\n", seen, fillers, st.queued,
			st.dropped);
	return 0;
}
