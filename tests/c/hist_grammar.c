/*
 * hist_grammar: replay hist trigger cases against one tracefs and print
 * what happened, for scripts/kernel-vm (the same file of cases runs against
 * the kernel's tracefs and monfs's, and compare.py diffs the outputs).
 * Cases come from scripts/lib/hist_fuzz.py.
 *
 *   hist_grammar TRACINGDIR CASEFILE
 *
 * A case is one line: an id, then steps separated by spaces:
 *   T,E,HEX   append the bytes HEX ("-": none) to events/sched/EVENT/trigger
 *             (E: s sched_switch, w sched_wakeup), opened O_WRONLY|O_APPEND
 *             as `echo >>` does, in one write(2)
 *   S,HEX     append HEX to synthetic_events the same way
 * Per step it prints the write's result (byte count or errno name); then,
 * per event, the `trigger` file and the `# trigger info:` lines of `hist`,
 * then `synthetic_events` and `error_log` without its timestamps. error_log
 * is cleared by opening it O_WRONLY|O_TRUNC (the kernel clears it so). Then
 * it cleans up: every trigger line read back is written again with `!` (in
 * rounds, since a histogram whose variables another one uses cannot go
 * first; what is left then, "trunc", goes with an O_TRUNC open of the
 * trigger files), synthetic_events is truncated, error_log cleared, and it
 * prints how many trigger lines are left ("clean 0" when none).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *tdir;
static const char *const EVENTS[2] = {"sched_switch", "sched_wakeup"};

static const char *ename(int e)
{
	switch (e) {
	case EINVAL: return "EINVAL";
	case ENOENT: return "ENOENT";
	case EEXIST: return "EEXIST";
	case EBUSY: return "EBUSY";
	case ENOMEM: return "ENOMEM";
	case ENOSPC: return "ENOSPC";
	case E2BIG: return "E2BIG";
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case ENODEV: return "ENODEV";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENOSYS: return "ENOSYS";
	case EFAULT: return "EFAULT";
	case ERANGE: return "ERANGE";
	case EIO: return "EIO";
	default: return NULL;
	}
}

static void pr_err(int e)
{
	const char *n = ename(e);
	if (n)
		printf("-%s", n);
	else
		printf("-errno%d", e);
}

static char *path(const char *rel)
{
	static char buf[2][4096];
	static int i;
	i ^= 1;
	snprintf(buf[i], sizeof buf[i], "%s/%s", tdir, rel);
	return buf[i];
}

static char *trig_path(int ev)
{
	static char rel[256];
	snprintf(rel, sizeof rel, "events/sched/%s/trigger", EVENTS[ev]);
	return path(rel);
}

/* The whole file with read(2), NUL-terminated; NULL (errno set) on error. */
static char *slurp(const char *p)
{
	int fd = open(p, O_RDONLY);
	if (fd < 0)
		return NULL;
	size_t cap = 65536, len = 0;
	char *b = malloc(cap + 1);
	for (;;) {
		if (len == cap) {
			cap *= 2;
			b = realloc(b, cap + 1);
		}
		ssize_t n = read(fd, b + len, cap - len);
		if (n < 0) {
			int e = errno;
			close(fd);
			free(b);
			errno = e;
			return NULL;
		}
		if (n == 0)
			break;
		len += n;
	}
	close(fd);
	b[len] = 0;
	return b;
}

/* write(2) of LEN bytes to P opened O_WRONLY|FLAGS: the count or -errno */
static long put(const char *p, int flags, const char *buf, size_t len)
{
	int fd = open(p, O_WRONLY | flags);
	if (fd < 0)
		return -1000 - errno;
	ssize_t n = write(fd, buf, len);
	long r = n < 0 ? -errno : n;
	close(fd);
	return r;
}

static void pr_res(long r)
{
	if (r <= -1000) {
		printf(" open");
		pr_err((int)(-r - 1000));
	} else if (r < 0) {
		pr_err((int)-r);
	} else {
		printf("%ld", r);
	}
	printf("\n");
}

static size_t unhex(const char *h, char *out)
{
	size_t n = 0;
	if (strcmp(h, "-") == 0)
		return 0;
	for (; h[0] && h[1]; h += 2) {
		unsigned v;
		sscanf(h, "%2x", &v);
		out[n++] = (char)v;
	}
	return n;
}

/* print FILE's lines as " TAG LINE"; those starting with PREFIX only when
 * PREFIX is set; error_log's "[   12.345678] " timestamps dropped */
