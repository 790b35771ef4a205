//! ch341's side of its tty port (`drivers/usb/serial/ch341.c`, the
//! usb-serial driver `ch341-uart`): the chip version and the quirks its
//! probe found; its vendor requests (WRITE_REG of the prescaler and
//! divisor, computed as ch341_get_divisor does, and of the line control
//! register; MODEM_CTRL with DTR and RTS inverted; READ_REG of the modem
//! status at the open and of the break and line control registers for a
//! break, or the simulated break of the chips that lack one); the
//! interrupt IN URB it keeps in flight while the port is open, whose
//! status bytes are the modem lines TIOCMGET answers. The usb-serial
//! core's generic parts (2 read URBs and 2 write URBs of the endpoints'
//! packet size) are [`super::serial`]'s and the port's.

use std::borrow::Cow;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::usbcore::device::{Interface, ProbeAnswer, UsbDevice};

use super::port::{
    Port, PortDriver, PortState, Urbs, TIOCM_CD, TIOCM_CTS, TIOCM_DSR, TIOCM_DTR, TIOCM_RI,
    TIOCM_RTS,
};
use super::serial;
use super::termios::{self, Termios};

/// The vendor requests (`CH341_REQ_*`).
pub mod req {
    /// CH341_REQ_READ_VERSION.
    pub const READ_VERSION: u8 = 0x5f;
    /// CH341_REQ_WRITE_REG.
    pub const WRITE_REG: u8 = 0x9a;
    /// CH341_REQ_READ_REG.
    pub const READ_REG: u8 = 0x95;
    /// CH341_REQ_SERIAL_INIT.
    pub const SERIAL_INIT: u8 = 0xa1;
    /// CH341_REQ_MODEM_CTRL.
    pub const MODEM_CTRL: u8 = 0xa4;
}

/// The registers (`CH341_REG_*`).
pub mod reg {
    /// CH341_REG_BREAK.
    pub const BREAK: u8 = 0x05;
    /// CH341_REG_PRESCALER.
    pub const PRESCALER: u8 = 0x12;
    /// CH341_REG_DIVISOR.
    pub const DIVISOR: u8 = 0x13;
    /// CH341_REG_LCR.
    pub const LCR: u8 = 0x18;
    /// CH341_REG_LCR2.
    pub const LCR2: u8 = 0x25;
}

/// Vendor request types, out and in (to and from the device).
pub const OUT: u8 = 0x40;
/// See [`OUT`].
pub const IN: u8 = 0xc0;
/// `DEFAULT_TIMEOUT`: 1000 ms.
const TIMEOUT: Duration = Duration::from_millis(1000);

/// MODEM_CTRL's bits (sent inverted).
pub const BIT_RTS: u8 = 1 << 6;
/// See [`BIT_RTS`].
pub const BIT_DTR: u8 = 1 << 5;

/// The modem status bits (inverted in the interrupt data and register 6).
const BIT_CTS: u8 = 0x01;
const BIT_DSR: u8 = 0x02;
const BIT_RI: u8 = 0x04;
const BIT_DCD: u8 = 0x08;
const BITS_MODEM_STAT: u8 = 0x0f;

const NBREAK_BITS: u8 = 0x01;

/// The line control register's bits (`CH341_LCR_*`).
pub mod lcr {
    /// CH341_LCR_ENABLE_RX.
    pub const ENABLE_RX: u8 = 0x80;
    /// CH341_LCR_ENABLE_TX.
    pub const ENABLE_TX: u8 = 0x40;
    /// CH341_LCR_MARK_SPACE.
    pub const MARK_SPACE: u8 = 0x20;
    /// CH341_LCR_PAR_EVEN.
    pub const PAR_EVEN: u8 = 0x10;
    /// CH341_LCR_ENABLE_PAR.
    pub const ENABLE_PAR: u8 = 0x08;
    /// CH341_LCR_STOP_BITS_2.
    pub const STOP_BITS_2: u8 = 0x04;
    /// CH341_LCR_CS8.
    pub const CS8: u8 = 0x03;
    /// CH341_LCR_CS7.
    pub const CS7: u8 = 0x02;
    /// CH341_LCR_CS6.
    pub const CS6: u8 = 0x01;
    /// CH341_LCR_CS5.
    pub const CS5: u8 = 0x00;
}

