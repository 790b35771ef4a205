//! Simulated USB buses and devices.
//!
//! [`UsbSim`] builds one `bus::Bus` per configured bus. Each bus holds a
//! device tree (root hub, external hubs, class devices), a hub driver that
//! enumerates devices the way Linux does, and class-driver streams (HID
//! interrupt polling, bulk-only storage, isochronous audio/video, a bulk flood).
//! Every URB produces `S`/`C`/`E` [`UrbEvent`]s delivered to the [`UrbSink`].
//!
//! Time: each bus runs in its own simulation time. [`UsbSim::start`] runs one
//! thread per bus, paced with [`Clock::sleep_until`]; [`UsbSim::run_until`]
//! runs the buses without sleeping (deterministic: the same configuration and
//! seed give the same events, timestamps included, through `clock.at()`).
//!
//! The sink is called with the bus lock held: it must not call back into the
//! simulator.
//!
//! Status codes used (`errors:` in the configuration counts every URB on a
//! device's data endpoints; the first matching rule wins):
//! * `submit_error_every`: an `E` event with -19 (ENODEV) for bulk and
//!   interrupt URBs, -18 (EXDEV) for isochronous ones; the driver retries.
//! * `stall_every`: completion -32 (EPIPE), then CLEAR_FEATURE(ENDPOINT_HALT)
//!   (`s 02 01 0000 00EP 0000 0`); isochronous endpoints cannot stall, for them
//!   it acts as a protocol error.
//! * `unlink_every`: completion -2 (ENOENT), actual length 0 (usb-storage after
//!   its timeout, then a bulk-only reset; usbhid's and the hub driver's
//!   status URBs are not resubmitted, as hid_irq_in and hub_irq do).
//! * `proto_error_every`: completion -71 (EPROTO); isochronous URBs complete
//!   with status 0 and one packet at -71 (error_count 1).
//! * Unplug: URBs in flight on interrupt, bulk and control endpoints complete
//!   with -71 shortly after the disconnect; the hub reports the port change,
//!   and at `usb_disconnect` whatever is left (isochronous URBs) completes with
//!   -108 (ESHUTDOWN); the device then leaves `usb/devices`.
//!
//! xHCI buses do not show SET_ADDRESS (the controller addresses devices with a
//! command, as in the kernel captures); EHCI/OHCI/UHCI buses do.
//!
//! [`UrbEvent`]: crate::usbmon::event::UrbEvent

mod bus;
mod core_view;
mod ctx;
mod descriptors;
mod device;
mod devices_text;
mod driver;
mod hub;
pub mod load;
pub mod memory;
mod peer;
pub mod replay;
mod replay_program;
mod scsi;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_driver;
#[cfg(test)]
mod tests_hcd;
#[cfg(test)]
mod tests_seeded;
mod usbfs_port;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::base::clock::Clock;
use crate::base::sync::LockExt;
use crate::config::{DeviceConfig, ReplayConfig, UsbConfig};
use crate::sim::SimError;
use crate::usbmon::event::UrbSink;

use bus::Bus;
pub use ctx::Fault;

/// Most steps a bus thread runs before releasing its lock.
const BATCH: usize = 4096;
/// Longest single sleep of a bus thread, so stop/plug/pause act quickly.
const MAX_SLEEP_NS: u64 = 5_000_000;
/// Longest nap of an idle bus thread (nothing takes its events, it is
/// paused, or it has nothing to do): it then runs what fell due meanwhile
/// in one batch. Anything that needs the bus current wakes it or catches
/// it up first (see [`BusShared::current`]).
const IDLE_NAP_NS: u64 = 2_000_000_000;
/// Steps an unread bus may fall due while it naps, at the rate it ran at
/// until then. Whoever needs the bus current runs them first, in a request
/// (see [`BusShared::current`]) or on waking, so this bounds the delay that
/// adds (about a millisecond) and the burst a reader that attaches gets
/// after it: a bus with a flood device naps a few milliseconds, a bus of
/// HID devices the full [`IDLE_NAP_NS`].
const NAP_STEPS: u64 = 8192;
/// Shortest nap of an unread bus.
const MIN_NAP_NS: u64 = 1_000_000;

