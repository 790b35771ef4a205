//! The function tracer's filter files and the latency tracers' maximum, as
//! `kernel/trace/ftrace.c` (`set_ftrace_filter`, `set_ftrace_notrace`,
//! `available_filter_functions`) and `trace.c` (`tracing_max_latency`)
//! have them, on a kernel that has no function to trace: monfs runs no
//! kernel text, so `available_filter_functions` is empty and every word
//! written to a filter file names nothing.
//!
//! A filter write is split into words at white space, as the kernel's
//! `trace_get_user` splits it; each complete word is matched against the
//! traceable functions (`ftrace_process_regex`), and a word that matches
//! none is EINVAL. Here every word matches none: a write that completes a
//! word fails, and one that holds only white space, or ends in a word not
//! yet ended by white space (the kernel keeps it for the next write or the
//! close, and ignores what it makes of it at close), succeeds. The filters
//! so stay empty: `set_ftrace_filter` reads as the kernel's empty one does
//! (`#### all functions enabled ####`), `set_ftrace_notrace` reads empty.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::facility::Arr;
use crate::tracefs::instances::array::TraceArray;
use crate::tracefs::parse::kstrtoul_from_user;
use crate::tracefs::pid_list::write_pids;

/// What `set_ftrace_filter` reads while no function is filtered.
const ALL_ENABLED: &str = "#### all functions enabled ####\n";

/// A write to a function filter file: its length, or EINVAL when it ends
/// a word (a function name, glob, index or `func:command`), which can name
/// no function here.
fn filter_write(data: &[u8]) -> SysResult<u32> {
    // The kernel's isspace(), as trace_get_user uses it.
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0xa0);
    let ends_a_word = data
        .iter()
        .position(|b| !space(b))
        .is_some_and(|first| data[first..].iter().any(space));
    if ends_a_word {
        return Err(Errno::EINVAL);
    }
    Ok(data.len() as u32)
}

/// Add `set_ftrace_filter`, `set_ftrace_notrace` and `tracing_max_latency`
/// to the array `a` (the top level and every instance have them).
pub(crate) fn install(a: &Arc<TraceArray>, tree: &Tree) {
    let b = a.base();
    add_ctl(
        tree,
        &format!("{b}/set_ftrace_filter"),
        Ctl::new(MODE_WRITE)
            .rs(|| ALL_ENABLED.into())
            .w(|data, _| filter_write(data))
            .t(|| {}),
    );
    add_ctl(
        tree,
        &format!("{b}/set_ftrace_notrace"),
        Ctl::new(MODE_WRITE)
            .rs(String::new)
            .w(|data, _| filter_write(data))
            .t(|| {}),
    );
    // tracing_nsecs_write/read: microseconds in, kept in nanoseconds,
    // shown in microseconds (-1 for the "unset" value).
    let max = Arc::new(AtomicU64::new(0));
    let (mr, mw) = (max.clone(), max);
    add_ctl(
        tree,
        &format!("{b}/tracing_max_latency"),
        Ctl::new(MODE_WRITE)
            .rs(move || match mr.load(Ordering::Relaxed) {
                u64::MAX => "-1\n".into(),
                ns => format!("{}\n", ns / 1000),
            })
            .w(move |data, _| {
                let us = kstrtoul_from_user(data)?;
                mw.store(us.wrapping_mul(1000), Ordering::Relaxed);
                Ok(data.len() as u32)
            }),
    );
}

/// `available_filter_functions` (the top level only): no function.
pub(crate) fn install_global(tree: &Tree) {
    add_ctl(
        tree,
        "tracing/available_filter_functions",
        Ctl::new(MODE_READ).rs(String::new),
    );
}

/// `set_ftrace_pid` of `x`: the pids the function tracer would trace,
/// `no pid` while there are none.
pub(crate) fn set_ftrace_pid(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw, tc) = (x.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/set_ftrace_pid"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                let p = tr.ftrace_pids.lock_ok();
                if p.is_empty() {
                    "no pid\n".into()
                } else {
                    p.iter().map(|p| format!("{p}\n")).collect()
                }
            })
            .w(move |data, _| write_pids(&tw.ftrace_pids, data).map(|_| data.len() as u32))
            .t(move || tc.ftrace_pids.lock_ok().clear()),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_fails_when_it_ends_a_word() {
        for ok in [&b""[..], b"\n", b"  \t", b"foo", b"  foo", b"\xa0"] {
            assert_eq!(filter_write(ok), Ok(ok.len() as u32), "{ok:?}");
        }
        for bad in [
            &b"foo\n"[..],
            b"schedule:stacktrace\n",
            b"* ",
            b"!x\n",
            b"a b",
            b"1\n",
        ] {
            assert_eq!(filter_write(bad), Err(Errno::EINVAL), "{bad:?}");
        }
    }
}
