//! The files of one trace array (the top level `tracing/` or an instance
//! under `tracing/instances/`): each mechanism adds its own, in the order
//! they appear in the directory.

use crate::base::vfs::{NodeKind, Tree};
use crate::tracefs::events;
use crate::tracefs::facility::Arr;
use crate::tracefs::ring::{self, per_cpu, snapshot};
use crate::tracefs::{function, marker, options, trace};

/// Add every file of the array `x` under its directory.
pub(crate) fn install_array(x: &Arr, tree: &Tree) {
    let b = x.base();
    tree.add(&format!("{b}/events"), NodeKind::Dir, 0o755);
    tree.mark_eventfs(&format!("{b}/events"));
    tree.add(&format!("{b}/options"), NodeKind::Dir, 0o750);
    events::files::set_event(x, tree);
    trace::trace_file(x, tree);
    ring::files::trace_clock_file(x, tree);
    trace::tracing_cpumask(x, tree);
    events::files::set_event_notrace_pid(x, tree);
    trace::log_files(x, tree);
    ring::files::tuning_files(x, tree);
    snapshot::install(&x.a, tree);
    trace::tracing_on(x, tree);
    ring::files::size_files(x, tree);
    trace::tracer_files(x, tree);
    events::files::set_event_pid(x, tree);
    function::set_ftrace_pid(x, tree);
    options::files::install(x, tree);
    ring::files::header_files(x, tree);
    events::files::install(x, tree);
    per_cpu::install(&x.a, tree);
    marker::install(&x.t, &x.a, tree);
    function::install(&x.a, tree);
}
