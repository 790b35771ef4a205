//! The mount-wide usbfs memory budget of `drivers/usb/core/devio.c`
//! (`usbfs_memory_usage`, usbfs_increase_memory_usage): what every
//! caller's URBs and synchronous transfers may hold together.

use super::*;

/// The mount-wide memory budget (`usbfs_memory_usage`).
pub(super) struct Budget {
    pub(super) used: Mutex<u64>,
    pub(super) limit: u64,
}

impl Budget {
    pub(super) fn charge(&self, n: u64) -> SysResult<()> {
        let mut u = self.used.lock_ok();
        if self.limit > 0 && *u + n > self.limit {
            return Err(Errno::ENOMEM);
        }
        *u += n;
        Ok(())
    }
    pub(super) fn release(&self, n: u64) {
        let mut u = self.used.lock_ok();
        *u = u.saturating_sub(n);
    }
    /// Charge `n`, then do `f` (reading what the caller sends); the charge
    /// is given back if `f` fails.
    pub(super) fn charged<T>(&self, n: u64, f: impl FnOnce() -> SysResult<T>) -> SysResult<T> {
        self.charge(n)?;
        f().inspect_err(|_| self.release(n))
    }
}
