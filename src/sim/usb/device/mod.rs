//! Device models, one module per device class: its descriptors, what it
//! answers on ep0 beyond the standard requests, and what it sends (HID
//! keyboards, mice and tablets ([`hid`]), bulk-only mass storage
//! ([`storage`]), isochronous audio and video ([`iso`]), a bulk flood for
//! benchmarks ([`flood`]), external hubs ([`hub`]), devices from a
//! descriptor file ([`dump`]), a device answered by another process
//! ([`external`]), a capture's recorded IN data ([`recorded`])), with the
//! standard ep0 requests they share ([`control`]). Every model but the
//! external device's leaves its drivers to the registry (`super::driver`:
//! usbhid's probe and polling, usb-storage's transport, usbtest's loop,
//! snd-usb-audio's and uvcvideo's probes and streams, a generic IN loop on
//! a capture's recorded endpoints), which read what the device sends from
//! its function; an external device's model still plays its class driver
//! too.
//!
//! [`CLASSES`] is the registry: adding a device class is a module with a
//! [`DeviceClass`], one line there, its kind in the configuration's
//! `DeviceKind`, and the docs.

use crate::config::{DeviceConfig, DeviceKind};

use super::ctx::*;
use super::descriptors::{self, Descriptors, Speed, Where};
use class::DeviceClass;

mod class;
mod control;
mod dump;
mod external;
mod flood;
mod hid;
mod hub;
mod iso;
mod recorded;
mod storage;

/// The device classes; every `DeviceKind` is in exactly one.
static CLASSES: &[&dyn DeviceClass] = &[
    &hub::Hub,
    &hid::Hid,
    &storage::Storage,
    &iso::Audio,
    &iso::Webcam,
    &flood::Flood,
    &dump::Dump,
    &external::External,
    &recorded::FromCapture,
];

/// The class of `kind`.
fn class(kind: DeviceKind) -> &'static dyn DeviceClass {
    CLASSES
        .iter()
        .copied()
        .find(|c| c.kinds().contains(&kind))
        .expect("every device kind has a class")
}

/// The class of a device on the bus (a root hub is a hub).
pub(crate) fn class_of(kind: Kind) -> &'static dyn DeviceClass {
    match kind {
        Kind::Root => class(DeviceKind::Hub),
        Kind::Dev(k) => class(k),
    }
}

/// The natural speed of a configured device: `speed:` if given, else a
/// descriptor file's from its bcdUSB (2.00 and up: high speed, below: full
/// speed), the others per class.
fn natural_speed_of(cfg: &DeviceConfig) -> Speed {
    use crate::config::DeviceSpeed;
    match cfg.speed {
        Some(DeviceSpeed::Low) => return Speed::Low,
        Some(DeviceSpeed::Full) => return Speed::Full,
        Some(DeviceSpeed::High) => return Speed::High,
        None => {}
    }
    match cfg.descriptors.as_ref().and_then(|f| f.dump.as_ref()) {
        Some(d) if d.bcd_usb() < 0x0200 => Speed::Full,
        Some(_) => Speed::High,
        None => class(cfg.kind).natural_speed(cfg.kind),
    }
}

/// The descriptors of a device configured as `cfg`, plugged into a port of
/// speed `port` at `path` on `bus`; `salt` varies generated serial numbers.
pub(crate) fn describe(
    cfg: &DeviceConfig,
    port: Speed,
    bus: u16,
    path: &[u8],
    salt: u64,
) -> Descriptors {
    let speed = natural_speed_of(cfg).min(port);
    if let Some(d) = cfg.descriptors.as_ref().and_then(|f| f.dump.as_ref()) {
        return dump::from_dump(cfg, d, speed);
    }
    let at = Where {
        cfg,
        speed,
        bus,
        path,
        salt,
    };
    let c = class(cfg.kind).descriptors(&at).unwrap_or_else(|| {
        unreachable!("kinds descriptors, external and from-capture always have descriptors (loaded by sim::usb::load and ctl)")
    });
    descriptors::assemble(&at, c)
}

/// A device was plugged in: one that answers its own ep0 (`kind:
/// external` with `ep0: peer`) gets its peer now, for the enumeration.
pub(crate) fn plugged(ctx: &mut Ctx, d: DevId) {
    if let Some(k) = ctx.dev(d).map(|x| x.kind) {
        class_of(k).plugged(ctx, d);
    }
}

/// Bind the class driver of device `d` once it is configured: start the
/// model of its class.
pub(crate) fn start_class_driver(ctx: &mut Ctx, d: DevId, now: u64) {
    let Some(dev) = ctx.dev_mut(d) else {
        return;
    };
    dev.driver_bound = true;
    let Kind::Dev(kind) = dev.kind else {
        return;
    };
    super::core_view::device_changed(ctx, d);
    // Unplugged during the probe: the driver's first URBs go out before the
    // hub driver, busy probing, gets to the port change (and they fail).
    let at = if ctx.alive(d) {
        let wait = ctx.rng.range(MS, 8 * MS);
        now + ctx.delay(wait)
    } else {
        now
    };
    class(kind).start(ctx, d, now, at);
}

