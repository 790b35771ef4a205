//! hid-input (`drivers/hid/hid-input.c`): the input devices a HID device
//! gets, what each usage of its reports becomes, and its input reports
//! turned into input events.
//!
//! `hidinput_connect`: a HID device with an input application (a
//! keyboard, mouse, joystick, consumer or system control, digitizer) gets
//! one input device, or with several applications one per application
//! (`HID_QUIRK_INPUT_PER_APP`, which hid-generic sets), named after the
//! HID device with the application's suffix (`... Consumer Control`);
//! `hidinput_configure_usage` maps usages to event codes (keyboard page,
//! buttons, generic desktop axes and system controls, LEDs, consumer and
//! telephony keys, simulation axes; what it does not know to `BTN_MISC`,
//! `REL_MISC` or `ABS_MISC`, a duplicate to nothing).
//!
//! `hid_process_report` and `hidinput_hid_event`: values read from each
//! field, variable fields reported when they change (relative ones
//! always), array fields as the keys that left and came, each key change
//! after its `MSC_SCAN`, wheels in hi-res units too, one SYN_REPORT per
//! report. An EV_LED sent to the device sets its output field, and the
//! output report goes out as usbhid sends it.
//!
//! Digitizer usages (pens, touch) are mapped as unknown usages are: the
//! tool and touch state machine of hid-input is not modelled.

use std::sync::{Arc, Weak};

use crate::input::{
    AbsInfo, Capabilities, InputCore, InputDevice, InputDriver, InputId, InputSpec, EV_ABS, EV_KEY,
    EV_LED, EV_MSC, EV_REL, EV_REP, EV_SYN, MSC_SCAN, SYN_REPORT,
};

use super::report::{self, Descriptor, Field, Kind, BUFFERED_BYTE, CONSTANT, NULL_STATE, RELATIVE};

