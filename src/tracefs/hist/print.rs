//! The text of hist triggers: a trigger read back from the `trigger` file
//! (`event_hist_trigger_print()`, `hist_field_print()`) and the `hist`
//! file's entries, sorted, with their totals (`hist_show()`,
//! `hist_trigger_entry_print()`), as `kernel/trace/trace_events_hist.c`
//! prints them.

use std::fmt::Write as _;

use crate::base::sync::LockExt;

use super::{
    ActKind, Action, CmpKind, Elt, HField, Handler, Hist, HistDef, KeyPart, SortKey, Val, FL_ALIAS,
    FL_BUCKET, FL_COMM, FL_CONST, FL_CPU, FL_EXECNAME, FL_EXPR, FL_GRAPH, FL_HEX, FL_LOG2,
    FL_PERCENT, FL_SYM, FL_SYM_OFFSET, FL_VAR_REF,
};

impl HField {
    /// How the trigger file shows a field (`hist_field_print()`): a CPU
    /// field as `common_cpu` whatever its name (6.12 reads `keys=common_cpu`
    /// back as `common_cpu`, measured; older kernels printed the name after
    /// it, `common_cpucommon_cpu`).
    pub(super) fn print(&self, out: &mut String) {
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

    /// The text of a field inside an expression (`expr_field_str()`):
    /// a bucketed operand with its size, as 6.12.118 (measured in qemu) and
    /// later print it.
    pub(super) fn expr_part(&self, out: &mut String) {
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
        if self.buckets != 0 {
            let _ = write!(out, "={}", self.buckets);
        }
    }
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

impl HistDef {
    pub(super) fn actions_spec(&self) -> String {
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
}

impl HistDef {
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

impl Hist {
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
}

impl Hist {
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
pub(super) fn bar(val: u64, max: u64) -> String {
    const WIDTH: u32 = 20;
    let len = percentage(val, max);
    if len == u32::MAX {
        return "[ERROR]".into();
    }
    let n = (len.wrapping_mul(WIDTH) / 10000).min(WIDTH) as usize;
    format!("{:<20}", "#".repeat(n))
}
