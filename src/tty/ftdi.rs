//! ftdi_sio's side of its tty port (`drivers/usb/serial/ftdi_sio.c`): the
//! chip's type from its `bcdDevice`, its vendor requests (reset, baud
//! rate with the chip's divisor encoding, data bits, parity and stop bits,
//! modem control, flow control, latency timer, modem status), and the two
//! status bytes that start every packet of its bulk IN endpoint, taken out
//! of the data and turned into modem lines and error counts. The
//! usb-serial core's generic parts (2 read URBs, 2 write URBs of the
//! driver's size, wait_until_sent asking the chip whether its transmitter
//! is empty) are [`super::serial`]'s and the port's.

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::Duration;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::usbcore::device::{Interface, ProbeAnswer, UsbDevice};

use super::port::{
    Port, PortDriver, PortState, Urbs, CTRL_TIMEOUT, TIOCM_CD, TIOCM_CTS, TIOCM_DSR, TIOCM_DTR,
    TIOCM_RI, TIOCM_RTS,
};
use super::serial;
use super::termios::{self, Termios};

/// `FTDI_VID`.
pub const FTDI_VID: u16 = 0x0403;

/// The vendor requests.
pub mod req {
    /// FTDI_SIO_RESET.
    pub const RESET: u8 = 0;
    /// FTDI_SIO_MODEM_CTRL.
    pub const MODEM_CTRL: u8 = 1;
    /// FTDI_SIO_SET_FLOW_CTRL.
    pub const SET_FLOW_CTRL: u8 = 2;
    /// FTDI_SIO_SET_BAUD_RATE.
    pub const SET_BAUD_RATE: u8 = 3;
    /// FTDI_SIO_SET_DATA.
    pub const SET_DATA: u8 = 4;
    /// FTDI_SIO_GET_MODEM_STATUS.
    pub const GET_MODEM_STATUS: u8 = 5;
    /// FTDI_SIO_SET_EVENT_CHAR.
    pub const SET_EVENT_CHAR: u8 = 6;
    /// FTDI_SIO_SET_LATENCY_TIMER.
    pub const SET_LATENCY_TIMER: u8 = 9;
    /// FTDI_SIO_GET_LATENCY_TIMER.
    pub const GET_LATENCY_TIMER: u8 = 0x0a;
    /// FTDI_SIO_READ_EEPROM.
    pub const READ_EEPROM: u8 = 0x90;
}

/// Vendor request types, out and in.
const OUT: u8 = 0x40;
const IN: u8 = 0xc0;
/// `WDR_SHORT_TIMEOUT`.
const SHORT_TIMEOUT: Duration = Duration::from_secs(1);

const SET_DTR_HIGH: u16 = 0x0101;
const SET_DTR_LOW: u16 = 0x0100;
const SET_RTS_HIGH: u16 = 0x0202;
const SET_RTS_LOW: u16 = 0x0200;
const SET_BREAK: u16 = 1 << 14;
const RTS_CTS_HS: u16 = 1 << 8;
const XON_XOFF_HS: u16 = 4 << 8;

const RS0_CTS: u8 = 1 << 4;
const RS0_DSR: u8 = 1 << 5;
const RS0_RI: u8 = 1 << 6;
const RS0_RLSD: u8 = 1 << 7;
const STATUS_B0_MASK: u8 = RS0_CTS | RS0_DSR | RS0_RI | RS0_RLSD;
const RS_OE: u8 = 1 << 1;
const RS_PE: u8 = 1 << 2;
const RS_FE: u8 = 1 << 3;
const RS_BI: u8 = 1 << 4;
const RS_TEMT: u8 = 1 << 6;
const RS_ERR_MASK: u8 = RS_BI | RS_PE | RS_FE | RS_OE;

/// `ASYNC_SPD_MASK` and `ASYNC_SPD_CUST` of the serial flags.
const ASYNC_SPD_MASK: u32 = 0x1030;
const ASYNC_SPD_CUST: u32 = 0x0030;
/// `ASYNC_LOW_LATENCY`.
const ASYNC_LOW_LATENCY: u32 = 1 << 13;

