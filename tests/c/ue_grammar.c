/*
 * ue_grammar: replay user_events grammar cases against one tracefs and
 * print what happened, for scripts/kernel-vm --custom-kernel (the same file
 * of cases runs against the kernel's tracefs and monfs's, and the outputs
 * are diffed). Cases come from scripts/lib/user_events_fuzz.py.
 *
 *   ue_grammar TRACINGDIR CASEFILE
 *
 * A case is one line: an id, then steps separated by spaces:
 *   W,MODE,HEX                 write the bytes HEX to dynamic_events, opened
 *                              O_WRONLY plus O_TRUNC (t), O_APPEND (a) or
 *                              nothing (w), in one write(2)
 *   R,SIZE,FLAGS,BIT,ESIZE,ADDR,HEX
 *                              DIAG_IOCSREG on user_events_data: user_reg.size
 *                              SIZE (a trailing "t" puts a non-zero byte past
 *                              the struct), flags, enable_bit, enable_size,
 *                              enable_addr (a: a word of this step, s: the
 *                              word of step 0, m: misaligned, k: a kernel
 *                              address) and name_args (HEX, NUL-terminated;
 *                              "-" for an unmapped pointer)
 *   D,HEX                      DIAG_IOCSDEL of the name HEX
 *   E,VAL,HEX                  write VAL ("1" or "0") to events/HEX/enable
 *                              (HEX: SYSTEM/EVENT, or SYSTEM/PREFIX* for the
 *                              first event named PREFIX...)
 * Per case it prints each step's result, then dynamic_events, the sorted
 * event lines of user_events_status and the format of every user event
 * (without its ID line, a global counter), then cleans up: unregisters the
 * enable bits, closes user_events_data and truncates dynamic_events until
 * that is no longer EBUSY (events of closed files are freed from a work
 * queue), and prints whether the tree is empty again. Events are disabled
 * (the systems' enable files) before that.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "user_events_abi.h"

#define MAXSTEPS 16
static uint64_t words[MAXSTEPS + 1] __attribute__((aligned(8)));
static const char *T;
static int data_fd = -1;
static struct { uint64_t addr; uint8_t bit; } regs[MAXSTEPS];
static int nregs;

static const char *ename(int e)
{
	static char b[16];
	switch (e) {
	case 0: return "0";
	case EINVAL: return "EINVAL";
	case ENOENT: return "ENOENT";
	case EBUSY: return "EBUSY";
	case EPERM: return "EPERM";
	case EFAULT: return "EFAULT";
	case E2BIG: return "E2BIG";
	case EADDRINUSE: return "EADDRINUSE";
	case ENOMEM: return "ENOMEM";
	case EMFILE: return "EMFILE";
	case ENODEV: return "ENODEV";
	case EEXIST: return "EEXIST";
	case ENOSPC: return "ENOSPC";
	case ENOTTY: return "ENOTTY";
	case ECANCELED: return "ECANCELED";
	}
	snprintf(b, sizeof b, "E%d", e);
	return b;
}

static void put_esc(const char *s, size_t n)
{
	putchar('"');
	for (size_t i = 0; i < n; i++) {
		unsigned char c = s[i];
		if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\t')
			fputs("\\t", stdout);
		else if (c == '\\' || c == '"')
			printf("\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	putchar('"');
}

static int unhex(const char *h, char **out, size_t *n)
{
	size_t l = strlen(h);
	if (l % 2)
		return -1;
	*out = calloc(l / 2 + 1, 1);
	for (size_t i = 0; i < l / 2; i++) {
		unsigned v;
		if (sscanf(h + 2 * i, "%2x", &v) != 1)
			return -1;
		(*out)[i] = (char)v;
	}
	*n = l / 2;
	return 0;
}

/* unhex for step i, which prints "bad-hex" and fails when HEX is not. */
static int step_unhex(int i, const char *h, char **out, size_t *n)
{
	if (unhex(h, out, n)) {
		printf(" s%d bad-hex\n", i);
		return -1;
	}
	return 0;
}

