//! The bus's shared data: the device tree (devices, ports, hub state),
//! URBs and their tags and outcomes, and the control-op vocabulary the
//! sequencer runs ([`Op`], [`setup`], [`ctrl`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use crate::config::{DeviceConfig, DeviceKind, ErrorConfig};
use crate::usbmon::event::{IsoDesc, XferType, URB_DIR_IN};

use crate::sim::rng::Rng;
use crate::sim::usb::descriptors::{Descriptors, Speed};
use crate::sim::usb::peer::PeerError;
use crate::usbcore::device::UrbDone;

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

/// Interfaces a configuration may have (the kernel's USB_MAXINTERFACES).
pub(crate) const MAX_INTERFACES: usize = 32;

/// A device's name on its bus ([`DevSlots`]): its slot in the low 32 bits
/// and the slot's generation above them, so that a slot freed by an
/// unplug can hold the next device while whatever still holds the old
/// name (a task, an open usbfs file, a URB) finds nothing there.
pub(crate) type DevId = usize;

/// The devices of a bus, each in a slot that an unplugged device gives
/// back for the next plug: the table is as large as the most devices the
/// bus had at once, however often devices come and go.
#[derive(Default)]
pub(crate) struct DevSlots {
    slots: Vec<Option<Box<Device>>>,
    /// Each slot's generation: bumped when its device is removed.
    gens: Vec<u32>,
    /// Empty slots, the most recently freed last.
    free: Vec<usize>,
}

/// The bits of a [`DevId`] that hold its slot.
const SLOT_BITS: u32 = 32;

impl DevSlots {
    fn split(id: DevId) -> (usize, u32) {
        let id = id as u64;
        ((id & 0xffff_ffff) as usize, (id >> SLOT_BITS) as u32)
    }

    /// The name of the device in slot `i` now.
    fn id(&self, i: usize) -> DevId {
        ((u64::from(self.gens[i]) << SLOT_BITS) | i as u64) as DevId
    }

    fn slot(&self, id: DevId) -> Option<usize> {
        let (i, g) = Self::split(id);
        (self.gens.get(i) == Some(&g)).then_some(i)
    }

    /// The device named `id`, if it is still there.
    pub(crate) fn get(&self, id: DevId) -> Option<&Device> {
        self.slots[self.slot(id)?].as_deref()
    }

    /// The device named `id`, if it is still there.
    pub(crate) fn get_mut(&mut self, id: DevId) -> Option<&mut Device> {
        let i = self.slot(id)?;
        self.slots[i].as_deref_mut()
    }

    /// Put `dev` in a free slot (the first device gets id 0); its name.
    pub(crate) fn insert(&mut self, dev: Device) -> DevId {
        let i = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(None);
                self.gens.push(0);
                self.slots.len() - 1
            }
        };
        self.slots[i] = Some(Box::new(dev));
        self.id(i)
    }

    /// Take the device named `id` out; its slot is free for the next one
    /// and `id` names nothing from now on.
    pub(crate) fn remove(&mut self, id: DevId) -> Option<Box<Device>> {
        let i = self.slot(id)?;
        let dev = self.slots[i].take()?;
        self.gens[i] = self.gens[i].wrapping_add(1);
        self.free.push(i);
        Some(dev)
    }

    /// How many slots the table has (the most devices it held at once).
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Every device with its name, in slot order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (DevId, &Device)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(i, d)| Some((self.id(i), d.as_deref()?)))
    }
}

pub(crate) const ENOENT: i32 = -2;
pub(crate) const ENODEV: i32 = -19;
pub(crate) const EXDEV: i32 = -18;
pub(crate) const EPIPE: i32 = -32;
pub(crate) const EPROTO: i32 = -71;
pub(crate) const EOVERFLOW: i32 = -75;
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
    /// The submitter's `start_frame` (0 for drivers' URBs): usbmon shows it
    /// at submission, and at completion for all but isochronous URBs.
    pub start_frame: i32,
    /// An isochronous URB's first (micro)frame as its controller placed it
    /// ([`super::Ctx::start_frame`]): what its completion reports, a kill's
    /// included (the HCD set `urb->start_frame` when it queued the URB).
    pub sched_frame: i32,
}

