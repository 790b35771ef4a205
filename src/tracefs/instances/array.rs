//! A trace array (the kernel's `struct trace_array`, kernel/trace/trace.h and
//! trace.c): the top level `tracing/` or an instance under
//! `tracing/instances/`. Each has its own
//! per-CPU buffers, `tracing_on`, options, trace clock, CPU mask and pid
//! lists; events are enabled and filtered per array (`EventFile`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use crate::base::budget::{Grant, MEMORY};
use crate::base::sync::LockExt;
use crate::base::vfs::Waker;
use crate::tracefs::error_log::ErrorLog;
use crate::tracefs::events::EventDef;
use crate::tracefs::filter;
use crate::tracefs::hist::NamedHists;
use crate::tracefs::options::{OPTIONS, OPT_PRINTK_DEST};
use crate::tracefs::ring::trace_clock::TraceClock;
use crate::tracefs::ring::{self, CpuBuffer, Entry, BUF_PAGE_SIZE, DEFAULT_BUF_BYTES};

/// An event's filter state.
#[derive(Clone, Debug, Default)]
pub(crate) enum FilterState {
    /// No filter (`none`).
    #[default]
    None,
    /// An active filter and its text.
    Active(String, filter::Filter),
    /// A failed write: the event is unfiltered and `filter` shows the error.
    Error(String),
}

/// An event's state in one trace array (the kernel's `trace_event_file`):
/// whether it is enabled there and its filter.
#[derive(Default)]
pub struct EventFile {
    pub(crate) enabled: AtomicBool,
    pub(crate) filtered: AtomicBool,
    pub(crate) filter: RwLock<FilterState>,
    /// Triggers of other events that name this one (`enable_event` and
    /// the like): while there are any the event is in soft mode.
    pub(crate) soft: AtomicUsize,
    /// Whether the event must fire here although not enabled: it has
    /// triggers or is in soft mode.
    pub(crate) armed: AtomicBool,
    /// Whether it was ever enabled or armed here (the kernel's
    /// `EVENT_FILE_FL_WAS_ENABLED`, never cleared): removing the event
    /// then clears this array's buffers (see
    /// [`crate::tracefs::facility::Tracing::reset_cleared`]).
    pub(crate) was_enabled: AtomicBool,
}

/// When and where an entry happened: its CLOCK_MONOTONIC time and the CPU
/// (None: the one the recording thread runs on).
#[derive(Clone, Copy, Debug)]
pub(crate) struct At {
    pub(crate) mono: u64,
    pub(crate) cpu: Option<u32>,
}

/// One trace array.
pub struct TraceArray {
    /// Index into each event's per-array state.
    pub(crate) slot: usize,
    /// The instance's name; `None` for the top level.
    pub(crate) name: Option<String>,
    /// One buffer per CPU (`per_cpu/cpuN`).
    pub(crate) bufs: Vec<Mutex<CpuBuffer>>,
    /// The snapshot buffer (the kernel's `max_buffer`), one per CPU, locked
    /// after `bufs` when both are: a snapshot swaps each CPU's pair.
    /// Minimal (2 pages) while not allocated.
    pub(crate) spare: Vec<Mutex<CpuBuffer>>,
    /// Whether the snapshot buffer is allocated (`tr->allocated_snapshot`);
    /// changed with every `spare` lock held.
    pub(crate) snap_allocated: AtomicBool,
    /// How many users hold the snapshot buffer armed (`tr->snapshot`:
    /// snapshot triggers, a `snapshot` write while it swaps); the lock
    /// also serialises allocating and freeing it.
    pub(crate) snap_armed: Mutex<u32>,
    /// `trace_clock`.
    pub(crate) trace_clock: TraceClock,
    /// The newest time stamp given to an entry (see [`TraceArray::store`]).
    pub(crate) newest_ts: AtomicU64,
    /// `tracing_cpumask`: CPUs whose events are recorded.
    pub(crate) cpumask: RwLock<Vec<bool>>,
    pub(crate) all_cpus: AtomicBool,
    pub(crate) event_pids: RwLock<BTreeSet<u32>>,
    pub(crate) has_event_pids: AtomicBool,
    pub(crate) notrace_pids: RwLock<BTreeSet<u32>>,
    pub(crate) has_notrace_pids: AtomicBool,
    pub(crate) ftrace_pids: Mutex<BTreeSet<u32>>,
    pub(crate) on: AtomicBool,
    /// Whether the buffers were grown from their boot-time size.
    pub(crate) expanded: AtomicBool,
    /// The sub-buffer order: pages are 4 KiB << order
    /// (`buffer_subbuf_size_kb`).
    pub(crate) subbuf_order: AtomicU32,
    pub(crate) options: Mutex<Vec<bool>>,
    pub(crate) irq_info: AtomicBool,
    /// The `stacktrace` option: a stack entry after every event.
    pub(crate) stacktrace: AtomicBool,
    pub(crate) overwrite: AtomicBool,
    pub(crate) record_cmd: AtomicBool,
    pub(crate) record_tgid: AtomicBool,
    /// The `event-fork` option (see `sched.rs`).
    pub(crate) event_fork: AtomicBool,
    pub(crate) pipe_readers: AtomicUsize,
    pub(crate) wakers: Mutex<Vec<(u64, Waker)>>,
    pub(crate) next_waker: AtomicU64,
    /// `error_log`.
    pub(crate) error_log: ErrorLog,
    /// Histograms shared by `name=` hist triggers.
    pub(crate) named_hists: NamedHists,
    /// Open `trace_pipe_raw` files whose buffer they mapped (see
    /// `per_cpu.rs`).
    pub(crate) maps: Mutex<Vec<MapRef>>,
    /// The rings' memory (live and snapshot buffers, every CPU) charged to
    /// the memory budget, as [`ring::mem_cost`] counts it; changed with
    /// every buffer lock held (see [`TraceArray::charge_rings`]). `None`
    /// before the first charge and after the instance is removed.
    pub(crate) mem: Mutex<Option<Grant>>,
    /// Whether the buffers are to be cleared at the next reset of the
    /// marked arrays (the kernel's `tr->clear_trace`): a dynamic event
    /// once enabled here was removed.
    pub(crate) clear_trace: AtomicBool,
}

