//! The isochronous stream snd-usb-audio and uvcvideo keep on their
//! streaming interface's endpoint (sound/usb/endpoint.c's data URBs,
//! drivers/media/usb/uvc/uvc_video.c's uvc_video_start_transfer): several
//! URBs queued, each resubmitted as soon as it completes, until the driver
//! is unbound. An OUT stream carries what the host plays; an IN stream's
//! packets are what the device's function sends
//! ([`InFunction::iso`](crate::sim::usb::ctx::InFunction::iso)).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors;
use crate::usbmon::event::{IsoDesc, URB_ISO_ASAP};

/// What a driver streams: on endpoint `addr` of device `d`, whose control
/// interface (the one the driver is bound to) is `control`, `nurbs` URBs
/// of `npk` packets each.
#[derive(Clone, Copy, Debug)]
pub(super) struct Stream {
    pub d: DevId,
    pub control: u8,
    pub addr: u8,
    pub npk: u32,
    pub nurbs: usize,
}

impl Stream {
    /// Start the stream at `at`: an IN stream reads the device's function,
    /// made now if the device has one and it is not there yet.
    pub(super) fn start(self, ctx: &mut Ctx, at: u64) {
        if let Some(t) = IsoTask::new(ctx, self, at) {
            if self.addr & 0x80 != 0 {
                (ctx.make_function)(ctx, self.d, at);
            }
            ctx.spawn(at, Box::new(t));
        }
    }
}

/// One URB of the stream.
struct Slot {
    tag: u64,
    due: u64,
    start: u64,
    outcome: Outcome,
    out: Option<Arc<[u8]>>,
}

/// An isochronous stream: several URBs queued, each resubmitted as soon
/// as it completes, until the driver is unbound from the control interface
/// or from the streaming one.
struct IsoTask {
    dev: DevId,
    /// The driver's bindings of the control interface and the streaming
    /// interface when the stream began.
    owners: [Option<Owner>; 2],
    urb: Urb,
    npk: u32,
    pkt_len: u32,
    pkt_ns: u64,
    slots: Vec<Slot>,
    inited: usize,
    queue: VecDeque<usize>,
    resubmit: Option<usize>,
    next_start: u64,
    /// An IN stream (the device's packets), else OUT (the host's).
    dir_in: bool,
    /// The next sample the host plays (an OUT stream).
    sample: u32,
}

impl IsoTask {
    fn new(ctx: &mut Ctx, s: Stream, at: u64) -> Option<IsoTask> {
        let (d, addr) = (s.d, s.addr);
        let dev = ctx.dev(d)?;
        let ep = dev.desc.cfg.endpoint(addr)?.clone();
        let speed = dev.speed();
        let pkt_len = ep.mps as u32 & 0x7ff;
        let pkt_ns = descriptors::urb_interval(speed, &ep).max(1) as u64
            * descriptors::interval_unit_ns(speed);
        let size = iso_urb_size(s.npk);
        let slots = (0..s.nurbs)
            .map(|_| Slot {
                tag: ctx.tags.alloc(&mut ctx.rng, size),
                due: 0,
                start: 0,
                outcome: Outcome::Ok,
                out: None,
            })
            .collect();
        let flags = URB_ISO_ASAP | URB_NO_TRANSFER_DMA_MAP;
        let mut urb = ctx.data_urb(d, addr, s.npk * pkt_len, flags, 0);
        urb.npk = s.npk;
        let owners = [ctx.interface_owner(d, s.control), ctx.owner(d, addr)];
        Some(IsoTask {
            dev: d,
            owners,
            urb,
            npk: s.npk,
            pkt_len,
            pkt_ns,
            slots,
            inited: 0,
            queue: VecDeque::new(),
            resubmit: None,
            next_start: at + MS,
            dir_in: addr & 0x80 != 0,
            sample: 0,
        })
    }

    /// What the host plays into an OUT URB: a 250 Hz triangle wave, both
    /// channels, 16-bit (the player's PCM data).
    fn audio_buffer(&mut self) -> Vec<u8> {
        let n = (self.npk * self.pkt_len) as usize;
        let mut v = Vec::with_capacity(n);
        while v.len() + 4 <= n {
            let ph = (self.sample % 192) as i32;
            let s = ((if ph < 96 { ph } else { 192 - ph }) - 48) * 600;
            let b = (s as i16).to_le_bytes();
            v.extend_from_slice(&[b[0], b[1], b[0], b[1]]);
            self.sample = self.sample.wrapping_add(1);
        }
        v.resize(n, 0);
        v
    }

