//! Event definitions in the shape of the kernel's `TRACE_EVENT`: typed fields
//! laid out after the 8-byte common header, the `format` file text, the
//! binary record encoding and the `print fmt` interpreter that renders a
//! record as the text after `name: ` in a trace line.

use std::fmt::Write as _;

use serde::Deserialize;

/// Size of `struct trace_entry` (type u16, flags u8, preempt_count u8, pid s32).
pub const COMMON_SIZE: usize = 8;

/// What a field holds, for encoding, printing and filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer of `size` bytes (1, 2, 4 or 8).
    Int {
        /// Whether the C type is signed.
        signed: bool,
    },
    /// `char name[N]`: a NUL-padded string in place.
    CharArray,
    /// `__data_loc char[] name`: a u32 `(len << 16) | offset` pointing at a
    /// NUL-terminated string after the fixed part.
    DynString,
    /// `__rel_loc char[] name` (user_events): like `DynString`, but the
    /// offset counts from the end of the 4-byte location word.
    RelString,
    /// `__data_loc` of anything but chars (user_events): printed as bytes.
    DynArray,
    /// `__rel_loc` of anything but chars (user_events): printed as bytes.
    RelArray,
    /// `struct name size` (user_events): opaque bytes.
    Opaque,
}

/// One field as the `format` file lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The C type as written (`u16`, `char[16]`, `__data_loc char[]`).
    pub ctype: String,
    /// The field name.
    pub name: String,
    /// Byte offset from the start of the entry (common header included).
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// The `signed:` column.
    pub signed: bool,
    /// How the value is stored.
    pub kind: FieldKind,
}

impl Field {
    /// The `field:` line's declaration: arrays move the brackets after the
    /// name (`char comm[16]`), `__data_loc` types print unchanged.
    pub fn decl(&self) -> String {
        if !self.ctype.starts_with("__data_loc") {
            if let Some(i) = self.ctype.find('[') {
                let base = self.ctype[..i].trim_end();
                return format!("{} {}{}", base, self.name, &self.ctype[i..]);
            }
        }
        format!("{} {}", self.ctype, self.name)
    }

    /// Whether the filter treats this field as a string.
    pub fn is_string(&self) -> bool {
        matches!(
            self.kind,
            FieldKind::CharArray | FieldKind::DynString | FieldKind::RelString
        )
    }

    /// Where the data of a `__data_loc`/`__rel_loc` field lies in `entry`
    /// (start, length), without bounds checks.
    pub fn loc_range(&self, entry: &[u8]) -> (usize, usize) {
        let loc = entry
            .get(self.offset..self.offset + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
        let mut off = (loc & 0xffff) as usize;
        if matches!(self.kind, FieldKind::RelString | FieldKind::RelArray) {
            off += self.offset + 4;
        }
        (off, (loc >> 16) as usize)
    }

    /// Read an integer field from an entry (sign-extended when signed).
    pub fn int_value(&self, entry: &[u8]) -> i128 {
        let Some(b) = entry.get(self.offset..self.offset + self.size) else {
            return 0;
        };
        let signed = matches!(self.kind, FieldKind::Int { signed: true });
        match (self.size, signed) {
            (1, false) => b[0] as i128,
            (1, true) => b[0] as i8 as i128,
            (2, false) => u16::from_le_bytes([b[0], b[1]]) as i128,
            (2, true) => i16::from_le_bytes([b[0], b[1]]) as i128,
            (4, false) => u32::from_le_bytes(b.try_into().unwrap()) as i128,
            (4, true) => i32::from_le_bytes(b.try_into().unwrap()) as i128,
            (8, false) => u64::from_le_bytes(b.try_into().unwrap()) as i128,
            (8, true) => i64::from_le_bytes(b.try_into().unwrap()) as i128,
            _ => 0,
        }
    }

    /// The bytes of a string field up to (not including) its NUL. A
    /// `char name[]` of size 0 (`ftrace:print`'s `buf`) runs to the end of
    /// the entry, as the kernel's filters read it ("len of zero means str
    /// is dynamic and ends with '\0'").
    pub fn str_value<'a>(&self, entry: &'a [u8]) -> &'a [u8] {
        let raw: &[u8] = match self.kind {
            FieldKind::CharArray if self.size == 0 => entry.get(self.offset..).unwrap_or(&[]),
            FieldKind::CharArray => entry
                .get(self.offset..self.offset + self.size)
                .unwrap_or(&[]),
            FieldKind::DynString | FieldKind::RelString => {
                let (off, len) = self.loc_range(entry);
                entry.get(off..off + len).unwrap_or(&[])
            }
            _ => &[],
        };
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        &raw[..end]
    }
}

