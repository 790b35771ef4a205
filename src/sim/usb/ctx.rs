//! What device models, the hub driver and replays act on: the device tree,
//! URB tags and addresses, URB submission and completion (the events), the
//! control-request sequencer, and the [`Task`] trait the scheduler runs.
//! This module imports none of them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::base::clock::Clock;
use crate::config::{Controller, DeviceConfig, DeviceKind, ErrorConfig};
use crate::usbmon::event::{
    DataCapture, DeviceEvent, EventKind, IsoDesc, UrbEvent, UrbSink, XferType, EINPROGRESS,
    URB_DIR_IN,
};

use super::descriptors::{Descriptors, Speed};
use super::peer::PeerError;
use crate::sim::rng::Rng;
use crate::usbcore::device::{DeviceWatcher, IsoResult, UrbDone, UrbResult};

/// Something the bus schedules: a device model's data stream, the hub
/// driver's work, a replay. A device class (`device/`) starts its `Task`s
/// when its driver binds.
pub(crate) trait Task: Send {
    /// Run at bus local time `now`: emit what is due now, and say when to
    /// run next (None: done).
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64>;
}

/// How a control request ends: status, actual length, IN data.
pub(crate) type CtrlResult = (i32, u32, Option<Arc<[u8]>>);

/// A device's ep0 answered from outside the bus (an external device's
/// peer with `ep0: peer`): the hub driver's control requests to it wait
/// for the answer, polled at the driver's steps, and never block.
pub(crate) trait Ep0Link: Send {
    /// Hand the request over; Err: the other side is gone (why).
    fn submit(&mut self, urb: &Urb, out: Option<&[u8]>) -> Result<u64, PeerError>;
    /// Its answer if it came (checked against the URB); Err: gone or garbage.
    fn poll(&mut self, id: u64, urb: &Urb) -> Result<Option<CtrlResult>, PeerError>;
    /// The host gave up on the request (usb_kill_urb).
    fn unlink(&mut self, id: u64, status: i32) -> Result<(), PeerError>;
    /// usb_control_msg's timeout for this device, ns.
    fn timeout(&self) -> u64;
    /// For the class driver, which takes the link over once configured.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

/// Index of a device in [`Ctx::devs`]; never reused within a bus.
pub(crate) type DevId = usize;

pub(crate) const ENOENT: i32 = -2;
pub(crate) const ENODEV: i32 = -19;
pub(crate) const EXDEV: i32 = -18;
pub(crate) const EPIPE: i32 = -32;
pub(crate) const EPROTO: i32 = -71;
pub(crate) const ESHUTDOWN: i32 = -108;

/// URB_NO_TRANSFER_DMA_MAP.
pub(crate) const URB_NO_TRANSFER_DMA_MAP: u32 = 0x0004;

/// A millisecond of bus time, ns.
pub(crate) const MS: u64 = 1_000_000;
/// A microsecond of bus time, ns.
pub(crate) const US: u64 = 1_000;

/// The parts of a URB that every event of it repeats.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Urb {
    pub tag: u64,
    pub xfer: XferType,
    pub ep: u8,
    pub dir_in: bool,
    pub len: u32,
    pub interval: i32,
    pub flags: u32,
    pub setup: Option<[u8; 8]>,
    /// Number of ISO packets (0 for other types).
    pub npk: u32,
}

impl Urb {
    /// A control URB for `setup` on ep0: its direction and length come
    /// from the setup packet (bmRequestType bit 7, wLength).
    pub(crate) fn control(tag: u64, setup: [u8; 8]) -> Urb {
        let dir_in = setup[0] & 0x80 != 0;
        Urb {
            tag,
            xfer: XferType::Control,
            ep: 0,
            dir_in,
            len: u16::from_le_bytes([setup[6], setup[7]]) as u32,
            interval: 0,
            flags: if dir_in { URB_DIR_IN } else { 0 },
            setup: Some(setup),
            npk: 0,
        }
    }

    /// What a submission of this URB carries: nothing to read yet for IN,
    /// the OUT data if there is any.
    pub(crate) fn submit_data(&self, ctx: &Ctx, out: &Option<Arc<[u8]>>) -> Option<Arc<[u8]>> {
        if self.dir_in {
            Some(ctx.empty.clone())
        } else if self.len > 0 {
            out.clone()
        } else {
            None
        }
    }
}

/// One downstream port of a hub.
#[derive(Clone, Debug, Default)]
pub(crate) struct Port {
    pub powered: bool,
    pub enabled: bool,
    pub change: u16,
    pub child: Option<DevId>,
}

