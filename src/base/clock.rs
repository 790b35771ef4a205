//! Clocks: the simulators schedule events in "simulation time" (nanoseconds since
//! the daemon started) and a [`Clock`] maps that onto the two kernel clocks that
//! usbmon reports: the monotonic clock (text interface) and the wall clock (binary
//! interface).
//!
//! A [`RealClock`] follows the machine's clocks and sleeps for real. A
//! [`VirtualClock`] starts both kernel clocks at fixed values, so that a seeded run
//! produces the same timestamps every time; it still paces events in real time.

use std::time::Duration;

/// A point in time as both kernel clocks see it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub mono_ns: u64,
    /// CLOCK_REALTIME, nanoseconds since the Unix epoch.
    pub wall_ns: u64,
}

impl Timestamp {
    /// The usbmon text timestamp: `(sec & 0xFFF) * 1_000_000 + usec` of the
    /// monotonic clock, which wraps every 4096 s.
    pub fn text_usec(&self) -> u32 {
        let sec = self.mono_ns / 1_000_000_000;
        let usec = (self.mono_ns % 1_000_000_000) / 1000;
        ((sec & 0xFFF) * 1_000_000 + usec) as u32
    }

    /// The usbmon binary timestamp: wall-clock seconds and microseconds.
    pub fn wall_sec_usec(&self) -> (i64, i32) {
        (
            (self.wall_ns / 1_000_000_000) as i64,
            ((self.wall_ns % 1_000_000_000) / 1000) as i32,
        )
    }
}

/// Maps simulation time onto kernel clocks and paces the simulators.
pub trait Clock: Send + Sync {
    /// Simulation time now, in nanoseconds since the clock was created.
    fn sim_now(&self) -> u64;
    /// The kernel clocks at simulation time `sim_ns`.
    fn at(&self, sim_ns: u64) -> Timestamp;
    /// Block the calling thread until simulation time `sim_ns` (returns at once if
    /// it has passed).
    fn sleep_until(&self, sim_ns: u64) {
        let now = self.sim_now();
        if sim_ns > now {
            std::thread::sleep(Duration::from_nanos(sim_ns - now));
        }
    }
    /// The kernel clocks now.
    fn now(&self) -> Timestamp {
        self.at(self.sim_now())
    }
    /// Whether timestamps must come from simulation time alone, never from
    /// when something happened to start (the virtual clock).
    fn deterministic(&self) -> bool {
        false
    }
}

/// The current time of clock `id` (CLOCK_MONOTONIC, CLOCK_REALTIME), in nanoseconds.
pub(crate) fn clock_ns(id: libc::clockid_t) -> u64 {
    // Monotonic and realtime clocks always exist.
    match nix::time::clock_gettime(nix::time::ClockId::from_raw(id)) {
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64,
        Err(_) => 0,
    }
}

/// The machine's clocks.
pub struct RealClock {
    start_mono: u64,
    start_wall: u64,
}

impl RealClock {
    /// A clock whose simulation time 0 is now.
    pub fn new() -> Self {
        RealClock {
            start_mono: clock_ns(libc::CLOCK_MONOTONIC),
            start_wall: clock_ns(libc::CLOCK_REALTIME),
        }
    }
}

impl Default for RealClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for RealClock {
    fn sim_now(&self) -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(self.start_mono)
    }
    fn at(&self, sim_ns: u64) -> Timestamp {
        Timestamp {
            mono_ns: self.start_mono + sim_ns,
            wall_ns: self.start_wall + sim_ns,
        }
    }
}

/// Fixed starting points for both kernel clocks; paced in real time.
pub struct VirtualClock {
    start_mono: u64,
    mono_base: u64,
    wall_base: u64,
}

impl VirtualClock {
    /// Monotonic clock starts at 100 s of "uptime", the wall clock at
    /// 2024-01-01T00:00:00Z.
    pub fn new() -> Self {
        VirtualClock {
            start_mono: clock_ns(libc::CLOCK_MONOTONIC),
            mono_base: 100_000_000_000,
            wall_base: 1_704_067_200_000_000_000,
        }
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for VirtualClock {
    fn sim_now(&self) -> u64 {
        clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(self.start_mono)
    }
    fn deterministic(&self) -> bool {
        true
    }
    fn at(&self, sim_ns: u64) -> Timestamp {
        Timestamp {
            mono_ns: self.mono_base + sim_ns,
            wall_ns: self.wall_base + sim_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_timestamp_wraps_at_4096_seconds() {
        let t = Timestamp {
            mono_ns: 4095 * 1_000_000_000 + 999_999_000,
            wall_ns: 0,
        };
        assert_eq!(t.text_usec(), 4_095_999_999);
        let t = Timestamp {
            mono_ns: 4096 * 1_000_000_000 + 5_000,
            wall_ns: 0,
        };
        assert_eq!(t.text_usec(), 5);
    }

    #[test]
    fn wall_split() {
        let t = Timestamp {
            mono_ns: 0,
            wall_ns: 1_700_000_000_123_456_789,
        };
        assert_eq!(t.wall_sec_usec(), (1_700_000_000, 123_456));
    }
}
