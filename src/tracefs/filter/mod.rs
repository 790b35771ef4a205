//! Event filters: the expression language of `events/.../filter`.
//!
//! Grammar (Documentation/trace/events.rst §5): predicates `field op value`
//! joined by `&&` and `||` (`&&` binds tighter), grouped with parentheses and
//! negated with `!`. Numeric ops `== != < <= > >= &`, string ops `== != ~`
//! (globs `* ? [...]`); strings must be quoted.
//!
//! Errors reproduce what the 6.18 tracefs reports, measured on this machine:
//! which check wins, the errno (paren and quote errors from the first pass
//! give EPERM/ENOENT/ESRCH, not EINVAL) and the caret column of the message
//! that reading the filter shows afterwards.

mod eval;
pub(crate) mod files;

use crate::base::errno::Errno;

use crate::tracefs::events::Field;
use crate::tracefs::parse::{is_alnum, is_space};

pub use eval::glob;

/// A parse failure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterError {
    /// The errno the write fails with.
    pub errno: Errno,
    /// Caret column and message, or `None` for the bare `Error: (0)` form.
    pub detail: Option<(usize, &'static str)>,
    /// Where `error_log` puts its caret: the kernel's `lasterr_pos`, which
    /// the `filter` file clamps to the text's length and `error_log` does
    /// not (0 for the bare form).
    pub log_pos: usize,
}

impl FilterError {
    fn bare(errno: Errno) -> Self {
        FilterError {
            errno,
            detail: None,
            log_pos: 0,
        }
    }
    fn at(errno: Errno, col: usize, msg: &'static str) -> Self {
        FilterError {
            errno,
            detail: Some((col, msg)),
            log_pos: col,
        }
    }
}

const E_INVALID_VALUE: &str = "Invalid value (did you forget quotes)?";
const E_INVALID_OP: &str = "Invalid operator";
const E_FIELD_NOT_FOUND: &str = "Field not found";
const E_ILLEGAL_OP: &str = "Illegal operation for field type";
const E_ILLEGAL_INT: &str = "Illegal integer value";
const E_EXPECT_STRING: &str = "Expecting string field";
const E_EXPECT_DIGIT: &str = "Expecting numeric field";
const E_TOO_LONG: &str = "Operand too long";
const E_TOO_MANY_OPEN: &str = "Too many '('";
const E_TOO_MANY_CLOSE: &str = "Too few '('";
const E_MISSING_QUOTE: &str = "Missing matching quote";
const E_TOO_MANY_PREDS: &str = "Too many terms in predicate expression";
const E_NO_FILTER: &str = "No filter found";
const E_INVALID_FILTER: &str = "Meaningless filter expression";
const E_BRACE_OPEN: &str = "Missing '{'";
const E_BRACE_CLOSE: &str = "Missing '}'";
const E_CPULIST: &str = "Invalid cpulist";
/// The message every event of a system gets when a system filter does not
/// apply to it.
pub const E_BAD_SUBSYS: &str = "Couldn't find or set field in one of a subsystem's events";

/// The longest numeric operand (23 characters were accepted, 24 refused).
const MAX_NUM_LEN: usize = 23;
/// The longest quoted string (255 accepted, 256 refused).
const MAX_STR_LEN: usize = 255;

/// What a predicate looks at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// A field of the record.
    Field(Field),
    /// `CPU`, `cpu`, `common_cpu`: the CPU that recorded the event.
    Cpu,
    /// `COMM`, `comm`: the task name.
    Comm,
    /// `stacktrace`, `STACKTRACE`: the kernel's generic stack-trace field
    /// (`FILTER_STACKTRACE`, size 0). Its predicates parse as those of an
    /// unsigned number, and as no comparison exists for size 0 they never
    /// match: `!=` always does, every other operator never.
    Stacktrace,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    And,
    Glob,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Value {
    Num(i128),
    Str(Vec<u8>),
    /// `CPUS{list}` of more (or fewer) than one CPU: the set, as a mask.
    Cpus(Vec<bool>),
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Pred {
    target: Target,
    op: Op,
    value: Value,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Pred(Pred, bool),
    /// OR of ANDs, possibly inverted.
    Group(Vec<Vec<Node>>, bool),
}

/// A compiled filter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    root: Vec<Vec<Node>>,
}