/// Hub driver state of a hub (root or external).
#[derive(Debug, Default)]
pub(crate) struct HubState {
    pub ports: Vec<Port>,
    /// Work for the hub's worker (khubd for this hub).
    pub queue: VecDeque<Op>,
    pub worker: bool,
    pub int_tag: u64,
    pub int_inflight: bool,
    pub int_completion: bool,
    /// Ports whose change was reported on the status endpoint and not yet handled.
    pub reported: u16,
}

/// What a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Root,
    Dev(DeviceKind),
}

/// One device on the bus.
pub(crate) struct Device {
    pub kind: Kind,
    pub cfg: Option<DeviceConfig>,
    pub parent: Option<DevId>,
    pub port: u8,
    pub level: u8,
    pub path: Vec<u8>,
    pub desc: Descriptors,
    /// Address as usbmon reports it: 0 until addressed.
    pub devnum: u8,
    /// Address chosen by the hub driver.
    pub reserved: u8,
    pub visible: bool,
    pub strings_read: bool,
    pub configured: bool,
    pub driver_bound: bool,
    /// Current alternate setting per interface number.
    pub alt: [u8; 4],
    pub hub: Option<HubState>,
    pub inflight: Vec<Urb>,
    /// Electrically disconnected (the kernel may not know yet).
    pub gone: bool,
    pub xfers: u64,
    pub errors: ErrorConfig,
    /// Faults injected at run time, applied to the next data transfers.
    pub faults: std::collections::VecDeque<Fault>,
    /// The class driver's own URB (usbhid ctrl, usb-storage current_urb).
    pub class_tag: u64,
    /// ep0 answered from outside (`ep0: peer`); None: by the model.
    pub ep0: Option<Box<dyn Ep0Link>>,
    /// Whether ep0 is answered from outside, even after the class driver
    /// took the link over.
    pub remote_ep0: bool,
    /// The hub driver gave up enumerating it: it stays on its port,
    /// without an address, until unplugged.
    pub given_up: bool,
    /// The hub driver's enumeration attempt (hub_port_connect's loop).
    pub enum_try: u8,
    /// Announced as added to the bus (`usb:usb_device_plug`): its removal
    /// is announced too.
    pub announced: bool,
    /// What programs did to it through the USB core (usbfs).
    pub core: CoreDev,
}

/// A device as programs left it through the USB core (usbfs): see
/// `core_view`.
#[derive(Default)]
pub(crate) struct CoreDev {
    /// Registered with the core (`usb_new_device`): usbfs shows it.
    pub registered: bool,
    /// Interfaces a program claimed, with the claiming file.
    pub claims: Vec<(u8, u64)>,
    /// Interfaces whose kernel driver a program detached.
    pub detached: Vec<u8>,
    /// Endpoints (address with direction) of detached interfaces: the
    /// class driver's URBs there are no longer submitted.
    pub quiet_eps: Vec<u8>,
    /// The class driver's own control URB is quiet too.
    pub quiet_class: bool,
    /// The device model's peer, for programs' URBs (external devices).
    pub peer: Option<ProgramPeer>,
    /// Replay for programs: the next recorded transfer to look from.
    pub replay_pos: usize,
    /// URBs the quiet driver's model still runs (not on the bus): what
    /// they get goes to a program's URB on the same endpoint.
    pub suppressed: Vec<Urb>,
}

/// An external device's peer as programs' URBs reach it: lines go out
/// through `tx`; answers to the ids in `answers.pending` come back in
/// `answers.done` (the device model's reader puts them there).
pub(crate) struct ProgramPeer {
    pub tx: crossbeam_channel::Sender<String>,
    pub answers: Arc<std::sync::Mutex<PeerAnswers>>,
    /// Move the answers to programs' URBs that the peer sent meanwhile
    /// into `answers` (the model takes its own at its steps).
    pub poll: Box<dyn Fn() + Send>,
}

/// Answers of a peer to programs' URBs.
#[derive(Default)]
pub(crate) struct PeerAnswers {
    /// Ids sent to the peer and not answered.
    pub pending: HashSet<u64>,
    /// Answers: id -> (status, actual, data, packets (status, actual)).
    pub done: HashMap<u64, PeerAnswer>,
}

/// One answer of a peer: status, actual length, IN data, and for
/// isochronous URBs each packet's status and actual length.
pub(crate) type PeerAnswer = (i32, u32, Vec<u8>, Option<Vec<(i32, u32)>>);

