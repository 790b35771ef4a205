//! Replay of usbmon captures: a bus driven by a pcap or pcapng file with
//! linktype 189 (`USB_LINUX`, 48-byte header) or 220 (`USB_LINUX_MMAPPED`,
//! 64-byte header), as tcpdump, dumpcap and [`crate::record`] write them.
//!
//! Loading reads the whole file, parses the container with `pcap-file` and
//! turns every packet into an [`UrbEvent`] (see [`Decoder`]). A packet is
//! accepted only if the binary formatter gives back its exact bytes (header
//! except the timestamp and bus number, ISO descriptors, data): anything
//! usbmon cannot have written is reported as corrupt, with its byte offset,
//! before anything is replayed.
//!
//! Timing: packet `i` of pass `k` plays `(t_i - t_0 + k * period) / speed`
//! after the start, where the period of a pass is the capture's span plus
//! its mean packet spacing (1 ms for a single packet). Replayed events carry
//! the bus clock at that time, so the original spacing survives (scaled) and
//! a virtual clock gives the same timestamps every run.
//!
//! Fields the capture cannot hold are the URB's: a 48-byte (189) header has
//! no interval, start frame, transfer flags or stored-descriptor count
//! (replayed as 0, with `min(numdesc, 128)` descriptors); a completion has no
//! transfer buffer length (taken from the URB's submission in the file, else
//! the smallest length the packet allows). Data cut off by the snapshot
//! length is replayed as zeros (the header keeps its `len_cap`); only the
//! bytes present in the file are held, never the claimed rest, and a packet
//! record longer than the rest of the file is reported as truncated (as
//! libpcap's "truncated dump file") before anything is copied.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use pcap_file::pcap::PcapParser;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgParser};
use pcap_file::{Endianness, PcapError, TsResolution};

use super::bus::Ctx;
use crate::config::ReplayConfig;
use crate::sync::LockExt;
use crate::usbmon::binary::{capture_plan, encode_event, ISODESC_MAX, PKT_SZ_API1};
use crate::usbmon::event::{DataCapture, EventKind, IsoDesc, UrbEvent, XferType};
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
const MAX_PACKET: usize = PKT_SZ_API1 + MAX_LEN_CAP;
/// Largest ISO packet count accepted in a header.
const MAX_NUMDESC: i32 = 1 << 16;
/// Spacing after the last packet of a pass when the capture has one packet.
const SINGLE_GAP_NS: u64 = 1_000_000;
/// Smallest spacing between passes.
const MIN_GAP_NS: u64 = 1_000;

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

fn corrupt(path: &Path, offset: u64, message: impl Into<String>) -> CaptureError {
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

/// Read every packet of a pcap or pcapng file named in the configuration.
/// The path is opened without blocking (a FIFO is refused, never waited
/// on) and read as [`read_records_from`] reads a descriptor.
pub fn read_records(path: &Path) -> Result<(Container, Vec<RawRecord>), CaptureError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|source| CaptureError::Io {
            path: path.display().to_string(),
            source,
        })?;
    read_records_from(&file, path)
}

/// Read every packet of the capture open as `file` (`name` labels it in
/// errors). Only a regular file of at most [`MAX_CAPTURE_BYTES`] is read
/// (never a device such as /dev/zero, a FIFO or a socket), and only the
/// size `fstat` gave at the start: a file that grows meanwhile is read as it
/// was. The file offset is not moved (the descriptor may be shared with the
/// client that passed it).
pub fn read_records_from(
    file: &std::fs::File,
    name: &Path,
) -> Result<(Container, Vec<RawRecord>), CaptureError> {
    use std::os::unix::fs::FileExt;
    let io = |source| CaptureError::Io {
        path: name.display().to_string(),
        source,
    };
    let invalid = |m: String| io(std::io::Error::new(std::io::ErrorKind::InvalidInput, m));
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(invalid("not a regular file".into()));
    }
    if meta.len() > MAX_CAPTURE_BYTES {
        return Err(invalid(format!(
            "{} bytes is more than the {MAX_CAPTURE_BYTES}-byte limit",
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
            Err(e) => return Err(io(e)),
        }
    }
    bytes.truncate(got);
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
fn tsresol_to_ns(ticks: u64, resol: u8) -> u64 {
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
        match block {
            Block::SectionHeader(_) => ifaces.clear(),
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
                plausible(path, at, index, epb.data.len())?;
                if lt == LINKTYPE_USB_LINUX || lt == LINKTYPE_USB_LINUX_MMAPPED {
                    out.push(RawRecord {
                        offset: at as u64 + 28,
                        index,
                        linktype: lt,
                        ts_ns: ts,
                        big_endian: big,
                        orig_len: epb.original_len,
                        data: epb.data.into_owned(),
                    });
                } else if skipped.is_none() {
                    skipped = Some((at as u64, lt));
                }
                index += 1;
            }
            Block::SimplePacket(spb) => {
                let Some(&(lt, _)) = ifaces.first() else {
                    return Err(corrupt(
                        path,
                        at as u64,
                        format!("packet {index}: simple packet block before any interface"),
                    ));
                };
                plausible(path, at, index, spb.data.len())?;
                if lt == LINKTYPE_USB_LINUX || lt == LINKTYPE_USB_LINUX_MMAPPED {
                    out.push(RawRecord {
                        offset: at as u64 + 12,
                        index,
                        linktype: lt,
                        ts_ns: last_ts,
                        big_endian: big,
                        orig_len: spb.original_len,
                        data: spb.data.into_owned(),
                    });
                } else if skipped.is_none() {
                    skipped = Some((at as u64, lt));
                }
                index += 1;
            }
            _ => {}
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

/// Header field names by byte offset, for error messages.
fn field_at(i: usize) -> &'static str {
    match i {
        0..=7 => "id",
        8 => "type",
        9 => "xfer_type",
        10 => "epnum",
        11 => "devnum",
        12..=13 => "busnum",
        14 => "flag_setup",
        15 => "flag_data",
        16..=27 => "timestamp",
        28..=31 => "status",
        32..=35 => "len_urb",
        36..=39 => "len_cap",
        40..=47 => "setup/iso union",
        48..=51 => "interval",
        52..=55 => "start_frame",
        56..=59 => "xfer_flags",
        _ => "ndesc",
    }
}

fn show(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("{b:#04x}")
    }
}

/// Swap the multi-byte header fields (and ISO descriptors) between the two
/// byte orders, as libpcap does for a capture of the other byte order;
/// `to_native`: the header is foreign now (else it is native now).
fn swap_header(h: &mut [u8; 64], hl: usize, payload: &mut [u8], to_native: bool) {
    let ndesc_of = |h: &[u8; 64]| {
        if hl == 64 {
            (u32::from_ne_bytes(h[60..64].try_into().unwrap()) as usize).min(ISODESC_MAX)
        } else {
            i32::from_ne_bytes(h[44..48].try_into().unwrap()).clamp(0, ISODESC_MAX as i32) as usize
        }
    };
    let before = ndesc_of(h);
    fn rev(h: &mut [u8], at: usize, n: usize) {
        h[at..at + n].reverse();
    }
    rev(h, 0, 8);
    rev(h, 12, 2);
    rev(h, 16, 8);
    for at in [24, 28, 32, 36] {
        rev(h, at, 4);
    }
    let iso = h[9] == XferType::Iso as u8;
    if iso {
        rev(h, 40, 4);
        rev(h, 44, 4);
    }
    if hl == 64 {
        for at in [48, 52, 56, 60] {
            rev(h, at, 4);
        }
    }
    if iso {
        let ndesc = if to_native { ndesc_of(h) } else { before };
        let n = (ndesc * 16).min(payload.len()) / 4 * 4;
        for w in payload[..n].chunks_exact_mut(4) {
            w.reverse();
        }
    }
}

/// Turns capture packets into events. Keeps the transfer buffer length of
/// each URB's submission, for its completion.
#[derive(Default)]
pub struct Decoder {
    tbl: HashMap<u64, u32>,
}

/// A decoded packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decoded {
    /// The event, with the capture's bus number.
    pub event: UrbEvent,
    /// The packet's data was cut by the snapshot length: its header's
    /// `len_cap` is more than the bytes after it. `event` holds only the
    /// bytes present (readers see zeros for the rest, as its `len_cap`
    /// asks); the claimed rest is never allocated.
    pub snapped: bool,
}