/// What a record offers to a filter.
pub struct Record<'a> {
    /// The entry bytes (common header included).
    pub entry: &'a [u8],
    /// The recording CPU.
    pub cpu: u32,
    /// The task name.
    pub comm: &'a str,
}

/// First pass: parentheses, quotes and whether there is any predicate.
fn prescan(s: &[u8]) -> Result<(), FilterError> {
    let mut opens: Vec<usize> = Vec::new();
    let mut quote: Option<(u8, usize)> = None;
    let mut in_pred = false;
    let mut preds = 0;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if let Some((q, _)) = quote {
            if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        if is_space(c) {
            i += 1;
            continue;
        }
        match c {
            b'"' | b'\'' => quote = Some((c, i)),
            // As the kernel's calc_stack: the first of `&&` ends a
            // predicate, the second is looked at on its own and, unless
            // another follows, starts one (`&&` alone counts one).
            b'&' | b'|' if s.get(i + 1) == Some(&c) => {
                in_pred = false;
                i += 1;
                continue;
            }
            b'(' => {
                opens.push(i);
                in_pred = false;
                i += 1;
                continue;
            }
            b')' => {
                if opens.pop().is_none() {
                    return Err(FilterError::at(Errno::EPERM, i, E_TOO_MANY_CLOSE));
                }
                in_pred = false;
                i += 1;
                continue;
            }
            _ => {}
        }
        if !in_pred {
            preds += 1;
            in_pred = true;
        }
        i += 1;
    }
    if let Some((_, at)) = quote {
        return Err(FilterError::at(Errno::ESRCH, at, E_MISSING_QUOTE));
    }
    if let Some(&at) = opens.last() {
        return Err(FilterError::at(Errno::ENOENT, at, E_TOO_MANY_OPEN));
    }
    if preds == 0 {
        return Err(FilterError::bare(Errno::EINVAL));
    }
    Ok(())
}

/// The CPUs the kernel can have (`nr_cpu_ids`): the last of
/// `/sys/devices/system/cpu/possible` plus one.
fn possible_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|t| {
            let last = t.trim().rsplit([',', '-']).next()?.parse::<usize>().ok()?;
            Some(last + 1)
        })
        .unwrap_or(1)
}

/// A cpulist (`0-3,8`, `0-7:2/4`, `all`, `N` for the last CPU; regions
/// separated by commas, blanks between them ignored) as a mask of `nbits`
/// CPUs, as `bitmap_parselist` reads it. None if malformed or past the
/// last CPU.
fn parse_cpulist(t: &[u8], nbits: usize) -> Option<Vec<bool>> {
    let mut mask = vec![false; nbits];
    let mut i = 0;
    let num = |i: &mut usize| -> Option<usize> {
        if t.get(*i) == Some(&b'N') {
            *i += 1;
            return nbits.checked_sub(1);
        }
        let st = *i;
        while *i < t.len() && t[*i].is_ascii_digit() {
            *i += 1;
        }
        std::str::from_utf8(&t[st..*i]).ok()?.parse().ok()
    };
    loop {
        while i < t.len() && (t[i] == b',' || t[i].is_ascii_whitespace()) {
            i += 1;
        }
        if i >= t.len() {
            return Some(mask);
        }
        let (lo, hi) = if t[i..].starts_with(b"all") {
            i += 3;
            (0, nbits.checked_sub(1)?)
        } else {
            let lo = num(&mut i)?;
            let hi = if t.get(i) == Some(&b'-') {
                i += 1;
                num(&mut i)?
            } else {
                lo
            };
            (lo, hi)
        };
        let (mut used, mut group) = (1, 1);
        if t.get(i) == Some(&b':') {
            i += 1;
            used = num(&mut i)?;
            if t.get(i) != Some(&b'/') {
                return None;
            }
            i += 1;
            group = num(&mut i)?;
        }
        if i < t.len() && !(t[i] == b',' || t[i].is_ascii_whitespace()) {
            return None;
        }
        if lo > hi || hi >= nbits || group == 0 || used > group {
            return None;
        }
        for (c, m) in mask.iter_mut().enumerate().take(hi + 1).skip(lo) {
            if (c - lo) % group < used {
                *m = true;
            }
        }
    }
}

