//! Hist triggers (`hist:keys=...` in an event's `trigger` file) and the text
//! of the event's `hist` file.
//!
//! Written from Documentation/trace/histogram.rst and from reading how
//! `kernel/trace/trace_events_hist.c` and `tracing_map.c` behave: the
//! `key=`/`keys=`, `val=`/`vals=`/`values=`, `sort=`, `size=`, `name=`,
//! `clock=` attributes, the `pause`, `cont`/`continue`, `clear` and
//! `nohitcount`/`NOHC` flags, the key modifiers `.hex .sym .sym-offset
//! .execname .log2 .buckets=N .usecs`, the value modifier `.hex`,
//! `hitcount`, `common_pid`, `common_cpu`, `common_comm`,
//! `common_timestamp`, string keys and `+ - * /` expressions with constants.
//! `.percent` and `.graph` fail on values with "Invalid field modifier" as
//! the kernel's `__create_val_field()` makes them fail.
//!
//! Not supported (they fail with the error the kernel gives when the thing
//! they name cannot be found, logged to `error_log`): variables (`x=expr`:
//! "Malformed assignment"), variable references (`$x`: "Couldn't find
//! variable" then "Couldn't find field"), actions (`onmatch()`: "Couldn't
//! find synthetic event"; `onmax()`/`onchange()`: "Couldn't find onmax or
//! onchange variable"), stack-trace keys (`stacktrace`,
//! `common_stacktrace`: "Couldn't find field") and `.syscall` ("Invalid
//! field modifier").
//!
//! The machine these files were measured on builds its kernel without
//! `CONFIG_HIST_TRIGGERS`, so the formats here follow the kernel's source
//! and documentation rather than a measurement. Entries that compare equal
//! on every sort key are listed in the order they were first hit; the
//! kernel lists them in its hash table's slot order after a heapsort, which
//! this replica does not reproduce.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::errno::Errno;
use crate::sync::LockExt;

use super::event::{common_fields, EventDef, Field, FieldKind};

/// `TRACING_MAP_BITS_DEFAULT`: `size=2048`.
const MAP_BITS_DEFAULT: u32 = 11;
/// `TRACING_MAP_BITS_MIN`/`_MAX`: `size=` rounds up to a power of two
/// between 128 and 131072.
const MAP_BITS_MIN: u32 = 7;
const MAP_BITS_MAX: u32 = 17;
/// `TRACING_MAP_KEYS_MAX`.
const KEYS_MAX: usize = 3;
/// `TRACING_MAP_VALS_MAX` (hitcount included).
const VALS_MAX: usize = 3;
/// `TRACING_MAP_VARS_MAX`.
const VARS_MAX: usize = 16;
/// `TRACING_MAP_SORT_KEYS_MAX`.
const SORT_KEYS_MAX: usize = 2;
/// `HIST_ACTIONS_MAX`.
const ACTIONS_MAX: usize = 8;
/// `MAX_FILTER_STR_VAL`: the key size of a dynamic string or `common_comm`.
const MAX_FILTER_STR_VAL: usize = 256;
/// `HIST_KEY_SIZE_MAX`: a string plus a 16-deep stack trace.
const KEY_SIZE_MAX: usize = MAX_FILTER_STR_VAL + 16 * 8;
/// `HIST_DIV_SHIFT`: division by a constant is a multiply and shift.
const DIV_SHIFT: u32 = 20;

// The kernel's hist error texts that this replica reports.
pub(crate) const E_MALFORMED_ASSIGNMENT: &str = "Malformed assignment";
pub(crate) const E_NAMED_MISMATCH: &str =
    "Named hist trigger doesn't match existing named trigger (includes variables)";
pub(crate) const E_TRIGGER_EEXIST: &str = "Hist trigger already exists";
pub(crate) const E_TRIGGER_ENOENT_CLEAR: &str =
    "Can't clear or continue a nonexistent hist trigger";
pub(crate) const E_SET_CLOCK_FAIL: &str = "Couldn't set trace_clock";
const E_TOO_MANY_VARS: &str = "Too many variables defined";
const E_BAD_FIELD_MODIFIER: &str = "Invalid field modifier";
const E_TOO_MANY_SUBEXPR: &str = "Too many subexpressions (3 max)";
const E_TIMESTAMP_MISMATCH: &str = "Timestamp units in expression don't match";
const E_SYNTH_EVENT_NOT_FOUND: &str = "Couldn't find synthetic event";
const E_ONX_NOT_VAR: &str = "For onmax(x) or onchange(x), x must be a variable";
const E_ONX_VAR_NOT_FOUND: &str = "Couldn't find onmax or onchange variable";
const E_NO_CLOSING_PAREN: &str = "No closing paren found";
const E_SUBSYS_NOT_FOUND: &str = "Missing subsystem";
const E_INVALID_SUBSYS_EVENT: &str = "Invalid subsystem or event name";
const E_VAR_NOT_FOUND: &str = "Couldn't find variable";
const E_FIELD_NOT_FOUND: &str = "Couldn't find field";
const E_EMPTY_ASSIGNMENT: &str = "Empty assignment";
const E_INVALID_SORT_MODIFIER: &str = "Invalid sort modifier";
const E_EMPTY_SORT_FIELD: &str = "Empty sort field";
const E_TOO_MANY_SORT_FIELDS: &str = "Too many sort fields (Max = 2)";
const E_INVALID_SORT_FIELD: &str = "Sort field must be a key or a val";
const E_INVALID_STR_OPERAND: &str = "String type can not be an operand in expression";
const E_EXPECT_NUMBER: &str = "Expecting numeric literal";
const E_UNARY_MINUS_SUBEXPR: &str = "Unary minus not supported in sub-expressions";
const E_DIVISION_BY_ZERO: &str = "Division by zero";
const E_NEED_NOHC_VAL: &str = "Non-hitcount value is required for 'nohitcount'";

// Field flags, as the kernel's HIST_FIELD_FL_* (two fields match when their
// flags are equal, among other things).
const FL_HITCOUNT: u32 = 1 << 0;
const FL_KEY: u32 = 1 << 1;
const FL_STRING: u32 = 1 << 2;
const FL_HEX: u32 = 1 << 3;
const FL_SYM: u32 = 1 << 4;
const FL_SYM_OFFSET: u32 = 1 << 5;
const FL_EXECNAME: u32 = 1 << 6;
const FL_LOG2: u32 = 1 << 9;
const FL_TIMESTAMP: u32 = 1 << 10;
const FL_TIMESTAMP_USECS: u32 = 1 << 11;
const FL_EXPR: u32 = 1 << 13;
const FL_CPU: u32 = 1 << 15;
const FL_BUCKET: u32 = 1 << 17;
const FL_CONST: u32 = 1 << 18;
const FL_PERCENT: u32 = 1 << 19;
const FL_GRAPH: u32 = 1 << 20;
const FL_COMM: u32 = 1 << 21;

