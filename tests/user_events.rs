//! user_events through the real mount: C producers of both ABIs compiled
//! here (tests/c/user_events_tool.c, examples/user_events_producer*.c), the
//! shell on `dynamic_events`, and the unmodified `tracepoint` crate through
//! scripts/trace-ns.

mod common;

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, Mount};

/// Run the tool; its `key=value` lines (first value of each key, and every
/// value in order under `key*`).
fn run_tool(m: &Mount, args: &[&str]) -> (HashMap<String, String>, String) {
    let bin = compile_c("user_events_tool", m.dir.path());
    let out = Command::new(&bin)
        .arg(m.path("tracing"))
        .args(args)
        .output()
        .expect("run user_events_tool");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "user_events_tool {args:?}: {}\n{text}\nstderr: {}\nlog:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        m.log_text()
    );
    let mut map = HashMap::new();
    for l in text.lines() {
        if let Some((k, v)) = l.split_once('=') {
            map.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }
    (map, text)
}

fn expect(map: &HashMap<String, String>, text: &str, key: &str, want: &str) {
    let got = map.get(key).map(String::as_str).unwrap_or("<missing>");
    assert!(
        got == want || got.starts_with(&format!("{want} ")),
        "{key}: got {got:?}, want {want:?}\nfull output:\n{text}"
    );
}

/// The event directories under `events/user_events/` (readdir is never
/// cached, unlike a path lookup). The system's own files are left out.
fn user_events_dirs(m: &Mount) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(m.path("tracing/events/user_events")) else {
        return Vec::new();
    };
    let mut v: Vec<String> = rd
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "enable" && n != "filter")
        .collect();
    v.sort();
    v
}

fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + common::HANG;
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn new_abi_register_enable_write_errors_unregister() {
    let m = Mount::default_config();
    let (r, text) = run_tool(&m, &["new"]);
    let e = |k: &str, v: &str| expect(&r, &text, k, v);
    // Registration: write_index per fd, the same event again reuses it.
    e("reg", "OK index=0 word=0x0");
    e("reg2", "OK index=1");
    e("reg_again", "OK index=0");
    e("unreg5", "OK");
    // Enable through events/.../enable: the bit appears in our memory.
    e("bit_on", "yes word=0x80000000");
    e("write", "36 OK");
    e("write_extra", "43 OK");
    // Write errors.
    e("write_bad_index", "ENOENT");
    e("write_neg_index", "EINVAL");
    e("write_short_header", "EFAULT");
    e("write_short_payload", "EINVAL");
    e("write_bad_loc", "EFAULT");
    e("write_no_nul", "EFAULT");
    e("write_other_fd", "ENOENT");
    // Disable: the bit clears and a write is refused as 6.4+ does.
    e("bit_off", "yes word=0x0");
    e("write_disabled", "EBADF");
    // Through set_event.
    e("bit_on_set_event", "yes");
    e("write3", "33");
    e("bit_off_set_event", "yes");
    assert!(text.contains("\nstatus=ue_new\n"), "{text}");
    assert!(
        text.contains("\nstatus=Active: 2\nstatus=Busy: 0\n"),
        "{text}"
    );
    assert!(
        text.contains("\ndyn=u:ue_new u32 count; char[20] msg; __data_loc char[] s\n"),
        "{text}"
    );
    // Registration errors.
    for (k, v) in [
        ("reg_same_bit", "EADDRINUSE"),
        ("reg_other_fields", "EADDRINUSE"),
        ("reg_long", "EINVAL"),
        ("reg_flag_text", "EINVAL"),
        ("reg_bad_command", "EINVAL"),
        ("reg_bit32", "EINVAL"),
        ("reg_size2", "EINVAL"),
        ("reg_misaligned", "EINVAL"),
        ("reg_flags4", "EINVAL"),
        ("reg_bad_name_ptr", "EFAULT"),
        ("reg_kernel_addr", "EFAULT"),
        ("reg_bad_struct_ptr", "EFAULT"),
        ("reg_too_long", "EINVAL"),
        ("reg_tail_nonzero", "E2BIG"),
        ("reg_tail_zero", "OK index=2"),
        ("reg_size8", "EINVAL"),
        ("reg_size26", "EINVAL"),
        ("reg_size5000", "E2BIG"),
        ("bad_cmd", "ENOTTY"),
        // Delete and unregister.
        ("del_busy", "EBUSY"),
        ("del_missing", "ENOENT"),
        ("unreg", "OK word=0x0"),
        ("unreg_again", "ENOENT"),
        ("unreg_reserved", "EINVAL"),
        ("unreg_size8", "EINVAL"),
        ("word_after_unreg", "0x0"),
        // Unreferenced after close: deleted (the kernel may also say EBUSY
        // or ENOENT here, depending on its work queue).
        ("del_after_close", "OK"),
        // ue_x still has this process's enable bit.
        ("del_x", "EBUSY"),
    ] {
        e(k, v);
    }
    // Fields in trace, 6.4+ style; nothing from the disabled write.
    let trace = std::fs::read_to_string(m.path("tracing/trace")).unwrap();
    assert!(
        trace.contains(": ue_new: count=0x1 (1) msg=hello s=dyn\n"),
        "{trace}"
    );
    assert!(
        trace.contains(": ue_new: count=0xffffffff (-1) msg= s=\n"),
        "{trace}"
    );
    assert!(
        trace.contains(": ue_new: count=0x3 (3) msg=via set_event s=\n"),
        "{trace}"
    );
    assert!(!trace.contains("msg=disabled"), "{trace}");
    let line = trace.lines().find(|l| l.contains("count=0x1 (1)")).unwrap();
    assert!(line.trim_start().starts_with("user_events_too-"), "{line}");
    // The event went with the process; the tree follows.
    wait_for("ue_x and ue_new2 to go", || user_events_dirs(&m).is_empty());
    let avail = std::fs::read_to_string(m.path("tracing/available_events")).unwrap();
    assert!(!avail.contains("user_events:"), "{avail}");
}

