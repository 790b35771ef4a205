/* usbfs_iso: a fixed isochronous OUT session through raw usbfs ioctls, the
 * same on the kernel's /dev/bus/usb and on monfs's (scripts/kernel-vm
 * compares the outputs and the usbmon lines of the endpoint). The first
 * interface setting with an isochronous OUT endpoint is found in the
 * descriptors read from the node; its interface's driver is detached, the
 * interface claimed and set to that setting; UAC1's sampling-frequency
 * control of the endpoint set to 48 kHz and read (SET_CUR, GET_CUR: their
 * statuses); INFLIGHT URBs of NPK packets of
 * wMaxPacketSize bytes (silence) with USBDEVFS_URB_ISO_ASAP are submitted,
 * and each one reaped is replaced by a new one until TOTAL were submitted;
 * all are reaped. Then, once the stream has drained, one URB without
 * USBDEVFS_URB_ISO_ASAP (its start_frame 0: xHCI places it as it likes).
 * Then setting 0, the release and the driver's attach again. A URB lasts
 * NPK frames (128 ms at full speed), so that the program's reap and
 * resubmission, slow under emulation, stay well within one URB's time and
 * the order of the endpoint's submissions and completions is the HCD's,
 * not the program's speed.
 *
 * One line per step; per URB, in reap order:
 *   urb I status S actual A errors E start_frame F pk ST:LEN ST:LEN ...
 * F is what usbfs leaves in the program's URB: processcompl() does not
 * copy the HCD's start_frame back, so it stays the submitted 0 (the
 * HCD's is in usbmon's completion line).
 *
 *   usbfs_iso DEVNODE
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define INFLIGHT 3
#define TOTAL 12
#define NPK 128

static void show(const char *what, int r)
{
	if (r < 0)
		printf("%s errno=%d\n", what, errno);
	else
		printf("%s rc=%d\n", what, r);
}

static struct usbdevfs_urb *new_urb(int ep, int mps, unsigned flags)
{
	struct usbdevfs_urb *u = calloc(1, sizeof *u + NPK * sizeof(struct usbdevfs_iso_packet_desc));
	if (!u)
		exit(1);
	u->type = USBDEVFS_URB_TYPE_ISO;
	u->endpoint = ep;
	u->flags = flags;
	u->buffer_length = mps * NPK;
	u->buffer = calloc(1, mps * NPK);
	u->number_of_packets = NPK;
	for (int k = 0; k < NPK; k++)
		u->iso_frame_desc[k].length = mps;
	return u;
}

static void print_urb(int i, const struct usbdevfs_urb *u)
{
	printf("urb %d status %d actual %d errors %d start_frame %d pk", i, u->status, u->actual_length,
	       u->error_count, u->start_frame);
	for (int k = 0; k < u->number_of_packets; k++)
		printf(" %d:%u", u->iso_frame_desc[k].status, u->iso_frame_desc[k].actual_length);
	printf("\n");
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	/* The device's descriptors as usbfs's read() gives them: the device
	 * descriptor, then the configurations. */
	unsigned char d[4096];
	ssize_t n = read(fd, d, sizeof d);
	int intf = -1, alt = -1, ep = -1, mps = 0, ival = 0;
	int cur_intf = -1, cur_alt = -1;
	for (ssize_t o = 0; o + 2 <= n && d[o] >= 2 && ep < 0; o += d[o]) {
		if (d[o + 1] == 4 && d[o] >= 9) {
			cur_intf = d[o + 2];
			cur_alt = d[o + 3];
		} else if (d[o + 1] == 5 && d[o] >= 7 && (d[o + 3] & 3) == 1 && !(d[o + 2] & 0x80)) {
			intf = cur_intf;
			alt = cur_alt;
			ep = d[o + 2];
			mps = (d[o + 4] | d[o + 5] << 8) & 0x7ff;
			ival = d[o + 6];
		}
	}
	if (ep < 0 || mps == 0) {
		printf("no isochronous OUT endpoint (%zd bytes of descriptors)\n", n);
		return 1;
	}
	printf("endpoint intf=%d alt=%d ep=0x%02x mps=%d interval=%d\n", intf, alt, ep, mps, ival);
	struct usbdevfs_getdriver drv = { intf, "" };
	int r = ioctl(fd, USBDEVFS_GETDRIVER, &drv);
	printf("driver rc=%d %s\n", r, r == 0 ? drv.driver : "-");
	struct usbdevfs_ioctl dis = { intf, USBDEVFS_DISCONNECT, NULL };
	show("disconnect", ioctl(fd, USBDEVFS_IOCTL, &dis));
	unsigned uintf = intf;
	show("claim", ioctl(fd, USBDEVFS_CLAIMINTERFACE, &uintf));
	struct usbdevfs_setinterface si = { intf, alt };
	show("set-interface", ioctl(fd, USBDEVFS_SETINTERFACE, &si));
	/* UAC1's sampling-frequency control of the endpoint, SET_CUR 48 kHz
	 * and GET_CUR, as a user-space player would send them: the device's
	 * answers (a device whose endpoint lacks the control stalls them). */
	unsigned char freq[3] = { 0x80, 0xbb, 0x00 };
	struct usbdevfs_ctrltransfer sf = { 0x22, 0x01, 0x0100, ep, 3, 1000, freq };
	show("set-sampling-frequency", ioctl(fd, USBDEVFS_CONTROL, &sf));
	unsigned char cur[3] = { 0 };
	struct usbdevfs_ctrltransfer gf = { 0xa2, 0x81, 0x0100, ep, 3, 1000, cur };
	r = ioctl(fd, USBDEVFS_CONTROL, &gf);
	if (r < 0)
		printf("get-sampling-frequency errno=%d\n", errno);
	else
		printf("get-sampling-frequency rc=%d %02x%02x%02x\n", r, cur[0], cur[1], cur[2]);

	static struct usbdevfs_urb *urbs[TOTAL + 1];
	int submitted = 0, reaped = 0;
	for (; submitted < INFLIGHT; submitted++) {
		urbs[submitted] = new_urb(ep, mps, USBDEVFS_URB_ISO_ASAP);
		if (ioctl(fd, USBDEVFS_SUBMITURB, urbs[submitted]) < 0) {
			printf("submit %d errno=%d\n", submitted, errno);
			return 1;
		}
	}
	while (reaped < submitted) {
		struct usbdevfs_urb *u = NULL;
		if (ioctl(fd, USBDEVFS_REAPURB, &u) < 0) {
			printf("reap errno=%d\n", errno);
			return 1;
		}
		int i = 0;
		while (i < submitted && urbs[i] != u)
			i++;
		print_urb(i, u);
		reaped++;
		if (submitted < TOTAL) {
			urbs[submitted] = new_urb(ep, mps, USBDEVFS_URB_ISO_ASAP);
			if (ioctl(fd, USBDEVFS_SUBMITURB, urbs[submitted]) < 0) {
				printf("submit %d errno=%d\n", submitted, errno);
				return 1;
			}
			submitted++;
		}
	}
	/* The stream has drained: a URB without ISO_ASAP starts a new one. */
	usleep(100000);
	struct usbdevfs_urb *late = new_urb(ep, mps, 0);
	r = ioctl(fd, USBDEVFS_SUBMITURB, late);
	show("submit-late", r);
	if (r == 0) {
		struct usbdevfs_urb *u = NULL;
		r = ioctl(fd, USBDEVFS_REAPURB, &u);
		if (r < 0 || u != late) {
			printf("reap-late rc=%d errno=%d same=%d\n", r, r < 0 ? errno : 0, u == late);
			return 1;
		}
		print_urb(TOTAL, u);
	}
	si.altsetting = 0;
	show("set-interface-0", ioctl(fd, USBDEVFS_SETINTERFACE, &si));
	show("release", ioctl(fd, USBDEVFS_RELEASEINTERFACE, &uintf));
	struct usbdevfs_ioctl con = { intf, USBDEVFS_CONNECT, NULL };
	show("connect", ioctl(fd, USBDEVFS_IOCTL, &con));
	usleep(300000);
	r = ioctl(fd, USBDEVFS_GETDRIVER, &drv);
	printf("driver-end rc=%d %s\n", r, r == 0 ? drv.driver : "-");
	close(fd);
	return 0;
}
