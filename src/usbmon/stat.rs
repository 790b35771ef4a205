//! `Ns`: per-bus statistics, like the kernel's `mon_stat.c`. The text is made
//! once at open time and then read by offset.

use std::sync::Arc;

use super::UsbMon;
use crate::base::errno::SysResult;
use crate::base::vfs::{Caller, FileNode, OpenFile, OpenFlags, SnapshotFile};

/// The `Ns` line for a bus.
pub fn stat_line(nreaders: usize, events: u32, text_lost: u32) -> String {
    format!("nreaders {nreaders} events {events} text_lost {text_lost}\n")
}

/// The `Ns` file.
pub struct StatNode {
    inner: SnapshotFile,
}

impl StatNode {
    /// `Ns` for bus `bus` of `mon`.
    pub fn new(mon: Arc<UsbMon>, bus: u16) -> Self {
        StatNode {
            inner: SnapshotFile::new(move || {
                let b = mon.bus(bus).expect("bus exists");
                stat_line(b.nreaders(), b.events(), b.text_lost()).into_bytes()
            }),
        }
    }
}

impl FileNode for StatNode {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        self.inner.open(flags, caller)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn format() {
        assert_eq!(
            super::stat_line(2, 1234, 5),
            "nreaders 2 events 1234 text_lost 5\n"
        );
    }
}