/// The trace names the process that wrote an event, not the one that
/// registered it: a forked child writing through the inherited fd shows as
/// itself, as `current` does in the kernel.
#[test]
fn writes_are_attributed_to_the_writing_process() {
    let m = Mount::default_config();
    let (r, text) = run_tool(&m, &["fork-write"]);
    let e = |k: &str, v: &str| expect(&r, &text, k, v);
    e("reg", "OK");
    e("enable", "0");
    e("bit", "yes");
    e("child_write", "OK");
    e("parent_write", "OK");
    let trace = std::fs::read_to_string(m.path("tracing/trace")).unwrap();
    for (pid_key, count) in [("child_pid", "0x2 (2)"), ("parent_pid", "0x1 (1)")] {
        let pid = &r[pid_key];
        let line = trace
            .lines()
            .find(|l| l.contains(&format!(": ue_fork: count={count}")))
            .unwrap_or_else(|| panic!("no count={count} in\n{trace}"));
        let task = line.split_whitespace().next().unwrap();
        assert!(
            task.ends_with(&format!("-{pid}")),
            "{pid_key} {pid}: {line}"
        );
    }
}

#[test]
fn old_abi_status_page() {
    let m = Mount::default_config();
    let (r, text) = run_tool(&m, &["old"]);
    let e = |k: &str, v: &str| expect(&r, &text, k, v);
    e("mmap", "OK");
    e("reg", "OK size=20 bit=1 index=0");
    e("reg518", "OK size=24 byte=1 index=1");
    e("reg_same_name", "OK bit=1 index=0");
    e("page_before", "0");
    e("page_bit_on", "yes");
    e("write", "8 OK");
    e("page_bit_off", "yes");
    // ≤6.3: a write while disabled succeeds and records nothing.
    e("write_disabled", "8 OK");
    e("page_byte_on", "yes value=1");
    e("page_byte_off", "yes");
    e("reg_size19", "EINVAL");
    e("reg_long", "EINVAL");
    e("del_busy", "EBUSY");
    e("del", "OK");
    e("del518", "OK");
    e("page_after_del", "0");
    assert!(
        text.contains(
            "\nstatus=1:ue_old # Used by ftrace\nstatus=1:ue_518\nstatus=Active: 2\nstatus=Busy: 1\nstatus=Max: 32768\n"
        ),
        "{text}"
    );
    assert!(
        text.contains("\nstatus_end=Active: 0\nstatus_end=Busy: 0\n"),
        "{text}"
    );
    let trace = std::fs::read_to_string(m.path("tracing/trace")).unwrap();
    assert!(trace.contains(": ue_old: count=0x2a (42)\n"), "{trace}");
    assert!(!trace.contains("(43)"), "{trace}");
    // How fast the bit flips is measured by scripts/bench-user-events, not
    // asserted here: a test must not depend on timing.
}

