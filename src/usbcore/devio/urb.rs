//! The asynchronous URB lifecycle of `drivers/usb/core/devio.c`:
//! USBDEVFS_SUBMITURB (proc_do_submiturb), DISCARDURB, and the reap of a
//! completed URB into the caller's memory (processcompl, proc_reapurb).

use super::desc::{endpoint_of, findintfep, interval_of};
use super::ps::AsyncDone;
use super::*;

impl UsbDevFile {
    /// USBDEVFS_SUBMITURB.
    pub(super) fn submiturb(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let arg = req.arg;
        let u = req.mem.read(arg, abi::URB_SIZE)?;
        let ty = u[abi::urb::TYPE];
        let mut endpoint = u[abi::urb::ENDPOINT];
        let flags = u32_at(&u, abi::urb::FLAGS);
        let mut buffer = u64_at(&u, abi::urb::BUFFER);
        let mut buffer_length = u32_at(&u, abi::urb::BUFFER_LENGTH);
        let npk_or_stream = u32_at(&u, abi::urb::NUMBER_OF_PACKETS);
        let mut mask = abi::URB_SHORT_NOT_OK
            | abi::URB_BULK_CONTINUATION
            | abi::URB_NO_FSBR
            | abi::URB_ZERO_PACKET
            | abi::URB_NO_INTERRUPT;
        if ty == 0 {
            mask |= abi::URB_ISO_ASAP;
        }
        if flags & !mask != 0 {
            return Err(Errno::EINVAL);
        }
        if buffer_length as u64 >= XFER_MAX {
            return Err(Errno::EINVAL);
        }
        if buffer_length > 0 && buffer == 0 {
            return Err(Errno::EINVAL);
        }
        let d = ps.device()?;
        let mut ifnum = -1;
        if !(ty == 2 && endpoint & !0x80 == 0) {
            let i = findintfep(&d, endpoint as u32)?;
            ps.checkintf(&d, i)?;
            ifnum = i as i32;
        }
        let (ep_type, ep_interval, _) = endpoint_of(&d, endpoint).ok_or(Errno::ENOENT)?;
        let mut is_in = endpoint & 0x80 != 0;
        let mut extra = 0u64;
        let mut setup = None;
        let mut allow_short = false;
        let mut allow_zero = false;
        let mut iso = Vec::new();
        let mut xfer = match ty {
            2 => {
                if ep_type != 0 {
                    return Err(Errno::EINVAL);
                }
                if buffer_length < 8 {
                    return Err(Errno::EINVAL);
                }
                let sb = req.mem.read(buffer, 8)?;
                let wlen = u16_at(&sb, 6) as u32;
                if buffer_length < wlen + 8 {
                    return Err(Errno::EINVAL);
                }
                self.check_ctrlrecip(&d, sb[0], sb[1], u16_at(&sb, 4))?;
                buffer_length = wlen;
                buffer += 8;
                if sb[0] & 0x80 != 0 && buffer_length > 0 {
                    is_in = true;
                    endpoint |= 0x80;
                } else {
                    is_in = false;
                    endpoint &= !0x80;
                }
                allow_short = is_in;
                let mut s = [0u8; 8];
                s.copy_from_slice(&sb);
                setup = Some(s);
                extra = STRUCT_CTRLREQ;
                TransferType::Control
            }
            3 => {
                allow_zero = !is_in;
                allow_short = is_in;
                match ep_type {
                    0 | 1 => return Err(Errno::EINVAL),
                    3 => TransferType::Interrupt,
                    _ => TransferType::Bulk,
                }
            }
            1 => {
                if ep_type != 3 {
                    return Err(Errno::EINVAL);
                }
                allow_zero = !is_in;
                allow_short = is_in;
                TransferType::Interrupt
            }
            0 => {
                if !(1..=MAX_PACKETS).contains(&npk_or_stream) {
                    return Err(Errno::EINVAL);
                }
                if ep_type != 1 {
                    return Err(Errno::EINVAL);
                }
                let n = npk_or_stream as usize;
                let descs = req
                    .mem
                    .read(arg + abi::URB_SIZE as u64, n * abi::ISO_DESC_SIZE)?;
                let mut total = 0u32;
                for i in 0..n {
                    let l = u32_at(&descs, i * abi::ISO_DESC_SIZE);
                    if l > MAX_PACKET_LEN {
                        return Err(Errno::EINVAL);
                    }
                    total += l;
                    iso.push(l);
                }
                buffer_length = total;
                extra = n as u64 * STRUCT_ISO_DESC;
                TransferType::Iso
            }
            _ => return Err(Errno::EINVAL),
        };
        if xfer == TransferType::Bulk && ty == 3 && ep_type == 3 {
            xfer = TransferType::Interrupt;
        }
        let mem = extra + STRUCT_ASYNC + STRUCT_URB + buffer_length as u64;
        let out = ps.fs.budget.charged(mem, || {
            if !is_in && buffer_length > 0 {
                req.mem.read(buffer, buffer_length as usize)
            } else {
                Ok(Vec::new())
            }
        })?;
        let mut kflags = if is_in { K_DIR_IN } else { 0 };
        if flags & abi::URB_ISO_ASAP != 0 {
            kflags |= K_ISO_ASAP;
        }
        if allow_short && flags & abi::URB_SHORT_NOT_OK != 0 {
            kflags |= K_SHORT_NOT_OK;
        }
        if allow_zero && flags & abi::URB_ZERO_PACKET != 0 {
            kflags |= K_ZERO_PACKET;
        }
        if flags & abi::URB_NO_INTERRUPT != 0 {
            kflags |= K_NO_INTERRUPT;
        }
        let interval = if ep_interval > 0 {
            interval_of(&d, ep_interval, xfer == TransferType::Iso)
        } else {
            0
        };
        let bulk_addr = (ep_type == 2).then_some((endpoint & 0x0f) | ((endpoint & 0x80) >> 3));
        let urb = UrbRequest {
            xfer,
            endpoint,
            setup,
            length: buffer_length,
            out,
            flags: kflags,
            iso_lengths: iso.clone(),
            interval,
            stream_id: if xfer == TransferType::Bulk {
                npk_or_stream
            } else {
                0
            },
            start_frame: u32_at(&u, abi::urb::START_FRAME) as i32,
        };
        let key = {
            let mut st = ps.st.lock_ok();
            if let Some(b) = bulk_addr {
                if flags & abi::URB_BULK_CONTINUATION == 0 {
                    st.disabled_bulk_eps &= !(1 << b);
                } else if st.disabled_bulk_eps & (1 << b) != 0 {
                    drop(st);
                    ps.fs.budget.release(mem);
                    return Err(EREMOTEIO);
                }
            }
            st.next_key += 1;
            let key = st.next_key;
            st.pending.push(Async {
                key,
                userurb: arg,
                userbuffer: if is_in { buffer } else { 0 },
                urb_id: None,
                xfer,
                iso,
                mem,
                ifnum,
                bulk_addr,
                result: None,
            });
            key
        };
        let done = Arc::new(AsyncDone {
            ps: Arc::downgrade(ps),
            key,
        });
        match ps.port().submit(ps.dev(), urb, done) {
            Ok(id) => {
                let mut st = ps.st.lock_ok();
                if let Some(a) = st.pending.iter_mut().find(|a| a.key == key) {
                    a.urb_id = Some(id);
                } else if let Some(a) = st.completed.iter_mut().find(|a| a.key == key) {
                    a.urb_id = Some(id);
                }
                Ok(IoctlReply::default())
            }
            Err(e) => {
                let mut st = ps.st.lock_ok();
                st.pending.retain(|a| a.key != key);
                drop(st);
                ps.fs.budget.release(mem);
                Err(core_errno(e))
            }
        }
    }

