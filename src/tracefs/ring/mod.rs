//! The trace buffer, as the kernel's `kernel/trace/ring_buffer.c` lays it
//! out: one buffer per CPU, each a list of sub-buffer pages (4 KiB by
//! default, up to 512 KiB with `buffer_subbuf_size_kb`: a 16-byte page
//! header, then the events). Each page is one block of the sub-buffer's
//! size holding the kernel's bytes (`page.rs`: 4-byte event headers, a
//! length word for entries over 112 bytes, an 8-byte time extend before an
//! entry more than 2^27 clock units after the previous one), so pages
//! fill, overwrite and serialise for `trace_pipe_raw` exactly where the
//! kernel's would, and a page costs its size whatever its entries. The
//! text views (`trace`, `trace_pipe`) decode entries from the bytes: the
//! event definition by `common_type` and the task name by pid from the
//! buffer's tables (as the kernel's `saved_cmdlines`: `<...>` for a pid
//! whose name was evicted), the CPU from the buffer.
//!
//! `trace_pipe_raw` pages are what `events/header_page` and
//! `events/header_event` describe: `u64 timestamp` (the first event's time),
//! `local_t commit` (bytes of events, with the missed-events flags in bits 31
//! and 30), then the events, each a `type_len:5, time_delta:27` word.
//!
//! A buffer can also be memory mapped (`mmap` of `trace_pipe_raw`, Linux
//! 6.10 on, `ring_buffer_map` and `ring_buffer_map_get_reader` in
//! ring_buffer.c, `struct trace_buffer_meta` in
//! include/uapi/linux/trace_mmap.h): a meta page, then every sub-buffer by
//! id, the reader sub-buffer among them. [`Mapped`] keeps what a mapping
//! shows: the sub-buffer ids in ring order and the reader sub-buffer's bytes.

pub(crate) mod files;

mod mmap;
mod page;
pub(crate) mod per_cpu;
pub mod snapshot;
pub mod trace_clock;

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::Arc;

use crate::base::budget::{Grant, MEMORY};
use crate::tracefs::events::EventDef;
pub use page::PAGE_HDR;
use page::{cost_of, fill, Page};

/// Bytes of a system page: the smallest sub-buffer.
pub const PAGE_SIZE: usize = 4096;
/// The largest sub-buffer order `buffer_subbuf_size_kb` takes: 128 pages.
pub const MAX_SUBBUF_ORDER: u32 = 7;
/// Usable bytes of a default ring-buffer page (a 4 KiB sub-buffer minus its
/// header).
pub const BUF_PAGE_SIZE: usize = PAGE_SIZE - PAGE_HDR;
/// The kernel's default per-CPU buffer request (`trace_buf_size`), bytes.
pub const DEFAULT_BUF_BYTES: usize = 1_441_792;
/// The largest entry (common header and fields) a page holds: the page less
/// an event header with its length word (the kernel's `max_data_size`).
/// 6.12 sets it when the buffer is made, with 4 KiB sub-buffers, and does
/// not change it with the sub-buffer size: with 8 KiB sub-buffers
/// `trace_marker` still cuts writes at 4054 bytes and `trace_marker_raw`
/// still refuses more than 4064 (measured on 6.18, which does the same).
pub const MAX_ENTRY: usize = BUF_PAGE_SIZE - 8;

/// Usable bytes of a sub-buffer of `order` (2^order pages).
pub fn subbuf_capacity(order: u32) -> usize {
    (PAGE_SIZE << order) - PAGE_HDR
}
/// `commit` flag: events were lost before this page.
pub const MISSED_EVENTS: u64 = 1 << 31;
/// `commit` flag: the count of lost events follows the data.
pub const MISSED_STORED: u64 = 1 << 30;

/// One recorded event.
pub struct Entry {
    /// The event definition (for rendering).
    pub def: Arc<EventDef>,
    /// The raw entry: common header and fields.
    pub data: Box<[u8]>,
    /// The time in the units of the trace clock it was recorded with.
    pub ts: u64,
    /// CPU that recorded it.
    pub cpu: u32,
    /// Task name.
    pub comm: Comm,
}

/// A task name kept inline in its entry (no allocation of its own): up to
/// 16 bytes, cut at a character boundary (the kernel's names have 15 at
/// most, `TASK_COMM_LEN` less the NUL).
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub struct Comm {
    len: u8,
    buf: [u8; 16],
}

