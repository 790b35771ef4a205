//! Mounting: opening /dev/fuse, the mount(2) call and its options,
//! unmounting, and recovering a mount whose daemon died. As root monfs
//! mounts itself; any other user mounts through `fusermount3` (see
//! `fusermount.rs`).

use super::error::{CpuListError, UnmountError};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::statfs::statfs;
use tracing::{info, warn};

use crate::base::vfs::Tree;

use super::fusermount;
use super::state::{CacheQueue, Session, Wake};

/// Mount options.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Let other users in (modes are then enforced with default_permissions).
    pub allow_other: bool,
    /// Number of threads reading requests.
    pub threads: usize,
    /// Allow shared mappings of streaming files (usbmon's ring). Without it
    /// `mmap` fails with ENODEV, as on a CUSE device.
    pub mmap: bool,
    /// Try FUSE over io_uring (see `uring.rs`): requests come through it if
    /// INIT negotiates it and the rings' registration is taken, through
    /// /dev/fuse otherwise; [`Session::transport`] tells which.
    pub io_uring: bool,
    /// Keep the threads that read /dev/fuse (and the service thread) on
    /// these CPUs. A request whose caller runs on one of them is then served
    /// without waking another CPU, which on VMs where that is expensive makes
    /// a round trip several times cheaper (io_uring does this per CPU by
    /// design). None: any CPU.
    pub cpus: Option<CpuList>,
}

/// CPUs by number, as `--cpus` names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuList(pub Vec<usize>);

/// Parse a CPU list as `taskset -c` takes it (`0`, `0,2`, `0-3,6`), keeping
/// only CPUs this process may run on. The message of an error says why.
pub fn parse_cpu_list(s: &str) -> Result<CpuList, CpuListError> {
    let allowed = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0))
        .map_err(CpuListError::Affinity)?;
    let mut cpus = Vec::new();
    for part in s.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let num = |x: &str| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| CpuListError::NotCpu(part.to_string()))
        };
        let (a, b) = (num(a)?, num(b)?);
        if a > b {
            return Err(CpuListError::Backwards(part.to_string()));
        }
        for c in a..=b {
            // is_set refuses a CPU beyond the set's size: also not ours.
            if !allowed.is_set(c).unwrap_or(false) {
                return Err(CpuListError::NotOurs(c));
            }
            if !cpus.contains(&c) {
                cpus.push(c);
            }
        }
    }
    Ok(CpuList(cpus))
}

impl CpuList {
    /// The set, for `sched_setaffinity`.
    pub fn set(&self) -> nix::sched::CpuSet {
        let mut set = nix::sched::CpuSet::new();
        for &c in &self.0 {
            let _ = set.set(c);
        }
        set
    }

    /// The CPUs of `allowed` not in this list, if there are any: where the
    /// rest of the daemon runs, so that the listed CPUs are left to the
    /// request threads and their client.
    pub fn others(&self, allowed: &nix::sched::CpuSet) -> Option<nix::sched::CpuSet> {
        let mut rest = nix::sched::CpuSet::new();
        let mut any = false;
        for c in 0..nix::sched::CpuSet::count() {
            if allowed.is_set(c).unwrap_or(false) && !self.0.contains(&c) {
                let _ = rest.set(c);
                any = true;
            }
        }
        any.then_some(rest)
    }
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            threads: 2,
            mmap: true,
            io_uring: false,
            cpus: None,
        }
    }
}

/// Whether this process mounts by itself (effective uid 0) rather than
/// through `fusermount3`.
pub fn mounts_as_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Detach a stale FUSE mount (daemon gone, `ENOTCONN`) left at `mountpoint`.
/// `statfs` always reaches the daemon (a `stat` may be answered from cached
/// attributes), so it tells a dead mount reliably. A user's goes through
/// `fusermount3 -u -z`.
pub fn recover_stale_mount(mountpoint: &Path) {
    if statfs(mountpoint).err() == Some(nix::errno::Errno::ENOTCONN) {
        warn!(mountpoint = %mountpoint.display(), "recovering a stale mount left by a killed daemon");
        if mounts_as_root() {
            let _ = umount2(mountpoint, MntFlags::MNT_DETACH);
        } else if let Err(e) = fusermount::unmount(mountpoint, true) {
            warn!("{e}");
        }
    }
}

