//! usbfs (`dev/bus/usb/BBB/DDD`, devio.c) through the real mount: Debian's
//! libusb (tests/c/usbfs_libusb.c, wrapping the node's descriptor) does
//! control, bulk, interrupt and isochronous transfers to an external Python
//! peer (tests/data/usbfs_peer.py) and to the built-in keyboard, while
//! `cat 1u` shows each URB in the kernel's format (the keyboard session
//! as the kernel oracle, scripts/kernel-vm, showed it); stalls, `monfs ctl`
//! faults and unplugs reach the program; raw ioctls with bad arguments
//! (tests/c/usbfs_hostile.c) get devio.c's errnos; a device from a capture
//! answers a program from the capture (replay for programs).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{
    bus1_lines, compile_c, compile_c_libs, descriptors_dump, devnum_of, repo_path, run_libusb,
    stdout_ok, wait_node, Mount,
};

/// The peer's device: vendor interface 0 without endpoints, interface 1
/// whose setting 1 has bulk IN 0x81 and OUT 0x02, interrupt IN 0x85
/// (8 bytes, bInterval 4) and isochronous IN 0x83 and OUT 0x04.
fn loop_dump() -> Vec<u8> {
    let dev = [
        18, 1, 0, 2, 0xff, 0, 0, 64, 0x34, 0x12, 0x79, 0x56, 1, 0, 1, 2, 0, 1,
    ];
    let rest: [u8; 62] = [
        9, 4, 0, 0, 0, 0xff, 0, 0, 0, // interface 0
        9, 4, 1, 0, 0, 0xff, 0, 0, 0, // interface 1, setting 0
        9, 4, 1, 1, 5, 0xff, 0, 0, 0, // setting 1
        7, 5, 0x81, 2, 0, 2, 0, // bulk IN, 512
        7, 5, 0x02, 2, 0, 2, 0, // bulk OUT, 512
        7, 5, 0x85, 3, 8, 0, 4, // interrupt IN, 8
        7, 5, 0x83, 5, 0, 1, 1, // isochronous IN, 256
        7, 5, 0x04, 5, 64, 0, 1, // isochronous OUT, 64
    ];
    descriptors_dump(&dev, 2, &rest)
}

/// Bus 1: the peer's device on port 1 (plugged after `plug_ms`), a
/// keyboard on port 2. The peer logs its input to `peer.log` beside the
/// mount.
fn config(dir: &Path, plug_ms: u64) -> String {
    let desc = dir.join("loop.desc");
    std::fs::write(&desc, loop_dump()).unwrap();
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: usbfs loop\n          plug_after_ms: {plug_ms}\n          command: [python3, {}, {}]\n        - port: 2\n          kind: hid-keyboard\n",
        desc.display(),
        repo_path("tests/data/usbfs_peer.py"),
        dir.join("peer.log").display()
    )
}

fn libusb_tool(dir: &Path) -> PathBuf {
    compile_c_libs("usbfs_libusb", dir, &["-lusb-1.0"])
}

/// `cat 1u` into a file beside the mount, attached once it returns.
fn cat_1u(m: &Mount) -> (Child, PathBuf) {
    let r = common::cat_1u(m);
    // The reader is attached once its open returned.
    std::thread::sleep(Duration::from_millis(300));
    r
}

/// `want` appears in `got` in this order (other lines may come between).
fn in_order(got: &[String], want: &[&str]) {
    let mut i = 0;
    for w in want {
        match got[i..].iter().position(|g| g == w) {
            Some(k) => i += k + 1,
            None => panic!("{w:?} not found (in order) in:\n{}", got.join("\n")),
        }
    }
}

