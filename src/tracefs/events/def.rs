//! Event definitions in the shape of the kernel's `TRACE_EVENT`: typed fields
//! laid out after the 8-byte common header, the `format` file text and the
//! binary record encoding; the `print fmt` that renders a record is
//! `print.rs`.

use std::fmt::Write as _;

use super::error::{DefError, EventError};
use super::field::{common_fields, is_ident, layout, Field, FieldKind, FieldSpec, COMMON_SIZE};
use super::print::{render_fields, render_synth, PrintFmt};

/// A field value handed to [`crate::tracefs::Tracing::emit`], in field order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldValue<'a> {
    /// An integer (stored truncated to the field size).
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A string for `char[N]` (truncated, NUL-padded) or `__data_loc char[]`.
    Str(&'a str),
    /// Raw bytes for a string field.
    Bytes(&'a [u8]),
}

/// How a trace line shows an event's fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Render {
    /// `name: ` and the print format's output (TRACE_EVENT events).
    PrintFmt,
    /// The generic field printer user events use since 6.4:
    /// `name: a=0x1 (1) s=text`.
    Fields,
    /// `ftrace:print` (`trace_marker`): `tracing_mark_write: ` and the
    /// text, whose own newline ends the line.
    FtracePrint,
    /// Synthetic events (`print_synth_event()`): `name: ` and
    /// `field=value` pairs joined by blanks.
    Synth,
    /// `ftrace:raw_data` (`trace_marker_raw`): `# <id in hex> buf:` and
    /// every byte of the (4-byte aligned) entry after the id.
    FtraceRaw,
    /// `ftrace:kernel_stack`: `<stack trace>`, then a ` => ` line for each
    /// address after `size` (as the kernel's `trace_stack_print`, which
    /// prints up to the end of the entry or an all-ones word). monfs has
    /// no kernel symbols to name them by: an address shows in hex.
    KernelStack,
    /// An event probe: ` (SYSTEM.EVENT)` and its arguments
    /// (`print_eprobe_event`).
    Probe(std::sync::Arc<crate::tracefs::eprobe::ProbePrint>),
}

/// A complete event definition.
#[derive(Debug)]
pub struct EventDef {
    /// The system (directory under `events/`).
    pub system: String,
    /// The event name.
    pub name: String,
    /// The type id (`common_type`).
    pub id: u16,
    /// The event's own fields, after the common ones.
    pub fields: Vec<Field>,
    /// The print format.
    pub print: PrintFmt,
    /// Where dynamic data starts (the end of the last fixed field).
    pub fixed_size: usize,
    /// How trace lines show the fields.
    pub render: Render,
}

impl EventDef {
    /// Build a definition; `print` defaults to the generated format.
    pub fn new(
        system: &str,
        name: &str,
        id: u16,
        specs: &[FieldSpec],
        print: Option<&str>,
    ) -> Result<EventDef, EventError> {
        let in_event = |err| EventError::Def {
            system: system.to_string(),
            name: name.to_string(),
            err,
        };
        if !is_ident(system) || !is_ident(name) {
            return Err(in_event(DefError::EventName));
        }
        let fields = layout(specs).map_err(in_event)?;
        let text = match print {
            Some(p) => p.to_string(),
            None => PrintFmt::generated(&fields),
        };
        let print = PrintFmt::parse(&text, &fields).map_err(in_event)?;
        let fixed_size = fields.last().map_or(COMMON_SIZE, |f| f.offset + f.size);
        Ok(EventDef {
            system: system.into(),
            name: name.into(),
            id,
            fields,
            print,
            fixed_size,
            render: Render::PrintFmt,
        })
    }

    /// A definition from fields already laid out and a print format shown
    /// verbatim in `format` (never interpreted): trace lines use the
    /// generic field printer. For user events.
    pub fn with_fields(
        system: &str,
        name: &str,
        id: u16,
        fields: Vec<Field>,
        print_text: String,
    ) -> EventDef {
        let fixed_size = fields.last().map_or(COMMON_SIZE, |f| f.offset + f.size);
        EventDef {
            system: system.into(),
            name: name.into(),
            id,
            fields,
            print: PrintFmt::verbatim(print_text),
            fixed_size,
            render: Render::Fields,
        }
    }

    /// The text after `name:` in a trace line (a leading space included
    /// when there is any).
    pub fn render_line(&self, entry: &[u8], out: &mut String) {
        match &self.render {
            Render::PrintFmt => {
                out.push(' ');
                self.print.render(&self.fields, entry, out);
            }
            Render::Fields => render_fields(&self.fields, entry, out),
            Render::Synth => render_synth(&self.fields, entry, out),
            Render::Probe(p) => p.render(entry, out),
            Render::FtracePrint | Render::FtraceRaw | Render::KernelStack => {}
        }
    }

