//! A trace array's `error_log`: the commands that failed to parse (filters,
//! triggers, hist triggers, synthetic and dynamic events), each with a
//! caret under the failing part, as `tracing_log_err()` of
//! `kernel/trace/trace.c` keeps them.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Mutex;

use crate::base::sync::LockExt;
use crate::tracefs::filter::FilterError;

/// `error_log` keeps this many entries, dropping the oldest (measured: 20
/// failed writes left the last 8).
pub const ERROR_LOG_MAX: usize = 8;

const CMD_PREFIX: &str = "  Command: ";
/// `TRACING_LOG_LOC_MAX`: the location and `: error: ` fit in 127 bytes.
const LOC_MAX: usize = 128;

struct LogEntry {
    ts_ns: u64,
    loc: String,
    err: String,
    cmd: String,
    pos: usize,
}

/// The tracing instance's `error_log`: commands that failed to parse, with
/// a caret under the failing part.
///
/// Reading shows, per entry,
/// `[  sssss.uuuuuu] <loc>: error: <text>\n  Command: <cmd>\n<caret>^\n`;
/// opening the file with `O_TRUNC` for writing clears it
/// ([`ErrorLog::clear`]); other writes are accepted and ignored.
#[derive(Default)]
pub struct ErrorLog {
    entries: Mutex<VecDeque<LogEntry>>,
}

impl ErrorLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add an entry: `ts_ns` is the time since boot, `loc` names what
    /// failed (`event filter parse error`, `hist:sched:sched_switch`),
    /// `cmd` the command and `pos` the caret column within it.
    pub fn log(&self, ts_ns: u64, loc: &str, cmd: &str, err: &str, pos: usize) {
        let mut l = format!("{loc}: error: ");
        if l.len() >= LOC_MAX {
            let mut cut = LOC_MAX - 1;
            while !l.is_char_boundary(cut) {
                cut -= 1;
            }
            l.truncate(cut);
        }
        let mut e = self.entries.lock_ok();
        e.push_back(LogEntry {
            ts_ns,
            loc: l,
            err: err.to_string(),
            cmd: cmd.to_string(),
            pos: pos & 0xffff,
        });
        while e.len() > ERROR_LOG_MAX {
            e.pop_front();
        }
    }

    /// Log a filter that did not parse, as the kernel logs every event
    /// filter error (the `filter` file's as well as a trigger's `if`).
    pub fn log_filter(&self, ts_ns: u64, text: &str, err: &FilterError) {
        match err.detail {
            Some((_, msg)) => self.log(ts_ns, "event filter parse error", text, msg, err.log_pos),
            None => self.log(ts_ns, "event filter parse error", text, "Error", 0),
        }
    }

    /// The file's text.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for e in self.entries.lock_ok().iter() {
            let _ = write!(
                s,
                "[{:5}.{:06}] {}{}\n{CMD_PREFIX}{}\n{}^\n",
                e.ts_ns / 1_000_000_000,
                e.ts_ns % 1_000_000_000 / 1000,
                e.loc,
                e.err,
                e.cmd,
                " ".repeat(CMD_PREFIX.len() + e.pos)
            );
        }
        s
    }

    /// Forget every entry.
    pub fn clear(&self) {
        self.entries.lock_ok().clear();
    }
}
