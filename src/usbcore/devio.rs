//! usbfs: `dev/bus/usb/BBB/DDD`, one file per device and root hub, as
//! `drivers/usb/core/devio.c` serves them. `read()` gives the device
//! descriptor and every raw configuration descriptor; the ioctls claim
//! interfaces, run synchronous control and bulk transfers, and submit,
//! reap and discard asynchronous URBs; `poll()` says POLLOUT when a URB
//! can be reaped and POLLERR|POLLHUP once the device is gone.
//!
//! The files are regular FUSE files, so the kernel passes their ioctls in
//! restricted mode: it copies `_IOC_SIZE(cmd)` bytes in or out of the
//! argument by the command's direction bits and nothing else. Everything
//! else a command touches (a control transfer's data, a URB's buffer and
//! packet descriptors, the URB pointer REAPURB hands back, the URB struct
//! of the `_IOR` commands the kernel reads) is read and written in the
//! caller's memory through [`crate::base::vfs::CallerMemory`]
//! (process_vm_readv/writev on the caller's pid): a bad pointer is EFAULT,
//! and nothing else is touched.
//!
//! Memory: each URB and synchronous transfer is charged to a mount-wide
//! budget of [`USBFS_MEMORY_MB`] MiB by the amounts devio.c charges
//! (ENOMEM past it), released when the URB is reaped or the file closed.

use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, IoctlReply, IoctlRequest, NodeKind, OpenFile, OpenFlags, Tree, Waker,
};

use super::abi::{self, u16_at, u32_at, u64_at};
use super::device::{
    CoreError, CoreRequest, DevRef, DeviceChange, DeviceWatcher, TransferType, UrbDone, UrbRequest,
    UrbResult, UsbCorePort, UsbDevice,
};

/// devio.c's `usbfs_memory_mb` default: what all callers' URBs may hold.
pub const USBFS_MEMORY_MB: u64 = 16;
/// `sizeof(struct urb)` on x86_64.
const STRUCT_URB: u64 = 192;
/// `sizeof(struct async)` on x86_64.
const STRUCT_ASYNC: u64 = 112;
/// `sizeof(struct usb_ctrlrequest)`.
const STRUCT_CTRLREQ: u64 = 8;
/// `sizeof(struct usb_iso_packet_descriptor)`.
const STRUCT_ISO_DESC: u64 = 16;
/// PAGE_SIZE: the longest USBDEVFS_CONTROL data stage.
const PAGE: u64 = 4096;
/// USBFS_XFER_MAX.
const XFER_MAX: u64 = (u32::MAX / 2 - 1_000_000) as u64;
/// devio.c's limit on an isochronous URB's packets.
const MAX_PACKETS: u32 = 128;
/// devio.c's limit on one isochronous packet (96 × 1024).
const MAX_PACKET_LEN: u32 = 98304;
/// URB_DIR_IN, URB_SHORT_NOT_OK, URB_ISO_ASAP, URB_ZERO_PACKET,
/// URB_NO_INTERRUPT of the kernel's `transfer_flags`.
const K_DIR_IN: u32 = 0x0200;
const K_SHORT_NOT_OK: u32 = 0x0001;
const K_ISO_ASAP: u32 = 0x0002;
const K_ZERO_PACKET: u32 = 0x0040;
const K_NO_INTERRUPT: u32 = 0x0080;
/// Longest a synchronous transfer of a caller whose file is non-blocking
/// holds the request thread (FUSE gives such a caller EAGAIN if the
/// daemon answers EAGAIN; usbfs blocks anyway).
const NONBLOCK_WAIT_MAX: Duration = Duration::from_secs(60);
/// ENODATA.
const ENODATA: Errno = Errno(libc::ENODATA);
/// EHOSTUNREACH.
const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
/// EREMOTEIO.
const EREMOTEIO: Errno = Errno(libc::EREMOTEIO);
/// ETIMEDOUT.
const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
/// EPIPE.
const EPIPE: Errno = Errno(libc::EPIPE);
/// ECONNRESET (an URB unlinked asynchronously).
const ECONNRESET: i32 = -104;

fn core_errno(e: CoreError) -> Errno {
    Errno(e.errno())
}

/// The mount-wide memory budget (`usbfs_memory_usage`).
struct Budget {
    used: Mutex<u64>,
    limit: u64,
}

impl Budget {
    fn charge(&self, n: u64) -> SysResult<()> {
        let mut u = self.used.lock_ok();
        if self.limit > 0 && *u + n > self.limit {
            return Err(Errno::ENOMEM);
        }
        *u += n;
        Ok(())
    }
    fn release(&self, n: u64) {
        let mut u = self.used.lock_ok();
        *u = u.saturating_sub(n);
    }
}

/// Wakes files whose synchronous transfer reaches its timeout.
struct Timer {
    q: Mutex<BinaryHeap<std::cmp::Reverse<(Instant, u64)>>>,
    files: Mutex<HashMap<u64, Weak<Ps>>>,
    cv: Condvar,
    stop: AtomicBool,
}

impl Timer {
    fn run(self: Arc<Timer>) {
        let mut q = self.q.lock_ok();
        while !self.stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            match q.peek().copied() {
                Some(std::cmp::Reverse((t, id))) if t <= now => {
                    q.pop();
                    let f = self.files.lock_ok().get(&id).and_then(|w| w.upgrade());
                    if let Some(ps) = f {
                        drop(q);
                        ps.wake();
                        q = self.q.lock_ok();
                    }
                }
                Some(std::cmp::Reverse((t, _))) => {
                    q = match self.cv.wait_timeout(q, t - now) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                }
                None => {
                    q = match self.cv.wait_timeout(q, Duration::from_secs(1)) {
                        Ok((g, _)) => g,
                        Err(p) => p.into_inner().0,
                    };
                }
            }
        }
    }

    fn at(&self, t: Instant, file: u64) {
        self.q.lock_ok().push(std::cmp::Reverse((t, file)));
        self.cv.notify_one();
    }
}

/// One device's node and the files open on it.
struct DevEntry {
    dev: DevRef,
    path: String,
    gone: AtomicBool,
    files: Mutex<Vec<Weak<Ps>>>,
}

/// usbfs: the `dev/bus/usb` files of every device the port lists.
pub struct UsbFs {
    port: Arc<dyn UsbCorePort>,
    tree: Weak<Tree>,
    budget: Budget,
    devs: Mutex<HashMap<DevRef, Arc<DevEntry>>>,
    timer: Arc<Timer>,
    next_file: AtomicU64,
}

