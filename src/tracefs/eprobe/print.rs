//! The fetch types of probe arguments and how a probe's trace line prints
//! them (kernel/trace/trace_probe.c's `probe_fetch_types` and print
//! functions, trace_eprobe.c's `print_eprobe_event`).

use std::fmt::Write as _;

/// How an argument stores and prints its value (`struct fetch_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Unsigned,
    Signed,
    Hex,
    Char,
    Symbol,
    /// `string`, `ustring` (user memory) or `symstr`.
    Str(StrKind),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrKind {
    Kernel,
    User,
    Symbol,
}

/// A fetch type: its kind and its size in the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchType {
    pub kind: Kind,
    pub size: usize,
}

impl FetchType {
    pub fn is_string(self) -> bool {
        matches!(self.kind, Kind::Str(_))
    }

    /// The C type the `format` file shows (`fmttype`).
    pub fn fmttype(self) -> String {
        match self.kind {
            Kind::Str(_) => "__data_loc char[]".into(),
            Kind::Signed => format!("s{}", self.size * 8),
            _ => format!("u{}", self.size * 8),
        }
    }

    /// The printf conversion of the print format.
    pub fn fmt(self) -> &'static str {
        match (self.kind, self.size) {
            (Kind::Str(_), _) => "\\\"%s\\\"",
            (Kind::Char, _) => "'%c'",
            (Kind::Symbol, _) => "%pS",
            (Kind::Unsigned, 8) => "%Lu",
            (Kind::Unsigned, _) => "%u",
            (Kind::Signed, 8) => "%Ld",
            (Kind::Signed, _) => "%d",
            (Kind::Hex, 8) => "0x%Lx",
            (Kind::Hex, _) => "0x%x",
        }
    }
}

/// What printing a probe's entries needs: the attached event's name and
/// the arguments.
#[derive(Debug, PartialEq, Eq)]
pub struct ProbePrint {
    target: String,
    args: Vec<(String, FetchType, usize, usize)>,
}

impl ProbePrint {
    /// The printer of a probe on `target` (`SYSTEM.EVENT`) with `args`:
    /// name, type, array length (0: none) and offset in the entry.
    pub fn new(target: String, args: Vec<(String, FetchType, usize, usize)>) -> ProbePrint {
        ProbePrint { target, args }
    }

    /// ` (SYSTEM.EVENT) name=value ...` (`print_eprobe_event`).
    pub fn render(&self, entry: &[u8], out: &mut String) {
        let _ = write!(out, " ({})", self.target);
        for (name, ty, count, offset) in &self.args {
            let _ = write!(out, " {name}=");
            let at = *offset;
            if *count == 0 {
                print_value(*ty, entry, at, out);
                continue;
            }
            out.push('{');
            for j in 0..*count {
                print_value(*ty, entry, at + j * ty.size, out);
                out.push(if j + 1 == *count { '}' } else { ',' });
            }
        }
    }
}

/// Print one stored value of type `ty` at `at` in `entry`.
fn print_value(ty: FetchType, entry: &[u8], at: usize, out: &mut String) {
    let raw = |n: usize| -> u64 {
        let mut b = [0u8; 8];
        if let Some(s) = entry.get(at..at + n) {
            b[..n].copy_from_slice(s);
        }
        u64::from_le_bytes(b)
    };
    let v = raw(ty.size.min(8));
    match ty.kind {
        Kind::Str(_) => {
            let loc = raw(4) as u32;
            let (len, off) = ((loc >> 16) as usize, (loc & 0xffff) as usize);
            if len == 0 {
                out.push_str("(fault)");
            } else {
                let s = entry.get(off..off + len).unwrap_or(&[]);
                let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
                let _ = write!(out, "\"{}\"", crate::base::bytestr::text(&s[..end]));
            }
        }
        Kind::Char => out.push_str(&format!("'{}'", crate::base::bytestr::text(&[v as u8]))),
        Kind::Symbol => {
            let _ = write!(out, "0x{v:x}");
        }
        Kind::Unsigned => {
            let _ = write!(out, "{v}");
        }
        Kind::Hex => {
            let _ = write!(out, "0x{v:x}");
        }
        Kind::Signed => {
            let shift = 64 - 8 * ty.size as u32;
            let _ = write!(out, "{}", ((v << shift) as i64) >> shift);
        }
    }
}
