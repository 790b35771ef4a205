//! The errors of the command-line tools' own steps (opening the log file,
//! starting the CUSE devices, handing `monfs ctl` a file), each with the
//! path or device it is about.

use std::path::PathBuf;

/// Why the daemon's log file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum LogFileError {
    /// Its directory (the private run directory) is not safe to use.
    #[error(transparent)]
    Dir(#[from] crate::control::SocketError),
    /// The file cannot be opened.
    #[error("log file {}: {source}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

/// A CUSE device that could not be created.
#[derive(Debug, thiserror::Error)]
#[error("/dev/{name}: {reason}")]
pub struct CuseStartError {
    /// The device's name.
    pub name: String,
    /// Why, with its causes.
    pub reason: String,
}

/// Why `monfs ctl` cannot send a command with its file.
#[derive(Debug, thiserror::Error)]
pub enum CtlFileError {
    /// The command does not split into words.
    #[error(transparent)]
    Words(#[from] crate::control::CtlError),
    /// The file it names cannot be opened with the caller's rights.
    #[error("cannot open {}: {source}", .path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}
