//! The histogram's map, as `kernel/trace/tracing_map.c` keeps it: entries
//! by compound key with their sums and variables, a bounded size (hits
//! beyond it counted as drops), and the named histograms that several
//! events share; [`Hist::record`] is `event_hist_trigger()` of
//! `kernel/trace/trace_events_hist.c`, which feeds it.

use super::{ActKind, Elt, Handler, Hist, HistAction, HistDef, Hit, KeyPart, MapState, Val};
use crate::base::budget::MEMORY;
use crate::base::sync::LockExt;
use crate::tracefs::synth::SynthVal;
use std::sync::Arc;
use std::sync::Mutex;

impl Hist {
    /// An empty histogram for `def`, its map's full size (see
    /// [`HistDef::map_bytes`]) charged to the memory budget now, as the
    /// kernel's `tracing_map_init` allocates every element when the
    /// trigger is made: ENOMEM when it does not fit. The charge goes back
    /// when the histogram does.
    pub(crate) fn new(def: HistDef) -> crate::base::errno::SysResult<Arc<Hist>> {
        let mem = MEMORY.take(def.map_bytes())?;
        tracing::debug!(
            entries = 1usize << def.map_bits,
            bytes = mem.size(),
            "tracefs: hist map charged to the memory budget"
        );
        Ok(Arc::new(Hist {
            def,
            map: Mutex::new(MapState::default()),
            referenced_by: Default::default(),
            _mem: Some(mem),
        }))
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
}

impl Hist {
    /// Forget every entry and the counts (`:clear`).
    pub(crate) fn clear(&self) {
        *self.map.lock_ok() = MapState::default();
    }
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

/// Bytes of the allocator's chunk for a block of `n` bytes (glibc's malloc
/// on 64 bits: 8 bytes of header, 16-byte granules, 32 at least); none for
/// an empty block.
fn heap_chunk(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        ((n + 8).div_ceil(16) * 16).max(32)
    }
}

impl HistDef {
    /// Bytes one entry of the map can take, at most: the [`Elt`] (twice,
    /// for the list's growth), its key's parts and strings (twice: the
    /// index keeps a copy), sums, task name and variables, and the index's
    /// slot (with hashbrown's spare buckets and control byte).
    pub(crate) fn entry_bytes(&self) -> usize {
        let part = std::mem::size_of::<KeyPart>();
        let strings: usize = self
            .keys
            .iter()
            .filter(|k| k.is_string())
            .map(|k| heap_chunk(k.size.saturating_sub(1)))
            .sum();
        let key = heap_chunk(self.keys.len() * part) + strings;
        let sums = heap_chunk(self.vals.len() * 8);
        let comm = heap_chunk(15);
        let var_strings: usize = self
            .vars
            .iter()
            .chain(&self.field_vars)
            .chain(&self.save_vars)
            .filter(|v| v.is_string())
            .map(|v| heap_chunk(v.size.max(super::MAX_FILTER_STR_VAL)))
            .sum();
        let vars = heap_chunk(self.n_slots * std::mem::size_of::<Option<Val>>()) + var_strings;
        let slot = std::mem::size_of::<(Vec<KeyPart>, usize)>() + 1;
        2 * std::mem::size_of::<Elt>() + 2 * key + sums + comm + vars + 3 * slot
    }

    /// Bytes the map counts against the memory budget: `size=` (rounded
    /// to its power of two) entries of [`HistDef::entry_bytes`].
    pub(crate) fn map_bytes(&self) -> usize {
        (1usize << self.map_bits).saturating_mul(self.entry_bytes())
    }
}
