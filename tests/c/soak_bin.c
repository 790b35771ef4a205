/*
 * soak_bin: a checking mmap reader of dev/usbmonN for the soak test
 * (tests/soak.rs). Maps the ring and consumes it with MON_IOCX_MFETCH in
 * batches of varying size (sometimes flushing with MON_IOCH_MFLUSH instead),
 * and checks every header it is handed:
 *
 *   - the offset is 64-byte aligned and the slot (64 + len_cap, aligned) lies
 *     inside the ring: a mapped ring never wraps an event;
 *   - '@' fillers pad exactly to the end of the ring;
 *   - type is S, C or E; xfer_type <= 3; busnum is one of BUSES; devnum
 *     0..127; ndesc <= 128 and only on isochronous events; len_cap holds the
 *     ISO descriptors plus at most `length` data bytes (isochronous IN
 *     completions: up to their last packet) and at most a fifth of the ring,
 *     and only descriptors when flag_data is set; E events capture nothing; flag_setup is 0 (only
 *     on control), '-' or 'Z'; submits have status -115; ts_usec < 10^6;
 *   - per bus, timestamps never go backwards;
 *   - a bulk OUT payload that starts 00 01 02 03 (the flood simulator's)
 *     continues the same counting pattern for every captured byte.
 *
 *   soak_bin DEVICE BUSES [MAX_BATCH] [RING_SIZE] [MAX_DRAIN_MS]
 *
 * BUSES is a comma list of bus numbers that may appear. The device is opened
 * O_NONBLOCK (ioctls only see O_NONBLOCK from open) and waited on with poll.
 * It prints "READY ring=N" once the ring is sized and mapped. SIGUSR1 starts
 * the drain phase: fetch until the ring stays empty for 300 ms,
 * or for MAX_DRAIN_MS (default 5000; then drain_timeout=1), then print one
 * summary line and exit:
 *
 *   END seen=N S=.. C=.. E=.. fillers=.. dropped=.. errors=.. fetches=.. ring=.. drain_timeout=0|1
 *
 * With SOAK_BIN_SEEN=N in the environment it prints "SEEN n fillers f" once it
 * has fetched n >= N events and at least one '@' filler (so a test knows
 * that the ring has wrapped with a filler).
 * With SOAK_BIN_STALL_MS=N in the environment it stops fetching for N ms
 * once a second (the ring overflows). `dropped` is the sum of MON_IOCG_STATS.dropped over the run (the kernel
 * resets it on every read). Exit status 0 when no check failed, 3 otherwise;
 * the first errors are described on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../examples/usbmon.h"

static volatile sig_atomic_t draining;

static void on_usr1(int sig)
{
	(void)sig;
	draining = 1;
}

static long errors;

#define FAIL(...)                                                     \
	do {                                                          \
		if (errors++ < 20) {                                  \
			fprintf(stderr, "soak_bin: " __VA_ARGS__);    \
			fputc('\n', stderr);                          \
		}                                                     \
	} while (0)

static unsigned long long dropped_total;

static void stats(int fd)
{
	struct mon_bin_stats st;
	if (ioctl(fd, MON_IOCG_STATS, &st) < 0) {
		if (errno != EINTR)
			FAIL("MON_IOCG_STATS: %s", strerror(errno));
		return;
	}
	dropped_total += st.dropped;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s DEVICE BUSES [MAX_BATCH] [RING_SIZE] [MAX_DRAIN_MS]\n",
			argv[0]);
		return 2;
	}
	unsigned char bus_ok[65536] = { 0 };
	for (char *s = argv[2], *end; *s; s = end) {
		long b = strtol(s, &end, 10);
		if (end == s || b < 0 || b > 65535) {
			fprintf(stderr, "bad bus list %s\n", argv[2]);
			return 2;
		}
		bus_ok[b] = 1;
		if (*end == ',')
			end++;
	}
	unsigned int max_batch = argc > 3 ? (unsigned int)atoi(argv[3]) : 256;
	long want_ring = argc > 4 ? atol(argv[4]) : 0;
	double max_drain = (argc > 5 ? atol(argv[5]) : 5000) / 1000.0;
	/* SOAK_BIN_STALL_MS: stop fetching for that long once a second, so the
	 * ring overflows and drops are counted. */
	const char *stall_env = getenv("SOAK_BIN_STALL_MS");
	long stall_ms = stall_env ? atol(stall_env) : 0;
	double last_stall = now();
	const char *seen_env = getenv("SOAK_BIN_SEEN");
	long report_seen = seen_env ? atol(seen_env) : 0;
	if (max_batch == 0)
		max_batch = 1;

	struct sigaction sa = { .sa_handler = on_usr1 };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGUSR1, &sa, NULL); /* no SA_RESTART: a parked ioctl ends with EINTR */

	int fd = open(argv[1], O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	if (want_ring > 0 && ioctl(fd, MON_IOCT_RING_SIZE, want_ring) < 0) {
		perror("MON_IOCT_RING_SIZE");
		return 1;
	}
	int ring_size = ioctl(fd, MON_IOCQ_RING_SIZE);
	if (ring_size <= 0) {
		perror("MON_IOCQ_RING_SIZE");
		return 1;
	}
	const unsigned char *ring = mmap(NULL, ring_size, PROT_READ, MAP_SHARED, fd, 0);
	if (ring == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	printf("READY ring=%d\n", ring_size);
	fflush(stdout);
	uint32_t *vec = calloc(max_batch, sizeof(*vec));
	/* Batch sizes cycle through these (clipped to MAX_BATCH). */
	static const unsigned int batches[] = { 1, 7, 32, 128, 512, 3, 64, 256 };
	unsigned int nb = sizeof batches / sizeof batches[0];

	static long long last_ts[65536];
	memset(last_ts, 0xff, sizeof last_ts); /* -1: none yet */
	long seen = 0, nS = 0, nC = 0, nE = 0, fillers = 0, fetches = 0;
	unsigned int pending_flush = 0;
	double last_stats = now(), idle_since = -1, drain_start = -1;
	unsigned long iter = 0;
	int drain_timeout = 0;

	for (;;) {
		if (draining && drain_start < 0)
			drain_start = now();
		if (draining && now() - drain_start > max_drain) {
			drain_timeout = 1;
			break;
		}
		unsigned int batch = batches[iter % nb];
		if (batch > max_batch)
			batch = max_batch;
		iter++;
		if (pending_flush && iter % 17 == 0) {
			/* Flush on its own now and then instead of with the fetch. */
			int r = ioctl(fd, MON_IOCH_MFLUSH, pending_flush);
			if (r < 0 && errno != EINTR)
				FAIL("MON_IOCH_MFLUSH(%u): %s", pending_flush, strerror(errno));
			if (r >= 0)
				pending_flush = 0;
		}
		struct mon_bin_mfetch f = { .offvec = vec, .nfetch = batch, .nflush = pending_flush };
		if (ioctl(fd, MON_IOCX_MFETCH, &f) < 0) {
			int e = errno;
			if (e == EAGAIN) {
				/* The ring is empty; what we asked to flush was flushed. */
				pending_flush = 0;
				if (draining) {
					if (idle_since < 0)
						idle_since = now();
					if (now() - idle_since > 0.3)
						break;
				}
				struct pollfd p = { .fd = fd, .events = POLLIN };
				poll(&p, 1, draining ? 50 : 200);
				if (now() - last_stats > 1.0) {
					stats(fd);
					last_stats = now();
				}
				continue;
			}
			if (e == EINTR)
				continue;
			FAIL("MON_IOCX_MFETCH: %s", strerror(e));
			break;
		}
		idle_since = -1;
		fetches++;
		unsigned int n = f.nfetch;
		if (n > batch) {
			FAIL("MFETCH returned %u offsets for a batch of %u", n, batch);
			n = batch;
		}
		for (unsigned int i = 0; i < n; i++) {
			uint32_t off = vec[i];
			if (off % 64 != 0 || (long)off + 64 > ring_size) {
				FAIL("offset %u: misaligned or outside the %d-byte ring", off, ring_size);
				continue;
			}
			const struct usbmon_packet *h = (const void *)(ring + off);
			unsigned long slot = (64 + (unsigned long)h->len_cap + 63) & ~63ul;
			if (h->type == '@') {
				fillers++;
				if (off + 64 + h->len_cap != (unsigned long)ring_size)
					FAIL("filler at %u with len_cap %u does not end the ring (%d)", off,
					     h->len_cap, ring_size);
				continue;
			}
			seen++;
			if (off + slot > (unsigned long)ring_size)
				FAIL("event at %u, len_cap %u crosses the end of the ring (%d)", off,
				     h->len_cap, ring_size);
			int bad = 0;
			switch (h->type) {
			case 'S': nS++; break;
			case 'C': nC++; break;
			case 'E': nE++; break;
			default:
				FAIL("offset %u: type 0x%02x", off, h->type);
				bad = 1;
			}
			if (bad)
				continue;
			if (h->xfer_type > 3)
				FAIL("offset %u: xfer_type %u", off, h->xfer_type);
			if (!bus_ok[h->busnum])
				FAIL("offset %u: busnum %u not expected here", off, h->busnum);
			/* 0 is the default address of a device being enumerated. */
			if (h->devnum > 127)
				FAIL("offset %u: devnum %u", off, h->devnum);
			if (h->ndesc > 128 || (h->ndesc && h->xfer_type != 0))
				FAIL("offset %u: ndesc %u on xfer_type %u", off, h->ndesc, h->xfer_type);
			unsigned long dlen = (unsigned long)h->ndesc * 16;
			/*
			 * An isochronous IN completion captures up to the end of its
			 * last non-empty packet (mon_bin_collate_isodesc), which may
			 * exceed actual_length; every capture is at most a fifth of
			 * the ring.
			 */
			int iso_in_c = h->xfer_type == 0 && h->type == 'C' && (h->epnum & 0x80);
			if (h->len_cap < dlen || (!iso_in_c && h->len_cap - dlen > h->length) ||
			    h->len_cap - dlen > (unsigned long)ring_size / 5)
				FAIL("offset %u: len_cap %u with ndesc %u and length %u", off, h->len_cap,
				     h->ndesc, h->length);
			if (h->flag_data != 0 && h->len_cap != dlen)
				FAIL("offset %u: flag_data '%c' but len_cap %u", off, h->flag_data, h->len_cap);
			if (h->type == 'E' && h->len_cap != 0)
				FAIL("offset %u: E event with len_cap %u", off, h->len_cap);
			if (h->flag_setup != '-' && h->flag_setup != 'Z' && h->flag_setup != 0)
				FAIL("offset %u: flag_setup 0x%02x", off, (unsigned char)h->flag_setup);
			if (h->flag_setup == 0 && h->xfer_type != 2)
				FAIL("offset %u: setup packet on xfer_type %u", off, h->xfer_type);
			if (h->type == 'S' && h->status != -115)
				FAIL("offset %u: submit status %d", off, h->status);
			if (h->ts_usec < 0 || h->ts_usec >= 1000000 || h->ts_sec <= 0)
				FAIL("offset %u: timestamp %lld.%d", off, (long long)h->ts_sec, h->ts_usec);
			long long ts = (long long)h->ts_sec * 1000000 + h->ts_usec;
			if (ts < last_ts[h->busnum])
				FAIL("bus %u: timestamp went back from %lld to %lld (event %ld, %c)", h->busnum,
				     last_ts[h->busnum], ts, seen, h->type);
			last_ts[h->busnum] = ts;
			/* The flood simulator's OUT payload counts 00 01 02 ... */
			const unsigned char *d = (const unsigned char *)h + 64 + dlen;
			unsigned long ncap = h->len_cap - dlen;
			if (h->xfer_type == 3 && !(h->epnum & 0x80) && h->type == 'S' && ncap >= 4 &&
			    h->flag_data == 0 && d[0] == 0 && d[1] == 1 && d[2] == 2 && d[3] == 3) {
				for (unsigned long k = 4; k < ncap; k++)
					if (d[k] != (unsigned char)k) {
						FAIL("offset %u: flood payload byte %lu is %02x", off, k, d[k]);
						break;
					}
			}
		}
		pending_flush = n;
		if (report_seen > 0 && seen >= report_seen && fillers > 0) {
			printf("SEEN %ld fillers %ld\n", seen, fillers);
			fflush(stdout);
			report_seen = 0;
		}
		if (stall_ms > 0 && !draining && now() - last_stall > 1.0) {
			usleep(stall_ms * 1000);
			last_stall = now();
		}
		if (now() - last_stats > 1.0) {
			stats(fd);
			last_stats = now();
		}
	}
	stats(fd);
	printf("END seen=%ld S=%ld C=%ld E=%ld fillers=%ld dropped=%llu errors=%ld fetches=%ld ring=%d "
	       "drain_timeout=%d\n",
	       seen, nS, nC, nE, fillers, dropped_total, errors, fetches, ring_size, drain_timeout);
	fflush(stdout);
	return errors ? 3 : 0;
}
