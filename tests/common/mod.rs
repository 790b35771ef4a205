//! Shared harness for integration tests: mounts monfs in a temp dir with a
//! given config and runs real processes against it. Tests fail (never skip)
//! when FUSE or root is missing.
//!
//! The rootless leg (`MONFS_TEST_ROOTLESS=1`, scripts/rootless-tests) runs
//! the same tests as an unprivileged user, monfs mounting through
//! fusermount3; there, and only there, the tests in [`ROOT_ONLY`] skip
//! themselves (through [`root_only`]) with the reason listed.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A running monfs mount: the public harness, [`monfs::testing::Mount`]
/// (its `dir`, `child` and `log`, `root()`, `path()`, `log_text()`...), with
/// the legs' options (io_uring, rootless) and the helpers of this suite.
pub struct Mount(monfs::testing::Mount);

impl std::ops::Deref for Mount {
    type Target = monfs::testing::Mount;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl std::ops::DerefMut for Mount {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

/// How long a test waits for something that must happen before calling it
/// a hang. Tests assert no latencies: this only turns a hang into a
/// failure, with room for a loaded machine.
pub const HANG: Duration = Duration::from_secs(30);

/// A configured event with a number and a string (`myapp:tick`), for
/// injecting known values through its `inject` file.
pub const TICK: &str = r#"
tracing:
  events:
    - system: myapp
      name: tick
      fields:
        - {name: count, type: u32}
        - {name: msg, type: "__data_loc char[]"}
      format: '"count=%u msg=%s", REC->count, __get_str(msg)'
"#;

/// The CPUs the tests may use (the per-CPU files a mount has, on a test
/// host that runs them on every CPU).
pub fn cpus() -> usize {
    std::thread::available_parallelism().unwrap().get()
}

pub fn monfs_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_monfs"))
}

/// `monfs check-config PATH`: its exit code and its stderr.
pub fn check_config(path: &Path) -> (Option<i32>, String) {
    let o = Command::new(monfs_bin())
        .arg("check-config")
        .arg(path)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).to_string(),
    )
}

/// Whether this is the io_uring leg (`MONFS_TEST_IO_URING=1`, scripts/test):
/// every mount takes its requests through FUSE over io_uring (`--io-uring`).
pub fn io_uring_leg() -> bool {
    std::env::var_os("MONFS_TEST_IO_URING").is_some_and(|v| v == "1")
}

/// Whether this is the rootless leg (`MONFS_TEST_ROOTLESS=1`).
pub fn rootless() -> bool {
    std::env::var_os("MONFS_TEST_ROOTLESS").is_some_and(|v| v == "1")
}

/// Tests that need root by nature, skipped in the rootless leg only:
/// (test binary, test name, reason).
pub const ROOT_ONLY: &[(&str, &str, &str)] = &[
    (
        "ctl_hostile",
        "the_default_socket_dir_is_private_and_another_user_cannot_reach_it",
        "checks root's /run/monfs and runs a client as another user (setpriv needs root)",
    ),
    (
        "ctl_hostile",
        "another_user_is_refused_even_where_the_socket_is_reachable",
        "runs a client as another user (setpriv needs root)",
    ),
    (
        "limits",
        "one_user_cannot_drain_what_others_need",
        "runs clients as other users (setpriv needs root)",
    ),
    (
        "limits",
        "request_stats_are_private_and_refusals_log_at_a_limited_rate",
        "runs a client as another user (setpriv needs root)",
    ),
    (
        "tracefs",
        "differential_against_real_tracefs",
        "compares with the machine's real tracefs, which only root may use",
    ),
    (
        "user_events",
        "dynamic_events_and_events_tree",
        "creates events through dynamic_events, which needs CAP_PERFMON (as in the kernel)",
    ),
    (
        "user_events",
        "names_and_strings_that_are_not_utf8_keep_their_bytes",
        "creates events through dynamic_events, which needs CAP_PERFMON (as in the kernel)",
    ),
    (
        "user_events",
        "deleted_and_recreated_event_is_reachable_at_once",
        "creates events through dynamic_events, which needs CAP_PERFMON (as in the kernel)",
    ),
    (
        "user_events",
        "events_named_like_system_files_shadow_them_until_deleted",
        "creates events through dynamic_events, which needs CAP_PERFMON (as in the kernel)",
    ),
    (
        "user_events",
        "tracepoint_crate_through_trace_ns",
        "builds examples/tracepoint-producer with root's cargo (~/.cargo of root)",
    ),
];

