//! The `ftrace` system's events (`print`, `raw_data`, `kernel_stack`, ...):
//! layouts, ids and print formats as the kernel's tracefs shows them under
//! `events/ftrace/`, for tools (trace-cmd, libtraceevent) to decode the
//! entries `trace_marker` and `trace_marker_raw` record.

use std::sync::Arc;

use crate::tracefs::events::{EventDef, Field, FieldKind, Render, COMMON_SIZE};
use crate::tracefs::ring::MAX_ENTRY;

/// The `ftrace` events whose formats monfs serves.
pub struct FtraceEvents {
    /// `ftrace:print`, recorded by `trace_marker`.
    pub print: Arc<EventDef>,
    /// `ftrace:raw_data`, recorded by `trace_marker_raw`.
    pub raw: Arc<EventDef>,
    /// `ftrace:kernel_stack`, recorded by the `stacktrace` trigger and
    /// option.
    pub stack: Arc<EventDef>,
    /// Every one, for `events/ftrace/`.
    pub all: Vec<Arc<EventDef>>,
    /// The address `print` entries carry in `ip` (the kernel's
    /// `tracing_mark_write`, from /proc/kallsyms when it shows addresses).
    pub ip: u64,
}

/// Longest `trace_marker` text: the largest entry less `print`'s 16 bytes
/// and the newline and NUL it always reserves (measured: 4054).
pub const MARKER_MAX: usize = MAX_ENTRY - 16 - 2;
/// Longest `trace_marker_raw` write: the largest entry less the common
/// header (measured: 4064).
pub const MARKER_RAW_MAX: usize = MAX_ENTRY - COMMON_SIZE;

fn field(ctype: &str, name: &str, offset: usize, size: usize, kind: FieldKind) -> Field {
    Field {
        ctype: ctype.into(),
        name: name.into(),
        offset,
        size,
        signed: matches!(kind, FieldKind::Int { signed: true }),
        kind,
    }
}

const STACK_FMT: &str = "\"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" \"\\t=> %ps\\n\\t=> %ps\\n\\t=> %ps\\n\" \"\\t=> %ps\\n\\t=> %ps\\n\", (void *)REC->caller[0], (void *)REC->caller[1], (void *)REC->caller[2], (void *)REC->caller[3], (void *)REC->caller[4], (void *)REC->caller[5], (void *)REC->caller[6], (void *)REC->caller[7]";

impl Default for FtraceEvents {
    fn default() -> FtraceEvents {
        FtraceEvents::new()
    }
}

impl FtraceEvents {
    /// The definitions, with the kernel's ids.
    pub fn new() -> FtraceEvents {
        let uint = FieldKind::Int { signed: false };
        let def = |name: &str, id: u16, fields: Vec<Field>, fmt: &str, render| {
            let mut d = EventDef::with_fields("ftrace", name, id, fields, fmt.into());
            d.render = render;
            Arc::new(d)
        };
        let ip = || field("unsigned long", "ip", 8, 8, uint);
        let caller = || field("unsigned long[8]", "caller", 16, 64, FieldKind::Opaque);
        let print = def(
            "print",
            5,
            vec![ip(), field("char[]", "buf", 16, 0, FieldKind::CharArray)],
            "\"%ps: %s\", (void *)REC->ip, REC->buf",
            Render::FtracePrint,
        );
        let raw = def(
            "raw_data",
            19,
            vec![
                field("unsigned int", "id", 8, 4, uint),
                field("char[]", "buf", 12, 0, FieldKind::CharArray),
            ],
            "\"id:%04x %08x\", REC->id, (int)REC->buf[0]",
            Render::FtraceRaw,
        );
        let stack = def(
            "kernel_stack",
            4,
            vec![
                field("int", "size", 8, 4, FieldKind::Int { signed: true }),
                caller(),
            ],
            STACK_FMT,
            Render::KernelStack,
        );
        let all = vec![
            print.clone(),
            raw.clone(),
            stack.clone(),
            def(
                "user_stack",
                13,
                vec![field("unsigned int", "tgid", 8, 4, uint), caller()],
                STACK_FMT,
                Render::Fields,
            ),
            def(
                "bputs",
                15,
                vec![ip(), field("const char *", "str", 16, 8, uint)],
                "\"%ps: %s\", (void *)REC->ip, REC->str",
                Render::Fields,
            ),
            def(
                "bprint",
                6,
                vec![
                    ip(),
                    field("const char *", "fmt", 16, 8, uint),
                    field("u32[]", "buf", 24, 0, FieldKind::Opaque),
                ],
                "\"%ps: %s\", (void *)REC->ip, REC->fmt",
                Render::Fields,
            ),
        ];
        FtraceEvents {
            print,
            raw,
            stack,
            all,
            ip: kallsyms("tracing_mark_write").unwrap_or(0),
        }
    }
}

/// The address of kernel symbol `name`, when /proc/kallsyms shows it.
fn kallsyms(name: &str) -> Option<u64> {
    let text = std::fs::read_to_string("/proc/kallsyms").ok()?;
    text.lines().find_map(|l| {
        let mut it = l.split_whitespace();
        let addr = it.next()?;
        let _kind = it.next()?;
        (it.next()? == name)
            .then(|| u64::from_str_radix(addr, 16).ok())
            .flatten()
            .filter(|&a| a != 0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_are_the_kernels() {
        let f = FtraceEvents::new();
        assert_eq!(
            f.print.format_text(),
            "name: print\nID: 5\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:0;\n\n\
print fmt: \"%ps: %s\", (void *)REC->ip, REC->buf\n"
        );
        assert!(f.raw.format_text().contains(
            "\tfield:unsigned int id;\toffset:8;\tsize:4;\tsigned:0;\n\
\tfield:char buf[];\toffset:12;\tsize:0;\tsigned:0;\n\n\
print fmt: \"id:%04x %08x\", REC->id, (int)REC->buf[0]\n"
        ));
        let ks = f.all.iter().find(|d| d.name == "kernel_stack").unwrap();
        assert!(ks
            .format_text()
            .contains("\tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n"));
        let bp = f.all.iter().find(|d| d.name == "bprint").unwrap();
        assert!(bp
            .format_text()
            .contains("\tfield:const char * fmt;\toffset:16;\tsize:8;\tsigned:0;\n\tfield:u32 buf[];\toffset:24;\tsize:0;\tsigned:0;\n"));
        assert_eq!(MARKER_MAX, 4054);
        assert_eq!(MARKER_RAW_MAX, 4064);
    }

    #[test]
    fn lines_are_the_kernels() {
        let f = FtraceEvents::new();
        let mut s = String::new();
        let mut e = vec![5, 0, 0, 1, 1, 0, 0, 0];
        e.extend_from_slice(&[0; 8]);
        e.extend_from_slice(b"hello\n\0\0");
        f.print.render_entry(&e, &mut s);
        assert_eq!(s, "tracing_mark_write: hello\n");
        // Measured: 01 02 03 04 "abcdefg" shows as below, the pad byte too.
        let mut e = vec![19, 0, 0, 1, 1, 0, 0, 0, 1, 2, 3, 4];
        e.extend_from_slice(b"abcdefg\0");
        s.clear();
        f.raw.render_entry(&e, &mut s);
        assert_eq!(s, "# 4030201 buf: 61 62 63 64 65 66 67 00\n");
    }
}
