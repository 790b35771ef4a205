//! Playing a capture on a bus: the timing, the replay's status, and the
//! bus task that emits the captured events.
//!
//! Timing: packet `i` of pass `k` plays `(t_i - t_0 + k * period) / speed`
//! after the start, where the period of a pass is the capture's span plus
//! its mean packet spacing (1 ms for a single packet). Replayed events carry
//! the bus clock at that time, so the original spacing survives (scaled) and
//! a virtual clock gives the same timestamps every run.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::sync::LockExt;
use crate::capture::decode::Capture;
use crate::capture::read::CaptureError;
use crate::config::ReplayConfig;
use crate::sim::usb::ctx::{Ctx, Task};
use crate::usbmon::event::UrbEvent;

/// Spacing after the last packet of a pass when the capture has one packet.
const SINGLE_GAP_NS: u64 = 1_000_000;
/// Smallest spacing between passes.
const MIN_GAP_NS: u64 = 1_000;

impl Capture {
    /// Unscaled length of one pass, ns: the span plus the mean spacing.
    pub fn period(&self) -> u64 {
        loop_period(&self.times)
    }
}

/// Length of one pass over packets at `times` (ns from the first): their
/// span plus their mean spacing (1 ms for one packet, at least 1 µs).
pub fn loop_period(times: &[u64]) -> u64 {
    match times.len() {
        0 => 0,
        1 => SINGLE_GAP_NS,
        n => {
            let span = times[n - 1];
            span + (span / (n as u64 - 1)).max(MIN_GAP_NS)
        }
    }
}

/// `ns` of capture time at `speed`.
pub fn scale(ns: u64, speed: f64) -> u64 {
    (ns as f64 / speed).round() as u64
}

/// When packet `i` of pass `pass` plays, ns after the replay started.
pub fn due(times: &[u64], i: usize, pass: u64, period: u64, speed: f64) -> u64 {
    let per = scale(period, speed).max(1);
    scale(times[i], speed).saturating_add(pass.saturating_mul(per))
}

/// Where a replay is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayState {
    /// Loading, or waiting for `after_ms`.
    Waiting,
    /// Replaying.
    Playing,
    /// The last packet was replayed (not looping).
    Finished,
    /// Stopped by a control command.
    Stopped,
    /// The capture could not be replayed; the message names file and offset.
    Failed(String),
}

/// What a replay has done, for control and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayStatus {
    /// The capture.
    pub file: PathBuf,
    /// Where it is.
    pub state: ReplayState,
    /// Events replayed.
    pub events: u64,
    /// Passes completed (looping).
    pub passes: u64,
}

impl fmt::Display for ReplayStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            ReplayState::Waiting => "waiting".to_string(),
            ReplayState::Playing => "playing".to_string(),
            ReplayState::Finished => "finished".to_string(),
            ReplayState::Stopped => "stopped".to_string(),
            ReplayState::Failed(m) => format!("failed: {m}"),
        };
        write!(
            f,
            "replay {}: {state}, {} events, {} passes",
            self.file.display(),
            self.events,
            self.passes
        )
    }
}

/// Shared between a replay task and [`UsbSim`](crate::sim::usb::UsbSim).
#[derive(Debug)]
pub struct ReplayHandle {
    stop: AtomicBool,
    status: Mutex<ReplayStatus>,
    /// The device addresses the replay holds on its bus.
    claimed: Mutex<Vec<u8>>,
}

impl ReplayHandle {
    pub(crate) fn new(file: &Path) -> Arc<ReplayHandle> {
        Arc::new(ReplayHandle {
            stop: AtomicBool::new(false),
            status: Mutex::new(ReplayStatus {
                file: file.to_path_buf(),
                state: ReplayState::Waiting,
                events: 0,
                passes: 0,
            }),
            claimed: Mutex::new(Vec::new()),
        })
    }

    /// A snapshot of the status.
    pub fn status(&self) -> ReplayStatus {
        self.lock().clone()
    }

