//! usbtest (`drivers/usb/misc/usbtest.c`): binds the test devices its id
//! table names by vendor and product (Gadget Zero among them), and runs
//! its simple bulk tests as if testusb asked for them without end (test
//! 1, "write", and test 2, "read": `simple_io` on one URB each),
//! alternating: back-to-back bulk OUT and IN URBs, answered by the
//! device's function (a gadget's source and sink). The benchmarks' load
//! (`kind: flood`).

use std::sync::Arc;

use super::host::HostDriver;
use super::id::UsbDeviceId;
use super::int_in::end_by_fault;
use super::recovery::run_recovery;
use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::AltDesc;
use crate::usbmon::event::{URB_SHORT_NOT_OK, URB_ZERO_PACKET};

/// usbtest.
pub(super) struct UsbTest;

/// usbtest's id table (the entries its build options leave in).
static IDS: [UsbDeviceId; 7] = [
    UsbDeviceId::device(0x0547, 0x2235),
    UsbDeviceId::device(0x0547, 0x0080),
    UsbDeviceId::device(0x04b4, 0x8613),
    UsbDeviceId::device(0xfff0, 0xfff0),
    UsbDeviceId::device(0x0525, 0xa4a0),
    UsbDeviceId::device(0x0525, 0xa4a4),
    UsbDeviceId::device(0x0525, 0xa4a3),
];

impl HostDriver for UsbTest {
    fn name(&self) -> &'static str {
        "usbtest"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    // The bulk loop on the interface's bulk pair (usbtest's get_endpoints
    // takes the first bulk IN and OUT of a setting), its two URBs
    // reading and feeding the device's function, made now if the device
    // has one and it is not there yet.
    fn start(&self, ctx: &mut Ctx, d: DevId, alt: &AltDesc, at: u64) {
        let bulk = |dir_in: bool| {
            alt.eps
                .iter()
                .find(|e| e.dir_in() == dir_in && e.xfer_type() == 2)
                .map(|e| e.addr)
        };
        let (Some(ep_in), Some(ep_out)) = (bulk(true), bulk(false)) else {
            return;
        };
        let t = BulkLoop::new(ctx, d, (ep_out, ep_in), at);
        ctx.spawn(at, Box::new(t));
    }
}

/// Simulated time between two events of the loop unless `rate` is
/// configured.
const FLOOD_SPACING: u64 = 250;
/// How far an unrated loop may fall behind the present before it skips
/// ahead. A bound instead of "jump to the present at every step" lets one
/// bus-thread batch (`BATCH` steps) run on one clock reading; the price is
/// timestamps up to this much in the past.
const FLOOD_MAX_LAG: u64 = 1_000_000;

/// usbtest's bulk test run back to back: an OUT URB, then an IN URB,
/// each submitted and completed in turn, one event per step, the IN data
/// and what the OUT moved as the device's function answers.
struct BulkLoop {
    dev: DevId,
    /// Its OUT and IN endpoint (addresses with direction).
    eps: (u8, u8),
    out: Urb,
    inn: Urb,
    /// The OUT buffer, shared with every submission: zeros, as
    /// simple_fill_buf fills it with usbtest's default `pattern` (0).
    out_data: Arc<[u8]>,
    /// 0: OUT to submit, 1: OUT to complete, 2: IN to submit, 3: IN to
    /// complete.
    phase: u8,
    outcome: Outcome,
    runner: Runner,
    class_tag: u64,
    /// Simulated time between two events.
    spacing: u64,
    /// A rate was configured: keep it exactly (catch up after a late
    /// wake-up) instead of jumping to the present.
    rated: bool,
    /// usbtest's binding when it started.
    owner: Option<Owner>,
}

impl BulkLoop {
    /// The loop of device `d` on `eps` (OUT, IN), first due at `at`: URBs
    /// of the device's `transfer_size` (testusb's `-s`, 512 by default)
    /// at its `rate`.
    fn new(ctx: &mut Ctx, d: DevId, eps: (u8, u8), at: u64) -> BulkLoop {
        let size = ctx.dev(d).map_or(512, Device::transfer_size);
        let class_tag = ctx.dev(d).map(|x| x.class_tag).unwrap_or(0);
        let owner = ctx.owner(d, eps.1);
        let rate = ctx.dev(d).and_then(|x| x.cfg.as_ref()).and_then(|c| c.rate);
        let spacing = rate
            .map(|r| 1_000_000_000 / r.max(1) as u64)
            .unwrap_or(FLOOD_SPACING)
            .max(1);
        let t_out = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let t_in = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        // simple_alloc_urb's flags: URB_NO_TRANSFER_DMA_MAP, and
        // URB_SHORT_NOT_OK on IN; simple_io adds URB_ZERO_PACKET to an OUT
        // URB before each submission, and usb_submit_urb URB_DIR_IN to an
        // IN one (0x044 OUT, 0x205 IN in usbmon).
        let out = ctx.data_urb(
            d,
            eps.0,
            size,
            URB_NO_TRANSFER_DMA_MAP | URB_ZERO_PACKET,
            t_out,
        );
        let inn = ctx.data_urb(
            d,
            eps.1,
            size,
            URB_NO_TRANSFER_DMA_MAP | URB_SHORT_NOT_OK,
            t_in,
        );
        // Made in its one block, as the device's buffer is
        // (`sim/usb/memory.rs`).
        let out_data: Arc<[u8]> = std::iter::repeat_n(0u8, size as usize).collect();
        // The device's function (its source's buffer), made after the
        // URBs, as the run's random numbers always were drawn.
        (ctx.make_function)(ctx, d, at);
        BulkLoop {
            dev: d,
            eps,
            out,
            inn,
            out_data,
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

impl Task for BulkLoop {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        if ctx.unbound(self.dev, self.owner) {
            // A program detached usbtest (its URB was killed): the loop
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
            let ep = if is_in { self.eps.1 } else { self.eps.0 };
            let (o, tag) = (self.outcome, self.class_tag);
            if !end_by_fault(ctx, (d, ep, urb.tag), now, o, &mut self.runner, tag) {
                // The device's function answers: its source's bytes, or
                // what its sink took. A device without one NAKs: the URB
                // stays pending and the loop waits on it for good.
                let answer = if is_in {
                    ctx.with_function(d, |f, ctx| f.data(ctx, ep, now))
                } else {
                    let len = urb.len;
                    ctx.with_function(d, |f, ctx| f.take(ctx, now, len))
                        .flatten()
                        .map(|n| (n, self.out_data.clone()))
                };
                let (n, data) = answer?;
                let n = n.min(urb.len);
                ctx.complete(d, urb.tag, now, 0, n, Some(data), Vec::new(), 0, 0);
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