/// The chips ftdi_sio tells apart (`enum ftdi_chip_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Chip {
    Sio,
    Ft232a,
    Ft232b,
    Ft2232c,
    Ft232r,
    Ft232h,
    Ft2232h,
    Ft4232h,
    Ft4232ha,
    Ft232hp,
    Ft233hp,
    Ft2232hp,
    Ft2233hp,
    Ft4232hp,
    Ft4233hp,
    Ftx,
}

impl Chip {
    /// ftdi_determine_type: the chip of a device whose `bcdDevice` is
    /// `version` (None: unknown, the probe fails). A `bcdDevice` of 0x200
    /// is taken for an FT232A (the kernel asks an FT232A without a serial
    /// number for its latency timer to tell an FT232B; monfs does not).
    pub fn of(version: u16) -> Option<Chip> {
        Some(match version {
            0x200 => Chip::Ft232a,
            0x400 => Chip::Ft232b,
            0x500 => Chip::Ft2232c,
            0x600 => Chip::Ft232r,
            0x700 => Chip::Ft2232h,
            0x800 => Chip::Ft4232h,
            0x900 => Chip::Ft232h,
            0x1000 => Chip::Ftx,
            0x2800 => Chip::Ft2233hp,
            0x2900 => Chip::Ft4233hp,
            0x3000 => Chip::Ft2232hp,
            0x3100 => Chip::Ft4232hp,
            0x3200 => Chip::Ft233hp,
            0x3300 => Chip::Ft232hp,
            0x3600 => Chip::Ft4232ha,
            v if v < 0x200 => Chip::Sio,
            _ => return None,
        })
    }

    /// `ftdi_chip_name`.
    pub fn name(self) -> &'static str {
        match self {
            Chip::Sio => "SIO",
            Chip::Ft232a => "FT232A",
            Chip::Ft232b => "FT232B",
            Chip::Ft2232c => "FT2232C/D",
            Chip::Ft232r => "FT232R",
            Chip::Ft232h => "FT232H",
            Chip::Ft2232h => "FT2232H",
            Chip::Ft4232h => "FT4232H",
            Chip::Ft4232ha => "FT4232HA",
            Chip::Ft232hp => "FT232HP",
            Chip::Ft233hp => "FT233HP",
            Chip::Ft2232hp => "FT2232HP",
            Chip::Ft2233hp => "FT2233HP",
            Chip::Ft4232hp => "FT4232HP",
            Chip::Ft4233hp => "FT4233HP",
            Chip::Ftx => "FT-X",
        }
    }

    /// The baud base (`baud_base`) and the channel of interface `ifnum`
    /// (`CHANNEL_A + ifnum`, 0 for single-port legacy chips).
    pub fn base_and_channel(self, ifnum: u8) -> (u32, u16) {
        let ch = 1 + u16::from(ifnum);
        match self {
            Chip::Sio => (12_000_000 / 16, 0),
            Chip::Ft232a | Chip::Ft232b | Chip::Ft232r => (24_000_000, 0),
            Chip::Ft2232c | Chip::Ftx => (24_000_000, ch),
            _ => (60_000_000, ch),
        }
    }

    /// Whether it has a latency timer (all but the SIO and the FT232A).
    pub fn has_latency_timer(self) -> bool {
        !matches!(self, Chip::Sio | Chip::Ft232a)
    }

    /// ftdi_gpio_init's EEPROM reads: the word indexes it reads, two bytes
    /// each (the CBUS configuration of the FT232R, FT232H and FT-X).
    pub fn gpio_eeprom_words(self) -> &'static [u16] {
        match self {
            Chip::Ft232r => &[0x0a],
            Chip::Ft232h | Chip::Ftx => &[0x0d, 0x0e],
            _ => &[],
        }
    }
}

