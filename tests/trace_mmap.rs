//! The mapped ring buffer (`mmap` of `per_cpu/cpuN/trace_pipe_raw` and
//! `TRACE_MMAP_IOCTL_GET_READER`, kernel/trace/ring_buffer.c's
//! `ring_buffer_map`), through the real mount, with the C client
//! tests/c/trace_mmap.c: meta page fields, every event exactly once and in
//! order under a flood, consumed for the other readers, and the operations
//! refused (EBUSY) while mapped.

mod common;

use common::{compile_c, cpus, Mount, TICK};

fn run(m: &Mount, bin: &std::path::Path, dir: &str, n: u32) -> String {
    let o = std::process::Command::new(bin)
        .arg(m.path(dir))
        .arg(cpus().to_string())
        .arg(n.to_string())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{dir}: {out}{}\nlog tail:\n{}",
        String::from_utf8_lossy(&o.stderr),
        m.log_text()
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .join("\n")
    );
    eprintln!("{dir}: {out}");
    out
}

#[test]
fn mapped_readers_get_every_event_once_in_order() {
    let m = Mount::with_config(TICK);
    let bin = compile_c("trace_mmap", m.dir.path());
    // An instance: the full default size from the start.
    m.sh_ok("mkdir tracing/instances/mm");
    let out = run(&m, &bin, "tracing/instances/mm", 5000);
    assert!(out.starts_with("ok events=5000 "), "{out}");
    // Consumed: nothing is left for the other readers (read entries count
    // as neither, as measured on the real tracefs).
    let trace = m.sh_ok("cat tracing/instances/mm/trace");
    assert!(
        trace.contains("entries-in-buffer/entries-written: 0/0 "),
        "{trace}"
    );
    let pipe = m.sh_ok("timeout 1 cat tracing/instances/mm/trace_pipe; true");
    assert!(!pipe.contains("tick"), "{pipe}");
    // Mapping again starts afresh (reader id 0, counters of the buffer).
    m.sh_ok("echo > tracing/instances/mm/trace");
    run(&m, &bin, "tracing/instances/mm", 300);
    // The top level, once grown by a resize.
    m.sh_ok("echo 1408 > tracing/buffer_size_kb");
    run(&m, &bin, "tracing", 2000);
}
