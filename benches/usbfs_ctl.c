/*
 * usbfs_ctl: N synchronous USBDEVFS_CONTROL ioctls (GET_DESCRIPTOR of the
 * device descriptor) on a usbfs node; prints the calls per second. For
 * scripts/bench.
 *
 *   usbfs_ctl DEVNODE N
 */
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <time.h>

int main(int argc, char **argv)
{
	if (argc != 3)
		return 2;
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	int n = atoi(argv[2]);
	unsigned char b[64];
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		struct usbdevfs_ctrltransfer ct = { 0x80, 6, 0x100, 0, 18, 1000, b };
		if (ioctl(fd, USBDEVFS_CONTROL, &ct) != 18) {
			perror("USBDEVFS_CONTROL");
			return 1;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = t1.tv_sec - t0.tv_sec + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("%.0f\n", n / s);
	return 0;
}
