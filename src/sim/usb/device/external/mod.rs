//! A device answered by another process (`kind: external`). monfs plays the
//! host: the hub driver enumerates the device from its descriptor dump,
//! and the drivers that bind its interfaces submit the URBs: their probe
//! requests (usbhid's for HID interfaces, cdc_acm's...) and the settings
//! the `endpoints:` entries need, which this model's task sequences, then
//! the drivers' data loops ([`driver::peer_loop`]: one URB kept submitted
//! on every interrupt and bulk IN endpoint of the interfaces a driver
//! binds, and what the `endpoints:` entries add: OUT data, libusb
//! timeouts, other settings, isochronous URBs queued on (micro)frames).
//! A peer process plays the device ([`crate::sim::usb::peer`] runs it): it gets each URB on its standard input and answers
//! completions on its standard output, one line each (the protocol is in
//! docs/external-devices.md and [`crate::sim::usb::peer::protocol`]). The
//! task keeps the peer ([`link`]), answers ep0's standard requests from
//! the descriptors (all of ep0 is the peer's with `ep0: peer`), and hands
//! programs and the drivers' loops the peer's channel (`ProgramPeer`).
//!
//! An answer becomes a completion at the endpoint's next poll, so interrupt
//! URBs complete on their bInterval grid. A peer that exits, closes its
//! output, answers garbage or stops reading its input ends as an unplug of
//! the device (in-flight URBs -71, then -108), with a log line.

mod link;

use std::collections::VecDeque;
use std::sync::Arc;

use crate::base::sync::LockExt;

use crate::config::DeviceKind;
use crate::usbcore::device::ProbeAnswer;

use super::super::ctx::*;
use super::super::descriptors::{ClassDesc, Where};
use super::super::driver::generic::resolve;
use super::super::driver::{self, peer_loop, usbhid};
use super::super::peer::protocol::{check_answer, submit_line, Answer};
use super::super::peer::{AnswerError, PeerError};
use super::class::DeviceClass;
use link::{hello, Link};
use peer_loop::{ctrl_timeout, CTRL_TIMEOUT};

/// `kind: external` (its descriptors: its file's, as a dump's).
pub(crate) struct External;

impl DeviceClass for External {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::External]
    }
    fn descriptors(&self, _at: &Where<'_>) -> Option<ClassDesc> {
        None
    }
    // The external device's driver runs its own requests (their answers
    // come from the peer).
    fn class_ops(&self, _dev: &Device, d: DevId) -> Vec<Op> {
        vec![Op::StartStreams(d)]
    }
    fn plugged(&self, ctx: &mut Ctx, d: DevId) {
        probes_pending(ctx, d, None);
        link::link(ctx, d);
    }
    fn start(&self, ctx: &mut Ctx, d: DevId, now: u64, at: u64) {
        let t = ExternalTask::new(ctx, d, now);
        ctx.spawn(at, Box::new(t));
    }
    // usbhid's new probe reads the report descriptor anew: until it has,
    // the interface has no driver (and no HID device). The device's task
    // runs the probe and starts the endpoints
    // ([`ExternalTask::follow_bindings`]).
    fn rebind(&self, ctx: &mut Ctx, d: DevId, intf: u8, _now: u64) {
        if let Some(dev) = ctx.dev_mut(d) {
            dev.hid_probed.retain(|(i, _)| *i != intf);
        }
        probes_pending(ctx, d, Some(intf));
    }
}

/// How often a waiting control request looks for its answer.
const POLL: u64 = MS;
/// How often the task looks at its peer while the drivers' loops run
/// (they take their answers themselves).
const LOOK: u64 = 8 * MS;

/// A control request of the driver.
struct CtrlReq {
    setup: [u8; 8],
    out: Option<Arc<[u8]>>,
    /// The URB (usbhid's own for SET_REPORT); None: a fresh one.
    tag: Option<u64>,
    /// Its `transfer_flags` beyond URB_DIR_IN (`Op::Ctrl`'s).
    flags: u32,
    /// The last request of this interface's driver's probe: the driver
    /// is bound once it is done ([`Device::probe_pending`]), unless its
    /// answer leads the driver to more ([`driver::probe_more`]).
    ends_probe: Option<u8>,
    /// A request of this interface's driver's probe: its answer is kept
    /// ([`Device::probe_answers`]).
    probe_of: Option<u8>,
}

