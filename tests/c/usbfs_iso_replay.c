/* usbfs_iso_replay: isochronous transfers through raw usbfs ioctls on a
 * device answered from a recording (tests/umockdev.rs). Interface 0 is
 * claimed and set to setting 1; an isochronous IN URB on 0x83 of 4
 * packets of 64 bytes, then an isochronous OUT URB on 0x04 of 3 packets
 * (16, 8 and 16 bytes: 0x40, 0x41, ...) are submitted (URB_ISO_ASAP) and
 * reaped, one at a time. Per URB, one line:
 *   DIR status S actual A errors E pk ST:LEN[:HEX] ...
 * HEX is an IN packet's bytes: its actual length at its offset.
 *
 *   usbfs_iso_replay DEVNODE
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int iso(int fd, unsigned char ep, const int *lens, int npk)
{
	struct usbdevfs_urb *u = calloc(1, sizeof *u + npk * sizeof(struct usbdevfs_iso_packet_desc));
	int total = 0;
	for (int k = 0; k < npk; k++)
		total += lens[k];
	unsigned char *buf = malloc(total);
	if (!u || !buf)
		return 1;
	/* What the device does not fill shows as 0xcc. */
	for (int i = 0; i < total; i++)
		buf[i] = ep & 0x80 ? 0xcc : 0x40 + i;
	u->type = USBDEVFS_URB_TYPE_ISO;
	u->endpoint = ep;
	u->flags = USBDEVFS_URB_ISO_ASAP;
	u->buffer = buf;
	u->buffer_length = total;
	u->number_of_packets = npk;
	for (int k = 0; k < npk; k++)
		u->iso_frame_desc[k].length = lens[k];
	if (ioctl(fd, USBDEVFS_SUBMITURB, u) < 0) {
		printf("submit %02x errno=%d\n", ep, errno);
		return 1;
	}
	struct usbdevfs_urb *got = NULL;
	if (ioctl(fd, USBDEVFS_REAPURB, &got) < 0 || got != u) {
		printf("reap %02x errno=%d\n", ep, errno);
		return 1;
	}
	printf("%s status %d actual %d errors %d pk", ep & 0x80 ? "in" : "out", u->status,
	       u->actual_length, u->error_count);
	int off = 0;
	for (int k = 0; k < npk; k++) {
		struct usbdevfs_iso_packet_desc *p = &u->iso_frame_desc[k];
		printf(" %d:%u", (int)p->status, p->actual_length);
		if (ep & 0x80) {
			printf(":");
			for (unsigned i = 0; i < p->actual_length; i++)
				printf("%02x", buf[off + i]);
		}
		off += lens[k];
	}
	printf("\n");
	free(buf);
	free(u);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: usbfs_iso_replay DEVNODE\n");
		return 2;
	}
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		printf("open errno=%d\n", errno);
		return 1;
	}
	unsigned int intf = 0;
	if (ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf) < 0) {
		printf("claim errno=%d\n", errno);
		return 1;
	}
	struct usbdevfs_setinterface si = {.interface = 0, .altsetting = 1};
	if (ioctl(fd, USBDEVFS_SETINTERFACE, &si) < 0) {
		printf("setinterface errno=%d\n", errno);
		return 1;
	}
	int in[] = {64, 64, 64, 64};
	int out[] = {16, 8, 16};
	if (iso(fd, 0x83, in, 4) || iso(fd, 0x04, out, 3))
		return 1;
	return 0;
}