impl Decoder {
    /// A decoder for one pass over a capture.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decode one usbmon packet (`linktype` 189 or 220, header in the byte
    /// order `big_endian`). The event's timestamp is the packet's; its bus is
    /// the header's. Errors say what is wrong (the caller adds the offset).
    pub fn decode(
        &mut self,
        linktype: u32,
        big_endian: bool,
        ts_ns: u64,
        pkt: &[u8],
    ) -> Result<Decoded, String> {
        let hl = match linktype {
            LINKTYPE_USB_LINUX => 48,
            LINKTYPE_USB_LINUX_MMAPPED => 64,
            lt => return Err(format!("link type {lt} is not usbmon")),
        };
        if pkt.len() < hl {
            return Err(format!(
                "{} bytes, shorter than the {hl}-byte usbmon header",
                pkt.len()
            ));
        }
        let mut h = [0u8; 64];
        h[..hl].copy_from_slice(&pkt[..hl]);
        let payload = &pkt[hl..];
        // The ISO descriptors (at most 128) are the only payload bytes that
        // change: copy just them, zero-padded when the snapshot cut them.
        let mut descs = [0u8; ISODESC_MAX * 16];
        let dpresent = payload.len().min(descs.len());
        descs[..dpresent].copy_from_slice(&payload[..dpresent]);
        if big_endian != cfg!(target_endian = "big") {
            swap_header(&mut h, hl, &mut descs[..dpresent], true);
        }
        let i32_at = |o: usize| i32::from_ne_bytes(h[o..o + 4].try_into().unwrap());
        let u32_at = |o: usize| u32::from_ne_bytes(h[o..o + 4].try_into().unwrap());
        let kind = match h[8] {
            b'S' => EventKind::Submit,
            b'C' => EventKind::Complete,
            b'E' => EventKind::Error,
            t => return Err(format!("event type {} is not S, C or E", show(t))),
        };
        let xfer = XferType::from_u8(h[9])
            .ok_or_else(|| format!("transfer type {} is not 0..=3", h[9]))?;
        let id = u64::from_ne_bytes(h[0..8].try_into().unwrap());
        let mut ev = UrbEvent {
            id,
            kind,
            xfer,
            bus: u16::from_ne_bytes([h[12], h[13]]),
            devnum: h[11],
            epnum: h[10] & 0x7f,
            dir_in: h[10] & 0x80 != 0,
            ts: crate::clock::Timestamp {
                mono_ns: 0,
                wall_ns: ts_ns,
            },
            status: i32_at(28),
            transfer_buffer_length: 0,
            actual_length: 0,
            interval: 0,
            start_frame: 0,
            error_count: 0,
            xfer_flags: 0,
            setup: None,
            iso: Vec::new(),
            data: None,
            data_capture: DataCapture::Full,
        };
        let mut snapped = false;
        if kind != EventKind::Error {
            let len_urb = u32_at(32);
            let len_cap = u32_at(36) as usize;
            let numdesc = i32_at(44);
            let ndesc = if hl == 64 {
                u32_at(60) as usize
            } else if xfer == XferType::Iso {
                numdesc.clamp(0, ISODESC_MAX as i32) as usize
            } else {
                0
            };
            if ndesc > ISODESC_MAX {
                return Err(format!("ndesc {ndesc} is more than {ISODESC_MAX}"));
            }
            let lendesc = ndesc * 16;
            if len_cap < lendesc {
                return Err(format!(
                    "len_cap {len_cap} is less than its {ndesc} ISO descriptors ({lendesc} bytes)"
                ));
            }
            if payload.len() > len_cap {
                return Err(format!(
                    "{} bytes follow the header but len_cap is {len_cap}",
                    payload.len()
                ));
            }
            // Only the bytes present are kept: a claimed `len_cap` beyond
            // them (even 4 GiB) costs nothing.
            snapped = payload.len() < len_cap;
            if hl == 64 {
                ev.interval = i32_at(48);
                ev.start_frame = i32_at(52);
                ev.xfer_flags = u32_at(56);
            }
            if xfer == XferType::Iso {
                ev.error_count = i32_at(40);
                if !(0..=MAX_NUMDESC).contains(&numdesc) {
                    return Err(format!("ISO packet count {numdesc} is not plausible"));
                }
                ev.iso = descs[..lendesc]
                    .chunks_exact(16)
                    .map(|d| IsoDesc {
                        status: i32::from_ne_bytes(d[0..4].try_into().unwrap()),
                        offset: u32::from_ne_bytes(d[4..8].try_into().unwrap()),
                        length: u32::from_ne_bytes(d[8..12].try_into().unwrap()),
                    })
                    .collect();
                // Packets beyond the stored 128 are counted, not shown.
                if numdesc as usize > ev.iso.len() {
                    ev.iso.resize(numdesc as usize, IsoDesc::default());
                }
            }
            if xfer == XferType::Control && kind == EventKind::Submit && h[14] == 0 {
                ev.setup = Some(h[40..48].try_into().unwrap());
            }
            let dcap = len_cap - lendesc;
            match kind {
                EventKind::Submit => {
                    ev.transfer_buffer_length = len_urb;
                    self.tbl.insert(id, len_urb);
                }
                _ => {
                    ev.actual_length = len_urb;
                    let mut need = len_urb;
                    if xfer == XferType::Iso && ev.dir_in {
                        let collated = ev.iso[..ndesc]
                            .iter()
                            .filter(|d| d.length != 0)
                            .map(|d| d.offset as u64 + d.length as u64)
                            .max()
                            .unwrap_or(0);
                        need = need.max(collated.min(u32::MAX as u64) as u32);
                    }
                    ev.transfer_buffer_length = self.tbl.remove(&id).unwrap_or(need).max(need);
                }
            }
            match h[15] {
                b'Z' => ev.data = None,
                b'D' => ev.data_capture = DataCapture::Unmapped,
                _ => {
                    ev.data = Some(Arc::from(payload.get(lendesc..).unwrap_or(&[])));
                    let planned = capture_plan(&ev, usize::MAX).length;
                    if dcap < planned {
                        ev.data_capture = DataCapture::Partial(dcap as u32);
                    }
                }
            }
        }
        // Accept only what the formatter reproduces byte for byte. A snapped
        // packet is compared as far as it goes: the formatter is asked for
        // the bytes present only (and the header for the full `len_cap`), so
        // no more than the packet is ever allocated.
        let plan = capture_plan(&ev, usize::MAX);
        let want_cap = (plan.ndesc * 16 + plan.copied) as u32;
        let keep = ev.data_capture;
        if snapped && keep != DataCapture::Unmapped {
            let present = payload.len().saturating_sub(plan.ndesc * 16);
            let n = match keep {
                DataCapture::Partial(n) => (n as usize).min(present),
                _ => present,
            };
            ev.data_capture = DataCapture::Partial(n as u32);
        }
        let mut again = encode_event(&ev, usize::MAX);
        ev.data_capture = keep;
        again[16..28].copy_from_slice(&h[16..28]);
        if kind != EventKind::Error {
            again[36..40].copy_from_slice(&want_cap.to_ne_bytes());
        }
        if let Some(i) = (0..hl).find(|&i| again[i] != h[i]) {
            return Err(format!(
                "header byte {i} ({}) is {} where usbmon would write {} for this event: not a usbmon record",
                field_at(i),
                show(h[i]),
                show(again[i])
            ));
        }
        // The payload as read (descriptors in native order), and what
        // usbmon would have written of it.
        let got = descs[..dpresent].iter().chain(&payload[dpresent..]);
        let want = &again[64..];
        let short = if snapped {
            want.len() < payload.len()
        } else {
            want.len() != payload.len()
        };
        if short || !want.iter().zip(got.clone()).all(|(a, b)| a == b) {
            let i = want
                .iter()
                .zip(got)
                .position(|(a, b)| a != b)
                .unwrap_or(want.len().min(payload.len()));
            return Err(format!(
                "payload differs from what usbmon would capture at byte {i} (len_cap {}, usbmon would capture {})",
                payload.len(),
                want.len()
            ));
        }
        Ok(Decoded { event: ev, snapped })
    }
}

