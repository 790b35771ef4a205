//! usbtest (`drivers/usb/misc/usbtest.c`): binds the test devices its id
//! table names by vendor and product (Gadget Zero among them).

use super::host::HostDriver;
use super::id::UsbDeviceId;

/// usbtest.
pub(super) struct UsbTest;

/// usbtest's id table (the entries its build options leave in).
static IDS: [UsbDeviceId; 7] = [
    UsbDeviceId::device(0x0547, 0x2235),
    UsbDeviceId::device(0x0547, 0x0080),
    UsbDeviceId::device(0x04b4, 0x8613),
    UsbDeviceId::device(0xfff0, 0xfff0),
    UsbDeviceId::device(0x0525, 0xa4a0),
    UsbDeviceId::device(0x0525, 0xa4a4),
    UsbDeviceId::device(0x0525, 0xa4a3),
];

impl HostDriver for UsbTest {
    fn name(&self) -> &'static str {
        "usbtest"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
}
