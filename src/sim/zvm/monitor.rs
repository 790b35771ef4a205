//! *MONITOR: the side of the IUCV path that sends monitor data. For each
//! connection of the reader it runs a [`Generator`] and sends its messages
//! through the reader's [`MonitorPort`]: in real time (each message when its
//! simulated time comes) or in `flood` pace (keeping `flood_window` messages
//! outstanding), and applies the configured and injected faults (severing
//! the path, failing replies, piling messages up to the limit, spoiling
//! MCEs).

use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use super::Generator;
use crate::base::clock::Clock;
use crate::base::sync::{CondvarExt, LockExt};
use crate::config::zvm::{Pace, ZvmConfig};
use crate::monreader::records::{Message, MCE_EVENT};
use crate::monreader::{Connection, MonitorPort, Path, RecordTap, Spoil};

/// A fault to inject into the open connection (`monfs ctl zvm ...`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// *MONITOR severs the IUCV path: pending data is still readable but its
    /// replies fail (EIO); then reads give EIO and poll POLLERR.
    Sever,
    /// The next reply fails: that 0-byte read gives EIO.
    ReplyFail,
    /// Pile messages up until 255 are outstanding (EOVERFLOW follows).
    Overflow,
}

/// What *MONITOR keeps for one connection.
struct Session {
    id: u64,
    opened_at: u64,
    gen: Generator,
    generated: u64,
    sent: u64,
    overflow_pending: bool,
}

/// Whether the thread has something to look at.
#[derive(Default)]
struct Wake {
    changed: bool,
    stop: bool,
}

struct Inner {
    cfg: ZvmConfig,
    seed: u64,
    clock: Arc<dyn Clock>,
    port: Arc<dyn MonitorPort>,
    /// Where sent records are also reported.
    tap: OnceLock<Arc<dyn RecordTap>>,
    session: Mutex<Option<Session>>,
    wake: Mutex<Wake>,
    cond: Condvar,
}