/// How long an unread bus naps, having run `steps` steps in the last
/// `span_ns` of simulation time, since its last nap of `last_ns`: long
/// enough for [`NAP_STEPS`] steps at that rate, and at most twice the last
/// nap. A bus starts from [`MIN_NAP_NS`] and lengthens its naps step by step,
/// so that a device that starts flooding (once enumerated) finds it napping
/// briefly.
fn nap_ns(steps: u64, span_ns: u64, last_ns: u64) -> u64 {
    let mut ns = last_ns as u128 * 2;
    if steps > 0 {
        ns = ns.min(span_ns as u128 * NAP_STEPS as u128 / steps as u128);
    }
    (ns.min(IDLE_NAP_NS as u128) as u64).max(MIN_NAP_NS)
}

struct BusShared {
    num: u16,
    bus: Mutex<Bus>,
    /// The bus's current (or last) replay.
    replay: Mutex<Option<Arc<replay::ReplayHandle>>>,
    /// Configured with `replay:`: no simulated devices, ever.
    replay_only: bool,
    /// The thread naps: the bus may be behind the clock.
    idle: AtomicBool,
    /// Set to end a nap early.
    woken: Mutex<bool>,
    nap: Condvar,
}

impl BusShared {
    fn lock(&self) -> MutexGuard<'_, Bus> {
        self.bus.lock_ok()
    }

    /// The bus, brought up to the clock first if its thread naps: what
    /// fell due meanwhile runs now, in order, with its own time stamps.
    fn current(&self, clock: &dyn Clock) -> MutexGuard<'_, Bus> {
        let mut g = self.lock();
        if self.idle.load(Ordering::SeqCst) && g.realtime && !g.paused {
            let local = clock.sim_now().saturating_sub(g.ctx.offset);
            g.ctx.floor = local;
            while g.next_time().is_some_and(|t| t <= local) {
                g.run_until(local, BATCH);
            }
        }
        g
    }

    /// End the thread's nap (it rechecks what it has to do).
    fn wake(&self) {
        *self.woken.lock_ok() = true;
        self.nap.notify_one();
    }

    /// Nap until simulation time `until` or [`BusShared::wake`].
    fn take_nap(&self, clock: &dyn Clock, until: u64) {
        let mut woken = self.woken.lock_ok();
        let ns = until.saturating_sub(clock.sim_now());
        if !*woken && ns > 0 {
            woken = match self.nap.wait_timeout(woken, Duration::from_nanos(ns)) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        *woken = false;
    }
}