impl From<&str> for Comm {
    fn from(s: &str) -> Comm {
        let mut end = s.len().min(16);
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        let mut buf = [0u8; 16];
        buf[..end].copy_from_slice(&s.as_bytes()[..end]);
        Comm {
            len: end as u8,
            buf,
        }
    }
}

impl std::ops::Deref for Comm {
    type Target = str;
    fn deref(&self) -> &str {
        // Only whole characters of a str are ever stored.
        std::str::from_utf8(&self.buf[..self.len as usize]).unwrap_or("")
    }
}

impl std::fmt::Display for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self)
    }
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self, f)
    }
}

/// Bytes of the allocator's chunk for a block of `n` bytes (glibc's
/// malloc on 64 bits: 8 bytes of header, 16-byte granules, 32 at least;
/// blocks of 128 KiB and more are mappings of whole pages).
fn heap_chunk(n: usize) -> usize {
    if n >= 128 * 1024 {
        (n + 16).div_ceil(PAGE_SIZE) * PAGE_SIZE
    } else {
        ((n + 8).div_ceil(16) * 16).max(32)
    }
}

/// Task names a CPU buffer keeps for its entries' pids (see
/// `CpuBuffer::comm_of`); an entry of a pid whose name was evicted
/// prints `<...>`, as the kernel's does when `saved_cmdlines` lost it.
pub const COMM_SLOTS: usize = 1024;

/// Bytes of a buffer's tables, at most: [`COMM_SLOTS`] names (a hash
/// table of twice as many buckets of a pid, a name and a control byte,
/// and their order) and the empty table of event definitions. The
/// definitions its entries name are charged as they come and go (see
/// [`TypeDefs::cost`]).
const TABLES_MEM: usize =
    2 * COMM_SLOTS * (4 + std::mem::size_of::<Comm>() + 4) + 2 * COMM_SLOTS * 4 + 4096;

/// Bytes of memory one page of `capacity` usable bytes takes in the
/// daemon: its block of the sub-buffer's size (made once, as the kernel's)
/// and its [`Page`] (twice, for the page list's growth).
fn page_mem(capacity: usize) -> usize {
    heap_chunk(capacity + PAGE_HDR) + 2 * std::mem::size_of::<Page>()
}

/// Bytes counted for a buffer of `nr_pages` sub-buffers of `capacity`
/// usable bytes, against [`crate::base::budget::MEMORY`]: each page's
/// block, the buffer's tables of names and event definitions, and a
/// mapping's reader sub-buffer and sub-buffer ids (`Mapped`).
/// `tests/ring_memory.rs` checks it against the allocator's chunks for
/// every entry size.
pub fn mem_cost(nr_pages: usize, capacity: usize) -> usize {
    nr_pages
        .saturating_mul(page_mem(capacity))
        .saturating_add(TABLES_MEM)
        .saturating_add(heap_chunk(capacity + PAGE_HDR))
        .saturating_add(nr_pages.saturating_mul(2 * std::mem::size_of::<u32>()))
}

/// Pages a buffer of `capacity`-byte pages has when sized for `bytes`
/// (at least 2), as [`CpuBuffer::resize_bytes`] makes it.
pub fn pages_for(bytes: usize, capacity: usize) -> usize {
    bytes.div_ceil(capacity).max(2)
}

impl Entry {
    /// Bytes the entry takes in a page: a 4-byte event header plus the
    /// data rounded up to 4, plus a length word for entries over 112 bytes.
    pub fn cost(&self) -> usize {
        cost_of(self.data.len())
    }

    /// The trace line, newline included. `in_ns` says whether the trace
    /// clock counts nanoseconds (printed as seconds.microseconds) or
    /// something else (printed as a raw count), as `trace_print_time` does.
    pub fn line(&self, irq_info: bool, in_ns: bool) -> String {
        let mut s = String::with_capacity(128);
        let pid = i32::from_le_bytes(self.data[4..8].try_into().unwrap());
        let comm: &str = if pid == 0 { "<idle>" } else { &self.comm };
        let _ = write!(s, "{comm:>16}-{pid:<7} [{:03}] ", self.cpu);
        if irq_info {
            s.push_str(&flags(self.data[2], self.data[3]));
        }
        push_time(&mut s, self.ts, in_ns);
        s.push_str(": ");
        self.def.render_entry(&self.data, &mut s);
        s
    }
}