/// `CH341_QUIRK_LIMITED_PRESCALER`.
pub const QUIRK_LIMITED_PRESCALER: u8 = 1 << 0;
/// `CH341_QUIRK_SIMULATE_BREAK`.
pub const QUIRK_SIMULATE_BREAK: u8 = 1 << 1;

/// `CH341_CLKRATE`.
const CLKRATE: u32 = 48_000_000;

/// `CH341_CLK_DIV(ps, fact)`.
const fn clk_div(ps: u32, fact: u32) -> u32 {
    1 << (12 - 3 * ps - fact)
}

/// `CH341_MIN_RATE(ps)`.
const fn min_rate(ps: u32) -> u32 {
    CLKRATE / (clk_div(ps, 1) * 512)
}

/// `CH341_MIN_BPS`: 46.
pub const MIN_BPS: u32 = CLKRATE.div_ceil(clk_div(0, 0) * 256);
/// `CH341_MAX_BPS`: 3,000,000.
pub const MAX_BPS: u32 = CLKRATE / (clk_div(3, 0) * 2);

/// ch341_get_divisor: the prescaler and divisor register pair for `speed`
/// (`(0x100 - div) << 8 | fact << 2 | ps`), with the quirks `quirks`;
/// None where the driver gives -EINVAL.
pub fn divisor(quirks: u8, speed: u32) -> Option<u16> {
    let speed = speed.clamp(MIN_BPS, MAX_BPS);
    let mut fact = 1;
    let ps = (0..=3u32).rev().find(|ps| speed > min_rate(*ps))?;
    let mut clk = clk_div(ps, fact);
    let mut div = CLKRATE / (clk * speed);
    let force_fact0 = ps < 3 && quirks & QUIRK_LIMITED_PRESCALER != 0;
    if !(9..=255).contains(&div) || force_fact0 {
        div /= 2;
        clk *= 2;
        fact = 0;
    }
    if div < 2 {
        return None;
    }
    // The next divisor if its rate is closer (scaled up by 16; unsigned,
    // as the kernel's).
    let above = (16 * CLKRATE / (clk * div)).wrapping_sub(16 * speed);
    let below = (16 * speed).wrapping_sub(16 * CLKRATE / (clk * (div + 1)));
    if above >= below {
        div += 1;
    }
    // The lower base clock for an even divisor.
    if fact == 1 && div % 2 == 0 {
        div /= 2;
        fact = 0;
    }
    Some(((0x100 - div) << 8 | fact << 2 | ps) as u16)
}

/// The rate a prescaler and divisor register pair gives (bit 7 aside).
pub fn rate_of(value: u16) -> u32 {
    let ps = u32::from(value & 3);
    let fact = u32::from((value >> 2) & 1);
    let div = 0x100 - u32::from(value >> 8);
    CLKRATE / (clk_div(ps, fact) * div)
}

/// The line control register for `cflag` (ch341_set_termios).
pub fn lcr_for(cflag: u32) -> u8 {
    use termios::*;
    let mut l = lcr::ENABLE_RX | lcr::ENABLE_TX;
    l |= match cflag & CSIZE {
        CS5 => lcr::CS5,
        CS6 => lcr::CS6,
        CS7 => lcr::CS7,
        _ => lcr::CS8,
    };
    if cflag & PARENB != 0 {
        l |= lcr::ENABLE_PAR;
        if cflag & PARODD == 0 {
            l |= lcr::PAR_EVEN;
        }
        if cflag & CMSPAR != 0 {
            l |= lcr::MARK_SPACE;
        }
    }
    if cflag & CSTOPB != 0 {
        l |= lcr::STOP_BITS_2;
    }
    l
}

/// MODEM_CTRL's value for `mcr`: `~control` as the 16-bit wValue.
pub fn handshake_value(mcr: u8) -> u16 {
    !u16::from(mcr)
}

