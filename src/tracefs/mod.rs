//! tracefs event tracing under `tracing/`: event definitions, the `events/`
//! tree, `set_event`, filters, the per-CPU trace buffers and their views,
//! modelled on the kernel's `kernel/trace/trace_events*.c`, `trace.c` and
//! `ring_buffer.c` and checked against a real 6.18 tracefs.
//!
//! Producers (the simulators, usbmon) look an event up once with
//! [`Tracing::event_id`], then call [`EventId::is_enabled`] (one atomic load)
//! and [`Tracing::emit`] on their hot path.
//!
//! Dependencies point one way: `facility.rs` (the state and the recording
//! path) knows nothing of files; the file modules (`files.rs`,
//! `per_cpu.rs`, `marker.rs`, `user_events/`) build on it, and this module
//! only wires them into a tree.

pub mod config;
mod ctl;
pub mod events;
mod facility;
mod files;
pub mod filter;
mod function;
pub mod hist;
pub mod instances;
mod marker;
pub mod parse;
pub mod ring;
pub mod synth;
pub mod trigger;
pub mod user_events;

use std::sync::Arc;

use crate::base::clock::Clock;
use crate::base::vfs::Tree;

pub use config::{EventConfig, TracingConfig, EVENT_ID_BASE};
/// The control-file type, for the daemon's own files of the same kind.
pub(crate) use ctl::Ctl;
pub use events::usb::UrbTraceSink;
pub use events::{EventDef, FieldSpec, FieldValue};
pub use facility::{EnableHook, EventId, Tracing};
pub use instances::array::{TraceArray, OPTIONS};

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
    files::install(t, tree);
    ring::per_cpu::install(t.top(), tree);
    marker::install(t, t.top(), tree);
    function::install(t.top(), tree);
    function::install_global(tree);
    instances::Instances::install(t, tree);
    synth::files::install(t, tree);
    user_events::UserEvents::new(t).add_files(tree);
}

#[cfg(test)]
mod tests;
