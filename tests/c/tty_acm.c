/*
 * A CDC ACM port (/dev/ttyACMN) driven as pyserial and stty drive one,
 * against a loopback device (every byte written comes back). Prints one
 * line per result, `name value`, and nothing that depends on timing, so
 * that the kernel's answers (scripts/kernel-vm, with g_serial on
 * dummy_hcd) and monfs's (tests/tty.rs) compare line by line:
 *
 *   tty_acm /dev/ttyACM0            the session (below)
 *   tty_acm --loopback /dev/ttyGS0  the gadget side: raw, every byte
 *                                   echoed back until killed
 *
 * The session: open O_RDWR|O_NOCTTY|O_NONBLOCK; the termios of the first
 * open; raw, VMIN 1, VTIME 0, 9600 baud (TCSANOW); DTR and RTS up
 * (TIOCMBIS); TCIFLUSH; a line written and read back at 9600, 115200 and
 * 3000000 baud; TIOCMGET; DTR and RTS down (TIOCMBIC); TIOCMGET;
 * tcsendbreak(fd, 0); TIOCGICOUNT; TIOCGSERIAL; TCGETS2; TCSETS2 with
 * BOTHER at 250000 baud and TCGETS2 again; close.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/serial.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

/* struct termios2 of <asm/termbits.h>, which clashes with <termios.h> */
struct ktermios2 {
	unsigned int c_iflag, c_oflag, c_cflag, c_lflag;
	unsigned char c_line;
	unsigned char c_cc[19];
	unsigned int c_ispeed, c_ospeed;
};
#define K_TCGETS2 _IOR('T', 0x2A, struct ktermios2)
#define K_TCSETS2 _IOW('T', 0x2B, struct ktermios2)
#define K_BOTHER 0010000
#define K_CBAUD 0010017

/* the result of a call: 0, or minus its errno */
static int rc(int r)
{
	return r < 0 ? -errno : r;
}

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000L + t.tv_nsec / 1000000;
}

static unsigned baud_of(speed_t s)
{
	static const struct { speed_t s; unsigned b; } m[] = {
		{ B0, 0 }, { B50, 50 }, { B75, 75 }, { B110, 110 }, { B134, 134 },
		{ B150, 150 }, { B200, 200 }, { B300, 300 }, { B600, 600 },
		{ B1200, 1200 }, { B1800, 1800 }, { B2400, 2400 }, { B4800, 4800 },
		{ B9600, 9600 }, { B19200, 19200 }, { B38400, 38400 },
		{ B57600, 57600 }, { B115200, 115200 }, { B230400, 230400 },
		{ B460800, 460800 }, { B500000, 500000 }, { B576000, 576000 },
		{ B921600, 921600 }, { B1000000, 1000000 }, { B1152000, 1152000 },
		{ B1500000, 1500000 }, { B2000000, 2000000 }, { B2500000, 2500000 },
		{ B3000000, 3000000 }, { B3500000, 3500000 }, { B4000000, 4000000 },
	};
	for (size_t i = 0; i < sizeof m / sizeof m[0]; i++)
		if (m[i].s == s)
			return m[i].b;
	return (unsigned)-1;
}

/* write all of buf (non-blocking fd: poll for room), within deadline */
static int write_all(int fd, const char *buf, size_t n, long deadline)
{
	size_t done = 0;
	while (done < n) {
		ssize_t w = write(fd, buf + done, n - done);
		if (w > 0) {
			done += (size_t)w;
			continue;
		}
		if (w < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		long left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		poll(&p, 1, (int)left);
	}
	return 0;
}

/* read exactly n bytes into buf, within deadline; bytes read or -errno */
static int read_n(int fd, char *buf, size_t n, long deadline)
{
	size_t got = 0;
	while (got < n) {
		long left = deadline - now_ms();
		if (left <= 0)
			break;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		ssize_t k = read(fd, buf + got, n - got);
		if (k < 0 && errno != EAGAIN && errno != EINTR)
			return -errno;
		if (k == 0)
			break;
		if (k > 0)
			got += (size_t)k;
	}
	return (int)got;
}

static int loopback(const char *path)
{
	int fd = open(path, O_RDWR | O_NOCTTY);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	struct termios t;
	if (tcgetattr(fd, &t) == 0) {
		cfmakeraw(&t);
		t.c_cc[VMIN] = 1;
		t.c_cc[VTIME] = 0;
		tcsetattr(fd, TCSANOW, &t);
	}
	printf("loopback %s open\n", path);
	fflush(stdout);
	char buf[4096];
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			/* the host went (a hangup): wait for it to come back */
			if (n < 0 && errno != EIO)
				perror("read");
			usleep(100000);
			continue;
		}
		for (ssize_t d = 0; d < n;) {
			ssize_t w = write(fd, buf + d, (size_t)(n - d));
			if (w < 0) {
				if (errno == EINTR)
					continue;
				perror("write");
				break;
			}
			d += w;
		}
	}
}

static void modem(int fd, const char *name)
{
	int m = 0;
	int r = rc(ioctl(fd, TIOCMGET, &m));
	if (r)
		printf("%s error %d\n", name, r);
	else
		printf("%s 0x%x\n", name, (unsigned)m);
}

static void tiocm(int fd, const char *name, unsigned long req, int bits)
{
	printf("%s %d\n", name, rc(ioctl(fd, req, &bits)));
}

