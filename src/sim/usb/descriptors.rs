//! USB descriptors of the simulated devices, as bytes (for GET_DESCRIPTOR) and
//! as a model (for `usb/devices`): the model, the root hub's, and the
//! assembly of a device's from what its class says ([`ClassDesc`]); each
//! device class's own descriptors live in its module under `device/`
//! (include/linux/usb/ch9.h, drivers/usb/core/config.c).

use std::sync::Arc;

use crate::capture::recorded::RecordedDevice;
use crate::capture::usbdesc::DescriptorDump;
use crate::config::{Controller, DeviceConfig};

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
    /// The bytes the endpoint carries in one (micro)frame at `speed`:
    /// wMaxPacketSize, times the transactions per microframe of a
    /// high-bandwidth high-speed endpoint (`usb_endpoint_maxp` times
    /// `usb_endpoint_maxp_mult`).
    pub(crate) fn max_per_interval(&self, speed: Speed) -> u32 {
        let mult = if speed == Speed::High {
            1 + ((self.mps as u32 >> 11) & 3)
        } else {
            1
        };
        (self.mps as u32 & 0x7ff) * mult
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
    /// iInterface (0: none).
    pub istr: u8,
    /// Class-specific descriptors between the interface and its endpoints.
    pub extra: Vec<u8>,
    pub eps: Vec<EpDesc>,
}

impl AltDesc {
    /// Interface 0, setting 0, of `class` (class, subclass, protocol) with
    /// a bulk IN endpoint 0x81 and a bulk OUT endpoint 0x02 of `mps` bytes.
    pub(crate) fn bulk_pair(class: (u8, u8, u8), mps: u16) -> AltDesc {
        AltDesc {
            num: 0,
            alt: 0,
            class: class.0,
            sub: class.1,
            proto: class.2,
            istr: 0,
            extra: vec![],
            eps: vec![
                EpDesc::new(0x81, 0x02, mps, 0),
                EpDesc::new(0x02, 0x02, mps, 0),
            ],
        }
    }
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
        self.interface_numbers().len() as u8
    }

    /// Its interface numbers, in the order their settings come.
    pub(crate) fn interface_numbers(&self) -> Vec<u8> {
        let mut n: Vec<u8> = self.alts.iter().map(|a| a.num).collect();
        n.dedup();
        n
    }

    /// The interface whose settings have endpoint `addr` (with its
    /// direction bit).
    pub(crate) fn interface_of(&self, addr: u8) -> Option<u8> {
        let a = self
            .alts
            .iter()
            .find(|a| a.eps.iter().any(|e| e.addr == addr))?;
        Some(a.num)
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
                a.istr,
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
    /// For a device built from a descriptor dump: the dump, answered byte
    /// for byte.
    pub raw: Option<Arc<DescriptorDump>>,
    /// Every configuration, when there is more than `cfg` (the one chosen).
    pub all_cfgs: Vec<ConfigDesc>,
    /// iInterface of each interface's setting 0 in `cfg` (read after
    /// SET_CONFIGURATION, as the kernel does for sysfs), 0 for none.
    pub intf_strings: Vec<u8>,
    /// The strings besides manufacturer, product, serial number and
    /// configuration (interface, terminal and unit names), by index.
    pub other_strings: Vec<(u8, String)>,
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
            self.other_strings
                .iter()
                .find(|(i, _)| *i == idx)
                .map(|(_, s)| s.as_str())
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

/// A hub class descriptor (USB 2.0 11.23.2.1) of `nports` ports, padded
/// with 0xff to `pad_to` bytes.
pub(crate) fn hub_descriptor(
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
                istr: 0,
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
        raw: None,
        all_cfgs: vec![],
        intf_strings: vec![],
        other_strings: vec![],
        recorded: None,
    }
}

/// Where a device is plugged and how it is configured: what its class
/// builds its descriptors from.
pub(crate) struct Where<'a> {
    /// The device's configuration.
    pub cfg: &'a DeviceConfig,
    /// The speed it runs at (its natural speed, limited by the port).
    pub speed: Speed,
    /// Its bus.
    pub bus: u16,
    /// Its port chain (for the default serial number).
    pub path: &'a [u8],
    /// Varies generated serial numbers.
    pub salt: u64,
}

impl Where<'_> {
    /// High speed.
    pub(crate) fn hs(&self) -> bool {
        self.speed == Speed::High
    }
    /// The port chain, dotted (`4.1`).
    pub(crate) fn path_s(&self) -> String {
        self.path
            .iter()
            .map(|p| p.to_string())
            .collect::<Vec<_>>()
            .join(".")
    }
    /// The PCI name of the bus's host controller.
    pub(crate) fn pci(&self) -> String {
        pci_name(self.bus)
    }
    /// The configured `interval_ms` (else `default`), 1..=255.
    pub(crate) fn interval(&self, default: u32) -> u8 {
        self.cfg.interval_ms.unwrap_or(default).clamp(1, 255) as u8
    }
}