/// The `common_*` fields every event starts with.
pub fn common_fields() -> Vec<Field> {
    let f = |ctype: &str, name: &str, offset, size, signed| Field {
        ctype: ctype.into(),
        name: name.into(),
        offset,
        size,
        signed,
        kind: FieldKind::Int { signed },
    };
    vec![
        f("unsigned short", "common_type", 0, 2, false),
        f("unsigned char", "common_flags", 2, 1, false),
        f("unsigned char", "common_preempt_count", 3, 1, false),
        f("int", "common_pid", 4, 4, true),
    ]
}

/// A field in the config (`tracing: events: [{fields: [{name, type}]}]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// Field name (C identifier).
    pub name: String,
    /// C type: `u8`..`u64`, `s8`..`s64`, `char`, `short`, `int`, `long`,
    /// `unsigned int`, `pid_t`, `bool`, `char[N]` or `__data_loc char[]`.
    #[serde(rename = "type")]
    pub ctype: String,
}

/// Size and signedness of a scalar C type (kernels since 6.2 build with
/// `-funsigned-char`, so `char` is unsigned).
fn scalar(t: &str) -> Option<(usize, bool)> {
    Some(match t {
        "u8" | "__u8" | "unsigned char" | "char" | "bool" => (1, false),
        "s8" | "__s8" | "signed char" => (1, true),
        "u16" | "__u16" | "unsigned short" => (2, false),
        "s16" | "__s16" | "short" => (2, true),
        "u32" | "__u32" | "unsigned int" | "unsigned" => (4, false),
        "s32" | "__s32" | "int" | "pid_t" => (4, true),
        "u64" | "__u64" | "unsigned long" | "unsigned long long" | "size_t" => (8, false),
        "s64" | "__s64" | "long" | "long long" | "loff_t" => (8, true),
        _ => return None,
    })
}

fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Lay out fields after the common header, each naturally aligned, as the
/// compiler lays out the `TP_STRUCT__entry` struct.
pub fn layout(specs: &[FieldSpec]) -> Result<Vec<Field>, String> {
    let mut off = COMMON_SIZE;
    let mut out: Vec<Field> = Vec::new();
    for s in specs {
        if !is_ident(&s.name) {
            return Err(format!("field name {:?} is not a C identifier", s.name));
        }
        if s.name.starts_with("common_") || common_fields().iter().any(|c| c.name == s.name) {
            return Err(format!("field name {:?} is reserved", s.name));
        }
        if out.iter().any(|f| f.name == s.name) {
            return Err(format!("duplicate field {:?}", s.name));
        }
        let t = s.ctype.split_whitespace().collect::<Vec<_>>().join(" ");
        let (size, align, signed, kind) = if t == "__data_loc char[]" {
            (4, 4, false, FieldKind::DynString)
        } else if let Some(rest) = t.strip_prefix("char[").and_then(|r| r.strip_suffix(']')) {
            let n: usize = rest
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=4096).contains(n))
                .ok_or_else(|| format!("bad array length in {:?}", s.ctype))?;
            (n, 1, false, FieldKind::CharArray)
        } else if let Some((size, signed)) = scalar(&t) {
            (size, size, signed, FieldKind::Int { signed })
        } else {
            return Err(format!(
                "unsupported field type {:?} (use u8..u64, s8..s64, int, long, char[N] or __data_loc char[])",
                s.ctype
            ));
        };
        off = off.div_ceil(align) * align;
        out.push(Field {
            ctype: t,
            name: s.name.clone(),
            offset: off,
            size,
            signed,
            kind,
        });
        off += size;
    }
    if off > 0xffff {
        return Err("event too large".into());
    }
    Ok(out)
}

