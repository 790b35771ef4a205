//! A device taken from a usbmon capture (pcap or pcapng, linktype 189 or
//! 220): its descriptors from the GET_DESCRIPTOR completions the capture
//! holds (with its HID interfaces' report descriptors, as usbhid read
//! them), and each IN endpoint's successful completions, in recorded order
//! with their recorded spacing, for a simulated device to answer again;
//! and, for replay to programs, its `S` and `C` records in order, with
//! their times and isochronous packet descriptors.
//!
//! [`CapturePackets::load`] reads and decodes a capture (every packet is
//! checked, as replay checks it); [`CapturePackets::device`] picks one
//! device by address. Every error names the capture and, where one packet
//! is at fault, its number (0-based, as the capture decoder counts).

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::usbdesc::DescriptorDump;
use crate::capture::decode::Decoder;
use crate::capture::read::{read_records_from, CaptureError};
use crate::usbmon::event::{EventKind, IsoDesc, UrbEvent, XferType};
use crate::usbmon::header::ISODESC_MAX;

/// The longest recorded pause between two completions on one endpoint that
/// is kept (longer ones are shortened to it): 60 s.
pub const MAX_GAP_NS: u64 = 60_000_000_000;

/// The most completions kept per endpoint (later ones are dropped).
pub const MAX_COMPLETIONS: usize = 1 << 20;

/// One decoded packet of a capture.
#[derive(Clone, Debug, PartialEq)]
pub struct Packet {
    /// Packet number in the file (0-based, other link types counted).
    pub index: usize,
    /// Timestamp, ns since the epoch.
    pub ts_ns: u64,
    /// The snapshot length cut its data.
    pub snapped: bool,
    /// The event.
    pub event: UrbEvent,
}

/// Every packet of a capture, decoded and checked.
#[derive(Clone, PartialEq)]
pub struct CapturePackets {
    /// The file, as named.
    pub path: PathBuf,
    /// The packets, in file order.
    pub packets: Vec<Packet>,
}

impl fmt::Debug for CapturePackets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({} packets)",
            self.path.display(),
            self.packets.len()
        )
    }
}

/// One successful completion recorded on an IN endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedCompletion {
    /// Time since the previous completion on the endpoint (for the first:
    /// since the endpoint's first submission), ns, at most [`MAX_GAP_NS`].
    pub gap_ns: u64,
    /// actual_length.
    pub actual: u32,
    /// The data (as captured: the snapshot length may have cut it).
    pub data: Arc<[u8]>,
}

/// One IN endpoint's recorded traffic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedEndpoint {
    /// bEndpointAddress (0x80 set).
    pub addr: u8,
    /// Transfer type (bulk or interrupt).
    pub xfer: XferType,
    /// The submissions' transfer_buffer_length (the last one seen).
    pub len: u32,
    /// Successful completions, in recorded order (may be empty: the URB
    /// then stays pending, as it did in the recording).
    pub completions: Vec<RecordedCompletion>,
}

/// A device from a capture: descriptors, strings and IN endpoint data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedDevice {
    /// The capture it came from.
    pub path: PathBuf,
    /// Its bus in the capture.
    pub bus: u16,
    /// Its address in the capture.
    pub devaddr: u8,
    /// Device and configuration descriptors, checked as a sysfs dump is.
    pub dump: Arc<DescriptorDump>,
    /// String descriptors by index (0: the language list), raw bytes.
    pub strings: Vec<(u8, Vec<u8>)>,
    /// HID report descriptors by interface number: the longest complete
    /// answer to GET_DESCRIPTOR(REPORT) (bmRequestType 0x81, wValue
    /// 0x22xx, wIndex the interface) the capture holds for each, as
    /// usbhid's probe reads it.
    pub reports: Vec<(u8, Vec<u8>)>,
    /// IN endpoints (bulk and interrupt) with their completions.
    pub endpoints: Vec<RecordedEndpoint>,
    /// Every transfer of the device that completed, in order of
    /// completion: what a program's requests are answered from (replay
    /// for programs, as umockdev's pcap replay).
    pub transfers: Vec<RecordedTransfer>,
    /// Every submission of the device (but those the capture shows failing
    /// with an `E` record), in order: what a program's URBs are matched to.
    pub submissions: Vec<RecordedSubmission>,
    /// The device's `S` and `C` records in capture order, as umockdev's
    /// replay walks them.
    pub steps: Vec<ReplayStep>,
}

