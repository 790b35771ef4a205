//! `kind: external`: a device whose descriptors come from the kernel VM's
//! usb-kbd dump and whose transfers a peer process answers (the examples
//! in examples/), through the real mount, `cat 1u`, tcpdump and tshark.

mod common;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common::{cat_1u, descriptors_dump, repo_path, tcpdump, Mount};

/// Bus 1: the external keyboard on port 1 (plugged after `plug_ms`), a
/// simulated mouse on port 2.
fn config(command: &[&str], plug_ms: u64) -> String {
    let cmd: Vec<String> = command.iter().map(|a| format!("{a:?}")).collect();
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          serial: \"42\"\n          plug_after_ms: {plug_ms}\n          command: [{}]\n        - port: 2\n          kind: hid-mouse\n",
        repo_path("tests/data/sysfs/qemu-usb-kbd/descriptors"),
        cmd.join(", ")
    )
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

/// Wait until `cap` (a copy of `1u`) holds the keyboard's `want` reports
/// (`what` names them in a hang); returns the text.
fn typed(cap: &Path, want: &[String], what: &str) -> String {
    wait_for(what, || {
        let t = read(cap);
        let dev = kbd_devnum(&t)?;
        (reports(&t, &dev).len() >= want.len()).then_some(t)
    })
}

/// SIGKILL the peer whose pid it wrote to `pidfile`.
fn kill_peer(pidfile: &Path) {
    signal_peer(pidfile, libc::SIGKILL);
}