/// Errors found while parsing, in the order the kernel logs them: the
/// message and the caret position in `hist:` followed by the command.
pub(crate) struct Errs<'a> {
    last_cmd: &'a str,
    pub(crate) list: Vec<(&'static str, usize)>,
}

impl<'a> Errs<'a> {
    /// Errors for the command `last_cmd` (`hist:` and what followed it).
    pub(crate) fn new(last_cmd: &'a str) -> Self {
        Errs {
            last_cmd,
            list: Vec::new(),
        }
    }
    /// Log `msg` with the caret where `s` first occurs in the command (the
    /// kernel's `errpos`, 0 when it does not occur).
    fn at(&mut self, msg: &'static str, s: &str) {
        let pos = self.last_cmd.find(s).unwrap_or(0);
        self.list.push((msg, pos));
    }
    /// Log `msg` with the caret at 0.
    pub(crate) fn at0(&mut self, msg: &'static str) {
        self.list.push((msg, 0));
    }
}

/// The event field behind a hist field, for printing and matching.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Src {
    /// Nothing (hitcount, constants, expressions, `common_cpu`,
    /// `common_comm`, `common_timestamp` by those names).
    None,
    /// A field of the event (common fields included).
    Event(Field),
    /// The generic `cpu`/`CPU` field (named here as written).
    GenericCpu(String),
    /// The generic `comm`/`COMM` field.
    GenericComm(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    None,
    Plus,
    Minus,
    UnaryMinus,
    Div,
    Mult,
}

/// How a division by a constant is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum DivFn {
    Plain,
    Power2,
    NotPower2,
    MultShift(u64),
}

/// One key or value.
#[derive(Clone, Debug)]
struct HField {
    flags: u32,
    src: Src,
    /// `hist_field_name()` (the expression text for expressions).
    name: String,
    size: usize,
    signed: bool,
    type_name: String,
    buckets: u64,
    constant: u64,
    op: Op,
    div: DivFn,
    operands: Vec<HField>,
    /// Offset in the compound key (keys).
    offset: usize,
}

impl HField {
    fn bare(flags: u32) -> HField {
        HField {
            flags,
            src: Src::None,
            name: String::new(),
            size: 0,
            signed: false,
            type_name: String::new(),
            buckets: 0,
            constant: 0,
            op: Op::None,
            div: DivFn::Plain,
            operands: Vec::new(),
            offset: 0,
        }
    }

    /// The field's modifier as `get_hist_field_flags()` names it.
    fn flag_name(&self) -> Option<&'static str> {
        let f = self.flags;
        [
            (FL_HEX, "hex"),
            (FL_SYM, "sym"),
            (FL_SYM_OFFSET, "sym-offset"),
            (FL_EXECNAME, "execname"),
            (FL_LOG2, "log2"),
            (FL_BUCKET, "buckets"),
            (FL_TIMESTAMP_USECS, "usecs"),
            (FL_PERCENT, "percent"),
            (FL_GRAPH, "graph"),
        ]
        .iter()
        .find(|(bit, _)| f & bit != 0)
        .map(|(_, n)| *n)
    }

    /// How the trigger file shows a field (`hist_field_print()`), including
    /// the kernel's habit of printing `common_cpu` before the name of a CPU
    /// field (so `keys=common_cpu` reads back as `common_cpucommon_cpu`).
    fn print(&self, out: &mut String) {
        if self.flags & FL_CPU != 0 {
            out.push_str("common_cpu");
        }
        if self.flags & FL_COMM != 0 {
            out.push_str("common_comm");
        } else if self.flags & FL_CONST != 0 {
            let _ = write!(out, "{}", self.constant);
        } else {
            out.push_str(&self.name);
        }
        if self.flags & FL_EXPR == 0 {
            if let Some(f) = self.flag_name() {
                let _ = write!(out, ".{f}");
            }
        }
        if self.buckets != 0 {
            let _ = write!(out, "={}", self.buckets as i64);
        }
    }

    /// The text of a field inside an expression (`expr_field_str()`).
    fn expr_part(&self, out: &mut String) {
        if self.flags & FL_CONST != 0 {
            let _ = write!(out, "{}", self.constant);
        }
        out.push_str(&self.name);
        if self.flags != 0 {
            if let Some(f) = self.flag_name() {
                let _ = write!(out, ".{f}");
            }
        }
    }

    /// For [`HistDef::same_shape`]: what the kernel's `compatible_field()`
    /// compares of the underlying event field.
    fn field_ident(&self) -> Option<(String, String, usize, bool)> {
        match &self.src {
            Src::None => None,
            Src::Event(f) => Some((f.name.clone(), f.ctype.clone(), f.size, f.signed)),
            Src::GenericCpu(n) => Some((n.clone(), "int".into(), 0, true)),
            Src::GenericComm(n) => Some((n.clone(), "char *".into(), 0, false)),
        }
    }

    fn is_string(&self) -> bool {
        self.flags & FL_STRING != 0
    }

    /// The field's numeric value for a hit, as the kernel's field functions
    /// compute it (signed fields sign-extend to 64 bits).
    fn num(&self, hit: &Hit<'_>, ts_usecs: bool) -> u64 {
        if self.flags & FL_HITCOUNT != 0 && self.operands.is_empty() {
            return 1;
        }
        if self.flags & FL_CONST != 0 {
            return self.constant;
        }
        if self.flags & (FL_LOG2 | FL_BUCKET) != 0 && !self.operands.is_empty() {
            let v = self.operands[0].num(hit, ts_usecs);
            if self.flags & FL_LOG2 != 0 {
                return log2_roundup(v);
            }
            return v / self.buckets * self.buckets;
        }
        if !self.operands.is_empty() {
            let a = self.operands[0].num(hit, ts_usecs);
            if self.op == Op::UnaryMinus {
                return (a as i64).wrapping_neg() as u64;
            }
            let b = self.operands[1].num(hit, ts_usecs);
            return match self.op {
                Op::Plus => a.wrapping_add(b),
                Op::Minus => a.wrapping_sub(b),
                Op::Mult => a.wrapping_mul(b),
                Op::Div => match self.div {
                    DivFn::Plain => {
                        if b == 0 {
                            u64::MAX
                        } else if b & (b - 1) == 0 {
                            a >> b.trailing_zeros()
                        } else {
                            a / b
                        }
                    }
                    DivFn::Power2 => a >> self.operands[1].constant.trailing_zeros(),
                    DivFn::NotPower2 => a / self.operands[1].constant,
                    DivFn::MultShift(mult) => {
                        if a < (1 << DIV_SHIFT) {
                            (a * mult + ((1 << DIV_SHIFT) - 1)) >> DIV_SHIFT
                        } else {
                            a / self.operands[1].constant
                        }
                    }
                },
                _ => 0,
            };
        }
        if self.flags & FL_TIMESTAMP != 0 {
            return if ts_usecs {
                (hit.ts_ns + 500) / 1000
            } else {
                hit.ts_ns
            };
        }
        if self.flags & FL_CPU != 0 {
            return hit.cpu as u64;
        }
        match &self.src {
            // Strings are pointers in the kernel; their sums mean nothing
            // and count as 0 here.
            Src::Event(f) if !f.is_string() => f.int_value(hit.entry) as i64 as u64,
            _ => 0,
        }
    }

    /// The bytes a string key contributes to the compound key (the kernel
    /// copies at most the key size less one byte, so a `char[16]` key keeps
    /// 15 bytes), trailing NULs removed.
    fn key_bytes(&self, hit: &Hit<'_>) -> Vec<u8> {
        let max = self.size.saturating_sub(1);
        let raw: &[u8] = if self.flags & FL_COMM != 0 {
            hit.comm.as_bytes()
        } else if let Src::Event(f) = &self.src {
            match f.kind {
                FieldKind::CharArray => hit.entry.get(f.offset..f.offset + f.size).unwrap_or(&[]),
                _ => {
                    let (off, len) = f.loc_range(hit.entry);
                    hit.entry.get(off..off + len).unwrap_or(&[])
                }
            }
        } else {
            &[]
        };
        let mut v = raw[..raw.len().min(max)].to_vec();
        while v.last() == Some(&0) {
            v.pop();
        }
        v
    }

    /// How keys of this field compare (`tracing_map_cmp_num()` on the event
    /// field's size and signedness, strings with `strcmp`, `common_comm`
    /// not at all).
    fn cmp_kind(&self) -> CmpKind {
        match &self.src {
            Src::Event(f) if self.flags & FL_CPU == 0 => {
                if f.is_string() {
                    CmpKind::Str
                } else {
                    CmpKind::Num(f.size, f.signed)
                }
            }
            Src::GenericComm(_) => CmpKind::None,
            Src::None if self.flags & FL_COMM != 0 => CmpKind::None,
            _ => CmpKind::Num(self.size, self.signed),
        }
    }
}

