//! A device taken from a capture: each IN endpoint answers with the
//! completions recorded on it, in order, looping, spaced as recorded
//! (interrupt endpoints never faster than their interval, on its grid).
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
use super::class::DeviceClass;
use super::int_in::{poll_unit, InLoop, InSource};

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
        let hid = (s[0] & 0x1f == 1)
            .then(|| hid_interfaces(dev).into_iter().find(|h| h.num == num))
            .flatten();
        if let (0x81, 0x06, 0x22, Some(h)) = (s[0], s[1], s[3], &hid) {
            return Some((0, Some(h.report.to_vec())));
        }
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
        let mut ops = hid_probe_ops(dev, d, None);
        ops.push(Op::StartStreams(d));
        ops
    }
    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        for t in recorded_tasks(ctx, d) {
            ctx.spawn(at, Box::new(t));
        }
    }
}

/// A HID interface of a recorded device that usbhid binds.
pub(crate) struct CaptureHid<'a> {
    /// bInterfaceNumber.
    pub num: u8,
    /// bInterfaceSubClass and bInterfaceProtocol of its setting 0.
    pub sub: u8,
    pub proto: u8,
    /// The report descriptor the capture holds for it.
    pub report: &'a [u8],
}

impl CaptureHid<'_> {
    /// A boot keyboard, whose LEDs the input layer sets at once.
    fn boot_keyboard(&self) -> bool {
        self.sub == 1 && self.proto == 1
    }
}

/// The HID interfaces usbhid binds on `dev`, a `from-capture` device: the
/// HID class interfaces (setting 0) of its active configuration whose
/// report descriptor its capture holds, in interface order.
pub(crate) fn hid_interfaces(dev: &Device) -> Vec<CaptureHid<'_>> {
    let Some(rec) = dev.desc.recorded.as_deref() else {
        return vec![];
    };
    if dev.kind != Kind::Dev(DeviceKind::FromCapture) {
        return vec![];
    }
    let mut out: Vec<CaptureHid<'_>> = vec![];
    for a in dev
        .desc
        .cfg
        .alts
        .iter()
        .filter(|a| a.alt == 0 && a.class == 3)
    {
        if out.iter().any(|h| h.num == a.num) {
            continue;
        }
        if let Some(report) = rec.report(a.num) {
            out.push(CaptureHid {
                num: a.num,
                sub: a.sub,
                proto: a.proto,
                report,
            });
        }
    }
    out
}

/// The report descriptor usbhid reads from interface `num` of `dev`, if it
/// is a `from-capture` device's HID interface that usbhid binds.
pub(crate) fn capture_hid_report(dev: &Device, num: u8) -> Option<&[u8]> {
    hid_interfaces(dev)
        .into_iter()
        .find(|h| h.num == num)
        .map(|h| h.report)
}

/// usbhid's probe of the HID interfaces of recorded device `d` (`only`:
/// of that interface alone, when a program gives it back), as for an
/// external device: the serial number, then per interface SET_IDLE, the
/// report descriptor and (boot keyboards) the LEDs on usbhid's own URB.
pub(crate) fn hid_probe_ops(dev: &Device, d: DevId, only: Option<u8>) -> Vec<Op> {
    let hids: Vec<CaptureHid<'_>> = hid_interfaces(dev)
        .into_iter()
        .filter(|h| only.is_none_or(|n| n == h.num))
        .collect();
    let mut ops = vec![];
    if hids.is_empty() {
        return ops;
    }
    let i_ser = dev.desc.dev.i_ser;
    if i_ser != 0 {
        ops.push(ctrl(
            d,
            setup(0x80, 0x06, 0x0300 | i_ser as u16, 0x0409, 255),
        ));
    }
    for h in &hids {
        let i = h.num as u16;
        ops.push(ctrl(d, setup(0x21, 0x0a, 0, i, 0)));
        ops.push(ctrl(d, setup(0x81, 0x06, 0x2200, i, h.report.len() as u16)));
        if h.boot_keyboard() {
            ops.push(Op::Ctrl {
                target: d,
                setup: setup(0x21, 0x09, 0x0200, i, 1),
                out: Some(Arc::from(vec![0])),
                tag: Some(dev.class_tag),
            });
        }
    }
    ops
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
/// configuration has.
fn recorded_tasks(ctx: &mut Ctx, d: DevId) -> Vec<RecordedTask> {
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
