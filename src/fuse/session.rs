//! The request loop: reading /dev/fuse on several threads, dispatching
//! each opcode to the tree, and the watchdog's view of the serving
//! threads.

use std::cell::Cell;
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tracing::{debug, error, warn};

use crate::base::errno::Errno;
use crate::base::sync::{panic_message, CondvarExt, LockExt, RwLockExt};
use crate::base::vfs::{Caller, NodeKind, OpenFlags, Waker};

use super::cuse::{clip_ranges, CUSE_IOCTL_MAX};
use super::handle::{Handle, IoctlCall, Parked, WriteCall};
use super::proto::{self, op, InHeader, Reader};
use super::state::{Session, Transport, Wake, ALIAS_BASE, MAX_WRITE};
use super::watchdog;

/// Room for the largest request: a write of [`MAX_WRITE`] bytes and its
/// headers.
const BUF_LEN: usize = MAX_WRITE as usize + 4096;
/// How long the kernel may cache entries and attributes, seconds.
const ENTRY_VALID_SECS: u64 = 1;

thread_local! {
    /// The request this thread serves and has not answered yet: its unique,
    /// when it was taken (monotonic ns) and its `monfs/requests` slot.
    static SERVING: Cell<Option<(u64, u64, usize)>> = const { Cell::new(None) };
}

fn now_ns() -> u64 {
    crate::base::clock::clock_ns(libc::CLOCK_MONOTONIC)
}

/// A request thread's wait for the device to have a request: its own epoll
/// instance with the device registered exclusively, so that a request wakes
/// one waiting thread, not all.
pub(super) struct RequestWait(pub(super) std::os::fd::OwnedFd);

impl RequestWait {
    fn new(dev: &File) -> std::io::Result<RequestWait> {
        use std::os::fd::FromRawFd;
        // SAFETY: epoll_create1 returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is ours alone.
        let ep = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLEXCLUSIVE) as u32,
            u64: 0,
        };
        // SAFETY: registering a descriptor we own with a valid event.
        if unsafe { libc::epoll_ctl(fd, libc::EPOLL_CTL_ADD, dev.as_raw_fd(), &mut ev) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RequestWait(ep))
    }

    /// Until the device has a request (or an error to report).
    fn wait(&self) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: room for one event; EINTR just returns early.
        unsafe { libc::epoll_wait(self.0.as_raw_fd(), &mut ev, 1, -1) };
    }
}

impl Session {
    /// Keep the request threads and the service thread on `cpus` (see
    /// [`MountOptions::cpus`](super::MountOptions::cpus)); before [`Session::run`].
    pub fn set_cpus(&self, cpus: nix::sched::CpuSet) {
        let _ = self.cpus.set(cpus);
    }

    /// Record the requests served in `stats` (shown by `monfs/requests`);
    /// before [`Session::run`].
    pub fn set_request_stats(&self, stats: Arc<crate::base::reqstats::RequestStats>) {
        let _ = self.requests.set(stats);
    }

    /// Serve requests on `threads` threads plus the service thread; returns when
    /// the filesystem is unmounted.
    pub fn run(self: &Arc<Self>, threads: usize) {
        self.start(threads);
        self.wait();
    }

