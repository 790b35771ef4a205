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

#[test]
fn onmatch_trace_generates_the_synthetic_event_and_onmax_saves() {
    let m = Mount::with_config(PAIR);
    let t = "cd tracing &&";
    m.sh_ok(&format!(
        "{t} echo 'lat u64 lat; pid_t pid; char comm[16]; char file[]' > synthetic_events"
    ));
    m.sh_ok(&format!(
        "{t} echo 'hist:keys=pid:ts0=common_timestamp.usecs' > events/app/start/trigger"
    ));
    m.sh_ok(&format!(
        "{t} echo 'hist:keys=pid:d=common_timestamp.usecs-$ts0:onmatch(app.start).trace(lat,$d,pid,comm,file):onmax($d).save(comm,file)' > events/app/stop/trigger"
    ));
    assert_eq!(
        m.sh_ok(&format!("{t} cat events/app/stop/trigger")),
        "hist:keys=pid:vals=hitcount:d=common_timestamp.usecs-$ts0:sort=hitcount:size=2048:clock=global\
         :onmatch(app.start).trace(lat,$d,pid,comm,file):onmax($d).save(comm,file) [active]\n"
    );
    m.sh_ok(&format!(
        "{t} echo 'hist:keys=comm,pid:vals=lat' > events/synthetic/lat/trigger && echo 1 > events/synthetic/lat/enable"
    ));
    // A stop without a start for its pid: no variable, no event.
    m.sh_ok(&format!(
        "{t} echo 'pid=9 comm=\"early\" file=\"/x\"' > events/app/stop/inject"
    ));
    m.sh_ok(&format!(
        "{t} echo 'pid=7 prio=1 comm=\"a\"' > events/app/start/inject; sleep 0.01; \
         echo 'pid=7 comm=\"worker\" file=\"/bin/w\"' > events/app/stop/inject"
    ));
    let trace = m.sh_ok(&format!("{t} cat trace"));
    let lines: Vec<&str> = trace.lines().filter(|l| l.contains(" lat: ")).collect();
    assert_eq!(lines.len(), 1, "{trace}");
    let l = lines[0];
    let lat: u64 = l
        .split("lat=")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!((10_000..1_000_000).contains(&lat), "{l}");
    assert!(l.ends_with(" pid=7 comm=worker file=/bin/w"), "{l}");
    let hist = m.sh_ok(&format!("{t} cat events/synthetic/lat/hist"));
    assert!(hist.contains("{ comm: worker"), "{hist}");
    let hist = m.sh_ok(&format!("{t} cat events/app/stop/hist"));
    assert!(hist.contains("\n\tmax: "), "{hist}");
    assert!(hist.contains("  comm: worker"), "{hist}");
    assert!(hist.contains("  file: /bin/w"), "{hist}");
    // A start hist read once: a second stop finds no ts0 and fires nothing.
    m.sh_ok(&format!(
        "{t} echo 'pid=7 comm=\"worker\" file=\"/bin/w\"' > events/app/stop/inject"
    ));
    let trace = m.sh_ok(&format!("{t} cat trace"));
    assert_eq!(trace.lines().filter(|l| l.contains(" lat: ")).count(), 1);
    // In use: the synthetic event and the start hist (referenced) stay.
    m.sh_ok(&format!("{t} echo 0 > events/synthetic/lat/enable"));
    assert!(!m
        .sh(&format!("{t} echo '!lat' >> synthetic_events"))
        .status
        .success());
    assert!(!m
        .sh(&format!(
            "{t} echo '!hist:keys=pid:ts0=common_timestamp.usecs' >> events/app/start/trigger"
        ))
        .status
        .success());
}

#[test]
fn onchange_and_expression_errors() {
    let m = Mount::with_config(PAIR);
    let t = "cd tracing &&";
    m.sh_ok(&format!(
        "{t} echo 'hist:keys=comm:p=prio:onchange($p).save(pid,prio)' > events/app/start/trigger"
    ));
    for prio in [3, 3, 5] {
        m.sh_ok(&format!(
            "{t} echo 'pid=4 prio={prio} comm=\"c\"' > events/app/start/inject"
        ));
    }
    let hist = m.sh_ok(&format!("{t} cat events/app/start/hist"));
    assert!(
        hist.contains("\n\tchanged:          5  pid:          4  prio:          5\n"),
        "{hist}"
    );
    assert!(!m
        .sh(&format!(
            "{t} echo 'hist:keys=pid:x=3/0' >> events/app/start/trigger"
        ))
        .status
        .success());
    let log = m.sh_ok(&format!("{t} cat error_log"));
    assert!(
        log.ends_with("hist:app:start: error: Division by zero\n  Command: hist:keys=pid:x=3/0\n                             ^\n"),
        "{log}"
    );
}