#[test]
fn libusb_drives_a_python_peer_and_1u_shows_each_urb() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let tool = libusb_tool(m.dir.path());
    let dev = devnum_of(&m, "usbfs loop");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    let (mut cat, cap) = cat_1u(&m);
    let out = run_libusb(
        &tool,
        &node,
        &[
            "desc",
            "config",
            "string:2",
            "ctrl-in:c0:1:0:0:10",
            "ctrl-out:40:2:0:0:a1b2",
            "ctrl-in:c0:3:0:0:4",
            "claim:1",
            "alt:1:1",
            "bulk-out:02:0102030405",
            "bulk-in:81:64",
            "int-in:85:4",
            "iso-in:83:4:16",
            "iso-out:04:2:64",
            "bulk-in:81:64:50",
            "release:1",
        ],
    );
    assert_eq!(
        out,
        [
            "desc rc=0 1234:5679 1",
            "config rc=0 1",
            "string:2 rc=10 usbfs loop",
            "ctrl-in:c0:1:0:0:10 rc=5 6d6f6e6673",
            "ctrl-out:40:2:0:0:a1b2 rc=2",
            "ctrl-in:c0:3:0:0:4 rc=LIBUSB_ERROR_PIPE ",
            "claim:1 rc=0",
            "alt:1:1 rc=0",
            "bulk-out:02:0102030405 rc=0 5",
            "bulk-in:81:64 rc=0 5 0504030201",
            "int-in:85:4 rc=0 4 00000001",
            "iso-in:83:4:16 rc=0 status=COMPLETED 0:16:00000000000000000000000000000000 \
             0:16:01010101010101010101010101010101 0:16:02020202020202020202020202020202 \
             0:16:03030303030303030303030303030303",
            "iso-out:04:2:64 rc=0 status=COMPLETED 0:64 0:64",
            "bulk-in:81:64:50 rc=LIBUSB_ERROR_TIMEOUT 0 ",
            "release:1 rc=0",
        ]
    );
    std::thread::sleep(Duration::from_millis(300));
    let _ = cat.kill();
    let _ = cat.wait();
    let got = bus1_lines(&cap, dev);
    let d = format!("1:{dev:03}");
    // An isochronous URB's C line has the microframe it started in (xHCI's
    // MFINDEX, 14 bits, for a high-speed device), as the kernel's does; its
    // S line the 0 libusb asked for with ISO_ASAP.
    let frame = |ep: &str| -> u32 {
        let l = got
            .iter()
            .find(|l| l.starts_with(&format!("C {ep}:{d}:")))
            .unwrap_or_else(|| panic!("no C {ep} line in:\n{}", got.join("\n")));
        let f: u32 = l
            .split(" ")
            .nth(2)
            .unwrap()
            .split(':')
            .nth(2)
            .unwrap()
            .parse()
            .unwrap();
        assert!(f < 0x4000, "{l}");
        f
    };
    let (zi, zo) = (frame("Zi"), frame("Zo"));
    in_order(
        &got,
        &[
            &format!("S Ci:{d}:0 s 80 08 0000 0000 0001 1 <"),
            &format!("C Ci:{d}:0 0 1 = 01"),
            &format!("S Ci:{d}:0 s c0 01 0000 0000 0010 16 <"),
            &format!("C Ci:{d}:0 0 5 = 6d6f6e66 73"),
            &format!("S Co:{d}:0 s 40 02 0000 0000 0002 2 = a1b2"),
            &format!("C Co:{d}:0 0 2 >"),
            &format!("S Ci:{d}:0 s c0 03 0000 0000 0004 4 <"),
            &format!("C Ci:{d}:0 -32 0"),
            &format!("S Co:{d}:0 s 01 0b 0001 0001 0000 0"),
            &format!("C Co:{d}:0 0 0"),
            &format!("S Bo:{d}:2 -115 5 = 01020304 05"),
            &format!("C Bo:{d}:2 0 5 >"),
            &format!("S Bi:{d}:1 -115 64 <"),
            &format!("C Bi:{d}:1 0 5 = 05040302 01"),
            &format!("S Ii:{d}:5 -115:8 4 <"),
            &format!("C Ii:{d}:5 0:8 4 = 00000001"),
            &format!("S Zi:{d}:3 -115:1:0 4 -18:0:16 -18:16:16 -18:32:16 -18:48:16 64 <"),
            &format!(
                "C Zi:{d}:3 0:1:{zi}:0 4 0:0:16 0:16:16 0:32:16 0:48:16 64 = 00000000 00000000 \
                 00000000 00000000 01010101 01010101 01010101 01010101"
            ),
            &format!(
                "S Zo:{d}:4 -115:1:0 2 -18:0:64 -18:64:64 128 = 00010203 04050607 08090a0b \
                 0c0d0e0f 10111213 14151617 18191a1b 1c1d1e1f"
            ),
            &format!("C Zo:{d}:4 0:1:{zo}:0 2 0:0:64 0:64:64 128 >"),
            &format!("S Bi:{d}:1 -115 64 <"),
            // libusb's timeout: DISCARDURB, usb_kill_urb.
            &format!("C Bi:{d}:1 -2 0"),
        ],
    );
    // The peer got the program's URBs, and the unlink of the discarded one.
    let log = std::fs::read_to_string(td.path().join("peer.log")).unwrap();
    assert!(log.contains(" 02 B 5 - 0102030405\n"), "{log}");
    assert!(log.lines().last().unwrap().starts_with("unlink "), "{log}");
    assert!(log.lines().last().unwrap().ends_with(" -2"), "{log}");
}

