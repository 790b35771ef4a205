//! monfs-generic, monfs's own driver for an external device's interfaces
//! that no stock driver matches (the registry tries it last, and only
//! then): it binds those an `endpoints:` entry is on, or all of them with
//! `driver: generic` (as a dynamic id the configuration adds), and submits
//! what the entries say.

use crate::config::{DeviceKind, DriverMode, EndpointConfig};
use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::{AltDesc, EpDesc};

use super::host::HostDriver;
use super::id::UsbDeviceId;

/// The name monfs's generic driver shows.
pub(crate) const NAME: &str = "monfs-generic";

/// monfs-generic.
pub(super) struct Generic;

impl HostDriver for Generic {
    fn name(&self) -> &'static str {
        NAME
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &[]
    }
    fn matches(&self, dev: &Device, alt: &AltDesc) -> bool {
        let Some(cfg) = dev.cfg.as_ref() else {
            return false;
        };
        if dev.kind != Kind::Dev(DeviceKind::External) {
            return false;
        }
        cfg.driver == DriverMode::Generic
            || cfg
                .endpoints
                .iter()
                .any(|e| resolve(dev, e).is_some_and(|r| r.0 == alt.num))
    }
}

/// The setting of the device's configuration that holds an `endpoints:`
/// entry's endpoint: (interface, setting, descriptor); the entry's `alt`,
/// or the lowest setting that has it.
pub(crate) fn resolve(dev: &Device, e: &EndpointConfig) -> Option<(u8, u8, EpDesc)> {
    dev.desc
        .cfg
        .alts
        .iter()
        .filter(|a| e.alt.is_none_or(|x| x == a.alt))
        .filter_map(|a| {
            let d = a.eps.iter().find(|d| d.addr == e.ep.0)?;
            Some((a.num, a.alt, d.clone()))
        })
        .min_by_key(|r| r.1)
}