/// `" %5lu.%06lu"` of a nanosecond time rounded to the nearest microsecond
/// (the kernel's `ns2usecs`), or `" %12llu"` of a raw count.
pub fn push_time(s: &mut String, ts: u64, in_ns: bool) {
    if in_ns {
        let us = ts.saturating_add(500) / 1000;
        let _ = write!(s, " {:5}.{:06}", us / 1_000_000, us % 1_000_000);
    } else {
        let _ = write!(s, " {ts:12}");
    }
}

/// The five flag columns from `common_flags` and `common_preempt_count`.
fn flags(f: u8, pc: u8) -> String {
    const IRQS_OFF: u8 = 0x01;
    const NEED_RESCHED: u8 = 0x04;
    const HARDIRQ: u8 = 0x08;
    const SOFTIRQ: u8 = 0x10;
    const PREEMPT_RESCHED: u8 = 0x20;
    const NMI: u8 = 0x40;
    const BH_OFF: u8 = 0x80;
    let irq = match (f & IRQS_OFF != 0, f & BH_OFF != 0) {
        (true, true) => 'D',
        (true, false) => 'd',
        (false, true) => 'b',
        _ => '.',
    };
    let resched = match (f & NEED_RESCHED != 0, f & PREEMPT_RESCHED != 0) {
        (true, true) => 'N',
        (true, false) => 'n',
        (false, true) => 'p',
        _ => '.',
    };
    let ctx = match (f & NMI != 0, f & HARDIRQ != 0, f & SOFTIRQ != 0) {
        (true, true, _) => 'Z',
        (true, false, _) => 'z',
        (false, true, true) => 'H',
        (false, true, false) => 'h',
        (false, false, true) => 's',
        _ => '.',
    };
    let hex = |n: u8| {
        if n == 0 {
            '.'
        } else {
            char::from_digit(n as u32, 16).unwrap()
        }
    };
    format!("{irq}{resched}{ctx}{}{}", hex(pc & 0xf), hex(pc >> 4))
}

/// An event definition of a type, from where its first entry went
/// (page sequence number, offset in the page) on.
struct DefSince {
    at: (u64, usize),
    def: Arc<EventDef>,
}

/// One type's definitions in a buffer (oldest first), the page of its
/// newest entry, and the memory they are charged as against
/// [`crate::base::budget::MEMORY`], to the account of the writer that
/// brought the type into the buffer.
struct TypeDefs {
    v: Vec<DefSince>,
    newest: u64,
    mem: Grant,
}

impl TypeDefs {
    /// Bytes a type with `cap` definitions' room takes: the list's block
    /// and the type's share of the hash table (its bucket, twice for the
    /// table's growth, and a control byte). The definitions themselves
    /// are the events' (shared, not counted here).
    fn cost(cap: usize) -> usize {
        let list = if cap == 0 {
            0
        } else {
            heap_chunk(cap * std::mem::size_of::<DefSince>())
        };
        list + 2 * (std::mem::size_of::<(u16, TypeDefs)>() + 1)
    }

    /// The room the list has after one more push (a `Vec`'s growth: 4 at
    /// first, then twice as much).
    fn cap_after_push(&self) -> usize {
        let (len, cap) = (self.v.len(), self.v.capacity());
        if len < cap {
            cap
        } else {
            (cap * 2).max(4)
        }
    }

    /// Let go of the definitions no entry from page `oldest` on uses, and
    /// of the list's spare room past twice what is left, and charge what
    /// is kept (a smaller charge never fails).
    fn prune(&mut self, oldest: u64) {
        prune_defs(&mut self.v, oldest);
        if self.v.capacity() > 2 * self.v.len().max(4) {
            self.v.shrink_to(self.v.len().max(4));
        }
        let cost = TypeDefs::cost(self.v.capacity());
        if cost != self.mem.size() {
            let _ = self.mem.resize(cost);
        }
    }
}

