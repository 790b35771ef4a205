//! Hostile captures through the real mount: a 104-byte pcap whose one packet
//! claims 4 GiB (usbmon header `len_cap`), and one whose record header
//! claims 4 GiB, must neither exhaust memory nor stop the daemon.

mod common;

use std::time::{Duration, Instant};

use common::Mount;
use monfs::sim::usb::replay::sample_events;
use monfs::usbmon::binary::encode_event;
use monfs::usbmon::event::{DataCapture, EventKind, XferType};

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
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let l = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    l.split_whitespace().nth(1).unwrap().parse().unwrap()
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
    let deadline = Instant::now() + Duration::from_secs(10);
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
