//! monfs: a userspace replica of Linux's monitoring and tracing interfaces.
//!
//! The semantic core (facilities, simulators, the file tree) is plain Rust and
//! knows nothing about FUSE; [`fuse`] is a thin adapter over it.

pub mod budget;
pub mod bytestr;
pub mod capture;
pub mod cli;
pub mod clock;
pub mod config;
pub mod control;
pub mod daemon;
pub mod errno;
pub mod fuse;
pub mod monreader;
pub mod nullfile;
pub mod proc_events;
pub mod procmem;
pub mod reqstats;
pub mod sim;
pub mod sync;
pub mod tracefs;
pub mod usbmon;
pub mod vfs;
