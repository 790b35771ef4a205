//! The binary interface (`/dev/usbmonN`, here `dev/usbmonN`), like the kernel's
//! `mon_bin.c`: 48/64-byte headers, the ioctls and the mmap ring.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::event::{EventKind, UrbEvent};
use super::header::{capture_plan, encode_header, payload_parts, PKT_SZ_API0, PKT_SZ_API1};
use super::ring::{pkt_align, Ring, BUFF_DFL, BUFF_MAX, BUFF_MIN, CHUNK_SIZE, PKT_SIZE};
use super::{MonReader, Registration, UsbMon};
use crate::base::budget;
use crate::base::errno::{Errno, SysResult};
use crate::base::procmem;
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, IoctlLayout, IoctlReply, IoctlRequest, OpenFile, OpenFlags, Waker,
    POLL_READABLE,
};

/// ioctl numbers (x86_64 and the other generic-ioctl architectures).
#[allow(missing_docs)]
pub mod ioc {
    pub const URB_LEN: u32 = 0x9201;
    pub const STATS: u32 = 0x8008_9203;
    pub const T_RING_SIZE: u32 = 0x9204;
    pub const Q_RING_SIZE: u32 = 0x9205;
    pub const GET: u32 = 0x4018_9206;
    pub const MFETCH: u32 = 0xc010_9207;
    pub const MFLUSH: u32 = 0x9208;
    pub const GETX: u32 = 0x4018_920a;
    // What 32-bit callers send: the same structs with 4-byte pointers.
    pub const GET32: u32 = 0x400c_9206;
    pub const MFETCH32: u32 = 0xc00c_9207;
    pub const GETX32: u32 = 0x400c_920a;
}

/// `struct mon_bin_get` (`mon_bin_get32` for a 32-bit caller).
struct GetArg {
    hdr: u64,
    data: u64,
    alloc: u64,
}

impl GetArg {
    fn size(compat: bool) -> usize {
        if compat {
            12
        } else {
            24
        }
    }
    fn parse(b: &[u8], compat: bool) -> GetArg {
        if compat {
            GetArg {
                hdr: u32_at(b, 0) as u64,
                data: u32_at(b, 4) as u64,
                alloc: u32_at(b, 8) as u64,
            }
        } else {
            GetArg {
                hdr: u64_at(b, 0),
                data: u64_at(b, 8),
                alloc: u64_at(b, 16),
            }
        }
    }
    /// The native call refuses allocations the kernel could not cast to u32
    /// (the compat one has no such check, as in the kernel).
    fn too_big(&self, compat: bool) -> bool {
        !compat && self.alloc > 0x1000_0000
    }
}

/// `struct mon_bin_mfetch` (`mon_bin_mfetch32`): where its fields sit.
struct MfetchArg {
    offvec: u64,
    nfetch: u32,
    nflush: u32,
    /// Offset of `nfetch` (and `nflush` 4 bytes later) in the struct.
    counts_at: usize,
}

impl MfetchArg {
    fn size(compat: bool) -> usize {
        if compat {
            12
        } else {
            16
        }
    }
    fn parse(b: &[u8], compat: bool) -> MfetchArg {
        let (offvec, counts_at) = if compat {
            (u32_at(b, 0) as u64, 4)
        } else {
            (u64_at(b, 0), 8)
        };
        MfetchArg {
            offvec,
            nfetch: u32_at(b, counts_at),
            nflush: u32_at(b, counts_at + 4),
            counts_at,
        }
    }
}

/// The native command a 32-bit caller's `cmd` stands for, as
/// `mon_bin_compat_ioctl` maps it; None for ENOTTY.
fn compat_command(cmd: u32) -> Option<u32> {
    match cmd {
        ioc::GET32 => Some(ioc::GET),
        ioc::GETX32 => Some(ioc::GETX),
        ioc::MFETCH32 => Some(ioc::MFETCH),
        ioc::STATS | ioc::URB_LEN | ioc::Q_RING_SIZE | ioc::T_RING_SIZE | ioc::MFLUSH => Some(cmd),
        _ => None,
    }
}

