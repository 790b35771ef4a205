//! The consuming readers and the per-CPU view of the buffers:
//! `trace_pipe` (all CPUs merged in time order), and `per_cpu/cpuN/` with
//! `trace`, `trace_pipe`, `trace_pipe_raw` (binary pages), `snapshot_raw`
//! (the snapshot buffer's pages), `stats` and `buffer_size_kb`, as in the
//! kernel's `kernel/trace/trace.c`.
//!
//! `trace_pipe_raw` can be memory mapped, as trace.c's
//! `tracing_buffers_mmap` and `tracing_buffers_ioctl` allow since 6.10:
//! the mapping shows the meta page and the sub-buffers (`mmap.rs`,
//! [`CpuBuffer::map_read`]) and `TRACE_MMAP_IOCTL_GET_READER` swaps the
//! reader sub-buffer. FUSE tells the daemon of no mmap or munmap: a buffer
//! counts as mapped from the first page-cache fill of a mapping of it (or a
//! GET_READER from a process that maps it) until the open file is released
//! or, asked when it matters (a resize, a snapshot), no process maps it any
//! more. The mapping is a copy in the page cache: each GET_READER stores the
//! meta page and the reader sub-buffer there before it answers.
//!
//! Every read that finds nothing answers EAGAIN; the frontend then parks a
//! blocking reader until [`Tracing::store`] wakes it, or returns EAGAIN to an
//! `O_NONBLOCK` one, as the kernel's `wait_on_pipe` and `O_NONBLOCK` do.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use crate::base::errno::{Errno, SysResult};
use crate::base::procmem;
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, IoctlReply, IoctlRequest, NodeKind, OpenFile, OpenFlags, Tree, Waker,
    POLL_READABLE,
};
use crate::tracefs::ctl::{add_ctl, Ctl, MODE_READ, MODE_WRITE};
use crate::tracefs::instances::array::MapRef;
use crate::tracefs::instances::array::TraceArray;
use crate::tracefs::parse::kstrtoul_from_user;
use crate::tracefs::ring::{CpuBuffer, GET_READER};

/// At most one page of text per `trace_pipe` read.
const PIPE_CHUNK: usize = 4096;

/// Which buffers a reader reads.
#[derive(Clone, Copy)]
enum Cpus {
    All,
    One(usize),
}

/// How a consuming reader hands out what it takes.
#[derive(Clone, Copy)]
enum Form {
    /// Trace lines (`trace_pipe`).
    Text,
    /// Binary pages (`trace_pipe_raw`).
    Raw,
    /// Binary pages of the snapshot buffer (`snapshot_raw`, trace.c's
    /// `snapshot_raw_fops`: `trace_pipe_raw`'s reads on the max buffer).
    SnapshotRaw,
}

/// `trace_pipe` or `trace_pipe_raw`.
struct PipeNode {
    t: Arc<TraceArray>,
    cpus: Cpus,
    form: Form,
}

struct PipeState {
    /// Bytes taken from the buffer and not yet returned: the rest of a
    /// text chunk, or of a raw page read in parts.
    pending: Vec<u8>,
    pos: usize,
    read_any: bool,
}

struct PipeOpen {
    t: Arc<TraceArray>,
    cpus: Cpus,
    form: Form,
    id: u64,
    st: Mutex<PipeState>,
    /// Where the caller's mapping of this open shows in `/proc/PID/maps`.
    file_id: Mutex<Option<(u64, u64)>>,
}

impl FileNode for PipeNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        self.t.pipe_readers.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(PipeOpen {
            t: self.t.clone(),
            cpus: self.cpus,
            form: self.form,
            id: self.t.next_waker.fetch_add(1, Ordering::Relaxed),
            st: Mutex::new(PipeState {
                pending: Vec::new(),
                pos: 0,
                read_any: false,
            }),
            file_id: Mutex::new(None),
        }))
    }
    /// `trace_pipe_raw` is mapped per open, as usbmon's ring: every open
    /// has a page cache of its own, which the GET_READER of that open
    /// brings up to date.
    fn private_inode(&self) -> bool {
        matches!((self.form, self.cpus), (Form::Raw, Cpus::One(_)))
    }
    /// `trace_pipe_raw`: the size of a whole mapping (a mapping faults
    /// pages in only below it). The kernel's file has size 0.
    fn size(&self) -> u64 {
        match (self.form, self.cpus) {
            (Form::Raw, Cpus::One(c)) => self.t.bufs[c].lock_ok().map_len(),
            _ => 0,
        }
    }
}