/// The *MONITOR simulator, connected to a reader's port.
pub struct Monitor {
    inner: Arc<Inner>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Monitor {
    /// *MONITOR for `cfg`, seeded with `seed`, sending through `port`.
    pub fn new(
        cfg: ZvmConfig,
        seed: u64,
        clock: Arc<dyn Clock>,
        port: Arc<dyn MonitorPort>,
    ) -> Monitor {
        let inner = Arc::new(Inner {
            cfg,
            seed,
            clock,
            port,
            tap: OnceLock::new(),
            session: Mutex::new(None),
            wake: Mutex::new(Wake::default()),
            cond: Condvar::new(),
        });
        let weak = Arc::downgrade(&inner);
        inner.port.on_change(Arc::new(move || {
            if let Some(i) = weak.upgrade() {
                i.poke();
            }
        }));
        Monitor {
            inner,
            thread: Mutex::new(None),
        }
    }

    /// Also report every record sent to `tap` (once; later calls are
    /// ignored).
    pub fn set_tap(&self, tap: Arc<dyn RecordTap>) {
        let _ = self.inner.tap.set(tap);
    }

    /// Start the thread that sends messages when they are due.
    pub fn start(&self) {
        let mut t = self.thread.lock_ok();
        if t.is_some() {
            return;
        }
        self.inner.wake.lock_ok().stop = false;
        let inner = self.inner.clone();
        *t = Some(
            std::thread::Builder::new()
                .name("zvm-monitor".into())
                .spawn(move || inner.run())
                .expect("spawn zvm-monitor thread"),
        );
    }

    /// Stop it.
    pub fn stop(&self) {
        self.inner.wake.lock_ok().stop = true;
        self.inner.cond.notify_all();
        if let Some(t) = self.thread.lock_ok().take() {
            let _ = t.join();
        }
    }

    /// Inject a fault into the open connection. Returns false when the
    /// device is not open (nothing to inject into).
    pub fn inject(&self, fault: Fault) -> bool {
        let Some(conn) = self.inner.port.connection() else {
            return false;
        };
        match fault {
            Fault::Sever => self.inner.port.with_path(&mut |p| p.sever()),
            Fault::ReplyFail => self.inner.port.fail_next_reply(conn.id),
            Fault::Overflow => {
                let mut s = self.inner.session.lock_ok();
                self.inner.session_for(&mut s, &conn).overflow_pending = true;
            }
        }
        self.inner.poke();
        true
    }

    /// Send what is due now, by hand, as the thread would (tests without
    /// the thread).
    pub fn pump(&self) {
        self.inner.pump(self.inner.clock.sim_now());
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Inner {
    /// Something changed: the thread looks again.
    fn poke(&self) {
        self.wake.lock_ok().changed = true;
        self.cond.notify_all();
    }

    /// The thread: sends messages when due, sleeps until the next one (or
    /// until an open, a reply, a fault or stop wakes it).
    fn run(self: Arc<Self>) {
        loop {
            let now = self.clock.sim_now();
            let due = self.pump(now);
            let mut w = self.wake.lock_ok();
            if w.stop {
                return;
            }
            if !w.changed {
                w = match due {
                    Some(t) => {
                        let wait = Duration::from_nanos(t.saturating_sub(now).max(100_000));
                        self.cond.wait_timeout_ok(w, wait)
                    }
                    None => self.cond.wait_ok(w),
                };
            }
            w.changed = false;
        }
    }

    /// The session of connection `conn`, started afresh for a new one.
    fn session_for<'a>(&self, s: &'a mut Option<Session>, conn: &Connection) -> &'a mut Session {
        if s.as_ref().is_none_or(|s| s.id != conn.id) {
            let t0 = match self.cfg.pace {
                Pace::Realtime => conn.opened_at,
                Pace::Flood => 0,
            };
            *s = Some(Session {
                id: conn.id,
                opened_at: conn.opened_at,
                gen: Generator::new(&self.cfg, self.seed, self.clock.clone(), t0),
                generated: 0,
                sent: 0,
                overflow_pending: self.cfg.faults.overflow_after_messages == Some(0),
            });
        }
        s.as_mut().unwrap()
    }

    /// Send what is due at `now`, with the path held throughout (see
    /// [`crate::monreader::Path`]). Returns when to look again.
    fn pump(&self, now: u64) -> Option<u64> {
        let mut guard = self.session.lock_ok();
        let mut due = None;
        let mut open = false;
        self.port.with_path(&mut |p| {
            open = true;
            let conn = p.connection();
            let s = self.session_for(&mut guard, &conn);
            due = self.pump_path(s, p, now);
        });
        if !open {
            *guard = None;
        }
        due
    }

    fn pump_path(&self, s: &mut Session, p: &mut dyn Path, now: u64) -> Option<u64> {
        if p.connection().severed {
            return None;
        }
        let f = &self.cfg.faults;
        let mut due: Option<u64> = None;
        if let Some(ms) = f.sever_after_ms {
            let at = s.opened_at + ms * 1_000_000;
            if now >= at {
                p.sever();
                return None;
            }
            due = Some(at);
        }
        loop {
            if f.sever_after_messages.is_some_and(|n| s.sent >= n) {
                p.sever();
                return None;
            }
            if s.overflow_pending {
                s.overflow_pending = false;
                while p.connection().room {
                    let m = s.gen.extra_event(now);
                    if !self.send(s, p, &m) {
                        break;
                    }
                }
            }
            let conn = p.connection();
            let more = self.cfg.max_messages.is_none_or(|m| s.generated < m);
            if conn.severed || !more {
                break;
            }
            let ready = match self.cfg.pace {
                Pace::Realtime => s.gen.next_time() <= now,
                Pace::Flood => conn.queued < self.cfg.flood_window as usize && conn.can_send(),
            };
            if !ready {
                if self.cfg.pace == Pace::Realtime {
                    let t = s.gen.next_time();
                    due = Some(due.map_or(t, |d| d.min(t)));
                }
                break;
            }
            let m = s.gen.next_message();
            s.generated += 1;
            if self.send(s, p, &m) && f.overflow_after_messages == Some(s.sent) {
                s.overflow_pending = true;
            }
        }
        due
    }

    /// Send one message, every `bad_mce_every`th with a spoiled MCE.
    fn send(&self, s: &mut Session, p: &mut dyn Path, m: &Message) -> bool {
        let every = self.cfg.faults.bad_mce_every;
        let seq = s.sent;
        let spoil = (every > 0 && (seq + 1) % every == 0).then(|| {
            [
                Spoil::TypeZero,
                Spoil::DomainZero,
                Spoil::EndNotAfterStart,
                Spoil::StartBelowDcss,
            ][((seq + 1) / every % 4) as usize]
        });
        let ok = p.send(m, spoil);
        if ok {
            s.sent += 1;
            self.report(m);
        }
        ok
    }

    /// Report the records of message `m`, just sent, to the tap.
    fn report(&self, m: &Message) {
        let Some(tap) = self.tap.get().filter(|t| t.wanted()) else {
            return;
        };
        for set in &m.sets {
            for r in &set.records {
                let user = super::catalog::user_of(r.domain, r.number, &r.data);
                tap.record_sent(set.type_byte == MCE_EVENT, r, user.as_deref().unwrap_or(""));
            }
        }
    }
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    //! The reader and *MONITOR together: the driver's read semantics, the
    //! message limit, replies, faults and pacing.

    use super::*;
    use crate::base::clock::VirtualClock;
    use crate::base::errno::{Errno, SysResult};
    use crate::base::sync::LockExt;
    use crate::base::vfs::{Caller, FileNode, OpenFile, OpenFlags, POLL_READABLE};
    use crate::config::zvm::ZvmFaults;
    use crate::monreader::{MonReaderDev, PathConfig, Stats};

    const NB: OpenFlags = OpenFlags {
        flags: libc::O_RDONLY | libc::O_NONBLOCK,
    };

    /// A reader and the *MONITOR attached to it.
    struct Dev {
        reader: Arc<MonReaderDev>,
        mon: Monitor,
    }

    impl Dev {
        fn node(&self) -> Arc<dyn FileNode> {
            self.reader.node()
        }
        fn pump(&self) {
            self.mon.pump()
        }
        fn inject(&self, f: Fault) -> bool {
            self.mon.inject(f)
        }
        fn stats(&self) -> Stats {
            self.reader.stats()
        }
        fn start(&self) {
            self.mon.start()
        }
        fn stop(&self) {
            self.mon.stop()
        }
    }

    fn dev(cfg: ZvmConfig) -> Dev {
        let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new());
        let reader = Arc::new(MonReaderDev::new(PathConfig::from(&cfg), clock.clone()));
        let mon = Monitor::new(cfg, 11, clock, reader.clone());
        Dev { reader, mon }
    }

