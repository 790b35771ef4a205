//! tracefs event tracing under `tracing/`: event definitions, the `events/`
//! tree, `set_event`, filters, the per-CPU trace buffers and their views,
//! modelled on the kernel's `kernel/trace/trace_events*.c`, `trace.c` and
//! `ring_buffer.c` and checked against a real 6.18 tracefs.
//!
//! Producers (the simulators, usbmon) look an event up once with
//! [`Tracing::event_id`], then call [`EventId::is_enabled`] (one atomic load)
//! and [`Tracing::emit`] on their hot path.
//!
//! One folder (or file) a mechanism, as `kernel/trace/` has one file a
//! mechanism, each with its logic and its files: `events/` (definitions,
//! the `events/` tree, `set_event`, `inject`; `trace_events.c`),
//! `filter/` (`trace_events_filter.c`), `trigger/`
//! (`trace_events_trigger.c`), `hist/` (`trace_events_hist.c`,
//! `tracing_map.c`), `synth/` (`trace_events_synth.c`), `instances/` (trace
//! arrays and `instances/`), `ring/` (`ring_buffer.c` and the buffer files,
//! `per_cpu/`, `snapshot`, `trace_clock`), `options/`, `user_events/`
//! (`trace_events_user.c`), `marker.rs`, `function.rs` (`ftrace.c`),
//! `pid_list.rs` and `trace.rs` (the rest of `trace.c`).
//!
//! Dependencies point one way: `facility.rs` (the state and the recording
//! path) knows nothing of files; each mechanism's files build on it,
//! `instances/files.rs` adds one trace array's files, and this module only
//! wires the global ones and the top level's into a tree.

mod cmdlines;
pub mod config;
mod ctl;
pub mod eprobe;
pub mod error_log;
pub mod events;
mod facility;
pub mod filter;
mod function;
pub mod hist;
pub mod instances;
mod marker;
pub mod options;
pub mod parse;
mod pid_list;
mod record;
pub mod ring;
pub mod synth;
mod trace;
pub mod trigger;
pub mod user_events;

use std::sync::Arc;

use crate::base::clock::Clock;
use crate::base::vfs::{NodeKind, Tree};
use facility::Arr;

pub use config::{EventConfig, TracingConfig, EVENT_ID_BASE};
/// The control-file type, for the daemon's own files of the same kind.
pub(crate) use ctl::Ctl;
pub use events::usb::UrbTraceSink;
pub use events::{EventDef, FieldSpec, FieldValue};
pub use facility::{EnableHook, EventId, Tracing};
pub use instances::array::TraceArray;
pub use options::OPTIONS;

/// Build the facility and add its files under `tracing/` in `tree`.
pub fn install(tree: &Arc<Tree>, clock: Arc<dyn Clock>, cfg: &TracingConfig) -> Arc<Tracing> {
    let t = Tracing::new(clock, cfg);
    add_files(&t, tree);
    t
}

/// Add the files under `tracing/` in `tree` (for a facility made with
/// [`Tracing::new`], so producers can hold it before the tree exists).
pub fn add_files(t: &Arc<Tracing>, tree: &Arc<Tree>) {
    t.set_tree(tree);
    events::sched::Sched::install(t, tree);
    tree.add("tracing", NodeKind::Dir, 0o700);
    trace::readme(tree);
    events::files::available_events(t, tree);
    trace::install_global(t, tree);
    instances::files::install_array(&Arr::new(t, t.top().clone()), tree);
    function::install_global(tree);
    instances::Instances::install(t, tree);
    synth::files::install(t, tree);
    user_events::UserEvents::new(t).add_files(tree);
}

#[cfg(test)]
mod tests;
