//! Pinned address spaces: a producer's `/proc/<tid>/mem` held open from its
//! registration, as the kernel holds an `mm` reference, and the enable bits
//! written through it; and the /proc facts about tasks monfs needs.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use tracing::warn;

use crate::base::errno::{Errno, SysResult};

use super::*;

/// Why an access to a pinned address space failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmError {
    /// The address space is gone: its process exited or exec'd.
    Gone,
    /// The address is unmapped, not writable, or backed by a FUSE file.
    Fault,
    /// An earlier access did not finish in time (a page nobody serves): the
    /// address space is not touched again.
    Stuck,
}

/// An address space's identity: its layout, from `/proc/<pid>/stat`
/// (start_code, end_code, start_stack, start_data, end_data, start_brk,
/// arg_start, arg_end, env_start, env_end), and the 16 bytes at its
/// `AT_RANDOM`, which exec fills with fresh random bytes. fork() copies
/// both; exec() makes a new layout, the same one for the same binary when
/// address space randomization is off (`setarch -R`, gdb), but never the
/// same random bytes (issue 37).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Layout {
    stat: [u64; 10],
    random: [u8; 16],
}

/// `AT_RANDOM` in an auxiliary vector.
const AT_RANDOM: u64 = 25;

/// The identity of the address space `mem` pins (`/proc/<pid>/mem` of
/// process `pid`, opened before): None if it cannot be read, or if the
/// process exec'd since `mem` was opened (the random bytes are read through
/// `mem`, at the address the current image's auxiliary vector names; a
/// dead address space reads nothing).
fn layout_of(pid: u32, mem: &File) -> Option<Layout> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, numbered from 3 (state).
    let w: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| w.get(n - 3)?.parse::<u64>().ok();
    let mut out = [0u64; 10];
    for (o, n) in out.iter_mut().zip([26, 27, 28, 45, 46, 47, 48, 49, 50, 51]) {
        *o = field(n)?;
    }
    let auxv = std::fs::read(format!("/proc/{pid}/auxv")).ok()?;
    let at = auxv.chunks_exact(16).find_map(|e| {
        let k = u64::from_ne_bytes(e[..8].try_into().unwrap());
        (k == AT_RANDOM).then(|| u64::from_ne_bytes(e[8..].try_into().unwrap()))
    })?;
    let mut random = [0u8; 16];
    let off = i64::try_from(at).ok()? as u64;
    match mem.read_at(&mut random, off) {
        Ok(16) => {}
        _ => return None,
    }
    Some(Layout { stat: out, random })
}

/// Raise the daemon's open-file limit to its hard limit, once: every pinned
/// address space is an open descriptor (one per producer process).
fn raise_fd_limit() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) {
            if soft < hard {
                let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
            }
        }
    });
}

/// The name (`comm`) of thread `tid`, or `<...>` as the kernel's trace
/// shows a task it does not know.
pub fn comm_of(tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "<...>".into())
}

/// `/proc/TID/stat` of one thread, kept open, for the CPU it runs on.
pub struct TaskStat(std::fs::File);

impl TaskStat {
    /// Open thread `tid`'s stat file; None if the thread is gone.
    pub fn open(tid: u32) -> Option<TaskStat> {
        std::fs::File::open(format!("/proc/{tid}/stat"))
            .ok()
            .map(TaskStat)
    }

    /// The CPU the thread last ran on (`processor`, field 39): for a caller
    /// blocked in a request, the CPU it made the request on, which is where
    /// the kernel records what the request writes. None if the thread is gone.
    pub fn cpu(&self) -> Option<u32> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 1024];
        let n = self.0.read_at(&mut buf, 0).ok()?;
        parse_stat_cpu(&buf[..n])
    }
}

