//! The tracing facility's state: the events with their enable state in
//! each trace array, the arrays (the top level and the instances), the
//! saved task names, the synthetic events, and what changes the enable
//! and trigger state. Entries are recorded into it by `record.rs`; the
//! files that show and change it are each mechanism's (through [`Arr`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use crate::base::clock::Clock;
use crate::base::errno::SysResult;
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::Tree;
use crate::tracefs::cmdlines::Cmdlines;
use crate::tracefs::config::{TracingConfig, EVENT_ID_BASE};
use crate::tracefs::error_log::ErrorLog;
use crate::tracefs::events::builtin;
use crate::tracefs::events::ftrace::FtraceEvents;
use crate::tracefs::events::{EventDef, EventError, FieldSpec};
use crate::tracefs::hist::{Hist, NamedHists};
use crate::tracefs::instances::array::{EventFile, TraceArray};
use crate::tracefs::options::OPT_PRINTK_DEST;
use crate::tracefs::synth::SynthDef;
use crate::tracefs::trigger::{FireContext, TriggerEvent, TriggerHost, Triggers};

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
    /// a tree (see [`crate::tracefs::install`]).
    pub fn new(clock: Arc<dyn Clock>, cfg: &TracingConfig) -> Arc<Tracing> {
        let top = TraceArray::new(0, None, false);
        // The top level's buffers are the daemon's own: counted in the
        // memory budget, never refused.
        if top.charge_current().is_err() {
            tracing::warn!("tracefs: the top level's buffers do not fit in the memory budget");
        }
        let ftrace = FtraceEvents::new();
        let marker = EventId::with_def(ftrace.print.clone());
        let t = Arc::new(Tracing {
            clock,
            events: RwLock::new(Vec::new()),
            arrays: RwLock::new(vec![Some(top.clone())]),
            top,
            cmdlines: Mutex::new(Cmdlines::new()),
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
        // A bitmap of the ids in use (8 KiB): registering N events costs
        // N passes over the list, not N sets built from it (issue 37).
        let mut used = vec![0u64; 1 << 10];
        for e in evs.iter() {
            let id = e.0.def.id as usize;
            used[id >> 6] |= 1 << (id & 63);
        }
        // Ids below `base` count as used; then the first word with a gap.
        let base = base as usize;
        for w in used.iter_mut().take(base >> 6) {
            *w = u64::MAX;
        }
        used[base >> 6] |= (1u64 << (base & 63)) - 1;
        let n = used
            .iter()
            .position(|w| *w != u64::MAX)
            .map(|i| i * 64 + used[i].trailing_ones() as usize)
            .filter(|&n| n < u16::MAX as usize);
        let Some(n) = n.map(|n| n as u16) else {
            return Err(crate::base::errno::Errno::ENODEV);
        };
        let id = EventId::new(make(n));
        let _ = id.0.hook.set(hook);
        evs.insert(0, id.clone());
        Ok(id)
    }

    /// Take dynamic events out of the event list, in one pass. Each array
    /// where one of them was ever enabled is marked for clearing, as the
    /// kernel's `probe_remove_event_call` sets `tr->clear_trace` for
    /// `EVENT_FILE_FL_WAS_ENABLED`; [`Tracing::reset_cleared`] clears them.
    pub(super) fn unregister_dynamic_many(&self, ids: &[EventId]) {
        {
            let arrays = self.arrays.read_ok();
            for id in ids {
                for (slot, f) in id.0.files.read_ok().iter().enumerate() {
                    if !f.was_enabled.load(Ordering::SeqCst) {
                        continue;
                    }
                    if let Some(Some(a)) = arrays.get(slot) {
                        a.clear_trace.store(true, Ordering::SeqCst);
                    }
                }
            }
        }
        let gone: std::collections::HashSet<*const _> =
            ids.iter().map(|id| Arc::as_ptr(&id.0)).collect();
        self.events
            .write_ok()
            .retain(|e| !gone.contains(&Arc::as_ptr(&e.0)));
    }

    /// Clear the live and snapshot buffers of every array marked when a
    /// dynamic event once enabled there was removed, and unmark them (the
    /// kernel's `tracing_reset_all_online_cpus`). The kernel calls it after
    /// a `dynamic_events` removal (`-:`/`!` lines once parsed, whatever
    /// their outcome, and truncation) and a truncated `synthetic_events`,
    /// but not after `DIAG_IOCSDEL`, a user event freed when unused, or a
    /// `!name` line of `synthetic_events`: those leave the arrays marked
    /// until the next call.
    pub(crate) fn reset_cleared(&self) {
        for a in self.arrays_now() {
            if a.clear_trace.swap(false, Ordering::SeqCst) {
                a.clear_live_and_snapshot();
            }
        }
    }

    /// Add an event definition (not yet visible in a tree installed before).
    pub(super) fn define(
        &self,
        system: &str,
        name: &str,
        fields: &[FieldSpec],
        fmt: Option<&str>,
    ) -> Result<EventId, EventError> {
        let mut next = self.next_id.lock_ok();
        if self.event_id(system, name).is_some() {
            return Err(EventError::Duplicate {
                system: system.to_string(),
                name: name.to_string(),
            });
        }
        if *next == u16::MAX {
            return Err(EventError::OutOfIds);
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
        if on {
            file.was_enabled.store(true, Ordering::SeqCst);
        }
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
        if want {
            // A trigger or soft mode registers the event as enabling does.
            file.was_enabled.store(true, Ordering::SeqCst);
        }
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
        // Its buffers' pages, charged to the caller: ENOMEM when they do
        // not fit in the memory budget (issue 37).
        arr.charge_current()?;
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
pub(super) struct Host<'a> {
    pub(super) t: &'a Tracing,
    pub(super) a: &'a TraceArray,
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

/// A trace array and the facility it belongs to, for the closures of its
/// files: its own state through `Deref`, events through the facility.
#[derive(Clone)]
pub(crate) struct Arr {
    pub(crate) t: Arc<Tracing>,
    pub(crate) a: Arc<TraceArray>,
}

impl std::ops::Deref for Arr {
    type Target = TraceArray;
    fn deref(&self) -> &TraceArray {
        &self.a
    }
}

impl Arr {
    /// Array `a` of `t`.
    pub(crate) fn new(t: &Arc<Tracing>, a: Arc<TraceArray>) -> Arr {
        Arr { t: t.clone(), a }
    }
    /// Every event, in `available_events` order.
    pub(crate) fn events(&self) -> Vec<EventId> {
        self.t.events()
    }
    /// Whether `e` is enabled in this array.
    pub(crate) fn enabled(&self, e: &EventId) -> bool {
        self.file(e).enabled.load(Ordering::Relaxed)
    }
    /// `e`'s state in this array.
    pub(crate) fn file(&self, e: &EventId) -> Arc<EventFile> {
        e.0.file(self.a.slot)
    }
    /// Enable or disable `e` in this array.
    pub(crate) fn set_enabled(&self, e: &EventId, on: bool) {
        self.t.set_enabled_in(&self.a, e, on);
    }
}
