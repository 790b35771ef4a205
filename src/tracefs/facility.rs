//! The tracing facility's state and recording path: the events with their
//! enable and filter state, the options, and the per-CPU buffers entries
//! are recorded into. The files that show and change this state are built
//! on it in `files.rs`, `per_cpu.rs`, `marker.rs` and `user_events/`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::builtin;
use super::config::{TracingConfig, EVENT_ID_BASE};
use super::event::{EventDef, FieldSpec, FieldValue};
use super::ftrace_events::FtraceEvents;
use super::hist::{Hist, NamedHists};
use super::instance::{At, EventFile, TraceArray, OPT_PRINTK_DEST};
use super::snapshot::Taken;
use super::synth::SynthDef;
use super::trigger::{
    ErrorLog, FireContext, Hit, TriggerAction, TriggerEvent, TriggerHost, Triggers,
};
use crate::base::clock::{Clock, Timestamp};
use crate::base::errno::SysResult;
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::Tree;

/// Called after an event's enabled state changed (user_events updates its
/// status bits and the producers' enable bits).
pub type EnableHook = Arc<dyn Fn() + Send + Sync>;

/// Runtime state of one event.
pub struct Event {
    /// The definition.
    pub def: Arc<EventDef>,
    /// How many trace arrays have it enabled.
    pub(super) enabled: AtomicUsize,
    /// Its state in each trace array, by array slot.
    pub(super) files: RwLock<Vec<Arc<EventFile>>>,
    /// Its triggers in each trace array, by array slot.
    pub(super) triggers: RwLock<Vec<Arc<Triggers<EventId>>>>,
    /// How many trace arrays have it armed (triggers or soft mode).
    pub(super) armed: AtomicUsize,
    pub(super) hook: OnceLock<EnableHook>,
    /// The event probes attached to it.
    pub(super) probes: RwLock<Vec<Arc<dyn AttachedProbe>>>,
}

impl Event {
    /// The event's state in the array of `slot`.
    pub(super) fn file(&self, slot: usize) -> Arc<EventFile> {
        per_slot(&self.files, slot)
    }

    /// The event's triggers in the array of `slot`.
    pub(super) fn trig(&self, slot: usize) -> Arc<Triggers<EventId>> {
        per_slot(&self.triggers, slot)
    }
}

/// An event probe attached to an event, as the event list and recording
/// see it (the kernel's `dyn_event_operations` for `e:` lines; made in
/// [`super::eprobe`]).
pub(super) trait AttachedProbe: Send + Sync {
    /// The probe's own event.
    fn event(&self) -> &EventId;
    /// The event it is attached to.
    fn target(&self) -> &EventId;
    /// Its `dynamic_events` line.
    fn show(&self) -> String;
    /// Whether a `-:` line's `[GROUP/]NAME` and words name it.
    fn matches(&self, system: Option<&str>, event: &str, argv: &[&str]) -> bool;
    /// The array slots it is active in.
    fn slots(&self) -> &Mutex<Vec<usize>>;
    /// Its entry for one record of the attached event; None when its
    /// filter drops the record.
    fn entry(&self, rec: &[u8], comm: &str, cpu: u32) -> Option<Vec<u8>>;
}

/// The entry of `slot` in a per-array list, the list grown with defaults
/// up to it on first use.
fn per_slot<T: Default>(list: &RwLock<Vec<Arc<T>>>, slot: usize) -> Arc<T> {
    if let Some(x) = list.read_ok().get(slot) {
        return x.clone();
    }
    let mut l = list.write_ok();
    while l.len() <= slot {
        l.push(Arc::default());
    }
    l[slot].clone()
}

/// A handle producers keep: checking it costs one atomic load.
#[derive(Clone)]
pub struct EventId(pub(super) Arc<Event>);

