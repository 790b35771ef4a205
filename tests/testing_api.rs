//! `monfs::testing`, the public harness, used as a tool's tests would use
//! it: mount, steer, read, a refused command and a mount that cannot start
//! as typed errors with monfs's words, and nothing left after a drop.

use monfs::testing::{is_mounted, Error, Options};

const KEYBOARD: &str =
    "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-keyboard}\n";

fn options() -> Options {
    assert!(
        std::path::Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need FUSE and must not be skipped"
    );
    Options::new()
        .binary(env!("CARGO_BIN_EXE_monfs"))
        .arg("--no-io-uring")
}

#[test]
fn mounts_steers_and_leaves_nothing_behind() {
    let mut m = options().config(KEYBOARD).start().expect("mount");
    assert!(m.alive());
    assert!(m.path("usb/usbmon/1u").exists());
    assert_eq!(m.ctl("pause 1").expect("pause"), "bus 1 paused");
    assert_eq!(m.ctl("resume 1").expect("resume"), "bus 1 resumed");
    match m.ctl("pause 9") {
        Err(Error::Refused { command, reason }) => {
            assert_eq!(command, "pause 9");
            assert!(!reason.is_empty());
        }
        other => panic!("pause 9 was not refused: {other:?}"),
    }
    let socket = m.socket().expect("socket");
    assert!(socket.starts_with(m.dir.path()), "{}", socket.display());
    assert!(m.log_text().contains("control"), "{}", m.log_text());
    let (root, dir, pid) = (m.root(), m.dir.path().to_path_buf(), m.child.id());
    drop(m);
    assert!(!is_mounted(&root), "still mounted");
    assert!(!dir.exists(), "the directory is left");
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        "the daemon was not reaped"
    );
}

#[test]
fn a_mount_that_cannot_start_is_an_error_with_the_log() {
    let bad = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: toaster}\n";
    match options().config(bad).start() {
        Err(e @ Error::DidNotMount { .. }) => {
            let text = e.to_string();
            assert!(text.contains("the daemon exited"), "{text}");
            assert!(text.contains("unknown variant `toaster`"), "{text}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a toaster mounted"),
    }
}

#[test]
fn a_missing_binary_is_an_io_error_naming_it() {
    let e = Options::new()
        .binary("/nonexistent/monfs")
        .start()
        .expect_err("no mount without a binary");
    assert!(e.to_string().contains("/nonexistent/monfs"), "{e}");
}
