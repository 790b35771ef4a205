/*
 * trace_mmap: read a trace array's buffers through mmap of
 * per_cpu/cpuN/trace_pipe_raw and TRACE_MMAP_IOCTL_GET_READER, as
 * Documentation/trace/ring-buffer-map.rst describes (meta page, then the
 * sub-buffers by id; struct trace_buffer_meta of
 * include/uapi/linux/trace_mmap.h, declared here).
 *
 *   trace_mmap TRACING_DIR NCPUS N
 *
 * TRACING_DIR is a trace array whose events/myapp/tick/inject records a
 * `count` (u32 at byte 8 of the entry). With every CPU's buffer mapped and
 * empty, it checks the meta page, injects count=1..N, calling GET_READER on
 * every CPU after every 64 injections (and until nothing more comes at the
 * end), parses each new reader sub-buffer (its header, events, time
 * extends; or, when the reader stays on the same sub-buffer, the events
 * added after what it read) and checks that every count arrives exactly
 * once, in order on each CPU, with non-decreasing times, and the meta
 * page's entries/read/overrun. Then, still mapped: resizing
 * (buffer_size_kb), a new sub-buffer size and a snapshot answer EBUSY; after
 * munmap and close a resize works. Prints "ok events=N subbufs=N appends=N"
 * and exits 0, or a message and exits 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

struct meta {
	uint32_t meta_page_size, meta_struct_len, subbuf_size, nr_subbufs;
	uint64_t lost_events;
	uint32_t id, read;
	uint64_t flags, entries, overrun, read_events, r1, r2;
};

#define GET_READER _IO('R', 0x20)
#define HDR 16

struct cpu {
	int fd;
	volatile struct meta *meta;
	unsigned char *data;
	size_t data_len;
	uint32_t last_id;
	uint32_t parsed; /* bytes of the reader sub-buffer parsed */
	uint64_t last_ts;
	uint32_t last_count;
	uint64_t page_ts; /* time of the last event parsed on the reader */
};

static const char *dir;
static unsigned char *seen;
static long nseen, subbufs, appends;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#include <stdarg.h>
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "trace_mmap: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static int write_file(const char *rel, const char *val)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	int fd = open(path, O_WRONLY | O_TRUNC);
	if (fd < 0)
		return -errno;
	int r = write(fd, val, strlen(val)) < 0 ? -errno : 0;
	close(fd);
	return r;
}

/* Parse the events of cpu c's reader sub-buffer from byte `from` of its
 * data to `to`, `ts` being the time of the event before `from`. */
static void parse(int c, struct cpu *p, const unsigned char *sb, uint32_t from, uint32_t to, uint64_t ts, unsigned n)
{
	uint32_t off = HDR + from;
	while (off < HDR + to) {
		uint32_t w, arr;
		memcpy(&w, sb + off, 4);
		memcpy(&arr, sb + off + 4, 4);
		unsigned type_len = w & 31, delta = w >> 5;
		uint32_t len, data;
		if (type_len == 30) {
			ts += ((uint64_t)arr << 27) + delta;
			off += 8;
			continue;
		} else if (type_len == 29 || type_len == 31) {
			die("cpu%d: unexpected event type %u", c, type_len);
		} else if (type_len == 0) {
			len = arr - 4;
			data = off + 8;
		} else {
			len = type_len * 4;
			data = off + 4;
		}
		ts += delta;
		if (data + len > HDR + to)
			die("cpu%d: event past commit", c);
		uint32_t count;
		memcpy(&count, sb + data + 8, 4);
		if (count == 0 || count > n)
			die("cpu%d: count %u out of range", c, count);
		if (seen[count]++)
			die("cpu%d: count %u seen twice", c, count);
		if (count <= p->last_count)
			die("cpu%d: count %u after %u", c, count, p->last_count);
		if (ts < p->last_ts)
			die("cpu%d: time went back at count %u", c, count);
		p->last_count = count;
		p->last_ts = ts;
		nseen++;
		off = data + len;
	}
	p->page_ts = ts;
}