/// A program's URB in flight (usbfs): who is told when it completes.
pub(crate) struct ProgramUrb {
    pub dev: DevId,
    pub done: Arc<dyn UrbDone>,
    /// The tag's object size (to free it).
    pub size: u64,
    /// The peer's id of it, if a peer answers it.
    pub peer_id: Option<u64>,
}

/// The bus as the USB core's users see it: who is told of devices, and
/// programs' URBs in flight by tag.
#[derive(Default)]
pub(crate) struct CoreState {
    pub watchers: Vec<Arc<dyn DeviceWatcher>>,
    pub urbs: HashMap<u64, ProgramUrb>,
}

impl Device {
    pub(crate) fn is_hub(&self) -> bool {
        self.hub.is_some()
    }
    pub(crate) fn speed(&self) -> Speed {
        self.desc.speed
    }
}

/// How an injected error ends a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    /// Submission fails: `E` event.
    SubmitError,
    /// Completion -32 (EPIPE).
    Stall,
    /// Completion -2 (ENOENT).
    Unlink,
    /// Completion with a protocol error status: -71 (EPROTO, CRC/timeout) or
    /// -75 (EOVERFLOW, babble).
    Proto(i32),
}

impl Outcome {
    /// The completion status of a failed transfer.
    pub(crate) fn status(self) -> i32 {
        match self {
            Outcome::Stall => EPIPE,
            Outcome::Unlink => ENOENT,
            Outcome::Proto(st) => st,
            Outcome::Ok | Outcome::SubmitError => 0,
        }
    }
}

/// A fault injected at run time into the next data transfer of a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Completion -32 (EPIPE).
    Stall,
    /// Completion -75 (EOVERFLOW).
    Babble,
    /// Completion -2 (ENOENT).
    Unlink,
    /// Submission fails (`E` event).
    SubmitError,
    /// Completion -71 (EPROTO).
    Proto,
}

/// URB tag allocator imitating the kernel's slab: 0xc0-byte objects for plain
/// URBs, larger power-of-two objects for ISO URBs, recently freed objects are
/// handed out first.
pub(crate) struct TagAlloc {
    pages: Vec<(u64, Vec<u64>)>, // (object size, pages)
    free: Vec<(u64, Vec<u64>)>,  // (object size, LIFO free list)
    live: HashSet<u64>,
}

impl TagAlloc {
    pub(crate) fn new() -> Self {
        TagAlloc {
            pages: Vec::new(),
            free: Vec::new(),
            live: HashSet::new(),
        }
    }

    /// Allocate a URB of `size` bytes (0xc0 for plain URBs).
    pub(crate) fn alloc(&mut self, rng: &mut Rng, size: u64) -> u64 {
        if let Some((_, list)) = self.free.iter_mut().find(|(s, _)| *s == size) {
            if !list.is_empty() && rng.chance(7.0 / 8.0) {
                let tag = list.pop().unwrap();
                self.live.insert(tag);
                return tag;
            }
        }
        if !self.pages.iter().any(|(s, _)| *s == size) {
            self.pages.push((size, Vec::new()));
        }
        let slots = (4096 / size).max(1);
        for attempt in 0.. {
            let pages = &mut self.pages.iter_mut().find(|(s, _)| *s == size).unwrap().1;
            if pages.is_empty() || attempt % 16 == 15 {
                let page = 0xffff_8880_0000_0000
                    | (rng.range(0x0080, 0xfff0) << 16)
                    | (rng.below(16) << 12);
                pages.push(page);
            }
            let page = pages[rng.below(pages.len() as u64) as usize];
            let tag = page + rng.below(slots) * size;
            if self.live.insert(tag) {
                if let Some((_, list)) = self.free.iter_mut().find(|(s, _)| *s == size) {
                    list.retain(|t| *t != tag);
                }
                return tag;
            }
        }
        unreachable!()
    }

    pub(crate) fn free(&mut self, tag: u64, size: u64) {
        if self.live.remove(&tag) {
            match self.free.iter_mut().find(|(s, _)| *s == size) {
                Some((_, list)) => list.push(tag),
                None => self.free.push((size, vec![tag])),
            }
        }
    }
}

/// Size of a plain URB object.
pub(crate) const URB_SIZE: u64 = 0xc0;

/// Object size of an ISO URB with `npk` packets.
pub(crate) fn iso_urb_size(npk: u32) -> u64 {
    (URB_SIZE + 16 * npk as u64).next_power_of_two()
}

