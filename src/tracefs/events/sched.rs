//! The `sched` process events: `sched_process_fork`, `sched_process_exec`
//! and `sched_process_exit`, for every process on the machine, as the
//! kernel's tracepoints record them, and the `event-fork` option that
//! follows them (a forked child of a task in `set_event_pid` or
//! `set_event_notrace_pid` joins the list, an exiting task leaves it).
//!
//! The source is the kernel's process connector ([`ProcEvents`]), which
//! monfs subscribes to the first time one of the events is enabled or
//! armed by a trigger, or `event-fork` is set: nothing is spent on them
//! before. Where the connector cannot be had (no `CAP_NET_ADMIN`, a nested
//! pid or user namespace) the events exist but never fire, and the log
//! says so once.
//!
//! How each entry is made (the tracepoint runs in the task; monfs learns of
//! it a moment later):
//! - the entry goes to the CPU the connector reports, and is stamped when
//!   monfs takes it off the socket (a moment after the fact: the ring
//!   never goes back in time);
//! - `common_pid` is the task: the forking thread, the thread that exec'd,
//!   the exiting thread;
//! - `sched_process_fork`: `parent_comm` and `child_comm` are the parent's
//!   comm (a child starts with its parent's), `child_pid` the new task;
//! - `sched_process_exec`: `filename` is `/proc/PID/exe` (the kernel has
//!   the path as passed to `execve`; the two differ through symlinks and
//!   relative paths), or the comm when the process has already exited by
//!   the time monfs takes the event (a `true` can be gone within 100 µs);
//!   `old_pid` equals `pid` (they differ only when a thread other than the
//!   leader execs, which the connector does not tell);
//! - `sched_process_exit`: `comm` is the comm last seen for the task,
//!   `prio` the kernel's priority (120 at nice 0) from `/proc/PID/stat`.
//!
//! Events are taken off the socket by a thread as they come, and also by
//! every request on the mount before it is served (a [`RequestHooks`]):
//! a `cat tracing_on` after a shell's `( : )` sees what a `traceoff`
//! trigger on `sched_process_fork` did, as on Linux.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tracing::warn;

use crate::base::proc_events::{ProcEvent, ProcEvents};
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::{RequestHooks, Tree};
use crate::tracefs::events::FieldValue;
use crate::tracefs::facility::{EventId, Tracing};

/// Comms remembered for exit events, at most (a fork bomb must not grow
/// the daemon without bound; past it the table starts over).
const COMMS_MAX: usize = 65536;

/// The process events' producer.
pub(crate) struct Sched {
    t: Weak<Tracing>,
    /// `sched_process_fork`, `sched_process_exec`, `sched_process_exit`.
    ids: [EventId; 3],
    /// Subscribed on first use; None when the connector is unavailable.
    procs: OnceLock<Option<ProcEvents>>,
    /// Comm of each task seen, for its exit event.
    comms: Mutex<HashMap<u32, String>>,
}

impl Sched {
    /// Produce `t`'s process events: subscribe when one of them is first
    /// enabled or `event-fork` first set, and take events in before every
    /// request on `tree`.
    pub(crate) fn install(t: &Arc<Tracing>, tree: &Tree) {
        let id = |n| t.event_id("sched", n).expect("built-in sched event");
        let s = Arc::new(Sched {
            t: Arc::downgrade(t),
            ids: [
                id("sched_process_fork"),
                id("sched_process_exec"),
                id("sched_process_exit"),
            ],
            procs: OnceLock::new(),
            comms: Mutex::new(HashMap::new()),
        });
        let w = Arc::downgrade(&s);
        let activate: crate::tracefs::EnableHook = Arc::new(move || {
            if let Some(s) = w.upgrade() {
                s.activate();
            }
        });
        for id in &s.ids {
            let _ = id.0.hook.set(activate.clone());
        }
        let _ = t.on_event_fork.set(activate);
        // The tree holds the producer for as long as the mount lives.
        tree.add_request_hooks(s);
    }

    /// Subscribe to the process events (once) and start the thread that
    /// takes them off the socket as they come.
    fn activate(self: &Arc<Sched>) {
        let mut subscribed = false;
        self.procs.get_or_init(|| match ProcEvents::listen() {
            Ok(p) => {
                subscribed = true;
                Some(p)
            }
            Err(e) => {
                warn!(
                    "no process events ({e}): sched:sched_process_* never fire and \
                     event-fork does not follow forks"
                );
                None
            }
        });
        if !subscribed {
            return;
        }
        let me = Arc::downgrade(self);
        let _ = std::thread::Builder::new()
            .name("sched-events".into())
            .spawn(move || loop {
                let Some(s) = me.upgrade() else { return };
                s.catch_up();
                let Some(Some(p)) = s.procs.get() else {
                    return;
                };
                p.wait(Duration::from_secs(1));
            });
    }

    /// Record every process event the kernel has sent so far, in order.
    fn catch_up(&self) {
        let (Some(Some(p)), Some(t)) = (self.procs.get(), self.t.upgrade()) else {
            return;
        };
        p.drain(&mut |e| self.handle(&t, e), &mut || {
            warn!("process events were lost (queue overflow)")
        });
    }