/// `kstrtoll`/`kstrtoull` with base 0 (`0x` hex, leading `0` octal).
fn parse_int(tok: &str, signed: bool) -> Option<i128> {
    let (neg, body) = match tok.strip_prefix('-') {
        Some(b) if signed => (true, b),
        Some(_) => return None,
        None => (false, tok.strip_prefix('+').unwrap_or(tok)),
    };
    let (radix, digits) =
        if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
            (16, h)
        } else if body.len() > 1 && body.starts_with('0') {
            (8, &body[1..])
        } else {
            (10, body)
        };
    if digits.is_empty() {
        return None;
    }
    let v = u64::from_str_radix(digits, radix).ok()? as i128;
    if signed {
        let v = if neg { -v } else { v };
        (i64::MIN as i128..=i64::MAX as i128)
            .contains(&v)
            .then_some(v)
    } else {
        Some(v)
    }
}

struct Parser<'a> {
    s: &'a [u8],
    lookup: &'a dyn Fn(&str) -> Option<Target>,
}

impl Parser<'_> {
    /// An error reported at byte `pos` inside a predicate: the kernel counts
    /// the position from 1, and the `filter` file clamps it to the text.
    fn err(&self, errno: Errno, pos: usize, msg: &'static str) -> FilterError {
        FilterError {
            errno,
            detail: Some(((pos + 1).min(self.s.len()), msg)),
            log_pos: pos + 1,
        }
    }

    fn skip_ws(&self, mut i: usize) -> usize {
        while i < self.s.len() && is_space(self.s[i]) {
            i += 1;
        }
        i
    }

    /// One predicate starting at `start`; returns it and where it ends.
    fn pred(&self, start: usize) -> Result<(Pred, usize), FilterError> {
        let s = self.s;
        let fs = self.skip_ws(start);
        let mut fe = fs;
        while fe < s.len() && (is_alnum(s[fe]) || s[fe] == b'_') {
            fe += 1;
        }
        if fe == fs {
            return Err(FilterError::bare(Errno::EPERM));
        }
        let name = std::str::from_utf8(&s[fs..fe]).unwrap_or("");
        let target =
            (self.lookup)(name).ok_or_else(|| self.err(Errno::EINVAL, fe, E_FIELD_NOT_FOUND))?;
        let p = self.skip_ws(fe);
        const OPS: [(&str, Op); 8] = [
            ("==", Op::Eq),
            ("!=", Op::Ne),
            ("<=", Op::Le),
            (">=", Op::Ge),
            ("<", Op::Lt),
            (">", Op::Gt),
            ("&", Op::And),
            ("~", Op::Glob),
        ];
        let (optext, op) = OPS
            .iter()
            .find(|(t, _)| s[p..].starts_with(t.as_bytes()))
            .copied()
            .ok_or_else(|| self.err(Errno::EINVAL, p, E_INVALID_OP))?;
        let v = self.skip_ws(p + optext.len());
        let is_string = match &target {
            Target::Field(f) => f.is_string(),
            Target::Cpu | Target::Stacktrace => false,
            Target::Comm => true,
        };
        // The kernel's order of checks (parse_pred): for a quoted operand
        // the operator, then the field's type, then the length; for a
        // number the field's type, the operator, the length, the value.
        if s[v..].starts_with(b"CPUS") {
            return self.cpus(target, op, v, is_string);
        }
        match s.get(v) {
            Some(&q) if q == b'"' || q == b'\'' => {
                if !matches!(op, Op::Eq | Op::Ne | Op::Glob) {
                    return Err(self.err(Errno::EINVAL, v, E_ILLEGAL_OP));
                }
                if !is_string {
                    return Err(self.err(Errno::EINVAL, v, E_EXPECT_DIGIT));
                }
                let close = s[v + 1..]
                    .iter()
                    .position(|&c| c == q)
                    .map(|k| v + 1 + k)
                    .unwrap_or(s.len());
                if close - (v + 1) > MAX_STR_LEN {
                    return Err(self.err(Errno::EINVAL, close, E_TOO_LONG));
                }
                let ve = (close + 1).min(s.len());
                let value = Value::Str(s[v + 1..close].to_vec());
                Ok((Pred { target, op, value }, ve))
            }
            Some(&c) if c.is_ascii_digit() || c == b'-' => {
                if is_string {
                    return Err(self.err(Errno::EINVAL, v, E_EXPECT_STRING));
                }
                if op == Op::Glob {
                    return Err(self.err(Errno::EINVAL, v, E_ILLEGAL_OP));
                }
                // A number is an optional '-' and letters and digits; what
                // follows is the expression's (an operator, a ')', or
                // "Too many terms").
                let mut ve = v + usize::from(c == b'-');
                while ve < s.len() && is_alnum(s[ve]) {
                    ve += 1;
                }
                if ve - v > MAX_NUM_LEN {
                    return Err(self.err(Errno::EINVAL, ve, E_TOO_LONG));
                }
                let signed = match &target {
                    Target::Field(f) => f.signed,
                    Target::Stacktrace => false,
                    _ => true,
                };
                let tok = std::str::from_utf8(&s[v..ve]).unwrap_or("");
                let n = parse_int(tok, signed)
                    .ok_or_else(|| self.err(Errno::EINVAL, v, E_ILLEGAL_INT))?;
                Ok((
                    Pred {
                        target,
                        op,
                        value: Value::Num(n),
                    },
                    ve,
                ))
            }
            _ => Err(self.err(Errno::EINVAL, v, E_INVALID_VALUE)),
        }
    }

    /// `CPUS{list}` at `v`: for the CPU, or a numeric field (not a
    /// string) with `==`, `!=` or `&`. One CPU is a plain number (`&`
    /// becoming `==`); a set matches, as the kernel's cpumask predicates
    /// do, with `&` when the value is in it, never with `==` and always
    /// with `!=`.
    fn cpus(
        &self,
        target: Target,
        op: Op,
        v: usize,
        is_string: bool,
    ) -> Result<(Pred, usize), FilterError> {
        let s = self.s;
        if is_string
            || matches!(target, Target::Stacktrace)
            || !matches!(op, Op::Eq | Op::Ne | Op::And)
        {
            return Err(self.err(Errno::EINVAL, v, E_ILLEGAL_OP));
        }
        let open = v + 4;
        if s.get(open) != Some(&b'{') {
            return Err(self.err(Errno::EINVAL, open + 1, E_BRACE_OPEN));
        }
        let start = open + 1;
        let Some(close) = s[start..]
            .iter()
            .position(|&c| c == b'}')
            .map(|k| start + k)
        else {
            return Err(self.err(Errno::EINVAL, s.len(), E_BRACE_CLOSE));
        };
        if close == start {
            return Err(self.err(Errno::EINVAL, close, E_CPULIST));
        }
        let mask = parse_cpulist(&s[start..close], possible_cpus())
            .ok_or_else(|| self.err(Errno::EINVAL, close, E_CPULIST))?;
        let set: Vec<usize> = (0..mask.len()).filter(|&c| mask[c]).collect();
        let (op, value) = if set.len() == 1 {
            let op = if op == Op::And { Op::Eq } else { op };
            (op, Value::Num(set[0] as i128))
        } else {
            (op, Value::Cpus(mask))
        };
        Ok((Pred { target, op, value }, close + 1))
    }

    fn parse(&self) -> Result<Filter, FilterError> {
        prescan(self.s)?;
        let s = self.s;
        // Frames of open groups: (OR-terms, current AND-term, invert of the group).
        let mut stack: Vec<(Vec<Vec<Node>>, Vec<Node>, bool)> =
            vec![(Vec::new(), Vec::new(), false)];
        let mut invert = false;
        let mut npreds = 0;
        let mut i = 0;
        'outer: loop {
            // Expecting a predicate.
            i = self.skip_ws(i);
            if i >= s.len() {
                // Only a predicate completes an expression: one that ends
                // in `&&`, `||` or `!` is refused (6.12; this machine's
                // 6.18.44 predates that fix and takes it).
                if npreds > 0 {
                    return Err(FilterError::at(Errno::EINVAL, s.len(), E_INVALID_FILTER));
                }
                break;
            }
            match s[i] {
                b'!' => {
                    invert = !invert;
                    i += 1;
                    continue;
                }
                b'(' => {
                    stack.push((Vec::new(), Vec::new(), invert));
                    invert = false;
                    i += 1;
                    continue;
                }
                _ => {}
            }
            let (p, end) = self.pred(i)?;
            stack.last_mut().unwrap().1.push(Node::Pred(p, invert));
            invert = false;
            npreds += 1;
            i = end;
            // Expecting an operator, a close or the end.
            loop {
                i = self.skip_ws(i);
                if i >= s.len() {
                    break 'outer;
                }
                match s[i] {
                    b')' => {
                        let (mut ors, and, inv) = stack.pop().unwrap();
                        if !and.is_empty() {
                            ors.push(and);
                        }
                        stack.last_mut().unwrap().1.push(Node::Group(ors, inv));
                        i += 1;
                    }
                    b'&' if s.get(i + 1) == Some(&b'&') => {
                        i += 2;
                        continue 'outer;
                    }
                    b'|' if s.get(i + 1) == Some(&b'|') => {
                        let top = stack.last_mut().unwrap();
                        let and = std::mem::take(&mut top.1);
                        if !and.is_empty() {
                            top.0.push(and);
                        }
                        i += 2;
                        continue 'outer;
                    }
                    _ => return Err(FilterError::at(Errno::EPERM, i, E_TOO_MANY_PREDS)),
                }
            }
        }
        if npreds == 0 {
            return Err(FilterError::at(Errno::EINVAL, s.len(), E_NO_FILTER));
        }
        // The prescan guarantees balanced parentheses.
        let (mut ors, and, _) = stack.pop().unwrap();
        if !and.is_empty() {
            ors.push(and);
        }
        Ok(Filter { root: ors })
    }
}

