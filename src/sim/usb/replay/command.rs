//! The `replay` control command: `start BUS FILE [speed=F] [loop]
//! [after_ms=N]`, `stop BUS` and `status BUS`, parsed, prepared without
//! locks, and carried out on the [`UsbSim`]'s replays.

use std::path::PathBuf;

use crate::capture::decode::Capture;
use crate::config::ReplayConfig;
use crate::sim::usb::UsbSim;
use crate::sim::SimError;

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
        let bus = |w: Option<&&str>| -> Result<u16, SimError> {
            let w = w.ok_or(SimError::ReplayUsage)?;
            w.parse::<u16>()
                .ok()
                .filter(|b| (1..=127).contains(b))
                .ok_or_else(|| SimError::ReplayBus(w.to_string()))
        };
        let bad = |option, value: &str| SimError::ReplayValue {
            option,
            value: value.to_string(),
        };
        match words.first().copied() {
            Some("start") => {
                let b = bus(words.get(1))?;
                let file = words.get(2).ok_or(SimError::ReplayUsage)?;
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
                        let f: f64 = v.parse().map_err(|_| bad("speed", v))?;
                        cfg.speed = crate::config::ReplaySpeed::new(f)?;
                    } else if let Some(v) = w.strip_prefix("after_ms=") {
                        cfg.after_ms = v.parse().map_err(|_| bad("after_ms", v))?;
                    } else {
                        return Err(SimError::ReplayOption(w.to_string()));
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
            _ => Err(SimError::ReplayUsage),
        }
    }
}

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
            let file = file.ok_or(SimError::NeedsDescriptor)?;
            Some(Capture::load_from(&file, &cfg.file)?)
        }
        _ => None,
    };
    Ok(Prepared { cmd, cap })
}

/// Carry out a prepared replay command on `usb`: the reply on success, an
/// explanation on failure (nothing changed then).
pub fn run_prepared(usb: &UsbSim, p: Prepared) -> Result<String, SimError> {
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
        (ReplayCommand::Start { .. }, None) => Err(SimError::NeedsDescriptor),
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
    usb: &UsbSim,
    words: &[&str],
    file: Option<std::fs::File>,
) -> Result<String, SimError> {
    run_prepared(usb, prepare(words, file)?)
}