/// `ilog2(roundup_pow_of_two(v))` as the kernel computes it on x86-64 (0
/// and values above 2^63 give 0).
fn log2_roundup(v: u64) -> u64 {
    if v <= 1 || v > 1 << 63 {
        return 0;
    }
    64 - (v - 1).leading_zeros() as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CmpKind {
    Num(usize, bool),
    Str,
    None,
}

/// One sort key: a field index (0 = hitcount, then the values, then the
/// keys) and the direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct SortKey {
    idx: usize,
    descending: bool,
}

/// A parsed hist trigger.
#[derive(Clone, Debug)]
pub(crate) struct HistDef {
    /// Values, `hitcount` first.
    vals: Vec<HField>,
    keys: Vec<HField>,
    sort: Vec<SortKey>,
    map_bits: u32,
    /// `name=foo` as written (the kernel keeps the `name=` prefix).
    pub(crate) name: Option<String>,
    /// `clock=` (default `global`).
    pub(crate) clock: String,
    no_hitcount: bool,
    ts_in_usecs: bool,
    timestamps: bool,
    /// The `pause` attribute.
    pub(crate) pause: bool,
    /// The `cont`/`continue` attribute.
    pub(crate) cont: bool,
    /// The `clear` attribute.
    pub(crate) clear: bool,
}

/// `kstrtoul`/`kstrtoull` with base 0: `Err(EINVAL)` for no digits or
/// trailing junk (one trailing newline allowed), `Err(ERANGE)` on overflow.
pub(crate) fn kstrtoul(s: &str) -> Result<u64, Errno> {
    let s = s.strip_prefix('+').unwrap_or(s);
    let b = s.as_bytes();
    let (radix, mut i) = if b.first() == Some(&b'0') {
        if b.get(1).map(|c| c.to_ascii_lowercase()) == Some(b'x')
            && b.get(2).is_some_and(|c| c.is_ascii_hexdigit())
        {
            (16, 2)
        } else {
            (8, 0)
        }
    } else {
        (10, 0)
    };
    let start = i;
    let mut v: u64 = 0;
    let mut overflow = false;
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        match v
            .checked_mul(radix as u64)
            .and_then(|x| x.checked_add(d as u64))
        {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return Err(Errno::EINVAL);
    }
    if overflow {
        return Err(Errno::ERANGE);
    }
    if b.get(i) == Some(&b'\n') {
        i += 1;
    }
    if i != b.len() {
        return Err(Errno::EINVAL);
    }
    Ok(v)
}

/// The clocks `trace_clock` offers (`clock=` must name one when the
/// trigger uses timestamps).
const CLOCKS: &[&str] = &[
    "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai", "x86-tsc",
];

/// Attributes before the fields are built.
#[derive(Default)]
struct Attrs {
    keys: Option<String>,
    vals: Option<String>,
    sort: Option<String>,
    name: Option<String>,
    clock: Option<String>,
    map_bits: u32,
    pause: bool,
    cont: bool,
    clear: bool,
    no_hitcount: bool,
    assignments: Vec<String>,
    actions: Vec<String>,
}

fn parse_attrs(param: &str, errs: &mut Errs<'_>) -> Result<Attrs, Errno> {
    let mut a = Attrs::default();
    for tok in param.split(':') {
        if let Some(eq) = tok.find('=') {
            if tok.len() == eq + 1 {
                errs.at(E_EMPTY_ASSIGNMENT, tok);
                return Err(Errno::EINVAL);
            }
            let rest = |p: &str| tok.strip_prefix(p).map(str::to_string);
            if let Some(k) = rest("key=").or_else(|| rest("keys=")) {
                a.keys = Some(k);
            } else if let Some(v) = rest("val=")
                .or_else(|| rest("vals="))
                .or_else(|| rest("values="))
            {
                a.vals = Some(v);
            } else if let Some(s) = rest("sort=") {
                a.sort = Some(s);
            } else if tok.starts_with("name=") {
                a.name = Some(tok.to_string());
            } else if let Some(c) = rest("clock=") {
                a.clock = Some(c.trim().to_string());
            } else if let Some(sz) = rest("size=") {
                let size = kstrtoul(&sz)?;
                let bits = log2_roundup(size) as u32;
                if !(MAP_BITS_MIN..=MAP_BITS_MAX).contains(&bits) {
                    return Err(Errno::EINVAL);
                }
                a.map_bits = bits;
            } else {
                if a.assignments.len() == VARS_MAX {
                    errs.at(E_TOO_MANY_VARS, tok);
                    return Err(Errno::EINVAL);
                }
                a.assignments.push(tok.to_string());
            }
        } else if tok == "nohitcount" || tok == "NOHC" {
            a.no_hitcount = true;
        } else if tok == "pause" {
            a.pause = true;
        } else if tok == "cont" || tok == "continue" {
            a.cont = true;
        } else if tok == "clear" {
            a.clear = true;
        } else if a.actions.len() < ACTIONS_MAX
            && ["onmatch(", "onmax(", "onchange("]
                .iter()
                .any(|p| tok.starts_with(p))
        {
            a.actions.push(tok.to_string());
        } else {
            return Err(Errno::EINVAL);
        }
    }
    if a.keys.is_none() {
        return Err(Errno::EINVAL);
    }
    Ok(a)
}

