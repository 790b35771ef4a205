//! The event files (`kernel/trace/trace_events.c`): `available_events`,
//! `set_event`, `events/enable`, and each system's and event's directory
//! under `events/` (`enable`, `filter`, `trigger`, `hist`, `format`, `id`,
//! `inject`), for the events there are at start and for dynamic events
//! that come and go. The `filter`, `trigger`, `hist` and `inject` files
//! are their mechanisms' (`filter/files.rs`, `trigger/files.rs`,
//! `hist/files.rs`, `inject.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::base::errno::Errno;
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::{NodeKind, Tree};
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::events::{inject, EventDef};
use crate::tracefs::facility::{Arr, EnableHook, EventId, Tracing};
use crate::tracefs::parse::{enable_value, next_token, parse_match};
use crate::tracefs::pid_list::pid_list_file;
use crate::tracefs::{filter, hist, trigger};

/// `0`, `1`, `X` (mixed) or `?` (no events) over a set of events.
fn enable_state(x: &Arr, evs: &[EventId]) -> String {
    let on = evs.iter().filter(|e| x.enabled(e)).count();
    let c = if evs.is_empty() {
        '?'
    } else if on == 0 {
        '0'
    } else if on == evs.len() {
        '1'
    } else {
        'X'
    };
    format!("{c}\n")
}

/// `tracing/available_events`: every event, `system:name` a line.
pub(crate) fn available_events(t: &Arc<Tracing>, tree: &Tree) {
    let tt = t.clone();
    add_ctl(
        tree,
        "tracing/available_events",
        Ctl::new(MODE_READ).rs(move || {
            tt.events()
                .iter()
                .map(|e| format!("{}:{}\n", e.0.def.system, e.0.def.name))
                .collect()
        }),
    );
}

/// `set_event` of `x`.
pub(crate) fn set_event(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw, tc) = (x.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/set_event"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                tr.events()
                    .iter()
                    .filter(|e| tr.enabled(e))
                    .map(|e| format!("{}:{}\n", e.0.def.system, e.0.def.name))
                    .collect()
            })
            .w(move |data, _| {
                if data.is_empty() {
                    return Ok(0);
                }
                tw.expand();
                let (consumed, tok) = next_token(data)?;
                let Some(tok) = tok else {
                    return Ok(consumed as u32);
                };
                let tok = crate::base::bytestr::text(tok);
                let m = parse_match(&tok).ok_or(Errno::EINVAL)?;
                let hits: Vec<EventId> = tw
                    .events()
                    .into_iter()
                    .filter(|e| m.matches(&e.0.def.system, &e.0.def.name))
                    .collect();
                if hits.is_empty() {
                    return Err(Errno::EINVAL);
                }
                for e in &hits {
                    tw.set_enabled(e, m.enable);
                }
                Ok(consumed as u32)
            })
            .t(move || {
                for e in tc.events() {
                    tc.set_enabled(&e, false);
                }
            }),
    );
}

/// `set_event_pid` of `x`.
pub(crate) fn set_event_pid(x: &Arr, tree: &Tree) {
    let b = x.base();
    pid_list_file(x, tree, &format!("{b}/set_event_pid"), |a| {
        (&a.event_pids, &a.has_event_pids)
    });
}

/// `set_event_notrace_pid` of `x`.
pub(crate) fn set_event_notrace_pid(x: &Arr, tree: &Tree) {
    let b = x.base();
    pid_list_file(x, tree, &format!("{b}/set_event_notrace_pid"), |a| {
        (&a.notrace_pids, &a.has_notrace_pids)
    });
}

/// `events/enable` of `x` and the directories of every system and event.
pub(crate) fn install(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/events/enable"),
        Ctl::new(MODE_WRITE)
            .rs(move || enable_state(&tr, &tr.events()))
            .w(move |data, _| {
                let on = enable_value(data)?;
                tw.expand();
                let evs = tw.events();
                if evs.is_empty() {
                    return Err(Errno::EINVAL);
                }
                for e in &evs {
                    tw.set_enabled(e, on);
                }
                Ok(data.len() as u32)
            }),
    );
    // Oldest registration first, so the directory lists systems in the order
    // they were defined.
    let mut evs = x.events();
    evs.reverse();
    let mut systems: Vec<String> = Vec::new();
    for e in &evs {
        if !systems.contains(&e.0.def.system) {
            systems.push(e.0.def.system.clone());
        }
    }
    for sys in &systems {
        install_system(x, tree, sys);
    }
    for e in &evs {
        install_event(x, tree, e);
    }
}

/// Add a dynamic event's directory (and its system's, for the system's
/// first event). No `inject`: user events have none here.
pub(crate) fn install_dynamic(t: &Arc<Tracing>, tree: &Tree, e: &EventId) {
    for arr in t.arrays.read_ok().iter().flatten() {
        let x = Arr::new(t, arr.clone());
        let sys = &e.0.def.system;
        if tree.resolve(&format!("{}/events/{sys}", x.base())).is_err() {
            install_system(&x, tree, sys);
        }
        install_event_files(&x, tree, e);
    }
}

