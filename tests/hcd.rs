//! The bus as a host controller, through the real mount: a libusb program
//! (tests/c/usbfs_order.c) keeping several transfers in flight on one
//! endpoint gets its callbacks in submission order, never moves data
//! faster than a bus of the device's speed could, and an isochronous
//! stream takes the frames it spans; `--timing fast` gives the same.
//! Random usbfs calls (tests/c/usbfs_random.c) all return, and a pyusb
//! program talks SCSI to the flash drive.

mod common;

use std::path::Path;
use std::process::Command;

use common::{compile_c_libs, descriptors_dump, devnum_of, stdout_ok, wait_node, Mount};

/// Bus 1 (xHCI, high speed): a flood gadget and a keyboard; bus 2 (OHCI,
/// full speed): a flood gadget and an audio device (isochronous OUT 0x01,
/// 192 bytes a 1 ms frame, in interface 1 setting 1).
const CONFIG: &str = "usb:\n  buses:\n    - bus: 1\n      controller: xhci\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: flood, product: HS Flood}\n        - {port: 2, kind: hid-keyboard}\n    - bus: 2\n      controller: ohci\n      ports: 2\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: flood, product: FS Flood}\n        - {port: 2, kind: audio}\n";

/// One `usbfs_order` run: its counts by name.
struct Run(Vec<(String, f64)>);

impl Run {
    fn get(&self, k: &str) -> f64 {
        self.0.iter().find(|(n, _)| n == k).unwrap().1
    }
}

/// Run `usbfs_order` with `args` on the device `product` of `bus`.
fn order(tool: &Path, m: &Mount, bus: u8, product: &str, args: &str) -> Run {
    let dev = devnum_of(m, product);
    let node = wait_node(m, &format!("dev/bus/usb/{bus:03}/{dev:03}"));
    let out = stdout_ok(Command::new(tool).arg(&node).args(args.split(' ')), args);
    Run(out
        .split_whitespace()
        .filter_map(|w| w.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect())
}

/// The highest bulk rate of a bus, bytes a second: 13 x 512 bytes a 125
/// us microframe at high speed, 19 x 64 a 1 ms frame at full speed.
const HIGH: f64 = 13.0 * 512.0 * 8000.0;
const FULL: f64 = 19.0 * 64.0 * 1000.0;

/// Streams on every endpoint type: in order, every byte; in `realistic`
/// timing no faster than the bus (a rate can only fall below the bound on
/// a busy host, never rise above it).
fn check_streams(m: &Mount, tool: &Path, realistic: bool) {
    for (bus, product, args, bound) in [
        (1, "HS Flood", "0 0 bulk-in 81 512 8 400", HIGH),
        (1, "HS Flood", "0 0 bulk-out 02 512 8 400", HIGH),
        (1, "HS Flood", "0 0 bulk-in 81 16384 4 200", HIGH),
        (1, "HS Flood", "0 0 bulk-out 02 16384 4 200", HIGH),
        (2, "FS Flood", "0 0 bulk-in 81 4096 4 60", FULL),
        (2, "FS Flood", "0 0 bulk-out 02 4096 4 60", FULL),
    ] {
        let r = order(tool, m, bus, product, args);
        let parts: Vec<f64> = args.split(' ').filter_map(|w| w.parse().ok()).collect();
        let (len, total) = (parts[3], parts[5]);
        assert_eq!(r.get("out_of_order"), 0.0, "{args}");
        assert_eq!(r.get("status_errors"), 0.0, "{args}");
        assert_eq!(r.get("bytes"), len * total, "{args}");
        let rate = r.get("bytes") / r.get("secs");
        assert!(
            !realistic || rate <= bound * 1.01,
            "{args}: {rate} B/s above the bus's {bound}"
        );
    }
    // Four interrupt URBs queued on the keyboard: its reports fill them in
    // submission order.
    let r = order(tool, m, 1, "QEMU USB Keyboard", "0 0 int-in 81 8 4 12");
    assert_eq!(r.get("out_of_order"), 0.0);
    assert_eq!(r.get("bytes"), 96.0);
}

#[test]
fn streams_keep_their_order_and_the_buss_rate() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(CONFIG);
    let tool = compile_c_libs("usbfs_order", td.path(), &["-lusb-1.0"]);
    check_streams(&m, &tool, true);
    // 60 URBs of 8 packets, 3 in flight, on a 1 ms isochronous endpoint:
    // every packet sent, in order, and the stream takes at least the 480
    // frames it spans.
    let r = order(&tool, &m, 2, "QEMU USB Audio", "1 1 iso-out 01 192 3 60 8");
    assert_eq!(r.get("out_of_order"), 0.0);
    assert_eq!((r.get("packets"), r.get("packet_errors")), (480.0, 0.0));
    assert_eq!(r.get("bytes"), 480.0 * 192.0);
    assert!(r.get("secs") >= 0.95 * 0.480, "{} s", r.get("secs"));
}

