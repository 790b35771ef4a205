//! The tracing facility's state and recording path: the events with their
//! enable and filter state, the options, and the per-CPU buffers entries
//! are recorded into. The files that show and change this state are built
//! on it in `files.rs`, `per_cpu.rs`, `marker.rs` and `user_events/`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use super::builtin;
use super::config::{TracingConfig, EVENT_ID_BASE};
use super::event::{EventDef, FieldSpec, FieldValue};
use super::filter;
use super::ftrace_events::FtraceEvents;
use super::ring::{self, CpuBuffer, Entry, BUF_PAGE_SIZE, DEFAULT_BUF_BYTES};
use super::trace_clock::TraceClock;
use crate::clock::{Clock, Timestamp};
use crate::sync::{LockExt, RwLockExt};
use crate::vfs::{Tree, Waker};

/// An event's filter state.
#[derive(Clone, Debug, Default)]
pub(super) enum FilterState {
    /// No filter (`none`).
    #[default]
    None,
    /// An active filter and its text.
    Active(String, filter::Filter),
    /// A failed write: the event is unfiltered and `filter` shows the error.
    Error(String),
}

/// Called after an event's enabled state changed (user_events updates its
/// status bits and the producers' enable bits).
pub type EnableHook = Arc<dyn Fn() + Send + Sync>;

/// Runtime state of one event.
pub struct Event {
    /// The definition.
    pub def: Arc<EventDef>,
    pub(super) enabled: AtomicBool,
    pub(super) filtered: AtomicBool,
    pub(super) filter: RwLock<FilterState>,
    pub(super) hook: OnceLock<EnableHook>,
}

/// A handle producers keep: checking it costs one atomic load.
#[derive(Clone)]
pub struct EventId(pub(super) Arc<Event>);

