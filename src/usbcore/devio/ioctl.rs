//! The ioctl dispatch of `drivers/usb/core/devio.c` (usbdev_do_ioctl):
//! each USBDEVFS_* command to its handler, and USBDEVFS_IOCTL's driver
//! disconnect/connect.

use super::desc::{cstr, findintfep};
use super::*;

impl UsbDevFile {
    pub(super) fn ioctl_inner(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        if !ps.writable {
            return Err(Errno::EPERM);
        }
        match req.cmd {
            abi::REAPURB => return self.reap(req, true),
            abi::REAPURBNDELAY => return self.reap(req, false),
            _ => {}
        }
        if !ps.connected() {
            return Err(Errno::ENODEV);
        }
        let rd_u32 = |req: &IoctlRequest<'_>| -> SysResult<u32> {
            let b = req.mem.read(req.arg, 4)?;
            Ok(u32_at(&b, 0))
        };
        match req.cmd {
            abi::CONTROL | abi::BULK => self.sync_xfer(req),
            abi::RESETEP => {
                let ep = rd_u32(req)?;
                let d = ps.device()?;
                let i = findintfep(&d, ep)?;
                ps.checkintf(&d, i)?;
                self.core_request(req, CoreRequest::ResetEndpoint(ep as u8))
            }
            abi::CLEAR_HALT => {
                let ep = rd_u32(req)?;
                let d = ps.device()?;
                let i = findintfep(&d, ep)?;
                ps.checkintf(&d, i)?;
                self.core_request(req, CoreRequest::ClearHalt(ep as u8))
            }
            abi::SETINTERFACE => {
                let b = req.mem.read(req.arg, 8)?;
                let (intf, alt) = (u32_at(&b, 0), u32_at(&b, 4));
                let d = ps.device()?;
                if !req.retry {
                    ps.checkintf(&d, intf)?;
                    ps.destroy_on_interface(intf as i32);
                }
                if intf > 255 || alt > 255 {
                    return Err(Errno::EINVAL);
                }
                self.core_request(
                    req,
                    CoreRequest::SetInterface {
                        interface: intf as u8,
                        alt: alt as u8,
                    },
                )
            }
            abi::SETCONFIGURATION => {
                let v = rd_u32(req)? as i32;
                if !req.retry {
                    let d = ps.device()?;
                    if let Some(i) = d.interfaces.iter().find(|i| i.driver.is_some()) {
                        warn!(
                            "usbfs: interface {} claimed by {} while '{}' sets config #{}",
                            i.number,
                            i.driver.as_deref().unwrap_or(""),
                            crate::base::procmem::comm_of(req.caller.pid),
                            v
                        );
                        return Err(Errno::EBUSY);
                    }
                }
                self.core_request(req, CoreRequest::SetConfiguration(v))
            }
            abi::RESET => {
                if !req.retry {
                    let d = ps.device()?;
                    let st = ps.st.lock_ok();
                    if st.privileges_dropped {
                        let other = d.interfaces.iter().any(|i| {
                            i.driver.is_some() && st.ifclaimed & (1 << i.number.min(63)) == 0
                        });
                        if other {
                            return Err(Errno::EACCES);
                        }
                    }
                }
                self.core_request(req, CoreRequest::ResetDevice)
            }
            abi::GETDRIVER => {
                let intf = u32_at(req.input, 0);
                let d = ps.device()?;
                let name = (intf < 256)
                    .then(|| d.interface(intf as u8))
                    .flatten()
                    .and_then(|i| i.driver.clone())
                    .ok_or(ENODATA)?;
                let mut b = vec![0u8; abi::GETDRIVER_SIZE];
                b[0..4].copy_from_slice(&intf.to_le_bytes());
                let n = name.len().min(abi::DRIVER_NAME - 1);
                b[4..4 + n].copy_from_slice(&name.as_bytes()[..n]);
                req.mem.write(req.arg, &b)?;
                Ok(IoctlReply::default())
            }
            abi::SUBMITURB => self.submiturb(req),
            abi::DISCARDURB => self.discardurb(req.arg),
            abi::DISCSIGNAL => {
                let b = req.mem.read(req.arg, 16)?;
                let signr = u32_at(&b, 0) as i32;
                let tgid = crate::base::procmem::tgid_of(req.caller.pid).unwrap_or(req.caller.pid);
                let fd = if signr > 0 && signr <= 64 {
                    unsafe { libc::syscall(libc::SYS_pidfd_open, tgid as libc::pid_t, 0) as i32 }
                } else {
                    -1
                };
                let old = {
                    let mut st = ps.st.lock_ok();
                    std::mem::replace(&mut st.discsig, (fd >= 0).then_some((signr, fd)))
                };
                if let Some((_, fd)) = old {
                    unsafe { libc::close(fd) };
                }
                Ok(IoctlReply::default())
            }
            abi::CLAIMINTERFACE => {
                let i = rd_u32(req)?;
                ps.claim(i)?;
                Ok(IoctlReply::default())
            }
            abi::RELEASEINTERFACE => {
                let i = rd_u32(req)?;
                ps.release_intf(i)?;
                ps.destroy_on_interface(i as i32);
                Ok(IoctlReply::default())
            }
            abi::CONNECTINFO => {
                let d = ps.device()?;
                let mut b = [0u8; 8];
                b[0..4].copy_from_slice(&(d.devnum as u32).to_le_bytes());
                b[4] = u8::from(d.speed == crate::usbcore::device::Speed::Low);
                req.mem.write(req.arg, &b)?;
                Ok(IoctlReply::default())
            }
            abi::IOCTL => self.usbdevfs_ioctl(req),
            abi::HUB_PORTINFO => Err(Errno::ENOTTY),
            abi::CLAIM_PORT | abi::RELEASE_PORT => Err(Errno::ENOTTY),
            abi::GET_CAPABILITIES => {
                let caps = abi::CAP_ZERO_PACKET
                    | abi::CAP_NO_PACKET_SIZE_LIM
                    | abi::CAP_REAP_AFTER_DISCONNECT
                    | abi::CAP_DROP_PRIVILEGES
                    | abi::CAP_CONNINFO_EX
                    | abi::CAP_SUSPEND;
                Ok(IoctlReply {
                    result: 0,
                    output: caps.to_le_bytes().to_vec(),
                    ..Default::default()
                })
            }
            abi::DISCONNECT_CLAIM => {
                let b = req.mem.read(req.arg, abi::DISCONNECT_CLAIM_SIZE)?;
                let (intf, flags) = (u32_at(&b, 0), u32_at(&b, 4));
                let want = cstr(&b[8..]);
                let d = ps.device()?;
                let i = (intf < 256)
                    .then(|| d.interface(intf as u8))
                    .flatten()
                    .ok_or(Errno::EINVAL)?;
                if !req.retry {
                    if let Some(drv) = i.driver.as_deref() {
                        if ps.st.lock_ok().privileges_dropped {
                            return Err(Errno::EACCES);
                        }
                        if flags & abi::DISCONNECT_CLAIM_IF_DRIVER != 0 && drv != want {
                            return Err(Errno::EBUSY);
                        }
                        if flags & abi::DISCONNECT_CLAIM_EXCEPT_DRIVER != 0 && drv == want {
                            return Err(Errno::EBUSY);
                        }
                        if drv == "usbfs" {
                            // Another program's claim: usb_driver_release_interface
                            // of usbfs, then ours.
                            return Err(Errno::EBUSY);
                        }
                    }
                }
                if i.driver.is_some() && i.driver.as_deref() != Some("usbfs") {
                    self.core_request(req, CoreRequest::DetachDriver(intf as u8))?;
                }
                ps.claim(intf)?;
                Ok(IoctlReply::default())
            }
            abi::ALLOC_STREAMS | abi::FREE_STREAMS => Err(Errno::EINVAL),
            abi::DROP_PRIVILEGES => {
                let mask = u32_at(req.input, 0) as u64;
                let mut st = ps.st.lock_ok();
                st.allowed &= mask;
                st.privileges_dropped = true;
                Ok(IoctlReply::default())
            }
            abi::GET_SPEED => {
                let d = ps.device()?;
                Ok(IoctlReply {
                    result: d.speed as i32,
                    ..Default::default()
                })
            }
            abi::FORBID_SUSPEND | abi::ALLOW_SUSPEND | abi::WAIT_FOR_RESUME => {
                Ok(IoctlReply::default())
            }
            c if c & !(0x3fff << 16) == abi::CONNINFO_EX_BASE => {
                let size = ((c >> 16) & 0x3fff) as usize;
                if size < 4 {
                    return Err(Errno::EINVAL);
                }
                let d = ps.device()?;
                let mut b = vec![0u8; abi::CONNINFO_EX_SIZE];
                b[0..4].copy_from_slice(&(abi::CONNINFO_EX_SIZE as u32).to_le_bytes());
                b[4..8].copy_from_slice(&(d.busnum as u32).to_le_bytes());
                b[8..12].copy_from_slice(&(d.devnum as u32).to_le_bytes());
                b[12..16].copy_from_slice(&(d.speed as u32).to_le_bytes());
                b[16] = d.port_path.len() as u8;
                for (i, p) in d.port_path.iter().take(7).enumerate() {
                    b[17 + i] = *p;
                }
                b.truncate(size.min(abi::CONNINFO_EX_SIZE));
                Ok(IoctlReply {
                    result: 0,
                    output: b,
                    ..Default::default()
                })
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    /// USBDEVFS_IOCTL: disconnect or connect the kernel driver of an
    /// interface; other codes go to the driver, which has none (ENOTTY).
    pub(super) fn usbdevfs_ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ps = self.ps();
        if ps.st.lock_ok().privileges_dropped {
            return Err(Errno::EACCES);
        }
        let ifno = u32_at(req.input, 0) as i32;
        let code = u32_at(req.input, 4);
        let size = (code >> 16) & 0x3fff;
        let data = u64_at(req.input, 8);
        if size > 0 && (code >> 30) & 1 != 0 {
            req.mem.read(data, size as usize)?;
        }
        let d = ps.device()?;
        if d.active_config == 0 {
            return Err(EHOSTUNREACH);
        }
        let intf = (0..256)
            .contains(&ifno)
            .then(|| d.interface(ifno as u8))
            .flatten()
            .ok_or(Errno::EINVAL)?;
        match code {
            abi::DISCONNECT => match intf.driver.as_deref() {
                None if !req.retry => Err(ENODATA),
                Some("usbfs") if !req.retry => {
                    // usbfs's own claim (another file's): released.
                    Err(Errno::EBUSY)
                }
                _ => {
                    info!(
                        "usbfs: {}-{}:{}.{}: disconnect by usbfs",
                        d.busnum,
                        d.devpath(),
                        d.active_config,
                        ifno
                    );
                    self.core_request(req, CoreRequest::DetachDriver(ifno as u8))
                }
            },
            abi::CONNECT => {
                if intf.driver.is_some() && !req.retry {
                    return Err(Errno::EBUSY);
                }
                self.core_request(req, CoreRequest::AttachDriver(ifno as u8))
            }
            _ => Err(Errno::ENOTTY),
        }
    }
}
