//! `dev/monreader` through the real mount, read by C programs compiled here
//! (tests/c/monreader_tool.c and examples/monreader_reader.c).

mod common;

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, wait_blocked, Mount};
use monfs::cli::zvm_dump::decode_set;
use monfs::sim::zvm::catalog::describe_payload;

const HEAD: &str = "seed: 7\nclock: virtual\nusb:\n  buses: []\n";

/// No events and a sample interval of a day: the configuration message at
/// open, then nothing.
fn quiet(extra: &str) -> String {
    format!("{HEAD}zvm:\n  event_rate: 0\n  sample_interval_ms: 86400000\n{extra}")
}

/// The seeded timeline as fast as the reader reads, `n` messages per open.
fn flood(n: u32, extra: &str) -> String {
    format!("{HEAD}zvm:\n  pace: flood\n  max_messages: {n}\n{extra}")
}

struct Run {
    out: String,
    code: Option<i32>,
    err: String,
}

fn tool(m: &Mount) -> PathBuf {
    compile_c("monreader_tool", m.dir.path())
}

fn run(bin: &Path, m: &Mount, args: &[&str]) -> Run {
    let o = Command::new(bin)
        .args(args)
        .arg(m.path("dev/monreader"))
        .output()
        .expect("run the reader");
    Run {
        out: String::from_utf8(o.stdout).unwrap(),
        code: o.status.code(),
        err: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The value of `key=` on the END line.
fn end(out: &str, key: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("END "))
        .expect("END line");
    line.split(' ')
        .find_map(|w| w.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("{key} in {line}"))
        .parse()
        .unwrap()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// The "S n len hex" lines: the complete data sets.
fn sets(out: &str) -> Vec<Vec<u8>> {
    out.lines()
        .filter_map(|l| l.strip_prefix("S "))
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            let b = unhex(w.get(2).copied().unwrap_or(""));
            assert_eq!(b.len(), w[1].parse::<usize>().unwrap());
            b
        })
        .collect()
}

/// Open the device, retrying briefly on EBUSY: FUSE sends RELEASE after
/// close() returns, so the previous opener may still be on its way out.
fn open_retry(m: &Mount, nonblock: bool) -> std::fs::File {
    let deadline = Instant::now() + common::HANG;
    loop {
        let r = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(if nonblock { libc::O_NONBLOCK } else { 0 })
            .open(m.path("dev/monreader"));
        match r {
            Ok(f) => return f,
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("open: {e}"),
        }
    }
}

/// Check a trace ("R n hex" lines) against the driver's read rules for reads
/// of `bs` bytes: a set starts with its 12-byte MCE (read alone, at most the
/// rest of it per read), then exactly the record set's bytes (at most the
/// rest of the set per read), then another MCE or the 0-byte read. Returns
/// the data sets seen.
fn check_trace(out: &str, bs: usize) -> Vec<Vec<u8>> {
    enum St {
        Mce(Vec<u8>),
        Recs(usize),
        After,
    }
    let mut st = St::Mce(Vec::new());
    let mut cur = Vec::new();
    let mut done = Vec::new();
    for l in out.lines().filter_map(|l| l.strip_prefix("R ")) {
        let mut w = l.split(' ');
        let n: usize = w.next().unwrap().parse().unwrap();
        let data = unhex(w.next().unwrap_or(""));
        assert_eq!(data.len(), n);
        if n == 0 {
            assert!(
                matches!(st, St::After),
                "0-byte read inside an MCE or record set"
            );
            done.push(std::mem::take(&mut cur));
            st = St::Mce(Vec::new());
            continue;
        }
        cur.extend_from_slice(&data);
        st = match st {
            St::After => {
                assert_eq!(
                    n,
                    bs.min(12),
                    "a read after a record set returns the next MCE only"
                );
                St::Mce(data).next_if_full()
            }
            St::Mce(mut have) => {
                assert_eq!(n, bs.min(12 - have.len()), "MCE read size");
                have.extend_from_slice(&data);
                St::Mce(have).next_if_full()
            }
            St::Recs(left) => {
                assert_eq!(n, bs.min(left), "record read size");
                if left == n {
                    St::After
                } else {
                    St::Recs(left - n)
                }
            }
        };
    }
    impl St {
        fn next_if_full(self) -> St {
            match self {
                St::Mce(m) if m.len() == 12 => {
                    let s = u32::from_be_bytes(m[4..8].try_into().unwrap());
                    let e = u32::from_be_bytes(m[8..12].try_into().unwrap());
                    assert!(e > s, "MCE end after start");
                    St::Recs((e - s + 1) as usize)
                }
                other => other,
            }
        }
    }
    done
}

