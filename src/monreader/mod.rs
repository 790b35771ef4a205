//! `dev/monreader`: the s390 z/VM monitor reader (`drivers/s390/char/monreader.c`).
//! Whatever produces monitor data (*MONITOR; here the simulator in
//! `crate::sim::zvm`, wired up by `daemon.rs`) reaches it through one narrow
//! port, [`MonitorPort`]: see who is connected, send a message, sever the
//! path, fail a reply. The record and message layout is in [`records`].
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
pub mod records;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::base::clock::Clock;
use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, NodeKind, OpenFile, OpenFlags, Tree, Waker, POLL_READABLE,
};
use dcss::Dcss;
pub use dcss::Spoil;
use records::Message;

/// Messages that can be outstanding (`MON_MSGLIM`).
pub const MON_MSGLIM: usize = 255;
/// Path of the device in the mount.
pub const DEVICE_PATH: &str = "dev/monreader";

/// How the IUCV path behaves, from the `zvm:` configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathConfig {
    /// First byte of the monitor DCSS.
    pub dcss_start: u32,
    /// Last byte of the monitor DCSS (inclusive).
    pub dcss_end: u32,
    /// Connecting fails: open gives EIO.
    pub connect_fail: bool,
    /// Every Nth reply fails (0: none).
    pub reply_fail_every: u64,
}

impl From<&crate::config::zvm::ZvmConfig> for PathConfig {
    fn from(c: &crate::config::zvm::ZvmConfig) -> PathConfig {
        PathConfig {
            dcss_start: c.dcss_start,
            dcss_end: c.dcss_end,
            connect_fail: c.faults.connect_fail,
            reply_fail_every: c.faults.reply_fail_every,
        }
    }
}

/// The open connection, as *MONITOR sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Connection {
    /// Which open this is (a new open is a new connection).
    pub id: u64,
    /// When it was opened (the clock's simulation time, ns).
    pub opened_at: u64,
    /// *MONITOR severed the path.
    pub severed: bool,
    /// Messages queued and not yet replied to.
    pub queued: usize,
    /// Below the message limit (`MON_MSGLIM` outstanding), severed or not.
    pub room: bool,
}

impl Connection {
    /// Whether a message sent now would be taken.
    pub fn can_send(&self) -> bool {
        self.room && !self.severed
    }
}

/// The IUCV path of the open connection, held by *MONITOR for one
/// [`MonitorPort::with_path`]: no read or reply of the reader comes in
/// between, so what *MONITOR does in one go (a burst of messages, the
/// message before a sever) the reader sees as one step, as with the
/// driver's single lock.
pub trait Path {
    /// The connection, as it is now.
    fn connection(&self) -> Connection;
    /// Send `m`: its record sets are stored in the DCSS (with a bad MCE if
    /// `spoil`) and the message queued for the reader (woken when the path
    /// is let go). False when it cannot be taken (limit reached, no room in
    /// the DCSS, severed): the data is lost.
    fn send(&mut self, m: &Message, spoil: Option<Spoil>) -> bool;
    /// Sever the path.
    fn sever(&mut self);
}

/// What a producer of monitor data (*MONITOR) may do with the reader: the
/// one way into the facility, as [`crate::usbmon::event::UrbSink`] is
/// usbmon's.
pub trait MonitorPort: Send + Sync {
    /// The connection now open, if the device is open.
    fn connection(&self) -> Option<Connection>;
    /// Run `f` with the open connection's path held (nothing if the device
    /// is not open); the reader is woken afterwards if `f` sent or severed.
    fn with_path(&self, f: &mut dyn FnMut(&mut dyn Path));
    /// Make the next reply on connection `id` fail.
    fn fail_next_reply(&self, id: u64);
    /// Call `f` (without any of the facility's locks held) whenever the
    /// path changes in a way *MONITOR acts on: a connection opens or
    /// closes, or a reply frees room.
    fn on_change(&self, f: Arc<dyn Fn() + Send + Sync>);
}

/// Where the records *MONITOR sends are also reported as they go out (the
/// tracing facility's `zvm:zvm_sample` and `zvm:zvm_event`).
pub trait RecordTap: Send + Sync {
    /// Whether anything takes the records now (else they are not offered).
    fn wanted(&self) -> bool {
        true
    }
    /// Record `r` of a sample set (`event` false) or an event set went to
    /// the reader; `userid` is the z/VM user it is about (empty if none).
    fn record_sent(&self, event: bool, r: &records::Record, userid: &str);
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

/// The state of one open (`struct mon_private`).
struct Conn {
    id: u64,
    nonblock: bool,
    opened_at: u64,
    dcss: Dcss,
    msgs: VecDeque<Msg>,
    msglim_count: usize,
    severed: bool,
    waker: Option<Waker>,
    /// Messages taken on this connection (numbers them in the DCSS).
    sent: u64,
    replies: u64,
    reply_fail_every: u64,
    fail_next_reply: bool,
}

struct State {
    conn: Option<Conn>,
    next_id: u64,
    stats: Stats,
    on_change: Option<Arc<dyn Fn() + Send + Sync>>,
}

struct Shared {
    path: PathConfig,
    clock: Arc<dyn Clock>,
    state: Mutex<State>,
}

/// The monreader facility.
pub struct MonReaderDev {
    shared: Arc<Shared>,
}

impl MonReaderDev {
    /// Build the facility and add `dev/monreader` (mode 0600) to `tree`.
    pub fn install(tree: &Arc<Tree>, path: PathConfig, clock: Arc<dyn Clock>) -> Arc<MonReaderDev> {
        let dev = Arc::new(MonReaderDev::new(path, clock));
        tree.add(DEVICE_PATH, NodeKind::File(dev.node()), 0o600);
        dev
    }

