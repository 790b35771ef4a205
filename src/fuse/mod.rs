//! A thin FUSE adapter over [`crate::vfs`].
//!
//! monfs speaks the FUSE protocol itself (see [`proto`]) instead of using
//! fuser, because it needs three things fuser 0.18 does not give: FUSE_INTERRUPT
//! (so that a `cat` parked in a blocking read dies on Ctrl-C), the raw `arg` of
//! `_IO` ioctls (usbmon's ring size and flush count), and CUSE_INIT (real
//! character devices). The layer only translates requests into [`Tree`] and
//! [`OpenFile`] calls and keeps the parked (blocked) requests.
//!
//! Blocking: a read or ioctl whose file answers EAGAIN is parked on its handle
//! unless the caller is O_NONBLOCK. The file's waker sends the handle to the
//! service thread, which retries parked requests in order. FUSE_INTERRUPT for
//! a parked request answers it with EINTR at once.
//!
//! Panics: a handler that panics fails that one request with EIO (and a log
//! line); the threads keep serving, and the locks it held stay usable (see
//! [`crate::sync`]).

pub mod proto;
pub mod watchdog;

use std::collections::{HashMap, VecDeque};
use std::ffi::CString;
use std::fs::File;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use anyhow::{bail, Context};
use crossbeam_channel::{Receiver, Sender};
use tracing::{debug, error, warn};

use crate::errno::Errno;
use crate::sync::{CondvarExt, LockExt, RwLockExt};
use crate::vfs::{
    Caller, CallerMemory, IoctlLayout, IoctlRequest, NodeKind, OpenFile, OpenFlags, Tree, Waker,
};
use proto::{op, InHeader, Reader};

/// Mount options.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Let other users in (modes are then enforced with default_permissions).
    pub allow_other: bool,
    /// Number of threads reading requests.
    pub threads: usize,
    /// Allow shared mappings of streaming files (usbmon's ring). Without it
    /// `mmap` fails with ENODEV, as on a CUSE device.
    pub mmap: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            threads: 2,
            mmap: true,
        }
    }
}

const MAX_WRITE: u32 = 128 * 1024;
const BUF_LEN: usize = MAX_WRITE as usize + 4096;
const ENTRY_VALID_SECS: u64 = 1;

/// A request thread's wait for the device to have a request: its own epoll
/// instance with the device registered exclusively, so that a request wakes
/// one waiting thread, not all.
struct RequestWait(std::os::fd::OwnedFd);

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

/// What a parked request was.
#[derive(Clone)]
enum Parked {
    Read { offset: u64, size: u32 },
    Ioctl(IoctlCall),
}

impl Parked {
    /// The FUSE opcode of the request.
    fn opcode(&self) -> u32 {
        match self {
            Parked::Read { .. } => op::READ,
            Parked::Ioctl(_) => op::IOCTL,
        }
    }
}

/// The message of a caught panic (`panic!` with a literal or a format).
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

#[derive(Clone)]
struct IoctlCall {
    /// CUSE: the caller memory the kernel copied in (per input range) and the
    /// output ranges it will copy out of the reply.
    cuse: Option<(IoctlLayout, Vec<u8>)>,
    nodeid: u64,
    cmd: u32,
    arg: u64,
    input: Vec<u8>,
    out_size: u32,
    caller: Caller,
    compat: bool,
}

struct Pending {
    unique: u64,
    what: Parked,
    /// A thread is retrying it (without the queue's lock).
    attempting: bool,
    /// FUSE_INTERRUPT came while it was being retried: EINTR unless that
    /// retry completes it.
    interrupted: bool,
}

/// One open file handle.
struct Handle {
    /// The nodeid the file was opened on (an alias for per-open inodes).
    nodeid: u64,
    file: Arc<dyn OpenFile>,
    nonblock: bool,
    /// Set while someone waits for the waker (parked requests or a poll).
    armed: Arc<AtomicBool>,
    pending: Mutex<VecDeque<Pending>>,
    poll_kh: Mutex<Option<u64>>,
    /// A thread is retrying this handle's parked requests.
    servicing: AtomicBool,
    /// Someone asked for a retry meanwhile: look again.
    again: AtomicBool,
}

/// A mounted (or about to be mounted) FUSE session.
pub struct Session {
    dev: File,
    tree: Arc<Tree>,
    handles: RwLock<HashMap<u64, Arc<Handle>>>,
    parked: Mutex<HashMap<u64, u64>>,
    next_fh: AtomicU64,
    wake_tx: Sender<Wake>,
    wake_rx: Receiver<Wake>,
    mountpoint: PathBuf,
    destroyed: AtomicBool,
    allow_mmap: bool,
    /// Set for a CUSE device session.
    cuse: Option<CuseDev>,
    /// Per-open inodes: alias nodeid -> (tree inode, lookup count).
    aliases: Mutex<HashMap<u64, (u64, u64)>>,
    next_alias: AtomicU64,
    /// st_dev of the mount, for finding mappings in /proc/<pid>/maps.
    dev_id: AtomicU64,
    /// The serving threads, watched so that no caller keeps one.
    watch: watchdog::Watchdog,
    /// Request threads running (replacements included).
    live: (Mutex<usize>, std::sync::Condvar),
    /// Held while a request thread reads /dev/fuse.
    read_turn: Mutex<()>,
    /// RELEASEs read and not yet done.
    releasing: (Mutex<usize>, std::sync::Condvar),
}

