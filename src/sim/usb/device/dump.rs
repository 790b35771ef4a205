//! Devices described by a descriptor file (`kind: descriptors`, and the
//! descriptors of `external` and `from-capture` devices): the model parsed
//! from the bytes as the kernel parses them (drivers/usb/core/config.c),
//! the bytes answered as they are. A `kind: descriptors` device binds no
//! driver and stays quiet, but for usbhid on the HID interfaces whose
//! report descriptor its configuration gives (`report_descriptors`).

use std::sync::Arc;

use crate::capture::usbdesc::DescriptorDump;
use crate::config::{DeviceConfig, DeviceKind};

use super::super::ctx::*;
use super::super::descriptors::{
    AltDesc, ClassDesc, ConfigDesc, Descriptors, DeviceDesc, EpDesc, IadDesc, Speed, Where,
};
use super::super::driver::usbhid;
use super::class::DeviceClass;

/// `kind: descriptors`.
pub(super) struct Dump;

impl DeviceClass for Dump {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::Descriptors]
    }
    fn descriptors(&self, _at: &Where<'_>) -> Option<ClassDesc> {
        None
    }
    // Only usbhid binds to a device from a dump, on the interfaces whose
    // report descriptor the configuration gives; otherwise it stays quiet.
    fn plugged(&self, ctx: &mut Ctx, d: DevId) {
        if let Some(dev) = ctx.dev_mut(d) {
            let nums = dev
                .cfg
                .as_ref()
                .map(|c| c.report_descriptors.keys().copied().collect());
            dev.bindable = Some(nums.unwrap_or_default());
        }
    }
    // (The class's default requests and start: usbhid's probe, then its
    // interrupt URB, which the device never answers: it NAKs. The device
    // is bound (probed) once usbhid's requests, if any, went out; without
    // it a dump with no HID interface stayed "coming" for good, and `monfs
    // run` waited its 30 s for it.)
    // usbhid's probe requests to those interfaces: the report descriptor,
    // SET_IDLE and SET_REPORT taken; the rest (GET_REPORT) stalls.
    fn ep0(
        &self,
        ctx: &mut Ctx,
        d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        let dev = ctx.dev(d)?;
        let report = (s[0] & 0x1f == 1).then(|| usbhid::report_descriptor(dev, s[4]))??;
        match (s[0], s[1], s[3]) {
            (0x81, 0x06, 0x22) => Some((0, Some(report.to_vec()))),
            (0x21, 0x0a | 0x09, _) => Some((0, None)),
            _ => None,
        }
    }
}

/// The endpoint as the kernel keeps it after parsing at `speed`: a periodic
/// bInterval outside the range the speed allows is replaced by the kernel's
/// default for that case, and a wMaxPacketSize above the speed's limit for
/// the transfer type is lowered to the limit (the raw bytes stay as they are).
fn kernel_endpoint(speed: Speed, addr: u8, attr: u8, mps: u16, interval: u8) -> EpDesc {
    let hs = speed == Speed::High;
    let mut interval = interval;
    match attr & 3 {
        3 => {
            let (lo, hi) = if hs { (1, 16) } else { (1, 255) };
            if !(lo..=hi).contains(&interval) {
                interval = if hs {
                    // A full-speed style value in ms, converted to the
                    // exponent of as many microframes; 8 ms when that fails.
                    match 32 - (interval as u32 * 8).leading_zeros() {
                        0 => 7,
                        n => n.min(16) as u8,
                    }
                } else {
                    10
                };
            }
        }
        1 if !(1..=16).contains(&interval) => interval = if hs { 7 } else { 4 },
        _ => {}
    }
    // Largest packet per transfer type (control, iso, bulk, interrupt).
    let max = if hs {
        [64, 1024, 512, 1024]
    } else {
        [64, 1023, 64, 64]
    }[(attr & 3) as usize];
    let mut mps = mps;
    if mps & 0x7ff > max {
        mps = (mps & 0x1800) | max;
    }
    EpDesc::new(addr, attr, mps, interval)
}

