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

/// A flood device (one vendor interface, a bulk endpoint each way) with
/// the ids `vid`:`pid`.
fn serial_device(vid: u16, pid: u16) -> Device {
    let mut d = device("flood");
    d.desc.dev.vid = vid;
    d.desc.dev.pid = pid;
    d.kind = Kind::Dev(DeviceKind::External);
    d
}

/// The setup packets of `ops`, as usbmon prints them (`c0 ff 370b 0000
/// 0001`).
fn setups(ops: &[super::ctx::Op]) -> Vec<String> {
    ops.iter()
        .filter_map(|o| match o {
            super::ctx::Op::Ctrl { setup: s, .. } => Some(format!(
                "{:02x} {:02x} {:02x}{:02x} {:02x}{:02x} {:02x}{:02x}",
                s[0], s[1], s[3], s[2], s[5], s[4], s[7], s[6]
            )),
            _ => None,
        })
        .collect()
}

/// The peer answered the last request `status`, with `data`.
fn answer(d: &mut Device, ops: &[super::ctx::Op], status: i32, data: &[u8]) {
    let Some(super::ctx::Op::Ctrl { setup, .. }) = ops.last() else {
        panic!("no request");
    };
    d.probe_answers.push((
        0,
        crate::usbcore::device::ProbeAnswer {
            setup: *setup,
            status,
            data: data.to_vec(),
        },
    ));
}

#[test]
fn cp210x_probes_as_the_part_number_says() {
    // (part number, the further requests and their answers' lengths)
    for (partnum, want) in [
        // The CP2102's quirk check: two bytes of the part number, index 0.
        (0x02u8, vec!["c0 ff 370b 0000 0002"]),
        // CP2104: GET_PORTCONFIG of its single port config.
        (0x04, vec!["c0 ff 370c 0000 000d"]),
        // CP2105: the firmware version, the pin mode, its port config.
        (
            0x05,
            vec![
                "c0 ff 000e 0000 0003",
                "c0 ff 3711 0000 0002",
                "c0 ff 370c 0000 000f",
            ],
        ),
        // CP2108 on interface 0: the firmware version, the quad config.
        (0x08, vec!["c0 ff 000e 0000 0003", "c0 ff 370c 0000 0049"]),
        // CP2102N: the firmware version, the configuration array.
        (0x20, vec!["c0 ff 0010 0000 0003", "c0 ff 000e 0000 02a6"]),
        // CP2101 and CP2103: nothing more.
        (0x01, vec![]),
        (0x03, vec![]),
    ] {
        let mut d = serial_device(0x10c4, 0xea60);
        assert_eq!(driver::bound(&d, 0), Some("cp210x"));
        let first = driver::reprobe_ops(&d, 0, 0, &mut |_, _| None);
        assert_eq!(setups(&first), ["c0 ff 370b 0000 0001"]);
        answer(&mut d, &first, 0, &[partnum]);
        let mut got = vec![];
        loop {
            let more = driver::probe_more(&d, 0, 0);
            if more.is_empty() {
                break;
            }
            got.extend(setups(&more));
            let len = u16::from_le_bytes(match &more[0] {
                super::ctx::Op::Ctrl { setup: s, .. } => [s[6], s[7]],
                _ => unreachable!(),
            });
            answer(&mut d, &more, 0, &vec![0; len as usize]);
        }
        assert_eq!(got, want, "part {partnum:#04x}");
    }
    // GET_PARTNUM stalled: the part is unknown, nothing more is asked.
    let mut d = serial_device(0x10c4, 0xea60);
    let first = driver::reprobe_ops(&d, 0, 0, &mut |_, _| None);
    answer(&mut d, &first, -32, &[]);
    assert!(driver::probe_more(&d, 0, 0).is_empty());
}