/// The 232AM divisor (ftdi_232am_baud_base_to_divisor).
fn div_232am(baud: u32, base: u32) -> u32 {
    let mut d3 = div_round_closest(base, 2 * baud);
    if d3 & 7 == 7 {
        d3 += 1;
    }
    let mut div = d3 >> 3;
    let frac = d3 & 7;
    if frac == 1 {
        div |= 0xc000;
    } else if frac >= 4 {
        div |= 0x4000;
    } else if frac != 0 {
        div |= 0x8000;
    } else if div == 1 {
        div = 0;
    }
    div & 0xffff
}

/// The fraction codes of the 232BM and later divisors.
const DIVFRAC: [u32; 8] = [0, 3, 2, 4, 1, 5, 6, 7];

/// The 232BM divisor (ftdi_232bm_baud_base_to_divisor).
fn div_232bm(baud: u32, base: u32) -> u32 {
    let d3 = div_round_closest(base, 2 * baud);
    let div = (d3 >> 3) | (DIVFRAC[(d3 & 7) as usize] << 14);
    match div {
        1 => 0,
        0x4001 => 1,
        d => d,
    }
}

/// The hi-speed chips' divisor (ftdi_2232h_baud_base_to_divisor).
fn div_2232h(baud: u32, base: u32) -> u32 {
    let d3 = div_round_closest(8 * base, 10 * baud);
    let div = (d3 >> 3) | (DIVFRAC[(d3 & 7) as usize] << 14);
    let div = match div {
        1 => 0,
        0x4001 => 1,
        d => d,
    };
    div | 0x0002_0000
}

/// `DIV_ROUND_CLOSEST` of unsigned values.
fn div_round_closest(a: u32, b: u32) -> u32 {
    ((u64::from(a) + u64::from(b) / 2) / u64::from(b.max(1))) as u32
}

/// get_ftdi_divisor: the divisor chip `chip` gets for `baud` (0: 9600),
/// and the baud rate the tty is told (9600 when the chip cannot do it).
pub fn divisor(chip: Chip, baud: u32) -> (u32, u32) {
    let baud = if baud == 0 { 9600 } else { baud };
    match chip {
        Chip::Sio => {
            let codes = [
                300, 600, 1200, 2400, 4800, 9600, 19200, 38400, 57600, 115_200,
            ];
            match codes.iter().position(|b| *b == baud) {
                Some(i) => (i as u32, baud),
                None => (5, 9600),
            }
        }
        Chip::Ft232a if baud <= 3_000_000 => (div_232am(baud, 48_000_000), baud),
        Chip::Ft232a => (div_232am(9600, 48_000_000), 9600),
        Chip::Ft232b | Chip::Ft2232c | Chip::Ft232r | Chip::Ftx if baud <= 3_000_000 => {
            (div_232bm(baud, 48_000_000), baud)
        }
        Chip::Ft232b | Chip::Ft2232c | Chip::Ft232r | Chip::Ftx => {
            (div_232bm(9600, 48_000_000), 9600)
        }
        _ if (1200..=12_000_000).contains(&baud) => (div_2232h(baud, 120_000_000), baud),
        _ if baud < 1200 => (div_232bm(baud, 48_000_000), baud),
        _ => (div_232bm(9600, 48_000_000), 9600),
    }
}

/// What ftdi_sio keeps of a port (`struct ftdi_private`).
struct Private {
    /// `last_set_data_value`: SET_DATA's value without the break bit.
    last_set_data_value: u16,
    /// `last_dtr_rts`: DTR and RTS as TIOCM bits.
    last_dtr_rts: u32,
    /// `prev_status`: the modem status bits of the last packet.
    prev_status: u8,
    /// `transmit_empty`: TEMT of the last packet.
    transmit_empty: bool,
    /// The latency timer in ms.
    latency: u8,
    /// The serial flags TIOCSSERIAL set.
    flags: u32,
    /// `custom_divisor`.
    custom_divisor: u32,
}