impl PipeOpen {
    /// The buffers this reader reads, locked in CPU order.
    fn lock(&self) -> Vec<std::sync::MutexGuard<'_, CpuBuffer>> {
        match (self.cpus, self.form) {
            (Cpus::One(c), Form::SnapshotRaw) => vec![self.t.spare[c].lock_ok()],
            (Cpus::All, _) => self.t.lock_all(),
            (Cpus::One(c), _) => vec![self.t.bufs[c].lock_ok()],
        }
    }

    /// Take up to `limit` bytes of trace lines, oldest first across CPUs,
    /// with a `CPU:N [LOST M EVENTS]` line before a CPU's first entry after
    /// it lost some.
    fn take_text(&self, limit: usize) -> String {
        let irq = self.t.irq_info.load(Ordering::Relaxed);
        let in_ns = self.t.trace_clock.in_ns();
        let mut bufs = self.lock();
        let mut out = String::new();
        loop {
            let next = bufs
                .iter()
                .enumerate()
                .filter_map(|(i, b)| b.peek().map(|e| (i, e.ts)))
                .min_by_key(|&(i, ts)| (ts, i));
            let Some((i, _)) = next else { break };
            let b = &mut bufs[i];
            let lost = b.take_lost();
            let e = b.peek().expect("peeked");
            let mut line = String::new();
            if lost > 0 {
                let _ = writeln!(line, "CPU:{} [LOST {lost} EVENTS]", e.cpu);
            }
            line.push_str(&e.line(irq, in_ns));
            if !out.is_empty() && out.len() + line.len() > limit {
                if lost > 0 {
                    // Report it with the entry, on the next read.
                    b.restore_lost(lost);
                }
                break;
            }
            b.pop();
            out.push_str(&line);
            if out.len() >= limit {
                break;
            }
        }
        out
    }

    /// Take one sub-buffer page of CPU `c`'s buffer, or of its snapshot
    /// buffer (`len` bytes at most of it).
    fn take_page(&self, len: usize) -> Option<Vec<u8>> {
        let Cpus::One(c) = self.cpus else {
            return None;
        };
        let mut b = match self.form {
            Form::SnapshotRaw => self.t.spare[c].lock_ok(),
            _ => self.t.bufs[c].lock_ok(),
        };
        let len = len.min(b.page_size());
        b.read_page(len)
    }

    fn has_data(&self) -> bool {
        self.lock().iter().any(|b| !b.is_empty())
    }
}