impl Urb {
    /// A control URB for `setup` on ep0: its direction and length come
    /// from the setup packet (bmRequestType bit 7, wLength).
    /// The URB with `flags` added to its `transfer_flags`.
    pub(crate) fn with_flags(mut self, flags: u32) -> Urb {
        self.flags |= flags;
        self
    }

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
            start_frame: 0,
            sched_frame: 0,
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
    /// How the status URB in flight ends: an injected fault, or (Ok) with
    /// the next port change.
    pub int_outcome: Outcome,
    /// hub->nerrors: the status URB's errors in a row.
    pub nerrors: u32,
    /// hub->error: the error that, the tenth in a row, asked hub_event to
    /// reset the hub (0: none).
    pub error: i32,
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
    /// What the device's function sends on its IN endpoint and takes on
    /// its OUT endpoint, whoever submits (a HID device's reports, a flood
    /// gadget's source and sink): a driver's URBs and a program's alike.
    pub function_in: Option<Box<dyn InFunction>>,
    /// The SCSI target behind its bulk endpoints over the bulk-only
    /// transport (a flash drive's): it answers usb-storage's URBs and, once
    /// a program took the interface, the program's alike.
    pub target: Option<Box<crate::sim::usb::scsi::Bot>>,
    /// The interfaces its model lets drivers bind (None: all): a dump's
    /// device only those whose report descriptor it is given.
    pub bindable: Option<Vec<u8>>,
    /// Current alternate setting per interface number (USB_MAXINTERFACES
    /// of them, as usbfs allows).
    pub alt: [u8; MAX_INTERFACES],
    pub hub: Option<HubState>,
    /// URBs in flight, in submission order: each endpoint's queue is its
    /// URBs here (see [`super::endpoint`]).
    pub inflight: Vec<Urb>,
    /// Answers that wait for earlier URBs of their endpoint.
    pub held: Vec<Held>,
    /// When its endpoints are next free, for the generic answerer.
    pub sched: Sched,
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
    /// What programs did to it through the USB core (usbfs).
    pub core: CoreDev,
    /// A HID device's idle rate and protocol (SET_IDLE, SET_PROTOCOL; read
    /// back by GET_IDLE, GET_PROTOCOL): 0, and the report protocol (1).
    pub hid_idle: u8,
    pub hid_protocol: u8,
    /// A HID device's input report as it stands (the last one its
    /// interrupt endpoint gave), which qemu's devices answer GET_REPORT
    /// with.
    pub hid_last: Vec<u8>,
    /// The report descriptors usbhid's probe read from an external
    /// device's peer, by interface (empty: the probe failed).
    pub hid_probed: Vec<(u8, Vec<u8>)>,
    /// Interfaces of an external device whose driver's probe requests
    /// (cdc_acm's line coding) are still going to the peer: the driver is
    /// bound once they are done, as the kernel's probe returns after them.
    pub probe_pending: Vec<u8>,
    /// The answers an external device's peer gave its drivers' probe
    /// requests, by interface, in order (cp210x's part number, ch341's
    /// chip version), for the drivers' next requests and their parts above
    /// the core; an interface's are dropped when its driver probes again.
    pub probe_answers: Vec<(u8, crate::usbcore::device::ProbeAnswer)>,
    /// What the device model of its class keeps of its own (an audio
    /// device's mixer controls, say), of a type the class defines; None
    /// until the class first needs it.
    pub class_state: Option<Box<dyn std::any::Any + Send>>,
}

/// The answer to a URB that waits behind earlier URBs of its endpoint.
pub(crate) struct Held {
    pub tag: u64,
    pub status: i32,
    pub actual: u32,
    pub data: Option<Arc<[u8]>>,
    pub iso: Vec<IsoDesc>,
    pub start_frame: i32,
    pub error_count: i32,
}

/// When a device's periodic endpoints are next free, in realistic time
/// (ns; in fast timing, local time is a thousandth of it): what the
/// generic answerer schedules a program's URB from.
#[derive(Default)]
pub(crate) struct Sched {
    /// (endpoint key, free from).
    free: Vec<(u8, u64)>,
}

impl Sched {
    /// When the endpoint `key` is free (0: never used).
    pub(crate) fn free_at(&self, key: u8) -> u64 {
        self.free
            .iter()
            .find(|(k, _)| *k == key)
            .map_or(0, |(_, t)| *t)
    }

