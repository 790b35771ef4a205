//! Replay of usbmon captures: a bus driven by a capture file (see
//! [`crate::capture`] for reading and decoding it; everything is checked
//! before anything plays).
//!
//! `play.rs` plays a capture on a bus (the timing, the status, the bus
//! task); `command.rs` is the `replay` control command, which drives the
//! replays of [`UsbSim`](super::UsbSim). This file only declares them.

mod command;
mod play;
#[cfg(test)]
mod tests;

pub use crate::sim::NEEDS_DESCRIPTOR;
pub use command::{prepare, run_command, run_prepared, Prepared, ReplayCommand};
pub(crate) use play::ReplayTask;
pub use play::{due, loop_period, scale, ReplayHandle, ReplayState, ReplayStatus};
