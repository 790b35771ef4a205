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
    CoreError, CoreRequest, DevRef, DeviceChange, DeviceEvent, DeviceWatcher, TransferType,
    UrbDone, UrbRequest, UrbResult, UsbCorePort, UsbDevice,
};

use memory::Budget;

mod desc;
mod ioctl;
mod memory;
mod ps;
mod sync;
mod urb;

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
/// ENODATA.
const ENODATA: Errno = Errno(libc::ENODATA);
/// EHOSTUNREACH.
const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
/// EREMOTEIO.
const EREMOTEIO: Errno = Errno(libc::EREMOTEIO);
/// ETIMEDOUT.
const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
/// ECONNRESET (an URB unlinked asynchronously).
const ECONNRESET: i32 = -104;

fn core_errno(e: CoreError) -> Errno {
    Errno(e.errno())
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
    /// Its interfaces' drivers are probed ([`UsbDevice::probed`]): the
    /// driver core no longer holds the device lock.
    probed: AtomicBool,
    files: Mutex<Vec<Weak<Ps>>>,
}

impl DevEntry {
    /// The device's files still open.
    fn open_files(&self) -> Vec<Arc<Ps>> {
        self.files
            .lock_ok()
            .iter()
            .filter_map(|w| w.upgrade())
            .collect()
    }
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
                probed: AtomicBool::new(d.probed),
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

    /// The driver core let go of the device: its interfaces' drivers are
    /// probed. Callers waiting for the device lock go on.
    fn probed(&self, dev: DevRef) {
        let Some(e) = self.devs.lock_ok().get(&dev).cloned() else {
            return;
        };
        if e.probed.swap(true, Ordering::SeqCst) {
            return;
        }
        for ps in e.open_files() {
            ps.wake();
        }
    }

    /// The driver core probes the device's interfaces again (a program's
    /// USBDEVFS_CONNECT): it holds the device lock until they are bound.
    fn probing(&self, dev: DevRef) {
        if let Some(e) = self.devs.lock_ok().get(&dev) {
            e.probed.store(false, Ordering::SeqCst);
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
        for ps in e.open_files() {
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
    fn changed(&self, event: &DeviceEvent) {
        let Some(fs) = self.0.upgrade() else {
            return;
        };
        match &event.change {
            DeviceChange::Added(d) => fs.added(d),
            DeviceChange::Changed(d) if d.probed => fs.probed(d.dev),
            DeviceChange::Changed(d) => fs.probing(d.dev),
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
            waker: Default::default(),
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

impl SyncXfer {
    /// Request `cmd`, not yet submitted, without a result.
    fn new(cmd: u32, deadline: Option<Instant>, data: u64, mem: u64) -> SyncXfer {
        SyncXfer {
            urb_id: None,
            deadline,
            data,
            mem,
            result: None,
            cmd,
        }
    }
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
    waker: crate::base::vfs::WakerSlot,
}

/// The open file.
struct UsbDevFile(Arc<Ps>);

impl UsbDevFile {
    fn ps(&self) -> &Arc<Ps> {
        &self.0
    }
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
        // usbdev_do_ioctl takes the device lock, which the driver core
        // holds while it probes the interfaces' drivers (device_add's
        // __device_attach): a caller that opened the node as it appeared
        // waits until they are bound, whatever its O_NONBLOCK.
        let ps = self.ps();
        if ps.connected() && !ps.entry.probed.load(Ordering::SeqCst) {
            return Err(Errno::WAIT_ALWAYS);
        }
        self.ioctl_inner(req)
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
        self.ps().waker.set(waker);
    }

    fn release(&self) {
        self.ps().release();
    }
}
