//! The files: `user_events_data`, `user_events_status` and `dynamic_events`.

use super::*;

impl UserEvents {
    /// Add `user_events_data`, `user_events_status` and `dynamic_events`.
    pub fn add_files(self: &Arc<Self>, tree: &Arc<Tree>) {
        let _ = self.tree.set(tree.clone());
        tree.add(
            "tracing/user_events_data",
            NodeKind::File(Arc::new(DataNode(self.clone()))),
            0o640,
        );
        let ino = tree.add(
            "tracing/user_events_status",
            NodeKind::File(Arc::new(StatusNode(self.clone()))),
            0o640,
        );
        let _ = self.status_ino.set(ino);
        tree.add(
            "tracing/dynamic_events",
            NodeKind::File(Arc::new(DynNode(self.clone()))),
            0o640,
        );
    }
}

// ---------------------------------------------------------------------------
// user_events_data.

pub(super) struct DataNode(pub(super) Arc<UserEvents>);

impl DataFile {
    /// Add `ev` to this fd's list (or find it there); its index.
    pub(super) fn add_slot(
        &self,
        slots: &mut Vec<Slot>,
        st: &mut State,
        ev: &Arc<UEvent>,
        old: bool,
    ) -> usize {
        if let Some(k) = slots.iter().position(|s| Arc::ptr_eq(&s.ev, ev)) {
            slots[k].old = old;
            return k;
        }
        slots.push(Slot {
            ev: ev.clone(),
            old,
        });
        if let Some(i) = st.index_of(ev) {
            st.events[i].fd_refs += 1;
            st.events[i].free_at = None;
        }
        slots.len() - 1
    }
}

impl FileNode for DataNode {
    fn open(&self, _flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(DataFile {
            ue: self.0.clone(),
            slots: Mutex::new(Vec::new()),
            writer: Mutex::new(Writer {
                pid: caller.pid,
                comm: crate::base::procmem::comm_of(caller.pid),
                stat: crate::base::procmem::TaskStat::open(caller.pid),
            }),
        }))
    }
}

/// Check the `__data_loc`/`__rel_loc` fields of an entry.
pub(super) fn validate(fields: &[Field], entry: &[u8]) -> SysResult<()> {
    for f in fields {
        let is_loc = matches!(
            f.kind,
            FieldKind::DynString | FieldKind::RelString | FieldKind::DynArray | FieldKind::RelArray
        );
        if !is_loc {
            continue;
        }
        let (start, len) = f.loc_range(entry);
        if start + len > entry.len() {
            return Err(Errno::EFAULT);
        }
        if f.ctype.contains("char") && (len == 0 || entry[start + len - 1] != 0) {
            return Err(Errno::EFAULT);
        }
    }
    Ok(())
}

impl DataFile {
    /// Record one write(2) of `data` by thread `pid`: the trace shows the
    /// writer, as the kernel shows `current`, on the CPU it wrote on.
    pub(super) fn record(&self, data: &[u8], pid: u32) -> SysResult<u32> {
        if data.len() < 4 {
            return Err(Errno::EFAULT);
        }
        let idx = i32::from_ne_bytes(data[..4].try_into().unwrap());
        if idx < 0 {
            return Err(Errno::EINVAL);
        }
        let (ev, old) = {
            let slots = self.slots.lock_ok();
            let s = slots.get(idx as usize).ok_or(Errno::ENOENT)?;
            (s.ev.clone(), s.old)
        };
        let payload = &data[4..];
        if payload.len() < ev.min_size {
            return Err(Errno::EINVAL);
        }
        if !ev.id.is_enabled() {
            return if old {
                Ok(data.len() as u32)
            } else {
                Err(Errno::EBADF)
            };
        }
        let (comm, cpu) = {
            let mut w = self.writer.lock_ok();
            if w.pid != pid {
                *w = Writer {
                    pid,
                    comm: crate::base::procmem::comm_of(pid),
                    stat: crate::base::procmem::TaskStat::open(pid),
                };
            }
            (w.comm.clone(), w.stat.as_ref().and_then(|s| s.cpu()))
        };
        let mut entry = Vec::with_capacity(COMMON_SIZE + payload.len());
        entry.extend_from_slice(&ev.id.id().to_le_bytes());
        entry.extend_from_slice(&[0, 0]);
        entry.extend_from_slice(&pid.to_le_bytes());
        entry.extend_from_slice(payload);
        validate(&ev.id.def().fields, &entry)?;
        if let Some(t) = self.ue.t.upgrade() {
            t.record_on(&ev.id, entry, &comm, None, cpu);
        }
        Ok(data.len() as u32)
    }
}

