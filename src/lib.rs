//! monfs: a userspace replica of Linux's monitoring and tracing interfaces.
//!
//! The semantic core (facilities, simulators, the file tree) is plain Rust and
//! knows nothing about FUSE; [`fuse`] is a thin adapter over it.

pub mod clock;
pub mod config;
pub mod sim;
pub mod usbmon;
pub mod errno;
pub mod fuse;
pub mod vfs;
pub mod daemon;
pub mod nullfile;
pub mod monreader;
pub mod tracefs;
pub mod procmem;
