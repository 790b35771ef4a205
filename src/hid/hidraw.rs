//! hidraw's node, `dev/hidrawN`, as `drivers/hid/hidraw.c` serves it.
//!
//! * `read(2)`: the oldest input report queued for this open file (at most
//!   63 are kept; newer ones are dropped while it is full), cut to the
//!   buffer; blocks (EAGAIN when non-blocking) while there is none, EIO
//!   once the device is gone and nothing is left.
//! * `write(2)`: an output report, its first byte the report ID (0: the
//!   device numbers none), through the interrupt OUT endpoint when there
//!   is one, else by SET_REPORT; EINVAL under 2 or over 16384 bytes.
//! * `poll`: writable always, readable with a report queued, POLLERR and
//!   POLLHUP once the device is gone.
//! * ioctls: HIDIOCGRDESCSIZE, HIDIOCGRDESC, HIDIOCGRAWINFO,
//!   HIDIOCGRAWNAME/PHYS/UNIQ(len), HIDIOCSFEATURE(len), HIDIOCGFEATURE(len),
//!   HIDIOCSINPUT, HIDIOCGINPUT, HIDIOCSOUTPUT, HIDIOCGOUTPUT (len) with hidraw.c's checks
//!   and errnos; ENODEV once the device is gone.
//!
//! A transfer waits for its URB as `usb_control_msg` does: at most
//! [`CTRL_TIMEOUT`], then the URB is killed and the call fails with
//! ETIMEDOUT.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, IoctlLayout, IoctlReply, IoctlRequest, OpenFile, OpenFlags, Waker,
    POLL_READABLE,
};
use crate::usbcore::device::{control_msg, start_wait_urb, TransferType, UrbRequest, UsbCorePort};

use super::device::{HidDevice, RawList, HID_MAX_BUFFER_SIZE, HID_MAX_DESCRIPTOR_SIZE};

/// `USB_CTRL_SET_TIMEOUT` and `USB_CTRL_GET_TIMEOUT`.
pub const CTRL_TIMEOUT: Duration = Duration::from_secs(5);
/// `BUS_USB` as HIDIOCGRAWINFO gives it.
const BUS_USB: u32 = super::BUS_USB as u32;

/// `_IOC_NR` of the commands.
const NR_GRDESCSIZE: u32 = 0x01;
const NR_GRDESC: u32 = 0x02;
const NR_GRAWINFO: u32 = 0x03;
const NR_GRAWNAME: u32 = 0x04;
const NR_GRAWPHYS: u32 = 0x05;
const NR_SFEATURE: u32 = 0x06;
const NR_GFEATURE: u32 = 0x07;
const NR_GRAWUNIQ: u32 = 0x08;
const NR_SINPUT: u32 = 0x09;
const NR_GINPUT: u32 = 0x0a;
const NR_SOUTPUT: u32 = 0x0b;
const NR_GOUTPUT: u32 = 0x0c;
/// `_IOC_READ`.
const IOC_READ: u32 = 2;

/// `_IOR('H', nr, size)`.
const fn ior(nr: u32, size: u32) -> u32 {
    (IOC_READ << 30) | (size << 16) | ((b'H' as u32) << 8) | nr
}
/// HIDIOCGRDESCSIZE.
pub const HIDIOCGRDESCSIZE: u32 = ior(NR_GRDESCSIZE, 4);
/// HIDIOCGRDESC (`struct hidraw_report_descriptor`: a u32 and 4096 bytes).
pub const HIDIOCGRDESC: u32 = ior(NR_GRDESC, 4 + HID_MAX_DESCRIPTOR_SIZE as u32);
/// HIDIOCGRAWINFO (`struct hidraw_devinfo`).
pub const HIDIOCGRAWINFO: u32 = ior(NR_GRAWINFO, 8);
/// HIDIOCREVOKE, `_IOW('H', 0x0D, int)` (Linux 6.12): this open file
/// reaches the device no more.
pub const HIDIOCREVOKE: u32 = (1 << 30) | (4 << 16) | ((b'H' as u32) << 8) | 0x0d;

/// `enum hid_report_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReportType {
    Input = 0,
    Output = 1,
    Feature = 2,
}

