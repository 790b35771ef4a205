//! The trace buffer: a bounded ring of binary records that overwrites the
//! oldest entries, and the text the `trace` and `trace_pipe` files make of it.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

use super::event::EventDef;

/// Usable bytes of a ring-buffer page (a 4 KiB sub-buffer minus its header).
pub const BUF_PAGE_SIZE: usize = 4080;
/// The kernel's default per-CPU buffer request (`trace_buf_size`), bytes.
pub const DEFAULT_BUF_BYTES: usize = 1_441_792;

/// One recorded event.
pub struct Entry {
    /// The event definition (for rendering).
    pub def: Arc<EventDef>,
    /// The raw entry: common header and fields.
    pub data: Box<[u8]>,
    /// CLOCK_MONOTONIC nanoseconds.
    pub ts_ns: u64,
    /// CPU that recorded it.
    pub cpu: u32,
    /// Task name.
    pub comm: Box<str>,
}

impl Entry {
    /// Bytes the entry takes in the ring: a 4-byte event header plus the
    /// data rounded up to 4, plus a length word for larger entries.
    pub fn cost(&self) -> usize {
        let d = self.data.len().div_ceil(4) * 4;
        if d <= 112 {
            4 + d
        } else {
            8 + d
        }
    }

    /// The trace line, newline included.
    pub fn line(&self, irq_info: bool) -> String {
        let mut s = String::with_capacity(128);
        let pid = i32::from_le_bytes(self.data[4..8].try_into().unwrap());
        let comm: &str = if pid == 0 { "<idle>" } else { &self.comm };
        let _ = write!(s, "{comm:>16}-{pid:<7} [{:03}] ", self.cpu);
        if irq_info {
            s.push_str(&flags(self.data[2], self.data[3]));
            s.push(' ');
        }
        let _ = write!(
            s,
            "{:5}.{:06}: {}:",
            self.ts_ns / 1_000_000_000,
            (self.ts_ns % 1_000_000_000) / 1000,
            self.def.name
        );
        self.def.render_line(&self.data, &mut s);
        s.push('\n');
        s
    }
}

/// The five flag columns from `common_flags` and `common_preempt_count`.
fn flags(f: u8, pc: u8) -> String {
    const IRQS_OFF: u8 = 0x01;
    const NEED_RESCHED: u8 = 0x04;
    const HARDIRQ: u8 = 0x08;
    const SOFTIRQ: u8 = 0x10;
    const PREEMPT_RESCHED: u8 = 0x20;
    const NMI: u8 = 0x40;
    const BH_OFF: u8 = 0x80;
    let irq = match (f & IRQS_OFF != 0, f & BH_OFF != 0) {
        (true, true) => 'D',
        (true, false) => 'd',
        (false, true) => 'b',
        _ => '.',
    };
    let resched = match (f & NEED_RESCHED != 0, f & PREEMPT_RESCHED != 0) {
        (true, true) => 'N',
        (true, false) => 'n',
        (false, true) => 'p',
        _ => '.',
    };
    let ctx = match (f & NMI != 0, f & HARDIRQ != 0, f & SOFTIRQ != 0) {
        (true, true, _) => 'Z',
        (true, false, _) => 'z',
        (false, true, true) => 'H',
        (false, true, false) => 'h',
        (false, false, true) => 's',
        _ => '.',
    };
    let hex = |n: u8| {
        if n == 0 {
            '.'
        } else {
            char::from_digit(n as u32, 16).unwrap()
        }
    };
    format!("{irq}{resched}{ctx}{}{}", hex(pc & 0xf), hex(pc >> 4))
}

/// The ring.
pub struct Ring {
    entries: VecDeque<Entry>,
    bytes: usize,
    capacity: usize,
    /// Entries lost to overwriting since the last clear.
    pub overrun: u64,
    /// Entries overwritten before a consuming reader saw them, not yet
    /// reported by `trace_pipe`.
    pub lost_unreported: u64,
    /// Entries refused because the ring was full and `overwrite` was off.
    pub overrun_dropped: u64,
    /// Timestamp of the newest entry; later entries never go below it.
    pub last_ts_ns: u64,
}

impl Ring {
    /// A ring holding `capacity` bytes.
    pub fn new(capacity: usize) -> Ring {
        Ring {
            entries: VecDeque::new(),
            bytes: 0,
            capacity,
            overrun: 0,
            lost_unreported: 0,
            overrun_dropped: 0,
            last_ts_ns: 0,
        }
    }

