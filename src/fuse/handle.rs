//! An open file handle and the requests parked on it: what the session
//! keeps for each open. Running, parking and retrying the requests is
//! `parked.rs`.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::base::vfs::{Caller, IoctlLayout, OpenFile};

use super::proto::op;

/// One open file handle.
pub(super) struct Handle {
    /// The nodeid the file was opened on (an alias for per-open inodes).
    pub(super) nodeid: u64,
    pub(super) file: Arc<dyn OpenFile>,
    pub(super) nonblock: bool,
    /// Set while someone waits for the waker (parked requests or a poll).
    pub(super) armed: Arc<AtomicBool>,
    pub(super) pending: Mutex<VecDeque<Pending>>,
    pub(super) poll_kh: Mutex<Option<u64>>,
    /// A thread is retrying this handle's parked requests.
    pub(super) servicing: AtomicBool,
    /// Someone asked for a retry meanwhile: look again.
    pub(super) again: AtomicBool,
    /// Where the caller's descriptor was found last time its `O_NONBLOCK`
    /// was asked for (see [`crate::base::procmem::fd_nonblock`]).
    pub(super) fd_hint: Mutex<Option<crate::base::procmem::FdHint>>,
    /// Its place among its user's [`crate::base::budget::OPEN_FILES`].
    pub(super) _slot: crate::base::budget::Grant,
}

/// What a parked request was.
#[derive(Clone)]
pub(super) enum Parked {
    /// A read of `size` bytes at `offset`.
    Read { offset: u64, size: u32 },
    /// An ioctl.
    Ioctl(IoctlCall),
}

impl Parked {
    /// The FUSE opcode of the request.
    pub(super) fn opcode(&self) -> u32 {
        match self {
            Parked::Read { .. } => op::READ,
            Parked::Ioctl(_) => op::IOCTL,
        }
    }
}

#[derive(Clone)]
/// An ioctl request, kept to be retried.
pub(super) struct IoctlCall {
    /// CUSE: the caller memory the kernel copied in (per input range) and the
    /// output ranges it will copy out of the reply.
    pub(super) cuse: Option<(IoctlLayout, Vec<u8>)>,
    pub(super) nodeid: u64,
    pub(super) cmd: u32,
    pub(super) arg: u64,
    pub(super) input: Vec<u8>,
    pub(super) out_size: u32,
    pub(super) caller: Caller,
    pub(super) compat: bool,
}

/// A parked request.
pub(super) struct Pending {
    pub(super) unique: u64,
    pub(super) what: Parked,
    /// A thread is retrying it (without the queue's lock).
    pub(super) attempting: bool,
    /// FUSE_INTERRUPT came while it was being retried: EINTR unless that
    /// retry completes it.
    pub(super) interrupted: bool,
    /// It waits aside ([`crate::base::errno::Errno::WAIT_ALWAYS`]: a tty's
    /// TIOCMIWAIT or tcdrain): the handle's other requests do not queue
    /// behind it.
    pub(super) aside: bool,
}
