//! An open file handle and the requests parked on it: what the session
//! keeps for each open. Running, parking and retrying the requests is
//! `parked.rs`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::sync::LockExt;
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
    /// A write of `data` at `offset` whose file waits for room
    /// ([`crate::base::vfs::Written::Took`]).
    Write(Arc<WriteCall>),
}

/// A write request, kept while it waits for room.
pub(super) struct WriteCall {
    pub(super) offset: u64,
    pub(super) data: Vec<u8>,
    pub(super) caller: Caller,
    /// The file's O_NONBLOCK, as the request carried it.
    pub(super) nonblock: bool,
    /// How many bytes of `data` the file took so far.
    pub(super) done: AtomicUsize,
    /// While it waits: `data`'s share of [`crate::base::budget::MEMORY`],
    /// charged to the caller.
    pub(super) held: Mutex<Option<crate::base::budget::Grant>>,
}

impl WriteCall {
    /// Charge `data` to the caller while the write waits: false past the
    /// caller's share of memory (the write ends, ENOMEM if nothing was
    /// written, as tty_write's buffer allocation can fail).
    pub(super) fn hold(&self) -> bool {
        let mut held = self.held.lock_ok();
        if held.is_none() {
            match crate::base::budget::MEMORY.take(self.data.len()) {
                Ok(g) => *held = Some(g),
                Err(_) => return false,
            }
        }
        true
    }

    /// The bytes the file took so far.
    pub(super) fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }
}

impl Parked {
    /// The FUSE opcode of the request.
    pub(super) fn opcode(&self) -> u32 {
        match self {
            Parked::Read { .. } => op::READ,
            Parked::Ioctl(_) => op::IOCTL,
            Parked::Write(_) => op::WRITE,
        }
    }

    /// The answer to the request interrupted by a signal (FUSE_INTERRUPT):
    /// EINTR, but a write that took bytes returns their count (as
    /// n_tty_write and pipe_write do).
    pub(super) fn interrupted(&self) -> Result<Vec<u8>, crate::base::errno::Errno> {
        self.ended(crate::base::errno::Errno::EINTR)
    }

    /// The answer to the request ended by `e`: the error, but a write that
    /// took bytes returns their count.
    pub(super) fn ended(
        &self,
        e: crate::base::errno::Errno,
    ) -> Result<Vec<u8>, crate::base::errno::Errno> {
        match self {
            Parked::Write(w) if w.done() > 0 => Ok(write_out(w.done())),
            _ => Err(e),
        }
    }
}

/// `struct fuse_write_out` for a write of `n` bytes.
pub(super) fn write_out(n: usize) -> Vec<u8> {
    let mut w = super::proto::Writer::default();
    w.u32(n as u32).u32(0);
    w.0
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
    /// TIOCMIWAIT or tcdrain; a write waiting for room, behind the writes
    /// before it only): the handle's other requests do not queue behind
    /// it.
    pub(super) aside: bool,
}
