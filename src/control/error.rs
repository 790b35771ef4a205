//! Why a control command is refused ([`CtlError`]: `error: ...` on the
//! socket, EINVAL on `monfs/ctl`) and why the control socket cannot be set
//! up ([`SocketError`]).

use crate::sim::SimError;

/// Why a control command was refused (nothing changed): what `monfs ctl`
/// prints after `error: `, EINVAL on `monfs/ctl`.
#[derive(Debug, thiserror::Error)]
pub enum CtlError {
    /// The simulator refused it.
    #[error(transparent)]
    Sim(#[from] SimError),
    /// An argument is missing.
    #[error("missing {0}")]
    Missing(&'static str),
    /// A bus number that does not parse.
    #[error("bad bus number {0:?}")]
    BadBus(String),
    /// A port path that does not parse.
    #[error("bad port path {0:?}: ports are 1..15 joined by dots")]
    BadPorts(String),
    /// An unknown device kind.
    #[error("unknown device kind {kind:?} ({known})")]
    UnknownKind {
        /// What was given.
        kind: String,
        /// The kinds `plug` takes.
        known: String,
    },
    /// A number that does not parse.
    #[error("bad number {0:?}")]
    BadNumber(String),
    /// A number out of its range.
    #[error("{key} must be {lo}..={hi}, got {value}")]
    OutOfRange {
        /// The setting.
        key: String,
        /// Its least value.
        lo: u64,
        /// Its greatest value.
        hi: u64,
        /// What was given.
        value: String,
    },
    /// A number that does not fit its type.
    #[error("{key}: {value} is out of range")]
    DoesNotFit {
        /// The setting.
        key: String,
        /// What was given.
        value: String,
    },
    /// `plug ... external`.
    #[error("kind external is for the configuration file only: ctl starts no programs")]
    ExternalKind,
    /// A word that is not `key=value`.
    #[error("expected key=value, got {0:?}")]
    NotKeyValue(String),
    /// A setting the capture gives.
    #[error("{0} comes from the capture")]
    FromCapture(String),
    /// An unknown device setting.
    #[error("unknown device setting {0:?}")]
    UnknownSetting(String),
    /// `plug ... from-capture` without its file and address.
    #[error("usage: plug BUS PORTS from-capture FILE DEVADDR")]
    FromCaptureUsage,
    /// `plug ... from-capture` without the capture's descriptor.
    #[error(
        "plug from-capture: no capture came with the command (use monfs ctl, which opens FILE)"
    )]
    NoCaptureFile,
    /// The device is not in the capture.
    #[error("from-capture: {0}")]
    Recorded(#[from] crate::capture::recorded::RecordedError),
    /// A descriptors file that cannot be read.
    #[error("descriptors: {path}: {source}")]
    DescriptorsIo {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// A descriptors file that does not parse.
    #[error("descriptors: {path}: {source}")]
    DescriptorsBad {
        /// The file.
        path: String,
        /// Why.
        source: crate::capture::usbdesc::DumpError,
    },
    /// A device that does not fit in the memory budget.
    #[error(
        "{field}: the device needs {kib} KiB, more than is left in the memory budget (--memory)"
    )]
    NoMemory {
        /// The field that costs most.
        field: &'static str,
        /// What the device needs.
        kib: usize,
    },
    /// `descriptors=FILE` twice in one command.
    #[error("descriptors=FILE given twice")]
    DescriptorsTwice,
    /// `descriptors=FILE` with another kind, or kind descriptors without it.
    #[error("descriptors=FILE goes with kind descriptors, and only with it")]
    DescriptorsKind,
    /// An unknown USB fault.
    #[error("unknown USB fault {0:?}")]
    UnknownFault(String),
    /// An unknown z/VM fault.
    #[error("unknown z/VM fault {0:?}")]
    UnknownZvmFault(String),
    /// `trace` with a name that is not SYSTEM:EVENT.
    #[error("expected SYSTEM:EVENT, got {0:?}")]
    NotEventName(String),
    /// `trace` of an event that does not exist.
    #[error("no trace event {0}")]
    NoEvent(String),
    /// `trace` with fields the event refuses.
    #[error("bad fields for {name}: {reason}")]
    BadFields {
        /// The event.
        name: String,
        /// Why (tracefs's words).
        reason: String,
    },
    /// A replay command that was not prepared.
    #[error("replay: not prepared")]
    NotPrepared,
    /// An empty line.
    #[error("empty command; try help")]
    Empty,
    /// `wait` ran out of time.
    #[error("bus {bus} port {ports}: not {what} within {ms} ms")]
    WaitTimedOut {
        /// The bus.
        bus: u16,
        /// The port path.
        ports: String,
        /// `present` or `gone`.
        what: &'static str,
        /// How long it waited.
        ms: u64,
    },
    /// `wait settled` ran out of time.
    #[error("devices still coming or going after {ms} ms")]
    NotSettled {
        /// How long it waited.
        ms: u64,
    },
    /// An unknown command.
    #[error("unknown command {0:?}; try help")]
    UnknownCommand(String),
    /// A line with an odd number of double quotes.
    #[error("unbalanced double quote")]
    UnbalancedQuote,
}

/// Why the control socket cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// A file operation failed (`action` says which, if not just looking).
    #[error("{action}{path}: {source}")]
    Io {
        /// "cannot create ", "cannot bind "... or "".
        action: &'static str,
        /// The path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The directory is a symlink.
    #[error("{0} is a symlink; refusing to use it")]
    Symlink(String),
    /// Not a directory.
    #[error("{0} is not a directory")]
    NotDir(String),
    /// Someone else's directory.
    #[error("{path} is owned by uid {uid}, not by us; refusing to use it")]
    Owner {
        /// The directory.
        path: String,
        /// Its owner.
        uid: u32,
    },
    /// Something other than a socket where the socket goes.
    #[error("{0} exists and is not a socket; refusing to replace it")]
    NotSocket(String),
    /// A live daemon's socket.
    #[error("{0}: another daemon is listening on this socket")]
    Listening(String),
    /// A socket that cannot be probed.
    #[error("{path}: exists and cannot be probed: {source}")]
    Probe {
        /// The socket.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// A [`SocketError::Io`] of `action` on `path`.
pub(super) fn io_err(
    action: &'static str,
    path: impl std::fmt::Display,
) -> impl FnOnce(std::io::Error) -> SocketError {
    let path = path.to_string();
    move |source| SocketError::Io {
        action,
        path,
        source,
    }
}