/// Send `sig` to the peer whose pid it wrote to `pidfile`.
fn signal_peer(pidfile: &Path, sig: i32) {
    let pid: i32 = std::fs::read_to_string(pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signalling the peer this test started through monfs.
    assert_eq!(unsafe { libc::kill(pid, sig) }, 0);
}

/// The address of the device with isochronous IN URBs in `t` (a copy of
/// `1u`): the third field of its first `S Zi` line's `Zi:1:ADDR:EP`.
fn iso_devnum(t: &str) -> Option<String> {
    let l = t.lines().find(|l| l.contains(" S Zi:1:"))?;
    Some(l.split(' ').nth(3)?.split(':').nth(2)?.to_string())
}

fn read(p: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned()
}

#[test]
fn python_keyboard_types_into_1u_tcpdump_and_tshark() {
    let py = repo_path("examples/hid_keyboard.py");
    // Plugged once tcpdump runs, so the capture has the enumeration and
    // tshark knows the interface is HID.
    let m = Mount::with_config(&config(&["python3", &py, "hi\n"], 2500));
    let (mut cat, cap) = cat_1u(&m);
    let pcap = m.path("../kbd.pcap");
    tcpdump(&m, "usbmon1", 6, &pcap);
    let want = expected(&[0x0b, 0x0c, 0x28]);
    let text = typed(&cap, &want, "the keystrokes in 1u");
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
    let text = typed(&cap, &want, "the C keyboard's keystrokes");
    let _ = cat.kill();
    let _ = cat.wait();
    let dev = kbd_devnum(&text).unwrap();
    assert_eq!(reports(&text, &dev), want, "1u:\n{text}");
    // usbhid is bound to the keyboard's interface, as the kernel binds it.
    let devices = m.sh_ok("cat usb/devices");
    assert!(
        devices.contains("I:* If#= 0 Alt= 0 #EPs= 1 Cls=03(HID  ) Sub=01 Prot=01 Driver=usbhid"),
        "{devices}"
    );
}

/// Wait for the keyboard to leave `usb/devices`, then check the mouse on
/// the same bus still completes URBs after the keyboard's last event.
fn unplugged_and_bus_runs_on(m: &Mount, cap: &Path, dev: &str) -> String {
    unplugged_with_bus_running(m, cap, dev, "QEMU USB Keyboard")
}

/// Wait for the device whose product is `product` (address `dev`) to leave
/// `usb/devices`, then for 5 mouse completions after its last event in
/// `cap` (a copy of `1u`); returns that text.
fn unplugged_with_bus_running(m: &Mount, cap: &Path, dev: &str, product: &str) -> String {
    wait_for("the device to leave usb/devices", || {
        (!m.sh_ok("cat usb/devices")
            .contains(&format!("Product={product}")))
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
        repo_path("examples/hid_keyboard.py"),
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
    kill_peer(&pidfile);
    let text = unplugged_and_bus_runs_on(&m, &cap, &dev);
    let _ = cat.kill();
    let _ = cat.wait();
    // The in-flight interrupt URB fails as at an unplug: -71 (EPROTO) from
    // the controller, or -108 (ESHUTDOWN) if the hub driver's disconnect
    // comes first; both orders happen in the kernel, and in the simulator
    // the delays are drawn from the seed. Nothing of the keyboard's
    // completes normally afterwards. Rarely the peer dies in the few µs
    // between a completion and the next submission; then nothing is in
    // flight, and the keyboard's last line is that normal completion (never
    // a submission left without an end).
    let kbd: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!(":1:{dev}:")))
        .collect();
    let failed = kbd.iter().position(|l| {
        l.contains(&format!(" C Ii:1:{dev}:1 -71:64 0"))
            || l.contains(&format!(" C Ii:1:{dev}:1 -108:64 0"))
    });
    match failed {
        Some(at) => assert!(
            kbd[at + 1..].iter().all(|l| !l.contains(" 0:64 8 =")),
            "{}",
            kbd.join("\n")
        ),
        None => assert!(
            kbd.last()
                .is_some_and(|l| l.contains(&format!(" C Ii:1:{dev}:1 0:64 8 ="))),
            "no -71 or -108 completion, and an URB was in flight:\n{}",
            kbd.join("\n")
        ),
    }
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

/// A high-speed vendor device: interface 0 with bulk IN 0x81 and bulk OUT
/// 0x02, interface 1 whose setting 1 has isochronous IN 0x83 (256 bytes a
/// packet) and OUT 0x04 (64 bytes), both bInterval 4 (a packet per frame).
fn iso_dump() -> Vec<u8> {
    let dev = [
        18, 1, 0, 2, 0xff, 0, 0, 64, 0x34, 0x12, 0x78, 0x56, 1, 0, 1, 2, 0, 1,
    ];
    let rest: [u8; 55] = [
        9, 4, 0, 0, 2, 0xff, 0, 0, 0, // interface 0
        7, 5, 0x81, 2, 0, 2, 0, // bulk IN, 512
        7, 5, 0x02, 2, 0, 2, 0, // bulk OUT, 512
        9, 4, 1, 0, 0, 0xff, 0, 0, 0, // interface 1, setting 0: no endpoints
        9, 4, 1, 1, 2, 0xff, 0, 0, 0, // setting 1
        7, 5, 0x83, 5, 0, 1, 4, // isochronous IN, 256, async
        7, 5, 0x04, 5, 64, 0, 4, // isochronous OUT, 64, async
    ];
    descriptors_dump(&dev, 2, &rest)
}

/// Bus 1: the device of [`iso_dump`] answered by examples/iso_loopback.py
/// (its pid in `pidfile`, its input lines in `log`), a mouse on port 2.
fn iso_config(dir: &Path, pidfile: &Path, log: &Path) -> String {
    let desc = dir.join("iso.desc");
    std::fs::write(&desc, iso_dump()).unwrap();
    let script = format!(
        "echo $$ > {}; exec python3 {} {}",
        pidfile.display(),
        repo_path("examples/iso_loopback.py"),
        log.display()
    );
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: ISO loop\n          command: [sh, -c, {script:?}]\n          endpoints:\n            - {{ep: 0x81, length: 64, timeout_ms: 20}}\n            - {{ep: 0x02, data: \"0102030405\", every_ms: 10}}\n            - {{ep: 0x83, packets: 8, urbs: 3}}\n            - {{ep: 0x04, packets: 4, data: aa55}}\n        - port: 2\n          kind: hid-mouse\n",
        desc.display()
    )
}

#[test]
fn iso_and_out_peer_answers_in_1u_and_killing_it_unplugs() {
    let dir = tempfile::tempdir().unwrap();
    let (pidfile, log) = (dir.path().join("pid"), dir.path().join("peer.log"));
    let m = Mount::with_config(&iso_config(dir.path(), &pidfile, &log));
    let (mut cat, cap) = cat_1u(&m);
    // The peer's ISO IN answer: packets of 4, 5, (CRC error), 7, 8 ...
    // bytes at offsets 0, 256, ...; one error; 8 descriptors, 5 shown.
    let zi = " 0:8 8 0:0:4 0:256:5 -84:512:0 0:768:7 0:1024:8 2048 = ";
    let (text, dev) = wait_for("ISO, OUT and discarded URBs in 1u", || {
        let t = read(&cap);
        let dev = iso_devnum(&t)?;
        let has = |pat: &str| t.lines().filter(|l| l.contains(pat)).count();
        let zi_ok = t
            .lines()
            .filter(|l| l.contains(&format!(" C Zi:1:{dev}:3 0:8:")) && l.contains(":1 8 0:0:4 "))
            .count();
        let ok = zi_ok >= 3
            && has(&format!(" C Zo:1:{dev}:4 0:8:")) >= 3
            && has(&format!(" C Bo:1:{dev}:2 0 5 >")) >= 2
            && has(&format!(" C Bi:1:{dev}:1 -104 0")) >= 1;
        ok.then_some((t, dev))
    });
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!(":1:{dev}:")))
        .collect();
    let dump = mine.join("\n");
    // Submissions: ISO with 8 (IN) and 4 (OUT) packets not yet done
    // (-18), the OUT data, the bulk OUT bytes.
    assert!(
        mine.iter().any(|l| l.contains(&format!(" S Zi:1:{dev}:3 -115:8:0 8 -18:0:256 -18:256:256 -18:512:256 -18:768:256 -18:1024:256 2048 <"))),
        "{dump}"
    );
    assert!(
        mine.iter().any(|l| l.contains(&format!(" S Zo:1:{dev}:4 -115:8:0 4 -18:0:64 -18:64:64 -18:128:64 -18:192:64 256 = aa55aa55 aa55aa55"))),
        "{dump}"
    );
    assert!(
        mine.iter()
            .any(|l| l.contains(&format!(" S Bo:1:{dev}:2 -115 5 = 01020304 05"))),
        "{dump}"
    );
    // Every ISO IN completion is the peer's answer (its counter in the
    // first packet), or, had the peer been late, every packet missed.
    for l in mine.iter().filter(|l| l.contains(" C Zi:")) {
        let (_, rest) = l.split_once(&format!(" C Zi:1:{dev}:3 0:8:")).expect(l);
        let (frame, rest) = rest.split_once(':').unwrap();
        // xHCI reports a high-speed URB's start in microframes, 14 bits.
        assert!(frame.parse::<u16>().unwrap() < 0x4000, "{l}");
        let missed = "8 8 -18:0:0 -18:256:0 -18:512:0 -18:768:0 -18:1024:0 2048 = 00000000 ";
        assert!(
            rest.starts_with(missed) || rest.starts_with(&format!("1{}", &zi[4..])),
            "{l}"
        );
    }
    for l in mine.iter().filter(|l| l.contains(" C Zo:")) {
        assert!(
            l.ends_with(":0 4 0:0:64 0:64:64 0:128:64 0:192:64 256 >")
                || l.ends_with(":4 4 -18:0:0 -18:64:0 -18:128:0 -18:192:0 256 >"),
            "{l}"
        );
    }
    // The peer was told: the SET_INTERFACE, the ISO packets, the discard
    // (the peer logs each line when it reads it, which on a busy host can
    // be after the discard shows in 1u).
    let unlinked = |l: &str| l.starts_with("unlink ") && l.ends_with(" -104");
    let got = wait_for("the peer's log of the discard", || {
        let t = read(&log);
        t.lines().any(unlinked).then_some(t)
    });
    assert!(got.starts_with("hello 1 1 1 high\n"), "{got}");
    assert!(got.contains(" 00 C 0 010b010001000000 -\n"), "{got}");
    assert!(
        got.contains(" 83 Z 2048 - - 256 256 256 256 256 256 256 256\n"),
        "{got}"
    );
    assert!(got.contains(" 04 Z 256 - aa55aa55"), "{got}");
    assert!(got.contains(" 02 B 5 - 0102030405\n"), "{got}");
    // Vendor interfaces that `endpoints:` entries name are bound to
    // monfs's driver.
    assert!(
        m.sh_ok("cat usb/devices").contains(
            "I:* If#= 1 Alt= 1 #EPs= 2 Cls=ff(vend.) Sub=00 Prot=00 Driver=monfs-generic"
        ),
        "{}",
        m.sh_ok("cat usb/devices")
    );

    // Killed mid-transfer: the bulk URBs in flight end -71 (or -108 if the
    // disconnect comes first, as with the keyboard above), the ISO URBs
    // left at the disconnect -108 with their packets untransferred.
    kill_peer(&pidfile);
    let text = unplugged_with_bus_running(&m, &cap, &dev, "ISO loop");
    let _ = cat.kill();
    let _ = cat.wait();
    let mine: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(&format!(":1:{dev}:")))
        .collect();
    let dump = mine.join("\n");
    let first_dead = mine
        .iter()
        .position(|l| l.contains(" -71 ") || l.contains(" -108"))
        .unwrap_or_else(|| panic!("no unplug completions:\n{dump}"));
    let tail = &mine[first_dead..];
    // The bulk IN URB the generic driver keeps submitted: the one in
    // flight at the kill ends -71 (-108 after the disconnect); or, when
    // the peer died just as the driver's 20 ms timeout unlinked it (-104),
    // nothing of it was in flight any more. Either way none is left
    // without its completion, and none completes with data after the kill.
    let bi = |l: &&&str| l.contains(&format!(" Bi:1:{dev}:1 "));
    let bulk: Vec<&&str> = mine.iter().filter(bi).collect();
    let last = bulk.last().unwrap_or_else(|| panic!("no bulk IN:\n{dump}"));
    let ended = |l: &str, st: &str| l.contains(&format!(" C Bi:1:{dev}:1 {st} 0"));
    assert!(
        tail.iter().any(|l| ended(l, "-71") || ended(l, "-108")) || ended(last, "-104"),
        "{dump}"
    );
    assert!(
        tail.iter()
            .filter(bi)
            .all(|l| !l.contains(" C ") || ended(l, "-71") || ended(l, "-108") || ended(l, "-104")),
        "{dump}"
    );
    // (Each with the frame the HCD had placed it at: `-108:8:FRAME:0`.)
    let (shut, packets) = (
        format!(" C Zi:1:{dev}:3 -108:8:"),
        ":0 8 -18:0:0 -18:256:0 -18:512:0 -18:768:0 -18:1024:0 2048 = 00000000 ",
    );
    assert!(
        tail.iter()
            .any(|l| l.contains(&shut) && l.contains(packets)),
        "{dump}"
    );
    // Nothing is submitted, and nothing completes normally, afterwards.
    assert!(
        tail.iter()
            .all(|l| !l.contains(" S ") && !l.contains(" 0:8:") && !l.contains(" 0 5 >")),
        "{dump}"
    );
    // Killed, the peer closes both ends; which one the daemon notices first
    // is a race.
    let log = m.log_text();
    assert!(
        log.contains("usb bus 1 port 1: external device's peer closed its output")
            || log.contains("usb bus 1 port 1: external device's peer closed its input"),
        "{log}"
    );
}