/// One recorded submission, with what a program's URB is matched on (as
/// umockdev matches a submission).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedSubmission {
    /// Packet number of the submission in the capture.
    pub packet: usize,
    /// bEndpointAddress (0x80 for an IN control transfer, 0 OUT).
    pub ep: u8,
    /// Transfer type.
    pub xfer: XferType,
    /// The setup packet of a control transfer.
    pub setup: Option<[u8; 8]>,
    /// transfer_buffer_length (a control transfer's wLength).
    pub len: u32,
    /// An OUT transfer's data, where the capture holds all of it (None: not
    /// captured, or cut by the snapshot length).
    pub out: Option<Arc<[u8]>>,
    /// When it was submitted, ns since the epoch (the packet's timestamp).
    pub ts_ns: u64,
    /// An isochronous submission: its number of packets (0 for other
    /// transfers).
    pub npk: u32,
    /// An isochronous submission's packet descriptors as usbmon holds them
    /// (the requested lengths): the first [`ISODESC_MAX`] at most.
    pub iso: Vec<IsoDesc>,
}

/// One record of a recorded device's walk (umockdev's replay walks the
/// capture's records in order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayStep {
    /// An `S` record: [`RecordedDevice::submissions`]`[i]`.
    Submit(usize),
    /// A `C` record: [`RecordedDevice::transfers`]`[i]`.
    Complete(usize),
}

/// One completed transfer of a recorded device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedTransfer {
    /// Packet number of the completion in the capture.
    pub packet: usize,
    /// bEndpointAddress (0x80 for an IN control transfer, 0 OUT).
    pub ep: u8,
    /// Transfer type.
    pub xfer: XferType,
    /// The setup packet of a control transfer.
    pub setup: Option<[u8; 8]>,
    /// Completion status.
    pub status: i32,
    /// actual_length.
    pub actual: u32,
    /// IN data as captured.
    pub data: Arc<[u8]>,
    /// The submission's transfer_buffer_length (a control transfer's
    /// wLength).
    pub len: u32,
    /// An OUT transfer's data as submitted, where the capture holds all of
    /// it (None: not captured, or cut by the snapshot length).
    pub out: Option<Arc<[u8]>>,
    /// Its submission in [`RecordedDevice::submissions`] (None: submitted
    /// before the capture started).
    pub sub: Option<usize>,
    /// When it completed, ns since the epoch (the packet's timestamp).
    pub ts_ns: u64,
    /// An isochronous completion: its number of packets (0 for other
    /// transfers).
    pub npk: u32,
    /// An isochronous completion's packet descriptors as usbmon holds them
    /// (each packet's status, offset in `data` and actual length): the
    /// first [`ISODESC_MAX`] at most.
    pub iso: Vec<IsoDesc>,
}

impl RecordedTransfer {
    /// The recorded delay between its submission and its completion, ns
    /// (0 for one submitted before the capture started), at most
    /// [`MAX_GAP_NS`].
    pub fn delay_ns(&self, subs: &[RecordedSubmission]) -> u64 {
        self.sub
            .and_then(|i| subs.get(i))
            .map(|s| self.ts_ns.saturating_sub(s.ts_ns).min(MAX_GAP_NS))
            .unwrap_or(0)
    }
}

/// An isochronous record's packets: how many, and the first
/// [`ISODESC_MAX`] descriptors (the most usbmon keeps).
fn iso_of(e: &UrbEvent) -> (u32, Vec<IsoDesc>) {
    if e.xfer != XferType::Iso {
        return (0, vec![]);
    }
    let n = e.iso.len();
    (n as u32, e.iso[..n.min(ISODESC_MAX)].to_vec())
}