    /// Start serving requests on `threads` threads plus the service thread
    /// (and, where INIT negotiates it, one thread per io_uring queue); then
    /// [`Session::wait`].
    pub fn start(self: &Arc<Self>, threads: usize) {
        // Request threads wait in epoll and read without blocking (see
        // `request_loop`).
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let fl = libc::fcntl(self.dev.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(self.dev.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        let _ = self.me.set(Arc::downgrade(self));
        if self.cuse.is_some() || !self.uring_wanted {
            self.settle_transport(Transport::DevFuse(None));
        } else if !super::uring::kernel_enabled() {
            self.settle_transport(Transport::DevFuse(Some(format!(
                "the kernel does not let FUSE use io_uring ({} is not Y)",
                super::uring::ENABLE_PARAM
            ))));
        } else {
            match super::uring::Rings::new(self.dev.as_raw_fd()) {
                Ok(r) => {
                    let _ = self.uring.set(r);
                }
                Err(e) => self.settle_transport(Transport::DevFuse(Some(format!(
                    "cannot set up the rings: {e}"
                )))),
            }
        }
        self.spawn_server(true, "fuse-wake".into());
        for i in 0..threads.max(1) {
            self.spawn_server(false, format!("fuse-{i}"));
        }
        {
            let s = Arc::clone(self);
            let _ = std::thread::Builder::new()
                .name("fuse-watchdog".into())
                .spawn(move || s.watchdog_loop());
        }
    }

    /// Until the filesystem is unmounted (after [`Session::start`]).
    pub fn wait(&self) {
        let mut live = self.live.0.lock_ok();
        while *live > 0 {
            live = self.live.1.wait_ok(live);
        }
        drop(live);
        self.destroyed.store(true, Ordering::SeqCst);
        let _ = self.wake_tx.send(Wake::Stop);
    }

    /// Start a serving thread: the service thread or a request thread.
    pub(super) fn spawn_server(self: &Arc<Self>, service: bool, name: String) {
        let s = Arc::clone(self);
        if !service {
            *self.live.0.lock_ok() += 1;
        }
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
            if let Some(set) = s.cpus.get() {
                if let Err(e) = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), set) {
                    warn!("--cpus: cannot keep a FUSE thread on the CPUs asked for: {e}");
                }
            }
            let slot = s.watch.enter(service);
            if service {
                s.service_loop(&slot);
            } else {
                s.request_loop(&slot);
            }
            s.watch.leave(&slot);
            if !service {
                s.count_out(&slot);
            }
        });
        if let Err(e) = spawned {
            error!("cannot start a FUSE thread: {e}");
            if !service {
                *self.live.0.lock_ok() -= 1;
                self.live.1.notify_all();
            }
        }
    }

    /// A request thread ended or was replaced: the session ends when none
    /// is left.
    pub(super) fn count_out(&self, slot: &watchdog::Slot) {
        if slot.count_out() {
            *self.live.0.lock_ok() -= 1;
            self.live.1.notify_all();
        }
    }

    /// Every 100 ms, fail the requests stuck on a caller's page and replace
    /// threads that are stuck (see [`watchdog`]).
    pub(super) fn watchdog_loop(self: &Arc<Self>) {
        while !self.destroyed.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            crate::base::procmem::expire_idle();
            for (slot, verdict) in self.watch.check() {
                let what = if slot.service { "service" } else { "request" };
                match verdict {
                    watchdog::Verdict::Fail(u) => {
                        warn!(
                            unique = u,
                            "a {what} thread is stuck in the caller's memory (a page nobody \
                             serves: userfaultfd, or a stalled FUSE mount): answering EFAULT"
                        );
                        if u != 0 {
                            self.err(u, Errno::EFAULT);
                        }
                    }
                    watchdog::Verdict::Replace => {
                        warn!(
                            unique = slot.unique(),
                            "a {what} thread is stuck; starting another"
                        );
                    }
                }
                let ring = slot.ring.load(Ordering::SeqCst);
                if ring != u32::MAX {
                    // A ring thread: another serves its queue meanwhile.
                    if self.watch.may_replace() {
                        self.spawn_ring(ring as u16);
                    }
                } else if self.watch.may_replace() {
                    self.spawn_server(slot.service, format!("fuse-{what}-r"));
                    // Counted out after its replacement is counted in, so
                    // the session never looks as if it had no threads left.
                    if !slot.service {
                        self.count_out(&slot);
                    }
                } else {
                    error!("no more FUSE threads may be started; the stuck one is not replaced");
                }
            }
        }
    }

    /// The tree inode behind a nodeid (resolving per-open aliases).
    pub(super) fn real_ino(&self, nodeid: u64) -> u64 {
        if nodeid >= ALIAS_BASE {
            self.aliases
                .lock_ok()
                .get(&nodeid)
                .map(|a| a.0)
                .unwrap_or(0)
        } else {
            nodeid
        }
    }

    pub(super) fn node(&self, nodeid: u64) -> Result<crate::base::vfs::Node, Errno> {
        self.tree.get(self.real_ino(nodeid))
    }

    pub(super) fn forget(&self, nodeid: u64, n: u64) {
        if nodeid >= ALIAS_BASE {
            let mut a = self.aliases.lock_ok();
            if let Some(e) = a.get_mut(&nodeid) {
                e.1 = e.1.saturating_sub(n);
                if e.1 == 0 {
                    a.remove(&nodeid);
                }
            }
        }
    }

    pub(super) fn request_loop(&self, slot: &watchdog::Slot) {
        let mut buf = vec![0u8; BUF_LEN];
        let ep = match RequestWait::new(&self.dev) {
            Ok(ep) => ep,
            Err(e) => {
                error!("cannot wait for FUSE requests (epoll): {e}");
                return;
            }
        };
        // The device had no request at the last look.
        let mut idle = false;
        loop {
            // Take the next request if there is one; only when there is
            // none, wait for one without taking it (the kernel wakes one
            // waiting thread per request). Looking first saves the
            // epoll_wait when the caller sent its next request while this
            // thread answered the last, as a busy client such as tcpdump
            // does (5% more null ioctls per second with --cpus). One thread
            // at a time takes one (the device is non-blocking), so that a
            // RELEASE read before a request is counted before that request
            // is read (see `wait_releases`); the turn is never held while
            // idle.
            if idle {
                ep.wait();
            }
            idle = false;
            let turn = self.read_turn.lock_ok();
            // SAFETY: reading into our own buffer.
            let n = unsafe {
                libc::read(
                    self.dev.as_raw_fd(),
                    buf.as_mut_ptr() as *mut libc::c_void,
                    buf.len(),
                )
            };
            if n < 0 {
                let err = std::io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EAGAIN) => {
                        idle = true;
                        continue;
                    }
                    Some(libc::EINTR) | Some(libc::ENOENT) => continue,
                    Some(libc::ENODEV) => return, // unmounted
                    _ => {
                        warn!("reading /dev/fuse: {err}");
                        return;
                    }
                }
            }
            let n = n as usize;
            let Some(h) = proto::parse_header(&buf[..n]) else {
                warn!("short FUSE request ({n} bytes)");
                continue;
            };
            let body = &buf[proto::IN_HEADER_LEN..n];
            let release = self.count_release(&h);
            drop(turn);
            self.serve(&h, body, slot, release);
            if self.destroyed.load(Ordering::SeqCst) || slot.abandoned() {
                return;
            }
        }
    }

    /// Count a RELEASE as taken (before the next request is taken, so that
    /// it waits for it: see [`Session::wait_releases`]); whether it is one.
    pub(super) fn count_release(&self, h: &InHeader) -> bool {
        let release = h.opcode == op::RELEASE;
        if release {
            *self.releasing.0.lock_ok() += 1;
        }
        release
    }

    /// Serve one request taken from the device or a ring (`release`: a
    /// RELEASE counted by [`Session::count_release`]): after the RELEASEs
    /// taken before it, watched by `slot`, a panic answered EIO.
    pub(super) fn serve(&self, h: &InHeader, body: &[u8], slot: &watchdog::Slot, release: bool) {
        let stats = self.requests.get();
        if let Some(stats) = stats {
            let key = proto::request_key(h.opcode, body);
            let kind = stats.slot(key, || proto::request_label(key));
            SERVING.set(Some((h.unique, now_ns(), kind)));
        }
        if !release {
            self.wait_releases();
        }
        slot.begin(h.unique);
        // What the request makes the daemon hold is its caller's (issue 37).
        let charge = crate::base::budget::charge_to(h.uid, h.uid == self.tree.uid);
        let res = catch_unwind(AssertUnwindSafe(|| self.dispatch(h, body)));
        drop(charge);
        slot.end();
        if release {
            *self.releasing.0.lock_ok() -= 1;
            self.releasing.1.notify_all();
        }
        if let Err(p) = res {
            error!(
                unique = h.unique,
                opcode = h.opcode,
                nodeid = h.nodeid,
                "request panicked, answering EIO: {}",
                panic_message(&*p)
            );
            // FORGET and BATCH_FORGET take no reply. If the handler had
            // answered before it panicked, the kernel refuses this second
            // answer (ENOENT: no such request) and nothing happens.
            if !matches!(h.opcode, op::FORGET | op::BATCH_FORGET) {
                self.err(h.unique, Errno::EIO);
            }
        }
        // Not answered while served: parked to wait, or takes no answer.
        if let (Some((_, t0, kind)), Some(stats)) = (SERVING.take(), stats) {
            stats.record(kind, now_ns().saturating_sub(t0), false);
        }
    }

    /// Count the answer to `unique` in `monfs/requests` if it is the
    /// request this thread serves (an answer to a parked request, sent
    /// later, is not).
    pub(super) fn answering(&self, unique: u64) {
        if let Some((u, t0, kind)) = SERVING.get() {
            if u == unique {
                SERVING.set(None);
                if let Some(stats) = self.requests.get() {
                    stats.record(kind, now_ns().saturating_sub(t0), true);
                }
            }
        }
    }

    /// Wait (up to a second) until the RELEASEs read before this request
    /// are done. close(2) queues a RELEASE before it returns, and the kernel
    /// has dropped the file's references by then: a request the caller
    /// makes next (a `DIAG_IOCSDEL` of the event the closed fd registered)
    /// must not see them, even when another thread serves it first.
    pub(super) fn wait_releases(&self) {
        let (m, cv) = &self.releasing;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let mut n = m.lock_ok();
        while *n > 0 {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            n = cv.wait_timeout_ok(n, left);
        }
    }

    /// The size of the content of the newest open snapshot of `ino`: while
    /// one is open, attribute replies must not set the inode's size back to
    /// 0 under a sendfile (see `open`).
    pub(super) fn open_snapshot_size(&self, ino: u64) -> Option<u64> {
        // The newest open is the one with the highest handle; the cost does
        // not grow with the handles open on other inodes (issue 37).
        self.snapshots
            .lock_ok()
            .get(&ino)
            .and_then(|m| m.last_key_value())
            .map(|(_, len)| *len)
    }

    /// Handle `fh` of `nodeid` is closed: its snapshot no longer sizes the inode.
    fn forget_snapshot(&self, nodeid: u64, fh: u64) {
        let mut snaps = self.snapshots.lock_ok();
        if let Some(m) = snaps.get_mut(&nodeid) {
            m.remove(&fh);
            if m.is_empty() {
                snaps.remove(&nodeid);
            }
        }
    }

    pub(super) fn attr(&self, node: &crate::base::vfs::Node) -> proto::Attr {
        proto::Attr {
            ino: node.ino,
            // kernfs's and tracefs's links, like their directories, have
            // size 0 (their targets are made when read)
            size: match &node.kind {
                NodeKind::Symlink(_) => 0,
                NodeKind::File(f) => self
                    .open_snapshot_size(node.ino)
                    .unwrap_or_else(|| f.size()),
                NodeKind::Dir => 0,
            },
            time: 0,
            mode: node.st_mode(),
            nlink: self.tree.nlink(node),
            uid: self.tree.uid,
            gid: self.tree.gid,
            rdev: 0,
        }
    }

    pub(super) fn dispatch(&self, h: &InHeader, body: &[u8]) {
        let u = h.unique;
        let mut r = Reader::new(body);
        let caller = Caller {
            pid: h.pid,
            uid: h.uid,
            gid: h.gid,
        };
        match h.opcode {
            op::INIT => self.init(u, &mut r),
            op::CUSE_INIT => self.cuse_init(u, &mut r),
            op::DESTROY => {
                self.destroyed.store(true, Ordering::SeqCst);
                self.ok(u, &[]);
            }
            op::LOOKUP => {
                let name = r.cstr().unwrap_or_default();
                match self.tree.lookup(self.real_ino(h.nodeid), &name) {
                    Ok(n) if matches!(&n.kind, NodeKind::File(f) if f.private_inode()) => {
                        // A fresh inode for every lookup, never cached, so that
                        // every open has a page cache (a mapping) of its own.
                        let alias = self.next_alias.fetch_add(1, Ordering::Relaxed);
                        self.aliases.lock_ok().insert(alias, (n.ino, 1));
                        let mut a = self.attr(&n);
                        a.ino = alias;
                        self.ok(u, &proto::entry_out(&a, 0));
                    }
                    Ok(n) => {
                        let valid = if n.transient { 0 } else { ENTRY_VALID_SECS };
                        self.ok(u, &proto::entry_out(&self.attr(&n), valid))
                    }
                    Err(e) => self.err(u, e),
                }
            }
            op::MKDIR => {
                let _mode = r.u32();
                let _umask = r.u32();
                let name = r.cstr().unwrap_or_default();
                match self.tree.mkdir(self.real_ino(h.nodeid), &name, &caller) {
                    Ok(n) => self.ok(u, &proto::entry_out(&self.attr(&n), 0)),
                    Err(e) => self.err(u, e),
                }
            }
            op::RMDIR => {
                let name = r.cstr().unwrap_or_default();
                match self.tree.rmdir(self.real_ino(h.nodeid), &name, &caller) {
                    Ok(()) => self.ok(u, &[]),
                    Err(e) => self.err(u, e),
                }
            }
            op::FORGET => {
                let n = r.u64().unwrap_or(0);
                self.forget(h.nodeid, n);
            }
            op::BATCH_FORGET => {
                let count = r.u32().unwrap_or(0);
                let _ = r.u32();
                for _ in 0..count {
                    let (Some(id), Some(n)) = (r.u64(), r.u64()) else {
                        break;
                    };
                    self.forget(id, n);
                }
            }
            op::GETATTR | op::SETATTR => self.getattr(h, &mut r),
            op::READLINK => match self.tree.get(h.nodeid) {
                Ok(crate::base::vfs::Node {
                    kind: NodeKind::Symlink(t),
                    ..
                }) => self.ok(u, t.as_bytes()),
                Ok(_) => self.err(u, Errno::EINVAL),
                Err(e) => self.err(u, e),
            },
            op::OPEN => {
                self.tree.before_request();
                let flags = r.u32().unwrap_or(0) as i32;
                self.open(u, h.nodeid, flags, &caller);
                self.tree.after_request();
            }
            op::READ => {
                let fh = r.u64().unwrap_or(0);
                let offset = r.u64().unwrap_or(0);
                let size = r.u32().unwrap_or(0);
                let read_flags = r.u32().unwrap_or(0);
                let _lock_owner = r.u64();
                let flags = r.u32().unwrap_or(0) as i32;
                self.tree.before_request();
                if read_flags & proto::READ_LOCKOWNER == 0 {
                    // Not a read(2) (those carry a lock owner on direct-I/O files):
                    // the page cache filling in pages for a mapping.
                    match self.handle(fh) {
                        Some(hd) => {
                            hd.file
                                .mapped_as((self.dev_id.load(Ordering::Relaxed), hd.nodeid));
                            self.finish(u, hd.file.read_mapped(h.pid, offset, size))
                        }
                        None => self.err(u, Errno::EBADF),
                    }
                } else {
                    self.read(u, fh, offset, size, flags & libc::O_NONBLOCK != 0);
                }
            }
            op::WRITE => {
                let fh = r.u64().unwrap_or(0);
                let offset = r.u64().unwrap_or(0);
                let size = r.u32().unwrap_or(0) as usize;
                let _write_flags = r.u32();
                let _lock_owner = r.u64();
                // The file's flags (fcntl's O_NONBLOCK included).
                let flags = r.u32().unwrap_or(0) as i32;
                let _ = r.u32();
                let data = r.rest();
                let data = &data[..size.min(data.len())];
                self.tree.before_request();
                self.write(u, fh, offset, data, caller, flags & libc::O_NONBLOCK != 0);
                self.tree.after_request();
            }
            op::RELEASE => {
                let fh = r.u64().unwrap_or(0);
                let hd = {
                    let mut handles = self.handles.write_ok();
                    let hd = handles.remove(&fh);
                    // A flood of opens closed leaves no table of its size.
                    if handles.capacity() > 1024 && handles.len() < handles.capacity() / 4 {
                        handles.shrink_to_fit();
                    }
                    hd
                };
                if let Some(hd) = hd {
                    let mut pend = hd.pending.lock_ok();
                    for p in pend.drain(..) {
                        self.parked.lock_ok().remove(&p.unique);
                        self.err(p.unique, Errno::EBADF);
                    }
                    drop(pend);
                    hd.file.release();
                    self.forget_snapshot(hd.nodeid, fh);
                    self.tree.note_release(self.real_ino(hd.nodeid));
                }
                self.ok(u, &[]);
            }
            op::FLUSH | op::FSYNC | op::FSYNCDIR | op::RELEASEDIR => self.ok(u, &[]),
            op::OPENDIR => match self.node(h.nodeid) {
                Ok(n) if matches!(n.kind, NodeKind::Dir) => self.ok(u, &proto::open_out(0, 0)),
                Ok(_) => self.err(u, Errno::ENOTDIR),
                Err(e) => self.err(u, e),
            },
            op::READDIR => {
                let _fh = r.u64();
                let offset = r.u64().unwrap_or(0);
                let size = r.u32().unwrap_or(0) as usize;
                self.readdir(u, h.nodeid, offset, size);
            }
            op::STATFS => {
                let mut w = proto::Writer::default();
                w.zeros(40).u32(4096).u32(255).u32(4096).u32(0).zeros(24);
                self.ok(u, &w.0);
            }
            op::ACCESS => self.ok(u, &[]),
            op::INTERRUPT => {
                let target = r.u64().unwrap_or(0);
                self.interrupt(u, target);
            }
            op::IOCTL => self.ioctl(u, &mut r, caller),
            op::POLL => {
                let fh = r.u64().unwrap_or(0);
                let kh = r.u64().unwrap_or(0);
                let flags = r.u32().unwrap_or(0);
                match self.handle(fh) {
                    Some(hd) => {
                        if flags & proto::POLL_SCHEDULE_NOTIFY != 0 {
                            *hd.poll_kh.lock_ok() = Some(kh);
                            hd.armed.store(true, Ordering::SeqCst);
                        }
                        let mut w = proto::Writer::default();
                        w.u32(hd.file.poll()).u32(0);
                        self.ok(u, &w.0);
                    }
                    None => self.err(u, Errno::EBADF),
                }
            }
            op::LSEEK => self.err(u, Errno::ESPIPE),
            op::GETXATTR | op::LISTXATTR => self.err(u, Errno::ENOTSUP),
            other => {
                debug!(opcode = other, "unsupported FUSE opcode");
                self.err(u, Errno::ENOSYS)
            }
        }
    }

    pub(super) fn init(&self, u: u64, r: &mut Reader<'_>) {
        let major = r.u32().unwrap_or(0);
        let minor = r.u32().unwrap_or(0);
        let max_readahead = r.u32().unwrap_or(0);
        let flags = r.u32().unwrap_or(0) as u64;
        let flags2 = r.u32().map(|f| (f as u64) << 32).unwrap_or(0);
        let kflags = flags | flags2;
        if major != proto::KERNEL_VERSION {
            warn!(major, minor, "unsupported FUSE protocol");
            self.err(u, Errno::EPROTO);
            self.settle_transport(Transport::DevFuse(Some(format!(
                "unsupported FUSE protocol {major}.{minor}"
            ))));
            return;
        }
        let mut want = proto::init::ATOMIC_O_TRUNC
            | proto::init::BIG_WRITES
            | proto::init::HAS_IOCTL_DIR
            | proto::init::MAX_PAGES
            | proto::init::INIT_EXT;
        if self.allow_mmap {
            want |= proto::init::DIRECT_IO_ALLOW_MMAP;
        }
        if self.uring.get().is_some() {
            want |= super::uring::INIT_FLAG;
        }
        let got = kflags & want;
        let mut w = proto::Writer::default();
        w.u32(proto::KERNEL_VERSION)
            .u32(proto::KERNEL_MINOR.min(minor.max(proto::KERNEL_MINOR)))
            .u32(max_readahead)
            .u32(got as u32)
            .u16(16) // max_background
            .u16(12) // congestion_threshold
            .u32(MAX_WRITE)
            .u32(1) // time_gran
            .u16((MAX_WRITE / 4096) as u16) // max_pages
            .u16(0)
            .u32((got >> 32) as u32) // flags2
            .zeros(28);
        debug!(minor, "FUSE INIT");
        self.ok(u, &w.0);
        if got & super::uring::INIT_FLAG != 0 {
            if let Some(me) = self.me.get().and_then(std::sync::Weak::upgrade) {
                me.start_rings();
            }
        } else if self.uring.get().is_some() {
            self.settle_transport(Transport::DevFuse(Some(
                "the kernel did not offer FUSE over io_uring at INIT".into(),
            )));
        }
    }

    pub(super) fn getattr(&self, h: &InHeader, _r: &mut Reader<'_>) {
        // SETATTR: the only change a client makes is size=0 (`echo x > f`, which
        // strips O_TRUNC from open and truncates separately). Files treat it
        // as a truncate of their open handle, which comes with the request.
        if h.opcode == op::SETATTR {
            let mut r = Reader::new(_r.rest());
            let valid = r.u32().unwrap_or(0);
            let _pad = r.u32();
            let fh = r.u64().unwrap_or(0);
            let size = r.u64().unwrap_or(0);
            if valid & proto::FATTR_SIZE != 0 {
                if size != 0 {
                    self.err(h.unique, Errno::EINVAL);
                    return;
                }
                if let Some(hd) = self.handle(fh) {
                    if let Err(e) = hd.file.truncate() {
                        self.err(h.unique, e);
                        return;
                    }
                }
            }
        }
        match self.node(h.nodeid) {
            Ok(n) => {
                let mut a = self.attr(&n);
                let valid = if h.nodeid >= ALIAS_BASE {
                    a.ino = h.nodeid;
                    0
                } else {
                    ENTRY_VALID_SECS
                };
                self.ok(h.unique, &proto::attr_out(&a, valid))
            }
            Err(e) => self.err(h.unique, e),
        }
    }

    pub(super) fn open(&self, u: u64, ino: u64, flags: i32, caller: &Caller) {
        let f = match &self.cuse {
            Some(c) => Arc::clone(&c.node),
            None => {
                let node = match self.node(ino) {
                    Ok(n) => n,
                    Err(e) => return self.err(u, e),
                };
                let NodeKind::File(f) = node.kind else {
                    return self.err(u, Errno::EISDIR);
                };
                f
            }
        };
        let oflags = OpenFlags { flags };
        // Every open handle counts against its user's open files (EMFILE past
        // them); taken first, so that a refused open makes nothing.
        let slot = match crate::base::budget::OPEN_FILES.take(1) {
            Ok(s) => s,
            Err(e) => return self.err(u, e),
        };
        let file = match f.open(oflags, caller) {
            Ok(f) => f,
            Err(e) => return self.err(u, e),
        };
        if oflags.truncate() {
            if let Err(e) = file.truncate() {
                return self.err(u, e);
            }
        }
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let armed = Arc::new(AtomicBool::new(false));
        let open_flags = if file.is_stream() {
            proto::fopen::DIRECT_IO | proto::fopen::NONSEEKABLE | proto::fopen::STREAM
        } else {
            proto::fopen::DIRECT_IO
        };
        {
            let tx = self.wake_tx.clone();
            let armed = Arc::clone(&armed);
            let waker: Waker = Arc::new(move || {
                if armed.swap(false, Ordering::SeqCst) {
                    let _ = tx.send(Wake::Handle(fh));
                }
            });
            file.set_waker(waker);
        }
        let hd = Arc::new(Handle {
            nodeid: ino,
            file,
            nonblock: oflags.nonblock(),
            armed,
            pending: Mutex::new(VecDeque::new()),
            servicing: AtomicBool::new(false),
            again: AtomicBool::new(false),
            fd_hint: Mutex::new(None),
            poll_kh: Mutex::new(None),
            _slot: slot,
        });
        self.handles.write_ok().insert(fh, Arc::clone(&hd));
        if let Some(c) = hd.file.content() {
            self.snapshots
                .lock_ok()
                .entry(ino)
                .or_default()
                .insert(fh, c.len() as u64);
        }
        self.tree.note_open(self.real_ino(ino));
        // Snapshots (usb/devices, usbmon's Ns): sendfile and splice (busybox
        // cat) read through the page cache, only up to the inode's size, which
        // is 0 as in the kernel, and never send a read(2). Storing the content
        // sets the size (and attribute replies keep it while the file is open,
        // `open_snapshot_size`); the open reply (without FOPEN_KEEP_CACHE)
        // then drops the pages, so the page cache refills from this open's own
        // snapshot (`read_mapped`) and never shows another open's.
        if self.cuse.is_none() {
            if let Some(c) = hd.file.content().filter(|c| !c.is_empty()) {
                self.store(ino, 0, c);
            }
        }
        self.ok(u, &proto::open_out(fh, open_flags));
    }

    pub(super) fn readdir(&self, u: u64, ino: u64, offset: u64, size: usize) {
        let node = match self.tree.get(ino) {
            Ok(n) => n,
            Err(e) => return self.err(u, e),
        };
        let mut entries: Vec<(u64, u32, String)> = vec![
            (node.ino, libc::DT_DIR as u32, ".".into()),
            (node.parent, libc::DT_DIR as u32, "..".into()),
        ];
        for (name, cino) in &node.children {
            if let Ok(c) = self.tree.get(*cino) {
                let t = match c.kind {
                    NodeKind::Dir => libc::DT_DIR,
                    NodeKind::Symlink(_) => libc::DT_LNK,
                    NodeKind::File(_) => libc::DT_REG,
                };
                entries.push((c.ino, t as u32, name.clone()));
            }
        }
        let mut buf = Vec::new();
        for (i, (eino, t, name)) in entries.iter().enumerate().skip(offset as usize) {
            if !proto::push_dirent(&mut buf, size, *eino, i as u64 + 1, *t, name) {
                break;
            }
        }
        self.ok(u, &buf);
    }

    pub(super) fn read(&self, u: u64, fh: u64, offset: u64, size: u32, nonblock: bool) {
        let Some(hd) = self.handle(fh) else {
            return self.err(u, Errno::EBADF);
        };
        self.run_or_park(
            &hd,
            fh,
            u,
            Parked::Read { offset, size },
            // The read carries the file's current flags (fcntl included).
            nonblock,
        );
    }

    /// A write: answered at once, or parked while its file waits for room
    /// ([`crate::base::vfs::Written::Took`]).
    pub(super) fn write(
        &self,
        u: u64,
        fh: u64,
        offset: u64,
        data: &[u8],
        caller: Caller,
        nonblock: bool,
    ) {
        let Some(hd) = self.handle(fh) else {
            return self.err(u, Errno::EBADF);
        };
        let call = WriteCall {
            offset,
            data: data.to_vec(),
            caller,
            nonblock,
            done: AtomicUsize::new(0),
            held: Mutex::new(None),
        };
        self.write_or_park(&hd, fh, u, Parked::Write(Arc::new(call)), nonblock);
    }

    pub(super) fn ioctl(&self, u: u64, r: &mut Reader<'_>, caller: Caller) {
        let fh = r.u64().unwrap_or(0);
        let flags = r.u32().unwrap_or(0);
        let cmd = r.u32().unwrap_or(0);
        let arg = r.u64().unwrap_or(0);
        let in_size = r.u32();
        let out_size = r.u32().unwrap_or(0);
        let input = r.rest().to_vec();
        let compat = flags & proto::ioctl_flags::COMPAT != 0;
        let Some(hd) = self.handle(fh) else {
            return self.err(u, Errno::EBADF);
        };
        if compat && !hd.file.compat_ioctl() {
            return self.err(u, Errno::ENOTTY);
        }
        let mut cuse = None;
        if flags & proto::ioctl_flags::UNRESTRICTED != 0 {
            // CUSE: declare the memory the call touches, and have the kernel
            // retry the ioctl with it copied in, until the layout is complete.
            let first = hd.file.ioctl_layout(cmd, arg, &[], compat);
            let first_len = first.input.first().map(|r| r.1 as usize).unwrap_or(0);
            let layout =
                hd.file
                    .ioctl_layout(cmd, arg, &input[..first_len.min(input.len())], compat);
            let mut layout = layout;
            clip_ranges(&mut layout.input, CUSE_IOCTL_MAX);
            clip_ranges(&mut layout.output, CUSE_IOCTL_MAX);
            let in_total: u64 = layout.input.iter().map(|r| r.1).sum();
            let out_total: u64 = layout.output.iter().map(|r| r.1).sum();
            if in_total != in_size.unwrap_or(0) as u64 || out_total != out_size as u64 {
                return self.ioctl_retry(u, &layout);
            }
            cuse = Some((layout, input.clone()));
        }
        let call = IoctlCall {
            cuse,
            nodeid: hd.nodeid,
            cmd,
            arg,
            input,
            out_size,
            caller,
            compat,
        };
        let nonblock = hd.nonblock;
        self.run_or_park(&hd, fh, u, Parked::Ioctl(call), nonblock);
    }
}
