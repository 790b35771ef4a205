//! The port between the USB core and whatever provides the devices (the
//! simulator): the kernel's `struct usb_device` and `struct usb_interface`
//! as the core's users (usbfs `devio.c`, sysfs `sysfs.c`) read them, and
//! the calls devio.c makes into the core (`usb_submit_urb`,
//! `usb_kill_urb`, `usb_set_configuration`, `usb_set_interface`,
//! `usb_clear_halt`, `usb_reset_device`, `usb_driver_release_interface`,
//! ...). Mirrors `include/linux/usb.h`.
//!
//! The simulator implements [`UsbCorePort`] so that a program's URBs go
//! through the same bus, hub and device code as the simulated drivers'
//! (and so appear in usbmon). Completions are delivered asynchronously
//! through [`UrbDone`]; plugs, unplugs and driver changes through the one
//! numbered stream [`DeviceChanges`] to each [`DeviceWatcher`]. Both
//! are called from a bus's thread with the bus locked: they must not block
//! and must not call back into the port.

use std::sync::Arc;

use crate::base::clock::Timestamp;

/// A device as the port names it: its bus and an identity that is never
/// reused on that bus (a devnum is reused after an unplug; this is not).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DevRef {
    /// Bus number (1..).
    pub bus: u16,
    /// The provider's identity of the device on its bus.
    pub id: u64,
}

/// `enum usb_device_speed`, numbered as the kernel (and
/// `USBDEVFS_GET_SPEED`, `usbdevfs_conninfo_ex.speed`) numbers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Speed {
    /// USB_SPEED_UNKNOWN.
    Unknown = 0,
    /// USB_SPEED_LOW, 1.5 Mbit/s.
    Low = 1,
    /// USB_SPEED_FULL, 12 Mbit/s.
    Full = 2,
    /// USB_SPEED_HIGH, 480 Mbit/s.
    High = 3,
    /// USB_SPEED_WIRELESS.
    Wireless = 4,
    /// USB_SPEED_SUPER, 5 Gbit/s.
    Super = 5,
    /// USB_SPEED_SUPER_PLUS, 10 Gbit/s.
    SuperPlus = 6,
}

impl Speed {
    /// The sysfs `speed` attribute's text (Mbit/s).
    pub fn sysfs_str(self) -> &'static str {
        match self {
            Speed::Unknown => "unknown",
            Speed::Low => "1.5",
            Speed::Full => "12",
            Speed::High => "480",
            Speed::Wireless => "480",
            Speed::Super => "5000",
            Speed::SuperPlus => "10000",
        }
    }
}

/// One interface of the active configuration (`struct usb_interface`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// bInterfaceNumber.
    pub number: u8,
    /// The current alternate setting (bAlternateSetting).
    pub alt: u8,
    /// How many alternate settings the interface has.
    pub num_altsetting: u8,
    /// bInterfaceClass of the current setting.
    pub class: u8,
    /// bInterfaceSubClass of the current setting.
    pub subclass: u8,
    /// bInterfaceProtocol of the current setting.
    pub protocol: u8,
    /// bNumEndpoints of the current setting.
    pub num_endpoints: u8,
    /// iInterface of the current setting (0: none).
    pub string_index: u8,
    /// The driver bound to it, by the kernel's driver name: `usbhid`,
    /// `usb-storage`, `hub`, `snd-usb-audio`, `uvcvideo`, `usbfs` (a
    /// program claimed it), None (no driver: vendor class, external peers
    /// unless they name one, a detached driver).
    pub driver: Option<String>,
    /// The HID report descriptor the device gave usbhid's probe, while
    /// usbhid has the interface and knows it; empty otherwise.
    pub report_descriptor: Vec<u8>,
    /// The control requests the bound driver's probe sent and what the
    /// device answered, in order, where the driver's part above the core
    /// needs them (cp210x's part number, ch341's chip version); empty
    /// otherwise.
    pub probe_answers: Vec<ProbeAnswer>,
}

