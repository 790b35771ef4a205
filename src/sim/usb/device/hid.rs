//! HID keyboards, mice and tablets as qemu's usb-kbd, usb-mouse and
//! usb-tablet are: their descriptors, the HID class requests, usbhid's
//! probe and its interrupt IN polling (drivers/hid/usbhid/hid-core.c).

use std::sync::Arc;

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::{AltDesc, ClassDesc, EpDesc, Speed, Where};
use super::super::driver::int_in::poll_unit;
use super::class::DeviceClass;

const TEXT: &[u8] = b"hello from monfs usbmon\n";

fn hid_usage(c: u8) -> u8 {
    match c {
        b'a'..=b'z' => 4 + (c - b'a'),
        b'1'..=b'9' => 0x1e + (c - b'1'),
        b'0' => 0x27,
        b'\n' => 0x28,
        b' ' => 0x2c,
        b'.' => 0x37,
        _ => 0x2c,
    }
}

/// `kind: hid-keyboard`, `hid-mouse` and `hid-tablet`.
pub(super) struct Hid;

impl DeviceClass for Hid {
    fn qemu_control(&self) -> bool {
        true // qemu's device
    }
    fn kinds(&self) -> &'static [DeviceKind] {
        &[
            DeviceKind::HidKeyboard,
            DeviceKind::HidMouse,
            DeviceKind::HidTablet,
        ]
    }

    // qemu's usb-kbd, usb-mouse and usb-tablet are high speed on xHCI and
    // EHCI.
    fn natural_speed(&self, _kind: DeviceKind) -> Speed {
        Speed::High
    }

    fn default_interval_ms(&self, kind: DeviceKind) -> u32 {
        match kind {
            // qemu's tablet: bInterval 4 at high speed (8 microframes).
            DeviceKind::HidTablet => 1,
            _ => 8,
        }
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let kind = at.cfg.kind;
        let hs = at.hs();
        let interval = at.interval(self.default_interval_ms(kind));
        let kbd = kind == DeviceKind::HidKeyboard;
        let tablet = kind == DeviceKind::HidTablet;
        let report = match kind {
            DeviceKind::HidKeyboard => KEYBOARD_REPORT.to_vec(),
            DeviceKind::HidTablet => TABLET_REPORT.to_vec(),
            _ => MOUSE_REPORT.to_vec(),
        };
        let prod = match kind {
            DeviceKind::HidKeyboard => "QEMU USB Keyboard",
            DeviceKind::HidTablet => "QEMU USB Tablet",
            _ => "QEMU USB Mouse",
        };
        let serial_base = match kind {
            DeviceKind::HidKeyboard => 68284,
            DeviceKind::HidTablet => 28754,
            _ => 89126,
        };
        let hs_int = if hs {
            (interval as u32 * 8).next_power_of_two().trailing_zeros() as u8 + 1
        } else {
            interval
        };
        let (sub, proto) = match kind {
            DeviceKind::HidKeyboard => (1, 1),
            DeviceKind::HidTablet => (0, 0),
            _ => (1, 2),
        };
        let alts = vec![AltDesc {
            num: 0,
            alt: 0,
            class: 3,
            sub,
            proto,
            istr: 0,
            extra: hid_class_desc(if kbd { 0x0111 } else { 0x0001 }, report.len()),
            eps: vec![EpDesc::new(
                0x81,
                0x03,
                if kbd || tablet { 8 } else { 4 },
                hs_int,
            )],
        }];
        Some(ClassDesc {
            ids: (0x0627, 0x0001, 0x0000),
            // ep0 packets: 64 bytes at high speed (as qemu's keyboard and
            // tablet show on xHCI), 8 at full speed.
            mps0: if hs { 64 } else { 8 },
            attr: 0xa0,
            power: 50,
            mfr: Some("QEMU".to_string()),
            prod: Some(prod.to_string()),
            ser: Some(format!("{serial_base}-{}-{}", at.pci(), at.path_s())),
            // qemu's HID string table: manufacturer 1, products 2 (mouse),
            // 3 (tablet), 4 (keyboard), configurations 6, 7, 8, serials 9,
            // 10, 11 (read from qemu's devices in kernel-vm).
            strings: Some(match kind {
                DeviceKind::HidKeyboard => (1, 4, 0x0b, 8, "HID Keyboard"),
                DeviceKind::HidTablet => (1, 3, 0x0a, 7, "HID Tablet"),
                _ => (1, 2, 0x09, 6, "HID Mouse"),
            }),
            alts,
            report,
            ..ClassDesc::default()
        })
    }

    // SET_IDLE, SET_REPORT, SET_PROTOCOL, GET_IDLE, GET_PROTOCOL (as
    // qemu's hid device answers them), the report descriptor.
    fn ep0(
        &self,
        ctx: &mut Ctx,
        d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        let value = u16::from_le_bytes([s[2], s[3]]);
        let dev = ctx.dev_mut(d)?;
        match (s[0], s[1]) {
            _ if dev.desc.report.is_empty() => None,
            (0x21, 0x0a) => {
                dev.hid_idle = (value >> 8) as u8;
                Some((0, None))
            }
            (0x21, 0x0b) => {
                dev.hid_protocol = value as u8;
                Some((0, None))
            }
            // SET_REPORT: qemu's keyboard takes its LEDs; its mouse and
            // tablet stall.
            (0x21, 0x09) if dev.kind == Kind::Dev(DeviceKind::HidKeyboard) => Some((0, None)),
            (0x21, 0x09) => None,
            // GET_REPORT of any type and ID: qemu's devices answer with
            // their input report as it stands (hid_keyboard_poll: nothing
            // under 2 bytes; hid_pointer_poll: the motion since the last
            // report, none by then).
            (0xa1, 0x01) => {
                let len = u16::from_le_bytes([s[6], s[7]]) as usize;
                let mut r = dev.hid_last.clone();
                let kind = dev.kind;
                let full = match kind {
                    Kind::Dev(DeviceKind::HidKeyboard) => 8,
                    Kind::Dev(DeviceKind::HidTablet) => 6,
                    _ => 4,
                };
                r.resize(full, 0);
                if kind == Kind::Dev(DeviceKind::HidMouse) {
                    r[1..].fill(0);
                }
                if kind == Kind::Dev(DeviceKind::HidKeyboard) && len < 2 {
                    r.clear();
                }
                r.truncate(len);
                Some((0, Some(r)))
            }
            (0xa1, 0x02) => Some((0, Some(vec![dev.hid_idle]))),
            (0xa1, 0x03) => Some((0, Some(vec![dev.hid_protocol]))),
            (0x81, 0x06) if value >> 8 == 0x22 => Some((0, Some(dev.desc.report.clone()))),
            _ => None,
        }
    }

    // (The class's default requests, start and rebind: usbhid's probe,
    // then its polling; bound again, usbhid_start's interrupt IN URB
    // again, the device typing on where it was.)

    // Typing or moving about, from a moment after usbhid first polls.
    fn function(&self, ctx: &mut Ctx, d: DevId, at: u64) -> Option<Box<dyn InFunction>> {
        let dev = ctx.dev(d)?;
        let kbd = dev.kind == Kind::Dev(DeviceKind::HidKeyboard);
        let tablet = (dev.kind == Kind::Dev(DeviceKind::HidTablet)).then_some((0x4000, 0x4000));
        let ep = dev.desc.cfg.endpoint(0x81)?.clone();
        let unit = poll_unit(dev.speed(), &ep);
        Some(Box::new(HidInput {
            dev: d,
            kbd,
            tablet,
            unit,
            next_input: at + ctx.rng.range(100 * MS, 300 * MS),
            pressed: false,
            pos: 0,
            burst: 0,
            click: 0,
        }))
    }
}

