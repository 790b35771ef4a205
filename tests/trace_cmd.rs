//! trace-cmd and a C reader on the per-CPU buffers, through the real mount:
//! `trace_pipe_raw` pages checked byte by byte against what `cat trace`
//! shows, `trace-cmd extract` + `report` against `cat trace` for the same
//! events, `trace-cmd record` of USB and configured events, `trace-cmd
//! stream`, `trace_marker` and `trace_clock`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, cpus, Mount, HANG, TICK};

/// The default simulators plus [`TICK`].
fn default_with_tick() -> String {
    let base =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.yaml"))
            .unwrap();
    format!("{base}\n{TICK}")
}

/// `trace-cmd report` of `dat`, asserting success.
fn report(dat: &Path) -> String {
    let o = Command::new("trace-cmd")
        .args(["report", "-i", dat.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// `count` → trace line time (µs) of each `myapp:tick` line in `trace`.
fn tick_times(trace: &str) -> BTreeMap<u32, u64> {
    let mut out = BTreeMap::new();
    for l in trace.lines().filter(|l| l.contains(": tick: count=")) {
        let ts = l.split("]").nth(1).unwrap().split(':').next().unwrap();
        let ts = ts.split_whitespace().last().unwrap();
        let (s, us) = ts.split_once('.').unwrap();
        let t = s.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap();
        let count = l.split("count=").nth(1).unwrap().split(' ').next().unwrap();
        out.insert(count.parse().unwrap(), t);
    }
    out
}

/// Inject `myapp:tick` events `from..=to` with a pause of `pause` between
/// batches of 50 (long pauses make time extends).
fn inject(m: &Mount, from: u32, to: u32, pause: &str) {
    inject_in(m, "tracing", from, to, pause);
}

/// [`inject`] through the `inject` file of the array at `dir` (an injected
/// event goes to that array only, as in the kernel).
fn inject_in(m: &Mount, dir: &str, from: u32, to: u32, pause: &str) {
    m.sh_ok(&format!(
        "for i in $(seq {from} {to}); do echo \"count=$i msg=\\\"m$i\\\"\" > {dir}/events/myapp/tick/inject; \
         [ $((i % 50)) = 0 ] && sleep {pause}; done; true"
    ));
}

/// Run tests/c/trace_raw on `file` of every CPU: the `myapp:tick` events it
/// decoded, by `count` (the u32 at offset 8), with their times rounded to
/// microseconds as `trace` shows them, and its summary line. Every event
/// must be a tick.
fn raw_ticks(m: &Mount, raw: &Path, file: &str) -> (BTreeMap<u32, u64>, String) {
    let o = Command::new(raw)
        .arg(m.path("tracing"))
        .arg(cpus().to_string())
        .arg(file)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8(o.stdout).unwrap();
    let id: u64 = m
        .sh_ok("cat tracing/events/myapp/tick/id")
        .trim()
        .parse()
        .unwrap();
    let mut got = BTreeMap::new();
    for l in out.lines().filter(|l| !l.starts_with("pages=")) {
        let f: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
        assert_eq!(f[2], id, "{l}");
        got.insert(f[4] as u32, (f[1] + 500) / 1000);
    }
    (got, out.lines().last().unwrap_or_default().to_string())
}

/// `per_cpu/cpuN/snapshot_raw` gives the snapshot buffer's pages as
/// `trace_pipe_raw` gives the live buffer's, and consumes them.
#[test]
fn snapshot_raw_pages_are_the_snapshots() {
    let m = Mount::with_config(TICK);
    let raw = compile_c("trace_raw", m.dir.path());
    m.sh_ok("echo 1 > tracing/events/myapp/tick/enable");
    inject(&m, 1, 200, "0");
    let want = tick_times(&m.sh_ok("cat tracing/trace"));
    assert_eq!(want.len(), 200);
    m.sh_ok("echo 1 > tracing/snapshot");
    // The snapshot holds the 200 entries; the live buffer has none.
    assert_eq!(tick_times(&m.sh_ok("cat tracing/snapshot")), want);
    assert!(raw_ticks(&m, &raw, "trace_pipe_raw").0.is_empty());
    assert_eq!(raw_ticks(&m, &raw, "snapshot_raw").0, want);
    // Read once, they are gone.
    assert!(raw_ticks(&m, &raw, "snapshot_raw").0.is_empty());
    assert!(tick_times(&m.sh_ok("cat tracing/snapshot")).is_empty());
}

#[test]
fn trace_pipe_raw_pages_decode_to_what_trace_shows() {
    let m = Mount::with_config(TICK);
    let raw = compile_c("trace_raw", m.dir.path());
    m.sh_ok("echo 1 > tracing/events/myapp/tick/enable");
    // 0.2 s pauses are beyond 2^27 ns: entries after them need time extends.
    inject(&m, 1, 300, "0.2");
    let trace = m.sh_ok("cat tracing/trace");
    let want = tick_times(&trace);
    assert_eq!(want.len(), 300, "{trace}");
    let (got, summary) = raw_ticks(&m, &raw, "trace_pipe_raw");
    assert_eq!(got, want, "{summary}");
    assert!(summary.contains("events=300 "), "{summary}");
    assert!(summary.ends_with("missed=0"), "{summary}");
    eprintln!("trace_pipe_raw: {summary}");
    // Consumed: the buffers are empty (read entries count as neither, as
    // measured on the real tracefs) and the stats count what was read.
    let trace = m.sh_ok("cat tracing/trace");
    assert!(
        trace.contains("entries-in-buffer/entries-written: 0/0 "),
        "{trace}"
    );
    let read: u64 = (0..cpus())
        .map(|c| {
            let s = m.sh_ok(&format!("cat tracing/per_cpu/cpu{c}/stats"));
            let r = s.lines().find(|l| l.starts_with("read events: ")).unwrap();
            r[13..].parse::<u64>().unwrap()
        })
        .sum();
    assert_eq!(read, 300);
}

#[test]
fn trace_pipe_raw_blocks_until_a_page_has_data() {
    let m = Mount::with_config(TICK);
    m.sh_ok("echo 1 > tracing/events/myapp/tick/enable");
    let mut cats: Vec<std::process::Child> = (0..cpus())
        .map(|c| {
            Command::new("dd")
                .arg(format!(
                    "if={}",
                    m.path(&format!("tracing/per_cpu/cpu{c}/trace_pipe_raw"))
                        .display()
                ))
                .args(["bs=4096", "count=1", "status=none"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in &cats {
        common::wait_blocked(c.id());
    }
    // Keep injecting until every blocked reader got a page: each CPU's
    // reader needs an event recorded on its CPU.
    let deadline = Instant::now() + HANG;
    let mut n = 0;
    while cats.iter_mut().any(|c| c.try_wait().unwrap().is_none()) {
        assert!(Instant::now() < deadline, "a reader never got its page");
        n += 1;
        inject(&m, n, n, "0");
        std::thread::sleep(Duration::from_millis(5));
    }
    for c in cats {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success());
        assert_eq!(o.stdout.len(), 4096);
    }
}

/// Lines of `trace` (irq-info off) and `trace-cmd report`, with white
/// space collapsed and trace-cmd's `cpus=N` line dropped.
fn normalise(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.starts_with("cpus=") && !l.is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn trace_cmd_extract_and_report_show_what_trace_shows() {
    let m = Mount::with_config(&default_with_tick());
    m.trace_ns(&["trace-cmd", "start", "-e", "usb", "-e", "myapp:tick"]);
    inject(&m, 1, 20, "0");
    m.sh_ok("echo hello > tracing/trace_marker");
    // However long the first URBs take to come.
    let deadline = Instant::now() + HANG;
    while !m.sh_ok("cat tracing/trace").contains("usb_urb_complete") {
        assert!(Instant::now() < deadline, "no URB came");
        std::thread::sleep(Duration::from_millis(50));
    }
    m.sh_ok("echo 0 > tracing/tracing_on; echo 0 > tracing/options/irq-info");
    let trace = m.sh_ok("cat tracing/trace");
    let dat = m.dir.path().join("x.dat");
    m.trace_ns(&["trace-cmd", "extract", "-o", dat.to_str().unwrap()]);
    let report = report(&dat);
    let (a, b) = (normalise(&trace), normalise(&report));
    // trace-cmd shows ftrace:print as "print: tracing_mark_write: ...".
    let b: Vec<String> = b
        .into_iter()
        .map(|l| l.replace(": print: tracing_mark_write:", ": tracing_mark_write:"))
        .collect();
    assert!(a.len() > 21, "{trace}");
    assert_eq!(a, b, "trace:\n{trace}\nreport:\n{report}");
    assert_eq!(tick_times(&trace).len(), 20);
    assert!(trace.contains(": tracing_mark_write: hello\n"), "{trace}");
}

#[test]
fn trace_cmd_record_gets_every_event() {
    let m = Mount::with_config(&default_with_tick());
    let dat = m.dir.path().join("rec.dat");
    let script = "for i in $(seq 1 200); do echo \"count=$i msg=\\\"r$i\\\"\" > \
                  /sys/kernel/tracing/events/myapp/tick/inject; done; sleep 1";
    m.trace_ns(&[
        "trace-cmd",
        "record",
        "-o",
        dat.to_str().unwrap(),
        "-e",
        "usb",
        "-e",
        "myapp:tick",
        "sh",
        "-c",
        script,
    ]);
    let report = report(&dat);
    // Every record decodes: splice(2) of trace_pipe_raw (which FUSE serves
    // from the page cache, where a mapping's meta page lives) gave the
    // recorder pages that were none.
    assert!(!report.contains("[UNKNOWN EVENT]"), "{report}");
    let mut counts: Vec<u32> = report
        .lines()
        .filter(|l| l.contains(" tick: "))
        .map(|l| {
            let c = l.split("count=").nth(1).unwrap().split(' ').next().unwrap();
            assert!(l.ends_with(&format!("msg=r{c}")), "{l}");
            c.parse().unwrap()
        })
        .collect();
    counts.sort();
    assert_eq!(counts, (1..=200).collect::<Vec<_>>(), "{report}");
    assert!(report.contains(" usb_urb_submit: "), "{report}");
    assert!(report.contains(" usb_urb_complete: "), "{report}");
}

#[test]
fn trace_cmd_stream_prints_events_as_they_come() {
    let m = Mount::with_config(&default_with_tick());
    let ns = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/trace-ns");
    let out = m.dir.path().join("stream.txt");
    let mut child = Command::new(ns)
        .env("MONFS_BIN", common::monfs_bin())
        .arg(m.root())
        .args(["--", "trace-cmd", "stream", "-e", "usb:usb_urb_submit"])
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + HANG;
    while !std::fs::read_to_string(&out)
        .unwrap()
        .contains(" usb_urb_submit: ")
    {
        assert!(Instant::now() < deadline, "trace-cmd stream showed nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    // SIGINT ends trace-cmd as Ctrl-C does: it tells its per-CPU recorders
    // to stop (SIGUSR1) and waits for them. A recorder still starting when
    // that comes clears its stop flag as it starts (trace-cmd 3.1's
    // tracecmd_start_recording) and records on for good, with the kernel
    // too; under load that happens, so the recorders are told again each
    // second until trace-cmd ends (how it ends is what is checked).
    // SAFETY: signalling a child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + HANG;
    let st = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < deadline, "trace-cmd stream did not end");
        std::thread::sleep(Duration::from_secs(1));
        let kids = format!("/proc/{0}/task/{0}/children", child.id());
        for pid in std::fs::read_to_string(kids)
            .unwrap_or_default()
            .split_whitespace()
        {
            if let Ok(pid) = pid.parse::<i32>() {
                // SAFETY: signalling a recorder of the trace-cmd we spawned.
                unsafe { libc::kill(pid, libc::SIGUSR1) };
            }
        }
    };
    assert!(st.code().is_some() || st.signal_is_int(), "{st:?}");
}

trait SignalIsInt {
    fn signal_is_int(&self) -> bool;
}

impl SignalIsInt for std::process::ExitStatus {
    fn signal_is_int(&self) -> bool {
        use std::os::unix::process::ExitStatusExt;
        self.signal() == Some(libc::SIGINT)
    }
}

#[test]
fn trace_marker_and_clock() {
    let m = Mount::with_config(TICK);
    m.sh_ok("echo hi > tracing/trace_marker; printf 'no newline' > tracing/trace_marker");
    let t = m.sh_ok("cat tracing/trace");
    assert!(
        t.contains("...1.") && t.contains(": tracing_mark_write: hi\n"),
        "{t}"
    );
    assert!(t.contains(": tracing_mark_write: no newline\n"), "{t}");
    // Measured limits: 4054 bytes of text, raw writes of 4..=4064 bytes.
    let io = m.sh("python3 -c \"import os; fd=os.open('tracing/trace_marker', os.O_WRONLY); print(os.write(fd, b'x'*5000))\"");
    assert_eq!(String::from_utf8_lossy(&io.stdout), "4054\n");
    let raw = m.sh("printf '\\x01\\x02\\x03\\x04abcdefg' > tracing/trace_marker_raw; echo -n ab > tracing/trace_marker_raw");
    assert!(!raw.status.success());
    let t = m.sh_ok("cat tracing/trace");
    assert!(
        t.contains(": # 4030201 buf: 61 62 63 64 65 66 67 00\n"),
        "{t}"
    );
    // Markers off: EINVAL; tracing off: EBADF (dash and bash print these).
    let e = m.sh("echo 0 > tracing/options/markers; echo x > tracing/trace_marker");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Invalid argument"));
    let e = m.sh("echo 1 > tracing/options/markers; echo 0 > tracing/tracing_on; echo x > tracing/trace_marker");
    assert!(String::from_utf8_lossy(&e.stderr).contains("Bad file descriptor"));
    m.sh_ok("echo 1 > tracing/tracing_on");
    // A new clock empties the buffer; counter stamps are counts.
    m.sh_ok("echo counter > tracing/trace_clock");
    assert!(m
        .sh_ok("cat tracing/trace_clock")
        .starts_with("local global [counter] uptime"));
    let t = m.sh_ok("cat tracing/trace");
    assert!(t.contains("entries-in-buffer/entries-written: 0/0 "), "{t}");
    m.sh_ok("echo a > tracing/trace_marker; echo b > tracing/trace_marker");
    let t = m.sh_ok("cat tracing/trace");
    let stamps: Vec<u64> = t
        .lines()
        .filter(|l| l.contains("tracing_mark_write"))
        .map(|l| {
            l.split(':')
                .next()
                .unwrap()
                .split_whitespace()
                .last()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(stamps.len(), 2, "{t}");
    assert_eq!(stamps[1], stamps[0] + 1, "{t}");
    assert!(!m.sh("echo nope > tracing/trace_clock").status.success());
}

#[test]
fn instances_have_their_own_buffers_and_events() {
    let m = Mount::with_config(TICK);
    let e = |script: &str| String::from_utf8(m.sh(script).stderr).unwrap();
    m.sh_ok("mkdir tracing/instances/foo");
    // The kernel's answers, measured on the real tracefs.
    assert!(e("mkdir tracing/instances/foo").contains("File exists"));
    assert!(e("rmdir tracing/instances/nosuch").contains("No such file"));
    assert!(e("mkdir tracing/events/x").contains("Operation not permitted"));
    assert_eq!(
        m.sh_ok("cat tracing/instances/foo/buffer_size_kb"),
        "1410\n"
    );
    let ls = m.sh_ok("ls tracing/instances/foo");
    for f in [
        "events",
        "per_cpu",
        "trace",
        "trace_pipe",
        "set_event",
        "tracing_on",
        "trace_marker",
        "options",
    ] {
        assert!(ls.lines().any(|l| l == f), "{f} missing: {ls}");
    }
    // Instance options lack the top-level-only ones.
    assert!(!m
        .sh_ok("ls tracing/instances/foo/options")
        .contains("record-cmd"));
    // Enabled in the instance only: recorded there, not at the top.
    m.sh_ok("echo 1 > tracing/instances/foo/events/myapp/tick/enable");
    assert_eq!(
        m.sh_ok("cat tracing/instances/foo/set_event"),
        "myapp:tick\n"
    );
    assert_eq!(m.sh_ok("cat tracing/set_event"), "");
    let foo = "tracing/instances/foo";
    inject_in(&m, foo, 1, 3, "0");
    let inst = m.sh_ok("cat tracing/instances/foo/trace");
    assert_eq!(tick_times(&inst).len(), 3, "{inst}");
    assert!(tick_times(&m.sh_ok("cat tracing/trace")).is_empty());
    // Enabled in both; the instance's filter is its own.
    m.sh_ok("echo 1 > tracing/events/myapp/tick/enable; echo 'count > 10' > tracing/instances/foo/events/myapp/tick/filter");
    inject(&m, 4, 12, "0");
    inject_in(&m, foo, 4, 12, "0");
    assert_eq!(tick_times(&m.sh_ok("cat tracing/trace")).len(), 9);
    let inst = tick_times(&m.sh_ok("cat tracing/instances/foo/trace"));
    assert_eq!(
        inst.keys().copied().collect::<Vec<_>>(),
        vec![1, 2, 3, 11, 12]
    );
    // A marker goes to its own array.
    m.sh_ok("echo inside > tracing/instances/foo/trace_marker");
    assert!(m
        .sh_ok("cat tracing/instances/foo/trace")
        .contains("tracing_mark_write: inside"));
    assert!(!m.sh_ok("cat tracing/trace").contains("inside"));
    // Busy while a file of it is open; removable after.
    let mut held = Command::new("sleep")
        .arg("600")
        .stdin(std::fs::File::open(m.path("tracing/instances/foo/trace")).unwrap())
        .spawn()
        .unwrap();
    assert!(e("rmdir tracing/instances/foo").contains("Device or resource busy"));
    held.kill().unwrap();
    held.wait().unwrap();
    // The close reaches the daemon asynchronously (FUSE_RELEASE).
    let deadline = Instant::now() + HANG;
    while !m.sh("rmdir tracing/instances/foo").status.success() {
        assert!(Instant::now() < deadline, "rmdir stayed busy");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(m.sh_ok("ls tracing/instances"), "");
    // The event still records at the top level.
    inject(&m, 13, 13, "0");
    assert_eq!(tick_times(&m.sh_ok("cat tracing/trace")).len(), 10);
}

#[test]
fn trace_cmd_record_into_an_instance() {
    let m = Mount::with_config(&default_with_tick());
    let dat = m.dir.path().join("inst.dat");
    let script = "for i in $(seq 1 50); do echo \"count=$i msg=\\\"b$i\\\"\" > \
                  /sys/kernel/tracing/instances/inst/events/myapp/tick/inject; done; sleep 1";
    m.trace_ns(&[
        "trace-cmd",
        "record",
        "-B",
        "inst",
        "-o",
        dat.to_str().unwrap(),
        "-e",
        "usb:usb_urb_submit",
        "-e",
        "myapp:tick",
        "sh",
        "-c",
        script,
    ]);
    let report = report(&dat);
    let ticks = report
        .lines()
        .filter(|l| l.starts_with("inst:") && l.contains(" tick: ") && l.contains(" count="))
        .count();
    assert_eq!(ticks, 50, "{report}");
    // Simulator events reach the instance through the same fan-out.
    assert!(
        report
            .lines()
            .any(|l| l.starts_with("inst:") && l.contains(" usb_urb_submit: ")),
        "{report}"
    );
    // trace-cmd removes the instance it made; the top level saw nothing.
    assert_eq!(m.sh_ok("ls tracing/instances"), "");
    assert!(tick_times(&m.sh_ok("cat tracing/trace")).is_empty());
}

#[test]
fn triggers_fire_in_the_kernels_order() {
    let m = Mount::with_config(TICK);
    let e = "tracing/events/myapp/tick";
    // traceoff with a count and a filter: the event that fires it is still
    // recorded (a post trigger), then tracing stops.
    m.sh_ok(&format!(
        "echo 'traceoff:2 if count > 5' > {e}/trigger; echo 1 > {e}/enable"
    ));
    assert_eq!(m.sh_ok(&format!("cat {e}/enable")), "1*\n");
    for c in [1, 3, 7, 9] {
        m.sh_ok(&format!("echo count={c} > {e}/inject"));
    }
    assert_eq!(m.sh_ok("cat tracing/tracing_on"), "0\n");
    assert_eq!(
        m.sh_ok(&format!("cat {e}/trigger")),
        "traceoff:count=1 if count > 5\n"
    );
    let ticks = tick_times(&m.sh_ok("cat tracing/trace"));
    assert_eq!(ticks.keys().copied().collect::<Vec<_>>(), vec![1, 3, 7]);
    m.sh_ok(&format!(
        "echo 1 > tracing/tracing_on; echo '!traceoff' >> {e}/trigger"
    ));
    assert_eq!(m.sh_ok(&format!("cat {e}/enable")), "1\n");
    // A hist trigger counts every hit.
    m.sh_ok(&format!("echo 'hist:keys=count' > {e}/trigger"));
    for c in [4, 4, 2] {
        m.sh_ok(&format!("echo count={c} > {e}/inject"));
    }
    let hist = m.sh_ok(&format!("cat {e}/hist"));
    assert!(hist.starts_with("# event histogram\n"), "{hist}");
    assert!(
        hist.contains("{ count:          4 } hitcount:          2\n"),
        "{hist}"
    );
    assert!(hist.contains("    Hits: 3\n    Entries: 2\n"), "{hist}");
    // A bad filter is logged in error_log; O_TRUNC clears it.
    assert!(!m
        .sh(&format!("echo 'traceon if nosuch == 1' >> {e}/trigger"))
        .status
        .success());
    let log = m.sh_ok("cat tracing/error_log");
    assert!(
        log.contains("event filter parse error: error: Field not found\n  Command: nosuch == 1\n"),
        "{log}"
    );
    m.sh_ok("echo > tracing/error_log");
    assert_eq!(m.sh_ok("cat tracing/error_log"), "");
}

#[test]
fn trace_cmd_decodes_stack_entries() {
    // A stacktrace trigger on the marker: trace-cmd reads the
    // ftrace:kernel_stack entry (no frames) from trace_pipe_raw.
    let m = Mount::default_config();
    m.sh_ok(
        "cd tracing; echo stacktrace > events/ftrace/print/trigger; echo hello > trace_marker; \
         echo 0 > tracing_on",
    );
    let dat = m.dir.path().join("stack.dat");
    m.trace_ns(&["trace-cmd", "extract", "-o", dat.to_str().unwrap()]);
    let report = report(&dat);
    let lines: Vec<&str> = report.lines().filter(|l| !l.starts_with("cpus=")).collect();
    assert_eq!(lines.len(), 2, "{report}");
    assert!(lines[0].ends_with("tracing_mark_write: hello"), "{report}");
    assert!(
        lines[1].ends_with(": kernel_stack:         <stack trace >"),
        "{report}"
    );
}
