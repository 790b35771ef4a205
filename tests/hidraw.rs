//! hidraw inside `monfs run` (as root, and as a user in the rootless leg):
//! Debian's hidapi (its hidraw backend) enumerates the simulated keyboard,
//! opens it by VID:PID, reads its typing and sends output and feature
//! reports, which reach the device as the URBs usbhid makes (usbmon shows
//! them); raw system calls get hidraw.c's answers and errnos, also after
//! an unplug; the HID device's and hidraw's uevents come between the
//! interface's `add` and `bind` as the kernel sends them; python3-hid
//! (hidapi's libusb backend) detaches usbhid, and hidraw comes back with
//! the next HID device number when it lets go.

mod common;

use std::path::Path;

use common::{class_char_devices as char_devices, compile_c, compile_c_libs, lines, monfs_run};

/// One keyboard on bus 1, typing from the start (fast timing).
const CONFIG: &str =
    "seed: 7\nusb:\n  buses:\n    - bus: 1\n      ports: 4\n      devices:\n        - {port: 1, kind: hid-keyboard}\n";

/// `monfs run` with [`CONFIG`].
fn run(dir: &Path, cmd: &str) -> String {
    monfs_run(dir, CONFIG, cmd)
}

#[test]
fn hidapi_reads_the_keyboard_and_its_reports_reach_the_device() {
    let td = tempfile::tempdir().unwrap();
    compile_c_libs("hidraw_hidapi", td.path(), &["-lhidapi-hidraw"]);
    let out = run(
        td.path(),
        // 1u is open before the program starts (the shell opens it), and
        // read until the completion of the program's last request is in
        // (a minute at most: past that the assertions below show why).
        "exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & hidraw_hidapi 4; \
         ls -l /dev/hidraw0 | cut -c1-10; \
         n=0; until [ \"$(grep -c ' C Ci:1:002:0 ' mon)\" -ge 2 ] || [ $n = 1200 ]; do \
             sleep 0.05; n=$((n + 1)); done; kill $!; \
         grep -E ' [SC] (C[io]:1:002:0|Ii:1:002:1) ' mon | cut -d' ' -f3-",
    );
    assert_eq!(
        lines(&out, "enum"),
        ["/dev/hidraw0 0627:0001 QEMU|QEMU USB Keyboard|68284-0000:00:04.0-1 if=0 usage=0001:0006 bus=1"],
        "{out}"
    );
    // The reads are the reports of usbhid's interrupt URBs, one each, in
    // the order they completed after the open (usbmon's C lines).
    let reads: Vec<String> = lines(&out, "read")
        .iter()
        .map(|r| {
            let (n, bytes) = r.split_once(':').unwrap();
            assert_eq!(n, "8", "{out}");
            bytes.split_whitespace().collect()
        })
        .collect();
    assert_eq!(reads.len(), 4, "{out}");
    let urbs: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("C Ii:1:002:1 0:"))
        .filter_map(|l| Some(l.split_once(" = ")?.1.replace(' ', "")))
        .collect();
    assert!(urbs.windows(4).any(|w| w == reads.as_slice()), "{out}");
    assert_eq!(lines(&out, "write"), ["2"], "{out}");
    assert_eq!(lines(&out, "send_feature"), ["2"], "{out}");
    // GET_REPORT: qemu's keyboard answers with its keys whatever the type
    // (8 bytes), after the report ID hidraw keeps in byte 0.
    assert_eq!(lines(&out, "feature").len(), 1, "{out}");
    assert!(lines(&out, "feature")[0].starts_with("9: 00 "), "{out}");
    assert!(lines(&out, "input")[0].starts_with("3: 00 "), "{out}");
    // A character device (CUSE), or the mount's file bound there.
    let mode = if char_devices() {
        "crw-------"
    } else {
        "-rw-------"
    };
    assert!(out.contains(&format!("\n{mode}\n")), "{out}");
    // usbhid's URBs for them, as usb_control_msg makes them: SET_REPORT of
    // the output report (wValue 0x0200) and of the feature report
    // (0x0300), the ID of report 0 not sent; GET_REPORT of the feature
    // (wLength 8: the buffer less the ID byte) and of the input report.
    let ctl: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" s a1 01 ") || l.contains(" s 21 09 "))
        .collect();
    let want_tail = [
        "S Co:1:002:0 s 21 09 0200 0000 0001 1 = 02",
        "S Co:1:002:0 s 21 09 0300 0000 0001 1 = 01",
        "S Ci:1:002:0 s a1 01 0300 0000 0008 8 <",
        "S Ci:1:002:0 s a1 01 0100 0000 0002 2 <",
    ];
    assert_eq!(ctl, want_tail, "{out}");
}

