//! Hostile captures through the real mount: a 104-byte pcap whose one packet
//! claims 4 GiB (usbmon header `len_cap`), and one whose record header
//! claims 4 GiB, must neither exhaust memory nor stop the daemon; replay
//! sources that are FIFOs, devices or other users' files get nowhere.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::Mount;
use monfs::capture::sample_events;
use monfs::capture::write::{write_events, Format, LinkType};
use monfs::control::{send_with_file, MAX_PASSED_FILES};
use monfs::sim::usb::replay::NEEDS_DESCRIPTOR;
use monfs::usbmon::event::{DataCapture, EventKind, XferType};
use monfs::usbmon::header::encode_event;

/// A pcap (linktype 220) of one bulk OUT submission of 4 GiB - 1 whose
/// usbmon header claims all of it while no data byte follows; the record
/// header claims `incl` bytes (64 are present).
fn huge_capture(incl: u32) -> Vec<u8> {
    let mut ev = sample_events(1)
        .into_iter()
        .find(|e| e.xfer == XferType::Bulk && e.kind == EventKind::Submit && !e.dir_in)
        .unwrap();
    ev.transfer_buffer_length = u32::MAX;
    ev.data = Some(Vec::new().into());
    ev.data_capture = DataCapture::Partial(0);
    let mut pkt = encode_event(&ev, usize::MAX);
    pkt[36..40].copy_from_slice(&u32::MAX.to_ne_bytes());
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 0x0004_0000, 220] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    for v in [1_700_000_000u32, 0, incl, incl] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    b.extend_from_slice(&pkt);
    b
}

fn vm_rss_kib(pid: u32) -> u64 {
    common::vm_rss_kib(pid).expect("the daemon's VmRSS")
}

/// Bus 1 loops the 4 GiB `len_cap` capture (decoded from the 64 bytes
/// present, as a snapshot-cut packet) while a text and a binary reader
/// follow it; bus 2's capture, whose record claims 4 GiB, fails with its
/// offset. The daemon serves on, well under 200 MiB.
#[test]
fn four_gib_claims_replay_in_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.pcap");
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&huge, huge_capture(64)).unwrap();
    std::fs::write(&cut, huge_capture(u32::MAX)).unwrap();
    assert_eq!(std::fs::metadata(&huge).unwrap().len(), 104);
    let cfg = format!(
        "usb:\n  buses:\n    - bus: 1\n      replay: {{file: {}, loop: true}}\n    - bus: 2\n      replay: {{file: {}}}\n",
        huge.display(),
        cut.display()
    );
    let mut m = Mount::with_config(&cfg);
    let pid = m.child.id();
    let deadline = Instant::now() + common::HANG;
    let log = loop {
        let log = m.log_text();
        if log.contains("bus 1: replaying") && log.contains("bus 2: replay stopped") {
            break log;
        }
        assert!(Instant::now() < deadline, "no replay in 10 s:\n{log}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        log.contains("1 events") && log.contains("1 packets cut by the snapshot length"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "{}: byte offset 24: packet 0: captured length 4294967295 is not plausible",
            cut.display()
        )),
        "{log}"
    );
    // Readers see the replayed URB: text, and binary (zeros up to the
    // ring's fifth, streamed into the ring).
    let text = m.sh_ok("head -n 3 usb/usbmon/1u");
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.lines()
            .all(|l| l.contains(" S Bo:1:") && l.contains(" 4294967295 ")),
        "{text}"
    );
    m.sh_ok("head -c 1000000 dev/usbmon1 > /dev/null");
    let devices = m.sh_ok("cat usb/devices");
    assert!(devices.contains("Bus=01"), "{devices}");
    assert!(m.alive());
    let rss = vm_rss_kib(pid);
    assert!(rss < 200 * 1024, "VmRSS {rss} kB");
}