/// Bus 1, port 1: the usb-kbd dump answered by examples/hid_keyboard.py
/// with `extra` options (ep0, socket) in the device's entry.
fn kbd_config(extra: &str, command: Option<&[&str]>) -> String {
    let cmd = command
        .map(|c| {
            let c: Vec<String> = c.iter().map(|a| format!("{a:?}")).collect();
            format!("          command: [{}]\n", c.join(", "))
        })
        .unwrap_or_default();
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          serial: \"42\"\n{cmd}{extra}",
        repo_path("tests/data/sysfs/qemu-usb-kbd/descriptors"),
    )
}

/// The data of the completions of GET_DESCRIPTOR requests with this
/// wValue and wLength (`0100 0000 0012`), in order. The root hub's own
/// (address 1) are left out: on a loaded machine `cat` may attach before
/// the root hub's enumeration is over.
fn descriptor_completions(text: &str, value_len: &str) -> Vec<String> {
    let mut tags = vec![];
    let mut out = vec![];
    for l in text.lines() {
        let w: Vec<&str> = l.split(' ').collect();
        if w.len() > 4
            && w[2] == "S"
            && !w[3].starts_with("Ci:1:001:")
            && l.contains(&format!("s 80 06 {value_len}"))
        {
            tags.push(w[0].to_string());
        } else if w.len() > 4 && w[2] == "C" && w[3].starts_with("Ci:1:") {
            if let Some(i) = tags.iter().position(|t| t == w[0]) {
                tags.remove(i);
                let data = l.split_once(" = ").map(|x| x.1.replace(' ', ""));
                out.push(format!("{} {}", w[4], data.unwrap_or_default()));
            }
        }
    }
    out
}

