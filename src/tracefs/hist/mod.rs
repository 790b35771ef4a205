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
//! `snapshot` are supported, with synthetic events (see `synth/`).
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
//!
//! The pieces, as the kernel splits them: this module holds the types of a
//! parsed trigger; `parse.rs` (with the field expressions in
//! `expr.rs` and the actions in `actions.rs`) builds one from a command,
//! as `trace_events_hist.c` does; `eval.rs` computes a field's value for a
//! hit; `map.rs` is the map (`tracing_map.c`) and the recording of a hit
//! into it; `print.rs` prints the trigger and the `hist` file.

pub(crate) mod files;

mod actions;
mod eval;
mod expr;
mod map;
mod parse;
mod print;

pub use map::NamedHists;
pub(crate) use parse::{parse, split_filter};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::tracefs::events::Field;
use crate::tracefs::synth::SynthVal;

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

/// The clocks `trace_clock` offers (`clock=` must name one when the
/// trigger uses timestamps).
const CLOCKS: &[&str] = &[
    "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai", "x86-tsc",
];

/// `ilog2(roundup_pow_of_two(v))` as the kernel computes it on x86-64 (0
/// and values above 2^63 give 0).
fn log2_roundup(v: u64) -> u64 {
    if v <= 1 || v > 1 << 63 {
        return 0;
    }
    64 - (v - 1).leading_zeros() as u64
}

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

/// What parsing a hist trigger needs to know of the other triggers and
/// events of its trace array.
pub trait HistEnv {
    /// Whether `system:event` exists (`onmatch()` targets).
    fn event_exists(&self, system: &str, event: &str) -> bool;
    /// The registered histograms, with their event's system and name.
    fn hists(&self) -> Vec<(String, String, Arc<Hist>)>;
    /// A synthetic event's definition.
    fn synth(&self, name: &str) -> Option<Arc<crate::tracefs::synth::SynthDef>>;
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
    /// The map's memory, charged when the histogram was made (given back
    /// when it goes): held, never read.
    _mem: Option<crate::base::budget::Grant>,
}

impl std::fmt::Debug for Hist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hist")
    }
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
