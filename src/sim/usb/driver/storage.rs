//! usb-storage and uas (`drivers/usb/storage/usb.c`, `usual-tables.c`,
//! `uas.c`, `uas-detect.h`): both match a SCSI bulk-only interface; uas
//! takes it when one of its settings speaks UAS, usb-storage otherwise.

use crate::sim::usb::ctx::Device;
use crate::sim::usb::descriptors::AltDesc;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;

/// USB_CLASS_MASS_STORAGE.
const CLASS: u8 = 0x08;
/// USB_SC_SCSI.
const SCSI: u8 = 0x06;
/// USB_PR_BULK.
const BULK: u8 = 0x50;
/// USB_PR_UAS.
const UAS: u8 = 0x62;

/// usb-storage.
pub(super) struct UsbStorage;

/// The USUAL_DEV entries of `unusual_devs.h`: subclasses RBC, 8020, QIC,
/// UFI, 8070 and SCSI with the CB, CBI and bulk-only transports (its
/// vendor and product entries are not modelled).
static STORAGE_IDS: [UsbDeviceId; 18] = {
    let mut t = [UsbDeviceId::interface_info(0, 0, 0); 18];
    let protos = [0x01, 0x00, BULK];
    let mut i = 0;
    while i < 18 {
        t[i] = UsbDeviceId::interface_info(CLASS, (i % 6) as u8 + 1, protos[i / 6]);
        i += 1;
    }
    t
};

/// uas_use_uas_driver: a setting of the interface speaks UAS.
fn speaks_uas(dev: &Device, num: u8) -> bool {
    dev.desc
        .cfg
        .alts
        .iter()
        .any(|a| a.num == num && a.class == CLASS && a.sub == SCSI && a.proto == UAS)
}

impl HostDriver for UsbStorage {
    fn name(&self) -> &'static str {
        "usb-storage"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &STORAGE_IDS
    }
    fn soft_unbind(&self) -> bool {
        true
    }
    // usb_stor_probe1 leaves a UAS-capable interface to uas (-ENXIO).
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        if speaks_uas(dev, alt.num) {
            Probe::Failed
        } else {
            Probe::Bound
        }
    }
}

/// uas.
pub(super) struct Uas;

static UAS_IDS: [UsbDeviceId; 2] = [
    UsbDeviceId::interface_info(CLASS, SCSI, BULK),
    UsbDeviceId::interface_info(CLASS, SCSI, UAS),
];

impl HostDriver for Uas {
    fn name(&self) -> &'static str {
        "uas"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &UAS_IDS
    }
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        if speaks_uas(dev, alt.num) {
            Probe::Bound
        } else {
            Probe::Failed
        }
    }
}
