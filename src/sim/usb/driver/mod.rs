//! Host drivers, bound to interfaces as `drivers/usb/core/driver.c` binds
//! them: each driver's `usb_device_id` table ([`id`]) says which
//! interfaces it matches, its probe whether it keeps one ([`Probe`]), and
//! a driver may claim further interfaces from its probe (snd-usb-audio's
//! and uvcvideo's streaming interfaces) ([`host`]). `DRIVERS` is the
//! registry: a new driver is a module with a [`HostDriver`] and one line
//! there.
//!
//! * [`hub`]: hub; [`usbhid`]: usbhid (its probe's requests and its
//!   interrupt IN polling); [`storage`]: usb-storage (its bulk-only
//!   transport and error recovery) and uas; [`audio`]:
//!   snd-usb-audio and uvcvideo (their probes, which read the device as
//!   they go, [`HostDriver::probe_asking`], a player's or viewer's
//!   requests then, [`HostDriver::opened_asking`], and their isochronous
//!   streams); [`usbtest`]: usbtest (its bulk test loop, run without end
//!   on a gadget's source and sink); [`cdc_acm`]:
//!   cdc_acm (its probe; its tty is the tty layer's); [`ftdi_sio`]:
//!   ftdi_sio (likewise); [`cp210x`]: cp210x and [`ch341`]: ch341
//!   (likewise, their probes reading the device, [`HostDriver::probe_more`]);
//!   [`generic`]:
//!   monfs-generic, for an external device's interfaces no stock driver
//!   matches.
//! * What the drivers share: the interrupt IN loop ([`int_in`]), the
//!   isochronous stream ([`iso`]), the clear-halt recovery
//!   ([`recovery`]) and the data loops on a device answered by a peer
//!   process ([`peer_loop`]: an external device's interrupt and bulk
//!   endpoints; [`peer_iso`]: its isochronous `endpoints:` entries;
//!   [`peer_urb`]: their URBs to the peer). Their data URBs go on the bus through
//!   [`Ctx::submit_urb`], as programs' do; what an IN URB brings is the
//!   device's function's (`Device::function_in`).
//!
//! Which interfaces a device's drivers are probed on at all, and when, is
//! its model's (`device`): a device from a descriptor dump binds only the
//! HID interfaces it is given report descriptors for. A driver whose
//! [`HostDriver::start`] runs its URBs has them answered by the device's
//! function: usbhid's and usbtest's by the device's function (a HID
//! device's reports, the flood gadget's source and sink), usb-storage's by
//! the flash drive's SCSI target over the bulk-only transport (all of them
//! the ones that answer programs too), uvcvideo's by the webcam's frames
//! (snd-usb-audio's stream carries what the host plays), usbhid's and a
//! driver's without a loop of its own ([`int_in::poll_function`]) on a
//! recorded device by the capture's recorded IN completions, and the
//! drivers' loops on an external device's endpoints ([`peer_loop`],
//! [`peer_iso`]) by its peer, through the channel its programs' URBs take
//! (`ProgramPeer`). An external device's model keeps only its peer, its
//! ep0 and the sequence of its drivers' probe requests.

