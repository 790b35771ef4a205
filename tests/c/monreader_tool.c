/*
 * monreader_tool: a test reader for dev/monreader that follows the rules of
 * the driver's documentation (buffer a whole data set, a 0-byte read ends it,
 * discard on EIO/EFAULT, EOVERFLOW = data valid but later data may be missing)
 * and reports what it saw, line by line, for the integration tests.
 *
 *   monreader_tool [-b SIZE] [-n SETS] [-N] [-i MS] [-w SECS] [-t] [-s] DEVICE
 *
 *   -b SIZE  bytes per read() (default 65536; 1 reads byte by byte)
 *   -n SETS  stop after SETS complete data sets
 *   -N       open O_NONBLOCK and wait with poll()
 *   -i MS    with -N: give up after MS ms without data (exit 0)
 *   -w SECS  stop after SECS seconds (benchmarks)
 *   -t       trace every read: "R <n> <hex>", "E <errno name>", "P <revents>"
 *   -s       print each complete set: "S <n> <len> <hex>"
 *   -r       raw: only count the bytes read (any file; for baselines)
 *
 * Always prints "D <n> <bytes>" for a discarded set, "O" for EOVERFLOW, and a
 * final line "END sets=.. records=.. bytes=.. discarded=.. overflows=..
 * eagain=.. reads=.. secs=.." (bytes: in complete sets). Exit status: 0, 1 on
 * usage/open errors (the errno name on stderr), 3 when the path is severed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *ename(int e)
{
	switch (e) {
	case EIO: return "EIO";
	case EAGAIN: return "EAGAIN";
	case EOVERFLOW: return "EOVERFLOW";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case EINTR: return "EINTR";
	case ENOENT: return "ENOENT";
	default: return "E?";
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Count the records of a data set (end-of-frame records skipped); -1 if the
 * set does not parse. */
static long count_records(const unsigned char *b, size_t len)
{
	size_t pos = 0;
	long n = 0;
	while (pos < len) {
		if (len - pos < 12)
			return -1;
		uint32_t start = be32(b + pos + 4), end = be32(b + pos + 8);
		pos += 12;
		if (end <= start || end - start + 1 > len - pos)
			return -1;
		size_t set = end - start + 1, off = 0;
		while (off < set) {
			if (set - off < 20)
				return -1;
			unsigned rl = b[pos + off] << 8 | b[pos + off + 1];
			unsigned dom = b[pos + off + 4];
			unsigned rec = b[pos + off + 6] << 8 | b[pos + off + 7];
			if (rl < 20 || rl > set - off)
				return -1;
			if (dom == 1 && rec == 13) {
				uint32_t addr = start + off;
				off += 4096 - addr % 4096;
			} else {
				n++;
				off += rl;
			}
		}
		pos += set;
	}
	return n;
}

static void hex(const unsigned char *b, size_t n)
{
	static const char d[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		putchar(d[b[i] >> 4]);
		putchar(d[b[i] & 15]);
	}
}

int main(int argc, char **argv)
{
	size_t bs = 65536;
	long max_sets = -1, idle_ms = -1;
	double secs = -1;
	int nonblock = 0, trace = 0, print_sets = 0, raw = 0, c;
	while ((c = getopt(argc, argv, "b:n:Ni:w:tsr")) != -1) {
		switch (c) {
		case 'b': bs = strtoul(optarg, NULL, 0); break;
		case 'n': max_sets = strtol(optarg, NULL, 0); break;
		case 'N': nonblock = 1; break;
		case 'i': idle_ms = strtol(optarg, NULL, 0); break;
		case 'w': secs = strtod(optarg, NULL); break;
		case 't': trace = 1; break;
		case 's': print_sets = 1; break;
		case 'r': raw = 1; break;
		default: return 1;
		}
	}
	if (optind >= argc || bs == 0)
		return 1;
	int fd = open(argv[optind], O_RDONLY | (nonblock ? O_NONBLOCK : 0));
	if (fd < 0) {
		fprintf(stderr, "%s\n", ename(errno));
		return 1;
	}
	size_t cap = 1 << 20, len = 0;
	unsigned char *set = malloc(cap), *buf = malloc(bs);
	long sets = 0, records = 0, discarded = 0, overflows = 0, eagain = 0, reads = 0;
	long long bytes = 0;
	int last_eio = 0, rc = 0;
	double t0 = now();
	while (max_sets < 0 || sets < max_sets) {
		if (secs >= 0 && now() - t0 >= secs)
			break;
		ssize_t n = read(fd, buf, bs);
		reads++;
		if (n > 0 && raw) {
			bytes += n;
			continue;
		}
		if (n > 0) {
			if (trace) {
				printf("R %zd ", n);
				hex(buf, n);
				putchar('\n');
			}
			while (len + n > cap)
				set = realloc(set, cap *= 2);
			memcpy(set + len, buf, n);
			len += n;
			last_eio = 0;
			continue;
		}
		if (n == 0) {
			/* End of the data set: it is valid now. */
			if (trace)
				printf("R 0\n");
			long r = count_records(set, len);
			if (print_sets) {
				printf("S %ld %zu ", sets + 1, len);
				hex(set, len);
				putchar('\n');
			}
			if (r < 0)
				printf("BAD set %ld\n", sets + 1);
			else
				records += r;
			bytes += len;
			sets++;
			len = 0;
			last_eio = 0;
			continue;
		}
		int e = errno;
		if (trace && e != EAGAIN)
			printf("E %s\n", ename(e));
		if (e == EIO || e == EFAULT) {
			/* Everything since the last 0-byte read is invalid. */
			printf("D %ld %zu\n", sets + discarded + 1, len);
			discarded++;
			int severed = last_eio && len == 0;
			len = 0;
			if (severed) {
				printf("SEVERED\n");
				rc = 3;
				break;
			}
			last_eio = 1;
		} else if (e == EOVERFLOW) {
			printf("O\n");
			overflows++;
		} else if (e == EAGAIN) {
			eagain++;
			if (trace)
				printf("E EAGAIN\n");
			struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDNORM };
			int timeout = idle_ms;
			if (secs >= 0) {
				int left = (int)((secs - (now() - t0)) * 1000) + 1;
				if (timeout < 0 || left < timeout)
					timeout = left;
			}
			int pr = poll(&p, 1, timeout);
			if (trace)
				printf("P %#x\n", pr > 0 ? p.revents : 0);
			if (pr == 0 && idle_ms >= 0 && (secs < 0 || now() - t0 < secs))
				break;
			if (pr > 0 && (p.revents & POLLERR)) {
				printf("POLLERR\n");
				rc = 3;
				break;
			}
		} else {
			fprintf(stderr, "read: %s\n", strerror(e));
			rc = 1;
			break;
		}
		fflush(stdout);
	}
	printf("END sets=%ld records=%ld bytes=%lld discarded=%ld overflows=%ld eagain=%ld reads=%ld secs=%.3f\n",
	       sets, records, bytes, discarded, overflows, eagain, reads, now() - t0);
	close(fd);
	return rc;
}
