/*
 * A reaper thread as programs without libusb write one: the main thread
 * blocks in USBDEVFS_REAPURB on the device's usbfs file while a second
 * thread, a moment later, submits a control URB (GET_DESCRIPTOR of the
 * device) on the same file. devio.c's reap_as sleeps without the device
 * lock and whatever the file's O_NONBLOCK, so the submission goes through
 * and the reap returns it.
 *
 *   usbfs_reaper NODE [nonblock]
 *
 * prints `submit RC`, then `reap RC ours|other status S actual N`. A hang
 * guard (alarm, 60 s) ends a reap that never returns.
 */
#include <fcntl.h>
#include <linux/usbdevice_fs.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int fd;
static unsigned char buf[8 + 18];
static struct usbdevfs_urb urb;

static void *submit(void *unused)
{
	static const unsigned char setup[8] = { 0x80, 6, 0, 1, 0, 0, 18, 0 };

	(void)unused;
	usleep(100000);
	memcpy(buf, setup, sizeof(setup));
	urb.type = USBDEVFS_URB_TYPE_CONTROL;
	urb.endpoint = 0x80;
	urb.buffer = buf;
	urb.buffer_length = sizeof(buf);
	printf("submit %d\n", ioctl(fd, USBDEVFS_SUBMITURB, &urb));
	fflush(stdout);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	void *got = NULL;
	int r;

	if (argc < 2)
		return 2;
	fd = open(argv[1], O_RDWR | (argc > 2 ? O_NONBLOCK : 0));
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	alarm(60);
	pthread_create(&t, NULL, submit, NULL);
	r = ioctl(fd, USBDEVFS_REAPURB, &got);
	pthread_join(t, NULL);
	printf("reap %d %s status %d actual %d\n", r, got == &urb ? "ours" : "other", urb.status,
	       urb.actual_length);
	return 0;
}
