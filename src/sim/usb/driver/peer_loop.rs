//! The drivers' data loops on a device answered by a peer process (an
//! external device, `device::external`): one URB kept submitted on every
//! interrupt and bulk IN endpoint of the interfaces a driver binds
//! ([`super::polled`]), and what the device's `endpoints:` entries add
//! (OUT data, a pause between URBs, libusb's timeout, endpoints of other
//! settings). Each URB goes on the bus through [`Ctx::submit_urb`] and to
//! the peer through the channel programs' URBs take
//! ([`ProgramPeer`]): a `submit` line, its answer collected in
//! [`PeerAnswers`] and taken at the endpoint's next poll, so that
//! interrupt URBs complete on their bInterval grid; a URB the driver gives
//! up on is `unlink`ed. The isochronous entries' streams are
//! [`super::peer_iso`]'s. A peer that answers garbage or stops reading
//! ends as an unplug of the device ([`Ctx::peer_gone`]).

use std::sync::Arc;

use crate::config::{DeviceConfig, EndpointConfig};
use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::{self, EpDesc};
use crate::sim::usb::peer::PeerError;

use super::generic::resolve;
use super::int_in::usbhid_retry;
use super::peer_iso::IsoEp;
use super::peer_urb::{answer, give_up, send};
use super::recovery::{clear_halt, run_recovery};

/// usb_control_msg's timeout (USB_CTRL_GET_TIMEOUT): then the URB is killed.
pub(crate) const CTRL_TIMEOUT: u64 = 5000 * MS;
/// Largest transfer a driver submits on a data endpoint, bytes.
const MAX_DATA: u32 = 16384;
/// How often a bulk URB, or a control request to the peer, looks for its
/// answer.
const POLL: u64 = MS;

/// The device's control request timeout (`ctrl_timeout_ms`), ns.
pub(crate) fn ctrl_timeout(cfg: Option<&DeviceConfig>) -> u64 {
    cfg.and_then(|c| c.ctrl_timeout_ms)
        .map_or(CTRL_TIMEOUT, |t| t.0 as u64 * MS)
}

/// Start the data loops of device `d` (of the interfaces `only`, or of
/// all) from `now`: one on every interrupt and bulk IN endpoint of the
/// configuration's settings 0 of the interfaces a driver binds that
/// `endpoints:` does not list, and one for each `endpoints:` entry (an
/// isochronous one's a stream, [`IsoEp`]), not on the interfaces in
/// `failed`, whose SET_INTERFACE failed. Returns how many it started.
pub(crate) fn start(
    ctx: &mut Ctx,
    d: DevId,
    now: u64,
    only: Option<&[u8]>,
    failed: &[u8],
) -> usize {
    let Some(dev) = ctx.dev(d) else {
        return 0;
    };
    let mine = |num: u8| only.is_none_or(|o| o.contains(&num));
    let speed = dev.speed();
    let hid = dev.desc.cfg.alts.iter().any(|a| a.alt == 0 && a.class == 3);
    let remote = dev.remote_ep0;
    let ctrl_timeout = ctrl_timeout(dev.cfg.as_ref());
    let class_tag = dev.class_tag;
    let entries: Vec<EndpointConfig> = dev.cfg.iter().flat_map(|c| c.endpoints.clone()).collect();
    let mut plain: Vec<(u8, EpDesc, Option<EndpointConfig>)> = dev
        .desc
        .cfg
        .alts
        .iter()
        .filter(|a| a.alt == 0 && mine(a.num) && super::polled(dev, a.num))
        .flat_map(|a| a.eps.iter().map(|e| (a.num, e)))
        .filter(|(_, e)| e.dir_in() && matches!(e.xfer_type(), 2 | 3))
        .filter(|(_, e)| !entries.iter().any(|x| x.ep.0 == e.addr))
        .map(|(num, e)| (num, e.clone(), None))
        .collect();
    let mut isos = vec![];
    for x in &entries {
        let Some((num, _, e)) = resolve(dev, x) else {
            tracing::warn!(
                "usb {}: endpoint {:#04x} is not in the device's configuration: left idle",
                ctx.dev_name(d),
                x.ep.0
            );
            continue;
        };
        if failed.contains(&num) || !mine(num) {
            continue;
        }
        if e.xfer_type() == 1 {
            isos.push((num, e, x.clone()));
        } else {
            plain.push((num, e, Some(x.clone())));
        }
    }
    let n = plain.len() + isos.len();
    for (intf, e, x) in plain {
        let unit = if e.xfer_type() == 3 {
            descriptors::urb_interval(speed, &e).max(1) as u64
                * descriptors::interval_unit_ns(speed)
        } else {
            POLL
        };
        let x = x.as_ref();
        let out: Option<Arc<[u8]>> = x.and_then(|x| x.data.as_ref()).map(|d| Arc::from(&d.0[..]));
        let len = match (&out, x.and_then(|x| x.length)) {
            (Some(b), _) => b.len() as u32,
            (None, Some(l)) => l.min(MAX_DATA),
            (None, None) => ((e.mps & 0x7ff) as u32).clamp(1, MAX_DATA),
        };
        let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let flags = if hid && x.is_none() {
            URB_NO_TRANSFER_DMA_MAP
        } else {
            0
        };
        let mut urb = ctx.data_urb(d, e.addr, len, flags, tag);
        if e.xfer_type() == 3 {
            urb.interval = descriptors::urb_interval(speed, &e);
        }
        let owner = ctx.interface_owner(d, intf);
        let usbhid = x.is_none()
            && ctx
                .dev(d)
                .is_some_and(|x| super::bound(x, intf) == Some(super::usbhid::NAME));
        let t = PeerLoop {
            dev: d,
            intf,
            usbhid,
            owner,
            urb,
            id: 0,
            inflight: false,
            unit,
            due: now,
            outcome: Outcome::Ok,
            out,
            every: x.and_then(|x| x.every_ms).unwrap_or(0) as u64 * MS,
            timeout: x.and_then(|x| x.timeout_ms).map(|t| t as u64 * MS),
            deadline: 0,
            runner: Runner::default(),
            class_tag,
            remote,
            ctrl_timeout,
            halt: None,
            halt_next: false,
            ended: false,
        };
        ctx.spawn(now, Box::new(t));
    }
    for (num, e, x) in isos {
        let t = IsoEp::new(ctx, d, (num, e), &x, speed, now);
        ctx.spawn(now, Box::new(t));
    }
    n
}

