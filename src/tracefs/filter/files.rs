//! The `filter` files: an event's (`events/<system>/<event>/filter`) and a
//! system's (`events/<system>/filter`), which set, clear and show the
//! filters of `mod.rs`, as `kernel/trace/trace_events_filter.c`
//! (`apply_event_filter()`, `apply_subsystem_event_filter()`) and
//! `trace_events.c` (`event_filter_read()`, `event_filter_write()`) do.

use std::sync::atomic::Ordering;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::RwLockExt;
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_WRITE};
use crate::tracefs::facility::{Arr, EventId};
use crate::tracefs::filter;
use crate::tracefs::instances::array::{EventFile, FilterState};

const SYSTEM_FILTER_HELP: &str = "### global filter ###\n\
# Use this to set filters for multiple events.\n\
# Only events with the given fields will be affected.\n\
# If no events are modified, an error message will be displayed here\n";

/// Set or clear an event's filter from a write to its `filter` file.
fn write_event_filter(x: &Arr, e: &EventId, ev: &EventFile, data: &[u8]) -> SysResult<u32> {
    if data.len() >= 4096 {
        return Err(Errno::EINVAL);
    }
    let raw = filter::clean(data);
    if filter::is_clear(raw) {
        ev.filtered.store(false, Ordering::Relaxed);
        *ev.filter.write_ok() = FilterState::None;
        return Ok(data.len() as u32);
    }
    let text = crate::base::bytestr::text(raw).into_owned();
    match filter::parse(raw, &filter::event_lookup(&e.0.def)) {
        Ok(f) => {
            *ev.filter.write_ok() = FilterState::Active(text, f);
            ev.filtered.store(true, Ordering::Relaxed);
            Ok(data.len() as u32)
        }
        Err(err) => {
            ev.filtered.store(false, Ordering::Relaxed);
            *ev.filter.write_ok() = FilterState::Error(filter::error_text(raw, &err));
            x.error_log.log_filter(x.t.now_mono(), &text, &err);
            Err(err.errno)
        }
    }
}

fn read_event_filter(ev: &EventFile) -> String {
    match &*ev.filter.read_ok() {
        FilterState::None => "none\n".into(),
        FilterState::Active(t, _) => format!("{t}\n"),
        FilterState::Error(s) => s.clone(),
    }
}

/// A system filter goes to every event of the system; events it does not
/// fit get the "Couldn't find or set field" error, and the write succeeds
/// (as measured on 6.18).
fn write_system_filter(x: &Arr, sys: &str, data: &[u8]) -> SysResult<u32> {
    if data.len() >= 4096 {
        return Err(Errno::EINVAL);
    }
    let raw = filter::clean(data);
    let clear = filter::is_clear(raw);
    let text = crate::base::bytestr::text(raw);
    for e in x.events().iter().filter(|e| e.0.def.system == sys) {
        let ev = &*x.file(e);
        if clear {
            ev.filtered.store(false, Ordering::Relaxed);
            *ev.filter.write_ok() = FilterState::None;
            continue;
        }
        match filter::parse(raw, &filter::event_lookup(&e.0.def)) {
            Ok(f) => {
                *ev.filter.write_ok() = FilterState::Active(text.to_string(), f);
                ev.filtered.store(true, Ordering::Relaxed);
            }
            Err(_) => {
                ev.filtered.store(false, Ordering::Relaxed);
                *ev.filter.write_ok() = FilterState::Error(format!(
                    "{text}\n^\nparse_error: {}\n\n",
                    filter::E_BAD_SUBSYS
                ));
            }
        }
    }
    Ok(data.len() as u32)
}

/// `<dir>/filter` of event `e` in `x`.
pub(crate) fn event_file(x: &Arr, tree: &Tree, dir: &str, e: &EventId) {
    let (fr, ew, fw, xw) = (x.file(e), e.clone(), x.file(e), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/filter"),
        Ctl::new(MODE_WRITE)
            .rs(move || read_event_filter(&fr))
            .w(move |data, _| write_event_filter(&xw, &ew, &fw, data)),
    );
}

/// `<dir>/filter` of system `sys` in `x`.
pub(crate) fn system_file(x: &Arr, tree: &Tree, dir: &str, sys: &str) {
    let (tw, sw) = (x.clone(), sys.to_string());
    add_ctl(
        tree,
        &format!("{dir}/filter"),
        Ctl::new(MODE_WRITE)
            .rs(|| SYSTEM_FILTER_HELP.into())
            .w(move |data, _| write_system_filter(&tw, &sw, data)),
    );
}
