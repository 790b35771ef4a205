//! The serving threads' watchdog: no caller can take a thread for good.
//!
//! Every thread that serves requests (the request threads and the service
//! thread) has a [`Slot`] that shows the request it is on, since when, and
//! whether it is inside an access to the caller's memory
//! ([`crate::base::procmem::watch_this_thread`]). Every 100 ms the watchdog looks:
//!
//! * A caller-memory access older than [`REMOTE_LIMIT_MS`]: the caller's page
//!   is one that nobody serves (a userfaultfd page, or a mapping of a
//!   stalled FUSE mount that the pre-access check did not see because the
//!   caller remapped it meanwhile). The request is answered EFAULT, as the
//!   kernel answers a bad address, and a new thread takes the old one's
//!   place; the old one ends when (if ever) its access returns.
//! * Any request older than [`SLOW_LIMIT_MS`] (say, one waiting for a lock that
//!   such a stuck thread holds): a new thread takes its place, and the slow
//!   one ends when it is done. Its request is not answered here.
//!
//! Replacements are bounded ([`MAX_REPLACEMENTS`]); past that the watchdog
//! only logs.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::base::procmem::now_ms;
use crate::base::sync::LockExt;

/// How long a caller-memory access may take before its request is failed.
pub const REMOTE_LIMIT_MS: u64 = 800;
/// How many times [`REMOTE_LIMIT_MS`] a caller-memory access may take while
/// its thread is runnable (it only waits for a CPU).
pub const RUNNABLE_GRACE: u64 = 10;
/// How long any request may take before another thread takes its place.
pub const SLOW_LIMIT_MS: u64 = 10_000;
/// Threads the watchdog may start over a session's life.
pub const MAX_REPLACEMENTS: usize = 64;

/// What one serving thread is doing.
pub struct Slot {
    /// [`now_ms`] when the current request began; 0 when idle.
    since: AtomicU64,
    /// The request being worked on (a parked one, on the service thread).
    unique: AtomicU64,
    /// [`now_ms`] when a caller-memory access began; 0 outside one.
    remote: Arc<AtomicU64>,
    /// Replaced: the thread ends after its current request.
    abandoned: AtomicBool,
    /// The service thread (else a request thread).
    pub service: bool,
    /// The io_uring queue a ring thread serves (`u32::MAX`: not a ring thread).
    pub ring: AtomicU32,
    /// Still counted among the session's live request threads.
    counted: AtomicBool,
    /// The thread's id, to tell one asleep in a page from one waiting for
    /// a CPU.
    tid: std::sync::atomic::AtomicI32,
}

impl Slot {
    /// The request being worked on now.
    pub fn unique(&self) -> u64 {
        self.unique.load(Ordering::SeqCst)
    }

    /// Stop counting the thread as live (once: true the first time). A
    /// thread is counted out when it ends or when it is replaced, whichever
    /// comes first, so that a thread that never comes back does not keep
    /// the session from ending.
    pub fn count_out(&self) -> bool {
        self.counted.swap(false, Ordering::SeqCst)
    }

    /// Whether the thread was replaced and must end.
    pub fn abandoned(&self) -> bool {
        self.abandoned.load(Ordering::SeqCst)
    }

    /// A request begins.
    pub fn begin(&self, unique: u64) {
        self.unique.store(unique, Ordering::SeqCst);
        self.since.store(now_ms(), Ordering::SeqCst);
    }

