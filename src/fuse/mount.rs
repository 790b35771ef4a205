//! Mounting: opening /dev/fuse, the mount(2) call and its options,
//! unmounting, and recovering a mount whose daemon died.

use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use anyhow::{bail, Context};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sys::statfs::statfs;
use tracing::warn;

use crate::vfs::Tree;

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
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            allow_other: false,
            threads: 2,
            mmap: true,
        }
    }
}

/// Detach a stale FUSE mount (daemon gone, `ENOTCONN`) left at `mountpoint`.
/// `statfs` always reaches the daemon (a `stat` may be answered from cached
/// attributes), so it tells a dead mount reliably.
pub fn recover_stale_mount(mountpoint: &Path) {
    if statfs(mountpoint).err() == Some(nix::errno::Errno::ENOTCONN) {
        warn!(mountpoint = %mountpoint.display(), "recovering a stale mount left by a killed daemon");
        let _ = umount2(mountpoint, MntFlags::MNT_DETACH);
    }
}

/// Unmount `mountpoint` (lazily if busy).
pub fn unmount(mountpoint: &Path) {
    if umount2(mountpoint, MntFlags::empty()).is_err() {
        let _ = umount2(mountpoint, MntFlags::MNT_DETACH);
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
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse")
            .context("cannot open /dev/fuse (is the fuse module loaded and are you root?)")?;
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
        let s = Arc::new(Session::new(
            dev,
            tree,
            mountpoint.to_path_buf(),
            opts.mmap,
            None,
        ));
        s.tree
            .set_kernel_cache(Arc::new(CacheQueue(s.wake_tx.clone())));
        Ok(s)
    }

    /// Learn the mount's device number (call once the session serves requests).
    pub(super) fn learn_dev_id(&self) {
        use std::os::unix::fs::MetadataExt;
        if let Ok(m) = std::fs::metadata(&self.mountpoint) {
            self.dev_id.store(m.dev(), Ordering::Relaxed);
        }
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
