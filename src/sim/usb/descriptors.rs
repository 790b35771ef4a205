//! USB descriptors of the simulated devices, as bytes (for GET_DESCRIPTOR) and
//! as a model (for `usb/devices`).

use std::sync::Arc;

use crate::config::recorded::RecordedDevice;
use crate::config::usbdesc::DescriptorDump;
use crate::config::{Controller, DeviceConfig, DeviceKind};

/// Signalling speed of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Speed {
    Low,
    Full,
    High,
}

impl Speed {
    /// The `Spd=` word of `usb/devices`.
    pub(crate) fn devices_str(self) -> &'static str {
        match self {
            Speed::Low => "1.5",
            Speed::Full => "12",
            Speed::High => "480",
        }
    }
}

/// One endpoint descriptor.
#[derive(Clone, Debug)]
pub(crate) struct EpDesc {
    pub addr: u8,
    pub attr: u8,
    pub mps: u16,
    pub interval: u8,
    /// Audio class endpoints carry two extra bytes (bRefresh, bSynchAddress).
    pub audio: bool,
    /// Class-specific descriptors following the endpoint.
    pub extra: Vec<u8>,
}

impl EpDesc {
    pub(crate) fn new(addr: u8, attr: u8, mps: u16, interval: u8) -> Self {
        EpDesc {
            addr,
            attr,
            mps,
            interval,
            audio: false,
            extra: Vec::new(),
        }
    }
    pub(crate) fn xfer_type(&self) -> u8 {
        self.attr & 3
    }
    pub(crate) fn dir_in(&self) -> bool {
        self.addr & 0x80 != 0
    }
}

/// One interface alternate setting.
#[derive(Clone, Debug)]
pub(crate) struct AltDesc {
    pub num: u8,
    pub alt: u8,
    pub class: u8,
    pub sub: u8,
    pub proto: u8,
    /// Class-specific descriptors between the interface and its endpoints.
    pub extra: Vec<u8>,
    pub eps: Vec<EpDesc>,
}

/// Interface association descriptor.
#[derive(Clone, Debug)]
pub(crate) struct IadDesc {
    pub first: u8,
    pub count: u8,
    pub class: u8,
    pub sub: u8,
    pub proto: u8,
}

/// The (single) configuration.
#[derive(Clone, Debug)]
pub(crate) struct ConfigDesc {
    pub value: u8,
    pub attr: u8,
    /// bMaxPower (2 mA units).
    pub max_power: u8,
    /// iConfiguration (0: none).
    pub i_cfg: u8,
    pub iads: Vec<IadDesc>,
    pub alts: Vec<AltDesc>,
}

impl ConfigDesc {
    pub(crate) fn num_interfaces(&self) -> u8 {
        let mut n: Vec<u8> = self.alts.iter().map(|a| a.num).collect();
        n.dedup();
        n.len() as u8
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        let mut b = vec![
            9,
            2,
            0,
            0,
            self.num_interfaces(),
            self.value,
            self.i_cfg,
            self.attr,
            self.max_power,
        ];
        for iad in &self.iads {
            b.extend_from_slice(&[
                8, 0x0b, iad.first, iad.count, iad.class, iad.sub, iad.proto, 0,
            ]);
        }
        for a in &self.alts {
            b.extend_from_slice(&[
                9,
                4,
                a.num,
                a.alt,
                a.eps.len() as u8,
                a.class,
                a.sub,
                a.proto,
                0,
            ]);
            b.extend_from_slice(&a.extra);
            for e in &a.eps {
                let len = if e.audio { 9 } else { 7 };
                b.extend_from_slice(&[
                    len,
                    5,
                    e.addr,
                    e.attr,
                    e.mps as u8,
                    (e.mps >> 8) as u8,
                    e.interval,
                ]);
                if e.audio {
                    b.extend_from_slice(&[0, 0]);
                }
                b.extend_from_slice(&e.extra);
            }
        }
        let total = b.len() as u16;
        b[2] = total as u8;
        b[3] = (total >> 8) as u8;
        b
    }

    /// The first endpoint descriptor with address `addr` (any interface or setting).
    pub(crate) fn endpoint(&self, addr: u8) -> Option<&EpDesc> {
        self.alts
            .iter()
            .flat_map(|a| a.eps.iter())
            .find(|e| e.addr == addr)
    }
}

/// The device descriptor.
#[derive(Clone, Debug)]
pub(crate) struct DeviceDesc {
    pub bcd_usb: u16,
    pub class: u8,
    pub sub: u8,
    pub proto: u8,
    pub mps0: u8,
    pub vid: u16,
    pub pid: u16,
    pub bcd_device: u16,
    pub i_mfr: u8,
    pub i_prod: u8,
    pub i_ser: u8,
}

impl DeviceDesc {
    pub(crate) fn bytes(&self) -> [u8; 18] {
        [
            18,
            1,
            self.bcd_usb as u8,
            (self.bcd_usb >> 8) as u8,
            self.class,
            self.sub,
            self.proto,
            self.mps0,
            self.vid as u8,
            (self.vid >> 8) as u8,
            self.pid as u8,
            (self.pid >> 8) as u8,
            self.bcd_device as u8,
            (self.bcd_device >> 8) as u8,
            self.i_mfr,
            self.i_prod,
            self.i_ser,
            1,
        ]
    }
}