    /// What a trace line shows after its context (`...: `): `name:` and
    /// the fields for trace events, the ftrace events' own output for
    /// those; the line's newline included.
    pub fn render_entry(&self, entry: &[u8], out: &mut String) {
        match self.render {
            Render::FtracePrint => {
                out.push_str("tracing_mark_write: ");
                let buf = entry.get(16..).unwrap_or(&[]);
                let end = buf.iter().position(|&c| c == 0).unwrap_or(buf.len());
                out.push_str(&crate::base::bytestr::text(&buf[..end]));
                if !out.ends_with('\n') {
                    out.push('\n');
                }
            }
            Render::KernelStack => {
                out.push_str("<stack trace>\n");
                for w in entry.get(16..).unwrap_or(&[]).chunks_exact(8) {
                    let a = u64::from_le_bytes(w.try_into().unwrap());
                    if a == u64::MAX {
                        break;
                    }
                    let _ = writeln!(out, " => 0x{a:x}");
                }
            }
            Render::FtraceRaw => {
                let id = entry
                    .get(8..12)
                    .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
                let _ = write!(out, "# {id:x} buf:");
                for b in entry.get(12..).unwrap_or(&[]) {
                    let _ = write!(out, " {b:02x}");
                }
                out.push('\n');
            }
            _ => {
                out.push_str(&self.name);
                out.push(':');
                self.render_line(entry, out);
                out.push('\n');
            }
        }
    }

