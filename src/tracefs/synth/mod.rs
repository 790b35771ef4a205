//! Synthetic events (`synthetic_events`, `s:` in `dynamic_events`): the
//! command grammar, the field types, the record layout, the `format` file's
//! print format and the trace line, as `kernel/trace/trace_events_synth.c`
//! (Debian's 6.12) has them, written from reading it.
//!
//! Grammar: `name type field[; type field]...` (the old form without
//! semicolons still works: `name u64 lat pid_t pid`), `!name` removes.
//! Types: `s64 u64 s32 u32 s16 u16 s8 u8 char int long bool pid_t gfp_t`,
//! `unsigned char|int|long`, `char name[N]` (N up to 256: a string of N
//! bytes in a 256-byte slot), `char name[]` or `char[] name` (a
//! `__data_loc` string) and `long[] name` / `unsigned long[] name` (a
//! `__data_loc` stack trace).
//!
//! Record layout (`synth_event_define_fields()`): after the 8-byte common
//! header every field takes one u64 slot (numbers stored in their own size
//! at the slot's start, dynamic fields as a `__data_loc` word), except
//! fixed strings, which take 256 bytes; dynamic data follows the slots.

pub(crate) mod files;

use std::fmt::Write as _;

use crate::tracefs::events::{EventDef, Field, FieldKind, COMMON_SIZE};

/// The system synthetic events are in.
pub const SYSTEM: &str = "synthetic";
/// `SYNTH_FIELDS_MAX`.
pub const FIELDS_MAX: usize = 64;
/// `STR_VAR_LEN_MAX`: the slot of a fixed string and the longest string.
pub const STR_VAR_LEN_MAX: usize = 256;
/// `HIST_STACKTRACE_DEPTH`.
pub const STACK_DEPTH: usize = 16;

/// The kernel's synthetic event parse errors (`err_text[]` of
/// trace_events_synth.c), logged to the top-level `error_log` under
/// `synthetic_events`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SynthErr {
    /// `BAD_NAME`.
    BadName,
    /// `INVALID_CMD`.
    InvalidCmd,
    /// `INVALID_DYN_CMD`.
    InvalidDynCmd,
    /// `EVENT_EXISTS`.
    EventExists,
    /// `TOO_MANY_FIELDS`.
    TooManyFields,
    /// `INCOMPLETE_TYPE`.
    IncompleteType,
    /// `INVALID_TYPE`.
    InvalidType,
    /// `INVALID_FIELD`.
    InvalidField,
    /// `INVALID_ARRAY_SPEC`.
    InvalidArraySpec,
}

impl SynthErr {
    /// The message `error_log` shows.
    pub fn text(self) -> &'static str {
        match self {
            SynthErr::BadName => "Illegal name",
            SynthErr::InvalidCmd => "Command must be of the form: <name> field[;field] ...",
            SynthErr::InvalidDynCmd => {
                "Command must be of the form: s or -:[synthetic/]<name> field[;field] ..."
            }
            SynthErr::EventExists => "Event already exists",
            SynthErr::TooManyFields => "Too many fields",
            SynthErr::IncompleteType => "Incomplete type",
            SynthErr::InvalidType => "Invalid type",
            SynthErr::InvalidField => "Invalid field",
            SynthErr::InvalidArraySpec => "Invalid array specification",
        }
    }
}

/// A failed command: the errno and, when the kernel logs one, the error
/// and its caret position in the command.
#[derive(Debug, PartialEq, Eq)]
pub struct CmdError {
    /// The errno the write fails with.
    pub errno: crate::base::errno::Errno,
    /// What `error_log` gets.
    pub log: Option<(SynthErr, usize)>,
}

fn err(e: SynthErr, pos: usize) -> CmdError {
    CmdError {
        errno: crate::base::errno::Errno::EINVAL,
        log: Some((e, pos)),
    }
}

/// One field of a synthetic event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthField {
    /// The type as the kernel keeps it (`u64`, `unsigned int`, `char[16]`,
    /// `__data_loc char[]`, `__data_loc unsigned long[]`).
    pub ty: String,
    /// The name.
    pub name: String,
    /// The `size:` of the format file (8 for dynamic fields).
    pub size: usize,
    /// The `signed:` column: every type but those starting with `u` and
    /// `gfp_t`.
    pub signed: bool,
    /// A string (fixed or dynamic).
    pub is_string: bool,
    /// A `__data_loc` field.
    pub is_dynamic: bool,
    /// A stack trace.
    pub is_stack: bool,
}