/// Where a field comes from, by name: the event's own fields first, then
/// the generic `cpu`/`comm` fields, then the common fields.
enum Found {
    Event(Field),
    Cpu(String),
    Comm(String),
}

fn find_field(def: &EventDef, name: &str) -> Option<Found> {
    if let Some(f) = def.fields.iter().find(|f| f.name == name) {
        return Some(Found::Event(f.clone()));
    }
    match name {
        "CPU" | "cpu" | "common_cpu" => return Some(Found::Cpu(name.into())),
        "COMM" | "comm" => return Some(Found::Comm(name.into())),
        _ => {}
    }
    common_fields()
        .into_iter()
        .find(|f| f.name == name)
        .map(Found::Event)
}

/// What an event field looks like to the hist code: its type name as the
/// kernel's `ftrace_event_field` records it.
fn type_of(f: &Field) -> String {
    f.ctype.clone()
}

struct Parser<'a, 'e> {
    def: &'a EventDef,
    errs: &'a mut Errs<'e>,
    timestamps: bool,
    ts_in_usecs: bool,
}

impl Parser<'_, '_> {
    /// `parse_field()`: a name and at most one modifier.
    fn field(&mut self, s: &str, flags: &mut u32, buckets: &mut u64) -> Result<HField, Errno> {
        let (fname, modifier) = match s.find('.') {
            Some(i) => (&s[..i], Some(&s[i + 1..])),
            None => (s, None),
        };
        if let Some(m) = modifier {
            let ok = match m {
                "hex" => {
                    *flags |= FL_HEX;
                    true
                }
                "sym" => {
                    *flags |= FL_SYM;
                    true
                }
                "symXoffset" => {
                    *flags |= FL_SYM_OFFSET;
                    true
                }
                "execname" if fname == "common_pid" => {
                    *flags |= FL_EXECNAME;
                    true
                }
                "log2" => {
                    *flags |= FL_LOG2;
                    true
                }
                "usecs" => {
                    *flags |= FL_TIMESTAMP_USECS;
                    true
                }
                _ if m.starts_with("bucket") => {
                    let r = &m[6..];
                    let r = r.strip_prefix('s').unwrap_or(r);
                    match r.strip_prefix('=').map(kstrtoul) {
                        Some(Ok(n)) if n != 0 => {
                            *buckets = n;
                            *flags |= FL_BUCKET;
                            true
                        }
                        _ => false,
                    }
                }
                _ if m.starts_with("percent") && *flags & FL_KEY == 0 => {
                    *flags |= FL_PERCENT;
                    true
                }
                _ if m.starts_with("graph") && *flags & FL_KEY == 0 => {
                    *flags |= FL_GRAPH;
                    true
                }
                _ => false,
            };
            if !ok {
                self.errs.at(E_BAD_FIELD_MODIFIER, m);
                return Err(Errno::EINVAL);
            }
        }
        let mut h = HField::bare(0);
        match fname {
            "common_timestamp" => {
                *flags |= FL_TIMESTAMP;
                self.timestamps = true;
                if *flags & FL_TIMESTAMP_USECS != 0 {
                    self.ts_in_usecs = true;
                }
                h.name = "common_timestamp".into();
                h.size = 8;
                h.type_name = "u64".into();
            }
            "common_cpu" => {
                *flags |= FL_CPU;
                h.name = "common_cpu".into();
                h.size = 4;
                h.type_name = "unsigned int".into();
            }
            "common_comm" => {
                *flags |= FL_COMM | FL_STRING;
                h.name = "common_comm".into();
                h.size = MAX_FILTER_STR_VAL;
                h.type_name = "char[]".into();
            }
            "hitcount" => {
                *flags |= FL_HITCOUNT;
                h.name = "hitcount".into();
                h.size = 8;
                h.type_name = "u64".into();
            }
            // Stack traces are not recorded here.
            "common_stacktrace" | "stacktrace" | "STACKTRACE" => {
                self.errs.at(E_FIELD_NOT_FOUND, fname);
                return Err(Errno::EINVAL);
            }
            _ => match find_field(self.def, fname) {
                Some(Found::Event(f)) => {
                    h.name = f.name.clone();
                    h.type_name = type_of(&f);
                    if f.is_string() {
                        *flags |= FL_STRING;
                        h.size = if f.kind == FieldKind::CharArray {
                            f.size
                        } else {
                            MAX_FILTER_STR_VAL
                        };
                    } else if matches!(f.kind, FieldKind::Int { .. }) {
                        h.size = f.size;
                        h.signed = f.signed;
                    } else {
                        // Opaque and array fields have no value function.
                        return Err(Errno::ENOMEM);
                    }
                    h.src = Src::Event(f);
                }
                Some(Found::Cpu(n)) => {
                    *flags |= FL_CPU;
                    h.name = n.clone();
                    h.size = 4;
                    h.type_name = "unsigned int".into();
                    h.src = Src::GenericCpu(n);
                }
                Some(Found::Comm(n)) => {
                    *flags |= FL_COMM | FL_STRING;
                    h.name = n.clone();
                    h.size = MAX_FILTER_STR_VAL;
                    h.type_name = "char[]".into();
                    h.src = Src::GenericComm(n);
                }
                None => {
                    self.errs.at(E_FIELD_NOT_FOUND, fname);
                    return Err(Errno::EINVAL);
                }
            },
        }
        Ok(h)
    }