/// hid_keyboard: keyboard page usages 0..=255 to key codes (0: ignored,
/// 240: KEY_UNKNOWN).
const KEYBOARD: [u8; 256] = [
    0, 0, 0, 0, 30, 48, 46, 32, 18, 33, 34, 35, 23, 36, 37, 38, 50, 49, 24, 25, 16, 19, 31, 20, 22,
    47, 17, 45, 21, 44, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 28, 1, 14, 15, 57, 12, 13, 26, 27, 43, 43,
    39, 40, 41, 51, 52, 53, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 87, 88, 99, 70, 119, 110,
    102, 104, 111, 107, 109, 106, 105, 108, 103, 69, 98, 55, 74, 78, 96, 79, 80, 81, 75, 76, 77,
    71, 72, 73, 82, 83, 86, 127, 116, 117, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193,
    194, 134, 138, 130, 132, 128, 129, 131, 137, 133, 135, 136, 113, 115, 114, 240, 240, 240, 121,
    240, 89, 93, 124, 92, 94, 95, 240, 240, 240, 122, 123, 90, 91, 85, 240, 240, 240, 240, 240,
    240, 240, 111, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240,
    240, 240, 240, 240, 240, 240, 240, 240, 240, 179, 180, 240, 240, 240, 240, 240, 240, 240, 240,
    240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240, 240,
    240, 240, 240, 240, 240, 111, 240, 240, 240, 240, 240, 240, 240, 29, 42, 56, 125, 97, 54, 100,
    126, 164, 166, 165, 163, 161, 115, 114, 113, 150, 158, 159, 128, 136, 177, 178, 176, 142, 152,
    173, 140, 240, 240, 240, 240,
];
/// hid-input's consumer page keys: (usage, key code) (Linux 6.12).
const CONSUMER_KEYS: &[(u16, u16)] = &[
    (0x030, 116),
    (0x031, 408),
    (0x032, 142),
    (0x034, 142),
    (0x035, 228),
    (0x036, 256),
    (0x040, 139),
    (0x041, 353),
    (0x042, 103),
    (0x043, 108),
    (0x044, 105),
    (0x045, 106),
    (0x046, 1),
    (0x047, 78),
    (0x048, 74),
    (0x060, 358),
    (0x061, 370),
    (0x063, 379),
    (0x065, 212),
    (0x069, 398),
    (0x06a, 399),
    (0x06b, 401),
    (0x06c, 400),
    (0x06d, 375),
    (0x06f, 225),
    (0x070, 224),
    (0x072, 431),
    (0x073, 592),
    (0x074, 593),
    (0x075, 244),
    (0x076, 587),
    (0x077, 588),
    (0x078, 589),
    (0x079, 230),
    (0x07a, 229),
    (0x07c, 228),
    (0x082, 241),
    (0x083, 405),
    (0x084, 28),
    (0x088, 376),
    (0x089, 377),
    (0x08a, 150),
    (0x08b, 389),
    (0x08c, 169),
    (0x08d, 362),
    (0x08e, 416),
    (0x08f, 417),
    (0x090, 396),
    (0x091, 383),
    (0x092, 379),
    (0x093, 386),
    (0x094, 174),
    (0x095, 138),
    (0x096, 384),
    (0x097, 378),
    (0x098, 381),
    (0x09a, 366),
    (0x09c, 402),
    (0x09d, 403),
    (0x0a0, 380),
    (0x0b0, 207),
    (0x0b1, 119),
    (0x0b2, 167),
    (0x0b3, 208),
    (0x0b4, 168),
    (0x0b5, 163),
    (0x0b6, 165),
    (0x0b7, 166),
    (0x0b8, 161),
    (0x0b9, 410),
    (0x0bc, 439),
    (0x0bf, 409),
    (0x0cd, 164),
    (0x0cf, 582),
    (0x0d8, 586),
    (0x0d9, 585),
    (0x0e2, 113),
    (0x0e5, 209),
    (0x0e9, 115),
    (0x0ea, 114),
    (0x0f5, 409),
    (0x181, 576),
    (0x182, 156),
    (0x183, 171),
    (0x184, 421),
    (0x185, 422),
    (0x186, 423),
    (0x187, 424),
    (0x188, 425),
    (0x189, 426),
    (0x18a, 155),
    (0x18b, 427),
    (0x18c, 428),
    (0x18d, 429),
    (0x18e, 397),
    (0x18f, 577),
    (0x190, 578),
    (0x191, 219),
    (0x192, 140),
    (0x193, 387),
    (0x194, 144),
    (0x196, 150),
    (0x199, 216),
    (0x19c, 433),
    (0x19e, 152),
    (0x19f, 579),
    (0x1a2, 580),
    (0x1a3, 407),
    (0x1a4, 412),
    (0x1a6, 138),
    (0x1a7, 235),
    (0x1ab, 432),
    (0x1ae, 374),
    (0x1b1, 581),
    (0x1b4, 144),
    (0x1b6, 442),
    (0x1b7, 392),
    (0x1b8, 393),
    (0x1bc, 430),
    (0x1bd, 358),
    (0x1cb, 583),
    (0x201, 181),
    (0x202, 134),
    (0x203, 206),
    (0x204, 174),
    (0x207, 234),
    (0x208, 210),
    (0x209, 130),
    (0x21a, 131),
    (0x21b, 133),
    (0x21c, 137),
    (0x21d, 135),
    (0x21f, 136),
    (0x221, 217),
    (0x222, 354),
    (0x223, 172),
    (0x224, 158),
    (0x225, 159),
    (0x226, 128),
    (0x227, 173),
    (0x22a, 156),
    (0x22d, 418),
    (0x22e, 419),
    (0x22f, 420),
    (0x232, 372),
    (0x233, 177),
    (0x234, 178),
    (0x23d, 176),
    (0x25f, 223),
    (0x269, 110),
    (0x26a, 111),
    (0x279, 182),
    (0x289, 232),
    (0x28b, 233),
    (0x28c, 231),
    (0x29d, 584),
    (0x29f, 120),
    (0x2a2, 204),
    (0x2c7, 608),
    (0x2c8, 609),
    (0x2c9, 610),
    (0x2ca, 611),
    (0x2cb, 612),
    (0x2cc, 613),
];
/// hid-input's telephony page keys.
const TELEPHONY_KEYS: &[(u16, u16)] = &[
    (0x2f, 248),
    (0xb0, 512),
    (0xb1, 513),
    (0xb2, 514),
    (0xb3, 515),
    (0xb4, 516),
    (0xb5, 517),
    (0xb6, 518),
    (0xb7, 519),
    (0xb8, 520),
    (0xb9, 521),
    (0xba, 522),
    (0xbb, 523),
    (0xbc, 524),
    (0xbd, 525),
    (0xbe, 526),
    (0xbf, 527),
];

/// Usage pages.
const UP_GENDESK: u32 = 0x0001;
const UP_SIMULATION: u32 = 0x0002;
const UP_KEYBOARD: u32 = 0x0007;
const UP_LED: u32 = 0x0008;
const UP_BUTTON: u32 = 0x0009;
const UP_TELEPHONY: u32 = 0x000b;
const UP_CONSUMER: u32 = 0x000c;
const UP_PID: u32 = 0x000f;
const UP_CAMERA: u32 = 0x0090;
const UP_CUSTOM: u32 = 0x00ff;