/// Most transfers (and most submissions) kept of a recorded device for
/// programs: the capture's records after those are left out, as if it
/// ended there.
pub const MAX_TRANSFERS: usize = 1 << 20;

/// A device's transfers, submissions and walk (see [`RecordedDevice`]).
type Walk = (
    Vec<RecordedTransfer>,
    Vec<RecordedSubmission>,
    Vec<ReplayStep>,
);

/// The completed transfers of `packets` (one device's) in order of
/// completion, its submissions in order, and its records in order.
fn transfers<'a>(packets: impl Iterator<Item = &'a Packet>) -> Walk {
    // A submission in flight, by URB id: its index in `subs`.
    let mut open: HashMap<u64, usize> = HashMap::new();
    let mut subs: Vec<RecordedSubmission> = Vec::new();
    // Submissions the capture shows failing (an `E` record).
    let mut failed: std::collections::HashSet<usize> = Default::default();
    let mut steps = Vec::new();
    let mut out = Vec::new();
    for p in packets {
        if out.len() >= MAX_TRANSFERS || subs.len() >= MAX_TRANSFERS {
            break;
        }
        let e = &p.event;
        let ep = e.epnum & 0x0f | if e.dir_in { 0x80 } else { 0 };
        match e.kind {
            EventKind::Submit => {
                let whole = e.data.clone().filter(|d| {
                    !e.dir_in && !p.snapped && d.len() == e.transfer_buffer_length as usize
                });
                open.insert(e.id, subs.len());
                steps.push(ReplayStep::Submit(subs.len()));
                let (npk, iso) = iso_of(e);
                subs.push(RecordedSubmission {
                    packet: p.index,
                    ep,
                    xfer: e.xfer,
                    setup: e.setup,
                    len: e.transfer_buffer_length,
                    out: whole,
                    ts_ns: p.ts_ns,
                    npk,
                    iso,
                });
            }
            EventKind::Error => {
                if let Some(i) = open.remove(&e.id) {
                    failed.insert(i);
                }
            }
            EventKind::Complete => {
                // Submitted before the capture started: its length is
                // unknown, so any length matches it (a control transfer's
                // setup is unknown too, and it is left out below).
                let sub = open.remove(&e.id);
                let s = sub.map(|i| &subs[i]);
                let (setup, len, data_out) = match s {
                    Some(s) => (s.setup, s.len, s.out.clone()),
                    None => (None, u32::MAX, None),
                };
                if e.xfer == XferType::Control && setup.is_none() {
                    continue;
                }
                steps.push(ReplayStep::Complete(out.len()));
                let (npk, iso) = iso_of(e);
                out.push(RecordedTransfer {
                    packet: p.index,
                    ep,
                    xfer: e.xfer,
                    setup,
                    status: e.status,
                    actual: e.actual_length,
                    data: e.data.clone().unwrap_or_else(|| Arc::from(&[][..])),
                    len,
                    out: data_out,
                    sub,
                    ts_ns: p.ts_ns,
                    npk,
                    iso,
                });
            }
        }
    }
    if !failed.is_empty() {
        steps.retain(|s| !matches!(s, ReplayStep::Submit(i) if failed.contains(i)));
    }
    (out, subs, steps)
}

/// Where a descriptor came from: its bytes and packet number.
struct Found {
    data: Vec<u8>,
    packet: usize,
}

impl CapturePackets {
    /// Read and decode the capture open as `file`, named `name` in errors
    /// (only a regular file is read; see [`read_records_from`]).
    pub fn load(file: &std::fs::File, name: &Path) -> Result<CapturePackets, CaptureError> {
        let (_, records) = read_records_from(file, name)?;
        let mut dec = Decoder::new();
        let mut packets = Vec::with_capacity(records.len());
        for r in records {
            let d = dec
                .decode(r.linktype, r.big_endian, r.ts_ns, &r.data)
                .map_err(|m| {
                    crate::capture::read::corrupt(
                        name,
                        r.offset,
                        format!("packet {}: {m}", r.index),
                    )
                })?;
            packets.push(Packet {
                index: r.index,
                ts_ns: r.ts_ns,
                snapped: d.snapped,
                event: d.event,
            });
        }
        Ok(CapturePackets {
            path: name.to_path_buf(),
            packets,
        })
    }