    /// The facility without a tree (tests).
    pub fn new(path: PathConfig, clock: Arc<dyn Clock>) -> MonReaderDev {
        MonReaderDev {
            shared: Arc::new(Shared {
                path,
                clock,
                state: Mutex::new(State {
                    conn: None,
                    next_id: 1,
                    stats: Stats::default(),
                    on_change: None,
                }),
            }),
        }
    }

    /// The file node (for tests that do not need a tree).
    pub fn node(&self) -> Arc<dyn FileNode> {
        Arc::new(MonReaderNode {
            shared: self.shared.clone(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        self.shared.lock().stats
    }
}

impl Conn {
    fn snapshot(&self) -> Connection {
        Connection {
            id: self.id,
            opened_at: self.opened_at,
            severed: self.severed,
            queued: self.msgs.len(),
            room: self.has_room(),
        }
    }
}

/// The path while *MONITOR holds it.
struct HeldPath<'a> {
    conn: &'a mut Conn,
    stats: &'a mut Stats,
    /// Something became readable (or the path was severed).
    woke: bool,
}

impl Path for HeldPath<'_> {
    fn connection(&self) -> Connection {
        self.conn.snapshot()
    }

    fn send(&mut self, m: &Message, spoil: Option<Spoil>) -> bool {
        let c = &mut *self.conn;
        if !c.can_send() {
            self.stats.lost += 1;
            return false;
        }
        let Some((mca_start, mca_end)) = c.dcss.store(c.sent, &m.sets, spoil) else {
            self.stats.lost += 1;
            return false;
        };
        c.sent += 1;
        self.stats.messages += 1;
        c.msglim_count += 1;
        c.msgs.push_back(Msg {
            mca_start,
            mca_end,
            pos: 0,
            mca_offset: 0,
            msglim_reached: c.msglim_count == MON_MSGLIM,
            replied_msglim: false,
        });
        self.woke = true;
        true
    }

    fn sever(&mut self) {
        self.conn.severed = true;
        self.woke = true;
    }
}

impl MonitorPort for MonReaderDev {
    fn connection(&self) -> Option<Connection> {
        self.shared.lock().conn.as_ref().map(Conn::snapshot)
    }

    fn with_path(&self, f: &mut dyn FnMut(&mut dyn Path)) {
        let waker = {
            let mut st = self.shared.lock();
            let State { conn, stats, .. } = &mut *st;
            let Some(conn) = conn.as_mut() else {
                return;
            };
            let mut p = HeldPath {
                conn,
                stats,
                woke: false,
            };
            f(&mut p);
            if p.woke {
                p.conn.waker.clone()
            } else {
                None
            }
        };
        if let Some(w) = waker {
            w();
        }
    }

    fn fail_next_reply(&self, id: u64) {
        let mut st = self.shared.lock();
        if let Some(c) = st.conn.as_mut().filter(|c| c.id == id) {
            c.fail_next_reply = true;
        }
    }

    fn on_change(&self, f: Arc<dyn Fn() + Send + Sync>) {
        self.shared.lock().on_change = Some(f);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock_ok()
    }

    /// Tell *MONITOR that the path changed (no lock of ours held).
    fn changed(&self) {
        let f = self.lock().on_change.clone();
        if let Some(f) = f {
            f();
        }
    }
}

impl Conn {
    /// Below the message limit.
    fn has_room(&self) -> bool {
        self.msglim_count < MON_MSGLIM && self.msgs.len() < MON_MSGLIM
    }

    fn can_send(&self) -> bool {
        !self.severed && self.has_room()
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
        let replied = c.replies != before;
        if replied {
            stats.replies += 1;
        }
        if r == Err(Errno::EOVERFLOW) {
            stats.overflows += 1;
        }
        drop(st);
        if replied {
            // Room for more messages (flood pace).
            self.changed();
        }
        r
    }
}

struct MonReaderNode {
    shared: Arc<Shared>,
}

impl FileNode for MonReaderNode {
    fn open(&self, flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let sh = &self.shared;
        let mut st = sh.lock();
        if st.conn.is_some() {
            return Err(Errno::EBUSY);
        }
        if sh.path.connect_fail {
            return Err(Errno::EIO);
        }
        let id = st.next_id;
        st.next_id += 1;
        st.conn = Some(Conn {
            id,
            nonblock: flags.nonblock(),
            opened_at: sh.clock.sim_now(),
            dcss: Dcss::new(sh.path.dcss_start, sh.path.dcss_end),
            msgs: VecDeque::with_capacity(MON_MSGLIM),
            msglim_count: 0,
            severed: false,
            waker: None,
            sent: 0,
            replies: 0,
            reply_fail_every: sh.path.reply_fail_every,
            fail_next_reply: false,
        });
        st.stats.opens += 1;
        drop(st);
        sh.changed();
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
        self.shared.changed();
    }
}
