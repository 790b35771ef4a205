//! The daemon of `monfs run`: `monfs mount --foreground` started in the
//! namespace, its "mounted" byte waited for, its log kept in a file of no
//! name (shown if it fails), and its stop.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use super::{io, sys, RunError, RunOptions, LOG_TAIL};

/// The daemon, and the pipe it says "mounted" on.
pub(super) struct Daemon {
    pub(super) child: Child,
    ready: Option<OwnedFd>,
    reaped: Option<std::process::ExitStatus>,
}

pub(super) fn start_daemon(
    opts: &RunOptions,
    mnt: &Path,
    socket: &Path,
    log: std::fs::File,
    uevents: Option<&Path>,
) -> Result<Daemon, RunError> {
    let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(sys("pipe"))?;
    let mut cmd = Command::new(&opts.exe);
    // Announce the topology's uevents here, with this udev database.
    // Its class nodes go into /dev as their devices come and go: this
    // namespace's /dev is private (private_dev).
    match uevents {
        Some(dir) => cmd
            .env(crate::cli::mount::UEVENTS_ENV, dir)
            .env(crate::cli::mount::DEVNODES_ENV, "1"),
        None => cmd
            .env_remove(crate::cli::mount::UEVENTS_ENV)
            .env_remove(crate::cli::mount::DEVNODES_ENV),
    };
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
pub(super) struct NotStarted(String);

/// Wait for the daemon's "mounted" byte; Err: how it ended instead.
pub(super) fn wait_ready(d: &mut Daemon) -> Result<(), NotStarted> {
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
pub(super) fn stop_daemon(d: &mut Daemon) -> Option<String> {
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
pub(super) fn open_log(path: Option<&Path>, dir: Option<&Path>) -> Result<std::fs::File, RunError> {
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
pub(super) fn show_tail(log: &std::fs::File) {
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

/// The daemon's warnings and errors on `monfs run`'s terminal as they are
/// logged (unless `--quiet`), and the first device failure a simulated
/// device had before the command started: a thread that follows the log
/// file from its start.
pub(super) struct LogEcho {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    tail: std::sync::Arc<std::sync::Mutex<Tail>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Where [`LogEcho`] is in the log, and the first device failure it read
/// there with who is told of it. Read by its thread, and by a caller that
/// must have seen every line logged so far.
struct Tail {
    log: std::fs::File,
    at: u64,
    partial: Vec<u8>,
    quiet: bool,
    failure: Option<String>,
    tell: Option<Box<dyn FnOnce(String) + Send>>,
}

impl Tail {
    /// Echo every line logged so far; note the first device failure.
    fn read(&mut self) {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = self.log.read_at(&mut buf, self.at).unwrap_or(0);
            if n == 0 {
                return;
            }
            self.at += n as u64;
            self.partial.extend_from_slice(&buf[..n]);
            while let Some(k) = self.partial.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.partial.drain(..=k).collect();
                let line = String::from_utf8_lossy(&line[..k]).to_string();
                let Some(msg) = warning(&line) else {
                    continue;
                };
                if !self.quiet {
                    eprintln!("monfs: {msg}");
                }
                if msg.contains(DEVICE_FAILED) && self.failure.is_none() {
                    self.failure = Some(msg.to_string());
                    if let Some(tell) = self.tell.take() {
                        tell(msg.to_string());
                    }
                }
            }
        }
    }
}

/// How often [`LogEcho`] looks at the log.
const ECHO_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Log lines that end a simulated device before it could enumerate: its
/// peer could not be started or went away (`sim::usb`'s `peer_gone`).
pub(super) const DEVICE_FAILED: &str = "external device's peer";

impl LogEcho {
    pub(super) fn start(log: &std::fs::File, quiet: bool) -> Result<LogEcho, RunError> {
        use std::sync::atomic::Ordering;
        let tail = std::sync::Arc::new(std::sync::Mutex::new(Tail {
            log: log.try_clone().map_err(io("log file"))?,
            at: 0,
            partial: Vec::new(),
            quiet,
            failure: None,
            tell: None,
        }));
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (s, t) = (stop.clone(), tail.clone());
        let thread = std::thread::Builder::new()
            .name("log-echo".into())
            .spawn(move || loop {
                let last = s.load(Ordering::SeqCst);
                t.lock().unwrap_or_else(|e| e.into_inner()).read();
                if last {
                    return;
                }
                std::thread::sleep(ECHO_EVERY);
            })
            .map_err(io("log thread"))?;
        Ok(LogEcho {
            stop,
            tail,
            thread: Some(thread),
        })
    }

    /// Have `tell` called with the first device failure: now if one was
    /// logged already, else when the echo reads it.
    pub(super) fn on_failure(&self, tell: impl FnOnce(String) + Send + 'static) {
        let mut g = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        g.read();
        match g.failure.clone() {
            Some(why) => tell(why),
            None => g.tell = Some(Box::new(tell)),
        }
    }

    /// The first device failure among every line logged so far (read now).
    pub(super) fn failure_now(&self) -> Option<String> {
        let mut g = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        g.read();
        g.failure.clone()
    }
}

impl Drop for LogEcho {
    /// Echo what is left, then stop.
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The message of a WARN or ERROR line of the daemon's log (its time
/// stamp and level cut), None for other lines.
fn warning(line: &str) -> Option<&str> {
    let (_stamp, rest) = line.split_once(' ')?;
    let rest = rest.trim_start();
    for level in ["WARN ", "ERROR "] {
        if let Some(m) = rest.strip_prefix(level) {
            return Some(m.trim_start());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    #[test]
    fn warnings_are_cut_from_their_time_stamp() {
        let w = super::warning;
        assert_eq!(
            w("2026-12-02T01:07:27.687794Z  WARN usb bus 1 port 1: gone"),
            Some("usb bus 1 port 1: gone")
        );
        assert_eq!(w("2026-12-02T01:07:27Z ERROR bad"), Some("bad"));
        assert_eq!(w("2026-12-02T01:07:27Z  INFO mounted"), None);
        assert_eq!(w("monfs: /tmp/mnt mounted"), None);
    }
}
