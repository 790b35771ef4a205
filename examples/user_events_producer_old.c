/*
 * user_events producer, original ABI of Linux 6.0-6.3 (status page, one bit
 * per event), written from the ABI table in docs/interfaces.md
 * ("user_events"; the kernel removed this ABI in 6.4).
 *
 *   user_events_producer_old [TRACING_DIR [COUNT [INTERVAL_MS]]]
 *
 * Maps user_events_status (one page, shared, read-only), registers
 * "example_old u32 count; char[16] tag" with the 20-byte packed
 * struct user_reg, and learns its status bit. The event is enabled while
 * byte bit>>3 of the page has bit (1 << (bit & 7)) set. The loop skips the
 * write(2) entirely while it is clear. COUNT 0 runs until killed.
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
#include <sys/uio.h>
#include <unistd.h>

struct user_reg {
	uint32_t size;        /* sizeof(struct user_reg): 20 */
	uint64_t name_args;   /* "name field; field" */
	uint32_t status_bit;  /* out: bit in the status page */
	uint32_t write_index; /* out */
} __attribute__((packed));

#define DIAG_IOCSREG _IOWR('*', 0, struct user_reg *)
#define DIAG_IOCSDEL _IOW('*', 1, char *)

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/sys/kernel/tracing";
	long count = argc > 2 ? atol(argv[2]) : 10;
	long interval = argc > 3 ? atol(argv[3]) : 100;
	char path[4096];

	snprintf(path, sizeof path, "%s/user_events_status", dir);
	int sfd = open(path, O_RDWR);
	if (sfd < 0) {
		perror(path);
		return 1;
	}
	long page_size = sysconf(_SC_PAGESIZE);
	const volatile uint8_t *page = mmap(NULL, page_size, PROT_READ, MAP_SHARED, sfd, 0);
	if (page == MAP_FAILED) {
		perror("mmap user_events_status");
		return 1;
	}
	snprintf(path, sizeof path, "%s/user_events_data", dir);
	int fd = open(path, O_RDWR);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	struct user_reg reg = {
		.size = sizeof reg,
		.name_args = (uintptr_t) "example_old u32 count; char[16] tag",
	};
	if (ioctl(fd, DIAG_IOCSREG, &reg) < 0) {
		perror("DIAG_IOCSREG");
		return 1;
	}
	printf("registered example_old status_bit=%u write_index=%u\n", reg.status_bit,
	       reg.write_index);
	fflush(stdout);
	const volatile uint8_t *status = page + (reg.status_bit >> 3);
	uint8_t mask = 1u << (reg.status_bit & 7);

	long writes = 0, skipped = 0;
	for (long i = 0; count == 0 || i < count; i++) {
		if (*status & mask) {
			uint32_t n = (uint32_t)i;
			char tag[16] = "example-old";
			struct iovec io[3] = {
				{ &reg.write_index, sizeof reg.write_index },
				{ &n, sizeof n },
				{ tag, sizeof tag },
			};
			if (writev(fd, io, 3) < 0)
				perror("writev");
			writes++;
		} else {
			skipped++;
		}
		usleep(interval * 1000);
	}
	close(fd);
	printf("writes=%ld skipped=%ld\n", writes, skipped);
	return 0;
}
