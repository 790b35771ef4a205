//! The simulated monitor DCSS: a byte array covering `dcss_start..=dcss_end`
//! that *MONITOR writes records and control areas into and the reader copies
//! from, as the driver copies from the mapped segment.
//!
//! Layout: the first 32 KiB are the control area, 256 slots of 128 bytes, each
//! holding the monitor control area (MCA: an array of 12-byte MCEs) of one
//! outstanding message. The rest holds record sets, allocated as a ring in
//! message order and freed when the message is replied to. Records are packed
//! into 4 KiB frames: a record never crosses a frame boundary; when the next
//! record does not fit, an end-of-frame record (domain 1, record 13) closes the
//! frame and the record starts the next one.

use std::collections::VecDeque;

use super::records::{Record, RecordSet, EOF_RECORD, FRAME, HDR_LEN};

/// Size of one MCA slot in the control area.
pub const MCA_SLOT: u32 = 128;
/// Number of MCA slots (more than the 255 messages that can be outstanding).
pub const MCA_SLOTS: u32 = 256;
/// At most this many MCEs fit a slot.
pub const MAX_MCES: usize = (MCA_SLOT / 12) as usize;
/// Bytes an end-of-frame record takes.
const EOF_LEN: u32 = HDR_LEN as u32;

/// Build one 12-byte MCE.
pub fn mce_bytes(type_byte: u8, domains: u16, start: u32, end: u32) -> [u8; 12] {
    let mut m = [0u8; 12];
    m[0] = type_byte;
    m[1..3].copy_from_slice(&domains.to_be_bytes());
    m[4..8].copy_from_slice(&start.to_be_bytes());
    m[8..12].copy_from_slice(&end.to_be_bytes());
    m
}

/// Where a record set may start so that an end-of-frame record still fits
/// after anything placed before it: `addr`, or the next frame.
pub fn normalize_start(addr: u32) -> u32 {
    if addr % FRAME > FRAME - EOF_LEN {
        (addr / FRAME + 1) * FRAME
    } else {
        addr
    }
}

/// The bytes of `records` laid out from address `start` (see the module
/// documentation). `start` must come from [`normalize_start`]. Every record is
/// shorter than a frame minus an end-of-frame record.
pub fn layout_records(records: &[Record], start: u32, out: &mut Vec<u8>) {
    let mut addr = start as u64;
    for r in records {
        let len = r.len() as u64;
        assert!(
            len <= (FRAME - EOF_LEN) as u64,
            "record too long for a frame"
        );
        let off = addr % FRAME as u64;
        let fits = off + len <= (FRAME - EOF_LEN) as u64 || off + len == FRAME as u64;
        if !fits {
            // Close the frame with an end-of-frame record, then go on at the next.
            let eof = Record {
                domain: EOF_RECORD.0,
                number: EOF_RECORD.1,
                tod: r.tod,
                data: Vec::new(),
            };
            eof.encode_into(out);
            let pad = FRAME as u64 - off - EOF_LEN as u64;
            out.resize(out.len() + pad as usize, 0);
            addr += FRAME as u64 - off;
        }
        r.encode_into(out);
        addr += len;
    }
}

/// The DCSS contents and the allocation of its record area.
pub struct Dcss {
    start: u32,
    end: u32,
    mem: Vec<u8>,
    rec_area: u32,
    tail: u32,
    live: VecDeque<(u32, u32)>,
}

/// How an MCE should be spoiled (fault injection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spoil {
    /// Byte 0 (type) zero.
    TypeZero,
    /// Both domain bytes zero.
    DomainZero,
    /// Record end not beyond record start.
    EndNotAfterStart,
    /// Record start below the DCSS.
    StartBelowDcss,
}

impl Dcss {
    /// An all-zero DCSS for `start..=end` (checked by the config).
    pub fn new(start: u32, end: u32) -> Dcss {
        let size = (end - start) as usize + 1;
        let rec_area = start + MCA_SLOT * MCA_SLOTS;
        Dcss {
            start,
            end,
            mem: vec![0; size],
            rec_area,
            tail: rec_area,
            live: VecDeque::new(),
        }
    }

    /// First byte.
    pub fn start(&self) -> u32 {
        self.start
    }

    /// Last byte.
    pub fn end(&self) -> u32 {
        self.end
    }

    /// `len` bytes at `addr`, or `None` when they are not all inside the DCSS.
    pub fn bytes(&self, addr: u32, len: usize) -> Option<&[u8]> {
        let off = addr.checked_sub(self.start)? as usize;
        self.mem.get(off..off.checked_add(len)?)
    }

