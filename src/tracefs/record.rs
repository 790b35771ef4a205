//! The recording path: how an entry of an event gets into the trace
//! arrays, as the kernel's `trace_event_buffer_commit()` and
//! `event_triggers_call()` (`kernel/trace/trace_events.c`,
//! `trace_events_trigger.c`) order it.
//!
//! [`Tracing::emit`] (and `emit_at`, `emit_raw`) encode the entry and hand
//! it to [`Tracing::record_on`], which gives it to every array where the
//! event is enabled or armed; [`Tracing::record_in`] records it in one
//! array: through the event's triggers there ([`Tracing::fire`]: actions
//! before, the entry, actions after) or straight to
//! [`Tracing::commit`], which stores it if the array takes it
//! ([`admits`]: `tracing_on`, pid lists, CPU mask, filter) and adds a
//! stack entry when the `stacktrace` option asks for one. `trace_marker` writes come in through
//! [`Tracing::record_marker`].

use std::sync::atomic::Ordering;

use crate::base::clock::Timestamp;
use crate::base::sync::{LockExt, RwLockExt};
use crate::tracefs::events::{EventDef, FieldValue};
use crate::tracefs::facility::{EventId, Host, Tracing};
use crate::tracefs::filter;
use crate::tracefs::instances::array::{At, EventFile, FilterState, TraceArray};
use crate::tracefs::ring::snapshot::Taken;
use crate::tracefs::trigger::{Hit, TriggerAction, Triggers};