/// A boot-protocol keyboard report descriptor (63 bytes): modifier byte,
/// reserved byte, five LED outputs, six key array entries.
pub(super) const KEYBOARD_REPORT: [u8; 63] = [
    0x05, 0x01, 0x09, 0x06, 0xa1, 0x01, 0x75, 0x01, 0x95, 0x08, 0x05, 0x07, 0x19, 0xe0, 0x29, 0xe7,
    0x15, 0x00, 0x25, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x08, 0x81, 0x01, 0x95, 0x05, 0x75, 0x01,
    0x05, 0x08, 0x19, 0x01, 0x29, 0x05, 0x91, 0x02, 0x95, 0x01, 0x75, 0x03, 0x91, 0x01, 0x95, 0x06,
    0x75, 0x08, 0x15, 0x00, 0x25, 0xff, 0x05, 0x07, 0x19, 0x00, 0x29, 0xff, 0x81, 0x00, 0xc0,
];

/// qemu's usb-mouse report descriptor (52 bytes, read from Debian's 6.12
/// in kernel-vm): five buttons, relative X, Y and wheel (4 bytes).
pub(super) const MOUSE_REPORT: [u8; 52] = [
    0x05, 0x01, 0x09, 0x02, 0xa1, 0x01, 0x09, 0x01, 0xa1, 0x00, 0x05, 0x09, 0x19, 0x01, 0x29, 0x05,
    0x15, 0x00, 0x25, 0x01, 0x95, 0x05, 0x75, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x03, 0x81, 0x01,
    0x05, 0x01, 0x09, 0x30, 0x09, 0x31, 0x09, 0x38, 0x15, 0x81, 0x25, 0x7f, 0x75, 0x08, 0x95, 0x03,
    0x81, 0x06, 0xc0, 0xc0,
];