    /// `parse_atom()`: a constant, a variable reference or a field.
    fn atom(&mut self, s: &str, flags: u32) -> Result<HField, Errno> {
        let mut flags = flags;
        if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            let Ok(c) = kstrtoul(s) else {
                self.errs.at(E_EXPECT_NUMBER, s);
                return Err(Errno::EINVAL);
            };
            let mut h = HField::bare(flags | FL_CONST);
            h.constant = c;
            h.size = 8;
            h.type_name = "u64".into();
            return Ok(h);
        }
        // `system.event.var` names a variable of another event; what is
        // left after the second dot is parsed as a field.
        let mut name = s;
        if let Some(i) = s.find('.') {
            if let Some(j) = s[i + 1..].find('.') {
                name = &s[i + 1 + j + 1..];
            }
        }
        if name.len() >= 2 && name.starts_with('$') {
            // No variables are ever defined here.
            self.errs.at(E_VAR_NOT_FOUND, &name[1..]);
        }
        let mut buckets = 0;
        let mut base = self.field(name, &mut flags, &mut buckets)?;
        if flags & (FL_LOG2 | FL_BUCKET) != 0 {
            // The kernel wraps the field in a log2/bucket field.
            let mut inner = base.clone();
            inner.flags = flags & !(FL_LOG2 | FL_BUCKET);
            base.operands = vec![inner];
        }
        base.flags = flags;
        base.buckets = buckets;
        Ok(base)
    }

    /// `parse_expr()`: `+ -` bind loosest, then `* /`, left to right;
    /// `-(...)` negates; at most 3 sub-expressions.
    fn expr(&mut self, s: &str, flags: u32, n_sub: &mut u32) -> Result<HField, Errno> {
        if *n_sub > 3 {
            self.errs.at(E_TOO_MANY_SUBEXPR, s);
            return Err(Errno::EINVAL);
        }
        let (op, sep) = contains_operator(s);
        if op == Op::None {
            return self.atom(s, flags);
        }
        if op == Op::UnaryMinus {
            return self.unary(s, flags, n_sub);
        }
        *n_sub += 1;
        let (lhs, rhs) = (&s[..sep], &s[sep + 1..]);
        if lhs.is_empty() || rhs.is_empty() {
            return Err(Errno::EINVAL);
        }
        let a = self.expr(lhs, 0, n_sub)?;
        if a.is_string() {
            self.errs.at(E_INVALID_STR_OPERAND, lhs);
            return Err(Errno::EINVAL);
        }
        let mut b = self.expr(rhs, 0, n_sub)?;
        if b.is_string() {
            self.errs.at(E_INVALID_STR_OPERAND, rhs);
            return Err(Errno::EINVAL);
        }
        if (a.flags & FL_TIMESTAMP_USECS) != (b.flags & FL_TIMESTAMP_USECS) {
            self.errs.at0(E_TIMESTAMP_MISMATCH);
            return Err(Errno::EINVAL);
        }
        let consts = a.flags & b.flags & FL_CONST != 0;
        let mut e = HField::bare(
            flags
                | if consts { FL_CONST } else { FL_EXPR }
                | (a.flags & (FL_TIMESTAMP | FL_TIMESTAMP_USECS)),
        );
        e.op = op;
        if op == Op::Div && b.flags & FL_CONST != 0 {
            let d = b.constant;
            if d == 0 {
                self.errs.at(E_DIVISION_BY_ZERO, rhs);
                return Err(Errno(libc::EDOM));
            }
            e.div = if d & (d - 1) == 0 {
                DivFn::Power2
            } else if d > 1 << DIV_SHIFT {
                DivFn::NotPower2
            } else {
                DivFn::MultShift((1u64 << DIV_SHIFT) / d)
            };
            b.constant = d;
        }
        e.size = a.size;
        e.signed = a.signed;
        e.type_name = a.type_name.clone();
        e.operands = vec![a, b];
        if consts {
            let dummy = Hit {
                entry: &[],
                cpu: 0,
                comm: "",
                ts_ns: 0,
            };
            e.constant = e.num(&dummy, false);
            e.operands.clear();
            e.op = Op::None;
            e.size = 8;
            e.signed = false;
            e.type_name = "u64".into();
            e.name = String::new();
        } else {
            e.name = expr_text(&e, 0).unwrap_or_default();
        }
        Ok(e)
    }

    fn unary(&mut self, s: &str, flags: u32, n_sub: &mut u32) -> Result<HField, Errno> {
        *n_sub += 1;
        if *n_sub > 3 {
            self.errs.at(E_TOO_MANY_SUBEXPR, s);
            return Err(Errno::EINVAL);
        }
        let rest = &s[1..];
        if !rest.contains('(') {
            return Err(Errno::EINVAL);
        }
        // The kernel skips one character, assuming it is the '('.
        let inner = &rest[1..];
        let Some(close) = inner.rfind(')') else {
            return Err(Errno::EINVAL);
        };
        if close + 1 != inner.len() {
            self.errs.at(E_UNARY_MINUS_SUBEXPR, inner);
            return Err(Errno::EINVAL);
        }
        let inner = &inner[..close];
        let a = self.expr(inner, 0, n_sub)?;
        if a.is_string() {
            self.errs.at(E_INVALID_STR_OPERAND, inner);
            return Err(Errno::EINVAL);
        }
        let mut e = HField::bare(flags | FL_EXPR | (a.flags & (FL_TIMESTAMP | FL_TIMESTAMP_USECS)));
        e.op = Op::UnaryMinus;
        e.size = a.size;
        e.signed = a.signed;
        e.type_name = a.type_name.clone();
        e.operands = vec![a];
        e.name = expr_text(&e, 0).unwrap_or_default();
        Ok(e)
    }
}

/// The root operator of an expression and where it is: the last `-` or
/// `+` (a `-` at the very start is a unary minus), else the last `*` or
/// `/`.
fn contains_operator(s: &str) -> (Op, usize) {
    let minus = s.rfind('-');
    let plus = s.rfind('+');
    if minus == Some(0) {
        return (Op::UnaryMinus, 0);
    }
    if plus.is_some() || minus.is_some() {
        return match (plus, minus) {
            (Some(p), Some(m)) if p > m => (Op::Plus, p),
            (Some(p), None) => (Op::Plus, p),
            (_, Some(m)) => (Op::Minus, m),
            _ => unreachable!(),
        };
    }
    match (s.rfind('/'), s.rfind('*')) {
        (Some(d), Some(m)) if m > d => (Op::Mult, m),
        (None, Some(m)) => (Op::Mult, m),
        (Some(d), _) => (Op::Div, d),
        _ => (Op::None, 0),
    }
}

/// `expr_str()`: the text of an expression, `None` past two levels.
fn expr_text(e: &HField, level: u32) -> Option<String> {
    if level > 1 {
        return None;
    }
    let mut s = String::new();
    if e.operands.is_empty() {
        e.expr_part(&mut s);
        return Some(s);
    }
    if e.op == Op::UnaryMinus {
        s.push_str("-(");
        s.push_str(&expr_text(&e.operands[0], level + 1)?);
        s.push(')');
        return Some(s);
    }
    e.operands[0].expr_part(&mut s);
    s.push(match e.op {
        Op::Minus => '-',
        Op::Plus => '+',
        Op::Div => '/',
        Op::Mult => '*',
        _ => return None,
    });
    e.operands[1].expr_part(&mut s);
    Some(s)
}

