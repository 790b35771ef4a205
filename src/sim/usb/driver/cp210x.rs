//! cp210x (`drivers/usb/serial/cp210x.c` on the usb-serial core): binds
//! Silicon Labs' own product IDs (interface by interface, one port each).
//! Its probe (cp210x_attach) reads the part number, then what the part
//! calls for: a CP2102 asks for it again with two bytes (a clone answers
//! one: no event insertion), a CP2105 or CP2108 reads its firmware
//! version, a CP2102N its firmware version and its configuration, and the
//! parts with GPIOs their port configuration (the GPIO chip itself is not
//! modelled); everything else it sends comes from its tty port while the
//! port is open, which is the tty layer's (`crate::tty::cp210x`), through
//! the same port usbfs uses.

use crate::sim::usb::ctx::{setup, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;
use crate::tty::cp210x::{part, req, vendor, FROM_DEV, SILABS_VID};
use crate::usbcore::device::ProbeAnswer;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;

/// cp210x.
pub(super) struct Cp210x;

/// The entries of cp210x's `id_table` with Silicon Labs' vendor ID and its
/// own chips' factory and Windows Update product IDs (the table's hundreds
/// of third-party products, many on Silicon Labs' vendor ID, are not
/// modelled).
static IDS: [UsbDeviceId; 7] = [
    UsbDeviceId::device(SILABS_VID, 0xea60), // CP2101-4, CP2102N factory default
    UsbDeviceId::device(SILABS_VID, 0xea61), // factory default
    UsbDeviceId::device(SILABS_VID, 0xea63), // Windows Update (CP2101-4/CP2102N)
    UsbDeviceId::device(SILABS_VID, 0xea70), // CP2105 factory default
    UsbDeviceId::device(SILABS_VID, 0xea71), // CP2108 factory default
    UsbDeviceId::device(SILABS_VID, 0xea7a), // Windows Update (CP2105)
    UsbDeviceId::device(SILABS_VID, 0xea7b), // Windows Update (CP2108)
];

/// cp210x_read_vendor_block: `len` bytes of vendor value `value` from
/// interface `ifnum`.
fn vendor_read(d: DevId, value: u16, ifnum: u8, len: u16) -> Op {
    Op::Ctrl {
        target: d,
        setup: setup(FROM_DEV, req::VENDOR_SPECIFIC, value, u16::from(ifnum), len),
        out: None,
        tag: None,
        flags: 0,
    }
}

/// Whether `a` was answered in full (usb_control_msg_recv's success).
fn whole(a: &ProbeAnswer) -> bool {
    a.status == 0 && a.data.len() == usize::from(u16::from_le_bytes([a.setup[6], a.setup[7]]))
}

impl HostDriver for Cp210x {
    fn name(&self) -> &'static str {
        "cp210x"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    /// usb_serial_probe binds whatever the interface has.
    fn probe(&self, _dev: &Device, _alt: &AltDesc) -> Probe {
        Probe::Bound
    }
    /// cp210x_determine_type: GET_PARTNUM.
    fn probe_ops(&self, _dev: &Device, d: DevId, alt: &AltDesc) -> Vec<Op> {
        vec![vendor_read(d, vendor::GET_PARTNUM, alt.num, 1)]
    }
    /// The rest of cp210x_determine_type (cp2102_determine_quirks,
    /// cp210x_get_fw_version) and cp210x_gpio_init's reads, by part; a
    /// failed GET_PARTNUM leaves the part unknown and nothing more is
    /// asked.
    fn probe_more(
        &self,
        _dev: &Device,
        d: DevId,
        alt: &AltDesc,
        answers: &[ProbeAnswer],
    ) -> Vec<Op> {
        let Some(first) = answers.first().filter(|a| whole(a)) else {
            return Vec::new();
        };
        let n = alt.num;
        let partnum = first.data[0];
        let op = match (partnum, answers.len()) {
            // The quirk check: two bytes of the part number, index 0.
            (part::CP2102, 1) => vendor_read(d, vendor::GET_PARTNUM, 0, 2),
            (part::CP2105 | part::CP2108, 1) => vendor_read(d, vendor::GET_FW_VER, n, 3),
            (p, 1) if part::is_cp2102n(p) => vendor_read(d, vendor::GET_FW_VER_2N, n, 3),
            // cp2104_gpioconf_init: struct cp210x_single_port_config.
            (part::CP2104, 1) => vendor_read(d, vendor::GET_PORTCONFIG, n, 0x0d),
            // cp2105_gpioconf_init: the pin mode, then (if it was read)
            // struct cp210x_dual_port_config.
            (part::CP2105, 2) => vendor_read(d, vendor::GET_DEVICEMODE, n, 2),
            (part::CP2105, 3) if whole(&answers[2]) => {
                vendor_read(d, vendor::GET_PORTCONFIG, n, 0x0f)
            }
            // cp2108_gpio_init, on interface 0 only: struct
            // cp210x_quad_port_config.
            (part::CP2108, 2) if n == 0 => vendor_read(d, vendor::GET_PORTCONFIG, n, 0x49),
            // cp2102n_gpioconf_init: the configuration array.
            (p, 2) if part::is_cp2102n(p) => vendor_read(d, vendor::READ_2NCONFIG, n, 0x02a6),
            _ => return Vec::new(),
        };
        vec![op]
    }
    fn polled(&self) -> bool {
        false
    }
}