    /// Whether appending `e` would overwrite older entries.
    pub fn would_overwrite(&self, e: &Entry) -> bool {
        self.bytes + e.cost() > self.capacity
    }

    /// Change the capacity, dropping the oldest entries that no longer fit.
    pub fn resize(&mut self, capacity: usize) {
        self.capacity = capacity;
        self.trim(0);
    }

    fn trim(&mut self, extra: usize) {
        while self.bytes + extra > self.capacity {
            let Some(old) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= old.cost();
            self.overrun += 1;
            self.lost_unreported += 1;
        }
    }

    /// Append, overwriting the oldest entries when full. An entry larger than
    /// the whole ring is dropped.
    pub fn push(&mut self, e: Entry) {
        let c = e.cost();
        if c > self.capacity {
            return;
        }
        self.trim(c);
        self.bytes += c;
        self.entries.push_back(e);
    }

    /// Remove the oldest entry (consuming read).
    pub fn pop(&mut self) -> Option<Entry> {
        let e = self.entries.pop_front()?;
        self.bytes -= e.cost();
        Some(e)
    }

    /// Put an entry back at the front (a consuming read that did not fit).
    pub fn unpop(&mut self, e: Entry) {
        self.bytes += e.cost();
        self.entries.push_front(e);
    }

    /// Entries in the buffer.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the ring is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Iterate oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// Drop everything and reset the counters (`echo > trace`).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
        self.overrun = 0;
        self.lost_unreported = 0;
    }
}

/// The `trace` header of the nop tracer.
pub fn header(in_buffer: usize, written: u64, cpus: usize, irq_info: bool) -> String {
    let mut s = String::from("# tracer: nop\n#\n");
    let _ = writeln!(
        s,
        "# entries-in-buffer/entries-written: {in_buffer}/{written}   #P:{cpus}"
    );
    s.push_str("#\n");
    if irq_info {
        s.push_str(concat!(
            "#                                _-----=> irqs-off/BH-disabled\n",
            "#                               / _----=> need-resched\n",
            "#                              | / _---=> hardirq/softirq\n",
            "#                              || / _--=> preempt-depth\n",
            "#                              ||| / _-=> migrate-disable\n",
            "#                              |||| /     delay\n",
        ));
        s.push_str("#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n");
        s.push_str("#              | |         |   |||||     |         |\n");
    } else {
        s.push_str("#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n");
        s.push_str("#              | |         |         |         |\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tracefs::event::{EventDef, FieldSpec, FieldValue};

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
                &[f("__data_loc char[]", "filename"), f("pid_t", "pid"), f("pid_t", "old_pid")],
                Some("\"filename=%s pid=%d old_pid=%d\", __get_str(filename), REC->pid, REC->old_pid"),
            )
            .unwrap(),
        )
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
        let e = Entry {
            def,
            data: data.into(),
            ts_ns: 896_850_062_345,
            cpu: 1,
            comm: "true".into(),
        };
        assert_eq!(
            e.line(true),
            "            true-12241   [001] .....   896.850062: sched_process_exec: filename=/bin/true pid=12241 old_pid=12241\n"
        );
        assert_eq!(flags(0x01 | 0x08, 2), "d.h2.");
        assert_eq!(flags(0x01 | 0x80 | 0x04 | 0x20 | 0x10, 0x12), "DNs21");
    }

    #[test]
    fn ring_overwrites_oldest() {
        let def = exec_def();
        let mk = |i: i64| Entry {
            def: def.clone(),
            data: def
                .encode(
                    1,
                    &[FieldValue::Str("x"), FieldValue::Int(i), FieldValue::Int(0)],
                )
                .into(),
            ts_ns: i as u64,
            cpu: 0,
            comm: "c".into(),
        };
        let cost = mk(0).cost();
        let mut r = Ring::new(cost * 3);
        for i in 0..5 {
            r.push(mk(i));
        }
        assert_eq!(r.len(), 3);
        assert_eq!(r.overrun, 2);
        let first: Vec<u64> = r.iter().map(|e| e.ts_ns).collect();
        assert_eq!(first, vec![2, 3, 4]);
        r.resize(cost);
        assert_eq!(r.len(), 1);
        assert_eq!(r.iter().next().unwrap().ts_ns, 4);
        r.clear();
        assert!(r.is_empty());
        assert_eq!(r.overrun, 0);
    }
}
