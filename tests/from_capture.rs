//! `from-capture`: a device taken from a capture that monfs itself recorded
//! (`monfs record`'s engine on a mount with a HID keyboard), plugged on
//! another mount with `monfs ctl` and through the configuration; usbhid
//! binds it with the recorded report descriptor, so inside `monfs run`
//! hidraw gives the recorded reports and python3-evdev the keys they
//! press; bad inputs get clear errors and the daemon serves on.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{lines, monfs_run, Mount};
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
    // usbhid's probe after SET_CONFIGURATION, answered as the recording
    // answered it: the serial number, SET_IDLE, the report descriptor and
    // the keyboard's LEDs (before its interrupt URB, checked below).
    let text = std::fs::read_to_string(&path).unwrap();
    let ep0: Vec<String> = text
        .lines()
        .map(|l| l.split(' ').skip(2).collect::<Vec<_>>().join(" "))
        .filter(|l| l.contains(":1:002:") && !l.contains(" Ii:"))
        .collect();
    let from = ep0
        .iter()
        .position(|l| l.starts_with("S Co:1:002:0 s 00 09 0001 "))
        .unwrap_or_else(|| panic!("no SET_CONFIGURATION:\n{text}"));
    let probe: Vec<&str> = ep0[from + 2..]
        .iter()
        .map(String::as_str)
        .filter(|l| !l.starts_with("S Ci:1:002:0 s 80 06 03") && !l.starts_with("C Ci:1:002:0 0 "))
        .take(5)
        .collect();
    assert_eq!(
        probe,
        [
            "S Co:1:002:0 s 21 0a 0000 0000 0000 0",
            "C Co:1:002:0 0 0",
            "S Ci:1:002:0 s 81 06 2200 0000 003f 63 <",
            "S Co:1:002:0 s 21 09 0200 0000 0001 1 = 00",
            "C Co:1:002:0 0 1 >",
        ],
        "{text}"
    );
    assert!(
        ep0.iter().any(|l| {
            l
            == "C Ci:1:002:0 0 63 = 05010906 a1017501 95080507 19e029e7 15002501 81029501 75088101 \
                95057501"
        }),
        "{text}"
    );
    let at = |p: &str| text.find(p).unwrap_or_else(|| panic!("{p} in {text}"));
    assert!(at(" C Co:1:002:0 0 1 >") < at(" S Ii:1:002:1 "), "{text}");

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

/// python3-evdev and hidraw on the keyboard from the capture, inside
/// `monfs run`: the evdev node and the hidraw node found through sysfs by
/// the keyboard's name, the report descriptor read from sysfs, then each
/// raw report read from hidraw and each key event (`code:value`, key
/// repeats left out) read from evdev, until enough of both came.
const CAPTURE_READER: &str = r#"
import glob, os, select, sys, time
import evdev
from evdev import ecodes as e
name = 'QEMU QEMU USB Keyboard'
for _ in range(200):
    evs = [p for p in sorted(glob.glob('/sys/class/input/event*'))
           if open(p + '/device/name').read().strip() == name]
    raws = [p for p in sorted(glob.glob('/sys/class/hidraw/hidraw*'))
            if 'HID_NAME=' + name in open(p + '/device/uevent').read()]
    if evs and raws:
        break
    time.sleep(0.05)
print('nodes', len(evs), len(raws))
print('rdesc', open(raws[0] + '/device/report_descriptor', 'rb').read().hex())
print('driver', os.path.basename(os.readlink('/sys/bus/usb/devices/1-1:1.0/driver')))
dev = evdev.InputDevice('/dev/input/' + os.path.basename(evs[0]))
print('evname', dev.name)
print('haskeys', e.KEY_H in dev.capabilities()[e.EV_KEY])
raw = os.open('/dev/' + os.path.basename(raws[0]), os.O_RDONLY)
nraw, nkey = 0, 0
deadline = time.time() + 40
while (nraw < 12 or nkey < 8) and time.time() < deadline:
    r, _, _ = select.select([dev.fd, raw], [], [], 5)
    if raw in r:
        print('raw', os.read(raw, 64).hex())
        nraw += 1
    if dev.fd in r:
        for ev in dev.read():
            if ev.type == e.EV_KEY and ev.value != 2:
                print('key %d:%d' % (ev.code, ev.value))
                nkey += 1
"#;

