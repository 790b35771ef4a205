//! Faults: the daemon going away under blocked readers, stale mounts, clients
//! killed mid-read or with a live mapping.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, wait_blocked, Mount};

const QUIET: &str = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n";

fn wait_exit(c: &mut std::process::Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Some(st) = c.try_wait().unwrap() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    None
}

fn is_mounted(path: &std::path::Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let p = path.to_string_lossy().to_string();
    mounts
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(p.as_str()))
}

#[test]
fn sigterm_fails_blocked_readers_and_unmounts() {
    let mut m = Mount::with_config(QUIET);
    let mut cats: Vec<_> = [
        "usb/usbmon/0u",
        "usb/usbmon/0u",
        "dev/usbmon1",
        "tracing/trace_pipe",
    ]
    .iter()
    .map(|f| {
        let c = Command::new("cat")
            .arg(m.path(f))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_blocked(c.id());
        c
    })
    .collect();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(m.child.id() as i32, libc::SIGTERM) };
    let st = wait_exit(&mut m.child, common::HANG).expect("daemon did not exit on SIGTERM");
    assert!(st.success(), "daemon exit status {st}");
    for c in cats.iter_mut() {
        let st = wait_exit(c, common::HANG).expect("a blocked reader hangs after SIGTERM");
        assert!(!st.success(), "reader should see an error");
    }
    assert!(!is_mounted(&m.root()), "still mounted after SIGTERM");
}

#[test]
fn a_stale_mount_after_sigkill_is_recovered() {
    let mut m = Mount::with_config(QUIET);
    m.child.kill().unwrap();
    m.child.wait().unwrap();
    // The kernel keeps the dead mount: ENOTCONN. Through io_uring a
    // request can still reach a queue the kernel is tearing down (the ring
    // outlives the process for a moment): it ends ECONNABORTED, or
    // ECANCELED when it was handed to a ring task that had already died.
    let e = std::fs::metadata(m.path("usb")).unwrap_err();
    if common::io_uring_leg() {
        assert!(
            matches!(
                e.raw_os_error(),
                Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED)
            ),
            "{e}"
        );
    } else {
        assert_eq!(e.raw_os_error(), Some(libc::ENOTCONN));
    }
    let mnt = m.root();
    let again = Command::new(common::monfs_bin())
        .args(["mount", "--foreground"])
        .arg(&mnt)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + common::HANG;
    while !mnt.join("monfs/null").exists() {
        assert!(
            Instant::now() < deadline,
            "remount over a stale mount failed"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The new mount serves (allow a moment for the old one's lazy detach).
    let deadline = Instant::now() + common::HANG;
    loop {
        let o = m.sh("ls usb/usbmon");
        if String::from_utf8_lossy(&o.stdout).contains("1u") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new mount does not serve: {}\n{}",
            String::from_utf8_lossy(&o.stderr),
            std::fs::read_to_string("/proc/self/mountinfo").unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(again.id() as i32, libc::SIGTERM) };
    let out = again.wait_with_output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("stale mount"),
        "no log line about the stale mount"
    );
}

#[test]
fn killed_clients_leave_no_stuck_state() {
    let mut m = Mount::default_config();
    let mmap = compile_c("usbmon_mmap", m.dir.path());
    let read = compile_c("usbmon_read", m.dir.path());
    for _ in 0..3 {
        let mut a = Command::new(&mmap)
            .arg(m.path("dev/usbmon1"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut b = Command::new(&read)
            .args(["getx"])
            .arg(m.path("dev/usbmon0"))
            .arg("1000000")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut c = Command::new("cat")
            .arg(m.path("usb/usbmon/0u"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(400));
        for p in [&mut a, &mut b, &mut c] {
            p.kill().unwrap();
            p.wait().unwrap();
        }
    }
    assert!(m.alive());
    let deadline = Instant::now() + common::HANG;
    loop {
        let s = m.sh_ok("cat usb/usbmon/0s usb/usbmon/1s");
        if s.lines().all(|l| l.starts_with("nreaders 0 ")) {
            break;
        }
        assert!(Instant::now() < deadline, "readers left behind: {s}");
        std::thread::sleep(Duration::from_millis(50));
    }
    // And the devices still serve new readers.
    let out = m.sh_ok("timeout 30 head -n 3 usb/usbmon/0u");
    assert_eq!(out.lines().count(), 3);
}

/// Write `text` into `monfs/ctl` in one write; the errno if it fails.
fn ctl_write(m: &Mount, text: &str) -> Option<i32> {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("monfs/ctl"))
        .expect("open monfs/ctl");
    f.write_all(text.as_bytes())
        .err()
        .map(|e| e.raw_os_error().unwrap())
}

/// Issue 13: a panic in a request handler fails that request with EIO and
/// the daemon keeps serving; the control lock the panic poisoned still works.
#[test]
fn a_panicking_request_fails_alone_with_eio() {
    let mut m = Mount::start_env(Some(QUIET), &[], &[("MONFS_FAULT_INJECT", "1")]);
    // A reader parked in a blocking read across the panics (retried while
    // the root hub's start-up traffic still answers it at once).
    let deadline = Instant::now() + common::HANG;
    let mut reader = loop {
        let mut c = Command::new("dd")
            .arg(format!("if={}", m.path("usb/usbmon/0u").display()))
            .args(["bs=4096", "count=1", "status=none"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        if wait_exit(&mut c, Duration::from_millis(300)).is_none() {
            break c;
        }
        assert!(Instant::now() < deadline, "0u never went quiet");
    };
    wait_blocked(reader.id());

    assert_eq!(ctl_write(&m, "panic\n"), Some(libc::EIO));
    assert!(m.alive(), "the daemon died; log:\n{}", m.log_text());
    assert!(m.sh_ok("cat usb/devices").contains("Bus=01"));
    assert!(m.sh_ok("ls tracing").contains("trace_pipe"));
    assert_eq!(ctl_write(&m, "panic\n"), Some(libc::EIO), "second panic");
    // The panics happened with the control lock held: it still serves.
    assert_eq!(ctl_write(&m, "plug 1 2 hid-mouse\n"), None);
    // The socket answers a panicking command with an error, then serves on.
    let o = Command::new(common::monfs_bin())
        .args(["ctl"])
        .arg(m.root())
        .arg("panic")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("internal error"));
    // The plug's enumeration wakes the parked reader.
    assert!(
        wait_exit(&mut reader, common::HANG).is_some_and(|s| s.success()),
        "the parked reader never got the mouse's URBs"
    );
    let mut line = String::new();
    std::io::Read::read_to_string(reader.stdout.as_mut().unwrap(), &mut line).unwrap();
    assert!(!line.is_empty());
    assert!(m.alive());
    let log = m.log_text();
    assert!(
        log.contains("request panicked, answering EIO"),
        "log:\n{log}"
    );
    assert!(log.contains("injected fault"), "log:\n{log}");
}

/// Without MONFS_FAULT_INJECT=1, `panic` is just an unknown command.
#[test]
fn the_panic_command_needs_the_fault_hook() {
    let mut m = Mount::with_config(QUIET);
    assert_eq!(ctl_write(&m, "panic\n"), Some(libc::EINVAL));
    assert!(m.alive());
    assert!(!m.log_text().contains("panicked"));
}
