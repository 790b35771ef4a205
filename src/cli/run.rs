//! `monfs run [OPTIONS] -- CMD ARGS...`: mount a monfs where only CMD sees
//! it, and run CMD in a private mount namespace where the kernel's paths are
//! monfs's: `/sys/kernel/debug/usb/usbmon` (and `usb/devices`),
//! `/dev/usbmonN`, `/sys/kernel/tracing`, `/sys/kernel/debug/tracing`,
//! `/dev/monreader`, `/dev/bus/usb`, `/sys/bus/usb` and the USB devices
//! under `/sys/devices/platform`. Nothing outside the namespace changes.
//!
//! As root the namespace is a mount namespace. Any other user gets a user
//! namespace too, in which they are root, so that the daemon mounts FUSE
//! with mount(2) there (Linux allows FUSE in a user namespace) and binds
//! what it needs; CMD then runs in a nested user namespace as the caller's
//! own uid and gid again, so that it sees no privilege it does not have.
//!
//! The daemon is this same binary, `monfs mount --foreground`, started in
//! the namespace after it is made: the mount exists only there, and goes
//! with it. Its output goes to a file of no name (O_TMPFILE) beside the
//! control socket, shown on the terminal only if it fails. If monfs run is
//! killed, the daemon is sent SIGTERM (it unmounts, removes the socket and
//! the mountpoint) and the command SIGKILL (parent-death signals).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::{getegid, geteuid, Pid};

/// Exit status when monfs itself cannot start (as `docker run` and
/// `podman run` have it); 126 and 127 are CMD that cannot be run or found.
pub const EXIT_START: u8 = 125;
/// CMD exists but cannot be executed.
pub const EXIT_CANNOT_EXEC: u8 = 126;
/// CMD was not found.
pub const EXIT_NOT_FOUND: u8 = 127;

/// The file-system magic of a FUSE mount (statfs f_type).
const FUSE_SUPER_MAGIC: i64 = 0x6573_5546;

/// systemd's switch for libudev's check that a device's directory is on
/// sysfs.
pub const VERIFY_SYSFS: &str = "SYSTEMD_DEVICE_VERIFY_SYSFS";

/// How many of the daemon's last log lines a failure shows.
const LOG_TAIL: usize = 20;

/// What `monfs run` was asked to do.
pub struct RunOptions {
    /// The monfs binary (this one), for the daemon.
    pub exe: PathBuf,
    /// `--log-level` for the daemon.
    pub log_level: String,
    /// Options for `monfs mount` (config, seed, threads, ...).
    pub mount_args: Vec<OsString>,
    /// A log file to keep (the daemon's), instead of a temporary one.
    pub log_file: Option<PathBuf>,
    /// Use the monfs already mounted here instead of mounting one.
    pub use_mount: Option<PathBuf>,
    /// Without root: CMD runs as root of the user namespace, not as the
    /// caller's uid and gid.
    pub ns_root: bool,
    /// The configuration the daemon gets (None: the built-in one), to know
    /// which devices to wait for; None with `wait` false.
    pub config: Option<PathBuf>,
    /// Wait until the devices plugged at start have enumerated and their
    /// drivers bound before starting the command.
    pub wait: bool,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// Why `monfs run` could not set CMD up.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// A system call failed.
    #[error("{what}: {err}")]
    Sys {
        /// What was being done.
        what: String,
        /// The error.
        err: nix::errno::Errno,
    },
    /// An I/O operation failed.
    #[error("{what}: {err}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        err: std::io::Error,
    },
    /// `--use DIR` names no monfs.
    #[error("{0}")]
    NotMonfs(String),
}