/// A replay source is a file the client opened and passed (SCM_RIGHTS):
/// the daemon opens no path for anyone, reads only regular files, and
/// neither a FIFO, nor a symlink to /dev/zero, nor a file the client cannot
/// read gets it to block, fill memory or read for the client.
#[test]
fn replay_sources_are_passed_files_never_paths() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut m = Mount::with_config("usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n");
    let pid = m.child.id();
    let sock = std::path::PathBuf::from(m.sh_ok("cat monfs/socket").trim());

    // A real capture, named relative to the client's directory: it plays,
    // labelled by its absolute path.
    let good = dir.path().join("good.pcap");
    write_events(&good, &sample_events(1), Format::PcapNg, LinkType::Mmapped).unwrap();
    let out = common::stdout_ok(
        Command::new(common::monfs_bin())
            .current_dir(dir.path())
            .args(["ctl", "/nonexistent", "--socket"])
            .arg(&sock)
            .args(["replay", "start", "1", "good.pcap", "speed=1000", "loop"]),
        "monfs ctl replay start",
    );
    assert_eq!(
        out,
        format!(
            "ok bus 1: replaying {} at speed 1000, looping\n",
            good.display()
        )
    );
    let text = m.sh_ok(&format!("head -n {} usb/usbmon/1u", sample_events(1).len()));
    assert_eq!(text.lines().count(), sample_events(1).len(), "{text}");

    // A FIFO (no writer) and a symlink to /dev/zero: refused at once.
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let zero = dir.path().join("zero.pcap");
    std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
    for p in [&fifo, &zero] {
        let start = Instant::now();
        let (ok, out) =
            common::ctl_socket(None, &sock, &["replay", "start", "1", p.to_str().unwrap()]);
        assert!(!ok, "{out}");
        assert_eq!(out, format!("error: {}: not a regular file\n", p.display()));
        assert!(start.elapsed() < common::HANG);
    }

    // A file only root may read, asked for by nobody: the client cannot
    // open it, so nothing is sent.
    let secret = dir.path().join("secret.pcap");
    std::fs::copy(&good, &secret).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let (ok, out) = common::ctl_socket(
        Some(65534),
        &sock,
        &["replay", "start", "1", secret.to_str().unwrap()],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("cannot open") && out.contains("Permission denied"),
        "{out}"
    );
    // A path alone (a hand-made client, or monfs/ctl) is never opened.
    let line = format!("replay start 1 {}\n", secret.display());
    let mut s = UnixStream::connect(&sock).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert_eq!(answer, format!("error: {NEEDS_DESCRIPTOR}\n"));
    let w = m.sh(&format!("printf '{}' > monfs/ctl", line.trim_end()));
    assert!(!w.status.success());
    assert!(
        String::from_utf8_lossy(&w.stderr).contains("Invalid argument"),
        "{w:?}"
    );

    // A directory passed as the file, and descriptors piling up unused.
    let d = std::fs::File::open(dir.path()).unwrap();
    let mut s = UnixStream::connect(&sock).unwrap();
    send_with_file(&mut s, b"replay start 1 dir\n", Some(&d)).unwrap();
    let mut buf = [0u8; 4096];
    let n = s.read(&mut buf).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&buf[..n]),
        "error: dir: not a regular file\n"
    );
    for _ in 0..=MAX_PASSED_FILES {
        send_with_file(&mut s, b"h", Some(&d)).unwrap();
    }
    let mut rest = String::new();
    let _ = s.read_to_string(&mut rest);
    assert_eq!(rest, "error: too many descriptors waiting for commands\n");
    let log = m.log_text();
    assert!(
        log.contains("control connection closed: too many descriptors"),
        "{log}"
    );

    // Still serving, in bounded memory, holding none of those files.
    assert!(m.alive());
    let (ok, out) = common::ctl_socket(None, &sock, &["replay", "status", "1"]);
    assert!(
        ok && out.contains(&format!("replay {}: playing", good.display())),
        "{out}"
    );
    assert!(vm_rss_kib(pid) < 200 * 1024);
    // (The connection threads let go of their descriptors as they end,
    // which may be just after the client saw the close.)
    let held = || {
        std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| t.starts_with(dir.path()))
            .collect::<Vec<_>>()
    };
    let deadline = Instant::now() + common::HANG;
    while !held().is_empty() {
        assert!(Instant::now() < deadline, "daemon still holds {:?}", held());
        std::thread::sleep(Duration::from_millis(20));
    }
}