/// The USB simulator: all configured buses.
pub struct UsbSim {
    buses: Vec<Arc<BusShared>>,
    clock: Arc<dyn Clock>,
    /// The stream of topology changes every bus sends into.
    changes: Arc<crate::usbcore::device::DeviceChanges>,
    /// The kernel drivers' IN data every bus sends into.
    inputs: Arc<crate::usbcore::device::DriverInputs>,
    stop: Arc<AtomicBool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl UsbSim {
    /// Build buses and devices from config. `seed` drives URB tags, data and jitter.
    pub fn new(
        cfg: &UsbConfig,
        seed: u64,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn UrbSink>,
    ) -> UsbSim {
        let changes = Arc::new(crate::usbcore::device::DeviceChanges::default());
        let inputs = Arc::new(crate::usbcore::device::DriverInputs::default());
        let mut buses: Vec<Arc<BusShared>> = cfg
            .buses
            .iter()
            .map(|b| {
                let mut bus = Bus::new(b, seed, clock.clone(), sink.clone());
                bus.paused = b.paused;
                bus.ctx.core.changes = changes.clone();
                bus.ctx.core.inputs = inputs.clone();
                let replay = b.replay.as_ref().map(|r| {
                    let h = replay::ReplayHandle::new(&r.file);
                    // Loaded here, before any thread or lock exists.
                    let cap = crate::capture::decode::Capture::load(&r.file).map(Arc::new);
                    let task = replay::ReplayTask::new(r.clone(), h.clone(), cap);
                    bus.add_task(Box::new(task));
                    h
                });
                Arc::new(BusShared {
                    num: b.bus.0,
                    bus: Mutex::new(bus),
                    replay: Mutex::new(replay),
                    replay_only: b.replay.is_some(),
                    idle: AtomicBool::new(false),
                    woken: Mutex::new(false),
                    nap: Condvar::new(),
                })
            })
            .collect();
        buses.sort_by_key(|b| b.num);
        UsbSim {
            buses,
            changes,
            inputs,
            clock,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Mutex::new(Vec::new()),
        }
    }

    /// Build the buses and run them for `sim_ms` of simulation time without
    /// sleeping. The returned simulator can be run further with
    /// [`UsbSim::run_until`].
    pub fn run_for_test(
        cfg: &UsbConfig,
        seed: u64,
        sim_ms: u64,
        clock: Arc<dyn Clock>,
        sink: Arc<dyn UrbSink>,
    ) -> UsbSim {
        let sim = UsbSim::new(cfg, seed, clock, sink);
        sim.run_until(sim_ms * 1_000_000);
        sim
    }

    /// Run every (unpaused) bus up to simulation time `sim_ns` without
    /// sleeping, interleaving the buses in time order, and leave their
    /// clocks at `sim_ns`. Not for use while the threads run.
    pub fn run_until(&self, sim_ns: u64) {
        loop {
            let mut best: Option<(u64, usize)> = None;
            for (i, b) in self.buses.iter().enumerate() {
                let g = b.lock();
                if g.paused {
                    continue;
                }
                if let Some(t) = g.next_time() {
                    let better = match best {
                        Some((bt, _)) => t < bt,
                        None => true,
                    };
                    if t <= sim_ns && better {
                        best = Some((t, i));
                    }
                }
            }
            let Some((_, i)) = best else {
                break;
            };
            let mut g = self.buses[i].lock();
            // Run this bus until another bus has an earlier step.
            let limit = self
                .buses
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .filter_map(|(_, b)| {
                    let o = b.lock();
                    if o.paused {
                        None
                    } else {
                        o.next_time()
                    }
                })
                .min()
                .unwrap_or(u64::MAX)
                .min(sim_ns);
            if g.run_until(limit, BATCH) == 0 {
                g.run_until(sim_ns, 1);
            }
        }
        // The clock is at `sim_ns` now, whether or not a step was due then:
        // what a caller submits next is submitted at that time.
        for b in &self.buses {
            let mut g = b.lock();
            if !g.paused {
                g.cur = g.cur.max(sim_ns);
            }
        }
    }

    /// Bus numbers configured, ascending.
    pub fn bus_numbers(&self) -> Vec<u16> {
        self.buses.iter().map(|b| b.num).collect()
    }

    /// Set how long the buses' simulated latencies take (before
    /// [`UsbSim::start`]).
    pub fn set_timing(&self, timing: crate::config::Timing) {
        for b in &self.buses {
            b.lock().ctx.timing = timing;
        }
    }

    /// Start one thread per bus that runs the simulation in (paced) simulation time.
    pub fn start(&self) {
        let mut threads = self.threads.lock_ok();
        if !threads.is_empty() {
            return;
        }
        self.stop.store(false, Ordering::SeqCst);
        for b in &self.buses {
            {
                let mut g = b.lock();
                // Continue from where the bus is: its local time now. With a
                // deterministic clock the bus's time is simulation time itself
                // (it catches up at once), so when the threads happened to
                // start leaves no trace in the timestamps.
                g.ctx.offset = if self.clock.deterministic() {
                    0
                } else {
                    self.clock.sim_now().saturating_sub(g.cur)
                };
                g.realtime = true;
                if g.paused {
                    g.pause_start = self.clock.sim_now();
                }
            }
            let b = b.clone();
            let clock = self.clock.clone();
            let stop = self.stop.clone();
            let h = std::thread::Builder::new()
                .name(format!("usb-bus{}", b.num))
                .spawn(move || bus_thread(&b, &*clock, &stop))
                .expect("spawn bus thread");
            threads.push(h);
        }
    }

    /// Stop all threads and join them (idempotent; also on Drop).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        for b in &self.buses {
            b.wake();
        }
        let threads: Vec<_> = std::mem::take(&mut *self.threads.lock_ok());
        for t in threads {
            let _ = t.join();
        }
        for b in &self.buses {
            b.lock().realtime = false;
        }
    }

    /// The current topology in the format of /sys/kernel/debug/usb/devices.
    pub fn devices_text(&self) -> String {
        let mut s = String::new();
        for b in &self.buses {
            devices_text::bus_text(&b.current(&*self.clock).ctx, &mut s);
        }
        s
    }

    fn bus(&self, bus: u16) -> Result<&Arc<BusShared>, SimError> {
        self.buses
            .iter()
            .find(|b| b.num == bus)
            .ok_or(SimError::NoBus(bus))
    }

    /// Whether a device on a running bus is coming or going: plugged and
    /// not yet probed (one the hub driver gave up on counts until it is
    /// unplugged), or unplugged and not yet disconnected. `wait settled`
    /// waits for this to end; paused buses are left out, as they do
    /// nothing until resumed.
    pub fn settling(&self) -> bool {
        self.buses.iter().any(|b| {
            let g = b.lock();
            !g.paused && g.ctx.settling()
        })
    }

    /// Pause/resume a bus (no events while paused). Err for an unknown bus.
    pub fn set_paused(&self, bus: u16, paused: bool) -> Result<(), SimError> {
        let b = self.bus(bus)?;
        let mut g = b.current(&*self.clock);
        if g.paused == paused {
            return Ok(());
        }
        let now = self.clock.sim_now();
        if paused {
            g.pause_start = now;
        } else if g.realtime {
            // Simulation time of the bus stood still while paused.
            g.ctx.offset += now.saturating_sub(g.pause_start);
        }
        g.paused = paused;
        drop(g);
        b.wake();
        Ok(())
    }

    /// Hot-plug a device on `bus` at `port_path` (e.g. `[3]` = root port 3,
    /// `[4,1]` = port 1 of the hub on root port 4).
    pub fn plug(&self, bus: u16, port_path: &[u8], dev: &DeviceConfig) -> Result<(), SimError> {
        let b = self.bus(bus)?;
        if b.replay_only {
            return Err(SimError::ReplayOnly(bus));
        }
        let r = b.current(&*self.clock).plug(port_path, dev);
        b.wake();
        r
    }

    /// Unplug the device at `port_path` on `bus` (and everything below it).
    pub fn unplug(&self, bus: u16, port_path: &[u8]) -> Result<(), SimError> {
        let b = self.bus(bus)?;
        let r = b.current(&*self.clock).unplug(port_path);
        b.wake();
        r
    }

    /// Make the next data transfer of the device at `port_path` on `bus` end
    /// with `fault` (stall, babble, unlink, submit error, protocol error).
    pub fn inject(&self, bus: u16, port_path: &[u8], fault: Fault) -> Result<(), SimError> {
        let b = self.bus(bus)?;
        let r = b.current(&*self.clock).inject(port_path, fault);
        b.wake();
        r
    }

    /// Start replaying `cap`, loaded and checked already (see
    /// [`crate::capture::decode::Capture::load_from`]), on `bus` as `cfg` says, replacing its
    /// current replay. `cfg.file` only labels it.
    pub fn replay_start(
        &self,
        bus: u16,
        cfg: &ReplayConfig,
        cap: crate::capture::decode::Capture,
    ) -> Result<(), SimError> {
        let b = self.bus(bus)?;
        let h = replay::ReplayHandle::new(&cfg.file);
        let task = replay::ReplayTask::new(cfg.clone(), h.clone(), Ok(Arc::new(cap)));
        let mut g = b.current(&*self.clock);
        let mut cur = b.replay.lock_ok();
        if let Some(old) = cur.take() {
            old.stop();
            old.release(&mut g.ctx);
        }
        g.add_task(Box::new(task));
        *cur = Some(h);
        drop((g, cur));
        b.wake();
        Ok(())
    }

    /// Stop the replay of `bus`. Err if the bus has none running.
    pub fn replay_stop(&self, bus: u16) -> Result<(), SimError> {
        let b = self.bus(bus)?;
        let mut g = b.current(&*self.clock);
        let cur = b.replay.lock_ok();
        match cur.as_ref() {
            Some(h) if h.active() => {
                h.stop();
                h.release(&mut g.ctx);
                Ok(())
            }
            _ => Err(SimError::NoReplay(bus)),
        }
    }

    /// The status of the current (or last) replay of `bus`, if it had one.
    pub fn replay_status(&self, bus: u16) -> Result<Option<replay::ReplayStatus>, SimError> {
        let b = self.bus(bus)?;
        let cur = b.replay.lock_ok();
        Ok(cur.as_ref().map(|h| h.status()))
    }

    /// Events produced so far on `bus`.
    pub fn event_count(&self, bus: u16) -> Result<u64, SimError> {
        Ok(self.bus(bus)?.current(&*self.clock).ctx.events)
    }
}