#[test]
fn ch341_configures_by_its_version_and_stops_at_a_failure() {
    let run = |version: u8, fail_at: Option<usize>| {
        let mut d = serial_device(0x1a86, 0x7523);
        assert_eq!(driver::bound(&d, 0), Some("ch341"));
        let first = driver::reprobe_ops(&d, 0, 0, &mut |_, _| None);
        let mut got = setups(&first);
        answer(&mut d, &first, 0, &[version, 0]);
        loop {
            let more = driver::probe_more(&d, 0, 0);
            if more.is_empty() {
                break;
            }
            got.extend(setups(&more));
            let status = if fail_at == Some(got.len()) { -32 } else { 0 };
            answer(&mut d, &more, status, &[0x01, 0xc3]);
        }
        got
    };
    // Version 0x31: 9600 baud with bit 7, the line control register, the
    // handshake, the break register's read.
    assert_eq!(
        run(0x31, None),
        [
            "c0 5f 0000 0000 0002",
            "40 a1 0000 0000 0000",
            "40 9a 1312 b282 0000",
            "40 9a 2518 00c3 0000",
            "40 a4 ffff 0000 0000",
            "c0 95 0005 0000 0002",
        ]
    );
    // Version 0x27: no bit 7, no line control register.
    assert_eq!(
        run(0x27, None),
        [
            "c0 5f 0000 0000 0002",
            "40 a1 0000 0000 0000",
            "40 9a 1312 b202 0000",
            "40 a4 ffff 0000 0000",
            "c0 95 0005 0000 0002",
        ]
    );
    // SERIAL_INIT failed: the port probe ends there.
    assert_eq!(run(0x31, Some(2)).len(), 2);
}

/// snd-usb-audio's probe reads the device as it goes (through the
/// registry, `driver::probe_ops_asking`): a device that takes SET_RES and
/// reads every volume back as set gets the resolution halved down to 1
/// and one check of it; a device that stalls the feature unit gets each
/// read tried 10 times and no range check. uvcvideo commits what the
/// device read back from its probe control, not what it proposed.
#[test]
fn snd_usb_audio_and_uvcvideo_probes_read_the_device() {
    use std::collections::HashMap;
    let d = device("audio");
    // A feature unit that takes everything.
    let mut vals: HashMap<(u8, u8), u16> = HashMap::new();
    let mut res = 0x88u16;
    let mut ask = |s: &[u8; 8], out: Option<&[u8]>| -> Option<Vec<u8>> {
        if (s[0] & 0x60, s[5]) != (0x20, 2) {
            return None;
        }
        let key = (s[3], s[2]);
        let v = out.map(|o| u16::from_le_bytes([o[0], *o.get(1).unwrap_or(&0)]));
        let got = match (s[1], v) {
            (0x01, Some(v)) => {
                vals.insert(key, v);
                return Some(vec![]);
            }
            (0x04, Some(v)) => {
                res = v;
                return Some(vec![]);
            }
            (0x81, _) => *vals.get(&key).unwrap_or(&0),
            (0x82, _) => 0x8001,
            (0x83, _) => 0x0800,
            (0x84, _) => res,
            _ => return None,
        };
        Some(got.to_le_bytes()[..s[6] as usize].to_vec())
    };
    let ops = driver::probe_ops_asking(&d, 0, &mut ask);
    let got = setups(&ops);
    let mixer: Vec<&str> = got
        .iter()
        .map(|s| s.as_str())
        .skip_while(|s| !s.starts_with("a1 81 0100"))
        .collect();
    assert_eq!(
        mixer,
        [
            "a1 81 0100 0200 0001",
            "80 06 0307 0409 00ff",
            "a1 83 0201 0200 0002",
            "a1 82 0201 0200 0002",
            "a1 84 0201 0200 0002",
            "21 04 0201 0200 0002",
            "21 04 0201 0200 0002",
            "21 04 0201 0200 0002",
            "21 04 0201 0200 0002",
            "21 04 0201 0200 0002",
            "21 04 0201 0200 0002",
            "21 04 0201 0200 0002",
            "a1 84 0201 0200 0002",
            "a1 81 0201 0200 0002",
            "21 01 0201 0200 0002",
            "a1 81 0201 0200 0002",
            "21 01 0201 0200 0002",
            "a1 81 0202 0200 0002",
            // The player opens the PCM.
            "01 0b 0001 0001 0000",
        ]
    );
    // A feature unit that stalls everything: each read tried 10 times,
    // the channels' values it cannot read set to the minimum (0 here).
    let ops = driver::probe_ops_asking(&d, 0, &mut |_, _| None);
    let got = setups(&ops);
    let count = |s: &str| got.iter().filter(|x| *x == s).count();
    assert_eq!(count("a1 81 0100 0200 0001"), 10);
    assert_eq!(count("a1 83 0201 0200 0002"), 10);
    assert_eq!(count("a1 82 0201 0200 0002"), 0);
    assert_eq!(count("21 01 0202 0200 0002"), 10);
    // uvcvideo: the default block proposed (bmHint: the frame interval),
    // the device's choice (another payload size) committed.
    let d = device("webcam");
    let block = |payload: u32| {
        let mut b = vec![0u8; 26];
        b[2] = 1;
        b[3] = 1;
        b[22..26].copy_from_slice(&payload.to_le_bytes());
        b
    };
    let mut ask = |s: &[u8; 8], _: Option<&[u8]>| match (s[1], s[3]) {
        (0x87, 1) => Some(block(3072)),
        (0x81, 1) => Some(block(512)),
        (0x01, _) => Some(vec![]),
        _ => None,
    };
    let ops = driver::probe_ops_asking(&d, 0, &mut ask);
    assert_eq!(
        setups(&ops),
        [
            "21 01 0100 0001 001a",
            "a1 81 0100 0001 001a",
            "21 01 0200 0001 001a",
            "01 0b 0001 0001 0000",
        ]
    );
    let outs: Vec<Vec<u8>> = ops
        .iter()
        .filter_map(|o| match o {
            super::ctx::Op::Ctrl { out: Some(b), .. } => Some(b.to_vec()),
            _ => None,
        })
        .collect();
    let mut proposed = block(3072);
    proposed[0] = 1;
    assert_eq!(outs, [proposed, block(512)]);
    // Neither probe goes to an external device's peer (their requests
    // read the device as they go: only a model answers them).
    for dev in [device("audio"), d] {
        let (drv, alt) = driver::attached(&dev, 0).unwrap();
        assert!(drv.probe_ops(&dev, 0, &alt).is_empty());
    }
}

