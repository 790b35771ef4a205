//! Control files: a file whose content is generated when a read starts at
//! offset 0, whose writes go to a closure and whose `O_TRUNC` goes to
//! another, as most tracefs files behave.

use std::sync::Arc;

use crate::base::errno::{Errno, SysResult};
use crate::base::vfs::{Caller, FileNode, NodeKind, OpenFile, OpenFlags, OpenText, Tree};

/// Writable tracefs files.
pub const MODE_WRITE: u32 = 0o640;
/// Read-only tracefs files.
pub const MODE_READ: u32 = 0o440;

type ReadFn = Arc<dyn Fn() -> Vec<u8> + Send + Sync>;
type WriteFn = Arc<dyn Fn(&[u8], &Caller) -> SysResult<u32> + Send + Sync>;
type TruncFn = Arc<dyn Fn() -> SysResult<()> + Send + Sync>;

/// A control file: content generated when a read starts at offset 0, writes
/// handed to a closure, `O_TRUNC` to another.
#[derive(Clone, Default)]
pub(crate) struct Ctl {
    mode: u32,
    read: Option<ReadFn>,
    write: Option<WriteFn>,
    trunc: Option<TruncFn>,
}

impl Ctl {
    pub(crate) fn new(mode: u32) -> Ctl {
        Ctl {
            mode,
            ..Default::default()
        }
    }
    pub(crate) fn r(mut self, f: impl Fn() -> Vec<u8> + Send + Sync + 'static) -> Ctl {
        self.read = Some(Arc::new(f));
        self
    }
    pub(crate) fn rs(self, f: impl Fn() -> String + Send + Sync + 'static) -> Ctl {
        self.r(move || crate::base::bytestr::into_bytes(f()))
    }
    pub(crate) fn w(
        mut self,
        f: impl Fn(&[u8], &Caller) -> SysResult<u32> + Send + Sync + 'static,
    ) -> Ctl {
        self.write = Some(Arc::new(f));
        self
    }
    pub(crate) fn t(mut self, f: impl Fn() + Send + Sync + 'static) -> Ctl {
        self.trunc = Some(Arc::new(move || {
            f();
            Ok(())
        }));
        self
    }
    /// An `O_TRUNC` that can fail the open.
    pub(crate) fn tf(mut self, f: impl Fn() -> SysResult<()> + Send + Sync + 'static) -> Ctl {
        self.trunc = Some(Arc::new(f));
        self
    }
}

struct CtlOpen {
    ctl: Ctl,
    writable: bool,
    caller: Caller,
    /// Readable opens of readable files.
    text: Option<OpenText>,
}

impl FileNode for Ctl {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let text = match &self.read {
            Some(r) if flags.readable() => Some(OpenText::new(r())?),
            _ => None,
        };
        Ok(Arc::new(CtlOpen {
            ctl: self.clone(),
            writable: flags.writable(),
            caller: *caller,
            text,
        }))
    }
}

impl OpenFile for CtlOpen {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        match (&self.ctl.read, &self.text) {
            (Some(r), Some(t)) => t.read(offset, size, || r()),
            (Some(r), None) => Ok(crate::base::vfs::slice_at(&r(), offset, size)),
            (None, _) => Err(Errno::EINVAL),
        }
    }
    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        let n = match &self.ctl.write {
            Some(w) => w(data, &self.caller)?,
            None => return Err(Errno::EINVAL),
        };
        if let Some(t) = &self.text {
            t.written();
        }
        Ok(n)
    }
    fn content(&self) -> Option<&[u8]> {
        self.text.as_ref().map(|t| t.at_open())
    }
    fn read_mapped(&self, _pid: u32, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let t = self.text.as_ref().ok_or(Errno::EIO)?;
        Ok(crate::base::vfs::slice_at(t.at_open(), offset, size))
    }
    fn truncate(&self) -> SysResult<()> {
        if self.writable {
            if let Some(t) = &self.ctl.trunc {
                t()?;
            }
        }
        Ok(())
    }
}

/// Add a control file at `path`.
pub(crate) fn add_ctl(tree: &Tree, path: &str, ctl: Ctl) {
    let mode = ctl.mode;
    tree.add(path, NodeKind::File(Arc::new(ctl)), mode);
}

/// `1` or `0` and a newline, as the kernel shows a flag.
pub(crate) fn bool_line(b: bool) -> String {
    if b { "1\n" } else { "0\n" }.to_string()
}
