/*
 * usbmon_ioctl: exercise every ioctl of a usbmon binary device and its error
 * paths, printing one "name -> result" line per call so that the test can
 * compare them with what Linux 6.12 answers (kernel-abi.md section 7).
 *
 *   usbmon_ioctl DEVICE
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../examples/usbmon.h"

static void report(const char *what, long rc)
{
	if (rc < 0)
		printf("%s -> -1 errno=%d\n", what, errno);
	else
		printf("%s -> %ld\n", what, rc);
}

static sigjmp_buf jb;
static void on_bus(int s)
{
	(void)s;
	siglongjmp(jb, 1);
}

int main(int argc, char **argv)
{
	const char *dev = argv[1];
	char buf[256];
	int fd = open(dev, O_RDONLY | O_NONBLOCK);
	if (fd < 0) {
		perror(dev);
		return 1;
	}
	setvbuf(stdout, NULL, _IONBF, 0);
	report("RING_SIZE?", ioctl(fd, MON_IOCQ_RING_SIZE));
	report("URB_LEN(empty)", ioctl(fd, MON_IOCQ_URB_LEN));
	struct mon_bin_stats st = { 99, 99 };
	long rc = ioctl(fd, MON_IOCG_STATS, &st);
	printf("STATS -> %ld queued=%u dropped=%u\n", rc, st.queued, st.dropped);
	unsigned long sizes[] = { 0, 8191, 1228801, 1232897, (unsigned long)-1, 64UL << 20,
				  (64UL << 20) + 1, (unsigned long)(0x100000000ULL + 8192), 8192, 10000,
				  1228800 };
	for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(buf, sizeof(buf), "RING_SIZE(%lu)", sizes[i]);
		report(buf, ioctl(fd, MON_IOCT_RING_SIZE, sizes[i]));
		snprintf(buf, sizeof(buf), "RING_SIZE? after %lu", sizes[i]);
		report(buf, ioctl(fd, MON_IOCQ_RING_SIZE));
	}
	report("MFLUSH(5) empty", ioctl(fd, MON_IOCH_MFLUSH, 5));
	report("ioctl(nr 0x63)", ioctl(fd, _IO(MON_IOC_MAGIC, 0x63)));
	report("ioctl(nr 2)", ioctl(fd, _IO(MON_IOC_MAGIC, 2)));
	report("ioctl(nr 9)", ioctl(fd, _IO(MON_IOC_MAGIC, 9)));
	struct usbmon_packet h;
	/* Room for any event: a 32-bit caller has no GETX allocation limit
	 * (compat), so on a busy bus the kernel (and monfs) copy a whole event
	 * of up to a fifth of the ring here. */
	static char data[1 << 16];
	struct mon_bin_get g = { &h, data, 0x10000001 };
	report("GETX(alloc 0x10000001)", ioctl(fd, MON_IOCX_GETX, &g));
	report("GETX(NULL)", ioctl(fd, MON_IOCX_GETX, NULL));
	report("STATS(NULL)", ioctl(fd, MON_IOCG_STATS, NULL));
	g.alloc = sizeof(data);
	report("GETX(nonblock, empty)", ioctl(fd, MON_IOCX_GETX, &g));
	uint32_t vec[4];
	struct mon_bin_mfetch mf = { vec, 4, 0 };
	report("MFETCH(nonblock, empty)", ioctl(fd, MON_IOCX_MFETCH, &mf));
	report("read(nonblock, empty)", read(fd, buf, sizeof(buf)));
	report("lseek", lseek(fd, 0, SEEK_SET));
	report("write(O_RDONLY)", write(fd, "x", 1));
	long ring = ioctl(fd, MON_IOCQ_RING_SIZE);
	void *m = mmap(NULL, ring, PROT_READ, MAP_SHARED, fd, 0);
	report("mmap(PROT_READ, MAP_SHARED)", m == MAP_FAILED ? -1 : 0);
	void *w = mmap(NULL, ring, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	report("mmap(PROT_WRITE, MAP_SHARED, O_RDONLY fd)", w == MAP_FAILED ? -1 : 0);
	report("RING_SIZE(65536) while mapped", ioctl(fd, MON_IOCT_RING_SIZE, 65536));
	report("RING_SIZE? while mapped", ioctl(fd, MON_IOCQ_RING_SIZE));
	report("mprotect(PROT_WRITE)", mprotect(m, ring, PROT_READ | PROT_WRITE));
	munmap(m, ring);
	void *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	report("mmap(MAP_PRIVATE)", p == MAP_FAILED ? -1 : 0);
	if (p != MAP_FAILED)
		munmap(p, 4096);
	report("RING_SIZE(65536) after munmap", ioctl(fd, MON_IOCT_RING_SIZE, 65536));
	/* A mapping longer than the ring: the page past it raises SIGBUS. */
	signal(SIGBUS, on_bus);
	volatile unsigned char *q = mmap(NULL, 65536 + 8192, PROT_READ, MAP_SHARED, fd, 0);
	report("mmap(ring + 2 pages)", q == MAP_FAILED ? -1 : 0);
	if (q != MAP_FAILED) {
		if (sigsetjmp(jb, 1) == 0) {
			(void)q[65535];
			printf("read last ring byte -> ok\n");
		} else {
			printf("read last ring byte -> SIGBUS\n");
		}
		if (sigsetjmp(jb, 1) == 0) {
			(void)q[65536];
			printf("read past the ring -> ok\n");
		} else {
			printf("read past the ring -> SIGBUS\n");
		}
		munmap((void *)q, 65536 + 8192);
	}
	close(fd);
	fd = open(dev, O_RDWR);
	report("open(O_RDWR)", fd);
	report("write(O_RDWR)", write(fd, "x", 1));
	close(fd);
	return 0;
}
