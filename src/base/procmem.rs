//! Other processes' memory: the one place monfs reads or writes it.
//!
//! Two kinds of target, two rules:
//!
//! * **The caller of a request** ([`ProcessMemory`]): an ioctl argument that
//!   holds pointers. The calling thread is blocked in the request until it is
//!   answered (the kernel waits uninterruptibly once the daemon has read the
//!   request), so its pid cannot be reused or its image replaced meanwhile,
//!   and `process_vm_readv`/`process_vm_writev` on that pid reach exactly it.
//! * **A producer that registered an enable bit** ([`Mm`]): it runs freely
//!   and may fork, exec or exit at any time. Registration pins its address
//!   space (`/proc/<tid>/mem` opened while the registering thread is blocked
//!   in the ioctl, as the kernel takes an `mm` reference). Writes go through
//!   that descriptor: after an exec or exit they write nothing (the old
//!   address space is gone) and are never redirected to a new image or to a
//!   process that reused the pid.
//!
//! Neither may wedge the daemon. A page backed by a FUSE file (this mount or
//! another, perhaps stalled one) can only be faulted in by that file
//! system's daemon, and a userfaultfd page by its handler. So before each
//! access the target range's mappings are checked ([`check_range`], one
//! `PROCMAP_QUERY` ioctl per mapping on Linux 6.11+, `/proc/<pid>/maps`
//! before): unmapped, or backed by a FUSE file system, is EFAULT, as the
//! kernel answers a bad address. Where the kernel refuses monfs the access
//! itself (a daemon without root reaching a process of another user, a
//! non-dumpable one, or any process it is not the ancestor of under Yama's
//! `ptrace_scope` 1 or more: see [`ptrace_restriction`]), the answer is
//! EPERM (`denied`). Writes to registered producers also run on
//! a small worker pool with a deadline ([`run_bounded`]); a worker that is
//! still stuck then is abandoned and its address space marked stuck, so no
//! request thread ever waits on a remote page without bound.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, IoSlice, IoSliceMut};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::resource::{getrlimit, setrlimit, Resource};
use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;
use tracing::warn;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;

// ---------------------------------------------------------------------------
// Watching accesses.

thread_local! {
    /// Where this thread shows the start of a remote access under way.
    static WATCH: std::cell::RefCell<Option<Arc<AtomicU64>>> = const { std::cell::RefCell::new(None) };
}

/// Milliseconds on a process-wide monotonic clock (never 0).
pub fn now_ms() -> u64 {
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Show this thread's remote accesses in `flag`: [`now_ms`] at the start of
/// each access under way, 0 otherwise. A watchdog reading it can answer a
/// request whose caller's page never comes (see `fuse::watchdog`).
pub fn watch_this_thread(flag: Arc<AtomicU64>) {
    WATCH.with(|w| *w.borrow_mut() = Some(flag));
}

/// Marks a remote access on a watched thread for as long as it lives.
struct AccessGuard(Option<Arc<AtomicU64>>);

impl AccessGuard {
    fn enter() -> AccessGuard {
        let flag = WATCH.with(|w| w.borrow().clone());
        if let Some(f) = &flag {
            f.store(now_ms(), Ordering::SeqCst);
        }
        AccessGuard(flag)
    }
}

impl Drop for AccessGuard {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            f.store(0, Ordering::SeqCst);
        }
    }
}

// ---------------------------------------------------------------------------
// The caller's memory.

/// Read `len` bytes at `addr` in process `pid`, unchecked. EFAULT if any byte
/// is not readable.
fn raw_read(pid: u32, addr: u64, len: usize) -> SysResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut buf = vec![0u8; len];
    let _watched = AccessGuard::enter();
    let remote = [RemoteIoVec {
        base: addr as usize,
        len,
    }];
    match process_vm_readv(pid_of(pid), &mut [IoSliceMut::new(&mut buf)], &remote) {
        Ok(n) if n == len => Ok(buf),
        Err(nix::errno::Errno::EPERM) => Err(Errno::EPERM),
        _ => Err(Errno::EFAULT),
    }
}

