//! The USB core as programs see it: `drivers/usb/core` of the kernel.
//!
//! * [`device`]: the port between the simulator and this facility, the
//!   data of a USB device as the core knows it ([`device::UsbDevice`]) and
//!   the trait the simulator implements ([`device::UsbCorePort`]): list the
//!   devices, be told of plugs and unplugs, submit and cancel a program's
//!   URBs, run the standard requests the core handles itself.
//!
//! Like the usbmon facility, nothing here imports the simulator: it pushes
//! into this facility through the port only.

pub mod device;
pub mod sysfs;
