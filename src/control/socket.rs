//! The control socket: where it lives (the run directory), binding and
//! serving it (connections, passed descriptors, idle ones evicted), and
//! the client side `monfs ctl` uses.

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use nix::sys::socket::{
    getsockopt, recvmsg, sendmsg, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
};
use nix::sys::stat::{umask, Mode};
use tracing::{info, warn};

use super::error::{io_err, SocketError};
use super::Control;

/// The default socket for a mountpoint: `<run dir>/<mountpoint with / as
/// ->.sock`, the run directory being [`run_dir`].
pub fn default_socket(mountpoint: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = abs
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    run_dir().join(format!("{name}.sock"))
}

/// The directory of root's default sockets (and logs).
pub const RUN_DIR: &str = "/run/monfs";

/// The directory of the default sockets (and logs), kept private (0700) and
/// owned by us: [`RUN_DIR`] for root; for another user
/// `$XDG_RUNTIME_DIR/monfs` when that variable names an absolute path,
/// else `/tmp/monfs-<uid>`, made now if missing. Another user can create
/// that name first (`/tmp` is everyone's): then it is a fresh directory of
/// a name nobody can guess, `/tmp/monfs-<uid>-<random>`, made by us (issue
/// 37), and clients find the socket through the mount's `monfs/socket`.
/// The same directory for the life of the process.
pub fn run_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let uid = nix::unistd::geteuid();
        if uid.is_root() {
            return PathBuf::from(RUN_DIR);
        }
        match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(x) if x.is_absolute() => x.join("monfs"),
            _ => tmp_run_dir(Path::new("/tmp"), uid.as_raw()),
        }
    })
    .clone()
}

/// `DIR/monfs-<uid>` if it is ours or we could make it, else a fresh
/// `DIR/monfs-<uid>-<random>` made by us (0700).
pub fn tmp_run_dir(tmp: &Path, uid: u32) -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let usual = tmp.join(format!("monfs-{uid}"));
    let made = std::fs::DirBuilder::new().mode(0o700).create(&usual);
    let ours = match made {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::symlink_metadata(&usual)
                .is_ok_and(|m| m.is_dir() && !m.file_type().is_symlink() && m.uid() == uid)
        }
        Err(_) => false,
    };
    if ours {
        return usual;
    }
    for _ in 0..16 {
        let mut r = [0u8; 8];
        // SAFETY: getrandom fills the buffer it is given.
        let n = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
        if n != r.len() as isize {
            break;
        }
        let alt = tmp.join(format!("monfs-{uid}-{:016x}", u64::from_ne_bytes(r)));
        // mkdir fails on anything already there: the directory is ours.
        if std::fs::DirBuilder::new().mode(0o700).create(&alt).is_ok() {
            warn!(
                taken = %usual.display(),
                using = %alt.display(),
                "the usual run directory is not ours (made by another user?); using a fresh one"
            );
            return alt;
        }
    }
    usual
}

/// At most this many control connections are open at once. A new one past
/// it closes the one idle longest (answered `error: idle connection closed
/// for a new one`), so idle clients cannot lock `monfs ctl` out (issue 37);
/// only when every one is carrying out a command is the new one answered
/// `error: too many control connections` and closed.
pub const MAX_CONNECTIONS: usize = 16;

/// The longest command line taken on the socket (bytes, without the newline);
/// a longer one is answered `error: line too long` and the connection closed.
pub const MAX_LINE: usize = 4096;

/// The most descriptors (SCM_RIGHTS) a connection may have passed and not
/// yet used by a command; past it, the connection is answered `error: too
/// many descriptors ...` and closed (and the descriptors with it).
pub const MAX_PASSED_FILES: usize = 4;

/// A connection idle this long is closed, so forgotten clients free their slot.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Make `dir` a private directory: create it with mode 0700, or fix the mode
/// of an existing one; refuse a symlink, a non-directory, or a directory
/// owned by someone else.
pub fn ensure_private_dir(dir: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let d = dir.display();
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A minimal system (an initramfs) may lack /run itself.
            if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
                std::fs::create_dir_all(parent)
                    .map_err(io_err("cannot create ", parent.display()))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => std::fs::symlink_metadata(dir),
                // Another daemon starting at the same time made it first:
                // check what is there now like any existing entry.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::symlink_metadata(dir)
                }
                Err(e) => return Err(io_err("cannot create ", d)(e)),
            }
        }
        m => m,
    };
    match meta {
        Err(e) => return Err(io_err("", d)(e)),
        Ok(m) if m.file_type().is_symlink() => return Err(SocketError::Symlink(d.to_string())),
        Ok(m) if !m.is_dir() => return Err(SocketError::NotDir(d.to_string())),
        Ok(m) if m.uid() != nix::unistd::geteuid().as_raw() => {
            return Err(SocketError::Owner {
                path: d.to_string(),
                uid: m.uid(),
            })
        }
        Ok(_) => {}
    }
    // Explicitly, whatever the umask was or the mode an old version left.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io_err("cannot chmod 0700 ", d))
}