fn pid_of(pid: u32) -> Pid {
    Pid::from_raw(pid as i32)
}

/// Write `data` at `addr` in process `pid`, unchecked. EFAULT if not all of
/// it could be written.
fn raw_write(pid: u32, addr: u64, data: &[u8]) -> SysResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let _watched = AccessGuard::enter();
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: data.len(),
    }];
    match process_vm_writev(pid_of(pid), &[IoSlice::new(data)], &remote) {
        Ok(n) if n == data.len() => Ok(()),
        Err(nix::errno::Errno::EPERM) => Err(Errno::EPERM),
        _ => Err(Errno::EFAULT),
    }
}

/// Read `len` bytes at `addr` in process `pid`, the caller of a request that
/// is still waiting for its answer. EFAULT if any byte is unmapped,
/// unreadable, or backed by a file that only a FUSE daemon can fault in.
pub fn read(pid: u32, addr: u64, len: usize) -> SysResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    check_range(pid, addr, len as u64, Access::Read)?;
    raw_read(pid, addr, len)
}

/// Write `data` at `addr` in process `pid`, the caller of a request that is
/// still waiting for its answer (see [`read`]).
pub fn write(pid: u32, addr: u64, data: &[u8]) -> SysResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    check_range(pid, addr, data.len() as u64, Access::Write)?;
    raw_write(pid, addr, data)
}

/// The memory of a request's caller (the thread the kernel named in the
/// request, which is blocked in it).
pub struct ProcessMemory(pub u32);

impl crate::base::vfs::CallerMemory for ProcessMemory {
    fn read(&self, addr: u64, len: usize) -> SysResult<Vec<u8>> {
        read(self.0, addr, len)
    }
    fn write(&self, addr: u64, data: &[u8]) -> SysResult<()> {
        write(self.0, addr, data)
    }
}

// ---------------------------------------------------------------------------
// Which mappings are safe to touch.

/// What an access does to the target's memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reads it.
    Read,
    /// Writes it (the mapping must be writable, as for the kernel's
    /// `FOLL_WRITE` without `FOLL_FORCE`).
    Write,
}

/// One mapping, as `PROCMAP_QUERY` or `/proc/<pid>/maps` describes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Vma {
    start: u64,
    end: u64,
    readable: bool,
    writable: bool,
    /// Device of the mapped file (0:0 and inode 0 for anonymous memory).
    dev: (u32, u32),
    inode: u64,
}

/// `struct procmap_query` (include/uapi/linux/fs.h, Linux 6.11).
#[repr(C)]
#[derive(Default)]
struct ProcmapQuery {
    size: u64,
    query_flags: u64,
    query_addr: u64,
    vma_start: u64,
    vma_end: u64,
    vma_flags: u64,
    vma_page_size: u64,
    vma_offset: u64,
    inode: u64,
    dev_major: u32,
    dev_minor: u32,
    vma_name_size: u32,
    build_id_size: u32,
    vma_name_addr: u64,
    build_id_addr: u64,
}

/// `PROCMAP_QUERY`: `_IOWR('f', 17, struct procmap_query)`.
const PROCMAP_QUERY: u64 = 0xC068_6611;
nix::ioctl_readwrite_bad!(procmap_query, PROCMAP_QUERY, ProcmapQuery);
const PROCMAP_QUERY_VMA_READABLE: u64 = 0x01;
const PROCMAP_QUERY_VMA_WRITABLE: u64 = 0x02;

