//! cp210x's side of its tty port (`drivers/usb/serial/cp210x.c`): the
//! part number its probe read, which sets the rates the chip takes and how
//! they are rounded; its interface requests (IFC_ENABLE at the open,
//! SET_BAUDRATE, SET_LINE_CTL, SET_CHARS, GET_FLOW and SET_FLOW for the
//! flow control and, with hardware flow control, for RTS; SET_MHS for DTR
//! and RTS, GET_MDMSTS for the modem lines, SET_BREAK, GET_COMM_STATUS for
//! tx_empty, PURGE and IFC_ENABLE off at the close), and the event
//! insertion mode (EMBED_EVENTS with the escape character 0xec) it turns on
//! while INPCK is set, whose escape sequences it takes out of the data and
//! counts as line errors. The usb-serial core's generic parts (2 read URBs
//! of 256 bytes, 2 write URBs of 256) are [`super::serial`]'s and the
//! port's.

use std::borrow::Cow;
use std::sync::Mutex;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::usbcore::device::{Interface, ProbeAnswer, UsbDevice};

use super::port::{
    Icount, Port, PortDriver, PortState, Urbs, CTRL_TIMEOUT, TIOCM_CD, TIOCM_CTS, TIOCM_DSR,
    TIOCM_DTR, TIOCM_RI, TIOCM_RTS,
};
use super::serial;
use super::termios::{self, Termios};

/// Silicon Labs' vendor ID.
pub const SILABS_VID: u16 = 0x10c4;

/// The interface requests (`CP210X_*`).
pub mod req {
    /// CP210X_IFC_ENABLE.
    pub const IFC_ENABLE: u8 = 0x00;
    /// CP210X_SET_LINE_CTL.
    pub const SET_LINE_CTL: u8 = 0x03;
    /// CP210X_SET_BREAK.
    pub const SET_BREAK: u8 = 0x05;
    /// CP210X_SET_MHS.
    pub const SET_MHS: u8 = 0x07;
    /// CP210X_GET_MDMSTS.
    pub const GET_MDMSTS: u8 = 0x08;
    /// CP210X_GET_COMM_STATUS.
    pub const GET_COMM_STATUS: u8 = 0x10;
    /// CP210X_PURGE.
    pub const PURGE: u8 = 0x12;
    /// CP210X_SET_FLOW.
    pub const SET_FLOW: u8 = 0x13;
    /// CP210X_GET_FLOW.
    pub const GET_FLOW: u8 = 0x14;
    /// CP210X_EMBED_EVENTS.
    pub const EMBED_EVENTS: u8 = 0x15;
    /// CP210X_SET_CHARS.
    pub const SET_CHARS: u8 = 0x19;
    /// CP210X_SET_BAUDRATE.
    pub const SET_BAUDRATE: u8 = 0x1e;
    /// CP210X_VENDOR_SPECIFIC.
    pub const VENDOR_SPECIFIC: u8 = 0xff;
}

/// The values of CP210X_VENDOR_SPECIFIC requests.
pub mod vendor {
    /// CP210X_GET_FW_VER (CP2105, CP2108) and CP210X_READ_2NCONFIG
    /// (CP2102N): the same value.
    pub const GET_FW_VER: u16 = 0x000e;
    /// CP210X_READ_2NCONFIG.
    pub const READ_2NCONFIG: u16 = 0x000e;
    /// CP210X_GET_FW_VER_2N.
    pub const GET_FW_VER_2N: u16 = 0x0010;
    /// CP210X_GET_PARTNUM.
    pub const GET_PARTNUM: u16 = 0x370b;
    /// CP210X_GET_PORTCONFIG.
    pub const GET_PORTCONFIG: u16 = 0x370c;
    /// CP210X_GET_DEVICEMODE.
    pub const GET_DEVICEMODE: u16 = 0x3711;
}

/// The part numbers GET_PARTNUM answers (`CP210X_PARTNUM_*`).
pub mod part {
    /// CP2101.
    pub const CP2101: u8 = 0x01;
    /// CP2102.
    pub const CP2102: u8 = 0x02;
    /// CP2103.
    pub const CP2103: u8 = 0x03;
    /// CP2104.
    pub const CP2104: u8 = 0x04;
    /// CP2105.
    pub const CP2105: u8 = 0x05;
    /// CP2108.
    pub const CP2108: u8 = 0x08;
    /// CP2102N in QFN28.
    pub const CP2102N_QFN28: u8 = 0x20;
    /// CP2102N in QFN24.
    pub const CP2102N_QFN24: u8 = 0x21;
    /// CP2102N in QFN20.
    pub const CP2102N_QFN20: u8 = 0x22;
    /// What the driver takes when GET_PARTNUM failed.
    pub const UNKNOWN: u8 = 0xff;

    /// Whether `p` is a CP2102N.
    pub fn is_cp2102n(p: u8) -> bool {
        matches!(p, CP2102N_QFN28 | CP2102N_QFN24 | CP2102N_QFN20)
    }

    /// A name for the log.
    pub fn name(p: u8) -> &'static str {
        match p {
            CP2101 => "CP2101",
            CP2102 => "CP2102",
            CP2103 => "CP2103",
            CP2104 => "CP2104",
            CP2105 => "CP2105",
            CP2108 => "CP2108",
            p if is_cp2102n(p) => "CP2102N",
            _ => "unknown part",
        }
    }
}

/// Request types: to the interface, from the interface, from the device.
const TO_IF: u8 = 0x41;
const FROM_IF: u8 = 0xc1;
/// `REQTYPE_DEVICE_TO_HOST`.
pub const FROM_DEV: u8 = 0xc0;

