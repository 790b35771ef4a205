//! The isochronous endpoints of an external device: several URBs queued
//! on consecutive (micro)frames, each completed at the end of its frames
//! with the peer's packets, or with every packet missed.

use std::sync::Arc;

use crate::config::EndpointConfig;
use crate::usbmon::event::{IsoDesc, URB_ISO_ASAP};

use super::super::super::ctx::*;
use super::super::super::descriptors::{self, Speed};
use super::super::super::peer::protocol::{check_iso, submit_line_iso, Answer};
use super::super::super::peer::{AnswerError, PeerError};
use super::link::Link;

/// Bytes that may wait in the peer's input before an isochronous URB's
/// line: past them the peer is behind, and the URB is not offered to it
/// (its frames are missed, every packet -18), as a device that cannot keep
/// up misses frames.
const ISO_BACKLOG: usize = 256 << 10;

/// "Frames missed" is logged at most once a second.
static BEHIND_LOG: crate::base::budget::LogLimit = crate::base::budget::LogLimit::new();

/// One isochronous URB of an endpoint's queue.
struct IsoSlot {
    tag: u64,
    id: u64,
    inflight: bool,
    /// Its line went to the peer (it is not when the peer is behind).
    offered: bool,
    /// Submitted next (not in flight) or completed next (in flight).
    due: u64,
    /// Its first (micro)frame.
    start: u64,
    outcome: Outcome,
    answer: Option<Answer>,
}

/// An isochronous endpoint: several URBs queued on consecutive
/// (micro)frames, each resubmitted when it completes.
struct IsoEp {
    /// Its interface.
    intf: u8,
    urb: Urb,
    pkt_len: u32,
    /// Time per packet: the endpoint's interval.
    pkt_ns: u64,
    /// A frame (full speed) or microframe (high speed).
    unit: u64,
    slots: Vec<IsoSlot>,
    next_start: u64,
    /// OUT: the buffer each URB carries.
    out: Option<Arc<[u8]>>,
}

/// The isochronous endpoints of a device.
#[derive(Default)]
pub(super) struct IsoEps(Vec<IsoEp>);

impl IsoEps {
    /// Start isochronous endpoint `e` of device `dev` as its `endpoints:`
    /// entry `x` says.
    pub(super) fn start(
        &mut self,
        ctx: &mut Ctx,
        dev: DevId,
        (intf, e): (u8, descriptors::EpDesc),
        x: &EndpointConfig,
        speed: Speed,
        now: u64,
    ) {
        let npk = x.packets.unwrap_or(8);
        let pkt_len = e.max_per_interval(speed);
        let unit = descriptors::interval_unit_ns(speed);
        let pkt_ns = descriptors::urb_interval(speed, &e).max(1) as u64 * unit;
        let size = iso_urb_size(npk);
        let slots = (0..x.urbs.unwrap_or(2))
            .map(|k| IsoSlot {
                tag: ctx.tags.alloc(&mut ctx.rng, size),
                id: 0,
                inflight: false,
                offered: false,
                due: now + k as u64 * ctx.rng.range(3 * US, 12 * US),
                start: 0,
                outcome: Outcome::Ok,
                answer: None,
            })
            .collect();
        let mut urb = ctx.data_urb(dev, e.addr, npk * pkt_len, URB_ISO_ASAP, 0);
        urb.npk = npk;
        urb.interval = descriptors::urb_interval(speed, &e);
        let out = (!e.dir_in()).then(|| {
            let pat = x.data.as_ref().map(|d| d.0.clone()).unwrap_or_default();
            let n = (npk * pkt_len) as usize;
            let buf: Vec<u8> = if pat.is_empty() {
                vec![0; n]
            } else {
                pat.iter().copied().cycle().take(n).collect()
            };
            Arc::from(buf)
        });
        self.0.push(IsoEp {
            intf,
            urb,
            pkt_len,
            pkt_ns,
            unit,
            slots,
            next_start: now + MS,
            out,
        });
    }

