use super::grammar::ProbeErr::{self, *};
use super::*;
use crate::tracefs::events::{EventDef, FieldSpec};
use crate::tracefs::facility::EventId;

/// `syscalls:sys_enter_openat` as the selftest config lays it out.
fn openat() -> EventId {
    let spec = |t: &str, n: &str| FieldSpec {
        name: n.into(),
        ctype: t.into(),
    };
    EventId::new(
        EventDef::new(
            "syscalls",
            "sys_enter_openat",
            600,
            &[
                spec("int", "__syscall_nr"),
                spec("unsigned long", "dfd"),
                spec("unsigned long", "filename"),
                spec("unsigned long", "flags"),
                spec("__data_loc char[]", "name"),
            ],
            None,
        )
        .unwrap(),
    )
}

fn run(line: &str) -> Result<Spec, CmdError> {
    let ev = openat();
    let find =
        move |s: &str, e: &str| (s == "syscalls" && e == "sys_enter_openat").then(|| ev.clone());
    parse(line, &find).expect("an e line").map(|(s, _)| s)
}

/// The error of a command written with `^` where the kernel's caret goes,
/// as the selftest's `ftrace_errlog_check` writes it.
fn caret(cmd: &str) -> (ProbeErr, usize) {
    let pos = cmd.find('^').unwrap();
    let e = run(&cmd.replace('^', "")).expect_err(cmd);
    let last = *e
        .log
        .last()
        .unwrap_or_else(|| panic!("{cmd}: nothing logged"));
    assert_eq!(last.1, pos, "{cmd}: {:?}", e.log);
    last
}

#[test]
fn syntax_errors_point_where_the_kernel_points() {
    // tools/testing/selftests/ftrace/test.d/dynevent/eprobes_syntax_errors.tc
    assert_eq!(caret("e ^a.").0, NoEventInfo);
    assert_eq!(caret("e ^.b").0, NoEventInfo);
    assert_eq!(caret("e ^a.b").0, BadAttachEvent);
    assert_eq!(caret("e syscalls/sys_enter_openat ^foo").0, NosupBtfarg);
    assert_eq!(caret("e:^/bar syscalls/sys_enter_openat").0, NoGroupName);
    let long = "1".repeat(65);
    assert_eq!(
        caret(&format!("e:^{long}/bar syscalls/sys_enter_openat")).0,
        GroupTooLong
    );
    assert_eq!(
        caret("e:^foo.1/bar syscalls/sys_enter_openat").0,
        BadGroupName
    );
    assert_eq!(caret("e:^ syscalls/sys_enter_openat").0, NoEventName);
    assert_eq!(
        caret(&format!("e:foo/^{long} syscalls/sys_enter_openat")).0,
        EventTooLong
    );
    assert_eq!(
        caret("e:foo/^bar.1 syscalls/sys_enter_openat").0,
        BadEventName
    );
    assert_eq!(
        caret("e:foo/bar syscalls/sys_enter_openat arg=^dfd").0,
        NosupBtfarg
    );
    assert_eq!(
        caret("e:foo/bar syscalls/sys_enter_openat arg=^$foo").0,
        BadVar
    );
    assert_eq!(
        caret("e:foo/bar syscalls/sys_enter_openat if ^").0,
        NoEpFilter
    );
    // And the argument grammar's own.
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=^+0$dfd").0,
        DerefNeedBrace
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=+0($dfd^").0,
        DerefOpenBrace
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=+0(^$comm)").0,
        CommCantDeref
    );
    assert_eq!(caret("e syscalls.sys_enter_openat a=$dfd:^u7").0, BadType);
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=$dfd:u8[^0]").0,
        BadArrayNum
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=$dfd:u8[^65]").0,
        ArrayTooBig
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=$dfd:^u8[2]").0,
        BadString
    );
    assert_eq!(caret("e syscalls.sys_enter_openat a=\\^x").0, BadImm);
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=\\\"ab^").0,
        ImmstrNoClose
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=$dfd:^b9@0/8").0,
        BadBitfield
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat a=$dfd ^a=$flags").0,
        UsedArgName
    );
    assert_eq!(
        caret("e syscalls.sys_enter_openat ^common_pid=$dfd").0,
        UsedArgName
    );
    assert_eq!(caret("e syscalls.sys_enter_openat ^=$dfd").0, NoArgName);
    assert_eq!(caret("e syscalls.sys_enter_openat a=^").0, NoArgBody);
}