/// ftdi_sio's part of a port.
pub struct Ftdi {
    /// The chip.
    pub chip: Chip,
    /// `baud_base`.
    pub baud_base: u32,
    /// `channel`: the request index of the port's interface.
    pub channel: u16,
    /// `max_packet_size`: the packet size of the interface's last
    /// endpoint, which splits read URBs' data into packets.
    pub max_packet_size: u16,
    /// The bulk IN and OUT endpoints and their packet sizes.
    pub bulk_in: (u8, u16),
    /// See `bulk_in`.
    pub bulk_out: (u8, u16),
    p: Mutex<Private>,
}

impl Ftdi {
    /// The driver's part of a port of `chip` on interface `ifnum`, whose
    /// endpoints are `bulk_in` and `bulk_out` (address, packet size) and
    /// whose last endpoint's packet size is `last_mps`; `latency` is what
    /// its probe read of the latency timer.
    pub fn new(
        chip: Chip,
        ifnum: u8,
        bulk_in: (u8, u16),
        bulk_out: (u8, u16),
        last_mps: u16,
        latency: u8,
    ) -> Ftdi {
        let (baud_base, channel) = chip.base_and_channel(ifnum);
        Ftdi {
            chip,
            baud_base,
            channel,
            max_packet_size: if last_mps == 0 { 0x40 } else { last_mps },
            bulk_in,
            bulk_out,
            p: Mutex::new(Private {
                last_set_data_value: 0,
                last_dtr_rts: 0,
                prev_status: 0,
                transmit_empty: false,
                latency,
                flags: 0,
                custom_divisor: 0,
            }),
        }
    }

    /// A vendor request to the port's channel with no data.
    fn out(&self, p: &Port, request: u8, value: u16, index: u16, t: Duration) -> SysResult<()> {
        p.control(OUT, request, value, index, &[], t).map(|_| ())
    }

    /// update_mctrl: DTR and RTS set and cleared (set wins).
    fn update_mctrl(&self, p: &Port, set: u32, clear: u32) -> SysResult<()> {
        if (set | clear) & (TIOCM_DTR | TIOCM_RTS) == 0 {
            return Ok(());
        }
        let clear = clear & !set;
        let mut value = 0;
        if clear & TIOCM_DTR != 0 {
            value |= SET_DTR_LOW;
        }
        if clear & TIOCM_RTS != 0 {
            value |= SET_RTS_LOW;
        }
        if set & TIOCM_DTR != 0 {
            value |= SET_DTR_HIGH;
        }
        if set & TIOCM_RTS != 0 {
            value |= SET_RTS_HIGH;
        }
        self.out(p, req::MODEM_CTRL, value, self.channel, CTRL_TIMEOUT)?;
        let mut pr = self.p.lock_ok();
        pr.last_dtr_rts = (pr.last_dtr_rts & !clear) | set;
        Ok(())
    }

    /// change_speed: SET_BAUD_RATE with the divisor of the termios' rate;
    /// the rate the chip got goes back to the termios.
    fn change_speed(&self, p: &Port, t: &mut Termios) -> SysResult<()> {
        let mut baud = t.baud_rate();
        {
            let pr = self.p.lock_ok();
            if baud == 38400
                && pr.flags & ASYNC_SPD_MASK == ASYNC_SPD_CUST
                && pr.custom_divisor != 0
            {
                baud = self.baud_base / pr.custom_divisor;
            }
        }
        let (div, got) = divisor(self.chip, baud);
        t.encode_baud_rate(got, got);
        let value = div as u16;
        let mut index = (div >> 16) as u16;
        if self.channel != 0 {
            index = (index << 8) | self.channel;
        }
        self.out(p, req::SET_BAUD_RATE, value, index, SHORT_TIMEOUT)
    }

    /// ftdi_get_modem_status: the two status bytes (one from the SIO).
    fn modem_status(&self, p: &Port) -> SysResult<[u8; 2]> {
        let len = if self.chip == Chip::Sio { 1 } else { 2 };
        let got = p.control(
            IN,
            req::GET_MODEM_STATUS,
            0,
            self.channel,
            &[0u8; 2][..len],
            CTRL_TIMEOUT,
        )?;
        if got.is_empty() {
            return Err(Errno::EIO);
        }
        Ok([got[0], got.get(1).copied().unwrap_or(0)])
    }

