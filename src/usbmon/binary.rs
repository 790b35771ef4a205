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
        Ok(BinReader {
            state: Mutex::new(State {
                ring: Ring::new(BUFF_DFL),
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
                let mut st = self.state.lock_ok();
                st.mapped = false;
                st.ring = Ring::new(size);
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
    fn read_mapped(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
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
    fn mode(&self) -> u32 {
        0o600
    }
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
mod tests {
    use super::*;
    use crate::base::clock::Timestamp;
    use crate::usbmon::event::{IsoDesc, UrbSink, XferType};

    fn ev(kind: EventKind, xfer: XferType, dir_in: bool, len: u32) -> UrbEvent {
        UrbEvent {
            id: 0xffff888009800780,
            kind,
            xfer,
            bus: 1,
            devnum: 2,
            epnum: if xfer == XferType::Control { 0 } else { 1 },
            dir_in,
            ts: Timestamp {
                mono_ns: 5_000_000_000,
                wall_ns: 1_700_000_000_123_456_000,
            },
            status: if kind == EventKind::Submit { -115 } else { 0 },
            transfer_buffer_length: len,
            actual_length: len,
            interval: 8,
            start_frame: 0,
            error_count: 0,
            xfer_flags: if dir_in { 0x200 } else { 0 },
            setup: if xfer == XferType::Control && kind == EventKind::Submit {
                Some([0x80, 6, 0, 1, 0, 0, 18, 0])
            } else {
                None
            },
            iso: vec![],
            data: Some((0..len).map(|i| i as u8).collect::<Vec<u8>>().into()),
            data_capture: Default::default(),
        }
    }

    static MEM: std::sync::LazyLock<procmem::ProcessMemory> =
        std::sync::LazyLock::new(|| procmem::ProcessMemory(std::process::id()));

    fn req(cmd: u32, arg: u64, input: &[u8]) -> IoctlRequest<'_> {
        IoctlRequest {
            mem: &*MEM,
            cmd,
            arg,
            input,
            out_size: 0,
            nonblock: true,
            caller: Caller {
                pid: std::process::id(),
                ..Default::default()
            },
            retry: false,
            file_id: (0, 0),
            compat: false,
        }
    }

    #[test]
    fn compat_commands_and_layouts() {
        let mut get32 = Vec::new();
        for v in [0x1000u32, 0x2000, 0x2000_0000] {
            get32.extend_from_slice(&v.to_ne_bytes());
        }
        let l = BinReader::ioctl_layout(ioc::GETX32, 0x500, &get32, true);
        assert_eq!(l.input, vec![(0x500, 12)]);
        assert_eq!(
            l.output,
            vec![(0x1000, 64), (0x2000, 0x2000_0000)],
            "no allocation limit for 32-bit callers"
        );
        let l = BinReader::ioctl_layout(ioc::MFETCH32, 0x500, &[0u8; 12], true);
        assert_eq!(l.input, vec![(0x500, 12)]);
        assert_eq!(l.output, vec![(0x500, 12), (0, 0)]);
        let r = BinReader::new().unwrap();
        let mut q = req(ioc::GETX, 0, &[0u8; 24]);
        q.compat = true;
        assert_eq!(
            r.ioctl(&q).err(),
            Some(Errno::ENOTTY),
            "64-bit GETX from a 32-bit caller"
        );
        let mut q = req(ioc::GETX32, 0, &get32);
        q.compat = true;
        assert_eq!(r.ioctl(&q).err(), Some(Errno::EAGAIN));
        let mut q = req(ioc::Q_RING_SIZE, 0, &[]);
        q.compat = true;
        assert_eq!(r.ioctl(&q).unwrap().result, BUFF_DFL as i32);
        assert_eq!(
            r.ioctl(&req(ioc::GETX32, 0, &get32)).err(),
            Some(Errno::ENOTTY)
        );
    }

    #[test]
    fn page_set_returns_runs_and_empties() {
        let mut s = PageSet::new(200, false);
        for p in [3, 4, 5, 63, 64, 65, 130, 199] {
            s.insert(p);
        }
        assert_eq!(
            s.take_runs(),
            vec![(3, 6), (63, 66), (130, 131), (199, 200)]
        );
        assert!(s.take_runs().is_empty());
        assert_eq!(PageSet::new(70, true).take_runs(), vec![(0, 70)]);
    }

    #[test]
    fn mfetch_stores_pages_only_when_it_hands_out_an_event_on_one() {
        let mon = UsbMon::new(&[1]);
        let r = Arc::new(BinReader::new().unwrap());
        let _reg = mon.attach(1, r.clone()).unwrap();
        // 64-byte header + 18 bytes, 128 bytes a slot: 32 events a page.
        let put = |n: usize| {
            for _ in 0..n {
                mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
            }
        };
        let mut vec = [0u32; 4];
        let mut mfetch = |nfetch: u32, nflush: u32| {
            let mut m = Vec::new();
            m.extend_from_slice(&(vec.as_mut_ptr() as u64).to_ne_bytes());
            m.extend_from_slice(&nfetch.to_ne_bytes());
            m.extend_from_slice(&nflush.to_ne_bytes());
            let rep = r.ioctl(&req(ioc::MFETCH, 0, &m)).unwrap();
            let pages: Vec<(u64, usize)> = rep
                .cache_updates
                .iter()
                .map(|(off, b)| (*off, b.len() / CHUNK_SIZE))
                .collect();
            (vec[0], pages)
        };
        put(1);
        assert_eq!(mfetch(1, 0), (0, vec![(0, 1)]));
        // Pages 0..3 fill; the next event is on page 0, written after the
        // last store: every dirty page goes to the page cache at once.
        put(127);
        assert_eq!(mfetch(1, 1), (128, vec![(0, 4)]));
        // A backlog already stored: nothing to store while the reader works
        // through it, though the producer writes pages 4 and 5 meanwhile.
        put(40);
        for i in 2..128 {
            assert_eq!(mfetch(1, 1), (i * 128, vec![]), "event {i}");
        }
        // The first event on page 4 takes what was written since.
        assert_eq!(mfetch(1, 1), (128 * 128, vec![(CHUNK_SIZE as u64 * 4, 2)]));
    }

    #[test]
    fn mfetch_efault_keeps_pages_dirty_for_the_next_call() {
        let mon = UsbMon::new(&[1]);
        let r = Arc::new(BinReader::new().unwrap());
        let _reg = mon.attach(1, r.clone()).unwrap();
        mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
        let mfetch = |vec: u64| {
            let mut m = Vec::new();
            m.extend_from_slice(&vec.to_ne_bytes());
            m.extend_from_slice(&4u32.to_ne_bytes());
            m.extend_from_slice(&0u32.to_ne_bytes());
            r.ioctl(&req(ioc::MFETCH, 0, &m))
        };
        assert_eq!(mfetch(8).err(), Some(Errno::EFAULT));
        let mut vec = [0u32; 4];
        let rep = mfetch(vec.as_mut_ptr() as u64).unwrap();
        assert_eq!(rep.cache_updates.len(), 1);
        assert_eq!(rep.cache_updates[0].0, 0);
        assert_eq!(rep.cache_updates[0].1[8], b'C', "page 0 holds the event");
        assert!(mfetch(vec.as_mut_ptr() as u64)
            .unwrap()
            .cache_updates
            .is_empty());
    }

    #[test]
    fn header_layout() {
        let e = ev(EventKind::Submit, XferType::Control, true, 18);
        let h = encode_header(&e, 0, b'<', 0);
        assert_eq!(u64_at(&h, 0), 0xffff888009800780);
        assert_eq!((h[8], h[9], h[10], h[11]), (b'S', 2, 0x80, 2));
        assert_eq!(u16::from_ne_bytes([h[12], h[13]]), 1);
        assert_eq!((h[14], h[15]), (0, b'<'));
        assert_eq!(
            i64::from_ne_bytes(h[16..24].try_into().unwrap()),
            1_700_000_000
        );
        assert_eq!(i32::from_ne_bytes(h[24..28].try_into().unwrap()), 123_456);
        assert_eq!(i32::from_ne_bytes(h[28..32].try_into().unwrap()), -115);
        assert_eq!(u32_at(&h, 32), 18);
        assert_eq!(&h[40..48], &[0x80, 6, 0, 1, 0, 0, 18, 0]);
        assert_eq!(u32_at(&h, 56), 0x200);
    }

    #[test]
    fn capture_rules_and_read_continuation() {
        let mon = UsbMon::new(&[1]);
        let r = Arc::new(BinReader::new().unwrap());
        let _reg = mon.attach(1, r.clone()).unwrap();
        assert_eq!(r.read(100).err(), Some(Errno::EAGAIN));
        mon.urb_event(ev(EventKind::Submit, XferType::Control, true, 18));
        mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
        mon.urb_event(ev(EventKind::Complete, XferType::Bulk, false, 31));
        let q = r.ioctl(&req(ioc::URB_LEN, 0, &[])).unwrap();
        assert_eq!(q.result, 0, "IN submit captures nothing");
        let s = r.read(1000).unwrap();
        assert_eq!(s.len(), 48);
        assert_eq!(s[15], b'<');
        // A completion read in two parts: 20 bytes, then the rest.
        let a = r.read(20).unwrap();
        let b = r.read(1000).unwrap();
        let c = [a, b].concat();
        assert_eq!(c.len(), 48 + 18);
        assert_eq!(&c[48..], &(0..18).collect::<Vec<u8>>()[..]);
        let o = r.read(1000).unwrap();
        assert_eq!(
            (o[15], u32_at(&o, 36)),
            (b'>', 0),
            "OUT completion captures nothing"
        );
    }

    #[test]
    fn iso_in_completion_collates_descriptors() {
        let mon = UsbMon::new(&[1]);
        let r = Arc::new(BinReader::new().unwrap());
        let _reg = mon.attach(1, r.clone()).unwrap();
        let mut e = ev(EventKind::Complete, XferType::Iso, true, 3 * 100);
        e.iso = vec![
            IsoDesc {
                status: 0,
                offset: 0,
                length: 100,
            },
            IsoDesc {
                status: 0,
                offset: 100,
                length: 40,
            },
            IsoDesc {
                status: 0,
                offset: 200,
                length: 0,
            },
        ];
        mon.urb_event(e);
        let o = r.read(4096).unwrap();
        assert_eq!(u32_at(&o, 36), 3 * 16 + 140);
        assert_eq!(u32_at(&o, 44), 3, "numdesc in the union");
        assert_eq!(o.len(), 48 + 3 * 16 + 140);
        assert_eq!(u32_at(&o, 48 + 16 + 4), 100, "second descriptor offset");
    }

    #[test]
    fn ring_size_bounds_and_rounding() {
        let r = BinReader::new().unwrap();
        for bad in [0u64, 8191, BUFF_MAX + 1, u64::MAX, 0x1_0000_2000] {
            assert_eq!(
                r.ioctl(&req(ioc::T_RING_SIZE, bad, &[])).err(),
                Some(Errno::EINVAL),
                "{bad}"
            );
        }
        for (set, got) in [
            (10000u64, 12288),
            (1228801, 1232896),
            (8192, 8192),
            (BUFF_MAX, BUFF_MAX as i32),
        ] {
            r.ioctl(&req(ioc::T_RING_SIZE, set, &[])).unwrap();
            assert_eq!(r.ioctl(&req(ioc::Q_RING_SIZE, 0, &[])).unwrap().result, got);
        }
        assert_eq!(r.ioctl(&req(0x9263, 0, &[])).err(), Some(Errno::ENOTTY));
    }

    #[test]
    fn drops_are_counted_and_reset_by_stats() {
        let mon = UsbMon::new(&[1]);
        let r = Arc::new(BinReader::new().unwrap());
        let _reg = mon.attach(1, r.clone()).unwrap();
        r.ioctl(&req(ioc::T_RING_SIZE, 8192, &[])).unwrap();
        for _ in 0..200 {
            mon.urb_event(ev(EventKind::Submit, XferType::Bulk, true, 512));
        }
        let s = r.ioctl(&req(ioc::STATS, 0, &[])).unwrap();
        assert_eq!(u32_at(&s.output, 0), 128);
        assert_eq!(u32_at(&s.output, 4), 72);
        let s = r.ioctl(&req(ioc::STATS, 0, &[])).unwrap();
        assert_eq!(u32_at(&s.output, 4), 0, "dropped resets on read");
        assert_eq!(r.ioctl(&req(ioc::MFLUSH, 100, &[])).unwrap().result, 100);
        assert_eq!(r.ioctl(&req(ioc::MFLUSH, 100, &[])).unwrap().result, 28);
    }

    #[test]
    fn get_and_mfetch_write_through_pointers() {
        let mon = UsbMon::new(&[1]);
        let r = Arc::new(BinReader::new().unwrap());
        let _reg = mon.attach(1, r.clone()).unwrap();
        mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
        mon.urb_event(ev(EventKind::Submit, XferType::Bulk, false, 31));
        let mut hdr = [0u8; 64];
        let mut data = [0u8; 64];
        let mut arg = Vec::new();
        arg.extend_from_slice(&(hdr.as_mut_ptr() as u64).to_ne_bytes());
        arg.extend_from_slice(&(data.as_mut_ptr() as u64).to_ne_bytes());
        arg.extend_from_slice(&10u64.to_ne_bytes());
        r.ioctl(&req(ioc::GETX, 0, &arg)).unwrap();
        // SAFETY: the buffers were written by process_vm_writev.
        let (hdr, data) = unsafe {
            (
                std::ptr::read_volatile(&hdr),
                std::ptr::read_volatile(&data),
            )
        };
        assert_eq!(hdr[8], b'C');
        assert_eq!(u32_at(&hdr, 56), 0x200, "GETX returns the 64-byte header");
        assert_eq!(&data[..10], &(0..10).collect::<Vec<u8>>()[..]);
        assert_eq!(data[10], 0, "only alloc bytes are copied");
        let mut vec = [0u32; 8];
        let mut m = Vec::new();
        m.extend_from_slice(&(vec.as_mut_ptr() as u64).to_ne_bytes());
        m.extend_from_slice(&8u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        let rep = r.ioctl(&req(ioc::MFETCH, 0, &m)).unwrap();
        // SAFETY: written by process_vm_writev.
        let vec = unsafe { std::ptr::read_volatile(&vec) };
        assert_eq!(u32_at(&rep.output, 8), 1);
        assert_eq!(
            vec[0], 128,
            "the second event starts after the 18-byte one (128 bytes)"
        );
        assert!(!rep.cache_updates.is_empty());
    }
}