/// A peer (`kind: external`) that answers a program's bulk URBs out of
/// order: of every two IN URBs it holds, the later one first. Whoever
/// answers, the bus gives an endpoint's URBs back in submission order, so
/// the program's 8 IN and 8 OUT transfers in flight complete in order with
/// the peer's bytes.
const OUT_OF_ORDER_PEER: &str = r#"
import sys
held = None
for line in sys.stdin:
    w = line.split()
    if not w or w[0] != "submit":
        continue
    i, ep, ty, ln = w[1], w[2], w[3], int(w[4])
    if ty == "C":
        print(f"complete {i} 0 0", flush=True)
    elif ty == "B" and ep == "81":
        if held is None:
            held = (i, ln)
            continue
        for j, n in ((i, ln), held):
            print(f"complete {j} 0 {n} " + "5a" * n, flush=True)
        held = None
    elif ty == "B":
        print(f"complete {i} 0 {ln}", flush=True)
"#;

#[test]
fn an_external_peer_answering_out_of_order_still_completes_in_order() {
    let td = tempfile::tempdir().unwrap();
    let dev = [
        18, 1, 0, 2, 0xff, 0, 0, 64, 0x34, 0x12, 0x79, 0x56, 1, 0, 1, 2, 0, 1,
    ];
    let rest = [
        9, 4, 0, 0, 2, 0xff, 0, 0, 0, // interface 0
        7, 5, 0x81, 2, 0, 2, 0, // bulk IN, 512
        7, 5, 0x02, 2, 0, 2, 0, // bulk OUT, 512
    ];
    let desc = td.path().join("bulk.desc");
    std::fs::write(&desc, descriptors_dump(&dev, 1, &rest)).unwrap();
    let peer = td.path().join("peer.py");
    std::fs::write(&peer, OUT_OF_ORDER_PEER).unwrap();
    let m = Mount::with_config(&format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: Bulk Peer\n          command: [python3, {}]\n",
        desc.display(),
        peer.display()
    ));
    let tool = compile_c_libs("usbfs_order", td.path(), &["-lusb-1.0"]);
    for args in ["0 0 bulk-in 81 512 8 400", "0 0 bulk-out 02 512 8 400"] {
        let r = order(&tool, &m, 1, "Bulk Peer", args);
        assert_eq!(r.get("out_of_order"), 0.0, "{args}");
        assert_eq!(r.get("status_errors"), 0.0, "{args}");
        assert_eq!(r.get("bytes"), 512.0 * 400.0, "{args}");
        let rate = r.get("bytes") / r.get("secs");
        assert!(rate <= HIGH * 1.01, "{args}: {rate} B/s");
    }
}

#[test]
fn fast_timing_keeps_every_order_and_length() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::start(Some(CONFIG), &["--timing", "fast"]);
    let tool = compile_c_libs("usbfs_order", td.path(), &["-lusb-1.0"]);
    check_streams(&m, &tool, false);
    let r = order(&tool, &m, 2, "QEMU USB Audio", "1 1 iso-out 01 192 3 60 8");
    assert_eq!(r.get("out_of_order"), 0.0);
    assert_eq!((r.get("packets"), r.get("packet_errors")), (480.0, 0.0));
}

