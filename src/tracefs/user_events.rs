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
//!   fields → EADDRINUSE; the same (addr, bit) twice in one process →
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
//! serve is EFAULT: no producer can wedge the mount. Without process events
//! (outside the initial pid and user namespaces), exits are found by polling
//! every 100 ms and forks are not followed.
//!
//! # Known differences
//!
//! * A child is followed from the fork event, which comes before the child
//!   runs; its copies exist once the event is handled (README gives the
//!   measured window). Every enable change handles pending events first.
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

use super::event::{EventDef, Field, FieldKind, COMMON_SIZE};
use super::{EventId, Tracing};
use crate::errno::{Errno, SysResult};
use crate::proc_events::{ProcEvent, ProcEvents};
use crate::procmem::{self, Mm, MmError};
use crate::sync::LockExt;
use crate::vfs::{
    Caller, CallerMemory, FileNode, IoctlReply, IoctlRequest, NodeKind, OpenFile, OpenFlags,
    OpenText, Tree,
};

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
/// `dynamic_events`: longest line (`WRITE_BUFSIZE - 2`).
const MAX_DYN_LINE: usize = 4094;
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

// ---------------------------------------------------------------------------
// The command grammar.

/// One field of a user event as registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UField {
    /// The type as written (`u32`, `char[20]`, `__data_loc char[]`,
    /// `struct foo`).
    pub ctype: String,
    /// The name.
    pub name: String,
    /// The size word of a `struct` field.
    pub struct_size: Option<u32>,
    /// Size in bytes.
    pub size: usize,
}

/// A parsed `name[:FLAGS] [field[;field...]]` command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The event name.
    pub name: String,
    /// Text after a `:` in the name, if there was a `:`.
    pub flags: Option<String>,
    /// The fields.
    pub fields: Vec<UField>,
}

/// `kstrtouint(s, 0)`: decimal, `0x` hex or `0` octal, optional `+`, an
/// optional trailing newline.
fn kstrtouint0(s: &str) -> Option<u32> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// `kstrtou32(s, 10)`.
fn kstrtou32_dec(s: &str) -> Option<u32> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `char[N]`: N from the text after `[` (at most 7 characters, up to `]`).
fn array_len(ty: &str) -> SysResult<usize> {
    let open = ty.find('[').ok_or(Errno::EINVAL)?;
    let inner = &ty[open + 1..];
    if inner.len() > 7 {
        return Err(Errno::EINVAL);
    }
    let close = inner.find(']').ok_or(Errno::EINVAL)?;
    match kstrtouint0(&inner[..close]) {
        Some(n) if n != 0 && n <= MAX_FIELD_ARRAY_SIZE => Ok(n as usize),
        _ => Err(Errno::EINVAL),
    }
}

/// The size of a field type; EINVAL for anything not allowed (`long`).
fn type_size(ty: &str, struct_size: Option<u32>) -> SysResult<usize> {
    Ok(match ty {
        "s64" | "u64" => 8,
        "s32" | "u32" | "int" | "unsigned int" => 4,
        "s16" | "u16" | "short" | "unsigned short" => 2,
        "s8" | "u8" | "char" | "unsigned char" => 1,
        _ if ty.starts_with("char[") || ty.starts_with("unsigned char[") => array_len(ty)?,
        _ if ty.starts_with("__data_loc ") || ty.starts_with("__rel_loc ") => 4,
        _ if ty.starts_with("struct ") => struct_size.ok_or(Errno::EINVAL)? as usize,
        _ => return Err(Errno::EINVAL),
    })
}

/// Multi-word type prefixes; the type then runs to the next space.
const TYPE_PREFIXES: [&str; 6] = [
    "__data_loc unsigned ",
    "__data_loc ",
    "__rel_loc unsigned ",
    "__rel_loc ",
    "unsigned ",
    "struct ",
];

/// Parse one `;`-separated field; `None` for an empty one.
fn parse_field(text: &str) -> SysResult<Option<UField>> {
    let f = text.trim_start_matches(' ');
    if f.is_empty() {
        return Ok(None);
    }
    let (ty, rest) = match TYPE_PREFIXES.iter().find(|p| f.starts_with(**p)) {
        Some(p) => {
            let after = &f[p.len()..];
            let end = after.find(' ').unwrap_or(after.len());
            let rest = &after[end..];
            (
                Some(format!("{p}{}", &after[..end])),
                rest.strip_prefix(' ').unwrap_or(rest),
            )
        }
        None => (None, f),
    };
    // Single spaces separate words: doubled spaces make empty words.
    let mut words = rest.split(' ');
    let ty = match ty {
        Some(t) => t,
        None => words.next().unwrap_or("").to_string(),
    };
    let name = words
        .next()
        .filter(|n| !n.is_empty())
        .ok_or(Errno::EINVAL)?;
    let size_word = words.next();
    if words.next().is_some() {
        return Err(Errno::EINVAL);
    }
    let is_struct = ty.starts_with("struct ");
    let struct_size = match size_word {
        Some(w) if is_struct => match kstrtou32_dec(w) {
            Some(n) if n > 0 => Some(n),
            _ => return Err(Errno::EINVAL),
        },
        Some(_) => return Err(Errno::EINVAL),
        None if is_struct => return Err(Errno::EINVAL),
        None => None,
    };
    let size = type_size(&ty, struct_size)?;
    Ok(Some(UField {
        ctype: ty,
        name: name.to_string(),
        struct_size,
        size,
    }))
}

/// Parse a field list (`u32 a; char[8] b`).
pub fn parse_fields(args: &str) -> SysResult<Vec<UField>> {
    let mut out = Vec::new();
    for part in args.split(';') {
        if let Some(f) = parse_field(part)? {
            out.push(f);
        }
    }
    Ok(out)
}

/// Parse a registration command. The name must be non-empty and (for the
/// tree) free of `/` and not `.`/`..`; the kernel checks no characters.
pub fn parse_command(s: &str) -> SysResult<Command> {
    let (name, args) = match s.find(' ') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (name, flags) = match name.find(':') {
        Some(i) => (&name[..i], Some(name[i + 1..].to_string())),
        None => (name, None),
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Errno::EINVAL);
    }
    let fields = match args {
        Some(a) => parse_fields(a)?,
        None => Vec::new(),
    };
    Ok(Command {
        name: name.to_string(),
        flags,
        fields,
    })
}

/// The `dynamic_events` text of a field list: ` a; b` (empty for none).
fn fields_text(fields: &[UField]) -> String {
    let mut s = String::new();
    for (i, f) in fields.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { "; " });
        let _ = write!(s, "{} {}", f.ctype, f.name);
        if let Some(n) = f.struct_size {
            let _ = write!(s, " {n}");
        }
    }
    s
}

/// Whether two field lists describe the same event: same types as written,
/// names and struct sizes, in order.
fn fields_match(a: &[UField], b: &[UField]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.ctype == y.ctype && x.name == y.name && x.struct_size == y.struct_size)
}

