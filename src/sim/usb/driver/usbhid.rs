//! usbhid (`drivers/hid/usbhid/hid-core.c`): binds every HID class
//! interface; its probe reads the serial number, sets the idle rate to 0,
//! reads the report descriptor whose length the interface's HID descriptor
//! gives, and sets a boot keyboard's LEDs. The probe binds the interface
//! once it has the report descriptor: from a built-in model, an external
//! peer's answer, a capture's recorded answer, or a descriptor dump's
//! `report_descriptors`.

use std::sync::Arc;

use crate::capture::usbdesc::hid_report_length;
use crate::config::DeviceKind;
use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::AltDesc;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;
use super::int_in::{DeviceFunction, InLoop};

/// usbhid.
pub(super) struct UsbHid;

/// usbhid's name.
pub(crate) const NAME: &str = "usbhid";

static IDS: [UsbDeviceId; 1] = [UsbDeviceId::interface_class(3)];

impl HostDriver for UsbHid {
    fn name(&self) -> &'static str {
        NAME
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &IDS
    }
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        probe(dev, alt.num)
    }
    fn probe_ops(&self, dev: &Device, d: DevId, alt: &AltDesc) -> Vec<Op> {
        interfaces(dev)
            .iter()
            .filter(|h| h.num == alt.num)
            .flat_map(|h| probe_ops(dev, d, h))
            .collect()
    }
    // usbhid_start: one URB kept on the interrupt IN endpoint, as long as
    // the longest input report; it reads the device's function (what the
    // device sends), made now if the device has one and it is not there
    // yet.
    fn start(&self, ctx: &mut Ctx, d: DevId, alt: &AltDesc, at: u64) {
        let Some(ep) = alt.eps.iter().find(|e| e.dir_in() && e.xfer_type() == 3) else {
            return;
        };
        let Some(dev) = ctx.dev(d) else {
            return;
        };
        let len = report_descriptor(dev, alt.num)
            .and_then(|r| crate::hid::report::Descriptor::parse(r).ok())
            .map(|r| input_size(&r))
            .unwrap_or(ep.mps as u32 & 0x7ff);
        let addr = ep.addr;
        let t = InLoop::new(ctx, d, addr, len, |ctx| {
            (ctx.make_function)(ctx, d, at);
            DeviceFunction(d, addr)
        });
        ctx.spawn(at, Box::new(t));
    }
}

/// usbhid_start's `insize`: the longest input report, its ID counted
/// (hid_find_max_report), at most HID_MAX_BUFFER_SIZE.
fn input_size(r: &crate::hid::report::Descriptor) -> u32 {
    use crate::hid::report::Kind;
    let numbered = r.numbered[Kind::Input as usize] as usize;
    let max = r
        .reports
        .iter()
        .filter(|x| x.kind == Kind::Input)
        .map(|x| x.bytes() + numbered)
        .max()
        .unwrap_or(0);
    max.min(crate::hid::report::HID_MAX_BUFFER_SIZE) as u32
}

/// A HID interface as usbhid_parse reads it: its setting 0's numbers and
/// the report descriptor's length from its HID descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct HidInterface {
    pub num: u8,
    pub sub: u8,
    pub proto: u8,
    pub report_len: u16,
}

impl HidInterface {
    /// A boot-protocol keyboard, whose LEDs usbhid_start sets.
    pub(crate) fn boot_keyboard(&self) -> bool {
        self.sub == 1 && self.proto == 1
    }
}

/// The HID interfaces (class 3, setting 0) of `dev`'s configuration that
/// usbhid_parse accepts: a HID descriptor among the interface's class
/// descriptors with a report entry of 1..=4096 bytes, in interface order.
pub(crate) fn interfaces(dev: &Device) -> Vec<HidInterface> {
    dev.desc
        .cfg
        .alts
        .iter()
        .filter(|a| a.alt == 0 && a.class == 3)
        .filter_map(|a| {
            let report_len = hid_report_length(&a.extra)? as u16;
            Some(HidInterface {
                num: a.num,
                sub: a.sub,
                proto: a.proto,
                report_len,
            })
        })
        .collect()
}

/// The report descriptor usbhid's probe got for interface `num` of `dev`:
/// an external peer's answer, a capture's recorded one, a built-in
/// model's own.
pub(crate) fn report_descriptor(dev: &Device, num: u8) -> Option<&[u8]> {
    interfaces(dev).iter().find(|h| h.num == num)?;
    let r = match dev.kind {
        Kind::Dev(DeviceKind::External) => dev
            .hid_probed
            .iter()
            .find(|(i, _)| *i == num)
            .map(|(_, r)| r.as_slice()),
        Kind::Dev(DeviceKind::FromCapture) => dev.desc.recorded.as_ref()?.report(num),
        Kind::Dev(DeviceKind::Descriptors) => dev
            .cfg
            .as_ref()?
            .report_descriptors
            .get(&num)
            .map(|r| r.0.as_slice()),
        _ => Some(dev.desc.report.as_slice()),
    };
    r.filter(|r| !r.is_empty())
}

/// usbhid's probe of interface `num` of `dev`: bound with a report
/// descriptor, failed without one, pending while an external peer has not
/// answered the GET_DESCRIPTOR yet.
fn probe(dev: &Device, num: u8) -> Probe {
    if report_descriptor(dev, num).is_some() {
        return Probe::Bound;
    }
    let asked = dev.hid_probed.iter().any(|(i, _)| *i == num);
    let hid = interfaces(dev).iter().any(|h| h.num == num);
    if dev.kind == Kind::Dev(DeviceKind::External) && dev.driver_bound && hid && !asked {
        Probe::Pending
    } else {
        Probe::Failed
    }
}

/// Whether usbhid still probes an interface of `dev` (an external peer's
/// report descriptor not read yet): the kernel announces the interface
/// bound only once its HID device exists.
pub(crate) fn probing(dev: &Device) -> bool {
    interfaces(dev)
        .iter()
        .any(|h| probe(dev, h.num) == Probe::Pending)
}

/// usbhid's probe requests for HID interface `h` of device `d`, as
/// usbhid_probe, usbhid_parse and usbhid_start make them: the serial
/// number (each interface's probe reads it), SET_IDLE(0), the report
/// descriptor, and a boot keyboard's LEDs (off) on usbhid's own control
/// URB `class_tag`.
pub(crate) fn probe_ops(dev: &Device, d: DevId, h: &HidInterface) -> Vec<Op> {
    let mut ops = vec![];
    let i_ser = dev.desc.dev.i_ser;
    if i_ser != 0 {
        ops.push(ctrl(
            d,
            setup(0x80, 0x06, 0x0300 | i_ser as u16, 0x0409, 255),
        ));
    }
    let i = h.num as u16;
    ops.push(ctrl(d, setup(0x21, 0x0a, 0, i, 0)));
    ops.push(ctrl(d, setup(0x81, 0x06, 0x2200, i, h.report_len)));
    if h.boot_keyboard() {
        ops.push(Op::Ctrl {
            target: d,
            setup: setup(0x21, 0x09, 0x0200, i, 1),
            out: Some(Arc::from(vec![0])),
            tag: Some(dev.class_tag),
            flags: URB_NO_TRANSFER_DMA_MAP,
        });
    }
    ops
}
