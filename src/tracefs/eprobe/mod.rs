//! Event probes (`e:` lines in `dynamic_events`), as the kernel's
//! kernel/trace/trace_eprobe.c with the argument grammar of trace_probe.c.
//!
//! `e[:[GROUP/][NAME]] SYSTEM.EVENT [ARG ...] [if FILTER]` makes an event
//! (group `eprobes` unless named; name the attached event's unless named)
//! that fires whenever SYSTEM.EVENT fires in a trace array where the probe
//! is enabled, with the arguments fetched from the attached event's record:
//! `NAME=FETCHARG[:TYPE]`, where FETCHARG is `$FIELD`, `$comm`, `\IMM`,
//! `\"STRING"`, `@ADDR`, `@SYMBOL` or `+|-[u]OFFS(FETCHARG)`. A parse error
//! goes to the top-level `error_log` under `event_probe` with the kernel's
//! text and caret.
//!
//! monfs runs outside the kernel: there is no kernel or user memory to
//! dereference and no kernel symbol. Every memory fetch (`@ADDR`, `+OFFS(...)`)
//! faults, as a fetch from a bad address does in the kernel: a string shows
//! `(fault)` and a number 0; `@SYMBOL` is refused with ENOENT, as for a symbol
//! the kernel does not have; `symbol` and `symstr` show addresses in hex.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::{LockExt, RwLockExt};
use crate::tracefs::events::{Field, FieldKind, Render, COMMON_SIZE};
use crate::tracefs::facility::{AttachedProbe, EventId, Tracing};
use crate::tracefs::filter;
use crate::tracefs::instances::array::TraceArray;

mod grammar;
mod print;

pub use grammar::{parse, CmdError, ProbeErr, Spec, GROUP};
use grammar::{Arg, Fetch};
pub use print::ProbePrint;
use print::{Kind, StrKind};

/// The longest string an argument stores (`MAX_STRING_SIZE`, `PATH_MAX`).
const STRING_MAX: usize = 4096;

impl Spec {
    /// The event's fields, after the common header (`traceprobe_define_arg_fields`).
    fn fields(&self) -> Vec<Field> {
        self.args
            .iter()
            .map(|a| {
                let base = a.ty.fmttype();
                let (ctype, size) = if a.count > 0 {
                    (format!("{base}[{}]", a.count), a.ty.size * a.count)
                } else {
                    (base, a.ty.size)
                };
                let kind = if a.ty.is_string() && a.count == 0 {
                    FieldKind::DynString
                } else {
                    FieldKind::Int {
                        signed: a.ty.kind == Kind::Signed,
                    }
                };
                Field {
                    ctype,
                    name: a.name.clone(),
                    offset: COMMON_SIZE + a.offset,
                    size,
                    signed: a.ty.kind == Kind::Signed,
                    kind,
                }
            })
            .collect()
    }

    /// The print format (`__set_print_fmt` for an event probe).
    fn print_fmt(&self) -> String {
        let mut s = String::from("\"");
        for a in &self.args {
            let _ = write!(s, " {}=", a.name);
            if a.count > 0 {
                let all = vec![a.ty.fmt(); a.count];
                let _ = write!(s, "{{{}}}", all.join(","));
            } else {
                s.push_str(a.ty.fmt());
            }
        }
        s.push('"');
        for a in &self.args {
            let one = |j: Option<usize>| {
                let n = match j {
                    Some(j) => format!("{}[{j}]", a.name),
                    None => a.name.clone(),
                };
                if a.ty.is_string() {
                    format!(", __get_str({n})")
                } else {
                    format!(", REC->{n}")
                }
            };
            if a.count > 0 {
                (0..a.count).for_each(|j| s.push_str(&one(Some(j))));
            } else {
                s.push_str(&one(None));
            }
        }
        s
    }

