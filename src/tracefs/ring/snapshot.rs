//! The snapshot buffer (the kernel's `max_buffer`, `CONFIG_TRACER_SNAPSHOT`)
//! and the `snapshot` file of every trace array, as Documentation/trace/
//! ftrace.rst ("Snapshot") and `kernel/trace/trace.c` describe them.
//!
//! A snapshot swaps each CPU's live buffer with its spare: the entries
//! recorded so far become the snapshot, and tracing goes on in the former
//! spare, whatever it held (a second `echo 1 > snapshot` brings the first
//! snapshot's entries back into `trace`). Writes to `snapshot`:
//!
//! | state \ write | `0`        | `1`             | anything else |
//! |---------------|------------|-----------------|---------------|
//! | not allocated | nothing    | allocate + swap | nothing       |
//! | allocated     | free       | swap            | clear         |
//!
//! Allocating makes the spare as large as the live buffer, with its
//! sub-buffer size; freeing shrinks it to 2 pages and empties it. Reading
//! `snapshot` shows the spare in `trace` format, or, while it is empty,
//! `# tracer: nop` and the kernel's help with `* Snapshot is allocated *` or
//! `* Snapshot is freed *`. `snapshot` triggers hold the buffer armed
//! (`TraceArray::arm_snapshot`): adding one allocates it.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_WRITE};
use crate::tracefs::instances::array::TraceArray;
use crate::tracefs::parse::kstrtoul_from_user;
use crate::tracefs::ring::{pages_for as ring_pages_for, CpuBuffer, BUF_PAGE_SIZE};

/// The help the `snapshot` file shows after its header while the snapshot
/// buffer is empty (the kernel's `print_snapshot_help` for the main file).
pub fn snapshot_help(allocated: bool) -> String {
    let state = if allocated {
        "#\n# * Snapshot is allocated *\n#\n"
    } else {
        "#\n# * Snapshot is freed *\n#\n"
    };
    format!(
        "{state}# Snapshot commands:\n\
# echo 0 > snapshot : Clears and frees snapshot buffer\n\
# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.\n\
#                      Takes a snapshot of the main buffer.\n\
# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)\n\
#                      (Doesn't have to be '2' works with any number that\n\
#                       is not a '0' or '1')\n"
    )
}

/// What taking a snapshot did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Taken {
    /// The buffers were swapped.
    Swapped,
    /// The snapshot buffer is not allocated: nothing was swapped (the
    /// kernel then writes `*** SNAPSHOT NOT ALLOCATED ***` into the trace
    /// and turns tracing off).
    NotAllocated,
}

impl TraceArray {
    /// Allocate the snapshot buffer if it is not (the kernel's
    /// `tracing_alloc_snapshot_instance`): each CPU's spare gets the live
    /// buffer's sub-buffer size and size, empty.
    /// ENOMEM (nothing allocated) when its pages do not fit in the memory
    /// budget.
    fn alloc_snapshot(&self) -> SysResult<()> {
        if self.snapshot_allocated() {
            return Ok(());
        }
        let live = self.lock_all();
        let mut spare = self.lock_spare();
        let total = self.rings_cost(
            live.iter().map(|b| b.shape()),
            live.iter()
                .map(|l| (ring_pages_for(l.size_bytes(), l.capacity()), l.capacity())),
        );
        self.charge_rings(total)?;
        for (s, l) in spare.iter_mut().zip(live.iter()) {
            let mut b = CpuBuffer::with_capacity(2, l.capacity());
            b.resize_bytes(l.size_bytes());
            **s = b;
        }
        self.snap_allocated.store(true, Ordering::SeqCst);
        Ok(())
    }

    /// Free the snapshot buffer: back to 2 empty default pages a CPU.
    fn free_snapshot(&self) {
        let mut spare = self.lock_spare();
        for s in spare.iter_mut() {
            **s = CpuBuffer::with_capacity(2, BUF_PAGE_SIZE);
        }
        self.snap_allocated.store(false, Ordering::SeqCst);
        drop(spare);
        // Smaller: this cannot be refused.
        let _ = self.charge_current();
    }

    /// Hold the snapshot buffer armed, allocating it (the kernel's
    /// `tracing_arm_snapshot`); EBUSY past `u32::MAX` holders.
    pub(crate) fn arm_snapshot(&self) -> SysResult<()> {
        let mut armed = self.snap_armed.lock_ok();
        self.arm_locked(&mut armed)
    }

    fn arm_locked(&self, armed: &mut u32) -> SysResult<()> {
        // tracing_arm_snapshot_locked: not while a buffer is mapped.
        if *armed == u32::MAX || self.any_mapped() {
            return Err(Errno::EBUSY);
        }
        self.alloc_snapshot()?;
        *armed += 1;
        Ok(())
    }

    /// Release one hold taken with [`TraceArray::arm_snapshot`]; the
    /// buffer stays allocated.
    pub(crate) fn disarm_snapshot(&self) {
        let mut armed = self.snap_armed.lock_ok();
        *armed = armed.saturating_sub(1);
    }

    /// Take a snapshot: swap every CPU's live buffer with its spare (the
    /// kernel's `update_max_tr`), when the spare is allocated.
    pub(crate) fn take_snapshot(&self) -> Taken {
        let mut live = self.lock_all();
        let mut spare = self.lock_spare();
        if !self.snapshot_allocated() {
            return Taken::NotAllocated;
        }
        for (l, s) in live.iter_mut().zip(spare.iter_mut()) {
            std::mem::swap(&mut **l, &mut **s);
        }
        drop(spare);
        drop(live);
        // Readers parked on the former spare recheck.
        self.wake();
        Taken::Swapped
    }

