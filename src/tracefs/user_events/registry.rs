//! The registry: user events, their enablers in producers' address spaces,
//! and the process events that keep those in step with fork, exec and exit.

use super::*;
use std::collections::HashMap;

/// One user event.
pub(super) struct UEvent {
    /// The tracepoint name (`name`, or `name.<hex id>` for multi-format).
    pub(super) name: String,
    /// The registration name.
    pub(super) base: String,
    pub(super) multi: bool,
    pub(super) fields: Vec<UField>,
    pub(super) id: EventId,
    /// Smallest payload a write must carry (end of the last field − 8).
    pub(super) min_size: usize,
}

/// Mutable state of one event.
pub(super) struct EvState {
    pub(super) ev: Arc<UEvent>,
    /// Open `user_events_data` files that registered it.
    pub(super) fd_refs: usize,
    /// Enable bits pointing at it.
    pub(super) enablers: usize,
    /// Created with PERSIST or through `dynamic_events` (deleting needs
    /// CAP_PERFMON; never deleted automatically).
    pub(super) persistent: bool,
    /// Registered through an old ABI: never deleted automatically.
    pub(super) sticky: bool,
    /// 6.x status bit.
    pub(super) status_bit: Option<u32>,
    /// 5.18 status byte.
    pub(super) status_byte: Option<u32>,
    /// When an unreferenced event is to be freed.
    pub(super) free_at: Option<Instant>,
}

impl EvState {
    /// Referenced by an fd, an enable bit or a tracer: deleting it is EBUSY.
    pub(super) fn busy(&self) -> bool {
        self.fd_refs > 0 || self.enablers > 0 || self.ev.id.is_enabled()
    }
}

/// A 6.4+ enable bit in a producer: bit `bit` of the `size`-byte word at
/// `addr` in one address space.
pub(super) struct Enabler {
    pub(super) mm: Arc<Mm>,
    pub(super) addr: u64,
    pub(super) bit: u8,
    pub(super) size: u8,
    pub(super) ev: Arc<UEvent>,
    /// Copied from a parent by fork: the descriptor was opened from outside
    /// the child, so the child's exec always drops it.
    pub(super) forked: bool,
    /// A write of the bit is under way (see [`sync_bit`]).
    pub(super) busy: AtomicBool,
    /// The bit must be written again: the event changed during a write.
    pub(super) dirty: AtomicBool,
    /// Unregistered or dropped: the bit is to be cleared.
    pub(super) removed: AtomicBool,
}

impl Enabler {
    pub(super) fn new(
        mm: Arc<Mm>,
        addr: u64,
        bit: u8,
        size: u8,
        ev: Arc<UEvent>,
        forked: bool,
    ) -> Self {
        Enabler {
            mm,
            addr,
            bit,
            size,
            ev,
            forked,
            busy: AtomicBool::new(false),
            dirty: AtomicBool::new(false),
            removed: AtomicBool::new(false),
        }
    }
}

/// Bring one enable bit up to date: set while its event is enabled, clear
/// otherwise or once removed. Writes of one bit never overlap, and none
/// waits for another: a caller that finds a write under way marks the bit
/// dirty, and that writer writes again with the newest state.
pub(super) fn sync_bit(en: &Enabler) -> Result<(), MmError> {
    en.dirty.store(true, Ordering::SeqCst);
    loop {
        if en.busy.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        en.dirty.store(false, Ordering::SeqCst);
        let on = en.ev.id.is_enabled() && !en.removed.load(Ordering::SeqCst);
        let r = en.mm.set_bit(en.addr, en.bit, en.size, on);
        en.busy.store(false, Ordering::SeqCst);
        if r.is_err() || !en.dirty.load(Ordering::SeqCst) {
            return r;
        }
    }
}

