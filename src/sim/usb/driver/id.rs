//! `struct usb_device_id` and the kernel's matching of one against a
//! device and interface (`usb_match_device` and `usb_match_one_id_intf` in
//! `drivers/usb/core/driver.c`; the flags' values are
//! `include/linux/mod_devicetable.h`'s).

use crate::sim::usb::descriptors::{AltDesc, DeviceDesc};

/// USB_DEVICE_ID_MATCH_VENDOR.
const VENDOR: u16 = 0x0001;
/// USB_DEVICE_ID_MATCH_PRODUCT.
const PRODUCT: u16 = 0x0002;
/// USB_DEVICE_ID_MATCH_DEV_LO.
const DEV_LO: u16 = 0x0004;
/// USB_DEVICE_ID_MATCH_DEV_HI.
const DEV_HI: u16 = 0x0008;
/// USB_DEVICE_ID_MATCH_DEV_CLASS.
const DEV_CLASS: u16 = 0x0010;
/// USB_DEVICE_ID_MATCH_DEV_SUBCLASS.
const DEV_SUBCLASS: u16 = 0x0020;
/// USB_DEVICE_ID_MATCH_DEV_PROTOCOL.
const DEV_PROTOCOL: u16 = 0x0040;
/// USB_DEVICE_ID_MATCH_INT_CLASS.
const INT_CLASS: u16 = 0x0080;
/// USB_DEVICE_ID_MATCH_INT_SUBCLASS.
const INT_SUBCLASS: u16 = 0x0100;
/// USB_DEVICE_ID_MATCH_INT_PROTOCOL.
const INT_PROTOCOL: u16 = 0x0200;
/// USB_DEVICE_ID_MATCH_INT_NUMBER.
const INT_NUMBER: u16 = 0x0400;

/// USB_CLASS_VENDOR_SPEC.
const VENDOR_SPEC: u8 = 0xff;

/// One entry of a driver's id table, as the kernel's macros make them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UsbDeviceId {
    flags: u16,
    vendor: u16,
    product: u16,
    bcd_lo: u16,
    bcd_hi: u16,
    dev_class: u8,
    dev_subclass: u8,
    dev_protocol: u8,
    int_class: u8,
    int_subclass: u8,
    int_protocol: u8,
    int_number: u8,
}

impl UsbDeviceId {
    const NONE: UsbDeviceId = UsbDeviceId {
        flags: 0,
        vendor: 0,
        product: 0,
        bcd_lo: 0,
        bcd_hi: 0,
        dev_class: 0,
        dev_subclass: 0,
        dev_protocol: 0,
        int_class: 0,
        int_subclass: 0,
        int_protocol: 0,
        int_number: 0,
    };

    /// `USB_DEVICE(vendor, product)`.
    pub(crate) const fn device(vendor: u16, product: u16) -> Self {
        UsbDeviceId {
            flags: VENDOR | PRODUCT,
            vendor,
            product,
            ..Self::NONE
        }
    }

    /// `.match_flags = USB_DEVICE_ID_MATCH_DEV_CLASS`.
    pub(crate) const fn device_class(class: u8) -> Self {
        UsbDeviceId {
            flags: DEV_CLASS,
            dev_class: class,
            ..Self::NONE
        }
    }

    /// `.match_flags = USB_DEVICE_ID_MATCH_INT_CLASS`.
    pub(crate) const fn interface_class(class: u8) -> Self {
        UsbDeviceId {
            flags: INT_CLASS,
            int_class: class,
            ..Self::NONE
        }
    }

    /// `.match_flags = USB_DEVICE_ID_MATCH_INT_CLASS |
    /// USB_DEVICE_ID_MATCH_INT_SUBCLASS`.
    pub(crate) const fn interface_class_subclass(class: u8, sub: u8) -> Self {
        UsbDeviceId {
            flags: INT_CLASS | INT_SUBCLASS,
            int_class: class,
            int_subclass: sub,
            ..Self::NONE
        }
    }

    /// `USB_INTERFACE_INFO(class, sub, proto)`.
    pub(crate) const fn interface_info(class: u8, sub: u8, proto: u8) -> Self {
        UsbDeviceId {
            flags: INT_CLASS | INT_SUBCLASS | INT_PROTOCOL,
            int_class: class,
            int_subclass: sub,
            int_protocol: proto,
            ..Self::NONE
        }
    }

    /// Whether this entry matches the device `dev` and its interface in
    /// setting `alt`, as `usb_match_one_id` decides.
    pub(crate) fn matches(&self, dev: &DeviceDesc, alt: &AltDesc) -> bool {
        self.matches_device(dev) && self.matches_interface(dev, alt)
    }

    /// `usb_match_device`.
    fn matches_device(&self, dev: &DeviceDesc) -> bool {
        let f = self.flags;
        !(f & VENDOR != 0 && self.vendor != dev.vid
            || f & PRODUCT != 0 && self.product != dev.pid
            || f & DEV_LO != 0 && self.bcd_lo > dev.bcd_device
            || f & DEV_HI != 0 && self.bcd_hi < dev.bcd_device
            || f & DEV_CLASS != 0 && self.dev_class != dev.class
            || f & DEV_SUBCLASS != 0 && self.dev_subclass != dev.sub
            || f & DEV_PROTOCOL != 0 && self.dev_protocol != dev.proto)
    }