/// An open `per_cpu/cpuN/trace_pipe_raw` that mapped CPU `cpu`'s buffer,
/// and where its mapping shows in `/proc/<pid>/maps` (device, inode).
pub(crate) struct MapRef {
    pub(crate) open: u64,
    pub(crate) cpu: usize,
    pub(crate) file: Option<(u64, u64)>,
}

/// Pages of a per-CPU buffer of `bytes` (at least 2, as the kernel's).
fn pages_for(bytes: usize) -> usize {
    bytes.div_ceil(BUF_PAGE_SIZE).max(2)
}

/// The sub-buffer order a `buffer_subbuf_size_kb` write of `kb` asks for:
/// the pages it takes (`DIV_ROUND_UP` in the kernel's `int`, the product
/// in its `unsigned long`), the order of the next power of two (`fls` of
/// pages less one, so 0 KiB asks for order 32). `None` past
/// [`ring::MAX_SUBBUF_ORDER`].
pub(crate) fn subbuf_order_for(kb: u64) -> Option<u32> {
    let bytes = kb.wrapping_mul(1024);
    let pages = (bytes.wrapping_add(ring::PAGE_SIZE as u64 - 1) / ring::PAGE_SIZE as u64) as i32;
    let order = 32 - (pages.wrapping_sub(1) as u32).leading_zeros();
    (order <= ring::MAX_SUBBUF_ORDER).then_some(order)
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

impl TraceArray {
    /// A new array in `slot`. The top level starts with the kernel's boot
    /// size (two pages a CPU) and grows when tracing is first set up; an
    /// instance starts at the full default size, as measured.
    pub(crate) fn new(slot: usize, name: Option<String>, expanded: bool) -> Arc<TraceArray> {
        let cpus = online_cpus();
        let pages = if expanded {
            pages_for(DEFAULT_BUF_BYTES)
        } else {
            2
        };
        let options = Mutex::new(
            OPTIONS
                .iter()
                .enumerate()
                .map(|(i, o)| o.1 && !(name.is_some() && i == OPT_PRINTK_DEST))
                .collect(),
        );
        Arc::new(TraceArray {
            slot,
            name,
            bufs: (0..cpus)
                .map(|_| Mutex::new(CpuBuffer::new(pages)))
                .collect(),
            spare: (0..cpus).map(|_| Mutex::new(CpuBuffer::new(2))).collect(),
            snap_allocated: AtomicBool::new(false),
            snap_armed: Mutex::new(0),
            trace_clock: TraceClock::default(),
            newest_ts: AtomicU64::new(0),
            cpumask: RwLock::new(vec![true; cpus]),
            all_cpus: AtomicBool::new(true),
            event_pids: RwLock::new(BTreeSet::new()),
            has_event_pids: AtomicBool::new(false),
            notrace_pids: RwLock::new(BTreeSet::new()),
            has_notrace_pids: AtomicBool::new(false),
            ftrace_pids: Mutex::new(BTreeSet::new()),
            on: AtomicBool::new(true),
            expanded: AtomicBool::new(expanded),
            subbuf_order: AtomicU32::new(0),
            options,
            irq_info: AtomicBool::new(true),
            stacktrace: AtomicBool::new(false),
            overwrite: AtomicBool::new(true),
            record_cmd: AtomicBool::new(true),
            record_tgid: AtomicBool::new(false),
            event_fork: AtomicBool::new(false),
            pipe_readers: AtomicUsize::new(0),
            wakers: Mutex::new(Vec::new()),
            next_waker: AtomicU64::new(1),
            error_log: ErrorLog::new(),
            named_hists: NamedHists::new(),
            maps: Mutex::new(Vec::new()),
            mem: Mutex::new(None),
            clear_trace: AtomicBool::new(false),
        })
    }

    /// Bytes the rings count (see [`ring::mem_cost`]) when the live
    /// buffers have the shapes `live` and the snapshot buffers `spare`
    /// (pages, usable bytes of a page). An array not yet expanded counts
    /// its live buffers at the size they will expand to.
    pub(crate) fn rings_cost(
        &self,
        live: impl Iterator<Item = (usize, usize)>,
        spare: impl Iterator<Item = (usize, usize)>,
    ) -> usize {
        let floor = if self.expanded.load(Ordering::SeqCst) {
            0
        } else {
            pages_for(DEFAULT_BUF_BYTES)
        };
        let live: usize = live.map(|(n, c)| ring::mem_cost(n.max(floor), c)).sum();
        let spare: usize = spare.map(|(n, c)| ring::mem_cost(n, c)).sum();
        live.saturating_add(spare)
    }

    /// Charge the rings as `total` bytes to the memory budget before they
    /// grow to that (ENOMEM, nothing charged, when it does not fit), or
    /// after they shrank. The first charge goes to the caller (an
    /// instance's `mkdir`), later ones to the same account. Callers hold
    /// every live and snapshot buffer's lock, so that charges and sizes
    /// change together.
    pub(crate) fn charge_rings(&self, total: usize) -> crate::base::errno::SysResult<()> {
        let mut mem = self.mem.lock_ok();
        match mem.as_mut() {
            Some(g) => g.resize(total),
            None => {
                *mem = Some(MEMORY.take(total)?);
                Ok(())
            }
        }
    }

    /// Charge the rings as they are now (at creation, and after they
    /// shrank).
    pub(crate) fn charge_current(&self) -> crate::base::errno::SysResult<()> {
        let live = self.lock_all();
        let spare = self.lock_spare();
        let total = self.rings_cost(
            live.iter().map(|b| b.shape()),
            spare.iter().map(|b| b.shape()),
        );
        self.charge_rings(total)
    }

    /// The instance is removed: every buffer is emptied and its memory
    /// given back to the budget.
    pub(crate) fn release_rings(&self) {
        let mut live = self.lock_all();
        let mut spare = self.lock_spare();
        for b in live.iter_mut().chain(spare.iter_mut()) {
            b.clear();
            b.resize(2);
        }
        *self.mem.lock_ok() = None;
    }

    /// Take `top`'s option flags, as the kernel's instance creation copies
    /// the top level's, but for those it starts cleared: event-fork,
    /// function-fork and trace_printk_dest (trace.c's ZEROED_TRACE_FLAGS),
    /// and copy_trace_marker, which 6.17 added to them.
    pub(crate) fn inherit_options(&self, top: &TraceArray) {
        const ZEROED: [&str; 4] = [
            "event-fork",
            "function-fork",
            "trace_printk_dest",
            "copy_trace_marker",
        ];
        let from = top.options.lock_ok().clone();
        let mut o = self.options.lock_ok();
        for (i, (name, _)) in OPTIONS.iter().enumerate() {
            o[i] = from[i] && !ZEROED.contains(name);
        }
        let on = |n: &str| OPTIONS.iter().position(|x| x.0 == n).is_some_and(|i| o[i]);
        self.irq_info.store(on("irq-info"), Ordering::Relaxed);
        self.stacktrace.store(on("stacktrace"), Ordering::Relaxed);
        self.record_cmd.store(on("record-cmd"), Ordering::Relaxed);
        self.record_tgid.store(on("record-tgid"), Ordering::Relaxed);
        self.overwrite.store(on("overwrite"), Ordering::Relaxed);
        self.event_fork.store(false, Ordering::Relaxed);
    }

    /// `set_event_pid` and `set_event_notrace_pid`, each with its
    /// "not empty" flag.
    pub(crate) fn pid_lists(&self) -> [(&RwLock<BTreeSet<u32>>, &AtomicBool); 2] {
        [
            (&self.event_pids, &self.has_event_pids),
            (&self.notrace_pids, &self.has_notrace_pids),
        ]
    }

    /// Whether this is the top level.
    pub fn is_top(&self) -> bool {
        self.name.is_none()
    }

    /// Where the array's files are: `tracing` or `tracing/instances/NAME`.
    pub fn base(&self) -> String {
        match &self.name {
            None => "tracing".into(),
            Some(n) => format!("tracing/instances/{n}"),
        }
    }

    /// The CPU an entry recorded now goes to: the one this thread runs on
    /// (for a request, the CPU the kernel woke the daemon's thread on, which
    /// is the caller's as a rule), folded into the buffers there are.
    pub(crate) fn cpu_now(&self) -> u32 {
        current_cpu() % self.bufs.len() as u32
    }

    /// The CPU whose buffer gets what thread `tid` writes in a request: the
    /// one it made the request on, as the kernel records on the writer's
    /// CPU (or [`TraceArray::cpu_now`] if the thread is gone).
    pub(crate) fn cpu_of_writer(&self, tid: u32) -> u32 {
        self.cpu_or_now(crate::base::procmem::cpu_of(tid))
    }

    /// `cpu` folded into the buffers there are, or [`TraceArray::cpu_now`].
    pub(crate) fn cpu_or_now(&self, cpu: Option<u32>) -> u32 {
        match cpu {
            Some(c) => c % self.bufs.len() as u32,
            None => self.cpu_now(),
        }
    }

    /// Put an entry in CPU `cpu`'s buffer, stamped on the trace clock from
    /// its CLOCK_MONOTONIC time `mono`, and wake the readers.
    /// Returns whether it was stored.
    pub(crate) fn store(
        &self,
        def: Arc<EventDef>,
        data: Vec<u8>,
        comm: &str,
        cpu: u32,
        mono: u64,
    ) -> bool {
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
                return false;
            }
        }
        self.wake();
        true
    }

    /// Wake the blocked readers (they recheck).
    pub(crate) fn wake(&self) {
        if self.pipe_readers.load(Ordering::Relaxed) > 0 {
            let ws: Vec<Waker> = self.wakers.lock_ok().iter().map(|w| w.1.clone()).collect();
            for w in ws {
                w();
            }
        }
    }

    /// The buffer grows to its full default size the first time tracing is
    /// set up (the kernel's `tracing_update_buffers`).
    pub(crate) fn expand(&self) {
        if !self.expanded.swap(true, Ordering::SeqCst) {
            for buf in &self.bufs {
                buf.lock_ok().resize_bytes(DEFAULT_BUF_BYTES);
            }
        }
    }

    /// Lock every CPU's buffer, in CPU order.
    pub(crate) fn lock_all(&self) -> Vec<MutexGuard<'_, CpuBuffer>> {
        self.bufs.iter().map(|b| b.lock_ok()).collect()
    }

    /// Lock every CPU's snapshot buffer, in CPU order (after the live
    /// ones, when both are locked).
    pub(crate) fn lock_spare(&self) -> Vec<MutexGuard<'_, CpuBuffer>> {
        self.spare.iter().map(|b| b.lock_ok()).collect()
    }

    /// Whether the snapshot buffer is allocated.
    pub fn snapshot_allocated(&self) -> bool {
        self.snap_allocated.load(Ordering::SeqCst)
    }

    /// Resize the snapshot buffer of `cpu` (or every CPU) to `bytes` when
    /// it is allocated: it follows the live buffer's size, as the
    /// kernel's `__tracing_resize_ring_buffer` resizes both.
    pub(crate) fn resize_spare(&self, cpu: Option<usize>, bytes: usize) {
        let mut spare = self.lock_spare();
        if !self.snapshot_allocated() {
            return;
        }
        for (i, b) in spare.iter_mut().enumerate() {
            if cpu.is_none_or(|c| c == i) {
                b.resize_bytes(bytes);
            }
        }
        drop(spare);
        // Smaller only (`free_buffer`): this cannot be refused.
        let _ = self.charge_current();
    }

    /// Empty every buffer (`echo > trace`, a new trace clock).
    pub(crate) fn clear_all(&self) {
        for mut b in self.lock_all() {
            b.clear();
        }
        // A new clock starts from its own values.
        self.newest_ts.store(0, Ordering::SeqCst);
    }

    /// Empty the live buffers as [`TraceArray::clear_all`] does, and the
    /// snapshot buffers as writing `2` to `snapshot` does (the kernel's
    /// `tracing_reset_all_online_cpus` resets `array_buffer` and
    /// `max_buffer`).
    pub(crate) fn clear_live_and_snapshot(&self) {
        self.clear_all();
        for mut s in self.lock_spare() {
            s.clear();
        }
    }

    /// The sub-buffer size in KiB (`buffer_subbuf_size_kb`).
    pub fn subbuf_kb(&self) -> usize {
        (ring::PAGE_SIZE << self.subbuf_order.load(Ordering::Relaxed)) / 1024
    }

    /// Usable bytes of a sub-buffer (`events/header_page`'s `data` size).
    pub fn subbuf_capacity(&self) -> usize {
        ring::subbuf_capacity(self.subbuf_order.load(Ordering::Relaxed))
    }

    /// A write to `buffer_subbuf_size_kb`: a size in KiB, rounded up to a
    /// power-of-two number of pages, 1 to 128 of them (EINVAL otherwise,
    /// `0` included), as the kernel's `buffer_subbuf_size_write`. A new
    /// size replaces every CPU's pages (see [`CpuBuffer::set_capacity`]).
    pub(crate) fn set_subbuf_kb(&self, data: &[u8]) -> crate::base::errno::SysResult<u32> {
        let order = subbuf_order_for(crate::tracefs::parse::kstrtoul_from_user(data)?)
            .ok_or(crate::base::errno::Errno::EINVAL)?;
        let cap = ring::subbuf_capacity(order);
        // ring_buffer_subbuf_order_set: the same order is no change; another
        // is refused while a CPU's buffer is mapped.
        if self.subbuf_order.load(Ordering::SeqCst) != order && self.any_mapped() {
            return Err(crate::base::errno::Errno::EBUSY);
        }
        let mut guards = self.lock_all();
        let mut spare = self.lock_spare();
        if self.subbuf_order.load(Ordering::SeqCst) != order {
            // The snapshot buffer, when allocated, changes with it. The new
            // pages are charged first: ENOMEM changes nothing.
            let snap = self.snapshot_allocated();
            let total = self.rings_cost(
                guards.iter().map(|b| b.shape_with_capacity(cap)),
                spare.iter().map(|b| {
                    if snap {
                        b.shape_with_capacity(cap)
                    } else {
                        b.shape()
                    }
                }),
            );
            self.charge_rings(total)?;
            self.subbuf_order.store(order, Ordering::SeqCst);
            for b in guards.iter_mut() {
                b.set_capacity(cap);
            }
            if snap {
                for b in spare.iter_mut() {
                    b.set_capacity(cap);
                }
            }
        }
        Ok(data.len() as u32)
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
        self.text_of(&self.lock_all(), cpu, None)
    }

    /// The `trace` text of the buffers `guards` (every CPU's, live or
    /// snapshot), for all CPUs or `cpu`. When the chosen buffers hold no
    /// entry and `empty_help` is given, the header is `# tracer: nop` and
    /// that help instead of the column header (the `snapshot` file's).
    pub(crate) fn text_of(
        &self,
        guards: &[MutexGuard<'_, CpuBuffer>],
        cpu: Option<usize>,
        empty_help: Option<&str>,
    ) -> String {
        let irq = self.irq_info.load(Ordering::Relaxed);
        let in_ns = self.trace_clock.in_ns();
        let bufs: Vec<&CpuBuffer> = match cpu {
            Some(c) => vec![&*guards[c]],
            None => guards.iter().map(|g| &**g).collect(),
        };
        if let Some(help) = empty_help {
            if bufs.iter().all(|b| b.is_empty()) {
                return format!("# tracer: nop\n#\n{help}");
            }
        }
        let (n, w) = guards
            .iter()
            .fold((0, 0), |(n, w), b| (n + b.len(), w + b.written()));
        let mut s = ring::header(n, w, self.bufs.len(), irq);
        for e in ring::merged(&bufs) {
            s.push_str(&e.line(irq, in_ns));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subbuf_sizes_round_as_the_kernels() {
        // Measured on 6.18 (the same rules as 6.12): the size read back
        // after writing each value, or EINVAL.
        for (kb, want) in [
            (1, Some(0)),
            (3, Some(0)),
            (4, Some(0)),
            (5, Some(1)),
            (9, Some(2)),
            (16, Some(2)),
            (17, Some(3)),
            (512, Some(7)),
            (0, None),
            (513, None),
            (1024, None),
            (99_999_999_999_999_999, None),
        ] {
            assert_eq!(subbuf_order_for(kb), want, "{kb}");
        }
    }
}