    /// Write the record sets of message number `seq` (counted from 0 per open)
    /// and its MCA. Returns the MCA's first and last byte addresses, or `None`
    /// when the record area has no room (the data is lost).
    pub fn store(
        &mut self,
        seq: u64,
        sets: &[RecordSet],
        spoil: Option<Spoil>,
    ) -> Option<(u32, u32)> {
        assert!(!sets.is_empty() && sets.len() <= MAX_MCES);
        let lay = |from: u32| {
            let mut bytes = Vec::new();
            let mut bounds = Vec::new();
            for s in sets {
                let a = from as u64 + bytes.len() as u64;
                let s_start = normalize_start(a as u32);
                bytes.resize(bytes.len() + (s_start as u64 - a) as usize, 0);
                let before = bytes.len();
                layout_records(&s.records, s_start, &mut bytes);
                bounds.push((s_start, s_start + (bytes.len() - before) as u32 - 1));
            }
            (bytes, bounds)
        };
        let area_end = self.end as u64 + 1;
        let mut at = normalize_start(self.tail);
        let (mut bytes, mut bounds) = lay(at);
        if at as u64 + bytes.len() as u64 > area_end {
            at = self.rec_area;
            (bytes, bounds) = lay(at);
            if at as u64 + bytes.len() as u64 > area_end {
                return None;
            }
        }
        let stop = at + bytes.len() as u32;
        if self.live.iter().any(|&(s, e)| at < e && s < stop) {
            return None;
        }
        let off = (at - self.start) as usize;
        self.mem[off..off + bytes.len()].copy_from_slice(&bytes);
        self.live.push_back((at, stop));
        self.tail = stop;

        let mca = self.start + (seq % MCA_SLOTS as u64) as u32 * MCA_SLOT;
        let mut m = Vec::with_capacity(sets.len() * 12);
        for (i, (s, (b, e))) in sets.iter().zip(bounds).enumerate() {
            let mut mce = mce_bytes(s.type_byte, s.domains, b, e);
            if i == 0 {
                match spoil {
                    Some(Spoil::TypeZero) => mce[0] = 0,
                    Some(Spoil::DomainZero) => mce[1..3].fill(0),
                    Some(Spoil::EndNotAfterStart) => mce[8..12].copy_from_slice(&b.to_be_bytes()),
                    Some(Spoil::StartBelowDcss) => {
                        mce[4..8].copy_from_slice(&(self.start - FRAME).to_be_bytes())
                    }
                    None => {}
                }
            }
            m.extend_from_slice(&mce);
        }
        let off = (mca - self.start) as usize;
        self.mem[off..off + m.len()].copy_from_slice(&m);
        Some((mca, mca + m.len() as u32 - 1))
    }

    /// The oldest stored message was replied to: its record area is free.
    pub fn release_oldest(&mut self) {
        self.live.pop_front();
        if self.live.is_empty() {
            self.tail = self.rec_area;
        }
    }

    /// Number of messages whose records are held.
    pub fn held(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u16, len: usize) -> Record {
        Record {
            domain: 4,
            number: n,
            tod: 7,
            data: vec![n as u8; len - HDR_LEN],
        }
    }

    #[test]
    fn records_never_cross_frames() {
        let recs: Vec<Record> = (0..100)
            .map(|i| rec(i, 20 + (i as usize * 37) % 150))
            .collect();
        for start in [0x1000_0000u32, 0x1000_0FE0, 0x1000_0100, 0x1000_0FEC] {
            let start = normalize_start(start);
            let mut b = Vec::new();
            layout_records(&recs, start, &mut b);
            // Walk it: every record (or EOF) lies inside one frame.
            let mut pos = 0usize;
            let mut seen = Vec::new();
            while pos < b.len() {
                let addr = start as usize + pos;
                let (r, len) = Record::parse(&b[pos..]).unwrap();
                assert_eq!(
                    (addr % 4096 + len - 1) / 4096,
                    0,
                    "record crosses a frame at {addr:#x}"
                );
                if r.is_eof() {
                    pos += 4096 - addr % 4096;
                } else {
                    seen.push(r);
                    pos += len;
                }
            }
            assert_eq!(pos, b.len());
            assert_eq!(seen, recs);
        }
        assert_eq!(normalize_start(0x1000_0FED), 0x1000_1000);
        assert_eq!(normalize_start(0x1000_0FEC), 0x1000_0FEC);
    }

    #[test]
    fn ring_allocation_wraps_and_fills() {
        let start = 0x0010_0000;
        let end = start + 96 * 1024 - 1;
        let mut d = Dcss::new(start, end);
        let set = RecordSet {
            type_byte: 0x80,
            domains: 0x0800,
            records: (0..40).map(|i| rec(i, 100)).collect(),
        };
        let mut n = 0;
        while let Some((a, e)) = d.store(n, std::slice::from_ref(&set), None) {
            assert_eq!(e - a + 1, 12);
            let m = d.bytes(a, 12).unwrap();
            assert_eq!(m[0], 0x80);
            let rs = u32::from_be_bytes(m[4..8].try_into().unwrap());
            let re = u32::from_be_bytes(m[8..12].try_into().unwrap());
            assert!(rs >= start + 32 * 1024 && re <= end && re > rs);
            n += 1;
        }
        assert!(n >= 10, "{n}");
        assert_eq!(d.held(), n as usize);
        d.release_oldest();
        d.release_oldest();
        assert!(
            d.store(n, std::slice::from_ref(&set), None).is_some(),
            "wraps into freed space"
        );
        assert!(
            d.bytes(end, 1).is_some()
                && d.bytes(end, 2).is_none()
                && d.bytes(start - 1, 1).is_none()
        );
    }
}
