//! The YAML configuration: schema, defaults and validation.
//!
//! Every error names the field and gives the line and column in the file.
//! Value checks run inside deserialization (see the `try_from` types), so they
//! carry the exact position of the offending value; checks that compare
//! siblings (duplicate ports, duplicate buses) point at the list that holds them.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use serde::{Deserialize, Deserializer};

mod error;
pub mod locate;
pub mod zvm;

use crate::capture::recorded;
use crate::capture::usbdesc;

pub use error::{ConfigError, DeviceError, EndpointError, ReplayFileError, ValueError};
pub use locate::{locate, Seg};

/// The default configuration, also shipped as `config/default.yaml`.
pub const DEFAULT_YAML: &str = include_str!("../../config/default.yaml");

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Seed for URB tags, data and timing jitter. Without it, the time of day.
    #[serde(default)]
    pub seed: Option<u64>,
    /// `real` (follow the machine's clocks) or `virtual` (fixed start times).
    #[serde(default)]
    pub clock: ClockKind,
    /// `realistic` (a USB bus's latencies) or `fast` (the same events in
    /// the same order, with the simulated latencies cut a thousandfold).
    #[serde(default)]
    pub timing: Timing,
    /// The simulated USB side.
    #[serde(default)]
    pub usb: UsbConfig,
    /// tracefs: user-defined trace events.
    #[serde(default)]
    pub tracing: crate::tracefs::TracingConfig,
    /// The simulated z/VM monitor feeding `dev/monreader`.
    #[serde(default)]
    pub zvm: zvm::ZvmConfig,
}

/// Which clock stamps events.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ClockKind {
    /// The machine's monotonic and wall clocks.
    #[default]
    Real,
    /// Fixed start values, for byte-identical seeded runs.
    Virtual,
}

/// How long the simulated buses take.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Timing {
    /// A USB bus's latencies: the hub's debounce and reset recovery, each
    /// transfer's time on the bus, the controller's frames.
    #[default]
    Realistic,
    /// Every simulated latency a thousandth as long (a 100 ms debounce takes
    /// 100 µs, a 1 ms frame 1 µs); events, orders, statuses, lengths and
    /// bytes are those of `realistic`. For test suites.
    Fast,
}

impl Timing {
    /// How many times shorter than `realistic` the latencies are.
    pub fn divisor(self) -> u64 {
        match self {
            Timing::Realistic => 1,
            Timing::Fast => 1000,
        }
    }
}

/// When a from-capture device's replayed answers to programs complete
/// (`replay_timing`).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ReplayTiming {
    /// At the bus's pace once the replay reaches the completion.
    #[default]
    Bus,
    /// Besides, no earlier than the recorded delay between the URB's
    /// submission and its completion, from the program's submission.
    Recorded,
}

/// The USB side: buses with their devices.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct UsbConfig {
    /// Buses, numbered 1..=127; bus 0 is the "all buses" pseudo bus.
    #[serde(default, deserialize_with = "unique_buses")]
    pub buses: Vec<BusConfig>,
}

/// Host controller flavour of a bus: sets the root hub's descriptors and speed.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Controller {
    /// USB 1.1 full speed (12 Mb/s) root hub.
    Ohci,
    /// USB 1.1 full speed (12 Mb/s) root hub.
    Uhci,
    /// USB 2.0 high speed (480 Mb/s) root hub.
    Ehci,
    /// xHCI USB 2.0 root hub (480 Mb/s).
    #[default]
    Xhci,
}

/// One bus.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BusConfig {
    /// Bus number, 1..=127.
    pub bus: BusNumber,
    /// Host controller type.
    #[serde(default)]
    pub controller: Controller,
    /// Number of root hub ports, 1..=15.
    #[serde(default = "default_ports")]
    pub ports: PortCount,
    /// Interval between the root hub's port-status control transfers, ms (0: off).
    #[serde(default = "default_hub_poll")]
    pub hub_poll_ms: u32,
    /// xHCI only: whether the controller has the Contiguous Frame ID
    /// capability (HCCPARAMS1 CFC). With it (the default) xhci-hcd
    /// continues a queued isochronous stream's frame numbers; without it
    /// (as qemu's xHCI) it reports each URB at the frame after MFINDEX at
    /// its submission. Other controllers ignore it.
    #[serde(default = "default_true")]
    pub contiguous_frames: bool,
    /// Start the bus paused: nothing happens on it (its root hub's and
    /// devices' enumeration, timed plugs, traffic; its simulation time
    /// stands still) until `monfs ctl resume BUS`, so that a reader can
    /// open its capture first.
    #[serde(default)]
    pub paused: bool,
    /// Devices on the root hub.
    #[serde(default, deserialize_with = "unique_ports")]
    pub devices: Vec<DeviceConfig>,
    /// Drive the bus from a capture file instead of simulated devices.
    #[serde(default)]
    pub replay: Option<ReplayConfig>,
}

/// A bus driven by a usbmon capture (pcap or pcapng, linktype 189 or 220):
/// its URBs are replayed with their original spacing. Such a bus has no
/// simulated devices and no root hub traffic.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReplayConfig {
    /// The capture file (relative paths: from the directory monfs was
    /// started in).
    pub file: std::path::PathBuf,
    /// Speed factor: 2 replays twice as fast, 0.5 at half speed.
    #[serde(default)]
    pub speed: ReplaySpeed,
    /// Start over after the last packet, forever.
    #[serde(default, rename = "loop")]
    pub looping: bool,
    /// Start the replay this many ms after the bus starts (default 0).
    #[serde(default)]
    pub after_ms: u64,
}

