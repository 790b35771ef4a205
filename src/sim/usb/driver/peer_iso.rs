//! The drivers' isochronous streams on a device answered by a peer
//! process (an external device's isochronous `endpoints:` entries):
//! several URBs queued on consecutive (micro)frames, each completed at the
//! end of its frames with the peer's packets, or with every packet
//! missed; the peer reached as by [`super::peer_loop`].

use std::sync::Arc;

use crate::base::sync::LockExt;
use crate::config::EndpointConfig;
use crate::usbmon::event::{IsoDesc, URB_ISO_ASAP};

use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::{self, Speed};
use crate::sim::usb::peer::protocol::{check_iso, submit_line_iso, Answer};
use crate::sim::usb::peer::PeerError;

use super::peer_urb::{give_up, peer, take};

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
}

/// An isochronous endpoint: several URBs queued on consecutive
/// (micro)frames, each resubmitted when it completes, until the driver is
/// unbound from its interface.
pub(super) struct IsoEp {
    dev: DevId,
    /// Its interface.
    intf: u8,
    /// The driver's binding when the stream began.
    owner: Option<Owner>,
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

impl IsoEp {
    /// The stream of isochronous endpoint `e` of interface `intf` of device
    /// `dev` as its `endpoints:` entry `x` says, from `now`.
    pub(super) fn new(
        ctx: &mut Ctx,
        dev: DevId,
        (intf, e): (u8, descriptors::EpDesc),
        x: &EndpointConfig,
        speed: Speed,
        now: u64,
    ) -> IsoEp {
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
        IsoEp {
            dev,
            intf,
            owner: ctx.interface_owner(dev, intf),
            urb,
            pkt_len,
            pkt_ns,
            unit,
            slots,
            next_start: now + MS,
            out,
        }
    }

    /// Submit isochronous URB `j` for the next free (micro)frames, as
    /// URB_ISO_ASAP does.
    fn submit(&mut self, ctx: &mut Ctx, j: usize, now: u64) -> Result<(), PeerError> {
        let dev = self.dev;
        let npk = self.urb.npk;
        let dur = npk as u64 * self.pkt_ns;
        let earliest = self.next_start.max(now + self.pkt_ns);
        let start = earliest.div_ceil(self.unit) * self.unit;
        self.next_start = start + dur;
        let mut urb = self.urb;
        urb.tag = self.slots[j].tag;
        urb.sched_frame = ctx.start_frame(dev, start);
        let pl = self.pkt_len;
        let out = self.out.clone();
        let descs = iso_packets(npk, pl, pl);
        let placed = ctx.submit_urb(dev, &mut urb, out.clone(), descs, Place::Given, now);
        let sl = &mut self.slots[j];
        sl.start = start;
        let Ok((outcome, _)) = placed else {
            // Refused; tried again when its frames would have ended.
            sl.outcome = Outcome::SubmitError;
            sl.due = start + dur;
            return Ok(());
        };
        sl.outcome = outcome;
        sl.inflight = true;
        sl.due = start + dur + ctx.rng.range(0, 60 * US);
        let lens = vec![pl; npk as usize];
        let p = peer(ctx, dev)?;
        let id = p.id();
        let line = submit_line_iso(id, &urb, out.as_deref(), &lens);
        let offered = p.tx.offer(line, ISO_BACKLOG)?;
        if offered {
            p.answers.lock_ok().drivers.insert(id);
        }
        let sl = &mut self.slots[j];
        sl.id = id;
        sl.offered = offered;
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

    /// The peer's answer to isochronous URB `j`, if it came (and it was
    /// offered the URB), checked against the URB.
    fn answer(&self, ctx: &Ctx, j: usize) -> Result<Option<Answer>, PeerError> {
        let sl = &self.slots[j];
        if !sl.offered {
            return Ok(None);
        }
        let Some(a) = take(peer(ctx, self.dev)?, sl.id) else {
            return Ok(None);
        };
        let mut urb = self.urb;
        urb.tag = sl.tag;
        check_iso(&a, &urb, self.pkt_len).map_err(PeerError::from)?;
        Ok(Some(a))
    }

    /// Isochronous URB `j` reaches the end of its frames: it completes
    /// with the peer's packets, or with every packet missed (-18) if the
    /// peer has not answered in time.
    fn complete(&mut self, ctx: &mut Ctx, j: usize, now: u64) -> Result<(), PeerError> {
        let dev = self.dev;
        let answer = self.answer(ctx, j)?;
        let (npk, pl, dir_in) = (self.urb.npk, self.pkt_len, self.urb.dir_in);
        let out = self.out.clone();
        let sl = &mut self.slots[j];
        sl.inflight = false;
        sl.due = now + ctx.rng.range(5 * US, 40 * US);
        let (tag, id, outcome, offered) = (sl.tag, sl.id, sl.outcome, sl.offered);
        let frame = ctx.start_frame(dev, sl.start);
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
            Some(st) if offered => give_up(ctx, dev, id, st),
            _ => Ok(()),
        }
    }

    /// Submit or complete the isochronous URBs that are due; returns when
    /// one is due next, None once the driver is unbound.
    fn run(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, PeerError> {
        // Unbound (a program detached the driver, which killed its URBs):
        // the peer is told of those it got, with -2 if the driver unbinds
        // softly, else -108; their tags are free.
        if ctx.unbound(self.dev, self.owner) {
            let soft = ctx
                .dev(self.dev)
                .is_some_and(|x| super::soft_unbind(x, self.intf));
            let status = if soft { ENOENT } else { ESHUTDOWN };
            let size = iso_urb_size(self.urb.npk);
            for j in 0..self.slots.len() {
                let sl = &self.slots[j];
                if sl.inflight && sl.offered {
                    give_up(ctx, self.dev, sl.id, status)?;
                }
                ctx.tags.free(self.slots[j].tag, size);
            }
            return Ok(None);
        }
        let mut next: Option<u64> = None;
        for j in 0..self.slots.len() {
            let sl = &self.slots[j];
            if now >= sl.due {
                if sl.inflight {
                    self.complete(ctx, j, now)?;
                } else {
                    self.submit(ctx, j, now)?;
                }
            }
            let due = self.slots[j].due;
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        Ok(next)
    }
}

impl Task for IsoEp {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        super::peer_urb::step(ctx, self.dev, now, |ctx| self.run(ctx, now))
    }
}