/// Call first in a test listed in [`ROOT_ONLY`]: true (after printing the
/// reason) when the test is to be skipped, i.e. in the rootless leg. Panics
/// for a test missing from the list, so that the list stays the one place
/// that names them. The test is known by its thread's name (libtest names
/// each test's thread after it) and the binary's name.
pub fn root_only() -> bool {
    let exe = std::env::current_exe().unwrap();
    let stem = exe.file_stem().unwrap().to_string_lossy().into_owned();
    let binary = stem.rsplit_once('-').map_or(stem.as_str(), |(b, _)| b);
    let thread = std::thread::current();
    let test = thread.name().unwrap_or_default();
    let test = test.rsplit("::").next().unwrap_or(test);
    let Some((_, _, why)) = ROOT_ONLY
        .iter()
        .find(|(b, t, _)| *b == binary && *t == test)
    else {
        panic!("{binary}::{test} calls root_only() but is not listed in tests/common ROOT_ONLY");
    };
    if rootless() {
        // Past libtest's capture, so that the leg's output shows every skip.
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "skipped in the rootless leg: {binary}::{test}: {why}"
        );
    }
    rootless()
}

pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: these tests need FUSE (modprobe fuse) and must not be skipped"
    );
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    if rootless() {
        assert_ne!(euid, 0, "the rootless leg must run as an unprivileged user");
        let helper = Command::new("fusermount3").arg("-V").output();
        assert!(
            helper.is_ok_and(|o| o.status.success()),
            "fusermount3 is missing: the rootless leg needs fuse3 and must not be skipped"
        );
    } else {
        assert_eq!(euid, 0, "integration tests must run as root");
    }
    // Tests end their clients with SIGINT, as Ctrl-C would. A test run
    // started as a background job of a non-interactive shell inherits SIGINT
    // and SIGQUIT ignored, and so would every client: restore the defaults.
    // SAFETY: setting a signal disposition to the default.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
        libc::signal(libc::SIGQUIT, libc::SIG_DFL);
    }
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
        Mount::start_env(yaml, extra, &[])
    }

    /// Mount with an optional config, extra arguments and extra environment
    /// variables for the daemon.
    pub fn start_env(yaml: Option<&str>, extra: &[&str], env: &[(&str, &str)]) -> Mount {
        require_fuse();
        // The suite's own tests of `monfs ctl MOUNTPOINT` find the socket
        // where monfs puts it by default.
        let mut opts = monfs::testing::Options::new()
            .binary(monfs_bin())
            .default_socket()
            .timeout(HANG)
            .args(extra);
        if let Some(y) = yaml {
            opts = opts.config(y);
        }
        for (k, v) in env {
            opts = opts.env(k, v);
        }
        if io_uring_leg() {
            opts = opts.arg("--io-uring");
        } else if !extra.iter().any(|a| a.ends_with("io-uring")) {
            // The transport is the leg's, never the host's: a host that
            // has fuse.enable_uring on would otherwise serve the default
            // leg through io_uring.
            opts = opts.arg("--no-io-uring");
        }
        let m = Mount(opts.start().unwrap_or_else(|e| panic!("{e}")));
        if io_uring_leg() {
            // Requests wait for the rings once INIT chose them, so they are
            // up by now, or the kernel refused them (and says why).
            assert!(
                m.log_text()
                    .contains("serving FUSE requests through io_uring"),
                "MONFS_TEST_IO_URING=1 but the mount serves /dev/fuse; log:\n{}",
                m.log_text()
            );
        }
        m
    }

    /// `monfs ctl MOUNTPOINT ARGS...`: whether it was carried out, and its
    /// standard output and error.
    pub fn ctl(&self, args: &[&str]) -> (bool, String) {
        let o = Command::new(monfs_bin())
            .arg("ctl")
            .arg(self.root())
            .args(args)
            .output()
            .unwrap();
        (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
        )
    }

    /// Run `args` through scripts/trace-ns on this mount (its `tracing/`
    /// as /sys/kernel/tracing), asserting success; the output.
    pub fn trace_ns(&self, args: &[&str]) -> String {
        let ns = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/trace-ns");
        let o = Command::new(ns)
            .env("MONFS_BIN", monfs_bin())
            .arg(self.root())
            .arg("--")
            .args(args)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{args:?}: {}\nlog:\n{}",
            String::from_utf8_lossy(&o.stderr),
            self.log_text()
        );
        String::from_utf8(o.stdout).unwrap()
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
}

