//! Serving FUSE over io_uring (see `uring.rs`): one thread per queue, pinned
//! to the queue's CPU, takes the requests the kernel puts in the queue's
//! entries and dispatches them as the request threads do those of
//! /dev/fuse; replies find their way back through [`Session::send`].

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{error, info, warn};

use crate::errno::Errno;

use super::state::Session;
use super::watchdog;

impl Session {
    /// Register the rings' entries and start one thread per queue, pinned to
    /// its CPU (called once INIT negotiated io_uring).
    pub(super) fn start_rings(self: &Arc<Self>) {
        let Some(rings) = self.uring.get() else {
            return;
        };
        info!(
            queues = rings.len(),
            "serving FUSE requests through io_uring"
        );
        for qid in 0..rings.len() {
            self.spawn_ring(qid as u16);
        }
    }

    /// Start a thread serving queue `qid` (also the watchdog's replacement
    /// for one that is stuck).
    pub(super) fn spawn_ring(self: &Arc<Self>, qid: u16) {
        let s = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name(format!("fuse-ring-{qid}"))
            .spawn(move || s.ring_loop(qid));
        if let Err(e) = spawned {
            error!("cannot start a FUSE ring thread: {e}");
        }
    }

    /// A watchdog slot for a ring thread of queue `qid`: not counted among
    /// the request threads the session waits for.
    fn ring_slot(&self, qid: u16) -> Arc<watchdog::Slot> {
        let slot = self.watch.enter(false);
        slot.ring.store(qid as u32, Ordering::SeqCst);
        slot.count_out();
        slot
    }

    /// Serve queue `qid` until the connection goes away.
    fn ring_loop(&self, qid: u16) {
        let Some(rings) = self.uring.get() else {
            return;
        };
        rings.enter(qid);
        let mut slot = self.ring_slot(qid);
        let mut body = Vec::with_capacity(super::uring::PAYLOAD_LEN + 256);
        loop {
            let done = match rings.wait(qid) {
                Ok(d) => d,
                Err(e) => {
                    warn!(qid, "io_uring_enter: {e}");
                    return;
                }
            };
            for (idx, res) in done {
                if res < 0 {
                    // ENOTCONN, ECANCELED: the connection is going away.
                    if !matches!(-res, libc::ENOTCONN | libc::ECANCELED) {
                        warn!(qid, "FUSE ring entry failed: {}", Errno(-res));
                    }
                    if self.destroyed.load(Ordering::SeqCst) || res == -libc::ENOTCONN {
                        return;
                    }
                    continue;
                }
                self.ring_request(qid, idx, &mut body, &slot);
            }
            if slot.abandoned() {
                // Replaced by the watchdog while stuck: carry on beside the
                // replacement (a thread that exits cancels its commands).
                self.watch.leave(&slot);
                slot = self.ring_slot(qid);
            }
            if self.destroyed.load(Ordering::SeqCst) {
                return;
            }
        }
    }

    /// Serve the request in entry `idx` of queue `qid`.
    fn ring_request(&self, qid: u16, idx: u32, body: &mut Vec<u8>, slot: &watchdog::Slot) {
        let Some(h) = self.uring.get().and_then(|r| r.request(qid, idx, body)) else {
            return;
        };
        let release = self.count_release(&h);
        self.serve(&h, body, slot, release);
    }
}
