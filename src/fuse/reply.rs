//! Writing to the device: replies, errors, and the notifications the
//! kernel takes unasked (poll wake-ups, page-cache stores, dropped
//! directory entries).

use std::io::IoSlice;
use std::os::fd::AsRawFd;

use tracing::debug;

use crate::base::errno::Errno;

use super::proto;
use super::state::{Session, MAX_WRITE};

impl Session {
    /// Write a reply (`error` 0 with `parts` as body, or a negative errno).
    pub(super) fn send(&self, unique: u64, error: i32, parts: &[&[u8]]) {
        if unique != 0 {
            self.answering(unique);
            if let Some(r) = self.uring.get() {
                if r.reply(unique, error, parts) {
                    return;
                }
            }
        }
        let body: usize = parts.iter().map(|p| p.len()).sum();
        let mut hdr = proto::Writer::default();
        hdr.u32((proto::OUT_HEADER_LEN + body) as u32)
            .u32(error as u32)
            .u64(unique);
        let mut iov = Vec::with_capacity(parts.len() + 1);
        iov.push(IoSlice::new(&hdr.0));
        for p in parts {
            iov.push(IoSlice::new(p));
        }
        // SAFETY: IoSlice is ABI-compatible with iovec.
        let rc = unsafe {
            libc::writev(
                self.dev.as_raw_fd(),
                iov.as_ptr() as *const libc::iovec,
                iov.len() as i32,
            )
        };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            // ENOENT: the request was interrupted and is gone.
            if e.raw_os_error() != Some(libc::ENOENT) {
                debug!(unique, "reply failed: {e}");
            }
        }
    }

    pub(super) fn ok(&self, unique: u64, body: &[u8]) {
        self.send(unique, 0, &[body]);
    }

    pub(super) fn err(&self, unique: u64, e: Errno) {
        self.send(unique, -e.code(), &[]);
    }

    pub(super) fn finish(&self, u: u64, res: Result<Vec<u8>, Errno>) {
        match res {
            Ok(d) => self.ok(u, &d),
            Err(e) => self.err(u, e),
        }
    }

    /// FUSE_NOTIFY_INVAL_ENTRY: the kernel drops its cached entry `name` of
    /// directory `parent` (ENOENT if it had none: nothing to do).
    pub(super) fn inval_entry(&self, parent: u64, name: &str) {
        let name = crate::base::bytestr::bytes(name);
        let mut w = proto::Writer::default();
        w.u64(parent).u32(name.len() as u32).u32(0);
        w.0.extend_from_slice(&name);
        w.0.push(0);
        self.notify(proto::notify::INVAL_ENTRY, &w.0);
    }

    /// Put `bytes` into the page cache of `nodeid` at `offset` (FUSE_NOTIFY_STORE),
    /// in pieces the kernel accepts.
    pub(super) fn store(&self, nodeid: u64, offset: u64, bytes: &[u8]) {
        for (i, chunk) in bytes.chunks(MAX_WRITE as usize).enumerate() {
            let mut w = proto::Writer::default();
            w.u64(nodeid)
                .u64(offset + (i * MAX_WRITE as usize) as u64)
                .u32(chunk.len() as u32)
                .u32(0);
            self.send(0, proto::notify::STORE, &[&w.0, chunk]);
        }
    }

    /// Send a notification (unique 0).
    pub(super) fn notify(&self, code: i32, body: &[u8]) {
        self.send(0, code, &[body]);
    }
}
