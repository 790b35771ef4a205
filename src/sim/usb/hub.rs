//! The hub driver: hub and root-hub ports, the status URB, port events,
//! enumeration of what is plugged in, and plugging and unplugging devices
//! in the tree (khubd's work, in the kernel's terms).

use std::collections::VecDeque;
use std::sync::Arc;

use super::ctx::*;
use super::descriptors::{self, Speed};
use super::peer::PeerError;
use crate::config::{Controller, DeviceConfig, DeviceKind};
use crate::sim::SimError;
use crate::usbmon::event::{XferType, URB_DIR_IN};

// Hub port status and change bits.
const PS_CONNECTION: u16 = 0x0001;
const PS_ENABLE: u16 = 0x0002;
const PS_POWER: u16 = 0x0100;
const PS_LOW_SPEED: u16 = 0x0200;
const PS_HIGH_SPEED: u16 = 0x0400;
const PC_CONNECTION: u16 = 0x0001;
const PC_ENABLE: u16 = 0x0002;
const PC_RESET: u16 = 0x0010;

/// The hub driver's worker for one hub.
pub(crate) struct HubWorker {
    hub: DevId,
    runner: Runner,
    tag: u64,
}

impl HubWorker {
    pub(crate) fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
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

    pub(crate) fn drain(&mut self, ctx: &mut Ctx) {
        if let Some(h) = ctx.dev_mut(self.hub).and_then(|d| d.hub.as_mut()) {
            self.runner.q.extend(h.queue.drain(..));
        }
    }
}

impl Task for HubWorker {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        HubWorker::step(self, ctx, now)
    }
}

/// Completion (phase 0) and resubmission (phase 1) of a hub's status URB.
pub(crate) struct HubInt {
    hub: DevId,
    phase: u8,
}

impl Task for HubInt {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        ctx.hub_int_step(self.hub, &mut self.phase, now)
    }
}

/// Root hub port-status polling (`hub_poll_ms`).
pub(crate) struct RootPoll {
    /// The port polled last.
    pub port: u8,
    /// How often, ns.
    pub every: u64,
}

impl Task for RootPoll {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let root = 0;
        let (bound, nports) = match ctx.dev(root) {
            Some(d) => (d.driver_bound, d.desc.nports),
            None => return None,
        };
        if bound {
            self.port = self.port % nports + 1;
            let op = ctrl(root, setup(0xa3, 0x00, 0, self.port as u16, 4));
            ctx.push_ops(root, vec![op], now);
        }
        Some(now + self.every)
    }
}

/// The most time between two of [`Abort`]'s transaction errors.
const ABORT_GAP_MAX: u64 = 150 * US;

/// Transaction errors for URBs in flight when a device went away.
struct Abort {
    items: VecDeque<(DevId, u64)>,
}

impl Task for Abort {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let (dev, tag) = self.items.pop_front()?;
        ctx.complete(dev, tag, now, EPROTO, 0, None, Vec::new(), 0, 0);
        if self.items.is_empty() {
            None
        } else {
            Some(now + ctx.rng.range(20 * US, ABORT_GAP_MAX))
        }
    }
}

/// A device plugged in later (`plug_after_ms`).
pub(crate) struct Plug {
    /// Its port path.
    pub path: Vec<u8>,
    /// What it is.
    pub cfg: Box<DeviceConfig>,
}

impl Task for Plug {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let _ = ctx.plug(&self.path, &self.cfg, now);
        None
    }
}

/// A device unplugged later (`unplug_after_ms`).
struct Unplug {
    dev: DevId,
}

impl Task for Unplug {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        ctx.unplug_dev(self.dev, now);
        None
    }
}