/// Applications (page and usage).
const GD_POINTER: u32 = 0x0001_0001;
const GD_MOUSE: u32 = 0x0001_0002;
const GD_JOYSTICK: u32 = 0x0001_0004;
const GD_GAMEPAD: u32 = 0x0001_0005;
const GD_KEYBOARD: u32 = 0x0001_0006;
const GD_KEYPAD: u32 = 0x0001_0007;
const GD_SYSTEM_MULTIAXIS: u32 = 0x0001_000e;
const GD_WIRELESS_RADIO_CTLS: u32 = 0x0001_000c;
const GD_SYSTEM_CONTROL: u32 = 0x0001_0080;
const CP_CONSUMER_CONTROL: u32 = 0x000c_0001;
const DG_PEN: u32 = 0x000d_0002;
const DG_TOUCHSCREEN: u32 = 0x000d_0004;
const DG_TOUCHPAD: u32 = 0x000d_0005;
const DG_STYLUS: u32 = 0x000d_0020;
const DG_DIGITIZER: u32 = 0x000d_0001;

/// Codes hid-input names.
const KEY_UNKNOWN: u16 = 240;
const BTN_MISC: u16 = 0x100;
const BTN_MOUSE: u16 = 0x110;
const BTN_JOYSTICK: u16 = 0x120;
const BTN_GAMEPAD: u16 = 0x130;
const BTN_TRIGGER_HAPPY: u16 = 0x2c0;
const REL_HWHEEL: u16 = 0x06;
const REL_WHEEL: u16 = 0x08;
const REL_MISC: u16 = 0x09;
const REL_WHEEL_HI_RES: u16 = 0x0b;
const REL_HWHEEL_HI_RES: u16 = 0x0c;
const ABS_VOLUME: u16 = 0x20;
const ABS_MISC: u16 = 0x28;
const ABS_HAT0X: u16 = 0x10;
const ABS_DISTANCE: u16 = 0x19;
const LED_MISC: u16 = 0x08;
const KEY_VOLUMEUP: u16 = 115;
const KEY_VOLUMEDOWN: u16 = 114;

/// `hid_hat_to_axis`.
const HAT_TO_AXIS: [(i32, i32); 9] = [
    (0, 0),
    (0, -1),
    (1, -1),
    (1, 0),
    (1, 1),
    (0, 1),
    (-1, 1),
    (-1, 0),
    (-1, -1),
];

/// What a usage became (`usage->type`, `code`, the hat's range).
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
struct Usage {
    ty: u16,
    code: u16,
    hat: Option<(i32, i32)>,
    /// `wheel_accumulated` of a hi-res wheel.
    wheel: i32,
}

/// A field's input side: its input device, its usages' mapping, its
/// last values (`field->value`).
#[derive(Clone, Default)]
struct FieldState {
    input: Option<usize>,
    usages: Vec<Usage>,
    value: Vec<i32>,
    /// A variable relative key field (RFKILL) is released at once.
    relative_key: bool,
}

/// A HID device's input devices and the state hid-input keeps.
pub struct HidInput {
    /// The registered input devices, in the order they were made.
    pub devices: Vec<Arc<InputDevice>>,
    /// By report (the descriptor's order) and field.
    fields: Vec<Vec<FieldState>>,
}

/// An input device being set up (`struct hid_input` before
/// `input_register_device`).
struct Building {
    application: u32,
    spec: InputSpec,
}

/// The name, phys and uniq of the HID device, for its input devices.
pub struct Names<'a> {
    /// `hid->name`.
    pub name: &'a str,
    /// `hid->phys`.
    pub phys: &'a str,
    /// `hid->uniq`.
    pub uniq: &'a str,
    /// bustype, vendor, product, version.
    pub id: InputId,
    /// The HID device's path below `/sys`.
    pub parent: String,
}

