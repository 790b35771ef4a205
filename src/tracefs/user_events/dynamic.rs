//! The `dynamic_events` file's side of user events (`u:` lines, `-:`
//! removals and truncation), with the synthetic events and event probes
//! it also lists and removes, as the kernel's trace_dynevent.c dispatches
//! to each kind of dynamic event.

use super::*;

impl UserEvents {
    /// The `dynamic_events` text: the user events, then the synthetic
    /// events.
    pub(super) fn dynamic_text(&self) -> String {
        let st = self.state.lock_ok();
        let mut s: String = st
            .events
            .iter()
            .map(|e| format!("u:{}{}\n", e.ev.base, fields_text(&e.ev.fields)))
            .collect();
        drop(st);
        if let Some(t) = self.t.upgrade() {
            s.push_str(&t.synth_dyn_text());
            s.push_str(&t.eprobe_text());
        }
        s
    }

    /// Run one `dynamic_events` line ([`crate::base::bytestr`] text).
    pub(super) fn dynamic_line(&self, line: &str, caller: &Caller) -> SysResult<()> {
        if line.chars().all(is_c_space) {
            return Ok(());
        }
        if line.starts_with('-') || line.starts_with('!') {
            return self.dynamic_delete(line, caller);
        }
        if let Some(t) = self.t.upgrade() {
            if let Some(r) = t.synth_dyn_command(line) {
                return r;
            }
            if let Some(r) = t.eprobe_command(line) {
                return r;
            }
        }
        let Some(rest) = line.strip_prefix("u:") else {
            // No other dynamic event type here.
            return Err(Errno::EINVAL);
        };
        let raw = split_command(rest.trim_start_matches(is_c_space));
        if raw.flags.is_some() {
            return Err(Errno::EINVAL);
        }
        if !has_perfmon(caller.pid) {
            return Err(Errno::EPERM);
        }
        let mut st = self.state.lock_ok();
        // An existing event is found and left as it is (an event
        // registered without PERSIST stays one that goes when unused).
        let (i, new) = self.find_or_create(&mut st, &raw, false)?;
        if new {
            st.events[i].persistent = true;
        }
        Ok(())
    }

    /// `-:[system/]name [fields]` or `!x:[system/]name [fields]`.
    pub(super) fn dynamic_delete(&self, line: &str, caller: &Caller) -> SysResult<()> {
        let argv = argv_split(line);
        let first = argv.first().copied().unwrap_or("");
        let target = if let Some(r) = first.strip_prefix('-') {
            r.strip_prefix(':').ok_or(Errno::EINVAL)?
        } else {
            let c = first.find(':').ok_or(Errno::EINVAL)?;
            &first[c + 1..]
        };
        let (system, event) = match target.split_once('/') {
            Some((s, e)) => (Some(s), e),
            None => (None, target),
        };
        if system.is_none() && event.is_empty() {
            return Err(Errno::EINVAL);
        }
        // Once parsed, the kernel's `dyn_event_release` resets the arrays
        // marked by this or an earlier removal, whatever the outcome.
        let r = self.dynamic_release(system, event, &argv, caller);
        if let Some(t) = self.t.upgrade() {
            t.reset_cleared();
        }
        r
    }

    /// The removal of a parsed `-:` or `!` line (see
    /// [`UserEvents::dynamic_delete`]).
    fn dynamic_release(
        &self,
        system: Option<&str>,
        event: &str,
        argv: &[&str],
        caller: &Caller,
    ) -> SysResult<()> {
        if let Some(t) = self.t.upgrade() {
            if let Some(r) = t.eprobe_release(system, event, &argv[1.min(argv.len())..]) {
                return r;
            }
            if let Some(r) = t.synth_release(system, event) {
                return r;
            }
        }
        if system.is_some_and(|s| s != SYSTEM && s != SYSTEM_MULTI) {
            return Err(Errno::ENOENT);
        }
        // The words as they are (no space put after `;`, unlike a
        // registration's).
        let want = &argv[1.min(argv.len())..];
        let mut st = self.state.lock_ok();
        let mut found = false;
        let mut i = 0;
        while i < st.events.len() {
            let e = &st.events[i];
            let hit = e.ev.base == event && fields_match_argv(&e.ev.fields, want);
            if !hit {
                i += 1;
                continue;
            }
            found = true;
            if e.busy() {
                return Err(Errno::EBUSY);
            }
            if e.persistent && !has_perfmon(caller.pid) {
                return Err(Errno::EPERM);
            }
            self.destroy(&mut st, i);
        }
        if found {
            Ok(())
        } else {
            Err(Errno::ENOENT)
        }
    }

    /// `dynamic_events` opened with O_TRUNC: delete every event, or none if
    /// any is busy. The arrays marked by this or an earlier removal are
    /// reset either way, as the kernel's `dyn_events_release_all` does.
    pub(super) fn dynamic_clear(&self, caller: &Caller) -> SysResult<()> {
        let r = self.dynamic_clear_all(caller);
        if let Some(t) = self.t.upgrade() {
            t.reset_cleared();
        }
        r
    }

    fn dynamic_clear_all(&self, caller: &Caller) -> SysResult<()> {
        let t = self.t.upgrade();
        let mut st = self.state.lock_ok();
        if st.events.iter().any(|e| e.busy())
            || t.as_ref()
                .is_some_and(|t| t.synth_any_busy() || t.eprobe_any_busy())
        {
            return Err(Errno::EBUSY);
        }
        if st.events.iter().any(|e| e.persistent) && !has_perfmon(caller.pid) {
            return Err(Errno::EPERM);
        }
        self.destroy_all(&mut st);
        drop(st);
        match t {
            Some(t) => {
                t.eprobe_clear();
                t.synth_clear()
            }
            None => Ok(()),
        }
    }
}