const UART_ENABLE: u16 = 0x0001;
const UART_DISABLE: u16 = 0x0000;
const PURGE_ALL: u16 = 0x000f;
const BREAK_ON: u16 = 0x0001;
const BREAK_OFF: u16 = 0x0000;

/// SET_LINE_CTL's fields.
const BITS_DATA_5: u16 = 0x0500;
const BITS_DATA_6: u16 = 0x0600;
const BITS_DATA_7: u16 = 0x0700;
const BITS_DATA_8: u16 = 0x0800;
const BITS_PARITY_ODD: u16 = 0x0010;
const BITS_PARITY_EVEN: u16 = 0x0020;
const BITS_PARITY_MARK: u16 = 0x0030;
const BITS_PARITY_SPACE: u16 = 0x0040;
const BITS_STOP_2: u16 = 0x0002;

/// SET_MHS's and GET_MDMSTS's bits.
const CONTROL_DTR: u16 = 0x0001;
const CONTROL_RTS: u16 = 0x0002;
const CONTROL_CTS: u8 = 0x10;
const CONTROL_DSR: u8 = 0x20;
const CONTROL_RING: u8 = 0x40;
const CONTROL_DCD: u8 = 0x80;
const CONTROL_WRITE_DTR: u16 = 0x0100;
const CONTROL_WRITE_RTS: u16 = 0x0200;

/// EMBED_EVENTS's escape character.
pub const ESCCHAR: u8 = 0xec;
const LSR_OVERRUN: u8 = 1 << 1;
const LSR_PARITY: u8 = 1 << 2;
const LSR_FRAME: u8 = 1 << 3;
const LSR_BREAK: u8 = 1 << 4;

/// `cp210x_flow_ctl`'s ulControlHandshake bits.
const SERIAL_DTR_MASK: u32 = 3;
const SERIAL_DTR_ACTIVE: u32 = 1;
const SERIAL_CTS_HANDSHAKE: u32 = 1 << 3;
const SERIAL_DSR_HANDSHAKE: u32 = 1 << 4;
const SERIAL_DCD_HANDSHAKE: u32 = 1 << 5;
const SERIAL_DSR_SENSITIVITY: u32 = 1 << 6;
/// Its ulFlowReplace bits.
const SERIAL_AUTO_TRANSMIT: u32 = 1 << 0;
const SERIAL_AUTO_RECEIVE: u32 = 1 << 1;
const SERIAL_RTS_MASK: u32 = 3 << 6;
const SERIAL_RTS_ACTIVE: u32 = 1 << 6;
const SERIAL_RTS_FLOW_CTL: u32 = 2 << 6;

/// `struct cp210x_comm_status`'s size.
const COMM_STATUS_SIZE: usize = 0x13;

/// What cp210x_init_max_speed gives part `partnum` on interface `ifnum`:
/// the lowest and highest rate, and whether a rate is the one the chip's
/// divisor really gives (else AN205's table below 1 Mbaud).
pub fn speeds(partnum: u8, ifnum: u8) -> (u32, u32, bool) {
    match partnum {
        part::CP2101 => (300, 921_600, false),
        part::CP2102 | part::CP2103 => (300, 1_000_000, false),
        part::CP2104 => (300, 2_000_000, true),
        part::CP2108 => (300, 2_000_000, false),
        part::CP2105 if ifnum == 0 => (300, 2_000_000, true),
        part::CP2105 => (2400, 921_600, false),
        p if part::is_cp2102n(p) => (300, 3_000_000, true),
        _ => (300, 2_000_000, false),
    }
}

/// `cp210x_an205_table1`: (rate, highest request that maps to it).
const AN205: [(u32, u32); 29] = [
    (300, 300),
    (600, 600),
    (1200, 1200),
    (1800, 1800),
    (2400, 2400),
    (4000, 4000),
    (4800, 4803),
    (7200, 7207),
    (9600, 9612),
    (14400, 14428),
    (16000, 16062),
    (19200, 19250),
    (28800, 28912),
    (38400, 38601),
    (51200, 51558),
    (56000, 56280),
    (57600, 58053),
    (64000, 64111),
    (76800, 77608),
    (115_200, 117_028),
    (128_000, 129_347),
    (153_600, 156_868),
    (230_400, 237_832),
    (250_000, 254_234),
    (256_000, 273_066),
    (460_800, 491_520),
    (500_000, 567_138),
    (576_000, 670_254),
    (921_600, u32::MAX),
];

/// cp210x_get_an205_rate: the rate of AN205's table that `baud` maps to.
pub fn an205_rate(baud: u32) -> u32 {
    AN205
        .iter()
        .find(|(_, high)| baud <= *high)
        .map_or(921_600, |(rate, _)| *rate)
}

/// cp210x_get_actual_rate: what the 48 MHz clock's divisor gives for
/// `baud` (prescaler 4 up to 365 baud).
pub fn actual_rate(baud: u32) -> u32 {
    let prescale = if baud <= 365 { 4 } else { 1 };
    let d = 2 * prescale * baud;
    let div = (48_000_000 + d / 2) / d;
    48_000_000 / (2 * prescale * div)
}

/// cp210x_change_speed's rate: `ospeed` clamped to the part's range, then
/// rounded as the part rounds it.
pub fn rate_for(partnum: u8, ifnum: u8, ospeed: u32) -> u32 {
    let (min, max, actual) = speeds(partnum, ifnum);
    let baud = ospeed.clamp(min, max);
    if actual {
        actual_rate(baud)
    } else if baud < 1_000_000 {
        an205_rate(baud)
    } else {
        baud
    }
}