/// 10,000 seeded random usbfs calls (tests/c/usbfs_random.c: CONTROL and
/// BULK with 5 ms timeouts, URBs submitted, discarded and reaped, claims,
/// driver detaches and attaches, SETINTERFACE, CLEAR_HALT, RESET) on each
/// kind of built-in device of the default configuration: every call
/// returns (monfs once left a caller inside USBDEVFS_RESET for good), and
/// every device is still listed after.
#[test]
fn random_usbfs_calls_all_return_and_leave_every_device_listed() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::default_config();
    let tool = common::compile_c("usbfs_random", td.path());
    let products = [
        "QEMU USB Keyboard",
        "QEMU USB Mouse",
        "QEMU USB HARDDRIVE",
        "QEMU USB Audio",
        "C270 HD WEBCAM",
        "Flaky Card Reader",
    ];
    let listed = |m: &Mount| -> Vec<(u8, u8, String)> {
        let t = m.sh_ok("cat usb/devices");
        t.split("\n\n")
            .filter_map(|b| {
                let p = b.split("Product=").nth(1)?.lines().next()?.to_string();
                let bus = b.split("Bus=").nth(1)?[..2].parse().ok()?;
                let dev = b
                    .split("Dev#=")
                    .nth(1)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()?;
                Some((bus, dev, p))
            })
            .collect()
    };
    for p in products {
        devnum_of(&m, p);
    }
    let before = listed(&m);
    for (seed, p) in products.iter().enumerate() {
        let (bus, dev, _) = before.iter().find(|(_, _, n)| n == p).unwrap();
        let node = m.path(&format!("dev/bus/usb/{bus:03}/{dev:03}"));
        let out = stdout_ok(
            Command::new(&tool)
                .arg(&node)
                .arg((seed + 1).to_string())
                .arg("10000"),
            p,
        );
        assert!(out.starts_with("done 10000 calls"), "{p}: {out}");
    }
    // Every device is listed again, at its address (a reset keeps it).
    let deadline = std::time::Instant::now() + common::HANG;
    while listed(&m) != before {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?} != {before:?}",
            listed(&m)
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A pyusb program that takes the flash drive from usb-storage talks SCSI
/// to it over the bulk-only transport (tests/data/bot_inquiry.py, under
/// `monfs run`): INQUIRY, READ CAPACITY, READ(10), MODE SENSE, an unknown
/// command's CHECK CONDITION and the sense data REQUEST SENSE then gives
/// (monfs answered such a program with filler bytes), as qemu's
/// usb-storage and scsi-hd answer them.
#[test]
fn pyusb_talks_scsi_to_the_flash_drive() {
    common::require_fuse();
    let td = tempfile::tempdir().unwrap();
    let cfg = td.path().join("disk.yaml");
    std::fs::write(
        &cfg,
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: mass-storage}\n",
    )
    .unwrap();
    let out = stdout_ok(
        Command::new(common::monfs_bin())
            .args(["run", "--config"])
            .arg(&cfg)
            .args(["--", "/usr/bin/python3"])
            .arg(common::repo_path("tests/data/bot_inquiry.py"))
            .env("TMPDIR", td.path()),
        "monfs run bot_inquiry.py",
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "inquiry 0 QEMU QEMU HARDDISK 2.5+ residue=0",
            "capacity 0 4194304 512",
            "read 0 MONFS-LBA-00000001",
            "mode 0 192 63 residue=0",
            "unknown 1",
            "sense 0 key=5 asc=20",
            "attached",
        ]
    );
}