    /// Look a field up by name, common fields included.
    pub fn field(&self, name: &str) -> Option<Field> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .cloned()
            .or_else(|| common_fields().into_iter().find(|f| f.name == name))
    }

    /// The `format` file.
    pub fn format_text(&self) -> String {
        let mut s = format!("name: {}\nID: {}\nformat:\n", self.name, self.id);
        let line = |s: &mut String, f: &Field| {
            let _ = writeln!(
                s,
                "\tfield:{};\toffset:{};\tsize:{};\tsigned:{};",
                f.decl(),
                f.offset,
                f.size,
                f.signed as u8
            );
        };
        for f in &common_fields() {
            line(&mut s, f);
        }
        s.push('\n');
        for f in &self.fields {
            line(&mut s, f);
        }
        let _ = write!(s, "\nprint fmt: {}\n", self.print.text);
        s
    }

    /// Encode an entry: the common header, then `values` in field order
    /// (missing values are zero), dynamic strings after the fixed part.
    pub fn encode(&self, pid: u32, values: &[FieldValue<'_>]) -> Vec<u8> {
        let mut e = vec![0u8; self.fixed_size];
        e[0..2].copy_from_slice(&self.id.to_le_bytes());
        e[4..8].copy_from_slice(&pid.to_le_bytes());
        for (f, v) in self.fields.iter().zip(values) {
            let bytes: &[u8] = match v {
                FieldValue::Str(s) => s.as_bytes(),
                FieldValue::Bytes(b) => b,
                _ => &[],
            };
            match f.kind {
                FieldKind::Int { .. } => {
                    let x = match *v {
                        FieldValue::Int(i) => i as u64,
                        FieldValue::UInt(u) => u,
                        _ => 0,
                    };
                    e[f.offset..f.offset + f.size].copy_from_slice(&x.to_le_bytes()[..f.size]);
                }
                FieldKind::CharArray => {
                    let n = bytes.len().min(f.size);
                    e[f.offset..f.offset + n].copy_from_slice(&bytes[..n]);
                }
                FieldKind::RelString
                | FieldKind::DynArray
                | FieldKind::RelArray
                | FieldKind::Opaque => {}
                FieldKind::DynString => {
                    let bytes = match bytes.iter().position(|&c| c == 0) {
                        Some(i) => &bytes[..i],
                        None => bytes,
                    };
                    let bytes = &bytes[..bytes.len().min(0xfffe)];
                    let off = e.len();
                    e.extend_from_slice(bytes);
                    e.push(0);
                    let loc = ((bytes.len() as u32 + 1) << 16) | off as u32;
                    e[f.offset..f.offset + 4].copy_from_slice(&loc.to_le_bytes());
                }
            }
        }
        // Dynamic strings of fields without a value still point at "".
        for f in self.fields.iter().skip(values.len()) {
            if f.kind == FieldKind::DynString {
                let off = e.len();
                e.push(0);
                let loc = (1u32 << 16) | off as u32;
                e[f.offset..f.offset + 4].copy_from_slice(&loc.to_le_bytes());
            }
        }
        e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(t: &str, n: &str) -> FieldSpec {
        FieldSpec {
            name: n.into(),
            ctype: t.into(),
        }
    }

    #[test]
    fn layout_matches_sched_switch() {
        // The real 6.18 sched_switch format, as measured.
        let specs = [
            spec("char[16]", "prev_comm"),
            spec("pid_t", "prev_pid"),
            spec("int", "prev_prio"),
            spec("long", "prev_state"),
            spec("char[16]", "next_comm"),
            spec("pid_t", "next_pid"),
            spec("int", "next_prio"),
        ];
        let ev = EventDef::new(
            "sched",
            "sched_switch",
            372,
            &specs,
            Some("\"x=%d\", REC->prev_pid"),
        )
        .unwrap();
        let want = "name: sched_switch\nID: 372\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\
\n\
\tfield:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:pid_t prev_pid;\toffset:24;\tsize:4;\tsigned:1;\n\
\tfield:int prev_prio;\toffset:28;\tsize:4;\tsigned:1;\n\
\tfield:long prev_state;\toffset:32;\tsize:8;\tsigned:1;\n\
\tfield:char next_comm[16];\toffset:40;\tsize:16;\tsigned:0;\n\
\tfield:pid_t next_pid;\toffset:56;\tsize:4;\tsigned:1;\n\
\tfield:int next_prio;\toffset:60;\tsize:4;\tsigned:1;\n\
\n\
print fmt: \"x=%d\", REC->prev_pid\n";
        assert_eq!(ev.format_text(), want);
    }

    #[test]
    fn data_loc_layout_and_encoding() {
        let specs = [
            spec("__data_loc char[]", "filename"),
            spec("pid_t", "pid"),
            spec("u8", "b"),
            spec("u64", "q"),
        ];
        let ev = EventDef::new("s", "e", 40000, &specs, None).unwrap();
        let offs: Vec<_> = ev.fields.iter().map(|f| (f.offset, f.size)).collect();
        assert_eq!(offs, vec![(8, 4), (12, 4), (16, 1), (24, 8)]);
        assert_eq!(
            ev.print.text,
            "\"filename=%s pid=%d b=%u q=%llu\", __get_str(filename), REC->pid, REC->b, REC->q"
        );
        let e = ev.encode(
            7,
            &[
                FieldValue::Str("/bin/true"),
                FieldValue::Int(-3),
                FieldValue::UInt(300),
                FieldValue::UInt(5),
            ],
        );
        assert_eq!(&e[0..2], &40000u16.to_le_bytes());
        assert_eq!(
            u32::from_le_bytes(e[8..12].try_into().unwrap()),
            (10 << 16) | 32
        );
        let mut s = String::new();
        ev.print.render(&ev.fields, &e, &mut s);
        assert_eq!(s, "filename=/bin/true pid=-3 b=44 q=5");
    }

    #[test]
    fn printf_conversions() {
        let specs = [
            spec("u8", "ep"),
            spec("int", "st"),
            spec("u64", "urb"),
            spec("char[4]", "c"),
        ];
        let ev = EventDef::new(
            "s",
            "e",
            1,
            &specs,
            Some(r#""ep=%02x st=%d urb=%016llx c=[%-5s] [%5s] %#x %u %hhd", REC->ep, REC->st, REC->urb, REC->c, REC->c, REC->ep, REC->st, REC->ep"#),
        )
        .unwrap();
        let e = ev.encode(
            0,
            &[
                FieldValue::UInt(0x81),
                FieldValue::Int(-32),
                FieldValue::UInt(0xffff8880_1234abcd),
                FieldValue::Str("abcdef"),
            ],
        );
        let mut s = String::new();
        ev.print.render(&ev.fields, &e, &mut s);
        assert_eq!(
            s,
            "ep=81 st=-32 urb=ffff88801234abcd c=[abcd ] [ abcd] 0x81 4294967264 -127"
        );
    }

    #[test]
    fn bad_definitions() {
        assert!(EventDef::new("s", "e", 1, &[spec("float", "x")], None).is_err());
        assert!(EventDef::new("s", "e", 1, &[spec("int", "common_pid")], None).is_err());
        assert!(
            EventDef::new("s", "e", 1, &[spec("int", "x")], Some("\"%d %d\", REC->x")).is_err()
        );
        assert!(EventDef::new("s", "e", 1, &[spec("int", "x")], Some("\"%s\", REC->x")).is_err());
        assert!(EventDef::new("s", "e", 1, &[spec("int", "x")], Some("\"%d\", REC->y")).is_err());
        assert!(EventDef::new("s-x", "e", 1, &[], None).is_err());
        let ev = EventDef::new("s", "e", 1, &[], None).unwrap();
        assert_eq!(ev.print.text, "\"\"");
    }
}
