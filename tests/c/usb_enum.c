/* usb_enum: enumerate USB devices with libusb (Debian's, udev backend) and
 * print one line per device, without opening any:
 *
 *   BUS DEV VID:PID ports=P.P class=CC speed=S configs=N active=V ifaces=CC,CC
 *
 * (ports=- for a root hub; active=- if libusb cannot tell the active
 * configuration; ifaces lists bInterfaceClass of each interface's first
 * setting in the active configuration). Used by tests/sysfs.rs inside
 * `monfs run`, where libusb finds monfs's devices through /sys/bus/usb. */
#include <libusb-1.0/libusb.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	libusb_context *ctx;
	libusb_device **list;
	ssize_t n, i;
	int r;

	r = libusb_init(&ctx);
	if (r) {
		fprintf(stderr, "libusb_init: %s\n", libusb_error_name(r));
		return 1;
	}
	n = libusb_get_device_list(ctx, &list);
	if (n < 0) {
		fprintf(stderr, "libusb_get_device_list: %s\n", libusb_error_name((int)n));
		return 1;
	}
	for (i = 0; i < n; i++) {
		libusb_device *dev = list[i];
		struct libusb_device_descriptor d;
		struct libusb_config_descriptor *c = NULL;
		uint8_t ports[8];
		int np, k;

		r = libusb_get_device_descriptor(dev, &d);
		if (r) {
			fprintf(stderr, "libusb_get_device_descriptor: %s\n", libusb_error_name(r));
			return 1;
		}
		printf("%03u %03u %04x:%04x ports=", libusb_get_bus_number(dev),
		       libusb_get_device_address(dev), d.idVendor, d.idProduct);
		np = libusb_get_port_numbers(dev, ports, sizeof(ports));
		if (np <= 0)
			printf("-");
		for (k = 0; k < np; k++)
			printf("%s%u", k ? "." : "", ports[k]);
		printf(" class=%02x speed=%d configs=%u", d.bDeviceClass,
		       libusb_get_device_speed(dev), d.bNumConfigurations);
		r = libusb_get_active_config_descriptor(dev, &c);
		if (r) {
			printf(" active=- ifaces=\n");
			continue;
		}
		printf(" active=%u ifaces=", c->bConfigurationValue);
		for (k = 0; k < c->bNumInterfaces; k++) {
			const struct libusb_interface *in = &c->interface[k];
			printf("%s%02x", k ? "," : "",
			       in->num_altsetting ? in->altsetting[0].bInterfaceClass : 0xff);
		}
		printf("\n");
		libusb_free_config_descriptor(c);
	}
	libusb_free_device_list(list, 1);
	libusb_exit(ctx);
	return 0;
}