static void show(const char *tag, const char *p, const char *prefix, int strip_ts)
{
	char *b = slurp(p);
	if (!b) {
		printf(" %s read", tag);
		pr_err(errno);
		printf("\n");
		return;
	}
	char *save, *ln;
	for (ln = strtok_r(b, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
		if (prefix && strncmp(ln, prefix, strlen(prefix)) != 0)
			continue;
		if (strip_ts && ln[0] == '[') {
			char *e = strstr(ln, "] ");
			if (e)
				ln = e + 2;
		}
		printf(" %s %s\n", tag, ln);
	}
	free(b);
}

/*
 * The trigger lines of both events (comments aside). remove: write `!` and
 * each line (its " [active]"/" [paused]" dropped), one cleanup round, and
 * return how many of those writes failed; else return how many lines there
 * are.
 */
static int trigger_lines(int remove)
{
	int left = 0;
	for (int ev = 0; ev < 2; ev++) {
		char *b = slurp(trig_path(ev));
		if (!b)
			continue;
		char *save, *ln;
		for (ln = strtok_r(b, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
			if (ln[0] == '#')
				continue;
			if (!remove) {
				left++;
				continue;
			}
			char cmd[8192];
			size_t l = strlen(ln);
			const char *sfx[] = {" [active]", " [paused]"};
			for (int i = 0; i < 2; i++) {
				size_t s = strlen(sfx[i]);
				if (l >= s && strcmp(ln + l - s, sfx[i]) == 0)
					l -= s;
			}
			int n = snprintf(cmd, sizeof cmd, "!%.*s", (int)l, ln);
			if (put(trig_path(ev), O_APPEND, cmd, n) < 0)
				left++;
		}
		free(b);
	}
	return left;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: hist_grammar TRACINGDIR CASEFILE\n");
		return 2;
	}
	tdir = argv[1];
	FILE *f = fopen(argv[2], "r");
	if (!f) {
		perror(argv[2]);
		return 2;
	}
	/* Both events stay enabled while the cases run, so that adding and
	 * removing hist triggers never registers or unregisters their
	 * tracepoints: each of those patches kernel text (int3 breakpoints),
	 * and a 6.12 guest under qemu's TCG once died of an int3 oops in
	 * ttwu_do_activate mid-run. The trigger text does not depend on it. */
	for (int ev = 0; ev < 2; ev++) {
		char rel[256];
		snprintf(rel, sizeof rel, "events/sched/%s/enable", EVENTS[ev]);
		if (put(path(rel), 0, "1", 1) != 1)
			fprintf(stderr, "hist_grammar: could not enable %s\n", EVENTS[ev]);
	}
	put(path("error_log"), O_TRUNC, "", 0);
	static char line[1 << 16], buf[1 << 15];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		if (!line[0] || line[0] == '#')
			continue;
		char *save, *tok = strtok_r(line, " ", &save);
		printf("case %s\n", tok);
		int step = 0;
		while ((tok = strtok_r(NULL, " ", &save))) {
			char *p;
			size_t n;
			if (tok[0] == 'T' && tok[1] == ',' && (tok[2] == 's' || tok[2] == 'w') && tok[3] == ',') {
				n = unhex(tok + 4, buf);
				p = trig_path(tok[2] == 'w');
			} else if (tok[0] == 'S' && tok[1] == ',') {
				n = unhex(tok + 2, buf);
				p = path("synthetic_events");
			} else {
				printf(" step %d bad\n", step++);
				continue;
			}
			printf(" step %d ", step++);
			pr_res(put(p, O_APPEND, buf, n));
		}
		for (int ev = 0; ev < 2; ev++) {
			char tag[32], rel[256];
			snprintf(tag, sizeof tag, "%c.trigger", "sw"[ev]);
			show(tag, trig_path(ev), NULL, 0);
			snprintf(tag, sizeof tag, "%c.hist", "sw"[ev]);
			snprintf(rel, sizeof rel, "events/sched/%s/hist", EVENTS[ev]);
			show(tag, path(rel), "# trigger info:", 0);
		}
		show("synth", path("synthetic_events"), NULL, 0);
		show("err", path("error_log"), NULL, 1);
		long r = put(path("error_log"), O_TRUNC, "", 0);
		if (r < 0) {
			printf(" err clear ");
			pr_res(r);
		}
		for (int i = 0; i < 4 && trigger_lines(1) > 0; i++)
			;
		/* What `!` cannot remove (a trigger whose read-back text does not
		 * parse again): an O_TRUNC open of the trigger file, which removes
		 * the event's triggers; sched_switch first, whose histograms may
		 * use sched_wakeup's variables. */
		if (trigger_lines(0) > 0) {
			printf(" trunc\n");
			for (int ev = 0; ev < 2; ev++)
				put(trig_path(ev), O_TRUNC, "", 0);
		}
		put(path("synthetic_events"), O_TRUNC, "", 0);
		put(path("error_log"), O_TRUNC, "", 0);
		printf(" clean %d\n", trigger_lines(0));
		fflush(stdout);
	}
	for (int ev = 0; ev < 2; ev++) {
		char rel[256];
		snprintf(rel, sizeof rel, "events/sched/%s/enable", EVENTS[ev]);
		put(path(rel), 0, "0", 1);
	}
	printf("end\n");
	return 0;
}
