//! A tty port of a USB serial driver (`drivers/tty/tty_port.c`, the
//! usb-serial core's `drivers/usb/serial/usb-serial.c` and `generic.c`,
//! cdc_acm's port): its open files' shared state, the URBs it keeps in
//! flight through the port usbfs uses, and what it does at the first open,
//! the last close and a disconnect. What differs per driver (the requests
//! it sends, what a read URB's data holds) is its [`PortDriver`]:
//! [`super::acm`], [`super::ftdi`], [`super::cp210x`], [`super::ch341`].
//!
//! * The first open (tty_port_open's activate) submits the driver's
//!   interrupt URB if it has one (cdc_acm's notifications, ch341's modem
//!   status), lets the driver open ([`PortDriver::open`]), sets the termios
//!   (ch341 first: [`PortDriver::termios_first`]), and submits the read
//!   URBs; every open then raises DTR and RTS as tty_port_block_til_ready
//!   does while the baud rate is not B0.
//! * Read URBs' data goes through the driver ([`PortDriver::process_read`])
//!   to the line discipline and the URB is submitted again, unless the port
//!   is throttled (its read buffer nearly full).
//! * Writes go through the line discipline's output
//!   ([`Port::write`], n_tty_write's loop) to the driver's write: the
//!   usb-serial core's write FIFO of a page ([`PortDriver::write_fifo`]), or
//!   cdc_acm's write buffers, one per write call; out as bulk OUT URBs of
//!   the driver's size, as many at a time as it has. What does not fit waits
//!   for room ([`Port::write_room`]): a write URB completing makes some.
//! * The last close waits for the writes, drops DTR and RTS with HUPCL,
//!   kills the URBs and lets the driver close ([`PortDriver::close`]); a
//!   disconnect hangs the port up.
//!
//! A completion comes on the bus's thread with its lock held: what it
//! submits again goes through the port's worker thread.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::WakerSlot;
use crate::usbcore::device::{
    control_msg, CoreError, DevRef, TransferType, UrbDone, UrbRequest, UrbResult, UsbCorePort,
};

use super::ldisc::NTty;
use super::serial;
use super::termios::{self, Termios};

/// `USB_CTRL_SET_TIMEOUT`, ftdi_sio's `WDR_TIMEOUT`.
pub const CTRL_TIMEOUT: Duration = Duration::from_secs(5);
/// `closing_wait`'s default (30 s): how long the last close waits for the
/// writes.
const CLOSING_WAIT: Duration = Duration::from_secs(30);
/// Bytes the line discipline's echoes and the driver's own bytes (a STOP
/// or START character, ch341's break) may queue past the write room.
const OUT_EXTRA: usize = 64 << 10;
/// Bytes the line discipline had no room for, kept to feed it again (the
/// tty's flip buffer); past this, read URBs' data is dropped.
const FLIP_MAX: usize = 64 << 10;

/// `URB_NO_TRANSFER_DMA_MAP` and `URB_DIR_IN` as transfer flags.
const NO_DMA_MAP: u32 = 0x0004;
const DIR_IN: u32 = 0x0200;

/// `TIOCM_DTR`.
pub const TIOCM_DTR: u32 = 0x002;
/// `TIOCM_RTS`.
pub const TIOCM_RTS: u32 = 0x004;
/// `TIOCM_CTS`.
pub const TIOCM_CTS: u32 = 0x020;
/// `TIOCM_CD`.
pub const TIOCM_CD: u32 = 0x040;
/// `TIOCM_RI`.
pub const TIOCM_RI: u32 = 0x080;
/// `TIOCM_DSR`.
pub const TIOCM_DSR: u32 = 0x100;

/// `struct async_icount`: what the driver counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Icount {
    /// CTS changes.
    pub cts: u32,
    /// DSR changes.
    pub dsr: u32,
    /// Rings.
    pub rng: u32,
    /// DCD changes.
    pub dcd: u32,
    /// Bytes received.
    pub rx: u32,
    /// Bytes sent.
    pub tx: u32,
    /// Framing errors.
    pub frame: u32,
    /// Overruns.
    pub overrun: u32,
    /// Parity errors.
    pub parity: u32,
    /// Breaks.
    pub brk: u32,
}

