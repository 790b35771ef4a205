//! An external device's peer's input: the queue its writer thread feeds
//! it from, bounded in bytes, and the peer's progress through it, by which
//! it is judged (it depends on nothing of the simulator, so the device
//! tree can hold it).

use std::io::Write;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::error::PeerError;
use crate::base::sync::LockExt;

/// Bytes of lines that may wait for the peer to read them (counted in the
/// memory an external device is charged, `sim::usb::memory`).
pub(crate) const OUTBOX_BYTES: usize = 1 << 20;
/// What a queued line costs beyond its text: its `String` and its slot.
pub(crate) const LINE_COST: usize = 64;
/// A peer that takes none of its waiting lines for this long does not read.
pub(crate) const STALL: Duration = Duration::from_secs(10);

/// A peer's input: the queue its writer thread feeds it from, bounded in
/// bytes, and what the peer has taken of it.
#[derive(Clone)]
pub(crate) struct Input {
    tx: Sender<String>,
    pub(super) flow: Arc<Flow>,
}

/// The bytes waiting in a peer's input and the peer's progress through it.
#[derive(Default)]
pub(super) struct Flow {
    /// Bytes queued and not yet written to the peer ([`LINE_COST`] a line
    /// included).
    queued: AtomicUsize,
    /// Bytes written to the peer so far.
    taken: AtomicU64,
    /// The count of bytes taken when it last changed (or the queue was
    /// last found empty), and when.
    seen: Mutex<Option<(u64, Instant)>>,
}

impl Input {
    /// A queue and the receiving end its writer thread drains.
    pub(super) fn new() -> (Input, Receiver<String>) {
        let (tx, rx) = unbounded();
        let flow = Arc::new(Flow::default());
        (Input { tx, flow }, rx)
    }

    /// Queue a line the peer must get. Err when the peer does not read:
    /// lines have waited for [`STALL`] with nothing taken, or more than
    /// [`OUTBOX_BYTES`] wait.
    pub(crate) fn send(&self, line: String) -> Result<(), PeerError> {
        match self.queue(line, OUTBOX_BYTES)? {
            true => Ok(()),
            false => Err(PeerError::Behind(self.flow.queued.load(Ordering::Acquire))),
        }
    }

    /// Queue a line the peer can do without (an isochronous frame) if no
    /// more than `backlog` bytes wait before it: Ok(false) when it is left
    /// out, Err as for [`Input::send`] when the peer does not read.
    pub(crate) fn offer(&self, line: String, backlog: usize) -> Result<bool, PeerError> {
        self.queue(line, backlog.min(OUTBOX_BYTES))
    }

    /// Queue `line` if no more than `backlog` bytes wait before it
    /// (Ok(false) if more do); Err if the peer does not read or its input
    /// is closed.
    fn queue(&self, line: String, backlog: usize) -> Result<bool, PeerError> {
        let f = &self.flow;
        let waiting = f.queued.load(Ordering::Acquire);
        let taken = f.taken.load(Ordering::Acquire);
        let now = Instant::now();
        {
            let mut seen = f.seen.lock_ok();
            match *seen {
                // The peer took something, or nothing was waiting: it
                // is judged from now on.
                Some((t, _)) if t == taken && waiting > 0 => {}
                _ => *seen = Some((taken, now)),
            }
            if let Some((_, since)) = *seen {
                let idle = now.duration_since(since);
                if waiting > 0 && idle >= STALL {
                    return Err(PeerError::NotReading {
                        bytes: waiting,
                        secs: idle.as_secs(),
                    });
                }
            }
        }
        let cost = line.len() + LINE_COST;
        if waiting + cost > backlog {
            return Ok(false);
        }
        f.queued.fetch_add(cost, Ordering::AcqRel);
        match self.tx.send(line) {
            Ok(()) => Ok(true),
            Err(_) => {
                f.queued.fetch_sub(cost, Ordering::AcqRel);
                Err(PeerError::ClosedInput)
            }
        }
    }
}

/// The writer thread: feed the peer's lines until the queue closes,
/// counting the bytes the peer takes as it takes them.
pub(super) fn write_peer(mut w: impl Write, rx: Receiver<String>, flow: Arc<Flow>) {
    for line in rx {
        let mut rest = line.as_bytes();
        let ok = loop {
            if rest.is_empty() {
                break w.flush().is_ok();
            }
            match w.write(rest) {
                Ok(0) => break false,
                Ok(n) => {
                    rest = &rest[n..];
                    flow.taken.fetch_add(n as u64, Ordering::AcqRel);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break false,
            }
        };
        flow.queued
            .fetch_sub(line.len() + LINE_COST, Ordering::AcqRel);
        if !ok {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input is bounded in bytes: a line the peer can do without is
    /// left out past its backlog, one it must get is refused past
    /// [`OUTBOX_BYTES`]; what the writer takes makes room again.
    #[test]
    fn the_input_is_bounded_in_bytes() {
        let (input, rx) = Input::new();
        let line = "x".repeat(1000 - LINE_COST);
        let mut sent = 0;
        while input.offer(line.clone(), 64 << 10).unwrap() {
            sent += 1;
        }
        assert_eq!(sent, 65, "as many 1000-byte lines as 64 KiB holds");
        while input.send(line.clone()).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, OUTBOX_BYTES / 1000);
        assert!(matches!(
            input.send(line.clone()),
            Err(PeerError::Behind(n)) if n == sent * 1000
        ));
        // The writer takes the lines: the queue empties, and there is
        // room again.
        let flow = input.flow.clone();
        let writer = std::thread::spawn(move || write_peer(std::io::sink(), rx, flow));
        while input.flow.queued.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            input.flow.taken.load(Ordering::Acquire),
            (sent * (1000 - LINE_COST)) as u64
        );
        assert!(input.offer(line.clone(), 64 << 10).unwrap());
        assert!(input.send(line).is_ok());
        drop(input);
        writer.join().unwrap();
    }
}
