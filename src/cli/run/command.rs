//! CMD under `monfs run`: started with MONFS_MOUNT and MONFS_SOCKET (as the
//! caller's own uid and gid without root), the signals sent to monfs run
//! passed on to it, and its exit status returned.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command};

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

use super::{RunOptions, EXIT_CANNOT_EXEC, EXIT_NOT_FOUND, VERIFY_SYSFS};

/// Start CMD with MONFS_MOUNT and MONFS_SOCKET; without root, in a nested
/// user namespace as the caller's uid and gid. Err: the exit status to give.
pub(super) fn spawn_command(
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
    // The signals supervise() takes are blocked since run() began.
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

/// The signals [`supervise`] takes, blocked in the calling thread (from the
/// start of `monfs run`, so in all its threads; CMD's mask is emptied again
/// before exec, and std empties the daemon's), so that none is missed.
pub(super) fn supervised_signals() -> SigSet {
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
pub(super) fn supervise(mut child: Child, daemon: Option<Pid>) -> u8 {
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
