/*
 * A HID program as users write them, on Debian's hidapi (hidraw backend):
 * enumerate, open by VID:PID, read input reports, send an output and a
 * feature report, get a feature and an input report. Prints what it got,
 * one line each, for tests/hidraw.rs.
 *
 *   hidraw_hidapi READS [PATH]   (PATH: open that node, enumerate only it)
 */
#include <hidapi/hidapi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

static void hex(const char *what, int n, const unsigned char *b)
{
	printf("%s %d:", what, n);
	for (int i = 0; i < n; i++)
		printf(" %02x", b[i]);
	printf("\n");
}

int main(int argc, char **argv)
{
	int reads = argc > 1 ? atoi(argv[1]) : 4;
	if (hid_init())
		return 1;
	struct hid_device_info *all = hid_enumerate(0x0627, 0x0001), *c;
	const char *path = argc > 2 ? argv[2] : NULL;
	for (c = all; c; c = c->next)
		if (!path || !strcmp(path, c->path))
			printf("enum %s %04x:%04x %ls|%ls|%ls if=%d usage=%04x:%04x bus=%d\n", c->path,
		       c->vendor_id, c->product_id, c->manufacturer_string, c->product_string,
		       c->serial_number, c->interface_number, c->usage_page, c->usage,
		       (int)c->bus_type);
	hid_free_enumeration(all);
	hid_device *h = path ? hid_open_path(path) : hid_open(0x0627, 0x0001, NULL);
	if (!h) {
		printf("open: %ls\n", hid_error(NULL));
		return 1;
	}
	/* hidapi finds the open device's strings by its device number */
	wchar_t str[128];
	if (hid_get_manufacturer_string(h, str, 128) == 0)
		printf("manufacturer %ls\n", str);
	else
		printf("manufacturer error: %ls\n", hid_error(h));
	unsigned char buf[64];
	for (int i = 0; i < reads; i++) {
		int n = hid_read(h, buf, sizeof buf);
		hex("read", n, buf);
	}
	unsigned char out[2] = { 0, 0x02 }; /* report 0: caps lock */
	printf("write %d\n", hid_write(h, out, sizeof out));
	unsigned char feat[2] = { 0, 0x01 };
	printf("send_feature %d\n", hid_send_feature_report(h, feat, sizeof feat));
	unsigned char got[9] = { 0 };
	int n = hid_get_feature_report(h, got, sizeof got);
	hex("feature", n, got);
	unsigned char in[3] = { 0 };
	n = hid_get_input_report(h, in, sizeof in);
	hex("input", n, in);
	hid_close(h);
	hid_exit();
	return 0;
}
