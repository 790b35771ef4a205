//! The host controller's side of an endpoint, as an HCD keeps it
//! (`usb_hcd_link_urb_to_ep` and `usb_hcd_giveback_urb` in the kernel's
//! `drivers/usb/core/hcd.c`, the schedules of `ehci-sched.c` and
//! `xhci-ring.c`):
//! * **One ordered queue per endpoint.** A device's URBs in flight are kept
//!   in submission order ([`super::Device::inflight`]); an endpoint's queue is
//!   the URBs of that endpoint in that list. Whoever answers a URB (a device
//!   model, a peer, a capture, the generic answerer) may have its answer
//!   ready before an earlier URB of the same endpoint has its own: the answer
//!   is then held ([`Held`]) and the URB is given back right after the ones
//!   before it, as a controller that serves only an endpoint's head does. An
//!   unlinked URB (-2, -104, -108) is given back at once and leaves the
//!   others' order as it was.
//! * **Time on the bus.** [`super::Sched`] keeps when each endpoint of a device is
//!   next free, and [`Ctx::async_free`] when the bus's asynchronous schedule
//!   (control and bulk) is: a bulk URB takes the time its bytes take on a bus
//!   of its speed, one after another, in what the periodic schedule leaves
//!   of each (micro)frame ([`Ctx::periodic_share`]: the controller serves
//!   isochronous and interrupt endpoints first, USB 2.0 5.6.4 and 5.7.4);
//!   a control transfer takes its setup packet's and data's time there
//!   too; an interrupt URB is served at its
//!   endpoint's next poll; an isochronous URB takes one packet per interval
//!   from its endpoint's next free (micro)frame (`URB_ISO_ASAP`) and completes
//!   at the end of its last one.

use std::sync::Arc;

use crate::config::Controller;
use crate::usbmon::event::{IsoDesc, XferType, URB_ISO_ASAP};

use super::{Ctx, DevId, Held, Outcome, Urb, ENODEV, ENOENT, EPROTO, ESHUTDOWN, EXDEV, MS, US};
use crate::sim::usb::descriptors::Speed;

/// -ECONNRESET: an asynchronous unlink.
pub(crate) const ECONNRESET: i32 = -104;

/// The queue an URB is on: its endpoint's address with the direction bit,
/// 0 for the control endpoint (one queue for both directions).
pub(crate) fn ep_key(u: &Urb) -> u8 {
    if u.xfer == XferType::Control {
        0
    } else {
        u.ep | if u.dir_in { 0x80 } else { 0 }
    }
}

/// Whether a completion status is an unlink's, given back at once rather
/// than in the endpoint's order.
pub(crate) fn is_unlink(status: i32) -> bool {
    matches!(status, ENOENT | ECONNRESET | ESHUTDOWN)
}

/// The bytes of bulk payload one (micro)frame carries at `speed`, and the
/// (micro)frame's length in ns: 13 packets of 512 bytes a 125 µs
/// microframe at high speed, 19 of 64 a 1 ms frame at full speed (USB 2.0
/// 5.8.4); a low-speed bus (no bulk) carries about 187 bytes a
/// millisecond.
fn bulk_per_frame(speed: Speed) -> (u64, u64) {
    match speed {
        Speed::High => (13 * 512, 125_000),
        Speed::Full => (19 * 64, MS),
        Speed::Low => (187, MS),
    }
}

/// The bus time `len` bytes of bulk or control data take at `speed`, ns.
pub(crate) fn bulk_ns(speed: Speed, len: u32) -> u64 {
    let (bytes, frame) = bulk_per_frame(speed);
    (len as u64 * frame).div_ceil(bytes)
}

/// The most of a (micro)frame the periodic schedule may take, in
/// millionths: 80% (USB 2.0 5.6.4, 5.7.4); control and bulk keep the rest.
const PERIODIC_MAX: u64 = 800_000;

/// Which part of the bus a device's transfers take time on: the
/// high-speed wire (0) or the full- and low-speed one (1: a full-speed
/// bus, or the transaction translator of the hub a full- or low-speed
/// device hangs off).
fn segment(speed: Speed) -> usize {
    usize::from(speed != Speed::High)
}

/// The first multiple of `per` after `t`.
pub(crate) fn next_slot(t: u64, per: u64) -> u64 {
    let per = per.max(1);
    (t / per + 1) * per
}