fn sys(what: impl Into<String>) -> impl FnOnce(nix::errno::Errno) -> RunError {
    let what = what.into();
    move |err| RunError::Sys { what, err }
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RunError {
    let what = what.into();
    move |err| RunError::Io { what, err }
}

/// Run `opts.command` as described in the module docs; its exit status.
pub fn run(opts: RunOptions) -> ExitCode {
    let rootless = !geteuid().is_root();
    match &opts.use_mount {
        Some(dir) => run_on_existing(&opts, dir, rootless),
        None => run_fresh(&opts, rootless),
    }
}

fn start_failure(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("monfs run: {e}");
    ExitCode::from(EXIT_START)
}

/// `--use DIR`: the namespace around an existing mount.
fn run_on_existing(opts: &RunOptions, dir: &Path, rootless: bool) -> ExitCode {
    let mnt = match check_monfs(dir) {
        Ok(m) => m,
        Err(e) => return start_failure(e),
    };
    let socket = std::fs::read_to_string(mnt.join("monfs/socket"))
        .map(|s| PathBuf::from(s.trim()))
        .unwrap_or_else(|_| crate::control::default_socket(&mnt));
    if let Err(e) = enter_namespace(rootless).and_then(|()| setup_paths(&mnt, rootless)) {
        return start_failure(e);
    }
    let child = match spawn_command(opts, &mnt, &socket, rootless) {
        Ok(c) => c,
        Err(code) => return ExitCode::from(code),
    };
    let status = supervise(child, None);
    ExitCode::from(status)
}

/// Whether `dir` is a monfs mount (a FUSE file system with monfs's own
/// `monfs/null`); its absolute path.
fn check_monfs(dir: &Path) -> Result<PathBuf, RunError> {
    let abs = std::fs::canonicalize(dir).map_err(io(format!("{}", dir.display())))?;
    let st = nix::sys::statfs::statfs(&abs).map_err(sys(format!("statfs {}", abs.display())))?;
    if st.filesystem_type().0 as i64 != FUSE_SUPER_MAGIC || !abs.join("monfs/null").exists() {
        return Err(RunError::NotMonfs(format!(
            "{} is not a monfs mount",
            abs.display()
        )));
    }
    Ok(abs)
}

/// A temporary mountpoint, removed on drop (after a lazy unmount, in case
/// the daemon could not unmount it).
struct TempMountpoint(PathBuf);

impl Drop for TempMountpoint {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A file removed on drop.
struct TempFile(Option<PathBuf>);

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn temp_mountpoint() -> Result<TempMountpoint, RunError> {
    let base = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(x) if x.is_absolute() && x.is_dir() && !geteuid().is_root() => x,
        _ => std::env::temp_dir(),
    };
    let mut last = None;
    for _ in 0..32 {
        let mut b = [0u8; 6];
        if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
            let _ = f.read_exact(&mut b);
        }
        let tag: String = b.iter().map(|x| (b'a' + x % 26) as char).collect();
        let p = base.join(format!("monfs-run.{tag}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&p) {
            Ok(()) => return Ok(TempMountpoint(p)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io(format!("mkdir in {}", base.display()))(e)),
        }
    }
    Err(io("temporary mountpoint")(last.unwrap()))
}

/// Mount a fresh monfs in a new namespace and run the command there.
fn run_fresh(opts: &RunOptions, rootless: bool) -> ExitCode {
    let mp = match temp_mountpoint() {
        Ok(m) => m,
        Err(e) => return start_failure(e),
    };
    let mnt = mp.0.clone();
    let socket = crate::control::default_socket(&mnt);
    if let Some(dir) = socket.parent() {
        if let Err(e) = crate::control::ensure_private_dir(dir) {
            return start_failure(e);
        }
    }
    // The daemon's output: a file of no name beside the socket (nothing to
    // leave behind, whatever happens), or the --log-file asked for.
    let log = match open_log(opts.log_file.as_deref(), socket.parent()) {
        Ok(f) => f,
        Err(e) => return start_failure(e),
    };
    if let Err(e) = enter_namespace(rootless) {
        return start_failure(e);
    }
    let reader = match log.try_clone() {
        Ok(f) => f,
        Err(e) => return start_failure(format!("log file: {e}")),
    };
    let mut daemon = match start_daemon(opts, &mnt, &socket, log) {
        Ok(d) => d,
        Err(e) => {
            return start_failure(e);
        }
    };
    match wait_ready(&mut daemon) {
        Ok(()) => {}
        Err(status) => {
            eprintln!("monfs run: monfs did not start ({status}); its last log lines:");
            show_tail(&reader);
            let _ = std::fs::remove_file(&socket);
            return ExitCode::from(EXIT_START);
        }
    }
    if opts.wait {
        wait_enumerated(&mnt, expected_devices(opts.config.as_deref()));
    }
    let daemon_pid = Pid::from_raw(daemon.child.id() as i32);
    let fail_after_mount = |e: &dyn std::fmt::Display, daemon: &mut Daemon| {
        eprintln!("monfs run: {e}");
        stop_daemon(daemon);
        ExitCode::from(EXIT_START)
    };
    if let Err(e) = setup_paths(&mnt, rootless) {
        return fail_after_mount(&e, &mut daemon);
    }
    let child = match spawn_command(opts, &mnt, &socket, rootless) {
        Ok(c) => c,
        Err(code) => {
            stop_daemon(&mut daemon);
            return ExitCode::from(code);
        }
    };
    let status = supervise(child, Some(daemon_pid));
    if let Some(bad) = stop_daemon(&mut daemon) {
        eprintln!("monfs run: the daemon ended badly ({bad}); its last log lines:");
        show_tail(&reader);
    }
    let _ = std::fs::remove_file(&socket);
    drop(mp);
    ExitCode::from(status)
}

/// How many devices (root hubs included) the configuration has plugged
/// at start: those without `plug_after_ms`, behind hubs too.
fn expected_devices(config: Option<&Path>) -> usize {
    fn count(devs: &[crate::config::DeviceConfig]) -> usize {
        devs.iter()
            .filter(|d| d.plug_after_ms == 0)
            .map(|d| 1 + count(&d.devices))
            .sum()
    }
    let cfg = match config {
        Some(p) => crate::sim::usb::load::load_config(p).ok(),
        None => Some(crate::config::Config::builtin()),
    };
    cfg.map(|c| c.usb.buses.iter().map(|b| 1 + count(&b.devices)).sum())
        .unwrap_or(0)
}

/// How long [`wait_enumerated`] waits at most.
const ENUMERATION_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Wait until `usb/devices` and `sys/bus/usb/devices` list `expected`
/// devices and every interface `usb/devices` shows bound has its `driver`
/// link, as a machine that boots with its devices has them before its
/// programs start; at most [`ENUMERATION_WAIT`] (then the command starts
/// anyway, with a warning).
fn wait_enumerated(mnt: &Path, expected: usize) {
    let settled = || {
        let text = std::fs::read_to_string(mnt.join("usb/devices")).unwrap_or_default();
        let listed = text.lines().filter(|l| l.starts_with("T:")).count();
        let bound = text
            .lines()
            .filter(|l| l.starts_with("I:*") && !l.contains("Driver=(none)"))
            .count();
        let (mut devices, mut links) = (0, 0);
        if let Ok(rd) = std::fs::read_dir(mnt.join("sys/bus/usb/devices")) {
            for e in rd.flatten() {
                if e.file_name().as_bytes().contains(&b':') {
                    links += usize::from(e.path().join("driver").is_symlink());
                } else {
                    devices += 1;
                }
            }
        }
        listed >= expected && devices >= expected && links >= bound
    };
    let end = std::time::Instant::now() + ENUMERATION_WAIT;
    while !settled() {
        if std::time::Instant::now() >= end {
            eprintln!(
                "monfs run: the simulated devices did not all enumerate within {} s; starting the command anyway",
                ENUMERATION_WAIT.as_secs()
            );
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The daemon, and the pipe it says "mounted" on.
struct Daemon {
    child: Child,
    ready: Option<OwnedFd>,
    reaped: Option<std::process::ExitStatus>,
}

fn start_daemon(
    opts: &RunOptions,
    mnt: &Path,
    socket: &Path,
    log: std::fs::File,
) -> Result<Daemon, RunError> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?;
    let mut cmd = Command::new(&opts.exe);
    cmd.arg("--log-level")
        .arg(&opts.log_level)
        .arg("mount")
        .arg(mnt)
        .arg("--foreground")
        .arg("--ctl-socket")
        .arg(socket)
        .arg("--ready-fd")
        .arg("3")
        .arg("--rmdir-mountpoint")
        .args(&opts.mount_args)
        .args(
            opts.log_file
                .iter()
                .flat_map(|p| [OsString::from("--log-file"), p.clone().into_os_string()]),
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(io("log file"))?)
        .stderr(log)
        // MONFS_LOG would override --log-level.
        .env_remove("MONFS_LOG");
    let wfd = w.as_raw_fd();
    let me = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls (setsid, dup2, prctl, getppid)
    // between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Its own session: the terminal's ^C goes to CMD, not to it.
            libc::setsid();
            // monfs run killed (SIGKILL): the daemon unmounts and goes too.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() != me {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            if libc::dup2(wfd, 3) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(io(format!("{}", opts.exe.display())))?;
    drop(w);
    Ok(Daemon {
        child,
        ready: Some(r),
        reaped: None,
    })
}

/// How a daemon that did not mount ended.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct NotStarted(String);

/// Wait for the daemon's "mounted" byte; Err: how it ended instead.
fn wait_ready(d: &mut Daemon) -> Result<(), NotStarted> {
    let mut f = std::fs::File::from(d.ready.take().expect("ready pipe"));
    let mut b = [0u8; 1];
    match f.read(&mut b) {
        Ok(1) if b[0] == 0 => return Ok(()),
        _ => {}
    }
    // It failed: it exits by itself (kill it if it does not).
    let status = wait_bounded(&mut d.child, std::time::Duration::from_secs(10));
    d.reaped = status;
    Err(NotStarted(match status {
        Some(s) => describe(s),
        None => "it did not say it was mounted".into(),
    }))
}

fn describe(s: std::process::ExitStatus) -> String {
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (_, Some(sig)) => format!(
            "killed by {}",
            Signal::try_from(sig)
                .map(|s| s.as_str().to_string())
                .unwrap_or_else(|_| sig.to_string())
        ),
        _ => "ended".into(),
    }
}

/// Wait for `child` at most `limit`, then kill it; its status (None if it
/// cannot be had).
fn wait_bounded(child: &mut Child, limit: std::time::Duration) -> Option<std::process::ExitStatus> {
    let end = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if std::time::Instant::now() < end => {
                std::thread::sleep(std::time::Duration::from_millis(10))
            }
            Ok(None) => {
                let _ = child.kill();
                return child.wait().ok();
            }
            Err(_) => return None,
        }
    }
}

