//! A buffer mapped by its reader (`trace_pipe_raw`'s mmap, since 6.10), as
//! `kernel/trace/ring_buffer.c` serves it (`ring_buffer_map()`,
//! `ring_buffer_map_get_reader()`, `rb_update_meta_page()`): the meta page,
//! the reader sub-buffer that `TRACE_MMAP_IOCTL_GET_READER` swaps in, and
//! the ring's sub-buffers with their ids.

use super::page::fill;
use super::{CpuBuffer, Mapped, META_STRUCT_LEN, MISSED_EVENTS, MISSED_STORED, PAGE_HDR};

impl CpuBuffer {
    /// Whether the buffer is mapped.
    pub fn is_mapped(&self) -> bool {
        self.map.is_some()
    }

    /// Bytes of a mapping of the whole buffer: the meta page (padded to a
    /// sub-buffer), then the reader sub-buffer and the ring's.
    pub fn map_len(&self) -> u64 {
        ((self.nr_pages + 2) * self.page_size()) as u64
    }

    /// Start a mapping, as the kernel's first `ring_buffer_map` of a CPU
    /// buffer (`rb_setup_ids_meta_page`): the reader sub-buffer gets id 0,
    /// the ring's get 1 to `nr_pages` from the head page on. Nothing
    /// changes if it is mapped already.
    pub fn map_start(&mut self) {
        if self.map.is_some() {
            return;
        }
        self.map = Some(Mapped {
            reader_id: 0,
            ring: (1..=self.nr_pages as u32).collect(),
            page: vec![0; self.page_size()],
            commit: 0,
            flags: 0,
            read: 0,
            last_ts: 0,
            attached: None,
        });
    }

    /// The last mapping is gone (`ring_buffer_unmap`).
    pub fn map_end(&mut self) {
        self.map = None;
    }

    /// `TRACE_MMAP_IOCTL_GET_READER` (`ring_buffer_map_get_reader`): the
    /// reader is taken to have read the reader sub-buffer. If the writer
    /// has added events to it since, they are now read and the reader stays
    /// on it; else, if there is anything to read, the head page becomes the
    /// reader sub-buffer (with the missed-events flags and count if events
    /// were overwritten since the last read, unless the writer is on it)
    /// and its events are read. The events are consumed: no other reader
    /// sees them. Returns false if the buffer is not mapped.
    pub fn map_get_reader(&mut self) -> bool {
        let Some(mut m) = self.map.take() else {
            return false;
        };
        self.get_reader(&mut m);
        self.map = Some(m);
        true
    }

    fn get_reader(&mut self, m: &mut Mapped) {
        if let Some(seq) = m.attached {
            let writer = self.pages.len() == 1;
            match self.pages.front_mut() {
                Some(p) if p.seq == seq => {
                    let limit = m.page.len();
                    let (off, last, n) =
                        fill(&mut m.page, PAGE_HDR + m.commit, m.last_ts, limit, p);
                    (m.commit, m.last_ts) = (off - PAGE_HDR, last);
                    let rest = p.unread > 0;
                    self.entries -= n;
                    self.read += n as u64;
                    if n > 0 {
                        m.read = m.commit;
                        put_commit(m);
                        return;
                    }
                    if writer && !rest {
                        return;
                    }
                    m.attached = None;
                    if !rest {
                        // Read to its end and left by the writer: it was
                        // the reader's, never the ring's.
                        self.pages.pop_front();
                    }
                    // (Events that no longer fit on it, after others read
                    // some in between, stay as the head page's.)
                }
                _ => m.attached = None,
            }
        }
        while self
            .pages
            .front()
            .is_some_and(|p| p.unread == 0 && self.pages.len() > 1)
        {
            self.remove_front_of(m);
        }
        if self.entries == 0 {
            return;
        }
        let writer = self.pages.len() == 1;
        let Some(p) = self.pages.front_mut() else {
            return;
        };
        // The head page becomes the reader; the old reader takes its place
        // in the ring, at its end from the new head's point of view.
        if let Some(id) = m.ring.pop_front() {
            m.ring.push_back(m.reader_id);
            m.reader_id = id;
        }
        m.page.fill(0);
        let first_ts = p.front().map_or(0, |e| e.ts);
        let limit = m.page.len();
        let (off, prev, n) = fill(&mut m.page, PAGE_HDR, first_ts, limit, p);
        let seq = p.seq;
        let drained = p.unread == 0;
        self.entries -= n;
        self.read += n as u64;
        m.page[0..8].copy_from_slice(&first_ts.to_le_bytes());
        m.commit = off - PAGE_HDR;
        m.read = m.commit;
        m.last_ts = prev;
        m.flags = 0;
        let lost = self.take_lost();
        if writer {
            // The writer goes on writing on it (the kernel's reader page is
            // then its commit page: no missed-events flags).
            m.attached = Some(seq);
        } else {
            if drained {
                self.pages.pop_front();
            }
            if lost > 0 {
                m.flags |= MISSED_EVENTS;
                if m.page.len() - off >= 8 {
                    m.page[off..off + 8].copy_from_slice(&lost.to_le_bytes());
                    m.flags |= MISSED_STORED;
                }
            }
        }
        put_commit(m);
    }