/// Lay the fields out packed after the common header and build the print
/// format the kernel generates.
fn layout(fields: &[UField]) -> (Vec<Field>, String) {
    let mut off = COMMON_SIZE;
    let mut out = Vec::new();
    let mut fmt = String::new();
    let mut args = String::new();
    for f in fields {
        let ty = f.ctype.as_str();
        let kind = if ty.starts_with("__data_loc") {
            if ty.contains("char") {
                FieldKind::DynString
            } else {
                FieldKind::DynArray
            }
        } else if ty.starts_with("__rel_loc") {
            if ty.contains("char") {
                FieldKind::RelString
            } else {
                FieldKind::RelArray
            }
        } else if ty.contains('[') && ty.contains("char") {
            FieldKind::CharArray
        } else if ty.starts_with("struct ") {
            FieldKind::Opaque
        } else {
            FieldKind::Int {
                signed: !ty.starts_with('u'),
            }
        };
        // `format` shows user_events arrays without their length
        // (`char msg[]`, size 20): measured on 6.12, where user_events leaves
        // the field's array length unset.
        let ctype = if kind == FieldKind::CharArray {
            let base = &ty[..ty.find('[').unwrap_or(ty.len())];
            format!("{base}[]")
        } else {
            ty.to_string()
        };
        out.push(Field {
            ctype,
            name: f.name.clone(),
            offset: off,
            size: f.size,
            signed: !ty.starts_with('u'),
            kind,
        });
        off += f.size;
        let conv = match ty {
            "s64" => "%lld",
            "u64" => "%llu",
            "s32" | "int" => "%d",
            "u32" | "unsigned int" => "%u",
            "s16" | "short" => "%d",
            "u16" | "unsigned short" => "%u",
            "s8" | "char" => "%d",
            "u8" | "unsigned char" => "%u",
            _ if ty.contains("char[") => "%s",
            _ => "%llu",
        };
        if !fmt.is_empty() {
            fmt.push(' ');
        }
        let _ = write!(fmt, "{}={}", f.name, conv);
        if ty.starts_with("__data_loc ") && ty.contains("char") {
            let _ = write!(args, ", __get_str({})", f.name);
        } else if ty.starts_with("__rel_loc ") && ty.contains("char") {
            let _ = write!(args, ", __get_rel_str({})", f.name);
        } else {
            let _ = write!(args, ", REC->{}", f.name);
        }
    }
    (out, format!("\"{fmt}\"{args}"))
}

// ---------------------------------------------------------------------------
// Callers.

/// Whether `pid` has CAP_PERFMON (38) or CAP_SYS_ADMIN (21) as the
/// kernel's `perfmon_capable()` counts them: in the initial user namespace.
/// `CapEff` is relative to the process's own user namespace (a process after
/// `unshare -Ur` has every bit), so the process must also share monfs's
/// user namespace, the initial one when monfs runs as root on the host.
fn has_perfmon(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ns = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let same_ns = match (
        ns(&format!("/proc/{pid}/ns/user")),
        ns("/proc/self/ns/user"),
    ) {
        (Some(a), Some(b)) => a == b,
        _ => false,
    };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    same_ns
        && status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|c| c & ((1 << 38) | (1 << 21)) != 0)
}

/// Read a NUL-terminated string of at most `MAX_EVENT_DESC - 1` bytes:
/// EINVAL when longer, EFAULT when unreadable.
fn read_desc(mem: &dyn CallerMemory, addr: u64) -> SysResult<String> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_EVENT_DESC {
        let chunk = (PAGE_SIZE - (at as usize % PAGE_SIZE)).min(MAX_EVENT_DESC - out.len());
        let part = mem.read(at, chunk)?;
        if let Some(p) = part.iter().position(|&b| b == 0) {
            out.extend_from_slice(&part[..p]);
            return String::from_utf8(out).map_err(|_| Errno::EINVAL);
        }
        out.extend_from_slice(&part);
        at += chunk as u64;
    }
    Err(Errno::EINVAL)
}

// ---------------------------------------------------------------------------
// The registry.

/// One user event.
struct UEvent {
    /// The tracepoint name (`name`, or `name.<hex id>` for multi-format).
    name: String,
    /// The registration name.
    base: String,
    multi: bool,
    fields: Vec<UField>,
    id: EventId,
    /// Smallest payload a write must carry (end of the last field − 8).
    min_size: usize,
}

/// Mutable state of one event.
struct EvState {
    ev: Arc<UEvent>,
    /// Open `user_events_data` files that registered it.
    fd_refs: usize,
    /// Enable bits pointing at it.
    enablers: usize,
    /// Created with PERSIST or through `dynamic_events` (deleting needs
    /// CAP_PERFMON; never deleted automatically).
    persistent: bool,
    /// Registered through an old ABI: never deleted automatically.
    sticky: bool,
    /// 6.x status bit.
    status_bit: Option<u32>,
    /// 5.18 status byte.
    status_byte: Option<u32>,
    /// When an unreferenced event is to be freed.
    free_at: Option<Instant>,
}

impl EvState {
    /// Referenced by an fd, an enable bit or a tracer: deleting it is EBUSY.
    fn busy(&self) -> bool {
        self.fd_refs > 0 || self.enablers > 0 || self.ev.id.is_enabled()
    }
}

/// A 6.4+ enable bit in a producer: bit `bit` of the `size`-byte word at
/// `addr` in one address space.
struct Enabler {
    mm: Arc<Mm>,
    addr: u64,
    bit: u8,
    size: u8,
    ev: Arc<UEvent>,
    /// Copied from a parent by fork: the descriptor was opened from outside
    /// the child, so the child's exec always drops it.
    forked: bool,
    /// A write of the bit is under way (see [`sync_bit`]).
    busy: AtomicBool,
    /// The bit must be written again: the event changed during a write.
    dirty: AtomicBool,
    /// Unregistered or dropped: the bit is to be cleared.
    removed: AtomicBool,
}

impl Enabler {
    fn new(mm: Arc<Mm>, addr: u64, bit: u8, size: u8, ev: Arc<UEvent>, forked: bool) -> Self {
        Enabler {
            mm,
            addr,
            bit,
            size,
            ev,
            forked,
            busy: AtomicBool::new(false),
            dirty: AtomicBool::new(false),
            removed: AtomicBool::new(false),
        }
    }
}

/// Bring one enable bit up to date: set while its event is enabled, clear
/// otherwise or once removed. Writes of one bit never overlap, and none
/// waits for another: a caller that finds a write under way marks the bit
/// dirty, and that writer writes again with the newest state.
fn sync_bit(en: &Enabler) -> Result<(), MmError> {
    en.dirty.store(true, Ordering::SeqCst);
    loop {
        if en.busy.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        en.dirty.store(false, Ordering::SeqCst);
        let on = en.ev.id.is_enabled() && !en.removed.load(Ordering::SeqCst);
        let r = en.mm.set_bit(en.addr, en.bit, en.size, on);
        en.busy.store(false, Ordering::SeqCst);
        if r.is_err() || !en.dirty.load(Ordering::SeqCst) {
            return r;
        }
    }
}

/// Bring `ens` up to date on the worker pool, never waiting on one address
/// space longer than [`procmem::DEADLINE`]: one that does not answer by
/// then is marked stuck. Returns the enablers whose bit could not be
/// written (address space gone, bad address, stuck).
fn sync_bits(ens: &[Arc<Enabler>]) -> Vec<Arc<Enabler>> {
    let mut failed = Vec::new();
    let mut start = 0;
    while start < ens.len() {
        let batch: Vec<Arc<Enabler>> = ens[start..].to_vec();
        let at = Arc::new(AtomicUsize::new(0));
        let at2 = at.clone();
        let job = move || {
            let mut bad = Vec::new();
            for (k, en) in batch.iter().enumerate() {
                at2.store(k, Ordering::SeqCst);
                if sync_bit(en).is_err() {
                    bad.push(k);
                }
            }
            bad
        };
        match procmem::run_bounded(job, procmem::DEADLINE) {
            Ok(bad) => {
                failed.extend(bad.into_iter().map(|k| ens[start + k].clone()));
                break;
            }
            Err(procmem::Unfinished::TimedOut) => {
                let k = start + at.load(Ordering::SeqCst);
                ens[k].mm.set_stuck();
                failed.push(ens[k].clone());
                start = k + 1;
            }
            Err(procmem::Unfinished::NoWorker) => {
                failed.extend(ens[start..].iter().cloned());
                break;
            }
        }
    }
    failed
}

