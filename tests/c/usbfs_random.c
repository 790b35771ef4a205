/* usbfs_random: N seeded random usbfs calls on one device node, as a
 * careless or hostile program makes them: synchronous CONTROL and BULK with
 * 5 ms timeouts, asynchronous URBs submitted, discarded and reaped without
 * blocking, claims, releases, driver detaches and attaches, SETINTERFACE,
 * CLEAR_HALT and RESET. Every call must return (a watchdog ends the run
 * with the call it hung in); errors are expected and counted.
 *
 *   usbfs_random DEVNODE SEED N
 *
 * Prints "done N calls, E errors, R resets" and exits 0, or "hung in OP"
 * and exits 1 when one call took more than 30 s.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#define MAX_ASYNC 16

static uint64_t rng;
static const char *volatile current = "open";

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)(rng >> 16);
}

static void hung(int sig)
{
	(void)sig;
	char msg[128];
	int n = snprintf(msg, sizeof msg, "hung in %s\n", current);
	if (write(1, msg, n) < 0) {
	}
	_exit(1);
}

static const unsigned char eps[] = { 0x00, 0x81, 0x82, 0x83, 0x01, 0x02, 0x03, 0x85 };

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: usbfs_random DEVNODE SEED N\n");
		return 2;
	}
	rng = strtoull(argv[2], NULL, 0) * 2654435761u + 1;
	long n = atol(argv[3]);
	int fd = open(argv[1], O_RDWR);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	signal(SIGALRM, hung);
	static struct usbdevfs_urb urbs[MAX_ASYNC];
	static unsigned char bufs[MAX_ASYNC][512];
	static int busy[MAX_ASYNC];
	static unsigned char data[4096];
	long errors = 0, resets = 0;
	for (long i = 0; i < n; i++) {
		int r = 0;
		unsigned op = next() % 100;
		unsigned char ep = eps[next() % sizeof eps];
		unsigned intf = next() % 3;
		alarm(30);
		if (op < 25) {
			current = "CONTROL";
			struct usbdevfs_ctrltransfer c = { 0 };
			static const unsigned char types[] = { 0x80, 0x81, 0x82, 0xc0, 0xa1, 0x40, 0x21, 0x00 };
			c.bRequestType = types[next() % sizeof types];
			c.bRequest = next() % 12;
			c.wValue = (next() % 4) << 8 | (next() % 3);
			c.wIndex = next() % 3;
			c.wLength = (c.bRequestType & 0x80) ? next() % 256 : next() % 8;
			c.timeout = 5;
			c.data = data;
			r = ioctl(fd, USBDEVFS_CONTROL, &c);
		} else if (op < 45) {
			current = "BULK";
			struct usbdevfs_bulktransfer b = { 0 };
			b.ep = ep ? ep : 0x81;
			b.len = next() % 512;
			b.timeout = 5;
			b.data = data;
			r = ioctl(fd, USBDEVFS_BULK, &b);
		} else if (op < 65) {
			current = "SUBMITURB";
			int k = next() % MAX_ASYNC;
			if (busy[k]) {
				current = "DISCARDURB";
				r = ioctl(fd, USBDEVFS_DISCARDURB, &urbs[k]);
			} else {
				struct usbdevfs_urb *u = &urbs[k];
				memset(u, 0, sizeof *u);
				static const unsigned char kinds[] = { USBDEVFS_URB_TYPE_BULK, USBDEVFS_URB_TYPE_INTERRUPT,
								       USBDEVFS_URB_TYPE_CONTROL };
				u->type = kinds[next() % sizeof kinds];
				u->endpoint = u->type == USBDEVFS_URB_TYPE_CONTROL ? 0 : (ep ? ep : 0x81);
				u->buffer = bufs[k];
				u->buffer_length = u->type == USBDEVFS_URB_TYPE_CONTROL ? 8 + next() % 64 : next() % 512;
				if (u->type == USBDEVFS_URB_TYPE_CONTROL) {
					unsigned char s[8] = { 0x80, 6, 0, 1, 0, 0, (unsigned char)(u->buffer_length - 8), 0 };
					memcpy(bufs[k], s, 8);
				}
				u->usercontext = (void *)(intptr_t)k;
				r = ioctl(fd, USBDEVFS_SUBMITURB, u);
				if (r == 0)
					busy[k] = 1;
			}
		} else if (op < 80) {
			current = "REAPURBNDELAY";
			struct usbdevfs_urb *got = NULL;
			r = ioctl(fd, USBDEVFS_REAPURBNDELAY, &got);
			if (r == 0 && got)
				busy[got - urbs] = 0;
		} else if (op < 85) {
			current = "CLAIMINTERFACE";
			r = ioctl(fd, USBDEVFS_CLAIMINTERFACE, &intf);
		} else if (op < 88) {
			current = "RELEASEINTERFACE";
			r = ioctl(fd, USBDEVFS_RELEASEINTERFACE, &intf);
		} else if (op < 91) {
			current = (next() & 1) ? "DISCONNECT" : "CONNECT";
			struct usbdevfs_ioctl c = { .ifno = (int)intf,
						    .ioctl_code = current[0] == 'D' ? USBDEVFS_DISCONNECT : USBDEVFS_CONNECT };
			r = ioctl(fd, USBDEVFS_IOCTL, &c);
		} else if (op < 95) {
			current = "SETINTERFACE";
			struct usbdevfs_setinterface s = { .interface = intf, .altsetting = next() % 3 };
			r = ioctl(fd, USBDEVFS_SETINTERFACE, &s);
		} else if (op < 98) {
			current = "CLEAR_HALT";
			unsigned e = ep;
			r = ioctl(fd, USBDEVFS_CLEAR_HALT, &e);
		} else {
			current = "RESET";
			resets++;
			r = ioctl(fd, USBDEVFS_RESET, 0);
		}
		alarm(0);
		if (r < 0) {
			errors++;
			/* ENODEV is also an injected submit error (errors:
			 * submit_error_every); the device is gone only if its
			 * node is. */
			if (errno == ENODEV && access(argv[1], F_OK) != 0) {
				printf("device gone after %ld calls (%s)\n", i, current);
				return 1;
			}
		}
	}
	/* Whatever is left is discarded and reaped. */
	for (int k = 0; k < MAX_ASYNC; k++)
		if (busy[k])
			ioctl(fd, USBDEVFS_DISCARDURB, &urbs[k]);
	alarm(30);
	current = "final REAPURB";
	for (int k = 0; k < MAX_ASYNC; k++) {
		if (!busy[k])
			continue;
		struct usbdevfs_urb *got = NULL;
		if (ioctl(fd, USBDEVFS_REAPURB, &got) == 0 && got)
			busy[got - urbs] = 0;
	}
	alarm(0);
	printf("done %ld calls, %ld errors, %ld resets\n", n, errors, resets);
	return 0;
}
