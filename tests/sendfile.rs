//! sendfile(2) and splice readers (busybox `cat`, `sendfile`) on the snapshot
//! files `usb/devices` and `usb/usbmon/Ns`. Such readers never send a read to
//! the daemon: the kernel copies from the page cache up to the inode's size,
//! which is 0 for these files (as in debugfs), so without help they read
//! nothing while read(2) works.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::Mount;

/// Run the copier on `files` (relative to the mount); returns (stdout, stderr
/// lines).
fn sendfile(m: &Mount, bin: &Path, args: &[&str]) -> (String, Vec<String>) {
    let o = Command::new(bin)
        .args(args)
        .current_dir(m.root())
        .output()
        .expect("run sendfile_cat");
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert!(o.status.success(), "sendfile_cat {args:?} failed: {err}");
    (
        String::from_utf8(o.stdout).expect("utf8"),
        err.lines().map(str::to_string).collect(),
    )
}

/// `usb/devices` as read(2) gives it: a blank line (as in the kernel), then
/// bus 1's root hub.
fn check_devices(text: &str, how: &str) {
    assert!(
        text.starts_with("\nT:  Bus=01 Lev=00 Prnt=00 Port=00 Cnt=00 Dev#=  1"),
        "{how}: usb/devices does not start with bus 1's root hub: {text:?}"
    );
    assert!(text.ends_with('\n'), "{how}: no final newline: {text:?}");
    assert!(
        text.lines().filter(|l| l.starts_with("T:")).count() >= 2,
        "{how}: fewer than two devices: {text:?}"
    );
}

fn check_stats(text: &str, how: &str) {
    let w: Vec<&str> = text.trim_end_matches('\n').split(' ').collect();
    assert!(
        text.ends_with('\n')
            && text.matches('\n').count() == 1
            && w.len() == 6
            && w[0] == "nreaders"
            && w[2] == "events"
            && w[4] == "text_lost"
            && [w[1], w[3], w[5]].iter().all(|n| n.parse::<u64>().is_ok()),
        "{how}: not one 'nreaders N events N text_lost N' line: {text:?}"
    );
}

#[test]
fn sendfile_reads_snapshot_files_whole() {
    let m = Mount::default_config();
    let bin = common::compile_c("sendfile_cat", m.dir.path());
    for round in 0..2 {
        // usb/devices: sendfile gives what read(2) gives, and fstat on the
        // open file agrees with the bytes sent.
        let (out, err) = sendfile(&m, &bin, &["usb/devices"]);
        check_devices(&out, &format!("sendfile, round {round}"));
        assert_eq!(
            err,
            [format!("usb/devices fstat={0} sent={0}", out.len())],
            "fstat of the open file must give the size sendfile sends"
        );
        check_devices(&m.sh_ok("cat usb/devices"), "read(2)");
        for f in ["usb/usbmon/0s", "usb/usbmon/1s"] {
            let (out, err) = sendfile(&m, &bin, &[f]);
            check_stats(&out, &format!("sendfile {f}"));
            assert_eq!(err, [format!("{f} fstat={0} sent={0}", out.len())]);
            check_stats(&m.sh_ok(&format!("cat {f}")), "read(2)");
        }
    }
    // Two opens at once: each gets a whole snapshot.
    let (out, err) = sendfile(&m, &bin, &["-2", "usb/devices", "usb/usbmon/1s"]);
    assert_eq!(err.len(), 4, "{err:?}");
    assert!(
        err.iter().all(|l| {
            let sent = l.rsplit_once("sent=").map(|x| x.1).unwrap_or("0");
            sent.parse::<u64>().unwrap_or(0) > 20
        }),
        "an open got nothing: {err:?}"
    );
    assert_eq!(out.matches("nreaders ").count(), 2, "{out:?}");
    assert_eq!(out.matches("T:  Bus=01 Lev=00").count(), 2, "{out:?}");
    // Closed again, stat shows size 0, as debugfs does (once the attribute
    // cache of 1 s has expired).
    std::thread::sleep(Duration::from_millis(1200));
    for f in ["usb/devices", "usb/usbmon/1s"] {
        let md = std::fs::metadata(m.path(f)).unwrap();
        assert_eq!(md.len(), 0, "{f}: stat size once closed");
    }
}

/// tracefs files are generated text too: a sendfile reader (busybox `cat`)
/// gets what read(2) gets, as on the real tracefs, whose seq_files splice.
#[test]
fn sendfile_reads_tracefs_files_whole() {
    let m = Mount::default_config();
    let bin = common::compile_c("sendfile_cat", m.dir.path());
    m.sh_ok("echo usb:usb_urb_complete > tracing/set_event");
    m.sh_ok("echo 'u:monfs_sendfile u32 count' >> tracing/dynamic_events");
    m.sh_ok("echo 0 > tracing/tracing_on");
    for f in [
        "tracing/available_events",
        "tracing/set_event",
        "tracing/events/usb/usb_urb_complete/format",
        "tracing/events/usb/usb_urb_complete/id",
        "tracing/events/usb/usb_urb_complete/enable",
        "tracing/tracing_on",
        "tracing/dynamic_events",
        "tracing/trace",
    ] {
        let want = m.sh_ok(&format!("cat {f}"));
        assert!(!want.is_empty(), "{f} is empty through read(2)");
        let (out, err) = sendfile(&m, &bin, &[f]);
        assert_eq!(out, want, "{f}: sendfile and read(2) differ");
        assert_eq!(err, [format!("{f} fstat={0} sent={0}", out.len())]);
    }
}
