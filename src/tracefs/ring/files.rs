//! The files about a trace array's buffers (`kernel/trace/trace.c`):
//! `buffer_size_kb`, `buffer_total_size_kb`, `buffer_percent`,
//! `buffer_subbuf_size_kb`, `free_buffer`, `trace_clock`, and the page and entry header
//! formats under `events/` (`ring_buffer_print_page_header()` and
//! `ring_buffer_print_entry_header()` of `kernel/trace/ring_buffer.c`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::errno::Errno;
use crate::base::sync::LockExt;
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::facility::Arr;
use crate::tracefs::instances::array::TraceArray;
use crate::tracefs::parse::ranged;
use crate::tracefs::ring::DEFAULT_BUF_BYTES;

/// `events/header_page` for sub-buffers of `capacity` usable bytes.
fn header_page(capacity: usize) -> String {
    format!(
        "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
\tfield: char data;\toffset:16;\tsize:{capacity};\tsigned:0;\n"
    )
}

const HEADER_EVENT: &str = "# compressed entry header\n\
\ttype_len    :    5 bits\n\
\ttime_delta  :   27 bits\n\
\tarray       :   32 bits\n\
\n\
\tpadding     : type == 29\n\
\ttime_extend : type == 30\n\
\ttime_stamp : type == 31\n\
\tdata max type_len  == 28\n";

impl Arr {
    /// `buffer_size_kb` (`X` when the CPUs' sizes differ) or
    /// `buffer_total_size_kb`, with the size they will expand to while
    /// nothing has been set up yet.
    pub(crate) fn buffer_kb(&self, total: bool) -> String {
        let expanded = self.expanded.load(Ordering::Relaxed);
        let sizes: Vec<usize> = self
            .bufs
            .iter()
            .map(|b| TraceArray::kb_of(&b.lock_ok()))
            .collect();
        let kb = if total {
            sizes.iter().sum()
        } else if sizes.iter().all(|&k| k == sizes[0]) {
            sizes[0]
        } else {
            return "X\n".into();
        };
        if expanded {
            format!("{kb}\n")
        } else {
            let mul = if total { self.bufs.len() } else { 1 };
            format!("{kb} (expanded: {})\n", DEFAULT_BUF_BYTES / 1024 * mul)
        }
    }
}

/// `buffer_size_kb` and `buffer_total_size_kb` of `x`.
pub(crate) fn size_files(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/buffer_size_kb"),
        Ctl::new(MODE_WRITE)
            .rs(move || tr.buffer_kb(false))
            .w(move |data, _| tw.set_buffer_kb(None, data)),
    );
    let tr = x.clone();
    add_ctl(
        tree,
        &format!("{b}/buffer_total_size_kb"),
        Ctl::new(MODE_READ).rs(move || tr.buffer_kb(true)),
    );
}

/// `buffer_percent`, `buffer_subbuf_size_kb` and `free_buffer` of `x`.
pub(crate) fn tuning_files(x: &Arr, tree: &Tree) {
    let b = x.base();
    let percent = Arc::new(std::sync::atomic::AtomicU64::new(50));
    let (pr, pw) = (percent.clone(), percent);
    add_ctl(
        tree,
        &format!("{b}/buffer_percent"),
        Ctl::new(MODE_WRITE)
            .rs(move || format!("{}\n", pr.load(Ordering::Relaxed)))
            .w(move |data, _| {
                pw.store(ranged(data, 0, 100)?, Ordering::Relaxed);
                Ok(data.len() as u32)
            }),
    );
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/buffer_subbuf_size_kb"),
        Ctl::new(MODE_WRITE)
            .rs(move || format!("{}\n", tr.subbuf_kb()))
            .w(move |data, _| tw.set_subbuf_kb(data)),
    );
    // Writing frees the buffer's pages (down to the minimum) as closing
    // the kernel's does.
    let tw = x.clone();
    add_ctl(
        tree,
        &format!("{b}/free_buffer"),
        Ctl::new(0o200).w(move |data, _| {
            for b in &tw.bufs {
                let mut b = b.lock_ok();
                b.clear();
                b.resize(2);
            }
            tw.resize_spare(None, 0);
            // Smaller: this cannot be refused.
            let _ = tw.charge_current();
            Ok(data.len() as u32)
        }),
    );
}

/// `events/header_page` and `events/header_event` of `x`.
pub(crate) fn header_files(x: &Arr, tree: &Tree) {
    let b = x.base();
    let tr = x.clone();
    add_ctl(
        tree,
        &format!("{b}/events/header_page"),
        Ctl::new(MODE_READ).rs(move || header_page(tr.subbuf_capacity())),
    );
    add_ctl(
        tree,
        &format!("{b}/events/header_event"),
        Ctl::new(MODE_READ).rs(|| HEADER_EVENT.into()),
    );
}

/// `trace_clock` of `x`.
pub(crate) fn trace_clock_file(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/trace_clock"),
        Ctl::new(MODE_WRITE)
            .rs(move || tr.trace_clock.text())
            .w(move |data, _| {
                let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
                let name = s.trim_end_matches('\0').trim();
                tw.trace_clock.select(name).ok_or(Errno::EINVAL)?;
                // The kernel empties the buffers on every clock write, the
                // snapshot buffer too.
                tw.clear_all();
                for mut b in tw.lock_spare() {
                    b.clear();
                }
                Ok(data.len() as u32)
            }),
    );
}