impl Tracing {
    /// Record an event now if it is enabled. `values` follow the event's
    /// fields; missing trailing values are zero (or "").
    pub fn emit(&self, id: &EventId, pid: u32, comm: &str, values: &[FieldValue<'_>]) {
        if id.is_enabled() {
            let data = id.0.def.encode(pid, values);
            self.record_on(id, data, comm, None, None);
        }
    }

    /// [`Tracing::emit`] with the producer's own timestamp.
    pub fn emit_at(
        &self,
        id: &EventId,
        ts: Timestamp,
        pid: u32,
        comm: &str,
        values: &[FieldValue<'_>],
    ) {
        if id.is_enabled() {
            let data = id.0.def.encode(pid, values);
            self.record_on(id, data, comm, Some(ts), None);
        }
    }

    /// Record an event from its raw field bytes: `payload` is the entry after
    /// the 8-byte common header, laid out as `format` says (dynamic data
    /// included, `__data_loc` offsets counted from the entry start).
    pub fn emit_raw(&self, id: &EventId, pid: u32, comm: &str, payload: &[u8]) {
        if id.is_enabled() {
            self.record_on(id, raw_entry(&id.0.def, pid, payload), comm, None, None);
        }
    }

    /// Record an entry of `id` into every array where the event is enabled
    /// or armed, stamped `ts` (None: now) on CPU `cpu` (None: the CPU this
    /// thread runs on).
    pub(super) fn record_on(
        &self,
        id: &EventId,
        data: Vec<u8>,
        comm: &str,
        ts: Option<Timestamp>,
        cpu: Option<u32>,
    ) {
        let ev = &*id.0;
        let files = ev.files.read_ok();
        let active =
            |f: &EventFile| f.enabled.load(Ordering::Relaxed) || f.armed.load(Ordering::Relaxed);
        // The last array that takes it gets the entry itself, the others a
        // copy: no allocation beyond the entries on the hot path.
        let Some(last) = files.iter().rposition(|f| active(f)) else {
            return;
        };
        let mono = ts.unwrap_or_else(|| self.clock.now()).mono_ns;
        let arrays = self.arrays.read_ok();
        let mut data = Some(data);
        for (slot, file) in files.iter().enumerate().take(last + 1) {
            if !active(file) {
                continue;
            }
            let Some(Some(arr)) = arrays.get(slot) else {
                continue;
            };
            let d = if slot == last {
                data.take().unwrap_or_default()
            } else {
                data.clone().unwrap_or_default()
            };
            self.record_in(arr, id, file, d, comm, At { mono, cpu });
        }
    }

    /// Record an entry of `id` in `arr` (whose state for it is `file`):
    /// through its triggers there when it has any, else if it is enabled.
    /// Returns whether it was stored.
    pub(super) fn record_in(
        &self,
        arr: &TraceArray,
        id: &EventId,
        file: &EventFile,
        data: Vec<u8>,
        comm: &str,
        at: At,
    ) -> bool {
        let pid = u32::from_le_bytes(data[4..8].try_into().unwrap());
        // Event probes take their values from the record before it is
        // committed, and are recorded after it.
        let probed = if file.armed.load(Ordering::Relaxed) && !id.0.probes.read_ok().is_empty() {
            let cpu = arr.cpu_or_now(at.cpu);
            self.eprobe_entries(arr, id, &data, comm, cpu)
        } else {
            Vec::new()
        };
        // Armed: the event has triggers here (they decide) or is in soft
        // mode (recorded only if also enabled). Not armed: record_on found
        // it enabled, or inject records it whatever its state.
        let trig = file
            .armed
            .load(Ordering::Relaxed)
            .then(|| id.0.trig(arr.slot));
        let stored = match trig {
            Some(trig) if !trig.is_empty() => self.fire(arr, id, file, &trig, data, comm, at),
            Some(_) => {
                file.enabled.load(Ordering::Relaxed) && self.commit(arr, id, file, data, comm, at)
            }
            None => self.commit(arr, id, file, data, comm, at),
        };
        if stored {
            self.save_cmdline(pid, comm);
        }
        for (pid_event, entry) in probed {
            let pfile = pid_event.0.file(arr.slot);
            self.record_in(arr, &pid_event, &pfile, entry, comm, at);
        }
        stored
    }

    /// Fire `ev`'s triggers in `arr` for one hit and record it there as the
    /// kernel orders it: actions before the event, the event (if enabled,
    /// and for conditional triggers only if tracing was on before them),
    /// then the post actions (`traceoff`, `stacktrace`). Conditional
    /// triggers run after the kernel reserved the event in the live
    /// buffer: a `snapshot` among them carries the event into the snapshot
    /// buffer, so here it is taken after the event is recorded.
    #[allow(clippy::too_many_arguments)]
    fn fire(
        &self,
        arr: &TraceArray,
        id: &EventId,
        file: &EventFile,
        trig: &Triggers<EventId>,
        data: Vec<u8>,
        comm: &str,
        at: At,
    ) -> bool {
        let host = Host { t: self, a: arr };
        let was_on = arr.tracing_on();
        let cpu = arr.cpu_or_now(at.cpu);
        let hit = Hit {
            entry: &data,
            cpu,
            comm,
            ts_ns: at.mono,
        };
        let actions = trig.fire(&hit, &host);
        let ctx = Ctx::of(&data, comm);
        let cond = trig.is_conditional();
        let (post, pre): (Vec<_>, Vec<_>) = actions.into_iter().partition(|a| a.is_post());
        let (late, pre): (Vec<_>, Vec<_>) = pre
            .into_iter()
            .partition(|a| cond && matches!(a, TriggerAction::Snapshot));
        let at = At {
            cpu: Some(cpu),
            ..at
        };
        for a in pre {
            self.act(arr, a, &ctx, at);
        }
        let record = file.enabled.load(Ordering::Relaxed) && (!trig.is_conditional() || was_on);
        let stored = record && self.commit(arr, id, file, data, comm, at);
        for a in late.into_iter().chain(post) {
            self.act(arr, a, &ctx, at);
        }
        stored
    }

    /// Store an event entry in `arr` if the array takes it ([`admits`]:
    /// `tracing_on`, pid lists, CPU mask, filter), followed by a stack entry
    /// when the array's `stacktrace` option is set (as the kernel's event
    /// commit does). Returns whether it was stored.
    fn commit(
        &self,
        arr: &TraceArray,
        id: &EventId,
        file: &EventFile,
        data: Vec<u8>,
        comm: &str,
        at: At,
    ) -> bool {
        let cpu = arr.cpu_or_now(at.cpu);
        if !admits(arr, file, &data, comm, cpu) {
            return false;
        }
        let ctx = Ctx::of(&data, comm);
        let stored = arr.store(id.0.def.clone(), data, comm, cpu, at.mono);
        if stored && arr.stacktrace.load(Ordering::Relaxed) {
            self.record_stack(arr, &ctx, at);
        }
        stored
    }

    /// Carry out a trigger's action in `arr`, for the task of `ctx`.
    fn act(&self, arr: &TraceArray, a: TriggerAction<EventId>, ctx: &Ctx<'_>, at: At) {
        match a {
            TriggerAction::TraceOn => {
                arr.on.store(true, Ordering::Relaxed);
                arr.wake();
            }
            TriggerAction::TraceOff => arr.on.store(false, Ordering::Relaxed),
            TriggerAction::EnableEvent(e) => self.set_enabled_in(arr, &e, true),
            TriggerAction::DisableEvent(e) => self.set_enabled_in(arr, &e, false),
            TriggerAction::EnableHist(e) => e.0.trig(arr.slot).set_hist_paused(false),
            TriggerAction::DisableHist(e) => e.0.trig(arr.slot).set_hist_paused(true),
            TriggerAction::Snapshot => {
                // Without a snapshot buffer (freed under the trigger with
                // `echo 0 > snapshot`) the kernel stops tracing instead.
                if arr.take_snapshot() == Taken::NotAllocated {
                    arr.on.store(false, Ordering::Relaxed);
                }
            }
            TriggerAction::StackTrace => self.record_stack(arr, ctx, at),
            TriggerAction::Synth { name, vals } => {
                let ev = self
                    .synth
                    .lock_ok()
                    .iter()
                    .find(|e| e.def.name == name)
                    .map(|e| (e.def.clone(), e.id.clone()));
                if let Some((def, id)) = ev {
                    if id.is_enabled() {
                        let data = def.encode(id.id(), ctx.pid, &vals);
                        let ts = Timestamp {
                            mono_ns: at.mono,
                            wall_ns: 0,
                        };
                        self.record_on(&id, data, ctx.comm, Some(ts), at.cpu);
                    }
                }
            }
        }
    }

    /// Record a kernel stack entry (`ftrace:kernel_stack`, shown as
    /// `<stack trace>`) for the task of `ctx` in `arr`, as the
    /// `stacktrace` trigger and option do. monfs runs outside the kernel
    /// and has no kernel stack to walk: the entry holds no frames (`size`
    /// 0), so `trace` shows the `<stack trace>` line and no ` => ` lines,
    /// and trace-cmd decodes an empty stack.
    fn record_stack(&self, arr: &TraceArray, ctx: &Ctx<'_>, at: At) {
        let mut e = Vec::with_capacity(16);
        e.extend_from_slice(&self.ftrace.stack.id.to_le_bytes());
        e.extend_from_slice(&ctx.flags);
        e.extend_from_slice(&ctx.pid.to_le_bytes());
        e.extend_from_slice(&0i32.to_le_bytes());
        e.extend_from_slice(&[0; 4]);
        let cpu = arr.cpu_or_now(at.cpu);
        arr.store(self.ftrace.stack.clone(), e, ctx.comm, cpu, at.mono);
    }

    /// Store a `trace_marker` entry (`ftrace:print`, `entry`) in `arr`
    /// through the marker's triggers there, as the kernel's
    /// `tracing_mark_write`, on CPU `cpu` (the writer's): the triggers see
    /// `hit_entry` (the text ended by a NUL, without the newline the entry
    /// gets) after the entry was reserved in the live buffer, which it is
    /// committed to whatever they do (after a `snapshot` trigger swapped the
    /// buffers, the entry ends in the snapshot); the post triggers run after
    /// the commit. Returns
    /// whether it was stored.
    pub(super) fn record_marker(
        &self,
        arr: &TraceArray,
        hit_entry: &[u8],
        entry: Vec<u8>,
        comm: &str,
        cpu: u32,
        mono: u64,
    ) -> bool {
        let def = self.ftrace.print.clone();
        let trig = self.marker.0.trig(arr.slot);
        if trig.is_empty() {
            return arr.store(def, entry, comm, cpu, mono);
        }
        let host = Host { t: self, a: arr };
        let hit = Hit {
            entry: hit_entry,
            cpu,
            comm,
            ts_ns: mono,
        };
        let actions = trig.fire(&hit, &host);
        let ctx = Ctx::of(&entry, comm);
        let stored = arr.store(def, entry, comm, cpu, mono);
        let (post, pre): (Vec<_>, Vec<_>) = actions.into_iter().partition(|a| a.is_post());
        let at = At {
            mono,
            cpu: Some(cpu),
        };
        for a in pre.into_iter().chain(post) {
            self.act(arr, a, &ctx, at);
        }
        stored
    }

    /// Save `pid`'s comm (and tgid) as `saved_cmdlines` (`saved_tgids`)
    /// show them, when the top level's `record-cmd` (`record-tgid`) is on.
    pub(super) fn save_cmdline(&self, pid: u32, comm: &str) {
        if self.top.record_cmd.load(Ordering::Relaxed) {
            self.cmdlines.lock_ok().save(pid, comm);
        }
        if self.top.record_tgid.load(Ordering::Relaxed) {
            self.cmdlines.lock_ok().save_tgid(pid);
        }
    }
}

/// Whether `arr` takes an entry (whose event's state there is `file`) on
/// CPU `cpu`, as the kernel's event recording decides: `tracing_on`, the
/// pid lists (`trace_event_ignore_this_pid()`), the CPU mask, then the
/// event's filter.
fn admits(arr: &TraceArray, file: &EventFile, data: &[u8], comm: &str, cpu: u32) -> bool {
    if !arr.on.load(Ordering::Relaxed) {
        return false;
    }
    let pid = u32::from_le_bytes(data[4..8].try_into().unwrap());
    if arr.has_event_pids.load(Ordering::Relaxed) && !arr.event_pids.read_ok().contains(&pid) {
        return false;
    }
    if arr.has_notrace_pids.load(Ordering::Relaxed) && arr.notrace_pids.read_ok().contains(&pid) {
        return false;
    }
    if !arr.all_cpus.load(Ordering::Relaxed) && !arr.cpumask.read_ok()[cpu as usize] {
        return false;
    }
    if file.filtered.load(Ordering::Relaxed) {
        if let FilterState::Active(_, f) = &*file.filter.read_ok() {
            let r = filter::Record {
                entry: data,
                cpu,
                comm,
            };
            if !f.matches(&r) {
                return false;
            }
        }
    }
    true
}

/// Who an entry was recorded for: what a stack entry recorded after it
/// copies (the task and the common flags and preemption count).
struct Ctx<'a> {
    pid: u32,
    flags: [u8; 2],
    comm: &'a str,
}

impl<'a> Ctx<'a> {
    fn of(entry: &[u8], comm: &'a str) -> Ctx<'a> {
        Ctx {
            pid: u32::from_le_bytes(entry[4..8].try_into().unwrap()),
            flags: [entry[2], entry[3]],
            comm,
        }
    }
}

/// An entry from raw field bytes.
fn raw_entry(def: &EventDef, pid: u32, payload: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(crate::tracefs::events::COMMON_SIZE + payload.len());
    data.extend_from_slice(&def.id.to_le_bytes());
    data.extend_from_slice(&[0, 0]);
    data.extend_from_slice(&pid.to_le_bytes());
    data.extend_from_slice(payload);
    if data.len() < def.fixed_size {
        data.resize(def.fixed_size, 0);
    }
    data
}
