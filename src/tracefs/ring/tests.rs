//! The ring buffer against the kernel's layouts and rules.

use super::*;
use crate::tracefs::events::{EventDef, FieldSpec, FieldValue};

#[test]
fn header_is_the_kernels() {
    let want = "# tracer: nop\n#\n# entries-in-buffer/entries-written: 0/0   #P:2\n#\n\
#                                _-----=> irqs-off/BH-disabled\n\
#                               / _----=> need-resched\n\
#                              | / _---=> hardirq/softirq\n\
#                              || / _--=> preempt-depth\n\
#                              ||| / _-=> migrate-disable\n\
#                              |||| /     delay\n\
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
#              | |         |   |||||     |         |\n";
    assert_eq!(header(0, 0, 2, true), want);
}

fn exec_def() -> Arc<EventDef> {
    let f = |t: &str, n: &str| FieldSpec {
        name: n.into(),
        ctype: t.into(),
    };
    Arc::new(
        EventDef::new(
            "sched",
            "sched_process_exec",
            365,
            &[
                f("__data_loc char[]", "filename"),
                f("pid_t", "pid"),
                f("pid_t", "old_pid"),
            ],
            Some("\"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid"),
        )
        .unwrap(),
    )
}

fn entry(def: &Arc<EventDef>, i: i64, ts: u64, name: &str) -> Entry {
    let comm = if i == 1 { "c" } else { "a" };
    Entry {
        def: def.clone(),
        data: def
            .encode(
                1,
                &[
                    FieldValue::Str(name),
                    FieldValue::Int(i),
                    FieldValue::Int(0),
                ],
            )
            .into(),
        ts,
        cpu: 0,
        comm: comm.into(),
    }
}

#[test]
fn line_matches_the_kernel() {
    let def = exec_def();
    let data = def.encode(
        12241,
        &[
            FieldValue::Str("/bin/true"),
            FieldValue::Int(12241),
            FieldValue::Int(12241),
        ],
    );
    let mut e = Entry {
        def,
        data: data.into(),
        ts: 896_850_062_345,
        cpu: 1,
        comm: "true".into(),
    };
    assert_eq!(
        e.line(true, true),
        "            true-12241   [001] .....   896.850062: sched_process_exec: filename=/bin/true pid=12241 old_pid=12241\n"
    );
    // Without irq-info the time keeps its leading space (measured:
    // "[000]   2614.700485: tracing_mark_write: hello").
    assert!(e
        .line(false, true)
        .starts_with("            true-12241   [001]    896.850062: "));
    // ns2usecs rounds to the nearest microsecond.
    e.ts = 1_999_999_600;
    assert!(e.line(false, true).contains("[001]      2.000000: "));
    // Clocks that do not count nanoseconds print the raw count.
    e.ts = 42;
    assert!(e.line(false, false).contains("[001]            42: "));
    assert_eq!(flags(0x01 | 0x08, 2), "d.h2.");
    assert_eq!(flags(0x01 | 0x80 | 0x04 | 0x20 | 0x10, 0x12), "DNs21");
}

#[test]
fn full_pages_are_overwritten_oldest_first() {
    let def = exec_def();
    let cost = entry(&def, 0, 0, "x").cost();
    let per_page = BUF_PAGE_SIZE / cost;
    let mut b = CpuBuffer::new(2);
    for i in 0..(3 * per_page) as i64 {
        assert!(b.push(entry(&def, i, i as u64, "x"), true));
    }
    // Two pages stay; the first page's entries were overwritten.
    assert_eq!(b.len(), 2 * per_page);
    assert_eq!(b.overrun(), per_page as u64);
    assert_eq!(b.written(), 3 * per_page as u64);
    assert_eq!(b.peek().unwrap().ts, per_page as u64);
    // With overwrite off a full buffer drops new entries instead.
    assert!(!b.push(entry(&def, 0, 10_000, "x"), false));
    assert_eq!(b.stats().dropped, 1);
    b.resize(1);
    assert_eq!(b.nr_pages(), 2);
    b.clear();
    assert!(b.is_empty());
    assert_eq!(b.overrun(), 0);
}

