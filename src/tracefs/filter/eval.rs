//! Evaluating a filter against a record, as the predicate functions of
//! `kernel/trace/trace_events_filter.c` do (`filter_match_preds()`,
//! `filter_pred_*()`), with the kernel's glob matching (`glob_match()` of
//! `lib/glob.c`).

use super::{Filter, Node, Op, Pred, Record, Target, Value};

/// Shell-style glob: `*`, `?` and `[...]` classes (`!`/`^` negate).
pub fn glob(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let (mut star_p, mut star_i) = (usize::MAX, 0usize);
    while i < s.len() {
        if p < pat.len() {
            match pat[p] {
                b'*' => {
                    star_p = p;
                    star_i = i;
                    p += 1;
                    continue;
                }
                b'?' => {
                    p += 1;
                    i += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pat, p, s[i]) {
                        if matched {
                            p = next;
                            i += 1;
                            continue;
                        }
                    } else if s[i] == b'[' {
                        p += 1;
                        i += 1;
                        continue;
                    }
                }
                b'\\' if p + 1 < pat.len() && pat[p + 1] == s[i] => {
                    p += 2;
                    i += 1;
                    continue;
                }
                c if c == s[i] => {
                    p += 1;
                    i += 1;
                    continue;
                }
                _ => {}
            }
        }
        if star_p == usize::MAX {
            return false;
        }
        p = star_p + 1;
        star_i += 1;
        i = star_i;
    }
    while p < pat.len() && pat[p] == b'*' {
        p += 1;
    }
    p == pat.len()
}

/// Match one `[...]` class at `pat[p]`; None when the class is unterminated.
fn class(pat: &[u8], p: usize, c: u8) -> Option<(bool, usize)> {
    let mut j = p + 1;
    let neg = matches!(pat.get(j), Some(b'!') | Some(b'^'));
    if neg {
        j += 1;
    }
    let mut matched = false;
    let mut first = true;
    while j < pat.len() && (first || pat[j] != b']') {
        first = false;
        let lo = pat[j];
        if j + 2 < pat.len() && pat[j + 1] == b'-' && pat[j + 2] != b']' {
            if lo <= c && c <= pat[j + 2] {
                matched = true;
            }
            j += 3;
        } else {
            if lo == c {
                matched = true;
            }
            j += 1;
        }
    }
    if j >= pat.len() {
        return None;
    }
    Some((matched != neg, j + 1))
}

impl Pred {
    fn eval(&self, r: &Record<'_>) -> bool {
        match &self.value {
            Value::Str(want) => {
                let have: &[u8] = match &self.target {
                    Target::Field(f) => f.str_value(r.entry),
                    Target::Comm => r.comm.as_bytes(),
                    Target::Cpu | Target::Stacktrace => return false,
                };
                match self.op {
                    Op::Eq => have == &want[..],
                    Op::Ne => have != &want[..],
                    Op::Glob => glob(want, have),
                    _ => false,
                }
            }
            Value::Cpus(mask) => {
                let have = match &self.target {
                    Target::Field(f) => f.int_value(r.entry),
                    Target::Cpu => r.cpu as i128,
                    Target::Comm | Target::Stacktrace => return false,
                };
                let inside = usize::try_from(have)
                    .ok()
                    .and_then(|c| mask.get(c).copied())
                    .unwrap_or(false);
                match self.op {
                    Op::And => inside,
                    Op::Ne => true,
                    _ => false,
                }
            }
            Value::Num(v) => {
                let (have, size, signed) = match &self.target {
                    Target::Field(f) => (f.int_value(r.entry), f.size, f.signed),
                    Target::Cpu => (r.cpu as i128, 4, true),
                    Target::Comm => return false,
                    Target::Stacktrace => return self.op == Op::Ne,
                };
                // The value is cast to the field's type, as the kernel's
                // typed predicates do.
                let bits = size as u32 * 8;
                let mask = if bits >= 64 {
                    u64::MAX as u128
                } else {
                    (1u128 << bits) - 1
                };
                let u = (*v as u128) & mask;
                let want = if signed && bits < 128 && (u >> (bits - 1)) & 1 == 1 {
                    u as i128 - (1i128 << bits)
                } else {
                    u as i128
                };
                match self.op {
                    Op::Eq => have == want,
                    Op::Ne => have != want,
                    Op::Lt => have < want,
                    Op::Le => have <= want,
                    Op::Gt => have > want,
                    Op::Ge => have >= want,
                    Op::And => (have as u128 & u) != 0,
                    Op::Glob => false,
                }
            }
        }
    }
}

fn eval_ors(ors: &[Vec<Node>], r: &Record<'_>) -> bool {
    ors.iter().any(|and| {
        and.iter().all(|n| match n {
            Node::Pred(p, inv) => p.eval(r) != *inv,
            Node::Group(g, inv) => eval_ors(g, r) != *inv,
        })
    })
}

impl Filter {
    /// Whether a record passes.
    pub fn matches(&self, r: &Record<'_>) -> bool {
        eval_ors(&self.root, r)
    }
}
