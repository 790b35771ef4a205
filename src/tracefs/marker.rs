//! `trace_marker` and `trace_marker_raw`, which record the `ftrace` system's
//! `print` and `raw_data` events, and the `events/ftrace/` formats that
//! tools (trace-cmd, libtraceevent) read to decode them. Layouts, ids and
//! print formats are the kernel's, as this machine's tracefs shows them.

use std::sync::Arc;

use super::ctl::{add_ctl, Ctl, MODE_READ};
use super::event::COMMON_SIZE;
use super::facility::{Tracing, OPT_MARKERS};
use super::ftrace_events::{MARKER_MAX, MARKER_RAW_MAX};
use crate::errno::{Errno, SysResult};
use crate::sync::LockExt;
use crate::vfs::{Caller, NodeKind, Tree};

/// The common header of a marker entry: the writer's pid, preemption
/// disabled once (the kernel writes markers with preemption off, so its
/// lines show `...1.`).
fn header(data: &mut Vec<u8>, id: u16, pid: u32) {
    data.extend_from_slice(&id.to_le_bytes());
    data.extend_from_slice(&[0, 1]);
    data.extend_from_slice(&pid.to_le_bytes());
}

impl Tracing {
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

    /// A write to `trace_marker`: the text (cut at [`MARKER_MAX`] bytes)
    /// becomes an `ftrace:print` entry ending in a newline.
    pub(crate) fn write_marker(&self, data: &[u8], caller: &Caller) -> SysResult<u32> {
        self.marker_ok()?;
        if data.is_empty() {
            return Ok(0);
        }
        let text = &data[..data.len().min(MARKER_MAX)];
        let mut e = Vec::with_capacity(16 + text.len() + 2);
        header(&mut e, self.ftrace.print.id, caller.pid);
        e.extend_from_slice(&self.ftrace.ip.to_le_bytes());
        e.extend_from_slice(text);
        if text.last() != Some(&b'\n') {
            e.push(b'\n');
        }
        e.push(0);
        e.resize(16 + text.len() + 2, 0);
        self.store(
            self.ftrace.print.clone(),
            e,
            &comm_of(caller.pid),
            self.cpu_now(),
            None,
        );
        Ok(text.len() as u32)
    }

    /// A write to `trace_marker_raw`: a 4-byte id and data, at least the id
    /// and at most [`MARKER_RAW_MAX`] bytes (EINVAL otherwise), recorded as
    /// `ftrace:raw_data`.
    pub(crate) fn write_marker_raw(&self, data: &[u8], caller: &Caller) -> SysResult<u32> {
        self.marker_ok()?;
        if data.len() < 4 || data.len() > MARKER_RAW_MAX {
            return Err(Errno::EINVAL);
        }
        let mut e = Vec::with_capacity(COMMON_SIZE + data.len() + 3);
        header(&mut e, self.ftrace.raw.id, caller.pid);
        e.extend_from_slice(data);
        // The ring stores whole words; the padding shows in the output.
        e.resize(e.len().div_ceil(4) * 4, 0);
        self.store(
            self.ftrace.raw.clone(),
            e,
            &comm_of(caller.pid),
            self.cpu_now(),
            None,
        );
        Ok(data.len() as u32)
    }
}

fn comm_of(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_else(|_| "<...>".into())
}

/// `trace_marker`, `trace_marker_raw` and `events/ftrace/`.
pub(crate) fn install(t: &Arc<Tracing>, tree: &Tree) {
    let tw = t.clone();
    add_ctl(
        tree,
        "tracing/trace_marker",
        Ctl::new(0o220).w(move |data, caller| tw.write_marker(data, caller)),
    );
    let tw = t.clone();
    add_ctl(
        tree,
        "tracing/trace_marker_raw",
        Ctl::new(0o220).w(move |data, caller| tw.write_marker_raw(data, caller)),
    );
    tree.add("tracing/events/ftrace", NodeKind::Dir, 0o755);
    for d in &t.ftrace.all {
        let dir = format!("tracing/events/ftrace/{}", d.name);
        tree.add(&dir, NodeKind::Dir, 0o755);
        let (df, di) = (d.clone(), d.clone());
        add_ctl(
            tree,
            &format!("{dir}/format"),
            Ctl::new(MODE_READ).rs(move || df.format_text()),
        );
        add_ctl(
            tree,
            &format!("{dir}/id"),
            Ctl::new(MODE_READ).rs(move || format!("{}\n", di.id)),
        );
    }
}
