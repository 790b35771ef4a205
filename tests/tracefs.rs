//! tracefs through the real mount: shell and C clients on every file, error
//! paths, differential checks against this machine's real tracefs (mounted in
//! a private mount namespace), trace-cmd through scripts/trace-ns and perf.
//!
//! The real tracefs is the machine's, and others may be using it: the
//! differential test works in an instance of its own (`instances/NAME` of
//! both trees), and the few files that exist only at the top level are read,
//! or written under [`HostTracefs`]'s lock and put back afterwards.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, wait_blocked, Mount};

/// Replicas of real events (same names, fields and, where monfs can print
/// it, the same print fmt), so one script runs against both trees. (monfs's
/// own `sched:sched_process_exec` has the real one's layout.)
const REPLICA: &str = r#"
tracing:
  events:
    - system: sched
      name: sched_switch
      fields:
        - {name: prev_comm, type: "char[16]"}
        - {name: prev_pid, type: pid_t}
        - {name: prev_prio, type: int}
        - {name: prev_state, type: long}
        - {name: next_comm, type: "char[16]"}
        - {name: next_pid, type: pid_t}
        - {name: next_prio, type: int}
      format: '"prev_comm=%s prev_pid=%d prev_prio=%d prev_state=%ld ==> next_comm=%s next_pid=%d next_prio=%d", REC->prev_comm, REC->prev_pid, REC->prev_prio, REC->prev_state, REC->next_comm, REC->next_pid, REC->next_prio'
    - system: irq
      name: irq_handler_entry
      fields:
        - {name: irq, type: int}
        - {name: name, type: "__data_loc char[]"}
    - system: irq
      name: softirq_entry
      fields:
        - {name: vec, type: "unsigned int"}
"#;

fn io_bin(m: &Mount) -> PathBuf {
    compile_c("tracefs_io", m.dir.path())
}

/// Run `script` (bash) with the machine's real tracefs, mounted in a
/// private mount namespace, as the working directory.
fn in_real_tracefs(script: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let full = format!(
        "set -e; mount -t tracefs nodev {d}; cd {d}; set +e\n{script}",
        d = dir.path().display()
    );
    Command::new("unshare")
        .args(["-m", "--propagation", "private", "bash", "-c", &full])
        .output()
        .expect("unshare")
}