#[test]
fn detaching_usbhid_kills_its_urb_and_the_program_reads_the_keyboard() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let tool = libusb_tool(m.dir.path());
    let dev = devnum_of(&m, "QEMU USB Keyboard");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    let (mut cat, cap) = cat_1u(&m);
    let out = run_libusb(
        &tool,
        &node,
        &[
            "active:0",
            "claim:0",
            "detach:0",
            "active:0",
            "claim:0",
            "int-in:81:8",
            "release:0",
            "attach:0",
            "active:0",
        ],
    );
    // The keyboard's next report (the model types): 8 bytes.
    assert!(out[5].starts_with("int-in:81:8 rc=0 8 "), "{out:?}");
    let report = out[5].rsplit(' ').next().unwrap().to_string();
    assert_eq!(report.len(), 16, "{out:?}");
    let mut out = out;
    out[5] = "int-in:81:8 rc=0 8 REPORT".into();
    assert_eq!(
        out,
        [
            "active:0 rc=1",
            "claim:0 rc=LIBUSB_ERROR_BUSY",
            "detach:0 rc=0",
            "active:0 rc=0",
            "claim:0 rc=0",
            "int-in:81:8 rc=0 8 REPORT",
            "release:0 rc=0",
            "attach:0 rc=0",
            "active:0 rc=1",
        ]
    );
    std::thread::sleep(Duration::from_millis(300));
    let _ = cat.kill();
    let _ = cat.wait();
    let got = bus1_lines(&cap, dev);
    let d = format!("1:{dev:03}");
    // usbhid's URB flushed as its interface is disabled (-108, as the
    // kernel oracle shows), then the program's own URB; after the
    // program's CONNECT, usbhid's probe again and its URB.
    in_order(
        &got,
        &[
            &format!("C Ii:{d}:1 -108:64 0"),
            &format!("S Ii:{d}:1 -115:64 8 <"),
            &format!("C Ii:{d}:1 0:64 8 = {} {}", &report[..8], &report[8..]),
            &format!("S Co:{d}:0 s 21 0a 0000 0000 0000 0"),
            &format!("S Ci:{d}:0 s 81 06 2200 0000 003f 63 <"),
            &format!("S Co:{d}:0 s 21 09 0200 0000 0001 1 = 00"),
            &format!("C Co:{d}:0 0 1 >"),
            &format!("S Ii:{d}:1 -115:64 8 <"),
        ],
    );
    let log = m.log_text();
    assert!(log.contains("disconnect by usbfs"), "{log}");
    // usb/devices names the interface's driver: usbfs while a program
    // holds it, none once it let go without attaching usbhid again.
    let drv = |m: &Mount| -> String {
        let t = m.sh_ok("cat usb/devices");
        let b = t
            .split("\n\n")
            .find(|b| b.contains("S:  Product=QEMU USB Keyboard\n"))
            .unwrap()
            .to_string();
        b.split("Driver=")
            .nth(1)
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(drv(&m), "usbhid");
    let mut p = Command::new(&tool)
        .arg(&node)
        .args(["detach:0", "claim:0", "ready", "sleep:60000"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(p.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("ready") {
        line.clear();
        assert!(out.read_line(&mut line).unwrap() > 0, "no ready line");
    }
    assert_eq!(drv(&m), "usbfs");
    p.kill().unwrap();
    p.wait().unwrap();
    let deadline = Instant::now() + common::HANG;
    while drv(&m) != "(none)" {
        assert!(Instant::now() < deadline, "{}", drv(&m));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A program that gives up on a URB (libusb's timeout discards it) while
/// the peer is still working on it: the peer's late answer is let go, as
/// the kernel lets a completion of a killed URB go, and the device stays
/// (monfs once took it for an answer to a URB not in flight and unplugged
/// the device).
#[test]
fn a_late_answer_to_a_discarded_urb_leaves_the_device_plugged() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let tool = libusb_tool(m.dir.path());
    let dev = devnum_of(&m, "usbfs loop");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    // Request 0x05 is answered after wValue (0x1f4: 500) ms; the program
    // waits 100. The peer answers in order, so the next request's answer
    // comes after the late one.
    let out = run_libusb(
        &tool,
        &node,
        &[
            "ctrl-in:c0:5:1f4:0:4:100",
            "ctrl-in:c0:1:0:0:10",
            "ctrl-in:c0:5:0:0:4",
        ],
    );
    assert_eq!(
        out,
        [
            "ctrl-in:c0:5:1f4:0:4:100 rc=LIBUSB_ERROR_TIMEOUT ",
            "ctrl-in:c0:1:0:0:10 rc=5 6d6f6e6673",
            "ctrl-in:c0:5:0:0:4 rc=4 6c617465",
        ],
        "{}",
        m.log_text()
    );
    let log = m.log_text();
    assert!(!log.contains("unplugging the device"), "{log}");
}

#[test]
fn stalls_faults_and_unplug_reach_the_program() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let tool = libusb_tool(m.dir.path());
    let hostile = compile_c("usbfs_hostile", m.dir.path());
    let dev = devnum_of(&m, "usbfs loop");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    let (ok, e) = m.ctl(&["fault", "1", "1", "stall"]);
    assert!(ok, "{e}");
    let out = run_libusb(
        &tool,
        &node,
        &[
            "claim:1",
            "alt:1:1",
            "bulk-out:02:0102030405",
            "clear:02",
            "bulk-out:02:0102030405",
        ],
    );
    assert_eq!(
        &out[2..],
        [
            "bulk-out:02:0102030405 rc=LIBUSB_ERROR_PIPE 0",
            "clear:02 rc=0",
            "bulk-out:02:0102030405 rc=0 5",
        ]
    );
    // libusb blocks in a bulk IN without timeout; a raw caller waits in
    // poll with a control request the device never answers (submitted
    // after libusb's SET_INTERFACE: it holds ep0's queue, as a device that
    // NAKs does on a real controller). Then the device goes.
    let (mut cat, cap) = cat_1u(&m);
    let mut line = String::new();
    let mut lib = Command::new(&tool)
        .arg(&node)
        .args([
            "claim:1",
            "alt:1:1",
            // What the OUT before left.
            "bulk-in:81:64:0",
            "ready",
            "bulk-in:81:64:0",
            "bulk-in:81:64:0",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lib_out = BufReader::new(lib.stdout.take().unwrap());
    let mut before = Vec::new();
    loop {
        line.clear();
        assert!(lib_out.read_line(&mut line).unwrap() > 0, "no ready line");
        if line.starts_with("ready") {
            break;
        }
        before.push(line.trim_end().to_string());
    }
    assert_eq!(
        before,
        [
            "claim:1 rc=0",
            "alt:1:1 rc=0",
            "bulk-in:81:64:0 rc=0 5 0504030201"
        ]
    );
    let mut raw = Command::new(&hostile)
        .arg(&node)
        .arg("unplugwait")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut raw_out = BufReader::new(raw.stdout.take().unwrap());
    line.clear();
    while !line.starts_with("ready") {
        line.clear();
        assert!(raw_out.read_line(&mut line).unwrap() > 0, "no ready line");
    }
    // Unplug once libusb's bulk IN after its ready line is in flight, as
    // usbmon shows it.
    let deadline = std::time::Instant::now() + common::HANG;
    let (sub, done) = (
        format!(" S Bi:1:{dev:03}:1 "),
        format!(" C Bi:1:{dev:03}:1 "),
    );
    loop {
        let text = std::fs::read_to_string(&cap).unwrap();
        let in_flight = text.matches(&sub).count() as i64 - text.matches(&done).count() as i64;
        if in_flight >= 1 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "bulk INs not in flight:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, e) = m.ctl(&["unplug", "1", "1"]);
    assert!(ok, "{e}");
    let rest: Vec<String> = lib_out.lines().map(|l| l.unwrap()).collect();
    assert!(lib.wait().unwrap().success());
    // In flight at the unplug: the host controller's -EPROTO (libusb:
    // LIBUSB_ERROR_IO); after it, the device is gone.
    assert_eq!(
        rest,
        [
            "bulk-in:81:64:0 rc=LIBUSB_ERROR_IO 0 ",
            "bulk-in:81:64:0 rc=LIBUSB_ERROR_NO_DEVICE 0 ",
        ]
    );
    let raw_rest: Vec<String> = raw_out.lines().map(|l| l.unwrap()).collect();
    assert!(raw.wait().unwrap().success());
    assert_eq!(
        raw_rest,
        [
            "reaped status=-71",
            "poll POLLOUT POLLHUP POLLERR",
            "reap-after-unplug ENODEV",
            "submit-after-unplug ENODEV",
            "read-after-unplug ENODEV",
        ]
    );
    let _ = cat.kill();
    let _ = cat.wait();
    // The node is gone.
    let deadline = Instant::now() + common::HANG;
    while node.exists() {
        assert!(Instant::now() < deadline, "{} stayed", node.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn hostile_callers_get_devio_errnos_and_cannot_exhaust_the_daemon() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let hostile = compile_c("usbfs_hostile", m.dir.path());
    let dev = devnum_of(&m, "usbfs loop");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    let run_h = |args: &[&str]| -> Vec<String> {
        let o = Command::new(&hostile)
            .arg(&node)
            .args(args)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        run_h(&["cases"]),
        [
            "readonly-ioctl EPERM",
            "unknown-ioctl ENOTTY",
            "claim-64 EINVAL",
            "claim-absent ENOENT",
            "submit-wild-urb EFAULT",
            "submit-unmapped-urb EFAULT",
            "submit-wild-out-buffer EFAULT",
            "submit-null-buffer EINVAL",
            "submit-huge-length EINVAL",
            "submit-64MiB ENOMEM",
            "submit-no-endpoint ENOENT",
            "submit-bad-flags EINVAL",
            "submit-bad-type EINVAL",
            "iso-129-packets EINVAL",
            "iso-million-packets EINVAL",
            "iso-0-packets EINVAL",
            "iso-long-packet EINVAL",
            "iso-wild-descriptors EFAULT",
            "control-wild-out EFAULT",
            "control-wild-in EFAULT",
            "control-too-long EINVAL",
            "control-stall EPIPE",
            "bulk-out ok",
            "submit-in-wild-buffer ok",
            "reap-into-wild-buffer EFAULT",
            "reap-nothing-left EAGAIN",
            "discard-unknown EINVAL",
            "reap-to-readonly EFAULT",
        ]
    );
    // URBs of 100 KiB left pending until usbfs_memory_mb (16 MiB) is
    // reached, then the file closed without reaping: the next caller gets
    // exactly as far, so nothing was kept.
    let first = run_h(&["unreaped", "200"]);
    assert_eq!(first.len(), 1);
    assert!(first[0].ends_with(" ENOMEM"), "{first:?}");
    let n: u32 = first[0].split(' ').nth(1).unwrap().parse().unwrap();
    assert!((150..=170).contains(&n), "{first:?}");
    assert_eq!(run_h(&["unreaped", "200"]), first);
    // 10,000 opens and closes, then 500 at once.
    assert_eq!(run_h(&["opens", "10000"]), ["opens ok caps=ok 0x1d5"]);
    // The daemon serves on.
    assert!(m.path("usb/devices").exists());
    assert_eq!(run_h(&["unreaped", "200"]), first);
}

#[test]
fn read_gives_the_descriptors_of_devices_and_root_hubs() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let dev = devnum_of(&m, "usbfs loop");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    assert_eq!(std::fs::read(&node).unwrap(), loop_dump());
    let rh = std::fs::read(m.path("dev/bus/usb/001/001")).unwrap();
    // Device descriptor of the xHCI root hub, then its configuration.
    assert_eq!(&rh[..4], &[18, 1, 0, 2]);
    assert_eq!(&rh[8..12], &[0x6b, 0x1d, 0x02, 0x00]);
    assert_eq!(rh[18 + 1], 2);
    assert_eq!(rh.len(), 18 + rh[18 + 2] as usize);
    // The node's mode is devtmpfs's for usb devices as udev leaves it.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&node).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o664);
}

#[test]
fn a_device_from_a_capture_answers_a_program_from_the_capture() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path().to_path_buf();
    let rec = dir.join("rec.pcapng");
    let tool;
    let ops = [
        "ctrl-in:c0:1:0:0:10",
        "claim:1",
        "alt:1:1",
        "bulk-out:02:0102030405",
        "bulk-in:81:64",
        "int-in:85:4",
        "iso-in:83:4:16",
        "iso-out:04:2:64",
    ];
    let want = [
        "ctrl-in:c0:1:0:0:10 rc=5 6d6f6e6673",
        "claim:1 rc=0",
        "alt:1:1 rc=0",
        "bulk-out:02:0102030405 rc=0 5",
        "bulk-in:81:64 rc=0 5 0504030201",
        "int-in:85:4 rc=0 4 00000001",
        "iso-in:83:4:16 rc=0 status=COMPLETED 0:16:00000000000000000000000000000000 \
         0:16:01010101010101010101010101010101 0:16:02020202020202020202020202020202 \
         0:16:03030303030303030303030303030303",
        "iso-out:04:2:64 rc=0 status=COMPLETED 0:64 0:64",
    ];
    let dev;
    {
        // Record the peer's device from its plug on, while the program
        // talks to it.
        let m = Mount::with_config(&config(&dir, 1500));
        tool = libusb_tool(&dir);
        let usbmon = m.path("dev/usbmon1");
        let rec2 = rec.clone();
        let recorder = std::thread::spawn(move || {
            monfs::cli::record::record_from_device(
                &usbmon,
                &rec2,
                Some(Duration::from_millis(5000)),
                monfs::capture::write::Format::PcapNg,
            )
            .unwrap();
        });
        dev = devnum_of(&m, "usbfs loop");
        let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
        assert_eq!(run_libusb(&tool, &node, &ops), want);
        recorder.join().unwrap();
    }
    let m = Mount::with_config(&format!(
        "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: from-capture\n          capture: {}\n          devaddr: {dev}\n",
        rec.display()
    ));
    let node = wait_node(&m, "dev/bus/usb/001/002");
    let mut more = ops.to_vec();
    more.extend([
        "int-in:85:4:300",
        "ctrl-in:c0:7:0:0:4:300",
        "iso-in:83:2:16",
    ]);
    let mut want2: Vec<&str> = want.to_vec();
    // What the capture does not have: the device does not answer (an
    // isochronous URB ends with its frames, its IN packets errors).
    want2.extend([
        "int-in:85:4:300 rc=LIBUSB_ERROR_TIMEOUT 0 ",
        "ctrl-in:c0:7:0:0:4:300 rc=LIBUSB_ERROR_TIMEOUT ",
        "iso-in:83:2:16 rc=0 status=COMPLETED 1:0 1:0",
    ]);
    assert_eq!(run_libusb(&tool, &node, &more), want2);
    let log = m.log_text();
    assert!(
        log.contains("a program's control request c007000000000400 is not in the capture"),
        "{log}"
    );
    assert!(
        log.contains("a program's transfer on endpoint 85 is not in the capture"),
        "{log}"
    );
    assert!(
        log.contains("a program's transfer on endpoint 83 is not in the capture"),
        "{log}"
    );
}

/// pyusb cannot wrap a descriptor: it finds devices by enumeration, so it
/// runs under `monfs run`, where `/dev/bus/usb` and the USB part of `/sys`
/// are the mount's.
#[test]
fn pyusb_finds_and_drives_the_peer_under_monfs_run() {
    let td = tempfile::tempdir().unwrap();
    let cfg = td.path().join("config.yaml");
    std::fs::write(&cfg, config(td.path(), 0)).unwrap();
    let o = Command::new(common::monfs_bin())
        .arg("run")
        .arg("--config")
        .arg(&cfg)
        // Debian's python3, whose python3-usb scripts/setup installs.
        .args([
            "--",
            "/usr/bin/python3",
            &repo_path("tests/data/usbfs_pyusb.py"),
        ])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 7, "{out}");
    assert!(
        lines[0].starts_with("found 1 ") && lines[0].ends_with(" usbfs loop"),
        "{out}"
    );
    assert_eq!(
        &lines[1..],
        [
            "control 6d6f6e6673",
            "stall 32",
            "bulk out 4",
            "bulk in 04030201",
            "interrupt in 00000001",
            "timeout",
        ]
    );
}

/// The answers to `ops` (tests/c/usbfs_libusb.c operations) from the
/// keyboard of a fresh mount, with interface 0 taken from usbhid for them
/// and given back after.
fn keyboard_answers(ops: &[&str]) -> Vec<String> {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let tool = libusb_tool(m.dir.path());
    let dev = devnum_of(&m, "QEMU USB Keyboard");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    let all: Vec<&str> = ["detach:0", "claim:0"]
        .into_iter()
        .chain(ops.iter().copied())
        .chain(["release:0", "attach:0"])
        .collect();
    let out = run_libusb(&tool, &node, &all);
    assert_eq!(out.len(), all.len(), "{out:?}");
    out[2..2 + ops.len()].to_vec()
}

/// A HID keyboard answers GET_IDLE and GET_PROTOCOL with what SET_IDLE and
/// SET_PROTOCOL last set (0 and the report protocol at first), as qemu's
/// keyboard does in the kernel-vm oracle.
#[test]
fn the_keyboard_reads_back_its_idle_rate_and_protocol() {
    let out = keyboard_answers(&[
        "ctrl-in:a1:2:0:0:1",
        "ctrl-in:a1:3:0:0:1",
        "ctrl-out:21:a:400:0:-",
        "ctrl-out:21:b:0:0:-",
        "ctrl-in:a1:2:0:0:1",
        "ctrl-in:a1:3:0:0:1",
    ]);
    assert_eq!(out[0], "ctrl-in:a1:2:0:0:1 rc=1 00", "{out:?}");
    assert_eq!(out[1], "ctrl-in:a1:3:0:0:1 rc=1 01", "{out:?}");
    assert_eq!(out[4], "ctrl-in:a1:2:0:0:1 rc=1 04", "{out:?}");
    assert_eq!(out[5], "ctrl-in:a1:3:0:0:1 rc=1 00", "{out:?}");
}

/// GET_STATUS of the device answers; of an interface or an endpoint the
/// keyboard stalls, as qemu's keyboard does in the kernel-vm oracle (its
/// request handler has no case for them), and libusb says PIPE.
#[test]
fn the_keyboard_stalls_get_status_of_an_interface_or_endpoint() {
    let out = keyboard_answers(&[
        "ctrl-in:80:0:0:0:2",
        "ctrl-in:81:0:0:0:2",
        "ctrl-in:82:0:0:81:2",
    ]);
    let stalled = |op: &str| format!("{op} rc=LIBUSB_ERROR_PIPE ");
    assert_eq!(out[0], "ctrl-in:80:0:0:0:2 rc=2 0000", "{out:?}");
    assert_eq!(out[1], stalled("ctrl-in:81:0:0:0:2"), "{out:?}");
    assert_eq!(out[2], stalled("ctrl-in:82:0:0:81:2"), "{out:?}");
}

/// A reaper thread blocked in REAPURB does not hold up another thread's
/// SUBMITURB on the same file (devio.c's reap_as sleeps without the device
/// lock), and blocks on a non-blocking file too; the reap returns the URB
/// the other thread submitted (tests/c/usbfs_reaper.c).
#[test]
fn a_blocked_reap_lets_another_thread_submit() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(&config(td.path(), 0));
    let tool = compile_c_libs("usbfs_reaper", m.dir.path(), &["-lpthread"]);
    let dev = devnum_of(&m, "QEMU USB Keyboard");
    let node = wait_node(&m, &format!("dev/bus/usb/001/{dev:03}"));
    for extra in [&[][..], &["nonblock"][..]] {
        let out = stdout_ok(Command::new(&tool).arg(&node).args(extra), "usbfs_reaper");
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            ["submit 0", "reap 0 ours status 0 actual 18"],
            "{extra:?}"
        );
    }
}
