/*
 * The user_events ABI of Linux 6.4 and later (include/uapi/linux/user_events.h,
 * written from its description) for the test clients that register events:
 * ue_grammar.c, ue_lifecycle.c and user_events_tool.c. The examples keep
 * their own copies so that each reads on its own.
 */
#ifndef MONFS_USER_EVENTS_ABI_H
#define MONFS_USER_EVENTS_ABI_H

#include <stdint.h>
#include <sys/ioctl.h>

/* DIAG_IOCSREG's argument (28 bytes). */
struct user_reg {
	uint32_t size;
	uint8_t enable_bit;
	uint8_t enable_size;
	uint16_t flags;
	uint64_t enable_addr;
	uint64_t name_args;
	uint32_t write_index;
} __attribute__((__packed__));

/* DIAG_IOCSUNREG's argument. */
struct user_unreg {
	uint32_t size;
	uint8_t disable_bit;
	uint8_t __reserved;
	uint16_t __reserved2;
	uint64_t disable_addr;
} __attribute__((__packed__));

/* The kernel declares them with pointer types: the numbers are the same. */
#define DIAG_IOCSREG _IOWR('*', 0, void *)
#define DIAG_IOCSDEL _IOW('*', 1, char *)
#define DIAG_IOCSUNREG _IOW('*', 2, void *)

#endif
