//! The SCSI target behind a simulated flash drive's bulk-only transport
//! (the USB Mass Storage Class Bulk-Only Transport 1.0 and SPC/SBC as
//! usb-storage and programs speak them): the CBW and CSW, the disk's
//! contents, and the answers to the commands a host sends. Plain data; the
//! transport's URBs are the callers'.

use std::collections::VecDeque;

use crate::sim::rng::Rng;

/// The disk's size, in 512-byte blocks (2 GiB).
pub(crate) const CAPACITY: u32 = 0x0040_0000;
/// The disk's block size.
pub(crate) const BLOCK: u32 = 512;

/// The `blocks` sectors from `lba` on: an MBR with one FAT32 partition at
/// block 2048 in block 0, then each block's own pattern ("MONFS-LBA-" and
/// its number, then bytes of its number's xorshift).
pub(crate) fn sector_data(lba: u32, blocks: u32) -> Vec<u8> {
    let mut v = vec![0u8; blocks as usize * BLOCK as usize];
    for (i, sec) in v.chunks_mut(BLOCK as usize).enumerate() {
        let l = lba + i as u32;
        if l == 0 {
            sec[446..450].copy_from_slice(&[0x00, 0x20, 0x21, 0x00]);
            sec[450] = 0x0c;
            sec[454..458].copy_from_slice(&2048u32.to_le_bytes());
            sec[458..462].copy_from_slice(&(CAPACITY - 2048).to_le_bytes());
            sec[510] = 0x55;
            sec[511] = 0xaa;
            continue;
        }
        let head = format!("MONFS-LBA-{l:08x}");
        sec[..head.len()].copy_from_slice(head.as_bytes());
        let mut x = (l as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for b in sec[head.len()..].iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    v
}

/// `s` as a SCSI ASCII field of `n` bytes: printable characters, padded
/// with spaces.
pub(crate) fn pad(s: &str, n: usize) -> Vec<u8> {
    let mut v: Vec<u8> = s
        .bytes()
        .filter(|b| b.is_ascii_graphic() || *b == b' ')
        .take(n)
        .collect();
    v.resize(n, b' ');
    v
}

/// The vendor and product names a drive's INQUIRY gives, from its
/// manufacturer and product strings.
pub(crate) fn names<'a>(
    manufacturer: Option<&'a str>,
    product: Option<&'a str>,
) -> (&'a str, &'a str) {
    (
        manufacturer.unwrap_or("Generic"),
        product.unwrap_or("USB Disk"),
    )
}

/// The standard INQUIRY data (36 bytes): a removable direct-access device
/// of SPC-3 with these vendor and product names.
pub(crate) fn inquiry(vendor: &str, product: &str) -> Vec<u8> {
    let mut v = vec![0x00, 0x80, 0x05, 0x02, 0x1f, 0x00, 0x00, 0x00];
    v.extend(pad(vendor, 8));
    v.extend(pad(product, 16));
    v.extend(pad("1.00", 4));
    v
}

/// READ CAPACITY(10)'s answer: the last block and the block size.
pub(crate) fn capacity10() -> Vec<u8> {
    let mut v = (CAPACITY - 1).to_be_bytes().to_vec();
    v.extend_from_slice(&BLOCK.to_be_bytes());
    v
}

/// A command block wrapper (31 bytes, "USBC").
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cbw {
    pub tag: u32,
    pub length: u32,
    pub dir_in: bool,
    pub lun: u8,
    pub cdb: Vec<u8>,
}

impl Cbw {
    /// The CBW in `b`, if it is a valid one (31 bytes, its signature, a
    /// CDB of 1 to 16 bytes).
    pub(crate) fn parse(b: &[u8]) -> Option<Cbw> {
        if b.len() != 31 || &b[..4] != b"USBC" {
            return None;
        }
        let n = b[14] as usize & 0x1f;
        if n == 0 || n > 16 {
            return None;
        }
        Some(Cbw {
            tag: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            length: u32::from_le_bytes([b[8], b[9], b[10], b[11]]),
            dir_in: b[12] & 0x80 != 0,
            lun: b[13] & 0x0f,
            cdb: b[15..15 + n].to_vec(),
        })
    }
}

/// The command status wrapper (13 bytes, "USBS") for `tag`.
pub(crate) fn csw(tag: u32, residue: u32, status: u8) -> [u8; 13] {
    let mut c = [0u8; 13];
    c[..4].copy_from_slice(b"USBS");
    c[4..8].copy_from_slice(&tag.to_le_bytes());
    c[8..12].copy_from_slice(&residue.to_le_bytes());
    c[12] = status;
    c
}

/// What a command gives: its data for the host (IN), and whether it failed
/// (CHECK CONDITION, sense data kept for REQUEST SENSE).
pub(crate) struct Reply {
    pub data: Vec<u8>,
    pub failed: bool,
}

/// The disk as a SCSI target: its names and the sense data of the last
/// failed command.
pub(crate) struct Target {
    vendor: String,
    product: String,
    /// Sense key, additional sense code and qualifier.
    sense: (u8, u8, u8),
}

/// Sense key ILLEGAL REQUEST.
const ILLEGAL_REQUEST: u8 = 0x05;

impl Target {
    pub(crate) fn new(vendor: &str, product: &str) -> Target {
        Target {
            vendor: vendor.to_string(),
            product: product.to_string(),
            sense: (0, 0, 0),
        }
    }

    fn fail(&mut self, asc: u8) -> Reply {
        self.sense = (ILLEGAL_REQUEST, asc, 0);
        Reply {
            data: Vec::new(),
            failed: true,
        }
    }

    /// Run `cdb`; `out` is the data the host sent with it (WRITE's blocks,
    /// taken and not kept: the disk reads back its own pattern).
    pub(crate) fn command(&mut self, cdb: &[u8], _out: &[u8]) -> Reply {
        let ok = |data: Vec<u8>| Reply {
            data,
            failed: false,
        };
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let op = cdb.first().copied().unwrap_or(0xff);
        let reply = match (op, cdb.len()) {
            // TEST UNIT READY, PREVENT ALLOW MEDIUM REMOVAL, START STOP
            // UNIT, SYNCHRONIZE CACHE(10), VERIFY(10).
            (0x00 | 0x1e | 0x1b, 6..) | (0x35 | 0x2f, 10..) => ok(Vec::new()),
            (0x03, 6..) => {
                // REQUEST SENSE: fixed format, then the sense is cleared.
                let (key, asc, ascq) = std::mem::take(&mut self.sense);
                let mut s = vec![0u8; 18];
                s[0] = 0x70;
                s[2] = key;
                s[7] = 10;
                s[12] = asc;
                s[13] = ascq;
                s.truncate(cdb[4] as usize);
                return ok(s);
            }
            (0x12, 6..) => {
                let mut v = inquiry(&self.vendor, &self.product);
                if cdb[1] & 1 != 0 {
                    // Vital product data: the supported-pages page only.
                    if cdb[2] != 0 {
                        return self.fail(0x24);
                    }
                    v = vec![0x00, 0x00, 0x00, 0x01, 0x00];
                }
                v.truncate(u16::from_be_bytes([cdb[3], cdb[4]]) as usize);
                ok(v)
            }
            (0x25, 10..) => ok(capacity10()),
            (0x9e, 16..) if cdb[1] & 0x1f == 0x10 => {
                // READ CAPACITY(16).
                let mut v = vec![0u8; 32];
                v[4..8].copy_from_slice(&(CAPACITY - 1).to_be_bytes());
                v[8..12].copy_from_slice(&BLOCK.to_be_bytes());
                v.truncate(be32(&cdb[10..14]) as usize);
                ok(v)
            }
            (0x23, 10..) => {
                // READ FORMAT CAPACITIES: one formatted-media descriptor.
                let mut v = vec![0, 0, 0, 8];
                v.extend_from_slice(&CAPACITY.to_be_bytes());
                v.extend_from_slice(&(0x0200_0000 | BLOCK).to_be_bytes());
                v.truncate(u16::from_be_bytes([cdb[7], cdb[8]]) as usize);
                ok(v)
            }
            (0x1a, 6..) => {
                // MODE SENSE(6): no pages, not write-protected.
                let mut v = vec![0x03, 0, 0, 0];
                v.truncate(cdb[4] as usize);
                ok(v)
            }
            (0x5a, 10..) => {
                let mut v = vec![0, 6, 0, 0, 0, 0, 0, 0];
                v.truncate(u16::from_be_bytes([cdb[7], cdb[8]]) as usize);
                ok(v)
            }
            (0x28 | 0x2a, 10..) => {
                let lba = be32(&cdb[2..6]);
                let blocks = u16::from_be_bytes([cdb[7], cdb[8]]) as u32;
                if lba as u64 + blocks as u64 > CAPACITY as u64 {
                    // LOGICAL BLOCK ADDRESS OUT OF RANGE.
                    return self.fail(0x21);
                }
                if op == 0x28 {
                    ok(sector_data(lba, blocks))
                } else {
                    ok(Vec::new())
                }
            }
            // INVALID COMMAND OPERATION CODE.
            _ => return self.fail(0x20),
        };
        self.sense = (0, 0, 0);
        reply
    }
}

/// The bulk-only transport's state: a SCSI target, the command in
/// progress, what the host is to read, and the host's bulk IN URBs that wait
/// for it (tags and lengths: the transport's users give them back).
pub(crate) struct Bot {
    target: Target,
    /// A CBW whose OUT data is still coming, and the data so far.
    out: Option<(Cbw, Vec<u8>)>,
    /// The tag and data length of the last command run, whose data and CSW
    /// are in `to_host`.
    ran: Option<(u32, u32)>,
    /// What the host is to read, in order: a command's data, its CSW.
    pub to_host: VecDeque<Vec<u8>>,
    /// Programs' bulk IN URBs waiting for something to read: tag, length.
    pub waiting: VecDeque<(u64, u32)>,
}

/// The longest OUT data stage a CBW may announce that the drive buffers
/// (larger WRITEs are taken and counted, not kept).
const MAX_OUT: usize = 1 << 20;

impl Bot {
    pub(crate) fn new(vendor: &str, product: &str) -> Bot {
        Bot {
            target: Target::new(vendor, product),
            out: None,
            ran: None,
            to_host: VecDeque::new(),
            waiting: VecDeque::new(),
        }
    }

    /// Bulk-only mass storage reset (class request 0xff): the transport
    /// waits for a CBW again.
    pub(crate) fn reset(&mut self) {
        self.out = None;
        self.ran = None;
        self.to_host.clear();
    }

    /// The drive's time to answer a transfer once the host controller has
    /// it, before its bytes take their time on the bus: 30 to 200 µs.
    pub(crate) fn answer_ns(rng: &mut Rng) -> u64 {
        rng.range(30_000, 200_000)
    }

    /// The drive stalls the command's data stage (an injected stall): none
    /// of the data moves, and the CSW that follows the host's clear-halt
    /// gives the whole length as the residue and status 1, command failed
    /// (BOT 6.7.2 and 6.7.3: the device ends a data stage it will not
    /// finish with a STALL).
    pub(crate) fn stall_data(&mut self) {
        let cmd = match self.out.take() {
            Some((cbw, _)) => Some((cbw.tag, cbw.length)),
            None => self.ran,
        };
        if let Some((tag, length)) = cmd {
            self.to_host.clear();
            self.to_host.push_back(csw(tag, length, 1).to_vec());
        }
    }

    /// Run a command, queueing its data (at most what the CBW asked for)
    /// and its CSW.
    fn run(&mut self, cbw: &Cbw, out: &[u8]) {
        self.ran = Some((cbw.tag, cbw.length));
        let r = self.target.command(&cbw.cdb, out);
        let status = u8::from(r.failed);
        let mut data = r.data;
        let residue = if cbw.dir_in {
            data.truncate(cbw.length as usize);
            cbw.length - data.len() as u32
        } else {
            cbw.length.saturating_sub(out.len() as u32)
        };
        if cbw.dir_in && cbw.length > 0 && !data.is_empty() {
            self.to_host.push_back(data);
        }
        self.to_host
            .push_back(csw(cbw.tag, residue, status).to_vec());
    }

    /// The host sent `data` on bulk OUT. Err: not a valid CBW where one
    /// was due (the device stalls).
    pub(crate) fn host_out(&mut self, data: &[u8]) -> Result<(), ()> {
        if let Some((cbw, mut got)) = self.out.take() {
            let want = cbw.length as usize;
            let room = want.min(MAX_OUT).saturating_sub(got.len());
            got.extend_from_slice(&data[..data.len().min(room)]);
            let seen = got.len() + data.len().saturating_sub(room);
            if seen >= want {
                self.run(&cbw, &got);
            } else {
                self.out = Some((cbw, got));
            }
            return Ok(());
        }
        let cbw = Cbw::parse(data).ok_or(())?;
        if !cbw.dir_in && cbw.length > 0 {
            self.out = Some((cbw, Vec::new()));
        } else {
            self.run(&cbw, &[]);
        }
        Ok(())
    }

    /// The next chunk for a bulk IN of `len` bytes, if there is one: the
    /// rest of a data stage or a CSW, cut to `len`.
    pub(crate) fn host_in(&mut self, len: u32) -> Option<Vec<u8>> {
        let front = self.to_host.front_mut()?;
        let n = front.len().min(len as usize);
        let chunk: Vec<u8> = front.drain(..n).collect();
        if front.is_empty() {
            self.to_host.pop_front();
        }
        Some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_answer_as_a_disk_and_unknown_ones_fail_with_sense() {
        let mut t = Target::new("QEMU", "QEMU HARDDISK");
        let r = t.command(&[0x12, 0, 0, 0, 36, 0], &[]);
        assert_eq!(&r.data[8..12], b"QEMU");
        assert_eq!(r.data.len(), 36);
        let r = t.command(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
        assert_eq!(r.data, capacity10());
        let r = t.command(&[0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0], &[]);
        assert_eq!(&r.data[..10], b"MONFS-LBA-");
        assert!(t.command(&[0xc7, 0, 0, 0, 0, 0], &[]).failed);
        let s = t.command(&[0x03, 0, 0, 0, 18, 0], &[]);
        assert_eq!((s.data[2], s.data[12]), (ILLEGAL_REQUEST, 0x20));
        let s = t.command(&[0x03, 0, 0, 0, 18, 0], &[]);
        assert_eq!((s.data[2], s.data[12]), (0, 0), "cleared once read");
        let mut cbw = b"USBC".to_vec();
        cbw.extend_from_slice(&7u32.to_le_bytes());
        cbw.extend_from_slice(&36u32.to_le_bytes());
        cbw.extend_from_slice(&[0x80, 0, 6, 0x12, 0, 0, 0, 36, 0]);
        cbw.resize(31, 0);
        let c = Cbw::parse(&cbw).unwrap();
        assert_eq!((c.tag, c.length, c.dir_in, c.cdb.len()), (7, 36, true, 6));
        assert!(Cbw::parse(&cbw[..30]).is_none());
        assert_eq!(&csw(7, 0, 0)[..8], b"USBS\x07\0\0\0");
    }
}
