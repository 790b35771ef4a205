//! usbmon, modelled on the kernel's `drivers/usb/mon`.
pub mod event;
