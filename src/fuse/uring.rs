//! FUSE over io_uring (Linux 6.14+, with `fuse.enable_uring=Y`): requests
//! arrive in ring entries, one queue per possible CPU, instead of through
//! read(2) of /dev/fuse, and each reply is committed together with the fetch
//! of the next request. The kernel puts a request on the queue of the CPU
//! its caller runs on, and each queue's thread is pinned to that CPU, so a
//! round trip is two switches on one CPU instead of two cross-CPU wake-ups:
//! what bounds tcpdump's two ioctls per 32 events (docs/performance.md).
//!
//! Protocol (`include/uapi/linux/fuse.h`, `fs/fuse/dev_uring.c`, written
//! from their description): each entry is a 288-byte header buffer (the
//! in/out header at 0, the opcode's own header at 128, `struct
//! fuse_uring_ent_in_out` at 256) and a payload buffer of `max_write`
//! bytes, registered with `FUSE_IO_URING_CMD_REGISTER`; a request is the
//! completion of the entry's command, its reply is
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`. INTERRUPT and FORGET still come
//! through /dev/fuse, and notifications are still written there; the
//! request threads keep serving the device.
//!
//! An entry stays with its request until it is answered, parked requests
//! included, so a queue registers more entries whenever fewer than two are
//! left with the kernel. Only a queue's own threads submit to its ring (a
//! thread that exits cancels what it submitted): a reply from another
//! thread is queued and the queue's thread woken through an eventfd.

use std::cell::Cell;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::sync::RwLock;

use io_uring::{opcode, squeue::Entry128, types, IoUring};
use tracing::{error, warn};

use crate::base::sync::{LockExt, RwLockExt};

use super::proto::{self, InHeader};

/// `FUSE_OVER_IO_URING`, an INIT flag (of `flags2`).
pub(super) const INIT_FLAG: u64 = 1 << 41;
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;
/// Offsets in an entry's header buffer.
const HDR_OP: usize = 128;
const HDR_ENT: usize = 256;
const HDR_LEN: usize = 288;
/// A payload buffer: the kernel wants room for `max(8 KiB, max_write,
/// max_pages pages)`, which INIT sets to this (`state.rs` checks).
pub(super) const PAYLOAD_LEN: usize = 128 * 1024;
const FIRST_ENTRIES: usize = 4;
/// Entries per queue at most: each holds a request until it is answered, so
/// this many blocked requests per CPU; the next ones wait for one to end.
const MAX_ENTRIES: usize = 8192;
/// Payload buffers are mapped this many at a time (one mapping, reserved
/// but untouched until the kernel writes a request into it).
const SLAB: usize = 64;
/// The user_data of the eventfd read that wakes a queue's thread.
const WAKE: u64 = u64::MAX;

thread_local! {
    /// This thread's id (0 until asked for).
    static TID: Cell<i32> = const { Cell::new(0) };
}

/// The calling thread's id.
fn this_thread() -> i32 {
    TID.with(|t| {
        if t.get() == 0 {
            // SAFETY: gettid has no arguments and cannot fail.
            t.set(unsafe { libc::gettid() });
        }
        t.get()
    })
}

/// One ring entry's buffers: leaked, since the kernel holds their addresses
/// for as long as the connection lives.
struct Ent {
    hdr: *mut u8,
    payload: *mut u8,
}

// SAFETY: the buffers belong to the kernel while the entry is registered and
// to the one thread answering its request otherwise; see `Queue`.
unsafe impl Send for Ent {}
// SAFETY: as above.
unsafe impl Sync for Ent {}

/// One CPU's queue: its ring, its entries and the replies waiting to be
/// committed.
struct Queue {
    qid: u16,
    /// Unused payload buffers of the newest slab.
    slab: Mutex<Vec<*mut u8>>,
    /// [`MAX_ENTRIES`] was reached (and logged).
    full: std::sync::atomic::AtomicBool,
    uring: IoUring<Entry128>,
    dev: RawFd,
    /// Held by the thread that waits for completions.
    cq: Mutex<()>,
    /// Commits and registrations waiting for a queue thread to submit them.
    pending: Mutex<Vec<Entry128>>,
    ents: RwLock<Vec<Ent>>,
    /// Entries holding a request (not with the kernel).
    in_user: AtomicUsize,
    /// The thread serving the queue, the only one that submits and waits
    /// for completions (a replaced one that comes back leaves it alone).
    server: AtomicI32,
    wake: OwnedFd,
    wake_buf: *mut u64,
}

// SAFETY: `wake_buf` is only written by the kernel (the eventfd read) and
// never read; everything else is Sync.
unsafe impl Send for Queue {}
// SAFETY: as above.
unsafe impl Sync for Queue {}

/// The rings of a session.
pub(super) struct Rings {
    queues: Vec<Queue>,
    /// Requests being answered: unique -> (queue, entry).
    owner: Mutex<HashMap<u64, (u16, u32)>>,
}

/// The number of possible CPUs, which is the kernel's number of queues.
fn possible_cpus() -> usize {
    let s = std::fs::read_to_string("/sys/devices/system/cpu/possible").unwrap_or_default();
    let n: usize = s
        .trim()
        .split(',')
        .filter_map(|r| {
            let mut it = r.split('-').map(|x| x.parse::<usize>().ok());
            match (it.next().flatten(), it.next().flatten()) {
                (Some(a), Some(b)) if b >= a => Some(b - a + 1),
                (Some(_), None) => Some(1),
                _ => None,
            }
        })
        .sum();
    n.max(1)
}

/// The fuse module's switch for FUSE over io_uring (root may write `Y`).
pub const ENABLE_PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether the kernel lets FUSE use io_uring (`fuse.enable_uring`).
pub fn kernel_enabled() -> bool {
    std::fs::read_to_string(ENABLE_PARAM)
        .map(|s| s.trim() == "Y")
        .unwrap_or(false)
}

/// What this kernel, and this process, allow of FUSE over io_uring before
/// anything is mounted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Availability {
    /// No `enable_uring` parameter: a kernel before 6.14, or one built
    /// without `CONFIG_FUSE_IO_URING`.
    NotBuilt,
    /// The parameter is there but not `Y`.
    Off,
    /// The kernel allows it, but this process may not create an io_uring
    /// instance (`kernel.io_uring_disabled`, a seccomp filter): why.
    Denied(String),
    /// Worth trying: INIT and the rings' registration decide.
    Available,
}

