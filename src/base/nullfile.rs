//! `monfs/null`: the baseline that benchmarks measure against through the same
//! mount. Every read returns one 80-byte line at once (about the size of a usbmon
//! text line), every write is accepted whole, and every ioctl returns 0.

use std::sync::Arc;

use crate::base::errno::SysResult;
use crate::base::vfs::{Caller, FileNode, IoctlReply, IoctlRequest, OpenFile, OpenFlags};

/// The line each read returns (80 bytes, newline included).
pub const NULL_LINE: &[u8; 80] =
    b"ffff888009800780 1234567890 C Ci:1:002:0 0 18 = 12010002 00000040 27060100 0000\n";

/// The `monfs/null` node.
pub struct NullNode;

struct NullFile;

impl OpenFile for NullFile {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        Ok(NULL_LINE[..(size as usize).min(NULL_LINE.len())].to_vec())
    }
    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        Ok(data.len() as u32)
    }
    fn ioctl(&self, _req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        Ok(IoctlReply::default())
    }
    fn is_stream(&self) -> bool {
        true
    }
}

impl FileNode for NullNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(NullFile))
    }
}
