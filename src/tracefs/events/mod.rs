//! Trace events (`kernel/trace/trace_events.c`): the event definitions
//! (`def.rs`, the kernel's `TRACE_EVENT`, with their fields in `field.rs`,
//! what can be wrong with them in `error.rs`, and how a record prints in
//! `print.rs`), the event files (`files.rs`: `available_events`,
//! `set_event`, the `events/` tree) and `inject` (`inject.rs`), the
//! built-in systems and their producers (`builtin.rs`, `usb.rs`,
//! `sched.rs`), and the `ftrace` system's formats (`ftrace.rs`, the
//! kernel's `trace_entries.h`).

pub mod builtin;
pub mod def;
mod error;
mod field;
pub(crate) mod files;
pub mod ftrace;
pub(crate) mod inject;
pub mod print;
pub mod sched;
pub mod usb;

pub use def::{EventDef, FieldValue, Render};
pub use error::{DefError, EventError};
pub use field::{common_fields, layout, Field, FieldKind, FieldSpec, COMMON_SIZE};
pub use print::{render_fields, render_synth, synth_field_fmt, PrintFmt};