static char *path(const char *rel)
{
	static char b[4][4096];
	static int k;
	k = (k + 1) % 4;
	snprintf(b[k], sizeof b[k], "%s/%s", T, rel);
	return b[k];
}

/* The whole file by read(2) (not sendfile); NULL and errno on failure. */
static char *slurp(const char *p, size_t *n)
{
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, len = 0;
	char *b = malloc(cap);
	for (;;) {
		if (len == cap)
			b = realloc(b, cap *= 2);
		ssize_t r = read(fd, b + len, cap - len);
		if (r < 0) {
			int e = errno;
			close(fd);
			free(b);
			errno = e;
			return NULL;
		}
		if (r == 0)
			break;
		len += r;
	}
	close(fd);
	*n = len;
	return b;
}

static int data(void)
{
	if (data_fd < 0)
		data_fd = open(path("user_events_data"), O_RDWR);
	return data_fd;
}

static void step_write(int i, const char *mode, const char *hex)
{
	char *buf;
	size_t n;
	if (step_unhex(i, hex, &buf, &n))
		return;
	int fl = O_WRONLY | (*mode == 't' ? O_TRUNC : *mode == 'a' ? O_APPEND : 0);
	int fd = open(path("dynamic_events"), fl);
	if (fd < 0) {
		printf(" s%d open %s\n", i, ename(errno));
		free(buf);
		return;
	}
	ssize_t r = write(fd, buf, n);
	int e = errno;
	close(fd);
	free(buf);
	if (r < 0)
		printf(" s%d write %s\n", i, ename(e));
	else
		printf(" s%d write %zd%s\n", i, r, (size_t)r == n ? "" : " (short)");
}

static void step_reg(int i, char *spec)
{
	/* SIZE,FLAGS,BIT,ESIZE,ADDR,HEX */
	char *f[6];
	for (int k = 0; k < 6; k++)
		f[k] = strsep(&spec, ",");
	if (!f[5]) {
		printf(" s%d bad-step\n", i);
		return;
	}
	unsigned size = strtoul(f[0], NULL, 0);
	int tail = strchr(f[0], 't') != NULL;
	char *name = NULL;
	size_t n = 0;
	uint64_t name_ptr;
	if (strcmp(f[5], "-") == 0) {
		name_ptr = 8;
	} else {
		if (step_unhex(i, f[5], &name, &n))
			return;
		name_ptr = (uintptr_t)name;
	}
	size_t alloc = size > sizeof(struct user_reg) ? size : sizeof(struct user_reg);
	if (alloc > 8192)
		alloc = 8192;
	unsigned char *raw = calloc(alloc + 1, 1);
	struct user_reg *r = (struct user_reg *)raw;
	uint64_t addr;
	switch (*f[4]) {
	case 's': addr = (uintptr_t)&words[0]; break;
	case 'm': addr = (uintptr_t)&words[i] + 1; break;
	case 'k': addr = 0xffff888000000000ULL; break;
	default: addr = (uintptr_t)&words[i]; break;
	}
	r->size = size;
	r->flags = strtoul(f[1], NULL, 0);
	r->enable_bit = strtoul(f[2], NULL, 0);
	r->enable_size = strtoul(f[3], NULL, 0);
	r->enable_addr = addr;
	r->name_args = name_ptr;
	if (tail && size > sizeof(struct user_reg))
		raw[size - 1] = 1;
	int fd = data();
	if (fd < 0) {
		printf(" s%d open-data %s\n", i, ename(errno));
	} else if (ioctl(fd, DIAG_IOCSREG, raw) < 0) {
		printf(" s%d reg %s\n", i, ename(errno));
	} else {
		printf(" s%d reg 0 index=%u\n", i, r->write_index);
		regs[nregs].addr = addr;
		regs[nregs].bit = r->enable_bit;
		nregs++;
	}
	free(raw);
	free(name);
}

