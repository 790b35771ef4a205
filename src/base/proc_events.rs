//! The kernel's process events (the proc connector, netlink `CN_PROC`):
//! fork, exec and exit, as they happen, for every process on the machine.
//!
//! user_events needs them to do what the kernel does from inside: copy a
//! producer's enable bits to a forked child, and drop them when a process
//! execs or exits. The connector needs `CAP_NET_ADMIN` in the initial
//! namespaces; where it cannot be had, [`ProcEvents::listen`] fails and the
//! caller falls back to polling for exits (forks are then not followed).
//!
//! Layout (include/uapi/linux/netlink.h, connector.h, cn_proc.h): each
//! datagram is a `nlmsghdr` (16 bytes), a `cn_msg` (20 bytes: idx, val, seq,
//! ack, len, flags) and a `proc_event`: `what` (u32), `cpu` (u32),
//! `timestamp_ns` (u64, CLOCK_MONOTONIC), then the event's data.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::sync::Mutex;
use std::time::Duration;

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{bind, recv, send, setsockopt, sockopt, MsgFlags, NetlinkAddr};

use crate::base::sync::LockExt;

/// One process event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcEvent {
    /// `child_pid` (a process when it equals `child_tgid`, else a thread) was
    /// cloned by a thread of `parent_tgid`.
    Fork {
        /// The thread that forked.
        parent_pid: u32,
        /// The parent's thread group.
        parent_tgid: u32,
        /// The new task.
        child_pid: u32,
        /// The new task's thread group.
        child_tgid: u32,
        /// When, in CLOCK_MONOTONIC nanoseconds.
        ts_ns: u64,
        /// The CPU it happened on.
        cpu: u32,
    },
    /// Thread `pid` of `tgid` replaced its image.
    Exec {
        /// The thread.
        pid: u32,
        /// Its thread group.
        tgid: u32,
        /// The CPU it happened on.
        cpu: u32,
    },
    /// Thread `pid` of `tgid` exited (its address space is released by then).
    Exit {
        /// The thread.
        pid: u32,
        /// Its thread group.
        tgid: u32,
        /// The CPU it happened on.
        cpu: u32,
    },
}

const NETLINK_CONNECTOR: i32 = 11;
const CN_IDX_PROC: u32 = 1;
const CN_VAL_PROC: u32 = 1;
const PROC_CN_MCAST_LISTEN: u32 = 1;
const NLMSG_DONE: u16 = 3;
const NLMSG_HDRLEN: usize = 16;
const CN_MSG_LEN: usize = 20;
const PROC_EVENT_FORK: u32 = 0x0000_0001;
const PROC_EVENT_EXEC: u32 = 0x0000_0002;
const PROC_EVENT_EXIT: u32 = 0x8000_0000;

/// Decode the events in one datagram.
pub fn parse(buf: &[u8]) -> Vec<ProcEvent> {
    let u32_at = |b: &[u8], o: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(b.get(o..o + 4)?.try_into().ok()?))
    };
    let mut out = Vec::new();
    let mut off = 0;
    while off + NLMSG_HDRLEN <= buf.len() {
        let Some(len) = u32_at(buf, off).map(|l| l as usize) else {
            break;
        };
        if len < NLMSG_HDRLEN || off + len > buf.len() {
            break;
        }
        let msg = &buf[off + NLMSG_HDRLEN..off + len];
        off += (len + 3) & !3;
        if u32_at(msg, 0) != Some(CN_IDX_PROC) || u32_at(msg, 4) != Some(CN_VAL_PROC) {
            continue;
        }
        let ev = &msg[CN_MSG_LEN.min(msg.len())..];
        let (Some(what), Some(cpu), Some(d0), Some(d1)) =
            (u32_at(ev, 0), u32_at(ev, 4), u32_at(ev, 16), u32_at(ev, 20))
        else {
            continue;
        };
        let ts_ns = ev
            .get(8..16)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap()))
            .unwrap_or(0);
        match what {
            PROC_EVENT_FORK => {
                let (Some(child_pid), Some(child_tgid)) = (u32_at(ev, 24), u32_at(ev, 28)) else {
                    continue;
                };
                out.push(ProcEvent::Fork {
                    parent_pid: d0,
                    parent_tgid: d1,
                    child_pid,
                    child_tgid,
                    ts_ns,
                    cpu,
                });
            }
            PROC_EVENT_EXEC => out.push(ProcEvent::Exec {
                pid: d0,
                tgid: d1,
                cpu,
            }),
            PROC_EVENT_EXIT => out.push(ProcEvent::Exit {
                pid: d0,
                tgid: d1,
                cpu,
            }),
            _ => {}
        }
    }
    out
}

