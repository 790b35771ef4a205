//! The built-in events: `usb:usb_urb_{submit,complete,error}`,
//! `usb:usb_device_{plug,unplug}`, `zvm:zvm_{sample,event}` and
//! `sched:sched_process_{fork,exec,exit}`, as definitions (fields and print
//! formats); the producers are in `usb.rs` and `sched.rs`.

use crate::tracefs::events::FieldSpec;

fn f(ctype: &str, name: &str) -> FieldSpec {
    FieldSpec {
        name: name.into(),
        ctype: ctype.into(),
    }
}

const URB_FMT: &str =
    "\"urb=%lx bus=%u dev=%u ep=%02x xfer=%u status=%d length=%u\", REC->urb, REC->bus, REC->dev, REC->ep, REC->xfer, REC->status, REC->length";
const DEV_FMT: &str = "\"bus=%u dev=%u devpath=%s id=%04x:%04x product=%s\", REC->bus, REC->dev, __get_str(devpath), REC->vendor, REC->product, __get_str(name)";
const FORK_FMT: &str = "\"comm=%s pid=%d child_comm=%s child_pid=%d\", REC->parent_comm, REC->parent_pid, REC->child_comm, REC->child_pid";
const EXEC_FMT: &str =
    "\"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid";
const EXIT_FMT: &str = "\"comm=%s pid=%d prio=%d\", REC->comm, REC->pid, REC->prio";
const ZVM_FMT: &str = "\"domain=%u record=%u length=%u userid=%s tod=%llx\", REC->domain, REC->record, REC->length, REC->userid, REC->tod";

/// The built-in definitions in registration order: (system, name, fields,
/// print fmt). The sched events have the layout of Debian's 6.12 kernel
/// (`char[16]` comms; later kernels made them `__data_loc` strings).
pub fn builtin_defs() -> Vec<(&'static str, &'static str, Vec<FieldSpec>, &'static str)> {
    let urb = || {
        vec![
            f("unsigned long", "urb"),
            f("u16", "bus"),
            f("u8", "dev"),
            f("u8", "ep"),
            f("u8", "xfer"),
            f("int", "status"),
            f("u32", "length"),
        ]
    };
    let dev = || {
        vec![
            f("u16", "bus"),
            f("u8", "dev"),
            f("u16", "vendor"),
            f("u16", "product"),
            f("__data_loc char[]", "devpath"),
            f("__data_loc char[]", "name"),
        ]
    };
    let zvm = || {
        vec![
            f("u8", "domain"),
            f("u8", "record"),
            f("u16", "length"),
            f("char[8]", "userid"),
            f("u64", "tod"),
        ]
    };
    vec![
        ("usb", "usb_urb_submit", urb(), URB_FMT),
        ("usb", "usb_urb_complete", urb(), URB_FMT),
        ("usb", "usb_urb_error", urb(), URB_FMT),
        ("usb", "usb_device_plug", dev(), DEV_FMT),
        ("usb", "usb_device_unplug", dev(), DEV_FMT),
        ("zvm", "zvm_sample", zvm(), ZVM_FMT),
        ("zvm", "zvm_event", zvm(), ZVM_FMT),
        // In the kernel's order (include/trace/events/sched.h): listed
        // last to first, exec, fork, exit, as available_events lists them.
        (
            "sched",
            "sched_process_exit",
            vec![f("char[16]", "comm"), f("pid_t", "pid"), f("int", "prio")],
            EXIT_FMT,
        ),
        (
            "sched",
            "sched_process_fork",
            vec![
                f("char[16]", "parent_comm"),
                f("pid_t", "parent_pid"),
                f("char[16]", "child_comm"),
                f("pid_t", "child_pid"),
            ],
            FORK_FMT,
        ),
        (
            "sched",
            "sched_process_exec",
            vec![
                f("__data_loc char[]", "filename"),
                f("pid_t", "pid"),
                f("pid_t", "old_pid"),
            ],
            EXEC_FMT,
        ),
    ]
}