static void termios2(int fd, const char *name)
{
	struct ktermios2 k;
	memset(&k, 0, sizeof k);
	int r = rc(ioctl(fd, K_TCGETS2, &k));
	if (r)
		printf("%s error %d\n", name, r);
	else
		printf("%s ospeed %u ispeed %u cbaud 0%o\n", name, k.c_ospeed, k.c_ispeed,
		       k.c_cflag & K_CBAUD);
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "--loopback") == 0)
		return loopback(argv[2]);
	if (argc != 2) {
		fprintf(stderr, "usage: tty_acm DEVICE | tty_acm --loopback DEVICE\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	int fd = open(argv[1], O_RDWR | O_NOCTTY | O_NONBLOCK);
	if (fd < 0) {
		printf("open %d\n", -errno);
		return 1;
	}
	printf("open 0\n");
	struct termios t;
	int r = rc(tcgetattr(fd, &t));
	printf("tcgetattr %d\n", r);
	if (r)
		return 1;
	printf("first_speed %u %u\n", baud_of(cfgetospeed(&t)), baud_of(cfgetispeed(&t)));
	printf("first_cflag 0x%x\n", (unsigned)t.c_cflag);
	printf("first_iflag 0x%x\n", (unsigned)t.c_iflag);
	printf("first_oflag 0x%x\n", (unsigned)t.c_oflag);
	printf("first_lflag 0x%x\n", (unsigned)t.c_lflag);
	printf("first_line %u\n", (unsigned)t.c_line);
	printf("first_cc");
	for (int i = 0; i < NCCS && i < 17; i++)
		printf(" %02x", t.c_cc[i]);
	printf("\n");

	/* pyserial's Serial.open: raw, VMIN 1, VTIME 0, the speed, TCSANOW */
	cfmakeraw(&t);
	t.c_cflag |= CLOCAL | CREAD;
	t.c_cc[VMIN] = 1;
	t.c_cc[VTIME] = 0;
	cfsetispeed(&t, B9600);
	cfsetospeed(&t, B9600);
	printf("tcsetattr_raw %d\n", rc(tcsetattr(fd, TCSANOW, &t)));
	tiocm(fd, "tiocmbis_dtr", TIOCMBIS, TIOCM_DTR);
	tiocm(fd, "tiocmbis_rts", TIOCMBIS, TIOCM_RTS);
	printf("tcflush_in %d\n", rc(tcflush(fd, TCIFLUSH)));

	static const struct { speed_t s; unsigned b; } speeds[] = {
		{ B9600, 9600 }, { B115200, 115200 }, { B3000000, 3000000 },
	};
	for (size_t i = 0; i < sizeof speeds / sizeof speeds[0]; i++) {
		cfsetispeed(&t, speeds[i].s);
		cfsetospeed(&t, speeds[i].s);
		printf("tcsetattr %u %d\n", speeds[i].b, rc(tcsetattr(fd, TCSANOW, &t)));
		char line[64], back[64];
		int n = snprintf(line, sizeof line, "hello %u\n", speeds[i].b);
		/* generous: the loopback is a guest under software emulation */
		long deadline = now_ms() + 60000;
		int w = write_all(fd, line, (size_t)n, deadline);
		printf("write %u %d\n", speeds[i].b, w == 0 ? n : w);
		int got = read_n(fd, back, (size_t)n, deadline);
		printf("read %u %d %s\n", speeds[i].b, got,
		       got == n && memcmp(line, back, (size_t)n) == 0 ? "match" : "mismatch");
	}

	modem(fd, "tiocmget");
	tiocm(fd, "tiocmbic_dtr", TIOCMBIC, TIOCM_DTR);
	tiocm(fd, "tiocmbic_rts", TIOCMBIC, TIOCM_RTS);
	modem(fd, "tiocmget_after");
	printf("tcsendbreak %d\n", rc(tcsendbreak(fd, 0)));

	struct serial_icounter_struct ic;
	memset(&ic, 0, sizeof ic);
	r = rc(ioctl(fd, TIOCGICOUNT, &ic));
	if (r)
		printf("icount error %d\n", r);
	else
		printf("icount cts %d dsr %d rng %d dcd %d rx %d tx %d frame %d overrun %d parity %d brk %d buf_overrun %d\n",
		       ic.cts, ic.dsr, ic.rng, ic.dcd, ic.rx, ic.tx, ic.frame, ic.overrun, ic.parity,
		       ic.brk, ic.buf_overrun);

	struct serial_struct ss;
	memset(&ss, 0, sizeof ss);
	r = rc(ioctl(fd, TIOCGSERIAL, &ss));
	if (r)
		printf("serial error %d\n", r);
	else
		printf("serial line %d close_delay %u closing_wait %u xmit_fifo_size %d baud_base %d\n",
		       ss.line, ss.close_delay, ss.closing_wait, ss.xmit_fifo_size, ss.baud_base);

	termios2(fd, "tcgets2");
	struct ktermios2 k;
	memset(&k, 0, sizeof k);
	r = rc(ioctl(fd, K_TCGETS2, &k));
	if (r == 0) {
		k.c_cflag = (k.c_cflag & ~K_CBAUD) | K_BOTHER;
		k.c_ospeed = 250000;
		k.c_ispeed = 250000;
		r = rc(ioctl(fd, K_TCSETS2, &k));
	}
	printf("tcsets2_bother %d\n", r);
	termios2(fd, "tcgets2_after");
	printf("close %d\n", rc(close(fd)));
	return 0;
}