/// SIGTERM the daemon (it unmounts and exits) and reap it; Some(how) if it
/// had ended or ends otherwise than cleanly.
fn stop_daemon(d: &mut Daemon) -> Option<String> {
    let status = match d.reaped.or_else(|| d.child.try_wait().ok().flatten()) {
        Some(s) => Some(s),
        None => {
            let _ = kill(Pid::from_raw(d.child.id() as i32), Signal::SIGTERM);
            wait_bounded(&mut d.child, std::time::Duration::from_secs(10))
        }
    };
    match status {
        Some(s) if s.success() => None,
        Some(s) => Some(describe(s)),
        None => Some("lost".into()),
    }
}

/// Open the daemon's log: `path` (appended to, 0600, never through a
/// symlink), or else a file of no name in `dir` (O_TMPFILE; created and
/// unlinked at once where that is not supported).
fn open_log(path: Option<&Path>, dir: Option<&Path>) -> Result<std::fs::File, RunError> {
    let opts = || {
        let mut o = std::fs::OpenOptions::new();
        o.read(true).append(true).mode(0o600);
        o
    };
    if let Some(p) = path {
        return opts()
            .create(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(p)
            .map_err(io(format!("log file {}", p.display())));
    }
    let dir = dir
        .map(Path::to_path_buf)
        .unwrap_or_else(std::env::temp_dir);
    if let Ok(f) = opts()
        .custom_flags(libc::O_TMPFILE | libc::O_CLOEXEC)
        .open(&dir)
    {
        return Ok(f);
    }
    let p = dir.join(format!("monfs-run.{}.log", std::process::id()));
    let f = opts()
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&p)
        .map_err(io(format!("log file {}", p.display())))?;
    let _ = std::fs::remove_file(&p);
    Ok(f)
}

