//! A thin FUSE adapter over [`crate::base::vfs`].
//!
//! monfs speaks the FUSE protocol itself (see [`proto`]) instead of using
//! fuser, because it needs three things fuser 0.18 does not give: FUSE_INTERRUPT
//! (so that a `cat` parked in a blocking read dies on Ctrl-C), the raw `arg` of
//! `_IO` ioctls (usbmon's ring size and flush count), and CUSE_INIT (real
//! character devices). The layer only translates requests into [`Tree`](crate::base::vfs::Tree) and
//! [`OpenFile`](crate::base::vfs::OpenFile) calls and keeps the parked (blocked) requests.
//!
//! Blocking: a read or ioctl whose file answers EAGAIN is parked on its handle
//! unless the caller is O_NONBLOCK; so is a write whose file took only part
//! of it ([`Written::Took`](crate::base::vfs::Written::Took)), apart from the
//! reads and behind the writes before it. The file's waker sends the handle
//! to the service thread, which retries parked requests in order.
//! FUSE_INTERRUPT for a parked request answers it with EINTR at once (a write
//! that took bytes: their count).
//!
//! Panics: a handler that panics fails that one request with EIO (and a log
//! line); the threads keep serving, and the locks it held stay usable (see
//! [`crate::base::sync`]).
//!
//! The parts, each depending only on those listed before it: [`proto`]
//! (the wire format), [`watchdog`] (stuck threads), `uring.rs` (FUSE over
//! io_uring's per-CPU rings and their entries, used where the kernel allows),
//! `handle.rs` (an open file and its parked requests), `state.rs` (the
//! [`Session`] and what it holds), `reply.rs` (replies and notifications),
//! `cuse.rs` (CUSE devices and their ioctl retry protocol), `parked.rs`
//! (parking, retrying and interrupting requests), `fusermount.rs` (mounting
//! through fusermount3 without root), `mount.rs` (mount(2) or fusermount3,
//! unmount, stale mounts), `session.rs` (the request loop and dispatch) and
//! `uring_loop.rs` (the threads serving the rings, and which transport
//! serves). This file only declares them.

pub mod proto;
pub mod watchdog;

mod cuse;
mod error;
mod fusermount;
mod handle;
mod mount;
mod parked;
mod reply;
mod session;
mod state;
mod uring;
mod uring_loop;

pub use cuse::{
    check_device as check_cuse, device_number as cuse_device_number, CuseClasses,
    DEVICE as CUSE_DEVICE,
};
pub use error::{CpuListError, CuseError, UnmountError};
pub use mount::{
    mounts_as_root, parse_cpu_list, recover_stale_mount, unmount, CpuList, MountOptions,
};
pub use state::{Session, Transport};
pub use uring::kernel_enabled as io_uring_enabled;
pub use uring::ENABLE_PARAM as IO_URING_PARAM;
pub use uring::{availability as io_uring_availability, Availability as IoUringAvailability};