struct State {
    /// Creation order.
    events: Vec<EvState>,
    /// Status page bits in use (bit 0 always).
    used_bits: Vec<bool>,
    enablers: Vec<Arc<Enabler>>,
    /// Next multi-format id.
    multi_next: u64,
}

impl State {
    fn find(&self, multi: bool, name: &str) -> Option<usize> {
        self.events
            .iter()
            .position(|e| e.ev.multi == multi && e.ev.name == name)
    }

    fn find_base(&self, base: &str) -> Option<usize> {
        self.events
            .iter()
            .position(|e| !e.ev.multi && e.ev.base == base)
    }

    fn index_of(&self, ev: &Arc<UEvent>) -> Option<usize> {
        self.events.iter().position(|e| Arc::ptr_eq(&e.ev, ev))
    }

    fn alloc_bit(&mut self) -> SysResult<u32> {
        let b = (1..STATUS_BITS)
            .find(|&b| !self.used_bits[b])
            .ok_or(Errno::EMFILE)?;
        self.used_bits[b] = true;
        Ok(b as u32)
    }

    fn alloc_byte(&mut self) -> SysResult<u32> {
        let b = (1..PAGE_SIZE)
            .find(|&b| !self.used_bits[b * 8..b * 8 + 8].iter().any(|&u| u))
            .ok_or(Errno::EMFILE)?;
        self.used_bits[b * 8..b * 8 + 8].fill(true);
        Ok(b as u32)
    }
}

/// user_events.
pub struct UserEvents {
    t: Weak<Tracing>,
    me: Weak<UserEvents>,
    state: Mutex<State>,
    /// The status page as mappings see it. Its own lock, never held across
    /// anything slow: a page fault on `user_events_status` (a producer's
    /// mapping, or a remote access that lands in one) never waits for the
    /// registry.
    page: Mutex<Vec<u8>>,
    tree: OnceLock<Arc<Tree>>,
    status_ino: OnceLock<u64>,
    reaper: AtomicBool,
    /// The kernel's process events, once a 6.4+ registration needs them
    /// (None inside when they cannot be had: exits are then polled for).
    procs: OnceLock<Option<ProcEvents>>,
    /// Held while process events are taken and applied.
    applying: Mutex<()>,
}

impl UserEvents {
    /// The registry for `t` (files come with [`UserEvents::add_files`]).
    pub fn new(t: &Arc<Tracing>) -> Arc<UserEvents> {
        let mut used_bits = vec![false; STATUS_BITS];
        used_bits[0] = true;
        Arc::new_cyclic(|me| UserEvents {
            t: Arc::downgrade(t),
            me: me.clone(),
            state: Mutex::new(State {
                events: Vec::new(),
                used_bits,
                enablers: Vec::new(),
                multi_next: 0,
            }),
            page: Mutex::new(vec![0; PAGE_SIZE]),
            tree: OnceLock::new(),
            status_ino: OnceLock::new(),
            reaper: AtomicBool::new(false),
            procs: OnceLock::new(),
            applying: Mutex::new(()),
        })
    }

    /// Add `user_events_data`, `user_events_status` and `dynamic_events`.
    pub fn add_files(self: &Arc<Self>, tree: &Arc<Tree>) {
        let _ = self.tree.set(tree.clone());
        tree.add(
            "tracing/user_events_data",
            NodeKind::File(Arc::new(DataNode(self.clone()))),
            0o640,
        );
        let ino = tree.add(
            "tracing/user_events_status",
            NodeKind::File(Arc::new(StatusNode(self.clone()))),
            0o640,
        );
        let _ = self.status_ino.set(ino);
        tree.add(
            "tracing/dynamic_events",
            NodeKind::File(Arc::new(DynNode(self.clone()))),
            0o640,
        );
    }

    /// The names of the registered events (tracepoint names), oldest first.
    pub fn names(&self) -> Vec<String> {
        let st = self.state.lock_ok();
        st.events.iter().map(|e| e.ev.name.clone()).collect()
    }

    /// Write event `i`'s status bit or byte into the page (and the page
    /// cache of its mappings, if that changed it).
    fn set_status(&self, st: &State, i: usize, on: bool) {
        let (bit, byte) = (st.events[i].status_bit, st.events[i].status_byte);
        if bit.is_none() && byte.is_none() {
            return;
        }
        let mut page = self.page.lock_ok();
        let before = page.clone();
        if let Some(b) = bit {
            let (idx, mask) = ((b >> 3) as usize, 1u8 << (b & 7));
            if on {
                page[idx] |= mask;
            } else {
                page[idx] &= !mask;
            }
        }
        if let Some(b) = byte {
            page[b as usize] = if on { 0x01 } else { 0 };
        }
        if before != *page {
            self.push_page(page.clone());
        }
    }

    fn push_page(&self, page: Vec<u8>) {
        if let (Some(tree), Some(ino)) = (self.tree.get(), self.status_ino.get()) {
            tree.store(*ino, 0, page);
        }
    }

    /// Create an event.
    fn create(&self, st: &mut State, cmd: &Command, multi: bool) -> SysResult<usize> {
        if st.events.len() >= USER_EVENTS_MAX {
            return Err(Errno::EMFILE);
        }
        let t = self.t.upgrade().ok_or(Errno::ENODEV)?;
        let (name, system) = if multi {
            (format!("{}.{:x}", cmd.name, st.multi_next), SYSTEM_MULTI)
        } else {
            (cmd.name.clone(), SYSTEM)
        };
        let (fields, print) = layout(&cmd.fields);
        let min_size = fields.last().map_or(0, |f| f.offset + f.size - COMMON_SIZE);
        let me = self.me.clone();
        let hook_name = name.clone();
        let hook: super::EnableHook = Arc::new(move || {
            if let Some(ue) = me.upgrade() {
                ue.enable_changed(multi, &hook_name);
            }
        });
        let def_name = name.clone();
        let id = t.add_dynamic(
            move |n| EventDef::with_fields(system, &def_name, n, fields, print),
            hook,
        )?;
        if multi {
            st.multi_next += 1;
        }
        st.events.push(EvState {
            ev: Arc::new(UEvent {
                name,
                base: cmd.name.clone(),
                multi,
                fields: cmd.fields.clone(),
                id,
                min_size,
            }),
            fd_refs: 0,
            enablers: 0,
            persistent: false,
            sticky: false,
            status_bit: None,
            status_byte: None,
            free_at: None,
        });
        Ok(st.events.len() - 1)
    }

    /// Delete event `i` (not busy).
    fn destroy(&self, st: &mut State, i: usize) {
        let es = st.events.remove(i);
        let mut page = self.page.lock_ok();
        let mut changed = false;
        if let Some(b) = es.status_bit {
            st.used_bits[b as usize] = false;
            let (idx, mask) = ((b >> 3) as usize, 1u8 << (b & 7));
            changed |= page[idx] & mask != 0;
            page[idx] &= !mask;
        }
        if let Some(b) = es.status_byte {
            let b = b as usize;
            st.used_bits[b * 8..b * 8 + 8].fill(false);
            changed |= page[b] != 0;
            page[b] = 0;
        }
        if changed {
            self.push_page(page.clone());
        }
        drop(page);
        if let Some(t) = self.t.upgrade() {
            t.remove_dynamic(&es.ev.id);
        }
    }

