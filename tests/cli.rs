//! What `monfs mount` and `monfs record` tell the person at the terminal,
//! and how they exit, through the real mount: which transport serves,
//! `--io-uring` and `--cuse` where the kernel cannot give them (exit 1,
//! nothing mounted), and a recording whose pipe's reader goes away (a
//! quiet end with status 0).
//!
//! What the machine offers (FUSE over io_uring, /dev/cuse) is not changed
//! here: each test finds out which case the machine is, with the same
//! checks monfs makes, and asserts monfs's behaviour for that case.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::Mount;
use monfs::fuse::IoUringAvailability;

/// One bus, no devices: nothing happens on it after the root hub's start.
const QUIET: &str =
    "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n      devices: []\n";

const PARAM: &str = "/sys/module/fuse/parameters/enable_uring";

/// Whether a filesystem is mounted at `dir`, by /proc/self/mountinfo
/// (which asks no daemon, dead or alive).
fn mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = dir.to_str().unwrap();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|p| p == want))
}

/// A `monfs mount` run as a person runs it (in the background), in its own
/// temporary directory; unmounted on drop if it mounted.
struct Daemon {
    dir: tempfile::TempDir,
    out: Output,
}

impl Daemon {
    /// `monfs mount MNT --config QUIET ... EXTRA`; returns once the command
    /// has (the mount up, or failed).
    fn mount(extra: &[&str]) -> Daemon {
        assert!(
            Path::new("/dev/fuse").exists(),
            "/dev/fuse is missing: these tests need FUSE (modprobe fuse) and must not be skipped"
        );
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let cfg = dir.path().join("config.yaml");
        std::fs::write(&cfg, QUIET).unwrap();
        let out = Command::new("timeout")
            .arg(common::HANG.as_secs().to_string())
            .arg(common::monfs_bin())
            .arg("mount")
            .arg(&mnt)
            .arg("--config")
            .arg(&cfg)
            .arg("--ctl-socket")
            .arg(dir.path().join("ctl.sock"))
            .arg("--log-file")
            .arg(dir.path().join("daemon.log"))
            .args(extra)
            .output()
            .unwrap();
        Daemon { dir, out }
    }