/// Work for the service thread.
enum Wake {
    /// A handle's file may be ready: retry its parked requests, notify poll.
    Handle(u64),
    /// A page-cache update for a shared mapping.
    Store(u64, u64, Vec<u8>),
    /// A removed directory entry (parent, name).
    InvalEntry(u64, String),
    /// The session is over.
    Stop,
}

/// Queues kernel cache updates for the service thread.
struct CacheQueue(Sender<Wake>);

impl crate::vfs::KernelCache for CacheQueue {
    fn store(&self, ino: u64, offset: u64, bytes: Vec<u8>) {
        let _ = self.0.send(Wake::Store(ino, offset, bytes));
    }
    fn inval_entry(&self, parent: u64, name: &str) {
        let _ = self.0.send(Wake::InvalEntry(parent, name.to_string()));
    }
}

/// Caller memory for a CUSE ioctl: the input ranges the kernel copied in, and
/// writes collected for the output ranges.
struct IovMemory<'a> {
    layout: &'a IoctlLayout,
    data: &'a [u8],
    writes: std::cell::RefCell<Vec<(u64, Vec<u8>)>>,
}

impl<'a> IovMemory<'a> {
    fn new(layout: &'a IoctlLayout, data: &'a [u8]) -> Self {
        IovMemory {
            layout,
            data,
            writes: Default::default(),
        }
    }

    /// The reply payload: each output range in order, filled by the writes
    /// that start at it; the last range may be short.
    fn reply_bytes(&self) -> Vec<u8> {
        let writes = self.writes.borrow();
        let mut out = Vec::new();
        let n = self.layout.output.len();
        for (i, (base, len)) in self.layout.output.iter().enumerate() {
            let got = writes
                .iter()
                .rev()
                .find(|(a, _)| a == base)
                .map(|(_, b)| b.as_slice())
                .unwrap_or(&[]);
            let take = got.len().min(*len as usize);
            out.extend_from_slice(&got[..take]);
            if i + 1 < n && take < *len as usize {
                out.resize(out.len() + *len as usize - take, 0);
            }
        }
        out
    }
}

impl crate::vfs::CallerMemory for IovMemory<'_> {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut at = 0usize;
        for (base, l) in &self.layout.input {
            if addr >= *base && addr + len as u64 <= base + l {
                let off = at + (addr - base) as usize;
                return self
                    .data
                    .get(off..off + len)
                    .map(|s| s.to_vec())
                    .ok_or(Errno::EFAULT);
            }
            at += *l as usize;
        }
        Err(Errno::EFAULT)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        let inside = self
            .layout
            .output
            .iter()
            .any(|(b, l)| addr >= *b && addr + data.len() as u64 <= b + l);
        if !inside {
            return Err(Errno::EFAULT);
        }
        self.writes.borrow_mut().push((addr, data.to_vec()));
        Ok(())
    }
}

/// A CUSE character device served by a session.
struct CuseDev {
    node: Arc<dyn crate::vfs::FileNode>,
    name: String,
    major: u32,
    minor: u32,
}

/// The most memory a CUSE ioctl moves each way: the kernel's fuse_do_ioctl
/// answers ENOMEM when the retry's input or output iovecs exceed
/// `fc->max_pages` pages, and CUSE never raises that from
/// FUSE_DEFAULT_MAX_PAGES_PER_REQ (32). libpcap's MON_IOCX_GET buffer is
/// 240 KiB, usbmon_read's 1 MiB; usbmon's events hold at most ring size / 5
/// bytes (60 KiB with the default ring), so shortening the data buffer to
/// what fits loses nothing unless the ring was enlarged past 640 KiB.
const CUSE_IOCTL_MAX: u64 = 32 * 4096;

/// Shorten `ranges` (the last ones first) to `max` bytes in all.
fn clip_ranges(ranges: &mut [(u64, u64)], max: u64) {
    let mut left = max;
    for r in ranges.iter_mut() {
        r.1 = r.1.min(left);
        left -= r.1;
    }
}

/// Nodeids of per-open inodes start here, far above the tree's.
const ALIAS_BASE: u64 = 1 << 40;

fn cstr(p: &Path) -> anyhow::Result<CString> {
    Ok(CString::new(p.as_os_str().as_encoded_bytes())?)
}

