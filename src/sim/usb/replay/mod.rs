//! Replay of usbmon captures: a bus driven by a capture file (see
//! [`crate::capture`] for reading and decoding it; everything is checked
//! before anything plays).
//!
//! Timing: packet `i` of pass `k` plays `(t_i - t_0 + k * period) / speed`
//! after the start, where the period of a pass is the capture's span plus
//! its mean packet spacing (1 ms for a single packet). Replayed events carry
//! the bus clock at that time, so the original spacing survives (scaled) and
//! a virtual clock gives the same timestamps every run.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::ctx::{Ctx, Task};
use crate::capture::decode::Capture;
use crate::config::ReplayConfig;
use crate::sim::SimError;
use crate::sync::LockExt;

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

/// Shared between a replay task and [`super::UsbSim`].
#[derive(Debug)]
pub struct ReplayHandle {
    stop: AtomicBool,
    status: Mutex<ReplayStatus>,
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
    loaded: Option<Result<Arc<Capture>, String>>,
    /// The capture being played.
    cap: Option<Arc<Capture>>,
    started: bool,
    /// Bus local time of the first packet of pass 0.
    start: u64,
    idx: usize,
    pass: u64,
    period: u64,
}

impl ReplayTask {
    /// A task for `cfg` with its loaded capture (or the load error, which
    /// the first step reports).
    pub(crate) fn new(
        cfg: ReplayConfig,
        handle: Arc<ReplayHandle>,
        cap: Result<Arc<Capture>, String>,
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
        }
    }

    fn speed(&self) -> f64 {
        self.cfg.speed.0
    }
}

impl Task for ReplayTask {
    /// One step at bus local time `now`: load (first step), then emit the
    /// events due now. Returns when to run next.
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if self.handle.stop.load(Ordering::SeqCst) {
            return None;
        }
        if !self.started {
            self.started = true;
            let cap = match self.loaded.take() {
                Some(Ok(c)) => c,
                Some(Err(e)) => {
                    tracing::error!("bus {}: replay stopped, nothing replayed: {e}", ctx.bus);
                    self.handle.lock().state = ReplayState::Failed(e);
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
                    return None;
                }
                self.idx = 0;
                self.pass += 1;
            }
        }
    }
}

/// A replay control command: `start BUS FILE [speed=F] [loop] [after_ms=N]`,
/// `stop BUS` or `status BUS`.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplayCommand {
    /// Start replaying `cfg` on `bus` (replacing a running replay).
    Start {
        /// Bus number.
        bus: u16,
        /// What to replay.
        cfg: ReplayConfig,
    },
    /// Stop the replay on `bus`.
    Stop {
        /// Bus number.
        bus: u16,
    },
    /// Report the replay of `bus`.
    Status {
        /// Bus number.
        bus: u16,
    },
}

impl ReplayCommand {
    /// Parse the words after `replay`.
    pub fn parse(words: &[&str]) -> Result<ReplayCommand, SimError> {
        let usage = "usage: replay start BUS FILE [speed=F] [loop] [after_ms=N] | replay stop BUS | replay status BUS";
        let bus = |w: Option<&&str>| -> Result<u16, SimError> {
            let w = w.ok_or_else(|| usage.to_string())?;
            w.parse::<u16>()
                .ok()
                .filter(|b| (1..=127).contains(b))
                .ok_or_else(|| SimError::Usage(format!("bad bus number {w:?}: must be 1..=127")))
        };
        match words.first().copied() {
            Some("start") => {
                let b = bus(words.get(1))?;
                let file = words.get(2).ok_or_else(|| usage.to_string())?;
                let mut cfg = ReplayConfig {
                    file: PathBuf::from(file),
                    speed: Default::default(),
                    looping: false,
                    after_ms: 0,
                };
                for w in &words[3..] {
                    if *w == "loop" {
                        cfg.looping = true;
                    } else if let Some(v) = w.strip_prefix("speed=") {
                        let f: f64 = v.parse().map_err(|_| format!("bad speed {v:?}"))?;
                        cfg.speed = crate::config::ReplaySpeed::new(f)?;
                    } else if let Some(v) = w.strip_prefix("after_ms=") {
                        cfg.after_ms = v.parse().map_err(|_| format!("bad after_ms {v:?}"))?;
                    } else {
                        return Err(SimError::Usage(format!(
                            "unknown replay option {w:?}; {usage}"
                        )));
                    }
                }
                Ok(ReplayCommand::Start { bus: b, cfg })
            }
            Some("stop") if words.len() == 2 => Ok(ReplayCommand::Stop {
                bus: bus(words.get(1))?,
            }),
            Some("status") if words.len() == 2 => Ok(ReplayCommand::Status {
                bus: bus(words.get(1))?,
            }),
            _ => Err(SimError::Usage(usage.to_string())),
        }
    }
}

