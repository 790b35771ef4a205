//! `dev/monreader`: the s390 z/VM monitor reader (`drivers/s390/char/monreader.c`),
//! fed by the *MONITOR simulator in [`crate::sim::zvm`].
//!
//! What the driver does, and so what this file does:
//! * One opener at a time (EBUSY). Opening connects to *MONITOR; IUCV messages
//!   accumulate from then on, at most [`MON_MSGLIM`] outstanding.
//! * A message names a monitor control area (MCA) in the DCSS: an array of
//!   12-byte MCEs, each describing a record set. A read returns bytes of the
//!   current MCE (never more than what is left of its 12 bytes) or of its
//!   record set (never more than what is left of the set), never both.
//! * When the last set of a message is done, or an MCE fails the validity
//!   check, the next read replies to the message and returns 0: the data-set
//!   delimiter. A failed reply makes that read EIO instead.
//! * The message that brought the outstanding count to 255 is flagged; once it
//!   was read and replied to, the next read returns EOVERFLOW and skips it.
//! * With nothing pending: EAGAIN for O_NONBLOCK opens, otherwise block (EAGAIN
//!   to the frontend, which parks the request until the waker fires); on a
//!   severed path, EIO. poll: POLLERR when severed, POLLIN|POLLRDNORM when a
//!   message is pending.

pub mod dcss;
pub mod dump;

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::clock::Clock;
use crate::errno::{Errno, SysResult};
use crate::sim::zvm::{Generator, Message, Pace, ZvmConfig};
use crate::sync::{CondvarExt, LockExt};
use crate::vfs::{Caller, FileNode, NodeKind, OpenFile, OpenFlags, Tree, Waker, POLL_READABLE};
use dcss::{Dcss, Spoil};

/// Messages that can be outstanding (`MON_MSGLIM`).
pub const MON_MSGLIM: usize = 255;
/// Path of the device in the mount.
pub const DEVICE_PATH: &str = "dev/monreader";

/// A fault to inject into the open connection.
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

/// Counters, for logs and a future control interface.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Successful opens.
    pub opens: u64,
    /// Messages sent to the reader.
    pub messages: u64,
    /// Messages *MONITOR could not send (limit reached, DCSS full, severed).
    pub lost: u64,
    /// Replies (0-byte reads and failed replies).
    pub replies: u64,
    /// EOVERFLOW returned.
    pub overflows: u64,
}

/// One message as the driver keeps it (`struct mon_msg`).
struct Msg {
    mca_start: u32,
    mca_end: u32,
    /// Current DCSS address; 0 = start at the current MCE.
    pos: u32,
    mca_offset: u32,
    msglim_reached: bool,
    replied_msglim: bool,
}

/// The state of one open (`struct mon_private` plus the *MONITOR side).
struct Conn {
    id: u64,
    nonblock: bool,
    opened_at: u64,
    dcss: Dcss,
    msgs: VecDeque<Msg>,
    msglim_count: usize,
    severed: bool,
    waker: Option<Waker>,
    gen: Generator,
    generated: u64,
    sent: u64,
    replies: u64,
    reply_fail_every: u64,
    fail_next_reply: bool,
    overflow_pending: bool,
}

struct State {
    stop: bool,
    conn: Option<Conn>,
    next_id: u64,
    stats: Stats,
}

struct Shared {
    cfg: ZvmConfig,
    seed: u64,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
    cond: Condvar,
}

/// The monreader facility.
pub struct MonReaderDev {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl MonReaderDev {
    /// Build the facility and add `dev/monreader` (mode 0600) to `tree`.
    pub fn install(
        tree: &Arc<Tree>,
        cfg: &crate::config::Config,
        clock: Arc<dyn Clock>,
    ) -> Arc<MonReaderDev> {
        let seed = cfg.seed.unwrap_or_else(|| clock.now().wall_ns);
        let dev = Arc::new(MonReaderDev::new(cfg.zvm.clone(), seed, clock));
        tree.add(
            DEVICE_PATH,
            NodeKind::File(Arc::new(MonReaderNode {
                shared: dev.shared.clone(),
            })),
            0o600,
        );
        dev
    }

    /// The facility without a tree (tests).
    pub fn new(cfg: ZvmConfig, seed: u64, clock: Arc<dyn Clock>) -> MonReaderDev {
        MonReaderDev {
            shared: Arc::new(Shared {
                cfg,
                seed,
                clock,
                state: Mutex::new(State {
                    stop: false,
                    conn: None,
                    next_id: 1,
                    stats: Stats::default(),
                }),
                cond: Condvar::new(),
            }),
            thread: Mutex::new(None),
        }
    }

