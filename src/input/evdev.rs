//! evdev's node, `dev/input/eventN`, as `drivers/input/evdev.c` serves it.
//!
//! * `read(2)`: whole `struct input_event`s (24 bytes) of complete frames,
//!   as many as fit; EINVAL under 24 bytes, blocks (EAGAIN when
//!   non-blocking) while no frame is complete, ENODEV once the device is
//!   gone or the file revoked. Each open file has a ring of at least 64
//!   events; one that overflows keeps the newest event after a
//!   SYN_DROPPED.
//! * `write(2)`: events injected as if the device sent them (EV_LED sets
//!   a keyboard's LEDs); EINVAL under 24 bytes.
//! * `poll`: writable while the device is there, readable with a frame
//!   queued, POLLERR and POLLHUP once it is gone or the file revoked.
//! * ioctls: EVIOCGVERSION, EVIOCGID, EVIOCGREP/EVIOCSREP, EVIOCGNAME,
//!   EVIOCGPHYS, EVIOCGUNIQ, EVIOCGPROP, EVIOCGBIT, EVIOCGKEY, EVIOCGLED,
//!   EVIOCGSND, EVIOCGSW, EVIOCGABS/EVIOCSABS, EVIOCGRAB, EVIOCREVOKE,
//!   EVIOCGMASK/EVIOCSMASK, EVIOCSCLOCKID, EVIOCGEFFECTS, with evdev's
//!   answers and errnos.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, IoctlLayout, IoctlReply, IoctlRequest, OpenFile, OpenFlags, Waker,
    POLL_READABLE,
};

use super::client::{mask_count, Client, EVENT_SIZE};
use super::codes::*;
use super::device::InputDevice;

/// The ioctl numbers (`<linux/input.h>`).
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;
const fn ioc(dir: u32, nr: u32, size: u32) -> u32 {
    (dir << 30) | (size << 16) | ((b'E' as u32) << 8) | nr
}
/// EVIOCGVERSION.
pub const EVIOCGVERSION: u32 = ioc(IOC_READ, 0x01, 4);
/// EVIOCGID.
pub const EVIOCGID: u32 = ioc(IOC_READ, 0x02, 8);
/// EVIOCGREP.
pub const EVIOCGREP: u32 = ioc(IOC_READ, 0x03, 8);
/// EVIOCSREP.
pub const EVIOCSREP: u32 = ioc(IOC_WRITE, 0x03, 8);
/// EVIOCGKEYCODE.
pub const EVIOCGKEYCODE: u32 = ioc(IOC_READ, 0x04, 8);
/// EVIOCSKEYCODE.
pub const EVIOCSKEYCODE: u32 = ioc(IOC_WRITE, 0x04, 8);
/// EVIOCGKEYCODE_V2 (`struct input_keymap_entry`).
pub const EVIOCGKEYCODE_V2: u32 = ioc(IOC_READ, 0x04, KEYMAP_ENTRY as u32);
/// EVIOCSKEYCODE_V2.
pub const EVIOCSKEYCODE_V2: u32 = ioc(IOC_WRITE, 0x04, KEYMAP_ENTRY as u32);
/// `sizeof(struct input_keymap_entry)`.
const KEYMAP_ENTRY: usize = 40;
/// EVIOCRMFF.
pub const EVIOCRMFF: u32 = ioc(IOC_WRITE, 0x81, 4);
/// EVIOCGEFFECTS.
pub const EVIOCGEFFECTS: u32 = ioc(IOC_READ, 0x84, 4);
/// EVIOCGRAB.
pub const EVIOCGRAB: u32 = ioc(IOC_WRITE, 0x90, 4);
/// EVIOCREVOKE.
pub const EVIOCREVOKE: u32 = ioc(IOC_WRITE, 0x91, 4);
/// EVIOCGMASK (`struct input_mask`: type, codes_size, codes_ptr).
pub const EVIOCGMASK: u32 = ioc(IOC_READ, 0x92, 16);
/// EVIOCSMASK.
pub const EVIOCSMASK: u32 = ioc(IOC_WRITE, 0x93, 16);
/// EVIOCSCLOCKID.
pub const EVIOCSCLOCKID: u32 = ioc(IOC_WRITE, 0xa0, 4);
/// `sizeof(struct input_absinfo)`.
const ABSINFO_SIZE: usize = 24;

