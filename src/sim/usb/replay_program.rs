//! Replay for programs: a device taken from a capture (`from-capture`)
//! answers a program's URBs from the capture, as umockdev's pcap replay
//! does. A walk per device goes through the device's `S` and `C` records
//! in capture order while programs' URBs wait on it:
//! * an `S` record is matched to the oldest waiting URB that matches it as
//!   umockdev matches a submission (the transfer type; for control: the
//!   same setup packet; else the same endpoint and length; an OUT
//!   transfer's data too, where the capture holds it), and the walk goes
//!   on; a standard control request nobody submitted (the kernel's) is
//!   passed over; any other stops the walk until a program submits it;
//! * a `C` record completes the URB matched to its submission, with the
//!   recorded status, length and data, and the walk goes on (a `C` record
//!   of a URB nobody matched is passed over).
//!
//! So URBs complete in the capture's order of completions, as under
//! umockdev: an interrupt IN URB submitted before a control transfer that
//! completed first in the recording waits for it. The walk goes on while
//! URBs wait (umockdev walks when a program reaps, which libusb does while
//! it has URBs in flight).
//!
//! Beyond umockdev: a standard request the capture does not have ahead of
//! the walk is answered from the descriptors (the core's own knowledge);
//! a `C` record of a transfer submitted before the capture started
//! completes a waiting URB of its endpoint of any length; and a walk that
//! stopped at a submission nobody makes while no URB it matched is
//! waiting (a kernel driver's class request, say, in a capture of a
//! device a driver had) goes on to the next submission a waiting URB
//! matches. Anything else is a URB the capture does not have: a log line
//! says so, and the device does not answer it, as a device that stopped
//! answering (it NAKs): the URB stays pending until the program gives up
//! on it (a synchronous transfer's timeout is -ETIMEDOUT, a discarded URB
//! -ENOENT).

use std::sync::Arc;

use crate::capture::recorded::{RecordedDevice, RecordedSubmission, RecordedTransfer, ReplayStep};
use crate::usbmon::event::XferType;

use super::ctx::*;

impl ReplayWaiting {
    fn ep(&self) -> u8 {
        match (self.urb.xfer, self.urb.setup) {
            (XferType::Control, Some(s)) => s[0] & 0x80,
            _ => self.urb.ep | if self.urb.dir_in { 0x80 } else { 0 },
        }
    }

    /// Whether the recorded submission `s` is this URB's, as umockdev
    /// matches them.
    fn fits(&self, s: &RecordedSubmission) -> bool {
        if s.xfer != self.urb.xfer {
            return false;
        }
        let shape = match self.urb.xfer {
            XferType::Control => s.setup.is_some() && s.setup == self.urb.setup,
            _ => s.ep == self.ep() && s.len == self.urb.len,
        };
        let same_out = match (&s.out, &self.out) {
            (Some(rec), Some(got)) if self.ep() & 0x80 == 0 => rec[..] == got[..],
            _ => true,
        };
        shape && same_out
    }

    /// Whether the completion `t` of a transfer submitted before the
    /// capture can be this URB's: a data transfer on its endpoint.
    fn fits_unsubmitted(&self, t: &RecordedTransfer) -> bool {
        self.matched.is_none()
            && t.sub.is_none()
            && self.urb.xfer != XferType::Control
            && t.xfer == self.urb.xfer
            && t.ep == self.ep()
    }
}

/// The first record at or after `from` that the URB `w` can be matched at.
fn next_fit(rec: &RecordedDevice, w: &ReplayWaiting, from: usize) -> Option<usize> {
    let at = rec.steps.get(from..)?.iter().position(|s| match *s {
        ReplayStep::Submit(i) => w.fits(&rec.submissions[i]),
        ReplayStep::Complete(t) => w.fits_unsubmitted(&rec.transfers[t]),
    })?;
    Some(from + at)
}

/// A URB the walk completes: the URB, its status, actual length and IN
/// data, as recorded.
pub(crate) struct Done {
    pub urb: Urb,
    pub status: i32,
    pub actual: u32,
    pub data: Option<Arc<[u8]>>,
}

/// What becomes of a program's URB just submitted to a recorded device.
pub(crate) enum Submitted {
    /// It waits on the walk; these URBs (it among them, maybe) complete now,
    /// in this order.
    Walked(Vec<Done>),
    /// A standard request the capture does not have: the core answers it.
    Standard,
    /// Not in the capture: nobody answers it.
    Unknown,
}

/// A program's URB `urb` (OUT data `out`) submitted to the recorded device
/// `d`.
pub(crate) fn submit(ctx: &mut Ctx, d: DevId, urb: Urb, out: Option<Arc<[u8]>>) -> Submitted {
    let Some(rec) = ctx.dev(d).and_then(|x| x.desc.recorded.clone()) else {
        return Submitted::Unknown;
    };
    let mut w = ReplayWaiting {
        urb,
        out,
        matched: None,
        next: usize::MAX,
    };
    let pos = ctx.dev(d).map(|x| x.core.replay.pos).unwrap_or(0);
    let Some(next) = next_fit(&rec, &w, pos) else {
        let what = match (urb.xfer, urb.setup) {
            (XferType::Control, Some(s)) if standard(&s) => return Submitted::Standard,
            (XferType::Control, Some(s)) => format!(
                "control request {}",
                s.iter().map(|b| format!("{b:02x}")).collect::<String>()
            ),
            _ => format!("transfer on endpoint {:02x}", w.ep()),
        };
        unknown(ctx, d, &rec, what);
        return Submitted::Unknown;
    };
    w.next = next;
    if let Some(x) = ctx.dev_mut(d) {
        x.core.replay.queue.push(w);
    }
    Submitted::Walked(walk(ctx, d, &rec))
}

