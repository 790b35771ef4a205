//! usbmon's text interface through the real mount, with real `cat`, `ls`,
//! `head`, `dd` and `timeout`.

mod common;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{wait_blocked, Mount};

/// A bus with nothing on it and no hub polling: readers block forever.
const QUIET: &str = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n";

/// The strict `Nu`/`Nt` grammar (tests/common), without the parsed fields.
fn check_line(line: &str, u: bool) -> Result<(), String> {
    common::check_line(line, u).map(|_| ())
}

#[test]
fn line_checker_accepts_kernel_lines_and_rejects_drift() {
    // Lines captured from a real 6.12 kernel.
    for l in include_str!("data/kernel_1u.txt")
        .lines()
        .filter(|l| !l.is_empty())
    {
        check_line(l, true).unwrap();
    }
    check_line(
        "ffff888009800780 8659894 S Ci:002:00 s 80 06 0100 0000 0012 18 <",
        false,
    )
    .unwrap();
    for bad in [
        "ffff888009800780 8659894 S Ci:2:02:0 s 80 06 0100 0000 0012 18 <",
        "ffff888009800780 8659894 S Ci:1:002:0 s 80 06 100 0000 0012 18 <",
        "ffff888009800780 8659894 C Ci:1:002:0 0 18 = 12010002 000040 27060100",
        "ffff888009800780 8659894 S Bo:1:002:2 0 31 >",
        "FFFF888009800780 8659894 C Ii:1:002:1 0:8 4 = 01020304",
        "ffff8880abc0a540 171843070 C Bi:3:002:1 0 32 = 1fae68dc",
        "ffff8880abc0a540 17184307 X Bi:3:002:1 0 32 <",
        "ffff8880c1c82c00 171837167 C Zo:3:004:1 0:1:1016:0 4 0:0:192 0:192:192",
        "ffff8880abc0a540 171843070 S Ci:1:002:0 s 80 06",
    ] {
        assert!(check_line(bad, true).is_err(), "accepted {bad}");
    }
}

#[test]
fn layout_modes_and_symlink() {
    let m = Mount::default_config();
    let ls = m.sh_ok("ls usb/usbmon");
    let names: Vec<&str> = ls.split_whitespace().collect();
    assert_eq!(names, ["0s", "0u", "1s", "1t", "1u", "2s", "2t", "2u"]);
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    for n in &names {
        let md = std::fs::metadata(m.path(&format!("usb/usbmon/{n}"))).unwrap();
        assert_eq!(md.permissions().mode() & 0o7777, 0o600, "{n}");
        assert_eq!(md.uid(), uid, "{n}");
        assert!(md.is_file());
    }
    assert_eq!(
        m.sh_ok("ls usbmon/"),
        ls,
        "the old usbmon/ path lists the same files"
    );
    assert_eq!(m.sh_ok("readlink usbmon"), "usb/usbmon\n");
    let o = m.sh("cat usb/usbmon/0t");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such file or directory"));
    let o = m.sh("cat nonexistent/file");
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such file or directory"));
}

#[test]
fn u_and_t_lines_have_the_kernel_format() {
    let m = Mount::default_config();
    for (file, u) in [
        ("usb/usbmon/1u", true),
        ("usb/usbmon/1t", false),
        ("usb/usbmon/2u", true),
        ("usb/usbmon/0u", true),
    ] {
        let start = Instant::now();
        let out = m.sh_ok(&format!("timeout 10 head -n 60 {file}"));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 60, "{file}: {out}");
        for l in &lines {
            check_line(l, u).unwrap_or_else(|e| panic!("{file}: {e}"));
        }
        if file == "usb/usbmon/1u" {
            assert!(start.elapsed() < common::HANG, "1u traffic is too slow");
        }
    }
}

#[test]
fn default_config_shows_traffic() {
    // (Within a second on an idle machine; the test only waits for it.)
    let m = Mount::default_config();
    let out = m.sh_ok("timeout 30 head -n 1 usb/usbmon/1u");
    assert_eq!(out.lines().count(), 1, "no line from 1u");
}