/// A control request of a driver's probe and the device's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// The setup packet.
    pub setup: [u8; 8],
    /// The completion status (0, or a negative errno: -32 a stall).
    pub status: i32,
    /// The IN data the device gave (`actual_length` bytes).
    pub data: Vec<u8>,
}

impl ProbeAnswer {
    /// The answer to the request with this `bRequest`, `wValue` and
    /// `wLength` among `answers` (the last one sent).
    pub fn find(answers: &[ProbeAnswer], request: u8, value: u16, length: u16) -> Option<&Self> {
        answers.iter().rev().find(|a| {
            a.setup[1] == request
                && u16::from_le_bytes([a.setup[2], a.setup[3]]) == value
                && u16::from_le_bytes([a.setup[6], a.setup[7]]) == length
        })
    }
}

/// What a root hub's host controller is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostController {
    /// The HCD driver name, as the root hub's manufacturer string names it
    /// (`xhci-hcd`, `ehci_hcd`, `ohci_hcd`, `uhci_hcd`).
    pub driver: String,
    /// The controller's PCI name (`0000:00:04.0`), the root hub's serial.
    pub pci_name: String,
}

/// A USB device as the core knows it (`struct usb_device`), root hubs
/// included. A snapshot: ask the port again for the current state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsbDevice {
    /// The port's name for it.
    pub dev: DevRef,
    /// Bus number (`busnum`).
    pub busnum: u16,
    /// Address on the bus (`devnum`); 1 for a root hub.
    pub devnum: u8,
    /// Port numbers from the root hub down (`devpath` `1.4.2` is
    /// `[1, 4, 2]`); empty for a root hub.
    pub port_path: Vec<u8>,
    /// The hub it hangs off; None for a root hub.
    pub parent: Option<DevRef>,
    /// Depth below the root hub (0 for the root hub).
    pub level: u8,
    /// The speed it runs at.
    pub speed: Speed,
    /// The 18-byte device descriptor.
    pub descriptor: [u8; 18],
    /// Every configuration descriptor, raw, as the device answered
    /// GET_DESCRIPTOR(CONFIGURATION) (each `wTotalLength` bytes), in index
    /// order.
    pub configs: Vec<Vec<u8>>,
    /// The string descriptors the core knows, by index, decoded
    /// (manufacturer, product, serial, configuration and interface strings).
    pub strings: Vec<(u8, String)>,
    /// bConfigurationValue of the active configuration; 0: unconfigured.
    pub active_config: u8,
    /// The interfaces of the active configuration (empty if unconfigured).
    pub interfaces: Vec<Interface>,
    /// Downstream ports if it is a hub (`maxchild`), 0 otherwise.
    pub maxchild: u8,
    /// The host controller, for a root hub.
    pub controller: Option<HostController>,
    /// Whether the generic driver's probe is over: its interfaces had their
    /// drivers probed (the device is bound to `usb`).
    pub probed: bool,
    /// Recorded sysfs attributes beyond the core's own (`NAME` or
    /// `power/NAME`, contents), from the configuration's `attributes`.
    pub recorded_attributes: Vec<(String, String)>,
    /// Recorded udev properties, from the configuration's
    /// `udev_properties`.
    pub recorded_properties: Vec<(String, String)>,
}

impl UsbDevice {
    /// Whether this is a bus's root hub.
    pub fn is_root_hub(&self) -> bool {
        self.parent.is_none()
    }

    /// idVendor.
    pub fn vendor_id(&self) -> u16 {
        u16::from_le_bytes([self.descriptor[8], self.descriptor[9]])
    }

    /// idProduct.
    pub fn product_id(&self) -> u16 {
        u16::from_le_bytes([self.descriptor[10], self.descriptor[11]])
    }

