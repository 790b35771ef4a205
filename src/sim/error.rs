//! The one error type of the simulators and of live control: why a command
//! (plug, unplug, fault, pause, replay, a control line) changed nothing.
//! Its text is what `monfs ctl` prints after `error: ` and the log says.

/// Why a simulator or control command was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
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
    #[error("{0}")]
    Capture(String),
    /// A command line that does not parse (the text says what is wrong).
    #[error("{0}")]
    Usage(String),
    /// The device is not open: nothing to inject a z/VM fault into.
    #[error("dev/monreader is not open: no IUCV path to fault")]
    NotOpen,
}

impl From<String> for SimError {
    fn from(s: String) -> SimError {
        SimError::Usage(s)
    }
}

impl From<&str> for SimError {
    fn from(s: &str) -> SimError {
        SimError::Usage(s.to_string())
    }
}
