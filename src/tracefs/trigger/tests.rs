//! Trigger tests. The grammar, errno, `trigger` and `error_log` strings
//! below were measured on this machine's real tracefs (`uname -r`:
//! `6.18.44-fc-v669`) by writing the same commands to
//! `events/sched/sched_process_hang/trigger` (an event that does not fire,
//! so counts stay put) and `events/sched/sched_switch/trigger`. That kernel
//! has no `CONFIG_HIST_TRIGGERS` or `CONFIG_TRACER_SNAPSHOT`, so the hist
//! expectations follow the kernel's source and histogram.rst instead.

use std::collections::HashMap;
use std::sync::Mutex;

use super::*;
use crate::base::sync::LockExt;
use crate::tracefs::error_log::ERROR_LOG_MAX;
use crate::tracefs::events::{EventDef, FieldSpec, FieldValue};

#[derive(Clone, Debug, PartialEq, Eq)]
struct Ev(&'static str, &'static str);

impl TriggerEvent for Ev {
    fn system(&self) -> &str {
        self.0
    }
    fn name(&self) -> &str {
        self.1
    }
    fn same_event(&self, other: &Self) -> bool {
        self == other
    }
}

const EVENTS: &[(&str, &str)] = &[
    ("sched", "sched_switch"),
    ("sched", "sched_waking"),
    ("sched", "sched_wakeup"),
    ("sched", "sched_process_hang"),
];

/// The error_log timestamp every test entry gets (`[ 2732.155241]`).
const NOW: u64 = 2_732_155_241_000;

#[derive(Default)]
struct Host {
    log: ErrorLog,
    named: NamedHists,
    soft: Mutex<HashMap<&'static str, i32>>,
}

impl TriggerHost<Ev> for Host {
    fn find_event(&self, system: &str, name: &str) -> Option<Ev> {
        EVENTS
            .iter()
            .find(|e| e.0 == system && e.1 == name)
            .map(|e| Ev(e.0, e.1))
    }
    fn soft_mode(&self, target: &Ev, on: bool) {
        *self.soft.lock_ok().entry(target.1).or_default() += if on { 1 } else { -1 };
    }
    fn error_log(&self) -> &ErrorLog {
        &self.log
    }
    fn now_ns(&self) -> u64 {
        NOW
    }
    fn named_hists(&self) -> &NamedHists {
        &self.named
    }
    fn hold_snapshot(&self, on: bool) -> SysResult<()> {
        *self.soft.lock_ok().entry("(snapshot)").or_default() += if on { 1 } else { -1 };
        Ok(())
    }
    fn hists(&self) -> Vec<(String, String, std::sync::Arc<super::Hist>)> {
        Vec::new()
    }
    fn synth_def(&self, _name: &str) -> Option<std::sync::Arc<super::SynthDef>> {
        None
    }
    fn synth_ref(&self, _name: &str, _delta: isize) {}
}

impl Host {
    fn soft(&self, ev: &'static str) -> i32 {
        self.soft.lock_ok().get(ev).copied().unwrap_or(0)
    }
}

struct Cx {
    on: bool,
    enabled: bool,
}

/// Tracing on and the event enabled: how most tests fire.
const ON: Cx = Cx {
    on: true,
    enabled: true,
};

impl FireContext<Ev> for Cx {
    fn tracing_on(&self) -> bool {
        self.on
    }
    fn event_enabled(&self, _: &Ev) -> bool {
        self.enabled
    }
}

fn spec(t: &str, n: &str) -> FieldSpec {
    FieldSpec {
        name: n.into(),
        ctype: t.into(),
    }
}

fn sched_switch() -> EventDef {
    EventDef::new(
        "sched",
        "sched_switch",
        372,
        &[
            spec("char[16]", "prev_comm"),
            spec("pid_t", "prev_pid"),
            spec("int", "prev_prio"),
            spec("long", "prev_state"),
            spec("char[16]", "next_comm"),
            spec("pid_t", "next_pid"),
            spec("int", "next_prio"),
        ],
        None,
    )
    .unwrap()
}

fn process_hang() -> EventDef {
    EventDef::new(
        "sched",
        "sched_process_hang",
        300,
        &[spec("__data_loc char[]", "comm"), spec("pid_t", "pid")],
        None,
    )
    .unwrap()
}

fn errno_name(r: &SysResult<u32>) -> String {
    match r {
        Ok(n) => n.to_string(),
        Err(e) => match *e {
            Errno::EINVAL => "EINVAL".into(),
            Errno::EEXIST => "EEXIST".into(),
            Errno::ENOENT => "ENOENT".into(),
            Errno::EPERM => "EPERM".into(),
            Errno::ERANGE => "ERANGE".into(),
            e => format!("{e:?}"),
        },
    }
}

const HELP: &str = AVAILABLE_TRIGGERS;