/// SET_LINE_CTL's value for `cflag`: data bits, parity, stop bits.
pub fn line_ctl(cflag: u32) -> u16 {
    use termios::*;
    let mut bits = match cflag & CSIZE {
        CS5 => BITS_DATA_5,
        CS6 => BITS_DATA_6,
        CS7 => BITS_DATA_7,
        _ => BITS_DATA_8,
    };
    if cflag & PARENB != 0 {
        bits |= match (cflag & CMSPAR != 0, cflag & PARODD != 0) {
            (true, true) => BITS_PARITY_MARK,
            (true, false) => BITS_PARITY_SPACE,
            (false, true) => BITS_PARITY_ODD,
            (false, false) => BITS_PARITY_EVEN,
        };
    }
    if cflag & CSTOPB != 0 {
        bits |= BITS_STOP_2;
    }
    bits
}

/// cp210x_termios_change: a change of the hardware settings, of INPCK,
/// IXON or IXOFF, or of the START and STOP characters.
pub fn termios_change(a: &Termios, b: &Termios) -> bool {
    use termios::*;
    hw_change(a, b)
        || (a.iflag ^ b.iflag) & (INPCK | IXON | IXOFF) != 0
        || a.cc[VSTART] != b.cc[VSTART]
        || a.cc[VSTOP] != b.cc[VSTOP]
}

/// tty_termios_hw_change: the speeds, or `c_cflag` but HUPCL.
pub fn hw_change(a: &Termios, b: &Termios) -> bool {
    a.ispeed != b.ispeed || a.ospeed != b.ospeed || (a.cflag ^ b.cflag) & !termios::HUPCL != 0
}

/// `struct cp210x_flow_ctl`, as GET_FLOW and SET_FLOW carry it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlowCtl {
    /// ulControlHandshake.
    pub control_handshake: u32,
    /// ulFlowReplace.
    pub flow_replace: u32,
    /// ulXonLimit.
    pub xon_limit: u32,
    /// ulXoffLimit.
    pub xoff_limit: u32,
}

impl FlowCtl {
    /// From GET_FLOW's 16 bytes.
    pub fn parse(b: &[u8]) -> Option<FlowCtl> {
        let b = b.get(..16)?;
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(FlowCtl {
            control_handshake: w(0),
            flow_replace: w(4),
            xon_limit: w(8),
            xoff_limit: w(12),
        })
    }

    /// SET_FLOW's 16 bytes.
    pub fn bytes(&self) -> [u8; 16] {
        let mut b = [0u8; 16];
        for (i, v) in [
            self.control_handshake,
            self.flow_replace,
            self.xon_limit,
            self.xoff_limit,
        ]
        .into_iter()
        .enumerate()
        {
            b[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// DTR active or not, the other handshake lines off (what
    /// cp210x_set_flow_control and cp210x_tiocmset_port do to
    /// ulControlHandshake's DTR field).
    fn set_dtr(&mut self, dtr: bool) {
        self.control_handshake &= !SERIAL_DTR_MASK;
        if dtr {
            self.control_handshake |= SERIAL_DTR_ACTIVE;
        }
    }

    /// RTS: under flow control (`crtscts`) or active, else inactive.
    fn set_rts(&mut self, rts: bool, crtscts: bool) {
        self.flow_replace &= !SERIAL_RTS_MASK;
        if rts {
            self.flow_replace |= if crtscts {
                SERIAL_RTS_FLOW_CTL
            } else {
                SERIAL_RTS_ACTIVE
            };
        }
    }
}

/// What cp210x_set_flow_control makes of GET_FLOW's `f` with DTR and RTS
/// as `dtr` and `rts` and the termios' CRTSCTS, IXOFF and IXON.
pub fn flow_for(mut f: FlowCtl, dtr: bool, rts: bool, t: &Termios) -> FlowCtl {
    use termios::*;
    f.control_handshake &= !(SERIAL_DSR_HANDSHAKE | SERIAL_DCD_HANDSHAKE | SERIAL_DSR_SENSITIVITY);
    f.set_dtr(dtr);
    let crtscts = t.cflag & CRTSCTS != 0;
    if crtscts {
        f.control_handshake |= SERIAL_CTS_HANDSHAKE;
    } else {
        f.control_handshake &= !SERIAL_CTS_HANDSHAKE;
    }
    f.set_rts(rts, crtscts);
    if t.i(IXOFF) {
        f.flow_replace |= SERIAL_AUTO_RECEIVE;
        f.xon_limit = 128;
        f.xoff_limit = 128;
    } else {
        f.flow_replace &= !SERIAL_AUTO_RECEIVE;
    }
    if t.i(IXON) {
        f.flow_replace |= SERIAL_AUTO_TRANSMIT;
    } else {
        f.flow_replace &= !SERIAL_AUTO_TRANSMIT;
    }
    f
}

/// SET_MHS's value for TIOCMSET's `set` and `clear` (a clear wins).
pub fn mhs(set: u32, clear: u32) -> u16 {
    let mut control = 0;
    if set & TIOCM_RTS != 0 {
        control |= CONTROL_RTS | CONTROL_WRITE_RTS;
    }
    if set & TIOCM_DTR != 0 {
        control |= CONTROL_DTR | CONTROL_WRITE_DTR;
    }
    if clear & TIOCM_RTS != 0 {
        control &= !CONTROL_RTS;
        control |= CONTROL_WRITE_RTS;
    }
    if clear & TIOCM_DTR != 0 {
        control &= !CONTROL_DTR;
        control |= CONTROL_WRITE_DTR;
    }
    control
}

/// cp210x_tiocmget: GET_MDMSTS's byte as TIOCM bits.
pub fn modem_lines(control: u8) -> u32 {
    let mut v = 0;
    for (bit, m) in [
        (CONTROL_DTR as u8, TIOCM_DTR),
        (CONTROL_RTS as u8, TIOCM_RTS),
        (CONTROL_CTS, TIOCM_CTS),
        (CONTROL_DSR, TIOCM_DSR),
        (CONTROL_RING, TIOCM_RI),
        (CONTROL_DCD, TIOCM_CD),
    ] {
        if control & bit != 0 {
            v |= m;
        }
    }
    v
}

/// `enum cp210x_event_state`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum EventState {
    #[default]
    Data,
    Escape,
    Lsr,
    LsrData0,
    LsrData1,
    Msr,
}

/// The flag a character goes to the line discipline with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flag {
    Normal,
    Break,
    Parity,
    Frame,
}

/// The event insertion mode's parser (cp210x_process_char): the escape
/// sequences out of the data, line status events counted.
#[derive(Clone, Copy, Debug, Default)]
pub struct Events {
    state: EventState,
    lsr: u8,
}

impl Events {
    /// cp210x_process_lsr: count what line status `lsr` says; the flag
    /// of the character it comes with.
    fn lsr(lsr: u8, c: &mut Icount) -> Flag {
        let flag = if lsr & LSR_BREAK != 0 {
            c.brk += 1;
            Flag::Break
        } else if lsr & LSR_PARITY != 0 {
            c.parity += 1;
            Flag::Parity
        } else if lsr & LSR_FRAME != 0 {
            c.frame += 1;
            Flag::Frame
        } else {
            Flag::Normal
        };
        // The overrun's NUL goes in with TTY_OVERRUN, which n_tty drops.
        if lsr & LSR_OVERRUN != 0 {
            c.overrun += 1;
        }
        flag
    }