/// `usb_choose_configuration` for a device no driver claims: the first
/// configuration whose first interface is not vendor specific, else the
/// first one.
fn choose_config(dump: &DescriptorDump) -> usize {
    dump.configs
        .iter()
        .position(|c| c.interfaces.first().is_some_and(|i| i.class != 0xff))
        .unwrap_or(0)
}

fn dump_config(c: &crate::capture::usbdesc::DumpConfig, speed: Speed) -> ConfigDesc {
    // Interfaces in the order their numbers first appear, each with its
    // settings in descriptor order (the kernel's interface cache).
    let mut order: Vec<u8> = vec![];
    for i in &c.interfaces {
        if !order.contains(&i.num) {
            order.push(i.num);
        }
    }
    let alts = order
        .iter()
        .flat_map(|n| c.interfaces.iter().filter(move |i| i.num == *n))
        .map(|i| AltDesc {
            num: i.num,
            alt: i.alt,
            class: i.class,
            sub: i.sub,
            proto: i.proto,
            istr: i.i_intf,
            extra: i.extra.clone(),
            eps: i
                .eps
                .iter()
                .map(|e| kernel_endpoint(speed, e.addr, e.attr, e.mps, e.interval))
                .collect(),
        })
        .collect();
    ConfigDesc {
        value: c.value,
        attr: c.attr,
        max_power: c.max_power,
        i_cfg: c.i_cfg,
        iads: c
            .iads
            .iter()
            .map(|a| IadDesc {
                first: a.first,
                count: a.count,
                class: a.class,
                sub: a.sub,
                proto: a.proto,
            })
            .collect(),
        alts,
    }
}

/// A device built from a descriptor dump: its model (for `usb/devices` and
/// the endpoints' timing) is parsed from the bytes, which it answers as they
/// are; the strings are the configured manufacturer, product and serial,
/// else (from a capture) the recorded ones.
pub(super) fn from_dump(
    cfg: &DeviceConfig,
    dump: &Arc<DescriptorDump>,
    speed: Speed,
) -> Descriptors {
    let b = dump.device();
    let le = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let all: Vec<ConfigDesc> = dump.configs.iter().map(|c| dump_config(c, speed)).collect();
    let chosen = choose_config(dump);
    let c = &dump.configs[chosen];
    let recorded = cfg.capture.as_ref().and_then(|c| c.device.clone());
    // A recorded string as the kernel caches it (UTF-16LE to UTF-8).
    let text = |idx: u8| {
        let raw = recorded.as_ref()?.string(idx)?;
        let units: Vec<u16> = raw[2..]
            .chunks_exact(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        Some(String::from_utf16_lossy(&units))
    };
    let mut intf_strings = vec![];
    let mut seen = vec![];
    for i in &c.interfaces {
        if !seen.contains(&i.num) {
            seen.push(i.num);
            let s0 = c.interfaces.iter().find(|a| a.num == i.num && a.alt == 0);
            intf_strings.push(s0.map(|a| a.i_intf).unwrap_or(0));
        }
    }
    Descriptors {
        speed,
        dev: DeviceDesc {
            bcd_usb: le(2),
            class: b[4],
            sub: b[5],
            proto: b[6],
            mps0: b[7],
            vid: le(8),
            pid: le(10),
            bcd_device: le(12),
            i_mfr: b[14],
            i_prod: b[15],
            i_ser: b[16],
        },
        cfg: all[chosen].clone(),
        manufacturer: cfg
            .manufacturer
            .clone()
            .or_else(|| text(b[14]))
            .filter(|_| b[14] != 0),
        product: cfg
            .product
            .clone()
            .or_else(|| text(b[15]))
            .filter(|_| b[15] != 0),
        serial: cfg
            .serial
            .clone()
            .or_else(|| text(b[16]))
            .filter(|_| b[16] != 0),
        configuration: None,
        report: vec![],
        hub_desc: vec![],
        nports: 0,
        raw: Some(dump.clone()),
        all_cfgs: if all.len() > 1 { all } else { vec![] },
        intf_strings,
        other_strings: vec![],
        recorded,
    }
}