#[test]
fn default_traffic_covers_every_transfer_kind() {
    let m = Mount::default_config();
    // Four seconds of traffic on an idle machine; more time under load.
    let out = m.sh_ok("timeout 10 cat usb/usbmon/0u || true");
    for (what, pat) in [
        ("interrupt IN completion", " C Ii:1:"),
        ("bulk OUT CBW", " S Bo:1:"),
        ("mass-storage CBW signature", "= 55534243"),
        ("CSW signature", "= 55534253"),
        ("ISO OUT on bus 1", " S Zo:1:"),
        ("ISO IN on bus 2", " C Zi:2:"),
        ("stall", " -32"),
        ("submit error", " E B"),
        ("root hub port status", " s a3 00 0000 000"),
    ] {
        assert!(
            out.contains(pat),
            "no {what} ({pat:?}) in 10 s of 0u:\n{out}"
        );
    }
}

#[test]
fn partial_reads_continue_the_same_line() {
    let m = Mount::default_config();
    // dd with bs=7 issues 7-byte reads; each returns at most the rest of a line.
    let out = m.sh_ok("timeout 10 dd if=usb/usbmon/1u bs=7 count=200 status=none");
    let lines: Vec<&str> = out.split_inclusive('\n').collect();
    assert!(lines.len() >= 5, "{out}");
    for l in &lines[..lines.len() - 1] {
        check_line(l.trim_end_matches('\n'), true).unwrap();
    }
}

#[test]
fn nonblocking_read_gives_eagain() {
    let m = Mount::with_config(QUIET);
    // The root hub enumerates itself when the mount starts; once it is done
    // the bus is silent and a non-blocking read of a fresh reader has nothing.
    let deadline = Instant::now() + common::HANG;
    loop {
        let o = m.sh("dd if=usb/usbmon/1u iflag=nonblock bs=4096 count=1 status=none");
        let e = String::from_utf8_lossy(&o.stderr).to_string();
        if !o.status.success() {
            assert!(e.contains("Resource temporarily unavailable"), "{e}");
            break;
        }
        assert!(Instant::now() < deadline, "1u never became empty");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn blocked_cat(m: &Mount, file: &str) -> std::process::Child {
    let c = Command::new("cat")
        .arg(m.path(file))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_blocked(c.id());
    c
}

/// Wait for `child` to end; common::HANG without it is a hang (how fast it dies is
/// not asserted: tests do not depend on timing).
fn wait_gone(child: &mut std::process::Child) {
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        assert!(
            start.elapsed() < common::HANG,
            "reader did not die (state {:?})",
            common::proc_state(child.id())
        );
        std::thread::sleep(Duration::from_micros(500));
    }
}

#[test]
fn ctrl_c_ends_a_blocked_reader_and_the_daemon_stays_healthy() {
    let mut m = Mount::with_config(QUIET);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGKILL] {
        let mut c = blocked_cat(&m, "usb/usbmon/1u");
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, sig) };
        wait_gone(&mut c);
        assert!(m.alive(), "daemon died");
        // The daemon serves the next reader and knows the old one is gone.
        let ns = m.sh_ok("cat usb/usbmon/1s");
        assert!(
            ns.starts_with("nreaders 0 events ") && ns.ends_with(" text_lost 0\n"),
            "{ns}"
        );
    }
    // `timeout -s INT` as a user would do it.
    let o = m.sh("timeout -s INT 0.3 cat usb/usbmon/1u");
    assert_eq!(o.status.code(), Some(124));
    assert!(m.alive());
}

