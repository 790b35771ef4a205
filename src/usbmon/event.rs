//! The URB event model: what usbmon captures at each submit, completion and
//! submit error. Both the text (`mon_text`) and binary (`mon_bin`) views format
//! the same [`UrbEvent`], so the same URB is the same event in both.

use std::sync::{Arc, Mutex};

use crate::base::clock::Timestamp;
use crate::base::sync::LockExt;

/// USB transfer type, numbered as in the binary header's `xfer_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum XferType {
    /// Isochronous (`Z` in text).
    Iso = 0,
    /// Interrupt (`I`).
    Interrupt = 1,
    /// Control (`C`).
    Control = 2,
    /// Bulk (`B`).
    Bulk = 3,
}

impl XferType {
    /// The letter used by the text interface.
    pub fn letter(self) -> u8 {
        match self {
            XferType::Iso => b'Z',
            XferType::Interrupt => b'I',
            XferType::Control => b'C',
            XferType::Bulk => b'B',
        }
    }

    /// From the binary header's number.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => XferType::Iso,
            1 => XferType::Interrupt,
            2 => XferType::Control,
            3 => XferType::Bulk,
            _ => return None,
        })
    }
}

/// Which callback produced the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// URB submitted (`S`).
    Submit,
    /// URB completed (`C`).
    Complete,
    /// Submission failed (`E`).
    Error,
}

impl EventKind {
    /// `S`, `C` or `E`.
    pub fn letter(self) -> u8 {
        match self {
            EventKind::Submit => b'S',
            EventKind::Complete => b'C',
            EventKind::Error => b'E',
        }
    }
}

/// One isochronous packet descriptor as the URB holds it at the event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct IsoDesc {
    /// Packet status (-18, EXDEV, before completion on most HCDs).
    pub status: i32,
    /// Offset of the packet in the transfer buffer.
    pub offset: u32,
    /// Requested length on submit, actual length on completion.
    pub length: u32,
}

/// URB_DIR_IN in `transfer_flags`.
pub const URB_DIR_IN: u32 = 0x0200;
/// URB_SHORT_NOT_OK in `transfer_flags`.
pub const URB_SHORT_NOT_OK: u32 = 0x0001;
/// URB_ISO_ASAP in `transfer_flags`.
pub const URB_ISO_ASAP: u32 = 0x0002;
/// URB_ZERO_PACKET in `transfer_flags`.
pub const URB_ZERO_PACKET: u32 = 0x0040;
/// URB_NO_INTERRUPT in `transfer_flags`.
pub const URB_NO_INTERRUPT: u32 = 0x0080;

/// -EINPROGRESS, the status of every `S` event.
pub const EINPROGRESS: i32 = -115;

/// How much of the transfer buffer usbmon can copy at the event. Simulated
/// URBs have plain buffers ([`DataCapture::Full`]); the other cases come from
/// replayed captures of real scatter-gather URBs (or of a reader whose ring
/// cut the data), so that the formatters reproduce them exactly.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DataCapture {
    /// The whole buffer is reachable (`data: None` still means a NULL buffer,
    /// flag `'Z'`).
    #[default]
    Full,
    /// Only the first N bytes are copied (a scatter-gather list that reaches
    /// highmem, or the data limit of the reader that recorded a capture):
    /// flag 0 and `len_cap` reduced, as `mon_bin_get_data` does.
    Partial(u32),
    /// The buffer is a scatter-gather list that cannot be copied at all:
    /// flag `'D'`, nothing copied.
    Unmapped,
}

/// One usbmon event. Fields hold what the URB holds at the callback; the
/// formatters apply the capture rules (32 data bytes in text, 5 ISO descriptors,
/// data flags), so producers never pre-truncate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UrbEvent {
    /// The URB tag (the kernel address of `struct urb`).
    pub id: u64,
    /// Submit, complete or error.
    pub kind: EventKind,
    /// Transfer type of the endpoint.
    pub xfer: XferType,
    /// Bus number (1..).
    pub bus: u16,
    /// Device address on the bus.
    pub devnum: u8,
    /// Endpoint number, 0..15, without the direction bit.
    pub epnum: u8,
    /// True for IN endpoints (and control transfers whose setup is IN).
    pub dir_in: bool,
    /// When the callback ran.
    pub ts: Timestamp,
    /// `S`: -115; `C`: completion status; `E`: the submit error.
    pub status: i32,
    /// `transfer_buffer_length` of the URB.
    pub transfer_buffer_length: u32,
    /// `actual_length` of the URB (meaningful on `C`).
    pub actual_length: u32,
    /// Interval, for interrupt and ISO endpoints.
    pub interval: i32,
    /// Start frame, for ISO.
    pub start_frame: i32,
    /// Error count, for ISO completions.
    pub error_count: i32,
    /// URB `transfer_flags`.
    pub xfer_flags: u32,
    /// The setup packet for control URBs; `None` means a NULL setup pointer.
    pub setup: Option<[u8; 8]>,
    /// All ISO packet descriptors of the URB (the URB's `number_of_packets`).
    pub iso: Vec<IsoDesc>,
    /// The transfer buffer contents relevant to this event (OUT data on submit, IN
    /// data on completion); `None` means a NULL transfer buffer.
    pub data: Option<Arc<[u8]>>,
    /// How much of `data` usbmon can copy (simulators: [`DataCapture::Full`]).
    pub data_capture: DataCapture,
}