impl EventId {
    /// A new, disabled, unfiltered event with definition `def`.
    fn new(def: EventDef) -> EventId {
        EventId(Arc::new(Event {
            def: Arc::new(def),
            enabled: AtomicBool::new(false),
            filtered: AtomicBool::new(false),
            filter: RwLock::new(FilterState::None),
            hook: OnceLock::new(),
        }))
    }
    /// Whether the event is enabled.
    #[inline]
    pub fn is_enabled(&self) -> bool {
        self.0.enabled.load(Ordering::Relaxed)
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

/// The global options (`options/`, `trace_options`), in the kernel's
/// `trace_options` order, with their defaults.
pub const OPTIONS: &[(&str, bool)] = &[
    ("print-parent", true),
    ("sym-offset", false),
    ("sym-addr", false),
    ("verbose", false),
    ("raw", false),
    ("hex", false),
    ("bin", false),
    ("block", false),
    ("fields", false),
    ("trace_printk", true),
    ("annotate", true),
    ("userstacktrace", false),
    ("sym-userobj", false),
    ("printk-msg-only", false),
    ("context-info", true),
    ("latency-format", false),
    ("record-cmd", true),
    ("record-tgid", false),
    ("overwrite", true),
    ("disable_on_free", false),
    ("irq-info", true),
    ("markers", true),
    ("event-fork", false),
    ("trace_printk_dest", true),
    ("copy_trace_marker", true),
    ("pause-on-trace", false),
    ("hash-ptr", true),
    ("function-trace", true),
    ("function-fork", false),
    ("stacktrace", false),
    ("test_nop_accept", false),
    ("test_nop_refuse", false),
];

/// Index of the `markers` option in [`OPTIONS`].
pub(super) const OPT_MARKERS: usize = 21;

/// Whether the buffers still have their boot-time size.
pub(super) struct BufState {
    pub(super) expanded: bool,
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
        let tgid = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Tgid:"))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(pid);
        self.tgids.insert(pid, tgid);
    }
}

/// The kernel's default `saved_cmdlines_size` request.
const SAVED_CMDLINES_DEFAULT: usize = 128;

/// The `saved_cmdlines_size` a request of `n` gets. The kernel rounds the
/// buffer up to a power-of-two allocation (a 131,104-byte pid map, then 20
/// bytes per comm) and uses all of it: 128 reads back as 6552 on 6.18.
pub(crate) fn cmdlines_rounded(n: usize) -> usize {
    const MAP: usize = 131_104;
    const PER: usize = 20;
    let alloc = (MAP + n * PER).next_power_of_two();
    (alloc - MAP) / PER
}
/// The largest `saved_cmdlines_size` the kernel takes (`PID_MAX_DEFAULT`).
pub(super) const SAVED_CMDLINES_MAX: usize = 32768;

/// The tracing facility.
pub struct Tracing {
    pub(super) clock: Arc<dyn Clock>,
    /// `available_events` order: newest registration first.
    pub(super) events: RwLock<Vec<EventId>>,
    /// One buffer per CPU (`per_cpu/cpuN`).
    pub(super) bufs: Vec<Mutex<CpuBuffer>>,
    /// `trace_clock`.
    pub(super) trace_clock: TraceClock,
    /// The newest time stamp given to an entry (see [`Tracing::store`]).
    pub(super) newest_ts: AtomicU64,
    pub(super) cmdlines: Mutex<Cmdlines>,
    /// `tracing_cpumask`: CPUs whose events are recorded.
    pub(super) cpumask: RwLock<Vec<bool>>,
    pub(super) all_cpus: AtomicBool,
    pub(super) notrace_pids: RwLock<BTreeSet<u32>>,
    pub(super) has_notrace_pids: AtomicBool,
    /// The `ftrace` system's events (`print`, `raw_data`, ...): formats
    /// only, never enabled or listed in `available_events`.
    pub(super) ftrace: FtraceEvents,
    pub(super) on: AtomicBool,
    pub(super) buf: Mutex<BufState>,
    pub(super) options: Mutex<Vec<bool>>,
    pub(super) irq_info: AtomicBool,
    pub(super) overwrite: AtomicBool,
    pub(super) record_cmd: AtomicBool,
    pub(super) record_tgid: AtomicBool,
    pub(super) event_pids: RwLock<BTreeSet<u32>>,
    pub(super) has_event_pids: AtomicBool,
    pub(super) ftrace_pids: Mutex<BTreeSet<u32>>,
    pub(super) pipe_readers: AtomicUsize,
    pub(super) wakers: Mutex<Vec<(u64, Waker)>>,
    pub(super) next_waker: AtomicU64,
    pub(super) cpus: usize,
    pub(super) next_id: Mutex<u16>,
    pub(super) builtin: OnceLock<Vec<EventId>>,
    /// The tree the files were added to (dynamic events add and remove
    /// their directories at run time).
    pub(super) tree: OnceLock<Arc<Tree>>,
    /// Serialises those additions and removals, so that a system directory
    /// removed with its last event never takes a new event with it.
    pub(super) dyn_tree: Mutex<()>,
}

/// Pages of a per-CPU buffer of `bytes` (at least 2, as the kernel's).
fn pages_for(bytes: usize) -> usize {
    bytes.div_ceil(BUF_PAGE_SIZE).max(2)
}

fn online_cpus() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        1
    }
}

fn current_cpu() -> u32 {
    nix::sched::sched_getcpu().unwrap_or(0) as u32
}

