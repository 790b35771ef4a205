//! Global allowances for what callers make the daemon hold: memory for
//! open files' text snapshots and usbmon rings, and the number of usbmon
//! readers. The kernel bounds these by its own memory (an allocation that
//! fails is ENOMEM); monfs, one process serving everyone, bounds them
//! explicitly so that no caller can exhaust the daemon's memory. Past a
//! limit the request gets ENOMEM, as a failed allocation would give in the
//! kernel, and the log says which limit (at most once a second per limit).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tracing::warn;

use crate::base::errno::{Errno, SysResult};

/// A global allowance of some quantity (bytes, or readers).
pub struct Budget {
    what: &'static str,
    limit: usize,
    used: AtomicUsize,
    /// When a refusal was last logged (ms since the epoch).
    logged_ms: AtomicU64,
}

/// A share of a [`Budget`], given back on drop.
pub struct Grant {
    budget: &'static Budget,
    n: usize,
}

impl Budget {
    /// An allowance of `limit` units of `what` (named in log lines).
    pub const fn new(what: &'static str, limit: usize) -> Budget {
        Budget {
            what,
            limit,
            used: AtomicUsize::new(0),
            logged_ms: AtomicU64::new(0),
        }
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Units in use now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Take `n` units, or ENOMEM (logged) if that would pass the limit.
    pub fn take(&'static self, n: usize) -> SysResult<Grant> {
        self.reserve(n)?;
        Ok(Grant { budget: self, n })
    }

    fn reserve(&self, n: usize) -> SysResult<()> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let next = cur.checked_add(n).filter(|&v| v <= self.limit);
            let Some(next) = next else {
                self.refused(n);
                return Err(Errno::ENOMEM);
            };
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(v) => cur = v,
            }
        }
    }

    fn refused(&self, n: usize) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let last = self.logged_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 1000
            && self
                .logged_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            warn!(
                limit = self.limit,
                in_use = self.used(),
                asked = n,
                "limit of {} reached: ENOMEM",
                self.what
            );
        }
    }
}

impl Grant {
    /// Units held.
    pub fn size(&self) -> usize {
        self.n
    }

    /// Hold `n` units instead; on ENOMEM (logged) the grant is unchanged.
    pub fn resize(&mut self, n: usize) -> SysResult<()> {
        if n > self.n {
            self.budget.reserve(n - self.n)?;
        } else {
            self.budget.used.fetch_sub(self.n - n, Ordering::AcqRel);
        }
        self.n = n;
        Ok(())
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.n, Ordering::AcqRel);
    }
}

/// Bytes of text held by open tracefs files, taken when they were opened
/// (`trace`, `available_events`, `format`, ...; as `seq_file` buffers are
/// in the kernel): 512 MiB.
pub static OPEN_TEXT: Budget = Budget::new("text held by open files", 512 << 20);

/// Bytes of usbmon binary readers' rings (`dev/usbmonN`, 300 KiB each by
/// default, up to 64 MiB with MON_IOCT_RING_SIZE): 1 GiB.
pub static USBMON_RINGS: Budget = Budget::new("usbmon ring memory", 1 << 30);

/// usbmon readers, text and binary, on all buses: 4096 (each costs its
/// queue and a share of every event's delivery).
pub static USBMON_READERS: Budget = Budget::new("usbmon readers", 4096);

#[cfg(test)]
mod tests {
    use super::*;

    static B: Budget = Budget::new("test units", 10);

    #[test]
    fn grants_are_bounded_resized_and_returned() {
        let a = B.take(6).unwrap();
        assert_eq!(B.take(5).err(), Some(Errno::ENOMEM));
        let mut b = B.take(4).unwrap();
        assert_eq!(B.used(), 10);
        assert_eq!(b.resize(5).err(), Some(Errno::ENOMEM));
        assert_eq!(b.size(), 4, "unchanged after a refusal");
        b.resize(1).unwrap();
        assert_eq!(B.used(), 7);
        drop(a);
        b.resize(9).unwrap();
        assert_eq!(B.used(), 9);
        assert_eq!(B.take(usize::MAX).err(), Some(Errno::ENOMEM));
        drop(b);
        assert_eq!(B.used(), 0);
    }
}