    fn quiet() -> ZvmConfig {
        ZvmConfig {
            event_rate: 0.0,
            sample_interval_ms: 86_400_000,
            ..ZvmConfig::default()
        }
    }

    /// Read one data set with reads of `size`; returns the read lengths.
    fn read_set(f: &Arc<dyn OpenFile>, size: u32) -> SysResult<Vec<usize>> {
        let mut lens = Vec::new();
        loop {
            let d = f.read(0, size)?;
            if d.is_empty() {
                return Ok(lens);
            }
            lens.push(d.len());
        }
    }

    #[test]
    fn one_opener_at_a_time() {
        let d = dev(quiet());
        let n = d.node();
        let a = n.open(NB, &Caller::default()).unwrap();
        assert_eq!(n.open(NB, &Caller::default()).err(), Some(Errno::EBUSY));
        a.release();
        let b = n.open(NB, &Caller::default()).unwrap();
        b.release();
        let d = dev(ZvmConfig {
            faults: ZvmFaults {
                connect_fail: true,
                ..ZvmFaults::default()
            },
            ..quiet()
        });
        assert_eq!(
            d.node().open(NB, &Caller::default()).err(),
            Some(Errno::EIO)
        );
    }

    #[test]
    fn reads_never_mix_mce_and_records_and_sets_end_with_zero() {
        let d = dev(quiet());
        let f = d.node().open(NB, &Caller::default()).unwrap();
        assert_eq!(f.poll(), 0);
        assert_eq!(f.read(0, 65536), Err(Errno::EAGAIN));
        d.pump();
        assert_eq!(f.poll(), POLL_READABLE);
        // The configuration message: two MCEs.
        let first = f.read(0, 65536).unwrap();
        assert_eq!(first.len(), 12);
        let len = u32::from_be_bytes(first[8..12].try_into().unwrap())
            - u32::from_be_bytes(first[4..8].try_into().unwrap())
            + 1;
        let recs = f.read(0, 65536).unwrap();
        assert_eq!(recs.len() as u32, len);
        // Byte-wise MCE reads stop at the MCE's end.
        let m2: Vec<u8> = (0..12).map(|_| f.read(0, 1).unwrap()[0]).collect();
        assert_eq!(m2[0], 0x40);
        assert_eq!(
            f.read(0, 0).unwrap(),
            Vec::<u8>::new(),
            "count 0 in the set"
        );
        let rest = f.read(0, 65536).unwrap();
        assert_eq!(rest.len(), 26, "one event profile record");
        assert_eq!(f.read(0, 65536).unwrap(), Vec::<u8>::new(), "delimiter");
        assert_eq!(f.read(0, 65536), Err(Errno::EAGAIN));
        assert_eq!(f.poll(), 0);
        // A partial MCE read, then a large read gets only the rest of the MCE.
        d.inject(Fault::Overflow);
        d.pump();
        assert_eq!(f.read(0, 5).unwrap().len(), 5);
        assert_eq!(f.read(0, 65536).unwrap().len(), 7);
    }