    /// The endpoint `key` is busy until `t`.
    pub(crate) fn busy_until(&mut self, key: u8, t: u64) {
        match self.free.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = t,
            None => self.free.push((key, t)),
        }
    }
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
    /// The device model's peer, for programs' URBs (external devices).
    pub peer: Option<ProgramPeer>,
    /// Replay for programs: the walk through the capture and the URBs
    /// waiting on it.
    pub replay: ReplayWalk,
    /// How often each interface's driver was unbound: a driver task
    /// started before the last unbind of its interface ends.
    pub unbinds: [u32; MAX_INTERFACES],
    /// usbhid's reports for the HID core waiting for its URBs, oldest
    /// first (`core_view::report`).
    pub hid_reports: VecDeque<HidReport>,
    /// The task sending `hid_reports` runs.
    pub hid_sending: bool,
    /// usbhid's interrupt OUT URB of each interface that has one and sent
    /// a report (its address, made at its first report).
    pub hid_urbout: Vec<(u8, u64)>,
}

/// A report usbhid sends for the HID core on a URB of its own
/// (`CoreRequest::HidReport`), and who is told how it ended.
pub(crate) struct HidReport {
    pub interface: u8,
    pub endpoint: Option<u8>,
    pub setup: [u8; 8],
    pub out: Vec<u8>,
    pub done: Arc<dyn UrbDone>,
    /// The request's id, for a report that never reaches a URB.
    pub id: u64,
}

/// A recorded device's walk through its capture for programs (replay for
/// programs, `replay_program`), and the programs' URBs waiting on it.
#[derive(Default)]
pub(crate) struct ReplayWalk {
    /// The next record (`RecordedDevice::steps`).
    pub pos: usize,
    /// URBs waiting, oldest first.
    pub queue: Vec<ReplayWaiting>,
    /// When the last URB the walk completed is given back: the next one
    /// not before, so that they complete in the walk's order.
    pub last_at: u64,
}

impl ReplayWalk {
    /// URB `tag` ended another way (killed, unplugged).
    pub(crate) fn forget(&mut self, tag: u64) {
        self.queue.retain(|w| w.urb.tag != tag);
    }
}

/// A program's URB waiting on a replay's walk.
pub(crate) struct ReplayWaiting {
    pub urb: Urb,
    /// OUT data.
    pub out: Option<Arc<[u8]>>,
    /// An isochronous URB's packet lengths.
    pub pkts: Vec<u32>,
    /// An isochronous URB's place on its endpoint's schedule (its first
    /// frame is `urb.sched_frame`): when its last frame ends, and how many
    /// of its first packets' frames had passed (`IsoSlot`).
    pub iso_end: u64,
    pub iso_late: u32,
    /// When it was submitted (the bus's clock).
    pub since: u64,
    /// The recorded submission (`RecordedDevice::submissions`) it was
    /// matched to.
    pub matched: Option<usize>,
    /// The first record it can be matched at, as last looked for
    /// (`usize::MAX`: none).
    pub next: usize,
}

/// An external device's peer as programs' and host drivers' URBs reach
/// it: lines go out through `tx`; answers to the ids in `answers.pending`
/// (programs') and `answers.drivers` (the drivers' data URBs,
/// `driver::peer_loop`) come back in `answers` (the device model's reader
/// puts them there).
pub(crate) struct ProgramPeer {
    pub tx: crate::sim::usb::peer::input::Input,
    pub answers: Arc<std::sync::Mutex<PeerAnswers>>,
    /// Move the answers to programs' and drivers' URBs that the peer sent
    /// meanwhile into `answers` (the model takes its own at its steps).
    pub poll: Box<dyn Fn() + Send>,
    /// The next id of a driver's URB: one counter with the device model's
    /// own requests (its control requests, its isochronous URBs).
    pub ids: Arc<std::sync::atomic::AtomicU64>,
}

impl ProgramPeer {
    /// A fresh id for a driver's URB.
    pub(crate) fn id(&self) -> u64 {
        self.ids.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }
}

