//! user_events: events defined and written by user programs, in both ABIs
//! producers use (paraphrasing `kernel/trace/trace_events_user.c` of the
//! versions listed in the reference, section 5, and the measurements of a
//! real 6.12 in section 7).
//!
//! Files (under `tracing/`): `user_events_data` (register with
//! `DIAG_IOCSREG`, delete with `DIAG_IOCSDEL`, unregister an enable bit with
//! `DIAG_IOCSUNREG`, then `write`/`writev` events), `user_events_status`
//! (the text listing; in the old ABI also the mmapped status page) and
//! `dynamic_events` (`u:` lines). Registered events live in
//! `events/user_events/<name>/` (`events/user_events_multi/<name>.<id>/` for
//! multi-format ones) with `enable`, `filter`, `format` and `id`.
//!
//! # Which ABI a registration uses
//!
//! All generations share one ioctl number (`_IOWR('*', 0, struct user_reg *)`,
//! whose size field encodes a pointer, not the struct), so the only thing
//! that tells them apart is `user_reg.size`, the first u32 of the struct,
//! which every generation sets to `sizeof(struct user_reg)`:
//!
//! | size | ABI | layout (offset: field) |
//! |---|---|---|
//! | > 4096 | (all kernels) | `E2BIG` |
//! | < 20 | (6.x) | `EINVAL` |
//! | 20 | 6.0–6.3 status page, bit per event (packed) | 0 size, 4 name_args, 12 status_bit (out), 16 write_index (out) |
//! | 24 | 5.18 status page, byte per event (not packed, x86_64) | 0 size, 8 name_args, 16 status_index (out), 20 write_index (out) |
//! | 21–23, 25–27 | (6.4+: `size < 28`) | `EINVAL` |
//! | ≥ 28 | 6.4+ enable_addr (packed); bytes past 28 must be zero, else `E2BIG` | 0 size, 4 enable_bit, 5 enable_size, 6 flags, 8 enable_addr, 16 name_args, 24 write_index (out) |
//!
//! 20 and 24 are invalid sizes for a 6.4+ kernel, and ≥ 28 would be
//! rejected by a 6.x kernel's "unknown tail must be zero" rule as soon as
//! any of enable_addr or name_args is set, so the rules never misread a
//! struct that one of the real kernels accepts. (A 5.18 struct from a
//! 32-bit process is 20 bytes, but 32-bit callers get ENOTTY from the FUSE
//! layer, as from the kernel, which has no compat handler.)
//!
//! # Per-ABI behaviour
//!
//! * Old ABIs (20/24): the event gets the lowest free status bit (6.x) or
//!   byte (5.18) of the page, never 0, kept until the event is deleted. The
//!   page is the mmap of `user_events_status` (little-endian bit order: bit
//!   `b` is byte `b >> 3`, mask `1 << (b & 7)`; a 5.18 byte holds the probe
//!   mask, 0x01 = ftrace). Both kinds share the page: a byte event takes a
//!   whole byte no bit event uses. Flag text after the name is ignored; an
//!   existing event of that name is reused without comparing fields; the
//!   event is never deleted automatically; writing while disabled returns
//!   the full count (≤6.3).
//! * 6.4+: monfs sets and clears `enable_bit` of the `enable_size` word at
//!   `enable_addr` in the producer's memory (read-modify-write of the byte
//!   holding the bit, under one lock) whenever the event's enabled state
//!   changes, and when it registers. Flag text → EINVAL; same name with other
//!   fields → EADDRINUSE, decided before the fields are parsed, by comparing
//!   the words as text as the kernel does (`u32 a;u32 b` matches `u32 a;
//!   u32 b`, `struct s x 08` does not match its own event, shown as `8`);
//!   the same (addr, bit) twice in one process →
//!   EADDRINUSE before the string is even read; `USER_EVENT_REG_PERSIST`
//!   needs CAP_PERFMON or CAP_SYS_ADMIN; `USER_EVENT_REG_MULTI_FORMAT`
//!   creates `user_events_multi/<name>.<hex id>`. Events without PERSIST are
//!   freed when the last reference goes (fds that registered them, enable
//!   bits, an attached tracer): the kernel does it from a work queue, monfs
//!   100 ms later (see `FREE_DELAY`); registering it again meanwhile keeps
//!   it, and `DIAG_IOCSDEL` deletes it at once. Writing while disabled
//!   gives EBADF (current kernels; the 6.4 development tree returned 0).
//! * The status text shows, per event, `<bit or byte>:<name>` for events
//!   registered through an old ABI and `<name>` otherwise, each followed by
//!   ` # Used by ftrace` while enabled; the trailer is `Active:`, `Busy:`,
//!   and `Max: 32768` only while some event uses the status page.
//! * Trace output uses the 6.4+ field printer for every event (`count=0x1
//!   (1)`), whichever ABI registered it (≤6.3 printed hex dumps).
//!
//! Enable bits belong to the address space, not to the fd or the pid, as
//! in the kernel. Registration pins the registering thread's address space
//! ([`Mm`]) while that thread is blocked in the ioctl; every later write
//! goes through the pin, so after an exec (setuid or not) or an exit it
//! writes nothing, and a process that reuses the pid is never written.
//! Fork, exec and exit are learnt from the kernel's process events
//! ([`ProcEvents`], applied before every enable change): a forked child gets
//! copies of its parent's bits that follow enable from then on, and exec and
//! exit drop the bits and their references on the event. Bits are written
//! outside the registry lock on a worker pool with a deadline
//! ([`procmem::run_bounded`]), and a word in a page only a FUSE daemon can
//! serve is EFAULT: no producer can wedge the mount. Where the kernel
//! refuses the daemon the producer's memory (a daemon without root and a
//! producer of another user, a non-dumpable one, or Yama's `ptrace_scope`
//! ≥ 1 without `PR_SET_PTRACER`), `DIAG_IOCSREG` and `DIAG_IOCSDEL` fail
//! with EPERM, in every ABI: even the status-page ABI passes its
//! `struct user_reg` by pointer. Without process events
//! (outside the initial pid and user namespaces), exits are found by polling
//! every 100 ms and forks are not followed.
//!
//! # Known differences
//!
//! * A child is followed from the fork event, which comes before the child
//!   runs; its copies exist once the event is handled (docs/interfaces.md gives
//!   the measured window). Every enable change handles pending events first.
//! * A child whose layout no longer matches its parent's when the event is
//!   handled has exec'd already: it gets no copies. With address space
//!   randomization off, a child that execs the same program within that
//!   window is not told apart; its exec event drops the copies.
//! * `user_events_status` stats as one page long so that it can be mapped.
//! * Listing order is creation order (the kernel's is hash order).
//! * A name with `/`, or `.`/`..`, is EINVAL (it would not fit the tree).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use crate::base::errno::{Errno, SysResult};
use crate::base::proc_events::{ProcEvent, ProcEvents};
use crate::base::procmem::{self, Mm, MmError};
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, CallerMemory, FileNode, IoctlReply, IoctlRequest, NodeKind, OpenFile, OpenFlags,
    OpenText, Tree,
};
use crate::tracefs::events::{EventDef, Field, FieldKind, COMMON_SIZE};
use crate::tracefs::{EventId, Tracing};

