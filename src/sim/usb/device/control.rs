//! The default control endpoint of every modelled device: the standard
//! requests every device answers on ep0 (descriptors, configuration,
//! interface settings, features), then its class's (`DeviceClass::ep0`);
//! and the class drivers' set-up requests (`DeviceClass::class_ops`).

use crate::usbmon::event::{XferType, URB_DIR_IN};

use super::super::ctx::*;
use super::super::descriptors;
use super::class_of;

impl Ctx {
    /// What a control transfer of `target` with `len` bytes of OUT data
    /// that the device refused (stalled) counts as moved: the data, where
    /// the device stalls after its data stage (qemu's,
    /// [`super::class::DeviceClass::qemu_control`]), else nothing.
    pub(crate) fn refused_out_moved(&self, target: DevId, len: u32) -> u32 {
        let qemu = self
            .dev(target)
            .is_some_and(|d| matches!(d.kind, Kind::Dev(_)) && class_of(d.kind).qemu_control());
        if qemu {
            len
        } else {
            0
        }
    }

    /// Answer a control request on `target`'s ep0: (status, IN data).
    pub(crate) fn handle_ctrl(
        &mut self,
        target: DevId,
        s: &[u8; 8],
        out: Option<&[u8]>,
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
            (0x81, 0x00) | (0x82, 0x00) if class_of(dev.kind).qemu_control() => stall,
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
            _ => {
                let kind = dev.kind;
                class_of(kind).ep0(self, target, s, out).unwrap_or(stall)
            }
        }
    }

    /// The class driver's requests after SET_CONFIGURATION.
    pub(crate) fn class_ops(&mut self, d: DevId) -> Vec<Op> {
        let Some(dev) = self.dev(d) else {
            return vec![];
        };
        class_of(dev.kind).class_ops(dev, d)
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
            start_frame: 0,
            sched_frame: 0,
        }
    }
}