impl Ctx {
    /// usb_submit_urb (`drivers/usb/core/urb.c` and the HCD's enqueue in
    /// `hcd.c`): the one way a URB of a program (through usbfs) or of a
    /// host driver reaches device `dev`'s endpoint. `out` is an OUT URB's
    /// data, `iso` an isochronous URB's packets as submitted.
    ///
    /// A data URB takes the device's next injected fault ([`Ctx::take_error`];
    /// an unplugged device has none, its controller fails the transfer): a
    /// submit error is the URB's `E` event (-19, -18 for an isochronous URB)
    /// and `Err` with that status; an isochronous endpoint does not stall,
    /// a stall there is a protocol error. `place` says who puts an
    /// isochronous URB on its endpoint's schedule: the controller
    /// ([`Place::Hcd`], [`Ctx::iso_frames`]; EHCI refuses a URB whose every
    /// frame has passed, `Err(-18)` and its `E` event), or the submitter,
    /// which did already ([`Place::Given`]). Otherwise the URB joins its
    /// endpoint's queue with its `S` event, and `Ok` holds how it is to
    /// end and, for one the controller placed, where. No device: `Err(-19)`,
    /// no event.
    pub(crate) fn submit_urb(
        &mut self,
        dev: DevId,
        urb: &mut Urb,
        out: Option<Arc<[u8]>>,
        iso: Vec<IsoDesc>,
        place: Place,
        now: u64,
    ) -> Result<(Outcome, Option<IsoSlot>), i32> {
        let Some(d) = self.dev(dev) else {
            return Err(ENODEV);
        };
        let mut outcome = if urb.ep != 0 && !d.gone {
            self.take_error(dev)
        } else {
            Outcome::Ok
        };
        let is_iso = urb.xfer == XferType::Iso;
        if outcome == Outcome::SubmitError {
            let st = if is_iso { EXDEV } else { ENODEV };
            self.submit_error(dev, *urb, now, st);
            return Err(st);
        }
        if is_iso && outcome == Outcome::Stall {
            outcome = Outcome::Proto(EPROTO);
        }
        let slot = match (place, self.dev(dev).map(|d| d.period(urb))) {
            (Place::Hcd, Some((per, unit))) if is_iso => {
                let asap = urb.flags & URB_ISO_ASAP != 0;
                let key = ep_key(urb);
                match self.iso_frames(dev, key, (urb.npk, per, unit), asap, now) {
                    Ok(slot) => Some(slot),
                    Err(st) => {
                        tracing::debug!(
                            "usb {}: isochronous URB without URB_ISO_ASAP is late: {st}",
                            self.dev_name(dev)
                        );
                        self.submit_error(dev, *urb, now, st);
                        return Err(st);
                    }
                }
            }
            _ => None,
        };
        if let Some(s) = slot {
            urb.sched_frame = s.start_frame;
        }
        let data = urb.submit_data(self, &out);
        self.submit(dev, *urb, now, data, iso);
        Ok((outcome, slot))
    }

    /// Give back the in-flight URB at `pos` of `dev` with the answer `h`
    /// now if it heads its endpoint's queue, `h` is an unlink's or `ordered`
    /// is false (a kill); hold `h` otherwise. False: it was answered
    /// already.
    pub(super) fn complete_in_order(
        &mut self,
        dev: DevId,
        pos: usize,
        t: u64,
        h: Held,
        ordered: bool,
    ) -> bool {
        let Some(d) = self.dev_mut(dev) else {
            return false;
        };
        if d.held.iter().any(|x| x.tag == h.tag) {
            if !ordered {
                // Killed while its answer waited: the unlink wins.
                d.held.retain(|x| x.tag != h.tag);
            } else {
                return false;
            }
        }
        let key = ep_key(&d.inflight[pos]);
        let behind = d.inflight[..pos].iter().any(|u| ep_key(u) == key);
        if ordered && !is_unlink(h.status) && behind {
            d.held.push(h);
            return true;
        }
        self.give_back(dev, pos, t, h);
        self.release(dev, key, t);
        true
    }

    /// Give back, at `t`, the held answers now at the head of endpoint
    /// `key`'s queue.
    fn release(&mut self, dev: DevId, key: u8, t: u64) {
        loop {
            let Some(d) = self.dev_mut(dev) else {
                return;
            };
            if d.held.is_empty() {
                // The usual case, on every completion: nothing waits.
                return;
            }
            let Some(pos) = d.inflight.iter().position(|u| ep_key(u) == key) else {
                return;
            };
            let tag = d.inflight[pos].tag;
            let Some(k) = d.held.iter().position(|x| x.tag == tag) else {
                return;
            };
            let h = d.held.remove(k);
            self.give_back(dev, pos, t, h);
        }
    }