    /// Ask the replay to stop (it does at its next step, emitting nothing more).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let mut s = self.lock();
        if matches!(s.state, ReplayState::Waiting | ReplayState::Playing) {
            s.state = ReplayState::Stopped;
        }
    }

    /// Give the device addresses the replay holds back to its bus (`ctx`,
    /// under the bus lock); done when it stops or finishes.
    pub(crate) fn release(&self, ctx: &mut Ctx) {
        for n in self.claimed.lock_ok().drain(..) {
            ctx.used[n as usize] = false;
        }
    }

    /// Whether it can still produce events.
    pub(crate) fn active(&self) -> bool {
        matches!(
            self.lock().state,
            ReplayState::Waiting | ReplayState::Playing
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplayStatus> {
        self.status.lock_ok()
    }
}

/// The bus task that replays a capture.
pub(crate) struct ReplayTask {
    cfg: ReplayConfig,
    handle: Arc<ReplayHandle>,
    /// The capture, loaded before the task was made (never under a lock),
    /// or why it could not be.
    loaded: Option<Result<Arc<Capture>, CaptureError>>,
    /// The capture being played.
    cap: Option<Arc<Capture>>,
    started: bool,
    /// Bus local time of the first packet of pass 0.
    start: u64,
    idx: usize,
    pass: u64,
    period: u64,
    /// Device addresses on this bus for the capture's (bus, address)
    /// pairs, claimed at the first step (see [`claim_addresses`]).
    addrs: HashMap<(u16, u8), u8>,
}

impl ReplayTask {
    /// A task for `cfg` with its loaded capture (or the load error, which
    /// the first step reports).
    pub(crate) fn new(
        cfg: ReplayConfig,
        handle: Arc<ReplayHandle>,
        cap: Result<Arc<Capture>, CaptureError>,
    ) -> ReplayTask {
        ReplayTask {
            cfg,
            handle,
            loaded: Some(cap),
            cap: None,
            started: false,
            start: 0,
            idx: 0,
            pass: 0,
            period: 0,
            addrs: HashMap::new(),
        }
    }

    fn speed(&self) -> f64 {
        self.cfg.speed.0
    }

    /// Give the claimed device addresses back to the bus.
    fn release(&mut self, ctx: &mut Ctx) {
        self.addrs.clear();
        self.handle.release(ctx);
    }
}

/// The bus has no device address left for a device of the capture.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bus {bus}: no free device address for the capture's device {dev_bus}:{dev:03}")]
pub(crate) struct NoFreeAddress {
    /// The replaying bus.
    pub bus: u16,
    /// The device's bus in the capture.
    pub dev_bus: u16,
    /// Its address there.
    pub dev: u8,
}

/// Claim a device address on the bus for every device of `cap` (keyed by
/// its captured bus and address), so that no two devices share one: a
/// captured address that is free on the bus is kept, and the others get
/// the next free one from the bus's allocator, round robin as the kernel's
/// `usb_alloc_dev` hands them out. Address 0 (a device being enumerated)
/// and 1 (the root hub) are the bus's own and stay as they are. Err when
/// the bus runs out of addresses.
pub(crate) fn claim_addresses(
    ctx: &mut Ctx,
    cap: &Capture,
) -> Result<HashMap<(u16, u8), u8>, NoFreeAddress> {
    let mut order: Vec<(u16, u8)> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for e in &cap.events {
        if e.devnum >= 2 && seen.insert((e.bus, e.devnum)) {
            order.push((e.bus, e.devnum));
        }
    }
    let mut map = HashMap::new();
    let mut clash = Vec::new();
    for &(b, d) in &order {
        if d < 128 && !ctx.used[d as usize] {
            ctx.used[d as usize] = true;
            map.insert((b, d), d);
        } else {
            clash.push((b, d));
        }
    }
    for (b, d) in clash {
        let n = ctx.alloc_devnum();
        if n == 0 {
            for (_, n) in map.drain() {
                ctx.used[n as usize] = false;
            }
            return Err(NoFreeAddress {
                bus: ctx.bus,
                dev_bus: b,
                dev: d,
            });
        }
        map.insert((b, d), n);
    }
    Ok(map)
}

/// Give `ev` its device's address on the replaying bus (see
/// [`claim_addresses`]); a SET_ADDRESS request names the new address too.
fn readdress(ev: &mut UrbEvent, addrs: &HashMap<(u16, u8), u8>) {
    if let Some(&n) = addrs.get(&(ev.bus, ev.devnum)) {
        ev.devnum = n;
    }
    if let Some(s) = ev.setup.as_mut() {
        // SET_ADDRESS: bmRequestType 0x00, bRequest 5, wValue the address.
        if s[0] == 0x00 && s[1] == 0x05 && s[3] == 0 {
            if let Some(&n) = addrs.get(&(ev.bus, s[2])) {
                s[2] = n;
            }
        }
    }
}

impl Task for ReplayTask {
    /// One step at bus local time `now`: load (first step), then emit the
    /// events due now. Returns when to run next.
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if self.handle.stop.load(Ordering::SeqCst) {
            self.release(ctx);
            return None;
        }
        if !self.started {
            self.started = true;
            let cap = match self.loaded.take() {
                Some(Ok(c)) => c,
                Some(Err(e)) => {
                    tracing::error!("bus {}: replay stopped, nothing replayed: {e}", ctx.bus);
                    self.handle.lock().state = ReplayState::Failed(e.to_string());
                    return None;
                }
                None => return None,
            };
            tracing::info!(
                "bus {}: replaying {} ({} events, speed {}{}, {} packets cut by the snapshot length, {} packets of other link types skipped)",
                ctx.bus,
                self.cfg.file.display(),
                cap.events.len(),
                self.speed(),
                if self.cfg.looping { ", looping" } else { "" },
                cap.snapped,
                cap.skipped,
            );
            if cap.events.is_empty() {
                self.handle.lock().state = ReplayState::Finished;
                return None;
            }
            match claim_addresses(ctx, &cap) {
                Ok(m) => {
                    *self.handle.claimed.lock_ok() = m.values().copied().collect();
                    self.addrs = m;
                }
                Err(e) => {
                    tracing::error!("bus {}: replay stopped, nothing replayed: {e}", ctx.bus);
                    self.handle.lock().state = ReplayState::Failed(e.to_string());
                    return None;
                }
            }
            self.period = cap.period();
            self.start = now + self.cfg.after_ms.saturating_mul(1_000_000);
            self.handle.lock().state = ReplayState::Playing;
            self.cap = Some(cap);
        }
        let cap = self.cap.clone()?;
        loop {
            let t = self.start + due(&cap.times, self.idx, self.pass, self.period, self.speed());
            if t > now {
                return Some(t);
            }
            let mut ev = cap.events[self.idx].clone();
            readdress(&mut ev, &self.addrs);
            ev.bus = ctx.bus;
            ev.ts = ctx.clock.at(t + ctx.offset);
            ctx.events += 1;
            ctx.sink.urb_event(ev);
            self.idx += 1;
            let mut st = self.handle.lock();
            st.events += 1;
            if self.idx == cap.events.len() {
                st.passes += 1;
                if !self.cfg.looping {
                    st.state = ReplayState::Finished;
                    drop(st);
                    self.release(ctx);
                    return None;
                }
                self.idx = 0;
                self.pass += 1;
            }
        }
    }
}
