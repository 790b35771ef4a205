//! cdc_acm's side of its tty port (`drivers/usb/class/cdc-acm.c`): the
//! class requests it sends the control interface (SET_LINE_CODING,
//! SET_CONTROL_LINE_STATE, SEND_BREAK), its notification URB's
//! SERIAL_STATE (DCD, DSR, RI and the errors), 16 read URBs of two
//! packets and 16 write buffers of twenty.

use std::borrow::Cow;
use std::sync::Mutex;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;

use super::port::{
    Port, PortDriver, PortState, Urbs, CTRL_TIMEOUT, TIOCM_CD, TIOCM_CTS, TIOCM_DSR, TIOCM_DTR,
    TIOCM_RI, TIOCM_RTS,
};
use super::termios::{self, Termios};

/// `ACM_TTY_MAJOR`.
pub const ACM_TTY_MAJOR: u32 = 166;
/// `ACM_TTY_MINORS`.
pub const ACM_TTY_MINORS: u32 = 256;

/// `ACM_NR`: read URBs.
pub const ACM_NR: usize = 16;
/// `ACM_NW`: write buffers.
pub const ACM_NW: usize = 16;

/// The class requests.
const SET_LINE_CODING: u8 = 0x20;
const SET_CONTROL_LINE_STATE: u8 = 0x22;
const SEND_BREAK: u8 = 0x23;

/// SET_CONTROL_LINE_STATE's DTR.
pub const CTRL_DTR: u16 = 0x01;
/// SET_CONTROL_LINE_STATE's RTS.
pub const CTRL_RTS: u16 = 0x02;

const SS_DCD: u16 = 0x01;
const SS_DSR: u16 = 0x02;
const SS_BREAK: u16 = 0x04;
const SS_RING: u16 = 0x08;
const SS_FRAMING: u16 = 0x10;
const SS_PARITY: u16 = 0x20;
const SS_OVERRUN: u16 = 0x40;

/// bmCapabilities' SEND_BREAK.
const CAP_BRK: u8 = 0x04;

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

/// What cdc_acm keeps of the lines.
struct Lines {
    /// `ctrlout`: DTR and RTS as last sent.
    ctrlout: u16,
    /// `ctrlin`: the device's last SERIAL_STATE.
    ctrlin: u16,
    /// The line coding as last sent.
    line: [u8; 7],
}

/// cdc_acm's part of a port.
pub struct Acm {
    /// Its interfaces and endpoints.
    pub layout: AcmLayout,
    lines: Mutex<Lines>,
}

impl Acm {
    /// The driver's part of a port of `layout`, the line coding its probe
    /// sent (9600 8N1).
    pub fn new(layout: AcmLayout) -> Acm {
        Acm {
            layout,
            lines: Mutex::new(Lines {
                ctrlout: 0,
                ctrlin: 0,
                line: [0x80, 0x25, 0, 0, 0, 0, 8],
            }),
        }
    }

    /// acm_ctrl_msg: class request `request` to the control interface.
    fn ctrl_msg(&self, p: &Port, request: u8, value: u16, data: &[u8]) -> SysResult<()> {
        let index = u16::from(self.layout.ctrl_if);
        p.control(0x21, request, value, index, data, CTRL_TIMEOUT)
            .map(|_| ())
    }

    /// acm_set_control: DTR and RTS to `ctrl`.
    fn set_control(&self, p: &Port, ctrl: u16) -> SysResult<()> {
        self.ctrl_msg(p, SET_CONTROL_LINE_STATE, ctrl, &[])
    }
}