/// One step of a control-op sequence.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// A control transfer on `target`'s ep0. `tag` None: the running worker's URB.
    Ctrl {
        target: DevId,
        setup: [u8; 8],
        out: Option<Arc<[u8]>>,
        tag: Option<u64>,
    },
    Delay(u64),
    /// Take a fresh URB for the following transfers.
    NewTag,
    /// Handle a port reported on the status endpoint (expands).
    PortEvent(u8),
    /// Debounce, reset and enumerate the device on a port (expands).
    Connect(u8),
    /// Mark a device addressed.
    Addressed(DevId),
    /// Standard enumeration (expands).
    Enumerate(DevId),
    /// Class driver probe (expands).
    ClassSetup(DevId),
    /// Start a hub: power its ports and scan them (runs on the hub's own worker).
    Activate(DevId),
    /// Read and acknowledge every port, then submit the status URB (expands).
    Scan,
    /// Submit the worker hub's status URB.
    SubmitInt,
    /// Start the class driver's data streams.
    StartStreams(DevId),
    /// The hub driver's usb_disconnect of a device and everything below it.
    Disconnect(DevId),
    /// After an enumeration request to a device whose ep0 is answered from
    /// outside: what the hub driver does if it failed.
    Check(DevId, Check),
    /// The end of one enumeration attempt's requests (a failed check drops
    /// what is left of the attempt up to here).
    TryEnd(DevId),
    /// An enumeration attempt failed with this error: disable the port,
    /// then try again or give up (expands).
    TryFailed(DevId, i32),
}

/// Which enumeration request a [`Op::Check`] follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Check {
    /// The 64-byte device descriptor read at address 0: `retry` of two,
    /// `op` of three reads.
    Desc64 { retry: u8, op: u8 },
    /// SET_ADDRESS, `op` of two.
    Address { op: u8 },
    /// The 18-byte device descriptor.
    Desc18,
    /// A configuration descriptor read.
    Config,
    /// SET_CONFIGURATION.
    SetConfig,
}

/// What follows a [`Check`].
pub(crate) enum Next {
    /// It succeeded: go on.
    Go,
    /// Run these first, then go on.
    Insert(Vec<Op>),
    /// Drop the rest of the attempt and run these instead.
    Replace(Vec<Op>),
}

/// usb_control_msg's -ETIMEDOUT after it killed a request.
pub(crate) const ETIMEDOUT: i32 = -110;

/// A standard or class setup packet.
pub(crate) fn setup(req_type: u8, req: u8, value: u16, index: u16, length: u16) -> [u8; 8] {
    [
        req_type,
        req,
        value as u8,
        (value >> 8) as u8,
        index as u8,
        (index >> 8) as u8,
        length as u8,
        (length >> 8) as u8,
    ]
}

pub(crate) fn ctrl(target: DevId, s: [u8; 8]) -> Op {
    Op::Ctrl {
        target,
        setup: s,
        out: None,
        tag: None,
    }
}

/// A control transfer that has been submitted and awaits its completion.
#[derive(Debug)]
struct Pending {
    target: DevId,
    tag: u64,
    status: i32,
    data: Option<Arc<[u8]>>,
    actual: u32,
    /// Answered from outside: (id, deadline, URB).
    remote: Option<(u64, u64, Urb)>,
}

/// The last control request a [`Runner`] completed: device, the status
/// its caller sees (-110 for a timeout), IN data.
pub(crate) type Last = (DevId, i32, Option<Arc<[u8]>>);

/// Runs a queue of [`Op`]s one transfer at a time.
#[derive(Debug, Default)]
pub(crate) struct Runner {
    pub q: VecDeque<Op>,
    pending: Option<Pending>,
    last: Option<Last>,
}

impl Runner {
    pub(crate) fn busy(&self) -> bool {
        self.pending.is_some() || !self.q.is_empty()
    }