/// A set of URBs a port keeps: on which endpoint, how long, how many.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Urbs {
    /// The endpoint's address.
    pub endpoint: u8,
    /// Each URB's buffer.
    pub length: usize,
    /// How many.
    pub count: usize,
}

impl Urbs {
    /// A usb-serial port's read or write URBs (two) on bulk endpoint
    /// `endpoint` of packet size `packet`, for a driver whose
    /// `bulk_in_size` or `bulk_out_size` is `size` (0: unset): the larger
    /// of the two, as usb_serial_probe sizes them.
    pub fn usb_serial(endpoint: u8, packet: u16, size: usize) -> Urbs {
        Urbs {
            endpoint,
            length: size.max(usize::from(packet)),
            count: serial::URBS,
        }
    }
}

/// What differs between the USB serial drivers' ports: the requests they
/// send and what their URBs carry. Calls that send requests run on the
/// caller's thread with no lock of the port's held; `process_read`,
/// `notification` and `prepare_write` run with the port's state locked.
/// The defaults are the usb-serial core's (its `ttyUSBN` and its generic
/// functions, as usb-serial.c sets them for a driver that has none);
/// cdc_acm overrides them.
pub trait PortDriver: Send + Sync {
    /// The driver's name (its sysfs `driver` link, the port device's
    /// `DRIVER`).
    fn driver_name(&self) -> &'static str;
    /// What the kernel logs when the port comes (after the tty's name).
    fn describe(&self) -> String;
    /// The tty's name without its number (`ttyUSB`, `ttyACM`).
    fn tty_name(&self) -> &'static str {
        serial::TTY_NAME
    }
    /// The tty driver's major.
    fn major(&self) -> u32 {
        serial::USB_SERIAL_TTY_MAJOR
    }
    /// The tty class device's path below `/sys`, from the interface's and
    /// the tty's name (a usb-serial port's is below its port device).
    fn devpath(&self, iface_devpath: &str, name: &str) -> String {
        serial::tty_devpath(iface_devpath, name)
    }
    /// The read URBs.
    fn read_urbs(&self) -> Urbs;
    /// The write URBs.
    fn write_urbs(&self) -> Urbs;
    /// An interrupt IN URB kept in flight while the port is open (cdc_acm's
    /// notifications): endpoint and length.
    fn notify_urb(&self) -> Option<(u8, u16)> {
        None
    }
    /// The driver's part of the first open, before the termios is set and
    /// the read URBs go out (after them with
    /// [`PortDriver::termios_first`]).
    fn open(&self, _p: &Port) -> SysResult<()> {
        Ok(())
    }
    /// Whether the first open sets the termios before it submits the
    /// interrupt URB and calls [`PortDriver::open`] (ch341_open) rather than
    /// after (cdc_acm's activate, ftdi_open, cp210x_open).
    fn termios_first(&self) -> bool {
        false
    }
    /// The driver's part of the last close, once its URBs are killed
    /// (cp210x's PURGE and UART disable).
    fn close(&self, _p: &Port) {}
    /// Whether the last close kills the interrupt URB after the write and
    /// read URBs (ch341_close, after usb_serial_generic_close) rather than
    /// first (acm_port_shutdown).
    fn notify_killed_last(&self) -> bool {
        false
    }
    /// Set the device's line as `new` says (after `old`; None at the first
    /// open); the driver may change `new` to what it could set.
    fn set_termios(&self, p: &Port, old: Option<&Termios>, new: &mut Termios) -> SysResult<()>;
    /// Raise (open) or drop (last close with HUPCL) DTR and RTS.
    fn dtr_rts(&self, p: &Port, on: bool);
    /// The modem lines (TIOCMGET).
    fn tiocmget(&self, p: &Port) -> SysResult<u32>;
    /// Set and clear DTR and RTS (TIOCMSET, TIOCMBIS, TIOCMBIC).
    fn tiocmset(&self, p: &Port, set: u32, clear: u32) -> SysResult<()>;
    /// A break on or off (EOPNOTSUPP: the device cannot send one).
    fn break_ctl(&self, p: &Port, on: bool) -> SysResult<()>;
    /// A read URB's data: what goes to the line discipline (the driver
    /// takes its own bytes out, counts and sets the modem lines).
    fn process_read<'a>(&self, st: &mut PortState, data: &'a [u8]) -> Cow<'a, [u8]>;
    /// Whether a read URB that completed with `status` is not submitted
    /// again.
    fn read_stops(&self, status: i32) -> bool {
        serial::read_stops(status)
    }
    /// The notification URB's data.
    fn notification(&self, _st: &mut PortState, _buf: &[u8]) {}
    /// A write URB's buffer from `chunk` (at most the write URB's length
    /// of queued bytes).
    fn prepare_write(&self, _st: &mut PortState, chunk: Vec<u8>) -> Vec<u8> {
        chunk
    }
    /// The write FIFO's size: a write takes what fits in it
    /// (usb_serial_generic_write, a page, [`serial::WRITE_FIFO`]). None: each
    /// write call fills one of the write URBs' buffers, at most its length,
    /// while one is free (acm_tty_write).
    fn write_fifo(&self) -> Option<usize> {
        Some(serial::WRITE_FIFO)
    }
    /// Bytes not yet sent with `queued` bytes in `buffers` write calls
    /// waiting and write URBs of `lengths` in flight (TIOCOUTQ,
    /// chars_in_buffer).
    fn chars_in_buffer(&self, queued: usize, _buffers: usize, lengths: &[usize]) -> usize {
        serial::chars_in_buffer(queued, lengths)
    }
    /// Whether the device's transmitter is empty (tx_empty; None: the
    /// driver has no such call and the tty layer waits for the URBs only).
    fn tx_empty(&self, _p: &Port) -> Option<bool> {
        None
    }
    /// Fill the driver's fields of `struct serial_struct` (TIOCGSERIAL).
    fn serial(&self, _b: &mut [u8]) {}
    /// The modem lines TIOCMIWAIT can wait for
    /// (usb_serial_generic_tiocmiwait's).
    fn miwait_lines(&self) -> u32 {
        TIOCM_RI | TIOCM_DSR | TIOCM_CD | TIOCM_CTS
    }
    /// Whether the driver throttles: a usb-serial driver without `throttle`
    /// (ch341) keeps its read URBs going when the line discipline is full,
    /// and what the flip buffer has no room for is lost.
    fn throttles(&self) -> bool {
        true
    }
    /// Whether the driver answers TIOCMIWAIT at all (a usb-serial driver
    /// without `tiocmiwait`, cp210x, leaves it ENOTTY).
    fn has_tiocmiwait(&self) -> bool {
        true
    }
    /// Whether the driver answers TIOCGICOUNT (a usb-serial driver without
    /// `get_icount`, ch341, leaves it ENOTTY).
    fn has_icount(&self) -> bool {
        true
    }
    /// Attributes the driver adds to the interface: (name, text).
    fn interface_attributes(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// Attributes the driver adds to its usb-serial port device: (name,
    /// mode), read with [`PortDriver::show_attr`] and written with
    /// [`PortDriver::store_attr`].
    fn attributes(&self) -> Vec<(&'static str, u32)> {
        Vec::new()
    }
    /// The text of attribute `name`.
    fn show_attr(&self, _name: &str) -> String {
        String::new()
    }
    /// Attribute `name`'s store function with `text` (the driver's
    /// request to the device).
    fn store_attr(&self, _p: &Port, _name: &str, _text: &str) -> SysResult<()> {
        Err(Errno::EIO)
    }
}