    /// The file node (for tests that do not need a tree).
    pub fn node(&self) -> Arc<dyn FileNode> {
        Arc::new(MonReaderNode {
            shared: self.shared.clone(),
        })
    }

    /// Start the z/VM simulator thread.
    pub fn start(&self) {
        let mut t = self.thread.lock_ok();
        if t.is_some() {
            return;
        }
        self.shared.state.lock_ok().stop = false;
        let shared = self.shared.clone();
        *t = Some(
            std::thread::Builder::new()
                .name("zvm-monitor".into())
                .spawn(move || shared.run())
                .expect("spawn zvm-monitor thread"),
        );
    }

    /// Stop it.
    pub fn stop(&self) {
        self.shared.state.lock_ok().stop = true;
        self.shared.cond.notify_all();
        if let Some(t) = self.thread.lock_ok().take() {
            let _ = t.join();
        }
    }

    /// Inject a fault into the open connection. Returns false when the device
    /// is not open (nothing to inject into).
    pub fn inject(&self, fault: Fault) -> bool {
        let waker = {
            let mut st = self.shared.state.lock_ok();
            let Some(c) = st.conn.as_mut() else {
                return false;
            };
            match fault {
                Fault::Sever => c.sever(),
                Fault::ReplyFail => {
                    c.fail_next_reply = true;
                    None
                }
                Fault::Overflow => {
                    c.overflow_pending = true;
                    None
                }
            }
        };
        self.shared.cond.notify_all();
        if let Some(w) = waker {
            w();
        }
        true
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.shared.state.lock_ok().stats
    }

    /// Run the simulator once by hand, as the thread would now (tests
    /// without the thread).
    pub fn pump(&self) {
        let now = self.shared.clock.sim_now();
        let mut st = self.shared.state.lock_ok();
        let waker = self.shared.pump(&mut st, now).0;
        drop(st);
        if let Some(w) = waker {
            w();
        }
    }
}

impl Drop for MonReaderDev {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_ok()
    }

    /// The simulator thread: sends messages when due, sleeps until the next
    /// one (or until an open, a reply, a fault or stop wakes it).
    fn run(self: Arc<Self>) {
        let mut st = self.lock();
        loop {
            if st.stop {
                return;
            }
            let now = self.clock.sim_now();
            let (waker, due) = self.pump(&mut st, now);
            if let Some(w) = waker {
                drop(st);
                w();
                st = self.lock();
                continue;
            }
            st = match due {
                Some(t) => {
                    let wait = Duration::from_nanos(t.saturating_sub(now).max(100_000));
                    self.cond.wait_timeout_ok(st, wait)
                }
                None => self.cond.wait_ok(st),
            };
        }
    }

    /// Send what is due at `now`. Returns the waker to call (something became
    /// readable) and when to look again.
    fn pump(&self, st: &mut State, now: u64) -> (Option<Waker>, Option<u64>) {
        let State { conn, stats, .. } = st;
        let Some(c) = conn.as_mut() else {
            return (None, None);
        };
        let f = &self.cfg.faults;
        let mut woke = false;
        let mut due: Option<u64> = None;
        if c.severed {
            return (None, None);
        }
        if let Some(ms) = f.sever_after_ms {
            let at = c.opened_at + ms * 1_000_000;
            if now >= at {
                return (c.sever(), None);
            }
            due = Some(at);
        }
        let more = |c: &Conn| self.cfg.max_messages.map_or(true, |m| c.generated < m);
        loop {
            if f.sever_after_messages.is_some_and(|n| c.sent >= n) {
                return (c.sever(), None);
            }
            if c.overflow_pending {
                c.overflow_pending = false;
                while c.msglim_count < MON_MSGLIM && c.msgs.len() < MON_MSGLIM {
                    let m = c.gen.extra_event(now);
                    if !self.send(c, stats, m) {
                        break;
                    }
                    woke = true;
                }
            }
            if c.severed || !more(c) {
                break;
            }
            let ready = match self.cfg.pace {
                Pace::Realtime => c.gen.next_time() <= now,
                Pace::Flood => c.msgs.len() < self.cfg.flood_window as usize && c.can_send(),
            };
            if !ready {
                if self.cfg.pace == Pace::Realtime {
                    let t = c.gen.next_time();
                    due = Some(due.map_or(t, |d| d.min(t)));
                }
                break;
            }
            let m = c.gen.next_message();
            c.generated += 1;
            if self.send(c, stats, m) {
                woke = true;
                if f.overflow_after_messages == Some(c.sent) {
                    c.overflow_pending = true;
                }
            }
        }
        let waker = if woke { c.waker.clone() } else { None };
        (waker, due)
    }