impl OpenFile for PipeOpen {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let size = size as usize;
        let mut st = self.st.lock_ok();
        if st.pos < st.pending.len() {
            let n = size.min(st.pending.len() - st.pos);
            let out = st.pending[st.pos..st.pos + n].to_vec();
            st.pos += n;
            return Ok(out);
        }
        let taken = match self.form {
            Form::Text => Some(crate::base::bytestr::into_bytes(
                self.take_text(size.min(PIPE_CHUNK)),
            )),
            Form::Raw | Form::SnapshotRaw => self.take_page(size),
        };
        let out = match taken {
            Some(o) if !o.is_empty() => o,
            _ => {
                // Like tracing_wait_pipe: with tracing off, a text reader
                // that already got something sees end of file.
                if matches!(self.form, Form::Text) && !self.t.tracing_on() && st.read_any {
                    return Ok(Vec::new());
                }
                return Err(Errno::EAGAIN);
            }
        };
        st.read_any = true;
        if out.len() > size {
            st.pending = out;
            st.pos = size;
            return Ok(st.pending[..size].to_vec());
        }
        st.pending.clear();
        st.pos = 0;
        Ok(out)
    }
    fn poll(&self) -> u32 {
        let pending = {
            let st = self.st.lock_ok();
            st.pos < st.pending.len()
        };
        if pending || self.has_data() {
            POLL_READABLE
        } else {
            0
        }
    }
    fn set_waker(&self, waker: Waker) {
        self.t.wakers.lock_ok().push((self.id, waker));
    }
    fn is_stream(&self) -> bool {
        true
    }
    fn mapped_as(&self, file_id: (u64, u64)) {
        *self.file_id.lock_ok() = Some(file_id);
    }
    fn read_mapped(&self, pid: u32, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let (Form::Raw, Cpus::One(c)) = (self.form, self.cpus) else {
            return Err(Errno::ENODEV);
        };
        let file_id = *self.file_id.lock_ok();
        // splice(2) and sendfile(2) of a FUSE file read the page cache, which
        // holds the mapping's pages (the meta page, then the sub-buffers):
        // trace-cmd's recorder would store those as trace pages. A caller
        // that does not map the file gets end of file instead (its splice
        // returns 0 and trace-cmd reads the pages with read(2)), and the
        // buffer does not become mapped.
        if !file_id.is_some_and(|(dev, ino)| procmem::has_mapping(pid, dev, ino)) {
            return Ok(Vec::new());
        }
        self.t.note_mapped(c, self.id, file_id);
        let mut b = self.t.bufs[c].lock_ok();
        b.map_start();
        Ok(b.map_read(offset, size))
    }
    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let Cpus::One(c) = self.cpus else {
            return Err(Errno::ENOTTY);
        };
        if !matches!(self.form, Form::Raw) {
            return Err(Errno::ENOTTY);
        }
        match req.cmd {
            // tracing_buffers_ioctl: command 0 wakes the waiters.
            0 => {
                self.t.wake();
                Ok(IoctlReply::default())
            }
            GET_READER => self.get_reader(c, req),
            _ => Err(Errno::ENOTTY),
        }
    }
    fn release(&self) {
        self.t.unmapped(self.id);
        self.t.wakers.lock_ok().retain(|w| w.0 != self.id);
        self.t.pipe_readers.fetch_sub(1, Ordering::SeqCst);
    }
}

impl PipeOpen {
    /// `TRACE_MMAP_IOCTL_GET_READER` on CPU `c`'s `trace_pipe_raw`:
    /// ENODEV unless the buffer is mapped; a blocking file first waits for
    /// data (the kernel's `ring_buffer_wait`). The meta page and the reader
    /// sub-buffer go to the page cache before the answer.
    fn get_reader(&self, c: usize, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        if !self.t.bufs[c].lock_ok().is_mapped() {
            // Mapped but never touched: the caller's maps tell.
            if !crate::base::procmem::has_shared_mapping(
                req.caller.pid,
                req.file_id.0,
                req.file_id.1,
            ) {
                return Err(Errno::ENODEV);
            }
            *self.file_id.lock_ok() = Some(req.file_id);
            self.t.note_mapped(c, self.id, Some(req.file_id));
        }
        let mut b = self.t.bufs[c].lock_ok();
        b.map_start();
        if !req.nonblock && b.is_empty() {
            return Err(Errno::EAGAIN);
        }
        b.map_get_reader();
        let (id, page) = b.reader_page();
        let at = b.page_size() as u64 * (1 + id as u64);
        // The whole sub-buffer: the page cache may hold another sub-buffer's
        // bytes at that id from an earlier turn.
        let cache_updates = vec![(0, b.meta_page()), (at, page.to_vec())];
        Ok(IoctlReply {
            result: 0,
            output: Vec::new(),
            cache_updates,
        })
    }
}

impl TraceArray {
    /// `per_cpu/cpuN/stats`.
    fn stats_text(&self, cpu: usize) -> String {
        let st = self.bufs[cpu].lock_ok().stats();
        let in_ns = self.trace_clock.in_ns();
        let mut s = String::new();
        let _ = writeln!(s, "entries: {}", st.entries);
        let _ = writeln!(s, "overrun: {}", st.overrun);
        s.push_str("commit overrun: 0\n");
        let _ = writeln!(s, "bytes: {}", st.bytes);
        let time = |s: &mut String, label: &str, t: u64| {
            if in_ns {
                let us = t.saturating_add(500) / 1000;
                let _ = writeln!(s, "{label}{:5}.{:06}", us / 1_000_000, us % 1_000_000);
            } else {
                let _ = writeln!(s, "{label}{t}");
            }
        };
        time(&mut s, "oldest event ts: ", st.oldest_ts);
        time(&mut s, "now ts: ", self.trace_clock.now());
        let _ = writeln!(s, "dropped events: {}", st.dropped);
        let _ = writeln!(s, "read events: {}", st.read);
        s
    }

