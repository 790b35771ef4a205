//! Which mappings are safe to touch: a target range's mappings looked up
//! (`PROCMAP_QUERY`, the ioctl of `fs/proc/task_mmu.c`, or `/proc/<pid>/maps`
//! before Linux 6.11), and an unmapped or FUSE-backed range refused.

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;

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
pub(super) struct Vma {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) readable: bool,
    pub(super) writable: bool,
    /// Device of the mapped file (0:0 and inode 0 for anonymous memory).
    pub(super) dev: (u32, u32),
    pub(super) inode: u64,
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
pub(super) const PROCMAP_QUERY: u64 = 0xC068_6611;
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
pub(super) fn parse_maps_line(l: &str) -> Option<Vma> {
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
pub(super) fn maps_vmas(pid: u32, addr: u64, end: u64) -> SysResult<Vec<Vma>> {
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
pub(super) fn is_fuse_fstype(t: &str) -> bool {
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
/// check and the access; [`run_bounded`](super::run_bounded) is the backstop for accesses to
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

/// The errno for a failed open of a process's `/proc` file: EPERM where the
/// kernel refused us the access (EACCES or EPERM: another user's process, a
/// non-dumpable one, Yama), EFAULT otherwise (the process is gone).
pub(super) fn denied(e: std::io::Error) -> Errno {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => Errno::EPERM,
        _ => Errno::EFAULT,
    }
}