    /// The request is done.
    pub fn end(&self) {
        self.since.store(0, Ordering::SeqCst);
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Slot>>> = const { RefCell::new(None) };
}

/// Say which request this thread works on now (a parked one being retried).
pub fn working_on(unique: u64) {
    CURRENT.with(|c| {
        if let Some(s) = &*c.borrow() {
            s.unique.store(unique, Ordering::SeqCst);
        }
    });
}

/// What the watchdog decided about one slot.
pub enum Verdict {
    /// Answer this request EFAULT and replace the thread.
    Fail(u64),
    /// Replace the thread.
    Replace,
}

/// The slots of a session's serving threads.
#[derive(Default)]
pub struct Watchdog {
    slots: Mutex<Vec<Arc<Slot>>>,
    replaced: AtomicUsize,
}

impl Watchdog {
    /// Register the calling thread; its slot.
    pub fn enter(&self, service: bool) -> Arc<Slot> {
        let slot = Arc::new(Slot {
            since: AtomicU64::new(0),
            unique: AtomicU64::new(0),
            remote: Arc::new(AtomicU64::new(0)),
            abandoned: AtomicBool::new(false),
            service,
            ring: AtomicU32::new(u32::MAX),
            counted: AtomicBool::new(true),
            // SAFETY: gettid has no arguments and cannot fail.
            tid: std::sync::atomic::AtomicI32::new(unsafe { libc::gettid() }),
        });
        crate::base::procmem::watch_this_thread(slot.remote.clone());
        CURRENT.with(|c| *c.borrow_mut() = Some(slot.clone()));
        self.slots.lock_ok().push(slot.clone());
        slot
    }

    /// The calling thread ends.
    pub fn leave(&self, slot: &Arc<Slot>) {
        self.slots.lock_ok().retain(|s| !Arc::ptr_eq(s, slot));
    }

    /// Look at every slot; the threads to fail or replace (each marked
    /// abandoned, so it is reported once).
    pub fn check(&self) -> Vec<(Arc<Slot>, Verdict)> {
        self.check_at(now_ms())
    }

    fn check_at(&self, now: u64) -> Vec<(Arc<Slot>, Verdict)> {
        let mut out = Vec::new();
        for s in self.slots.lock_ok().iter() {
            if s.abandoned() {
                continue;
            }
            let remote = s.remote.load(Ordering::SeqCst);
            let since = s.since.load(Ordering::SeqCst);
            let in_remote = now.saturating_sub(remote);
            // A thread still runnable (waiting for a CPU on a busy machine,
            // not asleep in a page nobody serves) is given up to ten times
            // the limit (issue 37).
            let waits_for_cpu = || {
                in_remote <= REMOTE_LIMIT_MS * RUNNABLE_GRACE
                    && crate::base::procmem::thread_state(s.tid.load(Ordering::Relaxed))
                        == Some('R')
            };
            let verdict = if remote != 0 && in_remote > REMOTE_LIMIT_MS && !waits_for_cpu() {
                Verdict::Fail(s.unique())
            } else if since != 0 && now.saturating_sub(since) > SLOW_LIMIT_MS {
                Verdict::Replace
            } else {
                continue;
            };
            s.abandoned.store(true, Ordering::SeqCst);
            out.push((s.clone(), verdict));
        }
        out
    }

    /// Count one replacement; false once [`MAX_REPLACEMENTS`] are used.
    pub fn may_replace(&self) -> bool {
        self.replaced.fetch_add(1, Ordering::SeqCst) < MAX_REPLACEMENTS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stuck_accesses_fail_and_slow_requests_are_replaced() {
        let w = Arc::new(Watchdog::default());
        let w2 = w.clone();
        let slot = std::thread::spawn(move || w2.enter(false)).join().unwrap();
        assert!(w.check().is_empty());
        slot.begin(42);
        let t = slot.since.load(Ordering::SeqCst);
        slot.remote.store(t, Ordering::SeqCst);
        assert!(w.check_at(t + REMOTE_LIMIT_MS).is_empty());
        let v = w.check_at(t + REMOTE_LIMIT_MS + 1);
        assert!(matches!(v.as_slice(), [(_, Verdict::Fail(42))]));
        assert!(slot.abandoned());
        // Reported once.
        assert!(w.check_at(t + SLOW_LIMIT_MS + 1).is_empty());
        // A slow request (no access under way) is only replaced.
        let w3 = w.clone();
        let slow = std::thread::spawn(move || w3.enter(true)).join().unwrap();
        slow.begin(7);
        let t = slow.since.load(Ordering::SeqCst);
        assert!(w.check_at(t + SLOW_LIMIT_MS).is_empty());
        let v = w.check_at(t + SLOW_LIMIT_MS + 1);
        assert!(matches!(v.as_slice(), [(s, Verdict::Replace)] if s.service));
        w.leave(&slow);
        w.leave(&slot);
        assert!(w.slots.lock_ok().is_empty());
    }
}