/// The port's state.
pub struct PortState {
    /// Open files.
    pub opens: u32,
    /// The device went (disconnected).
    pub gone: bool,
    /// The port was hung up (by a disconnect, or DCD dropping without
    /// CLOCAL): files opened before see the hung-up tty.
    pub hangups: u64,
    /// The tty's termios (kept from one open to the next, as the tty
    /// driver keeps it).
    pub termios: Termios,
    /// The line discipline of the open tty.
    pub ldisc: NTty,
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
    reads: Vec<UrbSlot>,
    /// The notification URB.
    notify: UrbSlot,
    /// The write URBs in flight: (their own number, URB id once known,
    /// length).
    writes: Vec<(u64, Option<u64>, usize)>,
    /// The next write URB's own number.
    next_write: u64,
    /// Bytes waiting for a free write URB (the write FIFO).
    out: VecDeque<u8>,
    /// Without a write FIFO: the lengths of the write calls in `out`, each
    /// its own URB.
    calls: VecDeque<usize>,
    /// Write URBs taken (in `writes`) and not yet submitted, in order:
    /// (buffer, session, own number).
    outgoing: VecDeque<(Vec<u8>, u64, u64)>,
    /// The core refused a write URB: the device is going (cdc_acm's
    /// `acm->dev` is gone, usb-serial's submissions fail). Writes from
    /// then on are ENODEV, also one whose bytes another thread's flush
    /// took and lost.
    refused: bool,
    /// Throttled: read URBs are not submitted again.
    throttled: bool,
    /// Received bytes the line discipline had no room for yet.
    flip: Vec<u8>,
    /// Work for the worker thread.
    worker: Option<mpsc::Sender<Work>>,
}

