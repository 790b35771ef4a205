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