    /// Run one step at `now`; returns when to run next, or None when idle.
    /// `hub` is the hub whose worker runs the queue; `tag` its current URB.
    pub(crate) fn step(
        &mut self,
        ctx: &mut Ctx,
        hub: Option<DevId>,
        tag: &mut u64,
        now: u64,
    ) -> Option<u64> {
        if let Some(mut p) = self.pending.take() {
            if let Some((id, deadline, urb)) = p.remote {
                let mut link = ctx.dev_mut(p.target).and_then(|d| d.ep0.take());
                let r = match link.as_mut() {
                    Some(l) => l.poll(id, &urb),
                    None => Err(PeerError::Gone),
                };
                let put = |ctx: &mut Ctx, link| {
                    if let Some(d) = ctx.dev_mut(p.target) {
                        d.ep0 = link;
                    }
                };
                match r {
                    Ok(Some((st, actual, data))) => {
                        put(ctx, link);
                        p.status = st;
                        if urb.dir_in {
                            p.actual = actual;
                            p.data = data;
                        }
                        if st == 0
                            && matches!(
                                (
                                    urb.setup.unwrap_or_default()[0],
                                    urb.setup.unwrap_or_default()[1]
                                ),
                                (0x00, 0x09) | (0x01, 0x0b)
                            )
                        {
                            // monfs keeps the configuration's bookkeeping.
                            let _ = ctx.handle_ctrl(p.target, &urb.setup.unwrap_or_default(), None);
                        }
                    }
                    Ok(None) if now < deadline => {
                        put(ctx, link);
                        self.pending = Some(p);
                        return Some((now + MS).min(deadline));
                    }
                    Ok(None) => {
                        // usb_control_msg timed out: usb_kill_urb.
                        ctx.complete(p.target, p.tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
                        let r = link.as_mut().map(|l| l.unlink(id, ENOENT));
                        put(ctx, link);
                        if let Some(Err(why)) = r {
                            ctx.peer_gone(p.target, &why, now);
                        }
                        self.last = Some((p.target, ETIMEDOUT, None));
                        return Some(now + ctx.gap());
                    }
                    Err(why) => {
                        put(ctx, link);
                        ctx.peer_gone(p.target, &why, now);
                        self.last = Some((p.target, EPROTO, None));
                        return Some(now + ctx.gap());
                    }
                }
            }
            let data = if p.status == 0 { p.data } else { None };
            let actual = if p.status == 0 { p.actual } else { 0 };
            self.last = Some((p.target, p.status, data.clone()));
            ctx.complete(
                p.target,
                p.tag,
                now,
                p.status,
                actual,
                data,
                Vec::new(),
                0,
                0,
            );
            return if self.q.is_empty() {
                None
            } else {
                Some(now + ctx.gap())
            };
        }
        loop {
            let op = self.q.pop_front()?;
            match op {
                Op::Ctrl {
                    target,
                    setup,
                    out,
                    tag: t,
                } => {
                    if !ctx.alive(target) {
                        continue;
                    }
                    let tag = t.unwrap_or(*tag);
                    if let Some(mut link) = ctx.dev_mut(target).and_then(|d| d.ep0.take()) {
                        // Answered from outside: wait for it, polled.
                        let urb = Urb::control(tag, setup);
                        let sdata = urb.submit_data(ctx, &out);
                        ctx.submit(target, urb, now, sdata, Vec::new());
                        let r = link.submit(&urb, out.as_deref());
                        let timeout = link.timeout();
                        if let Some(d) = ctx.dev_mut(target) {
                            d.ep0 = Some(link);
                        }
                        match r {
                            Ok(id) => {
                                self.pending = Some(Pending {
                                    target,
                                    tag,
                                    status: 0,
                                    actual: if urb.dir_in { 0 } else { urb.len },
                                    data: if urb.dir_in { None } else { out },
                                    remote: Some((id, now + timeout, urb)),
                                });
                                return Some(now + MS);
                            }
                            Err(why) => {
                                ctx.peer_gone(target, &why, now);
                                self.last = Some((target, EPROTO, None));
                                return Some(now + ctx.gap());
                            }
                        }
                    }
                    let (status, data) = ctx.handle_ctrl(target, &setup, out.as_deref());
                    let urb = Urb::control(tag, setup);
                    let (dir_in, len) = (urb.dir_in, urb.len);
                    let sdata = urb.submit_data(ctx, &out);
                    ctx.submit(target, urb, now, sdata, Vec::new());
                    let (actual, data) = if dir_in {
                        let d = data.unwrap_or_default();
                        let n = d.len().min(len as usize);
                        (n as u32, Some(Arc::from(&d[..n])))
                    } else {
                        (len, out)
                    };
                    self.pending = Some(Pending {
                        target,
                        tag,
                        status,
                        data,
                        actual,
                        remote: None,
                    });
                    let lat =
                        ctx.rng.range(40 * US, 400 * US) + if len > 64 { 100 * US } else { 0 };
                    return Some(now + lat);
                }
                Op::Delay(ns) => return Some(now + ns),
                Op::NewTag => {
                    ctx.tags.free(*tag, URB_SIZE);
                    *tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
                }
                Op::Addressed(d) => {
                    if let Some(dev) = ctx.dev_mut(d) {
                        dev.devnum = dev.reserved;
                        dev.visible = true;
                    }
                }
                Op::SubmitInt => {
                    if let Some(h) = hub {
                        ctx.submit_hub_int(h, now);
                        return Some(now + ctx.gap());
                    }
                }
                Op::StartStreams(d) => {
                    (ctx.bind_driver)(ctx, d, now);
                }
                Op::Activate(d) => ctx.activate_hub(d, now),
                Op::Disconnect(d) => {
                    ctx.disconnect(d, now);
                    return Some(now + ctx.gap());
                }
                Op::PortEvent(p) => {
                    let ops = hub.map(|h| ctx.port_event_ops(h, p)).unwrap_or_default();
                    self.push_front(ops);
                }
                Op::Connect(p) => {
                    let ops = hub.map(|h| ctx.connect_ops(h, p)).unwrap_or_default();
                    self.push_front(ops);
                }
                Op::Scan => {
                    let ops = hub.map(|h| ctx.scan_ops(h)).unwrap_or_default();
                    self.push_front(ops);
                }
                Op::Enumerate(d) => {
                    let ops = ctx.enumerate_ops(d);
                    self.push_front(ops);
                }
                Op::ClassSetup(d) => {
                    (ctx.core_event)(ctx, d, true);
                    // usb_new_device is done: the device is on the bus.
                    ctx.announce(d, now, true);
                    let ops = ctx.class_ops(d);
                    self.push_front(ops);
                }
                Op::Check(d, c) => {
                    let last = self.last.take();
                    match ctx.check(d, c, last) {
                        Next::Go => {}
                        Next::Insert(ops) => self.push_front(ops),
                        Next::Replace(ops) => {
                            while let Some(op) = self.q.pop_front() {
                                if matches!(op, Op::TryEnd(x) if x == d) {
                                    break;
                                }
                            }
                            self.push_front(ops);
                        }
                    }
                }
                Op::TryEnd(_) => {}
                Op::TryFailed(d, err) => {
                    let ops = hub
                        .map(|h| ctx.try_failed_ops(h, d, err))
                        .unwrap_or_default();
                    self.push_front(ops);
                }
            }
        }
    }

    pub(crate) fn push_front(&mut self, ops: Vec<Op>) {
        for op in ops.into_iter().rev() {
            self.q.push_front(op);
        }
    }
}

/// The simulation state a task step can touch.
pub(crate) struct Ctx {
    pub bus: u16,
    pub controller: Controller,
    pub rng: Rng,
    pub tags: TagAlloc,
    pub devs: Vec<Option<Device>>,
    pub sink: Arc<dyn UrbSink>,
    pub clock: Arc<dyn Clock>,
    /// Added to local time for timestamps.
    pub offset: u64,
    /// Paced mode: local time the bus has reached (flood catches up to it).
    pub floor: u64,
    pub spawned: Vec<(u64, Box<dyn Task>)>,
    pub(crate) next_devnum: u8,
    pub(crate) used: [bool; 128],
    pub empty: Arc<[u8]>,
    pub events: u64,
    /// Binds the class driver of a configured device (starts its model);
    /// the bus supplies it, so that this module knows no device model.
    pub bind_driver: fn(&mut Ctx, DevId, u64),
    /// Called when a device is plugged in (before the hub notices): an
    /// external device with `ep0: peer` gets its [`Ep0Link`].
    pub plugged: fn(&mut Ctx, DevId),
    /// The USB core's users (usbfs): watchers and programs' URBs.
    pub core: CoreState,
    /// Called when a device is registered with the core (true) or goes
    /// (false); the bus supplies it.
    pub core_event: fn(&mut Ctx, DevId, bool),
    /// The descriptors of a device being plugged (its configuration, the
    /// port's speed, the bus, its port path, a salt for serial numbers),
    /// from its class.
    pub describe: fn(&DeviceConfig, Speed, u16, &[u8], u64) -> Descriptors,
}

impl Ctx {
    pub(crate) fn dev(&self, id: DevId) -> Option<&Device> {
        self.devs.get(id).and_then(|d| d.as_ref())
    }
    pub(crate) fn dev_mut(&mut self, id: DevId) -> Option<&mut Device> {
        self.devs.get_mut(id).and_then(|d| d.as_mut())
    }
    /// Present and still connected.
    pub(crate) fn alive(&self, id: DevId) -> bool {
        self.dev(id).is_some_and(|d| !d.gone)
    }