impl Ctx {
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
                Box::new(HubWorker {
                    hub,
                    runner: Runner::default(),
                    tag,
                }),
            );
        }
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

    /// Nanoseconds between two polls of a hub's status endpoint.
    fn hub_interval(&self, hub: DevId) -> u64 {
        self.dev(hub)
            .map(|d| {
                let ep = &d.desc.cfg.alts[0].eps[0];
                descriptors::urb_interval(d.speed(), ep) as u64
                    * descriptors::interval_unit_ns(d.speed())
            })
            .unwrap_or(MS)
    }

    /// A connection change on a port: let the hub's status URB complete.
    pub(crate) fn port_changed(&mut self, hub: DevId, now: u64) {
        let root = self.dev(hub).is_some_and(|d| d.kind == Kind::Root);
        let interval_ns = self.hub_interval(hub);
        let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
            return;
        };
        if !h.int_inflight || h.int_completion || h.int_outcome != Outcome::Ok {
            return;
        }
        h.int_completion = true;
        let delay = if root {
            self.rng.range(50 * US, 600 * US)
        } else {
            self.rng.range(100 * US, interval_ns.max(200 * US))
        };
        self.spawn(now + delay, Box::new(HubInt { hub, phase: 0 }));
    }

    pub(crate) fn hub_int_urb(&self, hub: DevId) -> Option<Urb> {
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
            start_frame: 0,
            sched_frame: 0,
        })
    }

    /// Submit the hub's status URB (hub_activate, hub_resubmit_irq_urb): it
    /// takes the hub's injected faults as any data URB. A submission that
    /// fails (-19) is not tried again: hub_resubmit_irq_urb ignores
    /// -ENODEV, and hub_activate only logs it; the hub then reports no
    /// more port changes, as the kernel's would not.
    pub(crate) fn submit_hub_int(&mut self, hub: DevId, now: u64) {
        let Some(mut urb) = self.hub_int_urb(hub) else {
            return;
        };
        if !self.alive(hub) {
            return;
        }
        let outcome = match self.submit_urb(hub, &mut urb, None, Vec::new(), Place::Given, now) {
            Ok((o, _)) => o,
            Err(st) => {
                tracing::warn!(
                    "usb {}: the hub's status URB was refused ({st}): the hub driver does not \
                     submit it again, and the hub's port changes go unseen",
                    self.dev_name(hub)
                );
                return;
            }
        };
        let pending = {
            let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
                return;
            };
            h.int_inflight = true;
            // A fault ends it at the endpoint's next poll.
            h.int_completion = outcome != Outcome::Ok;
            h.int_outcome = outcome;
            h.ports.iter().enumerate().any(|(i, p)| {
                p.change & (PC_CONNECTION | PC_ENABLE) != 0 && h.reported & (1 << (i + 1)) == 0
            })
        };
        if outcome != Outcome::Ok {
            let delay = self
                .rng
                .range(100 * US, self.hub_interval(hub).max(200 * US));
            self.spawn(now + delay, Box::new(HubInt { hub, phase: 0 }));
        } else if pending {
            self.port_changed(hub, now);
        }
    }

    /// The hub's status URB ended with the fault it was submitted with
    /// (hub_irq): unlinked (-2), nothing more; another error is resubmitted
    /// at once, the tenth in a row (hub->nerrors) also kicking hub_event
    /// with hub->error, whose hub reset (usb_reset_device) is not modelled:
    /// the hub carries on. Returns whether it is resubmitted.
    fn hub_int_fault(&mut self, hub: DevId, now: u64) -> bool {
        let (tag, outcome) = {
            let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
                return false;
            };
            h.int_inflight = false;
            h.int_completion = false;
            (h.int_tag, std::mem::take(&mut h.int_outcome))
        };
        let status = outcome.status();
        self.complete(hub, tag, now, status, 0, None, Vec::new(), 0, 0);
        if matches!(status, ENOENT | ECONNRESET | ESHUTDOWN) {
            return false;
        }
        let name = self.dev_name(hub);
        let Some(h) = self.dev_mut(hub).and_then(|d| d.hub.as_mut()) else {
            return false;
        };
        h.nerrors += 1;
        if h.nerrors >= 10 && h.error == 0 {
            h.error = status;
            h.nerrors = 0;
            tracing::warn!(
                "usb {name}: the hub's status URB failed ten times in a row ({status}): \
                 the kernel's hub_event would reset the hub, which monfs does not model"
            );
        }
        true
    }

    pub(crate) fn hub_int_step(&mut self, hub: DevId, phase: &mut u8, now: u64) -> Option<u64> {
        if !self.alive(hub) {
            return None;
        }
        if *phase == 1 {
            self.submit_hub_int(hub, now);
            return None;
        }
        let faulted = self
            .dev(hub)
            .and_then(|d| d.hub.as_ref())
            .is_some_and(|h| h.int_inflight && h.int_outcome != Outcome::Ok);
        if faulted {
            if !self.hub_int_fault(hub, now) {
                return None;
            }
            *phase = 1;
            return Some(now + self.rng.range(5 * US, 40 * US));
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
            h.nerrors = 0;
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

    pub(crate) fn port_event_ops(&mut self, hub: DevId, port: u8) -> Vec<Op> {
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
                .map(|c| (c.gone, c.reserved != 0 || c.given_up))
                .unwrap_or((true, true));
            if gone {
                ops.push(Op::Disconnect(child));
            } else if !enumerated {
                ops.push(Op::Connect(port));
            }
        }
        ops
    }

    pub(crate) fn port_child(&self, hub: DevId, port: u8) -> Option<DevId> {
        self.dev(hub)?
            .hub
            .as_ref()?
            .ports
            .get(port as usize - 1)?
            .child
    }

    pub(crate) fn scan_ops(&mut self, hub: DevId) -> Vec<Op> {
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
            } else if let Some(child) = self.port_child(hub, p) {
                // Plugged and unplugged again before the hub came up (as
                // hub_activate finds a child without a connection): it goes.
                connect.push(Op::Disconnect(child));
            }
        }
        ops.push(Op::Delay(self.rng.range(60 * MS, 110 * MS)));
        ops.push(Op::SubmitInt);
        ops.extend(connect);
        ops
    }

    pub(crate) fn connect_ops(&mut self, hub: DevId, port: u8) -> Vec<Op> {
        let Some(child) = self.port_child(hub, port) else {
            return vec![];
        };
        match self.dev(child) {
            Some(c) if !c.gone && c.reserved == 0 => {}
            // Unplugged before the hub driver came to it: nothing to connect,
            // and the port is empty.
            Some(c) if c.gone => return vec![Op::Disconnect(child)],
            _ => return vec![],
        }
        let devnum = self.devnum_for(child);
        if let Some(c) = self.dev_mut(child) {
            c.reserved = devnum;
        }
        let remote = self.dev(child).is_some_and(|c| c.remote_ep0);
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
        ];
        if remote {
            ops.push(Op::Check(child, Check::Desc64 { retry: 0, op: 0 }));
        }
        ops.extend(self.after_desc64(hub, port, child, devnum));
        ops
    }

    /// hub_port_reset: reset the port and acknowledge it.
    fn reset_ops(&mut self, hub: DevId, port: u8) -> Vec<Op> {
        let p = port as u16;
        let r = &mut self.rng;
        vec![
            ctrl(hub, setup(0x23, 0x03, 0x04, p, 0)),
            Op::Delay(r.range(20 * MS, 60 * MS)),
            ctrl(hub, setup(0xa3, 0x00, 0, p, 4)),
            ctrl(hub, setup(0x23, 0x01, 0x14, p, 0)),
            Op::Delay(r.range(10 * MS, 40 * MS)),
        ]
    }

    /// After the 64-byte device descriptor read: reset again, address the
    /// device and enumerate it.
    fn after_desc64(&mut self, hub: DevId, port: u8, child: DevId, devnum: u8) -> Vec<Op> {
        let remote = self.dev(child).is_some_and(|c| c.remote_ep0);
        let mut ops = self.reset_ops(hub, port);
        // xHCI addresses devices with a command, not a SET_ADDRESS URB.
        if self.controller != Controller::Xhci {
            ops.push(ctrl(child, setup(0x00, 0x05, devnum as u16, 0, 0)));
            if remote {
                ops.push(Op::Check(child, Check::Address { op: 0 }));
            }
            ops.push(Op::Delay(self.rng.range(2 * MS, 10 * MS)));
        }
        ops.push(Op::Addressed(child));
        ops.push(Op::Enumerate(child));
        if remote {
            ops.push(Op::TryEnd(child));
        }
        ops
    }

    /// The name of a device in the log: `bus 1 port 1.2`.
    pub(crate) fn dev_name(&self, d: DevId) -> String {
        let path: Vec<String> = self
            .dev(d)
            .map(|x| x.path.iter().map(|p| p.to_string()).collect())
            .unwrap_or_default();
        format!("bus {} port {}", self.bus, path.join("."))
    }

    /// An external device's peer is gone or misbehaved: the device
    /// unplugs (its requests in flight end with -71), with a log line.
    pub(crate) fn peer_gone(&mut self, d: DevId, why: &PeerError, now: u64) {
        if !self.alive(d) {
            return;
        }
        tracing::warn!(
            "usb {}: external device's peer {why}: unplugging the device",
            self.dev_name(d)
        );
        if let Some(x) = self.dev_mut(d) {
            x.ep0 = None;
        }
        self.unplug_dev(d, now);
    }

    /// What the hub driver does after an enumeration request to a device
    /// whose ep0 is answered from outside, as hub_port_init and
    /// hub_port_connect do in outline: the first device descriptor read
    /// is tried three times per round, two rounds with a reset after each;
    /// SET_ADDRESS twice, 200 ms apart; a failed attempt disables the port
    /// and the next one starts over with a new address.
    pub(crate) fn check(&mut self, d: DevId, c: Check, last: Option<Last>) -> Next {
        if !self.alive(d) {
            return Next::Replace(vec![]);
        }
        let (st, data) = match last {
            Some((x, st, data)) if x == d => (st, data.unwrap_or_default()),
            _ => (EPROTO, Arc::from(Vec::new())),
        };
        let name = self.dev_name(d);
        let (hub, port, high, reserved) = match self.dev(d) {
            Some(x) => (
                x.parent.unwrap_or(0),
                x.port,
                x.speed() == Speed::High,
                x.reserved,
            ),
            None => return Next::Replace(vec![]),
        };
        match c {
            Check::Desc64 { retry, op } => {
                let ok = st == 0
                    && data.len() >= 8
                    && data[1] == 1
                    && matches!(data[7], 8 | 16 | 32 | 64);
                if ok {
                    return Next::Go;
                }
                let err = if st != 0 { st } else { EPROTO };
                if op < 2 && !(err == ETIMEDOUT && retry == 0 && high) {
                    return Next::Insert(vec![
                        ctrl(d, setup(0x80, 0x06, 0x0100, 0, 64)),
                        Op::Check(d, Check::Desc64 { retry, op: op + 1 }),
                    ]);
                }
                tracing::warn!("usb {name}: device descriptor read/64, error {err}");
                let mut ops = self.reset_ops(hub, port);
                if retry == 0 {
                    ops.push(Op::Delay(100 * MS));
                    ops.push(ctrl(d, setup(0x80, 0x06, 0x0100, 0, 64)));
                    ops.push(Op::Check(d, Check::Desc64 { retry: 1, op: 0 }));
                    // The reset that follows the read is in after_desc64.
                    let rest = self.after_desc64(hub, port, d, reserved);
                    ops.extend(rest);
                } else {
                    ops.push(Op::TryFailed(d, err));
                }
                Next::Replace(ops)
            }
            Check::Address { op } => {
                if st == 0 {
                    return Next::Go;
                }
                if op == 0 {
                    return Next::Insert(vec![
                        Op::Delay(200 * MS),
                        ctrl(d, setup(0x00, 0x05, reserved as u16, 0, 0)),
                        Op::Check(d, Check::Address { op: 1 }),
                    ]);
                }
                tracing::warn!("usb {name}: device not accepting address {reserved}, error {st}");
                Next::Replace(vec![Op::TryFailed(d, st)])
            }
            Check::Desc18 | Check::Config => {
                let want = if c == Check::Desc18 { 18 } else { 4 };
                if st == 0 && data.len() >= want {
                    return Next::Go;
                }
                let err = if st != 0 { st } else { -90 };
                if c == Check::Desc18 {
                    tracing::warn!("usb {name}: device descriptor read/all, error {err}");
                } else {
                    tracing::warn!("usb {name}: can't read configurations, error {err}");
                }
                Next::Replace(vec![Op::TryFailed(d, err)])
            }
            Check::SetConfig => {
                if st == 0 {
                    return Next::Go;
                }
                // The device stays, unconfigured: no driver binds.
                tracing::warn!("usb {name}: can't set config, error {st}: no driver binds");
                Next::Replace(vec![])
            }
        }
    }

    /// An enumeration attempt failed: hub_port_disable, the address given
    /// back; then the next attempt (of four) with a new address, or the
    /// hub driver gives up and the port stays without a device.
    pub(crate) fn try_failed_ops(&mut self, hub: DevId, d: DevId, err: i32) -> Vec<Op> {
        let name = self.dev_name(d);
        let Some(x) = self.dev_mut(d) else {
            return vec![];
        };
        let port = x.port;
        let old = std::mem::take(&mut x.reserved);
        x.devnum = 0;
        x.visible = false;
        x.enum_try += 1;
        let tries = x.enum_try;
        if old != 0 {
            self.used[old as usize] = false;
        }
        let mut ops = vec![ctrl(hub, setup(0x23, 0x01, 0x01, port as u16, 0))];
        if !self.alive(d) {
            // Unplugged during its enumeration: hub_port_connect lets the
            // half-made device go and the port is empty.
            ops.push(Op::Disconnect(d));
            return ops;
        }
        if tries >= 4 {
            tracing::warn!(
                "usb {name}: unable to enumerate USB device (error {err}): the port stays without a device until it is unplugged"
            );
            if let Some(x) = self.dev_mut(d) {
                x.given_up = true;
            }
            return ops;
        }
        let devnum = self.devnum_for(d);
        if let Some(x) = self.dev_mut(d) {
            x.reserved = devnum;
        }
        ops.push(Op::Delay(self.rng.range(MS, 5 * MS)));
        ops.extend(self.reset_ops(hub, port));
        ops.push(ctrl(d, setup(0x80, 0x06, 0x0100, 0, 64)));
        ops.push(Op::Check(d, Check::Desc64 { retry: 0, op: 0 }));
        ops.extend(self.after_desc64(hub, port, d, devnum));
        ops
    }

    pub(crate) fn enumerate_ops(&mut self, d: DevId) -> Vec<Op> {
        let Some(dev) = self.dev(d) else {
            return vec![];
        };
        // wTotalLength of each configuration, read 9 bytes first, then whole.
        let totals: Vec<u16> = match &dev.desc.raw {
            Some(r) => r.configs.iter().map(|c| c.range.len() as u16).collect(),
            None => vec![dev.desc.cfg.bytes().len() as u16],
        };
        let i_cfg = dev.desc.cfg.i_cfg;
        let value = dev.desc.cfg.value;
        let intf_strings = dev.desc.intf_strings.clone();
        let dd = &dev.desc.dev;
        let remote = dev.remote_ep0;
        let check = |ops: &mut Vec<Op>, c| {
            if remote {
                ops.push(Op::Check(d, c));
            }
        };
        let mut ops = vec![ctrl(d, setup(0x80, 0x06, 0x0100, 0, 18))];
        check(&mut ops, Check::Desc18);
        for (i, total) in totals.into_iter().enumerate() {
            let v = 0x0200 | i as u16;
            ops.push(ctrl(d, setup(0x80, 0x06, v, 0, 9)));
            check(&mut ops, Check::Config);
            ops.push(ctrl(d, setup(0x80, 0x06, v, 0, total)));
            check(&mut ops, Check::Config);
        }
        ops.push(ctrl(d, setup(0x80, 0x06, 0x0300, 0, 255)));
        for idx in [dd.i_prod, dd.i_mfr, dd.i_ser] {
            if idx != 0 {
                ops.push(ctrl(d, setup(0x80, 0x06, 0x0300 | idx as u16, 0x0409, 255)));
            }
        }
        ops.push(Op::Delay(self.rng.range(2 * MS, 15 * MS)));
        ops.push(ctrl(d, setup(0x00, 0x09, value as u16, 0, 0)));
        if remote {
            ops.push(Op::Check(d, Check::SetConfig));
        }
        // usb_set_configuration caches the configuration's string.
        if i_cfg != 0 {
            ops.push(ctrl(
                d,
                setup(0x80, 0x06, 0x0300 | i_cfg as u16, 0x0409, 255),
            ));
        }
        // Then each interface's string, for its sysfs `interface` file.
        for idx in intf_strings.into_iter().filter(|&i| i != 0) {
            ops.push(ctrl(d, setup(0x80, 0x06, 0x0300 | idx as u16, 0x0409, 255)));
        }
        ops.push(Op::ClassSetup(d));
        ops
    }

    pub(crate) fn activate_hub(&mut self, hub: DevId, now: u64) {
        let Some(d) = self.dev_mut(hub) else {
            return;
        };
        d.driver_bound = true;
        let n = d.desc.nports;
        if d.kind == Kind::Root {
            self.root_coming = false;
        }
        super::core_view::device_changed(self, hub);
        let Some(d) = self.dev(hub) else {
            return;
        };
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
    ) -> Result<DevId, SimError> {
        let (pspeed, level, mut path) = {
            let p = self.dev(parent).ok_or(SimError::BadHub("no such hub"))?;
            if p.gone {
                return Err(SimError::BadHub("the hub is disconnected"));
            }
            let h = p.hub.as_ref().ok_or(SimError::BadHub("not a hub"))?;
            let slot = h.ports.get(port as usize - 1).ok_or(SimError::NoPort {
                ports: h.ports.len(),
                port,
            })?;
            if slot.child.is_some() {
                return Err(SimError::PortInUse(port));
            }
            let path = if p.kind == Kind::Root {
                Vec::new()
            } else {
                p.path.clone()
            };
            (p.speed(), p.level + 1, path)
        };
        path.push(port);
        let salt = self.rng.next_u64();
        let desc = (self.describe)(cfg, pspeed, self.bus, &path, salt);
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
        let id = self.devs.insert(Device {
            cfg: Some(cfg.clone()),
            parent: Some(parent),
            port,
            level,
            path: path.clone(),
            hub,
            errors: cfg.errors,
            ..Device::new(Kind::Dev(cfg.kind), desc, class_tag)
        });
        (self.plugged)(self, id);
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
            self.spawn((ms * MS).max(now + MS), Box::new(Unplug { dev: id }));
        }
        for child in &cfg.devices {
            let mut cpath = path.clone();
            cpath.push(child.port.0);
            if child.plug_after_ms * MS <= now {
                let _ = self.attach(id, child.port.0, child, now);
            } else {
                self.spawn(
                    child.plug_after_ms * MS,
                    Box::new(Plug {
                        path: cpath,
                        cfg: Box::new(child.clone()),
                    }),
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

    pub(crate) fn plug(
        &mut self,
        path: &[u8],
        cfg: &DeviceConfig,
        now: u64,
    ) -> Result<(), SimError> {
        let (&port, parent_path) = path.split_last().ok_or(SimError::EmptyPath)?;
        let parent = self
            .find(parent_path)
            .ok_or_else(|| SimError::NoHub(parent_path.to_vec()))?;
        if port == 0 {
            return Err(SimError::PortZero);
        }
        self.attach(parent, port, cfg, now).map(|_| ())
    }

    pub(crate) fn unplug(&mut self, path: &[u8], now: u64) -> Result<(), SimError> {
        if path.is_empty() {
            return Err(SimError::UnplugRootHub);
        }
        let id = self
            .find(path)
            .ok_or_else(|| SimError::NoDevice(path.to_vec()))?;
        if self.dev(id).is_some_and(|d| d.gone) {
            return Err(SimError::AlreadyUnplugged(path.to_vec()));
        }
        self.unplug_dev(id, now);
        Ok(())
    }

    pub(crate) fn subtree(&self, id: DevId, out: &mut Vec<DevId>) {
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
        // The hub driver learns of the change once the controller has
        // failed the transfers in flight: a controller retries a transfer
        // within microseconds, while the hub's status interrupt and port
        // requests take longer, so usb_disconnect (-108) finds none of
        // them left.
        let mut notice = now;
        if !items.is_empty() {
            let at = now + self.rng.range(100 * US, 1000 * US);
            notice = at + items.len() as u64 * ABORT_GAP_MAX;
            self.spawn(at, Box::new(Abort { items }));
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
                self.port_changed(parent, notice);
            }
        }
    }

    /// usb_disconnect: URBs still in flight are killed (-108), the devices go.
    pub(crate) fn disconnect(&mut self, id: DevId, now: u64) {
        let mut all = Vec::new();
        self.subtree(id, &mut all);
        for &d in &all {
            let urbs: Vec<Urb> = self.dev(d).map(|x| x.inflight.clone()).unwrap_or_default();
            for u in urbs {
                self.kill(d, &u, now, ESHUTDOWN);
            }
            if self.dev(d).is_some_and(|x| x.core.registered) {
                (self.core_event)(self, d, false);
            }
            // (The kills above started whoever waited for its URBs.)
            self.waiting.retain(|w| w.0 != d);
            if let Some(dev) = self.devs.remove(d) {
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
}

fn ports_len(ctx: &Ctx, hub: DevId) -> usize {
    ctx.dev(hub)
        .and_then(|d| d.hub.as_ref())
        .map(|h| h.ports.len())
        .unwrap_or(0)
}