/// (command, write result, `trigger` afterwards, `error_log` afterwards),
/// each on a fresh event; measured on events/sched/sched_process_hang.
const SINGLE: &[(&str, &str, &str, &str)] = &[
    ("", "0", HELP, ""),
    (" ", "EINVAL", HELP, ""),
    ("foo", "EINVAL", HELP, ""),
    ("traceon:", "8", "traceon:unlimited\n", ""),
    ("traceon:abc", "EINVAL", HELP, ""),
    ("traceon:0", "9", "traceon:count=0\n", ""),
    ("traceon:-1", "EINVAL", HELP, ""),
    ("traceon:3", "9", "traceon:count=3\n", ""),
    ("traceon if", "EINVAL", HELP, ""),
    ("traceon if ", "EINVAL", HELP, ""),
    (
        "traceon if comm",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Invalid operator\n  Command: comm\n                ^\n",
    ),
    (
        "traceon if nosuch == 1",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Field not found\n  Command: nosuch == 1\n                  ^\n",
    ),
    ("traceon foo", "EINVAL", HELP, ""),
    ("traceon:3 foo", "EINVAL", HELP, ""),
    ("traceon:3:4", "11", "traceon:count=3\n", ""),
    (" traceon", "8", "traceon:unlimited\n", ""),
    ("traceon\n", "8", "traceon:unlimited\n", ""),
    ("traceon\ntraceoff", "EINVAL", HELP, ""),
    ("TRACEON", "EINVAL", HELP, ""),
    ("traceon :3", "EINVAL", HELP, ""),
    ("traceon: 3", "10", "traceon:count=3\n", ""),
    ("traceon\t:3", "EINVAL", HELP, ""),
    ("traceon:3 if pid == 1", "21", "traceon:count=3 if pid == 1\n", ""),
    ("traceon   if   pid==1   ", "24", "traceon:unlimited if   pid==1\n", ""),
    (
        "stacktrace if pid == 1 && comm == \"x\"",
        "37",
        "stacktrace:unlimited if pid == 1 && comm == \"x\"\n",
        "",
    ),
    ("traceon:0x10", "12", "traceon:count=16\n", ""),
    ("traceon:010", "11", "traceon:count=8\n", ""),
    ("traceon:+3", "EINVAL", HELP, ""),
    ("traceon:99999999999999999999", "ERANGE", HELP, ""),
    (
        "traceon if pid ==",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Invalid value (did you forget quotes)?\n  Command: pid ==\n                  ^\n",
    ),
    (
        "traceon if pid == 1 )",
        "EPERM",
        HELP,
        "[ 2732.155241] event filter parse error: error: Too few '('\n  Command: pid == 1 )\n                    ^\n",
    ),
    (
        "traceon if (pid == 1",
        "ENOENT",
        HELP,
        "[ 2732.155241] event filter parse error: error: Too many '('\n  Command: (pid == 1\n           ^\n",
    ),
    (
        "traceon if ()",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Error\n  Command: ()\n           ^\n",
    ),
    (
        "traceon if pid == \"x\"",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Expecting numeric field\n  Command: pid == \"x\"\n                   ^\n",
    ),
    (
        "traceon if nosuch",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Field not found\n  Command: nosuch\n                  ^\n",
    ),
    (
        "traceon if !",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: No filter found\n  Command: !\n            ^\n",
    ),
    ("traceon:abc if nosuch == 1", "EINVAL", HELP, ""),
    ("enable_event", "EINVAL", HELP, ""),
    ("enable_event:", "EINVAL", HELP, ""),
    ("enable_event:sched", "EINVAL", HELP, ""),
    ("enable_event:sched:", "EINVAL", HELP, ""),
    ("enable_event:sched:nosuch", "EINVAL", HELP, ""),
    ("enable_event:nosys:sched_waking", "EINVAL", HELP, ""),
    (
        "enable_event:sched:sched_waking",
        "31",
        "enable_event:sched:sched_waking:unlimited\n",
        "",
    ),
    (
        "disable_event:sched:sched_waking:5",
        "34",
        "disable_event:sched:sched_waking:count=5\n",
        "",
    ),
    (
        "enable_event:sched:sched_waking:3:junk",
        "38",
        "enable_event:sched:sched_waking:count=3\n",
        "",
    ),
    ("enable_event:sched:sched_waking:abc", "EINVAL", HELP, ""),
    ("enable_event:sched:sched_waking junk", "EINVAL", HELP, ""),
    (
        "enable_event:sched:sched_waking if pid == 1",
        "43",
        "enable_event:sched:sched_waking:unlimited if pid == 1\n",
        "",
    ),
    (
        "enable_event:sched:sched_waking:2 if pid == 1",
        "45",
        "enable_event:sched:sched_waking:count=2 if pid == 1\n",
        "",
    ),
    (
        "enable_event: sched:sched_waking",
        "32",
        "enable_event:sched:sched_waking:unlimited\n",
        "",
    ),
    (
        "enable_event:sched:sched_process_hang",
        "37",
        "enable_event:sched:sched_process_hang:unlimited\n",
        "",
    ),
    ("enable_event:sched:sched_waking:", "EINVAL", HELP, ""),
    (
        "enable_event:sched:sched_waking:0",
        "33",
        "enable_event:sched:sched_waking:count=0\n",
        "",
    ),
    ("!enable_event", "EINVAL", HELP, ""),
    ("!enable_event:sched:nosuch", "EINVAL", HELP, ""),
    ("!enable_event:sched:sched_waking", "32", HELP, ""),
    ("enable_event:sched:*", "EINVAL", HELP, ""),
    ("enable_event:sched :sched_waking", "EINVAL", HELP, ""),
    (
        "enable_event:sched:sched_waking if nosuch == 1",
        "EINVAL",
        HELP,
        "[ 2732.155241] event filter parse error: error: Field not found\n  Command: nosuch == 1\n                  ^\n",
    ),
    ("enable_event:sched:sched_waking:1 foo", "EINVAL", HELP, ""),
    ("!", "EINVAL", HELP, ""),
    ("! traceon", "EINVAL", HELP, ""),
    ("!traceon", "8", HELP, ""),
];

