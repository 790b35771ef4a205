use super::*;

fn data(name: &str) -> Vec<u8> {
    let p = format!(
        "{}/tests/data/sysfs/{name}/descriptors",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn bad(bytes: Vec<u8>) -> DumpError {
    DescriptorDump::parse(bytes).expect_err("a bad dump")
}

fn kbd() -> Vec<u8> {
    data("qemu-usb-kbd")
}

/// The usb-kbd dump with byte `at` set to `v`, which must not parse.
fn with(at: usize, v: u8) -> DumpError {
    let mut b = kbd();
    b[at] = v;
    bad(b)
}

/// `e` is at byte `offset` and its message has `has`.
fn check(e: DumpError, offset: usize, has: &str) {
    assert_eq!(e.offset, offset, "{e}");
    assert!(e.message.contains(has), "{e}");
}

#[test]
fn real_dumps_parse() {
    let d = DescriptorDump::parse(kbd()).unwrap();
    assert_eq!(d.bcd_usb(), 0x0200);
    assert_eq!(d.configs.len(), 1);
    let c = &d.configs[0];
    assert_eq!(c.range, 18..52);
    assert_eq!(
        (c.num_interfaces, c.value, c.i_cfg, c.attr, c.max_power),
        (1, 1, 8, 0xa0, 50)
    );
    assert_eq!(c.interfaces.len(), 1);
    let i = &c.interfaces[0];
    assert_eq!(
        (i.num, i.alt, i.class, i.sub, i.proto, i.i_intf),
        (0, 0, 3, 1, 1, 0)
    );
    // Its HID descriptor (report descriptor: 63 bytes) is its extra.
    assert_eq!(i.extra, [9, 0x21, 0x11, 0x01, 0, 1, 0x22, 63, 0]);
    assert_eq!(
        i.eps,
        vec![DumpEndpoint {
            addr: 0x81,
            attr: 3,
            mps: 8,
            interval: 7
        }]
    );
    assert_eq!(d.config_bytes(0).unwrap(), &kbd()[18..]);
    assert_eq!(d.device(), &kbd()[..18]);

    let a = DescriptorDump::parse(data("qemu-usb-audio")).unwrap();
    let c = &a.configs[0];
    assert_eq!(c.num_interfaces, 2);
    let alts: Vec<_> = c
        .interfaces
        .iter()
        .map(|i| (i.num, i.alt, i.i_intf, i.eps.len()))
        .collect();
    assert_eq!(alts, vec![(0, 0, 5, 0), (1, 0, 9, 0), (1, 1, 10, 1)]);
    assert_eq!(c.interfaces[2].eps[0].attr, 0x0d);
    // The audio control header lists streaming interface 1; the class
    // endpoint descriptor after an endpoint is not the interface's.
    let ac = &c.interfaces[0].extra;
    assert_eq!(&ac[..3], [9, 0x24, 0x01]);
    assert_eq!((ac[7], ac[8]), (1, 1));
    assert!(!c.interfaces[2].extra.windows(2).any(|w| w == [7, 0x25]));

    for ok in ["qemu-usb-tablet", "qemu-usb-hub"] {
        DescriptorDump::parse(data(ok)).unwrap();
    }
}

#[test]
fn superspeed_dump_is_refused_at_bcd_usb() {
    check(bad(data("qemu-usb-storage-ss")), 2, "bcdUSB 3.00");
}

#[test]
fn short_files() {
    let e = bad(vec![]);
    assert_eq!(e.offset, 0, "{e}");
    check(bad(kbd()[..17].to_vec()), 17, "too short");
    // Device descriptor only: the configuration is missing.
    check(bad(kbd()[..18].to_vec()), 18, "configuration 0");
    // The configuration cut short: wTotalLength (offset 20) runs past the end.
    check(bad(kbd()[..51].to_vec()), 20, "wTotalLength 34");
}

#[test]
fn device_descriptor_fields() {
    check(with(0, 9), 0, "bLength is 9");
    check(with(1, 2), 1, "bDescriptorType");
    check(with(7, 9), 7, "bMaxPacketSize0");
    check(with(17, 0), 17, "");
    // Two configurations announced, one present.
    check(with(17, 2), 52, "configuration 1");
}

#[test]
fn configuration_fields() {
    check(with(18, 8), 18, "");
    check(with(19, 4), 19, "");
    // wTotalLength too small, too large.
    check(with(20, 8), 20, "");
    check(with(20, 35), 20, "");
    // wTotalLength 33: the endpoint descriptor then runs past it.
    check(with(20, 33), 45, "runs past");
    // A byte after the last configuration.
    let mut b = kbd();
    b.push(0);
    check(bad(b), 52, "1 bytes follow");
    // bNumInterfaces 2, one interface.
    check(with(22, 2), 22, "bNumInterfaces is 2");
}

#[test]
fn inner_descriptors() {
    // Interface descriptor at 27, HID at 36, endpoint at 45.
    check(with(27, 1), 27, "less than 2");
    check(with(27, 8), 27, "interface descriptor bLength is 8");
    // bNumEndpoints 2, one endpoint follows; 0, one follows.
    check(with(31, 2), 31, "bNumEndpoints is 2 but 1");
    check(with(31, 0), 31, "");
    check(with(45, 6), 45, "endpoint descriptor bLength is 6");
    check(with(47, 0x80), 47, "bEndpointAddress 0x80");
    // A device descriptor type inside the configuration.
    check(with(37, 1), 37, "");
    // The interface turned into an unknown type: the endpoint has no interface.
    check(with(28, 0x42), 45, "before any interface");
    // The interface's alternate setting 1 without 0.
    check(with(30, 1), 22, "no alternate setting 0");
}

#[test]
fn duplicates_and_odd_tail() {
    // Interface repeated (same number and setting) and wTotalLength grown to cover it.
    let mut b = kbd();
    let intf = b[27..36].to_vec();
    b.extend_from_slice(&intf);
    b[20] += 9;
    check(bad(b), 55, "appears twice");
    // One stray byte inside wTotalLength.
    let mut b = kbd();
    b.push(7);
    b[20] += 1;
    check(bad(b), 52, "1 byte left");
}

#[test]
fn two_configurations() {
    let mut b = kbd();
    let mut c2 = b[18..].to_vec();
    c2[5] = 2;
    b.extend_from_slice(&c2);
    b[17] = 2;
    let d = DescriptorDump::parse(b).unwrap();
    assert_eq!(d.configs.len(), 2);
    assert_eq!(d.configs[1].range, 52..86);
    assert_eq!(d.configs[1].value, 2);
    assert_eq!(d.config_bytes(1).unwrap(), &c2[..]);
}

#[test]
fn the_report_length_comes_from_the_hid_descriptors_report_entry() {
    // bNumDescriptors 2: a physical descriptor entry, then the report's.
    let two = [12, 0x21, 0x11, 0x01, 0, 2, 0x23, 9, 0, 0x22, 0x3f, 0];
    assert_eq!(hid_report_length(&two), Some(63));
    // After another class descriptor.
    let after = [3, 0x24, 1, 9, 0x21, 0x11, 0x01, 0, 1, 0x22, 0x00, 0x10];
    assert_eq!(hid_report_length(&after), Some(4096));
    // No report entry, a zero or oversized length, a truncated walk:
    // usbhid_parse refuses.
    assert_eq!(
        hid_report_length(&[9, 0x21, 0x11, 0x01, 0, 1, 0x23, 9, 0]),
        None
    );
    assert_eq!(
        hid_report_length(&[9, 0x21, 0x11, 0x01, 0, 1, 0x22, 0, 0]),
        None
    );
    assert_eq!(
        hid_report_length(&[9, 0x21, 0x11, 0x01, 0, 1, 0x22, 0x01, 0x10]),
        None
    );
    assert_eq!(hid_report_length(&[9, 0x21, 0x11, 0x01, 0, 1, 0x22]), None);
    assert_eq!(hid_report_length(&[]), None);
}
