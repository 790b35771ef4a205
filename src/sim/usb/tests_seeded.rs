//! Seeded runs stay as they are: every built-in device kind, clean and
//! with injected faults, and the default configuration, each run from a
//! seed and digested event by event (every field usbmon can show: tags,
//! times, statuses, lengths, flags, setup, iso packets, data). The
//! digests are kept in `tests/data/seeded_digests.txt`; a change that
//! alters a seeded run fails here and says which scenario moved. A change
//! meant to alter them (a field made as the kernel makes it) rewrites the
//! file with `MONFS_BLESS=1 cargo test --lib seeded_runs` and says why in
//! its commit.

use std::fmt::Write as _;
use std::hash::Hasher;
use std::sync::Arc;

use super::usbfs_port::tests::{Collect, TestClock};
use super::UsbSim;
use crate::base::sync::LockExt;
use crate::config::Config;

/// (name, devices of bus 1 as YAML flow maps, simulated ms).
const SCENARIOS: &[(&str, &[&str], u64)] = &[
    ("hid-keyboard", &["{port: 1, kind: hid-keyboard}"], 3000),
    ("hid-mouse", &["{port: 1, kind: hid-mouse}"], 3000),
    ("hid-tablet", &["{port: 1, kind: hid-tablet}"], 3000),
    ("mass-storage", &["{port: 1, kind: mass-storage, interval_ms: 20}"], 3000),
    (
        "mass-storage-faults",
        &["{port: 1, kind: mass-storage, interval_ms: 10, errors: {stall_every: 7, unlink_every: 11, proto_error_every: 13, submit_error_every: 17}}"],
        3000,
    ),
    ("audio", &["{port: 1, kind: audio}"], 1500),
    ("webcam", &["{port: 1, kind: webcam}"], 1500),
    ("flood", &["{port: 1, kind: flood, rate: 20000}"], 1000),
    (
        "flood-faults",
        &["{port: 1, kind: flood, rate: 20000, errors: {stall_every: 7, unlink_every: 11, proto_error_every: 13, submit_error_every: 17}}"],
        1000,
    ),
    (
        "hid-faults",
        &["{port: 1, kind: hid-mouse, errors: {stall_every: 7, unlink_every: 11, proto_error_every: 13, submit_error_every: 17}}"],
        3000,
    ),
    (
        "hub",
        &["{port: 1, kind: hub, devices: [{port: 2, kind: hid-keyboard}, {port: 3, kind: mass-storage, interval_ms: 50}]}"],
        3000,
    ),
];

const SEEDS: [u64; 2] = [3, 11];

/// FNV-1a, 64 bits: a digest that is the same on every host and build.
struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The events of one seeded run of `yaml` for `ms`, digested, and how many.
fn digest(cfg: &Config, seed: u64, ms: u64) -> (u64, usize) {
    let sink = Arc::new(Collect::default());
    let _sim = UsbSim::run_for_test(&cfg.usb, seed, ms, Arc::new(TestClock), sink.clone());
    let evs = sink.0.lock_ok();
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    for e in evs.iter() {
        h.write(format!("{e:?}\n").as_bytes());
    }
    (h.finish(), evs.len())
}

fn bus_yaml(devices: &[&str]) -> String {
    let mut y = String::from("usb:\n  buses:\n    - bus: 1\n      devices:\n");
    for d in devices {
        let _ = writeln!(y, "        - {d}");
    }
    y
}

/// Every scenario's digest lines, in order.
fn digests() -> String {
    let mut out = String::new();
    let mut runs: Vec<(&str, Config, u64)> = SCENARIOS
        .iter()
        .map(|(name, devs, ms)| (*name, Config::parse(&bus_yaml(devs), name).unwrap(), *ms))
        .collect();
    runs.push(("default-config", Config::builtin(), 1000));
    for (name, cfg, ms) in runs {
        for seed in SEEDS {
            let (d, n) = digest(&cfg, seed, ms);
            let _ = writeln!(out, "{name} seed {seed} {ms} ms: {n} events {d:016x}");
        }
    }
    out
}

#[test]
fn seeded_runs_stay_as_they_are() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/seeded_digests.txt");
    let got = digests();
    if std::env::var_os("MONFS_BLESS").is_some() {
        std::fs::write(path, &got).unwrap();
        return;
    }
    let want = std::fs::read_to_string(path).expect("tests/data/seeded_digests.txt");
    let moved: Vec<String> = want
        .lines()
        .zip(got.lines())
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("  was {w}\n  now {g}"))
        .collect();
    assert!(
        moved.is_empty() && want.lines().count() == got.lines().count(),
        "seeded runs changed (MONFS_BLESS=1 rewrites the file, for a change meant to):\n{}",
        moved.join("\n")
    );
}
