//! A device taken from a capture: each IN endpoint answers with the
//! completions recorded on it, in order, looping, spaced as recorded
//! (interrupt endpoints never faster than their interval, on its grid).

use std::sync::Arc;

use crate::config::recorded::RecordedEndpoint;
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
    // The recorded IN data starts once it is configured.
    fn class_ops(&self, _dev: &Device, d: DevId) -> Vec<Op> {
        vec![Op::StartStreams(d)]
    }
    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        for t in recorded_tasks(ctx, d) {
            ctx.spawn(at, Box::new(t));
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