/// [`Availability`] on this machine: [`ENABLE_PARAM`], then a small ring of
/// the kind the queues use, created and dropped.
pub fn availability() -> Availability {
    availability_from(std::fs::read_to_string(ENABLE_PARAM), || {
        IoUring::<Entry128>::builder().build(1).map(drop)
    })
}

/// [`availability`] from the parameter's text (or the error reading it) and
/// a probe that creates a ring.
pub(super) fn availability_from(
    param: std::io::Result<String>,
    probe: impl FnOnce() -> std::io::Result<()>,
) -> Availability {
    match param {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Availability::NotBuilt,
        Err(e) => return Availability::Denied(format!("cannot read {ENABLE_PARAM}: {e}")),
        Ok(s) if s.trim() != "Y" => return Availability::Off,
        Ok(_) => {}
    }
    match probe() {
        Ok(()) => Availability::Available,
        Err(e) => {
            let sysctl = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| v != "0")
                .map(|v| format!(", kernel.io_uring_disabled = {v}"))
                .unwrap_or_default();
            Availability::Denied(format!("io_uring_setup: {e}{sysctl}"))
        }
    }
}

fn cmd(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

impl Rings {
    /// Set up one ring per possible CPU (nothing is registered yet).
    pub(super) fn new(dev: RawFd) -> std::io::Result<Rings> {
        let mut queues = Vec::new();
        for qid in 0..possible_cpus() {
            let uring = IoUring::<Entry128>::builder().build(256)?;
            // SAFETY: eventfd returns a new descriptor or -1.
            let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
            if fd < 0 {
                return Err(std::io::Error::last_os_error());
            }
            let q = Queue {
                qid: qid as u16,
                slab: Mutex::new(Vec::new()),
                full: Default::default(),
                uring,
                dev,
                cq: Mutex::new(()),
                pending: Mutex::new(Vec::new()),
                ents: RwLock::new(Vec::new()),
                in_user: AtomicUsize::new(0),
                server: AtomicI32::new(0),
                // SAFETY: `fd` is ours alone.
                wake: unsafe { OwnedFd::from_raw_fd(fd) },
                wake_buf: Box::leak(Box::new(0u64)),
            };
            q.arm_wake();
            for _ in 0..FIRST_ENTRIES {
                q.add_entry();
            }
            queues.push(q);
        }
        Ok(Rings {
            queues,
            owner: Mutex::new(HashMap::new()),
        })
    }

    /// Answer `unique` through its ring entry, if it came through one.
    /// Returns false for a request that did not (or is answered already).
    pub(super) fn reply(&self, unique: u64, error: i32, parts: &[&[u8]]) -> bool {
        let Some((qid, idx)) = self.owner.lock_ok().remove(&unique) else {
            return false;
        };
        let q = &self.queues[qid as usize];
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let (error, body) = if body > PAYLOAD_LEN {
            error!(
                unique,
                body, "reply larger than the ring's payload buffer: EIO"
            );
            (-libc::EIO, 0)
        } else {
            (error, body)
        };
        {
            let ents = q.ents.read_ok();
            let e = &ents[idx as usize];
            // SAFETY: the entry holds this request, which only this call
            // answers (it was removed from `owner` above); the kernel does
            // not touch the buffers until the commit below is submitted.
            unsafe {
                let hdr = std::slice::from_raw_parts_mut(e.hdr, HDR_LEN);
                hdr[0..4].copy_from_slice(&((proto::OUT_HEADER_LEN + body) as u32).to_ne_bytes());
                hdr[4..8].copy_from_slice(&error.to_ne_bytes());
                hdr[8..16].copy_from_slice(&unique.to_ne_bytes());
                hdr[HDR_ENT + 16..HDR_ENT + 20].copy_from_slice(&(body as u32).to_ne_bytes());
                if error == 0 {
                    let mut at = e.payload;
                    for p in parts {
                        std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                        at = at.add(p.len());
                    }
                }
            }
        }
        let sqe = opcode::UringCmd80::new(types::Fd(q.dev), CMD_COMMIT_AND_FETCH)
            .cmd(cmd(unique, qid))
            .build()
            .user_data(idx as u64);
        q.in_user.fetch_sub(1, Ordering::SeqCst);
        q.pending.lock_ok().push(sqe);
        // The serving thread submits its own answers on its next turn; any
        // other wakes it, since it may be waiting for completions.
        if q.server.load(Ordering::SeqCst) != this_thread() {
            q.poke();
        }
        true
    }

    /// The number of queues (one per possible CPU).
    pub(super) fn len(&self) -> usize {
        self.queues.len()
    }

    /// Make this thread queue `qid`'s server: pinned to its CPU, and known
    /// as such to [`Rings::reply`]. A thread it replaces must no longer
    /// call [`Rings::wait`]: two threads taking turns to wait could each
    /// leave answers (and the wake-up read) to the other.
    pub(super) fn enter(&self, qid: u16) {
        let mut set = nix::sched::CpuSet::new();
        if set.set(qid as usize).is_ok() {
            // A CPU that is offline refuses it; the queue then still works.
            let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
        }
        self.queues[qid as usize]
            .server
            .store(this_thread(), Ordering::SeqCst);
    }

    /// Submit queue `qid`'s pending commands and, if `block`, wait for
    /// completions: the entries that now hold a request, with the command's
    /// result (negative: an errno, the entry is gone). Without `block` it
    /// returns what completed during the submission, which includes every
    /// registration the kernel refused (it refuses as it takes the command).
    pub(super) fn wait(&self, qid: u16, block: bool) -> std::io::Result<Vec<(u32, i32)>> {
        let q = &self.queues[qid as usize];
        let mut out = Vec::new();
        for (ud, res) in q.turn(block)? {
            if ud == WAKE {
                q.arm_wake();
            } else {
                out.push((ud as u32, res));
            }
        }
        Ok(out)
    }

    /// The request in entry `idx` of queue `qid`: its header, and in `body`
    /// what /dev/fuse would give after the header. The entry is the
    /// request's until [`Rings::reply`] answers it.
    pub(super) fn request(&self, qid: u16, idx: u32, body: &mut Vec<u8>) -> Option<InHeader> {
        let q = &self.queues[qid as usize];
        let in_user = q.in_user.fetch_add(1, Ordering::SeqCst) + 1;
        if q.ents.read_ok().len().saturating_sub(in_user) < 2 {
            q.add_entry();
        }
        let ents = q.ents.read_ok();
        let Some(e) = ents.get(idx as usize) else {
            warn!(idx, "completion for an unknown ring entry");
            return None;
        };
        // SAFETY: the kernel handed the entry over with this completion.
        let hdr = unsafe { std::slice::from_raw_parts(e.hdr, HDR_LEN) };
        let h = proto::parse_header(&hdr[..proto::IN_HEADER_LEN])?;
        let mut n = [0u8; 4];
        n.copy_from_slice(&hdr[HDR_ENT + 16..HDR_ENT + 20]);
        let payload = (u32::from_ne_bytes(n) as usize).min(PAYLOAD_LEN);
        // The opcode's own header is what the length leaves over.
        let op_len = (h.len as usize)
            .saturating_sub(proto::IN_HEADER_LEN + payload)
            .min(HDR_ENT - HDR_OP);
        body.clear();
        body.extend_from_slice(&hdr[HDR_OP..HDR_OP + op_len]);
        // SAFETY: as above; `payload` is bounded by the buffer's length.
        body.extend_from_slice(unsafe { std::slice::from_raw_parts(e.payload, payload) });
        self.owner.lock_ok().insert(h.unique, (qid, idx));
        Some(h)
    }
}

impl Queue {
    /// A payload buffer from the current slab, mapping a new slab when it
    /// is used up.
    fn payload_buffer(&self) -> Option<*mut u8> {
        let mut slab = self.slab.lock_ok();
        if slab.is_empty() {
            // SAFETY: a new private anonymous mapping; never unmapped, since
            // the kernel keeps the addresses for the connection's life.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    SLAB * PAYLOAD_LEN,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                    -1,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                warn!(
                    qid = self.qid,
                    "no memory for more FUSE ring entries: {}",
                    std::io::Error::last_os_error()
                );
                return None;
            }
            // Handed out from the front.
            slab.extend(
                (0..SLAB)
                    .rev()
                    .map(|i| (p as *mut u8).wrapping_add(i * PAYLOAD_LEN)),
            );
        }
        slab.pop()
    }

    /// Register one more entry (submitted by the queue's thread).
    fn add_entry(&self) {
        let mut ents = self.ents.write_ok();
        if ents.len() >= MAX_ENTRIES {
            if !self.full.swap(true, Ordering::SeqCst) {
                warn!(
                    qid = self.qid,
                    "{MAX_ENTRIES} requests from CPU {} are blocked at once; further ones \
                     from that CPU wait until one of them ends",
                    self.qid
                );
            }
            return;
        }
        let Some(payload) = self.payload_buffer() else {
            return;
        };
        let hdr = Box::leak(vec![0u8; HDR_LEN].into_boxed_slice()).as_mut_ptr();
        let iov = Box::leak(Box::new([
            libc::iovec {
                iov_base: hdr as *mut libc::c_void,
                iov_len: HDR_LEN,
            },
            libc::iovec {
                iov_base: payload as *mut libc::c_void,
                iov_len: PAYLOAD_LEN,
            },
        ]));
        let idx = ents.len() as u64;
        ents.push(Ent { hdr, payload });
        let sqe = opcode::UringCmd80::new(types::Fd(self.dev), CMD_REGISTER)
            .cmd(cmd(0, self.qid))
            .addr(Some(iov as *mut _ as u64))
            .build()
            .user_data(idx);
        // The command takes the iovec count in `len` (offset 24), which the
        // builder does not set.
        // SAFETY: Entry128 is the plain 128-byte SQE.
        let mut raw: [u8; 128] = unsafe { std::mem::transmute(sqe) };
        raw[24..28].copy_from_slice(&2u32.to_ne_bytes());
        // SAFETY: as above.
        let sqe: Entry128 = unsafe { std::mem::transmute(raw) };
        self.pending.lock_ok().push(sqe);
    }

    /// Queue the eventfd read that wakes the queue's thread.
    fn arm_wake(&self) {
        let sqe = opcode::Read::new(
            types::Fd(self.wake.as_raw_fd()),
            self.wake_buf as *mut u8,
            8,
        )
        .build()
        .user_data(WAKE);
        self.pending.lock_ok().push(sqe.into());
    }

    /// Wake the queue's thread (it submits what is pending).
    fn poke(&self) {
        let one = 1u64;
        // SAFETY: writing 8 bytes from a local to our eventfd.
        unsafe {
            libc::write(
                self.wake.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Submit what is pending and, if `block`, wait for at least one
    /// completion; returns the completions (user_data, result).
    fn turn(&self, block: bool) -> std::io::Result<Vec<(u64, i32)>> {
        let _g = self.cq.lock_ok();
        let mut pend = std::mem::take(&mut *self.pending.lock_ok());
        let mut next = 0;
        loop {
            {
                // SAFETY: the submission queue is only used under `cq`.
                let mut sq = unsafe { self.uring.submission_shared() };
                while next < pend.len() {
                    // SAFETY: the buffers an entry names are leaked (live
                    // forever).
                    if unsafe { sq.push(&pend[next]) }.is_err() {
                        break;
                    }
                    next += 1;
                }
            }
            if next == pend.len() {
                break;
            }
            // The submission queue is full: hand it over and go on, unless
            // the kernel wants completions taken first (EBUSY).
            match self.uring.submit() {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    let rest = pend.split_off(next);
                    let mut p = self.pending.lock_ok();
                    let newer = std::mem::replace(&mut *p, rest);
                    p.extend(newer);
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        match self.uring.submit_and_wait(block as usize) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(e),
        }
        // SAFETY: the completion queue is only used under `cq`.
        let cq = unsafe { self.uring.completion_shared() };
        Ok(cq.map(|c| (c.user_data(), c.result())).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_carry_the_commit_id_and_queue() {
        let c = cmd(0x1122_3344_5566_7788, 3);
        assert_eq!(&c[0..8], &[0; 8]);
        assert_eq!(
            u64::from_ne_bytes(c[8..16].try_into().unwrap()),
            0x1122_3344_5566_7788
        );
        assert_eq!(u16::from_ne_bytes(c[16..18].try_into().unwrap()), 3);
        assert!(possible_cpus() >= 1);
    }

    #[test]
    fn availability_follows_the_parameter_then_the_probe() {
        use std::io::{Error, ErrorKind};
        let missing = || Err(Error::from(ErrorKind::NotFound));
        let never = || -> std::io::Result<()> { panic!("probed") };
        assert_eq!(availability_from(missing(), never), Availability::NotBuilt);
        assert_eq!(
            availability_from(Ok("N\n".into()), never),
            Availability::Off
        );
        assert_eq!(
            availability_from(Ok("Y\n".into()), || Ok(())),
            Availability::Available
        );
        let denied = availability_from(Ok("Y\n".into()), || {
            Err(Error::from_raw_os_error(libc::EPERM))
        });
        let Availability::Denied(why) = denied else {
            panic!("{denied:?}");
        };
        assert!(
            why.starts_with("io_uring_setup: Operation not permitted"),
            "{why}"
        );
        assert!(matches!(
            availability_from(Err(Error::from(ErrorKind::PermissionDenied)), never),
            Availability::Denied(_)
        ));
    }
}
