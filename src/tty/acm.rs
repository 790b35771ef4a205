//! cdc_acm's tty port (`drivers/usb/class/cdc-acm.c`): what it sends the
//! device and when, through the port usbfs uses.
//!
//! * The first open (acm_port_activate) submits the notification URB, sets
//!   the line coding if the termios changed it (SET_LINE_CODING), submits
//!   its 16 read URBs (twice the IN endpoint's packet size each); every
//!   open then raises DTR and RTS (SET_CONTROL_LINE_STATE) as
//!   tty_port_block_til_ready does while the baud rate is not B0.
//! * Read URBs' data goes to the line discipline and the URB is submitted
//!   again, unless the port is throttled (its read buffer nearly full);
//!   the notification URB's SERIAL_STATE sets DCD, DSR and RI and counts
//!   the changes and errors (TIOCGICOUNT).
//! * Writes go out as bulk OUT URBs of at most 20 packets, 16 at a time.
//! * The last close waits for the writes, drops DTR and RTS with HUPCL,
//!   and kills the URBs (acm_port_shutdown); a disconnect hangs the port
//!   up.
//!
//! A completion comes on the bus's thread with its lock held: what it
//! submits again goes through the port's worker thread.

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::WakerSlot;
use crate::usbcore::device::{
    start_wait_urb, DevRef, TransferType, UrbDone, UrbRequest, UrbResult, UsbCorePort,
};

use super::ldisc::NTty;
use super::termios::{self, Termios};

/// `ACM_TTY_MAJOR`.
pub const ACM_TTY_MAJOR: u32 = 166;
/// `ACM_TTY_MINORS`.
pub const ACM_TTY_MINORS: u32 = 256;

/// `ACM_NR`: read URBs.
pub const ACM_NR: usize = 16;
/// `ACM_NW`: write buffers.
pub const ACM_NW: usize = 16;
/// `USB_CTRL_SET_TIMEOUT`.
const CTRL_TIMEOUT: Duration = Duration::from_secs(5);
/// `closing_wait`'s default (30 s): how long the last close waits for the
/// writes.
const CLOSING_WAIT: Duration = Duration::from_secs(30);
/// Bytes queued for the device past which a write waits (the tty layer's
/// write buffer).
const OUT_QUEUE: usize = 64 << 10;
/// Bytes the line discipline had no room for, kept to feed it again (the
/// tty's flip buffer); past this, read URBs' data is dropped.
const FLIP_MAX: usize = 64 << 10;

/// `URB_NO_TRANSFER_DMA_MAP` and `URB_DIR_IN` as transfer flags.
const NO_DMA_MAP: u32 = 0x0004;
const DIR_IN: u32 = 0x0200;

/// cdc_acm's class requests.
const SET_LINE_CODING: u8 = 0x20;
const SET_CONTROL_LINE_STATE: u8 = 0x22;
const SEND_BREAK: u8 = 0x23;

/// `USB_CDC_CTRL_DTR`, `USB_CDC_CTRL_RTS`.
pub const CTRL_DTR: u16 = 0x01;
/// See [`CTRL_DTR`].
pub const CTRL_RTS: u16 = 0x02;
/// SERIAL_STATE bits (`USB_CDC_SERIAL_STATE_*`).
const SS_DCD: u16 = 0x01;
const SS_DSR: u16 = 0x02;
const SS_BREAK: u16 = 0x04;
const SS_RING: u16 = 0x08;
const SS_FRAMING: u16 = 0x10;
const SS_PARITY: u16 = 0x20;
const SS_OVERRUN: u16 = 0x40;
/// `USB_CDC_CAP_BRK`.
const CAP_BRK: u8 = 0x04;

/// `TIOCM_*`.
pub const TIOCM_DTR: u32 = 0x002;
/// See [`TIOCM_DTR`].
pub const TIOCM_RTS: u32 = 0x004;
/// See [`TIOCM_DTR`].
pub const TIOCM_CTS: u32 = 0x020;
/// See [`TIOCM_DTR`].
pub const TIOCM_CD: u32 = 0x040;
/// See [`TIOCM_DTR`].
pub const TIOCM_RI: u32 = 0x080;
/// See [`TIOCM_DTR`].
pub const TIOCM_DSR: u32 = 0x100;