impl CtrlReq {
    /// A driver's probe request `op` (a control transfer, else None), the
    /// last of interface `ends_probe`'s probe or not, of interface
    /// `probe_of`'s probe or not.
    fn of_probe(op: Op, ends_probe: Option<u8>, probe_of: Option<u8>) -> Option<CtrlReq> {
        let Op::Ctrl {
            setup,
            out,
            tag,
            flags,
            ..
        } = op
        else {
            return None;
        };
        Some(CtrlReq {
            setup,
            out,
            tag,
            flags,
            ends_probe,
            probe_of,
        })
    }

    fn new(setup: [u8; 8], out: Option<Vec<u8>>, tag: Option<u64>) -> CtrlReq {
        CtrlReq {
            setup,
            out: out.map(Arc::from),
            tag,
            flags: 0,
            ends_probe: None,
            probe_of: None,
        }
    }
}

/// The interfaces of `dev` (`only`: that one) whose driver's probe sends
/// requests to the peer, other than usbhid's (whose probe is pending until
/// the report descriptor is read): they are not bound until those are
/// done.
fn probes_to_peer(dev: &Device, only: Option<u8>) -> Vec<u8> {
    let hid = usbhid::interfaces(dev);
    dev.desc
        .cfg
        .interface_numbers()
        .into_iter()
        .filter(|n| only.is_none_or(|o| o == *n) && !hid.iter().any(|h| h.num == *n))
        .filter(|n| {
            driver::attached(dev, *n)
                .is_some_and(|(drv, alt)| !drv.probe_ops(dev, 0, &alt).is_empty())
        })
        .collect()
}

/// Mark the probes of [`probes_to_peer`] pending (the answers an earlier
/// probe of the same interfaces got are dropped).
fn probes_pending(ctx: &mut Ctx, d: DevId, only: Option<u8>) {
    let Some(dev) = ctx.dev(d) else {
        return;
    };
    let pending = probes_to_peer(dev, only);
    if let Some(dev) = ctx.dev_mut(d) {
        dev.probe_answers
            .retain(|(n, _)| only.is_some_and(|o| o != *n));
        for n in pending {
            if !dev.probe_pending.contains(&n) {
                dev.probe_pending.push(n);
            }
        }
    }
}

/// The control request in flight.
struct CtrlCur {
    /// See [`CtrlReq::ends_probe`].
    ends_probe: Option<u8>,
    /// See [`CtrlReq::probe_of`].
    probe_of: Option<u8>,
    id: u64,
    urb: Urb,
    setup: [u8; 8],
    fresh: bool,
    deadline: u64,
    /// How it ends, once known.
    result: Option<CtrlResult>,
}

/// The generic driver of an external device and its peer.
struct ExternalTask {
    dev: DevId,
    name: String,
    /// The peer, and the URB ids it knows.
    link: Link,
    ctrl: VecDeque<CtrlReq>,
    cur: Option<CtrlCur>,
    /// Whether the drivers' data loops on the device's endpoints run
    /// ([`peer_loop`]): the task then looks at its peer every [`LOOK`].
    loops: bool,
    /// Interfaces whose SET_INTERFACE failed: their endpoints stay idle.
    failed: Vec<u8>,
    started: bool,
    /// `ep0: peer`: every control request goes to the peer.
    remote: bool,
    /// usb_control_msg's timeout, ns.
    ctrl_timeout: u64,
    /// Answers to programs' URBs (usbfs), which the core sends the peer.
    program: Arc<std::sync::Mutex<PeerAnswers>>,
    /// How often each interface lost its driver, as last seen.
    unbinds: [u32; MAX_INTERFACES],
    /// Interfaces whose driver a program detached: started again (probed,
    /// their endpoints submitted) when one attaches it again.
    away: Vec<u8>,
    /// Interfaces attached again, whose endpoints start when the probe's
    /// requests are done.
    restart: Vec<u8>,
}