    /// Count CPU `cpu`'s buffer as mapped by the open file `open`.
    pub(crate) fn note_mapped(&self, cpu: usize, open: u64, file: Option<(u64, u64)>) {
        let mut maps = self.maps.lock_ok();
        match maps.iter_mut().find(|m| m.open == open) {
            Some(m) => {
                if file.is_some() {
                    m.file = file;
                }
            }
            None => maps.push(MapRef { open, cpu, file }),
        }
    }

    /// The open file `open` is released: its mapping is gone. The last
    /// mapping of a buffer gone, the buffer is no longer mapped
    /// (`ring_buffer_unmap`).
    pub(crate) fn unmapped(&self, open: u64) {
        let cpu = {
            let mut maps = self.maps.lock_ok();
            let Some(i) = maps.iter().position(|m| m.open == open) else {
                return;
            };
            let cpu = maps.remove(i).cpu;
            if maps.iter().any(|m| m.cpu == cpu) {
                return;
            }
            cpu
        };
        self.bufs[cpu].lock_ok().map_end();
    }

    /// Whether CPU `cpu`'s buffer (every CPU's for `None`) is mapped.
    /// Mappings no process holds any more (munmap, which FUSE does not
    /// report) are forgotten first.
    pub(crate) fn cpu_mapped(&self, cpu: Option<usize>) -> bool {
        let candidates: Vec<(u64, Option<(u64, u64)>)> = self
            .maps
            .lock_ok()
            .iter()
            .filter(|m| cpu.is_none_or(|c| c == m.cpu))
            .map(|m| (m.open, m.file))
            .collect();
        let mut busy = false;
        for (open, file) in candidates {
            match file {
                Some((dev, ino)) if !crate::base::procmem::any_shared_mapping(dev, ino) => {
                    self.unmapped(open)
                }
                _ => busy = true,
            }
        }
        busy
    }

    /// Whether any CPU's buffer is mapped (the kernel's `tr->mapped`).
    pub(crate) fn any_mapped(&self) -> bool {
        self.cpu_mapped(None)
    }

    /// A buffer's size in KiB as `buffer_size_kb` shows it.
    pub(crate) fn kb_of(b: &CpuBuffer) -> usize {
        b.size_bytes() / 1024
    }