    /// The kernel's name of the device (sysfs's): `usbB` for a root hub,
    /// `B-P.P...` below it.
    pub fn name(&self) -> String {
        if self.is_root_hub() {
            format!("usb{}", self.busnum)
        } else {
            format!("{}-{}", self.busnum, self.devpath())
        }
    }

    /// The string descriptor `idx`, decoded, if the core knows it.
    pub fn string(&self, idx: u8) -> Option<&str> {
        if idx == 0 {
            return None;
        }
        self.strings
            .iter()
            .find(|(i, _)| *i == idx)
            .map(|(_, s)| s.as_str())
    }

    /// The device descriptor followed by every raw configuration
    /// descriptor: what `read()` of the usbfs node and the sysfs
    /// `descriptors` attribute give.
    pub fn descriptors_blob(&self) -> Vec<u8> {
        let mut v = self.descriptor.to_vec();
        for c in &self.configs {
            v.extend_from_slice(c);
        }
        v
    }

    /// The `devpath` of sysfs and `usbdevfs_conninfo_ex.path` text:
    /// `1.4.2`, or `0` for a root hub.
    pub fn devpath(&self) -> String {
        if self.port_path.is_empty() {
            return "0".into();
        }
        let p: Vec<String> = self.port_path.iter().map(|p| p.to_string()).collect();
        p.join(".")
    }

    /// The raw configuration descriptor whose bConfigurationValue is
    /// `value`.
    pub fn config(&self, value: u8) -> Option<&[u8]> {
        self.configs
            .iter()
            .find(|c| c.len() >= 9 && c[5] == value)
            .map(|c| c.as_slice())
    }

    /// The interface `number` of the active configuration.
    pub fn interface(&self, number: u8) -> Option<&Interface> {
        self.interfaces.iter().find(|i| i.number == number)
    }
}

/// Transfer type, numbered as `USBDEVFS_URB_TYPE_*` (and usbmon's
/// `xfer_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransferType {
    /// USBDEVFS_URB_TYPE_ISO.
    Iso = 0,
    /// USBDEVFS_URB_TYPE_INTERRUPT.
    Interrupt = 1,
    /// USBDEVFS_URB_TYPE_CONTROL.
    Control = 2,
    /// USBDEVFS_URB_TYPE_BULK.
    Bulk = 3,
}

impl TransferType {
    /// From the number in `usbdevfs_urb.type`.
    pub fn from_u8(v: u8) -> Option<TransferType> {
        Some(match v {
            0 => TransferType::Iso,
            1 => TransferType::Interrupt,
            2 => TransferType::Control,
            3 => TransferType::Bulk,
            _ => return None,
        })
    }
}

/// A URB a program submits (`usb_submit_urb` from devio.c), already
/// checked by the usbfs side against the endpoint and the limits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrbRequest {
    /// The endpoint's transfer type.
    pub xfer: TransferType,
    /// The endpoint address with the direction bit (0x00/0x80 for ep0:
    /// the direction of a control transfer comes from its setup packet).
    pub endpoint: u8,
    /// The setup packet of a control transfer.
    pub setup: Option<[u8; 8]>,
    /// `transfer_buffer_length` (for control: wLength).
    pub length: u32,
    /// The OUT data (`length` bytes); empty for IN.
    pub out: Vec<u8>,
    /// The kernel's `transfer_flags` as devio.c sets them (URB_DIR_IN,
    /// URB_SHORT_NOT_OK, URB_ZERO_PACKET, URB_NO_INTERRUPT, URB_ISO_ASAP).
    pub flags: u32,
    /// Isochronous packets' requested lengths (empty for other types).
    pub iso_lengths: Vec<u32>,
    /// The URB's interval as devio.c sets it (from the endpoint's
    /// bInterval); the provider may fill it in when 0.
    pub interval: i32,
    /// Bulk streams' stream id (0: none).
    pub stream_id: u32,
    /// The caller's `start_frame`, as devio.c copies it into the URB: what
    /// usbmon shows at submission (the HCD replaces it for isochronous
    /// URBs and ignores it otherwise).
    pub start_frame: i32,
}

