//! Simulators: producers that push events into the facilities.
pub mod rng;
pub mod usb;
pub mod zvm;
