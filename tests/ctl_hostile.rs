//! The control socket against hostile or careless clients, and the daemonized
//! mount's manners (issue 14), through the real mount.

mod common;

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Mount;

const QUIET: &str = "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n";

/// A temp dir anyone may traverse (unlike tempfile's 0700 ones).
fn open_dir() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    d
}

fn ctl_as(user: Option<u32>, socket: &Path, cmd: &str) -> (bool, String) {
    common::ctl_socket(user, socket, &[cmd])
}

fn socket_of(m: &Mount) -> PathBuf {
    PathBuf::from(m.sh_ok("cat monfs/socket").trim())
}

/// Everything a connection gets until the daemon closes it (or `wait` passes).
fn read_all(s: &mut UnixStream, wait: Duration) -> String {
    s.set_read_timeout(Some(wait)).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn wait_gone(p: &Path) {
    let deadline = Instant::now() + common::HANG;
    while p.symlink_metadata().is_ok() {
        assert!(Instant::now() < deadline, "{} still there", p.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_default_socket_dir_is_private_and_another_user_cannot_reach_it() {
    if common::root_only() {
        return;
    }
    // An old version left it 0755: the next mount fixes that.
    let _ = std::fs::set_permissions("/run/monfs", std::fs::Permissions::from_mode(0o755));
    let m = Mount::with_config(QUIET);
    let sock = socket_of(&m);
    assert!(sock.starts_with("/run/monfs"), "{}", sock.display());
    let dir = std::fs::symlink_metadata("/run/monfs").unwrap();
    assert!(dir.is_dir());
    assert_eq!(dir.mode() & 0o7777, 0o700, "/run/monfs mode");
    assert_eq!(dir.uid(), 0);
    assert_eq!(
        std::fs::metadata(&sock).unwrap().mode() & 0o777,
        0o600,
        "socket mode"
    );
    let (ok, out) = ctl_as(Some(65534), &sock, "help");
    assert!(!ok, "nobody got in: {out}");
    assert!(out.contains("Permission denied"), "{out}");
    let (ok, out) = ctl_as(None, &sock, "help");
    assert!(ok && out.starts_with("ok "), "{out}");
}

#[test]
fn another_user_is_refused_even_where_the_socket_is_reachable() {
    if common::root_only() {
        return;
    }
    let dir = open_dir();
    let sock = dir.path().join("ctl.sock");
    let m = Mount::start(Some(QUIET), &["--ctl-socket", sock.to_str().unwrap()]);
    assert_eq!(std::fs::metadata(&sock).unwrap().mode() & 0o777, 0o600);
    // The file mode keeps nobody out...
    let (ok, out) = ctl_as(Some(65534), &sock, "help");
    assert!(!ok, "{out}");
    assert!(out.contains("Permission denied"), "{out}");
    // ...and so does the peer check, where the mode would not.
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, out) = ctl_as(Some(65534), &sock, "pause 1");
    assert!(!ok, "{out}");
    assert_eq!(out, "error: permission denied\n");
    assert!(
        m.log_text()
            .contains("control connection refused: permission denied"),
        "no log line:\n{}",
        m.log_text()
    );
    assert!(
        !m.log_text().contains("command=\"pause 1\""),
        "nobody's command ran"
    );
    let (ok, out) = ctl_as(None, &sock, "help");
    assert!(ok && out.starts_with("ok "), "{out}");
}

#[test]
fn a_huge_line_is_refused_and_the_daemon_keeps_serving() {
    let mut m = Mount::with_config(QUIET);
    let sock = socket_of(&m);
    let mut s = UnixStream::connect(&sock).unwrap();
    // The daemon stops reading and closes: the write may fail (EPIPE).
    let _ = s.write_all(&vec![b'a'; 1 << 20]);
    let out = read_all(&mut s, common::HANG);
    assert_eq!(out, "error: line too long\n");
    // Also when the long line does end in a newline, in one write.
    let mut s = UnixStream::connect(&sock).unwrap();
    let mut long = vec![b'x'; monfs::control::MAX_LINE + 1];
    long.push(b'\n');
    let _ = s.write_all(&long);
    assert_eq!(read_all(&mut s, common::HANG), "error: line too long\n");
    // A line of exactly the limit is an (unknown) command.
    let mut s = UnixStream::connect(&sock).unwrap();
    let mut max = vec![b'y'; monfs::control::MAX_LINE];
    max.push(b'\n');
    s.write_all(&max).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let out = read_all(&mut s, common::HANG);
    assert!(out.starts_with("error: unknown command"), "{out}");
    assert!(m.alive());
    let (ok, out) = ctl_as(None, &sock, "help");
    assert!(ok && out.starts_with("ok "), "{out}");
}

/// Issue 37, finding 10: idle connections cannot lock `monfs ctl` out. Past
/// the limit a new connection closes the one idle longest (which is told
/// so), so every one of 50 clients is served, and `monfs ctl` at once too.
#[test]
fn idle_connections_never_lock_ctl_out() {
    let m = Mount::with_config(QUIET);
    let sock = socket_of(&m);
    let limit = monfs::control::MAX_CONNECTIONS;
    let mut conns: Vec<UnixStream> = Vec::new();
    // Each connection asks for help and reads its one line, then stays
    // open and idle. Nothing here depends on how long the daemon takes.
    for _ in 0..50 {
        let mut c = UnixStream::connect(&sock).unwrap();
        c.write_all(b"help\n").unwrap();
        c.set_read_timeout(Some(common::HANG)).unwrap();
        let line = read_line(&mut c);
        assert!(line.starts_with("ok "), "unexpected answer {line:?}");
        conns.push(c);
    }
    // The first 34 were closed for newer ones, in order, and were told;
    // the last 16 are still open.
    for c in &mut conns[..50 - limit] {
        assert_eq!(read_line(c), "error: idle connection closed for a new one");
        assert_eq!(read_line(c), "", "closed");
    }
    let (ok, out) = ctl_as(None, &sock, "help");
    assert!(ok && out.starts_with("ok "), "{out}");
    // That one took the place of the oldest of the 16.
    assert_eq!(
        read_line(&mut conns[50 - limit]),
        "error: idle connection closed for a new one"
    );
    for c in &mut conns[50 - limit + 1..] {
        c.write_all(b"help\n").unwrap();
        assert!(read_line(c).starts_with("ok "));
    }
    assert!(m.log_text().contains("idle longest closed for a new one"));
}

/// One answer's first line from `c` (without its newline; empty at the
/// end), past the continuation lines (indented) of an earlier answer.
fn read_line(c: &mut UnixStream) -> String {
    loop {
        let mut line = Vec::new();
        let mut b = [0u8; 1];
        while c.read(&mut b).unwrap_or(0) == 1 && b[0] != b'\n' {
            line.push(b[0]);
        }
        if !line.starts_with(b"   ") {
            return String::from_utf8_lossy(&line).into_owned();
        }
    }
}

/// `monfs mount --foreground` that must fail before mounting.
fn mount_must_fail(socket: &Path) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let o = Command::new("timeout")
        .arg("10")
        .arg(common::monfs_bin())
        .args(["mount", "--foreground"])
        .arg(&mnt)
        .arg("--ctl-socket")
        .arg(socket)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert!(!mnt.join("monfs").exists(), "it mounted");
    o
}

#[test]
fn ctl_socket_refuses_to_replace_anything_but_a_stale_socket() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("precious");
    std::fs::write(&file, "keep me\n").unwrap();
    let sub = dir.path().join("subdir");
    std::fs::create_dir(&sub).unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let live = dir.path().join("live.sock");
    let _listener = UnixListener::bind(&live).unwrap();
    for (p, why) in [
        (&file, "not a socket"),
        (&sub, "not a socket"),
        (&link, "not a socket"),
        (&live, "another daemon is listening"),
    ] {
        let o = mount_must_fail(p);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{}: {err}", p.display());
        assert!(err.contains(&p.display().to_string()), "{err}");
        assert!(err.contains(why), "{err}");
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");
    assert!(sub.is_dir());
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert!(
        UnixStream::connect(&live).is_ok(),
        "the live socket was replaced"
    );
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("stale.sock");
    drop(UnixListener::bind(&sock).unwrap());
    assert!(sock.exists());
    let m = Mount::start(Some(QUIET), &["--ctl-socket", sock.to_str().unwrap()]);
    let (ok, out) = ctl_as(None, &sock, "help");
    assert!(ok && out.starts_with("ok "), "{out}");
    assert!(m.log_text().contains("removing a stale control socket"));
}

#[test]
fn the_socket_is_removed_on_sigterm_and_on_unmount() {
    let mut m = Mount::with_config(QUIET);
    let sock = socket_of(&m);
    assert!(sock.exists());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(m.child.id() as i32, libc::SIGTERM) };
    m.child.wait().unwrap();
    wait_gone(&sock);

    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    let mut m = Mount::start(Some(QUIET), &["--ctl-socket", sock.to_str().unwrap()]);
    assert!(sock.exists());
    umount(&m.root());
    m.child.wait().unwrap();
    wait_gone(&sock);
}

/// Unmounts on drop, whatever happened.
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).output();
    }
}

