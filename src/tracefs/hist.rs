//! Hist triggers (`hist:keys=...` in an event's `trigger` file) and the text
//! of the event's `hist` file.
//!
//! Written from Documentation/trace/histogram.rst and from reading how
//! `kernel/trace/trace_events_hist.c` and `tracing_map.c` behave: the
//! `key=`/`keys=`, `val=`/`vals=`/`values=`, `sort=`, `size=`, `name=`,
//! `clock=` attributes, the `pause`, `cont`/`continue`, `clear` and
//! `nohitcount`/`NOHC` flags, the key modifiers `.hex .sym .sym-offset
//! .execname .log2 .buckets=N .usecs`, the value modifiers `.hex`,
//! `.percent` (the entry's share of the column's total) and `.graph` (a
//! 20-column bar of its share of the column's largest), `hitcount`,
//! `common_pid`, `common_cpu`, `common_timestamp`, string keys and
//! `+ - * /` expressions with constants. `common_comm` is not a hist field
//! in 6.12 ("Couldn't find field", measured).
//!
//! Variables (`x=expr`), references to them across events (`$x`) and the
//! `onmatch()`, `onmax()` and `onchange()` actions with `trace`, `save` and
//! `snapshot` are supported, with synthetic events (see `synth.rs`).
//!
//! Not supported (they fail with the error the kernel gives when the thing
//! they name cannot be found, logged to `error_log`): stack-trace keys
//! (`stacktrace`, `common_stacktrace`: "Couldn't find field") and
//! `.syscall` keys (no syscall table). Both are listed in
//! scripts/kernel-vm.d/hist-known.txt.
//!
//! This machine's kernel is built without `CONFIG_HIST_TRIGGERS`; the
//! trigger grammar, its read-back and `error_log` are measured against
//! Debian's 6.12 in qemu (`scripts/kernel-vm`'s hist differential), the
//! `hist` file's counts follow the kernel's source and documentation.
//! Entries that compare equal on every sort key are listed in the order
//! they were first hit; the kernel lists them in its hash table's slot
//! order after a heapsort, which this replica does not reproduce.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use crate::base::errno::Errno;
use crate::base::sync::LockExt;

use super::event::{common_fields, EventDef, Field, FieldKind};
use super::parse::is_space_char as is_space;
use super::parse::kstrtoul_base0;
use super::synth::{SynthDef, SynthVal};

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
const E_DUPLICATE_VAR: &str = "Variable already defined";
const E_VAR_NOT_UNIQUE: &str =
    "Variable name not unique, need to use fully qualified name (subsys.event.var) for variable";