/// Open `/proc/<pid>/maps` descriptors, kept so that a check costs one
/// ioctl (0.5 µs against 3 µs with an open and a close), with when each was
/// last used. A descriptor stays tied to the task it was opened for: once
/// that task is gone its queries fail, and it is opened again for the pid's
/// new owner. [`expire_idle`] closes those unused for a second.
type MapsCache = HashMap<u32, (Arc<File>, Instant)>;
static MAPS: OnceLock<Mutex<MapsCache>> = OnceLock::new();
/// Cached `/proc/<pid>/maps` descriptors at most.
const MAPS_CACHE: usize = 64;
/// How long an unused descriptor is kept.
const MAPS_IDLE: Duration = Duration::from_secs(1);
/// Whether the kernel has `PROCMAP_QUERY` (false after the first ENOTTY).
static HAVE_QUERY: AtomicBool = AtomicBool::new(true);

fn maps_file(pid: u32, fresh: bool) -> SysResult<Arc<File>> {
    let cache = MAPS.get_or_init(Default::default);
    if !fresh {
        if let Some((f, used)) = cache.lock_ok().get_mut(&pid) {
            *used = Instant::now();
            return Ok(f.clone());
        }
    }
    let f = Arc::new(File::open(format!("/proc/{pid}/maps")).map_err(denied)?);
    let mut c = cache.lock_ok();
    if c.len() >= MAPS_CACHE {
        c.clear();
    }
    c.insert(pid, (f.clone(), Instant::now()));
    Ok(f)
}

/// Close the cached descriptors that were not used for a while (called
/// periodically, so that callers that are gone leave no descriptor behind).
pub fn expire_idle() {
    if let Some(cache) = MAPS.get() {
        cache
            .lock_ok()
            .retain(|_, (_, used)| used.elapsed() < MAPS_IDLE);
    }
}

/// The mapping of `pid` that covers `addr`, by `PROCMAP_QUERY`. `Ok(None)`
/// when nothing covers it; `Err(ENOTTY)` when the kernel lacks the ioctl.
fn query_vma(pid: u32, addr: u64) -> SysResult<Option<Vma>> {
    for fresh in [false, true] {
        let f = maps_file(pid, fresh)?;
        let mut q = ProcmapQuery {
            size: std::mem::size_of::<ProcmapQuery>() as u64,
            query_addr: addr,
            ..Default::default()
        };
        // SAFETY: the ioctl writes within `q`, whose size it is told.
        let rc = unsafe { procmap_query(f.as_raw_fd(), &mut q) };
        if rc.is_ok() {
            return Ok(Some(Vma {
                start: q.vma_start,
                end: q.vma_end,
                readable: q.vma_flags & PROCMAP_QUERY_VMA_READABLE != 0,
                writable: q.vma_flags & PROCMAP_QUERY_VMA_WRITABLE != 0,
                dev: (q.dev_major, q.dev_minor),
                inode: q.inode,
            }));
        }
        match rc {
            Err(nix::errno::Errno::ENOENT) => return Ok(None),
            Err(nix::errno::Errno::ENOTTY | nix::errno::Errno::EINVAL) => {
                return Err(Errno::ENOTTY)
            }
            // ESRCH and the like: the task behind a cached descriptor is
            // gone; try once with a fresh one.
            _ => continue,
        }
    }
    Err(Errno::EFAULT)
}

/// Parse one `/proc/<pid>/maps` line.
fn parse_maps_line(l: &str) -> Option<Vma> {
    let mut w = l.split_whitespace();
    let (range, perms, _off, dev, ino) = (w.next()?, w.next()?, w.next()?, w.next()?, w.next()?);
    let (s, e) = range.split_once('-')?;
    let (ma, mi) = dev.split_once(':')?;
    Some(Vma {
        start: u64::from_str_radix(s, 16).ok()?,
        end: u64::from_str_radix(e, 16).ok()?,
        readable: perms.starts_with('r'),
        writable: perms.as_bytes().get(1) == Some(&b'w'),
        dev: (
            u32::from_str_radix(ma, 16).ok()?,
            u32::from_str_radix(mi, 16).ok()?,
        ),
        inode: ino.parse().ok()?,
    })
}