    /// The event definition for id `id`.
    fn event_def(&self, id: u16) -> crate::tracefs::EventDef {
        let mut d = crate::tracefs::EventDef::with_fields(
            &self.group,
            &self.name,
            id,
            self.fields(),
            self.print_fmt(),
        );
        d.fixed_size = COMMON_SIZE + self.size;
        d.render = Render::Probe(Arc::new(ProbePrint::new(
            format!("{}.{}", self.target_system, self.target_event),
            self.args
                .iter()
                .map(|a| (a.name.clone(), a.ty, a.count, COMMON_SIZE + a.offset))
                .collect(),
        )));
        d
    }

    /// The probe's entry for one record of the attached event
    /// (`store_trace_args`): the common header with the task's pid, the
    /// values, then the strings.
    fn entry(&self, id: u16, rec: &[u8], comm: &str) -> Vec<u8> {
        let mut e = vec![0u8; COMMON_SIZE + self.size];
        e[0..2].copy_from_slice(&id.to_le_bytes());
        e[2..8].copy_from_slice(rec.get(2..8).unwrap_or(&[0; 6]));
        for a in &self.args {
            let at = COMMON_SIZE + a.offset;
            if a.ty.is_string() {
                for j in 0..a.count.max(1) {
                    let s = string_value(a, rec, comm);
                    let off = e.len();
                    let len = match s {
                        Some(s) => {
                            let s = &s[..s.len().min(STRING_MAX - 1)];
                            e.extend_from_slice(s);
                            e.push(0);
                            s.len() + 1
                        }
                        None => 0,
                    };
                    let loc = ((len as u32) << 16) | (off as u32 & 0xffff);
                    let p = at + 4 * j;
                    e[p..p + 4].copy_from_slice(&loc.to_le_bytes());
                }
                continue;
            }
            // Arrays are of memory, which always faults here: zeros.
            if a.count > 0 {
                continue;
            }
            let mut v = match &a.fetch {
                Fetch::Field(f) if !f.is_string() => f.int_value(rec) as u64,
                Fetch::Imm(v) => *v,
                _ => 0,
            };
            if let Some((l, r)) = a.bitfield {
                let bits = 8 * a.ty.size as u32;
                let mask = if bits == 64 {
                    u64::MAX
                } else {
                    (1 << bits) - 1
                };
                v = (((v << l) & mask) >> r) & mask;
            }
            e[at..at + a.ty.size].copy_from_slice(&v.to_le_bytes()[..a.ty.size]);
        }
        e
    }
}

/// The bytes a string argument stores for one record, or None for a
/// fault (`(fault)`).
fn string_value(a: &Arg, rec: &[u8], comm: &str) -> Option<Vec<u8>> {
    let Kind::Str(k) = a.ty.kind else {
        return None;
    };
    match (&a.fetch, k) {
        // A symbol string of an address: no symbol is known, the kernel
        // prints the address.
        (Fetch::Field(f), StrKind::Symbol) if !f.is_string() => {
            Some(format!("0x{:x}", f.int_value(rec) as u64).into_bytes())
        }
        (Fetch::Field(f), StrKind::Kernel) if f.is_string() => Some(f.str_value(rec).to_vec()),
        (Fetch::Comm, StrKind::Kernel) => Some(comm.as_bytes().to_vec()),
        (Fetch::Data(d), StrKind::Kernel) => Some(d.clone()),
        _ => None,
    }
}

/// An event probe: its definition, its event and the arrays it is
/// attached in.
struct Eprobe {
    spec: Spec,
    /// The probe's own event.
    id: EventId,
    /// The event it is attached to.
    target: EventId,
    /// The array slots where the probe is active (enabled or armed), and so
    /// holds its attached event in soft mode.
    slots: Mutex<Vec<usize>>,
}

impl AttachedProbe for Eprobe {
    fn event(&self) -> &EventId {
        &self.id
    }

    fn target(&self) -> &EventId {
        &self.target
    }