/// A bound control socket, not yet served.
pub struct ControlSocket {
    listener: UnixListener,
    file: SocketFile,
}

/// The socket's file, to remove when the daemon exits.
#[derive(Clone)]
pub struct SocketFile {
    path: PathBuf,
    ino: u64,
}

impl SocketFile {
    /// Remove the socket file, if it is still ours (same inode).
    pub fn remove(&self) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Make room for a socket at `path`: nothing there, or a stale socket (one
/// nobody listens on), which is removed. Anything else is refused.
fn clear_stale_socket(path: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::FileTypeExt;
    let p = path.display();
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("", p)(e)),
        Ok(m) => m,
    };
    if !m.file_type().is_socket() {
        return Err(SocketError::NotSocket(p.to_string()));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(SocketError::Listening(p.to_string())),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            info!(socket = %p, "removing a stale control socket");
            std::fs::remove_file(path).map_err(io_err("cannot remove stale ", p))
        }
        Err(source) => Err(SocketError::Probe {
            path: p.to_string(),
            source,
        }),
    }
}

impl ControlSocket {
    /// Bind the control socket at `path` (mode 0600). The default directory
    /// ([`run_dir`]) is made private (0700); a missing parent of another path
    /// is created 0700. Only a stale socket is replaced.
    pub fn bind(path: &Path) -> Result<ControlSocket, SocketError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let p = path.display();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if dir == run_dir() {
                ensure_private_dir(dir)?;
            } else if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(io_err("cannot create ", dir.display()))?;
            }
        }
        clear_stale_socket(path)?;
        // No window with a wider mode: the socket is born 0600.
        let old = umask(Mode::from_bits_truncate(0o077));
        let bound = UnixListener::bind(path);
        umask(old);
        let listener = bound.map_err(io_err("cannot bind ", &p))?;
        let meta = std::fs::symlink_metadata(path).map_err(io_err("", &p))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("cannot chmod ", &p))?;
        Ok(ControlSocket {
            listener,
            file: SocketFile {
                path: path.to_path_buf(),
                ino: meta.ino(),
            },
        })
    }

    /// The socket's file.
    pub fn file(&self) -> SocketFile {
        self.file.clone()
    }

    /// Serve the socket from a thread until the process ends. Only root and
    /// `owner_uid` (the uid the mount's files belong to) are served; others
    /// get `error: permission denied`.
    pub fn serve(self, ctl: Arc<Control>, owner_uid: u32) -> std::io::Result<()> {
        let conns = Arc::new(Conns::default());
        let listener = self.listener;
        std::thread::Builder::new()
            .name("ctl-socket".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let mut s = match conn {
                        Ok(s) => s,
                        Err(e) => {
                            warn!("control socket: {e}");
                            continue;
                        }
                    };
                    let (uid, pid) = peer_cred(&s).unwrap_or((u32::MAX, 0));
                    if uid != 0 && uid != owner_uid {
                        warn!(uid, pid, "control connection refused: permission denied");
                        refuse(&mut s, "permission denied");
                        continue;
                    }
                    let Some(me) = conns.admit(&s) else {
                        warn!(
                            uid,
                            pid,
                            limit = MAX_CONNECTIONS,
                            "control connection refused: every connection is busy"
                        );
                        refuse(&mut s, "too many control connections");
                        continue;
                    };
                    let ctl = ctl.clone();
                    let conns = conns.clone();
                    let _ = std::thread::Builder::new()
                        .name("ctl-conn".into())
                        .spawn(move || {
                            serve_conn(&ctl, s, &me);
                            conns.leave(&me);
                        });
                }
            })?;
        Ok(())
    }
}

/// The open control connections (at most [`MAX_CONNECTIONS`]).
#[derive(Default)]
struct Conns(std::sync::Mutex<Vec<Arc<Conn>>>);

/// One open control connection.
struct Conn {
    /// [`CONN_IDLE`], [`CONN_BUSY`] or [`CONN_EVICTED`].
    state: AtomicUsize,
    /// When it last finished a command, or was opened ([`tick`]).
    last: AtomicU64,
    /// Its socket, to shut down when it is evicted.
    stream: Option<UnixStream>,
}

/// Waiting for a command.
const CONN_IDLE: usize = 0;
/// Carrying one out.
const CONN_BUSY: usize = 1;
/// Closed for a new connection: carries out nothing more.
const CONN_EVICTED: usize = 2;