/// The mappings of `pid` that overlap `[addr, end)`, from `/proc/<pid>/maps`.
fn maps_vmas(pid: u32, addr: u64, end: u64) -> SysResult<Vec<Vma>> {
    let f = File::open(format!("/proc/{pid}/maps")).map_err(denied)?;
    let mut out = Vec::new();
    for l in BufReader::new(f).lines() {
        let l = l.map_err(|_| Errno::EFAULT)?;
        let Some(v) = parse_maps_line(&l) else {
            continue;
        };
        if v.start >= end {
            break;
        }
        if v.end > addr {
            out.push(v);
        }
    }
    Ok(out)
}

/// File systems whose pages only a user-space daemon can bring in.
fn is_fuse_fstype(t: &str) -> bool {
    t == "fuse" || t.starts_with("fuse.") || t == "fuseblk" || t == "virtiofs"
}

/// Devices (major 0, minor) known to be FUSE file systems or not, with when
/// that was learnt: a minor is reused once its file system is unmounted, so
/// answers are kept for a second.
/// Whether a device is FUSE, and when that was learnt.
type FsKinds = HashMap<(u32, u32), (bool, Instant)>;
static FS_KIND: OnceLock<Mutex<FsKinds>> = OnceLock::new();
const FS_KIND_TTL: Duration = Duration::from_secs(1);

/// Whether the file system on device `dev`, as mounted in `pid`'s mount
/// namespace, is FUSE. A device no mount shows (the kernel's internal
/// mounts: memfd, SysV shm, shared anonymous memory) is not.
fn dev_is_fuse(pid: u32, dev: (u32, u32)) -> bool {
    if dev.0 != 0 {
        // Block devices; FUSE and other virtual file systems have major 0.
        return false;
    }
    let cache = FS_KIND.get_or_init(Default::default);
    if let Some((fuse, at)) = cache.lock_ok().get(&dev) {
        if at.elapsed() < FS_KIND_TTL {
            return *fuse;
        }
    }
    let want = format!("{}:{}", dev.0, dev.1);
    let fuse = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split(' ').nth(2) == Some(want.as_str()))
        .any(|l| {
            l.split_once(" - ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .is_some_and(is_fuse_fstype)
        });
    let mut c = cache.lock_ok();
    if c.len() > 1024 {
        c.clear();
    }
    c.insert(dev, (fuse, Instant::now()));
    fuse
}