    /// The latency timer as sysfs's `latency_timer` shows it.
    pub fn latency(&self) -> u8 {
        let pr = self.p.lock_ok();
        if pr.flags & ASYNC_LOW_LATENCY != 0 {
            1
        } else {
            pr.latency
        }
    }

    /// latency_timer_store: set the latency timer (SET_LATENCY_TIMER).
    pub fn set_latency(&self, p: &Port, v: u8) -> SysResult<()> {
        self.p.lock_ok().latency = v;
        if !self.chip.has_latency_timer() {
            return Err(Errno::EIO);
        }
        let l = self.latency();
        self.out(
            p,
            req::SET_LATENCY_TIMER,
            u16::from(l),
            self.channel,
            CTRL_TIMEOUT,
        )
        .map_err(|_| Errno::EIO)
    }

    /// event_char_store: SET_EVENT_CHAR with `v` (the character and its
    /// enable bit).
    pub fn set_event_char(&self, p: &Port, v: u16) -> SysResult<()> {
        self.out(p, req::SET_EVENT_CHAR, v, self.channel, CTRL_TIMEOUT)
            .map_err(|_| Errno::EIO)
    }
}

impl PortDriver for Ftdi {
    fn driver_name(&self) -> &'static str {
        "ftdi_sio"
    }

    fn describe(&self) -> String {
        format!("FTDI USB Serial Device converter ({})", self.chip.name())
    }

    /// ftdi_is_visible: `event_char` but on the SIO, `latency_timer` on
    /// the chips with one.
    fn attributes(&self) -> Vec<(&'static str, u32)> {
        let mut v = Vec::new();
        if self.chip != Chip::Sio {
            v.push(("event_char", 0o200));
        }
        if self.chip.has_latency_timer() {
            v.push(("latency_timer", 0o644));
        }
        v
    }

    fn show_attr(&self, name: &str) -> String {
        match name {
            "latency_timer" => format!("{}\n", self.latency()),
            _ => String::new(),
        }
    }

    fn store_attr(&self, p: &Port, name: &str, text: &str) -> SysResult<()> {
        match name {
            // kstrtou8(buf, 10).
            "latency_timer" => {
                let v: u8 = text.parse().map_err(|_| Errno::EINVAL)?;
                self.set_latency(p, v)
            }
            // kstrtouint(buf, 0) below 0x200.
            "event_char" => {
                let v = parse_uint0(text)
                    .filter(|v| *v < 0x200)
                    .ok_or(Errno::EINVAL)?;
                self.set_event_char(p, v as u16)
            }
            _ => Err(Errno::EIO),
        }
    }

    /// Two of `bulk_in_size`: the driver's 512 or the packet size.
    fn read_urbs(&self) -> Urbs {
        Urbs::usb_serial(self.bulk_in.0, self.bulk_in.1, 512)
    }

    /// Two of `bulk_out_size`: the driver's 256 or the packet size.
    fn write_urbs(&self) -> Urbs {
        Urbs::usb_serial(self.bulk_out.0, self.bulk_out.1, 256)
    }

    /// ftdi_open: reset the port (the termios and the read URBs follow).
    fn open(&self, p: &Port) -> SysResult<()> {
        let _ = self.out(p, req::RESET, 0, self.channel, CTRL_TIMEOUT);
        Ok(())
    }

    /// ftdi_set_termios.
    fn set_termios(&self, p: &Port, old: Option<&Termios>, t: &mut Termios) -> SysResult<()> {
        use termios::*;
        // The chips have 7 or 8 data bits; CS6 goes back to what it was.
        if t.cflag & CSIZE == CS6 {
            tracing::warn!("{}: requested CSIZE setting not supported", p.name());
            t.cflag &= !CSIZE;
            t.cflag |= old.map_or(CS8, |o| o.cflag & CSIZE);
        }
        let cflag = t.cflag;
        let line = CSIZE | PARODD | PARENB | CMSPAR | CSTOPB;
        let (set_data, set_speed) = match old {
            None => (true, true),
            Some(o) if o.cflag == cflag && o.ispeed == t.ispeed && o.ospeed == t.ospeed => {
                (false, false)
            }
            Some(o) => (o.cflag & line != cflag & line, true),
        };
        if set_data {
            let mut value: u16 = if cflag & CSTOPB != 0 { 2 << 11 } else { 0 };
            if cflag & PARENB != 0 {
                value |= match (cflag & CMSPAR != 0, cflag & PARODD != 0) {
                    (true, true) => 3 << 8,
                    (true, false) => 4 << 8,
                    (false, true) => 1 << 8,
                    (false, false) => 2 << 8,
                };
            }
            value |= match cflag & CSIZE {
                CS5 => 0,
                CS7 => 7,
                _ => 8,
            };
            self.p.lock_ok().last_set_data_value = value;
            if self
                .out(p, req::SET_DATA, value, self.channel, SHORT_TIMEOUT)
                .is_err()
            {
                tracing::warn!("{}: failed to set databits/stopbits/parity", p.name());
            }
        }
        if set_speed {
            if cflag & CBAUD == B0 {
                let _ = self.out(p, req::SET_FLOW_CTRL, 0, self.channel, CTRL_TIMEOUT);
                let _ = self.update_mctrl(p, 0, TIOCM_DTR | TIOCM_RTS);
            } else {
                if self.change_speed(p, t).is_err() {
                    tracing::warn!("{}: urb failed to set baudrate", p.name());
                }
                if old.is_some_and(|o| o.cflag & CBAUD == B0) {
                    let _ = self.update_mctrl(p, TIOCM_DTR | TIOCM_RTS, 0);
                }
            }
        }
        // Flow control, whatever changed.
        let (value, index) = if t.cflag & CRTSCTS != 0 {
            (0, RTS_CTS_HS)
        } else if t.iflag & IXON != 0 {
            (
                (u16::from(t.cc[VSTOP]) << 8) | u16::from(t.cc[VSTART]),
                XON_XOFF_HS,
            )
        } else {
            (0, 0)
        };
        if self
            .out(
                p,
                req::SET_FLOW_CTRL,
                value,
                index | self.channel,
                CTRL_TIMEOUT,
            )
            .is_err()
        {
            tracing::warn!("{}: failed to set flow control", p.name());
        }
        Ok(())
    }

    /// ftdi_dtr_rts: off disables flow control first.
    fn dtr_rts(&self, p: &Port, on: bool) {
        if on {
            let _ = self.update_mctrl(p, TIOCM_DTR | TIOCM_RTS, 0);
        } else {
            let _ = self.out(p, req::SET_FLOW_CTRL, 0, self.channel, CTRL_TIMEOUT);
            let _ = self.update_mctrl(p, 0, TIOCM_DTR | TIOCM_RTS);
        }
    }

    /// ftdi_tiocmget: the modem status from the chip, DTR and RTS as last
    /// set.
    fn tiocmget(&self, p: &Port) -> SysResult<u32> {
        let s = self.modem_status(p)?[0];
        let mut v = self.p.lock_ok().last_dtr_rts;
        for (bit, m) in [
            (RS0_DSR, TIOCM_DSR),
            (RS0_CTS, TIOCM_CTS),
            (RS0_RI, TIOCM_RI),
            (RS0_RLSD, TIOCM_CD),
        ] {
            if s & bit != 0 {
                v |= m;
            }
        }
        Ok(v)
    }

    fn tiocmset(&self, p: &Port, set: u32, clear: u32) -> SysResult<()> {
        self.update_mctrl(p, set, clear)
    }

    /// ftdi_break_ctl: SET_DATA with the break bit, or without.
    fn break_ctl(&self, p: &Port, on: bool) -> SysResult<()> {
        let mut value = self.p.lock_ok().last_set_data_value;
        if on {
            value |= SET_BREAK;
        }
        self.out(p, req::SET_DATA, value, self.channel, CTRL_TIMEOUT)
    }

    /// ftdi_process_read_urb: per packet, the status bytes out, the rest
    /// to the tty.
    fn process_read<'a>(&self, st: &mut PortState, data: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out = Vec::with_capacity(data.len());
        for pkt in data.chunks(usize::from(self.max_packet_size)) {
            self.process_packet(st, pkt, &mut out);
        }
        Cow::Owned(out)
    }

    /// ftdi_prepare_write_buffer: the SIO's packets start with a length
    /// byte; the others' are the bytes. Counts what goes out.
    fn prepare_write(&self, st: &mut PortState, chunk: Vec<u8>) -> Vec<u8> {
        if self.chip != Chip::Sio {
            st.icount.tx += chunk.len() as u32;
            return chunk;
        }
        let mps = usize::from(self.max_packet_size).max(2);
        let mut out = Vec::with_capacity(chunk.len() + chunk.len() / (mps - 1) + 1);
        for part in chunk.chunks(mps - 1) {
            out.push(((part.len() as u8) << 2) | 1);
            out.extend_from_slice(part);
            st.icount.tx += part.len() as u32;
        }
        out
    }

    /// ftdi_tx_empty: the modem status's TEMT.
    fn tx_empty(&self, p: &Port) -> Option<bool> {
        Some(match self.modem_status(p) {
            Ok(s) if self.chip != Chip::Sio => s[1] & RS_TEMT != 0,
            _ => true,
        })
    }

    /// serial_get_serial's driver part (get_serial_info): the flags, the
    /// baud base and the custom divisor.
    fn serial(&self, b: &mut [u8]) {
        let pr = self.p.lock_ok();
        // struct serial_struct: flags at 16, custom_divisor at 24,
        // baud_base at 28.
        b[16..20].copy_from_slice(&pr.flags.to_le_bytes());
        b[24..28].copy_from_slice(&pr.custom_divisor.to_le_bytes());
        b[28..32].copy_from_slice(&self.baud_base.to_le_bytes());
    }
}

