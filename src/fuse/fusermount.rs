//! Mounting without root: the `/dev/fuse` descriptor comes from the setuid
//! helper `fusermount3`, through its documented `_FUSE_COMMFD` protocol.
//!
//! We make a Unix stream socket pair, run `fusermount3 -o OPTIONS --
//! MOUNTPOINT` with the environment variable `_FUSE_COMMFD` naming the
//! helper's end (the only one of our descriptors it inherits), and the
//! helper mounts and sends the open `/dev/fuse` descriptor back over the
//! socket as `SCM_RIGHTS` ancillary data with one byte of payload. With the
//! `auto_unmount` option the helper then stays alive, watching its end of
//! the socket: when ours closes (the daemon exits, however it dies) it
//! unmounts. Our end is therefore kept open, close-on-exec, for the whole
//! life of the process.
//!
//! fusermount3 before 3.15 (Debian 12 has 3.14) cannot carry out
//! `auto_unmount` on a private mount: it checks the mount as root, whom a
//! mount without `allow_other` refuses (EACCES), and gives up (libfuse
//! issue 586). So a small guard backs it up: a shell, in its own process
//! group, that waits for end of file on a pipe only we hold and then runs
//! `fusermount3 -u -z` as the user, unless we told it first that we
//! unmounted ourselves ([`disarm_guard`]).

use std::fs::File;
use std::io::{BufRead, BufReader, IoSliceMut, Read};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;

use anyhow::{anyhow, bail, Context};
use nix::sys::socket::{
    recvmsg, socketpair, AddressFamily, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};
use tracing::{info, warn};

/// The helper's name, looked up in `PATH` (`MONFS_FUSERMOUNT` names another,
/// e.g. for a private installation of fuse3).
pub fn helper() -> String {
    std::env::var("MONFS_FUSERMOUNT").unwrap_or_else(|_| "fusermount3".to_string())
}

/// Whether `/etc/fuse.conf` lets users mount with `allow_other`: a line
/// that is exactly `user_allow_other` (surrounding blanks aside), as the
/// helper reads it.
pub fn user_allow_other() -> bool {
    user_allow_other_in(&std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default())
}

fn user_allow_other_in(conf: &str) -> bool {
    conf.lines().any(|l| l.trim() == "user_allow_other")
}

/// Major and minor of `/dev/fuse` (the misc device 10:229).
const FUSE_DEV: (u64, u64) = (10, 229);

/// Mount at `mountpoint` through the helper with the comma-separated
/// `options` (which should include `auto_unmount`); the open `/dev/fuse`.
pub fn mount(mountpoint: &Path, options: &str) -> anyhow::Result<File> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .context("socketpair for fusermount3")?;
    let their_fd: RawFd = theirs.as_raw_fd();
    // The helper's stderr: a socket rather than a pipe, so that the daemon
    // holds no pipe that could be mistaken for its caller's.
    let (err_ours, err_theirs) = stream_pair()?;
    let helper = helper();
    let mut cmd = Command::new(&helper);
    cmd.arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", their_fd.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(err_theirs))
        // Its own process group: a Ctrl-C meant for the daemon's terminal
        // must not kill the helper that unmounts after the daemon.
        .process_group(0);
    // SAFETY: only fcntl, which is async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The helper's end, and only it, survives the exec.
            if libc::fcntl(their_fd, libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {helper} (install fuse3) to mount as a user"))?;
    drop(theirs);
    drop(cmd);
    let received = receive_fd(&ours);
    let stderr = File::from(err_ours);
    let dev = match received {
        Ok(Some(fd)) => File::from(fd),
        Ok(None) | Err(_) => {
            // The helper failed (and said why on stderr) or broke the
            // protocol: collect its words and its status.
            let mut said = String::new();
            let _ = (&stderr).take(64 * 1024).read_to_string(&mut said);
            let status = child.wait();
            let why = match received {
                Err(e) => format!(" ({e})"),
                Ok(_) => String::new(),
            };
            bail!(
                "{helper} did not mount {}{why}: {}{}",
                mountpoint.display(),
                said.trim(),
                status.map(|s| format!(" [{s}]")).unwrap_or_default()
            );
        }
    };
    check_fuse_device(&dev)?;
    // The helper stays until our end closes; its later words (the
    // unmount) go to the log, and its exit status is collected so that it
    // leaves no zombie.
    let pid = child.id();
    std::thread::Builder::new()
        .name("fusermount3".into())
        .spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                warn!(helper = pid, "{line}");
            }
            let _ = child.wait();
        })
        .context("spawn the fusermount3 watcher")?;
    spawn_guard(mountpoint, &helper);
    info!(helper = pid, "mounted through fusermount3 (auto_unmount)");
    // Kept open (close-on-exec) until the process ends: closing it is what
    // tells the helper to unmount.
    let _ = ours.into_raw_fd();
    Ok(dev)
}

