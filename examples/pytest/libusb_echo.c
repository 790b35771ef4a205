/*
 * libusb_echo: a libusb-1.0 program of the kind monfs's users test, here
 * against a device written in Python (test_libusb.py's peer).
 *
 *   libusb_echo VID:PID HEX
 *
 * Opens the device, claims interface 0, asks vendor request 0x01 for the
 * firmware version, sends HEX on bulk OUT 0x02 and reads the answer from
 * bulk IN 0x81. Prints `version A.B` and `echo HEX`; a stalled transfer
 * prints `stall` (LIBUSB_ERROR_PIPE) and a vanished device `gone`
 * (LIBUSB_ERROR_NO_DEVICE); exit 0 unless something else failed.
 *
 *   cc -O2 -o libusb_echo libusb_echo.c $(pkg-config --cflags --libs libusb-1.0)
 */
#include <libusb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int report(const char *what, int r)
{
	if (r == LIBUSB_ERROR_PIPE) {
		printf("stall\n");
		return 0;
	}
	if (r == LIBUSB_ERROR_NO_DEVICE) {
		printf("gone\n");
		return 0;
	}
	fprintf(stderr, "%s: %s\n", what, libusb_error_name(r));
	return 1;
}

int main(int argc, char **argv)
{
	unsigned vid, pid;
	if (argc != 3 || sscanf(argv[1], "%x:%x", &vid, &pid) != 2) {
		fprintf(stderr, "usage: libusb_echo VID:PID HEX\n");
		return 2;
	}
	unsigned char out[64], in[64];
	int n = 0;
	for (const char *h = argv[2]; h[0] && h[1] && n < 64; h += 2)
		sscanf(h, "%2hhx", &out[n++]);
	libusb_context *ctx;
	if (libusb_init(&ctx) != 0)
		return 1;
	libusb_device_handle *dev = libusb_open_device_with_vid_pid(ctx, vid, pid);
	if (!dev) {
		fprintf(stderr, "no device %04x:%04x\n", vid, pid);
		return 1;
	}
	int r = libusb_claim_interface(dev, 0);
	if (r != 0)
		return report("claim", r);
	unsigned char ver[2];
	r = libusb_control_transfer(dev, 0xC0, 0x01, 0, 0, ver, sizeof ver, 5000);
	if (r == 2)
		printf("version %u.%u\n", ver[0], ver[1]);
	else if (report("control", r))
		return 1;
	int done = 0;
	r = libusb_bulk_transfer(dev, 0x02, out, n, &done, 5000);
	if (r != 0)
		return report("bulk out", r);
	r = libusb_bulk_transfer(dev, 0x81, in, sizeof in, &done, 5000);
	if (r != 0)
		return report("bulk in", r);
	printf("echo ");
	for (int i = 0; i < done; i++)
		printf("%02x", in[i]);
	printf("\n");
	libusb_release_interface(dev, 0);
	libusb_close(dev);
	libusb_exit(ctx);
	return 0;
}