/// Bring `ens` up to date on the worker pool, never waiting on one address
/// space longer than [`procmem::DEADLINE`]: one that does not answer by
/// then is marked stuck. Returns the enablers whose bit could not be
/// written (address space gone, bad address, stuck).
pub(super) fn sync_bits(ens: &[Arc<Enabler>]) -> Vec<Arc<Enabler>> {
    let mut failed = Vec::new();
    let mut start = 0;
    while start < ens.len() {
        let batch: Vec<Arc<Enabler>> = ens[start..].to_vec();
        // The index of the bit being written: the deadline is each write's
        // (see procmem::run_watched), and a stall is blamed on that bit's
        // address space alone.
        let at = Arc::new(AtomicUsize::new(0));
        let at2 = at.clone();
        let job = move || {
            let mut bad = Vec::new();
            for (k, en) in batch.iter().enumerate() {
                at2.store(k, Ordering::SeqCst);
                if sync_bit(en).is_err() {
                    bad.push(k);
                }
            }
            bad
        };
        match procmem::run_watched(job, procmem::DEADLINE, &at) {
            Ok(bad) => {
                failed.extend(bad.into_iter().map(|k| ens[start + k].clone()));
                break;
            }
            Err(procmem::Unfinished::TimedOut) => {
                let k = start + at.load(Ordering::SeqCst);
                ens[k].mm.set_stuck();
                failed.push(ens[k].clone());
                start = k + 1;
            }
            Err(procmem::Unfinished::NoWorker | procmem::Unfinished::NotStarted) => {
                failed.extend(ens[start..].iter().cloned());
                break;
            }
        }
    }
    failed
}

/// The refusal of an enable bit past [`MAX_ENABLERS`] is logged once a second.
static ENABLERS_FULL_LOG: crate::base::budget::LogLimit = crate::base::budget::LogLimit::new();

/// The enablers, indexed so that a registration costs the same however
/// many bits other producers (or this one) hold: by (process, address,
/// bit) for the EADDRINUSE check, by process for its pinned address
/// spaces, and by identity for removal (issue 37).
#[derive(Default)]
pub(super) struct Enablers {
    list: Vec<Arc<Enabler>>,
    /// Place in `list`, by the enabler's address.
    pos: HashMap<usize, usize>,
    by_key: HashMap<(u32, u64, u8), Vec<Arc<Enabler>>>,
    /// The address spaces enablers of each process pin, with how many pin each.
    mms: HashMap<u32, Vec<(Arc<Mm>, usize)>>,
}

impl Enablers {
    fn id(en: &Arc<Enabler>) -> usize {
        Arc::as_ptr(en) as usize
    }

    pub(super) fn len(&self) -> usize {
        self.list.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    pub(super) fn iter(&self) -> std::slice::Iter<'_, Arc<Enabler>> {
        self.list.iter()
    }

    pub(super) fn push(&mut self, en: Arc<Enabler>) {
        self.pos.insert(Self::id(&en), self.list.len());
        self.by_key
            .entry((en.mm.tgid(), en.addr, en.bit))
            .or_default()
            .push(en.clone());
        let mms = self.mms.entry(en.mm.tgid()).or_default();
        match mms.iter_mut().find(|(m, _)| Arc::ptr_eq(m, &en.mm)) {
            Some((_, n)) => *n += 1,
            None => mms.push((en.mm.clone(), 1)),
        }
        self.list.push(en);
    }

    /// Remove `en`; whether it was there.
    pub(super) fn remove(&mut self, en: &Arc<Enabler>) -> bool {
        let Some(k) = self.pos.remove(&Self::id(en)) else {
            return false;
        };
        self.list.swap_remove(k);
        if let Some(moved) = self.list.get(k) {
            self.pos.insert(Self::id(moved), k);
        }
        let key = (en.mm.tgid(), en.addr, en.bit);
        if let Some(v) = self.by_key.get_mut(&key) {
            v.retain(|e| !Arc::ptr_eq(e, en));
            if v.is_empty() {
                self.by_key.remove(&key);
            }
        }
        if let Some(mms) = self.mms.get_mut(&en.mm.tgid()) {
            if let Some(i) = mms.iter().position(|(m, _)| Arc::ptr_eq(m, &en.mm)) {
                mms[i].1 -= 1;
                if mms[i].1 == 0 {
                    mms.swap_remove(i);
                }
            }
            if mms.is_empty() {
                self.mms.remove(&en.mm.tgid());
            }
        }
        true
    }

    /// The enablers of process `tgid` at (`addr`, `bit`).
    pub(super) fn at(&self, tgid: u32, addr: u64, bit: u8) -> &[Arc<Enabler>] {
        self.by_key
            .get(&(tgid, addr, bit))
            .map_or(&[], Vec::as_slice)
    }

