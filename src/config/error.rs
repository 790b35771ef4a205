//! The configuration's errors: a file that cannot be read or does not fit
//! the schema ([`ConfigError`], with the field, line and column), and the
//! checks behind its messages.

use super::{
    MAX_COMMAND_ARG, MAX_COMMAND_ARGS, MAX_ENDPOINTS, MAX_EP_LENGTH, MAX_ISO_BUFFER,
    MAX_SOCKET_PATH,
};

/// A configuration error with the position it was found at.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The YAML is malformed or a field is wrong.
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong, naming the field.
        message: String,
    },
}

/// A value outside what its field allows.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// A replay speed out of range.
    #[error("replay speed must be 0.001..=1000, got {0}")]
    ReplaySpeed(f64),
    /// An empty command.
    #[error("command: needs at least the program")]
    NoProgram,
    /// The program cannot be run: not found on PATH, missing or not
    /// executable.
    #[error("command: cannot run {0:?}: {1}")]
    NotRunnable(String, &'static str),
    /// Too many arguments.
    #[error("command: at most {MAX_COMMAND_ARGS} arguments, got {0}")]
    TooManyArgs(usize),
    /// An argument too long or with a NUL byte.
    #[error("command: argument {0} is longer than {MAX_COMMAND_ARG} bytes or has a NUL byte")]
    BadArg(usize),
    /// A socket path that is not absolute.
    #[error("socket: {0:?} is not an absolute path")]
    RelativeSocket(String),
    /// A socket path too long or with a NUL byte.
    #[error("socket: longer than {MAX_SOCKET_PATH} bytes or has a NUL byte")]
    LongSocket,
}

/// A device entry whose fields do not go together (the text starts with
/// the field, after the entry's `devices[i]`).
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// `speed` without a descriptors file.
    #[error(": `speed` is only for kinds descriptors and external")]
    SpeedWithoutFile,
    /// High speed with bcdUSB below 2.00.
    #[error(".speed: high speed needs bcdUSB 2.00 or later; {file} says {bcd_usb}")]
    HighSpeedOldUsb {
        /// The descriptors file.
        file: String,
        /// Its bcdUSB, as `1.10`.
        bcd_usb: String,
    },
    /// High speed with an ep0 other than 64 bytes.
    #[error(".speed: a high-speed device's ep0 is 64 bytes; {file} says bMaxPacketSize0 {mps0}")]
    HighSpeedEp0 {
        /// The descriptors file.
        file: String,
        /// Its bMaxPacketSize0.
        mps0: u8,
    },
    /// Low speed with an ep0 other than 8 bytes.
    #[error(".speed: a low-speed device's ep0 is 8 bytes; {file} says bMaxPacketSize0 {mps0}")]
    LowSpeedEp0 {
        /// The descriptors file.
        file: String,
        /// Its bMaxPacketSize0.
        mps0: u8,
    },
    /// Low speed with an endpoint it does not allow.
    #[error(
        ".speed: low speed allows only interrupt endpoints of at most 8 bytes; endpoint {ep:#04x} in {file} is not one"
    )]
    LowSpeedEndpoint {
        /// The endpoint.
        ep: u8,
        /// The descriptors file.
        file: String,
    },
    /// A `report_descriptors` entry for an interface that is not HID.
    #[error(".report_descriptors.{0}: interface {0} of the descriptors file has no HID descriptor with a report descriptor")]
    NotHid(u8),
    /// A `report_descriptors` entry of another length than its HID
    /// descriptor says.
    #[error(
        ".report_descriptors.{num}: {got} bytes, but the interface's HID descriptor says {want}"
    )]
    ReportLength {
        /// The interface.
        num: u8,
        /// The entry's length.
        got: usize,
        /// wDescriptorLength.
        want: usize,
    },
    /// `endpoints` on another kind.
    #[error(": `endpoints` is only for kind external")]
    EndpointsNotExternal,
    /// Too many `endpoints`.
    #[error(": at most {MAX_ENDPOINTS} `endpoints` entries, got {0}")]
    TooManyEndpoints(usize),
    /// A bad `endpoints` entry.
    #[error(".endpoints[{index}]: {error}")]
    Endpoint {
        /// Which entry.
        index: usize,
        /// What is wrong with it.
        error: EndpointError,
    },
    /// `capture` or `devaddr` on another kind.
    #[error(": `capture`, `devaddr` and `capture_bus` are only for kind from-capture")]
    CaptureNotFromCapture,
    /// No `capture`.
    #[error(": kind from-capture needs a `capture` file")]
    NoCapture,
    /// No `devaddr`.
    #[error(": kind from-capture needs `devaddr` (the device's address in the capture)")]
    NoDevaddr,
    /// Fields that the capture gives.
    #[error(": vendor_id and product_id come from the descriptors (the capture's or the `descriptors` file's)")]
    FromCaptureFields,
    /// `replay_timing` on another kind.
    #[error(": `replay_timing` is only for kind from-capture")]
    ReplayTimingNotFromCapture,
    /// `capture_bus` where the capture gives the descriptors.
    #[error(": `capture_bus` is only for a from-capture device with its own `descriptors` file")]
    CaptureBusWithoutDescriptors,
    /// The device is not in the capture.
    #[error(".capture: {0}")]
    Recorded(#[from] super::recorded::RecordedError),
    /// The capture was not loaded.
    #[error(".capture: not loaded")]
    NotLoaded,
}