struct State {
    ring: Ring,
    /// The ring's share of [`budget::USBMON_RINGS`].
    ring_grant: budget::Grant,
    dropped: u32,
    mapped: bool,
    /// Pages written since the page cache was last brought up to date.
    dirty: PageSet,
    /// Events removed by the flush of an MFETCH that then had to wait.
    fetch_flushed: u32,
    waker: Option<Waker>,
}

/// A set of ring pages, one bit each: scanning a 64 MiB ring's set is 256
/// word tests, which matters because every MFETCH takes the set.
struct PageSet(Vec<u64>);

impl PageSet {
    fn new(pages: usize, all: bool) -> PageSet {
        let mut s = PageSet(vec![0; pages.div_ceil(64)]);
        if all {
            for p in 0..pages {
                s.0[p / 64] |= 1 << (p % 64);
            }
        }
        s
    }

    fn insert(&mut self, page: usize) {
        self.0[page / 64] |= 1 << (page % 64);
    }

    fn contains(&self, page: usize) -> bool {
        self.0[page / 64] & (1 << (page % 64)) != 0
    }

    /// Empty the set, returning its runs of consecutive pages as
    /// `(first, end)` page ranges, lowest first.
    fn take_runs(&mut self) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (w, word) in self.0.iter_mut().enumerate() {
            let mut bits = std::mem::take(word);
            while bits != 0 {
                let p = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                match runs.last_mut() {
                    Some((_, end)) if *end == p => *end = p + 1,
                    _ => runs.push((p, p + 1)),
                }
            }
        }
        runs
    }
}

/// The pages of a ring of `size` bytes that `len` bytes from `off` lie on,
/// wrapping at the end.
fn ring_pages(off: usize, len: usize, size: usize) -> impl Iterator<Item = usize> {
    let mut done = 0;
    std::iter::from_fn(move || {
        (done < len).then(|| {
            let at = (off + done) % size;
            done += CHUNK_SIZE - at % CHUNK_SIZE;
            at / CHUNK_SIZE
        })
    })
}

impl State {
    fn mark_dirty(&mut self, off: usize, len: usize) {
        for p in ring_pages(off, len, self.ring.size()) {
            self.dirty.insert(p);
        }
    }

    /// Whether any event at `offs` (header and captured bytes) lies on a page
    /// the page cache does not have yet. A mapped reader reads only the
    /// events MFETCH hands it, so while it works through a backlog written
    /// earlier, nothing needs storing; the pages written meanwhile go to the
    /// page cache together when it reaches them (one store for many MFETCH
    /// calls instead of one each).
    fn needs_store(&self, offs: &[u32]) -> bool {
        offs.iter().any(|&o| {
            let len = PKT_SIZE + self.ring.len_cap_at(o as usize);
            ring_pages(o as usize, len, self.ring.size()).any(|p| self.dirty.contains(p))
        })
    }

    /// Take the dirty pages as page-cache updates.
    fn take_dirty(&mut self) -> Vec<(u64, Vec<u8>)> {
        self.dirty
            .take_runs()
            .into_iter()
            .map(|(a, b)| {
                let (a, b) = (a * CHUNK_SIZE, b * CHUNK_SIZE);
                (a as u64, self.ring.bytes()[a..b].to_vec())
            })
            .collect()
    }