    /// The address spaces the enablers of process `tgid` pin.
    pub(super) fn mms_of(&self, tgid: u32) -> impl Iterator<Item = &Arc<Mm>> {
        self.mms.get(&tgid).into_iter().flatten().map(|(m, _)| m)
    }

    /// The enablers of process `tgid`.
    pub(super) fn of(&self, tgid: u32) -> Vec<Arc<Enabler>> {
        if !self.mms.contains_key(&tgid) {
            return Vec::new();
        }
        self.list
            .iter()
            .filter(|e| e.mm.tgid() == tgid)
            .cloned()
            .collect()
    }
}

pub(super) struct State {
    /// Creation order.
    pub(super) events: Vec<EvState>,
    /// Status page bits in use (bit 0 always).
    pub(super) used_bits: Vec<bool>,
    pub(super) enablers: Enablers,
    /// Next multi-format id.
    pub(super) multi_next: u64,
}

impl State {
    pub(super) fn find(&self, multi: bool, name: &str) -> Option<usize> {
        self.events
            .iter()
            .position(|e| e.ev.multi == multi && e.ev.name == name)
    }

    pub(super) fn find_base(&self, base: &str) -> Option<usize> {
        self.events
            .iter()
            .position(|e| !e.ev.multi && e.ev.base == base)
    }

    pub(super) fn index_of(&self, ev: &Arc<UEvent>) -> Option<usize> {
        self.events.iter().position(|e| Arc::ptr_eq(&e.ev, ev))
    }

    pub(super) fn alloc_bit(&mut self) -> SysResult<u32> {
        let b = (1..STATUS_BITS)
            .find(|&b| !self.used_bits[b])
            .ok_or(Errno::EMFILE)?;
        self.used_bits[b] = true;
        Ok(b as u32)
    }

    pub(super) fn alloc_byte(&mut self) -> SysResult<u32> {
        let b = (1..PAGE_SIZE)
            .find(|&b| !self.used_bits[b * 8..b * 8 + 8].iter().any(|&u| u))
            .ok_or(Errno::EMFILE)?;
        self.used_bits[b * 8..b * 8 + 8].fill(true);
        Ok(b as u32)
    }
}

/// user_events.
pub struct UserEvents {
    pub(super) t: Weak<Tracing>,
    pub(super) me: Weak<UserEvents>,
    pub(super) state: Mutex<State>,
    /// The status page as mappings see it. Its own lock, never held across
    /// anything slow: a page fault on `user_events_status` (a producer's
    /// mapping, or a remote access that lands in one) never waits for the
    /// registry.
    pub(super) page: Mutex<Vec<u8>>,
    pub(super) tree: OnceLock<Arc<Tree>>,
    pub(super) status_ino: OnceLock<u64>,
    pub(super) reaper: AtomicBool,
    /// The kernel's process events, once a 6.4+ registration needs them
    /// (None inside when they cannot be had: exits are then polled for).
    pub(super) procs: OnceLock<Option<ProcEvents>>,
    /// Held while process events are taken and applied.
    pub(super) applying: Mutex<()>,
}

impl UserEvents {
    /// The registry for `t` (files come with [`UserEvents::add_files`]).
    pub fn new(t: &Arc<Tracing>) -> Arc<UserEvents> {
        let mut used_bits = vec![false; STATUS_BITS];
        used_bits[0] = true;
        Arc::new_cyclic(|me| UserEvents {
            t: Arc::downgrade(t),
            me: me.clone(),
            state: Mutex::new(State {
                events: Vec::new(),
                used_bits,
                enablers: Enablers::default(),
                multi_next: 0,
            }),
            page: Mutex::new(vec![0; PAGE_SIZE]),
            tree: OnceLock::new(),
            status_ino: OnceLock::new(),
            reaper: AtomicBool::new(false),
            procs: OnceLock::new(),
            applying: Mutex::new(()),
        })
    }

    /// The names of the registered events (tracepoint names), oldest first.
    pub fn names(&self) -> Vec<String> {
        let st = self.state.lock_ok();
        st.events.iter().map(|e| e.ev.name.clone()).collect()
    }