impl EventId {
    /// A new, disabled, unfiltered event with definition `def`.
    pub(super) fn new(def: EventDef) -> EventId {
        EventId::with_def(Arc::new(def))
    }
    /// A new, disabled, unfiltered event sharing definition `def`.
    pub(super) fn with_def(def: Arc<EventDef>) -> EventId {
        EventId(Arc::new(Event {
            def,
            enabled: AtomicUsize::new(0),
            files: RwLock::new(Vec::new()),
            triggers: RwLock::new(Vec::new()),
            armed: AtomicUsize::new(0),
            hook: OnceLock::new(),
            probes: RwLock::new(Vec::new()),
        }))
    }
    /// Whether the event fires: enabled in a trace array, or armed there
    /// by triggers (soft mode, as the kernel keeps the tracepoint on).
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.0.enabled.load(Ordering::Relaxed) > 0 || self.0.armed.load(Ordering::Relaxed) > 0
    }
    /// The numeric id (`common_type`, the `id` file).
    pub fn id(&self) -> u16 {
        self.0.def.id
    }
    /// The definition.
    pub fn def(&self) -> &EventDef {
        &self.0.def
    }
}

/// `saved_cmdlines` and `saved_tgids`: the comms and tgids of recent
/// tasks, at most `size` of them (the oldest goes first).
pub(super) struct Cmdlines {
    pub(super) size: usize,
    pub(super) comms: HashMap<u32, Box<str>>,
    pub(super) order: VecDeque<u32>,
    pub(super) tgids: HashMap<u32, u32>,
}

impl Cmdlines {
    pub(super) fn save(&mut self, pid: u32, comm: &str) {
        if pid == 0 || self.size == 0 {
            return;
        }
        match self.comms.get_mut(&pid) {
            Some(c) if &**c == comm => {}
            Some(c) => *c = comm.into(),
            None => {
                if self.order.len() >= self.size {
                    if let Some(old) = self.order.pop_front() {
                        self.comms.remove(&old);
                    }
                }
                self.order.push_back(pid);
                self.comms.insert(pid, comm.into());
            }
        }
    }

    /// Remember `pid`'s thread group (`record-tgid`), looked up once.
    pub(super) fn save_tgid(&mut self, pid: u32) {
        if pid == 0 || self.tgids.contains_key(&pid) {
            return;
        }
        if self.tgids.len() >= SAVED_CMDLINES_MAX {
            self.tgids.clear();
        }
        let tgid = crate::base::procmem::tgid_of(pid).unwrap_or(pid);
        self.tgids.insert(pid, tgid);
    }
}

/// The kernel's default `saved_cmdlines_size` request.
const SAVED_CMDLINES_DEFAULT: usize = 128;

/// The `saved_cmdlines_size` a request of `n` gets. The kernel rounds the
/// buffer up to a power-of-two allocation (`struct saved_cmdlines_buffer`,
/// 131,096 bytes with its pid map, then 20 bytes per comm: 16 for the comm
/// and 4 for its pid) and uses all of it: 128 reads back as 6552 and 20,000
/// as 45,874 on 6.18.
pub(crate) fn cmdlines_rounded(n: usize) -> usize {
    const MAP: usize = 131_096;
    const PER: usize = 20;
    let alloc = (MAP + n * PER).next_power_of_two();
    (alloc - MAP) / PER
}
/// The largest `saved_cmdlines_size` the kernel takes (`PID_MAX_DEFAULT`).
pub(super) const SAVED_CMDLINES_MAX: usize = 32768;

/// The tracing facility: the events and the trace arrays (the top level
/// and the instances) they are recorded into.
pub struct Tracing {
    pub(super) clock: Arc<dyn Clock>,
    /// `available_events` order: newest registration first.
    pub(super) events: RwLock<Vec<EventId>>,
    /// The top-level array (`tracing/`).
    pub(super) top: Arc<TraceArray>,
    /// Every array by slot (0 is the top level; removed instances leave a
    /// hole that the next one takes).
    pub(super) arrays: RwLock<Vec<Option<Arc<TraceArray>>>>,
    /// `saved_cmdlines` and `saved_tgids` (global, as in the kernel).
    pub(super) cmdlines: Mutex<Cmdlines>,
    /// The `ftrace` system's events (`print`, `raw_data`, ...): formats
    /// only, never enabled or listed in `available_events`.
    pub(super) ftrace: FtraceEvents,
    /// `ftrace:print` as an event with triggers (the kernel's
    /// `trace_marker_file`): `events/ftrace/print/trigger` and `hist`
    /// act on `trace_marker` writes. Not in the event list.
    pub(super) marker: EventId,
    pub(super) next_id: Mutex<u16>,
    pub(super) builtin: OnceLock<Vec<EventId>>,
    /// The tree the files were added to (dynamic events add and remove
    /// their directories at run time).
    pub(super) tree: OnceLock<Arc<Tree>>,
    /// Serialises those additions and removals, so that a system directory
    /// removed with its last event never takes a new event with it.
    pub(super) dyn_tree: Mutex<()>,
    /// Runs when an array sets its `event-fork` option (the process
    /// events' producer subscribes then).
    pub(super) on_event_fork: OnceLock<EnableHook>,
    /// The array `trace_printk()` writes to: the one whose
    /// `trace_printk_dest` option is set (slot; 0 is the top level).
    pub(super) printk_dest: Mutex<usize>,
    /// The synthetic events, in creation order.
    pub(super) synth: Mutex<Vec<SynthEntry>>,
    /// The event probes, in creation order.
    pub(super) eprobes: Mutex<Vec<Arc<dyn AttachedProbe>>>,
}

