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

    for ok in ["qemu-usb-tablet", "qemu-usb-hub"] {
        DescriptorDump::parse(data(ok)).unwrap();
    }
}

#[test]
fn superspeed_dump_is_refused_at_bcd_usb() {
    let e = bad(data("qemu-usb-storage-ss"));
    assert_eq!(e.offset, 2, "{e}");
    assert!(e.message.contains("bcdUSB 3.00"), "{e}");
}

#[test]
fn short_files() {
    let e = bad(vec![]);
    assert_eq!(e.offset, 0, "{e}");
    let e = bad(kbd()[..17].to_vec());
    assert_eq!(e.offset, 17, "{e}");
    assert!(e.message.contains("too short"), "{e}");
    // Device descriptor only: the configuration is missing.
    let e = bad(kbd()[..18].to_vec());
    assert_eq!(e.offset, 18, "{e}");
    assert!(e.message.contains("configuration 0"), "{e}");
    // The configuration cut short: wTotalLength (offset 20) runs past the end.
    let e = bad(kbd()[..51].to_vec());
    assert_eq!(e.offset, 20, "{e}");
    assert!(e.message.contains("wTotalLength 34"), "{e}");
}

#[test]
fn device_descriptor_fields() {
    let with = |at: usize, v: u8| {
        let mut b = kbd();
        b[at] = v;
        bad(b)
    };
    let e = with(0, 9);
    assert_eq!(e.offset, 0, "{e}");
    assert!(e.message.contains("bLength is 9"), "{e}");
    let e = with(1, 2);
    assert_eq!(e.offset, 1, "{e}");
    assert!(e.message.contains("bDescriptorType"), "{e}");
    let e = with(7, 9);
    assert_eq!(e.offset, 7, "{e}");
    assert!(e.message.contains("bMaxPacketSize0"), "{e}");
    let e = with(17, 0);
    assert_eq!(e.offset, 17, "{e}");
    // Two configurations announced, one present.
    let e = with(17, 2);
    assert_eq!(e.offset, 52, "{e}");
    assert!(e.message.contains("configuration 1"), "{e}");
}

#[test]
fn configuration_fields() {
    let with = |at: usize, v: u8| {
        let mut b = kbd();
        b[at] = v;
        bad(b)
    };
    let e = with(18, 8);
    assert_eq!(e.offset, 18, "{e}");
    let e = with(19, 4);
    assert_eq!(e.offset, 19, "{e}");
    // wTotalLength too small, too large.
    let e = with(20, 8);
    assert_eq!(e.offset, 20, "{e}");
    let e = with(20, 35);
    assert_eq!(e.offset, 20, "{e}");
    // wTotalLength 33: the endpoint descriptor then runs past it.
    let e = with(20, 33);
    assert_eq!(e.offset, 45, "{e}");
    assert!(e.message.contains("runs past"), "{e}");
    // A byte after the last configuration.
    let mut b = kbd();
    b.push(0);
    let e = bad(b);
    assert_eq!(e.offset, 52, "{e}");
    assert!(e.message.contains("1 bytes follow"), "{e}");
    // bNumInterfaces 2, one interface.
    let e = with(22, 2);
    assert_eq!(e.offset, 22, "{e}");
    assert!(e.message.contains("bNumInterfaces is 2"), "{e}");
}

#[test]
fn inner_descriptors() {
    let with = |at: usize, v: u8| {
        let mut b = kbd();
        b[at] = v;
        bad(b)
    };
    // Interface descriptor at 27, HID at 36, endpoint at 45.
    let e = with(27, 1);
    assert_eq!(e.offset, 27, "{e}");
    assert!(e.message.contains("less than 2"), "{e}");
    let e = with(27, 8);
    assert_eq!(e.offset, 27, "{e}");
    assert!(
        e.message.contains("interface descriptor bLength is 8"),
        "{e}"
    );
    // bNumEndpoints 2, one endpoint follows; 0, one follows.
    let e = with(31, 2);
    assert_eq!(e.offset, 31, "{e}");
    assert!(e.message.contains("bNumEndpoints is 2 but 1"), "{e}");
    let e = with(31, 0);
    assert_eq!(e.offset, 31, "{e}");
    let e = with(45, 6);
    assert_eq!(e.offset, 45, "{e}");
    assert!(
        e.message.contains("endpoint descriptor bLength is 6"),
        "{e}"
    );
    let e = with(47, 0x80);
    assert_eq!(e.offset, 47, "{e}");
    assert!(e.message.contains("bEndpointAddress 0x80"), "{e}");
    // A device descriptor type inside the configuration.
    let e = with(37, 1);
    assert_eq!(e.offset, 37, "{e}");
    // The interface turned into an unknown type: the endpoint has no interface.
    let e = with(28, 0x42);
    assert_eq!(e.offset, 45, "{e}");
    assert!(e.message.contains("before any interface"), "{e}");
    // The interface's alternate setting 1 without 0.
    let e = with(30, 1);
    assert_eq!(e.offset, 22, "{e}");
    assert!(e.message.contains("no alternate setting 0"), "{e}");
}

#[test]
fn duplicates_and_odd_tail() {
    // Interface repeated (same number and setting) and wTotalLength grown to cover it.
    let mut b = kbd();
    let intf = b[27..36].to_vec();
    b.extend_from_slice(&intf);
    b[20] += 9;
    let e = bad(b);
    assert_eq!(e.offset, 55, "{e}");
    assert!(e.message.contains("appears twice"), "{e}");
    // One stray byte inside wTotalLength.
    let mut b = kbd();
    b.push(7);
    b[20] += 1;
    let e = bad(b);
    assert_eq!(e.offset, 52, "{e}");
    assert!(e.message.contains("1 byte left"), "{e}");
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
