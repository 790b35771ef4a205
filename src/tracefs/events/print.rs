//! The `print fmt` interpreter that renders a record as the text after
//! `name: ` in a trace line, as the kernel's generated `trace_raw_output_*`
//! functions print it (`include/trace/trace_events.h`), and the generic
//! field printers of events without one: user events (`print_fields()` of
//! `kernel/trace/trace_output.c`) and synthetic events
//! (`print_synth_event()` of `kernel/trace/trace_events_synth.c`).

use std::fmt::Write as _;

use super::error::DefError;
use super::field::{Field, FieldKind};

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

fn unescape(lit: &str) -> Result<String, DefError> {
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
            other => return Err(DefError::Escape(other.unwrap_or(' '))),
        }
    }
    Ok(out)
}

impl PrintFmt {
    /// A format shown verbatim in `format` and never interpreted (trace
    /// lines of its event use the generic field printer).
    pub fn verbatim(text: String) -> PrintFmt {
        PrintFmt {
            text,
            pieces: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Parse `"fmt", REC->a, __get_str(b)` against `fields`.
    pub fn parse(text: &str, fields: &[Field]) -> Result<PrintFmt, DefError> {
        let parts = split_args(text.trim());
        let lit = parts[0].trim();
        let inner = lit
            .strip_prefix('"')
            .and_then(|l| l.strip_suffix('"'))
            .ok_or(DefError::NoFormatString)?;
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
                other => return Err(DefError::Conversion(*other.unwrap_or(&' '))),
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
                .ok_or_else(|| DefError::UnknownField(n.to_string()))
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
                    return Err(DefError::GetStrField(n.to_string()));
                }
                args.push(Arg::GetStr(i));
            } else {
                return Err(DefError::PrintArg(a.to_string()));
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
            return Err(DefError::ArgCount {
                convs: convs.len(),
                args: args.len(),
            });
        }
        for (s, a) in convs.iter().zip(&args) {
            let f = match a {
                Arg::Rec(i) | Arg::GetStr(i) => &fields[*i],
            };
            if (s.conv == 's') != f.is_string() {
                return Err(DefError::ConversionField {
                    conv: s.conv,
                    field: f.name.clone(),
                });
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