/// tests/data/SCRIPT run by python3 under `monfs run` (fast timing) on an
/// EHCI bus 1 with `devices` (YAML flow maps, one per line of the list):
/// its output.
fn python_under_monfs_run(devices: &str, script: &str) -> String {
    common::require_fuse();
    let td = tempfile::tempdir().unwrap();
    let cfg = td.path().join("devices.yaml");
    std::fs::write(
        &cfg,
        format!("usb:\n  buses:\n    - bus: 1\n      controller: ehci\n      hub_poll_ms: 0\n      devices:\n        - {devices}\n"),
    )
    .unwrap();
    stdout_ok(
        Command::new(common::monfs_bin())
            .args(["run", "--timing", "fast", "--config"])
            .arg(&cfg)
            .args(["--", "/usr/bin/python3"])
            .arg(common::repo_path(&format!("tests/data/{script}")))
            .env("TMPDIR", td.path()),
        &format!("monfs run {script}"),
    )
}

/// A pyusb program detaches the control interfaces' drivers of the audio
/// device and the webcam (tests/data/streaming_driver.py, under `monfs
/// run`): snd-usb-audio's disconnect keeps the streaming interface it
/// claimed (sysfs `driver`, USBDEVFS_GETDRIVER, and EBUSY for a claim)
/// until that interface is detached too; uvcvideo's releases it, which a
/// program may then claim. The audio device's control interface given back
/// finds no driver while the card lives on (LIBUSB_ERROR_NOT_FOUND), and
/// snd-usb-audio again once the streaming interface is the program's.
#[test]
fn a_detached_control_interface_leaves_snd_usb_audio_its_streaming_interface() {
    let out = python_under_monfs_run(
        "{port: 1, kind: audio}\n        - {port: 2, kind: webcam}",
        "streaming_driver.py",
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "uac control - streaming snd-usb-audio",
            "uac kernel driver active True",
            "uac claim -16",
            "uac attach 0 -5 -",
            "uac detached -",
            "uac claim 0 usbfs",
            "uac attach 0 0 snd-usb-audio",
            "uac streaming usbfs",
            "uvc control - streaming -",
            "uvc kernel driver active False",
            "uvc claim 0 usbfs",
        ]
    );
}

/// A pyusb program that takes the webcam's and the audio device's
/// streaming interfaces from uvcvideo and snd-usb-audio gets the answers
/// those drivers get (tests/data/class_requests.py, under `monfs run`):
/// UVC's probe and commit controls (SET_CUR, GET_CUR/MAX/DEF of the probe,
/// GET_INFO, GET_LEN), the settings selected, and a stall for a control
/// the device does not have (UAC's sampling frequency on the endpoint:
/// qemu's usb-audio has none, and stalled it in kernel-vm), and the
/// drivers' attach at the end (LIBUSB_ERROR_NOT_FOUND: neither binds a
/// streaming interface).
#[test]
fn pyusb_sends_uvc_and_uac_requests_as_the_drivers_do() {
    let out = python_under_monfs_run(
        "{port: 1, kind: webcam}\n        - {port: 2, kind: audio}",
        "class_requests.py",
    );
    // The probe block: bmHint 1, format 1, frame 1, 333333 x 100 ns,
    // dwMaxVideoFrameSize 614400, dwMaxPayloadTransferSize 1024.
    let block = "0100010115160500000000000000000000000060090000040000";
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "uvc SET_CUR probe 0 26".to_string(),
            format!("uvc GET_CUR probe 0 {block}"),
            format!("uvc GET_MAX probe 0 {block}"),
            format!("uvc GET_DEF probe 0 {block}"),
            "uvc GET_INFO probe 0 03".to_string(),
            "uvc GET_LEN commit 0 1a00".to_string(),
            "uvc GET_MIN commit -32".to_string(),
            "uvc SET_CUR commit 0 26".to_string(),
            "uvc GET_CUR selector 9 -32".to_string(),
            "uvc alt 1".to_string(),
            "uvc attach -2".to_string(),
            "uac SET_CUR sampling frequency -32".to_string(),
            "uac GET_CUR selector 9 -32".to_string(),
            "uac attach -2".to_string(),
            "attached 32".to_string(),
        ]
    );
}

