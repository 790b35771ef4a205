//! One simulated bus: the device tree, URB tag and address allocation, the
//! hub driver (enumeration, port handling) and the event scheduler.
//!
//! Everything runs in "bus local time" (ns). A step of a task emits the events
//! due at its own time only and tells when it wants to run next, so the events
//! of a bus are delivered in timestamp order. Event timestamps are
//! `clock.at(local + offset)`; the offset grows while the bus is paused.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::sync::Arc;

use crate::clock::Clock;
use crate::config::{BusConfig, Controller, DeviceConfig, DeviceKind, ErrorConfig};
use crate::usbmon::event::{
    DataCapture, EventKind, IsoDesc, UrbEvent, UrbSink, XferType, EINPROGRESS, URB_DIR_IN,
};

use super::descriptors::{self, Descriptors, Speed};
use super::device::{FloodTask, HidTask, IsoTask, StorageTask};
use super::rng::Rng;

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

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

// Hub port status and change bits.
const PS_CONNECTION: u16 = 0x0001;
const PS_ENABLE: u16 = 0x0002;
const PS_POWER: u16 = 0x0100;
const PS_LOW_SPEED: u16 = 0x0200;
const PS_HIGH_SPEED: u16 = 0x0400;
const PC_CONNECTION: u16 = 0x0001;
const PC_ENABLE: u16 = 0x0002;
const PC_RESET: u16 = 0x0010;

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
    fn new() -> Self {
        TagAlloc {
            pages: Vec::new(),
            free: Vec::new(),
            live: HashSet::new(),
        }
    }

    /// Allocate a URB of `size` bytes (0xc0 for plain URBs).
    pub(crate) fn alloc(&mut self, rng: &mut Rng, size: u64) -> u64 {
        if let Some((_, list)) = self.free.iter_mut().find(|(s, _)| *s == size) {
            if !list.is_empty() && rng.chance(7, 8) {
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
}

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

fn ctrl(target: DevId, s: [u8; 8]) -> Op {
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
}

/// Runs a queue of [`Op`]s one transfer at a time.
#[derive(Debug, Default)]
pub(crate) struct Runner {
    pub q: VecDeque<Op>,
    pending: Option<Pending>,
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
        if let Some(p) = self.pending.take() {
            let data = if p.status == 0 { p.data } else { None };
            let actual = if p.status == 0 { p.actual } else { 0 };
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
                    let (status, data) = ctx.handle_ctrl(target, &setup, out.as_deref());
                    let dir_in = setup[0] & 0x80 != 0;
                    let len = u16::from_le_bytes([setup[6], setup[7]]) as u32;
                    let urb = Urb {
                        tag,
                        xfer: XferType::Control,
                        ep: 0,
                        dir_in,
                        len,
                        interval: 0,
                        flags: if dir_in { URB_DIR_IN } else { 0 },
                        setup: Some(setup),
                        npk: 0,
                    };
                    let sdata = if dir_in {
                        Some(ctx.empty.clone())
                    } else if len > 0 {
                        out.clone()
                    } else {
                        None
                    };
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
                    ctx.start_streams(d, now);
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
                    let ops = ctx.class_ops(d);
                    self.push_front(ops);
                }
            }
        }
    }

    fn push_front(&mut self, ops: Vec<Op>) {
        for op in ops.into_iter().rev() {
            self.q.push_front(op);
        }
    }
}

/// The hub driver's worker for one hub.
pub(crate) struct HubWorker {
    hub: DevId,
    runner: Runner,
    tag: u64,
}

impl HubWorker {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if ctx.dev(self.hub).is_none() {
            ctx.tags.free(self.tag, URB_SIZE);
            return None;
        }
        self.drain(ctx);
        let r = self.runner.step(ctx, Some(self.hub), &mut self.tag, now);
        self.drain(ctx);
        match r {
            Some(t) => Some(t),
            None if self.runner.busy() => Some(now + ctx.gap()),
            None => {
                ctx.tags.free(self.tag, URB_SIZE);
                if let Some(h) = ctx.dev_mut(self.hub).and_then(|d| d.hub.as_mut()) {
                    h.worker = false;
                }
                None
            }
        }
    }

    fn drain(&mut self, ctx: &mut Ctx) {
        if let Some(h) = ctx.dev_mut(self.hub).and_then(|d| d.hub.as_mut()) {
            self.runner.q.extend(h.queue.drain(..));
        }
    }
}

