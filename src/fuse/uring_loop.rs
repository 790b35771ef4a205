//! Serving FUSE over io_uring (see `uring.rs`): one thread per queue, pinned
//! to the queue's CPU, takes the requests the kernel puts in the queue's
//! entries and dispatches them as the request threads do those of
//! /dev/fuse; replies find their way back through [`Session::send`].
//!
//! Also which transport a session ended up with ([`Session::transport`]):
//! /dev/fuse unless INIT negotiated io_uring and every queue's first
//! registration was taken. The kernel holds requests back until every queue
//! has an entry, and turns io_uring off for the connection when it refuses
//! a registration, so requests then come through /dev/fuse.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};

use crate::base::errno::Errno;
use crate::base::sync::{CondvarExt, LockExt};

use super::state::{Session, Transport};
use super::watchdog;

impl Session {
    /// Which way requests come: /dev/fuse or io_uring, once known; waits up
    /// to `timeout` for INIT and the rings' registration to settle it (both
    /// follow the mount at once), else [`Transport::Pending`].
    pub fn transport(&self, timeout: Duration) -> Transport {
        let deadline = Instant::now() + timeout;
        let (lock, cv) = &self.transport;
        let mut t = lock.lock_ok();
        while t.now == Transport::Pending {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            t = cv.wait_timeout_ok(t, left);
        }
        t.now.clone()
    }

    /// The transport is known (the first word stays).
    pub(super) fn settle_transport(&self, to: Transport) {
        let (lock, cv) = &self.transport;
        let mut t = lock.lock_ok();
        if t.now == Transport::Pending {
            if let Transport::DevFuse(Some(why)) = &to {
                info!("FUSE over io_uring not used: {why}; serving requests through /dev/fuse");
            }
            t.now = to;
            cv.notify_all();
        }
    }

    /// Queue `qid`'s first registration was submitted: `refused` if the
    /// kernel refused it (or it could not be submitted). io_uring serves
    /// once every queue's was taken.
    fn ring_registered(&self, qid: u16, refused: Option<String>) {
        if let Some(why) = refused {
            return self.settle_transport(Transport::DevFuse(Some(why)));
        }
        let all = {
            let mut t = self.transport.0.lock_ok();
            if let Some(r) = t.registered.get_mut(qid as usize) {
                *r = true;
            }
            t.registered.iter().all(|&r| r)
        };
        if all {
            self.settle_transport(Transport::IoUring);
        }
    }

    /// Register the rings' entries and start one thread per queue, pinned to
    /// its CPU (called once INIT negotiated io_uring).
    pub(super) fn start_rings(self: &Arc<Self>) {
        let Some(rings) = self.uring.get() else {
            return;
        };
        self.transport.0.lock_ok().registered = vec![false; rings.len()];
        // Debug: the mount's own message says which transport serves.
        debug!(
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
            self.ring_registered(qid, Some(format!("cannot start a ring thread: {e}")));
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
        let slot = self.ring_slot(qid);
        let mut body = Vec::with_capacity(super::uring::PAYLOAD_LEN + 256);
        // The first turn only submits (the queue's registrations, which the
        // kernel takes or refuses as they are submitted), to learn which.
        let mut first = true;
        loop {
            let done = match rings.wait(qid, !first) {
                Ok(d) => d,
                Err(e) => {
                    warn!(qid, "io_uring_enter: {e}");
                    if first {
                        self.ring_registered(qid, Some(format!("io_uring_enter: {e}")));
                    }
                    return;
                }
            };
            if std::mem::take(&mut first) {
                let refused = done.iter().find(|(_, res)| *res < 0).map(|(_, res)| {
                    format!("the kernel refused the ring entries: {}", Errno(-res))
                });
                self.ring_registered(qid, refused);
            }
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
                // Replaced by the watchdog while stuck: the replacement
                // serves the queue. This thread stays (one that exits
                // cancels its commands, and the kernel completes those it
                // submitted through it) but never waits for completions
                // again; its answers woke the replacement.
                self.watch.leave(&slot);
                while !self.destroyed.load(Ordering::SeqCst) {
                    std::thread::park_timeout(Duration::from_secs(1));
                }
                return;
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