/// Requests that go to the peer: class and vendor requests, and standard
/// ones to an interface or endpoint (a HID report descriptor); standard
/// device requests are answered from the descriptors.
fn to_peer(s: &[u8; 8]) -> bool {
    s[0] & 0x60 != 0 || s[0] & 0x1f != 0
}

/// usbhid's probe read (`Some`) or failed to read (`None`) the report
/// descriptor of the interface `s` (its GET_DESCRIPTOR) asked for: the
/// interface is bound with it now, or stays without a driver.
fn hid_probe_done(ctx: &mut Ctx, d: DevId, s: &[u8; 8], report: Option<&[u8]>) {
    if s[0] != 0x81 || s[1] != 0x06 || s[3] != 0x22 {
        return;
    }
    let num = s[4];
    let Some(dev) = ctx.dev_mut(d) else {
        return;
    };
    if dev.hid_probed.iter().any(|(i, _)| *i == num) {
        return;
    }
    dev.hid_probed
        .push((num, report.map(<[u8]>::to_vec).unwrap_or_default()));
    (ctx.changed)(ctx, d);
}

/// The last request of interface `ends`'s driver's probe is done: the
/// driver is bound (whatever the request's status: cdc_acm's probe goes
/// on when its SET_LINE_CODING fails).
fn probe_done(ctx: &mut Ctx, d: DevId, ends: Option<u8>) {
    let Some(n) = ends else {
        return;
    };
    if let Some(dev) = ctx.dev_mut(d) {
        dev.probe_pending.retain(|x| *x != n);
    }
    (ctx.changed)(ctx, d);
}

/// Keep the answer to a request of interface `of`'s driver's probe.
fn probe_answered(ctx: &mut Ctx, d: DevId, of: Option<u8>, answer: ProbeAnswer) {
    if let (Some(n), Some(dev)) = (of, ctx.dev_mut(d)) {
        dev.probe_answers.push((n, answer));
    }
}

impl ExternalTask {
    fn new(ctx: &mut Ctx, d: DevId, now: u64) -> ExternalTask {
        let mut t = ExternalTask {
            dev: d,
            name: String::new(),
            link: Link::gone(CTRL_TIMEOUT),
            ctrl: VecDeque::new(),
            cur: None,
            loops: false,
            failed: vec![],
            started: false,
            remote: false,
            ctrl_timeout: CTRL_TIMEOUT,
            program: Arc::default(),
            unbinds: [0; MAX_INTERFACES],
            away: vec![],
            restart: vec![],
        };
        let (_, name) = hello(ctx, d);
        t.name = name;
        let Some(dev) = ctx.dev(d) else {
            return t;
        };
        t.remote = dev.remote_ep0;
        t.ctrl_timeout = ctrl_timeout(dev.cfg.as_ref());
        t.unbinds = dev.core.unbinds;
        t.probe(dev, d, None);
        if t.remote {
            // The peer has answered the enumeration: take it over.
            let link = ctx
                .dev_mut(d)
                .and_then(|x| x.ep0.take())
                .and_then(|l| l.into_any().downcast::<Link>().ok());
            if let Some(l) = link {
                t.link = *l;
            }
        } else {
            t.link = Link::open(ctx, d);
        }
        // Programs' URBs (usbfs) reach the same peer.
        if let Some(p) = t.link.peer.as_ref() {
            if let (Some(tx), Some(x)) = (p.sender(), ctx.dev_mut(d)) {
                let take = p.taker();
                let program = t.program.clone();
                x.core.peer = Some(ProgramPeer {
                    tx,
                    answers: t.program.clone(),
                    poll: Box::new(move || {
                        let mut g = program.lock_ok();
                        if g.pending.is_empty() && g.drivers.is_empty() {
                            return;
                        }
                        let got = take(&mut |id| g.waits(id));
                        for a in got {
                            g.answer(a.id, (a.status, a.actual, a.data, a.pkts));
                        }
                    }),
                    ids: t.link.ids(),
                });
            }
        }
        let _ = now;
        t
    }

