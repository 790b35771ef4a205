//! ftdi_sio (`drivers/usb/serial/ftdi_sio.c` on the usb-serial core):
//! binds FTDI's own vendor and product IDs (interface by interface, one
//! port each). Its probe types the chip by `bcdDevice`, reads the latency
//! timer and writes back what it read, and on the FT232R, FT232H and FT-X
//! reads the CBUS configuration from the EEPROM (its GPIO setup; only a
//! peer's answers lead a probe past its first request, see
//! [`HostDriver::probe_more`]); everything else it
//! sends comes from its tty port while the port is open, which is the tty
//! layer's (`crate::tty::ftdi`), through the same port usbfs uses.

use crate::sim::usb::ctx::{setup, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;
use crate::tty::ftdi::{req, Chip, FTDI_VID};
use crate::usbcore::device::ProbeAnswer;

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

/// A probe request with no data stage of its own.
fn ctrl(d: DevId, setup: [u8; 8]) -> Op {
    Op::Ctrl {
        target: d,
        setup,
        out: None,
        tag: None,
        flags: 0,
    }
}

/// ftdi_gpio_init's reads of the CBUS configuration, two bytes a word.
fn eeprom_reads(chip: Chip, d: DevId) -> Vec<Op> {
    chip.gpio_eeprom_words()
        .iter()
        .map(|w| ctrl(d, setup(0xc0, req::READ_EEPROM, 0, *w, 2)))
        .collect()
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
    /// ftdi_port_probe's first request: GET_LATENCY_TIMER (the chips
    /// without one: ftdi_gpio_init's EEPROM reads, none of them has any).
    fn probe_ops(&self, dev: &Device, d: DevId, alt: &AltDesc) -> Vec<Op> {
        let Some(chip) = Chip::of(dev.desc.dev.bcd_device) else {
            return Vec::new();
        };
        let (_, channel) = chip.base_and_channel(alt.num);
        if chip.has_latency_timer() {
            vec![ctrl(d, setup(0xc0, req::GET_LATENCY_TIMER, 0, channel, 1))]
        } else {
            eeprom_reads(chip, d)
        }
    }
    /// Then SET_LATENCY_TIMER with what the read gave (16 ms when it
    /// failed), and ftdi_gpio_init's EEPROM reads.
    fn probe_more(
        &self,
        dev: &Device,
        d: DevId,
        alt: &AltDesc,
        answers: &[ProbeAnswer],
    ) -> Vec<Op> {
        let Some(chip) = Chip::of(dev.desc.dev.bcd_device) else {
            return Vec::new();
        };
        if !chip.has_latency_timer() || answers.len() != 1 {
            return Vec::new();
        }
        let (_, channel) = chip.base_and_channel(alt.num);
        let latency = answers[0]
            .data
            .first()
            .filter(|_| answers[0].status == 0)
            .map_or(16, |v| u16::from(*v));
        let mut ops = vec![ctrl(
            d,
            setup(0x40, req::SET_LATENCY_TIMER, latency, channel, 0),
        )];
        ops.extend(eeprom_reads(chip, d));
        ops
    }
    fn polled(&self) -> bool {
        false
    }
}