    /// The device with address `devaddr`: on the first bus where the
    /// capture has its device descriptor (else where it first appears).
    /// Errors name what is missing, and the packet where bytes are bad.
    pub fn device(&self, devaddr: u8) -> Result<RecordedDevice, RecordedError> {
        self.device_from(devaddr, None, None)
    }

    /// The device with address `devaddr` (on `bus`, else on the first bus
    /// where the capture has it) whose descriptors are `dump`, given by
    /// its configuration rather than taken from the capture (a recording
    /// made after the device enumerated has none): its strings, report
    /// descriptors and transfers from the capture.
    pub fn device_with(
        &self,
        devaddr: u8,
        bus: Option<u16>,
        dump: Arc<DescriptorDump>,
    ) -> Result<RecordedDevice, RecordedError> {
        self.device_from(devaddr, bus, Some(dump))
    }

    fn device_from(
        &self,
        devaddr: u8,
        on_bus: Option<u16>,
        given: Option<Arc<DescriptorDump>>,
    ) -> Result<RecordedDevice, RecordedError> {
        let name = self.path.display().to_string();
        let ev_of =
            |p: &&Packet| p.event.devnum == devaddr && on_bus.is_none_or(|b| p.event.bus == b);
        let mine: Vec<&Packet> = self.packets.iter().filter(ev_of).collect();
        if mine.is_empty() {
            let mut seen: Vec<(u16, u8)> = self
                .packets
                .iter()
                .map(|p| (p.event.bus, p.event.devnum))
                .collect();
            seen.sort_unstable();
            seen.dedup();
            let list: Vec<String> = seen.iter().map(|(b, d)| format!("{b}:{d}")).collect();
            return Err(RecordedError::NoDevice {
                file: name,
                devaddr,
                present: if list.is_empty() {
                    "none".to_string()
                } else {
                    list.join(" ")
                },
            });
        }
        // Control completions on ep0 with the setup of their submission.
        let mut setups: HashMap<(u16, u64), [u8; 8]> = HashMap::new();
        let mut ctrl: Vec<(&Packet, [u8; 8])> = Vec::new();
        // GET_DESCRIPTOR(REPORT) of an interface (usbhid's probe).
        let mut hid: Vec<(&Packet, [u8; 8])> = Vec::new();
        for p in &mine {
            let e = &p.event;
            if e.xfer != XferType::Control || e.epnum != 0 {
                continue;
            }
            match e.kind {
                EventKind::Submit => {
                    if let Some(s) = e.setup {
                        setups.insert((e.bus, e.id), s);
                    }
                }
                EventKind::Complete => {
                    if let Some(s) = setups.remove(&(e.bus, e.id)) {
                        if e.status == 0 && s[0] == 0x80 && s[1] == 0x06 && !p.snapped {
                            ctrl.push((p, s));
                        }
                        let report = s[0] == 0x81 && s[1] == 0x06 && s[3] == 0x22;
                        if e.status == 0 && report && !p.snapped {
                            hid.push((p, s));
                        }
                    }
                }
                EventKind::Error => {}
            }
        }
        let data_of = |p: &Packet| -> Vec<u8> {
            let d = p.event.data.as_deref().unwrap_or(&[]);
            d[..d.len().min(p.event.actual_length as usize)].to_vec()
        };
        let value = |s: &[u8; 8]| u16::from_le_bytes([s[2], s[3]]);
        let bus = match (&given, on_bus) {
            (_, Some(b)) => b,
            (Some(_), None) => mine[0].event.bus,
            (None, None) => ctrl
                .iter()
                .find(|(p, s)| value(s) == 0x0100 && data_of(p).len() >= 18)
                .map(|(p, _)| p.event.bus)
                .unwrap_or(mine[0].event.bus),
        };
        let ctrl: Vec<&(&Packet, [u8; 8])> =
            ctrl.iter().filter(|(p, _)| p.event.bus == bus).collect();
        let dump = match given {
            Some(d) => d,
            None => {
                // The device descriptor: the last complete one.
                let dev = ctrl
                    .iter()
                    .filter(|(_, s)| value(s) == 0x0100)
                    .map(|(p, _)| Found {
                        data: data_of(p),
                        packet: p.index,
                    })
                    .rfind(|f| f.data.len() >= 18)
                    .ok_or_else(|| RecordedError::NoDeviceDescriptor {
                        file: name.clone(),
                        bus,
                        devaddr,
                    })?;
                let nconf = dev.data[17];
                let mut found = vec![Found {
                    data: dev.data[..18].to_vec(),
                    packet: dev.packet,
                }];
                for i in 0..nconf {
                    let mut best: Option<Found> = None;
                    let mut partial: Option<(usize, usize, usize)> = None;
                    for (p, s) in &ctrl {
                        if value(s) != 0x0200 | i as u16 {
                            continue;
                        }
                        let d = data_of(p);
                        if d.len() < 4 {
                            continue;
                        }
                        let total = u16::from_le_bytes([d[2], d[3]]) as usize;
                        if d.len() >= total && total >= 9 {
                            best = Some(Found {
                                data: d[..total].to_vec(),
                                packet: p.index,
                            });
                        } else {
                            partial = Some((d.len(), total, p.index));
                        }
                    }
                    match (best, partial) {
                        (Some(f), _) => found.push(f),
                        (None, Some((got, total, pk))) => {
                            return Err(RecordedError::PartConfig {
                                file: name,
                                bus,
                                devaddr,
                                index: i,
                                got,
                                total,
                                packet: pk,
                            })
                        }
                        (None, None) => {
                            return Err(RecordedError::NoConfig {
                                file: name,
                                bus,
                                devaddr,
                                index: i,
                                count: nconf,
                                packet: dev.packet,
                            })
                        }
                    }
                }
                let bytes: Vec<u8> = found.iter().flat_map(|f| f.data.iter().copied()).collect();
                let dump = DescriptorDump::parse(bytes).map_err(|e| {
                    // The packet that holds the offending byte.
                    let mut at = e.offset;
                    let mut pk = found.last().map(|f| f.packet).unwrap_or(0);
                    for f in &found {
                        if at < f.data.len() {
                            pk = f.packet;
                            break;
                        }
                        at -= f.data.len();
                    }
                    RecordedError::BadDescriptor {
                        file: name.clone(),
                        bus,
                        devaddr,
                        packet: pk,
                        offset: at,
                        message: e.message,
                    }
                })?;
                Arc::new(dump)
            }
        };
        // Strings: the longest complete answer for each index.
        let mut strings: Vec<(u8, Vec<u8>)> = Vec::new();
        for (p, s) in &ctrl {
            if value(s) >> 8 != 3 {
                continue;
            }
            let d = data_of(p);
            if d.len() < 2 || d[1] != 3 || (d[0] as usize) > d.len() || d[0] < 2 {
                continue;
            }
            let raw = d[..d[0] as usize].to_vec();
            let idx = value(s) as u8;
            match strings.iter_mut().find(|(i, _)| *i == idx) {
                Some((_, old)) if old.len() < raw.len() => *old = raw,
                Some(_) => {}
                None => strings.push((idx, raw)),
            }
        }
        strings.sort_by_key(|(i, _)| *i);
        // Report descriptors: the longest complete answer for each
        // interface (complete: all of it captured and, where an interface's
        // HID descriptor gives the report descriptor's length, that long;
        // cut to that length, the bytes usbhid parses).
        let lengths = report_lengths(&dump);
        let mut reports: Vec<(u8, Vec<u8>)> = Vec::new();
        for (p, s) in hid.iter().filter(|(p, _)| p.event.bus == bus) {
            let (num, d) = (s[4], data_of(p));
            if s[5] != 0 || d.len() < p.event.actual_length as usize || d.is_empty() {
                continue;
            }
            let raw = match lengths.iter().find(|(i, _)| *i == num) {
                Some(&(_, n)) if d.len() < n => continue,
                Some(&(_, n)) => d[..n].to_vec(),
                None => d,
            };
            match reports.iter_mut().find(|(i, _)| *i == num) {
                Some((_, old)) if old.len() < raw.len() => *old = raw,
                Some(_) => {}
                None => reports.push((num, raw)),
            }
        }
        reports.sort_by_key(|(i, _)| *i);
        let (transfers, submissions, steps) =
            transfers(mine.iter().filter(|p| p.event.bus == bus).copied());
        Ok(RecordedDevice {
            path: self.path.clone(),
            bus,
            devaddr,
            dump,
            strings,
            reports,
            endpoints: endpoints(mine.iter().filter(|p| p.event.bus == bus).copied()),
            transfers,
            submissions,
            steps,
        })
    }
}