#[test]
fn raw_calls_get_hidraws_answers_and_errnos_also_after_an_unplug() {
    let td = tempfile::tempdir().unwrap();
    compile_c("hidraw_hostile", td.path());
    let out = run(
        td.path(),
        "hidraw_hostile /dev/hidraw0 /sys/class/hidraw/hidraw0/device/report_descriptor; \
         hidraw_hostile --gone /dev/hidraw0 sh -c 'monfs ctl unplug --wait 1 1 >/dev/null'",
    );
    let got: Vec<&str> = out.lines().collect();
    let want = [
        "rdescsize 0",
        "size_is_sysfs_length 1",
        // HID_MAX_DESCRIPTOR_SIZE - 1 at most
        "rdesc_4096 -22",
        "rdesc_5 0",
        "rdesc_5_bytes 1",
        "rdesc_all 0",
        "rdesc_is_sysfs 1",
        "rawinfo 0",
        "info 3 0627 0001",
        "name 23 QEMU QEMU USB Keyboard",
        // cut to the buffer, without its NUL
        "name_4 4",
        "name_4_is QEMU",
        "phys 26 usb-0000:00:04.0-1/input0",
        "uniq 21 68284-0000:00:04.0-1",
        // reports of under 2 or over 16384 bytes
        "write_1 -22",
        "write_16385 -22",
        "gfeature_1 -22",
        "sfeature_1 -22",
        "gfeature_id_ff 8",
        "not_H -22",
        "H_write_name -22",
        "H_unknown -25",
        "read_0 0",
        "read_3 3",
        "poll 1",
        "poll_out 1",
        "opens 10000",
        "still_works 0",
        // after the unplug: what was queued, then EIO; POLLERR|POLLHUP;
        // ENODEV; the node is gone
        "read_after_unplug -5",
        "poll_err_hup 1",
        "ioctl_after_unplug -19",
        "write_after_unplug -19",
        "open_after_unplug -2",
    ];
    assert_eq!(got, want, "{out}");
}

#[test]
fn hid_and_hidraw_uevents_come_between_the_interfaces_add_and_bind() {
    let td = tempfile::tempdir().unwrap();
    let listen = common::repo_path("tests/data/uevent_listen.py");
    let out = run(
        td.path(),
        &format!(
            "/usr/bin/python3 {listen} 19 > ev & while [ ! -e ready ]; do sleep 0.05; done; \
         monfs ctl plug --wait 1 3 hid-mouse >/dev/null; ls /dev/hidraw*; \
         echo dev $(cat /sys/class/hidraw/hidraw1/dev); \
         monfs ctl unplug --wait 1 3 >/dev/null; ls /dev/hidraw*; wait; \
         grep -E '^(ACTION|DEVPATH|SUBSYSTEM|DRIVER|HID_|MODALIAS=hid|MAJOR|MINOR|DEVNAME=hid)' ev"
        ),
    );
    // hidraw's major: 244 for the mount's files, CUSE's for character
    // devices; sysfs and the uevents agree.
    let dev = lines(&out, "dev")[0];
    assert!(
        out.starts_with(&format!(
            "/dev/hidraw0\n/dev/hidraw1\ndev {dev}\n/dev/hidraw0\n"
        )),
        "{out}"
    );
    let (major, minor) = dev.split_once(':').unwrap();
    assert_eq!(minor, "1", "{out}");
    if !char_devices() {
        assert_eq!(major, "244", "{out}");
    }
    let events = common::uevent_lines(&out, "DRIVER");
    assert_eq!(
        events,
        [
            "add 1-3 usb -",
            "change 1-3 usb usb",
            "add 1-3:1.0 usb -",
            "add 0003:0627:0001.0002 hid -",
            "add input1 input -",
            "add event1 input -",
            "add hidraw1 hidraw -",
            "bind 0003:0627:0001.0002 hid hid-generic",
            "bind 1-3:1.0 usb usbhid",
            "bind 1-3 usb usb",
            "remove event1 input -",
            "remove input1 input -",
            "remove hidraw1 hidraw -",
            "unbind 0003:0627:0001.0002 hid -",
            "remove 0003:0627:0001.0002 hid -",
            "unbind 1-3:1.0 usb -",
            "remove 1-3:1.0 usb -",
            "unbind 1-3 usb -",
            "remove 1-3 usb -",
        ],
        "{out}"
    );
    // The HID device's variables, as hid_uevent gives them.
    for want in [
        "HID_ID=0003:00000627:00000001",
        "HID_NAME=QEMU QEMU USB Mouse",
        "HID_PHYS=usb-0000:00:04.0-3/input0",
        "HID_UNIQ=89126-0000:00:04.0-3",
        "MODALIAS=hid:b0003g0001v00000627p00000001",
        &format!("MAJOR={major}"),
        "MINOR=1",
        "DEVNAME=hidraw1",
    ] {
        assert!(out.lines().any(|l| l == want), "{want} in {out}");
    }
}