    /// `usb_match_one_id_intf`: a vendor-specific device's interfaces
    /// match only entries that name the vendor.
    fn matches_interface(&self, dev: &DeviceDesc, alt: &AltDesc) -> bool {
        let f = self.flags;
        if dev.class == VENDOR_SPEC
            && f & VENDOR == 0
            && f & (INT_CLASS | INT_SUBCLASS | INT_PROTOCOL | INT_NUMBER) != 0
        {
            return false;
        }
        !(f & INT_CLASS != 0 && self.int_class != alt.class
            || f & INT_SUBCLASS != 0 && self.int_subclass != alt.sub
            || f & INT_PROTOCOL != 0 && self.int_protocol != alt.proto
            || f & INT_NUMBER != 0 && self.int_number != alt.num)
    }
}

/// `usb_match_id`: the first entry of `table` that matches.
pub(crate) fn usb_match_id<'a>(
    table: &'a [UsbDeviceId],
    dev: &DeviceDesc,
    alt: &AltDesc,
) -> Option<&'a UsbDeviceId> {
    table.iter().find(|id| id.matches(dev, alt))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dev(class: u8, vid: u16, pid: u16, bcd: u16) -> DeviceDesc {
        DeviceDesc {
            bcd_usb: 0x0200,
            class,
            sub: 0,
            proto: 0,
            mps0: 64,
            vid,
            pid,
            bcd_device: bcd,
            i_mfr: 0,
            i_prod: 0,
            i_ser: 0,
        }
    }

    fn alt(num: u8, class: u8, sub: u8, proto: u8) -> AltDesc {
        AltDesc {
            num,
            alt: 0,
            class,
            sub,
            proto,
            istr: 0,
            extra: vec![],
            eps: vec![],
        }
    }

    #[test]
    fn interface_fields_match_as_the_flags_say() {
        let d = dev(0, 0x1234, 0x5678, 0x0100);
        let hid = UsbDeviceId::interface_class(3);
        assert!(hid.matches(&d, &alt(0, 3, 1, 1)));
        assert!(!hid.matches(&d, &alt(0, 8, 6, 0x50)));
        let bot = UsbDeviceId::interface_info(8, 6, 0x50);
        assert!(bot.matches(&d, &alt(0, 8, 6, 0x50)));
        assert!(!bot.matches(&d, &alt(0, 8, 6, 0x62)));
        let ac = UsbDeviceId::interface_class_subclass(1, 1);
        assert!(ac.matches(&d, &alt(0, 1, 1, 0)));
        assert!(!ac.matches(&d, &alt(1, 1, 2, 0)));
        let n = UsbDeviceId {
            flags: VENDOR | PRODUCT | INT_NUMBER,
            vendor: 0x1234,
            product: 0x5678,
            int_number: 1,
            ..UsbDeviceId::NONE
        };
        assert!(n.matches(&d, &alt(1, 0xff, 0, 0)));
        assert!(!n.matches(&d, &alt(0, 0xff, 0, 0)));
    }

    #[test]
    fn device_fields_and_bcd_range_match() {
        let id = UsbDeviceId {
            flags: VENDOR | PRODUCT | DEV_LO | DEV_HI,
            vendor: 0x0403,
            product: 0x6001,
            bcd_lo: 0x0400,
            bcd_hi: 0x0600,
            ..UsbDeviceId::NONE
        };
        assert!(id.matches(&dev(0, 0x0403, 0x6001, 0x0600), &alt(0, 0xff, 0xff, 0xff)));
        assert!(!id.matches(&dev(0, 0x0403, 0x6001, 0x0601), &alt(0, 0xff, 0xff, 0xff)));
        assert!(!id.matches(&dev(0, 0x0403, 0x6001, 0x03ff), &alt(0, 0xff, 0xff, 0xff)));
        assert!(!id.matches(&dev(0, 0x0403, 0x6010, 0x0500), &alt(0, 0xff, 0xff, 0xff)));
        let hub = UsbDeviceId::device_class(9);
        assert!(hub.matches(&dev(9, 1, 2, 3), &alt(0, 9, 0, 0)));
        assert!(!hub.matches(&dev(0, 1, 2, 3), &alt(0, 9, 0, 0)));
    }

    /// A vendor-specific device's interfaces match interface entries only
    /// when the entry names the vendor too.
    #[test]
    fn vendor_specific_devices_need_the_vendor() {
        let d = dev(0xff, 0x1234, 0x5678, 0);
        assert!(!UsbDeviceId::interface_class(3).matches(&d, &alt(0, 3, 0, 0)));
        let named = UsbDeviceId {
            flags: VENDOR | INT_CLASS,
            vendor: 0x1234,
            int_class: 3,
            ..UsbDeviceId::NONE
        };
        assert!(named.matches(&d, &alt(0, 3, 0, 0)));
        assert!(UsbDeviceId::device(0x1234, 0x5678).matches(&d, &alt(0, 3, 0, 0)));
        let table = [
            UsbDeviceId::interface_class(3),
            UsbDeviceId::device(0x1234, 0x5678),
        ];
        assert_eq!(usb_match_id(&table, &d, &alt(0, 3, 0, 0)), Some(&table[1]));
    }
}