/// What `replay start` says when no capture came with it: the daemon opens
/// no path for a caller.
pub const NEEDS_DESCRIPTOR: &str =
    "replay start takes the capture as an open file passed with the command \
(SCM_RIGHTS on the control socket); the daemon opens no path for a caller. \
Use `monfs ctl MOUNTPOINT replay start BUS FILE`, which opens FILE with your own rights";

/// A replay command ready to carry out: for `start`, its capture is loaded
/// and checked already, so that nothing slow happens under a lock.
pub struct Prepared {
    cmd: ReplayCommand,
    cap: Option<Capture>,
}

/// Parse a replay command (the words after `replay`) and, for `start`, load
/// the capture from `file`, the descriptor that came with it (see
/// [`Capture::load_from`]; the command's FILE word only labels it). Slow
/// (it reads the whole file): call it without holding locks.
pub fn prepare(words: &[&str], file: Option<std::fs::File>) -> Result<Prepared, SimError> {
    let cmd = ReplayCommand::parse(words)?;
    let cap = match &cmd {
        ReplayCommand::Start { cfg, .. } => {
            let file = file.ok_or(NEEDS_DESCRIPTOR)?;
            Some(
                Capture::load_from(&file, &cfg.file)
                    .map_err(|e| SimError::Capture(e.to_string()))?,
            )
        }
        _ => None,
    };
    Ok(Prepared { cmd, cap })
}

/// Carry out a prepared replay command on `usb`: the reply on success, an
/// explanation on failure (nothing changed then).
pub fn run_prepared(usb: &super::UsbSim, p: Prepared) -> Result<String, SimError> {
    match (p.cmd, p.cap) {
        (ReplayCommand::Start { bus, cfg }, Some(cap)) => {
            usb.replay_start(bus, &cfg, cap)?;
            Ok(format!(
                "bus {bus}: replaying {} at speed {}{}",
                cfg.file.display(),
                cfg.speed.0,
                if cfg.looping { ", looping" } else { "" }
            ))
        }
        (ReplayCommand::Start { .. }, None) => Err(SimError::Usage(NEEDS_DESCRIPTOR.into())),
        (ReplayCommand::Stop { bus }, _) => {
            usb.replay_stop(bus)?;
            Ok(format!("bus {bus}: replay stopped"))
        }
        (ReplayCommand::Status { bus }, _) => Ok(match usb.replay_status(bus)? {
            Some(s) => format!("bus {bus}: {s}"),
            None => format!("bus {bus}: no replay"),
        }),
    }
}