impl HidInput {
    /// `hidinput_connect`: the input devices of `desc`, registered with
    /// `core`, their events to the device through `driver`. None when the
    /// device has no input application or no usage maps to anything.
    pub fn connect(
        desc: &Descriptor,
        names: &Names<'_>,
        core: &InputCore,
        driver: Weak<dyn InputDriver>,
    ) -> Option<HidInput> {
        if !desc.has_input_application() {
            return None;
        }
        let per_app = desc.applications > 1;
        let mut building: Vec<Building> = Vec::new();
        let mut fields: Vec<Vec<FieldState>> = desc
            .reports
            .iter()
            .map(|r| vec![FieldState::default(); r.fields.len()])
            .collect();
        let mut current: Option<usize> = None;
        for kind in [Kind::Input, Kind::Output] {
            for (ri, r) in desc.reports.iter().enumerate() {
                if r.kind != kind || r.fields.is_empty() {
                    continue;
                }
                if per_app {
                    current = building.iter().position(|b| {
                        b.application == r.application
                            || ((r.application == GD_SYSTEM_CONTROL
                                || r.application == CP_CONSUMER_CONTROL)
                                && b.application == GD_KEYBOARD)
                    });
                }
                let bi = match current {
                    Some(i) => i,
                    None => {
                        building.push(allocate(names, r.application, per_app));
                        building.len() - 1
                    }
                };
                current = Some(bi);
                for (fi, f) in r.fields.iter().enumerate() {
                    let fs = &mut fields[ri][fi];
                    fs.input = Some(bi);
                    fs.value = vec![0; f.usages.len().max(f.count as usize)];
                    let spec = &mut building[bi].spec;
                    fs.usages = f
                        .usages
                        .iter()
                        .map(|&u| configure(spec, f, kind, u, &mut fs.relative_key))
                        .collect();
                }
            }
        }
        // Only populated devices are registered; the fields of the others
        // reach none.
        let mut index = vec![None; building.len()];
        let mut devices = Vec::new();
        for (i, b) in building.into_iter().enumerate() {
            let c = &b.spec.caps;
            if c.bits.iter().all(|x| x.is_empty()) {
                continue;
            }
            if let Some(d) = core.register(b.spec, driver.clone()) {
                index[i] = Some(devices.len());
                devices.push(d);
            }
        }
        if devices.is_empty() {
            return None;
        }
        for fs in fields.iter_mut().flatten() {
            fs.input = fs.input.and_then(|i| index[i]);
        }
        Some(HidInput { devices, fields })
    }

    /// `hid_process_report` and `hidinput_report_event` for input report
    /// `ri` of `desc`, `data` its bytes after the report ID.
    pub fn process(&mut self, desc: &Descriptor, ri: usize, data: &[u8]) {
        let Some(r) = desc.reports.get(ri) else {
            return;
        };
        let fresh: Vec<Vec<i32>> = r
            .fields
            .iter()
            .map(|f| (0..f.count).map(|i| report::value(f, data, i)).collect())
            .collect();
        let state = &mut self.fields[ri];
        for (fi, f) in r.fields.iter().enumerate() {
            let new = &fresh[fi];
            if f.variable() {
                for (n, &v) in new.iter().enumerate() {
                    event(&self.devices, f, &mut state[fi], n, v);
                }
            } else {
                // An ErrorRollOver in the array: the report is ignored
                // for this field.
                let rollover = new.iter().any(|&v| {
                    valid(f, v) && f.usages[(v - f.logical_min) as usize] == (UP_KEYBOARD << 16) + 1
                });
                if rollover {
                    continue;
                }
                let old: Vec<i32> = state[fi].value[..new.len()].to_vec();
                for n in 0..new.len() {
                    if valid(f, old[n]) && !new.contains(&old[n]) {
                        let u = (old[n] - f.logical_min) as usize;
                        event(&self.devices, f, &mut state[fi], u, 0);
                    }
                    if valid(f, new[n]) && !old.contains(&new[n]) {
                        let u = (new[n] - f.logical_min) as usize;
                        event(&self.devices, f, &mut state[fi], u, 1);
                    }
                }
                state[fi].value[..new.len()].copy_from_slice(new);
            }
        }
        for (fi, f) in r.fields.iter().enumerate() {
            if f.variable() {
                let n = fresh[fi].len();
                state[fi].value[..n].copy_from_slice(&fresh[fi]);
            }
        }
        for d in &self.devices {
            d.event(EV_SYN, SYN_REPORT, 0);
        }
    }

    /// `hidinput_find_key`: the usages of the input and output reports
    /// that are keys or map to nothing, in order; the one `by` names:
    /// (key code, 0 when it maps to nothing; its index; its usage).
    pub fn keycode(
        &self,
        desc: &Descriptor,
        by: crate::input::KeyLookup,
    ) -> Option<(u32, u32, u32)> {
        let mut index = 0;
        for kind in [Kind::Input, Kind::Output] {
            for (ri, r) in desc.reports.iter().enumerate() {
                if r.kind != kind {
                    continue;
                }
                for (fi, f) in r.fields.iter().enumerate() {
                    let fs = &self.fields[ri][fi];
                    for (j, &hid) in f.usages.iter().enumerate() {
                        let u = fs.usages.get(j).copied().unwrap_or_default();
                        if u.ty != EV_KEY && u.ty != 0 {
                            continue;
                        }
                        let hit = match by {
                            crate::input::KeyLookup::Scancode(s) => s == hid,
                            crate::input::KeyLookup::Index(i) => i == index,
                        };
                        if hit {
                            let code = if u.ty == EV_KEY { u32::from(u.code) } else { 0 };
                            return Some((code, index, hid));
                        }
                        index += 1;
                    }
                }
            }
        }
        None
    }