/// Marker triggers see the text as written (no newline added yet), so
/// `buf` filters match it, and `onmatch(ftrace.print)` pairs two markers
/// of one task into a synthetic event.
#[test]
fn marker_filters_and_onmatch_of_ftrace_print() {
    let m = Mount::default_config();
    let t = "cd tracing &&";
    m.sh_ok(&format!(
        "{t} echo 'traceoff if buf == \"stop\"' > events/ftrace/print/trigger && echo -n go > trace_marker"
    ));
    assert_eq!(m.sh_ok(&format!("{t} cat tracing_on")), "1\n");
    m.sh_ok(&format!("{t} echo -n stop > trace_marker"));
    assert_eq!(m.sh_ok(&format!("{t} cat tracing_on")), "0\n");
    m.sh_ok(&format!(
        "{t} echo '!traceoff' > events/ftrace/print/trigger && echo 1 > tracing_on && \
         echo 'latency u64 lat' > synthetic_events && \
         echo 'hist:keys=common_pid:ts0=common_timestamp.usecs if buf == \"start\"' > events/ftrace/print/trigger && \
         echo 'hist:keys=common_pid:lat=common_timestamp.usecs-$ts0:onmatch(ftrace.print).latency($lat) if buf == \"end\"' >> events/ftrace/print/trigger && \
         echo 'hist:keys=common_pid,lat:sort=lat' > events/synthetic/latency/trigger && \
         echo -n start > trace_marker && echo -n end > trace_marker"
    ));
    let print = m.sh_ok(&format!("{t} cat events/ftrace/print/hist"));
    assert_eq!(
        print.matches("hitcount:          1\n").count(),
        2,
        "{print}"
    );
    let lat = m.sh_ok(&format!("{t} cat events/synthetic/latency/hist"));
    assert!(lat.contains("hitcount:          1\n"), "{lat}");
}

/// The `entries-in-buffer/entries-written` line of `trace` in `dir`.
fn entries(m: &Mount, dir: &str) -> String {
    m.sh_ok(&format!("grep entries-in tracing/{dir}/trace"))
}

/// Removing a dynamic event clears the buffers of each array where it was
/// ever enabled (enabled and disabled again counts), and only those, as
/// measured on 6.18 with a uprobe: `-:` in `dynamic_events` emptied the
/// instance's `trace` (0/0), another instance kept its entries, and an
/// event never enabled cleared nothing. A `!name` line of
/// `synthetic_events` only marks the array (the kernel's
/// `synth_event_delete` does not reset): the next `dynamic_events`
/// removal, even of nothing, clears it.
#[test]
fn removing_a_once_enabled_dynamic_event_clears_that_arrays_buffers() {
    let m = Mount::default_config();
    m.sh_ok(
        "cd tracing && mkdir instances/a instances/b && \
         echo 's:synthetic/gone u64 x' >> dynamic_events && \
         echo 'never u64 x' >> synthetic_events && \
         echo 1 > instances/a/events/synthetic/gone/enable && \
         echo 0 > instances/a/events/synthetic/gone/enable && \
         for d in . instances/a instances/b; do echo hi > $d/trace_marker; done",
    );
    let one = "# entries-in-buffer/entries-written: 1/1   #P:";
    let zero = "# entries-in-buffer/entries-written: 0/0   #P:";
    for d in [".", "instances/a", "instances/b"] {
        assert!(entries(&m, d).starts_with(one), "{d}");
    }
    // Never enabled anywhere: nothing is cleared.
    m.sh_ok("echo '-:synthetic/never' >> tracing/dynamic_events");
    assert!(entries(&m, "instances/a").starts_with(one));
    m.sh_ok("echo '-:synthetic/gone' >> tracing/dynamic_events");
    assert!(entries(&m, "instances/a").starts_with(zero));
    assert_eq!(
        m.sh_ok("grep -vc '^#' tracing/instances/a/trace || true"),
        "0\n"
    );
    assert!(entries(&m, ".").starts_with(one));
    assert!(entries(&m, "instances/b").starts_with(one));

    // Through `synthetic_events`: marked, cleared at the next removal.
    m.sh_ok(
        "cd tracing && echo 'later u64 x' >> synthetic_events && \
         echo 'synthetic:later' > instances/b/set_event && echo > instances/b/set_event && \
         echo '!later' >> synthetic_events",
    );
    assert!(entries(&m, "instances/b").starts_with(one));
    assert!(!m
        .sh("echo '-:synthetic/nothing' >> tracing/dynamic_events")
        .status
        .success());
    assert!(entries(&m, "instances/b").starts_with(zero));
    assert!(entries(&m, ".").starts_with(one));
}
