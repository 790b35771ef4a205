//! The hist field expression parser: a field with its modifiers, a
//! variable reference (`$x`, `sys.event.$x`), a constant, or `+ - * /`
//! expressions of them, as `parse_expr()`, `parse_atom()` and
//! `create_field_var()` in `kernel/trace/trace_events_hist.c` build them.

use super::{
    DivFn, Errs, HField, Hist, HistEnv, Hit, Op, Src, VarRef, DIV_SHIFT, E_BAD_FIELD_MODIFIER,
    E_DIVISION_BY_ZERO, E_EXPECT_NUMBER, E_FIELD_NOT_FOUND, E_FIELD_VAR_PARSE_FAIL,
    E_INVALID_STR_OPERAND, E_TIMESTAMP_MISMATCH, E_TOO_MANY_SUBEXPR, E_UNARY_MINUS_SUBEXPR,
    E_VAR_NOT_FOUND, E_VAR_NOT_UNIQUE, FL_BUCKET, FL_COMM, FL_CONST, FL_CPU, FL_EXECNAME, FL_EXPR,
    FL_GRAPH, FL_HEX, FL_HITCOUNT, FL_KEY, FL_LOG2, FL_PERCENT, FL_STRING, FL_SYM, FL_SYM_OFFSET,
    FL_TIMESTAMP, FL_TIMESTAMP_USECS, FL_VAR, FL_VAR_REF, MAX_FILTER_STR_VAL,
};
use crate::base::errno::Errno;
use crate::tracefs::events::common_fields;
use crate::tracefs::events::EventDef;
use crate::tracefs::events::Field;
use crate::tracefs::events::FieldKind;
use crate::tracefs::parse::kstrtoul_base0;
use std::sync::Arc;

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

pub(super) struct Parser<'a, 'e> {
    pub(super) def: &'a EventDef,
    pub(super) errs: &'a mut Errs<'e>,
    pub(super) timestamps: bool,
    pub(super) ts_in_usecs: bool,
    pub(super) env: &'a dyn HistEnv,
    /// `name=expr` definitions of this trigger, as written.
    pub(super) var_defs: Vec<(String, String)>,
    /// The variables defined so far.
    pub(super) vars: Vec<HField>,
    pub(super) refs: Vec<VarRef>,
    /// The `onmatch()` events, where unqualified variables are looked for.
    pub(super) onmatch: Vec<(String, String)>,
    pub(super) slots: usize,
    /// Parsing a removal (`!hist:`): no duplicate checks.
    pub(super) remove: bool,
}

/// A variable found for a reference: its histogram (`None`: the one being
/// defined) and its field.
pub(super) struct FoundVar {
    pub(super) hist: Option<Arc<Hist>>,
    pub(super) field: HField,
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
    pub(super) fn find_event_var(
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
    pub(super) fn var_ref(&mut self, v: &FoundVar, sys: Option<&str>, ev: Option<&str>) -> HField {
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
    pub(super) fn slot(&mut self) -> usize {
        self.slots += 1;
        self.slots - 1
    }

    /// `create_field_var()`: a variable holding `field` of this event, for
    /// an action.
    pub(super) fn field_var(&mut self, field: &str) -> Result<HField, Errno> {
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
    pub(super) fn field(
        &mut self,
        s: &str,
        flags: &mut u32,
        buckets: &mut u64,
    ) -> Result<HField, Errno> {
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
    pub(super) fn expr(&mut self, s: &str, flags: u32, n_sub: &mut u32) -> Result<HField, Errno> {
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
