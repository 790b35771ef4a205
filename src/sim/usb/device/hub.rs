//! External hubs (`kind: hub`, a Genesys Logic USB 2.0 hub) and the hub
//! class requests every hub answers, the root hubs' included; the hub
//! driver itself (ports, enumeration) is `sim/usb/hub.rs`
//! (drivers/usb/core/hub.c).

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::{hub_descriptor, AltDesc, ClassDesc, EpDesc, Where};
use super::class::DeviceClass;

/// `kind: hub`, and the root hubs.
pub(super) struct Hub;

impl DeviceClass for Hub {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::Hub]
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let hs = at.hs();
        let nports = at
            .cfg
            .devices
            .iter()
            .map(|d| d.port.0)
            .max()
            .unwrap_or(0)
            .max(4);
        let bytes = (nports as u16 + 1).div_ceil(8);
        Some(ClassDesc {
            ids: (0x05e3, 0x0608, 0x6060),
            class: (9, 0, if hs { 1 } else { 0 }),
            mps0: 64,
            attr: 0xe0,
            power: 50,
            prod: Some("USB2.0 Hub".to_string()),
            alts: vec![AltDesc {
                num: 0,
                alt: 0,
                class: 9,
                sub: 0,
                proto: 0,
                istr: 0,
                extra: vec![],
                eps: vec![EpDesc::new(0x81, 0x03, bytes, if hs { 0x0c } else { 0xff })],
            }],
            hub_desc: hub_descriptor(nports, 0x00e0, 0x32, 0x64, 0),
            nports,
            ..ClassDesc::default()
        })
    }

    fn ep0(
        &self,
        ctx: &mut Ctx,
        d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        let value = u16::from_le_bytes([s[2], s[3]]);
        let index = u16::from_le_bytes([s[4], s[5]]);
        let dev = ctx.dev(d)?;
        if !dev.is_hub() {
            return None;
        }
        let port = (index >= 1 && (index as u8) <= dev.desc.nports).then_some(index as u8);
        match (s[0], s[1], port) {
            (0xa0, 0x06, _) if value >> 8 == 0x29 => Some((0, Some(dev.desc.hub_desc.clone()))),
            (0xa0, 0x00, _) => Some((0, Some(vec![0; 4]))),
            (0xa3, 0x00, Some(p)) => {
                let (st, ch) = ctx.port_status(d, p);
                let mut b = st.to_le_bytes().to_vec();
                b.extend_from_slice(&ch.to_le_bytes());
                Some((0, Some(b)))
            }
            (0x23, 0x03, Some(p)) | (0x23, 0x01, Some(p)) => {
                ctx.port_feature(d, p, value, s[1] == 0x03);
                Some((0, None))
            }
            (0x20, 0x01, _) | (0x20, 0x03, _) => Some((0, None)),
            _ => None,
        }
    }

    fn class_ops(&self, _dev: &Device, d: DevId) -> Vec<Op> {
        vec![
            ctrl(d, setup(0xa0, 0x06, 0x2900, 0, 15)),
            ctrl(d, setup(0x80, 0x00, 0, 0, 2)),
            ctrl(d, setup(0xa0, 0x00, 0, 0, 4)),
            Op::Activate(d),
        ]
    }
}