    #[test]
    fn eoverflow_one_read_after_the_limit_set_delimiter() {
        let d = dev(quiet());
        let f = d.node().open(NB, &Caller::default()).unwrap();
        d.pump();
        d.inject(Fault::Overflow);
        d.pump();
        assert_eq!(d.stats().messages, 255);
        // More cannot be sent while 255 are outstanding.
        d.inject(Fault::Overflow);
        d.pump();
        assert_eq!(d.stats().messages, 255);
        for i in 0..255 {
            assert!(read_set(&f, 65536).is_ok(), "set {i}");
        }
        assert_eq!(f.poll(), POLL_READABLE, "the flagged message still counts");
        assert_eq!(f.read(0, 65536), Err(Errno::EOVERFLOW));
        assert_eq!(f.read(0, 65536), Err(Errno::EAGAIN));
        assert_eq!(d.stats().overflows, 1);
        // The limit counts outstanding messages: after the replies, more fit.
        d.inject(Fault::Overflow);
        d.pump();
        assert_eq!(d.stats().messages, 510);
    }

    #[test]
    fn reply_failure_and_sever() {
        let d = dev(quiet());
        let f = d.node().open(NB, &Caller::default()).unwrap();
        d.pump();
        d.inject(Fault::ReplyFail);
        assert_eq!(f.read(0, 65536).unwrap().len(), 12);
        assert!(!f.read(0, 65536).unwrap().is_empty());
        assert_eq!(f.read(0, 65536).unwrap().len(), 12);
        assert!(!f.read(0, 65536).unwrap().is_empty());
        assert_eq!(
            f.read(0, 65536),
            Err(Errno::EIO),
            "the delimiter read fails"
        );
        assert_eq!(f.read(0, 65536), Err(Errno::EAGAIN), "the message is gone");
        // Sever with two messages pending, one half read.
        d.inject(Fault::Overflow);
        d.pump();
        assert_eq!(f.read(0, 65536).unwrap().len(), 12);
        d.inject(Fault::Sever);
        assert_eq!(f.poll(), libc::POLLERR as u32);
        assert!(
            !f.read(0, 65536).unwrap().is_empty(),
            "pending data stays readable"
        );
        assert_eq!(f.read(0, 65536), Err(Errno::EIO), "its reply fails");
        assert_eq!(read_set(&f, 65536), Err(Errno::EIO));
        let left = d.stats().messages - d.stats().replies;
        for _ in 0..left {
            assert_eq!(read_set(&f, 65536), Err(Errno::EIO));
        }
        // The pile-up's last message was the 255th: EOVERFLOW after it.
        assert_eq!(f.read(0, 65536), Err(Errno::EOVERFLOW));
        // Nothing pending: O_NONBLOCK still says EAGAIN, as the driver does.
        assert_eq!(f.read(0, 65536), Err(Errno::EAGAIN));
        f.release();
        let f = d
            .node()
            .open(
                OpenFlags {
                    flags: libc::O_RDONLY,
                },
                &Caller::default(),
            )
            .unwrap();
        d.inject(Fault::Sever);
        assert_eq!(
            f.read(0, 65536),
            Err(Errno::EIO),
            "blocking reader on a severed path"
        );
    }