    /// *MONITOR sends one message: store it in the DCSS and queue it. False
    /// when it cannot (limit reached or no room in the DCSS: the data is lost).
    fn send(&self, c: &mut Conn, stats: &mut Stats, m: Message) -> bool {
        if !c.can_send() {
            stats.lost += 1;
            return false;
        }
        let seq = c.sent;
        let every = self.cfg.faults.bad_mce_every;
        let spoil = (every > 0 && (seq + 1) % every == 0).then(|| {
            [
                Spoil::TypeZero,
                Spoil::DomainZero,
                Spoil::EndNotAfterStart,
                Spoil::StartBelowDcss,
            ][((seq + 1) / every % 4) as usize]
        });
        let Some((mca_start, mca_end)) = c.dcss.store(seq, &m.sets, spoil) else {
            stats.lost += 1;
            return false;
        };
        c.sent += 1;
        stats.messages += 1;
        c.msglim_count += 1;
        c.msgs.push_back(Msg {
            mca_start,
            mca_end,
            pos: 0,
            mca_offset: 0,
            msglim_reached: c.msglim_count == MON_MSGLIM,
            replied_msglim: false,
        });
        true
    }
}

impl Conn {
    fn can_send(&self) -> bool {
        !self.severed && self.msglim_count < MON_MSGLIM && self.msgs.len() < MON_MSGLIM
    }

    /// The path is severed; returns the waker to call.
    fn sever(&mut self) -> Option<Waker> {
        self.severed = true;
        self.waker.clone()
    }

    fn u32_at(&self, addr: u32) -> Option<u32> {
        self.dcss
            .bytes(addr, 4)
            .map(|b| u32::from_be_bytes(b.try_into().unwrap()))
    }

    /// The current MCE's record start and end, if the MCE passes the driver's
    /// validity check (`mon_check_mca`).
    fn check_mca(&self, m: &Msg) -> Option<(u32, u32)> {
        let (ds, de) = (self.dcss.start(), self.dcss.end());
        let size = m.mca_end.wrapping_sub(m.mca_start).wrapping_add(1);
        if size % 12 != 0 || m.mca_end <= m.mca_start || m.mca_end > de || m.mca_start < ds {
            return None;
        }
        let mce = m.mca_start.checked_add(m.mca_offset)?;
        let b = self.dcss.bytes(mce, 4)?;
        let (rs, re) = (self.u32_at(mce + 4)?, self.u32_at(mce + 8)?);
        if re <= rs || rs < ds || re > de || b[0] == 0 || (b[1] == 0 && b[2] == 0) {
            return None;
        }
        Some((rs, re))
    }

    /// One read() (`mon_read`).
    fn read(&mut self, count: usize) -> SysResult<Vec<u8>> {
        let Some(m) = self.msgs.front() else {
            // Nothing pending: O_NONBLOCK gives EAGAIN even when severed; a
            // blocking reader waits (EAGAIN to the frontend) unless severed.
            if self.severed && !self.nonblock {
                return Err(Errno::EIO);
            }
            return Err(Errno::EAGAIN);
        };
        if m.replied_msglim {
            self.msgs.pop_front();
            return Err(Errno::EOVERFLOW);
        }
        let (mca_start, mca_end, mca_offset) = (m.mca_start, m.mca_end, m.mca_offset);
        let mut pos = if m.pos == 0 {
            mca_start.wrapping_add(mca_offset)
        } else {
            m.pos
        };
        let checked = self.check_mca(m);
        self.msgs.front_mut().unwrap().pos = pos;
        let Some((rec_start, rec_end)) = checked else {
            return self.reply();
        };
        let mce = mca_start + mca_offset;
        if pos >= mce && pos < mce + 12 {
            // Inside the MCE: at most the rest of its 12 bytes.
            let n = count.min((mce + 12 - pos) as usize);
            let out = self.dcss.bytes(pos, n).ok_or(Errno::EFAULT)?.to_vec();
            pos += n as u32;
            if pos == mce + 12 {
                pos = rec_start;
            }
            self.msgs.front_mut().unwrap().pos = pos;
            Ok(out)
        } else if pos <= rec_end {
            // Inside the record set: at most the rest of the set.
            let n = count.min((rec_end - pos) as usize + 1);
            let out = self.dcss.bytes(pos, n).ok_or(Errno::EFAULT)?.to_vec();
            pos += n as u32;
            let f = self.msgs.front_mut().unwrap();
            f.pos = pos;
            let last = mca_end - mca_start + 1 - mca_offset == 12;
            if pos > rec_end && !last {
                // On to the next MCE; after the last one stay past the end.
                f.mca_offset += 12;
                f.pos = 0;
            }
            Ok(out)
        } else {
            self.reply()
        }
    }

