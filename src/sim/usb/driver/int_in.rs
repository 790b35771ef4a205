//! The one interrupt-IN loop of the class drivers (usbhid's polling, a
//! driver's without a loop of its own on a recorded device's IN
//! endpoints, [`poll_function`]): a URB kept submitted on an IN
//! endpoint, completed when its [`InSource`] has data (on the endpoint's
//! interval grid), ended by injected faults, resubmitted at once. Also the
//! end of a data URB by an injected fault ([`end_by_fault`]), which the
//! bulk drivers share.

use std::sync::Arc;

use super::recovery::{clear_halt, run_recovery};
use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::{self, EpDesc, Speed};

/// What answers an IN endpoint's URB.
pub(crate) trait InSource: Send {
    /// The URB was submitted at `now` and ends as `outcome`: when it
    /// completes (the loop puts it on the endpoint's grid), or None to
    /// leave it pending for good.
    fn due(&mut self, ctx: &mut Ctx, now: u64, outcome: Outcome) -> Option<u64>;
    /// The data of a completion without a fault: (actual length, bytes).
    fn data(&mut self, ctx: &mut Ctx, now: u64) -> (u32, Arc<[u8]>);
}

/// The device's own IN function ([`InFunction`], kept in the device)
/// answering the loop's URB on IN endpoint `.1` of device `.0`: a
/// driver's polling of what the device sends whoever polls it.
pub(crate) struct DeviceFunction(pub DevId, pub u8);

impl InSource for DeviceFunction {
    fn due(&mut self, ctx: &mut Ctx, now: u64, outcome: Outcome) -> Option<u64> {
        let ep = self.1;
        ctx.with_function(self.0, |f, ctx| f.due(ctx, ep, now, outcome))
            .flatten()
    }
    fn data(&mut self, ctx: &mut Ctx, now: u64) -> (u32, Arc<[u8]>) {
        let ep = self.1;
        ctx.with_function(self.0, |f, ctx| f.data(ctx, ep, now))
            .unwrap_or_else(|| (0, ctx.empty.clone()))
    }
}

/// A bound driver without a loop of its own on interface `num` of device
/// `d` (the hub driver on a recorded hub, a driver monfs does not model
/// further): one URB kept submitted from `at` on each IN endpoint of the
/// interface that the device's function sends on
/// ([`InFunction::polled_eps`]), as the device's model played them before
/// the driver layer ran them; the function is made now if the device has
/// one and it is not there yet.
pub(crate) fn poll_function(ctx: &mut Ctx, d: DevId, num: u8, at: u64) {
    (ctx.make_function)(ctx, d, at);
    let eps = ctx
        .with_function(d, |f, _| f.polled_eps())
        .unwrap_or_default();
    for (addr, len) in eps {
        if ctx.dev(d).and_then(|x| x.desc.cfg.interface_of(addr)) != Some(num) {
            continue;
        }
        let t = InLoop::new(ctx, d, addr, len, |_| DeviceFunction(d, addr));
        ctx.spawn(at, Box::new(t));
    }
}

/// Nanoseconds between two polls of a periodic endpoint `ep` at `speed`.
pub(crate) fn poll_unit(speed: Speed, ep: &EpDesc) -> u64 {
    descriptors::urb_interval(speed, ep).max(1) as u64 * descriptors::interval_unit_ns(speed)
}

/// How long usbhid waits after an injected fault ended its interrupt IN
/// URB with `outcome`, as hid_irq_in takes each status: a stall is
/// cleared (reset_work's clear-halt) before the URB goes again; a babble
/// (-75) goes again at once (`at_once`); another error after
/// hid_io_error's retry delay (13 ms at first); None: an unlinked URB (-2)
/// is not resubmitted, the driver's input stops there.
pub(crate) fn usbhid_retry(
    ctx: &mut Ctx,
    outcome: Outcome,
    at_once: impl FnOnce(&mut Ctx) -> u64,
) -> Option<u64> {
    Some(match outcome {
        Outcome::Unlink => return None,
        Outcome::Stall => ctx.rng.range(MS, 3 * MS),
        Outcome::Proto(EOVERFLOW) => at_once(ctx),
        _ => ctx.rng.range(10 * MS, 20 * MS),
    })
}

