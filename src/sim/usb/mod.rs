//! Simulated USB buses and devices.