#[test]
fn grammar_errnos_and_read_back_match_the_real_tracefs() {
    let def = process_hang();
    for (cmd, res, shown, log) in SINGLE {
        let host = Host::default();
        let t: Triggers<Ev> = Triggers::new();
        let r = t.write(cmd.as_bytes(), &def, &host);
        assert_eq!(errno_name(&r), *res, "{cmd:?}");
        assert_eq!(t.read_text(), *shown, "{cmd:?}");
        assert_eq!(host.log.text(), *log, "{cmd:?}");
        assert_eq!(t.is_empty(), *shown == HELP, "{cmd:?}");
        // A target stays in soft mode exactly while a trigger names it.
        let enables = shown.contains("_event:sched:sched_waking") as i32;
        assert_eq!(host.soft("sched_waking"), enables, "{cmd:?}");
    }
}

/// A hist trigger `cmd` written on `sched_switch` and read back as
/// `shows`.
fn switch_hist(cmd: &str, shows: &str) -> (EventDef, Triggers<Ev>) {
    let def = sched_switch();
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &Host::default(), &[(cmd, "ok")]);
    assert_eq!(t.read_text(), shows);
    (def, t)
}

fn run(t: &Triggers<Ev>, def: &EventDef, host: &Host, cmds: &[(&str, &str)]) {
    for (cmd, want) in cmds {
        let r = t.write(cmd.as_bytes(), def, host);
        let want = match *want {
            "ok" => cmd.len().to_string(),
            w => w.to_string(),
        };
        assert_eq!(errno_name(&r), want, "{cmd:?}");
    }
}

#[test]
fn one_trigger_per_kind_newest_first_and_loose_removal() {
    // Measured on events/sched/sched_process_hang.
    let def = process_hang();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    run(
        &t,
        &def,
        &host,
        &[
            ("enable_event:sched:sched_waking", "31"),
            ("disable_event:sched:sched_waking", "EEXIST"),
            ("enable_event:sched:sched_wakeup:3", "33"),
            ("stacktrace", "10"),
            ("traceoff:2 if pid == 7", "22"),
            ("traceon", "EEXIST"),
        ],
    );
    assert_eq!(
        t.read_text(),
        "traceoff:count=2 if pid == 7\nstacktrace:unlimited\n\
enable_event:sched:sched_wakeup:count=3\nenable_event:sched:sched_waking:unlimited\n"
    );
    assert_eq!(
        (host.soft("sched_waking"), host.soft("sched_wakeup")),
        (1, 1)
    );
    run(
        &t,
        &def,
        &host,
        &[
            ("!disable_event:sched:sched_waking", "33"),
            ("!traceon", "8"),
        ],
    );
    assert_eq!(
        t.read_text(),
        "stacktrace:unlimited\nenable_event:sched:sched_wakeup:count=3\n"
    );
    run(
        &t,
        &def,
        &host,
        &[
            ("!enable_event:sched:sched_wakeup:junk", "37"),
            ("!stacktrace", "11"),
        ],
    );
    assert_eq!(t.read_text(), HELP);
    assert_eq!(
        (host.soft("sched_waking"), host.soft("sched_wakeup")),
        (0, 0)
    );

    // Measured on events/sched/sched_switch: `!traceoff` removes a
    // `traceon`, removing what is not there succeeds, and removal ignores
    // the count and the filter.
    let def = sched_switch();
    run(
        &t,
        &def,
        &host,
        &[
            ("traceon", "7"),
            ("!traceoff", "9"),
            ("!traceon:5", "10"),
            ("!traceon", "8"),
            ("traceoff:3 if prev_pid == 0", "27"),
        ],
    );
    assert_eq!(t.read_text(), "traceoff:count=3 if prev_pid == 0\n");
    run(&t, &def, &host, &[("!traceoff:3 if prev_pid == 99", "29")]);
    assert_eq!(t.read_text(), HELP);
    run(
        &t,
        &def,
        &host,
        &[
            ("!disable_event:sched:sched_wakeup", "33"),
            ("!disable_event:sched:sched_wakeup", "33"),
        ],
    );
}