static void step_del(int i, const char *hex)
{
	char *name;
	size_t n;
	if (step_unhex(i, hex, &name, &n))
		return;
	int fd = data();
	if (fd < 0)
		printf(" s%d open-data %s\n", i, ename(errno));
	else if (ioctl(fd, DIAG_IOCSDEL, name) < 0)
		printf(" s%d del %s\n", i, ename(errno));
	else
		printf(" s%d del 0\n", i);
	free(name);
}

static void step_enable(int i, const char *val, const char *hex)
{
	char *ev;
	size_t n;
	if (step_unhex(i, hex, &ev, &n))
		return;
	char rel[1024];
	snprintf(rel, sizeof rel, "events/%s/enable", ev);
	char *star = strchr(ev, '*');
	if (star && star > ev && star[-1] != '/') {
		/* SYSTEM/PREFIX*: the first event of SYSTEM named PREFIX... */
		*star = 0;
		char *slash = strchr(ev, '/');
		if (slash) {
			*slash = 0;
			char sysd[512];
			snprintf(sysd, sizeof sysd, "events/%s", ev);
			DIR *d = opendir(path(sysd));
			struct dirent *de;
			while (d && (de = readdir(d)))
				if (!strncmp(de->d_name, slash + 1, strlen(slash + 1))) {
					snprintf(rel, sizeof rel, "events/%s/%s/enable", ev, de->d_name);
					break;
				}
			if (d)
				closedir(d);
		}
	}
	free(ev);
	int fd = open(path(rel), O_WRONLY);
	if (fd < 0) {
		printf(" s%d enable-open %s\n", i, ename(errno));
		return;
	}
	ssize_t r = write(fd, val, strlen(val));
	int e = errno;
	close(fd);
	if (r < 0)
		printf(" s%d enable %s\n", i, ename(e));
	else
		printf(" s%d enable %zd\n", i, r);
}

static void disable_all(void)
{
	const char *sys[] = { "events/user_events/enable", "events/user_events_multi/enable" };
	for (int k = 0; k < 2; k++) {
		int fd = open(path(sys[k]), O_WRONLY);
		if (fd >= 0) {
			if (write(fd, "0", 1) < 0) {
				/* nothing enabled there */
			}
			close(fd);
		}
	}
}

static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void show_formats(const char *sys)
{
	char rel[256];
	snprintf(rel, sizeof rel, "events/%s", sys);
	DIR *d = opendir(path(rel));
	if (!d)
		return;
	char *names[256];
	int nn = 0;
	struct dirent *de;
	while ((de = readdir(d)) && nn < 256) {
		if (de->d_name[0] == '.' && (!de->d_name[1] || !strcmp(de->d_name, "..")))
			continue;
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		names[nn++] = strdup(de->d_name);
	}
	closedir(d);
	qsort(names, nn, sizeof *names, cmpstr);
	for (int k = 0; k < nn; k++) {
		char f[512];
		struct stat st;
		snprintf(f, sizeof f, "%s/%s/%s/format", T, rel, names[k]);
		if (stat(f, &st) == 0) {
			size_t n;
			char *b = slurp(f, &n);
			printf(" fmt %s/", sys);
			put_esc(names[k], strlen(names[k]));
			putchar(' ');
			if (!b) {
				printf("%s\n", ename(errno));
			} else {
				/* drop the ID: line */
				char *o = malloc(n + 1);
				size_t m = 0;
				for (size_t p = 0; p < n;) {
					char *nl = memchr(b + p, '\n', n - p);
					size_t l = nl ? (size_t)(nl - (b + p)) + 1 : n - p;
					if (strncmp(b + p, "ID:", 3) != 0) {
						memcpy(o + m, b + p, l);
						m += l;
					}
					p += l;
				}
				put_esc(o, m);
				putchar('\n');
				free(o);
				free(b);
			}
		}
		free(names[k]);
	}
}