/// An entry's `common_type` and `common_pid` (0 where the entry is too
/// short to hold them).
fn type_and_pid(data: &[u8]) -> (u16, u32) {
    let id = data
        .get(0..2)
        .map_or(0, |b| u16::from_le_bytes([b[0], b[1]]));
    let pid = data
        .get(4..8)
        .map_or(0, |b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
    (id, pid)
}

/// Let go of a type's definitions that no entry from page `oldest` on
/// uses: a definition is needed while its successor starts after the
/// start of that page.
fn prune_defs(v: &mut Vec<DefSince>, oldest: u64) {
    let keep = v.iter().rposition(|d| d.at <= (oldest, 0)).unwrap_or(0);
    v.drain(..keep);
}

/// Counters of one CPU's buffer (`per_cpu/cpuN/stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Entries in the buffer.
    pub entries: usize,
    /// Entries lost to overwriting.
    pub overrun: u64,
    /// Bytes of unread entries.
    pub bytes: usize,
    /// Time of the oldest entry (0 when empty).
    pub oldest_ts: u64,
    /// Entries refused because the buffer was full and `overwrite` off.
    pub dropped: u64,
    /// Entries consumed by `trace_pipe` and `trace_pipe_raw`.
    pub read: u64,
}

/// One CPU's buffer: a list of pages, the last one being written.
pub struct CpuBuffer {
    pages: VecDeque<Page>,
    nr_pages: usize,
    /// Usable bytes of each page (the sub-buffer less its header).
    capacity: usize,
    /// The size `buffer_size_kb` shows, in bytes: pages times capacity
    /// when last resized (a new sub-buffer size leaves it as it was, as the
    /// kernel's `entries` of the array buffer).
    size: usize,
    entries: usize,
    /// Entries and bytes the counters still count after a sub-buffer size
    /// change dropped the pages that held them (the kernel swaps in new
    /// pages without resetting its counters: `trace` then reads
    /// `entries-in-buffer/entries-written: 2/2` over no lines, and `stats`
    /// keeps the old `entries` and `bytes`, as measured).
    stale: usize,
    stale_bytes: usize,
    overrun: u64,
    /// Entries overwritten since the last consuming read (reported as
    /// `[LOST N EVENTS]` and in a raw page's missed-events count).
    lost_unread: u64,
    dropped: u64,
    read: u64,
    last_ts: u64,
    /// The number the next new page gets.
    next_seq: u64,
    /// The mapping's state while the buffer is mapped.
    map: Option<Mapped>,
    /// The event definitions of the entries' `common_type`s: for each
    /// type, the definitions it had while entries were written, each with
    /// where its first entry went (page, offset), oldest first. A type
    /// whose entries are all gone is let go.
    defs: HashMap<u16, TypeDefs>,
    /// The entries' task names by pid, at most [`COMM_SLOTS`], oldest
    /// first in `comm_order`.
    comms: HashMap<u32, Comm>,
    comm_order: VecDeque<u32>,
    /// The block of the last page overwritten, for the next new page.
    spare: Option<Box<[u8]>>,
    /// The CPU whose entries it holds.
    cpu: u32,
}

/// `sizeof(struct trace_buffer_meta)`: the meta page's `meta_struct_len`.
pub const META_STRUCT_LEN: usize = 80;

/// `TRACE_MMAP_IOCTL_GET_READER`, `_IO('R', 0x20)`.
pub const GET_READER: u32 = 0x5220;

/// What a mapping of a buffer shows beyond the counters: the kernel's
/// sub-buffer ids (the reader's, and the ring's from the head page on) and
/// the reader sub-buffer. While mapped, `pages[i]` of the buffer is the
/// ring's sub-buffer `ring[i]`, but when the reader sub-buffer is the page
/// the writer is still on (`attached`): then `pages[0]` is the reader and
/// `pages[i]` is `ring[i - 1]`.
pub struct Mapped {
    reader_id: u32,
    ring: VecDeque<u32>,
    /// The reader sub-buffer's bytes, header included.
    page: Vec<u8>,
    /// Bytes of events on it, and the flags of its `commit`.
    commit: usize,
    flags: u64,
    /// `reader.read`: bytes of it consumed.
    read: usize,
    /// Time of the newest event on it.
    last_ts: u64,
    /// The page of the buffer it is while the writer still writes on it.
    attached: Option<u64>,
}