impl Tracing {
    /// The facility with the built-in events and those of `cfg`, not yet in
    /// a tree (see [`super::install`]).
    pub fn new(clock: Arc<dyn Clock>, cfg: &TracingConfig) -> Arc<Tracing> {
        let cpus = online_cpus();
        let t = Arc::new(Tracing {
            clock,
            events: RwLock::new(Vec::new()),
            bufs: (0..cpus).map(|_| Mutex::new(CpuBuffer::new(2))).collect(),
            trace_clock: TraceClock::default(),
            newest_ts: AtomicU64::new(0),
            cmdlines: Mutex::new(Cmdlines {
                size: cmdlines_rounded(SAVED_CMDLINES_DEFAULT),
                comms: HashMap::new(),
                order: VecDeque::new(),
                tgids: HashMap::new(),
            }),
            cpumask: RwLock::new(vec![true; cpus]),
            all_cpus: AtomicBool::new(true),
            notrace_pids: RwLock::new(BTreeSet::new()),
            has_notrace_pids: AtomicBool::new(false),
            ftrace: FtraceEvents::new(),
            on: AtomicBool::new(true),
            buf: Mutex::new(BufState { expanded: false }),
            options: Mutex::new(OPTIONS.iter().map(|o| o.1).collect()),
            irq_info: AtomicBool::new(true),
            overwrite: AtomicBool::new(true),
            record_cmd: AtomicBool::new(true),
            record_tgid: AtomicBool::new(false),
            event_pids: RwLock::new(BTreeSet::new()),
            has_event_pids: AtomicBool::new(false),
            ftrace_pids: Mutex::new(BTreeSet::new()),
            pipe_readers: AtomicUsize::new(0),
            wakers: Mutex::new(Vec::new()),
            next_waker: AtomicU64::new(1),
            cpus,
            next_id: Mutex::new(EVENT_ID_BASE),
            builtin: OnceLock::new(),
            tree: OnceLock::new(),
            dyn_tree: Mutex::new(()),
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
    ) -> Result<EventId, crate::errno::Errno> {
        let base = *self.next_id.lock_ok();
        let mut evs = self.events.write_ok();
        let used: BTreeSet<u16> = evs.iter().map(|e| e.0.def.id).collect();
        let Some(n) = (base..u16::MAX).find(|n| !used.contains(n)) else {
            return Err(crate::errno::Errno::ENODEV);
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

    /// Whether an event is enabled (one atomic load).
    #[inline]
    pub fn is_enabled(&self, id: &EventId) -> bool {
        id.is_enabled()
    }

    /// Enable or disable an event as `enable` does.
    pub fn set_enabled(&self, id: &EventId, on: bool) {
        if on {
            self.expand();
        }
        let was = id.0.enabled.swap(on, Ordering::SeqCst);
        if was != on {
            if let Some(h) = id.0.hook.get() {
                h();
            }
        }
    }

    /// Record an event now if it is enabled. `values` follow the event's
    /// fields; missing trailing values are zero (or "").
    pub fn emit(&self, id: &EventId, pid: u32, comm: &str, values: &[FieldValue<'_>]) {
        if id.is_enabled() {
            let data = id.0.def.encode(pid, values);
            self.record(&id.0, data, comm, None);
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
            self.record(&id.0, data, comm, Some(ts));
        }
    }

    /// Record an event from its raw field bytes: `payload` is the entry after
    /// the 8-byte common header, laid out as `format` says (dynamic data
    /// included, `__data_loc` offsets counted from the entry start).
    pub fn emit_raw(&self, id: &EventId, pid: u32, comm: &str, payload: &[u8]) {
        if id.is_enabled() {
            self.record(&id.0, raw_entry(&id.0.def, pid, payload), comm, None);
        }
    }

    pub(super) fn record(&self, ev: &Event, data: Vec<u8>, comm: &str, ts: Option<Timestamp>) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let pid = u32::from_le_bytes(data[4..8].try_into().unwrap());
        if self.has_event_pids.load(Ordering::Relaxed) && !self.event_pids.read_ok().contains(&pid)
        {
            return;
        }
        if self.has_notrace_pids.load(Ordering::Relaxed)
            && self.notrace_pids.read_ok().contains(&pid)
        {
            return;
        }
        let cpu = self.cpu_now();
        if !self.all_cpus.load(Ordering::Relaxed) && !self.cpumask.read_ok()[cpu as usize] {
            return;
        }
        if ev.filtered.load(Ordering::Relaxed) {
            if let FilterState::Active(_, f) = &*ev.filter.read_ok() {
                let r = filter::Record {
                    entry: &data,
                    cpu,
                    comm,
                };
                if !f.matches(&r) {
                    return;
                }
            }
        }
        self.store(ev.def.clone(), data, comm, cpu, ts);
    }

    /// The CPU an entry recorded now goes to: the one this thread runs on
    /// (for a request, the CPU the kernel woke the daemon's thread on, which
    /// is the caller's as a rule), folded into the buffers there are.
    pub(super) fn cpu_now(&self) -> u32 {
        current_cpu() % self.bufs.len() as u32
    }

    /// Put an entry in CPU `cpu`'s buffer, stamped on the trace clock, and
    /// wake the readers.
    pub(super) fn store(
        &self,
        def: Arc<EventDef>,
        data: Vec<u8>,
        comm: &str,
        cpu: u32,
        ts: Option<Timestamp>,
    ) {
        let mono = ts.unwrap_or_else(|| self.clock.now()).mono_ns;
        let pid = u32::from_le_bytes(data[4..8].try_into().unwrap());
        if self.record_cmd.load(Ordering::Relaxed) {
            self.cmdlines.lock_ok().save(pid, comm);
        }
        if self.record_tgid.load(Ordering::Relaxed) {
            self.cmdlines.lock_ok().save_tgid(pid);
        }
        let stamp = self.trace_clock.stamp(mono);
        let overwrite = self.overwrite.load(Ordering::Relaxed);
        {
            // Producers stamp events with their own clocks (each bus its
            // simulated time), but the kernel's ring stamps entries as they
            // are recorded, so readers never see time go back. The stamp is
            // raised to the newest one given out, under this CPU's lock:
            // a reader, which holds every CPU's lock, then never takes an
            // entry that a later push could undercut.
            let mut b = self.bufs[cpu as usize].lock_ok();
            let newest = self.newest_ts.fetch_max(stamp, Ordering::SeqCst);
            let e = Entry {
                def,
                data: data.into(),
                ts: stamp.max(newest),
                cpu,
                comm: comm.into(),
            };
            if !b.push(e, overwrite) {
                return;
            }
        }
        if self.pipe_readers.load(Ordering::Relaxed) > 0 {
            let ws: Vec<Waker> = self.wakers.lock_ok().iter().map(|w| w.1.clone()).collect();
            for w in ws {
                w();
            }
        }
    }

    /// The buffer grows to its full default size the first time tracing is
    /// set up (the kernel's `tracing_update_buffers`).
    pub(super) fn expand(&self) {
        let mut b = self.buf.lock_ok();
        if !b.expanded {
            b.expanded = true;
            for buf in &self.bufs {
                buf.lock_ok().resize(pages_for(DEFAULT_BUF_BYTES));
            }
        }
    }

    /// Lock every CPU's buffer, in CPU order.
    pub(super) fn lock_all(&self) -> Vec<std::sync::MutexGuard<'_, CpuBuffer>> {
        self.bufs.iter().map(|b| b.lock_ok()).collect()
    }

    /// Empty every buffer (`echo > trace`, a new trace clock).
    pub(super) fn clear_all(&self) {
        for mut b in self.lock_all() {
            b.clear();
        }
        // A new clock starts from its own values.
        self.newest_ts.store(0, Ordering::SeqCst);
    }

    /// Whether `tracing_on` is set.
    pub fn tracing_on(&self) -> bool {
        self.on.load(Ordering::Relaxed)
    }

    /// Entries in the buffers and entries written (in buffer + overwritten).
    pub fn counts(&self) -> (usize, u64) {
        self.bufs.iter().fold((0, 0), |(n, w), b| {
            let b = b.lock_ok();
            (n + b.len(), w + b.written())
        })
    }

    /// The text of the `trace` file: every CPU's entries merged in time
    /// order, or one CPU's (`per_cpu/cpuN/trace`). The header counts all
    /// CPUs either way, as the kernel's does.
    pub fn trace_text(&self, cpu: Option<usize>) -> String {
        let irq = self.irq_info.load(Ordering::Relaxed);
        let in_ns = self.trace_clock.in_ns();
        let guards = self.lock_all();
        let (n, w) = guards
            .iter()
            .fold((0, 0), |(n, w), b| (n + b.len(), w + b.written()));
        let mut s = ring::header(n, w, self.cpus, irq);
        let bufs: Vec<&CpuBuffer> = match cpu {
            Some(c) => vec![&*guards[c]],
            None => guards.iter().map(|g| &**g).collect(),
        };
        for e in ring::merged(&bufs) {
            s.push_str(&e.line(irq, in_ns));
        }
        s
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
