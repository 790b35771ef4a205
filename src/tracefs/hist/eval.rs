//! What a hist field is worth for one hit: the numbers, strings and key
//! bytes the kernel's `hist_field_*()` functions compute in
//! `kernel/trace/trace_events_hist.c` (signed fields sign-extended,
//! `.log2` and `.buckets` applied, expressions evaluated).

use super::{
    log2_roundup, CmpKind, DivFn, HField, Hit, Op, Src, Val, DIV_SHIFT, FL_ALIAS, FL_BUCKET,
    FL_COMM, FL_CONST, FL_CPU, FL_EXECNAME, FL_GRAPH, FL_HEX, FL_HITCOUNT, FL_LOG2, FL_PERCENT,
    FL_STRING, FL_SYM, FL_SYM_OFFSET, FL_TIMESTAMP, FL_TIMESTAMP_USECS, FL_VAR_REF,
    MAX_FILTER_STR_VAL,
};
use crate::tracefs::events::FieldKind;

impl HField {
    pub(super) fn bare(flags: u32) -> HField {
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
    pub(super) fn flag_name(&self) -> Option<&'static str> {
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
}

impl HField {
    /// For [`HistDef::same_shape`]: what the kernel's `compatible_field()`
    /// compares of the underlying event field.
    pub(super) fn field_ident(&self) -> Option<(String, String, usize, bool)> {
        match &self.src {
            Src::None => None,
            Src::Event(f) => Some((f.name.clone(), f.ctype.clone(), f.size, f.signed)),
            Src::GenericCpu(n) => Some((n.clone(), "int".into(), 0, true)),
            Src::GenericComm(n) => Some((n.clone(), "char *".into(), 0, false)),
        }
    }

    pub(super) fn is_string(&self) -> bool {
        self.flags & FL_STRING != 0
    }

    /// The field's numeric value for a hit, as the kernel's field functions
    /// compute it (signed fields sign-extend to 64 bits).
    pub(super) fn num(&self, hit: &Hit<'_>, ts_usecs: bool, refs: &[Val]) -> u64 {
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
    pub(super) fn value(&self, hit: &Hit<'_>, ts_usecs: bool, refs: &[Val]) -> Val {
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
    pub(super) fn key_bytes(&self, hit: &Hit<'_>) -> Vec<u8> {
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
    pub(super) fn cmp_kind(&self) -> CmpKind {
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