    /// Write event `i`'s status bit or byte into the page (and the page
    /// cache of its mappings, if that changed it).
    pub(super) fn set_status(&self, st: &State, i: usize, on: bool) {
        let (bit, byte) = (st.events[i].status_bit, st.events[i].status_byte);
        if bit.is_none() && byte.is_none() {
            return;
        }
        let mut page = self.page.lock_ok();
        let before = page.clone();
        if let Some(b) = bit {
            let (idx, mask) = ((b >> 3) as usize, 1u8 << (b & 7));
            if on {
                page[idx] |= mask;
            } else {
                page[idx] &= !mask;
            }
        }
        if let Some(b) = byte {
            page[b as usize] = if on { 0x01 } else { 0 };
        }
        if before != *page {
            self.push_page(page.clone());
        }
    }

    pub(super) fn push_page(&self, page: Vec<u8>) {
        if let (Some(tree), Some(ino)) = (self.tree.get(), self.status_ino.get()) {
            tree.store(*ino, 0, page);
        }
    }

    /// Create an event (`multi`: the multi-format id it was given).
    pub(super) fn create(
        &self,
        st: &mut State,
        cmd: &Command,
        multi: Option<u64>,
    ) -> SysResult<usize> {
        if st.events.len() >= USER_EVENTS_MAX {
            return Err(Errno::EMFILE);
        }
        let t = self.t.upgrade().ok_or(Errno::ENODEV)?;
        let (name, system) = match multi {
            Some(id) => (format!("{}.{id:x}", cmd.name), SYSTEM_MULTI),
            None => (cmd.name.clone(), SYSTEM),
        };
        let multi = multi.is_some();
        let (fields, print) = layout(&cmd.fields);
        let min_size = fields.last().map_or(0, |f| f.offset + f.size - COMMON_SIZE);
        let me = self.me.clone();
        let hook_name = name.clone();
        let hook: crate::tracefs::EnableHook = Arc::new(move || {
            if let Some(ue) = me.upgrade() {
                ue.enable_changed(multi, &hook_name);
            }
        });
        let def_name = name.clone();
        let id = t.add_dynamic(
            move |n| EventDef::with_fields(system, &def_name, n, fields, print),
            hook,
        )?;
        st.events.push(EvState {
            ev: Arc::new(UEvent {
                name,
                base: cmd.name.clone(),
                multi,
                fields: cmd.fields.clone(),
                id,
                min_size,
            }),
            fd_refs: 0,
            enablers: 0,
            persistent: false,
            sticky: false,
            status_bit: None,
            status_byte: None,
            free_at: None,
        });
        Ok(st.events.len() - 1)
    }

    /// `user_event_parse` after the flags: the event a registration names
    /// (`raw`), found by comparing its words with each event's fields as
    /// text (see [`fields_match_argv`]) before its fields are parsed, else
    /// created. A single-format event of that name with other fields is
    /// EADDRINUSE. A multi-format id is used up before the fields are
    /// parsed, as the kernel names the event first. Returns the index and
    /// whether the event is new.
    pub(super) fn find_or_create(
        &self,
        st: &mut State,
        raw: &RawCommand<'_>,
        multi: bool,
    ) -> SysResult<(usize, bool)> {
        let argv = raw.args.map(reg_argv).unwrap_or_default();
        for (i, e) in st.events.iter().enumerate() {
            if e.ev.multi != multi || e.ev.base != raw.name {
                continue;
            }
            if fields_match_argv(&e.ev.fields, &argv) {
                return Ok((i, false));
            }
            if !multi {
                return Err(Errno::EADDRINUSE);
            }
        }
        let id = multi.then(|| {
            st.multi_next += 1;
            st.multi_next - 1
        });
        let fields = match raw.args {
            Some(a) => parse_fields(a)?,
            None => Vec::new(),
        };
        let cmd = Command {
            name: raw.name.to_string(),
            flags: None,
            fields,
        };
        Ok((self.create(st, &cmd, id)?, true))
    }

    /// Delete event `i` (not busy).
    pub(super) fn destroy(&self, st: &mut State, i: usize) {
        let (id, _) = self.forget(st, i, true);
        if let Some(t) = self.t.upgrade() {
            t.remove_dynamic(&id);
        }
    }

