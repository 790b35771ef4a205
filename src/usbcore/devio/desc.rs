//! Walking a device's configuration descriptors the way
//! `drivers/usb/core/devio.c` does (findintfep, ep_to_host_endpoint) and
//! the URB interval it derives from bInterval.

use super::*;
use crate::usbcore::abi::descriptors;

/// findintfep: the interface (of any setting of the active configuration)
/// that has endpoint `ep`.
pub(super) fn findintfep(d: &UsbDevice, ep: u32) -> SysResult<u32> {
    if ep & !(0x80 | 0x0f) != 0 {
        return Err(Errno::EINVAL);
    }
    let cfg = d.config(d.active_config).ok_or(Errno::ESRCH)?;
    let mut intf = None;
    for desc in descriptors(cfg) {
        match desc.get(1) {
            Some(4) if desc.len() >= 9 => intf = Some(desc[2]),
            Some(5) if desc.len() >= 7 && desc[2] as u32 == ep => {
                if let Some(i) = intf {
                    return Ok(i as u32);
                }
            }
            _ => {}
        }
    }
    Err(Errno::ENOENT)
}

/// The endpoint descriptor of `ep` in the current settings of the active
/// configuration (the kernel's `ep_in[]`/`ep_out[]`); ep0 is control.
pub(super) fn endpoint(d: &UsbDevice, ep: u8) -> Option<(u8, u8, u16)> {
    if ep & 0x0f == 0 {
        return Some((0, 0, d.descriptor[7] as u16));
    }
    let cfg = d.config(d.active_config)?;
    let mut cur = false;
    for desc in descriptors(cfg) {
        match desc.get(1) {
            Some(4) if desc.len() >= 9 => {
                cur = d.interface(desc[2]).is_some_and(|i| i.alt == desc[3]);
            }
            Some(5) if cur && desc.len() >= 7 && desc[2] == ep => {
                return Some((desc[3] & 3, desc[6], u16_at(desc, 4)));
            }
            _ => {}
        }
    }
    None
}

/// The URB interval devio.c sets from bInterval.
pub(super) fn interval_of(d: &UsbDevice, b_interval: u8, iso: bool) -> i32 {
    use crate::usbcore::device::Speed;
    if b_interval == 0 {
        return 0;
    }
    if iso || d.speed == Speed::High || d.speed >= Speed::Super {
        1 << (b_interval as u32 - 1).min(15)
    } else {
        b_interval as i32
    }
}

/// ep_to_host_endpoint: (type, bInterval, wMaxPacketSize) of `ep`.
pub(super) fn endpoint_of(d: &UsbDevice, ep: u8) -> Option<(u8, u8, u16)> {
    endpoint(d, ep)
}

pub(super) fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}