#[test]
fn python3_hid_takes_the_keyboard_from_usbhid_and_gives_it_back() {
    let td = tempfile::tempdir().unwrap();
    let py = "import hid\n\
              h = hid.device()\n\
              h.open(0x0627, 0x0001)\n\
              print('manufacturer', h.get_manufacturer_string())\n\
              print('read', len(h.read(8)))\n\
              print('write', h.write([0, 2]))\n\
              import os\n\
              print('hidraw while open', os.path.exists('/dev/hidraw0'))\n\
              h.close()\n";
    std::fs::write(td.path().join("t.py"), py).unwrap();
    let out = run(
        td.path(),
        "/usr/bin/python3 t.py; monfs ctl wait settled >/dev/null; \
         cat /sys/class/hidraw/hidraw0/device/uevent | grep HID_UNIQ; \
         basename $(readlink -f /sys/class/hidraw/hidraw0/device)",
    );
    assert_eq!(
        out,
        "manufacturer QEMU\nread 8\nwrite 2\nhidraw while open False\n\
         HID_UNIQ=68284-0000:00:04.0-1\n0003:0627:0001.0002\n"
    );
}

/// A HID device of your own: examples/hid_vendor.py (the Python package's
/// HidDevice peer) as an `external` device with numbered reports and an
/// interrupt OUT endpoint, driven by hidapi (tests/c/hidraw_vendor.c) and
/// by the package's hidraw reader: its input reports come in, the output
/// report goes through the OUT endpoint (usb_interrupt_msg), the feature
/// report by SET_REPORT and back by GET_REPORT, and the peer records what
/// it got; an ID it does not know stalls.
#[test]
fn a_python_hid_peer_of_your_own_driven_by_hidapi() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    compile_c_libs("hidraw_vendor", dir, &["-lhidapi-hidraw"]);
    let example = common::repo_path("examples/hid_vendor.py");
    let dump = dir.join("vendor.desc");
    common::peer_dump("examples/hid_vendor.py", &dump);
    let log = dir.join("got");
    let cfg = format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: Vendor HID\n          \
         serial: \"7\"\n          command: [/usr/bin/python3, {example}, --log, {}]\n",
        dump.display(),
        log.display()
    );
    let reader = "import sys; sys.path.insert(0, sys.argv[1])\n\
                  from monfs.hidraw import Hidraw, find\n\
                  with Hidraw(find(0x1209, 3)[0], numbered=True) as h:\n\
                  \x20   r = h.read_report()\n\
                  \x20   print('report', r.report_id, len(r.data), r.data[1:].hex())\n\
                  \x20   print('info', h.info(), h.name(), h.uniq())\n\
                  \x20   print('descriptor', len(h.report_descriptor()))\n\
                  \x20   print('set', h.set_feature(3, bytes(range(8))))\n\
                  \x20   print('get', h.get_feature(3, 8))\n";
    std::fs::write(dir.join("reader.py"), reader).unwrap();
    let out = monfs_run(
        dir,
        &cfg,
        &format!(
            "exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & hidraw_vendor; \
             /usr/bin/python3 reader.py {}; \
             n=0; until [ \"$(grep -c ' C Ci:1:002:0 ' mon)\" -ge 3 ] || [ $n = 1200 ]; do \
             sleep 0.05; n=$((n + 1)); done; kill $!; \
             grep -E ' S (Io|Co|Ci):1:002:' mon | cut -d' ' -f3-",
            common::repo_path("python")
        ),
    );
    // Input report 1: a counter, then 0x11s; two in a row.
    let reads = lines(&out, "read");
    assert_eq!(reads.len(), 2, "{out}");
    let counter = |r: &str| {
        let b: Vec<u8> = r
            .split_whitespace()
            .skip(1)
            .map(|x| u8::from_str_radix(x, 16).unwrap())
            .collect();
        assert_eq!((b[0], &b[2..]), (1, &[0x11u8; 7][..]), "{out}");
        b[1]
    };
    assert_eq!(
        counter(reads[1]),
        counter(reads[0]).wrapping_add(1),
        "{out}"
    );
    assert_eq!(lines(&out, "write"), ["9"], "{out}");
    assert_eq!(lines(&out, "send_feature"), ["9"], "{out}");
    assert_eq!(
        lines(&out, "feature"),
        ["9: 03 c0 c1 c2 c3 c4 c5 c6 c7"],
        "{out}"
    );
    assert_eq!(lines(&out, "feature_9"), ["-1"], "{out}");
    // The package's reader: a Report, the ids and strings, the descriptor.
    assert_eq!(
        lines(&out, "report")[0]
            .split(' ')
            .take(2)
            .collect::<Vec<_>>(),
        ["1", "8"],
        "{out}"
    );
    assert!(
        lines(&out, "report")[0].ends_with(" 11111111111111"),
        "{out}"
    );
    assert_eq!(
        lines(&out, "info"),
        ["HidrawInfo(bustype=3, vendor=4617, product=3) monfs Vendor HID 7"],
        "{out}"
    );
    assert_eq!(lines(&out, "descriptor"), ["53"], "{out}");
    assert_eq!(lines(&out, "set"), ["9"], "{out}");
    assert_eq!(
        lines(&out, "get"),
        ["Report(report_id=3, data=b'\\x00\\x01\\x02\\x03\\x04\\x05\\x06\\x07')"],
        "{out}"
    );
    // usbhid's URBs: the output report on the interrupt OUT endpoint, the
    // feature reports by SET_REPORT and GET_REPORT (ID 3 sent and asked).
    for want in [
        "S Io:1:002:2 -115:64 9 = 02a0a1a2 a3a4a5a6 a7",
        "S Co:1:002:0 s 21 09 0303 0000 0009 9 = 03c0c1c2 c3c4c5c6 c7",
        "S Ci:1:002:0 s a1 01 0303 0000 0010 16 <",
        "S Ci:1:002:0 s a1 01 0309 0000 0010 16 <",
    ] {
        assert!(out.lines().any(|l| l == want), "{want} in {out}");
    }
    // What the peer got, in order.
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "output 2 a0a1a2a3a4a5a6a7\nfeature 3 c0c1c2c3c4c5c6c7\nfeature 3 0001020304050607\n"
    );
}