/// A replay speed factor, checked to be finite and in 0.001..=1000.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
pub struct ReplaySpeed(pub f64);

impl Default for ReplaySpeed {
    fn default() -> Self {
        ReplaySpeed(1.0)
    }
}

impl<'de> Deserialize<'de> for ReplaySpeed {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = f64::deserialize(d)?;
        ReplaySpeed::new(v).map_err(serde::de::Error::custom)
    }
}

impl ReplaySpeed {
    /// A checked speed factor.
    pub fn new(v: f64) -> Result<ReplaySpeed, ValueError> {
        if v.is_finite() && (0.001..=1000.0).contains(&v) {
            Ok(ReplaySpeed(v))
        } else {
            Err(ValueError::ReplaySpeed(v))
        }
    }
}

fn default_ports() -> PortCount {
    PortCount(4)
}
fn default_true() -> bool {
    true
}

fn default_hub_poll() -> u32 {
    1000
}

/// Defines [`DeviceKind`] from one line per kind (`Variant = "name"`,
/// after its doc comment): the enum, its names in the configuration and
/// `monfs ctl`, and the list of all kinds.
macro_rules! device_kinds {
    ($($(#[doc = $doc:literal])* $kind:ident = $name:literal,)*) => {
        /// What a simulated device is.
        #[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
        pub enum DeviceKind {
            $($(#[doc = $doc])* #[serde(rename = $name)] $kind,)*
        }

        impl DeviceKind {
            /// Every kind, in the order the docs list them.
            pub const ALL: &[DeviceKind] = &[$(DeviceKind::$kind),*];

            /// The kind's name in the configuration and in `monfs ctl plug`.
            pub fn name(self) -> &'static str {
                match self {
                    $(DeviceKind::$kind => $name,)*
                }
            }
        }
    };
}

device_kinds! {
    /// External hub with its own ports (`devices:` below it).
    Hub = "hub",
    /// HID boot keyboard, interrupt IN polling.
    HidKeyboard = "hid-keyboard",
    /// HID boot mouse, interrupt IN polling.
    HidMouse = "hid-mouse",
    /// qemu's usb-tablet: HID absolute pointer, interrupt IN polling.
    HidTablet = "hid-tablet",
    /// Bulk-only mass storage doing SCSI READ(10)/WRITE(10).
    MassStorage = "mass-storage",
    /// USB audio with an isochronous OUT stream.
    Audio = "audio",
    /// Video class webcam with an isochronous IN stream.
    Webcam = "webcam",
    /// Vendor device doing back-to-back bulk transfers as fast as possible
    /// (for benchmarks).
    Flood = "flood",
    /// A device whose descriptors come from a file (`descriptors:`, a copy
    /// of a real device's sysfs `descriptors`): it enumerates with exactly
    /// those bytes and is quiet afterwards (no class driver binds).
    Descriptors = "descriptors",
    /// A device with descriptors from a file (as `descriptors`) whose
    /// transfers are answered by another process (`command:`), over the
    /// line protocol described in docs/external-devices.md.
    External = "external",
    /// A device taken from a usbmon capture (`capture:` and `devaddr:`):
    /// its descriptors and strings from the capture's GET_DESCRIPTOR
    /// completions, and each IN endpoint's recorded data, in order, looping.
    FromCapture = "from-capture",
}

/// One device on a port.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    /// Port on the parent hub, 1..=15.
    pub port: PortNumber,
    /// Device type.
    pub kind: DeviceKind,
    /// Plug the device in this many ms after start (default 0: at start).
    #[serde(default)]
    pub plug_after_ms: u64,
    /// Unplug the device this many ms after start (default: never).
    #[serde(default)]
    pub unplug_after_ms: Option<u64>,
    /// Polling / transfer interval in ms (HID: bInterval; storage: time between
    /// SCSI commands; audio/webcam: 1). Defaults per kind.
    #[serde(default)]
    pub interval_ms: Option<u32>,
    /// USB idVendor (defaults per kind).
    #[serde(default)]
    pub vendor_id: Option<u16>,
    /// USB idProduct (defaults per kind).
    #[serde(default)]
    pub product_id: Option<u16>,
    /// iManufacturer string.
    #[serde(default)]
    pub manufacturer: Option<String>,
    /// iProduct string.
    #[serde(default)]
    pub product: Option<String>,
    /// iSerialNumber string.
    #[serde(default)]
    pub serial: Option<String>,
    /// Injected error completions.
    #[serde(default)]
    pub errors: ErrorConfig,
    /// Payload bytes per bulk transfer, for `flood` (default 512;
    /// 1..=[`MAX_TRANSFER_SIZE`]).
    #[serde(default)]
    pub transfer_size: Option<TransferSize>,
    /// Events per second, for `flood` (default: about 4 million, as fast as
    /// the bus thread can go).
    #[serde(default)]
    pub rate: Option<u32>,
    /// For `audio`: whether a player opens the device's PCM once
    /// snd-usb-audio has probed it (default true): it sets the streaming
    /// interface's setting 1 and streams. `false`: the device stays idle
    /// at setting 0 after the probe, as on a machine where nothing plays.
    #[serde(default)]
    pub player: Option<bool>,
    /// For `kind: descriptors`: the raw sysfs `descriptors` file of a real
    /// device (relative paths: from the configuration file's directory).
    #[serde(default)]
    pub descriptors: Option<DescriptorFile>,
    /// For `kind: descriptors`: the report descriptor of each HID
    /// interface that usbhid is to bind, by interface number, in hex (a
    /// sysfs dump has none: read it from the real device's
    /// `/sys/class/hidraw/hidrawN/device/report_descriptor`). Its length is
    /// the one the interface's HID descriptor gives. Those interfaces get
    /// usbhid's probe, hidraw and input nodes; the device sends no input
    /// reports. Interfaces without one, and every other interface, stay
    /// without a driver.
    #[serde(default)]
    pub report_descriptors: BTreeMap<u8, HexData>,
    /// For `kind: external`: the peer's command line (program and
    /// arguments; a relative program is looked up as the shell would, from
    /// the directory monfs was started in). monfs starts it when the device
    /// is configured and talks to it over its standard input and output.
    #[serde(default)]
    pub command: Option<PeerCommand>,
    /// For `kind: external`, instead of `command`: the Unix socket a peer
    /// listens on (an absolute path); monfs connects to it when the device
    /// is plugged (`ep0: peer`) or configured (`ep0: monfs`).
    #[serde(default)]
    pub socket: Option<PeerSocket>,
    /// For `kind: external`: who answers the standard requests on ep0
    /// (the enumeration): monfs from the descriptors file (default), or
    /// the peer, which then answers every control request.
    #[serde(default)]
    pub ep0: Ep0Owner,
    /// For `kind: external`: the timeout of the host's control requests to
    /// the device, ms (usb_control_msg's 5000 by default; 10..=60000).
    #[serde(default)]
    pub ctrl_timeout_ms: Option<CtrlTimeout>,
    /// For `kind: external`: which interfaces monfs's driver binds. `auto`
    /// (default): those a stock kernel driver binds by class (HID,
    /// mass storage, audio, video), and those with an `endpoints:` entry
    /// (as `monfs-generic`); the others (vendor specific) stay without a
    /// driver, as on Linux for an unknown device, and see no URBs but a
    /// program's. `generic`: every interface, the others as `monfs-generic`.
    #[serde(default)]
    pub driver: DriverMode,
    /// For `kind: external`: what the host side submits on the device's
    /// endpoints besides the default (one URB on every interrupt and bulk
    /// IN endpoint of setting 0): OUT, isochronous, other settings.
    #[serde(default)]
    pub endpoints: Vec<EndpointConfig>,
    /// For `kind: descriptors` and `external`: the speed the device signals
    /// on its port (`low`, `full` or `high`), as a real device's electrical
    /// signalling tells the hub. Default: high for bcdUSB 2.00 and up, full
    /// below. A hub port of lower speed still limits it.
    #[serde(default)]
    pub speed: Option<DeviceSpeed>,
    /// For `kind: from-capture`: the capture file (pcap or pcapng; relative
    /// paths: from the configuration file's directory).
    #[serde(default)]
    pub capture: Option<CaptureFile>,
    /// For `kind: from-capture`: the device's address in the capture.
    #[serde(default)]
    pub devaddr: Option<DevAddr>,
    /// For `kind: from-capture` with its own `descriptors:` file: the bus
    /// of the capture whose packets of `devaddr` are the device's (default:
    /// the first bus where the capture has `devaddr`), as umockdev's pcap
    /// replay takes the packets of the device's bus and address only.
    #[serde(default)]
    pub capture_bus: Option<BusNumber>,
    /// For `kind: from-capture`: when a program's URB answered from the
    /// capture completes. `bus` (default): at the bus's pace once the
    /// replay reaches its completion (the transfer's time on the bus, an
    /// isochronous URB's frames). `recorded`: besides, no earlier than the
    /// delay between its submission and its completion in the capture,
    /// counted from the program's submission on the bus's clock (a
    /// thousandth of it under `timing: fast`, as every latency).
    #[serde(default)]
    pub replay_timing: Option<ReplayTiming>,
    /// The address the device is given at its enumeration (2..=127),
    /// instead of the next free one the hub driver would choose, as a
    /// recorded device keeps the address it was recorded at (`monfs
    /// umockdev-run`). Two devices of a bus with the same `devnum` are
    /// refused; if the address is taken when the device enumerates (by a
    /// device `monfs ctl plug` added), it gets the next free one, with a
    /// warning.
    #[serde(default)]
    pub devnum: Option<DevNum>,
    /// Attributes of the device's sysfs directory beyond monfs's own, with
    /// their exact contents (`power/persist: "1\n"`), as a recording gives
    /// them (`monfs umockdev-run`: a `.umockdev` file's `A:` lines). An
    /// attribute monfs shows itself keeps monfs's value.
    #[serde(default)]
    pub attributes: RecordedAttributes,
    /// Properties udev gives the device (its database, `udevadm info`,
    /// libudev) beyond or instead of those monfs's udev rules compute
    /// (`ID_MODEL: Reader`), as a recording gives them (a `.umockdev`
    /// file's `E:` lines).
    #[serde(default)]
    pub udev_properties: RecordedProperties,
    /// Devices behind a hub's ports.
    #[serde(default, deserialize_with = "unique_ports")]
    pub devices: Vec<DeviceConfig>,
}

/// A descriptor dump named in the configuration. Parsing only names it;
/// the loader step (`sim::usb::load`, which `check-config` and the mount
/// run) reads and checks it, reporting a missing file or bad bytes with
/// the file and the byte offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescriptorFile {
    /// The path as written in the configuration.
    pub path: std::path::PathBuf,
    /// The path to read: relative ones from the configuration's directory.
    pub full: std::path::PathBuf,
    /// The checked bytes, once loaded.
    pub dump: Option<std::sync::Arc<usbdesc::DescriptorDump>>,
}

/// Most entries of a device's `attributes` or `udev_properties`.
pub const MAX_RECORDED_ENTRIES: usize = 256;
/// Longest value of one, bytes.
pub const MAX_RECORDED_VALUE: usize = 4096;

/// A device's recorded sysfs attributes (`attributes:`): at most
/// [`MAX_RECORDED_ENTRIES`], each named `NAME` or `power/NAME` (letters,
/// digits, `_`, `-`, `.`, at most 64 bytes, not `.` or `..`), its contents
/// at most [`MAX_RECORDED_VALUE`] bytes without a NUL.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedAttributes(pub BTreeMap<String, String>);

/// Whether `name` is a recorded attribute's name ([`RecordedAttributes`]).
pub fn recorded_attribute_name(name: &str) -> bool {
    let leaf = name.strip_prefix("power/").unwrap_or(name);
    (1..=64).contains(&leaf.len())
        && leaf != "."
        && leaf != ".."
        && leaf
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
}

/// Whether `key` is a udev property's name ([`RecordedProperties`]).
pub fn recorded_property_name(key: &str) -> bool {
    (1..=64).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.".contains(&b))
}

/// Checks a recorded map: its size, its names (`name_ok`), its values.
fn recorded_map<'de, D: Deserializer<'de>>(
    d: D,
    what: &str,
    name_ok: fn(&str) -> bool,
    newline: bool,
) -> Result<BTreeMap<String, String>, D::Error> {
    let m = BTreeMap::<String, String>::deserialize(d)?;
    if m.len() > MAX_RECORDED_ENTRIES {
        return Err(serde::de::Error::custom(format!(
            "{what}: {} entries, at most {MAX_RECORDED_ENTRIES}",
            m.len()
        )));
    }
    for (k, v) in &m {
        if !name_ok(k) {
            return Err(serde::de::Error::custom(format!("{what}: bad name {k:?}")));
        }
        if v.len() > MAX_RECORDED_VALUE || v.contains('\0') || (!newline && v.contains('\n')) {
            return Err(serde::de::Error::custom(format!(
                "{what}: the value of {k} is longer than {MAX_RECORDED_VALUE} bytes or holds a NUL{}",
                if newline { "" } else { " or a newline" }
            )));
        }
    }
    Ok(m)
}

impl<'de> Deserialize<'de> for RecordedAttributes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        recorded_map(d, "attributes", recorded_attribute_name, true).map(RecordedAttributes)
    }
}

