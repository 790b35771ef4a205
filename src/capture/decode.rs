//! Packets of a capture back into usbmon events. A packet is accepted only
//! if the binary formatter gives back its exact bytes (header except the
//! timestamp and bus number, ISO descriptors, data): anything usbmon cannot
//! have written is reported as corrupt, with its byte offset.
//!
//! Fields the capture cannot hold are the URB's: a 48-byte (189) header has
//! no interval, start frame, transfer flags or stored-descriptor count
//! (decoded as 0, with `min(numdesc, 128)` descriptors); a completion has
//! no transfer buffer length (taken from the URB's submission in the file,
//! else the smallest length the packet allows). Data cut off by the
//! snapshot length is decoded as zeros (the header keeps its `len_cap`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::read::{corrupt, read_records, read_records_from, CaptureError, RawRecord};
use super::read::{LINKTYPE_USB_LINUX, LINKTYPE_USB_LINUX_MMAPPED};
use crate::usbmon::event::{DataCapture, EventKind, IsoDesc, UrbEvent, XferType};
use crate::usbmon::header::{capture_plan, encode_event, ISODESC_MAX};

/// Largest ISO packet count accepted in a header.
const MAX_NUMDESC: i32 = 1 << 16;

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
pub(super) fn swap_header(h: &mut [u8; 64], hl: usize, payload: &mut [u8], to_native: bool) {
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
    /// Isochronous packets counted beyond the descriptors stored, so far.
    counted: u64,
}

/// The isochronous packets beyond the stored descriptors a capture may
/// count in all (each costs a descriptor in memory): a hostile file of
/// records claiming 65,536 packets each is refused past it.
const MAX_COUNTED_PACKETS: u64 = 1 << 22;

/// Why a packet is not a usbmon record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PacketError {
    /// Another link type.
    #[error("link type {0} is not usbmon")]
    LinkType(u32),
    /// Shorter than the header.
    #[error("{len} bytes, shorter than the {header}-byte usbmon header")]
    Short {
        /// The packet's length.
        len: usize,
        /// The header's.
        header: usize,
    },
    /// A bad event type.
    #[error("event type {0} is not S, C or E")]
    EventType(String),
    /// A bad transfer type.
    #[error("transfer type {0} is not 0..=3")]
    XferType(u8),
    /// Too many ISO descriptors.
    #[error("ndesc {0} is more than {ISODESC_MAX}")]
    Ndesc(usize),
    /// len_cap short of the ISO descriptors.
    #[error("len_cap {len_cap} is less than its {ndesc} ISO descriptors ({lendesc} bytes)")]
    LenCapDescs {
        /// The header's len_cap.
        len_cap: usize,
        /// Its ndesc.
        ndesc: usize,
        /// Their bytes.
        lendesc: usize,
    },
    /// More bytes than len_cap.
    #[error("{follow} bytes follow the header but len_cap is {len_cap}")]
    LenCap {
        /// Bytes after the header.
        follow: usize,
        /// The header's len_cap.
        len_cap: usize,
    },
    /// An implausible ISO packet count.
    #[error("ISO packet count {0} is not plausible")]
    Numdesc(i32),
    /// More packets beyond the stored descriptors than a capture may have.
    #[error("more than {MAX_COUNTED_PACKETS} ISO packets beyond their stored descriptors in this capture")]
    CountedPackets,
    /// A header byte usbmon would not write.
    #[error("header byte {byte} ({field}) is {got} where usbmon would write {want} for this event: not a usbmon record")]
    Header {
        /// Its offset.
        byte: usize,
        /// Its field.
        field: &'static str,
        /// What it is.
        got: String,
        /// What usbmon writes.
        want: String,
    },
    /// A payload usbmon would not capture.
    #[error("payload differs from what usbmon would capture at byte {byte} (len_cap {len_cap}, usbmon would capture {want})")]
    Payload {
        /// The first differing byte.
        byte: usize,
        /// The bytes present.
        len_cap: usize,
        /// The bytes usbmon captures.
        want: usize,
    },
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
    ) -> Result<Decoded, PacketError> {
        let hl = match linktype {
            LINKTYPE_USB_LINUX => 48,
            LINKTYPE_USB_LINUX_MMAPPED => 64,
            lt => return Err(PacketError::LinkType(lt)),
        };
        if pkt.len() < hl {
            return Err(PacketError::Short {
                len: pkt.len(),
                header: hl,
            });
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
            t => return Err(PacketError::EventType(show(t))),
        };
        let xfer = XferType::from_u8(h[9]).ok_or(PacketError::XferType(h[9]))?;
        let id = u64::from_ne_bytes(h[0..8].try_into().unwrap());
        let mut ev = UrbEvent {
            id,
            kind,
            xfer,
            bus: u16::from_ne_bytes([h[12], h[13]]),
            devnum: h[11],
            epnum: h[10] & 0x7f,
            dir_in: h[10] & 0x80 != 0,
            ts: crate::base::clock::Timestamp {
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
                return Err(PacketError::Ndesc(ndesc));
            }
            let lendesc = ndesc * 16;
            if len_cap < lendesc {
                return Err(PacketError::LenCapDescs {
                    len_cap,
                    ndesc,
                    lendesc,
                });
            }
            if payload.len() > len_cap {
                return Err(PacketError::LenCap {
                    follow: payload.len(),
                    len_cap,
                });
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
                    return Err(PacketError::Numdesc(numdesc));
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
                    let more = (numdesc as usize - ev.iso.len()) as u64;
                    if self.counted + more > MAX_COUNTED_PACKETS {
                        return Err(PacketError::CountedPackets);
                    }
                    self.counted += more;
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
            return Err(PacketError::Header {
                byte: i,
                field: field_at(i),
                got: show(h[i]),
                want: show(again[i]),
            });
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
            return Err(PacketError::Payload {
                byte: i,
                len_cap: payload.len(),
                want: want.len(),
            });
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
}
