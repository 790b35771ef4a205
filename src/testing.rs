//! Mount monfs from a Rust test: the harness monfs's own integration tests
//! use (`tests/common`), public so that a tool's tests can use it too. It is
//! the Rust side of the Python package's `monfs.Mount` (docs/python.md).
//!
//! ```no_run
//! use monfs::testing::Options;
//!
//! let m = Options::new()
//!     .config("usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: hid-keyboard}\n")
//!     .start()
//!     .expect("mount");
//! m.ctl("fault 1 1 stall").expect("carried out");
//! let devices = std::fs::read_to_string(m.path("usb/devices")).unwrap();
//! drop(m); // SIGTERM, reap, unmount whatever is left, remove the directory
//! # let _ = devices;
//! ```
//!
//! [`Options::start`] runs `monfs mount --foreground` on a fresh directory
//! (the mountpoint `mnt`, the log `monfs.log`, the control socket
//! `ctl.sock`) and returns once the mount serves and the daemon said so (its
//! "mounted" line, which names the transport). Dropping the [`Mount`]
//! stops the daemon (SIGTERM, SIGKILL after [`HANG`]), reaps it, unmounts
//! anything left (`umount2(MNT_DETACH)` as root, `fusermount3 -u -z`
//! otherwise) and removes the directory. Errors carry the daemon's log.
//! As root monfs mounts by itself, as any other user through fusermount3
//! (docs/rootless.md).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a wait lasts before it is called a hang: starting, stopping.
/// Tests assert no latencies; this only turns a hang into a failure, with
/// room for a loaded machine.
pub const HANG: Duration = Duration::from_secs(30);

/// What went wrong while mounting or steering a test mount.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No monfs binary: none given, `MONFS_BIN` unset and none on `PATH`.
    #[error("monfs not found: give Options::binary, set MONFS_BIN, or put monfs on PATH")]
    NoBinary,
    /// A system call or a file operation of the harness failed.
    #[error("{what}: {source}")]
    Io {
        /// What the harness was doing.
        what: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The mount did not come up: the daemon exited, or did not serve in
    /// time.
    #[error("monfs did not mount: {why}\n--- monfs daemon log ---\n{log}")]
    DidNotMount {
        /// Why, in a few words.
        why: String,
        /// The daemon's whole log.
        log: String,
    },
    /// The daemon refused a control command (`error: ...`).
    #[error("monfs refused {command:?}: {reason}")]
    Refused {
        /// The command sent.
        command: String,
        /// monfs's explanation.
        reason: String,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// The test's directory: removed (recursively) when dropped, unless still
/// mounted on.
#[derive(Debug)]
pub struct WorkDir(PathBuf);

impl WorkDir {
    /// A fresh private directory `monfs-rs-XXXXXX` in the temporary directory.
    pub fn new() -> Result<WorkDir, Error> {
        let template = std::env::temp_dir().join("monfs-rs-XXXXXX");
        let dir = nix::unistd::mkdtemp(&template)
            .map_err(|e| io("creating the test directory")(std::io::Error::from(e)))?;
        Ok(WorkDir(dir))
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        if !mounted_below(&self.0) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// Whether something is mounted at `path` (by /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    mount_points().iter().any(|p| p == path)
}

fn mounted_below(path: &Path) -> bool {
    mount_points().iter().any(|p| p.starts_with(path))
}

fn mount_points() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| {
            PathBuf::from(
                p.replace("\\040", " ")
                    .replace("\\011", "\t")
                    .replace("\\012", "\n")
                    .replace("\\134", "\\"),
            )
        })
        .collect()
}

/// How to mount: the binary, the configuration, more options and the
/// daemon's environment. [`Options::start`] mounts.
#[derive(Debug, Clone)]
pub struct Options {
    binary: Option<PathBuf>,
    config: Option<String>,
    config_file: Option<PathBuf>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    log_level: String,
    timeout: Duration,
    own_socket: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options::new()
    }
}

impl Options {
    /// The built-in default configuration, log level debug, [`HANG`] to
    /// start, a control socket in the test's directory.
    pub fn new() -> Options {
        Options {
            binary: None,
            config: None,
            config_file: None,
            args: Vec::new(),
            env: Vec::new(),
            log_level: "debug".into(),
            timeout: HANG,
            own_socket: true,
        }
    }

    /// The monfs binary (default: `MONFS_BIN`, else `monfs` on `PATH`).
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Options {
        self.binary = Some(path.into());
        self
    }

    /// Mount this YAML configuration (written to `config.yaml` in the
    /// test's directory: relative paths in it are relative to that).
    pub fn config(mut self, yaml: impl Into<String>) -> Options {
        self.config = Some(yaml.into());
        self.config_file = None;
        self
    }

    /// Mount the configuration file at `path`.
    pub fn config_file(mut self, path: impl Into<PathBuf>) -> Options {
        self.config_file = Some(path.into());
        self.config = None;
        self
    }