/// The device number of the topmost FUSE mount at `mountpoint` (resolved)
/// in `mountinfo` (the text of `/proc/self/mountinfo`). Read from there
/// rather than by `stat`, which would be a request to this very daemon: a
/// thread waiting on its own mount cannot be killed once the request is
/// out, so a daemon killed at that moment could never exit.
fn mount_dev(mountinfo: &str, mountpoint: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let want = mountpoint.as_os_str().as_bytes();
    mountinfo
        .lines()
        .rev()
        .filter(|l| {
            l.split_once(" - ")
                .and_then(|(_, rest)| rest.split(' ').next())
                .is_some_and(|t| t == "fuse" || t.starts_with("fuse."))
        })
        .find_map(|l| {
            let mut w = l.split(' ');
            let dev = w.nth(2)?;
            let point = w.nth(1)?;
            (unescape_octal(point) == want).then_some(dev)
        })
        .and_then(|dev| {
            let (maj, min) = dev.split_once(':')?;
            Some(libc::makedev(maj.parse().ok()?, min.parse().ok()?))
        })
}

/// A mountinfo path with its `\NNN` octal escapes (space, tab, newline,
/// backslash) undone.
fn unescape_octal(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let esc = b
            .get(i + 1..i + 4)
            .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match esc {
            Some(d) => {
                out.push(d.iter().fold(0u8, |v, c| v.wrapping_mul(8) + (c - b'0')));
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    out
}

/// Unmount `mountpoint` (lazily if busy): umount2(2) as root, `fusermount3
/// -u` (then `-u -z`) otherwise. The reason when neither worked.
pub fn unmount(mountpoint: &Path) -> Result<(), UnmountError> {
    if mounts_as_root() {
        if umount2(mountpoint, MntFlags::empty()).is_ok() {
            return Ok(());
        }
        umount2(mountpoint, MntFlags::MNT_DETACH).map_err(UnmountError::Umount)
    } else {
        fusermount::disarm_guard();
        fusermount::unmount(mountpoint, false).or_else(|_| fusermount::unmount(mountpoint, true))
    }
}

impl Session {
    /// Open /dev/fuse and mount the tree at `mountpoint`.
    pub fn mount(
        tree: Arc<Tree>,
        mountpoint: &Path,
        opts: &MountOptions,
    ) -> anyhow::Result<Arc<Session>> {
        recover_stale_mount(mountpoint);
        let meta = std::fs::metadata(mountpoint)
            .with_context(|| format!("mountpoint {}", mountpoint.display()))?;
        if !meta.is_dir() {
            bail!("mountpoint {} is not a directory", mountpoint.display());
        }
        // Resolved now: once mounted, resolving it would ask this daemon.
        let resolved = std::fs::canonicalize(mountpoint)
            .with_context(|| format!("mountpoint {}", mountpoint.display()))?;
        let dev = if mounts_as_root() {
            mount_as_root(&tree, mountpoint, opts)?
        } else {
            mount_as_user(mountpoint, opts)?
        };
        let s = Arc::new(Session::new(
            dev,
            tree,
            mountpoint.to_path_buf(),
            opts.mmap,
            opts.io_uring,
            None,
        ));
        s.tree
            .set_kernel_cache(Arc::new(CacheQueue(s.wake_tx.clone())));
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        match mount_dev(&mounts, &resolved) {
            Some(dev) => s.dev_id.store(dev, Ordering::Relaxed),
            None => warn!(
                mountpoint = %resolved.display(),
                "the new mount is not in /proc/self/mountinfo; O_NONBLOCK set by fcntl after \
                 open will not be seen on ioctls"
            ),
        }
        Ok(s)
    }

    /// The mountpoint.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Stop serving (CUSE sessions have no mount to take away): the request
    /// threads see the device closed.
    pub fn shutdown(&self) {
        self.destroyed.store(true, Ordering::SeqCst);
        let _ = self.wake_tx.send(Wake::Stop);
    }
}

/// Open /dev/fuse and mount(2) it at `mountpoint`.
fn mount_as_root(
    tree: &Tree,
    mountpoint: &Path,
    opts: &MountOptions,
) -> anyhow::Result<std::fs::File> {
    let dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
        .context("cannot open /dev/fuse (is the fuse module loaded?)")?;
    let mut data = format!(
        "fd={},rootmode=40755,user_id={},group_id={},default_permissions",
        dev.as_raw_fd(),
        tree.uid,
        tree.gid
    );
    if opts.allow_other {
        data.push_str(",allow_other");
    }
    mount(
        Some("monfs"),
        mountpoint,
        Some("fuse.monfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .with_context(|| format!("mount on {}", mountpoint.display()))?;
    Ok(dev)
}

/// Mount through `fusermount3`, which sets the owner (our real uid and gid),
/// nosuid and nodev itself. `allow_other` only where /etc/fuse.conf allows
/// it; otherwise the mount is private, which is logged once here.
fn mount_as_user(mountpoint: &Path, opts: &MountOptions) -> anyhow::Result<std::fs::File> {
    let mut options = String::from("fsname=monfs,subtype=monfs,default_permissions,auto_unmount");
    if opts.allow_other {
        if fusermount::user_allow_other() {
            options.push_str(",allow_other");
        } else {
            info!(
                "private mount: only this user's processes may use it \
                 (allow_other needs user_allow_other in /etc/fuse.conf)"
            );
        }
    }
    fusermount::mount(mountpoint, &options)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_as_taskset_takes_them() {
        let mine = nix::sched::sched_getaffinity(nix::unistd::Pid::from_raw(0)).unwrap();
        let first = (0..nix::sched::CpuSet::count())
            .find(|&c| mine.is_set(c).unwrap())
            .unwrap();
        assert_eq!(parse_cpu_list(&first.to_string()), Ok(CpuList(vec![first])));
        let twice = format!("{first},{first}-{first}");
        assert_eq!(parse_cpu_list(&twice), Ok(CpuList(vec![first])));
        assert!(CpuList(vec![first]).set().is_set(first).unwrap());
        for bad in ["", "x", "1-0", "0,", "-1", "99999"] {
            assert!(parse_cpu_list(bad).is_err(), "{bad:?}");
        }
        let n = nix::sched::CpuSet::count();
        assert!(parse_cpu_list(&n.to_string())
            .unwrap_err()
            .to_string()
            .contains("may run on"));
    }

    #[test]
    fn the_rest_of_the_daemon_runs_on_the_cpus_not_listed() {
        let mut allowed = nix::sched::CpuSet::new();
        for c in [0, 1, 3] {
            allowed.set(c).unwrap();
        }
        let rest = CpuList(vec![0]).others(&allowed).unwrap();
        let on: Vec<usize> = (0..8).filter(|&c| rest.is_set(c).unwrap()).collect();
        assert_eq!(on, [1, 3]);
        // Every allowed CPU listed: nowhere else to go.
        assert!(CpuList(vec![0, 1, 3]).others(&allowed).is_none());
    }

    #[test]
    fn the_mount_device_comes_from_the_topmost_fuse_line_with_escapes_undone() {
        let info = "\
22 1 0:21 / / rw - ext4 /dev/vda1 rw
40 22 0:50 / /tmp/a\\040b rw,nosuid - fuse.monfs monfs rw
41 22 0:51 / /tmp/c rw - tmpfs tmpfs rw
42 40 0:52 / /tmp/a\\040b rw,nosuid - fuse monfs rw
";
        assert_eq!(
            mount_dev(info, Path::new("/tmp/a b")),
            Some(libc::makedev(0, 52))
        );
        assert_eq!(mount_dev(info, Path::new("/tmp/c")), None, "not FUSE");
        assert_eq!(mount_dev(info, Path::new("/tmp/a")), None);
        assert_eq!(unescape_octal("x\\134y\\12"), b"x\\y\\12");
    }
}