/// The `processor` field of a `/proc/TID/stat` line. The name in
/// parentheses may hold any byte, so fields are counted from its last `)`.
pub(super) fn parse_stat_cpu(stat: &[u8]) -> Option<u32> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
    // Field 3 (state) is the first after the name; 39 is `processor`.
    rest.split_ascii_whitespace().nth(39 - 3)?.parse().ok()
}

/// The CPU thread `tid` last ran on ([`TaskStat::cpu`]).
pub fn cpu_of(tid: u32) -> Option<u32> {
    TaskStat::open(tid)?.cpu()
}

/// The thread group of thread `tid`.
pub fn tgid_of(tid: u32) -> Option<u32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))?
        .trim()
        .parse()
        .ok()
}

/// Whether processes `a` and `b` share one address space (`kcmp`
/// `KCMP_VM`): a thread, or a `vfork`/`CLONE_VM` child. None if unknown.
fn same_vm(a: u32, b: u32) -> Option<bool> {
    const KCMP_VM: libc::c_long = 1;
    // SAFETY: kcmp takes integers only.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            a as libc::c_long,
            b as libc::c_long,
            KCMP_VM,
            0,
            0,
        )
    };
    (rc >= 0).then_some(rc == 0)
}

fn open_mem(pid: u32) -> SysResult<File> {
    raise_fd_limit();
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EMFILE) | Some(libc::ENFILE) => Errno::ENOMEM,
            _ => denied(e),
        })
}

/// Why the kernel may refuse this daemon other processes' memory wholesale:
/// Yama's `ptrace_scope` (`/proc/sys/kernel/yama/ptrace_scope`) at 1 or
/// more for a daemon without root (root keeps CAP_SYS_PTRACE except at 3).
/// None without Yama, or where it does not restrict us.
pub fn ptrace_restriction() -> Option<String> {
    let scope: u32 = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let root = nix::unistd::geteuid().is_root();
    let what = match scope {
        0 => return None,
        1 | 2 if root => return None,
        1 => "only processes that allow it with prctl(PR_SET_PTRACER, <daemon pid or PR_SET_PTRACER_ANY>)",
        2 => "no process (only CAP_SYS_PTRACE may attach)",
        _ => "no process at all (attaching is disabled)",
    };
    Some(format!(
        "Yama ptrace_scope is {scope}: the kernel lets this daemon reach the memory of {what}; \
         for the others, ioctls that carry pointers (user_events DIAG_IOCSREG/DIAG_IOCSDEL in \
         both ABIs, usbmon's MON_IOCX_GET, MON_IOCX_GETX and MON_IOCX_MFETCH) fail with EPERM, \
         while read, write and mmap work (see docs/rootless.md)"
    ))
}

/// The byte holding bit `bit` of the `size`-byte native-endian word at
/// `addr`, and the mask of the bit in it.
pub(super) fn bit_byte(addr: u64, bit: u8, size: u8) -> (u64, u8) {
    let idx = (bit / 8) as u64;
    let byte = if cfg!(target_endian = "little") {
        addr + idx
    } else {
        addr + size as u64 - 1 - idx
    };
    (byte, 1 << (bit % 8))
}

/// A non-canonical address, the highest page `pread` can name: no mapping
/// can be there.
const NEVER_MAPPED: u64 = i64::MAX as u64 & !0xfff;

/// A process's address space, pinned (the kernel's `mm` reference) through
/// an open `/proc/<pid>/mem`. Accesses after the process exits or execs
/// write nothing: they report [`MmError::Gone`].
pub struct Mm {
    file: File,
    tgid: u32,
    layout: Layout,
    stuck: AtomicBool,
}

impl std::fmt::Debug for Mm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mm(tgid {})", self.tgid)
    }
}

impl Mm {
    /// Pin the address space of thread `tid`, the caller of a request that
    /// is still waiting for its answer (so neither exit nor exec can happen
    /// meanwhile: exec waits for every other thread to leave the kernel).
    pub fn pin(tid: u32) -> SysResult<Arc<Mm>> {
        let file = open_mem(tid)?;
        let tgid = tgid_of(tid).ok_or(Errno::EFAULT)?;
        let layout = layout_of(tid, &file).ok_or(Errno::EFAULT)?;
        Ok(Arc::new(Mm {
            file,
            tgid,
            layout,
            stuck: AtomicBool::new(false),
        }))
    }