    /// `eprobe_dyn_event_show` (the filter is not shown).
    fn show(&self) -> String {
        let s = &self.spec;
        let mut l = format!(
            "e:{}/{} {}.{}",
            s.group, s.name, s.target_system, s.target_event
        );
        for a in &s.args {
            let _ = write!(l, " {}={}", a.name, a.comm);
        }
        l.push('\n');
        l
    }

    /// `eprobe_dyn_event_match`: `-:[GROUP/]NAME [SYSTEM.EVENT [ARGS]]`.
    fn matches(&self, system: Option<&str>, event: &str, argv: &[&str]) -> bool {
        let s = &self.spec;
        if system.is_some_and(|g| g != s.group) || (!event.is_empty() && event != s.name) {
            return false;
        }
        let Some((first, rest)) = argv.split_first() else {
            return true;
        };
        let Some(i) = first.find('/').or_else(|| first.find('.')) else {
            return false;
        };
        if first[..i] != s.target_system || first[i + 1..] != s.target_event {
            return false;
        }
        rest.len() <= s.args.len()
            && rest.iter().zip(&s.args).all(|(w, a)| {
                w.strip_prefix(a.name.as_str())
                    .and_then(|r| r.strip_prefix('='))
                    == Some(&a.comm)
            })
    }

    fn slots(&self) -> &Mutex<Vec<usize>> {
        &self.slots
    }

    /// `eprobe_trigger_func`: the filter on the attached event's record,
    /// then the probe's entry.
    fn entry(&self, rec: &[u8], comm: &str, cpu: u32) -> Option<Vec<u8>> {
        if let Some((_, f)) = &self.spec.filter {
            if !f.matches(&filter::Record {
                entry: rec,
                cpu,
                comm,
            }) {
                return None;
            }
        }
        Some(self.spec.entry(self.id.id(), rec, comm))
    }
}

/// Enabled (or armed) in some array.
fn busy(p: &dyn AttachedProbe) -> bool {
    !p.slots().lock_ok().is_empty() || p.event().is_enabled()
}

impl Tracing {
    /// One `dynamic_events` line, if it is an event probe's (`e...`).
    pub(crate) fn eprobe_command(self: &Arc<Self>, line: &str) -> Option<SysResult<()>> {
        let find = |sys: &str, ev: &str| {
            self.event_id(sys, ev)
                .filter(|e| !matches!(e.def().render, Render::Probe(_)))
        };
        let parsed = parse(line, &find)?;
        let argv: Vec<&str> = line
            .split(crate::tracefs::parse::is_space_char)
            .filter(|w| !w.is_empty())
            .collect();
        let cmd = argv.join(" ");
        let (spec, target) = match parsed {
            Ok(p) => p,
            Err(e) => {
                for (err, pos) in &e.log {
                    self.top
                        .error_log
                        .log(self.now_mono(), "event_probe", &cmd, err.text(), *pos);
                }
                if let Some((text, fe)) = &e.filter {
                    self.top.error_log.log_filter(self.now_mono(), text, fe);
                }
                return Some(Err(e.errno));
            }
        };
        Some(self.eprobe_add(&cmd, spec, target))
    }

    fn eprobe_add(self: &Arc<Self>, cmd: &str, spec: Spec, target: EventId) -> SysResult<()> {
        let mut list = self.eprobes.lock_ok();
        if self.event_id(&spec.group, &spec.name).is_some() {
            self.top.error_log.log(
                self.now_mono(),
                "event_probe",
                cmd,
                ProbeErr::EventExist.text(),
                0,
            );
            return Err(Errno::EEXIST);
        }
        let def = spec.event_def(0);
        let id = self.add_dynamic(
            move |n| crate::tracefs::EventDef { id: n, ..def },
            Arc::new(|| {}),
        )?;
        let p: Arc<dyn AttachedProbe> = Arc::new(Eprobe {
            spec,
            id,
            target: target.clone(),
            slots: Mutex::new(Vec::new()),
        });
        target.0.probes.write_ok().push(p.clone());
        list.push(p);
        Ok(())
    }