    /// Submit isochronous URB `j` of endpoint `k` for the next free
    /// (micro)frames, as URB_ISO_ASAP does.
    fn submit(
        &mut self,
        ctx: &mut Ctx,
        (dev, link): (DevId, &mut Link),
        k: usize,
        j: usize,
        now: u64,
    ) -> Result<(), PeerError> {
        let iso = &mut self.0[k];
        let npk = iso.urb.npk;
        let dur = npk as u64 * iso.pkt_ns;
        let earliest = iso.next_start.max(now + iso.pkt_ns);
        let start = earliest.div_ceil(iso.unit) * iso.unit;
        iso.next_start = start + dur;
        let mut urb = iso.urb;
        urb.tag = iso.slots[j].tag;
        urb.sched_frame = ctx.start_frame(dev, start);
        let pl = iso.pkt_len;
        let out = iso.out.clone();
        let descs = iso_packets(npk, pl, pl);
        let placed = ctx.submit_urb(dev, &mut urb, out.clone(), descs, Place::Given, now);
        let sl = &mut self.0[k].slots[j];
        sl.start = start;
        sl.answer = None;
        let Ok((outcome, _)) = placed else {
            // Refused; tried again when its frames would have ended.
            sl.outcome = Outcome::SubmitError;
            sl.due = start + dur;
            return Ok(());
        };
        sl.outcome = outcome;
        let id = link.id();
        let sl = &mut self.0[k].slots[j];
        sl.id = id;
        sl.inflight = true;
        sl.due = start + dur + ctx.rng.range(0, 60 * US);
        let lens = vec![pl; npk as usize];
        let line = submit_line_iso(id, &urb, out.as_deref(), &lens);
        let offered = link.offer(line, ISO_BACKLOG)?;
        self.0[k].slots[j].offered = offered;
        if !offered {
            if let Some(suppressed) = BEHIND_LOG.allow() {
                tracing::warn!(
                    suppressed,
                    "usb {}: external device's peer is behind its input: isochronous frames \
                     missed",
                    ctx.dev_name(dev)
                );
            }
        }
        Ok(())
    }

