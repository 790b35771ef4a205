//! The usb-serial core (`drivers/usb/serial/usb-serial.c`, `bus.c`,
//! `generic.c`) as its drivers' ports share it: the `ttyUSBN` names of
//! major 188, the port device `INTERFACE/ttyUSBN` on the `usb-serial` bus
//! with the tty below it, 2 read and 2 write URBs per port, the read
//! callback's rules and chars_in_buffer, which are the defaults of
//! [`super::port::PortDriver`] (as the core's generic functions are a
//! usb-serial driver's defaults). The drivers: [`super::ftdi`],
//! [`super::cp210x`], [`super::ch341`].

/// `USB_SERIAL_TTY_MAJOR`.
pub const USB_SERIAL_TTY_MAJOR: u32 = 188;
/// `USB_SERIAL_TTY_MINORS`.
pub const USB_SERIAL_TTY_MINORS: u32 = 512;
/// The tty driver's name.
pub const TTY_NAME: &str = "ttyUSB";
/// A port's read URBs and its write URBs, each (`read_urbs[2]`,
/// `write_urbs[2]`).
pub const URBS: usize = 2;
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

/// The endpoints of setting `alt` of interface `ifnum` in configuration
/// `cfg`: (address, attributes, packet size), in descriptor order.
pub fn endpoints(cfg: &[u8], ifnum: u8, alt: u8) -> Vec<(u8, u8, u16)> {
    let mut cur = None;
    let mut v = Vec::new();
    for d in crate::usbcore::abi::descriptors(cfg) {
        match d[1] {
            4 if d.len() >= 9 => cur = Some((d[2], d[3])),
            5 if d.len() >= 7 && cur == Some((ifnum, alt)) => {
                v.push((d[2], d[3], u16::from_le_bytes([d[4], d[5]]) & 0x7ff));
            }
            _ => {}
        }
    }
    v
}