/// Everything a device answers on ep0 about itself.
#[derive(Clone, Debug)]
pub(crate) struct Descriptors {
    pub speed: Speed,
    pub dev: DeviceDesc,
    pub cfg: ConfigDesc,
    pub manufacturer: Option<String>,
    pub product: Option<String>,
    pub serial: Option<String>,
    /// The configuration's string (iConfiguration).
    pub configuration: Option<String>,
    /// HID report descriptor (HID devices).
    pub report: Vec<u8>,
    /// Hub class descriptor (hubs).
    pub hub_desc: Vec<u8>,
    /// Number of downstream ports (hubs).
    pub nports: u8,
    /// Interface driver name once bound.
    pub driver: &'static str,
    /// For a device built from a descriptor dump: the dump, answered byte
    /// for byte.
    pub raw: Option<Arc<DescriptorDump>>,
    /// Every configuration, when there is more than `cfg` (the one chosen).
    pub all_cfgs: Vec<ConfigDesc>,
    /// iInterface of each interface's setting 0 in `cfg` (read after
    /// SET_CONFIGURATION, as the kernel does for sysfs), 0 for none.
    pub intf_strings: Vec<u8>,
    /// For a device taken from a capture: its recorded strings, answered
    /// byte for byte.
    pub recorded: Option<Arc<RecordedDevice>>,
}

impl Descriptors {
    /// The string descriptor `idx` (0: language list), or None if it does not exist.
    pub(crate) fn string(&self, idx: u8) -> Option<Vec<u8>> {
        if let Some(s) = self.recorded.as_ref().and_then(|r| r.string(idx)) {
            return Some(s.to_vec());
        }
        if idx == 0 {
            return Some(vec![4, 3, 0x09, 0x04]);
        }
        let s = if idx == self.dev.i_mfr {
            self.manufacturer.as_deref()
        } else if idx == self.dev.i_prod {
            self.product.as_deref()
        } else if idx == self.dev.i_ser {
            self.serial.as_deref()
        } else if idx == self.cfg.i_cfg {
            self.configuration.as_deref()
        } else {
            None
        }?;
        Some(string_descriptor(s))
    }
}

/// A UTF-16LE string descriptor (at most 126 characters).
pub(crate) fn string_descriptor(s: &str) -> Vec<u8> {
    let units: Vec<u16> = s.encode_utf16().take(126).collect();
    let mut b = Vec::with_capacity(2 + units.len() * 2);
    b.push((2 + units.len() * 2) as u8);
    b.push(3);
    for u in units {
        b.extend_from_slice(&u.to_le_bytes());
    }
    b
}

/// The kernel's class names in `usb/devices` (at most five characters).
pub(crate) fn class_name(class: u8) -> &'static str {
    match class {
        0x00 => ">ifc",
        0x01 => "audio",
        0x02 => "comm.",
        0x03 => "HID",
        0x05 => "PID",
        0x06 => "still",
        0x07 => "print",
        0x08 => "stor.",
        0x09 => "hub",
        0x0a => "data",
        0x0b => "scard",
        0x0d => "c-sec",
        0x0e => "video",
        0x0f => "perhc",
        0x10 => "av",
        0x11 => "blbrd",
        0x12 => "bridge",
        0xe0 => "wlcon",
        0xef => "misc",
        0xfe => "app.",
        0xff => "vend.",
        _ => "unk.",
    }
}

fn pow2_floor(v: u32) -> u32 {
    if v == 0 {
        0
    } else {
        1 << (31 - v.leading_zeros())
    }
}

/// `urb->interval` as usbmon reports it for a periodic endpoint: microframes
/// at high speed, frames otherwise, rounded down to a power of two as
/// `usb_submit_urb` does.
pub(crate) fn urb_interval(speed: Speed, ep: &EpDesc) -> i32 {
    let b = ep.interval.max(1) as u32;
    let v = match (speed, ep.xfer_type()) {
        (Speed::High, 1) | (Speed::High, 3) => (1u32 << (b.min(16) - 1)).min(8192),
        (_, 1) => (1u32 << (b.min(16) - 1)).min(1024),
        (_, 3) => pow2_floor(b).min(128),
        _ => 0,
    };
    v as i32
}

/// Nanoseconds per `urb_interval` unit.
pub(crate) fn interval_unit_ns(speed: Speed) -> u64 {
    if speed == Speed::High {
        125_000
    } else {
        1_000_000
    }
}

/// `usb_decode_interval`: the endpoint interval in microseconds.
pub(crate) fn decode_interval_us(speed: Speed, ep: &EpDesc) -> u32 {
    let b = ep.interval as u32;
    let v = match ep.xfer_type() {
        0 => {
            if speed == Speed::High {
                b
            } else {
                0
            }
        }
        1 => 1u32 << (b.clamp(1, 16) - 1),
        2 => {
            if speed == Speed::High && !ep.dir_in() {
                b
            } else {
                0
            }
        }
        _ => {
            if speed == Speed::High {
                1u32 << (b.clamp(1, 16) - 1)
            } else {
                b
            }
        }
    };
    v * if speed == Speed::High { 125 } else { 1000 }
}