    /// The `start_frame` the kernel reports for an isochronous URB of `dev`
    /// whose first packet is in the (micro)frame starting at `ns` (realistic
    /// time): in microframes for a high-speed device, frames otherwise, as
    /// wide as the controller's counter (xHCI: 14 bits of MFINDEX, frames 11
    /// bits; EHCI: its 1024-frame list, 8192 microframes; OHCI: a 16-bit
    /// frame number; UHCI: its frame counter).
    pub(crate) fn start_frame(&self, dev: DevId, ns: u64) -> i32 {
        let high = self.dev(dev).is_some_and(|d| d.speed() == Speed::High);
        let (n, mask) = match (self.controller, high) {
            (Controller::Xhci, true) => (ns / 125_000, 0x3fff),
            (Controller::Xhci, false) => (ns / MS, 0x7ff),
            (Controller::Ehci, true) => (ns / 125_000, 0x1fff),
            (Controller::Ehci, false) => (ns / MS, 0x3ff),
            (Controller::Ohci, _) => (ns / MS, 0xffff),
            (Controller::Uhci, _) => (ns / MS, 0x7fff_ffff),
        };
        (n & mask) as i32
    }

    /// The share of `speed`'s segment of the bus that the periodic schedule
    /// takes now, in millionths: every isochronous or interrupt endpoint
    /// with URBs queued reserves its packets (wMaxPacketSize times its
    /// transactions) once an interval, as the HCDs reserve them
    /// (`ehci-sched.c`'s budget, xHCI's bandwidth check), up to 80%.
    /// Recomputed only after a periodic URB joined or left a queue.
    pub(crate) fn periodic_share(&mut self, speed: Speed) -> u64 {
        if self.periodic_dirty {
            let mut share = [0u64; 2];
            for (_, d) in self.devs.iter() {
                if d.gone {
                    continue;
                }
                let speed = d.speed();
                let mut seen: Vec<u8> = Vec::new();
                for u in d.inflight.iter().filter(|u| u.is_periodic()) {
                    let key = ep_key(u);
                    if seen.contains(&key) {
                        continue;
                    }
                    seen.push(key);
                    let bytes = d
                        .active_endpoint(key)
                        .map_or(u.len, |e| e.max_per_interval(speed));
                    let (per, _) = d.period(u);
                    share[segment(speed)] += bulk_ns(speed, bytes) * 1_000_000 / per;
                }
            }
            self.periodic = share.map(|s| s.min(PERIODIC_MAX));
            self.periodic_dirty = false;
        }
        self.periodic[segment(speed)]
    }

    /// The `start_frame` the kernel reports for an isochronous URB of `dev`
    /// submitted at `submitted` whose first packet the controller places
    /// in the (micro)frame starting at `start` (realistic time), packets
    /// `per` ns apart. xhci-hcd on a controller without Contiguous Frame
    /// ID capability (`xhci_queue_isoc_tx_prepare`) does not continue a
    /// stream's numbers: it reads MFINDEX at the submission and names the
    /// first interval boundary past it plus the controller's isochronous
    /// scheduling threshold (IST: 7 frames, qemu's) and 10 microframes,
    /// in frames for a full- or low-speed device, in microframes for a
    /// high-speed one; the controller still sends the packets right after
    /// the stream's last ones.
    pub(crate) fn reported_start_frame(
        &self,
        dev: DevId,
        start: u64,
        submitted: u64,
        per: u64,
    ) -> i32 {
        if self.controller != Controller::Xhci || self.cfc {
            return self.start_frame(dev, start);
        }
        const IST_UFRAMES: u64 = 7 << 3;
        const CFC_DELAY: u64 = 10;
        let high = self.dev(dev).is_some_and(|d| d.speed() == Speed::High);
        let mf = (submitted / 125_000) & 0x3fff;
        let uf = (mf + IST_UFRAMES + CFC_DELAY).next_multiple_of(8);
        let per_uf = (per / 125_000).max(1);
        if high {
            uf.next_multiple_of(per_uf) as i32
        } else {
            (uf.next_multiple_of(per_uf) >> 3) as i32
        }
    }

    /// When a bulk URB of `len` bytes to `dev`, submitted at `now`, is done
    /// on the bus: once the asynchronous schedule is free (at once, after
    /// the controller's few microseconds, if it is idle), the time its
    /// bytes take at the device's speed in what the periodic schedule
    /// leaves of each (micro)frame.
    pub(crate) fn bulk_done(&mut self, dev: DevId, len: u32, now: u64) -> u64 {
        if self.dev(dev).is_none() {
            return now;
        }
        let ready = if self.async_free > now {
            self.async_free
        } else {
            let lat = self.rng.range(20 * US, 60 * US);
            now + self.delay(lat)
        };
        self.async_done(dev, len, ready)
    }