    /// One more `monfs mount` option (`--no-mmap`, `--seed`, `7`).
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Options {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// More `monfs mount` options.
    pub fn args<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(mut self, args: I) -> Options {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// An environment variable for the daemon (and the peers it starts).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Options {
        self.env
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// The daemon's `--log-level` (default `debug`).
    pub fn log_level(mut self, level: impl Into<String>) -> Options {
        self.log_level = level.into();
        self
    }

    /// How long to wait for the mount to serve (default [`HANG`]).
    pub fn timeout(mut self, timeout: Duration) -> Options {
        self.timeout = timeout;
        self
    }

    /// Leave the control socket where monfs puts it by default (in
    /// `/run/monfs` for root, see `monfs mount --help`) instead of in the
    /// test's directory, for a test of `monfs ctl MOUNTPOINT` itself.
    pub fn default_socket(mut self) -> Options {
        self.own_socket = false;
        self
    }

    fn find_binary(&self) -> Result<PathBuf, Error> {
        if let Some(b) = &self.binary {
            return Ok(b.clone());
        }
        if let Some(b) = std::env::var_os("MONFS_BIN").filter(|b| !b.is_empty()) {
            return Ok(PathBuf::from(b));
        }
        let path = std::env::var_os("PATH").ok_or(Error::NoBinary)?;
        std::env::split_paths(&path)
            .map(|d| d.join("monfs"))
            .find(|p| p.is_file())
            .ok_or(Error::NoBinary)
    }

    /// Mount, and return once the mount serves (its `monfs/null` exists).
    pub fn start(self) -> Result<Mount, Error> {
        let binary = self.find_binary()?;
        let dir = WorkDir::new()?;
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).map_err(io("creating the mountpoint"))?;
        let log = dir.path().join("monfs.log");
        let mut cmd = Command::new(&binary);
        cmd.arg("--log-level")
            .arg(&self.log_level)
            .arg("mount")
            .arg(&mnt)
            .arg("--foreground");
        if self.own_socket {
            cmd.arg("--ctl-socket").arg(dir.path().join("ctl.sock"));
        }
        if let Some(yaml) = &self.config {
            let cfg = dir.path().join("config.yaml");
            std::fs::write(&cfg, yaml).map_err(io("writing the configuration"))?;
            cmd.arg("--config").arg(cfg);
        } else if let Some(file) = &self.config_file {
            cmd.arg("--config").arg(file);
        }
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log).map_err(io("creating the log"))?);
        let child = cmd
            .spawn()
            .map_err(io(format!("starting {}", binary.display())))?;
        let mut m = Mount {
            dir,
            child,
            log,
            timeout: self.timeout,
        };
        let deadline = Instant::now() + self.timeout;
        // Serving, and done starting: its one "mounted" line (which says
        // the transport) is out.
        while !m.path("monfs/null").exists() || !m.log_text().contains(" mounted") {
            if let Ok(Some(status)) = m.child.try_wait() {
                return Err(Error::DidNotMount {
                    why: format!("the daemon exited ({status})"),
                    log: m.log_text(),
                });
            }
            if Instant::now() > deadline {
                return Err(Error::DidNotMount {
                    why: format!("it did not serve within {:?}", self.timeout),
                    log: m.log_text(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(m)
    }
}

/// A running monfs mount, stopped, unmounted and removed when dropped.
#[derive(Debug)]
pub struct Mount {
    /// The test's directory (mountpoint `mnt`, log, socket, configuration).
    pub dir: WorkDir,
    /// The daemon.
    pub child: Child,
    /// The daemon's log (its stderr, and its peers').
    pub log: PathBuf,
    timeout: Duration,
}

impl Mount {
    /// Mount this YAML configuration (None: the built-in default) with the
    /// binary [`Options::new`] finds.
    pub fn start(yaml: Option<&str>) -> Result<Mount, Error> {
        match yaml {
            Some(y) => Options::new().config(y).start(),
            None => Options::new().start(),
        }
    }

    /// The mountpoint.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("mnt")
    }

    /// A path in the mount: `m.path("usb/devices")`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root().join(rel)
    }

    /// The control socket, as the mount names it (`monfs/socket`).
    pub fn socket(&self) -> Result<PathBuf, Error> {
        let text = std::fs::read_to_string(self.path("monfs/socket"))
            .map_err(io("reading monfs/socket"))?;
        Ok(PathBuf::from(text.trim_end_matches('\n')))
    }

    /// The daemon's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Whether the daemon is running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Send one control command (`plug 1 3 mass-storage`, `fault 1 3
    /// stall`; see `monfs ctl MOUNTPOINT help`) on the socket; monfs's answer
    /// after `ok`, or [`Error::Refused`] with its reason.
    pub fn ctl(&self, command: &str) -> Result<String, Error> {
        let socket = self.socket()?;
        let answer = crate::control::send(&socket, command, None)
            .map_err(io(format!("control socket {}", socket.display())))?;
        let answer = answer.trim_end_matches('\n');
        match answer.strip_prefix("error: ") {
            Some(reason) => Err(Error::Refused {
                command: command.to_string(),
                reason: reason.to_string(),
            }),
            None => Ok(answer
                .strip_prefix("ok")
                .unwrap_or(answer)
                .trim()
                .replace("\n   ", "\n")),
        }
    }

    /// Stop the daemon, reap it and unmount; what dropping does.
    pub fn stop(self) {}
}

impl Drop for Mount {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + self.timeout;
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
        let root = self.root();
        if is_mounted(&root) {
            if nix::unistd::geteuid().is_root() {
                let _ = nix::mount::umount2(&root, nix::mount::MntFlags::MNT_DETACH);
            } else {
                let _ = Command::new("fusermount3")
                    .arg("-u")
                    .arg("-z")
                    .arg(&root)
                    .stderr(Stdio::null())
                    .status();
            }
        }
    }
}
