//! The soak test of issue 9 ("Load"): every simulator at a high rate, and at
//! the same time 8 usbmon text readers (some joining and leaving), 4 mmap
//! readers of the binary devices (tests/c/soak_bin.c), 2 `trace_pipe`
//! readers, user_events producers and the monreader reader, for
//! `MONFS_SOAK_SECS` seconds (default 40; `scripts/soak` runs 600 s in release).
//!
//! It checks that
//! - no reader sees a corrupt or out-of-order event: every text line matches
//!   the kernel's grammar, every binary header is consistent (soak_bin), every
//!   trace line has its shape, every monreader read follows the driver's
//!   framing and every set decodes; per bus and reader, timestamps never go
//!   backwards;
//! - drop counters add up: after `pause` of every bus through `monfs/ctl` and
//!   a drain, the only reader bus 3 ever had (`3u`) read `events - text_lost`
//!   lines of `3s`, and the only reader bus 2 ever had (`dev/usbmon2`) saw
//!   S/C/E events plus `MON_IOCG_STATS.dropped` equal to `2s` events;
//! - the daemon's RSS stays flat (max of the last third <= 1.25 x max of the
//!   first third + 16 MiB) and its file descriptors and reader registrations
//!   go back to where they were once every reader has gone;
//! - the daemon keeps answering `ls` of the mount root (sampled every 200 ms
//!   from its own thread) without error, and no answer hangs
//!   ([`common::HANG`]). How long the answers took (also net of the time the
//!   sampling thread itself waited for a CPU, its schedstat run delay) is
//!   printed against [`LS_REPORT`], not asserted: on a busy host it is the
//!   host's, and latency belongs in `scripts/bench`.
//!
//! The pure checkers are unit-tested below with good and corrupt input, so
//! each check can fail.

mod common;

use std::collections::HashMap;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::unix::thread::JoinHandleExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{check_line, is_dec, is_hex, is_int, TextEvent};
use common::{compile_c, Mount};

/// Buses 1-3 with flood devices of modest transfer sizes plus HID, storage,
/// isochronous audio and video, and a device that comes and goes; the z/VM
/// monitor samples every 100 ms with 200 events/s. Bus 2 (the binary
/// accounting bus) has no submit errors: the kernel does not count lost `E`
/// events in `dropped`, so they would make its sum inexact.
const CONFIG: &str = "\
seed: 9
usb:
  buses:
    - bus: 1
      controller: xhci
      ports: 4
      hub_poll_ms: 250
      devices:
        - {port: 1, kind: flood, transfer_size: 64, rate: 3000}
        - {port: 2, kind: hid-keyboard, interval_ms: 4}
        - {port: 3, kind: hid-mouse, interval_ms: 2, plug_after_ms: 3000, unplug_after_ms: 20000}
        - port: 4
          kind: hub
          devices:
            - {port: 1, kind: audio}
    - bus: 2
      controller: ehci
      ports: 3
      hub_poll_ms: 500
      devices:
        - {port: 1, kind: flood, transfer_size: 512, rate: 2500}
        - {port: 2, kind: webcam}
        - {port: 3, kind: mass-storage, interval_ms: 20, errors: {stall_every: 7, unlink_every: 11}}
    - bus: 3
      controller: ohci
      ports: 3
      hub_poll_ms: 300
      devices:
        - {port: 1, kind: flood, transfer_size: 200, rate: 1500, errors: {submit_error_every: 50}}
        - {port: 2, kind: mass-storage, interval_ms: 10, errors: {submit_error_every: 13, proto_error_every: 17}}
        - {port: 3, kind: hid-keyboard}
zvm:
  sample_interval_ms: 100
  event_rate: 200
";

/// Buses of the config.
const BUSES: [u16; 3] = [1, 2, 3];

/// The `ls` latency the summary counts samples over (reported only).
const LS_REPORT: Duration = Duration::from_millis(50);

// ---------------------------------------------------------------------------
// Checkers (pure, unit-tested at the end of the file)
// ---------------------------------------------------------------------------

/// Per-key "never backwards" check. Text timestamps wrap every 4096 s, so a
/// step is backwards when it is more than half the period the wrong way.
#[derive(Default)]
struct Order {
    last: HashMap<u64, u64>,
}

impl Order {
    /// Feed the next value for `key`; `modulo` 0 means no wrap.
    fn step(&mut self, key: u64, v: u64, modulo: u64) -> Result<(), String> {
        let r = match self.last.get(&key) {
            Some(&prev) if modulo == 0 && v < prev => Err(format!("{prev} -> {v}")),
            Some(&prev) if modulo != 0 && (v + modulo - prev) % modulo > modulo / 2 => {
                Err(format!("{prev} -> {v}"))
            }
            _ => Ok(()),
        };
        self.last.insert(key, v);
        r
    }
}

/// Text timestamps are microseconds modulo 4096 s.
const TEXT_TS_MOD: u64 = 4_096_000_000;

/// One `trace_pipe` line.
#[derive(Debug, PartialEq, Eq)]
enum TraceEvent {
    /// `usb_urb_complete` on a bus.
    Urb { bus: u16, ts_us: u64 },
    /// The user_events producers' `example_counter`.
    /// `run`: the producer's run number from its tag (`r<run>`; 0 for
    /// `example`), so that a pid the host reused for a later run starts a
    /// new count.
    Counter {
        pid: u32,
        run: u64,
        count: u64,
        ts_us: u64,
    },
}

