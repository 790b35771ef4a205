//! Replay for programs: a device taken from a capture (`from-capture`)
//! answers a program's URBs from the capture, as umockdev's pcap replay
//! does. A walk per device goes through the device's `S` and `C` records
//! in capture order while programs' URBs wait on it:
//! * an `S` record is matched to the oldest waiting URB that matches it as
//!   umockdev matches a submission (the transfer type; for control: the
//!   same setup packet; isochronous, which umockdev does not replay: the
//!   same endpoint, number of packets and each packet's length; else the
//!   same endpoint and length; an OUT transfer's data too, where the
//!   capture holds it, packet by packet for isochronous), and the walk goes
//!   on; a standard control request nobody submitted (the kernel's) is
//!   passed over; any other stops the walk until a program submits it;
//! * a `C` record completes the URB matched to its submission, with the
//!   recorded status, length and data (an isochronous URB: each packet's
//!   recorded status, actual length and bytes, on the bus's isochronous
//!   schedule), and the walk goes on (a `C` record of a URB nobody
//!   matched is passed over).
//!
//! A completion comes at the bus's pace once the walk reaches it; with
//! `replay_timing: recorded` also no earlier than the recorded delay
//! between its `S` and `C` records after the program's submission (the
//! bus's clock: a thousandth of it under `timing: fast`).
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
//! -ENOENT). An isochronous one, which no handshake holds, ends with its
//! frames (core_view): its OUT packets sent, its IN packets -EPROTO with
//! nothing.

use std::sync::Arc;

use crate::capture::recorded::{RecordedDevice, RecordedSubmission, RecordedTransfer, ReplayStep};
use crate::config::ReplayTiming;
use crate::usbmon::event::{IsoDesc, XferType};

use super::ctx::*;

impl ReplayWaiting {
    /// Its place on the isochronous schedule.
    fn slot(&self) -> IsoSlot {
        IsoSlot {
            start_frame: self.urb.sched_frame,
            end: self.iso_end,
            late: self.iso_late,
        }
    }

    fn ep(&self) -> u8 {
        match (self.urb.xfer, self.urb.setup) {
            (XferType::Control, Some(s)) => s[0] & 0x80,
            _ => self.urb.ep | if self.urb.dir_in { 0x80 } else { 0 },
        }
    }

    /// Whether the recorded submission `s` is this URB's, as umockdev
    /// matches them (an isochronous one, which umockdev does not replay:
    /// the same endpoint, number of packets and each packet's length).
    fn fits(&self, s: &RecordedSubmission) -> bool {
        if s.xfer != self.urb.xfer {
            return false;
        }
        let shape = match self.urb.xfer {
            XferType::Control => s.setup.is_some() && s.setup == self.urb.setup,
            XferType::Iso => s.ep == self.ep() && self.same_packets(s),
            _ => s.ep == self.ep() && s.len == self.urb.len,
        };
        let same_out = match (&s.out, &self.out) {
            (Some(rec), Some(got)) if self.ep() & 0x80 == 0 => match self.urb.xfer {
                XferType::Iso => self.same_iso_out(s, rec, got),
                _ => rec[..] == got[..],
            },
            _ => true,
        };
        shape && same_out
    }

    /// Whether the isochronous submission `s` has this URB's packets: as
    /// many, each of the same length (those usbmon kept the descriptors
    /// of).
    fn same_packets(&self, s: &RecordedSubmission) -> bool {
        s.npk == self.urb.npk
            && s.npk as usize == self.pkts.len()
            && s.iso.iter().zip(&self.pkts).all(|(r, &l)| r.length == l)
    }

    /// Whether an isochronous OUT URB's packets carry the recorded bytes:
    /// each packet's, at its offset in either buffer.
    fn same_iso_out(&self, s: &RecordedSubmission, rec: &[u8], got: &[u8]) -> bool {
        let mut off = 0usize;
        s.iso.iter().zip(&self.pkts).all(|(r, &l)| {
            let (a, b) = (r.offset as usize, off);
            off += l as usize;
            let n = l as usize;
            match (rec.get(a..a.saturating_add(n)), got.get(b..b + n)) {
                (Some(x), Some(y)) => x == y,
                _ => true,
            }
        })
    }

