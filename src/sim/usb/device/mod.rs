//! Device models: what each device answers on ep0 ([`control`]) and the
//! class drivers' data streams: HID interrupt polling ([`hid`]), bulk-only
//! mass storage ([`storage`]), isochronous audio and video ([`iso`]), a
//! bulk flood for benchmarks ([`flood`]), a device answered by another
//! process ([`external`]), a capture's recorded IN data ([`recorded`]),
//! and the clear-halt recovery the
//! class drivers share ([`recovery`]). A model is a [`Task`] the bus
//! schedules; [`start_class_driver`] is the one place that maps a device
//! kind to its model.

use crate::config::DeviceKind;

use super::ctx::*;
use external::ExternalTask;
use flood::FloodTask;
use hid::HidTask;
use iso::IsoTask;
use recorded::RecordedTask;
use storage::StorageTask;

mod control;
mod external;
mod flood;
mod hid;
mod iso;
mod recorded;
mod recovery;
mod storage;

/// A device was plugged in: one that answers its own ep0 (`kind:
/// external` with `ep0: peer`) gets its peer now, for the enumeration.
pub(crate) fn plugged(ctx: &mut Ctx, d: DevId) {
    external::link(ctx, d);
}

/// Bind the class driver of device `d` once it is configured: start the
/// model of its kind. The one place that maps device kinds to models.
pub(crate) fn start_class_driver(ctx: &mut Ctx, d: DevId, now: u64) {
    let Some(dev) = ctx.dev_mut(d) else {
        return;
    };
    dev.driver_bound = true;
    let Kind::Dev(kind) = dev.kind else {
        return;
    };
    super::core_view::device_changed(ctx, d);
    let at = now + ctx.rng.range(MS, 8 * MS);
    match kind {
        DeviceKind::HidKeyboard | DeviceKind::HidMouse | DeviceKind::HidTablet => {
            if let Some(t) = HidTask::new(ctx, d, at) {
                ctx.spawn(at, Box::new(t));
            }
        }
        DeviceKind::MassStorage => {
            let t = StorageTask::new(ctx, d);
            // usb-storage waits `delay_use` before scanning (shortened).
            let at = now + ctx.rng.range(200 * MS, 300 * MS);
            ctx.spawn(at, Box::new(t));
        }
        DeviceKind::Audio | DeviceKind::Webcam => {
            if let Some(t) = IsoTask::new(ctx, d, at) {
                ctx.spawn(at, Box::new(t));
            }
        }
        DeviceKind::Flood => {
            let t = FloodTask::new(ctx, d);
            ctx.spawn(at, Box::new(t));
        }
        DeviceKind::External => {
            let t = ExternalTask::new(ctx, d, now);
            ctx.spawn(at, Box::new(t));
        }
        DeviceKind::FromCapture => {
            for t in RecordedTask::for_device(ctx, d) {
                ctx.spawn(at, Box::new(t));
            }
        }
        DeviceKind::Hub | DeviceKind::Descriptors => {}
    }
}
