//! An event's `hist` file (`hist_show()` in
//! `kernel/trace/trace_events_hist.c`): the histograms of the event's hist
//! triggers in one trace array.

use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ};
use crate::tracefs::facility::{Arr, EventId};

/// `<dir>/hist` of event `e` in `x`.
pub(crate) fn event_file(x: &Arr, tree: &Tree, dir: &str, e: &EventId) {
    let (er, xr) = (e.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/hist"),
        Ctl::new(MODE_READ).rs(move || er.0.trig(xr.a.slot).hist_text()),
    );
}
