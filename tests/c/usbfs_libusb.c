/* usbfs_libusb: drive one device of a monfs mount through Debian's libusb,
 * opening MOUNT/dev/bus/usb/BBB/DDD and wrapping it with
 * libusb_wrap_sys_device (no device discovery: the host's devices are not
 * looked at). Runs the operations given on the command line in order and
 * prints one line per operation: the operation, `rc=` libusb's result
 * (a count or an error name) and for IN transfers the data in hex.
 *
 *   usbfs_libusb DEVNODE OP...
 *   desc                          idVendor:idProduct bNumConfigurations
 *   config                        libusb_get_configuration
 *   string:IDX                    libusb_get_string_descriptor_ascii
 *   ctrl-in:RT:REQ:VAL:IDX:LEN[:TMO]  control IN (numbers in hex, TMO
 *                                 decimal ms)
 *   ctrl-out:RT:REQ:VAL:IDX:HEX   control OUT (HEX `-`: no data stage)
 *   active:I detach:I attach:I claim:I release:I
 *   alt:I:A  clear:EP  reset
 *   bulk-in:EP:LEN[:TMO]  bulk-out:EP:HEX[:TMO]   (EP hex, TMO ms, 0 = none)
 *   int-in:EP:LEN[:TMO]   int-out:EP:HEX[:TMO]
 *   iso-in:EP:NPK:PKTLEN  iso-out:EP:NPK:PKTLEN   (asynchronous, waited for)
 *   many-ctrl:N  many-bulk-out:EP:LEN:N  many-bulk-in:EP:LEN:N
 *                                 N synchronous transfers, then the rate
 *   sleep:MS  ready               (ready: print "ready" and flush)
 * Without TMO a transfer waits up to 20 s (TMO_DEFAULT): only a device that
 * never answers times out, however busy the host.
 */
#include <errno.h>
#include <fcntl.h>
#include <libusb-1.0/libusb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define TMO_DEFAULT 20000

static libusb_device_handle *h;
static libusb_context *ctx;

static void hex(const unsigned char *b, int n)
{
	for (int i = 0; i < n; i++)
		printf("%02x", b[i]);
}

static int unhex(const char *s, unsigned char *out, int max)
{
	int n = 0;
	while (s[0] && s[1] && n < max) {
		unsigned v;
		if (sscanf(s, "%2x", &v) != 1)
			break;
		out[n++] = (unsigned char)v;
		s += 2;
	}
	return n;
}