impl CpuBuffer {
    /// A buffer of `nr_pages` pages (at least 2, as the kernel's).
    pub fn new(nr_pages: usize) -> CpuBuffer {
        CpuBuffer::with_capacity(nr_pages, BUF_PAGE_SIZE)
    }

    /// A buffer of `nr_pages` pages of `capacity` usable bytes each.
    pub fn with_capacity(nr_pages: usize, capacity: usize) -> CpuBuffer {
        let nr_pages = nr_pages.max(2);
        CpuBuffer {
            pages: VecDeque::new(),
            nr_pages,
            capacity,
            size: nr_pages * capacity,
            entries: 0,
            stale: 0,
            stale_bytes: 0,
            overrun: 0,
            lost_unread: 0,
            dropped: 0,
            read: 0,
            last_ts: 0,
            next_seq: 0,
            map: None,
            defs: HashMap::new(),
            comms: HashMap::new(),
            comm_order: VecDeque::new(),
            spare: None,
            cpu: 0,
        }
    }

    /// Pages of data the buffer holds.
    pub fn nr_pages(&self) -> usize {
        self.nr_pages
    }

    /// Usable bytes of one page.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes of one sub-buffer page as `trace_pipe_raw` returns it.
    pub fn page_size(&self) -> usize {
        self.capacity + PAGE_HDR
    }

    /// The size `buffer_size_kb` shows, in bytes.
    pub fn size_bytes(&self) -> usize {
        self.size
    }

    /// Change the sub-buffer's usable bytes to `capacity`, as the kernel's
    /// `ring_buffer_subbuf_order_set`: the pages are replaced by as many
    /// new ones as hold the same bytes (at least 2), empty; the counters
    /// are kept, so entries that were in the buffer are still counted.
    pub fn set_capacity(&mut self, capacity: usize) {
        if capacity == self.capacity {
            return;
        }
        // Refused while mapped (EBUSY, see `TraceArray::any_mapped`); a
        // mapping made later starts afresh.
        self.map = None;
        let (nr, _) = self.shape_with_capacity(capacity);
        self.stale += self.entries;
        self.stale_bytes += self.pages.iter().map(Page::unread_bytes).sum::<usize>();
        self.entries = 0;
        self.pages.clear();
        self.spare = None;
        self.nr_pages = nr;
        self.capacity = capacity;
    }

    /// The time of the newest entry: later entries never go below it.
    pub fn last_ts(&self) -> u64 {
        self.last_ts
    }