/// Parse the text after `hist:` (the filter already split off). `errs`
/// collects what the kernel would log; `event_exists` checks `onmatch()`
/// targets.
pub(crate) fn parse(
    param: &str,
    def: &EventDef,
    errs: &mut Errs<'_>,
    event_exists: &dyn Fn(&str, &str) -> bool,
) -> Result<HistDef, Errno> {
    let param = param.replace(".sym-offset", ".symXoffset");
    let a = parse_attrs(&param, errs)?;

    // Actions are parsed before the fields; none can be carried out here.
    let mut action_err: Option<(&'static str, String)> = None;
    for act in &a.actions {
        if let Some(rest) = act.strip_prefix("onmatch(") {
            let Some(close) = rest.find(')') else {
                errs.at(E_NO_CLOSING_PAREN, rest);
                return Err(Errno::EINVAL);
            };
            let target = &rest[..close];
            let Some((sys, ev)) = target.split_once('.') else {
                errs.at(E_SUBSYS_NOT_FOUND, target);
                return Err(Errno::EINVAL);
            };
            if !event_exists(sys, ev) {
                errs.at(E_INVALID_SUBSYS_EVENT, ev);
                return Err(Errno::EINVAL);
            }
            // `.trace(synth,...)` names the synthetic event first, any
            // other `.name(...)` is the synthetic event.
            let after = rest[close + 1..].strip_prefix('.').unwrap_or("");
            let (action, params) = after.split_once('(').unwrap_or((after, ""));
            let name = if action == "trace" {
                params.split([',', ')']).next().unwrap_or("")
            } else {
                action
            };
            action_err.get_or_insert((E_SYNTH_EVENT_NOT_FOUND, name.to_string()));
        } else {
            let rest = act
                .strip_prefix("onmax(")
                .or_else(|| act.strip_prefix("onchange("))
                .unwrap_or("");
            let Some(close) = rest.find(')') else {
                errs.at(E_NO_CLOSING_PAREN, rest);
                return Err(Errno::EINVAL);
            };
            let var = &rest[..close];
            if !var.starts_with('$') {
                errs.at(E_ONX_NOT_VAR, var);
                return Err(Errno::EINVAL);
            }
            action_err.get_or_insert((E_ONX_VAR_NOT_FOUND, var.to_string()));
        }
    }

    // Variables are not supported: report the first definition as malformed.
    for asg in &a.assignments {
        for piece in asg.split(',') {
            let var = piece.split('=').next().unwrap_or("");
            if !piece.contains('=') {
                errs.at(E_MALFORMED_ASSIGNMENT, var);
                return Err(Errno::EINVAL);
            }
        }
    }
    if let Some(asg) = a.assignments.first() {
        let var = asg.split('=').next().unwrap_or("");
        errs.at(E_MALFORMED_ASSIGNMENT, var);
        return Err(Errno::EINVAL);
    }

    let mut p = Parser {
        def,
        errs,
        timestamps: false,
        ts_in_usecs: false,
    };

    // Values: hitcount first, then at most two more.
    let mut hc = HField::bare(FL_HITCOUNT);
    hc.name = "hitcount".into();
    hc.size = 8;
    hc.type_name = "u64".into();
    let mut vals = vec![hc];
    let mut vals_err = Ok(());
    if let Some(vs) = &a.vals {
        let mut rest: Option<&str> = Some(vs.as_str());
        let mut n_hitcount = 0;
        let mut i = 0;
        while i < VALS_MAX && vals.len() < VALS_MAX {
            let Some(r) = rest else { break };
            let (tok, next) = match r.find(',') {
                Some(k) => (&r[..k], Some(&r[k + 1..])),
                None => (r, None),
            };
            rest = next;
            i += 1;
            if tok == "hitcount" {
                n_hitcount += 1;
                if n_hitcount == 1 {
                    continue;
                }
            }
            let mut n_sub = 0;
            match p.expr(tok, 0, &mut n_sub) {
                Ok(f) => {
                    const BAD: u32 =
                        FL_GRAPH | FL_PERCENT | FL_BUCKET | FL_LOG2 | FL_SYM | FL_SYM_OFFSET;
                    if f.flags & BAD != 0 {
                        p.errs.at(E_BAD_FIELD_MODIFIER, tok);
                        vals_err = Err(Errno::EINVAL);
                        break;
                    }
                    vals.push(f);
                }
                Err(e) => {
                    vals_err = Err(e);
                    break;
                }
            }
        }
        if vals_err.is_ok() && rest.is_some_and(|r| r != "hitcount") {
            vals_err = Err(Errno::EINVAL);
        }
    }
    if vals.len() == 1 && a.no_hitcount {
        p.errs.at0(E_NEED_NOHC_VAL);
        vals_err = Err(Errno::ENOENT);
    }
    vals_err?;

    // Keys: at most three.
    let mut keys: Vec<HField> = Vec::new();
    let mut key_size = 0;
    let ks = a.keys.as_deref().unwrap_or("");
    let mut rest: Option<&str> = Some(ks);
    while keys.len() < KEYS_MAX {
        let Some(r) = rest else { break };
        let (tok, next) = match r.find(',') {
            Some(k) => (&r[..k], Some(&r[k + 1..])),
            None => (r, None),
        };
        rest = next;
        if tok == "stacktrace" {
            p.errs.at(E_FIELD_NOT_FOUND, tok);
            return Err(Errno::EINVAL);
        }
        let mut n_sub = 0;
        let mut f = p.expr(tok, FL_KEY, &mut n_sub)?;
        let size = f.size.div_ceil(8) * 8;
        f.size = size;
        f.offset = key_size;
        key_size += size;
        if key_size > KEY_SIZE_MAX {
            return Err(Errno::EINVAL);
        }
        keys.push(f);
    }
    if rest.is_some() {
        return Err(Errno::EINVAL);
    }

    let mut def_out = HistDef {
        vals,
        keys,
        sort: vec![SortKey {
            idx: 0,
            descending: false,
        }],
        map_bits: if a.map_bits != 0 {
            a.map_bits
        } else {
            MAP_BITS_DEFAULT
        },
        name: a.name.clone(),
        clock: a.clock.clone().unwrap_or_else(|| "global".into()),
        no_hitcount: a.no_hitcount,
        ts_in_usecs: p.ts_in_usecs,
        timestamps: p.timestamps,
        pause: a.pause,
        cont: a.cont,
        clear: a.clear,
    };

    if let Some(ss) = &a.sort {
        def_out.sort = parse_sort(ss, &def_out, p.errs)?;
    }

    if let Some((msg, at)) = action_err {
        p.errs.at(msg, &at);
        return Err(Errno::EINVAL);
    }
    Ok(def_out)
}

/// `create_sort_keys()`.
fn parse_sort(ss: &str, d: &HistDef, errs: &mut Errs<'_>) -> Result<Vec<SortKey>, Errno> {
    let mut out = Vec::new();
    let mut rest: Option<&str> = Some(ss);
    let fields: Vec<&HField> = d.vals.iter().chain(d.keys.iter()).collect();
    for i in 0..SORT_KEYS_MAX {
        let Some(r) = rest else { break };
        let (tok, next) = match r.find(',') {
            Some(k) => (&r[..k], Some(&r[k + 1..])),
            None => (r, None),
        };
        rest = next;
        if tok.is_empty() {
            errs.at(E_EMPTY_SORT_FIELD, "sort=");
            return Err(Errno::EINVAL);
        }
        if i == SORT_KEYS_MAX - 1 && rest.is_some() {
            errs.at(E_TOO_MANY_SORT_FIELDS, "sort=");
            return Err(Errno::EINVAL);
        }
        let (name, modifier) = match tok.find('.') {
            Some(k) => (&tok[..k], Some(&tok[k + 1..])),
            None => (tok, None),
        };
        if name.is_empty() {
            errs.at(E_EMPTY_SORT_FIELD, "sort=");
            return Err(Errno::EINVAL);
        }
        let descending = match modifier {
            None | Some("ascending") => false,
            Some("descending") => true,
            Some(m) => {
                errs.at(E_INVALID_SORT_MODIFIER, m);
                return Err(Errno::EINVAL);
            }
        };
        if name == "hitcount" {
            out.push(SortKey { idx: 0, descending });
            continue;
        }
        match (1..fields.len()).find(|&j| fields[j].name == name) {
            Some(j) => out.push(SortKey { idx: j, descending }),
            None => {
                errs.at(E_INVALID_SORT_FIELD, name);
                return Err(Errno::EINVAL);
            }
        }
    }
    if out.is_empty() {
        out.push(SortKey {
            idx: 0,
            descending: false,
        });
    }
    Ok(out)
}

impl HistDef {
    /// Whether the trigger reads `common_timestamp` (then `clock=` must
    /// name a trace clock).
    pub(crate) fn clock_ok(&self) -> bool {
        !self.timestamps || CLOCKS.contains(&self.clock.as_str())
    }

    /// The kernel's `hist_trigger_match()` on the parsed shapes: the same
    /// fields (flags, event field, offset, size, signedness) and sort keys;
    /// `size=`, `name=` and the pause/cont/clear flags do not count.
    pub(crate) fn same_shape(&self, o: &HistDef) -> bool {
        let a: Vec<&HField> = self.vals.iter().chain(&self.keys).collect();
        let b: Vec<&HField> = o.vals.iter().chain(&o.keys).collect();
        self.vals.len() == o.vals.len()
            && a.len() == b.len()
            && self.sort == o.sort
            && a.iter().zip(&b).all(|(x, y)| {
                x.flags == y.flags
                    && x.field_ident() == y.field_ident()
                    && x.offset == y.offset
                    && x.size == y.size
                    && x.signed == y.signed
            })
    }

    /// The trigger file's line (`event_hist_trigger_print()`), newline
    /// included. `name` is the `name=` the trigger was registered under.
    pub(crate) fn info(&self, filter: Option<&str>, paused: bool) -> String {
        let mut s = String::from("hist:");
        if let Some(n) = &self.name {
            let _ = write!(s, "{n}:");
        }
        s.push_str("keys=");
        for (i, k) in self.keys.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            k.print(&mut s);
        }
        s.push_str(":vals=");
        let mut shown = false;
        for (i, v) in self.vals.iter().enumerate() {
            if i == 0 {
                if self.no_hitcount {
                    continue;
                }
                s.push_str("hitcount");
            } else {
                if shown {
                    s.push(',');
                }
                v.print(&mut s);
            }
            shown = true;
        }
        s.push_str(":sort=");
        let fields: Vec<&HField> = self.vals.iter().chain(&self.keys).collect();
        for (i, k) in self.sort.iter().enumerate() {
            if i > 0 {
                s.push(',');
            }
            if k.idx == 0 {
                s.push_str("hitcount");
            } else {
                fields[k.idx].print(&mut s);
            }
            if k.descending {
                s.push_str(".descending");
            }
        }
        let _ = write!(s, ":size={}", 1u32 << self.map_bits);
        if self.timestamps {
            let _ = write!(s, ":clock={}", self.clock);
        }
        if self.no_hitcount {
            s.push_str(":nohitcount");
        }
        if let Some(f) = filter {
            let _ = write!(s, " if {f}");
        }
        s.push_str(if paused { " [paused]" } else { " [active]" });
        s.push('\n');
        s
    }
}