/// Answers of a peer to programs' URBs.
#[derive(Default)]
pub(crate) struct PeerAnswers {
    /// Ids sent to the peer and not answered.
    pub pending: HashSet<u64>,
    /// Ids of drivers' URBs sent to the peer and not answered: their
    /// answers are taken at the drivers' polls, in no order with the
    /// others (they hold no program's answer back).
    pub drivers: HashSet<u64>,
    /// Answers to drivers' URBs, not taken yet.
    loose: HashMap<u64, PeerAnswer>,
    /// Answers: id -> (the order they came in, (status, actual, data,
    /// packets (status, actual))).
    done: HashMap<u64, (u64, PeerAnswer)>,
    /// How many answers came so far.
    answered: u64,
    /// Ids of URBs the program discarded: the peer, told to unlink them,
    /// may have answered already, and such a late answer is not a
    /// protocol error.
    discarded: RecentIds<DISCARDED>,
    /// Ids of drivers' URBs the driver gave up on (killed, timed out),
    /// likewise: as many as lines can wait for the peer and as many again
    /// ([`GAVE_UP`]).
    gave_up: RecentIds<GAVE_UP>,
}

/// Discarded program URB ids remembered for late answers.
const DISCARDED: usize = 4096;
/// Drivers' URB ids given up on remembered for late answers: as many as
/// lines can wait for the peer (each costing at least its
/// `LINE_COST`), and as many again for the lines in the pipe or socket
/// and the peer's own buffers.
const GAVE_UP: usize = 2 * crate::sim::usb::peer::OUTBOX_BYTES / crate::sim::usb::peer::LINE_COST;

impl PeerAnswers {
    /// Whether URB `id` waits for its answer (a program's or a driver's).
    pub fn waits(&self, id: u64) -> bool {
        self.pending.contains(&id) || self.drivers.contains(&id)
    }

    /// Whether a driver's URB `id` was answered and its answer not taken
    /// yet.
    pub fn driver_answered(&self, id: u64) -> bool {
        self.loose.contains_key(&id)
    }

    /// The peer answered URB `id`.
    pub fn answer(&mut self, id: u64, a: PeerAnswer) {
        if self.drivers.remove(&id) {
            self.loose.insert(id, a);
            return;
        }
        self.pending.remove(&id);
        self.answered += 1;
        self.done.insert(id, (self.answered, a));
    }

    /// The answer to URB `id`, once every answer the peer gave before it
    /// was taken: the peer's answers complete in the order it gave them
    /// (a loopback's IN data never completes before the OUT transfer that
    /// brought it).
    pub fn take(&mut self, id: u64) -> Option<PeerAnswer> {
        if let Some(a) = self.loose.remove(&id) {
            return Some(a);
        }
        let seq = self.done.get(&id)?.0;
        if self.done.values().any(|(s, _)| *s < seq) {
            return None;
        }
        self.done.remove(&id).map(|(_, a)| a)
    }

    /// URB `id` ended without its answer (the core completed it another
    /// way): its answer, if one comes or came, holds no other back.
    pub fn forget(&mut self, id: u64) {
        self.pending.remove(&id);
        self.done.remove(&id);
        self.drivers.remove(&id);
        self.loose.remove(&id);
    }

    /// The program discarded URB `id`: forget it, and let a late answer
    /// to it go.
    pub fn discard(&mut self, id: u64) {
        self.forget(id);
        self.discarded.insert(id);
    }

    /// A driver gave up on its URB `id`: forget it, and let a late answer
    /// to it go.
    pub fn give_up(&mut self, id: u64) {
        self.forget(id);
        self.gave_up.insert(id);
    }

    /// Whether `id` is a URB the program discarded or a driver gave up on.
    pub fn was_discarded(&self, id: u64) -> bool {
        self.discarded.contains(id) || self.gave_up.contains(id)
    }
}

