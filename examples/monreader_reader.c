/*
 * monreader_reader: a small z/VM monitor data reader for /dev/monreader (or
 * monfs's dev/monreader), written from the rules in the kernel's monreader
 * documentation (Documentation/arch/s390/monreader.rst; docs/interfaces.md
 * has monfs's notes):
 *
 *  - A data set is one or more 12-byte monitor control elements (MCE), each
 *    followed by its record set; a successful read() of 0 bytes ends the set.
 *  - Data is valid only once the whole set, including that 0-byte read, was
 *    read: buffer the set, then process it.
 *  - EIO (reply failed, path severed) and EFAULT: discard what was read since
 *    the last 0-byte read. EOVERFLOW: the message limit was reached; the data
 *    is valid but later records may be missing. EAGAIN: non-blocking and
 *    nothing there yet (use poll). EBUSY at open: someone else has it open.
 *
 * Build: cc -O2 -Wall -o monreader_reader examples/monreader_reader.c
 * Usage: monreader_reader [-1] [-n SETS] [DEVICE]   (default /dev/monreader)
 *        -1 reads one byte at a time, as some readers do;
 *        otherwise 64 KiB per read.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct buf {
	unsigned char *p;
	size_t len, cap;
};

static void append(struct buf *b, const void *d, size_t n)
{
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;
		while (b->len + n > cap)
			cap *= 2;
		unsigned char *p = realloc(b->p, cap);
		if (!p) {
			perror("realloc");
			exit(1);
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, d, n);
	b->len += n;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64(const unsigned char *p)
{
	return (uint64_t)be32(p) << 32 | be32(p + 4);
}

/* TOD clock (bit 51 = 1 microsecond, epoch 1900) to a UTC string. */
static void tod_str(uint64_t tod, char *out, size_t n)
{
	int64_t us = (int64_t)(tod >> 12) - 2208988800000000LL;
	time_t s = us / 1000000;
	struct tm tm;
	gmtime_r(&s, &tm);
	size_t k = strftime(out, n, "%Y-%m-%d %H:%M:%S", &tm);
	snprintf(out + k, n - k, ".%06lld", (long long)(us % 1000000));
}

/* Walk a complete data set: MCEs and the records of each set. */
static void process_set(long no, const unsigned char *b, size_t len)
{
	size_t pos = 0;
	printf("data set %ld: %zu bytes\n", no, len);
	while (pos + 12 <= len) {
		const unsigned char *m = b + pos;
		uint32_t start = be32(m + 4), end = be32(m + 8);
		pos += 12;
		printf("  MCE type %02x (%s) domains %02x%02x records %08x-%08x\n", m[0],
		       m[0] & 0x80 ? "sample" : m[0] & 0x40 ? "event" : "?", m[1], m[2], start, end);
		if (end <= start || end - start + 1 > len - pos) {
			printf("  bad MCE\n");
			return;
		}
		size_t set = end - start + 1, off = 0;
		while (off + 20 <= set) {
			const unsigned char *r = b + pos + off;
			unsigned rl = r[0] << 8 | r[1], dom = r[4], rec = r[6] << 8 | r[7];
			if (rl < 20 || rl > set - off) {
				printf("    bad record length %u\n", rl);
				break;
			}
			if (dom == 1 && rec == 13) {
				/* End of frame: nothing more in this 4 KiB frame. */
				off += 4096 - (start + off) % 4096;
				continue;
			}
			char when[48];
			tod_str(be64(r + 8), when, sizeof when);
			printf("    domain %2u record %3u  %s  %u bytes\n", dom, rec, when, rl);
			off += rl;
		}
		pos += set;
	}
}

int main(int argc, char **argv)
{
	const char *dev = "/dev/monreader";
	size_t bs = 65536;
	long max_sets = -1;
	int c;
	while ((c = getopt(argc, argv, "1n:")) != -1) {
		if (c == '1')
			bs = 1;
		else if (c == 'n')
			max_sets = strtol(optarg, NULL, 0);
		else
			return 2;
	}
	if (optind < argc)
		dev = argv[optind];
	int fd = open(dev, O_RDONLY);
	if (fd < 0) {
		if (errno == EBUSY)
			fprintf(stderr, "%s is already open (EBUSY)\n", dev);
		else
			fprintf(stderr, "open %s: %s\n", dev, strerror(errno));
		return 1;
	}
	unsigned char *chunk = malloc(bs);
	struct buf set = { 0 };
	long sets = 0;
	int eio_in_a_row = 0;
	while (max_sets < 0 || sets < max_sets) {
		ssize_t n = read(fd, chunk, bs);
		if (n > 0) {
			append(&set, chunk, n);
			eio_in_a_row = 0;
		} else if (n == 0) {
			process_set(++sets, set.p, set.len);
			set.len = 0;
			eio_in_a_row = 0;
		} else if (errno == EIO || errno == EFAULT) {
			fprintf(stderr, "%s: discarding %zu bytes of this data set\n",
				errno == EIO ? "EIO" : "EFAULT", set.len);
			/* A second EIO with nothing read in between: severed. */
			int nothing = set.len == 0;
			set.len = 0;
			if (nothing && eio_in_a_row) {
				fprintf(stderr, "connection to *MONITOR severed\n");
				return 1;
			}
			eio_in_a_row = 1;
		} else if (errno == EOVERFLOW) {
			fprintf(stderr, "EOVERFLOW: message limit reached, data may be missing\n");
		} else if (errno == EAGAIN || errno == EINTR) {
			continue;
		} else {
			perror("read");
			return 1;
		}
		fflush(stdout);
	}
	close(fd);
	return 0;
}