static void show_state(void)
{
	size_t n;
	char *b = slurp(path("dynamic_events"), &n);
	printf(" dyn ");
	if (b)
		put_esc(b, n);
	else
		printf("%s", ename(errno));
	putchar('\n');
	free(b);
	/* user_events_status: event lines sorted (the kernel lists in hash order) */
	b = slurp(path("user_events_status"), &n);
	printf(" status ");
	if (!b) {
		printf("%s\n", ename(errno));
	} else {
		char *ls[512], *rest = NULL;
		int nl = 0;
		char *s = b;
		b = realloc(b, n + 1);
		s = b;
		s[n] = 0;
		char *save;
		for (char *l = strtok_r(s, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			if (!strncmp(l, "Active:", 7)) {
				rest = l;
				break;
			}
			if (nl < 512)
				ls[nl++] = l;
		}
		qsort(ls, nl, sizeof *ls, cmpstr);
		for (int k = 0; k < nl; k++) {
			put_esc(ls[k], strlen(ls[k]));
			putchar(' ');
		}
		if (rest) {
			/* the trailer, up to the end of the buffer */
			size_t off = rest - s;
			for (size_t p = off; p < n; p++)
				if (s[p] == 0)
					s[p] = '\n';
			put_esc(rest, n - off);
		}
		putchar('\n');
		free(b);
	}
	show_formats("user_events");
	show_formats("user_events_multi");
}

static void cleanup(void)
{
	for (int k = 0; k < nregs; k++) {
		struct user_unreg u = { .size = sizeof u, .disable_bit = regs[k].bit,
					.disable_addr = regs[k].addr };
		ioctl(data_fd, DIAG_IOCSUNREG, &u);
	}
	nregs = 0;
	disable_all();
	if (data_fd >= 0)
		close(data_fd);
	data_fd = -1;
	memset(words, 0, sizeof words);
	/* Events of a closed file go from a work queue (the kernel) or a
	 * reaper (monfs): truncate until nothing is busy. */
	int e = 0;
	for (int tries = 0; tries < 20000; tries++) {
		int fd = open(path("dynamic_events"), O_WRONLY | O_TRUNC);
		if (fd >= 0) {
			close(fd);
			e = 0;
			break;
		}
		e = errno;
		if (e != EBUSY)
			break;
		usleep(1000);
	}
	size_t n = 0;
	char *b = slurp(path("dynamic_events"), &n);
	printf(" clean %s%s\n", ename(e), b && n == 0 ? "" : " (not empty)");
	free(b);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: ue_grammar TRACINGDIR CASEFILE\n");
		return 2;
	}
	T = argv[1];
	FILE *cf = fopen(argv[2], "r");
	if (!cf) {
		perror(argv[2]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, cf) > 0) {
		line[strcspn(line, "\n")] = 0;
		if (!line[0] || line[0] == '#')
			continue;
		char *save, *id = strtok_r(line, " ", &save);
		printf("case %s\n", id);
		char *st;
		int i = 0;
		while ((st = strtok_r(NULL, " ", &save)) && i < MAXSTEPS) {
			char *kind = strsep(&st, ",");
			if (!st) {
				printf(" s%d bad-step\n", i);
			} else if (!strcmp(kind, "W")) {
				char *mode = strsep(&st, ",");
				step_write(i, mode, st ? st : "");
			} else if (!strcmp(kind, "R")) {
				step_reg(i, st);
			} else if (!strcmp(kind, "D")) {
				step_del(i, st);
			} else if (!strcmp(kind, "E")) {
				char *val = strsep(&st, ",");
				step_enable(i, val, st ? st : "");
			} else {
				printf(" s%d bad-step\n", i);
			}
			i++;
		}
		show_state();
		cleanup();
	}
	printf("end\n");
	return 0;
}