/// The report descriptor's length (wDescriptorLength of its HID
/// descriptor's first report entry) of each HID interface of the dump's
/// configurations (the first one found for an interface number).
fn report_lengths(dump: &DescriptorDump) -> Vec<(u8, usize)> {
    let mut out: Vec<(u8, usize)> = Vec::new();
    for c in 0..dump.configs.len() {
        let Some(mut b) = dump.config_bytes(c) else {
            continue;
        };
        let mut intf: Option<(u8, u8)> = None;
        while b.len() >= 2 && b[0] >= 2 && b[0] as usize <= b.len() {
            let d = &b[..b[0] as usize];
            match d[1] {
                4 if d.len() >= 9 => intf = Some((d[2], d[5])),
                0x21 if d.len() >= 9 => {
                    if let Some((num, 3)) = intf {
                        // bNumDescriptors entries of (type, length).
                        let n = (d[5] as usize).min((d.len() - 6) / 3);
                        let rep = (0..n)
                            .map(|k| &d[6 + 3 * k..9 + 3 * k])
                            .find(|e| e[0] == 0x22)
                            .map(|e| u16::from_le_bytes([e[1], e[2]]) as usize);
                        if let (Some(len), false) = (rep, out.iter().any(|(i, _)| *i == num)) {
                            out.push((num, len));
                        }
                    }
                }
                _ => {}
            }
            b = &b[b[0] as usize..];
        }
    }
    out
}