/// Detach a stale FUSE mount (daemon gone, `ENOTCONN`) left at `mountpoint`.
/// `statfs` always reaches the daemon (a `stat` may be answered from cached
/// attributes), so it tells a dead mount reliably.
pub fn recover_stale_mount(mountpoint: &Path) {
    let Ok(c) = cstr(mountpoint) else { return };
    // SAFETY: statfs writes into the zeroed struct we pass.
    let rc = unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st)
    };
    if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOTCONN) {
        warn!(mountpoint = %mountpoint.display(), "recovering a stale mount left by a killed daemon");
        // SAFETY: plain syscall on a valid C string.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Unmount `mountpoint` (lazily if busy).
pub fn unmount(mountpoint: &Path) {
    if let Ok(c) = cstr(mountpoint) {
        // SAFETY: plain syscalls on a valid C string.
        unsafe {
            if libc::umount2(c.as_ptr(), 0) != 0 {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
    }
}

impl Session {
    /// Open /dev/fuse and mount the tree at `mountpoint`.
    pub fn mount(
        tree: Arc<Tree>,
        mountpoint: &Path,
        opts: &MountOptions,
    ) -> anyhow::Result<Arc<Session>> {
        recover_stale_mount(mountpoint);
        let meta = std::fs::metadata(mountpoint)
            .with_context(|| format!("mountpoint {}", mountpoint.display()))?;
        if !meta.is_dir() {
            bail!("mountpoint {} is not a directory", mountpoint.display());
        }
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .context("cannot open /dev/fuse (is the fuse module loaded and are you root?)")?;
        let mut data = format!(
            "fd={},rootmode=40755,user_id={},group_id={},default_permissions",
            dev.as_raw_fd(),
            tree.uid,
            tree.gid
        );
        if opts.allow_other {
            data.push_str(",allow_other");
        }
        let src = CString::new("monfs").unwrap();
        let fstype = CString::new("fuse.monfs").unwrap();
        let target = cstr(mountpoint)?;
        let cdata = CString::new(data).unwrap();
        // SAFETY: all pointers are valid NUL-terminated strings for the call.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                target.as_ptr(),
                fstype.as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV,
                cdata.as_ptr() as *const libc::c_void,
            )
        };
        if rc != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("mount on {}", mountpoint.display()));
        }
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        tree.set_kernel_cache(Arc::new(CacheQueue(wake_tx.clone())));
        let s = Arc::new(Session {
            dev,
            tree,
            handles: RwLock::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            wake_tx,
            wake_rx,
            mountpoint: mountpoint.to_path_buf(),
            destroyed: AtomicBool::new(false),
            allow_mmap: opts.mmap,
            cuse: None,
            aliases: Mutex::new(HashMap::new()),
            next_alias: AtomicU64::new(ALIAS_BASE),
            dev_id: AtomicU64::new(0),
            watch: Default::default(),
            live: Default::default(),
            read_turn: Mutex::new(()),
            releasing: Default::default(),
        });
        Ok(s)
    }

    /// Create a character device `/dev/NAME` served by `node` through CUSE
    /// (`/dev/cuse`). `major` 0 lets the kernel pick one.
    pub fn cuse(
        node: Arc<dyn crate::vfs::FileNode>,
        name: &str,
        major: u32,
        minor: u32,
    ) -> anyhow::Result<Arc<Session>> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/cuse")
            .context("cannot open /dev/cuse (the kernel needs CUSE: modprobe cuse)")?;
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        Ok(Arc::new(Session {
            dev,
            tree: Arc::new(Tree::new(0, 0)),
            handles: RwLock::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            wake_tx,
            wake_rx,
            mountpoint: PathBuf::from(format!("/dev/{name}")),
            destroyed: AtomicBool::new(false),
            allow_mmap: false,
            cuse: Some(CuseDev {
                node,
                name: name.to_string(),
                major,
                minor,
            }),
            aliases: Mutex::new(HashMap::new()),
            next_alias: AtomicU64::new(ALIAS_BASE),
            dev_id: AtomicU64::new(0),
            watch: Default::default(),
            live: Default::default(),
            read_turn: Mutex::new(()),
            releasing: Default::default(),
        }))
    }

    /// Answer every parked (blocked) request with `e`: used when the daemon
    /// goes away while readers still hold files open, so that they get an
    /// error instead of hanging.
    pub fn abort_parked(&self, e: Errno) {
        let parked: Vec<(u64, u64)> = self.parked.lock_ok().drain().collect();
        for (unique, fh) in parked {
            if let Some(hd) = self.handle(fh) {
                let mut pend = hd.pending.lock_ok();
                if let Some(i) = pend.iter().position(|p| p.unique == unique) {
                    pend.remove(i);
                    self.err(unique, e);
                }
            }
        }
    }

    /// Stop serving (CUSE sessions have no mount to take away): the request
    /// threads see the device closed.
    pub fn shutdown(&self) {
        self.destroyed.store(true, Ordering::SeqCst);
        let _ = self.wake_tx.send(Wake::Stop);
    }

    fn cuse_init(&self, u: u64, r: &mut Reader<'_>) {
        let Some(c) = &self.cuse else {
            return self.err(u, Errno::ENOSYS);
        };
        let major = r.u32().unwrap_or(0);
        if major != proto::KERNEL_VERSION {
            return self.err(u, Errno::EPROTO_COMPAT);
        }
        let mut w = proto::Writer::default();
        w.u32(proto::KERNEL_VERSION)
            .u32(proto::KERNEL_MINOR)
            .u32(0)
            .u32(proto::CUSE_UNRESTRICTED_IOCTL)
            .u32(MAX_WRITE)
            .u32(MAX_WRITE)
            .u32(c.major)
            .u32(c.minor)
            .zeros(40);
        w.0.extend_from_slice(format!("DEVNAME={}\0", c.name).as_bytes());
        debug!(device = %c.name, "CUSE INIT");
        self.ok(u, &w.0);
    }

    /// Learn the mount's device number (call once the session serves requests).
    fn learn_dev_id(&self) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(&self.mountpoint) {
            self.dev_id.store(m.dev(), Ordering::Relaxed);
        }
    }

    /// The mountpoint.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Serve requests on `threads` threads plus the service thread; returns when
    /// the filesystem is unmounted.
    pub fn run(self: &Arc<Self>, threads: usize) {
        // Request threads wait in epoll and read without blocking (see
        // `request_loop`).
        // SAFETY: fcntl on our own descriptor.
        unsafe {
            let fl = libc::fcntl(self.dev.as_raw_fd(), libc::F_GETFL);
            libc::fcntl(self.dev.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK);
        }
        self.spawn_server(true, "fuse-wake".into());
        for i in 0..threads.max(1) {
            self.spawn_server(false, format!("fuse-{i}"));
        }
        self.learn_dev_id();
        {
            let s = Arc::clone(self);
            let _ = std::thread::Builder::new()
                .name("fuse-watchdog".into())
                .spawn(move || s.watchdog_loop());
        }
        let mut live = self.live.0.lock_ok();
        while *live > 0 {
            live = self.live.1.wait_ok(live);
        }
        drop(live);
        self.destroyed.store(true, Ordering::SeqCst);
        let _ = self.wake_tx.send(Wake::Stop);
    }

    /// Start a serving thread: the service thread or a request thread.
    fn spawn_server(self: &Arc<Self>, service: bool, name: String) {
        let s = Arc::clone(self);
        if !service {
            *self.live.0.lock_ok() += 1;
        }
        let spawned = std::thread::Builder::new().name(name).spawn(move || {
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
    fn count_out(&self, slot: &watchdog::Slot) {
        if slot.count_out() {
            *self.live.0.lock_ok() -= 1;
            self.live.1.notify_all();
        }
    }

    /// Every 100 ms, fail the requests stuck on a caller's page and replace
    /// threads that are stuck (see [`watchdog`]).
    fn watchdog_loop(self: &Arc<Self>) {
        while !self.destroyed.load(Ordering::SeqCst) {
            std::thread::sleep(std::time::Duration::from_millis(100));
            crate::procmem::expire_idle();
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
                if self.watch.may_replace() {
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
    fn real_ino(&self, nodeid: u64) -> u64 {
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

    fn node(&self, nodeid: u64) -> Result<crate::vfs::Node, Errno> {
        self.tree.get(self.real_ino(nodeid))
    }

    fn forget(&self, nodeid: u64, n: u64) {
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

    fn request_loop(&self, slot: &watchdog::Slot) {
        let mut buf = vec![0u8; BUF_LEN];
        let ep = match RequestWait::new(&self.dev) {
            Ok(ep) => ep,
            Err(e) => {
                error!("cannot wait for FUSE requests (epoll): {e}");
                return;
            }
        };
        loop {
            // Wait for a request without taking it: the kernel wakes one
            // waiting thread per request. Then one thread at a time takes
            // one (the device is non-blocking), so that a RELEASE read
            // before a request is counted before that request is read (see
            // `wait_releases`); the turn is never held while idle.
            ep.wait();
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
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::ENOENT) => continue,
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
            let release = h.opcode == op::RELEASE;
            if release {
                *self.releasing.0.lock_ok() += 1;
            }
            drop(turn);
            if !release {
                self.wait_releases();
            }
            slot.begin(h.unique);
            let res = catch_unwind(AssertUnwindSafe(|| self.dispatch(&h, body)));
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
            if self.destroyed.load(Ordering::SeqCst) || slot.abandoned() {
                return;
            }
        }
    }

    /// Wait (up to a second) until the RELEASEs read before this request
    /// are done. close(2) queues a RELEASE before it returns, and the kernel
    /// has dropped the file's references by then: a request the caller
    /// makes next (a `DIAG_IOCSDEL` of the event the closed fd registered)
    /// must not see them, even when another thread serves it first.
    fn wait_releases(&self) {
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

    /// Write a reply (`error` 0 with `parts` as body, or a negative errno).
    fn send(&self, unique: u64, error: i32, parts: &[&[u8]]) {
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let mut hdr = proto::Writer::default();
        hdr.u32((proto::OUT_HEADER_LEN + body) as u32)
            .u32(error as u32)
            .u64(unique);
        let mut iov = Vec::with_capacity(parts.len() + 1);
        iov.push(IoSlice::new(&hdr.0));
        for p in parts {
            iov.push(IoSlice::new(p));
        }
        // SAFETY: IoSlice is ABI-compatible with iovec.
        let rc = unsafe {
            libc::writev(
                self.dev.as_raw_fd(),
                iov.as_ptr() as *const libc::iovec,
                iov.len() as i32,
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            // ENOENT: the request was interrupted and is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                debug!(unique, "reply failed: {e}");
            }
        }
    }

    fn ok(&self, unique: u64, body: &[u8]) {
        self.send(unique, 0, &[body]);
    }

    fn err(&self, unique: u64, e: Errno) {
        self.send(unique, -e.0, &[]);
    }

    /// FUSE_NOTIFY_INVAL_ENTRY: the kernel drops its cached entry `name` of
    /// directory `parent` (ENOENT if it had none: nothing to do).
    fn inval_entry(&self, parent: u64, name: &str) {
        let mut w = proto::Writer::default();
        w.u64(parent).u32(name.len() as u32).u32(0);
        w.0.extend_from_slice(name.as_bytes());
        w.0.push(0);
        self.notify(proto::notify::INVAL_ENTRY, &w.0);
    }

    /// Put `bytes` into the page cache of `nodeid` at `offset` (FUSE_NOTIFY_STORE),
    /// in pieces the kernel accepts.
    fn store(&self, nodeid: u64, offset: u64, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(MAX_WRITE as usize).enumerate() {
            let mut w = proto::Writer::default();
            w.u64(nodeid)
                .u64(offset + (i * MAX_WRITE as usize) as u64)
                .u32(chunk.len() as u32)
                .u32(0);
            self.send(0, proto::notify::STORE, &[&w.0, chunk]);
        }
    }

    /// Send a notification (unique 0).
    fn notify(&self, code: i32, body: &[u8]) {
        self.send(0, code, &[body]);
    }

    /// The size of the content of the newest open snapshot of `ino`: while
    /// one is open, attribute replies must not set the inode's size back to
    /// 0 under a sendfile (see `open`).
    fn open_snapshot_size(&self, ino: u64) -> Option<u64> {
        self.handles
            .read_ok()
            .iter()
            .filter(|(_, hd)| hd.nodeid == ino)
            .filter_map(|(fh, hd)| hd.file.content().map(|c| (*fh, c.len() as u64)))
            .max()
            .map(|(_, len)| len)
    }

    fn attr(&self, node: &crate::vfs::Node) -> proto::Attr {
        proto::Attr {
            ino: node.ino,
            size: match &node.kind {
                NodeKind::Symlink(t) => t.len() as u64,
                NodeKind::File(f) => self
                    .open_snapshot_size(node.ino)
                    .unwrap_or_else(|| f.size()),
                NodeKind::Dir => 0,
            },
            time: 0,
            mode: node.st_mode(),
            nlink: if matches!(node.kind, NodeKind::Dir) {
                2
            } else {
                1
            },
            uid: self.tree.uid,
            gid: self.tree.gid,
            rdev: 0,
        }
    }

    fn handle(&self, fh: u64) -> Option<Arc<Handle>> {
        self.handles.read_ok().get(&fh).cloned()
    }

    fn dispatch(&self, h: &InHeader, body: &[u8]) {
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
                let name = r.cstr().unwrap_or("");
                match self.tree.lookup(self.real_ino(h.nodeid), name) {
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
                Ok(crate::vfs::Node {
                    kind: NodeKind::Symlink(t),
                    ..
                }) => self.ok(u, t.as_bytes()),
                Ok(_) => self.err(u, Errno::EINVAL),
                Err(e) => self.err(u, e),
            },
            op::OPEN => {
                let flags = r.u32().unwrap_or(0) as i32;
                self.open(u, h.nodeid, flags, &caller);
            }
            op::READ => {
                let fh = r.u64().unwrap_or(0);
                let offset = r.u64().unwrap_or(0);
                let size = r.u32().unwrap_or(0);
                let read_flags = r.u32().unwrap_or(0);
                let _lock_owner = r.u64();
                let flags = r.u32().unwrap_or(0) as i32;
                if read_flags & proto::READ_LOCKOWNER == 0 {
                    // Not a read(2) (those carry a lock owner on direct-I/O files):
                    // the page cache filling in pages for a mapping.
                    match self.handle(fh) {
                        Some(hd) => self.finish(u, hd.file.read_mapped(offset, size)),
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
                let _ = r.u32();
                let _ = r.u64();
                let _ = r.u32();
                let _ = r.u32();
                let data = r.rest();
                let data = &data[..size.min(data.len())];
                match self.handle(fh) {
                    Some(hd) => match hd.file.write_by(offset, data, &caller) {
                        Ok(n) => {
                            let mut w = proto::Writer::default();
                            w.u32(n).u32(0);
                            self.ok(u, &w.0)
                        }
                        Err(e) => self.err(u, e),
                    },
                    None => self.err(u, Errno::EBADF),
                }
            }
            op::RELEASE => {
                let fh = r.u64().unwrap_or(0);
                let hd = self.handles.write_ok().remove(&fh);
                if let Some(hd) = hd {
                    let mut pend = hd.pending.lock_ok();
                    for p in pend.drain(..) {
                        self.parked.lock_ok().remove(&p.unique);
                        self.err(p.unique, Errno::EBADF);
                    }
                    drop(pend);
                    hd.file.release();
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

    fn init(&self, u: u64, r: &mut Reader<'_>) {
        let major = r.u32().unwrap_or(0);
        let minor = r.u32().unwrap_or(0);
        let max_readahead = r.u32().unwrap_or(0);
        let flags = r.u32().unwrap_or(0) as u64;
        let flags2 = r.u32().map(|f| (f as u64) << 32).unwrap_or(0);
        let kflags = flags | flags2;
        if major != proto::KERNEL_VERSION {
            warn!(major, minor, "unsupported FUSE protocol");
            self.err(u, Errno::EPROTO_COMPAT);
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
    }

    fn getattr(&self, h: &InHeader, _r: &mut Reader<'_>) {
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

    fn open(&self, u: u64, ino: u64, flags: i32, caller: &Caller) {
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
            poll_kh: Mutex::new(None),
        });
        self.handles.write_ok().insert(fh, Arc::clone(&hd));
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

    fn readdir(&self, u: u64, ino: u64, offset: u64, size: usize) {
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

    fn read(&self, u: u64, fh: u64, offset: u64, size: u32, nonblock: bool) {
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

    fn ioctl(&self, u: u64, r: &mut Reader<'_>, caller: Caller) {
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

    /// Try a request; park it if it would block. No lock is held while it
    /// runs: it may reach into the caller's memory.
    fn run_or_park(&self, hd: &Arc<Handle>, fh: u64, u: u64, what: Parked, nonblock: bool) {
        if hd.pending.lock_ok().is_empty() {
            // Not armed: a request that is answered at once must not make the
            // next event wake the service thread. If it parks, `service` arms
            // the waker before it tries again, so no event is missed.
            let mut nonblock = nonblock;
            let mut res = self.attempt(hd, &what, nonblock, false);
            if res == Err(Errno::EAGAIN) {
                if let Some(live) = self.ioctl_nonblock(hd, &what).filter(|l| *l != nonblock) {
                    nonblock = live;
                    if live {
                        res = self.attempt(hd, &what, true, true);
                    }
                }
            }
            match res {
                Err(e) if e == Errno::EAGAIN && !nonblock => {}
                res => return self.finish(u, res),
            }
        }
        let mut pend = hd.pending.lock_ok();
        pend.push_back(Pending {
            unique: u,
            what,
            attempting: false,
            interrupted: false,
        });
        self.parked.lock_ok().insert(u, fh);
        drop(pend);
        // Something may have arrived between the attempt and parking.
        self.service(fh);
    }

    /// The caller's current O_NONBLOCK for an ioctl that would block. An
    /// ioctl request does not carry the file flags (a read does), and the
    /// flags seen at open go stale after `fcntl(F_SETFL)`, as libpcap's
    /// `pcap_setnonblock` does; so ask /proc, only on this slow path. None
    /// for reads, CUSE ioctls (the descriptor is on another inode) and when
    /// /proc does not tell.
    fn ioctl_nonblock(&self, hd: &Handle, what: &Parked) -> Option<bool> {
        let Parked::Ioctl(c) = what else { return None };
        if c.cuse.is_some() {
            return None;
        }
        let dev = self.dev_id.load(Ordering::Relaxed);
        crate::procmem::fd_nonblock(c.caller.pid, dev, hd.nodeid)
    }

    /// Run a request once.
    fn attempt(
        &self,
        hd: &Handle,
        what: &Parked,
        nonblock: bool,
        retry: bool,
    ) -> Result<Vec<u8>, Errno> {
        match what {
            Parked::Read { offset, size } => hd.file.read(*offset, *size),
            Parked::Ioctl(c) => {
                if let Some((layout, data)) = &c.cuse {
                    return self.cuse_ioctl(hd, c, layout, data, nonblock, retry);
                }
                let mem = crate::procmem::ProcessMemory(c.caller.pid);
                let req = IoctlRequest {
                    cmd: c.cmd,
                    arg: c.arg,
                    input: &c.input,
                    out_size: c.out_size,
                    nonblock,
                    caller: c.caller,
                    retry,
                    file_id: (self.dev_id.load(Ordering::Relaxed), c.nodeid),
                    mem: &mem,
                    compat: c.compat,
                };
                hd.file.ioctl(&req).map(|rep| {
                    for (off, bytes) in &rep.cache_updates {
                        self.store(c.nodeid, *off, bytes);
                    }
                    let mut w = proto::Writer::default();
                    w.u32(rep.result as u32).u32(0).u32(0).u32(0);
                    let n = rep.output.len().min(c.out_size as usize);
                    w.0.extend_from_slice(&rep.output[..n]);
                    w.0
                })
            }
        }
    }

    /// Answer an unrestricted (CUSE) ioctl with FUSE_IOCTL_RETRY and the ranges
    /// the kernel should copy in and out on the next attempt.
    fn ioctl_retry(&self, u: u64, layout: &IoctlLayout) {
        let mut w = proto::Writer::default();
        w.u32(0)
            .u32(proto::ioctl_flags::RETRY)
            .u32(layout.input.len() as u32)
            .u32(layout.output.len() as u32);
        for (base, len) in layout.input.iter().chain(layout.output.iter()) {
            w.u64(*base).u64(*len);
        }
        self.ok(u, &w.0);
    }

    /// Run a CUSE ioctl whose memory the kernel has copied in; the bytes it
    /// writes go back in the reply, laid out over the declared output ranges.
    fn cuse_ioctl(
        &self,
        hd: &Handle,
        c: &IoctlCall,
        layout: &IoctlLayout,
        data: &[u8],
        nonblock: bool,
        retry: bool,
    ) -> Result<Vec<u8>, Errno> {
        let mem = IovMemory::new(layout, data);
        let first = layout.input.first().map(|r| r.1 as usize).unwrap_or(0);
        let req = IoctlRequest {
            cmd: c.cmd,
            arg: c.arg,
            input: &data[..first.min(data.len())],
            out_size: 0,
            nonblock,
            caller: c.caller,
            retry,
            file_id: (0, c.nodeid),
            mem: &mem,
            compat: c.compat,
        };
        let rep = hd.file.ioctl(&req)?;
        if !rep.output.is_empty() {
            mem.write(c.arg, &rep.output)?;
        }
        let mut w = proto::Writer::default();
        w.u32(rep.result as u32).u32(0).u32(0).u32(0);
        w.0.extend_from_slice(&mem.reply_bytes());
        Ok(w.0)
    }

    fn finish(&self, u: u64, res: Result<Vec<u8>, Errno>) {
        match res {
            Ok(d) => self.ok(u, &d),
            Err(e) => self.err(u, e),
        }
    }

    /// Retry a handle's parked requests until one would still block. Each
    /// runs without the queue's lock (it may reach into the caller's
    /// memory), so an interrupt or a release never waits for it.
    fn retry_parked(&self, hd: &Arc<Handle>) {
        loop {
            let (unique, what) = {
                let mut pend = hd.pending.lock_ok();
                match pend.front_mut() {
                    Some(p) if !p.attempting => {
                        p.attempting = true;
                        (p.unique, p.what.clone())
                    }
                    // Empty, or a retry of it never came back (the watchdog
                    // has answered it): this handle's queue stays stuck.
                    _ => return,
                }
            };
            hd.armed.store(true, Ordering::SeqCst);
            watchdog::working_on(unique);
            let res = catch_unwind(AssertUnwindSafe(|| self.attempt(hd, &what, false, true)))
                .unwrap_or_else(|e| {
                    error!(
                        unique,
                        opcode = what.opcode(),
                        nodeid = hd.nodeid,
                        "parked request panicked on retry, answering EIO: {}",
                        panic_message(&*e)
                    );
                    Err(Errno::EIO)
                });
            let mut pend = hd.pending.lock_ok();
            let Some(i) = pend.iter().position(|p| p.unique == unique) else {
                // Answered meanwhile (the handle was released).
                return;
            };
            let res = match res {
                Err(e) if e == Errno::EAGAIN && !pend[i].interrupted => {
                    pend[i].attempting = false;
                    return;
                }
                Err(e) if e == Errno::EAGAIN => Err(Errno::EINTR),
                res => res,
            };
            pend.remove(i);
            drop(pend);
            self.parked.lock_ok().remove(&unique);
            self.finish(unique, res);
        }
    }

    /// Retry the parked requests of a handle, oldest first, then answer a
    /// poll that waits for it. One thread retries a handle at a time; one
    /// that comes meanwhile leaves a note, and the retrying thread looks
    /// again before it stops.
    fn service(&self, fh: u64) {
        let Some(hd) = self.handle(fh) else { return };
        hd.again.store(true, Ordering::SeqCst);
        while !hd.servicing.swap(true, Ordering::SeqCst) {
            hd.again.store(false, Ordering::SeqCst);
            self.retry_parked(&hd);
            hd.servicing.store(false, Ordering::SeqCst);
            if !hd.again.load(Ordering::SeqCst) {
                break;
            }
        }
        let kh = *hd.poll_kh.lock_ok();
        if let Some(kh) = kh {
            if hd.file.poll() != 0 {
                *hd.poll_kh.lock_ok() = None;
                let mut w = proto::Writer::default();
                w.u64(kh);
                self.notify(proto::notify::POLL, &w.0);
            } else {
                hd.armed.store(true, Ordering::SeqCst);
            }
        }
    }

    fn service_loop(&self, slot: &watchdog::Slot) {
        while let Ok(w) = self.wake_rx.recv() {
            if matches!(w, Wake::Stop) {
                return;
            }
            slot.begin(0);
            let r = catch_unwind(AssertUnwindSafe(|| match w {
                Wake::Handle(fh) => self.service(fh),
                Wake::Store(ino, off, bytes) => self.store(ino, off, &bytes),
                Wake::InvalEntry(parent, name) => self.inval_entry(parent, &name),
                Wake::Stop => {} // returned above
            }));
            slot.end();
            if let Err(p) = r {
                error!("service thread panicked: {}", panic_message(&*p));
            }
            if slot.abandoned() {
                return;
            }
        }
    }

    fn interrupt(&self, u: u64, target: u64) {
        let fh = self.parked.lock_ok().get(&target).copied();
        match fh.and_then(|fh| self.handle(fh)) {
            Some(hd) => {
                let mut pend = hd.pending.lock_ok();
                if let Some(i) = pend.iter().position(|p| p.unique == target) {
                    if pend[i].attempting {
                        // Answered when that retry ends: EINTR unless it
                        // completed the request.
                        pend[i].interrupted = true;
                    } else {
                        pend.remove(i);
                        self.parked.lock_ok().remove(&target);
                        debug!(target, "interrupted parked request");
                        self.err(target, Errno::EINTR);
                    }
                }
                // Otherwise it was answered meanwhile: nothing to do.
            }
            // Not parked (yet): ask the kernel to send the interrupt again. If the
            // request was already answered the kernel drops this reply.
            None => self.err(u, Errno::EAGAIN),
        }
    }
}

impl Errno {
    /// EPROTO, answered to an INIT with an unknown major version.
    pub const EPROTO_COMPAT: Errno = Errno(libc::EPROTO);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CUSE GETX: the kernel copied the 24-byte argument in; the handler's
    /// header and data writes come back laid out over the output ranges, the
    /// last one short.
    #[test]
    fn iov_memory_lays_out_writes_over_output_ranges() {
        let mut arg = Vec::new();
        arg.extend_from_slice(&0x1000u64.to_ne_bytes());
        arg.extend_from_slice(&0x2000u64.to_ne_bytes());
        arg.extend_from_slice(&100u64.to_ne_bytes());
        let layout = crate::usbmon::binary::BinReader::ioctl_layout(
            crate::usbmon::binary::ioc::GETX,
            0x500,
            &arg,
            false,
        );
        assert_eq!(layout.input, vec![(0x500, 24)]);
        assert_eq!(layout.output, vec![(0x1000, 64), (0x2000, 100)]);
        let mem = IovMemory::new(&layout, &arg);
        assert_eq!(mem.read(0x508, 8).unwrap(), 0x2000u64.to_ne_bytes());
        assert_eq!(mem.read(0x600, 8).err(), Some(Errno::EFAULT));
        mem.write(0x1000, &[7u8; 64]).unwrap();
        mem.write(0x2000, &[9u8; 10]).unwrap();
        assert_eq!(mem.write(0x3000, &[1]).err(), Some(Errno::EFAULT));
        let reply = mem.reply_bytes();
        assert_eq!(reply.len(), 74);
        assert_eq!(&reply[..64], &[7u8; 64][..]);
        assert_eq!(&reply[64..], &[9u8; 10][..]);
    }

    #[test]
    fn first_cuse_layout_asks_for_the_argument_struct() {
        let l = crate::usbmon::binary::BinReader::ioctl_layout(
            crate::usbmon::binary::ioc::MFETCH,
            0x500,
            &[],
            false,
        );
        assert_eq!(l.input, vec![(0x500, 16)]);
        assert!(l.output.is_empty());
        let stats = crate::usbmon::binary::BinReader::ioctl_layout(
            crate::usbmon::binary::ioc::STATS,
            0x700,
            &[],
            false,
        );
        assert_eq!(stats.output, vec![(0x700, 8)]);
    }
}
