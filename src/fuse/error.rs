//! The errors of the mount helpers: `--cpus` lists, unmounting, and the
//! CUSE device check. Each says why, for a person to read.

use std::path::PathBuf;

/// A `--cpus` list that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CpuListError {
    /// The process's own CPUs cannot be read.
    #[error("cannot read this process's CPUs: {0}")]
    Affinity(nix::Error),
    /// A part that is not a number or a range.
    #[error("{0:?} is not a CPU number or range (as in 0,2-3)")]
    NotCpu(String),
    /// A range whose end is before its start.
    #[error("{0:?}: the range runs backwards")]
    Backwards(String),
    /// A CPU this process may not run on.
    #[error("CPU {0} is not one this process may run on")]
    NotOurs(usize),
}

/// Why an unmount failed.
#[derive(Debug, thiserror::Error)]
pub enum UnmountError {
    /// umount2(2) as root.
    #[error("umount2: {0}")]
    Umount(nix::Error),
    /// `fusermount3` refused, with its complaint.
    #[error("{helper}: {message}")]
    Helper {
        /// The helper program.
        helper: String,
        /// What it wrote to its standard error.
        message: String,
    },
    /// `fusermount3` could not be run.
    #[error("cannot run {helper}: {source}")]
    Spawn {
        /// The helper program.
        helper: String,
        /// Why.
        source: std::io::Error,
    },
}

/// Why CUSE devices cannot be created through a device path.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CuseError {
    /// The device is not there.
    #[error("{} does not exist: the kernel has no CUSE loaded (as root: modprobe cuse)", .0.display())]
    Missing(PathBuf),
    /// Not allowed to open it.
    #[error("cannot open {}: {reason} (CUSE devices need root)", .path.display())]
    Denied {
        /// The device.
        path: PathBuf,
        /// The open's error.
        reason: String,
    },
    /// Another open error.
    #[error("cannot open {}: {reason} (is CUSE loaded? as root: modprobe cuse)", .path.display())]
    Open {
        /// The device.
        path: PathBuf,
        /// The open's error.
        reason: String,
    },
}