/// State letter of a process from /proc/<pid>/stat (R, S, D, Z...).
pub fn proc_state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = s.rsplit_once(')')?.1;
    after.trim_start().chars().next()
}

/// Wait until `pid` sleeps (blocked in a read), up to 5 s.
pub fn wait_blocked(pid: u32) {
    let deadline = Instant::now() + HANG;
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
    compile_c_as(name, out_dir, name, &[])
}

/// Compile `tests/c/NAME.c` (or `examples/NAME.c`) as a 32-bit x86 program
/// (`NAME32`), for the compat ioctls. Needs gcc-multilib.
pub fn compile_c32(name: &str, out_dir: &Path) -> PathBuf {
    compile_c_as(name, out_dir, &format!("{name}32"), &["-m32"])
}

/// Compile `tests/c/NAME.c` linked with `libs` (`-lusb-1.0`).
pub fn compile_c_libs(name: &str, out_dir: &Path, libs: &[&str]) -> PathBuf {
    compile_c_full(name, out_dir, name, &[], libs)
}

fn compile_c_as(name: &str, out_dir: &Path, bin_name: &str, flags: &[&str]) -> PathBuf {
    compile_c_full(name, out_dir, bin_name, flags, &[])
}

/// Compile `tests/c/NAME.c` (or `examples/NAME.c`) into `out_dir/bin_name`
/// with extra compiler `flags` and `libs` after the source.
pub fn compile_c_full(
    name: &str,
    out_dir: &Path,
    bin_name: &str,
    flags: &[&str],
    libs: &[&str],
) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut src = root.join("tests/c").join(format!("{name}.c"));
    if !src.exists() {
        src = root.join("examples").join(format!("{name}.c"));
    }
    let bin = out_dir.join(bin_name);
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror"])
        .args(flags)
        .arg("-o")
        .arg(&bin)
        .arg(&src)
        .args(libs)
        .output()
        .expect("run cc (install gcc)");
    assert!(
        o.status.success(),
        "compiling {} {flags:?}: {}",
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
        .env("MONFS_BIN", monfs_bin())
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

// usbmon text grammar, shared by the text, soak and other tests.

pub fn is_hex(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}
pub fn is_dec(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}
pub fn is_int(s: &str) -> bool {
    is_dec(s.strip_prefix('-').unwrap_or(s))
}

/// One `Nu`/`Nt` line, as far as the soak needs it.
#[derive(Debug, PartialEq, Eq)]
pub struct TextEvent {
    /// Bus from the address (`Nu` only).
    pub bus: Option<u16>,
    /// Timestamp, microseconds modulo 4096 s.
    pub ts: u32,
}

/// Check one line of `Nu` (u = true) or `Nt` against the kernel's format,
/// field by field and width by width; returns the bus and timestamp.
pub fn check_line(line: &str, u: bool) -> Result<TextEvent, String> {
    let err = |m: &str| Err(format!("{m}: {line:?}"));
    let w: Vec<&str> = line.split(' ').collect();
    if w.len() < 5 {
        return err("too few words");
    }
    if !is_hex(w[0]) || w[0].len() > 16 {
        return err("tag");
    }
    if !is_dec(w[1]) || w[1].len() > 10 || w[1].parse::<u64>().unwrap() > 4_095_999_999 {
        return err("timestamp");
    }
    let ts: u32 = w[1].parse().unwrap();
    let ev = w[2];
    if !["S", "C", "E"].contains(&ev) {
        return err("event type");
    }
    let addr: Vec<&str> = w[3].split(':').collect();
    let (xt, dev, ep, bus) = if u {
        if addr.len() != 4 || !is_dec(addr[1]) || addr[1].starts_with('0') || addr[1].len() > 3 {
            return err("u address (bus)");
        }
        (
            addr[0],
            addr[2],
            addr[3],
            Some(addr[1].parse::<u16>().unwrap()),
        )
    } else {
        if addr.len() != 3 {
            return err("t address");
        }
        if addr[2].len() != 2 {
            return err("t endpoint must be 2 digits");
        }
        (addr[0], addr[1], addr[2], None)
    };
    if xt.len() != 2 || !"CZIB".contains(&xt[..1]) || !"io".contains(&xt[1..]) {
        return err("type/dir");
    }
    if dev.len() != 3 || !is_dec(dev) {
        return err("device must be 3 digits");
    }
    if !is_dec(ep) || ep.parse::<u32>().unwrap() > 15 || (u && ep.len() > 1 && ep.starts_with('0'))
    {
        return err("endpoint");
    }
    let (ttype, dir_in) = (&xt[..1], &xt[1..] == "i");
    let mut i = 4;
    // Status / setup.
    if w[i] == "s" {
        if ev != "S" || ttype != "C" {
            return err("setup on a non control submit");
        }
        let Some(f) = w.get(i + 1..i + 6) else {
            return err("setup words");
        };
        let widths_ok = f[0].len() == 2 && f[1].len() == 2 && f[2..].iter().all(|x| x.len() == 4);
        if !(widths_ok && f.iter().all(|x| is_hex(x))) {
            return err("setup words");
        }
        i += 6;
    } else if u && ev != "E" && (ttype == "Z" || ttype == "I") {
        let parts: Vec<&str> = w[i].split(':').collect();
        let want = match (ttype, ev) {
            ("I", _) => 2,
            ("Z", "S") => 3,
            _ => 4,
        };
        if parts.len() != want || !parts.iter().all(|p| is_int(p)) {
            return err("status:interval form");
        }
        if ev == "S" && parts[0] != "-115" {
            return err("submit status must be -115");
        }
        i += 1;
        if ttype == "Z" {
            let Some(n) = w.get(i).and_then(|x| x.parse::<usize>().ok()) else {
                return err("iso count");
            };
            i += 1;
            for _ in 0..n.min(5) {
                let Some(d) = w.get(i) else {
                    return err("iso descriptor missing");
                };
                let d: Vec<&str> = d.split(':').collect();
                if d.len() != 3 || !is_int(d[0]) || !is_dec(d[1]) || !is_dec(d[2]) {
                    return err("iso descriptor");
                }
                i += 1;
            }
        }
    } else {
        if !is_int(w[i]) {
            return err("status");
        }
        if ev == "S" && w[i] != "-115" {
            return err("submit status must be -115");
        }
        i += 1;
    }
    let Some(len) = w.get(i).and_then(|x| x.parse::<i64>().ok()) else {
        return err("length");
    };
    i += 1;
    let rest = &w[i..];
    let ok = Ok(TextEvent { bus, ts });
    if ev == "E" {
        return if len == 0 && rest.is_empty() {
            ok
        } else {
            err("E event")
        };
    }
    if len <= 0 {
        return if rest.is_empty() {
            ok
        } else {
            err("data after zero length")
        };
    }
    match rest.first().copied() {
        Some("=") => {
            if (dir_in && ev == "S") || (!dir_in && ev == "C") {
                return err("data where a flag belongs");
            }
            let words = &rest[1..];
            let want = (len as usize).min(32);
            let mut got = 0;
            for (k, word) in words.iter().enumerate() {
                if !is_hex(word) || word.len() % 2 != 0 || word.len() > 8 {
                    return err("data word");
                }
                if k + 1 < words.len() && word.len() != 8 {
                    return err("only the last data word may be short");
                }
                got += word.len() / 2;
            }
            if got != want {
                return err("data byte count");
            }
            ok
        }
        Some("<") if dir_in && ev == "S" && rest.len() == 1 => ok,
        Some(">") if !dir_in && ev == "C" && rest.len() == 1 => ok,
        Some("Z") if rest.len() == 1 => ok,
        _ => err("data flag"),
    }
}

/// VmRSS of `pid` in KiB (None once it is gone).
pub fn vm_rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    l.split_whitespace().nth(1)?.parse().ok()
}

