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
//!
//! The parts: `mount.rs` (mount(2), unmount, stale mounts), `session.rs`
//! (the request loop and dispatch), `parked.rs` (parked requests and
//! interrupts), `cuse.rs` (CUSE devices and their ioctl retry protocol),
//! [`proto`] (the wire format) and [`watchdog`] (stuck threads).

pub mod proto;
pub mod watchdog;

mod cuse;
mod mount;
mod parked;
mod session;

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex, RwLock};

use crossbeam_channel::{Receiver, Sender};

use crate::vfs::{OpenFile, Tree};

use cuse::{clip_ranges, CuseDev, CUSE_IOCTL_MAX};
pub use mount::{recover_stale_mount, unmount, MountOptions};
use parked::{IoctlCall, Parked, Pending};
use session::CacheQueue;

const MAX_WRITE: u32 = 128 * 1024;
const BUF_LEN: usize = MAX_WRITE as usize + 4096;
const ENTRY_VALID_SECS: u64 = 1;

/// Nodeids of per-open inodes start here, far above the tree's.
const ALIAS_BASE: u64 = 1 << 40;

/// The message of a caught panic (`panic!` with a literal or a format).
fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
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

impl Session {
    /// A session on device `dev` (/dev/fuse or /dev/cuse), serving `tree`
    /// (or the CUSE device `cuse`) at `mountpoint`.
    fn new(
        dev: File,
        tree: Arc<Tree>,
        mountpoint: PathBuf,
        allow_mmap: bool,
        cuse: Option<CuseDev>,
    ) -> Session {
        let (wake_tx, wake_rx) = crossbeam_channel::unbounded();
        Session {
            dev,
            tree,
            handles: RwLock::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
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
        }
    }
}
