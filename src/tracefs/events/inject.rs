//! An event's `inject` file (`kernel/trace/trace_events_inject.c`):
//! `field=value ...` text (strings in double quotes) recorded as an entry
//! of the event, whether or not it is enabled, as the kernel's inject does.
//! The control interface injects through [`Tracing::inject`].

use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl};
use crate::tracefs::events::{EventDef, FieldKind, FieldValue};
use crate::tracefs::facility::{Arr, EventId, Tracing};
use crate::tracefs::instances::array::At;
use crate::tracefs::parse::is_space;

/// Parse `inject` text: `field=value` pairs, strings in double quotes.
/// Record event `e` from `field=value ...` text, as the `inject` file and
/// the control interface do (regardless of whether the event is enabled, as
/// the kernel's inject does).
pub(crate) fn inject_text(x: &Arr, e: &EventId, data: &[u8], pid: u32) -> SysResult<()> {
    let def = &e.0.def;
    let vals = parse_inject(def, data)?;
    let mut strs: Vec<Option<String>> = vec![None; def.fields.len()];
    let mut nums = vec![0i64; def.fields.len()];
    for (i, v) in vals {
        match v {
            InjectVal::Num(n) => nums[i] = n,
            InjectVal::Str(s) => strs[i] = Some(s),
        }
    }
    let values: Vec<FieldValue<'_>> = def
        .fields
        .iter()
        .enumerate()
        .map(|(i, f)| match f.kind {
            FieldKind::Int { .. } => FieldValue::Int(nums[i]),
            _ => FieldValue::Str(strs[i].as_deref().unwrap_or("")),
        })
        .collect();
    let data_bytes = def.encode(pid, &values);
    let comm = crate::base::procmem::comm_of(pid);
    let mono = x.t.now_mono();
    x.t.record_in(
        &x.a,
        e,
        &x.file(e),
        data_bytes,
        &comm,
        // On the writer's CPU, as the kernel records in the writer's context.
        At {
            mono,
            cpu: crate::base::procmem::cpu_of(pid),
        },
    );
    Ok(())
}

fn parse_inject(def: &EventDef, data: &[u8]) -> SysResult<Vec<(usize, InjectVal)>> {
    let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
    let s = s.trim_end_matches('\0');
    let b = s.as_bytes();
    // A piece of the text by byte positions; 0xA0 is a space (as to the
    // kernel's isspace) and can be the second byte of a character, so a
    // piece that splits one is EINVAL.
    let piece = |from: usize, to: usize| s.get(from..to).ok_or(Errno::EINVAL);
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < b.len() && is_space(b[i]) {
            i += 1;
        }
        if i >= b.len() {
            break;
        }
        let st = i;
        while i < b.len() && b[i] != b'=' && !is_space(b[i]) {
            i += 1;
        }
        let name = piece(st, i)?;
        if b.get(i) != Some(&b'=') {
            return Err(Errno::EINVAL);
        }
        i += 1;
        let idx = def
            .fields
            .iter()
            .position(|f| f.name == name)
            .ok_or(Errno::EINVAL)?;
        let f = &def.fields[idx];
        if b.get(i) == Some(&b'"') {
            let close = s[i + 1..].find('"').ok_or(Errno::EINVAL)? + i + 1;
            if !f.is_string() {
                return Err(Errno::EINVAL);
            }
            out.push((idx, InjectVal::Str(piece(i + 1, close)?.to_string())));
            i = close + 1;
        } else {
            let vs = i;
            while i < b.len() && !is_space(b[i]) {
                i += 1;
            }
            if f.is_string() {
                return Err(Errno::EINVAL);
            }
            let tok = piece(vs, i)?;
            let v = parse_num(tok).ok_or(Errno::EINVAL)?;
            out.push((idx, InjectVal::Num(v)));
        }
    }
    if out.is_empty() {
        return Err(Errno::EINVAL);
    }
    Ok(out)
}

fn parse_num(tok: &str) -> Option<i64> {
    let (neg, body) = match tok.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, tok),
    };
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        u64::from_str_radix(h, 16).ok()?
    } else if body.len() > 1 && body.starts_with('0') {
        u64::from_str_radix(&body[1..], 8).ok()?
    } else {
        body.parse::<u64>().ok()?
    };
    Some(if neg {
        (v as i64).wrapping_neg()
    } else {
        v as i64
    })
}

enum InjectVal {
    Num(i64),
    Str(String),
}

/// `<dir>/inject` of event `e` in `x`.
pub(crate) fn event_file(x: &Arr, tree: &Tree, e: &EventId, dir: &str) {
    let (ew, xw) = (e.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/inject"),
        Ctl::new(0o200).w(move |data, caller| {
            inject_text(&xw, &ew, data, caller.pid)?;
            Ok(data.len() as u32)
        }),
    );
}

impl Tracing {
    /// Record `system:name` from `field=value ...` text (strings in double
    /// quotes), as its `inject` file does. EINVAL for unknown events or fields.
    pub fn inject(self: &Arc<Self>, id: &EventId, text: &[u8], pid: u32) -> SysResult<()> {
        inject_text(&Arr::new(self, self.top().clone()), id, text, pid)
    }
}