impl UsbFs {
    /// Serve usbfs for `port`'s devices under `dev/bus/usb` of `tree`:
    /// a directory per bus, a file per registered device, kept current
    /// as devices come and go.
    pub fn install(tree: &Arc<Tree>, port: Arc<dyn UsbCorePort>, buses: &[u16]) -> Arc<UsbFs> {
        let timer = Arc::new(Timer {
            q: Mutex::new(BinaryHeap::new()),
            files: Mutex::new(HashMap::new()),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let t = timer.clone();
        let _ = std::thread::Builder::new()
            .name("usbfs-timer".into())
            .spawn(move || t.run());
        let fs = Arc::new(UsbFs {
            port: port.clone(),
            tree: Arc::downgrade(tree),
            budget: Budget {
                used: Mutex::new(0),
                limit: USBFS_MEMORY_MB << 20,
            },
            devs: Mutex::new(HashMap::new()),
            timer,
            next_file: AtomicU64::new(1),
        });
        for b in buses {
            tree.add(&format!("dev/bus/usb/{b:03}"), NodeKind::Dir, 0o755);
        }
        port.watch(Arc::new(Watcher(Arc::downgrade(&fs))));
        for d in port.devices() {
            fs.added(&d);
        }
        fs
    }

    /// Memory charged to callers' transfers now, bytes.
    pub fn memory_used(&self) -> u64 {
        *self.budget.used.lock_ok()
    }

    fn added(self: &Arc<Self>, d: &UsbDevice) {
        let path = format!("dev/bus/usb/{:03}/{:03}", d.busnum, d.devnum);
        let entry = {
            let mut devs = self.devs.lock_ok();
            if devs.contains_key(&d.dev) {
                return;
            }
            let e = Arc::new(DevEntry {
                dev: d.dev,
                path: path.clone(),
                gone: AtomicBool::new(false),
                files: Mutex::new(Vec::new()),
            });
            devs.insert(d.dev, e.clone());
            e
        };
        if let Some(tree) = self.tree.upgrade() {
            let node = DevNode {
                fs: self.clone(),
                entry,
            };
            tree.add(&path, NodeKind::File(Arc::new(node)), 0o664);
        }
    }

    fn removed(&self, dev: DevRef) {
        let Some(e) = self.devs.lock_ok().remove(&dev) else {
            return;
        };
        e.gone.store(true, Ordering::SeqCst);
        // The node goes unless another device took its name already.
        let taken = self.devs.lock_ok().values().any(|o| o.path == e.path);
        if let Some(tree) = self.tree.upgrade().filter(|_| !taken) {
            tree.remove(&e.path);
        }
        let files: Vec<Arc<Ps>> = e
            .files
            .lock_ok()
            .iter()
            .filter_map(|w| w.upgrade())
            .collect();
        for ps in files {
            ps.disconnected();
        }
    }
}

impl Drop for UsbFs {
    fn drop(&mut self) {
        self.timer.stop.store(true, Ordering::Relaxed);
        self.timer.cv.notify_all();
    }
}

/// The port tells usbfs of plugs and unplugs.
struct Watcher(Weak<UsbFs>);

impl DeviceWatcher for Watcher {
    fn changed(&self, change: &DeviceChange) {
        let Some(fs) = self.0.upgrade() else {
            return;
        };
        match change {
            DeviceChange::Added(d) => fs.added(d),
            DeviceChange::Changed(_) => {}
            DeviceChange::Removed(dev) => fs.removed(*dev),
        }
    }
}

/// The node of one device.
struct DevNode {
    fs: Arc<UsbFs>,
    entry: Arc<DevEntry>,
}

impl FileNode for DevNode {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        if self.entry.gone.load(Ordering::SeqCst) {
            return Err(Errno::ENODEV);
        }
        let id = self.fs.next_file.fetch_add(1, Ordering::Relaxed);
        let ps = Arc::new(Ps {
            fs: self.fs.clone(),
            entry: self.entry.clone(),
            id,
            writable: flags.writable(),
            opener: caller.pid,
            st: Mutex::new(PsState {
                allowed: u32::MAX as u64,
                ..Default::default()
            }),
            waker: Mutex::new(None),
        });
        self.fs
            .timer
            .files
            .lock_ok()
            .insert(id, Arc::downgrade(&ps));
        {
            let mut files = self.entry.files.lock_ok();
            files.retain(|w| w.strong_count() > 0);
            files.push(Arc::downgrade(&ps));
        }
        if self.entry.gone.load(Ordering::SeqCst) {
            ps.disconnected();
        }
        Ok(Arc::new(UsbDevFile(ps)))
    }
}

/// One asynchronous URB of a file (devio.c's `struct async`).
struct Async {
    key: u64,
    /// The caller's `struct usbdevfs_urb`.
    userurb: u64,
    /// The caller's buffer for IN data (0 for OUT).
    userbuffer: u64,
    /// The port's id once submitted.
    urb_id: Option<u64>,
    xfer: TransferType,
    /// Packet lengths of an isochronous URB.
    iso: Vec<u32>,
    mem: u64,
    ifnum: i32,
    /// Bulk endpoint number with the direction at 0x10.
    bulk_addr: Option<u8>,
    result: Option<UrbResult>,
}

/// A synchronous CONTROL or BULK in progress for one thread.
struct SyncXfer {
    urb_id: Option<u64>,
    deadline: Option<Instant>,
    /// Where IN data goes (0: OUT).
    data: u64,
    mem: u64,
    result: Option<UrbResult>,
    /// The request (cmd) it belongs to.
    cmd: u32,
}

#[derive(Default)]
struct PsState {
    ifclaimed: u64,
    allowed: u64,
    privileges_dropped: bool,
    disabled_bulk_eps: u32,
    pending: Vec<Async>,
    completed: VecDeque<Async>,
    sync: HashMap<u32, SyncXfer>,
    /// The device is gone (usbdev_remove ran).
    disconnected: bool,
    /// DISCSIGNAL: signal and the pidfd of the process to send it to.
    discsig: Option<(i32, i32)>,
    next_key: u64,
    released: bool,
}

/// An open file (devio.c's `struct usb_dev_state`).
struct Ps {
    fs: Arc<UsbFs>,
    entry: Arc<DevEntry>,
    id: u64,
    writable: bool,
    opener: u32,
    st: Mutex<PsState>,
    waker: Mutex<Option<Waker>>,
}

impl Ps {
    fn dev(&self) -> DevRef {
        self.entry.dev
    }

    fn wake(&self) {
        let w = self.waker.lock_ok().clone();
        if let Some(w) = w {
            w();
        }
    }

    fn port(&self) -> &Arc<dyn UsbCorePort> {
        &self.fs.port
    }

    /// usbdev_remove: the device went away.
    fn disconnected(&self) {
        let sig = {
            let mut st = self.st.lock_ok();
            if st.disconnected {
                return;
            }
            st.disconnected = true;
            st.discsig.take()
        };
        if let Some((signr, pidfd)) = sig {
            // kill_pid_usb_asyncio with EPIPE; delivered as a plain
            // signal (a daemon cannot queue SI_ASYNCIO to another process).
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd,
                    signr,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
                libc::close(pidfd);
            }
        }
        self.wake();
    }