/// Each bulk or interrupt IN endpoint's successful completions.
fn endpoints<'a>(packets: impl Iterator<Item = &'a Packet>) -> Vec<RecordedEndpoint> {
    let mut eps: Vec<(RecordedEndpoint, Option<u64>)> = Vec::new();
    for p in packets {
        let e = &p.event;
        if !e.dir_in || e.epnum == 0 || !matches!(e.xfer, XferType::Bulk | XferType::Interrupt) {
            continue;
        }
        let addr = 0x80 | (e.epnum & 0x0f);
        let i = match eps.iter().position(|(r, _)| r.addr == addr) {
            Some(i) => i,
            None => {
                eps.push((
                    RecordedEndpoint {
                        addr,
                        xfer: e.xfer,
                        len: 0,
                        completions: Vec::new(),
                    },
                    None,
                ));
                eps.len() - 1
            }
        };
        let (r, last) = &mut eps[i];
        match e.kind {
            EventKind::Submit => {
                r.len = e.transfer_buffer_length;
                last.get_or_insert(p.ts_ns);
            }
            EventKind::Complete if e.status == 0 && r.completions.len() < MAX_COMPLETIONS => {
                let prev = last.unwrap_or(p.ts_ns);
                let d = e.data.clone().unwrap_or_else(|| Arc::from(&[][..]));
                r.completions.push(RecordedCompletion {
                    gap_ns: p.ts_ns.saturating_sub(prev).min(MAX_GAP_NS),
                    actual: e.actual_length,
                    data: d,
                });
                *last = Some(p.ts_ns);
            }
            _ => {}
        }
    }
    let mut out: Vec<RecordedEndpoint> = eps.into_iter().map(|(r, _)| r).collect();
    for r in &mut out {
        // A completion can be longer than the last submission's buffer.
        let longest = r.completions.iter().map(|c| c.actual).max().unwrap_or(0);
        r.len = r.len.max(longest);
    }
    out.sort_by_key(|r| r.addr);
    out
}

