//! What a host driver is: the [`HostDriver`] trait every driver module
//! implements, and what its probe gives ([`Probe`]); the registry is
//! `DRIVERS` in `driver/mod.rs`.

use crate::sim::usb::ctx::{Ctx, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;
use crate::usbcore::device::ProbeAnswer;

use super::id::{self, UsbDeviceId};
use super::int_in;

/// What a driver's probe of an interface gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Probe {
    /// The driver keeps the interface.
    Bound,
    /// The probe still runs (an answer it needs has not come).
    Pending,
    /// The probe refused the interface: the next matching driver is tried.
    Failed,
}

/// What a driver's disconnect of the interface it matched does to the
/// interfaces its probe claimed ([`HostDriver::disconnect`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Disconnect {
    /// The status its URBs there end with (usb_unlink_urb: -104,
    /// usb_kill_urb: -2).
    pub status: i32,
    /// Whether it puts them back to setting 0 (usb_set_interface).
    pub to_setting_0: bool,
}

/// How a probe reads the device as it goes: the device's answer to a
/// control request (setup, OUT data), its IN data; None: the request
/// failed. A device model gives it from a copy of its state, so that a
/// probe that reads the device (the kernel's waits for each answer) is
/// queued whole, its requests then going on the bus in order.
pub(crate) type Ask<'a> = dyn FnMut(&[u8; 8], Option<&[u8]>) -> Option<Vec<u8>> + 'a;

/// A host driver.
pub(crate) trait HostDriver: Sync {
    /// The driver's name (sysfs, `usb/devices`, USBDEVFS_GETDRIVER).
    fn name(&self) -> &'static str;
    /// Its `MODULE_DEVICE_TABLE`.
    fn id_table(&self) -> &'static [UsbDeviceId];
    /// Whether it matches interface setting `alt` of `dev`: an entry of
    /// its table does (`usb_match_id`).
    fn matches(&self, dev: &Device, alt: &AltDesc) -> bool {
        id::usb_match_id(self.id_table(), &dev.desc.dev, alt).is_some()
    }
    /// Its probe of a matching interface.
    fn probe(&self, _dev: &Device, _alt: &AltDesc) -> Probe {
        Probe::Bound
    }
    /// Whether it unbinds softly (`soft_unbind`): the core leaves its
    /// URBs to its disconnect, which kills them (-2), instead of
    /// disabling the interface's endpoints first (-108).
    fn soft_unbind(&self) -> bool {
        false
    }
    /// Its probe's control requests to interface `alt` of device `d`,
    /// before it starts (a probe that reads the device as it goes gives
    /// them in [`HostDriver::probe_asking`] instead).
    fn probe_ops(&self, _dev: &Device, _d: DevId, _alt: &AltDesc) -> Vec<Op> {
        Vec::new()
    }
    /// Its probe's control requests to interface `alt` of device `d`
    /// when its device's model answers them through `ask`: for a probe
    /// that reads the device as it goes (snd-usb-audio's mixer, uvcvideo's
    /// probe and commit controls); the others' [`HostDriver::probe_ops`].
    /// An external device's peer and a capture are not asked for them.
    fn probe_asking(&self, dev: &Device, d: DevId, alt: &AltDesc, _ask: &mut Ask<'_>) -> Vec<Op> {
        self.probe_ops(dev, d, alt)
    }
    /// What a program using the driver's node does once the driver is
    /// probed (a player opening snd-usb-audio's PCM, a viewer's
    /// VIDIOC_STREAMON on uvcvideo's), its requests reading the device
    /// through `ask`; the stream it then runs is the driver's
    /// [`HostDriver::start`] ([`HostDriver::opened_starts`]). Only at the
    /// device's first probe: the node goes with the driver's unbind, and
    /// the program's use of it with it.
    fn opened_asking(
        &self,
        _dev: &Device,
        _d: DevId,
        _alt: &AltDesc,
        _ask: &mut Ask<'_>,
    ) -> Vec<Op> {
        Vec::new()
    }
    /// Whether its [`HostDriver::start`] is a program's use of its node
    /// ([`HostDriver::opened_asking`]), which does not start again when
    /// the driver is bound again.
    fn opened_starts(&self) -> bool {
        false
    }
    /// The requests its probe sends next, once those before were answered
    /// (`answers`: every request of this probe so far, in order, the
    /// [`HostDriver::probe_ops`] first); empty: the probe is done. For a
    /// probe that reads the device to decide what to ask next (cp210x's
    /// part number); only an external device's peer is asked for them
    /// (a model's answers are not kept).
    fn probe_more(
        &self,
        _dev: &Device,
        _d: DevId,
        _alt: &AltDesc,
        _answers: &[ProbeAnswer],
    ) -> Vec<Op> {
        Vec::new()
    }
    /// It starts on interface `alt` of `d` once probed: its URBs from `at`,
    /// answered by the device's function (usbhid, usb-storage, uvcvideo).
    /// A driver without a start of its own that is polled
    /// ([`HostDriver::polled`]) keeps a URB on each IN endpoint of the
    /// interface the device's function sends on (a capture's recorded
    /// ones, [`int_in::poll_function`]); one whose URBs a program's use of
    /// it makes: nothing.
    fn start(&self, ctx: &mut Ctx, d: DevId, alt: &AltDesc, at: u64) {
        if self.polled() {
            int_in::poll_function(ctx, d, alt.num, at);
        }
    }
    /// The other interfaces its probe of `alt` claims.
    fn claims(&self, _dev: &Device, _alt: &AltDesc) -> Vec<u8> {
        Vec::new()
    }
    /// What its disconnect of the interface it matched does to the URBs
    /// and settings of those it claimed; None: nothing.
    fn disconnect(&self) -> Option<Disconnect> {
        None
    }
    /// Whether the interfaces its probe claimed stay bound to it after its
    /// disconnect of the interface it matched, until their own unbind
    /// (snd-usb-audio's usb_audio_disconnect releases none of them); false:
    /// its disconnect releases them (usb_driver_release_interface).
    fn keeps_claims(&self) -> bool {
        false
    }
    /// Whether an external device's generic loop keeps URBs on the bound
    /// interface's IN endpoints for it; false for a driver whose URBs come
    /// from its class node (cdc_acm's, only while its tty is open).
    fn polled(&self) -> bool {
        true
    }
}

/// The interfaces driver `drv`'s probe of `alt` of `dev` claims
/// ([`HostDriver::claims`]) that no program holds: claiming one usbfs
/// has fails (-EBUSY), and the probe goes on without it.
pub(crate) fn claimable(dev: &Device, drv: &dyn HostDriver, alt: &AltDesc) -> Vec<u8> {
    drv.claims(dev, alt)
        .into_iter()
        .filter(|n| !dev.core.claims.iter().any(|(i, _)| i == n))
        .collect()
}
