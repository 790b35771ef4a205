//! cdc_acm (`drivers/usb/class/cdc-acm.c`): binds CDC ACM control
//! interfaces and claims their data interface. Its probe sets the line
//! coding to 9600 8N1; everything else it sends (the notification URB, the
//! read URBs, the modem lines) comes from its tty port while the port is
//! open, which is the tty layer's (`crate::tty`), through the same port
//! usbfs uses.

use std::sync::Arc;

use crate::sim::usb::ctx::{setup, DevId, Device, Op};
use crate::sim::usb::descriptors::AltDesc;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;

/// cdc_acm.
pub(super) struct CdcAcm;

/// `USB_CLASS_COMM`, `USB_CDC_SUBCLASS_ACM`.
const COMM: u8 = 2;
const ACM: u8 = 2;

/// acm_ids' class entries: ACM control interfaces without a protocol and
/// with each AT command set (its vendor quirk entries are not modelled).
static IDS: [UsbDeviceId; 7] = [
    UsbDeviceId::interface_info(COMM, ACM, 0),
    UsbDeviceId::interface_info(COMM, ACM, 1),
    UsbDeviceId::interface_info(COMM, ACM, 2),
    UsbDeviceId::interface_info(COMM, ACM, 3),
    UsbDeviceId::interface_info(COMM, ACM, 4),
    UsbDeviceId::interface_info(COMM, ACM, 5),
    UsbDeviceId::interface_info(COMM, ACM, 6),
];

/// The data interface of control interface `alt`, as acm_probe finds it:
/// the union descriptor's first subordinate, else the call management
/// descriptor's data interface, else the control interface itself when it
/// has three endpoints (a combined interface); None: the probe fails.
pub(crate) fn data_interface(alt: &AltDesc) -> Option<u8> {
    let cs = |sub: u8| {
        crate::usbcore::abi::descriptors(&alt.extra)
            .find(|d| d[1] == 0x24 && d.len() >= 3 && d[2] == sub)
    };
    if let Some(u) = cs(6).filter(|u| u.len() >= 5) {
        return Some(u[4]);
    }
    if let Some(c) = cs(1).filter(|c| c.len() >= 5 && c[4] > 0) {
        return Some(c[4]);
    }
    (alt.eps.len() == 3).then_some(alt.num)
}

impl HostDriver for CdcAcm {
    fn name(&self) -> &'static str {
        "cdc_acm"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        // The data interface must be there, with a bulk endpoint each way.
        let Some(n) = data_interface(alt) else {
            return Probe::Failed;
        };
        let data = dev.desc.cfg.alts.iter().find(|a| a.num == n && a.alt == 0);
        let bulk = |dir_in: bool| {
            data.is_some_and(|a| {
                a.eps
                    .iter()
                    .any(|e| e.xfer_type() == 2 && e.dir_in() == dir_in)
            })
        };
        if bulk(true) && bulk(false) {
            Probe::Bound
        } else {
            Probe::Failed
        }
    }
    fn claims(&self, _dev: &Device, alt: &AltDesc) -> Vec<u8> {
        data_interface(alt)
            .filter(|n| *n != alt.num)
            .into_iter()
            .collect()
    }
    // acm_probe: acm_set_line with 9600 baud, 8 data bits, 1 stop bit, no
    // parity (SET_LINE_CODING to the control interface).
    fn probe_ops(&self, _dev: &Device, d: DevId, alt: &AltDesc) -> Vec<Op> {
        vec![Op::Ctrl {
            target: d,
            setup: setup(0x21, 0x20, 0, alt.num as u16, 7),
            out: Some(Arc::from(vec![0x80, 0x25, 0, 0, 0, 0, 8])),
            tag: None,
            flags: 0,
        }]
    }
    fn polled(&self) -> bool {
        false
    }
}