/// The natural speed of a device kind.
pub(crate) fn natural_speed(kind: DeviceKind) -> Speed {
    match kind {
        DeviceKind::Audio => Speed::Full,
        // qemu's usb-kbd, usb-mouse and usb-tablet are high speed on xHCI
        // and EHCI.
        DeviceKind::HidKeyboard
        | DeviceKind::HidMouse
        | DeviceKind::HidTablet
        | DeviceKind::MassStorage
        | DeviceKind::Webcam
        | DeviceKind::Flood
        | DeviceKind::Hub => Speed::High,
        // Only with the dump at hand: see `natural_speed_of`.
        DeviceKind::Descriptors | DeviceKind::External | DeviceKind::FromCapture => Speed::High,
    }
}

/// The natural speed of a configured device: a descriptor dump's its
/// `speed:`, else from its bcdUSB (2.00 and up: high speed, below: full
/// speed), the others per kind.
pub(crate) fn natural_speed_of(cfg: &DeviceConfig) -> Speed {
    use crate::config::DeviceSpeed;
    match cfg.speed {
        Some(DeviceSpeed::Low) => return Speed::Low,
        Some(DeviceSpeed::Full) => return Speed::Full,
        Some(DeviceSpeed::High) => return Speed::High,
        None => {}
    }
    match &cfg.descriptors {
        Some(f) if f.dump.bcd_usb() < 0x0200 => Speed::Full,
        Some(_) => Speed::High,
        None => natural_speed(cfg.kind),
    }
}

/// Default interval (ms) per kind.
pub(crate) fn default_interval_ms(kind: DeviceKind) -> u32 {
    match kind {
        DeviceKind::HidKeyboard | DeviceKind::HidMouse => 8,
        // qemu's tablet: bInterval 4 at high speed (8 microframes).
        DeviceKind::HidTablet => 1,
        DeviceKind::MassStorage => 200,
        DeviceKind::Audio | DeviceKind::Webcam => 1,
        DeviceKind::Hub
        | DeviceKind::Flood
        | DeviceKind::Descriptors
        | DeviceKind::External
        | DeviceKind::FromCapture => 0,
    }
}

/// A boot-protocol keyboard report descriptor (63 bytes): modifier byte,
/// reserved byte, five LED outputs, six key array entries.
pub(crate) const KEYBOARD_REPORT: [u8; 63] = [
    0x05, 0x01, 0x09, 0x06, 0xa1, 0x01, 0x75, 0x01, 0x95, 0x08, 0x05, 0x07, 0x19, 0xe0, 0x29, 0xe7,
    0x15, 0x00, 0x25, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x08, 0x81, 0x01, 0x95, 0x05, 0x75, 0x01,
    0x05, 0x08, 0x19, 0x01, 0x29, 0x05, 0x91, 0x02, 0x95, 0x01, 0x75, 0x03, 0x91, 0x01, 0x95, 0x06,
    0x75, 0x08, 0x15, 0x00, 0x25, 0xff, 0x05, 0x07, 0x19, 0x00, 0x29, 0xff, 0x81, 0x00, 0xc0,
];

/// A three-button wheel mouse report descriptor: buttons, X, Y, wheel (4 bytes).
pub(crate) const MOUSE_REPORT: [u8; 52] = [
    0x05, 0x01, 0x09, 0x02, 0xa1, 0x01, 0x09, 0x01, 0xa1, 0x00, 0x05, 0x09, 0x19, 0x01, 0x29, 0x03,
    0x15, 0x00, 0x25, 0x01, 0x95, 0x03, 0x75, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x05, 0x81, 0x01,
    0x05, 0x01, 0x09, 0x30, 0x09, 0x31, 0x09, 0x38, 0x15, 0x81, 0x25, 0x7f, 0x75, 0x08, 0x95, 0x03,
    0x81, 0x06, 0xc0, 0xc0,
];

/// qemu's usb-tablet report descriptor (74 bytes, read from qemu 7.2 in
/// kernel-vm): three buttons, absolute X and Y (16 bits, 0..=0x7fff), a
/// relative wheel; a 6-byte report.
pub(crate) const TABLET_REPORT: [u8; 74] = [
    0x05, 0x01, 0x09, 0x02, 0xa1, 0x01, 0x09, 0x01, 0xa1, 0x00, 0x05, 0x09, 0x19, 0x01, 0x29, 0x03,
    0x15, 0x00, 0x25, 0x01, 0x95, 0x03, 0x75, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x05, 0x81, 0x01,
    0x05, 0x01, 0x09, 0x30, 0x09, 0x31, 0x15, 0x00, 0x26, 0xff, 0x7f, 0x35, 0x00, 0x46, 0xff, 0x7f,
    0x75, 0x10, 0x95, 0x02, 0x81, 0x02, 0x05, 0x01, 0x09, 0x38, 0x15, 0x81, 0x25, 0x7f, 0x35, 0x00,
    0x45, 0x00, 0x75, 0x08, 0x95, 0x01, 0x81, 0x06, 0xc0, 0xc0,
];

/// The HID class descriptor; `bcd_hid` is 0x0111 for qemu's keyboard (and
/// the mouse), 0x0001 for its tablet (sic).
fn hid_class_desc(bcd_hid: u16, report_len: usize) -> Vec<u8> {
    vec![
        9,
        0x21,
        bcd_hid as u8,
        (bcd_hid >> 8) as u8,
        0x00,
        0x01,
        0x22,
        report_len as u8,
        (report_len >> 8) as u8,
    ]
}

