//! The snapshot buffer, sub-buffer sizes, the snapshot and stacktrace
//! triggers and the trace_marker triggers, through the real mount with
//! shell processes, as the kernel's ftrace selftests drive them
//! (00basic/snapshot*.tc, ringbuffer_subbuf_size.tc, trigger/trigger-
//! snapshot.tc, trigger-stacktrace.tc, trigger-trace-marker-*.tc).

mod common;

use common::Mount;

/// One event to inject (no producer fires it), laid out as the kernel's
/// `sched_process_fork` (monfs's own fires for every real fork).
const CONFIG: &str = r#"
tracing:
  events:
    - system: app
      name: fork
      fields:
        - {name: parent_comm, type: "char[16]"}
        - {name: parent_pid, type: pid_t}
        - {name: child_comm, type: "char[16]"}
        - {name: child_pid, type: pid_t}
      format: '"comm=%s pid=%d child_comm=%s child_pid=%d", REC->parent_comm, REC->parent_pid, REC->child_comm, REC->child_pid'
"#;

/// The kernel's `snapshot` text while the buffer is empty
/// (`print_snapshot_help` after the `# tracer:` header).
fn help(state: &str) -> String {
    format!(
        "# tracer: nop\n#\n#\n# * Snapshot is {state} *\n#\n# Snapshot commands:\n\
# echo 0 > snapshot : Clears and frees snapshot buffer\n\
# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n\
#                      Takes a snapshot of the main buffer.\n\
# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n\
#                      (Doesn't have to be '2' works with any number that\n\
#                       is not a '0' or '1')\n"
    )
}

/// The marker texts in a `trace` text, in order.
fn markers(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            l.split_once("tracing_mark_write: ")
                .map(|x| x.1.to_string())
        })
        .collect()
}

/// Check the snapshot file's table in the array at `dir`.
fn swap_free_clear(m: &Mount, dir: &str) {
    let cd = format!("cd {dir}; ");
    let sh = |s: &str| m.sh_ok(&format!("{cd}{s}"));
    assert_eq!(sh("cat snapshot"), help("freed"));
    // Not allocated: 2 does nothing; bad values fail.
    sh("echo 2 > snapshot");
    assert_eq!(sh("cat snapshot"), help("freed"));
    for bad in ["x", "0x1", "-1", ""] {
        let o = m.sh(&format!("{cd}echo '{bad}' > snapshot"));
        assert!(!o.status.success(), "{bad:?} accepted");
    }
    sh("echo a > trace_marker; echo b > trace_marker");
    // 1: allocate and swap; tracing goes on in the empty spare.
    sh("echo 1 > snapshot");
    let snap = sh("cat snapshot");
    assert!(
        snap.starts_with("# tracer: nop\n#\n# entries-in-buffer/entries-written: 2/2   #P:"),
        "{snap}"
    );
    assert_eq!(markers(&snap), ["a", "b"]);
    assert_eq!(markers(&sh("cat trace")), Vec::<String>::new());
    assert_eq!(sh("cat tracing_on"), "1\n");
    sh("echo c > trace_marker");
    // 1 again: the buffers swap back.
    sh("echo 1 > snapshot");
    assert_eq!(markers(&sh("cat snapshot")), ["c"]);
    assert_eq!(markers(&sh("cat trace")), ["a", "b"]);
    // Anything else clears the snapshot; it stays allocated.
    sh("echo 2 > snapshot");
    assert_eq!(sh("cat snapshot"), help("allocated"));
    // `echo > trace` clears the live buffer only.
    sh("echo 1 > snapshot; echo > trace");
    assert_eq!(markers(&sh("cat snapshot")), ["a", "b"]);
    // 0 frees it.
    sh("echo 0 > snapshot");
    assert_eq!(sh("cat snapshot"), help("freed"));
}

#[test]
fn snapshot_file_swaps_frees_and_clears() {
    let m = Mount::with_config(CONFIG);
    swap_free_clear(&m, "tracing");
    m.sh_ok("mkdir tracing/instances/snap");
    swap_free_clear(&m, "tracing/instances/snap");
    // The top level's snapshot is its own.
    m.sh_ok("cd tracing; echo top > trace_marker; echo 1 > snapshot");
    assert_eq!(
        m.sh_ok("cat tracing/instances/snap/snapshot"),
        help("freed")
    );
    assert!(m
        .sh_ok("grep -c 'snapshot\t' tracing/README")
        .starts_with('1'));
}