/// What a device class says about its device's descriptors; [`assemble`]
/// adds the configuration's overrides and numbers the strings.
#[derive(Default)]
pub(crate) struct ClassDesc {
    /// idVendor, idProduct, bcdDevice.
    pub ids: (u16, u16, u16),
    /// bDeviceClass, bDeviceSubClass, bDeviceProtocol.
    pub class: (u8, u8, u8),
    /// bMaxPacketSize0 (8 at low speed whatever this says).
    pub mps0: u8,
    /// bmAttributes of the configuration.
    pub attr: u8,
    /// bMaxPower (2 mA units).
    pub power: u8,
    /// The manufacturer string.
    pub mfr: Option<String>,
    /// The product string.
    pub prod: Option<String>,
    /// The serial number string.
    pub ser: Option<String>,
    /// Fixed string indexes (manufacturer, product, serial, configuration)
    /// and the configuration string, for kinds that copy a real device's;
    /// None: the strings are numbered 1, 2, 3 in that order.
    pub strings: Option<(u8, u8, u8, u8, &'static str)>,
    /// Interface associations.
    pub iads: Vec<IadDesc>,
    /// The interfaces' settings.
    pub alts: Vec<AltDesc>,
    /// HID report descriptor (HID devices).
    pub report: Vec<u8>,
    /// Hub class descriptor (hubs).
    pub hub_desc: Vec<u8>,
    /// Downstream ports (hubs).
    pub nports: u8,
    /// bcdUSB, if not the speed's (2.00 at high speed, 1.10 below).
    pub bcd_usb: Option<u16>,
    /// The strings besides manufacturer, product, serial number and
    /// configuration (the interfaces' `istr` and class descriptors' name
    /// them), by index.
    pub other_strings: Vec<(u8, &'static str)>,
}

/// The descriptors of a configured device whose class said `c`.
pub(crate) fn assemble(at: &Where<'_>, c: ClassDesc) -> Descriptors {
    let (cfg, speed) = (at.cfg, at.speed);
    let mfr = cfg.manufacturer.clone().or(c.mfr);
    let prod = cfg.product.clone().or(c.prod);
    let ser = cfg.serial.clone().or(c.ser);
    let mut next = 1;
    let mut idx = |present: bool| {
        if present {
            next += 1;
            next - 1
        } else {
            0
        }
    };
    let (i_mfr, i_prod, i_ser, i_cfg, configuration) = match c.strings {
        Some((m, p, s, k, name)) => (
            if mfr.is_some() { m } else { 0 },
            if prod.is_some() { p } else { 0 },
            if ser.is_some() { s } else { 0 },
            k,
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
            bcd_usb: c.bcd_usb.unwrap_or(if at.hs() { 0x0200 } else { 0x0110 }),
            class: c.class.0,
            sub: c.class.1,
            proto: c.class.2,
            mps0: if speed == Speed::Low { 8 } else { c.mps0 },
            vid: cfg.vendor_id.unwrap_or(c.ids.0),
            pid: cfg.product_id.unwrap_or(c.ids.1),
            bcd_device: c.ids.2,
            i_mfr,
            i_prod,
            i_ser,
        },
        intf_strings: first_settings(&c.alts).map(|a| a.istr).collect(),
        other_strings: c
            .other_strings
            .iter()
            .map(|&(i, s)| (i, s.to_string()))
            .collect(),
        cfg: ConfigDesc {
            value: 1,
            attr: c.attr,
            max_power: c.power,
            i_cfg,
            iads: c.iads,
            alts: c.alts,
        },
        manufacturer: mfr,
        product: prod,
        serial: ser,
        configuration,
        report: c.report,
        hub_desc: c.hub_desc,
        nports: c.nports,
        raw: None,
        all_cfgs: vec![],
        recorded: None,
    }
}

/// Each interface's first setting in `alts`, in interface order.
fn first_settings(alts: &[AltDesc]) -> impl Iterator<Item = &AltDesc> {
    alts.iter()
        .enumerate()
        .filter(|&(i, a)| !alts[..i].iter().any(|b| b.num == a.num))
        .map(|(_, a)| a)
}

/// The USB audio class 1.0's request codes (UAC1 5.2.1), which the audio
/// device answers and snd-usb-audio sends.
pub(crate) mod uac1 {
    /// SET_CUR.
    pub(crate) const SET_CUR: u8 = 0x01;
    /// SET_RES.
    pub(crate) const SET_RES: u8 = 0x04;
    /// GET_CUR.
    pub(crate) const GET_CUR: u8 = 0x81;
    /// GET_MIN.
    pub(crate) const GET_MIN: u8 = 0x82;
    /// GET_MAX.
    pub(crate) const GET_MAX: u8 = 0x83;
    /// GET_RES.
    pub(crate) const GET_RES: u8 = 0x84;
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

    #[test]
    fn fs_interrupt_interval_rounds_down() {
        let ep = EpDesc::new(0x81, 3, 2, 255);
        assert_eq!(urb_interval(Speed::Full, &ep), 128);
        let ep = EpDesc::new(0x81, 3, 8, 10);
        assert_eq!(urb_interval(Speed::Full, &ep), 8);
        assert_eq!(decode_interval_us(Speed::Full, &ep), 10_000);
    }
}
