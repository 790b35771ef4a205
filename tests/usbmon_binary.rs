//! usbmon's binary interface through the real mount: C clients compiled in
//! the test, and real tcpdump in a private mount namespace.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{compile_c, wait_blocked, Mount};

const QUIET: &str =
    "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n    - bus: 2\n      hub_poll_ms: 0\n";

fn run(bin: &std::path::Path, args: &[&str]) -> (String, String) {
    let o = Command::new(bin).args(args).output().unwrap();
    assert!(
        o.status.success(),
        "{} {args:?}: {}\n{}",
        bin.display(),
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    (
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// Every ioctl and error path answers as Linux 6.12 does (the expected
/// transcript is the kernel's, measured with the same calls in qemu; see
/// kernel-abi.md section 7).
#[test]
fn ioctls_and_errors_match_the_kernel() {
    let m = Mount::with_config(QUIET);
    // No event may arrive during the transcript (STATS reads queued=0): a
    // paused bus, not a quiet moment (the root hub's start-up traffic can
    // come late on a loaded machine).
    m.sh_ok("echo 'pause 1' > monfs/ctl");
    let bin = compile_c("usbmon_ioctl", m.dir.path());
    let (out, _) = run(&bin, &[m.path("dev/usbmon1").to_str().unwrap()]);
    let expected = include_str!("data/usbmon_ioctl.expected");
    assert_eq!(out, expected);
}

/// The same calls from a 32-bit program reach the compat ioctls
/// (`MON_IOCX_GET32`, `MFETCH32`, `GETX32` with 4-byte pointers; no
/// allocation limit on GETX). The expected transcript is the 32-bit program's
/// output on Linux 6.12 (scripts/kernel-vm measures it on every run).
#[test]
fn compat_ioctls_of_32_bit_callers_match_the_kernel() {
    let m = Mount::with_config(QUIET);
    m.sh_ok("echo 'pause 1' > monfs/ctl");
    let bin = common::compile_c32("usbmon_ioctl", m.dir.path());
    let (out, _) = run(&bin, &[m.path("dev/usbmon1").to_str().unwrap()]);
    let expected = include_str!("data/usbmon_ioctl32.expected");
    assert_eq!(out, expected);
}

#[test]
fn device_files_and_modes() {
    let m = Mount::default_config();
    let out = m.sh_ok("stat -c '%n %a %s' dev/usbmon*");
    assert_eq!(
        out,
        "dev/usbmon0 600 307200\ndev/usbmon1 600 307200\ndev/usbmon2 600 307200\n"
    );
    let o = m.sh("cat dev/usbmon9");
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such file"));
}

fn strip_ts(line: &str) -> (u64, String) {
    let mut w: Vec<&str> = line.split(' ').collect();
    let ts: u64 = w[1].parse().unwrap();
    w.remove(1);
    (ts, w.join(" "))
}

/// The same URBs seen through `1u` and through the mmap ring are the same
/// events, field for field. With the virtual clock the monotonic clock starts
/// at 100 s and the wall clock at 1704067200 s, which is 128 s modulo 4096,
/// so the two timestamps differ by exactly 28 s.
#[test]
fn text_and_binary_views_agree_event_for_event() {
    let cfg = format!("clock: virtual\n{}", include_str!("../config/default.yaml"));
    let m = Mount::with_config(&cfg);
    let bin = compile_c("usbmon_mmap", m.dir.path());
    let text = Command::new("head")
        .args(["-n", "400"])
        .arg(m.path("usb/usbmon/1u"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let binv = Command::new(&bin)
        .arg(m.path("dev/usbmon1"))
        .arg("400")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = String::from_utf8(text.wait_with_output().unwrap().stdout).unwrap();
    let b = String::from_utf8(binv.wait_with_output().unwrap().stdout).unwrap();
    let tl: Vec<(u64, String)> = t.lines().map(strip_ts).collect();
    let bl: Vec<(u64, String)> = b
        .lines()
        .map(strip_ts)
        .map(|(ts, l)| ((ts + 4_096_000_000 - 28_000_000) % 4_096_000_000, l))
        .collect();
    assert!(
        tl.len() > 50 && bl.len() > 50,
        "too little traffic: {} / {}",
        tl.len(),
        bl.len()
    );
    let lo = tl[0].0.max(bl[0].0);
    let hi = tl.last().unwrap().0.min(bl.last().unwrap().0);
    let win = |v: &[(u64, String)]| -> Vec<(u64, String)> {
        v.iter()
            .filter(|(ts, _)| *ts >= lo && *ts <= hi)
            .cloned()
            .collect()
    };
    let (tw, bw) = (win(&tl), win(&bl));
    assert!(tw.len() > 50);
    for (i, (a, b)) in tw.iter().zip(bw.iter()).enumerate() {
        assert_eq!(
            a, b,
            "text and binary views differ at event {i} of the common window"
        );
    }
    assert_eq!(
        tw.len(),
        bw.len(),
        "the views hold different numbers of events"
    );
}

#[test]
fn read_get_and_getx_paths_deliver_the_same_format() {
    let m = Mount::default_config();
    let bin = compile_c("usbmon_read", m.dir.path());
    for mode in ["read", "get", "getx"] {
        let (out, err) = run(&bin, &[mode, m.path("dev/usbmon1").to_str().unwrap(), "40"]);
        assert_eq!(out.lines().count(), 40, "{mode}");
        assert!(err.contains("dropped 0"), "{mode}: {err}");
        for l in out.lines() {
            let w: Vec<&str> = l.split(' ').collect();
            assert!(["S", "C", "E"].contains(&w[2]), "{mode}: {l}");
            assert!(w[3].contains(":1:"), "{mode}: bus 1 only: {l}");
        }
    }
}

#[test]
fn poll_reports_readable_when_the_ring_fills() {
    let m = Mount::default_config();
    let bin = compile_c("usbmon_read", m.dir.path());
    let (out, _) = run(&bin, &["poll", m.path("dev/usbmon1").to_str().unwrap()]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1], "poll(10s) -> 1 revents=0x1", "{out}");
}

/// O_NONBLOCK changed with fcntl after open governs the blocking ioctls as it
/// does read() (libpcap's pcap_setnonblock works this way): EAGAIN once set,
/// a blocking wait (ended here by an alarm) once cleared.
#[test]
fn fcntl_nonblock_governs_blocking_ioctls() {
    let m = Mount::with_config(QUIET);
    // Nothing may arrive while a read is expected to block: a paused bus.
    m.sh_ok("echo 'pause 1' > monfs/ctl");
    let bin = compile_c("usbmon_read", m.dir.path());
    let (out, _) = run(&bin, &["fcntl", m.path("dev/usbmon1").to_str().unwrap()]);
    let eagain = "Resource temporarily unavailable";
    let eintr = "Interrupted system call";
    assert_eq!(
        out,
        format!(
            "set after open: read -> -1 {eagain}\n\
             set after open: GETX -> -1 {eagain}\n\
             set after open: MFETCH -> -1 {eagain}\n\
             cleared after open: read -> -1 {eintr}\n\
             cleared after open: GETX -> -1 {eintr}\n\
             cleared after open: MFETCH -> -1 {eintr}\n"
        )
    );
}

/// A small mapped ring wraps many times under a 10,000 events/s flood: '@'
/// fillers pad exactly to the end of the ring and no event crosses it
/// (soak_bin checks every header it fetches, the timestamps' order and the
/// flood's payload too), and every event from the reader's start on is either
/// fetched once or counted in MON_IOCG_STATS.dropped. Whether the reader keeps
/// pace with a real-time flood is up to the scheduler (on a loaded machine it
/// may not, and the kernel drops then too), so drops may happen but must add
/// up exactly: the bus is paused while the reader sizes its ring and again
/// before it drains, and `1s` counts what the bus delivered in between. The
/// reader says when it has fetched 12,000 events and met a filler; how many
/// wraps need one depends on where drops left the ring, so the test waits
/// for it (generously: it must come) instead of expecting it by a count.
#[test]
fn mmap_ring_with_fillers_over_many_events() {
    let cfg = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: flood\n          transfer_size: 150\n          rate: 10000\n";
    let m = Mount::with_config(cfg);
    let bin = compile_c("soak_bin", m.dir.path());
    let ctl = |cmd: &str| m.sh_ok(&format!("echo '{cmd}' > monfs/ctl"));
    // "nreaders N events N text_lost N"
    let events = || {
        let s = std::fs::read_to_string(m.path("usb/usbmon/1s")).unwrap();
        let w: Vec<&str> = s.split_whitespace().collect();
        assert_eq!(w[1], "1", "one reader on bus 1: {s}");
        w[3].parse::<u64>().unwrap()
    };
    ctl("pause 1");
    let mut c = Command::new(&bin)
        .args([m.path("dev/usbmon1").to_str().unwrap(), "1", "32", "262144"])
        // The drain (with the bus paused) ends when the ring is empty; the
        // time limit is only a hang detector.
        .arg("600000")
        .env("SOAK_BIN_SEEN", "12000")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let out = BufReader::new(c.stdout.take().unwrap());
    std::thread::spawn(move || {
        for l in out.lines() {
            let _ = tx.send(l.unwrap());
        }
    });
    // Waits for traffic that must come; the limit only detects a hang.
    let line = |c: &mut std::process::Child, want: &str| -> String {
        match rx.recv_timeout(Duration::from_secs(300)) {
            Ok(l) if l.starts_with(want) => l,
            r => {
                let _ = c.kill();
                panic!("soak_bin said {r:?}, not {want}...");
            }
        }
    };
    line(&mut c, "READY ring=262144");
    let before = events();
    ctl("resume 1");
    line(&mut c, "SEEN ");
    ctl("pause 1");
    let delivered = events() - before;
    // SAFETY: signalling our own child (SIGUSR1: drain, then report).
    unsafe { libc::kill(c.id() as i32, libc::SIGUSR1) };
    let end = line(&mut c, "END ");
    let status = c.wait().unwrap();
    let mut err = String::new();
    c.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(status.success(), "soak_bin: {status}: {err}{end}");
    let field = |k: &str| -> u64 {
        end.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("no {k}= in {end}"))
            .parse()
            .unwrap()
    };
    assert_eq!(field("drain_timeout"), 0, "{end}");
    assert!(field("seen") >= 12000, "{end}");
    assert!(field("fillers") >= 1, "{end}");
    assert_eq!(field("E"), 0, "the flood has no errors configured: {end}");
    assert_eq!(
        field("seen") + field("dropped"),
        delivered,
        "events fetched plus events dropped must be the events bus 1 delivered: {end}"
    );
}

#[test]
fn blocked_binary_reads_die_on_signals() {
    let mut m = Mount::with_config(QUIET);
    m.sh_ok("echo 'pause 1' > monfs/ctl");
    let bin = compile_c("usbmon_read", m.dir.path());
    let mmap = compile_c("usbmon_mmap", m.dir.path());
    for (prog, args) in [(&bin, vec!["read"]), (&bin, vec!["getx"]), (&mmap, vec![])] {
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        if a.is_empty() {
            a.push(m.path("dev/usbmon1").to_string_lossy().into());
        } else {
            a.push(m.path("dev/usbmon1").to_string_lossy().into());
            a.push("1".into());
        }
        let mut c = Command::new(prog)
            .args(&a)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_blocked(c.id());
        let start = std::time::Instant::now();
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
        c.wait().unwrap();
        assert!(
            start.elapsed() < common::HANG,
            "{a:?}: {:?}",
            start.elapsed()
        );
        assert!(m.alive());
    }
    let ns = m.sh_ok("cat usb/usbmon/1s");
    assert!(
        ns.starts_with("nreaders 0 events ") && ns.ends_with(" text_lost 0\n"),
        "{ns}"
    );
}

fn pcap_records(path: &std::path::Path) -> (u32, Vec<Vec<u8>>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(
        &b[..4],
        &[0xd4, 0xc3, 0xb2, 0xa1],
        "little-endian microsecond pcap"
    );
    let linktype = u32::from_le_bytes(b[20..24].try_into().unwrap());
    let mut recs = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        recs.push(b[at + 16..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    (linktype, recs)
}

fn check_capture(path: &std::path::Path, want_linktype: u32, hdr: usize) {
    let (lt, recs) = pcap_records(path);
    assert_eq!(lt, want_linktype);
    assert!(recs.len() > 20, "only {} packets", recs.len());
    for r in &recs {
        assert!(r.len() >= hdr);
        assert!([b'S', b'C', b'E'].contains(&r[8]), "type {}", r[8]);
        assert_eq!(u16::from_le_bytes([r[12], r[13]]), 1, "bus");
        let len_cap = u32::from_le_bytes(r[36..40].try_into().unwrap()) as usize;
        assert_eq!(r.len(), hdr + len_cap, "payload length");
    }
    // tcpdump decodes it: bus:device:endpoint and the payload bytes.
    let o = Command::new("tcpdump")
        .args(["-r"])
        .arg(path)
        .args(["-n", "-x"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    let decoded = text
        .lines()
        .filter(|l| l.contains(" from 1:") || l.contains(" to 1:"))
        .count();
    // libpcap's read path records len = header + urb_len even when the
    // captured bytes (ISO descriptors + data) are more, as on Linux; tcpdump
    // then reports "Invalid header" for those ISO records.
    let iso_longer = recs
        .iter()
        .filter(|r| {
            let len_urb = u32::from_le_bytes(r[32..36].try_into().unwrap()) as usize;
            hdr == 48 && r[9] == 0 && r[15] == 0 && r.len() - hdr > len_urb
        })
        .count();
    let invalid = text
        .lines()
        .filter(|l| l.starts_with("[Invalid header"))
        .count();
    assert_eq!(invalid, iso_longer);
    assert_eq!(decoded + invalid, recs.len());
    // A CBW from the flash drive shows with its signature.
    assert!(
        text.contains("5553 4243"),
        "no CBW payload decoded:\n{text}"
    );
}

#[test]
fn tcpdump_captures_in_mmap_mode_linktype_220() {
    let m = Mount::default_config();
    let out = m.dir.path().join("mmap.pcap");
    common::tcpdump(&m, "usbmon1", 3, &out);
    check_capture(&out, 220, 64);
    let script = env!("CARGO_MANIFEST_DIR").to_string() + "/scripts/usbmon-ns";
    let o = Command::new(script)
        .arg(m.root())
        .args(["tcpdump", "-D"])
        .output()
        .unwrap();
    let list = String::from_utf8_lossy(&o.stdout);
    for bus in 0..=2 {
        assert!(list.contains(&format!(".usbmon{bus} ")), "{list}");
    }
}

/// `monfs/requests` counts what a real client asked for, by request type and
/// ioctl command, with times in order; `> monfs/requests` starts it again.
#[test]
fn requests_table_counts_what_tcpdump_asked_for() {
    let m = Mount::default_config();
    let table = || std::fs::read_to_string(m.path("monfs/requests")).unwrap();
    // (count, waited, p50, max) of one type.
    let row = |t: &str, ty: &str| -> Option<(u64, u64, f64, f64)> {
        let l = t
            .lines()
            .find(|l| l.split_whitespace().next() == Some(ty))?;
        let f: Vec<&str> = l.split_whitespace().collect();
        Some((
            f[1].parse().ok()?,
            f[2].parse().ok()?,
            f[4].parse().ok()?,
            f[7].parse().ok()?,
        ))
    };
    let out = m.dir.path().join("req.pcap");
    common::tcpdump(&m, "usbmon1", 2, &out);
    let t = table();
    assert!(t.starts_with("# Requests served"), "{t}");
    // struct mon_bin_mfetch: a pointer and two u32.
    let mfetch = format!("IOCTL:_IOWR(0x92,7,{})", std::mem::size_of::<usize>() + 8);
    let (n, waited, p50, max) = row(&t, &mfetch).unwrap_or_else(|| panic!("{mfetch}:\n{t}"));
    assert!(n >= 1 && waited <= n && p50 <= max, "{t}");
    // libpcap flushes what each MFETCH returned, and reads the stats at exit.
    let (flush, ..) = row(&t, "IOCTL:_IO(0x92,8)").unwrap_or_else(|| panic!("MFLUSH:\n{t}"));
    assert!(flush >= 1, "{t}");
    assert!(
        row(&t, "IOCTL:_IOR(0x92,3,8)").is_some(),
        "MON_IOCG_STATS:\n{t}"
    );
    assert!(row(&t, "OPEN").is_some_and(|r| r.0 >= 1), "{t}");
    // Starting again: the open that truncates is the first thing counted.
    std::fs::write(m.path("monfs/requests"), "").unwrap();
    let t = table();
    assert!(row(&t, &mfetch).is_none(), "{t}");
    assert!(row(&t, "OPEN").is_some(), "{t}");
}

#[test]
fn tcpdump_falls_back_to_read_mode_linktype_189_without_mmap() {
    let m = Mount::start(Some(include_str!("../config/default.yaml")), &["--no-mmap"]);
    let out = m.dir.path().join("read.pcap");
    common::tcpdump(&m, "usbmon1", 3, &out);
    check_capture(&out, 189, 48);
}

/// `--cpus`: the threads that take requests from /dev/fuse (fuse-N and the
/// service thread fuse-wake) stay on the CPUs named, the simulators' bus
/// threads on the others, and tcpdump captures through the mount as usual.
/// A list that names a CPU monfs may not run on is a usage error (exit 2)
/// naming the option.
#[test]
fn cpus_keeps_the_request_threads_where_asked() {
    let m = Mount::start(
        Some(include_str!("../config/default.yaml")),
        &["--cpus", "0"],
    );
    let pid = m.child.id();
    let cpus_of = |dir: &std::path::Path| {
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default()
    };
    let all = cpus_of(std::path::Path::new(&format!("/proc/{pid}")));
    // (comm, CPUs) of the request threads and the bus thread. A thread names
    // itself and then sets its CPUs as it starts, so on a loaded machine the
    // last ones may not have yet: wait for all three (up to the hang bound).
    let threads = || {
        let mut v: Vec<(String, String)> = Vec::new();
        for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
            let t = t.unwrap().path();
            let comm = std::fs::read_to_string(t.join("comm")).unwrap_or_default();
            v.push((comm.trim().to_string(), cpus_of(&t)));
        }
        v.sort();
        v
    };
    let is_request =
        |c: &str| c == "fuse-wake" || (c.starts_with("fuse-") && c[5..].parse::<u32>().is_ok());
    let deadline = std::time::Instant::now() + common::HANG;
    let seen = loop {
        let v = threads();
        let pinned: Vec<&(String, String)> = v.iter().filter(|(c, _)| is_request(c)).collect();
        if pinned.len() == 3 && pinned.iter().all(|(_, cpus)| cpus == "0") {
            break v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "request threads: {v:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let pinned: Vec<&str> = seen
        .iter()
        .filter(|(c, _)| is_request(c))
        .map(|(c, _)| c.as_str())
        .collect();
    assert_eq!(pinned, ["fuse-0", "fuse-1", "fuse-wake"]);
    // The simulators run on the other CPUs (on all of them if CPU 0 is the
    // only one), so that none crowds the client's CPU. Cpus_allowed_list is
    // in the form `--cpus` takes.
    let expand = |list: &str| monfs::fuse::parse_cpu_list(list).unwrap().0;
    let mut others: Vec<usize> = expand(&all).into_iter().filter(|&c| c != 0).collect();
    if others.is_empty() {
        others = expand(&all);
    }
    let buses: Vec<&(String, String)> = seen
        .iter()
        .filter(|(c, _)| c.starts_with("usb-bus"))
        .collect();
    assert!(!buses.is_empty(), "no bus thread: {seen:?}");
    for (comm, cpus) in buses {
        assert_eq!(expand(cpus), others, "{comm} is a simulator thread");
    }
    let out = m.dir.path().join("pinned.pcap");
    common::tcpdump(&m, "usbmon1", 3, &out);
    check_capture(&out, 220, 64);

    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(common::monfs_bin())
        .arg("mount")
        .arg(dir.path())
        .args(["--cpus", "100000"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--cpus") && err.contains("CPU 100000 is not one this process may run on"),
        "{err}"
    );
}

/// Issue 37, finding 10: `MON_IOCT_RING_SIZE` is EBUSY while any mapping of
/// the ring exists, private or shared, the caller's or a forked child's
/// (mon_bin counts them all), and succeeds once they are gone.
#[test]
fn ring_resize_is_busy_while_any_mapping_exists() {
    let m = Mount::with_config(QUIET);
    m.sh_ok("echo 'pause 1' > monfs/ctl");
    let script = format!(
        r#"
import fcntl, mmap, os, sys, time
T_RING_SIZE = 0x9204
fd = os.open({path:?}, os.O_RDONLY)
def resize(size):
    try:
        fcntl.ioctl(fd, T_RING_SIZE, size)
        return 0
    except OSError as e:
        return e.errno
out = []
out.append(resize(600 * 1024))
for flags in (mmap.MAP_PRIVATE, mmap.MAP_SHARED):
    mp = mmap.mmap(fd, 4096, flags=flags, prot=mmap.PROT_READ)
    out.append(resize(300 * 1024))
    mp.close()
    out.append(resize(300 * 1024))
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    mp = mmap.mmap(fd, 4096, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
    os.write(w, b"x")
    time.sleep(3600)
os.read(r, 1)
out.append(resize(600 * 1024))
os.kill(pid, 9)
os.waitpid(pid, 0)
out.append(resize(600 * 1024))
print(" ".join(map(str, out)))
"#,
        path = m.path("dev/usbmon1").display().to_string()
    );
    let o = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let busy = libc::EBUSY.to_string();
    let got = String::from_utf8(o.stdout).unwrap();
    assert_eq!(
        got.split_whitespace().collect::<Vec<_>>(),
        ["0", &busy, "0", &busy, "0", &busy, "0"],
        "resize: alone, under MAP_PRIVATE, after, under MAP_SHARED, after, \
         under a child's mapping, after"
    );
}