static void rc(const char *op, int r)
{
	if (r < 0)
		printf("%s rc=%s", op, libusb_error_name(r));
	else
		printf("%s rc=%d", op, r);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static int iso_done;

static void LIBUSB_CALL iso_cb(struct libusb_transfer *t)
{
	(void)t;
	iso_done = 1;
}

static const char *tstatus(enum libusb_transfer_status s)
{
	switch (s) {
	case LIBUSB_TRANSFER_COMPLETED: return "COMPLETED";
	case LIBUSB_TRANSFER_ERROR: return "ERROR";
	case LIBUSB_TRANSFER_TIMED_OUT: return "TIMED_OUT";
	case LIBUSB_TRANSFER_CANCELLED: return "CANCELLED";
	case LIBUSB_TRANSFER_STALL: return "STALL";
	case LIBUSB_TRANSFER_NO_DEVICE: return "NO_DEVICE";
	case LIBUSB_TRANSFER_OVERFLOW: return "OVERFLOW";
	}
	return "?";
}

static void iso(const char *op, int in, unsigned ep, int npk, int pktlen)
{
	struct libusb_transfer *t = libusb_alloc_transfer(npk);
	unsigned char *buf = calloc(npk, pktlen);
	if (!in)
		for (int i = 0; i < npk * pktlen; i++)
			buf[i] = (unsigned char)i;
	libusb_fill_iso_transfer(t, h, (unsigned char)ep, buf, npk * pktlen, npk, iso_cb, NULL, 2000);
	libusb_set_iso_packet_lengths(t, pktlen);
	iso_done = 0;
	int r = libusb_submit_transfer(t);
	if (r < 0) {
		rc(op, r);
		printf("\n");
	} else {
		while (!iso_done)
			libusb_handle_events_completed(ctx, &iso_done);
		printf("%s rc=0 status=%s", op, tstatus(t->status));
		for (int i = 0; i < npk; i++) {
			struct libusb_iso_packet_descriptor *p = &t->iso_packet_desc[i];
			printf(" %d:%u", p->status, p->actual_length);
			if (in && p->actual_length)
				printf(":"), hex(libusb_get_iso_packet_buffer_simple(t, i), p->actual_length);
		}
		printf("\n");
	}
	libusb_free_transfer(t);
	free(buf);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s DEVNODE OP...\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
#if LIBUSB_API_VERSION >= 0x01000108
	libusb_set_option(NULL, LIBUSB_OPTION_NO_DEVICE_DISCOVERY);
#else
	libusb_set_option(NULL, LIBUSB_OPTION_WEAK_AUTHORITY);
#endif
	if (libusb_init(&ctx) < 0) {
		fprintf(stderr, "libusb_init failed\n");
		return 1;
	}
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		fprintf(stderr, "open %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	int r = libusb_wrap_sys_device(ctx, (intptr_t)fd, &h);
	if (r < 0) {
		fprintf(stderr, "libusb_wrap_sys_device: %s\n", libusb_error_name(r));
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		char *op = argv[i];
		unsigned a, b, c, d, e;
		char s[4096];
		unsigned char buf[65536];
		int n;
		if (!strcmp(op, "desc")) {
			struct libusb_device_descriptor dd;
			r = libusb_get_device_descriptor(libusb_get_device(h), &dd);
			rc(op, r);
			printf(" %04x:%04x %u\n", dd.idVendor, dd.idProduct, dd.bNumConfigurations);
		} else if (!strcmp(op, "config")) {
			int cfg = -1;
			r = libusb_get_configuration(h, &cfg);
			rc(op, r);
			printf(" %d\n", cfg);
		} else if (sscanf(op, "string:%u", &a) == 1) {
			r = libusb_get_string_descriptor_ascii(h, (uint8_t)a, buf, sizeof buf);
			rc(op, r);
			printf(" %.*s\n", r > 0 ? r : 0, (char *)buf);
		} else if (sscanf(op, "ctrl-in:%x:%x:%x:%x:%x", &a, &b, &c, &d, &e) == 5) {
			unsigned tmo = TMO_DEFAULT;
			sscanf(op, "ctrl-in:%*x:%*x:%*x:%*x:%*x:%u", &tmo);
			r = libusb_control_transfer(h, a, b, c, d, buf, e, tmo);
			rc(op, r);
			printf(" ");
			if (r > 0)
				hex(buf, r);
			printf("\n");
		} else if (sscanf(op, "ctrl-out:%x:%x:%x:%x:%4095s", &a, &b, &c, &d, s) == 5) {
			n = strcmp(s, "-") == 0 ? 0 : unhex(s, buf, sizeof buf);
			r = libusb_control_transfer(h, a, b, c, d, buf, n, TMO_DEFAULT);
			rc(op, r);
			printf("\n");
		} else if (sscanf(op, "active:%u", &a) == 1) {
			rc(op, libusb_kernel_driver_active(h, a));
			printf("\n");
		} else if (sscanf(op, "detach:%u", &a) == 1) {
			rc(op, libusb_detach_kernel_driver(h, a));
			printf("\n");
		} else if (sscanf(op, "attach:%u", &a) == 1) {
			rc(op, libusb_attach_kernel_driver(h, a));
			printf("\n");
		} else if (sscanf(op, "claim:%u", &a) == 1) {
			rc(op, libusb_claim_interface(h, a));
			printf("\n");
		} else if (sscanf(op, "release:%u", &a) == 1) {
			rc(op, libusb_release_interface(h, a));
			printf("\n");
		} else if (sscanf(op, "alt:%u:%u", &a, &b) == 2) {
			rc(op, libusb_set_interface_alt_setting(h, a, b));
			printf("\n");
		} else if (sscanf(op, "clear:%x", &a) == 1) {
			rc(op, libusb_clear_halt(h, a));
			printf("\n");
		} else if (!strcmp(op, "reset")) {
			rc(op, libusb_reset_device(h));
			printf("\n");
		} else if (sscanf(op, "bulk-in:%x:%u", &a, &b) == 2 ||
			   sscanf(op, "int-in:%x:%u", &a, &b) == 2) {
			unsigned tmo = TMO_DEFAULT;
			sscanf(op, "%*[^:]:%*x:%*u:%u", &tmo);
			int got = 0;
			if (op[0] == 'b')
				r = libusb_bulk_transfer(h, a, buf, b, &got, tmo);
			else
				r = libusb_interrupt_transfer(h, a, buf, b, &got, tmo);
			rc(op, r);
			printf(" %d ", got);
			hex(buf, got);
			printf("\n");
		} else if (sscanf(op, "bulk-out:%x:%4095[0-9a-f]", &a, s) == 2 ||
			   sscanf(op, "int-out:%x:%4095[0-9a-f]", &a, s) == 2) {
			unsigned tmo = TMO_DEFAULT;
			sscanf(op, "%*[^:]:%*x:%*[0-9a-f]:%u", &tmo);
			n = unhex(s, buf, sizeof buf);
			int got = 0;
			if (op[0] == 'b')
				r = libusb_bulk_transfer(h, a, buf, n, &got, tmo);
			else
				r = libusb_interrupt_transfer(h, a, buf, n, &got, tmo);
			rc(op, r);
			printf(" %d\n", got);
		} else if (sscanf(op, "iso-in:%x:%u:%u", &a, &b, &c) == 3) {
			iso(op, 1, a, b, c);
		} else if (sscanf(op, "iso-out:%x:%u:%u", &a, &b, &c) == 3) {
			iso(op, 0, a, b, c);
		} else if (sscanf(op, "many-ctrl:%u", &a) == 1) {
			double t0 = now_s();
			int ok = 0;
			for (unsigned k = 0; k < a; k++)
				ok += libusb_control_transfer(h, 0x80, 6, 0x0100, 0, buf, 18, TMO_DEFAULT) == 18;
			double t = now_s() - t0;
			printf("%s ok=%d per_s=%.0f\n", op, ok, a / t);
		} else if (sscanf(op, "many-bulk-out:%x:%u:%u", &a, &b, &c) == 3 ||
			   sscanf(op, "many-bulk-in:%x:%u:%u", &a, &b, &c) == 3) {
			double t0 = now_s();
			int ok = 0, got;
			memset(buf, 0x42, sizeof buf);
			for (unsigned k = 0; k < c; k++)
				ok += libusb_bulk_transfer(h, a, buf, b, &got, TMO_DEFAULT) == 0;
			double t = now_s() - t0;
			printf("%s ok=%d per_s=%.0f\n", op, ok, c / t);
		} else if (sscanf(op, "sleep:%u", &a) == 1) {
			usleep(a * 1000);
		} else if (!strcmp(op, "ready")) {
			printf("ready\n");
			fflush(stdout);
		} else {
			fprintf(stderr, "unknown operation %s\n", op);
			return 2;
		}
	}
	libusb_close(h);
	close(fd);
	libusb_exit(ctx);
	return 0;
}