/// A type whose definition changes (a dynamic event removed and another
/// made with its id) reads its older entries with the definition they
/// were written with, and the newer with the new one; definitions no
/// entry left uses are let go.
#[test]
fn entries_keep_the_definition_they_were_written_with() {
    let old = exec_def();
    let new = exec_def();
    let cost = entry(&old, 0, 0, "x").cost();
    let per_page = (BUF_PAGE_SIZE / cost) as i64;
    let mut b = CpuBuffer::new(2);
    b.push(entry(&old, 0, 0, "x"), true);
    b.push(entry(&new, 1, 1, "x"), true);
    b.push(entry(&old, 2, 2, "x"), true);
    let defs: Vec<_> = b.iter().map(|e| e.def).collect();
    assert!(Arc::ptr_eq(&defs[0], &old));
    assert!(Arc::ptr_eq(&defs[1], &new));
    assert!(Arc::ptr_eq(&defs[2], &old));
    // Three pages later only `new` is written and read.
    for i in 0..3 * per_page {
        b.push(entry(&new, i, 10 + i as u64, "x"), true);
    }
    assert!(b.iter().all(|e| Arc::ptr_eq(&e.def, &new)));
    assert_eq!(b.defs.values().map(|t| t.v.len()).sum::<usize>(), 1);
}

fn u32_at(p: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(p[off..off + 4].try_into().unwrap())
}

#[test]
fn raw_pages_have_the_kernel_layout() {
    let def = exec_def();
    let mut b = CpuBuffer::new(4);
    let e0 = entry(&def, 1, 1000, "a");
    let small = e0.data.len();
    b.push(e0, true);
    b.push(entry(&def, 2, 1500, "b"), true);
    // 2^27 units later: a time extend first.
    b.push(entry(&def, 3, 1500 + (1 << 27) + 7, "c"), true);
    // A large entry gets a length word.
    b.push(entry(&def, 4, 1600 + (1 << 27), &"z".repeat(200)), true);
    let p = b.read_page(PAGE_SIZE).unwrap();
    assert_eq!(p.len(), PAGE_SIZE);
    assert_eq!(u64::from_le_bytes(p[0..8].try_into().unwrap()), 1000);
    let commit = u64::from_le_bytes(p[8..16].try_into().unwrap()) as usize;
    let d = small.div_ceil(4) * 4;
    // First event: delta 0, type_len = words.
    assert_eq!(u32_at(&p, 16), (d / 4) as u32);
    let second = 16 + 4 + d;
    assert_eq!(u32_at(&p, second), (500 << 5) | (d / 4) as u32);
    let ext = second + 4 + d;
    let delta = (1u64 << 27) + 7;
    assert_eq!(u32_at(&p, ext), 30 | (((delta & 0x7ff_ffff) as u32) << 5));
    assert_eq!(u32_at(&p, ext + 4), (delta >> 27) as u32);
    assert_eq!(u32_at(&p, ext + 8), (d / 4) as u32);
    let big = ext + 12 + d;
    assert_eq!(u32_at(&p, big) & 0x1f, 0);
    assert_eq!(u32_at(&p, big) >> 5, 93);
    let len = u32_at(&p, big + 4) as usize;
    assert!(len > 112 + 4);
    assert_eq!(commit, big + 4 + len - 16);
    assert!(p[16 + commit..].iter().all(|&b| b == 0));
    assert!(b.is_empty());
    assert!(b.read_page(PAGE_SIZE).is_none());
    assert_eq!(b.stats().read, 4);
}

#[test]
fn raw_pages_report_missed_events() {
    let def = exec_def();
    let cost = entry(&def, 0, 0, "x").cost();
    let per_page = BUF_PAGE_SIZE / cost;
    let mut b = CpuBuffer::new(2);
    for i in 0..(3 * per_page) as u64 {
        b.push(entry(&def, 0, i, "x"), true);
    }
    let p = b.read_page(PAGE_SIZE).unwrap();
    let commit = u64::from_le_bytes(p[8..16].try_into().unwrap());
    assert_ne!(commit & MISSED_EVENTS, 0);
    assert_ne!(commit & MISSED_STORED, 0);
    let size = (commit & 0xffff) as usize;
    // A full page: the data ends where the next entry no longer fit.
    assert_eq!(size, per_page * cost);
    let lost = u64::from_le_bytes(p[16 + size..24 + size].try_into().unwrap());
    assert_eq!(lost, per_page as u64);
    // The next page has no flags.
    let p = b.read_page(PAGE_SIZE).unwrap();
    assert_eq!(u64::from_le_bytes(p[8..16].try_into().unwrap()) >> 30, 0);
}

#[test]
fn short_reads_take_what_fits_and_the_writer_page_stays() {
    let def = exec_def();
    let mut b = CpuBuffer::new(2);
    let cost = entry(&def, 0, 0, "x").cost();
    for i in 0..3 {
        b.push(entry(&def, 0, i, "x"), true);
    }
    let p = b.read_page(PAGE_HDR + cost + 1).unwrap();
    assert_eq!(
        u64::from_le_bytes(p[8..16].try_into().unwrap()),
        cost as u64
    );
    assert_eq!(b.len(), 2);
    assert!(b.read_page(PAGE_HDR).is_none());
    // The writer page keeps its bytes: a consumed page is not reused.
    b.pop();
    b.pop();
    assert!(b.is_empty());
    b.push(entry(&def, 0, 5, "x"), true);
    assert_eq!(b.len(), 1);
    assert_eq!(b.pop().unwrap().ts, 5);
}