/// Everything the scheduler runs.
pub(crate) enum Task {
    HubWorker(HubWorker),
    /// Completion (phase 0) and resubmission (phase 1) of a hub's status URB.
    HubInt {
        hub: DevId,
        phase: u8,
    },
    /// Root hub port-status polling (`hub_poll_ms`).
    RootPoll {
        port: u8,
        every: u64,
    },
    /// Transaction errors for URBs in flight when a device went away.
    Abort {
        items: VecDeque<(DevId, u64)>,
    },
    Plug {
        path: Vec<u8>,
        cfg: Box<DeviceConfig>,
    },
    Unplug {
        dev: DevId,
    },
    Hid(HidTask),
    Storage(StorageTask),
    Iso(IsoTask),
    Flood(FloodTask),
    /// A capture being replayed (`replay:` or a control command).
    Replay(Box<super::replay::ReplayTask>),
}

impl Task {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        match self {
            Task::HubWorker(w) => w.step(ctx, now),
            Task::HubInt { hub, phase } => ctx.hub_int_step(*hub, phase, now),
            Task::RootPoll { port, every } => {
                let root = 0;
                let (bound, nports) = match ctx.dev(root) {
                    Some(d) => (d.driver_bound, d.desc.nports),
                    None => return None,
                };
                if bound {
                    *port = *port % nports + 1;
                    let op = ctrl(root, setup(0xa3, 0x00, 0, *port as u16, 4));
                    ctx.push_ops(root, vec![op], now);
                }
                Some(now + *every)
            }
            Task::Abort { items } => {
                let (dev, tag) = items.pop_front()?;
                ctx.complete(dev, tag, now, EPROTO, 0, None, Vec::new(), 0, 0);
                if items.is_empty() {
                    None
                } else {
                    Some(now + ctx.rng.range(20 * US, 150 * US))
                }
            }
            Task::Plug { path, cfg } => {
                let _ = ctx.plug(path, cfg, now);
                None
            }
            Task::Unplug { dev } => {
                ctx.unplug_dev(*dev, now);
                None
            }
            Task::Hid(t) => t.step(ctx, now),
            Task::Storage(t) => t.step(ctx, now),
            Task::Iso(t) => t.step(ctx, now),
            Task::Flood(t) => t.step(ctx, now),
            Task::Replay(t) => t.step(ctx, now),
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
    pub spawned: Vec<(u64, Task)>,
    next_devnum: u8,
    used: [bool; 128],
    pub empty: Arc<[u8]>,
    pub events: u64,
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

    pub(crate) fn spawn(&mut self, t: u64, task: Task) {
        self.spawned.push((t, task));
    }

    /// Pause between two steps of a driver.
    pub(crate) fn gap(&mut self) -> u64 {
        if self.rng.chance(1, 8) {
            self.rng.range(MS, 4 * MS)
        } else {
            self.rng.range(20 * US, 600 * US)
        }
    }

    fn event(&self, t: u64, kind: EventKind, devnum: u8, urb: &Urb) -> UrbEvent {
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
        d.inflight.push(urb);
        let devnum = d.devnum;
        let mut ev = self.event(t, EventKind::Submit, devnum, &urb);
        ev.data = data;
        ev.iso = iso;
        self.events += 1;
        self.sink.urb_event(ev);
    }

    /// Emit an `E` event (the URB never went in flight).
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
            return false;
        };
        let urb = d.inflight.swap_remove(pos);
        let devnum = d.devnum;
        let mut ev = self.event(t, EventKind::Complete, devnum, &urb);
        ev.status = status;
        ev.actual_length = actual;
        ev.data = data;
        ev.iso = iso;
        ev.start_frame = start_frame;
        ev.error_count = error_count;
        self.events += 1;
        self.sink.urb_event(ev);
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