/// One part of a compound key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum KeyPart {
    Num(u64),
    Str(Vec<u8>),
}

struct Elt {
    key: Vec<KeyPart>,
    sums: Vec<u64>,
    /// The task name saved when the entry was made (`.execname`).
    comm: String,
}

#[derive(Default)]
struct MapState {
    index: HashMap<Vec<KeyPart>, usize>,
    elts: Vec<Elt>,
    hits: u64,
    drops: u64,
}

/// A histogram: its definition and its map. Triggers that share a `name=`
/// share one.
pub(crate) struct Hist {
    /// The definition of the trigger that made it.
    pub(crate) def: HistDef,
    map: Mutex<MapState>,
}

impl Hist {
    /// An empty histogram for `def`.
    pub(crate) fn new(def: HistDef) -> Arc<Hist> {
        Arc::new(Hist {
            def,
            map: Mutex::new(MapState::default()),
        })
    }

    /// Count one hit (`event_hist_trigger()`).
    pub(crate) fn record(&self, hit: &Hit<'_>) {
        let d = &self.def;
        let key: Vec<KeyPart> = d
            .keys
            .iter()
            .map(|k| {
                if k.is_string() {
                    KeyPart::Str(k.key_bytes(hit))
                } else {
                    KeyPart::Num(k.num(hit, d.ts_in_usecs))
                }
            })
            .collect();
        let mut m = self.map.lock_ok();
        let idx = match m.index.get(&key) {
            Some(&i) => i,
            None => {
                if m.elts.len() >= 1usize << d.map_bits {
                    m.drops += 1;
                    return;
                }
                let pid = hit
                    .entry
                    .get(4..8)
                    .map_or(0, |b| i32::from_le_bytes(b.try_into().unwrap()));
                let comm = if pid == 0 {
                    "<idle>".to_string()
                } else {
                    hit.comm.chars().take(15).collect()
                };
                let i = m.elts.len();
                m.elts.push(Elt {
                    key: key.clone(),
                    sums: vec![0; d.vals.len()],
                    comm,
                });
                m.index.insert(key, i);
                i
            }
        };
        m.hits += 1;
        let e = &mut m.elts[idx];
        for (s, v) in e.sums.iter_mut().zip(&d.vals) {
            *s = s.wrapping_add(v.num(hit, d.ts_in_usecs));
        }
    }

    /// Forget every entry and the counts (`:clear`).
    pub(crate) fn clear(&self) {
        *self.map.lock_ok() = MapState::default();
    }

