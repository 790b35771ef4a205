//! Synchronous transfers of `drivers/usb/core/devio.c`: USBDEVFS_CONTROL
//! and USBDEVFS_BULK (proc_control, proc_bulk) with their recipient check
//! and timeout, and the core requests (SET_CONFIGURATION, SET_INTERFACE,
//! CLEAR_HALT, RESET, driver (dis)connect) run the same way.

use super::desc::{endpoint, findintfep, interval_of};
use super::ps::SyncDone;
use super::*;

impl UsbDevFile {
    /// check_ctrlrecip.
    pub(super) fn check_ctrlrecip(
        &self,
        d: &UsbDevice,
        rt: u8,
        req: u8,
        index: u16,
    ) -> SysResult<()> {
        let ps = self.ps();
        if rt & 0x60 == 0x40 {
            return Ok(());
        }
        if rt == 0xa1 && req == 0 {
            // The printer class's GET_DEVICE_ID is always let through.
            let printer = d
                .interfaces
                .iter()
                .any(|i| i.number == (index >> 8) as u8 && i.class == 7);
            if printer {
                return Ok(());
            }
        }
        let index = index & 0xff;
        match rt & 0x1f {
            2 => {
                if index & !0x80 == 0 {
                    return Ok(());
                }
                let r =
                    findintfep(d, index as u32).or_else(|_| findintfep(d, (index ^ 0x80) as u32));
                match r {
                    Ok(i) => ps.checkintf(d, i),
                    Err(e) => Err(e),
                }
            }
            1 => ps.checkintf(d, index as u32),
            _ => Ok(()),
        }
    }

    /// USBDEVFS_CONTROL and USBDEVFS_BULK: start the transfer on the first
    /// attempt, answer when it completed (or timed out) on a retry.
    pub(super) fn sync_xfer(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let tid = req.caller.pid;
        if !req.retry || !ps.st.lock_ok().sync.contains_key(&tid) {
            self.sync_start(req)?;
        }
        // Parked until it completes or times out, whatever the file's
        // O_NONBLOCK, and aside: proc_control and proc_bulk let go of the
        // device lock around the transfer, so the file's other calls go
        // on meanwhile.
        match self.sync_finish(req)? {
            Some(r) => Ok(r),
            None => Err(Errno::WAIT_ALWAYS),
        }
    }