    /// `-:[GROUP/]NAME ...`: remove the event probes it matches. `None`
    /// when it matches none.
    pub(crate) fn eprobe_release(
        &self,
        system: Option<&str>,
        event: &str,
        argv: &[&str],
    ) -> Option<SysResult<()>> {
        let mut list = self.eprobes.lock_ok();
        let hits: Vec<usize> = (0..list.len())
            .filter(|&i| list[i].matches(system, event, argv))
            .collect();
        if hits.is_empty() {
            return None;
        }
        for &i in hits.iter().rev() {
            if busy(&*list[i]) {
                return Some(Err(Errno::EBUSY));
            }
            let p = list.remove(i);
            self.eprobe_drop(&p);
        }
        Some(Ok(()))
    }

    fn eprobe_drop(&self, p: &Arc<dyn AttachedProbe>) {
        p.target()
            .0
            .probes
            .write_ok()
            .retain(|q| !Arc::ptr_eq(q, p));
        self.remove_dynamic(p.event());
    }

    /// Whether any event probe is in use (`dynamic_events` truncation
    /// fails then).
    pub(crate) fn eprobe_any_busy(&self) -> bool {
        self.eprobes.lock_ok().iter().any(|p| busy(&**p))
    }

    /// Remove every event probe (none in use: see [`Self::eprobe_any_busy`]).
    pub(crate) fn eprobe_clear(&self) {
        let all = std::mem::take(&mut *self.eprobes.lock_ok());
        for p in &all {
            self.eprobe_drop(p);
        }
    }

    /// Whether an event has probes attached (it cannot go while it has).
    pub(crate) fn eprobe_attached(&self, id: &EventId) -> bool {
        !id.0.probes.read_ok().is_empty()
    }

    /// The event probes' lines of `dynamic_events`.
    pub(crate) fn eprobe_text(&self) -> String {
        self.eprobes.lock_ok().iter().map(|p| p.show()).collect()
    }

    /// After `id`'s state in the array of `slot` changed: when `id` is an
    /// event probe, attach it there while it is enabled or armed (its
    /// attached event then fires there in soft mode, as the kernel's
    /// `enable_eprobe` arms it), and detach it when it is neither.
    pub(super) fn eprobe_sync(&self, id: &EventId, slot: usize) {
        if !matches!(id.def().render, Render::Probe(_)) {
            return;
        }
        let Some(p) = self
            .eprobes
            .lock_ok()
            .iter()
            .find(|p| Arc::ptr_eq(&p.event().0, &id.0))
            .cloned()
        else {
            return;
        };
        let file = id.0.file(slot);
        let active = file.enabled.load(Ordering::SeqCst) || file.armed.load(Ordering::SeqCst);
        let mut slots = p.slots().lock_ok();
        let was = slots.contains(&slot);
        if active == was {
            return;
        }
        let tfile = p.target().0.file(slot);
        if active {
            slots.push(slot);
            tfile.soft.fetch_add(1, Ordering::SeqCst);
        } else {
            slots.retain(|&s| s != slot);
            let _ = tfile
                .soft
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        drop(slots);
        self.rearm(p.target(), slot);
    }

    /// The entries of the probes attached to `id` in `arr` for one of its
    /// records (`eprobe_trigger_func`), each with its probe's event.
    pub(super) fn eprobe_entries(
        &self,
        arr: &TraceArray,
        id: &EventId,
        rec: &[u8],
        comm: &str,
        cpu: u32,
    ) -> Vec<(EventId, Vec<u8>)> {
        let probes = id.0.probes.read_ok();
        probes
            .iter()
            .filter(|p| p.slots().lock_ok().contains(&arr.slot))
            .filter_map(|p| Some((p.event().clone(), p.entry(rec, comm, cpu)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