/// A device's recorded udev properties (`udev_properties:`): at most
/// [`MAX_RECORDED_ENTRIES`], keys of letters, digits, `_` and `.` (at most
/// 64 bytes), values of at most [`MAX_RECORDED_VALUE`] bytes without a NUL
/// or a newline.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordedProperties(pub BTreeMap<String, String>);

impl<'de> Deserialize<'de> for RecordedProperties {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        recorded_map(d, "udev_properties", recorded_property_name, false).map(RecordedProperties)
    }
}

/// Most arguments of a peer command.
pub const MAX_COMMAND_ARGS: usize = 256;
/// Longest argument of a peer command, bytes.
pub const MAX_COMMAND_ARG: usize = 4096;

/// The command line of an external device's peer, checked to be non-empty
/// with at most [`MAX_COMMAND_ARGS`] arguments of at most
/// [`MAX_COMMAND_ARG`] bytes, none with a NUL byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerCommand(pub Vec<String>);

impl<'de> Deserialize<'de> for PeerCommand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Vec::<String>::deserialize(d)?;
        PeerCommand::new(v).map_err(serde::de::Error::custom)
    }
}

impl PeerCommand {
    /// A checked command line.
    pub fn new(v: Vec<String>) -> Result<PeerCommand, ValueError> {
        if v.is_empty() {
            return Err(ValueError::NoProgram);
        }
        if v.len() > MAX_COMMAND_ARGS {
            return Err(ValueError::TooManyArgs(v.len()));
        }
        if let Some(i) = v
            .iter()
            .position(|a| a.len() > MAX_COMMAND_ARG || a.contains('\0'))
        {
            return Err(ValueError::BadArg(i));
        }
        if let Some(why) = not_runnable(&v[0]) {
            return Err(ValueError::NotRunnable(v[0].clone(), why));
        }
        Ok(PeerCommand(v))
    }
}

