//! The node of a tty port (`dev/ttyACMN`) and its open files, as the tty
//! layer serves them (`drivers/tty/tty_io.c`, `tty_ioctl.c`, `n_tty.c`).
//!
//! * `open(2)`: ENODEV once the device went; EBUSY while the port is
//!   exclusive (TIOCEXCL) for a caller without root.
//! * `read(2)`: the line discipline's input, by its canonical or VMIN and
//!   VTIME rules; EAGAIN when non-blocking and nothing is there; 0 (end of
//!   file) once the port hung up.
//! * `write(2)`: through the line discipline's output processing to the
//!   driver, as far as its write room lets it; a blocking write waits for
//!   room until it is all written (a signal: what it wrote, else EINTR), a
//!   non-blocking one returns what fit (EAGAIN if nothing did); EIO once
//!   the port hung up (what was written, if anything).
//! * `poll`: readable as n_tty_poll says, writable while little waits to
//!   go out and there is write room; everything and POLLHUP once hung up.
//! * ioctls: TCGETS, TCSETS, TCSETSW, TCSETSF and their termios2 forms,
//!   TCFLSH, TCXONC, TCSBRK, TCSBRKP, TIOCSBRK, TIOCCBRK, TIOCMGET, TIOCMSET,
//!   TIOCMBIS, TIOCMBIC, TIOCMIWAIT, TIOCGICOUNT, TIOCINQ, TIOCOUTQ, TIOCEXCL,
//!   TIOCNXCL, TIOCGEXCL, TIOCGSERIAL, TIOCGWINSZ, TIOCSWINSZ, TIOCGETD,
//!   TIOCGSOFTCAR, TIOCSSOFTCAR; others ENOTTY; EIO once hung up.
//!
//! The node is a file of the mount, so the kernel passes the tty ioctls,
//! whose numbers carry no size, without their argument: it is read and
//! written in the caller's memory ([`crate::base::vfs::CallerMemory`]).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{
    Caller, FileNode, IoctlLayout, IoctlReply, IoctlRequest, OpenFile, OpenFlags, Waker, WakerSlot,
    WriteRequest, Written,
};

use super::ldisc::{ReadPlan, ReadStep};
use super::port::{Icount, Port, PortState, TIOCM_CD, TIOCM_CTS, TIOCM_DSR, TIOCM_RI};
use super::termios::{self, SetKind};

/// tty ioctl numbers (`include/uapi/asm-generic/ioctls.h`).
mod nr {
    pub const TCGETS: u32 = 0x5401;
    pub const TCSETS: u32 = 0x5402;
    pub const TCSETSW: u32 = 0x5403;
    pub const TCSETSF: u32 = 0x5404;
    pub const TCSBRK: u32 = 0x5409;
    pub const TCXONC: u32 = 0x540a;
    pub const TCFLSH: u32 = 0x540b;
    pub const TIOCEXCL: u32 = 0x540c;
    pub const TIOCNXCL: u32 = 0x540d;
    pub const TIOCOUTQ: u32 = 0x5411;
    pub const TIOCGWINSZ: u32 = 0x5413;
    pub const TIOCSWINSZ: u32 = 0x5414;
    pub const TIOCMGET: u32 = 0x5415;
    pub const TIOCMBIS: u32 = 0x5416;
    pub const TIOCMBIC: u32 = 0x5417;
    pub const TIOCMSET: u32 = 0x5418;
    pub const TIOCGSOFTCAR: u32 = 0x5419;
    pub const TIOCSSOFTCAR: u32 = 0x541a;
    pub const TIOCINQ: u32 = 0x541b;
    pub const TIOCGSERIAL: u32 = 0x541e;
    pub const TIOCGETD: u32 = 0x5424;
    pub const TCSBRKP: u32 = 0x5425;
    pub const TIOCSBRK: u32 = 0x5427;
    pub const TIOCCBRK: u32 = 0x5428;
    pub const TIOCGEXCL: u32 = 0x8004_5440;
    pub const TIOCMIWAIT: u32 = 0x545c;
    pub const TIOCGICOUNT: u32 = 0x545d;
}