    pub(crate) fn spawn(&mut self, t: u64, task: Box<dyn Task>) {
        self.spawned.push((t, task));
    }

    /// Pause between two steps of a driver.
    pub(crate) fn gap(&mut self) -> u64 {
        if self.rng.chance(1.0 / 8.0) {
            self.rng.range(MS, 4 * MS)
        } else {
            self.rng.range(20 * US, 600 * US)
        }
    }

    /// Tell the sink that device `d` was added to the bus (`plugged`) or
    /// is being removed, once each way.
    pub(crate) fn announce(&mut self, d: DevId, t: u64, plugged: bool) {
        let bus = self.bus;
        let ts = self.clock.at(t + self.offset);
        let Some(dev) = self.dev_mut(d) else {
            return;
        };
        if dev.announced == plugged || dev.kind == Kind::Root {
            return;
        }
        dev.announced = plugged;
        let path: Vec<String> = dev.path.iter().map(|p| p.to_string()).collect();
        let ev = DeviceEvent {
            ts,
            plugged,
            bus,
            devnum: dev.devnum,
            devpath: format!("{bus}-{}", path.join(".")),
            vendor: dev.desc.dev.vid,
            product: dev.desc.dev.pid,
            name: dev.desc.product.clone().unwrap_or_default(),
        };
        self.sink.device_event(&ev);
    }