    /// Isochronous URB `j` of endpoint `k` reaches the end of its frames:
    /// it completes with the peer's packets, or with every packet missed
    /// (-18) if the peer has not answered in time.
    fn complete(
        &mut self,
        ctx: &mut Ctx,
        (dev, link): (DevId, &mut Link),
        k: usize,
        j: usize,
        now: u64,
    ) -> Result<(), PeerError> {
        let iso = &mut self.0[k];
        let (npk, pl, dir_in) = (iso.urb.npk, iso.pkt_len, iso.urb.dir_in);
        let out = iso.out.clone();
        let sl = &mut iso.slots[j];
        sl.inflight = false;
        sl.due = now + ctx.rng.range(5 * US, 40 * US);
        let (tag, id, outcome, offered) = (sl.tag, sl.id, sl.outcome, sl.offered);
        let frame = ctx.start_frame(dev, sl.start);
        let answer = sl.answer.take();
        let missed = |st| -> Vec<IsoDesc> {
            (0..npk)
                .map(|i| IsoDesc {
                    status: st,
                    offset: i * pl,
                    length: 0,
                })
                .collect()
        };
        // IN: the buffer as it was (nothing written).
        let untouched = || dir_in.then(|| Arc::from(vec![0u8; (npk * pl) as usize]));
        let unlink = match (outcome, answer) {
            (Outcome::Unlink, _) => {
                // Killed by the driver (usb_kill_urb).
                let d = untouched();
                ctx.complete(dev, tag, now, ENOENT, 0, d, missed(EXDEV), frame, 0);
                Some(ENOENT)
            }
            (_, None) => {
                let (n, d) = (npk as i32, untouched());
                ctx.complete(dev, tag, now, 0, 0, d, missed(EXDEV), frame, n);
                Some(EXDEV)
            }
            (_, Some(a)) => {
                let mut pkts = a.pkts.unwrap_or_default();
                let mut buf = if dir_in {
                    vec![0u8; (npk * pl) as usize]
                } else {
                    vec![]
                };
                let mut at = 0usize;
                for (i, p) in pkts.iter().enumerate() {
                    let n = p.1 as usize;
                    if dir_in {
                        let o = i * pl as usize;
                        buf[o..o + n].copy_from_slice(&a.data[at..at + n]);
                    }
                    at += n;
                }
                if let Outcome::Proto(st) = outcome {
                    // An injected error garbles one packet.
                    let b = ctx.rng.below(npk as u64) as usize;
                    pkts[b] = (st, 0);
                    if dir_in {
                        let o = b * pl as usize;
                        buf[o..o + pl as usize].fill(0);
                    }
                }
                let descs: Vec<IsoDesc> = pkts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| IsoDesc {
                        status: p.0,
                        offset: i as u32 * pl,
                        length: p.1,
                    })
                    .collect();
                let actual = pkts.iter().map(|p| p.1).sum();
                let errs = pkts.iter().filter(|p| p.0 != 0).count() as i32;
                let data = if dir_in { Some(Arc::from(buf)) } else { out };
                ctx.complete(dev, tag, now, 0, actual, data, descs, frame, errs);
                None
            }
        };
        match unlink {
            // The peer is told, unless it never got the URB.
            Some(st) if offered => link.give_up(id, st),
            _ => Ok(()),
        }
    }

    /// The driver of interface `intf` is gone: its endpoints stop (the
    /// core killed their URBs, with `status`), the peer is told of those it
    /// got, and their tags are free.
    pub(super) fn stop(
        &mut self,
        ctx: &mut Ctx,
        link: &mut Link,
        intf: u8,
        status: i32,
    ) -> Result<(), PeerError> {
        let (gone, kept): (Vec<IsoEp>, Vec<IsoEp>) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|e| e.intf == intf);
        self.0 = kept;
        for e in gone {
            let size = iso_urb_size(e.urb.npk);
            for sl in e.slots {
                if sl.inflight && sl.offered {
                    link.give_up(sl.id, status)?;
                }
                ctx.tags.free(sl.tag, size);
            }
        }
        Ok(())
    }

    /// Take answer `a` if it completes an isochronous URB in flight;
    /// Some(a) back if it does not.
    pub(super) fn accept(&mut self, a: Answer) -> Result<Option<Answer>, PeerError> {
        for iso in &mut self.0 {
            let (urb, pl) = (iso.urb, iso.pkt_len);
            if let Some(sl) = iso.slots.iter_mut().find(|s| s.inflight && s.id == a.id) {
                check_iso(&a, &urb, pl)?;
                if sl.answer.is_some() {
                    return Err(AnswerError::Twice(a.id).into());
                }
                sl.answer = Some(a);
                return Ok(None);
            }
        }
        Ok(Some(a))
    }

    /// Submit or complete the isochronous URBs that are due; `next`
    /// becomes the earliest time one is due next.
    pub(super) fn step(
        &mut self,
        ctx: &mut Ctx,
        dev: DevId,
        link: &mut Link,
        now: u64,
        next: &mut Option<u64>,
    ) -> Result<(), PeerError> {
        for k in 0..self.0.len() {
            for j in 0..self.0[k].slots.len() {
                let sl = &self.0[k].slots[j];
                if now >= sl.due {
                    if sl.inflight {
                        self.complete(ctx, (dev, &mut *link), k, j, now)?;
                    } else {
                        self.submit(ctx, (dev, &mut *link), k, j, now)?;
                    }
                }
                let due = self.0[k].slots[j].due;
                *next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        Ok(())
    }
}
