//! The base below every facility and the application: the file tree, typed
//! errnos, clocks, other processes' memory and events, budgets, locking, and
//! the two files of monfs's own (`monfs/null`, `monfs/requests`).
//!
//! Nothing here knows about FUSE, a simulator or a facility; everything above
//! (usbmon, tracefs, monreader, the simulators, the daemon) builds on it.

pub mod budget;
pub mod bytestr;
pub mod clock;
pub mod errno;
pub mod nullfile;
pub mod pages;
pub mod proc_events;
pub mod procmem;
pub mod reqstats;
pub mod sync;
pub mod vfs;