impl PortState {
    /// Drop what waits for a write URB (the write FIFO's bytes).
    fn clear_out(&mut self) {
        self.out.clear();
        self.calls.clear();
    }

    /// A modem line's change: DCD dropping without CLOCAL hangs the port
    /// up (usb_serial_handle_dcd_change, acm_process_notification).
    pub fn dcd_dropped(&mut self) {
        if self.termios.cflag & termios::CLOCAL == 0 {
            self.hangups += 1;
        }
    }
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

/// One tty port of a USB serial driver.
pub struct Port {
    /// Its USB device.
    pub dev: DevRef,
    /// Its interface.
    pub interface: u8,
    /// Its major: its driver's, or the one reserved for the driver's
    /// character devices ([`super::TtyCore::use_char_devices`]).
    pub major: u32,
    /// Its minor.
    pub minor: u32,
    /// The interface's path below `/sys`.
    pub iface_devpath: String,
    /// Its driver's part.
    pub driver: Box<dyn PortDriver>,
    port: Arc<dyn UsbCorePort>,
    st: Mutex<PortState>,
    /// Modem line changes, write room, drained writes, hangups.
    cv: Condvar,
    /// The open files' wakers.
    wakers: Mutex<Vec<Weak<WakerSlot>>>,
    /// Held while write URBs are submitted, so that they go in the order
    /// they were taken.
    sending: Mutex<()>,
    me: Weak<Port>,
}

/// A URB of the port, completed.
struct Done {
    port: Weak<Port>,
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
        if let Some(p) = self.port.upgrade() {
            p.completed(self.session, self.what, r);
        }
    }
}

/// A URB request with the fields the serial drivers' URBs leave at 0.
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

impl Port {
    /// A new port of `driver` for interface `interface` of `dev`, its
    /// termios the tty driver's initial one (9600 8N1, HUPCL, CLOCAL).
    pub fn new(
        dev: DevRef,
        interface: u8,
        (major, minor): (u32, u32),
        iface_devpath: String,
        driver: Box<dyn PortDriver>,
        port: Arc<dyn UsbCorePort>,
    ) -> Arc<Port> {
        let termios = Termios::std(
            termios::B9600 | termios::CS8 | termios::CREAD | termios::HUPCL | termios::CLOCAL,
        );
        let reads = driver.read_urbs().count;
        Arc::new_cyclic(|me| Port {
            dev,
            interface,
            major,
            minor,
            iface_devpath,
            driver,
            port,
            st: Mutex::new(PortState {
                opens: 0,
                gone: false,
                hangups: 0,
                termios,
                ldisc: NTty::new(),
                icount: Icount::default(),
                exclusive: false,
                winsize: [0; 8],
                session: 0,
                reads: vec![UrbSlot::default(); reads],
                notify: UrbSlot::default(),
                writes: Vec::new(),
                next_write: 0,
                out: VecDeque::new(),
                calls: VecDeque::new(),
                outgoing: VecDeque::new(),
                refused: false,
                throttled: false,
                flip: Vec::new(),
                worker: None,
            }),
            cv: Condvar::new(),
            wakers: Mutex::new(Vec::new()),
            sending: Mutex::new(()),
            me: me.clone(),
        })
    }

