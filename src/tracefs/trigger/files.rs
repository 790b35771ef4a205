//! An event's `trigger` file, as `kernel/trace/trace_events_trigger.c`
//! has it (`event_trigger_open()`, `event_trigger_write()`,
//! `trigger_show()`): the triggers of `mod.rs`, read back or the list of
//! the available ones when there are none.

use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_WRITE};
use crate::tracefs::facility::{Arr, EventId};
use crate::tracefs::trigger::AVAILABLE_TRIGGERS;

/// `<dir>/trigger` of event `e` in `x`.
pub(crate) fn event_file(x: &Arr, tree: &Tree, dir: &str, e: &EventId) {
    let (er, ew, ec, xr, xw, xc) = (
        e.clone(),
        e.clone(),
        e.clone(),
        x.clone(),
        x.clone(),
        x.clone(),
    );
    add_ctl(
        tree,
        &format!("{dir}/trigger"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                let t = er.0.trig(xr.a.slot);
                if t.is_empty() {
                    AVAILABLE_TRIGGERS.to_string()
                } else {
                    t.read_text()
                }
            })
            .w(move |data, _| xw.t.write_trigger(&xw.a, &ew, data))
            .t(move || xc.t.truncate_trigger(&xc.a, &ec)),
    );
}