/// An `endpoints:` entry that does not fit the device's descriptors.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// Listed twice.
    #[error("endpoint {0:#04x} is listed twice")]
    Twice(u8),
    /// Not in the setting named.
    #[error("no endpoint {ep:#04x} in alternate setting {alt} of {file}")]
    NotInSetting {
        /// The endpoint.
        ep: u8,
        /// The setting.
        alt: u8,
        /// The descriptors file.
        file: String,
    },
    /// Not in the descriptors.
    #[error("no endpoint {ep:#04x} in {file}")]
    NotInFile {
        /// The endpoint.
        ep: u8,
        /// The descriptors file.
        file: String,
    },
    /// One interface in two settings.
    #[error("interface {intf} cannot be in setting {alt} for endpoint {ep:#04x} and in setting {other_alt} for endpoint {other_ep:#04x}")]
    TwoSettings {
        /// The interface.
        intf: u8,
        /// This entry's setting.
        alt: u8,
        /// This entry's endpoint.
        ep: u8,
        /// The other entry's setting.
        other_alt: u8,
        /// The other entry's endpoint.
        other_ep: u8,
    },
    /// A field that this endpoint does not take.
    #[error("`{0}` is not for this endpoint")]
    NotFor(&'static str),
    /// A length out of range.
    #[error("length must be 1..={MAX_EP_LENGTH}, got {0}")]
    Length(u32),
    /// A zero timeout.
    #[error("timeout_ms must be at least 1")]
    ZeroTimeout,
    /// A packet count out of range.
    #[error("packets must be 1..=64, got {0}")]
    Packets(u32),
    /// A URB count out of range.
    #[error("urbs must be 1..=4, got {0}")]
    Urbs(u32),
    /// An isochronous URB too big or empty.
    #[error("{packets} packets of endpoint {ep:#04x} make {total} bytes; an isochronous URB holds 1..={MAX_ISO_BUFFER}")]
    IsoSize {
        /// Packets per URB.
        packets: u32,
        /// The endpoint.
        ep: u8,
        /// Bytes per URB.
        total: u32,
    },
    /// An OUT endpoint without data.
    #[error("OUT endpoint {0:#04x} needs its `data`")]
    NoData(u8),
    /// OUT data too long.
    #[error("data is longer than {MAX_EP_LENGTH} bytes")]
    LongData,
    /// ep0.
    #[error("endpoint {0:#04x} is a control endpoint")]
    Control(u8),
}

/// A file the configuration names that its bus cannot use.
#[derive(Debug, thiserror::Error)]
#[error("usb.buses[{bus}].replay.file: {source}")]
pub struct ReplayFileError {
    /// Index of the bus in `usb.buses`.
    pub bus: usize,
    /// Why.
    pub source: crate::capture::read::CaptureError,
}