#[test]
fn snapshot_triggers_hold_the_snapshot_buffer() {
    // The kernel arms the snapshot buffer before registering a snapshot
    // trigger and lets go when registering fails or the trigger goes.
    let def = process_hang();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    run(
        &t,
        &def,
        &host,
        &[
            ("snapshot", "ok"),
            ("snapshot:3", "EEXIST"),
            ("snapshot+1", "EINVAL"),
        ],
    );
    assert_eq!(host.soft("(snapshot)"), 1);
    run(&t, &def, &host, &[("!snapshot", "ok"), ("!snapshot", "ok")]);
    assert_eq!(host.soft("(snapshot)"), 0);
    run(&t, &def, &host, &[("snapshot:1", "ok")]);
    // Firing uses the count.
    let e = vec![0u8; 64];
    assert!(matches!(
        t.fire(&hit(&e), &ON)[..],
        [TriggerAction::Snapshot]
    ));
    assert!(t.fire(&hit(&e), &ON).is_empty());
    t.clear(&host);
    assert_eq!(host.soft("(snapshot)"), 0);
}

#[test]
fn truncate_keeps_all_but_hist_triggers() {
    // Measured: `echo > trigger` (O_TRUNC) left traceon:unlimited.
    let def = sched_switch();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    run(
        &t,
        &def,
        &host,
        &[
            ("traceon", "7"),
            ("hist:keys=prev_pid", "18"),
            ("enable_hist:sched:sched_waking", "30"),
        ],
    );
    assert_eq!(host.soft("sched_waking"), 1);
    t.truncate(&host);
    assert_eq!(t.read_text(), "traceon:unlimited\n");
    assert_eq!(t.hist_text(), "");
    assert_eq!(host.soft("sched_waking"), 0);
    t.clear(&host);
    assert!(t.is_empty());
    assert_eq!(t.read_text(), HELP);
}

#[test]
fn write_limits() {
    // Measured: 4095 bytes are taken, 4096 fail with EINVAL.
    let def = process_hang();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    let long = format!("traceon{}", " ".repeat(4095 - 7));
    assert_eq!(t.write(long.as_bytes(), &def, &host), Ok(4095));
    let t: Triggers<Ev> = Triggers::new();
    let longer = format!("traceon{}", " ".repeat(4096 - 7));
    assert_eq!(t.write(longer.as_bytes(), &def, &host), Err(Errno::EINVAL));
    // The text ends at a NUL.
    assert_eq!(t.write(b"traceon\0junk", &def, &host), Ok(12));
    assert_eq!(t.read_text(), "traceon:unlimited\n");
}

#[test]
fn error_log_keeps_the_last_eight() {
    // Measured: 20 failed writes left entries for nosuch13 .. nosuch20.
    let def = process_hang();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    for i in 1..=20 {
        let cmd = format!("traceon if nosuch{i} == 1");
        assert_eq!(t.write(cmd.as_bytes(), &def, &host), Err(Errno::EINVAL));
    }
    let text = host.log.text();
    let cmds: Vec<&str> = text.lines().filter(|l| l.contains("Command")).collect();
    assert_eq!(cmds.len(), ERROR_LOG_MAX);
    assert_eq!(cmds[0], "  Command: nosuch13 == 1");
    assert_eq!(cmds[7], "  Command: nosuch20 == 1");
    host.log.clear();
    assert_eq!(host.log.text(), "");
}

fn switch_entry(def: &EventDef, prev_pid: i64, next_pid: i64, prio: i64) -> Vec<u8> {
    def.encode(
        42,
        &[
            FieldValue::Str("bash"),
            FieldValue::Int(prev_pid),
            FieldValue::Int(prio),
            FieldValue::Int(1),
            FieldValue::Str("kworker/0:1"),
            FieldValue::Int(next_pid),
            FieldValue::Int(prio),
        ],
    )
}

fn hit(entry: &[u8]) -> Hit<'_> {
    Hit {
        entry,
        cpu: 1,
        comm: "bash",
        ts_ns: 5_000_000,
    }
}

