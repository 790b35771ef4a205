//! Pid lists: `set_event_pid` and `set_event_notrace_pid` (the events'
//! pid filters, `kernel/trace/trace_events.c`) and what `set_ftrace_pid`
//! takes, written as `trace_pid_write()` in `kernel/trace/trace.c` reads
//! them into a `trace_pid_list` (`kernel/trace/pid_list.c`).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_WRITE};
use crate::tracefs::facility::Arr;
use crate::tracefs::instances::array::TraceArray;

/// Pids a pid list can hold lie below this (the kernel's pid list
/// `MAX_PID`, 2^30).
const PID_LIST_MAX: i32 = 1 << 30;

/// Add the pids of a write to `set`, as `trace_pid_write()` parses them;
/// returns the pids added.
pub(crate) fn write_pids(
    set: &Mutex<std::collections::BTreeSet<u32>>,
    data: &[u8],
) -> SysResult<Vec<u32>> {
    let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
    let mut pids = Vec::new();
    for tok in s
        .trim_end_matches('\0')
        .split(|c: char| c.is_ascii_whitespace())
    {
        if tok.is_empty() {
            continue;
        }
        // As trace_pid_write: kstrtoul base 0 (EINVAL), the value taken
        // as a pid_t, and a pid the list cannot hold (2^30 and up, or
        // negative) is -1 (EPERM).
        let v = crate::tracefs::parse::kstrtoul_base0(tok).map_err(|_| Errno::EINVAL)?;
        let pid = v as i32;
        if !(0..PID_LIST_MAX).contains(&pid) {
            return Err(Errno::EPERM);
        }
        pids.push(pid as u32);
    }
    set.lock_ok().extend(pids.iter().copied());
    Ok(pids)
}

/// A pid list file (`set_event_pid`, `set_event_notrace_pid`): one pid a
/// line; writes add, `O_TRUNC` clears. `pick` gives the array's set and
/// its "not empty" flag that the recording path reads.
pub(crate) fn pid_list_file(
    x: &Arr,
    tree: &Tree,
    path: &str,
    pick: fn(&TraceArray) -> (&RwLock<BTreeSet<u32>>, &AtomicBool),
) {
    let (tr, tw, tc) = (x.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        path,
        Ctl::new(MODE_WRITE)
            .rs(move || {
                pick(&tr)
                    .0
                    .read_ok()
                    .iter()
                    .map(|p| format!("{p}\n"))
                    .collect()
            })
            .w(move |data, _| {
                tw.expand();
                let m = Mutex::new(Default::default());
                let pids = write_pids(&m, data)?;
                let (set, flag) = pick(&tw);
                let mut set = set.write_ok();
                set.extend(pids);
                flag.store(!set.is_empty(), Ordering::Relaxed);
                Ok(data.len() as u32)
            })
            .t(move || {
                let (set, flag) = pick(&tc);
                set.write_ok().clear();
                flag.store(false, Ordering::Relaxed);
            }),
    );
}