    /// One received byte: the character and its flag for the line
    /// discipline, None if it was the driver's.
    fn feed(&mut self, ch: u8, c: &mut Icount) -> Option<(u8, Flag)> {
        match self.state {
            EventState::Data if ch == ESCCHAR => self.state = EventState::Escape,
            EventState::Data => return Some((ch, Flag::Normal)),
            EventState::Escape => match ch {
                0 => {
                    self.state = EventState::Data;
                    return Some((ESCCHAR, Flag::Normal));
                }
                1 => self.state = EventState::LsrData0,
                2 => self.state = EventState::Lsr,
                3 => self.state = EventState::Msr,
                _ => {
                    tracing::debug!("cp210x: malformed event {ch:#04x}");
                    self.state = EventState::Data;
                }
            },
            EventState::LsrData0 => {
                self.lsr = ch;
                self.state = EventState::LsrData1;
            }
            EventState::LsrData1 => {
                let flag = Self::lsr(self.lsr, c);
                self.state = EventState::Data;
                return Some((ch, flag));
            }
            EventState::Lsr => {
                self.lsr = ch;
                Self::lsr(ch, c);
                self.state = EventState::Data;
            }
            // The modem status event: not implemented by the driver.
            EventState::Msr => self.state = EventState::Data,
        }
        None
    }

    /// `data` through the parser: what n_tty gets of it with termios `t`
    /// (a character with a break, parity or framing error becomes a NUL,
    /// or nothing with IGNBRK or BRKINT, IGNPAR).
    pub fn process(&mut self, data: &[u8], c: &mut Icount, t: &Termios, out: &mut Vec<u8>) {
        for &b in data {
            let dropped = match self.feed(b, c) {
                None => continue,
                Some((ch, Flag::Normal)) => {
                    out.push(ch);
                    continue;
                }
                Some((_, Flag::Break)) => t.i(termios::IGNBRK | termios::BRKINT),
                Some((_, Flag::Parity | Flag::Frame)) => t.i(termios::IGNPAR),
            };
            if !dropped {
                out.push(0);
            }
        }
    }
}

/// What cp210x keeps of a port and of its interface
/// (`cp210x_port_private`, the event state and the lines).
#[derive(Default)]
struct Private {
    event_mode: bool,
    events: Events,
    crtscts: bool,
    dtr: bool,
    rts: bool,
}

/// cp210x's part of a port.
pub struct Cp210x {
    /// The part number its probe read (`UNKNOWN` if that failed).
    pub partnum: u8,
    /// The interface (`bInterfaceNumber`, each request's index).
    pub ifnum: u8,
    /// The lowest and the highest rate the part takes.
    pub min_speed: u32,
    /// See `min_speed`.
    pub max_speed: u32,
    /// Whether rates are rounded to what the divisor gives.
    pub use_actual_rate: bool,
    /// A CP2102N whose firmware reads the XON limit as the flow replace
    /// field (erratum CP2102N_E104): no flow control.
    pub no_flow_control: bool,
    /// A CP2102 (counterfeit, likely) without event insertion.
    pub no_event_mode: bool,
    /// The bulk IN and OUT endpoints and their packet sizes.
    pub bulk_in: (u8, u16),
    /// See `bulk_in`.
    pub bulk_out: (u8, u16),
    p: Mutex<Private>,
    /// `port_priv->mutex`: flow control and the modem lines, one at a time.
    ctl: Mutex<()>,
}

impl Cp210x {
    /// The part of a port of part `partnum` on interface `ifnum`, with the
    /// probe's findings.
    pub fn new(
        partnum: u8,
        ifnum: u8,
        bulk_in: (u8, u16),
        bulk_out: (u8, u16),
        no_flow_control: bool,
        no_event_mode: bool,
    ) -> Cp210x {
        let (min_speed, max_speed, use_actual_rate) = speeds(partnum, ifnum);
        Cp210x {
            partnum,
            ifnum,
            min_speed,
            max_speed,
            use_actual_rate,
            no_flow_control,
            no_event_mode,
            bulk_in,
            bulk_out,
            p: Mutex::new(Private::default()),
            ctl: Mutex::new(()),
        }
    }

