//! How `monfs run` proceeds: around an existing mount (`--use`), or with a
//! fresh daemon in a new namespace, waiting for its devices to enumerate
//! before CMD starts.

use std::io::Read;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use nix::mount::{umount2, MntFlags};
use nix::unistd::{geteuid, Pid};

use super::command::{spawn_command, supervise};
use super::daemon::{open_log, show_tail, start_daemon, stop_daemon, wait_ready, Daemon, LogEcho};
use super::namespace::{enter_namespace, private_dev, setup_paths};
use super::{io, sys, RunError, RunOptions, EXIT_START, FUSE_SUPER_MAGIC};

/// Run `opts.command` as described in the module docs; its exit status.
pub fn run(opts: RunOptions) -> ExitCode {
    // Blocked before any thread starts (the log echo's, ...), so that every
    // thread inherits the mask and a SIGTERM sent to monfs run waits for
    // supervise() instead of ending the process in whichever thread it hits.
    super::command::supervised_signals();
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
    if let Err(e) = enter_namespace(rootless)
        .and_then(|()| private_dev())
        .and_then(|()| setup_paths(&mnt, rootless))
    {
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
    if let Err(e) = enter_namespace(rootless).and_then(|()| private_dev()) {
        return start_failure(e);
    }
    // The command's own network namespace and udev database, where the
    // daemon announces the simulated devices' uevents.
    let mut uevents = None;
    if opts.host_network {
        eprintln!(
            "monfs run: --host-network: the command keeps the host's network and hears no \
             hot-plug event of monfs's"
        );
    } else {
        match super::netns::enter_netns(rootless)
            .and_then(|()| super::netns::private_run_udev(rootless))
        {
            Ok(dir) => uevents = dir,
            Err(e) => return start_failure(e),
        }
    }
    let reader = match log.try_clone() {
        Ok(f) => f,
        Err(e) => return start_failure(format!("log file: {e}")),
    };
    let mut daemon = match start_daemon(opts, &mnt, &socket, log, uevents) {
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
    let fail_after_mount = |e: &dyn std::fmt::Display, daemon: &mut Daemon| {
        eprintln!("monfs run: {e}");
        stop_daemon(daemon);
        ExitCode::from(EXIT_START)
    };
    // The daemon's warnings from now on, on the terminal.
    let echo = match LogEcho::start(&reader, opts.quiet) {
        Ok(e) => e,
        Err(e) => return fail_after_mount(&e, &mut daemon),
    };
    if opts.wait {
        if let Err(why) = wait_settled(&socket, &echo) {
            drop(echo);
            return fail_after_mount(
                &format!("a simulated device failed before the command started: {why}"),
                &mut daemon,
            );
        }
    }
    let daemon_pid = Pid::from_raw(daemon.child.id() as i32);
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
    let bad = stop_daemon(&mut daemon);
    drop(echo);
    if let Some(bad) = bad {
        eprintln!("monfs run: the daemon ended badly ({bad}); its last log lines:");
        show_tail(&reader);
    }
    let _ = std::fs::remove_file(&socket);
    drop(mp);
    ExitCode::from(status)
}

/// How long [`wait_settled`] waits at most.
const ENUMERATION_WAIT: Duration = Duration::from_secs(30);

/// What ends [`wait_settled`].
enum Settle {
    /// The daemon's answer to `wait settled`.
    Answer(std::io::Result<String>),
    /// A device failed first: why.
    Failed(String),
}

/// Wait until no simulated device is still coming or going, as a machine
/// that boots with its devices has them before its programs start: every
/// device plugged at start enumerated with its drivers bound, and its
/// uevents announced. The daemon answers `wait settled` on the control
/// socket when its USB core says so; nothing polls. At most
/// [`ENUMERATION_WAIT`] (then the command starts anyway, with a warning).
/// Err: a device failed first (why), as the log said: a peer the hub
/// driver found gone while enumerating (`ep0: peer`), or one its driver
/// found gone before the devices were up.
fn wait_settled(socket: &Path, echo: &LogEcho) -> Result<(), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let failed = tx.clone();
    echo.on_failure(move |why| {
        let _ = failed.send(Settle::Failed(why));
    });
    let socket = socket.to_path_buf();
    let command = format!("wait settled timeout_ms={}", ENUMERATION_WAIT.as_millis());
    // Its thread ends with the answer, or when the daemon is stopped.
    let _ = std::thread::Builder::new()
        .name("wait-settled".into())
        .spawn(move || {
            let _ = tx.send(Settle::Answer(crate::control::send(
                &socket, &command, None,
            )));
        });
    match rx.recv() {
        Ok(Settle::Failed(why)) => Err(why),
        // The daemon logs a failure before the device is gone: every line
        // before the answer is read now.
        Ok(Settle::Answer(Ok(a))) if a.trim() == "ok settled" => match echo.failure_now() {
            Some(why) => Err(why),
            None => Ok(()),
        },
        Ok(Settle::Answer(a)) => {
            let why = match a {
                Ok(a) => a.trim().to_string(),
                Err(e) => e.to_string(),
            };
            eprintln!(
                "monfs run: the simulated devices did not all enumerate ({why}); starting the command anyway"
            );
            Ok(())
        }
        Err(_) => Ok(()),
    }
}