#[test]
fn sub_buffer_sizes() {
    let m = Mount::with_config(CONFIG);
    let sh = |s: &str| m.sh_ok(&format!("cd tracing/instances/sb; {s}"));
    m.sh_ok("mkdir tracing/instances/sb");
    assert_eq!(sh("cat buffer_subbuf_size_kb"), "4\n");
    for (kb, want) in [
        ("5", "8"),
        ("16", "16"),
        ("17", "32"),
        ("512", "512"),
        ("1", "4"),
    ] {
        assert_eq!(
            sh(&format!(
                "echo {kb} > buffer_subbuf_size_kb; cat buffer_subbuf_size_kb"
            )),
            format!("{want}\n")
        );
    }
    for bad in ["0", "513", "x"] {
        let o = m.sh(&format!(
            "cd tracing/instances/sb; echo {bad} > buffer_subbuf_size_kb"
        ));
        assert!(!o.status.success(), "{bad} accepted");
    }
    sh("echo 8 > buffer_subbuf_size_kb");
    assert!(sh("cat events/header_page")
        .ends_with("\tfield: char data;\toffset:16;\tsize:8176;\tsigned:0;\n"));
    // A marker as long as a sub-buffer's data: the kernel cuts each write
    // at 4054 bytes whatever the sub-buffer size, and echo writes the rest
    // again, so the text comes in pieces (where depends on how the shell
    // buffers: bash writes 4096-byte chunks).
    let x = "X".repeat(8176);
    sh(&format!("echo > trace; echo {x} > trace_marker"));
    let got = markers(&sh("cat trace"));
    assert_eq!(got[0].len(), 4054);
    assert!(got.len() >= 3 && got.iter().all(|p| p.len() <= 4054));
    assert_eq!(got.concat(), x);
    // trace_pipe_raw serves 8 KiB pages.
    let sizes = sh(
        "for c in per_cpu/cpu*; do dd if=$c/trace_pipe_raw bs=65536 count=1 iflag=nonblock status=none | wc -c; done",
    );
    assert!(
        sizes.lines().any(|l| l.trim() == "8192"),
        "raw page sizes: {sizes}"
    );
    assert!(sizes.lines().all(|l| l.trim() == "8192" || l.trim() == "0"));
}

