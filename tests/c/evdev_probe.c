/*
 * evdev_probe: an evdev node (/dev/input/eventN) asked everything, with raw
 * system calls, one line per answer: the call, its result (the return
 * value, or -ERRNO by name) and the data, with no pointers and no times, so
 * that the kernel's answers (scripts/kernel-vm) can be compared with
 * another implementation's line by line.
 *
 *   evdev_probe [--led] NODE      the ioctls, reads, writes, grabs and the
 *                                 revoke (--led: also write EV_LED
 *                                 LED_CAPSL 1 then 0, each with a
 *                                 SYN_REPORT: on a keyboard, a SET_REPORT
 *                                 each)
 *   evdev_probe --events SECS NODE
 *                                 the events read during SECS seconds, as
 *                                 "TYPE CODE VALUE" (decimal) with a blank
 *                                 line after each SYN_REPORT; "open NODE"
 *                                 first, once the node is open
 *
 * Events that the probe's own calls queue (EV_REP of EVIOCSREP, EV_LED of
 * the writes) are read back without blocking and printed as
 * "event TYPE CODE VALUE".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/input.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#ifndef CLOCK_BOOTTIME
#define CLOCK_BOOTTIME 7
#endif

static const char *ename(int e)
{
	const char *n = strerrorname_np(e);
	static char buf[16];
	if (n)
		return n;
	snprintf(buf, sizeof buf, "%d", e);
	return buf;
}

/* the result of a call: N, or -ENAME */
static const char *res(long v)
{
	static char buf[4][40];
	static int i;
	char *b = buf[i++ & 3];
	if (v < 0)
		snprintf(b, 40, "-%s", ename(-v));
	else
		snprintf(b, 40, "%ld", v);
	return b;
}

static long r(long v)
{
	return v < 0 ? -errno : v;
}

static void hex(const unsigned char *b, long n)
{
	for (long i = 0; i < n; i++)
		printf("%02x", b[i]);
}

/* a bitmap's set bits, as numbers (hex) */
static void bits(const unsigned char *b, long n)
{
	int any = 0;
	for (long i = 0; i < n * 8; i++)
		if (b[i / 8] & (1 << (i % 8))) {
			printf("%s%lx", any ? "," : "", i);
			any = 1;
		}
	if (!any)
		printf("-");
}

static int fd;

/* a variable-length read ioctl (REQ's size LEN): its result, the bytes it
 * returned (hex, and as set bits with ASBITS), and whether it wrote past
 * them (the buffer is filled with 0xee first) */
static long vioctl(const char *what, unsigned long req, int len, int asbits)
{
	unsigned char b[1024];
	memset(b, 0xee, sizeof b);
	long v = r(ioctl(fd, req, b));
	printf("%s %s", what, res(v));
	if (v > 0) {
		printf(" hex=");
		hex(b, v);
		if (asbits) {
			printf(" bits=");
			bits(b, v);
		}
	}
	/* anything written past the returned length? */
	long past = 0;
	for (int i = v > 0 ? v : 0; i < len && i < (int)sizeof b; i++)
		if (b[i] != 0xee)
			past = i + 1;
	if (past)
		printf(" written_past_return=%ld", past);
	printf("\n");
	return v;
}

static void drain(const char *when)
{
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	struct input_event ev[64];
	long n;
	int count = 0;
	while ((n = r(read(fd, ev, sizeof ev))) > 0) {
		for (long i = 0; i < n / (long)sizeof ev[0]; i++) {
			printf("event %s %u %u %d\n", when, ev[i].type, ev[i].code, ev[i].value);
			count++;
		}
	}
	printf("drain %s events=%d end=%s\n", when, count, res(n));
	fcntl(fd, F_SETFL, fl);
}

static const char *typename[EV_MAX + 2] = {
	[EV_SYN] = "SYN", [EV_KEY] = "KEY", [EV_REL] = "REL", [EV_ABS] = "ABS",
	[EV_MSC] = "MSC", [EV_SW] = "SW", [EV_LED] = "LED", [EV_SND] = "SND",
	[EV_REP] = "REP", [EV_FF] = "FF", [EV_PWR] = "PWR", [EV_FF_STATUS] = "FF_STATUS",
};

