//! snd-usb-audio (`sound/usb/card.c`) and uvcvideo
//! (`drivers/media/usb/uvc/uvc_driver.c`): each matches the control
//! interface and claims the streaming interfaces its class header lists
//! (usb_driver_claim_interface), so those show the driver without matching
//! it themselves.

use crate::sim::usb::ctx::Device;
use crate::sim::usb::descriptors::AltDesc;

use super::host::{Disconnect, HostDriver};
use super::id::UsbDeviceId;
use crate::sim::usb::ctx::{ECONNRESET, ENOENT};

/// snd-usb-audio.
pub(super) struct SndUsbAudio;

/// usb_audio_ids' class entry: audio control interfaces (its quirk table's
/// vendor entries are not modelled).
static AUDIO_IDS: [UsbDeviceId; 1] = [UsbDeviceId::interface_class_subclass(1, 1)];

/// The class-specific header (CS_INTERFACE, subtype 1) among `extra`.
fn header(extra: &[u8]) -> Option<&[u8]> {
    crate::usbcore::abi::descriptors(extra).find(|d| d[1] == 0x24 && d.len() >= 3 && d[2] == 1)
}

/// `n` interface numbers from `at` in header `h`.
fn collection(h: &[u8], count_at: usize) -> Vec<u8> {
    let n = h.get(count_at).copied().unwrap_or(0) as usize;
    h.get(count_at + 1..)
        .unwrap_or(&[])
        .iter()
        .take(n)
        .copied()
        .collect()
}

impl HostDriver for SndUsbAudio {
    fn name(&self) -> &'static str {
        "snd-usb-audio"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &AUDIO_IDS
    }
    // UAC1: the header's baInterfaceNr list (snd_usb_create_streams);
    // UAC2 and 3: the interfaces of the association that holds the
    // control interface.
    fn claims(&self, dev: &Device, alt: &AltDesc) -> Vec<u8> {
        let Some(h) = header(&alt.extra) else {
            return vec![];
        };
        let bcd = h.get(3..5).map(|b| u16::from_le_bytes([b[0], b[1]]));
        if bcd.is_some_and(|v| v < 0x0200) {
            return collection(h, 7);
        }
        dev.desc
            .cfg
            .iads
            .iter()
            .find(|a| (a.first..a.first.saturating_add(a.count)).contains(&alt.num))
            .map(|a| {
                (a.first..a.first.saturating_add(a.count))
                    .filter(|n| *n != alt.num)
                    .collect()
            })
            .unwrap_or_default()
    }
    // usb_audio_disconnect: the card shut down, its endpoints stopped
    // (usb_unlink_urb).
    fn disconnect(&self) -> Option<Disconnect> {
        Some(Disconnect {
            status: ECONNRESET,
            to_setting_0: false,
        })
    }
    // usb_audio_disconnect releases no interface: the streaming ones it
    // claimed (their data USB_AUDIO_IFACE_UNUSED) stay bound to it until
    // their own unbind, whose disconnect does nothing.
    fn keeps_claims(&self) -> bool {
        true
    }
}

/// uvcvideo.
pub(super) struct UvcVideo;

/// uvc_ids' class entries: video control interfaces, UVC 1.0/1.1 and 1.5.
static UVC_IDS: [UsbDeviceId; 2] = [
    UsbDeviceId::interface_info(0x0e, 1, 0),
    UsbDeviceId::interface_info(0x0e, 1, 1),
];

impl HostDriver for UvcVideo {
    fn name(&self) -> &'static str {
        "uvcvideo"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &UVC_IDS
    }
    // uvc_parse_control: the VC header's baInterfaceNr list.
    fn claims(&self, _dev: &Device, alt: &AltDesc) -> Vec<u8> {
        header(&alt.extra)
            .map(|h| collection(h, 11))
            .unwrap_or_default()
    }
    // uvc_disconnect of the control interface: uvc_unregister_video
    // releases each stream's queue, and uvc_video_stop_streaming kills
    // the URBs and puts the streaming interface back to setting 0. Its
    // last reference to the device then goes (no video node is open:
    // monfs has none), and uvc_delete releases the streaming interfaces
    // (usb_driver_release_interface).
    fn disconnect(&self) -> Option<Disconnect> {
        Some(Disconnect {
            status: ENOENT,
            to_setting_0: true,
        })
    }
}
