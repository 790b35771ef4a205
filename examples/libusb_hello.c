/* libusb_hello: drive one USB device with libusb, as a device tool would.
 *
 *   libusb_hello BUS ADDRESS
 *
 * Finds the device at BUS:ADDRESS (as lsusb lists them), reads its
 * manufacturer and product strings (GET_DESCRIPTOR control transfers),
 * takes interface 0 from its kernel driver, reads one report from the
 * interface's first interrupt IN endpoint, and gives the interface back.
 * Under `monfs run` (README, "Drive a simulated device with libusb") every
 * one of those requests goes through monfs's usbfs to a simulated device,
 * and usbmon shows it as the kernel would.
 *
 * Build: cc -o libusb_hello examples/libusb_hello.c -lusb-1.0
 * (Debian: apt-get install libusb-1.0-0-dev). */
#include <libusb-1.0/libusb.h>
#include <stdio.h>
#include <stdlib.h>

static int fail(const char *what, int r)
{
	fprintf(stderr, "libusb_hello: %s: %s\n", what, libusb_error_name(r));
	return 1;
}

int main(int argc, char **argv)
{
	libusb_device **list, *dev = NULL;
	libusb_device_handle *h;
	struct libusb_device_descriptor d;
	struct libusb_config_descriptor *c;
	unsigned char s[256], report[64];
	int bus, addr, r, n, i, ep = 0, maxp = 0;
	ssize_t count;

	if (argc != 3) {
		fprintf(stderr, "usage: %s BUS ADDRESS\n", argv[0]);
		return 2;
	}
	bus = atoi(argv[1]);
	addr = atoi(argv[2]);
	r = libusb_init(NULL);
	if (r)
		return fail("libusb_init", r);
	count = libusb_get_device_list(NULL, &list);
	for (i = 0; i < count; i++)
		if (libusb_get_bus_number(list[i]) == bus &&
		    libusb_get_device_address(list[i]) == addr)
			dev = list[i];
	if (!dev) {
		fprintf(stderr, "libusb_hello: no device %d:%d\n", bus, addr);
		return 1;
	}
	libusb_get_device_descriptor(dev, &d);
	printf("device %03d:%03d id %04x:%04x\n", bus, addr, d.idVendor, d.idProduct);
	r = libusb_open(dev, &h);
	if (r)
		return fail("libusb_open", r);
	if (libusb_get_string_descriptor_ascii(h, d.iManufacturer, s, sizeof(s)) > 0)
		printf("manufacturer: %s\n", s);
	if (libusb_get_string_descriptor_ascii(h, d.iProduct, s, sizeof(s)) > 0)
		printf("product: %s\n", s);
	r = libusb_get_active_config_descriptor(dev, &c);
	if (r)
		return fail("libusb_get_active_config_descriptor", r);
	if (c->bNumInterfaces > 0 && c->interface[0].num_altsetting > 0) {
		const struct libusb_interface_descriptor *alt = &c->interface[0].altsetting[0];
		for (i = 0; i < alt->bNumEndpoints; i++) {
			const struct libusb_endpoint_descriptor *e = &alt->endpoint[i];
			if ((e->bmAttributes & 3) == LIBUSB_TRANSFER_TYPE_INTERRUPT &&
			    (e->bEndpointAddress & LIBUSB_ENDPOINT_IN)) {
				ep = e->bEndpointAddress;
				maxp = e->wMaxPacketSize;
				break;
			}
		}
	}
	libusb_free_config_descriptor(c);
	if (!ep) {
		printf("interface 0 has no interrupt IN endpoint\n");
	} else {
		/* The kernel driver (usbhid) lets go of the interface for us
		 * and takes it back at release. */
		libusb_set_auto_detach_kernel_driver(h, 1);
		r = libusb_claim_interface(h, 0);
		if (r)
			return fail("libusb_claim_interface", r);
		if (maxp > (int)sizeof(report))
			maxp = sizeof(report);
		r = libusb_interrupt_transfer(h, ep, report, maxp, &n, 2000);
		if (r)
			return fail("libusb_interrupt_transfer", r);
		printf("interrupt IN 0x%02x: %d bytes:", ep, n);
		for (i = 0; i < n; i++)
			printf(" %02x", report[i]);
		printf("\n");
		libusb_release_interface(h, 0);
	}
	libusb_close(h);
	libusb_free_device_list(list, 1);
	libusb_exit(NULL);
	return 0;
}
