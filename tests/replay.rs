//! Capture replay and record through the real mount: captures made with the
//! project's own writer are replayed on a bus, captured back with tcpdump in
//! a private mount namespace, and compared packet for packet.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{tcpdump, Mount};
use monfs::capture::decode::Capture;
use monfs::capture::read::{parse_records, read_records, RawRecord};
use monfs::capture::sample_events;
use monfs::capture::write::{write_events, Format, LinkType};
use monfs::cli::record::record_from_device;
use monfs::usbmon::text::{format_line, TextFormat};

/// A packet without its timestamp (bytes 16..28) and bus number (12..14).
fn key(pkt: &[u8]) -> Vec<u8> {
    let mut k = pkt.to_vec();
    k[12..14].fill(0);
    k[16..28].fill(0);
    k
}

/// The packets of `got` that belong to the capture's URBs (by URB id):
/// without those of libpcap's device probe, which sends a GET_DESCRIPTOR
/// through usbfs to every device of the bus when tcpdump starts capturing,
/// as on a kernel.
fn replayed(got: Vec<RawRecord>, want: &[RawRecord]) -> Vec<RawRecord> {
    let ids: std::collections::HashSet<&[u8]> = want.iter().map(|w| &w.data[..8]).collect();
    let (kept, probe): (Vec<RawRecord>, Vec<RawRecord>) =
        got.into_iter().partition(|g| ids.contains(&g.data[..8]));
    // The probe's are control transfers (type 2).
    assert!(
        probe.iter().all(|p| p.data[9] == 2),
        "{} other packets",
        probe.len()
    );
    kept
}

fn header_usec(pkt: &[u8]) -> i64 {
    let sec = i64::from_ne_bytes(pkt[16..24].try_into().unwrap());
    let usec = i32::from_ne_bytes(pkt[24..28].try_into().unwrap());
    sec * 1_000_000 + usec as i64
}

/// Replayed once at double speed on bus 1 and captured back by tcpdump in
/// mmap mode: the same packets (only the bus number, rewritten from 7, and
/// the timestamps differ), with the original spacing halved. Meanwhile bus 2
/// fails on a truncated capture and bus 3 simulates a mouse undisturbed.
#[test]
fn tcpdump_recaptures_a_replayed_pcapng_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcapng");
    let evs = sample_events(7);
    write_events(&input, &evs, Format::PcapNg, LinkType::Mmapped).unwrap();
    let bad = dir.path().join("bad.pcap");
    write_events(&bad, &evs, Format::Pcap, LinkType::Mmapped).unwrap();
    let b = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &b[..b.len() - 100]).unwrap();
    let cfg = format!(
        "usb:\n  buses:\n    - bus: 1\n      replay: {{file: {}, speed: 2, after_ms: 2000}}\n    - bus: 2\n      replay: {{file: {}}}\n    - bus: 3\n      hub_poll_ms: 0\n      devices:\n        - {{port: 1, kind: hid-mouse, interval_ms: 10}}\n",
        input.display(),
        bad.display()
    );
    let mut m = Mount::with_config(&cfg);
    let out = dir.path().join("out.pcap");
    tcpdump(&m, "usbmon1", 5, &out);
    let (_, want) = read_records(&input).unwrap();
    let (_, got) = read_records(&out).unwrap();
    let got = replayed(got, &want);
    assert_eq!(got.len(), want.len(), "log:\n{}", m.log_text());
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.linktype, 220);
        assert_eq!(key(&g.data), key(&w.data), "packet {}", w.index);
        assert_eq!(u16::from_ne_bytes([g.data[12], g.data[13]]), 1);
    }
    let t0 = header_usec(&got[0].data);
    let w0 = header_usec(&want[0].data);
    for (g, w) in got.iter().zip(&want) {
        let dg = header_usec(&g.data) - t0;
        let dw = (header_usec(&w.data) - w0) / 2;
        assert!((dg - dw).abs() <= 1, "spacing {dg} us, want {dw} us");
    }
    // The truncated packet is the last one; the error names its offset.
    let (_, full) = parse_records(&bad, &b).unwrap();
    let last = full.last().unwrap();
    let log = m.log_text();
    let want_err = format!(
        "bus 2: replay stopped, nothing replayed: {}: byte offset {}: packet {}: truncated",
        bad.display(),
        last.offset,
        last.index
    );
    assert!(
        log.lines()
            .any(|l| l.contains("ERROR") && l.contains(&want_err)),
        "no line with {want_err:?}:\n{log}"
    );
    let three = m.sh_ok("head -n 3 usb/usbmon/3u");
    assert_eq!(three.lines().count(), 3);
    assert!(three.contains(":3:"), "{three}");
    assert!(m.alive());
}