/// A clear-halt the driver sent the peer (`ep0: peer`), in flight.
struct Halt {
    id: u64,
    urb: Urb,
    deadline: u64,
}

/// A bulk or interrupt endpoint of a peer-answered device that a driver
/// keeps a URB submitted on, until the driver is unbound from its
/// interface.
struct PeerLoop {
    dev: DevId,
    /// Its interface.
    intf: u8,
    /// usbhid's interrupt IN URB, which ends as hid_irq_in ends it
    /// ([`PeerLoop::after_fault`]).
    usbhid: bool,
    /// The driver's binding when the loop began.
    owner: Option<Owner>,
    urb: Urb,
    /// The peer's id of the URB in flight.
    id: u64,
    inflight: bool,
    /// Time between polls of the endpoint (its interval; bulk: [`POLL`]).
    unit: u64,
    /// When the URB is submitted next, or polled next while in flight.
    due: u64,
    outcome: Outcome,
    /// OUT: the data each URB carries.
    out: Option<Arc<[u8]>>,
    /// From a completion to the next submission (0: at once).
    every: u64,
    /// libusb's timeout: then the URB is discarded (-104).
    timeout: Option<u64>,
    /// When the URB in flight times out.
    deadline: u64,
    /// The clear-halt after a stall, answered by monfs.
    runner: Runner,
    class_tag: u64,
    /// `ep0: peer`: the clear-halt goes to the peer.
    remote: bool,
    /// usb_control_msg's timeout, ns.
    ctrl_timeout: u64,
    /// The peer's clear-halt in flight.
    halt: Option<Halt>,
    /// The peer's clear-halt is sent at the next step (after a stall).
    halt_next: bool,
    /// The driver was unbound: the loop ends once its clear-halt in
    /// flight is done.
    ended: bool,
}

impl PeerLoop {
    /// The endpoint's address.
    fn addr(&self) -> u8 {
        self.urb.ep | if self.urb.dir_in { 0x80 } else { 0 }
    }

    /// CLEAR_FEATURE(ENDPOINT_HALT) after a stall: the peer's with
    /// `ep0: peer` (sent at the loop's next step, beside the URB's
    /// resubmission), else answered by monfs (before the resubmission).
    fn halt(&mut self) {
        if self.remote {
            self.halt_next = true;
        } else {
            let (dev, ep) = (self.dev, self.addr());
            self.runner.q.push_back(clear_halt(dev, ep, self.class_tag));
        }
    }