#[test]
fn a_peer_answering_ep0_enumerates_with_its_own_bytes() {
    let py = repo_path("examples/hid_keyboard.py");
    let dump = repo_path("tests/data/sysfs/qemu-usb-kbd/descriptors");
    // The peer's device descriptor differs from the file's in bcdDevice
    // (0x4242): usbmon shows the peer's bytes.
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = std::fs::read(&dump).unwrap();
    bytes[12] = 0x42;
    bytes[13] = 0x42;
    let peer_dump = dir.path().join("peer.desc");
    std::fs::write(&peer_dump, &bytes).unwrap();
    let args = [
        "python3",
        &py,
        "--ep0",
        peer_dump.to_str().unwrap(),
        "--string",
        "1=QEMU",
        "--string",
        "4=QEMU USB Keyboard",
        "--string",
        "11=42",
        "hi\n",
    ];
    // Plugged once `cat` reads, so that 1u has the whole enumeration.
    let extra = "          ep0: peer\n          plug_after_ms: 1500\n";
    let m = Mount::with_config(&kbd_config(extra, Some(&args)));
    let (mut cat, cap) = cat_1u(&m);
    let want = expected(&[0x0b, 0x0c, 0x28]);
    let text = typed(&cap, &want, "the keystrokes in 1u");
    let _ = cat.kill();
    let _ = cat.wait();
    let dev = kbd_devnum(&text).unwrap();
    assert_eq!(reports(&text, &dev), want, "1u:\n{text}");
    // The device descriptor, 64 at address 0 then 18: the peer's bytes
    // (usbmon shows at most 32 bytes of data).
    let hex: String = bytes[..18].iter().map(|b| format!("{b:02x}")).collect();
    let d64 = descriptor_completions(&text, "0100 0000 0040");
    assert_eq!(d64, vec![format!("0 {hex}")], "1u:\n{text}");
    let d18 = descriptor_completions(&text, "0100 0000 0012");
    assert_eq!(d18, vec![format!("0 {hex}")], "1u:\n{text}");
    let c9 = descriptor_completions(&text, "0200 0000 0009");
    let cfg: String = bytes[18..27].iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(c9, vec![format!("0 {cfg}")], "1u:\n{text}");
    // usb/devices shows the file's.
    let devices = std::fs::read_to_string(m.path("usb/devices")).unwrap();
    assert!(
        devices.contains("Vendor=0627 ProdID=0001 Rev= 0.00"),
        "{devices}"
    );
}