/// The modem status bits of an interrupt packet (its third byte,
/// inverted); None for a packet shorter than 4 bytes.
pub fn status_of(data: &[u8]) -> Option<u8> {
    (data.len() >= 4).then(|| !data[2] & BITS_MODEM_STAT)
}

/// ch341_tiocmget: DTR and RTS as set, the modem status as last read.
pub fn modem_lines(mcr: u8, msr: u8) -> u32 {
    let mut v = 0;
    for (on, m) in [
        (mcr & BIT_DTR != 0, TIOCM_DTR),
        (mcr & BIT_RTS != 0, TIOCM_RTS),
        (msr & BIT_CTS != 0, TIOCM_CTS),
        (msr & BIT_DSR != 0, TIOCM_DSR),
        (msr & BIT_RI != 0, TIOCM_RI),
        (msr & BIT_DCD != 0, TIOCM_CD),
    ] {
        if on {
            v |= m;
        }
    }
    v
}

/// What ch341 keeps of a port (`struct ch341_private`).
struct Private {
    baud_rate: u32,
    mcr: u8,
    msr: u8,
    lcr: u8,
    /// When a simulated break's NUL is out.
    break_end: Option<Instant>,
}

/// ch341's part of a port.
pub struct Ch341 {
    /// The chip version READ_VERSION gave.
    pub version: u8,
    /// The quirks its probe found.
    pub quirks: u8,
    /// The bulk IN and OUT endpoints and their packet sizes.
    pub bulk_in: (u8, u16),
    /// See `bulk_in`.
    pub bulk_out: (u8, u16),
    /// The interrupt IN endpoint and its packet size.
    pub interrupt_in: (u8, u16),
    p: Mutex<Private>,
}

impl Ch341 {
    /// The part of a port of a chip of `version` with `quirks`, as its
    /// probe left it (9600 baud, 8N1, DTR and RTS low).
    pub fn new(
        version: u8,
        quirks: u8,
        bulk_in: (u8, u16),
        bulk_out: (u8, u16),
        interrupt_in: (u8, u16),
    ) -> Ch341 {
        Ch341 {
            version,
            quirks,
            bulk_in,
            bulk_out,
            interrupt_in,
            p: Mutex::new(Private {
                baud_rate: 9600,
                mcr: 0,
                msr: 0,
                lcr: lcr::ENABLE_RX | lcr::ENABLE_TX | lcr::CS8,
                break_end: None,
            }),
        }
    }

    /// ch341_control_out.
    fn out(&self, p: &Port, request: u8, value: u16, index: u16) -> SysResult<()> {
        let r = p
            .control(OUT, request, value, index, &[], TIMEOUT)
            .map(|_| ());
        if let Err(e) = r {
            tracing::debug!("{}: failed to send control message: {}", p.name(), -e.0);
        }
        r
    }

    /// ch341_control_in: `len` bytes (a short answer is an error).
    fn input(&self, p: &Port, request: u8, value: u16, len: usize) -> SysResult<Vec<u8>> {
        let got = p.control(IN, request, value, 0, &vec![0; len], TIMEOUT)?;
        if got.len() != len {
            return Err(Errno(libc::EREMOTEIO));
        }
        Ok(got)
    }

    /// ch341_set_baudrate_lcr: the prescaler and divisor (bit 7 set on
    /// chips after version 0x27: no buffering up to a full packet), then
    /// on version 0x30 and later the line control register.
    fn set_baudrate_lcr(&self, p: &Port, baud: u32, lcr: u8) -> SysResult<()> {
        if baud == 0 {
            return Err(Errno::EINVAL);
        }
        let mut val = divisor(self.quirks, baud).ok_or(Errno::EINVAL)?;
        if self.version > 0x27 {
            val |= 1 << 7;
        }
        let pair = |hi: u8, lo: u8| u16::from(hi) << 8 | u16::from(lo);
        self.out(p, req::WRITE_REG, pair(reg::DIVISOR, reg::PRESCALER), val)?;
        if self.version < 0x30 {
            return Ok(());
        }
        self.out(p, req::WRITE_REG, pair(reg::LCR2, reg::LCR), u16::from(lcr))
    }

    /// ch341_set_handshake.
    fn set_handshake(&self, p: &Port, mcr: u8) -> SysResult<()> {
        self.out(p, req::MODEM_CTRL, handshake_value(mcr), 0)
    }

