//! The trace buffer, as the kernel's `kernel/trace/ring_buffer.c` lays it
//! out: one buffer per CPU, each a list of sub-buffer pages (4 KiB by
//! default, up to 512 KiB with `buffer_subbuf_size_kb`: a 16-byte page
//! header, then the events). Entries are kept decoded for the
//! text views (`trace`, `trace_pipe`), and every page's byte usage follows the
//! kernel's rules (4-byte event headers, a length word for entries over 112
//! bytes, an 8-byte time extend before an entry more than 2^27 clock units
//! after the previous one), so pages fill, overwrite and serialise for
//! `trace_pipe_raw` exactly where the kernel's would.
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
pub(crate) mod per_cpu;
pub mod snapshot;
pub mod trace_clock;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::tracefs::events::EventDef;

/// Bytes of a system page: the smallest sub-buffer.
pub const PAGE_SIZE: usize = 4096;
/// The largest sub-buffer order `buffer_subbuf_size_kb` takes: 128 pages.
pub const MAX_SUBBUF_ORDER: u32 = 7;
/// The page header: `u64 timestamp`, `local_t commit`.
pub const PAGE_HDR: usize = 16;
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

/// Deltas of this many clock units or more need a time extend.
const TS_LIMIT: u64 = 1 << 27;
/// Entries up to this size encode their length in `type_len`.
const MAX_SMALL_DATA: usize = 28 * 4;
const TYPE_TIME_EXTEND: u32 = 30;
const TIME_EXTEND_LEN: usize = 8;

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
/// malloc on 64 bits: 8 bytes of header, 16-byte granules, 32 at least).
fn heap_chunk(n: usize) -> usize {
    ((n + 8).div_ceil(16) * 16).max(32)
}

/// Bytes of memory one page of `capacity` usable bytes can take in the
/// daemon, at most: its [`Page`] (twice, for the page list's growth) and,
/// filled with the entries that cost the most per byte of page (the
/// smallest: 8 bytes of common header), each [`Entry`] and its data's
/// heap block. The kernel's page is its bytes; monfs keeps entries
/// decoded, so a page of small entries costs several times its size.
fn page_mem(capacity: usize) -> usize {
    let entry = std::mem::size_of::<Entry>();
    let most = (8..=MAX_ENTRY.min(capacity))
        .map(|d| {
            let cost = if d.div_ceil(4) * 4 <= MAX_SMALL_DATA {
                4 + d.div_ceil(4) * 4
            } else {
                8 + d.div_ceil(4) * 4
            };
            (capacity / cost) * (entry + heap_chunk(d))
        })
        .max()
        .unwrap_or(0);
    2 * std::mem::size_of::<Page>() + most
}