/// What cdc_acm's probe found in the configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AcmLayout {
    /// The control interface.
    pub ctrl_if: u8,
    /// The data interface (the control interface when combined).
    pub data_if: u8,
    /// The notification endpoint: address, packet size, bInterval.
    pub notify: Option<(u8, u16, u8)>,
    /// The bulk IN endpoint and its packet size.
    pub bulk_in: (u8, u16),
    /// The bulk OUT endpoint and its packet size.
    pub bulk_out: (u8, u16),
    /// The ACM functional descriptor's bmCapabilities.
    pub caps: u8,
}

impl AcmLayout {
    /// Read control interface `ifnum` (setting `alt`) and its data
    /// interface from configuration `cfg`, as acm_probe does: the union
    /// descriptor's first subordinate, else the call management
    /// descriptor's, else the control interface itself.
    pub fn parse(cfg: &[u8], ifnum: u8, alt: u8) -> Option<AcmLayout> {
        let mut cur: Option<(u8, u8)> = None;
        let (mut union, mut call, mut caps) = (None, None, 0u8);
        // (interface and setting, address, type, packet size, bInterval)
        type Ep = ((u8, u8), u8, u8, u16, u8);
        let mut eps: Vec<Ep> = vec![];
        for d in crate::usbcore::abi::descriptors(cfg) {
            match d[1] {
                4 if d.len() >= 9 => cur = Some((d[2], d[3])),
                0x24 if cur == Some((ifnum, alt)) && d.len() >= 3 => match d[2] {
                    1 if d.len() >= 5 => call = Some(d[4]),
                    2 if d.len() >= 4 => caps = d[3],
                    6 if d.len() >= 5 => union = Some(d[4]),
                    _ => {}
                },
                5 if d.len() >= 7 => {
                    if let Some(c) = cur {
                        let mps = u16::from_le_bytes([d[4], d[5]]) & 0x7ff;
                        eps.push((c, d[2], d[3] & 3, mps, d[6]));
                    }
                }
                _ => {}
            }
        }
        let data_if = union.or(call.filter(|c| *c > 0)).unwrap_or(ifnum);
        let data_alt = if data_if == ifnum { alt } else { 0 };
        let find = |at: (u8, u8), ty: u8, dir_in: bool| {
            eps.iter()
                .find(|e| e.0 == at && e.2 == ty && (e.1 & 0x80 != 0) == dir_in)
                .copied()
        };
        let notify = find((ifnum, alt), 3, true).map(|e| (e.1, e.3, e.4));
        let bulk_in = find((data_if, data_alt), 2, true)?;
        let bulk_out = find((data_if, data_alt), 2, false)?;
        Some(AcmLayout {
            ctrl_if: ifnum,
            data_if,
            notify,
            bulk_in: (bulk_in.1, bulk_in.3.max(1)),
            bulk_out: (bulk_out.1, bulk_out.3.max(1)),
            caps,
        })
    }

    /// `readsize`: two packets.
    fn readsize(&self) -> u32 {
        u32::from(self.bulk_in.1) * 2
    }

    /// `writesize`: twenty packets.
    pub fn writesize(&self) -> usize {
        usize::from(self.bulk_out.1) * 20
    }
}

/// `struct async_icount`'s fields cdc_acm counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Icount {
    /// DSR changes.
    pub dsr: u32,
    /// Rings.
    pub rng: u32,
    /// DCD changes.
    pub dcd: u32,
    /// Framing errors.
    pub frame: u32,
    /// Overruns.
    pub overrun: u32,
    /// Parity errors.
    pub parity: u32,
    /// Breaks.
    pub brk: u32,
}