    pub(crate) fn event(&self, t: u64, kind: EventKind, devnum: u8, urb: &Urb) -> UrbEvent {
        UrbEvent {
            id: urb.tag,
            kind,
            xfer: urb.xfer,
            bus: self.bus,
            devnum,
            epnum: urb.ep,
            dir_in: urb.dir_in,
            ts: self.clock.at(t + self.offset),
            status: EINPROGRESS,
            transfer_buffer_length: urb.len,
            actual_length: 0,
            interval: urb.interval,
            start_frame: 0,
            error_count: 0,
            xfer_flags: urb.flags,
            setup: urb.setup,
            iso: Vec::new(),
            data: None,
            data_capture: DataCapture::Full,
        }
    }

    /// Emit an `S` event and keep the URB in flight.
    pub(crate) fn submit(
        &mut self,
        dev: DevId,
        urb: Urb,
        t: u64,
        data: Option<Arc<[u8]>>,
        iso: Vec<IsoDesc>,
    ) {
        let Some(d) = self.devs.get_mut(dev).and_then(|d| d.as_mut()) else {
            return;
        };
        if (d.core.quiet_class || !d.core.quiet_eps.is_empty())
            && !self.core.urbs.contains_key(&urb.tag)
        {
            // A program detached the class driver: its URBs stop.
            let addr = urb.ep | if urb.dir_in { 0x80 } else { 0 };
            let quiet = if urb.ep == 0 {
                d.core.quiet_class && urb.tag == d.class_tag
            } else {
                d.core.quiet_eps.contains(&addr)
            };
            if quiet {
                if d.core.suppressed.len() < 64 {
                    d.core.suppressed.push(urb);
                }
                return;
            }
        }
        d.inflight.push(urb);
        let devnum = d.devnum;
        let mut ev = self.event(t, EventKind::Submit, devnum, &urb);
        ev.data = data;
        ev.iso = iso;
        self.events += 1;
        self.sink.urb_event(ev);
    }

    /// Emit an `E` event (the URB never went in flight).
    /// Submit an IN URB of a class driver for `dev`, its next injected
    /// fault taken first: a submit error is reported (-ENODEV) and `Err`
    /// holds when the driver tries again; otherwise the URB is submitted and
    /// `Ok` holds how it is to end.
    pub(crate) fn submit_in(&mut self, dev: DevId, urb: Urb, now: u64) -> Result<Outcome, u64> {
        let outcome = self.take_error(dev);
        if outcome == Outcome::SubmitError {
            self.submit_error(dev, urb, now, ENODEV);
            return Err(now + self.rng.range(10 * MS, 20 * MS));
        }
        let e = self.empty.clone();
        self.submit(dev, urb, now, Some(e), Vec::new());
        Ok(outcome)
    }

    pub(crate) fn submit_error(&mut self, dev: DevId, urb: Urb, t: u64, status: i32) {
        let Some(devnum) = self.dev(dev).map(|d| d.devnum) else {
            return;
        };
        let mut ev = self.event(t, EventKind::Error, devnum, &urb);
        ev.status = status;
        self.events += 1;
        self.sink.urb_event(ev);
    }

