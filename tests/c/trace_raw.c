/*
 * trace_raw: read every per_cpu/cpuN/trace_pipe_raw under a tracing
 * directory with O_NONBLOCK until EAGAIN, and check each page as
 * events/header_page and events/header_event describe it:
 *   u64 timestamp; local_t commit (8 bytes, flags in bits 31 and 30);
 *   then events: u32 { type_len:5, time_delta:27 }, with
 *   type_len 1..28 = data of type_len*4 bytes, 0 = a length word
 *   (data + 4) follows, 29 = padding, 30 = time extend (array[0] holds the
 *   delta's upper bits), 31 = absolute time stamp.
 * Checks: whole 4096-byte reads, commit within the page, events inside
 * commit, zeros after it, non-decreasing time on each CPU.
 * Prints one line per event: "cpu ts common_type common_pid u32@8", then
 * "pages=N events=N extends=N missed=N".
 *
 *   trace_raw TRACING_DIR NCPUS [FILE]
 *
 * FILE is the per-CPU file read (default trace_pipe_raw; snapshot_raw
 * reads the snapshot buffer's pages).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PAGE 4096
#define HDR 16

static void fail(const char *what, int cpu, long page)
{
	fprintf(stderr, "trace_raw: cpu%d page %ld: %s\n", cpu, page, what);
	exit(1);
}

int main(int argc, char **argv)
{
	if (argc != 3 && argc != 4) {
		fprintf(stderr, "usage: trace_raw TRACING_DIR NCPUS [FILE]\n");
		return 2;
	}
	const char *file = argc == 4 ? argv[3] : "trace_pipe_raw";
	int ncpus = atoi(argv[2]);
	long pages = 0, events = 0, extends = 0, missed = 0;
	for (int cpu = 0; cpu < ncpus; cpu++) {
		char path[4096];
		snprintf(path, sizeof(path), "%s/per_cpu/cpu%d/%s", argv[1], cpu, file);
		int fd = open(path, O_RDONLY | O_NONBLOCK);
		if (fd < 0) {
			perror(path);
			return 1;
		}
		uint64_t last = 0;
		for (;;) {
			unsigned char p[PAGE];
			ssize_t n = read(fd, p, PAGE);
			if (n < 0 && errno == EAGAIN)
				break;
			if (n != PAGE)
				fail("a read did not return a whole page", cpu, pages);
			pages++;
			uint64_t ts, commit;
			memcpy(&ts, p, 8);
			memcpy(&commit, p + 8, 8);
			uint64_t size = commit & ((1u << 27) - 1);
			if (commit & (1u << 31))
				missed++;
			if (size == 0 || size > PAGE - HDR)
				fail("commit outside the page", cpu, pages);
			if (ts < last)
				fail("page time before the previous event", cpu, pages);
			size_t end = HDR + size;
			if (commit & (1u << 30))
				end += 8;
			for (size_t i = end; i < PAGE; i++)
				if (p[i])
					fail("bytes after the data", cpu, pages);
			size_t off = HDR;
			while (off < HDR + size) {
				uint32_t w;
				memcpy(&w, p + off, 4);
				unsigned type_len = w & 31, delta = w >> 5;
				uint32_t arr;
				memcpy(&arr, p + off + 4, 4);
				size_t len, data;
				if (type_len == 29) {
					off += 4 + arr;
					continue;
				} else if (type_len == 30) {
					ts += ((uint64_t)arr << 27) + delta;
					extends++;
					off += 8;
					continue;
				} else if (type_len == 31) {
					fail("absolute time stamps are not used in delta mode", cpu, pages);
				} else if (type_len == 0) {
					if (arr < 4)
						fail("bad length word", cpu, pages);
					len = arr - 4;
					data = off + 8;
				} else {
					len = type_len * 4;
					data = off + 4;
				}
				ts += delta;
				if (data + len > HDR + size)
					fail("event past commit", cpu, pages);
				uint16_t type;
				int32_t pid;
				uint32_t f0 = 0;
				memcpy(&type, p + data, 2);
				memcpy(&pid, p + data + 4, 4);
				if (len >= 12)
					memcpy(&f0, p + data + 8, 4);
				printf("%d %llu %u %d %u\n", cpu, (unsigned long long)ts, type, pid, f0);
				events++;
				off = data + len;
			}
			last = ts;
		}
		close(fd);
	}
	printf("pages=%ld events=%ld extends=%ld missed=%ld\n", pages, events, extends, missed);
	return 0;
}
