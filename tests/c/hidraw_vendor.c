/*
 * Debian's hidapi (hidraw backend) driving examples/hid_vendor.py, a
 * vendor-defined HID device (1209:0003) with numbered reports: reads two
 * input reports (ID 1), sends output report 2 (its interrupt OUT
 * endpoint) and feature report 3, and gets feature report 3 back. Prints
 * what it got, one line each, for tests/hidraw.rs.
 */
#include <hidapi/hidapi.h>
#include <stdio.h>
#include <wchar.h>

static void hex(const char *what, int n, const unsigned char *b)
{
	printf("%s %d:", what, n);
	for (int i = 0; i < n; i++)
		printf(" %02x", b[i]);
	printf("\n");
}

int main(void)
{
	if (hid_init())
		return 1;
	hid_device *h = hid_open(0x1209, 0x0003, NULL);
	if (!h) {
		printf("open: %ls\n", hid_error(NULL));
		return 1;
	}
	wchar_t s[128];
	if (hid_get_product_string(h, s, 128) == 0)
		printf("product %ls\n", s);
	else
		printf("product error: %ls\n", hid_error(h));
	unsigned char buf[64];
	for (int i = 0; i < 2; i++) {
		int n = hid_read(h, buf, sizeof buf);
		hex("read", n, buf);
	}
	unsigned char out[9] = { 2, 0xa0, 0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7 };
	printf("write %d\n", hid_write(h, out, sizeof out));
	unsigned char feat[9] = { 3, 0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7 };
	printf("send_feature %d\n", hid_send_feature_report(h, feat, sizeof feat));
	unsigned char got[16] = { 3 };
	int n = hid_get_feature_report(h, got, sizeof got);
	hex("feature", n, got);
	unsigned char none[16] = { 9 };
	printf("feature_9 %d\n", hid_get_feature_report(h, none, sizeof none));
	hid_close(h);
	hid_exit();
	return 0;
}
