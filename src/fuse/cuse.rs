//! CUSE: character devices under /dev served by the same handlers, with
//! the kernel's unrestricted-ioctl retry protocol.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use tracing::debug;

use crate::base::errno::Errno;
use crate::base::sync::LockExt;
use crate::base::vfs::{CallerMemory, IoctlLayout, IoctlRequest, MinorNode, Tree};

use super::handle::{Handle, IoctlCall};
use super::proto::{self, Reader};
use super::state::{CuseDev, Session, MAX_WRITE};

/// Caller memory for a CUSE ioctl: the input ranges the kernel copied in, and
/// writes collected for the output ranges.
pub(super) struct IovMemory<'a> {
    pub(super) layout: &'a IoctlLayout,
    pub(super) data: &'a [u8],
    pub(super) writes: std::cell::RefCell<Vec<(u64, Vec<u8>)>>,
}

impl<'a> IovMemory<'a> {
    fn new(layout: &'a IoctlLayout, data: &'a [u8]) -> Self {
        IovMemory {
            layout,
            data,
            writes: Default::default(),
        }
    }

    /// The reply payload: each output range in order, filled by the writes
    /// that start at it; the last range may be short.
    fn reply_bytes(&self) -> Vec<u8> {
        let writes = self.writes.borrow();
        let mut out = Vec::new();
        let n = self.layout.output.len();
        for (i, (base, len)) in self.layout.output.iter().enumerate() {
            let got = writes
                .iter()
                .rev()
                .find(|(a, _)| a == base)
                .map(|(_, b)| b.as_slice())
                .unwrap_or(&[]);
            let take = got.len().min(*len as usize);
            out.extend_from_slice(&got[..take]);
            if i + 1 < n && take < *len as usize {
                out.resize(out.len() + *len as usize - take, 0);
            }
        }
        out
    }
}

impl crate::base::vfs::CallerMemory for IovMemory<'_> {
    fn read(&self, addr: u64, len: usize) -> Result<Vec<u8>, Errno> {
        let mut at = 0usize;
        for (base, l) in &self.layout.input {
            if addr >= *base && addr + len as u64 <= base + l {
                let off = at + (addr - base) as usize;
                return self
                    .data
                    .get(off..off + len)
                    .map(|s| s.to_vec())
                    .ok_or(Errno::EFAULT);
            }
            at += *l as usize;
        }
        Err(Errno::EFAULT)
    }
    fn write(&self, addr: u64, data: &[u8]) -> Result<(), Errno> {
        let inside = self
            .layout
            .output
            .iter()
            .any(|(b, l)| addr >= *b && addr + data.len() as u64 <= b + l);
        if !inside {
            return Err(Errno::EFAULT);
        }
        self.writes.borrow_mut().push((addr, data.to_vec()));
        Ok(())
    }
}

/// The most memory a CUSE ioctl moves each way: the kernel's fuse_do_ioctl
/// answers ENOMEM when the retry's input or output iovecs exceed
/// `fc->max_pages` pages, and CUSE never raises that from
/// FUSE_DEFAULT_MAX_PAGES_PER_REQ (32). libpcap's MON_IOCX_GET buffer is
/// 240 KiB, usbmon_read's 1 MiB; usbmon's events hold at most ring size / 5
/// bytes (60 KiB with the default ring), so shortening the data buffer to
/// what fits loses nothing unless the ring was enlarged past 640 KiB.
pub(super) const CUSE_IOCTL_MAX: u64 = 32 * 4096;

/// The kernel's CUSE device.
pub const DEVICE: &str = "/dev/cuse";

/// The class devices' CUSE character devices ([`CharDevices`]): per class
/// a device named `monfs.PID.CLASS` holds a dynamic major (its minor is
/// 255, above every class's minors), and each minor's device
/// (`monfs.PID.CLASSN`) is made at its first use and kept. Each is a
/// session of its own with one request thread.
///
/// [`CharDevices`]: crate::base::vfs::CharDevices
pub struct CuseClasses {
    /// (class, its node per minor) by major.
    classes: std::sync::Mutex<std::collections::HashMap<u32, (String, MinorNode)>>,
    /// The sessions, the reserving ones included, by (major, minor).
    sessions: std::sync::Mutex<std::collections::HashMap<(u32, u32), Arc<Session>>>,
}

/// The minor that reserves a class's major.
const RESERVING_MINOR: u32 = 255;

/// A node no one opens: the reserving device's.
struct Refuse;

impl crate::base::vfs::FileNode for Refuse {
    fn open(
        &self,
        _flags: crate::base::vfs::OpenFlags,
        _caller: &crate::base::vfs::Caller,
    ) -> Result<Arc<dyn crate::base::vfs::OpenFile>, Errno> {
        Err(Errno::ENODEV)
    }
}

impl CuseClasses {
    /// The maker, if `/dev/cuse` can be used.
    pub fn new() -> Option<CuseClasses> {
        check_device(std::path::Path::new(DEVICE)).ok()?;
        Some(CuseClasses {
            classes: Default::default(),
            sessions: Default::default(),
        })
    }