/// Print the last lines of the daemon's log on stderr (read without moving
/// the offset the daemon writes at).
fn show_tail(log: &std::fs::File) {
    use std::os::unix::fs::FileExt;
    let len = log.metadata().map(|m| m.len()).unwrap_or(0).min(1 << 20);
    let start = log.metadata().map(|m| m.len()).unwrap_or(0) - len;
    let mut buf = vec![0u8; len as usize];
    let n = log.read_at(&mut buf, start).unwrap_or(0);
    let text = String::from_utf8_lossy(&buf[..n]);
    let lines: Vec<&str> = text.lines().collect();
    for l in &lines[lines.len().saturating_sub(LOG_TAIL)..] {
        eprintln!("  {l}");
    }
}

/// A private mount namespace (and, without root, a user namespace in which
/// the caller is root).
fn enter_namespace(rootless: bool) -> Result<(), RunError> {
    if rootless {
        let (uid, gid) = (geteuid().as_raw(), getegid().as_raw());
        unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNS).map_err(sys(
            "cannot make a user namespace (are unprivileged user namespaces allowed? \
             see docs/rootless.md)",
        ))?;
        write_proc("/proc/self/setgroups", "deny")?;
        write_proc("/proc/self/uid_map", &format!("0 {uid} 1"))?;
        write_proc("/proc/self/gid_map", &format!("0 {gid} 1"))?;
    } else {
        unshare(CloneFlags::CLONE_NEWNS).map_err(sys("cannot make a mount namespace"))?;
    }
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("make / private"))
}