/// Check the shape of one `trace_pipe` line:
/// `<comm right-aligned in 16>-<pid> [ccc] ..... <secs>.<usecs>: <event>: <fields>`.
fn check_trace_line(line: &str) -> Result<TraceEvent, String> {
    let err = |m: &str| Err(format!("{m}: {line:?}"));
    let Some((ctx, rest)) = line.split_once("]") else {
        return err("no cpu field");
    };
    let Some((task, cpu)) = ctx.rsplit_once(" [") else {
        return err("no cpu field");
    };
    if cpu.len() != 3 || !is_dec(cpu) {
        return err("cpu");
    }
    let task = task.trim_end();
    if task.len() < 18 || task.as_bytes().get(16) != Some(&b'-') {
        return err("comm is not right-aligned in 16 columns");
    }
    let Some((_comm, pid)) = task.rsplit_once('-') else {
        return err("comm-pid");
    };
    if !is_dec(pid) {
        return err("pid");
    }
    let pid: u32 = pid.parse().map_err(|_| format!("pid: {line:?}"))?;
    let Some(rest) = rest.strip_prefix(" ..... ") else {
        return err("flags");
    };
    let rest = rest.trim_start();
    let Some((ts, rest)) = rest.split_once(": ") else {
        return err("timestamp");
    };
    let Some((secs, usecs)) = ts.split_once('.') else {
        return err("timestamp");
    };
    if !is_dec(secs) || usecs.len() != 6 || !is_dec(usecs) {
        return err("timestamp");
    }
    let ts_us = secs.parse::<u64>().unwrap() * 1_000_000 + usecs.parse::<u64>().unwrap();
    let Some((name, fields)) = rest.split_once(": ") else {
        return err("event name");
    };
    let kv: Vec<(&str, &str)> = fields
        .split(' ')
        .map(|f| f.split_once('=').unwrap_or((f, "")))
        .collect();
    match name {
        "usb_urb_complete" => {
            let keys: Vec<&str> = kv.iter().map(|(k, _)| *k).collect();
            if keys != ["urb", "bus", "dev", "ep", "xfer", "status", "length"] {
                return err("usb_urb_complete fields");
            }
            let v: Vec<&str> = kv.iter().map(|(_, v)| *v).collect();
            let bus: u16 = v[1].parse().map_err(|_| format!("bus: {line:?}"))?;
            // Address 0 is a device being enumerated.
            let dev_ok = is_dec(v[2]) && v[2].parse::<u32>().is_ok_and(|d| d <= 127);
            let ok = is_hex(v[0])
                && v[0].len() == 16
                && is_dec(v[1])
                && BUSES.contains(&bus)
                && dev_ok
                && is_hex(v[3])
                && v[3].len() == 2
                && v[4].len() == 1
                && "0123".contains(v[4])
                && is_int(v[5])
                && is_dec(v[6]);
            if !ok {
                return err("usb_urb_complete values");
            }
            Ok(TraceEvent::Urb { bus, ts_us })
        }
        "example_counter" => {
            // count=0x1f (31) tag=example
            let w: Vec<&str> = fields.split(' ').collect();
            let run = match w.get(2).and_then(|t| t.strip_prefix("tag=")) {
                Some("example") => 0,
                Some(t) => match t.strip_prefix('r').map(str::parse::<u64>) {
                    Some(Ok(r)) => r,
                    _ => return err("example_counter tag"),
                },
                None => return err("example_counter fields"),
            };
            if w.len() != 3 {
                return err("example_counter fields");
            }
            let Some(hex) = w[0].strip_prefix("count=0x") else {
                return err("count");
            };
            let dec = w[1]
                .strip_prefix('(')
                .and_then(|x| x.strip_suffix(')'))
                .unwrap_or("");
            let (Ok(h), Ok(d)) = (u64::from_str_radix(hex, 16), dec.parse::<u64>()) else {
                return err("count");
            };
            if h != d || !is_hex(hex) {
                return err("count hex and decimal differ");
            }
            Ok(TraceEvent::Counter {
                pid,
                run,
                count: d,
                ts_us,
            })
        }
        _ => err("unexpected event"),
    }
}

/// `nreaders N events N text_lost N`.
fn parse_ns(s: &str) -> Result<(u64, u64, u64), String> {
    let w: Vec<&str> = s.trim_end_matches('\n').split(' ').collect();
    if w.len() != 6 || (w[0], w[2], w[4]) != ("nreaders", "events", "text_lost") {
        return Err(format!("bad Ns line {s:?}"));
    }
    let n = |x: &str| x.parse::<u64>().map_err(|_| format!("bad Ns line {s:?}"));
    Ok((n(w[1])?, n(w[3])?, n(w[5])?))
}

/// RSS flatness over samples in KiB: the max of the last third may exceed the
/// max of the first third by 25% plus 16 MiB.
fn rss_flat(samples_kib: &[u64]) -> Result<(), String> {
    if samples_kib.len() < 6 {
        return Err(format!("only {} RSS samples", samples_kib.len()));
    }
    let third = samples_kib.len() / 3;
    let first = *samples_kib[..third].iter().max().unwrap();
    let last = *samples_kib[samples_kib.len() - third..]
        .iter()
        .max()
        .unwrap();
    let bound = first + first / 4 + 16 * 1024;
    if last > bound {
        return Err(format!(
            "RSS grew: max of the last third {last} KiB > 1.25 x {first} KiB + 16 MiB = {bound} KiB"
        ));
    }
    Ok(())
}

/// The `q`-quantile of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Checks the driver's framing of `dev/monreader` reads of `bs` bytes: a set
/// starts with its 12-byte MCE (alone), then exactly the record set's bytes,
/// then another MCE or the 0-byte read that ends the data set, which must
/// decode record by record.
struct MonFraming {
    bs: usize,
    state: MonState,
    cur: Vec<u8>,
    sets: u64,
    records: u64,
    bytes: u64,
}

enum MonState {
    Mce(usize),
    Recs(usize),
    After,
}

impl MonFraming {
    fn new(bs: usize) -> Self {
        MonFraming {
            bs,
            state: MonState::Mce(0),
            cur: Vec::new(),
            sets: 0,
            records: 0,
            bytes: 0,
        }
    }

    /// After EIO or EOVERFLOW: the data since the last 0-byte read is gone.
    fn reset(&mut self) {
        self.state = MonState::Mce(0);
        self.cur.clear();
    }

    fn read(&mut self, data: &[u8]) -> Result<(), String> {
        let n = data.len();
        if n == 0 {
            if !matches!(self.state, MonState::After) {
                return Err("0-byte read inside an MCE or a record set".into());
            }
            let set = std::mem::take(&mut self.cur);
            let secs = monfs::cli::zvm_dump::decode_set(&set);
            for s in &secs {
                if let Some(e) = &s.error {
                    return Err(format!("set {} does not decode: {e}", self.sets + 1));
                }
                if s.mce.type_byte & 0xc0 == 0 {
                    return Err(format!("MCE type {:#04x}", s.mce.type_byte));
                }
                self.records += s.records.len() as u64;
            }
            if secs.is_empty() {
                return Err("empty data set".into());
            }
            self.bytes += set.len() as u64;
            self.sets += 1;
            self.state = MonState::Mce(0);
            return Ok(());
        }
        self.cur.extend_from_slice(data);
        self.state = match self.state {
            MonState::After | MonState::Mce(_) => {
                let have = match self.state {
                    MonState::Mce(h) => h,
                    _ => 0,
                };
                let want = self.bs.min(12 - have);
                if n != want {
                    return Err(format!("MCE read of {n} bytes, want {want}"));
                }
                if have + n == 12 {
                    let m = &self.cur[self.cur.len() - 12..];
                    let s = u32::from_be_bytes(m[4..8].try_into().unwrap());
                    let e = u32::from_be_bytes(m[8..12].try_into().unwrap());
                    if e <= s {
                        return Err(format!("MCE end {e:#x} not after start {s:#x}"));
                    }
                    MonState::Recs((e - s + 1) as usize)
                } else {
                    MonState::Mce(have + n)
                }
            }
            MonState::Recs(left) => {
                if n != self.bs.min(left) {
                    return Err(format!(
                        "record read of {n} bytes, want {}",
                        self.bs.min(left)
                    ));
                }
                if left == n {
                    MonState::After
                } else {
                    MonState::Recs(left - n)
                }
            }
        };
        Ok(())
    }
}