    /// Start CUSE device `name` (`major` 0: a dynamic one) served by
    /// `node`; its major once the kernel made it.
    fn start(
        &self,
        node: Arc<dyn crate::base::vfs::FileNode>,
        name: &str,
        major: u32,
        minor: u32,
    ) -> anyhow::Result<u32> {
        let s = Session::cuse(node, name, major, minor)?;
        let runner = Arc::clone(&s);
        std::thread::Builder::new()
            .name(format!("cuse-{name}"))
            .spawn(move || runner.run(1))
            .context("spawn a CUSE thread")?;
        let Some((major, got)) = device_number(name, 400) else {
            s.shutdown();
            anyhow::bail!("/sys/class/cuse/{name}/dev did not appear");
        };
        self.sessions.lock_ok().insert((major, minor), s);
        debug!(device = %name, number = %format!("{major}:{got}"), "CUSE class device ready");
        Ok(major)
    }
}

/// The number of CUSE device `name` (its `/sys/class/cuse/NAME/dev`) once
/// the kernel has made it, which it does when it has the INIT answer:
/// looked for every 5 ms, `tries` times at most.
pub fn device_number(name: &str, tries: u32) -> Option<(u32, u32)> {
    let sys = format!("/sys/class/cuse/{name}/dev");
    for _ in 0..tries {
        if let Ok(t) = std::fs::read_to_string(&sys) {
            let (ma, mi) = t.trim().split_once(':')?;
            return Some((ma.parse().ok()?, mi.parse().ok()?));
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    None
}

impl crate::base::vfs::CharDevices for CuseClasses {
    fn reserve(&self, class: &str, node: MinorNode) -> Option<u32> {
        let name = format!("monfs.{}.{class}", std::process::id());
        match self.start(Arc::new(Refuse), &name, 0, RESERVING_MINOR) {
            Ok(major) => {
                self.classes
                    .lock_ok()
                    .insert(major, (class.to_string(), node));
                Some(major)
            }
            Err(e) => {
                tracing::warn!("CUSE: no character devices for {class}: {e:#}");
                None
            }
        }
    }

    fn ensure(&self, major: u32, minor: u32) -> bool {
        if self.sessions.lock_ok().contains_key(&(major, minor)) {
            return true;
        }
        let Some((class, node)) = self.classes.lock_ok().get(&major).cloned() else {
            return false;
        };
        let name = format!("monfs.{}.{class}{minor}", std::process::id());
        match self.start(node(minor), &name, major, minor) {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!("CUSE: no character device {major}:{minor} ({name}): {e:#}");
                false
            }
        }
    }
}

/// Whether CUSE devices can be created through `path` (the kernel's is
/// [`DEVICE`]): it opens the device, read and write, as [`Session::cuse`]
/// does, and closes it again (the kernel drops the connection that open
/// made). The error says why not, and what to do, for a person to read.
pub fn check_device(path: &std::path::Path) -> Result<(), super::error::CuseError> {
    use super::error::CuseError;
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(CuseError::Missing(path.to_path_buf()))
        }
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(CuseError::Denied {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
        Err(e) => Err(CuseError::Open {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

/// Shorten `ranges` (the last ones first) to `max` bytes in all.
pub(super) fn clip_ranges(ranges: &mut [(u64, u64)], max: u64) {
    let mut left = max;
    for r in ranges.iter_mut() {
        r.1 = r.1.min(left);
        left -= r.1;
    }
}

impl Session {
    /// Create a character device `/dev/NAME` served by `node` through CUSE
    /// (`/dev/cuse`). `major` 0 lets the kernel pick one.
    pub fn cuse(
        node: Arc<dyn crate::base::vfs::FileNode>,
        name: &str,
        major: u32,
        minor: u32,
    ) -> anyhow::Result<Arc<Session>> {
        let dev = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEVICE)
            .context("cannot open /dev/cuse (the kernel needs CUSE: modprobe cuse)")?;
        Ok(Arc::new(Session::new(
            dev,
            Arc::new(Tree::new(0, 0)),
            PathBuf::from(format!("/dev/{name}")),
            false,
            false,
            Some(CuseDev {
                node,
                name: name.to_string(),
                major,
                minor,
            }),
        )))
    }

    pub(super) fn cuse_init(&self, u: u64, r: &mut Reader<'_>) {
        let Some(c) = &self.cuse else {
            return self.err(u, Errno::ENOSYS);
        };
        let major = r.u32().unwrap_or(0);
        if major != proto::KERNEL_VERSION {
            return self.err(u, Errno::EPROTO);
        }
        let mut w = proto::Writer::default();
        w.u32(proto::KERNEL_VERSION)
            .u32(proto::KERNEL_MINOR)
            .u32(0)
            .u32(proto::CUSE_UNRESTRICTED_IOCTL)
            .u32(MAX_WRITE)
            .u32(MAX_WRITE)
            .u32(c.major)
            .u32(c.minor)
            .zeros(40);
        w.0.extend_from_slice(format!("DEVNAME={}\0", c.name).as_bytes());
        debug!(device = %c.name, "CUSE INIT");
        self.ok(u, &w.0);
    }

    /// Answer an unrestricted (CUSE) ioctl with FUSE_IOCTL_RETRY and the ranges
    /// the kernel should copy in and out on the next attempt.
    pub(super) fn ioctl_retry(&self, u: u64, layout: &IoctlLayout) {
        let mut w = proto::Writer::default();
        w.u32(0)
            .u32(proto::ioctl_flags::RETRY)
            .u32(layout.input.len() as u32)
            .u32(layout.output.len() as u32);
        for (base, len) in layout.input.iter().chain(layout.output.iter()) {
            w.u64(*base).u64(*len);
        }
        self.ok(u, &w.0);
    }

    /// Run a CUSE ioctl whose memory the kernel has copied in; the bytes it
    /// writes go back in the reply, laid out over the declared output ranges.
    pub(super) fn cuse_ioctl(
        &self,
        hd: &Handle,
        c: &IoctlCall,
        layout: &IoctlLayout,
        data: &[u8],
        nonblock: bool,
        retry: bool,
    ) -> Result<Vec<u8>, Errno> {
        let mem = IovMemory::new(layout, data);
        let first = layout.input.first().map(|r| r.1 as usize).unwrap_or(0);
        let req = IoctlRequest {
            cmd: c.cmd,
            arg: c.arg,
            input: &data[..first.min(data.len())],
            out_size: 0,
            nonblock,
            caller: c.caller,
            retry,
            file_id: (0, c.nodeid),
            mem: &mem,
            compat: c.compat,
        };
        let rep = hd.file.ioctl(&req)?;
        if !rep.output.is_empty() {
            mem.write(c.arg, &rep.output)?;
        }
        let mut w = proto::Writer::default();
        w.u32(rep.result as u32).u32(0).u32(0).u32(0);
        w.0.extend_from_slice(&mem.reply_bytes());
        Ok(w.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cuse_check_says_why_a_device_cannot_be_used() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("cuse");
        let e = check_device(&missing).unwrap_err().to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        assert!(
            e.contains("does not exist") && e.contains("modprobe cuse"),
            "{e}"
        );
        // A directory cannot be opened for writing.
        let e = check_device(dir.path()).unwrap_err().to_string();
        assert!(
            e.starts_with("cannot open") && e.contains("modprobe cuse"),
            "{e}"
        );
        // Anything that opens read-write passes.
        std::fs::write(&missing, "").unwrap();
        assert_eq!(check_device(&missing), Ok(()));
    }

    /// A CUSE GETX: the kernel copied the 24-byte argument in; the handler's
    /// header and data writes come back laid out over the output ranges, the
    /// last one short.
    #[test]
    fn iov_memory_lays_out_writes_over_output_ranges() {
        let mut arg = Vec::new();
        arg.extend_from_slice(&0x1000u64.to_ne_bytes());
        arg.extend_from_slice(&0x2000u64.to_ne_bytes());
        arg.extend_from_slice(&100u64.to_ne_bytes());
        let layout = crate::usbmon::binary::BinReader::ioctl_layout(
            crate::usbmon::binary::ioc::GETX,
            0x500,
            &arg,
            false,
        );
        assert_eq!(layout.input, vec![(0x500, 24)]);
        assert_eq!(layout.output, vec![(0x1000, 64), (0x2000, 100)]);
        let mem = IovMemory::new(&layout, &arg);
        assert_eq!(mem.read(0x508, 8).unwrap(), 0x2000u64.to_ne_bytes());
        assert_eq!(mem.read(0x600, 8).err(), Some(Errno::EFAULT));
        mem.write(0x1000, &[7u8; 64]).unwrap();
        mem.write(0x2000, &[9u8; 10]).unwrap();
        assert_eq!(mem.write(0x3000, &[1]).err(), Some(Errno::EFAULT));
        let reply = mem.reply_bytes();
        assert_eq!(reply.len(), 74);
        assert_eq!(&reply[..64], &[7u8; 64][..]);
        assert_eq!(&reply[64..], &[9u8; 10][..]);
    }

    #[test]
    fn first_cuse_layout_asks_for_the_argument_struct() {
        let l = crate::usbmon::binary::BinReader::ioctl_layout(
            crate::usbmon::binary::ioc::MFETCH,
            0x500,
            &[],
            false,
        );
        assert_eq!(l.input, vec![(0x500, 16)]);
        assert!(l.output.is_empty());
        let stats = crate::usbmon::binary::BinReader::ioctl_layout(
            crate::usbmon::binary::ioc::STATS,
            0x700,
            &[],
            false,
        );
        assert_eq!(stats.output, vec![(0x700, 8)]);
    }
}