/// The node: opens reach the device while it is there.
pub struct HidrawNode {
    pub(super) dev: Weak<HidDevice>,
    pub(super) port: Arc<dyn UsbCorePort>,
}

impl FileNode for HidrawNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        // hidraw_open: ENODEV once the device went.
        let dev = self
            .dev
            .upgrade()
            .filter(|d| d.exists())
            .ok_or(Errno::ENODEV)?;
        let list = Arc::new(RawList::default());
        let mut lists = dev.lists.lock_ok();
        // Closed files' entries go here too, not only at the next report.
        lists.retain(|w| w.strong_count() > 0);
        lists.push(Arc::downgrade(&list));
        drop(lists);
        Ok(Arc::new(HidrawFile {
            dev,
            list,
            port: self.port.clone(),
        }))
    }
}

struct HidrawFile {
    dev: Arc<HidDevice>,
    list: Arc<RawList>,
    port: Arc<dyn UsbCorePort>,
}

impl HidrawFile {
    fn revoked(&self) -> bool {
        self.list.revoked.load(Ordering::SeqCst)
    }

    fn io(&self) -> Io<'_> {
        Io {
            dev: &self.dev,
            port: &*self.port,
        }
    }
}

/// usbhid's transfers to a HID device, through the port usbfs uses.
pub(super) struct Io<'a> {
    pub(super) dev: &'a HidDevice,
    pub(super) port: &'a dyn UsbCorePort,
}

impl Io<'_> {
    /// `usb_start_wait_urb`: submit `urb`, wait for it at most
    /// [`CTRL_TIMEOUT`] (then kill it: ETIMEDOUT); its IN data, or the
    /// errno of its status.
    fn transfer(&self, urb: UrbRequest) -> SysResult<(u32, Vec<u8>)> {
        let r = start_wait_urb(self.port, self.dev.dev, urb, CTRL_TIMEOUT)?;
        let mut data = r.data;
        data.truncate(r.actual_length as usize);
        Ok((r.actual_length, data))
    }

    /// `usb_control_msg` to the interface: a class request.
    fn control(
        &self,
        request: u8,
        rtype: ReportType,
        id: u8,
        data: &[u8],
        len: u16,
        dir_in: bool,
    ) -> SysResult<(u32, Vec<u8>)> {
        let value = (((rtype as u16) + 1) << 8) | u16::from(id);
        let rt = if dir_in { 0xa1 } else { 0x21 };
        control_msg(
            self.port,
            self.dev.dev,
            rt,
            request,
            value,
            u16::from(self.dev.ifnum),
            data,
            len,
            CTRL_TIMEOUT,
        )
    }

    /// `hidraw_send_report`: `buf` (report ID first) as a report of
    /// `rtype`; the bytes sent, the report ID counted.
    pub(super) fn send_report(&self, buf: &[u8], rtype: ReportType) -> SysResult<i32> {
        if !self.dev.exists() {
            return Err(Errno::ENODEV);
        }
        if buf.len() > HID_MAX_BUFFER_SIZE || buf.len() < 2 {
            tracing::debug!(
                hid = %self.dev.dev_name(),
                len = buf.len(),
                "hidraw: a report of a length hidraw refuses (EINVAL)"
            );
            return Err(Errno::EINVAL);
        }
        let id = buf[0];
        // Report 0: the device numbers none, its ID is not sent.
        let body = if id == 0 { &buf[1..] } else { buf };
        let skipped = i32::from(id == 0);
        if rtype == ReportType::Output {
            if let Some(ep) = self.dev.out_ep {
                // usbhid_output_report: usb_interrupt_msg.
                let (sent, _) = self.transfer(UrbRequest {
                    xfer: TransferType::Interrupt,
                    endpoint: ep,
                    setup: None,
                    length: body.len() as u32,
                    out: body.to_vec(),
                    flags: 0,
                    iso_lengths: Vec::new(),
                    interval: 0,
                    stream_id: 0,
                    start_frame: 0,
                })?;
                return Ok(sent as i32 + skipped);
            }
        }
        // usbhid_set_raw_report: SET_REPORT.
        let (sent, _) = self.control(0x09, rtype, id, body, body.len() as u16, false)?;
        Ok(sent as i32 + skipped)
    }

    /// `hidraw_get_report`: the report of `rtype` whose ID is `first[0]`,
    /// at most `count` bytes with the ID first.
    fn get_report(&self, first: u8, count: usize, rtype: ReportType) -> SysResult<Vec<u8>> {
        if !self.dev.exists() {
            return Err(Errno::ENODEV);
        }
        let count = count.min(HID_MAX_BUFFER_SIZE);
        if count < 2 {
            return Err(Errno::EINVAL);
        }
        // usbhid_get_raw_report: report 0 is asked for without its ID,
        // which stays in byte 0.
        let (want, skipped) = if first == 0 {
            (count - 1, true)
        } else {
            (count, false)
        };
        let (_, got) = self.control(0x01, rtype, first, &[], want as u16, true)?;
        let mut out = Vec::with_capacity(count);
        if skipped {
            out.push(0);
        }
        out.extend_from_slice(&got);
        out.truncate(count);
        Ok(out)
    }
}