fn records_of(set: &[u8]) -> Vec<monfs::monreader::records::Record> {
    let secs = decode_set(set);
    for s in &secs {
        assert_eq!(s.error, None, "set decodes");
    }
    secs.into_iter()
        .flat_map(|s| s.records.into_iter().map(|(_, r)| r))
        .collect()
}

#[test]
fn one_opener_at_a_time_and_mode_0600() {
    let m = Mount::with_config(&quiet(""));
    let md = std::fs::metadata(m.path("dev/monreader")).unwrap();
    assert_eq!(md.mode() & 0o7777, 0o600);
    assert_eq!(md.len(), 0);
    let first = open_retry(&m, false);
    let e = std::fs::File::open(m.path("dev/monreader")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EBUSY));
    let bin = tool(&m);
    let r = run(&bin, &m, &["-n", "1"]);
    assert_eq!((r.code, r.err.trim()), (Some(1), "EBUSY"));
    drop(first);
    // Free again once the first opener is gone.
    let again = open_retry(&m, true);
    drop(again);
    let r = run_retry(&bin, &m, &["-n", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_eq!(end(&r.out, "sets"), 1.0);
}

/// Run the tool, retrying while the device is still held by a previous
/// opener whose RELEASE is in flight.
fn run_retry(bin: &Path, m: &Mount, args: &[&str]) -> Run {
    let deadline = Instant::now() + common::HANG;
    loop {
        let r = run(bin, m, args);
        if r.code == Some(1) && r.err.trim() == "EBUSY" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        return r;
    }
}

#[test]
fn reads_follow_the_driver_mce_then_records_then_zero() {
    let m = Mount::with_config(&format!(
        "{HEAD}zvm:\n  sample_interval_ms: 150\n  event_rate: 20\n"
    ));
    let bin = tool(&m);
    for bs in [65536usize, 5, 12, 100] {
        let r = run_retry(&bin, &m, &["-t", "-n", "6", "-b", &bs.to_string()]);
        assert_eq!(r.code, Some(0), "{}", r.err);
        let sets = check_trace(&r.out, bs);
        assert_eq!(sets.len(), 6);
        // The first set is the configuration message: two MCEs (sample, then
        // event configuration), domain 1 records.
        let first = decode_set(&sets[0]);
        assert_eq!(first.len(), 2);
        assert_eq!(
            (first[0].mce.type_byte, first[0].mce.domains),
            (0x80, 0x4000)
        );
        assert_eq!(
            (first[1].mce.type_byte, first[1].mce.domains),
            (0x40, 0x4000)
        );
        let mut kinds = std::collections::BTreeSet::new();
        for s in &sets {
            for sec in decode_set(s) {
                assert_eq!(sec.error, None);
                assert!(sec.mce.type_byte == 0x80 || sec.mce.type_byte == 0x40);
                for (_, r) in &sec.records {
                    assert_ne!(
                        sec.mce.domains & (0x8000 >> r.domain),
                        0,
                        "MCE names the record's domain"
                    );
                    assert!(describe_payload(r.domain, r.number, &r.data).is_some());
                }
                kinds.insert(sec.mce.type_byte);
            }
        }
        assert!(kinds.contains(&0x80));
    }
}

#[test]
fn byte_at_a_time_and_64k_blocks_give_identical_streams() {
    let m = Mount::with_config(&flood(5, ""));
    let bin = tool(&m);
    let one = run_retry(&bin, &m, &["-s", "-b", "1", "-n", "5"]);
    let big = run_retry(&bin, &m, &["-s", "-b", "65536", "-n", "5"]);
    assert_eq!(
        (one.code, big.code),
        (Some(0), Some(0)),
        "{} {}",
        one.err,
        big.err
    );
    let (a, b) = (sets(&one.out), sets(&big.out));
    assert_eq!(a.len(), 5);
    assert!(a == b, "streams differ");
    let bytes: usize = a.iter().map(|s| s.len()).sum();
    assert_eq!(
        end(&one.out, "reads") as usize,
        bytes + 5,
        "one read per byte plus the delimiters"
    );
    assert!(end(&big.out, "reads") < 60.0);
    // Another mount with the same seed gives the same bytes.
    drop(m);
    let m2 = Mount::with_config(&flood(5, ""));
    let again = run_retry(&tool(&m2), &m2, &["-s", "-n", "5"]);
    assert!(sets(&again.out) == b, "seeded flood runs are reproducible");
    for s in &a {
        assert!(!records_of(s).is_empty());
    }
}

#[test]
fn nonblocking_reads_give_eagain_and_poll_wakes_the_reader() {
    let m = Mount::with_config(&format!(
        "{HEAD}zvm:\n  sample_interval_ms: 250\n  event_rate: 0\n"
    ));
    let bin = tool(&m);
    let r = run_retry(&bin, &m, &["-N", "-t", "-n", "3"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert!(end(&r.out, "eagain") >= 2.0, "{}", r.out);
    // Every wait ends with POLLIN|POLLRDNORM.
    let polls: Vec<&str> = r.out.lines().filter(|l| l.starts_with("P ")).collect();
    assert!(!polls.is_empty());
    assert!(polls.iter().all(|p| *p == "P 0x41"), "{polls:?}");
    assert_eq!(check_trace(&r.out, 65536).len(), 3);
    // From Rust, on a mount whose first sample is a day away: after the
    // configuration set, EAGAIN and a quiet poll; a message injected then
    // wakes the poll.
    let m = Mount::with_config(&format!(
        "{HEAD}zvm:\n  sample_interval_ms: 86400000\n  event_rate: 0\n"
    ));
    let mut f = open_retry(&m, true);
    let mut buf = vec![0u8; 65536];
    let mut pfd = libc::pollfd {
        fd: std::os::fd::AsRawFd::as_raw_fd(&f),
        events: libc::POLLIN | libc::POLLRDNORM,
        revents: 0,
    };
    // SAFETY: one valid pollfd. (-1: no timing in the test; a hang is the
    // failure.)
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, -1) }, 1);
    loop {
        if f.read(&mut buf).unwrap() == 0 {
            break;
        }
    }
    let e = f.read(&mut buf).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    // SAFETY: as above.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 0) }, 0);
    m.sh_ok("echo 'zvm overflow' > monfs/ctl");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, -1) }, 1);
    assert_eq!(pfd.revents as i32, (libc::POLLIN | libc::POLLRDNORM) as i32);
}