    /// ch341_simulate_break: on, the lowest rate and a NUL; off (once the
    /// NUL is out), the rate and line control back.
    fn simulate_break(&self, p: &Port, on: bool) -> SysResult<()> {
        let mut r = Ok(());
        if on {
            let l = lcr::ENABLE_RX | lcr::ENABLE_TX | lcr::CS8;
            match self.set_baudrate_lcr(p, MIN_BPS, l) {
                Ok(()) => {
                    p.queue_write(&[0]);
                    // 11 bits (start, 8 data, stop, margin) at 46 baud, in
                    // jiffies of 4 ms (HZ 250): 59 jiffies.
                    let jiffies = u64::from(11 * 250 / MIN_BPS);
                    self.p.lock_ok().break_end =
                        Some(Instant::now() + Duration::from_millis(4 * jiffies));
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!("{}: failed to change baud rate to {MIN_BPS}", p.name());
                    r = Err(e);
                }
            }
        } else {
            let end = self.p.lock_ok().break_end.take();
            if let Some(end) = end {
                let now = Instant::now();
                if now < end {
                    std::thread::sleep(end - now);
                }
            }
        }
        let (baud, lcr) = {
            let pr = self.p.lock_ok();
            (pr.baud_rate, pr.lcr)
        };
        self.set_baudrate_lcr(p, baud, lcr)?;
        r
    }
}

