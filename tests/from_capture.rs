//! `from-capture`: a device taken from a capture that monfs itself recorded
//! (`monfs record`'s engine on a mount with a HID keyboard), plugged on
//! another mount with `monfs ctl` and through the configuration; bad inputs
//! get clear errors and the daemon serves on.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Mount;
use monfs::capture::decode::Capture;
use monfs::capture::write::Format;
use monfs::cli::record::record_from_device;
use monfs::usbmon::event::{EventKind, XferType};

const EMPTY_BUS: &str = "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n";

/// The `usb/devices` block of the device with this product string, without
/// its T: line, its driver named as none.
fn block(text: &str, product: &str) -> Option<Vec<String>> {
    let b = text
        .split("\n\n")
        .find(|b| b.contains(&format!("S:  Product={product}\n")))?;
    let lines: Vec<String> = b
        .trim()
        .lines()
        .filter(|l| !l.starts_with("T:"))
        .map(|l| l.replace("Driver=usbhid", "Driver=(none)"))
        .collect();
    lines.iter().any(|l| l.starts_with("C:*")).then_some(lines)
}

fn wait_block(m: &Mount, product: &str) -> Vec<String> {
    let deadline = Instant::now() + common::HANG;
    loop {
        let t = m.sh_ok("cat usb/devices");
        if let Some(b) = block(&t, product) {
            return b;
        }
        assert!(
            Instant::now() < deadline,
            "{product} never configured:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Record bus 1 of a mount whose keyboard is plugged after recording
/// starts: the capture, the keyboard's address, its usb/devices block and
/// its interrupt IN reports in order.
fn record_keyboard(out: &Path) -> (u8, Vec<String>, Vec<Vec<u8>>) {
    let m = Mount::with_config(&format!(
        "{EMPTY_BUS}      devices:\n        - port: 2\n          kind: hid-keyboard\n          plug_after_ms: 700\n"
    ));
    record_from_device(
        &m.path("dev/usbmon1"),
        out,
        Some(Duration::from_millis(4000)),
        Format::PcapNg,
    )
    .unwrap();
    let blk = wait_block(&m, "QEMU USB Keyboard");
    let cap = Capture::load(out).unwrap();
    let dev = cap
        .events
        .iter()
        .find(|e| e.xfer == XferType::Interrupt && e.devnum != 1)
        .expect("keyboard reports in the recording")
        .devnum;
    let reports: Vec<Vec<u8>> = cap
        .events
        .iter()
        .filter(|e| {
            e.devnum == dev
                && e.xfer == XferType::Interrupt
                && e.kind == EventKind::Complete
                && e.status == 0
        })
        .map(|e| e.data.as_deref().unwrap().to_vec())
        .collect();
    assert!(reports.len() >= 4, "only {} reports", reports.len());
    (dev, blk, reports)
}

/// The data words of `1u` interrupt IN completions of device `dev`.
fn text_reports(text: &str, dev: u8) -> Vec<String> {
    let tag = format!(" C Ii:1:{dev:03}:1 0:");
    text.lines()
        .filter(|l| l.contains(&tag))
        .map(|l| l.split(" = ").nth(1).unwrap_or("").to_string())
        .collect()
}

fn words(b: &[u8]) -> String {
    b[..b.len().min(32)]
        .chunks(4)
        .map(|c| c.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn a_recorded_keyboard_answers_like_the_recording() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("kbd.pcapng");
    let (dev, want_block, reports) = record_keyboard(&rec);

    let m = Mount::with_config(EMPTY_BUS);
    let mut cat = Command::new("cat")
        .arg(m.path("usb/usbmon/1u"))
        .stdout(std::fs::File::create(dir.path().join("1u.txt")).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (ok, out) = m.ctl(&[
        "plug",
        "1",
        "3",
        "from-capture",
        rec.to_str().unwrap(),
        &dev.to_string(),
    ]);
    assert!(ok, "{out}");
    assert_eq!(wait_block(&m, "QEMU USB Keyboard"), want_block);
    // All the reports, in order, then the first ones again (looping).
    let want: Vec<String> = reports.iter().map(|r| words(r)).collect();
    let path = dir.path().join("1u.txt");
    let deadline = Instant::now() + Duration::from_secs(40);
    let got = loop {
        let text = std::fs::read_to_string(&path).unwrap();
        let got = text_reports(&text, 2);
        if got.len() >= want.len() + 2 {
            break got;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {} reports:\n{text}",
            got.len(),
            want.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let _ = cat.kill();
    let _ = cat.wait();
    assert_eq!(got[..want.len()], want[..]);
    assert_eq!(got[want.len()..want.len() + 2], want[..2]);

    // The same device through the configuration.
    let cfg = format!(
        "{EMPTY_BUS}      devices:\n        - port: 1\n          kind: from-capture\n          capture: {}\n          devaddr: {dev}\n",
        rec.display()
    );
    let m2 = Mount::with_config(&cfg);
    assert_eq!(wait_block(&m2, "QEMU USB Keyboard"), want_block);
    // sysfs names the driver usb/devices names.
    let link = std::fs::read_link(m2.path("sys/bus/usb/devices/1-1:1.0/driver")).unwrap();
    assert!(
        link.to_string_lossy().ends_with("/drivers/usbhid"),
        "{link:?}"
    );
    // A libusb program that takes it from usbhid and keeps four interrupt
    // IN transfers queued gets the recording's reports in submission order
    // (tests/c/usbfs_order.c; a replay answers whichever URB it has).
    let tool = common::compile_c_libs("usbfs_order", dir.path(), &["-lusb-1.0"]);
    let node = common::wait_node(&m2, &format!("dev/bus/usb/001/{:03}", 2));
    let out = common::stdout_ok(
        Command::new(&tool)
            .arg(&node)
            .args(["0", "0", "int-in", "81", "8", "4", "12"]),
        "usbfs_order int-in",
    );
    let count = |k: &str| -> f64 {
        out.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k} in {out}"))
            .parse()
            .unwrap()
    };
    assert_eq!(count("out_of_order"), 0.0, "{out}");
    assert_eq!(count("status_errors"), 0.0, "{out}");
    assert_eq!(count("bytes"), 96.0, "{out}");
}

#[test]
fn bad_captures_give_clear_errors_and_the_daemon_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let rec = dir.path().join("kbd.pcapng");
    let (dev, _, _) = record_keyboard(&rec);
    let bytes = std::fs::read(&rec).unwrap();
    // A capture cut in the middle of a block: pcapng blocks start at
    // multiples of 4, so an end at 3 past one never falls between two
    // (2/3 + 3 did when the recording's length made 2/3 a multiple of 4).
    let cut = dir.path().join("cut.pcapng");
    std::fs::write(&cut, &bytes[..bytes.len() * 2 / 3 / 4 * 4 + 3]).unwrap();
    // A capture that starts after enumeration: no descriptors.
    let late = dir.path().join("late.pcapng");
    {
        let m = Mount::with_config(&format!(
            "{EMPTY_BUS}      devices:\n        - port: 2\n          kind: hid-keyboard\n"
        ));
        wait_block(&m, "QEMU USB Keyboard");
        record_from_device(
            &m.path("dev/usbmon1"),
            &late,
            Some(Duration::from_millis(1500)),
            Format::PcapNg,
        )
        .unwrap();
    }
    let mut m = Mount::with_config(EMPTY_BUS);
    let plug = |file: &Path, addr: &str| {
        m.ctl(&[
            "plug",
            "1",
            "1",
            "from-capture",
            file.to_str().unwrap(),
            addr,
        ])
    };
    let (ok, e) = plug(&rec, "9");
    assert!(!ok && e.contains("no device with address 9"), "{e}");
    assert!(e.contains(&format!("1:{dev}")), "{e}");
    let (ok, e) = plug(&late, &dev.to_string());
    assert!(
        !ok && e.contains("no complete GET_DESCRIPTOR(DEVICE)"),
        "{e}"
    );
    let (ok, e) = plug(&cut, &dev.to_string());
    assert!(
        !ok && e.contains("byte offset") && e.contains("truncated"),
        "{e}"
    );
    let (ok, e) = plug(&dir.path().join("nope.pcap"), "2");
    assert!(!ok && e.contains("cannot open"), "{e}");
    let (ok, e) = m.ctl(&["plug", "1", "1", "from-capture", rec.to_str().unwrap(), "0"]);
    assert!(!ok && e.contains("devaddr"), "{e}");
    // Through the mount's control file there is no file to pass.
    let o = m.sh("echo 'plug 1 1 from-capture /tmp/x.pcap 2' > monfs/ctl");
    assert!(!o.status.success());
    // Still serving: a good plug works.
    let (ok, e) = plug(&rec, &dev.to_string());
    assert!(ok, "{e}");
    wait_block(&m, "QEMU USB Keyboard");
    assert!(m.alive());

    // check-config: field, line, column and the capture's problem.
    let check = |file: &Path, addr: &str| {
        let p = dir.path().join("c.yaml");
        std::fs::write(
            &p,
            format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: from-capture\n          capture: {}\n          devaddr: {addr}\n", file.display()),
        )
        .unwrap();
        common::check_config(&p)
    };
    let (code, e) = check(&late, &dev.to_string());
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("c.yaml:") && e.contains("devices[0].capture: "),
        "{e}"
    );
    assert!(e.contains("GET_DESCRIPTOR(DEVICE)"), "{e}");
    let (code, e) = check(&cut, &dev.to_string());
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("c.yaml:5:11: ") && e.contains("capture: ") && e.contains("byte offset "),
        "{e}"
    );
    let (code, e) = check(&rec, "200");
    assert_eq!(code, Some(2), "{e}");
    assert!(e.contains("devaddr must be 1..=127"), "{e}");
    let (code, e) = check(&rec, &dev.to_string());
    assert_eq!(code, Some(0), "{e}");
}
