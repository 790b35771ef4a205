//! A sub-buffer page as the kernel's ring buffer keeps it
//! (`struct buffer_data_page` in `kernel/trace/ring_buffer.c`): one block
//! of the sub-buffer's size, a 16-byte header (`u64 timestamp`, the first
//! event's time; `local_t commit`, bytes of events), then the events, each
//! a `type_len:5, time_delta:27` word, a length word when `type_len` is 0
//! (entries over 112 bytes), the data rounded up to 4 bytes, and a
//! `TIME_EXTEND` record before an event whose delta does not fit in 27
//! bits. Entries are decoded from these bytes when read.

/// The page header: `u64 timestamp`, `local_t commit`.
pub const PAGE_HDR: usize = 16;

/// Deltas of this many clock units or more need a time extend.
const TS_LIMIT: u64 = 1 << 27;
/// Entries up to this size encode their length in `type_len`.
const MAX_SMALL_DATA: usize = 28 * 4;
const TYPE_TIME_EXTEND: u32 = 30;
const TIME_EXTEND_LEN: usize = 8;

/// One sub-buffer page of a CPU buffer.
pub(super) struct Page {
    /// Which page this is (a number no other page of the buffer had).
    pub(super) seq: u64,
    /// The page's bytes, header included: the sub-buffer size, allocated
    /// once when the page is made (and reused when it is overwritten).
    pub(super) buf: Box<[u8]>,
    /// Bytes of events written (time extends included).
    pub(super) used: usize,
    /// Time of the newest entry written.
    pub(super) last_ts: u64,
    /// Bytes of events consumed by readers.
    pub(super) read: usize,
    /// Time at the read position: of the last entry consumed, or the
    /// page's time before any.
    pub(super) read_ts: u64,
    /// Entries not yet consumed.
    pub(super) unread: usize,
}

/// One event of a page: its time and where its data is.
#[derive(Clone, Copy)]
pub(super) struct Event {
    pub(super) ts: u64,
    /// Offset of the data in the page (header included).
    pub(super) at: usize,
    /// Bytes of data (a multiple of 4).
    pub(super) len: usize,
    /// Offset (from the end of the header) of what follows it.
    pub(super) next: usize,
}

fn get_u32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