/// The port's state.
pub struct PortState {
    /// Open files.
    pub opens: u32,
    /// The device went (acm->disconnected).
    pub gone: bool,
    /// The port was hung up (by a disconnect, or DCD dropping without
    /// CLOCAL): files opened before see the hung-up tty.
    pub hangups: u64,
    /// The tty's termios (kept from one open to the next, as the tty
    /// driver keeps it).
    pub termios: Termios,
    /// The line discipline of the open tty.
    pub ldisc: NTty,
    /// `ctrlout`: DTR and RTS as last sent.
    pub ctrlout: u16,
    /// `ctrlin`: the device's last SERIAL_STATE.
    pub ctrlin: u16,
    /// The line coding as last sent.
    pub line: [u8; 7],
    /// The modem line counters.
    pub icount: Icount,
    /// TIOCEXCL.
    pub exclusive: bool,
    /// The window size (TIOCGWINSZ/TIOCSWINSZ).
    pub winsize: [u8; 8],
    /// Each open's URBs carry its session: older ones' completions are
    /// ignored.
    session: u64,
    /// The read URBs, by slot.
    reads: [UrbSlot; ACM_NR],
    /// The notification URB.
    notify: UrbSlot,
    /// The write URBs in flight: (their own number, URB id once known,
    /// length).
    writes: Vec<(u64, Option<u64>, usize)>,
    /// The next write URB's own number.
    next_write: u64,
    /// Bytes waiting for a free write buffer.
    out: VecDeque<u8>,
    /// Throttled: read URBs are not submitted again.
    throttled: bool,
    /// Received bytes the line discipline had no room for yet.
    flip: Vec<u8>,
    /// Work for the worker thread.
    worker: Option<mpsc::Sender<Work>>,
}

/// One URB of the port, reused: in flight from before its submission
/// until its completion. A completion can come before `submit` returns its
/// id, so the slot is taken first and the id filled in after, if the URB
/// of that use (`uses`) is still in flight.
#[derive(Clone, Copy, Debug, Default)]
struct UrbSlot {
    busy: bool,
    id: Option<u64>,
    uses: u64,
}

impl UrbSlot {
    /// Take the slot for a new URB; its use number, None if it is busy.
    fn take(&mut self) -> Option<u64> {
        if self.busy {
            return None;
        }
        self.busy = true;
        self.id = None;
        self.uses += 1;
        Some(self.uses)
    }

    /// Use `uses` got id `id` (if it is still in flight).
    fn submitted(&mut self, uses: u64, id: u64) {
        if self.busy && self.uses == uses {
            self.id = Some(id);
        }
    }

    /// Use `uses` ended (completed, or never submitted).
    fn free(&mut self, uses: u64) {
        if self.uses == uses {
            self.busy = false;
            self.id = None;
        }
    }
}

/// What the worker thread does.
enum Work {
    /// Submit read URB `slot` again.
    Read(usize),
    /// Submit the notification URB again.
    Notify,
    /// Send what waits in the output queue.
    Flush,
}

/// One cdc_acm port.
pub struct Acm {
    /// Its USB device.
    pub dev: DevRef,
    /// Its minor.
    pub minor: u32,
    /// Its interfaces and endpoints.
    pub layout: AcmLayout,
    /// The control interface's path below `/sys`.
    pub iface_devpath: String,
    port: Arc<dyn UsbCorePort>,
    st: Mutex<PortState>,
    /// Modem line changes, write room, drained writes, hangups.
    cv: Condvar,
    /// The open files' wakers.
    wakers: Mutex<Vec<Weak<WakerSlot>>>,
    me: Weak<Acm>,
}

/// A URB of the port, completed.
struct Done {
    acm: Weak<Acm>,
    session: u64,
    what: UrbKind,
}

/// Which URB of the port, and which use of it.
#[derive(Clone, Copy)]
enum UrbKind {
    /// Read slot, use.
    Read(usize, u64),
    /// The notification URB's use.
    Notify(u64),
    /// A write URB's own number.
    Write(u64),
}

impl UrbDone for Done {
    fn done(&self, _urb: u64, r: UrbResult) {
        if let Some(a) = self.acm.upgrade() {
            a.completed(self.session, self.what, r);
        }
    }
}

/// A URB request with the fields cdc_acm's URBs leave at 0.
fn urb(xfer: TransferType, endpoint: u8, length: u32, out: Vec<u8>, flags: u32) -> UrbRequest {
    UrbRequest {
        xfer,
        endpoint,
        setup: None,
        length,
        out,
        flags,
        iso_lengths: Vec::new(),
        interval: 0,
        stream_id: 0,
        start_frame: 0,
    }
}

