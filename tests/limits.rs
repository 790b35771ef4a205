//! Limits hit on purpose through the real mount (issue 14): past each, the
//! caller gets the kernel's errno for a failed allocation (ENOMEM), the
//! daemon logs which limit, changes nothing else and keeps serving in
//! bounded memory. The limits are in src/base/budget.rs and docs/threat-model.md.

mod common;

use std::fs::File;
use std::os::fd::AsRawFd;

use common::Mount;
use monfs::base::budget::{USBMON_READERS, USBMON_RINGS};

const QUIET: &str = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n";

/// MON_IOCQ_RING_SIZE and MON_IOCT_RING_SIZE.
const Q_RING_SIZE: libc::c_ulong = 0x9205;
const T_RING_SIZE: libc::c_ulong = 0x9204;
const BUFF_MAX: usize = 64 << 20;

fn errno_of(r: std::io::Result<File>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// Open `path`, retrying while it gives ENOMEM: a close reaches the daemon
/// asynchronously (FUSE_RELEASE), so a slot freed by one is free a little
/// later.
fn open_when_freed(path: &std::path::Path) -> File {
    let deadline = std::time::Instant::now() + common::HANG;
    loop {
        match File::open(path) {
            Ok(f) => return f,
            Err(e) if e.raw_os_error() == Some(libc::ENOMEM) => {
                assert!(std::time::Instant::now() < deadline, "never freed");
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

#[test]
fn usbmon_readers_past_the_limit_get_enomem() {
    let mut m = Mount::with_config(QUIET);
    let pid = m.child.id();
    let before = common::vm_rss_kib(pid).unwrap();
    let mut open = Vec::new();
    let err = loop {
        let path = if open.len() % 2 == 0 {
            "usb/usbmon/1u"
        } else {
            "dev/usbmon1"
        };
        match File::open(m.path(path)) {
            Ok(f) => open.push(f),
            Err(e) => break e,
        }
        assert!(open.len() <= USBMON_READERS.limit(), "no limit");
    };
    assert_eq!(err.raw_os_error(), Some(libc::ENOMEM), "{err}");
    // Readers of other facilities and the daemon itself take none.
    assert_eq!(open.len(), USBMON_READERS.limit());
    assert!(m.log_text().contains("limit of usbmon readers reached"));
    // One closed, one more fits (once the daemon has handled the close);
    // the rest still serve.
    open.pop();
    open.push(open_when_freed(&m.path("usb/usbmon/1u")));
    assert_eq!(
        errno_of(File::open(m.path("usb/usbmon/0u"))),
        Some(libc::ENOMEM)
    );
    m.sh_ok("cat usb/devices tracing/available_events >/dev/null");
    assert!(m.alive());
    let grown = common::vm_rss_kib(pid).unwrap().saturating_sub(before);
    drop(open);
    assert!(
        grown < 256 * 1024,
        "{} readers cost {grown} KiB",
        USBMON_READERS.limit()
    );
    // All closed: a reader is welcome again.
    open_when_freed(&m.path("usb/usbmon/0u"));
}

#[test]
fn usbmon_ring_memory_past_the_limit_gets_enomem() {
    let mut m = Mount::with_config(QUIET);
    m.sh_ok("echo 'pause 1' > monfs/ctl");
    let mut rings = Vec::new();
    let failed = loop {
        let f = File::open(m.path("dev/usbmon1")).unwrap();
        // SAFETY: ioctls with integer arguments on our own descriptor.
        let r = unsafe { libc::ioctl(f.as_raw_fd(), T_RING_SIZE, BUFF_MAX) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{e}");
            break f;
        }
        rings.push(f);
        assert!(rings.len() <= USBMON_RINGS.limit() / BUFF_MAX, "no limit");
    };
    assert_eq!(rings.len(), USBMON_RINGS.limit() / BUFF_MAX - 1);
    assert!(m.log_text().contains("limit of usbmon ring memory reached"));
    // The refused reader keeps its ring, and works.
    // SAFETY: as above.
    let size = unsafe { libc::ioctl(failed.as_raw_fd(), Q_RING_SIZE) };
    assert_eq!(size, 300 * 1024);
    // Memory given back is available again, once the daemon has handled
    // the close (FUSE_RELEASE comes asynchronously).
    drop(rings.pop());
    let deadline = std::time::Instant::now() + common::HANG;
    // SAFETY: as above.
    while unsafe { libc::ioctl(failed.as_raw_fd(), T_RING_SIZE, BUFF_MAX) } != 0 {
        let e = std::io::Error::last_os_error();
        assert_eq!(e.raw_os_error(), Some(libc::ENOMEM), "{e}");
        assert!(
            std::time::Instant::now() < deadline,
            "the ring was never freed"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(m.alive());
}

/// 10,000 `stat dev/usbmon1` (a file with an inode per open, so every
/// lookup reaches the daemon) leave the daemon serving in bounded memory.
#[test]
fn ten_thousand_stats_of_a_device_stay_bounded() {
    let mut m = Mount::with_config(QUIET);
    let pid = m.child.id();
    let before = common::vm_rss_kib(pid).unwrap();
    let script = format!(
        "import os\nfor _ in range(10000):\n    os.stat({:?})\n",
        m.path("dev/usbmon1").display().to_string()
    );
    let o = std::process::Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let grown = common::vm_rss_kib(pid).unwrap().saturating_sub(before);
    assert!(grown < 16 * 1024, "10,000 stats cost {grown} KiB");
    assert!(m.alive());
}
