//! The driver registry on the built-in device kinds' descriptors and on
//! variants of them: which driver each interface gets, by the kernel's
//! match rules and probes.

use crate::config::{Config, DeviceKind};

use super::ctx::{Device, Kind};
use super::descriptors::{AltDesc, Speed};
use super::device::describe;
use super::driver::{self, Binding};

/// A bound device of `kind` as the configuration makes it.
fn device(kind: &str) -> Device {
    let yaml = format!(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {{port: 1, kind: {kind}}}\n"
    );
    let cfg = Config::parse(&yaml, "t").unwrap().usb.buses[0].devices[0].clone();
    let k = cfg.kind;
    let mut d = Device::new(Kind::Dev(k), describe(&cfg, Speed::High, 1, &[1], 0), 0);
    d.cfg = Some(cfg);
    d.driver_bound = true;
    d
}

/// The driver of each interface (setting 0) of `d`.
fn drivers(d: &Device) -> Vec<(u8, Option<&'static str>)> {
    let nums = d.desc.cfg.interface_numbers();
    nums.into_iter().map(|n| (n, driver::bound(d, n))).collect()
}

#[test]
fn the_built_in_kinds_bind_the_kernels_drivers() {
    for (kind, want) in [
        ("hid-keyboard", vec![(0, Some("usbhid"))]),
        ("hid-tablet", vec![(0, Some("usbhid"))]),
        ("mass-storage", vec![(0, Some("usb-storage"))]),
        ("hub", vec![(0, Some("hub"))]),
        ("flood", vec![(0, Some("usbtest"))]),
        // The streaming interfaces are claimed by the control interface's
        // probe.
        (
            "audio",
            vec![(0, Some("snd-usb-audio")), (1, Some("snd-usb-audio"))],
        ),
        ("webcam", vec![(0, Some("uvcvideo")), (1, Some("uvcvideo"))]),
    ] {
        assert_eq!(drivers(&device(kind)), want, "{kind}");
    }
}

#[test]
fn claimed_interfaces_do_not_attach_on_their_own() {
    for kind in ["audio", "webcam"] {
        let d = device(kind);
        assert_eq!(driver::attach(&d, 1), None, "{kind}");
        let name = if kind == "audio" {
            "snd-usb-audio"
        } else {
            "uvcvideo"
        };
        assert_eq!(driver::attach(&d, 0), Some(Binding::Bound(name)), "{kind}");
        // A header that lists no streaming interface claims none.
        let mut d = d;
        let vc = d.desc.cfg.alts.iter_mut().find(|a| a.num == 0).unwrap();
        let at = if kind == "audio" { 7 } else { 11 };
        vc.extra[at] = 0;
        assert_eq!(driver::bound(&d, 1), None, "{kind}");
    }
}

#[test]
fn storage_goes_to_uas_when_a_setting_speaks_it_and_odd_subclasses_to_none() {
    let mut d = device("mass-storage");
    let mut uas: AltDesc = d.desc.cfg.alts[0].clone();
    uas.alt = 1;
    uas.proto = 0x62;
    d.desc.cfg.alts.push(uas);
    assert_eq!(driver::bound(&d, 0), Some("uas"));
    let mut d = device("mass-storage");
    d.desc.cfg.alts[0].sub = 0x07;
    assert_eq!(driver::bound(&d, 0), None);
}

#[test]
fn usbhid_needs_a_hid_descriptor_and_a_non_vendor_device() {
    let mut d = device("hid-keyboard");
    d.desc.dev.class = 0xff;
    assert_eq!(driver::bound(&d, 0), None, "vendor-specific device class");
    let mut d = device("hid-keyboard");
    d.desc.cfg.alts[0].extra.clear();
    assert_eq!(driver::bound(&d, 0), None, "no HID descriptor");
    let mut d = device("hid-keyboard");
    d.desc.report.clear();
    assert_eq!(driver::bound(&d, 0), None, "no report descriptor");
    // A hub interface with two endpoints fails hub_probe.
    let mut d = device("hub");
    let ep = d.desc.cfg.alts[0].eps[0].clone();
    d.desc.cfg.alts[0].eps.push(ep);
    assert_eq!(driver::bound(&d, 0), None);
}

#[test]
fn an_external_hid_interface_is_probing_until_its_report_descriptor_comes() {
    let mut d = device("hid-keyboard");
    d.kind = Kind::Dev(DeviceKind::External);
    assert_eq!(driver::binding(&d, 0), Some(Binding::Probing("usbhid")));
    assert!(driver::usbhid::probing(&d));
    d.hid_probed.push((0, vec![]));
    assert_eq!(driver::binding(&d, 0), None, "the GET_DESCRIPTOR failed");
    d.hid_probed[0].1 = d.desc.report.clone();
    assert_eq!(driver::binding(&d, 0), Some(Binding::Bound("usbhid")));
    assert!(!driver::usbhid::probing(&d));
}

#[test]
fn only_usb_storage_unbinds_softly() {
    assert!(driver::soft_unbind(&device("mass-storage"), 0));
    for kind in ["hid-keyboard", "flood", "audio", "hub"] {
        assert!(!driver::soft_unbind(&device(kind), 0), "{kind}");
    }
}