#[test]
fn counts_decrement_only_when_the_trigger_acts() {
    let def = sched_switch();
    let host = Host::default();
    let e = switch_entry(&def, 0, 7, 120);
    let on = Cx {
        on: true,
        enabled: false,
    };
    let off = Cx {
        on: false,
        enabled: false,
    };

    // traceoff counts only while tracing is on.
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &host, &[("traceoff:2", "10")]);
    assert!(t.fire(&hit(&e), &off).is_empty());
    assert_eq!(t.read_text(), "traceoff:count=2\n");
    let a = t.fire(&hit(&e), &on);
    assert!(matches!(a[..], [TriggerAction::TraceOff]) && a[0].is_post());
    t.fire(&hit(&e), &on);
    assert!(t.fire(&hit(&e), &on).is_empty());
    assert_eq!(t.read_text(), "traceoff:count=0\n");

    // Measured: `stacktrace:2` on sched_switch read back as count=0 moments
    // later, with tracing off: stack traces count every hit.
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &host, &[("stacktrace:2", "12")]);
    assert_eq!(t.fire(&hit(&e), &off).len(), 1);
    assert_eq!(t.fire(&hit(&e), &off).len(), 1);
    assert!(t.fire(&hit(&e), &off).is_empty());
    assert_eq!(t.read_text(), "stacktrace:count=0\n");

    // traceon acts (and counts) only while tracing is off.
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &host, &[("traceon:1", "9")]);
    assert!(t.fire(&hit(&e), &on).is_empty());
    let a = t.fire(&hit(&e), &off);
    assert!(matches!(a[..], [TriggerAction::TraceOn]) && !a[0].is_post());
    assert_eq!(t.read_text(), "traceon:count=0\n");

    // enable_event counts only when the target changes.
    let t: Triggers<Ev> = Triggers::new();
    run(
        &t,
        &def,
        &host,
        &[("enable_event:sched:sched_waking:1", "33")],
    );
    let enabled = Cx {
        on: true,
        enabled: true,
    };
    assert!(t.fire(&hit(&e), &enabled).is_empty());
    let a = t.fire(&hit(&e), &on);
    assert!(matches!(
        &a[..],
        [TriggerAction::EnableEvent(Ev("sched", "sched_waking"))]
    ));
    assert!(t.fire(&hit(&e), &on).is_empty());
    assert_eq!(t.read_text(), "enable_event:sched:sched_waking:count=0\n");
}

#[test]
fn if_filters_and_conditional_mode() {
    let def = sched_switch();
    let host = Host::default();
    let off = Cx {
        on: false,
        enabled: false,
    };
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &host, &[("snapshot", "8")]);
    assert!(!t.is_conditional());
    run(&t, &def, &host, &[("traceon if prev_pid == 0", "24")]);
    assert!(t.is_conditional());
    let idle = switch_entry(&def, 0, 7, 120);
    let busy = switch_entry(&def, 5, 7, 120);
    let a = t.fire(&hit(&idle), &off);
    assert!(matches!(
        a[..],
        [TriggerAction::TraceOn, TriggerAction::Snapshot]
    ));
    let a = t.fire(&hit(&busy), &off);
    assert!(matches!(a[..], [TriggerAction::Snapshot]));
    run(&t, &def, &host, &[("!traceon", "8")]);
    assert!(!t.is_conditional());
    run(&t, &def, &host, &[("stacktrace", "10")]);
    assert!(t.is_conditional());
}

const HIST_HEAD: &str = "# event histogram\n#\n# trigger info: ";

#[test]
fn hist_numeric_key() {
    let def = sched_switch();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &host, &[("hist:keys=prev_pid", "18")]);
    assert_eq!(
        t.read_text(),
        "hist:keys=prev_pid:vals=hitcount:sort=hitcount:size=2048 [active]\n"
    );
    assert!(t.is_conditional());
    let cx = ON;
    for pid in [100, 7, 100, -1] {
        t.fire(&hit(&switch_entry(&def, pid, 7, 120)), &cx);
    }
    assert_eq!(
        t.hist_text(),
        format!(
            "{HIST_HEAD}hist:keys=prev_pid:vals=hitcount:sort=hitcount:size=2048 [active]\n#\n\n\
{{ prev_pid:          7 }} hitcount:          1\n\
{{ prev_pid: 18446744073709551615 }} hitcount:          1\n\
{{ prev_pid:        100 }} hitcount:          2\n\
\nTotals:\n    Hits: 4\n    Entries: 3\n    Dropped: 0\n"
        )
    );
}

#[test]
fn hist_string_key_value_and_sort() {
    let (def, t) = switch_hist(
        "hist:keys=next_comm:vals=prev_prio:sort=prev_prio.descending",
        "hist:keys=next_comm:vals=hitcount,prev_prio:sort=prev_prio.descending:size=2048 [active]\n",
    );
    let cx = ON;
    t.fire(&hit(&switch_entry(&def, 1, 7, 120)), &cx);
    t.fire(&hit(&switch_entry(&def, 1, 7, 100)), &cx);
    let text = t.hist_text();
    let line = format!(
        "{{ next_comm: {:<50} }} hitcount:          2  prev_prio:        220\n",
        "kworker/0:1"
    );
    assert!(text.contains(&line), "{text}");
}

