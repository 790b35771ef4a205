//! Surviving panics: poison-tolerant locking, and the message of a caught
//! panic.
//!
//! A panic in one request path answers that request with `EIO` and leaves the
//! daemon serving (issue 13). A lock held during such a panic is poisoned, but
//! the state it guards is still the daemon's state: every later user takes the
//! guard anyway rather than turning one failed request into a dead mount.

use std::sync::{
    Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard,
};
use std::time::Duration;

/// Locking a [`Mutex`] that ignores poisoning.
pub trait LockExt<T: ?Sized> {
    /// Like [`Mutex::lock`], but a poisoned mutex yields its guard.
    fn lock_ok(&self) -> MutexGuard<'_, T>;
}

impl<T: ?Sized> LockExt<T> for Mutex<T> {
    fn lock_ok(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Locking an [`RwLock`] that ignores poisoning.
pub trait RwLockExt<T: ?Sized> {
    /// Like [`RwLock::read`], but a poisoned lock yields its guard.
    fn read_ok(&self) -> RwLockReadGuard<'_, T>;
    /// Like [`RwLock::write`], but a poisoned lock yields its guard.
    fn write_ok(&self) -> RwLockWriteGuard<'_, T>;
}

impl<T: ?Sized> RwLockExt<T> for RwLock<T> {
    fn read_ok(&self) -> RwLockReadGuard<'_, T> {
        self.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write_ok(&self) -> RwLockWriteGuard<'_, T> {
        self.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Waiting on a [`Condvar`] that ignores poisoning.
pub trait CondvarExt {
    /// Like [`Condvar::wait`], but a poisoned mutex yields its guard.
    fn wait_ok<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T>;
    /// Like [`Condvar::wait_timeout`] (dropping the timeout flag), but a
    /// poisoned mutex yields its guard.
    fn wait_timeout_ok<'a, T>(&self, guard: MutexGuard<'a, T>, dur: Duration) -> MutexGuard<'a, T>;
}

impl CondvarExt for Condvar {
    fn wait_ok<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.wait(guard).unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_timeout_ok<'a, T>(&self, guard: MutexGuard<'a, T>, dur: Duration) -> MutexGuard<'a, T> {
        self.wait_timeout(guard, dur)
            .unwrap_or_else(PoisonError::into_inner)
            .0
    }
}

/// The message of a caught panic (`panic!` with a literal or a format), for
/// the log line of the request it failed.
pub fn panic_message(p: &(dyn std::any::Any + Send)) -> &str {
    p.downcast_ref::<&str>()
        .copied()
        .or_else(|| p.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("non-string panic payload")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::panic::{catch_unwind, AssertUnwindSafe};

    #[test]
    fn poisoned_locks_still_serve() {
        let m = Mutex::new(1);
        let l = RwLock::new(2);
        let _ = catch_unwind(AssertUnwindSafe(|| {
            let _g = m.lock_ok();
            let _w = l.write_ok();
            panic!("poison");
        }));
        assert!(m.is_poisoned() && l.is_poisoned());
        *m.lock_ok() += 1;
        *l.write_ok() += 1;
        assert_eq!((*m.lock_ok(), *l.read_ok()), (2, 3));
    }
}