    /// Queue the drivers' probe requests (of interface `only`, or of all):
    /// usbhid's for each HID interface and the other bound drivers' (cdc_acm's),
    /// in interface order, then the settings the
    /// `endpoints:` entries need, selected as usb_set_interface does (a
    /// standard interface request: the peer's).
    fn probe(&mut self, dev: &Device, d: DevId, only: Option<u8>) {
        let mine = |num: u8| only.is_none_or(|o| o == num);
        let hid = usbhid::interfaces(dev);
        // (request, the probe it ends, the probe it is of)
        let mut ops: Vec<(Op, Option<u8>, Option<u8>)> = vec![];
        for num in dev
            .desc
            .cfg
            .interface_numbers()
            .into_iter()
            .filter(|n| mine(*n))
        {
            match hid.iter().find(|h| h.num == num) {
                // Its probe is what binds it: before, no driver attaches.
                Some(h) => ops.extend(
                    usbhid::probe_ops(dev, d, h)
                        .into_iter()
                        .map(|o| (o, None, None)),
                ),
                None => {
                    if let Some((drv, alt)) = driver::attached(dev, num) {
                        let theirs = drv.probe_ops(dev, d, &alt);
                        let last = theirs.len();
                        ops.extend(
                            theirs
                                .into_iter()
                                .enumerate()
                                .map(|(k, o)| (o, (k + 1 == last).then_some(num), Some(num))),
                        );
                    }
                }
            }
        }
        for (op, ends_probe, probe_of) in ops {
            if let Some(r) = CtrlReq::of_probe(op, ends_probe, probe_of) {
                self.ctrl.push_back(r);
            }
        }
        let mut alts: Vec<(u8, u8)> = vec![];
        for e in dev.cfg.iter().flat_map(|c| c.endpoints.iter()) {
            if let Some((num, alt, _)) = resolve(dev, e) {
                if alt != 0 && mine(num) && !alts.contains(&(num, alt)) {
                    alts.push((num, alt));
                }
            }
        }
        for (num, alt) in alts {
            let s = setup(0x01, 0x0b, alt as u16, num as u16, 0);
            self.ctrl.push_back(CtrlReq::new(s, None, None));
        }
    }

    /// Follow programs' detaches and attaches (usbfs): a driver detached
    /// since the last look has its data loops end themselves (the core
    /// killed their URBs; they tell the peer); one attached again probes
    /// again, and its loops start when the probe's requests are done.
    fn follow_bindings(&mut self, ctx: &mut Ctx) {
        let Some(dev) = ctx.dev(self.dev) else {
            return;
        };
        let (now_unbinds, detached) = (dev.core.unbinds, dev.core.detached.clone());
        for intf in 0..MAX_INTERFACES as u8 {
            if now_unbinds[intf as usize] == self.unbinds[intf as usize] {
                continue;
            }
            self.unbinds[intf as usize] = now_unbinds[intf as usize];
            self.restart.retain(|i| *i != intf);
            if !self.away.contains(&intf) {
                self.away.push(intf);
            }
        }
        let back: Vec<u8> = self
            .away
            .iter()
            .copied()
            .filter(|i| !detached.contains(i))
            .collect();
        for intf in back {
            self.away.retain(|i| *i != intf);
            let d = self.dev;
            let Some(dev) = ctx.dev_mut(d) else {
                break;
            };
            if let Some(a) = dev.alt.get_mut(intf as usize) {
                *a = 0;
            }
            self.failed.retain(|i| *i != intf);
            let dev = ctx.dev(d).expect("just seen");
            self.probe(dev, d, Some(intf));
            self.restart.push(intf);
        }
    }

    /// Start the drivers' data loops (of the interfaces `only`, or of
    /// all: [`peer_loop::start`]).
    fn start_eps(&mut self, ctx: &mut Ctx, now: u64, only: Option<&[u8]>) {
        let n = peer_loop::start(ctx, self.dev, now, only, &self.failed);
        self.loops |= n > 0;
    }

