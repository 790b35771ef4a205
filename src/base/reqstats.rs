//! `monfs/requests`: how many requests of each type the daemon served and
//! how long it took over them, for profiling a client against the mount
//! (`cat monfs/requests`; `> monfs/requests` starts the counts again).
//!
//! A frontend (FUSE, CUSE) names each request type once and then records
//! one time per request: from taking the request to writing its answer, or
//! to setting it aside when it has to wait (a blocking read or ioctl, parked
//! until its file is ready) or takes no answer (FORGET). That is the daemon's
//! own share of a round trip; the transport's share is not in it. Recording
//! is two relaxed atomic additions (a third for a new maximum), so it is
//! always on: it costs a null ioctl about 1%.
//!
//! Types are kept in a fixed table: a caller cannot grow it (ioctl numbers
//! past the table's size are counted together as `other`). The daemon makes
//! the file a control file showing [`RequestStats::text`], whose `O_TRUNC`
//! calls [`RequestStats::reset`].

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Request types kept apart; the last slot counts the rest.
const SLOTS: usize = 64;
/// Histogram buckets: exact below 16 ns, then 8 per power of two up to
/// 2^40 ns (18 minutes); longer times count in the last one.
const BUCKETS: usize = 16 + 36 * 8;

/// Counts and time histograms by request type.
pub struct RequestStats {
    slots: Box<[Slot]>,
}

struct Slot {
    /// The type's key plus one; 0 while the slot is free.
    key: AtomicU64,
    label: OnceLock<String>,
    /// Set aside to wait, or taking no answer.
    waited: AtomicU64,
    sum_ns: AtomicU64,
    max_ns: AtomicU64,
    hist: Box<[AtomicU64]>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            key: AtomicU64::new(0),
            label: OnceLock::new(),
            waited: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            hist: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// The time below which a share `q` (0..=1) of the recorded times
    /// fall, to the resolution of a bucket (its upper edge).
    fn quantile(&self, counts: &[u64], total: u64, q: f64) -> u64 {
        let want = ((total as f64 * q).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, n) in counts.iter().enumerate() {
            seen += n;
            if seen >= want {
                return bucket_high(i).min(self.max_ns.load(Ordering::Relaxed));
            }
        }
        self.max_ns.load(Ordering::Relaxed)
    }
}

/// The bucket of a time of `ns` nanoseconds.
fn bucket(ns: u64) -> usize {
    if ns < 16 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros() as usize;
    let sub = ((ns >> (e - 3)) & 7) as usize;
    (16 + (e - 4) * 8 + sub).min(BUCKETS - 1)
}

/// The longest time that falls in bucket `i`.
fn bucket_high(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let e = (i - 16) / 8 + 4;
    let sub = ((i - 16) % 8) as u64;
    ((8 + sub + 1) << (e - 3)) - 1
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats {
            slots: (0..SLOTS).map(|_| Slot::new()).collect(),
        }
    }
}

impl RequestStats {
    /// The slot of request type `key`, named `label()` when it is first
    /// seen. Past the table's size, the shared `other` slot.
    pub fn slot(&self, key: u64, label: impl FnOnce() -> String) -> usize {
        let want = key.wrapping_add(1).max(1);
        let last = SLOTS - 1;
        for (i, s) in self.slots[..last].iter().enumerate() {
            let k = s.key.load(Ordering::Acquire);
            if k == want {
                return i;
            }
            if k == 0 {
                match s
                    .key
                    .compare_exchange(0, want, Ordering::AcqRel, Ordering::Acquire)
                {
                    Ok(_) => {
                        let _ = s.label.set(label());
                        return i;
                    }
                    // Taken meanwhile: by this type, or go on looking.
                    Err(k) if k == want => return i,
                    Err(_) => {}
                }
            }
        }
        let _ = self.slots[last].label.set("other".into());
        last
    }

    /// One request of slot `slot` took `ns` nanoseconds; `answered`: it was
    /// answered then (not set aside to wait, and not one without an answer).
    pub fn record(&self, slot: usize, ns: u64, answered: bool) {
        let Some(s) = self.slots.get(slot) else {
            return;
        };
        if !answered {
            s.waited.fetch_add(1, Ordering::Relaxed);
        }
        s.sum_ns.fetch_add(ns, Ordering::Relaxed);
        // A locked operation only for a new maximum: recording stays cheap.
        if ns > s.max_ns.load(Ordering::Relaxed) {
            s.max_ns.fetch_max(ns, Ordering::Relaxed);
        }
        s.hist[bucket(ns)].fetch_add(1, Ordering::Relaxed);
    }