use crate::sim::usb::ctx::{Ctx, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;
use crate::usbcore::device::ProbeAnswer;

pub(crate) mod audio;
pub(crate) mod cdc_acm;
pub(crate) mod ch341;
pub(crate) mod cp210x;
pub(crate) mod ftdi_sio;
pub(crate) mod generic;
mod host;
pub(crate) mod hub;
pub(crate) mod id;
pub(crate) mod int_in;
mod iso;
mod peer_iso;
pub(crate) mod peer_loop;
mod peer_urb;
pub(crate) mod recovery;
pub(crate) mod storage;
pub(crate) mod usbhid;
pub(crate) mod usbtest;

pub(crate) use host::{claimable, Ask, Disconnect, HostDriver, Probe};

/// The stock drivers, in the order the driver core tries them.
static DRIVERS: &[&dyn HostDriver] = &[
    &hub::Hub,
    &usbhid::UsbHid,
    &storage::Uas,
    &storage::UsbStorage,
    &audio::SndUsbAudio,
    &audio::UvcVideo,
    &usbtest::UsbTest,
    &cdc_acm::CdcAcm,
    &ftdi_sio::FtdiSio,
    &cp210x::Cp210x,
    &ch341::Ch341,
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

/// The first driver that matches setting `alt` of `dev` and whose probe
/// does not refuse it (`__device_attach`), with its probe's verdict.
fn first(dev: &Device, alt: &AltDesc) -> Option<(&'static dyn HostDriver, Probe)> {
    matching(dev, alt)
        .map(|d| (d, d.probe(dev, alt)))
        .find(|(_, p)| *p != Probe::Failed)
}

/// The driver that matches interface `num` of `dev` and whose probe does
/// not refuse it: what USBDEVFS_CONNECT binds.
pub(crate) fn attach(dev: &Device, num: u8) -> Option<Binding> {
    let (d, p) = first(dev, setting0(dev, num)?)?;
    Some(match p {
        Probe::Pending => Binding::Probing(d.name()),
        _ if dev.probe_pending.contains(&num) => Binding::Probing(d.name()),
        _ => Binding::Bound(d.name()),
    })
}

/// Whether a driver's probe of an interface of `dev` still runs (usbhid's
/// of an external device's HID interface, or requests of another driver
/// still going to the peer): the device is not probed yet.
pub(crate) fn probing(dev: &Device) -> bool {
    usbhid::probing(dev) || !dev.probe_pending.is_empty()
}

/// The driver that attaches to interface `num` of `dev` and keeps it,
/// with the interface's setting 0 (for its probe requests and start).
pub(crate) fn attached(dev: &Device, num: u8) -> Option<(&'static dyn HostDriver, AltDesc)> {
    let alt = setting0(dev, num)?;
    let (d, p) = first(dev, alt)?;
    (p == Probe::Bound).then(|| (d, alt.clone()))
}

/// The driver bound to another interface of `dev` whose probe claimed
/// interface `num` (not one whose probe still sends its requests before
/// the claim, as cdc_acm's line coding; nor one a program detached, unless
/// its disconnect left what it claimed bound to it,
/// [`HostDriver::keeps_claims`]).
fn claimer(dev: &Device, num: u8) -> Option<&'static dyn HostDriver> {
    dev.desc
        .cfg
        .interface_numbers()
        .into_iter()
        .filter(|n| *n != num && !dev.probe_pending.contains(n))
        .find_map(|n| {
            let (d, alt) = attached(dev, n)?;
            let released = dev.core.detached.contains(&n) && !d.keeps_claims();
            (!released && d.claims(dev, &alt).contains(&num)).then_some(d)
        })
}

/// How interface `num` of `dev` is bound after its device's drivers were
/// probed: by a driver of its own ([`attach`]), else claimed by the
/// driver bound to another of the device's interfaces; None: no driver.
pub(crate) fn binding(dev: &Device, num: u8) -> Option<Binding> {
    attach(dev, num).or_else(|| claimer(dev, num).map(|d| Binding::Bound(d.name())))
}

/// What unbinding the driver that matched interface `num` of `dev` does to
/// the interfaces its probe claimed ([`HostDriver::disconnect`]), with
/// those still bound to it, in order.
pub(crate) fn disconnect(dev: &Device, num: u8) -> Option<(Disconnect, Vec<u8>)> {
    let (drv, alt) = attached(dev, num)?;
    let what = drv.disconnect()?;
    let claimed = drv
        .claims(dev, &alt)
        .into_iter()
        .filter(|n| *n != num && !dev.core.detached.contains(n))
        .collect();
    Some((what, claimed))
}

/// Whether the driver of interface `num` of `dev` unbinds softly
/// ([`HostDriver::soft_unbind`]).
pub(crate) fn soft_unbind(dev: &Device, num: u8) -> bool {
    attached(dev, num)
        .map(|(d, _)| d)
        .or_else(|| claimer(dev, num))
        .is_some_and(|d| d.soft_unbind())
}

/// Whether an external device's generic loop polls interface `num` of
/// `dev`: a driver binds it ([`binding`]) that wants it polled
/// ([`HostDriver::polled`]).
pub(crate) fn polled(dev: &Device, num: u8) -> bool {
    let drv = attached(dev, num)
        .map(|(d, _)| d)
        .or_else(|| claimer(dev, num));
    binding(dev, num).is_some() && drv.is_none_or(|d| d.polled())
}

/// The driver bound to interface `num` of `dev` (its probe done).
pub(crate) fn bound(dev: &Device, num: u8) -> Option<&'static str> {
    match binding(dev, num)? {
        Binding::Bound(n) => Some(n),
        Binding::Probing(_) => None,
    }
}

