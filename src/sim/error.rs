//! The one error type of the simulators and of live control: why a command
//! (plug, unplug, fault, pause, replay, a control line) changed nothing.
//! Its text is what `monfs ctl` prints after `error: ` and the log says.

/// What `replay start` says when no capture came with it: the daemon opens
/// no path for a caller.
pub const NEEDS_DESCRIPTOR: &str =
    "replay start takes the capture as an open file passed with the command \
(SCM_RIGHTS on the control socket); the daemon opens no path for a caller. \
Use `monfs ctl MOUNTPOINT replay start BUS FILE`, which opens FILE with your own rights";

/// Why a simulator or control command was refused.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No such USB bus.
    #[error("no USB bus {0}")]
    NoBus(u16),
    /// The bus only replays a capture.
    #[error("bus {0} replays a capture (replay: in the config): it has no simulated devices")]
    ReplayOnly(u16),
    /// Nothing is plugged at the port path.
    #[error("no device at {0:?}")]
    NoDevice(Vec<u8>),
    /// The device at the port path is gone already.
    #[error("the device at {0:?} is unplugged")]
    Unplugged(Vec<u8>),
    /// Unplugging a device that is gone already.
    #[error("the device at {0:?} is already unplugged")]
    AlreadyUnplugged(Vec<u8>),
    /// Faults go to devices.
    #[error("faults go to a device, not the root hub")]
    FaultOnRootHub,
    /// The root hub stays.
    #[error("cannot unplug the root hub")]
    UnplugRootHub,
    /// No hub at the parent path.
    #[error("no hub at {0:?}")]
    NoHub(Vec<u8>),
    /// The parent is not (or no longer) a usable hub.
    #[error("{0}")]
    BadHub(&'static str),
    /// The hub has no such port.
    #[error("the hub has {ports} ports, not {port}")]
    NoPort {
        /// Ports the hub has.
        ports: usize,
        /// The port asked for.
        port: u8,
    },
    /// Something is plugged there already.
    #[error("port {0} is in use")]
    PortInUse(u8),
    /// A port path must name a port.
    #[error("empty port path")]
    EmptyPath,
    /// Ports count from 1.
    #[error("port numbers start at 1")]
    PortZero,
    /// `replay stop` with nothing playing.
    #[error("no replay is running on bus {0}")]
    NoReplay(u16),
    /// A capture that cannot be replayed (unreadable, not a regular file,
    /// corrupt; the text names the file and the offset).
    #[error(transparent)]
    Capture(#[from] crate::capture::read::CaptureError),
    /// A replay command that does not parse.
    #[error("usage: replay start BUS FILE [speed=F] [loop] [after_ms=N] | replay stop BUS | replay status BUS")]
    ReplayUsage,
    /// A replay command's bus number out of range.
    #[error("bad bus number {0:?}: must be 1..=127")]
    ReplayBus(String),
    /// A replay option's value that does not parse.
    #[error("bad {option} {value:?}")]
    ReplayValue {
        /// The option.
        option: &'static str,
        /// Its value.
        value: String,
    },
    /// A replay option out of range.
    #[error(transparent)]
    ReplayRange(#[from] crate::config::ValueError),
    /// An unknown replay option.
    #[error("unknown replay option {0:?}; usage: replay start BUS FILE [speed=F] [loop] [after_ms=N] | replay stop BUS | replay status BUS")]
    ReplayOption(String),
    /// `replay start` without the capture's descriptor.
    #[error("{}", NEEDS_DESCRIPTOR)]
    NeedsDescriptor,
    /// The device is not open: nothing to inject a z/VM fault into.
    #[error("dev/monreader is not open: no IUCV path to fault")]
    NotOpen,
}
