//! A device taken from a capture: its descriptors, its ep0 answers (the
//! recorded ones) and its function (`Device::function_in`): on each
//! recorded IN endpoint, the completions recorded on it, in order,
//! looping, spaced as recorded (interrupt endpoints never faster than
//! their interval, on its grid). The drivers bound to its interfaces poll
//! the function as the kernel's poll a device (`super::super::driver`):
//! usbhid a HID interface's interrupt IN endpoint, a driver without a loop
//! of its own (the hub driver) each recorded IN endpoint of its interface
//! (`driver::int_in::poll_function`); a driver with its own (usb-storage,
//! which finds no SCSI target behind a recording) does its own thing. An
//! interface no driver polls sees only a program's URBs, which replay for
//! programs answers from the capture's walk, not from the function.
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
use super::super::driver::int_in::poll_unit;
use super::super::driver::usbhid;
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
    // (The class's default requests, start and rebind: usbhid's probe of
    // its HID interfaces, then the drivers start: usbhid polls a HID
    // interface's interrupt IN endpoint, a driver without a loop of its
    // own each recorded IN endpoint of its interface; both read the
    // device's function, which a driver bound again reads on where it
    // was.)
    // What the device sends on each recorded IN endpoint of its
    // configuration.
    fn function(&self, ctx: &mut Ctx, d: DevId, _at: u64) -> Option<Box<dyn InFunction>> {
        let dev = ctx.dev(d)?;
        let rec = dev.desc.recorded.as_ref()?;
        let speed = dev.speed();
        let eps = rec
            .endpoints
            .iter()
            .filter_map(|ep| {
                let desc = dev.desc.cfg.endpoint(ep.addr)?;
                let unit = match ep.xfer {
                    XferType::Interrupt => poll_unit(speed, desc),
                    _ => 0,
                };
                Some(Recorded {
                    ep: Arc::new(ep.clone()),
                    unit,
                    next: 0,
                })
            })
            .collect();
        Some(Box::new(RecordedIn(eps)))
    }
}

/// The shortest time between a bulk IN submission and its completion.
const MIN_BULK_NS: u64 = 50 * US;

/// A recorded device's function: the recorded completions of each of its
/// IN endpoints, in recorded order.
struct RecordedIn(Vec<Recorded>);

/// The recorded completions of one IN endpoint.
struct Recorded {
    ep: Arc<RecordedEndpoint>,
    /// Interrupt endpoints: the polling period (completions land on it).
    unit: u64,
    next: usize,
}

impl RecordedIn {
    fn ep(&mut self, addr: u8) -> Option<&mut Recorded> {
        self.0.iter_mut().find(|r| r.ep.addr == addr)
    }
}

impl InFunction for RecordedIn {
    fn due(&mut self, ctx: &mut Ctx, ep: u8, now: u64, outcome: Outcome) -> Option<u64> {
        let r = self.ep(ep)?;
        // Nothing recorded: the URB stays pending, as it did.
        let c = r.ep.completions.get(r.next)?;
        let gap = if outcome != Outcome::Ok {
            r.unit.max(MS) * ctx.rng.range(1, 4)
        } else {
            c.gap_ns
        };
        Some(if r.unit > 0 {
            now + gap.max(r.unit).div_ceil(r.unit) * r.unit
        } else {
            now + gap.max(MIN_BULK_NS)
        })
    }

    fn data(&mut self, ctx: &mut Ctx, ep: u8, _now: u64) -> (u32, Arc<[u8]>) {
        let Some(r) = self.ep(ep).filter(|r| !r.ep.completions.is_empty()) else {
            return (0, ctx.empty.clone());
        };
        let c = &r.ep.completions[r.next];
        r.next = (r.next + 1) % r.ep.completions.len();
        (c.actual, c.data.clone())
    }

    fn polled_eps(&self) -> Vec<(u8, u32)> {
        self.0.iter().map(|r| (r.ep.addr, r.ep.len)).collect()
    }
}