#[test]
fn snapshot_and_stacktrace_triggers() {
    let m = Mount::with_config(CONFIG);
    let ev = "events/app/fork";
    let fork = |n: u32| {
        format!(
            "echo 'parent_comm=\"sh\" parent_pid=1 child_comm=\"c{n}\" child_pid={n}' > {ev}/inject; "
        )
    };
    let sh = |s: &str| m.sh_ok(&format!("cd tracing; {s}"));
    // Adding a snapshot trigger allocates the snapshot buffer.
    sh(&format!("echo 1 > {ev}/enable; {}", fork(10)));
    sh(&format!("echo snapshot:1 > {ev}/trigger"));
    assert_eq!(sh("cat snapshot"), help("allocated"));
    // It takes the snapshot before the event is recorded, once.
    sh(&format!("{}{}", fork(11), fork(12)));
    let snap = sh("cat snapshot");
    assert!(
        snap.contains("child_comm=c10 ") && !snap.contains("c11"),
        "{snap}"
    );
    let trace = sh("cat trace");
    assert!(trace.contains("c11") && trace.contains("c12"), "{trace}");
    assert_eq!(sh(&format!("cat {ev}/trigger")), "snapshot:count=0\n");
    // One snapshot trigger an event; removing it keeps the buffer.
    let o = m.sh(&format!("cd tracing; echo snapshot > {ev}/trigger"));
    assert!(!o.status.success());
    sh(&format!("echo '!snapshot' > {ev}/trigger"));
    assert!(sh("cat snapshot").contains("child_comm=c10 "));
    // Freed under a trigger, a snapshot stops tracing instead.
    sh(&format!(
        "echo snapshot > {ev}/trigger; echo 0 > snapshot; {}",
        fork(13)
    ));
    assert_eq!(sh("cat tracing_on"), "0\n");
    sh(&format!(
        "echo '!snapshot' > {ev}/trigger; echo 1 > tracing_on"
    ));

    // stacktrace: a <stack trace> entry after the event, with no frames.
    sh(&format!(
        "echo > trace; echo stacktrace > {ev}/trigger; {}",
        fork(20)
    ));
    let lines: Vec<String> = sh("cat trace")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains(" fork: comm=sh pid=1 child_comm=c20"));
    assert!(lines[1].ends_with(": <stack trace>"), "{lines:?}");
    assert_eq!(lines[0].split(':').next(), lines[1].split(':').next());
    // options/stacktrace does the same for every event.
    sh(&format!(
        "echo '!stacktrace' > {ev}/trigger; echo > trace; echo 1 > options/stacktrace; {}{}echo 0 > options/stacktrace; {}",
        fork(21),
        fork(22),
        fork(23)
    ));
    let trace = sh("grep -v '^#' trace");
    assert_eq!(trace.matches("<stack trace>").count(), 2, "{trace}");
    // trace_pipe_raw carries it as ftrace:kernel_stack (id 4, size 0).
    let raw = sh(&format!(
        "echo > trace; echo stacktrace > {ev}/trigger; {}\
         for c in per_cpu/cpu*; do dd if=$c/trace_pipe_raw bs=4096 count=1 iflag=nonblock status=none | od -An -tx1 -v; done",
        fork(24)
    ));
    let bytes: Vec<u8> = raw
        .split_whitespace()
        .map(|b| u8::from_str_radix(b, 16).unwrap())
        .collect();
    // The stack entry: header word (4 words of data), type 4, size 0.
    let stack = [16u8 / 4, 0, 0, 0, 4, 0];
    assert!(
        bytes
            .windows(6)
            .any(|w| w[0] == stack[0] && w[4..6] == stack[4..6]),
        "no kernel_stack entry in the raw page"
    );
}

#[test]
fn trace_marker_triggers() {
    let m = Mount::with_config(CONFIG);
    m.sh_ok("mkdir tracing/instances/mk");
    for dir in ["tracing", "tracing/instances/mk"] {
        let sh = |s: &str| m.sh_ok(&format!("cd {dir}; {s}"));
        let p = "events/ftrace/print";
        assert_eq!(sh(&format!("ls {p}")), "format\nhist\nid\ntrigger\n");
        assert_eq!(sh("ls events/ftrace/kernel_stack"), "format\nhist\n");
        // hist on the marker.
        sh(&format!(
            "echo 'hist:keys=common_pid' > {p}/trigger; for i in $(seq 10); do echo hello > trace_marker; done"
        ));
        let hist = sh(&format!("cat {p}/hist"));
        assert!(hist.contains("hitcount:         10\n"), "{hist}");
        sh(&format!("echo '!hist:keys=common_pid' > {p}/trigger"));
        // snapshot: each marker is committed to the buffer it was
        // reserved in, which the trigger has just made the snapshot, so
        // odd markers end in `trace` and even ones in `snapshot`.
        sh(&format!(
            "echo > trace; echo snapshot > {p}/trigger; for i in $(seq 10); do echo \"hello >$i<\" > trace_marker; done"
        ));
        let odd: Vec<String> = (1..=10)
            .step_by(2)
            .map(|i| format!("hello >{i}<"))
            .collect();
        let even: Vec<String> = (2..=10)
            .step_by(2)
            .map(|i| format!("hello >{i}<"))
            .collect();
        assert_eq!(markers(&sh("cat trace")), odd);
        assert_eq!(markers(&sh("cat snapshot")), even);
        assert_eq!(sh(&format!("cat {p}/trigger")), "snapshot:unlimited\n");
        sh(&format!(
            "echo '!snapshot' > {p}/trigger; echo 0 > snapshot"
        ));
    }
    // Triggers go with the instance: a new one in its slot has none.
    m.sh_ok("rmdir tracing/instances/mk; mkdir tracing/instances/mk2");
    assert!(m
        .sh_ok("cat tracing/instances/mk2/events/ftrace/print/trigger")
        .starts_with("# Available triggers:"));
}