    /// When `len` bytes of `dev`'s control or bulk transfers, ready at
    /// `ready` (the device has its answer, the controller the transfer),
    /// are through the bus: once the asynchronous schedule is free, the
    /// time they take at the device's speed in what the periodic schedule
    /// leaves of each (micro)frame. A control transfer counts its setup
    /// packet's 8 bytes with its data.
    pub(crate) fn async_done(&mut self, dev: DevId, len: u32, ready: u64) -> u64 {
        let Some(speed) = self.dev(dev).map(|d| d.speed()) else {
            return ready;
        };
        let periodic = self.periodic_share(speed);
        let ns = bulk_ns(speed, len) * 1_000_000 / (1_000_000 - periodic);
        let done = self.async_free.max(ready) + self.delay(ns);
        self.async_free = done;
        done
    }

    /// When an interrupt URB on endpoint `key` of `dev`, polled every
    /// `per` ns, is served: the endpoint's first poll after `now` and after
    /// the URB before it.
    pub(crate) fn interrupt_slot(&mut self, dev: DevId, key: u8, per: u64, now: u64) -> u64 {
        let div = self.timing.divisor();
        let Some(d) = self.dev_mut(dev) else {
            return now;
        };
        let at = next_slot(now.saturating_mul(div).max(d.sched.free_at(key)), per);
        d.sched.busy_until(key, at);
        at / div
    }

    /// Where an isochronous URB of `npk` packets on endpoint `key` of
    /// `dev` goes, one packet every `per` ns of (micro)frames `unit` ns
    /// long, submitted at `now` (before it joins the endpoint's queue), as
    /// the kernel's HCDs place it. They ignore the caller's `start_frame`:
    /// * an endpoint with URBs still queued continues its stream right
    ///   after the last one, whether `URB_ISO_ASAP` is set or not;
    /// * unless the stream's next slot is already behind the controller
    ///   (less than a (micro)frame away): with `URB_ISO_ASAP` the URB starts
    ///   at the stream's first slot still ahead; without it, it keeps its
    ///   slot and the packets whose frames have passed are -EXDEV
    ///   ([`IsoSlot::late`]); EHCI refuses a URB whose every frame has
    ///   passed with -EXDEV (`Err`), the others give back all its packets
    ///   -EXDEV (OHCI) or put them ASAP (xHCI, whose frame ID falls outside
    ///   its window);
    /// * an endpoint with nothing queued starts a new stream at the first
    ///   interval a frame from now (and not before its last packet's
    ///   interval is over).
    ///
    /// In fast timing the bus runs a thousand times faster than any
    /// program, so a stream is never behind: it continues.
    pub(crate) fn iso_frames(
        &mut self,
        dev: DevId,
        key: u8,
        (npk, per, unit): (u32, u64, u64),
        asap: bool,
        now: u64,
    ) -> Result<IsoSlot, i32> {
        let div = self.timing.divisor();
        let now = now.saturating_mul(div);
        let controller = self.controller;
        let Some(d) = self.dev_mut(dev) else {
            return Ok(IsoSlot {
                start_frame: 0,
                end: now / div,
                late: 0,
            });
        };
        let queued = d.inflight.iter().any(|u| ep_key(u) == key);
        let free = d.sched.free_at(key);
        let ahead = now + unit;
        let (start, late) = if queued && (free >= ahead || div > 1) {
            (free, 0)
        } else if queued {
            let missed = (ahead - free).div_ceil(per.max(1));
            match (asap, controller) {
                (true, _) | (false, Controller::Xhci) => (free + missed * per, 0),
                (false, Controller::Ehci) if missed >= npk as u64 => return Err(EXDEV),
                (false, _) => (free, missed.min(npk as u64) as u32),
            }
        } else {
            (next_slot(now + MS, per).max(free), 0)
        };
        d.sched.busy_until(key, start + npk as u64 * per);
        let end = start + (npk.max(1) as u64 - 1) * per + unit;
        Ok(IsoSlot {
            start_frame: self.reported_start_frame(dev, start, now, per),
            end: end / div,
            late,
        })
    }
}

/// Who places an isochronous URB on its endpoint's schedule
/// ([`Ctx::submit_urb`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// The host controller, as the kernel's HCDs place it.
    Hcd,
    /// The submitter did already (a device model's own stream), or the
    /// URB is not isochronous.
    Given,
}

/// Where an isochronous URB is on its endpoint's schedule
/// ([`Ctx::iso_frames`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IsoSlot {
    /// The `start_frame` the kernel reports.
    pub start_frame: i32,
    /// When its last (micro)frame ends: when it is given back.
    pub end: u64,
    /// How many of its first packets had their frames pass before the
    /// URB reached the controller: each -EXDEV, nothing moved.
    pub late: u32,
}