    /// `ttyACMN`, `ttyUSBN`.
    pub fn name(&self) -> String {
        format!("{}{}", self.driver.tty_name(), self.minor)
    }

    /// Its tty class device's path below `/sys`.
    pub fn devpath(&self) -> String {
        self.driver.devpath(&self.iface_devpath, &self.name())
    }

    /// The tty class device's variables (`dev_uevent`).
    pub fn uevent_vars(&self) -> Vec<(String, String)> {
        vec![
            ("MAJOR".into(), self.major.to_string()),
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

    /// `usb_control_msg` on ep0: `data` out, or (request type's IN bit)
    /// `data.len()` bytes in; waits at most `timeout`. The IN data.
    pub fn control(
        &self,
        request_type: u8,
        request: u8,
        value: u16,
        index: u16,
        data: &[u8],
        timeout: Duration,
    ) -> SysResult<Vec<u8>> {
        control_msg(
            &*self.port,
            self.dev,
            request_type,
            request,
            value,
            index,
            data,
            data.len() as u16,
            timeout,
        )
        .map(|(_, d)| d)
    }

    /// The driver's set_termios with the port's termios after `old`; what
    /// the driver changed is kept.
    pub fn set_termios(&self, old: Option<&Termios>) -> SysResult<()> {
        let mut t = self.state().termios;
        let r = self.driver.set_termios(self, old, &mut t);
        self.state().termios = t;
        r
    }

    /// The modem lines.
    pub fn tiocmget(&self) -> SysResult<u32> {
        self.driver.tiocmget(self)
    }

    /// Set and clear DTR and RTS.
    pub fn tiocmset(&self, set: u32, clear: u32) -> SysResult<()> {
        self.driver.tiocmset(self, set, clear)
    }

    /// A break on or off.
    pub fn break_ctl(&self, on: bool) -> SysResult<()> {
        self.driver.break_ctl(self, on)
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
                self.kill_urbs();
                return Err(e);
            }
        }
        let (baud0, hangups) = {
            let st = self.state();
            (st.termios.cflag & termios::CBAUD == termios::B0, st.hangups)
        };
        if !baud0 {
            // tty_port_block_til_ready: tty_port_raise_dtr_rts.
            self.driver.dtr_rts(self, true);
        }
        Ok(hangups)
    }

    /// The port's activate: the notification URB, the driver's open, the
    /// termios, the read URBs.
    fn activate(&self) -> SysResult<()> {
        let (tx, rx) = mpsc::channel();
        {
            let mut st = self.state();
            st.session += 1;
            let t = st.termios;
            st.ldisc = NTty::with_termios(&t);
            st.throttled = false;
            st.flip.clear();
            st.clear_out();
            st.worker = Some(tx);
        }
        let me = self.me.clone();
        std::thread::Builder::new()
            .name(format!("monfs-{}", self.name()))
            .spawn(move || {
                for w in rx {
                    let Some(p) = me.upgrade() else {
                        break;
                    };
                    match w {
                        Work::Read(slot) => p.submit_read(slot),
                        Work::Notify => p.submit_notify(),
                        Work::Flush => {
                            let _ = p.flush_out();
                        }
                    }
                }
            })
            .map_err(|_| Errno::ENOMEM)?;
        if self.driver.termios_first() {
            self.set_termios(None)?;
            self.submit_notify();
            self.driver.open(self)?;
        } else {
            self.submit_notify();
            self.driver.open(self)?;
            self.set_termios(None)?;
        }
        for slot in 0..self.driver.read_urbs().count {
            self.submit_read(slot);
        }
        Ok(())
    }

    /// Submit the notification URB (if the driver has one).
    fn submit_notify(&self) {
        let Some((ep, len)) = self.driver.notify_urb() else {
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
            u32::from(len),
            Vec::new(),
            NO_DMA_MAP | DIR_IN,
        );
        let r = self.submit_as(u, session, UrbKind::Notify(uses));
        let mut st = self.state();
        match r {
            Ok(id) => st.notify.submitted(uses, id),
            Err(_) => st.notify.free(uses),
        }
    }

