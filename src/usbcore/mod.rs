//! The USB core as programs see it: `drivers/usb/core` of the kernel.
//!
//! * [`device`]: the port between the simulator and this facility, the
//!   data of a USB device as the core knows it ([`device::UsbDevice`]) and
//!   the trait the simulator implements ([`device::UsbCorePort`]): list the
//!   devices, be told of plugs and unplugs, submit and cancel a program's
//!   URBs, run the standard requests the core handles itself.
//!
//! * [`devio`]: usbfs, `dev/bus/usb/BBB/DDD` ([`abi`]: its ioctl numbers
//!   and struct layouts).
//!
//! * [`sysfs`]: the USB part of sysfs, `sys/bus/usb` and the device
//!   directories under `sys/devices/platform/monfs_hcd.B`.
//!
//! Like the usbmon facility, nothing here imports the simulator: it pushes
//! into this facility through the port only.

pub mod abi;
pub mod device;
pub mod devio;
pub mod sysfs;
pub mod uevent;

/// The stock kernel driver that binds an interface of class `class` and
/// protocol `proto` on a device no driver knows by vendor and product
/// (matching by class alone, as `usb_match_id` does for these drivers'
/// class entries): usbhid, usb-storage (uas for the UAS protocol),
/// snd-usb-audio (control, streaming and MIDI interfaces alike), uvcvideo;
/// vendor-specific (0xff) and other classes: none.
pub fn class_driver(class: u8, proto: u8) -> Option<&'static str> {
    match (class, proto) {
        (0x03, _) => Some("usbhid"),
        (0x08, 0x62) => Some("uas"),
        (0x08, _) => Some("usb-storage"),
        (0x01, _) => Some("snd-usb-audio"),
        (0x0e, _) => Some("uvcvideo"),
        _ => None,
    }
}

/// The driver name monfs's generic driver shows on interfaces of a class
/// no stock driver binds, when the configuration asks it to bind them
/// (`driver: generic`).
pub const GENERIC_DRIVER: &str = "monfs-generic";