    /// The peer's clear-halt: sent, or polled for its answer until
    /// usb_control_msg's timeout. Some(next poll) while it is in flight.
    fn step_halt(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, PeerError> {
        let dev = self.dev;
        if let Some(h) = &self.halt {
            if let Some(a) = answer(ctx, dev, h.id, &h.urb)? {
                let tag = h.urb.tag;
                self.halt = None;
                ctx.complete(dev, tag, now, a.status, a.actual, None, vec![], 0, 0);
                return Ok(None);
            }
            if now >= h.deadline {
                // usb_control_msg timed out and killed the URB.
                let (id, tag) = (h.id, h.urb.tag);
                self.halt = None;
                ctx.complete(dev, tag, now, ENOENT, 0, None, vec![], 0, 0);
                give_up(ctx, dev, id, ENOENT)?;
                return Ok(None);
            }
            return Ok(Some((now + POLL).min(h.deadline)));
        }
        if self.halt_next {
            self.halt_next = false;
            let s = setup(0x02, 0x01, 0, self.addr() as u16, 0);
            let mut urb = Urb::control(self.class_tag, s);
            // On ep0, which takes no injected fault: it goes on the bus.
            let _ = ctx.submit_urb(dev, &mut urb, None, vec![], Place::Given, now);
            let id = send(ctx, dev, &urb, None)?;
            self.halt = Some(Halt {
                id,
                urb,
                deadline: now + self.ctrl_timeout,
            });
            return Ok(Some(now + POLL));
        }
        Ok(None)
    }

    /// The endpoint's URB and the peer's clear-halt after a stall, which
    /// runs beside it; returns when to run next, None once the loop ends.
    fn run(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, PeerError> {
        // Unbound (a program detached the driver, which killed its URB):
        // the peer is told, with -2 if the driver unbinds softly, else
        // -108; the driver is gone, its URB freed, and so is this loop
        // once its clear-halt in flight is done (one still to send is
        // not sent).
        if !self.ended && ctx.unbound(self.dev, self.owner) {
            if self.inflight {
                let soft = ctx
                    .dev(self.dev)
                    .is_some_and(|x| super::soft_unbind(x, self.intf));
                let status = if soft { ENOENT } else { ESHUTDOWN };
                give_up(ctx, self.dev, self.id, status)?;
            }
            ctx.tags.free(self.urb.tag, URB_SIZE);
            self.ended = true;
            self.halt_next = false;
        }
        let h = self.step_halt(ctx, now)?;
        if self.ended {
            return Ok(h);
        }
        let e = self.run_ep(ctx, now)?;
        Ok(Some(h.map_or(e, |h| h.min(e))))
    }

    /// When the URB goes again after an injected fault ended it: usbhid's
    /// as hid_irq_in has it ([`usbhid_retry`]: after an unlink not at all,
    /// the loop ends and the device's input with it), another driver's a
    /// moment later.
    fn after_fault(&mut self, ctx: &mut Ctx, now: u64, again: u64) -> u64 {
        if !self.usbhid {
            return now + ctx.rng.range(MS, 3 * MS).max(again);
        }
        match usbhid_retry(ctx, self.outcome, |_| again) {
            Some(t) => now + t,
            None => {
                ctx.tags.free(self.urb.tag, URB_SIZE);
                self.ended = true;
                now
            }
        }
    }

    /// Submit the URB, or look at it in flight; returns when to run next.
    fn run_ep(&mut self, ctx: &mut Ctx, now: u64) -> Result<u64, PeerError> {
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Ok(t);
        }
        if now < self.due {
            return Ok(self.due);
        }
        let dev = self.dev;
        if !self.inflight {
            let out = self.out.clone();
            let placed = ctx.submit_urb(dev, &mut self.urb, out, vec![], Place::Given, now);
            let Ok((outcome, _)) = placed else {
                self.outcome = Outcome::SubmitError;
                self.due = now + ctx.rng.range(10 * MS, 20 * MS);
                return Ok(self.due);
            };
            self.outcome = outcome;
            self.id = send(ctx, dev, &self.urb, self.out.as_deref())?;
            self.inflight = true;
            let polls = if outcome == Outcome::Ok {
                1
            } else {
                ctx.rng.range(1, 4)
            };
            self.due = now + polls * self.unit;
            if let Some(t) = self.timeout {
                self.deadline = now + t;
                self.due = self.due.min(self.deadline);
            }
            return Ok(self.due);
        }
        let (tag, id) = (self.urb.tag, self.id);
        let again = if self.every > 0 {
            self.every
        } else {
            ctx.rng.range(8 * US, 40 * US)
        };
        if self.outcome != Outcome::Ok {
            // An injected fault ends the URB; the peer forgets it.
            let st = self.outcome.status();
            self.inflight = false;
            ctx.complete(dev, tag, now, st, 0, None, vec![], 0, 0);
            if self.outcome == Outcome::Stall {
                self.halt();
            }
            give_up(ctx, dev, id, st)?;
            self.due = self.after_fault(ctx, now, again);
        } else if let Some(a) = answer(ctx, dev, id, &self.urb)? {
            self.inflight = false;
            let data: Option<Arc<[u8]>> = (!a.data.is_empty()).then(|| Arc::from(a.data));
            ctx.complete(
                dev,
                tag,
                now,
                a.status,
                a.actual,
                data.clone(),
                vec![],
                0,
                0,
            );
            if let (0, Some(d), true) = (a.status, &data, self.urb.dir_in) {
                // The interrupt IN report usbhid hands the HID core.
                ctx.driver_input(dev, self.urb.ep | 0x80, d, a.actual);
            }
            if a.status == EPIPE {
                self.halt();
            }
            self.due = now + again;
        } else if self.timeout.is_some() && now >= self.deadline {
            // libusb's timeout: the URB is discarded (usb_unlink_urb).
            self.inflight = false;
            ctx.complete(dev, tag, now, ECONNRESET, 0, None, vec![], 0, 0);
            self.due = now + again;
            give_up(ctx, dev, id, ECONNRESET)?;
        } else {
            // Nothing yet (NAK): poll again next interval.
            let k = (now - self.due) / self.unit + 1;
            self.due += k * self.unit;
            if self.timeout.is_some() {
                self.due = self.due.min(self.deadline);
            }
        }
        Ok(self.due)
    }
}

impl Task for PeerLoop {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        super::peer_urb::step(ctx, self.dev, now, |ctx| self.run(ctx, now))
    }
}
