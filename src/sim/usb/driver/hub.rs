//! The hub driver (`drivers/usb/core/hub.c`): binds a hub's interface by
//! the device's or the interface's class; hub_probe accepts subclass 0 or
//! 1 with one interrupt IN endpoint.

use crate::sim::usb::ctx::Device;
use crate::sim::usb::descriptors::AltDesc;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;

/// hub.
pub(super) struct Hub;

/// hub_id_table's class entries (its vendor entries only add quirks).
static IDS: [UsbDeviceId; 2] = [
    UsbDeviceId::device_class(9),
    UsbDeviceId::interface_class(9),
];

impl HostDriver for Hub {
    fn name(&self) -> &'static str {
        "hub"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    fn probe(&self, _dev: &Device, alt: &AltDesc) -> Probe {
        let one_int_in = alt.eps.len() == 1 && alt.eps[0].dir_in() && alt.eps[0].xfer_type() == 3;
        if alt.sub <= 1 && one_int_in {
            Probe::Bound
        } else {
            Probe::Failed
        }
    }
}