    /// The text one trigger adds to the `hist` file (`hist_trigger_show()`);
    /// `info` is its trigger line and `n` how many hist triggers came
    /// before it.
    pub(crate) fn show(&self, info: &str, n: usize) -> String {
        let d = &self.def;
        let mut s = String::new();
        if n > 0 {
            s.push_str("\n\n");
        }
        s.push_str("# event histogram\n#\n# trigger info: ");
        s.push_str(info);
        s.push_str("#\n\n");
        let m = self.map.lock_ok();
        let mut order: Vec<usize> = (0..m.elts.len()).collect();
        let cmp = |a: &Elt, b: &Elt, k: &SortKey| {
            let o = if k.idx < d.vals.len() {
                a.sums[k.idx].cmp(&b.sums[k.idx])
            } else {
                let ki = k.idx - d.vals.len();
                cmp_key(d.keys[ki].cmp_kind(), &a.key[ki], &b.key[ki])
            };
            if k.descending {
                o.reverse()
            } else {
                o
            }
        };
        order.sort_by(|&x, &y| {
            let (a, b) = (&m.elts[x], &m.elts[y]);
            let mut o = cmp(a, b, &d.sort[0]);
            if o.is_eq() && d.sort.len() > 1 {
                o = cmp(a, b, &d.sort[1]);
            }
            o
        });
        for &i in &order {
            let e = &m.elts[i];
            print_key(&mut s, d, e);
            if !d.no_hitcount {
                let _ = write!(s, " hitcount: {:>10}", e.sums[0]);
            }
            for (j, v) in d.vals.iter().enumerate().skip(1) {
                if v.flags & FL_EXPR != 0 {
                    continue;
                }
                let name = &v.name;
                let val = e.sums[j];
                if v.flags & FL_HEX != 0 {
                    let _ = write!(s, "  {name}: {val:>10x}");
                } else {
                    let _ = write!(s, "  {name}: {val:>10}");
                }
            }
            s.push('\n');
        }
        let _ = write!(
            s,
            "\nTotals:\n    Hits: {}\n    Entries: {}\n    Dropped: {}\n",
            m.hits,
            m.elts.len(),
            m.drops
        );
        s
    }
}

fn cmp_key(kind: CmpKind, a: &KeyPart, b: &KeyPart) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    match (kind, a, b) {
        (CmpKind::Num(size, signed), KeyPart::Num(x), KeyPart::Num(y)) => {
            let bits = (size.clamp(1, 8) * 8) as u32;
            let (x, y) = if bits == 64 {
                (*x, *y)
            } else {
                (x & ((1 << bits) - 1), y & ((1 << bits) - 1))
            };
            if signed {
                let sx = ((x << (64 - bits)) as i64) >> (64 - bits);
                let sy = ((y << (64 - bits)) as i64) >> (64 - bits);
                sx.cmp(&sy)
            } else {
                x.cmp(&y)
            }
        }
        (CmpKind::Str, KeyPart::Str(x), KeyPart::Str(y)) => {
            let cut = |v: &[u8]| v.iter().position(|&c| c == 0).map_or(v.len(), |p| p);
            x[..cut(x)].cmp(&y[..cut(y)])
        }
        _ => Ordering::Equal,
    }
}

/// `%-Ns` of a string up to its NUL.
fn pad_str(out: &mut String, b: &[u8], width: usize) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    let t = String::from_utf8_lossy(&b[..end]);
    let _ = write!(out, "{t:<width$}");
}

/// `{ key: value, ... }` (`hist_trigger_print_key()`). Numbers print as
/// the unsigned 64-bit values the kernel stores; `.sym` of a number that is
/// no kernel symbol prints as the kernel prints an unknown address.
fn print_key(s: &mut String, d: &HistDef, e: &Elt) {
    s.push_str("{ ");
    for (i, (k, part)) in d.keys.iter().zip(&e.key).enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        let name = &k.name;
        let num = match part {
            KeyPart::Num(n) => *n,
            KeyPart::Str(_) => 0,
        };
        if k.flags & FL_HEX != 0 {
            let _ = write!(s, "{name}: {num:x}");
        } else if k.flags & FL_SYM != 0 {
            let sym = format!("0x{num:x}");
            let _ = write!(s, "{name}: [{num:x}] {sym:<45}");
        } else if k.flags & FL_SYM_OFFSET != 0 {
            let sym = format!("0x{num:x}");
            let _ = write!(s, "{name}: [{num:x}] {sym:<55}");
        } else if k.flags & FL_EXECNAME != 0 {
            let _ = write!(s, "{name}: {:<16}[{num:>10}]", e.comm);
        } else if k.flags & FL_LOG2 != 0 {
            let _ = write!(s, "{name}: ~ 2^{num:<2}");
        } else if k.flags & FL_BUCKET != 0 {
            let _ = write!(
                s,
                "{name}: ~ {num}-{}",
                num.wrapping_add(k.buckets).wrapping_sub(1)
            );
        } else if k.is_string() {
            let _ = write!(s, "{name}: ");
            if let KeyPart::Str(b) = part {
                pad_str(s, b, 50);
            }
        } else {
            let _ = write!(s, "{name}: {num:>10}");
        }
    }
    s.push_str(" }");
}

/// Named histograms (`name=`), shared by the events whose hist triggers
/// give the same name, as the kernel's global list of named triggers.
/// One registry serves a whole tracing instance.
#[derive(Default)]
pub struct NamedHists {
    inner: Mutex<Vec<(String, Arc<Hist>, usize)>>,
}

impl NamedHists {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The histogram registered under `name`, if any.
    pub(crate) fn find(&self, name: &str) -> Option<Arc<Hist>> {
        self.inner
            .lock_ok()
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, h, _)| h.clone())
    }

    /// One more trigger uses `hist` under `name`.
    pub(crate) fn get(&self, name: &str, hist: &Arc<Hist>) {
        let mut v = self.inner.lock_ok();
        match v.iter_mut().find(|(n, _, _)| n == name) {
            Some(e) => e.2 += 1,
            None => v.push((name.to_string(), hist.clone(), 1)),
        }
    }

    /// One trigger less uses the histogram named `name`.
    pub(crate) fn put(&self, name: &str) {
        let mut v = self.inner.lock_ok();
        if let Some(i) = v.iter().position(|(n, _, _)| n == name) {
            v[i].2 -= 1;
            if v[i].2 == 0 {
                v.remove(i);
            }
        }
    }
}

/// Split a hist command's filter off (`k:v [if filter]`): `if` counts only
/// with a blank before and after it. `Err` when the text starts with `if`
/// or ends right after one.
pub(crate) fn split_filter(pf: &str) -> Result<(&str, Option<&str>), Errno> {
    let b = pf.as_bytes();
    let mut from = 0;
    while let Some(k) = pf[from..].find("if") {
        let p = from + k;
        if p == 0 {
            return Err(Errno::EINVAL);
        }
        if !matches!(b[p - 1], b' ' | b'\t') {
            from = p + 1;
            continue;
        }
        if p + 3 >= b.len() {
            return Err(Errno::EINVAL);
        }
        if !matches!(b[p + 2], b' ' | b'\t') {
            from = p + 1;
            continue;
        }
        let param = pf[..p - 1].trim_matches(is_space);
        let filter = pf[p..].trim_matches(is_space);
        return Ok((param, Some(filter)));
    }
    Ok((pf, None))
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\x0b' | '\x0c' | '\r')
}

/// One hit of the event, as the triggers see it.
#[derive(Clone, Copy, Debug)]
pub struct Hit<'a> {
    /// The entry bytes (common header included), as the event's filter
    /// sees them.
    pub entry: &'a [u8],
    /// The CPU the event happened on.
    pub cpu: u32,
    /// The current task's name.
    pub comm: &'a str,
    /// The event's timestamp in trace-clock nanoseconds
    /// (`common_timestamp`).
    pub ts_ns: u64,
}
