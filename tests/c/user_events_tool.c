/*
 * user_events_tool: drives monfs's user_events through a tracing directory.
 *
 *   user_events_tool TRACING new            6.4+ ABI scenario (enable_addr)
 *   user_events_tool TRACING old            6.0-6.3 and 5.18 status-page scenario
 *   user_events_tool TRACING hold NAME_ARGS register (6.4+), print, sleep until killed
 *   user_events_tool TRACING nodump        become non-dumpable (no ptrace access for a daemon
 *                                          without root), then register in both ABIs
 *   user_events_tool TRACING fork-write    register and enable ue_fork, then write from a
 *                                          forked child and from this process
 *   user_events_tool TRACING bench-disabled N
 *   user_events_tool TRACING bench-enabled SECS [NULLFILE]
 *   user_events_tool TRACING bench-latency N
 *
 * Every result is one "key=value" line so tests can match them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include "user_events_abi.h"

struct reg_old { /* 6.0-6.3 */
	uint32_t size;
	uint64_t name_args;
	uint32_t status_bit;
	uint32_t write_index;
} __attribute__((packed));

struct reg_518 { /* 5.18, natural alignment */
	uint32_t size;
	uint64_t name_args;
	uint32_t status_index;
	uint32_t write_index;
};

static const char *T;
static char path_buf[4096];