/// The system of user events.
pub const SYSTEM: &str = "user_events";
/// The system of multi-format user events.
pub const SYSTEM_MULTI: &str = "user_events_multi";

/// `_IOWR('*', 0, struct user_reg *)` on 64-bit.
pub const DIAG_IOCSREG: u32 = 0xC008_2A00;
/// `_IOW('*', 1, char *)` on 64-bit.
pub const DIAG_IOCSDEL: u32 = 0x4008_2A01;
/// `_IOW('*', 2, struct user_unreg *)` on 64-bit.
pub const DIAG_IOCSUNREG: u32 = 0x4008_2A02;

/// `USER_EVENT_REG_PERSIST`.
pub const REG_PERSIST: u16 = 1 << 0;
/// `USER_EVENT_REG_MULTI_FORMAT`.
pub const REG_MULTI_FORMAT: u16 = 1 << 1;
/// `USER_EVENT_REG_MAX`: the first invalid flag.
const REG_MAX: u16 = 1 << 2;

const PAGE_SIZE: usize = 4096;
/// `MAX_EVENT_DESC`: name and arguments, NUL included.
const MAX_EVENT_DESC: usize = 512;
/// `MAX_FIELD_ARRAY_SIZE`.
const MAX_FIELD_ARRAY_SIZE: u32 = 1024;
/// `kernel.user_events_max` default.
const USER_EVENTS_MAX: usize = 32768;
/// Bits of the status page (6.x `MAX_EVENTS`).
const STATUS_BITS: usize = PAGE_SIZE * 8;
/// Size of the 6.4+ `struct user_reg`.
const REG_SIZE: usize = 28;
/// Size of `struct user_unreg`.
const UNREG_SIZE: usize = 16;
/// Enable bits registered at most, over all processes (the kernel's bound
/// is its memory): past it, registration is ENOMEM, as an allocation
/// failure in the kernel.
const MAX_ENABLERS: usize = 65536;
/// How long an unreferenced 6.4+ event lives on before it is freed: the
/// kernel frees it from a work queue, a little later. (Removed directories
/// leave the kernel's dentry cache at once, by FUSE_NOTIFY_INVAL_ENTRY, so a
/// producer that restarts after this finds its new event's directory.)
const FREE_DELAY: Duration = Duration::from_millis(100);

/// The end of user space (`TASK_SIZE_MAX`): enable addresses at or above it
/// are EFAULT.
#[cfg(target_arch = "x86_64")]
const TASK_SIZE: u64 = 0x7fff_ffff_f000;
#[cfg(not(target_arch = "x86_64"))]
const TASK_SIZE: u64 = 1 << 48;

mod dynamic;
mod files;
mod grammar;
mod lifecycle;
mod process;
mod registry;
#[cfg(test)]
mod tests;

pub use grammar::*;
use process::*;
pub use registry::*;