/// URB ids given up on, remembered so that a late answer to one is let
/// go: the newest `CAP` of them, the oldest forgotten first.
#[derive(Default)]
pub(crate) struct RecentIds<const CAP: usize> {
    /// Oldest first.
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

impl<const CAP: usize> RecentIds<CAP> {
    /// Remember `id`, forgetting the oldest past `CAP`.
    pub fn insert(&mut self, id: u64) {
        if !self.set.insert(id) {
            return;
        }
        if self.order.len() >= CAP {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        self.order.push_back(id);
    }

    /// Whether `id` is remembered.
    pub fn contains(&self, id: u64) -> bool {
        self.set.contains(&id)
    }
}

/// One answer of a peer: status, actual length, IN data, and for
/// isochronous URBs each packet's status and actual length.
pub(crate) type PeerAnswer = (i32, u32, Vec<u8>, Option<Vec<(i32, u32)>>);

/// A program's URB in flight (usbfs): who is told when it completes.
pub(crate) struct ProgramUrb {
    pub dev: DevId,
    pub done: Arc<dyn UrbDone>,
    /// The tag's object size (to free it); 0: the URB is a kernel
    /// driver's own (usbhid's control or output URB, sent for the HID
    /// core), kept by the driver when it completes and killed when the
    /// driver unbinds.
    pub size: u64,
    /// The peer's id of it, if a peer answers it.
    pub peer_id: Option<u64>,
}

/// The bus as the USB core's users see it: who is told of devices, and
/// programs' URBs in flight by tag.
#[derive(Default)]
pub(crate) struct CoreState {
    /// The stream of topology changes, one for every bus of the simulator.
    pub changes: Arc<crate::usbcore::device::DeviceChanges>,
    /// The kernel drivers' IN data (usbhid's reports), for the HID core.
    pub inputs: Arc<crate::usbcore::device::DriverInputs>,
    pub urbs: HashMap<u64, ProgramUrb>,
    /// Core requests (usbfs's SETINTERFACE, RESET, CONNECT...) a program
    /// waits for: the bus does not nap while there are any.
    pub requests: Arc<std::sync::atomic::AtomicUsize>,
}

/// A core request's completion, counted in [`CoreState::requests`] until
/// it is told.
pub(crate) struct CountedDone {
    pub inner: Arc<dyn UrbDone>,
    pub requests: Arc<std::sync::atomic::AtomicUsize>,
    pub told: std::sync::atomic::AtomicBool,
}

impl UrbDone for CountedDone {
    fn done(&self, urb: u64, result: crate::usbcore::device::UrbResult) {
        use std::sync::atomic::Ordering;
        if !self.told.swap(true, Ordering::SeqCst) {
            self.requests.fetch_sub(1, Ordering::SeqCst);
        }
        self.inner.done(urb, result);
    }
}

impl Device {
    /// Its configured `transfer_size` (a flood gadget's buffer and
    /// usbtest's URBs), 512 bytes by default, at least 1.
    pub(crate) fn transfer_size(&self) -> u32 {
        self.cfg
            .as_ref()
            .and_then(|c| c.transfer_size)
            .map_or(512, |t| t.0)
            .max(1)
    }

    /// Whether interface `num` may have a driver now: the device's
    /// drivers were probed and its model lets them bind that interface.
    pub(crate) fn may_bind(&self, num: u8) -> bool {
        self.driver_bound && self.bindable.as_ref().is_none_or(|b| b.contains(&num))
    }

    /// A device of `kind` with descriptors `desc` as it is before the hub
    /// driver sees it: no address, not configured, no driver, nothing in
    /// flight, no parent (the caller sets where it is).
    pub(crate) fn new(kind: Kind, desc: Descriptors, class_tag: u64) -> Device {
        Device {
            kind,
            cfg: None,
            parent: None,
            port: 0,
            level: 0,
            path: Vec::new(),
            desc,
            devnum: 0,
            reserved: 0,
            visible: false,
            strings_read: false,
            configured: false,
            driver_bound: false,
            function_in: None,
            target: None,
            bindable: None,
            alt: [0; MAX_INTERFACES],
            hub: None,
            inflight: Vec::new(),
            held: Vec::new(),
            sched: Default::default(),
            gone: false,
            xfers: 0,
            errors: ErrorConfig::default(),
            faults: Default::default(),
            class_tag,
            ep0: None,
            remote_ep0: false,
            given_up: false,
            enum_try: 0,
            core: Default::default(),
            hid_idle: 0,
            hid_protocol: 1,
            hid_last: Vec::new(),
            hid_probed: Vec::new(),
            probe_pending: Vec::new(),
            probe_answers: Vec::new(),
            class_state: None,
        }
    }

    /// The endpoint `addr` in the settings its interfaces have now (any
    /// setting's if none of them has it).
    pub(crate) fn active_endpoint(&self, addr: u8) -> Option<&super::super::descriptors::EpDesc> {
        let cfg = &self.desc.cfg;
        cfg.alts
            .iter()
            .filter(|a| self.alt.get(a.num as usize).copied().unwrap_or(0) == a.alt)
            .flat_map(|a| a.eps.iter())
            .find(|e| e.addr == addr)
            .or_else(|| cfg.endpoint(addr))
    }

    /// A periodic URB of this device's interval and the device's
    /// (micro)frame, ns of realistic time.
    pub(crate) fn period(&self, urb: &Urb) -> (u64, u64) {
        let unit = super::super::descriptors::interval_unit_ns(self.speed());
        (urb.interval.max(1) as u64 * unit, unit)
    }