fn write_proc(path: &str, text: &str) -> Result<(), RunError> {
    std::fs::write(path, text).map_err(io(format!("write {path}")))
}

/// One line of /proc/self/mountinfo: where, and the file-system type.
struct MountEntry {
    point: PathBuf,
    fstype: String,
}

/// The mounts of this namespace, in mountinfo's order.
fn mounts() -> Vec<MountEntry> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|w| *w == "-")?;
            Some(MountEntry {
                point: PathBuf::from(OsString::from(std::ffi::OsStr::from_bytes(&unescape(
                    f.get(4)?,
                )))),
                fstype: f.get(sep + 1)?.to_string(),
            })
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space) undone.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = &b[i + 1..(i + 4).min(b.len())];
        if b[i] == b'\\' && oct.len() == 3 && oct.iter().all(|c| (b'0'..=b'7').contains(c)) {
            let v = (u32::from(oct[0] - b'0') << 6)
                | (u32::from(oct[1] - b'0') << 3)
                | u32::from(oct[2] - b'0');
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

fn bind(src: &Path, dst: &Path) -> Result<(), RunError> {
    mount(
        Some(src),
        dst,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(sys(format!("bind {} on {}", src.display(), dst.display())))
}

fn tmpfs(dst: &Path, mode: u32) -> Result<(), RunError> {
    mount(
        Some("tmpfs"),
        dst,
        Some("tmpfs"),
        MsFlags::MS_NOSUID,
        Some(format!("mode={mode:o},size=64k").as_str()),
    )
    .map_err(sys(format!("tmpfs on {}", dst.display())))
}

/// Make an empty file or directory at `dst` to bind `src` on.
fn placeholder(src: &Path, dst: &Path) -> Result<(), RunError> {
    if src.is_dir() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dst)
            .map_err(io(format!("mkdir {}", dst.display())))
    } else {
        if let Some(p) = dst.parent() {
            std::fs::create_dir_all(p).map_err(io(format!("mkdir {}", p.display())))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dst)
            .map(drop)
            .map_err(io(format!("create {}", dst.display())))
    }
}

fn place(src: &Path, dst: &Path) -> Result<(), RunError> {
    placeholder(src, dst)?;
    bind(src, dst)
}

