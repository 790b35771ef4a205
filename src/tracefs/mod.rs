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

pub mod builtin;
pub mod config;
mod ctl;
pub mod eprobe;
pub mod event;
mod facility;
mod files;
pub mod filter;
pub mod ftrace_events;
mod function;
pub mod hist;
pub mod instance;
mod instances;
mod marker;
pub mod parse;
mod per_cpu;
pub mod ring;
mod sched;
pub mod snapshot;
pub mod synth;
mod synth_files;
pub mod trace_clock;
pub mod trigger;
pub mod usb;
pub mod user_events;

use std::sync::Arc;

use crate::base::clock::Clock;
use crate::base::vfs::Tree;

pub use config::{EventConfig, TracingConfig, EVENT_ID_BASE};
/// The control-file type, for the daemon's own files of the same kind.
pub(crate) use ctl::Ctl;
pub use event::{EventDef, FieldSpec, FieldValue};
pub use facility::{EnableHook, EventId, Tracing};
pub use instance::{TraceArray, OPTIONS};
pub use usb::UrbTraceSink;

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
    sched::Sched::install(t, tree);
    files::install(t, tree);
    per_cpu::install(t.top(), tree);
    marker::install(t, t.top(), tree);
    function::install(t.top(), tree);
    function::install_global(tree);
    instances::Instances::install(t, tree);
    synth_files::install(t, tree);
    user_events::UserEvents::new(t).add_files(tree);
}

#[cfg(test)]
mod tests;
