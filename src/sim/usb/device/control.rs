//! The default control endpoint of every modelled device: what each answers
//! on ep0 (descriptors, configuration, class requests), and the class
//! drivers' set-up requests.

use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbmon::event::{XferType, URB_DIR_IN};

use super::super::ctx::*;
use super::super::descriptors;

/// The UVC probe/commit control block (26 bytes, UVC 1.0): MJPEG format 1,
/// frame 1 at 30 fps, 1024-byte payloads.
fn uvc_probe() -> Vec<u8> {
    let mut b = vec![0u8; 26];
    b[0] = 0x01; // bmHint: dwFrameInterval
    b[2] = 1; // bFormatIndex
    b[3] = 1; // bFrameIndex
    b[4..8].copy_from_slice(&333_333u32.to_le_bytes());
    b[18..22].copy_from_slice(&614_400u32.to_le_bytes());
    b[22..26].copy_from_slice(&1024u32.to_le_bytes());
    b
}

impl Ctx {
    /// Answer a control request on `target`'s ep0: (status, IN data).
    pub(crate) fn handle_ctrl(
        &mut self,
        target: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> (i32, Option<Vec<u8>>) {
        let value = u16::from_le_bytes([s[2], s[3]]);
        let index = u16::from_le_bytes([s[4], s[5]]);
        let Some(dev) = self.dev(target) else {
            return (EPROTO, None);
        };
        let is_hub = dev.is_hub();
        let ok = (0, None);
        let stall = (EPIPE, None);
        match (s[0], s[1]) {
            (0x80, 0x06) => {
                let raw = dev.desc.raw.as_deref();
                let d = match (value >> 8, raw) {
                    (1, Some(r)) => Some(r.device().to_vec()),
                    (2, Some(r)) => r.config_bytes(value as u8 as usize).map(<[u8]>::to_vec),
                    (1, None) => Some(dev.desc.dev.bytes().to_vec()),
                    (2, None) => Some(dev.desc.cfg.bytes()),
                    (3, _) => dev.desc.string(value as u8),
                    _ => None,
                };
                match d {
                    Some(d) => (0, Some(d)),
                    None => stall,
                }
            }
            (0x80, 0x00) => (0, Some(vec![u8::from(is_hub), 0])),
            // GET_STATUS of an interface or endpoint, GET_CONFIGURATION,
            // GET_INTERFACE (programs ask them; the hub driver does not).
            (0x81, 0x00) | (0x82, 0x00) => (0, Some(vec![0, 0])),
            (0x80, 0x08) => (
                0,
                Some(vec![if dev.configured || dev.kind == Kind::Root {
                    dev.desc.cfg.value
                } else {
                    0
                }]),
            ),
            (0x81, 0x0a) if dev.configured || dev.kind == Kind::Root => {
                match dev.alt.get(index as usize) {
                    Some(a) if dev.desc.cfg.alts.iter().any(|x| x.num as u16 == index) => {
                        (0, Some(vec![*a]))
                    }
                    _ => stall,
                }
            }
            (0x00, 0x05) => ok,
            (0x00, 0x09) => {
                let d = self.dev_mut(target).unwrap();
                d.configured = value != 0;
                d.strings_read = true;
                ok
            }
            (0x01, 0x0b) => {
                let d = self.dev_mut(target).unwrap();
                if let Some(a) = d.alt.get_mut(index as usize) {
                    *a = value as u8;
                }
                ok
            }
            (0x02, 0x01) | (0x02, 0x03) | (0x00, 0x01) | (0x00, 0x03) => ok,
            (0xa0, 0x06) if is_hub && value >> 8 == 0x29 => (0, Some(dev.desc.hub_desc.clone())),
            (0xa0, 0x00) if is_hub => (0, Some(vec![0; 4])),
            (0xa3, 0x00) if is_hub && index >= 1 && (index as u8) <= dev.desc.nports => {
                let (st, ch) = self.port_status(target, index as u8);
                let mut b = st.to_le_bytes().to_vec();
                b.extend_from_slice(&ch.to_le_bytes());
                (0, Some(b))
            }
            (0x23, 0x03) | (0x23, 0x01)
                if is_hub && index >= 1 && (index as u8) <= dev.desc.nports =>
            {
                self.port_feature(target, index as u8, value, s[1] == 0x03);
                ok
            }
            (0x20, 0x01) | (0x20, 0x03) if is_hub => ok,
            // HID: SET_IDLE, SET_REPORT, SET_PROTOCOL, report descriptor.
            (0x21, 0x0a) | (0x21, 0x09) | (0x21, 0x0b) if !dev.desc.report.is_empty() => ok,
            (0x81, 0x06) if value >> 8 == 0x22 && !dev.desc.report.is_empty() => {
                (0, Some(dev.desc.report.clone()))
            }
            // Bulk-only mass storage: GET_MAX_LUN, reset.
            (0xa1, 0xfe) if dev.kind == Kind::Dev(DeviceKind::MassStorage) => (0, Some(vec![0])),
            (0x21, 0xff) if dev.kind == Kind::Dev(DeviceKind::MassStorage) => ok,
            // UVC SET_CUR / GET_CUR of the probe and commit controls.
            (0x21, 0x01) if dev.kind == Kind::Dev(DeviceKind::Webcam) => ok,
            (0xa1, 0x81) | (0xa1, 0x82) | (0xa1, 0x83)
                if dev.kind == Kind::Dev(DeviceKind::Webcam) =>
            {
                (0, Some(uvc_probe()))
            }
            // UAC1 SET_CUR sampling frequency on the endpoint.
            (0x22, 0x01) if dev.kind == Kind::Dev(DeviceKind::Audio) => ok,
            _ => stall,
        }
    }

    /// The class driver's requests after SET_CONFIGURATION.
    pub(crate) fn class_ops(&mut self, d: DevId) -> Vec<Op> {
        let Some(dev) = self.dev(d) else {
            return vec![];
        };
        let ctrl = |s: [u8; 8]| Op::Ctrl {
            target: d,
            setup: s,
            out: None,
            tag: None,
        };
        let ctrl_out = |s: [u8; 8], data: Vec<u8>, tag: Option<u64>| Op::Ctrl {
            target: d,
            setup: s,
            out: Some(Arc::from(data)),
            tag,
        };
        let kind = match dev.kind {
            Kind::Root => DeviceKind::Hub,
            Kind::Dev(k) => k,
        };
        match kind {
            DeviceKind::Hub => vec![
                ctrl(setup(0xa0, 0x06, 0x2900, 0, 15)),
                ctrl(setup(0x80, 0x00, 0, 0, 2)),
                ctrl(setup(0xa0, 0x00, 0, 0, 4)),
                Op::Activate(d),
            ],
            DeviceKind::HidKeyboard | DeviceKind::HidMouse | DeviceKind::HidTablet => {
                let mut ops = vec![];
                // usbhid_probe reads the serial number (hid->uniq) first.
                let i_ser = dev.desc.dev.i_ser;
                if i_ser != 0 {
                    ops.push(ctrl(setup(0x80, 0x06, 0x0300 | i_ser as u16, 0x0409, 255)));
                }
                ops.push(ctrl(setup(0x21, 0x0a, 0, 0, 0)));
                ops.push(ctrl(setup(
                    0x81,
                    0x06,
                    0x2200,
                    0,
                    dev.desc.report.len() as u16,
                )));
                if kind == DeviceKind::HidKeyboard {
                    // The LED state, through usbhid's own control URB.
                    ops.push(ctrl_out(
                        setup(0x21, 0x09, 0x0200, 0, 1),
                        vec![0],
                        Some(dev.class_tag),
                    ));
                }
                ops.push(Op::StartStreams(d));
                ops
            }
            DeviceKind::Audio => vec![
                ctrl(setup(0x01, 0x0b, 1, 1, 0)),
                ctrl_out(
                    setup(0x22, 0x01, 0x0100, 0x0001, 3),
                    vec![0x80, 0xbb, 0x00],
                    None,
                ),
                Op::StartStreams(d),
            ],
            DeviceKind::Webcam => vec![
                ctrl_out(setup(0x21, 0x01, 0x0100, 1, 26), uvc_probe(), None),
                ctrl(setup(0xa1, 0x81, 0x0100, 1, 26)),
                ctrl_out(setup(0x21, 0x01, 0x0200, 1, 26), uvc_probe(), None),
                ctrl(setup(0x01, 0x0b, 1, 1, 0)),
                Op::StartStreams(d),
            ],
            DeviceKind::MassStorage | DeviceKind::Flood => vec![Op::StartStreams(d)],
            // No class driver binds to a device from a dump: it stays quiet.
            DeviceKind::Descriptors => vec![],
            // The external device's driver runs its own requests (their
            // answers come from the peer): see `external`.
            DeviceKind::External => vec![Op::StartStreams(d)],
            // The recorded IN data starts once it is configured.
            DeviceKind::FromCapture => vec![Op::StartStreams(d)],
        }
    }

    pub(crate) fn data_urb(&self, d: DevId, addr: u8, len: u32, flags: u32, tag: u64) -> Urb {
        let dev = self.dev(d).unwrap();
        let ep = dev.desc.cfg.endpoint(addr);
        let (xfer, interval) = match ep {
            Some(e) => (
                match e.xfer_type() {
                    1 => XferType::Iso,
                    2 => XferType::Bulk,
                    3 => XferType::Interrupt,
                    _ => XferType::Control,
                },
                match e.xfer_type() {
                    1 | 3 => descriptors::urb_interval(dev.speed(), e),
                    _ => 0,
                },
            ),
            None => (XferType::Bulk, 0),
        };
        let dir_in = addr & 0x80 != 0;
        Urb {
            tag,
            xfer,
            ep: addr & 0x0f,
            dir_in,
            len,
            interval,
            flags: flags | if dir_in { URB_DIR_IN } else { 0 },
            setup: None,
            npk: 0,
        }
    }
}
