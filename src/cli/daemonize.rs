//! How `monfs mount` leaves the foreground: the fork and the ready pipe the
//! parent waits on, the descriptors the daemon closes or redirects, and where
//! its log goes (a file, or the systemd journal's stream socket).

use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::unistd::{dup2, fork, pipe2, setsid, ForkResult};

/// Fork; the parent waits until the child reports the mount up (or failed) and
/// exits with that status. Returns the pipe the child reports on. The child
/// starts a new session, has stdin and stdout on /dev/null and closes every
/// other descriptor it inherited (so that no caller's pipe is held open);
/// stderr stays until the mount is up, so that errors reach the caller.
pub(crate) fn daemonize() -> std::fs::File {
    let die = |what: &str, e: nix::errno::Errno| -> ! {
        eprintln!("monfs: {what}: {e}");
        std::process::exit(1);
    };
    let (r, w) = pipe2(OFlag::O_CLOEXEC).unwrap_or_else(|e| die("pipe", e));
    // SAFETY: no thread exists yet, so the child may do anything.
    match unsafe { fork() } {
        Err(e) => die("fork", e),
        Ok(ForkResult::Child) => {
            drop(r);
            let _ = setsid();
            // Above stdio, whatever the caller left closed.
            let raw = fcntl(&w, FcntlArg::F_DUPFD_CLOEXEC(3)).unwrap_or_else(|e| die("fcntl", e));
            drop(w);
            // SAFETY: F_DUPFD_CLOEXEC made `raw`, a descriptor nothing else owns.
            let w = unsafe { OwnedFd::from_raw_fd(raw) };
            detach_stdio();
            close_inherited_fds(w.as_raw_fd());
            std::fs::File::from(w)
        }
        Ok(ForkResult::Parent { .. }) => {
            drop(w);
            let mut r = std::fs::File::from(r);
            let mut b = [0u8; 1];
            let code = match r.read(&mut b) {
                Ok(1) => b[0] as i32,
                _ => 1,
            };
            std::process::exit(code);
        }
    }
}

/// The descriptor `--ready-fd` names, kept from whatever this process
/// starts (close-on-exec).
pub(crate) fn ready_pipe(fd: i32) -> Result<std::fs::File, nix::errno::Errno> {
    // SAFETY: F_GETFD on any number is harmless.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    fcntl(borrowed, FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    // SAFETY: the caller handed us this descriptor to own; it is open.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Close every descriptor from 3 up except `keep`: in the daemon, before it
/// opens any of its own.
fn close_inherited_fds(keep: i32) {
    let keep = keep as libc::c_uint;
    for (lo, hi) in [(3, keep.saturating_sub(1)), (keep + 1, libc::c_uint::MAX)] {
        if lo > hi {
            continue;
        }
        // SAFETY: closes descriptors nothing in this process uses.
        if unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) } == 0 {
            continue;
        }
        // No close_range (Linux < 5.9): close what /proc lists.
        let fds: Vec<libc::c_uint> = std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for fd in fds.into_iter().filter(|fd| (lo..=hi).contains(fd)) {
            // SAFETY: as above (the directory's own descriptor is closed already).
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// stdin and stdout on /dev/null.
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        redirect(&null, 0);
        redirect(&null, 1);
    }
}

/// Make descriptor `target` (0, 1 or 2) a copy of `to`.
pub(crate) fn redirect(to: &impl AsFd, target: i32) {
    // SAFETY: `target` is one of our standard descriptors, which dup2
    // replaces atomically; nothing holds it as an OwnedFd.
    let mut fd = unsafe { OwnedFd::from_raw_fd(target) };
    let _ = dup2(to, &mut fd);
    // It stays open as the standard descriptor.
    let _ = fd.into_raw_fd();
}

/// Open (append, create 0600, never through a symlink) the log file.
pub(crate) fn open_log(
    path: &std::path::Path,
) -> Result<std::fs::File, super::error::LogFileError> {
    use std::os::unix::fs::OpenOptionsExt;
    if path.parent() == Some(crate::control::run_dir().as_path()) {
        crate::control::ensure_private_dir(path.parent().unwrap())?;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|source| super::error::LogFileError::Open {
            path: path.to_path_buf(),
            source,
        })
}

/// The journal's stream socket, where systemd connects services' stderr.
/// `MONFS_JOURNAL_SOCKET` names another (tests; `/nonexistent` turns the
/// journal off).
fn journal_socket() -> PathBuf {
    std::env::var_os("MONFS_JOURNAL_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/systemd/journal/stdout"))
}

/// A stream into the journal, if one is running: connected to its stream
/// socket and introduced with the header systemd-journald expects there
/// (identifier `monfs`, no unit, priority info, no level prefixes, no
/// forwarding), after which every line written is one journal entry.
pub(crate) fn journal_stream() -> Option<std::os::unix::net::UnixStream> {
    let mut s = std::os::unix::net::UnixStream::connect(journal_socket()).ok()?;
    s.write_all(b"monfs\n\n6\n0\n0\n0\n0\n").ok()?;
    let _ = s.shutdown(std::net::Shutdown::Read);
    Some(s)
}
