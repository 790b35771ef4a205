//! An interface no kernel driver binds (vendor class, `driver: auto`) of an
//! external device: `usb/devices` says `Driver=(none)`, sysfs has no
//! `driver` link, usbfs GETDRIVER is ENODATA (libusb: no kernel driver
//! active), and usbmon shows no URB on its endpoints but the ones a
//! program (tests/c/usbfs_libusb.c) submits after claiming it. The same
//! device with `driver: generic` is bound to monfs's generic driver, which
//! keeps its IN endpoints polled, and a program must detach it first.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{bus1_lines, cat_1u, compile_c_libs, descriptors_dump, repo_path, run_libusb, Mount};

/// A vendor device: interface 0 (class 0xff) with bulk IN 0x81, bulk OUT
/// 0x02 and interrupt IN 0x85 (8 bytes, bInterval 4) in setting 0.
fn vendor_dump() -> Vec<u8> {
    let dev = [
        18, 1, 0, 2, 0xff, 0, 0, 64, 0x34, 0x12, 0x7a, 0x56, 1, 0, 1, 2, 0, 1,
    ];
    let rest: [u8; 30] = [
        9, 4, 0, 0, 3, 0xff, 0, 0, 0, // interface 0
        7, 5, 0x81, 2, 0, 2, 0, // bulk IN, 512
        7, 5, 0x02, 2, 0, 2, 0, // bulk OUT, 512
        7, 5, 0x85, 3, 8, 0, 4, // interrupt IN, 8
    ];
    descriptors_dump(&dev, 1, &rest)
}

/// Bus 1: the vendor device on port 1 (`driver: auto`, the default) and on
/// port 2 (`driver: generic`), each answered by tests/data/usbfs_peer.py
/// logging its input to `auto.log` / `generic.log` in `dir`.
fn config(dir: &Path) -> String {
    let desc = dir.join("vendor.desc");
    std::fs::write(&desc, vendor_dump()).unwrap();
    let peer = repo_path("tests/data/usbfs_peer.py");
    let dev = |port: u32, product: &str, extra: &str| {
        format!(
            "        - port: {port}\n          kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: {product}\n{extra}          command: [python3, {peer}, {}]\n",
            desc.display(),
            dir.join(format!("{product}.log")).display()
        )
    };
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n{}{}",
        dev(1, "auto", ""),
        dev(2, "generic", "          driver: generic\n")
    )
}

