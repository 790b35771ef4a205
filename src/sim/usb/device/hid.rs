//! HID keyboards, mice and tablets: usbhid's interrupt IN polling.

use std::sync::Arc;

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::int_in::{poll_unit, InLoop, InSource};

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

/// usbhid's interrupt IN polling: the URB stays submitted and completes when
/// there is input.
pub(crate) type HidTask = InLoop<Hid>;

/// The input of a HID keyboard (typing a text), mouse or tablet (moving
/// about, clicking now and then).
pub(crate) struct Hid {
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

/// usbhid's polling of device `d`'s interrupt IN endpoint, from `at`.
pub(crate) fn hid_task(ctx: &mut Ctx, d: DevId, at: u64) -> Option<HidTask> {
    let dev = ctx.dev(d)?;
    let kbd = dev.kind == Kind::Dev(DeviceKind::HidKeyboard);
    let tablet = (dev.kind == Kind::Dev(DeviceKind::HidTablet)).then_some((0x4000, 0x4000));
    let ep = dev.desc.cfg.endpoint(0x81)?.clone();
    let unit = poll_unit(dev.speed(), &ep);
    // usbhid's URB is as long as the longest input report (usbhid_start):
    // the tablet's 6 bytes in an 8-byte packet, the others fill theirs.
    let len = if tablet.is_some() { 6 } else { ep.mps as u32 };
    Some(InLoop::new(ctx, d, 0x81, len, |ctx| Hid {
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

impl Hid {
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

impl InSource for Hid {
    fn due(&mut self, ctx: &mut Ctx, now: u64, outcome: Outcome) -> Option<u64> {
        let target = if outcome != Outcome::Ok {
            now + self.unit * ctx.rng.range(1, 4)
        } else {
            self.next_input.max(now + self.unit)
        };
        let k = (target - now).div_ceil(self.unit);
        Some(now + k * self.unit + ctx.rng.range(0, 30 * US))
    }

    fn data(&mut self, ctx: &mut Ctx, now: u64) -> (u32, Arc<[u8]>) {
        let r = self.report(ctx, now);
        (r.len() as u32, Arc::from(r))
    }
}
