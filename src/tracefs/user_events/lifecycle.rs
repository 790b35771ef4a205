//! User events and the processes that hold their enablers: what fork, exec
//! and exit (the kernel's process events) do to the enablers, and the
//! reaper that keeps them in step.

use super::*;

impl UserEvents {
    /// Drop the enablers whose address space is gone, among those of
    /// process `tgid` (all if None); with `exec`, also every enabler
    /// copied into `tgid` by fork. The probes run without the lock.
    pub(super) fn reap(&self, tgid: Option<u32>, exec: bool) {
        let cand: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            match tgid {
                // Every process's exit comes here: one without enablers
                // costs a lookup.
                Some(t) => st.enablers.of(t),
                None => st.enablers.iter().cloned().collect(),
            }
        };
        if cand.is_empty() {
            return;
        }
        let mut verdict: Vec<(*const Mm, bool)> = Vec::new();
        let mut dead = Vec::new();
        for en in cand {
            let key = Arc::as_ptr(&en.mm);
            let gone = match verdict.iter().find(|(k, _)| *k == key) {
                Some((_, g)) => *g,
                None => {
                    let g = en.mm.is_stuck() || !en.mm.alive();
                    verdict.push((key, g));
                    g
                }
            };
            if gone || (exec && en.forked) {
                dead.push(en);
            }
        }
        let mut st = self.state.lock_ok();
        self.drop_enablers(&mut st, &dead);
    }

    /// The process events, subscribed to on first use. Their thread handles
    /// them as they come; [`UserEvents::drain_procs`] does it on the
    /// caller's thread when order matters.
    pub(super) fn procs(&self) -> Option<&ProcEvents> {
        let mut subscribed = false;
        let procs = self
            .procs
            .get_or_init(|| match ProcEvents::listen() {
                Ok(p) => {
                    subscribed = true;
                    Some(p)
                }
                Err(e) => {
                    warn!(
                        "no process events ({e}): enable bits are not copied to forked \
                         children, and exits and execs are found by polling"
                    );
                    None
                }
            })
            .as_ref();
        // The thread starts only once `procs` is set: started from inside
        // `get_or_init`, it could find it unset and end at once, and then
        // exits went unnoticed until another registration drained them.
        if subscribed {
            let me = self.me.clone();
            let _ = std::thread::Builder::new()
                .name("proc-events".into())
                .spawn(move || loop {
                    let Some(ue) = me.upgrade() else { return };
                    ue.drain_procs();
                    let Some(Some(p)) = ue.procs.get() else {
                        return;
                    };
                    // Not holding `ue` while waiting would be tidier, but
                    // the registry lives as long as the mount anyway.
                    p.wait(Duration::from_secs(1));
                });
        }
        procs
    }

    /// Apply every process event the kernel has sent so far.
    pub(super) fn drain_procs(&self) {
        let Some(Some(p)) = self.procs.get() else {
            return;
        };
        // Taking events off the socket and applying them is one step: a
        // drain that finds the socket empty while another thread still
        // applies what it took would return too early.
        let _apply = self.applying.lock_ok();
        let mut events = Vec::new();
        let mut lost = false;
        p.drain(&mut |e| events.push(e), &mut || lost = true);
        if lost {
            warn!("process events were lost (queue overflow): checking every producer");
            self.reap(None, false);
        }
        for e in events {
            match e {
                ProcEvent::Fork {
                    parent_tgid,
                    child_pid,
                    child_tgid,
                    ts_ns,
                    ..
                } if child_pid == child_tgid => self.forked(parent_tgid, child_tgid, ts_ns),
                ProcEvent::Fork { .. } => {}
                ProcEvent::Exec { tgid, .. } => self.reap(Some(tgid), true),
                ProcEvent::Exit { tgid, .. } => self.reap(Some(tgid), false),
            }
        }
    }

    /// Process `parent` forked `child`: copy the parent's enablers into the
    /// child's address space, as the kernel's `user_events_fork` does, and
    /// bring the copies up to date.
    pub(super) fn forked(&self, parent: u32, child: u32, ts_ns: u64) {
        let parents: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            st.enablers
                .of(parent)
                .into_iter()
                .filter(|en| !en.mm.is_stuck())
                .collect()
        };
        // One live address space of the parent (a dead one, from before an
        // exec, is not what the child copied).
        let Some(pmm) = parents.iter().map(|en| en.mm.clone()).find(|mm| mm.alive()) else {
            return;
        };
        let Some(cmm) = pmm.pin_child(child) else {
            debug!(
                parent,
                child, "forked child not followed: shares the address space, exec'd or gone"
            );
            return;
        };
        let copies: Vec<Arc<Enabler>> = parents
            .iter()
            .filter(|en| en.mm.alive())
            .map(|en| {
                Arc::new(Enabler::new(
                    cmm.clone(),
                    en.addr,
                    en.bit,
                    en.size,
                    en.ev.clone(),
                    true,
                ))
            })
            .collect();
        {
            let mut st = self.state.lock_ok();
            for en in &copies {
                if st.enablers.len() >= MAX_ENABLERS {
                    warn!(
                        child,
                        "user_events: enable bits at their limit; fork copy dropped"
                    );
                    en.removed.store(true, Ordering::SeqCst);
                    continue;
                }
                if let Some(i) = st.index_of(&en.ev) {
                    st.events[i].enablers += 1;
                    st.events[i].free_at = None;
                    st.enablers.push(en.clone());
                } else {
                    en.removed.store(true, Ordering::SeqCst);
                }
            }
        }
        let copies: Vec<Arc<Enabler>> = copies
            .into_iter()
            .filter(|e| !e.removed.load(Ordering::SeqCst))
            .collect();
        let failed = sync_bits(&copies);
        let mut st = self.state.lock_ok();
        self.drop_enablers(&mut st, &failed);
        drop(st);
        // Process event timestamps are CLOCK_MONOTONIC.
        let lag_us =
            crate::base::clock::clock_ns(libc::CLOCK_MONOTONIC).saturating_sub(ts_ns) / 1000;
        debug!(
            parent,
            child,
            copies = copies.len(),
            lag_us,
            "fork: enablers copied {lag_us} µs after the fork"
        );
    }

    /// Free events whose time has come, every 100 ms while any is
    /// scheduled (and, without process events, drop the enablers of exited
    /// processes). The thread ends when nothing is left to do.
    pub(super) fn start_reaper(&self, _st: &State) {
        if self.reaper.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.me.clone();
        let _ = std::thread::Builder::new()
            .name("user_events-reaper".into())
            .spawn(move || loop {
                std::thread::sleep(Duration::from_millis(100));
                let Some(ue) = me.upgrade() else { return };
                let polling = !matches!(ue.procs.get(), Some(Some(_)));
                if polling {
                    ue.reap(None, false);
                }
                let mut st = ue.state.lock_ok();
                ue.free_due(&mut st);
                let pending = st.events.iter().any(|e| e.free_at.is_some());
                if !pending && (!polling || st.enablers.is_empty()) {
                    // Decided under the lock that schedules frees, so a
                    // later `maybe_free` starts a new thread.
                    ue.reaper.store(false, Ordering::SeqCst);
                    return;
                }
            });
    }
}