impl PortDriver for Acm {
    fn driver_name(&self) -> &'static str {
        "cdc_acm"
    }

    fn describe(&self) -> String {
        "USB ACM device".into()
    }

    /// bmCapabilities (no newline: cdc_acm's show function prints none).
    fn interface_attributes(&self) -> Vec<(&'static str, String)> {
        vec![("bmCapabilities", self.layout.caps.to_string())]
    }

    fn tty_name(&self) -> &'static str {
        "ttyACM"
    }

    fn major(&self) -> u32 {
        ACM_TTY_MAJOR
    }

    fn devpath(&self, iface_devpath: &str, name: &str) -> String {
        format!("{iface_devpath}/tty/{name}")
    }

    fn read_urbs(&self) -> Urbs {
        Urbs {
            endpoint: self.layout.bulk_in.0,
            length: self.layout.readsize() as usize,
            count: ACM_NR,
        }
    }

    fn write_urbs(&self) -> Urbs {
        Urbs {
            endpoint: self.layout.bulk_out.0,
            length: self.layout.writesize(),
            count: ACM_NW,
        }
    }

    fn notify_urb(&self) -> Option<(u8, u16)> {
        self.layout.notify.map(|(ep, mps, _)| (ep, mps))
    }

    /// acm_tty_set_termios: the line coding and DTR as termios `new` says;
    /// sends what changed.
    fn set_termios(&self, p: &Port, old: Option<&Termios>, new: &mut Termios) -> SysResult<()> {
        let (ctrlout, line) = {
            let l = self.lines.lock_ok();
            (l.ctrlout, l.line)
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
            self.lines.lock_ok().ctrlout = newctrl;
            let _ = self.set_control(p, newctrl);
        }
        if newline != line {
            self.lines.lock_ok().line = newline;
            self.ctrl_msg(p, SET_LINE_CODING, 0, &newline)?;
        }
        Ok(())
    }

    /// acm_port_dtr_rts.
    fn dtr_rts(&self, p: &Port, on: bool) {
        let v = if on { CTRL_DTR | CTRL_RTS } else { 0 };
        self.lines.lock_ok().ctrlout = v;
        let _ = self.set_control(p, v);
    }

    /// acm_tty_tiocmget.
    fn tiocmget(&self, _p: &Port) -> SysResult<u32> {
        let l = self.lines.lock_ok();
        let mut v = TIOCM_CTS;
        if l.ctrlout & CTRL_DTR != 0 {
            v |= TIOCM_DTR;
        }
        if l.ctrlout & CTRL_RTS != 0 {
            v |= TIOCM_RTS;
        }
        if l.ctrlin & SS_DSR != 0 {
            v |= TIOCM_DSR;
        }
        if l.ctrlin & SS_RING != 0 {
            v |= TIOCM_RI;
        }
        if l.ctrlin & SS_DCD != 0 {
            v |= TIOCM_CD;
        }
        Ok(v)
    }

    /// acm_tty_tiocmset: DTR and RTS set and cleared; sent if changed.
    fn tiocmset(&self, p: &Port, set: u32, clear: u32) -> SysResult<()> {
        let bits = |m: u32| {
            (if m & TIOCM_DTR != 0 { CTRL_DTR } else { 0 })
                | (if m & TIOCM_RTS != 0 { CTRL_RTS } else { 0 })
        };
        let newctrl = {
            let mut l = self.lines.lock_ok();
            let n = (l.ctrlout & !bits(clear)) | bits(set);
            if n == l.ctrlout {
                return Ok(());
            }
            l.ctrlout = n;
            n
        };
        self.set_control(p, newctrl)
    }

    /// acm_tty_break_ctl: SEND_BREAK of 0xffff (until cleared) or 0.
    fn break_ctl(&self, p: &Port, on: bool) -> SysResult<()> {
        if self.layout.caps & CAP_BRK == 0 {
            return Err(Errno(libc::EOPNOTSUPP));
        }
        self.ctrl_msg(p, SEND_BREAK, if on { 0xffff } else { 0 }, &[])
    }

    fn process_read<'a>(&self, _st: &mut PortState, data: &'a [u8]) -> Cow<'a, [u8]> {
        Cow::Borrowed(data)
    }

    /// acm_read_bulk_callback: a killed or failed URB stops.
    fn read_stops(&self, status: i32) -> bool {
        matches!(
            -status,
            libc::ENOENT
                | libc::ECONNRESET
                | libc::ESHUTDOWN
                | libc::EPIPE
                | libc::EPROTO
                | libc::EOVERFLOW
        )
    }

    /// acm_process_notification: a SERIAL_STATE sets the modem lines.
    fn notification(&self, st: &mut PortState, buf: &[u8]) {
        if buf.len() < 8 || buf[1] != 0x20 {
            return;
        }
        if u16::from_le_bytes([buf[6], buf[7]]) != 2 || buf.len() < 10 {
            tracing::debug!("cdc_acm: malformed serial state");
            return;
        }
        let newctrl = u16::from_le_bytes([buf[8], buf[9]]);
        let old = std::mem::replace(&mut self.lines.lock_ok().ctrlin, newctrl);
        if old & !newctrl & SS_DCD != 0 {
            st.dcd_dropped();
        }
        let diff = old ^ newctrl;
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

    /// acm_tty_write: no FIFO, each write call fills a write buffer.
    fn write_fifo(&self) -> Option<usize> {
        None
    }

    /// acm_tty_chars_in_buffer: each write buffer in use counts whole
    /// (those in flight and those whose URB waits to go out).
    fn chars_in_buffer(&self, _queued: usize, buffers: usize, lengths: &[usize]) -> usize {
        (lengths.len() + buffers) * self.layout.writesize()
    }

    /// acm_wait_serial_change's lines.
    fn miwait_lines(&self) -> u32 {
        TIOCM_DSR | TIOCM_CD | TIOCM_RI
    }
}