/// Find where `got` starts in the looping `want` and check it follows it.
fn check_cyclic(got: &[Vec<u8>], want: &[Vec<u8>]) {
    let start = want
        .iter()
        .position(|w| *w == got[0])
        .expect("first packet is one of the capture's");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, want[(start + i) % want.len()], "packet {i}");
    }
}

/// A 189 pcap looping at four times the speed, captured back by tcpdump
/// through the read path (linktype 189): packet for packet, pass after
/// pass. The text view shows the same events.
#[test]
fn looping_linktype_189_pcap_through_the_read_path() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.pcap");
    let evs = sample_events(1);
    write_events(&input, &evs, Format::Pcap, LinkType::Linux).unwrap();
    let cfg = format!(
        "usb:\n  buses:\n    - bus: 1\n      replay: {{file: {}, speed: 4, loop: true}}\n",
        input.display()
    );
    let m = Mount::start(Some(&cfg), &["--no-mmap"]);
    let out = dir.path().join("out.pcap");
    tcpdump(&m, "usbmon1", 3, &out);
    let (_, want) = read_records(&input).unwrap();
    let (_, got) = read_records(&out).unwrap();
    let got = replayed(got, &want);
    assert!(
        got.len() > 2 * want.len(),
        "{} packets in 3 s: the loop should give more",
        got.len()
    );
    assert!(got.iter().all(|r: &RawRecord| r.linktype == 189));
    let want: Vec<Vec<u8>> = want.iter().map(|r| key(&r.data)).collect();
    let got: Vec<Vec<u8>> = got.iter().map(|r| key(&r.data)).collect();
    check_cyclic(&got, &want);

    let cap = Capture::load(&input).unwrap();
    let strip = |l: &str| {
        let mut w: Vec<&str> = l.split(' ').collect();
        w.remove(1);
        w.join(" ")
    };
    let want: Vec<String> = cap
        .events
        .iter()
        .map(|e| strip(&format_line(e, TextFormat::U)))
        .collect();
    let text = m.sh_ok(&format!("head -n {} usb/usbmon/1u", 2 * want.len()));
    let got: Vec<String> = text.lines().map(|l| strip(&format!("{l}\n"))).collect();
    let start = want.iter().position(|w| *w == got[0]).expect("known line");
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, want[(start + i) % want.len()], "line {i}");
    }
}