/// The guard's stdin (a socket): closing it without a word (our death)
/// makes it unmount.
static GUARD: Mutex<Option<File>> = Mutex::new(None);

/// A connected pair of Unix stream sockets, both close-on-exec.
fn stream_pair() -> anyhow::Result<(OwnedFd, OwnedFd)> {
    socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .context("socketpair")
}

/// Start the unmount guard for `mountpoint` (see the module's comment). A
/// guard that cannot start is logged; fusermount3's own auto_unmount remains.
fn spawn_guard(mountpoint: &Path, helper: &str) {
    let script = r#"read -r word; [ "$word" = unmounted ] || exec "$0" -u -z -- "$1""#;
    let (ours, theirs) = match stream_pair() {
        Ok(p) => p,
        Err(e) => {
            warn!("cannot start the unmount guard: {e:#}");
            return;
        }
    };
    let guard = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(helper)
        .arg(mountpoint)
        .stdin(Stdio::from(theirs))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    match guard {
        Ok(mut g) => {
            if let Ok(mut slot) = GUARD.lock() {
                *slot = Some(File::from(ours));
            }
            // Reap it once it is done (after our own unmount).
            let _ = std::thread::Builder::new()
                .name("unmount-guard".into())
                .spawn(move || g.wait());
        }
        Err(e) => warn!("cannot start the unmount guard (sh): {e}"),
    }
}

/// Tell the guard that we unmounted ourselves, so that it does nothing.
pub fn disarm_guard() {
    use std::io::Write;
    if let Some(mut g) = GUARD.lock().ok().and_then(|mut s| s.take()) {
        let _ = g.write_all(b"unmounted\n");
    }
}

/// Receive one descriptor sent over `sock` with `SCM_RIGHTS`. `Ok(None)` on
/// end of file (the helper exited without sending). Extra descriptors, if
/// any came, are closed.
fn receive_fd(sock: &OwnedFd) -> anyhow::Result<Option<OwnedFd>> {
    let mut byte = [0u8; 1];
    let mut cmsg = nix::cmsg_space!([RawFd; 4]);
    let msg = loop {
        let mut iov = [IoSliceMut::new(&mut byte)];
        match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(anyhow!("recvmsg: {e}")),
            Ok(m) => {
                let mut fds = Vec::new();
                for c in m.cmsgs().map_err(|e| anyhow!("control message: {e}"))? {
                    if let ControlMessageOwned::ScmRights(v) = c {
                        // SAFETY: the kernel just installed these descriptors
                        // for us; nothing else owns them.
                        fds.extend(v.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
                    }
                }
                let truncated = m.flags.contains(MsgFlags::MSG_CTRUNC);
                break (m.bytes, fds, truncated);
            }
        }
    };
    let (bytes, mut fds, truncated) = msg;
    if bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    if truncated || fds.len() != 1 {
        bail!("expected one descriptor, got {}", fds.len());
    }
    Ok(fds.pop())
}

/// Refuse anything but the FUSE device: the descriptor will be read and
/// written as one.
fn check_fuse_device(dev: &File) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = dev.metadata().context("fstat of the received descriptor")?;
    let rdev = m.rdev();
    let (major, minor) = (libc::major(rdev) as u64, libc::minor(rdev) as u64);
    if !m.file_type().is_char_device() || (major, minor) != FUSE_DEV {
        bail!("fusermount3 sent a descriptor that is not /dev/fuse ({major}:{minor})");
    }
    Ok(())
}

/// Unmount `mountpoint` through the helper (`-u`, lazily with `-z`);
/// the helper's complaint on failure.
pub fn unmount(mountpoint: &Path, lazy: bool) -> Result<(), super::error::UnmountError> {
    let helper = helper();
    let mut cmd = Command::new(&helper);
    cmd.arg(if lazy { "-uz" } else { "-u" })
        .arg("--")
        .arg(mountpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(super::error::UnmountError::Helper {
            helper,
            message: String::from_utf8_lossy(&o.stderr).trim().to_string(),
        }),
        Err(source) => Err(super::error::UnmountError::Spawn { helper, source }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_conf_needs_the_option_on_a_line_of_its_own() {
        assert!(!user_allow_other_in("#user_allow_other\n"));
        assert!(!user_allow_other_in("user_allow_others\n"));
        assert!(!user_allow_other_in("mount_max = 1000\n"));
        assert!(user_allow_other_in(
            "# x\n  user_allow_other \nmount_max = 9\n"
        ));
    }
}