/// Why `program` cannot be started as `execvp` would start it, if it
/// cannot: an absolute path must be an executable file, a bare name must
/// be one in a directory of `PATH`. (A relative path with a slash is left
/// to the start: it depends on the daemon's working directory.)
fn not_runnable(program: &str) -> Option<&'static str> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.starts_with('/') {
        let p = std::path::Path::new(program);
        return match std::fs::metadata(p) {
            Err(_) => Some("no such file"),
            Ok(_) if !runnable(p) => Some("not an executable file"),
            Ok(_) => None,
        };
    }
    if program.contains('/') {
        return None;
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    if std::env::split_paths(&path).any(|d| runnable(&d.join(program))) {
        None
    } else {
        Some("not found in PATH")
    }
}

/// Longest path of a peer's Unix socket, bytes (sun_path holds 108 with
/// its NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The Unix socket of an external device's peer: an absolute path of at
/// most [`MAX_SOCKET_PATH`] bytes without a NUL byte.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerSocket(pub std::path::PathBuf);

impl<'de> Deserialize<'de> for PeerSocket {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = String::deserialize(d)?;
        PeerSocket::new(v).map_err(serde::de::Error::custom)
    }
}

impl PeerSocket {
    /// A checked socket path.
    pub fn new(v: String) -> Result<PeerSocket, ValueError> {
        if !v.starts_with('/') {
            return Err(ValueError::RelativeSocket(v));
        }
        if v.len() > MAX_SOCKET_PATH || v.contains('\0') {
            return Err(ValueError::LongSocket);
        }
        Ok(PeerSocket(v.into()))
    }
}