/// The pid of the process serving a Unix socket.
fn server_pid(sock: &Path) -> i32 {
    let s = UnixStream::connect(sock).unwrap();
    monfs::control::peer_cred(&s).unwrap().1
}

#[test]
fn the_daemonized_mount_lets_go_of_the_callers_pipe() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let sock = dir.path().join("ctl.sock");
    let log = dir.path().join("daemon.log");
    let cfg = dir.path().join("config.yaml");
    std::fs::write(&cfg, QUIET).unwrap();
    let _guard = Unmount(mnt.clone());
    // Stdout, stderr and an extra descriptor all on the pipe to `cat`: the
    // pipeline ends only once the daemon holds none of them.
    let script = format!(
        "'{}' mount '{}' --config '{}' --ctl-socket '{}' --log-file '{}' 7>&1 2>&1 | cat",
        common::monfs_bin().display(),
        mnt.display(),
        cfg.display(),
        sock.display(),
        log.display()
    );
    let start = Instant::now();
    let o = Command::new("timeout")
        .args(["20", "bash", "-o", "pipefail", "-c", &script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{} after {:?}: {out}",
        o.status,
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_secs(10));
    assert!(out.contains("mounted"), "{out}");
    assert!(mnt.join("monfs/null").exists());
    assert_eq!(
        std::fs::read_to_string(mnt.join("monfs/log")).unwrap(),
        format!("{}\n", log.display())
    );
    let (ok, answer) = ctl_as(None, &sock, "help");
    assert!(ok, "{answer}");
    // The daemon's descriptors: /dev/null, the log, and its own.
    let pid = server_pid(&sock);
    let fd_dir = format!("/proc/{pid}/fd");
    let target = |fd: &str| std::fs::read_link(format!("{fd_dir}/{fd}")).unwrap();
    assert_eq!(target("0"), Path::new("/dev/null"));
    assert_eq!(target("1"), Path::new("/dev/null"));
    assert_eq!(target("2"), log);
    for e in std::fs::read_dir(&fd_dir).unwrap() {
        let t = std::fs::read_link(e.unwrap().path()).unwrap_or_default();
        assert!(
            !t.to_string_lossy().starts_with("pipe:"),
            "the daemon holds a pipe: {}",
            t.display()
        );
    }
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("control command=\"help\""), "{text}");
    assert!(
        !text.contains('\x1b'),
        "colour codes in the log file:\n{text}"
    );
    umount(&mnt);
    wait_gone(&sock);
    wait_gone(Path::new(&format!("/proc/{pid}")));
    assert!(std::fs::read_to_string(&log).unwrap().contains("unmounted"));
}