/* GET_READER on cpu c and parse what it brought; whether it brought any. */
static int drain(int c, struct cpu *p, unsigned n)
{
	if (ioctl(p->fd, GET_READER) < 0)
		die("cpu%d: GET_READER: %s", c, strerror(errno));
	volatile struct meta *m = p->meta;
	if (m->id >= m->nr_subbufs)
		die("cpu%d: reader id %u of %u", c, m->id, m->nr_subbufs);
	const unsigned char *sb = p->data + (size_t)m->id * m->subbuf_size;
	uint64_t ts, commit;
	memcpy(&ts, sb, 8);
	memcpy(&commit, sb + 8, 8);
	uint32_t size = commit & ((1u << 27) - 1);
	if (size > m->subbuf_size - HDR)
		die("cpu%d: commit %u", c, size);
	if (m->read != size)
		die("cpu%d: reader.read %u, commit %u", c, m->read, size);
	if (m->id != p->last_id) {
		if (commit & (3ull << 30))
			die("cpu%d: missed-events flags with nothing lost", c);
		p->last_id = m->id;
		p->parsed = 0;
		if (size == 0)
			die("cpu%d: a new reader sub-buffer with no data", c);
		subbufs++;
		parse(c, p, sb, 0, size, ts, n);
		p->parsed = size;
		return 1;
	}
	if (size < p->parsed)
		die("cpu%d: commit went back on the reader (%u < %u)", c, size, p->parsed);
	if (size == p->parsed)
		return 0;
	appends++;
	parse(c, p, sb, p->parsed, size, p->page_ts, n);
	p->parsed = size;
	return 1;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: trace_mmap TRACING_DIR NCPUS N\n");
		return 2;
	}
	dir = argv[1];
	int ncpus = atoi(argv[2]);
	unsigned n = atoi(argv[3]);
	long pg = sysconf(_SC_PAGESIZE);
	seen = calloc(n + 1, 1);
	struct cpu *cpus = calloc(ncpus, sizeof(*cpus));
	for (int c = 0; c < ncpus; c++) {
		struct cpu *p = &cpus[c];
		char path[4096];
		snprintf(path, sizeof(path), "%s/per_cpu/cpu%d/trace_pipe_raw", dir, c);
		p->fd = open(path, O_RDONLY | O_NONBLOCK);
		if (p->fd < 0)
			die("%s: %s", path, strerror(errno));
		/* Not mapped yet: GET_READER has no buffer to work on. */
		if (ioctl(p->fd, GET_READER) != -1 || errno != ENODEV)
			die("cpu%d: GET_READER before mmap: not ENODEV", c);
		void *meta = mmap(NULL, pg, PROT_READ, MAP_SHARED, p->fd, 0);
		if (meta == MAP_FAILED)
			die("cpu%d: mmap meta: %s", c, strerror(errno));
		p->meta = meta;
		volatile struct meta *m = p->meta;
		if (m->meta_page_size != 4096 || m->subbuf_size != 4096 || m->meta_struct_len != 80)
			die("cpu%d: meta page %u, struct %u, subbuf %u", c, m->meta_page_size,
			    m->meta_struct_len, m->subbuf_size);
		if (m->nr_subbufs < 3 || m->id != 0 || m->read != 0 || m->entries != 0 ||
		    m->overrun != 0 || m->read_events != 0 || m->flags != 0 || m->lost_events != 0)
			die("cpu%d: fresh meta page: nr_subbufs %u id %u read %u entries %llu", c,
			    m->nr_subbufs, m->id, m->read, (unsigned long long)m->entries);
		for (uint32_t i = m->meta_struct_len; i < m->meta_page_size; i++)
			if (((unsigned char *)meta)[i])
				die("cpu%d: meta page padding not zero", c);
		p->data_len = (size_t)m->subbuf_size * m->nr_subbufs;
		p->data = mmap(NULL, p->data_len, PROT_READ, MAP_SHARED, p->fd, m->meta_page_size);
		if (p->data == MAP_FAILED)
			die("cpu%d: mmap data: %s", c, strerror(errno));
		/* Every sub-buffer can be touched (no SIGBUS). */
		volatile unsigned char sink = 0;
		for (size_t o = 0; o < p->data_len; o += pg)
			sink ^= p->data[o];
		(void)sink;
		/* An empty buffer: the reader stays where it is. */
		if (ioctl(p->fd, GET_READER) != 0 || m->id != 0)
			die("cpu%d: GET_READER on an empty buffer", c);
	}

	char path[4096];
	snprintf(path, sizeof(path), "%s/events/myapp/tick/inject", dir);
	for (unsigned i = 1; i <= n; i++) {
		int fd = open(path, O_WRONLY);
		if (fd < 0)
			die("%s: %s", path, strerror(errno));
		char buf[64];
		int len = snprintf(buf, sizeof(buf), "count=%u msg=\"m%u\"", i, i);
		if (write(fd, buf, len) != len)
			die("inject %u: %s", i, strerror(errno));
		close(fd);
		if (i % 64 == 0)
			for (int c = 0; c < ncpus; c++)
				while (drain(c, &cpus[c], n))
					;
	}
	for (int c = 0; c < ncpus; c++)
		while (drain(c, &cpus[c], n))
			;
	if (nseen != (long)n)
		die("%ld of %u events arrived", nseen, n);
	uint64_t entries = 0, read = 0, overrun = 0;
	for (int c = 0; c < ncpus; c++) {
		entries += cpus[c].meta->entries;
		read += cpus[c].meta->read_events;
		overrun += cpus[c].meta->overrun;
	}
	if (entries != n || read != n || overrun != 0)
		die("meta pages: entries %llu read %llu overrun %llu", (unsigned long long)entries,
		    (unsigned long long)read, (unsigned long long)overrun);

	/* While mapped, the buffer's size and layout stay. */
	int r;
	if ((r = write_file("buffer_size_kb", "2048")) != -EBUSY)
		die("buffer_size_kb while mapped: %d", r);
	if ((r = write_file("per_cpu/cpu0/buffer_size_kb", "3000")) != -EBUSY)
		die("per_cpu/cpu0/buffer_size_kb while mapped: %d", r);
	if ((r = write_file("buffer_subbuf_size_kb", "8")) != -EBUSY)
		die("buffer_subbuf_size_kb while mapped: %d", r);
	if ((r = write_file("buffer_subbuf_size_kb", "4")) != 0)
		die("buffer_subbuf_size_kb unchanged while mapped: %d", r);
	if ((r = write_file("snapshot", "1")) != -EBUSY)
		die("snapshot while mapped: %d", r);

	for (int c = 0; c < ncpus; c++) {
		munmap(cpus[c].data, cpus[c].data_len);
		munmap((void *)cpus[c].meta, pg);
		close(cpus[c].fd);
	}
	/* The release of the last close may still be on its way. */
	for (int i = 0; (r = write_file("buffer_size_kb", "2048")) == -EBUSY && i < 100; i++)
		usleep(10000);
	if (r != 0)
		die("buffer_size_kb after munmap: %d", r);
	printf("ok events=%ld subbufs=%ld appends=%ld\n", nseen, subbufs, appends);
	return 0;
}