impl PortDriver for Ch341 {
    fn driver_name(&self) -> &'static str {
        "ch341-uart"
    }

    fn describe(&self) -> String {
        format!("ch341-uart converter (chip version {:#04x})", self.version)
    }

    /// Two of the bulk IN endpoint's packet size (the driver sets no
    /// `bulk_in_size`).
    fn read_urbs(&self) -> Urbs {
        Urbs::usb_serial(self.bulk_in.0, self.bulk_in.1, 0)
    }

    /// Two of the bulk OUT endpoint's packet size.
    fn write_urbs(&self) -> Urbs {
        Urbs::usb_serial(self.bulk_out.0, self.bulk_out.1, 0)
    }

    /// The interrupt IN URB of the endpoint's packet size.
    fn notify_urb(&self) -> Option<(u8, u16)> {
        Some(self.interrupt_in)
    }

    /// ch341_open: the termios first, then the interrupt URB, then this.
    fn termios_first(&self) -> bool {
        true
    }

    /// ch341_open's ch341_get_status: the modem status register.
    fn open(&self, p: &Port) -> SysResult<()> {
        let b = self
            .input(p, req::READ_REG, 0x0706, 2)
            .inspect_err(|_| tracing::warn!("{}: failed to read modem status", p.name()))?;
        self.p.lock_ok().msr = !b[0] & BITS_MODEM_STAT;
        Ok(())
    }

    /// ch341_close: the interrupt URB after the generic close's.
    fn notify_killed_last(&self) -> bool {
        true
    }

    /// ch341_set_termios: only a change of the hardware settings is sent
    /// (redundant ones may lose bytes); the handshake always.
    fn set_termios(&self, p: &Port, old: Option<&Termios>, t: &mut Termios) -> SysResult<()> {
        use termios::*;
        if old.is_some_and(|o| !hw_change(t, o)) {
            return Ok(());
        }
        let baud = t.baud_rate();
        let l = lcr_for(t.cflag);
        if baud != 0 {
            self.p.lock_ok().baud_rate = baud;
            match self.set_baudrate_lcr(p, baud, l) {
                Err(_) if old.is_some() => {
                    let o = old.expect("checked");
                    self.p.lock_ok().baud_rate = o.baud_rate();
                    // tty_termios_copy_hw.
                    t.cflag = (t.cflag & HUPCL) | (o.cflag & !HUPCL);
                    t.ispeed = o.ispeed;
                    t.ospeed = o.ospeed;
                }
                Ok(()) => self.p.lock_ok().lcr = l,
                Err(_) => {}
            }
        }
        let mcr = {
            let mut pr = self.p.lock_ok();
            if t.cflag & CBAUD == B0 {
                pr.mcr &= !(BIT_DTR | BIT_RTS);
            } else if old.is_some_and(|o| o.cflag & CBAUD == B0) {
                pr.mcr |= BIT_DTR | BIT_RTS;
            }
            pr.mcr
        };
        let _ = self.set_handshake(p, mcr);
        Ok(())
    }

    /// ch341_dtr_rts.
    fn dtr_rts(&self, p: &Port, on: bool) {
        let mcr = {
            let mut pr = self.p.lock_ok();
            if on {
                pr.mcr |= BIT_RTS | BIT_DTR;
            } else {
                pr.mcr &= !(BIT_RTS | BIT_DTR);
            }
            pr.mcr
        };
        let _ = self.set_handshake(p, mcr);
    }

    /// ch341_tiocmget: no request.
    fn tiocmget(&self, _p: &Port) -> SysResult<u32> {
        let pr = self.p.lock_ok();
        Ok(modem_lines(pr.mcr, pr.msr))
    }

    /// ch341_tiocmset: MODEM_CTRL, whatever changed.
    fn tiocmset(&self, p: &Port, set: u32, clear: u32) -> SysResult<()> {
        let mcr = {
            let mut pr = self.p.lock_ok();
            if set & TIOCM_RTS != 0 {
                pr.mcr |= BIT_RTS;
            }
            if set & TIOCM_DTR != 0 {
                pr.mcr |= BIT_DTR;
            }
            if clear & TIOCM_RTS != 0 {
                pr.mcr &= !BIT_RTS;
            }
            if clear & TIOCM_DTR != 0 {
                pr.mcr &= !BIT_DTR;
            }
            pr.mcr
        };
        self.set_handshake(p, mcr)
    }

    /// ch341_break_ctl: the break register (bit 0 low: break) and the line
    /// control register's transmitter enable, read and written back; or the
    /// simulated break.
    fn break_ctl(&self, p: &Port, on: bool) -> SysResult<()> {
        if self.quirks & QUIRK_SIMULATE_BREAK != 0 {
            return self.simulate_break(p, on);
        }
        let regs = u16::from(reg::LCR) << 8 | u16::from(reg::BREAK);
        let mut b = self.input(p, req::READ_REG, regs, 2)?;
        if on {
            b[0] &= !NBREAK_BITS;
            b[1] &= !lcr::ENABLE_TX;
        } else {
            b[0] |= NBREAK_BITS;
            b[1] |= lcr::ENABLE_TX;
        }
        self.out(p, req::WRITE_REG, regs, u16::from_le_bytes([b[0], b[1]]))
    }

    /// The generic read: the data as it came.
    fn process_read<'a>(&self, _st: &mut PortState, data: &'a [u8]) -> Cow<'a, [u8]> {
        Cow::Borrowed(data)
    }

    /// ch341_update_status: the modem lines of an interrupt packet; each
    /// change counted, DCD dropping without CLOCAL hangs up.
    fn notification(&self, st: &mut PortState, buf: &[u8]) {
        let Some(status) = status_of(buf) else {
            return;
        };
        let delta = {
            let mut pr = self.p.lock_ok();
            let d = status ^ pr.msr;
            pr.msr = status;
            d
        };
        let c = &mut st.icount;
        if delta & BIT_CTS != 0 {
            c.cts += 1;
        }
        if delta & BIT_DSR != 0 {
            c.dsr += 1;
        }
        if delta & BIT_RI != 0 {
            c.rng += 1;
        }
        if delta & BIT_DCD != 0 {
            c.dcd += 1;
            if status & BIT_DCD == 0 {
                st.dcd_dropped();
            }
        }
    }

    /// ch341 has no `get_icount`.
    fn has_icount(&self) -> bool {
        false
    }

    /// ch341 has no `throttle`.
    fn throttles(&self) -> bool {
        false
    }
}

/// tty_termios_hw_change: the speeds, or `c_cflag` but HUPCL.
fn hw_change(a: &Termios, b: &Termios) -> bool {
    a.ispeed != b.ispeed || a.ospeed != b.ospeed || (a.cflag ^ b.cflag) & !termios::HUPCL != 0
}