    /// Queue work for a hub's worker, starting it if idle.
    pub(crate) fn push_ops(&mut self, hub: DevId, ops: Vec<Op>, now: u64) {
        let start = {
            let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
                return;
            };
            h.queue.extend(ops);
            !std::mem::replace(&mut h.worker, true)
        };
        if start {
            let tag = self.tags.alloc(&mut self.rng, URB_SIZE);
            let at = now + self.rng.range(5 * US, 60 * US);
            self.spawn(
                at,
                Task::HubWorker(HubWorker {
                    hub,
                    runner: Runner::default(),
                    tag,
                }),
            );
        }
    }

    fn alloc_devnum(&mut self) -> u8 {
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

    /// `(wPortStatus, wPortChange)` of a hub port.
    pub(crate) fn port_status(&self, hub: DevId, port: u8) -> (u16, u16) {
        let Some(h) = self.dev(hub).and_then(|d| d.hub.as_ref()) else {
            return (0, 0);
        };
        let Some(p) = h.ports.get(port as usize - 1) else {
            return (0, 0);
        };
        let mut st = 0;
        if p.powered {
            st |= PS_POWER;
            if let Some(c) = p.child.and_then(|c| self.dev(c)).filter(|c| !c.gone) {
                st |= PS_CONNECTION;
                match c.speed() {
                    Speed::High => st |= PS_HIGH_SPEED,
                    Speed::Low => st |= PS_LOW_SPEED,
                    Speed::Full => {}
                }
                if p.enabled {
                    st |= PS_ENABLE;
                }
            }
        }
        (st, p.change)
    }

    /// A hub request changed the state of a port (SET/CLEAR_FEATURE).
    pub(crate) fn port_feature(&mut self, hub: DevId, port: u8, feature: u16, set: bool) {
        let connected = self.port_status(hub, port).0 & PS_CONNECTION != 0;
        let Some(p) = self
            .dev_mut(hub)
            .and_then(|d| d.hub.as_mut())
            .and_then(|h| h.ports.get_mut(port as usize - 1))
        else {
            return;
        };
        match (set, feature) {
            (true, 8) if !p.powered => {
                p.powered = true;
                if p.child.is_some() {
                    p.change |= PC_CONNECTION;
                }
            }
            (true, 4) if connected => {
                p.enabled = true;
                p.change |= PC_RESET;
            }
            (false, 1) => p.enabled = false,
            (false, 8) => p.powered = false,
            (false, 0x10) => p.change &= !PC_CONNECTION,
            (false, 0x11) => p.change &= !PC_ENABLE,
            (false, 0x14) => p.change &= !PC_RESET,
            _ => {}
        }
    }

    /// A connection change on a port: let the hub's status URB complete.
    pub(crate) fn port_changed(&mut self, hub: DevId, now: u64) {
        let root = self.dev(hub).is_some_and(|d| d.kind == Kind::Root);
        let interval_ns = self
            .dev(hub)
            .map(|d| {
                let ep = &d.desc.cfg.alts[0].eps[0];
                descriptors::urb_interval(d.speed(), ep) as u64
                    * descriptors::interval_unit_ns(d.speed())
            })
            .unwrap_or(MS);
        let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
            return;
        };
        if !h.int_inflight || h.int_completion {
            return;
        }
        h.int_completion = true;
        let delay = if root {
            self.rng.range(50 * US, 600 * US)
        } else {
            self.rng.range(100 * US, interval_ns.max(200 * US))
        };
        self.spawn(now + delay, Task::HubInt { hub, phase: 0 });
    }

    fn hub_int_urb(&self, hub: DevId) -> Option<Urb> {
        let d = self.dev(hub)?;
        let ep = &d.desc.cfg.alts[0].eps[0];
        Some(Urb {
            tag: d.hub.as_ref()?.int_tag,
            xfer: XferType::Interrupt,
            ep: 1,
            dir_in: true,
            len: ep.mps as u32,
            interval: descriptors::urb_interval(d.speed(), ep),
            flags: URB_DIR_IN,
            setup: None,
            npk: 0,
        })
    }

    pub(crate) fn submit_hub_int(&mut self, hub: DevId, now: u64) {
        let Some(urb) = self.hub_int_urb(hub) else {
            return;
        };
        if !self.alive(hub) {
            return;
        }
        let e = self.empty.clone();
        self.submit(hub, urb, now, Some(e), Vec::new());
        let pending = {
            let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
                return;
            };
            h.int_inflight = true;
            h.int_completion = false;
            h.ports.iter().enumerate().any(|(i, p)| {
                p.change & (PC_CONNECTION | PC_ENABLE) != 0 && h.reported & (1 << (i + 1)) == 0
            })
        };
        if pending {
            self.port_changed(hub, now);
        }
    }

    fn hub_int_step(&mut self, hub: DevId, phase: &mut u8, now: u64) -> Option<u64> {
        if !self.alive(hub) {
            return None;
        }
        if *phase == 1 {
            self.submit_hub_int(hub, now);
            return None;
        }
        let root = self.dev(hub).is_some_and(|d| d.kind == Kind::Root);
        let (bitmap, ports, tag, mps) = {
            let d = self.dev_mut(hub)?;
            let mps = d.desc.cfg.alts[0].eps[0].mps as usize;
            let h = d.hub.as_mut()?;
            h.int_completion = false;
            let mut bits = 0u16;
            let mut ports = Vec::new();
            for (i, p) in h.ports.iter().enumerate() {
                let bit = 1u16 << (i + 1);
                if p.change & (PC_CONNECTION | PC_ENABLE) != 0 && h.reported & bit == 0 {
                    bits |= bit;
                    ports.push(i as u8 + 1);
                }
            }
            if bits == 0 {
                return None;
            }
            h.reported |= bits;
            h.int_inflight = false;
            (bits, ports, h.int_tag, mps)
        };
        let n = if root {
            (ports_len(self, hub) + 1).div_ceil(8)
        } else {
            mps
        };
        let bytes: Vec<u8> = bitmap
            .to_le_bytes()
            .iter()
            .copied()
            .chain(std::iter::repeat(0))
            .take(n)
            .collect();
        self.complete(
            hub,
            tag,
            now,
            0,
            n as u32,
            Some(Arc::from(bytes)),
            Vec::new(),
            0,
            0,
        );
        self.push_ops(hub, ports.into_iter().map(Op::PortEvent).collect(), now);
        *phase = 1;
        Some(now + self.rng.range(5 * US, 40 * US))
    }

    fn port_event_ops(&mut self, hub: DevId, port: u8) -> Vec<Op> {
        if let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) {
            h.reported &= !(1 << port);
        }
        let (_, change) = self.port_status(hub, port);
        let mut ops = vec![ctrl(hub, setup(0xa3, 0x00, 0, port as u16, 4))];
        if change & PC_CONNECTION != 0 {
            ops.push(ctrl(hub, setup(0x23, 0x01, 0x10, port as u16, 0)));
        }
        if change & PC_ENABLE != 0 {
            ops.push(ctrl(hub, setup(0x23, 0x01, 0x11, port as u16, 0)));
        }
        if let Some(child) = self.port_child(hub, port) {
            let (gone, enumerated) = self
                .dev(child)
                .map(|c| (c.gone, c.reserved != 0))
                .unwrap_or((true, true));
            if gone {
                ops.push(Op::Disconnect(child));
            } else if !enumerated {
                ops.push(Op::Connect(port));
            }
        }
        ops
    }

    fn port_child(&self, hub: DevId, port: u8) -> Option<DevId> {
        self.dev(hub)?
            .hub
            .as_ref()?
            .ports
            .get(port as usize - 1)?
            .child
    }

    fn scan_ops(&mut self, hub: DevId) -> Vec<Op> {
        let n = ports_len(self, hub) as u8;
        let mut ops = Vec::new();
        let mut connect = Vec::new();
        for p in 1..=n {
            ops.push(ctrl(hub, setup(0xa3, 0x00, 0, p as u16, 4)));
            let (st, ch) = self.port_status(hub, p);
            if ch & PC_CONNECTION != 0 {
                ops.push(ctrl(hub, setup(0x23, 0x01, 0x10, p as u16, 0)));
            }
            if st & PS_CONNECTION != 0 {
                connect.push(Op::Connect(p));
            }
        }
        ops.push(Op::Delay(self.rng.range(60 * MS, 110 * MS)));
        ops.push(Op::SubmitInt);
        ops.extend(connect);
        ops
    }

    fn connect_ops(&mut self, hub: DevId, port: u8) -> Vec<Op> {
        let Some(child) = self.port_child(hub, port) else {
            return vec![];
        };
        match self.dev(child) {
            Some(c) if !c.gone && c.reserved == 0 => {}
            _ => return vec![],
        }
        let devnum = self.alloc_devnum();
        if let Some(c) = self.dev_mut(child) {
            c.reserved = devnum;
        }
        let p = port as u16;
        let r = &mut self.rng;
        let mut ops = vec![
            Op::Delay(r.range(100 * MS, 130 * MS)),
            ctrl(hub, setup(0xa3, 0x00, 0, p, 4)),
            ctrl(hub, setup(0x23, 0x03, 0x04, p, 0)),
            Op::Delay(r.range(20 * MS, 60 * MS)),
            ctrl(hub, setup(0xa3, 0x00, 0, p, 4)),
            ctrl(hub, setup(0x23, 0x01, 0x14, p, 0)),
            Op::Delay(r.range(30 * MS, 60 * MS)),
            ctrl(child, setup(0x80, 0x06, 0x0100, 0, 64)),
            ctrl(hub, setup(0x23, 0x03, 0x04, p, 0)),
            Op::Delay(r.range(20 * MS, 60 * MS)),
            ctrl(hub, setup(0xa3, 0x00, 0, p, 4)),
            ctrl(hub, setup(0x23, 0x01, 0x14, p, 0)),
            Op::Delay(r.range(10 * MS, 40 * MS)),
        ];
        // xHCI addresses devices with a command, not a SET_ADDRESS URB.
        if self.controller != Controller::Xhci {
            ops.push(ctrl(child, setup(0x00, 0x05, devnum as u16, 0, 0)));
            ops.push(Op::Delay(self.rng.range(2 * MS, 10 * MS)));
        }
        ops.push(Op::Addressed(child));
        ops.push(Op::Enumerate(child));
        ops
    }

    fn enumerate_ops(&mut self, d: DevId) -> Vec<Op> {
        let Some(dev) = self.dev(d) else {
            return vec![];
        };
        let total = dev.desc.cfg.bytes().len() as u16;
        let i_cfg = dev.desc.cfg.i_cfg;
        let dd = &dev.desc.dev;
        let mut ops = vec![
            ctrl(d, setup(0x80, 0x06, 0x0100, 0, 18)),
            ctrl(d, setup(0x80, 0x06, 0x0200, 0, 9)),
            ctrl(d, setup(0x80, 0x06, 0x0200, 0, total)),
            ctrl(d, setup(0x80, 0x06, 0x0300, 0, 255)),
        ];
        for idx in [dd.i_prod, dd.i_mfr, dd.i_ser] {
            if idx != 0 {
                ops.push(ctrl(d, setup(0x80, 0x06, 0x0300 | idx as u16, 0x0409, 255)));
            }
        }
        ops.push(Op::Delay(self.rng.range(2 * MS, 15 * MS)));
        ops.push(ctrl(d, setup(0x00, 0x09, 1, 0, 0)));
        // usb_set_configuration caches the configuration's string.
        if i_cfg != 0 {
            ops.push(ctrl(
                d,
                setup(0x80, 0x06, 0x0300 | i_cfg as u16, 0x0409, 255),
            ));
        }
        ops.push(Op::ClassSetup(d));
        ops
    }

    fn activate_hub(&mut self, hub: DevId, now: u64) {
        let Some(d) = self.dev_mut(hub) else {
            return;
        };
        d.driver_bound = true;
        let n = d.desc.nports;
        let pwr = if d.kind == Kind::Root {
            20 * MS
        } else {
            100 * MS
        };
        let mut ops = vec![Op::NewTag];
        for p in 1..=n {
            ops.push(ctrl(hub, setup(0x23, 0x03, 0x08, p as u16, 0)));
        }
        ops.push(Op::Delay(pwr + self.rng.range(MS, 15 * MS)));
        ops.push(Op::Scan);
        self.push_ops(hub, ops, now);
    }

    /// Attach a new device below `parent` on `port` (1-based).
    pub(crate) fn attach(
        &mut self,
        parent: DevId,
        port: u8,
        cfg: &DeviceConfig,
        now: u64,
    ) -> Result<DevId, String> {
        let (pspeed, level, mut path) = {
            let p = self.dev(parent).ok_or("no such hub")?;
            if p.gone {
                return Err("the hub is disconnected".into());
            }
            let h = p.hub.as_ref().ok_or("not a hub")?;
            let slot = h
                .ports
                .get(port as usize - 1)
                .ok_or_else(|| format!("the hub has {} ports, not {}", h.ports.len(), port))?;
            if slot.child.is_some() {
                return Err(format!("port {port} is in use"));
            }
            let path = if p.kind == Kind::Root {
                Vec::new()
            } else {
                p.path.clone()
            };
            (p.speed(), p.level + 1, path)
        };
        path.push(port);
        let speed = descriptors::natural_speed(cfg.kind).min(pspeed);
        let salt = self.rng.next_u64();
        let desc = descriptors::device(cfg, speed, self.bus, &path, salt);
        let hub = if cfg.kind == DeviceKind::Hub {
            Some(HubState {
                ports: vec![Port::default(); desc.nports as usize],
                int_tag: self.tags.alloc(&mut self.rng, URB_SIZE),
                ..Default::default()
            })
        } else {
            None
        };
        let class_tag = self.tags.alloc(&mut self.rng, URB_SIZE);
        let id = self.devs.len();
        self.devs.push(Some(Device {
            kind: Kind::Dev(cfg.kind),
            cfg: Some(cfg.clone()),
            parent: Some(parent),
            port,
            level,
            path: path.clone(),
            desc,
            devnum: 0,
            reserved: 0,
            visible: false,
            strings_read: false,
            configured: false,
            driver_bound: false,
            alt: [0; 4],
            hub,
            inflight: Vec::new(),
            gone: false,
            xfers: 0,
            errors: cfg.errors,
            faults: Default::default(),
            class_tag,
        }));
        let powered = {
            let h = self.dev_mut(parent).and_then(|d| d.hub.as_mut()).unwrap();
            let slot = &mut h.ports[port as usize - 1];
            slot.child = Some(id);
            slot.enabled = false;
            if slot.powered {
                slot.change |= PC_CONNECTION;
            }
            slot.powered
        };
        if powered {
            self.port_changed(parent, now);
        }
        if let Some(ms) = cfg.unplug_after_ms {
            self.spawn((ms * MS).max(now + MS), Task::Unplug { dev: id });
        }
        for child in &cfg.devices {
            let mut cpath = path.clone();
            cpath.push(child.port.0);
            if child.plug_after_ms * MS <= now {
                let _ = self.attach(id, child.port.0, child, now);
            } else {
                self.spawn(
                    child.plug_after_ms * MS,
                    Task::Plug {
                        path: cpath,
                        cfg: Box::new(child.clone()),
                    },
                );
            }
        }
        Ok(id)
    }

    /// Find the device at `path` (root ports first); `[]` is the root hub.
    pub(crate) fn find(&self, path: &[u8]) -> Option<DevId> {
        let mut cur = 0;
        for &p in path {
            cur = self.port_child(cur, p)?;
        }
        Some(cur)
    }

    pub(crate) fn plug(&mut self, path: &[u8], cfg: &DeviceConfig, now: u64) -> Result<(), String> {
        let (&port, parent_path) = path.split_last().ok_or("empty port path")?;
        let parent = self
            .find(parent_path)
            .ok_or_else(|| format!("no hub at {parent_path:?}"))?;
        if port == 0 {
            return Err("port numbers start at 1".into());
        }
        self.attach(parent, port, cfg, now).map(|_| ())
    }

    pub(crate) fn unplug(&mut self, path: &[u8], now: u64) -> Result<(), String> {
        if path.is_empty() {
            return Err("cannot unplug the root hub".into());
        }
        let id = self
            .find(path)
            .ok_or_else(|| format!("no device at {path:?}"))?;
        if self.dev(id).is_some_and(|d| d.gone) {
            return Err(format!("the device at {path:?} is already unplugged"));
        }
        self.unplug_dev(id, now);
        Ok(())
    }

    fn subtree(&self, id: DevId, out: &mut Vec<DevId>) {
        if let Some(d) = self.dev(id) {
            if let Some(h) = &d.hub {
                for p in &h.ports {
                    if let Some(c) = p.child {
                        self.subtree(c, out);
                    }
                }
            }
            out.push(id);
        }
    }

    /// Electrical disconnect: in-flight transfers fail, the hub notices.
    pub(crate) fn unplug_dev(&mut self, id: DevId, now: u64) {
        if !self.alive(id) {
            return;
        }
        let mut all = Vec::new();
        self.subtree(id, &mut all);
        let mut items = VecDeque::new();
        for &d in &all {
            let dev = self.dev_mut(d).unwrap();
            dev.gone = true;
            if let Some(h) = dev.hub.as_mut() {
                h.int_inflight = false;
            }
            for u in &dev.inflight {
                if u.xfer != XferType::Iso {
                    items.push_back((d, u.tag));
                }
            }
        }
        if !items.is_empty() {
            let at = now + self.rng.range(100 * US, 1000 * US);
            self.spawn(at, Task::Abort { items });
        }
        let (parent, port) = {
            let d = self.dev(id).unwrap();
            (d.parent, d.port)
        };
        if let Some(parent) = parent {
            if self.alive(parent) {
                if let Some(slot) = self
                    .dev_mut(parent)
                    .and_then(|d| d.hub.as_mut())
                    .and_then(|h| h.ports.get_mut(port as usize - 1))
                {
                    slot.enabled = false;
                    slot.change |= PC_CONNECTION;
                }
                self.port_changed(parent, now);
            }
        }
    }

    /// usb_disconnect: URBs still in flight are killed (-108), the devices go.
    fn disconnect(&mut self, id: DevId, now: u64) {
        let mut all = Vec::new();
        self.subtree(id, &mut all);
        for &d in &all {
            let urbs: Vec<Urb> = self.dev(d).map(|x| x.inflight.clone()).unwrap_or_default();
            for u in urbs {
                // Killed ISO URBs report their packets untransferred.
                let pkt = u.len.checked_div(u.npk).unwrap_or(0);
                let iso = (0..u.npk)
                    .map(|i| IsoDesc {
                        status: EXDEV,
                        offset: i * pkt,
                        length: 0,
                    })
                    .collect();
                self.complete(d, u.tag, now, ESHUTDOWN, 0, None, iso, 0, 0);
            }
            if let Some(dev) = self.devs[d].take() {
                if dev.reserved != 0 {
                    self.used[dev.reserved as usize] = false;
                }
                self.tags.free(dev.class_tag, URB_SIZE);
                if let Some(h) = dev.hub {
                    self.tags.free(h.int_tag, URB_SIZE);
                }
                if let Some(p) = dev.parent {
                    if let Some(slot) = self
                        .dev_mut(p)
                        .and_then(|x| x.hub.as_mut())
                        .and_then(|h| h.ports.get_mut(dev.port as usize - 1))
                    {
                        if slot.child == Some(d) {
                            slot.child = None;
                            slot.enabled = false;
                        }
                    }
                }
            }
        }
    }

    fn start_streams(&mut self, d: DevId, now: u64) {
        let Some(dev) = self.dev_mut(d) else {
            return;
        };
        dev.driver_bound = true;
        let Kind::Dev(kind) = dev.kind else {
            return;
        };
        let at = now + self.rng.range(MS, 8 * MS);
        match kind {
            DeviceKind::HidKeyboard | DeviceKind::HidMouse | DeviceKind::HidTablet => {
                if let Some(t) = HidTask::new(self, d, at) {
                    self.spawn(at, Task::Hid(t));
                }
            }
            DeviceKind::MassStorage => {
                let t = StorageTask::new(self, d);
                // usb-storage waits `delay_use` before scanning (shortened).
                let at = now + self.rng.range(200 * MS, 300 * MS);
                self.spawn(at, Task::Storage(t));
            }
            DeviceKind::Audio | DeviceKind::Webcam => {
                if let Some(t) = IsoTask::new(self, d, at) {
                    self.spawn(at, Task::Iso(t));
                }
            }
            DeviceKind::Flood => {
                let t = FloodTask::new(self, d);
                self.spawn(at, Task::Flood(t));
            }
            DeviceKind::Hub => {}
        }
    }
}