    /// `hidinput_input_event` for EV_LED: the output field with LED
    /// `code` set to `value`; the output report it is in, to send (ID
    /// first, 0 when unnumbered), if one has it.
    pub fn set_led(&mut self, desc: &Descriptor, code: u16, value: i32) -> Option<(u8, Vec<u8>)> {
        for (ri, r) in desc.reports.iter().enumerate() {
            if r.kind != Kind::Output {
                continue;
            }
            for (fi, _) in r.fields.iter().enumerate() {
                let fs = &mut self.fields[ri][fi];
                if let Some(j) = fs
                    .usages
                    .iter()
                    .position(|u| u.ty == EV_LED && u.code == code)
                {
                    if j < fs.value.len() {
                        fs.value[j] = value;
                    }
                    return Some((r.id, self.output_report(desc, ri)));
                }
            }
        }
        None
    }

    /// `hid_output_report`: report `ri` from its fields' values, its ID
    /// first when it has one.
    fn output_report(&self, desc: &Descriptor, ri: usize) -> Vec<u8> {
        let r = &desc.reports[ri];
        let mut buf = vec![0u8; r.bytes()];
        for (fi, f) in r.fields.iter().enumerate() {
            let fs = &self.fields[ri][fi];
            for n in 0..f.count {
                let v = fs.value.get(n as usize).copied().unwrap_or(0);
                let bits = if f.logical_min < 0 {
                    report::to_bits(v, f.size)
                } else {
                    v as u32
                };
                report::implement(&mut buf, f.offset + n * f.size, f.size, bits);
            }
        }
        if r.id != 0 {
            buf.insert(0, r.id);
        }
        buf
    }
}

/// `hid_array_value_is_valid`.
fn valid(f: &Field, v: i32) -> bool {
    v >= f.logical_min
        && v <= f.logical_max
        && ((v as i64 - f.logical_min as i64) as usize) < f.usages.len()
}

/// `hidinput_allocate`: a new input device for `application`.
fn allocate(names: &Names<'_>, application: u32, per_app: bool) -> Building {
    let suffix = if per_app {
        match application {
            GD_KEYBOARD => Some("Keyboard"),
            GD_KEYPAD => Some("Keypad"),
            GD_MOUSE => Some("Mouse"),
            DG_PEN => Some("Stylus"),
            DG_STYLUS => Some("Pen"),
            DG_TOUCHSCREEN => Some("Touchscreen"),
            DG_TOUCHPAD => Some("Touchpad"),
            GD_SYSTEM_CONTROL => Some("System Control"),
            CP_CONSUMER_CONTROL => Some("Consumer Control"),
            GD_WIRELESS_RADIO_CTLS => Some("Wireless Radio Control"),
            GD_SYSTEM_MULTIAXIS => Some("System Multi Axis"),
            _ => None,
        }
    } else {
        None
    };
    let name = match suffix {
        Some(s) if !names.name.ends_with(s) => format!("{} {s}", names.name),
        _ => names.name.to_string(),
    };
    Building {
        application,
        spec: InputSpec {
            name,
            phys: names.phys.to_string(),
            uniq: names.uniq.to_string(),
            id: names.id,
            caps: Capabilities::default(),
            absinfo: Default::default(),
            parent: names.parent.clone(),
        },
    }
}

/// How a usage is mapped: `map_*` (a duplicate is ignored) or
/// `map_*_clear` (never a duplicate).
enum Map {
    Ignore,
    Key(u16, bool),
    Rel(u16),
    Abs(u16, bool),
    Led(u16),
}