    /// USBDEVFS_DISCARDURB: usb_kill_urb of the caller's URB `arg`.
    pub(super) fn discardurb(&self, arg: u64) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let id = {
            let st = ps.st.lock_ok();
            let a = st
                .pending
                .iter()
                .find(|a| a.userurb == arg)
                .ok_or(Errno::EINVAL)?;
            a.urb_id
        };
        if let Some(id) = id {
            let _ = ps.port().cancel(ps.dev(), id);
        }
        Ok(IoctlReply::default())
    }

    /// processcompl: the results into the caller's URB, the URB's
    /// address to `arg`.
    pub(super) fn processcompl(&self, req: &IoctlRequest<'_>, a: Async) -> SysResult<IoctlReply> {
        let ps = self.ps();
        ps.fs.budget.release(a.mem);
        let r = a.result.unwrap_or_default();
        let mem = req.mem;
        let actual = if a.xfer == TransferType::Iso {
            r.iso.iter().map(|p| p.actual_length).sum::<u32>()
        } else {
            r.actual_length
        };
        if a.userbuffer != 0 && actual > 0 {
            if a.xfer == TransferType::Iso {
                let mut off = 0usize;
                for (i, len) in a.iso.iter().enumerate() {
                    let got = r.iso.get(i).map(|p| p.actual_length).unwrap_or(0) as usize;
                    let n = got.min(*len as usize);
                    if n > 0 {
                        let end = (off + n).min(r.data.len());
                        if off < end {
                            mem.write(a.userbuffer + off as u64, &r.data[off..end])?;
                        }
                    }
                    off += *len as usize;
                }
            } else {
                let n = (actual as usize).min(r.data.len());
                mem.write(a.userbuffer, &r.data[..n])?;
            }
        }
        let u = a.userurb;
        mem.write(u + abi::urb::STATUS as u64, &r.status.to_le_bytes())?;
        mem.write(u + abi::urb::ACTUAL_LENGTH as u64, &actual.to_le_bytes())?;
        mem.write(
            u + abi::urb::ERROR_COUNT as u64,
            &r.error_count.to_le_bytes(),
        )?;
        if a.xfer == TransferType::Iso {
            let mut b = Vec::with_capacity(a.iso.len() * abi::ISO_DESC_SIZE);
            for (i, len) in a.iso.iter().enumerate() {
                let p = r.iso.get(i).copied().unwrap_or_default();
                b.extend_from_slice(&len.to_le_bytes());
                b.extend_from_slice(&p.actual_length.to_le_bytes());
                b.extend_from_slice(&(p.status as u32).to_le_bytes());
            }
            mem.write(u + abi::urb::ISO as u64, &b)?;
        }
        mem.write(req.arg, &u.to_le_bytes())?;
        Ok(IoctlReply::default())
    }

    /// USBDEVFS_REAPURB(NDELAY).
    pub(super) fn reap(&self, req: &IoctlRequest<'_>, block: bool) -> SysResult<IoctlReply> {
        let ps = self.ps();
        let a = {
            let mut st = ps.st.lock_ok();
            let a = st.completed.pop_front();
            if a.is_none() {
                let gone = st.disconnected || ps.entry.gone.load(Ordering::SeqCst);
                return Err(if gone {
                    Errno::ENODEV
                } else if block {
                    // Parked until a URB completes, whatever the file's
                    // O_NONBLOCK (reap_as sleeps without looking), and
                    // aside: reap_as lets go of the device lock while it
                    // sleeps, so the file's other calls (another thread's
                    // SUBMITURB) go on.
                    Errno::WAIT_ALWAYS
                } else {
                    Errno::EAGAIN_FINAL
                });
            }
            a.unwrap()
        };
        self.processcompl(req, a)
    }
}
