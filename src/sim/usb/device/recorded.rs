//! A device taken from a capture: each IN endpoint of an interface a
//! driver binds and polls answers with the completions recorded on it, in
//! order, looping, spaced as recorded (interrupt endpoints never faster
//! than their interval, on its grid); the others see only a program's
//! URBs, answered by replay for programs.
//! A HID interface whose report descriptor the capture holds binds usbhid:
//! its probe's requests go out and are answered from the recording, and
//! the recorded reports of its interrupt IN endpoint reach the HID core as
//! usbhid's do; a HID interface without one binds no driver (usbhid's
//! probe fails without a report descriptor).

use std::sync::Arc;

use crate::capture::recorded::RecordedEndpoint;
use crate::config::DeviceKind;
use crate::usbmon::event::XferType;

use super::super::ctx::*;
use super::super::descriptors::{ClassDesc, Where};
use super::super::driver::int_in::{poll_unit, InLoop, InSource};
use super::super::driver::{self, usbhid};
use super::class::DeviceClass;

/// `kind: from-capture` (its descriptors: the capture's, as a dump's).
pub(super) struct FromCapture;

impl DeviceClass for FromCapture {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::FromCapture]
    }
    fn descriptors(&self, _at: &Where<'_>) -> Option<ClassDesc> {
        None
    }
    // usbhid's answers on ep0: what the recording has for the request,
    // else the recorded report descriptor, SET_IDLE and a boot keyboard's
    // LEDs taken; anything else stalls.
    fn ep0(
        &self,
        ctx: &mut Ctx,
        d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        let dev = ctx.dev(d)?;
        let num = s[4];
        let report = (s[0] & 0x1f == 1)
            .then(|| usbhid::report_descriptor(dev, num))
            .flatten();
        if let (0x81, 0x06, 0x22, Some(r)) = (s[0], s[1], s[3], report) {
            return Some((0, Some(r.to_vec())));
        }
        let hid = report.and_then(|_| usbhid::interfaces(dev).into_iter().find(|h| h.num == num));
        let rec = dev.desc.recorded.as_ref()?;
        // The device's own answers (a stall included); other ends (a
        // timeout's -2, an unplug's -71) were the host's.
        if let Some(t) = rec
            .transfers
            .iter()
            .find(|t| t.setup.as_ref() == Some(s) && (t.status == 0 || t.status == EPIPE))
        {
            let n = (t.actual as usize).min(t.data.len());
            return Some((t.status, (s[0] & 0x80 != 0).then(|| t.data[..n].to_vec())));
        }
        match (s[0], s[1], hid) {
            (0x21, 0x0a, Some(_)) => Some((0, None)),
            (0x21, 0x09, Some(h)) if h.boot_keyboard() => Some((0, None)),
            _ => None,
        }
    }
    // usbhid's probe of its HID interfaces, then the recorded IN data
    // starts.
    fn class_ops(&self, dev: &Device, d: DevId) -> Vec<Op> {
        let mut ops = driver::probe_ops(dev, d);
        ops.push(Op::StartStreams(d));
        ops
    }
    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        for t in recorded_tasks(ctx, d, None) {
            ctx.spawn(at, Box::new(t));
        }
    }
    // The endpoints of an interface a driver took again replay again.
    fn rebind(&self, ctx: &mut Ctx, d: DevId, intf: u8, now: u64) {
        for t in recorded_tasks(ctx, d, Some(intf)) {
            ctx.spawn(now, Box::new(t));
        }
    }
}

/// The shortest time between a bulk IN submission and its completion.
const MIN_BULK_NS: u64 = 50 * US;

/// One IN endpoint replaying its recorded completions.
type RecordedTask = InLoop<Recorded>;

/// The recorded completions of one IN endpoint.
pub(super) struct Recorded {
    ep: Arc<RecordedEndpoint>,
    /// Interrupt endpoints: the polling period (completions land on it).
    unit: u64,
    next: usize,
}

/// A task for each recorded IN endpoint of device `d` that its active
/// configuration has (`only`: of that interface).
fn recorded_tasks(ctx: &mut Ctx, d: DevId, only: Option<u8>) -> Vec<RecordedTask> {
    let Some(dev) = ctx.dev(d) else {
        return vec![];
    };
    let Some(rec) = dev.desc.recorded.clone() else {
        return vec![];
    };
    let speed = dev.speed();
    let mut out = vec![];
    for ep in &rec.endpoints {
        let Some(desc) = ctx
            .dev(d)
            .and_then(|x| x.desc.cfg.endpoint(ep.addr).cloned())
        else {
            continue;
        };
        let intf = ctx.dev(d).and_then(|x| x.desc.cfg.interface_of(ep.addr));
        if only.is_some_and(|i| intf != Some(i)) {
            continue;
        }
        // Only a driver polls: an interface no driver binds (a vendor
        // one) sees no URBs but a program's, which the recording answers
        // (replay for programs), as on Linux.
        let polled = intf.is_some_and(|i| ctx.dev(d).is_some_and(|x| driver::polled(x, i)));
        if !polled {
            continue;
        }
        let unit = match ep.xfer {
            XferType::Interrupt => poll_unit(speed, &desc),
            _ => 0,
        };
        let ep = Arc::new(ep.clone());
        let (addr, len) = (ep.addr, ep.len);
        out.push(InLoop::new(ctx, d, addr, len, |_| Recorded {
            ep,
            unit,
            next: 0,
        }));
    }
    out
}

impl InSource for Recorded {
    fn due(&mut self, ctx: &mut Ctx, now: u64, outcome: Outcome) -> Option<u64> {
        // Nothing recorded: the URB stays pending, as it did.
        let c = self.ep.completions.get(self.next)?;
        let gap = if outcome != Outcome::Ok {
            self.unit.max(MS) * ctx.rng.range(1, 4)
        } else {
            c.gap_ns
        };
        Some(if self.unit > 0 {
            now + gap.max(self.unit).div_ceil(self.unit) * self.unit
        } else {
            now + gap.max(MIN_BULK_NS)
        })
    }

    fn data(&mut self, _ctx: &mut Ctx, _now: u64) -> (u32, Arc<[u8]>) {
        let c = &self.ep.completions[self.next];
        self.next = (self.next + 1) % self.ep.completions.len();
        (c.actual, c.data.clone())
    }
}
