/*
 * usbmon binary API definitions and a printer for the `Nu` text format,
 * written from Documentation/usb/usbmon.rst. Shared by the monfs examples and
 * test clients.
 */
#ifndef MONFS_USBMON_H
#define MONFS_USBMON_H

#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>

struct usbmon_packet {
	uint64_t id;			/*  0: URB ID */
	unsigned char type;		/*  8: 'S', 'C', 'E', '@' (filler) */
	unsigned char xfer_type;	/*  9: 0 ISO, 1 intr, 2 control, 3 bulk */
	unsigned char epnum;		/* 10: endpoint, 0x80 = IN */
	unsigned char devnum;		/* 11 */
	uint16_t busnum;		/* 12 */
	char flag_setup;		/* 14 */
	char flag_data;			/* 15 */
	int64_t ts_sec;			/* 16 */
	int32_t ts_usec;		/* 24 */
	int32_t status;			/* 28 */
	uint32_t length;		/* 32: length of data (submitted or actual) */
	uint32_t len_cap;		/* 36: delivered length */
	union {				/* 40 */
		unsigned char setup[8];
		struct {
			int32_t error_count;
			int32_t numdesc;
		} iso;
	} s;
	int32_t interval;		/* 48 */
	int32_t start_frame;		/* 52 */
	uint32_t xfer_flags;		/* 56 */
	uint32_t ndesc;			/* 60 */
};

struct usbmon_isodesc {
	int32_t iso_status;
	uint32_t iso_off;
	uint32_t iso_len;
	uint32_t _pad;
};

struct mon_bin_stats {
	uint32_t queued;
	uint32_t dropped;
};

struct mon_bin_get {
	struct usbmon_packet *hdr;
	void *data;
	size_t alloc;
};

struct mon_bin_mfetch {
	uint32_t *offvec;
	uint32_t nfetch;
	uint32_t nflush;
};

#define MON_IOC_MAGIC 0x92
#define MON_IOCQ_URB_LEN _IO(MON_IOC_MAGIC, 1)
#define MON_IOCG_STATS _IOR(MON_IOC_MAGIC, 3, struct mon_bin_stats)
#define MON_IOCT_RING_SIZE _IO(MON_IOC_MAGIC, 4)
#define MON_IOCQ_RING_SIZE _IO(MON_IOC_MAGIC, 5)
#define MON_IOCX_GET _IOW(MON_IOC_MAGIC, 6, struct mon_bin_get)
#define MON_IOCX_MFETCH _IOWR(MON_IOC_MAGIC, 7, struct mon_bin_mfetch)
#define MON_IOCH_MFLUSH _IO(MON_IOC_MAGIC, 8)
#define MON_IOCX_GETX _IOW(MON_IOC_MAGIC, 10, struct mon_bin_get)

_Static_assert(sizeof(struct usbmon_packet) == 64, "the API 1 header is 64 bytes");

/*
 * Print one event in the `Nu` text format. The text interface stamps events
 * with the monotonic clock and the binary one with the wall clock, so the
 * timestamp here is the binary one folded the same way (seconds mod 4096).
 * `data` holds len_cap bytes: ISO descriptors first, then data.
 */
static inline void usbmon_print_u(FILE *f, const struct usbmon_packet *h, const unsigned char *data)
{
	static const char xt[] = { 'Z', 'I', 'C', 'B' };
	unsigned int ts = (unsigned int)((h->ts_sec & 0xFFF) * 1000000 + h->ts_usec);
	int dir_in = (h->epnum & 0x80) != 0;
	const struct usbmon_isodesc *d = (const struct usbmon_isodesc *)data;
	const unsigned char *payload = data + h->ndesc * sizeof(*d);
	unsigned int ncap = h->len_cap - h->ndesc * sizeof(*d);
	int len;

	fprintf(f, "%llx %u %c %c%c:%u:%03u:%u", (unsigned long long)h->id, ts, h->type,
		xt[h->xfer_type & 3], dir_in ? 'i' : 'o', h->busnum, h->devnum, h->epnum & 0x7f);
	if (h->type == 'E' || h->xfer_type == 2 || h->xfer_type == 3) {
		if (h->flag_setup == 0)
			fprintf(f, " s %02x %02x %04x %04x %04x", h->s.setup[0], h->s.setup[1],
				h->s.setup[2] | h->s.setup[3] << 8, h->s.setup[4] | h->s.setup[5] << 8,
				h->s.setup[6] | h->s.setup[7] << 8);
		else if (h->flag_setup != '-')
			fprintf(f, " %c __ __ ____ ____ ____", h->flag_setup);
		else
			fprintf(f, " %d", h->status);
	} else if (h->xfer_type == 1) {
		fprintf(f, " %d:%d", h->status, h->interval);
	} else {
		if (h->type == 'S')
			fprintf(f, " %d:%d:%d", h->status, h->interval, h->start_frame);
		else
			fprintf(f, " %d:%d:%d:%d", h->status, h->interval, h->start_frame,
				h->s.iso.error_count);
		fprintf(f, " %d", h->s.iso.numdesc);
		for (unsigned int i = 0; i < h->ndesc && i < 5; i++)
			fprintf(f, " %d:%u:%u", d[i].iso_status, d[i].iso_off, d[i].iso_len);
	}
	len = h->type == 'E' ? 0 : (int)h->length;
	fprintf(f, " %d", len);
	if (len > 0) {
		if (h->flag_data == 0 && ncap > 0) {
			fputs(" =", f);
			for (unsigned int i = 0; i < ncap && i < 32; i++)
				fprintf(f, "%s%02x", i % 4 == 0 ? " " : "", payload[i]);
		} else if (h->flag_data != 0) {
			fprintf(f, " %c", h->flag_data);
		}
	}
	fputc('\n', f);
}

#endif
