//! The usb-serial core (`drivers/usb/serial/usb-serial.c`, `bus.c`,
//! `generic.c`) as its drivers' ports share it: the `ttyUSBN` names of
//! major 188, the port device `INTERFACE/ttyUSBN` on the `usb-serial` bus
//! with the tty below it, 2 read and 2 write URBs per port, the read
//! callback's rules and chars_in_buffer, which are the defaults of
//! [`super::port::PortDriver`] (as the core's generic functions are a
//! usb-serial driver's defaults). The drivers: [`super::ftdi`],
//! [`super::cp210x`], [`super::ch341`].

use crate::usbcore::device::{Interface, UsbDevice};
use crate::usbcore::sysfs::Endpoint;

/// `USB_SERIAL_TTY_MAJOR`.
pub const USB_SERIAL_TTY_MAJOR: u32 = 188;
/// `USB_SERIAL_TTY_MINORS`.
pub const USB_SERIAL_TTY_MINORS: u32 = 512;
/// The tty driver's name.
pub const TTY_NAME: &str = "ttyUSB";
/// A port's read URBs and its write URBs, each (`read_urbs[2]`,
/// `write_urbs[2]`).
pub const URBS: usize = 2;
/// A port's write FIFO (`write_fifo`, a page): what its writes fill.
pub const WRITE_FIFO: usize = 4096;
/// The usb-serial drivers monfs has: the USB interface driver's name (the
/// module's, `sys/bus/usb/drivers/NAME`) and the usb-serial driver's (its
/// `sys/bus/usb-serial/drivers/NAME` directory, the port device's
/// `DRIVER`), which differ for ch341.
pub const DRIVERS: &[(&str, &str)] = &[
    ("ftdi_sio", "ftdi_sio"),
    ("cp210x", "cp210x"),
    ("ch341", "ch341-uart"),
];

/// Whether `name` is a usb-serial driver's USB interface driver.
pub fn is_driver(name: &str) -> bool {
    DRIVERS.iter().any(|(usb, _)| *usb == name)
}

/// The port device's path below `/sys`.
pub fn port_devpath(iface_devpath: &str, name: &str) -> String {
    format!("{iface_devpath}/{name}")
}

/// The tty class device's path below `/sys`: below the port device.
pub fn tty_devpath(iface_devpath: &str, name: &str) -> String {
    format!("{}/tty/{name}", port_devpath(iface_devpath, name))
}

/// usb_serial_generic_read_bulk_callback: a killed URB or a stall stops;
/// other errors submit it again.
pub fn read_stops(status: i32) -> bool {
    matches!(
        -status,
        libc::ENOENT | libc::ECONNRESET | libc::ESHUTDOWN | libc::EPIPE
    )
}

/// usb_serial_generic_chars_in_buffer: the write FIFO and the bytes of the
/// write URBs in flight.
pub fn chars_in_buffer(queued: usize, lengths: &[usize]) -> usize {
    queued + lengths.iter().sum::<usize>()
}

/// The endpoint descriptors of interface `i`'s setting in `d`'s active
/// configuration.
pub(crate) fn endpoints(d: &UsbDevice, i: &Interface) -> Vec<Endpoint> {
    let cfg = d.config(d.active_config).unwrap_or(&[]);
    crate::usbcore::sysfs::endpoints(cfg, i.number, i.alt)
}

/// The first of `eps` of transfer type `kind` (2 bulk, 3 interrupt) and
/// direction: its address and packet size.
pub(crate) fn find(eps: &[Endpoint], kind: u8, dir_in: bool) -> Option<(u8, u16)> {
    eps.iter()
        .find(|e| e.attributes & 3 == kind && (e.address & 0x80 != 0) == dir_in)
        .map(|e| (e.address, e.packet_size()))
}