#[test]
fn stalled_reader_loses_events_counted_in_ns() {
    let m = Mount::default_config();
    // Hold 1u open without reading while traffic flows until more than the
    // queue's 93 events came (however slowly the machine runs); the queue
    // fills and further events are lost.
    let out = m.sh_ok(
        "exec 3<usb/usbmon/1u; n=0; \
         until [ \"$(cut -d' ' -f4 usb/usbmon/1s)\" -gt 93 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; \
         cat usb/usbmon/1s; exec 3<&-; cat usb/usbmon/1s",
    );
    let lines: Vec<&str> = out.lines().collect();
    let parse = |l: &str| -> (u32, u32, u32) {
        let w: Vec<&str> = l.split(' ').collect();
        assert_eq!(w.len(), 6, "{l}");
        assert_eq!(
            (w[0], w[2], w[4]),
            ("nreaders", "events", "text_lost"),
            "{l}"
        );
        (
            w[1].parse().unwrap(),
            w[3].parse().unwrap(),
            w[5].parse().unwrap(),
        )
    };
    let (readers, events, lost) = parse(lines[0]);
    assert_eq!(readers, 1);
    assert!(events > 93, "{out}");
    assert_eq!(
        lost,
        events - 93,
        "every event past the 93-event queue is lost: {out}"
    );
    assert_eq!(parse(lines[1]).0, 0);
}

#[test]
fn writes_are_refused() {
    let m = Mount::default_config();
    for f in ["usb/usbmon/1u", "usb/usbmon/1s", "usb/devices"] {
        let o = m.sh(&format!("echo x > {f}"));
        assert!(!o.status.success(), "{f}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(
            e.contains("Permission denied") || e.contains("not permitted"),
            "{f}: {e}"
        );
    }
}

#[test]
fn usb_devices_has_the_kernel_format() {
    let m = Mount::default_config();
    // Wait until every configured device has enumerated.
    let deadline = Instant::now() + common::HANG;
    let mut out = m.sh_ok("cat usb/devices");
    while out.matches("T:  Bus=").count() < 9 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
        out = m.sh_ok("cat usb/devices");
    }
    let mut t_lines = 0;
    // As in the kernel, every device block starts with an empty line.
    assert!(out.starts_with("\nT:  Bus=01 "), "{out}");
    for block in out
        .split("\n\n")
        .map(|b| b.trim_start_matches('\n'))
        .filter(|b| !b.trim().is_empty())
    {
        let first = block.lines().next().unwrap();
        assert!(first.starts_with("T:  Bus="), "{block}");
        t_lines += 1;
        for l in block.lines() {
            let tag = &l[..3];
            assert!(
                ["T: ", "B: ", "D: ", "P: ", "S: ", "C: ", "C:*", "A: ", "I: ", "I:*", "E: "]
                    .contains(&tag),
                "unexpected line {l:?}"
            );
        }
        assert!(block.contains("\nD:  Ver="), "{block}");
        assert!(block.contains("\nP:  Vendor="), "{block}");
    }
    // Root hubs of both buses plus keyboard, mouse, storage, hub, audio, webcam, reader.
    assert_eq!(t_lines, 9, "{out}");
    assert!(
        out.contains("T:  Bus=01 Lev=00 Prnt=00 Port=00 Cnt=00 Dev#=  1 Spd=480  MxCh= 4\n"),
        "{out}"
    );
    assert!(out.contains("Cls=03(HID  )"));
    assert!(out.contains("Cls=08(stor.)"));
    assert!(out.contains("Cls=09(hub  )"));
}

