//! HID keyboards, mice and tablets: usbhid's interrupt IN polling.

use std::sync::Arc;

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors;
use super::recovery::{clear_halt, run_recovery};

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
pub(crate) struct HidTask {
    dev: DevId,
    kbd: bool,
    /// The absolute pointer: its position (0..=0x7fff each way).
    tablet: Option<(u16, u16)>,
    urb: Urb,
    unit: u64,
    submitted_at: u64,
    waiting: bool,
    outcome: Outcome,
    next_input: u64,
    pressed: bool,
    pos: usize,
    burst: u32,
    click: u8,
    runner: Runner,
    class_tag: u64,
}

impl HidTask {
    pub(crate) fn new(ctx: &mut Ctx, d: DevId, at: u64) -> Option<HidTask> {
        let dev = ctx.dev(d)?;
        let kbd = dev.kind == Kind::Dev(DeviceKind::HidKeyboard);
        let tablet = (dev.kind == Kind::Dev(DeviceKind::HidTablet)).then_some((0x4000, 0x4000));
        let ep = dev.desc.cfg.endpoint(0x81)?.clone();
        let speed = dev.speed();
        let class_tag = dev.class_tag;
        let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        // usbhid's URB is as long as the longest input report (usbhid_start):
        // the tablet's 6 bytes in an 8-byte packet, the others fill theirs.
        let len = if tablet.is_some() { 6 } else { ep.mps as u32 };
        let urb = ctx.data_urb(d, 0x81, len, URB_NO_TRANSFER_DMA_MAP, tag);
        let unit = descriptors::urb_interval(speed, &ep).max(1) as u64
            * descriptors::interval_unit_ns(speed);
        let first = at + ctx.rng.range(100 * MS, 300 * MS);
        Some(HidTask {
            dev: d,
            kbd,
            tablet,
            urb,
            unit,
            submitted_at: at,
            waiting: false,
            outcome: Outcome::Ok,
            next_input: first,
            pressed: false,
            pos: 0,
            burst: 0,
            click: 0,
            runner: Runner::default(),
            class_tag,
        })
    }

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

impl Task for HidTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        if !self.waiting {
            self.outcome = match ctx.submit_in(self.dev, self.urb, now) {
                Ok(o) => o,
                Err(retry) => return Some(retry),
            };
            self.waiting = true;
            self.submitted_at = now;
            let target = if self.outcome != Outcome::Ok {
                now + self.unit * ctx.rng.range(1, 4)
            } else {
                self.next_input.max(now + self.unit)
            };
            let k = (target - now).div_ceil(self.unit);
            return Some(now + k * self.unit + ctx.rng.range(0, 30 * US));
        }
        self.waiting = false;
        let (dev, tag) = (self.dev, self.urb.tag);
        match self.outcome {
            Outcome::Stall => {
                ctx.complete(dev, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                self.runner
                    .q
                    .push_back(clear_halt(dev, 0x81, self.class_tag));
                Some(now + ctx.rng.range(MS, 3 * MS))
            }
            Outcome::Unlink => {
                ctx.complete(dev, tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
                Some(now + ctx.rng.range(50 * US, 300 * US))
            }
            o @ Outcome::Proto(_) => {
                ctx.complete(dev, tag, now, o.status(), 0, None, Vec::new(), 0, 0);
                Some(now + ctx.rng.range(10 * MS, 20 * MS))
            }
            Outcome::Ok | Outcome::SubmitError => {
                let r = self.report(ctx, now);
                let n = r.len() as u32;
                ctx.complete(dev, tag, now, 0, n, Some(Arc::from(r)), Vec::new(), 0, 0);
                Some(now + ctx.rng.range(8 * US, 40 * US))
            }
        }
    }
}