static const char *P(const char *rel)
{
	snprintf(path_buf, sizeof path_buf, "%s/%s", T, rel);
	return path_buf;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int put(const char *rel, const char *s, int flags)
{
	int fd = open(P(rel), O_WRONLY | flags);
	if (fd < 0)
		return -errno;
	ssize_t r = write(fd, s, strlen(s));
	int e = r < 0 ? -errno : 0;
	close(fd);
	return e;
}

static const char *err(long r)
{
	return r < 0 ? strerrorname_np(errno) : "OK";
}

/* Wait until (*word & mask) == want, up to 1 s; seconds waited or -1. */
static double wait_bit(volatile void *p, int size, uint64_t mask, int want)
{
	double t0 = now();
	for (;;) {
		uint64_t v = size == 1 ? *(volatile uint8_t *)p
			   : size == 4 ? *(volatile uint32_t *)p : *(volatile uint64_t *)p;
		if (((v & mask) != 0) == want)
			return now() - t0;
		if (now() - t0 > 1.0)
			return -1;
		/* Let the daemon's threads have this CPU on a busy machine. */
		sched_yield();
	}
}

static void dump(const char *rel, const char *tag)
{
	char buf[65536];
	int fd = open(P(rel), O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
	if (fd >= 0)
		close(fd);
	if (n < 0)
		n = 0;
	buf[n] = 0;
	for (char *l = strtok(buf, "\n"); l; l = strtok(NULL, "\n"))
		printf("%s=%s\n", tag, l);
}

static volatile uint32_t word;
static volatile uint64_t word64;

static long reg_new(int fd, const char *args, volatile void *addr, int bit, int size, int flags,
		    uint32_t *idx)
{
	struct user_reg r = { .size = sizeof r, .enable_bit = bit, .enable_size = size, .flags = flags,
			     .enable_addr = (uintptr_t)addr, .name_args = (uintptr_t)args };
	long ret = ioctl(fd, DIAG_IOCSREG, &r);
	if (idx)
		*idx = r.write_index;
	return ret;
}

static ssize_t send_event(int fd, uint32_t idx, uint32_t count, const char *msg, const char *s)
{
	char m[20] = { 0 };
	strncpy(m, msg, sizeof m - 1);
	uint32_t loc = ((uint32_t)(strlen(s) + 1) << 16) | (8 + 4 + 20 + 4);
	struct iovec io[5] = {
		{ &idx, 4 }, { &count, 4 }, { m, 20 }, { &loc, 4 }, { (void *)s, strlen(s) + 1 },
	};
	return writev(fd, io, 5);
}

static int scenario_new(void)
{
	const char *args = "ue_new u32 count; char[20] msg; __data_loc char[] s";
	int fd = open(P("user_events_data"), O_RDWR);
	uint32_t idx = 99;
	long r = reg_new(fd, args, &word, 31, 4, 0, &idx);
	printf("reg=%s index=%u word=0x%x\n", err(r), idx, word);
	/* A second event on the same fd gets index 1, the same event again 0. */
	uint32_t idx2 = 99;
	r = reg_new(fd, "ue_new2", &word64, 63, 8, 0, &idx2);
	printf("reg2=%s index=%u\n", err(r), idx2);
	r = reg_new(fd, args, &word, 5, 4, 0, &idx2);
	printf("reg_again=%s index=%u\n", err(r), idx2);
	struct user_unreg u5 = { .size = sizeof u5, .disable_bit = 5, .disable_addr = (uintptr_t)&word };
	r = ioctl(fd, DIAG_IOCSUNREG, &u5);
	printf("unreg5=%s\n", err(r));

	printf("enable=%d\n", put("events/user_events/ue_new/enable", "1\n", O_TRUNC));
	double lat = wait_bit(&word, 4, 1u << 31, 1);
	printf("bit_on=%s word=0x%x latency_us=%.0f\n", lat >= 0 ? "yes" : "no", word, lat * 1e6);
	put("trace", "", O_TRUNC);
	ssize_t w = send_event(fd, idx, 1, "hello", "dyn");
	printf("write=%zd %s\n", w, err(w));
	/* Extra bytes after the fields are part of the event. */
	uint32_t big[2] = { idx, 0xffffffff };
	char tail[40] = { 0 };
	uint32_t loc = (1u << 16) | (8 + 4 + 20 + 4 + 10);
	memcpy(tail + 20, &loc, 4);
	struct iovec io[3] = { { big, 8 }, { tail, 24 }, { "0123456789", 11 } };
	w = writev(fd, io, 3);
	printf("write_extra=%zd %s\n", w, err(w));

	/* Write errors while enabled. */
	uint32_t bad = 7;
	w = send_event(fd, bad, 1, "x", "y");
	printf("write_bad_index=%s\n", err(w));
	int32_t neg = -1;
	w = write(fd, &neg, 4);
	printf("write_neg_index=%s\n", err(w));
	w = write(fd, &idx, 3);
	printf("write_short_header=%s\n", err(w));
	char shortp[8] = { 0 };
	memcpy(shortp, &idx, 4);
	w = write(fd, shortp, 8);
	printf("write_short_payload=%s\n", err(w));
	char ev[40] = { 0 };
	memcpy(ev, &idx, 4);
	loc = (100u << 16) | 36;
	memcpy(ev + 28, &loc, 4);
	w = write(fd, ev, 40);
	printf("write_bad_loc=%s\n", err(w));
	loc = (4u << 16) | 36;
	memcpy(ev + 28, &loc, 4);
	memcpy(ev + 32, "abcd", 4);
	w = write(fd, ev, 36);
	printf("write_no_nul=%s\n", err(w));
	int fd2 = open(P("user_events_data"), O_RDWR);
	w = send_event(fd2, idx, 1, "x", "y");
	printf("write_other_fd=%s\n", err(w));
	close(fd2);

	printf("disable=%d\n", put("events/user_events/ue_new/enable", "0\n", O_TRUNC));
	lat = wait_bit(&word, 4, 1u << 31, 0);
	printf("bit_off=%s word=0x%x\n", lat >= 0 ? "yes" : "no", word);
	w = send_event(fd, idx, 2, "disabled", "z");
	printf("write_disabled=%s\n", err(w));

	printf("set_event=%d\n", put("set_event", "user_events:ue_new\n", O_APPEND));
	lat = wait_bit(&word, 4, 1u << 31, 1);
	printf("bit_on_set_event=%s\n", lat >= 0 ? "yes" : "no");
	w = send_event(fd, idx, 3, "via set_event", "");
	printf("write3=%zd\n", w);
	printf("set_event_off=%d\n", put("set_event", "!user_events:ue_new\n", O_APPEND));
	lat = wait_bit(&word, 4, 1u << 31, 0);
	printf("bit_off_set_event=%s\n", lat >= 0 ? "yes" : "no");
	dump("user_events_status", "status");
	dump("dynamic_events", "dyn");

	/* Registration errors. */
	r = reg_new(fd, args, &word, 31, 4, 0, NULL);
	printf("reg_same_bit=%s\n", err(r));
	r = reg_new(fd, "ue_new u64 count", &word, 30, 4, 0, NULL);
	printf("reg_other_fields=%s\n", err(r));
	r = reg_new(fd, "ue_long long x", &word, 29, 4, 0, NULL);
	printf("reg_long=%s\n", err(r));
	r = reg_new(fd, "ue_flag:f u32 a", &word, 29, 4, 0, NULL);
	printf("reg_flag_text=%s\n", err(r));
	r = reg_new(fd, "ue_bad u32  a", &word, 29, 4, 0, NULL);
	printf("reg_bad_command=%s\n", err(r));
	r = reg_new(fd, "ue_x u32 a", &word, 32, 4, 0, NULL);
	printf("reg_bit32=%s\n", err(r));
	r = reg_new(fd, "ue_x u32 a", &word, 1, 2, 0, NULL);
	printf("reg_size2=%s\n", err(r));
	r = reg_new(fd, "ue_x u32 a", (char *)&word + 1, 1, 4, 0, NULL);
	printf("reg_misaligned=%s\n", err(r));
	r = reg_new(fd, "ue_x u32 a", &word, 1, 4, 4, NULL);
	printf("reg_flags4=%s\n", err(r));
	r = reg_new(fd, (const char *)16, &word, 1, 4, 0, NULL);
	printf("reg_bad_name_ptr=%s\n", err(r));
	r = reg_new(fd, "ue_x u32 a", (void *)0xffffffffff600000ull, 1, 4, 0, NULL);
	printf("reg_kernel_addr=%s\n", err(r));
	r = ioctl(fd, DIAG_IOCSREG, (void *)16);
	printf("reg_bad_struct_ptr=%s\n", err(r));
	char longname[700];
	memset(longname, 'a', sizeof longname - 1);
	longname[sizeof longname - 1] = 0;
	r = reg_new(fd, longname, &word, 1, 4, 0, NULL);
	printf("reg_too_long=%s\n", err(r));
	struct { struct user_reg r; uint32_t extra; } __attribute__((packed)) big_reg = {
		{ .size = 32, .enable_bit = 2, .enable_size = 4, .enable_addr = (uintptr_t)&word,
		  .name_args = (uintptr_t) "ue_x u32 a" }, 1 };
	r = ioctl(fd, DIAG_IOCSREG, &big_reg);
	printf("reg_tail_nonzero=%s\n", err(r));
	big_reg.extra = 0;
	r = ioctl(fd, DIAG_IOCSREG, &big_reg);
	printf("reg_tail_zero=%s index=%u\n", err(r), big_reg.r.write_index);
	struct user_reg small = { .size = 8 };
	r = ioctl(fd, DIAG_IOCSREG, &small);
	printf("reg_size8=%s\n", err(r));
	small.size = 26;
	r = ioctl(fd, DIAG_IOCSREG, &small);
	printf("reg_size26=%s\n", err(r));
	small.size = 5000;
	r = ioctl(fd, DIAG_IOCSREG, &small);
	printf("reg_size5000=%s\n", err(r));
	r = ioctl(fd, _IO('*', 9), 0);
	printf("bad_cmd=%s\n", err(r));

	/* Delete and unregister. */
	r = ioctl(fd, DIAG_IOCSDEL, "ue_new");
	printf("del_busy=%s\n", err(r));
	r = ioctl(fd, DIAG_IOCSDEL, "no_such_event");
	printf("del_missing=%s\n", err(r));
	word = 0;
	put("events/user_events/ue_new/enable", "1\n", O_TRUNC);
	wait_bit(&word, 4, 1u << 31, 1);
	struct user_unreg u = { .size = sizeof u, .disable_bit = 31, .disable_addr = (uintptr_t)&word };
	r = ioctl(fd, DIAG_IOCSUNREG, &u);
	printf("unreg=%s word=0x%x\n", err(r), word);
	r = ioctl(fd, DIAG_IOCSUNREG, &u);
	printf("unreg_again=%s\n", err(r));
	u.__reserved = 1;
	r = ioctl(fd, DIAG_IOCSUNREG, &u);
	printf("unreg_reserved=%s\n", err(r));
	u.__reserved = 0;
	u.size = 8;
	r = ioctl(fd, DIAG_IOCSUNREG, &u);
	printf("unreg_size8=%s\n", err(r));
	put("events/user_events/ue_new/enable", "0\n", O_TRUNC);
	printf("word_after_unreg=0x%x\n", word);
	close(fd);
	fd = open(P("user_events_data"), O_RDWR);
	r = ioctl(fd, DIAG_IOCSDEL, "ue_new");
	printf("del_after_close=%s\n", err(r));
	r = ioctl(fd, DIAG_IOCSDEL, "ue_x");
	printf("del_x=%s\n", err(r));
	close(fd);
	dump("user_events_status", "status_end");
	return 0;
}

static int scenario_old(void)
{
	int fd = open(P("user_events_data"), O_RDWR);
	int sfd = open(P("user_events_status"), O_RDWR);
	volatile uint8_t *page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, sfd, 0);
	printf("mmap=%s\n", page == MAP_FAILED ? strerror(errno) : "OK");
	if (page == MAP_FAILED)
		return 1;
	struct reg_old r = { .size = sizeof r, .name_args = (uintptr_t) "ue_old:ignored u32 count" };
	long ret = ioctl(fd, DIAG_IOCSREG, &r);
	printf("reg=%s size=%zu bit=%u index=%u\n", err(ret), sizeof r, r.status_bit, r.write_index);
	struct reg_518 b = { .size = sizeof b, .name_args = (uintptr_t) "ue_518 u8 x" };
	ret = ioctl(fd, DIAG_IOCSREG, &b);
	printf("reg518=%s size=%zu byte=%u index=%u\n", err(ret), sizeof b, b.status_index,
	       b.write_index);
	/* Same name, other fields: the old ABI returns the existing event. */
	struct reg_old r2 = { .size = sizeof r2, .name_args = (uintptr_t) "ue_old u64 other" };
	ret = ioctl(fd, DIAG_IOCSREG, &r2);
	printf("reg_same_name=%s bit=%u index=%u\n", err(ret), r2.status_bit, r2.write_index);

	uint32_t bit = r.status_bit;
	volatile uint8_t *byte = page + (bit >> 3);
	uint8_t mask = 1 << (bit & 7);
	printf("page_before=%d\n", (*byte & mask) != 0);
	printf("enable=%d\n", put("events/user_events/ue_old/enable", "1\n", O_TRUNC));
	double lat = wait_bit(byte, 1, mask, 1);
	printf("page_bit_on=%s latency_us=%.0f\n", lat >= 0 ? "yes" : "no", lat * 1e6);
	put("trace", "", O_TRUNC);
	uint32_t payload[2] = { r.write_index, 42 };
	ssize_t w = write(fd, payload, 8);
	printf("write=%zd %s\n", w, err(w));
	dump("user_events_status", "status");
	printf("disable=%d\n", put("events/user_events/ue_old/enable", "0\n", O_TRUNC));
	lat = wait_bit(byte, 1, mask, 0);
	printf("page_bit_off=%s\n", lat >= 0 ? "yes" : "no");
	payload[1] = 43;
	w = write(fd, payload, 8);
	printf("write_disabled=%zd %s\n", w, err(w));

	printf("enable518=%d\n", put("set_event", "user_events:ue_518\n", O_APPEND));
	lat = wait_bit(page + b.status_index, 1, 0xff, 1);
	printf("page_byte_on=%s value=%u\n", lat >= 0 ? "yes" : "no", page[b.status_index]);
	put("set_event", "!user_events:ue_518\n", O_APPEND);
	lat = wait_bit(page + b.status_index, 1, 0xff, 0);
	printf("page_byte_off=%s\n", lat >= 0 ? "yes" : "no");

	struct reg_old bad = { .size = 19 };
	ret = ioctl(fd, DIAG_IOCSREG, &bad);
	printf("reg_size19=%s\n", err(ret));
	bad.size = 20;
	bad.name_args = (uintptr_t) "ue_bad long x";
	ret = ioctl(fd, DIAG_IOCSREG, &bad);
	printf("reg_long=%s\n", err(ret));
	ret = ioctl(fd, DIAG_IOCSDEL, "ue_old");
	printf("del_busy=%s\n", err(ret));
	close(fd);
	fd = open(P("user_events_data"), O_RDWR);
	ret = ioctl(fd, DIAG_IOCSDEL, "ue_old");
	printf("del=%s\n", err(ret));
	ret = ioctl(fd, DIAG_IOCSDEL, "ue_518");
	printf("del518=%s\n", err(ret));
	printf("page_after_del=%d\n", (*byte & mask) != 0);
	close(fd);
	dump("user_events_status", "status_end");
	return 0;
}

static __attribute__((noreturn)) void hold(const char *args)
{
	int fd = open(P("user_events_data"), O_RDWR);
	uint32_t idx = 0;
	long r = reg_new(fd, args, &word, 0, 4, 0, &idx);
	printf("reg=%s index=%u\n", err(r), idx);
	fflush(stdout);
	for (;;) {
		if (word & 1)
			send_event(fd, idx, 7, "held", "x");
		usleep(10000);
	}
}

/* Writes through one fd from two processes: each is the writer in the trace. */
static int fork_write(void)
{
	int fd = open(P("user_events_data"), O_RDWR);
	uint32_t idx = 0;
	long r = reg_new(fd, "ue_fork u32 count; char[20] msg; __data_loc char[] s", &word, 0, 4, 0,
			 &idx);
	printf("reg=%s\n", err(r));
	printf("enable=%d\n", put("events/user_events/ue_fork/enable", "1", 0));
	printf("bit=%s\n", wait_bit(&word, 4, 1, 1) < 0 ? "no" : "yes");
	pid_t child = fork();
	if (child == 0)
		_exit(send_event(fd, idx, 2, "child", "c") < 0);
	int status = 0;
	waitpid(child, &status, 0);
	printf("child_write=%s\n", WIFEXITED(status) && !WEXITSTATUS(status) ? "OK" : "failed");
	printf("parent_write=%s\n", err(send_event(fd, idx, 1, "parent", "p")));
	printf("parent_pid=%d\nchild_pid=%d\n", getpid(), child);
	return 0;
}

static const char *BENCH = "ue_bench u32 count; char[20] msg; __data_loc char[] s";

static int bench_disabled(long n)
{
	int fd = open(P("user_events_data"), O_RDWR);
	uint32_t idx;
	if (reg_new(fd, BENCH, &word, 0, 4, 0, &idx) < 0)
		return perror("reg"), 1;
	long writes = 0;
	double t0 = now();
	for (long i = 0; i < n; i++) {
		/* What every producer does: test the bit, skip the write. */
		if (__builtin_expect(word & 1, 0)) {
			send_event(fd, idx, i, "bench", "x");
			writes++;
		}
		__asm__ volatile("" ::: "memory");
	}
	double dt = now() - t0;
	printf("disabled_events=%ld secs=%.6f ns_per_event=%.2f writes=%ld\n", n, dt, dt * 1e9 / n,
	       writes);
	return 0;
}

static int bench_enabled(double secs, const char *nullfile)
{
	int fd = open(P("user_events_data"), O_RDWR);
	uint32_t idx;
	if (reg_new(fd, BENCH, &word, 0, 4, 0, &idx) < 0)
		return perror("reg"), 1;
	put("events/user_events/ue_bench/enable", "1\n", O_TRUNC);
	wait_bit(&word, 4, 1, 1);
	long n = 0;
	double t0 = now(), dt;
	while ((dt = now() - t0) < secs) {
		for (int k = 0; k < 64; k++)
			if (word & 1) {
				if (send_event(fd, idx, n, "bench", "x") < 0)
					return perror("writev"), 1;
				n++;
			}
	}
	printf("enabled_events=%ld secs=%.3f events_per_sec=%.0f\n", n, dt, n / dt);
	put("events/user_events/ue_bench/enable", "0\n", O_TRUNC);
	if (nullfile) {
		int nfd = open(nullfile, O_RDWR);
		long m = 0;
		t0 = now();
		while ((dt = now() - t0) < secs) {
			for (int k = 0; k < 64; k++) {
				if (send_event(nfd, idx, m, "bench", "x") < 0)
					return perror("null writev"), 1;
				m++;
			}
		}
		printf("null_writes=%ld secs=%.3f writes_per_sec=%.0f\n", m, dt, m / dt);
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int bench_latency(int n)
{
	int fd = open(P("user_events_data"), O_RDWR);
	uint32_t idx;
	if (reg_new(fd, BENCH, &word, 0, 4, 0, &idx) < 0)
		return perror("reg"), 1;
	int sfd = open(P("user_events_status"), O_RDWR);
	volatile uint8_t *page = mmap(NULL, 4096, PROT_READ, MAP_SHARED, sfd, 0);
	struct reg_old r = { .size = sizeof r, .name_args = (uintptr_t) "ue_bench_old u32 count" };
	if (page == MAP_FAILED || ioctl(fd, DIAG_IOCSREG, &r) < 0)
		return perror("old reg"), 1;
	int efd = open(P("events/user_events/ue_bench/enable"), O_WRONLY);
	int ofd = open(P("events/user_events/ue_bench_old/enable"), O_WRONLY);
	double *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b), *c = calloc(n, sizeof *c);
	volatile uint8_t *byte = page + (r.status_bit >> 3);
	uint8_t mask = 1 << (r.status_bit & 7);
	for (int i = 0; i < n; i++) {
		const char *v = i % 2 ? "0\n" : "1\n";
		int want = !(i % 2);
		double t0 = now();
		if (pwrite(efd, v, 2, 0) != 2)
			return perror("enable"), 1;
		a[i] = now() - t0;
		double l = wait_bit(&word, 4, 1, want);
		b[i] = l < 0 ? 1 : a[i] + l;
		t0 = now();
		if (pwrite(ofd, v, 2, 0) != 2)
			return perror("enable old"), 1;
		double w = now() - t0;
		l = wait_bit(byte, 1, mask, want);
		c[i] = l < 0 ? 1 : w + l;
	}
	qsort(a, n, sizeof *a, cmp);
	qsort(b, n, sizeof *b, cmp);
	qsort(c, n, sizeof *c, cmp);
	printf("toggles=%d enable_write_us_p50=%.1f enable_addr_visible_us_p50=%.1f "
	       "enable_addr_visible_us_p99=%.1f status_page_visible_us_p50=%.1f "
	       "status_page_visible_us_p99=%.1f\n",
	       n, a[n / 2] * 1e6, b[n / 2] * 1e6, b[n * 99 / 100] * 1e6, c[n / 2] * 1e6,
	       c[n * 99 / 100] * 1e6);
	return 0;
}

/* Registration by a process the kernel keeps the daemon out of. */
static int nodump(void)
{
	if (prctl(PR_SET_DUMPABLE, 0) != 0) {
		perror("PR_SET_DUMPABLE");
		return 1;
	}
	int fd = open(P("user_events_data"), O_RDWR);
	if (fd < 0) {
		perror("user_events_data");
		return 1;
	}
	uint32_t idx;
	long r = reg_new(fd, "ue_nodump u32 a", &word, 3, 4, 0, &idx);
	printf("new_reg=%s\n", err(r));
	struct reg_old o = { .size = sizeof o, .name_args = (uintptr_t)"ue_nodump_old u32 a" };
	r = ioctl(fd, DIAG_IOCSREG, &o);
	printf("old_reg=%s\n", err(r));
	r = ioctl(fd, DIAG_IOCSDEL, "ue_nodump");
	printf("del=%s\n", err(r));
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3) {
		fprintf(stderr, "usage: %s TRACING new|old|hold ARGS|bench-...\n", argv[0]);
		return 2;
	}
	T = argv[1];
	const char *c = argv[2];
	if (!strcmp(c, "new"))
		return scenario_new();
	if (!strcmp(c, "old"))
		return scenario_old();
	if (!strcmp(c, "fork-write"))
		return fork_write();
	if (!strcmp(c, "nodump"))
		return nodump();
	if (!strcmp(c, "hold") && argc > 3)
		hold(argv[3]);
	if (!strcmp(c, "bench-disabled") && argc > 3)
		return bench_disabled(atol(argv[3]));
	if (!strcmp(c, "bench-enabled") && argc > 3)
		return bench_enabled(atof(argv[3]), argc > 4 ? argv[4] : NULL);
	if (!strcmp(c, "bench-latency") && argc > 3)
		return bench_latency(atoi(argv[3]));
	fprintf(stderr, "unknown command %s\n", c);
	return 2;
}
