//! When and how the bus gives back a program's URB: the [`Finish`] task
//! that completes it at its time, and that time for bulk and interrupt
//! URBs on the bus's schedule (see `ctx::endpoint`).

use std::sync::Arc;

use crate::usbmon::event::{IsoDesc, XferType};

use crate::sim::usb::ctx::*;

/// Completes a program's URB at its step if it is still in flight.
struct Finish {
    dev: DevId,
    answer: Option<Held>,
}

impl Task for Finish {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if let Some(h) = self.answer.take() {
            ctx.complete_with(self.dev, now, h);
        }
        None
    }
}

/// A periodic URB's interval and its device's (micro)frame, ns of
/// realistic time; None: the device is gone.
pub(super) fn period(ctx: &Ctx, d: DevId, urb: &Urb) -> Option<(u64, u64)> {
    Some(ctx.dev(d)?.period(urb))
}

/// When the bus gives back a bulk or interrupt URB of `dev` that moves
/// `len` bytes, its device having them at `now`: a bulk URB once the bytes
/// had their time on the bus's asynchronous schedule, an interrupt URB at
/// its endpoint's next poll (one a bInterval, after the URB before it).
pub(super) fn bus_time(ctx: &mut Ctx, d: DevId, urb: &Urb, len: u32, now: u64) -> u64 {
    match urb.xfer {
        XferType::Interrupt => match period(ctx, d, urb) {
            Some((per, _)) => ctx.interrupt_slot(d, ep_key(urb), per, now),
            None => now,
        },
        XferType::Bulk => ctx.bulk_done(d, len, now),
        _ => now,
    }
}

/// Complete the URB `tag` of `d` at `at` with this answer (if it is still
/// in flight then).
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_at(
    ctx: &mut Ctx,
    d: DevId,
    tag: u64,
    at: u64,
    status: i32,
    actual: u32,
    data: Option<Arc<[u8]>>,
    iso: Vec<IsoDesc>,
    (start_frame, error_count): (i32, i32),
) {
    let answer = Held {
        tag,
        status,
        actual,
        data,
        iso,
        start_frame,
        error_count,
    };
    ctx.spawn(
        at,
        Box::new(Finish {
            dev: d,
            answer: Some(answer),
        }),
    );
}