    /// Every event at once (a truncated `dynamic_events`): their status
    /// bits cleared with one page update, then one batch removal from the
    /// event list and the tree (see `remove_dynamic_many`).
    pub(super) fn destroy_all(&self, st: &mut State) {
        let mut ids = Vec::with_capacity(st.events.len());
        let mut changed = false;
        while !st.events.is_empty() {
            let last = st.events.len() - 1;
            let (id, c) = self.forget(st, last, false);
            ids.push(id);
            changed |= c;
        }
        if changed {
            let page = self.page.lock_ok().clone();
            self.push_page(page);
        }
        if let Some(t) = self.t.upgrade() {
            t.remove_dynamic_many(&ids);
        }
    }

    /// Take event `i` out of the registry and clear its status bits (the
    /// page pushed to the mappings when `push` and a bit was set); its id,
    /// for the caller to remove, and whether a set bit was cleared.
    fn forget(&self, st: &mut State, i: usize, push: bool) -> (EventId, bool) {
        let es = st.events.remove(i);
        let mut page = self.page.lock_ok();
        let mut changed = false;
        if let Some(b) = es.status_bit {
            st.used_bits[b as usize] = false;
            let (idx, mask) = ((b >> 3) as usize, 1u8 << (b & 7));
            changed |= page[idx] & mask != 0;
            page[idx] &= !mask;
        }
        if let Some(b) = es.status_byte {
            let b = b as usize;
            st.used_bits[b * 8..b * 8 + 8].fill(false);
            changed |= page[b] != 0;
            page[b] = 0;
        }
        if changed && push {
            self.push_page(page.clone());
        }
        drop(page);
        (es.ev.id.clone(), changed)
    }

    /// Schedule event `i` to be freed if nothing keeps it (6.4+ lifetime).
    pub(super) fn maybe_free(&self, st: &mut State, i: usize) {
        let e = &mut st.events[i];
        if !e.persistent && !e.sticky && !e.busy() {
            if e.free_at.is_none() {
                e.free_at = Some(Instant::now() + FREE_DELAY);
                self.start_reaper(st);
            }
        } else {
            e.free_at = None;
        }
    }

    /// Schedule every event nothing keeps.
    pub(super) fn free_unused(&self, st: &mut State) {
        for i in 0..st.events.len() {
            self.maybe_free(st, i);
        }
    }

    /// Free the scheduled events whose time has come (still unreferenced).
    pub(super) fn free_due(&self, st: &mut State) {
        let now = Instant::now();
        let mut i = 0;
        while i < st.events.len() {
            let e = &st.events[i];
            if e.free_at.is_some_and(|t| t <= now) && !e.busy() && !e.persistent && !e.sticky {
                self.destroy(st, i);
            } else {
                i += 1;
            }
        }
    }

