//! `monfs run [OPTIONS] -- CMD ARGS...`: mount a monfs where only CMD sees
//! it, and run CMD in a private mount namespace where the kernel's paths are
//! monfs's: `/sys/kernel/debug/usb/usbmon` (and `usb/devices`),
//! `/dev/usbmonN`, `/sys/kernel/tracing`, `/sys/kernel/debug/tracing`,
//! `/dev/monreader`, `/dev/bus/usb`, `/sys/bus/usb` and the USB devices
//! under `/sys/devices/platform`. Nothing outside the namespace changes.
//!
//! As root the namespace is a mount namespace. Any other user gets a user
//! namespace too, in which they are root, so that the daemon mounts FUSE
//! with mount(2) there (Linux allows FUSE in a user namespace) and binds
//! what it needs; CMD then runs in a nested user namespace as the caller's
//! own uid and gid again, so that it sees no privilege it does not have.
//!
//! The daemon is this same binary, `monfs mount --foreground`, started in
//! the namespace after it is made: the mount exists only there, and goes
//! with it. Its output goes to a file of no name (O_TMPFILE) beside the
//! control socket, shown on the terminal only if it fails. If monfs run is
//! killed, the daemon is sent SIGTERM (it unmounts, removes the socket and
//! the mountpoint) and the command SIGKILL (parent-death signals).

use std::ffi::OsString;
use std::path::PathBuf;

pub use launch::run;

mod command;
mod daemon;
mod launch;
mod namespace;
mod netns;

/// Exit status when monfs itself cannot start (as `docker run` and
/// `podman run` have it); 126 and 127 are CMD that cannot be run or found.
pub const EXIT_START: u8 = 125;
/// CMD exists but cannot be executed.
pub const EXIT_CANNOT_EXEC: u8 = 126;
/// CMD was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// The file-system magic of a FUSE mount (statfs f_type).
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// systemd's switch for libudev's check that a device's directory is on
/// sysfs.
pub const VERIFY_SYSFS: &str = "SYSTEMD_DEVICE_VERIFY_SYSFS";

/// How many of the daemon's last log lines a failure shows.
const LOG_TAIL: usize = 20;

/// What `monfs run` was asked to do.
pub struct RunOptions {
    /// The monfs binary (this one), for the daemon.
    pub exe: PathBuf,
    /// `--log-level` for the daemon.
    pub log_level: String,
    /// Options for `monfs mount` (config, seed, threads, ...).
    pub mount_args: Vec<OsString>,
    /// A log file to keep (the daemon's), instead of a temporary one.
    pub log_file: Option<PathBuf>,
    /// Use the monfs already mounted here instead of mounting one.
    pub use_mount: Option<PathBuf>,
    /// Without root: CMD runs as root of the user namespace, not as the
    /// caller's uid and gid.
    pub ns_root: bool,
    /// The configuration the daemon gets (None: the built-in one), to know
    /// which devices to wait for; None with `wait` false.
    pub config: Option<PathBuf>,
    /// Wait until the devices plugged at start have enumerated and their
    /// drivers bound before starting the command.
    pub wait: bool,
    /// Keep the daemon's warnings off the terminal.
    pub quiet: bool,
    /// Keep the host's network namespace (and announce no uevents).
    pub host_network: bool,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// Why `monfs run` could not set CMD up.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: String,
        /// The error.
        err: nix::errno::Errno,
    },
    /// An I/O operation failed.
    #[error("{what}: {err}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        err: std::io::Error,
    },
    /// `--use DIR` names no monfs.
    #[error("{0}")]
    NotMonfs(String),
}

fn sys(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> RunError {
    let what = what.into();
    move |err| RunError::Sys { what, err }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |err| RunError::Io { what, err }
}

/// A file removed on drop.
struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}