    /// Submit read URB `slot`.
    fn submit_read(&self, slot: usize) {
        let (session, uses) = {
            let mut st = self.state();
            if st.gone || st.opens == 0 || st.throttled {
                return;
            }
            let Some(uses) = st.reads.get_mut(slot).and_then(UrbSlot::take) else {
                return;
            };
            (st.session, uses)
        };
        let r = self.driver.read_urbs();
        let u = urb(
            TransferType::Bulk,
            r.endpoint,
            r.length as u32,
            Vec::new(),
            NO_DMA_MAP | DIR_IN,
        );
        let r = self.submit_as(u, session, UrbKind::Read(slot, uses));
        let mut st = self.state();
        match r {
            Ok(id) => st.reads[slot].submitted(uses, id),
            Err(_) => st.reads[slot].free(uses),
        }
    }

    /// Submit `u` as URB `what` of session `session`; its id, or why the
    /// core refused it. A URB submitted while the port closed (its session
    /// ended meanwhile) is killed at once.
    fn submit_as(&self, u: UrbRequest, session: u64, what: UrbKind) -> Result<u64, CoreError> {
        let done = Arc::new(Done {
            port: self.me.clone(),
            session,
            what,
        });
        let id = self.port.submit(self.dev, u, done)?;
        if self.state().session != session {
            let _ = self.port.cancel(self.dev, id);
        }
        Ok(id)
    }

    /// Room for a write (tty_write_room): what the write FIFO has left
    /// (usb_serial_generic_write_room); without one, a write URB's length
    /// while one is free (acm_tty_write_room).
    pub fn write_room(&self, st: &PortState) -> usize {
        let w = self.driver.write_urbs();
        match self.driver.write_fifo() {
            Some(size) => size.saturating_sub(st.out.len()),
            None if st.writes.len() + st.calls.len() < w.count => w.length,
            None => 0,
        }
    }

    /// The driver's write (tty_operations.write) of `data`: what fits in
    /// the write room goes out (its URBs taken, submitted by
    /// [`Port::flush_out`]); how many bytes it took.
    fn driver_write(&self, st: &mut PortState, data: &[u8]) -> usize {
        let room = self.write_room(st);
        let n = match self.driver.write_fifo() {
            Some(_) => data.len().min(room),
            None => data.len().min(room).min(self.driver.write_urbs().length),
        };
        if n == 0 {
            return 0;
        }
        st.out.extend(&data[..n]);
        if self.driver.write_fifo().is_none() {
            st.calls.push_back(n);
        }
        self.take_urbs(st);
        n
    }

    /// n_tty_write's loop, once: `data` through the line discipline's
    /// output processing (OPOST: a block of plain characters, then one
    /// character processed, and again, each a write of the driver's) or as
    /// it is, as far as the write room lets it, each write's URBs submitted
    /// before the next. How many bytes of `data` it took, and the error
    /// that stopped it: a write URB the core refused (the device went),
    /// whose write is not counted, as the driver's write returns the error.
    pub fn write(&self, data: &[u8]) -> (usize, Option<Errno>) {
        {
            let mut st = self.state();
            if st.refused {
                return (0, Some(Errno::ENODEV));
            }
            let t = st.termios;
            let echoes = st.ldisc.pending_echoes(&t);
            self.queue_extra(&mut st, &echoes);
        }
        let mut i = 0;
        // OPOST: a block of plain characters next, else one character.
        let mut block = true;
        while i < data.len() {
            let mut st = self.state();
            let t = st.termios;
            let took = if !t.o(termios::OPOST) {
                match self.driver_write(&mut st, &data[i..]) {
                    0 => break,
                    n => n,
                }
            } else if block {
                // process_output_block: as many plain characters as there
                // is room for (maybe none).
                block = false;
                match self.write_room(&st) {
                    0 => 0,
                    room => {
                        let k = st.ldisc.output_block(&t, &data[i..], room);
                        self.driver_write(&mut st, &data[i..i + k])
                    }
                }
            } else {
                // process_output: the next character, processed.
                block = true;
                let room = self.write_room(&st);
                let Some(out) = st.ldisc.output_char(&t, data[i], room) else {
                    break;
                };
                if !out.is_empty() {
                    self.driver_write(&mut st, &out);
                }
                1
            };
            drop(st);
            if let Err(e) = self.flush_out() {
                return (i, Some(e));
            }
            // Its bytes may have gone out in another thread's flush that
            // the core refused: as acm_tty_write's, the write fails.
            if self.state().refused {
                return (i, Some(Errno::ENODEV));
            }
            i += took;
        }
        (i, None)
    }