    /// The hook: an event was enabled or disabled. Its enable bits are
    /// written outside the registry lock, on the worker pool.
    pub(super) fn enable_changed(&self, multi: bool, name: &str) {
        // Forks, execs and exits that happened before this change are
        // applied first: a child forked earlier gets the new state, an
        // image exec'd earlier is not written.
        self.drain_procs();
        let ens: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            let Some(i) = st.find(multi, name) else {
                return;
            };
            let ev = st.events[i].ev.clone();
            self.set_status(&st, i, ev.id.is_enabled());
            st.enablers
                .iter()
                .filter(|en| Arc::ptr_eq(&en.ev, &ev))
                .cloned()
                .collect()
        };
        let failed = sync_bits(&ens);
        let mut st = self.state.lock_ok();
        self.drop_enablers(&mut st, &failed);
        if let Some(i) = st.find(multi, name) {
            self.maybe_free(&mut st, i);
        }
    }

    /// Remove `gone` from the enablers (those still there) and release
    /// their references; then schedule what nothing keeps.
    pub(super) fn drop_enablers(&self, st: &mut State, gone: &[Arc<Enabler>]) {
        if gone.is_empty() {
            return;
        }
        for en in gone {
            en.removed.store(true, Ordering::SeqCst);
            if !st.enablers.remove(en) {
                continue;
            }
            if let Some(i) = st.index_of(&en.ev) {
                st.events[i].enablers -= 1;
            }
        }
        self.free_unused(st);
    }

    /// `DIAG_IOCSREG`.
    pub(super) fn register(&self, f: &DataFile, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let arg = req.arg;
        let size = u32::from_ne_bytes(mem.read(arg, 4)?.try_into().unwrap()) as usize;
        if size > PAGE_SIZE {
            return Err(Errno::E2BIG);
        }
        match size {
            20 => self.register_old(f, req, OldAbi::Bit),
            24 => self.register_old(f, req, OldAbi::Byte),
            _ if size >= REG_SIZE => self.register_new(f, req, size),
            _ => Err(Errno::EINVAL),
        }
    }

    /// An address space this process's enablers pin already, if `fresh` is
    /// the same one (one descriptor per producer process), else `fresh`.
    pub(super) fn share_mm(&self, fresh: Arc<Mm>) -> Arc<Mm> {
        let cands: Vec<Arc<Mm>> = {
            let st = self.state.lock_ok();
            st.enablers
                .mms_of(fresh.tgid())
                .filter(|m| !m.is_stuck())
                .cloned()
                .collect()
        };
        cands
            .into_iter()
            .find(|m| m.same_as(&fresh))
            .unwrap_or(fresh)
    }

    /// The enablers of process `tgid` (its current address space) at
    /// (`addr`, `bit`). Those of a former image of the pid do not count;
    /// they are dropped on the way.
    pub(super) fn has_enabler(&self, tgid: u32, addr: u64, bit: u8) -> Vec<Arc<Enabler>> {
        let hits: Vec<Arc<Enabler>> = {
            let st = self.state.lock_ok();
            st.enablers.at(tgid, addr, bit).to_vec()
        };
        let (live, dead): (Vec<_>, Vec<_>) = hits.into_iter().partition(|e| e.mm.alive());
        if !dead.is_empty() {
            let mut st = self.state.lock_ok();
            self.drop_enablers(&mut st, &dead);
        }
        live
    }

    pub(super) fn register_new(
        &self,
        f: &DataFile,
        req: &IoctlRequest<'_>,
        size: usize,
    ) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let raw = mem.read(req.arg, size)?;
        if raw[REG_SIZE..].iter().any(|&b| b != 0) {
            return Err(Errno::E2BIG);
        }
        let enable_bit = raw[4];
        let enable_size = raw[5];
        let flags = u16::from_ne_bytes([raw[6], raw[7]]);
        let enable_addr = u64::from_ne_bytes(raw[8..16].try_into().unwrap());
        let name_args = u64::from_ne_bytes(raw[16..24].try_into().unwrap());
        if flags & !(REG_MAX - 1) != 0 {
            return Err(Errno::EINVAL);
        }
        let max_size = std::mem::size_of::<usize>() as u8;
        if enable_size != 4 && enable_size != max_size {
            return Err(Errno::EINVAL);
        }
        if enable_addr % enable_size as u64 != 0 || enable_bit >= enable_size * 8 {
            return Err(Errno::EINVAL);
        }
        if enable_addr >= TASK_SIZE - enable_size as u64 {
            return Err(Errno::EFAULT);
        }
        // The registering thread is blocked in this ioctl: its address
        // space is the one to pin, and the pin outlives exec and exit
        // without ever pointing elsewhere.
        let mm = self.share_mm(Mm::pin(req.caller.pid)?);
        let tgid = mm.tgid();
        // A fork of this process that came before holds copies already.
        self.drain_procs();
        if !self.has_enabler(tgid, enable_addr, enable_bit).is_empty() {
            return Err(Errno::EADDRINUSE);
        }
        let desc = read_desc(mem, name_args)?;
        let raw = split_command(&desc);
        if raw.flags.is_some() {
            return Err(Errno::EINVAL);
        }
        if flags & REG_PERSIST != 0 && !has_perfmon(req.caller.pid) {
            return Err(Errno::EPERM);
        }
        // Follow forks from before this registration returns.
        self.procs();
        let multi = flags & REG_MULTI_FORMAT != 0;
        let mut slots = f.slots.lock_ok();
        let mut st = self.state.lock_ok();
        if st.enablers.len() >= MAX_ENABLERS {
            if let Some(suppressed) = ENABLERS_FULL_LOG.allow() {
                warn!(
                    suppressed,
                    "user_events: {MAX_ENABLERS} enable bits registered; refusing more (ENOMEM)"
                );
            }
            return Err(Errno::ENOMEM);
        }
        let (i, new) = self.find_or_create(&mut st, &raw, multi)?;
        // An event keeps the flags it was created with.
        if new && flags & REG_PERSIST != 0 {
            st.events[i].persistent = true;
        }
        if st.enablers.len() >= MAX_ENABLERS {
            if let Some(suppressed) = ENABLERS_FULL_LOG.allow() {
                warn!(
                    suppressed,
                    "user_events: {MAX_ENABLERS} enable bits registered; refusing more (ENOMEM)"
                );
            }
            return Err(Errno::ENOMEM);
        }
        let ev = st.events[i].ev.clone();
        let index = f.add_slot(&mut slots, &mut st, &ev, false);
        drop(slots);
        let en = Arc::new(Enabler::new(
            mm,
            enable_addr,
            enable_bit,
            enable_size,
            ev,
            false,
        ));
        st.enablers.push(en.clone());
        st.events[i].enablers += 1;
        drop(st);
        // The enabler reflects the current state at once (outside the lock:
        // the word may sit in a page that this very mount serves).
        let failed = sync_bits(std::slice::from_ref(&en));
        if !failed.is_empty() {
            let mut st = self.state.lock_ok();
            self.drop_enablers(&mut st, &failed);
            return Err(Errno::EFAULT);
        }
        mem.write(req.arg + 24, &(index as u32).to_ne_bytes())?;
        Ok(IoctlReply::default())
    }

    pub(super) fn register_old(
        &self,
        f: &DataFile,
        req: &IoctlRequest<'_>,
        abi: OldAbi,
    ) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let (name_off, status_off, index_off, size) = match abi {
            OldAbi::Bit => (4, 12, 16, 20),
            OldAbi::Byte => (8, 16, 20, 24),
        };
        let raw = mem.read(req.arg, size)?;
        let name_args = u64::from_ne_bytes(raw[name_off..name_off + 8].try_into().unwrap());
        let desc = read_desc(mem, name_args)?;
        // Flag text is ignored by these kernels.
        let cmd = parse_command(&desc)?;
        let mut slots = f.slots.lock_ok();
        let mut st = self.state.lock_ok();
        let (i, new) = match st.find_base(&cmd.name) {
            Some(i) => (i, false),
            None => {
                // Take the status slot first, so that EMFILE leaves nothing.
                let slot = match abi {
                    OldAbi::Bit => st.alloc_bit()?,
                    OldAbi::Byte => st.alloc_byte()?,
                };
                match self.create(&mut st, &cmd, None) {
                    Ok(i) => {
                        match abi {
                            OldAbi::Bit => st.events[i].status_bit = Some(slot),
                            OldAbi::Byte => st.events[i].status_byte = Some(slot),
                        }
                        (i, true)
                    }
                    Err(e) => {
                        match abi {
                            OldAbi::Bit => st.used_bits[slot as usize] = false,
                            OldAbi::Byte => {
                                let b = slot as usize * 8;
                                st.used_bits[b..b + 8].fill(false)
                            }
                        }
                        return Err(e);
                    }
                }
            }
        };
        if !new {
            let need = match abi {
                OldAbi::Bit => st.events[i].status_bit.is_none(),
                OldAbi::Byte => st.events[i].status_byte.is_none(),
            };
            if need {
                let slot = match abi {
                    OldAbi::Bit => st.alloc_bit()?,
                    OldAbi::Byte => st.alloc_byte()?,
                };
                match abi {
                    OldAbi::Bit => st.events[i].status_bit = Some(slot),
                    OldAbi::Byte => st.events[i].status_byte = Some(slot),
                }
                let on = st.events[i].ev.id.is_enabled();
                self.set_status(&st, i, on);
            }
        }
        st.events[i].sticky = true;
        let status = match abi {
            OldAbi::Bit => st.events[i].status_bit.unwrap(),
            OldAbi::Byte => st.events[i].status_byte.unwrap(),
        };
        let ev = st.events[i].ev.clone();
        let index = f.add_slot(&mut slots, &mut st, &ev, true);
        drop(st);
        drop(slots);
        mem.write(req.arg + status_off, &status.to_ne_bytes())?;
        mem.write(req.arg + index_off, &(index as u32).to_ne_bytes())?;
        Ok(IoctlReply::default())
    }

    /// `DIAG_IOCSDEL`.
    pub(super) fn delete_ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let name = read_desc(req.mem, req.arg)?;
        let mut st = self.state.lock_ok();
        let hits: Vec<usize> = (0..st.events.len())
            .filter(|&i| st.events[i].ev.base == name)
            .collect();
        if hits.is_empty() {
            return Err(Errno::ENOENT);
        }
        if hits.iter().any(|&i| st.events[i].busy()) {
            return Err(Errno::EBUSY);
        }
        if hits.iter().any(|&i| st.events[i].persistent) && !has_perfmon(req.caller.pid) {
            return Err(Errno::EPERM);
        }
        for &i in hits.iter().rev() {
            self.destroy(&mut st, i);
        }
        Ok(IoctlReply::default())
    }

    /// `DIAG_IOCSUNREG`.
    pub(super) fn unregister(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let mem = req.mem;
        let size = u32::from_ne_bytes(mem.read(req.arg, 4)?.try_into().unwrap()) as usize;
        if size > PAGE_SIZE {
            return Err(Errno::E2BIG);
        }
        if size < UNREG_SIZE {
            return Err(Errno::EINVAL);
        }
        let raw = mem.read(req.arg, size)?;
        if raw[UNREG_SIZE..].iter().any(|&b| b != 0) {
            return Err(Errno::E2BIG);
        }
        let bit = raw[4];
        if raw[5] != 0 || raw[6] != 0 || raw[7] != 0 {
            return Err(Errno::EINVAL);
        }
        let addr = u64::from_ne_bytes(raw[8..16].try_into().unwrap());
        let tgid = procmem::tgid_of(req.caller.pid).ok_or(Errno::ENOENT)?;
        // A forked child may unregister the copy it inherited: the fork
        // must have been handled.
        self.drain_procs();
        let hits = self.has_enabler(tgid, addr, bit);
        if hits.is_empty() {
            return Err(Errno::ENOENT);
        }
        {
            let mut st = self.state.lock_ok();
            self.drop_enablers(&mut st, &hits);
        }
        // Cleared whatever the event's state (`removed` is set by now).
        sync_bits(&hits);
        Ok(IoctlReply::default())
    }

    /// The `user_events_status` text.
    pub(super) fn status_text(&self) -> String {
        let st = self.state.lock_ok();
        let mut s = String::new();
        let mut busy = 0;
        let mut old = false;
        for e in &st.events {
            let on = e.ev.id.is_enabled();
            busy += on as usize;
            if let Some(b) = e.status_bit.or(e.status_byte) {
                old = true;
                let _ = write!(s, "{b}:");
            }
            s.push_str(&e.ev.name);
            if on {
                s.push_str(" # Used by ftrace");
            }
            s.push('\n');
        }
        let _ = write!(s, "\nActive: {}\nBusy: {busy}\n", st.events.len());
        if old {
            let _ = writeln!(s, "Max: {STATUS_BITS}");
        }
        s
    }
}

#[derive(Clone, Copy)]
pub(super) enum OldAbi {
    /// 6.0–6.3: bit per event.
    Bit,
    /// 5.18: byte per event.
    Byte,
}

/// One registration on an fd: write index = position.
pub(super) struct Slot {
    pub(super) ev: Arc<UEvent>,
    /// Registered through an old ABI (writes while disabled succeed).
    pub(super) old: bool,
}

/// The last thread that wrote on an fd, its name and its stat file, for
/// the CPU it writes on (opened when another thread writes).
pub(super) struct Writer {
    pub(super) pid: u32,
    pub(super) comm: String,
    pub(super) stat: Option<crate::base::procmem::TaskStat>,
}

pub(super) struct DataFile {
    pub(super) ue: Arc<UserEvents>,
    pub(super) slots: Mutex<Vec<Slot>>,
    pub(super) writer: Mutex<Writer>,
}
