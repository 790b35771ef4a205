/*
 * usb_strings: read a USB device's string descriptors through usbfs and
 * print them, one line per index that answers:
 *
 *   usb_strings /dev/bus/usb/BBB/DDD MAX
 *
 * prints "N TEXT" for each index N in 1..MAX the device answers (language
 * 0x0409; the UTF-16 code units below 0x80 as they are, others as '?').
 * Indices the device stalls are left out. kernel-vm records them next to
 * the sysfs descriptors, so that the simulated devices' strings that sysfs
 * does not show (interface, terminal and unit names) come from the real
 * device too.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <linux/usbdevice_fs.h>

int main(int argc, char **argv)
{
	unsigned char buf[255];
	int fd, max, i, n, k;

	if (argc != 3) {
		fprintf(stderr, "usage: usb_strings DEVICE MAX\n");
		return 2;
	}
	fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	max = atoi(argv[2]);
	for (i = 1; i <= max && i < 256; i++) {
		struct usbdevfs_ctrltransfer c = {
			.bRequestType = 0x80,
			.bRequest = 6,
			.wValue = 0x0300 | i,
			.wIndex = 0x0409,
			.wLength = sizeof(buf),
			.timeout = 1000,
			.data = buf,
		};
		n = ioctl(fd, USBDEVFS_CONTROL, &c);
		if (n < 2 || buf[1] != 3)
			continue;
		if (n > buf[0])
			n = buf[0];
		printf("%d ", i);
		for (k = 2; k + 1 < n; k += 2)
			putchar(buf[k + 1] == 0 && buf[k] >= 0x20 && buf[k] < 0x80 ? buf[k] : '?');
		putchar('\n');
	}
	close(fd);
	return 0;
}
