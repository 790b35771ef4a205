//! hid-input's LEDs: what the input layer sends a HID device's input
//! devices (`dev->event`: EV_LED) set its output field, and the LED work
//! (`hidinput_led_worker`) sends the output report as usbhid sends it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::base::sync::LockExt;
use crate::input::{InputDriver, EV_LED};
use crate::usbcore::device::UsbCorePort;

use super::device::HidDevice;
use super::hidraw::{Io, ReportType};

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
/// for every batch of changes.
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
        let mut report = buf;
        if id == 0 {
            report.insert(0, 0);
        }
        let io = Io { dev, port };
        if let Err(e) = io.send_report(&report, ReportType::Output) {
            tracing::debug!(hid = %dev.dev_name(), "hid: the LEDs' output report failed: {e}");
        }
    }
}
