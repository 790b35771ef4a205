//! monfs mounted by an unprivileged user, through fusermount3: the files
//! belong to the user, `monfs umount` unmounts, a SIGKILLed daemon leaves
//! no mount behind (auto_unmount), and a producer whose memory the kernel
//! refuses to the daemon gets EPERM from DIAG_IOCSREG. In the rootless leg
//! the test runs as that user already; as root it runs the daemon and its
//! clients as `nobody` (65534) through setpriv, so both legs cover it.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{compile_c, HANG};

const NOBODY: u32 = 65534;

/// A command run as the unprivileged user: ourselves in the rootless leg,
/// nobody through setpriv as root.
fn user_cmd(prog: impl AsRef<std::ffi::OsStr>) -> Command {
    if nix::unistd::geteuid().is_root() {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={NOBODY}"))
            .arg(format!("--regid={NOBODY}"))
            .arg("--clear-groups")
            .arg("--")
            .arg(prog);
        c
    } else {
        Command::new(prog)
    }
}

fn user_uid() -> u32 {
    if nix::unistd::geteuid().is_root() {
        NOBODY
    } else {
        nix::unistd::getuid().as_raw()
    }
}

/// A daemon started as the user, in the foreground.
struct UserMount {
    dir: tempfile::TempDir,
    child: Child,
}

impl UserMount {
    fn start() -> UserMount {
        assert!(
            Command::new("fusermount3").arg("-V").output().is_ok(),
            "fusermount3 is missing (apt-get install fuse3)"
        );
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        if nix::unistd::geteuid().is_root() {
            let u = Some(nix::unistd::Uid::from_raw(NOBODY));
            let g = Some(nix::unistd::Gid::from_raw(NOBODY));
            nix::unistd::chown(dir.path(), u, g).unwrap();
            nix::unistd::chown(&mnt, u, g).unwrap();
        }
        let log = std::fs::File::create(dir.path().join("log")).unwrap();
        if nix::unistd::geteuid().is_root() {
            nix::unistd::chown(
                &dir.path().join("log"),
                Some(nix::unistd::Uid::from_raw(NOBODY)),
                None,
            )
            .unwrap();
        }
        let child = user_cmd(common::monfs_bin())
            .args(["--log-level", "debug", "mount", "--foreground"])
            .arg(&mnt)
            .arg("--ctl-socket")
            .arg(dir.path().join("ctl.sock"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        let m = UserMount { dir, child };
        let deadline = Instant::now() + HANG;
        while !m.user_ok(&format!("test -e '{}'", m.path("monfs/null").display())) {
            assert!(Instant::now() < deadline, "no mount; log:\n{}", m.log());
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Run a shell command as the user; whether it succeeded.
    fn user_ok(&self, script: &str) -> bool {
        user_cmd("sh")
            .args(["-c", script])
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .success()
    }

    /// Run a shell command as the user; its stdout, asserting success.
    fn user_sh(&self, script: &str) -> String {
        let o = user_cmd("sh").args(["-c", script]).output().unwrap();
        assert!(
            o.status.success(),
            "{script}: {}\nlog:\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.log()
        );
        String::from_utf8(o.stdout).unwrap()
    }
}

impl Drop for UserMount {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = user_cmd("fusermount3").arg("-uz").arg(self.root()).output();
    }
}

/// Whether `dir` is a mountpoint, by /proc/self/mountinfo (field 5).
fn mounted(dir: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = dir.to_string_lossy();
    info.lines()
        .any(|l| l.split(' ').nth(4).is_some_and(|p| p == want))
}

fn wait_unmounted(dir: &Path, log: impl Fn() -> String) {
    let deadline = Instant::now() + HANG;
    while mounted(dir) {
        assert!(
            Instant::now() < deadline,
            "{} is still mounted; log:\n{}",
            dir.display(),
            log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_sigkilled_daemon_leaves_no_mount_behind() {
    let mut m = UserMount::start();
    assert!(mounted(&m.root()));
    assert!(
        m.log().contains("mounted through fusermount3"),
        "{}",
        m.log()
    );
    m.child.kill().unwrap(); // SIGKILL: no handler runs.
    m.child.wait().unwrap();
    wait_unmounted(&m.root(), || m.log());
    // The directory is an ordinary empty one again.
    let left = m.user_sh(&format!("ls -A '{}'", m.root().display()));
    assert_eq!(left, "");
}

#[test]
fn monfs_umount_unmounts_and_the_daemon_exits() {
    let mut m = UserMount::start();
    let o = user_cmd(common::monfs_bin())
        .arg("umount")
        .arg(m.root())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let status = m.child.wait().unwrap();
    assert!(status.success(), "daemon: {status}\nlog:\n{}", m.log());
    wait_unmounted(&m.root(), || m.log());
    // Nothing there now: unmounting again fails, and says so.
    let o = user_cmd(common::monfs_bin())
        .arg("umount")
        .arg(m.root())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot unmount"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_files_belong_to_the_user_with_the_kernels_modes() {
    let m = UserMount::start();
    let uid = user_uid();
    let stat = |rel: &str| {
        m.user_sh(&format!("stat -c '%u %g %a' '{}'", m.path(rel).display()))
            .trim()
            .to_string()
    };
    assert_eq!(stat("dev/usbmon1"), format!("{uid} {uid} 600"));
    assert_eq!(stat("tracing"), format!("{uid} {uid} 700"));
    assert_eq!(stat("tracing/user_events_data"), format!("{uid} {uid} 640"));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    let line = mounts
        .lines()
        .find(|l| l.split(' ').nth(1) == Some(&*m.root().to_string_lossy()))
        .unwrap()
        .to_string();
    assert!(
        line.contains(&format!("user_id={uid},group_id={uid}")),
        "{line}"
    );
    assert!(
        line.contains("fuse.monfs") && line.contains("nosuid,nodev"),
        "{line}"
    );
    // allow_other exactly where /etc/fuse.conf allows it; else the log says
    // the mount is private.
    let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    if conf.lines().any(|l| l.trim() == "user_allow_other") {
        assert!(line.contains("allow_other"), "{line}");
    } else {
        assert!(!line.contains("allow_other"), "{line}");
        assert_eq!(m.log().matches("private mount").count(), 1, "{}", m.log());
    }
}

#[test]
fn a_producer_the_kernel_keeps_the_daemon_out_of_gets_eperm() {
    let m = UserMount::start();
    let bin = compile_c("user_events_tool", m.dir.path());
    let out = common::stdout_ok(
        user_cmd(&bin).arg(m.path("tracing")).arg("nodump"),
        "user_events_tool nodump",
    );
    for want in ["new_reg=EPERM", "old_reg=EPERM", "del=EPERM"] {
        assert!(
            out.lines().any(|l| l == want),
            "{want}:\n{out}\nlog:\n{}",
            m.log()
        );
    }
}
