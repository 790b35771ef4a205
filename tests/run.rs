//! `monfs run`: the command runs where the kernel's paths are monfs's, gets
//! MONFS_MOUNT and MONFS_SOCKET, and its exit status is monfs run's; a
//! failure to start shows the daemon's log and exits 125; nothing is left
//! behind (mount, temporary mountpoint, socket, log), whatever happened.
//! The same tests run as root and, in the rootless leg, as a user (user
//! namespace).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use common::{monfs_bin, HANG};

/// FUSE's statfs magic, as `stat -f -c %t` prints it.
const FUSE_MAGIC: &str = "65735546";

/// `monfs run ARGS -- CMD` with TMPDIR (where the mountpoint is made) in
/// `tmp`.
fn run_in(tmp: &Path, args: &[&str], cmd: &[&str]) -> Output {
    common::require_fuse();
    Command::new(monfs_bin())
        .arg("run")
        .args(args)
        .arg("--")
        .args(cmd)
        .env("TMPDIR", tmp)
        .env_remove("XDG_RUNTIME_DIR")
        .env("MONFS_BIN", monfs_bin())
        .stdin(Stdio::null())
        .output()
        .expect("run monfs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Nothing of a run is left: its mountpoint, its socket and log (named
/// after the mountpoint), and no mount anywhere below `tmp`.
fn assert_nothing_left(tmp: &Path) {
    let left: Vec<PathBuf> = std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "left behind in TMPDIR: {left:?}");
    let name = tmp
        .display()
        .to_string()
        .trim_start_matches('/')
        .replace('/', "-");
    let run_dir = if nix::unistd::geteuid().is_root() {
        PathBuf::from("/run/monfs")
    } else {
        PathBuf::from(format!("/tmp/monfs-{}", nix::unistd::geteuid()))
    };
    if let Ok(rd) = std::fs::read_dir(&run_dir) {
        for e in rd {
            let n = e.unwrap().file_name().to_string_lossy().into_owned();
            assert!(
                !n.starts_with(&name),
                "left behind in {}: {n}",
                run_dir.display()
            );
        }
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(&tmp.display().to_string()),
        "a mount below {} is left:\n{mounts}",
        tmp.display()
    );
}

#[test]
fn command_runs_where_the_kernels_paths_are_monfss() {
    let tmp = tempfile::tempdir().unwrap();
    let script = r#"
        set -e
        echo "mount=$MONFS_MOUNT"
        echo "socket=$MONFS_SOCKET"
        echo "uid=$(id -u)"
        for p in /dev/usbmon0 /dev/usbmon1 /dev/monreader /sys/kernel/tracing \
                 /sys/kernel/debug/tracing /sys/kernel/debug/usb/usbmon \
                 /sys/kernel/debug/usb/devices /dev/bus/usb /sys/bus/usb \
                 /sys/devices/platform/monfs_hcd.1; do
            echo "type $p $(stat -f -c %t "$p")"
        done
        grep -m1 '^T:' /sys/kernel/debug/usb/devices
        test -e /sys/kernel/debug/usb/usbmon/1u && echo text-usbmon
        grep -m1 -w tracefs /proc/mounts | cut -d' ' -f2,3
        "$MONFS_BIN" ctl help >/dev/null && echo ctl-by-socket
        "$MONFS_BIN" ctl "$MONFS_MOUNT" help >/dev/null && echo ctl-by-mount
        test -e "$MONFS_SOCKET" && echo socket-exists
        exit 7
    "#;
    let o = run_in(tmp.path(), &["--no-io-uring"], &["sh", "-c", script]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(7), "{out}{}", text(&o.stderr));
    let mnt = out
        .lines()
        .find_map(|l| l.strip_prefix("mount="))
        .unwrap()
        .to_string();
    assert!(mnt.starts_with(&tmp.path().display().to_string()), "{out}");
    assert!(
        out.contains(&format!("uid={}", nix::unistd::getuid())),
        "the command runs as the caller: {out}"
    );
    for l in out.lines().filter(|l| l.starts_with("type ")) {
        assert!(l.ends_with(FUSE_MAGIC), "not monfs's: {l}\n{out}");
    }
    assert_eq!(out.lines().filter(|l| l.starts_with("type ")).count(), 10);
    assert!(out.contains("T:  Bus=01 Lev=00"), "{out}");
    for word in [
        "text-usbmon",
        "ctl-by-socket",
        "ctl-by-mount",
        "socket-exists",
    ] {
        assert!(out.lines().any(|l| l == word), "{word} missing:\n{out}");
    }
    if nix::unistd::geteuid().is_root() {
        // The first tracefs line of /proc/mounts is at /sys/kernel/tracing
        // (libtracefs and ftracetest take it).
        assert!(out.contains("/sys/kernel/tracing tracefs"), "{out}");
    }
    assert_nothing_left(tmp.path());
}

#[test]
fn exit_statuses_and_nothing_left() {
    let tmp = tempfile::tempdir().unwrap();
    let o = run_in(tmp.path(), &[], &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(o.status.code(), Some(128 + 15), "{}", text(&o.stderr));
    assert_nothing_left(tmp.path());

    let o = run_in(tmp.path(), &[], &["/nonexistent/command"]);
    assert_eq!(o.status.code(), Some(127), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("/nonexistent/command"));
    assert_nothing_left(tmp.path());

    let plain = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(plain.path(), "#!/bin/sh\nexit 0\n").unwrap();
    let o = run_in(tmp.path(), &[], &[plain.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(126), "{}", text(&o.stderr));
    assert_nothing_left(tmp.path());

    let o = run_in(tmp.path(), &[], &["true"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(
        o.stderr.is_empty(),
        "a good run is quiet: {}",
        text(&o.stderr)
    );
    assert_nothing_left(tmp.path());
}

#[test]
fn a_bad_config_shows_the_daemons_log_exits_125_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = cfg_dir.path().join("bad.yaml");
    std::fs::write(&cfg, "usb:\n  buses:\n    - bus: nine\n").unwrap();
    let o = run_in(
        tmp.path(),
        &["--config", cfg.to_str().unwrap()],
        &["sh", "-c", "echo ran"],
    );
    assert_eq!(o.status.code(), Some(125));
    assert!(o.stdout.is_empty(), "the command must not run");
    let err = text(&o.stderr);
    assert!(err.contains("monfs did not start (exit status 2)"), "{err}");
    assert!(
        err.contains("usb.buses[0].bus"),
        "the daemon's own words: {err}"
    );
    assert_nothing_left(tmp.path());
}

#[test]
fn a_signal_sent_to_monfs_run_reaches_the_command() {
    common::require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(monfs_bin())
        .args(["run", "--", "sh", "-c"])
        .arg("trap 'exit 42' TERM; echo ready; while :; do sleep 0.05; done")
        .env("TMPDIR", tmp.path())
        .env_remove("XDG_RUNTIME_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut b = [0u8; 6];
    std::io::Read::read_exact(&mut out, &mut b).unwrap();
    assert_eq!(&b, b"ready\n");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + HANG;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "monfs run did not end");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(42));
    assert_nothing_left(tmp.path());
}

#[test]
fn use_takes_an_existing_mount_and_refuses_what_is_not_monfs() {
    let m = common::Mount::default_config();
    let tmp = tempfile::tempdir().unwrap();
    let o = run_in(
        tmp.path(),
        &["--use", m.root().to_str().unwrap()],
        &[
            "sh",
            "-c",
            "echo $MONFS_MOUNT; stat -f -c %t /dev/usbmon1 /sys/kernel/tracing",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines,
        [
            std::fs::canonicalize(m.root()).unwrap().to_str().unwrap(),
            FUSE_MAGIC,
            FUSE_MAGIC
        ],
        "{out}"
    );
    // Found by file-system type: a directory that is not a monfs is refused.
    let o = run_in(
        tmp.path(),
        &["--use", tmp.path().to_str().unwrap()],
        &["true"],
    );
    assert_eq!(o.status.code(), Some(125));
    assert!(
        text(&o.stderr).contains("is not a monfs mount"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn killing_monfs_run_ends_the_command_and_the_daemon_and_leaves_nothing() {
    common::require_fuse();
    let tmp = tempfile::tempdir().unwrap();
    let mut child = Command::new(monfs_bin())
        .args(["run", "--no-wait", "--", "sh", "-c"])
        .arg("echo $$; exec sleep 600")
        .env("TMPDIR", tmp.path())
        .env_remove("XDG_RUNTIME_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let cmd_pid: u32 = line.trim().parse().unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + HANG;
    // The command is killed with monfs run; the daemon unmounts, removes
    // its socket and the mountpoint, and exits.
    loop {
        let cmd_alive = common::proc_state(cmd_pid).is_some_and(|s| s != 'Z');
        let left = std::fs::read_dir(tmp.path()).unwrap().count();
        if !cmd_alive && left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "after SIGKILL: command alive {cmd_alive}, {left} entries left in TMPDIR"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_nothing_left(tmp.path());
}

/// A peer that exits before its device enumerates (it answers ep0, so the
/// hub driver finds it gone): monfs run says so on
/// its terminal with the daemon's reason, runs no command and exits 125;
/// `--quiet` keeps the daemon's warning off the terminal, not monfs run's
/// own line; `--no-wait` runs the command anyway. A peer command that
/// cannot be run is refused when the configuration is read (exit 125, the
/// daemon's exit 2 and its message).
#[test]
fn a_peer_that_fails_before_enumeration_stops_the_run_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("peer.yaml");
    let yaml = |command: &str| {
        format!(
            "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {}\n          ep0: peer\n          command: {command}\n",
            common::repo_path("tests/data/sysfs/qemu-usb-kbd/descriptors")
        )
    };
    std::fs::write(&cfg, yaml("[sh, -c, \"exit 3\"]")).unwrap();
    let cfg_s = cfg.to_str().unwrap();
    let cmd = ["sh", "-c", "echo COMMAND-RAN"];
    let work = tempfile::tempdir().unwrap();
    let o = run_in(work.path(), &["--config", cfg_s], &cmd);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(!text(&o.stdout).contains("COMMAND-RAN"));
    assert!(
        err.contains("monfs: usb bus 1 port 1: external device's peer"),
        "{err}"
    );
    assert!(
        err.contains("monfs run: a simulated device failed before the command started"),
        "{err}"
    );
    assert_nothing_left(work.path());

    let o = run_in(work.path(), &["--quiet", "--config", cfg_s], &cmd);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(!err.contains("monfs: usb bus"), "{err}");
    assert!(
        err.contains("monfs run: a simulated device failed"),
        "{err}"
    );

    let o = run_in(work.path(), &["--no-wait", "--config", cfg_s], &cmd);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    assert!(text(&o.stdout).contains("COMMAND-RAN"));
    assert_nothing_left(work.path());

    std::fs::write(&cfg, yaml("[/nonexistent/peer]")).unwrap();
    let o = run_in(work.path(), &["--config", cfg_s], &cmd);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(125), "{err}");
    assert!(
        err.contains("command: cannot run \"/nonexistent/peer\": no such file"),
        "{err}"
    );
    assert_nothing_left(work.path());
}