impl OpenFile for DataFile {
    fn read(&self, _offset: u64, _size: u32) -> SysResult<Vec<u8>> {
        Err(Errno::EINVAL)
    }
    fn write(&self, _offset: u64, data: &[u8], caller: &Caller) -> SysResult<u32> {
        self.record(data, caller.pid)
    }
    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        match req.cmd {
            DIAG_IOCSREG => self.ue.register(self, req),
            DIAG_IOCSDEL => self.ue.delete_ioctl(req),
            DIAG_IOCSUNREG => self.ue.unregister(req),
            _ => Err(Errno::ENOTTY),
        }
    }
    fn is_stream(&self) -> bool {
        true
    }
    fn release(&self) {
        let slots = std::mem::take(&mut *self.slots.lock_ok());
        {
            let mut st = self.ue.state.lock_ok();
            for s in &slots {
                if let Some(i) = st.index_of(&s.ev) {
                    st.events[i].fd_refs -= 1;
                }
            }
            self.ue.free_unused(&mut st);
        }
        // Without process events, an exit is noticed here too: a process
        // that exits closes its fds after its memory is gone. With them, its
        // exit event does this for its own enablers only, instead of every
        // close probing every producer.
        if !matches!(self.ue.procs.get(), Some(Some(_))) {
            self.ue.reap(None, false);
        }
    }
}

// ---------------------------------------------------------------------------
// user_events_status.

pub(super) struct StatusNode(pub(super) Arc<UserEvents>);

pub(super) struct StatusFile {
    pub(super) ue: Arc<UserEvents>,
    /// The text that read(2) gives (a mapping, and so sendfile, sees the
    /// status page instead).
    pub(super) text: OpenText,
}

impl FileNode for StatusNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(StatusFile {
            ue: self.0.clone(),
            text: OpenText::lazy(),
        }))
    }
    /// One page, so that a mapping can fault it in.
    fn size(&self) -> u64 {
        PAGE_SIZE as u64
    }
}

impl OpenFile for StatusFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.text.read(offset, size, || {
            crate::base::bytestr::into_bytes(self.ue.status_text())
        })
    }
    fn write(&self, _offset: u64, _data: &[u8], _caller: &Caller) -> SysResult<u32> {
        Err(Errno::EINVAL)
    }
    fn read_mapped(&self, _pid: u32, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let page = self.ue.page.lock_ok();
        Ok(crate::base::vfs::slice_at(&page[..PAGE_SIZE], offset, size))
    }
}

// ---------------------------------------------------------------------------
// dynamic_events.

pub(super) struct DynNode(pub(super) Arc<UserEvents>);

pub(super) struct DynFile {
    pub(super) ue: Arc<UserEvents>,
    pub(super) caller: Caller,
    /// Readable opens.
    pub(super) text: Option<OpenText>,
    pub(super) writable: bool,
}

impl FileNode for DynNode {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(DynFile {
            ue: self.0.clone(),
            caller: *caller,
            text: flags
                .readable()
                .then(|| OpenText::new(crate::base::bytestr::into_bytes(self.0.dynamic_text())))
                .transpose()?,
            writable: flags.writable(),
        }))
    }
}

impl OpenFile for DynFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let generate = || crate::base::bytestr::into_bytes(self.ue.dynamic_text());
        match &self.text {
            Some(t) => t.read(offset, size, generate),
            None => Ok(crate::base::vfs::slice_at(&generate(), offset, size)),
        }
    }
    fn content(&self) -> Option<&[u8]> {
        self.text.as_ref().map(|t| t.at_open())
    }
    fn read_mapped(&self, _pid: u32, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let t = self.text.as_ref().ok_or(Errno::EIO)?;
        Ok(crate::base::vfs::slice_at(t.at_open(), offset, size))
    }
    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        if let Some(t) = &self.text {
            t.written();
        }
        run_commands(data, |line| self.ue.dynamic_line(line, &self.caller))?;
        Ok(data.len() as u32)
    }
    fn truncate(&self) -> SysResult<()> {
        if self.writable {
            self.ue.dynamic_clear(&self.caller)?;
        }
        Ok(())
    }
}