    /// Append `e`. When the pages are full the oldest page is overwritten,
    /// or, with `overwrite` off, the entry is dropped. Returns whether it
    /// was stored. An entry larger than [`MAX_ENTRY`] is never stored.
    pub fn push(&mut self, e: Entry, overwrite: bool) -> bool {
        if e.data.len() > MAX_ENTRY {
            return false;
        }
        if self.charge_def(&e).is_err() {
            // The definitions table would pass the memory budget.
            self.dropped += 1;
            return false;
        }
        let ts = e.ts.max(self.last_ts);
        let cost = e.cost();
        let fits = self
            .pages
            .back()
            .is_some_and(|p| p.used + p.need(cost, ts) <= self.capacity);
        if !fits {
            if self.pages.len() >= self.nr_pages {
                if !overwrite {
                    self.dropped += 1;
                    // A type `charge_def` made for this entry goes again.
                    let (id, _) = type_and_pid(&e.data);
                    if self.defs.get(&id).is_some_and(|t| t.v.is_empty()) {
                        self.defs.remove(&id);
                    }
                    return false;
                }
                self.drop_oldest_page();
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            let size = self.page_size();
            self.pages
                .push_back(Page::new(seq, size, self.spare.take()));
        }
        self.cpu = e.cpu;
        let p = self.pages.back().expect("a writer page");
        let at = (p.seq, page::PAGE_HDR + p.used);
        self.remember(&e, at);
        let p = self.pages.back_mut().expect("a writer page");
        p.write(&e.data, ts);
        self.last_ts = ts;
        self.entries += 1;
        true
    }

    /// Charge the room [`CpuBuffer::remember`] will take for `e`'s
    /// definition when it is new to the buffer (its type new, or its
    /// definition changed); ENOMEM, nothing charged, past the budget.
    fn charge_def(&mut self, e: &Entry) -> crate::base::errno::SysResult<()> {
        let (id, _) = type_and_pid(&e.data);
        match self.defs.get_mut(&id) {
            Some(t) if t.v.last().is_some_and(|d| Arc::ptr_eq(&d.def, &e.def)) => Ok(()),
            Some(t) => {
                let cost = TypeDefs::cost(t.cap_after_push());
                t.mem.resize(cost.max(t.mem.size()))
            }
            None => {
                let mem = MEMORY.take(TypeDefs::cost(4))?;
                // `newest` no older than the page the entry goes to, so
                // that a page this push overwrites does not take it.
                self.defs.insert(
                    id,
                    TypeDefs {
                        v: Vec::new(),
                        newest: self.next_seq,
                        mem,
                    },
                );
                Ok(())
            }
        }
    }

    /// Bytes charged for the definitions table now.
    #[cfg(test)]
    fn defs_charged(&self) -> usize {
        self.defs.values().map(|t| t.mem.size()).sum()
    }

    /// Bytes the definitions table takes on the heap now, from its real
    /// capacities: the hash table's buckets and control bytes and each
    /// type's list.
    #[cfg(test)]
    fn defs_heap(&self) -> usize {
        let buckets = if self.defs.capacity() == 0 {
            0
        } else {
            (self.defs.capacity() * 8 / 7).next_power_of_two()
        };
        let table = if buckets == 0 {
            0
        } else {
            heap_chunk(buckets * (std::mem::size_of::<(u16, TypeDefs)>() + 1) + 16)
        };
        table
            + self
                .defs
                .values()
                .map(|t| heap_chunk(t.v.capacity() * std::mem::size_of::<DefSince>()))
                .sum::<usize>()
    }

    /// Keep what reading `e` back from its bytes needs, once it is to be
    /// written at `at` (page, offset): its event definition by
    /// `common_type` (a new one when the type's definition changed, a
    /// dynamic event removed and another made with its id, so that the
    /// entries written before still read with theirs) and its task name by
    /// pid. Definitions no entry left uses are let go.
    fn remember(&mut self, e: &Entry, at: (u64, usize)) {
        let (id, pid) = type_and_pid(&e.data);
        let oldest = self.pages.front().map_or(at.0, |p| p.seq);
        // `charge_def` made the type's entry.
        if let Some(t) = self.defs.get_mut(&id) {
            t.newest = at.0;
            if !t.v.last().is_some_and(|d| Arc::ptr_eq(&d.def, &e.def)) {
                t.v.push(DefSince {
                    at,
                    def: e.def.clone(),
                });
                t.prune(oldest);
            }
        }
        if pid == 0 {
            return;
        }
        match self.comms.get_mut(&pid) {
            Some(c) => *c = e.comm,
            None => {
                if self.comm_order.len() >= COMM_SLOTS {
                    if let Some(old) = self.comm_order.pop_front() {
                        self.comms.remove(&old);
                    }
                }
                self.comm_order.push_back(pid);
                self.comms.insert(pid, e.comm);
            }
        }
    }

    /// The task name of `pid`'s entries: `<...>` when it was evicted.
    fn comm_of(&self, pid: u32) -> Comm {
        self.comms
            .get(&pid)
            .copied()
            .unwrap_or_else(|| Comm::from("<...>"))
    }

    /// The entry `e` of page `p`, decoded.
    fn decode(&self, p: &Page, e: &page::Event) -> Option<Entry> {
        let data = p.data(e);
        let (id, pid) = type_and_pid(data);
        let at = (p.seq, e.at);
        let def = self
            .defs
            .get(&id)?
            .v
            .iter()
            .rev()
            .find(|d| d.at <= at)?
            .def
            .clone();
        Some(Entry {
            def,
            data: data.into(),
            ts: e.ts,
            cpu: self.cpu,
            comm: self.comm_of(pid),
        })
    }

    /// Take the oldest page out of the list. While mapped, the ring's ids
    /// follow: the head page's id goes to the ring's end (it is where the
    /// writer will come back to), unless the page was the reader's.
    fn remove_front(&mut self) -> Option<Page> {
        let p = self.pages.pop_front()?;
        if let Some(m) = self.map.as_mut() {
            m.page_removed(p.seq);
        }
        let oldest = self.pages.front().map_or(self.next_seq, |p| p.seq);
        // A type none of whose entries is left goes, with its charge.
        self.defs.retain(|_, t| t.newest >= oldest);
        for t in self.defs.values_mut() {
            t.prune(oldest);
        }
        Some(p)
    }

    fn drop_oldest_page(&mut self) {
        if let Some(old) = self.remove_front() {
            let n = old.unread as u64;
            self.entries -= old.unread;
            self.overrun += n;
            self.lost_unread += n;
            self.spare = Some(old.buf);
        }
    }

    /// Change the size to hold `bytes` of events (whole pages, at least
    /// 2), as the kernel's `ring_buffer_resize`.
    pub fn resize_bytes(&mut self, bytes: usize) {
        self.resize(pages_for(bytes, self.capacity));
    }

    /// The shape [`CpuBuffer::set_capacity`] with `capacity` would give.
    pub fn shape_with_capacity(&self, capacity: usize) -> (usize, usize) {
        if capacity == self.capacity {
            return self.shape();
        }
        let nr = (self.capacity * self.nr_pages).div_ceil(capacity).max(2);
        (nr, capacity)
    }

    /// The pages and their usable bytes: what [`mem_cost`] counts.
    pub fn shape(&self) -> (usize, usize) {
        (self.nr_pages, self.capacity)
    }

    /// Change the size, overwriting the oldest pages that no longer fit.
    pub fn resize(&mut self, nr_pages: usize) {
        self.nr_pages = nr_pages.max(2);
        self.size = self.nr_pages * self.capacity;
        while self.pages.len() > self.nr_pages {
            self.drop_oldest_page();
        }
        self.spare = None;
    }

    /// Entries in the buffer as the counters count them (entries a new
    /// sub-buffer size dropped included).
    pub fn len(&self) -> usize {
        self.entries + self.stale
    }

    /// Whether the buffer holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    /// Entries lost to overwriting since the last clear.
    pub fn overrun(&self) -> u64 {
        self.overrun
    }

    /// Entries ever written and not cleared: in the buffer plus overwritten.
    pub fn written(&self) -> u64 {
        self.len() as u64 + self.overrun
    }

    /// The oldest entry, without consuming it.
    pub fn peek(&self) -> Option<Entry> {
        self.pages
            .iter()
            .find_map(|p| p.front().map(|e| (p, e)))
            .and_then(|(p, e)| self.decode(p, &e))
    }

    /// The time of the oldest entry.
    pub fn peek_ts(&self) -> Option<u64> {
        self.pages.iter().find_map(|p| p.front().map(|e| e.ts))
    }

    /// Iterate oldest first, each entry decoded from its page.
    pub fn iter(&self) -> impl Iterator<Item = Entry> + '_ {
        self.pages
            .iter()
            .flat_map(move |p| p.events().filter_map(move |e| self.decode(p, &e)))
    }