    /// cp210x_write_u16_reg: request `request` with `value`.
    fn write_u16(&self, p: &Port, request: u8, value: u16) -> SysResult<()> {
        let r = p
            .control(TO_IF, request, value, self.index(), &[], CTRL_TIMEOUT)
            .map(|_| ());
        if let Err(e) = r {
            tracing::debug!(
                "{}: failed set request {request:#x} status: {}",
                p.name(),
                -e.0
            );
        }
        r
    }

    /// cp210x_write_reg_block: request `request` with `data`.
    fn write_block(&self, p: &Port, request: u8, data: &[u8]) -> SysResult<()> {
        p.control(TO_IF, request, 0, self.index(), data, CTRL_TIMEOUT)
            .map(|_| ())
    }

    /// cp210x_read_reg_block: `len` bytes of request `request` (a short
    /// answer is an error, as usb_control_msg_recv's).
    fn read_block(&self, p: &Port, request: u8, len: usize) -> SysResult<Vec<u8>> {
        let got = p.control(
            FROM_IF,
            request,
            0,
            self.index(),
            &vec![0; len],
            CTRL_TIMEOUT,
        )?;
        if got.len() != len {
            return Err(Errno(libc::EREMOTEIO));
        }
        Ok(got)
    }

    fn index(&self) -> u16 {
        u16::from(self.ifnum)
    }

    /// cp210x_change_speed: SET_BAUDRATE with the rate the part gets; the
    /// rate goes back to the termios.
    fn change_speed(&self, p: &Port, old: Option<&Termios>, t: &mut Termios) {
        if t.ospeed == 0 {
            return;
        }
        let mut baud = rate_for(self.partnum, self.ifnum, t.ospeed);
        if self
            .write_block(p, req::SET_BAUDRATE, &baud.to_le_bytes())
            .is_err()
        {
            tracing::warn!("{}: failed to set baud rate to {baud}", p.name());
            baud = old.map_or(9600, |o| o.ospeed);
        }
        t.encode_baud_rate(baud, baud);
    }

    /// cp210x_enable_event_mode.
    fn enable_event_mode(&self, p: &Port) {
        {
            let mut pr = self.p.lock_ok();
            if pr.event_mode || self.no_event_mode {
                return;
            }
            pr.events = Events::default();
            pr.event_mode = true;
        }
        if self
            .write_u16(p, req::EMBED_EVENTS, u16::from(ESCCHAR))
            .is_err()
        {
            tracing::warn!("{}: failed to enable events", p.name());
            self.p.lock_ok().event_mode = false;
        }
    }

    /// cp210x_disable_event_mode.
    fn disable_event_mode(&self, p: &Port) {
        if !self.p.lock_ok().event_mode {
            return;
        }
        if self.write_u16(p, req::EMBED_EVENTS, 0).is_ok() {
            self.p.lock_ok().event_mode = false;
        }
    }

    /// cp210x_set_flow_control.
    fn set_flow_control(&self, p: &Port, old: Option<&Termios>, t: &mut Termios) {
        use termios::*;
        if self.no_flow_control {
            t.cflag &= !CRTSCTS;
            t.iflag &= !(IXON | IXOFF);
        }
        if let Some(o) = old {
            if t.ospeed != 0
                && o.ospeed != 0
                && (t.cflag ^ o.cflag) & CRTSCTS == 0
                && (t.iflag ^ o.iflag) & (IXON | IXOFF) == 0
                && t.cc[VSTART] == o.cc[VSTART]
                && t.cc[VSTOP] == o.cc[VSTOP]
            {
                return;
            }
        }
        if t.i(IXON | IXOFF) {
            // struct cp210x_special_chars: EOF, error, break, event, XON,
            // XOFF.
            let chars = [0, 0, 0, 0, t.cc[VSTART], t.cc[VSTOP]];
            if self.write_block(p, req::SET_CHARS, &chars).is_err() {
                tracing::warn!("{}: failed to set special chars", p.name());
            }
        }
        let _g = self.ctl.lock_ok();
        let (dtr, rts) = {
            let mut pr = self.p.lock_ok();
            if t.ospeed == 0 {
                pr.dtr = false;
                pr.rts = false;
            } else if old.is_some_and(|o| o.ospeed == 0) {
                pr.dtr = true;
                pr.rts = true;
            }
            (pr.dtr, pr.rts)
        };
        let Some(f) = self
            .read_block(p, req::GET_FLOW, 16)
            .ok()
            .and_then(|b| FlowCtl::parse(&b))
        else {
            return;
        };
        let f = flow_for(f, dtr, rts, t);
        if self.write_block(p, req::SET_FLOW, &f.bytes()).is_ok() {
            self.p.lock_ok().crtscts = t.cflag & CRTSCTS != 0;
        }
    }

    /// cp210x_tiocmset_port: SET_MHS, or with hardware flow control and
    /// RTS to change, SET_FLOW.
    fn tiocmset_port(&self, p: &Port, set: u32, clear: u32) -> SysResult<()> {
        let _g = self.ctl.lock_ok();
        let control = mhs(set, clear);
        let (dtr, rts, crtscts) = {
            let mut pr = self.p.lock_ok();
            if set & TIOCM_RTS != 0 {
                pr.rts = true;
            }
            if set & TIOCM_DTR != 0 {
                pr.dtr = true;
            }
            if clear & TIOCM_RTS != 0 {
                pr.rts = false;
            }
            if clear & TIOCM_DTR != 0 {
                pr.dtr = false;
            }
            (pr.dtr, pr.rts, pr.crtscts)
        };
        if crtscts && control & CONTROL_WRITE_RTS != 0 {
            let b = self.read_block(p, req::GET_FLOW, 16)?;
            let mut f = FlowCtl::parse(&b).ok_or(Errno::EIO)?;
            f.set_dtr(dtr);
            f.set_rts(rts, true);
            self.write_block(p, req::SET_FLOW, &f.bytes())
        } else {
            self.write_u16(p, req::SET_MHS, control)
        }
    }
}

impl PortDriver for Cp210x {
    fn driver_name(&self) -> &'static str {
        "cp210x"
    }