    /// Schedule event `i` to be freed if nothing keeps it (6.4+ lifetime).
    fn maybe_free(&self, st: &mut State, i: usize) {
        let e = &mut st.events[i];
        if !e.persistent && !e.sticky && !e.busy() {
            if e.free_at.is_none() {
                e.free_at = Some(Instant::now() + FREE_DELAY);
                self.start_reaper(st);
            }
        } else {
            e.free_at = None;
        }
    }

    /// Schedule every event nothing keeps.
    fn free_unused(&self, st: &mut State) {
        for i in 0..st.events.len() {
            self.maybe_free(st, i);
        }
    }

    /// Free the scheduled events whose time has come (still unreferenced).
    fn free_due(&self, st: &mut State) {
        let now = Instant::now();
        let mut i = 0;
        while i < st.events.len() {
            let e = &st.events[i];
            if e.free_at.is_some_and(|t| t <= now) && !e.busy() && !e.persistent && !e.sticky {
                self.destroy(st, i);
            } else {
                i += 1;
            }
        }
    }

    /// The hook: an event was enabled or disabled. Its enable bits are
    /// written outside the registry lock, on the worker pool.
    fn enable_changed(&self, multi: bool, name: &str) {
        // Forks, execs and exits that happened before this change are
        // applied first: a child forked earlier gets the new state, an
        // image exec'd earlier is not written.
        self.drain_procs();
        let ens: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            let Some(i) = st.find(multi, name) else {
                return;
            };
            let ev = st.events[i].ev.clone();
            self.set_status(&st, i, ev.id.is_enabled());
            st.enablers
                .iter()
                .filter(|en| Arc::ptr_eq(&en.ev, &ev))
                .cloned()
                .collect()
        };
        let failed = sync_bits(&ens);
        let mut st = self.state.lock_ok();
        self.drop_enablers(&mut st, &failed);
        if let Some(i) = st.find(multi, name) {
            self.maybe_free(&mut st, i);
        }
    }

    /// Remove `gone` from the enablers (those still there) and release
    /// their references; then schedule what nothing keeps.
    fn drop_enablers(&self, st: &mut State, gone: &[Arc<Enabler>]) {
        if gone.is_empty() {
            return;
        }
        for en in gone {
            en.removed.store(true, Ordering::SeqCst);
            let Some(k) = st.enablers.iter().position(|e| Arc::ptr_eq(e, en)) else {
                continue;
            };
            st.enablers.swap_remove(k);
            if let Some(i) = st.index_of(&en.ev) {
                st.events[i].enablers -= 1;
            }
        }
        self.free_unused(st);
    }

    /// Drop the enablers whose address space is gone, among those of
    /// process `tgid` (all if None); with `exec`, also every enabler
    /// copied into `tgid` by fork. The probes run without the lock.
    fn reap(&self, tgid: Option<u32>, exec: bool) {
        let cand: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            st.enablers
                .iter()
                .filter(|en| tgid.map_or(true, |t| en.mm.tgid() == t))
                .cloned()
                .collect()
        };
        if cand.is_empty() {
            return;
        }
        let mut verdict: Vec<(*const Mm, bool)> = Vec::new();
        let mut dead = Vec::new();
        for en in cand {
            let key = Arc::as_ptr(&en.mm);
            let gone = match verdict.iter().find(|(k, _)| *k == key) {
                Some((_, g)) => *g,
                None => {
                    let g = en.mm.is_stuck() || !en.mm.alive();
                    verdict.push((key, g));
                    g
                }
            };
            if gone || (exec && en.forked) {
                dead.push(en);
            }
        }
        let mut st = self.state.lock_ok();
        self.drop_enablers(&mut st, &dead);
    }

    /// The process events, subscribed to on first use. Their thread handles
    /// them as they come; [`UserEvents::drain_procs`] does it on the
    /// caller's thread when order matters.
    fn procs(&self) -> Option<&ProcEvents> {
        self.procs
            .get_or_init(|| match ProcEvents::listen() {
                Ok(p) => {
                    let me = self.me.clone();
                    let _ = std::thread::Builder::new()
                        .name("proc-events".into())
                        .spawn(move || loop {
                            let Some(ue) = me.upgrade() else { return };
                            ue.drain_procs();
                            let Some(Some(p)) = ue.procs.get() else {
                                return;
                            };
                            // Not holding `ue` while waiting would be
                            // tidier, but the registry lives as long as the
                            // mount anyway.
                            p.wait(Duration::from_secs(1));
                        });
                    Some(p)
                }
                Err(e) => {
                    warn!(
                        "no process events ({e}): enable bits are not copied to forked \
                         children, and exits and execs are found by polling"
                    );
                    None
                }
            })
            .as_ref()
    }

    /// Apply every process event the kernel has sent so far.
    fn drain_procs(&self) {
        let Some(Some(p)) = self.procs.get() else {
            return;
        };
        // Taking events off the socket and applying them is one step: a
        // drain that finds the socket empty while another thread still
        // applies what it took would return too early.
        let _apply = self.applying.lock_ok();
        let mut events = Vec::new();
        let mut lost = false;
        p.drain(&mut |e| events.push(e), &mut || lost = true);
        if lost {
            warn!("process events were lost (queue overflow): checking every producer");
            self.reap(None, false);
        }
        for e in events {
            match e {
                ProcEvent::Fork {
                    parent_tgid,
                    child_pid,
                    child_tgid,
                    ts_ns,
                } if child_pid == child_tgid => self.forked(parent_tgid, child_tgid, ts_ns),
                ProcEvent::Fork { .. } => {}
                ProcEvent::Exec { tgid, .. } => self.reap(Some(tgid), true),
                ProcEvent::Exit { tgid, .. } => self.reap(Some(tgid), false),
            }
        }
    }

    /// Process `parent` forked `child`: copy the parent's enablers into the
    /// child's address space, as the kernel's `user_events_fork` does, and
    /// bring the copies up to date.
    fn forked(&self, parent: u32, child: u32, ts_ns: u64) {
        let parents: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            st.enablers
                .iter()
                .filter(|en| en.mm.tgid() == parent && !en.mm.is_stuck())
                .cloned()
                .collect()
        };
        // One live address space of the parent (a dead one, from before an
        // exec, is not what the child copied).
        let Some(pmm) = parents.iter().map(|en| en.mm.clone()).find(|mm| mm.alive()) else {
            return;
        };
        let Some(cmm) = pmm.pin_child(child) else {
            debug!(
                parent,
                child, "forked child not followed: shares the address space, exec'd or gone"
            );
            return;
        };
        let copies: Vec<Arc<Enabler>> = parents
            .iter()
            .filter(|en| en.mm.alive())
            .map(|en| {
                Arc::new(Enabler::new(
                    cmm.clone(),
                    en.addr,
                    en.bit,
                    en.size,
                    en.ev.clone(),
                    true,
                ))
            })
            .collect();
        {
            let mut st = self.state.lock_ok();
            for en in &copies {
                if st.enablers.len() >= MAX_ENABLERS {
                    warn!(
                        child,
                        "user_events: enable bits at their limit; fork copy dropped"
                    );
                    en.removed.store(true, Ordering::SeqCst);
                    continue;
                }
                if let Some(i) = st.index_of(&en.ev) {
                    st.events[i].enablers += 1;
                    st.events[i].free_at = None;
                    st.enablers.push(en.clone());
                } else {
                    en.removed.store(true, Ordering::SeqCst);
                }
            }
        }
        let copies: Vec<Arc<Enabler>> = copies
            .into_iter()
            .filter(|e| !e.removed.load(Ordering::SeqCst))
            .collect();
        let failed = sync_bits(&copies);
        let mut st = self.state.lock_ok();
        self.drop_enablers(&mut st, &failed);
        drop(st);
        // Process event timestamps are CLOCK_MONOTONIC.
        let lag_us = crate::clock::clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(ts_ns) / 1000;
        debug!(
            parent,
            child,
            copies = copies.len(),
            lag_us,
            "fork: enablers copied {lag_us} µs after the fork"
        );
    }

    /// Free events whose time has come, every 100 ms while any is
    /// scheduled (and, without process events, drop the enablers of exited
    /// processes). The thread ends when nothing is left to do.
    fn start_reaper(&self, _st: &State) {
        if self.reaper.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.me.clone();
        let _ = std::thread::Builder::new()
            .name("user_events-reaper".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(100));
                let Some(ue) = me.upgrade() else { return };
                let polling = !matches!(ue.procs.get(), Some(Some(_)));
                if polling {
                    ue.reap(None, false);
                }
                let mut st = ue.state.lock_ok();
                ue.free_due(&mut st);
                let pending = st.events.iter().any(|e| e.free_at.is_some());
                if !pending && (!polling || st.enablers.is_empty()) {
                    // Decided under the lock that schedules frees, so a
                    // later `maybe_free` starts a new thread.
                    ue.reaper.store(false, Ordering::SeqCst);
                    return;
                }
            });
    }

    /// `DIAG_IOCSREG`.
    fn register(&self, f: &DataFile, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let arg = req.arg;
        let size = u32::from_ne_bytes(mem.read(arg, 4)?.try_into().unwrap()) as usize;
        if size > PAGE_SIZE {
            return Err(Errno::E2BIG);
        }
        match size {
            20 => self.register_old(f, req, OldAbi::Bit),
            24 => self.register_old(f, req, OldAbi::Byte),
            _ if size >= REG_SIZE => self.register_new(f, req, size),
            _ => Err(Errno::EINVAL),
        }
    }

    /// An address space this process's enablers pin already, if `fresh` is
    /// the same one (one descriptor per producer process), else `fresh`.
    fn share_mm(&self, fresh: Arc<Mm>) -> Arc<Mm> {
        let cands: Vec<Arc<Mm>> = {
            let st = self.state.lock_ok();
            let mut v: Vec<Arc<Mm>> = Vec::new();
            for en in st.enablers.iter().filter(|e| e.mm.tgid() == fresh.tgid()) {
                if !en.mm.is_stuck() && !v.iter().any(|m| Arc::ptr_eq(m, &en.mm)) {
                    v.push(en.mm.clone());
                }
            }
            v
        };
        cands
            .into_iter()
            .find(|m| m.same_as(&fresh))
            .unwrap_or(fresh)
    }

    /// The enablers of process `tgid` (its current address space) at
    /// (`addr`, `bit`). Those of a former image of the pid do not count;
    /// they are dropped on the way.
    fn has_enabler(&self, tgid: u32, addr: u64, bit: u8) -> Vec<Arc<Enabler>> {
        let hits: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            st.enablers
                .iter()
                .filter(|e| e.mm.tgid() == tgid && e.addr == addr && e.bit == bit)
                .cloned()
                .collect()
        };
        let (live, dead): (Vec<_>, Vec<_>) = hits.into_iter().partition(|e| e.mm.alive());
        if !dead.is_empty() {
            let mut st = self.state.lock_ok();
            self.drop_enablers(&mut st, &dead);
        }
        live
    }

    fn register_new(
        &self,
        f: &DataFile,
        req: &IoctlRequest<'_>,
        size: usize,
    ) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let raw = mem.read(req.arg, size)?;
        if raw[REG_SIZE..].iter().any(|&b| b != 0) {
            return Err(Errno::E2BIG);
        }
        let enable_bit = raw[4];
        let enable_size = raw[5];
        let flags = u16::from_ne_bytes([raw[6], raw[7]]);
        let enable_addr = u64::from_ne_bytes(raw[8..16].try_into().unwrap());
        let name_args = u64::from_ne_bytes(raw[16..24].try_into().unwrap());
        if flags & !(REG_MAX - 1) != 0 {
            return Err(Errno::EINVAL);
        }
        let max_size = std::mem::size_of::<usize>() as u8;
        if enable_size != 4 && enable_size != max_size {
            return Err(Errno::EINVAL);
        }
        if enable_addr % enable_size as u64 != 0 || enable_bit >= enable_size * 8 {
            return Err(Errno::EINVAL);
        }
        if enable_addr >= TASK_SIZE - enable_size as u64 {
            return Err(Errno::EFAULT);
        }
        // The registering thread is blocked in this ioctl: its address
        // space is the one to pin, and the pin outlives exec and exit
        // without ever pointing elsewhere.
        let mm = self.share_mm(Mm::pin(req.caller.pid)?);
        let tgid = mm.tgid();
        // A fork of this process that came before holds copies already.
        self.drain_procs();
        if !self.has_enabler(tgid, enable_addr, enable_bit).is_empty() {
            return Err(Errno::EADDRINUSE);
        }
        let desc = read_desc(mem, name_args)?;
        let cmd = parse_command(&desc)?;
        if cmd.flags.is_some() {
            return Err(Errno::EINVAL);
        }
        if flags & REG_PERSIST != 0 && !has_perfmon(req.caller.pid) {
            return Err(Errno::EPERM);
        }
        // Follow forks from before this registration returns.
        self.procs();
        let multi = flags & REG_MULTI_FORMAT != 0;
        let mut slots = f.slots.lock_ok();
        let mut st = self.state.lock_ok();
        if st.enablers.len() >= MAX_ENABLERS {
            warn!("user_events: {MAX_ENABLERS} enable bits registered; refusing more (ENOMEM)");
            return Err(Errno::ENOMEM);
        }
        let i = if multi {
            match st.events.iter().position(|e| {
                e.ev.multi && e.ev.base == cmd.name && fields_match(&e.ev.fields, &cmd.fields)
            }) {
                Some(i) => i,
                None => self.create(&mut st, &cmd, true)?,
            }
        } else {
            match st.find_base(&cmd.name) {
                Some(i) if fields_match(&st.events[i].ev.fields, &cmd.fields) => i,
                Some(_) => return Err(Errno::EADDRINUSE),
                None => self.create(&mut st, &cmd, false)?,
            }
        };
        if flags & REG_PERSIST != 0 {
            st.events[i].persistent = true;
        }
        if st.enablers.len() >= MAX_ENABLERS {
            warn!("user_events: {MAX_ENABLERS} enable bits registered; refusing more (ENOMEM)");
            return Err(Errno::ENOMEM);
        }
        let ev = st.events[i].ev.clone();
        let index = f.add_slot(&mut slots, &mut st, &ev, false);
        drop(slots);
        let en = Arc::new(Enabler::new(
            mm,
            enable_addr,
            enable_bit,
            enable_size,
            ev,
            false,
        ));
        st.enablers.push(en.clone());
        st.events[i].enablers += 1;
        drop(st);
        // The enabler reflects the current state at once (outside the lock:
        // the word may sit in a page that this very mount serves).
        let failed = sync_bits(std::slice::from_ref(&en));
        if !failed.is_empty() {
            let mut st = self.state.lock_ok();
            self.drop_enablers(&mut st, &failed);
            return Err(Errno::EFAULT);
        }
        mem.write(req.arg + 24, &(index as u32).to_ne_bytes())?;
        Ok(IoctlReply::default())
    }

    fn register_old(
        &self,
        f: &DataFile,
        req: &IoctlRequest<'_>,
        abi: OldAbi,
    ) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let (name_off, status_off, index_off, size) = match abi {
            OldAbi::Bit => (4, 12, 16, 20),
            OldAbi::Byte => (8, 16, 20, 24),
        };
        let raw = mem.read(req.arg, size)?;
        let name_args = u64::from_ne_bytes(raw[name_off..name_off + 8].try_into().unwrap());
        let desc = read_desc(mem, name_args)?;
        // Flag text is ignored by these kernels.
        let cmd = parse_command(&desc)?;
        let mut slots = f.slots.lock_ok();
        let mut st = self.state.lock_ok();
        let (i, new) = match st.find_base(&cmd.name) {
            Some(i) => (i, false),
            None => {
                // Take the status slot first, so that EMFILE leaves nothing.
                let slot = match abi {
                    OldAbi::Bit => st.alloc_bit()?,
                    OldAbi::Byte => st.alloc_byte()?,
                };
                match self.create(&mut st, &cmd, false) {
                    Ok(i) => {
                        match abi {
                            OldAbi::Bit => st.events[i].status_bit = Some(slot),
                            OldAbi::Byte => st.events[i].status_byte = Some(slot),
                        }
                        (i, true)
                    }
                    Err(e) => {
                        match abi {
                            OldAbi::Bit => st.used_bits[slot as usize] = false,
                            OldAbi::Byte => {
                                let b = slot as usize * 8;
                                st.used_bits[b..b + 8].fill(false)
                            }
                        }
                        return Err(e);
                    }
                }
            }
        };
        if !new {
            let need = match abi {
                OldAbi::Bit => st.events[i].status_bit.is_none(),
                OldAbi::Byte => st.events[i].status_byte.is_none(),
            };
            if need {
                let slot = match abi {
                    OldAbi::Bit => st.alloc_bit()?,
                    OldAbi::Byte => st.alloc_byte()?,
                };
                match abi {
                    OldAbi::Bit => st.events[i].status_bit = Some(slot),
                    OldAbi::Byte => st.events[i].status_byte = Some(slot),
                }
                let on = st.events[i].ev.id.is_enabled();
                self.set_status(&st, i, on);
            }
        }
        st.events[i].sticky = true;
        let status = match abi {
            OldAbi::Bit => st.events[i].status_bit.unwrap(),
            OldAbi::Byte => st.events[i].status_byte.unwrap(),
        };
        let ev = st.events[i].ev.clone();
        let index = f.add_slot(&mut slots, &mut st, &ev, true);
        drop(st);
        drop(slots);
        mem.write(req.arg + status_off, &status.to_ne_bytes())?;
        mem.write(req.arg + index_off, &(index as u32).to_ne_bytes())?;
        Ok(IoctlReply::default())
    }

    /// `DIAG_IOCSDEL`.
    fn delete_ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let name = read_desc(req.mem, req.arg)?;
        let mut st = self.state.lock_ok();
        let hits: Vec<usize> = (0..st.events.len())
            .filter(|&i| st.events[i].ev.base == name)
            .collect();
        if hits.is_empty() {
            return Err(Errno::ENOENT);
        }
        if hits.iter().any(|&i| st.events[i].busy()) {
            return Err(Errno::EBUSY);
        }
        if hits.iter().any(|&i| st.events[i].persistent) && !has_perfmon(req.caller.pid) {
            return Err(Errno::EPERM);
        }
        for &i in hits.iter().rev() {
            self.destroy(&mut st, i);
        }
        Ok(IoctlReply::default())
    }

    /// `DIAG_IOCSUNREG`.
    fn unregister(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let size = u32::from_ne_bytes(mem.read(req.arg, 4)?.try_into().unwrap()) as usize;
        if size > PAGE_SIZE {
            return Err(Errno::E2BIG);
        }
        if size < UNREG_SIZE {
            return Err(Errno::EINVAL);
        }
        let raw = mem.read(req.arg, size)?;
        if raw[UNREG_SIZE..].iter().any(|&b| b != 0) {
            return Err(Errno::E2BIG);
        }
        let bit = raw[4];
        if raw[5] != 0 || raw[6] != 0 || raw[7] != 0 {
            return Err(Errno::EINVAL);
        }
        let addr = u64::from_ne_bytes(raw[8..16].try_into().unwrap());
        let tgid = procmem::tgid_of(req.caller.pid).ok_or(Errno::ENOENT)?;
        // A forked child may unregister the copy it inherited: the fork
        // must have been handled.
        self.drain_procs();
        let hits = self.has_enabler(tgid, addr, bit);
        if hits.is_empty() {
            return Err(Errno::ENOENT);
        }
        {
            let mut st = self.state.lock_ok();
            self.drop_enablers(&mut st, &hits);
        }
        // Cleared whatever the event's state (`removed` is set by now).
        sync_bits(&hits);
        Ok(IoctlReply::default())
    }

    /// The `user_events_status` text.
    fn status_text(&self) -> String {
        let st = self.state.lock_ok();
        let mut s = String::new();
        let mut busy = 0;
        let mut old = false;
        for e in &st.events {
            let on = e.ev.id.is_enabled();
            busy += on as usize;
            if let Some(b) = e.status_bit.or(e.status_byte) {
                old = true;
                let _ = write!(s, "{b}:");
            }
            s.push_str(&e.ev.name);
            if on {
                s.push_str(" # Used by ftrace");
            }
            s.push('\n');
        }
        let _ = write!(s, "\nActive: {}\nBusy: {busy}\n", st.events.len());
        if old {
            let _ = writeln!(s, "Max: {STATUS_BITS}");
        }
        s
    }

    /// The `dynamic_events` text.
    fn dynamic_text(&self) -> String {
        let st = self.state.lock_ok();
        st.events
            .iter()
            .map(|e| format!("u:{}{}\n", e.ev.base, fields_text(&e.ev.fields)))
            .collect()
    }

    /// Run one `dynamic_events` line.
    fn dynamic_line(&self, line: &str, caller: &Caller) -> SysResult<()> {
        if line.trim().is_empty() {
            return Ok(());
        }
        if line.starts_with('-') || line.starts_with('!') {
            return self.dynamic_delete(line, caller);
        }
        let Some(rest) = line.strip_prefix("u:") else {
            // No other dynamic event type here.
            return Err(Errno::EINVAL);
        };
        let cmd = parse_command(rest.trim_start_matches(' '))?;
        if cmd.flags.is_some() {
            return Err(Errno::EINVAL);
        }
        if !has_perfmon(caller.pid) {
            return Err(Errno::EPERM);
        }
        let mut st = self.state.lock_ok();
        match st.find_base(&cmd.name) {
            Some(i) if fields_match(&st.events[i].ev.fields, &cmd.fields) => {
                st.events[i].persistent = true;
                st.events[i].free_at = None;
                Ok(())
            }
            Some(_) => Err(Errno::EADDRINUSE),
            None => {
                let i = self.create(&mut st, &cmd, false)?;
                st.events[i].persistent = true;
                Ok(())
            }
        }
    }

    /// `-:[system/]name [fields]` or `!x:[system/]name [fields]`.
    fn dynamic_delete(&self, line: &str, caller: &Caller) -> SysResult<()> {
        let mut words = line.split_ascii_whitespace();
        let first = words.next().unwrap_or("");
        let target = if let Some(r) = first.strip_prefix('-') {
            r.strip_prefix(':').ok_or(Errno::EINVAL)?
        } else {
            let c = first.find(':').ok_or(Errno::EINVAL)?;
            &first[c + 1..]
        };
        let (system, event) = match target.split_once('/') {
            Some((s, e)) => (Some(s), e),
            None => (None, target),
        };
        if system.is_none() && event.is_empty() {
            return Err(Errno::EINVAL);
        }
        if system.is_some_and(|s| s != SYSTEM && s != SYSTEM_MULTI) {
            return Err(Errno::ENOENT);
        }
        let rest: Vec<&str> = words.collect();
        let want = parse_fields(&rest.join(" ")).ok();
        let mut st = self.state.lock_ok();
        let mut found = false;
        let mut i = 0;
        while i < st.events.len() {
            let e = &st.events[i];
            let hit =
                e.ev.base == event && want.as_ref().is_some_and(|w| fields_match(&e.ev.fields, w));
            if !hit {
                i += 1;
                continue;
            }
            found = true;
            if e.busy() {
                return Err(Errno::EBUSY);
            }
            if e.persistent && !has_perfmon(caller.pid) {
                return Err(Errno::EPERM);
            }
            self.destroy(&mut st, i);
        }
        if found {
            Ok(())
        } else {
            Err(Errno::ENOENT)
        }
    }

    /// `dynamic_events` opened with O_TRUNC: delete every event, or none if
    /// any is busy.
    fn dynamic_clear(&self, caller: &Caller) -> SysResult<()> {
        let mut st = self.state.lock_ok();
        if st.events.iter().any(|e| e.busy()) {
            return Err(Errno::EBUSY);
        }
        if st.events.iter().any(|e| e.persistent) && !has_perfmon(caller.pid) {
            return Err(Errno::EPERM);
        }
        while !st.events.is_empty() {
            let last = st.events.len() - 1;
            self.destroy(&mut st, last);
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum OldAbi {
    /// 6.0–6.3: bit per event.
    Bit,
    /// 5.18: byte per event.
    Byte,
}

// ---------------------------------------------------------------------------
// user_events_data.

struct DataNode(Arc<UserEvents>);

/// One registration on an fd: write index = position.
struct Slot {
    ev: Arc<UEvent>,
    /// Registered through an old ABI (writes while disabled succeed).
    old: bool,
}

/// The last thread that wrote on an fd and its name (read from /proc when
/// another thread writes).
struct Writer {
    pid: u32,
    comm: String,
}

struct DataFile {
    ue: Arc<UserEvents>,
    slots: Mutex<Vec<Slot>>,
    writer: Mutex<Writer>,
}

fn comm_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "<...>".into())
}