    fn connected(&self) -> bool {
        !self.st.lock_ok().disconnected && !self.entry.gone.load(Ordering::SeqCst)
    }

    fn device(&self) -> SysResult<UsbDevice> {
        self.port().device(self.dev()).ok_or(Errno::ENODEV)
    }

    /// claimintf.
    fn claim(&self, ifnum: u32) -> SysResult<()> {
        if ifnum >= 64 {
            return Err(Errno::EINVAL);
        }
        {
            let st = self.st.lock_ok();
            if st.ifclaimed & (1 << ifnum) != 0 {
                return Ok(());
            }
            if st.privileges_dropped && st.allowed & (1 << ifnum) == 0 {
                return Err(Errno::EACCES);
            }
        }
        let d = self.device()?;
        if d.interface(ifnum as u8).is_none() {
            return Err(Errno::ENOENT);
        }
        self.port()
            .claim_interface(self.dev(), ifnum as u8, self.id)
            .map_err(core_errno)?;
        self.st.lock_ok().ifclaimed |= 1 << ifnum;
        Ok(())
    }

    /// releaseintf.
    fn release_intf(&self, ifnum: u32) -> SysResult<()> {
        if ifnum >= 64 {
            return Err(Errno::EINVAL);
        }
        let d = self.device()?;
        if d.interface(ifnum as u8).is_none() {
            return Err(Errno::ENOENT);
        }
        let had = {
            let mut st = self.st.lock_ok();
            let had = st.ifclaimed & (1 << ifnum) != 0;
            st.ifclaimed &= !(1 << ifnum);
            had
        };
        if had {
            let _ = self
                .port()
                .release_interface(self.dev(), ifnum as u8, self.id);
        }
        Ok(())
    }

    /// checkintf: the interface must be claimed (claimed now if not).
    fn checkintf(&self, d: &UsbDevice, ifnum: u32) -> SysResult<()> {
        if d.active_config == 0 {
            return Err(EHOSTUNREACH);
        }
        if ifnum >= 64 {
            return Err(Errno::EINVAL);
        }
        if self.st.lock_ok().ifclaimed & (1 << ifnum) != 0 {
            return Ok(());
        }
        warn!(
            "usbfs: process {} ({}) did not claim interface {} before use",
            self.opener,
            crate::base::procmem::comm_of(self.opener),
            ifnum
        );
        self.claim(ifnum)
    }

    /// Kill the URBs of `keys` (usb_kill_urb: each completes with -ENOENT).
    fn kill(&self, ids: Vec<u64>) {
        for id in ids {
            let _ = self.port().cancel(self.dev(), id);
        }
    }

    /// destroy_async_on_interface.
    fn destroy_on_interface(&self, ifnum: i32) {
        let ids: Vec<u64> = self
            .st
            .lock_ok()
            .pending
            .iter()
            .filter(|a| a.ifnum == ifnum)
            .filter_map(|a| a.urb_id)
            .collect();
        self.kill(ids);
    }

    /// A URB of this file completed.
    fn async_done(&self, key: u64, result: UrbResult) {
        {
            let mut st = self.st.lock_ok();
            let Some(pos) = st.pending.iter().position(|a| a.key == key) else {
                return;
            };
            let mut a = st.pending.remove(pos);
            if result.status < 0 && result.status != -2 && result.status != ECONNRESET {
                if let Some(b) = a.bulk_addr {
                    st.disabled_bulk_eps |= 1 << b;
                }
            }
            a.result = Some(result);
            st.completed.push_back(a);
        }
        self.wake();
    }

    fn sync_done(&self, tid: u32, id: u64, result: UrbResult) {
        {
            let mut st = self.st.lock_ok();
            match st.sync.get_mut(&tid) {
                Some(s) if s.urb_id.is_none_or(|u| u == id) => s.result = Some(result),
                _ => return,
            }
        }
        self.wake();
    }

    /// The last close: claims released, URBs killed, memory given back.
    fn release(&self) {
        let (claimed, ids) = {
            let mut st = self.st.lock_ok();
            if st.released {
                return;
            }
            st.released = true;
            let ids: Vec<u64> = st
                .pending
                .iter()
                .filter_map(|a| a.urb_id)
                .chain(st.sync.values().filter_map(|s| s.urb_id))
                .collect();
            (st.ifclaimed, ids)
        };
        for i in 0..64 {
            if claimed & (1 << i) != 0 {
                let _ = self.port().release_interface(self.dev(), i as u8, self.id);
            }
        }
        self.kill(ids);
        let mut st = self.st.lock_ok();
        let mut mem: u64 = st.pending.drain(..).map(|a| a.mem).sum();
        mem += st.completed.drain(..).map(|a| a.mem).sum::<u64>();
        mem += st.sync.drain().map(|(_, s)| s.mem).sum::<u64>();
        if let Some((_, fd)) = st.discsig.take() {
            unsafe { libc::close(fd) };
        }
        drop(st);
        self.fs.budget.release(mem);
        self.fs.timer.files.lock_ok().remove(&self.id);
    }
}

/// Completion of an asynchronous URB.
struct AsyncDone {
    ps: Weak<Ps>,
    key: u64,
}

impl UrbDone for AsyncDone {
    fn done(&self, _urb: u64, result: UrbResult) {
        if let Some(ps) = self.ps.upgrade() {
            ps.async_done(self.key, result);
        }
    }
}

/// Completion of a synchronous transfer or core request.
struct SyncDone {
    ps: Weak<Ps>,
    tid: u32,
}

impl UrbDone for SyncDone {
    fn done(&self, urb: u64, result: UrbResult) {
        if let Some(ps) = self.ps.upgrade() {
            ps.sync_done(self.tid, urb, result);
        }
    }
}

/// findintfep: the interface (of any setting of the active configuration)
/// that has endpoint `ep`.
fn findintfep(d: &UsbDevice, ep: u32) -> SysResult<u32> {
    if ep & !(0x80 | 0x0f) != 0 {
        return Err(Errno::EINVAL);
    }
    let cfg = d.config(d.active_config).ok_or(Errno::ESRCH)?;
    let mut intf = None;
    for desc in descriptors(cfg) {
        match desc.get(1) {
            Some(4) if desc.len() >= 9 => intf = Some(desc[2]),
            Some(5) if desc.len() >= 7 && desc[2] as u32 == ep => {
                if let Some(i) = intf {
                    return Ok(i as u32);
                }
            }
            _ => {}
        }
    }
    Err(Errno::ENOENT)
}

/// The endpoint descriptor of `ep` in the current settings of the active
/// configuration (the kernel's `ep_in[]`/`ep_out[]`); ep0 is control.
fn endpoint(d: &UsbDevice, ep: u8) -> Option<(u8, u8, u16)> {
    if ep & 0x0f == 0 {
        return Some((0, 0, d.descriptor[7] as u16));
    }
    let cfg = d.config(d.active_config)?;
    let mut cur = false;
    for desc in descriptors(cfg) {
        match desc.get(1) {
            Some(4) if desc.len() >= 9 => {
                cur = d.interface(desc[2]).is_some_and(|i| i.alt == desc[3]);
            }
            Some(5) if cur && desc.len() >= 7 && desc[2] == ep => {
                return Some((desc[3] & 3, desc[6], u16_at(desc, 4)));
            }
            _ => {}
        }
    }
    None
}