    fn describe(&self) -> String {
        format!("cp210x converter ({})", part::name(self.partnum))
    }

    /// Two of `bulk_in_size`: the driver's 256 or the packet size.
    fn read_urbs(&self) -> Urbs {
        Urbs::usb_serial(self.bulk_in.0, self.bulk_in.1, 256)
    }

    /// Two of `bulk_out_size`: the driver's 256 or the packet size.
    fn write_urbs(&self) -> Urbs {
        Urbs::usb_serial(self.bulk_out.0, self.bulk_out.1, 256)
    }

    /// cp210x_open: the UART on (the termios and the read URBs follow).
    fn open(&self, p: &Port) -> SysResult<()> {
        self.write_u16(p, req::IFC_ENABLE, UART_ENABLE)
            .inspect_err(|_| tracing::warn!("{}: unable to enable UART", p.name()))
    }

    /// cp210x_close: after the URBs, both queues purged and the UART off
    /// (which ends the event insertion mode).
    fn close(&self, p: &Port) {
        let _ = self.write_u16(p, req::PURGE, PURGE_ALL);
        let _ = self.write_u16(p, req::IFC_ENABLE, UART_DISABLE);
        self.p.lock_ok().event_mode = false;
    }

    /// cp210x_set_termios.
    fn set_termios(&self, p: &Port, old: Option<&Termios>, t: &mut Termios) -> SysResult<()> {
        use termios::*;
        if let Some(o) = old {
            if !termios_change(t, o) && t.ospeed != 0 {
                return Ok(());
            }
        }
        if old.is_none_or(|o| t.ospeed != o.ospeed) {
            self.change_speed(p, old, t);
        }
        // The CP2101 has 8 data bits, 1 stop bit and no stick parity.
        if self.partnum == part::CP2101 {
            t.cflag &= !(CSIZE | CSTOPB | CMSPAR);
            t.cflag |= CS8;
        }
        if self
            .write_u16(p, req::SET_LINE_CTL, line_ctl(t.cflag))
            .is_err()
        {
            tracing::warn!("{}: failed to set line control", p.name());
        }
        self.set_flow_control(p, old, t);
        // The event insertion mode while input parity checking is on.
        if t.i(INPCK) {
            self.enable_event_mode(p);
        } else {
            self.disable_event_mode(p);
        }
        Ok(())
    }

    /// cp210x_dtr_rts.
    fn dtr_rts(&self, p: &Port, on: bool) {
        let both = TIOCM_DTR | TIOCM_RTS;
        let _ = if on {
            self.tiocmset_port(p, both, 0)
        } else {
            self.tiocmset_port(p, 0, both)
        };
    }

    /// cp210x_tiocmget: GET_MDMSTS.
    fn tiocmget(&self, p: &Port) -> SysResult<u32> {
        let b = self.read_block(p, req::GET_MDMSTS, 1)?;
        Ok(modem_lines(b[0]))
    }

    fn tiocmset(&self, p: &Port, set: u32, clear: u32) -> SysResult<()> {
        self.tiocmset_port(p, set, clear)
    }

    /// cp210x_break_ctl: SET_BREAK (not on the CP2105's second port).
    fn break_ctl(&self, p: &Port, on: bool) -> SysResult<()> {
        if self.partnum == part::CP2105 && self.ifnum == 1 {
            return Err(Errno::ENOTTY);
        }
        self.write_u16(p, req::SET_BREAK, if on { BREAK_ON } else { BREAK_OFF })
    }

    /// cp210x_process_read_urb: in event insertion mode, through the
    /// event parser; otherwise as it came.
    fn process_read<'a>(&self, st: &mut PortState, data: &'a [u8]) -> Cow<'a, [u8]> {
        let mut pr = self.p.lock_ok();
        if !pr.event_mode {
            return Cow::Borrowed(data);
        }
        let t = st.termios;
        let mut out = Vec::with_capacity(data.len());
        pr.events.process(data, &mut st.icount, &t, &mut out);
        Cow::Owned(out)
    }

    /// cp210x_tx_empty: GET_COMM_STATUS's ulAmountInOutQueue is 0 (or the
    /// request failed).
    fn tx_empty(&self, p: &Port) -> Option<bool> {
        Some(
            match self.read_block(p, req::GET_COMM_STATUS, COMM_STATUS_SIZE) {
                Ok(b) => u32::from_le_bytes([b[12], b[13], b[14], b[15]]) == 0,
                Err(_) => true,
            },
        )
    }

    /// cp210x has no `tiocmiwait`.
    fn has_tiocmiwait(&self) -> bool {
        false
    }
}