/// `monfs ctl` with `words`, talking to `socket`, as `user` (a uid, through
/// `setpriv`) or as ourselves; (exit status 0, stdout and stderr).
pub fn ctl_socket(user: Option<u32>, socket: &Path, words: &[&str]) -> (bool, String) {
    let mut c = Command::new("timeout");
    c.arg("20");
    if let Some(uid) = user {
        c.arg("setpriv")
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={uid}"))
            .arg("--clear-groups");
    }
    let o = c
        .arg(monfs_bin())
        .args(["ctl", "/nonexistent", "--socket"])
        .arg(socket)
        .args(words)
        .output()
        .expect("run monfs ctl");
    (
        o.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        ),
    )
}

/// A descriptors file: the 18-byte device descriptor `device`, then its
/// one configuration (value 1, bus-powered, 100 mA) of `interfaces`
/// interfaces whose interface and endpoint descriptors are `rest`.
pub fn descriptors_dump(device: &[u8; 18], interfaces: u8, rest: &[u8]) -> Vec<u8> {
    let total = (9 + rest.len()) as u16;
    let mut b = device.to_vec();
    let [lo, hi] = total.to_le_bytes();
    b.extend_from_slice(&[9, 2, lo, hi, interfaces, 1, 0, 0x80, 50]);
    b.extend_from_slice(rest);
    b
}