impl Ftdi {
    /// ftdi_process_packet: the modem status's changes counted (a DCD
    /// drop without CLOCAL hangs the port up), errors counted, the data
    /// after the two status bytes appended to `out`.
    fn process_packet(&self, st: &mut PortState, buf: &[u8], out: &mut Vec<u8>) {
        if buf.len() < 2 {
            tracing::debug!("ftdi_sio: malformed packet");
            return;
        }
        let status = buf[0] & STATUS_B0_MASK;
        {
            let mut pr = self.p.lock_ok();
            if status != pr.prev_status {
                let diff = status ^ pr.prev_status;
                let c = &mut st.icount;
                if diff & RS0_CTS != 0 {
                    c.cts += 1;
                }
                if diff & RS0_DSR != 0 {
                    c.dsr += 1;
                }
                if diff & RS0_RI != 0 {
                    c.rng += 1;
                }
                if diff & RS0_RLSD != 0 {
                    c.dcd += 1;
                    if status & RS0_RLSD == 0 {
                        st.dcd_dropped();
                    }
                }
                pr.prev_status = status;
            }
            pr.transmit_empty = buf[1] & RS_TEMT != 0;
        }
        if buf.len() == 2 {
            return;
        }
        let c = &mut st.icount;
        if buf[1] & RS_ERR_MASK != 0 {
            if buf[1] & RS_BI != 0 && buf[buf.len() - 1] == 0 {
                c.brk += 1;
            }
            if buf[1] & RS_PE != 0 {
                c.parity += 1;
            } else if buf[1] & RS_FE != 0 {
                c.frame += 1;
            }
            if buf[1] & RS_OE != 0 {
                c.overrun += 1;
                // TTY_OVERRUN: a NUL with the overrun flag.
                out.push(0);
            }
        }
        c.rx += (buf.len() - 2) as u32;
        out.extend_from_slice(&buf[2..]);
    }
}