impl DataFile {
    /// Add `ev` to this fd's list (or find it there); its index.
    fn add_slot(
        &self,
        slots: &mut Vec<Slot>,
        st: &mut State,
        ev: &Arc<UEvent>,
        old: bool,
    ) -> usize {
        if let Some(k) = slots.iter().position(|s| Arc::ptr_eq(&s.ev, ev)) {
            slots[k].old = old;
            return k;
        }
        slots.push(Slot {
            ev: ev.clone(),
            old,
        });
        if let Some(i) = st.index_of(ev) {
            st.events[i].fd_refs += 1;
            st.events[i].free_at = None;
        }
        slots.len() - 1
    }
}

impl FileNode for DataNode {
    fn mode(&self) -> u32 {
        0o640
    }
    fn open(&self, _flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(DataFile {
            ue: self.0.clone(),
            slots: Mutex::new(Vec::new()),
            writer: Mutex::new(Writer {
                pid: caller.pid,
                comm: comm_of(caller.pid),
            }),
        }))
    }
}

/// Check the `__data_loc`/`__rel_loc` fields of an entry.
fn validate(fields: &[Field], entry: &[u8]) -> SysResult<()> {
    for f in fields {
        let is_loc = matches!(
            f.kind,
            FieldKind::DynString | FieldKind::RelString | FieldKind::DynArray | FieldKind::RelArray
        );
        if !is_loc {
            continue;
        }
        let (start, len) = f.loc_range(entry);
        if start + len > entry.len() {
            return Err(Errno::EFAULT);
        }
        if f.ctype.contains("char") && (len == 0 || entry[start + len - 1] != 0) {
            return Err(Errno::EFAULT);
        }
    }
    Ok(())
}

