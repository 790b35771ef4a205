//! A flash drive's bulk-only transport as a program drives it, once it took
//! the interface from usb-storage (libusb mass-storage tools, sg-style
//! utilities over usbfs): each bulk URB goes through the drive's SCSI
//! target ([`Device::target`], the one that answered usb-storage) and
//! completes on the bus's schedule; a bulk IN with nothing to read waits
//! (the device NAKs) until a command gives it something.

use std::sync::Arc;

use crate::sim::usb::ctx::*;

use super::finish::{bus_time, finish_at};

/// A program's bulk URB to the flash drive `d`, submitted at `now`.
pub(super) fn urb(ctx: &mut Ctx, d: DevId, urb: &Urb, out: Option<&[u8]>, now: u64) {
    (ctx.make_function)(ctx, d, now);
    let Some(bot) = ctx.dev_mut(d).and_then(|x| x.target.as_mut()) else {
        return;
    };
    if urb.dir_in {
        bot.waiting.push_back((urb.tag, urb.len));
    } else {
        let ok = bot.host_out(out.unwrap_or_default()).is_ok();
        let at = bus_time(ctx, d, urb, urb.len, now);
        let (status, actual) = if ok { (0, urb.len) } else { (EPIPE, 0) };
        finish_at(ctx, d, urb.tag, at, status, actual, None, vec![], (0, 0));
    }
    serve(ctx, d, now);
}

/// Give the waiting bulk INs of `d` what there is to read.
fn serve(ctx: &mut Ctx, d: DevId, now: u64) {
    loop {
        let Some(dev) = ctx.dev_mut(d) else {
            return;
        };
        let inflight = &dev.inflight;
        let Some(bot) = dev.target.as_mut() else {
            return;
        };
        // URBs the program discarded meanwhile are gone.
        bot.waiting
            .retain(|(tag, _)| inflight.iter().any(|u| u.tag == *tag));
        if bot.to_host.is_empty() {
            return;
        }
        let Some((tag, len)) = bot.waiting.pop_front() else {
            return;
        };
        let chunk = bot.host_in(len).unwrap_or_default();
        let Some(u) = dev.inflight.iter().find(|u| u.tag == tag).copied() else {
            continue;
        };
        let n = chunk.len() as u32;
        let at = bus_time(ctx, d, &u, n, now);
        let data = (n > 0).then(|| Arc::from(chunk));
        finish_at(ctx, d, tag, at, 0, n, data, vec![], (0, 0));
    }
}