pub struct EvdevNode {
    pub(super) dev: Weak<InputDevice>,
}

impl FileNode for EvdevNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let dev = self
            .dev
            .upgrade()
            .filter(|d| d.exists())
            .ok_or(Errno::ENODEV)?;
        Ok(open(dev))
    }
}

/// Minor M of evdev's character device: opens the device that has minor
/// M now (ENODEV when none has).
pub struct MinorNode {
    /// The device with the minor now.
    pub(super) lookup: Arc<dyn Fn() -> Option<Arc<InputDevice>> + Send + Sync>,
}

impl FileNode for MinorNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let dev = (self.lookup)()
            .filter(|d| d.exists())
            .ok_or(Errno::ENODEV)?;
        Ok(open(dev))
    }
}

/// `evdev_open`: a client with a ring of `evdev_compute_buffer_size`.
fn open(dev: Arc<InputDevice>) -> Arc<dyn OpenFile> {
    let client = Arc::new(Client::new(&dev.spec.caps));
    {
        let mut c = dev.clients.lock_ok();
        c.retain(|w| w.strong_count() > 0);
        c.push(Arc::downgrade(&client));
    }
    Arc::new(EvdevFile { dev, client })
}

struct EvdevFile {
    dev: Arc<InputDevice>,
    client: Arc<Client>,
}

impl Drop for EvdevFile {
    fn drop(&mut self) {
        // evdev_release: a grab goes with the file.
        let mut st = self.dev.st.lock_ok();
        if st.grab == Some(self.client.id) {
            st.grab = None;
        }
    }
}

impl EvdevFile {
    fn gone(&self) -> bool {
        !self.dev.exists() || self.client.revoked.load(Ordering::SeqCst)
    }

    /// `evdev_handle_get_val`: a state bitmap, the queued events of its
    /// type dropped.
    fn get_val(&self, ty: u16, size: usize) -> IoctlReply {
        let bits = {
            let st = self.dev.st.lock_ok();
            let b = st.bits(ty).clone();
            self.client.ring.lock_ok().flush(ty);
            b
        };
        IoctlReply::cut(bits.bytes(max_code(ty).unwrap_or(0)), size)
    }

    /// The `struct input_mask` at the argument: type, codes_size,
    /// codes_ptr.
    fn input_mask(req: &IoctlRequest<'_>) -> SysResult<(u32, u32, u64)> {
        let b = req.argument(16)?;
        let u = |i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok((u(0), u(4), u64::from(u(8)) | (u64::from(u(12)) << 32)))
    }
}