/// The product's devnum once it is configured (`usb/devices`), and its
/// block there.
fn device_of(m: &Mount, product: &str) -> (u8, String) {
    let deadline = Instant::now() + common::HANG;
    loop {
        let t = m.sh_ok("cat usb/devices");
        if let Some(b) = t
            .split("\n\n")
            .find(|b| b.contains(&format!("S:  Product={product}\n")) && b.contains("I:*"))
        {
            let dev = b.split("Dev#=").nth(1).unwrap().split_whitespace().next();
            return (dev.unwrap().parse().unwrap(), b.to_string());
        }
        assert!(
            Instant::now() < deadline,
            "{product} never configured:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The capture's lines of device `dev` on endpoints other than 0, each
/// checked against the kernel's format, without tag and time stamp.
fn data_lines(cap: &Path, dev: u8) -> Vec<String> {
    let ep0 = format!(":1:{dev:03}:0 ");
    bus1_lines(cap, dev)
        .into_iter()
        .filter(|l| !l.contains(&ep0))
        .collect()
}

#[test]
fn a_vendor_interface_has_no_driver_and_only_the_programs_urbs() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path()));
    let (mut cat, cap) = cat_1u(&m);
    let tool = compile_c_libs("usbfs_libusb", m.dir.path(), &["-lusb-1.0"]);
    let intf = "I:* If#= 0 Alt= 0 #EPs= 3 Cls=ff(vend.) Sub=00 Prot=00 Driver=";
    // The generic driver binds once the device is configured.
    let deadline = Instant::now() + common::HANG;
    let generic = loop {
        let (n, b) = device_of(&m, "generic");
        if b.contains(&format!("{intf}monfs-generic\n")) {
            break n;
        }
        assert!(Instant::now() < deadline, "never bound:\n{b}");
        std::thread::sleep(Duration::from_millis(20));
    };
    // The other device's driver has started (its peer got `hello`): its
    // interface stays without one.
    let hello = td.path().join("auto.log");
    while !std::fs::read_to_string(&hello).is_ok_and(|l| l.starts_with("hello ")) {
        assert!(
            Instant::now() < deadline,
            "the auto device's peer never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (auto, block) = device_of(&m, "auto");
    assert!(block.contains(&format!("{intf}(none)\n")), "{block}");
    // sysfs: the generic device's interface links its driver; the other
    // has no link.
    let port_of = |p: u32| m.path(&format!("sys/bus/usb/devices/1-{p}:1.0"));
    let deadline = Instant::now() + common::HANG;
    while !port_of(2).join("driver").exists() {
        assert!(Instant::now() < deadline, "no driver link for 1-2:1.0");
        std::thread::sleep(Duration::from_millis(20));
    }
    let link = std::fs::read_link(port_of(2).join("driver")).unwrap();
    assert!(
        link.ends_with("drivers/monfs-generic"),
        "{}",
        link.display()
    );
    assert!(port_of(1).join("modalias").exists());
    assert!(!port_of(1).join("driver").exists());

    // The generic driver polls its device (its interrupt IN URBs complete
    // with the peer's counter, over and over), and a program's claim is
    // refused until it detaches it.
    let deadline = Instant::now() + common::HANG;
    loop {
        let l = data_lines(&cap, generic);
        let d = format!("1:{generic:03}");
        if l.iter()
            .any(|x| x.starts_with(&format!("C Ii:{d}:5 0:8 4 = ")))
        {
            break;
        }
        assert!(Instant::now() < deadline, "no generic driver URBs:\n{l:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let gnode = m.path(&format!("dev/bus/usb/001/{generic:03}"));
    assert_eq!(
        run_libusb(&tool, &gnode, &["active:0", "claim:0"]),
        ["active:0 rc=1", "claim:0 rc=LIBUSB_ERROR_BUSY"]
    );

    // The unbound one: no kernel driver (GETDRIVER: ENODATA), nothing on
    // its endpoints until the program's transfers, and then exactly them.
    let node = m.path(&format!("dev/bus/usb/001/{auto:03}"));
    let out = run_libusb(
        &tool,
        &node,
        &[
            "active:0",
            "sleep:300",
            "claim:0",
            "bulk-out:02:0102030405",
            "bulk-in:81:64",
            "int-in:85:4",
            "release:0",
        ],
    );
    assert_eq!(
        out,
        [
            "active:0 rc=0",
            "claim:0 rc=0",
            "bulk-out:02:0102030405 rc=0 5",
            "bulk-in:81:64 rc=0 5 0504030201",
            "int-in:85:4 rc=0 4 00000001",
            "release:0 rc=0",
        ]
    );
    // The generic device's URBs keep coming; once one of them completes
    // after the program's run, every URB of the program is in the file.
    let before = data_lines(&cap, generic).len();
    let deadline = Instant::now() + common::HANG;
    while data_lines(&cap, generic).len() <= before + 2 {
        assert!(Instant::now() < deadline, "the generic driver stopped");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = cat.kill();
    let _ = cat.wait();
    let d = format!("1:{auto:03}");
    assert_eq!(
        data_lines(&cap, auto),
        [
            format!("S Bo:{d}:2 -115 5 = 01020304 05"),
            format!("C Bo:{d}:2 0 5 >"),
            format!("S Bi:{d}:1 -115 64 <"),
            format!("C Bi:{d}:1 0 5 = 05040302 01"),
            format!("S Ii:{d}:5 -115:8 4 <"),
            format!("C Ii:{d}:5 0:8 4 = 00000001"),
        ]
    );
    // The peer saw the program's transfers and nothing else on them.
    let log = std::fs::read_to_string(td.path().join("auto.log")).unwrap();
    let data: Vec<&str> = log
        .lines()
        .filter(|l| l.starts_with("submit ") && !l.contains(" 00 C "))
        .collect();
    assert_eq!(data.len(), 3, "{log}");
}
