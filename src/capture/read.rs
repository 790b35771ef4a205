//! Reading pcap and pcapng containers into raw packet records. Only the
//! bytes present are held: a record longer than the rest of the file is
//! reported as truncated (as libpcap's "truncated dump file") before
//! anything is copied, and one longer than any event usbmon can produce is
//! not plausible.

use std::path::Path;

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{Endianness, PcapError, TsResolution};

use crate::usbmon::header::{ISODESC_MAX, PKT_SZ_API1};
use crate::usbmon::ring::BUFF_MAX;

/// `LINKTYPE_USB_LINUX`: the 48-byte header.
pub const LINKTYPE_USB_LINUX: u32 = 189;
/// `LINKTYPE_USB_LINUX_MMAPPED`: the 64-byte header.
pub const LINKTYPE_USB_LINUX_MMAPPED: u32 = 220;

/// Largest `len_cap` usbmon produces: 128 ISO descriptors and the data
/// limit of the largest ring. `mon_bin_event` cuts the data at a fifth of
/// the reader's ring (`if (length >= rp->b_size/5) length = rp->b_size/5`)
/// and a ring is at most `BUFF_MAX` (64 MiB), so about 12.8 MiB.
pub const MAX_LEN_CAP: usize = ISODESC_MAX * 16 + BUFF_MAX as usize / 5;
/// Largest packet record accepted: a 64-byte header and [`MAX_LEN_CAP`].
pub(super) const MAX_PACKET: usize = PKT_SZ_API1 + MAX_LEN_CAP;

/// The container of a capture file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Container {
    /// Classic libpcap format.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// One packet as stored in a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// Byte offset of the packet's data in the file.
    pub offset: u64,
    /// 0-based packet number (usbmon packets and others).
    pub index: usize,
    /// Link type of the packet's interface.
    pub linktype: u32,
    /// Timestamp, ns since the epoch.
    pub ts_ns: u64,
    /// Whether the file (pcapng: section) is big-endian; the usbmon header is
    /// in that byte order.
    pub big_endian: bool,
    /// Original length.
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Why a capture cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Truncated or corrupt at `offset`.
    #[error("{path}: byte offset {offset}: {message}")]
    Corrupt {
        /// The file.
        path: String,
        /// Byte offset of the bad structure (header, block or packet data).
        offset: u64,
        /// What is wrong.
        message: String,
    },
}

impl CaptureError {
    /// The byte offset of a corrupt capture.
    pub fn offset(&self) -> Option<u64> {
        match self {
            CaptureError::Corrupt { offset, .. } => Some(*offset),
            CaptureError::Io { .. } => None,
        }
    }
}

pub(crate) fn corrupt(path: &Path, offset: u64, message: impl Into<String>) -> CaptureError {
    CaptureError::Corrupt {
        path: path.display().to_string(),
        offset,
        message: message.into(),
    }
}

/// A packet record of `len` captured bytes fits [`MAX_PACKET`], else the
/// capture is corrupt at `at`.
fn plausible(path: &Path, at: usize, index: usize, len: usize) -> Result<(), CaptureError> {
    if len > MAX_PACKET {
        return Err(corrupt(
            path,
            at as u64,
            format!("packet {index}: captured length {len} is not plausible"),
        ));
    }
    Ok(())
}

