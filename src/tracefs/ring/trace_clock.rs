//! `trace_clock`: the clock that stamps trace entries, with the kernel's
//! names (`kernel/trace/trace.c`, `trace_clocks[]`). Choosing a clock
//! clears the buffers, as in the kernel, so one buffer never mixes clocks.
//!
//! How each is made here: `local`, `global`, `perf` and `mono` are
//! CLOCK_MONOTONIC (the kernel's `local` is `sched_clock`, which on x86 also
//! counts nanoseconds since boot, monotonic and unadjusted); `mono_raw`,
//! `boot` and `tai` are CLOCK_MONOTONIC_RAW, CLOCK_BOOTTIME and CLOCK_TAI;
//! `counter` is a counter that every entry increments; `uptime` is jiffies
//! (CLOCK_BOOTTIME at [`HZ`]); `x86-tsc` reads the time-stamp counter.
//! Producers that carry their own monotonic timestamp (the simulators) keep
//! it on the monotonic-based clocks and are shifted by the current offset on
//! the others.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use nix::time::{clock_gettime, ClockId};

/// Jiffies per second for `uptime` (Debian's kernels use CONFIG_HZ=250).
pub const HZ: u64 = 250;

/// The kernel's clock names, in `trace_clock` order.
#[cfg(target_arch = "x86_64")]
pub const NAMES: &[&str] = &[
    "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai", "x86-tsc",
];
/// The kernel's clock names, in `trace_clock` order.
#[cfg(not(target_arch = "x86_64"))]
pub const NAMES: &[&str] = &[
    "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai",
];

const COUNTER: usize = 2;
const UPTIME: usize = 3;
const MONO_RAW: usize = 6;
const BOOT: usize = 7;
const TAI: usize = 8;
const TSC: usize = 9;

/// The selected trace clock.
#[derive(Default)]
pub struct TraceClock {
    sel: AtomicU8,
    counter: AtomicU64,
}

fn ns(id: ClockId) -> u64 {
    clock_gettime(id).map_or(0, |t| {
        t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
    })
}

impl TraceClock {
    /// Index of the selected clock in [`NAMES`].
    pub fn selected(&self) -> usize {
        self.sel.load(Ordering::Relaxed) as usize
    }

    /// Select clock `name`; `None` for a name the kernel does not have.
    /// Returns whether the clock changed.
    pub fn select(&self, name: &str) -> Option<bool> {
        let i = NAMES.iter().position(|n| *n == name)?;
        let old = self.sel.swap(i as u8, Ordering::SeqCst);
        Some(old as usize != i)
    }

    /// Whether the selected clock counts nanoseconds (the `trace` file then
    /// prints seconds.microseconds).
    pub fn in_ns(&self) -> bool {
        !matches!(self.selected(), COUNTER | UPTIME | TSC)
    }

    /// The `trace_clock` file: every name, the selected one in brackets.
    pub fn text(&self) -> String {
        let sel = self.selected();
        let s: Vec<String> = NAMES
            .iter()
            .enumerate()
            .map(|(i, n)| {
                if i == sel {
                    format!("[{n}]")
                } else {
                    n.to_string()
                }
            })
            .collect();
        s.join(" ") + "\n"
    }

    /// A time on the selected clock for an entry whose producer stamped it
    /// `mono_ns` on CLOCK_MONOTONIC.
    pub fn stamp(&self, mono_ns: u64) -> u64 {
        let shift = |id| {
            let m = ns(ClockId::CLOCK_MONOTONIC);
            mono_ns.wrapping_add(ns(id)).wrapping_sub(m)
        };
        match self.selected() {
            COUNTER => self.counter.fetch_add(1, Ordering::Relaxed) + 1,
            UPTIME => shift(ClockId::CLOCK_BOOTTIME) / (1_000_000_000 / HZ),
            MONO_RAW => shift(ClockId::CLOCK_MONOTONIC_RAW),
            BOOT => shift(ClockId::CLOCK_BOOTTIME),
            TAI => shift(ClockId::CLOCK_TAI),
            TSC => tsc(),
            _ => mono_ns,
        }
    }

    /// The selected clock now (`now ts` in `per_cpu/cpuN/stats`).
    pub fn now(&self) -> u64 {
        match self.selected() {
            COUNTER => self.counter.load(Ordering::Relaxed),
            UPTIME => ns(ClockId::CLOCK_BOOTTIME) / (1_000_000_000 / HZ),
            MONO_RAW => ns(ClockId::CLOCK_MONOTONIC_RAW),
            BOOT => ns(ClockId::CLOCK_BOOTTIME),
            TAI => ns(ClockId::CLOCK_TAI),
            TSC => tsc(),
            _ => ns(ClockId::CLOCK_MONOTONIC),
        }
    }
}

#[cfg(target_arch = "x86_64")]
fn tsc() -> u64 {
    // SAFETY: rdtsc reads a counter; it has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc() -> u64 {
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_selection_read_as_the_kernels() {
        let c = TraceClock::default();
        assert!(c
            .text()
            .starts_with("[local] global counter uptime perf mono mono_raw boot tai"));
        assert!(c.text().ends_with('\n') && !c.text().ends_with(" \n"));
        assert_eq!(c.select("counter"), Some(true));
        assert_eq!(c.select("counter"), Some(false));
        assert!(c.text().contains(" [counter] "));
        assert!(!c.in_ns());
        let n = c.stamp(5);
        assert_eq!(c.stamp(5), n + 1);
        assert_eq!(c.select("nope"), None);
        c.select("boot");
        assert!(c.in_ns());
        // CLOCK_BOOTTIME never runs behind CLOCK_MONOTONIC.
        let m = ns(ClockId::CLOCK_MONOTONIC);
        assert!(c.stamp(m) >= m);
        c.select("local");
        assert_eq!(c.stamp(77), 77);
    }
}
