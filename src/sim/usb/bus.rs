//! One simulated bus and its scheduler. The device tree, URBs and events
//! are in [`super::ctx`], the hub driver in [`super::hub`], device models in
//! [`super::device`].
//!
//! Everything runs in "bus local time" (ns). A step of a task emits the events
//! due at its own time only and tells when it wants to run next, so the events
//! of a bus are delivered in timestamp order. Event timestamps are
//! `clock.at(local + offset)`; the offset grows while the bus is paused.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;

use crate::base::clock::Clock;
use crate::config::{BusConfig, DeviceConfig};
use crate::usbmon::event::UrbSink;

use super::ctx::*;
use super::descriptors;
use super::hub::{Plug, RootPoll};
use crate::sim::rng::Rng;
use crate::sim::SimError;

/// One bus: its simulation state and scheduler.
pub(crate) struct Bus {
    pub ctx: Ctx,
    tasks: Vec<Option<Box<dyn Task>>>,
    free: Vec<usize>,
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    seq: u64,
    /// Local time of the last step.
    pub cur: u64,
    pub paused: bool,
    pub pause_start: u64,
    pub realtime: bool,
    /// Steps run so far (what an unread bus's naps are sized by).
    pub steps: u64,
}

impl Bus {
    pub(crate) fn new(
        cfg: &BusConfig,
        seed: u64,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn UrbSink>,
    ) -> Bus {
        let busnum = cfg.bus.0;
        let mut rng = Rng::new(seed, busnum as u64);
        let mut tags = TagAlloc::new();
        let desc = descriptors::root_hub(cfg.controller, cfg.ports.0, busnum);
        let int_tag = tags.alloc(&mut rng, URB_SIZE);
        let class_tag = tags.alloc(&mut rng, URB_SIZE);
        let mut used = [false; 128];
        used[1] = true;
        let mut devs = DevSlots::default();
        devs.insert(Device {
            devnum: 1,
            reserved: 1,
            visible: true,
            hub: Some(HubState {
                ports: vec![Port::default(); desc.nports as usize],
                int_tag,
                ..Default::default()
            }),
            ..Device::new(Kind::Root, desc, class_tag)
        });
        let ctx = Ctx {
            bus: busnum,
            controller: cfg.controller,
            cfc: cfg.contiguous_frames,
            rng,
            tags,
            devs,
            sink,
            clock,
            offset: 0,
            floor: 0,
            now: 0,
            async_free: 0,
            periodic: [0; 2],
            periodic_dirty: false,
            timing: Default::default(),
            spawned: Vec::new(),
            waiting: Vec::new(),
            root_coming: false,
            next_devnum: 2,
            used,
            empty: Arc::from(Vec::new()),
            events: 0,
            bind_driver: super::device::start_class_driver,
            plugged: super::device::plugged,
            core: Default::default(),
            core_event: super::core_view::device_event,
            describe: super::device::describe,
            probing: super::driver::probing,
            changed: super::core_view::device_changed,
            rebind: super::device::rebind,
            reprobe: super::device::reprobe_ops,
            make_function: super::device::make_function,
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
            steps: 0,
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
                    Box::new(Plug {
                        path: vec![d.port.0],
                        cfg: Box::new(d.clone()),
                    }),
                );
            }
        }
        let start = c.rng.range(MS, 5 * MS);
        c.push_ops(0, vec![Op::Enumerate(0)], start);
        c.root_coming = true;
        if cfg.hub_poll_ms > 0 {
            let every = cfg.hub_poll_ms as u64 * MS;
            c.spawn(every, Box::new(RootPoll { port: 0, every }));
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
            self.steps += 1;
            self.cur = t;
            self.ctx.now = t;
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

    /// Local time for an external request (plug/unplug) arriving now, which
    /// the request's topology changes are stamped with.
    fn request_time(&mut self) -> u64 {
        let t = if self.realtime && !self.paused {
            self.cur
                .max(self.ctx.clock.sim_now().saturating_sub(self.ctx.offset))
        } else {
            self.cur
        };
        self.ctx.now = t;
        t
    }

    /// The local time of a request arriving now, once the steps due before
    /// it have run. A paced bus's thread may be behind the clock (it runs a
    /// batch of steps on one clock reading): what was due before the
    /// request (an earlier URB's completion, say) then happens first, at
    /// its own time, as on a controller that gave it back before the
    /// request arrived.
    fn catch_up(&mut self) -> u64 {
        let now = self.request_time();
        if self.realtime && !self.paused {
            while self.next_time().is_some_and(|t| t <= now) {
                self.run_until(now, usize::MAX);
            }
        }
        self.ctx.now = now;
        now
    }

    /// Schedule a task from outside (a replay) at the current local time.
    pub(crate) fn add_task(&mut self, task: Box<dyn Task>) {
        let now = self.request_time();
        self.ctx.spawn(now, task);
        self.flush_spawned(now);
    }

    pub(crate) fn plug(&mut self, path: &[u8], cfg: &DeviceConfig) -> Result<(), SimError> {
        let now = self.request_time();
        let r = self.ctx.plug(path, cfg, now);
        self.flush_spawned(now);
        r
    }

    pub(crate) fn unplug(&mut self, path: &[u8]) -> Result<(), SimError> {
        let now = self.request_time();
        let r = self.ctx.unplug(path, now);
        self.flush_spawned(now);
        r
    }

    /// Run `f` on the bus at the local time of a request arriving now (a
    /// program's, through the USB core), then schedule what it spawned.
    pub(crate) fn with_ctx<R>(&mut self, f: impl FnOnce(&mut Ctx, u64) -> R) -> R {
        let now = self.catch_up();
        let r = f(&mut self.ctx, now);
        self.flush_spawned(now);
        r
    }

    /// Make the next data transfer of the device at `path` end with `fault`.
    pub(crate) fn inject(&mut self, path: &[u8], fault: Fault) -> Result<(), SimError> {
        if path.is_empty() {
            return Err(SimError::FaultOnRootHub);
        }
        let id = self
            .ctx
            .find(path)
            .ok_or_else(|| SimError::NoDevice(path.to_vec()))?;
        match self.ctx.dev_mut(id) {
            Some(d) if !d.gone => {
                d.faults.push_back(fault);
                Ok(())
            }
            _ => Err(SimError::Unplugged(path.to_vec())),
        }
    }
}