/// Run `cmd`, which must succeed (`what` and its output name it if it
/// does not); its standard output.
pub fn stdout_ok(cmd: &mut Command, what: &str) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{what}: {}\n{out}{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// `rel` inside the repository, as a string (for configuration text).
pub fn repo_path(rel: &str) -> String {
    format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))
}

/// `cat usb/usbmon/1u` of `m` into `1u.txt` beside the mount: the reader
/// process and the capture's path.
pub fn cat_1u(m: &Mount) -> (std::process::Child, PathBuf) {
    let cap = m.path("../1u.txt");
    let child = Command::new("cat")
        .arg(m.path("usb/usbmon/1u"))
        .stdout(std::fs::File::create(&cap).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    (child, cap)
}

/// The lines of `cap` (a `1u` capture) of bus 1's device `dev`, each
/// checked against the kernel's format, without their tag and time stamp.
pub fn bus1_lines(cap: &Path, dev: u8) -> Vec<String> {
    let text = std::fs::read_to_string(cap).unwrap();
    let mark = format!(":1:{dev:03}:");
    text.lines()
        .filter(|l| l.contains(&mark))
        .map(|l| {
            check_line(l, true).unwrap_or_else(|e| panic!("{l}: {e}"));
            l.splitn(3, ' ').nth(2).unwrap().to_string()
        })
        .collect()
}

/// Run tests/c/usbfs_libusb.c (built as `tool`) on the usbfs node `node`
/// with `ops`, asserting success; its output lines.
pub fn run_libusb(tool: &Path, node: &Path, ops: &[&str]) -> Vec<String> {
    let o = Command::new(tool)
        .arg(node)
        .args(ops)
        .output()
        .expect("run usbfs_libusb");
    assert!(
        o.status.success(),
        "usbfs_libusb {ops:?}: {}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Wait for a node to appear (the device enumerates after the mount), then
/// for the devices to settle: the node comes before the kernel drivers'
/// probes are over, and a program that detaches one (usbhid,
/// snd-usb-audio) before it bound would find none, then lose its claim
/// to it.
pub fn wait_node(m: &Mount, rel: &str) -> PathBuf {
    let p = m.path(rel);
    let deadline = Instant::now() + HANG;
    while !p.exists() {
        assert!(
            Instant::now() < deadline,
            "{rel} never appeared; usb/devices:\n{}",
            m.sh_ok("cat usb/devices")
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (ok, out) = m.ctl(&["wait", "settled", "timeout_ms=60000"]);
    assert!(ok, "wait settled: {out}");
    p
}

/// The product's devnum in `usb/devices`.
pub fn devnum_of(m: &Mount, product: &str) -> u8 {
    let deadline = Instant::now() + HANG;
    loop {
        let t = m.sh_ok("cat usb/devices");
        if let Some(b) = t
            .split("\n\n")
            .find(|b| b.contains(&format!("S:  Product={product}\n")) && b.contains("C:*"))
        {
            let dev = b
                .split("Dev#=")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap();
            return dev.parse().unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "{product} never configured:\n{t}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `monfs run --timing fast --config CONFIG -- sh -c CMD` in `dir` (the
/// configuration written there), with the monfs binary and `dir` first on
/// PATH; its output, which must be a success.
pub fn monfs_run(dir: &Path, config: &str, cmd: &str) -> String {
    require_fuse();
    let cfg = dir.join("c.yaml");
    std::fs::write(&cfg, config).unwrap();
    let bin = monfs_bin();
    let path = format!(
        "{}:{}:{}",
        bin.parent().unwrap().display(),
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(&bin);
    c.args(["run", "--timing", "fast", "--config"])
        .arg(&cfg)
        .args(["--", "sh", "-c", cmd])
        .current_dir(dir)
        .env("TMPDIR", dir)
        .env("PATH", path)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(std::process::Stdio::null());
    stdout_ok(&mut c, "monfs run")
}

/// Whether `monfs run`'s class nodes (hidrawN, input/eventN) are
/// character devices: as root it makes them through CUSE where
/// `/dev/cuse` can be used; otherwise they are the mount's files.
pub fn class_char_devices() -> bool {
    !rootless()
        && std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/cuse")
            .is_ok()
}

/// The lines of `out` that start with `word `, without it.
pub fn lines<'a>(out: &'a str, word: &str) -> Vec<&'a str> {
    out.lines()
        .filter_map(|l| l.strip_prefix(word)?.strip_prefix(' '))
        .collect()
}

/// The uevents in `out` (as tests/data/uevent_listen.py prints them), one
/// line each: action, the last part of the path, subsystem and the value
/// of variable `last` (`-` where it has none).
pub fn uevent_lines(out: &str, last: &str) -> Vec<String> {
    out.split("ACTION=")
        .skip(1)
        .map(|e| {
            let get = |k: &str| {
                e.lines()
                    .find_map(|l| l.strip_prefix(k)?.strip_prefix('='))
                    .unwrap_or("-")
            };
            format!(
                "{} {} {} {}",
                e.lines().next().unwrap_or(""),
                get("DEVPATH").rsplit('/').next().unwrap_or(""),
                get("SUBSYSTEM"),
                get(last)
            )
        })
        .collect()
}

/// Have Python peer `script` (a repository path) write its descriptors
/// file to `out` (`--dump`), as the peers' configurations need it.
pub fn peer_dump(script: &str, out: &Path) {
    peer_dump_with(script, &[], out);
}

/// [`peer_dump`] with `args` before `--dump` (a peer's `--chip NAME`).
pub fn peer_dump_with(script: &str, args: &[&str], out: &Path) {
    let o = Command::new("/usr/bin/python3")
        .arg(repo_path(script))
        .args(args)
        .arg("--dump")
        .arg(out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{script} --dump: {o:?}");
}

/// `ls -l`'s lines (busybox's in the guest, coreutils's here) without
/// their dates, which are the run's: the total, then each entry's mode,
/// links, owner, group, size, name and link target. `power` is left out:
/// monfs models no runtime power management directory in its sysfs (the
/// USB devices have none either; compare.py's input checks leave them out
/// for the same reason). With `owner_root`, the owner and group read as
/// root's: in the rootless leg every file of the mount is the user's
/// (docs/rootless.md: the mount's owner is the caller's uid and gid), as
/// the tests run as a user.
pub fn ls_entries(text: &str, owner_root: bool) -> Vec<String> {
    text.lines()
        .filter_map(|l| {
            let mut w: Vec<&str> = l.split_whitespace().collect();
            if w.first() == Some(&"total") {
                return Some(l.trim().to_string());
            }
            if w.len() < 9 || w[8] == "power" {
                return None;
            }
            if owner_root {
                w[2] = "root";
                w[3] = "root";
            }
            Some([&w[..5], &w[8..]].concat().join(" "))
        })
        .collect()
}

/// Bytes written as hex (a peer's log) as text.
pub fn hex_text(h: &str) -> String {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap() as char)
        .collect()
}

/// pyserial on serial port `dev`: three baud rates with a line each way
/// through a loopback, the modem lines, then DTR, RTS and a break.
pub fn pyserial_session(dev: &str) -> String {
    format!(
        r#"
import serial
s = serial.Serial('{dev}', 9600, timeout=30)
for baud in (9600, 115200, 3000000):
    s.baudrate = baud
    line = b'hello %d\n' % baud
    s.write(line)
    print('read', s.read(len(line)) == line)
print('modem', s.cts, s.dsr, s.ri, s.cd)
s.dtr = False
s.rts = False
s.send_break(0.25)
s.close()
"#
    )
}