/// The descriptors of a configuration, one slice each.
fn descriptors(cfg: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut off = 0;
    std::iter::from_fn(move || {
        let len = *cfg.get(off)? as usize;
        if len < 2 || off + len > cfg.len() {
            return None;
        }
        let d = &cfg[off..off + len];
        off += len;
        Some(d)
    })
}

/// The open file.
struct UsbDevFile(Arc<Ps>);

impl UsbDevFile {
    fn ps(&self) -> &Arc<Ps> {
        &self.0
    }

    /// check_ctrlrecip.
    fn check_ctrlrecip(&self, d: &UsbDevice, rt: u8, req: u8, index: u16) -> SysResult<()> {
        let ps = self.ps();
        if rt & 0x60 == 0x40 {
            return Ok(());
        }
        if rt == 0xa1 && req == 0 {
            // The printer class's GET_DEVICE_ID is always let through.
            let printer = d
                .interfaces
                .iter()
                .any(|i| i.number == (index >> 8) as u8 && i.class == 7);
            if printer {
                return Ok(());
            }
        }
        let index = index & 0xff;
        match rt & 0x1f {
            2 => {
                if index & !0x80 == 0 {
                    return Ok(());
                }
                let r =
                    findintfep(d, index as u32).or_else(|_| findintfep(d, (index ^ 0x80) as u32));
                match r {
                    Ok(i) => ps.checkintf(d, i),
                    Err(e) => Err(e),
                }
            }
            1 => ps.checkintf(d, index as u32),
            _ => Ok(()),
        }
    }