    #[test]
    fn invalid_mce_ends_the_set_at_once() {
        let d = dev(ZvmConfig {
            faults: ZvmFaults {
                bad_mce_every: 1,
                ..ZvmFaults::default()
            },
            ..quiet()
        });
        let f = d.node().open(NB, &Caller::default()).unwrap();
        d.pump();
        for _ in 0..4 {
            d.inject(Fault::Overflow);
        }
        d.pump();
        for _ in 0..8 {
            assert_eq!(f.read(0, 65536).unwrap(), Vec::<u8>::new());
        }
    }

    #[test]
    fn configured_faults() {
        let d = dev(ZvmConfig {
            pace: Pace::Flood,
            flood_window: 1,
            faults: ZvmFaults {
                reply_fail_every: 2,
                sever_after_messages: Some(5),
                ..ZvmFaults::default()
            },
            ..quiet()
        });
        let f = d.node().open(NB, &Caller::default()).unwrap();
        let results: Vec<bool> = (0..5)
            .map(|_| {
                d.pump();
                read_set(&f, 65536).is_ok()
            })
            .collect();
        // Every 2nd reply fails; the 5th message arrives just before the sever.
        assert_eq!(results, [true, false, true, false, false]);
        assert_eq!(f.read(0, 100), Err(Errno::EAGAIN));
        assert_eq!(f.poll(), libc::POLLERR as u32);
    }

    #[test]
    fn flood_pace_keeps_the_window_and_stops_at_max() {
        let d = dev(ZvmConfig {
            pace: Pace::Flood,
            flood_window: 3,
            max_messages: Some(7),
            ..ZvmConfig::default()
        });
        let f = d.node().open(NB, &Caller::default()).unwrap();
        d.pump();
        assert_eq!(d.stats().messages, 3);
        let mut sets = 0;
        while read_set(&f, 65536).is_ok() {
            sets += 1;
            d.pump();
        }
        assert_eq!(sets, 7);
    }

    #[test]
    fn thread_delivers_in_real_time_and_wakes() {
        let d = dev(ZvmConfig {
            sample_interval_ms: 50,
            event_rate: 0.0,
            ..ZvmConfig::default()
        });
        d.start();
        let f = d.node().open(NB, &Caller::default()).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        f.set_waker(Arc::new(move || {
            let _ = tx.lock_ok().send(());
        }));
        rx.recv_timeout(Duration::from_secs(2)).expect("woken");
        let mut sets = 0;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while sets < 3 && std::time::Instant::now() < deadline {
            match read_set(&f, 65536) {
                Ok(_) => sets += 1,
                Err(e) => {
                    assert_eq!(e, Errno::EAGAIN);
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        assert_eq!(sets, 3);
        f.release();
        d.stop();
    }
}