    /// tty_driver_flush_buffer (TCOFLUSH): what waits in the write FIFO
    /// is dropped (usb_serial_generic_flush_buffer); cdc_acm, without one,
    /// unlinks its write URBs in flight (acm_tty_flush_buffer).
    pub fn flush_buffer(&self) {
        let ids: Vec<u64> = {
            let mut st = self.state();
            st.clear_out();
            match self.driver.write_fifo() {
                Some(_) => Vec::new(),
                None => st.writes.iter().filter_map(|w| w.1).collect(),
            }
        };
        for id in ids {
            let _ = self.port.cancel(self.dev, id);
        }
        self.wake();
    }

    /// Queue bytes of the line discipline's or the driver's own (echoes,
    /// a STOP or START character) past the write room, up to a bound.
    fn queue_extra(&self, st: &mut PortState, data: &[u8]) {
        if data.is_empty() || st.out.len() + data.len() > OUT_EXTRA {
            return;
        }
        st.out.extend(data);
        if self.driver.write_fifo().is_none() {
            st.calls.push_back(data.len());
        }
        self.take_urbs(st);
    }

    /// Queue the line discipline's or the driver's own bytes for the
    /// device (echoes, a STOP or START character) and send them.
    pub fn queue_write(&self, data: &[u8]) {
        self.queue_extra(&mut self.state(), data);
        let _ = self.flush_out();
    }

    /// Take write URBs for what waits, as many as are free
    /// (acm_start_wb, usb_serial_generic_write_start): to `outgoing`,
    /// submitted by [`Port::flush_out`]. Stopped output (a STOP character
    /// with IXON, TCOOFF) holds nothing back: stop_tty calls the driver's
    /// stop method, which neither cdc_acm nor the usb-serial core has, and
    /// n_tty_write does not look at it.
    fn take_urbs(&self, st: &mut PortState) {
        let w = self.driver.write_urbs();
        while !(st.gone || st.opens == 0 || st.out.is_empty() || st.writes.len() >= w.count) {
            let n = match st.calls.pop_front() {
                Some(c) if c > w.length => {
                    st.calls.push_front(c - w.length);
                    w.length
                }
                Some(c) => c,
                None => st.out.len().min(w.length),
            };
            let chunk: Vec<u8> = st.out.drain(..n).collect();
            let buf = self.driver.prepare_write(st, chunk);
            st.next_write += 1;
            let wid = st.next_write;
            st.writes.push((wid, None, buf.len()));
            let session = st.session;
            st.outgoing.push_back((buf, session, wid));
        }
    }

    /// Submit the write URBs taken, in order, taking more for what waits;
    /// ENODEV if the core refused one (the device went).
    pub fn flush_out(&self) -> SysResult<()> {
        let _sending = self.sending.lock_ok();
        let mut res = Ok(());
        loop {
            let batch: Vec<(Vec<u8>, u64, u64)> = {
                let mut st = self.state();
                self.take_urbs(&mut st);
                st.outgoing.drain(..).collect()
            };
            if batch.is_empty() {
                return res;
            }
            let ep = self.driver.write_urbs().endpoint;
            for (buf, session, wid) in batch {
                let len = buf.len();
                let u = urb(TransferType::Bulk, ep, len as u32, buf, NO_DMA_MAP);
                let r = self.submit_as(u, session, UrbKind::Write(wid));
                let mut st = self.state();
                match r {
                    Ok(id) => {
                        if let Some(w) = st.writes.iter_mut().find(|w| w.0 == wid) {
                            w.1 = Some(id);
                        }
                    }
                    // usb_serial_generic_write_start: the bytes are gone.
                    Err(e) => {
                        st.writes.retain(|w| w.0 != wid);
                        st.refused |= e == CoreError::NoDevice;
                        res = Err(Errno::ENODEV);
                    }
                }
            }
        }
    }