/// The probe's findings in its answers (cp210x_determine_type): the part
/// number (`UNKNOWN` if GET_PARTNUM failed), whether a CP2102 answered its
/// two-byte part number request with one byte (no event mode), and
/// whether a CP2102N's firmware is 1.0.4 or older (no flow control).
pub fn probe_findings(answers: &[ProbeAnswer]) -> (u8, bool, bool) {
    let ok = |a: &&ProbeAnswer| a.status == 0;
    let partnum = ProbeAnswer::find(answers, req::VENDOR_SPECIFIC, vendor::GET_PARTNUM, 1)
        .filter(ok)
        .and_then(|a| (a.data.len() == 1).then_some(a.data[0]))
        .unwrap_or(part::UNKNOWN);
    let no_event_mode = partnum == part::CP2102
        && ProbeAnswer::find(answers, req::VENDOR_SPECIFIC, vendor::GET_PARTNUM, 2)
            .filter(ok)
            .is_some_and(|a| a.data.len() == 1);
    let no_flow_control = part::is_cp2102n(partnum)
        && ProbeAnswer::find(answers, req::VENDOR_SPECIFIC, vendor::GET_FW_VER_2N, 3)
            .filter(ok)
            .filter(|a| a.data.len() == 3)
            .is_some_and(|a| {
                let v =
                    u32::from(a.data[0]) << 16 | u32::from(a.data[1]) << 8 | u32::from(a.data[2]);
                v <= 0x1_0004
            });
    (partnum, no_event_mode, no_flow_control)
}