    /// What the device sends in an IN URB whose first packet goes at
    /// `start`: its function's packets; none without a function.
    fn device_packets(&self, ctx: &mut Ctx, start: u64) -> (Vec<u8>, Vec<u32>) {
        let (npk, pl, pkt_ns) = (self.npk, self.pkt_len, self.pkt_ns);
        ctx.with_function(self.dev, |f, ctx| f.iso(ctx, start, npk, pl, pkt_ns))
            .flatten()
            .unwrap_or_else(|| (vec![0; (npk * pl) as usize], vec![0; npk as usize]))
    }

    fn submit(&mut self, ctx: &mut Ctx, idx: usize, now: u64) {
        let dur = self.npk as u64 * self.pkt_ns;
        let start = self.next_start.max(now + self.pkt_ns);
        self.next_start = start + dur;
        let mut urb = self.urb;
        urb.tag = self.slots[idx].tag;
        urb.sched_frame = ctx.start_frame(self.dev, start);
        let iso = iso_packets(self.npk, self.pkt_len, self.pkt_len);
        let sample = self.sample;
        let out = (!self.dir_in).then(|| Arc::from(self.audio_buffer()));
        let placed = ctx.submit_urb(self.dev, &mut urb, out.clone(), iso, Place::Given, now);
        let (outcome, out) = match placed {
            Ok((o, _)) => (o, out),
            // The submission fails (its samples were not sent); the slot is
            // retried when its turn would have ended.
            Err(_) => {
                self.sample = sample;
                (Outcome::SubmitError, None)
            }
        };
        let s = &mut self.slots[idx];
        s.outcome = outcome;
        s.start = start;
        s.due = start + dur + ctx.rng.range(0, 60 * US);
        s.out = out;
        self.queue.push_back(idx);
    }

    fn complete(&mut self, ctx: &mut Ctx, idx: usize, now: u64) {
        let (tag, start, outcome) = {
            let s = &self.slots[idx];
            (s.tag, s.start, s.outcome)
        };
        let frame = ctx.start_frame(self.dev, start);
        let pl = self.pkt_len;
        match outcome {
            Outcome::SubmitError => {}
            Outcome::Unlink => {
                let iso = iso_packets(self.npk, pl, 0);
                ctx.complete(self.dev, tag, now, ENOENT, 0, None, iso, frame, 0);
            }
            Outcome::Ok | Outcome::Proto(_) | Outcome::Stall => {
                let (data, mut lens) = if self.dir_in {
                    let (b, l) = self.device_packets(ctx, start);
                    (Some(Arc::from(b)), l)
                } else {
                    (self.slots[idx].out.take(), vec![pl; self.npk as usize])
                };
                let bad = if let Outcome::Proto(st) = outcome {
                    let b = ctx.rng.below(self.npk as u64) as usize;
                    lens[b] = 0;
                    Some((b, st))
                } else {
                    None
                };
                let iso: Vec<IsoDesc> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| IsoDesc {
                        status: match bad {
                            Some((b, st)) if b == i => st,
                            _ => 0,
                        },
                        offset: i as u32 * pl,
                        length: l,
                    })
                    .collect();
                let actual = lens.iter().sum();
                let errs = i32::from(bad.is_some());
                ctx.complete(self.dev, tag, now, 0, actual, data, iso, frame, errs);
            }
        }
    }
}

impl Task for IsoTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        // Unbound from either interface: the driver's disconnect (or the
        // core's, for the streaming interface) ended the URBs
        // (`driver::disconnect`), and the stream is over: the program
        // that played or watched it got an error and let go.
        if self.owners.iter().any(|o| ctx.unbound(self.dev, *o)) {
            let size = iso_urb_size(self.npk);
            for s in &self.slots {
                ctx.tags.free(s.tag, size);
            }
            return None;
        }
        if self.inited < self.slots.len() {
            let i = self.inited;
            self.inited += 1;
            self.submit(ctx, i, now);
            if self.inited < self.slots.len() {
                return Some(now + ctx.rng.range(3 * US, 12 * US));
            }
        } else if let Some(i) = self.resubmit.take() {
            self.submit(ctx, i, now);
        } else {
            let i = self.queue.pop_front()?;
            self.complete(ctx, i, now);
            self.resubmit = Some(i);
            return Some(now + ctx.rng.range(5 * US, 40 * US));
        }
        let front = *self.queue.front()?;
        Some(self.slots[front].due.max(now))
    }
}
