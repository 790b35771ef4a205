//! The session's state: the device and the tree it serves, the open
//! handles and parked requests, per-open inodes, the serving threads, and
//! the channel that gives the service thread its work.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, OnceLock, RwLock, Weak};

use crossbeam_channel::{Receiver, Sender};

use crate::base::sync::RwLockExt;
use crate::base::vfs::Tree;

use super::handle::Handle;
use super::watchdog;

/// The most data one request carries (INIT's `max_write`); page-cache
/// stores go in pieces of this size too.
pub(super) const MAX_WRITE: u32 = 128 * 1024;
/// How many early interrupts are kept (see `Session::early_interrupts`).
pub(super) const EARLY_INTERRUPTS: usize = 256;
// FUSE over io_uring registers payload buffers of at least this much.
const _: () = assert!(MAX_WRITE as usize == super::uring::PAYLOAD_LEN);

/// Nodeids of per-open inodes start here, far above the tree's.
pub(super) const ALIAS_BASE: u64 = 1 << 40;

/// A mounted (or about to be mounted) FUSE session.
pub struct Session {
    pub(super) dev: File,
    pub(super) tree: Arc<Tree>,
    pub(super) handles: RwLock<HashMap<u64, Arc<Handle>>>,
    /// Sizes of the open snapshots (files with [`crate::base::vfs::OpenFile::content`])
    /// by the nodeid they were opened on, then by handle: what an attribute
    /// reply of that inode reports, found without looking at other handles.
    pub(super) snapshots: Mutex<HashMap<u64, std::collections::BTreeMap<u64, u64>>>,
    /// Parked requests: unique -> the handle they are parked on.
    pub(super) parked: Mutex<HashMap<u64, u64>>,
    /// Requests a FUSE_INTERRUPT came for before they were parked, newest
    /// last, at most [`EARLY_INTERRUPTS`]: one that parks is answered as
    /// interrupted at once. (Over io_uring the kernel drops the EAGAIN
    /// that asks it to send such an interrupt again.) Locked after
    /// `parked`.
    pub(super) early_interrupts: Mutex<VecDeque<u64>>,
    pub(super) next_fh: AtomicU64,
    pub(super) wake_tx: Sender<Wake>,
    pub(super) wake_rx: Receiver<Wake>,
    pub(super) mountpoint: PathBuf,
    pub(super) destroyed: AtomicBool,
    pub(super) allow_mmap: bool,
    /// Set for a CUSE device session.
    pub(super) cuse: Option<CuseDev>,
    /// Per-open inodes: alias nodeid -> (tree inode, lookup count).
    pub(super) aliases: Mutex<HashMap<u64, (u64, u64)>>,
    pub(super) next_alias: AtomicU64,
    /// st_dev of the mount, for finding mappings in `/proc/<pid>/maps`.
    pub(super) dev_id: AtomicU64,
    /// The serving threads, watched so that no caller keeps one.
    pub(super) watch: watchdog::Watchdog,
    /// Request threads running (replacements included).
    pub(super) live: (Mutex<usize>, std::sync::Condvar),
    /// Held while a request thread reads /dev/fuse.
    pub(super) read_turn: Mutex<()>,
    /// RELEASEs read and not yet done.
    pub(super) releasing: (Mutex<usize>, std::sync::Condvar),
    /// Serve requests through io_uring if the kernel lets us.
    pub(super) uring_wanted: bool,
    /// Which way requests come, once INIT (and the rings) settled it.
    pub(super) transport: (Mutex<TransportState>, std::sync::Condvar),
    /// The rings, once set up (see `uring.rs`).
    pub(super) uring: OnceLock<super::uring::Rings>,
    /// The session itself, for starting threads from a request.
    pub(super) me: OnceLock<Weak<Session>>,
    /// The CPUs its /dev/fuse request threads and service thread run on
    /// (`--cpus`); any CPU if unset.
    pub(super) cpus: OnceLock<nix::sched::CpuSet>,
    /// Where it records the requests it serves (`monfs/requests`), if set.
    pub(super) requests: OnceLock<Arc<crate::base::reqstats::RequestStats>>,
}

/// How the kernel's requests reach a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Transport {
    /// Not known yet: INIT has not been answered, or the rings are being
    /// registered.
    Pending,
    /// read(2) and write(2) of /dev/fuse; if io_uring was wanted, why it is
    /// not used.
    DevFuse(Option<String>),
    /// FUSE over io_uring (INTERRUPT, FORGET and notifications still use
    /// /dev/fuse).
    IoUring,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Transport::Pending => "not settled yet",
            Transport::DevFuse(_) => "/dev/fuse",
            Transport::IoUring => "FUSE over io_uring",
        })
    }
}

/// What [`Session::transport`] has learnt so far.
pub(super) struct TransportState {
    pub(super) now: Transport,
    /// Queues whose first registration was submitted (while
    /// [`Transport::Pending`] with rings).
    pub(super) registered: Vec<bool>,
}

/// A CUSE character device served by a session.
pub(super) struct CuseDev {
    pub(super) node: Arc<dyn crate::base::vfs::FileNode>,
    pub(super) name: String,
    pub(super) major: u32,
    pub(super) minor: u32,
}

/// Work for the service thread.
pub(super) enum Wake {
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
pub(super) struct CacheQueue(pub(super) Sender<Wake>);

impl crate::base::vfs::KernelCache for CacheQueue {
    fn store(&self, ino: u64, offset: u64, bytes: Vec<u8>) {
        let _ = self.0.send(Wake::Store(ino, offset, bytes));
    }
    fn inval_entry(&self, parent: u64, name: &str) {
        let _ = self.0.send(Wake::InvalEntry(parent, name.to_string()));
    }
}

impl Session {
    /// A session on device `dev` (/dev/fuse or /dev/cuse), serving `tree`
    /// (or the CUSE device `cuse`) at `mountpoint`.
    pub(super) fn new(
        dev: File,
        tree: Arc<Tree>,
        mountpoint: PathBuf,
        allow_mmap: bool,
        uring_wanted: bool,
        cuse: Option<CuseDev>,
    ) -> Session {
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        Session {
            dev,
            tree,
            handles: RwLock::new(HashMap::new()),
            snapshots: Mutex::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
            early_interrupts: Mutex::new(VecDeque::new()),
            next_fh: AtomicU64::new(1),
            wake_tx,
            wake_rx,
            mountpoint,
            destroyed: AtomicBool::new(false),
            allow_mmap,
            cuse,
            aliases: Mutex::new(HashMap::new()),
            next_alias: AtomicU64::new(ALIAS_BASE),
            dev_id: AtomicU64::new(0),
            watch: Default::default(),
            live: Default::default(),
            read_turn: Mutex::new(()),
            releasing: Default::default(),
            uring_wanted,
            transport: (
                Mutex::new(TransportState {
                    now: Transport::Pending,
                    registered: Vec::new(),
                }),
                Default::default(),
            ),
            uring: OnceLock::new(),
            cpus: OnceLock::new(),
            requests: OnceLock::new(),
            me: OnceLock::new(),
        }
    }

    /// The open handle `fh`, if it is open.
    pub(super) fn handle(&self, fh: u64) -> Option<Arc<Handle>> {
        self.handles.read_ok().get(&fh).cloned()
    }
}