/// One isochronous packet's outcome.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IsoResult {
    /// Packet status (0 or a negative errno).
    pub status: i32,
    /// Bytes transferred in the packet.
    pub actual_length: u32,
}

/// How a URB (or a core request) ended: what its completion handler sees.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrbResult {
    /// 0 or a negative errno (-EPIPE stall, -ENOENT killed, -ESHUTDOWN
    /// device gone, -EPROTO, -EOVERFLOW, -ETIMEDOUT for a core request
    /// that timed out, ...).
    pub status: i32,
    /// `actual_length`.
    pub actual_length: u32,
    /// The IN data: the first `actual_length` bytes of the buffer; for an
    /// isochronous IN URB the whole buffer (packets at their offsets).
    pub data: Vec<u8>,
    /// Per packet, for isochronous URBs.
    pub iso: Vec<IsoResult>,
    /// Isochronous start frame.
    pub start_frame: i32,
    /// Isochronous packets that failed.
    pub error_count: i32,
}

/// What the core does itself on a program's behalf (devio.c calling into
/// usb core); each ends with a [`UrbResult`] whose `status` is the
/// function's return value (a negative errno, or 0; AttachDriver: 1 if a
/// driver bound, as `device_attach`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CoreRequest {
    /// `usb_set_configuration(dev, value)` (-1: unconfigure). Unbinds and
    /// rebinds the interfaces' drivers as the kernel does.
    SetConfiguration(i32),
    /// `usb_set_interface(dev, interface, alt)`.
    SetInterface {
        /// bInterfaceNumber.
        interface: u8,
        /// bAlternateSetting.
        alt: u8,
    },
    /// `usb_clear_halt(dev, pipe)`: CLEAR_FEATURE(ENDPOINT_HALT) on the
    /// endpoint (address with direction bit) and the toggle reset.
    ClearHalt(u8),
    /// `usb_reset_endpoint`: the toggle only, no bus traffic.
    ResetEndpoint(u8),
    /// `usb_reset_device`: a port reset and re-enumeration; the drivers
    /// of the interfaces are unbound and bound again.
    ResetDevice,
    /// `usb_driver_release_interface` of the kernel driver bound to the
    /// interface (USBDEVFS_DISCONNECT): the driver ends its URBs as its
    /// disconnect callback does (usb_kill_urb: completions with -ENOENT).
    DetachDriver(u8),
    /// Probe the kernel drivers for the interface again
    /// (USBDEVFS_CONNECT).
    AttachDriver(u8),
    /// usbhid_submit_report (`drivers/hid/usbhid/hid-core.c`), as hid-input's
    /// LED work sends its output report through `hid_hw_request`: a report
    /// usbhid, bound to `interface`, sends on a URB of its own, queued
    /// behind its others and not waited for: on its interrupt OUT URB
    /// (urbout) when `endpoint` names the interface's interrupt OUT
    /// endpoint, else as the control request `setup` on its control URB
    /// (urbctrl). The result is the URB's; a full queue (256 reports, its
    /// ring's size) drops the report, as usbhid does.
    HidReport {
        /// bInterfaceNumber of the HID interface.
        interface: u8,
        /// The interrupt OUT endpoint (address), if the interface has one.
        endpoint: Option<u8>,
        /// SET_REPORT's setup packet, for the control URB.
        setup: [u8; 8],
        /// The report's bytes (its ID first when the device numbers its
        /// reports).
        out: Vec<u8>,
    },
}