impl RecordedDevice {
    /// Load the capture open as `file` (named `name`) and take device
    /// `devaddr` from it.
    pub fn load(
        file: &std::fs::File,
        name: &Path,
        devaddr: u8,
    ) -> Result<RecordedDevice, RecordedError> {
        CapturePackets::load(file, name)?.device(devaddr)
    }

    /// The report descriptor of HID interface `num`, if the capture has
    /// usbhid's (or anyone's) GET_DESCRIPTOR(REPORT) answer for it.
    pub fn report(&self, num: u8) -> Option<&[u8]> {
        self.reports
            .iter()
            .find(|(i, _)| *i == num)
            .map(|(_, r)| r.as_slice())
    }

    /// The raw string descriptor `idx`, if the capture has it.
    pub fn string(&self, idx: u8) -> Option<&[u8]> {
        self.strings
            .iter()
            .find(|(i, _)| *i == idx)
            .map(|(_, s)| s.as_slice())
    }
}

/// Why a device cannot be taken from a capture.
#[derive(Debug, thiserror::Error)]
pub enum RecordedError {
    /// The capture does not load.
    #[error(transparent)]
    Capture(#[from] CaptureError),
    /// No packet of the address.
    #[error(
        "{file}: no device with address {devaddr} in the capture (bus:address present: {present})"
    )]
    NoDevice {
        /// The capture.
        file: String,
        /// The address asked for.
        devaddr: u8,
        /// The bus:address pairs it has.
        present: String,
    },
    /// No device descriptor.
    #[error("{file}: device {bus}:{devaddr} has no complete GET_DESCRIPTOR(DEVICE) completion (18 bytes) in the capture")]
    NoDeviceDescriptor {
        /// The capture.
        file: String,
        /// The bus.
        bus: u16,
        /// The address.
        devaddr: u8,
    },
    /// A configuration descriptor only in part.
    #[error("{file}: device {bus}:{devaddr}: configuration descriptor {index} is only partly in the capture ({got} of its {total} bytes, packet {packet})")]
    PartConfig {
        /// The capture.
        file: String,
        /// The bus.
        bus: u16,
        /// The address.
        devaddr: u8,
        /// Which configuration.
        index: u8,
        /// Bytes there.
        got: usize,
        /// wTotalLength.
        total: usize,
        /// The packet.
        packet: usize,
    },
    /// A configuration descriptor missing.
    #[error("{file}: device {bus}:{devaddr} has no GET_DESCRIPTOR(CONFIGURATION, {index}) completion in the capture (bNumConfigurations {count}, packet {packet})")]
    NoConfig {
        /// The capture.
        file: String,
        /// The bus.
        bus: u16,
        /// The address.
        devaddr: u8,
        /// Which configuration.
        index: u8,
        /// bNumConfigurations.
        count: u8,
        /// The device descriptor's packet.
        packet: usize,
    },
    /// Descriptor bytes that do not parse.
    #[error("{file}: device {bus}:{devaddr}: packet {packet}: descriptor byte offset {offset}: {message}")]
    BadDescriptor {
        /// The capture.
        file: String,
        /// The bus.
        bus: u16,
        /// The address.
        devaddr: u8,
        /// The packet with the bad byte.
        packet: usize,
        /// Its offset in the descriptors.
        offset: usize,
        /// What is wrong.
        message: String,
    },
}

#[cfg(test)]
mod tests;