    /// [`CpuBuffer::remove_front`] with the mapping's state taken out.
    fn remove_front_of(&mut self, m: &mut Mapped) {
        if let Some(p) = self.pages.pop_front() {
            m.page_removed(p.seq);
        }
    }

    /// The meta page (`struct trace_buffer_meta`, zeros to the end of a
    /// sub-buffer) as `rb_update_meta_page` fills it. Empty if not mapped.
    pub fn meta_page(&self) -> Vec<u8> {
        let Some(m) = &self.map else {
            return Vec::new();
        };
        let size = self.page_size();
        let mut out = vec![0u8; size];
        let mut w = 0;
        let mut put = |b: &[u8]| {
            out[w..w + b.len()].copy_from_slice(b);
            w += b.len();
        };
        put(&(size as u32).to_le_bytes()); // meta_page_size
        put(&(META_STRUCT_LEN as u32).to_le_bytes());
        put(&(size as u32).to_le_bytes()); // subbuf_size
        put(&(self.nr_pages as u32 + 1).to_le_bytes()); // nr_subbufs
        put(&0u64.to_le_bytes()); // reader.lost_events
        put(&m.reader_id.to_le_bytes());
        put(&(m.read as u32).to_le_bytes());
        // flags (none defined yet)
        put(&0u64.to_le_bytes());
        // `entries` counts every entry written since the last reset, read
        // and overwritten ones included.
        put(&(self.len() as u64 + self.overrun + self.read).to_le_bytes());
        put(&self.overrun.to_le_bytes());
        put(&self.read.to_le_bytes());
        out
    }

    /// The reader sub-buffer's id and bytes (empty if not mapped).
    pub fn reader_page(&self) -> (u32, &[u8]) {
        match &self.map {
            Some(m) => (m.reader_id, &m.page),
            None => (0, &[]),
        }
    }

    /// `size` bytes of the mapping at `offset`: the meta page, the reader
    /// sub-buffer where its id puts it, zeros for the ring's sub-buffers
    /// (a reader reads only the reader sub-buffer). Empty past the end.
    pub fn map_read(&self, offset: u64, size: u32) -> Vec<u8> {
        let Some(m) = &self.map else {
            return Vec::new();
        };
        let len = self.map_len();
        let end = (offset.saturating_add(size as u64)).min(len);
        if offset >= end {
            return Vec::new();
        }
        let ps = self.page_size() as u64;
        let mut out = Vec::with_capacity((end - offset) as usize);
        let meta = self.meta_page();
        let reader_at = ps * (1 + m.reader_id as u64);
        let mut at = offset;
        while at < end {
            let (base, src): (u64, Option<&[u8]>) = if at < ps {
                (0, Some(&meta))
            } else if at >= reader_at && at < reader_at + ps {
                (reader_at, Some(&m.page))
            } else {
                ((at / ps) * ps, None)
            };
            let stop = (base + ps).min(end);
            match src {
                Some(b) => out.extend_from_slice(&b[(at - base) as usize..(stop - base) as usize]),
                None => out.resize(out.len() + (stop - at) as usize, 0),
            }
            at = stop;
        }
        out
    }
}

impl Mapped {
    /// The buffer's page `seq` left the front of the list: the ring's ids
    /// follow (the head page's id goes to the ring's end, where the writer
    /// will come back to), unless the page was the reader sub-buffer.
    pub(super) fn page_removed(&mut self, seq: u64) {
        if self.attached == Some(seq) {
            self.attached = None;
        } else {
            self.ring.rotate_left(1);
        }
    }
}

/// Write the reader sub-buffer's `commit` word: its bytes and flags.
fn put_commit(m: &mut Mapped) {
    let c = m.commit as u64 | m.flags;
    m.page[8..16].copy_from_slice(&c.to_le_bytes());
}