    /// A write to `snapshot` (see the module's table). The value is
    /// decimal (`kstrtoul` base 10: EINVAL otherwise); the buffers are set
    /// up first, as any tracing write does.
    pub(crate) fn write_snapshot(&self, data: &[u8]) -> SysResult<u32> {
        self.expand();
        let v = kstrtoul_from_user(data)?;
        let mut armed = self.snap_armed.lock_ok();
        match v {
            0 => {
                if self.snapshot_allocated() {
                    self.free_snapshot();
                }
            }
            1 => {
                if self.snapshot_allocated() {
                    // The spare takes the live buffer's size first, its
                    // pages charged first.
                    let live = self.lock_all();
                    let mut spare = self.lock_spare();
                    let total = self.rings_cost(
                        live.iter().map(|b| b.shape()),
                        spare.iter().zip(live.iter()).map(|(s, l)| {
                            (ring_pages_for(l.size_bytes(), s.capacity()), s.capacity())
                        }),
                    );
                    self.charge_rings(total)?;
                    for (s, l) in spare.iter_mut().zip(live.iter()) {
                        s.resize_bytes(l.size_bytes());
                    }
                }
                self.arm_locked(&mut armed)?;
                self.take_snapshot();
                *armed -= 1;
            }
            _ => {
                let mut spare = self.lock_spare();
                if self.snapshot_allocated() {
                    for s in spare.iter_mut() {
                        s.clear();
                    }
                }
            }
        }
        Ok(data.len() as u32)
    }

    /// The text of `snapshot`.
    pub fn snapshot_text(&self) -> String {
        let spare = self.lock_spare();
        let help = snapshot_help(self.snapshot_allocated());
        self.text_of(&spare, None, Some(&help))
    }
}

/// The `snapshot` file of array `a`.
pub(crate) fn install(a: &Arc<TraceArray>, tree: &Tree) {
    let (ar, aw) = (a.clone(), a.clone());
    add_ctl(
        tree,
        &format!("{}/snapshot", a.base()),
        Ctl::new(MODE_WRITE)
            .rs(move || ar.snapshot_text())
            .w(move |data, _| aw.write_snapshot(data)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracefs::events::{EventDef, FieldValue};

    fn put(a: &TraceArray, def: &Arc<EventDef>, n: i64) {
        let data = def.encode(1, &[FieldValue::Int(n)]);
        assert!(a.store(def.clone(), data, "t", 0, n as u64));
    }

    fn lines(text: &str) -> Vec<String> {
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.rsplit(' ').next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn swaps_frees_and_clears_as_the_table_says() {
        let def = Arc::new(
            EventDef::new(
                "t",
                "e",
                900,
                &[crate::tracefs::FieldSpec {
                    name: "n".into(),
                    ctype: "int".into(),
                }],
                Some("\"n=%d\", REC->n"),
            )
            .unwrap(),
        );
        let a = TraceArray::new(1, Some("x".into()), true);
        assert!(a.snapshot_text().contains("# * Snapshot is freed *"));
        // Not allocated: 0 and 2 do nothing; a trigger's snapshot neither.
        a.write_snapshot(b"2\n").unwrap();
        a.write_snapshot(b"0\n").unwrap();
        assert_eq!(a.take_snapshot(), Taken::NotAllocated);
        assert_eq!(a.write_snapshot(b"x"), Err(Errno::EINVAL));
        assert_eq!(a.write_snapshot(b"0x1"), Err(Errno::EINVAL));
        put(&a, &def, 1);
        put(&a, &def, 2);
        // 1: allocate and swap. The live buffer is the empty spare now.
        a.write_snapshot(b"1\n").unwrap();
        assert!(a.snapshot_allocated());
        assert_eq!(lines(&a.snapshot_text()), ["n=1", "n=2"]);
        assert!(a
            .snapshot_text()
            .starts_with("# tracer: nop\n#\n# entries-in-buffer/entries-written: 2/2"));
        assert_eq!(lines(&a.trace_text(None)), Vec::<String>::new());
        put(&a, &def, 3);
        // Swap again: the first snapshot comes back to the live buffer.
        a.write_snapshot(b"1").unwrap();
        assert_eq!(lines(&a.snapshot_text()), ["n=3"]);
        assert_eq!(lines(&a.trace_text(None)), ["n=1", "n=2"]);
        // Anything else clears the snapshot, which stays allocated.
        a.write_snapshot(b"7").unwrap();
        assert!(a.snapshot_allocated());
        assert_eq!(
            a.snapshot_text(),
            format!("# tracer: nop\n#\n{}", snapshot_help(true))
        );
        // 0 frees it; the live buffer keeps its entries.
        a.write_snapshot(b"0").unwrap();
        assert!(!a.snapshot_allocated());
        assert_eq!(lines(&a.trace_text(None)), ["n=1", "n=2"]);
        assert_eq!(a.spare[0].lock_ok().nr_pages(), 2);
        // Armed by a trigger: allocated, and it swaps.
        a.arm_snapshot().unwrap();
        assert!(a.snapshot_allocated());
        assert_eq!(a.take_snapshot(), Taken::Swapped);
        assert_eq!(lines(&a.snapshot_text()), ["n=1", "n=2"]);
        a.disarm_snapshot();
        assert!(a.snapshot_allocated());
    }
}