/// A program discarded URB `tag` of `d` (it is gone from the bus): the
/// walk goes on without it; these URBs complete now.
pub(crate) fn discarded(ctx: &mut Ctx, d: DevId, tag: u64) -> Vec<Done> {
    let Some(rec) = ctx.dev(d).and_then(|x| x.desc.recorded.clone()) else {
        return vec![];
    };
    if let Some(x) = ctx.dev_mut(d) {
        x.core.replay.forget(tag);
    }
    walk(ctx, d, &rec)
}

/// Walk `d`'s capture while URBs wait; the URBs completed, in order.
fn walk(ctx: &mut Ctx, d: DevId, rec: &RecordedDevice) -> Vec<Done> {
    let mut done = Vec::new();
    let Some(x) = ctx.dev_mut(d) else {
        return done;
    };
    let walk = &mut x.core.replay;
    while !walk.queue.is_empty() {
        let Some(&step) = rec.steps.get(walk.pos) else {
            break;
        };
        match step {
            ReplayStep::Submit(i) => {
                let s = &rec.submissions[i];
                let q = &mut walk.queue;
                if let Some(k) = q.iter().position(|w| w.matched.is_none() && w.fits(s)) {
                    q[k].matched = Some(i);
                    walk.pos += 1;
                    continue;
                }
                // umockdev passes over a standard control request no
                // program submitted (the kernel's own).
                if s.xfer == XferType::Control && s.setup.is_some_and(|x| x[0] & 0x60 == 0) {
                    walk.pos += 1;
                    continue;
                }
                // A submission nobody made yet stops the walk; with no URB
                // it matched waiting, it goes on to the next one a waiting
                // URB matches (monfs's: umockdev stays stuck).
                if q.iter().all(|w| w.matched.is_none()) {
                    // Where each can be matched next: looked for again only
                    // once the walk passed it, so each URB's looking goes
                    // through the capture at most once.
                    let pos = walk.pos;
                    for w in q.iter_mut().filter(|w| w.next <= pos) {
                        w.next = next_fit(rec, w, pos + 1).unwrap_or(usize::MAX);
                    }
                    let p = q.iter().map(|w| w.next).min().unwrap_or(usize::MAX);
                    if p != usize::MAX {
                        walk.pos = p;
                        continue;
                    }
                }
                break;
            }
            ReplayStep::Complete(t) => {
                let t = &rec.transfers[t];
                let q = &mut walk.queue;
                let k = match t.sub {
                    Some(i) => q.iter().position(|w| w.matched == Some(i)),
                    None => q.iter().position(|w| w.fits_unsubmitted(t)),
                };
                walk.pos += 1;
                if let Some(k) = k {
                    let w = q.remove(k);
                    done.push(completion(&w, t));
                }
            }
        }
    }
    done
}

/// The recorded completion `t` of the URB `w`.
fn completion(w: &ReplayWaiting, t: &RecordedTransfer) -> Done {
    let urb = w.urb;
    let n = (t.actual.min(urb.len) as usize).min(t.data.len());
    let data = (urb.dir_in && n > 0).then(|| Arc::from(&t.data[..n]));
    Done {
        urb,
        status: t.status,
        actual: t.actual.min(urb.len),
        data,
    }
}

fn unknown(ctx: &Ctx, d: DevId, rec: &RecordedDevice, what: String) {
    let pos = ctx.dev(d).map(|x| x.core.replay.pos).unwrap_or(0);
    let packet = pos
        .checked_sub(1)
        .and_then(|i| rec.steps.get(i))
        .map(|s| match *s {
            ReplayStep::Submit(i) => rec.submissions[i].packet,
            ReplayStep::Complete(t) => rec.transfers[t].packet,
        });
    let after = match packet {
        Some(p) => format!("after packet {p}, where its replay is"),
        None => "from its start".into(),
    };
    tracing::warn!(
        "usb {}: a program's {what} is not in the capture {} {after}: the device does \
         not answer it (as a device that stopped answering: it stays pending until the \
         program gives up)",
        ctx.dev_name(d),
        rec.path.display()
    );
}

/// Standard requests the core answers from what it knows of the device.
fn standard(s: &[u8; 8]) -> bool {
    matches!(
        (s[0], s[1]),
        (0x80, 0x06)
            | (0x80, 0x00)
            | (0x81, 0x00)
            | (0x82, 0x00)
            | (0x80, 0x08)
            | (0x81, 0x0a)
            | (0x00, 0x09)
            | (0x01, 0x0b)
            | (0x02, 0x01)
    )
}

#[cfg(test)]
mod tests;
