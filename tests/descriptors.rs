//! `kind: descriptors`: a device built from a real device's sysfs
//! `descriptors` dump (tests/data/sysfs, read by a 6.12 kernel from qemu's
//! usb-kbd and usb-audio), through the real mount and `monfs check-config`.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Mount;

fn data(rel: &str) -> String {
    format!("{}/tests/data/sysfs/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// The `usb/devices` block of the device whose product is `product`, without
/// its T: line.
fn block(text: &str, product: &str) -> Option<Vec<String>> {
    let b = text
        .split("\n\n")
        .find(|b| b.contains(&format!("S:  Product={product}\n")))?;
    Some(
        b.trim()
            .lines()
            .filter(|l| !l.starts_with("T:"))
            .map(str::to_string)
            .collect(),
    )
}

/// The data of every control IN completion of device `dev` in a pcap file
/// of linktype 220 (64-byte usbmon headers), as far as it is written.
fn control_in_data(pcap: &[u8], dev: u8) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= pcap.len() {
        let incl = u32::from_le_bytes(pcap[at + 8..at + 12].try_into().unwrap()) as usize;
        let Some(p) = pcap.get(at + 16..at + 16 + incl) else {
            break;
        };
        at += 16 + incl;
        // event type 'C', transfer type 2 (control), endpoint 0x80.
        if p.len() >= 64 && p[8] == b'C' && p[9] == 2 && p[10] == 0x80 && p[11] == dev {
            let len_cap = u32::from_le_bytes(p[36..40].try_into().unwrap()) as usize;
            out.push(p[64..64 + len_cap.min(p.len() - 64)].to_vec());
        }
    }
    out
}

#[test]
fn device_from_a_dump_enumerates_with_its_bytes() {
    let yaml = format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {}\n          plug_after_ms: 1500\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          serial: 68284-0000:00:03.0-1\n        - port: 2\n          kind: descriptors\n          descriptors: {}\n          manufacturer: QEMU\n          product: QEMU USB Audio\n          serial: 1-0000:00:03.0-4.1\n",
        data("qemu-usb-kbd/descriptors"),
        data("qemu-usb-audio/descriptors"),
    );
    let m = Mount::with_config(&yaml);
    // Capture 1u, and bus 1 in full through GETX (`monfs record`), before
    // the keyboard is plugged.
    let rec_path = m.path("../rec.pcap");
    let mut rec = Command::new(common::monfs_bin())
        .arg("record")
        .arg(m.root())
        .args(["-b", "1", "-o"])
        .arg(&rec_path)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let cap = m.path("../cap.txt");
    let mut cat = Command::new("cat")
        .arg(m.path("usb/usbmon/1u"))
        .stdout(std::fs::File::create(&cap).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let kernel = std::fs::read_to_string(data("debugfs_usb_devices.txt")).unwrap();
    let deadline = Instant::now() + common::HANG;
    let devices = loop {
        let t = m.sh_ok("cat usb/devices");
        let done =
            block(&t, "QEMU USB Keyboard").is_some_and(|b| b.iter().any(|l| l.starts_with("C:*")));
        if done {
            break t;
        }
        assert!(Instant::now() < deadline, "keyboard never configured:\n{t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_millis(300));
    let _ = cat.kill();
    let _ = cat.wait();
    for product in ["QEMU USB Keyboard", "QEMU USB Audio"] {
        // No class driver binds to a device from a dump.
        let want: Vec<String> = block(&kernel, product)
            .unwrap()
            .into_iter()
            .map(|l| l.replace("Driver=usbhid", "Driver=(none)"))
            .collect();
        assert_eq!(block(&devices, product).unwrap(), want, "{devices}");
    }
    assert!(devices.contains("Dev#=  3 Spd=480 "), "{devices}");
    assert!(devices.contains("Dev#=  2 Spd=12 "), "{devices}");

    // The GET_DESCRIPTOR completions carry the dump's bytes (the text
    // interface keeps 32 of them).
    let dump = std::fs::read(data("qemu-usb-kbd/descriptors")).unwrap();
    let words = |b: &[u8]| {
        b[..b.len().min(32)]
            .chunks(4)
            .map(|c| c.iter().map(|x| format!("{x:02x}")).collect::<String>())
            .collect::<Vec<_>>()
            .join(" ")
    };
    let text = std::fs::read_to_string(&cap).unwrap();
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" Ci:1:003:0 "))
        .collect();
    let data_of = |len: usize| {
        lines
            .iter()
            .find(|l| l.contains(" C Ci:1:003:0 0 ") && l.contains(&format!(" 0 {len} = ")))
            .map(|l| l.split(" = ").nth(1).unwrap().to_string())
            .unwrap_or_else(|| panic!("no {len}-byte completion in\n{text}"))
    };
    assert_eq!(data_of(18), words(&dump[..18]));
    assert_eq!(data_of(9), words(&dump[18..27]));
    assert_eq!(data_of(34), words(&dump[18..]));
    // And in full: the binary interface keeps every byte (GETX, as `monfs
    // record` reads it), so the completions carry the dump exactly.
    let full = |want: &[u8]| {
        let deadline = Instant::now() + common::HANG;
        loop {
            let pcap = std::fs::read(&rec_path).unwrap_or_default();
            let got = control_in_data(&pcap, 3);
            if got.iter().any(|d| d == want) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no completion carries {want:02x?}; the recording has {got:02x?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    full(&dump[..18]);
    full(&dump[18..]);
    let _ = rec.kill();
    let _ = rec.wait();
    // Quiet after enumeration: ep0 only.
    assert!(
        !text.contains(":1:003:1"),
        "class traffic from a dump device:\n{text}"
    );
}

#[test]
fn bad_or_missing_dump_fails_check_config_with_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(data("qemu-usb-kbd/descriptors")).unwrap();
    bytes[31] = 2; // bNumEndpoints 2, one endpoint follows
    std::fs::write(dir.path().join("bad.bin"), &bytes).unwrap();
    let cfg = |file: &str| {
        let p = dir.path().join("c.yaml");
        std::fs::write(
            &p,
            format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {file}\n"),
        )
        .unwrap();
        common::check_config(&p)
    };
    // Relative to the config's directory.
    let (code, e) = cfg("bad.bin");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("c.yaml:5:"), "{e}");
    assert!(e.contains("usb.buses[0].devices"), "{e}");
    assert!(e.contains("bad.bin: byte offset 31: "), "{e}");
    assert!(e.contains("bNumEndpoints is 2 but 1"), "{e}");
    let (code, e) = cfg("missing.bin");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("missing.bin: No such file"), "{e}");
    std::fs::copy(
        data("qemu-usb-kbd/descriptors"),
        dir.path().join("good.bin"),
    )
    .unwrap();
    let (code, e) = cfg("good.bin");
    assert_eq!(code, Some(0), "{e}");
}

/// `speed:` sets the speed the device signals: the keyboard's dump
/// (bcdUSB 2.00, so high speed by default) plugged as a full-speed device
/// shows `Spd=12`; speeds its descriptors cannot have are config errors that
/// name the field and say why.
#[test]
fn speed_field_sets_the_port_speed_and_is_checked() {
    let yaml = |speed: &str| {
        format!(
            "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {}\n          speed: {speed}\n          product: Slow Keyboard\n",
            data("qemu-usb-kbd/descriptors")
        )
    };
    let m = Mount::with_config(&yaml("full"));
    let deadline = Instant::now() + common::HANG;
    let block = loop {
        let t = m.sh_ok("cat usb/devices");
        if let Some(b) = t
            .split("\n\n")
            .find(|b| b.contains("Product=Slow Keyboard"))
        {
            break b.to_string();
        }
        assert!(Instant::now() < deadline, "keyboard never appeared:\n{t}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(block.contains(" Spd=12 "), "{block}");

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.yaml");
    for (speed, why) in [
        ("low", "a low-speed device's ep0 is 8 bytes"),
        ("fast", "unknown variant `fast`"),
    ] {
        std::fs::write(&p, yaml(speed)).unwrap();
        let (code, e) = common::check_config(&p);
        assert_eq!(code, Some(2), "{e}");
        assert!(e.contains(why), "{speed}: {e}");
        assert!(e.contains("c.yaml:"), "{speed}: {e}");
    }
    let audio = format!(
        "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {}\n          speed: high\n",
        data("qemu-usb-audio/descriptors")
    );
    std::fs::write(&p, audio).unwrap();
    let (code, e) = common::check_config(&p);
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("devices[0].speed: high speed needs bcdUSB 2.00"),
        "{e}"
    );
}

/// Issue 37, finding 5: a `descriptors` file, from the configuration,
/// `monfs/ctl` or `monfs ctl`, is read by the capture-file rules: a regular
/// file of at most 1 MiB, never a device (/dev/zero), a FIFO (never waited
/// on, and never with the control lock held) or a symlink; the refusal
/// names the file and changes nothing, and later commands are served.
#[test]
fn descriptors_files_are_read_by_the_capture_file_rules() {
    let mut m = Mount::with_config("usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n");
    let dir = m.dir.path().to_path_buf();
    let good = dir.join("good.bin");
    std::fs::copy(data("qemu-usb-kbd/descriptors"), &good).unwrap();
    let fifo = dir.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let link = dir.join("link");
    std::os::unix::fs::symlink(&good, &link).unwrap();
    let big = dir.join("big.bin");
    let mut bytes = std::fs::read(&good).unwrap();
    bytes.resize((1 << 20) + 1, 0);
    std::fs::write(&big, &bytes).unwrap();
    let cases = [
        ("/dev/zero", "not a regular file"),
        (fifo.to_str().unwrap(), "not a regular file"),
        (link.to_str().unwrap(), "symbolic links"),
        (big.to_str().unwrap(), "1048576-byte limit"),
    ];
    for (file, why) in cases {
        // Through monfs/ctl (the daemon opens the path; `timeout` only
        // detects a hang) ...
        let o = m.sh(&format!(
            "timeout 20 bash -c 'echo \"plug 1 2 descriptors descriptors={file}\" > monfs/ctl'"
        ));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("Invalid argument"),
            "{file}: {err}\n{}",
            m.log_text()
        );
        assert!(m.log_text().contains(why), "{file}: no {why:?} in the log");
        // ... and through monfs ctl (the client opens FILE, the daemon
        // reads the descriptor it passed, by the same rules).
        // A symlink is followed there, with the caller's rights, as a shell
        // would: the daemon opened nothing.
        let (ok, out) = m.ctl(&[
            "plug",
            "1",
            "2",
            "descriptors",
            &format!("descriptors={file}"),
        ]);
        if file == link.to_str().unwrap() {
            assert!(ok, "{file}: {out}");
            let (ok, out) = m.ctl(&["unplug", "1", "2"]);
            assert!(ok, "{out}");
            continue;
        }
        assert!(!ok, "{file}: {out}");
        assert!(out.contains(why), "{file}: {out}");
    }
    // The configuration's `descriptors:` too (check-config reads them as
    // the daemon does).
    for (file, why) in cases {
        let p = dir.join("c.yaml");
        std::fs::write(
            &p,
            format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {file}\n"),
        )
        .unwrap();
        let (code, e) = common::check_config(&p);
        assert_eq!(code, Some(2), "{file}: {e}");
        assert!(e.contains(why), "{file}: {e}");
    }
    // The good file plugs.
    let (ok, out) = m.ctl(&[
        "plug",
        "1",
        "3",
        "descriptors",
        &format!("descriptors={}", good.display()),
    ]);
    assert!(ok, "{out}");
    assert!(m.alive());
}

/// qemu's usb-kbd report descriptor (63 bytes), which its dump lacks.
const KBD_REPORT: &str = "05010906a101750195080507 19e029e715002501810295017508810195057501\
    0508190129059102950175039101950675081500 25ff0507190029ff8100c0";

/// A dump's HID interface with `report_descriptors` binds usbhid: its
/// probe reads the configured descriptor, and hidraw, the HID device and
/// an input device come; a dump's interface without one binds nothing.
#[test]
fn a_dump_with_a_report_descriptor_binds_usbhid() {
    let yaml = format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {}\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          report_descriptors:\n            0: \"{KBD_REPORT}\"\n        - port: 2\n          kind: descriptors\n          descriptors: {}\n",
        data("qemu-usb-kbd/descriptors"),
        data("qemu-usb-kbd/descriptors"),
    );
    let m = Mount::with_config(&yaml);
    let rd = m.path("sys/class/hidraw/hidraw0/device/report_descriptor");
    let deadline = Instant::now() + common::HANG;
    while !rd.exists() {
        assert!(Instant::now() < deadline, "no hidraw0");
        std::thread::sleep(Duration::from_millis(20));
    }
    let hex: String = std::fs::read(&rd)
        .unwrap()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(hex, KBD_REPORT.replace(' ', ""));
    assert!(m.path("dev/hidraw0").exists());
    assert!(!m.path("sys/class/hidraw/hidraw1").exists());
    // A keyboard to the input core: EV_SYN, EV_KEY, EV_MSC, EV_LED, EV_REP.
    let ev = m.sh_ok("cat sys/class/input/input*/capabilities/ev");
    assert_eq!(ev, "120013\n");
    // usbhid on the configured interface only (once both are configured).
    let devices = loop {
        let t = m.sh_ok("cat usb/devices");
        if t.matches("I:* If#= 0 Alt= 0 #EPs= 1 Cls=03(HID  )").count() == 2 {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "the second dump never configured:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(devices.matches("Driver=usbhid").count(), 1, "{devices}");
    assert_eq!(
        devices.matches("Prot=01 Driver=(none)").count(),
        1,
        "{devices}"
    );

    // The entry must be for a HID interface and as long as its HID
    // descriptor says.
    let dir = tempfile::tempdir().unwrap();
    for (entry, why) in [
        (
            format!("0: \"{}\"", &KBD_REPORT.replace(' ', "")[2..]),
            "report_descriptors.0: 62 bytes, but the interface's HID descriptor says 63",
        ),
        (
            format!("1: \"{KBD_REPORT}\""),
            "report_descriptors.1: interface 1 of the descriptors file has no HID descriptor",
        ),
    ] {
        let p = dir.path().join("c.yaml");
        std::fs::write(
            &p,
            format!(
                "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {}\n          report_descriptors: {{{entry}}}\n",
                data("qemu-usb-kbd/descriptors")
            ),
        )
        .unwrap();
        let (code, e) = common::check_config(&p);
        assert_eq!(code, Some(2), "{e}");
        assert!(e.contains(why), "{e}");
        assert!(
            e.contains("c.yaml:5:11: usb.buses[0].devices[0].report_descriptors."),
            "{e}"
        );
    }
}