    fn handle(&self, t: &Tracing, e: ProcEvent) {
        let [fork, exec, exit] = &self.ids;
        match e {
            ProcEvent::Fork {
                parent_pid,
                child_pid,
                cpu,
                ..
            } => {
                let comm = self.comm(parent_pid);
                self.remember(child_pid, &comm);
                t.follow_fork(parent_pid, child_pid);
                if fork.is_enabled() {
                    let v = [
                        FieldValue::Str(&comm),
                        FieldValue::Int(parent_pid as i64),
                        FieldValue::Str(&comm),
                        FieldValue::Int(child_pid as i64),
                    ];
                    emit(t, fork, cpu, parent_pid, &comm, &v);
                }
            }
            ProcEvent::Exec { pid, cpu, .. } => {
                let comm = crate::base::procmem::comm_of(pid);
                self.remember(pid, &comm);
                if exec.is_enabled() {
                    let file = std::fs::read_link(format!("/proc/{pid}/exe"))
                        .map(|p| p.to_string_lossy().into_owned())
                        .unwrap_or_else(|_| comm.clone());
                    let v = [
                        FieldValue::Str(&file),
                        FieldValue::Int(pid as i64),
                        FieldValue::Int(pid as i64),
                    ];
                    emit(t, exec, cpu, pid, &comm, &v);
                }
            }
            ProcEvent::Exit { pid, cpu, .. } => {
                let comm = self.comms.lock_ok().remove(&pid);
                t.follow_exit(pid);
                if exit.is_enabled() {
                    let comm = comm.unwrap_or_else(|| crate::base::procmem::comm_of(pid));
                    let v = [
                        FieldValue::Str(&comm),
                        FieldValue::Int(pid as i64),
                        FieldValue::Int(prio_of(pid)),
                    ];
                    emit(t, exit, cpu, pid, &comm, &v);
                }
            }
        }
    }

    /// The comm of task `pid`: as remembered, else from /proc.
    fn comm(&self, pid: u32) -> String {
        if let Some(c) = self.comms.lock_ok().get(&pid) {
            return c.clone();
        }
        let c = crate::base::procmem::comm_of(pid);
        self.remember(pid, &c);
        c
    }

    fn remember(&self, pid: u32, comm: &str) {
        let mut m = self.comms.lock_ok();
        if m.len() >= COMMS_MAX {
            m.clear();
        }
        m.insert(pid, comm.to_string());
    }
}

impl RequestHooks for Sched {
    /// Only while something uses the events (one of them enabled or armed,
    /// or `event-fork` set somewhere): otherwise the thread takes them in
    /// and requests pay no syscall.
    fn before(&self) {
        if !matches!(self.procs.get(), Some(Some(_))) {
            return;
        }
        let in_use = self.ids.iter().any(|id| id.is_enabled())
            || self.t.upgrade().is_some_and(|t| {
                t.arrays
                    .read_ok()
                    .iter()
                    .flatten()
                    .any(|a| a.event_fork.load(Ordering::Relaxed))
            });
        if in_use {
            self.catch_up();
        }
    }
}

fn emit(t: &Tracing, id: &EventId, cpu: u32, pid: u32, comm: &str, v: &[FieldValue<'_>]) {
    let data = id.def().encode(pid, v);
    t.record_on(id, data, comm, None, Some(cpu));
}

/// The kernel's priority of task `pid` (`prio`; `/proc/PID/stat` shows it
/// less 100), 120 (nice 0) when it cannot be read.
fn prio_of(pid: u32) -> i64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // The comm can hold spaces and parentheses: fields start after
            // the last ')'. `priority` is field 18, the 16th after it.
            let rest = &s[s.rfind(')')? + 1..];
            rest.split_whitespace().nth(15)?.parse::<i64>().ok()
        })
        .map(|p| p + 100)
        .unwrap_or(120)
}

impl Tracing {
    /// The event-fork option: in every array that has it set, a child of a
    /// listed task joins the list.
    fn follow_fork(&self, parent: u32, child: u32) {
        for arr in self.arrays_now() {
            if !arr.event_fork.load(Ordering::Relaxed) {
                continue;
            }
            for (set, flag) in arr.pid_lists() {
                let mut s = set.write_ok();
                if s.contains(&parent) {
                    s.insert(child);
                    flag.store(true, Ordering::Relaxed);
                }
            }
        }
    }

    /// The event-fork option: an exiting task leaves the lists.
    fn follow_exit(&self, pid: u32) {
        for arr in self.arrays_now() {
            if !arr.event_fork.load(Ordering::Relaxed) {
                continue;
            }
            for (set, flag) in arr.pid_lists() {
                let mut s = set.write_ok();
                if s.remove(&pid) {
                    flag.store(!s.is_empty(), Ordering::Relaxed);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prio_of_self_is_the_kernels_prio() {
        // This test runs at some nice level n: the kernel's prio is 120 + n.
        // SAFETY: getpriority has no memory effects.
        let nice = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
        assert_eq!(prio_of(std::process::id()), 120 + nice as i64);
        assert_eq!(prio_of(u32::MAX), 120);
    }
}