    fn insert(&mut self, ev: &UrbEvent) {
        if ev.kind == EventKind::Error {
            // Error events never use the contiguous allocator and a lost one is
            // not counted, as in the kernel.
            if let Some(off) = self.ring.alloc(PKT_SIZE) {
                let h = encode_header(ev, 0, b'E', 0);
                self.ring.write_at(off, &h);
                self.mark_dirty(off, PKT_SIZE);
            }
            return;
        }
        let plan = capture_plan(ev, self.ring.size());
        let lendesc = plan.ndesc * 16;
        let total = PKT_SIZE + lendesc + plan.length;
        let off = if self.mapped {
            match self.ring.alloc_contiguous(total) {
                Some((off, filler)) => {
                    if let Some(f) = filler {
                        let size = self.ring.size() - f;
                        self.mark_dirty(f, size.min(PKT_SIZE));
                    }
                    Some(off)
                }
                None => None,
            }
        } else {
            self.ring.alloc(total)
        };
        let Some(off) = off else {
            self.dropped = self.dropped.wrapping_add(1);
            return;
        };
        let len_cap = (lendesc + plan.copied) as u32;
        let h = encode_header(ev, len_cap, plan.flag_data, plan.ndesc as u32);
        self.ring.write_at(off, &h);
        let mut at = off + PKT_SIZE;
        let ring = &mut self.ring;
        payload_parts(ev, &plan, |part| {
            at %= ring.size();
            ring.write_at(at, part);
            at += part.len();
        });
        if plan.copied < plan.length {
            // Return the unused aligned tail, as mon_buff_area_shrink does.
            let delta = pkt_align(lendesc + plan.length) - pkt_align(len_cap as usize);
            if delta > 0 {
                self.ring.shrink(delta);
            }
        }
        self.mark_dirty(off, PKT_SIZE + len_cap as usize);
    }
}

/// One open of `dev/usbmonN`.
pub struct BinReader {
    /// Ring, counters and dirty pages: what the producer touches, held for
    /// short stretches and never across a syscall.
    state: Mutex<State>,
    /// Serialises the consumers of one open (the kernel's `fetch_lock`), so
    /// that GET and MFETCH can write to the caller without `state`. Taken
    /// with [`BinReader::fetch_turn`], never waited for.
    fetch: Mutex<()>,
    /// A consumer found `fetch` taken and was parked: wake it on release.
    contended: AtomicBool,
}

/// The turn of one consumer of an open (see [`BinReader::fetch`]).
struct FetchTurn<'a> {
    _g: std::sync::MutexGuard<'a, ()>,
    reader: &'a BinReader,
}

impl Drop for FetchTurn<'_> {
    fn drop(&mut self) {
        if self.reader.contended.swap(false, Ordering::SeqCst) {
            let waker = self.reader.state.lock_ok().waker.clone();
            if let Some(w) = waker {
                w();
            }
        }
    }
}

impl MonReader for BinReader {
    fn event(&self, ev: &Arc<UrbEvent>) {
        let waker = {
            let mut st = self.state.lock_ok();
            st.insert(ev);
            st.waker.clone()
        };
        if let Some(w) = waker {
            w();
        }
    }
}

fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}
fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().unwrap()))
        .unwrap_or(0)
}

impl BinReader {
    /// A reader with a default ring; ENOMEM past [`budget::USBMON_RINGS`].
    fn new() -> SysResult<BinReader> {
        let ring_grant = budget::USBMON_RINGS.take(BUFF_DFL)?;
        let ring = Ring::new(BUFF_DFL)?;
        Ok(BinReader {
            state: Mutex::new(State {
                ring,
                ring_grant,
                dropped: 0,
                mapped: false,
                dirty: PageSet::new(BUFF_DFL / CHUNK_SIZE, false),
                fetch_flushed: 0,
                waker: None,
            }),
            fetch: Mutex::new(()),
            contended: AtomicBool::new(false),
        })
    }