/// cp210x's part of the port of interface `i` of `d` (usb_serial_probe,
/// cp210x_attach and cp210x_port_probe, from what the probe's requests
/// were answered); None if the interface lacks a bulk endpoint each way.
pub fn port_driver(d: &UsbDevice, i: &Interface) -> Option<Cp210x> {
    let eps = serial::endpoints(d, i);
    let bulk = |dir_in: bool| serial::find(&eps, 2, dir_in);
    let (partnum, no_event_mode, no_flow_control) = probe_findings(&i.probe_answers);
    Some(Cp210x::new(
        partnum,
        i.number,
        bulk(true)?,
        bulk(false)?,
        no_flow_control,
        no_event_mode,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tty::termios::*;

    #[test]
    fn rates_are_rounded_as_each_part_rounds_them() {
        // AN205's table: a request maps to the rate whose range holds it.
        assert_eq!(an205_rate(9600), 9600);
        assert_eq!(an205_rate(9612), 9600);
        assert_eq!(an205_rate(9613), 14400);
        assert_eq!(an205_rate(115_200), 115_200);
        assert_eq!(an205_rate(117_029), 128_000);
        assert_eq!(an205_rate(700_000), 921_600);
        // The divisor's rate: 48 MHz / (2 * round(48 MHz / (2 * 115200)))
        // = 48e6 / (2 * 208) = 115384; 9600 and 3 M come out exact; 300
        // baud takes the prescaler of 4: 48e6 / (8 * 20000) = 300.
        assert_eq!(actual_rate(115_200), 115_384);
        assert_eq!(actual_rate(9600), 9600);
        assert_eq!(actual_rate(3_000_000), 3_000_000);
        assert_eq!(actual_rate(300), 300);
        assert_eq!(actual_rate(250_000), 250_000);
        // 1 Mbaud on a CP2104: round(24) = 24, exact; 2 M too; 921600:
        // round(26.04) = 26: 923076.
        assert_eq!(actual_rate(921_600), 923_076);
        // Per part: a CP2102 clamps to 1 M and maps below it; a CP2102N
        // goes to 3 M with the divisor's rates; a CP2105's second port
        // takes 2400 to 921600 through the table.
        assert_eq!(rate_for(part::CP2102, 0, 3_000_000), 1_000_000);
        assert_eq!(rate_for(part::CP2102, 0, 115_200), 115_200);
        assert_eq!(rate_for(part::CP2102, 0, 110), 300);
        assert_eq!(rate_for(part::CP2101, 0, 1_000_000), 921_600);
        assert_eq!(rate_for(part::CP2102N_QFN28, 0, 115_200), 115_384);
        assert_eq!(rate_for(part::CP2102N_QFN20, 0, 4_000_000), 3_000_000);
        assert_eq!(rate_for(part::CP2104, 0, 3_000_000), 2_000_000);
        assert_eq!(rate_for(part::CP2105, 0, 115_200), 115_384);
        assert_eq!(rate_for(part::CP2105, 1, 1200), 2400);
        assert_eq!(rate_for(part::CP2105, 1, 3_000_000), 921_600);
        assert_eq!(rate_for(part::CP2108, 0, 3_000_000), 2_000_000);
        assert_eq!(rate_for(part::CP2108, 0, 1_500_000), 1_500_000);
        assert_eq!(rate_for(part::UNKNOWN, 0, 57_600), 57_600);
    }

    #[test]
    fn line_control_values() {
        // 8N1: BITS_DATA_8; 7O2: 0x0700 | 0x0010 | 0x0002; 5 data bits
        // with mark parity; 6 with space parity.
        assert_eq!(line_ctl(CS8), 0x0800);
        assert_eq!(line_ctl(CS7 | PARENB | PARODD | CSTOPB), 0x0712);
        assert_eq!(line_ctl(CS8 | PARENB), 0x0820);
        assert_eq!(line_ctl(CS5 | PARENB | PARODD | CMSPAR), 0x0530);
        assert_eq!(line_ctl(CS6 | PARENB | CMSPAR), 0x0640);
    }

    #[test]
    fn modem_control_and_status() {
        // dtr_rts(1): both written high; (0): both written low.
        assert_eq!(mhs(TIOCM_DTR | TIOCM_RTS, 0), 0x0303);
        assert_eq!(mhs(0, TIOCM_DTR | TIOCM_RTS), 0x0300);
        assert_eq!(mhs(TIOCM_DTR, 0), 0x0101);
        assert_eq!(mhs(0, TIOCM_RTS), 0x0200);
        // Set and cleared at once: cleared.
        assert_eq!(mhs(TIOCM_DTR, TIOCM_DTR), 0x0100);
        assert_eq!(
            modem_lines(0x33),
            TIOCM_DTR | TIOCM_RTS | TIOCM_CTS | TIOCM_DSR
        );
        assert_eq!(modem_lines(0xc0), TIOCM_RI | TIOCM_CD);
    }

    #[test]
    fn flow_control_struct() {
        let t = Termios::std(USB_INIT_CFLAG);
        // The initial termios has IXON: auto transmit; DTR and RTS
        // inactive before the open raises them; the DSR and DCD handshakes
        // and DSR sensitivity go.
        let dev = FlowCtl {
            control_handshake: 0x01 | 0x10 | 0x20 | 0x40,
            flow_replace: 0x40,
            xon_limit: 0,
            xoff_limit: 0,
        };
        let f = flow_for(dev, false, false, &t);
        assert_eq!((f.control_handshake, f.flow_replace), (0, 0x01));
        // Raw, RTS/CTS: CTS handshake, RTS under flow control.
        let mut raw = t;
        raw.iflag = 0;
        raw.cflag |= CRTSCTS;
        let f = flow_for(dev, true, true, &raw);
        assert_eq!((f.control_handshake, f.flow_replace), (0x09, 0x80));
        // IXOFF: auto receive and the limits of 128.
        raw.cflag &= !CRTSCTS;
        raw.iflag = IXOFF;
        let f = flow_for(dev, true, true, &raw);
        assert_eq!(
            (
                f.control_handshake,
                f.flow_replace,
                f.xon_limit,
                f.xoff_limit
            ),
            (0x01, 0x42, 128, 128)
        );
        assert_eq!(FlowCtl::parse(&f.bytes()), Some(f));
        assert_eq!(
            f.bytes(),
            [1, 0, 0, 0, 0x42, 0, 0, 0, 128, 0, 0, 0, 128, 0, 0, 0]
        );
    }

    #[test]
    fn termios_changes_that_count() {
        let a = Termios::std(USB_INIT_CFLAG);
        let mut b = a;
        b.cflag &= !HUPCL;
        assert!(!termios_change(&a, &b));
        b.iflag &= !IXON;
        assert!(termios_change(&a, &b));
        let mut c = a;
        c.iflag |= ICRNL | IGNCR;
        assert!(!termios_change(&a, &c));
        c.cc[VSTOP] = 0;
        assert!(termios_change(&a, &c));
    }

    #[test]
    fn event_insertion_sequences() {
        let t = Termios::std(USB_INIT_CFLAG);
        let mut ev = Events::default();
        let mut c = Icount::default();
        let mut out = Vec::new();
        // Data, an escaped 0xec, a line status with data (parity error on
        // 'x'), a line status alone (break and overrun), a modem status.
        let data = [
            b'a', 0xec, 0x00, 0xec, 0x01, 0x04, b'x', 0xec, 0x02, 0x12, 0xec, 0x03, 0xb0, b'z',
        ];
        ev.process(&data, &mut c, &t, &mut out);
        assert_eq!(out, [b'a', 0xec, 0, b'z']);
        assert_eq!((c.parity, c.brk, c.overrun, c.frame), (1, 1, 1, 0));
        // A sequence split across two URBs.
        out.clear();
        ev.process(&[0xec], &mut c, &t, &mut out);
        ev.process(&[0x01, 0x08, b'q'], &mut c, &t, &mut out);
        assert_eq!((out.as_slice(), c.frame), (&[0u8][..], 1));
        // IGNPAR drops the character.
        let mut ign = t;
        ign.iflag |= IGNPAR;
        out.clear();
        ev.process(&[0xec, 0x01, 0x04, b'x', b'y'], &mut c, &ign, &mut out);
        assert_eq!(out, b"y");
    }

    fn answer(value: u16, len: u16, status: i32, data: &[u8]) -> ProbeAnswer {
        let mut setup = [0xc0, 0xff, 0, 0, 0, 0, 0, 0];
        setup[2..4].copy_from_slice(&value.to_le_bytes());
        setup[6..8].copy_from_slice(&len.to_le_bytes());
        ProbeAnswer {
            setup,
            status,
            data: data.to_vec(),
        }
    }

    #[test]
    fn probe_findings_from_the_answers() {
        assert_eq!(probe_findings(&[]), (part::UNKNOWN, false, false));
        let stalled = [answer(vendor::GET_PARTNUM, 1, -32, &[])];
        assert_eq!(probe_findings(&stalled), (part::UNKNOWN, false, false));
        let genuine = [
            answer(vendor::GET_PARTNUM, 1, 0, &[2]),
            answer(vendor::GET_PARTNUM, 2, 0, &[2, 0]),
        ];
        assert_eq!(probe_findings(&genuine), (part::CP2102, false, false));
        let clone = [
            answer(vendor::GET_PARTNUM, 1, 0, &[2]),
            answer(vendor::GET_PARTNUM, 2, 0, &[2]),
        ];
        assert_eq!(probe_findings(&clone), (part::CP2102, true, false));
        let old_2n = [
            answer(vendor::GET_PARTNUM, 1, 0, &[0x20]),
            answer(vendor::GET_FW_VER_2N, 3, 0, &[1, 0, 4]),
        ];
        assert_eq!(probe_findings(&old_2n), (part::CP2102N_QFN28, false, true));
        let new_2n = [
            answer(vendor::GET_PARTNUM, 1, 0, &[0x22]),
            answer(vendor::GET_FW_VER_2N, 3, 0, &[1, 0, 8]),
        ];
        assert_eq!(probe_findings(&new_2n), (part::CP2102N_QFN20, false, false));
    }
}