/// A count that grows at every connection's opening and finished command:
/// the connection idle longest has the smallest. (Milliseconds tied when
/// several finished within one, and the tie went by the list's order.)
fn tick() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Conns {
    /// A place for a new connection on `s`: a free one, or the one of the
    /// connection idle longest, which is closed. None when every
    /// connection is busy.
    fn admit(&self, s: &UnixStream) -> Option<Arc<Conn>> {
        use crate::base::sync::LockExt;
        let mut all = self.0.lock_ok();
        if all.len() >= MAX_CONNECTIONS {
            let mut idle: Vec<(u64, usize)> = all
                .iter()
                .enumerate()
                .filter(|(_, c)| c.state.load(Ordering::Acquire) == CONN_IDLE)
                .map(|(i, c)| (c.last.load(Ordering::Relaxed), i))
                .collect();
            idle.sort_unstable();
            let victim = idle.into_iter().map(|(_, i)| i).find(|&i| {
                all[i]
                    .state
                    .compare_exchange(CONN_IDLE, CONN_EVICTED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })?;
            let old = all.swap_remove(victim);
            if let Some(mut st) = old.stream.as_ref() {
                info!(
                    limit = MAX_CONNECTIONS,
                    "control connection idle longest closed for a new one"
                );
                let _ = st.set_nonblocking(true);
                let _ = st.write_all(b"error: idle connection closed for a new one\n");
                let _ = st.shutdown(std::net::Shutdown::Both);
            }
        }
        let me = Arc::new(Conn {
            state: AtomicUsize::new(CONN_IDLE),
            last: AtomicU64::new(tick()),
            stream: s.try_clone().ok(),
        });
        all.push(me.clone());
        Some(me)
    }

    /// The connection `me` is over.
    fn leave(&self, me: &Arc<Conn>) {
        use crate::base::sync::LockExt;
        self.0.lock_ok().retain(|c| !Arc::ptr_eq(c, me));
    }
}

/// The peer's uid and pid (SO_PEERCRED).
pub fn peer_cred(s: &UnixStream) -> std::io::Result<(u32, i32)> {
    let cred = getsockopt(s, sockopt::PeerCredentials)?;
    Ok((cred.uid(), cred.pid()))
}

/// Answer one error line and close, without waiting on the client.
fn refuse(s: &mut UnixStream, why: &str) {
    let _ = s.set_nonblocking(true);
    let _ = s.write_all(format!("error: {why}\n").as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Read what `s` has into `buf`, and the descriptors passed with it
/// (SCM_RIGHTS, received close-on-exec) onto `files`. Returns the byte count
/// and whether descriptors were cut off (more than [`MAX_PASSED_FILES`] in
/// one message; the kernel closes those).
fn recv_with_files(
    s: &UnixStream,
    buf: &mut [u8],
    files: &mut VecDeque<OwnedFd>,
) -> std::io::Result<(usize, bool)> {
    let mut space = nix::cmsg_space!([RawFd; MAX_PASSED_FILES]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        s.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: SCM_RIGHTS hands us new descriptors that nothing else
            // owns.
            files.extend(
                fds.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok((msg.bytes, msg.flags.contains(MsgFlags::MSG_CTRUNC)))
}

fn serve_conn(ctl: &Control, mut s: UnixStream, me: &Conn) {
    let _ = s.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = s.set_write_timeout(Some(std::time::Duration::from_secs(10)));
    let mut answering = true;
    let mut pending: Vec<u8> = Vec::new();
    let mut files = VecDeque::new();
    let mut chunk = [0u8; 4096];
    loop {
        // Never more than MAX_LINE + one chunk buffered.
        let (n, eof) = match recv_with_files(&s, &mut chunk, &mut files) {
            Ok((_, true)) => return close_with(&mut s, "too many descriptors in one message"),
            Ok((0, _)) => (0, true),
            Ok((n, _)) => (n, false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if files.len() > MAX_PASSED_FILES {
            return close_with(&mut s, "too many descriptors waiting for commands");
        }
        pending.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        while let Some(nl) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + nl];
            start += nl + 1;
            if line.len() > MAX_LINE {
                return close_with(&mut s, "line too long");
            }
            if !me.run(|stamp| answer(ctl, &mut s, &mut answering, line, &mut files, stamp)) {
                return;
            }
        }
        pending.drain(..start);
        if pending.len() > MAX_LINE {
            return close_with(&mut s, "line too long");
        }
        if eof {
            // A last line without a newline still counts.
            me.run(|stamp| answer(ctl, &mut s, &mut answering, &pending, &mut files, stamp));
            return;
        }
    }
}

impl Conn {
    /// Carry out `f` (a command) unless the connection was evicted; whether
    /// it was carried out. `f` calls the stamp it is given right before it
    /// sends its answer: the connection is idle from then on, before its
    /// client can read the answer and open another connection (stamped
    /// after its own time otherwise, it could count as idle for less time
    /// than that newer one). Without an answer, it is stamped at the end.
    fn run(&self, f: impl FnOnce(&dyn Fn())) -> bool {
        if self
            .state
            .compare_exchange(CONN_IDLE, CONN_BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        let stamped = std::cell::Cell::new(false);
        let stamp = || {
            if !stamped.replace(true) {
                self.last.store(tick(), Ordering::Relaxed);
            }
        };
        f(&stamp);
        stamp();
        let _ =
            self.state
                .compare_exchange(CONN_BUSY, CONN_IDLE, Ordering::AcqRel, Ordering::Acquire);
        true
    }
}

/// Answer `error: WHY`, log it and close the connection (a limit was hit).
fn close_with(s: &mut UnixStream, why: &str) {
    warn!(
        max_line = MAX_LINE,
        max_files = MAX_PASSED_FILES,
        "control connection closed: {why}"
    );
    let _ = s.write_all(format!("error: {why}\n").as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn answer(
    ctl: &Control,
    out: &mut UnixStream,
    answering: &mut bool,
    line: &[u8],
    files: &mut VecDeque<OwnedFd>,
    stamp: &dyn Fn(),
) {
    let Ok(line) = std::str::from_utf8(line) else {
        stamp();
        if *answering && out.write_all(b"error: not UTF-8\n").is_err() {
            *answering = false;
        }
        return;
    };
    if line.trim().is_empty() {
        return;
    }
    // A panicking command fails alone; the hook has logged it.
    let reply = match std::panic::catch_unwind(AssertUnwindSafe(|| ctl.execute_with(line, files))) {
        Ok(Ok(msg)) => format!("ok {}\n", msg.trim_end().replace('\n', "\n   ")),
        Ok(Err(e)) => format!("error: {e}\n"),
        Err(_) => "error: internal error (panic; see the daemon log)\n".to_string(),
    };
    // A client that went away still gets every command it sent carried
    // out; only the answers are dropped.
    stamp();
    if *answering && out.write_all(reply.as_bytes()).is_err() {
        *answering = false;
    }
}

/// Send `data` on `s`, passing `file` (SCM_RIGHTS) with its first bytes.
pub fn send_with_file(
    s: &mut UnixStream,
    data: &[u8],
    file: Option<&std::fs::File>,
) -> std::io::Result<()> {
    let Some(file) = file else {
        return s.write_all(data);
    };
    let fds = [file.as_raw_fd()];
    let n = sendmsg::<()>(
        s.as_raw_fd(),
        &[IoSlice::new(data)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    s.write_all(&data[n..])
}

/// Send one command to a daemon's socket, with `file` passed along if given
/// (what `replay start` replays); returns its answer line(s). A daemon that
/// refuses the connection answers and closes at once: its answer is
/// returned even if sending or the end of the read then failed.
pub fn send(path: &Path, command: &str, file: Option<&std::fs::File>) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    let sent = send_with_file(&mut s, format!("{command}\n").as_bytes(), file)
        .and_then(|()| s.shutdown(std::net::Shutdown::Write));
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    match (read, sent) {
        _ if !out.is_empty() => Ok(String::from_utf8_lossy(&out).into_owned()),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        (Ok(_), Ok(())) => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_dir_another_user_made_first_is_not_used() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        // Missing: made, private.
        let d = tmp_run_dir(tmp.path(), me);
        assert_eq!(d, tmp.path().join(format!("monfs-{me}")));
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!((m.uid(), m.permissions().mode() & 0o777), (me, 0o700));
        // Ours already: kept.
        assert_eq!(tmp_run_dir(tmp.path(), me), d);
        // Another's (we made monfs-<other>, as an attacker would), or a
        // symlink to ours: a fresh directory of our own instead.
        let other = me + 4242;
        std::fs::create_dir(tmp.path().join(format!("monfs-{other}"))).unwrap();
        std::os::unix::fs::symlink(&d, tmp.path().join(format!("monfs-{}", me + 1))).unwrap();
        for uid in [other, me + 1] {
            let alt = tmp_run_dir(tmp.path(), uid);
            let name = alt.file_name().unwrap().to_str().unwrap().to_string();
            assert!(name.starts_with(&format!("monfs-{uid}-")), "{name}");
            let m = std::fs::symlink_metadata(&alt).unwrap();
            assert!(m.is_dir() && m.permissions().mode() & 0o777 == 0o700);
        }
    }
}
