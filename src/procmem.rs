//! Reading and writing a caller's memory with `process_vm_readv` and
//! `process_vm_writev`, for ioctl arguments that hold pointers (a FUSE file
//! only gets the `_IOC_SIZE` bytes of the argument struct itself).
//!
//! The pid is always the one the kernel put in the request (the calling
//! thread), never a value taken from payload data.

use crate::errno::{Errno, SysResult};

/// Read `len` bytes at `addr` in process `pid`. EFAULT if any byte is not
/// readable.
pub fn read(pid: u32, addr: u64, len: usize) -> SysResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: the local iovec points into `buf`, which outlives the call.
    let n = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
    if n as usize != len {
        return Err(Errno::EFAULT);
    }
    Ok(buf)
}

/// Write `data` at `addr` in process `pid`. EFAULT if not all of it could be
/// written.
pub fn write(pid: u32, addr: u64, data: &[u8]) -> SysResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: the local iovec points into `data`, which outlives the call.
    let n = unsafe { libc::process_vm_writev(pid as i32, &local, 1, &remote, 1, 0) };
    if n < 0 || n as usize != data.len() {
        return Err(Errno::EFAULT);
    }
    Ok(())
}

/// A process's memory reached with process_vm_readv/writev.
pub struct ProcessMemory(pub u32);

impl crate::vfs::CallerMemory for ProcessMemory {
    fn read(&self, addr: u64, len: usize) -> SysResult<Vec<u8>> {
        read(self.0, addr, len)
    }
    fn write(&self, addr: u64, data: &[u8]) -> SysResult<()> {
        write(self.0, addr, data)
    }
}

/// Read a NUL-terminated string of at most `max` bytes at `addr`.
pub fn read_cstr(pid: u32, addr: u64, max: usize) -> SysResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < max {
        // Read up to the end of the page so an unmapped next page is not touched.
        let chunk = (4096 - (at as usize % 4096)).min(max - out.len());
        let part = read(pid, at, chunk)?;
        if let Some(p) = part.iter().position(|&b| b == 0) {
            out.extend_from_slice(&part[..p]);
            return Ok(out);
        }
        out.extend_from_slice(&part);
        at += chunk as u64;
    }
    Err(Errno::E2BIG)
}

/// Whether process `pid` has a shared mapping of the file with device `dev`
/// and inode `ino` (read from `/proc/<pid>/maps`).
pub fn has_shared_mapping(pid: u32, dev: u64, ino: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let want_dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    maps.lines().any(|l| {
        let mut w = l.split_whitespace();
        let (_range, perms, _off, d, i) = (w.next(), w.next(), w.next(), w.next(), w.next());
        perms.is_some_and(|p| p.ends_with('s'))
            && d == Some(want_dev.as_str())
            && i.and_then(|i| i.parse::<u64>().ok()) == Some(ino)
    })
}

/// The current `O_NONBLOCK` of the open file of device `dev`, inode `ino` in
/// process `pid`: FUSE tells a filesystem the file flags on every read but not
/// on an ioctl, and `fcntl(F_SETFL)` may have changed them since open. Read
/// from `/proc/<pid>/fdinfo` (its `ino:` field needs Linux 5.14) with the
/// mounts of `dev` from `/proc/<pid>/mountinfo`. None if no descriptor of the
/// process refers to the file.
pub fn fd_nonblock(pid: u32, dev: u64, ino: u64) -> Option<bool> {
    let want_dev = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let mnt_ids: Vec<&str> = mounts
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let id = w.next()?;
            (w.nth(1)? == want_dev).then_some(id)
        })
        .collect();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()? {
        let Ok(info) = std::fs::read_to_string(fd.ok()?.path()) else {
            continue;
        };
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name))
                .map(|v| v.trim())
        };
        if field("ino:").and_then(|v| v.parse::<u64>().ok()) != Some(ino)
            || !field("mnt_id:").is_some_and(|m| mnt_ids.contains(&m))
        {
            continue;
        }
        let flags = i32::from_str_radix(field("flags:")?, 8).ok()?;
        return Some(flags & libc::O_NONBLOCK != 0);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_nonblock_follows_fcntl() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let f = tempfile::tempfile_in("/dev/shm").unwrap();
        let md = f.metadata().unwrap();
        let (pid, dev, ino) = (std::process::id(), md.dev(), md.ino());
        assert_eq!(fd_nonblock(pid, dev, ino), Some(false));
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        assert_eq!(fd_nonblock(pid, dev, ino), Some(true));
        assert_eq!(fd_nonblock(pid, dev, ino + 1), None);
    }

    #[test]
    fn read_and_write_own_memory() {
        let pid = std::process::id();
        let mut target = [0u8; 16];
        write(pid, target.as_mut_ptr() as u64, b"hello").unwrap();
        // SAFETY: volatile read of our own buffer after the kernel wrote it.
        let got = unsafe { std::ptr::read_volatile(&target) };
        assert_eq!(&got[..5], b"hello");
        assert_eq!(read(pid, target.as_ptr() as u64, 5).unwrap(), b"hello");
        let s = b"name u32 x\0";
        assert_eq!(
            read_cstr(pid, s.as_ptr() as u64, 64).unwrap(),
            b"name u32 x"
        );
        assert_eq!(read(pid, 0, 4).err(), Some(Errno::EFAULT));
        assert_eq!(read(pid, 8, 4).err(), Some(Errno::EFAULT));
        assert_eq!(write(pid, 8, b"x").err(), Some(Errno::EFAULT));
    }
}
