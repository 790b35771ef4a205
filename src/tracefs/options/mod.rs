//! The trace options (`options/`, `trace_options`): the kernel's
//! `trace_options[]` and `TRACE_ITER_*` flags of `kernel/trace/trace.h`
//! and `trace.c`, in its order, with their defaults; the files that show
//! and set them are `files.rs`.

pub(crate) mod files;

/// The global options (`options/`, `trace_options`), in the kernel's
/// `trace_options` order, with their defaults.
pub const OPTIONS: &[(&str, bool)] = &[
    ("print-parent", true),
    ("sym-offset", false),
    ("sym-addr", false),
    ("verbose", false),
    ("raw", false),
    ("hex", false),
    ("bin", false),
    ("block", false),
    ("fields", false),
    ("trace_printk", true),
    ("annotate", true),
    ("userstacktrace", false),
    ("sym-userobj", false),
    ("printk-msg-only", false),
    ("context-info", true),
    ("latency-format", false),
    ("record-cmd", true),
    ("record-tgid", false),
    ("overwrite", true),
    ("disable_on_free", false),
    ("irq-info", true),
    ("markers", true),
    ("event-fork", false),
    ("trace_printk_dest", true),
    ("copy_trace_marker", true),
    ("pause-on-trace", false),
    ("hash-ptr", true),
    ("function-trace", true),
    ("function-fork", false),
    ("stacktrace", false),
    ("test_nop_accept", false),
    ("test_nop_refuse", false),
];

/// Index of the `markers` option in [`OPTIONS`].
pub(crate) const OPT_MARKERS: usize = 21;
/// Index of the `trace_printk_dest` option in [`OPTIONS`].
pub(crate) const OPT_PRINTK_DEST: usize = 23;

/// Options only the top level has (`options/` of an instance lacks them,
/// as measured).
pub const TOP_ONLY_OPTIONS: &[&str] = &["printk-msg-only", "record-cmd", "trace_printk"];