    /// Resize one CPU's buffer (or every one) to hold `kb` KiB.
    pub(crate) fn set_buffer_kb(&self, cpu: Option<usize>, data: &[u8]) -> SysResult<u32> {
        let kb = kstrtoul_from_user(data)? as usize;
        if kb == 0 {
            return Err(Errno::EINVAL);
        }
        // The kernel allocates each CPU's new pages in turn and refuses
        // (ENOMEM) a CPU whose new pages outnumber the machine's available
        // memory in pages (ring_buffer.c, __rb_allocate_pages). monfs fills
        // its pages only as entries come, but answers the same.
        // `val <<= 10` in tracing_entries_write, which wraps.
        let bytes = (kb as u64).wrapping_shl(10) as usize;
        // ring_buffer_resize refuses a mapped buffer (EBUSY): every CPU's
        // when all are resized, the one's only when its size changes.
        let busy = match cpu {
            None => self.any_mapped(),
            Some(c) => {
                let b = self.bufs[c].lock_ok();
                bytes.div_ceil(b.capacity()).max(2) != b.nr_pages()
            }
        };
        if busy && (cpu.is_none() || self.cpu_mapped(cpu)) {
            return Err(Errno::EBUSY);
        }
        let mut avail = mem_available_pages();
        for (i, b) in self.bufs.iter().enumerate() {
            if cpu.is_some_and(|c| c != i) {
                continue;
            }
            let b = b.lock_ok();
            let add = bytes.div_ceil(b.capacity()).saturating_sub(b.nr_pages());
            if avail < add {
                return Err(Errno::ENOMEM);
            }
            avail -= add;
        }
        // Every page the new size asks for, of the live buffers and of the
        // snapshot buffers that follow them, is charged to the memory
        // budget now, as the kernel allocates it now: ENOMEM, nothing
        // changed, when it does not fit (issue 37).
        let mut live = self.lock_all();
        let mut spare = self.lock_spare();
        let snap = self.snapshot_allocated();
        let picked = |i: usize| cpu.is_none_or(|c| c == i);
        let resized = |i: usize, b: &CpuBuffer| {
            if picked(i) {
                (
                    crate::tracefs::ring::pages_for(bytes, b.capacity()),
                    b.capacity(),
                )
            } else {
                b.shape()
            }
        };
        let was = self.expanded.swap(true, Ordering::SeqCst);
        let total = self.rings_cost(
            live.iter().enumerate().map(|(i, b)| resized(i, b)),
            spare
                .iter()
                .enumerate()
                .map(|(i, b)| if snap { resized(i, b) } else { b.shape() }),
        );
        if let Err(e) = self.charge_rings(total) {
            self.expanded.store(was, Ordering::SeqCst);
            return Err(e);
        }
        for (i, b) in live.iter_mut().enumerate() {
            if picked(i) {
                b.resize_bytes(bytes);
            }
        }
        if snap {
            for (i, b) in spare.iter_mut().enumerate() {
                if picked(i) {
                    b.resize_bytes(bytes);
                }
            }
        }
        Ok(data.len() as u32)
    }
}

/// The machine's available memory in 4 KiB pages (`MemAvailable` in
/// /proc/meminfo, the kernel's si_mem_available()); 0 if it cannot be read.
fn mem_available_pages() -> usize {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<usize>().ok()
        })
        .map_or(0, |kb| kb / 4)
}

/// `trace_pipe` and `per_cpu/`.
pub(crate) fn install(t: &Arc<TraceArray>, tree: &Tree) {
    let b = t.base();
    let pipe = |cpus, form| {
        NodeKind::File(Arc::new(PipeNode {
            t: t.clone(),
            cpus,
            form,
        }))
    };
    tree.add(
        &format!("{b}/trace_pipe"),
        pipe(Cpus::All, Form::Text),
        MODE_READ,
    );
    tree.add(&format!("{b}/per_cpu"), NodeKind::Dir, 0o750);
    for cpu in 0..t.bufs.len() {
        let dir = format!("{b}/per_cpu/cpu{cpu}");
        tree.add(&dir, NodeKind::Dir, 0o750);
        let (tr, tc) = (t.clone(), t.clone());
        add_ctl(
            tree,
            &format!("{dir}/trace"),
            Ctl::new(MODE_WRITE)
                .rs(move || tr.trace_text(Some(cpu)))
                .w(|data, _| Ok(data.len() as u32))
                .t(move || tc.bufs[cpu].lock_ok().clear()),
        );
        tree.add(
            &format!("{dir}/trace_pipe"),
            pipe(Cpus::One(cpu), Form::Text),
            MODE_READ,
        );
        tree.add(
            &format!("{dir}/trace_pipe_raw"),
            pipe(Cpus::One(cpu), Form::Raw),
            MODE_READ,
        );
        tree.add(
            &format!("{dir}/snapshot_raw"),
            pipe(Cpus::One(cpu), Form::SnapshotRaw),
            MODE_READ,
        );
        let tr = t.clone();
        add_ctl(
            tree,
            &format!("{dir}/stats"),
            Ctl::new(MODE_READ).rs(move || tr.stats_text(cpu)),
        );
        let (tr, tw) = (t.clone(), t.clone());
        add_ctl(
            tree,
            &format!("{dir}/buffer_size_kb"),
            Ctl::new(MODE_WRITE)
                .rs(move || format!("{}\n", TraceArray::kb_of(&tr.bufs[cpu].lock_ok())))
                .w(move |data, _| tw.set_buffer_kb(Some(cpu), data)),
        );
    }
}
