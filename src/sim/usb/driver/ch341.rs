//! ch341 (`drivers/usb/serial/ch341.c` on the usb-serial core, its
//! usb-serial driver `ch341-uart`): binds the WCH CH340 and CH341 IDs of
//! its table. Its probe (ch341_port_probe) reads the chip version,
//! initialises the serial port, sets 9600 baud and 8N1 (the line control
//! register from version 0x30 on), drops DTR and RTS, and reads the break
//! register, whose stall marks a chip without a break and with a limited
//! prescaler; everything else it sends comes from its tty port while the
//! port is open, which is the tty layer's (`crate::tty::ch341`), through
//! the same port usbfs uses.

use crate::sim::usb::ctx::{setup, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;
use crate::tty::ch341::{divisor, handshake_value, lcr, reg, req, IN, OUT};
use crate::usbcore::device::ProbeAnswer;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;

/// ch341.
pub(super) struct Ch341;

/// ch341's `id_table`, whole.
static IDS: [UsbDeviceId; 6] = [
    UsbDeviceId::device(0x1a86, 0x5523), // CH341 in serial mode
    UsbDeviceId::device(0x1a86, 0x7522), // CH340K
    UsbDeviceId::device(0x1a86, 0x7523), // CH340
    UsbDeviceId::device(0x2184, 0x0057),
    UsbDeviceId::device(0x4348, 0x5523), // CH341, WinChipHead's old ID
    UsbDeviceId::device(0x9986, 0x7523),
];

fn ctrl(d: DevId, request_type: u8, request: u8, value: u16, index: u16, len: u16) -> Op {
    Op::Ctrl {
        target: d,
        setup: setup(request_type, request, value, index, len),
        out: None,
        tag: None,
        flags: 0,
    }
}

/// The requests ch341_configure sends after READ_VERSION answered
/// `version`, then ch341_detect_quirks' read of the break register: the
/// setup packets.
fn after_version(version: u8) -> Vec<[u8; 8]> {
    let pair = |hi: u8, lo: u8| u16::from(hi) << 8 | u16::from(lo);
    // DEFAULT_BAUD_RATE, without quirks (they are not known yet).
    let mut val = divisor(0, 9600).expect("9600 is in range");
    if version > 0x27 {
        val |= 1 << 7;
    }
    let mut v = vec![
        setup(OUT, req::SERIAL_INIT, 0, 0, 0),
        setup(
            OUT,
            req::WRITE_REG,
            pair(reg::DIVISOR, reg::PRESCALER),
            val,
            0,
        ),
    ];
    if version >= 0x30 {
        let l = lcr::ENABLE_RX | lcr::ENABLE_TX | lcr::CS8;
        v.push(setup(
            OUT,
            req::WRITE_REG,
            pair(reg::LCR2, reg::LCR),
            u16::from(l),
            0,
        ));
    }
    v.push(setup(OUT, req::MODEM_CTRL, handshake_value(0), 0, 0));
    v.push(setup(IN, req::READ_REG, u16::from(reg::BREAK), 0, 2));
    v
}

impl HostDriver for Ch341 {
    fn name(&self) -> &'static str {
        "ch341"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    /// usb_serial_probe binds whatever the interface has (the port probe
    /// may fail, leaving it without a tty).
    fn probe(&self, _dev: &Device, _alt: &AltDesc) -> Probe {
        Probe::Bound
    }
    /// ch341_configure: READ_VERSION (two bytes, "0x27 0x00" expected).
    fn probe_ops(&self, _dev: &Device, d: DevId, _alt: &AltDesc) -> Vec<Op> {
        vec![ctrl(d, IN, req::READ_VERSION, 0, 0, 2)]
    }
    /// The rest of ch341_configure, each request once the one before
    /// succeeded (a failure ends the port probe), then
    /// ch341_detect_quirks' read.
    fn probe_more(
        &self,
        _dev: &Device,
        d: DevId,
        _alt: &AltDesc,
        answers: &[ProbeAnswer],
    ) -> Vec<Op> {
        let Some(v) = answers.first() else {
            return Vec::new();
        };
        if v.status != 0 || v.data.len() != 2 {
            return Vec::new();
        }
        if answers.last().is_some_and(|a| a.status != 0) {
            return Vec::new();
        }
        let seq = after_version(v.data[0]);
        let Some(s) = seq.get(answers.len() - 1) else {
            return Vec::new();
        };
        let w = |i: usize| u16::from_le_bytes([s[i], s[i + 1]]);
        vec![ctrl(d, s[0], s[1], w(2), w(4), w(6))]
    }
    fn polled(&self) -> bool {
        false
    }
}