/// Run `script` with `sub` of the real tracefs (`.` or `instances/NAME`) as
/// the working directory; `$IO` is the C helper.
fn real_sh(io: &Path, sub: &str, script: &str) -> String {
    let o = in_real_tracefs(&format!(
        "cd {sub} || exit 1; IO={io}\n{script}",
        io = io.display()
    ));
    assert!(
        o.status.success(),
        "real tracefs script failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// The same script in `sub` of monfs's `tracing/`.
fn monfs_sh(m: &Mount, io: &Path, sub: &str, script: &str) -> String {
    m.sh_ok(&format!("cd tracing/{sub}; IO={}\n{script}", io.display()))
}

/// The machine's real tracefs, for the differential test: an instance of
/// this test's own (made at [`HostTracefs::new`], removed at drop, also
/// after a failure) and a lock, held as long as this lives, that keeps other
/// runs of this suite off the top-level files this test writes (they are put
/// back by the test itself).
struct HostTracefs {
    _lock: std::fs::File,
    instance: String,
}

impl HostTracefs {
    fn new() -> Self {
        use std::os::fd::AsRawFd;
        let dir = if Path::new("/run/lock").is_dir() {
            "/run/lock"
        } else {
            "/tmp"
        };
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(format!("{dir}/monfs-tests-tracefs.lock"))
            .unwrap();
        // SAFETY: flock on a descriptor this function owns.
        assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
        let instance = format!("monfs-diff-{}", std::process::id());
        let o = in_real_tracefs(&format!("mkdir instances/{instance}"));
        assert!(
            o.status.success(),
            "real tracefs: mkdir instances/{instance}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        HostTracefs {
            _lock: lock,
            instance,
        }
    }

    /// `instances/NAME`, for [`real_sh`] and [`monfs_sh`].
    fn sub(&self) -> String {
        format!("instances/{}", self.instance)
    }
}

impl Drop for HostTracefs {
    fn drop(&mut self) {
        in_real_tracefs(&format!("rmdir instances/{}", self.instance));
    }
}

fn diff(what: &str, real: &str, ours: &str) {
    if real != ours {
        let mut msg = format!("{what}: monfs differs from the real tracefs\n");
        for (i, (a, b)) in real.lines().zip(ours.lines()).enumerate() {
            if a != b {
                msg.push_str(&format!(
                    "line {}:\n  real:  {a:?}\n  monfs: {b:?}\n",
                    i + 1
                ));
            }
        }
        msg.push_str(&format!(
            "real has {} lines, monfs {}",
            real.lines().count(),
            ours.lines().count()
        ));
        panic!("{msg}");
    }
}

#[test]
fn differential_against_real_tracefs() {
    if common::root_only() {
        return;
    }
    let m = Mount::with_config(REPLICA);
    let io = io_bin(&m);
    // Both trees get an instance of the same name, fresh: the steps below
    // run in it unless they say otherwise, so that whatever others do with
    // the machine's top-level tracing changes no answer here.
    let host = HostTracefs::new();
    let inst = host.sub();
    m.sh_ok(&format!("mkdir tracing/{inst}"));
    let both = |what: &str, script: &str| {
        diff(
            what,
            &real_sh(&io, &inst, script),
            &monfs_sh(&m, &io, &inst, script),
        )
    };
    let top = |what: &str, script: &str| {
        diff(
            what,
            &real_sh(&io, ".", script),
            &monfs_sh(&m, &io, ".", script),
        )
    };

    // 1. File modes, of an instance's files and of the top level's own.
    let modes = "stat -c '%a %n' available_tracers buffer_size_kb buffer_total_size_kb \
                 current_tracer set_event set_event_pid set_ftrace_pid trace trace_options trace_pipe tracing_on \
                 events events/enable events/header_page events/header_event options options/irq-info \
                 events/sched events/sched/enable events/sched/filter events/sched/sched_switch \
                 events/sched/sched_switch/enable events/sched/sched_switch/filter events/sched/sched_switch/format \
                 events/sched/sched_switch/id; stat -c '%a' .\n";
    both("modes", modes);
    top(
        "top-level modes",
        "stat -c '%a %n' README available_events saved_cmdlines_size instances; stat -c '%a' .\n",
    );

    // 2. set_event grammar: one token per write, byte counts, errnos, and
    // the enable read-backs. (available_events differs on purpose: the real
    // kernel has ~2300 events, so read-backs are filtered to the replicas.)
    let grammar = r#"
$IO set_event a "sched:sched_switch irq" "  " "" "sched_" "sched_*" "nosuch" "*" "!" "a:b:c" \
    "sched:sched_switch:mod:foo" "!sched:sched_switch" "sched:sched_switch\n" ":sched_process_exec" \
    "!*:sched_process_exec" "\tirq:softirq_entry\n" "sched:sched_switch\0irq" "!nosuch" "\n\n" \
    "$(printf 'a%.0s' $(seq 128))" "$(printf '\240sched:sched_process_exec\240')" \
    "$(printf 'sched:sched_switch\351')"
grep -E '^(sched:sched_switch|sched:sched_process_exec|irq:irq_handler_entry|irq:softirq_entry)$' set_event | sort
cat events/sched/sched_switch/enable events/sched/sched_process_exec/enable events/sched/enable events/irq/enable
$IO set_event a "irq" "!irq:" "irq:*" "!irq:irq_handler_entry"
cat events/irq/enable events/irq/irq_handler_entry/enable events/irq/softirq_entry/enable
$IO set_event t
cat set_event | wc -l; cat events/irq/enable events/enable
echo sched:sched_switch >> set_event; echo irq:softirq_entry >> set_event; cat set_event
echo > set_event; cat set_event | wc -l
"#;
    both("set_event grammar", grammar);

    // 3. enable files: kstrtoul rules, 0/1/X read-backs. (events/enable is
    // only written with 0 and bad values: 1 would turn on every real event.
    // No zero-length writes here: the kernel's FUSE client answers them with
    // 0 itself, so monfs never sees them, while tracefs gives EINVAL.)
    let enable = r#"
E=events/sched/sched_switch/enable
$IO $E w "1" "1\n" "2" "x" " 1" "01" "1 " "+1" "0x1" "1\n\n" "-0" "00" "1\0"
cat $E events/sched/enable
$IO events/irq/enable w "1" "2" " 1" "0 " "1\n"
cat events/irq/enable events/irq/softirq_entry/enable
$IO events/enable w "3" "x" "0"
cat events/enable events/irq/enable events/sched/enable
$IO tracing_on w "0" "2" "x" " 1" "00" "1"
cat tracing_on
$IO current_tracer w "nop" "nop\n" "foo" " nop"
cat current_tracer
$IO events/sched/sched_switch/format w x
$IO events/sched/sched_switch/id w x
$IO available_events w x
$IO trace_pipe w x
$IO trace w x abc
$IO set_event_pid w "1 2" "3\n" "x"
cat set_event_pid; $IO set_event_pid t; cat set_event_pid
$IO trace_options w noirq-info bogus "irq-info\n"
$IO options/irq-info w 2 1
$IO options/test_nop_refuse w 1 0 "0\n"
$IO options/test_nop_accept w 1 0
$IO trace_options w test_nop_refuse notest_nop_refuse test_nop_accept notest_nop_accept
cat options/test_nop_refuse options/test_nop_accept
echo > set_event
"#;
    both("enable files", enable);

    // 4. format layout: byte-exact except the ID (monfs ids start at 40000
    // on purpose) and sched_switch's print fmt (the kernel's uses
    // __print_flags, which monfs's print-format interpreter does not have).
    let fmt = "cat events/sched/sched_process_exec/format | grep -v '^ID: '; \
               cat events/sched/sched_switch/format | grep -v -e '^ID: ' -e '^print fmt: '; cat events/header_page\n";
    both("format", fmt);

    // 5. filters: errnos and what reading the filter shows afterwards.
    let exprs = [
        "prev_pid == 1",
        "prev_pid==1\\n",
        "  prev_pid  ==  1  ",
        "(prev_pid == 1 || next_pid != 3) && prev_prio <= 4",
        "!(prev_pid == 1)",
        "prev_comm == bash",
        "prev_comm ~ \\\"ba*\\\"",
        "prev_pid == ",
        "prev_pid",
        "nosuch == 1",
        "prev_pid ~ 1",
        "(prev_pid == 1",
        "prev_pid == 1)",
        // (No empty write: FUSE answers zero-length writes with 0 itself.)
        "prev_pid == 1 ||| next_pid == 2",
        "prev_pid = 1",
        "prev_pid == 99999999999999999999",
        "prev_comm == 12",
        "prev_comm == \\\"bash",
        "prev_pid == 1 next_pid == 2",
        "== 1",
        "()",
        "!",
        // (Not "prev_pid == 1 || !": Debian's 6.12, which monfs follows,
        // refuses an incomplete expression; this machine's 6.18.44 takes it.)
        "prev_pid == 0x10",
        "prev_pid == 08",
        "prev_pid == \\\"1\\\"",
        "CPU == 1",
        "COMM ~ \\\"b*\\\"",
        "common_pid == 5",
        "prev_pid == 000000000000000000000001",
        "0",
    ];
    let mut script = String::new();
    for e in exprs {
        script.push_str(&format!(
            "$IO events/sched/sched_switch/filter w \"{e}\"; cat events/sched/sched_switch/filter\n"
        ));
    }
    script.push_str("$IO events/sched/filter w 'prev_pid == 1'; cat events/sched/filter events/sched/sched_switch/filter events/sched/sched_process_exec/filter\n");
    script.push_str("$IO events/sched/filter w 0; cat events/sched/sched_switch/filter events/sched/sched_process_exec/filter\n");
    both("filters", &script);

    // 6. The trace header of an empty buffer, and O_NONBLOCK trace_pipe.
    let hdr = "echo > trace; cat trace; $IO trace_pipe n\n";
    both("trace header", hdr);

    // 7. buffer_size_kb rounding to 4080-byte pages (the real one is left
    // at the size it had; its "expanded" state is machine history, so only
    // values after a write are compared).
    let buf = "$IO buffer_size_kb w 1 0 x; cat buffer_size_kb; \
               $IO buffer_size_kb w '100\\n'; cat buffer_size_kb; echo 1408 > buffer_size_kb; cat buffer_size_kb\n";
    both("buffer_size_kb", buf);

    // 8. The files trace-cmd reads and writes besides the events: clocks,
    // per-CPU sizes, cmdline and cpumask files, marker errors, and the
    // raw pipe of an empty CPU. Values are put back as they were.
    let files = "cat trace_clock; $IO trace_clock w global bogus 'mono\n' local; cat trace_clock; \
                 cat timestamp_mode buffer_subbuf_size_kb; \
                 cat buffer_percent; $IO buffer_percent w 101 -1 30; cat buffer_percent; echo 50 > buffer_percent; \
                 $IO tracing_cpumask w zz; cat tracing_cpumask; \
                 $IO trace_marker_raw w ab abc; \
                 echo 1408 > buffer_size_kb; $IO per_cpu/cpu0/buffer_size_kb w 100 0; \
                 cat per_cpu/cpu0/buffer_size_kb buffer_size_kb; echo 1408 > buffer_size_kb; cat buffer_size_kb; \
                 echo > trace; $IO per_cpu/cpu0/trace_pipe_raw n; $IO per_cpu/cpu0/trace_pipe n; \
                 grep -v 'now ts' per_cpu/cpu0/stats; ls per_cpu/cpu0; ls events/ftrace/print events/ftrace/raw_data; \
                 $IO buffer_subbuf_size_kb w 0 1 5 9 17 512 513 x 4; grep data events/header_page; \
                 echo 8 > buffer_subbuf_size_kb; grep data events/header_page; cat buffer_subbuf_size_kb buffer_size_kb; \
                 $IO trace_marker w \"$(printf 'X%.0s' $(seq 5000))\"; echo 4 > buffer_subbuf_size_kb\n";
    // Some hosts' kernels refuse every write to buffer_subbuf_size_kb with
    // EPERM, even of the size it has (seen on a 6.18 build): there the
    // sub-buffer writes cannot be compared, and are left out on both sides
    // (monfs takes them as 6.12 does; tests/snapshot.rs checks that).
    let subbuf_writable = real_sh(
        &io,
        &inst,
        "echo 4 > buffer_subbuf_size_kb 2>/dev/null && echo yes || echo no\n",
    ) == "yes\n";
    let files = if subbuf_writable {
        files.to_string()
    } else {
        eprintln!(
            "tracefs differential: this host's tracefs refuses writes to buffer_subbuf_size_kb \
             (EPERM); the sub-buffer size writes are not compared"
        );
        let cut = files.find("$IO buffer_subbuf_size_kb w").unwrap();
        format!(
            "{}$IO trace_marker w \"$(printf 'X%.0s' $(seq 5000))\"\n",
            &files[..cut]
        )
    };
    let files = files.as_str();
    let real = real_sh(&io, &inst, files);
    // monfs serves the `hist` files of a kernel with hist triggers (this
    // machine's has none).
    // And per_cpu/cpuN/snapshot_raw of a kernel with the snapshot buffer
    // (CONFIG_TRACER_SNAPSHOT, which this machine's also lacks).
    let real = real
        .replace("format\nid\ntrigger\n", "format\nhist\nid\ntrigger\n")
        .replace("raw_data:\nformat\n", "raw_data:\nformat\nhist\n")
        .replace(
            "buffer_size_kb\nstats\ntrace\n",
            "buffer_size_kb\nsnapshot_raw\nstats\ntrace\n",
        );
    diff("buffer files", &real, &monfs_sh(&m, &io, &inst, files));
    // saved_cmdlines_size exists only at the top level: only what it reads
    // after a write is compared, and it is put back as it was.
    top(
        "saved_cmdlines_size",
        "S=$(cat saved_cmdlines_size); $IO saved_cmdlines_size w 0 99999 x 256; cat saved_cmdlines_size; \
         echo \"$S\" > saved_cmdlines_size\n",
    );

    // 9. Triggers: grammar, errnos, read-back order and format, removal,
    // soft mode. Counts of 0 never fire, so the real machine is left alone.
    let trig = "T=events/sched/sched_switch/trigger; \
                $IO $T a 'traceon:0' 'traceon:0' 'traceoff:0 if prev_pid == 0' 'traceon:abc' \
                'stacktrace:0 if prev_pid == 99' 'enable_event:sched:sched_process_exec:0' \
                'enable_event:nosuch:x' 'disable_event:sched:sched_process_exec' 'foo' \
                'traceon if nosuch == 1' 'stacktrace:0x10'; \
                cat $T; cat events/sched/sched_process_exec/enable events/sched/sched_switch/enable; \
                $IO $T a '!traceoff:5' '!stacktrace' '!enable_event:sched:sched_process_exec' '!traceon' '!nosuch'; \
                cat $T | grep -v '^#'; cat events/sched/sched_process_exec/enable\n";
    both("triggers", trig);

    // 10. trace_printk_dest lives in exactly one array: an instance starts
    // without it, takes it from the top level, gives it back when cleared
    // or removed; the top level cannot clear it itself.
    // This one is about the top level: it starts from a top level that
    // holds trace_printk_dest, as a fresh one does, and puts back what it
    // found.
    // This one is about the top level, which holds trace_printk_dest
    // unless an instance took it: where one of the machine's did, the step
    // would take it away, so it is left out.
    if real_sh(&io, ".", "cat options/trace_printk_dest") == "1\n" {
        let printk = format!(
            "O=options/trace_printk_dest; I={inst}-dest; mkdir $I; \
             cat $O $I/$O; $IO $O w 0; $IO $I/$O w 1; cat $O $I/$O; \
             $IO $I/$O w 0; cat $O $I/$O; $IO $I/$O w 1; $IO trace_options w notrace_printk_dest; \
             rmdir $I; cat $O\n"
        );
        top("trace_printk_dest", &printk);
    } else {
        eprintln!("trace_printk_dest not compared: an instance of this machine's tracefs holds it");
    }
}

#[test]
fn usb_events_from_the_simulator() {
    let m = Mount::default_config();
    let out = m.sh_ok(
        "cd tracing; echo usb:usb_urb_complete > set_event; sleep 1.5; echo 0 > tracing_on; cat trace; \
         echo 1 > tracing_on",
    );
    let lines: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
    assert!(lines.len() > 5, "too few events:\n{out}");
    for l in &lines {
        // `<comm>-<pid> [cpu] flags secs.usecs: name: fields`
        let (ctx, rest) = l
            .split_once(": usb_urb_complete: urb=")
            .unwrap_or_else(|| panic!("{l}"));
        assert_eq!(&ctx[16..17], "-", "{l}");
        assert!(ctx.contains("] ..... "), "{l}");
        assert!(
            rest.contains(" bus=") && rest.contains(" status=") && rest.contains(" length="),
            "{l}"
        );
    }
    // A filter on the event's fields.
    let out = m.sh_ok(
        "cd tracing; echo 'bus == 2 && ep & 0x80' > events/usb/usb_urb_complete/filter; echo > trace; sleep 1.5; \
         cat trace; cat events/usb/usb_urb_complete/filter",
    );
    let lines: Vec<&str> = out
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains("usb_urb_"))
        .collect();
    assert!(!lines.is_empty(), "{out}");
    for l in lines {
        assert!(l.contains(" bus=2 ") && l.contains(" ep=8"), "{l}");
    }
    assert!(out.ends_with("bus == 2 && ep & 0x80\n"));
    // Submit errors from the flaky card reader (submit_error_every: 13).
    let out = m.sh_ok(
        "cd tracing; echo > set_event; echo 1 > events/usb/usb_urb_error/enable; sleep 4; grep -c usb_urb_error: trace || true",
    );
    assert_ne!(out.trim(), "0", "no usb_urb_error events");
}

#[test]
fn trace_pipe_consumes_blocks_and_is_ctrl_c_safe() {
    let m = Mount::with_config(REPLICA);
    let io = io_bin(&m);
    // Empty: O_NONBLOCK gives EAGAIN.
    assert_eq!(monfs_sh(&m, &io, ".", "$IO trace_pipe n").trim(), "-11");
    // A blocked reader wakes up when an event arrives.
    let mut cat = Command::new("cat")
        .arg(m.path("tracing/trace_pipe"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_blocked(cat.id());
    m.sh_ok("cd tracing; echo 'vec=7' > events/irq/softirq_entry/inject");
    let mut stdout = cat.stdout.take().unwrap();
    let mut buf = [0u8; 4096];
    let n = std::io::Read::read(&mut stdout, &mut buf).unwrap();
    let line = String::from_utf8_lossy(&buf[..n]).to_string();
    assert!(line.ends_with(": softirq_entry: vec=7\n"), "{line:?}");
    // Consumed: the trace file no longer has it.
    assert!(
        m.sh_ok("grep -c softirq_entry tracing/trace || true")
            .trim()
            == "0"
    );
    // Ctrl-C on a blocked reader ends it promptly.
    wait_blocked(cat.id());
    let t0 = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cat.id() as i32, libc::SIGINT) };
    let st = cat.wait().unwrap();
    assert!(!st.success());
    assert!(
        t0.elapsed() < common::HANG,
        "SIGINT took {:?}",
        t0.elapsed()
    );
    // Partial reads: dd with 10-byte reads gets whole lines back together.
    let out = m.sh_ok(
        "cd tracing; for i in 1 2 3; do echo \"vec=$i\" > events/irq/softirq_entry/inject; done; \
         timeout 10 dd if=trace_pipe bs=10 status=none | head -c 100000; true",
    );
    let got: Vec<&str> = out
        .lines()
        .map(|l| l.rsplit(": ").next().unwrap())
        .collect();
    assert_eq!(got, vec!["vec=1", "vec=2", "vec=3"], "{out}");
}

#[test]
fn control_files_and_errors() {
    let m = Mount::with_config(REPLICA);
    let io = io_bin(&m);
    let out = monfs_sh(
        &m,
        &io,
        ".",
        r#"
cat README | head -1
cat available_tracers current_tracer
$IO current_tracer w function
$IO buffer_size_kb w 0 99999999999
$IO events/irq/softirq_entry/inject w "vec=1" "nosuch=1" "vec=\"x\"" "vec" ""
$IO events/irq/irq_handler_entry/inject w "irq=5 name=\"eth0\""
grep -o 'irq_handler_entry: irq=5 name=eth0' trace
$IO events/sched/sched_switch/filter w "$(printf 'prev_pid == 1 %.0s' $(seq 300))"
echo > trace; grep entries-in-buffer trace
echo 1 > events/irq/softirq_entry/enable; echo 0 > tracing_on
echo vec=1 > events/irq/softirq_entry/inject; grep -c softirq_entry: trace
echo 1 > tracing_on
echo usb:usb_urb_submit > set_event; cat set_event
echo >> set_event; cat set_event
echo zvm >> set_event; cat set_event; cat events/zvm/enable
echo > set_event; cat events/enable
"#,
    );
    assert_eq!(
        out,
        "tracing mini-HOWTO (monfs):\nnop\nnop\n-22\n-22\n-12\n5\n-22\n-22\n-22\n0\n17\n\
irq_handler_entry: irq=5 name=eth0\n-22\n# entries-in-buffer/entries-written: 0/0   #P:"
            .to_string()
            + &format!("{}\n", std::thread::available_parallelism().unwrap())
            + "0\nusb:usb_urb_submit\nusb:usb_urb_submit\nzvm:zvm_event\nzvm:zvm_sample\nusb:usb_urb_submit\n1\n0\n"
    );
}

/// trace-cmd through scripts/trace-ns: the tool finds a tracefs in
/// /proc/mounts and talks to monfs.
#[test]
fn trace_cmd_through_trace_ns() {
    let have = Command::new("trace-cmd")
        .arg("--help")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        have.is_ok(),
        "trace-cmd is not installed (apt-get install -y trace-cmd)"
    );
    let m = Mount::default_config();
    let run = |args: &[&str]| m.trace_ns(args);
    let list = run(&["trace-cmd", "list", "-e"]);
    assert!(list.lines().any(|l| l == "usb:usb_urb_submit"), "{list}");
    assert!(list.lines().any(|l| l == "zvm:zvm_sample"), "{list}");
    run(&["trace-cmd", "start", "-e", "usb:usb_urb_submit"]);
    assert_eq!(m.sh_ok("cat tracing/set_event"), "usb:usb_urb_submit\n");
    // However long the first URB takes to come.
    let deadline = std::time::Instant::now() + common::HANG;
    let show = loop {
        let show = run(&["trace-cmd", "show"]);
        if show.contains(": usb_urb_submit: urb=") || std::time::Instant::now() > deadline {
            break show;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(show.starts_with("# tracer: nop\n"), "{show}");
    assert!(show.contains(": usb_urb_submit: urb="), "{show}");
    run(&["trace-cmd", "stop"]);
    assert_eq!(m.sh_ok("cat tracing/tracing_on"), "0\n");
    // The namespace did not leak: the host's tracefs mounts are untouched.
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    assert!(!mounts
        .lines()
        .any(|l| l.contains("fuse.monfs") && l.contains("/sys/kernel/tracing")));
}

/// perf reads events/*/*/id through TRACEFS_PATH.
#[test]
fn perf_list_with_tracefs_path() {
    let m = Mount::default_config();
    let o = Command::new("perf")
        .args(["list", "tracepoint"])
        .env("TRACEFS_PATH", m.path("tracing"))
        .output()
        .expect("perf is not installed (apt-get install -y linux-perf)");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("usb:usb_urb_complete") && out.contains("zvm:zvm_event"),
        "{out}"
    );
}

/// Whether the kernel lets this user subscribe to its process events: the
/// proc connector's multicast group takes root's (CAP_NET_ADMIN) bind
/// only, unless the kernel opens it to everyone (NL_CFG_F_NONROOT_RECV).
/// Probed here, beside monfs, so that the test checks what monfs must do
/// on this host either way.
fn proc_connector_open_to_me() -> bool {
    const NETLINK_CONNECTOR: i32 = 11;
    const CN_IDX_PROC: u32 = 1;
    // SAFETY: socket() and bind() take integers and a sockaddr_nl that
    // lives across the call; the descriptor is closed below.
    unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            NETLINK_CONNECTOR,
        );
        if fd < 0 {
            return false;
        }
        let mut sa: libc::sockaddr_nl = std::mem::zeroed();
        sa.nl_family = libc::AF_NETLINK as u16;
        sa.nl_groups = CN_IDX_PROC;
        let ok = libc::bind(
            fd,
            &sa as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        ) == 0;
        libc::close(fd);
        ok
    }
}