// ---------------------------------------------------------------------------
// Readers
// ---------------------------------------------------------------------------

extern "C" fn on_sigusr2(_: libc::c_int) {}

/// SIGUSR2 interrupts a blocked read (no SA_RESTART): the FUSE request is
/// interrupted and read() gives EINTR, after which the thread sees `stop`.
fn install_sigusr2() {
    // SAFETY: a handler that does nothing, installed for this process.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigusr2 as *const () as usize;
        sa.sa_flags = 0;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut());
    }
}

/// Stop threads blocked in reads: signal each until it has finished, then
/// join it.
fn interrupt_and_join<T>(threads: Vec<(String, JoinHandle<T>)>) -> Vec<(String, T)> {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut out = Vec::new();
    for (name, h) in threads {
        while !h.is_finished() {
            assert!(
                Instant::now() < deadline,
                "{name} did not stop after being signalled"
            );
            // SAFETY: the thread is not joined yet, so its pthread_t is valid.
            unsafe { libc::pthread_kill(h.as_pthread_t(), libc::SIGUSR2) };
            std::thread::sleep(Duration::from_millis(20));
        }
        out.push((name, h.join().expect("reader thread panicked")));
    }
    out
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo)
    }
}

/// Errors a reader met: the count and the first few.
#[derive(Default)]
struct Errors {
    n: u64,
    first: Vec<String>,
}
impl Errors {
    fn add(&mut self, e: String) {
        self.n += 1;
        if self.first.len() < 5 {
            self.first.push(e);
        }
    }
}

struct TextSpec {
    file: &'static str,
    /// Close and reopen every 1-3 s.
    reopen: bool,
    /// Bytes per read() (small sizes read lines in pieces).
    bufsize: usize,
}

#[derive(Default)]
struct TextReport {
    lines: u64,
    opens: u64,
    errors: Errors,
}

fn text_reader(
    path: PathBuf,
    spec: &TextSpec,
    seed: u64,
    stop: Arc<AtomicBool>,
    lines: Arc<AtomicU64>,
) -> TextReport {
    let u = spec.file.ends_with('u');
    let file_bus: u16 = spec.file[..spec.file.len() - 1].parse().unwrap();
    let mut rng = Rng(seed | 1);
    let mut rep = TextReport::default();
    let mut order = Order::default();
    let mut buf = vec![0u8; spec.bufsize];
    'open: while !stop.load(Ordering::Relaxed) {
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                rep.errors.add(format!("open {}: {e}", path.display()));
                return rep;
            }
        };
        rep.opens += 1;
        let until = spec
            .reopen
            .then(|| Instant::now() + Duration::from_millis(rng.range(1000, 3000)));
        let mut pending: Vec<u8> = Vec::new();
        loop {
            if stop.load(Ordering::Relaxed) {
                break 'open;
            }
            if until.is_some_and(|t| Instant::now() >= t) {
                // Leave (an unfinished line is dropped with the open).
                continue 'open;
            }
            let n = match f.read(&mut buf) {
                Ok(0) => {
                    rep.errors
                        .add("read returned 0 (EOF) on a usbmon stream".into());
                    return rep;
                }
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    rep.errors.add(format!("read: {e}"));
                    return rep;
                }
            };
            let chunk = &buf[..n];
            if chunk[..n - 1].contains(&b'\n') {
                rep.errors
                    .add("a read returned more than the rest of one line".into());
            }
            pending.extend_from_slice(chunk);
            if pending.last() != Some(&b'\n') {
                continue;
            }
            let line = String::from_utf8_lossy(&pending[..pending.len() - 1]).into_owned();
            pending.clear();
            rep.lines += 1;
            lines.fetch_add(1, Ordering::Relaxed);
            match check_line(&line, u) {
                Ok(ev) => {
                    let bus = ev.bus.unwrap_or(file_bus);
                    if file_bus != 0 && bus != file_bus {
                        rep.errors
                            .add(format!("bus {bus} event in {}: {line}", spec.file));
                    }
                    if let Err(e) = order.step(bus as u64, ev.ts as u64, TEXT_TS_MOD) {
                        rep.errors
                            .add(format!("bus {bus}: timestamp went back {e}: {line}"));
                    }
                }
                Err(e) => rep.errors.add(e),
            }
        }
    }
    rep
}

#[derive(Default)]
struct TraceReport {
    lines: u64,
    urbs: u64,
    counters: u64,
    /// Lines whose timestamp is older than the previous line's (any source).
    global_inversions: u64,
    max_inversion_us: u64,
    errors: Errors,
}