#[test]
fn hist_key_modifiers() {
    let def = sched_switch();
    let host = Host::default();
    let cx = ON;
    let cases: &[(&str, &str, &str)] = &[
        (
            "hist:keys=prev_pid.hex",
            "hist:keys=prev_pid.hex:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid: 64 } hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid.sym",
            "hist:keys=prev_pid.sym:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid: [64] 0x64 PAD45} hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid.sym-offset",
            "hist:keys=prev_pid.sym-offset:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid: [64] 0x64 PAD55} hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid.log2",
            "hist:keys=prev_pid.log2:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid: ~ 2^7  } hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid.buckets=10",
            "hist:keys=prev_pid.buckets=10:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid: ~ 100-109 } hitcount:          1\n",
        ),
        (
            "hist:keys=common_pid.execname",
            "hist:keys=common_pid.execname:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ common_pid: bash            [        42] } hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid,next_pid:size=100",
            "hist:keys=prev_pid,next_pid:vals=hitcount:sort=hitcount:size=128 [active]\n",
            "{ prev_pid:        100, next_pid:          7 } hitcount:          1\n",
        ),
        (
            // 6.12 prints a CPU field as `common_cpu` (measured in the
            // kernel-vm hist differential).
            "hist:keys=common_cpu",
            "hist:keys=common_cpu:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ common_cpu:          1 } hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid:vals=prev_prio.hex",
            "hist:keys=prev_pid:vals=hitcount,prev_prio.hex:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid:        100 } hitcount:          1  prev_prio:         78\n",
        ),
        (
            "hist:keys=prev_pid:vals=prev_prio:nohitcount",
            "hist:keys=prev_pid:vals=prev_prio:sort=hitcount:size=2048:nohitcount [active]\n",
            "{ prev_pid:        100 }  prev_prio:        120\n",
        ),
        (
            // Expression values are kept but not shown.
            "hist:keys=prev_pid:vals=prev_prio+next_prio",
            "hist:keys=prev_pid:vals=hitcount,prev_prio+next_prio:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid:        100 } hitcount:          1\n",
        ),
        (
            "hist:keys=prev_pid:vals=common_timestamp.usecs",
            "hist:keys=prev_pid:vals=hitcount,common_timestamp.usecs:sort=hitcount:size=2048:clock=global [active]\n",
            "{ prev_pid:        100 } hitcount:          1  common_timestamp:       5000\n",
        ),
        (
            "hist:keys=prev_pid/2",
            "hist:keys=prev_pid/2:vals=hitcount:sort=hitcount:size=2048 [active]\n",
            "{ prev_pid/2:         50 } hitcount:          1\n",
        ),
    ];
    for (cmd, info, line) in cases {
        // `%-45ps`/`%-55pS` of an address that is no symbol: `0x64` padded.
        let line = line
            .replace("0x64 PAD45", &format!("{:<45} ", "0x64"))
            .replace("0x64 PAD55", &format!("{:<55} ", "0x64"));
        let t: Triggers<Ev> = Triggers::new();
        let r = t.write(cmd.as_bytes(), &def, &host);
        assert_eq!(r, Ok(cmd.len() as u32), "{cmd}: {}", host.log.text());
        assert_eq!(t.read_text(), *info, "{cmd}");
        t.fire(&hit(&switch_entry(&def, 100, 7, 120)), &cx);
        let text = t.hist_text();
        assert_eq!(
            text,
            format!(
                "{HIST_HEAD}{info}#\n\n{line}\nTotals:\n    Hits: 1\n    Entries: 1\n    Dropped: 0\n"
            ),
            "{cmd}"
        );
    }
}

#[test]
fn hist_drops_past_size_and_clears() {
    let def = sched_switch();
    let host = Host::default();
    let cx = ON;
    let t: Triggers<Ev> = Triggers::new();
    run(&t, &def, &host, &[("hist:keys=prev_pid:size=128", "27")]);
    for pid in 0..130 {
        t.fire(&hit(&switch_entry(&def, pid, 7, 120)), &cx);
    }
    let text = t.hist_text();
    assert!(
        text.ends_with("\nTotals:\n    Hits: 128\n    Entries: 128\n    Dropped: 2\n"),
        "{text}"
    );
    run(&t, &def, &host, &[("hist:keys=prev_pid:clear", "24")]);
    assert!(t
        .hist_text()
        .ends_with("#\n\n\nTotals:\n    Hits: 0\n    Entries: 0\n    Dropped: 0\n"));
    run(&t, &def, &host, &[("hist:keys=prev_pid:pause", "24")]);
    assert_eq!(
        t.read_text(),
        "hist:keys=prev_pid:vals=hitcount:sort=hitcount:size=128 [paused]\n"
    );
    t.fire(&hit(&switch_entry(&def, 1, 7, 120)), &cx);
    assert!(t.hist_text().contains("Hits: 0"));
    run(&t, &def, &host, &[("hist:keys=prev_pid:cont", "23")]);
    t.fire(&hit(&switch_entry(&def, 1, 7, 120)), &cx);
    assert!(t.hist_text().contains("Hits: 1"));
    // disable_hist on another event pauses this one's.
    t.set_hist_paused(true);
    assert!(t.read_text().ends_with(" [paused]\n"));
}