/// `sched:sched_process_{fork,exec,exit}` are recorded for real processes
/// (from the kernel's process connector), with the kernel's fields, and
/// `event-fork` follows a listed task's children. Where the kernel refuses
/// this user the connector (rootless, on kernels that keep it root's), the
/// events never fire and the log says why, as docs/rootless.md says.
#[test]
fn process_events_of_real_processes() {
    let m = Mount::default_config();
    if !proc_connector_open_to_me() {
        let out = m.sh_ok(
            "cd tracing; echo 'sched:sched_process_fork sched:sched_process_exec sched:sched_process_exit' > set_event; \
             echo > trace; /bin/cat tracing_on > /dev/null & wait $!; cat trace; echo > set_event",
        );
        let events: Vec<&str> = out.lines().filter(|l| !l.starts_with('#')).collect();
        assert!(events.is_empty(), "{out}");
        let log = m.log_text();
        assert!(
            log.contains("no process events (") && log.contains("never fire"),
            "the log does not say why:\n{log}"
        );
        return;
    }
    // The script records its own pid ($$) and forks a child that execs
    // `cat tracing_on`: a child that makes a request on the mount while it
    // runs, so monfs has taken its exec in (comm and /proc/PID/exe read)
    // before it can exit, however loaded the machine. The trace is read
    // once the child is gone: every event the script caused is in the
    // buffer before its next request (no waiting).
    let out = m.sh_ok(
        "cd tracing; echo 'sched:sched_process_fork sched:sched_process_exec sched:sched_process_exit' > set_event; \
         echo > trace; echo $$; read -r comm < /proc/$$/comm; echo $comm; \
         /bin/cat tracing_on > /dev/null & c=$!; wait $c; echo $c; echo 0 > tracing_on; cat trace; echo 1 > tracing_on",
    );
    let mut it = out.lines();
    let sh: u32 = it.next().unwrap().parse().unwrap();
    let comm = it.next().unwrap().to_string();
    let child: u32 = it.next().unwrap().parse().unwrap();
    let trace: Vec<&str> = it.filter(|l| !l.starts_with('#')).collect();
    let fork =
        format!("sched_process_fork: comm={comm} pid={sh} child_comm={comm} child_pid={child}");
    let exec = format!("sched_process_exec: filename=/usr/bin/cat pid={child} old_pid={child}");
    let exit = format!("sched_process_exit: comm=cat pid={child} prio=");
    for want in [&fork, &exec, &exit] {
        let l = trace
            .iter()
            .find(|l| l.contains(want.as_str()))
            .unwrap_or_else(|| panic!("no `{want}` in:\n{}", trace.join("\n")));
        // The task is the one that did it: the parent forks, the child
        // execs and exits.
        let who = if want == &fork {
            format!("{comm}-{sh} ")
        } else {
            format!("cat-{child} ")
        };
        assert!(l.trim_start().starts_with(&who), "{l}");
    }
    // The fork comes first, then the exec, then the exit.
    let pos = |w: &str| trace.iter().position(|l| l.contains(w)).unwrap();
    assert!(pos(&fork) < pos(&exec) && pos(&exec) < pos(&exit));

    // event-fork: with the shell in set_event_pid, its child's exec is
    // recorded only when the option is on, and the exited child leaves the
    // list again. Only these two children's lines are counted: while the
    // list is empty (between the O_TRUNC and the write of `echo $$ >
    // set_event_pid`) the exec of any process on the machine is recorded,
    // in the kernel as here, and other tests run `cat` meanwhile.
    let out = m.sh_ok(
        "cd tracing; echo sched:sched_process_exec > set_event; echo $$ > set_event_pid; echo > trace; \
         /bin/cat tracing_on > /dev/null & a=$!; wait $a; echo 1 > options/event-fork; \
         /bin/cat tracing_on > /dev/null & c=$!; wait $c; echo $c; \
         for p in $a $c; do grep -c \"sched_process_exec: filename=/usr/bin/cat pid=$p \" trace; done; \
         cat set_event_pid; echo 0 > options/event-fork; echo > set_event_pid; echo > set_event",
    );
    let mut it = out.lines();
    let child = it.next().unwrap();
    assert_eq!(
        (it.next(), it.next()),
        (Some("0"), Some("1")),
        "the exec of the child before event-fork, then the one after:\n{out}"
    );
    // (The list also holds the running `cat`, a child of the shell.)
    let listed: Vec<&str> = it.collect();
    assert!(
        !listed.contains(&child),
        "exited child still listed:\n{out}"
    );
}