/// Bytes counted for a buffer of `nr_pages` sub-buffers of `capacity`
/// usable bytes, against [`crate::base::budget::MEMORY`]: each page at
/// most `page_mem`, the page being written once more (its entry list
/// can hold twice its entries until the page is full), and a mapping's
/// reader sub-buffer and sub-buffer ids (`Mapped`). `tests/ring_memory.rs`
/// checks it against the allocator's chunks for every entry size.
pub fn mem_cost(nr_pages: usize, capacity: usize) -> usize {
    static PER_ORDER: std::sync::OnceLock<Vec<usize>> = std::sync::OnceLock::new();
    let per = PER_ORDER.get_or_init(|| {
        (0..=MAX_SUBBUF_ORDER)
            .map(|o| page_mem(subbuf_capacity(o)))
            .collect()
    });
    let page = (0..=MAX_SUBBUF_ORDER)
        .position(|o| subbuf_capacity(o) == capacity)
        .map_or_else(|| page_mem(capacity), |o| per[o]);
    nr_pages
        .saturating_add(1)
        .saturating_mul(page)
        .saturating_add(capacity + PAGE_HDR)
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
        let d = self.data.len().div_ceil(4) * 4;
        if d <= MAX_SMALL_DATA {
            4 + d
        } else {
            8 + d
        }
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

/// One sub-buffer page.
#[derive(Default)]
struct Page {
    /// Which page this is (a number no other page of the buffer had).
    seq: u64,
    /// Entries not yet consumed, oldest first.
    entries: VecDeque<Entry>,
    /// Bytes written to the page, consumed entries and time extends included.
    used: usize,
    /// Time of the newest entry written.
    last_ts: u64,
}

impl Page {
    /// Bytes `e` (at time `ts`) would take on this page, a time extend
    /// included. The first entry of a page has delta 0 from the page's time.
    fn need(&self, cost: usize, ts: u64) -> usize {
        if self.used > 0 && ts - self.last_ts >= TS_LIMIT {
            cost + TIME_EXTEND_LEN
        } else {
            cost
        }
    }
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
        self.stale_bytes += self.iter().map(Entry::cost).sum::<usize>();
        self.entries = 0;
        self.pages.clear();
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
    pub fn push(&mut self, mut e: Entry, overwrite: bool) -> bool {
        if e.data.len() > MAX_ENTRY {
            return false;
        }
        e.ts = e.ts.max(self.last_ts);
        let cost = e.cost();
        let fits = self
            .pages
            .back()
            .is_some_and(|p| p.used + p.need(cost, e.ts) <= self.capacity);
        if !fits {
            // A full page takes no more entries: its list gives back the
            // room it grew for (see `mem_cost`).
            if let Some(p) = self.pages.back_mut() {
                p.entries.shrink_to_fit();
            }
            if self.pages.len() >= self.nr_pages {
                if !overwrite {
                    self.dropped += 1;
                    return false;
                }
                self.drop_oldest_page();
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            self.pages.push_back(Page {
                seq,
                ..Page::default()
            });
        }
        let p = self.pages.back_mut().expect("a writer page");
        p.used += p.need(cost, e.ts);
        p.last_ts = e.ts;
        self.last_ts = e.ts;
        p.entries.push_back(e);
        self.entries += 1;
        true
    }

    /// Take the oldest page out of the list. While mapped, the ring's ids
    /// follow: the head page's id goes to the ring's end (it is where the
    /// writer will come back to), unless the page was the reader's.
    fn remove_front(&mut self) -> Option<Page> {
        let p = self.pages.pop_front()?;
        if let Some(m) = self.map.as_mut() {
            m.page_removed(p.seq);
        }
        Some(p)
    }

    fn drop_oldest_page(&mut self) {
        if let Some(old) = self.remove_front() {
            let n = old.entries.len() as u64;
            self.entries -= old.entries.len();
            self.overrun += n;
            self.lost_unread += n;
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
    pub fn peek(&self) -> Option<&Entry> {
        self.pages.iter().find_map(|p| p.entries.front())
    }

    /// Iterate oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.pages.iter().flat_map(|p| p.entries.iter())
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
            let p = self.pages.front_mut()?;
            if let Some(e) = p.entries.pop_front() {
                if p.entries.is_empty() && !writer {
                    self.remove_front();
                }
                self.entries -= 1;
                self.read += 1;
                return Some(e);
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
            .is_some_and(|p| p.entries.is_empty() && self.pages.len() > 1)
        {
            self.remove_front();
        }
        let writer = self.pages.len() == 1;
        let p = self.pages.front_mut()?;
        let first_ts = p.entries.front()?.ts;
        let mut out = vec![0u8; page_size];
        let (off, _, taken) = fill(
            &mut out,
            PAGE_HDR,
            first_ts,
            PAGE_HDR + room,
            &mut p.entries,
        );
        if taken == 0 {
            return None;
        }
        if p.entries.is_empty() && !writer {
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
            bytes: self.iter().map(Entry::cost).sum::<usize>() + self.stale_bytes,
            oldest_ts: self.peek().map_or(0, |e| e.ts),
            dropped: self.dropped,
            read: self.read,
        }
    }

    /// Drop everything and reset the counters (`echo > trace`). A mapping
    /// stays, with an empty reader sub-buffer (the kernel's `rb_reset_cpu`
    /// resets the reader page and keeps the ids).
    pub fn clear(&mut self) {
        let (nr, cap, size) = (self.nr_pages, self.capacity, self.size);
        let map = self.map.take();
        *self = CpuBuffer::with_capacity(nr, cap);
        self.size = size;
        if let Some(mut m) = map {
            m.page.fill(0);
            (m.commit, m.flags, m.read, m.last_ts, m.attached) = (0, 0, 0, 0, None);
            // The pages the ids stood for are gone: the ring's ids stand
            // for the pages to come, from the head on.
            self.map = Some(m);
        }
    }
}

/// Move entries from the front of `entries` onto `page` from offset `off`,
/// each with its delta from the one before (the first from `prev`, a time
/// extend first where the delta needs one), while they end within `limit`
/// bytes of the page. Returns the offset after them, the time of the last
/// one moved (`prev` if none) and how many were moved.
fn fill(
    page: &mut [u8],
    mut off: usize,
    mut prev: u64,
    limit: usize,
    entries: &mut VecDeque<Entry>,
) -> (usize, u64, usize) {
    let mut n = 0;
    while let Some(e) = entries.front() {
        let delta = e.ts.saturating_sub(prev);
        let extend = if delta >= TS_LIMIT {
            TIME_EXTEND_LEN
        } else {
            0
        };
        if off + extend + e.cost() > limit {
            break;
        }
        let e = entries.pop_front().expect("peeked");
        off = put_entry(page, off, delta, &e.data);
        prev = e.ts;
        n += 1;
    }
    (off, prev, n)
}

/// Write an entry `delta` units after the previous one at `off`, with a
/// time extend before it when the delta does not fit its 27 bits; returns
/// the offset after it.
fn put_entry(out: &mut [u8], mut off: usize, mut delta: u64, data: &[u8]) -> usize {
    if delta >= TS_LIMIT {
        put_u32(
            out,
            off,
            TYPE_TIME_EXTEND | ((delta as u32 & 0x7ff_ffff) << 5),
        );
        put_u32(out, off + 4, (delta >> 27) as u32);
        off += TIME_EXTEND_LEN;
        delta = 0;
    }
    encode_event(out, off, data, delta as u32)
}

fn put_u32(out: &mut [u8], off: usize, v: u32) {
    out[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Write one event (header, length word for large entries, data) at `off`;
/// returns the offset after it.
fn encode_event(out: &mut [u8], off: usize, data: &[u8], delta: u32) -> usize {
    let d = data.len().div_ceil(4) * 4;
    let ts = (delta & 0x7ff_ffff) << 5;
    let body = if d <= MAX_SMALL_DATA {
        put_u32(out, off, ts | (d / 4) as u32);
        off + 4
    } else {
        put_u32(out, off, ts);
        put_u32(out, off + 4, (d + 4) as u32);
        off + 8
    };
    out[body..body + data.len()].copy_from_slice(data);
    body + d
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
pub fn merged<'a>(bufs: &'a [&'a CpuBuffer]) -> impl Iterator<Item = &'a Entry> + 'a {
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
