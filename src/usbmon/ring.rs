//! The per-reader ring of the binary interface, like the buffer management in
//! the kernel's `mon_bin.c`: events occupy 64-byte-aligned slots (header first),
//! may wrap around the end when the ring is not mapped, and never wrap while it
//! is mapped, where a `'@'` filler packet pads to the end instead.

use crate::base::errno::{Errno, SysResult};
use crate::base::pages::ZeroedPages;

/// Size of an event slot header, and the alignment of every event.
pub const PKT_SIZE: usize = 64;
/// The smallest ring.
pub const BUFF_MIN: u64 = 8192;
/// The default ring.
pub const BUFF_DFL: usize = 300 * 1024;
/// The largest ring (measured on 6.12: 64 MiB; older kernels had 1200 KiB).
pub const BUFF_MAX: u64 = 64 * 1024 * 1024;
/// Page ("chunk") size the ring is rounded up to.
pub const CHUNK_SIZE: usize = 4096;

/// Round `n` up to a multiple of 64.
pub fn pkt_align(n: usize) -> usize {
    (n + PKT_SIZE - 1) & !(PKT_SIZE - 1)
}

/// The ring's bytes and its bookkeeping.
#[derive(Debug)]
pub struct Ring {
    buf: ZeroedPages,
    b_in: usize,
    b_out: usize,
    b_cnt: usize,
    /// Bytes of the oldest event already returned by `read()`.
    pub b_read: usize,
}

/// Offset of `len_cap` inside the header.
const LEN_CAP_OFF: usize = 36;

impl Ring {
    /// An empty ring of `size` bytes (a multiple of the page size); its
    /// pages cost memory once events are written to them. ENOMEM when the
    /// mapping is refused.
    pub fn new(size: usize) -> SysResult<Ring> {
        Ok(Ring {
            buf: ZeroedPages::new(size).ok_or(Errno::ENOMEM)?,
            b_in: 0,
            b_out: 0,
            b_cnt: 0,
            b_read: 0,
        })
    }

    /// Ring size in bytes.
    pub fn size(&self) -> usize {
        self.buf.len()
    }

    /// No events queued.
    pub fn is_empty(&self) -> bool {
        self.b_cnt == 0
    }

    /// The raw bytes (what a mapping shows).
    pub fn bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Offset of the oldest event.
    pub fn out_offset(&self) -> usize {
        self.b_out
    }

    /// Allocate `size` bytes (aligned up), possibly wrapping. None if full.
    pub fn alloc(&mut self, size: usize) -> Option<usize> {
        let size = pkt_align(size);
        if self.b_cnt + size > self.size() {
            return None;
        }
        let off = self.b_in;
        self.b_cnt += size;
        self.b_in += size;
        if self.b_in >= self.size() {
            self.b_in -= self.size();
        }
        Some(off)
    }

    /// Allocate without crossing the end: a filler packet pads to the end when
    /// needed. Returns the event's offset and, if a filler was written, its
    /// offset. None if it does not fit.
    pub fn alloc_contiguous(&mut self, size: usize) -> Option<(usize, Option<usize>)> {
        let size = pkt_align(size);
        let bsize = self.size();
        if self.b_cnt + size > bsize {
            return None;
        }
        if self.b_in + size > bsize {
            let fill = bsize - self.b_in;
            if self.b_cnt + size + fill > bsize {
                return None;
            }
            let at = self.b_in;
            self.fill(at, fill);
            self.b_in = size;
            self.b_cnt += size + fill;
            Some((0, Some(at)))
        } else {
            let off = self.b_in;
            self.b_in += size;
            if self.b_in == bsize {
                self.b_in = 0;
            }
            self.b_cnt += size;
            Some((off, None))
        }
    }

    fn fill(&mut self, off: usize, size: usize) {
        let h = &mut self.buf[off..off + PKT_SIZE];
        h.fill(0);
        h[8] = b'@';
        h[LEN_CAP_OFF..LEN_CAP_OFF + 4].copy_from_slice(&((size - PKT_SIZE) as u32).to_ne_bytes());
    }

    /// Give back the unused aligned tail of the newest allocation.
    pub fn shrink(&mut self, size: usize) {
        let size = pkt_align(size);
        self.b_cnt -= size;
        if self.b_in < size {
            self.b_in += self.size();
        }
        self.b_in -= size;
    }

    /// Free the oldest event (`size` = 64 + its len_cap).
    pub fn free(&mut self, size: usize) {
        let size = pkt_align(size);
        self.b_cnt -= size;
        self.b_out += size;
        if self.b_out >= self.size() {
            self.b_out -= self.size();
        }
    }

    /// Copy `data` into the ring at `off`, wrapping at the end.
    pub fn write_at(&mut self, off: usize, data: &[u8]) {
        let first = data.len().min(self.size() - off);
        self.buf[off..off + first].copy_from_slice(&data[..first]);
        self.buf[..data.len() - first].copy_from_slice(&data[first..]);
    }

    /// Copy `len` bytes out of the ring at `off`, wrapping at the end.
    pub fn read_at(&self, off: usize, len: usize) -> Vec<u8> {
        let mut v = Vec::with_capacity(len);
        let first = len.min(self.size() - off);
        v.extend_from_slice(&self.buf[off..off + first]);
        v.extend_from_slice(&self.buf[..len - first]);
        v
    }

