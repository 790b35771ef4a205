//! The namespace of `monfs run`: a private mount namespace (and a user
//! namespace without root), and monfs's files bound where the kernel's are
//! (`/sys/kernel/tracing`, `/dev/bus/usb`, `/sys/bus/usb`, ...).

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getegid, geteuid};

use super::{io, sys, RunError, TempFile};

/// A private mount namespace (and, without root, a user namespace in which
/// the caller is root).
pub(super) fn enter_namespace(rootless: bool) -> Result<(), RunError> {
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
pub(super) struct MountEntry {
    point: PathBuf,
    fstype: String,
}

/// The mounts of this namespace, in mountinfo's order.
pub(super) fn mounts() -> Vec<MountEntry> {
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

/// Whether the machine's `/dev` entry `name` is one monfs replaces:
/// usbmonN, monreader, bus/ (usbfs) and the class nodes of the simulated
/// devices (hidrawN, input/, ttyACMN, ttyUSBN), which the command must not reach on the
/// machine.
fn replaced_in_dev(name: &OsStr) -> bool {
    let n = name.as_bytes();
    n.starts_with(b"usbmon") || n == b"monreader" || n == b"bus" || class_node(n)
}

/// Whether `/dev` entry `n` is a class device's node (or directory of
/// them): the announcer puts these in place as their devices come.
fn class_node(n: &[u8]) -> bool {
    n.starts_with(b"hidraw")
        || n == b"input"
        || n.starts_with(b"ttyACM")
        || n.starts_with(b"ttyUSB")
}

/// Cover `/dev` with a tmpfs holding what the machine's has but the
/// entries monfs replaces ([`replaced_in_dev`]). Done before the daemon
/// starts, so that its announcer adds and removes the class nodes of
/// plugged devices here, as devtmpfs does, and never in the machine's
/// `/dev`; [`setup_paths`] then places monfs's own entries.
pub(super) fn private_dev() -> Result<(), RunError> {
    graft(
        Path::new("/dev"),
        &|n| replaced_in_dev(n) || n == "ptmx",
        &[],
    )?;
    pty_master();
    Ok(())
}

/// `/dev/ptmx` in the private `/dev`. The kernel finds the devpts of a
/// ptmx node at `pts` beside it in the node's own file system, so the
/// machine's node bound into the tmpfs finds none (open: ENOENT, and no
/// terminal program works). A node made in the tmpfs finds the devpts
/// bound at `/dev/pts`; where no node can be made (a user namespace), a
/// devpts of the namespace's own is mounted there, with `/dev/ptmx` its
/// `ptmx`, as containers have it.
fn pty_master() {
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let ptmx = Path::new("/dev/ptmx");
    if !Path::new("/dev/pts").is_dir() {
        return;
    }
    if mknod(
        ptmx,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(5, 2),
    )
    .is_ok()
    {
        // (the umask took bits off)
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(ptmx, std::fs::Permissions::from_mode(0o666));
        return;
    }
    let own = nix::mount::mount(
        Some("devpts"),
        "/dev/pts",
        Some("devpts"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NOEXEC,
        Some("newinstance,ptmxmode=0666,mode=0620"),
    );
    match own.and_then(|()| {
        std::os::unix::fs::symlink("pts/ptmx", ptmx)
            .map_err(|e| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))
    }) {
        Ok(()) => {}
        Err(e) => tracing::warn!("monfs run: /dev/ptmx: {e}: no pseudo-terminals inside"),
    }
}

/// Put monfs's files where the kernel's are, in this (private) namespace.
pub(super) fn setup_paths(mnt: &Path, rootless: bool) -> Result<(), RunError> {
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
    // /dev (made private by private_dev): monfs's usbmonN, monreader,
    // bus/ and class nodes. A class node the daemon placed already (it
    // announced the device before this) stays as it is.
    let mut empty_bus = true;
    if let Ok(rd) = std::fs::read_dir(mnt.join("dev")) {
        for e in rd.flatten() {
            empty_bus &= e.file_name() != "bus";
            let dst = Path::new("/dev").join(e.file_name());
            if e.file_name() == "input" {
                // A directory of class nodes: a real one here, which the
                // announcer adds nodes to and takes them from.
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(&dst)
                    .map_err(io(format!("mkdir {}", dst.display())))?;
                for n in std::fs::read_dir(e.path()).into_iter().flatten().flatten() {
                    let d = dst.join(n.file_name());
                    if d.symlink_metadata().is_err() {
                        place(&n.path(), &d)?;
                    }
                }
            } else if dst.symlink_metadata().is_err() {
                place(&e.path(), &dst)?;
            }
        }
    }
    if empty_bus {
        // No usbfs in this mount: an empty /dev/bus/usb, not the machine's.
        let _ = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create("/dev/bus/usb");
    }
    // /sys/bus/hid, /sys/class/hidraw, input and leds: the HID and input
    // cores', not the machine's; /sys/class/tty and /sys/bus/usb-serial:
    // the simulated serial ports only (what enumerates serial ports finds
    // those).
    for (parent, name) in [
        ("bus", "hid"),
        ("bus", "usb-serial"),
        ("class", "hidraw"),
        ("class", "input"),
        ("class", "leds"),
        ("class", "tty"),
    ] {
        let src = mnt.join("sys").join(parent).join(name);
        let parent = Path::new("/sys").join(parent);
        if !src.is_dir() || !parent.is_dir() {
            continue;
        }
        let host = parent.join(name);
        if host.is_dir() {
            bind(&src, &host)?;
        } else {
            graft(&parent, &|_| false, &[(OsString::from(name), src)])?;
        }
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
        // /sys/dev/char is monfs's: the simulated devices' numbers, as the
        // udev database under /run/udev is theirs.
        let chardev = mnt.join("sys/dev/char");
        if chardev.is_dir() && Path::new("/sys/dev").is_dir() {
            graft(
                Path::new("/sys/dev"),
                &|_| false,
                &[(OsString::from("char"), chardev)],
            )?;
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
