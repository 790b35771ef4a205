/*
 * A CDC ACM loopback for monfs's `kind: external` devices, in C (the same
 * device as examples/acm_loopback.py, ids 1209:0005): cdc_acm binds it as
 * /dev/ttyACMN, and every byte the host writes comes back to its reads.
 * Line coding, control lines and breaks are acknowledged; the first
 * notification the host asks for says DCD and DSR are up, so that a
 * blocking open (no CLOCAL) finds the carrier.
 *
 *   cc -O2 -o acm_loopback examples/acm_loopback.c
 *   ./acm_loopback --dump acm.desc          # its descriptors file
 *   # in the configuration: descriptors: acm.desc, command: [./acm_loopback]
 *
 * The protocol is in docs/external-devices.md: monfs writes `hello`,
 * `submit` and `unlink` lines, the device answers `complete` lines. An
 * endpoint's URBs are answered oldest first.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The device and configuration descriptors (the Python example's dump). */
static const unsigned char descriptors[85] = {
	0x12, 0x01, 0x00, 0x02, 0x02, 0x00, 0x00, 0x40, 0x09, 0x12, 0x05, 0x00,
	0x00, 0x01, 0x01, 0x02, 0x03, 0x01, 0x09, 0x02, 0x43, 0x00, 0x02, 0x01,
	0x00, 0x80, 0x32, 0x09, 0x04, 0x00, 0x00, 0x01, 0x02, 0x02, 0x01, 0x00,
	0x05, 0x24, 0x00, 0x10, 0x01, 0x05, 0x24, 0x01, 0x00, 0x01, 0x04, 0x24,
	0x02, 0x06, 0x05, 0x24, 0x06, 0x00, 0x01, 0x07, 0x05, 0x83, 0x03, 0x0a,
	0x00, 0x09, 0x09, 0x04, 0x01, 0x00, 0x02, 0x0a, 0x00, 0x00, 0x00, 0x07,
	0x05, 0x81, 0x02, 0x00, 0x02, 0x00, 0x07, 0x05, 0x02, 0x02, 0x00, 0x02,
	0x00,
};

#define MAXQ 64
#define LOOP (1 << 16)

static unsigned long long in_q[MAXQ];   /* pending bulk IN URBs: id */
static unsigned in_len[MAXQ];
static int n_in;
static unsigned char loop[LOOP];        /* bytes written, not read back yet */
static size_t n_loop;
static unsigned char coding[7] = { 0x80, 0x25, 0, 0, 0, 0, 8 }; /* 9600 8N1 */
static int notified;

static void complete(unsigned long long id, int status, unsigned len,
		     const unsigned char *data)
{
	printf("complete %llu %d %u", id, status, len);
	if (data && len) {
		putchar(' ');
		for (unsigned i = 0; i < len; i++)
			printf("%02x", data[i]);
	}
	putchar('\n');
}

static size_t unhex(const char *s, unsigned char *out, size_t max)
{
	size_t n = 0;
	unsigned b;

	while (n < max && s[0] && s[1] && sscanf(s, "%2x", &b) == 1) {
		out[n++] = b;
		s += 2;
	}
	return n;
}

/* Answer the oldest pending IN URBs while there are bytes to give back. */
static void give_back(void)
{
	while (n_in && n_loop) {
		unsigned n = in_len[0] < n_loop ? in_len[0] : n_loop;

		complete(in_q[0], 0, n, loop);
		memmove(loop, loop + n, n_loop - n);
		n_loop -= n;
		memmove(in_q, in_q + 1, --n_in * sizeof(*in_q));
		memmove(in_len, in_len + 1, n_in * sizeof(*in_len));
	}
}

static void control(unsigned long long id, const unsigned char *setup,
		    const unsigned char *data, size_t ndata)
{
	unsigned rt = setup[0], req = setup[1];

	if (rt == 0x21 && req == 0x20 && ndata >= 7) { /* SET_LINE_CODING */
		memcpy(coding, data, 7);
		complete(id, 0, ndata, NULL);
	} else if (rt == 0xa1 && req == 0x21) { /* GET_LINE_CODING */
		complete(id, 0, 7, coding);
	} else if (rt == 0x21 && (req == 0x22 || req == 0x23)) {
		complete(id, 0, 0, NULL); /* SET_CONTROL_LINE_STATE, SEND_BREAK */
	} else {
		complete(id, -32, 0, NULL);
	}
}

int main(int argc, char **argv)
{
	static char line[1 << 18];
	static unsigned char data[1 << 17];

	if (argc == 3 && strcmp(argv[1], "--dump") == 0) {
		FILE *f = fopen(argv[2], "wb");

		if (!f || fwrite(descriptors, 1, sizeof(descriptors), f) != sizeof(descriptors) ||
		    fclose(f) != 0) {
			perror(argv[2]);
			return 1;
		}
		return 0;
	}
	while (fgets(line, sizeof(line), stdin)) {
		unsigned long long id;
		unsigned ep, len;
		char type, setup[17], hex[sizeof(line)];
		int i;

		if (sscanf(line, "submit %llu %x %c %u %16s %s", &id, &ep, &type,
			   &len, setup, hex) == 6) {
			size_t n = strcmp(hex, "-") ? unhex(hex, data, sizeof(data)) : 0;

			if (type == 'C') {
				unsigned char s[8];

				unhex(setup, s, 8);
				control(id, s, data, n);
			} else if (type == 'B' && !(ep & 0x80)) {
				if (n > LOOP - n_loop)
					n = LOOP - n_loop; /* full: keep what fits */
				memcpy(loop + n_loop, data, n);
				n_loop += n;
				complete(id, 0, len, NULL);
			} else if (type == 'B' && n_in < MAXQ) {
				in_q[n_in] = id;
				in_len[n_in++] = len;
			} else if (type == 'I' && !notified) {
				/* SERIAL_STATE: DCD (bRxCarrier) and DSR (bTxCarrier). */
				static const unsigned char state[10] = {
					0xa1, 0x20, 0, 0, 0, 0, 2, 0, 0x03, 0x00
				};
				notified = 1;
				complete(id, 0, len < 10 ? len : 10, state);
			}
			give_back();
		} else if (sscanf(line, "unlink %llu", &id) == 1) {
			for (i = 0; i < n_in && in_q[i] != id; i++)
				;
			if (i < n_in) {
				memmove(in_q + i, in_q + i + 1, (n_in - i - 1) * sizeof(*in_q));
				memmove(in_len + i, in_len + i + 1, (n_in - i - 1) * sizeof(*in_len));
				n_in--;
			}
		}
		fflush(stdout);
	}
	return 0; /* monfs closed our input: unplugged */
}