/// Cover directory `dir` with a tmpfs that has what it had (each entry bound
/// back from the covered directory, symlinks copied) except the names
/// `keep_out` refuses, plus `add` (name, source) bound from elsewhere.
fn graft(
    dir: &Path,
    keep_out: &dyn Fn(&OsStr) -> bool,
    add: &[(OsString, PathBuf)],
) -> Result<(), RunError> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir).map_err(io(format!("{}", dir.display())))?;
    // The covered directory stays reachable through this descriptor.
    let old = nix::fcntl::open(
        dir,
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(sys(format!("open {}", dir.display())))?;
    let entries: Vec<(OsString, std::fs::FileType)> = std::fs::read_dir(dir)
        .map_err(io(format!("read {}", dir.display())))?
        .filter_map(|e| {
            let e = e.ok()?;
            Some((e.file_name(), e.file_type().ok()?))
        })
        .collect();
    tmpfs(dir, meta.mode() & 0o7777)?;
    let _ = nix::unistd::chown(
        dir,
        Some(nix::unistd::Uid::from_raw(meta.uid())),
        Some(nix::unistd::Gid::from_raw(meta.gid())),
    );
    let through = PathBuf::from(format!("/proc/self/fd/{}", old.as_raw_fd()));
    let added: Vec<&OsStr> = add.iter().map(|(n, _)| n.as_os_str()).collect();
    for (name, ft) in entries {
        if keep_out(&name) || added.contains(&name.as_os_str()) {
            continue;
        }
        let src = through.join(&name);
        let dst = dir.join(&name);
        let r = if ft.is_symlink() {
            std::fs::read_link(&src)
                .and_then(|t| std::os::unix::fs::symlink(t, &dst))
                .map_err(io(format!("symlink {}", dst.display())))
        } else {
            place(&src, &dst)
        };
        if let Err(e) = r {
            tracing::debug!("monfs run: {e}");
            let _ = std::fs::remove_file(&dst).or_else(|_| std::fs::remove_dir(&dst));
        }
    }
    for (name, src) in add {
        place(src, &dir.join(name))?;
    }
    Ok(())
}

/// Put monfs's files where the kernel's are, in this (private) namespace.
fn setup_paths(mnt: &Path, rootless: bool) -> Result<(), RunError> {
    let tracing_src = mnt.join("tracing");
    // tracefs: as root, every tracefs and debugfs goes and a real tracefs at
    // /sys/kernel/tracing (the /proc/mounts line libtracefs looks for) is
    // covered by monfs's tracing/. Without root no tracefs can be mounted:
    // monfs's tracing/ covers every tracefs mounted already (their lines
    // stay in /proc/mounts), and /sys/kernel/tracing.
    let sys_tracing = Path::new("/sys/kernel/tracing");
    let mut aside = Vec::new();
    if !rootless {
        let mut gone: Vec<MountEntry> = mounts()
            .into_iter()
            .filter(|m| m.fstype == "tracefs" || m.fstype == "debugfs")
            .collect();
        gone.sort_by_key(|m| std::cmp::Reverse(m.point.components().count()));
        for m in &gone {
            let _ = umount2(&m.point, MntFlags::MNT_DETACH);
        }
        if sys_tracing.is_dir() {
            if let Err(e) = mount(
                Some("nodev"),
                sys_tracing,
                Some("tracefs"),
                MsFlags::empty(),
                None::<&str>,
            ) {
                tracing::debug!("monfs run: no tracefs at /sys/kernel/tracing: {e}");
            }
        }
        // Tools that take the first /proc/mounts line holding "tracefs"
        // (ftracetest greps for it) must find ours: any other mount whose
        // line holds the word (a FUSE mount at /tmp/x-tracefs, say) is
        // copied (the copy is newer than our tracefs, and Linux lists
        // mounts oldest first), unmounted, and the copy put in its place.
        aside = take_aside("tracefs");
    } else {
        let mut points: Vec<PathBuf> = mounts()
            .into_iter()
            .filter(|m| m.fstype == "tracefs")
            .map(|m| m.point)
            .collect();
        points.sort();
        points.dedup();
        for p in &points {
            if p != sys_tracing {
                let _ = bind(&tracing_src, p);
            }
        }
    }
    if sys_tracing.is_dir() {
        bind(&tracing_src, sys_tracing)?;
    }
    for (fd, point) in aside {
        put_back(&fd, &point);
    }
    // trace-cmd writes 1 to ftrace_enabled.
    let fe = Path::new("/proc/sys/kernel/ftrace_enabled");
    if fe.exists() {
        let _ = cover_with_text(fe, "1\n");
    }
    // debugfs: a tmpfs with usb/usbmon, usb/devices and tracing.
    let debug = Path::new("/sys/kernel/debug");
    if debug.is_dir() {
        tmpfs(debug, 0o700)?;
        place(&mnt.join("usb/usbmon"), &debug.join("usb/usbmon"))?;
        place(&mnt.join("usb/devices"), &debug.join("usb/devices"))?;
        place(&tracing_src, &debug.join("tracing"))?;
    }
    // /dev: what the machine has, but usbmonN, monreader and bus/ are ours.
    let mut add: Vec<(OsString, PathBuf)> = Vec::new();
    if let Ok(rd) = std::fs::read_dir(mnt.join("dev")) {
        for e in rd.flatten() {
            add.push((e.file_name(), e.path()));
        }
    }
    let empty_bus = !add.iter().any(|(n, _)| n == "bus");
    graft(
        Path::new("/dev"),
        &|n: &OsStr| {
            let n = n.as_bytes();
            n.starts_with(b"usbmon") || n == b"monreader" || n == b"bus"
        },
        &add,
    )?;
    if empty_bus {
        // No usbfs in this mount: an empty /dev/bus/usb, not the machine's.
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create("/dev/bus/usb");
    }
    // /sys/bus/usb and the devices under /sys/devices/platform.
    let sys_usb = mnt.join("sys/bus/usb");
    if sys_usb.is_dir() {
        let host = Path::new("/sys/bus/usb");
        if host.is_dir() {
            bind(&sys_usb, host)?;
        } else {
            graft(
                Path::new("/sys/bus"),
                &|_| false,
                &[(OsString::from("usb"), sys_usb)],
            )?;
        }
        let mut add = Vec::new();
        if let Ok(rd) = std::fs::read_dir(mnt.join("sys/devices/platform")) {
            for e in rd.flatten() {
                add.push((e.file_name(), e.path()));
            }
        }
        if !add.is_empty() {
            graft(Path::new("/sys/devices/platform"), &|_| false, &add)?;
        }
    }
    Ok(())
}