#[test]
fn a_daemonized_mount_that_fails_says_so_to_the_caller() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("ctl.sock");
    let o = Command::new("timeout")
        .arg("20")
        .arg(common::monfs_bin())
        .arg("mount")
        .arg(dir.path().join("no-such-dir"))
        .arg("--ctl-socket")
        .arg(&sock)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    assert!(!o.stderr.is_empty(), "no message for the caller");
    assert!(!sock.exists(), "the socket of a failed mount was left");
}

/// `monfs mount MNT --ctl-socket SOCK` in the background, with `journal`
/// as the journal's stream socket; returns once the mount is up (or failed).
fn daemonized_mount(mnt: &Path, sock: &Path, journal: &Path) -> Output {
    Command::new("timeout")
        .arg("20")
        .arg(common::monfs_bin())
        .arg("mount")
        .arg(mnt)
        .arg("--ctl-socket")
        .arg(sock)
        .env("MONFS_JOURNAL_SOCKET", journal)
        .output()
        .unwrap()
}

/// Unmount `mnt`. Another test thread forking a child can hold a copy of
/// this thread's close-on-exec descriptors for a moment, which makes the
/// mount busy; that passes, so a busy mount is tried again.
fn umount(mnt: &Path) {
    let deadline = Instant::now() + common::HANG;
    loop {
        let o = Command::new("umount").arg(mnt).output().unwrap();
        if o.status.success() {
            return;
        }
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("target is busy") && Instant::now() < deadline,
            "{err}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_daemon_logs_next_to_its_socket_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let sock = dir.path().join("ctl.sock");
    let _guard = Unmount(mnt.clone());
    // No journal, even on a machine that runs one.
    let o = daemonized_mount(&mnt, &sock, Path::new("/nonexistent"));
    assert!(o.status.success(), "{o:?}");
    let log = dir.path().join("ctl.log");
    assert_eq!(
        std::fs::read_to_string(mnt.join("monfs/log")).unwrap(),
        format!("{}\n", log.display())
    );
    assert_eq!(std::fs::metadata(&log).unwrap().mode() & 0o777, 0o600);
    let pid = server_pid(&sock);
    umount(&mnt);
    wait_gone(Path::new(&format!("/proc/{pid}")));
    assert!(std::fs::read_to_string(&log).unwrap().contains("unmounted"));
}

/// With a journal running (here a stand-in listening where journald's
/// stream socket would be), the background daemon logs there: the
/// journald stream header first, then one line per message.
#[test]
fn the_daemon_logs_to_the_journal_when_one_is_running() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let sock = dir.path().join("ctl.sock");
    let journal = dir.path().join("journal.stdout");
    let listener = UnixListener::bind(&journal).unwrap();
    let _guard = Unmount(mnt.clone());
    let o = daemonized_mount(&mnt, &sock, &journal);
    assert!(o.status.success(), "{o:?}");
    let (mut stream, _) = listener.accept().unwrap();
    assert_eq!(
        std::fs::read_to_string(mnt.join("monfs/log")).unwrap(),
        "journal (journalctl -t monfs)\n"
    );
    assert!(!dir.path().join("ctl.log").exists(), "a log file too");
    let (ok, out) = ctl_as(None, &sock, "help");
    assert!(ok, "{out}");
    let pid = server_pid(&sock);
    umount(&mnt);
    wait_gone(Path::new(&format!("/proc/{pid}")));
    // The daemon is gone, so the stream has ended.
    let text = read_all(&mut stream, common::HANG);
    assert!(text.starts_with("monfs\n\n6\n0\n0\n0\n0\n"), "{text}");
    assert!(text.contains("control command=\"help\""), "{text}");
    assert!(text.contains("unmounted"), "{text}");
    assert!(
        !text.contains('\x1b'),
        "colour codes in the journal:\n{text}"
    );
}