/// An `external` keyboard taken from usbhid by python3-hid (hidapi's
/// libusb backend, which detaches usbhid) and given back: while the
/// program holds it, usbhid's URBs end (the peer is told) and every report
/// the peer gives goes to the program, in order; when it lets go, usbhid
/// probes the peer again (its boot keyboard's LED report reaches the peer
/// a second time) and hidraw comes back with the next HID device number.
#[test]
fn an_external_keyboard_taken_from_usbhid_gives_the_program_every_report() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let peer = common::repo_path("tests/data/hid_keyboard_peer.py");
    let dump = dir.join("kbd.desc");
    common::peer_dump("tests/data/hid_keyboard_peer.py", &dump);
    let (go, leds) = (dir.join("go"), dir.join("leds"));
    let cfg = format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: Test Keyboard\n          \
         serial: \"42\"\n          command: [/usr/bin/python3, {peer}, --go, {}, --log, {}]\n",
        dump.display(),
        go.display(),
        leds.display()
    );
    // The peer types once `go` exists: after the open, so that every
    // report is the program's to read. A report that never comes is an
    // empty read after the hang guard.
    let py = format!(
        "import hid\n\
         h = hid.device()\n\
         h.open(0x1209, 0x0004)\n\
         open({go:?}, 'w').close()\n\
         for _ in range(7):\n\
         \x20   print('read', bytes(h.read(8, {})).hex())\n\
         h.close()\n",
        common::HANG.as_millis()
    );
    std::fs::write(dir.join("t.py"), py).unwrap();
    let out = monfs_run(
        dir,
        &cfg,
        "exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         /usr/bin/python3 t.py; \
         n=0; until [ -e /sys/class/hidraw/hidraw0 ] && [ \"$(grep -c . leds)\" -ge 2 ] || \
         [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; \
         basename $(readlink -f /sys/class/hidraw/hidraw0/device); kill $!; \
         grep -cE ' S Ci:1:002:0 s 81 06 2200 ' mon",
    );
    // The script but its ErrorRollOver and last key up (7 of 9 reports),
    // none taken by usbhid.
    assert_eq!(
        lines(&out, "read"),
        [
            "0000040000000000",
            "0000000000000000",
            "02001a0000000000",
            "0200000000000000",
            "0000000000000000",
            "0000040500000000",
            "0000050000000000",
        ],
        "{out}"
    );
    let tail: Vec<&str> = out.lines().rev().take(2).collect();
    // usbhid's second probe (the first was before `mon` opened), and the
    // LED reports of both.
    assert_eq!(tail, ["1", "0003:1209:0004.0002"], "{out}");
    let leds = std::fs::read_to_string(&leds).unwrap_or_default();
    assert_eq!(leds.matches("output 0 00").count(), 2, "{leds}");
}