/// Parse a filter, its bytes (trailing whitespace already removed).
pub fn parse(
    text: &(impl AsRef<[u8]> + ?Sized),
    lookup: &dyn Fn(&str) -> Option<Target>,
) -> Result<Filter, FilterError> {
    Parser {
        s: text.as_ref(),
        lookup,
    }
    .parse()
}

/// The lookup for an event: its fields, the common fields and the generic
/// `CPU`/`COMM` names.
pub fn event_lookup(
    def: &crate::tracefs::events::EventDef,
) -> impl Fn(&str) -> Option<Target> + '_ {
    move |name| match name {
        "CPU" | "cpu" | "common_cpu" => Some(Target::Cpu),
        "COMM" | "comm" => Some(Target::Comm),
        "stacktrace" | "STACKTRACE" => Some(Target::Stacktrace),
        _ => def.field(name).map(Target::Field),
    }
}

/// What reading `filter` shows after a failed write of `text` (bytes).
pub fn error_text(text: &(impl AsRef<[u8]> + ?Sized), err: &FilterError) -> String {
    let raw = text.as_ref();
    let text = crate::base::bytestr::text(raw);
    let s = match err.detail {
        Some((col, msg)) => format!("{text}\n{}^\nparse_error: {msg}\n\n", " ".repeat(col)),
        None => format!("{text}\nError: (0)\n\n"),
    };
    // The kernel prints into one page; when the error does not fit, only the
    // filter text is left.
    if s.len() - text.len() + raw.len() >= 4096 {
        format!("{text}\n")
    } else {
        s
    }
}

/// The bytes a write leaves: up to a NUL, trailing whitespace removed.
pub fn clean(data: &[u8]) -> &[u8] {
    let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
    let len = data[..end]
        .iter()
        .rposition(|&c| !is_space(c))
        .map_or(0, |p| p + 1);
    &data[..len]
}

/// Whether a cleaned write is `0` (clearing the filter), spaces around it
/// allowed, as `strstrip()` leaves it.
pub fn is_clear(text: &[u8]) -> bool {
    text.iter().skip_while(|&&c| is_space(c)).eq(b"0")
}

#[cfg(test)]
mod tests;