const E_HIST_NOT_FOUND: &str = "Matching event histogram not found";
const E_SYNTH_TYPE_MISMATCH: &str = "Param type doesn't match synthetic event field type";
const E_SYNTH_COUNT_MISMATCH: &str = "Param count doesn't match synthetic event field count";
const E_FIELD_VAR_PARSE_FAIL: &str = "Couldn't parse field variable";
const E_FIELD_VAR_CREATE_FAIL: &str = "Couldn't create field variable";
const E_TOO_MANY_PARAMS: &str = "Too many action params";
const E_PARAM_NOT_FOUND: &str = "Couldn't find param";
const E_INVALID_PARAM: &str = "Invalid action param";
const E_ACTION_NOT_FOUND: &str = "No action found";
const E_TOO_MANY_SAVE_ACTIONS: &str = "Can't have more than one save() action per hist";
const E_ACTION_MISMATCH: &str = "Handler doesn't support action";
const E_INVALID_REF_KEY: &str = "Using variable references in keys not supported";

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
const FL_VAR: u32 = 1 << 12;
const FL_VAR_REF: u32 = 1 << 14;
const FL_ALIAS: u32 = 1 << 16;
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
    /// A variable's name (`name=...`).
    var_name: Option<String>,
    /// A variable's slot in its histogram's entries.
    var_idx: usize,
    /// A variable reference's index in [`HistDef::refs`].
    ref_idx: usize,
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
            var_name: None,
            var_idx: 0,
            ref_idx: 0,
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

    /// How the trigger file shows a field (`hist_field_print()`): a CPU
    /// field as `common_cpu` whatever its name (6.12 reads `keys=common_cpu`
    /// back as `common_cpu`, measured; older kernels printed the name after
    /// it, `common_cpucommon_cpu`).
    fn print(&self, out: &mut String) {
        if let Some(v) = &self.var_name {
            let _ = write!(out, "{v}=");
        }
        if self.flags & FL_CPU != 0 {
            out.push_str("common_cpu");
        } else if self.flags & FL_COMM != 0 {
            out.push_str("common_comm");
        } else if self.flags & FL_CONST != 0 {
            let _ = write!(out, "{}", self.constant);
        } else {
            if self.flags & (FL_VAR_REF | FL_ALIAS) != 0 {
                out.push('$');
            }
            out.push_str(&self.name);
        }
        if self.flags & (FL_EXPR | FL_VAR_REF) == 0 {
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
        if self.flags & FL_VAR_REF != 0 {
            out.push('$');
        } else if self.flags & FL_CONST != 0 {
            let _ = write!(out, "{}", self.constant);
        }
        out.push_str(&self.name);
        if self.flags != 0 && self.flags & FL_VAR_REF == 0 {
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
    fn num(&self, hit: &Hit<'_>, ts_usecs: bool, refs: &[Val]) -> u64 {
        if self.flags & (FL_VAR_REF | FL_ALIAS) != 0 {
            return match refs.get(self.ref_idx) {
                Some(Val::Num(n)) => *n,
                _ => 0,
            };
        }
        if self.flags & FL_HITCOUNT != 0 && self.operands.is_empty() {
            return 1;
        }
        if self.flags & FL_CONST != 0 {
            return self.constant;
        }
        if self.flags & (FL_LOG2 | FL_BUCKET) != 0 && !self.operands.is_empty() {
            let v = self.operands[0].num(hit, ts_usecs, refs);
            if self.flags & FL_LOG2 != 0 {
                return log2_roundup(v);
            }
            return v / self.buckets * self.buckets;
        }
        if !self.operands.is_empty() {
            let a = self.operands[0].num(hit, ts_usecs, refs);
            if self.op == Op::UnaryMinus {
                return (a as i64).wrapping_neg() as u64;
            }
            let b = self.operands[1].num(hit, ts_usecs, refs);
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

    /// The value a variable takes from this field: strings as their bytes
    /// (at most the field's size less one, and 255), numbers as
    /// [`HField::num`] computes them.
    fn value(&self, hit: &Hit<'_>, ts_usecs: bool, refs: &[Val]) -> Val {
        if self.flags & (FL_VAR_REF | FL_ALIAS) != 0 {
            return refs.get(self.ref_idx).cloned().unwrap_or(Val::Num(0));
        }
        if self.is_string() {
            let mut b = self.key_bytes(hit);
            b.truncate(MAX_FILTER_STR_VAL - 1);
            return Val::Str(b);
        }
        Val::Num(self.num(hit, ts_usecs, refs))
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

/// A variable's value in a histogram entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Val {
    /// A number.
    Num(u64),
    /// A string's bytes.
    Str(Vec<u8>),
}

/// A reference to a variable (`$x`): of another histogram (`target`) or
/// of this one (`None`).
#[derive(Clone, Debug)]
struct VarRef {
    target: Option<Arc<Hist>>,
    /// Reading it clears the variable (references inside expressions).
    read_once: bool,
    /// The reference as a field (name, type, slot of the variable).
    field: HField,
}

/// What an action is attached to.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Handler {
    Match { system: String, event: String },
    Max { var_str: String },
    Change { var_str: String },
}

/// What an action does.
#[derive(Clone, Debug, PartialEq, Eq)]
enum ActKind {
    /// Generate a synthetic event (`trace(name,...)` when `keyword`).
    Trace {
        synth: String,
        keyword: bool,
    },
    Save,
    Snapshot,
}

/// One `handler.action(params)`.
#[derive(Clone, Debug)]
struct Action {
    handler: Handler,
    kind: ActKind,
    /// The action's name as written (`trace`, `save`, `snapshot`, or the
    /// synthetic event's).
    name: String,
    params: Vec<String>,
    /// For `trace`: the reference of each parameter.
    param_refs: Vec<usize>,
    /// For `onmax`/`onchange`: the reference to the tracked variable and
    /// the slot of the value tracked.
    track_ref: usize,
    track_slot: usize,
}

impl Action {
    /// The action as the trigger file shows it (`print_actions_spec()`);
    /// `saves` are the histogram's `save()` variable names.
    fn spec(&self, saves: &[String], out: &mut String) {
        match &self.handler {
            Handler::Match { system, event } => {
                let _ = write!(out, ":onmatch({system}.{event}).{}(", self.name);
            }
            Handler::Max { var_str } => {
                let _ = write!(out, ":onmax({var_str}).{}(", self.name);
            }
            Handler::Change { var_str } => {
                let _ = write!(out, ":onchange({var_str}).{}(", self.name);
            }
        }
        match &self.kind {
            ActKind::Save => out.push_str(&saves.join(",")),
            ActKind::Trace { synth, keyword } => {
                if *keyword {
                    out.push_str(synth);
                }
                for (i, p) in self.params.iter().enumerate() {
                    if i > 0 || *keyword {
                        out.push(',');
                    }
                    out.push_str(p);
                }
            }
            ActKind::Snapshot => {}
        }
        out.push(')');
    }
}

/// What parsing a hist trigger needs to know of the other triggers and
/// events of its trace array.
pub trait HistEnv {
    /// Whether `system:event` exists (`onmatch()` targets).
    fn event_exists(&self, system: &str, event: &str) -> bool;
    /// The registered histograms, with their event's system and name.
    fn hists(&self) -> Vec<(String, String, Arc<Hist>)>;
    /// A synthetic event's definition.
    fn synth(&self, name: &str) -> Option<Arc<super::synth::SynthDef>>;
}

/// Something an action asks of the tracer when it fires.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HistAction {
    /// Generate the synthetic event `name` with these field values.
    Synth {
        /// The synthetic event.
        name: String,
        /// Its fields' values, in order.
        vals: Vec<SynthVal>,
    },
    /// Take a snapshot (`snapshot()`).
    Snapshot,
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
    /// The variables the trigger defines (`name=expr`).
    vars: Vec<HField>,
    refs: Vec<VarRef>,
    /// Variables made for fields named by actions.
    field_vars: Vec<HField>,
    /// Variables `save()` fills.
    save_vars: Vec<HField>,
    actions: Vec<Action>,
    /// How many variable slots an entry has.
    n_slots: usize,
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
                let size = kstrtoul_base0(&sz)?;
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
    env: &'a dyn HistEnv,
    /// `name=expr` definitions of this trigger, as written.
    var_defs: Vec<(String, String)>,
    /// The variables defined so far.
    vars: Vec<HField>,
    refs: Vec<VarRef>,
    /// The `onmatch()` events, where unqualified variables are looked for.
    onmatch: Vec<(String, String)>,
    slots: usize,
    /// Parsing a removal (`!hist:`): no duplicate checks.
    remove: bool,
}

/// A variable found for a reference: its histogram (`None`: the one being
/// defined) and its field.
struct FoundVar {
    hist: Option<Arc<Hist>>,
    field: HField,
}

impl Parser<'_, '_> {
    /// `local_field_var_ref()`: `$x` where this trigger defines `x=field`
    /// stands for the field.
    fn local_field_var_ref(
        &self,
        sys: Option<&str>,
        ev: Option<&str>,
        name: &str,
    ) -> Option<String> {
        if let (Some(s), Some(e)) = (sys, ev) {
            if s != self.def.system || e != self.def.name {
                return None;
            }
        }
        let var = name.strip_prefix('$').filter(|v| !v.is_empty())?;
        let (_, expr) = self.var_defs.iter().find(|(n, _)| n == var)?;
        if contains_operator(expr).0 != Op::None || (expr.len() >= 2 && expr.starts_with('$')) {
            return None;
        }
        Some(expr.clone())
    }

    /// The variable `name` of a registered histogram on `sys:ev`.
    fn file_var(&self, sys: &str, ev: &str, name: &str) -> Option<FoundVar> {
        self.env
            .hists()
            .into_iter()
            .filter(|(s, e, _)| s == sys && e == ev)
            .find_map(|(_, _, h)| {
                h.def.find_var(name).map(|f| FoundVar {
                    field: f.clone(),
                    hist: Some(h.clone()),
                })
            })
    }

    /// `find_event_var()`: a variable of another histogram, looked for on
    /// the `onmatch()` events first, then (unqualified) on every histogram
    /// of the instance, where it must be unique.
    fn find_event_var(
        &mut self,
        sys: Option<&str>,
        ev: Option<&str>,
        name: &str,
    ) -> Option<FoundVar> {
        if sys.is_none() || ev.is_none() {
            let mut found: Option<FoundVar> = None;
            for (s, e) in self.onmatch.clone() {
                if let Some(v) = self.file_var(&s, &e, name) {
                    if found.is_some() {
                        self.errs.at(E_VAR_NOT_UNIQUE, name);
                        return None;
                    }
                    found = Some(v);
                }
            }
            if found.is_some() {
                return found;
            }
        }
        let (s, e) = match (sys, ev) {
            (Some(s), Some(e)) => (s.to_string(), e.to_string()),
            _ => {
                let mut file: Option<(String, String)> = None;
                for (s, e, h) in self.env.hists() {
                    if file.as_ref() == Some(&(s.clone(), e.clone())) {
                        continue;
                    }
                    if h.def.find_var(name).is_some() {
                        if file.is_some() {
                            self.errs.at(E_VAR_NOT_UNIQUE, name);
                            return None;
                        }
                        file = Some((s, e));
                    }
                }
                file?
            }
        };
        self.file_var(&s, &e, name)
    }

    /// `create_var_ref()`: the reference field (one per variable).
    fn var_ref(&mut self, v: &FoundVar, sys: Option<&str>, ev: Option<&str>) -> HField {
        let same = |r: &VarRef| {
            r.field.var_idx == v.field.var_idx
                && match (&r.target, &v.hist) {
                    (None, None) => true,
                    (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                    _ => false,
                }
        };
        if let Some(r) = self.refs.iter().find(|r| same(r)) {
            return r.field.clone();
        }
        let mut f =
            HField::bare(FL_VAR_REF | (v.field.flags & (FL_TIMESTAMP | FL_TIMESTAMP_USECS)));
        let var = v.field.var_name.clone().unwrap_or_default();
        f.name = match (sys, ev) {
            (Some(s), Some(e)) => format!("{s}.{e}.{var}"),
            _ => var,
        };
        f.size = v.field.size;
        f.signed = v.field.signed;
        f.type_name = v.field.type_name.clone();
        f.var_idx = v.field.var_idx;
        f.ref_idx = self.refs.len();
        self.refs.push(VarRef {
            target: v.hist.clone(),
            read_once: false,
            field: f.clone(),
        });
        f
    }

    /// Expression operands that are references read their variable once.
    fn mark_read_once(&mut self, f: &HField) {
        if f.flags & FL_VAR_REF != 0 {
            if let Some(r) = self.refs.get_mut(f.ref_idx) {
                r.read_once = true;
            }
        }
    }

    /// A new variable slot.
    fn slot(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }

    /// `create_field_var()`: a variable holding `field` of this event, for
    /// an action.
    fn field_var(&mut self, field: &str) -> Result<HField, Errno> {
        let mut n_sub = 0;
        let mut f = match self.expr(field, 0, &mut n_sub) {
            Ok(f) if contains_operator(field).0 == Op::None => f,
            _ => {
                self.errs.at(E_FIELD_VAR_PARSE_FAIL, field);
                return Err(Errno::EINVAL);
            }
        };
        f.var_name = Some(field.to_string());
        f.var_idx = self.slot();
        Ok(f)
    }

    /// `parse_field()`: a name and at most one modifier.
    fn field(&mut self, s: &str, flags: &mut u32, buckets: &mut u64) -> Result<HField, Errno> {
        let (fname, modifier) = match s.find('.') {
            Some(i) => (&s[..i], Some(&s[i + 1..])),
            None => (s, None),
        };
        let mut late_bad: Option<&str> = None;
        if let Some(m) = modifier {
            let mut bad_at = m;
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
                    // The kernel's error position is where its modifier
                    // pointer stopped: at the `=`'s absence, or past it.
                    bad_at = r.strip_prefix('=').unwrap_or(r);
                    match r.strip_prefix('=').map(kstrtoul_base0) {
                        Some(Ok(n)) if n != 0 => {
                            *buckets = n;
                            *flags |= FL_BUCKET;
                            true
                        }
                        _ => false,
                    }
                }
                // Stack traces of ordinary fields fail once the field is found.
                // `.syscall` (not replicated) and `.stacktrace` of an
                // ordinary field fail once the field is found: a missing
                // field is "Couldn't find field" first (measured on 6.12).
                "stacktrace" | "syscall" => {
                    late_bad = Some(if m == "syscall" { m } else { s });
                    true
                }
                _ if m.starts_with("percent") && *flags & (FL_KEY | FL_VAR) == 0 => {
                    *flags |= FL_PERCENT;
                    true
                }
                _ if m.starts_with("graph") && *flags & (FL_KEY | FL_VAR) == 0 => {
                    *flags |= FL_GRAPH;
                    true
                }
                _ => false,
            };
            if !ok {
                self.errs.at(E_BAD_FIELD_MODIFIER, bad_at);
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
            "hitcount" => {
                *flags |= FL_HITCOUNT;
                h.name = "hitcount".into();
                h.size = 8;
                h.type_name = "u64".into();
            }
            // Stack traces are not recorded here: keys and variables of
            // them fail as if there were no such field (a known divergence).
            // A value of one fails as in the kernel, which takes no stack
            // trace values.
            "common_stacktrace" | "stacktrace" | "STACKTRACE" => {
                if *flags & (FL_KEY | FL_VAR) == 0 {
                    self.errs.at(E_BAD_FIELD_MODIFIER, s);
                } else {
                    self.errs.at(E_FIELD_NOT_FOUND, fname);
                }
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
        if let Some(at) = late_bad {
            // `.stacktrace` on a field that is not a stack trace: measured on
            // 6.12, the caret at the field.
            self.errs.at(E_BAD_FIELD_MODIFIER, at);
            return Err(Errno::EINVAL);
        }
        Ok(h)
    }

    /// `parse_atom()`: a constant, a variable reference or a field.
    fn atom(&mut self, s: &str, flags: u32) -> Result<HField, Errno> {
        let mut flags = flags;
        if s.as_bytes().first().is_some_and(u8::is_ascii_digit) {
            let Ok(c) = kstrtoul_base0(s) else {
                self.errs.at(E_EXPECT_NUMBER, s);
                return Err(Errno::EINVAL);
            };
            let mut h = HField::bare(flags | FL_CONST);
            h.constant = c;
            h.size = 8;
            h.type_name = "u64".into();
            return Ok(h);
        }
        // `system.event.$var` names a variable of another event.
        let mut name = s;
        let (mut sys, mut ev) = (None, None);
        if let Some(i) = s.find('.') {
            if let Some(j) = s[i + 1..].find('.') {
                sys = Some(&s[..i]);
                ev = Some(&s[i + 1..i + 1 + j]);
                name = &s[i + 1 + j + 1..];
            }
        }
        let local = self.local_field_var_ref(sys, ev, name);
        if let Some(field) = &local {
            name = field;
        } else if name.len() >= 2 && name.starts_with('$') {
            match self.find_event_var(sys, ev, &name[1..]) {
                Some(v) => return Ok(self.var_ref(&v, sys, ev)),
                None => self.errs.at(E_VAR_NOT_FOUND, &name[1..]),
            }
        }
        let name = name.to_string();
        let name = name.as_str();
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
        self.mark_read_once(&a);
        if a.is_string() {
            self.errs.at(E_INVALID_STR_OPERAND, lhs);
            return Err(Errno::EINVAL);
        }
        let mut b = self.expr(rhs, 0, n_sub)?;
        self.mark_read_once(&b);
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
            let mut calc = e.clone();
            calc.flags &= !FL_CONST;
            e.constant = calc.num(&dummy, false, &[]);
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

/// `parse_action_params()`: comma-separated, blanks stripped, each at
/// least two characters; with `keyword` the first is the synthetic event.
fn action_params(
    errs: &mut Errs<'_>,
    params: &str,
    keyword: bool,
    synth: &mut String,
) -> Result<Vec<String>, Errno> {
    let mut out = Vec::new();
    let mut first = true;
    for p in params.split(',') {
        if out.len() >= super::synth::FIELDS_MAX {
            errs.at0(E_TOO_MANY_PARAMS);
            return Err(Errno::EINVAL);
        }
        let p = p.trim_matches(is_space);
        if p.len() < 2 {
            errs.at(E_INVALID_PARAM, p);
            return Err(Errno::EINVAL);
        }
        if first && keyword {
            *synth = p.to_string();
            first = false;
            continue;
        }
        first = false;
        out.push(p.to_string());
    }
    Ok(out)
}

/// `action_parse()`: `.name(params)` after a handler.
fn parse_action(errs: &mut Errs<'_>, s: &str, handler: Handler) -> Result<Action, Errno> {
    let Some((_, after)) = s.split_once('.') else {
        errs.at0(E_ACTION_NOT_FOUND);
        return Err(Errno::EINVAL);
    };
    let Some((name, rest)) = after.split_once('(') else {
        errs.at0(E_ACTION_NOT_FOUND);
        return Err(Errno::EINVAL);
    };
    let onmatch = matches!(handler, Handler::Match { .. });
    let params_text = rest.split(')').next().unwrap_or("");
    let mut synth = String::new();
    let (kind, params) = if name.starts_with("save") {
        let p = action_params(errs, params_text, false, &mut synth)?;
        if onmatch {
            errs.at(E_ACTION_MISMATCH, name);
            return Err(Errno::EINVAL);
        }
        (ActKind::Save, p)
    } else if name.starts_with("snapshot") {
        if !rest.contains(')') {
            errs.at(E_NO_CLOSING_PAREN, rest);
            return Err(Errno::EINVAL);
        }
        if onmatch {
            errs.at(E_ACTION_MISMATCH, name);
            return Err(Errno::EINVAL);
        }
        (ActKind::Snapshot, Vec::new())
    } else {
        let keyword = name.starts_with("trace");
        let p = action_params(errs, params_text, keyword, &mut synth)?;
        if !keyword {
            synth = name.to_string();
        }
        (ActKind::Trace { synth, keyword }, p)
    };
    Ok(Action {
        handler,
        kind,
        name: name.to_string(),
        params,
        param_refs: Vec::new(),
        track_ref: 0,
        track_slot: 0,
    })
}

/// `parse_actions()`: the handlers and actions, before any field.
fn parse_actions(
    errs: &mut Errs<'_>,
    actions: &[String],
    env: &dyn HistEnv,
) -> Result<Vec<Action>, Errno> {
    let mut out = Vec::new();
    for act in actions {
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
            if !env.event_exists(sys, ev) {
                errs.at(E_INVALID_SUBSYS_EVENT, ev);
                return Err(Errno::EINVAL);
            }
            let h = Handler::Match {
                system: sys.to_string(),
                event: ev.to_string(),
            };
            out.push(parse_action(errs, &rest[close + 1..], h)?);
        } else {
            let (rest, max) = match act.strip_prefix("onmax(") {
                Some(r) => (r, true),
                None => (act.strip_prefix("onchange(").unwrap_or(""), false),
            };
            let Some(close) = rest.find(')') else {
                return Err(Errno::EINVAL);
            };
            let var_str = rest[..close].to_string();
            let h = if max {
                Handler::Max { var_str }
            } else {
                Handler::Change { var_str }
            };
            out.push(parse_action(errs, &rest[close + 1..], h)?);
        }
    }
    Ok(out)
}

/// `check_synth_field()`: whether a variable of type `v` fits field `f`.
fn synth_field_ok(f: &super::synth::SynthField, v: &HField) -> bool {
    if v.type_name.contains("char[") && f.is_string && f.is_dynamic {
        return true;
    }
    if f.is_stack {
        return false;
    }
    f.ty == v.type_name || (f.size == v.size && (f.is_string || f.signed == v.signed))
}

/// Parse the text after `hist:` (the filter already split off). `errs`
/// collects what the kernel would log; `env` answers for the other
/// triggers, events and synthetic events; `remove` is set for `!hist:`.
pub(crate) fn parse(
    param: &str,
    def: &EventDef,
    errs: &mut Errs<'_>,
    env: &dyn HistEnv,
    remove: bool,
) -> Result<HistDef, Errno> {
    let param = param.replace(".sym-offset", ".symXoffset");
    let a = parse_attrs(&param, errs)?;

    let mut actions = parse_actions(errs, &a.actions, env)?;

    // `parse_var_defs()`.
    let mut var_defs: Vec<(String, String)> = Vec::new();
    for asg in &a.assignments {
        for piece in asg.split(',').take(VARS_MAX) {
            let Some((name, expr)) = piece.split_once('=') else {
                errs.at(E_MALFORMED_ASSIGNMENT, piece);
                return Err(Errno::EINVAL);
            };
            if var_defs.len() == VARS_MAX {
                errs.at(E_TOO_MANY_VARS, name);
                return Err(Errno::EINVAL);
            }
            var_defs.push((name.to_string(), expr.to_string()));
        }
    }

    let onmatch = actions
        .iter()
        .filter_map(|x| match &x.handler {
            Handler::Match { system, event } => Some((system.clone(), event.clone())),
            _ => None,
        })
        .collect();
    let mut p = Parser {
        def,
        errs,
        timestamps: false,
        ts_in_usecs: false,
        env,
        var_defs,
        vars: Vec::new(),
        refs: Vec::new(),
        onmatch,
        slots: 0,
        remove,
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
                    const BAD: u32 = FL_BUCKET | FL_LOG2 | FL_SYM | FL_SYM_OFFSET;
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

    // `create_var_fields()`.
    for (name, expr) in p.var_defs.clone() {
        let dup = p.vars.iter().any(|v| v.var_name.as_deref() == Some(&name))
            || p.env.hists().iter().any(|(s, e, h)| {
                *s == def.system && *e == def.name && h.def.find_var(&name).is_some()
            });
        if dup && !p.remove {
            p.errs.at(E_DUPLICATE_VAR, &name);
            return Err(Errno::EINVAL);
        }
        let mut n_sub = 0;
        let mut f = p.expr(&expr, FL_VAR, &mut n_sub)?;
        if f.flags & (FL_GRAPH | FL_PERCENT | FL_BUCKET | FL_LOG2) != 0 {
            p.errs.at(E_BAD_FIELD_MODIFIER, &expr);
            return Err(Errno::EINVAL);
        }
        if f.flags & FL_VAR_REF != 0 {
            // `create_alias()`.
            f.flags = (f.flags & !FL_VAR_REF) | FL_ALIAS;
        }
        if f.flags & FL_EXECNAME != 0 {
            f.flags = FL_STRING | FL_VAR | FL_EXECNAME;
            f.size = MAX_FILTER_STR_VAL;
            f.type_name = "char[]".into();
        }
        f.flags |= FL_VAR;
        f.var_name = Some(name);
        f.var_idx = p.slot();
        p.vars.push(f);
    }

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
        let refs_before = p.refs.len();
        let mut f = p.expr(tok, FL_KEY, &mut n_sub)?;
        if p.refs.len() != refs_before || f.flags & FL_VAR_REF != 0 {
            p.errs.at(E_INVALID_REF_KEY, tok);
            return Err(Errno::EINVAL);
        }
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
        vars: Vec::new(),
        refs: Vec::new(),
        field_vars: Vec::new(),
        save_vars: Vec::new(),
        actions: Vec::new(),
        n_slots: 0,
    };

    if let Some(ss) = &a.sort {
        def_out.sort = parse_sort(ss, &def_out, p.errs)?;
    }

    // `create_actions()`.
    let mut field_vars: Vec<HField> = Vec::new();
    let mut save_vars: Vec<HField> = Vec::new();
    for act in &mut actions {
        let onmatch = match &act.handler {
            Handler::Match { system, event } => Some((system.clone(), event.clone())),
            Handler::Max { var_str } | Handler::Change { var_str } => {
                let Some(var) = var_str.strip_prefix('$') else {
                    p.errs.at(E_ONX_NOT_VAR, var_str);
                    return Err(Errno::EINVAL);
                };
                let Some(v) = p
                    .vars
                    .iter()
                    .find(|v| v.var_name.as_deref() == Some(var))
                    .cloned()
                else {
                    p.errs.at(E_ONX_VAR_NOT_FOUND, var);
                    return Err(Errno::EINVAL);
                };
                act.track_ref = p
                    .var_ref(
                        &FoundVar {
                            hist: None,
                            field: v,
                        },
                        None,
                        None,
                    )
                    .ref_idx;
                act.track_slot = p.slot();
                None
            }
        };
        match act.kind.clone() {
            ActKind::Snapshot => {}
            ActKind::Save => {
                if !save_vars.is_empty() {
                    p.errs.at0(E_TOO_MANY_SAVE_ACTIONS);
                    return Err(Errno::EEXIST);
                }
                for prm in &act.params {
                    match p.field_var(prm) {
                        Ok(f) => save_vars.push(f),
                        Err(e) => {
                            p.errs.at(E_FIELD_VAR_CREATE_FAIL, prm);
                            return Err(e);
                        }
                    }
                }
            }
            ActKind::Trace { synth, .. } => {
                let Some(se) = p.env.synth(&synth) else {
                    p.errs.at(E_SYNTH_EVENT_NOT_FOUND, &synth);
                    return Err(Errno::EINVAL);
                };
                act.param_refs = trace_params(&mut p, act, &se, onmatch.as_ref(), &mut field_vars)?;
            }
        }
    }
    def_out.vars = std::mem::take(&mut p.vars);
    def_out.refs = std::mem::take(&mut p.refs);
    def_out.field_vars = field_vars;
    def_out.save_vars = save_vars;
    def_out.actions = actions;
    def_out.n_slots = p.slots;
    Ok(def_out)
}

/// `trace_action_create()`: a reference for each parameter, checked
/// against the synthetic event's fields.
fn trace_params(
    p: &mut Parser<'_, '_>,
    act: &Action,
    se: &SynthDef,
    onmatch: Option<&(String, String)>,
    field_vars: &mut Vec<HField>,
) -> Result<Vec<usize>, Errno> {
    let mut out = Vec::new();
    for prm in &act.params {
        let parts: Vec<&str> = prm.splitn(3, '.').collect();
        let (sys, ev, name) = match parts.as_slice() {
            [n] => (None, None, *n),
            [s, e, n] => (Some(*s), Some(*e), *n),
            _ => return Err(Errno::EINVAL),
        };
        let this = |s: Option<&str>, e: Option<&str>| {
            s.is_none() || (s == Some(p.def.system.as_str()) && e == Some(p.def.name.as_str()))
        };
        let found = if let Some(var) = name.strip_prefix('$') {
            let own = this(sys, ev)
                .then(|| {
                    p.vars
                        .iter()
                        .find(|v| v.var_name.as_deref() == Some(var))
                        .cloned()
                })
                .flatten();
            let f = match own {
                Some(v) => Some(FoundVar {
                    hist: None,
                    field: v,
                }),
                None => {
                    let (s, e) = match (sys, onmatch) {
                        (None, Some((s, e))) => (Some(s.as_str()), Some(e.as_str())),
                        _ => (sys, ev),
                    };
                    p.find_event_var(s, e, var)
                }
            };
            if f.is_none() {
                p.errs.at(E_PARAM_NOT_FOUND, var);
            }
            f
        } else if this(sys, ev) {
            match p.field_var(name) {
                Ok(f) => {
                    field_vars.push(f.clone());
                    Some(FoundVar {
                        hist: None,
                        field: f,
                    })
                }
                Err(_) => {
                    // A field of the matched event needs a histogram made
                    // there for it, which this replica does not do.
                    p.errs.at(E_HIST_NOT_FOUND, name);
                    None
                }
            }
        } else {
            p.errs.at(E_HIST_NOT_FOUND, name);
            None
        };
        let Some(v) = found else {
            return Err(Errno::EINVAL);
        };
        let Some(sf) = se.fields.get(out.len()) else {
            p.errs.at(E_SYNTH_TYPE_MISMATCH, name);
            return Err(Errno::EINVAL);
        };
        if !synth_field_ok(sf, &v.field) {
            p.errs.at(E_SYNTH_TYPE_MISMATCH, name);
            return Err(Errno::EINVAL);
        }
        out.push(p.var_ref(&v, sys, ev).ref_idx);
    }
    if out.len() != se.fields.len() {
        p.errs.at(E_SYNTH_COUNT_MISMATCH, &se.name);
        return Err(Errno::EINVAL);
    }
    Ok(out)
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
        // The name is looked up first and the modifier checked only for a
        // name found (`sort=nosuch.foo`: "Sort field must be a key or a
        // val", measured on 6.12).
        let idx = if name == "hitcount" {
            0
        } else {
            match (1..fields.len()).find(|&j| fields[j].name == name) {
                Some(j) => j,
                None => {
                    errs.at(E_INVALID_SORT_FIELD, name);
                    return Err(Errno::EINVAL);
                }
            }
        };
        let descending = match modifier {
            None | Some("ascending") => false,
            Some("descending") => true,
            Some(m) => {
                errs.at(E_INVALID_SORT_MODIFIER, m);
                return Err(Errno::EINVAL);
            }
        };
        out.push(SortKey { idx, descending });
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
    /// The variable `name` this trigger defines.
    fn find_var(&self, name: &str) -> Option<&HField> {
        self.vars
            .iter()
            .find(|v| v.var_name.as_deref() == Some(name))
    }

    /// Whether the trigger defines or references variables (the kernel
    /// keeps such triggers on the instance's list of variable holders).
    pub(crate) fn has_vars(&self) -> bool {
        !self.vars.is_empty() || !self.refs.is_empty()
    }

    /// The histograms whose variables this trigger references.
    pub(crate) fn referenced(&self) -> Vec<Arc<Hist>> {
        let mut out: Vec<Arc<Hist>> = Vec::new();
        for r in &self.refs {
            if let Some(h) = &r.target {
                if !out.iter().any(|x| Arc::ptr_eq(x, h)) {
                    out.push(h.clone());
                }
            }
        }
        out
    }

    /// The synthetic events this trigger's actions generate.
    pub(crate) fn synth_targets(&self) -> Vec<String> {
        self.actions
            .iter()
            .filter_map(|a| match &a.kind {
                ActKind::Trace { synth, .. } => Some(synth.clone()),
                _ => None,
            })
            .collect()
    }

    fn actions_spec(&self) -> String {
        let saves: Vec<String> = self
            .save_vars
            .iter()
            .map(|v| v.var_name.clone().unwrap_or_default())
            .collect();
        let mut s = String::new();
        for a in &self.actions {
            a.spec(&saves, &mut s);
        }
        s
    }

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
        let var = |x: &HField| (x.var_name.clone(), x.flags, x.name.clone(), x.size);
        self.vals.len() == o.vals.len()
            && a.len() == b.len()
            && self.sort == o.sort
            && self.vars.iter().map(var).eq(o.vars.iter().map(var))
            && self.actions_spec() == o.actions_spec()
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
        if !self.vars.is_empty() {
            s.push(':');
            for (i, v) in self.vars.iter().enumerate() {
                if i > 0 {
                    s.push(',');
                }
                v.print(&mut s);
            }
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
        s.push_str(&self.actions_spec());
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
    /// The variables' values, by slot (`None`: not set).
    vars: Vec<Option<Val>>,
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
pub struct Hist {
    /// The definition of the trigger that made it.
    pub(crate) def: HistDef,
    map: Mutex<MapState>,
    /// How many other triggers reference its variables (it cannot be
    /// removed while any does: `EBUSY`).
    pub(crate) referenced_by: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hist")
    }
}

impl Hist {
    /// An empty histogram for `def`.
    pub(crate) fn new(def: HistDef) -> Arc<Hist> {
        Arc::new(Hist {
            def,
            map: Mutex::new(MapState::default()),
            referenced_by: Default::default(),
        })
    }

    /// `resolve_var_refs()`: the references' values for `key`, from the
    /// other histograms (`own` is `None`) or from this one's entry `own`.
    /// `None` when a variable is not set.
    fn resolve(&self, key: &[KeyPart], vals: &mut [Val], own: Option<&mut Elt>) -> Option<()> {
        let d = &self.def;
        match own {
            None => {
                for (i, r) in d.refs.iter().enumerate() {
                    let Some(h) = &r.target else { continue };
                    let mut m = h.map.lock_ok();
                    let MapState { index, elts, .. } = &mut *m;
                    let e = &mut elts[*index.get(key)?];
                    let slot = e.vars.get_mut(r.field.var_idx)?;
                    vals[i] = if r.read_once {
                        slot.take()?
                    } else {
                        slot.clone()?
                    };
                }
            }
            Some(e) => {
                for (i, r) in d.refs.iter().enumerate() {
                    if r.target.is_none() {
                        vals[i] = e.vars.get(r.field.var_idx)?.clone()?;
                    }
                }
            }
        }
        Some(())
    }

    /// Count one hit (`event_hist_trigger()`): resolve the references to
    /// other histograms' variables for the hit's key (no entry without
    /// them), update the entry's sums and variables, then run the actions
    /// and return what they ask of the tracer.
    pub(crate) fn record(&self, hit: &Hit<'_>) -> Vec<HistAction> {
        let d = &self.def;
        let us = d.ts_in_usecs;
        let key: Vec<KeyPart> = d
            .keys
            .iter()
            .map(|k| {
                if k.is_string() {
                    KeyPart::Str(k.key_bytes(hit))
                } else {
                    KeyPart::Num(k.num(hit, us, &[]))
                }
            })
            .collect();
        let mut refs = vec![Val::Num(0); d.refs.len()];
        if d.refs.iter().any(|r| r.target.is_some())
            && self.resolve(&key, &mut refs, None).is_none()
        {
            return Vec::new();
        }
        let mut m = self.map.lock_ok();
        let idx = match m.index.get(&key) {
            Some(&i) => i,
            None => {
                if m.elts.len() >= 1usize << d.map_bits {
                    m.drops += 1;
                    return Vec::new();
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
                    vars: vec![None; d.n_slots],
                });
                m.index.insert(key.clone(), i);
                i
            }
        };
        m.hits += 1;
        let e = &mut m.elts[idx];
        for (s, v) in e.sums.iter_mut().zip(&d.vals) {
            *s = s.wrapping_add(v.num(hit, us, &refs));
        }
        for v in d.vars.iter().chain(&d.field_vars) {
            e.vars[v.var_idx] = Some(v.value(hit, us, &refs));
        }
        let mut out = Vec::new();
        if self.resolve(&key, &mut refs, Some(e)).is_none() {
            return out;
        }
        for a in &d.actions {
            let fire = match &a.handler {
                Handler::Match { .. } => true,
                h => {
                    let now = match &refs[a.track_ref] {
                        Val::Num(n) => *n,
                        Val::Str(_) => 0,
                    };
                    let old = match &e.vars[a.track_slot] {
                        Some(Val::Num(n)) => *n,
                        _ => 0,
                    };
                    let hit_it = match h {
                        Handler::Max { .. } => now > old,
                        _ => now != old,
                    };
                    if hit_it {
                        e.vars[a.track_slot] = Some(Val::Num(now));
                    }
                    hit_it
                }
            };
            if !fire {
                continue;
            }
            match &a.kind {
                ActKind::Save => {
                    for v in &d.save_vars {
                        e.vars[v.var_idx] = Some(v.value(hit, us, &refs));
                    }
                }
                ActKind::Snapshot => out.push(HistAction::Snapshot),
                ActKind::Trace { synth, .. } => {
                    let vals = a
                        .param_refs
                        .iter()
                        .map(|&i| match &refs[i] {
                            Val::Num(n) => SynthVal::Num(*n),
                            Val::Str(b) => SynthVal::Str(b.clone()),
                        })
                        .collect();
                    out.push(HistAction::Synth {
                        name: synth.clone(),
                        vals,
                    });
                }
            }
        }
        out
    }

    /// `print_actions()`: the tracked value and the saved fields of an
    /// entry, for `onmax()`/`onchange()` actions other than `snapshot()`.
    fn print_actions(&self, s: &mut String, e: &Elt) {
        let d = &self.def;
        for a in &d.actions {
            if a.kind == ActKind::Snapshot {
                continue;
            }
            let label = match a.handler {
                Handler::Max { .. } => "max",
                Handler::Change { .. } => "changed",
                Handler::Match { .. } => continue,
            };
            let track = match &e.vars[a.track_slot] {
                Some(Val::Num(n)) => *n,
                _ => 0,
            };
            let _ = write!(s, "\n\t{label}: {track:>10}");
            for v in &d.save_vars {
                let name = v.var_name.as_deref().unwrap_or("");
                match &e.vars[v.var_idx] {
                    Some(Val::Str(b)) => {
                        let _ = write!(s, "  {name}: ");
                        pad_str(s, b, 32);
                    }
                    Some(Val::Num(n)) => {
                        let _ = write!(s, "  {name}: {n:>10}");
                    }
                    None if v.is_string() => {
                        let _ = write!(s, "  {name}: {:<32}", "(null)");
                    }
                    None => {
                        let _ = write!(s, "  {name}: {:>10}", 0);
                    }
                }
            }
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
        // The total and the largest of each `.percent` or `.graph` value
        // over the entries.
        let mut stats = vec![(0u64, 0u64); d.vals.len()];
        for (j, v) in d.vals.iter().enumerate() {
            if v.flags & (FL_PERCENT | FL_GRAPH) != 0 {
                for e in &m.elts {
                    stats[j].0 = stats[j].0.wrapping_add(e.sums[j]);
                    stats[j].1 = stats[j].1.max(e.sums[j]);
                }
            }
        }
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
                if v.flags & FL_PERCENT != 0 {
                    match percentage(val, stats[j].0) {
                        u32::MAX => {
                            let _ = write!(s, "  {name} (%):[ERROR]");
                        }
                        pc => {
                            let _ = write!(s, "  {name} (%): {:>3}.{:02}", pc / 100, pc % 100);
                        }
                    }
                } else if v.flags & FL_GRAPH != 0 {
                    let _ = write!(s, "  {name}: {:>20}", bar(val, stats[j].1));
                } else if v.flags & FL_HEX != 0 {
                    let _ = write!(s, "  {name}: {val:>10x}");
                } else {
                    let _ = write!(s, "  {name}: {val:>10}");
                }
            }
            self.print_actions(&mut s, e);
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
    let t = crate::base::bytestr::text(&b[..end]);
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

/// 100 times the percentage `val` is of `total`, as the kernel's
/// `__get_percentage` computes it; `u32::MAX` where it cannot (a value of
/// a zero total).
fn percentage(val: u64, total: u64) -> u32 {
    if total == 0 {
        return if val != 0 { u32::MAX } else { 0 };
    }
    if val < u64::MAX / 10000 {
        return (val * 10000 / total) as u32;
    }
    match total / 10000 {
        0 => u32::MAX,
        t => (val / t) as u32,
    }
}

/// A `.graph` value's bar: `#` for its share of the largest value, in 20
/// columns, or `[ERROR]`.
fn bar(val: u64, max: u64) -> String {
    const WIDTH: u32 = 20;
    let len = percentage(val, max);
    if len == u32::MAX {
        return "[ERROR]".into();
    }
    let n = (len.wrapping_mul(WIDTH) / 10000).min(WIDTH) as usize;
    format!("{:<20}", "#".repeat(n))
}
