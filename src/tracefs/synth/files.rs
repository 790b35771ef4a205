//! The `synthetic_events` file (top level only, as in the kernel) and what
//! `dynamic_events` does with `s:` lines: creating and removing synthetic
//! events, their `events/synthetic/<name>/` directories and their parse
//! errors in the top-level `error_log`.

use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::Tree;
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_WRITE};
use crate::tracefs::facility::{SynthEntry, Tracing};
use crate::tracefs::synth::{self, CmdError, Command, SynthDef, SynthErr};

/// The longest line `trace_parse_run_command()` takes (`WRITE_BUFSIZE`
/// less the newline and the NUL).
const LINE_MAX: usize = 4096 - 2;

/// Add `synthetic_events`.
pub(crate) fn install(t: &Arc<Tracing>, tree: &Arc<Tree>) {
    let (tr, tw, tc) = (t.clone(), t.clone(), t.clone());
    add_ctl(
        tree,
        "tracing/synthetic_events",
        Ctl::new(MODE_WRITE)
            .rs(move || tr.synth_text())
            .w(move |data, _| {
                run_lines(data, |line| tw.synth_command(line))?;
                Ok(data.len() as u32)
            })
            .tf(move || {
                // `dyn_events_release_all`: the marked arrays are reset
                // whether the events went or one was busy.
                let r = tc.synth_clear();
                tc.reset_cleared();
                r
            }),
    );
}

/// Run each line of a write (`trace_parse_run_command()`): `#` starts a
/// comment; the first failing line fails the write.
pub(crate) fn run_lines(data: &[u8], mut f: impl FnMut(&str) -> SysResult<()>) -> SysResult<()> {
    let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
    for raw in data[..end].split(|&c| c == b'\n') {
        if raw.len() > LINE_MAX {
            return Err(Errno::EINVAL);
        }
        let line = crate::base::bytestr::text(raw);
        let line = line.split('#').next().unwrap_or("");
        f(line)?;
    }
    Ok(())
}

impl Tracing {
    /// Log a synthetic event command error to the top-level `error_log`.
    fn synth_err(&self, cmd: &str, e: &CmdError) {
        if let Some((err, pos)) = e.log {
            self.top
                .error_log
                .log(self.now_mono(), "synthetic_events", cmd, err.text(), pos);
        }
    }

    /// Carry out a parsed command; `cmd` is the text errors are logged with.
    fn synth_run(self: &Arc<Self>, cmd: &str, parsed: Result<Command, CmdError>) -> SysResult<()> {
        match parsed {
            Err(e) => {
                self.synth_err(cmd, &e);
                Err(e.errno)
            }
            Ok(Command::Nothing) => Ok(()),
            Ok(Command::Delete(name)) => self.synth_delete(&name),
            Ok(Command::Create(def)) => self.synth_create(cmd, def),
        }
    }

    /// One line written to `synthetic_events`.
    pub(crate) fn synth_command(self: &Arc<Self>, line: &str) -> SysResult<()> {
        self.synth_run(synth::command_text(line), synth::parse_command(line))
    }

    /// One line written to `dynamic_events`, if it defines a synthetic event
    /// (`s:`); `None` leaves it to the other kinds.
    pub(crate) fn synth_dyn_command(self: &Arc<Self>, line: &str) -> Option<SysResult<()>> {
        let parsed = synth::parse_dyn_command(line)?;
        Some(self.synth_run(synth::command_text(line), parsed))
    }

    fn synth_create(self: &Arc<Self>, cmd: &str, def: SynthDef) -> SysResult<()> {
        let mut list = self.synth.lock_ok();
        if list.iter().any(|e| e.def.name == def.name) {
            drop(list);
            let pos = cmd.find(def.name.as_str()).unwrap_or(0);
            self.synth_err(
                cmd,
                &CmdError {
                    errno: Errno::EEXIST,
                    log: Some((SynthErr::EventExists, pos)),
                },
            );
            return Err(Errno::EEXIST);
        }
        let def = Arc::new(def);
        let d = def.clone();
        let id = self.add_dynamic(move |n| d.event_def(n), Arc::new(|| {}))?;
        list.push(SynthEntry { def, id, refs: 0 });
        Ok(())
    }

    /// Whether a synthetic event is in use: hist triggers use it, or it is
    /// enabled or armed in some trace array.
    fn synth_busy(e: &SynthEntry) -> bool {
        e.refs > 0 || e.id.is_enabled()
    }

    /// Remove the synthetic event `name`: `ENOENT` if there is none,
    /// `EBUSY` while it is in use.
    pub(crate) fn synth_delete(&self, name: &str) -> SysResult<()> {
        let mut list = self.synth.lock_ok();
        let i = list
            .iter()
            .position(|e| e.def.name == name)
            .ok_or(Errno::ENOENT)?;
        if Self::synth_busy(&list[i]) || self.eprobe_attached(&list[i].id) {
            return Err(Errno::EBUSY);
        }
        let e = list.remove(i);
        drop(list);
        self.remove_dynamic(&e.id);
        Ok(())
    }

    /// `-:[synthetic/]name` in `dynamic_events`: `None` when no synthetic
    /// event matches.
    pub(crate) fn synth_release(&self, system: Option<&str>, event: &str) -> Option<SysResult<()>> {
        if system.is_some_and(|s| s != synth::SYSTEM) {
            return None;
        }
        if !self.synth.lock_ok().iter().any(|e| e.def.name == event) {
            return None;
        }
        Some(self.synth_delete(event))
    }

    /// Remove every synthetic event, or none (`EBUSY`) if one is in use
    /// (`synthetic_events` opened with `O_TRUNC`).
    pub(crate) fn synth_clear(&self) -> SysResult<()> {
        let mut list = self.synth.lock_ok();
        if list
            .iter()
            .any(|e| Self::synth_busy(e) || self.eprobe_attached(&e.id))
        {
            return Err(Errno::EBUSY);
        }
        let gone = std::mem::take(&mut *list);
        drop(list);
        let ids: Vec<_> = gone.into_iter().map(|e| e.id).collect();
        self.remove_dynamic_many(&ids);
        Ok(())
    }

    /// Whether any synthetic event is in use.
    pub(crate) fn synth_any_busy(&self) -> bool {
        self.synth.lock_ok().iter().any(Self::synth_busy)
    }

    /// `synthetic_events`: one line per event.
    pub(crate) fn synth_text(&self) -> String {
        self.synth.lock_ok().iter().map(|e| e.def.show()).collect()
    }

    /// The synthetic events' lines of `dynamic_events`.
    pub(crate) fn synth_dyn_text(&self) -> String {
        self.synth
            .lock_ok()
            .iter()
            .map(|e| format!("s:{}/{}", synth::SYSTEM, e.def.show()))
            .collect()
    }
}