/// One argument of the print format.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Arg {
    /// `REC->field`: index into the event's fields.
    Rec(usize),
    /// `__get_str(field)`.
    GetStr(usize),
}

/// A conversion in the format string.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spec {
    flags: String,
    width: Option<usize>,
    prec: Option<usize>,
    /// Bits of the length modifier: 8 (hh), 16 (h), 32 (none), 64 (l, ll, z).
    bits: u32,
    conv: char,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Lit(String),
    Conv(Spec),
}

/// A parsed `print fmt`: literal pieces, conversions and their arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrintFmt {
    /// The text after `print fmt: ` exactly as given.
    pub text: String,
    pieces: Vec<Piece>,
    args: Vec<Arg>,
}

/// Split at top-level commas, outside quotes and parentheses.
fn split_args(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut quote, mut esc, mut start) = (0i32, false, false, 0usize);
    for (i, c) in s.char_indices() {
        if quote {
            if esc {
                esc = false;
            } else if c == '\\' {
                esc = true;
            } else if c == '"' {
                quote = false;
            }
            continue;
        }
        match c {
            '"' => quote = true,
            '(' | '{' => depth += 1,
            ')' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn unescape(lit: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut it = lit.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            other => return Err(format!("unsupported escape \\{}", other.unwrap_or(' '))),
        }
    }
    Ok(out)
}

