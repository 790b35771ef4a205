//! The saved task names and thread groups (`saved_cmdlines`,
//! `saved_tgids`) that trace lines and tools look pids up in, kept as
//! `kernel/trace/trace_sched_switch.c` keeps them (`trace_save_cmdline()`,
//! `trace_save_tgid()`, the `saved_cmdlines_size` rounding); their files
//! are in `trace.rs`.

use std::collections::{HashMap, VecDeque};

/// `saved_cmdlines` and `saved_tgids`: the comms and tgids of recent
/// tasks, at most `size` of them (the oldest goes first).
pub(crate) struct Cmdlines {
    pub(crate) size: usize,
    pub(crate) comms: HashMap<u32, Box<str>>,
    pub(crate) order: VecDeque<u32>,
    pub(crate) tgids: HashMap<u32, u32>,
}

impl Cmdlines {
    /// The kernel's default size, empty.
    pub(crate) fn new() -> Cmdlines {
        Cmdlines {
            size: cmdlines_rounded(SAVED_CMDLINES_DEFAULT),
            comms: HashMap::new(),
            order: VecDeque::new(),
            tgids: HashMap::new(),
        }
    }

    /// Remember `pid`'s comm, the oldest one going when `size` are kept.
    pub(crate) fn save(&mut self, pid: u32, comm: &str) {
        if pid == 0 || self.size == 0 {
            return;
        }
        match self.comms.get_mut(&pid) {
            Some(c) if &**c == comm => {}
            Some(c) => *c = comm.into(),
            None => {
                if self.order.len() >= self.size {
                    if let Some(old) = self.order.pop_front() {
                        self.comms.remove(&old);
                    }
                }
                self.order.push_back(pid);
                self.comms.insert(pid, comm.into());
            }
        }
    }

    /// Remember `pid`'s thread group (`record-tgid`), looked up once.
    pub(crate) fn save_tgid(&mut self, pid: u32) {
        if pid == 0 || self.tgids.contains_key(&pid) {
            return;
        }
        if self.tgids.len() >= SAVED_CMDLINES_MAX {
            self.tgids.clear();
        }
        let tgid = crate::base::procmem::tgid_of(pid).unwrap_or(pid);
        self.tgids.insert(pid, tgid);
    }
}

/// The kernel's default `saved_cmdlines_size` request.
const SAVED_CMDLINES_DEFAULT: usize = 128;

/// The `saved_cmdlines_size` a request of `n` gets. The kernel rounds the
/// buffer up to a power-of-two allocation (`struct saved_cmdlines_buffer`,
/// 131,096 bytes with its pid map, then 20 bytes per comm: 16 for the comm
/// and 4 for its pid) and uses all of it: 128 reads back as 6552 and 20,000
/// as 45,874 on 6.18.
pub(crate) fn cmdlines_rounded(n: usize) -> usize {
    const MAP: usize = 131_096;
    const PER: usize = 20;
    let alloc = (MAP + n * PER).next_power_of_two();
    (alloc - MAP) / PER
}

/// The largest `saved_cmdlines_size` the kernel takes (`PID_MAX_DEFAULT`).
pub(crate) const SAVED_CMDLINES_MAX: usize = 32768;
