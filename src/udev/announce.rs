//! The announcer of `monfs run`: each uevent of the simulated topology goes
//! to the command's network namespace as the kernel and udev send it. The
//! kernel-format message is handed to the kernel's own uevent socket of the
//! namespace (`uevent_net_rcv_skb`, Linux 4.18+: a sender with CAP_SYS_ADMIN
//! over the namespace's owner), which broadcasts it on group 1 from port id
//! 0 with its `SEQNUM` appended, as for a device of its own. Like udevd, the
//! announcer hears that broadcast, writes the database entry under the
//! namespace's `/run/udev`, and only then sends the udev-format message on
//! group 2.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::usbcore::uevent::{Uevent, UeventQueue};

const NETLINK_KOBJECT_UEVENT: i32 = 15;
/// The kernel's uevent broadcast group, and udev's.
const GROUP_KERNEL: u32 = 1;
const GROUP_UDEV: u32 = 2;
/// `UEVENT_BUFFER_SIZE`.
const BUFFER: usize = 2048;

fn netlink_socket(groups: u32) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) returns a new descriptor or -1.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            NETLINK_KOBJECT_UEVENT,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is the new descriptor.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let addr = sockaddr(0, groups);
    // SAFETY: bind(2) with a sockaddr_nl of its size.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

fn sockaddr(pid: u32, groups: u32) -> libc::sockaddr_nl {
    // SAFETY: sockaddr_nl is plain data; all zeros is valid.
    let mut a: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    a.nl_family = libc::AF_NETLINK as u16;
    a.nl_pid = pid;
    a.nl_groups = groups;
    a
}

fn send_to(fd: &OwnedFd, msg: &[u8], pid: u32, groups: u32) -> io::Result<()> {
    let a = sockaddr(pid, groups);
    // SAFETY: sendto(2) of `msg` to a sockaddr_nl of its size.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            msg.as_ptr().cast(),
            msg.len(),
            0,
            &a as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One message from `fd` within `timeout`: its bytes and the sender's
/// port id.
fn recv(fd: &OwnedFd, timeout: Duration) -> Option<(Vec<u8>, u32)> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: poll(2) on one pollfd.
    if unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) } <= 0 {
        return None;
    }
    let mut buf = vec![0u8; BUFFER + 64];
    let mut a = sockaddr(0, 0);
    let mut alen = std::mem::size_of::<libc::sockaddr_nl>() as u32;
    // SAFETY: recvfrom(2) into `buf` and a sockaddr_nl of its size.
    let n = unsafe {
        libc::recvfrom(
            fd.as_raw_fd(),
            buf.as_mut_ptr().cast(),
            buf.len(),
            libc::MSG_DONTWAIT,
            &mut a as *mut libc::sockaddr_nl as *mut libc::sockaddr,
            &mut alen,
        )
    };
    if n < 0 {
        return None;
    }
    buf.truncate(n as usize);
    Some((buf, a.nl_pid))
}

/// The sockets of the namespace it was made in, and where its udev
/// database is.
pub struct Announcer {
    /// Sends to the kernel (port id 0) and, multicast, to udev's group.
    out: OwnedFd,
    /// Hears the kernel's group, as udevd does.
    kernel: OwnedFd,
    run_udev: PathBuf,
    /// The hardware database udev's `hwdb` builtin would read.
    hwdb: Option<super::hwdb::Hwdb>,
    /// The `control` socket, held for the daemon's life.
    _control: Option<std::os::unix::net::UnixListener>,
    /// Where class devices' nodes come from (the mount's `dev/`) and go
    /// (a `/dev` of the namespace's own), when the announcer places them,
    /// and who makes them character devices, if anyone does.
    nodes: Option<Nodes>,
}

struct Nodes {
    from: PathBuf,
    to: PathBuf,
    chardevs: Option<Arc<dyn crate::base::vfs::CharDevices>>,
}

impl Announcer {
    /// Sockets in this process's network namespace, and `run_udev` (the
    /// namespace's `/run/udev`) made ready: `data/` and the `control`
    /// socket whose presence tells libudev that udev runs.
    pub fn new(run_udev: &Path) -> io::Result<Announcer> {
        let out = netlink_socket(0)?;
        let kernel = netlink_socket(GROUP_KERNEL)?;
        std::fs::create_dir_all(run_udev.join("data"))?;
        let control = run_udev.join("control");
        // Listening, never accepting: libudev's "is udev running" holds;
        // udevadm's `control` requests get no answer (no udevd to ask).
        let control = if control.exists() {
            None
        } else {
            Some(std::os::unix::net::UnixListener::bind(&control)?)
        };
        Ok(Announcer {
            out,
            kernel,
            run_udev: run_udev.to_path_buf(),
            hwdb: super::hwdb::Hwdb::open_default(),
            _control: control,
            nodes: None,
        })
    }

