//! A HID device as the HID core keeps it (`struct hid_device` with what
//! hidraw adds: its minor, its open files' report queues).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::base::sync::LockExt;
use crate::base::vfs::WakerSlot;
use crate::usbcore::device::DevRef;

use super::input::HidInput;
use super::report::{Descriptor, Kind};

/// `BUS_USB`.
pub const BUS_USB: u16 = 3;
/// `HID_GROUP_GENERIC`: the group `hid_scan_report` gives a device no
/// specialised driver claims (every device monfs makes).
pub const HID_GROUP_GENERIC: u16 = 1;
/// hidraw's major number when its nodes are files of the mount. The
/// kernel allocates it at boot (`alloc_chrdev_region`); 244 is what
/// Debian's 6.12 gave it in `scripts/kernel-vm`. With character devices
/// (CUSE) it is the major reserved for them.
pub const HIDRAW_MAJOR: u32 = 244;
/// `HIDRAW_MAX_DEVICES`: minors 0..64.
pub const HIDRAW_MAX_DEVICES: u32 = 64;
pub use super::report::HID_MAX_BUFFER_SIZE;
/// `HID_MAX_DESCRIPTOR_SIZE`.
pub const HID_MAX_DESCRIPTOR_SIZE: usize = 4096;
/// The driver the HID bus binds to the devices monfs makes.
pub const HID_GENERIC: &str = "hid-generic";

/// `HIDRAW_BUFFER_SIZE`: the ring of an open file; one slot stays free.
pub const HIDRAW_BUFFER_SIZE: usize = 64;

/// A HID device as the HID core knows it (`struct hid_device`).
pub struct HidDevice {
    /// The device's number in its name (`.NNNN`).
    pub id: u32,
    /// Its hidraw node's major and minor.
    pub major: u32,
    /// Its hidraw minor.
    pub minor: u32,
    /// The USB device and interface usbhid bound.
    pub dev: DevRef,
    /// bInterfaceNumber.
    pub ifnum: u8,
    /// idVendor, idProduct.
    pub vendor: u16,
    /// idProduct.
    pub product: u16,
    /// bCountryCode of its HID descriptor.
    pub country: u8,
    /// `hid->name`: manufacturer and product strings (or `HID vvvv:pppp`).
    pub name: String,
    /// `hid->phys`: `usb-CONTROLLER-DEVPATH/inputN`.
    pub phys: String,
    /// `hid->uniq`: the serial number string.
    pub uniq: String,
    /// The report descriptor.
    pub rdesc: Vec<u8>,
    /// It parsed (`hid_open_report`).
    pub desc: Descriptor,
    /// bcdHID of its HID descriptor (`hid->version`).
    pub version: u16,
    /// The interrupt OUT endpoint, if it has one: output reports go there,
    /// else by SET_REPORT.
    pub out_ep: Option<u8>,
    /// The interrupt IN endpoint usbhid polls.
    pub in_ep: u8,
    /// The interface's path below `/sys`.
    pub iface_devpath: String,
    /// Cleared when the device goes (`hidraw->exist`).
    pub(super) exist: AtomicBool,
    /// The open hidraw files, to hand reports to and wake.
    pub(super) lists: Mutex<Vec<Weak<RawList>>>,
    /// hid-input's side, when the device has input devices.
    pub(super) input: Mutex<Option<HidInput>>,
    /// LED changes the input layer sent, for the LED work to send.
    pub(super) leds: Mutex<Vec<(u16, i32)>>,
    /// Whether the LED work is scheduled.
    pub(super) led_work: AtomicBool,
}

impl HidDevice {
    /// Its kernel name, `0003:0627:0001.0001`.
    pub fn dev_name(&self) -> String {
        format!(
            "{:04X}:{:04X}:{:04X}.{:04X}",
            BUS_USB, self.vendor, self.product, self.id
        )
    }

    /// Its path below `/sys`.
    pub fn devpath(&self) -> String {
        format!("{}/{}", self.iface_devpath, self.dev_name())
    }

    /// Its hidraw node's path below `/sys`.
    pub fn hidraw_devpath(&self) -> String {
        format!("{}/hidraw/hidraw{}", self.devpath(), self.minor)
    }

    /// `hid:bBBBBgGGGGvVVVVVVVVpPPPPPPPP`.
    pub fn modalias(&self) -> String {
        format!(
            "hid:b{:04X}g{:04X}v{:08X}p{:08X}",
            BUS_USB, HID_GROUP_GENERIC, self.vendor, self.product
        )
    }

