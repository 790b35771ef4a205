//! The state of one open usbfs file (devio.c's `struct usb_dev_state`):
//! interface claims, URB and transfer completions, disconnect and the
//! last close. Mirrors the per-file parts of `drivers/usb/core/devio.c`.

use super::*;

impl Ps {
    pub(super) fn dev(&self) -> DevRef {
        self.entry.dev
    }

    pub(super) fn wake(&self) {
        self.waker.wake();
    }

    pub(super) fn port(&self) -> &Arc<dyn UsbCorePort> {
        &self.fs.port
    }

    /// usbdev_remove: the device went away.
    pub(super) fn disconnected(&self) {
        let sig = {
            let mut st = self.st.lock_ok();
            if st.disconnected {
                return;
            }
            st.disconnected = true;
            st.discsig.take()
        };
        if let Some((signr, pidfd)) = sig {
            // kill_pid_usb_asyncio with EPIPE; delivered as a plain
            // signal (a daemon cannot queue SI_ASYNCIO to another process).
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    pidfd,
                    signr,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
                libc::close(pidfd);
            }
        }
        self.wake();
    }

    pub(super) fn connected(&self) -> bool {
        !self.st.lock_ok().disconnected && !self.entry.gone.load(Ordering::SeqCst)
    }

    pub(super) fn device(&self) -> SysResult<UsbDevice> {
        self.port().device(self.dev()).ok_or(Errno::ENODEV)
    }

    /// claimintf.
    pub(super) fn claim(&self, ifnum: u32) -> SysResult<()> {
        if ifnum >= 64 {
            return Err(Errno::EINVAL);
        }
        {
            let st = self.st.lock_ok();
            if st.ifclaimed & (1 << ifnum) != 0 {
                return Ok(());
            }
            if st.privileges_dropped && st.allowed & (1 << ifnum) == 0 {
                return Err(Errno::EACCES);
            }
        }
        let d = self.device()?;
        if d.interface(ifnum as u8).is_none() {
            return Err(Errno::ENOENT);
        }
        self.port()
            .claim_interface(self.dev(), ifnum as u8, self.id)
            .map_err(core_errno)?;
        self.st.lock_ok().ifclaimed |= 1 << ifnum;
        Ok(())
    }

    /// releaseintf.
    pub(super) fn release_intf(&self, ifnum: u32) -> SysResult<()> {
        if ifnum >= 64 {
            return Err(Errno::EINVAL);
        }
        let d = self.device()?;
        if d.interface(ifnum as u8).is_none() {
            return Err(Errno::ENOENT);
        }
        let had = {
            let mut st = self.st.lock_ok();
            let had = st.ifclaimed & (1 << ifnum) != 0;
            st.ifclaimed &= !(1 << ifnum);
            had
        };
        if had {
            let _ = self
                .port()
                .release_interface(self.dev(), ifnum as u8, self.id);
        }
        Ok(())
    }

    /// checkintf: the interface must be claimed (claimed now if not).
    pub(super) fn checkintf(&self, d: &UsbDevice, ifnum: u32) -> SysResult<()> {
        if d.active_config == 0 {
            return Err(EHOSTUNREACH);
        }
        if ifnum >= 64 {
            return Err(Errno::EINVAL);
        }
        if self.st.lock_ok().ifclaimed & (1 << ifnum) != 0 {
            return Ok(());
        }
        warn!(
            "usbfs: process {} ({}) did not claim interface {} before use",
            self.opener,
            crate::base::procmem::comm_of(self.opener),
            ifnum
        );
        self.claim(ifnum)
    }

    /// Kill the URBs of `keys` (usb_kill_urb: each completes with -ENOENT).
    pub(super) fn kill(&self, ids: Vec<u64>) {
        for id in ids {
            let _ = self.port().cancel(self.dev(), id);
        }
    }

    /// destroy_async_on_interface.
    pub(super) fn destroy_on_interface(&self, ifnum: i32) {
        let ids: Vec<u64> = self
            .st
            .lock_ok()
            .pending
            .iter()
            .filter(|a| a.ifnum == ifnum)
            .filter_map(|a| a.urb_id)
            .collect();
        self.kill(ids);
    }

    /// A URB of this file completed.
    pub(super) fn async_done(&self, key: u64, result: UrbResult) {
        {
            let mut st = self.st.lock_ok();
            let Some(pos) = st.pending.iter().position(|a| a.key == key) else {
                return;
            };
            let mut a = st.pending.remove(pos);
            if result.status < 0 && result.status != -2 && result.status != ECONNRESET {
                if let Some(b) = a.bulk_addr {
                    st.disabled_bulk_eps |= 1 << b;
                }
            }
            a.result = Some(result);
            st.completed.push_back(a);
        }
        self.wake();
    }

    pub(super) fn sync_done(&self, tid: u32, id: u64, result: UrbResult) {
        {
            let mut st = self.st.lock_ok();
            match st.sync.get_mut(&tid) {
                Some(s) if s.urb_id.is_none_or(|u| u == id) => s.result = Some(result),
                _ => return,
            }
        }
        self.wake();
    }

    /// The last close: claims released, URBs killed, memory given back.
    pub(super) fn release(&self) {
        let (claimed, ids) = {
            let mut st = self.st.lock_ok();
            if st.released {
                return;
            }
            st.released = true;
            let ids: Vec<u64> = st
                .pending
                .iter()
                .filter_map(|a| a.urb_id)
                .chain(st.sync.values().filter_map(|s| s.urb_id))
                .collect();
            (st.ifclaimed, ids)
        };
        for i in 0..64 {
            if claimed & (1 << i) != 0 {
                let _ = self.port().release_interface(self.dev(), i as u8, self.id);
            }
        }
        self.kill(ids);
        let mut st = self.st.lock_ok();
        let mut mem: u64 = st.pending.drain(..).map(|a| a.mem).sum();
        mem += st.completed.drain(..).map(|a| a.mem).sum::<u64>();
        mem += st.sync.drain().map(|(_, s)| s.mem).sum::<u64>();
        if let Some((_, fd)) = st.discsig.take() {
            unsafe { libc::close(fd) };
        }
        drop(st);
        self.fs.budget.release(mem);
        self.fs.timer.files.lock_ok().remove(&self.id);
    }
}

/// Completion of an asynchronous URB.
pub(super) struct AsyncDone {
    pub(super) ps: Weak<Ps>,
    pub(super) key: u64,
}

impl UrbDone for AsyncDone {
    fn done(&self, _urb: u64, result: UrbResult) {
        if let Some(ps) = self.ps.upgrade() {
            ps.async_done(self.key, result);
        }
    }
}

/// Completion of a synchronous transfer or core request.
pub(super) struct SyncDone {
    pub(super) ps: Weak<Ps>,
    pub(super) tid: u32,
}

impl SyncDone {
    /// Record `xfer` as thread `tid`'s synchronous request on `ps`, and the
    /// completion that fills in its result.
    pub(super) fn register(ps: &Arc<Ps>, tid: u32, xfer: SyncXfer) -> Arc<SyncDone> {
        ps.st.lock_ok().sync.insert(tid, xfer);
        Arc::new(SyncDone {
            ps: Arc::downgrade(ps),
            tid,
        })
    }
}

impl UrbDone for SyncDone {
    fn done(&self, urb: u64, result: UrbResult) {
        if let Some(ps) = self.ps.upgrade() {
            ps.sync_done(self.tid, urb, result);
        }
    }
}
