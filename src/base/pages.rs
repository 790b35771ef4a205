//! Zero-filled buffers that cost memory only where they are written.
//!
//! A usbmon reader's ring is allocated at its full size when the reader opens
//! or resizes it, as `mon_alloc_buff` in drivers/usb/mon/mon_bin.c does. The
//! kernel's pages are real at once; ours come from an anonymous private
//! mapping, so an idle reader costs the daemon (nearly) nothing and the
//! budget charged for the ring is an upper bound of what it can ever use.
//! `vec![0; n]` would not give that: whether `calloc` touches the pages
//! depends on the allocator's state (its mmap threshold moves with earlier
//! frees), so the same reader would cost a page table entry on one run and
//! its whole size on another.

use std::ffi::c_void;
use std::num::NonZeroUsize;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use nix::sys::mman::{mmap_anonymous, munmap, MapFlags, ProtFlags};

/// `len` zero bytes in their own anonymous mapping, untouched until written.
pub struct ZeroedPages {
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: the mapping is owned by this value alone, like a `Box<[u8]>`.
unsafe impl Send for ZeroedPages {}
// SAFETY: shared access only reads, through `&[u8]`.
unsafe impl Sync for ZeroedPages {}

impl ZeroedPages {
    /// A zeroed buffer of `len` bytes; `None` when the kernel refuses the
    /// mapping (address space or map count exhausted).
    pub fn new(len: usize) -> Option<ZeroedPages> {
        let Some(size) = NonZeroUsize::new(len) else {
            return Some(ZeroedPages {
                ptr: NonNull::dangling(),
                len: 0,
            });
        };
        // SAFETY: a new private anonymous mapping aliases nothing.
        let ptr = unsafe {
            mmap_anonymous(
                None,
                size,
                ProtFlags::PROT_READ | ProtFlags::PROT_WRITE,
                MapFlags::MAP_PRIVATE | MapFlags::MAP_NORESERVE,
            )
        }
        .ok()?;
        Some(ZeroedPages { ptr, len })
    }
}

impl Deref for ZeroedPages {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: `ptr` is a live mapping of `len` readable bytes (or
        // dangling with `len` 0), owned by `self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().cast(), self.len) }
    }
}

impl DerefMut for ZeroedPages {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().cast(), self.len) }
    }
}

impl Drop for ZeroedPages {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: the mapping was made by `new` with this length and no
            // reference into it outlives `self`.
            let _ = unsafe { munmap(self.ptr, self.len) };
        }
    }
}

impl std::fmt::Debug for ZeroedPages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ZeroedPages({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_writable_and_empty_allowed() {
        let mut p = ZeroedPages::new(3 * 4096).unwrap();
        assert!(p.iter().all(|&b| b == 0));
        p[4096] = 7;
        assert_eq!(p[4096], 7);
        assert_eq!(p.len(), 3 * 4096);
        assert!(ZeroedPages::new(0).unwrap().is_empty());
    }
}