/// ftdi_sio's part of the port of interface `i` of `d` (usb_serial_probe
/// and ftdi_port_probe); None if the interface lacks what it needs.
pub fn port_driver(d: &UsbDevice, i: &Interface) -> Option<Ftdi> {
    let eps = serial::endpoints(d, i);
    let bulk = |dir_in: bool| serial::find(&eps, 2, dir_in);
    let chip = Chip::of(u16::from_le_bytes([d.descriptor[12], d.descriptor[13]]))?;
    let last = eps.last().map_or(0x40, |e| e.packet_size());
    // The latency timer its probe read (read_latency_timer; 16 ms when it
    // failed or no answer was kept).
    let latency = ProbeAnswer::find(&i.probe_answers, req::GET_LATENCY_TIMER, 0, 1)
        .filter(|a| a.status == 0)
        .and_then(|a| a.data.first().copied())
        .unwrap_or(16);
    Some(Ftdi::new(
        chip,
        i.number,
        bulk(true)?,
        bulk(false)?,
        last,
        latency,
    ))
}

/// kstrtouint with base 0: decimal, 0x hex or 0 octal.
fn parse_uint0(s: &str) -> Option<u32> {
    let s = s.strip_prefix('+').unwrap_or(s);
    if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u32::from_str_radix(h, 16).ok()
    } else if s.len() > 1 && s.starts_with('0') {
        u32::from_str_radix(&s[1..], 8).ok()
    } else {
        s.parse().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divisors_are_the_kernels() {
        // FT232B/R at the usual rates (ftdi_232bm_baud_base_to_divisor).
        assert_eq!(divisor(Chip::Ft232r, 9600), (0x4138, 9600));
        assert_eq!(divisor(Chip::Ft232r, 115_200), (0x001a, 115_200));
        assert_eq!(divisor(Chip::Ft232r, 3_000_000), (0, 3_000_000));
        assert_eq!(divisor(Chip::Ft232r, 2_000_000), (1, 2_000_000));
        assert_eq!(divisor(Chip::Ft232r, 0), (0x4138, 9600));
        // Too fast for the chip: 9600.
        assert_eq!(divisor(Chip::Ft232r, 4_000_000), (0x4138, 9600));
        // Hi-speed chips: 10-bit sampling and the divide-by-2.5 bit off.
        assert_eq!(divisor(Chip::Ft2232h, 115_200).0 & 0x0002_0000, 0x0002_0000);
        assert_eq!(divisor(Chip::Ft232h, 12_000_000), (0x0002_0000, 12_000_000));
        assert_eq!(divisor(Chip::Ft232h, 300).0, div_232bm(300, 48_000_000));
        // The SIO's table.
        assert_eq!(divisor(Chip::Sio, 115_200), (9, 115_200));
        assert_eq!(divisor(Chip::Sio, 250_000), (5, 9600));
        // The 232AM's fractions.
        assert_eq!(divisor(Chip::Ft232a, 9600).0, 0x4138);
    }

    #[test]
    fn kstrtouint_base_0() {
        assert_eq!(parse_uint0("0x10d"), Some(0x10d));
        assert_eq!(parse_uint0("010"), Some(8));
        assert_eq!(parse_uint0("13"), Some(13));
        assert_eq!(parse_uint0("0"), Some(0));
        assert_eq!(parse_uint0("x"), None);
    }

    #[test]
    fn chips_by_bcd_device() {
        assert_eq!(Chip::of(0x0600), Some(Chip::Ft232r));
        assert_eq!(Chip::of(0x0400), Some(Chip::Ft232b));
        assert_eq!(Chip::of(0x0700), Some(Chip::Ft2232h));
        assert_eq!(Chip::of(0x0100), Some(Chip::Sio));
        assert_eq!(Chip::of(0x0a00), None);
        assert_eq!(Chip::Ft2232h.base_and_channel(1), (60_000_000, 2));
        assert_eq!(Chip::Ft232r.base_and_channel(0), (24_000_000, 0));
    }
}