fn trace_reader(path: PathBuf, bufsize: usize, stop: Arc<AtomicBool>) -> TraceReport {
    let mut rep = TraceReport::default();
    let mut f = File::open(&path).expect("open trace_pipe");
    let mut buf = vec![0u8; bufsize];
    let mut pending: Vec<u8> = Vec::new();
    let mut by_bus = Order::default();
    let mut by_pid_ts = Order::default();
    let mut last_count: HashMap<(u32, u64), u64> = HashMap::new();
    let mut last_ts = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let n = match f.read(&mut buf) {
            Ok(0) => {
                rep.errors.add("read returned 0 (EOF) on trace_pipe".into());
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => {
                rep.errors.add(format!("read: {e}"));
                break;
            }
        };
        pending.extend_from_slice(&buf[..n]);
        let Some(end) = pending.iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let text = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..=end);
        for line in text.split('\n') {
            rep.lines += 1;
            let ev = match check_trace_line(line) {
                Ok(ev) => ev,
                Err(e) => {
                    rep.errors.add(e);
                    continue;
                }
            };
            let ts = match ev {
                TraceEvent::Urb { bus, ts_us } => {
                    rep.urbs += 1;
                    if let Err(e) = by_bus.step(bus as u64, ts_us, 0) {
                        rep.errors
                            .add(format!("bus {bus}: timestamp went back {e}: {line}"));
                    }
                    ts_us
                }
                TraceEvent::Counter {
                    pid,
                    run,
                    count,
                    ts_us,
                } => {
                    rep.counters += 1;
                    if let Err(e) = by_pid_ts.step(pid as u64, ts_us, 0) {
                        rep.errors
                            .add(format!("pid {pid}: timestamp went back {e}: {line}"));
                    }
                    if let Some(&c) = last_count.get(&(pid, run)) {
                        if count <= c {
                            rep.errors
                                .add(format!("pid {pid}: count {c} then {count}: {line}"));
                        }
                    }
                    last_count.insert((pid, run), count);
                    ts_us
                }
            };
            if ts < last_ts {
                rep.global_inversions += 1;
                rep.max_inversion_us = rep.max_inversion_us.max(last_ts - ts);
            }
            last_ts = ts;
        }
    }
    rep
}

#[derive(Default)]
struct MonReport {
    sets: u64,
    records: u64,
    bytes: u64,
    overflows: u64,
    eio: u64,
    errors: Errors,
}

fn monreader(path: PathBuf, stop: Arc<AtomicBool>) -> MonReport {
    const BS: usize = 65536;
    let mut rep = MonReport::default();
    let deadline = Instant::now() + common::HANG;
    let mut f = loop {
        match File::open(&path) {
            Ok(f) => break f,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                rep.errors.add(format!("open dev/monreader: {e}"));
                return rep;
            }
        }
    };
    let mut fr = MonFraming::new(BS);
    let mut buf = vec![0u8; BS];
    while !stop.load(Ordering::Relaxed) {
        match f.read(&mut buf) {
            Ok(n) => {
                if let Err(e) = fr.read(&buf[..n]) {
                    rep.errors.add(e);
                    fr.reset();
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if e.raw_os_error() == Some(libc::EOVERFLOW) => {
                rep.overflows += 1;
                fr.reset();
            }
            Err(e) if e.raw_os_error() == Some(libc::EIO) => {
                rep.eio += 1;
                fr.reset();
            }
            Err(e) => {
                rep.errors.add(format!("read: {e}"));
                break;
            }
        }
    }
    rep.sets = fr.sets;
    rep.records = fr.records;
    rep.bytes = fr.bytes;
    rep
}

/// The END line of soak_bin.
#[derive(Debug, Default, Clone)]
struct BinReport {
    seen: u64,
    s: u64,
    c: u64,
    e: u64,
    fillers: u64,
    dropped: u64,
    errors: u64,
    fetches: u64,
    drain_timeout: bool,
    ok: bool,
    stderr: String,
}

fn parse_bin(out: &std::process::Output) -> BinReport {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut r = BinReport {
        ok: out.status.success(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        ..Default::default()
    };
    let Some(line) = stdout.lines().find(|l| l.starts_with("END ")) else {
        r.ok = false;
        r.stderr += &format!("no END line (status {}); stdout {stdout:?}", out.status);
        return r;
    };
    for w in line.split(' ').skip(1) {
        let (k, v) = w.split_once('=').unwrap_or((w, "0"));
        let v: u64 = v.parse().unwrap_or(u64::MAX);
        match k {
            "seen" => r.seen = v,
            "S" => r.s = v,
            "C" => r.c = v,
            "E" => r.e = v,
            "fillers" => r.fillers = v,
            "dropped" => r.dropped = v,
            "errors" => r.errors = v,
            "fetches" => r.fetches = v,
            "drain_timeout" => r.drain_timeout = v != 0,
            _ => {}
        }
    }
    r
}

fn spawn_bin(bin: &Path, dev: &Path, buses: &str, batch: u32, ring: u32, drain_ms: u32) -> Child {
    Command::new(bin)
        .arg(dev)
        .arg(buses)
        .arg(batch.to_string())
        .arg(ring.to_string())
        .arg(drain_ms.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn soak_bin")
}

/// Wait for soak_bin's READY line (read byte by byte, leaving the rest of
/// stdout for the report).
fn wait_ready(c: &mut Child) {
    let out = c.stdout.as_mut().unwrap();
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while b[0] != b'\n' {
        assert_eq!(out.read(&mut b).unwrap(), 1, "soak_bin ended before READY");
        line.push(b[0]);
    }
    assert!(line.starts_with(b"READY "), "{line:?}");
}

fn ctl(m: &Mount, cmd: &str) {
    std::fs::write(m.path("monfs/ctl"), format!("{cmd}\n"))
        .unwrap_or_else(|e| panic!("{cmd} via monfs/ctl: {e}"));
}

/// SIGUSR1 (drain, then report) and wait up to `limit` for the report.
fn finish_bin(mut c: Child, limit: Duration) -> BinReport {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGUSR1) };
    let deadline = Instant::now() + limit;
    while c.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = c.kill();
            let out = c.wait_with_output().unwrap();
            let mut r = parse_bin(&out);
            r.ok = false;
            r.stderr += "\nsoak_bin did not finish its drain in time (killed)";
            return r;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    parse_bin(&c.wait_with_output().unwrap())
}

fn ns(m: &Mount, bus: u16) -> (u64, u64, u64) {
    let s = std::fs::read_to_string(m.path(&format!("usb/usbmon/{bus}s"))).unwrap();
    parse_ns(&s).unwrap()
}

fn threads_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Threads:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn fds_of(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// Nanoseconds a task has spent runnable but waiting for a CPU (the second
/// field of /proc/.../schedstat).
fn run_delay(schedstat: &str) -> u64 {
    std::fs::read_to_string(schedstat)
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// The run-queue wait of all the daemon's threads together.
fn daemon_run_delay(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| run_delay(&format!("{}/schedstat", e.path().display())))
                .sum()
        })
        .unwrap_or(0)
}

/// One `ls` of the mount root.
struct LsSample {
    /// Seconds into the load.
    at: f64,
    took: Duration,
    /// Run-queue wait of the sampling thread during the `ls`.
    own_wait: Duration,
    /// Run-queue wait of all daemon threads together during the `ls`.
    daemon_wait: Duration,
}