#[test]
fn a_peer_that_ignores_get_descriptor_is_unlinked_and_the_hub_gives_up() {
    let py = repo_path("examples/hid_keyboard.py");
    let dump = repo_path("tests/data/sysfs/qemu-usb-kbd/descriptors");
    let args = ["python3", &py, "--ep0", &dump, "--mute-ep0", "hi\n"];
    // Plugged once `cat` reads, so that 1u has every attempt.
    let extra =
        "          ep0: peer\n          ctrl_timeout_ms: 50\n          plug_after_ms: 1500\n";
    let m = Mount::with_config(&kbd_config(extra, Some(&args)));
    let (mut cat, cap) = cat_1u(&m);
    wait_for("the hub driver to give up", || {
        m.log_text()
            .contains("unable to enumerate USB device")
            .then_some(())
    });
    let text = wait_for("the killed requests in 1u", || {
        let t = read(&cap);
        (descriptor_completions(&t, "0100 0000 0040").len() >= 16).then_some(t)
    });
    let _ = cat.kill();
    let _ = cat.wait();
    // Four attempts of two rounds: a high-speed device's first round ends
    // at its first timeout, the second has three reads; each killed (-2).
    let d64 = descriptor_completions(&text, "0100 0000 0040");
    assert_eq!(d64.len(), 16, "1u:\n{text}");
    assert!(d64.iter().all(|c| c == "-2 "), "{d64:?}");
    assert!(!text.contains("s 00 05"), "no SET_ADDRESS:\n{text}");
    let log = m.log_text();
    assert!(
        log.contains("device descriptor read/64, error -110"),
        "{log}"
    );
    let devices = std::fs::read_to_string(m.path("usb/devices")).unwrap();
    assert!(!devices.contains("Vendor=0627"), "{devices}");
}