/// The mounts whose /proc/mounts line holds `word`, each copied into a
/// detached tree (open_tree) and unmounted: (the tree, where it was).
fn take_aside(word: &str) -> Vec<(OwnedFd, PathBuf)> {
    let text = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    let mut points: Vec<PathBuf> = Vec::new();
    for l in text.lines().filter(|l| l.contains(word)) {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() < 3 || f[2] == "tracefs" {
            continue;
        }
        let p = PathBuf::from(OsString::from(OsStr::from_bytes(&unescape(f[1]))));
        if !points.contains(&p) {
            points.push(p);
        }
    }
    let mut out = Vec::new();
    for p in points {
        let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: open_tree(2) on a NUL-terminated path; it returns a new
        // descriptor or -1.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                c.as_ptr(),
                OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
            )
        };
        if fd < 0 {
            tracing::debug!(
                "monfs run: open_tree {}: {}",
                p.display(),
                std::io::Error::last_os_error()
            );
            continue;
        }
        // SAFETY: open_tree returned this new descriptor.
        let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        if umount2(&p, MntFlags::MNT_DETACH).is_ok() {
            out.push((fd, p));
        }
    }
    out
}

/// Attach a tree from [`take_aside`] at `point` again.
fn put_back(fd: &OwnedFd, point: &Path) {
    let Ok(c) = std::ffi::CString::new(point.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: move_mount(2) of a detached tree we hold onto a path.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if r < 0 {
        tracing::debug!(
            "monfs run: move_mount {}: {}",
            point.display(),
            std::io::Error::last_os_error()
        );
    }
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;

/// Bind a file holding `text` over `path`; the file is gone once bound.
fn cover_with_text(path: &Path, text: &str) -> Result<(), RunError> {
    let dir = std::env::temp_dir();
    let tmp = dir.join(format!("monfs-run.{}.one", std::process::id()));
    let _guard = TempFile(Some(tmp.clone()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .map_err(io(format!("create {}", tmp.display())))?;
    mount(
        Some(&tmp),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(sys(format!("bind on {}", path.display())))
}

/// Start CMD with MONFS_MOUNT and MONFS_SOCKET; without root, in a nested
/// user namespace as the caller's uid and gid. Err: the exit status to give.
fn spawn_command(
    opts: &RunOptions,
    mnt: &Path,
    socket: &Path,
    rootless: bool,
) -> Result<Child, u8> {
    let (outer_uid, outer_gid) = if rootless {
        (real_id("/proc/self/uid_map"), real_id("/proc/self/gid_map"))
    } else {
        (0, 0)
    };
    supervised_signals();
    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..])
        .env("MONFS_MOUNT", mnt)
        .env("MONFS_SOCKET", socket);
    // libudev (systemd 250 and later) refuses device directories that are
    // not on sysfs itself, as monfs's (on FUSE) are, unless this says not
    // to check: systemd's knob for testing (docs/ENVIRONMENT.md there).
    if std::env::var_os(VERIFY_SYSFS).is_none() {
        cmd.env(VERIFY_SYSFS, "0");
    }
    let me = std::process::id() as libc::pid_t;
    // SAFETY: only sigemptyset, pthread_sigmask, prctl and getppid between
    // fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The signals supervise() takes are blocked here, and std
            // keeps a parent's mask: CMD starts with none blocked.
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            // monfs run killed: CMD goes too (as unshare --kill-child), not
            // left running over a mount whose daemon is gone.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() != me {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
    if rootless && !opts.ns_root {
        // SAFETY: between fork and exec only raw system calls, no allocation
        // (the map lines are made before the fork).
        let uid_line = format!("{outer_uid} 0 1\0");
        let gid_line = format!("{outer_gid} 0 1\0");
        unsafe {
            cmd.pre_exec(move || {
                if libc::unshare(libc::CLONE_NEWUSER) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                write_raw(c"/proc/self/setgroups", b"deny")?;
                write_raw(
                    c"/proc/self/uid_map",
                    &uid_line.as_bytes()[..uid_line.len() - 1],
                )?;
                write_raw(
                    c"/proc/self/gid_map",
                    &gid_line.as_bytes()[..gid_line.len() - 1],
                )?;
                Ok(())
            });
        }
    }
    match cmd.spawn() {
        Ok(c) => Ok(c),
        Err(e) => {
            let name = opts.command[0].to_string_lossy();
            eprintln!("monfs run: {name}: {e}");
            Err(if e.kind() == std::io::ErrorKind::NotFound {
                EXIT_NOT_FOUND
            } else {
                EXIT_CANNOT_EXEC
            })
        }
    }
}

/// The caller's id outside the user namespace, from a one-line map.
fn real_id(map: &str) -> u32 {
    std::fs::read_to_string(map)
        .ok()
        .and_then(|t| t.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(65534)
}

/// write(2) `data` to `path` after fork: no allocation.
fn write_raw(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    // SAFETY: plain system calls on a NUL-terminated path and a live buffer.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(err);
        }
    }
    Ok(())
}

/// The signals [`supervise`] takes, blocked from before CMD starts (whose
/// mask is emptied again before exec), so that none is missed.
fn supervised_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGCHLD,
    ] {
        set.add(s);
    }
    let _ = set.thread_block();
    set
}