impl Acm {
    /// A new port (acm_probe), its line coding the probe's 9600 8N1.
    pub fn new(
        dev: DevRef,
        minor: u32,
        layout: AcmLayout,
        iface_devpath: String,
        port: Arc<dyn UsbCorePort>,
    ) -> Arc<Acm> {
        let termios = Termios::std(
            termios::B9600 | termios::CS8 | termios::CREAD | termios::HUPCL | termios::CLOCAL,
        );
        Arc::new_cyclic(|me| Acm {
            dev,
            minor,
            layout,
            iface_devpath,
            port,
            st: Mutex::new(PortState {
                opens: 0,
                gone: false,
                hangups: 0,
                termios,
                ldisc: NTty::new(),
                ctrlout: 0,
                ctrlin: 0,
                line: [0x80, 0x25, 0, 0, 0, 0, 8],
                icount: Icount::default(),
                exclusive: false,
                winsize: [0; 8],
                session: 0,
                reads: [UrbSlot::default(); ACM_NR],
                notify: UrbSlot::default(),
                writes: Vec::new(),
                next_write: 0,
                out: VecDeque::new(),
                throttled: false,
                flip: Vec::new(),
                worker: None,
            }),
            cv: Condvar::new(),
            wakers: Mutex::new(Vec::new()),
            me: me.clone(),
        })
    }

    /// `ttyACMN`.
    pub fn name(&self) -> String {
        format!("ttyACM{}", self.minor)
    }

    /// Its class device's path below `/sys`.
    pub fn devpath(&self) -> String {
        format!("{}/tty/{}", self.iface_devpath, self.name())
    }

    /// The tty class device's variables (`dev_uevent`).
    pub fn uevent_vars(&self) -> Vec<(String, String)> {
        vec![
            ("MAJOR".into(), ACM_TTY_MAJOR.to_string()),
            ("MINOR".into(), self.minor.to_string()),
            ("DEVNAME".into(), self.name()),
        ]
    }