    /// `hid_uevent`'s variables, in its order.
    pub fn uevent_vars(&self) -> Vec<(String, String)> {
        vec![
            (
                "HID_ID".into(),
                format!("{:04X}:{:08X}:{:08X}", BUS_USB, self.vendor, self.product),
            ),
            ("HID_NAME".into(), self.name.clone()),
            ("HID_PHYS".into(), self.phys.clone()),
            ("HID_UNIQ".into(), self.uniq.clone()),
            ("MODALIAS".into(), self.modalias()),
        ]
    }

    /// The hidraw class device's variables (`dev_uevent`).
    pub fn hidraw_vars(&self) -> Vec<(String, String)> {
        vec![
            ("MAJOR".into(), self.major.to_string()),
            ("MINOR".into(), self.minor.to_string()),
            ("DEVNAME".into(), format!("hidraw{}", self.minor)),
        ]
    }

    /// Whether a hidraw file or an input device's evdev file of it is
    /// open.
    pub fn has_readers(&self) -> bool {
        self.lists.lock_ok().iter().any(|w| w.strong_count() > 0)
            || self
                .input
                .lock_ok()
                .as_ref()
                .is_some_and(|i| i.devices.iter().any(|d| d.has_clients()))
    }

    /// hid-input's devices of it.
    pub fn input_devices(&self) -> Vec<Arc<crate::input::InputDevice>> {
        self.input
            .lock_ok()
            .as_ref()
            .map(|i| i.devices.clone())
            .unwrap_or_default()
    }

    /// Whether it is still there.
    pub fn exists(&self) -> bool {
        self.exist.load(Ordering::SeqCst)
    }

    /// `hid_input_report` of an input report from the interrupt IN
    /// endpoint: dropped when empty, of no report the descriptor has, or
    /// shorter than its report; else to hidraw's open files and through
    /// hid-input.
    pub(super) fn report(&self, data: &[u8]) {
        if data.is_empty() {
            return;
        }
        let numbered = self.desc.numbered[Kind::Input as usize];
        let Some(ri) = self.desc.report_index(Kind::Input, data) else {
            return;
        };
        let body = if numbered { &data[1..] } else { data };
        if body.len() < self.desc.reports[ri].bytes() {
            tracing::debug!(
                hid = %self.dev_name(),
                len = data.len(),
                "hid: a report shorter than its descriptor says, dropped"
            );
            return;
        }
        self.raw_report(data);
        if let Some(hi) = self.input.lock_ok().as_mut() {
            hi.process(&self.desc, ri, body);
        }
    }

    /// `hidraw_report_event`: queue `data` for every open file.
    fn raw_report(&self, data: &[u8]) {
        let mut lists = self.lists.lock_ok();
        lists.retain(|w| w.strong_count() > 0);
        for l in lists.iter().filter_map(Weak::upgrade) {
            l.push(data);
        }
    }

    /// The device went: wake every reader (reads give EIO from now on).
    pub(super) fn gone(&self) {
        self.exist.store(false, Ordering::SeqCst);
        for l in self.lists.lock_ok().iter().filter_map(Weak::upgrade) {
            l.wake();
        }
    }
}

/// An open file's queue of input reports (`struct hidraw_list`).
#[derive(Default)]
pub struct RawList {
    pub(super) q: Mutex<VecDeque<Vec<u8>>>,
    pub(super) waker: WakerSlot,
    /// HIDIOCREVOKE'd: no more reports, every call ENODEV.
    pub(super) revoked: AtomicBool,
}

impl RawList {
    /// Queue a report, unless the ring is full or the file revoked.
    pub(super) fn push(&self, data: &[u8]) {
        if self.revoked.load(Ordering::SeqCst) {
            return;
        }
        {
            let mut q = self.q.lock_ok();
            if q.len() >= HIDRAW_BUFFER_SIZE - 1 {
                return;
            }
            q.push_back(data.to_vec());
        }
        self.wake();
    }

    /// Tell a parked reader or poller to look again.
    pub(super) fn wake(&self) {
        self.waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_ring_drops_the_newest() {
        let l = RawList::default();
        for i in 0..100u8 {
            l.push(&[i]);
        }
        let q = l.q.lock_ok();
        assert_eq!(q.len(), HIDRAW_BUFFER_SIZE - 1);
        assert_eq!(q.front(), Some(&vec![0]));
        assert_eq!(q.back(), Some(&vec![62]));
    }
}