/// Why the core refused a call (each maps to the errno devio.c returns).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    /// The device is gone (ENODEV).
    #[error("no such device")]
    NoDevice,
    /// The interface is claimed by someone else or bound to a driver (EBUSY).
    #[error("interface busy")]
    Busy,
    /// Bad argument: no such interface, setting, endpoint or configuration
    /// (EINVAL).
    #[error("invalid argument: {0}")]
    Invalid(&'static str),
    /// No such URB (EINVAL for DISCARDURB, as devio.c).
    #[error("no such URB")]
    NoUrb,
    /// No driver bound (ENODATA).
    #[error("no driver bound")]
    NoDriver,
    /// The endpoint is halted or the request stalled (EPIPE).
    #[error("stall")]
    Stall,
    /// The provider cannot take more (ENOMEM).
    #[error("out of memory")]
    NoMem,
    /// `usb_submit_urb` failed with this errno (positive): -ENODEV for a
    /// bulk or interrupt URB, -EXDEV for an isochronous one, as an
    /// injected submit error gives.
    #[error("submission failed: errno {0}")]
    Failed(i32),
}

impl CoreError {
    /// The errno devio.c returns for it (positive).
    pub fn errno(&self) -> i32 {
        match self {
            CoreError::NoDevice => libc::ENODEV,
            CoreError::Busy => libc::EBUSY,
            CoreError::Invalid(_) | CoreError::NoUrb => libc::EINVAL,
            CoreError::NoDriver => libc::ENODATA,
            CoreError::Stall => libc::EPIPE,
            CoreError::NoMem => libc::ENOMEM,
            CoreError::Failed(e) => *e,
        }
    }
}

/// Told when a URB or core request of a program completes. Called on a
/// bus's thread with the bus locked: must not block or call the port.
pub trait UrbDone: Send + Sync {
    /// URB `urb` (the id [`UsbCorePort::submit`] returned) has ended.
    fn done(&self, urb: u64, result: UrbResult);
}

/// A URB's completion, waited for by the thread that submitted it.
#[derive(Default)]
struct UrbWait {
    r: std::sync::Mutex<Option<UrbResult>>,
    cv: std::sync::Condvar,
}

impl UrbDone for UrbWait {
    fn done(&self, _urb: u64, result: UrbResult) {
        *self.r.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        self.cv.notify_all();
    }
}