    /// The address space of process `child`, just forked from the process
    /// this pins, while it is still the copy fork made. None if the child
    /// shares this address space (`vfork`, `CLONE_VM`), is gone, or has
    /// exec'd already (its layout differs, and always its `AT_RANDOM`
    /// bytes, with address space randomization off too). The identity is
    /// read after the descriptor is opened, so a descriptor opened after
    /// an exec is always caught.
    pub fn pin_child(&self, child: u32) -> Option<Arc<Mm>> {
        if same_vm(self.tgid, child) != Some(false) {
            return None;
        }
        let file = open_mem(child).ok()?;
        let layout = layout_of(child, &file)?;
        (layout == self.layout).then(|| {
            Arc::new(Mm {
                file,
                tgid: child,
                layout,
                stuck: AtomicBool::new(false),
            })
        })
    }

    /// Whether `other` pins the same address space, given that both belong
    /// to one process and both are alive (a process has one live address
    /// space; an exec'd one is dead, and its layout differs anyway).
    pub fn same_as(&self, other: &Mm) -> bool {
        self.tgid == other.tgid && self.layout == other.layout && self.alive() && other.alive()
    }

    /// The thread group (process id) it belonged to when pinned.
    pub fn tgid(&self) -> u32 {
        self.tgid
    }

    /// Whether the address space still exists (its process has neither
    /// exited nor exec'd). A non-canonical address is never mapped (so nothing is
    /// faulted in): a live address space answers EIO there, a dead one
    /// reads nothing.
    pub fn alive(&self) -> bool {
        let mut b = [0u8; 1];
        !matches!(self.file.read_at(&mut b, NEVER_MAPPED), Ok(0))
    }

    /// Whether an access never finished (see [`MmError::Stuck`]).
    pub fn is_stuck(&self) -> bool {
        self.stuck.load(Ordering::SeqCst)
    }

    /// Mark it stuck: an access did not finish in time.
    pub fn set_stuck(&self) {
        if !self.stuck.swap(true, Ordering::SeqCst) {
            warn!(
                pid = self.tgid,
                "a write into process {}'s memory did not finish in time (a page that \
                 a FUSE daemon or a userfaultfd handler does not serve); its enable \
                 bits are dropped",
                self.tgid
            );
        }
    }

    /// Set or clear bit `bit` of the `size`-byte native-endian word at
    /// `addr` (read-modify-write of the byte that holds it).
    pub fn set_bit(&self, addr: u64, bit: u8, size: u8, on: bool) -> Result<(), MmError> {
        if self.is_stuck() {
            return Err(MmError::Stuck);
        }
        let (at, mask) = bit_byte(addr, bit, size);
        // The check sees the pid's current address space; if that is no
        // longer this one, the access below reads nothing (Gone) anyway.
        if check_range(self.tgid, at, 1, Access::Write).is_err() {
            return Err(if self.alive() {
                MmError::Fault
            } else {
                MmError::Gone
            });
        }
        let mut b = [0u8; 1];
        let off = i64::try_from(at).map_err(|_| MmError::Fault)? as u64;
        match self.file.read_at(&mut b, off) {
            Ok(0) => return Err(MmError::Gone),
            Ok(_) => {}
            Err(_) => return Err(MmError::Fault),
        }
        let nb = if on { b[0] | mask } else { b[0] & !mask };
        if nb == b[0] {
            return Ok(());
        }
        match self.file.write_at(&[nb], off) {
            Ok(0) => Err(MmError::Gone),
            Ok(_) => Ok(()),
            Err(_) => Err(MmError::Fault),
        }
    }
}
