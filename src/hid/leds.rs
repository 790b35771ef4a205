//! hid-input's LEDs: what the input layer sends a HID device's input
//! devices (`dev->event`: EV_LED) set its output field, and the LED work
//! (`hidinput_led_worker`) sends the output report as usbhid sends it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::base::sync::LockExt;
use crate::input::{InputDriver, EV_LED};
use crate::usbcore::device::{CoreRequest, UrbDone, UrbResult, UsbCorePort};

use super::device::HidDevice;

/// hid-input's `dev->event` for a HID device's input devices: LED
/// changes, sent by the LED work (`hidinput_led_worker`) as usbhid sends
/// output reports.
pub(super) struct LedDriver {
    pub(super) dev: Weak<HidDevice>,
    pub(super) port: Arc<dyn UsbCorePort>,
}

impl InputDriver for LedDriver {
    fn keycode(&self, by: crate::input::KeyLookup) -> Option<(u32, u32, u32)> {
        let dev = self.dev.upgrade()?;
        let hi = dev.input.lock_ok();
        hi.as_ref()?.keycode(&dev.desc, by)
    }

    fn event(&self, ty: u16, code: u16, value: i32) {
        if ty != EV_LED {
            return;
        }
        let Some(dev) = self.dev.upgrade() else {
            return;
        };
        let spawn = {
            let mut q = dev.leds.lock_ok();
            q.push((code, value));
            !dev.led_work.swap(true, Ordering::SeqCst)
        };
        if spawn {
            let port = self.port.clone();
            let _ = std::thread::Builder::new()
                .name("hid-leds".into())
                .spawn(move || led_work(&dev, &*port));
        }
    }
}

/// The LED work: the output report with the LEDs as they are now, once
/// for every batch of changes, handed to usbhid (`hid_hw_request`,
/// SET_REPORT: usbhid_submit_report), which sends it on its own URB and is
/// not waited for.
fn led_work(dev: &HidDevice, port: &dyn UsbCorePort) {
    loop {
        let changes = {
            let mut q = dev.leds.lock_ok();
            if q.is_empty() {
                dev.led_work.store(false, Ordering::SeqCst);
                return;
            }
            std::mem::take(&mut *q)
        };
        let mut out = None;
        if let Some(hi) = dev.input.lock_ok().as_mut() {
            for (code, value) in changes {
                out = hi.set_led(&dev.desc, code, value).or(out);
            }
        }
        let Some((id, buf)) = out else { continue };
        if !dev.exists() {
            continue;
        }
        // hid_output_report: the ID first when the device numbers its
        // reports; hid_submit_ctrl: SET_REPORT(Output, id) of that length.
        let mut report = buf;
        if id != 0 {
            report.insert(0, id);
        }
        let value = 0x0200 | u16::from(id);
        let mut setup = [0x21, 0x09, 0, 0, 0, 0, 0, 0];
        setup[2..4].copy_from_slice(&value.to_le_bytes());
        setup[4..6].copy_from_slice(&u16::from(dev.ifnum).to_le_bytes());
        setup[6..8].copy_from_slice(&(report.len() as u16).to_le_bytes());
        let req = CoreRequest::HidReport {
            interface: dev.ifnum,
            endpoint: dev.out_ep,
            setup,
            out: report,
        };
        if let Err(e) = port.request(dev.dev, req, Arc::new(Quiet(dev.dev_name()))) {
            tracing::debug!(hid = %dev.dev_name(), "hid: the LEDs' output report was not queued: {e}");
        }
    }
}

/// Told how a report usbhid sent for the LED work ended (no one waits).
struct Quiet(String);

impl UrbDone for Quiet {
    fn done(&self, _urb: u64, result: UrbResult) {
        if result.status != 0 {
            tracing::debug!(hid = %self.0, "hid: the LEDs' output report ended with {}", result.status);
        }
    }
}