/// Whether `[addr, addr + len)` of process `pid` is mapped, allows `access`,
/// and is backed by nothing that only a user-space daemon can fault in (a
/// FUSE file). EFAULT otherwise, as the kernel answers a bad address.
///
/// Races: another thread of the target can remap the range between this
/// check and the access; [`run_bounded`] is the backstop for accesses to
/// processes that run freely. Userfaultfd ranges are not visible here.
pub fn check_range(pid: u32, addr: u64, len: u64, access: Access) -> SysResult<()> {
    if len == 0 {
        return Ok(());
    }
    let end = addr.checked_add(len).ok_or(Errno::EFAULT)?;
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let ok = |v: &Vma| {
        let allowed = match access {
            Access::Read => v.readable,
            Access::Write => v.writable,
        };
        allowed && !(v.inode != 0 && dev_is_fuse(pid, v.dev))
    };
    if HAVE_QUERY.load(Ordering::Relaxed) {
        let mut at = addr;
        loop {
            match query_vma(pid, at) {
                Ok(Some(v)) if v.start <= at && ok(&v) => {
                    if v.end >= end {
                        return Ok(());
                    }
                    at = v.end;
                }
                Ok(_) => return Err(Errno::EFAULT),
                Err(e) if e == Errno::ENOTTY => {
                    HAVE_QUERY.store(false, Ordering::Relaxed);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
    }
    let mut at = addr;
    for v in maps_vmas(pid, addr, end)? {
        if v.start > at || !ok(&v) {
            return Err(Errno::EFAULT);
        }
        at = v.end;
        if at >= end {
            return Ok(());
        }
    }
    Err(Errno::EFAULT)
}

// ---------------------------------------------------------------------------
// Pinned address spaces.

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

/// An address space's layout, from `/proc/<pid>/stat`: start_code,
/// end_code, start_stack, start_data, end_data, start_brk, arg_start,
/// arg_end, env_start, env_end. fork() copies it; exec() makes a new one
/// (with address space randomization, different with near certainty).
type Layout = [u64; 10];

fn layout_of(pid: u32) -> Option<Layout> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, numbered from 3 (state).
    let w: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| w.get(n - 3)?.parse::<u64>().ok();
    let mut out = [0u64; 10];
    for (o, n) in out.iter_mut().zip([26, 27, 28, 45, 46, 47, 48, 49, 50, 51]) {
        *o = field(n)?;
    }
    Some(out)
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
fn parse_stat_cpu(stat: &[u8]) -> Option<u32> {
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

/// The errno for a failed open of a process's `/proc` file: EPERM where the
/// kernel refused us the access (EACCES or EPERM: another user's process, a
/// non-dumpable one, Yama), EFAULT otherwise (the process is gone).
fn denied(e: std::io::Error) -> Errno {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Errno::EPERM,
        _ => Errno::EFAULT,
    }
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
fn bit_byte(addr: u64, bit: u8, size: u8) -> (u64, u8) {
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
        let layout = layout_of(tid).ok_or(Errno::EFAULT)?;
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
    /// exec'd already (its layout differs). The layout is read after the
    /// descriptor is opened, so a descriptor opened after an exec is
    /// always caught.
    pub fn pin_child(&self, child: u32) -> Option<Arc<Mm>> {
        if same_vm(self.tgid, child) != Some(false) {
            return None;
        }
        let file = open_mem(child).ok()?;
        let layout = layout_of(child)?;
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

// ---------------------------------------------------------------------------
// Bounded execution.

/// How long an access to a producer's memory may take before it is
/// abandoned (and the caller told EFAULT).
pub const DEADLINE: Duration = Duration::from_millis(500);
/// Workers at most; stuck ones count until they come back.
const MAX_WORKERS: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    tx: crossbeam_channel::Sender<Job>,
    rx: crossbeam_channel::Receiver<Job>,
    /// Workers waiting for a job and not promised to one.
    idle: AtomicUsize,
    total: AtomicUsize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

impl Pool {
    /// Promise a worker to one job: an idle one, or a new one. False when
    /// every worker is stuck.
    fn reserve(&self) -> bool {
        loop {
            let i = self.idle.load(Ordering::SeqCst);
            if i == 0 {
                break;
            }
            if self
                .idle
                .compare_exchange(i, i - 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return true;
            }
        }
        if self.total.fetch_add(1, Ordering::SeqCst) >= MAX_WORKERS {
            self.total.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let rx = self.rx.clone();
        let spawned = std::thread::Builder::new()
            .name("procmem".into())
            .spawn(move || {
                let pool = POOL.get().expect("pool");
                while let Ok(job) = rx.recv() {
                    job();
                    pool.idle.fetch_add(1, Ordering::SeqCst);
                }
            });
        if spawned.is_err() {
            self.total.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }
}

/// Why [`run_bounded`] has no result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfinished {
    /// The job was still running at the deadline; its worker is abandoned
    /// to finish whenever it can.
    TimedOut,
    /// Every worker is stuck: the job did not run.
    NoWorker,
}

/// Run `job` on a worker thread and wait for it until `timeout` has passed.
pub fn run_bounded<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
    timeout: Duration,
) -> Result<T, Unfinished> {
    let pool = POOL.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        Pool {
            tx,
            rx,
            idle: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
        }
    });
    if !pool.reserve() {
        warn!("every procmem worker is stuck on a page nobody serves; access refused");
        return Err(Unfinished::NoWorker);
    }
    let (rtx, rrx) = crossbeam_channel::bounded(1);
    let _ = pool.tx.send(Box::new(move || {
        let _ = rtx.send(job());
    }));
    rrx.recv_timeout(timeout).map_err(|_| Unfinished::TimedOut)
}

// ---------------------------------------------------------------------------
// /proc lookups about open files.

/// Whether process `pid` has a shared mapping of the file with device `dev`
/// and inode `ino` (read from `/proc/<pid>/maps`).
pub fn has_shared_mapping(pid: u32, dev: u64, ino: u64) -> bool {
    has_mapping_where(pid, dev, ino, true)
}

/// Whether process `pid` has any mapping, shared or private, of the file
/// with device `dev` and inode `ino`.
pub fn has_mapping(pid: u32, dev: u64, ino: u64) -> bool {
    has_mapping_where(pid, dev, ino, false)
}

fn has_mapping_where(pid: u32, dev: u64, ino: u64, shared_only: bool) -> bool {
    // Inode 0 names no file: anonymous mappings show it.
    if ino == 0 {
        return false;
    }
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let want_dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    maps.lines().any(|l| {
        let mut w = l.split_whitespace();
        let (_range, perms, _off, d, i) = (w.next(), w.next(), w.next(), w.next(), w.next());
        perms.is_some_and(|p| !shared_only || p.ends_with('s'))
            && d == Some(want_dev.as_str())
            && i.and_then(|i| i.parse::<u64>().ok()) == Some(ino)
    })
}

/// Whether any process has a shared mapping of the file with device `dev`
/// and inode `ino` (every `/proc/<pid>/maps` is read: for rare questions,
/// such as whether a resize of a mapped trace buffer must be refused).
pub fn any_shared_mapping(dev: u64, ino: u64) -> bool {
    any_process(|pid| has_shared_mapping(pid, dev, ino))
}

/// Whether any process has any mapping, shared or private, of the file
/// with device `dev` and inode `ino` (every `/proc/<pid>/maps` is read).
pub fn any_mapping(dev: u64, ino: u64) -> bool {
    any_process(|pid| has_mapping(pid, dev, ino))
}

fn any_process(f: impl Fn(u32) -> bool) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|d| {
        d.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(&f)
    })
}

/// Where [`fd_nonblock`] found a file last time: the process, the
/// descriptor and the mounts of the device, so that the next question reads
/// one `fdinfo` file instead of the process's mount table and every
/// descriptor (a blocked `MON_IOCX_MFETCH` of tcpdump asks on every batch
/// that finds the ring empty).
#[derive(Clone, Debug, Default)]
pub struct FdHint {
    pid: u32,
    fd: std::ffi::OsString,
    mnt_ids: Vec<String>,
}

/// The `O_NONBLOCK` of the descriptor whose `fdinfo` text is `info`, if it
/// is the file `ino` on one of `mnt_ids`.
fn fdinfo_nonblock(info: &str, ino: u64, mnt_ids: &[String]) -> Option<bool> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim())
    };
    if field("ino:").and_then(|v| v.parse::<u64>().ok()) != Some(ino)
        || !field("mnt_id:").is_some_and(|m| mnt_ids.iter().any(|id| id == m))
    {
        return None;
    }
    let flags = i32::from_str_radix(field("flags:")?, 8).ok()?;
    Some(flags & libc::O_NONBLOCK != 0)
}