    /// Entries overwritten since the last consuming read, reset to 0.
    pub fn take_lost(&mut self) -> u64 {
        std::mem::take(&mut self.lost_unread)
    }

    /// Give back a count taken with [`CpuBuffer::take_lost`] that could not
    /// be reported yet.
    pub fn restore_lost(&mut self, n: u64) {
        self.lost_unread += n;
    }

    /// Consume the oldest entry (`trace_pipe`). A page emptied by the reader
    /// is freed unless the writer is still on it.
    pub fn pop(&mut self) -> Option<Entry> {
        loop {
            let writer = self.pages.len() == 1;
            let p = self.pages.front()?;
            if let Some(ev) = p.front() {
                let e = self.decode(p, &ev);
                let p = self.pages.front_mut().expect("a page");
                p.consume(&ev);
                if p.unread == 0 && !writer {
                    self.remove_front();
                }
                self.entries -= 1;
                self.read += 1;
                if e.is_some() {
                    return e;
                }
                continue;
            }
            if writer {
                return None;
            }
            self.remove_front();
        }
    }

    /// Consume the oldest page as `trace_pipe_raw` returns it: a
    /// sub-buffer page ([`CpuBuffer::page_size`] bytes) holding the unread entries of the oldest page that
    /// fit in `len` bytes (a short read takes fewer), with deltas from the
    /// first one, zeros after the data, and the missed-events flags and count
    /// when entries were overwritten since the last read. `None` when there
    /// is nothing to read or `len` cannot hold a page header and an entry.
    pub fn read_page(&mut self, len: usize) -> Option<Vec<u8>> {
        if len <= PAGE_HDR {
            return None;
        }
        let room = (len - PAGE_HDR).min(self.capacity);
        let page_size = self.page_size();
        while self
            .pages
            .front()
            .is_some_and(|p| p.unread == 0 && self.pages.len() > 1)
        {
            self.remove_front();
        }
        let writer = self.pages.len() == 1;
        let p = self.pages.front_mut()?;
        let first_ts = p.front()?.ts;
        let mut out = vec![0u8; page_size];
        let (off, _, taken) = fill(&mut out, PAGE_HDR, first_ts, PAGE_HDR + room, p);
        if taken == 0 {
            return None;
        }
        if p.unread == 0 && !writer {
            self.remove_front();
        }
        self.entries -= taken;
        self.read += taken as u64;
        let mut commit = (off - PAGE_HDR) as u64;
        let lost = self.take_lost();
        if lost > 0 {
            commit |= MISSED_EVENTS;
            if off + 8 <= page_size {
                out[off..off + 8].copy_from_slice(&lost.to_le_bytes());
                commit |= MISSED_STORED;
            }
        }
        out[0..8].copy_from_slice(&first_ts.to_le_bytes());
        out[8..16].copy_from_slice(&commit.to_le_bytes());
        Some(out)
    }

