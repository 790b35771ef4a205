//! Watching remote accesses: each thread can show when its current access
//! to another process's memory began, so a watchdog can tell a stuck one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

thread_local! {
    /// Where this thread shows the start of a remote access under way.
    static WATCH: std::cell::RefCell<Option<Arc<AtomicU64>>> = const { std::cell::RefCell::new(None) };
}

/// Milliseconds on a process-wide monotonic clock (never 0).
pub fn now_ms() -> u64 {
    static T0: OnceLock<Instant> = OnceLock::new();
    T0.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Show this thread's remote accesses in `flag`: [`now_ms`] at the start of
/// each access under way, 0 otherwise. A watchdog reading it can answer a
/// request whose caller's page never comes (see `fuse::watchdog`).
pub fn watch_this_thread(flag: Arc<AtomicU64>) {
    WATCH.with(|w| *w.borrow_mut() = Some(flag));
}

/// Marks a remote access on a watched thread for as long as it lives.
pub(super) struct AccessGuard(Option<Arc<AtomicU64>>);

impl AccessGuard {
    pub(super) fn enter() -> AccessGuard {
        let flag = WATCH.with(|w| w.borrow().clone());
        if let Some(f) = &flag {
            f.store(now_ms(), Ordering::SeqCst);
        }
        AccessGuard(flag)
    }
}

impl Drop for AccessGuard {
    fn drop(&mut self) {
        if let Some(f) = &self.0 {
            f.store(0, Ordering::SeqCst);
        }
    }
}
