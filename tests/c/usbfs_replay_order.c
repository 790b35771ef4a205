/* usbfs_replay_order: three asynchronous libusb transfers in flight at once
 * on the device 1234:5679 (tests/umockdev.rs's), found by enumeration: an
 * interrupt IN on 0x85 (4 bytes) and a bulk IN on 0x81 (64 bytes)
 * submitted first, then, after a pause in which nothing should complete, a
 * vendor control OUT (bRequest 2, data "ab"). Prints one line per
 * completion, in the order the callbacks came (the order the device node
 * gave the URBs back):
 *   control out N | bulk in HEX | interrupt in HEX
 * A replay that follows the recording's order of completions gives them
 * back in that order, whatever the order of submission.
 * Exit 0 when all three completed with status 0, 1 otherwise.
 */
#include <libusb-1.0/libusb.h>
#include <stdio.h>
#include <string.h>

static int done, failed;

static void LIBUSB_CALL cb(struct libusb_transfer *t)
{
	const char *name = t->user_data;
	done++;
	if (t->status != LIBUSB_TRANSFER_COMPLETED) {
		printf("%s status %d\n", name, t->status);
		failed = 1;
	} else if (t->type == LIBUSB_TRANSFER_TYPE_CONTROL) {
		printf("%s %d\n", name, t->actual_length);
	} else {
		printf("%s ", name);
		for (int i = 0; i < t->actual_length; i++)
			printf("%02x", t->buffer[i]);
		printf("\n");
	}
	fflush(stdout);
}

int main(void)
{
	libusb_context *ctx;
	if (libusb_init(&ctx) != 0)
		return 1;
	libusb_device_handle *h = libusb_open_device_with_vid_pid(ctx, 0x1234, 0x5679);
	if (!h) {
		printf("not found\n");
		return 1;
	}
	if (libusb_claim_interface(h, 0) != 0) {
		printf("claim failed\n");
		return 1;
	}
	static unsigned char ibuf[4], bbuf[64], cbuf[LIBUSB_CONTROL_SETUP_SIZE + 2];
	struct libusb_transfer *ti = libusb_alloc_transfer(0);
	struct libusb_transfer *tb = libusb_alloc_transfer(0);
	struct libusb_transfer *tc = libusb_alloc_transfer(0);
	libusb_fill_interrupt_transfer(ti, h, 0x85, ibuf, sizeof ibuf, cb, "interrupt in", 10000);
	libusb_fill_bulk_transfer(tb, h, 0x81, bbuf, sizeof bbuf, cb, "bulk in", 10000);
	if (libusb_submit_transfer(ti) != 0 || libusb_submit_transfer(tb) != 0) {
		printf("submit failed\n");
		return 1;
	}
	/* A pause for a replay that answers at submission to do so (the
	 * recording completes both only after the control transfer). */
	struct timeval tv = {0, 200000};
	libusb_handle_events_timeout_completed(ctx, &tv, NULL);
	libusb_fill_control_setup(cbuf, 0x40, 0x02, 0, 0, 2);
	memcpy(cbuf + LIBUSB_CONTROL_SETUP_SIZE, "ab", 2);
	libusb_fill_control_transfer(tc, h, cbuf, cb, "control out", 10000);
	if (libusb_submit_transfer(tc) != 0) {
		printf("submit failed\n");
		return 1;
	}
	while (done < 3)
		if (libusb_handle_events(ctx) != 0)
			break;
	libusb_release_interface(h, 0);
	libusb_close(h);
	libusb_exit(ctx);
	return failed || done < 3;
}