pub(super) fn put_u32(out: &mut [u8], off: usize, v: u32) {
    out[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

/// Bytes an entry of `len` data bytes takes in a page: a 4-byte event
/// header plus the data rounded up to 4, plus a length word for entries
/// over 112 bytes.
pub(super) fn cost_of(len: usize) -> usize {
    let d = len.div_ceil(4) * 4;
    if d <= MAX_SMALL_DATA {
        4 + d
    } else {
        8 + d
    }
}

impl Page {
    /// An empty page of `size` bytes (the sub-buffer), reusing `buf` if it
    /// has that size.
    pub(super) fn new(seq: u64, size: usize, buf: Option<Box<[u8]>>) -> Page {
        let buf = match buf {
            Some(b) if b.len() == size => b,
            _ => vec![0u8; size].into_boxed_slice(),
        };
        Page {
            seq,
            buf,
            used: 0,
            last_ts: 0,
            read: 0,
            read_ts: 0,
            unread: 0,
        }
    }

    /// Bytes an entry of `cost` bytes at time `ts` would take on this
    /// page, a time extend included. The first entry of a page has delta 0
    /// from the page's time.
    pub(super) fn need(&self, cost: usize, ts: u64) -> usize {
        if self.used > 0 && ts - self.last_ts >= TS_LIMIT {
            cost + TIME_EXTEND_LEN
        } else {
            cost
        }
    }

    /// Write an entry at time `ts` (it fits: see [`Page::need`]).
    pub(super) fn write(&mut self, data: &[u8], ts: u64) {
        if self.used == 0 {
            self.buf[0..8].copy_from_slice(&ts.to_le_bytes());
            self.last_ts = ts;
            self.read_ts = ts;
        }
        let delta = ts - self.last_ts;
        let end = put_entry(&mut self.buf, PAGE_HDR + self.used, delta, data);
        self.used = end - PAGE_HDR;
        self.buf[8..16].copy_from_slice(&(self.used as u64).to_le_bytes());
        self.last_ts = ts;
        self.unread += 1;
    }

    /// The event at `off` (bytes after the header) whose predecessor was
    /// at time `ts`, time extends before it folded in.
    pub(super) fn event_at(&self, mut off: usize, mut ts: u64) -> Option<Event> {
        while off + 4 <= self.used {
            let p = PAGE_HDR + off;
            let h = get_u32(&self.buf, p);
            let delta = u64::from(h >> 5);
            match h & 31 {
                TYPE_TIME_EXTEND => {
                    ts += delta | u64::from(get_u32(&self.buf, p + 4)) << 27;
                    off += TIME_EXTEND_LEN;
                }
                0 => {
                    let len = (get_u32(&self.buf, p + 4) as usize).saturating_sub(4);
                    return Some(Event {
                        ts: ts + delta,
                        at: p + 8,
                        len,
                        next: off + 8 + len,
                    });
                }
                n @ 1..=28 => {
                    let len = n as usize * 4;
                    return Some(Event {
                        ts: ts + delta,
                        at: p + 4,
                        len,
                        next: off + 4 + len,
                    });
                }
                _ => return None,
            }
        }
        None
    }

    /// The oldest unread event.
    pub(super) fn front(&self) -> Option<Event> {
        if self.unread == 0 {
            return None;
        }
        self.event_at(self.read, self.read_ts)
    }

    /// The data of an event of this page.
    pub(super) fn data(&self, e: &Event) -> &[u8] {
        &self.buf[e.at..e.at + e.len]
    }

    /// Consume the oldest unread event.
    pub(super) fn consume(&mut self, e: &Event) {
        self.read = e.next;
        self.read_ts = e.ts;
        self.unread -= 1;
    }

    /// The unread events, oldest first.
    pub(super) fn events(&self) -> impl Iterator<Item = Event> + '_ {
        let mut at = (self.read, self.read_ts, self.unread);
        std::iter::from_fn(move || {
            if at.2 == 0 {
                return None;
            }
            let e = self.event_at(at.0, at.1)?;
            at = (e.next, e.ts, at.2 - 1);
            Some(e)
        })
    }

    /// Bytes the unread entries take (their headers and data, time
    /// extends not counted).
    pub(super) fn unread_bytes(&self) -> usize {
        self.events().map(|e| cost_of(e.len)).sum()
    }
}

/// Write an entry `delta` units after the previous one at `off`, with a
/// time extend before it when the delta does not fit its 27 bits; returns
/// the offset after it.
pub(super) fn put_entry(out: &mut [u8], mut off: usize, mut delta: u64, data: &[u8]) -> usize {
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

/// Write one event (header, length word for large entries, data, zeros to
/// a multiple of 4) at `off`; returns the offset after it.
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
    out[body + data.len()..body + d].fill(0);
    body + d
}

/// Move unread events of `src` onto `out` from offset `off`, each with
/// its delta from the one before (the first from `prev`, a time extend
/// first where the delta needs one), while they end within `limit` bytes
/// of `out`. Returns the offset after them, the time of the last one moved
/// (`prev` if none) and how many were moved.
pub(super) fn fill(
    out: &mut [u8],
    mut off: usize,
    mut prev: u64,
    limit: usize,
    src: &mut Page,
) -> (usize, u64, usize) {
    let mut n = 0;
    while let Some(e) = src.front() {
        let delta = e.ts.saturating_sub(prev);
        let extend = if delta >= TS_LIMIT {
            TIME_EXTEND_LEN
        } else {
            0
        };
        if off + extend + cost_of(e.len) > limit {
            break;
        }
        off = put_entry(out, off, delta, src.data(&e));
        src.consume(&e);
        prev = e.ts;
        n += 1;
    }
    (off, prev, n)
}