/// The control URBs the drivers keep with a DMA buffer of their own carry
/// URB_NO_TRANSFER_DMA_MAP, as the kernel's: usbhid's urbctrl (the boot
/// keyboard's LEDs at its probe: 0x004), usb-storage's GET_MAX_LUN through
/// `us->iobuf` (0x204); usb_control_msg's (SET_IDLE, the report
/// descriptor, the reset) have none.
#[test]
fn drivers_control_urbs_carry_the_kernels_transfer_flags() {
    use std::sync::Arc;

    use crate::base::sync::LockExt;
    use crate::usbmon::event::{EventKind, XferType};

    use super::usbfs_port::tests::{Collect, TestClock};
    use super::UsbSim;

    let cfg = Config::parse(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-keyboard}\n        - {port: 2, kind: mass-storage}\n",
        "t",
    )
    .unwrap();
    let sink = Arc::new(Collect::default());
    let _sim = UsbSim::run_for_test(&cfg.usb, 5, 3000, Arc::new(TestClock), sink.clone());
    let flags = |req: [u8; 2]| -> Vec<u32> {
        sink.0
            .lock_ok()
            .iter()
            .filter(|e| e.kind == EventKind::Submit && e.xfer == XferType::Control)
            .filter(|e| e.setup.is_some_and(|s| s[..2] == req))
            .map(|e| e.xfer_flags)
            .collect()
    };
    assert_eq!(flags([0x21, 0x09]), [0x004], "usbhid's SET_REPORT (LEDs)");
    assert_eq!(flags([0xa1, 0xfe]), [0x204], "usb-storage's GET_MAX_LUN");
    assert_eq!(flags([0x21, 0x0a]), [0x000], "usbhid's SET_IDLE");
    assert_eq!(flags([0x81, 0x06]), [0x200], "usbhid's report descriptor");
}
