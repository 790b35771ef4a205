//! Event probes (`e:` lines in `dynamic_events`) through the real mount:
//! creation and the `events/<group>/<name>/` directory, the `format` file,
//! recording from the attached event's records in the arrays where the
//! probe is enabled (top level and instances), filters, busy removal, the
//! removal forms ftracetest's add_remove_eprobe.tc uses, parse errors in
//! `error_log`, and kprobe/uprobe lines refused as a kernel without them
//! refuses them.

mod common;

use common::Mount;

/// An event to inject, with a number and a string.
const CONFIG: &str = r#"
tracing:
  events:
    - system: app
      name: open
      fields:
        - {name: dfd, type: long}
        - {name: name, type: "__data_loc char[]"}
      format: '"dfd=%ld name=%s", REC->dfd, __get_str(name)'
"#;

fn inject(dir: &str, dfd: i32, name: &str) -> String {
    format!("echo 'dfd={dfd} name=\"{name}\"' > {dir}/events/app/open/inject; ")
}

#[test]
fn an_event_probe_records_from_its_attached_event() {
    let m = Mount::with_config(CONFIG);
    let sh = |s: &str| m.sh_ok(&format!("cd tracing && {s}"));
    sh("echo 'e:etest/op app.open d=$dfd:s32 n=$name:string f=+0($name):ustring' >> dynamic_events");
    assert_eq!(
        sh("cat dynamic_events"),
        "e:etest/op app.open d=$dfd:s32 n=$name:string f=+0($name):ustring\n"
    );
    let id = sh("cat events/etest/op/id");
    assert_eq!(
        sh("cat events/etest/op/format"),
        format!(
            "name: op\nID: {}format:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:s32 d;\toffset:8;\tsize:4;\tsigned:1;\n\
\tfield:__data_loc char[] n;\toffset:12;\tsize:4;\tsigned:0;\n\
\tfield:__data_loc char[] f;\toffset:16;\tsize:4;\tsigned:0;\n\n\
print fmt: \" d=%d n=\\\"%s\\\" f=\\\"%s\\\"\", REC->d, __get_str(n), __get_str(f)\n",
            id
        )
    );
    // Enabled, it records from every record of app:open, which is not
    // recorded itself (the probe keeps it on in soft mode).
    sh("echo 1 > events/etest/op/enable");
    assert_eq!(sh("cat events/app/open/enable"), "0*\n");
    sh(&inject(".", -3, "/etc/x"));
    let trace = sh("cat trace");
    let lines: Vec<&str> = trace.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 1, "{trace}");
    assert!(
        lines[0].ends_with(" op: (app.open) d=-3 n=\"/etc/x\" f=(fault)"),
        "{trace}"
    );
    // With the attached event enabled too, its record comes first.
    sh(&format!(
        "echo > trace; echo 1 > events/app/open/enable; {}",
        inject(".", 4, "y")
    ));
    let trace = sh("cat trace");
    let lines: Vec<&str> = trace.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 2, "{trace}");
    assert!(lines[0].ends_with(" open: dfd=4 name=y"), "{trace}");
    assert!(
        lines[1].ends_with(" op: (app.open) d=4 n=\"y\" f=(fault)"),
        "{trace}"
    );
    // In use, the probe and its attached event stay.
    let o = m.sh("cd tracing && echo '-:etest/op' >> dynamic_events");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("busy"), "{o:?}");
    sh("echo 0 > events/etest/op/enable; echo 0 > events/app/open/enable");
    assert_eq!(sh("cat events/app/open/enable"), "0\n");
    sh("echo '-:etest/op' >> dynamic_events");
    assert_eq!(sh("cat dynamic_events"), "");
    assert_eq!(
        sh("test -e events/etest && echo there || echo gone"),
        "gone\n"
    );
}

