//! Host drivers, bound to interfaces as `drivers/usb/core/driver.c` binds
//! them: each driver's `usb_device_id` table ([`id`]) says which
//! interfaces it matches, its probe whether it keeps one ([`Probe`]), and
//! a driver may claim further interfaces from its probe (snd-usb-audio's
//! and uvcvideo's streaming interfaces) ([`host`]). `DRIVERS` is the
//! registry: a new driver is a module with a [`HostDriver`] and one line
//! there.
//!
//! * [`hub`]: hub; [`usbhid`]: usbhid (its probe's requests too);
//!   [`storage`]: usb-storage and uas; [`audio`]: snd-usb-audio and
//!   uvcvideo; [`usbtest`]: usbtest; [`generic`]: monfs-generic, for an
//!   external device's interfaces no stock driver matches.
//!
//! Which interfaces a device's drivers are probed on at all, and when, is
//! its model's (`device`): a device from a descriptor dump binds none.

use crate::sim::usb::ctx::Device;
use crate::sim::usb::descriptors::AltDesc;

pub(crate) mod audio;
pub(crate) mod generic;
mod host;
pub(crate) mod hub;
pub(crate) mod id;
pub(crate) mod storage;
pub(crate) mod usbhid;
pub(crate) mod usbtest;

pub(crate) use host::{HostDriver, Probe};

/// The stock drivers, in the order the driver core tries them.
static DRIVERS: &[&dyn HostDriver] = &[
    &hub::Hub,
    &usbhid::UsbHid,
    &storage::Uas,
    &storage::UsbStorage,
    &audio::SndUsbAudio,
    &audio::UvcVideo,
    &usbtest::UsbTest,
];

/// The drivers that match `alt` of `dev`, in order: the stock ones, else
/// monfs-generic where an external device's configuration asks for it.
fn matching<'a>(
    dev: &'a Device,
    alt: &'a AltDesc,
) -> impl Iterator<Item = &'static dyn HostDriver> + 'a {
    let stock: Vec<&'static dyn HostDriver> = DRIVERS
        .iter()
        .copied()
        .filter(|d| d.matches(dev, alt))
        .collect();
    let fallback = stock.is_empty() && generic::Generic.matches(dev, alt);
    stock
        .into_iter()
        .chain(fallback.then_some(&generic::Generic as &dyn HostDriver))
}

/// Setting 0 of interface `num` of `dev`'s configuration (the one the
/// drivers are probed with).
fn setting0(dev: &Device, num: u8) -> Option<&AltDesc> {
    let alts = &dev.desc.cfg.alts;
    alts.iter()
        .find(|a| a.num == num && a.alt == 0)
        .or_else(|| alts.iter().find(|a| a.num == num))
}

/// How interface `num` of `dev` is bound once its drivers are probed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Binding {
    /// To this driver.
    Bound(&'static str),
    /// This driver's probe still runs.
    Probing(&'static str),
}

/// The driver that matches interface `num` of `dev` and whose probe does
/// not refuse it (`__device_attach`): what USBDEVFS_CONNECT binds.
pub(crate) fn attach(dev: &Device, num: u8) -> Option<Binding> {
    let alt = setting0(dev, num)?;
    matching(dev, alt).find_map(|d| match d.probe(dev, alt) {
        Probe::Bound => Some(Binding::Bound(d.name())),
        Probe::Pending => Some(Binding::Probing(d.name())),
        Probe::Failed => None,
    })
}

/// How interface `num` of `dev` is bound after its device's drivers were
/// probed: by a driver of its own ([`attach`]), else claimed by the
/// driver bound to another of the device's interfaces; None: no driver.
pub(crate) fn binding(dev: &Device, num: u8) -> Option<Binding> {
    if let Some(b) = attach(dev, num) {
        return Some(b);
    }
    let mut nums: Vec<u8> = dev.desc.cfg.alts.iter().map(|a| a.num).collect();
    nums.dedup();
    nums.into_iter().filter(|n| *n != num).find_map(|n| {
        let alt = setting0(dev, n)?;
        let d = matching(dev, alt).find(|d| d.probe(dev, alt) == Probe::Bound)?;
        d.claims(dev, alt)
            .contains(&num)
            .then_some(Binding::Bound(d.name()))
    })
}

/// Whether the driver of interface `num` of `dev` unbinds softly
/// ([`HostDriver::soft_unbind`]).
pub(crate) fn soft_unbind(dev: &Device, num: u8) -> bool {
    let Some(name) = bound(dev, num) else {
        return false;
    };
    DRIVERS.iter().any(|d| d.name() == name && d.soft_unbind())
}

/// The driver bound to interface `num` of `dev` (its probe done).
pub(crate) fn bound(dev: &Device, num: u8) -> Option<&'static str> {
    match binding(dev, num)? {
        Binding::Bound(n) => Some(n),
        Binding::Probing(_) => None,
    }
}
