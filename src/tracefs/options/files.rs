//! The options' files: `trace_options` (every option, `no` before those
//! that are off; a write sets one) and one file an option under
//! `options/`, with what setting an option does beyond its flag, as
//! `kernel/trace/trace.c` has them (`tracing_trace_options_write()`,
//! `trace_options_core_write()`, `set_tracer_flag()`).

use std::sync::atomic::Ordering;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::{LockExt, RwLockExt};
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, bool_line, Ctl, MODE_WRITE};
use crate::tracefs::facility::Arr;
use crate::tracefs::options::{OPTIONS, OPT_PRINTK_DEST, TOP_ONLY_OPTIONS};
use crate::tracefs::parse::enable_value;

impl Arr {
    /// Set or clear option `idx` of [`OPTIONS`] in this array, with what
    /// the option changes besides its flag.
    pub(crate) fn set_option(&self, idx: usize, on: bool) -> SysResult<()> {
        if idx == OPT_PRINTK_DEST {
            return self.set_printk_dest(on);
        }
        if OPTIONS[idx].0 == "test_nop_refuse" {
            // The nop tracer's own test option: its set_flag refuses every
            // change (trace_nop.c, nop_set_flag).
            return Err(Errno::EINVAL);
        }
        self.options.lock_ok()[idx] = on;
        match OPTIONS[idx].0 {
            "event-fork" => {
                self.event_fork.store(on, Ordering::Relaxed);
                if let (true, Some(h)) = (on, self.t.on_event_fork.get()) {
                    h();
                }
            }
            "irq-info" => self.irq_info.store(on, Ordering::Relaxed),
            "stacktrace" => self.stacktrace.store(on, Ordering::Relaxed),
            "record-cmd" => self.record_cmd.store(on, Ordering::Relaxed),
            "record-tgid" => self.record_tgid.store(on, Ordering::Relaxed),
            "overwrite" => self.overwrite.store(on, Ordering::Relaxed),
            _ => {}
        }
        Ok(())
    }

    /// `trace_printk_dest`, set in exactly one array, as the kernel keeps
    /// it: setting it in an array takes it from the one that had it;
    /// clearing it in an instance gives it back to the top level, which
    /// cannot clear it itself (EINVAL).
    fn set_printk_dest(&self, on: bool) -> SysResult<()> {
        let mut dest = self.t.printk_dest.lock_ok();
        let was = self.options.lock_ok()[OPT_PRINTK_DEST];
        if was == on {
            return Ok(());
        }
        if on {
            if let Some(Some(old)) = self.t.arrays.read_ok().get(*dest) {
                old.options.lock_ok()[OPT_PRINTK_DEST] = false;
            }
            *dest = self.slot;
        } else {
            if *dest == 0 {
                return Err(Errno::EINVAL);
            }
            *dest = 0;
            self.t.top.options.lock_ok()[OPT_PRINTK_DEST] = true;
        }
        self.options.lock_ok()[OPT_PRINTK_DEST] = on;
        Ok(())
    }
}

/// `trace_options` and `options/*` of `x`.
pub(crate) fn install(x: &Arr, tree: &Tree) {
    let b = x.base();
    let (tr, tw) = (x.clone(), x.clone());
    add_ctl(
        tree,
        &format!("{b}/trace_options"),
        Ctl::new(MODE_WRITE)
            .rs(move || {
                let o = tr.options.lock_ok();
                OPTIONS
                    .iter()
                    .zip(o.iter())
                    .map(|((n, _), on)| {
                        if *on {
                            format!("{n}\n")
                        } else {
                            format!("no{n}\n")
                        }
                    })
                    .collect()
            })
            .w(move |data, _| {
                let s = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
                let s = s
                    .trim_end_matches('\0')
                    .trim_matches(|c: char| c.is_ascii_whitespace());
                let (name, on) = match s.strip_prefix("no") {
                    Some(n) if OPTIONS.iter().any(|o| o.0 == n) => (n, false),
                    _ => (s, true),
                };
                let idx = OPTIONS
                    .iter()
                    .position(|o| o.0 == name)
                    .ok_or(Errno::EINVAL)?;
                tw.set_option(idx, on)?;
                Ok(data.len() as u32)
            }),
    );
    for (idx, (name, _)) in OPTIONS.iter().enumerate() {
        if !x.is_top() && TOP_ONLY_OPTIONS.contains(name) {
            continue;
        }
        let (tr, tw) = (x.clone(), x.clone());
        add_ctl(
            tree,
            &format!("{b}/options/{name}"),
            Ctl::new(MODE_WRITE)
                .rs(move || bool_line(tr.options.lock_ok()[idx]))
                .w(move |data, _| {
                    let on = enable_value(data)?;
                    // As trace_options_write and trace_options_core_write:
                    // a value the option already has changes nothing.
                    if tw.options.lock_ok()[idx] != on {
                        tw.set_option(idx, on)?;
                    }
                    Ok(data.len() as u32)
                }),
        );
    }
}