/// Wait for CMD, passing on the signals sent to us (not those the terminal
/// sends to the whole foreground group, which CMD has had already); report
/// a daemon that dies meanwhile. CMD's exit status, or 128+N for a signal.
fn supervise(mut child: Child, daemon: Option<Pid>) -> u8 {
    let set = supervised_signals();
    let pid = child.id() as i32;
    let mut daemon_seen_dead = false;
    loop {
        if let Ok(Some(s)) = child.try_wait() {
            return match (s.code(), s.signal()) {
                (Some(c), _) => c as u8,
                (_, Some(sig)) => 128u8.wrapping_add(sig as u8),
                _ => 1,
            };
        }
        if let (Some(d), false) = (daemon, daemon_seen_dead) {
            // Not reaped here (stop_daemon does): only noticed.
            if std::fs::read_to_string(format!("/proc/{d}/stat"))
                .map(|s| {
                    s.rsplit(')')
                        .next()
                        .is_some_and(|r| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(true)
            {
                daemon_seen_dead = true;
                eprintln!("monfs run: the monfs daemon ended while the command ran");
            }
        }
        // SAFETY: siginfo_t is plain data; sigwaitinfo fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` is a valid signal set blocked in this thread.
        let sig = unsafe { libc::sigwaitinfo(set.as_ref(), &mut info) };
        if sig < 0 || sig == libc::SIGCHLD {
            continue;
        }
        // From a process (kill(1)), not the terminal, which has sent it to
        // CMD already; and SIGTERM and SIGHUP always: pass it on.
        let from_process = info.si_code == libc::SI_USER || info.si_code == libc::SI_QUEUE;
        if from_process || sig == libc::SIGTERM || sig == libc::SIGHUP {
            // SAFETY: a plain kill(2).
            unsafe { libc::kill(pid, sig) };
        }
    }
}