#[test]
fn larger_sub_buffers_hold_more_and_read_whole() {
    let def = exec_def();
    let mut b = CpuBuffer::new(354);
    b.push(entry(&def, 0, 1, "x"), true);
    let cost = entry(&def, 0, 0, "x").cost();
    // 8 KiB sub-buffers: half the pages for the same bytes, the old
    // entries gone but still counted, as the kernel's counters are.
    b.set_capacity(subbuf_capacity(1));
    assert_eq!(b.capacity(), 8176);
    assert_eq!(b.nr_pages(), (354 * BUF_PAGE_SIZE).div_ceil(8176));
    assert_eq!(b.size_bytes(), 354 * BUF_PAGE_SIZE);
    assert!(b.is_empty());
    assert_eq!((b.len(), b.written()), (1, 1));
    assert_eq!(b.stats().bytes, cost);
    // A page now takes twice the entries, and reads as 8192 bytes.
    let per_page = 8176 / cost;
    for i in 0..per_page as u64 + 1 {
        b.push(entry(&def, 0, 10 + i, "x"), true);
    }
    let p = b.read_page(1 << 20).unwrap();
    assert_eq!(p.len(), 8192);
    let commit = u64::from_le_bytes(p[8..16].try_into().unwrap()) as usize;
    assert_eq!(commit, per_page * cost);
    b.resize_bytes(100 * 1024);
    assert_eq!(b.nr_pages(), (100 * 1024usize).div_ceil(8176));
    assert_eq!(b.size_bytes(), b.nr_pages() * 8176);
    b.clear();
    assert_eq!((b.len(), b.stats().bytes), (0, 0));
}

#[test]
fn merge_is_by_time_then_cpu() {
    let def = exec_def();
    let mut a = CpuBuffer::new(2);
    let mut c = CpuBuffer::new(2);
    for ts in [1, 4, 6] {
        a.push(entry(&def, 0, ts, "a"), true);
    }
    for ts in [2, 4, 5] {
        c.push(entry(&def, 1, ts, "c"), true);
    }
    let bufs = [&a, &c];
    let got: Vec<(u64, String)> = merged(&bufs).map(|e| (e.ts, e.comm.to_string())).collect();
    let got: Vec<(u64, &str)> = got.iter().map(|(t, c)| (*t, c.as_str())).collect();
    assert_eq!(
        got,
        vec![(1, "a"), (2, "c"), (4, "a"), (4, "c"), (5, "c"), (6, "a")]
    );
}

/// The definitions table is charged to the memory budget as it grows, close
/// to what it takes on the heap, and given back as its types' entries go:
/// N distinct types written into one buffer (the user_events case: a
/// type per event) count within 25% of the table's heap use.
#[test]
fn the_definitions_table_is_charged_as_it_grows() {
    let mut b = CpuBuffer::new(pages_for(DEFAULT_BUF_BYTES, BUF_PAGE_SIZE));
    for n in [1usize, 10, 100, 1000, 5000] {
        b.clear();
        let defs: Vec<_> = (0..n).map(|_| exec_def()).collect();
        for (i, d) in defs.iter().enumerate() {
            let mut e = entry(d, i as i64, i as u64, "x");
            e.data[0..2].copy_from_slice(&(i as u16).to_le_bytes());
            assert!(b.push(e, true));
        }
        let (charged, heap) = (b.defs_charged(), b.defs_heap());
        if n < 100 {
            // Below that the table is within the fixed part (TABLES_MEM).
            assert!(heap <= 4096, "{n} types: heap {heap}");
            continue;
        }
        assert!(
            charged as f64 >= 0.75 * heap as f64 && charged as f64 <= 1.25 * heap as f64,
            "{n} types: charged {charged}, heap {heap}"
        );
    }
    // Overwritten by entries of one type, the others' charge goes.
    let one = exec_def();
    let per_page = (BUF_PAGE_SIZE / entry(&one, 0, 0, "x").cost()) as i64;
    for i in 0..(b.nr_pages() as i64 + 1) * per_page {
        b.push(entry(&one, i, 10_000 + i as u64, "x"), true);
    }
    assert_eq!(b.defs.len(), 1);
    assert_eq!(b.defs_charged(), TypeDefs::cost(4));
}