impl DataFile {
    /// Record one write(2) of `data` by thread `pid`: the trace shows the
    /// writer, as the kernel shows `current`.
    fn record(&self, data: &[u8], pid: u32) -> SysResult<u32> {
        if data.len() < 4 {
            return Err(Errno::EFAULT);
        }
        let idx = i32::from_ne_bytes(data[..4].try_into().unwrap());
        if idx < 0 {
            return Err(Errno::EINVAL);
        }
        let (ev, old) = {
            let slots = self.slots.lock_ok();
            let s = slots.get(idx as usize).ok_or(Errno::ENOENT)?;
            (s.ev.clone(), s.old)
        };
        let payload = &data[4..];
        if payload.len() < ev.min_size {
            return Err(Errno::EINVAL);
        }
        if !ev.id.is_enabled() {
            return if old {
                Ok(data.len() as u32)
            } else {
                Err(Errno::EBADF)
            };
        }
        let comm = {
            let mut w = self.writer.lock_ok();
            if w.pid != pid {
                *w = Writer {
                    pid,
                    comm: comm_of(pid),
                };
            }
            w.comm.clone()
        };
        let mut entry = Vec::with_capacity(COMMON_SIZE + payload.len());
        entry.extend_from_slice(&ev.id.id().to_le_bytes());
        entry.extend_from_slice(&[0, 0]);
        entry.extend_from_slice(&pid.to_le_bytes());
        entry.extend_from_slice(payload);
        validate(&ev.id.def().fields, &entry)?;
        if let Some(t) = self.ue.t.upgrade() {
            t.record(&ev.id.0, entry, &comm, None);
        }
        Ok(data.len() as u32)
    }
}

