//! What device models, the hub driver and replays act on: the device tree,
//! URB tags and addresses, URB submission and completion (the events), the
//! control-request sequencer, and the [`Task`] trait the scheduler runs.
//! This module imports none of them.

use std::sync::Arc;

use crate::base::clock::Clock;
use crate::config::{Controller, DeviceConfig, Timing};
use crate::usbmon::event::{
    DataCapture, EventKind, IsoDesc, UrbEvent, UrbSink, XferType, EINPROGRESS,
};

use super::descriptors::{Descriptors, Speed};
use crate::sim::rng::Rng;
use crate::usbcore::device::{IsoResult, UrbResult};

pub(crate) use endpoint::*;
pub(crate) use runner::*;
pub use tree::Fault;
pub(crate) use tree::*;

pub(crate) mod endpoint;
mod runner;
mod tree;

/// Something the bus schedules: a device model's data stream, the hub
/// driver's work, a replay. A device class (`device/`) starts its `Task`s
/// when its driver binds.
pub(crate) trait Task: Send {
    /// Run at bus local time `now`: emit what is due now, and say when to
    /// run next (None: done).
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64>;
}

impl Urb {
    /// An isochronous or interrupt URB: on the bus's periodic schedule.
    pub(crate) fn is_periodic(&self) -> bool {
        matches!(self.xfer, XferType::Iso | XferType::Interrupt)
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

/// The last control request a [`Runner`] completed: device, the status
/// its caller sees (-110 for a timeout), IN data.
pub(crate) type Last = (DevId, i32, Option<Arc<[u8]>>);

/// The simulation state a task step can touch.
pub(crate) struct Ctx {
    pub bus: u16,
    pub controller: Controller,
    /// An xHCI controller's Contiguous Frame ID capability
    /// ([`crate::config::BusConfig::contiguous_frames`]).
    pub cfc: bool,
    pub rng: Rng,
    pub tags: TagAlloc,
    pub devs: DevSlots,
    pub sink: Arc<dyn UrbSink>,
    pub clock: Arc<dyn Clock>,
    /// Added to local time for timestamps.
    pub offset: u64,
    /// Paced mode: local time the bus has reached (flood catches up to it).
    pub floor: u64,
    /// Local time of the step or request being run (what a topology
    /// change is stamped with).
    pub now: u64,
    /// Local time until which the bus's asynchronous schedule (control and
    /// bulk) is taken (see [`endpoint`]).
    pub async_free: u64,
    /// The periodic schedule's share of each segment's time, in
    /// millionths (see [`endpoint`]); recomputed when `periodic_dirty`.
    pub periodic: [u64; 2],
    /// A periodic URB joined or left a queue since `periodic` was computed.
    pub periodic_dirty: bool,
    /// How long simulated latencies take.
    pub timing: Timing,
    pub spawned: Vec<(u64, Box<dyn Task>)>,
    /// Tasks waiting for a URB to be given back (device, URB address),
    /// started when it is ([`Ctx::wake_on`]): a driver's completion
    /// handler.
    pub waiting: Vec<(DevId, u64, Box<dyn Task>)>,
    /// The root hub's enumeration is queued and its hub driver not yet
    /// bound: the bus is still coming up (a replayed bus has none).
    pub root_coming: bool,
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
    /// Whether a bound device's class driver still probes one of its
    /// interfaces (usbhid reading an external device's report
    /// descriptor): it is still coming.
    pub probing: fn(&Device) -> bool,
    /// Tell the core's watchers a device changed (a driver bound to one of
    /// its interfaces); the bus supplies it.
    pub changed: fn(&mut Ctx, DevId),
    /// Make device `d`'s functions ([`Device::function_in`],
    /// [`Device::target`]) that its model has and that are not there yet
    /// (a driver starts, a program's first bulk URB).
    pub make_function: fn(&mut Ctx, DevId, u64),
    /// A driver bound interface `intf` of a device again
    /// (USBDEVFS_CONNECT, its probe done): its tasks there start again.
    pub rebind: fn(&mut Ctx, DevId, u8, u64),
    /// The probe requests of the driver that binds interface `intf` of a
    /// device again (USBDEVFS_CONNECT), its model answering a probe that
    /// reads the device as it goes.
    pub reprobe: fn(&Device, DevId, u8) -> Vec<Op>,
}

impl Ctx {
    /// Whether a device is coming or going: plugged and not yet probed, or
    /// unplugged and not yet disconnected. The bus then runs in time
    /// rather than in batches after a nap, so that sysfs, usbfs and the
    /// uevents show a plug or an unplug when it happens.
    pub(crate) fn settling(&self) -> bool {
        self.root_coming
            || self
                .devs
                .iter()
                .map(|(_, d)| d)
                .any(|d| d.kind != Kind::Root && (d.gone || !d.driver_bound || (self.probing)(d)))
    }

    pub(crate) fn dev(&self, id: DevId) -> Option<&Device> {
        self.devs.get(id)
    }
    pub(crate) fn dev_mut(&mut self, id: DevId) -> Option<&mut Device> {
        self.devs.get_mut(id)
    }
    /// A kernel driver's URB on IN endpoint `ep` of device `id` completed
    /// with `data` (the first `actual` bytes count): tell the core's taps
    /// (usbhid's reports reach the HID core), if any listens.
    pub(crate) fn driver_input(&self, id: DevId, ep: u8, data: &[u8], actual: u32) {
        if self.core.inputs.tapped() {
            let dev = crate::usbcore::device::DevRef {
                bus: self.bus,
                id: id as u64,
            };
            let n = (actual as usize).min(data.len());
            self.core.inputs.send(dev, ep, &data[..n]);
        }
    }

    /// Present and still connected.
    pub(crate) fn alive(&self, id: DevId) -> bool {
        self.dev(id).is_some_and(|d| !d.gone)
    }

    /// Run `f` on device `d`'s IN function (lent out for the call); None:
    /// no such device or function.
    pub(crate) fn with_function<R>(
        &mut self,
        d: DevId,
        f: impl FnOnce(&mut dyn InFunction, &mut Ctx) -> R,
    ) -> Option<R> {
        let mut func = self.dev_mut(d)?.function_in.take()?;
        let r = f(func.as_mut(), self);
        if let Some(x) = self.dev_mut(d) {
            x.function_in.get_or_insert(func);
        }
        Some(r)
    }

    /// The binding a driver task of `d` serving endpoint `ep` (address
    /// with direction) starts under: the endpoint's interface and how
    /// often that interface lost its driver so far.
    pub(crate) fn owner(&self, d: DevId, ep: u8) -> Option<Owner> {
        let intf = self.dev(d)?.desc.cfg.interface_of(ep)?;
        self.interface_owner(d, intf)
    }

    /// The binding of interface `intf` of `d` a driver task starts under
    /// (one that serves no endpoint of it: a function's control
    /// interface).
    pub(crate) fn interface_owner(&self, d: DevId, intf: u8) -> Option<Owner> {
        let unbinds = *self.dev(d)?.core.unbinds.get(intf as usize)?;
        Some(Owner { intf, unbinds })
    }

    /// Whether the driver `owner` stood for was unbound since (a program
    /// detached it): its task is to end.
    pub(crate) fn unbound(&self, d: DevId, owner: Option<Owner>) -> bool {
        let Some(o) = owner else {
            return false;
        };
        self.dev(d)
            .and_then(|x| x.core.unbinds.get(o.intf as usize))
            .is_some_and(|n| *n != o.unbinds)
    }

    pub(crate) fn spawn(&mut self, t: u64, task: Box<dyn Task>) {
        self.spawned.push((t, task));
    }

    /// Start `task` when URB `tag` of device `dev`, in flight, is given
    /// back, whatever its status (as the URB's completion handler runs):
    /// a driver that submits its next URB from the completion of the one
    /// before (usbhid's report queue).
    pub(crate) fn wake_on(&mut self, dev: DevId, tag: u64, task: Box<dyn Task>) {
        self.waiting.push((dev, tag, task));
    }

    /// Pause between two steps of a driver.
    pub(crate) fn gap(&mut self) -> u64 {
        let ns = if self.rng.chance(1.0 / 8.0) {
            self.rng.range(MS, 4 * MS)
        } else {
            self.rng.range(20 * US, 600 * US)
        };
        self.delay(ns)
    }

    /// A simulated latency of `ns` in realistic timing, as the bus's timing
    /// has it (a thousandth of it in fast timing).
    pub(crate) fn delay(&self, ns: u64) -> u64 {
        ns / self.timing.divisor()
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
            start_frame: urb.start_frame,
            error_count: 0,
            xfer_flags: urb.flags,
            setup: urb.setup,
            iso: Vec::new(),
            data: None,
            data_capture: DataCapture::Full,
        }
    }

    /// Emit an `S` event and keep the URB in flight: the end of
    /// [`Ctx::submit_urb`], which every URB goes through.
    fn submit(&mut self, dev: DevId, urb: Urb, t: u64, data: Option<Arc<[u8]>>, iso: Vec<IsoDesc>) {
        let Some(d) = self.devs.get_mut(dev) else {
            return;
        };
        d.inflight.push(urb);
        self.periodic_dirty |= urb.is_periodic();
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

    /// End the in-flight URB `u` of `dev` with `status` and nothing
    /// transferred (usb_kill_urb, usb_unlink_urb, a disconnect), given back
    /// at once whatever is before it on its endpoint: an isochronous URB's
    /// packets each report EXDEV, and its start frame is where its
    /// controller had placed it.
    pub(crate) fn kill(&mut self, dev: DevId, u: &Urb, t: u64, status: i32) -> bool {
        let pkt = u.len.checked_div(u.npk).unwrap_or(0);
        let iso = iso_packets(u.npk, pkt, 0);
        let h = Held {
            tag: u.tag,
            status,
            actual: 0,
            data: None,
            iso,
            start_frame: u.sched_frame,
            error_count: 0,
        };
        self.finish(dev, t, h, false)
    }

    /// The device's answer to the URB `tag` of `dev`, if it is still in
    /// flight: its `C` event now if it heads its endpoint's queue, right
    /// after the URBs before it otherwise (see [`endpoint`]).
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
        let h = Held {
            tag,
            status,
            actual,
            data,
            iso,
            start_frame,
            error_count,
        };
        self.finish(dev, t, h, true)
    }

    /// [`Ctx::complete`] with the answer in one piece.
    pub(crate) fn complete_with(&mut self, dev: DevId, t: u64, h: Held) -> bool {
        self.finish(dev, t, h, true)
    }

    /// [`Ctx::complete`] (`ordered`) and [`Ctx::kill`] (not): the answer
    /// `h` to a URB in flight.
    fn finish(&mut self, dev: DevId, t: u64, h: Held, ordered: bool) -> bool {
        let Some(d) = self.devs.get_mut(dev) else {
            return false;
        };
        let tag = h.tag;
        let Some(pos) = d.inflight.iter().position(|u| u.tag == tag) else {
            return false;
        };
        self.complete_in_order(dev, pos, t, h, ordered)
    }

    /// Emit the `C` event of the in-flight URB at `pos` of `dev` with the
    /// answer `h`, and tell the program that submitted it.
    fn give_back(&mut self, dev: DevId, pos: usize, t: u64, h: Held) {
        let Some(d) = self.devs.get_mut(dev) else {
            return;
        };
        let Held {
            tag,
            status,
            actual,
            data,
            iso,
            start_frame,
            error_count,
        } = h;
        let urb = d.inflight.remove(pos);
        d.core.replay.forget(tag);
        self.periodic_dirty |= urb.is_periodic();
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
        if urb.xfer == XferType::Iso {
            ev.start_frame = start_frame;
        }
        ev.error_count = error_count;
        self.events += 1;
        self.sink.urb_event(ev);
        if let Some((p, r)) = program {
            if p.size > 0 {
                self.tags.free(tag, p.size);
            }
            p.done.done(tag, r);
        }
        while let Some(i) = self.waiting.iter().position(|w| (w.0, w.1) == (dev, tag)) {
            let (_, _, task) = self.waiting.swap_remove(i);
            self.spawned.push((t, task));
        }
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
                Fault::Babble => Outcome::Proto(EOVERFLOW),
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

    /// The address for device `d`'s enumeration: its configured `devnum`
    /// where that is free (a recorded device keeps its address), else the
    /// next free one, as the hub driver chooses.
    pub(crate) fn devnum_for(&mut self, d: DevId) -> u8 {
        let want = self
            .dev(d)
            .and_then(|x| x.cfg.as_ref())
            .and_then(|c| c.devnum)
            .map(|n| n.0);
        if let Some(n) = want {
            if !self.used[n as usize] {
                self.used[n as usize] = true;
                return n;
            }
            let name = self.dev_name(d);
            tracing::warn!(
                "usb {name}: devnum {n} is taken; the device gets the next free address"
            );
        }
        self.alloc_devnum()
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

/// The `npk` packet descriptors of an isochronous URB of `pkt`-byte
/// packets not transferred (yet): each EXDEV at its offset, `length` bytes
/// (the length asked for at submission, 0 when the URB was killed).
pub(crate) fn iso_packets(npk: u32, pkt: u32, length: u32) -> Vec<IsoDesc> {
    (0..npk)
        .map(|i| IsoDesc {
            status: EXDEV,
            offset: i * pkt,
            length,
        })
        .collect()
}