/// A capture loaded for replay.
#[derive(Clone, Debug)]
pub struct Capture {
    /// The file.
    pub path: PathBuf,
    /// The events, in file order, with the capture's bus numbers.
    pub events: Vec<UrbEvent>,
    /// Time of each event after the first, ns (never decreasing).
    pub times: Vec<u64>,
    /// Packets whose data the snapshot length cut (replayed with zeros).
    pub snapped: usize,
    /// Packets of other link types (pcapng interfaces that are not usbmon)
    /// before the last usbmon packet; they are not replayed.
    pub skipped: usize,
}

impl Capture {
    /// Load and check a capture: every packet must decode (see [`Decoder`]).
    pub fn load(path: &Path) -> Result<Capture, CaptureError> {
        let (_, records) = read_records(path)?;
        Self::from_records(path, &records)
    }

    /// Load and check the capture open as `file`, labelled `name` (see
    /// [`read_records_from`] for what is accepted).
    pub fn load_from(file: &std::fs::File, name: &Path) -> Result<Capture, CaptureError> {
        let (_, records) = read_records_from(file, name)?;
        Self::from_records(name, &records)
    }

    /// Check and decode parsed packets.
    pub fn from_records(path: &Path, records: &[RawRecord]) -> Result<Capture, CaptureError> {
        let mut dec = Decoder::new();
        let mut events = Vec::with_capacity(records.len());
        let mut times = Vec::with_capacity(records.len());
        let mut snapped = 0;
        let t0 = records.first().map(|r| r.ts_ns).unwrap_or(0);
        let mut last = 0;
        for r in records {
            let d = dec
                .decode(r.linktype, r.big_endian, r.ts_ns, &r.data)
                .map_err(|m| corrupt(path, r.offset, format!("packet {}: {m}", r.index)))?;
            snapped += d.snapped as usize;
            last = last.max(r.ts_ns.saturating_sub(t0));
            times.push(last);
            events.push(d.event);
        }
        let skipped = records
            .last()
            .map(|r| r.index + 1 - records.len())
            .unwrap_or(0);
        Ok(Capture {
            path: path.to_path_buf(),
            events,
            times,
            snapped,
            skipped,
        })
    }

    /// Unscaled length of one pass, ns: the span plus the mean spacing.
    pub fn period(&self) -> u64 {
        loop_period(&self.times)
    }
}

/// Length of one pass over packets at `times` (ns from the first): their
/// span plus their mean spacing (1 ms for one packet, at least 1 µs).
pub fn loop_period(times: &[u64]) -> u64 {
    match times.len() {
        0 => 0,
        1 => SINGLE_GAP_NS,
        n => {
            let span = times[n - 1];
            span + (span / (n as u64 - 1)).max(MIN_GAP_NS)
        }
    }
}

/// `ns` of capture time at `speed`.
pub fn scale(ns: u64, speed: f64) -> u64 {
    (ns as f64 / speed).round() as u64
}

/// When packet `i` of pass `pass` plays, ns after the replay started.
pub fn due(times: &[u64], i: usize, pass: u64, period: u64, speed: f64) -> u64 {
    let per = scale(period, speed).max(1);
    scale(times[i], speed).saturating_add(pass.saturating_mul(per))
}

/// Where a replay is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReplayState {
    /// Loading, or waiting for `after_ms`.
    Waiting,
    /// Replaying.
    Playing,
    /// The last packet was replayed (not looping).
    Finished,
    /// Stopped by a control command.
    Stopped,
    /// The capture could not be replayed; the message names file and offset.
    Failed(String),
}

/// What a replay has done, for control and logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayStatus {
    /// The capture.
    pub file: PathBuf,
    /// Where it is.
    pub state: ReplayState,
    /// Events replayed.
    pub events: u64,
    /// Passes completed (looping).
    pub passes: u64,
}

impl fmt::Display for ReplayStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            ReplayState::Waiting => "waiting".to_string(),
            ReplayState::Playing => "playing".to_string(),
            ReplayState::Finished => "finished".to_string(),
            ReplayState::Stopped => "stopped".to_string(),
            ReplayState::Failed(m) => format!("failed: {m}"),
        };
        write!(
            f,
            "replay {}: {state}, {} events, {} passes",
            self.file.display(),
            self.events,
            self.passes
        )
    }
}

/// Shared between a replay task and [`super::UsbSim`].
#[derive(Debug)]
pub struct ReplayHandle {
    stop: AtomicBool,
    status: Mutex<ReplayStatus>,
}

impl ReplayHandle {
    pub(crate) fn new(file: &Path) -> Arc<ReplayHandle> {
        Arc::new(ReplayHandle {
            stop: AtomicBool::new(false),
            status: Mutex::new(ReplayStatus {
                file: file.to_path_buf(),
                state: ReplayState::Waiting,
                events: 0,
                passes: 0,
            }),
        })
    }

    /// A snapshot of the status.
    pub fn status(&self) -> ReplayStatus {
        self.lock().clone()
    }

    /// Ask the replay to stop (it does at its next step, emitting nothing more).
    pub(crate) fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        let mut s = self.lock();
        if matches!(s.state, ReplayState::Waiting | ReplayState::Playing) {
            s.state = ReplayState::Stopped;
        }
    }

    /// Whether it can still produce events.
    pub(crate) fn active(&self) -> bool {
        matches!(
            self.lock().state,
            ReplayState::Waiting | ReplayState::Playing
        )
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReplayStatus> {
        self.status.lock_ok()
    }
}

/// The bus task that replays a capture.
pub(crate) struct ReplayTask {
    cfg: ReplayConfig,
    handle: Arc<ReplayHandle>,
    /// The capture, loaded before the task was made (never under a lock),
    /// or why it could not be.
    loaded: Option<Result<Arc<Capture>, String>>,
    /// The capture being played.
    cap: Option<Arc<Capture>>,
    started: bool,
    /// Bus local time of the first packet of pass 0.
    start: u64,
    idx: usize,
    pass: u64,
    period: u64,
}

impl ReplayTask {
    /// A task for `cfg` with its loaded capture (or the load error, which
    /// the first step reports).
    pub(crate) fn new(
        cfg: ReplayConfig,
        handle: Arc<ReplayHandle>,
        cap: Result<Arc<Capture>, String>,
    ) -> ReplayTask {
        ReplayTask {
            cfg,
            handle,
            loaded: Some(cap),
            cap: None,
            started: false,
            start: 0,
            idx: 0,
            pass: 0,
            period: 0,
        }
    }

    fn speed(&self) -> f64 {
        self.cfg.speed.0
    }

    /// One step at bus local time `now`: load (first step), then emit the
    /// events due now. Returns when to run next.
    pub(crate) fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if self.handle.stop.load(Ordering::SeqCst) {
            return None;
        }
        if !self.started {
            self.started = true;
            let cap = match self.loaded.take() {
                Some(Ok(c)) => c,
                Some(Err(e)) => {
                    tracing::error!("bus {}: replay stopped, nothing replayed: {e}", ctx.bus);
                    self.handle.lock().state = ReplayState::Failed(e);
                    return None;
                }
                None => return None,
            };
            tracing::info!(
                "bus {}: replaying {} ({} events, speed {}{}, {} packets cut by the snapshot length, {} packets of other link types skipped)",
                ctx.bus,
                self.cfg.file.display(),
                cap.events.len(),
                self.speed(),
                if self.cfg.looping { ", looping" } else { "" },
                cap.snapped,
                cap.skipped,
            );
            if cap.events.is_empty() {
                self.handle.lock().state = ReplayState::Finished;
                return None;
            }
            self.period = cap.period();
            self.start = now + self.cfg.after_ms.saturating_mul(1_000_000);
            self.handle.lock().state = ReplayState::Playing;
            self.cap = Some(cap);
        }
        let cap = self.cap.clone()?;
        loop {
            let t = self.start + due(&cap.times, self.idx, self.pass, self.period, self.speed());
            if t > now {
                return Some(t);
            }
            let mut ev = cap.events[self.idx].clone();
            ev.bus = ctx.bus;
            ev.ts = ctx.clock.at(t + ctx.offset);
            ctx.events += 1;
            ctx.sink.urb_event(ev);
            self.idx += 1;
            let mut st = self.handle.lock();
            st.events += 1;
            if self.idx == cap.events.len() {
                st.passes += 1;
                if !self.cfg.looping {
                    st.state = ReplayState::Finished;
                    return None;
                }
                self.idx = 0;
                self.pass += 1;
            }
        }
    }
}

