/* libusb_hotplug: a libusb hot-plug callback inside `monfs run`. Registers
 * a callback for arrivals and departures of any device, then N times runs
 * `monfs ctl plug 1 3 hid-mouse`, waits for the arrival, checks that
 * libusb_get_device_list of the same context lists it and that it opens,
 * runs `monfs ctl unplug 1 3` and waits for the departure. One line per
 * callback ("arrived BUS:ADDR VID:PID" / "left BUS:ADDR"), one per check;
 * exit 1 when a callback does not come within 60 s.
 *
 *   libusb_hotplug N
 */
#include <libusb-1.0/libusb.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int arrived, left;

static int LIBUSB_CALL cb(libusb_context *ctx, libusb_device *dev, libusb_hotplug_event ev, void *u)
{
	struct libusb_device_descriptor d;
	(void)ctx;
	(void)u;
	libusb_get_device_descriptor(dev, &d);
	if (ev == LIBUSB_HOTPLUG_EVENT_DEVICE_ARRIVED) {
		printf("arrived %d:%d %04x:%04x\n", libusb_get_bus_number(dev),
		       libusb_get_device_address(dev), d.idVendor, d.idProduct);
		arrived++;
	} else {
		printf("left %d:%d\n", libusb_get_bus_number(dev), libusb_get_device_address(dev));
		left++;
	}
	return 0;
}

static int wait_for(libusb_context *ctx, int *count, int want)
{
	time_t end = time(NULL) + 60;
	while (*count < want && time(NULL) < end) {
		struct timeval tv = { 1, 0 };
		libusb_handle_events_timeout_completed(ctx, &tv, NULL);
	}
	return *count >= want;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1;
	libusb_context *ctx;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (libusb_init(&ctx) != 0)
		return 1;
	printf("has_hotplug %d\n", libusb_has_capability(LIBUSB_CAP_HAS_HOTPLUG));
	libusb_hotplug_callback_handle h;
	if (libusb_hotplug_register_callback(ctx,
					     LIBUSB_HOTPLUG_EVENT_DEVICE_ARRIVED |
						     LIBUSB_HOTPLUG_EVENT_DEVICE_LEFT,
					     0, LIBUSB_HOTPLUG_MATCH_ANY, LIBUSB_HOTPLUG_MATCH_ANY,
					     LIBUSB_HOTPLUG_MATCH_ANY, cb, NULL, &h) != 0)
		return 1;
	for (int i = 0; i < n; i++) {
		if (system("monfs ctl plug 1 3 hid-mouse >/dev/null") != 0)
			return 1;
		if (!wait_for(ctx, &arrived, i + 1)) {
			printf("no arrival\n");
			return 1;
		}
		libusb_device **list;
		ssize_t k = libusb_get_device_list(ctx, &list);
		int listed = 0, opened = 0;
		for (ssize_t j = 0; j < k; j++) {
			struct libusb_device_descriptor d;
			libusb_get_device_descriptor(list[j], &d);
			if (d.idVendor == 0x0627 && libusb_get_port_number(list[j]) == 3) {
				libusb_device_handle *dh;
				listed = 1;
				if (libusb_open(list[j], &dh) == 0) {
					opened = 1;
					libusb_close(dh);
				}
			}
		}
		libusb_free_device_list(list, 1);
		printf("listed %d opened %d\n", listed, opened);
		if (system("monfs ctl unplug 1 3 >/dev/null") != 0)
			return 1;
		if (!wait_for(ctx, &left, i + 1)) {
			printf("no departure\n");
			return 1;
		}
	}
	libusb_exit(ctx);
	return 0;
}
