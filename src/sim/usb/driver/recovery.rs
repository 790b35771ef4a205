//! What the class drivers share after an error: the clear-halt request and
//! running the pending control requests before the data stream goes on.

use crate::sim::usb::ctx::*;

/// CLEAR_FEATURE(ENDPOINT_HALT) for endpoint `ep` of `dev`, as the class
/// driver sends it after a stall.
pub(crate) fn clear_halt(dev: DevId, ep: u8, tag: u64) -> Op {
    Op::Ctrl {
        target: dev,
        setup: setup(0x02, 0x01, 0, ep as u16, 0),
        out: None,
        tag: Some(tag),
        flags: 0,
    }
}

/// Runs the driver's pending control requests (clear-halt and the like).
/// Returns Some(next) while they run; None once there is nothing to do.
pub(crate) fn run_recovery(runner: &mut Runner, ctx: &mut Ctx, tag: u64, now: u64) -> Option<u64> {
    if !runner.busy() {
        return None;
    }
    let mut t = tag;
    match runner.step(ctx, None, &mut t, now) {
        Some(next) => Some(next),
        None => Some(now + ctx.gap()),
    }
}
