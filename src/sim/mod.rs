//! Simulators: producers that push events into the facilities.
pub mod usb;
pub mod zvm;