impl OpenFile for DataFile {
    fn read(&self, _offset: u64, _size: u32) -> SysResult<Vec<u8>> {
        Err(Errno::EINVAL)
    }
    fn write_by(&self, _offset: u64, data: &[u8], caller: &Caller) -> SysResult<u32> {
        self.record(data, caller.pid)
    }
    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        match req.cmd {
            DIAG_IOCSREG => self.ue.register(self, req),
            DIAG_IOCSDEL => self.ue.delete_ioctl(req),
            DIAG_IOCSUNREG => self.ue.unregister(req),
            _ => Err(Errno::ENOTTY),
        }
    }
    fn is_stream(&self) -> bool {
        true
    }
    fn release(&self) {
        let slots = std::mem::take(&mut *self.slots.lock_ok());
        {
            let mut st = self.ue.state.lock_ok();
            for s in &slots {
                if let Some(i) = st.index_of(&s.ev) {
                    st.events[i].fd_refs -= 1;
                }
            }
            self.ue.free_unused(&mut st);
        }
        // Without process events, an exit is noticed here too: a process
        // that exits closes its fds after its memory is gone. With them, its
        // exit event does this for its own enablers only, instead of every
        // close probing every producer.
        if !matches!(self.ue.procs.get(), Some(Some(_))) {
            self.ue.reap(None, false);
        }
    }
}

// ---------------------------------------------------------------------------
// user_events_status.

struct StatusNode(Arc<UserEvents>);