fn hub_descriptor(
    nports: u8,
    characteristics: u16,
    pwr_good: u8,
    current: u8,
    pad_to: usize,
) -> Vec<u8> {
    let bytes = (nports as usize + 1).div_ceil(8);
    let mut d = vec![
        (7 + 2 * bytes) as u8,
        0x29,
        nports,
        characteristics as u8,
        (characteristics >> 8) as u8,
        pwr_good,
        current,
    ];
    d.extend(std::iter::repeat_n(0u8, bytes));
    d.extend(std::iter::repeat_n(0xffu8, bytes));
    while d.len() < pad_to {
        d.push(0xff);
    }
    d
}

/// The PCI name of a bus's host controller (root hub serial number).
pub(crate) fn pci_name(bus: u16) -> String {
    format!("0000:00:{:02x}.0", 0x03 + bus as u32)
}

/// The root hub of a bus.
pub(crate) fn root_hub(controller: Controller, nports: u8, bus: u16) -> Descriptors {
    let (hs, pid, product, drv) = match controller {
        Controller::Xhci => (true, 0x0002, "xHCI Host Controller", "xhci-hcd"),
        Controller::Ehci => (true, 0x0002, "EHCI Host Controller", "ehci_hcd"),
        Controller::Ohci => (false, 0x0001, "OHCI PCI host controller", "ohci_hcd"),
        Controller::Uhci => (false, 0x0001, "UHCI Host Controller", "uhci_hcd"),
    };
    let speed = if hs { Speed::High } else { Speed::Full };
    let ep = if hs {
        EpDesc::new(0x81, 0x03, 4, 0x0c)
    } else {
        EpDesc::new(0x81, 0x03, 2, 0xff)
    };
    let hub_desc = match controller {
        Controller::Xhci => hub_descriptor(nports, 0x000a, 10, 0, 15),
        _ => hub_descriptor(nports, 0x000a, 10, 0, 0),
    };
    Descriptors {
        speed,
        dev: DeviceDesc {
            bcd_usb: if hs { 0x0200 } else { 0x0110 },
            class: 9,
            sub: 0,
            proto: if controller == Controller::Xhci { 1 } else { 0 },
            mps0: 64,
            vid: 0x1d6b,
            pid,
            bcd_device: 0x0612,
            i_mfr: 3,
            i_prod: 2,
            i_ser: 1,
        },
        cfg: ConfigDesc {
            value: 1,
            attr: 0xe0,
            max_power: 0,
            i_cfg: 0,
            iads: vec![],
            alts: vec![AltDesc {
                num: 0,
                alt: 0,
                class: 9,
                sub: 0,
                proto: 0,
                extra: vec![],
                eps: vec![ep],
            }],
        },
        manufacturer: Some(format!("Linux 6.12.0-monfs {drv}")),
        product: Some(product.to_string()),
        serial: Some(pci_name(bus)),
        configuration: None,
        report: vec![],
        hub_desc,
        nports,
        driver: "hub",
        raw: None,
        all_cfgs: vec![],
        intf_strings: vec![],
        recorded: None,
    }
}