impl Drop for UsbSim {
    fn drop(&mut self) {
        self.stop();
    }
}

fn bus_thread(b: &BusShared, clock: &dyn Clock, stop: &AtomicBool) {
    // Steps and clock at the last decision to nap unread, and that nap.
    let mut mark = (b.lock().steps, clock.sim_now());
    let mut nap = MIN_NAP_NS;
    while !stop.load(Ordering::Relaxed) {
        let (wake, idle) = {
            let mut g = b.lock();
            let now = clock.sim_now();
            if g.paused {
                (now + IDLE_NAP_NS, true)
            } else {
                let local = now.saturating_sub(g.ctx.offset);
                g.ctx.floor = local;
                g.run_until(local, BATCH);
                match g.next_time() {
                    Some(t) if t <= local => continue,
                    // Nobody takes the events: nap, then run them in a
                    // batch (no wake-up per event, as for a reader). Not
                    // while a program waits for a URB or a core request
                    // (usbfs): it must complete in time; nor while a
                    // device comes or goes (sysfs and the uevents show it
                    // when it happens); nor while a program reads a HID
                    // device's hidraw or input node (key presses and
                    // releases must come when they happen).
                    _ if !g.ctx.sink.wanted(b.num)
                        && !g.ctx.core.inputs.listening(b.num)
                        && g.ctx.core.urbs.is_empty()
                        && g.ctx.core.requests.load(Ordering::SeqCst) == 0
                        && !g.ctx.settling() =>
                    {
                        nap = nap_ns(g.steps - mark.0, now.saturating_sub(mark.1), nap);
                        mark = (g.steps, now);
                        (now + nap, true)
                    }
                    Some(t) => ((t + g.ctx.offset).min(now + MAX_SLEEP_NS), false),
                    None => (now + IDLE_NAP_NS, true),
                }
            }
        };
        if idle {
            b.idle.store(true, Ordering::SeqCst);
            b.take_nap(clock, wake);
            b.idle.store(false, Ordering::SeqCst);
        } else {
            // Interruptible: a program's URB (usbfs) may fall due sooner.
            b.take_nap(clock, wake);
        }
    }
}

impl crate::base::vfs::RequestHooks for UsbSim {
    /// Bring napping buses up to the clock: `usb/devices` is current, and
    /// a reader about to attach gets no event from before its open.
    fn before(&self) {
        for b in &self.buses {
            if b.idle.load(Ordering::SeqCst) {
                drop(b.current(&*self.clock));
            }
        }
    }

    /// Wake napping buses: the request may have attached a reader or
    /// enabled an event.
    fn after(&self) {
        for b in &self.buses {
            if b.idle.load(Ordering::SeqCst) {
                b.wake();
            }
        }
    }
}
