/*
 * ue_lifecycle: user_events producers that fork, exec, exit and aim their
 * enable words (or ioctl buffers) at pages only a FUSE daemon can serve.
 * The test reads the words it cares about through /proc/PID/mem.
 *
 *   ue_lifecycle exec-reg TRACING ADDR NAME PROG
 *        map a page at ADDR, register NAME ("NAME u32 x") with its enable
 *        word there, then exec PROG victim TRACING ADDR FD NAME (the data fd
 *        stays open across the exec)
 *   ue_lifecycle victim TRACING ADDR [FD NAME]
 *        map a fresh page at ADDR, print "ready pid=N", wait for signals:
 *        SIGUSR1 registers NAME at ADDR again through FD ("rereg=ERR")
 *   ue_lifecycle reg-wait TRACING ADDR NAME
 *        map a page at ADDR, register NAME there, print "registered pid=N",
 *        wait to be killed
 *   ue_lifecycle fork-follow TRACING NAME
 *        register NAME on a global word, fork; print "parent pid=N addr=A"
 *        and "child pid=N"; both wait to be killed
 *   ue_lifecycle fork-many TRACING NAME N
 *        register NAME on a global word, then fork N children one after the
 *        other, each living 20 ms (for scripts/bench-user-events: the
 *        daemon logs how long after each fork the child's copy existed)
 *   ue_lifecycle fork-exec TRACING NAME N
 *        register NAME on a global word, print "registered=ERR", wait for a
 *        line on stdin, then fork N children that at once exec this
 *        program again with the same arguments and environment (with ASLR
 *        off, the same layout), marked by descriptor 100; such a child
 *        prints "child pid=N addr=A" (A: its own global word, never
 *        registered) and waits to be killed
 *   ue_lifecycle reg-lots TRACING NAME N EVENTS
 *        register N enable bits, each on its own bit of an anonymous
 *        mapping, for EVENTS events (NAME_0 ... NAME_<EVENTS-1>, in turn);
 *        print "registered=K efault=E other=O ms=T" and wait to be killed
 *   ue_lifecycle reg-many TRACING NAME N
 *        register NAME N times, on N different bits of a global array,
 *        print "registered=N", wait to be killed
 *   ue_lifecycle reg-at TRACING FILE NAME
 *        map FILE privately, print "mapped", wait for a line on stdin, then
 *        register NAME with its enable word in the mapping: "reg=ERR ms=T"
 *   ue_lifecycle getx-at DEV FILE
 *        likewise, then MON_IOCX_GETX into the mapping: "getx=ERR ms=T"
 *   ue_lifecycle reg-uffd TRACING NAME / getx-uffd DEV
 *        the same with the enable word or the GETX buffer in a page that a
 *        userfaultfd watches and nobody serves (with UE_HOLD set, getx-uffd
 *        then waits to be killed, so the access stays stuck)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/userfaultfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "user_events_abi.h"

struct mon_bin_get {
	void *hdr;
	void *data;
	size_t alloc;
};

#define MON_IOCX_GETX _IOW(0x92, 10, struct mon_bin_get)

static char path_buf[4096];

static const char *P(const char *t, const char *rel)
{
	snprintf(path_buf, sizeof path_buf, "%s/%s", t, rel);
	return path_buf;
}

static double ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *err(long r)
{
	return r < 0 ? strerrorname_np(errno) : "OK";
}

static void *map_at(const char *addr)
{
	void *want = (void *)strtoul(addr, NULL, 0);
	void *p = mmap(want, 4096, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (p != want) {
		perror("mmap at fixed address");
		exit(1);
	}
	return p;
}

static long reg(int fd, const char *name, void *addr)
{
	static char args[600];
	snprintf(args, sizeof args, "%s u32 x", name);
	struct user_reg r = { .size = sizeof r, .enable_bit = 0, .enable_size = 4,
			     .enable_addr = (uintptr_t)addr, .name_args = (uintptr_t)args };
	return ioctl(fd, DIAG_IOCSREG, &r);
}

static int data_fd(const char *t, int cloexec)
{
	int fd = open(P(t, "user_events_data"), O_RDWR | cloexec);
	if (fd < 0) {
		perror("open user_events_data");
		exit(1);
	}
	return fd;
}

static sigset_t sigs;

/* Block the signals the test sends, before saying we are ready. */
static void block_signals(void)
{
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGTERM);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
}