impl UrbWait {
    /// The result, if it comes before `end`.
    fn until(&self, end: std::time::Instant) -> Option<UrbResult> {
        let mut g = self.r.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = g.take() {
                return Some(r);
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// `usb_start_wait_urb`, as a kernel driver's synchronous transfer makes
/// it (usb_control_msg, usb_interrupt_msg): submit `urb` to `dev`, wait for
/// it at most `timeout`, then kill it (ETIMEDOUT); its result, or the errno
/// of its status.
pub fn start_wait_urb(
    port: &dyn UsbCorePort,
    dev: DevRef,
    urb: UrbRequest,
    timeout: std::time::Duration,
) -> crate::base::errno::SysResult<UrbResult> {
    use crate::base::errno::Errno;
    let w = Arc::new(UrbWait::default());
    let id = port
        .submit(dev, urb, w.clone())
        .map_err(|e| Errno(e.errno()))?;
    let Some(r) = w.until(std::time::Instant::now() + timeout) else {
        let _ = port.cancel(dev, id);
        let _ = w.until(std::time::Instant::now() + std::time::Duration::from_secs(1));
        return Err(Errno(libc::ETIMEDOUT));
    };
    if r.status < 0 {
        return Err(Errno(-r.status));
    }
    Ok(r)
}

/// `usb_control_msg`: a control transfer on `dev`'s ep0 with setup
/// fields `request_type` (its IN bit: the direction), `request`, `value`,
/// `index` and `length` (wLength), and `data` as its OUT stage, waited for
/// as [`start_wait_urb`] waits; its actual length and IN data.
#[allow(clippy::too_many_arguments)]
pub fn control_msg(
    port: &dyn UsbCorePort,
    dev: DevRef,
    request_type: u8,
    request: u8,
    value: u16,
    index: u16,
    data: &[u8],
    length: u16,
    timeout: std::time::Duration,
) -> crate::base::errno::SysResult<(u32, Vec<u8>)> {
    let dir_in = request_type & 0x80 != 0;
    let mut setup = [0u8; 8];
    setup[0] = request_type;
    setup[1] = request;
    setup[2..4].copy_from_slice(&value.to_le_bytes());
    setup[4..6].copy_from_slice(&index.to_le_bytes());
    setup[6..8].copy_from_slice(&length.to_le_bytes());
    let urb = UrbRequest {
        xfer: TransferType::Control,
        endpoint: if dir_in { 0x80 } else { 0 },
        setup: Some(setup),
        length: u32::from(length),
        out: if dir_in { Vec::new() } else { data.to_vec() },
        // URB_DIR_IN
        flags: if dir_in { 0x0200 } else { 0 },
        iso_lengths: Vec::new(),
        interval: 0,
        stream_id: 0,
        start_frame: 0,
    };
    let r = start_wait_urb(port, dev, urb, timeout)?;
    let mut data = r.data;
    data.truncate(r.actual_length as usize);
    Ok((r.actual_length, data))
}

/// A plug or an unplug, as the core sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceChange {
    /// The device was registered (`usb_new_device`'s `device_add`: after
    /// the hub driver read its descriptors).
    Added(UsbDevice),
    /// The device changed: configuration, alternate setting, driver binding.
    Changed(UsbDevice),
    /// `usb_disconnect`: the device is gone.
    Removed(DevRef),
}

/// One change of the topology as the stream of changes carries it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    /// Its place in the stream: 1 for the first change, one more for each
    /// next, across every bus.
    pub seq: u64,
    /// When it happened, on its bus's clock (the time usbmon stamps that
    /// bus's URBs with).
    pub time: Timestamp,
    /// What changed.
    pub change: DeviceChange,
}

/// Told of every change of the topology. Called on a bus's thread with the
/// bus locked and the stream's order held: must not block or call the port.
pub trait DeviceWatcher: Send + Sync {
    /// A device came, changed or went.
    fn changed(&self, event: &DeviceEvent);
}

/// The one stream of topology changes (the kernel's `usb_register_notify`
/// chain and its driver core's events in one): what the provider of the
/// devices sends each change into, numbered and in one order across every
/// bus, and what sysfs, usbfs, the uevents and control's `wait` follow.
#[derive(Default)]
pub struct DeviceChanges {
    /// The last number given, and the sysfs name of every device there
    /// (for the log line of its removal); held while the watchers are
    /// told, so that every watcher sees the changes in the order of their
    /// numbers.
    seq: std::sync::Mutex<(u64, std::collections::HashMap<DevRef, String>)>,
    watchers: std::sync::RwLock<Vec<Arc<dyn DeviceWatcher>>>,
}

impl DeviceChanges {
    /// Register a watcher (for good); it is told of the changes from now.
    pub fn watch(&self, watcher: Arc<dyn DeviceWatcher>) {
        self.watchers
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(watcher);
    }