static int events(int secs, const char *node)
{
	fd = open(node, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		printf("open %s %s\n", node, res(-errno));
		return 1;
	}
	printf("open %s\n", node);
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		long left = secs * 1000L - ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (left <= 0)
			break;
		struct pollfd p = { fd, POLLIN, 0 };
		int pr = poll(&p, 1, left);
		if (pr < 0 && errno != EINTR) {
			printf("poll %s\n", res(-errno));
			return 1;
		}
		if (pr <= 0)
			continue;
		if (p.revents & (POLLERR | POLLHUP)) {
			printf("poll revents %#x\n", p.revents);
			return 1;
		}
		struct input_event ev[64];
		long n;
		while ((n = r(read(fd, ev, sizeof ev))) > 0)
			for (long i = 0; i < n / (long)sizeof ev[0]; i++) {
				printf("%u %u %d\n", ev[i].type, ev[i].code, ev[i].value);
				if (ev[i].type == EV_SYN && ev[i].code == SYN_REPORT)
					printf("\n");
			}
		if (n != -EAGAIN) {
			printf("read %s\n", res(n));
			return 1;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "--events"))
		return events(atoi(argv[2]), argv[3]);
	int led = 0;
	if (argc > 1 && !strcmp(argv[1], "--led")) {
		led = 1;
		argv++;
		argc--;
	}
	if (argc != 2) {
		fprintf(stderr, "usage: evdev_probe [--led] NODE | --events SECS NODE\n");
		return 2;
	}
	const char *node = argv[1];
	fd = open(node, O_RDWR);
	if (fd < 0) {
		printf("open %s %s\n", node, res(-errno));
		return 1;
	}
	char buf[1024];
	long v;
	int iv;

	/* identity */
	iv = -1;
	v = r(ioctl(fd, EVIOCGVERSION, &iv));
	printf("EVIOCGVERSION %s %#x\n", res(v), iv);
	struct input_id id;
	memset(&id, 0, sizeof id);
	v = r(ioctl(fd, EVIOCGID, &id));
	printf("EVIOCGID %s bustype=%04x vendor=%04x product=%04x version=%04x\n", res(v),
	       id.bustype, id.vendor, id.product, id.version);
	static const struct {
		const char *name;
		int nr;
	} strs[] = { { "EVIOCGNAME", 0x06 }, { "EVIOCGPHYS", 0x07 }, { "EVIOCGUNIQ", 0x08 } };
	for (unsigned i = 0; i < sizeof strs / sizeof strs[0]; i++) {
		memset(buf, 0xee, sizeof buf);
		v = r(ioctl(fd, _IOC(_IOC_READ, 'E', strs[i].nr, sizeof buf), buf));
		printf("%s(%zu) %s", strs[i].name, sizeof buf, res(v));
		if (v > 0) {
			printf(" hex=");
			hex((unsigned char *)buf, v);
			printf(" str=\"%.*s\"", (int)strnlen(buf, v), buf);
		}
		printf("\n");
		memset(buf, 0xee, sizeof buf);
		v = r(ioctl(fd, _IOC(_IOC_READ, 'E', strs[i].nr, 4), buf));
		printf("%s(4) %s hex=", strs[i].name, res(v));
		hex((unsigned char *)buf, 6);
		printf(" (6 bytes shown)\n");
		memset(buf, 0xee, sizeof buf);
		v = r(ioctl(fd, _IOC(_IOC_READ, 'E', strs[i].nr, 0), buf));
		printf("%s(0) %s\n", strs[i].name, res(v));
	}
	vioctl("EVIOCGPROP(1024)", EVIOCGPROP(1024), 1024, 1);
	vioctl("EVIOCGPROP(1)", EVIOCGPROP(1), 1, 1);

	/* capabilities */
	for (int t = 0; t <= EV_MAX + 1; t++) {
		char what[64];
		const char *tn = t <= EV_MAX + 1 && typename[t] ? typename[t] : "?";
		snprintf(what, sizeof what, "EVIOCGBIT(%#x %s,1024)", t, tn);
		vioctl(what, EVIOCGBIT(t, 1024), 1024, 1);
		snprintf(what, sizeof what, "EVIOCGBIT(%#x %s,1)", t, tn);
		vioctl(what, EVIOCGBIT(t, 1), 1, 1);
	}
	/* a length that is not a multiple of sizeof(long) */
	vioctl("EVIOCGBIT(0x1 KEY,5)", EVIOCGBIT(EV_KEY, 5), 5, 1);
	vioctl("EVIOCGBIT(0x1 KEY,0)", EVIOCGBIT(EV_KEY, 0), 0, 1);
	/* the current state */
	vioctl("EVIOCGKEY(1024)", EVIOCGKEY(1024), 1024, 1);
	vioctl("EVIOCGKEY(1)", EVIOCGKEY(1), 1, 1);
	vioctl("EVIOCGLED(1024)", EVIOCGLED(1024), 1024, 1);
	vioctl("EVIOCGSW(1024)", EVIOCGSW(1024), 1024, 1);
	vioctl("EVIOCGSND(1024)", EVIOCGSND(1024), 1024, 1);

	/* absolute axes: each one set, and the first unset one */
	unsigned char absbits[ABS_MAX / 8 + 1];
	memset(absbits, 0, sizeof absbits);
	ioctl(fd, EVIOCGBIT(EV_ABS, sizeof absbits), absbits);
	int unset_done = 0;
	for (int a = 0; a <= ABS_MAX; a++) {
		int set = absbits[a / 8] & (1 << (a % 8));
		if (!set && unset_done)
			continue;
		if (!set)
			unset_done = 1;
		struct input_absinfo ai;
		memset(&ai, 0xee, sizeof ai);
		v = r(ioctl(fd, EVIOCGABS(a), &ai));
		printf("EVIOCGABS(%#x)%s %s", a, set ? "" : " unset", res(v));
		if (v >= 0)
			printf(" value=%d min=%d max=%d fuzz=%d flat=%d resolution=%d", ai.value, ai.minimum,
			       ai.maximum, ai.fuzz, ai.flat, ai.resolution);
		printf("\n");
	}
	/* EVIOCGABS with another size: EVIOCGBIT(EV_MAX + 1, 8) has its number */
	memset(buf, 0xee, sizeof buf);
	v = r(ioctl(fd, _IOC(_IOC_READ, 'E', 0x40, 8), buf));
	printf("EVIOCGABS(0)size8 %s hex=", res(v));
	hex((unsigned char *)buf, 12);
	printf(" (12 bytes shown)\n");

	/* keycodes (hid-input: the scancode is the HID usage) */
	unsigned int kc[2] = { 0x70004, 0xeeee };
	v = r(ioctl(fd, EVIOCGKEYCODE, kc));
	printf("EVIOCGKEYCODE(0x70004) %s keycode=%u\n", res(v), kc[1]);
	kc[0] = 0xffff0000;
	kc[1] = 0xeeee;
	v = r(ioctl(fd, EVIOCGKEYCODE, kc));
	printf("EVIOCGKEYCODE(0xffff0000) %s keycode=%u\n", res(v), kc[1]);
	for (int i = 0; i < 3; i++) {
		struct input_keymap_entry ke;
		memset(&ke, 0, sizeof ke);
		ke.flags = INPUT_KEYMAP_BY_INDEX;
		ke.index = i;
		v = r(ioctl(fd, EVIOCGKEYCODE_V2, &ke));
		printf("EVIOCGKEYCODE_V2(index %d) %s", i, res(v));
		if (v >= 0) {
			printf(" keycode=%u index=%u len=%u scancode=", ke.keycode, ke.index, ke.len);
			hex(ke.scancode, ke.len);
		}
		printf("\n");
	}
	iv = -1;
	v = r(ioctl(fd, EVIOCGEFFECTS, &iv));
	printf("EVIOCGEFFECTS %s %d\n", res(v), iv);
	printf("EVIOCRMFF(0) %s\n", res(r(ioctl(fd, EVIOCRMFF, 0))));

	/* autorepeat */
	unsigned int rep[2] = { 0xeeee, 0xeeee }, old[2];
	v = r(ioctl(fd, EVIOCGREP, rep));
	printf("EVIOCGREP %s delay=%u period=%u\n", res(v), rep[0], rep[1]);
	old[0] = rep[0];
	old[1] = rep[1];
	unsigned int nrep[2] = { 500, 50 };
	printf("EVIOCSREP(500,50) %s\n", res(r(ioctl(fd, EVIOCSREP, nrep))));
	rep[0] = rep[1] = 0xeeee;
	v = r(ioctl(fd, EVIOCGREP, rep));
	printf("EVIOCGREP %s delay=%u period=%u\n", res(v), rep[0], rep[1]);
	if (v == 0) {
		printf("EVIOCSREP(restore %u,%u) %s\n", old[0], old[1], res(r(ioctl(fd, EVIOCSREP, old))));
		v = r(ioctl(fd, EVIOCGREP, rep));
		printf("EVIOCGREP %s delay=%u period=%u\n", res(v), rep[0], rep[1]);
	}
	drain("after_rep");

	/* event masks (per client) */
	static const int mtypes[] = { 0, EV_KEY, EV_REL, EV_ABS, EV_MSC, EV_SW, EV_LED, EV_SND, EV_FF, EV_REP, EV_MAX + 1 };
	for (unsigned i = 0; i < sizeof mtypes / sizeof mtypes[0]; i++) {
		unsigned char m[128];
		memset(m, 0xee, sizeof m);
		struct input_mask im = { .type = mtypes[i], .codes_size = sizeof m, .codes_ptr = (unsigned long)m };
		v = r(ioctl(fd, EVIOCGMASK, &im));
		printf("EVIOCGMASK(type %#x,128) %s", mtypes[i], res(v));
		if (v >= 0) {
			int last = 0;
			for (int k = 0; k < (int)sizeof m; k++)
				if (m[k] != 0xee)
					last = k + 1;
			printf(" written=%d hex=", last);
			hex(m, last);
		}
		printf("\n");
	}
	{
		unsigned char m[8] = { 0 };
		struct input_mask im = { .type = EV_MSC, .codes_size = sizeof m, .codes_ptr = (unsigned long)m };
		printf("EVIOCSMASK(MSC none) %s\n", res(r(ioctl(fd, EVIOCSMASK, &im))));
		memset(m, 0xee, sizeof m);
		v = r(ioctl(fd, EVIOCGMASK, &im));
		printf("EVIOCGMASK(MSC,8) %s hex=", res(v));
		hex(m, sizeof m);
		printf("\n");
		memset(m, 0xff, sizeof m);
		printf("EVIOCSMASK(MSC all) %s\n", res(r(ioctl(fd, EVIOCSMASK, &im))));
		memset(m, 0xee, sizeof m);
		v = r(ioctl(fd, EVIOCGMASK, &im));
		printf("EVIOCGMASK(MSC,8) %s hex=", res(v));
		hex(m, sizeof m);
		printf("\n");
		im.type = EV_REP;
		printf("EVIOCSMASK(REP) %s\n", res(r(ioctl(fd, EVIOCSMASK, &im))));
		im.type = EV_MAX + 1;
		printf("EVIOCSMASK(EV_MAX+1) %s\n", res(r(ioctl(fd, EVIOCSMASK, &im))));
		im.type = EV_MSC;
		im.codes_size = 0;
		printf("EVIOCSMASK(MSC size 0) %s\n", res(r(ioctl(fd, EVIOCSMASK, &im))));
		memset(m, 0xee, sizeof m);
		im.codes_size = sizeof m;
		v = r(ioctl(fd, EVIOCGMASK, &im));
		printf("EVIOCGMASK(MSC,8) %s hex=", res(v));
		hex(m, sizeof m);
		printf("\n");
		memset(m, 0xff, sizeof m);
		ioctl(fd, EVIOCSMASK, &im);
	}

	/* clocks */
	static const struct {
		const char *name;
		int id;
	} clocks[] = { { "REALTIME", CLOCK_REALTIME }, { "MONOTONIC", CLOCK_MONOTONIC },
		       { "BOOTTIME", CLOCK_BOOTTIME }, { "PROCESS_CPUTIME_ID", CLOCK_PROCESS_CPUTIME_ID },
		       { "MONOTONIC_RAW", CLOCK_MONOTONIC_RAW }, { "-1", -1 }, { "REALTIME", CLOCK_REALTIME } };
	for (unsigned i = 0; i < sizeof clocks / sizeof clocks[0]; i++) {
		iv = clocks[i].id;
		printf("EVIOCSCLOCKID(%s) %s\n", clocks[i].name, res(r(ioctl(fd, EVIOCSCLOCKID, &iv))));
	}

	/* grabs */
	int fd2 = open(node, O_RDWR);
	printf("open_second %s\n", res(fd2 < 0 ? -errno : 0));
	printf("EVIOCGRAB(1) fd1 %s\n", res(r(ioctl(fd, EVIOCGRAB, 1))));
	printf("EVIOCGRAB(1) fd1 again %s\n", res(r(ioctl(fd, EVIOCGRAB, 1))));
	printf("EVIOCGRAB(1) fd2 %s\n", res(r(ioctl(fd2, EVIOCGRAB, 1))));
	printf("EVIOCGRAB(0) fd2 %s\n", res(r(ioctl(fd2, EVIOCGRAB, 0))));
	printf("EVIOCGRAB(0) fd1 %s\n", res(r(ioctl(fd, EVIOCGRAB, 0))));
	printf("EVIOCGRAB(0) fd1 again %s\n", res(r(ioctl(fd, EVIOCGRAB, 0))));
	printf("EVIOCGRAB(1) fd2 %s\n", res(r(ioctl(fd2, EVIOCGRAB, 1))));
	printf("EVIOCGRAB(1) fd1 %s\n", res(r(ioctl(fd, EVIOCGRAB, 1))));
	printf("close fd2 (the grabber) %s\n", res(r(close(fd2))));
	printf("EVIOCGRAB(1) fd1 after close %s\n", res(r(ioctl(fd, EVIOCGRAB, 1))));
	printf("EVIOCGRAB(0) fd1 %s\n", res(r(ioctl(fd, EVIOCGRAB, 0))));
	printf("EVIOCGRAB(2) fd1 %s\n", res(r(ioctl(fd, EVIOCGRAB, 2))));
	printf("EVIOCGRAB(0) fd1 %s\n", res(r(ioctl(fd, EVIOCGRAB, 0))));

	/* unknown and malformed requests */
	printf("ioctl _IO('E',0x99) %s\n", res(r(ioctl(fd, _IO('E', 0x99), buf))));
	printf("ioctl _IOR('E',0x99,int) %s\n", res(r(ioctl(fd, _IOR('E', 0x99, int), buf))));
	printf("ioctl _IOW('E',0x99,int) %s\n", res(r(ioctl(fd, _IOW('E', 0x99, int), buf))));
	printf("ioctl _IOR('X',1,int) %s\n", res(r(ioctl(fd, _IOR('X', 1, int), buf))));
	printf("ioctl _IOR('E',0x01,long) %s\n", res(r(ioctl(fd, _IOR('E', 0x01, long), buf))));
	printf("ioctl EVIOCGVERSION NULL %s\n", res(r(ioctl(fd, EVIOCGVERSION, NULL))));
	printf("ioctl EVIOCGNAME(16) NULL %s\n", res(r(ioctl(fd, EVIOCGNAME(16), NULL))));
	printf("ioctl TCGETS %s\n", res(r(ioctl(fd, 0x5401, buf))));
	printf("ioctl FIONREAD %s\n", res(r(ioctl(fd, FIONREAD, &iv))));

	/* reads and writes */
	int fl = fcntl(fd, F_GETFL);
	fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	struct input_event ev[2];
	printf("sizeof_input_event %zu\n", sizeof ev[0]);
	printf("read(0) nonblock %s\n", res(r(read(fd, ev, 0))));
	printf("read(%zu) nonblock %s\n", sizeof ev[0] - 1, res(r(read(fd, ev, sizeof ev[0] - 1))));
	printf("read(%zu) nonblock %s\n", sizeof ev[0], res(r(read(fd, ev, sizeof ev[0]))));
	printf("read(%zu) nonblock %s\n", sizeof ev[0] + 1, res(r(read(fd, ev, sizeof ev[0] + 1))));
	fcntl(fd, F_SETFL, fl);
	printf("read(0) blocking %s\n", res(r(read(fd, ev, 0))));
	printf("read(%zu) blocking %s\n", sizeof ev[0] - 1, res(r(read(fd, ev, sizeof ev[0] - 1))));
	printf("write(0) %s\n", res(r(write(fd, ev, 0))));
	printf("write(%zu) %s\n", sizeof ev[0] - 1, res(r(write(fd, ev, sizeof ev[0] - 1))));
	struct pollfd p = { fd, POLLIN | POLLOUT, 0 };
	v = r(poll(&p, 1, 0));
	printf("poll %s revents=%#x\n", res(v), p.revents);
	if (led) {
		for (int val = 1; val >= 0; val--) {
			memset(ev, 0, sizeof ev);
			ev[0].type = EV_LED;
			ev[0].code = LED_CAPSL;
			ev[0].value = val;
			ev[1].type = EV_SYN;
			ev[1].code = SYN_REPORT;
			printf("write(EV_LED LED_CAPSL %d + SYN_REPORT) %s\n", val, res(r(write(fd, ev, sizeof ev))));
			usleep(500000);
			char what[32];
			snprintf(what, sizeof what, "after_capsl_%d", val);
			drain(what);
			memset(buf, 0xee, sizeof buf);
			v = r(ioctl(fd, EVIOCGLED(sizeof buf), buf));
			printf("EVIOCGLED %s hex=", res(v));
			hex((unsigned char *)buf, v > 0 ? v : 0);
			printf("\n");
		}
		/* an event the device does not have: LED_MAIL; and a key event */
		memset(ev, 0, sizeof ev);
		ev[0].type = EV_LED;
		ev[0].code = LED_MAIL;
		ev[0].value = 1;
		ev[1].type = EV_SYN;
		printf("write(EV_LED LED_MAIL 1 + SYN_REPORT) %s\n", res(r(write(fd, ev, sizeof ev))));
		usleep(300000);
		drain("after_mail");
	}
	/* one event and a half */
	memset(ev, 0, sizeof ev);
	printf("write(%zu) %s\n", sizeof ev[0] + 5, res(r(write(fd, ev, sizeof ev[0] + 5))));
	drain("after_syn_write");

	/* revoke */
	printf("EVIOCREVOKE(1) %s\n", res(r(ioctl(fd, EVIOCREVOKE, 1))));
	printf("EVIOCREVOKE(0) %s\n", res(r(ioctl(fd, EVIOCREVOKE, 0))));
	printf("EVIOCREVOKE(0) again %s\n", res(r(ioctl(fd, EVIOCREVOKE, 0))));
	printf("read(%zu) revoked %s\n", sizeof ev[0], res(r(read(fd, ev, sizeof ev[0]))));
	printf("read(0) revoked %s\n", res(r(read(fd, ev, 0))));
	printf("write(%zu) revoked %s\n", sizeof ev[0], res(r(write(fd, ev, sizeof ev[0]))));
	iv = -1;
	printf("EVIOCGVERSION revoked %s\n", res(r(ioctl(fd, EVIOCGVERSION, &iv))));
	printf("EVIOCGRAB(1) revoked %s\n", res(r(ioctl(fd, EVIOCGRAB, 1))));
	p.fd = fd;
	p.events = POLLIN | POLLOUT;
	p.revents = 0;
	v = r(poll(&p, 1, 0));
	printf("poll revoked %s revents=%#x\n", res(v), p.revents);
	printf("close revoked %s\n", res(r(close(fd))));
	/* a new open after a revoke works */
	fd = open(node, O_RDONLY);
	printf("open_after_revoke %s\n", res(fd < 0 ? -errno : 0));
	iv = -1;
	v = r(ioctl(fd, EVIOCGVERSION, &iv));
	printf("EVIOCGVERSION %s %#x\n", res(v), iv);
	close(fd);
	return 0;
}