/// [`prepare`] and [`run_prepared`] in one (tests and callers that hold no
/// lock).
pub fn run_command(
    usb: &super::UsbSim,
    words: &[&str],
    file: Option<std::fs::File>,
) -> Result<String, SimError> {
    run_prepared(usb, prepare(words, file)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::sample_events;
    use crate::capture::write::{write_events, Format, LinkType, RECORD_RING};
    use crate::usbmon::event::UrbEvent;
    use crate::usbmon::header::encode_event;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn speed_scaling_and_loop_math() {
        let times = [0u64, 1_000_000, 1_500_000, 4_000_000];
        // Span 4 ms + mean spacing 4/3 ms.
        assert_eq!(loop_period(&times), 4_000_000 + 1_333_333);
        assert_eq!(loop_period(&[0]), 1_000_000);
        assert_eq!(loop_period(&[0, 0, 0]), 1_000);
        assert_eq!(loop_period(&[]), 0);
        assert_eq!(scale(1_000_000, 2.0), 500_000);
        assert_eq!(scale(1_000_000, 0.5), 2_000_000);
        assert_eq!(scale(3, 2.0), 2);
        let per = loop_period(&times);
        assert_eq!(due(&times, 2, 0, per, 1.0), 1_500_000);
        assert_eq!(due(&times, 2, 0, per, 2.0), 750_000);
        assert_eq!(due(&times, 0, 1, per, 1.0), per);
        assert_eq!(due(&times, 3, 2, per, 4.0), 1_000_000 + 2 * scale(per, 4.0));
        // A zero-length pass still advances.
        assert_eq!(due(&[0], 0, 5, 0, 1000.0), 5);
    }

    struct Collect(Mutex<Vec<UrbEvent>>);
    impl crate::usbmon::event::UrbSink for Collect {
        fn urb_event(&self, ev: UrbEvent) {
            self.0.lock_ok().push(ev);
        }
    }

    fn sim(yaml: &str) -> (super::super::UsbSim, Arc<Collect>) {
        let cfg = crate::config::Config::parse(yaml, "t.yaml").unwrap();
        let sink = Arc::new(Collect(Mutex::new(Vec::new())));
        let clock = Arc::new(crate::clock::VirtualClock::new());
        let sim = super::super::UsbSim::new(&cfg.usb, 1, clock, sink.clone());
        (sim, sink)
    }

    /// A looping replay at double speed: only replayed events, on the
    /// configured bus, original spacing halved, pass after pass.
    #[test]
    fn replay_bus_loops_at_speed() {
        let d = tmp();
        let p = d.path().join("c.pcapng");
        let evs = sample_events(9);
        write_events(&p, &evs, Format::PcapNg, LinkType::Mmapped).unwrap();
        let n = evs.len() as u64;
        let span = 125_000_000 * (n - 1);
        let per = span + span / (n - 1);
        let (sim, sink) = sim(&format!(
            "usb:\n  buses:\n    - bus: 4\n      replay: {{file: {}, speed: 2, loop: true, after_ms: 3}}\n",
            p.display()
        ));
        // Three passes and the first packet of the fourth.
        sim.run_until(3_000_000 + 3 * per / 2);
        let got = sink.0.lock_ok().clone();
        assert_eq!(got.len() as u64, 3 * n + 1);
        let t0 = got[0].ts.mono_ns;
        assert_eq!(
            t0,
            100_000_000_000 + 3_000_000,
            "after_ms on the virtual clock"
        );
        for (i, e) in got.iter().enumerate() {
            let k = i % evs.len();
            let pass = (i / evs.len()) as u64;
            assert_eq!(e.bus, 4);
            assert_eq!(e.id, evs[k].id);
            assert_eq!(
                e.ts.mono_ns - t0,
                (k as u64 * 125_000_000 + pass * per) / 2,
                "event {i}"
            );
            assert_eq!(e.ts.wall_ns - got[0].ts.wall_ns, e.ts.mono_ns - t0);
        }
        let st = sim.replay_status(4).unwrap().unwrap();
        assert_eq!(
            (st.state, st.events, st.passes),
            (ReplayState::Playing, 3 * n + 1, 3)
        );
        sim.replay_stop(4).unwrap();
        sim.run_until(10_000_000_000);
        assert_eq!(sink.0.lock_ok().len() as u64, 3 * n + 1, "stopped");
        assert_eq!(
            sim.replay_status(4).unwrap().unwrap().state,
            ReplayState::Stopped
        );
        assert!(sim
            .replay_stop(4)
            .unwrap_err()
            .to_string()
            .contains("no replay is running on bus 4"));
        assert!(
            sim.devices_text().contains("Bus=04"),
            "the root hub is listed"
        );
        let dev: crate::config::DeviceConfig =
            serde_yaml_ng::from_str("{port: 1, kind: hid-mouse}").unwrap();
        assert!(sim
            .plug(4, &[1], &dev)
            .unwrap_err()
            .to_string()
            .contains("replays a capture"));
    }

    /// A corrupt capture stops its bus's replay with an error naming file
    /// and offset; the other buses run on, and a control start of the same
    /// file fails the same way and changes nothing.
    #[test]
    fn corrupt_capture_leaves_other_buses_running() {
        let d = tmp();
        let good = d.path().join("good.pcap");
        let bad = d.path().join("bad.pcap");
        let evs = sample_events(1);
        write_events(&good, &evs[..2], Format::Pcap, LinkType::Mmapped).unwrap();
        let b = std::fs::read(&good).unwrap();
        std::fs::write(&bad, &b[..b.len() - 1]).unwrap();
        let (sim, sink) = sim(&format!(
            "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 10\n    - bus: 2\n      replay: {{file: {}}}\n    - bus: 3\n      replay: {{file: {}}}\n",
            bad.display(),
            good.display()
        ));
        sim.run_until(300_000_000);
        let st = sim.replay_status(2).unwrap().unwrap();
        let ReplayState::Failed(msg) = &st.state else {
            panic!("{st}");
        };
        let off = 24 + 16 + encode_event(&evs[0], RECORD_RING).len() + 16;
        assert!(
            msg.contains(&format!(
                "{}: byte offset {off}: packet 1: truncated",
                bad.display()
            )),
            "{msg}"
        );
        let got = sink.0.lock_ok().clone();
        assert!(got.iter().filter(|e| e.bus == 1).count() > 5, "bus 1 runs");
        assert_eq!(got.iter().filter(|e| e.bus == 2).count(), 0);
        assert_eq!(got.iter().filter(|e| e.bus == 3).count(), 2);
        let cfg = |f: &Path| ReplayConfig {
            file: f.to_path_buf(),
            speed: Default::default(),
            looping: false,
            after_ms: 0,
        };
        let start = |bus: u16, f: &Path| {
            let cap = Capture::load(f).map_err(|e| e.to_string())?;
            sim.replay_start(bus, &cfg(f), cap)
                .map_err(|e| e.to_string())
        };
        let e = start(3, &bad).unwrap_err();
        assert!(e.contains("byte offset"), "{e}");
        assert_eq!(
            sim.replay_status(3).unwrap().unwrap().state,
            ReplayState::Finished
        );
        let e = start(3, &d.path().join("missing.pcap")).unwrap_err();
        assert!(
            e.contains("missing.pcap") && e.contains("No such file"),
            "{e}"
        );
        // A control start on a simulated bus mixes in the capture.
        start(1, &good).unwrap();
        sim.run_until(600_000_000);
        let got = sink.0.lock_ok().clone();
        assert!(got.iter().any(|e| e.bus == 1 && e.id == evs[0].id));
        assert_eq!(
            sim.replay_status(1).unwrap().unwrap().state,
            ReplayState::Finished
        );
        assert!(sim.replay_status(5).is_err());
    }

    #[test]
    fn control_commands_on_a_running_sim() {
        let d = tmp();
        let p = d.path().join("c.pcap");
        write_events(&p, &sample_events(1), Format::Pcap, LinkType::Mmapped).unwrap();
        let (sim, sink) = sim("usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n");
        let f = p.display().to_string();
        assert_eq!(
            run_command(&sim, &["status", "1"], None).unwrap(),
            "bus 1: no replay"
        );
        let open = || Some(std::fs::File::open(&p).unwrap());
        let r = run_command(&sim, &["start", "1", &f, "speed=1000", "loop"], open()).unwrap();
        assert!(r.contains("replaying") && r.contains("looping"), "{r}");
        sim.run_until(1_000_000_000);
        let r = run_command(&sim, &["status", "1"], None).unwrap();
        assert!(
            r.starts_with(&format!("bus 1: replay {f}: playing, ")),
            "{r}"
        );
        assert_eq!(
            run_command(&sim, &["stop", "1"], None).unwrap(),
            "bus 1: replay stopped"
        );
        let n = sink.0.lock_ok().len();
        sim.run_until(2_000_000_000);
        assert_eq!(sink.0.lock_ok().len(), n);
        assert!(run_command(&sim, &["stop", "1"], None).is_err());
        assert!(run_command(&sim, &["start", "9", &f], open())
            .unwrap_err()
            .to_string()
            .contains("no USB bus 9"));
        // The FILE word only labels the capture: without a descriptor
        // nothing is opened, whatever it names.
        let e = run_command(&sim, &["start", "1", &f], None).unwrap_err();
        assert_eq!(e.to_string(), NEEDS_DESCRIPTOR);
        // Only a regular file is read: not a device, a FIFO or a directory.
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let nonblock = |p: &Path| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p)
                .unwrap()
        };
        for (what, file) in [
            ("/dev/zero", nonblock(Path::new("/dev/zero"))),
            ("fifo", nonblock(&fifo)),
            ("dir", nonblock(d.path())),
        ] {
            let e = run_command(&sim, &["start", "1", what], Some(file)).unwrap_err();
            assert_eq!(e.to_string(), format!("{what}: not a regular file"));
        }
    }

    #[test]
    fn control_command_grammar() {
        let c = ReplayCommand::parse(&["start", "3", "/tmp/a.pcap", "speed=2", "loop"]).unwrap();
        match c {
            ReplayCommand::Start { bus, cfg } => {
                assert_eq!(bus, 3);
                assert_eq!(cfg.file, Path::new("/tmp/a.pcap"));
                assert_eq!(cfg.speed.0, 2.0);
                assert!(cfg.looping);
            }
            c => panic!("{c:?}"),
        }
        assert_eq!(
            ReplayCommand::parse(&["stop", "2"]).unwrap(),
            ReplayCommand::Stop { bus: 2 }
        );
        assert!(ReplayCommand::parse(&["start", "0", "f"]).is_err());
        assert!(ReplayCommand::parse(&["start", "1", "f", "speed=-1"])
            .unwrap_err()
            .to_string()
            .contains("speed"));
        assert!(ReplayCommand::parse(&["start", "1", "f", "lop"])
            .unwrap_err()
            .to_string()
            .contains("lop"));
        assert!(ReplayCommand::parse(&["stop"]).is_err());
        assert!(ReplayCommand::parse(&[]).is_err());
    }
}