/// What a caller writes (a marker, a raw marker, an `inject`) is recorded
/// on the CPU it wrote on, as the kernel records in the writer's context:
/// each CPU's buffer gets exactly the writes made there. The daemon's
/// request threads are kept on CPU 0 (`--cpus 0`), so that the CPU that
/// serves a write is not the writer's.
#[test]
fn writes_are_recorded_on_the_writers_cpu() {
    let m = Mount::start(Some(REPLICA), &["--cpus", "0"]);
    let cpus: usize = m.sh_ok("nproc").trim().parse().unwrap();
    let n = 100;
    for k in 0..cpus {
        m.sh_ok(&format!(
            "cd tracing; taskset -c {k} sh -c 'for i in $(seq {n}); do echo \"cpu{k}-$i\" > trace_marker; \
             printf \"\\001\\000\\000\\000{k}\" > trace_marker_raw; echo vec={k} > events/irq/softirq_entry/inject; done'"
        ));
    }
    for k in 0..cpus {
        let trace = m.sh_ok(&format!("cat tracing/per_cpu/cpu{k}/trace"));
        let lines: Vec<&str> = trace.lines().filter(|l| !l.starts_with('#')).collect();
        for j in 0..cpus {
            let markers = lines
                .iter()
                .filter(|l| l.contains(&format!(": cpu{j}-")))
                .count();
            let injects = lines
                .iter()
                .filter(|l| l.ends_with(&format!("softirq_entry: vec={j}")))
                .count();
            let want = if j == k { n } else { 0 };
            assert_eq!(
                markers, want,
                "markers of CPU {j} in cpu{k}'s buffer:\n{trace}"
            );
            assert_eq!(
                injects, want,
                "injects of CPU {j} in cpu{k}'s buffer:\n{trace}"
            );
        }
        // The raw markers (`# 1 buf: 3K 00 00 00`): id 1, then the digit K.
        let raw: Vec<&&str> = lines.iter().filter(|l| l.contains(": # 1 buf: ")).collect();
        assert_eq!(raw.len(), n, "raw markers in cpu{k}'s buffer:\n{trace}");
        let digit = format!("buf: {:02x} ", b'0' + k as u8);
        assert!(
            raw.iter().all(|l| l.contains(&digit)),
            "raw markers of another CPU in cpu{k}'s buffer:\n{trace}"
        );
        // Every line says the CPU it is on.
        assert!(
            lines.iter().all(|l| l.contains(&format!("[{k:03}]"))),
            "{trace}"
        );
    }
}