impl SynthField {
    /// The type `synthetic_events` shows (without `__data_loc `).
    pub fn shown_type(&self) -> &str {
        self.ty.strip_prefix("__data_loc ").unwrap_or(&self.ty)
    }

    /// The printf conversion of the field (`synth_field_fmt()`).
    pub fn fmt(&self) -> &'static str {
        crate::tracefs::events::synth_field_fmt(&self.ty)
    }
}

/// A synthetic event's definition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SynthDef {
    /// The event name.
    pub name: String,
    /// The fields, in order.
    pub fields: Vec<SynthField>,
}

/// What a command asks for.
#[derive(Debug, PartialEq, Eq)]
pub enum Command {
    /// A blank line: nothing.
    Nothing,
    /// Define an event (the caller checks that the name is free and logs
    /// [`SynthErr::EventExists`] at the name's position otherwise).
    Create(SynthDef),
    /// `!name`: remove the event.
    Delete(String),
}

/// `is_good_name()`: a C identifier.
pub fn is_good_name(s: &str) -> bool {
    let mut c = s.bytes();
    matches!(c.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && c.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

fn is_blank(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// Where `s` first occurs in `cmd` (the kernel's `err_pos()`), 0 if not.
fn pos(cmd: &str, s: &str) -> usize {
    cmd.find(s).unwrap_or(0)
}

/// `check_command()`: a command that is not a removal needs a name and a
/// whole field before its first `;`.
fn check_command(cmd: &str) -> bool {
    let first = cmd.split(';').next().unwrap_or("");
    first.starts_with('!') || first.split_whitespace().count() >= 3
}

/// The size of a type (`synth_field_size()`): `Some(0)` for dynamic
/// strings and stacks, `None` for a bad array size, `Some(0)` with no
/// string or stack for an unknown type.
fn type_size(ty: &str) -> Option<usize> {
    Some(match ty {
        "s64" | "u64" | "long" | "unsigned long" => 8,
        "s32" | "u32" | "int" | "unsigned int" | "pid_t" | "gfp_t" => 4,
        "s16" | "u16" => 2,
        "s8" | "u8" | "char" | "unsigned char" | "bool" => 1,
        t if t.contains("char[") => return string_size(t),
        t if t.contains("long[") => 0,
        _ => 0,
    })
}

/// `synth_field_string_size()`: `char[N]` with N of at most three
/// characters (`kstrtouint` base 0) and at most 256; `char[]` is 0.
fn string_size(ty: &str) -> Option<usize> {
    let start = ty.find("char[")? + 5;
    let end = ty.find(']')?;
    if end < start || end + 1 != ty.len() {
        return None;
    }
    let digits = &ty[start..end];
    if digits.len() > 3 {
        return None;
    }
    if digits.is_empty() {
        return Some(0);
    }
    // `kstrtouint(.., 0, ..)`: 0x for hex, a leading 0 for octal.
    let (radix, body) = match digits
        .strip_prefix("0x")
        .or_else(|| digits.strip_prefix("0X"))
    {
        Some(h) => (16, h),
        None if digits.len() > 1 && digits.starts_with('0') => (8, &digits[1..]),
        None => (10, digits),
    };
    if body.is_empty() || body.starts_with('+') {
        return None;
    }
    let n = u64::from_str_radix(body, radix).ok()?;
    (n as usize <= STR_VAR_LEN_MAX).then_some(n as usize)
}

/// `parse_synth_field()` on the words of one `;`-separated part, from
/// `words[at]`: the field and how many words it took.
fn parse_field(cmd: &str, words: &[&str]) -> Result<(SynthField, usize), CmdError> {
    let (prefix, ty, name, used) = if words[0] == "unsigned" {
        if words.len() < 3 {
            return Err(err(SynthErr::IncompleteType, pos(cmd, words[0])));
        }
        ("unsigned ", words[1], Some(words[2]), 3)
    } else {
        ("", words[0], words.get(1).copied(), 2)
    };
    let Some(name) = name else {
        return Err(err(SynthErr::InvalidField, pos(cmd, ty)));
    };
    let (bare, array) = match name.find('[') {
        Some(i) => (&name[..i], &name[i..]),
        None => (name, ""),
    };
    if !is_good_name(bare) {
        return Err(err(SynthErr::BadName, pos(cmd, name)));
    }
    let mut full = format!("{prefix}{ty}{array}");
    let size = match type_size(&full) {
        None if !array.is_empty() => return Err(err(SynthErr::InvalidArraySpec, pos(cmd, name))),
        None => return Err(err(SynthErr::InvalidType, pos(cmd, ty))),
        Some(s) => s,
    };
    let is_string = full.contains("char[");
    let is_stack = !is_string && full.contains("long[");
    let mut is_dynamic = false;
    let size = if size == 0 {
        if !is_string && !is_stack {
            return Err(err(SynthErr::InvalidType, pos(cmd, ty)));
        }
        full = format!("__data_loc {full}");
        is_dynamic = true;
        8
    } else {
        size
    };
    let signed = !(full.starts_with('u') || full == "gfp_t");
    Ok((
        SynthField {
            ty: full,
            name: bare.to_string(),
            size,
            signed,
            is_string,
            is_dynamic,
            is_stack,
        },
        used,
    ))
}

/// `__create_synth_event()` after the name: the fields.
fn parse_fields(cmd: &str, name: &str, raw: &str) -> Result<SynthDef, CmdError> {
    if name.is_empty() {
        return Err(err(SynthErr::InvalidCmd, 0));
    }
    if !is_good_name(name) {
        return Err(err(SynthErr::BadName, pos(cmd, name)));
    }
    let mut fields: Vec<SynthField> = Vec::new();
    for part in raw.split(';') {
        let words: Vec<&str> = part.split(is_blank).filter(|w| !w.is_empty()).collect();
        let mut at = 0;
        while at < words.len() {
            let (f, used) = parse_field(cmd, &words[at..])?;
            at += used;
            if fields.len() == FIELDS_MAX {
                return Err(err(SynthErr::TooManyFields, 0));
            }
            fields.push(f);
        }
    }
    if fields.is_empty() {
        return Err(err(SynthErr::InvalidCmd, 0));
    }
    Ok(SynthDef {
        name: name.to_string(),
        fields,
    })
}

/// Parse one line written to `synthetic_events`
/// (`create_or_delete_synth_event()`). Errors carry what the kernel logs,
/// with positions in the line after its leading blanks (the command
/// `error_log` shows: see [`command_text`]).
pub fn parse_command(line: &str) -> Result<Command, CmdError> {
    let cmd = command_text(line);
    if cmd.is_empty() {
        return Ok(Command::Nothing);
    }
    if !check_command(cmd) {
        return Err(err(SynthErr::InvalidCmd, 0));
    }
    let p = cmd.find([' ', '\t']);
    if p.is_none() && !cmd.starts_with('!') {
        return Err(err(SynthErr::InvalidCmd, 0));
    }
    let name = &cmd[..p.unwrap_or(cmd.len())];
    if let Some(n) = name.strip_prefix('!') {
        return Ok(Command::Delete(n.to_string()));
    }
    let fields = cmd[p.unwrap_or(cmd.len())..].trim_start_matches(is_blank);
    parse_fields(cmd, name, fields).map(Command::Create)
}

/// Parse an `s:[synthetic/]name fields` line of `dynamic_events`
/// (`create_synth_event()`): `None` when the line is not a synthetic
/// event's (another kind of dynamic event should take it).
pub fn parse_dyn_command(line: &str) -> Option<Result<Command, CmdError>> {
    let cmd = command_text(line);
    if cmd.is_empty() {
        return Some(Ok(Command::Nothing));
    }
    let rest = cmd.strip_prefix("s:")?;
    Some((|| {
        let Some(p) = cmd.find([' ', '\t']) else {
            return Err(err(SynthErr::InvalidCmd, 0));
        };
        let fields = cmd[p..].trim_start_matches(is_blank);
        let mut name_at = 2;
        if rest.contains('/') {
            if !rest.starts_with("synthetic/") {
                return Err(err(SynthErr::InvalidDynCmd, 0));
            }
            name_at += "synthetic/".len();
        }
        if !check_command(&cmd[name_at..]) {
            return Err(err(SynthErr::InvalidCmd, 0));
        }
        let name = cmd.get(name_at..p).unwrap_or("");
        parse_fields(cmd, name, fields).map(Command::Create)
    })())
}

/// The command text the kernel keeps for `error_log` (`last_cmd`): the
/// line without its leading blanks.
pub fn command_text(line: &str) -> &str {
    line.trim_start_matches(is_blank)
}

impl SynthDef {
    /// The `synthetic_events` line (`name\tfield; field`, newline
    /// included); `dynamic_events` shows it after `s:synthetic/`.
    pub fn show(&self) -> String {
        let mut s = format!("{}\t", self.name);
        for (i, f) in self.fields.iter().enumerate() {
            if i > 0 {
                s.push_str("; ");
            }
            let _ = write!(s, "{} {}", f.shown_type(), f.name);
        }
        s.push('\n');
        s
    }

    /// The `print fmt` of the `format` file.
    pub fn print_fmt(&self) -> String {
        let mut s = String::from("\"");
        for (i, f) in self.fields.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "{}={}", f.name, f.fmt());
        }
        s.push('"');
        for f in &self.fields {
            if f.is_string && f.is_dynamic {
                let _ = write!(s, ", __get_str({})", f.name);
            } else if f.is_stack {
                let _ = write!(s, ", __get_stacktrace({})", f.name);
            } else {
                let _ = write!(s, ", REC->{}", f.name);
            }
        }
        s
    }

    /// The fields as the `format` file lists them, laid out in u64 slots
    /// (fixed strings in 256-byte ones).
    pub fn layout(&self) -> (Vec<Field>, usize) {
        let mut off = COMMON_SIZE;
        let mut out = Vec::new();
        for f in &self.fields {
            let kind = if f.is_string && f.is_dynamic {
                FieldKind::DynString
            } else if f.is_stack {
                FieldKind::DynArray
            } else if f.is_string {
                FieldKind::CharArray
            } else {
                FieldKind::Int { signed: f.signed }
            };
            out.push(Field {
                ctype: f.ty.clone(),
                name: f.name.clone(),
                offset: off,
                size: f.size,
                signed: f.signed,
                kind,
            });
            off += if f.is_string && !f.is_dynamic {
                STR_VAR_LEN_MAX
            } else {
                8
            };
        }
        (out, off)
    }

    /// The event definition with type id `id`.
    pub fn event_def(&self, id: u16) -> EventDef {
        let (fields, fixed) = self.layout();
        let mut d = EventDef::with_fields(SYSTEM, &self.name, id, fields, self.print_fmt());
        d.fixed_size = fixed;
        d.render = crate::tracefs::events::Render::Synth;
        d
    }

    /// A record of the event (`trace_event_raw_event_synth()`): the common
    /// header with `pid`, then `vals` in field order (strings cut at 255
    /// bytes plus NUL for fixed ones; a stack's addresses up to 16 and a
    /// terminating zero when it fits).
    pub fn encode(&self, id: u16, pid: u32, vals: &[SynthVal]) -> Vec<u8> {
        let (fields, fixed) = self.layout();
        let mut e = vec![0u8; fixed];
        e[0..2].copy_from_slice(&id.to_le_bytes());
        e[4..8].copy_from_slice(&pid.to_le_bytes());
        for (i, (sf, f)) in self.fields.iter().zip(&fields).enumerate() {
            let v = vals.get(i).cloned().unwrap_or(SynthVal::Num(0));
            if sf.is_string {
                let bytes = match &v {
                    SynthVal::Str(b) => b.clone(),
                    _ => Vec::new(),
                };
                let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
                let s = &bytes[..end.min(STR_VAR_LEN_MAX - 1)];
                if sf.is_dynamic {
                    let off = e.len();
                    e.extend_from_slice(s);
                    e.push(0);
                    let loc = ((s.len() as u32 + 1) << 16) | off as u32;
                    e[f.offset..f.offset + 4].copy_from_slice(&loc.to_le_bytes());
                } else {
                    e[f.offset..f.offset + s.len()].copy_from_slice(s);
                }
            } else if sf.is_stack {
                let addrs = match &v {
                    SynthVal::Stack(a) => a.clone(),
                    _ => Vec::new(),
                };
                let mut n = addrs
                    .iter()
                    .take(STACK_DEPTH)
                    .take_while(|&&a| a != 0)
                    .count();
                if n < STACK_DEPTH {
                    n += 1;
                }
                let off = e.len();
                for k in 0..n {
                    e.extend_from_slice(&addrs.get(k).copied().unwrap_or(0).to_le_bytes());
                }
                let loc = (((n * 8) as u32) << 16) | off as u32;
                e[f.offset..f.offset + 4].copy_from_slice(&loc.to_le_bytes());
            } else {
                let x = match v {
                    SynthVal::Num(n) => n,
                    _ => 0,
                };
                e[f.offset..f.offset + sf.size].copy_from_slice(&x.to_le_bytes()[..sf.size]);
            }
        }
        e
    }
}

/// A value handed to a synthetic event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SynthVal {
    /// A number (stored in the field's size).
    Num(u64),
    /// A string's bytes.
    Str(Vec<u8>),
    /// A stack trace's addresses.
    Stack(Vec<u64>),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logged(cmd: &str) -> (SynthErr, usize) {
        parse_command(cmd).unwrap_err().log.unwrap()
    }

    #[test]
    fn syntax_errors_log_the_kernels_positions() {
        // trigger-synthetic_event_syntax_errors.tc, caret by caret.
        let cases: &[(&str, SynthErr)] = &[
            ("myevent ^chr arg", SynthErr::InvalidType),
            ("myevent ^unsigned arg", SynthErr::IncompleteType),
            ("myevent char ^str]; int v", SynthErr::BadName),
            ("^mye-vent char str[]", SynthErr::BadName),
            ("myevent char ^st-r[]", SynthErr::BadName),
            ("myevent char str;^[]", SynthErr::InvalidField),
            ("myevent char str; ^int", SynthErr::InvalidField),
            ("myevent char ^str[; int v", SynthErr::InvalidArraySpec),
            ("myevent char ^str[kdjdk]", SynthErr::InvalidArraySpec),
            ("myevent char ^str[257]", SynthErr::InvalidArraySpec),
            ("^mye;vent char str[]", SynthErr::InvalidCmd),
            ("^myevent ; char str[]", SynthErr::InvalidCmd),
            ("^myevent; char str[]", SynthErr::InvalidCmd),
            ("^myevent ;char str[]", SynthErr::InvalidCmd),
            ("^; char str[]", SynthErr::InvalidCmd),
            ("^;myevent char str[]", SynthErr::InvalidCmd),
            ("^myevent", SynthErr::InvalidCmd),
        ];
        for (c, e) in cases {
            let at = c.find('^').unwrap();
            let cmd = c.replace('^', "");
            assert_eq!(logged(&cmd), (*e, at), "{c}");
        }
        let d = parse_dyn_command("s:junk/myevent char str[").unwrap();
        assert_eq!(d.unwrap_err().log, Some((SynthErr::InvalidDynCmd, 0)));
        assert!(parse_dyn_command("u:foo u32 a").is_none());
    }

    #[test]
    fn types_and_layout_follow_the_kernel() {
        let Command::Create(d) =
            parse_command("wakeup_latency  u64 lat pid_t pid char comm[16]").unwrap()
        else {
            panic!()
        };
        assert_eq!(
            d.show(),
            "wakeup_latency\tu64 lat; pid_t pid; char[16] comm\n"
        );
        assert_eq!(
            d.print_fmt(),
            "\"lat=%llu, pid=%d, comm=%.*s\", REC->lat, REC->pid, REC->comm"
        );
        let (f, fixed) = d.layout();
        assert_eq!(
            f.iter()
                .map(|f| (f.offset, f.size, f.signed))
                .collect::<Vec<_>>(),
            vec![(8, 8, false), (16, 4, true), (24, 16, true)]
        );
        assert_eq!(fixed, 24 + 256);
        let Command::Create(d) =
            parse_command("myevent unsigned long[] stack; char[] file; unsigned int x").unwrap()
        else {
            panic!()
        };
        assert_eq!(d.fields[0].ty, "__data_loc unsigned long[]");
        assert!(d.fields[0].is_stack && d.fields[0].signed);
        assert_eq!(d.fields[1].ty, "__data_loc char[]");
        assert!(d.fields[1].is_string && d.fields[1].is_dynamic && d.fields[1].signed);
        assert_eq!(d.fields[2].fmt(), "%u");
        assert_eq!(
            d.show(),
            "myevent\tunsigned long[] stack; char[] file; unsigned int x\n"
        );
        assert_eq!(
            parse_command("!myevent").unwrap(),
            Command::Delete("myevent".into())
        );
        assert_eq!(parse_command("  ").unwrap(), Command::Nothing);
        assert!(parse_command("myevent").is_err());
        let Some(Ok(Command::Create(d))) = parse_dyn_command("s:synthetic/l1 u64 lat; pid_t pid;")
        else {
            panic!()
        };
        assert_eq!(d.name, "l1");
        assert_eq!(d.fields.len(), 2);
    }

    #[test]
    fn encoding_puts_strings_in_their_slots() {
        let Command::Create(d) = parse_command("e u8 a; char s[4]; char d[]").unwrap() else {
            panic!()
        };
        let vals = [
            SynthVal::Num(0x1ff),
            SynthVal::Str(b"abcdef".to_vec()),
            SynthVal::Str(b"xy".to_vec()),
        ];
        let e = d.encode(7, 42, &vals);
        assert_eq!(e[8], 0xff);
        assert_eq!(&e[16..22], b"abcdef");
        let (f, _) = d.layout();
        assert_eq!(f[2].str_value(&e), b"xy");
    }
}
