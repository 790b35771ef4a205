//! Simulators: producers that push events into the facilities.
mod error;
pub mod rng;
pub mod usb;
pub mod zvm;

pub use error::{SimError, NEEDS_DESCRIPTOR};