impl UrbEvent {
    /// The event's length as usbmon reports it: `S` the transfer buffer length,
    /// `C` the actual length, `E` zero.
    pub fn length(&self) -> u32 {
        match self.kind {
            EventKind::Submit => self.transfer_buffer_length,
            EventKind::Complete => self.actual_length,
            EventKind::Error => 0,
        }
    }

    /// The endpoint byte with the direction bit, as in the binary header.
    pub fn ep_address(&self) -> u8 {
        self.epnum | if self.dir_in { 0x80 } else { 0 }
    }

    /// Whether a setup packet is reported (`S` events of control endpoints).
    pub fn has_setup_phase(&self) -> bool {
        self.kind == EventKind::Submit && self.xfer == XferType::Control
    }
}

/// Where producers (the simulators, replay) deliver URB events.
pub trait UrbSink: Send + Sync {
    /// Deliver one event. Must not block for long: slow readers drop.
    fn urb_event(&self, ev: UrbEvent);
    /// A device was added to a bus (enumerated and configured) or removed
    /// from it. usbmon shows no such event; the tracing sink records it.
    fn device_event(&self, _ev: &DeviceEvent) {}
    /// Whether anything takes `bus`'s events now (a reader, an enabled
    /// trace event). While nothing does, a producer may run in batches:
    /// events must still be delivered, with their own time stamps, but
    /// late.
    fn wanted(&self, _bus: u16) -> bool {
        true
    }
}

/// A device added to or removed from a bus, as `usb:usb_device_plug` and
/// `usb:usb_device_unplug` describe it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceEvent {
    /// When.
    pub ts: Timestamp,
    /// Added (true) or removed.
    pub plugged: bool,
    /// Bus number.
    pub bus: u16,
    /// Device address.
    pub devnum: u8,
    /// Port path with the bus, e.g. `1-4.1`.
    pub devpath: String,
    /// idVendor.
    pub vendor: u16,
    /// idProduct.
    pub product: u16,
    /// The product string (empty if none).
    pub name: String,
}

/// Puts the events of every bus into one order and stamps none of them
/// earlier than the one before, then hands them to the next sink.
///
/// The kernel stamps an event right before it queues it, so a reader of
/// several buses (`0u`, `/dev/usbmon0`, the tracing events) sees time go back
/// by microseconds at most. A bus's thread here makes an event at its
/// simulation time and may be preempted before it delivers it; another bus's
/// later event can get in first. Such a late event is stamped with the time
/// of the one delivered before it, as the kernel's late stamp would be. One
/// bus's own events come in time order and are never moved, so a seeded run
/// of one bus stays byte-identical.
pub struct Ordered {
    next: Arc<dyn UrbSink>,
    last: Mutex<Timestamp>,
}

impl Ordered {
    /// Order events, then hand them to `next`.
    pub fn new(next: Arc<dyn UrbSink>) -> Ordered {
        Ordered {
            next,
            last: Mutex::new(Timestamp::default()),
        }
    }
}

impl UrbSink for Ordered {
    fn urb_event(&self, mut ev: UrbEvent) {
        // Held while `next` delivers, so that every reader sees the order
        // the stamps were given in.
        let mut last = self.last.lock_ok();
        ev.ts.mono_ns = ev.ts.mono_ns.max(last.mono_ns);
        ev.ts.wall_ns = ev.ts.wall_ns.max(last.wall_ns);
        *last = ev.ts;
        self.next.urb_event(ev);
    }
    fn device_event(&self, ev: &DeviceEvent) {
        let mut last = self.last.lock_ok();
        let mut ev = ev.clone();
        ev.ts.mono_ns = ev.ts.mono_ns.max(last.mono_ns);
        ev.ts.wall_ns = ev.ts.wall_ns.max(last.wall_ns);
        *last = ev.ts;
        self.next.device_event(&ev);
    }
    fn wanted(&self, bus: u16) -> bool {
        self.next.wanted(bus)
    }
}