impl OpenFile for HidrawFile {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        if self.revoked() {
            return Err(Errno::ENODEV);
        }
        let mut q = self.list.q.lock_ok();
        // A read of 0 bytes takes reports and copies nothing, and goes on
        // until one is there, as hidraw_read's loop does.
        if size == 0 {
            q.clear();
        }
        if let Some(mut r) = q.pop_front() {
            r.truncate(size as usize);
            return Ok(r);
        }
        if !self.dev.exists() {
            return Err(Errno::EIO);
        }
        Err(Errno::EAGAIN)
    }

    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        if self.revoked() {
            return Err(Errno::ENODEV);
        }
        self.io()
            .send_report(data, ReportType::Output)
            .map(|n| n as u32)
    }

    fn poll(&self) -> u32 {
        let mut m = (libc::POLLOUT | libc::POLLWRNORM) as u32;
        if !self.list.q.lock_ok().is_empty() {
            m |= POLL_READABLE;
        }
        if !self.dev.exists() || self.revoked() {
            m |= (libc::POLLERR | libc::POLLHUP) as u32;
        }
        m
    }

    fn set_waker(&self, waker: Waker) {
        self.list.waker.set(waker);
    }

    fn is_stream(&self) -> bool {
        true
    }

    fn compat_ioctl(&self) -> bool {
        true
    }

    /// The caller memory each command touches, for the character device
    /// (CUSE copies exactly these): what [`OpenFile::ioctl`] reads and
    /// writes.
    fn ioctl_layout(&self, cmd: u32, arg: u64, input: &[u8], _compat: bool) -> IoctlLayout {
        let mut l = IoctlLayout::default();
        let size = u64::from((cmd >> 16) & 0x3fff);
        match cmd {
            HIDIOCGRDESCSIZE => l.output.push((arg, 4)),
            HIDIOCGRDESC => {
                l.input.push((arg, 4));
                if let Some(b) = input.get(..4) {
                    let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                    if len < HID_MAX_DESCRIPTOR_SIZE {
                        l.output
                            .push((arg + 4, len.min(self.dev.rdesc.len()) as u64));
                    }
                }
            }
            HIDIOCGRAWINFO => l.output.push((arg, 8)),
            _ if (cmd >> 8) & 0xff != u32::from(b'H') => {}
            _ => match cmd & 0xff {
                NR_SFEATURE | NR_SINPUT | NR_SOUTPUT => {
                    l.input
                        .push((arg, size.min(HID_MAX_BUFFER_SIZE as u64 + 1)));
                }
                NR_GFEATURE | NR_GINPUT | NR_GOUTPUT if size > 0 => {
                    l.input.push((arg, 1));
                    l.output.push((arg, size.min(HID_MAX_BUFFER_SIZE as u64)));
                }
                NR_GRAWNAME | NR_GRAWPHYS | NR_GRAWUNIQ if cmd >> 30 == IOC_READ => {
                    l.output.push((arg, size));
                }
                _ => {}
            },
        }
        l
    }

    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        // hidraw's transfers block whatever the file's flags.
        if !self.dev.exists() || self.revoked() {
            return Err(Errno::ENODEV);
        }
        if req.cmd == HIDIOCREVOKE {
            // Its argument must be NULL (a FUSE file's caller cannot get
            // here with NULL: the kernel copies the int in first, EFAULT).
            if req.arg != 0 {
                return Err(Errno::EINVAL);
            }
            self.list.revoked.store(true, Ordering::SeqCst);
            self.list.q.lock_ok().clear();
            return Ok(IoctlReply::default());
        }
        match req.cmd {
            HIDIOCGRDESCSIZE => {
                return Ok(IoctlReply::new(
                    (self.dev.rdesc.len() as i32).to_ne_bytes().to_vec(),
                    0,
                ));
            }
            HIDIOCGRDESC => {
                let b = req.mem.read(req.arg, 4)?;
                let len = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]) as usize;
                if len > HID_MAX_DESCRIPTOR_SIZE - 1 {
                    return Err(Errno::EINVAL);
                }
                let n = len.min(self.dev.rdesc.len());
                req.mem.write(req.arg + 4, &self.dev.rdesc[..n])?;
                return Ok(IoctlReply::new(Vec::new(), 0));
            }
            HIDIOCGRAWINFO => {
                let mut o = BUS_USB.to_ne_bytes().to_vec();
                o.extend_from_slice(&self.dev.vendor.to_ne_bytes());
                o.extend_from_slice(&self.dev.product.to_ne_bytes());
                return Ok(IoctlReply::new(o, 0));
            }
            _ => {}
        }
        let (dir, ty, nr, size) = (
            req.cmd >> 30,
            (req.cmd >> 8) & 0xff,
            req.cmd & 0xff,
            (req.cmd >> 16) & 0x3fff,
        );
        if ty != u32::from(b'H') {
            return Err(Errno::EINVAL);
        }
        let len = size as usize;
        let set = |rtype| -> SysResult<IoctlReply> {
            let buf = req.argument(len.min(HID_MAX_BUFFER_SIZE + 1))?;
            let n = self.io().send_report(&buf, rtype)?;
            Ok(IoctlReply::new(Vec::new(), n))
        };
        let get = |rtype| -> SysResult<IoctlReply> {
            if len < 1 {
                return Err(Errno::EINVAL);
            }
            let first = req.argument(1)?[0];
            let out = self.io().get_report(first, len, rtype)?;
            let n = out.len() as i32;
            Ok(IoctlReply::new(out, n))
        };
        match nr {
            NR_SFEATURE => return set(ReportType::Feature),
            NR_GFEATURE => return get(ReportType::Feature),
            NR_SINPUT => return set(ReportType::Input),
            NR_GINPUT => return get(ReportType::Input),
            NR_SOUTPUT => return set(ReportType::Output),
            NR_GOUTPUT => return get(ReportType::Output),
            _ => {}
        }
        if dir != IOC_READ {
            return Err(Errno::EINVAL);
        }
        match nr {
            NR_GRAWNAME => Ok(IoctlReply::string(&self.dev.name, size as usize)),
            NR_GRAWPHYS => Ok(IoctlReply::string(&self.dev.phys, size as usize)),
            NR_GRAWUNIQ => Ok(IoctlReply::string(&self.dev.uniq, size as usize)),
            _ => Err(Errno::ENOTTY),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_numbers_are_the_kernels() {
        // From <linux/hidraw.h> as the C compiler computes them.
        assert_eq!(HIDIOCGRDESCSIZE, 0x8004_4801);
        assert_eq!(HIDIOCGRDESC, 0x9004_4802);
        assert_eq!(HIDIOCGRAWINFO, 0x8008_4803);
    }

    #[test]
    fn strings_are_cut_with_or_without_their_nul() {
        let r = IoctlReply::string("QEMU", 64);
        assert_eq!((r.result, r.output.as_slice()), (5, &b"QEMU\0"[..]));
        let r = IoctlReply::string("QEMU", 2);
        assert_eq!((r.result, r.output.as_slice()), (2, &b"QE"[..]));
    }
}
