/*
 * monbench: measurement loops for scripts/bench. Each mode runs for a time
 * and prints "<rate> <unit>" (or latency percentiles) on stdout.
 *
 *   monbench read FILE SECONDS          read(4096) in a loop: reads/s, lines/s
 *   monbench ioctl FILE SECONDS CMD     the same _IO ioctl in a loop: calls/s
 *   monbench write FILE SECONDS         16-byte writes: writes/s
 *   monbench mmap DEV SECONDS BATCH     usbmon mmap ring, MFETCH per batch: events/s
 *   monbench getx DEV SECONDS           usbmon MON_IOCX_GETX per event: events/s
 *   monbench ctrlc FILE N               N blocked readers killed by SIGINT:
 *                                       p50/p99/max ms from kill() to exit
 *   monbench pipe SECONDS               baseline: 80-byte lines through a pipe
 *   monbench pingpong SECONDS CPU_A CPU_B
 *                                       baseline: one byte back and forth
 *                                       between two processes pinned to the
 *                                       two CPUs (two context switches and a
 *                                       wake-up each way, as a FUSE round
 *                                       trip has): round trips/s
 *   monbench firstevent ENABLE PIPE N   N times: write 1 to ENABLE, time until
 *                                       PIPE (trace_pipe) gives a line; write 0
 *   monbench rawpages TRACING NCPUS SECONDS
 *                                       poll every per_cpu/cpuN/trace_pipe_raw
 *                                       and read whole pages, as trace-cmd's
 *                                       recorders do: pages/s, events/s
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../examples/usbmon.h"

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int open_or_die(const char *p, int flags)
{
	int fd = open(p, flags);
	if (fd < 0) {
		perror(p);
		exit(1);
	}
	return fd;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: see the comment at the top of monbench.c\n");
		return 2;
	}
	const char *mode = argv[1];
	static char buf[1 << 16];
	if (!strcmp(mode, "rawpages")) {
		int ncpus = atoi(argv[3]);
		double secs = atof(argv[4]), t0 = now(), t;
		struct pollfd pfd[256];
		if (ncpus < 1 || ncpus > 256)
			return 2;
		for (int c = 0; c < ncpus; c++) {
			char p[4096];
			snprintf(p, sizeof(p), "%s/per_cpu/cpu%d/trace_pipe_raw", argv[2], c);
			pfd[c].fd = open_or_die(p, O_RDONLY | O_NONBLOCK);
			pfd[c].events = POLLIN;
		}
		long pages = 0, events = 0;
		while ((t = now()) - t0 < secs) {
			if (poll(pfd, ncpus, 100) < 0) {
				perror("poll");
				return 1;
			}
			for (int c = 0; c < ncpus; c++) {
				ssize_t n = read(pfd[c].fd, buf, 4096);
				if (n < 0 && errno == EAGAIN)
					continue;
				if (n != 4096) {
					perror("read");
					return 1;
				}
				pages++;
				uint64_t commit;
				memcpy(&commit, buf + 8, 8);
				size_t end = 16 + (commit & ((1u << 27) - 1)), off = 16;
				while (off < end) {
					uint32_t w, len;
					memcpy(&w, buf + off, 4);
					memcpy(&len, buf + off + 4, 4);
					switch (w & 31) {
					case 29: off += 4 + len; break;
					case 30: case 31: off += 8; break;
					case 0: off += 4 + len; events++; break;
					default: off += 4 + (w & 31) * 4; events++;
					}
				}
			}
		}
		printf("%.0f pages/s %.0f events/s\n", pages / (t - t0), events / (t - t0));
	} else if (!strcmp(mode, "read")) {
		int fd = open_or_die(argv[2], O_RDONLY);
		double secs = atof(argv[3]), t0 = now(), t;
		long reads = 0, lines = 0;
		while ((t = now()) - t0 < secs) {
			for (int i = 0; i < 64; i++) {
				ssize_t n = read(fd, buf, 4096);
				if (n <= 0) {
					perror("read");
					return 1;
				}
				reads++;
				for (ssize_t k = 0; k < n; k++)
					lines += buf[k] == '\n';
			}
		}
		printf("%.0f reads/s %.0f lines/s\n", reads / (t - t0), lines / (t - t0));
	} else if (!strcmp(mode, "ioctl")) {
		int fd = open_or_die(argv[2], O_RDONLY);
		double secs = atof(argv[3]), t0 = now(), t;
		unsigned long cmd = strtoul(argv[4], NULL, 0);
		long calls = 0;
		while ((t = now()) - t0 < secs) {
			for (int i = 0; i < 64; i++, calls++)
				if (ioctl(fd, cmd, 0) < 0) {
					perror("ioctl");
					return 1;
				}
		}
		printf("%.0f calls/s\n", calls / (t - t0));
	} else if (!strcmp(mode, "write")) {
		int fd = open_or_die(argv[2], O_WRONLY);
		double secs = atof(argv[3]), t0 = now(), t;
		long calls = 0;
		while ((t = now()) - t0 < secs) {
			for (int i = 0; i < 64; i++, calls++)
				if (write(fd, "0123456789abcdef", 16) < 0) {
					perror("write");
					return 1;
				}
		}
		printf("%.0f writes/s\n", calls / (t - t0));
	} else if (!strcmp(mode, "mmap") || !strcmp(mode, "getx")) {
		int fd = open_or_die(argv[2], O_RDONLY);
		double secs = atof(argv[3]);
		unsigned batch = argc > 4 ? atoi(argv[4]) : 128;
		if (ioctl(fd, MON_IOCT_RING_SIZE, 4 << 20) < 0) {
			perror("MON_IOCT_RING_SIZE");
			return 1;
		}
		long ring = ioctl(fd, MON_IOCQ_RING_SIZE);
		long events = 0;
		struct mon_bin_stats st;
		ioctl(fd, MON_IOCG_STATS, &st); /* reset the drop counter */
		double t0 = now(), t;
		if (!strcmp(mode, "mmap")) {
			unsigned char *m = mmap(NULL, ring, PROT_READ, MAP_SHARED, fd, 0);
			if (m == MAP_FAILED) {
				perror("mmap");
				return 1;
			}
			uint32_t *vec = calloc(batch, 4);
			struct mon_bin_mfetch f = { vec, batch, 0 };
			volatile unsigned sink = 0;
			while ((t = now()) - t0 < secs) {
				f.nfetch = batch;
				if (ioctl(fd, MON_IOCX_MFETCH, &f) < 0) {
					perror("MFETCH");
					return 1;
				}
				for (unsigned i = 0; i < f.nfetch; i++) {
					const struct usbmon_packet *h = (const void *)(m + vec[i]);
					if (h->type != '@')
						events++;
					sink += h->len_cap;
				}
				f.nflush = f.nfetch;
			}
		} else {
			struct usbmon_packet h;
			struct mon_bin_get g = { &h, buf, sizeof(buf) };
			while ((t = now()) - t0 < secs) {
				if (ioctl(fd, MON_IOCX_GETX, &g) < 0) {
					perror("GETX");
					return 1;
				}
				events++;
			}
		}
		ioctl(fd, MON_IOCG_STATS, &st);
		printf("%.0f events/s %u dropped\n", events / (t - t0), st.dropped);
	} else if (!strcmp(mode, "ctrlc")) {
		int n = atoi(argv[3]);
		double *lat = calloc(n, sizeof(double));
		for (int i = 0; i < n; i++) {
			pid_t pid = fork();
			if (pid == 0) {
				/* A shell's background job inherits SIGINT ignored. */
				signal(SIGINT, SIG_DFL);
				int fd = open_or_die(argv[2], O_RDONLY);
				read(fd, buf, sizeof(buf));
				_exit(0);
			}
			/* Wait until the child sleeps in read; if an event was
			 * already there it exits at once: try again. */
			char path[64], st[512];
			int exited = 0;
			snprintf(path, sizeof(path), "/proc/%d/stat", pid);
			for (;;) {
				int f = open(path, O_RDONLY);
				ssize_t k = f < 0 ? -1 : read(f, st, sizeof(st) - 1);
				if (f >= 0)
					close(f);
				st[k > 0 ? k : 0] = 0;
				char *p = strrchr(st, ')');
				if (!p || p[2] == 'Z') {
					waitpid(pid, NULL, 0);
					exited = 1;
					break;
				}
				if (p[2] == 'S' || p[2] == 'D')
					break;
				usleep(1000);
			}
			if (exited) {
				i--;
				continue;
			}
			usleep(20000);
			double t0 = now();
			kill(pid, SIGINT);
			waitpid(pid, NULL, 0);
			lat[i] = (now() - t0) * 1000;
		}
		qsort(lat, n, sizeof(double), cmp_double);
		printf("p50 %.2f ms p99 %.2f ms max %.2f ms\n", lat[n / 2], lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1],
		       lat[n - 1]);
	} else if (!strcmp(mode, "firstevent")) {
		int n = atoi(argv[4]);
		double *lat = calloc(n, sizeof(double));
		int pfd = open_or_die(argv[3], O_RDONLY | O_NONBLOCK);
		for (int i = 0; i < n; i++) {
			int efd = open_or_die(argv[2], O_WRONLY);
			while (read(pfd, buf, sizeof(buf)) > 0)
				; /* drain */
			double t0 = now();
			if (write(efd, "1", 1) != 1) {
				perror("enable");
				return 1;
			}
			for (;;) {
				ssize_t k = read(pfd, buf, sizeof(buf));
				if (k > 0)
					break;
				if (k < 0 && errno != EAGAIN) {
					perror("trace_pipe");
					return 1;
				}
				usleep(50);
			}
			lat[i] = (now() - t0) * 1000;
			if (write(efd, "0", 1) != 1)
				return 1;
			close(efd);
			usleep(20000);
		}
		qsort(lat, n, sizeof(double), cmp_double);
		printf("p50 %.2f ms p99 %.2f ms\n", lat[n / 2], lat[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1]);
	} else if (!strcmp(mode, "pipe")) {
		int p[2];
		if (pipe(p) < 0)
			return 1;
		double secs = atof(argv[2]);
		pid_t pid = fork();
		if (pid == 0) {
			close(p[0]);
			const char line[81] = "ffff888009800780 1234567890 C Ci:1:002:0 0 18 = 12010002 00000040 27060100 0000\n";
			while (write(p[1], line, 80) == 80)
				;
			_exit(0);
		}
		close(p[1]);
		double t0 = now(), t;
		long reads = 0;
		while ((t = now()) - t0 < secs) {
			for (int i = 0; i < 64; i++, reads++)
				if (read(p[0], buf, 80) <= 0)
					return 1;
		}
		kill(pid, SIGKILL);
		printf("%.0f reads/s\n", reads / (t - t0));
	} else if (!strcmp(mode, "pingpong")) {
		if (argc < 5)
			return 2;
		double secs = atof(argv[2]);
		int a[2], b[2];
		char x = 0;
		cpu_set_t set;
		if (pipe(a) < 0 || pipe(b) < 0)
			return 1;
		pid_t pid = fork();
		if (pid == 0) {
			CPU_ZERO(&set);
			CPU_SET(atoi(argv[4]), &set);
			sched_setaffinity(0, sizeof set, &set);
			while (read(a[0], &x, 1) == 1 && write(b[1], &x, 1) == 1)
				;
			_exit(0);
		}
		CPU_ZERO(&set);
		CPU_SET(atoi(argv[3]), &set);
		sched_setaffinity(0, sizeof set, &set);
		double t0 = now(), t;
		long n = 0;
		while ((t = now()) - t0 < secs) {
			for (int i = 0; i < 64; i++, n++)
				if (write(a[1], &x, 1) != 1 || read(b[0], &x, 1) != 1)
					return 1;
		}
		kill(pid, SIGKILL);
		printf("%.0f round trips/s\n", n / (t - t0));
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	return 0;
}
