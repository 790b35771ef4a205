/* usbfs_iso_stream: isochronous URBs queued on one endpoint without
 * USBDEVFS_URB_ISO_ASAP, through raw usbfs ioctls (libusb always sets
 * ASAP). The interface's driver is detached, INTF claimed and set to ALT;
 * N URBs of NPK packets of LEN bytes are submitted to OUT endpoint EP back
 * to back, each with start_frame 12345 (the HCDs ignore it: a queued
 * endpoint continues its stream), then reaped. One line per URB:
 *   urb=I status=S start_frame=F error_count=E actual=A
 *
 *   usbfs_iso_stream DEVNODE INTF ALT EP LEN NPK N
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAX_URBS 16
#define MAX_PK 128

int main(int argc, char **argv)
{
	if (argc != 8)
		return 2;
	int intf = atoi(argv[2]), alt = atoi(argv[3]);
	int ep = (int)strtol(argv[4], NULL, 16), len = atoi(argv[5]);
	int npk = atoi(argv[6]), n = atoi(argv[7]);
	if (npk < 1 || npk > MAX_PK || n < 1 || n > MAX_URBS || len < 1 || len > 1024)
		return 2;
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	struct usbdevfs_ioctl dis = { intf, USBDEVFS_DISCONNECT, NULL };
	ioctl(fd, USBDEVFS_IOCTL, &dis); /* ENODATA when no driver is bound */
	struct usbdevfs_setinterface si = { intf, alt };
	if (ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf) < 0 ||
	    (alt > 0 && ioctl(fd, USBDEVFS_SETINTERFACE, &si) < 0)) {
		perror("claim/setinterface");
		return 1;
	}
	static struct usbdevfs_urb *urbs[MAX_URBS];
	for (int i = 0; i < n; i++) {
		size_t sz = sizeof(struct usbdevfs_urb) + npk * sizeof(struct usbdevfs_iso_packet_desc);
		struct usbdevfs_urb *u = calloc(1, sz);
		u->type = USBDEVFS_URB_TYPE_ISO;
		u->endpoint = ep;
		u->buffer_length = len * npk;
		u->buffer = calloc(1, len * npk);
		u->number_of_packets = npk;
		u->start_frame = 12345;
		for (int k = 0; k < npk; k++)
			u->iso_frame_desc[k].length = len;
		urbs[i] = u;
		if (ioctl(fd, USBDEVFS_SUBMITURB, u) < 0) {
			printf("submit %d errno=%d\n", i, errno);
			return 1;
		}
	}
	for (int got = 0; got < n; got++) {
		struct usbdevfs_urb *u = NULL;
		if (ioctl(fd, USBDEVFS_REAPURB, &u) < 0) {
			perror("reap");
			return 1;
		}
		int i = 0;
		while (i < n && urbs[i] != u)
			i++;
		printf("urb=%d status=%d start_frame=%d error_count=%d actual=%d\n", i, u->status,
		       u->start_frame, u->error_count, u->actual_length);
	}
	return 0;
}