#[test]
fn a_peer_on_a_unix_socket_types_and_its_disconnect_unplugs() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("kbd.sock");
    let peer = Command::new("python3")
        .args([
            &repo_path("examples/hid_keyboard.py"),
            "--socket",
            sock.to_str().unwrap(),
            "hi\n",
        ])
        .spawn()
        .unwrap();
    socket_peer_types_and_its_disconnect_unplugs(peer, &sock);
}

/// The C keyboard example serves a socket the same way.
#[test]
fn the_c_keyboard_on_a_unix_socket_types_and_its_disconnect_unplugs() {
    let dir = tempfile::tempdir().unwrap();
    let bin = common::compile_c("hid_keyboard", dir.path());
    let sock = dir.path().join("kbd.sock");
    let peer = Command::new(bin)
        .args(["--socket", sock.to_str().unwrap(), "hi\n"])
        .spawn()
        .unwrap();
    socket_peer_types_and_its_disconnect_unplugs(peer, &sock);
}

/// A keyboard peer listening on `sock` and typing "hi\n": the device
/// configured with `socket:` types it into 1u, and is unplugged when the
/// peer is killed.
fn socket_peer_types_and_its_disconnect_unplugs(mut peer: Child, sock: &Path) {
    wait_for("the peer to listen", || sock.exists().then_some(()));
    let extra = format!("          socket: {}\n", sock.display());
    let m = Mount::with_config(&kbd_config(&extra, None));
    let (mut cat, cap) = cat_1u(&m);
    let want = expected(&[0x0b, 0x0c, 0x28]);
    let text = typed(&cap, &want, "the socket keyboard's keystrokes");
    let dev = kbd_devnum(&text).unwrap();
    assert_eq!(reports(&text, &dev), want, "1u:\n{text}");
    // The peer goes away: the device is unplugged.
    let _ = peer.kill();
    let _ = peer.wait();
    wait_for("the unplug", || {
        m.log_text().contains("unplugging the device").then_some(())
    });
    wait_for("the device to leave usb/devices", || {
        let d = std::fs::read_to_string(m.path("usb/devices")).unwrap();
        (!d.contains("Vendor=0627")).then_some(())
    });
    let _ = cat.kill();
    let _ = cat.wait();
}

#[test]
fn a_socket_nobody_listens_on_unplugs_with_a_log_line() {
    let dir = tempfile::tempdir().unwrap();
    let not_sock = dir.path().join("plain");
    std::fs::write(&not_sock, "x").unwrap();
    let extra = format!("          socket: {}\n", not_sock.display());
    let m = Mount::with_config(&kbd_config(&extra, None));
    wait_for("the log line", || {
        let l = m.log_text();
        l.contains("not a socket: unplugging the device")
            .then_some(())
    });
}