fn install_system(x: &Arr, tree: &Tree, sys: &str) {
    {
        let dir = format!("{}/events/{sys}", x.base());
        tree.add(&dir, NodeKind::Dir, 0o755);
        let (tr, tw, sr, sw) = (x.clone(), x.clone(), sys.to_string(), sys.to_string());
        add_ctl(
            tree,
            &format!("{dir}/enable"),
            Ctl::new(MODE_WRITE)
                .rs(move || {
                    let evs: Vec<EventId> = tr
                        .events()
                        .into_iter()
                        .filter(|e| e.0.def.system == sr)
                        .collect();
                    enable_state(&tr, &evs)
                })
                .w(move |data, _| {
                    let on = enable_value(data)?;
                    tw.expand();
                    for e in tw.events().iter().filter(|e| e.0.def.system == sw) {
                        tw.set_enabled(e, on);
                    }
                    Ok(data.len() as u32)
                }),
        );
        filter::files::system_file(x, tree, &dir, sys);
    }
}

/// Whether a directory of this name can be reached by a path. The kernel
/// takes any user_events name and makes its eventfs directory even when no
/// path reaches it (an empty name, `.`, `..`, a `/` in it); monfs makes
/// none for such an event, which is there all the same (`dynamic_events`,
/// `available_events`, `set_event`).
fn has_path(name: &str) -> bool {
    !(name.is_empty() || name.contains('/') || name == "." || name == "..")
}

fn install_event(x: &Arr, tree: &Tree, e: &EventId) {
    install_event_files(x, tree, e);
    let dir = format!("{}/events/{}/{}", x.base(), e.0.def.system, e.0.def.name);
    inject::event_file(x, tree, e, &dir);
}

/// An event's `enable`, `filter`, `format` and `id`. Names are not
/// reserved, as in the kernel: an event called `enable` or `filter` gets its
/// directory over the system's file of that name, which comes back when the
/// event goes.
fn install_event_files(x: &Arr, tree: &Tree, e: &EventId) {
    if !has_path(&e.0.def.name) {
        return;
    }
    let dir = format!("{}/events/{}/{}", x.base(), e.0.def.system, e.0.def.name);
    tree.add_dir_over_file(&dir);
    let (er, ew, tr, tw) = (e.clone(), e.clone(), x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{dir}/enable"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                // `*`: armed by triggers (soft mode), as the kernel marks it.
                let f = tr.file(&er);
                let star = if f.armed.load(Ordering::Relaxed) {
                    "*"
                } else {
                    ""
                };
                format!("{}{star}\n", f.enabled.load(Ordering::Relaxed) as u8)
            })
            .w(move |data, _| {
                let on = enable_value(data)?;
                tw.expand();
                tw.set_enabled(&ew, on);
                Ok(data.len() as u32)
            }),
    );
    filter::files::event_file(x, tree, &dir, e);
    trigger::files::event_file(x, tree, &dir, e);
    hist::files::event_file(x, tree, &dir, e);
    let er = e.clone();
    add_ctl(
        tree,
        &format!("{dir}/format"),
        Ctl::new(MODE_READ).rs(move || er.0.def.format_text()),
    );
    let er = e.clone();
    add_ctl(
        tree,
        &format!("{dir}/id"),
        Ctl::new(MODE_READ).rs(move || format!("{}\n", er.0.def.id)),
    );
}

impl Tracing {
    /// Add a dynamic event (user_events) at run time: registered as
    /// [`Tracing::register_dynamic`] says, and its directory
    /// `events/<system>/<name>/` (enable, filter, format, id) appears.
    pub(crate) fn add_dynamic(
        self: &Arc<Self>,
        make: impl FnOnce(u16) -> EventDef,
        hook: EnableHook,
    ) -> Result<EventId, Errno> {
        let id = self.register_dynamic(make, hook)?;
        if let Some(tree) = self.tree.get() {
            let _g = self.dyn_tree.lock_ok();
            install_dynamic(self, tree, &id);
        }
        Ok(id)
    }

    /// Remove a dynamic event: out of the event list and the tree, and its
    /// system's directory with it when it was the system's last event, as the
    /// kernel does (the tree tells the kernel's dentry cache at once, so the
    /// usual "register, then enable" of a producer that restarts finds the
    /// new directories).
    pub(crate) fn remove_dynamic(&self, id: &EventId) {
        self.remove_dynamic_many(std::slice::from_ref(id));
    }

    /// Remove many dynamic events at once (`echo > dynamic_events`, a
    /// truncated `synthetic_events`): one pass over the event list and one
    /// over each system's directory in each array, so that removing N
    /// events costs about N, not N times the events there are (issue 37,
    /// finding 8: 10,000 took 25 s, holding the tree for others).
    pub(crate) fn remove_dynamic_many(&self, ids: &[EventId]) {
        if ids.is_empty() {
            return;
        }
        self.unregister_dynamic_many(ids);
        let Some(tree) = self.tree.get() else {
            return;
        };
        let mut by_system: std::collections::BTreeMap<&str, std::collections::HashSet<&str>> =
            Default::default();
        for id in ids {
            let names = by_system.entry(&id.0.def.system).or_default();
            if has_path(&id.0.def.name) {
                names.insert(&id.0.def.name);
            }
        }
        let _g = self.dyn_tree.lock_ok();
        for arr in self.arrays.read_ok().iter().flatten() {
            for (system, names) in &by_system {
                let sys = format!("{}/events/{system}", arr.base());
                tree.remove_children(&sys, names);
                if !tree.has_subdir(&sys) {
                    tree.remove(&sys);
                }
            }
        }
    }
}
