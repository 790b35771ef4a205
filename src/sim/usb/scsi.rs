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

/// qemu's usb-storage's product string.
pub(crate) const USB_PRODUCT: &str = "QEMU USB HARDDRIVE";

/// The vendor and product names a drive's INQUIRY gives, from its
/// manufacturer and product strings. qemu's usb-storage's disk is a
/// scsi-hd with scsi-hd's own names whatever the USB strings say
/// (scsi_realize, scsi_hd_realize: "QEMU", "QEMU HARDDISK"): a drive with
/// qemu's strings (or none) answers those; one given its own names (its
/// configuration's `manufacturer:`, `product:`) reports them, as a real
/// stick reports its own.
pub(crate) fn names<'a>(
    manufacturer: Option<&'a str>,
    product: Option<&'a str>,
) -> (&'a str, &'a str) {
    (
        manufacturer.unwrap_or("QEMU"),
        match product {
            None | Some(USB_PRODUCT) => "QEMU HARDDISK",
            Some(p) => p,
        },
    )
}

/// The product revision level of INQUIRY: qemu's hardware version
/// (qemu_hw_version, QEMU_HW_VERSION for the machine types of qemu 2.5 on).
pub(crate) const REVISION: &str = "2.5+";

/// The standard INQUIRY data for an allocation length of `alloc` as
/// scsi-disk's scsi_disk_emulate_inquiry builds it: a direct-access device,
/// not removable (usb-storage's `removable` is off), SPC-3 (version 5),
/// response data format 2 with HiSup, synchronous transfer (byte 7 0x10,
/// no command queueing on usb-storage's bus), the names and revision; the
/// additional length counts what the allocation length asks beyond 36
/// bytes (at most 256). Padded with zeros to `alloc`.
pub(crate) fn inquiry(vendor: &str, product: &str, alloc: usize) -> Vec<u8> {
    let mut v = vec![0x00, 0x00, 0x05, 0x12, 0x1f, 0x00, 0x00, 0x10];
    v.extend(pad(vendor, 8));
    v.extend(pad(product, 16));
    v.extend(REVISION.bytes());
    let n = alloc.min(256);
    if n > 36 {
        v[4] = (n - 5) as u8;
    }
    v.resize(alloc, 0);
    v
}

/// The disk's geometry as qemu guesses it for scsi-hd's mode pages
/// (hd_geometry_guess: the partition table's ending head is 0, so
/// guess_chs_for_size): cylinders, heads, sectors per track.
fn geometry(blocks: u32) -> (u32, u8, u8) {
    ((blocks / (16 * 63)).clamp(2, 16383), 16, 63)
}

/// Mode page `page` as scsi-disk's mode_sense_page gives it for a disk of
/// `blocks` blocks with page control `pc` (1: the changeable values), its
/// two-byte header first; None: a page a disk does not have.
fn mode_page(page: u8, pc: u8, blocks: u32) -> Option<Vec<u8>> {
    let (cyls, heads, secs) = geometry(blocks);
    let changeable = pc == 1;
    let mut p = match page {
        // Read-write error recovery: automatic write reallocation.
        0x01 => {
            let mut p = vec![0u8; 10];
            if !changeable {
                p[0] = 0x80;
            }
            p
        }
        // Rigid disk geometry.
        0x04 => {
            let mut p = vec![0u8; 0x16];
            if !changeable {
                let c = cyls.to_be_bytes();
                p[0..3].copy_from_slice(&c[1..4]);
                p[3] = heads;
                // Write precompensation and reduced current start: off.
                p[4..7].copy_from_slice(&c[1..4]);
                p[7..10].copy_from_slice(&c[1..4]);
                // Step rate 200 ns, landing zone, 5400 rpm.
                p[11] = 200;
                p[12..15].fill(0xff);
                p[18..20].copy_from_slice(&5400u16.to_be_bytes());
            }
            p
        }
        // Flexible disk.
        0x05 => {
            let mut p = vec![0u8; 0x1e];
            if !changeable {
                let c = (cyls as u16).to_be_bytes();
                p[0..2].copy_from_slice(&5000u16.to_be_bytes());
                p[2] = heads;
                p[3] = secs;
                p[4] = (BLOCK >> 8) as u8;
                p[6..8].copy_from_slice(&c);
                p[8..10].copy_from_slice(&c);
                p[10..12].copy_from_slice(&c);
                p[13] = 1;
                p[14] = 1;
                p[16] = 1;
                p[17] = 1;
                p[18] = 1;
                p[26..28].copy_from_slice(&5400u16.to_be_bytes());
            }
            p
        }
        // Caching: write cache enabled (and changeable), as qemu's default
        // writeback drive.
        0x08 => {
            let mut p = vec![0u8; 0x12];
            p[0] = 4;
            p
        }
        _ => return None,
    };
    let mut v = vec![page, p.len() as u8];
    v.append(&mut p);
    Some(v)
}