    /// Take the consumer turn of this open, or EAGAIN while another consumer
    /// has it: the request is then parked (or answered EAGAIN if
    /// non-blocking) and retried when that consumer is done. A consumer that
    /// is stuck writing into its own caller's memory (a page nobody serves)
    /// thus holds up only the requests on its own open, and no request
    /// thread waits for it.
    fn fetch_turn(&self) -> SysResult<FetchTurn<'_>> {
        match self.fetch.try_lock() {
            Ok(g) => Ok(FetchTurn {
                _g: g,
                reader: self,
            }),
            Err(std::sync::TryLockError::Poisoned(p)) => Ok(FetchTurn {
                _g: p.into_inner(),
                reader: self,
            }),
            Err(std::sync::TryLockError::WouldBlock) => {
                self.contended.store(true, Ordering::SeqCst);
                Err(Errno::EAGAIN)
            }
        }
    }

    /// `read()`: the 48-byte header then the captured bytes, continuing a
    /// partially read event.
    pub fn read(&self, size: usize) -> SysResult<Vec<u8>> {
        let _fetch = self.fetch_turn()?;
        let mut st = self.state.lock_ok();
        if st.ring.is_empty() {
            return Err(Errno::EAGAIN);
        }
        let out_off = st.ring.out_offset();
        let len_cap = st.ring.len_cap_at(out_off);
        let total = PKT_SZ_API0 + len_cap;
        let mut out = Vec::new();
        let mut want = size;
        let b_read = st.ring.b_read;
        if b_read < PKT_SZ_API0 {
            let n = want.min(PKT_SZ_API0 - b_read);
            out.extend_from_slice(&st.ring.bytes()[out_off + b_read..out_off + b_read + n]);
            want -= n;
            st.ring.b_read += n;
        }
        if st.ring.b_read >= PKT_SZ_API0 {
            let done = st.ring.b_read - PKT_SZ_API0;
            let n = want.min(len_cap - done);
            let at = (out_off + PKT_SIZE + done) % st.ring.size();
            out.extend_from_slice(&st.ring.read_at(at, n));
            st.ring.b_read += n;
        }
        if st.ring.b_read >= total {
            st.ring.free(PKT_SIZE + len_cap);
            st.ring.b_read = 0;
        }
        Ok(out)
    }

    /// Whether anything is queued.
    pub fn poll(&self) -> u32 {
        if self.state.lock_ok().ring.is_empty() {
            0
        } else {
            POLL_READABLE
        }
    }

    fn get(&self, req: &IoctlRequest<'_>, hdrbytes: usize) -> SysResult<IoctlReply> {
        let arg = GetArg::parse(req.input, req.compat);
        if arg.too_big(req.compat) {
            return Err(Errno::EINVAL);
        }
        let GetArg { hdr, data, alloc } = arg;
        let _fetch = self.fetch_turn()?;
        let (head, body, len_cap) = {
            let st = self.state.lock_ok();
            if st.ring.is_empty() {
                return Err(Errno::EAGAIN);
            }
            let off = st.ring.out_offset();
            let len_cap = st.ring.len_cap_at(off);
            let n = (len_cap as u64).min(alloc) as usize;
            let at = (off + PKT_SIZE) % st.ring.size();
            (
                st.ring.bytes()[off..off + hdrbytes].to_vec(),
                st.ring.read_at(at, n),
                len_cap,
            )
        };
        // The event stays queued if the caller's memory faults, as in the
        // kernel; `fetch` keeps other consumers of this open off it meanwhile.
        req.mem.write(hdr, &head)?;
        req.mem.write(data, &body)?;
        let mut st = self.state.lock_ok();
        st.ring.free(PKT_SIZE + len_cap);
        st.ring.b_read = 0;
        Ok(IoctlReply::default())
    }

    fn mfetch(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let MfetchArg {
            offvec,
            nfetch,
            nflush,
            counts_at,
        } = MfetchArg::parse(req.input, req.compat);
        let _fetch = self.fetch_turn()?;
        let mut st = self.state.lock_ok();
        // MFETCH is how mapped readers consume the ring.
        st.mapped = true;
        let flushed = if req.retry {
            st.fetch_flushed
        } else {
            let f = st.ring.flush(nflush as usize) as u32;
            st.fetch_flushed = f;
            f
        };
        if st.ring.is_empty() {
            if req.nonblock && nflush != 0 {
                // The kernel stores nflush before it finds the ring empty.
                req.mem
                    .write(req.arg + counts_at as u64 + 4, &flushed.to_ne_bytes())?;
            }
            return Err(Errno::EAGAIN);
        }
        let offs = st.ring.offsets(nfetch as usize);
        let cache_updates = if st.needs_store(&offs) {
            st.take_dirty()
        } else {
            Vec::new()
        };
        // The offset vector goes to the caller without the lock: the producer
        // must not wait for a process_vm_writev.
        drop(st);
        let mut vec = Vec::with_capacity(offs.len() * 4);
        for o in &offs {
            vec.extend_from_slice(&o.to_ne_bytes());
        }
        if let Err(e) = req.mem.write(offvec, &vec) {
            // Nothing was stored: the pages stay dirty for the next call.
            let mut st = self.state.lock_ok();
            for (off, bytes) in &cache_updates {
                st.mark_dirty(*off as usize, bytes.len());
            }
            return Err(e);
        }
        let mut out = req.input.to_vec();
        out.resize(MfetchArg::size(req.compat), 0);
        out[counts_at..counts_at + 4].copy_from_slice(&(offs.len() as u32).to_ne_bytes());
        if nflush != 0 {
            out[counts_at + 4..counts_at + 8].copy_from_slice(&flushed.to_ne_bytes());
        }
        Ok(IoctlReply {
            result: 0,
            output: out,
            cache_updates,
        })
    }

    /// Handle one ioctl.
    pub fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let ret = |result: i32| {
            Ok(IoctlReply {
                result,
                ..Default::default()
            })
        };
        let cmd = if req.compat {
            compat_command(req.cmd).ok_or(Errno::ENOTTY)?
        } else {
            req.cmd
        };
        match cmd {
            ioc::URB_LEN => {
                let st = self.state.lock_ok();
                if st.ring.is_empty() {
                    ret(0)
                } else {
                    ret(st.ring.len_cap_at(st.ring.out_offset()) as i32)
                }
            }
            ioc::Q_RING_SIZE => ret(self.state.lock_ok().ring.size() as i32),
            ioc::T_RING_SIZE => {
                if req.arg < BUFF_MIN || req.arg > BUFF_MAX {
                    return Err(Errno::EINVAL);
                }
                let size = (req.arg as usize).div_ceil(CHUNK_SIZE) * CHUNK_SIZE;
                // The new ring is allocated before the old is let go, and
                // before the mapping check, as in mon_bin_ioctl.
                let grant = budget::USBMON_RINGS.take(size)?;
                let _fetch = self.fetch_turn()?;
                let (dev, ino) = req.file_id;
                // mon_bin counts every mapping of the file (vm_open and
                // vm_close), private ones and a forked child's included:
                // the caller's first, then every process's.
                if procmem::has_mapping(req.caller.pid, dev, ino) || procmem::any_mapping(dev, ino)
                {
                    return Err(Errno::EBUSY);
                }
                let ring = Ring::new(size)?;
                let mut st = self.state.lock_ok();
                st.mapped = false;
                st.ring = ring;
                st.ring_grant = grant;
                st.dirty = PageSet::new(size / CHUNK_SIZE, true);
                st.dropped = 0;
                // Bring the whole new ring into the page cache now, so that a
                // mapping of the new size finds every page.
                let updates = st.take_dirty();
                Ok(IoctlReply {
                    result: 0,
                    output: Vec::new(),
                    cache_updates: updates,
                })
            }
            ioc::STATS => {
                let mut st = self.state.lock_ok();
                let dropped = std::mem::take(&mut st.dropped);
                let queued = st.ring.queued() as u32;
                let mut out = Vec::with_capacity(8);
                out.extend_from_slice(&queued.to_ne_bytes());
                out.extend_from_slice(&dropped.to_ne_bytes());
                Ok(IoctlReply {
                    result: 0,
                    output: out,
                    cache_updates: Vec::new(),
                })
            }
            ioc::GET => self.get(req, PKT_SZ_API0),
            ioc::GETX => self.get(req, PKT_SZ_API1),
            ioc::MFETCH => self.mfetch(req),
            ioc::MFLUSH => {
                let _fetch = self.fetch_turn()?;
                let n = self.state.lock_ok().ring.flush(req.arg as u32 as usize);
                ret(n as i32)
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    /// The caller memory each ioctl touches (for CUSE's retry protocol), for
    /// a 32-bit caller if `compat`.
    pub fn ioctl_layout(cmd: u32, arg: u64, input: &[u8], compat: bool) -> IoctlLayout {
        let mut l = IoctlLayout::default();
        let cmd = if compat {
            compat_command(cmd).unwrap_or(0)
        } else {
            cmd
        };
        match cmd {
            ioc::STATS => l.output.push((arg, 8)),
            ioc::GET | ioc::GETX => {
                let size = GetArg::size(compat);
                l.input.push((arg, size as u64));
                let g = GetArg::parse(input, compat);
                if input.len() >= size && !g.too_big(compat) {
                    let hb = if cmd == ioc::GET {
                        PKT_SZ_API0
                    } else {
                        PKT_SZ_API1
                    };
                    l.output.push((g.hdr, hb as u64));
                    l.output.push((g.data, g.alloc));
                }
            }
            ioc::MFETCH => {
                let size = MfetchArg::size(compat);
                l.input.push((arg, size as u64));
                if input.len() >= size {
                    let m = MfetchArg::parse(input, compat);
                    l.output.push((arg, size as u64));
                    l.output.push((m.offvec, m.nfetch as u64 * 4));
                }
            }
            _ => {}
        }
        l
    }

    /// Ring bytes for a page-cache fill of a mapping.
    pub fn read_mapped(&self, offset: u64, size: u32) -> Vec<u8> {
        let mut st = self.state.lock_ok();
        st.mapped = true;
        crate::base::vfs::slice_at(st.ring.bytes(), offset, size)
    }
}

struct BinFile {
    reader: Arc<BinReader>,
    _reg: Registration,
    /// Its place among [`budget::USBMON_READERS`].
    _slot: budget::Grant,
}

impl OpenFile for BinFile {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.reader.read(size as usize)
    }
    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        self.reader.ioctl(req)
    }
    fn poll(&self) -> u32 {
        self.reader.poll()
    }
    fn compat_ioctl(&self) -> bool {
        true
    }
    fn ioctl_layout(&self, cmd: u32, arg: u64, input: &[u8], compat: bool) -> IoctlLayout {
        BinReader::ioctl_layout(cmd, arg, input, compat)
    }
    fn set_waker(&self, waker: Waker) {
        self.reader.state.lock_ok().waker = Some(waker);
    }
    fn is_stream(&self) -> bool {
        true
    }
    fn read_mapped(&self, _pid: u32, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        Ok(self.reader.read_mapped(offset, size))
    }
}

/// The `dev/usbmonN` node.
pub struct BinNode {
    mon: Arc<UsbMon>,
    bus: u16,
}

impl BinNode {
    /// The node for bus `bus` (0: all buses).
    pub fn new(mon: Arc<UsbMon>, bus: u16) -> Self {
        BinNode { mon, bus }
    }
}

impl FileNode for BinNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let slot = budget::USBMON_READERS.take(1)?;
        let reader = Arc::new(BinReader::new()?);
        let reg = self
            .mon
            .attach(self.bus, reader.clone())
            .ok_or(Errno::ENODEV)?;
        Ok(Arc::new(BinFile {
            reader,
            _reg: reg,
            _slot: slot,
        }))
    }
    fn private_inode(&self) -> bool {
        true
    }
    fn size(&self) -> u64 {
        BUFF_DFL as u64
    }
}

#[cfg(test)]
mod tests;
