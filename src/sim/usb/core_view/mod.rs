//! A bus as the USB core's users see it (usbfs, sysfs): the devices as
//! [`UsbDevice`]s, and programs' URBs and core requests run through the
//! same bus, devices and events as the simulated drivers' (the kernel's
//! `drivers/usb/core/{usb,message,driver}.c` for the parts usbfs calls).
//!
//! A program's URB is an ordinary URB of the bus: its `S` event now, its
//! `C` event when the device answers, the same tags, faults (`errors:`,
//! `monfs ctl inject`), unplug aborts (-71, then -108) and kills (-2). Who
//! answers it:
//! * ep0: the device's own answers ([`Ctx::handle_ctrl`]: descriptors,
//!   strings, hub and class requests); an external device's peer for the
//!   requests it owns (class, vendor, interface and endpoint requests, or
//!   all with `ep0: peer`); a device from a capture replays the capture.
//! * data endpoints: an external device's peer; a device from a capture
//!   replays its recorded completions in order; a HID device's interrupt
//!   IN gets the device's next report (its `function_in`, which usbhid's
//!   URBs got while it was bound); a flood gadget's bulk endpoints its
//!   function too (IN: its source's bytes, as many as asked for; OUT: what
//!   its sink takes, all), as usbtest's URBs do; other
//!   built-in devices answer as a generic device of their kind (IN:
//!   interrupt endpoints a report of zeros each interval, bulk endpoints
//!   the bytes asked for, isochronous endpoints full packets; OUT:
//!   everything taken; a flash drive's bulk endpoints its SCSI target
//!   over the bulk-only transport, see `bot`); a device with nothing to say (a `descriptors`
//!   device) leaves IN URBs pending, as a device that NAKs.

use crate::usbcore::device::{CoreError, DevRef, TransferType};
use crate::usbmon::event::XferType;

use crate::sim::usb::ctx::*;

pub(crate) use device::*;
pub(crate) use request::*;
pub(crate) use urb::*;

mod bot;
mod device;
mod finish;
mod report;
mod request;
mod urb;

/// The device `dev` names, alive and registered.
fn live(ctx: &Ctx, dev: DevRef) -> Result<DevId, CoreError> {
    let id = dev.id as DevId;
    match ctx.dev(id) {
        Some(d) if !d.gone && (d.core.registered || d.kind == Kind::Root) => Ok(id),
        _ => Err(CoreError::NoDevice),
    }
}

fn xfer_of(t: TransferType) -> XferType {
    match t {
        TransferType::Iso => XferType::Iso,
        TransferType::Interrupt => XferType::Interrupt,
        TransferType::Control => XferType::Control,
        TransferType::Bulk => XferType::Bulk,
    }
}
