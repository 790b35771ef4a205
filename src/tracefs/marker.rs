//! `trace_marker` and `trace_marker_raw`, which record the `ftrace` system's
//! `print` and `raw_data` events, and the `events/ftrace/` formats that
//! tools (trace-cmd, libtraceevent) read to decode them. Layouts, ids and
//! print formats are the kernel's, as this machine's tracefs shows them.

use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{Caller, NodeKind, Tree};
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::events::ftrace::{MARKER_MAX, MARKER_RAW_MAX};
use crate::tracefs::events::{EventDef, COMMON_SIZE};
use crate::tracefs::facility::Tracing;
use crate::tracefs::instances::array::TraceArray;
use crate::tracefs::options::OPT_MARKERS;

/// The common header of a marker entry: the writer's pid, preemption
/// disabled once (the kernel writes markers with preemption off, so its
/// lines show `...1.`).
fn header(data: &mut Vec<u8>, id: u16, pid: u32) {
    data.extend_from_slice(&id.to_le_bytes());
    data.extend_from_slice(&[0, 1]);
    data.extend_from_slice(&pid.to_le_bytes());
}

impl TraceArray {
    /// Whether a marker write may record: EINVAL with the `markers` option
    /// off, EBADF while the buffer is off (measured).
    fn marker_ok(&self) -> SysResult<()> {
        if !self.options.lock_ok()[OPT_MARKERS] {
            return Err(Errno::EINVAL);
        }
        if !self.tracing_on() {
            return Err(Errno::EBADF);
        }
        Ok(())
    }
}

/// A write to `trace_marker`: the text (cut at [`MARKER_MAX`] bytes)
/// becomes an `ftrace:print` entry ending in a newline, through the
/// marker's triggers ([`Tracing::record_marker`]).
pub(crate) fn write_marker(
    t: &Tracing,
    a: &TraceArray,
    data: &[u8],
    caller: &Caller,
) -> SysResult<u32> {
    a.marker_ok()?;
    if data.is_empty() {
        return Ok(0);
    }
    let text = &data[..data.len().min(MARKER_MAX)];
    let mut e = Vec::with_capacity(16 + text.len() + 2);
    header(&mut e, t.ftrace.print.id, caller.pid);
    e.extend_from_slice(&t.ftrace.ip.to_le_bytes());
    e.extend_from_slice(text);
    // What the marker's triggers see: the text and a NUL, no newline added.
    let hit = {
        let mut h = e.clone();
        h.push(0);
        h
    };
    if text.last() != Some(&b'\n') {
        e.push(b'\n');
    }
    e.push(0);
    e.resize(16 + text.len() + 2, 0);
    let comm = crate::base::procmem::comm_of(caller.pid);
    let cpu = a.cpu_of_writer(caller.pid);
    if t.record_marker(a, &hit, e, &comm, cpu, t.now_mono()) {
        t.save_cmdline(caller.pid, &comm);
    }
    Ok(text.len() as u32)
}

/// A write to `trace_marker_raw`: a 4-byte id and data, at least the id
/// and at most [`MARKER_RAW_MAX`] bytes (EINVAL otherwise), recorded as
/// `ftrace:raw_data`.
pub(crate) fn write_marker_raw(
    t: &Tracing,
    a: &TraceArray,
    data: &[u8],
    caller: &Caller,
) -> SysResult<u32> {
    a.marker_ok()?;
    if data.len() < 4 || data.len() > MARKER_RAW_MAX {
        return Err(Errno::EINVAL);
    }
    let mut e = Vec::with_capacity(COMMON_SIZE + data.len() + 3);
    header(&mut e, t.ftrace.raw.id, caller.pid);
    e.extend_from_slice(data);
    // The ring stores whole words; the padding shows in the output.
    e.resize(e.len().div_ceil(4) * 4, 0);
    store(t, a, &t.ftrace.raw, e, caller.pid);
    Ok(data.len() as u32)
}

/// Store a `trace_marker_raw` entry of `def` written by `pid` in `a`, now,
/// on the writer's CPU, and save the writer's name.
fn store(t: &Tracing, a: &TraceArray, def: &Arc<EventDef>, e: Vec<u8>, pid: u32) {
    let comm = crate::base::procmem::comm_of(pid);
    if a.store(def.clone(), e, &comm, a.cpu_of_writer(pid), t.now_mono()) {
        t.save_cmdline(pid, &comm);
    }
}

/// `trace_marker`, `trace_marker_raw` and `events/ftrace/`.
pub(crate) fn install(t: &Arc<Tracing>, a: &Arc<TraceArray>, tree: &Tree) {
    let b = a.base();
    let (tw, aw) = (t.clone(), a.clone());
    add_ctl(
        tree,
        &format!("{b}/trace_marker"),
        Ctl::new(0o220).w(move |data, caller| write_marker(&tw, &aw, data, caller)),
    );
    let (tw, aw) = (t.clone(), a.clone());
    add_ctl(
        tree,
        &format!("{b}/trace_marker_raw"),
        Ctl::new(0o220).w(move |data, caller| write_marker_raw(&tw, &aw, data, caller)),
    );
    tree.add(&format!("{b}/events/ftrace"), NodeKind::Dir, 0o755);
    for d in &t.ftrace.all {
        let dir = format!("{b}/events/ftrace/{}", d.name);
        tree.add(&dir, NodeKind::Dir, 0o755);
        let df = d.clone();
        add_ctl(
            tree,
            &format!("{dir}/format"),
            Ctl::new(MODE_READ).rs(move || df.format_text()),
        );
        let print = Arc::ptr_eq(d, &t.ftrace.print);
        // Only `print` has an `id` (it alone registers with perf) and a
        // `trigger` file; every event has `hist` (CONFIG_HIST_TRIGGERS),
        // empty without hist triggers.
        if print {
            let di = d.clone();
            add_ctl(
                tree,
                &format!("{dir}/id"),
                Ctl::new(MODE_READ).rs(move || format!("{}\n", di.id)),
            );
            let (tr, ar, tw, aw, tc, ac) = (
                t.clone(),
                a.clone(),
                t.clone(),
                a.clone(),
                t.clone(),
                a.clone(),
            );
            add_ctl(
                tree,
                &format!("{dir}/trigger"),
                Ctl::new(MODE_WRITE)
                    .rs(move || tr.marker.0.trig(ar.slot).read_text())
                    .w(move |data, _| tw.write_trigger(&aw, &tw.marker, data))
                    .t(move || tc.truncate_trigger(&ac, &tc.marker)),
            );
            let (th, ah) = (t.clone(), a.clone());
            add_ctl(
                tree,
                &format!("{dir}/hist"),
                Ctl::new(MODE_READ).rs(move || th.marker.0.trig(ah.slot).hist_text()),
            );
        } else {
            add_ctl(
                tree,
                &format!("{dir}/hist"),
                Ctl::new(MODE_READ).rs(String::new),
            );
        }
    }
}
