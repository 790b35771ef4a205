//! The devices as the USB core's users see them: a bus's device as a
//! [`UsbDevice`] (descriptors, interfaces and their drivers), and the
//! changes usbfs and sysfs are told of as devices come, go and change.

use crate::usbcore::device::{
    DevRef, DeviceChange, HostController, Interface, Speed as CoreSpeed, UsbDevice,
};

use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::{self, Speed};
use crate::sim::usb::driver::{self, usbhid};

use super::*;

/// The USB core's view of device `id`, if it is registered (or a root hub).
pub(crate) fn usb_device(ctx: &Ctx, id: DevId) -> Option<UsbDevice> {
    let d = ctx.dev(id)?;
    if d.gone || (d.kind != Kind::Root && !d.core.registered) {
        return None;
    }
    let raw = d.desc.raw.as_deref();
    let mut descriptor = [0u8; 18];
    match raw {
        Some(r) => descriptor.copy_from_slice(&r.device()[..18]),
        None => descriptor = d.desc.dev.bytes(),
    }
    let configs: Vec<Vec<u8>> = match raw {
        Some(r) => (0..r.configs.len())
            .filter_map(|i| r.config_bytes(i).map(<[u8]>::to_vec))
            .collect(),
        None if !d.desc.all_cfgs.is_empty() => d.desc.all_cfgs.iter().map(|c| c.bytes()).collect(),
        None => vec![d.desc.cfg.bytes()],
    };
    if raw.is_none() {
        descriptor[17] = configs.len() as u8;
    }
    let mut strings = Vec::new();
    let mut idxs = vec![
        d.desc.dev.i_mfr,
        d.desc.dev.i_prod,
        d.desc.dev.i_ser,
        d.desc.cfg.i_cfg,
    ];
    idxs.extend(d.desc.intf_strings.iter().copied());
    for i in idxs {
        if i == 0 || strings.iter().any(|(x, _)| *x == i) {
            continue;
        }
        if let Some(b) = d.desc.string(i) {
            strings.push((i, decode_string(&b)));
        }
    }
    let mut interfaces: Vec<Interface> = Vec::new();
    if d.configured || d.kind == Kind::Root {
        for a in &d.desc.cfg.alts {
            if interfaces.iter().any(|i| i.number == a.num) {
                continue;
            }
            let cur = d.alt.get(a.num as usize).copied().unwrap_or(0);
            let alt = d
                .desc
                .cfg
                .alts
                .iter()
                .find(|x| x.num == a.num && x.alt == cur)
                .unwrap_or(a);
            interfaces.push(Interface {
                number: a.num,
                alt: alt.alt,
                num_altsetting: d.desc.cfg.alts.iter().filter(|x| x.num == a.num).count() as u8,
                class: alt.class,
                subclass: alt.sub,
                protocol: alt.proto,
                num_endpoints: alt.eps.len() as u8,
                string_index: 0,
                report_descriptor: match driver_of(d, a.num) {
                    Some(ref n) if n == "usbhid" => usbhid::report_descriptor(d, a.num)
                        .map(<[u8]>::to_vec)
                        .unwrap_or_default(),
                    _ => Vec::new(),
                },
                probe_answers: match driver_of(d, a.num) {
                    Some(ref n) if n != "usbfs" => driver::probe_answers(d, a.num),
                    _ => Vec::new(),
                },
                driver: driver_of(d, a.num),
            });
        }
    }
    let (busnum, controller) = (ctx.bus, d.kind == Kind::Root);
    Some(UsbDevice {
        dev: DevRef {
            bus: busnum,
            id: id as u64,
        },
        busnum,
        devnum: d.devnum,
        port_path: d.path.clone(),
        parent: d.parent.map(|p| DevRef {
            bus: busnum,
            id: p as u64,
        }),
        level: d.level,
        speed: match d.speed() {
            Speed::Low => CoreSpeed::Low,
            Speed::Full => CoreSpeed::Full,
            Speed::High => CoreSpeed::High,
        },
        descriptor,
        configs,
        strings,
        active_config: if d.configured || d.kind == Kind::Root {
            d.desc.cfg.value
        } else {
            0
        },
        interfaces,
        maxchild: d.hub.as_ref().map(|h| h.ports.len() as u8).unwrap_or(0),
        controller: controller.then(|| HostController {
            driver: d
                .desc
                .manufacturer
                .as_deref()
                .and_then(|m| m.rsplit(' ').next())
                .unwrap_or("")
                .to_string(),
            pci_name: descriptors::pci_name(busnum),
        }),
        probed: (d.driver_bound && !driver::probing(d)) || d.kind == Kind::Root,
        recorded_attributes: d
            .cfg
            .as_ref()
            .map(|c| c.attributes.0.clone().into_iter().collect())
            .unwrap_or_default(),
        recorded_properties: d
            .cfg
            .as_ref()
            .map(|c| c.udev_properties.0.clone().into_iter().collect())
            .unwrap_or_default(),
    })
}

/// UTF-16LE string descriptor bytes as text.
fn decode_string(b: &[u8]) -> String {
    let n = (b.first().copied().unwrap_or(0) as usize).min(b.len());
    let units: Vec<u16> = b
        .get(2..n)
        .unwrap_or(&[])
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16_lossy(&units)
}

/// The driver bound to interface `num` of `d` now (sysfs, GETDRIVER and
/// `usb/devices` all show this one): usbfs for a program's claim, none
/// once a program detached it, before the device's drivers are probed or
/// where its model binds none, else the registry's ([`driver::bound`]).
pub(crate) fn driver_of(d: &Device, num: u8) -> Option<String> {
    if d.core.claims.iter().any(|(i, _)| *i == num) {
        return Some("usbfs".into());
    }
    if d.core.detached.contains(&num) || !d.may_bind(num) {
        return None;
    }
    driver::bound(d, num).map(str::to_string)
}

/// Device `id` changed (its driver bindings, configuration or alternate
/// settings): if the core knows it, tell the watchers (sysfs) its new
/// state, as the kernel's sysfs shows new `driver` links and attributes at
/// once.
pub(crate) fn device_changed(ctx: &mut Ctx, id: DevId) {
    if !ctx.core.changes.watched() {
        return;
    }
    let Some(u) = usb_device(ctx, id) else {
        return;
    };
    send(ctx, DeviceChange::Changed(u));
}

/// Send `change` into the stream, stamped with the bus's time now.
fn send(ctx: &Ctx, change: DeviceChange) {
    let time = ctx.clock.at(ctx.now + ctx.offset);
    ctx.core.changes.send(time, change);
}

/// A device was registered with the core (`added`) or is going: tell the
/// watchers.
pub(crate) fn device_event(ctx: &mut Ctx, id: DevId, added: bool) {
    let change = if added {
        let Some(d) = ctx.dev_mut(id) else {
            return;
        };
        if d.core.registered {
            return;
        }
        d.core.registered = true;
        match usb_device(ctx, id) {
            Some(u) => DeviceChange::Added(u),
            None => return,
        }
    } else {
        if let Some(d) = ctx.dev_mut(id) {
            d.core.registered = false;
        }
        DeviceChange::Removed(DevRef {
            bus: ctx.bus,
            id: id as u64,
        })
    };
    send(ctx, change);
}
