//! Shared harness for integration tests: mounts monfs in a temp dir with a
//! given config and runs real processes against it. Tests fail (never skip)
//! when FUSE or root is missing.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A running monfs mount.
pub struct Mount {
    pub dir: tempfile::TempDir,
    pub child: Child,
    pub log: PathBuf,
}

pub fn monfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_monfs"))
}

fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need FUSE (modprobe fuse) and must not be skipped"
    );
    // SAFETY: geteuid cannot fail.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "integration tests must run as root"
    );
}

impl Mount {
    /// Mount with the built-in default config.
    pub fn default_config() -> Mount {
        Mount::start(None, &[])
    }

    /// Mount with this YAML config.
    pub fn with_config(yaml: &str) -> Mount {
        Mount::start(Some(yaml), &[])
    }

    /// Mount with an optional config and extra arguments.
    pub fn start(yaml: Option<&str>, extra: &[&str]) -> Mount {
        require_fuse();
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let log = dir.path().join("monfs.log");
        let mut cmd = Command::new(monfs_bin());
        cmd.arg("--log-level")
            .arg("debug")
            .arg("mount")
            .arg(&mnt)
            .arg("--foreground");
        if let Some(y) = yaml {
            let cfg = dir.path().join("config.yaml");
            std::fs::write(&cfg, y).unwrap();
            cmd.arg("--config").arg(&cfg);
        }
        cmd.args(extra);
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        let child = cmd.spawn().expect("spawn monfs");
        let m = Mount { dir, child, log };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !m.path("monfs/null").exists() {
            assert!(
                Instant::now() < deadline,
                "monfs did not mount within 10 s; log:\n{}",
                m.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    pub fn root(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Run a shell command with the mount root as working directory.
    pub fn sh(&self, script: &str) -> Output {
        Command::new("bash")
            .arg("-c")
            .arg(script)
            .current_dir(self.root())
            .output()
            .expect("run bash")
    }

    /// Run a shell command and return its stdout, asserting success.
    pub fn sh_ok(&self, script: &str) -> String {
        let o = self.sh(script);
        assert!(
            o.status.success(),
            "`{script}` failed: {}\nstderr: {}\nlog:\n{}",
            o.status,
            String::from_utf8_lossy(&o.stderr),
            self.log_text()
        );
        String::from_utf8(o.stdout).expect("utf8")
    }

    /// Whether the daemon is still alive.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = Command::new("umount").arg("-l").arg(self.root()).output();
    }
}

/// State letter of a process from /proc/<pid>/stat (R, S, D, Z...).
pub fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    after.trim_start().chars().next()
}

/// Wait until `pid` sleeps (blocked in a read), up to 5 s.
pub fn wait_blocked(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some('S') | Some('D') = proc_state(pid) {
            // Give the read time to reach the daemon and park.
            std::thread::sleep(Duration::from_millis(50));
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} never blocked");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Compile a C program from tests/c/NAME.c (or examples/NAME.c) into the temp
/// dir; returns the binary.
pub fn compile_c(name: &str, out_dir: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut src = root.join("tests/c").join(format!("{name}.c"));
    if !src.exists() {
        src = root.join("examples").join(format!("{name}.c"));
    }
    let bin = out_dir.join(name);
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .output()
        .expect("run cc (install gcc)");
    assert!(
        o.status.success(),
        "compiling {}: {}",
        src.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    bin
}

/// Run `tcpdump -i IFACE -w OUT` for `secs` seconds in a private mount
/// namespace where /dev/usbmonN are the mount's files (scripts/usbmon-ns),
/// and check that it captured without kernel-side drops.
pub fn tcpdump(m: &Mount, iface: &str, secs: u32, out: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/usbmon-ns");
    let o = Command::new(script)
        .arg(m.root())
        .args([
            "timeout",
            "-s",
            "INT",
            &secs.to_string(),
            "tcpdump",
            "-i",
            iface,
            "-w",
        ])
        .arg(out)
        .output()
        .expect("scripts/usbmon-ns (needs tcpdump)");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("packets captured"), "tcpdump: {err}");
    assert!(
        err.lines().any(|l| l == "0 packets dropped by kernel"),
        "{err}"
    );
}