/// A peer is judged by its progress, not by a count of lines: stopped for
/// a few seconds while its isochronous streams run (more than the 1,024
/// lines the daemon once allowed to wait), it misses frames and stays
/// plugged, and answers again once it runs; stopped for good, it is
/// unplugged as a peer that does not read.
#[test]
fn a_peer_that_falls_behind_misses_frames_and_one_that_stops_reading_is_unplugged() {
    let dir = tempfile::tempdir().unwrap();
    let (pidfile, log) = (dir.path().join("pid"), dir.path().join("peer.log"));
    let m = Mount::with_config(&iso_config(dir.path(), &pidfile, &log));
    let (mut cat, cap) = cat_1u(&m);
    let answered = |t: &str| {
        t.lines()
            .filter(|l| l.contains(" C Zi:1:") && l.contains(" 0:8:") && l.contains(":1 8 0:0:4 "))
            .count()
    };
    wait_for("the peer's ISO answers", || {
        (answered(&read(&cap)) >= 3).then_some(())
    });
    signal_peer(&pidfile, libc::SIGSTOP);
    let stopped = std::fs::read_to_string(&log).unwrap().lines().count();
    // Lines the daemon queues meanwhile: each URB the peer would get.
    let submitted = |t: &str| {
        t.lines()
            .filter(|l| l.contains(" S Zi:1:") || l.contains(" S Zo:1:"))
            .count()
    };
    let before = submitted(&read(&cap));
    wait_for("1,100 ISO URBs submitted while the peer is stopped", || {
        (submitted(&read(&cap)) >= before + 1100).then_some(())
    });
    signal_peer(&pidfile, libc::SIGCONT);
    let seen = answered(&read(&cap));
    wait_for("the peer's ISO answers after it runs again", || {
        (answered(&read(&cap)) >= seen + 3).then_some(())
    });
    assert!(
        m.sh_ok("cat usb/devices").contains("Product=ISO loop"),
        "{}",
        m.log_text()
    );
    let lines = std::fs::read_to_string(&log).unwrap().lines().count();
    assert!(lines > stopped, "{lines} lines after {stopped}");
    let text = m.log_text();
    assert!(!text.contains("unplugging the device"), "{text}");
    assert!(
        text.contains("usb bus 1 port 1: external device's peer is behind its input: isochronous frames missed"),
        "{text}"
    );

    // Stopped for good: unplugged once it has taken nothing for 10 s.
    signal_peer(&pidfile, libc::SIGSTOP);
    let dev = iso_devnum(&read(&cap)).unwrap();
    unplugged_with_bus_running(&m, &cap, &dev, "ISO loop");
    let _ = cat.kill();
    let _ = cat.wait();
    let text = m.log_text();
    assert!(
        text.contains("usb bus 1 port 1: external device's peer does not read its input (")
            && text.contains("none taken for 1"),
        "{text}"
    );
}

/// usbhid's interrupt IN URB on an external keyboard ends as hid_irq_in
/// ends it: unlinked (-2, the device's third data transfer here), it is
/// not submitted again, and the keyboard's input stops there, while the
/// bus (the mouse beside it) runs on.
#[test]
fn usbhid_on_an_external_keyboard_stops_at_an_unlinked_urb() {
    let dir = tempfile::tempdir().unwrap();
    let bin = common::compile_c("hid_keyboard", dir.path());
    let cfg = config(&[bin.to_str().unwrap(), "abcdefgh\n"], 0).replace(
        "          command:",
        "          errors: {unlink_every: 3}\n          command:",
    );
    let m = Mount::with_config(&cfg);
    let (mut cat, cap) = cat_1u(&m);
    let (text, dev) = wait_for(
        "the keyboard's unlinked URB and 20 mouse reports after it",
        || {
            let t = read(&cap);
            let dev = kbd_devnum(&t)?;
            let at = t.find(&format!(" C Ii:1:{dev}:1 -2:"))?;
            let mouse = t[at..]
                .lines()
                .filter(|l| l.contains(" C Ii:1:") && !l.contains(&format!(":{dev}:")))
                .count();
            (mouse >= 20).then_some((t, dev))
        },
    );
    let _ = cat.kill();
    let _ = cat.wait();
    let ep1 = format!(" Ii:1:{dev}:1 ");
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(&ep1)).collect();
    let last = lines.last().unwrap();
    assert!(last.contains(&format!(" C Ii:1:{dev}:1 -2:")), "{lines:#?}");
    assert_eq!(
        lines.iter().filter(|l| l.contains(" -2:")).count(),
        1,
        "{lines:#?}"
    );
}