#[test]
fn hist_errors_go_to_error_log() {
    let def = sched_switch();
    // (command, errno, error_log entries: message and caret position)
    type Case<'a> = (&'a str, &'a str, &'a [(&'a str, usize)]);
    let cases: &[Case<'_>] = &[
        ("hist:keys=nosuch", "EINVAL", &[("Couldn't find field", 10)]),
        ("hist", "EINVAL", &[]),
        ("hist:vals=prev_prio", "EINVAL", &[]),
        (
            "hist:keys=prev_pid:keys=",
            "EINVAL",
            &[("Empty assignment", 5)],
        ),
        (
            "hist:keys=prev_pid.foo",
            "EINVAL",
            &[("Invalid field modifier", 19)],
        ),
        (
            "hist:keys=prev_pid:vals=prev_prio.log2",
            "EINVAL",
            &[("Invalid field modifier", 24)],
        ),
        (
            "hist:keys=prev_pid:sort=nosuch",
            "EINVAL",
            &[("Sort field must be a key or a val", 24)],
        ),
        (
            "hist:keys=prev_pid:sort=hitcount.up",
            "EINVAL",
            &[("Invalid sort modifier", 33)],
        ),
        (
            "hist:keys=prev_pid:sort=prev_pid,hitcount,prev_pid",
            "EINVAL",
            &[("Too many sort fields (Max = 2)", 19)],
        ),
        ("hist:keys=prev_pid:size=3", "EINVAL", &[]),
        ("hist:keys=prev_pid:bogus", "EINVAL", &[]),
        (
            "hist:keys=prev_pid:nohitcount",
            "ENOENT",
            &[("Non-hitcount value is required for 'nohitcount'", 0)],
        ),
        (
            "hist:keys=prev_pid:cont",
            "ENOENT",
            &[("Can't clear or continue a nonexistent hist trigger", 0)],
        ),
        (
            "hist:keys=prev_pid:vals=$x",
            "EINVAL",
            &[("Couldn't find variable", 25), ("Couldn't find field", 24)],
        ),
        (
            "hist:keys=prev_pid:ts0=common_timestamp,ts0=prev_pid",
            "EINVAL",
            &[("Variable already defined", 19)],
        ),
        (
            "hist:keys=prev_pid:vals=prev_pid/0",
            "EDOM",
            &[("Division by zero", 33)],
        ),
        (
            "hist:keys=prev_comm+1",
            "EINVAL",
            &[("String type can not be an operand in expression", 10)],
        ),
        (
            "hist:keys=common_timestamp:clock=foo",
            "EINVAL",
            &[("Couldn't set trace_clock", 33)],
        ),
        (
            "hist:keys=prev_pid:onmax($x).save(prev_pid)",
            "EINVAL",
            // errpos("x") after the `$`: strstr finds the x of "onmax".
            &[("Couldn't find onmax or onchange variable", 23)],
        ),
        (
            "hist:keys=prev_pid:onmatch(sched.nosuch).trace(x,$a)",
            "EINVAL",
            &[("Invalid subsystem or event name", 33)],
        ),
    ];
    for (cmd, want, logged) in cases {
        let host = Host::default();
        let t: Triggers<Ev> = Triggers::new();
        let r = t.write(cmd.as_bytes(), &def, &host);
        let got = match r {
            Err(e) if e.0 == libc::EDOM => "EDOM".to_string(),
            r => errno_name(&r),
        };
        assert_eq!(got, *want, "{cmd}");
        let mut expect = String::new();
        let last_cmd = cmd.strip_prefix("hist:").map(|c| format!("hist:{c}"));
        for (msg, pos) in *logged {
            expect.push_str(&format!(
                "[ 2732.155241] hist:sched:sched_switch: error: {msg}\n  Command: {}\n{}^\n",
                last_cmd.as_deref().unwrap_or(""),
                " ".repeat(11 + pos)
            ));
        }
        assert_eq!(host.log.text(), expect, "{cmd}");
        assert_eq!(t.read_text(), HELP, "{cmd}");
    }
}

#[test]
fn hist_exists_and_removal_matches_the_filter() {
    let def = sched_switch();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    run(
        &t,
        &def,
        &host,
        &[
            ("hist:keys=prev_pid if prev_pid > 1", "34"),
            ("traceon", "7"),
            ("hist:keys=prev_pid if prev_pid > 1", "EEXIST"),
            ("hist:keys=prev_pid:size=4096 if prev_pid > 1", "EEXIST"),
            ("hist:keys=prev_pid", "18"),
        ],
    );
    assert_eq!(
        host.log.text(),
        "[ 2732.155241] hist:sched:sched_switch: error: Hist trigger already exists\n  Command: hist:keys=prev_pid if prev_pid > 1\n           ^\n\
[ 2732.155241] hist:sched:sched_switch: error: Hist trigger already exists\n  Command: hist:keys=prev_pid:size=4096 if prev_pid > 1\n           ^\n"
    );
    // Newest first, but hist triggers join the end of the list.
    assert_eq!(
        t.read_text(),
        "traceon:unlimited\n\
hist:keys=prev_pid:vals=hitcount:sort=hitcount:size=2048 if prev_pid > 1 [active]\n\
hist:keys=prev_pid:vals=hitcount:sort=hitcount:size=2048 [active]\n"
    );
    let cx = ON;
    t.fire(&hit(&switch_entry(&def, 1, 7, 120)), &cx);
    let text = t.hist_text();
    assert!(
        text.contains(" [active]\n#\n\n\nTotals:\n    Hits: 0\n"),
        "{text}"
    );
    assert!(text.contains("\n\n\n# event histogram\n"), "{text}");
    assert!(
        text.ends_with("Hits: 1\n    Entries: 1\n    Dropped: 0\n"),
        "{text}"
    );
    run(&t, &def, &host, &[("!hist:keys=prev_pid:size=512", "28")]);
    assert_eq!(
        t.read_text(),
        "traceon:unlimited\n\
hist:keys=prev_pid:vals=hitcount:sort=hitcount:size=2048 if prev_pid > 1 [active]\n"
    );
    run(
        &t,
        &def,
        &host,
        &[("!hist:keys=prev_pid.hex if prev_pid > 1", "39")],
    );
    assert!(t.read_text().contains("if prev_pid > 1"));
    run(
        &t,
        &def,
        &host,
        &[("!hist:keys=prev_pid if prev_pid > 1", "35")],
    );
    assert_eq!(t.read_text(), "traceon:unlimited\n");
}

#[test]
fn named_hists_share_one_map() {
    let switch = sched_switch();
    let host = Host::default();
    let a: Triggers<Ev> = Triggers::new();
    let b: Triggers<Ev> = Triggers::new();
    run(&a, &switch, &host, &[("hist:name=foo:keys=prev_pid", "27")]);
    run(&b, &switch, &host, &[("hist:name=foo:keys=prev_pid", "27")]);
    run(
        &b,
        &switch,
        &host,
        &[("hist:name=foo:keys=next_pid", "EINVAL")],
    );
    assert!(host.log.text().contains(
        "error: Named hist trigger doesn't match existing named trigger (includes variables)\n  Command: hist:name=foo:keys=next_pid\n                ^\n"
    ));
    let cx = ON;
    a.fire(&hit(&switch_entry(&switch, 3, 7, 120)), &cx);
    b.fire(&hit(&switch_entry(&switch, 3, 7, 120)), &cx);
    assert_eq!(
        b.read_text(),
        "hist:name=foo:keys=prev_pid:vals=hitcount:sort=hitcount:size=2048 [active]\n"
    );
    assert!(b
        .hist_text()
        .contains("{ prev_pid:          3 } hitcount:          2\n"));
    a.clear(&host);
    b.fire(&hit(&switch_entry(&switch, 3, 7, 120)), &cx);
    assert!(b.hist_text().contains("hitcount:          3\n"));
    b.clear(&host);
    assert!(host.named.find("name=foo").is_none());
}

#[test]
fn enable_hist_fires_at_its_target() {
    let def = sched_switch();
    let host = Host::default();
    let t: Triggers<Ev> = Triggers::new();
    run(
        &t,
        &def,
        &host,
        &[("disable_hist:sched:sched_waking:1", "33")],
    );
    assert_eq!(t.read_text(), "disable_hist:sched:sched_waking:count=1\n");
    let cx = ON;
    let e = switch_entry(&def, 1, 7, 120);
    let a = t.fire(&hit(&e), &cx);
    assert!(matches!(
        &a[..],
        [TriggerAction::DisableHist(Ev("sched", "sched_waking"))]
    ));
    assert!(t.fire(&hit(&e), &cx).is_empty());
}

#[test]
fn event_id_is_a_trigger_event() {
    let a = crate::tracefs::EventId::new(sched_switch());
    let b = crate::tracefs::EventId::new(sched_switch());
    assert_eq!((a.system(), a.name()), ("sched", "sched_switch"));
    assert!(a.same_event(&a.clone()));
    assert!(!a.same_event(&b));
}

/// `.percent` and `.graph` values: each entry's share of the column's total
/// (`%3u.%02u`) and a 20-column bar of its share of the column's largest, as
/// the kernel's hist_trigger_print_val prints them.
#[test]
fn hist_percent_and_graph_values() {
    let (def, t) = switch_hist(
        "hist:keys=prev_pid:vals=prev_prio.percent,next_pid.graph:sort=prev_pid",
        "hist:keys=prev_pid:vals=hitcount,prev_prio.percent,next_pid.graph:sort=prev_pid:size=2048 [active]\n",
    );
    let cx = ON;
    t.fire(&hit(&switch_entry(&def, 1, 10, 100)), &cx);
    t.fire(&hit(&switch_entry(&def, 2, 40, 300)), &cx);
    let text = t.hist_text();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(
        lines,
        [
            "{ prev_pid:          1 } hitcount:          1  prev_prio (%):  25.00  next_pid: #####               ",
            "{ prev_pid:          2 } hitcount:          1  prev_prio (%):  75.00  next_pid: ####################",
        ],
        "{text}"
    );
    // Not on keys.
    let t2: Triggers<Ev> = Triggers::new();
    run(
        &t2,
        &def,
        &Host::default(),
        &[("hist:keys=prev_pid.percent", "EINVAL")],
    );
}