    /// The port's state, locked.
    pub fn state(&self) -> MutexGuard<'_, PortState> {
        self.st.lock_ok()
    }

    /// Wait on the port's condition (modem lines, writes, hangups) at most
    /// `d`.
    pub fn wait<'a>(&self, g: MutexGuard<'a, PortState>, d: Duration) -> MutexGuard<'a, PortState> {
        self.cv
            .wait_timeout(g, d)
            .unwrap_or_else(|e| e.into_inner())
            .0
    }

    /// Keep an open file's waker.
    pub fn add_waker(&self, w: &Arc<WakerSlot>) {
        let mut ws = self.wakers.lock_ok();
        ws.retain(|x| x.strong_count() > 0);
        ws.push(Arc::downgrade(w));
    }

    /// Tell parked readers, pollers and waiters to look again.
    pub fn wake(&self) {
        self.cv.notify_all();
        let ws: Vec<Arc<WakerSlot>> = self
            .wakers
            .lock_ok()
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for w in ws {
            w.wake();
        }
    }

    /// `usb_control_msg` of cdc_acm's class request `request` to the
    /// control interface (acm_ctrl_msg): waits for it at most 5 s.
    fn ctrl_msg(&self, request: u8, value: u16, data: &[u8]) -> SysResult<()> {
        let mut s = [0u8; 8];
        s[0] = 0x21;
        s[1] = request;
        s[2..4].copy_from_slice(&value.to_le_bytes());
        s[4..6].copy_from_slice(&u16::from(self.layout.ctrl_if).to_le_bytes());
        s[6..8].copy_from_slice(&(data.len() as u16).to_le_bytes());
        let mut u = urb(
            TransferType::Control,
            0,
            data.len() as u32,
            data.to_vec(),
            0,
        );
        u.setup = Some(s);
        start_wait_urb(&*self.port, self.dev, u, CTRL_TIMEOUT).map(|_| ())
    }

    /// acm_set_control: DTR and RTS to `ctrl`.
    fn set_control(&self, ctrl: u16) -> SysResult<()> {
        self.ctrl_msg(SET_CONTROL_LINE_STATE, ctrl, &[])
    }

    /// acm_send_break: a break of `ms` (0xffff: until cleared; 0: off).
    pub fn send_break(&self, ms: u16) -> SysResult<()> {
        if self.layout.caps & CAP_BRK == 0 {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        self.ctrl_msg(SEND_BREAK, ms, &[])
    }

    /// acm_tty_set_termios: the line coding and DTR as termios `new`
    /// (after `old`, None at the first open) says; sends what changed.
    pub fn set_termios(&self, old: Option<&Termios>, new: &Termios) -> SysResult<()> {
        let (ctrlout, line) = {
            let st = self.state();
            (st.ctrlout, st.line)
        };
        let mut newline = [0u8; 7];
        let c = new.cflag;
        newline[0..4].copy_from_slice(&new.baud_rate().to_le_bytes());
        newline[4] = if c & termios::CSTOPB != 0 { 2 } else { 0 };
        newline[5] = if c & termios::PARENB != 0 {
            (if c & termios::PARODD != 0 { 1 } else { 2 })
                + (if c & termios::CMSPAR != 0 { 2 } else { 0 })
        } else {
            0
        };
        newline[6] = match c & termios::CSIZE {
            termios::CS5 => 5,
            termios::CS6 => 6,
            termios::CS7 => 7,
            _ => 8,
        };
        let mut newctrl = ctrlout;
        if c & termios::CBAUD == termios::B0 {
            newline[0..4].copy_from_slice(&line[0..4]);
            newctrl &= !CTRL_DTR;
        } else if old.is_some_and(|o| o.cflag & termios::CBAUD == termios::B0) {
            newctrl |= CTRL_DTR;
        }
        if newctrl != ctrlout {
            self.state().ctrlout = newctrl;
            let _ = self.set_control(newctrl);
        }
        if newline != line {
            self.state().line = newline;
            self.ctrl_msg(SET_LINE_CODING, 0, &newline)?;
        }
        Ok(())
    }

    /// acm_tty_tiocmget.
    pub fn tiocmget(&self) -> u32 {
        let st = self.state();
        let mut v = TIOCM_CTS;
        if st.ctrlout & CTRL_DTR != 0 {
            v |= TIOCM_DTR;
        }
        if st.ctrlout & CTRL_RTS != 0 {
            v |= TIOCM_RTS;
        }
        if st.ctrlin & SS_DSR != 0 {
            v |= TIOCM_DSR;
        }
        if st.ctrlin & SS_RING != 0 {
            v |= TIOCM_RI;
        }
        if st.ctrlin & SS_DCD != 0 {
            v |= TIOCM_CD;
        }
        v
    }

    /// acm_tty_tiocmset: DTR and RTS set and cleared; sent if changed.
    pub fn tiocmset(&self, set: u32, clear: u32) -> SysResult<()> {
        let bits = |m: u32| {
            (if m & TIOCM_DTR != 0 { CTRL_DTR } else { 0 })
                | (if m & TIOCM_RTS != 0 { CTRL_RTS } else { 0 })
        };
        let newctrl = {
            let mut st = self.state();
            let n = (st.ctrlout & !bits(clear)) | bits(set);
            if n == st.ctrlout {
                return Ok(());
            }
            st.ctrlout = n;
            n
        };
        self.set_control(newctrl)
    }

    /// An open (tty_port_open): the first activates the port; every open
    /// raises DTR and RTS unless the baud rate is B0. Err: the device went.
    pub fn open(&self) -> SysResult<u64> {
        let first = {
            let mut st = self.state();
            if st.gone {
                return Err(Errno::ENODEV);
            }
            st.opens += 1;
            st.opens == 1
        };
        if first {
            if let Err(e) = self.activate() {
                self.state().opens -= 1;
                return Err(e);
            }
        }
        let (baud0, hangups) = {
            let st = self.state();
            (st.termios.cflag & termios::CBAUD == termios::B0, st.hangups)
        };
        if !baud0 {
            // tty_port_raise_dtr_rts: acm_port_dtr_rts(true).
            self.state().ctrlout = CTRL_DTR | CTRL_RTS;
            let _ = self.set_control(CTRL_DTR | CTRL_RTS);
        }
        Ok(hangups)
    }

    /// acm_port_activate: the notification URB, the termios, the read
    /// URBs.
    fn activate(&self) -> SysResult<()> {
        let (tx, rx) = mpsc::channel();
        {
            let mut st = self.state();
            st.session += 1;
            let t = st.termios;
            st.ldisc = NTty::with_termios(&t);
            st.throttled = false;
            st.flip.clear();
            st.out.clear();
            st.worker = Some(tx);
        }
        let me = self.me.clone();
        std::thread::Builder::new()
            .name(format!("monfs-{}", self.name()))
            .spawn(move || {
                for w in rx {
                    let Some(a) = me.upgrade() else {
                        break;
                    };
                    match w {
                        Work::Read(slot) => a.submit_read(slot),
                        Work::Notify => a.submit_notify(),
                        Work::Flush => a.flush_out(),
                    }
                }
            })
            .map_err(|_| Errno::ENOMEM)?;
        self.submit_notify();
        let t = self.state().termios;
        self.set_termios(None, &t)?;
        for slot in 0..ACM_NR {
            self.submit_read(slot);
        }
        Ok(())
    }

    /// Submit the notification URB (if the control interface has one).
    fn submit_notify(&self) {
        let Some((ep, mps, _)) = self.layout.notify else {
            return;
        };
        let (session, uses) = {
            let mut st = self.state();
            if st.gone || st.opens == 0 {
                return;
            }
            let Some(uses) = st.notify.take() else {
                return;
            };
            (st.session, uses)
        };
        let u = urb(
            TransferType::Interrupt,
            ep,
            u32::from(mps),
            Vec::new(),
            NO_DMA_MAP | DIR_IN,
        );
        let r = self.submit_as(u, session, UrbKind::Notify(uses));
        let mut st = self.state();
        match r {
            Some(id) => st.notify.submitted(uses, id),
            None => st.notify.free(uses),
        }
    }

    /// Submit read URB `slot` (acm_submit_read_urb).
    fn submit_read(&self, slot: usize) {
        let (session, uses) = {
            let mut st = self.state();
            if st.gone || st.opens == 0 || st.throttled {
                return;
            }
            let Some(uses) = st.reads[slot].take() else {
                return;
            };
            (st.session, uses)
        };
        let u = urb(
            TransferType::Bulk,
            self.layout.bulk_in.0,
            self.layout.readsize(),
            Vec::new(),
            NO_DMA_MAP | DIR_IN,
        );
        let r = self.submit_as(u, session, UrbKind::Read(slot, uses));
        let mut st = self.state();
        match r {
            Some(id) => st.reads[slot].submitted(uses, id),
            None => st.reads[slot].free(uses),
        }
    }

    /// Submit `u` as URB `what` of session `session`; its id, None if it
    /// was refused. A URB submitted while the port closed (its session
    /// ended meanwhile) is killed at once.
    fn submit_as(&self, u: UrbRequest, session: u64, what: UrbKind) -> Option<u64> {
        let done = Arc::new(Done {
            acm: self.me.clone(),
            session,
            what,
        });
        let id = self.port.submit(self.dev, u, done).ok()?;
        if self.state().session != session {
            let _ = self.port.cancel(self.dev, id);
        }
        Some(id)
    }

    /// Queue `data` for the device; whether it fit (the queue's bound).
    pub fn queue_write(&self, data: &[u8]) -> bool {
        {
            let mut st = self.state();
            if st.out.len() + data.len() > OUT_QUEUE && !st.out.is_empty() {
                return false;
            }
            st.out.extend(data);
        }
        self.flush_out();
        true
    }

    /// Send what waits for a free write buffer (acm_tty_write, acm_start_wb).
    fn flush_out(&self) {
        loop {
            let (chunk, session, wid) = {
                let mut st = self.state();
                if st.gone || st.opens == 0 || st.out.is_empty() || st.writes.len() >= ACM_NW {
                    return;
                }
                if st.ldisc.stopped() {
                    return;
                }
                let n = st.out.len().min(self.layout.writesize());
                let chunk: Vec<u8> = st.out.drain(..n).collect();
                st.next_write += 1;
                let wid = st.next_write;
                st.writes.push((wid, None, n));
                (chunk, st.session, wid)
            };
            let len = chunk.len();
            let u = urb(
                TransferType::Bulk,
                self.layout.bulk_out.0,
                len as u32,
                chunk,
                NO_DMA_MAP,
            );
            let r = self.submit_as(u, session, UrbKind::Write(wid));
            let mut st = self.state();
            match r {
                Some(id) => {
                    if let Some(w) = st.writes.iter_mut().find(|w| w.0 == wid) {
                        w.1 = Some(id);
                    }
                }
                None => {
                    st.writes.retain(|w| w.0 != wid);
                    return;
                }
            }
        }
    }

    /// Bytes not yet sent: queued and in flight (TIOCOUTQ counts the write
    /// buffers in use, each as a whole buffer, as acm_tty_chars_in_buffer
    /// does).
    pub fn outq(&self, st: &PortState) -> usize {
        st.writes.len() * self.layout.writesize() + st.out.len()
    }

    /// Whether every write went out.
    pub fn drained(st: &PortState) -> bool {
        st.writes.is_empty() && st.out.is_empty()
    }

    /// Let the worker send queued output now (a START char, a flush).
    pub fn kick(&self) {
        if let Some(w) = &self.state().worker {
            let _ = w.send(Work::Flush);
        }
    }

    /// A read made room: what waited in the flip buffer goes to the line
    /// discipline, and a throttled port is let go when little is left to
    /// read (n_tty_check_unthrottle), its free read URBs submitted again.
    pub fn check_unthrottle(&self) {
        let mut st = self.state();
        if !st.flip.is_empty() {
            let flip = std::mem::take(&mut st.flip);
            self.receive(&mut st, &flip);
        }
        if !st.throttled || !st.ldisc.unthrottle_wanted() {
            return;
        }
        st.throttled = false;
        if let Some(w) = &st.worker {
            for slot in 0..ACM_NR {
                let _ = w.send(Work::Read(slot));
            }
        }
    }

    /// A URB of session `session` completed.
    fn completed(&self, session: u64, what: UrbKind, r: UrbResult) {
        let mut st = self.state();
        if st.session != session {
            return;
        }
        match what {
            UrbKind::Read(slot, uses) => {
                st.reads[slot].free(uses);
                let mut data = r.data;
                data.truncate(r.actual_length as usize);
                if r.status == 0 && !data.is_empty() {
                    if st.flip.is_empty() {
                        self.receive(&mut st, &data);
                    } else if st.flip.len() + data.len() <= FLIP_MAX {
                        st.flip.extend_from_slice(&data);
                    }
                }
                // acm_read_bulk_callback: a killed or failed URB stops.
                let stopped = matches!(
                    -r.status,
                    libc::ENOENT
                        | libc::ECONNRESET
                        | libc::ESHUTDOWN
                        | libc::EPIPE
                        | libc::EPROTO
                        | libc::EOVERFLOW
                );
                if !stopped && !st.throttled {
                    if let Some(w) = &st.worker {
                        let _ = w.send(Work::Read(slot));
                    }
                }
                drop(st);
                self.wake();
            }
            UrbKind::Notify(uses) => {
                st.notify.free(uses);
                if r.status == 0 {
                    let n = (r.actual_length as usize).min(r.data.len());
                    self.notification(&mut st, &r.data[..n]);
                }
                if !matches!(-r.status, libc::ENOENT | libc::ECONNRESET | libc::ESHUTDOWN) {
                    if let Some(w) = &st.worker {
                        let _ = w.send(Work::Notify);
                    }
                }
                drop(st);
                self.wake();
            }
            UrbKind::Write(wid) => {
                st.writes.retain(|w| w.0 != wid);
                if let Some(w) = &st.worker {
                    let _ = w.send(Work::Flush);
                }
                drop(st);
                self.wake();
            }
        }
    }

    /// Bytes from the device to the line discipline (tty_flip_buffer_push,
    /// n_tty_receive_buf2): its echoes go out, what it had no room for
    /// waits in the flip buffer, and it may throttle the port.
    fn receive(&self, st: &mut PortState, data: &[u8]) {
        let t = st.termios;
        let got = st.ldisc.receive(&t, data);
        if got.flush_output {
            st.out.clear();
        }
        let kick = !got.echo.is_empty() || got.start_output;
        st.out.extend(&got.echo);
        if kick {
            if let Some(w) = &st.worker {
                let _ = w.send(Work::Flush);
            }
        }
        if got.throttle {
            st.throttled = true;
        }
        if got.consumed < data.len() && st.flip.len() + data.len() - got.consumed <= FLIP_MAX {
            st.flip.extend_from_slice(&data[got.consumed..]);
            st.throttled = true;
        }
    }

    /// acm_process_notification: a SERIAL_STATE sets the modem lines.
    fn notification(&self, st: &mut PortState, buf: &[u8]) {
        if buf.len() < 8 || buf[1] != 0x20 {
            return;
        }
        if u16::from_le_bytes([buf[6], buf[7]]) != 2 || buf.len() < 10 {
            tracing::debug!("{}: malformed serial state", self.name());
            return;
        }
        let newctrl = u16::from_le_bytes([buf[8], buf[9]]);
        let clocal = st.termios.cflag & termios::CLOCAL != 0;
        if !clocal && st.ctrlin & !newctrl & SS_DCD != 0 {
            st.hangups += 1;
        }
        let diff = st.ctrlin ^ newctrl;
        st.ctrlin = newctrl;
        let c = &mut st.icount;
        if diff & SS_DSR != 0 {
            c.dsr += 1;
        }
        if diff & SS_DCD != 0 {
            c.dcd += 1;
        }
        if newctrl & SS_BREAK != 0 {
            c.brk += 1;
        }
        if newctrl & SS_RING != 0 {
            c.rng += 1;
        }
        if newctrl & SS_FRAMING != 0 {
            c.frame += 1;
        }
        if newctrl & SS_PARITY != 0 {
            c.parity += 1;
        }
        if newctrl & SS_OVERRUN != 0 {
            c.overrun += 1;
        }
    }

    /// Kill the session's URBs (acm_poison_urbs): the notification URB,
    /// the writes, the reads.
    fn kill_urbs(&self) {
        let ids: Vec<u64> = {
            let mut st = self.state();
            st.session += 1;
            st.worker = None;
            st.out.clear();
            let mut ids: Vec<u64> = st.notify.id.into_iter().collect();
            ids.extend(st.writes.drain(..).filter_map(|w| w.1));
            ids.extend(st.reads.iter().filter_map(|r| r.id));
            st.notify = UrbSlot::default();
            st.reads = [UrbSlot::default(); ACM_NR];
            ids
        };
        for id in ids {
            let _ = self.port.cancel(self.dev, id);
        }
    }

    /// The last close (tty_port_close): wait for the writes (at most
    /// `closing_wait`), drop DTR and RTS with HUPCL, kill the URBs.
    pub fn close(&self) {
        let end = Instant::now() + CLOSING_WAIT;
        let mut st = self.state();
        if st.opens == 0 {
            return;
        }
        st.opens -= 1;
        if st.opens > 0 {
            return;
        }
        while !st.gone && !Self::drained(&st) && Instant::now() < end {
            st = self.wait(st, Duration::from_millis(50));
        }
        let hupcl = st.termios.cflag & termios::HUPCL != 0;
        let gone = st.gone;
        drop(st);
        if hupcl && !gone {
            self.state().ctrlout = 0;
            let _ = self.set_control(0);
        }
        self.kill_urbs();
        self.wake();
    }

    /// acm_disconnect: the port hangs up and its URBs end.
    pub fn disconnect(&self) {
        {
            let mut st = self.state();
            st.gone = true;
            st.hangups += 1;
        }
        self.kill_urbs();
        self.wake();
    }
}