/// The interfaces of `dev` (in order) whose drivers its model lets bind,
/// with the driver that attaches to each.
fn bound_all(dev: &Device) -> Vec<(&'static dyn HostDriver, AltDesc)> {
    dev.desc
        .cfg
        .interface_numbers()
        .into_iter()
        .filter(|n| dev.bindable.as_ref().is_none_or(|b| b.contains(n)))
        .filter_map(|n| attached(dev, n))
        .collect()
}

/// The probe requests of the drivers that bind `d`'s interfaces, each
/// followed by what a program using its node does then
/// ([`HostDriver::opened_asking`]), in interface order, a probe that reads
/// the device as it goes reading it through `ask`
/// ([`HostDriver::probe_asking`]): for a device model that answers them.
pub(crate) fn probe_ops_asking(dev: &Device, d: DevId, ask: &mut Ask<'_>) -> Vec<Op> {
    let mut ops = Vec::new();
    for (drv, alt) in bound_all(dev) {
        ops.extend(drv.probe_asking(dev, d, &alt, &mut *ask));
        ops.extend(drv.opened_asking(dev, d, &alt, &mut *ask));
    }
    ops
}

/// The probe requests of the driver that attaches to interface `num` of
/// `dev` (`d`) when it is bound again (USBDEVFS_CONNECT), a probe that
/// reads the device as it goes reading it through `ask`.
pub(crate) fn reprobe_ops(dev: &Device, d: DevId, num: u8, ask: &mut Ask<'_>) -> Vec<Op> {
    attached(dev, num)
        .map(|(drv, alt)| drv.probe_asking(dev, d, &alt, ask))
        .unwrap_or_default()
}

/// Whether binding interface `num` of `dev` again, its driver detached
/// (USBDEVFS_CONNECT), fails because the driver's earlier instance lives
/// on: a driver whose disconnect keeps what it claimed
/// ([`HostDriver::keeps_claims`]) still holds one of those interfaces, so
/// its probe finds its old, shut down instance (usb_audio_probe: "USB
/// device is in the shutdown state", -EIO; the driver core tries the next
/// driver, and none binds).
pub(crate) fn refused_again(dev: &Device, num: u8) -> bool {
    dev.core.detached.contains(&num)
        && attached(dev, num).is_some_and(|(drv, alt)| {
            drv.keeps_claims()
                && drv
                    .claims(dev, &alt)
                    .iter()
                    .any(|n| *n != num && !dev.core.detached.contains(n))
        })
}

/// What the peer answered the probe requests of interface `num`'s driver,
/// in order.
pub(crate) fn probe_answers(dev: &Device, num: u8) -> Vec<ProbeAnswer> {
    dev.probe_answers
        .iter()
        .filter(|(n, _)| *n == num)
        .map(|(_, a)| a.clone())
        .collect()
}

/// The requests interface `num`'s driver's probe sends next, given the
/// answers so far ([`HostDriver::probe_more`]).
pub(crate) fn probe_more(dev: &Device, d: DevId, num: u8) -> Vec<Op> {
    let Some((drv, alt)) = attached(dev, num) else {
        return Vec::new();
    };
    drv.probe_more(dev, d, &alt, &probe_answers(dev, num))
}

/// Start the drivers that bind `d`'s interfaces, from `at`; `only`: that
/// interface's driver, bound again, unless its start is a program's use of
/// its node ([`HostDriver::opened_starts`]), which went with the unbind.
pub(crate) fn start(ctx: &mut Ctx, d: DevId, at: u64, only: Option<u8>) {
    let Some(dev) = ctx.dev(d) else {
        return;
    };
    for (drv, alt) in bound_all(dev) {
        let again = only.is_some() && drv.opened_starts();
        if only.is_none_or(|n| n == alt.num) && !again {
            drv.start(ctx, d, &alt, at);
        }
    }
}