    /// Whether the completion `t` of a transfer submitted before the
    /// capture can be this URB's: a data transfer on its endpoint (an
    /// isochronous one of as many packets, none longer than this URB's).
    fn fits_unsubmitted(&self, t: &RecordedTransfer) -> bool {
        let packets = match self.urb.xfer {
            XferType::Iso => {
                t.npk as usize == self.pkts.len()
                    && t.iso.iter().zip(&self.pkts).all(|(r, &l)| r.length <= l)
            }
            _ => true,
        };
        self.matched.is_none()
            && t.sub.is_none()
            && self.urb.xfer != XferType::Control
            && t.xfer == self.urb.xfer
            && t.ep == self.ep()
            && packets
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
/// data, as recorded; an isochronous URB's packets and place on the
/// schedule; when it may complete at the earliest.
pub(crate) struct Done {
    pub urb: Urb,
    pub status: i32,
    pub actual: u32,
    pub data: Option<Arc<[u8]>>,
    /// An isochronous URB's packets (status, offset, actual length), as
    /// the recorded completion gives them, at this URB's offsets.
    pub iso: Vec<IsoDesc>,
    /// An isochronous URB's place on its endpoint's schedule.
    pub slot: IsoSlot,
    /// Not before this (the bus's clock): with `replay_timing: recorded`,
    /// its submission plus the recorded delay between its `S` and `C`
    /// records; else 0.
    pub not_before: u64,
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

/// A program's URB `urb` (OUT data `out`; an isochronous one's packet
/// lengths `pkts` and place `slot` on the schedule) submitted at `now` to
/// the recorded device `d`.
pub(crate) fn submit(
    ctx: &mut Ctx,
    d: DevId,
    urb: Urb,
    out: Option<Arc<[u8]>>,
    (pkts, slot): (Vec<u32>, IsoSlot),
    now: u64,
) -> Submitted {
    let Some(rec) = ctx.dev(d).and_then(|x| x.desc.recorded.clone()) else {
        return Submitted::Unknown;
    };
    let mut w = ReplayWaiting {
        urb,
        out,
        pkts,
        iso_end: slot.end,
        iso_late: slot.late,
        since: now,
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
    // The recorded delays, where asked for: as every latency of the bus,
    // a thousandth under `timing: fast`.
    let recorded = ctx
        .dev(d)
        .and_then(|x| x.cfg.as_ref())
        .map(|c| c.replay_timing)
        == Some(Some(ReplayTiming::Recorded));
    let divisor = ctx.delay(1_000_000).max(1);
    let timing = recorded.then_some(divisor);
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
                    let mut c = completion(&w, t);
                    if let Some(per_ms) = timing {
                        // ns of the bus's clock: the delay scaled as
                        // `ctx.delay` scales a millisecond.
                        let ns = t.delay_ns(&rec.submissions);
                        let scaled = (ns as u128 * per_ms as u128 / 1_000_000) as u64;
                        c.not_before = w.since.saturating_add(scaled);
                    }
                    done.push(c);
                }
            }
        }
    }
    done
}

/// The recorded completion `t` of the URB `w`.
fn completion(w: &ReplayWaiting, t: &RecordedTransfer) -> Done {
    let urb = w.urb;
    if urb.xfer == XferType::Iso {
        return iso_completion(w, t);
    }
    let n = (t.actual.min(urb.len) as usize).min(t.data.len());
    let data = (urb.dir_in && n > 0).then(|| Arc::from(&t.data[..n]));
    Done {
        urb,
        status: t.status,
        actual: t.actual.min(urb.len),
        data,
        iso: vec![],
        slot: w.slot(),
        not_before: 0,
    }
}

/// The recorded isochronous completion `t` of the URB `w`: each packet's
/// recorded status and actual length (at most the packet's length), an IN
/// packet's recorded bytes (taken at its recorded offset, as far as the
/// capture holds them) at the packet's offset in this URB's buffer. A
/// packet whose descriptor usbmon did not keep (beyond the first 128) is
/// -EXDEV with nothing moved.
fn iso_completion(w: &ReplayWaiting, t: &RecordedTransfer) -> Done {
    let urb = w.urb;
    let mut buf = urb.dir_in.then(|| vec![0u8; urb.len as usize]);
    let mut iso = Vec::with_capacity(w.pkts.len());
    let mut off = 0u32;
    for (i, &len) in w.pkts.iter().enumerate() {
        let (status, n) = match t.iso.get(i) {
            Some(r) => (r.status, r.length.min(len)),
            None => (EXDEV, 0),
        };
        if let Some(buf) = buf.as_mut() {
            let from = t.iso.get(i).map(|r| r.offset as usize).unwrap_or(0);
            let src = t.data.get(from..).unwrap_or(&[]);
            let k = (n as usize).min(src.len());
            let at = off as usize;
            if let Some(dst) = buf.get_mut(at..at + k) {
                dst.copy_from_slice(&src[..k]);
            }
        }
        iso.push(IsoDesc {
            status,
            offset: off,
            length: n,
        });
        off = off.saturating_add(len);
    }
    let actual = iso.iter().map(|p| p.length).sum();
    Done {
        urb,
        status: t.status,
        actual,
        data: buf.map(Arc::from),
        iso,
        slot: w.slot(),
        not_before: 0,
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