/// If `outcome` is an injected fault, complete the URB `tag` on `ep` of
/// `dev` with it (a stall queues the class driver's clear-halt on
/// `runner`) and return true; false: the URB completes normally.
#[allow(clippy::too_many_arguments)]
pub(crate) fn end_by_fault(
    ctx: &mut Ctx,
    (dev, ep, tag): (DevId, u8, u64),
    now: u64,
    outcome: Outcome,
    runner: &mut Runner,
    class_tag: u64,
) -> bool {
    match outcome {
        Outcome::Ok | Outcome::SubmitError => false,
        Outcome::Stall => {
            ctx.complete(dev, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
            runner.q.push_back(clear_halt(dev, ep, class_tag));
            true
        }
        Outcome::Unlink => {
            ctx.complete(dev, tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
            true
        }
        o @ Outcome::Proto(_) => {
            ctx.complete(dev, tag, now, o.status(), 0, None, Vec::new(), 0, 0);
            true
        }
    }
}

/// A URB kept submitted on IN endpoint `ep`, answered by `src`, until the
/// driver is unbound from the endpoint's interface.
pub(crate) struct InLoop<S> {
    dev: DevId,
    ep: u8,
    /// The driver's binding when the loop began.
    owner: Option<Owner>,
    urb: Urb,
    waiting: bool,
    outcome: Outcome,
    runner: Runner,
    class_tag: u64,
    src: S,
}

impl<S: InSource> InLoop<S> {
    /// The loop of endpoint `ep` of device `d`: URBs of `len` bytes,
    /// answered by the source `make` builds (once the URB has its tag).
    pub(crate) fn new(
        ctx: &mut Ctx,
        d: DevId,
        ep: u8,
        len: u32,
        make: impl FnOnce(&mut Ctx) -> S,
    ) -> Self {
        let class_tag = ctx.dev(d).map(|x| x.class_tag).unwrap_or(0);
        let owner = ctx.owner(d, ep);
        let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let urb = ctx.data_urb(d, ep, len, URB_NO_TRANSFER_DMA_MAP, tag);
        let src = make(ctx);
        InLoop {
            dev: d,
            ep,
            owner,
            urb,
            waiting: false,
            outcome: Outcome::Ok,
            runner: Runner::default(),
            class_tag,
            src,
        }
    }
}

impl<S: InSource> Task for InLoop<S> {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            // Unplugged: the host controller fails what is in flight or
            // (re)submitted until the hub driver disconnects the device.
            if self.waiting {
                ctx.complete(
                    self.dev,
                    self.urb.tag,
                    now,
                    EPROTO,
                    0,
                    None,
                    Vec::new(),
                    0,
                    0,
                );
                return None;
            }
            // Disconnected: the driver is gone too.
            ctx.submit_urb(self.dev, &mut self.urb, None, Vec::new(), Place::Given, now)
                .ok()?;
            self.waiting = true;
            return Some(now + ctx.rng.range(100 * US, MS));
        }
        // Unbound (a program detached the driver, which killed its URB):
        // the driver is gone, its URB freed, and so is this loop.
        if ctx.unbound(self.dev, self.owner) {
            ctx.tags.free(self.urb.tag, URB_SIZE);
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        if !self.waiting {
            let (dev, urb) = (self.dev, &mut self.urb);
            self.outcome = match ctx.submit_urb(dev, urb, None, Vec::new(), Place::Given, now) {
                Ok((o, _)) => o,
                // usbhid tries again a little later.
                Err(_) => return Some(now + ctx.rng.range(10 * MS, 20 * MS)),
            };
            self.waiting = true;
            return self.src.due(ctx, now, self.outcome);
        }
        self.waiting = false;
        let (dev, tag) = (self.dev, self.urb.tag);
        let at = (dev, self.ep, tag);
        if end_by_fault(ctx, at, now, self.outcome, &mut self.runner, self.class_tag) {
            let retry = usbhid_retry(ctx, self.outcome, |ctx| ctx.rng.range(8 * US, 40 * US));
            if retry.is_none() {
                ctx.tags.free(self.urb.tag, URB_SIZE);
            }
            return retry.map(|t| now + t);
        }
        let (n, data) = self.src.data(ctx, now);
        ctx.complete(dev, tag, now, 0, n, Some(data.clone()), Vec::new(), 0, 0);
        ctx.driver_input(dev, self.ep, &data, n);
        Some(now + ctx.rng.range(8 * US, 40 * US))
    }
}
