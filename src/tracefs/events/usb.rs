//! Built-in event systems and the producer adapters: `usb` (URB submit,
//! complete and error, device plug and unplug) and `zvm` (monitor sample and
//! event records).

use std::sync::Arc;

use crate::base::clock::Timestamp;
use crate::tracefs::events::FieldValue;
use crate::tracefs::facility::{EventId, Tracing};
use crate::usbmon::event::{DeviceEvent, EventKind, UrbEvent, UrbSink};

/// The task monfs's own events are attributed to.
fn self_task() -> (u32, String) {
    let comm = std::fs::read_to_string("/proc/self/comm")
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "monfs".into());
    (std::process::id(), comm)
}

/// A [`UrbSink`] that records `usb:usb_urb_*` events and passes every event
/// on to the next sink (usbmon).
pub struct UrbTraceSink {
    tracing: Arc<Tracing>,
    next: Option<Arc<dyn UrbSink>>,
    ids: [EventId; 3],
    pid: u32,
    comm: String,
}

impl UrbTraceSink {
    /// Trace URB events, then hand them to `next`.
    pub fn new(tracing: Arc<Tracing>, next: Option<Arc<dyn UrbSink>>) -> UrbTraceSink {
        let id = |n| tracing.event_id("usb", n).expect("built-in usb event");
        let ids = [
            id("usb_urb_submit"),
            id("usb_urb_complete"),
            id("usb_urb_error"),
        ];
        let (pid, comm) = self_task();
        UrbTraceSink {
            tracing,
            next,
            ids,
            pid,
            comm,
        }
    }
}

impl UrbSink for UrbTraceSink {
    fn urb_event(&self, ev: UrbEvent) {
        let id = &self.ids[match ev.kind {
            EventKind::Submit => 0,
            EventKind::Complete => 1,
            EventKind::Error => 2,
        }];
        if id.is_enabled() {
            self.tracing.emit_at(
                id,
                ev.ts,
                self.pid,
                &self.comm,
                &[
                    FieldValue::UInt(ev.id),
                    FieldValue::UInt(ev.bus as u64),
                    FieldValue::UInt(ev.devnum as u64),
                    FieldValue::UInt(ev.ep_address() as u64),
                    FieldValue::UInt(ev.xfer as u64),
                    FieldValue::Int(ev.status as i64),
                    FieldValue::UInt(ev.length() as u64),
                ],
            );
        }
        if let Some(n) = &self.next {
            n.urb_event(ev);
        }
    }
    fn device_event(&self, ev: &DeviceEvent) {
        let d = UsbDeviceInfo {
            bus: ev.bus,
            dev: ev.devnum,
            devpath: &ev.devpath,
            vendor: ev.vendor,
            product: ev.product,
            name: &ev.name,
        };
        if ev.plugged {
            self.tracing.usb_plug(&d, Some(ev.ts));
        } else {
            self.tracing.usb_unplug(&d, Some(ev.ts));
        }
        if let Some(n) = &self.next {
            n.device_event(ev);
        }
    }
    fn wanted(&self, bus: u16) -> bool {
        self.ids.iter().any(|i| i.is_enabled())
            || [3, 4].iter().any(|&i| self.tracing.builtin(i).is_enabled())
            || self.next.as_ref().is_some_and(|n| n.wanted(bus))
    }
}

/// A USB device as the plug/unplug events describe it.
#[derive(Clone, Copy, Debug)]
pub struct UsbDeviceInfo<'a> {
    /// Bus number.
    pub bus: u16,
    /// Device address.
    pub dev: u8,
    /// Port path, e.g. `1-4.1`.
    pub devpath: &'a str,
    /// idVendor.
    pub vendor: u16,
    /// idProduct.
    pub product: u16,
    /// Product string.
    pub name: &'a str,
}

impl Tracing {
    fn emit_dev(&self, idx: usize, d: &UsbDeviceInfo<'_>, ts: Option<Timestamp>) {
        let id = self.builtin(idx);
        if !id.is_enabled() {
            return;
        }
        let (pid, comm) = self_task();
        let v = [
            FieldValue::UInt(d.bus as u64),
            FieldValue::UInt(d.dev as u64),
            FieldValue::UInt(d.vendor as u64),
            FieldValue::UInt(d.product as u64),
            FieldValue::Str(d.devpath),
            FieldValue::Str(d.name),
        ];
        match ts {
            Some(ts) => self.emit_at(id, ts, pid, &comm, &v),
            None => self.emit(id, pid, &comm, &v),
        }
    }

    /// Record `usb:usb_device_plug` (when enabled).
    pub fn usb_plug(&self, d: &UsbDeviceInfo<'_>, ts: Option<Timestamp>) {
        self.emit_dev(3, d, ts);
    }

    /// Record `usb:usb_device_unplug` (when enabled).
    pub fn usb_unplug(&self, d: &UsbDeviceInfo<'_>, ts: Option<Timestamp>) {
        self.emit_dev(4, d, ts);
    }

    /// Record a z/VM monitor record as `zvm:zvm_sample` (`event` false) or
    /// `zvm:zvm_event` (`event` true). `userid` is truncated to 8 bytes.
    #[allow(clippy::too_many_arguments)]
    pub fn zvm_record(
        &self,
        event: bool,
        domain: u8,
        record: u8,
        length: u16,
        userid: &str,
        tod: u64,
        ts: Option<Timestamp>,
    ) {
        let id = self.builtin(if event { 6 } else { 5 });
        if !id.is_enabled() {
            return;
        }
        let (pid, comm) = self_task();
        let v = [
            FieldValue::UInt(domain as u64),
            FieldValue::UInt(record as u64),
            FieldValue::UInt(length as u64),
            FieldValue::Str(userid),
            FieldValue::UInt(tod),
        ];
        match ts {
            Some(ts) => self.emit_at(id, ts, pid, &comm, &v),
            None => self.emit(id, pid, &comm, &v),
        }
    }
}

impl crate::monreader::RecordTap for Tracing {
    fn wanted(&self) -> bool {
        self.builtin(5).is_enabled() || self.builtin(6).is_enabled()
    }
    fn record_sent(&self, event: bool, r: &crate::monreader::records::Record, userid: &str) {
        let len = u16::try_from(r.len()).unwrap_or(u16::MAX);
        self.zvm_record(event, r.domain, r.number as u8, len, userid, r.tod, None);
    }
}