    /// USBDEVFS_CONTROL and USBDEVFS_BULK: start the transfer on the first
    /// attempt, answer when it completed (or timed out) on a retry.
    fn sync_xfer(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let tid = req.caller.pid;
        if !req.retry || !ps.st.lock_ok().sync.contains_key(&tid) {
            self.sync_start(req)?;
        }
        if req.nonblock {
            // usbfs blocks even for a non-blocking file: wait here.
            let until = Instant::now() + NONBLOCK_WAIT_MAX;
            loop {
                if let Some(r) = self.sync_finish(req)? {
                    return Ok(r);
                }
                if Instant::now() >= until {
                    return self.sync_timeout(req);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        match self.sync_finish(req)? {
            Some(r) => Ok(r),
            None => Err(Errno::EAGAIN),
        }
    }

    fn sync_start(&self, req: &IoctlRequest<'_>) -> SysResult<()> {
        let ps = self.ps();
        let tid = req.caller.pid;
        // A call this thread left (interrupted) ends now.
        let stale = ps.st.lock_ok().sync.remove(&tid);
        if let Some(s) = stale {
            if let Some(id) = s.urb_id {
                let _ = ps.port().cancel(ps.dev(), id);
            }
            ps.fs.budget.release(s.mem);
        }
        let d = ps.device()?;
        let b = req.input;
        let (urb, data, timeout, mem) = if req.cmd == abi::CONTROL {
            let (rt, r, index, len) = (b[0], b[1], u16_at(b, 4), u16_at(b, 6));
            let timeout = u32_at(b, 8);
            let data = u64_at(b, 16);
            self.check_ctrlrecip(&d, rt, r, index)?;
            if len as u64 > PAGE {
                return Err(Errno::EINVAL);
            }
            let mem = PAGE + STRUCT_URB + STRUCT_CTRLREQ;
            ps.fs.budget.charge(mem)?;
            let dir_in = rt & 0x80 != 0 && len > 0;
            let out = if !dir_in && len > 0 {
                match req.mem.read(data, len as usize) {
                    Ok(v) => v,
                    Err(e) => {
                        ps.fs.budget.release(mem);
                        return Err(e);
                    }
                }
            } else {
                Vec::new()
            };
            let mut setup = [0u8; 8];
            setup.copy_from_slice(&b[0..8]);
            let urb = UrbRequest {
                xfer: TransferType::Control,
                endpoint: if dir_in { 0x80 } else { 0 },
                setup: Some(setup),
                length: len as u32,
                out,
                flags: if dir_in { K_DIR_IN } else { 0 },
                iso_lengths: Vec::new(),
                interval: 0,
                stream_id: 0,
            };
            (urb, if dir_in { data } else { 0 }, timeout, mem)
        } else {
            let ep = u32_at(b, 0);
            let len = u32_at(b, 4);
            let timeout = u32_at(b, 8);
            let data = u64_at(b, 16);
            let i = findintfep(&d, ep)?;
            ps.checkintf(&d, i)?;
            if len as u64 >= i32::MAX as u64 - STRUCT_URB {
                return Err(Errno::EINVAL);
            }
            let epa = ep as u8;
            let (ty, interval, mps) = endpoint(&d, epa).ok_or(Errno::EINVAL)?;
            if mps == 0 {
                return Err(Errno::EINVAL);
            }
            let mem = len as u64 + STRUCT_URB;
            ps.fs.budget.charge(mem)?;
            let dir_in = epa & 0x80 != 0;
            let out = if !dir_in && len > 0 {
                match req.mem.read(data, len as usize) {
                    Ok(v) => v,
                    Err(e) => {
                        ps.fs.budget.release(mem);
                        return Err(e);
                    }
                }
            } else {
                Vec::new()
            };
            let xfer = if ty == 3 {
                TransferType::Interrupt
            } else {
                TransferType::Bulk
            };
            let urb = UrbRequest {
                xfer,
                endpoint: epa,
                setup: None,
                length: len,
                out,
                flags: if dir_in { K_DIR_IN } else { 0 },
                iso_lengths: Vec::new(),
                interval: if ty == 3 {
                    interval_of(&d, interval, false)
                } else {
                    0
                },
                stream_id: 0,
            };
            (urb, if dir_in { data } else { 0 }, timeout, mem)
        };
        let deadline =
            (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        ps.st.lock_ok().sync.insert(
            tid,
            SyncXfer {
                urb_id: None,
                deadline,
                data,
                mem,
                result: None,
                cmd: req.cmd,
            },
        );
        let done = Arc::new(SyncDone {
            ps: Arc::downgrade(ps),
            tid,
        });
        match ps.port().submit(ps.dev(), urb, done) {
            Ok(id) => {
                if let Some(s) = ps.st.lock_ok().sync.get_mut(&tid) {
                    s.urb_id = Some(id);
                }
                if let Some(t) = deadline {
                    ps.fs.timer.at(t, ps.id);
                }
                Ok(())
            }
            Err(e) => {
                if let Some(s) = ps.st.lock_ok().sync.remove(&tid) {
                    ps.fs.budget.release(s.mem);
                }
                Err(core_errno(e))
            }
        }
    }

    /// The transfer's answer if it completed or timed out.
    fn sync_finish(&self, req: &IoctlRequest<'_>) -> SysResult<Option<IoctlReply>> {
        let ps = self.ps();
        let tid = req.caller.pid;
        let (done, expired) = {
            let st = ps.st.lock_ok();
            let Some(s) = st.sync.get(&tid) else {
                return Err(Errno::EINVAL);
            };
            (
                s.result.is_some(),
                s.deadline.is_some_and(|t| Instant::now() >= t),
            )
        };
        if !done && expired {
            return self.sync_timeout(req).map(Some);
        }
        if !done {
            return Ok(None);
        }
        let s = ps.st.lock_ok().sync.remove(&tid).unwrap();
        ps.fs.budget.release(s.mem);
        let r = s.result.unwrap_or_default();
        let _ = s.cmd;
        if r.status < 0 {
            return Err(Errno(-r.status));
        }
        if s.data != 0 && r.actual_length > 0 {
            let n = (r.actual_length as usize).min(r.data.len());
            req.mem.write(s.data, &r.data[..n])?;
        }
        Ok(Some(IoctlReply {
            result: r.actual_length as i32,
            ..Default::default()
        }))
    }

    /// usbfs_start_wait_urb's timeout: usb_kill_urb, then -ETIMEDOUT
    /// unless it completed meanwhile.
    fn sync_timeout(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let tid = req.caller.pid;
        let id = ps.st.lock_ok().sync.get(&tid).and_then(|s| s.urb_id);
        if let Some(id) = id {
            let _ = ps.port().cancel(ps.dev(), id);
        }
        let s = ps.st.lock_ok().sync.remove(&tid);
        let Some(s) = s else {
            return Err(ETIMEDOUT);
        };
        ps.fs.budget.release(s.mem);
        match s.result {
            Some(r) if r.status != -2 => {
                if r.status < 0 {
                    return Err(Errno(-r.status));
                }
                if s.data != 0 && r.actual_length > 0 {
                    let n = (r.actual_length as usize).min(r.data.len());
                    req.mem.write(s.data, &r.data[..n])?;
                }
                Ok(IoctlReply {
                    result: r.actual_length as i32,
                    ..Default::default()
                })
            }
            _ => Err(ETIMEDOUT),
        }
    }

    /// A core request (SET_CONFIGURATION, SET_INTERFACE, CLEAR_HALT,
    /// RESET, driver (dis)connect) run synchronously like a transfer.
    fn core_request(&self, req: &IoctlRequest<'_>, cr: CoreRequest) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let tid = req.caller.pid;
        if !req.retry || !ps.st.lock_ok().sync.contains_key(&tid) {
            ps.st.lock_ok().sync.insert(
                tid,
                SyncXfer {
                    urb_id: None,
                    deadline: None,
                    data: 0,
                    mem: 0,
                    result: None,
                    cmd: req.cmd,
                },
            );
            let done = Arc::new(SyncDone {
                ps: Arc::downgrade(ps),
                tid,
            });
            match ps.port().request(ps.dev(), cr, done) {
                Ok(id) => {
                    if let Some(s) = ps.st.lock_ok().sync.get_mut(&tid) {
                        if s.result.is_none() {
                            s.urb_id = Some(id);
                        }
                    }
                }
                Err(e) => {
                    ps.st.lock_ok().sync.remove(&tid);
                    return Err(core_errno(e));
                }
            }
        }
        let wait_until = Instant::now() + NONBLOCK_WAIT_MAX;
        loop {
            let r = {
                let mut st = ps.st.lock_ok();
                match st.sync.get(&tid) {
                    Some(s) if s.result.is_some() => st.sync.remove(&tid).and_then(|s| s.result),
                    Some(_) => None,
                    None => return Err(Errno::EINVAL),
                }
            };
            if let Some(r) = r {
                return if r.status < 0 {
                    Err(Errno(-r.status))
                } else {
                    Ok(IoctlReply {
                        result: r.status,
                        ..Default::default()
                    })
                };
            }
            if !req.nonblock {
                return Err(Errno::EAGAIN);
            }
            if Instant::now() >= wait_until {
                ps.st.lock_ok().sync.remove(&tid);
                return Err(ETIMEDOUT);
            }
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// USBDEVFS_SUBMITURB.
    fn submiturb(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let arg = req.arg;
        let u = req.mem.read(arg, abi::URB_SIZE)?;
        let ty = u[abi::urb::TYPE];
        let mut endpoint = u[abi::urb::ENDPOINT];
        let flags = u32_at(&u, abi::urb::FLAGS);
        let mut buffer = u64_at(&u, abi::urb::BUFFER);
        let mut buffer_length = u32_at(&u, abi::urb::BUFFER_LENGTH);
        let npk_or_stream = u32_at(&u, abi::urb::NUMBER_OF_PACKETS);
        let mut mask = abi::URB_SHORT_NOT_OK
            | abi::URB_BULK_CONTINUATION
            | abi::URB_NO_FSBR
            | abi::URB_ZERO_PACKET
            | abi::URB_NO_INTERRUPT;
        if ty == 0 {
            mask |= abi::URB_ISO_ASAP;
        }
        if flags & !mask != 0 {
            return Err(Errno::EINVAL);
        }
        if buffer_length as u64 >= XFER_MAX {
            return Err(Errno::EINVAL);
        }
        if buffer_length > 0 && buffer == 0 {
            return Err(Errno::EINVAL);
        }
        let d = ps.device()?;
        let mut ifnum = -1;
        if !(ty == 2 && endpoint & !0x80 == 0) {
            let i = findintfep(&d, endpoint as u32)?;
            ps.checkintf(&d, i)?;
            ifnum = i as i32;
        }
        let (ep_type, ep_interval, _) = endpoint_of(&d, endpoint).ok_or(Errno::ENOENT)?;
        let mut is_in = endpoint & 0x80 != 0;
        let mut extra = 0u64;
        let mut setup = None;
        let mut allow_short = false;
        let mut allow_zero = false;
        let mut iso = Vec::new();
        let mut xfer = match ty {
            2 => {
                if ep_type != 0 {
                    return Err(Errno::EINVAL);
                }
                if buffer_length < 8 {
                    return Err(Errno::EINVAL);
                }
                let sb = req.mem.read(buffer, 8)?;
                let wlen = u16_at(&sb, 6) as u32;
                if buffer_length < wlen + 8 {
                    return Err(Errno::EINVAL);
                }
                self.check_ctrlrecip(&d, sb[0], sb[1], u16_at(&sb, 4))?;
                buffer_length = wlen;
                buffer += 8;
                if sb[0] & 0x80 != 0 && buffer_length > 0 {
                    is_in = true;
                    endpoint |= 0x80;
                } else {
                    is_in = false;
                    endpoint &= !0x80;
                }
                allow_short = is_in;
                let mut s = [0u8; 8];
                s.copy_from_slice(&sb);
                setup = Some(s);
                extra = STRUCT_CTRLREQ;
                TransferType::Control
            }
            3 => {
                allow_zero = !is_in;
                allow_short = is_in;
                match ep_type {
                    0 | 1 => return Err(Errno::EINVAL),
                    3 => TransferType::Interrupt,
                    _ => TransferType::Bulk,
                }
            }
            1 => {
                if ep_type != 3 {
                    return Err(Errno::EINVAL);
                }
                allow_zero = !is_in;
                allow_short = is_in;
                TransferType::Interrupt
            }
            0 => {
                if !(1..=MAX_PACKETS).contains(&npk_or_stream) {
                    return Err(Errno::EINVAL);
                }
                if ep_type != 1 {
                    return Err(Errno::EINVAL);
                }
                let n = npk_or_stream as usize;
                let descs = req
                    .mem
                    .read(arg + abi::URB_SIZE as u64, n * abi::ISO_DESC_SIZE)?;
                let mut total = 0u32;
                for i in 0..n {
                    let l = u32_at(&descs, i * abi::ISO_DESC_SIZE);
                    if l > MAX_PACKET_LEN {
                        return Err(Errno::EINVAL);
                    }
                    total += l;
                    iso.push(l);
                }
                buffer_length = total;
                extra = n as u64 * STRUCT_ISO_DESC;
                TransferType::Iso
            }
            _ => return Err(Errno::EINVAL),
        };
        if xfer == TransferType::Bulk && ty == 3 && ep_type == 3 {
            xfer = TransferType::Interrupt;
        }
        let mem = extra + STRUCT_ASYNC + STRUCT_URB + buffer_length as u64;
        ps.fs.budget.charge(mem)?;
        let out = if !is_in && buffer_length > 0 {
            match req.mem.read(buffer, buffer_length as usize) {
                Ok(v) => v,
                Err(e) => {
                    ps.fs.budget.release(mem);
                    return Err(e);
                }
            }
        } else {
            Vec::new()
        };
        let mut kflags = if is_in { K_DIR_IN } else { 0 };
        if flags & abi::URB_ISO_ASAP != 0 {
            kflags |= K_ISO_ASAP;
        }
        if allow_short && flags & abi::URB_SHORT_NOT_OK != 0 {
            kflags |= K_SHORT_NOT_OK;
        }
        if allow_zero && flags & abi::URB_ZERO_PACKET != 0 {
            kflags |= K_ZERO_PACKET;
        }
        if flags & abi::URB_NO_INTERRUPT != 0 {
            kflags |= K_NO_INTERRUPT;
        }
        let interval = if ep_interval > 0 {
            interval_of(&d, ep_interval, xfer == TransferType::Iso)
        } else {
            0
        };
        let bulk_addr = (ep_type == 2).then_some((endpoint & 0x0f) | ((endpoint & 0x80) >> 3));
        let urb = UrbRequest {
            xfer,
            endpoint,
            setup,
            length: buffer_length,
            out,
            flags: kflags,
            iso_lengths: iso.clone(),
            interval,
            stream_id: if xfer == TransferType::Bulk {
                npk_or_stream
            } else {
                0
            },
        };
        let key = {
            let mut st = ps.st.lock_ok();
            if let Some(b) = bulk_addr {
                if flags & abi::URB_BULK_CONTINUATION == 0 {
                    st.disabled_bulk_eps &= !(1 << b);
                } else if st.disabled_bulk_eps & (1 << b) != 0 {
                    drop(st);
                    ps.fs.budget.release(mem);
                    return Err(EREMOTEIO);
                }
            }
            st.next_key += 1;
            let key = st.next_key;
            st.pending.push(Async {
                key,
                userurb: arg,
                userbuffer: if is_in { buffer } else { 0 },
                urb_id: None,
                xfer,
                iso,
                mem,
                ifnum,
                bulk_addr,
                result: None,
            });
            key
        };
        let done = Arc::new(AsyncDone {
            ps: Arc::downgrade(ps),
            key,
        });
        match ps.port().submit(ps.dev(), urb, done) {
            Ok(id) => {
                let mut st = ps.st.lock_ok();
                if let Some(a) = st.pending.iter_mut().find(|a| a.key == key) {
                    a.urb_id = Some(id);
                } else if let Some(a) = st.completed.iter_mut().find(|a| a.key == key) {
                    a.urb_id = Some(id);
                }
                Ok(IoctlReply::default())
            }
            Err(e) => {
                let mut st = ps.st.lock_ok();
                st.pending.retain(|a| a.key != key);
                drop(st);
                ps.fs.budget.release(mem);
                Err(core_errno(e))
            }
        }
    }

    /// USBDEVFS_DISCARDURB: usb_kill_urb of the caller's URB `arg`.
    fn discardurb(&self, arg: u64) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let id = {
            let st = ps.st.lock_ok();
            let a = st
                .pending
                .iter()
                .find(|a| a.userurb == arg)
                .ok_or(Errno::EINVAL)?;
            a.urb_id
        };
        if let Some(id) = id {
            let _ = ps.port().cancel(ps.dev(), id);
        }
        Ok(IoctlReply::default())
    }

    /// processcompl: the results into the caller's URB, the URB's
    /// address to `arg`.
    fn processcompl(&self, req: &IoctlRequest<'_>, a: Async) -> SysResult<IoctlReply> {
        let ps = self.ps();
        ps.fs.budget.release(a.mem);
        let r = a.result.unwrap_or_default();
        let mem = req.mem;
        let actual = if a.xfer == TransferType::Iso {
            r.iso.iter().map(|p| p.actual_length).sum::<u32>()
        } else {
            r.actual_length
        };
        if a.userbuffer != 0 && actual > 0 {
            if a.xfer == TransferType::Iso {
                let mut off = 0usize;
                for (i, len) in a.iso.iter().enumerate() {
                    let got = r.iso.get(i).map(|p| p.actual_length).unwrap_or(0) as usize;
                    let n = got.min(*len as usize);
                    if n > 0 {
                        let end = (off + n).min(r.data.len());
                        if off < end {
                            mem.write(a.userbuffer + off as u64, &r.data[off..end])?;
                        }
                    }
                    off += *len as usize;
                }
            } else {
                let n = (actual as usize).min(r.data.len());
                mem.write(a.userbuffer, &r.data[..n])?;
            }
        }
        let u = a.userurb;
        mem.write(u + abi::urb::STATUS as u64, &r.status.to_le_bytes())?;
        mem.write(u + abi::urb::ACTUAL_LENGTH as u64, &actual.to_le_bytes())?;
        mem.write(
            u + abi::urb::ERROR_COUNT as u64,
            &r.error_count.to_le_bytes(),
        )?;
        if a.xfer == TransferType::Iso {
            let mut b = Vec::with_capacity(a.iso.len() * abi::ISO_DESC_SIZE);
            for (i, len) in a.iso.iter().enumerate() {
                let p = r.iso.get(i).copied().unwrap_or_default();
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(&p.actual_length.to_le_bytes());
                b.extend_from_slice(&(p.status as u32).to_le_bytes());
            }
            mem.write(u + abi::urb::ISO as u64, &b)?;
        }
        mem.write(req.arg, &u.to_le_bytes())?;
        Ok(IoctlReply::default())
    }

    /// USBDEVFS_REAPURB(NDELAY).
    fn reap(&self, req: &IoctlRequest<'_>, block: bool) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let a = {
            let mut st = ps.st.lock_ok();
            let a = st.completed.pop_front();
            if a.is_none() {
                let gone = st.disconnected || ps.entry.gone.load(Ordering::SeqCst);
                return Err(if gone {
                    Errno::ENODEV
                } else if block {
                    // Parked until a URB completes (a non-blocking
                    // file gets EAGAIN: the request thread is not held).
                    Errno::EAGAIN
                } else {
                    Errno::EAGAIN_FINAL
                });
            }
            a.unwrap()
        };
        self.processcompl(req, a)
    }

    fn ioctl_inner(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        if !ps.writable {
            return Err(Errno::EPERM);
        }
        match req.cmd {
            abi::REAPURB => return self.reap(req, true),
            abi::REAPURBNDELAY => return self.reap(req, false),
            _ => {}
        }
        if !ps.connected() {
            return Err(Errno::ENODEV);
        }
        let rd_u32 = |req: &IoctlRequest<'_>| -> SysResult<u32> {
            let b = req.mem.read(req.arg, 4)?;
            Ok(u32_at(&b, 0))
        };
        match req.cmd {
            abi::CONTROL | abi::BULK => self.sync_xfer(req),
            abi::RESETEP => {
                let ep = rd_u32(req)?;
                let d = ps.device()?;
                let i = findintfep(&d, ep)?;
                ps.checkintf(&d, i)?;
                self.core_request(req, CoreRequest::ResetEndpoint(ep as u8))
            }
            abi::CLEAR_HALT => {
                let ep = rd_u32(req)?;
                let d = ps.device()?;
                let i = findintfep(&d, ep)?;
                ps.checkintf(&d, i)?;
                self.core_request(req, CoreRequest::ClearHalt(ep as u8))
            }
            abi::SETINTERFACE => {
                let b = req.mem.read(req.arg, 8)?;
                let (intf, alt) = (u32_at(&b, 0), u32_at(&b, 4));
                let d = ps.device()?;
                if !req.retry {
                    ps.checkintf(&d, intf)?;
                    ps.destroy_on_interface(intf as i32);
                }
                if intf > 255 || alt > 255 {
                    return Err(Errno::EINVAL);
                }
                self.core_request(
                    req,
                    CoreRequest::SetInterface {
                        interface: intf as u8,
                        alt: alt as u8,
                    },
                )
            }
            abi::SETCONFIGURATION => {
                let v = rd_u32(req)? as i32;
                if !req.retry {
                    let d = ps.device()?;
                    if let Some(i) = d.interfaces.iter().find(|i| i.driver.is_some()) {
                        warn!(
                            "usbfs: interface {} claimed by {} while '{}' sets config #{}",
                            i.number,
                            i.driver.as_deref().unwrap_or(""),
                            crate::base::procmem::comm_of(req.caller.pid),
                            v
                        );
                        return Err(Errno::EBUSY);
                    }
                }
                self.core_request(req, CoreRequest::SetConfiguration(v))
            }
            abi::RESET => {
                if !req.retry {
                    let d = ps.device()?;
                    let st = ps.st.lock_ok();
                    if st.privileges_dropped {
                        let other = d.interfaces.iter().any(|i| {
                            i.driver.is_some() && st.ifclaimed & (1 << i.number.min(63)) == 0
                        });
                        if other {
                            return Err(Errno::EACCES);
                        }
                    }
                }
                self.core_request(req, CoreRequest::ResetDevice)
            }
            abi::GETDRIVER => {
                let intf = u32_at(req.input, 0);
                let d = ps.device()?;
                let name = (intf < 256)
                    .then(|| d.interface(intf as u8))
                    .flatten()
                    .and_then(|i| i.driver.clone())
                    .ok_or(ENODATA)?;
                let mut b = vec![0u8; abi::GETDRIVER_SIZE];
                b[0..4].copy_from_slice(&intf.to_le_bytes());
                let n = name.len().min(abi::DRIVER_NAME - 1);
                b[4..4 + n].copy_from_slice(&name.as_bytes()[..n]);
                req.mem.write(req.arg, &b)?;
                Ok(IoctlReply::default())
            }
            abi::SUBMITURB => self.submiturb(req),
            abi::DISCARDURB => self.discardurb(req.arg),
            abi::DISCSIGNAL => {
                let b = req.mem.read(req.arg, 16)?;
                let signr = u32_at(&b, 0) as i32;
                let tgid = crate::base::procmem::tgid_of(req.caller.pid).unwrap_or(req.caller.pid);
                let fd = if signr > 0 && signr <= 64 {
                    unsafe { libc::syscall(libc::SYS_pidfd_open, tgid as libc::pid_t, 0) as i32 }
                } else {
                    -1
                };
                let old = {
                    let mut st = ps.st.lock_ok();
                    std::mem::replace(&mut st.discsig, (fd >= 0).then_some((signr, fd)))
                };
                if let Some((_, fd)) = old {
                    unsafe { libc::close(fd) };
                }
                Ok(IoctlReply::default())
            }
            abi::CLAIMINTERFACE => {
                let i = rd_u32(req)?;
                ps.claim(i)?;
                Ok(IoctlReply::default())
            }
            abi::RELEASEINTERFACE => {
                let i = rd_u32(req)?;
                ps.release_intf(i)?;
                ps.destroy_on_interface(i as i32);
                Ok(IoctlReply::default())
            }
            abi::CONNECTINFO => {
                let d = ps.device()?;
                let mut b = [0u8; 8];
                b[0..4].copy_from_slice(&(d.devnum as u32).to_le_bytes());
                b[4] = u8::from(d.speed == super::device::Speed::Low);
                req.mem.write(req.arg, &b)?;
                Ok(IoctlReply::default())
            }
            abi::IOCTL => self.usbdevfs_ioctl(req),
            abi::HUB_PORTINFO => Err(Errno::ENOTTY),
            abi::CLAIM_PORT | abi::RELEASE_PORT => Err(Errno::ENOTTY),
            abi::GET_CAPABILITIES => {
                let caps = abi::CAP_ZERO_PACKET
                    | abi::CAP_NO_PACKET_SIZE_LIM
                    | abi::CAP_REAP_AFTER_DISCONNECT
                    | abi::CAP_DROP_PRIVILEGES
                    | abi::CAP_CONNINFO_EX
                    | abi::CAP_SUSPEND;
                Ok(IoctlReply {
                    result: 0,
                    output: caps.to_le_bytes().to_vec(),
                    ..Default::default()
                })
            }
            abi::DISCONNECT_CLAIM => {
                let b = req.mem.read(req.arg, abi::DISCONNECT_CLAIM_SIZE)?;
                let (intf, flags) = (u32_at(&b, 0), u32_at(&b, 4));
                let want = cstr(&b[8..]);
                let d = ps.device()?;
                let i = (intf < 256)
                    .then(|| d.interface(intf as u8))
                    .flatten()
                    .ok_or(Errno::EINVAL)?;
                if !req.retry {
                    if let Some(drv) = i.driver.as_deref() {
                        if ps.st.lock_ok().privileges_dropped {
                            return Err(Errno::EACCES);
                        }
                        if flags & abi::DISCONNECT_CLAIM_IF_DRIVER != 0 && drv != want {
                            return Err(Errno::EBUSY);
                        }
                        if flags & abi::DISCONNECT_CLAIM_EXCEPT_DRIVER != 0 && drv == want {
                            return Err(Errno::EBUSY);
                        }
                        if drv == "usbfs" {
                            // Another program's claim: usb_driver_release_interface
                            // of usbfs, then ours.
                            return Err(Errno::EBUSY);
                        }
                    }
                }
                if i.driver.is_some() && i.driver.as_deref() != Some("usbfs") {
                    self.core_request(req, CoreRequest::DetachDriver(intf as u8))?;
                }
                ps.claim(intf)?;
                Ok(IoctlReply::default())
            }
            abi::ALLOC_STREAMS | abi::FREE_STREAMS => Err(Errno::EINVAL),
            abi::DROP_PRIVILEGES => {
                let mask = u32_at(req.input, 0) as u64;
                let mut st = ps.st.lock_ok();
                st.allowed &= mask;
                st.privileges_dropped = true;
                Ok(IoctlReply::default())
            }
            abi::GET_SPEED => {
                let d = ps.device()?;
                Ok(IoctlReply {
                    result: d.speed as i32,
                    ..Default::default()
                })
            }
            abi::FORBID_SUSPEND | abi::ALLOW_SUSPEND | abi::WAIT_FOR_RESUME => {
                Ok(IoctlReply::default())
            }
            c if c & !(0x3fff << 16) == abi::CONNINFO_EX_BASE => {
                let size = ((c >> 16) & 0x3fff) as usize;
                if size < 4 {
                    return Err(Errno::EINVAL);
                }
                let d = ps.device()?;
                let mut b = vec![0u8; abi::CONNINFO_EX_SIZE];
                b[0..4].copy_from_slice(&(abi::CONNINFO_EX_SIZE as u32).to_le_bytes());
                b[4..8].copy_from_slice(&(d.busnum as u32).to_le_bytes());
                b[8..12].copy_from_slice(&(d.devnum as u32).to_le_bytes());
                b[12..16].copy_from_slice(&(d.speed as u32).to_le_bytes());
                b[16] = d.port_path.len() as u8;
                for (i, p) in d.port_path.iter().take(7).enumerate() {
                    b[17 + i] = *p;
                }
                b.truncate(size.min(abi::CONNINFO_EX_SIZE));
                Ok(IoctlReply {
                    result: 0,
                    output: b,
                    ..Default::default()
                })
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    /// USBDEVFS_IOCTL: disconnect or connect the kernel driver of an
    /// interface; other codes go to the driver, which has none (ENOTTY).
    fn usbdevfs_ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        if ps.st.lock_ok().privileges_dropped {
            return Err(Errno::EACCES);
        }
        let ifno = u32_at(req.input, 0) as i32;
        let code = u32_at(req.input, 4);
        let size = (code >> 16) & 0x3fff;
        let data = u64_at(req.input, 8);
        if size > 0 && (code >> 30) & 1 != 0 {
            req.mem.read(data, size as usize)?;
        }
        let d = ps.device()?;
        if d.active_config == 0 {
            return Err(EHOSTUNREACH);
        }
        let intf = (0..256)
            .contains(&ifno)
            .then(|| d.interface(ifno as u8))
            .flatten()
            .ok_or(Errno::EINVAL)?;
        match code {
            abi::DISCONNECT => match intf.driver.as_deref() {
                None if !req.retry => Err(ENODATA),
                Some("usbfs") if !req.retry => {
                    // usbfs's own claim (another file's): released.
                    Err(Errno::EBUSY)
                }
                _ => {
                    info!(
                        "usbfs: {}-{}:{}.{}: disconnect by usbfs",
                        d.busnum,
                        d.devpath(),
                        d.active_config,
                        ifno
                    );
                    self.core_request(req, CoreRequest::DetachDriver(ifno as u8))
                }
            },
            abi::CONNECT => {
                if intf.driver.is_some() && !req.retry {
                    return Err(Errno::EBUSY);
                }
                self.core_request(req, CoreRequest::AttachDriver(ifno as u8))
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}

/// The URB interval devio.c sets from bInterval.
fn interval_of(d: &UsbDevice, b_interval: u8, iso: bool) -> i32 {
    use super::device::Speed;
    if b_interval == 0 {
        return 0;
    }
    if iso || d.speed == Speed::High || d.speed >= Speed::Super {
        1 << (b_interval as u32 - 1).min(15)
    } else {
        b_interval as i32
    }
}

/// ep_to_host_endpoint: (type, bInterval, wMaxPacketSize) of `ep`.
fn endpoint_of(d: &UsbDevice, ep: u8) -> Option<(u8, u8, u16)> {
    endpoint(d, ep)
}

fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

impl OpenFile for UsbDevFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let ps = self.ps();
        if !ps.connected() {
            return Err(Errno::ENODEV);
        }
        let d = ps.device()?;
        let blob = d.descriptors_blob();
        Ok(crate::base::vfs::slice_at(&blob, offset, size))
    }

    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        if req.compat {
            return Err(Errno::ENOTTY);
        }
        let r = self.ioctl_inner(req);
        if let Err(e) = &r {
            if *e == EPIPE {
                // A stall is the device's answer, not a fault of ours.
            }
        }
        r
    }

    fn poll(&self) -> u32 {
        let ps = self.ps();
        let st = ps.st.lock_ok();
        let mut m = 0u32;
        if ps.writable && !st.completed.is_empty() {
            m |= (libc::POLLOUT | libc::POLLWRNORM) as u32;
        }
        if st.disconnected || ps.entry.gone.load(Ordering::SeqCst) {
            m |= (libc::POLLHUP | libc::POLLERR) as u32;
        }
        m
    }

    fn set_waker(&self, waker: Waker) {
        *self.ps().waker.lock_ok() = Some(waker);
    }

    fn release(&self) {
        self.ps().release();
    }
}
