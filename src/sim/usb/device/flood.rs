//! A vendor device doing back-to-back bulk transfers (a Linux gadget zero
//! as usbtest drives it), for benchmarks.

use std::sync::Arc;

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::{AltDesc, ClassDesc, Where};
use super::super::driver::int_in::end_by_fault;
use super::super::driver::recovery::run_recovery;
use super::class::DeviceClass;

/// `kind: flood`.
pub(super) struct Flood;

impl DeviceClass for Flood {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::Flood]
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let mps = if at.hs() { 512 } else { 64 };
        Some(ClassDesc {
            ids: (0x0525, 0xa4a0, 0x0612),
            mps0: 64,
            attr: 0x80,
            power: 1,
            mfr: Some("monfs".to_string()),
            prod: Some("Flood Gadget".to_string()),
            ser: Some(format!("monfs-flood-{}", at.path_s())),
            alts: vec![AltDesc::bulk_pair((0xff, 0, 0), mps)],
            ..ClassDesc::default()
        })
    }

    fn class_ops(&self, _dev: &Device, d: DevId) -> Vec<Op> {
        vec![Op::StartStreams(d)]
    }

    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        let t = FloodTask::new(ctx, d);
        ctx.spawn(at, Box::new(t));
    }

    // usbtest bound again: a new stream.
    fn rebind(&self, ctx: &mut Ctx, d: DevId, _intf: u8, now: u64) {
        self.start(ctx, d, now, now);
    }
}

/// Back-to-back bulk OUT/IN transfers (usbtest-like), for benchmarks.
struct FloodTask {
    dev: DevId,
    out: Urb,
    inn: Urb,
    out_data: Arc<[u8]>,
    in_data: Arc<[u8]>,
    phase: u8,
    outcome: Outcome,
    runner: Runner,
    class_tag: u64,
    /// Simulated time between two events.
    spacing: u64,
    /// A rate was configured: keep it exactly (catch up after a late wake-up)
    /// instead of jumping to the present.
    rated: bool,
    /// usbtest's binding when it started.
    owner: Option<Owner>,
}

/// Simulated time between two flood events unless `rate` is configured.
const FLOOD_SPACING: u64 = 250;
/// How far an unrated flood may fall behind the present before it skips
/// ahead. A bound instead of "jump to the present at every step" lets one
/// bus-thread batch (`BATCH` steps) run on one clock reading; the price is
/// timestamps up to this much in the past.
const FLOOD_MAX_LAG: u64 = 1_000_000;

impl FloodTask {
    fn new(ctx: &mut Ctx, d: DevId) -> FloodTask {
        let size = ctx
            .dev(d)
            .and_then(|x| x.cfg.as_ref())
            .and_then(|c| c.transfer_size)
            .map_or(512, |t| t.0)
            .max(1);
        let class_tag = ctx.dev(d).map(|x| x.class_tag).unwrap_or(0);
        let owner = ctx.owner(d, 0x81);
        let rate = ctx.dev(d).and_then(|x| x.cfg.as_ref()).and_then(|c| c.rate);
        let spacing = rate
            .map(|r| 1_000_000_000 / r.max(1) as u64)
            .unwrap_or(FLOOD_SPACING)
            .max(1);
        let t_out = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let t_in = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let out = ctx.data_urb(d, 0x02, size, 0, t_out);
        let inn = ctx.data_urb(d, 0x81, size, 0, t_in);
        // Each buffer is made in its one block (an iterator of known length
        // collects straight into the Arc): a copy from a Vec would leave
        // the Vec's block with the allocator (`sim/usb/memory.rs`).
        let out_data: Arc<[u8]> = (0..size).map(|i| i as u8).collect();
        let mut in_data: Arc<[u8]> = std::iter::repeat_n(0u8, size as usize).collect();
        ctx.rng
            .fill(Arc::get_mut(&mut in_data).expect("a new buffer has one owner"));
        FloodTask {
            dev: d,
            out,
            inn,
            out_data,
            in_data,
            phase: 0,
            outcome: Outcome::Ok,
            runner: Runner::default(),
            class_tag,
            owner,
            spacing,
            rated: rate.is_some(),
        }
    }
}

impl Task for FloodTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        if ctx.unbound(self.dev, self.owner) {
            // A program detached usbtest (its URB was killed): the stream
            // ends, its URBs freed, a clear-halt it had still to send
            // dropped.
            ctx.tags.free(self.out.tag, URB_SIZE);
            ctx.tags.free(self.inn.tag, URB_SIZE);
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        let d = self.dev;
        let is_in = self.phase >= 2;
        let mut urb = if is_in { self.inn } else { self.out };
        if self.phase % 2 == 0 {
            let out = (!is_in).then(|| self.out_data.clone());
            match ctx.submit_urb(d, &mut urb, out, Vec::new(), Place::Given, now) {
                Ok((o, _)) => {
                    self.outcome = o;
                    self.phase += 1;
                }
                Err(_) => self.phase = (self.phase + 2) % 4,
            }
        } else {
            let ep = if is_in { 0x81 } else { 0x02 };
            let (o, tag) = (self.outcome, self.class_tag);
            if !end_by_fault(ctx, (d, ep, urb.tag), now, o, &mut self.runner, tag) {
                let data = if is_in {
                    self.in_data.clone()
                } else {
                    self.out_data.clone()
                };
                ctx.complete(d, urb.tag, now, 0, urb.len, Some(data), Vec::new(), 0, 0);
            }
            self.phase = (self.phase + 1) % 4;
        }
        if self.rated {
            Some(now + self.spacing)
        } else {
            Some((now + self.spacing).max(ctx.floor.saturating_sub(FLOOD_MAX_LAG)))
        }
    }
}