/// `hidinput_configure_usage`: what usage `hid` of field `f` becomes,
/// with the capabilities it gives `spec`.
fn configure(
    spec: &mut InputSpec,
    f: &Field,
    kind: Kind,
    hid: u32,
    relative_key: &mut bool,
) -> Usage {
    let page = hid >> 16;
    let id = hid & 0xffff;
    let rel = f.flags & RELATIVE != 0;
    if f.flags & CONSTANT != 0 || f.count < 1 || (kind == Kind::Output && page != UP_LED) {
        return Usage::default();
    }
    let caps = &mut spec.caps;
    let mut hat = None;
    let unknown = || {
        if f.size == 1 {
            if kind == Kind::Output {
                Map::Led(LED_MISC)
            } else {
                Map::Key(BTN_MISC, false)
            }
        } else if rel {
            Map::Rel(REL_MISC)
        } else {
            Map::Abs(ABS_MISC, false)
        }
    };
    let map = match page {
        0 => Map::Ignore,
        UP_KEYBOARD => {
            caps.set(EV_REP, 0);
            if id < 256 {
                match KEYBOARD[id as usize] {
                    0 => Map::Ignore,
                    k => Map::Key(u16::from(k), true),
                }
            } else {
                Map::Key(KEY_UNKNOWN, false)
            }
        }
        UP_BUTTON => {
            let code = (id.wrapping_sub(1) & 0xffff) as u16;
            let from_physical = |c: u16| match f.physical {
                GD_MOUSE | GD_POINTER => c.wrapping_add(BTN_MOUSE),
                GD_JOYSTICK => c.wrapping_add(BTN_JOYSTICK),
                GD_GAMEPAD => c.wrapping_add(BTN_GAMEPAD),
                _ => c.wrapping_add(BTN_MISC),
            };
            let c = match f.application {
                GD_MOUSE | GD_POINTER => code.wrapping_add(BTN_MOUSE),
                GD_JOYSTICK if code <= 0xf => code + BTN_JOYSTICK,
                GD_GAMEPAD if code <= 0xf => code + BTN_GAMEPAD,
                GD_JOYSTICK | GD_GAMEPAD => code.wrapping_add(BTN_TRIGGER_HAPPY - 0x10),
                _ => from_physical(code),
            };
            Map::Key(c, false)
        }
        UP_SIMULATION => match id {
            0xba => Map::Abs(7, false),
            0xbb => Map::Abs(6, false),
            0xc4 => Map::Abs(9, false),
            0xc5 => Map::Abs(10, false),
            0xc8 => Map::Abs(8, false),
            _ => Map::Ignore,
        },
        UP_GENDESK => match id {
            0x80..=0x8f => match id & 0xf {
                0x1 => Map::Key(116, true),
                0x2 => Map::Key(142, true),
                0x3 => Map::Key(143, true),
                0x4 => Map::Key(438, true),
                0x5 => Map::Key(139, true),
                0x6 => Map::Key(148, true),
                0x7 => Map::Key(138, true),
                0x8 => Map::Key(174, true),
                0x9 => Map::Key(353, true),
                0xa => Map::Key(106, true),
                0xb => Map::Key(105, true),
                0xc => Map::Key(103, true),
                0xd => Map::Key(108, true),
                0xe => Map::Key(356, true),
                0xf => Map::Key(408, true),
                _ => unknown(),
            },
            0x9b => Map::Key(591, true),
            0x90..=0x9f => unknown(),
            0xa9 => Map::Key(248, true),
            0xaa => Map::Key(590, true),
            0xa0..=0xaf => Map::Ignore,
            0xb5 => Map::Key(227, true),
            0xb0..=0xbf => Map::Ignore,
            _ if f.application == GD_SYSTEM_CONTROL => Map::Ignore,
            0x30 | 0x31 | 0x33 | 0x34 | 0x35 if rel => Map::Rel((id & 0xf) as u16),
            0x30 | 0x31 | 0x33 | 0x34 | 0x35 => Map::Abs((id & 0xf) as u16, true),
            0x32 if rel => Map::Rel(2),
            0x32 => {
                let pen = f.application == DG_PEN
                    || f.physical == DG_PEN
                    || f.logical == DG_STYLUS
                    || f.physical == DG_STYLUS
                    || f.application == DG_DIGITIZER;
                Map::Abs(if pen { ABS_DISTANCE } else { 2 }, true)
            }
            0x38 if rel => {
                caps.set(EV_REL, REL_WHEEL);
                Map::Rel(REL_WHEEL_HI_RES)
            }
            0x36..=0x38 if rel => Map::Rel((id & 0xf) as u16),
            0x36..=0x38 => Map::Abs((id & 0xf) as u16, false),
            0x39 => {
                hat = Some((f.logical_min, f.logical_max));
                Map::Abs(ABS_HAT0X, false)
            }
            0x3d => Map::Key(0x13b, true),
            0x3e => Map::Key(0x13a, true),
            0xc6 if f.application == GD_WIRELESS_RADIO_CTLS => {
                *relative_key = true;
                Map::Key(247, true)
            }
            _ => unknown(),
        },
        UP_LED => match id {
            0x01 => Map::Led(0),
            0x02 => Map::Led(1),
            0x03 => Map::Led(2),
            0x04 => Map::Led(3),
            0x05 => Map::Led(4),
            0x27 => Map::Led(5),
            0x4c => Map::Led(6),
            0x09 => Map::Led(7),
            0x4b => Map::Led(8),
            0x19 => Map::Led(9),
            0x4d => Map::Led(10),
            _ => Map::Ignore,
        },
        UP_TELEPHONY => match TELEPHONY_KEYS.iter().find(|(u, _)| u32::from(*u) == id) {
            Some((_, k)) => Map::Key(*k, true),
            None => Map::Ignore,
        },
        UP_CONSUMER => match id {
            0 => Map::Ignore,
            0xe0 => Map::Abs(ABS_VOLUME, true),
            0x238 => {
                caps.set(EV_REL, REL_HWHEEL);
                Map::Rel(REL_HWHEEL_HI_RES)
            }
            _ => match CONSUMER_KEYS.iter().find(|(u, _)| u32::from(*u) == id) {
                Some((_, k)) => Map::Key(*k, true),
                None => Map::Key(KEY_UNKNOWN, true),
            },
        },
        UP_CAMERA => match id {
            0x20 => Map::Key(528, true),
            0x21 => Map::Key(212, true),
            _ => Map::Ignore,
        },
        UP_CUSTOM => {
            caps.set(EV_REP, 0);
            Map::Ignore
        }
        UP_PID => match id {
            0xa4 => Map::Key(0x12f, true),
            _ => Map::Ignore,
        },
        // Vendor pages hid-input knows to leave alone (HP, Microsoft,
        // Logitech) and the battery and device-control usages it keeps
        // for the power supply class.
        0xff00 | 0xffbc | 0xff09 | 0xff43 => Map::Ignore,
        _ => unknown(),
    };
    let (ty, code, clear) = match map {
        Map::Ignore => return Usage::default(),
        Map::Key(c, clear) => (EV_KEY, c, clear),
        Map::Rel(c) => (EV_REL, c, false),
        Map::Abs(c, clear) => (EV_ABS, c, clear),
        Map::Led(c) => (EV_LED, c, false),
    };
    let max = crate::input::max_code(ty).unwrap_or(0);
    if code as usize > max {
        return Usage::default();
    }
    caps.bits[0].set(ty as usize);
    let bits = &mut caps.bits[ty as usize];
    if clear {
        bits.clear(code as usize);
    }
    if bits.test(code as usize) {
        return Usage::default(); // a duplicate
    }
    bits.set(code as usize);
    if ty == EV_ABS {
        let (a, b) = (f.logical_min, f.logical_max);
        let joy = f.application == GD_GAMEPAD || f.application == GD_JOYSTICK;
        let (fuzz, flat) = if joy {
            ((b - a) >> 8, (b - a) >> 4)
        } else {
            (0, 0)
        };
        spec.absinfo.insert(
            code,
            AbsInfo {
                value: 0,
                minimum: a,
                maximum: b,
                fuzz,
                flat,
                resolution: resolution(f, code),
            },
        );
        if hat.is_some() {
            for c in [code, code + 1] {
                caps.bits[EV_ABS as usize].set(c as usize);
                spec.absinfo.insert(
                    c,
                    AbsInfo {
                        minimum: -1,
                        maximum: 1,
                        ..Default::default()
                    },
                );
            }
        }
        if rel && code == ABS_VOLUME {
            caps.set(EV_KEY, KEY_VOLUMEUP);
            caps.set(EV_KEY, KEY_VOLUMEDOWN);
        }
    }
    if ty == EV_KEY {
        caps.set(EV_MSC, MSC_SCAN);
    }
    Usage {
        ty,
        code,
        hat,
        wheel: 0,
    }
}