    /// Reply to the current message (`mon_send_reply`): the 0-byte read, or
    /// EIO when the reply fails. The message is done with either way.
    fn reply(&mut self) -> SysResult<Vec<u8>> {
        self.replies += 1;
        let every = self.reply_fail_every;
        let fail = self.severed
            || std::mem::take(&mut self.fail_next_reply)
            || (every > 0 && self.replies % every == 0);
        self.msglim_count -= 1;
        self.dcss.release_oldest();
        let f = self.msgs.front_mut().unwrap();
        if f.msglim_reached {
            f.replied_msglim = true;
        } else {
            self.msgs.pop_front();
        }
        if fail {
            Err(Errno::EIO)
        } else {
            Ok(Vec::new())
        }
    }
}

impl Shared {
    /// A read on connection `id`.
    fn read(&self, id: u64, count: usize) -> SysResult<Vec<u8>> {
        let mut st = self.lock();
        let State { conn, stats, .. } = &mut *st;
        let c = match conn.as_mut() {
            Some(c) if c.id == id => c,
            _ => return Err(Errno::EIO),
        };
        let before = c.replies;
        let r = c.read(count);
        if c.replies != before {
            stats.replies += 1;
            // Room for more messages (flood pace).
            self.cond.notify_all();
        }
        if r == Err(Errno::EOVERFLOW) {
            stats.overflows += 1;
        }
        r
    }
}

struct MonReaderNode {
    shared: Arc<Shared>,
}

impl FileNode for MonReaderNode {
    fn mode(&self) -> u32 {
        0o600
    }

    fn open(&self, flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let sh = &self.shared;
        let mut st = sh.lock();
        if st.conn.is_some() {
            return Err(Errno::EBUSY);
        }
        if sh.cfg.faults.connect_fail {
            return Err(Errno::EIO);
        }
        let id = st.next_id;
        st.next_id += 1;
        let now = sh.clock.sim_now();
        let t0 = match sh.cfg.pace {
            Pace::Realtime => now,
            Pace::Flood => 0,
        };
        st.conn = Some(Conn {
            id,
            nonblock: flags.nonblock(),
            opened_at: now,
            dcss: Dcss::new(sh.cfg.dcss_start, sh.cfg.dcss_end),
            msgs: VecDeque::with_capacity(MON_MSGLIM),
            msglim_count: 0,
            severed: false,
            waker: None,
            gen: Generator::new(&sh.cfg, sh.seed, sh.clock.clone(), t0),
            generated: 0,
            sent: 0,
            replies: 0,
            reply_fail_every: sh.cfg.faults.reply_fail_every,
            fail_next_reply: false,
            overflow_pending: sh.cfg.faults.overflow_after_messages == Some(0),
        });
        st.stats.opens += 1;
        drop(st);
        sh.cond.notify_all();
        Ok(Arc::new(MonReaderFile {
            shared: sh.clone(),
            id,
        }))
    }
}

struct MonReaderFile {
    shared: Arc<Shared>,
    id: u64,
}

impl OpenFile for MonReaderFile {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.shared.read(self.id, size as usize)
    }

    fn poll(&self) -> u32 {
        let st = self.shared.lock();
        match st.conn.as_ref() {
            Some(c) if c.id == self.id => {
                if c.severed {
                    libc::POLLERR as u32
                } else if !c.msgs.is_empty() {
                    POLL_READABLE
                } else {
                    0
                }
            }
            _ => libc::POLLERR as u32,
        }
    }

    fn set_waker(&self, waker: Waker) {
        let mut st = self.shared.lock();
        if let Some(c) = st.conn.as_mut().filter(|c| c.id == self.id) {
            c.waker = Some(waker);
        }
    }

    fn is_stream(&self) -> bool {
        true
    }

    fn release(&self) {
        let mut st = self.shared.lock();
        if st.conn.as_ref().is_some_and(|c| c.id == self.id) {
            st.conn = None;
        }
        drop(st);
        self.shared.cond.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::sim::zvm::ZvmFaults;

    const NB: OpenFlags = OpenFlags {
        flags: libc::O_RDONLY | libc::O_NONBLOCK,
    };

    fn dev(cfg: ZvmConfig) -> MonReaderDev {
        MonReaderDev::new(cfg, 11, Arc::new(VirtualClock::new()))
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