/// Descriptors of a configured device. `speed` is the speed it runs at (its
/// natural speed, limited by the port); `path` names its port chain for the
/// default serial number; `salt` varies generated serial numbers.
pub(crate) fn device(
    cfg: &DeviceConfig,
    speed: Speed,
    bus: u16,
    path: &[u8],
    salt: u64,
) -> Descriptors {
    if let Some(f) = &cfg.descriptors {
        return from_dump(cfg, &f.dump, speed);
    }
    let hs = speed == Speed::High;
    let path_s = path
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(".");
    let pci = pci_name(bus);
    let interval = cfg
        .interval_ms
        .unwrap_or_else(|| default_interval_ms(cfg.kind))
        .clamp(1, 255) as u8;
    let mut nports = 0;
    let mut hub_desc = vec![];
    let mut report = vec![];
    let (vid, pid, bcd_dev, dclass, dsub, dproto, mps0, attr, power, mfr, prod, ser, driver);
    // Fixed string indexes (manufacturer, product, serial, configuration) and
    // the configuration string, for kinds that copy a real device's; the
    // others number their strings 1, 2, 3 in that order.
    let mut strings: Option<(u8, u8, u8, u8, &str)> = None;
    let mut iads = vec![];
    let alts: Vec<AltDesc>;
    match cfg.kind {
        DeviceKind::HidKeyboard | DeviceKind::HidMouse | DeviceKind::HidTablet => {
            let kbd = cfg.kind == DeviceKind::HidKeyboard;
            let tablet = cfg.kind == DeviceKind::HidTablet;
            report = match cfg.kind {
                DeviceKind::HidKeyboard => KEYBOARD_REPORT.to_vec(),
                DeviceKind::HidTablet => TABLET_REPORT.to_vec(),
                _ => MOUSE_REPORT.to_vec(),
            };
            vid = 0x0627;
            pid = 0x0001;
            bcd_dev = 0x0000;
            // ep0 packets: 64 bytes at high speed (as qemu's keyboard and
            // tablet show on xHCI), 8 at full speed.
            (dclass, dsub, dproto, attr, power) = (0, 0, 0, 0xa0, 50);
            mps0 = if hs { 64 } else { 8 };
            mfr = Some("QEMU".to_string());
            prod = Some(
                match cfg.kind {
                    DeviceKind::HidKeyboard => "QEMU USB Keyboard",
                    DeviceKind::HidTablet => "QEMU USB Tablet",
                    _ => "QEMU USB Mouse",
                }
                .to_string(),
            );
            let serial_base = match cfg.kind {
                DeviceKind::HidKeyboard => 68284,
                DeviceKind::HidTablet => 28754,
                _ => 89126,
            };
            ser = Some(format!("{serial_base}-{pci}-{path_s}"));
            // qemu's HID string table: manufacturer 1, products 2 (mouse),
            // 3 (tablet), 4 (keyboard), configurations 6, 7, 8, serials 9,
            // 10, 11 (read from qemu's devices in kernel-vm).
            strings = Some(match cfg.kind {
                DeviceKind::HidKeyboard => (1, 4, 0x0b, 8, "HID Keyboard"),
                DeviceKind::HidTablet => (1, 3, 0x0a, 7, "HID Tablet"),
                _ => (1, 2, 0x09, 6, "HID Mouse"),
            });
            driver = "usbhid";
            let hs_int = if hs {
                (interval as u32 * 8).next_power_of_two().trailing_zeros() as u8 + 1
            } else {
                interval
            };
            let (sub, proto) = match cfg.kind {
                DeviceKind::HidKeyboard => (1, 1),
                DeviceKind::HidTablet => (0, 0),
                _ => (1, 2),
            };
            alts = vec![AltDesc {
                num: 0,
                alt: 0,
                class: 3,
                sub,
                proto,
                extra: hid_class_desc(if tablet { 0x0001 } else { 0x0111 }, report.len()),
                eps: vec![EpDesc::new(
                    0x81,
                    0x03,
                    if kbd || tablet { 8 } else { 4 },
                    hs_int,
                )],
            }];
        }
        DeviceKind::MassStorage => {
            vid = 0x46f4;
            pid = 0x0001;
            bcd_dev = 0x0000;
            // Self-powered, 0 mA, as qemu's usb-storage.
            (dclass, dsub, dproto, mps0, attr, power) = (0, 0, 0, 64, 0xc0, 0);
            mfr = Some("QEMU".to_string());
            prod = Some("QEMU USB HARDDRIVE".to_string());
            ser = Some(format!("1-{}-{}", pci, path_s));
            // qemu's storage strings: 1, 2, 3, then its full-speed (4) and
            // high-speed (5, read in kernel-vm) configuration names.
            strings = Some(if hs {
                (1, 2, 3, 5, "High speed config (usb 2.0)")
            } else {
                (1, 2, 3, 4, "Full speed config (usb 1.1)")
            });
            driver = "usb-storage";
            let mps = if hs { 512 } else { 64 };
            alts = vec![AltDesc {
                num: 0,
                alt: 0,
                class: 8,
                sub: 6,
                proto: 0x50,
                extra: vec![],
                eps: vec![
                    EpDesc::new(0x81, 0x02, mps, 0),
                    EpDesc::new(0x02, 0x02, mps, 0),
                ],
            }];
        }
        DeviceKind::Audio => {
            vid = 0x46f4;
            pid = 0x0002;
            bcd_dev = 0x0000;
            (dclass, dsub, dproto, mps0, attr, power) = (0, 0, 0, 64, 0xc0, 50);
            mfr = Some("QEMU".to_string());
            prod = Some("QEMU USB Audio".to_string());
            ser = Some(format!("1-{}-{}", pci, path_s));
            driver = "snd-usb-audio";
            // Audio control: header, input terminal (USB streaming), output
            // terminal (speaker).
            let ac = vec![
                9, 0x24, 0x01, 0x00, 0x01, 30, 0x00, 0x01, 0x01, // header, 1 streaming iface
                12, 0x24, 0x02, 0x01, 0x01, 0x01, 0x00, 0x02, 0x03, 0x00, 0x00,
                0x00, // input terminal
                9, 0x24, 0x03, 0x02, 0x01, 0x03, 0x00, 0x01, 0x00, // output terminal: speaker
            ];
            let as_general = vec![
                7, 0x24, 0x01, 0x01, 0x01, 0x01, 0x00, // AS general: terminal 1, PCM
                11, 0x24, 0x02, 0x01, 0x02, 0x02, 0x10, 0x01, 0x80, 0xbb,
                0x00, // type I, 2ch, 16 bit, 48 kHz
            ];
            let mut ep = EpDesc::new(0x01, 0x09, 192, interval.min(16));
            ep.audio = true;
            ep.extra = vec![7, 0x25, 0x01, 0x01, 0x00, 0x00, 0x00];
            alts = vec![
                AltDesc {
                    num: 0,
                    alt: 0,
                    class: 1,
                    sub: 1,
                    proto: 0,
                    extra: ac,
                    eps: vec![],
                },
                AltDesc {
                    num: 1,
                    alt: 0,
                    class: 1,
                    sub: 2,
                    proto: 0,
                    extra: vec![],
                    eps: vec![],
                },
                AltDesc {
                    num: 1,
                    alt: 1,
                    class: 1,
                    sub: 2,
                    proto: 0,
                    extra: as_general,
                    eps: vec![ep],
                },
            ];
        }
        DeviceKind::Webcam => {
            vid = 0x046d;
            pid = 0x0825;
            bcd_dev = 0x0012;
            (dclass, dsub, dproto, mps0, attr, power) = (0xef, 2, 1, 64, 0x80, 250);
            mfr = None;
            prod = Some("C270 HD WEBCAM".to_string());
            ser = Some(format!("{:08X}", salt as u32));
            driver = "uvcvideo";
            iads.push(IadDesc {
                first: 0,
                count: 2,
                class: 0x0e,
                sub: 3,
                proto: 0,
            });
            let vc = vec![
                13, 0x24, 0x01, 0x00, 0x01, 0x26, 0x00, 0x80, 0x8d, 0x5b, 0x00, 0x01,
                0x01, // VC header
                18, 0x24, 0x02, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                0x03, 0x00, 0x00, 0x00, // camera terminal
                9, 0x24, 0x03, 0x02, 0x01, 0x01, 0x00, 0x01, 0x00, // output terminal
            ];
            let vs = vec![
                14, 0x24, 0x01, 0x01, 0x4d, 0x00, 0x81, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01,
                0x00, // input header
            ];
            let (mps, ival) = if hs {
                (
                    1024,
                    (interval as u32 * 8).next_power_of_two().trailing_zeros() as u8 + 1,
                )
            } else {
                (1023, 1)
            };
            alts = vec![
                AltDesc {
                    num: 0,
                    alt: 0,
                    class: 0x0e,
                    sub: 1,
                    proto: 0,
                    extra: vc,
                    eps: vec![],
                },
                AltDesc {
                    num: 1,
                    alt: 0,
                    class: 0x0e,
                    sub: 2,
                    proto: 0,
                    extra: vs,
                    eps: vec![],
                },
                AltDesc {
                    num: 1,
                    alt: 1,
                    class: 0x0e,
                    sub: 2,
                    proto: 0,
                    extra: vec![],
                    eps: vec![EpDesc::new(0x81, 0x05, mps, ival)],
                },
            ];
        }
        DeviceKind::Flood => {
            vid = 0x0525;
            pid = 0xa4a0;
            bcd_dev = 0x0612;
            (dclass, dsub, dproto, mps0, attr, power) = (0, 0, 0, 64, 0x80, 1);
            mfr = Some("monfs".to_string());
            prod = Some("Flood Gadget".to_string());
            ser = Some(format!("monfs-flood-{}", path_s));
            driver = "usbtest";
            let mps = if hs { 512 } else { 64 };
            alts = vec![AltDesc {
                num: 0,
                alt: 0,
                class: 0xff,
                sub: 0,
                proto: 0,
                extra: vec![],
                eps: vec![
                    EpDesc::new(0x81, 0x02, mps, 0),
                    EpDesc::new(0x02, 0x02, mps, 0),
                ],
            }];
        }
        DeviceKind::Descriptors | DeviceKind::External | DeviceKind::FromCapture => {
            unreachable!("kinds descriptors, external and from-capture always have descriptors (checked by the config and ctl)")
        }
        DeviceKind::Hub => {
            vid = 0x05e3;
            pid = 0x0608;
            bcd_dev = 0x6060;
            (dclass, dsub, mps0, attr, power) = (9, 0, 64, 0xe0, 50);
            dproto = if hs { 1 } else { 0 };
            mfr = None;
            prod = Some("USB2.0 Hub".to_string());
            ser = None;
            driver = "hub";
            nports = cfg
                .devices
                .iter()
                .map(|d| d.port.0)
                .max()
                .unwrap_or(0)
                .max(4);
            hub_desc = hub_descriptor(nports, 0x00e0, 0x32, 0x64, 0);
            let bytes = (nports as u16 + 1).div_ceil(8);
            alts = vec![AltDesc {
                num: 0,
                alt: 0,
                class: 9,
                sub: 0,
                proto: 0,
                extra: vec![],
                eps: vec![EpDesc::new(0x81, 0x03, bytes, if hs { 0x0c } else { 0xff })],
            }];
        }
    }
    let mfr = cfg.manufacturer.clone().or(mfr);
    let prod = cfg.product.clone().or(prod);
    let ser = cfg.serial.clone().or(ser);
    let mut next = 1;
    let mut idx = |present: bool| {
        if present {
            next += 1;
            next - 1
        } else {
            0
        }
    };
    let (i_mfr, i_prod, i_ser, i_cfg, configuration) = match strings {
        Some((m, p, s, c, name)) => (
            if mfr.is_some() { m } else { 0 },
            if prod.is_some() { p } else { 0 },
            if ser.is_some() { s } else { 0 },
            c,
            Some(name.to_string()),
        ),
        None => (
            idx(mfr.is_some()),
            idx(prod.is_some()),
            idx(ser.is_some()),
            0,
            None,
        ),
    };
    Descriptors {
        speed,
        dev: DeviceDesc {
            bcd_usb: if hs || cfg.kind == DeviceKind::Webcam {
                0x0200
            } else {
                0x0110
            },
            class: dclass,
            sub: dsub,
            proto: dproto,
            mps0: if speed == Speed::Low { 8 } else { mps0 },
            vid: cfg.vendor_id.unwrap_or(vid),
            pid: cfg.product_id.unwrap_or(pid),
            bcd_device: bcd_dev,
            i_mfr,
            i_prod,
            i_ser,
        },
        cfg: ConfigDesc {
            value: 1,
            attr,
            max_power: power,
            i_cfg,
            iads,
            alts,
        },
        manufacturer: mfr,
        product: prod,
        serial: ser,
        configuration,
        report,
        hub_desc,
        nports,
        driver,
        raw: None,
        all_cfgs: vec![],
        intf_strings: vec![],
        recorded: None,
    }
}

