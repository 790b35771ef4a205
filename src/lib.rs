//! monfs: a userspace replica of Linux's monitoring and tracing interfaces.
//!
//! The semantic core (facilities, simulators, the file tree) is plain Rust and
//! knows nothing about FUSE; [`fuse`] is a thin adapter over it.

pub mod base;
pub mod capture;
pub mod cli;
pub mod config;
pub mod control;
pub mod daemon;
pub mod fuse;
pub mod hid;
pub mod input;
pub mod monreader;
pub mod sim;
pub mod testing;
pub mod tracefs;
pub mod tty;
pub mod udev;
pub mod umockdev;
pub mod usbcore;
pub mod usbmon;