fn ports_len(ctx: &Ctx, hub: DevId) -> usize {
    ctx.dev(hub)
        .and_then(|d| d.hub.as_ref())
        .map(|h| h.ports.len())
        .unwrap_or(0)
}

/// One bus: its simulation state and scheduler.
pub(crate) struct Bus {
    pub ctx: Ctx,
    tasks: Vec<Option<Task>>,
    free: Vec<usize>,
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    seq: u64,
    /// Local time of the last step.
    pub cur: u64,
    pub paused: bool,
    pub pause_start: u64,
    pub realtime: bool,
}

impl Bus {
    pub(crate) fn new(
        cfg: &BusConfig,
        seed: u64,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn UrbSink>,
    ) -> Bus {
        let busnum = cfg.bus.0;
        let mut rng = Rng::new(seed ^ (busnum as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let mut tags = TagAlloc::new();
        let desc = descriptors::root_hub(cfg.controller, cfg.ports.0, busnum);
        let int_tag = tags.alloc(&mut rng, URB_SIZE);
        let class_tag = tags.alloc(&mut rng, URB_SIZE);
        let mut used = [false; 128];
        used[1] = true;
        let root = Device {
            kind: Kind::Root,
            cfg: None,
            parent: None,
            port: 0,
            level: 0,
            path: Vec::new(),
            devnum: 1,
            reserved: 1,
            visible: true,
            strings_read: false,
            configured: false,
            driver_bound: false,
            alt: [0; 4],
            hub: Some(HubState {
                ports: vec![Port::default(); desc.nports as usize],
                int_tag,
                ..Default::default()
            }),
            desc,
            inflight: Vec::new(),
            gone: false,
            xfers: 0,
            errors: ErrorConfig::default(),
            faults: Default::default(),
            class_tag,
        };
        let ctx = Ctx {
            bus: busnum,
            controller: cfg.controller,
            rng,
            tags,
            devs: vec![Some(root)],
            sink,
            clock,
            offset: 0,
            floor: 0,
            spawned: Vec::new(),
            next_devnum: 2,
            used,
            empty: Arc::from(Vec::new()),
            events: 0,
        };
        let mut bus = Bus {
            ctx,
            tasks: Vec::new(),
            free: Vec::new(),
            heap: BinaryHeap::new(),
            seq: 0,
            cur: 0,
            paused: false,
            pause_start: 0,
            realtime: false,
        };
        if cfg.replay.is_some() {
            // A replayed bus: the capture is its only traffic (no root hub
            // enumeration or polling); UsbSim adds the replay task.
            return bus;
        }
        let c = &mut bus.ctx;
        for d in &cfg.devices {
            if d.plug_after_ms == 0 {
                let _ = c.attach(0, d.port.0, d, 0);
            } else {
                c.spawn(
                    d.plug_after_ms * MS,
                    Task::Plug {
                        path: vec![d.port.0],
                        cfg: Box::new(d.clone()),
                    },
                );
            }
        }
        let start = c.rng.range(MS, 5 * MS);
        c.push_ops(0, vec![Op::Enumerate(0)], start);
        if cfg.hub_poll_ms > 0 {
            let every = cfg.hub_poll_ms as u64 * MS;
            c.spawn(every, Task::RootPoll { port: 0, every });
        }
        bus.flush_spawned(0);
        bus
    }

    fn flush_spawned(&mut self, min_t: u64) {
        let spawned = std::mem::take(&mut self.ctx.spawned);
        for (t, task) in spawned {
            let idx = match self.free.pop() {
                Some(i) => {
                    self.tasks[i] = Some(task);
                    i
                }
                None => {
                    self.tasks.push(Some(task));
                    self.tasks.len() - 1
                }
            };
            self.seq += 1;
            self.heap.push(Reverse((t.max(min_t), self.seq, idx)));
        }
    }

    /// Local time of the next step.
    pub(crate) fn next_time(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Run steps due at or before `limit` (local time), at most `max_steps`.
    pub(crate) fn run_until(&mut self, limit: u64, max_steps: usize) -> usize {
        let mut n = 0;
        while n < max_steps {
            let Some(&Reverse((t, _, idx))) = self.heap.peek() else {
                break;
            };
            if t > limit {
                break;
            }
            self.heap.pop();
            n += 1;
            self.cur = t;
            let Some(mut task) = self.tasks[idx].take() else {
                continue;
            };
            match task.step(&mut self.ctx, t) {
                Some(next) => {
                    self.tasks[idx] = Some(task);
                    self.seq += 1;
                    self.heap.push(Reverse((next.max(t), self.seq, idx)));
                }
                None => self.free.push(idx),
            }
            if !self.ctx.spawned.is_empty() {
                self.flush_spawned(t);
            }
        }
        n
    }

    /// Local time for an external request (plug/unplug) arriving now.
    fn request_time(&self) -> u64 {
        if self.realtime && !self.paused {
            self.cur
                .max(self.ctx.clock.sim_now().saturating_sub(self.ctx.offset))
        } else {
            self.cur
        }
    }

    /// Schedule a task from outside (a replay) at the current local time.
    pub(crate) fn add_task(&mut self, task: Task) {
        let now = self.request_time();
        self.ctx.spawn(now, task);
        self.flush_spawned(now);
    }

    pub(crate) fn plug(&mut self, path: &[u8], cfg: &DeviceConfig) -> Result<(), String> {
        let now = self.request_time();
        let r = self.ctx.plug(path, cfg, now);
        self.flush_spawned(now);
        r
    }

    pub(crate) fn unplug(&mut self, path: &[u8]) -> Result<(), String> {
        let now = self.request_time();
        let r = self.ctx.unplug(path, now);
        self.flush_spawned(now);
        r
    }

    /// Make the next data transfer of the device at `path` end with `fault`.
    pub(crate) fn inject(&mut self, path: &[u8], fault: Fault) -> Result<(), String> {
        if path.is_empty() {
            return Err("faults go to a device, not the root hub".into());
        }
        let id = self
            .ctx
            .find(path)
            .ok_or_else(|| format!("no device at {path:?}"))?;
        match self.ctx.dev_mut(id) {
            Some(d) if !d.gone => {
                d.faults.push_back(fault);
                Ok(())
            }
            _ => Err(format!("the device at {path:?} is unplugged")),
        }
    }
}