    pub(crate) fn is_hub(&self) -> bool {
        self.hub.is_some()
    }
    pub(crate) fn speed(&self) -> Speed {
        self.desc.speed
    }
}

/// The binding a driver task runs under ([`super::Ctx::owner`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The interface.
    pub intf: u8,
    /// Its unbind count when the task started.
    pub unbinds: u32,
}

/// A device function's data on an IN endpoint, for whichever URB heads
/// it: when the next one is due, and its bytes (an interrupt or bulk
/// endpoint's, `ep` its address: a function with one IN endpoint, as the
/// HID devices' and the gadget's source, ignores it; a capture's has one
/// recording per endpoint), or what an isochronous URB's packets carry;
/// and what it takes of an OUT transfer (a gadget's sink).
pub(crate) trait InFunction: Send {
    /// A URB was submitted on IN endpoint `ep` at `now` and ends as
    /// `outcome`: when it completes (on the endpoint's polling grid), or
    /// None to leave it pending for good (the default: a function without
    /// interrupt data).
    fn due(&mut self, _ctx: &mut super::Ctx, _ep: u8, _now: u64, _outcome: Outcome) -> Option<u64> {
        None
    }
    /// The data of a completion on IN endpoint `ep` without a fault:
    /// (actual length, bytes).
    fn data(&mut self, ctx: &mut super::Ctx, _ep: u8, _now: u64) -> (u32, Arc<[u8]>) {
        (0, ctx.empty.clone())
    }
    /// The packets of an isochronous IN URB whose first packet goes at
    /// `start`: `npk` packets of at most `len` bytes, `pkt_ns` apart, as
    /// (buffer of `npk * len` bytes, each packet's length); None: the
    /// function sends nothing isochronous (the default).
    fn iso(
        &mut self,
        _ctx: &mut super::Ctx,
        _start: u64,
        _npk: u32,
        _len: u32,
        _pkt_ns: u64,
    ) -> Option<(Vec<u8>, Vec<u32>)> {
        None
    }
    /// The bulk and interrupt IN endpoints it sends on whoever polls
    /// them, each with the URB length its host driver asked for: those a
    /// driver without a loop of its own polls
    /// (`driver::int_in::poll_function`); none by default (the built-in
    /// devices' drivers run their own loops).
    fn polled_eps(&self) -> Vec<(u8, u32)> {
        Vec::new()
    }
    /// An OUT URB of `len` bytes reached the function at `now`: how many
    /// bytes it takes, or None to leave the URB pending (NAKed) for good.
    /// A function without a sink takes none.
    fn take(&mut self, _ctx: &mut super::Ctx, _now: u64, _len: u32) -> Option<u32> {
        None
    }
}

/// How an injected error ends a transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Outcome {
    #[default]
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

    /// How many URBs are allocated.
    #[cfg(test)]
    pub(crate) fn live_count(&self) -> usize {
        self.live.len()
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
        /// `transfer_flags` beyond URB_DIR_IN (which the setup packet's
        /// direction gives): URB_NO_TRANSFER_DMA_MAP for a driver's URB
        /// with a DMA buffer of its own (usbhid's urbctrl, usb-storage's
        /// `iobuf`); 0 for usb_control_msg's.
        flags: u32,
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
        flags: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver's answer waits for its loop's poll without holding back
    /// programs' answers, which still complete in the order the peer gave
    /// them; a URB the driver gave up on lets its late answer go.
    #[test]
    fn a_drivers_answer_holds_no_programs_back() {
        let mut a = PeerAnswers::default();
        a.pending.extend([10, 11]);
        a.drivers.extend([1, 2]);
        assert!(a.waits(1) && a.waits(10) && !a.waits(3));
        a.answer(1, (0, 1, vec![7], None));
        a.answer(11, (0, 0, vec![], None));
        a.answer(10, (0, 0, vec![], None));
        assert!(a.driver_answered(1) && !a.waits(1));
        assert!(a.take(10).is_none(), "11 came first");
        assert!(a.take(11).is_some() && a.take(10).is_some());
        assert_eq!(a.take(1).map(|x| x.2), Some(vec![7]));
        a.give_up(2);
        assert!(!a.waits(2) && a.was_discarded(2) && !a.was_discarded(1));
    }
}