    /// Put each class device's node (`DEVNAME` of a device not of the
    /// `usb` subsystem, whose nodes are the mount's `dev/bus/usb`) into
    /// `to` before its `add` goes out, and take it away before its
    /// `remove`, as devtmpfs does: a character device of its `MAJOR` and
    /// `MINOR` where `chardevs` makes it one, else the mount's file under
    /// `from` bound there. `to` must be a directory of this mount
    /// namespace's own.
    pub fn place_nodes(
        &mut self,
        from: PathBuf,
        to: PathBuf,
        chardevs: Option<Arc<dyn crate::base::vfs::CharDevices>>,
    ) {
        self.nodes = Some(Nodes { from, to, chardevs });
    }

    /// devtmpfs's part of event `ev`: its node made or taken away.
    fn node(&self, ev: &Uevent) -> io::Result<()> {
        let Some(Nodes { from, to, chardevs }) = &self.nodes else {
            return Ok(());
        };
        let Some(name) = ev.get("DEVNAME") else {
            return Ok(());
        };
        if ev.get("SUBSYSTEM") == Some("usb") || !safe_name(name) {
            return Ok(());
        }
        let dst = to.join(name);
        match ev.action {
            crate::usbcore::uevent::Action::Add => {
                if let Some(dir) = dst.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                let number = ev
                    .get("MAJOR")
                    .zip(ev.get("MINOR"))
                    .and_then(|(ma, mi)| Some((ma.parse::<u32>().ok()?, mi.parse::<u32>().ok()?)));
                if let (Some(c), Some((ma, mi))) = (chardevs, number) {
                    if c.ensure(ma, mi) {
                        use nix::sys::stat::{makedev, mknod, Mode, SFlag};
                        return mknod(
                            &dst,
                            SFlag::S_IFCHR,
                            Mode::from_bits_truncate(0o600),
                            makedev(ma.into(), mi.into()),
                        )
                        .map_err(io::Error::from);
                    }
                }
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&dst)?;
                nix::mount::mount(
                    Some(&from.join(name)),
                    &dst,
                    None::<&str>,
                    nix::mount::MsFlags::MS_BIND,
                    None::<&str>,
                )
                .map_err(io::Error::from)
            }
            crate::usbcore::uevent::Action::Remove => {
                let _ = nix::mount::umount2(&dst, nix::mount::MntFlags::MNT_DETACH);
                std::fs::remove_file(&dst)
            }
            _ => Ok(()),
        }
    }

    /// udev's links of a device node (`/dev/input/by-id/...`), relative
    /// to the node as udev makes them: made for an event that has them,
    /// those of the database's entry (`S:`) taken away at its `remove`.
    fn links(&self, ev: &Uevent, props: &[(String, String)], db: &str) {
        let Some(Nodes { to, .. }) = &self.nodes else {
            return;
        };
        let Some(node) = ev.get("DEVNAME").filter(|n| safe_name(n)) else {
            return;
        };
        let node = node.trim_start_matches("/dev/");
        if super::removes_entry(ev) {
            for l in db.lines().filter_map(|l| l.strip_prefix("S:")) {
                if safe_name(l) {
                    let _ = std::fs::remove_file(to.join(l));
                }
            }
            return;
        }
        for l in super::devlinks(props).into_iter().filter(|l| safe_name(l)) {
            let dst = to.join(l);
            let target = relative(l, node);
            let made = dst
                .parent()
                .map_or(Ok(()), std::fs::create_dir_all)
                .and_then(|_| {
                    let _ = std::fs::remove_file(&dst);
                    std::os::unix::fs::symlink(&target, &dst)
                });
            if let Err(e) = made {
                tracing::warn!("uevent {}: link {l}: {e}", ev.devpath);
            }
        }
    }

    /// Announce one event: the kernel's broadcast, the database, udev's.
    pub fn announce(&self, ev: &Uevent) -> io::Result<()> {
        if let Err(e) = self.node(ev) {
            tracing::warn!(
                "uevent {} {}: node {}: {e}",
                ev.action.name(),
                ev.devpath,
                ev.get("DEVNAME").unwrap_or("")
            );
        }
        let payload = ev.kernel_payload();
        let mut msg = Vec::with_capacity(16 + payload.len());
        let len = (16 + payload.len()) as u32;
        msg.extend_from_slice(&len.to_ne_bytes());
        // Any type past the control messages, NLM_F_REQUEST: the kernel
        // handles only requests (netlink_rcv_skb).
        msg.extend_from_slice(&0x10u16.to_ne_bytes());
        msg.extend_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&payload);
        send_to(&self.out, &msg, 0, 0)?;
        // The kernel's broadcast of it, with the SEQNUM it appended.
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut seqnum = None;
        while seqnum.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let Some((m, pid)) = recv(&self.kernel, left) else {
                break;
            };
            if pid == 0 && m.starts_with(&payload) {
                let tail = String::from_utf8_lossy(&m[payload.len()..]).into_owned();
                seqnum = tail
                    .trim_end_matches('\0')
                    .strip_prefix("SEQNUM=")
                    .and_then(|s| s.parse::<u64>().ok());
            }
        }
        let Some(seqnum) = seqnum else {
            return Err(io::Error::other(
                "the kernel did not broadcast the uevent (no SEQNUM heard)",
            ));
        };
        let db = self.run_udev.join("data").join(super::db_name(ev));
        // udev's USEC_INITIALIZED: CLOCK_MONOTONIC in microseconds when the
        // device was first seen, kept in its database entry (`I:`).
        let old = std::fs::read_to_string(&db).unwrap_or_default();
        let usec = old
            .lines()
            .find_map(|l| l.strip_prefix("I:")?.parse::<u64>().ok())
            .unwrap_or_else(|| {
                nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).map_or(0, |t| {
                    t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1000
                })
            });
        let props = super::all_properties(ev, seqnum, usec, self.hwdb.as_ref(), &old);
        // The tags' index (`/run/udev/tags/TAG/ID`), which libudev's
        // enumerations by tag read.
        let tagged = |t: &str| self.run_udev.join("tags").join(t).join(super::db_name(ev));
        self.links(ev, &props, &old);
        if super::removes_entry(ev) {
            let _ = std::fs::remove_file(&db);
            for t in super::tag_list(&props) {
                let _ = std::fs::remove_file(tagged(t));
            }
        } else {
            let tmp = db.with_extension("tmp");
            std::fs::write(&tmp, super::db_text(&props, usec, ev))?;
            std::fs::rename(&tmp, &db)?;
            for t in super::tag_list(&props) {
                let f = tagged(t);
                if let Some(d) = f.parent() {
                    std::fs::create_dir_all(d)?;
                }
                std::fs::write(f, b"")?;
            }
        }
        send_to(&self.out, &super::udev_message(&props), 0, GROUP_UDEV)
    }

    /// Announce `queue`'s events for the daemon's life, on a thread of its
    /// own; a failure is a log line, and the next event is tried.
    pub fn spawn(self, queue: Arc<UeventQueue>) -> io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("uevents".into())
            .spawn(move || {
                let mut dropped = 0;
                loop {
                    let Some(ev) = queue.next(Duration::from_secs(1)) else {
                        continue;
                    };
                    if let Err(e) = self.announce(&ev) {
                        tracing::warn!("uevent {} {}: {e}", ev.action.name(), ev.devpath);
                    }
                    queue.done();
                    let d = queue.dropped();
                    if d != dropped {
                        tracing::warn!(
                            "uevents: {} dropped, the announcer fell behind",
                            d - dropped
                        );
                        dropped = d;
                    }
                }
            })
    }
}

/// Whether `name` is a path below `/dev` that stays there: relative, no
/// empty, `.` or `..` component.
fn safe_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// The path of `node` from the directory of `link` (both below `/dev`), as
/// udev writes its links: `input/by-id/x` to `input/event3` is
/// `../event3`.
fn relative(link: &str, node: &str) -> String {
    let dir: Vec<&str> = link.split('/').collect();
    let dir = &dir[..dir.len() - 1];
    let to: Vec<&str> = node.split('/').collect();
    let common = dir.iter().zip(&to).take_while(|(a, b)| a == b).count();
    let mut out = "../".repeat(dir.len() - common);
    out.push_str(&to[common..].join("/"));
    out
}

#[cfg(test)]
mod link_tests {
    #[test]
    fn links_point_at_their_node_as_udev_writes_them() {
        assert_eq!(
            super::relative("input/by-id/x", "input/event3"),
            "../event3"
        );
        assert_eq!(
            super::relative("serial/by-id/x", "ttyUSB0"),
            "../../ttyUSB0"
        );
        assert_eq!(super::relative("x", "hidraw0"), "hidraw0");
    }
}