/// A synthetic event: its definition, its event and how many hist
/// triggers use it (actions generating it, histograms on it): it cannot be
/// removed while any does (`EBUSY`).
pub(super) struct SynthEntry {
    pub(super) def: Arc<SynthDef>,
    pub(super) id: EventId,
    pub(super) refs: usize,
}

impl Tracing {
    /// The facility with the built-in events and those of `cfg`, not yet in
    /// a tree (see [`super::install`]).
    pub fn new(clock: Arc<dyn Clock>, cfg: &TracingConfig) -> Arc<Tracing> {
        let top = TraceArray::new(0, None, false);
        let ftrace = FtraceEvents::new();
        let marker = EventId::with_def(ftrace.print.clone());
        let t = Arc::new(Tracing {
            clock,
            events: RwLock::new(Vec::new()),
            arrays: RwLock::new(vec![Some(top.clone())]),
            top,
            cmdlines: Mutex::new(Cmdlines {
                size: cmdlines_rounded(SAVED_CMDLINES_DEFAULT),
                comms: HashMap::new(),
                order: VecDeque::new(),
                tgids: HashMap::new(),
            }),
            ftrace,
            marker,
            next_id: Mutex::new(EVENT_ID_BASE),
            builtin: OnceLock::new(),
            tree: OnceLock::new(),
            dyn_tree: Mutex::new(()),
            on_event_fork: OnceLock::new(),
            printk_dest: Mutex::new(0),
            synth: Mutex::new(Vec::new()),
            eprobes: Mutex::new(Vec::new()),
        });
        let builtin = builtin::builtin_defs()
            .into_iter()
            .map(|(sys, name, fields, fmt)| {
                t.define(sys, name, &fields, Some(fmt))
                    .expect("built-in event")
            })
            .collect();
        let _ = t.builtin.set(builtin);
        for e in &cfg.events {
            // Validated when the config was read.
            if let Err(err) = t.define(&e.system, &e.name, &e.fields, e.format.as_deref()) {
                tracing::warn!("tracing: {err}");
            }
        }
        t
    }

    /// The tree the files are in, once they are.
    pub(super) fn set_tree(&self, tree: &Arc<Tree>) {
        let _ = self.tree.set(tree.clone());
    }

    /// Give a dynamic event the lowest id not in use above the built-in and
    /// configured events (ids of deleted events are reused, as the kernel's
    /// allocator does) and put it at the top of `available_events`. `make`
    /// builds the definition for the id; `hook` runs after every change of
    /// the enabled state. ENODEV when no id is left.
    pub(super) fn register_dynamic(
        &self,
        make: impl FnOnce(u16) -> EventDef,
        hook: EnableHook,
    ) -> Result<EventId, crate::base::errno::Errno> {
        let base = *self.next_id.lock_ok();
        let mut evs = self.events.write_ok();
        let used: BTreeSet<u16> = evs.iter().map(|e| e.0.def.id).collect();
        let Some(n) = (base..u16::MAX).find(|n| !used.contains(n)) else {
            return Err(crate::base::errno::Errno::ENODEV);
        };
        let id = EventId::new(make(n));
        let _ = id.0.hook.set(hook);
        evs.insert(0, id.clone());
        Ok(id)
    }

    /// Take a dynamic event out of the event list.
    pub(super) fn unregister_dynamic(&self, id: &EventId) {
        self.events.write_ok().retain(|e| !Arc::ptr_eq(&e.0, &id.0));
    }

