//! What a device class is: the [`DeviceClass`] trait every device model
//! implements (the registry is `CLASSES` in `device/mod.rs`).

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::{ClassDesc, Speed, Where};
use super::super::driver::{self, Ask};
use super::super::scsi::Bot;

/// Everything monfs models of a device class, for the kinds it covers.
pub(crate) trait DeviceClass: Sync {
    /// The configuration's kinds this class models.
    fn kinds(&self) -> &'static [DeviceKind];
    /// The speed a device of `kind` signals, before its port limits it.
    fn natural_speed(&self, _kind: DeviceKind) -> Speed {
        Speed::High
    }
    /// The `interval_ms` of `kind` when the configuration gives none.
    fn default_interval_ms(&self, _kind: DeviceKind) -> u32 {
        0
    }
    /// Its descriptors, for a device without a descriptor file (None: the
    /// class always has one).
    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc>;
    /// A request on ep0 of device `d` beyond the standard ones that the
    /// class answers, with its OUT data `out`: (status, IN data); None: it
    /// stalls.
    fn ep0(
        &self,
        _ctx: &mut Ctx,
        _d: DevId,
        _s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        None
    }
    /// Whether the class models a qemu device, whose USB core answers
    /// control requests its own way (measured in kernel-vm with qemu 7.2):
    /// GET_STATUS of an interface or an endpoint stalls (real devices
    /// answer `0000`), and a request with OUT data that the device refuses
    /// stalls after the data stage, so its completion counts the data
    /// (`-32 2` in usbmon where a device stalling at once gives `-32 0`).
    /// The HID, storage and audio classes model qemu's devices.
    fn qemu_control(&self) -> bool {
        false
    }
    /// The class driver's requests after SET_CONFIGURATION: the probe
    /// requests of the drivers that bind its interfaces (a probe that
    /// reads the device as it goes answered by [`DeviceClass::answers`]),
    /// then their start.
    fn class_ops(&self, dev: &Device, d: DevId) -> Vec<Op> {
        let mut ops = driver::probe_ops_asking(dev, d, &mut *self.answers(dev));
        ops.push(Op::StartStreams(d));
        ops
    }
    /// Device `d` was just plugged in (before the hub notices).
    fn plugged(&self, _ctx: &mut Ctx, _d: DevId) {}
    /// The class driver binds to the configured device `d`: start its
    /// model, first due at `at` (the drivers bound to its interfaces start
    /// their URBs then).
    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        driver::start(ctx, d, at, None);
    }
    /// How the model answers a driver's probe that reads the device as it
    /// goes ([`driver::HostDriver::probe_asking`]): from a copy of `dev`'s
    /// state, so that the probe is queued whole (None: the request
    /// fails).
    fn answers(&self, _dev: &Device) -> Box<Ask<'static>> {
        Box::new(|_, _| None)
    }
    /// What device `d`'s function sends on its IN endpoint (and takes on
    /// its OUT endpoint) whoever submits, made when a driver first starts
    /// at `at` (None: nothing of its own).
    fn function(&self, _ctx: &mut Ctx, _d: DevId, _at: u64) -> Option<Box<dyn InFunction>> {
        None
    }
    /// The SCSI target behind the bulk endpoints of device `dev` (a flash
    /// drive's, over the bulk-only transport), made when a driver or a
    /// program first uses them (None: it has none).
    fn target(&self, _dev: &Device) -> Option<Box<Bot>> {
        None
    }
    /// A driver bound interface `intf` of `d` again after a program let
    /// it go (its probe's requests done): start the tasks the unbind
    /// ended, the driver's URBs there.
    fn rebind(&self, ctx: &mut Ctx, d: DevId, intf: u8, now: u64) {
        driver::start(ctx, d, now, Some(intf));
    }
}