/// The function tracer's filter files and `tracing_max_latency`, at the top
/// level and in an instance, as a kernel with nothing to trace answers:
/// no word written to a filter names a function (EINVAL), white space and
/// truncation are taken, and the maximum latency reads in microseconds.
#[test]
fn function_filter_files_and_max_latency() {
    let m = Mount::with_config(REPLICA);
    let io = io_bin(&m);
    let script = r#"
stat -c '%a %n' set_ftrace_filter set_ftrace_notrace tracing_max_latency
cat set_ftrace_filter; cat set_ftrace_notrace | wc -c
$IO set_ftrace_filter w "schedule\n" "*" "  " "!x " "sched" "\n"
$IO set_ftrace_notrace a "foo\n" " "
: > set_ftrace_filter; cat set_ftrace_filter
cat tracing_max_latency; $IO tracing_max_latency w 250 x "" " 1"; cat tracing_max_latency
"#;
    // One line per write: bytes taken or -errno (the empty write is
    // answered by FUSE itself).
    let want = "640 set_ftrace_filter\n640 set_ftrace_notrace\n640 tracing_max_latency\n\
                #### all functions enabled ####\n0\n\
                -22\n1\n2\n-22\n5\n1\n\
                -22\n1\n\
                #### all functions enabled ####\n\
                0\n3\n-22\n0\n-22\n250\n";
    for sub in [".", "instances/fn"] {
        if sub != "." {
            m.sh_ok("mkdir tracing/instances/fn");
        }
        assert_eq!(monfs_sh(&m, &io, sub, script), want, "{sub}");
    }
    assert_eq!(m.sh_ok("cat tracing/available_filter_functions"), "");
    assert!(!m
        .path("tracing/instances/fn/available_filter_functions")
        .exists());
}