/// A subscription to the process events.
pub struct ProcEvents {
    fd: OwnedFd,
    /// Serializes receiving and handling, so that [`ProcEvents::drain`] on
    /// another thread handles every event the kernel had sent by then, in
    /// order, before it returns.
    turn: Mutex<()>,
}

impl ProcEvents {
    /// Subscribe. Fails without `CAP_NET_ADMIN` or without the connector.
    pub fn listen() -> io::Result<ProcEvents> {
        // The kernel ignores the subscription of a task outside the initial
        // pid and user namespaces (cn_proc_mcast_ctl), and its events carry
        // initial-namespace pids: say so instead of waiting for nothing.
        let status = std::fs::read_to_string("/proc/self/status")?;
        let nested = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .is_some_and(|v| v.split_whitespace().count() > 1);
        let uid_map = std::fs::read_to_string("/proc/self/uid_map").unwrap_or_default();
        let userns = uid_map.split_whitespace().collect::<Vec<_>>() != ["0", "0", "4294967295"];
        if nested || userns {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "outside the initial pid and user namespaces the kernel sends no process events",
            ));
        }
        // nix has no NETLINK_CONNECTOR protocol: the socket itself is made
        // with libc, the rest through nix.
        // SAFETY: socket() takes integers only.
        let raw = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_DGRAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                NETLINK_CONNECTOR,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        bind(fd.as_raw_fd(), &NetlinkAddr::new(0, CN_IDX_PROC))?;
        // A burst of forks must not overflow the queue: 4 MiB (root only;
        // the ordinary limit applies otherwise).
        let _ = setsockopt(&fd, sockopt::RcvBufForce, &(4 << 20));
        let mut msg = Vec::with_capacity(NLMSG_HDRLEN + CN_MSG_LEN + 4);
        let total = (NLMSG_HDRLEN + CN_MSG_LEN + 4) as u32;
        msg.extend_from_slice(&total.to_ne_bytes());
        msg.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&0u32.to_ne_bytes());
        msg.extend_from_slice(&std::process::id().to_ne_bytes());
        for v in [CN_IDX_PROC, CN_VAL_PROC, 0, 0] {
            msg.extend_from_slice(&v.to_ne_bytes());
        }
        msg.extend_from_slice(&4u16.to_ne_bytes());
        msg.extend_from_slice(&0u16.to_ne_bytes());
        msg.extend_from_slice(&PROC_CN_MCAST_LISTEN.to_ne_bytes());
        send(fd.as_raw_fd(), &msg, MsgFlags::empty())?;
        Ok(ProcEvents {
            fd,
            turn: Mutex::new(()),
        })
    }

    /// Receive and handle every queued event (non-blocking). An overflowed
    /// queue (ENOBUFS) is reported to `lost`: events were dropped.
    fn pump(&self, handle: &mut dyn FnMut(ProcEvent), lost: &mut dyn FnMut()) {
        let mut buf = [0u8; 8192];
        loop {
            let n = match recv(self.fd.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
                Ok(0) => return,
                Ok(n) => n,
                Err(Errno::ENOBUFS) => {
                    lost();
                    continue;
                }
                Err(Errno::EINTR) => continue,
                Err(_) => return,
            };
            for ev in parse(&buf[..n]) {
                handle(ev);
            }
        }
    }

    /// Handle, on this thread, every event the kernel has sent so far.
    pub fn drain(&self, handle: &mut dyn FnMut(ProcEvent), lost: &mut dyn FnMut()) {
        let _turn = self.turn.lock_ok();
        self.pump(handle, lost);
    }

    /// Wait until events are queued (or `timeout` passes).
    pub fn wait(&self, timeout: Duration) {
        let ms = timeout.as_millis().min(u16::MAX as u128) as u16;
        let mut pfd = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut pfd, PollTimeout::from(ms));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagram(what: u32, data: &[u32]) -> Vec<u8> {
        let mut ev = Vec::new();
        ev.extend_from_slice(&what.to_ne_bytes());
        ev.extend_from_slice(&1u32.to_ne_bytes());
        ev.extend_from_slice(&77u64.to_ne_bytes());
        for d in data {
            ev.extend_from_slice(&d.to_ne_bytes());
        }
        let mut cn = Vec::new();
        for v in [CN_IDX_PROC, CN_VAL_PROC, 0, 0] {
            cn.extend_from_slice(&v.to_ne_bytes());
        }
        cn.extend_from_slice(&(ev.len() as u16).to_ne_bytes());
        cn.extend_from_slice(&0u16.to_ne_bytes());
        cn.extend_from_slice(&ev);
        let mut out = Vec::new();
        out.extend_from_slice(&((NLMSG_HDRLEN + cn.len()) as u32).to_ne_bytes());
        out.extend_from_slice(&NLMSG_DONE.to_ne_bytes());
        out.extend_from_slice(&[0; 10]);
        out.extend_from_slice(&cn);
        out
    }

    #[test]
    fn decodes_fork_exec_exit() {
        let f = datagram(PROC_EVENT_FORK, &[9, 10, 11, 11]);
        assert_eq!(
            parse(&f),
            vec![ProcEvent::Fork {
                parent_pid: 9,
                parent_tgid: 10,
                child_pid: 11,
                child_tgid: 11,
                ts_ns: 77,
                cpu: 1,
            }]
        );
        let e = datagram(PROC_EVENT_EXEC, &[12, 12]);
        assert_eq!(
            parse(&e),
            vec![ProcEvent::Exec {
                pid: 12,
                tgid: 12,
                cpu: 1
            }]
        );
        let x = datagram(PROC_EVENT_EXIT, &[13, 12, 0, 17, 1, 1]);
        assert_eq!(
            parse(&x),
            vec![ProcEvent::Exit {
                pid: 13,
                tgid: 12,
                cpu: 1
            }]
        );
        // Truncated or foreign messages decode to nothing.
        assert!(parse(&f[..30]).is_empty());
        assert!(parse(&datagram(0x10, &[1, 2])).is_empty());
    }

    #[test]
    fn sees_a_real_fork_and_exit() {
        let Ok(pe) = ProcEvents::listen() else {
            panic!("the proc connector is needed (run as root)");
        };
        let child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut child = child;
        child.wait().unwrap();
        let mut seen = Vec::new();
        for _ in 0..50 {
            pe.drain(&mut |e| seen.push(e), &mut || {});
            if seen
                .iter()
                .any(|e| matches!(e, ProcEvent::Exit { tgid, .. } if *tgid == pid))
            {
                break;
            }
            pe.wait(Duration::from_millis(100));
        }
        let me = std::process::id();
        assert!(seen.iter().any(|e| matches!(e,
            ProcEvent::Fork { parent_tgid, child_tgid, .. } if *parent_tgid == me && *child_tgid == pid)));
        assert!(seen
            .iter()
            .any(|e| matches!(e, ProcEvent::Exec { tgid, .. } if *tgid == pid)));
        assert!(seen
            .iter()
            .any(|e| matches!(e, ProcEvent::Exit { tgid, .. } if *tgid == pid)));
    }
}