/// MODE SENSE(6) or (10) (`cdb[0]` 0x1a or 0x5a) as scsi-disk's
/// scsi_disk_emulate_mode_sense answers it for a disk of `blocks` blocks:
/// the header (writable, no DPO/FUA), the block descriptor unless DBD (the
/// block count, 0 past 24 bits, and the block size), then the page asked
/// or all of them (0x3f); Err: the sense of its failure. Not yet cut or
/// padded to the allocation length.
fn mode_sense(cdb: &[u8], blocks: u32) -> Result<Vec<u8>, Sense> {
    let six = cdb[0] == 0x1a;
    let dbd = cdb[1] & 0x08 != 0;
    let page = cdb[2] & 0x3f;
    let pc = cdb[2] >> 6;
    let mut v = vec![0u8; if six { 4 } else { 8 }];
    if !dbd {
        v[if six { 3 } else { 7 }] = 8;
        let n = if blocks > 0xff_ffff { 0 } else { blocks };
        v.extend_from_slice(&[0, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
        v.extend_from_slice(&[0, 0, (BLOCK >> 8) as u8, 0]);
    }
    if pc == 3 {
        return Err(SAVING_PARAMS_NOT_SUPPORTED);
    }
    if page == 0x3f {
        for p in 0..0x3f {
            v.extend(mode_page(p, pc, blocks).unwrap_or_default());
        }
    } else {
        v.extend(mode_page(page, pc, blocks).ok_or(INVALID_FIELD)?);
    }
    let n = v.len();
    if six {
        v[0] = (n - 1) as u8;
    } else {
        v[0..2].copy_from_slice(&((n - 2) as u16).to_be_bytes());
    }
    Ok(v)
}

/// The vital product data page `page` as scsi-disk's
/// scsi_disk_emulate_vpd_page gives it for usb-storage's disk (no serial
/// number, an anonymous drive: no designator; unmapping with qemu's
/// default 4 KiB granularity and 1 GiB limit, transfers up to qemu's
/// INT_MAX bytes); None: a page it does not have.
fn vpd(page: u8) -> Option<Vec<u8>> {
    let mut v = vec![0x00, page, 0, 0];
    match page {
        // Supported pages: this one, device identification, block limits,
        // block device characteristics, logical block provisioning.
        0x00 => v.extend_from_slice(&[0x00, 0x83, 0xb0, 0xb1, 0xb2]),
        0x83 => {}
        0xb0 => {
            let max_io = (i32::MAX as u32 & !(BLOCK - 1)) / BLOCK;
            let mut b = vec![0u8; 0x3c];
            b[0] = 1; // WSNZ
            b[4..8].copy_from_slice(&max_io.to_be_bytes());
            b[16..20].copy_from_slice(&((1u32 << 30) / BLOCK).to_be_bytes());
            b[20..24].copy_from_slice(&255u32.to_be_bytes());
            b[24..28].copy_from_slice(&(4096 / BLOCK).to_be_bytes());
            b[36..40].copy_from_slice(&max_io.to_be_bytes());
            v.extend(b);
        }
        // Rotation rate not reported.
        0xb1 => v.resize(0x40, 0),
        // UNMAP, WRITE SAME(16) and (10) with unmap; thin provisioned.
        0xb2 => v.extend_from_slice(&[0, 0xe0, 2, 0]),
        _ => return None,
    }
    v[3] = (v.len() - 4) as u8;
    Some(v)
}

/// READ CAPACITY(10)'s answer: the last block and the block size.
pub(crate) fn capacity10() -> Vec<u8> {
    let mut v = (CAPACITY - 1).to_be_bytes().to_vec();
    v.extend_from_slice(&BLOCK.to_be_bytes());
    v
}

/// The 31 bytes of a CBW: tag `tag`, `len` bytes of data in direction
/// `dir_in` (bmCBWFlags' bit 7), LUN 0, command block `cdb`.
pub(crate) fn cbw(tag: u32, len: u32, dir_in: bool, cdb: &[u8]) -> Vec<u8> {
    let mut b = b"USBC".to_vec();
    b.extend_from_slice(&tag.to_le_bytes());
    b.extend_from_slice(&len.to_le_bytes());
    b.extend_from_slice(&[if dir_in { 0x80 } else { 0 }, 0, cdb.len() as u8]);
    b.extend_from_slice(cdb);
    b.resize(31, 0);
    b
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

/// What a command gives: its data for the host (IN), how much of the
/// host's data it takes (OUT), and whether it failed (CHECK CONDITION,
/// sense data kept for REQUEST SENSE).
pub(crate) struct Reply {
    pub data: Vec<u8>,
    pub takes: u32,
    pub failed: bool,
}

/// Sense key, additional sense code and qualifier.
type Sense = (u8, u8, u8);

/// Sense key ILLEGAL REQUEST.
const ILLEGAL_REQUEST: u8 = 0x05;
/// INVALID COMMAND OPERATION CODE.
const INVALID_OPCODE: Sense = (ILLEGAL_REQUEST, 0x20, 0);
/// LOGICAL BLOCK ADDRESS OUT OF RANGE.
const LBA_OUT_OF_RANGE: Sense = (ILLEGAL_REQUEST, 0x21, 0);
/// INVALID FIELD IN CDB.
const INVALID_FIELD: Sense = (ILLEGAL_REQUEST, 0x24, 0);
/// SAVING PARAMETERS NOT SUPPORTED.
const SAVING_PARAMS_NOT_SUPPORTED: Sense = (ILLEGAL_REQUEST, 0x39, 0);

/// The longest data stage scsi-disk answers an emulated command with
/// (a longer allocation length is an invalid field).
const MAX_EMULATED: usize = 65536;

/// Sense data `s` in fixed format (18 bytes) or, with `desc`, descriptor
/// format (8 bytes), as qemu's scsi_build_sense_buf.
fn sense_data(s: Sense, desc: bool) -> Vec<u8> {
    let (key, asc, ascq) = s;
    if desc {
        return vec![0x72, key, asc, ascq, 0, 0, 0, 0];
    }
    let mut v = vec![0u8; 18];
    v[0] = 0x70;
    v[2] = key;
    v[7] = 10;
    v[12] = asc;
    v[13] = ascq;
    v
}

/// The disk as qemu's scsi-hd on usb-storage's bus answers it: its names
/// and the sense data of the last failed command.
pub(crate) struct Target {
    vendor: String,
    product: String,
    /// The sense of the last command, if it failed (scsi_req_complete
    /// keeps it for the next REQUEST SENSE; any command that completes
    /// GOOD clears it).
    sense: Option<Sense>,
}

impl Target {
    pub(crate) fn new(vendor: &str, product: &str) -> Target {
        Target {
            vendor: vendor.to_string(),
            product: product.to_string(),
            sense: None,
        }
    }

    fn fail(&mut self, s: Sense) -> Reply {
        self.sense = Some(s);
        Reply {
            data: Vec::new(),
            takes: 0,
            failed: true,
        }
    }

    /// Run `cdb`; `out` is the data the host sent with it (WRITE's blocks,
    /// taken and not kept: the disk reads back its own pattern).
    ///
    /// As scsi-disk does: an emulated command (INQUIRY, MODE SENSE, READ
    /// CAPACITY, REQUEST SENSE) transfers its whole allocation length, its
    /// answer padded with zeros (scsi_disk_emulate_command's buffer);
    /// REQUEST SENSE after a failure gives the sense data alone
    /// (scsi-bus's target command); a command scsi-disk does not know, or
    /// a CDB shorter than its group's length (scsi_req_parse_cdb), fails
    /// with INVALID COMMAND OPERATION CODE.
    pub(crate) fn command(&mut self, cdb: &[u8], _out: &[u8]) -> Reply {
        let ok = |data: Vec<u8>, takes: u32| Reply {
            data,
            takes,
            failed: false,
        };
        let be16 = |b: &[u8]| u16::from_be_bytes([b[0], b[1]]) as usize;
        let be32 = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        let op = cdb.first().copied().unwrap_or(0xff);
        // scsi_cdb_length: the CDB's length by its group; groups 3, 6 and
        // 7 have none.
        let need = match op >> 5 {
            0 => 6,
            1 | 2 => 10,
            4 => 16,
            5 => 12,
            _ => usize::MAX,
        };
        if cdb.len() < need {
            return self.fail(INVALID_OPCODE);
        }
        // The allocation length of an emulated command (scsi_req_xfer),
        // which its answer is cut or padded to.
        let sized = |mut v: Vec<u8>, alloc: usize| {
            v.resize(alloc, 0);
            v
        };
        let reply = match op {
            // TEST UNIT READY, PREVENT ALLOW MEDIUM REMOVAL, START STOP
            // UNIT (the disk is not removable: nothing to load or eject),
            // SYNCHRONIZE CACHE(10) and (16).
            0x00 | 0x1e | 0x1b | 0x35 | 0x91 => ok(Vec::new(), 0),
            // RESERVE(6), RELEASE(6): no third-party reservation;
            // RESERVE(10), RELEASE(10): nor a long identifier.
            0x16 | 0x17 | 0x56 | 0x57 => {
                let bad = if op < 0x20 { 0x01 } else { 0x03 };
                if cdb[1] & bad != 0 {
                    return self.fail(INVALID_FIELD);
                }
                ok(Vec::new(), 0)
            }
            // SEEK(10): to a block of the disk.
            0x2b => {
                if be32(&cdb[2..6]) >= CAPACITY {
                    return self.fail(LBA_OUT_OF_RANGE);
                }
                ok(Vec::new(), 0)
            }
            // REPORT LUNS (scsi-bus's target command): LUN 0 alone, in an
            // allocation of at least 16 bytes, cut to whole entries.
            0xa0 => {
                let alloc = be32(&cdb[6..10]) as usize;
                if alloc < 16 || cdb[2] > 2 {
                    return self.fail(INVALID_FIELD);
                }
                let mut v = vec![0u8; 16];
                v[3] = 8;
                v.truncate(alloc & !7);
                ok(v, 0)
            }
            // VERIFY(10), (12), (16): without BYTCHK only (scsi-hd checks
            // no data).
            0x2f | 0xaf | 0x8f => {
                if cdb[1] & 0x06 != 0 {
                    return self.fail(INVALID_FIELD);
                }
                ok(Vec::new(), 0)
            }
            0x03 => {
                // REQUEST SENSE: the last failure's sense, cut to the
                // allocation length; without one, NO SENSE in a buffer of
                // the allocation length.
                let desc = cdb[1] & 1 != 0;
                let alloc = cdb[4] as usize;
                let data = match self.sense.take() {
                    Some(s) => {
                        let mut v = sense_data(s, desc);
                        v.truncate(alloc);
                        v
                    }
                    None => sized(sense_data((0, 0, 0), desc), alloc),
                };
                ok(data, 0)
            }
            0x12 => {
                let alloc = be16(&cdb[3..5]);
                if cdb[1] & 1 != 0 {
                    let Some(v) = vpd(cdb[2]) else {
                        return self.fail(INVALID_FIELD);
                    };
                    ok(sized(v, alloc), 0)
                } else if cdb[2] != 0 {
                    return self.fail(INVALID_FIELD);
                } else {
                    ok(inquiry(&self.vendor, &self.product, alloc), 0)
                }
            }
            0x25 => {
                // READ CAPACITY(10): an LBA only with PMI.
                if cdb[8] & 1 == 0 && be32(&cdb[2..6]) != 0 {
                    return self.fail(INVALID_FIELD);
                }
                ok(capacity10(), 0)
            }
            0x9e if cdb[1] & 0x1f == 0x10 => {
                // READ CAPACITY(16): the last block, the block size, one
                // logical block a physical one, thin provisioning enabled
                // (qemu's default discard granularity).
                let alloc = be32(&cdb[10..14]) as usize;
                let lba = u64::from_be_bytes(cdb[2..10].try_into().unwrap_or_default());
                if alloc > MAX_EMULATED || (cdb[14] & 1 == 0 && lba != 0) {
                    return self.fail(INVALID_FIELD);
                }
                let mut v = vec![0u8; 32];
                v[4..8].copy_from_slice(&(CAPACITY - 1).to_be_bytes());
                v[8..12].copy_from_slice(&BLOCK.to_be_bytes());
                v[14] = 0x80;
                ok(sized(v, alloc), 0)
            }
            0x1a | 0x5a => {
                let alloc = if op == 0x1a {
                    cdb[4] as usize
                } else {
                    be16(&cdb[7..9])
                };
                match mode_sense(cdb, CAPACITY) {
                    Ok(v) => ok(sized(v, alloc), 0),
                    Err(s) => return self.fail(s),
                }
            }
            // READ(6), WRITE(6) (a length of 0 is 256 blocks), READ(10),
            // WRITE(10).
            0x08 | 0x0a | 0x28 | 0x2a => {
                let (lba, blocks) = if op < 0x20 {
                    let lba = be32(&[0, cdb[1] & 0x1f, cdb[2], cdb[3]]);
                    (lba, if cdb[4] == 0 { 256 } else { cdb[4] as u32 })
                } else {
                    (be32(&cdb[2..6]), be16(&cdb[7..9]) as u32)
                };
                // No protection information (RDPROTECT, WRPROTECT; the
                // same bits in the 6-byte commands, as scsi-disk checks).
                if cdb[1] & 0xe0 != 0 {
                    return self.fail(INVALID_FIELD);
                }
                if lba as u64 + blocks as u64 > CAPACITY as u64 {
                    return self.fail(LBA_OUT_OF_RANGE);
                }
                if op & 0x02 == 0 {
                    ok(sector_data(lba, blocks), 0)
                } else {
                    ok(Vec::new(), blocks * BLOCK)
                }
            }
            _ => return self.fail(INVALID_OPCODE),
        };
        self.sense = None;
        reply
    }
}

/// Something the host is to read: a command's data stage, or its CSW.
pub(crate) struct ToHost {
    /// The bytes.
    bytes: Vec<u8>,
    /// The zeros that follow them: qemu's usb-storage, once the SCSI data
    /// ran out short of the CBW's length, fills each packet of the data
    /// stage to its end (usb_packet_skip) until that length is used up.
    pad: u32,
}

impl ToHost {
    /// The CSW of the command `tag`.
    fn csw(tag: u32, residue: u32, status: u8) -> ToHost {
        ToHost {
            bytes: csw(tag, residue, status).to_vec(),
            pad: 0,
        }
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
    pub to_host: VecDeque<ToHost>,
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
            self.to_host.push_back(ToHost::csw(tag, length, 1));
        }
    }

    /// Run a command, queueing its data stage and its CSW as qemu's
    /// usb-storage gives them (usb_msd_copy_data, usb_msd_command_complete,
    /// usb_msd_handle_data_in): an IN stage carries the SCSI data, at most
    /// the CBW's length, then zeros (see [`ToHost`]); the residue is what
    /// of the CBW's length the SCSI data left, IN or OUT (an OUT stage's
    /// bytes the command did not take are taken and dropped).
    fn run(&mut self, cbw: &Cbw, out: &[u8]) {
        self.ran = Some((cbw.tag, cbw.length));
        let r = self.target.command(&cbw.cdb, out);
        let status = u8::from(r.failed);
        let residue = if cbw.dir_in {
            let mut data = r.data;
            data.truncate(cbw.length as usize);
            let residue = cbw.length - data.len() as u32;
            if cbw.length > 0 {
                self.to_host.push_back(ToHost {
                    bytes: data,
                    pad: residue,
                });
            }
            residue
        } else {
            cbw.length.saturating_sub(r.takes)
        };
        self.to_host
            .push_back(ToHost::csw(cbw.tag, residue, status));
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
    /// rest of a data stage or a CSW, cut to `len`; a data stage's padding
    /// fills the packet to `len`.
    pub(crate) fn host_in(&mut self, len: u32) -> Option<Vec<u8>> {
        let front = self.to_host.front_mut()?;
        let n = front.bytes.len().min(len as usize);
        let mut chunk: Vec<u8> = front.bytes.drain(..n).collect();
        if front.bytes.is_empty() && front.pad > 0 {
            let fill = len - n as u32;
            chunk.resize(len as usize, 0);
            front.pad = front.pad.saturating_sub(fill);
        }
        if front.bytes.is_empty() && front.pad == 0 {
            self.to_host.pop_front();
        }
        Some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes from usbmon's hex words.
    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// A command through the transport, its data stage read with one
    /// bulk IN of the CBW's length: the data read and the CSW's residue
    /// and status.
    fn transact(b: &mut Bot, len: u32, cdb: &[u8]) -> (Vec<u8>, u32, u8) {
        b.host_out(&cbw(9, len, true, cdb)).unwrap();
        let data = if len > 0 {
            b.host_in(len).unwrap()
        } else {
            Vec::new()
        };
        let c = b.host_in(13).unwrap();
        assert_eq!((&c[..4], c[4]), (&b"USBS"[..], 9));
        let residue = u32::from_le_bytes([c[8], c[9], c[10], c[11]]);
        assert!(b.to_host.is_empty());
        (data, residue, c[12])
    }

    /// sd's INQUIRY and MODE SENSE(6) of all pages as qemu's usb-storage
    /// and scsi-hd answer them (kernel-vm's oracle, its 16 MiB stick:
    /// usbmon's first 32 bytes of each).
    #[test]
    fn inquiry_and_mode_sense_are_qemus() {
        let mut b = Bot::new("QEMU", "QEMU HARDDISK");
        let (data, residue, status) = transact(&mut b, 36, &[0x12, 0, 0, 0, 36, 0]);
        let oracle = hex("00000512 1f000010 51454d55 20202020 51454d55 20484152 44444953 4b202020");
        assert_eq!(data[..32], oracle[..]);
        assert_eq!(&data[32..], b"2.5+");
        assert_eq!((residue, status), (0, 0));

        let sense = [0x1a, 0, 0x3f, 0, 192, 0];
        let mut v = mode_sense(&sense, 0x8000).unwrap();
        assert_eq!(
            (v.len(), v[0]),
            (100, 0x63),
            "header, descriptor, pages 1 4 5 8"
        );
        v.resize(192, 0);
        let oracle = hex("63000008 00008000 00000200 010a8000 00000000 00000000 04160000 20100000");
        assert_eq!(v[..32], oracle[..]);
        // The pages after: the geometry's rest, flexible disk, caching.
        assert_eq!(v[32..48], hex("20000020 00c8ffff ff000000 15180000")[..]);
        assert_eq!(&v[48..52], &[0x05, 0x1e, 0x13, 0x88]);
        assert_eq!(&v[80..84], &[0x08, 0x12, 0x04, 0x00]);

        // monfs's 2 GiB disk: its block count and 4161 cylinders; the
        // whole 192 bytes move and the residue is 0.
        let (data, residue, status) = transact(&mut b, 192, &sense);
        assert_eq!((data.len(), residue, status), (192, 0, 0));
        assert_eq!(data[..8], hex("63000008 00400000")[..]);
        assert_eq!(data[26..30], [0x00, 0x10, 0x41, 16]);
        assert!(data[100..].iter().all(|&x| x == 0));
    }

    #[test]
    fn qemus_names_unless_the_drive_has_its_own() {
        assert_eq!(
            names(Some("QEMU"), Some(USB_PRODUCT)),
            ("QEMU", "QEMU HARDDISK")
        );
        assert_eq!(names(None, None), ("QEMU", "QEMU HARDDISK"));
        assert_eq!(names(Some("ACME"), Some("Stick")), ("ACME", "Stick"));
    }

    #[test]
    fn commands_answer_as_a_disk_and_unknown_ones_fail_with_sense() {
        let mut t = Target::new("QEMU", "QEMU HARDDISK");
        // A longer allocation: the additional length counts it.
        let r = t.command(&[0x12, 0, 0, 0, 96, 0], &[]);
        assert_eq!((r.data.len(), r.data[4]), (96, 91));
        assert_eq!(&r.data[8..12], b"QEMU");
        let r = t.command(&[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
        assert_eq!(r.data, capacity10());
        assert!(t.command(&[0x25, 0, 0, 0, 0, 1, 0, 0, 0, 0], &[]).failed);
        let r = t.command(
            &[0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0],
            &[],
        );
        assert_eq!(r.data[..16], hex("00000000 003fffff 00000200 00008000")[..]);
        let r = t.command(&[0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0], &[]);
        assert_eq!(&r.data[..10], b"MONFS-LBA-");
        // Vital product data: the supported pages, the thin provisioning.
        let r = t.command(&[0x12, 1, 0, 0, 16, 0], &[]);
        assert_eq!(r.data, hex("00000005 0083b0b1 b2000000 00000000"));
        let r = t.command(&[0x12, 1, 0xb2, 0, 8, 0], &[]);
        assert_eq!(r.data, hex("00b20004 00e00200"));
        assert!(t.command(&[0x12, 1, 0x80, 0, 8, 0], &[]).failed);
        // Saved values, a page a disk has not.
        let s = t.command(&[0x1a, 0, 0xc8, 0, 192, 0], &[]);
        assert!(s.failed);
        let s = t.command(&[0x03, 0, 0, 0, 18, 0], &[]);
        assert_eq!((s.data[2], s.data[12]), (ILLEGAL_REQUEST, 0x39));
        assert!(t.command(&[0x1a, 0, 0x02, 0, 192, 0], &[]).failed);
        // READ(6) of 256 blocks; REPORT LUNS: LUN 0.
        let r = t.command(&[0x08, 0, 0, 2, 0, 0], &[]);
        assert_eq!(
            (r.data.len(), &r.data[..18]),
            (256 * 512, &b"MONFS-LBA-00000002"[..])
        );
        let r = t.command(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0], &[]);
        assert_eq!(r.data, hex("00000008 00000000 00000000 00000000"));
        assert!(
            t.command(&[0xa0, 0, 0, 0, 0, 0, 0, 0, 0, 8, 0, 0], &[])
                .failed
        );
        assert!(t.command(&[0x2b, 0, 0, 0x40, 0, 0, 0, 0, 0, 0], &[]).failed);
        // READ FORMAT CAPACITIES is none of scsi-hd's.
        assert!(t.command(&[0x23, 0, 0, 0, 0, 0, 0, 0, 12, 0], &[]).failed);
        assert!(t.command(&[0xc7, 0, 0, 0, 0, 0], &[]).failed);
        let s = t.command(&[0x03, 0, 0, 0, 18, 0], &[]);
        assert_eq!(s.data, hex("70000500 0000000a 00000000 20000000 0000"));
        let s = t.command(&[0x03, 0, 0, 0, 18, 0], &[]);
        assert_eq!(
            (s.data[0], s.data[2], s.data[12]),
            (0x70, 0, 0),
            "cleared once read"
        );
        let b = cbw(7, 36, true, &[0x12, 0, 0, 0, 36, 0]);
        assert_eq!(b[12..15], [0x80, 0, 6]);
        let c = Cbw::parse(&b).unwrap();
        assert_eq!((c.tag, c.length, c.dir_in, c.cdb.len()), (7, 36, true, 6));
        assert!(Cbw::parse(&b[..30]).is_none());
        assert_eq!(&csw(7, 0, 0)[..8], b"USBS\x07\0\0\0");
    }

    /// What the CBW asks beyond the SCSI data: qemu's usb-storage sends
    /// zeros for it and reports it as the residue.
    #[test]
    fn short_data_is_padded_with_zeros_and_counted_as_residue() {
        let mut b = Bot::new("QEMU", "QEMU HARDDISK");
        // A command that fails: its whole data stage zeros.
        let (data, residue, status) = transact(&mut b, 36, &[0xc7, 0, 0, 0, 36, 0]);
        assert_eq!((data, residue, status), (vec![0; 36], 36, 1));
        // Its sense alone, then zeros.
        let (data, residue, status) = transact(&mut b, 96, &[0x03, 0, 0, 0, 96, 0]);
        assert_eq!((data.len(), residue, status), (96, 78, 0));
        assert_eq!((data[2], data[12]), (ILLEGAL_REQUEST, 0x20));
        assert!(data[18..].iter().all(|&x| x == 0));
        // No sense: NO SENSE in the whole allocation.
        let (data, residue, _) = transact(&mut b, 96, &[0x03, 0, 0, 0, 96, 0]);
        assert_eq!((data.len(), residue, data[0]), (96, 0, 0x70));
        // A shorter allocation than the CBW's: the rest in packets of zeros.
        b.host_out(&cbw(9, 64, true, &[0x12, 0, 0, 0, 36, 0]))
            .unwrap();
        assert_eq!(b.host_in(32).unwrap().len(), 32);
        let rest = b.host_in(64).unwrap();
        assert_eq!(rest.len(), 64, "the packet filled to its end");
        assert!(rest[4..].iter().all(|&x| x == 0));
        let c = b.host_in(13).unwrap();
        assert_eq!(u32::from_le_bytes([c[8], c[9], c[10], c[11]]), 28);
        // WRITE(10): the blocks taken, residue 0; out of range: all left.
        b.host_out(&cbw(9, 512, false, &[0x2a, 0, 0, 0, 0, 1, 0, 0, 1, 0]))
            .unwrap();
        b.host_out(&[0; 512]).unwrap();
        assert_eq!(b.host_in(13).unwrap()[8..], [0, 0, 0, 0, 0]);
        b.host_out(&cbw(9, 512, false, &[0x2a, 0, 0xff, 0, 0, 0, 0, 0, 1, 0]))
            .unwrap();
        b.host_out(&[0; 512]).unwrap();
        assert_eq!(b.host_in(13).unwrap()[8..], [0, 2, 0, 0, 1]);
    }
}