/// A replay control command: `start BUS FILE [speed=F] [loop] [after_ms=N]`,
/// `stop BUS` or `status BUS`.
#[derive(Clone, Debug, PartialEq)]
pub enum ReplayCommand {
    /// Start replaying `cfg` on `bus` (replacing a running replay).
    Start {
        /// Bus number.
        bus: u16,
        /// What to replay.
        cfg: ReplayConfig,
    },
    /// Stop the replay on `bus`.
    Stop {
        /// Bus number.
        bus: u16,
    },
    /// Report the replay of `bus`.
    Status {
        /// Bus number.
        bus: u16,
    },
}

impl ReplayCommand {
    /// Parse the words after `replay`.
    pub fn parse(words: &[&str]) -> Result<ReplayCommand, String> {
        let usage = "usage: replay start BUS FILE [speed=F] [loop] [after_ms=N] | replay stop BUS | replay status BUS";
        let bus = |w: Option<&&str>| -> Result<u16, String> {
            let w = w.ok_or_else(|| usage.to_string())?;
            w.parse::<u16>()
                .ok()
                .filter(|b| (1..=127).contains(b))
                .ok_or_else(|| format!("bad bus number {w:?}: must be 1..=127"))
        };
        match words.first().copied() {
            Some("start") => {
                let b = bus(words.get(1))?;
                let file = words.get(2).ok_or_else(|| usage.to_string())?;
                let mut cfg = ReplayConfig {
                    file: PathBuf::from(file),
                    speed: Default::default(),
                    looping: false,
                    after_ms: 0,
                };
                for w in &words[3..] {
                    if *w == "loop" {
                        cfg.looping = true;
                    } else if let Some(v) = w.strip_prefix("speed=") {
                        let f: f64 = v.parse().map_err(|_| format!("bad speed {v:?}"))?;
                        cfg.speed = crate::config::ReplaySpeed::new(f)?;
                    } else if let Some(v) = w.strip_prefix("after_ms=") {
                        cfg.after_ms = v.parse().map_err(|_| format!("bad after_ms {v:?}"))?;
                    } else {
                        return Err(format!("unknown replay option {w:?}; {usage}"));
                    }
                }
                Ok(ReplayCommand::Start { bus: b, cfg })
            }
            Some("stop") if words.len() == 2 => Ok(ReplayCommand::Stop {
                bus: bus(words.get(1))?,
            }),
            Some("status") if words.len() == 2 => Ok(ReplayCommand::Status {
                bus: bus(words.get(1))?,
            }),
            _ => Err(usage.to_string()),
        }
    }
}

/// What `replay start` says when no capture came with it: the daemon opens
/// no path for a caller.
pub const NEEDS_DESCRIPTOR: &str =
    "replay start takes the capture as an open file passed with the command \
(SCM_RIGHTS on the control socket); the daemon opens no path for a caller. \
Use `monfs ctl MOUNTPOINT replay start BUS FILE`, which opens FILE with your own rights";

/// A replay command ready to carry out: for `start`, its capture is loaded
/// and checked already, so that nothing slow happens under a lock.
pub struct Prepared {
    cmd: ReplayCommand,
    cap: Option<Capture>,
}

/// Parse a replay command (the words after `replay`) and, for `start`, load
/// the capture from `file`, the descriptor that came with it (see
/// [`Capture::load_from`]; the command's FILE word only labels it). Slow
/// (it reads the whole file): call it without holding locks.
pub fn prepare(words: &[&str], file: Option<std::fs::File>) -> Result<Prepared, String> {
    let cmd = ReplayCommand::parse(words)?;
    let cap = match &cmd {
        ReplayCommand::Start { cfg, .. } => {
            let file = file.ok_or(NEEDS_DESCRIPTOR)?;
            Some(Capture::load_from(&file, &cfg.file).map_err(|e| e.to_string())?)
        }
        _ => None,
    };
    Ok(Prepared { cmd, cap })
}

/// Carry out a prepared replay command on `usb`: the reply on success, an
/// explanation on failure (nothing changed then).
pub fn run_prepared(usb: &super::UsbSim, p: Prepared) -> Result<String, String> {
    match (p.cmd, p.cap) {
        (ReplayCommand::Start { bus, cfg }, Some(cap)) => {
            usb.replay_start(bus, &cfg, cap)?;
            Ok(format!(
                "bus {bus}: replaying {} at speed {}{}",
                cfg.file.display(),
                cfg.speed.0,
                if cfg.looping { ", looping" } else { "" }
            ))
        }
        (ReplayCommand::Start { .. }, None) => Err(NEEDS_DESCRIPTOR.into()),
        (ReplayCommand::Stop { bus }, _) => {
            usb.replay_stop(bus)?;
            Ok(format!("bus {bus}: replay stopped"))
        }
        (ReplayCommand::Status { bus }, _) => Ok(match usb.replay_status(bus)? {
            Some(s) => format!("bus {bus}: {s}"),
            None => format!("bus {bus}: no replay"),
        }),
    }
}

/// [`prepare`] and [`run_prepared`] in one (tests and callers that hold no
/// lock).
pub fn run_command(
    usb: &super::UsbSim,
    words: &[&str],
    file: Option<std::fs::File>,
) -> Result<String, String> {
    run_prepared(usb, prepare(words, file)?)
}

