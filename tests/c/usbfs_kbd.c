/* usbfs_kbd: a fixed usbfs session with a HID keyboard, the same on the
 * kernel's /dev/bus/usb and on monfs's (scripts/kernel-vm compares the
 * outputs and the usbmon lines it causes): GET_DESCRIPTOR and
 * GET_CONFIGURATION through USBDEVFS_CONTROL, the interface's driver, its
 * detach, a claim, an interrupt IN URB discarded after 200 ms (an idle
 * keyboard NAKs), the release and the driver's attach again. Raw ioctls
 * only, so that it builds static. One line per step.
 *
 *   usbfs_kbd DEVNODE
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static void show(const char *what, int r)
{
	if (r < 0)
		printf("%s errno=%d\n", what, errno);
	else
		printf("%s rc=%d\n", what, r);
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
	unsigned char d[64];
	struct usbdevfs_ctrltransfer gd = { 0x80, 6, 0x0100, 0, 18, 1000, d };
	int r = ioctl(fd, USBDEVFS_CONTROL, &gd);
	show("get-descriptor", r);
	struct usbdevfs_ctrltransfer gc = { 0x80, 8, 0, 0, 1, 1000, d };
	r = ioctl(fd, USBDEVFS_CONTROL, &gc);
	printf("get-configuration rc=%d value=%d\n", r, r == 1 ? d[0] : -1);
	struct usbdevfs_getdriver drv = { 0, "" };
	r = ioctl(fd, USBDEVFS_GETDRIVER, &drv);
	printf("driver rc=%d %s\n", r, r == 0 ? drv.driver : "-");
	unsigned intf = 0;
	r = ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf);
	show("claim-bound", r);
	struct usbdevfs_ioctl dis = { 0, USBDEVFS_DISCONNECT, NULL };
	show("disconnect", ioctl(fd, USBDEVFS_IOCTL, &dis));
	r = ioctl(fd, USBDEVFS_GETDRIVER, &drv);
	show("driver-after", r);
	show("claim", ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf));
	struct usbdevfs_urb u;
	memset(&u, 0, sizeof u);
	u.type = USBDEVFS_URB_TYPE_INTERRUPT;
	u.endpoint = 0x81;
	u.buffer = d;
	u.buffer_length = 8;
	show("submit", ioctl(fd, USBDEVFS_SUBMITURB, &u));
	struct pollfd pf = { fd, POLLOUT, 0 };
	r = poll(&pf, 1, 200);
	printf("poll %d\n", r);
	show("discard", ioctl(fd, USBDEVFS_DISCARDURB, &u));
	void *got = NULL;
	r = ioctl(fd, USBDEVFS_REAPURB, &got);
	printf("reap rc=%d same=%d status=%d actual=%d\n", r, got == &u, u.status, u.actual_length);
	show("release", ioctl(fd, USBDEVFS_RELEASEINTERFACE, &intf));
	struct usbdevfs_ioctl con = { 0, USBDEVFS_CONNECT, NULL };
	show("connect", ioctl(fd, USBDEVFS_IOCTL, &con));
	usleep(300000);
	r = ioctl(fd, USBDEVFS_GETDRIVER, &drv);
	printf("driver-end rc=%d %s\n", r, r == 0 ? drv.driver : "-");
	close(fd);
	return 0;
}