#[test]
fn eoverflow_comes_once_one_read_after_the_limit_sets_delimiter() {
    let m = Mount::with_config(&quiet("  faults:\n    overflow_after_messages: 1\n"));
    let bin = tool(&m);
    let r = run_retry(&bin, &m, &["-N", "-t", "-i", "500"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_eq!(end(&r.out, "sets"), 255.0);
    assert_eq!(end(&r.out, "overflows"), 1.0);
    // The line before "O" is the 255th delimiter; after it only EAGAIN/poll.
    let lines: Vec<&str> = r.out.lines().collect();
    let o = lines.iter().position(|l| *l == "O").expect("EOVERFLOW");
    assert_eq!(lines[o - 1], "E EOVERFLOW");
    assert_eq!(lines[o - 2], "R 0");
    assert_eq!(lines[..o].iter().filter(|l| **l == "R 0").count(), 255);
    assert!(lines[o + 1..].iter().all(|l| !l.starts_with("R ")));
}

#[test]
fn reply_failure_gives_eio_and_the_set_is_discarded() {
    let m = Mount::with_config(&flood(8, "  faults:\n    reply_fail_every: 3\n"));
    let bin = tool(&m);
    let bad = run_retry(&bin, &m, &["-s", "-n", "6"]);
    drop(m);
    let m = Mount::with_config(&flood(8, ""));
    let good = run_retry(&tool(&m), &m, &["-s", "-n", "8"]);
    let (b, g) = (sets(&bad.out), sets(&good.out));
    assert_eq!((b.len(), g.len()), (6, 8));
    // Sets 3 and 6 were read in full, then their delimiter failed.
    let d: Vec<&str> = bad.out.lines().filter(|l| l.starts_with("D ")).collect();
    assert_eq!(
        d,
        [format!("D 3 {}", g[2].len()), format!("D 6 {}", g[5].len())]
    );
    // What the reader kept is exactly the fault-free data.
    let kept: Vec<&Vec<u8>> = [0, 1, 3, 4, 6, 7].iter().map(|&i| &g[i]).collect();
    assert!(b.iter().zip(kept).all(|(x, y)| x == y));
}

#[test]
fn severed_path_gives_eio_and_pollerr_after_valid_data() {
    let m = Mount::with_config(&format!(
        "{HEAD}zvm:\n  sample_interval_ms: 100\n  event_rate: 0\n  faults:\n    sever_after_ms: 600\n"
    ));
    let bin = tool(&m);
    let r = run_retry(&bin, &m, &["-s"]);
    assert_eq!(r.code, Some(3), "{}\n{}", r.out, r.err);
    assert!(r.out.contains("SEVERED"));
    let s = sets(&r.out);
    assert!(
        s.len() >= 3,
        "data read before the sever is valid: {}",
        s.len()
    );
    for x in &s {
        records_of(x);
    }
    // Non-blocking: EAGAIN then POLLERR.
    let r = run_retry(&bin, &m, &["-N", "-t"]);
    assert_eq!(r.code, Some(3));
    assert!(r.out.contains("POLLERR"), "{}", r.out);
    // Severed after 3 messages: all three pending sets fail their reply.
    drop(m);
    let m = Mount::with_config(&flood(50, "  faults:\n    sever_after_messages: 3\n"));
    let r = run_retry(&tool(&m), &m, &[]);
    assert_eq!(r.code, Some(3));
    assert_eq!(end(&r.out, "sets"), 0.0);
    assert_eq!(
        end(&r.out, "discarded"),
        4.0,
        "3 sets and the final EIO: {}",
        r.out
    );
}

#[test]
fn invalid_mce_ends_the_set_with_a_zero_read() {
    let m = Mount::with_config(&flood(6, "  faults:\n    bad_mce_every: 2\n"));
    let r = run_retry(&tool(&m), &m, &["-s", "-t", "-n", "6"]);
    let s = sets(&r.out);
    let lens: Vec<usize> = s.iter().map(|x| x.len()).collect();
    assert_eq!(lens.len(), 6);
    for (i, l) in lens.iter().enumerate() {
        assert_eq!(*l == 0, i % 2 == 1, "{lens:?}");
    }
}

#[test]
fn ctrl_c_ends_a_blocked_read() {
    let m = Mount::with_config(&quiet(""));
    let bin = tool(&m);
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let mut c = loop {
            let c = Command::new(&bin)
                .arg(m.path("dev/monreader"))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            std::thread::sleep(Duration::from_millis(30));
            let mut c = c;
            if let Some(st) = c.try_wait().unwrap() {
                // The previous reader's release was still in flight.
                assert_eq!(st.code(), Some(1));
                continue;
            }
            break c;
        };
        wait_blocked(c.id());
        // SAFETY: signalling our own child.
        unsafe { libc::kill(c.id() as i32, sig) };
        let t = Instant::now();
        while c.try_wait().unwrap().is_none() {
            assert!(t.elapsed() < common::HANG, "reader did not die");
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    // The device is free again.
    let r = run_retry(&bin, &m, &["-N", "-i", "300", "-n", "1"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    assert_eq!(end(&r.out, "sets"), 1.0);
}

#[test]
fn mondcss_and_dcss_addresses_come_from_the_config() {
    let m = Mount::with_config(&flood(
        3,
        "  mondcss: mydcss\n  dcss_start: 0x10000000\n  dcss_end: 0x1007FFFF\n",
    ));
    let r = run_retry(&tool(&m), &m, &["-s", "-n", "3"]);
    let s = sets(&r.out);
    assert_eq!(s.len(), 3);
    for set in &s {
        for sec in decode_set(set) {
            assert!(sec.mce.start >= 0x1000_0000 && sec.mce.end <= 0x1007_FFFF);
        }
    }
    let sys = records_of(&s[0])
        .into_iter()
        .find(|r| (r.domain, r.number) == (1, 4))
        .unwrap();
    let d = describe_payload(1, 4, &sys.data).unwrap();
    assert!(d.contains("dcss=MYDCSS"), "{d}");
    // A bad name is refused with the field's position.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.yaml");
    std::fs::write(&cfg, "zvm:\n  mondcss: WAYTOOLONG\n").unwrap();
    let o = Command::new(common::monfs_bin())
        .arg("check-config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("mondcss"));
}

#[test]
fn example_reader_reads_sets() {
    let m = Mount::with_config(&flood(4, ""));
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/monreader_reader.c");
    let bin = m.dir.path().join("monreader_reader");
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for args in [&["-1", "-n", "2"][..], &["-n", "2"][..]] {
        let r = run_retry(&bin, &m, args);
        assert_eq!(r.code, Some(0), "{}", r.err);
        assert!(r.out.contains("data set 2:"), "{}", r.out);
        assert!(
            r.out
                .contains("domain  1 record   4  2024-01-01 00:00:00.000000"),
            "{}",
            r.out
        );
    }
}

#[test]
fn zvm_dump_decodes_the_device_one_byte_or_blocks_at_a_time() {
    use monfs::cli::zvm_dump::{zvm_dump, DumpOptions, Source};
    let m = Mount::with_config(&flood(3, "  faults:\n    reply_fail_every: 2\n"));
    let mut outs = Vec::new();
    for one_byte in [true, false] {
        let mut f = open_retry(&m, false);
        let mut out = Vec::new();
        let opts = DumpOptions {
            source: Source::Device,
            one_byte,
            max_sets: Some(2),
        };
        zvm_dump(&mut f, &mut out, opts).unwrap();
        outs.push(String::from_utf8(out).unwrap());
    }
    assert_eq!(outs[0], outs[1]);
    let o = &outs[0];
    assert!(o.starts_with("set 1: 2 MCEs"), "{o}");
    assert!(o.contains("1.4  MRMTRSYS  2024-01-01 00:00:00.000000  len 50  System configuration data: system=ZVMSIM dcss=MONDCSS cpus=4 storage_mb=16384"), "{o}");
    assert!(
        o.contains("EIO (reply failed or path severed): discarding"),
        "{o}"
    );
    assert!(o.contains("\nset 2: "), "{o}");
    let last = o.lines().last().unwrap();
    assert!(
        last.starts_with("2 sets, ") && last.ends_with(" records, 1 discarded"),
        "{last}"
    );
    println!("{o}");
}

/// `monfs zvm-dump` on the device stops on Ctrl-C (SIGINT) while blocked in
/// a read and still prints its summary, as `monfs record` does (the CLI
/// tools share their signal handling).
#[test]
fn zvm_dump_stops_cleanly_on_sigint() {
    let m = Mount::with_config(&format!(
        "{HEAD}zvm:\n  sample_interval_ms: 86400000\n  event_rate: 0\n"
    ));
    use std::io::BufRead;
    let mut c = Command::new(common::monfs_bin())
        .arg("zvm-dump")
        .arg("--device")
        .arg(m.path("dev/monreader"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // The configuration message comes at once; then nothing for a day.
    let mut lines = std::io::BufReader::new(c.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("set 1: "), "{first}");
    wait_blocked(c.id());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGINT) };
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let st = c.wait().unwrap();
    assert!(st.success(), "{st}: {rest:?}");
    let last = rest.last().map(String::as_str).unwrap_or("");
    assert!(
        last.starts_with("1 sets, ") && last.ends_with(" records, 0 discarded"),
        "{rest:?}"
    );
}

/// `zvm:zvm_sample` and `zvm:zvm_event` record each monitor record
/// *MONITOR sends, as the reader gets it: its domain, number, length and
/// TOD, and the z/VM user it is about.
#[test]
fn sent_records_fire_zvm_trace_events() {
    let m = Mount::with_config(&format!(
        "{HEAD}zvm:\n  sample_interval_ms: 150\n  event_rate: 20\n"
    ));
    m.sh_ok("echo 'zvm:*' > tracing/set_event");
    let bin = tool(&m);
    let r = run_retry(&bin, &m, &["-t", "-n", "6"]);
    assert_eq!(r.code, Some(0), "{}", r.err);
    let mut read = vec![];
    for s in check_trace(&r.out, 65536) {
        for sec in decode_set(&s) {
            for (_, rec) in sec.records {
                read.push((sec.mce.type_byte, rec));
            }
        }
    }
    let trace = m.sh_ok("cat tracing/trace");
    let lines: Vec<&str> = trace.lines().filter(|l| l.contains(": zvm_")).collect();
    // Every record read is in the trace, in order (more may have been sent
    // since).
    assert!(lines.len() >= read.len(), "{trace}");
    for ((ty, rec), line) in read.iter().zip(&lines) {
        let name = if *ty == 0x40 {
            "zvm_event"
        } else {
            "zvm_sample"
        };
        let want = format!(
            "{name}: domain={} record={} length={} userid=",
            rec.domain,
            rec.number,
            rec.len()
        );
        assert!(line.contains(&want), "{want} in {line}");
        assert!(line.ends_with(&format!(" tod={:x}", rec.tod)), "{line}");
    }
    assert!(lines.iter().any(|l| l.contains("zvm_event:")), "{trace}");
    assert!(lines.iter().any(|l| l.contains("zvm_sample:")), "{trace}");
    // A user record names its user.
    assert!(
        lines
            .iter()
            .any(|l| l.contains("domain=4 ") && !l.contains("userid= ")),
        "{trace}"
    );
}