/// Who answers an external device's standard control requests on ep0.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Ep0Owner {
    /// monfs, from the descriptors file; class and vendor requests go to
    /// the peer.
    #[default]
    Monfs,
    /// The peer: every control request, the enumeration's included.
    Peer,
}

/// Which interfaces of an external device monfs's driver binds.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DriverMode {
    /// Those a stock kernel driver binds and those `endpoints:` entries
    /// name; the others have none.
    #[default]
    Auto,
    /// Every interface of the active configuration.
    Generic,
}

/// An external device's control request timeout, ms: 10..=60000.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtrlTimeout(pub u32);

impl<'de> Deserialize<'de> for CtrlTimeout {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = u32::deserialize(d)?;
        if !(10..=60000).contains(&v) {
            return Err(serde::de::Error::custom(format!(
                "ctrl_timeout_ms: {v} is not in 10..=60000"
            )));
        }
        Ok(CtrlTimeout(v))
    }
}

/// Most `endpoints:` entries of an external device.
pub const MAX_ENDPOINTS: usize = 30;
/// Largest bulk or interrupt transfer of an `endpoints:` entry, bytes.
pub const MAX_EP_LENGTH: u32 = 16384;
/// Largest isochronous URB of an `endpoints:` entry (all its packets), bytes.
pub const MAX_ISO_BUFFER: u32 = 65535;

/// What the host side submits on one endpoint of a `kind: external`
/// device, as a class driver or a libusb program would (see
/// docs/external-devices.md).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct EndpointConfig {
    /// bEndpointAddress: 0x01..=0x0f (OUT) or 0x81..=0x8f (IN).
    pub ep: EpAddr,
    /// The alternate setting that holds it (default: the lowest one);
    /// other than 0, the driver selects it with SET_INTERFACE first.
    #[serde(default)]
    pub alt: Option<u8>,
    /// Bulk or interrupt IN: the transfer length (default
    /// wMaxPacketSize), 1..=[`MAX_EP_LENGTH`].
    #[serde(default)]
    pub length: Option<u32>,
    /// OUT: the data each URB carries, in hex. Bulk and interrupt: exactly
    /// these bytes (required); isochronous: repeated to fill the packets
    /// (default zeros).
    #[serde(default)]
    pub data: Option<HexData>,
    /// Bulk or interrupt: time from a completion to the next submission
    /// (default 0: at once).
    #[serde(default)]
    pub every_ms: Option<u32>,
    /// Bulk or interrupt: a libusb timeout; a URB still unanswered then
    /// is discarded (asynchronous unlink, -104).
    #[serde(default)]
    pub timeout_ms: Option<u32>,
    /// Isochronous: packets per URB, 1..=64 (default 8).
    #[serde(default)]
    pub packets: Option<u32>,
    /// Isochronous: URBs kept queued, 1..=4 (default 2).
    #[serde(default)]
    pub urbs: Option<u32>,
}

/// An endpoint address as written in `endpoints:` (`0x81` or 129).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpAddr(pub u8);

impl<'de> Deserialize<'de> for EpAddr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = i64::deserialize(d)?;
        if !(1..=0x0f).contains(&v) && !(0x81..=0x8f).contains(&v) {
            return Err(serde::de::Error::custom(format!(
                "ep must be an endpoint address 0x01..=0x0f or 0x81..=0x8f, got {v:#x}"
            )));
        }
        Ok(EpAddr(v as u8))
    }
}

/// Bytes written in hex (`"01ab"`; blanks between bytes allowed), at most
/// [`MAX_ISO_BUFFER`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HexData(pub Vec<u8>);

impl<'de> Deserialize<'de> for HexData {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let digits: Vec<u8> = s.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
        let bad = || serde::de::Error::custom("data must be hex bytes (\"0a1b...\")");
        if digits.len() % 2 != 0 || digits.len() / 2 > MAX_ISO_BUFFER as usize {
            return Err(bad());
        }
        let d = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
        digits
            .chunks(2)
            .map(|p| Some(d(p[0])? << 4 | d(p[1])?))
            .collect::<Option<Vec<u8>>>()
            .map(HexData)
            .ok_or_else(bad)
    }
}

