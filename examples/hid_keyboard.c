/*
 * A USB HID boot keyboard for monfs's `kind: external` devices, in C: it
 * types its first argument (lower-case letters, digits, space and newline)
 * on interrupt IN endpoint 0x81, one key-down and one key-up report per
 * character, then stays idle until monfs closes its standard input.
 *
 *   cc -O2 -o hid_keyboard examples/hid_keyboard.c
 *   command: [./hid_keyboard, "typed by c\n"]
 *
 * Or started on its own, serving the one connection monfs makes to a Unix
 * socket (`socket: /tmp/kbd.sock` in the device's entry, no `command:`):
 *
 *   ./hid_keyboard --socket /tmp/kbd.sock "typed by c\n"
 *
 * The protocol is in docs/external-devices.md ("Simulate your own device
 * in five minutes"): monfs writes `hello`, `submit` and `unlink` lines, the device
 * answers `complete ID STATUS ACTUAL [HEXDATA]` lines.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The standard HID boot keyboard report descriptor: 8 modifier bits, a
 * reserved byte, 5 LED bits, 6 key codes. */
static const unsigned char report_desc[63] = {
	0x05, 0x01, 0x09, 0x06, 0xa1, 0x01, 0x05, 0x07, 0x19, 0xe0, 0x29, 0xe7,
	0x15, 0x00, 0x25, 0x01, 0x75, 0x01, 0x95, 0x08, 0x81, 0x02, 0x95, 0x01,
	0x75, 0x08, 0x81, 0x01, 0x95, 0x05, 0x75, 0x01, 0x05, 0x08, 0x19, 0x01,
	0x29, 0x05, 0x91, 0x02, 0x95, 0x01, 0x75, 0x03, 0x91, 0x01, 0x95, 0x06,
	0x75, 0x08, 0x15, 0x00, 0x25, 0x65, 0x05, 0x07, 0x19, 0x00, 0x29, 0x65,
	0x81, 0x00, 0xc0,
};

static unsigned char usage(char c)
{
	if (c >= 'a' && c <= 'z')
		return 4 + (c - 'a');
	if (c >= '1' && c <= '9')
		return 0x1e + (c - '1');
	if (c == '0')
		return 0x27;
	if (c == '\n')
		return 0x28;
	return 0x2c; /* space, and anything else */
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void answer(unsigned long long id, int status, unsigned len,
		   const unsigned char *data)
{
	printf("complete %llu %d %u", id, status, len);
	if (data && len) {
		putchar(' ');
		for (unsigned i = 0; i < len; i++)
			printf("%02x", data[i]);
	}
	putchar('\n');
	fflush(stdout);
}

/* Listen on the Unix socket `path`, take the one connection monfs makes and
 * make it standard input and output. */
static int serve_socket(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int l, c;

	if (strlen(path) >= sizeof(a.sun_path)) {
		fprintf(stderr, "hid_keyboard: socket path too long: %s\n", path);
		return -1;
	}
	strcpy(a.sun_path, path);
	l = socket(AF_UNIX, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(l, 1) < 0) {
		perror(path);
		return -1;
	}
	fprintf(stderr, "hid_keyboard: listening on %s\n", path);
	c = accept(l, NULL, NULL);
	close(l);
	if (c < 0 || dup2(c, 0) < 0 || dup2(c, 1) < 0) {
		perror("hid_keyboard: accept");
		return -1;
	}
	close(c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "--socket") == 0) {
		if (serve_socket(argv[2]) < 0)
			return 1;
		argc -= 2;
		argv += 2;
	}
	const char *text = argc > 1 ? argv[1] : "typed by c\n";
	size_t ntext = strlen(text), next = 0; /* next report: 2*char + up */
	unsigned long long pending[16];
	int npending = 0, typing = 0;
	double due = 0;
	static char buf[1 << 18];
	size_t have = 0;

	for (;;) {
		if (typing && npending && next < 2 * ntext && now_s() >= due) {
			unsigned char r[8] = { 0 };

			if (next % 2 == 0)
				r[2] = usage(text[next / 2]);
			answer(pending[0], 0, 8, r);
			memmove(pending, pending + 1, --npending * sizeof(*pending));
			next++;
			due = now_s() + 0.05;
			continue;
		}
		int timeout = -1;
		if (typing && npending && next < 2 * ntext) {
			double left = due - now_s();
			timeout = left > 0 ? (int)(left * 1000) + 1 : 0;
		}
		struct pollfd p = { .fd = 0, .events = POLLIN };
		if (poll(&p, 1, timeout) <= 0)
			continue;
		ssize_t n = read(0, buf + have, sizeof(buf) - 1 - have);
		if (n <= 0)
			return 0; /* monfs closed our input: unplugged */
		have += n;
		char *line = buf, *nl;
		while ((nl = memchr(line, '\n', buf + have - line))) {
			*nl = 0;
			unsigned long long id;
			unsigned ep, len;
			char type, setup[17];

			if (sscanf(line, "submit %llu %x %c %u %16s", &id, &ep,
				   &type, &len, setup) == 5) {
				unsigned char s[8];

				for (int i = 0; type == 'C' && i < 8; i++)
					sscanf(setup + 2 * i, "%2hhx", &s[i]);
				if (type != 'C' && ep == 0x81 && npending < 16) {
					pending[npending++] = id;
				} else if (type == 'C' && s[0] == 0x81 &&
					   s[1] == 6 && s[3] == 0x22) {
					answer(id, 0, len < 63 ? len : 63,
					       report_desc);
					typing = 1;
					due = now_s() + 0.3;
				} else if (type == 'C' && s[0] == 0x21) {
					answer(id, 0, len, NULL);
				} else {
					answer(id, -32, 0, NULL); /* stall */
				}
			}
			line = nl + 1;
		}
		have = buf + have - line;
		memmove(buf, line, have);
		if (have == sizeof(buf) - 1)
			return 1; /* a line longer than any monfs sends */
	}
}