impl PrintFmt {
    /// Parse `"fmt", REC->a, __get_str(b)` against `fields`.
    pub fn parse(text: &str, fields: &[Field]) -> Result<PrintFmt, String> {
        let parts = split_args(text.trim());
        let lit = parts[0].trim();
        let inner = lit
            .strip_prefix('"')
            .and_then(|l| l.strip_suffix('"'))
            .ok_or("the print format must start with a quoted string")?;
        let s = unescape(inner)?;
        let mut pieces = Vec::new();
        let mut cur = String::new();
        let b: Vec<char> = s.chars().collect();
        let mut i = 0;
        while i < b.len() {
            if b[i] != '%' {
                cur.push(b[i]);
                i += 1;
                continue;
            }
            i += 1;
            if b.get(i) == Some(&'%') {
                cur.push('%');
                i += 1;
                continue;
            }
            let mut spec = Spec {
                flags: String::new(),
                width: None,
                prec: None,
                bits: 32,
                conv: ' ',
            };
            while let Some(&c) = b.get(i).filter(|c| "-+ #0".contains(**c)) {
                spec.flags.push(c);
                i += 1;
            }
            let num = |i: &mut usize| {
                let st = *i;
                while b.get(*i).is_some_and(|c| c.is_ascii_digit()) {
                    *i += 1;
                }
                (st < *i).then(|| b[st..*i].iter().collect::<String>().parse().unwrap_or(0))
            };
            spec.width = num(&mut i);
            if b.get(i) == Some(&'.') {
                i += 1;
                spec.prec = Some(num(&mut i).unwrap_or(0));
            }
            loop {
                match b.get(i) {
                    Some('h') => spec.bits = if spec.bits == 16 { 8 } else { 16 },
                    Some('l') | Some('z') => spec.bits = 64,
                    _ => break,
                }
                i += 1;
            }
            match b.get(i) {
                Some(&c) if "diuxXocs".contains(c) => spec.conv = c,
                other => return Err(format!("unsupported conversion %{}", other.unwrap_or(&' '))),
            }
            i += 1;
            if !cur.is_empty() {
                pieces.push(Piece::Lit(std::mem::take(&mut cur)));
            }
            pieces.push(Piece::Conv(spec));
        }
        if !cur.is_empty() {
            pieces.push(Piece::Lit(cur));
        }
        let find = |n: &str| {
            fields
                .iter()
                .position(|f| f.name == n)
                .ok_or_else(|| format!("unknown field {n:?} in print format"))
        };
        let mut args = Vec::new();
        for a in &parts[1..] {
            let a = a.trim();
            if let Some(n) = a.strip_prefix("REC->") {
                args.push(Arg::Rec(find(n.trim())?));
            } else if let Some(n) = a
                .strip_prefix("__get_str(")
                .and_then(|r| r.strip_suffix(')'))
            {
                let i = find(n.trim())?;
                if fields[i].kind != FieldKind::DynString {
                    return Err(format!("__get_str({n}) needs a __data_loc char[] field"));
                }
                args.push(Arg::GetStr(i));
            } else {
                return Err(format!(
                    "unsupported print argument {a:?} (use REC->field or __get_str(field))"
                ));
            }
        }
        let convs: Vec<&Spec> = pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Conv(s) => Some(s),
                _ => None,
            })
            .collect();
        if convs.len() != args.len() {
            return Err(format!(
                "print format has {} conversions but {} arguments",
                convs.len(),
                args.len()
            ));
        }
        for (s, a) in convs.iter().zip(&args) {
            let f = match a {
                Arg::Rec(i) | Arg::GetStr(i) => &fields[*i],
            };
            if (s.conv == 's') != f.is_string() {
                return Err(format!(
                    "conversion %{} does not fit field {}",
                    s.conv, f.name
                ));
            }
        }
        Ok(PrintFmt {
            text: text.trim().to_string(),
            pieces,
            args,
        })
    }

    /// The format user_events generates: `name=%fmt` joined by spaces.
    pub fn generated(fields: &[Field]) -> String {
        let mut fmt = String::new();
        let mut args = String::new();
        for f in fields {
            if !fmt.is_empty() {
                fmt.push(' ');
            }
            let conv = match f.kind {
                FieldKind::Int { signed } => match (f.size, signed) {
                    (8, true) => "%lld",
                    (8, false) => "%llu",
                    (_, true) => "%d",
                    (_, false) => "%u",
                },
                _ => "%s",
            };
            let _ = write!(fmt, "{}={}", f.name, conv);
            if f.kind == FieldKind::DynString {
                let _ = write!(args, ", __get_str({})", f.name);
            } else {
                let _ = write!(args, ", REC->{}", f.name);
            }
        }
        format!("\"{fmt}\"{args}")
    }

    /// Render an entry.
    pub fn render(&self, fields: &[Field], entry: &[u8], out: &mut String) {
        let mut args = self.args.iter();
        for p in &self.pieces {
            match p {
                Piece::Lit(s) => out.push_str(s),
                Piece::Conv(spec) => {
                    let Some(a) = args.next() else { return };
                    let f = match a {
                        Arg::Rec(i) | Arg::GetStr(i) => &fields[*i],
                    };
                    let body = if spec.conv == 's' {
                        // The precision counts bytes, as in C.
                        let raw = f.str_value(entry);
                        let raw = spec.prec.map_or(raw, |p| &raw[..p.min(raw.len())]);
                        crate::base::bytestr::text(raw).into_owned()
                    } else {
                        int_conv(spec, f.int_value(entry))
                    };
                    pad(out, spec, &body);
                }
            }
        }
    }
}