/// Check `report_descriptors:` against the descriptors file: each names a
/// HID interface (setting 0, class 3) whose HID descriptor gives a report
/// descriptor of the entry's length (usbhid reads that many bytes).
fn check_reports(dev: &DeviceConfig) -> Result<(), DeviceError> {
    let Some(dump) = dev.descriptors.as_ref().and_then(|f| f.dump.as_ref()) else {
        return Ok(());
    };
    for (num, report) in &dev.report_descriptors {
        let want = dump
            .configs
            .iter()
            .flat_map(|c| c.interfaces.iter())
            .filter(|i| i.num == *num && i.alt == 0 && i.class == 3)
            .find_map(|i| usbdesc::hid_report_length(&i.extra));
        match want {
            None => return Err(DeviceError::NotHid(*num)),
            Some(n) if n != report.0.len() => {
                return Err(DeviceError::ReportLength {
                    num: *num,
                    got: report.0.len(),
                    want: n,
                })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The speed a device with a descriptor file signals (`speed:`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceSpeed {
    /// Low speed, 1.5 Mbit/s.
    Low,
    /// Full speed, 12 Mbit/s.
    Full,
    /// High speed, 480 Mbit/s.
    High,
}

/// Check `speed:` against the descriptors, as USB 2.0 allows them: high
/// speed needs bcdUSB 2.00 or later and an ep0 of 64 bytes; low speed an
/// ep0 of 8 bytes and only interrupt (and control) endpoints of at most 8
/// bytes.
fn check_speed(dev: &DeviceConfig) -> Result<(), DeviceError> {
    let Some(speed) = dev.speed else {
        return Ok(());
    };
    let Some(file) = &dev.descriptors else {
        return Err(DeviceError::SpeedWithoutFile);
    };
    let Some(dump) = &file.dump else {
        return Ok(());
    };
    let mps0 = dump.device()[7];
    let name = || file.path.display().to_string();
    match speed {
        DeviceSpeed::High if dump.bcd_usb() < 0x0200 => Err(DeviceError::HighSpeedOldUsb {
            file: name(),
            bcd_usb: format!("{:x}.{:02x}", dump.bcd_usb() >> 8, dump.bcd_usb() & 0xff),
        }),
        DeviceSpeed::High if mps0 != 64 => Err(DeviceError::HighSpeedEp0 { file: name(), mps0 }),
        DeviceSpeed::Low if mps0 != 8 => Err(DeviceError::LowSpeedEp0 { file: name(), mps0 }),
        DeviceSpeed::Low => {
            let eps = dump.configs.iter().flat_map(|c| c.interfaces.iter());
            match eps
                .flat_map(|i| i.eps.iter())
                .find(|e| e.attr & 3 != 3 || e.mps > 8)
            {
                Some(e) => Err(DeviceError::LowSpeedEndpoint {
                    ep: e.addr,
                    file: name(),
                }),
                None => Ok(()),
            }
        }
        _ => Ok(()),
    }
}

/// Check the `endpoints:` entries of an external device against its
/// descriptors. Errors start with the entry (`.endpoints[1]: ...`).
fn check_endpoints(dev: &DeviceConfig) -> Result<(), DeviceError> {
    if dev.endpoints.is_empty() {
        return Ok(());
    }
    if dev.kind != DeviceKind::External {
        return Err(DeviceError::EndpointsNotExternal);
    }
    if dev.endpoints.len() > MAX_ENDPOINTS {
        return Err(DeviceError::TooManyEndpoints(dev.endpoints.len()));
    }
    let Some((file, dump)) = dev
        .descriptors
        .as_ref()
        .and_then(|f| Some((f, f.dump.as_ref()?)))
    else {
        return Ok(());
    };
    let hs = dump.bcd_usb() >= 0x0200;
    let mut seen: Vec<(u8, u8, u8)> = vec![];
    for (j, e) in dev.endpoints.iter().enumerate() {
        let at = |error: EndpointError| DeviceError::Endpoint { index: j, error };
        let addr = e.ep.0;
        if seen.iter().any(|s| s.0 == addr) {
            return Err(at(EndpointError::Twice(addr)));
        }
        // The setting that holds it, in any configuration of the dump.
        let found = dump
            .configs
            .iter()
            .flat_map(|c| c.interfaces.iter())
            .filter(|i| e.alt.is_none_or(|a| a == i.alt))
            .filter_map(|i| i.eps.iter().find(|x| x.addr == addr).map(|x| (i, x)))
            .min_by_key(|(i, _)| i.alt);
        let Some((intf, d)) = found else {
            let file = file.path.display().to_string();
            return Err(at(match e.alt {
                Some(alt) => EndpointError::NotInSetting {
                    ep: addr,
                    alt,
                    file,
                },
                None => EndpointError::NotInFile { ep: addr, file },
            }));
        };
        if let Some(s) = seen.iter().find(|s| s.1 == intf.num && s.2 != intf.alt) {
            return Err(at(EndpointError::TwoSettings {
                intf: intf.num,
                alt: intf.alt,
                ep: addr,
                other_alt: s.2,
                other_ep: s.0,
            }));
        }
        seen.push((addr, intf.num, intf.alt));
        let iso = d.attr & 3 == 1;
        let out = addr & 0x80 == 0;
        let only = |what: &'static str, ok: bool| -> Result<(), DeviceError> {
            if ok {
                Ok(())
            } else {
                Err(at(EndpointError::NotFor(what)))
            }
        };
        only("length", !iso && !out || e.length.is_none())?;
        only("data", out || e.data.is_none())?;
        only("every_ms", !iso || e.every_ms.is_none())?;
        only("timeout_ms", !iso || e.timeout_ms.is_none())?;
        only("packets", iso || e.packets.is_none())?;
        only("urbs", iso || e.urbs.is_none())?;
        if let Some(l) = e.length {
            if !(1..=MAX_EP_LENGTH).contains(&l) {
                return Err(at(EndpointError::Length(l)));
            }
        }
        if let Some(t) = e.timeout_ms {
            if t == 0 {
                return Err(at(EndpointError::ZeroTimeout));
            }
        }
        if iso {
            let n = e.packets.unwrap_or(8);
            if !(1..=64).contains(&n) {
                return Err(at(EndpointError::Packets(n)));
            }
            if !(1..=4).contains(&e.urbs.unwrap_or(2)) {
                return Err(at(EndpointError::Urbs(e.urbs.unwrap_or(2))));
            }
            let mult = if hs {
                1 + ((d.mps >> 11) & 3) as u32
            } else {
                1
            };
            let total = n * (d.mps as u32 & 0x7ff) * mult;
            if total == 0 || total > MAX_ISO_BUFFER {
                return Err(at(EndpointError::IsoSize {
                    packets: n,
                    ep: addr,
                    total,
                }));
            }
        } else if out {
            match &e.data {
                None => return Err(at(EndpointError::NoData(addr))),
                Some(h) if h.0.len() > MAX_EP_LENGTH as usize => {
                    return Err(at(EndpointError::LongData))
                }
                Some(_) => {}
            }
        }
        if d.attr & 3 == 0 {
            return Err(at(EndpointError::Control(addr)));
        }
    }
    Ok(())
}

thread_local! {
    /// The directory relative `descriptors:` paths start from, while
    /// [`Config::parse`] runs.
    static BASE_DIR: std::cell::RefCell<std::path::PathBuf> =
        std::cell::RefCell::new(std::path::PathBuf::new());
}

impl<'de> Deserialize<'de> for DescriptorFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = std::path::PathBuf::deserialize(d)?;
        let full = BASE_DIR.with(|b| b.borrow().join(&path));
        Ok(DescriptorFile {
            path,
            full,
            dump: None,
        })
    }
}

/// A capture named in the configuration (`kind: from-capture`). Parsing
/// only names it; the loader step (`sim::usb::load`) opens it (safely: a
/// regular file, never blocking) and takes the device by `devaddr`.
#[derive(Clone, Debug, PartialEq)]
pub struct CaptureFile {
    /// The path as written in the configuration.
    pub path: std::path::PathBuf,
    /// The path to open: relative ones from the configuration's directory.
    pub full: std::path::PathBuf,
    /// The device taken from it, once loaded.
    pub device: Option<std::sync::Arc<recorded::RecordedDevice>>,
}

impl CaptureFile {
    /// A capture whose device is already taken (by `monfs ctl plug`).
    pub fn taken(device: recorded::RecordedDevice) -> CaptureFile {
        CaptureFile {
            path: device.path.clone(),
            full: device.path.clone(),
            device: Some(std::sync::Arc::new(device)),
        }
    }
}

impl<'de> Deserialize<'de> for CaptureFile {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let path = std::path::PathBuf::deserialize(d)?;
        let full = BASE_DIR.with(|b| b.borrow().join(&path));
        Ok(CaptureFile {
            path,
            full,
            device: None,
        })
    }
}

/// Periodic error injection: every Nth transfer on the device's data endpoints
/// ends the named way (0 = never).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ErrorConfig {
    /// Complete with -32 (EPIPE, stall).
    #[serde(default)]
    pub stall_every: u32,
    /// Complete with -2 (ENOENT, unlinked).
    #[serde(default)]
    pub unlink_every: u32,
    /// Fail the submission with an `E` event (-19, ENODEV... configurable below).
    #[serde(default)]
    pub submit_error_every: u32,
    /// Completion status -71 (EPROTO, babble/CRC).
    #[serde(default)]
    pub proto_error_every: u32,
}

