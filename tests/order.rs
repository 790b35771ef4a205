//! Order under load: readers of several buses (`0u`, `dev/usbmon0` through
//! the mmap ring, tracefs's `usb:usb_urb_*` events in `trace_pipe`) see time
//! stamps that never go back, however the machine is loaded. The kernel
//! stamps each event right before queueing it, so its reversals across buses
//! are microseconds; monfs puts every bus's events into one order and stamps
//! none of them earlier than the one before.
//!
//! The load is a CPU hog of twice as many busy processes as the machine has
//! CPUs, so the buses' threads are preempted between making an event and
//! delivering it. Nothing here is timed: the test counts events, not seconds.

mod common;

use std::process::{Child, Command, Stdio};

use common::*;

/// Four buses, each with a steady flood device and a keyboard.
fn config() -> String {
    let mut s = String::from("usb:\n  buses:\n");
    for bus in 1..=4 {
        s.push_str(&format!(
            "    - bus: {bus}\n      devices:\n        - {{port: 1, kind: flood, rate: 2000, transfer_size: 64}}\n        - {{port: 2, kind: hid-keyboard}}\n"
        ));
    }
    s
}

/// Busy processes that keep every CPU loaded until dropped.
struct Hog(Vec<Child>);

impl Hog {
    fn start() -> Hog {
        let n = 2 * std::thread::available_parallelism().map_or(2, |n| n.get());
        Hog((0..n)
            .map(|_| {
                Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .stdout(Stdio::null())
                    .spawn()
                    .expect("start a busy loop")
            })
            .collect())
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The usbmon text time stamps (second field, microseconds modulo 4096 s) of
/// `lines`.
fn text_stamps(lines: &str) -> Vec<u64> {
    lines
        .lines()
        .filter_map(|l| l.split(' ').nth(1)?.parse().ok())
        .collect()
}

/// Check that `stamps` never go back (a wrap of the 4096 s text clock
/// excepted) and that the events come from more than one bus.
fn assert_in_order(what: &str, stamps: &[u64], buses: usize) {
    const WRAP: u64 = 4096 * 1_000_000;
    let mut back = Vec::new();
    for (i, w) in stamps.windows(2).enumerate() {
        let wrapped = w[0] > WRAP - 60_000_000 && w[1] < 60_000_000;
        if w[1] < w[0] && !wrapped {
            back.push(format!("event {}: {} after {}", i + 1, w[1], w[0]));
        }
    }
    assert!(
        back.is_empty(),
        "{what}: {} of {} time stamps go back, first: {:?}",
        back.len(),
        stamps.len(),
        &back[..back.len().min(5)]
    );
    assert!(buses > 1, "{what}: events from {buses} bus(es) only");
}

/// Distinct bus numbers in usbmon `u` lines (`Bi:2:003:1` and the like).
fn buses_in(lines: &str) -> usize {
    let mut b: Vec<&str> = lines
        .lines()
        .filter_map(|l| l.split(' ').nth(3)?.split(':').nth(1))
        .collect();
    b.sort();
    b.dedup();
    b.len()
}

const EVENTS: usize = 6000;

#[test]
fn readers_of_all_buses_never_go_back_under_load() {
    let m = Mount::with_config(&config());
    let bin = compile_c("usbmon_mmap", m.dir.path());
    m.sh_ok(
        "echo 1 > tracing/events/usb/usb_urb_submit/enable && \
         echo 1 > tracing/events/usb/usb_urb_complete/enable",
    );
    let _hog = Hog::start();
    let text = Command::new("head")
        .args(["-n", &EVENTS.to_string()])
        .arg(m.path("usb/usbmon/0u"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let binary = Command::new(&bin)
        .arg(m.path("dev/usbmon0"))
        .arg(EVENTS.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let trace = Command::new("head")
        .args(["-n", &EVENTS.to_string()])
        .arg(m.path("tracing/trace_pipe"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();

    let t = String::from_utf8(text.wait_with_output().unwrap().stdout).unwrap();
    let b = String::from_utf8(binary.wait_with_output().unwrap().stdout).unwrap();
    let p = String::from_utf8(trace.wait_with_output().unwrap().stdout).unwrap();

    let ts = text_stamps(&t);
    assert_eq!(ts.len(), EVENTS, "0u gave {} lines", ts.len());
    assert_in_order("0u", &ts, buses_in(&t));
    let bs = text_stamps(&b);
    assert_eq!(bs.len(), EVENTS, "dev/usbmon0 gave {} events", bs.len());
    assert_in_order("dev/usbmon0 (mmap)", &bs, buses_in(&b));

    // trace_pipe: `  monfs-123  [001] ..... 101.234567: usb_urb_submit: ... bus=2 ...`
    let mut stamps = Vec::new();
    let mut buses: Vec<String> = Vec::new();
    for l in p.lines() {
        let Some(head) = l.split(": usb_urb_").next() else {
            continue;
        };
        let Some(t) = head.split_whitespace().last() else {
            continue;
        };
        let (s, us) = t.split_once('.').expect("a trace_pipe time stamp");
        stamps.push(s.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap());
        if let Some(b) = l.split(" bus=").nth(1).and_then(|r| r.split(' ').next()) {
            buses.push(b.to_string());
        }
    }
    buses.sort();
    buses.dedup();
    assert_eq!(
        stamps.len(),
        EVENTS,
        "trace_pipe gave {} events:\n{p}",
        stamps.len()
    );
    assert_in_order("trace_pipe (usb:usb_urb_*)", &stamps, buses.len());
}
