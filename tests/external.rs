//! `kind: external`: a device whose descriptors come from the kernel VM's
//! usb-kbd dump and whose transfers a peer process answers (the examples
//! in examples/), through the real mount, `cat 1u`, tcpdump and tshark.

mod common;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{tcpdump, Mount};

fn root(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// Bus 1: the external keyboard on port 1 (plugged after `plug_ms`), a
/// simulated mouse on port 2.
fn config(command: &[&str], plug_ms: u64) -> String {
    let cmd: Vec<String> = command.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          serial: \"42\"\n          plug_after_ms: {plug_ms}\n          command: [{}]\n        - port: 2\n          kind: hid-mouse\n",
        root("tests/data/sysfs/qemu-usb-kbd/descriptors"),
        cmd.join(", ")
    )
}

/// `cat 1u` into a file beside the mount.
fn cat_1u(m: &Mount) -> (Child, std::path::PathBuf) {
    let cap = m.path("../1u.txt");
    let cat = Command::new("cat")
        .arg(m.path("usb/usbmon/1u"))
        .stdout(std::fs::File::create(&cap).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    (cat, cap)
}

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + common::HANG;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The keyboard's device number: the one whose serial number (string 11 in
/// the usb-kbd dump) is read.
fn kbd_devnum(text: &str) -> Option<String> {
    let l = text
        .lines()
        .find(|l| l.contains(" S Ci:1:") && l.contains("s 80 06 030b 0409 00ff"))?;
    Some(l.split(' ').nth(3)?.split(':').nth(2)?.to_string())
}

/// The data of the keyboard's successful interrupt IN completions, in order.
fn reports(text: &str, dev: &str) -> Vec<String> {
    let tag = format!(" C Ii:1:{dev}:1 0:64 8 = ");
    text.lines()
        .filter_map(|l| l.split_once(&tag).map(|(_, d)| d.to_string()))
        .collect()
}

/// Key down and key up for each usage.
fn expected(usages: &[u8]) -> Vec<String> {
    usages
        .iter()
        .flat_map(|u| {
            [
                format!("0000{u:02x}00 00000000"),
                "00000000 00000000".into(),
            ]
        })
        .collect()
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

#[test]
fn python_keyboard_types_into_1u_tcpdump_and_tshark() {
    let py = root("examples/hid_keyboard.py");
    // Plugged once tcpdump runs, so the capture has the enumeration and
    // tshark knows the interface is HID.
    let m = Mount::with_config(&config(&["python3", &py, "hi\n"], 2500));
    let (mut cat, cap) = cat_1u(&m);
    let pcap = m.path("../kbd.pcap");
    tcpdump(&m, "usbmon1", 6, &pcap);
    let want = expected(&[0x0b, 0x0c, 0x28]);
    let text = wait_for("the keystrokes in 1u", || {
        let t = read(&cap);
        let dev = kbd_devnum(&t)?;
        (reports(&t, &dev).len() >= want.len()).then_some(t)
    });
    let _ = cat.kill();
    let _ = cat.wait();
    let dev = kbd_devnum(&text).unwrap();
    assert_eq!(reports(&text, &dev), want, "1u:\n{text}");
    assert!(
        m.log_text()
            .contains("hid_keyboard.py: plugged on bus 1 port 1"),
        "{}",
        m.log_text()
    );

    // tcpdump saw the same reports: the URB completions carry them.
    let o = Command::new("tshark")
        .args(["-V", "-r"])
        .arg(&pcap)
        .output()
        .expect("run tshark (apt-get install tshark)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = String::from_utf8_lossy(&o.stdout);
    assert!(!v.contains("Malformed"), "tshark:\n{v}");
    assert!(
        v.contains("USB HID") || v.contains("HID Data"),
        "tshark does not decode HID:\n{v}"
    );
    for u in ["0b", "0c", "28"] {
        let key = format!("0000{u}0000000000");
        let hit = Command::new("tshark")
            .args(["-r"])
            .arg(&pcap)
            .args(["-T", "fields", "-e", "usbhid.data", "-e", "usb.capdata"])
            .output()
            .unwrap();
        let f = String::from_utf8_lossy(&hit.stdout).replace(':', "");
        assert!(f.contains(&key), "no report {key} in the capture:\n{f}");
    }
}

#[test]
fn c_keyboard_types_into_1u() {
    let dir = tempfile::tempdir().unwrap();
    let bin = common::compile_c("hid_keyboard", dir.path());
    let m = Mount::with_config(&config(&[bin.to_str().unwrap(), "ab1\n"], 0));
    let (mut cat, cap) = cat_1u(&m);
    let want = expected(&[0x04, 0x05, 0x1e, 0x28]);
    let text = wait_for("the C keyboard's keystrokes", || {
        let t = read(&cap);
        let dev = kbd_devnum(&t)?;
        (reports(&t, &dev).len() >= want.len()).then_some(t)
    });
    let _ = cat.kill();
    let _ = cat.wait();
    let dev = kbd_devnum(&text).unwrap();
    assert_eq!(reports(&text, &dev), want, "1u:\n{text}");
}

/// Wait for the keyboard to leave `usb/devices`, then check the mouse on
/// the same bus still completes URBs after the keyboard's last event.
fn unplugged_and_bus_runs_on(m: &Mount, cap: &Path, dev: &str) -> String {
    wait_for("the keyboard to leave usb/devices", || {
        (!m.sh_ok("cat usb/devices")
            .contains("Product=QEMU USB Keyboard"))
        .then_some(())
    });
    wait_for("mouse events after the unplug", || {
        let t = read(cap);
        let lines: Vec<&str> = t.lines().collect();
        let last_kbd = lines
            .iter()
            .rposition(|l| l.contains(&format!(":1:{dev}:")))?;
        let mouse_after = lines[last_kbd..]
            .iter()
            .filter(|l| l.contains(" C Ii:1:") && !l.contains(&format!(":1:{dev}:")))
            .count();
        (mouse_after >= 5).then_some(t)
    })
}

#[test]
fn killing_the_peer_unplugs_the_device_and_the_bus_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let script = format!(
        "echo $$ > {}; exec python3 {} {}",
        pidfile.display(),
        root("examples/hid_keyboard.py"),
        "abcdefghijklmnopqrstuvwxyz".repeat(20)
    );
    let m = Mount::with_config(&config(&["sh", "-c", &script], 0));
    let (mut cat, cap) = cat_1u(&m);
    // Mid-transfer: it is typing, and its interrupt URB is in flight.
    let dev = wait_for("typing", || {
        let t = read(&cap);
        let dev = kbd_devnum(&t)?;
        (reports(&t, &dev).len() >= 4).then_some(dev)
    });
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: killing the peer this test started through monfs.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let text = unplugged_and_bus_runs_on(&m, &cap, &dev);
    let _ = cat.kill();
    let _ = cat.wait();
    // The in-flight interrupt URB ends with -71 (EPROTO), as at an unplug,
    // and nothing of the keyboard's completes normally afterwards.
    let kbd: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!(":1:{dev}:")))
        .collect();
    let proto = kbd
        .iter()
        .position(|l| l.contains(&format!(" C Ii:1:{dev}:1 -71:64 0")))
        .unwrap_or_else(|| panic!("no -71 completion:\n{}", kbd.join("\n")));
    assert!(
        kbd[proto + 1..].iter().all(|l| !l.contains(" 0:64 8 =")),
        "{}",
        kbd.join("\n")
    );
    let log = m.log_text();
    assert!(
        log.contains("usb bus 1 port 1: external device's peer closed its output"),
        "{log}"
    );
}

#[test]
fn a_peer_answering_garbage_is_unplugged() {
    // It answers its first URB with nonsense, then idles.
    let script = "read l; read l; echo 'complete x 0 0'; sleep 60";
    let m = Mount::with_config(&config(&["sh", "-c", script], 0));
    let (mut cat, cap) = cat_1u(&m);
    let dev = wait_for("the keyboard's enumeration", || kbd_devnum(&read(&cap)));
    unplugged_and_bus_runs_on(&m, &cap, &dev);
    let _ = cat.kill();
    let _ = cat.wait();
    let log = m.log_text();
    assert!(
        log.contains(
            "usb bus 1 port 1: external device's peer answered garbage (bad id): \"complete x 0 0\""
        ),
        "{log}"
    );
}