    /// Bytes not yet sent (TIOCOUTQ), as the driver counts them.
    pub fn outq(&self, st: &PortState) -> usize {
        let lengths: Vec<usize> = st.writes.iter().map(|w| w.2).collect();
        self.driver
            .chars_in_buffer(st.out.len(), st.calls.len(), &lengths)
    }

    /// Whether every write URB went out.
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
            for slot in 0..st.reads.len() {
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
                    let data = self.driver.process_read(&mut st, &data).into_owned();
                    if data.is_empty() {
                    } else if st.flip.is_empty() {
                        self.receive(&mut st, &data);
                    } else if st.flip.len() + data.len() <= FLIP_MAX {
                        st.flip.extend_from_slice(&data);
                    }
                }
                if !self.driver.read_stops(r.status) && !st.throttled {
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
                    self.driver.notification(&mut st, &r.data[..n]);
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
    /// waits in the flip buffer, and it may throttle the port (if the
    /// driver throttles).
    fn receive(&self, st: &mut PortState, data: &[u8]) {
        let throttles = self.driver.throttles();
        let t = st.termios;
        let got = st.ldisc.receive(&t, data);
        if got.flush_output {
            st.clear_out();
        }
        let kick = !got.echo.is_empty() || got.start_output;
        if st.out.len() + got.echo.len() <= OUT_EXTRA {
            st.out.extend(&got.echo);
            if !got.echo.is_empty() && self.driver.write_fifo().is_none() {
                st.calls.push_back(got.echo.len());
            }
        }
        if kick {
            if let Some(w) = &st.worker {
                let _ = w.send(Work::Flush);
            }
        }
        if got.throttle && throttles {
            st.throttled = true;
        }
        if got.consumed < data.len() && st.flip.len() + data.len() - got.consumed <= FLIP_MAX {
            st.flip.extend_from_slice(&data[got.consumed..]);
            if throttles {
                st.throttled = true;
            }
        }
    }

    /// Kill the session's URBs: the notification URB, the writes, the
    /// reads.
    fn kill_urbs(&self) {
        let ids: Vec<u64> = {
            let mut st = self.state();
            st.session += 1;
            st.worker = None;
            st.clear_out();
            st.outgoing.clear();
            let notify = st.notify.id;
            let mut ids: Vec<u64> = Vec::new();
            if !self.driver.notify_killed_last() {
                ids.extend(notify);
            }
            ids.extend(st.writes.drain(..).filter_map(|w| w.1));
            ids.extend(st.reads.iter().filter_map(|r| r.id));
            if self.driver.notify_killed_last() {
                ids.extend(notify);
            }
            st.notify = UrbSlot::default();
            let n = st.reads.len();
            st.reads = vec![UrbSlot::default(); n];
            ids
        };
        for id in ids {
            let _ = self.port.cancel(self.dev, id);
        }
    }

    /// The last close (tty_port_close): wait for the writes (at most
    /// `closing_wait`) and for the transmitter where the driver can tell,
    /// drop DTR and RTS with HUPCL, kill the URBs.
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
        drop(st);
        self.wait_tx_empty(end);
        let st = self.state();
        let hupcl = st.termios.cflag & termios::HUPCL != 0;
        let gone = st.gone;
        drop(st);
        if hupcl && !gone {
            self.driver.dtr_rts(self, false);
        }
        self.kill_urbs();
        if !gone {
            self.driver.close(self);
        }
        self.wake();
    }

    /// usb_serial_generic_wait_until_sent's period: the time one character
    /// takes at the port's rate (B0: 9600), at least a jiffy (4 ms).
    pub fn char_time(&self) -> Duration {
        let bps = match self.state().termios.baud_rate() {
            0 => 9600,
            b => b,
        };
        Duration::from_millis(u64::from((10_000 / bps).max(4)))
    }

    /// The driver's wait_until_sent: ask whether the transmitter is empty,
    /// once per character time at the port's baud rate (at least a jiffy),
    /// until it is or `end`.
    fn wait_tx_empty(&self, end: Instant) {
        loop {
            if self.state().gone {
                return;
            }
            match self.driver.tx_empty(self) {
                Some(false) if Instant::now() < end => {}
                _ => return,
            }
            std::thread::sleep(self.char_time());
        }
    }

    /// The disconnect: the port hangs up and its URBs end.
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
