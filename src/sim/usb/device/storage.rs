//! USB mass storage as qemu's usb-storage is: its descriptors, the
//! bulk-only transport's class requests (GET_MAX_LUN, the reset) and the
//! SCSI target behind its bulk endpoints. usb-storage, which drives it, is
//! the driver registry's (`driver/storage.rs`).

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::{AltDesc, ClassDesc, Where};
use super::super::driver;
use super::super::driver::storage::DEFAULT_INTERVAL_MS;
use super::super::scsi::{names, Bot, USB_PRODUCT};
use super::class::DeviceClass;

/// `kind: mass-storage`.
pub(super) struct Storage;

impl DeviceClass for Storage {
    fn qemu_control(&self) -> bool {
        true // qemu's device
    }
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::MassStorage]
    }

    fn default_interval_ms(&self, _kind: DeviceKind) -> u32 {
        DEFAULT_INTERVAL_MS
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let hs = at.hs();
        let mps = if hs { 512 } else { 64 };
        Some(ClassDesc {
            ids: (0x46f4, 0x0001, 0x0000),
            mps0: 64,
            // Self-powered, 0 mA, as qemu's usb-storage.
            attr: 0xc0,
            power: 0,
            mfr: Some("QEMU".to_string()),
            prod: Some(USB_PRODUCT.to_string()),
            ser: Some(format!("1-{}-{}", at.pci(), at.path_s())),
            // qemu's storage strings: 1, 2, 3, then its full-speed (4) and
            // high-speed (5, read in kernel-vm) configuration names.
            strings: Some(if hs {
                (1, 2, 3, 5, "High speed config (usb 2.0)")
            } else {
                (1, 2, 3, 4, "Full speed config (usb 1.1)")
            }),
            alts: vec![AltDesc::bulk_pair((8, 6, 0x50), mps)],
            ..ClassDesc::default()
        })
    }

    // Bulk-only mass storage: GET_MAX_LUN (one LUN), and the reset, after
    // which the transport waits for a CBW again.
    fn ep0(
        &self,
        ctx: &mut Ctx,
        d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        match (s[0], s[1]) {
            (0xa1, 0xfe) => Some((0, Some(vec![0]))),
            (0x21, 0xff) => {
                if let Some(b) = ctx.dev_mut(d).and_then(|x| x.target.as_mut()) {
                    b.reset();
                }
                Some((0, None))
            }
            _ => None,
        }
    }

    // usb-storage binds (the registry's): its GET_MAX_LUN and SCSI scan.
    fn start(&self, ctx: &mut Ctx, d: DevId, now: u64, _at: u64) {
        driver::start(ctx, d, now, None);
    }
    // (Bound again, the class's default rebind: usb-storage's probe
    // again, GET_MAX_LUN and the SCSI scan.)

    // The disk: qemu's scsi-hd ("QEMU" "QEMU HARDDISK") behind qemu's
    // strings, the device's own names behind names of its own.
    fn target(&self, dev: &Device) -> Option<Box<Bot>> {
        let (vendor, product) = names(
            dev.desc.manufacturer.as_deref(),
            dev.desc.product.as_deref(),
        );
        Some(Box::new(Bot::new(vendor, product)))
    }
}