/// `monfs record`'s engine, from this process through dev/usbmon1 with
/// GETX: a pcapng of linktype 220 that replay accepts and tcpdump reads.
#[test]
fn record_from_the_device_file() {
    let m = Mount::default_config();
    let out = m.dir.path().join("rec.pcapng");
    let n = record_from_device(
        &m.path("dev/usbmon1"),
        &out,
        Some(Duration::from_millis(1500)),
        Format::PcapNg,
    )
    .unwrap();
    assert!(n > 10, "only {n} packets");
    let (_, recs) = read_records(&out).unwrap();
    assert_eq!(recs.len() as u64, n);
    assert!(recs.iter().all(|r| r.linktype == 220));
    let cap = Capture::load(&out).expect("every recorded packet is a usbmon record");
    assert!(cap.events.iter().all(|e| e.bus == 1));
    let o = Command::new("tcpdump")
        .arg("-r")
        .arg(&out)
        .arg("-n")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        text.lines().count() as u64,
        n,
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `monfs record` with no duration stops on Ctrl-C (SIGINT), blocked or
/// not, and leaves a complete capture (tests the CLI tools' shared signal
/// handling).
#[test]
fn record_stops_cleanly_on_sigint() {
    let m = Mount::default_config();
    let out = m.dir.path().join("int.pcapng");
    let mut c = Command::new(common::monfs_bin())
        .arg("record")
        .arg(m.root())
        .args(["-b", "1", "-o"])
        .arg(&out)
        .spawn()
        .unwrap();
    // Wait until it has written its header and some packets.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&out).map(|md| md.len()).unwrap_or(0) < 1000 {
        assert!(std::time::Instant::now() < deadline, "nothing recorded");
        std::thread::sleep(Duration::from_millis(20));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let st = c.wait().unwrap();
    assert!(st.success(), "{st}");
    let (_, recs) = read_records(&out).unwrap();
    assert!(!recs.is_empty());
    Capture::load(&out).expect("a complete capture");
}

/// `replay start 2` on the default configuration mixes the capture with bus
/// 2's live webcam and card reader: the capture's device (address 2, the
/// webcam's) takes
/// an address none of them has, and `2u` never shows two devices at one.
/// `check-config` refuses a replay file that is missing or not a capture.
#[test]
fn replay_beside_live_devices_gets_free_addresses() {
    let mut m = Mount::default_config();
    let cap = m.dir.path().join("dev2.pcap");
    // The capture's device is at 2, where bus 2's webcam is.
    let mut evs = sample_events(1);
    for e in &mut evs {
        e.devnum = 2;
    }
    write_events(&cap, &evs, Format::Pcap, LinkType::Mmapped).unwrap();
    let out = m.dir.path().join("2u.txt");
    // Bus 2's webcam and card reader have their addresses.
    let deadline = std::time::Instant::now() + common::HANG;
    let devices = loop {
        let d = m.sh_ok("cat usb/devices");
        if d.matches("T:  Bus=02 Lev=01").count() == 2 {
            break d;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "bus 2 never enumerated:\n{d}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(devices.contains("Dev#=  2 "), "{devices}");
    // Every line of 2u, live and replayed, in a file the test reads.
    let mut cat = Command::new("timeout")
        .arg("120")
        .arg("sh")
        .arg("-c")
        .arg(format!(
            "exec cat {} > {}",
            m.path("usb/usbmon/2u").display(),
            out.display()
        ))
        .spawn()
        .unwrap();
    while !m.sh_ok("cat usb/usbmon/2s").starts_with("nreaders 1 ") {
        assert!(
            std::time::Instant::now() < deadline,
            "the reader never attached"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let sock = std::path::PathBuf::from(m.sh_ok("cat monfs/socket").trim());
    let (ok, o) = common::ctl_socket(
        None,
        &sock,
        &["replay", "start", "2", cap.to_str().unwrap(), "speed=100"],
    );
    assert!(ok, "{o}");
    let tags: std::collections::HashSet<String> =
        evs.iter().map(|e| format!("{:016x}", e.id)).collect();
    let is_replayed = |l: &str| tags.contains(l.split_whitespace().next().unwrap_or(""));
    loop {
        let text = std::fs::read_to_string(&out).unwrap();
        if text.lines().filter(|l| is_replayed(l)).count() == evs.len() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline + common::HANG,
            "the replay never finished:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(cat.id() as i32, libc::SIGINT) };
    let _ = cat.wait();
    let text = std::fs::read_to_string(&out).unwrap();
    let addr = |l: &str| -> String {
        // `Ii:2:005:1`: the address is the third field.
        l.split_whitespace()
            .nth(3)
            .unwrap()
            .split(':')
            .nth(2)
            .unwrap()
            .to_string()
    };
    let (replayed, live): (Vec<&str>, Vec<&str>) = text.lines().partition(|l| is_replayed(l));
    assert_eq!(replayed.len(), evs.len(), "{text}");
    let replayed_addrs: std::collections::HashSet<String> =
        replayed.iter().map(|l| addr(l)).collect();
    assert_eq!(replayed_addrs.len(), 1, "{replayed:?}");
    let live_addrs: std::collections::HashSet<String> = live.iter().map(|l| addr(l)).collect();
    assert!(
        replayed_addrs.is_disjoint(&live_addrs),
        "replayed {replayed_addrs:?}, live {live_addrs:?}\n{devices}"
    );
    // usb/devices lists bus 2's devices, none at the replayed address.
    let a: u32 = replayed_addrs.iter().next().unwrap().parse().unwrap();
    assert!(
        !devices
            .lines()
            .any(|l| l.starts_with("T:  Bus=02") && l.contains(&format!("Dev#={a:>3} "))),
        "{devices}"
    );
    assert!(m.alive());

    // check-config reads the replay files.
    let check = |file: &str| {
        let p = m.dir.path().join("c.yaml");
        std::fs::write(
            &p,
            format!("usb:\n  buses:\n    - bus: 3\n      replay: {{file: {file}}}\n"),
        )
        .unwrap();
        common::check_config(&p)
    };
    let (code, e) = check("/nonexistent/x.pcap");
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("usb.buses[0].replay.file: /nonexistent/x.pcap: No such file"),
        "{e}"
    );
    let junk = m.dir.path().join("junk.pcap");
    std::fs::write(&junk, b"not a capture at all").unwrap();
    let (code, e) = check(junk.to_str().unwrap());
    assert_eq!(code, Some(2), "{e}");
    assert!(
        e.contains("byte offset 0: not a pcap or pcapng file"),
        "{e}"
    );
    let (code, e) = check(cap.to_str().unwrap());
    assert_eq!(code, Some(0), "{e}");
}