fn int_conv(spec: &Spec, v: i128) -> String {
    let mask: u128 = if spec.bits == 64 {
        u64::MAX as u128
    } else {
        (1u128 << spec.bits) - 1
    };
    let u = (v as u128) & mask;
    let signed = if u >> (spec.bits - 1) & 1 == 1 {
        u as i128 - (1i128 << spec.bits)
    } else {
        u as i128
    };
    let alt = spec.flags.contains('#');
    let mut s = match spec.conv {
        'd' | 'i' => {
            let mut s = signed.to_string();
            if signed >= 0 && spec.flags.contains('+') {
                s.insert(0, '+');
            } else if signed >= 0 && spec.flags.contains(' ') {
                s.insert(0, ' ');
            }
            s
        }
        'u' => u.to_string(),
        'x' => format!("{}{:x}", if alt && u != 0 { "0x" } else { "" }, u),
        'X' => format!("{}{:X}", if alt && u != 0 { "0X" } else { "" }, u),
        'o' => format!("{}{:o}", if alt && u != 0 { "0" } else { "" }, u),
        'c' => ((u & 0xff) as u8 as char).to_string(),
        _ => String::new(),
    };
    if let Some(p) = spec.prec {
        let neg = s.starts_with('-');
        let digits = s.trim_start_matches('-').len();
        if digits < p {
            let zeros = "0".repeat(p - digits);
            s.insert_str(neg as usize, &zeros);
        }
    }
    s
}

fn pad(out: &mut String, spec: &Spec, body: &str) {
    let w = spec.width.unwrap_or(0);
    let n = body.chars().count();
    if n >= w {
        out.push_str(body);
    } else if spec.flags.contains('-') {
        out.push_str(body);
        out.extend(std::iter::repeat_n(' ', w - n));
    } else if spec.flags.contains('0') && spec.conv != 's' && spec.prec.is_none() {
        let (sign, digits) = match body.as_bytes().first() {
            Some(b'-') | Some(b'+') | Some(b' ') => body.split_at(1),
            _ => ("", body),
        };
        let (prefix, digits) = if digits.starts_with("0x") || digits.starts_with("0X") {
            digits.split_at(2)
        } else {
            ("", digits)
        };
        out.push_str(sign);
        out.push_str(prefix);
        out.extend(std::iter::repeat_n('0', w - n));
        out.push_str(digits);
    } else {
        out.extend(std::iter::repeat_n(' ', w - n));
        out.push_str(body);
    }
}

/// A field value handed to [`super::Tracing::emit`], in field order.
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
    Probe(std::sync::Arc<super::eprobe::ProbePrint>),
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
    ) -> Result<EventDef, String> {
        if !is_ident(system) || !is_ident(name) {
            return Err(format!(
                "{system}:{name}: system and event names must be C identifiers"
            ));
        }
        let fields = layout(specs).map_err(|e| format!("{system}:{name}: {e}"))?;
        let text = match print {
            Some(p) => p.to_string(),
            None => PrintFmt::generated(&fields),
        };
        let print = PrintFmt::parse(&text, &fields).map_err(|e| format!("{system}:{name}: {e}"))?;
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
            print: PrintFmt {
                text: print_text,
                pieces: Vec::new(),
                args: Vec::new(),
            },
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

/// The printf conversion of a synthetic event field of type `ty`
/// (`synth_field_fmt()`).
pub fn synth_field_fmt(ty: &str) -> &'static str {
    match ty {
        "s64" => "%lld",
        "u64" => "%llu",
        "s32" | "s16" | "s8" | "char" | "int" | "bool" | "pid_t" => "%d",
        "u32" | "u16" | "u8" | "unsigned char" | "unsigned int" => "%u",
        "long" => "%ld",
        "unsigned long" => "%lu",
        "gfp_t" => "%x",
        t if t.contains("char[") => "%.*s",
        t if t.contains("long[") => "%s",
        _ => "%llu",
    }
}

