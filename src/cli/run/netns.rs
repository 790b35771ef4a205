//! The network namespace of `monfs run`'s command: uevents belong to a
//! network namespace, so the command gets one of its own, where monfs's
//! announcer (`crate::udev::announce`) sends the simulated topology's and
//! the host's hardware sends nothing. The kernel broadcasts a host device's
//! uevent to every network namespace owned by the initial user namespace
//! (`uevent_net_broadcast_untagged`), so the namespace is made by a child
//! in a user namespace of its own, and joined: root keeps every capability
//! over it and stays in the initial user namespace. Without root, the user
//! namespace `monfs run` made already owns it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use nix::sched::{setns, unshare, CloneFlags};

use super::{io, sys, RunError};

/// Put this process in a new network namespace that host uevents do not
/// reach, with its loopback up.
pub(super) fn enter_netns(rootless: bool) -> Result<(), RunError> {
    if rootless {
        unshare(CloneFlags::CLONE_NEWNET).map_err(sys("cannot make a network namespace"))?;
    } else {
        join_child_netns()?;
    }
    loopback_up()
}

/// A child makes a user and a network namespace; this process joins the
/// network namespace, then lets the child go.
fn join_child_netns() -> Result<(), RunError> {
    let (ready_r, ready_w) = nix::unistd::pipe().map_err(sys("pipe"))?;
    let (done_r, done_w) = nix::unistd::pipe().map_err(sys("pipe"))?;
    // SAFETY: the child calls only unshare, write, read and _exit.
    match unsafe { nix::unistd::fork() }.map_err(sys("fork"))? {
        nix::unistd::ForkResult::Child => {
            drop(ready_r);
            drop(done_w);
            let ok = unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWNET).is_ok();
            let _ = nix::unistd::write(&ready_w, &[u8::from(ok)]);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(&done_r, &mut b);
            // SAFETY: _exit in a forked child.
            unsafe { libc::_exit(0) }
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(ready_w);
            drop(done_r);
            let mut b = [0u8; 1];
            let n = nix::unistd::read(&ready_r, &mut b).unwrap_or(0);
            let joined = if n == 1 && b[0] == 1 {
                std::fs::File::open(format!("/proc/{child}/ns/net"))
                    .map_err(io("open the child's network namespace"))
                    .and_then(|f| {
                        setns(&f, CloneFlags::CLONE_NEWNET)
                            .map_err(sys("join the new network namespace"))
                    })
            } else {
                Err(RunError::Io {
                    what: "make a network namespace".into(),
                    err: std::io::Error::other("the helper could not unshare"),
                })
            };
            drop(done_w);
            let _ = nix::sys::wait::waitpid(child, None);
            joined
        }
    }
}

/// `ip link set lo up`.
fn loopback_up() -> Result<(), RunError> {
    // SAFETY: socket(2) returns a new descriptor or -1.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(RunError::Io {
            what: "socket".into(),
            err: std::io::Error::last_os_error(),
        });
    }
    // SAFETY: fd is the new descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ifreq is plain data; zeros are valid.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    // SAFETY: SIOCGIFFLAGS / SIOCSIFFLAGS with an ifreq naming lo.
    let r = unsafe {
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            -1
        } else {
            ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as i16;
            libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr)
        }
    };
    if r < 0 {
        return Err(RunError::Io {
            what: "bring the loopback up".into(),
            err: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The command's `/run/udev`: a tmpfs of monfs's over the host's (made
/// where there is none, as root), so that the command sees the simulated
/// devices' udev database and not the host's. None: no place for it
/// (without root and without a /run/udev to cover).
pub(super) fn private_run_udev(rootless: bool) -> Result<Option<&'static Path>, RunError> {
    let dir = Path::new("/run/udev");
    if !dir.is_dir() {
        if rootless {
            return Ok(None);
        }
        std::fs::create_dir_all(dir).map_err(io("mkdir /run/udev"))?;
    }
    nix::mount::mount(
        Some("tmpfs"),
        dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID | nix::mount::MsFlags::MS_NODEV,
        Some("mode=755,size=4m"),
    )
    .map_err(sys("tmpfs on /run/udev"))?;
    Ok(Some(dir))
}