struct StatusFile {
    ue: Arc<UserEvents>,
    /// The text that read(2) gives (a mapping, and so sendfile, sees the
    /// status page instead).
    text: OpenText,
}

impl FileNode for StatusNode {
    fn mode(&self) -> u32 {
        0o640
    }
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(StatusFile {
            ue: self.0.clone(),
            text: OpenText::lazy(),
        }))
    }
    /// One page, so that a mapping can fault it in.
    fn size(&self) -> u64 {
        PAGE_SIZE as u64
    }
}

impl OpenFile for StatusFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.text
            .read(offset, size, || self.ue.status_text().into_bytes())
    }
    fn write(&self, _offset: u64, _data: &[u8]) -> SysResult<u32> {
        Err(Errno::EINVAL)
    }
    fn read_mapped(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let page = self.ue.page.lock_ok();
        Ok(crate::vfs::slice_at(&page[..PAGE_SIZE], offset, size))
    }
}

// ---------------------------------------------------------------------------
// dynamic_events.

struct DynNode(Arc<UserEvents>);

struct DynFile {
    ue: Arc<UserEvents>,
    caller: Caller,
    /// Readable opens.
    text: Option<OpenText>,
    writable: bool,
}

impl FileNode for DynNode {
    fn mode(&self) -> u32 {
        0o640
    }
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(DynFile {
            ue: self.0.clone(),
            caller: *caller,
            text: flags
                .readable()
                .then(|| OpenText::new(self.0.dynamic_text().into_bytes()))
                .transpose()?,
            writable: flags.writable(),
        }))
    }
}

impl OpenFile for DynFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let generate = || self.ue.dynamic_text().into_bytes();
        match &self.text {
            Some(t) => t.read(offset, size, generate),
            None => Ok(crate::vfs::slice_at(&generate(), offset, size)),
        }
    }
    fn content(&self) -> Option<&[u8]> {
        self.text.as_ref().map(|t| t.at_open())
    }
    fn read_mapped(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let t = self.text.as_ref().ok_or(Errno::EIO)?;
        Ok(crate::vfs::slice_at(t.at_open(), offset, size))
    }
    fn write(&self, _offset: u64, data: &[u8]) -> SysResult<u32> {
        if let Some(t) = &self.text {
            t.written();
        }
        let text = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
        for line in text.split('\n') {
            let line = line.trim_end_matches('\0');
            if line.len() > MAX_DYN_LINE {
                return Err(Errno::EINVAL);
            }
            let line = match line.find('#') {
                Some(i) => &line[..i],
                None => line,
            };
            self.ue.dynamic_line(line, &self.caller)?;
        }
        Ok(data.len() as u32)
    }
    fn truncate(&self) -> SysResult<()> {
        if self.writable {
            self.ue.dynamic_clear(&self.caller)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(ctype: &str, name: &str, size: usize) -> UField {
        UField {
            ctype: ctype.into(),
            name: name.into(),
            struct_size: None,
            size,
        }
    }

    #[test]
    fn grammar() {
        let c = parse_command("test u32 count; char[20] msg").unwrap();
        assert_eq!(c.name, "test");
        assert_eq!(c.flags, None);
        assert_eq!(
            c.fields,
            vec![f("u32", "count", 4), f("char[20]", "msg", 20)]
        );
        let c = parse_command("t:BPF_ITER unsigned int a;__data_loc char[] s;;").unwrap();
        assert_eq!(c.flags.as_deref(), Some("BPF_ITER"));
        assert_eq!(
            c.fields,
            vec![f("unsigned int", "a", 4), f("__data_loc char[]", "s", 4)]
        );
        let c =
            parse_command("t struct foo x 24; __rel_loc unsigned char[] r; char[0x10] h").unwrap();
        assert_eq!(c.fields[0].struct_size, Some(24));
        assert_eq!(c.fields[0].ctype, "struct foo");
        assert_eq!(c.fields[1].ctype, "__rel_loc unsigned char[]");
        assert_eq!(c.fields[2].size, 16);
        assert_eq!(parse_command("noargs").unwrap().fields, vec![]);
        for bad in [
            "t long x",
            "t u32  a",
            "t u32 a ;",
            "t u32",
            "t struct foo x",
            "t struct foo x 0",
            "t u32 a 4",
            "t char[0] a",
            "t char[1025] a",
            "t char[01234567] a",
            "t u8[4] a",
            " t u32 a",
            "a/b u32 x",
            "t float f",
        ] {
            assert_eq!(parse_command(bad).err(), Some(Errno::EINVAL), "{bad}");
        }
        assert!(parse_command("t char[1024] a").is_ok());
    }

    #[test]
    fn layout_and_print_fmt() {
        let c = parse_command("test u32 count; char[20] msg; __data_loc char[] s; u8 b; s64 q")
            .unwrap();
        let (fields, print) = layout(&c.fields);
        let offs: Vec<_> = fields
            .iter()
            .map(|f| (f.offset, f.size, f.signed))
            .collect();
        assert_eq!(
            offs,
            vec![
                (8, 4, false),
                (12, 20, true),
                (32, 4, true),
                (36, 1, false),
                (37, 8, true)
            ]
        );
        assert_eq!(
            print,
            "\"count=%u msg=%s s=%s b=%u q=%lld\", REC->count, REC->msg, __get_str(s), REC->b, REC->q"
        );
        let def = EventDef::with_fields(SYSTEM, "test", 40100, fields, print);
        let fmt = def.format_text();
        assert!(fmt.contains("\tfield:u32 count;\toffset:8;\tsize:4;\tsigned:0;\n"));
        assert!(fmt.contains("\tfield:char msg[];\toffset:12;\tsize:20;\tsigned:1;\n"));
        assert!(fmt.contains("\tfield:__data_loc char[] s;\toffset:32;\tsize:4;\tsigned:1;\n"));
        let c = parse_command("r __rel_loc char[] data").unwrap();
        assert_eq!(layout(&c.fields).1, "\"data=%s\", __get_rel_str(data)");
        assert_eq!(layout(&[]).1, "\"\"");
        assert_eq!(
            fields_text(&parse_command("test u32 count;char[20] msg").unwrap().fields),
            " u32 count; char[20] msg"
        );
    }

    #[test]
    fn field_printer() {
        let c = parse_command("e u32 a; u16 b; u8 c; u8 d; s64 e; char[8] m; __rel_loc char[] r")
            .unwrap();
        let (fields, print) = layout(&c.fields);
        let def = EventDef::with_fields(SYSTEM, "e", 1, fields, print);
        let mut entry = vec![0u8; 8];
        entry.extend_from_slice(&u32::MAX.to_le_bytes());
        entry.extend_from_slice(&0xffffu16.to_le_bytes());
        entry.push(b'A');
        entry.push(10);
        entry.extend_from_slice(&5i64.to_le_bytes());
        entry.extend_from_slice(b"hi\0\0\0\0\0\0");
        entry.extend_from_slice(&(3u32 << 16).to_le_bytes());
        entry.extend_from_slice(b"xy\0");
        validate(&def.fields, &entry).unwrap();
        let mut s = String::new();
        def.render_line(&entry, &mut s);
        assert_eq!(
            s,
            " a=0xffffffff (-1) b=0xffff (65535) c='A'(65) d=(10) e=0x5 (5) m=hi r=xy"
        );
        // A location past the end, or a string without its NUL.
        let n = entry.len();
        entry[n - 1] = b'z';
        assert_eq!(validate(&def.fields, &entry), Err(Errno::EFAULT));
    }
}
