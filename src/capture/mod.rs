//! Capture files of usbmon traffic, in one place: pcap and pcapng with
//! linktype 189 (`USB_LINUX`, 48-byte header) or 220 (`USB_LINUX_MMAPPED`,
//! 64-byte header), as tcpdump, dumpcap and `monfs record` write them.
//!
//! * [`read`]: the containers, parsed with `pcap-file` into raw packet
//!   records, every length checked against the bytes present.
//! * [`decode`]: packets back into [`UrbEvent`]s, accepted only if usbmon
//!   could have written them.
//! * [`write`](mod@write): events (or packets read from a device) into a file.
//!
//! The headers themselves are usbmon's ABI and live with it
//! ([`crate::usbmon::header`]). Playing a capture on a simulated bus is the
//! simulator's business ([`crate::sim::usb::replay`]).

use std::sync::Arc;

use crate::usbmon::event::{DataCapture, EventKind, IsoDesc, UrbEvent, XferType};

pub mod decode;
pub mod read;
pub mod recorded;
pub mod usbdesc;
pub mod write;

#[cfg(test)]
mod tests;

/// Events of every kind the formatters distinguish (control with and
/// without setup, bulk with NULL, scatter-gather and partial buffers, a
/// submission error, interrupt, ISO in and out with more than 128 packets),
/// 125 ms apart, as a capture decodes them (wall clock to the microsecond,
/// monotonic 0). For tests that make their own captures.
#[doc(hidden)]
pub fn sample_events(bus: u16) -> Vec<UrbEvent> {
    use crate::base::clock::Timestamp;
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