/// `hidinput_calc_abs_res`.
fn resolution(f: &Field, code: u16) -> i32 {
    let mut exp = f.unit_exponent;
    let mut logical = i64::from(f.logical_max) - i64::from(f.logical_min);
    let mut physical = i64::from(f.physical_max) - i64::from(f.physical_min);
    if logical <= 0 || physical <= 0 {
        return 0;
    }
    match code {
        0..=2 => match f.unit {
            0x11 => exp += 1,
            0x13 => {
                physical *= 254;
                exp -= 1;
            }
            _ => return 0,
        },
        3..=5 => match f.unit {
            0x14 => {
                logical *= 573;
                exp += 1;
            }
            0x12 => {}
            _ => return 0,
        },
        _ => return 0,
    }
    while exp < 0 {
        logical *= 10;
        exp += 1;
    }
    while exp > 0 {
        physical *= 10;
        exp -= 1;
    }
    if logical > i64::from(i32::MAX) || physical > i64::from(i32::MAX) {
        return 0;
    }
    (logical / physical) as i32
}

/// `hid_process_event` → `hidinput_hid_event` for usage `n` of field `f`.
fn event(devices: &[Arc<InputDevice>], f: &Field, fs: &mut FieldState, n: usize, mut value: i32) {
    let Some(u) = fs.usages.get(n).copied() else {
        return;
    };
    if u.ty == 0 {
        return;
    }
    let Some(input) = fs.input.and_then(|i| devices.get(i)) else {
        return;
    };
    if let Some((min, max)) = u.hat {
        let mut dir = if max > min {
            ((i64::from(value) - i64::from(min)) * 8 / (i64::from(max) - i64::from(min) + 1) + 1)
                as i32
        } else {
            0
        };
        if !(0..=8).contains(&dir) {
            dir = 0;
        }
        let (x, y) = HAT_TO_AXIS[dir as usize];
        input.event(u.ty, u.code, x);
        input.event(u.ty, u.code + 1, y);
        return;
    }
    if f.variable() && f.logical_min < f.logical_max {
        if f.flags & NULL_STATE != 0 && (value < f.logical_min || value > f.logical_max) {
            return;
        }
        value = value.clamp(f.logical_min, f.logical_max);
    }
    match u.ty {
        EV_KEY if u.code == 0 => return,
        EV_REL if u.code == REL_WHEEL_HI_RES || u.code == REL_HWHEEL_HI_RES => {
            if value == 0 {
                return;
            }
            let hi = value.saturating_mul(120);
            let acc = &mut fs.usages[n].wheel;
            *acc = acc.saturating_add(hi);
            let lo = *acc / 120;
            if lo != 0 {
                *acc -= lo * 120;
            }
            let code = if u.code == REL_WHEEL_HI_RES {
                REL_WHEEL
            } else {
                REL_HWHEEL
            };
            input.event(EV_REL, code, lo);
            input.event(EV_REL, u.code, hi);
            return;
        }
        EV_ABS if f.flags & RELATIVE != 0 && u.code == ABS_VOLUME => {
            let key = if value > 0 {
                KEY_VOLUMEUP
            } else {
                KEY_VOLUMEDOWN
            };
            for _ in 0..value.unsigned_abs().min(64) {
                input.event(EV_KEY, key, 1);
                input.event(EV_SYN, SYN_REPORT, 0);
                input.event(EV_KEY, key, 0);
                input.event(EV_SYN, SYN_REPORT, 0);
            }
            return;
        }
        _ => {}
    }
    if f.flags & (RELATIVE | BUFFERED_BYTE) == 0
        && f.variable()
        && n < fs.value.len()
        && value == fs.value[n]
    {
        return;
    }
    if u.ty == EV_KEY && i32::from(!input.key_down(u.code)) == value {
        // The scan code: the usage (page and ID).
        input.event(
            EV_MSC,
            MSC_SCAN,
            f.usages.get(n).copied().unwrap_or(0) as i32,
        );
    }
    input.event(u.ty, u.code, value);
    if (f.flags & RELATIVE != 0 || fs.relative_key) && u.ty == EV_KEY && value != 0 {
        input.event(EV_SYN, SYN_REPORT, 0);
        input.event(u.ty, u.code, 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::vfs::Tree;

    struct NoDriver;
    impl InputDriver for NoDriver {
        fn event(&self, _: u16, _: u16, _: i32) {}
    }

    fn names() -> Names<'static> {
        Names {
            name: "QEMU QEMU USB Keyboard",
            phys: "usb-0000:00:04.0-1/input0",
            uniq: "68284-0000:00:04.0-1",
            id: InputId {
                bustype: 3,
                vendor: 0x627,
                product: 1,
                version: 0,
            },
            parent: "/devices/x/0003:0627:0001.0001".into(),
        }
    }

    #[test]
    fn qemus_keyboard_gets_one_input_device_with_its_keys_and_leds() {
        let desc = Descriptor::parse(&super::super::report::tests::KEYBOARD).unwrap();
        let core = InputCore::install(&Arc::new(Tree::new(0, 0)));
        let drv: Arc<dyn InputDriver> = Arc::new(NoDriver);
        let hi = HidInput::connect(&desc, &names(), &core, Arc::downgrade(&drv)).unwrap();
        assert_eq!(hi.devices.len(), 1);
        let d = &hi.devices[0];
        let vars: std::collections::HashMap<_, _> = d.uevent_vars().into_iter().collect();
        assert_eq!(vars["EV"], "120013");
        assert_eq!(vars["LED"], "1f");
        assert_eq!(vars["MSC"], "10");
        assert_eq!(
            vars["KEY"],
            "1000000000007 ff9f207ac14057ff febeffdfffefffff fffffffffffffffe"
        );
        assert_eq!(d.spec.name, "QEMU QEMU USB Keyboard");
    }
}