    /// Start all counts again (the types stay known).
    pub fn reset(&self) {
        for s in self.slots.iter() {
            s.waited.store(0, Ordering::Relaxed);
            s.sum_ns.store(0, Ordering::Relaxed);
            s.max_ns.store(0, Ordering::Relaxed);
            for b in s.hist.iter() {
                b.store(0, Ordering::Relaxed);
            }
        }
    }

    /// The table `monfs/requests` shows: one line per type seen since the
    /// last reset, busiest first; times in microseconds.
    pub fn text(&self) -> String {
        let mut rows: Vec<(u64, String)> = Vec::new();
        for s in self.slots.iter() {
            let counts: Vec<u64> = s.hist.iter().map(|b| b.load(Ordering::Relaxed)).collect();
            let total: u64 = counts.iter().sum();
            if total == 0 {
                continue;
            }
            let us = |ns: u64| ns as f64 / 1000.0;
            let mut line = String::new();
            let _ = writeln!(
                line,
                "{:<28} {:>10} {:>10} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>10.1}",
                s.label.get().map_or("?", |l| l.as_str()),
                total,
                s.waited.load(Ordering::Relaxed).min(total),
                us(s.sum_ns.load(Ordering::Relaxed) / total),
                us(s.quantile(&counts, total, 0.5)),
                us(s.quantile(&counts, total, 0.9)),
                us(s.quantile(&counts, total, 0.99)),
                us(s.max_ns.load(Ordering::Relaxed)),
            );
            rows.push((total, line));
        }
        rows.sort_by_key(|r| std::cmp::Reverse(r.0));
        let mut out = String::from(
            "# Requests served since the mount or since `> monfs/requests`, by type.\n\
             # Time (us): from taking a request to answering it, or to setting it aside\n\
             # (waited: it blocks until its file is ready, or takes no answer).\n",
        );
        let _ = writeln!(
            out,
            "# {:<26} {:>10} {:>10} {:>9} {:>9} {:>9} {:>9} {:>10}",
            "type", "count", "waited", "mean", "p50", "p90", "p99", "max"
        );
        for (_, l) in rows {
            out.push_str(&l);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_time_in_order() {
        let mut last = 0;
        for ns in (0..5000u64).chain([1 << 20, (1 << 20) + 1, 1 << 39, u64::MAX]) {
            let b = bucket(ns);
            assert!(b >= last || ns > 5000, "{ns}");
            assert!(b < BUCKETS);
            if b < BUCKETS - 1 {
                assert!(ns <= bucket_high(b), "{ns} above bucket {b}");
                assert!(b == 0 || ns > bucket_high(b - 1), "{ns} in bucket {b}");
            }
            last = b;
        }
        // 12.5% resolution: 1000 ns and 1100 ns land in different buckets.
        assert_ne!(bucket(1000), bucket(1130));
    }

    #[test]
    fn counts_times_and_quantiles_by_type() {
        let s = RequestStats::default();
        let a = s.slot(39, || "IOCTL:_IOWR(0x92,7,16)".into());
        let b = s.slot(15, || "READ".into());
        assert_eq!(s.slot(39, || unreachable!()), a);
        for i in 0..100 {
            s.record(a, 1000 + i * 10, true);
        }
        s.record(a, 50_000, false);
        s.record(b, 2000, true);
        let t = s.text();
        let lines: Vec<&str> = t.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines.len(), 2, "{t}");
        let f: Vec<&str> = lines[0].split_whitespace().collect();
        assert_eq!(f[0], "IOCTL:_IOWR(0x92,7,16)");
        assert_eq!(f[1], "101");
        assert_eq!(f[2], "1");
        let p50: f64 = f[4].parse().unwrap();
        assert!((1.4..=1.7).contains(&p50), "{t}");
        assert_eq!(f[7], "50.0");
        assert!(lines[1].starts_with("READ "));
        s.reset();
        assert!(s.text().lines().all(|l| l.starts_with('#')));
        // Known types stay known.
        assert_eq!(s.slot(15, || unreachable!()), b);
    }

    #[test]
    fn the_table_cannot_grow_past_its_size() {
        let s = RequestStats::default();
        let slots: Vec<usize> = (0..1000).map(|k| s.slot(k, || format!("t{k}"))).collect();
        assert_eq!(slots[999], SLOTS - 1);
        assert_eq!(slots[500], SLOTS - 1);
        s.record(slots[999], 5, true);
        s.record(slots[998], 5, true);
        assert!(s.text().contains("\nother "), "{}", s.text());
    }
}