    /// The counters and the unread bytes.
    pub fn stats(&self) -> Stats {
        Stats {
            entries: self.len(),
            overrun: self.overrun,
            bytes: self.pages.iter().map(Page::unread_bytes).sum::<usize>() + self.stale_bytes,
            oldest_ts: self.peek_ts().unwrap_or(0),
            dropped: self.dropped,
            read: self.read,
        }
    }

    /// Drop everything and reset the counters (`echo > trace`). A mapping
    /// stays, with an empty reader sub-buffer (the kernel's `rb_reset_cpu`
    /// resets the reader page and keeps the ids).
    pub fn clear(&mut self) {
        let (nr, cap, size, cpu) = (self.nr_pages, self.capacity, self.size, self.cpu);
        let map = self.map.take();
        *self = CpuBuffer::with_capacity(nr, cap);
        self.size = size;
        self.cpu = cpu;
        if let Some(mut m) = map {
            m.page.fill(0);
            (m.commit, m.flags, m.read, m.last_ts, m.attached) = (0, 0, 0, 0, None);
            // The pages the ids stood for are gone: the ring's ids stand
            // for the pages to come, from the head on.
            self.map = Some(m);
        }
    }
}

/// The `trace` header of the nop tracer.
pub fn header(in_buffer: usize, written: u64, cpus: usize, irq_info: bool) -> String {
    let mut s = String::from("# tracer: nop\n#\n");
    let _ = writeln!(
        s,
        "# entries-in-buffer/entries-written: {in_buffer}/{written}   #P:{cpus}"
    );
    s.push_str("#\n");
    if irq_info {
        s.push_str(concat!(
            "#                                _-----=> irqs-off/BH-disabled\n",
            "#                               / _----=> need-resched\n",
            "#                              | / _---=> hardirq/softirq\n",
            "#                              || / _--=> preempt-depth\n",
            "#                              ||| / _-=> migrate-disable\n",
            "#                              |||| /     delay\n",
        ));
        s.push_str("#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n");
        s.push_str("#              | |         |   |||||     |         |\n");
    } else {
        s.push_str("#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n");
        s.push_str("#              | |         |         |         |\n");
    }
    s
}

/// Merge per-CPU sequences in time order (ties go to the lower CPU), as
/// the kernel's iterator does for `trace` and `trace_pipe`.
pub fn merged<'a>(bufs: &'a [&'a CpuBuffer]) -> impl Iterator<Item = Entry> + 'a {
    let mut its: Vec<_> = bufs.iter().map(|b| b.iter().peekable()).collect();
    std::iter::from_fn(move || {
        let mut best: Option<(usize, u64)> = None;
        for (i, it) in its.iter_mut().enumerate() {
            if let Some(e) = it.peek() {
                if best.is_none_or(|(_, ts)| e.ts < ts) {
                    best = Some((i, e.ts));
                }
            }
        }
        its[best?.0].next()
    })
}

#[cfg(test)]
mod tests;