fn u32_in(b: &[u8], big: bool) -> u32 {
    let a: [u8; 4] = b[..4].try_into().unwrap();
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// The largest capture file replay loads (it is held in memory).
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;

/// Open `path` for reading the way the daemon opens every file named on a
/// caller's behalf (captures, `descriptors` dumps, from the configuration
/// or a control command): without blocking (a FIFO is never waited on),
/// and never through a symlink at `path` (ELOOP). Read it with
/// [`read_regular`].
pub fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The bytes of the file open as `file`, read by the rules for every file
/// the daemon reads on a caller's behalf: only a regular file (never a
/// device such as /dev/zero, a FIFO or a socket) of at most `cap` bytes,
/// and only the size `fstat` gave at the start (a file that grows meanwhile
/// is read as it was). The file offset is not moved (the descriptor may be
/// shared with the client that passed it). Call it outside every lock: the
/// file may be slow (on a FUSE or network file system).
pub fn read_regular(file: &std::fs::File, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let invalid = |m: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, m);
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(invalid("not a regular file".into()));
    }
    if meta.len() > cap {
        return Err(invalid(format!(
            "{} bytes is more than the {cap}-byte limit",
            meta.len()
        )));
    }
    let mut bytes = vec![0u8; meta.len() as usize];
    let mut got = 0;
    while got < bytes.len() {
        match file.read_at(&mut bytes[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    bytes.truncate(got);
    Ok(bytes)
}

/// [`open_nofollow`] then [`read_regular`].
pub fn read_regular_path(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    read_regular(&open_nofollow(path)?, cap)
}

/// Read every packet of a pcap or pcapng file named in the configuration,
/// opened by [`open_nofollow`] and read as [`read_records_from`] reads a
/// descriptor.
pub fn read_records(path: &Path) -> Result<(Container, Vec<RawRecord>), CaptureError> {
    let file = open_nofollow(path).map_err(|source| CaptureError::Io {
        path: path.display().to_string(),
        source,
    })?;
    read_records_from(&file, path)
}

/// Read every packet of the capture open as `file` (`name` labels it in
/// errors), by [`read_regular`]'s rules, at most [`MAX_CAPTURE_BYTES`].
pub fn read_records_from(
    file: &std::fs::File,
    name: &Path,
) -> Result<(Container, Vec<RawRecord>), CaptureError> {
    let bytes = read_regular(file, MAX_CAPTURE_BYTES).map_err(|source| CaptureError::Io {
        path: name.display().to_string(),
        source,
    })?;
    parse_records(name, &bytes)
}

/// Parse the packets of a capture held in memory; `path` names it in errors.
pub fn parse_records(
    path: &Path,
    bytes: &[u8],
) -> Result<(Container, Vec<RawRecord>), CaptureError> {
    if bytes.len() < 4 {
        return Err(corrupt(
            path,
            0,
            format!("truncated: {} bytes, not even a file header", bytes.len()),
        ));
    }
    let magic = u32::from_be_bytes(bytes[..4].try_into().unwrap());
    match magic {
        0x0A0D_0D0A => parse_pcapng(path, bytes).map(|r| (Container::PcapNg, r)),
        0xA1B2_C3D4 | 0xA1B2_3C4D | 0xD4C3_B2A1 | 0x4D3C_B2A1 => {
            parse_pcap(path, bytes).map(|r| (Container::Pcap, r))
        }
        m => Err(corrupt(
            path,
            0,
            format!("not a pcap or pcapng file (magic {m:#010x})"),
        )),
    }
}

fn check_linktype(path: &Path, offset: u64, lt: u32) -> Result<(), CaptureError> {
    if lt == LINKTYPE_USB_LINUX || lt == LINKTYPE_USB_LINUX_MMAPPED {
        Ok(())
    } else {
        Err(corrupt(
            path,
            offset,
            format!("link type {lt} is not usbmon (189 USB_LINUX or 220 USB_LINUX_MMAPPED)"),
        ))
    }
}

fn parse_pcap(path: &Path, bytes: &[u8]) -> Result<Vec<RawRecord>, CaptureError> {
    let (mut rest, parser) = PcapParser::new(bytes).map_err(|e| match e {
        PcapError::IncompleteBuffer => corrupt(
            path,
            0,
            format!("truncated pcap file header ({} of 24 bytes)", bytes.len()),
        ),
        e => corrupt(path, 0, format!("bad pcap file header: {e}")),
    })?;
    let h = parser.header();
    let big = h.endianness == Endianness::Big;
    let lt: u32 = h.datalink.into();
    check_linktype(path, 20, lt)?;
    let nano = h.ts_resolution == TsResolution::NanoSecond;
    let mut out = Vec::new();
    while !rest.is_empty() {
        let at = bytes.len() - rest.len();
        let n = out.len();
        if rest.len() < 16 {
            return Err(corrupt(
                path,
                at as u64,
                format!(
                    "packet {n}: truncated record header ({} of 16 bytes)",
                    rest.len()
                ),
            ));
        }
        let incl = u32_in(&rest[8..], big) as usize;
        plausible(path, at, n, incl)?;
        if incl > rest.len() - 16 {
            return Err(corrupt(
                path,
                at as u64 + 16,
                format!(
                    "packet {n}: truncated: {incl} bytes announced, {} present",
                    rest.len() - 16
                ),
            ));
        }
        let (next, p) = parser.next_raw_packet(rest).map_err(|e| match e {
            PcapError::IncompleteBuffer => corrupt(
                path,
                at as u64 + 16,
                format!(
                    "packet {n}: truncated: {incl} bytes announced, {} present",
                    rest.len() - 16
                ),
            ),
            e => corrupt(path, at as u64, format!("packet {n}: {e}")),
        })?;
        let frac_max = if nano { 1_000_000_000 } else { 1_000_000 };
        if p.ts_frac >= frac_max {
            return Err(corrupt(
                path,
                at as u64 + 4,
                format!("packet {n}: timestamp fraction {} out of range", p.ts_frac),
            ));
        }
        let frac_ns = if nano { p.ts_frac } else { p.ts_frac * 1000 } as u64;
        out.push(RawRecord {
            offset: at as u64 + 16,
            index: n,
            linktype: lt,
            ts_ns: p.ts_sec as u64 * 1_000_000_000 + frac_ns,
            big_endian: big,
            orig_len: p.orig_len,
            data: p.data.into_owned(),
        });
        rest = next;
    }
    Ok(out)
}

/// Nanoseconds of one timestamp unit, as `if_tsresol` gives it, as a ratio.
pub(super) fn tsresol_to_ns(ticks: u64, resol: u8) -> u64 {
    let t = ticks as u128;
    let ns = if resol & 0x80 != 0 {
        let p = (resol & 0x7f) as u32;
        if p >= 64 {
            0
        } else {
            (t * 1_000_000_000) >> p
        }
    } else {
        let p = resol as u32;
        if p <= 9 {
            t * 10u128.pow(9 - p)
        } else if p < 38 {
            t / 10u128.pow(p - 9)
        } else {
            0
        }
    };
    ns.min(u64::MAX as u128) as u64
}

fn parse_pcapng(path: &Path, bytes: &[u8]) -> Result<Vec<RawRecord>, CaptureError> {
    let block_err = |at: usize, rest: &[u8], big: bool, e: PcapError| -> CaptureError {
        if rest.len() < 12 {
            return corrupt(
                path,
                at as u64,
                format!("truncated block header ({} of 12 bytes)", rest.len()),
            );
        }
        let ty = u32_in(rest, big);
        let len = u32_in(&rest[4..], big) as usize;
        if len > rest.len() {
            corrupt(
                path,
                at as u64,
                format!(
                    "truncated block (type {ty:#x}): {len} bytes announced, {} present",
                    rest.len()
                ),
            )
        } else {
            corrupt(
                path,
                at as u64,
                format!("corrupt block (type {ty:#x}): {e}"),
            )
        }
    };
    let big0 = bytes.len() >= 12 && bytes[8..12] == [0x1A, 0x2B, 0x3C, 0x4D];
    let (mut rest, mut parser) =
        PcapNgParser::new(bytes).map_err(|e| block_err(0, bytes, big0, e))?;
    // Per interface of the current section: link type and timestamp unit.
    let mut ifaces: Vec<(u32, u8)> = Vec::new();
    let mut out = Vec::new();
    let mut skipped: Option<(u64, u32)> = None;
    let mut index = 0usize;
    let mut last_ts = 0u64;
    while !rest.is_empty() {
        let at = bytes.len() - rest.len();
        let big = parser.section().endianness == Endianness::Big;
        // A new section may change the byte order: look at its magic.
        let big_next = if rest.len() >= 12 && u32_in(rest, false) == 0x0A0D_0D0A {
            rest[8..12] == [0x1A, 0x2B, 0x3C, 0x4D]
        } else {
            big
        };
        let (next, block) = parser
            .next_block(rest)
            .map_err(|e| block_err(at, rest, big_next, e))?;
        let big = parser.section().endianness == Endianness::Big;
        // A packet: (its link type, data offset in the block, time, original
        // length, data).
        let pkt = match block {
            Block::SectionHeader(_) => {
                ifaces.clear();
                None
            }
            Block::InterfaceDescription(idb) => {
                let resol = idb
                    .options
                    .iter()
                    .find_map(|o| match o {
                        InterfaceDescriptionOption::IfTsResol(r) => Some(*r),
                        _ => None,
                    })
                    .unwrap_or(6);
                ifaces.push((idb.linktype.into(), resol));
                None
            }
            Block::EnhancedPacket(epb) => {
                let Some(&(lt, resol)) = ifaces.get(epb.interface_id as usize) else {
                    return Err(corrupt(
                        path,
                        at as u64,
                        format!(
                            "packet {index}: interface {} was never described ({} interfaces)",
                            epb.interface_id,
                            ifaces.len()
                        ),
                    ));
                };
                // pcap-file hands over the raw tick count as nanoseconds.
                let ticks = epb.timestamp.as_nanos().min(u64::MAX as u128) as u64;
                let ts = tsresol_to_ns(ticks, resol);
                last_ts = ts;
                Some((lt, 28, ts, epb.original_len, epb.data))
            }
            Block::SimplePacket(spb) => {
                let Some(&(lt, _)) = ifaces.first() else {
                    return Err(corrupt(
                        path,
                        at as u64,
                        format!("packet {index}: simple packet block before any interface"),
                    ));
                };
                Some((lt, 12, last_ts, spb.original_len, spb.data))
            }
            _ => None,
        };
        if let Some((lt, data_at, ts, orig_len, data)) = pkt {
            plausible(path, at, index, data.len())?;
            if lt == LINKTYPE_USB_LINUX || lt == LINKTYPE_USB_LINUX_MMAPPED {
                out.push(RawRecord {
                    offset: (at + data_at) as u64,
                    index,
                    linktype: lt,
                    ts_ns: ts,
                    big_endian: big,
                    orig_len,
                    data: data.into_owned(),
                });
            } else if skipped.is_none() {
                skipped = Some((at as u64, lt));
            }
            index += 1;
        }
        rest = next;
    }
    if out.is_empty() {
        if let Some((at, lt)) = skipped {
            check_linktype(path, at, lt)?;
        }
    }
    Ok(out)
}