macro_rules! ranged {
    ($name:ident, $inner:ty, $lo:expr, $hi:expr, $what:expr) => {
        #[doc = concat!($what, ", checked to be in ", stringify!($lo), "..=", stringify!($hi), ".")]
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub $inner);

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let v = i64::deserialize(d)?;
                if !($lo..=$hi).contains(&v) {
                    return Err(serde::de::Error::custom(format!(
                        "{} must be {}..={}, got {}",
                        $what, $lo, $hi, v
                    )));
                }
                Ok($name(v as $inner))
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

ranged!(BusNumber, u16, 1, 127, "bus number");

/// The largest `transfer_size`: 1 MiB, far more than usbmon keeps of one
/// event (the binary ring holds at most a fifth of itself per event, the
/// text interface 32 bytes), and a bound on what one simulated URB costs.
pub const MAX_TRANSFER_SIZE: u32 = 1 << 20;

ranged!(TransferSize, u32, 1, 1048576, "transfer_size");
ranged!(PortCount, u8, 1, 15, "port count");
ranged!(PortNumber, u8, 1, 15, "port number");
ranged!(DevAddr, u8, 1, 127, "devaddr");
ranged!(DevNum, u8, 2, 127, "devnum");

fn unique_buses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<BusConfig>, D::Error> {
    let buses = Vec::<BusConfig>::deserialize(d)?;
    let mut seen = BTreeSet::new();
    for (i, b) in buses.iter().enumerate() {
        if !seen.insert(b.bus) {
            return Err(serde::de::Error::custom(format!(
                "buses[{i}]: bus number {} is used twice",
                b.bus
            )));
        }
        if let (Some(r), false) = (&b.replay, b.devices.is_empty()) {
            return Err(serde::de::Error::custom(format!(
                "buses[{i}]: bus {} replays {}: a replayed bus cannot also have devices",
                b.bus,
                r.file.display()
            )));
        }
        for d in &b.devices {
            if d.port.0 > b.ports.0 {
                return Err(serde::de::Error::custom(format!(
                    "buses[{i}]: a device sits on port {} but the root hub has {} ports",
                    d.port, b.ports
                )));
            }
        }
        let mut nums = BTreeSet::new();
        let mut stack: Vec<&DeviceConfig> = b.devices.iter().collect();
        while let Some(d) = stack.pop() {
            if let Some(n) = d.devnum {
                if !nums.insert(n) {
                    return Err(serde::de::Error::custom(format!(
                        "buses[{i}]: devnum {n} is given to two devices of bus {}",
                        b.bus
                    )));
                }
            }
            stack.extend(d.devices.iter());
        }
    }
    Ok(buses)
}

fn unique_ports<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<DeviceConfig>, D::Error> {
    let mut devs = Vec::<DeviceConfig>::deserialize(d)?;
    let mut seen = BTreeSet::new();
    for (i, dev) in devs.iter_mut().enumerate() {
        if !seen.insert(dev.port) {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: port {} is used twice",
                dev.port
            )));
        }
        let from_file = matches!(dev.kind, DeviceKind::Descriptors | DeviceKind::External);
        let recorded = dev.kind == DeviceKind::FromCapture;
        if from_file != dev.descriptors.is_some() && !recorded {
            return Err(serde::de::Error::custom(if from_file {
                let k = if dev.kind == DeviceKind::External {
                    "external"
                } else {
                    "descriptors"
                };
                format!("devices[{i}]: kind {k} needs a `descriptors` file")
            } else {
                format!("devices[{i}]: `descriptors` is only for kinds descriptors, external and from-capture")
            }));
        }
        let external = dev.kind == DeviceKind::External;
        let peer = dev.command.is_some() as u8 + dev.socket.is_some() as u8;
        if external && peer != 1 || !external && peer != 0 {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: kind external needs a `command` or a `socket` (one of them), and only it takes one"
            )));
        }
        if !external && (dev.ep0 != Ep0Owner::Monfs || dev.ctrl_timeout_ms.is_some()) {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: `ep0` and `ctrl_timeout_ms` are only for kind external"
            )));
        }
        if !external && dev.driver != DriverMode::Auto {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: `driver` is only for kind external"
            )));
        }
        if !dev.report_descriptors.is_empty() && dev.kind != DeviceKind::Descriptors {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: `report_descriptors` is only for kind descriptors"
            )));
        }
        check_reports(dev).map_err(|m| serde::de::Error::custom(format!("devices[{i}]{m}")))?;
        if dev.player.is_some() && dev.kind != DeviceKind::Audio {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: `player` is only for kind audio"
            )));
        }
        check_endpoints(dev).map_err(|m| serde::de::Error::custom(format!("devices[{i}]{m}")))?;
        check_speed(dev).map_err(|m| serde::de::Error::custom(format!("devices[{i}]{m}")))?;
        if from_file && (dev.vendor_id.is_some() || dev.product_id.is_some()) {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: vendor_id and product_id come from the descriptors file"
            )));
        }
        if !dev.devices.is_empty() && dev.kind != DeviceKind::Hub {
            return Err(serde::de::Error::custom(format!(
                "devices[{i}]: only a hub can have devices below it"
            )));
        }
        check_recorded(dev).map_err(|m| serde::de::Error::custom(format!("devices[{i}]{m}")))?;
    }
    Ok(devs)
}