/* Wait for signals until SIGTERM; SIGUSR1 runs `on_usr1`. */
static void wait_signals(void (*on_usr1)(void))
{
	sigset_t set = sigs;
	for (;;) {
		int sig;
		if (sigwait(&set, &sig))
			continue;
		if (sig == SIGTERM)
			exit(0);
		if (on_usr1)
			on_usr1();
	}
}

static int v_fd = -1;
static const char *v_name;
static void *v_addr;

static void rereg(void)
{
	long r = reg(v_fd, v_name, v_addr);
	printf("rereg=%s\n", err(r));
}

static volatile uint32_t word;

/* Two pages whose faults a userfaultfd catches and nobody resolves. */
static char *uffd_pages(void)
{
	int uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	struct uffdio_api api = { .api = UFFD_API };
	char *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct uffdio_register r = { .range = { (uintptr_t)p, 8192 },
				     .mode = UFFDIO_REGISTER_MODE_MISSING };
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) || p == MAP_FAILED ||
	    ioctl(uffd, UFFDIO_REGISTER, &r)) {
		perror("userfaultfd");
		exit(1);
	}
	return p;
}

/* Say "mapped" and wait for the test's go-ahead (a line on stdin). */
static void go(void)
{
	char line[16];
	printf("mapped\n");
	if (!fgets(line, sizeof line, stdin))
		exit(1);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	block_signals();
	if (argc < 3) {
		fprintf(stderr, "usage: see the comment at the top of ue_lifecycle.c\n");
		return 2;
	}
	const char *cmd = argv[1], *t = argv[2];
	if (!strcmp(cmd, "exec-reg") && argc == 6) {
		void *p = map_at(argv[3]);
		int fd = data_fd(t, 0);
		long r = reg(fd, argv[4], p);
		printf("registered=%s\n", err(r));
		if (r < 0)
			return 1;
		char fds[16];
		snprintf(fds, sizeof fds, "%d", fd);
		execl(argv[5], argv[5], "victim", t, argv[3], fds, argv[4], (char *)NULL);
		perror("exec");
		return 1;
	}
	if (!strcmp(cmd, "victim") && (argc == 4 || argc == 6)) {
		v_addr = map_at(argv[3]);
		if (argc == 6) {
			v_fd = atoi(argv[4]);
			v_name = argv[5];
		}
		printf("ready pid=%d\n", getpid());
		wait_signals(v_fd >= 0 ? rereg : NULL);
	}
	if (!strcmp(cmd, "reg-wait") && argc == 5) {
		void *p = map_at(argv[3]);
		int fd = data_fd(t, O_CLOEXEC);
		long r = reg(fd, argv[4], p);
		printf("registered=%s pid=%d\n", err(r), getpid());
		if (r < 0)
			return 1;
		wait_signals(NULL);
	}
	if (!strcmp(cmd, "fork-follow") && argc == 4) {
		int fd = data_fd(t, O_CLOEXEC);
		long r = reg(fd, argv[3], (void *)&word);
		printf("parent pid=%d addr=%#lx registered=%s\n", getpid(), (unsigned long)&word,
		       err(r));
		if (r < 0)
			return 1;
		pid_t c = fork();
		if (c == 0)
			printf("child pid=%d\n", getpid());
		wait_signals(NULL);
	}
	if (!strcmp(cmd, "fork-exec") && argc == 5 && fcntl(100, F_GETFD) >= 0) {
		printf("child pid=%d addr=%#lx\n", getpid(), (unsigned long)&word);
		wait_signals(NULL);
	}
	if (!strcmp(cmd, "fork-exec") && argc == 5) {
		int fd = data_fd(t, O_CLOEXEC), n = atoi(argv[4]);
		long r = reg(fd, argv[3], (void *)&word);
		printf("registered=%s\n", err(r));
		if (r < 0)
			return 1;
		char line[16];
		if (!fgets(line, sizeof line, stdin))
			return 1;
		for (int i = 0; i < n; i++) {
			if (fork() == 0) {
				dup2(1, 100);
				execv(argv[0], argv);
				_exit(127);
			}
		}
		printf("done\n");
		wait_signals(NULL);
	}
	if (!strcmp(cmd, "reg-lots") && argc == 6) {
		int fd = data_fd(t, O_CLOEXEC), n = atoi(argv[4]), events = atoi(argv[5]);
		size_t len = ((size_t)n / 32 + 1) * 4;
		uint32_t *words = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
				       -1, 0);
		int ok = 0, efault = 0, other = 0;
		struct timespec t0, t1;
		clock_gettime(CLOCK_MONOTONIC, &t0);
		for (int i = 0; i < n; i++) {
			static char args[600];
			snprintf(args, sizeof args, "%s_%d u32 x", argv[3], events > 0 ? i % events : 0);
			struct user_reg r = { .size = sizeof r, .enable_bit = i % 32, .enable_size = 4,
					     .enable_addr = (uintptr_t)&words[i / 32],
					     .name_args = (uintptr_t)args };
			if (ioctl(fd, DIAG_IOCSREG, &r) == 0)
				ok++;
			else if (errno == EFAULT)
				efault++;
			else
				other++;
		}
		clock_gettime(CLOCK_MONOTONIC, &t1);
		printf("registered=%d efault=%d other=%d ms=%ld\n", ok, efault, other,
		       (t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
		wait_signals(NULL);
	}
	if (!strcmp(cmd, "reg-many") && argc == 5) {
		static uint32_t words[64];
		int fd = data_fd(t, O_CLOEXEC), n = atoi(argv[4]), ok = 0;
		for (int i = 0; i < n && i < 64 * 32; i++) {
			static char args[600];
			snprintf(args, sizeof args, "%s u32 x", argv[3]);
			struct user_reg r = { .size = sizeof r, .enable_bit = i % 32, .enable_size = 4,
					     .enable_addr = (uintptr_t)&words[i / 32],
					     .name_args = (uintptr_t)args };
			ok += ioctl(fd, DIAG_IOCSREG, &r) == 0;
		}
		printf("registered=%d\n", ok);
		wait_signals(NULL);
	}
	if (!strcmp(cmd, "fork-many") && argc == 5) {
		int fd = data_fd(t, O_CLOEXEC), n = atoi(argv[4]);
		if (reg(fd, argv[3], (void *)&word) < 0) {
			perror("register");
			return 1;
		}
		for (int i = 0; i < n; i++) {
			pid_t c = fork();
			if (c == 0) {
				usleep(20000);
				_exit(0);
			}
			waitpid(c, NULL, 0);
		}
		printf("forks=%d\n", n);
		return 0;
	}
	if ((!strcmp(cmd, "reg-at") && argc == 5) || (!strcmp(cmd, "reg-uffd") && argc == 4)) {
		void *p;
		if (!strcmp(cmd, "reg-uffd")) {
			p = uffd_pages();
			argv[4] = argv[3];
		} else {
			int ffd = open(argv[3], O_RDONLY);
			p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE, ffd, 0);
			if (ffd < 0 || p == MAP_FAILED) {
				perror(argv[3]);
				return 1;
			}
		}
		int fd = data_fd(t, O_CLOEXEC);
		go();
		double t0 = ms();
		long r = reg(fd, argv[4], p);
		printf("reg=%s ms=%.1f\n", err(r), ms() - t0);
		return 0;
	}
	if ((!strcmp(cmd, "getx-at") && argc == 4) || (!strcmp(cmd, "getx-uffd") && argc == 3)) {
		char *p;
		if (!strcmp(cmd, "getx-uffd")) {
			p = uffd_pages();
		} else {
			int ffd = open(argv[3], O_RDONLY);
			p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE, ffd, 0);
			if (ffd < 0 || p == MAP_FAILED) {
				perror("getx-at setup");
				return 1;
			}
		}
		int dev = open(t, O_RDONLY);
		if (dev < 0) {
			perror(t);
			return 1;
		}
		struct mon_bin_get g = { p, p + 64, 1024 };
		go();
		double t0 = ms();
		long r = ioctl(dev, MON_IOCX_GETX, &g);
		printf("getx=%s ms=%.1f\n", err(r), ms() - t0);
		/* UE_HOLD: keep the userfaultfd (and the stuck access) alive. */
		if (getenv("UE_HOLD"))
			pause();
		return 0;
	}
	fprintf(stderr, "ue_lifecycle: bad command\n");
	return 2;
}