/// What ch341_port_probe found in its answers: the chip version
/// (READ_VERSION, None if it failed: the probe fails) and the quirks
/// (ch341_detect_quirks: a stalled READ_REG of the break register means
/// no break and a limited prescaler; another failure fails the probe).
pub fn probe_findings(answers: &[ProbeAnswer]) -> Option<(u8, u8)> {
    let version = ProbeAnswer::find(answers, req::READ_VERSION, 0, 2)
        .filter(|a| a.status == 0 && a.data.len() == 2)?
        .data[0];
    let brk = ProbeAnswer::find(answers, req::READ_REG, u16::from(reg::BREAK), 2)?;
    let quirks = match (brk.status, brk.data.len()) {
        (0, 2) => 0,
        (-32, _) => QUIRK_LIMITED_PRESCALER | QUIRK_SIMULATE_BREAK,
        _ => return None,
    };
    Some((version, quirks))
}

/// ch341's part of the port of interface `i` of `d` (usb_serial_probe and
/// ch341_port_probe, from what the probe's requests were answered); None
/// if the interface lacks its endpoints or the probe failed.
pub fn port_driver(d: &UsbDevice, i: &Interface) -> Option<Ch341> {
    let eps = serial::endpoints(d, i);
    let find = |ty: u8, dir_in: bool| serial::find(&eps, ty, dir_in);
    let Some((version, quirks)) = probe_findings(&i.probe_answers) else {
        tracing::warn!(
            device = %d.name(),
            "ch341-uart: its probe's requests failed: no port"
        );
        return None;
    };
    if quirks != 0 {
        tracing::info!(
            device = %d.name(),
            "ch341-uart: break control not supported, using simulated break"
        );
    }
    Some(Ch341::new(
        version,
        quirks,
        find(2, true)?,
        find(2, false)?,
        find(3, true)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tty::termios::*;

    #[test]
    fn range_constants() {
        assert_eq!(MIN_BPS, 46);
        assert_eq!(MAX_BPS, 3_000_000);
        assert_eq!(
            [min_rate(0), min_rate(1), min_rate(2), min_rate(3)],
            [45, 366, 2929, 23437]
        );
    }

    #[test]
    fn divisors_are_the_kernels() {
        // 9600: ps 2 (9600 > 2929), clk_div 32, div 156 (156.25 down);
        // 157 is not closer; even: fact 0 and div 78:
        // (0x100 - 78) << 8 | 2 = 0xb202. The chip gets 9615 baud.
        assert_eq!(divisor(0, 9600), Some(0xb202));
        assert_eq!(rate_of(0xb282), 9615);
        // 115200: ps 3, clk_div 4, div 104 (104.17), even: 52, fact 0.
        assert_eq!(divisor(0, 115_200), Some(0xcc03));
        assert_eq!(rate_of(0xcc03), 115_384);
        // 3 M: div 4 < 9: halved to 2 with clk_div 8, fact 0.
        assert_eq!(divisor(0, 3_000_000), Some(0xfe03));
        assert_eq!(rate_of(0xfe03), 3_000_000);
        // Beyond the range: clamped.
        assert_eq!(divisor(0, 4_000_000), Some(0xfe03));
        // 46 baud: ps 0 (46 > 45), clk_div 2048, div 509 (509.5), > 255:
        // 254 with clk_div 4096, fact 0; 255's rate is closer (45.96 is
        // nearer 46 than 46.14 is): (0x100 - 255) << 8 = 0x0100.
        assert_eq!(divisor(0, MIN_BPS), Some(0x0100));
        assert_eq!(divisor(0, 10), Some(0x0100));
        // 57600: ps 3, clk_div 4, div 208 (208.3): even: 104, fact 0:
        // 0x9803.
        assert_eq!(divisor(0, 57_600), Some(0x9803));
        // 1200: ps 1 (1200 > 366), clk_div 256, div 156 (156.25), even:
        // 78, fact 0: 0xb201.
        assert_eq!(divisor(0, 1200), Some(0xb201));
        // 300: ps 0, clk_div 2048, div 78 (78.125): 79 is not closer; 78
        // is even: 39, fact 0: 0xd900.
        assert_eq!(divisor(0, 300), Some(0xd900));
        // 31250: ps 3, clk_div 4, div 384 > 255: 192, clk_div 8, fact 0:
        // 0x4003 (exact).
        assert_eq!(divisor(0, 31_250), Some(0x4003));
        assert_eq!(rate_of(0x4003), 31_250);
        // 38400: ps 3, clk_div 4, div 312 > 255: 156, fact 0: 0x6403.
        assert_eq!(divisor(0, 38_400), Some(0x6403));
    }

    #[test]
    fn limited_prescaler_quirk() {
        // Below ps 3 the base clock is halved: 9600 gets div 78 at fact 0
        // either way, and 921600 (ps 3) is not affected.
        assert_eq!(divisor(QUIRK_LIMITED_PRESCALER, 9600), Some(0xb202));
        assert_eq!(
            divisor(QUIRK_LIMITED_PRESCALER, 921_600),
            divisor(0, 921_600)
        );
        // 20000 (ps 2): free, div 75 (exact, odd), fact 1: 0xb506;
        // limited: 37 with clk_div 64, and 38 is closer (19737 baud
        // against 20270): 0xda02.
        assert_eq!(divisor(0, 20_000), Some(0xb506));
        assert_eq!(divisor(QUIRK_LIMITED_PRESCALER, 20_000), Some(0xda02));
    }

    #[test]
    fn line_control_register() {
        // 8N1 with receiver and transmitter on: 0xc3; 7E1; 8O2; 5 data
        // bits, mark parity (PARODD and CMSPAR); space parity.
        assert_eq!(lcr_for(CS8), 0xc3);
        assert_eq!(lcr_for(CS7 | PARENB), 0xda);
        assert_eq!(lcr_for(CS8 | PARENB | PARODD | CSTOPB), 0xcf);
        assert_eq!(lcr_for(CS5 | PARENB | PARODD | CMSPAR), 0xe8);
        assert_eq!(lcr_for(CS6 | PARENB | CMSPAR), 0xf9);
    }

    #[test]
    fn handshake_and_status() {
        // ~control as wValue: DTR and RTS high is 0xff9f, none 0xffff.
        assert_eq!(handshake_value(BIT_DTR | BIT_RTS), 0xff9f);
        assert_eq!(handshake_value(0), 0xffff);
        assert_eq!(handshake_value(BIT_RTS), 0xffbf);
        // The third byte inverted: 0x94 is CTS, DSR and DCD.
        assert_eq!(status_of(&[0x08, 0x7d, 0x94, 0xee]), Some(0x0b));
        assert_eq!(status_of(&[0x08, 0x7d, 0x94]), None);
        assert_eq!(
            modem_lines(BIT_DTR, 0x0b),
            TIOCM_DTR | TIOCM_CTS | TIOCM_DSR | TIOCM_CD
        );
        assert_eq!(modem_lines(BIT_RTS, BIT_RI), TIOCM_RTS | TIOCM_RI);
    }

    fn answer(request: u8, value: u16, status: i32, data: &[u8]) -> ProbeAnswer {
        let mut setup = [0xc0, request, 0, 0, 0, 0, 2, 0];
        setup[2..4].copy_from_slice(&value.to_le_bytes());
        ProbeAnswer {
            setup,
            status,
            data: data.to_vec(),
        }
    }

    #[test]
    fn probe_findings_from_the_answers() {
        let version = answer(req::READ_VERSION, 0, 0, &[0x31, 0]);
        let brk = answer(req::READ_REG, 5, 0, &[0x01, 0xc3]);
        assert_eq!(probe_findings(&[version.clone(), brk]), Some((0x31, 0)));
        let stall = answer(req::READ_REG, 5, -32, &[]);
        assert_eq!(
            probe_findings(&[version.clone(), stall]),
            Some((0x31, QUIRK_LIMITED_PRESCALER | QUIRK_SIMULATE_BREAK))
        );
        let short = answer(req::READ_REG, 5, 0, &[1]);
        assert_eq!(probe_findings(&[version, short]), None);
        assert_eq!(probe_findings(&[]), None);
    }
}