/// qemu's usb-tablet report descriptor (74 bytes, read from qemu 7.2 in
/// kernel-vm): three buttons, absolute X and Y (16 bits, 0..=0x7fff), a
/// relative wheel; a 6-byte report.
pub(super) const TABLET_REPORT: [u8; 74] = [
    0x05, 0x01, 0x09, 0x02, 0xa1, 0x01, 0x09, 0x01, 0xa1, 0x00, 0x05, 0x09, 0x19, 0x01, 0x29, 0x03,
    0x15, 0x00, 0x25, 0x01, 0x95, 0x03, 0x75, 0x01, 0x81, 0x02, 0x95, 0x01, 0x75, 0x05, 0x81, 0x01,
    0x05, 0x01, 0x09, 0x30, 0x09, 0x31, 0x15, 0x00, 0x26, 0xff, 0x7f, 0x35, 0x00, 0x46, 0xff, 0x7f,
    0x75, 0x10, 0x95, 0x02, 0x81, 0x02, 0x05, 0x01, 0x09, 0x38, 0x15, 0x81, 0x25, 0x7f, 0x35, 0x00,
    0x45, 0x00, 0x75, 0x08, 0x95, 0x01, 0x81, 0x06, 0xc0, 0xc0,
];

/// The HID class descriptor; `bcd_hid` is 0x0111 for qemu's keyboard,
/// 0x0001 for its mouse and tablet (sic; kernel-vm).
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

/// The input of a HID keyboard (typing a text), mouse or tablet (moving
/// about, clicking now and then): the device's, whoever polls it.
pub(crate) struct HidInput {
    dev: DevId,
    kbd: bool,
    /// The absolute pointer: its position (0..=0x7fff each way).
    tablet: Option<(u16, u16)>,
    /// The endpoint's polling period.
    unit: u64,
    next_input: u64,
    pressed: bool,
    pos: usize,
    burst: u32,
    click: u8,
}

impl HidInput {
    fn report(&mut self, ctx: &mut Ctx, now: u64) -> Vec<u8> {
        if self.kbd {
            if !self.pressed {
                self.pressed = true;
                self.next_input = now + ctx.rng.range(30 * MS, 90 * MS);
                vec![0, 0, hid_usage(TEXT[self.pos % TEXT.len()]), 0, 0, 0, 0, 0]
            } else {
                self.pressed = false;
                let c = TEXT[self.pos % TEXT.len()];
                self.pos += 1;
                let pause = if c == b'\n' {
                    ctx.rng.range(600 * MS, 1200 * MS)
                } else {
                    0
                };
                self.next_input = now + pause + ctx.rng.range(100 * MS, 300 * MS);
                vec![0; 8]
            }
        } else {
            if self.burst == 0 {
                self.burst = ctx.rng.range(8, 30) as u32;
                self.click = if ctx.rng.chance(0.25) { 2 } else { 0 };
            }
            self.burst -= 1;
            let buttons = if self.click > 0 {
                self.click -= 1;
                u8::from(self.click > 0)
            } else {
                0
            };
            let dx = ctx.rng.range(0, 16) as i8 - 8;
            let dy = ctx.rng.range(0, 16) as i8 - 8;
            self.next_input = if self.burst > 0 {
                now
            } else {
                now + ctx.rng.range(300 * MS, 1500 * MS)
            };
            if let Some((x, y)) = &mut self.tablet {
                // qemu's tablet report: buttons, X and Y (little endian,
                // 0..=0x7fff), wheel.
                let step = |v: u16, d: i8| (v as i32 + d as i32 * 64).clamp(0, 0x7fff) as u16;
                (*x, *y) = (step(*x, dx), step(*y, dy));
                let (x, y) = (x.to_le_bytes(), y.to_le_bytes());
                return vec![buttons, x[0], x[1], y[0], y[1], 0];
            }
            vec![buttons, dx as u8, dy as u8, 0]
        }
    }
}

impl InFunction for HidInput {
    fn due(&mut self, ctx: &mut Ctx, _ep: u8, now: u64, outcome: Outcome) -> Option<u64> {
        let target = if outcome != Outcome::Ok {
            now + self.unit * ctx.rng.range(1, 4)
        } else {
            self.next_input.max(now + self.unit)
        };
        let k = (target - now).div_ceil(self.unit);
        Some(now + k * self.unit + ctx.rng.range(0, 30 * US))
    }

    fn data(&mut self, ctx: &mut Ctx, _ep: u8, now: u64) -> (u32, Arc<[u8]>) {
        let r = self.report(ctx, now);
        if let Some(d) = ctx.dev_mut(self.dev) {
            d.hid_last.clone_from(&r);
        }
        (r.len() as u32, Arc::from(r))
    }
}