/// A deleted event's directory (and its system's, with the last event) leaves
/// the kernel's dentry cache at once (FUSE_NOTIFY_INVAL_ENTRY), so an event
/// created again under the same name is reachable straight away, as on Linux;
/// without the
/// notification the stale entry would give ENOENT for a second.
#[test]
fn deleted_and_recreated_event_is_reachable_at_once() {
    if common::root_only() {
        return;
    }
    let m = Mount::default_config();
    for round in 0..3 {
        m.sh_ok("echo 'u:again u32 a' >> tracing/dynamic_events");
        m.sh_ok("cat tracing/events/user_events/again/id");
        m.sh_ok("echo 1 > tracing/events/user_events/again/enable");
        assert_eq!(
            m.sh_ok("cat tracing/events/user_events/again/enable"),
            "1\n",
            "round {round}"
        );
        m.sh_ok("echo 0 > tracing/events/user_events/again/enable");
        m.sh_ok("echo '-:again u32 a' >> tracing/dynamic_events");
        let o = m.sh("cat tracing/events/user_events/again/id");
        assert!(
            !o.status.success(),
            "round {round}: deleted but still there"
        );
        // Its system went with its last event, as in the kernel.
        let events = m.sh_ok("ls tracing/events");
        assert!(!events.contains("user_events"), "round {round}: {events}");
    }
}

/// Event names are not reserved, as in the kernel (no name check in
/// trace_events_user.c; measured on Linux 6.18 with uprobe events called
/// `enable` and `filter`): the event's directory is listed beside the
/// system's file of the same name, lookups find the directory, and the file
/// is back once the event is deleted.
#[test]
fn events_named_like_system_files_shadow_them_until_deleted() {
    if common::root_only() {
        return;
    }
    let m = Mount::default_config();
    m.sh_ok("echo 'u:enable u32 a' >> tracing/dynamic_events");
    m.sh_ok("echo 'u:other u32 a' >> tracing/dynamic_events");
    let ls = m.sh_ok("ls -1 tracing/events/user_events");
    assert_eq!(ls, "enable\nenable\nfilter\nother\n");
    assert_eq!(
        m.sh_ok("stat -c %F tracing/events/user_events/enable"),
        "directory\n"
    );
    let id = m.sh_ok("cat tracing/events/user_events/enable/id");
    assert!(id.trim().parse::<u32>().is_ok(), "{id}");
    m.sh_ok("echo '-:enable u32 a' >> tracing/dynamic_events");
    assert_eq!(
        m.sh_ok("stat -c %F tracing/events/user_events/enable"),
        "regular empty file\n"
    );
    assert_eq!(m.sh_ok("cat tracing/events/user_events/enable"), "0\n");
    m.sh_ok("echo 1 > tracing/events/user_events/enable");
    assert_eq!(
        m.sh_ok("cat tracing/events/user_events/other/enable"),
        "1\n"
    );
    m.sh_ok("echo 0 > tracing/events/user_events/enable");
    let ls = m.sh_ok("ls -1 tracing/events/user_events");
    assert_eq!(ls, "enable\nfilter\nother\n");
}