/// Events of every kind the formatters distinguish (control with and
/// without setup, bulk with NULL, scatter-gather and partial buffers, a
/// submission error, interrupt, ISO in and out with more than 128 packets),
/// 125 ms apart, as a capture decodes them (wall clock to the microsecond,
/// monotonic 0). For tests that make their own captures.
#[doc(hidden)]
pub fn sample_events(bus: u16) -> Vec<UrbEvent> {
    use crate::clock::Timestamp;
    use crate::usbmon::event::{EINPROGRESS, URB_DIR_IN, URB_ISO_ASAP};
    let mut t = 1_704_067_200_000_000_000u64;
    let mut out = Vec::new();
    let mut id = 0xffff_8880_0a00_0000u64;
    let mut push = |mut ev: UrbEvent| {
        t += 125_000_000;
        ev.ts = Timestamp {
            mono_ns: 0,
            wall_ns: t,
        };
        out.push(ev);
    };
    let data = |n: u32| -> Option<Arc<[u8]>> {
        Some(
            (0..n)
                .map(|i| (i * 7 + 3) as u8)
                .collect::<Vec<u8>>()
                .into(),
        )
    };
    let base = |id: u64, kind, xfer, ep: u8, dir_in: bool| UrbEvent {
        id,
        kind,
        xfer,
        bus,
        devnum: 5,
        epnum: ep,
        dir_in,
        ts: Default::default(),
        status: if kind == EventKind::Submit {
            EINPROGRESS
        } else {
            0
        },
        transfer_buffer_length: 0,
        actual_length: 0,
        interval: 0,
        start_frame: 0,
        error_count: 0,
        xfer_flags: if dir_in { URB_DIR_IN } else { 0 },
        setup: None,
        iso: Vec::new(),
        data: Some(Arc::from(&[][..])),
        data_capture: DataCapture::Full,
    };
    // Control IN: GET_DESCRIPTOR, 18 bytes back.
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Control, 0, true);
    s.setup = Some([0x80, 6, 0, 1, 0, 0, 18, 0]);
    s.transfer_buffer_length = 18;
    push(s.clone());
    let mut c = base(id, EventKind::Complete, XferType::Control, 0, true);
    c.transfer_buffer_length = 18;
    c.actual_length = 18;
    c.data = data(18);
    push(c);
    // Control OUT with data, and a NULL setup pointer ('Z').
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Control, 0, false);
    s.setup = Some([0x21, 9, 0, 2, 0, 0, 4, 0]);
    s.transfer_buffer_length = 4;
    s.data = data(4);
    push(s);
    let mut c = base(id, EventKind::Complete, XferType::Control, 0, false);
    c.transfer_buffer_length = 4;
    c.actual_length = 4;
    c.status = -32;
    push(c);
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Control, 0, false);
    s.setup = None;
    push(s);
    // Bulk OUT with a NULL buffer ('Z'), bulk IN short, scatter-gather 'D'
    // and a partial copy.
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Bulk, 2, false);
    s.transfer_buffer_length = 31;
    s.data = None;
    s.xfer_flags = 0x4;
    push(s);
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Bulk, 1, true);
    s.transfer_buffer_length = 512;
    push(s);
    let mut c = base(id, EventKind::Complete, XferType::Bulk, 1, true);
    c.transfer_buffer_length = 512;
    c.actual_length = 13;
    c.data = data(13);
    push(c);
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Bulk, 2, false);
    s.transfer_buffer_length = 4096;
    s.data_capture = DataCapture::Unmapped;
    s.data = Some((vec![0u8; 4096]).into());
    push(s);
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Bulk, 2, false);
    s.transfer_buffer_length = 1000;
    s.data = data(100);
    s.data_capture = DataCapture::Partial(100);
    push(s);
    // Submission error.
    id += 0x40;
    let mut e = base(id, EventKind::Error, XferType::Bulk, 1, true);
    e.status = -19;
    e.xfer_flags = 0;
    e.data = None;
    push(e);
    // Interrupt IN with an interval.
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Interrupt, 1, true);
    s.transfer_buffer_length = 8;
    s.interval = 8;
    push(s);
    let mut c = base(id, EventKind::Complete, XferType::Interrupt, 1, true);
    c.transfer_buffer_length = 8;
    c.actual_length = 8;
    c.interval = 8;
    c.data = data(8);
    push(c);
    // ISO IN: 3 packets, the middle one short; ISO OUT with 130 packets (128
    // stored, 130 counted).
    id += 0x40;
    let descs = |n: usize, len: u32, st: i32| -> Vec<IsoDesc> {
        (0..n)
            .map(|i| IsoDesc {
                status: st,
                offset: i as u32 * len,
                length: len,
            })
            .collect()
    };
    let mut s = base(id, EventKind::Submit, XferType::Iso, 3, true);
    s.transfer_buffer_length = 300;
    s.interval = 1;
    s.start_frame = 0;
    s.xfer_flags = URB_DIR_IN | URB_ISO_ASAP;
    s.iso = descs(3, 100, -18);
    push(s);
    let mut c = base(id, EventKind::Complete, XferType::Iso, 3, true);
    c.transfer_buffer_length = 300;
    c.actual_length = 240;
    c.interval = 1;
    c.start_frame = 1234;
    c.error_count = 1;
    c.xfer_flags = URB_DIR_IN | URB_ISO_ASAP;
    c.iso = descs(3, 100, 0);
    c.iso[1].length = 40;
    c.iso[1].status = -71;
    c.data = data(300);
    push(c);
    id += 0x40;
    let mut s = base(id, EventKind::Submit, XferType::Iso, 4, false);
    s.transfer_buffer_length = 130 * 4;
    s.interval = 1;
    s.xfer_flags = URB_ISO_ASAP;
    s.iso = descs(130, 4, -18);
    s.iso[128..]
        .iter_mut()
        .for_each(|d| *d = IsoDesc::default());
    s.data = data(130 * 4);
    push(s);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{write_events, Format, LinkType, RECORD_RING};

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    /// Event -> capture bytes -> event, for every container and link type:
    /// the packets are what a reader captures and decode to the same events.
    #[test]
    fn round_trip_every_transfer_type() {
        let evs = sample_events(7);
        let d = tmp();
        for (format, link, name) in [
            (Format::PcapNg, LinkType::Mmapped, "a.pcapng"),
            (Format::Pcap, LinkType::Mmapped, "a.pcap"),
            (Format::PcapNg, LinkType::Linux, "b.pcapng"),
            (Format::Pcap, LinkType::Linux, "b.pcap"),
        ] {
            let p = d.path().join(name);
            assert_eq!(
                write_events(&p, &evs, format, link).unwrap(),
                evs.len() as u64
            );
            let (cont, recs) = read_records(&p).unwrap();
            assert_eq!(cont == Container::Pcap, format == Format::Pcap);
            assert_eq!(recs.len(), evs.len());
            for (r, e) in recs.iter().zip(&evs) {
                let want = encode_event(e, RECORD_RING);
                let want = if link == LinkType::Linux {
                    [&want[..48], &want[64..]].concat()
                } else {
                    want
                };
                assert_eq!(r.data, want, "{name}: packet {}", r.index);
                assert_eq!(r.ts_ns, e.ts.wall_ns, "{name}");
            }
            let cap = Capture::load(&p).unwrap();
            for (got, want) in cap.events.iter().zip(&evs) {
                let mut want = want.clone();
                if link == LinkType::Linux {
                    // Not in the 48-byte header.
                    want.interval = 0;
                    want.start_frame = 0;
                    want.xfer_flags = 0;
                }
                if want.data_capture == DataCapture::Unmapped || want.data.is_none() {
                    want.data = None;
                } else if let Some(d) = &want.data {
                    let plan = capture_plan(&want, usize::MAX);
                    want.data = Some(Arc::from(&d[..plan.copied.min(d.len())]));
                }
                if want.kind == EventKind::Error {
                    want.data = None;
                    want.transfer_buffer_length = 0;
                    want.actual_length = 0;
                }
                if want.kind == EventKind::Submit {
                    want.actual_length = 0;
                }
                assert_eq!(got, &want, "{name}");
            }
            assert_eq!(cap.times[1], 125_000_000);
            assert_eq!(cap.snapped, 0);
        }
    }

    /// The text view of decoded events: 'D', 'Z', and descriptors.
    #[test]
    fn text_view_of_replayed_events() {
        use crate::usbmon::text::{format_line, TextFormat};
        let d = tmp();
        let p = d.path().join("t.pcapng");
        write_events(&p, &sample_events(2), Format::PcapNg, LinkType::Mmapped).unwrap();
        let cap = Capture::load(&p).unwrap();
        let lines: Vec<String> = cap
            .events
            .iter()
            .map(|e| format_line(e, TextFormat::U))
            .collect();
        let strip = |l: &str| {
            let mut w: Vec<&str> = l.split(' ').collect();
            w.remove(1);
            w.join(" ")
        };
        assert_eq!(
            strip(&lines[0]),
            "ffff88800a000040 S Ci:2:005:0 s 80 06 0100 0000 0012 18 <\n"
        );
        assert_eq!(
            strip(&lines[4]),
            "ffff88800a0000c0 S Co:2:005:0 Z __ __ ____ ____ ____ 0\n"
        );
        assert_eq!(
            strip(&lines[5]),
            "ffff88800a000100 S Bo:2:005:2 -115 31 Z\n"
        );
        assert_eq!(
            strip(&lines[8]),
            "ffff88800a000180 S Bo:2:005:2 -115 4096 D\n"
        );
        assert!(
            lines[14].contains(" 0:1:1234:1 3 0:0:100 -71:100:40 0:200:100 300 ="),
            "{}",
            lines[14]
        );
        assert!(lines[15].contains(" 130 -18:0:4 "), "{}", lines[15]);
    }

    fn swapped(pkt: &[u8], hl: usize) -> Vec<u8> {
        let mut h = [0u8; 64];
        h[..hl].copy_from_slice(&pkt[..hl]);
        let mut payload = pkt[hl..].to_vec();
        swap_header(&mut h, hl, &mut payload, false);
        [&h[..hl], &payload[..]].concat()
    }

    /// A capture from a machine of the other byte order decodes the same.
    #[test]
    fn other_byte_order() {
        let evs = sample_events(1);
        for hl in [48, 64] {
            let lt = if hl == 64 { 220 } else { 189 };
            let mut dec = Decoder::new();
            let mut dec2 = Decoder::new();
            for e in &evs {
                let pkt = encode_event(e, RECORD_RING);
                let pkt = if hl == 48 {
                    [&pkt[..48], &pkt[64..]].concat()
                } else {
                    pkt
                };
                let native = dec
                    .decode(lt, cfg!(target_endian = "big"), e.ts.wall_ns, &pkt)
                    .unwrap();
                let foreign = dec2
                    .decode(
                        lt,
                        !cfg!(target_endian = "big"),
                        e.ts.wall_ns,
                        &swapped(&pkt, hl),
                    )
                    .unwrap();
                assert_eq!(native, foreign);
            }
        }
    }

    fn pcap_bytes(evs: &[UrbEvent]) -> Vec<u8> {
        let d = tmp();
        let p = d.path().join("x.pcap");
        write_events(&p, evs, Format::Pcap, LinkType::Mmapped).unwrap();
        std::fs::read(p).unwrap()
    }

    fn err_of(bytes: &[u8]) -> (u64, String) {
        let p = Path::new("/x/cap.pcap");
        let r = parse_records(p, bytes).and_then(|(_, recs)| Capture::from_records(p, &recs));
        match r {
            Err(e @ CaptureError::Corrupt { .. }) => {
                let s = e.to_string();
                assert!(s.starts_with("/x/cap.pcap: byte offset "), "{s}");
                (e.offset().unwrap(), s)
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn truncated_and_corrupt_pcap_name_the_offset() {
        let evs = sample_events(1);
        let b = pcap_bytes(&evs[..3]);
        let first = encode_event(&evs[0], RECORD_RING).len();
        let second = encode_event(&evs[1], RECORD_RING).len();
        let third_at = 24 + 16 + first + 16 + second;
        // Cut in the middle of the third packet's data.
        let (off, msg) = err_of(&b[..b.len() - 5]);
        assert_eq!(off, third_at as u64 + 16, "{msg}");
        assert!(msg.contains("packet 2: truncated"), "{msg}");
        // Cut in its record header.
        let (off, msg) = err_of(&b[..third_at + 7]);
        assert_eq!(off, third_at as u64, "{msg}");
        assert!(
            msg.contains("truncated record header (7 of 16 bytes)"),
            "{msg}"
        );
        let (off, msg) = err_of(&b[..10]);
        assert_eq!(off, 0);
        assert!(msg.contains("truncated pcap file header"), "{msg}");
        let (off, msg) = err_of(b"GIF89a..........................");
        assert_eq!(off, 0);
        assert!(msg.contains("not a pcap or pcapng file"), "{msg}");
        let mut eth = b.clone();
        eth[20..24].copy_from_slice(&1u32.to_ne_bytes());
        let (off, msg) = err_of(&eth);
        assert_eq!(off, 20);
        assert!(msg.contains("link type 1 is not usbmon"), "{msg}");
        // A bad event type in the second packet.
        let mut bad = b.clone();
        let second_at = 24 + 16 + first + 16;
        bad[second_at + 8] = b'X';
        let (off, msg) = err_of(&bad);
        assert_eq!(off, second_at as u64, "{msg}");
        assert!(
            msg.contains("packet 1: event type 'X' is not S, C or E"),
            "{msg}"
        );
        // Bytes the kernel zeroes.
        let mut bad = b.clone();
        bad[second_at + 52] = 1;
        let (_, msg) = err_of(&bad);
        assert!(msg.contains("header byte 52 (start_frame)"), "{msg}");
        // len_cap larger than the packet is a snapshot cut, not an error;
        // smaller is corrupt.
        let mut bad = b.clone();
        bad[second_at + 36] = 2;
        let (_, msg) = err_of(&bad);
        assert!(msg.contains("but len_cap is 2"), "{msg}");
        // An absurd length.
        let mut bad = b.clone();
        bad[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_ne_bytes());
        let (off, msg) = err_of(&bad);
        assert_eq!(off, 24);
        assert!(msg.contains("not plausible"), "{msg}");
    }

    #[test]
    fn truncated_and_corrupt_pcapng_name_the_offset() {
        let d = tmp();
        let p = d.path().join("x.pcapng");
        let evs = sample_events(1);
        write_events(&p, &evs[..2], Format::PcapNg, LinkType::Mmapped).unwrap();
        let b = std::fs::read(&p).unwrap();
        let epb2_len = 32 + encode_event(&evs[1], RECORD_RING).len().div_ceil(4) * 4;
        let epb2_at = b.len() - epb2_len;
        let (off, msg) = err_of(&b[..b.len() - 3]);
        assert_eq!(off, epb2_at as u64, "{msg}");
        assert!(msg.contains("truncated block"), "{msg}");
        let (off, msg) = err_of(&b[..epb2_at + 5]);
        assert_eq!(off, epb2_at as u64, "{msg}");
        assert!(msg.contains("truncated block header"), "{msg}");
        // A packet of an interface that was never described.
        let mut bad = b.clone();
        bad[epb2_at + 8..epb2_at + 12].copy_from_slice(&3u32.to_ne_bytes());
        let (off, msg) = err_of(&bad);
        assert_eq!(off, epb2_at as u64, "{msg}");
        assert!(msg.contains("interface 3 was never described"), "{msg}");
        // A corrupt usbmon header inside a good block.
        let mut bad = b.clone();
        bad[epb2_at + 28 + 9] = 9;
        let (off, msg) = err_of(&bad);
        assert_eq!(off, epb2_at as u64 + 28, "{msg}");
        assert!(msg.contains("transfer type 9"), "{msg}");
    }

    /// A classic pcap (native byte order, µs) holding `pkts`.
    fn pcap_of(linktype: u32, pkts: &[&[u8]]) -> Vec<u8> {
        let mut b = Vec::new();
        for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 0x0004_0000, linktype] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        for (i, p) in pkts.iter().enumerate() {
            for v in [1_700_000_000u32, i as u32, p.len() as u32, p.len() as u32] {
                b.extend_from_slice(&v.to_ne_bytes());
            }
            b.extend_from_slice(p);
        }
        b
    }

    /// A bulk OUT submission of 4 GiB - 1 whose header claims all of it
    /// (`len_cap` 0xffffffff) while only `present` data bytes follow.
    fn huge_submit(present: usize) -> Vec<u8> {
        let mut ev = sample_events(1)
            .into_iter()
            .find(|e| e.xfer == XferType::Bulk && e.kind == EventKind::Submit && !e.dir_in)
            .unwrap();
        ev.transfer_buffer_length = u32::MAX;
        ev.data = Some((0..present).map(|i| i as u8).collect::<Vec<_>>().into());
        ev.data_capture = DataCapture::Partial(present as u32);
        let mut pkt = encode_event(&ev, usize::MAX);
        assert_eq!(pkt.len(), 64 + present);
        pkt[36..40].copy_from_slice(&u32::MAX.to_ne_bytes());
        pkt
    }

    /// A 104-byte capture whose one packet claims 4 GiB: it decodes from the
    /// bytes present (snapped), holds none of the claimed rest, and replays
    /// as usbmon would show such a URB to a reader.
    #[test]
    fn four_gib_len_cap_decodes_from_the_bytes_present() {
        let pkt = huge_submit(0);
        let file = pcap_of(LINKTYPE_USB_LINUX_MMAPPED, &[&pkt]);
        assert_eq!(file.len(), 104);
        let p = Path::new("/x/huge.pcap");
        let (_, recs) = parse_records(p, &file).unwrap();
        let cap = Capture::from_records(p, &recs).unwrap();
        assert_eq!((cap.events.len(), cap.snapped), (1, 1));
        let ev = &cap.events[0];
        assert_eq!(ev.transfer_buffer_length, u32::MAX);
        assert_eq!(ev.data.as_deref().map(<[u8]>::len), Some(0));
        // Replayed to a reader with the largest ring: its fifth, zeros.
        let out = encode_event(ev, BUFF_MAX as usize);
        assert_eq!(out.len(), 64 + BUFF_MAX as usize / 5);
        assert!(out[64..].iter().all(|&b| b == 0));
        // Some bytes present, in a 48-byte (189) header too.
        for lt in [LINKTYPE_USB_LINUX_MMAPPED, LINKTYPE_USB_LINUX] {
            let hl = if lt == LINKTYPE_USB_LINUX { 48 } else { 64 };
            let pkt = huge_submit(20);
            let pkt: Vec<u8> = pkt[..hl].iter().chain(&pkt[64..]).copied().collect();
            let d = Decoder::new()
                .decode(lt, cfg!(target_endian = "big"), 0, &pkt)
                .unwrap();
            assert!(d.snapped);
            assert_eq!(d.event.data.as_deref(), Some(&pkt[hl..]));
        }
    }

    /// A record longer than the rest of the file is truncated, reported
    /// with its offset before any of it is copied; one beyond what usbmon
    /// can capture is not plausible.
    #[test]
    fn caplen_beyond_the_file_is_truncated() {
        let pkt = huge_submit(16);
        let mut file = pcap_of(LINKTYPE_USB_LINUX_MMAPPED, &[&pkt]);
        file[24 + 8..24 + 12].copy_from_slice(&(pkt.len() as u32 + 1).to_ne_bytes());
        let (off, msg) = err_of(&file);
        assert_eq!(off, 40, "{msg}");
        assert!(
            msg.contains("packet 0: truncated: 81 bytes announced, 80 present"),
            "{msg}"
        );
        file[24 + 8..24 + 12].copy_from_slice(&(MAX_PACKET as u32).to_ne_bytes());
        let (_, msg) = err_of(&file);
        assert!(msg.contains("packet 0: truncated"), "{msg}");
        file[24 + 8..24 + 12].copy_from_slice(&(MAX_PACKET as u32 + 1).to_ne_bytes());
        let (off, msg) = err_of(&file);
        assert_eq!(off, 24, "{msg}");
        assert!(msg.contains("not plausible"), "{msg}");
        assert_eq!(MAX_PACKET, 64 + 128 * 16 + (64 << 20) / 5);
    }

    /// The header's `len_cap` beyond the data: only the data present is
    /// kept (an ISO completion cut right after its descriptors too); the
    /// header check still applies to the claimed `len_cap`.
    #[test]
    fn header_len_cap_beyond_the_data_is_clamped() {
        let evs = sample_events(1);
        let native = cfg!(target_endian = "big");
        let iso = evs
            .iter()
            .position(|e| e.xfer == XferType::Iso && e.kind == EventKind::Complete)
            .unwrap();
        let pkt = encode_event(&evs[iso], RECORD_RING);
        let lendesc = evs[iso].iso.len() * 16;
        for cut in [64 + lendesc, 64 + lendesc + 7, pkt.len()] {
            let mut dec = Decoder::new();
            dec.decode(220, native, 0, &encode_event(&evs[iso - 1], RECORD_RING))
                .unwrap();
            let d = dec.decode(220, native, 0, &pkt[..cut]).unwrap();
            assert_eq!(d.snapped, cut < pkt.len(), "cut {cut}");
            let data = d.event.data.as_deref().unwrap();
            assert_eq!(data.len(), cut.saturating_sub(64 + lendesc), "cut {cut}");
            assert_eq!(d.event.iso.len(), evs[iso].iso.len());
            let again = encode_event(&d.event, RECORD_RING);
            assert_eq!(again.len(), pkt.len());
            assert_eq!(&again[36..40], &pkt[36..40], "len_cap kept");
            assert_eq!(&again[64..cut], &pkt[64..cut]);
            assert!(again[cut..].iter().all(|&b| b == 0));
        }
        // A claimed len_cap beyond the URB's length is still corrupt.
        let mut bad = huge_submit(4);
        bad[32..36].copy_from_slice(&100u32.to_ne_bytes());
        let e = Decoder::new().decode(220, native, 0, &bad).unwrap_err();
        assert!(e.contains("header byte 36 (len_cap)"), "{e}");
    }

    #[test]
    fn snapshot_cut_packets_replay_with_zeros() {
        let evs = sample_events(1);
        let pkt = encode_event(&evs[1], RECORD_RING);
        let mut dec = Decoder::new();
        dec.decode(
            220,
            cfg!(target_endian = "big"),
            0,
            &encode_event(&evs[0], RECORD_RING),
        )
        .unwrap();
        let d = dec
            .decode(220, cfg!(target_endian = "big"), 0, &pkt[..64 + 10])
            .unwrap();
        assert!(d.snapped);
        let mut again = encode_event(&d.event, RECORD_RING);
        again[16..28].copy_from_slice(&pkt[16..28]);
        assert_eq!(&again[..74], &pkt[..74]);
        assert!(again[74..].iter().all(|&b| b == 0));
    }

    #[test]
    fn speed_scaling_and_loop_math() {
        let times = [0u64, 1_000_000, 1_500_000, 4_000_000];
        // Span 4 ms + mean spacing 4/3 ms.
        assert_eq!(loop_period(&times), 4_000_000 + 1_333_333);
        assert_eq!(loop_period(&[0]), 1_000_000);
        assert_eq!(loop_period(&[0, 0, 0]), 1_000);
        assert_eq!(loop_period(&[]), 0);
        assert_eq!(scale(1_000_000, 2.0), 500_000);
        assert_eq!(scale(1_000_000, 0.5), 2_000_000);
        assert_eq!(scale(3, 2.0), 2);
        let per = loop_period(&times);
        assert_eq!(due(&times, 2, 0, per, 1.0), 1_500_000);
        assert_eq!(due(&times, 2, 0, per, 2.0), 750_000);
        assert_eq!(due(&times, 0, 1, per, 1.0), per);
        assert_eq!(due(&times, 3, 2, per, 4.0), 1_000_000 + 2 * scale(per, 4.0));
        // A zero-length pass still advances.
        assert_eq!(due(&[0], 0, 5, 0, 1000.0), 5);
    }

    struct Collect(Mutex<Vec<UrbEvent>>);
    impl crate::usbmon::event::UrbSink for Collect {
        fn urb_event(&self, ev: UrbEvent) {
            self.0.lock_ok().push(ev);
        }
    }

    fn sim(yaml: &str) -> (super::super::UsbSim, Arc<Collect>) {
        let cfg = crate::config::Config::parse(yaml, "t.yaml").unwrap();
        let sink = Arc::new(Collect(Mutex::new(Vec::new())));
        let clock = Arc::new(crate::clock::VirtualClock::new());
        let sim = super::super::UsbSim::new(&cfg.usb, 1, clock, sink.clone());
        (sim, sink)
    }

    /// A looping replay at double speed: only replayed events, on the
    /// configured bus, original spacing halved, pass after pass.
    #[test]
    fn replay_bus_loops_at_speed() {
        let d = tmp();
        let p = d.path().join("c.pcapng");
        let evs = sample_events(9);
        write_events(&p, &evs, Format::PcapNg, LinkType::Mmapped).unwrap();
        let n = evs.len() as u64;
        let span = 125_000_000 * (n - 1);
        let per = span + span / (n - 1);
        let (sim, sink) = sim(&format!(
            "usb:\n  buses:\n    - bus: 4\n      replay: {{file: {}, speed: 2, loop: true, after_ms: 3}}\n",
            p.display()
        ));
        // Three passes and the first packet of the fourth.
        sim.run_until(3_000_000 + 3 * per / 2);
        let got = sink.0.lock_ok().clone();
        assert_eq!(got.len() as u64, 3 * n + 1);
        let t0 = got[0].ts.mono_ns;
        assert_eq!(
            t0,
            100_000_000_000 + 3_000_000,
            "after_ms on the virtual clock"
        );
        for (i, e) in got.iter().enumerate() {
            let k = i % evs.len();
            let pass = (i / evs.len()) as u64;
            assert_eq!(e.bus, 4);
            assert_eq!(e.id, evs[k].id);
            assert_eq!(
                e.ts.mono_ns - t0,
                (k as u64 * 125_000_000 + pass * per) / 2,
                "event {i}"
            );
            assert_eq!(e.ts.wall_ns - got[0].ts.wall_ns, e.ts.mono_ns - t0);
        }
        let st = sim.replay_status(4).unwrap().unwrap();
        assert_eq!(
            (st.state, st.events, st.passes),
            (ReplayState::Playing, 3 * n + 1, 3)
        );
        sim.replay_stop(4).unwrap();
        sim.run_until(10_000_000_000);
        assert_eq!(sink.0.lock_ok().len() as u64, 3 * n + 1, "stopped");
        assert_eq!(
            sim.replay_status(4).unwrap().unwrap().state,
            ReplayState::Stopped
        );
        assert!(sim
            .replay_stop(4)
            .unwrap_err()
            .contains("no replay is running on bus 4"));
        assert!(
            sim.devices_text().contains("Bus=04"),
            "the root hub is listed"
        );
        let dev: crate::config::DeviceConfig =
            serde_yaml_ng::from_str("{port: 1, kind: hid-mouse}").unwrap();
        assert!(sim
            .plug(4, &[1], &dev)
            .unwrap_err()
            .contains("replays a capture"));
    }

    /// A corrupt capture stops its bus's replay with an error naming file
    /// and offset; the other buses run on, and a control start of the same
    /// file fails the same way and changes nothing.
    #[test]
    fn corrupt_capture_leaves_other_buses_running() {
        let d = tmp();
        let good = d.path().join("good.pcap");
        let bad = d.path().join("bad.pcap");
        let evs = sample_events(1);
        write_events(&good, &evs[..2], Format::Pcap, LinkType::Mmapped).unwrap();
        let b = std::fs::read(&good).unwrap();
        std::fs::write(&bad, &b[..b.len() - 1]).unwrap();
        let (sim, sink) = sim(&format!(
            "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 10\n    - bus: 2\n      replay: {{file: {}}}\n    - bus: 3\n      replay: {{file: {}}}\n",
            bad.display(),
            good.display()
        ));
        sim.run_until(300_000_000);
        let st = sim.replay_status(2).unwrap().unwrap();
        let ReplayState::Failed(msg) = &st.state else {
            panic!("{st}");
        };
        let off = 24 + 16 + encode_event(&evs[0], RECORD_RING).len() + 16;
        assert!(
            msg.contains(&format!(
                "{}: byte offset {off}: packet 1: truncated",
                bad.display()
            )),
            "{msg}"
        );
        let got = sink.0.lock_ok().clone();
        assert!(got.iter().filter(|e| e.bus == 1).count() > 5, "bus 1 runs");
        assert_eq!(got.iter().filter(|e| e.bus == 2).count(), 0);
        assert_eq!(got.iter().filter(|e| e.bus == 3).count(), 2);
        let cfg = |f: &Path| ReplayConfig {
            file: f.to_path_buf(),
            speed: Default::default(),
            looping: false,
            after_ms: 0,
        };
        let start = |bus: u16, f: &Path| {
            let cap = Capture::load(f).map_err(|e| e.to_string())?;
            sim.replay_start(bus, &cfg(f), cap)
        };
        let e = start(3, &bad).unwrap_err();
        assert!(e.contains("byte offset"), "{e}");
        assert_eq!(
            sim.replay_status(3).unwrap().unwrap().state,
            ReplayState::Finished
        );
        let e = start(3, &d.path().join("missing.pcap")).unwrap_err();
        assert!(
            e.contains("missing.pcap") && e.contains("No such file"),
            "{e}"
        );
        // A control start on a simulated bus mixes in the capture.
        start(1, &good).unwrap();
        sim.run_until(600_000_000);
        let got = sink.0.lock_ok().clone();
        assert!(got.iter().any(|e| e.bus == 1 && e.id == evs[0].id));
        assert_eq!(
            sim.replay_status(1).unwrap().unwrap().state,
            ReplayState::Finished
        );
        assert!(sim.replay_status(5).is_err());
    }

    #[test]
    fn control_commands_on_a_running_sim() {
        let d = tmp();
        let p = d.path().join("c.pcap");
        write_events(&p, &sample_events(1), Format::Pcap, LinkType::Mmapped).unwrap();
        let (sim, sink) = sim("usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n");
        let f = p.display().to_string();
        assert_eq!(
            run_command(&sim, &["status", "1"], None).unwrap(),
            "bus 1: no replay"
        );
        let open = || Some(std::fs::File::open(&p).unwrap());
        let r = run_command(&sim, &["start", "1", &f, "speed=1000", "loop"], open()).unwrap();
        assert!(r.contains("replaying") && r.contains("looping"), "{r}");
        sim.run_until(1_000_000_000);
        let r = run_command(&sim, &["status", "1"], None).unwrap();
        assert!(
            r.starts_with(&format!("bus 1: replay {f}: playing, ")),
            "{r}"
        );
        assert_eq!(
            run_command(&sim, &["stop", "1"], None).unwrap(),
            "bus 1: replay stopped"
        );
        let n = sink.0.lock_ok().len();
        sim.run_until(2_000_000_000);
        assert_eq!(sink.0.lock_ok().len(), n);
        assert!(run_command(&sim, &["stop", "1"], None).is_err());
        assert!(run_command(&sim, &["start", "9", &f], open())
            .unwrap_err()
            .contains("no USB bus 9"));
        // The FILE word only labels the capture: without a descriptor
        // nothing is opened, whatever it names.
        let e = run_command(&sim, &["start", "1", &f], None).unwrap_err();
        assert_eq!(e, NEEDS_DESCRIPTOR);
        // Only a regular file is read: not a device, a FIFO or a directory.
        let fifo = d.path().join("fifo");
        assert!(std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success());
        let nonblock = |p: &Path| {
            use std::os::unix::fs::OpenOptionsExt;
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(p)
                .unwrap()
        };
        for (what, file) in [
            ("/dev/zero", nonblock(Path::new("/dev/zero"))),
            ("fifo", nonblock(&fifo)),
            ("dir", nonblock(d.path())),
        ] {
            let e = run_command(&sim, &["start", "1", what], Some(file)).unwrap_err();
            assert_eq!(e, format!("{what}: not a regular file"));
        }
    }

    #[test]
    fn tsresol_units() {
        assert_eq!(tsresol_to_ns(1_500_000, 6), 1_500_000_000);
        assert_eq!(tsresol_to_ns(7, 9), 7);
        assert_eq!(tsresol_to_ns(12, 10), 1);
        assert_eq!(tsresol_to_ns(1 << 20, 0x80 | 20), 1_000_000_000);
    }

    #[test]
    fn control_command_grammar() {
        let c = ReplayCommand::parse(&["start", "3", "/tmp/a.pcap", "speed=2", "loop"]).unwrap();
        match c {
            ReplayCommand::Start { bus, cfg } => {
                assert_eq!(bus, 3);
                assert_eq!(cfg.file, Path::new("/tmp/a.pcap"));
                assert_eq!(cfg.speed.0, 2.0);
                assert!(cfg.looping);
            }
            c => panic!("{c:?}"),
        }
        assert_eq!(
            ReplayCommand::parse(&["stop", "2"]).unwrap(),
            ReplayCommand::Stop { bus: 2 }
        );
        assert!(ReplayCommand::parse(&["start", "0", "f"]).is_err());
        assert!(ReplayCommand::parse(&["start", "1", "f", "speed=-1"])
            .unwrap_err()
            .contains("speed"));
        assert!(ReplayCommand::parse(&["start", "1", "f", "lop"])
            .unwrap_err()
            .contains("lop"));
        assert!(ReplayCommand::parse(&["stop"]).is_err());
        assert!(ReplayCommand::parse(&[]).is_err());
    }
}