/// The endpoint as the kernel keeps it after parsing at `speed`: a periodic
/// bInterval outside the range the speed allows is replaced by the kernel's
/// default for that case, and a wMaxPacketSize above the speed's limit for
/// the transfer type is lowered to the limit (the raw bytes stay as they are).
fn kernel_endpoint(speed: Speed, addr: u8, attr: u8, mps: u16, interval: u8) -> EpDesc {
    let hs = speed == Speed::High;
    let mut interval = interval;
    match attr & 3 {
        3 => {
            let (lo, hi) = if hs { (1, 16) } else { (1, 255) };
            if !(lo..=hi).contains(&interval) {
                interval = if hs {
                    // A full-speed style value in ms, converted to the
                    // exponent of as many microframes; 8 ms when that fails.
                    match 32 - (interval as u32 * 8).leading_zeros() {
                        0 => 7,
                        n => n.min(16) as u8,
                    }
                } else {
                    10
                };
            }
        }
        1 if !(1..=16).contains(&interval) => interval = if hs { 7 } else { 4 },
        _ => {}
    }
    // Largest packet per transfer type (control, iso, bulk, interrupt).
    let max = if hs {
        [64, 1024, 512, 1024]
    } else {
        [64, 1023, 64, 64]
    }[(attr & 3) as usize];
    let mut mps = mps;
    if mps & 0x7ff > max {
        mps = (mps & 0x1800) | max;
    }
    EpDesc::new(addr, attr, mps, interval)
}