/// Make device `d`'s IN function and SCSI target where its class has them
/// and it has them not yet (`Ctx::make_function`).
pub(crate) fn make_function(ctx: &mut Ctx, d: DevId, at: u64) {
    let Some(dev) = ctx.dev(d) else {
        return;
    };
    let Kind::Dev(kind) = dev.kind else {
        return;
    };
    if dev.function_in.is_none() {
        if let Some(f) = class(kind).function(ctx, d, at) {
            if let Some(x) = ctx.dev_mut(d) {
                x.function_in = Some(f);
            }
        }
    }
    if let Some(x) = ctx.dev_mut(d) {
        if x.target.is_none() {
            x.target = class(kind).target(x);
        }
    }
}

/// A driver bound interface `intf` of device `d` again: its model's tasks
/// for that interface start again.
pub(crate) fn rebind(ctx: &mut Ctx, d: DevId, intf: u8, now: u64) {
    if let Some(Kind::Dev(kind)) = ctx.dev(d).map(|x| x.kind) {
        class(kind).rebind(ctx, d, intf, now);
    }
}

/// The probe requests of the driver that binds interface `intf` of device
/// `dev` (`d`) again, a probe that reads the device as it goes answered by
/// its model (`Ctx::reprobe`).
pub(crate) fn reprobe_ops(dev: &Device, d: DevId, intf: u8) -> Vec<Op> {
    let Kind::Dev(kind) = dev.kind else {
        return Vec::new();
    };
    super::driver::reprobe_ops(dev, d, intf, &mut *class(kind).answers(dev))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::usb::descriptors::string_descriptor;

    #[test]
    fn every_kind_has_one_class() {
        for k in crate::config::DeviceKind::ALL {
            let n = CLASSES.iter().filter(|c| c.kinds().contains(k)).count();
            assert_eq!(n, 1, "{k:?}");
        }
    }

    /// qemu's (7.2) usb-kbd, usb-tablet and usb-storage on qemu-xhci, as
    /// the 6.12 kernel read them in kernel-vm (sysfs `descriptors`).
    #[test]
    fn qemu_devices_on_xhci_match_qemu() {
        let hex = |s: &str| -> Vec<u8> {
            (0..s.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
                .collect()
        };
        let dev = |kind: &str| {
            let yaml = format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - {{port: 1, kind: {kind}}}\n");
            crate::config::Config::parse(&yaml, "t").unwrap().usb.buses[0].devices[0].clone()
        };
        for (kind, want, strings) in [
            (
                DeviceKind::HidKeyboard,
                "120100020000004027060100000001040b0109022200010108a032090400000103010100092111010001223f0007058103080007",
                [(4, "QEMU USB Keyboard"), (0x0b, "68284-0000:00:04.0-1"), (8, "HID Keyboard")],
            ),
            (
                DeviceKind::HidTablet,
                "120100020000004027060100000001030a0109022200010107a032090400000103000000092101000001224a0007058103080004",
                [(3, "QEMU USB Tablet"), (0x0a, "28754-0000:00:04.0-1"), (7, "HID Tablet")],
            ),
            (
                DeviceKind::MassStorage,
                "1201000200000040f446010000000102030109022000010105c0000904000002080650000705810200020007050202000200",
                [(2, "QEMU USB HARDDRIVE"), (3, "1-0000:00:04.0-1"), (5, "High speed config (usb 2.0)")],
            ),
        ] {
            let cfg = dev(kind.name());
            let d = describe(&cfg, Speed::High, 1, &[1], 0);
            assert_eq!(d.speed, Speed::High, "{kind:?}");
            let mut got = d.dev.bytes().to_vec();
            got.extend(d.cfg.bytes());
            assert_eq!(got, hex(want), "{kind:?}");
            assert_eq!(d.string(1), Some(string_descriptor("QEMU")));
            for (i, s) in strings {
                assert_eq!(d.string(i), Some(string_descriptor(s)), "{kind:?} string {i}");
            }
        }
        // qemu's usb-audio, full speed on its own xHCI (bus 2 port 1 in
        // kernel-vm, whose controller is 00:04.0): its descriptors and
        // every string it answers (read through usbfs).
        let cfg = dev("audio");
        let d = describe(&cfg, Speed::High, 1, &[1], 0);
        assert_eq!(d.speed, Speed::Full);
        let mut got = d.dev.bytes().to_vec();
        got.extend(d.cfg.bytes());
        assert_eq!(
            got,
            hex("1201000100000040f446020000000102030109027100020104c03209040000000101040509240100012b0001010c24020101010002030000060d24060201020100020002000709240303010300020809040100000102000909040101010102000a072401010001000b2402010202100180bb000905010dc00001000007250100000000")
        );
        assert_eq!(d.intf_strings, [5, 9]);
        for (i, s) in [
            (1, "QEMU"),
            (2, "QEMU USB Audio"),
            (3, "1-0000:00:04.0-1"),
            (4, "Audio Configuration"),
            (5, "Audio Device"),
            (6, "Audio Output Pipe"),
            (7, "Audio Output Volume Control"),
            (8, "Audio Output Terminal"),
            (9, "Audio Output - Disabled"),
            (10, "Audio Output - 48 kHz Stereo"),
        ] {
            assert_eq!(d.string(i), Some(string_descriptor(s)), "audio string {i}");
        }
        assert_eq!(d.string(11), None);
        assert_eq!(
            hid::TABLET_REPORT.to_vec(),
            hex("05010902a1010901a10005091901290315002501950375018102950175058101050109300931150026ff7f350046ff7f751095028102050109381581257f35004500750895018106c0c0")
        );
    }
}