#[test]
fn bad_config_names_field_line_and_column_and_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.yaml");
    std::fs::write(&p, "usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: toaster\n").unwrap();
    for args in [
        vec!["check-config", p.to_str().unwrap()],
        vec![
            "mount",
            "/nonexistent",
            "--config",
            p.to_str().unwrap(),
            "--foreground",
        ],
    ] {
        let o = Command::new(common::monfs_bin())
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains("bad.yaml:6:"), "{e}");
        assert!(e.contains("usb.buses[0].devices[0].kind"), "{e}");
        assert!(e.contains("toaster"), "{e}");
    }
    let ok = dir.path().join("ok.yaml");
    std::fs::write(&ok, include_str!("../config/default.yaml")).unwrap();
    let o = Command::new(common::monfs_bin())
        .args(["check-config", ok.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
}

/// With nobody reading, the buses run in batches every 2 s instead of
/// waking for every event. A reader that opens after such a spell sees the
/// events from its open on, in order and without a gap, as if the buses
/// had run all along (nothing here depends on how long anything takes).
#[test]
fn a_reader_after_an_idle_spell_sees_events_from_its_open_on() {
    const WRAP: u64 = 4_096_000_000;
    let m = Mount::default_config();
    // Longer than a nap (2 s): the buses are behind the clock now.
    std::thread::sleep(Duration::from_millis(2500));
    let mono_us = || {
        let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap();
        (t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000) % WRAP
    };
    let t0 = mono_us();
    let out = m.sh_ok("timeout 30 head -n 300 usb/usbmon/1u");
    let ts: Vec<u64> = out
        .lines()
        .map(|l| common::check_line(l, true).unwrap().ts as u64)
        .collect();
    assert_eq!(ts.len(), 300, "{out}");
    // `a` is at or after `b` (timestamps wrap at 4096 s).
    let after = |a: u64, b: u64| (a + WRAP - b) % WRAP < WRAP / 2;
    assert!(
        after(ts[0], t0),
        "first event at {} us, before the open at {t0} us",
        ts[0]
    );
    for w in ts.windows(2) {
        assert!(after(w[1], w[0]), "time went back: {w:?}");
        // Bus 1 has an isochronous webcam with a URB every 4 ms: a gap of
        // 100 ms would be events lost in a batch.
        assert!((w[1] + WRAP - w[0]) % WRAP < 100_000, "gap: {w:?}");
    }
}

/// More blocked readers on one CPU than a mount keeps request slots for at
/// first (through io_uring, `MONFS_TEST_IO_URING=1`: 4 ring entries per CPU
/// queue, each held by its request until it is answered, so the queue must
/// grow) leave the mount serving that CPU: a status read from it is
/// answered, every reader gets the lines of a device plugged meanwhile, and
/// all of them die on SIGINT.
#[test]
fn many_blocked_readers_on_one_cpu_leave_the_mount_serving() {
    const N: usize = 12;
    let mut m = Mount::with_config(QUIET);
    let mut cats: Vec<(std::process::Child, std::path::PathBuf)> = (0..N)
        .map(|i| {
            let out = m.dir.path().join(format!("reader{i}.txt"));
            let c = Command::new("taskset")
                .args(["-c", "0", "cat"])
                .arg(m.path("usb/usbmon/1u"))
                .stdout(std::fs::File::create(&out).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            wait_blocked(c.id());
            (c, out)
        })
        .collect();
    // `timeout`: a queue that does not grow leaves this read waiting.
    let o = Command::new("timeout")
        .args(["30", "taskset", "-c", "0", "cat"])
        .arg(m.path("usb/usbmon/1s"))
        .output()
        .unwrap();
    let ns = String::from_utf8_lossy(&o.stdout);
    assert!(ns.starts_with(&format!("nreaders {N} ")), "{ns}");
    let (ok, out) = m.ctl(&["plug", "1", "2", "hid-mouse"]);
    assert!(ok, "{out}");
    for (c, out) in &cats {
        let start = Instant::now();
        while std::fs::metadata(out).unwrap().len() == 0 {
            assert!(
                start.elapsed() < common::HANG,
                "reader {} got no line (state {:?})",
                c.id(),
                common::proc_state(c.id())
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let text = std::fs::read_to_string(out).unwrap();
        let first = text.lines().next().unwrap_or_default();
        check_line(first, true).unwrap_or_else(|e| panic!("{e}: {first:?}"));
    }
    for (c, _) in cats.iter_mut() {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        wait_gone(c);
    }
    assert!(m.alive(), "daemon died");
}