/// `usb_choose_configuration` for a device no driver claims: the first
/// configuration whose first interface is not vendor specific, else the
/// first one.
fn choose_config(dump: &DescriptorDump) -> usize {
    dump.configs
        .iter()
        .position(|c| c.interfaces.first().is_some_and(|i| i.class != 0xff))
        .unwrap_or(0)
}

fn dump_config(c: &crate::config::usbdesc::DumpConfig, speed: Speed) -> ConfigDesc {
    // Interfaces in the order their numbers first appear, each with its
    // settings in descriptor order (the kernel's interface cache).
    let mut order: Vec<u8> = vec![];
    for i in &c.interfaces {
        if !order.contains(&i.num) {
            order.push(i.num);
        }
    }
    let alts = order
        .iter()
        .flat_map(|n| c.interfaces.iter().filter(move |i| i.num == *n))
        .map(|i| AltDesc {
            num: i.num,
            alt: i.alt,
            class: i.class,
            sub: i.sub,
            proto: i.proto,
            extra: vec![],
            eps: i
                .eps
                .iter()
                .map(|e| kernel_endpoint(speed, e.addr, e.attr, e.mps, e.interval))
                .collect(),
        })
        .collect();
    ConfigDesc {
        value: c.value,
        attr: c.attr,
        max_power: c.max_power,
        i_cfg: c.i_cfg,
        iads: c
            .iads
            .iter()
            .map(|a| IadDesc {
                first: a.first,
                count: a.count,
                class: a.class,
                sub: a.sub,
                proto: a.proto,
            })
            .collect(),
        alts,
    }
}