    /// `len_cap` of the event whose header is at `off`.
    pub fn len_cap_at(&self, off: usize) -> usize {
        u32::from_ne_bytes(
            self.buf[off + LEN_CAP_OFF..off + LEN_CAP_OFF + 4]
                .try_into()
                .unwrap(),
        ) as usize
    }

    /// Offsets of up to `max` queued events, oldest first (fillers included).
    pub fn offsets(&self, max: usize) -> Vec<u32> {
        let mut out = Vec::new();
        let mut cur = self.b_out;
        let mut bytes = 0;
        while bytes < self.b_cnt && out.len() < max {
            out.push(cur as u32);
            let size = pkt_align(self.len_cap_at(cur) + PKT_SIZE);
            cur += size;
            if cur >= self.size() {
                cur -= self.size();
            }
            bytes += size;
        }
        out
    }

    /// Number of queued events (fillers included).
    pub fn queued(&self) -> usize {
        self.offsets(usize::MAX).len()
    }

    /// Remove up to `n` events; returns how many were removed.
    pub fn flush(&mut self, n: usize) -> usize {
        let mut i = 0;
        while i < n && !self.is_empty() {
            let sz = PKT_SIZE + self.len_cap_at(self.b_out);
            self.free(sz);
            i += 1;
        }
        if i > 0 {
            self.b_read = 0;
        }
        i
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(r: &mut Ring, cap: usize, mapped: bool) -> Option<usize> {
        let off = if mapped {
            r.alloc_contiguous(PKT_SIZE + cap)?.0
        } else {
            r.alloc(PKT_SIZE + cap)?
        };
        let mut h = [0u8; 64];
        h[8] = b'S';
        h[36..40].copy_from_slice(&(cap as u32).to_ne_bytes());
        r.write_at(off, &h);
        Some(off)
    }

    #[test]
    fn events_are_64_byte_aligned() {
        let mut r = Ring::new(8192).unwrap();
        assert_eq!(put(&mut r, 0, false), Some(0));
        assert_eq!(put(&mut r, 18, false), Some(64));
        assert_eq!(put(&mut r, 0, false), Some(192));
        assert_eq!(r.offsets(10), vec![0, 64, 192]);
        assert_eq!(r.queued(), 3);
    }

    #[test]
    fn mapped_ring_pads_with_a_filler_instead_of_wrapping() {
        let mut r = Ring::new(8192).unwrap();
        // Fill to 8192 - 128, then free the first events to make room at the start.
        for _ in 0..(8192 - 128) / 64 {
            put(&mut r, 0, true).unwrap();
        }
        assert_eq!(r.flush(10), 10);
        // A 200-byte event needs 320 bytes: it cannot fit in the 128 at the end.
        let off = put(&mut r, 200, true).unwrap();
        assert_eq!(off, 0);
        let offs = r.offsets(usize::MAX);
        let filler = offs[offs.len() - 2] as usize;
        assert_eq!(filler, 8192 - 128);
        assert_eq!(r.bytes()[filler + 8], b'@');
        assert_eq!(r.len_cap_at(filler), 64);
        assert_eq!(*offs.last().unwrap(), 0);
    }

    #[test]
    fn unmapped_ring_wraps_data() {
        let mut r = Ring::new(8192).unwrap();
        for _ in 0..(8192 - 128) / 64 {
            put(&mut r, 0, false).unwrap();
        }
        r.flush(10);
        let off = put(&mut r, 200, false).unwrap();
        assert_eq!(off, 8192 - 128);
        r.write_at(off + 64, &[7u8; 200]);
        assert_eq!(r.read_at(off + 64, 200), vec![7u8; 200]);
        assert_eq!(r.bytes()[0], 7, "data continues at offset 0");
    }

    #[test]
    fn full_ring_refuses() {
        let mut r = Ring::new(8192).unwrap();
        for _ in 0..128 {
            put(&mut r, 0, true).unwrap();
        }
        assert!(put(&mut r, 0, true).is_none());
        assert!(put(&mut r, 0, false).is_none());
    }

    /// Any interleaving of puts and flushes keeps offsets, counts and bytes
    /// consistent, mapped or not.
    #[test]
    fn random_put_flush_keeps_invariants() {
        let mut seed = 0x1234_5678_9abc_def0u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for mapped in [false, true] {
            let mut r = Ring::new(16384).unwrap();
            let mut live: std::collections::VecDeque<usize> = Default::default();
            for _ in 0..20000 {
                if rnd() % 3 != 0 {
                    let cap = (rnd() % 700) as usize;
                    let before = r.queued();
                    if let Some(off) = put(&mut r, cap, mapped) {
                        assert_eq!(off % 64, 0);
                        if mapped {
                            assert!(
                                off + pkt_align(64 + cap) <= r.size(),
                                "no wrap while mapped"
                            );
                        }
                        let now = r.queued();
                        assert!(now == before + 1 || (mapped && now == before + 2));
                        if now == before + 2 {
                            live.push_back(usize::MAX); // filler
                        }
                        live.push_back(cap);
                    }
                } else {
                    let n = (rnd() % 4) as usize;
                    let got = r.flush(n);
                    for _ in 0..got {
                        live.pop_front();
                    }
                }
                assert_eq!(r.queued(), live.len());
            }
        }
    }
}