#[test]
fn dynamic_events_and_events_tree() {
    if common::root_only() {
        return;
    }
    let m = Mount::default_config();
    m.sh_ok("echo 'u:dyn_ev u32 a; char[8] b; struct foo c 12' >> tracing/dynamic_events");
    assert_eq!(
        m.sh_ok("cat tracing/dynamic_events"),
        "u:dyn_ev u32 a; char[8] b; struct foo c 12\n"
    );
    assert_eq!(
        m.sh_ok("head -1 tracing/available_events"),
        "user_events:dyn_ev\n"
    );
    let id = m.sh_ok("cat tracing/events/user_events/dyn_ev/id");
    let fmt = m.sh_ok("cat tracing/events/user_events/dyn_ev/format");
    assert_eq!(
        fmt,
        format!(
            "name: dyn_ev\nID: {}\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:u32 a;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char b[];\toffset:12;\tsize:8;\tsigned:1;\n\
\tfield:struct foo c;\toffset:20;\tsize:12;\tsigned:1;\n\
\n\
print fmt: \"a=%u b=%s c=%llu\", REC->a, REC->b, REC->c\n",
            id.trim()
        )
    );
    assert_eq!(
        m.sh_ok(
            "cat tracing/events/user_events/dyn_ev/enable tracing/events/user_events/dyn_ev/filter"
        ),
        "0\nnone\n"
    );
    // Identical again: fine. Other fields, long, flags, bad grammar: errors.
    m.sh_ok("echo 'u:dyn_ev u32 a;char[8] b; struct foo c 12' >> tracing/dynamic_events");
    for bad in [
        "u:dyn_ev u64 a",
        "u:x long y",
        "u:x:f u32 a",
        "u:x u32  a",
        "p:foo bar",
        "-x",
    ] {
        let o = m.sh(&format!("echo '{bad}' >> tracing/dynamic_events"));
        assert!(!o.status.success(), "{bad} was accepted");
    }
    // `-:name` needs the fields (6.4+): ENOENT without them.
    assert!(!m
        .sh("echo '-:dyn_ev' >> tracing/dynamic_events")
        .status
        .success());
    // Busy while a tracer is attached.
    m.sh_ok("echo 1 > tracing/events/user_events/dyn_ev/enable");
    let o = m.sh("echo '-:dyn_ev u32 a; char[8] b; struct foo c 12' >> tracing/dynamic_events");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("busy"), "{o:?}");
    m.sh_ok("echo 0 > tracing/events/user_events/dyn_ev/enable");
    m.sh_ok(
        "echo '-:user_events/dyn_ev u32 a; char[8] b; struct foo c 12' >> tracing/dynamic_events",
    );
    assert_eq!(m.sh_ok("cat tracing/dynamic_events"), "");
    assert_eq!(user_events_dirs(&m), Vec::<String>::new());

    // A producer holding an event: O_TRUNC refuses to clear everything.
    let bin = compile_c("user_events_tool", m.dir.path());
    let mut hold = Command::new(&bin)
        .arg(m.path("tracing"))
        .args([
            "hold",
            "held_ev u32 count; char[20] msg; __data_loc char[] s",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("held_ev", || {
        m.path("tracing/events/user_events/held_ev/enable").exists()
    });
    m.sh_ok("echo 'u:other u8 x' >> tracing/dynamic_events");
    let o = m.sh("echo > tracing/dynamic_events");
    assert!(!o.status.success(), "O_TRUNC with a busy event succeeded");
    assert_eq!(
        m.sh_ok("cat tracing/dynamic_events"),
        "u:held_ev u32 count; char[20] msg; __data_loc char[] s\nu:other u8 x\n"
    );
    // The producer writes while enabled; its events reach trace_pipe.
    m.sh_ok("echo user_events:held_ev >> tracing/set_event");
    let pipe = m.sh_ok("timeout 30 head -1 tracing/trace_pipe");
    assert!(
        pipe.contains(": held_ev: count=0x7 (7) msg=held s=x\n"),
        "{pipe}"
    );
    m.sh_ok("echo '!user_events:held_ev' >> tracing/set_event");
    // The producer dies: its event goes (it was not persistent), the
    // persistent one stays.
    hold.kill().unwrap();
    hold.wait().unwrap();
    wait_for("held_ev to go", || user_events_dirs(&m) == ["other"]);
    assert_eq!(m.sh_ok("cat tracing/dynamic_events"), "u:other u8 x\n");
    m.sh_ok("echo > tracing/dynamic_events");
    assert_eq!(m.sh_ok("cat tracing/dynamic_events"), "");
}

#[test]
fn names_and_strings_that_are_not_utf8_keep_their_bytes() {
    use std::os::unix::ffi::OsStrExt;
    if common::root_only() {
        return;
    }
    let m = Mount::default_config();
    let out = |cmd: &str| {
        let o = m.sh(cmd);
        assert!(o.status.success(), "{cmd}: {o:?}");
        o.stdout
    };
    // 0xE9 alone is not UTF-8; the kernel takes it in a name like any byte.
    out(r"printf 'u:ev\351 u32 a\377\n' >> tracing/dynamic_events");
    // A name in valid UTF-8 (U+F7E9) is another event.
    out(r"printf 'u:ev\357\237\251 u32 a\n' >> tracing/dynamic_events");
    assert_eq!(
        out("cat tracing/dynamic_events"),
        b"u:ev\xe9 u32 a\xff\nu:ev\xef\x9f\xa9 u32 a\n"
    );
    let avail = out("cat tracing/available_events");
    for name in [
        &b"user_events:ev\xe9\n"[..],
        b"user_events:ev\xef\x9f\xa9\n",
    ] {
        assert!(avail.windows(name.len()).any(|w| w == name), "{avail:?}");
    }
    // The directory by its bytes: readdir and lookup.
    let dir = m.path("tracing/events/user_events");
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .filter(|n| n.starts_with(b"ev"))
        .collect();
    names.sort();
    assert_eq!(names, [&b"ev\xe9"[..], b"ev\xef\x9f\xa9"]);
    let ev = dir.join(std::ffi::OsStr::from_bytes(b"ev\xe9"));
    let fmt = std::fs::read(ev.join("format")).unwrap();
    assert!(fmt.starts_with(b"name: ev\xe9\nID: "), "{fmt:?}");
    let needle = b"\tfield:u32 a\xff;";
    assert!(fmt.windows(needle.len()).any(|w| w == needle), "{fmt:?}");
    // set_event by those bytes enables that event and no other.
    out(r"printf 'user_events:ev\351' >> tracing/set_event");
    assert_eq!(std::fs::read(ev.join("enable")).unwrap(), b"1\n");
    assert_eq!(out("cat tracing/set_event"), b"user_events:ev\xe9\n");
    out("echo > tracing/set_event");
    // A string that is not UTF-8 is traced as its bytes.
    out(r"printf 'mark\377\n' > tracing/trace_marker");
    let trace = out("cat tracing/trace");
    assert!(
        trace.ends_with(b"tracing_mark_write: mark\xff\n"),
        "{:?}",
        String::from_utf8_lossy(&trace)
    );
    // Deleted by its bytes.
    out(r"printf -- '-:ev\351 u32 a\377' >> tracing/dynamic_events");
    assert_eq!(
        out("cat tracing/dynamic_events"),
        b"u:ev\xef\x9f\xa9 u32 a\n"
    );
    assert!(!ev.exists());
}

#[test]
fn example_producers_skip_writes_while_disabled() {
    let m = Mount::default_config();
    let tracing = m.path("tracing");
    for (name, event) in [
        ("user_events_producer", "example_counter"),
        ("user_events_producer_old", "example_old"),
    ] {
        let bin = compile_c(name, m.dir.path());
        // Disabled throughout: no write at all.
        let out = Command::new(&bin)
            .arg(&tracing)
            .args(["5", "1"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name}: {text}");
        assert!(text.contains("writes=0 skipped=5"), "{name}: {text}");
        // Enabled while it runs.
        let mut child = Command::new(&bin)
            .arg(&tracing)
            .args(["0", "20"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let enable = m.path(&format!("tracing/events/user_events/{event}/enable"));
        wait_for(event, || enable.exists());
        std::fs::write(&enable, "1").unwrap();
        wait_for("an event in trace", || {
            std::fs::read_to_string(m.path("tracing/trace"))
                .unwrap()
                .contains(&format!(": {event}: count="))
        });
        std::fs::write(&enable, "0").unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        let trace = std::fs::read_to_string(m.path("tracing/trace")).unwrap();
        assert!(trace.contains(" tag=example"), "{trace}");
    }
}

#[test]
fn tracepoint_crate_through_trace_ns() {
    if common::root_only() {
        return;
    }
    let m = Mount::default_config();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = m.dir.path().join("tp-target");
    let o = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "--manifest-path"])
        .arg(root.join("examples/tracepoint-producer/Cargo.toml"))
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .expect("cargo build tracepoint-producer");
    assert!(
        o.status.success(),
        "building examples/tracepoint-producer: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bin = target.join("release/tracepoint-producer");
    // Producer in the namespace where /sys/kernel/tracing is monfs; we
    // enable its event from outside once it registered.
    let mut child = Command::new(root.join("scripts/trace-ns"))
        .env("MONFS_BIN", common::monfs_bin())
        .arg(m.root())
        .arg("--")
        .arg(&bin)
        .args(["0", "20"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let enable = m.path("tracing/events/user_events/tp_rust/enable");
    wait_for("tp_rust", || enable.exists());
    std::fs::write(&enable, "1").unwrap();
    wait_for("tp_rust events in trace", || {
        std::fs::read_to_string(m.path("tracing/trace"))
            .unwrap()
            .contains(" tag=tp-rust")
    });
    std::fs::write(&enable, "0").unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let trace = std::fs::read_to_string(m.path("tracing/trace")).unwrap();
    let line = trace.lines().find(|l| l.contains("tp_rust:")).unwrap();
    assert!(line.contains(": tp_rust: count=0x"), "{line}");
}

/// A producer's writes are recorded on the CPU it wrote on, as the kernel
/// records them in the writer's context, though the daemon's request
/// threads are kept on CPU 0 (`--cpus 0`).
#[test]
fn writes_are_recorded_on_the_producers_cpu() {
    let m = Mount::start(None, &["--cpus", "0"]);
    let cpus: usize = m.sh_ok("nproc").trim().parse().unwrap();
    let k = cpus - 1;
    let bin = compile_c("user_events_producer", m.dir.path());
    let mut child = Command::new("taskset")
        .args(["-c", &k.to_string()])
        .arg(&bin)
        .arg(m.path("tracing"))
        .args(["0", "2"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let enable = m.path("tracing/events/user_events/example_counter/enable");
    wait_for("example_counter", || enable.exists());
    std::fs::write(&enable, "1").unwrap();
    wait_for("ten events", || {
        std::fs::read_to_string(m.path("tracing/trace"))
            .unwrap()
            .matches(": example_counter: count=")
            .count()
            >= 10
    });
    std::fs::write(&enable, "0").unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    for c in 0..cpus {
        let trace =
            std::fs::read_to_string(m.path(&format!("tracing/per_cpu/cpu{c}/trace"))).unwrap();
        let n = trace.matches(": example_counter: count=").count();
        if c == k {
            assert!(n >= 10, "cpu{c}:\n{trace}");
        } else {
            assert_eq!(
                n, 0,
                "events of the producer on CPU {k} in cpu{c}'s buffer:\n{trace}"
            );
        }
    }
}
