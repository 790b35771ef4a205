//! Issue 37, finding 3: the memory a trace ring's pages really take,
//! counted by the allocator's own chunk sizes, against what
//! `ring::mem_cost` charges the memory budget for them. The worst case is
//! the smallest entry (8 bytes of common header), which costs the most
//! per byte of page; the charge must hold it too. No mount: this counts
//! one process's heap exactly, which RSS cannot.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::Arc;

use monfs::tracefs::events::{EventDef, FieldSpec};
use monfs::tracefs::ring::{mem_cost, CpuBuffer, Entry, BUF_PAGE_SIZE};

/// The allocator's chunks in use, in bytes (glibc: usable size plus the
/// 8-byte header).
static HEAP: AtomicIsize = AtomicIsize::new(0);

struct Counting;

fn chunk(p: *mut u8) -> isize {
    // SAFETY: `p` is a live block of the system allocator.
    unsafe { libc::malloc_usable_size(p.cast()) as isize + 8 }
}

// SAFETY: every call goes to the system allocator; only the count is ours.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            HEAP.fetch_add(chunk(p), Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        HEAP.fetch_sub(chunk(p), Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let before = chunk(p);
        let q = unsafe { System.realloc(p, l, n) };
        if !q.is_null() {
            HEAP.fetch_add(chunk(q) - before, Ordering::Relaxed);
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

/// Fill a ring of `pages` pages with entries of `data` bytes, overwriting
/// it twice; the heap it holds then.
fn held_by_full_ring(pages: usize, data: usize) -> usize {
    let def = Arc::new(
        EventDef::new(
            "test",
            "small",
            600,
            &[FieldSpec {
                name: "a".into(),
                ctype: "u8".into(),
            }],
            None,
        )
        .unwrap(),
    );
    let before = HEAP.load(Ordering::Relaxed);
    let mut b = CpuBuffer::new(pages);
    let per_page = BUF_PAGE_SIZE / (4 + data.div_ceil(4) * 4);
    for i in 0..(3 * pages * per_page) as u64 {
        b.push(
            Entry {
                def: def.clone(),
                data: vec![0u8; data].into(),
                ts: i,
                cpu: 0,
                comm: "a-task-name".into(),
            },
            true,
        );
    }
    let held = (HEAP.load(Ordering::Relaxed) - before) as usize;
    drop(b);
    held
}

#[test]
fn a_full_ring_takes_no_more_than_its_charge() {
    let pages = 2048;
    let counted = mem_cost(pages, BUF_PAGE_SIZE);
    for data in [8, 12, 16, 24, 40, 64, 100, 200, 1000] {
        let held = held_by_full_ring(pages, data);
        println!(
            "{pages} pages of {data}-byte entries: heap {} KiB, counted {} KiB ({:.0}%)",
            held / 1024,
            counted / 1024,
            held as f64 * 100.0 / counted as f64
        );
        assert!(held <= counted, "{data}-byte entries: {held} > {counted}");
        // The pages are blocks of the sub-buffer's size whatever the
        // entries: a full ring uses what it is charged, within a quarter.
        assert!(
            held >= counted - counted / 4,
            "{data}-byte entries: {held} < {counted} - 25%"
        );
    }
}