    pub(super) fn sync_start(&self, req: &IoctlRequest<'_>) -> SysResult<()> {
        let ps = self.ps();
        let tid = req.caller.pid;
        // A call this thread left (interrupted) ends now.
        let stale = ps.st.lock_ok().sync.remove(&tid);
        if let Some(s) = stale {
            if let Some(id) = s.urb_id {
                let _ = ps.port().cancel(ps.dev(), id);
            }
            ps.fs.budget.release(s.mem);
        }
        let d = ps.device()?;
        let b = req.input;
        let (urb, data, timeout, mem) = if req.cmd == abi::CONTROL {
            let (rt, r, index, len) = (b[0], b[1], u16_at(b, 4), u16_at(b, 6));
            let timeout = u32_at(b, 8);
            let data = u64_at(b, 16);
            self.check_ctrlrecip(&d, rt, r, index)?;
            if len as u64 > PAGE {
                return Err(Errno::EINVAL);
            }
            let mem = PAGE + STRUCT_URB + STRUCT_CTRLREQ;
            let dir_in = rt & 0x80 != 0 && len > 0;
            let out = ps.fs.budget.charged(mem, || {
                if !dir_in && len > 0 {
                    req.mem.read(data, len as usize)
                } else {
                    Ok(Vec::new())
                }
            })?;
            let mut setup = [0u8; 8];
            setup.copy_from_slice(&b[0..8]);
            let urb = UrbRequest {
                xfer: TransferType::Control,
                endpoint: if dir_in { 0x80 } else { 0 },
                setup: Some(setup),
                length: len as u32,
                out,
                flags: if dir_in { K_DIR_IN } else { 0 },
                iso_lengths: Vec::new(),
                interval: 0,
                stream_id: 0,
                start_frame: 0,
            };
            (urb, if dir_in { data } else { 0 }, timeout, mem)
        } else {
            let ep = u32_at(b, 0);
            let len = u32_at(b, 4);
            let timeout = u32_at(b, 8);
            let data = u64_at(b, 16);
            let i = findintfep(&d, ep)?;
            ps.checkintf(&d, i)?;
            if len as u64 >= i32::MAX as u64 - STRUCT_URB {
                return Err(Errno::EINVAL);
            }
            let epa = ep as u8;
            let (ty, interval, mps) = endpoint(&d, epa).ok_or(Errno::EINVAL)?;
            if mps == 0 {
                return Err(Errno::EINVAL);
            }
            let mem = len as u64 + STRUCT_URB;
            let dir_in = epa & 0x80 != 0;
            let out = ps.fs.budget.charged(mem, || {
                if !dir_in && len > 0 {
                    req.mem.read(data, len as usize)
                } else {
                    Ok(Vec::new())
                }
            })?;
            let xfer = if ty == 3 {
                TransferType::Interrupt
            } else {
                TransferType::Bulk
            };
            let urb = UrbRequest {
                xfer,
                endpoint: epa,
                setup: None,
                length: len,
                out,
                flags: if dir_in { K_DIR_IN } else { 0 },
                iso_lengths: Vec::new(),
                interval: if ty == 3 {
                    interval_of(&d, interval, false)
                } else {
                    0
                },
                stream_id: 0,
                start_frame: 0,
            };
            (urb, if dir_in { data } else { 0 }, timeout, mem)
        };
        let deadline =
            (timeout > 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
        let done = SyncDone::register(ps, tid, SyncXfer::new(req.cmd, deadline, data, mem));
        match ps.port().submit(ps.dev(), urb, done) {
            Ok(id) => {
                if let Some(s) = ps.st.lock_ok().sync.get_mut(&tid) {
                    s.urb_id = Some(id);
                }
                if let Some(t) = deadline {
                    ps.fs.timer.at(t, ps.id);
                }
                Ok(())
            }
            Err(e) => {
                if let Some(s) = ps.st.lock_ok().sync.remove(&tid) {
                    ps.fs.budget.release(s.mem);
                }
                Err(core_errno(e))
            }
        }
    }

    /// The transfer's answer if it completed or timed out.
    pub(super) fn sync_finish(&self, req: &IoctlRequest<'_>) -> SysResult<Option<IoctlReply>> {
        let ps = self.ps();
        let tid = req.caller.pid;
        let (done, expired) = {
            let st = ps.st.lock_ok();
            let Some(s) = st.sync.get(&tid) else {
                return Err(Errno::EINVAL);
            };
            (
                s.result.is_some(),
                s.deadline.is_some_and(|t| Instant::now() >= t),
            )
        };
        if !done && expired {
            return self.sync_timeout(req).map(Some);
        }
        if !done {
            return Ok(None);
        }
        let s = ps.st.lock_ok().sync.remove(&tid).unwrap();
        ps.fs.budget.release(s.mem);
        let r = s.result.unwrap_or_default();
        let _ = s.cmd;
        if r.status < 0 {
            return Err(Errno(-r.status));
        }
        if s.data != 0 && r.actual_length > 0 {
            let n = (r.actual_length as usize).min(r.data.len());
            req.mem.write(s.data, &r.data[..n])?;
        }
        Ok(Some(IoctlReply {
            result: r.actual_length as i32,
            ..Default::default()
        }))
    }

    /// usbfs_start_wait_urb's timeout: usb_kill_urb, then -ETIMEDOUT
    /// unless it completed meanwhile.
    pub(super) fn sync_timeout(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let tid = req.caller.pid;
        let id = ps.st.lock_ok().sync.get(&tid).and_then(|s| s.urb_id);
        if let Some(id) = id {
            let _ = ps.port().cancel(ps.dev(), id);
        }
        let s = ps.st.lock_ok().sync.remove(&tid);
        let Some(s) = s else {
            return Err(ETIMEDOUT);
        };
        ps.fs.budget.release(s.mem);
        match s.result {
            Some(r) if r.status != -2 => {
                if r.status < 0 {
                    return Err(Errno(-r.status));
                }
                if s.data != 0 && r.actual_length > 0 {
                    let n = (r.actual_length as usize).min(r.data.len());
                    req.mem.write(s.data, &r.data[..n])?;
                }
                Ok(IoctlReply {
                    result: r.actual_length as i32,
                    ..Default::default()
                })
            }
            _ => Err(ETIMEDOUT),
        }
    }

    /// A core request (SET_CONFIGURATION, SET_INTERFACE, CLEAR_HALT,
    /// RESET, driver (dis)connect) run synchronously like a transfer.
    pub(super) fn core_request(
        &self,
        req: &IoctlRequest<'_>,
        cr: CoreRequest,
    ) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let tid = req.caller.pid;
        if !req.retry || !ps.st.lock_ok().sync.contains_key(&tid) {
            let done = SyncDone::register(ps, tid, SyncXfer::new(req.cmd, None, 0, 0));
            match ps.port().request(ps.dev(), cr, done) {
                Ok(id) => {
                    if let Some(s) = ps.st.lock_ok().sync.get_mut(&tid) {
                        if s.result.is_none() {
                            s.urb_id = Some(id);
                        }
                    }
                }
                Err(e) => {
                    ps.st.lock_ok().sync.remove(&tid);
                    return Err(core_errno(e));
                }
            }
        }
        let r = {
            let mut st = ps.st.lock_ok();
            match st.sync.get(&tid) {
                Some(s) if s.result.is_some() => st.sync.remove(&tid).and_then(|s| s.result),
                Some(_) => None,
                None => return Err(Errno::EINVAL),
            }
        };
        match r {
            Some(r) if r.status < 0 => Err(Errno(-r.status)),
            Some(r) => Ok(IoctlReply {
                result: r.status,
                ..Default::default()
            }),
            // Parked as a transfer is (the device lock let go meanwhile).
            None => Err(Errno::WAIT_ALWAYS),
        }
    }
}
