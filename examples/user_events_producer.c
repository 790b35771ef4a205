/*
 * user_events producer, Linux 6.4+ ABI (enable_addr), written from the
 * kernel's Documentation/trace/user_events.rst and the ABI table in
 * docs/interfaces.md ("user_events").
 *
 *   user_events_producer [TRACING_DIR [COUNT [INTERVAL_MS [TAG]]]]
 *
 * Registers "example_counter u32 count; char[16] tag" with DIAG_IOCSREG,
 * asking the kernel (or monfs) to keep bit 31 of `enabled` set while a
 * tracer is attached. The loop tests that bit and skips the write(2)
 * entirely while it is clear: a disabled event costs one load. COUNT 0
 * runs until killed. TRACING_DIR defaults to /sys/kernel/tracing; TAG
 * (the `tag` field, 15 characters at most) to "example".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

struct user_reg {
	uint32_t size;        /* sizeof(struct user_reg): 28 */
	uint8_t enable_bit;   /* bit to set in *enable_addr while enabled */
	uint8_t enable_size;  /* 4 or 8 */
	uint16_t flags;
	uint64_t enable_addr;
	uint64_t name_args;   /* "name field; field" */
	uint32_t write_index; /* out */
} __attribute__((packed));

struct user_unreg {
	uint32_t size;
	uint8_t disable_bit;
	uint8_t reserved;
	uint16_t reserved2;
	uint64_t disable_addr;
} __attribute__((packed));

/* The ioctl numbers encode a pointer size, not the struct size. */
#define DIAG_IOCSREG _IOWR('*', 0, struct user_reg *)
#define DIAG_IOCSUNREG _IOW('*', 2, struct user_unreg *)

#define ENABLE_BIT 31

static volatile uint32_t enabled;

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/sys/kernel/tracing";
	long count = argc > 2 ? atol(argv[2]) : 10;
	long interval = argc > 3 ? atol(argv[3]) : 100;
	char tag[16] = "example";
	if (argc > 4)
		snprintf(tag, sizeof tag, "%s", argv[4]);
	char path[4096];
	snprintf(path, sizeof path, "%s/user_events_data", dir);
	int fd = open(path, O_RDWR);
	if (fd < 0) {
		perror(path);
		return 1;
	}
	struct user_reg reg = {
		.size = sizeof reg,
		.enable_bit = ENABLE_BIT,
		.enable_size = sizeof enabled,
		.enable_addr = (uintptr_t)&enabled,
		.name_args = (uintptr_t) "example_counter u32 count; char[16] tag",
	};
	if (ioctl(fd, DIAG_IOCSREG, &reg) < 0) {
		perror("DIAG_IOCSREG");
		return 1;
	}
	printf("registered example_counter write_index=%u\n", reg.write_index);
	fflush(stdout);

	long writes = 0, skipped = 0;
	for (long i = 0; count == 0 || i < count; i++) {
		if (enabled & (1u << ENABLE_BIT)) {
			uint32_t n = (uint32_t)i;
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
	struct user_unreg unreg = {
		.size = sizeof unreg,
		.disable_bit = ENABLE_BIT,
		.disable_addr = (uintptr_t)&enabled,
	};
	if (ioctl(fd, DIAG_IOCSUNREG, &unreg) < 0)
		perror("DIAG_IOCSUNREG");
	close(fd);
	printf("writes=%ld skipped=%ld\n", writes, skipped);
	return 0;
}