/// For `kind: from-capture`: check its fields (the loader step takes the
/// device from the capture). Errors start with the field.
fn check_recorded(dev: &DeviceConfig) -> Result<(), DeviceError> {
    let recorded = dev.kind == DeviceKind::FromCapture;
    if !recorded {
        return match (&dev.capture, &dev.devaddr, &dev.capture_bus) {
            (None, None, None) if dev.replay_timing.is_some() => {
                Err(DeviceError::ReplayTimingNotFromCapture)
            }
            (None, None, None) => Ok(()),
            _ => Err(DeviceError::CaptureNotFromCapture),
        };
    }
    if dev.capture.is_none() {
        return Err(DeviceError::NoCapture);
    }
    if dev.devaddr.is_none() {
        return Err(DeviceError::NoDevaddr);
    }
    if dev.vendor_id.is_some() || dev.product_id.is_some() {
        return Err(DeviceError::FromCaptureFields);
    }
    if dev.capture_bus.is_some() && dev.descriptors.is_none() {
        return Err(DeviceError::CaptureBusWithoutDescriptors);
    }
    Ok(())
}

/// The checks of a device entry against its loaded files (the loader step
/// runs them once the descriptors are read): its `endpoints:`, `speed:`
/// and `report_descriptors:`. Errors start with the field (`.speed: ...`).
pub fn check_loaded(dev: &DeviceConfig) -> Result<(), DeviceError> {
    check_endpoints(dev)?;
    check_speed(dev)?;
    check_reports(dev)
}

impl Config {
    /// Parse a configuration; `origin` names it in errors, and relative
    /// `descriptors:` and `capture:` paths start from its directory. Files
    /// are only named: `sim::usb::load` reads them (the loader step).
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let base = Path::new(origin)
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_default();
        let old = BASE_DIR.with(|b| b.replace(base));
        let parsed = serde_yaml_ng::from_str::<Config>(text);
        BASE_DIR.with(|b| b.replace(old));
        parsed.map_err(|e| {
            let (line, column) = e
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((1, 1));
            // The message ends in " at line L column C"; the position is given
            // up front instead.
            let mut message = e.to_string();
            if let Some(idx) = message.rfind(" at line ") {
                message.truncate(idx);
            }
            ConfigError::Invalid {
                path: origin.to_string(),
                line,
                column,
                message,
            }
        })
    }

    /// The built-in default (identical to `config/default.yaml`).
    pub fn builtin() -> Config {
        Config::parse(DEFAULT_YAML, "<built-in default>").expect("built-in config is valid")
    }
}

#[cfg(test)]
mod tests;
