//! Isochronous audio OUT and video IN streams.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbmon::event::{IsoDesc, URB_ISO_ASAP};

use super::super::ctx::*;
use super::super::descriptors;

struct Slot {
    tag: u64,
    due: u64,
    start: u64,
    outcome: Outcome,
    out: Option<Arc<[u8]>>,
}

/// An isochronous stream: audio OUT or video IN, several URBs queued,
/// each resubmitted as soon as it completes.
pub(crate) struct IsoTask {
    dev: DevId,
    urb: Urb,
    npk: u32,
    pkt_len: u32,
    pkt_ns: u64,
    slots: Vec<Slot>,
    inited: usize,
    queue: VecDeque<usize>,
    resubmit: Option<usize>,
    next_start: u64,
    video: bool,
    sample: u32,
    fid: u8,
    remaining: u32,
    next_frame: u64,
    frame_first: bool,
    pts: u32,
}

impl IsoTask {
    pub(crate) fn new(ctx: &mut Ctx, d: DevId, at: u64) -> Option<IsoTask> {
        let dev = ctx.dev(d)?;
        let video = dev.kind == Kind::Dev(DeviceKind::Webcam);
        let addr = if video { 0x81 } else { 0x01 };
        let ep = dev.desc.cfg.endpoint(addr)?.clone();
        let speed = dev.speed();
        let (npk, nurbs) = if video { (32, 3) } else { (4, 2) };
        let pkt_len = ep.mps as u32 & 0x7ff;
        let pkt_ns = descriptors::urb_interval(speed, &ep).max(1) as u64
            * descriptors::interval_unit_ns(speed);
        let size = iso_urb_size(npk);
        let slots = (0..nurbs)
            .map(|_| Slot {
                tag: ctx.tags.alloc(&mut ctx.rng, size),
                due: 0,
                start: 0,
                outcome: Outcome::Ok,
                out: None,
            })
            .collect();
        let flags = URB_ISO_ASAP | URB_NO_TRANSFER_DMA_MAP;
        let mut urb = ctx.data_urb(d, addr, npk * pkt_len, flags, 0);
        urb.npk = npk;
        Some(IsoTask {
            dev: d,
            urb,
            npk,
            pkt_len,
            pkt_ns,
            slots,
            inited: 0,
            queue: VecDeque::new(),
            resubmit: None,
            next_start: at + MS,
            video,
            sample: 0,
            fid: 0,
            remaining: 0,
            next_frame: at + MS,
            frame_first: false,
            pts: 0,
        })
    }

    fn audio_buffer(&mut self) -> Vec<u8> {
        let n = (self.npk * self.pkt_len) as usize;
        let mut v = Vec::with_capacity(n);
        while v.len() + 4 <= n {
            // A 250 Hz triangle wave, both channels.
            let ph = (self.sample % 192) as i32;
            let s = ((if ph < 96 { ph } else { 192 - ph }) - 48) * 600;
            let b = (s as i16).to_le_bytes();
            v.extend_from_slice(&[b[0], b[1], b[0], b[1]]);
            self.sample = self.sample.wrapping_add(1);
        }
        v.resize(n, 0);
        v
    }

    fn video_buffer(&mut self, ctx: &mut Ctx, start: u64) -> (Vec<u8>, Vec<u32>) {
        let pl = self.pkt_len as usize;
        let mut buf = vec![0u8; self.npk as usize * pl];
        let mut lens = Vec::with_capacity(self.npk as usize);
        for i in 0..self.npk as usize {
            let t = start + i as u64 * self.pkt_ns;
            if self.remaining == 0 && t >= self.next_frame {
                self.fid ^= 1;
                self.remaining = ctx.rng.range(12_000, 30_000) as u32;
                self.next_frame += 33_333_333;
                self.pts = self.pts.wrapping_add(1_000_000);
                self.frame_first = true;
            }
            let pkt = &mut buf[i * pl..(i + 1) * pl];
            let len = if self.remaining > 0 {
                let n = (self.remaining as usize).min(pl - 12);
                self.remaining -= n as u32;
                let eof = self.remaining == 0;
                pkt[0] = 12;
                pkt[1] = 0x8c | self.fid | if eof { 0x02 } else { 0 };
                pkt[2..6].copy_from_slice(&self.pts.to_le_bytes());
                let stc = ((t / 1000) as u32).wrapping_mul(48);
                pkt[6..10].copy_from_slice(&stc.to_le_bytes());
                pkt[10..12].copy_from_slice(&(((t / MS) & 0x7ff) as u16).to_le_bytes());
                ctx.rng.fill(&mut pkt[12..12 + n]);
                if self.frame_first {
                    pkt[12..16].copy_from_slice(&[0xff, 0xd8, 0xff, 0xdb]);
                    self.frame_first = false;
                }
                if eof {
                    pkt[12 + n - 2] = 0xff;
                    pkt[12 + n - 1] = 0xd9;
                }
                12 + n
            } else if ctx.rng.chance(0.5) {
                pkt[0] = 12;
                pkt[1] = 0x80 | self.fid;
                12
            } else {
                0
            };
            lens.push(len as u32);
        }
        (buf, lens)
    }

    fn submit(&mut self, ctx: &mut Ctx, idx: usize, now: u64) {
        let mut outcome = ctx.take_error(self.dev);
        if outcome == Outcome::Stall {
            outcome = Outcome::Proto(EPROTO); // isochronous endpoints do not stall
        }
        let dur = self.npk as u64 * self.pkt_ns;
        let start = self.next_start.max(now + self.pkt_ns);
        self.next_start = start + dur;
        let mut urb = self.urb;
        urb.tag = self.slots[idx].tag;
        let out = if outcome == Outcome::SubmitError {
            // The submission fails; the slot is retried when its turn would
            // have ended.
            ctx.submit_error(self.dev, urb, now, EXDEV);
            None
        } else {
            let iso = (0..self.npk)
                .map(|i| IsoDesc {
                    status: EXDEV,
                    offset: i * self.pkt_len,
                    length: self.pkt_len,
                })
                .collect();
            let data: Arc<[u8]> = if self.video {
                ctx.empty.clone()
            } else {
                Arc::from(self.audio_buffer())
            };
            ctx.submit(self.dev, urb, now, Some(data.clone()), iso);
            if self.video {
                None
            } else {
                Some(data)
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
        let frame = ((start / MS) & 0x7ff) as i32;
        let pl = self.pkt_len;
        match outcome {
            Outcome::SubmitError => {}
            Outcome::Unlink => {
                let iso = (0..self.npk)
                    .map(|i| IsoDesc {
                        status: EXDEV,
                        offset: i * pl,
                        length: 0,
                    })
                    .collect();
                ctx.complete(self.dev, tag, now, ENOENT, 0, None, iso, frame, 0);
            }
            Outcome::Ok | Outcome::Proto(_) | Outcome::Stall => {
                let (data, mut lens) = if self.video {
                    let (b, l) = self.video_buffer(ctx, start);
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