#[test]
fn errnos_are_the_kernels() {
    let errno = |l: &str| run(l).unwrap_err().errno;
    assert_eq!(errno("e a.b"), Errno::ENODEV);
    assert_eq!(
        errno("e syscalls.sys_enter_openat a=@jiffies"),
        Errno::ENOENT
    );
    assert_eq!(errno("e syscalls.sys_enter_openat a=+0($dfd):u8[64] b=+0($dfd):u8[64] c=+0($dfd):u64[64] d=+0($dfd):u64[64] e=+0($dfd):u64[64] f=+0($dfd):u64[64] g=+0($dfd):u64[64] h=+0($dfd):u64[64]"), Errno::E2BIG);
    let many: Vec<String> = (0..129).map(|i| format!("a{i}=$dfd")).collect();
    assert_eq!(
        errno(&format!("e syscalls.sys_enter_openat {}", many.join(" "))),
        Errno::E2BIG
    );
    assert_eq!(
        errno("e syscalls.sys_enter_openat if nosuch == 1"),
        Errno::EINVAL
    );
    // Not an event probe line at all.
    let find = |_: &str, _: &str| None;
    assert!(parse("e", &find).is_none());
    assert!(parse("p:x do_sys_open", &find).is_none());
}

#[test]
fn layout_print_format_and_trace_line() {
    let s = run(
        "e:etest/sopen syscalls.sys_enter_openat file=+0($filename):ustring fd=$dfd:s32 \
        who=$comm:string n=$name:string c=\\65:char big=\\-1 m=+8($flags):x16[2]",
    )
    .unwrap();
    let d = s.event_def(700);
    assert_eq!((d.system.as_str(), d.name.as_str()), ("etest", "sopen"));
    let f: Vec<(String, usize, usize, bool)> = d
        .fields
        .iter()
        .map(|f| (f.decl(), f.offset, f.size, f.signed))
        .collect();
    assert_eq!(
        f,
        [
            ("__data_loc char[] file".to_string(), 8, 4, false),
            ("s32 fd".to_string(), 12, 4, true),
            ("__data_loc char[] who".to_string(), 16, 4, false),
            ("__data_loc char[] n".to_string(), 20, 4, false),
            ("u8 c".to_string(), 24, 1, false),
            ("u64 big".to_string(), 25, 8, false),
            ("u16 m[2]".to_string(), 33, 4, false),
        ]
    );
    assert_eq!(
        d.print.text,
        "\" file=\\\"%s\\\" fd=%d who=\\\"%s\\\" n=\\\"%s\\\" c='%c' big=0x%Lx m={0x%x,0x%x}\", \
         __get_str(file), REC->fd, __get_str(who), __get_str(n), REC->c, REC->big, REC->m[0], REC->m[1]"
    );
    // A record of the attached event: dfd -3, the name "x".
    let target = openat();
    let rec = target.def().encode(
        42,
        &[
            crate::tracefs::events::FieldValue::Int(257),
            crate::tracefs::events::FieldValue::Int(-3),
            crate::tracefs::events::FieldValue::UInt(0x7ff0),
            crate::tracefs::events::FieldValue::UInt(0),
            crate::tracefs::events::FieldValue::Str("x"),
        ],
    );
    let e = s.entry(700, &rec, "cat");
    assert_eq!(&e[4..8], &42u32.to_le_bytes());
    let mut out = String::new();
    d.render_entry(&e, &mut out);
    assert_eq!(
        out,
        "sopen: (syscalls.sys_enter_openat) file=(fault) fd=-3 who=\"cat\" n=\"x\" c='A' \
         big=0xffffffffffffffff m={0x0,0x0}\n"
    );
}

#[test]
fn dynamic_events_line_and_removal_match() {
    let s = run("e:mygroup/ syscalls/sys_enter_openat a=$dfd:u8 b=+0($filename):ustring").unwrap();
    assert_eq!(
        (s.group.as_str(), s.name.as_str()),
        ("mygroup", "sys_enter_openat")
    );
    let s = run("e syscalls.sys_enter_openat $dfd").unwrap();
    assert_eq!((s.group.as_str(), s.args[0].name.as_str()), (GROUP, "arg1"));
}