/// The current `O_NONBLOCK` of the open file of device `dev`, inode `ino` in
/// process `pid`: FUSE tells a filesystem the file flags on every read but not
/// on an ioctl, and `fcntl(F_SETFL)` may have changed them since open. Read
/// from `/proc/<pid>/fdinfo` (its `ino:` field needs Linux 5.14) with the
/// mounts of `dev` from `/proc/<pid>/mountinfo`. None if no descriptor of the
/// process refers to the file. `hint` remembers where it was found: while
/// that descriptor still refers to the file, only its `fdinfo` is read.
pub fn fd_nonblock(pid: u32, dev: u64, ino: u64, hint: &mut Option<FdHint>) -> Option<bool> {
    if let Some(h) = hint.as_ref().filter(|h| h.pid == pid) {
        let mut path = std::path::PathBuf::from(format!("/proc/{pid}/fdinfo"));
        path.push(&h.fd);
        if let Some(nb) = std::fs::read_to_string(path)
            .ok()
            .and_then(|info| fdinfo_nonblock(&info, ino, &h.mnt_ids))
        {
            return Some(nb);
        }
    }
    let want_dev = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let mnt_ids: Vec<String> = mounts
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let id = w.next()?;
            (w.nth(1)? == want_dev).then(|| id.to_string())
        })
        .collect();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()? {
        let fd = fd.ok()?;
        let Ok(info) = std::fs::read_to_string(fd.path()) else {
            continue;
        };
        if let Some(nb) = fdinfo_nonblock(&info, ino, &mnt_ids) {
            *hint = Some(FdHint {
                pid,
                fd: fd.file_name(),
                mnt_ids,
            });
            return Some(nb);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_cpu_is_field_39_counted_past_the_name() {
        let tail = (4..=52)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        // Field 39 holds "39" here; names with spaces and `)` do not shift it.
        for name in ["cat", "a b) c", ")"] {
            let line = format!("123 ({name}) S {tail}\n");
            assert_eq!(parse_stat_cpu(line.as_bytes()), Some(39), "{line}");
        }
        assert_eq!(parse_stat_cpu(b"123 (x) S 1 2"), None);
        assert_eq!(parse_stat_cpu(b""), None);
    }

    #[test]
    fn cpu_of_this_thread_is_where_it_runs() {
        // Pinned, this thread's last CPU is the one it is pinned to.
        let mut set = nix::sched::CpuSet::new();
        let cpu = nix::sched::sched_getcpu().unwrap();
        set.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
        // SAFETY: gettid cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        assert_eq!(cpu_of(tid), Some(cpu as u32));
        assert_eq!(cpu_of(u32::MAX), None);
    }

    #[test]
    fn fd_nonblock_follows_fcntl() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let f = tempfile::tempfile_in("/dev/shm").unwrap();
        let md = f.metadata().unwrap();
        let (pid, dev, ino) = (std::process::id(), md.dev(), md.ino());
        let mut hint = None;
        assert_eq!(fd_nonblock(pid, dev, ino, &mut hint), Some(false));
        assert!(hint.is_some());
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        // Through the hint, and without it.
        assert_eq!(fd_nonblock(pid, dev, ino, &mut hint), Some(true));
        assert_eq!(fd_nonblock(pid, dev, ino, &mut None), Some(true));
        assert_eq!(fd_nonblock(pid, dev, ino + 1, &mut None), None);
        // A hint whose descriptor now refers to another file is not
        // believed: the file is looked for again.
        let g = tempfile::tempfile_in("/dev/shm").unwrap();
        let gi = g.metadata().unwrap().ino();
        let mut stale = hint.clone();
        assert_eq!(fd_nonblock(pid, dev, gi, &mut stale), Some(false));
        assert_ne!(stale.unwrap().fd, hint.unwrap().fd);
    }

    #[test]
    fn read_and_write_own_memory() {
        let pid = std::process::id();
        let mut target = [0u8; 16];
        write(pid, target.as_mut_ptr() as u64, b"hello").unwrap();
        // SAFETY: volatile read of our own buffer after the kernel wrote it.
        let got = unsafe { std::ptr::read_volatile(&target) };
        assert_eq!(&got[..5], b"hello");
        assert_eq!(read(pid, target.as_ptr() as u64, 5).unwrap(), b"hello");
        assert_eq!(read(pid, 0, 4).err(), Some(Errno::EFAULT));
        assert_eq!(read(pid, 8, 4).err(), Some(Errno::EFAULT));
        assert_eq!(write(pid, 8, b"x").err(), Some(Errno::EFAULT));
    }

    #[test]
    fn check_range_follows_mappings_and_protections() {
        let pid = std::process::id();
        let buf = vec![0u8; 3 * 4096];
        let at = buf.as_ptr() as u64;
        check_range(pid, at, buf.len() as u64, Access::Write).unwrap();
        // Code is readable, not writable.
        let code = check_range_follows_mappings_and_protections as *const () as u64;
        check_range(pid, code, 1, Access::Read).unwrap();
        assert_eq!(check_range(pid, code, 1, Access::Write), Err(Errno::EFAULT));
        assert_eq!(check_range(pid, 4096, 1, Access::Read), Err(Errno::EFAULT));
        assert_eq!(
            check_range(pid, u64::MAX - 1, 4, Access::Read),
            Err(Errno::EFAULT)
        );
        // The /proc/<pid>/maps fallback agrees with PROCMAP_QUERY.
        let v = maps_vmas(pid, at, at + 1).unwrap();
        assert!(v.len() == 1 && v[0].start <= at && v[0].end > at && v[0].writable);
    }

    #[test]
    fn maps_line_parse() {
        let v = parse_maps_line("7f00-7f10 r-xp 00000000 00:2a 1234   /x").unwrap();
        assert_eq!(
            (v.start, v.end, v.readable, v.writable),
            (0x7f00, 0x7f10, true, false)
        );
        assert_eq!((v.dev, v.inode), ((0, 0x2a), 1234));
        assert!(is_fuse_fstype("fuse.sshfs") && is_fuse_fstype("fuse") && !is_fuse_fstype("tmpfs"));
    }

    #[test]
    fn bit_positions() {
        assert_eq!(bit_byte(0x1000, 31, 4), (0x1003, 0x80));
        assert_eq!(bit_byte(0x1000, 0, 8), (0x1000, 1));
        assert_eq!(bit_byte(0x1000, 63, 8), (0x1007, 0x80));
    }

    #[test]
    fn pinned_mm_writes_and_sees_its_end() {
        let mut word = 0u32;
        let addr = &mut word as *mut u32 as u64;
        let mm = Mm::pin(std::process::id()).unwrap();
        assert!(mm.alive());
        mm.set_bit(addr, 5, 4, true).unwrap();
        // SAFETY: volatile read of our own word after the kernel wrote it.
        assert_eq!(unsafe { std::ptr::read_volatile(&word) }, 1 << 5);
        mm.set_bit(addr, 5, 4, false).unwrap();
        assert_eq!(unsafe { std::ptr::read_volatile(&word) }, 0);
        assert_eq!(mm.set_bit(8, 0, 4, true), Err(MmError::Fault));
        // A child that exits: its pinned address space is gone.
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let cm = Mm::pin(child.id()).unwrap();
        assert!(cm.alive());
        child.wait().unwrap();
        assert!(!cm.alive());
        assert_eq!(cm.set_bit(addr, 0, 4, true), Err(MmError::Gone));
    }

    #[test]
    fn bounded_runs_jobs_and_abandons_slow_ones() {
        assert_eq!(run_bounded(|| 1, Duration::from_secs(5)), Ok(1));
        let t = Instant::now();
        let slow = run_bounded(
            || std::thread::sleep(Duration::from_secs(2)),
            Duration::from_millis(300),
        );
        assert_eq!(slow, Err(Unfinished::TimedOut));
        assert!(t.elapsed() < Duration::from_secs(2));
        // Another worker serves the next job meanwhile.
        assert_eq!(run_bounded(|| 3, Duration::from_secs(5)), Ok(3));
    }
}