impl LsSample {
    /// The latency net of the sampler's own wait for a CPU.
    fn net(&self) -> Duration {
        self.took.saturating_sub(self.own_wait)
    }
    fn describe(&self) -> String {
        format!(
            "{:.1}s:{:.1}ms(own wait {:.1}, daemon threads' wait {:.1})",
            self.at,
            self.took.as_secs_f64() * 1e3,
            self.own_wait.as_secs_f64() * 1e3,
            self.daemon_wait.as_secs_f64() * 1e3
        )
    }
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn soak_secs() -> u64 {
    std::env::var("MONFS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40)
}

// ---------------------------------------------------------------------------
// The soak
// ---------------------------------------------------------------------------

#[test]
fn soak_all_interfaces_under_load() {
    let secs = soak_secs();
    install_sigusr2();
    let m = Mount::with_config(CONFIG);
    let pid = m.child.id();
    let t0 = Instant::now();
    let soak_bin = compile_c("soak_bin", m.dir.path());
    let producer = compile_c("user_events_producer", m.dir.path());
    let mut failures: Vec<String> = Vec::new();

    // The binary checker must be able to fail: a reader that only accepts bus
    // 9 on dev/usbmon1 must report the bus-1 events it gets.
    {
        let mut c = spawn_bin(&soak_bin, &m.path("dev/usbmon1"), "9", 64, 0, 300);
        wait_ready(&mut c);
        // Some bus-1 events after it is ready (however long they take).
        let from = ns(&m, 1).1;
        let deadline = Instant::now() + common::HANG;
        while ns(&m, 1).1 < from + 10 {
            assert!(Instant::now() < deadline, "bus 1 is silent");
            std::thread::sleep(Duration::from_millis(20));
        }
        let r = finish_bin(c, common::HANG);
        assert!(
            !r.ok && r.errors > 0 && r.stderr.contains("busnum 1 not expected"),
            "soak_bin did not flag a foreign bus: {r:?}"
        );
    }

    let loadavg_start = loadavg();
    let base_fds = fds_of(pid);
    let base_threads = threads_of(pid);
    let stop = Arc::new(AtomicBool::new(false));
    // Set when the load phase ends: samplers, producers and the rejoining
    // binary reader stop; `stop` ends the other readers after the drain.
    let stop_samplers = Arc::new(AtomicBool::new(false));

    // Monitors: RSS every second, `ls` every 200 ms.
    let rss = {
        let stop = stop_samplers.clone();
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let start = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if let Some(kib) = common::vm_rss_kib(pid) {
                    v.push((
                        start.elapsed().as_secs_f64(),
                        kib,
                        threads_of(pid),
                        fds_of(pid),
                    ));
                }
                std::thread::sleep(Duration::from_secs(1));
            }
            v
        })
    };
    let ls = {
        let stop = stop_samplers.clone();
        let root = m.root();
        std::thread::spawn(move || {
            let mut v: Vec<LsSample> = Vec::new();
            let mut errs = Errors::default();
            let start = Instant::now();
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let me = format!("/proc/self/task/{tid}/schedstat");
            while !stop.load(Ordering::Relaxed) {
                let (own0, daemon0) = (run_delay(&me), daemon_run_delay(pid));
                let t = Instant::now();
                let names: Vec<String> = match std::fs::read_dir(&root) {
                    Ok(rd) => rd
                        .filter_map(|e| e.ok())
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect(),
                    Err(e) => {
                        errs.add(format!("ls: {e}"));
                        Vec::new()
                    }
                };
                let took = t.elapsed();
                let (own1, daemon1) = (run_delay(&me), daemon_run_delay(pid));
                v.push(LsSample {
                    at: start.elapsed().as_secs_f64(),
                    took,
                    own_wait: Duration::from_nanos(own1.saturating_sub(own0)),
                    daemon_wait: Duration::from_nanos(daemon1.saturating_sub(daemon0)),
                });
                for want in ["usb", "dev", "tracing", "monfs"] {
                    if !names.iter().any(|n| n == want) {
                        errs.add(format!("ls of the root lacks {want}: {names:?}"));
                    }
                }
                std::thread::sleep(Duration::from_millis(200).saturating_sub(took));
            }
            (v, errs)
        })
    };

    // 8 text readers. Bus 3 has exactly one reader for its whole life (3u);
    // bus 2 has none (its binary reader is alone there).
    let specs = [
        TextSpec {
            file: "0u",
            reopen: false,
            bufsize: 4096,
        },
        TextSpec {
            file: "0u",
            reopen: true,
            bufsize: 37,
        },
        TextSpec {
            file: "1u",
            reopen: false,
            bufsize: 8192,
        },
        TextSpec {
            file: "1u",
            reopen: true,
            bufsize: 4096,
        },
        TextSpec {
            file: "1t",
            reopen: false,
            bufsize: 4096,
        },
        TextSpec {
            file: "1t",
            reopen: true,
            bufsize: 64,
        },
        TextSpec {
            file: "0u",
            reopen: true,
            bufsize: 250,
        },
        TextSpec {
            file: "3u",
            reopen: false,
            bufsize: 4096,
        },
    ];
    let dedicated_lines = Arc::new(AtomicU64::new(0));
    let mut text_threads = Vec::new();
    for (i, spec) in specs.into_iter().enumerate() {
        let path = m.path(&format!("usb/usbmon/{}", spec.file));
        let stop = stop.clone();
        let lines = if spec.file == "3u" {
            dedicated_lines.clone()
        } else {
            Arc::new(AtomicU64::new(0))
        };
        let name = format!(
            "text {}{} (bs {})",
            spec.file,
            if spec.reopen { " rejoin" } else { "" },
            spec.bufsize
        );
        let h = std::thread::spawn(move || {
            text_reader(path, &spec, 0x9e37_79b9 * (i as u64 + 1), stop, lines)
        });
        text_threads.push((name, h));
    }

    // 4 binary mmap readers: usbmon0 (all buses), usbmon1 with a small ring
    // (fillers, drops), usbmon1 joining and leaving every 2-5 s, and usbmon2
    // alone on bus 2 for the accounting (a 32 KiB ring and a 150 ms stall
    // every second, so that it drops).
    let bin0 = spawn_bin(&soak_bin, &m.path("dev/usbmon0"), "1,2,3", 512, 0, 5000);
    let bin1 = spawn_bin(&soak_bin, &m.path("dev/usbmon1"), "1", 32, 16384, 5000);
    // Bus 2 is paused while its reader sets its ring size (which discards
    // what was queued, uncounted, as in the kernel), so that every bus-2
    // event from its open on is either seen or counted as dropped.
    ctl(&m, "pause 2");
    let mut bin2 = {
        let mut c = Command::new(&soak_bin);
        c.args([
            m.path("dev/usbmon2").to_str().unwrap(),
            "2",
            "256",
            "32768",
            "5000",
        ])
        .env("SOAK_BIN_STALL_MS", "150")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        c.spawn().expect("spawn soak_bin")
    };
    wait_ready(&mut bin2);
    ctl(&m, "resume 2");
    let cycler = {
        let stop = stop_samplers.clone();
        let bin = soak_bin.clone();
        let dev = m.path("dev/usbmon1");
        std::thread::spawn(move || {
            let mut rng = Rng(77);
            let mut runs = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let c = spawn_bin(&bin, &dev, "1", 128, 65536, 500);
                let until = Instant::now() + Duration::from_millis(rng.range(2000, 5000));
                while Instant::now() < until && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(50));
                }
                runs.push(finish_bin(c, common::HANG));
            }
            runs
        })
    };

    // trace_pipe: usb_urb_complete and the user event.
    m.sh_ok("echo usb:usb_urb_complete > tracing/set_event");
    let tracing = m.path("tracing");
    let mut persistent = Command::new(&producer)
        .arg(&tracing)
        .args(["0", "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let enable = m.path("tracing/events/user_events/example_counter/enable");
    let deadline = Instant::now() + common::HANG;
    while !enable.exists() {
        assert!(
            Instant::now() < deadline,
            "example_counter never registered"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&enable, "1").unwrap();
    let mut trace_threads = Vec::new();
    for (i, bs) in [4096usize, 1000].into_iter().enumerate() {
        let path = m.path("tracing/trace_pipe");
        let stop = stop.clone();
        trace_threads.push((
            format!("trace_pipe #{i} (bs {bs})"),
            std::thread::spawn(move || trace_reader(path, bs, stop)),
        ));
    }
    // Short-lived producers, one after another, registering the same event.
    let producers = {
        let stop = stop_samplers.clone();
        let tracing = tracing.clone();
        std::thread::spawn(move || {
            let (mut runs, mut writes, mut errs) = (0u64, 0u64, Errors::default());
            while !stop.load(Ordering::Relaxed) {
                // Each run tags its events with its number: over an hour a
                // busy host reuses pids, and a reused pid counts from 0.
                let o = Command::new(&producer)
                    .arg(&tracing)
                    .args(["100", "1", &format!("r{}", runs + 1)])
                    .output()
                    .unwrap();
                runs += 1;
                let out = String::from_utf8_lossy(&o.stdout);
                let w = out
                    .lines()
                    .find_map(|l| l.strip_prefix("writes="))
                    .and_then(|l| l.split(' ').next())
                    .and_then(|n| n.parse::<u64>().ok());
                match w {
                    Some(n) if o.status.success() && o.stderr.is_empty() => writes += n,
                    _ => errs.add(format!(
                        "producer: {} {out:?} {:?}",
                        o.status,
                        String::from_utf8_lossy(&o.stderr)
                    )),
                }
            }
            (runs, writes, errs)
        })
    };

    let mon = {
        let path = m.path("dev/monreader");
        let stop = stop.clone();
        vec![(
            "monreader".to_string(),
            std::thread::spawn(move || monreader(path, stop)),
        )]
    };

    println!(
        "soak: {secs} s of load on a daemon with pid {pid} (setup took {:?})",
        t0.elapsed()
    );
    let load_start = Instant::now();
    while load_start.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_millis(200));
    }

    // End: stop the samplers and producers, pause every bus through the
    // control file, and let the readers drain.
    stop_samplers.store(true, Ordering::Relaxed);
    let rss = rss.join().unwrap();
    let (ls, ls_errs) = ls.join().unwrap();
    let _ = persistent.kill();
    let _ = persistent.wait();
    // The rejoining binary reader and the short-lived producers end with the
    // load, before the buses pause.
    let cycles = cycler.join().unwrap();
    let (prod_runs, prod_writes, prod_errs) = producers.join().unwrap();
    for b in BUSES {
        ctl(&m, &format!("pause {b}"));
    }
    std::thread::sleep(Duration::from_millis(300));
    let ns2 = ns(&m, 2);
    let ns3 = ns(&m, 3);
    // The dedicated 3u reader drains its queue.
    let want3 = ns3.1 - ns3.2;
    let deadline = Instant::now() + common::HANG;
    while dedicated_lines.load(Ordering::Relaxed) < want3 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let got3 = dedicated_lines.load(Ordering::Relaxed);
    let bin_reports = [
        ("usbmon0", finish_bin(bin0, common::HANG)),
        ("usbmon1 small ring", finish_bin(bin1, common::HANG)),
        ("usbmon2 (bus 2 alone)", finish_bin(bin2, common::HANG)),
    ];
    let ns2_after = ns(&m, 2);
    let ns3_after = ns(&m, 3);
    stop.store(true, Ordering::Relaxed);
    let texts = interrupt_and_join(text_threads);
    let traces = interrupt_and_join(trace_threads);
    let mons = interrupt_and_join(mon);

    // Every reader is gone: registrations and descriptors go back.
    let deadline = Instant::now() + common::HANG;
    let mut left: Vec<(u16, u64)>;
    loop {
        left = [0u16, 1, 2, 3]
            .into_iter()
            .map(|b| (b, ns(&m, b).0))
            .filter(|&(_, n)| n != 0)
            .collect();
        if left.is_empty() && fds_of(pid) <= base_fds + 2 {
            break;
        }
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let end_fds = fds_of(pid);
    let load_end = loadavg();
    let end_threads = threads_of(pid);

    // ---- Checks ----
    for (name, r) in &texts {
        if r.errors.n > 0 {
            failures.push(format!(
                "{name}: {} errors: {:?}",
                r.errors.n, r.errors.first
            ));
        }
        if r.lines == 0 {
            failures.push(format!("{name}: read no line"));
        }
    }
    for (name, r) in &traces {
        if r.errors.n > 0 {
            failures.push(format!(
                "{name}: {} errors: {:?}",
                r.errors.n, r.errors.first
            ));
        }
    }
    if traces.iter().map(|(_, r)| r.urbs).sum::<u64>() == 0 {
        failures.push("no usb_urb_complete in trace_pipe".into());
    }
    // As the kernel's ring buffer, trace_pipe never goes back in time, across
    // all producers.
    for (name, r) in &traces {
        if r.global_inversions > 0 {
            failures.push(format!(
                "{name}: timestamps went back {} times (at most {} us)",
                r.global_inversions, r.max_inversion_us
            ));
        }
    }
    if traces.iter().map(|(_, r)| r.counters).sum::<u64>() == 0 {
        failures.push("no example_counter in trace_pipe".into());
    }
    if prod_errs.n > 0 || prod_runs == 0 {
        failures.push(format!(
            "user_events producers: {prod_runs} runs, {} errors: {:?}",
            prod_errs.n, prod_errs.first
        ));
    }
    for (name, r) in &mons {
        if r.errors.n > 0 || r.eio > 0 || r.sets == 0 {
            failures.push(format!(
                "{name}: {} sets, {} EIO, {} errors: {:?}",
                r.sets, r.eio, r.errors.n, r.errors.first
            ));
        }
    }
    for (name, r) in &bin_reports {
        if !r.ok || r.errors > 0 || r.seen == 0 || r.drain_timeout {
            failures.push(format!("binary {name}: {r:?}"));
        }
    }
    for (i, r) in cycles.iter().enumerate() {
        if !r.ok || r.errors > 0 || r.seen == 0 {
            failures.push(format!("binary usbmon1 rejoin run {i}: {r:?}"));
        }
    }
    if cycles.len() < 2 {
        failures.push(format!("only {} usbmon1 rejoin runs", cycles.len()));
    }
    // Accounting, bus 3 (text).
    if (ns3.1, ns3.2) != (ns3_after.1, ns3_after.2) || ns3.0 != 1 {
        failures.push(format!(
            "3s changed after pause or has other readers: {ns3:?} then {ns3_after:?}"
        ));
    }
    if got3 != want3 {
        failures.push(format!(
            "bus 3: the only reader read {got3} lines, but 3s says events {} - text_lost {} = {want3}",
            ns3.1, ns3.2
        ));
    }
    // Accounting, bus 2 (binary).
    let r2 = &bin_reports[2].1;
    if (ns2.1, ns2.2) != (ns2_after.1, ns2_after.2) || ns2.0 != 1 {
        failures.push(format!(
            "2s changed after pause or has other readers: {ns2:?} then {ns2_after:?}"
        ));
    }
    if r2.dropped == 0 {
        failures.push("bus 2: the stalling binary reader dropped nothing".into());
    }
    if r2.seen + r2.dropped != ns2.1 {
        failures.push(format!(
            "bus 2: the only reader saw {} events (S {} C {} E {}) + dropped {} = {}, but 2s says events {}",
            r2.seen,
            r2.s,
            r2.c,
            r2.e,
            r2.dropped,
            r2.seen + r2.dropped,
            ns2.1
        ));
    }
    // RSS.
    let kib: Vec<u64> = rss.iter().map(|s| s.1).collect();
    if let Err(e) = rss_flat(&kib) {
        failures.push(e);
    }
    if !left.is_empty() {
        failures.push(format!("readers still attached after all closed: {left:?}"));
    }
    if end_fds > base_fds + 2 {
        failures.push(format!(
            "daemon fds: {base_fds} before the readers, {end_fds} after they all closed"
        ));
    }
    // ls latency is reported, not asserted (a busy host sets it); an answer
    // that took as long as a hang is a failure.
    let mut lat: Vec<Duration> = ls.iter().map(|s| s.took).collect();
    lat.sort();
    let mut net: Vec<Duration> = ls.iter().map(LsSample::net).collect();
    net.sort();
    let (p50, p99, max) = (
        quantile(&lat, 0.5),
        quantile(&lat, 0.99),
        quantile(&lat, 1.0),
    );
    let (np50, np99, nmax) = (
        quantile(&net, 0.5),
        quantile(&net, 0.99),
        quantile(&net, 1.0),
    );
    let slow: Vec<&LsSample> = ls.iter().filter(|s| s.took > LS_REPORT).collect();
    let over: Vec<String> = ls
        .iter()
        .filter(|s| s.took >= common::HANG)
        .map(LsSample::describe)
        .collect();
    if !over.is_empty() {
        failures.push(format!(
            "{} of {} ls samples hung ({:?} or more): {}",
            over.len(),
            lat.len(),
            common::HANG,
            over.join(" ")
        ));
    }
    if ls_errs.n > 0 {
        failures.push(format!("ls: {} errors: {:?}", ls_errs.n, ls_errs.first));
    }

    // ---- Summary ----
    println!(
        "\n== soak summary ({secs} s load, {:.1} s total) ==",
        t0.elapsed().as_secs_f64()
    );
    println!(
        "{:<34} {:>10} {:>9} {:>8} {:>7}",
        "reader", "events", "dropped", "fillers", "errors"
    );
    for (name, r) in &texts {
        println!(
            "{:<34} {:>10} {:>9} {:>8} {:>7}   opens {}",
            name, r.lines, "-", "-", r.errors.n, r.opens
        );
    }
    for (name, r) in &bin_reports {
        println!(
            "{:<34} {:>10} {:>9} {:>8} {:>7}   S {} C {} E {} fetches {}",
            format!("binary {name}"),
            r.seen,
            r.dropped,
            r.fillers,
            r.errors,
            r.s,
            r.c,
            r.e,
            r.fetches
        );
    }
    let cyc = |f: fn(&BinReport) -> u64| cycles.iter().map(f).sum::<u64>();
    println!(
        "{:<34} {:>10} {:>9} {:>8} {:>7}   {} runs",
        "binary usbmon1 rejoin (sum)",
        cyc(|r| r.seen),
        cyc(|r| r.dropped),
        cyc(|r| r.fillers),
        cyc(|r| r.errors),
        cycles.len()
    );
    for (name, r) in &traces {
        println!(
            "{:<34} {:>10} {:>9} {:>8} {:>7}   urb {} counter {}; {} global ts inversions (max {} us)",
            name, r.lines, "-", "-", r.errors.n, r.urbs, r.counters, r.global_inversions,
            r.max_inversion_us
        );
    }
    for (name, r) in &mons {
        println!(
            "{:<34} {:>10} {:>9} {:>8} {:>7}   sets; {} records, {} bytes, {} EOVERFLOW, {} EIO",
            name, r.sets, "-", "-", r.errors.n, r.records, r.bytes, r.overflows, r.eio
        );
    }
    println!(
        "user_events producers: {prod_runs} short runs, {prod_writes} writes (plus one 2 ms producer)"
    );
    println!(
        "bus 3 (text, one reader): 3s events {} text_lost {} -> want {want3} lines, read {got3}",
        ns3.1, ns3.2
    );
    println!(
        "bus 2 (binary, one reader): 2s events {} = seen {} + dropped {} ? {}",
        ns2.1,
        r2.seen,
        r2.dropped,
        r2.seen + r2.dropped == ns2.1
    );
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "RSS MiB: start {:.1} end {:.1} max {:.1}; threads {base_threads} -> {end_threads}; fds {base_fds} -> {end_fds}",
        mib(kib.first().copied().unwrap_or(0)),
        mib(kib.last().copied().unwrap_or(0)),
        mib(kib.iter().copied().max().unwrap_or(0)),
    );
    println!(
        "RSS samples (s:MiB/threads/fds): {}",
        rss.iter()
            .map(|s| format!("{:.0}:{:.1}/{}/{}", s.0, mib(s.1), s.2, s.3))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "ls latency over {} samples: p50 {:.2} ms p99 {:.2} ms max {:.2} ms; net of the sampler's \
         run-queue wait: p50 {:.2} p99 {:.2} max {:.2} ms (reported, not asserted)",
        lat.len(),
        ms(p50),
        ms(p99),
        ms(max),
        ms(np50),
        ms(np99),
        ms(nmax)
    );
    println!(
        "ls samples over {LS_REPORT:?}: {}",
        slow.iter()
            .map(|s| s.describe())
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("load average: {loadavg_start} at the start, {load_end} at the end");
    assert!(
        failures.is_empty(),
        "soak failures:\n  {}\nlog tail:\n{}",
        failures.join("\n  "),
        tail(&m.log_text(), 40)
    );
}

fn tail(s: &str, n: usize) -> String {
    let v: Vec<&str> = s.lines().collect();
    v[v.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------
// The checkers fail on bad input
// ---------------------------------------------------------------------------

#[test]
fn checkers_accept_good_input_and_reject_corruption() {
    // Text grammar (tests/common; its accept/reject cases are in
    // tests/usbmon_text.rs): the bus and timestamp the soak uses.
    let good = "ffff8880abc0a540 171843070 C Bi:3:002:1 0 32 = 1fae68dc 48a98ec5 53411b0c 1c2b428d a9e431fa 790462d8 b376c446 56fc4f8c";
    assert_eq!(
        check_line(good, true).unwrap(),
        TextEvent {
            bus: Some(3),
            ts: 171843070
        }
    );
    // Order, with and without wrap.
    let mut o = Order::default();
    o.step(1, 10, 0).unwrap();
    o.step(2, 5, 0).unwrap();
    o.step(1, 10, 0).unwrap();
    assert!(o.step(1, 9, 0).is_err());
    let mut o = Order::default();
    o.step(1, TEXT_TS_MOD - 5, TEXT_TS_MOD).unwrap();
    o.step(1, 3, TEXT_TS_MOD).unwrap();
    assert!(o.step(1, 2, TEXT_TS_MOD).is_err());
    // trace_pipe lines.
    let urb = "           monfs-11590   [000] .....  4268.034114: usb_urb_complete: urb=ffff888022f559c0 bus=2 dev=2 ep=02 xfer=3 status=0 length=200";
    assert_eq!(
        check_trace_line(urb).unwrap(),
        TraceEvent::Urb {
            bus: 2,
            ts_us: 4268034114
        }
    );
    let ctr = " user_events_pro-11864   [000] .....  4273.804796: example_counter: count=0x62 (98) tag=example";
    assert_eq!(
        check_trace_line(ctr).unwrap(),
        TraceEvent::Counter {
            pid: 11864,
            run: 0,
            count: 98,
            ts_us: 4273804796
        }
    );
    assert_eq!(
        check_trace_line(&ctr.replace("tag=example", "tag=r7")).unwrap(),
        TraceEvent::Counter {
            pid: 11864,
            run: 7,
            count: 98,
            ts_us: 4273804796
        }
    );
    for bad in [
        urb.replace("bus=2", "bus=7"),
        urb.replace("xfer=3", "xfer=4"),
        urb.replace(" status=0", ""),
        urb.replace(".034114", ".03411"),
        urb.replace(".....", "...."),
        urb[3..].to_string(),
        ctr.replace("(98)", "(99)"),
        ctr.replace("tag=example", "tag=exampl"),
        urb[..60].to_string(),
    ] {
        assert!(check_trace_line(&bad).is_err(), "accepted {bad}");
    }
    // Ns lines.
    assert_eq!(
        parse_ns("nreaders 1 events 1234 text_lost 56\n").unwrap(),
        (1, 1234, 56)
    );
    assert!(parse_ns("nreaders 1 events x text_lost 56\n").is_err());
    // RSS flatness.
    rss_flat(&[100_000, 101_000, 100_500, 102_000, 101_000, 110_000]).unwrap();
    assert!(rss_flat(&[100_000, 101_000, 100_500, 102_000, 101_000, 150_000]).is_err());
    // Quantiles.
    let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
    assert_eq!(quantile(&d, 0.5), Duration::from_millis(50));
    assert_eq!(quantile(&d, 0.99), Duration::from_millis(99));
    assert_eq!(quantile(&d, 1.0), Duration::from_millis(100));
    // monreader framing: MCE, records, 0-byte read; then the wrong sizes.
    let mut recs = Vec::new();
    recs.extend_from_slice(&[0, 24, 0, 0, 1, 0, 0, 1]); // len 24, domain 1, record 1
    recs.extend_from_slice(&[0; 16]);
    let mut mce = vec![0x80, 0x02, 0, 0];
    mce.extend_from_slice(&0x0200_0000u32.to_be_bytes());
    mce.extend_from_slice(&(0x0200_0000u32 + 23).to_be_bytes());
    let mut f = MonFraming::new(65536);
    f.read(&mce).unwrap();
    f.read(&recs).unwrap();
    f.read(&[]).unwrap();
    assert_eq!((f.sets, f.records), (1, 1));
    let mut f = MonFraming::new(65536);
    assert!(f.read(&[]).is_err(), "0-byte read before an MCE");
    let mut f = MonFraming::new(65536);
    assert!(f.read(&mce[..8]).is_err(), "short MCE read");
    let mut f = MonFraming::new(65536);
    f.read(&mce).unwrap();
    assert!(f.read(&recs[..20]).is_err(), "short record read");
    let mut f = MonFraming::new(65536);
    f.read(&mce).unwrap();
    let mut bad = recs.clone();
    bad[1] = 200; // record length beyond the set
    f.read(&bad).unwrap();
    assert!(f.read(&[]).is_err(), "undecodable set");
}
