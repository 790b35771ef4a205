//! The input subsystem's numbers and bitmaps (`<linux/input.h>`,
//! `<linux/input-event-codes.h>`): event types and the codes the core
//! and hid-input name, each type's highest code, bitmaps as the kernel
//! keeps and prints them, `struct input_id` and `struct input_absinfo`,
//! and a device's capabilities with their modalias.

/// `INPUT_MAJOR`.
pub const INPUT_MAJOR: u32 = 13;
/// `EVDEV_MINOR_BASE`.
pub const EVDEV_MINOR_BASE: u32 = 64;
/// `EVDEV_MINORS`: the legacy minors; past them evdev takes dynamic ones
/// from 256.
pub const EVDEV_MINORS: u32 = 32;
/// `EV_VERSION`.
pub const EV_VERSION: i32 = 0x010001;

/// Event types.
pub const EV_SYN: u16 = 0x00;
/// Keys and buttons.
pub const EV_KEY: u16 = 0x01;
/// Relative axes.
pub const EV_REL: u16 = 0x02;
/// Absolute axes.
pub const EV_ABS: u16 = 0x03;
/// Miscellaneous.
pub const EV_MSC: u16 = 0x04;
/// Switches.
pub const EV_SW: u16 = 0x05;
/// LEDs.
pub const EV_LED: u16 = 0x11;
/// Sounds.
pub const EV_SND: u16 = 0x12;
/// Autorepeat.
pub const EV_REP: u16 = 0x14;
/// Force feedback.
pub const EV_FF: u16 = 0x15;
/// `EV_CNT`.
pub const EV_CNT: usize = 0x20;
/// `SYN_REPORT`.
pub const SYN_REPORT: u16 = 0;
/// `SYN_DROPPED`.
pub const SYN_DROPPED: u16 = 3;
/// `MSC_SCAN`.
pub const MSC_SCAN: u16 = 4;
/// `REP_DELAY`, `REP_PERIOD`.
pub const REP_DELAY: u16 = 0;
/// `REP_PERIOD`.
pub const REP_PERIOD: u16 = 1;
/// `KEY_MIN_INTERESTING` (`KEY_MUTE`): where the modalias's key list starts.
const KEY_MIN_INTERESTING: usize = 113;

/// The highest code of each event type (`input_max_code`, and EV_MAX for
/// type 0's bitmap), `INPUT_PROP_MAX` for the properties.
pub fn max_code(ty: u16) -> Option<usize> {
    Some(match ty {
        EV_SYN => 0x1f,
        EV_KEY => 0x2ff,
        EV_REL => 0x0f,
        EV_ABS => 0x3f,
        EV_MSC => 0x07,
        EV_SW => 0x10,
        EV_LED => 0x0f,
        EV_SND => 0x07,
        EV_FF => 0x7f,
        _ => return None,
    })
}

/// `INPUT_PROP_MAX`.
pub const PROP_MAX: usize = 0x1f;

/// A bitmap of `len` bits in 64-bit words, as `unsigned long` arrays are
/// on 64-bit Linux.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Bits(Vec<u64>);

impl Bits {
    /// Room for bits `0..=max`.
    pub fn new(max: usize) -> Bits {
        Bits(vec![0; max / 64 + 1])
    }
    /// Set bit `b` (ignored past the end).
    pub fn set(&mut self, b: usize) {
        if let Some(w) = self.0.get_mut(b / 64) {
            *w |= 1 << (b % 64);
        }
    }
    /// Clear bit `b`.
    pub fn clear(&mut self, b: usize) {
        if let Some(w) = self.0.get_mut(b / 64) {
            *w &= !(1 << (b % 64));
        }
    }
    /// Whether bit `b` is set.
    pub fn test(&self, b: usize) -> bool {
        self.0.get(b / 64).is_some_and(|w| w >> (b % 64) & 1 != 0)
    }
    /// Whether no bit is set.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }
    /// The set bits, lowest first.
    pub fn ones(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.0.len() * 64).filter(|b| self.test(*b))
    }
    /// Its bytes as `copy_to_user` gives an `unsigned long` array of
    /// `BITS_TO_LONGS(max)` words (`max` as the kernel passes it: the
    /// highest code, so one word short when it is a multiple of 64).
    pub fn bytes(&self, max: usize) -> Vec<u8> {
        let words = max.div_ceil(64);
        self.0
            .iter()
            .take(words)
            .flat_map(|w| w.to_ne_bytes())
            .collect()
    }
    /// `input_print_bitmap`: the words from the highest non-zero one
    /// down, in hex, space-separated; "0" when none is set.
    pub fn print(&self, max: usize) -> String {
        let words = max.div_ceil(64);
        let mut out = String::new();
        for i in (0..words.min(self.0.len())).rev() {
            let w = self.0[i];
            if out.is_empty() && w == 0 {
                continue;
            }
            out.push_str(&format!("{w:x}"));
            if i > 0 {
                out.push(' ');
            }
        }
        if out.is_empty() {
            out.push('0');
        }
        out
    }
}

