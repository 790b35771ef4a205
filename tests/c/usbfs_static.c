/* usbfs_static: linked statically (no dynamic loader, so no LD_PRELOAD
 * reaches it), it finds vendor device 1234:5679 in /sys/bus/usb/devices,
 * opens its /dev/bus/usb node and talks to it with usbfs's ioctls, as a
 * static or Go program does: vendor request 0x01, bulk OUT 0x02, bulk IN
 * 0x81 (tests/umockdev.rs, with examples/pytest/umockdev's recording). */
#include <dirent.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int attr(const char *dev, const char *name, char *buf, size_t n)
{
	char path[512];
	snprintf(path, sizeof path, "/sys/bus/usb/devices/%s/%s", dev, name);
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	if (!fgets(buf, (int)n, f))
		buf[0] = 0;
	fclose(f);
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static void hex(const unsigned char *b, int n)
{
	for (int i = 0; i < n; i++)
		printf("%02x", b[i]);
	printf("\n");
}

int main(void)
{
	char node[64] = "";
	DIR *d = opendir("/sys/bus/usb/devices");
	struct dirent *e;
	while (d && (e = readdir(d))) {
		char v[16], p[16], bus[16], dev[16];
		if (strchr(e->d_name, ':') || e->d_name[0] == '.')
			continue;
		if (attr(e->d_name, "idVendor", v, sizeof v) || attr(e->d_name, "idProduct", p, sizeof p))
			continue;
		if (strcmp(v, "1234") || strcmp(p, "5679"))
			continue;
		if (attr(e->d_name, "busnum", bus, sizeof bus) || attr(e->d_name, "devnum", dev, sizeof dev))
			continue;
		snprintf(node, sizeof node, "/dev/bus/usb/%03d/%03d", atoi(bus), atoi(dev));
	}
	if (d)
		closedir(d);
	if (!node[0]) {
		printf("not found\n");
		return 1;
	}
	int fd = open(node, O_RDWR);
	if (fd < 0) {
		perror(node);
		return 1;
	}
	printf("found %s\n", node);
	unsigned int intf = 0;
	if (ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf) < 0)
		perror("claim");
	unsigned char buf[64];
	struct usbdevfs_ctrltransfer c = {
		.bRequestType = 0xc0, .bRequest = 1, .wLength = 16, .timeout = 5000, .data = buf,
	};
	int r = ioctl(fd, USBDEVFS_CONTROL, &c);
	printf("control %d ", r);
	hex(buf, r > 0 ? r : 0);
	unsigned char out[4] = {1, 2, 3, 4};
	struct usbdevfs_bulktransfer b = {.ep = 0x02, .len = 4, .timeout = 5000, .data = out};
	printf("bulk out %d\n", ioctl(fd, USBDEVFS_BULK, &b));
	struct usbdevfs_bulktransfer in = {.ep = 0x81, .len = 64, .timeout = 5000, .data = buf};
	r = ioctl(fd, USBDEVFS_BULK, &in);
	printf("bulk in %d ", r);
	hex(buf, r > 0 ? r : 0);
	close(fd);
	return 0;
}
