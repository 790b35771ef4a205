/* usbfs_hostile: raw usbdevfs ioctls with bad arguments on a monfs usbfs
 * node, as a hostile or broken caller makes them. Prints one line per
 * case, `NAME ERRNO-NAME` (or `NAME ok`), for the test to compare with
 * what devio.c answers.
 *
 *   usbfs_hostile DEVNODE cases       the argument checks (device: the
 *                                     usbfs_peer.py device, interface 1)
 *   usbfs_hostile DEVNODE unreaped N  N pending bulk IN URBs of 100 KiB,
 *                                     then close without reaping
 *   usbfs_hostile DEVNODE opens N     open and close N times, then keep
 *                                     500 open at once
 *   usbfs_hostile DEVNODE unplugwait  submit a vendor control request the
 *                                     device never answers, print "ready",
 *                                     wait in poll for the unplug; print
 *                                     the poll mask, the reaped status and
 *                                     the next reap's error
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

static const char *ename(int e)
{
	switch (e) {
	case 0: return "ok";
	case EFAULT: return "EFAULT";
	case EINVAL: return "EINVAL";
	case ENOMEM: return "ENOMEM";
	case ENOENT: return "ENOENT";
	case EPERM: return "EPERM";
	case ENOTTY: return "ENOTTY";
	case EBUSY: return "EBUSY";
	case ENODEV: return "ENODEV";
	case EAGAIN: return "EAGAIN";
	case EPIPE: return "EPIPE";
	case ENODATA: return "ENODATA";
	case ETIMEDOUT: return "ETIMEDOUT";
	}
	static char b[32];
	snprintf(b, sizeof b, "E%d", e);
	return b;
}

static void show(const char *name, int r)
{
	printf("%s %s\n", name, r < 0 ? ename(errno) : "ok");
}

static int dev_open(const char *p, int flags)
{
	int fd = open(p, flags);
	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", p, strerror(errno));
		exit(1);
	}
	return fd;
}

static void setup(int fd)
{
	unsigned intf = 1;
	struct usbdevfs_setinterface si = { 1, 1 };
	if (ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf) < 0 ||
	    ioctl(fd, USBDEVFS_SETINTERFACE, &si) < 0) {
		perror("claim/setinterface");
		exit(1);
	}
}

static int submit_bulk(int fd, struct usbdevfs_urb *u, unsigned char ep, void *buf, int len)
{
	memset(u, 0, sizeof *u);
	u->type = USBDEVFS_URB_TYPE_BULK;
	u->endpoint = ep;
	u->buffer = buf;
	u->buffer_length = len;
	return ioctl(fd, USBDEVFS_SUBMITURB, u);
}

static void cases(const char *p)
{
	int ro = dev_open(p, O_RDONLY);
	unsigned caps;
	show("readonly-ioctl", ioctl(ro, USBDEVFS_GET_CAPABILITIES, &caps));
	close(ro);

	int fd = dev_open(p, O_RDWR);
	show("unknown-ioctl", ioctl(fd, _IO('U', 99)));
	unsigned big = 64;
	show("claim-64", ioctl(fd, USBDEVFS_CLAIMINTERFACE, &big));
	unsigned five = 5;
	show("claim-absent", ioctl(fd, USBDEVFS_CLAIMINTERFACE, &five));
	setup(fd);

	/* The URB struct itself unreadable. */
	show("submit-wild-urb", ioctl(fd, USBDEVFS_SUBMITURB, (void *)0x10));
	/* Unmapped memory. */
	void *gone = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(gone, 4096);
	show("submit-unmapped-urb", ioctl(fd, USBDEVFS_SUBMITURB, gone));

	struct usbdevfs_urb u;
	static unsigned char buf[4096];
	/* An OUT buffer that cannot be read. */
	show("submit-wild-out-buffer", submit_bulk(fd, &u, 0x02, (void *)0x10, 64));
	/* NULL buffer with a length. */
	show("submit-null-buffer", submit_bulk(fd, &u, 0x02, NULL, 64));
	/* Lengths past USBFS_XFER_MAX and past usbfs_memory_mb. */
	show("submit-huge-length", submit_bulk(fd, &u, 0x81, buf, 0x7fff0000));
	show("submit-64MiB", submit_bulk(fd, &u, 0x81, buf, 64 << 20));
	/* No such endpoint. */
	show("submit-no-endpoint", submit_bulk(fd, &u, 0x8f, buf, 8));
	/* Bad flags and type. */
	memset(&u, 0, sizeof u);
	u.type = USBDEVFS_URB_TYPE_BULK;
	u.endpoint = 0x02;
	u.flags = 0x1000;
	show("submit-bad-flags", ioctl(fd, USBDEVFS_SUBMITURB, &u));
	u.flags = 0;
	u.type = 9;
	show("submit-bad-type", ioctl(fd, USBDEVFS_SUBMITURB, &u));
	/* Isochronous: too many packets, a packet too long, descriptors
	 * that cannot be read. */
	struct usbdevfs_urb *iu = calloc(1, sizeof *iu + 200 * sizeof(struct usbdevfs_iso_packet_desc));
	iu->type = USBDEVFS_URB_TYPE_ISO;
	iu->endpoint = 0x83;
	iu->flags = USBDEVFS_URB_ISO_ASAP;
	iu->buffer = buf;
	iu->number_of_packets = 129;
	for (int i = 0; i < 200; i++)
		iu->iso_frame_desc[i].length = 8;
	show("iso-129-packets", ioctl(fd, USBDEVFS_SUBMITURB, iu));
	iu->number_of_packets = 1000000;
	show("iso-million-packets", ioctl(fd, USBDEVFS_SUBMITURB, iu));
	iu->number_of_packets = 0;
	show("iso-0-packets", ioctl(fd, USBDEVFS_SUBMITURB, iu));
	iu->number_of_packets = 2;
	iu->iso_frame_desc[1].length = 98305;
	show("iso-long-packet", ioctl(fd, USBDEVFS_SUBMITURB, iu));
	/* The URB at the end of a page, its descriptors on the next,
	 * unmapped one. */
	unsigned char *pg = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	munmap(pg + 4096, 4096);
	struct usbdevfs_urb *edge = (void *)(pg + 4096 - sizeof *edge);
	memset(edge, 0, sizeof *edge);
	edge->type = USBDEVFS_URB_TYPE_ISO;
	edge->endpoint = 0x83;
	edge->buffer = buf;
	edge->number_of_packets = 4;
	show("iso-wild-descriptors", ioctl(fd, USBDEVFS_SUBMITURB, edge));
	/* Control: an OUT data stage that cannot be read, an IN one that
	 * cannot be written (the transfer happens, the copy fails). */
	struct usbdevfs_ctrltransfer c = { 0x40, 0x02, 0, 0, 8, 1000, (void *)0x10 };
	show("control-wild-out", ioctl(fd, USBDEVFS_CONTROL, &c));
	struct usbdevfs_ctrltransfer ci = { 0xc0, 0x01, 0, 0, 8, 1000, (void *)0x10 };
	show("control-wild-in", ioctl(fd, USBDEVFS_CONTROL, &ci));
	struct usbdevfs_ctrltransfer cl = { 0xc0, 0x01, 0, 0, 8192, 1000, buf };
	show("control-too-long", ioctl(fd, USBDEVFS_CONTROL, &cl));
	struct usbdevfs_ctrltransfer cs = { 0xc0, 0x03, 0, 0, 4, 1000, buf };
	show("control-stall", ioctl(fd, USBDEVFS_CONTROL, &cs));
	/* An IN URB whose buffer cannot be written: submitted, then the reap
	 * fails and the URB is gone. */
	struct usbdevfs_ctrltransfer co = { 0x40, 0x02, 0, 0, 0, 1000, NULL };
	(void)co;
	unsigned char data[5] = { 1, 2, 3, 4, 5 };
	struct usbdevfs_bulktransfer bo = { 0x02, 5, 1000, data };
	show("bulk-out", ioctl(fd, USBDEVFS_BULK, &bo));
	show("submit-in-wild-buffer", submit_bulk(fd, &u, 0x81, (void *)0x10, 64));
	struct pollfd pf = { fd, POLLOUT, 0 };
	poll(&pf, 1, 5000);
	void *got = NULL;
	show("reap-into-wild-buffer", ioctl(fd, USBDEVFS_REAPURB, &got));
	show("reap-nothing-left", ioctl(fd, USBDEVFS_REAPURBNDELAY, &got));
	show("discard-unknown", ioctl(fd, USBDEVFS_DISCARDURB, (void *)0x1234));
	/* REAPURB's result pointer unwritable after a completion. */
	struct usbdevfs_bulktransfer bo2 = { 0x02, 5, 1000, data };
	ioctl(fd, USBDEVFS_BULK, &bo2);
	submit_bulk(fd, &u, 0x81, buf, 64);
	poll(&pf, 1, 5000);
	const void *rom = "read only";
	show("reap-to-readonly", ioctl(fd, USBDEVFS_REAPURBNDELAY, (void *)rom));
	close(fd);
}

