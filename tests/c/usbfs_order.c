/* usbfs_order: keep INFLIGHT asynchronous libusb transfers on one endpoint
 * of a device (the node MOUNT/dev/bus/usb/BBB/DDD, wrapped with
 * libusb_wrap_sys_device) and resubmit each as it completes, until TOTAL
 * were submitted; then print what a streaming program (an SDR receiver, a
 * logic analyser) depends on: whether the callbacks came in submission
 * order, and the rate.
 *
 *   usbfs_order DEVNODE INTF ALT KIND EP LEN INFLIGHT TOTAL [NPK]
 *
 * KIND is bulk-in, bulk-out, int-in, int-out, iso-in or iso-out; EP in hex;
 * LEN the transfer's length (for iso: each packet's, NPK packets a
 * transfer). The interface's kernel driver is detached and INTF claimed
 * (and set to ALT when ALT > 0) first. Prints one line:
 *   done=N out_of_order=K bytes=B status_errors=E packets=P packet_errors=Q secs=S
 * where out_of_order counts callbacks whose transfer was not the oldest
 * still in flight, bytes the data moved, and for iso the packets and those
 * not completed with status 0. Exit 1 when a transfer could not be made.
 */
#include <libusb-1.0/libusb.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_INFLIGHT 64

static long submitted, done, out_of_order, bytes, status_errors, packets, packet_errors;
static long total, oldest;
static long seq_of[MAX_INFLIGHT];
static int failed;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

static void LIBUSB_CALL cb(struct libusb_transfer *t)
{
	long slot = (long)(intptr_t)t->user_data;
	long seq = seq_of[slot];
	if (seq != oldest)
		out_of_order++;
	/* The oldest in flight is the smallest sequence number not done; the
	 * ones in flight are seq_of[] of the busy slots. */
	done++;
	if (t->status != LIBUSB_TRANSFER_COMPLETED)
		status_errors++;
	if (t->type == LIBUSB_TRANSFER_TYPE_ISOCHRONOUS) {
		for (int i = 0; i < t->num_iso_packets; i++) {
			packets++;
			bytes += t->iso_packet_desc[i].actual_length;
			if (t->iso_packet_desc[i].status != LIBUSB_TRANSFER_COMPLETED)
				packet_errors++;
		}
	} else {
		bytes += t->actual_length;
	}
	seq_of[slot] = -1;
	if (submitted < total) {
		seq_of[slot] = submitted++;
		if (libusb_submit_transfer(t) != 0) {
			failed = 1;
			seq_of[slot] = -1;
		}
	}
	/* Recompute the oldest still in flight. */
	oldest = -1;
	for (int i = 0; i < MAX_INFLIGHT; i++)
		if (seq_of[i] >= 0 && (oldest < 0 || seq_of[i] < oldest))
			oldest = seq_of[i];
}

int main(int argc, char **argv)
{
	if (argc < 9) {
		fprintf(stderr, "usage: usbfs_order DEVNODE INTF ALT KIND EP LEN INFLIGHT TOTAL [NPK]\n");
		return 2;
	}
	int intf = atoi(argv[2]), alt = atoi(argv[3]);
	const char *kind = argv[4];
	unsigned char ep = (unsigned char)strtoul(argv[5], NULL, 16);
	int len = atoi(argv[6]);
	int inflight = atoi(argv[7]);
	total = atol(argv[8]);
	int npk = argc > 9 ? atoi(argv[9]) : 0;
	if (inflight < 1 || inflight > MAX_INFLIGHT || len < 0 || total < inflight) {
		fprintf(stderr, "usbfs_order: bad INFLIGHT, LEN or TOTAL\n");
		return 2;
	}
	int iso = strncmp(kind, "iso", 3) == 0;
	int type = iso ? LIBUSB_TRANSFER_TYPE_ISOCHRONOUS
		   : strncmp(kind, "int", 3) == 0 ? LIBUSB_TRANSFER_TYPE_INTERRUPT
						  : LIBUSB_TRANSFER_TYPE_BULK;
	if (iso && npk < 1) {
		fprintf(stderr, "usbfs_order: iso needs NPK\n");
		return 2;
	}
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	libusb_context *ctx;
	libusb_device_handle *h;
	libusb_set_option(NULL, LIBUSB_OPTION_NO_DEVICE_DISCOVERY);
	if (libusb_init(&ctx) != 0 || libusb_wrap_sys_device(ctx, fd, &h) != 0) {
		fprintf(stderr, "usbfs_order: libusb cannot wrap %s\n", argv[1]);
		return 1;
	}
	if (libusb_kernel_driver_active(h, intf) == 1 && libusb_detach_kernel_driver(h, intf) != 0) {
		fprintf(stderr, "usbfs_order: cannot detach interface %d\n", intf);
		return 1;
	}
	if (libusb_claim_interface(h, intf) != 0) {
		fprintf(stderr, "usbfs_order: cannot claim interface %d\n", intf);
		return 1;
	}
	if (alt > 0 && libusb_set_interface_alt_setting(h, intf, alt) != 0) {
		fprintf(stderr, "usbfs_order: cannot set interface %d to %d\n", intf, alt);
		return 1;
	}
	int buflen = iso ? len * npk : len;
	struct libusb_transfer *xf[MAX_INFLIGHT];
	for (int i = 0; i < MAX_INFLIGHT; i++)
		seq_of[i] = -1;
	double t0 = now_s();
	for (int i = 0; i < inflight; i++) {
		unsigned char *buf = calloc(1, buflen ? buflen : 1);
		for (int k = 0; k < buflen; k++)
			buf[k] = (unsigned char)(k * 3 + i);
		xf[i] = libusb_alloc_transfer(iso ? npk : 0);
		if (iso) {
			libusb_fill_iso_transfer(xf[i], h, ep, buf, buflen, npk, cb, (void *)(intptr_t)i, 0);
			libusb_set_iso_packet_lengths(xf[i], len);
		} else {
			libusb_fill_bulk_transfer(xf[i], h, ep, buf, len, cb, (void *)(intptr_t)i, 0);
			xf[i]->type = type;
		}
		seq_of[i] = submitted++;
		if (libusb_submit_transfer(xf[i]) != 0) {
			fprintf(stderr, "usbfs_order: cannot submit\n");
			return 1;
		}
	}
	oldest = 0;
	while (done < total && !failed) {
		struct timeval tv = {30, 0};
		int r = libusb_handle_events_timeout_completed(ctx, &tv, NULL);
		if (r != 0 && r != LIBUSB_ERROR_INTERRUPTED) {
			fprintf(stderr, "usbfs_order: %s\n", libusb_error_name(r));
			return 1;
		}
	}
	double secs = now_s() - t0;
	printf("done=%ld out_of_order=%ld bytes=%ld status_errors=%ld packets=%ld packet_errors=%ld secs=%.6f\n",
	       done, out_of_order, bytes, status_errors, packets, packet_errors, secs);
	fflush(stdout);
	if (failed) {
		fprintf(stderr, "usbfs_order: a resubmission failed\n");
		return 1;
	}
	libusb_release_interface(h, intf);
	libusb_close(h);
	libusb_exit(ctx);
	return 0;
}