/// A synthetic event's fields as its trace line shows them
/// (`print_synth_event()`): ` a=1 s=text`; numbers of 1, 2 and 4 bytes are
/// taken unsigned in their size, then printed with the type's conversion
/// (`%d` of a 4-byte value is signed); a stack trace prints
/// `name=STACK:` and one `=> address` line per entry.
pub fn render_synth(fields: &[Field], entry: &[u8], out: &mut String) {
    out.push(' ');
    for (i, f) in fields.iter().enumerate() {
        let conv = synth_field_fmt(&f.ctype);
        let sep = if i + 1 == fields.len() { "" } else { " " };
        match f.kind {
            FieldKind::CharArray => {
                let raw = entry.get(f.offset..).unwrap_or(&[]);
                let raw = &raw[..raw.len().min(256)];
                let _ = write!(out, "{}=", f.name);
                push_cstr(out, raw);
                out.push_str(sep);
            }
            FieldKind::DynString => {
                let (off, _) = f.loc_range(entry);
                let raw = entry.get(off..).unwrap_or(&[]);
                let _ = write!(out, "{}=", f.name);
                push_cstr(out, &raw[..raw.len().min(256)]);
                out.push_str(sep);
            }
            FieldKind::DynArray => {
                let (off, len) = f.loc_range(entry);
                let _ = writeln!(out, "{}=STACK:", f.name);
                let end = (off + len).saturating_sub(7);
                let mut p = off;
                while p + 8 <= entry.len() && p < end {
                    let a = u64::from_le_bytes(entry[p..p + 8].try_into().unwrap());
                    if a == 0 {
                        break;
                    }
                    let _ = writeln!(out, "=> 0x{a:x}");
                    p += 8;
                }
            }
            _ => {
                let v = f.int_value(entry) as u64;
                let v = match f.size {
                    1 => v & 0xff,
                    2 => v & 0xffff,
                    4 => v & 0xffff_ffff,
                    _ => v,
                };
                let text = match conv {
                    "%d" if f.size == 4 => (v as u32 as i32).to_string(),
                    "%lld" | "%ld" => (v as i64).to_string(),
                    "%x" => format!("{v:x}"),
                    _ => v.to_string(),
                };
                let _ = write!(out, "{}={text}{sep}", f.name);
            }
        }
    }
}

/// `%.*s`: the bytes up to the first NUL.
fn push_cstr(out: &mut String, b: &[u8]) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    out.push_str(&crate::base::bytestr::text(&b[..end]));
}

/// The 6.4+ generic field printer (`print_fields()` in trace_output.c, as
/// the reference describes it, for a 64-bit kernel): ` name=value` per
/// field, `No fields found` without fields.
pub fn render_fields(fields: &[Field], entry: &[u8], out: &mut String) {
    if fields.is_empty() {
        out.push_str("No fields found");
        return;
    }
    for f in fields {
        let _ = write!(out, " {}=", f.name);
        let Some(raw) = entry.get(f.offset..f.offset + f.size) else {
            out.push_str("<OVERFLOW>");
            continue;
        };
        match f.kind {
            FieldKind::CharArray => push_cstr(out, raw),
            FieldKind::DynString | FieldKind::RelString => {
                let (off, len) = f.loc_range(entry);
                match entry.get(off..off + len) {
                    Some(b) => push_cstr(out, b),
                    None => out.push_str("<OVERFLOW>"),
                }
            }
            _ if f.size == 4 && matches!(f.kind, FieldKind::DynArray | FieldKind::RelArray) => {
                let (off, len) = f.loc_range(entry);
                match entry.get(off..off + len) {
                    Some(b) => {
                        for (i, c) in b.iter().enumerate() {
                            if i > 0 {
                                out.push(',');
                            }
                            let _ = write!(out, "{c:02x}");
                        }
                    }
                    None => out.push_str("<OVERFLOW>"),
                }
            }
            _ => match f.size {
                1 => {
                    let c = raw[0];
                    if (0x20..0x7f).contains(&c) {
                        let _ = write!(out, "'{}'", c as char);
                    }
                    let _ = write!(out, "({c})");
                }
                2 => {
                    let v = u16::from_le_bytes([raw[0], raw[1]]);
                    let _ = write!(out, "0x{v:x} ({v})");
                }
                4 => {
                    let v = u32::from_le_bytes(raw.try_into().unwrap());
                    let _ = write!(out, "0x{v:x} ({})", v as i32);
                }
                8 => {
                    // %pS: user values are never kernel symbols, so it shows
                    // the plain hex value.
                    let v = u64::from_le_bytes(raw.try_into().unwrap());
                    let _ = write!(out, "0x{v:x} ({})", v as i64);
                }
                _ => out.push_str("<INVALID-SIZE>"),
            },
        }
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