/// `struct input_id`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InputId {
    /// `BUS_USB` and the like.
    pub bustype: u16,
    /// The vendor ID.
    pub vendor: u16,
    /// The product ID.
    pub product: u16,
    /// The version (a HID device's bcdDevice).
    pub version: u16,
}

/// `struct input_absinfo`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbsInfo {
    /// The current value.
    pub value: i32,
    /// The minimum.
    pub minimum: i32,
    /// The maximum.
    pub maximum: i32,
    /// Noise filtered (`input_defuzz_abs_event`).
    pub fuzz: i32,
    /// The dead zone.
    pub flat: i32,
    /// Units per millimetre (or radian).
    pub resolution: i32,
}

impl AbsInfo {
    /// Its 24 bytes.
    pub fn bytes(&self) -> Vec<u8> {
        [
            self.value,
            self.minimum,
            self.maximum,
            self.fuzz,
            self.flat,
            self.resolution,
        ]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect()
    }
}

/// What an input device can send: the bitmaps of `struct input_dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capabilities {
    /// By event type: the type bitmap at 0, each type's codes at its index.
    pub bits: Vec<Bits>,
    /// `propbit`.
    pub prop: Bits,
}

impl Default for Capabilities {
    fn default() -> Self {
        let bits = (0..EV_CNT as u16)
            .map(|t| Bits::new(max_code(t).unwrap_or(0)))
            .collect();
        Capabilities {
            bits,
            prop: Bits::new(PROP_MAX),
        }
    }
}

impl Capabilities {
    /// Set code `code` of type `ty` (and the type).
    pub fn set(&mut self, ty: u16, code: u16) {
        self.bits[0].set(ty as usize);
        if ty != EV_SYN {
            self.bits[ty as usize].set(code as usize);
        }
    }
    /// Whether code `code` of type `ty` is one the device has.
    pub fn has(&self, ty: u16, code: u16) -> bool {
        max_code(ty).is_some_and(|m| code as usize <= m)
            && self.bits[ty as usize].test(code as usize)
    }
    /// Whether type `ty` is.
    pub fn has_type(&self, ty: u16) -> bool {
        self.bits[0].test(ty as usize)
    }
    /// `input_print_modalias`.
    pub fn modalias(&self, id: &InputId) -> String {
        let mut s = format!(
            "input:b{:04X}v{:04X}p{:04X}e{:04X}-",
            id.bustype, id.vendor, id.product, id.version
        );
        let mut part = |c: char, ty: u16, from: usize| {
            s.push(c);
            let max = max_code(ty).unwrap_or(0);
            for b in self.bits[ty as usize]
                .ones()
                .filter(|b| *b >= from && *b < max)
            {
                s.push_str(&format!("{b:X},"));
            }
        };
        part('e', EV_SYN, 0);
        part('k', EV_KEY, KEY_MIN_INTERESTING);
        part('r', EV_REL, 0);
        part('a', EV_ABS, 0);
        part('m', EV_MSC, 0);
        part('l', EV_LED, 0);
        part('s', EV_SND, 0);
        part('f', EV_FF, 0);
        part('w', EV_SW, 0);
        s
    }
}

/// input-leds' names of the LEDs (`input_led_info`).
pub(super) const LED_NAMES: [&str; 11] = [
    "numlock",
    "capslock",
    "scrolllock",
    "compose",
    "kana",
    "sleep",
    "suspend",
    "mute",
    "misc",
    "mail",
    "charging",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps_print_as_the_kernel_prints_them() {
        let mut b = Bits::new(0x2ff);
        assert_eq!(b.print(0x2ff), "0");
        b.set(1);
        b.set(0x110);
        assert_eq!(b.print(0x2ff), "10000 0 0 0 2");
        let mut e = Bits::new(0x1f);
        for t in [0, 1, 4, 0x11, 0x14] {
            e.set(t);
        }
        assert_eq!(e.print(0x1f), "120013");
        // EVIOCGBIT(EV_KEY) copies BITS_TO_LONGS(KEY_MAX) words: 12.
        assert_eq!(b.bytes(0x2ff).len(), 96);
        assert_eq!(e.bytes(0x1f).len(), 8);
    }

    #[test]
    fn the_modalias_lists_codes_below_each_types_maximum() {
        let mut c = Capabilities::default();
        c.set(EV_KEY, 30);
        c.set(EV_KEY, 113);
        c.set(EV_LED, 0);
        c.set(EV_MSC, 4);
        let id = InputId {
            bustype: 3,
            vendor: 0x627,
            product: 1,
            version: 0x111,
        };
        assert_eq!(
            c.modalias(&id),
            "input:b0003v0627p0001e0111-e1,4,11,k71,ram4,l0,sfw"
        );
    }
}
