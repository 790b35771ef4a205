//! Trace events (`kernel/trace/trace_events.c`): the event definitions
//! (`def.rs`, the kernel's `TRACE_EVENT`), the built-in systems and their
//! producers (`builtin.rs`, `usb.rs`, `sched.rs`), and the `ftrace`
//! system's formats (`ftrace.rs`, the kernel's `trace_entries.h`).

pub mod builtin;
pub mod def;
pub(crate) mod files;
pub mod ftrace;
pub(crate) mod inject;
pub mod sched;
pub mod usb;

pub use def::{
    common_fields, layout, render_fields, render_synth, synth_field_fmt, DefError, EventDef,
    EventError, Field, FieldKind, FieldSpec, FieldValue, PrintFmt, Render, COMMON_SIZE,
};
