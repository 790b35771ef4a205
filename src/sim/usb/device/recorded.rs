//! A device taken from a capture: each IN endpoint answers with the
//! completions recorded on it, in order, looping, spaced as recorded
//! (interrupt endpoints never faster than their interval, on its grid).

use std::sync::Arc;

use crate::config::recorded::RecordedEndpoint;
use crate::usbmon::event::XferType;

use super::super::ctx::*;
use super::super::descriptors;
use super::recovery::{clear_halt, run_recovery};

/// The shortest time between a bulk IN submission and its completion.
const MIN_BULK_NS: u64 = 50 * US;

/// One IN endpoint replaying its recorded completions.
pub(crate) struct RecordedTask {
    dev: DevId,
    ep: Arc<RecordedEndpoint>,
    urb: Urb,
    /// Interrupt endpoints: the polling period (completions land on it).
    unit: u64,
    next: usize,
    waiting: bool,
    outcome: Outcome,
    runner: Runner,
    class_tag: u64,
}

impl RecordedTask {
    /// A task for each recorded IN endpoint of device `d` that its active
    /// configuration has.
    pub(crate) fn for_device(ctx: &mut Ctx, d: DevId) -> Vec<RecordedTask> {
        let Some(dev) = ctx.dev(d) else {
            return vec![];
        };
        let Some(rec) = dev.desc.recorded.clone() else {
            return vec![];
        };
        let speed = dev.speed();
        let class_tag = dev.class_tag;
        let mut out = vec![];
        for ep in &rec.endpoints {
            let Some(desc) = ctx
                .dev(d)
                .and_then(|x| x.desc.cfg.endpoint(ep.addr).cloned())
            else {
                continue;
            };
            let unit = match ep.xfer {
                XferType::Interrupt => {
                    descriptors::urb_interval(speed, &desc).max(1) as u64
                        * descriptors::interval_unit_ns(speed)
                }
                _ => 0,
            };
            let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
            let urb = ctx.data_urb(d, ep.addr, ep.len, URB_NO_TRANSFER_DMA_MAP, tag);
            out.push(RecordedTask {
                dev: d,
                ep: Arc::new(ep.clone()),
                urb,
                unit,
                next: 0,
                waiting: false,
                outcome: Outcome::Ok,
                runner: Runner::default(),
                class_tag,
            });
        }
        out
    }
}

impl Task for RecordedTask {
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
            // Nothing recorded: the URB stays pending, as it did.
            let c = self.ep.completions.get(self.next)?;
            let gap = if self.outcome != Outcome::Ok {
                self.unit.max(MS) * ctx.rng.range(1, 4)
            } else {
                c.gap_ns
            };
            return Some(if self.unit > 0 {
                now + gap.max(self.unit).div_ceil(self.unit) * self.unit
            } else {
                now + gap.max(MIN_BULK_NS)
            });
        }
        self.waiting = false;
        let (dev, tag) = (self.dev, self.urb.tag);
        let none = Vec::new;
        match self.outcome {
            Outcome::Stall => {
                ctx.complete(dev, tag, now, EPIPE, 0, None, none(), 0, 0);
                self.runner
                    .q
                    .push_back(clear_halt(dev, self.ep.addr, self.class_tag));
                Some(now + ctx.rng.range(MS, 3 * MS))
            }
            Outcome::Unlink => {
                ctx.complete(dev, tag, now, ENOENT, 0, None, none(), 0, 0);
                Some(now + ctx.rng.range(50 * US, 300 * US))
            }
            o @ Outcome::Proto(_) => {
                ctx.complete(dev, tag, now, o.status(), 0, None, none(), 0, 0);
                Some(now + ctx.rng.range(10 * MS, 20 * MS))
            }
            Outcome::Ok | Outcome::SubmitError => {
                let c = &self.ep.completions[self.next];
                self.next = (self.next + 1) % self.ep.completions.len();
                let data = Some(c.data.clone());
                ctx.complete(dev, tag, now, 0, c.actual, data, none(), 0, 0);
                Some(now + ctx.rng.range(8 * US, 40 * US))
            }
        }
    }
}
