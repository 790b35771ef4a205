//! Synthetic events and inter-event hist triggers through the real mount:
//! `synthetic_events`, `s:` lines in `dynamic_events`, the
//! `events/synthetic/<name>/` directories, hist variables and expressions,
//! and the `onmatch()`/`onmax()`/`onchange()` actions, driven by injected
//! events of a configured event pair.

mod common;

use common::Mount;

/// Two configured events keyed by a pid, to inject known values into.
const PAIR: &str = r#"
tracing:
  events:
    - system: app
      name: start
      fields:
        - {name: pid, type: pid_t}
        - {name: prio, type: int}
        - {name: comm, type: "char[16]"}
      format: '"pid=%d prio=%d comm=%s", REC->pid, REC->prio, REC->comm'
    - system: app
      name: stop
      fields:
        - {name: pid, type: pid_t}
        - {name: comm, type: "char[16]"}
        - {name: file, type: "__data_loc char[]"}
      format: '"pid=%d comm=%s file=%s", REC->pid, REC->comm, __get_str(file)'
"#;

#[test]
fn synthetic_events_file_dynamic_events_and_directories() {
    let m = Mount::with_config(PAIR);
    let t = "cd tracing &&";
    m.sh_ok(&format!(
        "{t} echo 'lat u64 lat; pid_t pid; char comm[16]' > synthetic_events"
    ));
    assert_eq!(
        m.sh_ok(&format!("{t} cat synthetic_events")),
        "lat\tu64 lat; pid_t pid; char[16] comm\n"
    );
    m.sh_ok(&format!(
        "{t} echo 's:synthetic/dyn char[] file; unsigned long[] stack' >> dynamic_events"
    ));
    assert_eq!(
        m.sh_ok(&format!("{t} cat dynamic_events")),
        "s:synthetic/lat\tu64 lat; pid_t pid; char[16] comm\n\
         s:synthetic/dyn\tchar[] file; unsigned long[] stack\n"
    );
    let fmt = m.sh_ok(&format!("{t} cat events/synthetic/lat/format"));
    assert!(
        fmt.contains(
            "\tfield:u64 lat;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:pid_t pid;\toffset:16;\tsize:4;\tsigned:1;\n\
             \tfield:char comm[16];\toffset:24;\tsize:16;\tsigned:1;\n"
        ),
        "{fmt}"
    );
    assert!(fmt
        .ends_with("print fmt: \"lat=%llu, pid=%d, comm=%.*s\", REC->lat, REC->pid, REC->comm\n"));
    let fmt = m.sh_ok(&format!("{t} cat events/synthetic/dyn/format"));
    assert!(
        fmt.contains("\tfield:__data_loc char[] file;\toffset:8;\tsize:8;\tsigned:1;\n"),
        "{fmt}"
    );
    for f in ["enable", "filter", "format", "id", "trigger", "hist"] {
        assert!(m
            .path(&format!("tracing/events/synthetic/lat/{f}"))
            .exists());
    }
    // The same name twice, and an error with its caret in error_log.
    assert!(!m
        .sh(&format!("{t} echo 'lat u64 x' >> synthetic_events"))
        .status
        .success());
    assert!(!m
        .sh(&format!("{t} echo 'bad chr x' >> synthetic_events"))
        .status
        .success());
    let log = m.sh_ok(&format!("{t} cat error_log"));
    assert!(
        log.ends_with(
            "synthetic_events: error: Invalid type\n  Command: bad chr x\n               ^\n"
        ),
        "{log}"
    );
    // In use (enabled): EBUSY; then removed by `!name` and `-:`.
    m.sh_ok(&format!("{t} echo 1 > events/synthetic/lat/enable"));
    assert!(!m
        .sh(&format!("{t} echo '!lat' >> synthetic_events"))
        .status
        .success());
    m.sh_ok(&format!("{t} echo 0 > events/synthetic/lat/enable"));
    m.sh_ok(&format!("{t} echo '!lat' >> synthetic_events"));
    m.sh_ok(&format!("{t} echo '-:synthetic/dyn' >> dynamic_events"));
    assert_eq!(m.sh_ok(&format!("{t} cat synthetic_events")), "");
    assert!(!m.path("tracing/events/synthetic").exists());
}