/// A device built from a descriptor dump: its model (for `usb/devices` and
/// the endpoints' timing) is parsed from the bytes, which it answers as they
/// are; the strings are the configured manufacturer, product and serial,
/// else (from a capture) the recorded ones.
fn from_dump(cfg: &DeviceConfig, dump: &Arc<DescriptorDump>, speed: Speed) -> Descriptors {
    let b = dump.device();
    let le = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let all: Vec<ConfigDesc> = dump.configs.iter().map(|c| dump_config(c, speed)).collect();
    let chosen = choose_config(dump);
    let c = &dump.configs[chosen];
    let recorded = cfg.capture.as_ref().and_then(|c| c.device.clone());
    // A recorded string as the kernel caches it (UTF-16LE to UTF-8).
    let text = |idx: u8| {
        let raw = recorded.as_ref()?.string(idx)?;
        let units: Vec<u16> = raw[2..]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Some(String::from_utf16_lossy(&units))
    };
    let mut intf_strings = vec![];
    let mut seen = vec![];
    for i in &c.interfaces {
        if !seen.contains(&i.num) {
            seen.push(i.num);
            let s0 = c.interfaces.iter().find(|a| a.num == i.num && a.alt == 0);
            intf_strings.push(s0.map(|a| a.i_intf).unwrap_or(0));
        }
    }
    Descriptors {
        speed,
        dev: DeviceDesc {
            bcd_usb: le(2),
            class: b[4],
            sub: b[5],
            proto: b[6],
            mps0: b[7],
            vid: le(8),
            pid: le(10),
            bcd_device: le(12),
            i_mfr: b[14],
            i_prod: b[15],
            i_ser: b[16],
        },
        cfg: all[chosen].clone(),
        manufacturer: cfg
            .manufacturer
            .clone()
            .or_else(|| text(b[14]))
            .filter(|_| b[14] != 0),
        product: cfg
            .product
            .clone()
            .or_else(|| text(b[15]))
            .filter(|_| b[15] != 0),
        serial: cfg
            .serial
            .clone()
            .or_else(|| text(b[16]))
            .filter(|_| b[16] != 0),
        configuration: None,
        report: vec![],
        hub_desc: vec![],
        nports: 0,
        // The recorded data is played by no kernel driver.
        driver: if recorded.is_some() { "(none)" } else { "" },
        raw: Some(dump.clone()),
        all_cfgs: if all.len() > 1 { all } else { vec![] },
        intf_strings,
        recorded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_hub_bytes_match_kernel_capture() {
        let d = root_hub(Controller::Xhci, 4, 1);
        assert_eq!(
            d.dev.bytes(),
            [
                0x12, 0x01, 0x00, 0x02, 0x09, 0x00, 0x01, 0x40, 0x6b, 0x1d, 0x02, 0x00, 0x12, 0x06,
                0x03, 0x02, 0x01, 0x01
            ]
        );
        let c = d.cfg.bytes();
        assert_eq!(
            c,
            [
                0x09, 0x02, 0x19, 0x00, 0x01, 0x01, 0x00, 0xe0, 0x00, 0x09, 0x04, 0x00, 0x00, 0x01,
                0x09, 0x00, 0x00, 0x00, 0x07, 0x05, 0x81, 0x03, 0x04, 0x00, 0x0c
            ]
        );
        assert_eq!(
            d.hub_desc,
            [
                0x09, 0x29, 0x04, 0x0a, 0x00, 0x0a, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff
            ]
        );
        assert_eq!(urb_interval(Speed::High, &d.cfg.alts[0].eps[0]), 2048);
        assert_eq!(
            decode_interval_us(Speed::High, &d.cfg.alts[0].eps[0]),
            256_000
        );
        assert_eq!(
            string_descriptor("QEMU"),
            [10, 3, b'Q', 0, b'E', 0, b'M', 0, b'U', 0]
        );
    }

    /// qemu's (7.2) usb-kbd, usb-tablet and usb-storage on qemu-xhci, as
    /// the 6.12 kernel read them in kernel-vm (sysfs `descriptors`).
    #[test]
    fn qemu_devices_on_xhci_match_qemu() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let dev = |kind: &str| {
            let yaml = format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - {{port: 1, kind: {kind}}}\n");
            crate::config::Config::parse(&yaml, "t").unwrap().usb.buses[0].devices[0].clone()
        };
        for (kind, want, strings) in [
            (
                DeviceKind::HidKeyboard,
                "120100020000004027060100000001040b0109022200010108a032090400000103010100092111010001223f0007058103080007",
                [(4, "QEMU USB Keyboard"), (0x0b, "68284-0000:00:04.0-1"), (8, "HID Keyboard")],
            ),
            (
                DeviceKind::HidTablet,
                "120100020000004027060100000001030a0109022200010107a032090400000103000000092101000001224a0007058103080004",
                [(3, "QEMU USB Tablet"), (0x0a, "28754-0000:00:04.0-1"), (7, "HID Tablet")],
            ),
            (
                DeviceKind::MassStorage,
                "1201000200000040f446010000000102030109022000010105c0000904000002080650000705810200020007050202000200",
                [(2, "QEMU USB HARDDRIVE"), (3, "1-0000:00:04.0-1"), (5, "High speed config (usb 2.0)")],
            ),
        ] {
            let cfg = dev(&format!("{kind:?}")
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let sep = (i > 0 && c.is_ascii_uppercase()).then_some('-');
                    sep.into_iter().chain(std::iter::once(c.to_ascii_lowercase()))
                })
                .collect::<String>());
            let d = device(&cfg, natural_speed(kind), 1, &[1], 0);
            assert_eq!(d.speed, Speed::High, "{kind:?}");
            let mut got = d.dev.bytes().to_vec();
            got.extend(d.cfg.bytes());
            assert_eq!(got, hex(want), "{kind:?}");
            assert_eq!(d.string(1), Some(string_descriptor("QEMU")));
            for (i, s) in strings {
                assert_eq!(d.string(i), Some(string_descriptor(s)), "{kind:?} string {i}");
            }
        }
        assert_eq!(
            TABLET_REPORT.to_vec(),
            hex("05010902a1010901a10005091901290315002501950375018102950175058101050109300931150026ff7f350046ff7f751095028102050109381581257f35004500750895018106c0c0")
        );
    }

    #[test]
    fn fs_interrupt_interval_rounds_down() {
        let ep = EpDesc::new(0x81, 3, 2, 255);
        assert_eq!(urb_interval(Speed::Full, &ep), 128);
        let ep = EpDesc::new(0x81, 3, 8, 10);
        assert_eq!(urb_interval(Speed::Full, &ep), 8);
        assert_eq!(decode_interval_us(Speed::Full, &ep), 10_000);
    }
}
