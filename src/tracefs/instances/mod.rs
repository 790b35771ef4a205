//! `instances/`: `mkdir` makes a trace array with its own buffers, events
//! state and files (the same set a kernel instance has); `rmdir` removes
//! it, EBUSY while any of its files is open, as the kernel's does.

pub(crate) mod files;

pub mod array;

use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::vfs::{Caller, DirOps, NodeKind, Tree};
use crate::tracefs::facility::Arr;
use crate::tracefs::facility::Tracing;

/// The most instances at once (each can hold a full set of buffers); past
/// it `mkdir` is ENOMEM, as the kernel's is when memory runs out.
pub const MAX_INSTANCES: usize = 64;

/// The `instances/` directory's handler.
pub(crate) struct Instances {
    t: Arc<Tracing>,
    tree: Arc<Tree>,
}

impl Instances {
    /// Add `tracing/instances/` and take its `mkdir` and `rmdir`.
    pub(crate) fn install(t: &Arc<Tracing>, tree: &Arc<Tree>) {
        tree.add("tracing/instances", NodeKind::Dir, 0o750);
        tree.set_dir_ops(
            "tracing/instances",
            Arc::new(Instances {
                t: t.clone(),
                tree: tree.clone(),
            }),
        );
    }
}

impl DirOps for Instances {
    fn mkdir(&self, name: &str, _caller: &Caller) -> SysResult<()> {
        if self.t.instance_count() >= MAX_INSTANCES {
            // A caller can repeat it at will: once a second (issue 37).
            static LOG: crate::base::budget::LogLimit = crate::base::budget::LogLimit::new();
            if let Some(suppressed) = LOG.allow() {
                tracing::warn!(
                    name,
                    suppressed,
                    "tracefs: mkdir instances/: {MAX_INSTANCES} instances exist"
                );
            }
            return Err(Errno::ENOMEM);
        }
        let a = self.t.new_instance(name)?;
        let tree = &self.tree;
        tree.add(&a.base(), NodeKind::Dir, 0o750);
        files::install_array(&Arr::new(&self.t, a), tree);
        Ok(())
    }

    fn rmdir(&self, name: &str, busy: bool, _caller: &Caller) -> SysResult<()> {
        if busy {
            return Err(Errno::EBUSY);
        }
        let a = self.t.remove_instance(name)?;
        self.tree.remove(&a.base());
        a.release_rings();
        Ok(())
    }
}