    fn mnt(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// The lines monfs wrote for the person (not the log's).
    fn said(&self) -> Vec<String> {
        self.stderr()
            .lines()
            .filter(|l| l.starts_with("monfs: "))
            .map(str::to_string)
            .collect()
    }

    /// Assert it failed with exit 1 and left nothing behind.
    fn assert_refused(&self) {
        assert_eq!(self.out.status.code(), Some(1), "{}", self.stderr());
        assert!(!mounted(&self.mnt()), "mounted anyway: {}", self.stderr());
        assert!(!self.mnt().join("monfs").exists());
        assert!(
            !self.dir.path().join("ctl.sock").exists(),
            "the control socket was left"
        );
    }

    /// Assert it mounted and said so with `transport`, its first line.
    fn assert_mounted_through(&self, transport: &str) {
        assert!(self.out.status.success(), "{}", self.stderr());
        assert!(mounted(&self.mnt()));
        let want = format!(
            "monfs: {} mounted, requests through {transport}",
            self.mnt().display()
        );
        assert_eq!(
            self.said().first(),
            Some(&want),
            "stderr:\n{}",
            self.stderr()
        );
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if !mounted(&self.mnt()) {
            return;
        }
        let _ = Command::new(common::monfs_bin())
            .arg("umount")
            .arg(self.mnt())
            .output();
        // The daemon removes its socket as it exits.
        let sock = self.dir.path().join("ctl.sock");
        let deadline = Instant::now() + common::HANG;
        while sock.exists() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The second line for a mount that serves /dev/fuse where io_uring could
/// have been had: what it must say for each case.
fn note_for(a: &IoUringAvailability) -> Option<&'static [&'static str]> {
    match a {
        IoUringAvailability::NotBuilt => None,
        IoUringAvailability::Off => Some(&[
            "echo Y > /sys/module/fuse/parameters/enable_uring",
            "(as root)",
            "several times faster",
        ]),
        IoUringAvailability::Denied(_) => Some(&["not using FUSE over io_uring", "may not use"]),
        IoUringAvailability::Available => Some(&["FUSE over io_uring failed"]),
    }
}

#[test]
fn the_mount_names_its_transport_on_the_terminal() {
    let avail = monfs::fuse::io_uring_availability();
    let d = Daemon::mount(&[]);
    if avail == IoUringAvailability::Available {
        d.assert_mounted_through("FUSE over io_uring");
        assert_eq!(d.said().len(), 1, "noise:\n{}", d.stderr());
    } else {
        d.assert_mounted_through("/dev/fuse");
        let said = d.said();
        match note_for(&avail) {
            None => assert_eq!(said.len(), 1, "noise:\n{}", d.stderr()),
            Some(words) => {
                assert_eq!(said.len(), 2, "{avail:?}:\n{}", d.stderr());
                for w in words {
                    assert!(said[1].contains(w), "{avail:?}: no {w:?} in {:?}", said[1]);
                }
            }
        }
    }
    let log = std::fs::read_to_string(d.dir.path().join("daemon.log")).unwrap();
    assert!(log.contains(" mounted "), "{log}");

    // --no-io-uring: /dev/fuse, and nothing about io_uring.
    let d = Daemon::mount(&["--no-io-uring"]);
    d.assert_mounted_through("/dev/fuse");
    assert_eq!(d.said().len(), 1, "noise:\n{}", d.stderr());
    assert!(!d.stderr().contains("io_uring"), "{}", d.stderr());
}

/// The harness's foreground mounts (stderr into their log) say it too.
#[test]
fn a_foreground_mount_names_its_transport() {
    let m = Mount::with_config(QUIET);
    let log = m.log_text();
    let line = format!("monfs: {} mounted, requests through ", m.root().display());
    let said = log
        .lines()
        .find_map(|l| l.strip_prefix(&line))
        .unwrap_or_else(|| panic!("no {line:?} in the log:\n{log}"));
    // The harness chooses the transport (`--io-uring` in the io_uring leg,
    // `--no-io-uring` otherwise), never the host's enable_uring.
    let want = if common::io_uring_leg() {
        "FUSE over io_uring"
    } else {
        "/dev/fuse"
    };
    assert_eq!(said, want, "{log}");
}

/// `--io-uring` requires it. Where the kernel cannot (this machine's
/// enable_uring is read, not changed), exit 1 with the reason on the
/// terminal and nothing mounted; where it can, the mount says it serves
/// through it.
#[test]
fn io_uring_is_required_with_the_option() {
    let avail = monfs::fuse::io_uring_availability();
    let param = std::fs::read_to_string(PARAM).ok();
    let d = Daemon::mount(&["--io-uring"]);
    if avail == IoUringAvailability::Available {
        assert_eq!(param.as_deref().map(str::trim), Some("Y"));
        d.assert_mounted_through("FUSE over io_uring");
        return;
    }
    d.assert_refused();
    let said = d.said();
    assert_eq!(said.len(), 1, "{}", d.stderr());
    let line = &said[0];
    assert!(line.starts_with("monfs: --io-uring: "), "{line}");
    assert!(line.ends_with("; nothing mounted"), "{line}");
    let why = match &avail {
        IoUringAvailability::NotBuilt => {
            assert!(param.is_none());
            "this kernel has no FUSE over io_uring"
        }
        IoUringAvailability::Off => {
            assert_eq!(param.as_deref().map(str::trim), Some("N"));
            "FUSE over io_uring is off in this kernel (as root: echo Y > \
             /sys/module/fuse/parameters/enable_uring)"
        }
        IoUringAvailability::Denied(_) => "this process may not use io_uring",
        IoUringAvailability::Available => unreachable!(),
    };
    assert!(line.contains(why), "{avail:?}: {line}");
}

/// `--cuse` needs /dev/cuse. Where it is missing or cannot be opened (as
/// `monfs::fuse::check_cuse` finds, whose every case the unit tests take
/// through paths of their own), exit 1 with that reason on the terminal
/// and nothing mounted; where it can be opened, the devices appear.
#[test]
fn cuse_is_required_with_the_option() {
    let check = monfs::fuse::check_cuse(Path::new("/dev/cuse")).map_err(|e| e.to_string());
    let d = Daemon::mount(&["--cuse"]);
    match check {
        Err(why) => {
            d.assert_refused();
            assert_eq!(
                d.said(),
                [format!("monfs: --cuse: {why}; nothing mounted")],
                "{}",
                d.stderr()
            );
            if !Path::new("/dev/cuse").exists() {
                assert!(why.contains("modprobe cuse"), "{why}");
            }
        }
        Ok(()) => {
            assert!(d.out.status.success(), "{}", d.stderr());
            assert!(mounted(&d.mnt()));
            let log = std::fs::read_to_string(d.dir.path().join("daemon.log")).unwrap();
            assert!(log.contains("CUSE device ready"), "{log}");
            assert!(Path::new("/sys/class/cuse/usbmon1").exists(), "{log}");
        }
    }
}

/// Run `monfs record MNT -o OUT ARGS | READER` (bash, the recorder's stderr
/// into a file): the recorder's exit status, its stderr and the reader's
/// output.
fn record_into(m: &Mount, out: &str, args: &str, reader: &str) -> (i32, String, String) {
    let err = m.dir.path().join("record.err");
    let script = format!(
        "\"$0\" record \"$1\" -o {out} {args} 2>\"$2\" | {reader}; exit ${{PIPESTATUS[0]}}"
    );
    let o = Command::new("timeout")
        .arg(common::HANG.as_secs().to_string())
        .args(["bash", "-c", &script])
        .arg(common::monfs_bin())
        .arg(m.root())
        .arg(&err)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        std::fs::read_to_string(&err).unwrap_or_default(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

#[test]
fn a_recording_ends_quietly_when_its_reader_goes() {
    let m = Mount::default_config();
    // As tcpdump -w - does: status 0, nothing said.
    for out in ["-", "/dev/stdout"] {
        let (rc, err, got) = record_into(&m, out, "", "head -c 100 | wc -c");
        assert_eq!((rc, err.as_str()), (0, ""), "-o {out}");
        assert_eq!(got.trim(), "100", "-o {out}");
    }
    // A reader that wants three packets.
    let (rc, err, got) = record_into(&m, "-", "", "tshark -i - -c 3 2>/dev/null");
    assert_eq!((rc, err.as_str()), (0, ""));
    assert_eq!(got.lines().count(), 3, "{got}");
    // One slow to start (as tshark is on a loaded machine): the pipe fills,
    // the device's ring overflows meanwhile (the default config's webcam
    // fills it in about a second), and the end is quiet all the same.
    let (rc, err, got) = record_into(&m, "-", "", "(sleep 2; head -c 100) | wc -c");
    assert_eq!((rc, err.as_str()), (0, ""));
    assert_eq!(got.trim(), "100");
}

/// On a quiet bus nothing is written after the file's header: the reader
/// leaving is seen all the same (the pipe reports it), and the recording
/// ends, quietly, without waiting for a packet.
#[test]
fn a_recording_of_a_quiet_bus_ends_when_its_reader_goes() {
    let m = Mount::with_config(QUIET);
    // The pcap file header is 24 bytes.
    let (rc, err, got) = record_into(&m, "-", "-b 1 --format pcap", "head -c 24 | wc -c");
    assert_eq!((rc, err.as_str()), (0, ""));
    assert_eq!(got.trim(), "24");
}