/// Isochronous URBs queued without USBDEVFS_URB_ISO_ASAP, each with a
/// start_frame of its caller's (tests/c/usbfs_iso_stream.c, raw usbfs:
/// libusb always sets ASAP), on an audio device alone on an OHCI bus:
/// usbmon's S line shows the caller's value, as devio.c copies it into the
/// URB; the C lines show the HCD's frames, one URB right after the other
/// (the HCDs continue a queued endpoint's stream and ignore the caller's
/// frame); the reap leaves the caller's field as it was (processcompl
/// writes status, lengths and error_count only).
#[test]
fn isochronous_urbs_without_asap_continue_their_endpoints_stream() {
    let td = tempfile::tempdir().unwrap();
    let m = Mount::with_config(
        "usb:\n  buses:\n    - bus: 2\n      controller: ohci\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: audio}\n",
    );
    let tool = common::compile_c("usbfs_iso_stream", td.path());
    let node = wait_node(&m, "dev/bus/usb/002/002");
    let mut mon = Command::new("cat")
        .arg(m.path("usb/usbmon/2u"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The reader's lines of the program's URBs (S with 128 packets, and
    // the C of the same URBs), read as they come.
    let stdout = mon.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        let mut ids: Vec<String> = Vec::new();
        for (n, l) in std::io::BufRead::lines(std::io::BufReader::new(stdout)).enumerate() {
            let Ok(l) = l else { return };
            if n == 0 && tx.send(String::new()).is_err() {
                return;
            }
            let w: Vec<&str> = l.split(' ').collect();
            if w.len() < 6 || w[3] != "Zo:2:002:1" {
                continue;
            }
            if w[2] == "S" && w[5] == "128" {
                ids.push(w[0].to_string());
            }
            if ids.iter().any(|i| i == w[0]) && tx.send(l.clone()).is_err() {
                return;
            }
        }
    });
    // The audio driver's stream runs until the program detaches it: a
    // line of it (an empty string here) says the reader is in place.
    assert_eq!(rx.recv().unwrap(), "");
    let out = stdout_ok(
        Command::new(&tool)
            .arg(&node)
            .args("1 1 01 192 128 4".split(' ')),
        "usbfs_iso_stream",
    );
    let reaped: Vec<&str> = out.lines().collect();
    assert_eq!(reaped.len(), 4, "{out}");
    let ours: Vec<String> = rx.iter().take(8).collect();
    let _ = mon.kill();
    let _ = mon.wait();
    for (i, l) in reaped.iter().enumerate() {
        assert_eq!(
            *l,
            format!("urb={i} status=0 start_frame=12345 error_count=0 actual=24576"),
            "usbmon: {ours:#?}"
        );
    }
    let field = |l: &String| l.split(' ').nth(4).unwrap().to_string();
    let s: Vec<String> = ours
        .iter()
        .filter(|l| l.contains(" S "))
        .map(field)
        .collect();
    assert_eq!(s, vec!["-115:1:12345"; 4]);
    let c: Vec<u32> = ours
        .iter()
        .filter(|l| l.contains(" C "))
        .map(|l| {
            let f = field(l);
            let v: Vec<&str> = f.split(':').collect();
            assert_eq!((v[0], v[3]), ("0", "0"), "{l}");
            v[2].parse().unwrap()
        })
        .collect();
    assert_eq!(c.len(), 4, "{ours:?}");
    for w in c.windows(2) {
        // OHCI's 16-bit frame number.
        assert_eq!(w[1], (w[0] + 128) & 0xffff, "{c:?}");
    }
}

/// A program detaches uvcvideo from the webcam's control interface
/// (tests/data/uvc_disconnect.py, pyusb under `monfs run`): uvcvideo's
/// disconnect kills the stream's URBs (-2) and puts the streaming interface
/// back to setting 0 before the ioctl returns, as uvc_unregister_video
/// stops the stream; attached again, uvcvideo binds and the old stream
/// stays over.
#[test]
fn detaching_uvcvideo_stops_its_stream() {
    let out = python_under_monfs_run("{port: 1, kind: webcam}", "uvc_disconnect.py");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            "before 1",
            "killed some then set 0: 0",
            "after 0",
            "attached uvcvideo setting 0"
        ]
    );
}