static void unreaped(const char *p, int n)
{
	int fd = dev_open(p, O_RDWR);
	setup(fd);
	struct usbdevfs_urb *u = calloc(n, sizeof *u);
	unsigned char *buf = malloc(100 << 10);
	int ok = 0, err = 0;
	for (int i = 0; i < n; i++) {
		if (submit_bulk(fd, &u[i], 0x81, buf, 100 << 10) == 0)
			ok++;
		else
			err = errno;
	}
	printf("submitted %d %s\n", ok, ename(err));
	close(fd);
}

static void opens(const char *p, int n)
{
	for (int i = 0; i < n; i++) {
		int fd = open(p, O_RDWR);
		if (fd < 0) {
			printf("open %d %s\n", i, ename(errno));
			return;
		}
		close(fd);
	}
	static int fds[500];
	for (int i = 0; i < 500; i++) {
		fds[i] = open(p, O_RDWR);
		if (fds[i] < 0) {
			printf("open-many %d %s\n", i, ename(errno));
			return;
		}
	}
	unsigned caps = 0;
	int r = ioctl(fds[499], USBDEVFS_GET_CAPABILITIES, &caps);
	for (int i = 0; i < 500; i++)
		close(fds[i]);
	printf("opens ok caps=%s %#x\n", r == 0 ? "ok" : ename(errno), caps);
}

