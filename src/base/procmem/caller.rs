//! The caller's memory: `process_vm_readv`/`process_vm_writev` on the pid
//! of a request's (blocked) caller, after its range is checked.

use std::io::{IoSlice, IoSliceMut};

use nix::sys::uio::{process_vm_readv, process_vm_writev, RemoteIoVec};
use nix::unistd::Pid;

use crate::base::errno::{Errno, SysResult};

use super::*;

/// Read `len` bytes at `addr` in process `pid`, unchecked. EFAULT if any byte
/// is not readable.
fn raw_read(pid: u32, addr: u64, len: usize) -> SysResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let mut buf = vec![0u8; len];
    let _watched = AccessGuard::enter();
    let remote = [RemoteIoVec {
        base: addr as usize,
        len,
    }];
    match process_vm_readv(pid_of(pid), &mut [IoSliceMut::new(&mut buf)], &remote) {
        Ok(n) if n == len => Ok(buf),
        Err(nix::errno::Errno::EPERM) => Err(Errno::EPERM),
        _ => Err(Errno::EFAULT),
    }
}

fn pid_of(pid: u32) -> Pid {
    Pid::from_raw(pid as i32)
}

/// Write `data` at `addr` in process `pid`, unchecked. EFAULT if not all of
/// it could be written.
fn raw_write(pid: u32, addr: u64, data: &[u8]) -> SysResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    if addr == 0 {
        return Err(Errno::EFAULT);
    }
    let _watched = AccessGuard::enter();
    let remote = [RemoteIoVec {
        base: addr as usize,
        len: data.len(),
    }];
    match process_vm_writev(pid_of(pid), &[IoSlice::new(data)], &remote) {
        Ok(n) if n == data.len() => Ok(()),
        Err(nix::errno::Errno::EPERM) => Err(Errno::EPERM),
        _ => Err(Errno::EFAULT),
    }
}

/// Read `len` bytes at `addr` in process `pid`, the caller of a request that
/// is still waiting for its answer. EFAULT if any byte is unmapped,
/// unreadable, or backed by a file that only a FUSE daemon can fault in.
pub fn read(pid: u32, addr: u64, len: usize) -> SysResult<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    check_range(pid, addr, len as u64, Access::Read)?;
    raw_read(pid, addr, len)
}

/// Write `data` at `addr` in process `pid`, the caller of a request that is
/// still waiting for its answer (see [`read`]).
pub fn write(pid: u32, addr: u64, data: &[u8]) -> SysResult<()> {
    if data.is_empty() {
        return Ok(());
    }
    check_range(pid, addr, data.len() as u64, Access::Write)?;
    raw_write(pid, addr, data)
}

/// The memory of a request's caller (the thread the kernel named in the
/// request, which is blocked in it).
pub struct ProcessMemory(pub u32);

impl crate::base::vfs::CallerMemory for ProcessMemory {
    fn read(&self, addr: u64, len: usize) -> SysResult<Vec<u8>> {
        read(self.0, addr, len)
    }
    fn write(&self, addr: u64, data: &[u8]) -> SysResult<()> {
        write(self.0, addr, data)
    }
}