    /// Whether anyone follows the stream (when none does, a provider need
    /// not describe its changes).
    pub fn watched(&self) -> bool {
        !self
            .watchers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Number `change`, stamp it with `time` and tell every watcher, in
    /// the order they registered.
    pub fn send(&self, time: Timestamp, change: DeviceChange) {
        let mut g = self.seq.lock().unwrap_or_else(|e| e.into_inner());
        let (seq, names) = &mut *g;
        *seq += 1;
        let event = DeviceEvent {
            seq: *seq,
            time,
            change,
        };
        let what = match &event.change {
            DeviceChange::Added(d) => {
                format!("added {}", names.entry(d.dev).or_insert(d.name()))
            }
            DeviceChange::Changed(d) => format!("changed {}", d.name()),
            DeviceChange::Removed(r) => match names.remove(r) {
                Some(n) => format!("removed {n}"),
                None => format!("removed bus {} device {}", r.bus, r.id),
            },
        };
        tracing::debug!(seq = event.seq, "usb topology: {what}");
        for w in self
            .watchers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            w.changed(&event);
        }
    }
}

/// Told of what a kernel driver's own URB brought in: usbhid's interrupt
/// IN reports, which the HID core hands to hidraw (`hid_irq_in` calling
/// `hid_input_report`). Called on a bus's thread with the bus locked, after
/// the URB's completion: must not block or call the port.
pub trait DriverInput: Send + Sync {
    /// The URB on IN endpoint `endpoint` of `dev` completed with `data`.
    fn input(&self, dev: DevRef, endpoint: u8, data: &[u8]);
    /// Whether a program waits for the input of a device on bus `bus` now
    /// (an open hidraw or evdev file): the bus must then run in time, as
    /// for a usbmon reader.
    fn listening(&self, _bus: u16) -> bool {
        false
    }
}

/// Everyone told of the kernel drivers' IN data, shared by every bus.
#[derive(Default)]
pub struct DriverInputs {
    taps: std::sync::RwLock<Vec<Arc<dyn DriverInput>>>,
}

impl DriverInputs {
    /// Register a tap (for good).
    pub fn tap(&self, tap: Arc<dyn DriverInput>) {
        self.taps
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(tap);
    }

    /// Whether anyone listens (when none does, a provider need not call
    /// [`DriverInputs::send`]).
    pub fn tapped(&self) -> bool {
        !self
            .taps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Whether a tap has a reader of bus `bus`'s input
    /// ([`DriverInput::listening`]).
    pub fn listening(&self, bus: u16) -> bool {
        self.taps
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|t| t.listening(bus))
    }

    /// Tell every tap of `data` from `endpoint` of `dev`.
    pub fn send(&self, dev: DevRef, endpoint: u8, data: &[u8]) {
        for t in self.taps.read().unwrap_or_else(|e| e.into_inner()).iter() {
            t.input(dev, endpoint, data);
        }
    }
}

/// The port: what the USB core's users need from the device provider.
pub trait UsbCorePort: Send + Sync {
    /// Every registered device, root hubs included, by bus then devnum.
    fn devices(&self) -> Vec<UsbDevice>;
    /// One device now; None once it is gone.
    fn device(&self, dev: DevRef) -> Option<UsbDevice>;
    /// Register a watcher of plugs and unplugs (for good).
    fn watch(&self, watcher: Arc<dyn DeviceWatcher>);
    /// Register a tap of the kernel drivers' IN data (for good).
    fn tap_input(&self, tap: Arc<dyn DriverInput>);
    /// `usb_submit_urb` of a program's URB: the `S` event now, the `C`
    /// event and `done` later. Returns the URB's id (its usbmon tag).
    /// Err: the URB was not submitted (the `E` event, if the kernel shows
    /// one, is the provider's).
    fn submit(
        &self,
        dev: DevRef,
        urb: UrbRequest,
        done: Arc<dyn UrbDone>,
    ) -> Result<u64, CoreError>;
    /// `usb_kill_urb`: end URB `urb` with -ENOENT (its `done` is called)
    /// if it is still in flight. Err(NoUrb) if it already completed.
    fn cancel(&self, dev: DevRef, urb: u64) -> Result<(), CoreError>;
    /// Run a request the core handles itself; `done` gets its result.
    /// Returns the request's id.
    fn request(
        &self,
        dev: DevRef,
        req: CoreRequest,
        done: Arc<dyn UrbDone>,
    ) -> Result<u64, CoreError>;
    /// `usb_driver_claim_interface` for a program (`owner` names the
    /// usbfs open file): Busy if a driver or another owner has it.
    fn claim_interface(&self, dev: DevRef, interface: u8, owner: u64) -> Result<(), CoreError>;
    /// `usb_driver_release_interface`: the owner lets it go.
    fn release_interface(&self, dev: DevRef, interface: u8, owner: u64) -> Result<(), CoreError>;
}