/// hid-input's key code of a boot keyboard's usage (the built-in keyboard's
/// text: letters, space, Enter).
fn key_code(usage: u8) -> u16 {
    const LETTERS: [u16; 26] = [
        30, 48, 46, 32, 18, 33, 34, 35, 23, 36, 37, 38, 50, 49, 24, 25, 16, 19, 31, 20, 22, 47, 17,
        45, 21, 44,
    ];
    match usage {
        4..=29 => LETTERS[usage as usize - 4],
        0x28 => 28,
        0x2c => 57,
        0x37 => 52,
        u => panic!("usage {u:#x} not in the table"),
    }
}

/// Whether `got` is a run of the endless repetition of `cycle`.
fn in_cycle<T: PartialEq>(got: &[T], cycle: &[T]) -> bool {
    (0..cycle.len()).any(|s| {
        got.iter()
            .enumerate()
            .all(|(i, g)| *g == cycle[(s + i) % cycle.len()])
    })
}

#[test]
fn a_recorded_keyboard_types_through_hidraw_and_evdev_under_monfs_run() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let rec = dir.join("kbd.pcapng");
    let (dev, _, reports) = record_keyboard(&rec);
    // The report descriptor usbhid read in the recording.
    let cap = Capture::load(&rec).unwrap();
    // (usbmon tags are reused: the completion is the next one of the tag)
    let asked = cap
        .events
        .iter()
        .position(|e| e.devnum == dev && e.setup.is_some_and(|s| s[0] == 0x81 && s[3] == 0x22))
        .expect("usbhid's GET_DESCRIPTOR(REPORT) in the recording");
    let rdesc = cap.events[asked..]
        .iter()
        .find(|e| e.id == cap.events[asked].id && e.kind == EventKind::Complete)
        .and_then(|e| e.data.as_deref())
        .unwrap()
        .to_vec();
    assert_eq!(rdesc.len(), 63);

    std::fs::write(dir.join("reader.py"), CAPTURE_READER).unwrap();
    let cfg = format!(
        "{EMPTY_BUS}      devices:
        - port: 1
          kind: from-capture
          capture: {}
          devaddr: {dev}
",
        rec.display()
    );
    let out = monfs_run(dir, &cfg, "/usr/bin/python3 reader.py");
    assert_eq!(lines(&out, "nodes"), ["1 1"], "{out}");
    assert_eq!(lines(&out, "driver"), ["usbhid"], "{out}");
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    assert_eq!(lines(&out, "rdesc"), [hex(&rdesc)], "{out}");
    assert_eq!(lines(&out, "evname"), ["QEMU QEMU USB Keyboard"], "{out}");
    assert_eq!(lines(&out, "haskeys"), ["True"], "{out}");

    // hidraw: the recorded reports as they were, in recorded order (from
    // wherever in the looping recording the reader came in).
    let raw = lines(&out, "raw");
    assert!(raw.len() >= 12, "{out}");
    let cycle: Vec<String> = reports.iter().map(|r| hex(r)).collect();
    let raw: Vec<String> = raw.iter().map(|s| s.to_string()).collect();
    assert!(
        in_cycle(&raw, &cycle),
        "{raw:?} in the recording's {cycle:?}"
    );

    // evdev: the keys the reports press and release, in order (released
    // before pressed, as hid-input sends them).
    let mut keys_cycle: Vec<String> = vec![];
    for i in 0..reports.len() {
        let prev = &reports[(i + reports.len() - 1) % reports.len()];
        let cur = &reports[i];
        assert_eq!((prev[0], cur[0]), (0, 0), "no modifiers in the typing");
        let held = |r: &Vec<u8>| -> Vec<u8> { r[2..].iter().copied().filter(|&u| u > 1).collect() };
        let (p, c) = (held(prev), held(cur));
        for u in p.iter().filter(|u| !c.contains(u)) {
            keys_cycle.push(format!("{}:0", key_code(*u)));
        }
        for u in c.iter().filter(|u| !p.contains(u)) {
            keys_cycle.push(format!("{}:1", key_code(*u)));
        }
    }
    let keys: Vec<String> = lines(&out, "key").iter().map(|s| s.to_string()).collect();
    assert!(keys.len() >= 8, "{out}");
    assert!(
        in_cycle(&keys, &keys_cycle),
        "{keys:?} in the recording's {keys_cycle:?}"
    );
    // Real typing: presses of more than one key (KEY_H and the others).
    assert!(
        keys.iter().filter(|k| k.ends_with(":1")).count() >= 4,
        "{out}"
    );
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
