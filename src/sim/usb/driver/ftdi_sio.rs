//! ftdi_sio (`drivers/usb/serial/ftdi_sio.c` on the usb-serial core):
//! binds FTDI's own vendor and product IDs (interface by interface, one
//! port each). Its probe types the chip by `bcdDevice`, reads the latency
//! timer and writes it back, and on the FT232R, FT232H and FT-X reads the
//! CBUS configuration from the EEPROM (its GPIO setup); everything else it
//! sends comes from its tty port while the port is open, which is the tty
//! layer's (`crate::tty::ftdi`), through the same port usbfs uses.

use crate::sim::usb::ctx::{setup, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;
use crate::tty::ftdi::{req, Chip, FTDI_VID};

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;

/// ftdi_sio.
pub(super) struct FtdiSio;

/// The entries of `id_table_combined` with FTDI's vendor ID and its own
/// chips' product IDs (the table's third-party products are not
/// modelled).
static IDS: [UsbDeviceId; 15] = [
    UsbDeviceId::device(FTDI_VID, 0x8372), // SIO
    UsbDeviceId::device(FTDI_VID, 0x6001), // 8U232AM, FT232B, FT232R
    UsbDeviceId::device(FTDI_VID, 0x6006), // 8U232AM_ALT
    UsbDeviceId::device(FTDI_VID, 0xfbfa), // 232RL
    UsbDeviceId::device(FTDI_VID, 0x6010), // 8U2232C, FT2232H
    UsbDeviceId::device(FTDI_VID, 0x6011), // FT4232H
    UsbDeviceId::device(FTDI_VID, 0x6014), // FT232H
    UsbDeviceId::device(FTDI_VID, 0x6015), // FT-X
    UsbDeviceId::device(FTDI_VID, 0x6040), // FT2233HP
    UsbDeviceId::device(FTDI_VID, 0x6041), // FT4233HP
    UsbDeviceId::device(FTDI_VID, 0x6042), // FT2232HP
    UsbDeviceId::device(FTDI_VID, 0x6043), // FT4232HP
    UsbDeviceId::device(FTDI_VID, 0x6044), // FT233HP
    UsbDeviceId::device(FTDI_VID, 0x6045), // FT232HP
    UsbDeviceId::device(FTDI_VID, 0x6048), // FT4232HA
];

/// The dual-port boards whose first interface is JTAG (ftdi_8u2232c_probe).
fn jtag_first(dev: &Device) -> bool {
    let d = &dev.desc;
    d.dev.pid == 0x6010
        && (d.manufacturer.as_deref() == Some("CALAO Systems")
            || matches!(
                d.product.as_deref(),
                Some("Arrow USB Blaster" | "BeagleBone/XDS100V2" | "SNAP Connect E10")
            ))
}

impl HostDriver for FtdiSio {
    fn name(&self) -> &'static str {
        "ftdi_sio"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    /// usb_serial_probe: a bulk endpoint each way; ftdi_probe's JTAG
    /// quirk; ftdi_determine_type knows the chip.
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        let bulk = |dir_in: bool| {
            alt.eps
                .iter()
                .any(|e| e.xfer_type() == 2 && e.dir_in() == dir_in)
        };
        if (alt.num == 0 && jtag_first(dev))
            || Chip::of(dev.desc.dev.bcd_device).is_none()
            || !bulk(true)
            || !bulk(false)
        {
            return Probe::Failed;
        }
        Probe::Bound
    }
    /// ftdi_port_probe: GET_LATENCY_TIMER, SET_LATENCY_TIMER with what
    /// the chips answer after a reset (16 ms; a peer's own answer, see
    /// [`HostDriver::probe_value`]), and ftdi_gpio_init's EEPROM reads.
    fn probe_ops(&self, dev: &Device, d: DevId, alt: &AltDesc) -> Vec<Op> {
        let Some(chip) = Chip::of(dev.desc.dev.bcd_device) else {
            return Vec::new();
        };
        let (_, channel) = chip.base_and_channel(alt.num);
        let mut ops = Vec::new();
        if chip.has_latency_timer() {
            ops.push(Op::Ctrl {
                target: d,
                setup: setup(0xc0, req::GET_LATENCY_TIMER, 0, channel, 1),
                out: None,
                tag: None,
            });
            ops.push(Op::Ctrl {
                target: d,
                setup: setup(0x40, req::SET_LATENCY_TIMER, 16, channel, 0),
                out: None,
                tag: None,
            });
        }
        for w in chip.gpio_eeprom_words() {
            ops.push(Op::Ctrl {
                target: d,
                setup: setup(0xc0, req::READ_EEPROM, 0, *w, 2),
                out: None,
                tag: None,
            });
        }
        ops
    }
    /// ftdi_port_probe writes back what read_latency_timer read (16 ms
    /// when the read failed).
    fn probe_value(&self, setup: &[u8; 8], answer: Option<&[u8]>) -> Option<u16> {
        (setup[0] == 0x40 && setup[1] == req::SET_LATENCY_TIMER)
            .then(|| answer.and_then(|a| a.first()).map_or(16, |v| u16::from(*v)))
    }
    fn polled(&self) -> bool {
        false
    }
}