    /// Add an event definition (not yet visible in a tree installed before).
    pub(super) fn define(
        &self,
        system: &str,
        name: &str,
        fields: &[FieldSpec],
        fmt: Option<&str>,
    ) -> Result<EventId, String> {
        let mut next = self.next_id.lock_ok();
        if self.event_id(system, name).is_some() {
            return Err(format!("duplicate event {system}:{name}"));
        }
        if *next == u16::MAX {
            return Err("out of event ids".into());
        }
        let id = EventId::new(EventDef::new(system, name, *next, fields, fmt)?);
        *next += 1;
        self.events.write_ok().insert(0, id.clone());
        Ok(id)
    }

    /// Look an event up.
    pub fn event_id(&self, system: &str, name: &str) -> Option<EventId> {
        self.events
            .read_ok()
            .iter()
            .find(|e| e.0.def.system == system && e.0.def.name == name)
            .cloned()
    }

    /// All events in `available_events` order.
    pub fn events(&self) -> Vec<EventId> {
        self.events.read_ok().clone()
    }

    /// A built-in event by its index in [`usb::builtin_defs`].
    pub(crate) fn builtin(&self, i: usize) -> &EventId {
        &self.builtin.get().expect("built-ins defined")[i]
    }

    /// The trace arrays there are now.
    pub(super) fn arrays_now(&self) -> Vec<Arc<TraceArray>> {
        self.arrays.read_ok().iter().flatten().cloned().collect()
    }

    /// Whether an event is enabled (one atomic load).
    #[inline]
    pub fn is_enabled(&self, id: &EventId) -> bool {
        id.is_enabled()
    }

    /// Enable or disable an event in the top-level array.
    pub fn set_enabled(&self, id: &EventId, on: bool) {
        self.set_enabled_in(&self.top, id, on);
    }

    /// Enable or disable an event in `arr`, as its `enable` file does. The
    /// event's hook runs when it becomes enabled somewhere or nowhere.
    pub(super) fn set_enabled_in(&self, arr: &TraceArray, id: &EventId, on: bool) {
        if on {
            arr.expand();
        }
        let file = id.0.file(arr.slot);
        self.flip(id, &file.enabled, &id.0.enabled, on);
        self.eprobe_sync(id, arr.slot);
    }

    /// Set one array's `flag` for `id` to `on`, keep `count` (how many
    /// arrays have it set) in step, and run the event's hook when whether
    /// the event fires changed.
    fn flip(&self, id: &EventId, flag: &AtomicBool, count: &AtomicUsize, on: bool) {
        let before = id.is_enabled();
        if flag.swap(on, Ordering::SeqCst) == on {
            return;
        }
        if on {
            count.fetch_add(1, Ordering::SeqCst);
        } else {
            count.fetch_sub(1, Ordering::SeqCst);
        }
        if id.is_enabled() != before {
            if let Some(h) = id.0.hook.get() {
                h();
            }
        }
    }

    /// Recompute whether `id` is armed in the array of `slot`: it has
    /// triggers there or is in soft mode.
    pub(super) fn rearm(&self, id: &EventId, slot: usize) {
        let file = id.0.file(slot);
        let want = !id.0.trig(slot).is_empty() || file.soft.load(Ordering::SeqCst) > 0;
        self.flip(id, &file.armed, &id.0.armed, want);
        self.eprobe_sync(id, slot);
    }

    /// A write to `id`'s `trigger` file in `arr`.
    pub(super) fn write_trigger(
        &self,
        arr: &TraceArray,
        id: &EventId,
        data: &[u8],
    ) -> SysResult<u32> {
        let host = Host { t: self, a: arr };
        let r = id.0.trig(arr.slot).write(data, &id.0.def, &host);
        self.rearm(id, arr.slot);
        r
    }

    /// An `O_TRUNC` open of `id`'s `trigger` file in `arr`.
    pub(super) fn truncate_trigger(&self, arr: &TraceArray, id: &EventId) {
        let host = Host { t: self, a: arr };
        id.0.trig(arr.slot).truncate(&host);
        self.rearm(id, arr.slot);
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
        let stored = record && self.record_event(arr, id, file, data, comm, at);
        for a in late.into_iter().chain(post) {
            self.act(arr, a, &ctx, at);
        }
        stored
    }