impl OpenFile for EvdevFile {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let size = size as usize;
        if size != 0 && size < EVENT_SIZE {
            return Err(Errno::EINVAL);
        }
        if self.gone() {
            return Err(Errno::ENODEV);
        }
        let mut r = self.client.ring.lock_ok();
        if r.packet_head == r.tail {
            return Err(Errno::EAGAIN);
        }
        let mut out = Vec::new();
        let m = r.mask();
        while out.len() + EVENT_SIZE <= size && r.packet_head != r.tail {
            let e = r.buf[r.tail];
            r.tail = (r.tail + 1) & m;
            out.extend_from_slice(&e.bytes());
        }
        Ok(out)
    }

    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        let count = data.len().min(4096);
        if count != 0 && count < EVENT_SIZE {
            return Err(Errno::EINVAL);
        }
        if self.gone() {
            return Err(Errno::ENODEV);
        }
        let mut done = 0;
        while done + EVENT_SIZE <= count {
            let e = &data[done..done + EVENT_SIZE];
            let ty = u16::from_ne_bytes([e[16], e[17]]);
            let code = u16::from_ne_bytes([e[18], e[19]]);
            let value = i32::from_ne_bytes([e[20], e[21], e[22], e[23]]);
            done += EVENT_SIZE;
            self.dev.inject(self.client.id, ty, code, value);
        }
        Ok(done as u32)
    }

    fn poll(&self) -> u32 {
        let mut m = if self.gone() {
            (libc::POLLHUP | libc::POLLERR) as u32
        } else {
            (libc::POLLOUT | libc::POLLWRNORM) as u32
        };
        let r = self.client.ring.lock_ok();
        if r.packet_head != r.tail {
            m |= POLL_READABLE;
        }
        m
    }

    fn set_waker(&self, waker: Waker) {
        self.client.waker.set(waker);
    }

    fn is_stream(&self) -> bool {
        true
    }

    fn ioctl_layout(&self, cmd: u32, arg: u64, input: &[u8], _compat: bool) -> IoctlLayout {
        let mut l = IoctlLayout::default();
        let (dir, nr, size) = (cmd >> 30, cmd & 0xff, u64::from((cmd >> 16) & 0x3fff));
        if (cmd >> 8) & 0xff != u32::from(b'E') {
            return l;
        }
        match cmd {
            EVIOCGRAB | EVIOCREVOKE | EVIOCRMFF => {}
            EVIOCGMASK | EVIOCSMASK => {
                l.input.push((arg, 16));
                if let Some(b) = input.get(..16) {
                    let size = u32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
                    let ptr =
                        u64::from_ne_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
                    let ty = u32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                    let cnt = u16::try_from(ty).ok().and_then(mask_count).unwrap_or(0);
                    if cmd == EVIOCGMASK {
                        l.output.push((ptr, u64::from(size)));
                    } else if cnt > 0 {
                        let words = (cnt - 1).div_ceil(64) as u64 * 8;
                        l.input.push((ptr, u64::from(size).min(words)));
                    }
                }
            }
            EVIOCGKEYCODE => {
                l.input.push((arg, 4));
                l.output.push((arg, 8));
            }
            EVIOCGKEYCODE_V2 => {
                l.input.push((arg, KEYMAP_ENTRY as u64));
                l.output.push((arg, KEYMAP_ENTRY as u64));
            }
            _ if dir == IOC_WRITE => l.input.push((arg, size.min(ABSINFO_SIZE as u64 * 2))),
            _ if dir == IOC_READ && (0x40..0x80).contains(&nr) => {
                l.output.push((arg, size.min(ABSINFO_SIZE as u64)))
            }
            _ if dir == IOC_READ => l.output.push((arg, size)),
            _ => {}
        }
        l
    }

    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        if self.gone() {
            return Err(Errno::ENODEV);
        }
        let dev = &self.dev;
        let caps = &dev.spec.caps;
        let arg_int = |req: &IoctlRequest<'_>| -> SysResult<u32> {
            let b = req.argument(4)?;
            Ok(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        };
        match req.cmd {
            EVIOCGVERSION => return Ok(IoctlReply::new(EV_VERSION.to_ne_bytes().to_vec(), 0)),
            EVIOCGID => {
                let id = &dev.spec.id;
                let mut o = Vec::with_capacity(8);
                for v in [id.bustype, id.vendor, id.product, id.version] {
                    o.extend_from_slice(&v.to_ne_bytes());
                }
                return Ok(IoctlReply::new(o, 0));
            }
            EVIOCGREP | EVIOCSREP if !caps.has_type(EV_REP) => return Err(Errno::ENOSYS),
            EVIOCGREP => {
                let rep = dev.st.lock_ok().rep;
                let mut o = rep[0].to_ne_bytes().to_vec();
                o.extend_from_slice(&rep[1].to_ne_bytes());
                return Ok(IoctlReply::new(o, 0));
            }
            EVIOCSREP => {
                let b = req.argument(8)?;
                let delay = i32::from_ne_bytes([b[0], b[1], b[2], b[3]]);
                let period = i32::from_ne_bytes([b[4], b[5], b[6], b[7]]);
                dev.inject(self.client.id, EV_REP, super::REP_DELAY, delay);
                dev.inject(self.client.id, EV_REP, super::REP_PERIOD, period);
                return Ok(IoctlReply::new(Vec::new(), 0));
            }
            EVIOCGEFFECTS => return Ok(IoctlReply::new(0i32.to_ne_bytes().to_vec(), 0)),
            // input_ff_erase: no force feedback.
            EVIOCRMFF => return Err(Errno::ENOSYS),
            EVIOCGRAB => {
                let mut st = dev.st.lock_ok();
                return if req.arg != 0 {
                    if st.grab.is_some() {
                        Err(Errno::EBUSY)
                    } else {
                        st.grab = Some(self.client.id);
                        Ok(IoctlReply::new(Vec::new(), 0))
                    }
                } else if st.grab == Some(self.client.id) {
                    st.grab = None;
                    Ok(IoctlReply::new(Vec::new(), 0))
                } else {
                    Err(Errno::EINVAL)
                };
            }
            EVIOCREVOKE => {
                if req.arg != 0 {
                    return Err(Errno::EINVAL);
                }
                self.client.revoked.store(true, Ordering::SeqCst);
                {
                    let mut st = dev.st.lock_ok();
                    if st.grab == Some(self.client.id) {
                        st.grab = None;
                    }
                }
                self.client.wake();
                return Ok(IoctlReply::new(Vec::new(), 0));
            }
            EVIOCGMASK => {
                let (ty, size, ptr) = Self::input_mask(req)?;
                let cnt = u16::try_from(ty).ok().and_then(mask_count).unwrap_or(0);
                let full = cnt.div_ceil(64) * 8;
                let xfer = (size as usize).min(full);
                let mut out = vec![0u8; size as usize];
                if cnt > 0 {
                    let r = self.client.ring.lock_ok();
                    match &r.masks[ty as usize] {
                        Some(m) => {
                            let b = m.bytes(cnt - 1);
                            let n = xfer.min(b.len());
                            out[..n].copy_from_slice(&b[..n]);
                        }
                        None => out[..xfer].fill(0xff),
                    }
                }
                if !out.is_empty() {
                    req.mem.write(ptr, &out)?;
                }
                return Ok(IoctlReply::new(Vec::new(), 0));
            }
            EVIOCSMASK => {
                let (ty, size, ptr) = Self::input_mask(req)?;
                let Some(cnt) = u16::try_from(ty).ok().and_then(mask_count) else {
                    return Ok(IoctlReply::new(Vec::new(), 0));
                };
                if size % 8 != 0 {
                    return Err(Errno::EINVAL);
                }
                let len = ((cnt - 1).div_ceil(64) * 8).min(size as usize);
                let b = if len > 0 {
                    req.mem.read(ptr, len)?
                } else {
                    Vec::new()
                };
                // The caller's words as they are (bits_from_user copies
                // whole longs: EVIOCGMASK gives back bits past the last
                // code too).
                let mut m = Bits::new(cnt - 1);
                for (i, byte) in b.iter().enumerate() {
                    for k in 0..8 {
                        if byte >> k & 1 != 0 {
                            m.set(i * 8 + k);
                        }
                    }
                }
                self.client.ring.lock_ok().masks[ty as usize] = Some(m);
                return Ok(IoctlReply::new(Vec::new(), 0));
            }
            EVIOCSCLOCKID => {
                let clk = match arg_int(req)? as i32 {
                    libc::CLOCK_REALTIME => 0,
                    libc::CLOCK_MONOTONIC => 1,
                    libc::CLOCK_BOOTTIME => 2,
                    _ => return Err(Errno::EINVAL),
                };
                let mut r = self.client.ring.lock_ok();
                if r.clk != clk {
                    r.clk = clk;
                    if r.head != r.tail {
                        r.head = r.tail;
                        r.packet_head = r.tail;
                        r.syn_dropped();
                    }
                }
                return Ok(IoctlReply::new(Vec::new(), 0));
            }
            EVIOCGKEYCODE => {
                // The scan code in, the key code after it out.
                let scan = arg_int(req)?;
                let (code, _, _) = dev
                    .keycode(super::KeyLookup::Scancode(scan))
                    .ok_or(Errno::EINVAL)?;
                let mut o = scan.to_ne_bytes().to_vec();
                o.extend_from_slice(&code.to_ne_bytes());
                return Ok(IoctlReply::new(o, 0));
            }
            EVIOCGKEYCODE_V2 => {
                // struct input_keymap_entry: flags, len, index, keycode,
                // scancode[32].
                let b = req.argument(KEYMAP_ENTRY)?;
                let by = if b[0] & 1 != 0 {
                    super::KeyLookup::Index(u32::from(u16::from_ne_bytes([b[2], b[3]])))
                } else {
                    let s = &b[8..];
                    super::KeyLookup::Scancode(match b[1] {
                        1 => u32::from(s[0]),
                        2 => u32::from(u16::from_ne_bytes([s[0], s[1]])),
                        4 => u32::from_ne_bytes([s[0], s[1], s[2], s[3]]),
                        _ => return Err(Errno::EINVAL),
                    })
                };
                let (code, index, scan) = dev.keycode(by).ok_or(Errno::EINVAL)?;
                let mut o = b.clone();
                o[1] = 4;
                o[2..4].copy_from_slice(&(index as u16).to_ne_bytes());
                o[4..8].copy_from_slice(&code.to_ne_bytes());
                o[8..12].copy_from_slice(&scan.to_ne_bytes());
                return Ok(IoctlReply::new(o, 0));
            }
            EVIOCSKEYCODE | EVIOCSKEYCODE_V2 => return Err(Errno::EINVAL),
            _ => {}
        }
        let (dir, ty, nr, size) = (
            req.cmd >> 30,
            (req.cmd >> 8) & 0xff,
            req.cmd & 0xff,
            ((req.cmd >> 16) & 0x3fff) as usize,
        );
        if dir == IOC_READ && ty == u32::from(b'E') {
            match nr {
                0x09 => {
                    return Ok(IoctlReply::cut(caps.prop.bytes(PROP_MAX), size));
                }
                0x0a => return Err(Errno::EINVAL), // EVIOCGMTSLOTS: no slots
                0x18 => return Ok(self.get_val(EV_KEY, size)),
                0x19 => return Ok(self.get_val(EV_LED, size)),
                0x1a => return Ok(self.get_val(EV_SND, size)),
                0x1b => return Ok(self.get_val(EV_SW, size)),
                0x06 => return Ok(IoctlReply::string(&dev.spec.name, size)),
                0x07 => return Ok(IoctlReply::string(&dev.spec.phys, size)),
                0x08 => return Ok(IoctlReply::string(&dev.spec.uniq, size)),
                _ => {}
            }
        }
        if ty != u32::from(b'E') {
            return Err(Errno::EINVAL);
        }
        if dir == IOC_READ && nr & !0x1f == 0x20 {
            let t = (nr & 0x1f) as u16;
            let max = match t {
                EV_SYN
                | EV_KEY
                | super::EV_REL
                | EV_ABS
                | super::EV_MSC
                | EV_LED
                | EV_SND
                | EV_FF
                | EV_SW => max_code(t).unwrap_or(0),
                _ => return Err(Errno::EINVAL),
            };
            return Ok(IoctlReply::cut(caps.bits[t as usize].bytes(max), size));
        }
        if nr & !0x3f == 0x40 && (dir == IOC_READ || dir == IOC_WRITE) {
            if !caps.has_type(EV_ABS) {
                return Err(Errno::EINVAL);
            }
            let axis = (nr & 0x3f) as u16;
            if dir == IOC_READ {
                let a = dev.st.lock_ok().abs.get(&axis).copied().unwrap_or_default();
                let mut o = a.bytes();
                o.truncate(size.min(ABSINFO_SIZE));
                return Ok(IoctlReply::new(o, 0));
            }
            let n = size.min(ABSINFO_SIZE);
            let b = req.argument(n)?;
            let mut v = [0i32; 6];
            for (i, c) in b.chunks_exact(4).enumerate() {
                v[i] = i32::from_ne_bytes([c[0], c[1], c[2], c[3]]);
            }
            if axis == 0x2f {
                return Err(Errno::EINVAL); // ABS_MT_SLOT
            }
            dev.st.lock_ok().abs.insert(
                axis,
                super::AbsInfo {
                    value: v[0],
                    minimum: v[1],
                    maximum: v[2],
                    fuzz: v[3],
                    flat: v[4],
                    resolution: v[5],
                },
            );
            return Ok(IoctlReply::new(Vec::new(), 0));
        }
        Err(Errno::EINVAL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_numbers_are_the_kernels() {
        // <linux/input.h> as the C compiler computes them.
        assert_eq!(EVIOCGVERSION, 0x8004_4501);
        assert_eq!(EVIOCGID, 0x8008_4502);
        assert_eq!(EVIOCGRAB, 0x4004_4590);
        assert_eq!(EVIOCSCLOCKID, 0x4004_45a0);
        assert_eq!(EVIOCGMASK, 0x8010_4592);
    }
}