/// `WAKEUP_CHARS`: POLLOUT while fewer bytes than this wait to go out.
const WAKEUP_CHARS: usize = 256;
/// tty_write's chunks (iterate_tty_write without TTY_NO_WRITE_SPLIT): each
/// goes to the line discipline's write whole before the next.
const WRITE_CHUNK: usize = 2048;
/// `sizeof(struct serial_struct)` and `struct serial_icounter_struct`.
const SERIAL_STRUCT: usize = 72;
const ICOUNTER_STRUCT: usize = 80;

/// The node: opens reach the port while it is there.
pub struct TtyNode {
    pub(super) port: Weak<Port>,
}

/// A port's character device (CUSE): opens whatever port has its minor
/// at the time, ENODEV when none does (`tty_open` finds no driver).
pub struct MinorNode {
    pub(super) lookup: Arc<dyn Fn() -> Option<Arc<Port>> + Send + Sync>,
}

impl FileNode for MinorNode {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let port = (self.lookup)().ok_or(Errno::ENODEV)?;
        TtyNode {
            port: Arc::downgrade(&port),
        }
        .open(flags, caller)
    }
}

impl FileNode for TtyNode {
    fn open(&self, _flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let port = self.port.upgrade().ok_or(Errno::ENODEV)?;
        {
            let st = port.state();
            if st.gone {
                return Err(Errno::ENODEV);
            }
            // tty_open: an exclusive tty is EBUSY but for CAP_SYS_ADMIN.
            if st.exclusive && st.opens > 0 && caller.uid != 0 {
                return Err(Errno::EBUSY);
            }
        }
        let hangups = port.open()?;
        let waker = Arc::new(WakerSlot::default());
        port.add_waker(&waker);
        Ok(Arc::new(TtyFile {
            port,
            hangups,
            waker,
            epoch: Instant::now(),
            plan: Mutex::new(None),
            miwait: Mutex::new(None),
            timer: Mutex::new(None),
            brk_until: Mutex::new(None),
        }))
    }
}

struct TtyFile {
    port: Arc<Port>,
    /// The port's hangup count at the open: a later one hangs this file up.
    hangups: u64,
    waker: Arc<WakerSlot>,
    /// The line discipline's clock starts here.
    epoch: Instant,
    /// The read in progress (parked, waiting for VMIN bytes or VTIME).
    plan: Mutex<Option<ReadPlan>>,
    /// TIOCMIWAIT's counters at its first call.
    miwait: Mutex<Option<Icount>>,
    /// When the pending VTIME or break timer fires.
    timer: Mutex<Option<Instant>>,
    /// When the break of TCSBRK or TCSBRKP in progress ends.
    brk_until: Mutex<Option<Instant>>,
}