#[test]
fn probes_follow_their_arrays_and_filters() {
    let m = Mount::with_config(CONFIG);
    let sh = |s: &str| m.sh_ok(&format!("cd tracing && {s}"));
    sh("mkdir instances/i1");
    sh("echo 'e app.open d=$dfd if dfd == 5' >> dynamic_events");
    // Named after the attached event, in group `eprobes`.
    assert_eq!(sh("cat dynamic_events"), "e:eprobes/open app.open d=$dfd\n");
    sh("echo 1 > instances/i1/events/eprobes/open/enable");
    sh(&format!(
        "{}{}",
        inject("instances/i1", 5, "a"),
        inject("instances/i1", 6, "b")
    ));
    sh(&inject(".", 5, "top"));
    let i1 = sh("cat instances/i1/trace");
    let hits: Vec<&str> = i1
        .lines()
        .filter(|l| l.contains(" open: (app.open)"))
        .collect();
    assert_eq!(hits.len(), 1, "{i1}");
    assert!(hits[0].ends_with("d=0x5"), "{i1}");
    assert!(!sh("cat trace").contains("(app.open)"));
    // Removing the instance detaches the probe.
    sh("rmdir instances/i1");
    assert_eq!(sh("cat events/app/open/enable"), "0\n");
    sh("echo '-:eprobes/open app.open d=$dfd' >> dynamic_events");
    assert_eq!(sh("cat dynamic_events"), "");
}

#[test]
fn removal_forms_and_truncation() {
    let m = Mount::with_config(CONFIG);
    let sh = |s: &str| m.sh_ok(&format!("cd tracing && {s}"));
    let add = "echo 'e:ep app/open f=+0($name):ustring' >> dynamic_events";
    for del in [
        "-:ep",
        "-:eprobes/ep",
        "-:eprobes/ep app/open",
        "-:ep app/open",
        "-:ep app/open f=+0($name):ustring",
        "-:eprobes/ep app.open f=+0($name):ustring",
    ] {
        sh(add);
        assert!(sh("cat dynamic_events").contains("e:eprobes/ep app.open"));
        sh(&format!("echo '{del}' >> dynamic_events"));
        assert_eq!(sh("cat dynamic_events"), "", "{del}");
        assert_eq!(sh("test -d events/eprobes/ep && echo y || echo n"), "n\n");
    }
    // Not matching: ENOENT.
    sh(add);
    assert!(!m
        .sh("cd tracing && echo '-:ep app/open f=$dfd' >> dynamic_events")
        .status
        .success());
    // A group of its own, named alone.
    sh("echo 'e:mygroup/ app.open' >> dynamic_events");
    assert_eq!(sh("test -d events/mygroup/open && echo y"), "y\n");
    sh("echo '-:mygroup/' >> dynamic_events");
    assert_eq!(sh("test -d events/mygroup && echo y || echo n"), "n\n");
    // The same name twice: EEXIST, logged.
    let o = m.sh("cd tracing && echo 'e:ep app/open' >> dynamic_events");
    assert!(!o.status.success());
    assert!(sh("cat error_log").contains("Given group/event name is already used by another event"));
    // O_TRUNC removes them all.
    sh("echo > dynamic_events");
    assert_eq!(sh("cat dynamic_events"), "");
}

#[test]
fn errors_are_logged_and_probes_of_the_kernel_refused() {
    let m = Mount::with_config(CONFIG);
    let sh = |s: &str| m.sh_ok(&format!("cd tracing && {s}"));
    let fails = |l: &str| {
        let o = m.sh(&format!("cd tracing && echo '{l}' >> dynamic_events"));
        assert!(!o.status.success(), "{l} accepted");
        String::from_utf8_lossy(&o.stderr).to_string()
    };
    sh("echo > error_log");
    fails("e:foo/bar app.open arg=$foo");
    let log = sh("cat error_log");
    // The caret under the `$` (ftracetest's eprobes_syntax_errors.tc).
    let caret = format!(
        "{}^",
        " ".repeat("  Command: e:foo/bar app.open arg=".len())
    );
    assert!(
        log.contains(&format!(
            "event_probe: error: Invalid $-variable specified\n  Command: e:foo/bar app.open arg=$foo\n{caret}\n"
        )),
        "{log}"
    );
    // The attached event must exist: ENODEV.
    assert!(fails("e no.such").contains("No such device"));
    // A bad filter is logged as filter errors are.
    sh("echo > error_log");
    fails("e app.open if nosuch == 1");
    assert!(sh("cat error_log").contains("event filter parse error"));
    // kprobes, kretprobes, uprobes: a kernel without them takes none.
    sh("echo > error_log");
    for l in [
        "p:myprobe do_sys_open",
        "r:myret do_sys_open $retval",
        "p:u /bin/sh:0x10",
    ] {
        assert!(fails(l).contains("Invalid argument"));
    }
    assert_eq!(sh("cat error_log"), "");
    assert_eq!(sh("cat dynamic_events"), "");
}