    /// Store an event entry in `arr` through its checks
    /// ([`TraceArray::record`]), followed by a stack entry when the array's
    /// `stacktrace` option is set (as the kernel's event commit does).
    fn record_event(
        &self,
        arr: &TraceArray,
        id: &EventId,
        file: &EventFile,
        data: Vec<u8>,
        comm: &str,
        at: At,
    ) -> bool {
        let ctx = Ctx::of(&data, comm);
        let stored = arr.record(&id.0.def, file, data, comm, at);
        if stored && arr.stacktrace.load(Ordering::Relaxed) {
            self.record_stack(arr, &ctx, at);
        }
        stored
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

    /// Record an event now if it is enabled. `values` follow the event's
    /// fields; missing trailing values are zero (or "").
    pub fn emit(&self, id: &EventId, pid: u32, comm: &str, values: &[FieldValue<'_>]) {
        if id.is_enabled() {
            let data = id.0.def.encode(pid, values);
            self.record(id, data, comm, None);
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
            self.record(id, data, comm, Some(ts));
        }
    }

    /// Record an event from its raw field bytes: `payload` is the entry after
    /// the 8-byte common header, laid out as `format` says (dynamic data
    /// included, `__data_loc` offsets counted from the entry start).
    pub fn emit_raw(&self, id: &EventId, pid: u32, comm: &str, payload: &[u8]) {
        if id.is_enabled() {
            self.record(id, raw_entry(&id.0.def, pid, payload), comm, None);
        }
    }

    /// Record an entry of `ev` into every array that has it enabled.
    pub(super) fn record(&self, id: &EventId, data: Vec<u8>, comm: &str, ts: Option<Timestamp>) {
        self.record_on(id, data, comm, ts, None);
    }

    /// [`Tracing::record`] into the buffers of CPU `cpu` (None: the CPU
    /// this thread runs on).
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
        let stored = if file.armed.load(Ordering::Relaxed) {
            let trig = id.0.trig(arr.slot);
            if trig.is_empty() {
                file.enabled.load(Ordering::Relaxed)
                    && self.record_event(arr, id, file, data, comm, at)
            } else {
                self.fire(arr, id, file, &trig, data, comm, at)
            }
        } else {
            self.record_event(arr, id, file, data, comm, at)
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

    /// CLOCK_MONOTONIC now, on the facility's clock.
    pub(super) fn now_mono(&self) -> u64 {
        self.clock.now().mono_ns
    }

    /// Whether the top level's `tracing_on` is set.
    pub fn tracing_on(&self) -> bool {
        self.top.tracing_on()
    }

    /// The top-level array.
    pub fn top(&self) -> &Arc<TraceArray> {
        &self.top
    }

    /// The array of an instance, by name.
    pub(super) fn instance(&self, name: &str) -> Option<Arc<TraceArray>> {
        self.arrays
            .read_ok()
            .iter()
            .flatten()
            .find(|a| a.name.as_deref() == Some(name))
            .cloned()
    }

    /// Make an instance's array (EEXIST when the name is taken).
    pub(super) fn new_instance(
        &self,
        name: &str,
    ) -> Result<Arc<TraceArray>, crate::base::errno::Errno> {
        let mut arrays = self.arrays.write_ok();
        if arrays
            .iter()
            .flatten()
            .any(|a| a.name.as_deref() == Some(name))
        {
            return Err(crate::base::errno::Errno::EEXIST);
        }
        let slot = arrays
            .iter()
            .position(|a| a.is_none())
            .unwrap_or(arrays.len());
        let arr = TraceArray::new(slot, Some(name.to_string()), true);
        arr.inherit_options(&self.top);
        if slot == arrays.len() {
            arrays.push(Some(arr.clone()));
        } else {
            arrays[slot] = Some(arr.clone());
        }
        Ok(arr)
    }

    /// How many instances there are.
    pub(super) fn instance_count(&self) -> usize {
        self.arrays.read_ok().iter().flatten().count() - 1
    }

    /// Remove an instance's array, its events disabled there first.
    pub(super) fn remove_instance(
        &self,
        name: &str,
    ) -> Result<Arc<TraceArray>, crate::base::errno::Errno> {
        let arr = self
            .instance(name)
            .ok_or(crate::base::errno::Errno::ENOENT)?;
        let host = Host { t: self, a: &arr };
        // The marker's triggers too: the slot goes to the next instance.
        let all: Vec<EventId> = self
            .events()
            .into_iter()
            .chain([self.marker.clone()])
            .collect();
        for e in &all {
            e.0.trig(arr.slot).clear(&host);
        }
        for e in all {
            e.0.file(arr.slot).soft.store(0, Ordering::SeqCst);
            self.rearm(&e, arr.slot);
            self.set_enabled_in(&arr, &e, false);
            let mut files = e.0.files.write_ok();
            if let Some(f) = files.get_mut(arr.slot) {
                *f = Arc::default();
            }
            drop(files);
            if let Some(t) = e.0.triggers.write_ok().get_mut(arr.slot) {
                *t = Arc::default();
            }
        }
        // The printk destination goes back to the top level.
        {
            let mut dest = self.printk_dest.lock_ok();
            if *dest == arr.slot {
                *dest = 0;
                self.top.options.lock_ok()[OPT_PRINTK_DEST] = true;
            }
        }
        let mut arrays = self.arrays.write_ok();
        arrays[arr.slot] = None;
        Ok(arr)
    }
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
    let mut data = Vec::with_capacity(super::event::COMMON_SIZE + payload.len());
    data.extend_from_slice(&def.id.to_le_bytes());
    data.extend_from_slice(&[0, 0]);
    data.extend_from_slice(&pid.to_le_bytes());
    data.extend_from_slice(payload);
    if data.len() < def.fixed_size {
        data.resize(def.fixed_size, 0);
    }
    data
}

impl TriggerEvent for EventId {
    fn system(&self) -> &str {
        &self.def().system
    }
    fn name(&self) -> &str {
        &self.def().name
    }
    fn same_event(&self, other: &Self) -> bool {
        std::ptr::eq(self.def(), other.def())
    }
}

/// What triggers need of the facility and one array.
struct Host<'a> {
    t: &'a Tracing,
    a: &'a TraceArray,
}

impl TriggerHost<EventId> for Host<'_> {
    fn find_event(&self, system: &str, name: &str) -> Option<EventId> {
        self.t.event_id(system, name)
    }
    fn any_event(&self, system: &str, name: &str) -> bool {
        self.t.event_id(system, name).is_some()
            || self
                .t
                .ftrace
                .all
                .iter()
                .any(|d| d.system == system && d.name == name)
    }
    fn soft_mode(&self, target: &EventId, on: bool) {
        let file = target.0.file(self.a.slot);
        if on {
            file.soft.fetch_add(1, Ordering::SeqCst);
        } else {
            let _ = file
                .soft
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        }
        self.t.rearm(target, self.a.slot);
    }
    fn error_log(&self) -> &ErrorLog {
        &self.a.error_log
    }
    fn now_ns(&self) -> u64 {
        self.t.now_mono()
    }
    fn named_hists(&self) -> &NamedHists {
        &self.a.named_hists
    }
    fn hold_snapshot(&self, on: bool) -> SysResult<()> {
        if on {
            self.a.arm_snapshot()
        } else {
            self.a.disarm_snapshot();
            Ok(())
        }
    }
    fn hists(&self) -> Vec<(String, String, Arc<Hist>)> {
        let mut out = Vec::new();
        // The events, and `ftrace:print`, whose triggers act on markers.
        for e in self.t.events().iter().chain([&self.t.marker]) {
            for h in e.0.trig(self.a.slot).var_hists() {
                out.push((e.def().system.clone(), e.def().name.clone(), h));
            }
        }
        out
    }
    fn synth_def(&self, name: &str) -> Option<Arc<SynthDef>> {
        self.t
            .synth
            .lock_ok()
            .iter()
            .find(|e| e.def.name == name)
            .map(|e| e.def.clone())
    }
    fn synth_ref(&self, name: &str, delta: isize) {
        if let Some(e) = self
            .t
            .synth
            .lock_ok()
            .iter_mut()
            .find(|e| e.def.name == name)
        {
            e.refs = e.refs.saturating_add_signed(delta);
        }
    }
}

impl FireContext<EventId> for Host<'_> {
    fn tracing_on(&self) -> bool {
        self.a.tracing_on()
    }
    fn event_enabled(&self, e: &EventId) -> bool {
        e.0.file(self.a.slot).enabled.load(Ordering::Relaxed)
    }
}