/// An int argument from the caller's memory.
fn int_arg(req: &IoctlRequest<'_>) -> SysResult<u32> {
    let b = req.argument(4)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Hand `bytes` to the caller's argument: through the reply where the
/// command's size lets the kernel copy them, else in its memory.
fn put(req: &IoctlRequest<'_>, bytes: Vec<u8>) -> SysResult<IoctlReply> {
    if req.out_size as usize >= bytes.len() {
        return Ok(IoctlReply::new(bytes, 0));
    }
    req.mem.write(req.arg, &bytes)?;
    Ok(IoctlReply::new(Vec::new(), 0))
}

fn ok() -> SysResult<IoctlReply> {
    Ok(IoctlReply::new(Vec::new(), 0))
}

impl TtyFile {
    /// Whether the port hung up since this file opened (or the device
    /// went).
    fn hung(&self, st: &PortState) -> bool {
        st.gone || st.hangups != self.hangups
    }

    /// Wake this file's parked read at `at` (a VTIME timer).
    fn wake_at(&self, at: Instant) {
        let mut t = self.timer.lock_ok();
        // A timer still to fire, no later than this one, wakes the call,
        // which asks again then.
        if t.is_some_and(|x| x <= at && x > Instant::now()) {
            return;
        }
        *t = Some(at);
        let slot = Arc::downgrade(&self.waker);
        let _ = std::thread::Builder::new()
            .name("monfs-tty-timer".into())
            .spawn(move || {
                std::thread::sleep(at.saturating_duration_since(Instant::now()));
                if let Some(w) = slot.upgrade() {
                    w.wake();
                }
            });
    }

    /// Wait until every write went out (tty_wait_until_sent, which waits
    /// whatever O_NONBLOCK says), and then, for a driver that can tell,
    /// until the device's transmitter is empty (asked once per character
    /// time): asked again until then, EIO once hung up.
    fn drained(&self) -> SysResult<()> {
        let st = self.port.state();
        if self.hung(&st) {
            return Err(Errno::EIO);
        }
        if !Port::drained(&st) {
            return Err(Errno::WAIT_ALWAYS);
        }
        drop(st);
        match self.port.driver.tx_empty(&self.port) {
            Some(false) => {
                self.wake_at(Instant::now() + self.port.char_time());
                Err(Errno::WAIT_ALWAYS)
            }
            _ => Ok(()),
        }
    }

    /// set_termios: the new termios from the caller's struct, drained
    /// and flushed first as `drain`/`flush` say; the driver is told.
    fn set_termios(
        &self,
        req: &IoctlRequest<'_>,
        kind: SetKind,
        drain: bool,
        flush: bool,
    ) -> SysResult<IoctlReply> {
        let buf = req.argument(kind.size())?;
        let old = self.port.state().termios;
        let new = old.apply_user(kind, &buf).map_err(|e| Errno(e.errno()))?;
        if drain {
            self.drained()?;
        }
        {
            let mut st = self.port.state();
            if flush {
                st.ldisc.flush_input();
            }
            st.termios = new;
            st.ldisc.set_termios(&old, &new);
            // Echoes a restart of output released.
            let out = st.ldisc.take_output();
            drop(st);
            if !out.is_empty() {
                self.port.queue_write(&out);
            }
        }
        self.port.set_termios(Some(&old))?;
        self.port.check_unthrottle();
        self.port.wake();
        ok()
    }

    fn serial_struct(&self) -> Vec<u8> {
        let mut b = vec![0u8; SERIAL_STRUCT];
        b[4..8].copy_from_slice(&self.port.minor.to_le_bytes());
        self.port.driver.serial(&mut b);
        // close_delay and closing_wait in centiseconds: tty_port_init's
        // 0.5 s and 30 s.
        b[32..34].copy_from_slice(&50u16.to_le_bytes());
        b[40..42].copy_from_slice(&3000u16.to_le_bytes());
        b
    }

    fn icount(&self) -> Vec<u8> {
        let c = self.port.state().icount;
        let mut b = vec![0u8; ICOUNTER_STRUCT];
        // cts, dsr, rng, dcd, rx, tx, frame, overrun, parity, brk (what
        // the driver counts; cdc_acm counts no CTS changes and no bytes).
        for (i, v) in [
            c.cts, c.dsr, c.rng, c.dcd, c.rx, c.tx, c.frame, c.overrun, c.parity, c.brk,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// TIOCMIWAIT (acm_wait_serial_change): returns once a line in `mask`
    /// changed since the first call; asked again until then, whatever
    /// O_NONBLOCK says; EIO once the device went.
    fn miwait(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        let mask = req.arg as u32;
        let st = self.port.state();
        if st.gone {
            *self.miwait.lock_ok() = None;
            return Err(Errno::EIO);
        }
        let now = st.icount;
        drop(st);
        let mut w = self.miwait.lock_ok();
        let Some(then) = (*w).filter(|_| req.retry) else {
            *w = Some(now);
            return Err(Errno::WAIT_ALWAYS);
        };
        let mask = mask & self.port.driver.miwait_lines();
        let changed = (mask & TIOCM_DSR != 0 && now.dsr != then.dsr)
            || (mask & TIOCM_CD != 0 && now.dcd != then.dcd)
            || (mask & TIOCM_RI != 0 && now.rng != then.rng)
            || (mask & TIOCM_CTS != 0 && now.cts != then.cts);
        if changed {
            *w = None;
            return ok();
        }
        Err(Errno::WAIT_ALWAYS)
    }

    /// A break of `ms` (tty's send_break without a hardware break: on,
    /// wait, off).
    ///
    /// The call waits parked (no thread held): the first attempt drains
    /// the output and starts the break, a retry after `ms` ends it.
    fn timed_break(&self, req: &IoctlRequest<'_>, ms: u64) -> SysResult<IoctlReply> {
        let mut until = self.brk_until.lock_ok();
        match (*until).filter(|_| req.retry) {
            None => {
                drop(until);
                self.drained()?;
                match self.port.break_ctl(true) {
                    // send_break: a driver that cannot send one (cdc_acm
                    // without the break capability) is no error.
                    Err(e) if e == Errno(libc::EOPNOTSUPP) => return ok(),
                    r => r?,
                }
                let now = Instant::now();
                let end = now
                    .checked_add(Duration::from_millis(ms))
                    .unwrap_or(now + Duration::from_secs(86_400 * 365));
                *self.brk_until.lock_ok() = Some(end);
                self.wake_at(end);
                Err(Errno::WAIT_ALWAYS)
            }
            Some(end) if Instant::now() < end => {
                drop(until);
                self.wake_at(end);
                Err(Errno::WAIT_ALWAYS)
            }
            Some(_) => {
                *until = None;
                drop(until);
                self.port.break_ctl(false)?;
                ok()
            }
        }
    }
}

impl OpenFile for TtyFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.read_as(offset, size, false, false)
    }

    fn read_as(&self, _offset: u64, size: u32, nonblock: bool, retry: bool) -> SysResult<Vec<u8>> {
        let mut st = self.port.state();
        let mut plan = self.plan.lock_ok();
        if self.hung(&st) {
            // A hung-up tty reads what the read took so far, else end of
            // file.
            let got = plan.take().map(|p| p.taken().to_vec()).unwrap_or_default();
            return Ok(got);
        }
        if !retry || plan.is_none() {
            *plan = Some(ReadPlan::new(size as usize, nonblock));
        }
        let p = plan.as_mut().expect("just made");
        let now_ns = self.epoch.elapsed().as_nanos() as u64;
        let t = st.termios;
        let step = st.ldisc.read_step(&t, p, now_ns);
        drop(st);
        match step {
            ReadStep::Done(data) => {
                *plan = None;
                drop(plan);
                self.port.check_unthrottle();
                Ok(data)
            }
            ReadStep::Again => {
                *plan = None;
                Err(Errno::EAGAIN)
            }
            ReadStep::Wait { until } => {
                drop(plan);
                // Bytes it took made room.
                self.port.check_unthrottle();
                if let Some(ns) = until {
                    self.wake_at(self.epoch + Duration::from_nanos(ns));
                }
                Err(Errno::EAGAIN)
            }
        }
    }

    fn write(&self, offset: u64, data: &[u8], caller: &Caller) -> SysResult<u32> {
        let w = WriteRequest {
            offset,
            data,
            done: 0,
            caller,
        };
        match self.write_as(&w)? {
            Written::Took(0) => Err(Errno::EAGAIN),
            Written::Took(n) | Written::Done(n) => Ok(n),
        }
    }

    /// tty_write and n_tty_write: the write in chunks of [`WRITE_CHUNK`]
    /// bytes (iterate_tty_write), each through the line discipline to the
    /// driver as far as the write room lets it; the rest waits for room
    /// (or, with O_NONBLOCK, is not written). EIO once hung up.
    fn write_as(&self, w: &WriteRequest<'_>) -> SysResult<Written> {
        if self.hung(&self.port.state()) {
            return Err(Errno::EIO);
        }
        let start = w.done.min(w.data.len());
        let mut at = start;
        while at < w.data.len() {
            let end = w.data.len().min((at / WRITE_CHUNK + 1) * WRITE_CHUNK);
            let (n, err) = self.port.write(&w.data[at..end]);
            at += n;
            if let Some(e) = err {
                // n_tty_write and tty_write: what was written, else the
                // error.
                return match at {
                    0 => Err(e),
                    _ => Ok(Written::Done(at as u32)),
                };
            }
            if at < end {
                break;
            }
        }
        Ok(Written::Took((at - start) as u32))
    }

    fn poll(&self) -> u32 {
        let st = self.port.state();
        if self.hung(&st) {
            return (libc::POLLIN
                | libc::POLLOUT
                | libc::POLLERR
                | libc::POLLHUP
                | libc::POLLRDNORM
                | libc::POLLWRNORM) as u32;
        }
        let mut m = 0;
        if st.ldisc.available(&st.termios, true) {
            m |= (libc::POLLIN | libc::POLLRDNORM) as u32;
        }
        // n_tty_poll: little waits to go out and there is room.
        if self.port.outq(&st) < WAKEUP_CHARS && self.port.write_room(&st) > 0 {
            m |= (libc::POLLOUT | libc::POLLWRNORM) as u32;
        }
        m
    }

    fn set_waker(&self, waker: Waker) {
        self.waker.set(waker);
    }

    fn is_stream(&self) -> bool {
        true
    }

    /// The caller memory each command touches, for the character device
    /// (CUSE copies exactly these): what [`OpenFile::ioctl`] reads and
    /// writes. The tty ioctls' numbers carry no size.
    fn ioctl_layout(&self, cmd: u32, arg: u64, _input: &[u8], _compat: bool) -> IoctlLayout {
        use nr::*;
        let mut l = IoctlLayout::default();
        let termios = SetKind::Termios.size() as u64;
        let termios2 = SetKind::Termios2.size() as u64;
        match cmd {
            TCGETS => l.output.push((arg, termios)),
            termios::TCGETS2 => l.output.push((arg, termios2)),
            TCSETS | TCSETSW | TCSETSF => l.input.push((arg, termios)),
            termios::TCSETS2 | termios::TCSETSW2 | termios::TCSETSF2 => {
                l.input.push((arg, termios2))
            }
            TIOCMSET | TIOCMBIS | TIOCMBIC | TIOCSSOFTCAR => l.input.push((arg, 4)),
            TIOCMGET | TIOCINQ | TIOCOUTQ | TIOCGEXCL | TIOCGETD | TIOCGSOFTCAR => {
                l.output.push((arg, 4))
            }
            TIOCGICOUNT => l.output.push((arg, ICOUNTER_STRUCT as u64)),
            TIOCGSERIAL => l.output.push((arg, SERIAL_STRUCT as u64)),
            TIOCGWINSZ => l.output.push((arg, 8)),
            TIOCSWINSZ => l.input.push((arg, 8)),
            _ => {}
        }
        l
    }

    fn ioctl(&self, req: &IoctlRequest<'_>) -> SysResult<IoctlReply> {
        use nr::*;
        if self.hung(&self.port.state()) {
            return Err(Errno::EIO);
        }
        let tio = |st: &PortState| st.termios;
        match req.cmd {
            TCGETS => put(req, tio(&self.port.state()).to_user(SetKind::Termios)),
            termios::TCGETS2 => put(req, tio(&self.port.state()).to_user(SetKind::Termios2)),
            TCSETS => self.set_termios(req, SetKind::Termios, false, false),
            TCSETSW => self.set_termios(req, SetKind::Termios, true, false),
            TCSETSF => self.set_termios(req, SetKind::Termios, true, true),
            termios::TCSETS2 => self.set_termios(req, SetKind::Termios2, false, false),
            termios::TCSETSW2 => self.set_termios(req, SetKind::Termios2, true, false),
            termios::TCSETSF2 => self.set_termios(req, SetKind::Termios2, true, true),
            TCFLSH => {
                // tty_perform_flush.
                match req.arg {
                    0 => self.port.state().ldisc.flush_input(),
                    1 => self.port.flush_buffer(),
                    2 => {
                        self.port.state().ldisc.flush_input();
                        self.port.flush_buffer();
                    }
                    _ => return Err(Errno::EINVAL),
                }
                self.port.check_unthrottle();
                ok()
            }
            TCXONC => {
                let send = {
                    let mut st = self.port.state();
                    let t = st.termios;
                    st.ldisc.tcxonc(&t, req.arg as u32).map_err(Errno)?
                };
                if let Some(c) = send {
                    self.port.queue_write(&[c]);
                }
                self.port.kick();
                ok()
            }
            TCSBRK => {
                if req.arg == 0 {
                    self.timed_break(req, 250)
                } else {
                    self.drained().map(|_| IoctlReply::default())
                }
            }
            TCSBRKP => {
                let ms = if req.arg == 0 {
                    250
                } else {
                    req.arg.saturating_mul(100)
                };
                self.timed_break(req, ms)
            }
            TIOCSBRK => {
                self.drained()?;
                self.port.break_ctl(true).map(|_| IoctlReply::default())
            }
            TIOCCBRK => self.port.break_ctl(false).map(|_| IoctlReply::default()),
            TIOCMGET => put(req, self.port.tiocmget()?.to_le_bytes().to_vec()),
            TIOCMSET => {
                let v = int_arg(req)?;
                self.port.tiocmset(v, !v)?;
                ok()
            }
            TIOCMBIS => {
                let v = int_arg(req)?;
                self.port.tiocmset(v, 0)?;
                ok()
            }
            TIOCMBIC => {
                let v = int_arg(req)?;
                self.port.tiocmset(0, v)?;
                ok()
            }
            TIOCMIWAIT if !self.port.driver.has_tiocmiwait() => Err(Errno::ENOTTY),
            TIOCMIWAIT => self.miwait(req),
            TIOCGICOUNT if !self.port.driver.has_icount() => Err(Errno::ENOTTY),
            TIOCGICOUNT => put(req, self.icount()),
            TIOCINQ => {
                let st = self.port.state();
                let n = st.ldisc.inq(&st.termios) as u32;
                drop(st);
                put(req, n.to_le_bytes().to_vec())
            }
            TIOCOUTQ => {
                let st = self.port.state();
                let n = self.port.outq(&st) as u32;
                drop(st);
                put(req, n.to_le_bytes().to_vec())
            }
            TIOCEXCL => {
                self.port.state().exclusive = true;
                ok()
            }
            TIOCNXCL => {
                self.port.state().exclusive = false;
                ok()
            }
            TIOCGEXCL => put(
                req,
                u32::from(self.port.state().exclusive)
                    .to_le_bytes()
                    .to_vec(),
            ),
            TIOCGSERIAL => put(req, self.serial_struct()),
            TIOCGWINSZ => put(req, self.port.state().winsize.to_vec()),
            TIOCSWINSZ => {
                let b = req.argument(8)?;
                self.port.state().winsize.copy_from_slice(&b[..8]);
                ok()
            }
            TIOCGETD => put(req, 0u32.to_le_bytes().to_vec()),
            TIOCGSOFTCAR => {
                let c = self.port.state().termios.cflag & termios::CLOCAL != 0;
                put(req, u32::from(c).to_le_bytes().to_vec())
            }
            TIOCSSOFTCAR => {
                let v = int_arg(req)?;
                let mut st = self.port.state();
                if v != 0 {
                    st.termios.cflag |= termios::CLOCAL;
                } else {
                    st.termios.cflag &= !termios::CLOCAL;
                }
                ok()
            }
            _ => Err(Errno::ENOTTY),
        }
    }

    fn release(&self) {
        self.port.close();
    }
}