    /// Take the peer's answers; Err: the peer is done or misbehaved.
    fn drain(&mut self) -> Result<(), PeerError> {
        let (answers, end) = self.link.answers()?;
        for a in answers {
            self.accept(a)?;
        }
        match end {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn accept(&mut self, a: Answer) -> Result<(), PeerError> {
        let check = check_answer;
        if let Some(c) = self
            .cur
            .as_mut()
            .filter(|c| c.id == a.id && c.result.is_none())
        {
            check(&a, &c.urb)?;
            let data = if c.urb.dir_in {
                Some(Arc::from(a.data))
            } else {
                None
            };
            c.result = Some((a.status, a.actual, data));
            return Ok(());
        }
        if self.link.forgotten(a.id) {
            return Ok(());
        }
        {
            let mut g = self.program.lock_ok();
            if g.waits(a.id) {
                // A program's URB, or a driver's (checked when its loop
                // takes it).
                g.answer(a.id, (a.status, a.actual, a.data, a.pkts));
                return Ok(());
            }
            if g.driver_answered(a.id) {
                return Err(AnswerError::Twice(a.id).into());
            }
            // A late answer to a URB the program discarded.
            if g.was_discarded(a.id) {
                return Ok(());
            }
        }
        Err(AnswerError::NotInFlight(a.id).into())
    }

    /// The control phase; Some(next) while it runs.
    fn step_ctrl(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, PeerError> {
        let dev = self.dev;
        if let Some(c) = &mut self.cur {
            if let Some((status, actual, data)) = c.result.take() {
                let (actual, data) = if status == 0 || actual > 0 {
                    (actual, data)
                } else {
                    (0, None)
                };
                ctx.complete(
                    dev,
                    c.urb.tag,
                    now,
                    status,
                    actual,
                    data.clone(),
                    vec![],
                    0,
                    0,
                );
                if c.fresh {
                    ctx.tags.free(c.urb.tag, URB_SIZE);
                }
                let (s, ends, of) = (c.setup, c.ends_probe, c.probe_of);
                self.cur = None;
                self.set_interface_done(ctx, &s, status);
                let n = (actual as usize).min(data.as_ref().map_or(0, |d| d.len()));
                let answer = ProbeAnswer {
                    setup: s,
                    status,
                    data: match (&data, s[0] & 0x80 != 0) {
                        (Some(d), true) => d[..n].to_vec(),
                        _ => Vec::new(),
                    },
                };
                probe_answered(ctx, dev, of, answer);
                self.probe_next(ctx, ends);
                let got = data.filter(|_| status == 0);
                hid_probe_done(
                    ctx,
                    dev,
                    &s,
                    got.as_deref().map(|d| &d[..(actual as usize).min(d.len())]),
                );
                return Ok(Some(now + ctx.gap()));
            }
            if now >= c.deadline {
                // usb_control_msg timed out and killed the URB.
                let (id, tag, fresh) = (c.id, c.urb.tag, c.fresh);
                ctx.complete(dev, tag, now, ENOENT, 0, None, vec![], 0, 0);
                if fresh {
                    ctx.tags.free(tag, URB_SIZE);
                }
                let (s, ends, of) = (c.setup, c.ends_probe, c.probe_of);
                self.cur = None;
                self.set_interface_done(ctx, &s, ENOENT);
                // (The driver's usb_control_msg returns -ETIMEDOUT: a
                // failure either way.)
                let answer = ProbeAnswer {
                    setup: s,
                    status: ENOENT,
                    data: Vec::new(),
                };
                probe_answered(ctx, dev, of, answer);
                self.probe_next(ctx, ends);
                hid_probe_done(ctx, dev, &s, None);
                self.link.give_up(id, ENOENT)?;
                return Ok(Some(now + ctx.gap()));
            }
            return Ok(Some((now + POLL).min(c.deadline)));
        }
        let Some(req) = self.ctrl.pop_front() else {
            return Ok(None);
        };
        let (tag, fresh) = match req.tag {
            Some(t) => (t, false),
            None => (ctx.tags.alloc(&mut ctx.rng, URB_SIZE), true),
        };
        let s = req.setup;
        let mut urb = Urb::control(tag, s).with_flags(req.flags);
        let (dir_in, len) = (urb.dir_in, urb.len);
        // On ep0, which takes no injected fault: it goes on the bus.
        let _ = ctx.submit_urb(dev, &mut urb, req.out.clone(), vec![], Place::Given, now);
        let id = self.link.id();
        let mut cur = CtrlCur {
            ends_probe: req.ends_probe,
            probe_of: req.probe_of,
            id,
            urb,
            setup: s,
            fresh,
            deadline: now + self.ctrl_timeout,
            result: None,
        };
        let next = if self.remote || to_peer(&s) {
            self.link.send(submit_line(id, &urb, req.out.as_deref()))?;
            now + POLL
        } else {
            let (status, data) = ctx.handle_ctrl(dev, &s, req.out.as_deref());
            let d = data.unwrap_or_default();
            let n = d.len().min(len as usize);
            cur.result = Some(if dir_in {
                (status, n as u32, Some(Arc::from(&d[..n])))
            } else {
                (status, len, req.out.clone())
            });
            now + ctx.rng.range(40 * US, 400 * US)
        };
        self.cur = Some(cur);
        Ok(Some(next))
    }

    /// The last request queued for interface `ends`'s driver's probe was
    /// answered: its next requests go first (before other interfaces'
    /// probes, as the kernel probes one interface at a time), the last of
    /// them ending the probe; with none, the probe is done.
    fn probe_next(&mut self, ctx: &mut Ctx, ends: Option<u8>) {
        let d = self.dev;
        let Some(num) = ends else {
            return;
        };
        let more = ctx
            .dev(d)
            .map(|dev| driver::probe_more(dev, d, num))
            .unwrap_or_default();
        if more.is_empty() {
            probe_done(ctx, d, ends);
            return;
        }
        let last = more.len();
        for (k, op) in more.into_iter().enumerate().rev() {
            if let Some(r) = CtrlReq::of_probe(op, (k + 1 == last).then_some(num), Some(num)) {
                self.ctrl.push_front(r);
            }
        }
    }

    /// After a SET_INTERFACE of the driver: the interface is in the setting,
    /// or (failed) its endpoints stay idle.
    fn set_interface_done(&mut self, ctx: &mut Ctx, s: &[u8; 8], status: i32) {
        if s[0] != 0x01 || s[1] != 0x0b {
            return;
        }
        let (alt, num) = (s[2], s[4]);
        if status == 0 {
            if let Some(a) = ctx
                .dev_mut(self.dev)
                .and_then(|d| d.alt.get_mut(num as usize))
            {
                *a = alt;
            }
        } else {
            tracing::warn!(
                "usb {}: SET_INTERFACE {num} setting {alt} failed ({status}): its endpoints stay idle",
                self.name
            );
            self.failed.push(num);
        }
    }

    fn run(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, PeerError> {
        self.drain()?;
        if !self.started {
            if let Some(t) = self.step_ctrl(ctx, now)? {
                return Ok(Some(t));
            }
            self.started = true;
            self.start_eps(ctx, now, None);
        }
        self.follow_bindings(ctx);
        if !self.restart.is_empty() {
            if let Some(t) = self.step_ctrl(ctx, now)? {
                return Ok(Some(t));
            }
            let restart = std::mem::take(&mut self.restart);
            self.start_eps(ctx, now, Some(&restart));
        }
        // Requests queued since (a probe's next ones).
        let c = if self.cur.is_some() || !self.ctrl.is_empty() {
            self.step_ctrl(ctx, now)?
        } else {
            None
        };
        let mut next = c;
        if !self.program.lock_ok().pending.is_empty() {
            // A program's URB waits for the peer: look for its answer soon.
            next = Some(next.map_or(now + MS, |n| n.min(now + MS)));
        } else if self.loops {
            // The drivers' loops use the peer: look at it about as often
            // as they poll it, for a peer that ends meanwhile.
            next = Some(next.map_or(now + LOOK, |n| n.min(now + LOOK)));
        }
        // Nothing to poll: look for a peer that ends now and then.
        Ok(Some(next.unwrap_or(now + 100 * MS)))
    }
}

impl Task for ExternalTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            // Unplugged: the peer is told by the end of its input, and killed.
            self.link.close();
            return None;
        }
        match self.run(ctx, now) {
            Ok(next) => next,
            Err(why) => {
                tracing::warn!(
                    "usb {}: external device's peer {why}: unplugging the device",
                    self.name
                );
                self.link.close();
                ctx.unplug_dev(self.dev, now);
                None
            }
        }
    }
}