static void unplugwait(const char *p)
{
	int fd = dev_open(p, O_RDWR);
	struct usbdevfs_urb u;
	static unsigned char buf[64] = { 0xc0, 0x04, 0, 0, 0, 0, 8, 0 };
	memset(&u, 0, sizeof u);
	u.type = USBDEVFS_URB_TYPE_CONTROL;
	u.endpoint = 0;
	u.buffer = buf;
	u.buffer_length = 16;
	show("submit", ioctl(fd, USBDEVFS_SUBMITURB, &u));
	printf("ready\n");
	fflush(stdout);
	struct pollfd pf = { fd, POLLOUT, 0 };
	int seen = 0;
	for (int i = 0; i < 200 && !(seen & POLLHUP); i++) {
		pf.revents = 0;
		poll(&pf, 1, 100);
		seen |= pf.revents;
		if (pf.revents & POLLOUT) {
			void *got = NULL;
			if (ioctl(fd, USBDEVFS_REAPURBNDELAY, &got) == 0)
				printf("reaped status=%d\n", u.status);
		}
	}
	printf("poll%s%s%s\n", seen & POLLOUT ? " POLLOUT" : "", seen & POLLHUP ? " POLLHUP" : "",
	       seen & POLLERR ? " POLLERR" : "");
	void *got = NULL;
	show("reap-after-unplug", ioctl(fd, USBDEVFS_REAPURB, &got));
	show("submit-after-unplug", ioctl(fd, USBDEVFS_SUBMITURB, &u));
	char d[18];
	show("read-after-unplug", read(fd, d, sizeof d) < 0 ? -1 : 0);
	close(fd);
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 3)
		return 2;
	if (!strcmp(argv[2], "cases"))
		cases(argv[1]);
	else if (!strcmp(argv[2], "unreaped") && argc > 3)
		unreaped(argv[1], atoi(argv[3]));
	else if (!strcmp(argv[2], "opens") && argc > 3)
		opens(argv[1], atoi(argv[3]));
	else if (!strcmp(argv[2], "unplugwait"))
		unplugwait(argv[1]);
	else
		return 2;
	return 0;
}
