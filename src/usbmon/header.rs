//! The binary event format of usbmon, shared by the binary interface
//! ([`super::binary`]), capture files ([`crate::capture`]) and replay: the
//! 48-byte ("API 0", `LINKTYPE_USB_LINUX`) and 64-byte ("API 1",
//! `LINKTYPE_USB_LINUX_MMAPPED`) headers, the ISO descriptors and data that
//! follow them, and `mon_bin_event`'s rules for how much of an event a
//! reader's ring captures (kernel-abi.md 2.3). This is usbmon's ABI, as
//! [`super::event`] is its model of an event.

use super::event::{DataCapture, EventKind, UrbEvent, XferType};
use super::ring::PKT_SIZE;

/// Bytes of the "API 0" header returned by `read()` and `MON_IOCX_GET`.
pub const PKT_SZ_API0: usize = 48;
/// Bytes of the "API 1" header returned by `MON_IOCX_GETX` and in the ring.
pub const PKT_SZ_API1: usize = 64;
/// At most this many ISO descriptors are stored.
pub const ISODESC_MAX: usize = 128;

/// The 64-byte header of an event as the ring stores it.
pub fn encode_header(ev: &UrbEvent, len_cap: u32, flag_data: u8, ndesc: u32) -> [u8; 64] {
    let mut h = [0u8; 64];
    let (sec, usec) = ev.ts.wall_sec_usec();
    h[0..8].copy_from_slice(&ev.id.to_ne_bytes());
    h[8] = ev.kind.letter();
    h[9] = ev.xfer as u8;
    h[10] = ev.ep_address();
    h[11] = ev.devnum;
    h[12..14].copy_from_slice(&ev.bus.to_ne_bytes());
    h[14] = if ev.has_setup_phase() {
        if ev.setup.is_some() {
            0
        } else {
            b'Z'
        }
    } else {
        b'-'
    };
    h[15] = flag_data;
    h[16..24].copy_from_slice(&sec.to_ne_bytes());
    h[24..28].copy_from_slice(&usec.to_ne_bytes());
    h[28..32].copy_from_slice(&ev.status.to_ne_bytes());
    if ev.kind == EventKind::Error {
        return h;
    }
    h[32..36].copy_from_slice(&ev.length().to_ne_bytes());
    h[36..40].copy_from_slice(&len_cap.to_ne_bytes());
    match ev.xfer {
        XferType::Control if ev.kind == EventKind::Submit => {
            if let Some(s) = ev.setup {
                h[40..48].copy_from_slice(&s);
            }
        }
        XferType::Iso => {
            h[40..44].copy_from_slice(&ev.error_count.to_ne_bytes());
            h[44..48].copy_from_slice(&(ev.iso.len() as i32).to_ne_bytes());
            h[48..52].copy_from_slice(&ev.interval.to_ne_bytes());
            h[52..56].copy_from_slice(&ev.start_frame.to_ne_bytes());
        }
        XferType::Interrupt => {
            h[48..52].copy_from_slice(&ev.interval.to_ne_bytes());
        }
        _ => {}
    }
    h[56..60].copy_from_slice(&ev.xfer_flags.to_ne_bytes());
    h[60..64].copy_from_slice(&ndesc.to_ne_bytes());
    h
}

/// What `mon_bin_event` decides for an event before it copies anything, for a
/// reader whose ring holds `ring_size` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapturePlan {
    /// ISO descriptors stored (at most [`ISODESC_MAX`]).
    pub ndesc: usize,
    /// Data bytes reserved in the ring.
    pub length: usize,
    /// Data bytes copied (fewer than `length` for a NULL or scatter-gather
    /// buffer).
    pub copied: usize,
    /// `flag_data`.
    pub flag_data: u8,
}

/// The capture rules of the binary interface (kernel-abi.md 2.3).
pub fn capture_plan(ev: &UrbEvent, ring_size: usize) -> CapturePlan {
    if ev.kind == EventKind::Error {
        return CapturePlan {
            ndesc: 0,
            length: 0,
            copied: 0,
            flag_data: b'E',
        };
    }
    let ndesc = if ev.xfer == XferType::Iso {
        ev.iso.len().min(ISODESC_MAX)
    } else {
        0
    };
    let mut length = ev.length() as usize;
    if ev.xfer == XferType::Iso && ev.kind == EventKind::Complete && ev.dir_in {
        length = ev.iso[..ndesc]
            .iter()
            .filter(|d| d.length != 0)
            .map(|d| d.offset as usize + d.length as usize)
            .max()
            .unwrap_or(0);
    }
    length = length.min(ev.transfer_buffer_length as usize);
    length = length.min(ring_size / 5);
    let mut flag_data = 0u8;
    if ev.dir_in {
        if ev.kind == EventKind::Submit {
            length = 0;
            flag_data = b'<';
        }
    } else if ev.kind == EventKind::Complete {
        length = 0;
        flag_data = b'>';
    }
    let mut copied = length;
    if length != 0 {
        match ev.data_capture {
            DataCapture::Unmapped => {
                flag_data = b'D';
                copied = 0;
            }
            _ if ev.data.is_none() => {
                flag_data = b'Z';
                copied = 0;
            }
            DataCapture::Partial(n) => copied = copied.min(n as usize),
            DataCapture::Full => {}
        }
    }
    CapturePlan {
        ndesc,
        length,
        copied,
        flag_data,
    }
}

/// The bytes after the 64-byte header: ISO descriptors, then the copied data
/// (zero-filled past the end of `data`).
pub fn encode_payload(ev: &UrbEvent, plan: &CapturePlan) -> Vec<u8> {
    let mut d = Vec::with_capacity(plan.ndesc * 16 + plan.copied);
    payload_parts(ev, plan, |part| d.extend_from_slice(part));
    d
}

/// Hand the payload to `put` piece by piece, so that the ring can take it
/// without an intermediate buffer.
pub(crate) fn payload_parts(ev: &UrbEvent, plan: &CapturePlan, mut put: impl FnMut(&[u8])) {
    for desc in &ev.iso[..plan.ndesc] {
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&desc.status.to_ne_bytes());
        b[4..8].copy_from_slice(&desc.offset.to_ne_bytes());
        b[8..12].copy_from_slice(&desc.length.to_ne_bytes());
        put(&b);
    }
    if plan.copied != 0 {
        let data = ev.data.as_deref().unwrap_or(&[]);
        let n = plan.copied.min(data.len());
        put(&data[..n]);
        const ZEROS: [u8; 256] = [0; 256];
        let mut left = plan.copied - n;
        while left > 0 {
            let k = left.min(ZEROS.len());
            put(&ZEROS[..k]);
            left -= k;
        }
    }
}

/// One event as a reader with a ring of `ring_size` bytes receives it through
/// `MON_IOCX_GETX` or the mmap ring: the 64-byte header, then `len_cap`
/// bytes (ISO descriptors and data). This is a `USB_LINUX_MMAPPED` (220)
/// packet; its first 48 bytes and the payload are a `USB_LINUX` (189) one.
pub fn encode_event(ev: &UrbEvent, ring_size: usize) -> Vec<u8> {
    let plan = capture_plan(ev, ring_size);
    let payload = encode_payload(ev, &plan);
    let h = encode_header(ev, payload.len() as u32, plan.flag_data, plan.ndesc as u32);
    let mut out = Vec::with_capacity(PKT_SIZE + payload.len());
    out.extend_from_slice(&h);
    out.extend_from_slice(&payload);
    out
}