    /// Emit a `C` event for the URB `tag` of `dev` if it is still in flight.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn complete(
        &mut self,
        dev: DevId,
        tag: u64,
        t: u64,
        status: i32,
        actual: u32,
        data: Option<Arc<[u8]>>,
        iso: Vec<IsoDesc>,
        start_frame: i32,
        error_count: i32,
    ) -> bool {
        let Some(d) = self.devs.get_mut(dev).and_then(|d| d.as_mut()) else {
            return false;
        };
        let Some(pos) = d.inflight.iter().position(|u| u.tag == tag) else {
            // The model of a driver a program detached still produces:
            // its data goes to the program's URB waiting on that endpoint
            // (what the device sends, whoever polls).
            let Some(k) = d.core.suppressed.iter().position(|u| u.tag == tag) else {
                return false;
            };
            let q = d.core.suppressed.swap_remove(k);
            let program = d
                .inflight
                .iter()
                .find(|u| {
                    u.ep == q.ep
                        && u.dir_in == q.dir_in
                        && u.xfer == q.xfer
                        && self.core.urbs.contains_key(&u.tag)
                })
                .map(|u| u.tag);
            if let (Some(p), 0, true) = (program, status, q.dir_in) {
                return self.complete(dev, p, t, 0, actual, data, iso, start_frame, error_count);
            }
            return false;
        };
        let urb = d.inflight.swap_remove(pos);
        let devnum = d.devnum;
        let mut ev = self.event(t, EventKind::Complete, devnum, &urb);
        ev.status = status;
        ev.actual_length = actual;
        // An ISO IN URB always has its transfer buffer, even when killed
        // before anything arrived (usbmon's text then shows the first bytes
        // of the whole buffer, not `Z`): here it holds zeros.
        ev.data = match data {
            None if urb.xfer == XferType::Iso && urb.dir_in && urb.npk > 0 => {
                Some(Arc::from(vec![0u8; urb.len as usize]))
            }
            d => d,
        };
        let program = self.core.urbs.remove(&tag).map(|p| {
            let r = UrbResult {
                status,
                actual_length: actual,
                data: ev.data.as_deref().map(<[u8]>::to_vec).unwrap_or_default(),
                iso: iso
                    .iter()
                    .map(|p| IsoResult {
                        status: p.status,
                        actual_length: p.length,
                    })
                    .collect(),
                start_frame,
                error_count,
            };
            (p, r)
        });
        ev.iso = iso;
        ev.start_frame = start_frame;
        ev.error_count = error_count;
        self.events += 1;
        self.sink.urb_event(ev);
        if let Some((p, r)) = program {
            self.tags.free(tag, p.size);
            p.done.done(tag, r);
        }
        true
    }

    /// Count a data transfer of `dev` and decide how it ends.
    ///
    /// Submit errors use -19 (ENODEV), what `usb_submit_urb` returns when the
    /// device is going away; the other kinds are completion statuses.
    pub(crate) fn take_error(&mut self, dev: DevId) -> Outcome {
        let Some(d) = self.dev_mut(dev) else {
            return Outcome::Ok;
        };
        d.xfers += 1;
        if let Some(f) = d.faults.pop_front() {
            return match f {
                Fault::Stall => Outcome::Stall,
                Fault::Babble => Outcome::Proto(-75),
                Fault::Unlink => Outcome::Unlink,
                Fault::SubmitError => Outcome::SubmitError,
                Fault::Proto => Outcome::Proto(EPROTO),
            };
        }
        let n = d.xfers;
        let e = d.errors;
        let hit = |every: u32| every > 0 && n % every as u64 == 0;
        if hit(e.submit_error_every) {
            Outcome::SubmitError
        } else if hit(e.stall_every) {
            Outcome::Stall
        } else if hit(e.unlink_every) {
            Outcome::Unlink
        } else if hit(e.proto_error_every) {
            Outcome::Proto(EPROTO)
        } else {
            Outcome::Ok
        }
    }

    pub(crate) fn alloc_devnum(&mut self) -> u8 {
        for i in 0..126u32 {
            let n = 2 + ((self.next_devnum as u32 - 2 + i) % 126) as u8;
            if !self.used[n as usize] {
                self.used[n as usize] = true;
                self.next_devnum = if n >= 127 { 2 } else { n + 1 };
                return n;
            }
        }
        0
    }
}
