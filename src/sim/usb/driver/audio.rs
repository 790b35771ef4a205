//! snd-usb-audio (`sound/usb/card.c`) and uvcvideo
//! (`drivers/media/usb/uvc/uvc_driver.c`): each matches the control
//! interface and claims the streaming interfaces its class header lists
//! (usb_driver_claim_interface), so those show the driver without matching
//! it themselves. snd-usb-audio's probe reads the mixer as it goes
//! ([`HostDriver::probe_asking`]); a program using the node then
//! ([`HostDriver::opened_asking`]: a player opening the PCM, the
//! configuration's `player`; a viewer's probe and commit controls) starts
//! the isochronous stream ([`super::iso`]), at the device's first probe
//! only (bound again, the driver probes again, but the program is gone).

use std::sync::Arc;

use crate::sim::usb::ctx::{ctrl, setup, Ctx, DevId, Device, Op};
use crate::sim::usb::descriptors::uac1::*;
use crate::sim::usb::descriptors::{AltDesc, EpDesc};

use super::host::{claimable, Ask, Disconnect, HostDriver};
use super::id::UsbDeviceId;
use super::iso::Stream;
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
    // usb_audio_probe.
    fn probe_asking(&self, dev: &Device, d: DevId, alt: &AltDesc, ask: &mut Ask<'_>) -> Vec<Op> {
        snd_usb_audio_probe(dev, d, alt, &claimable(dev, self, alt), ask)
    }
    // A player opening the PCM (snd_usb_hw_params) once the card is there.
    fn opened_asking(&self, dev: &Device, d: DevId, alt: &AltDesc, _ask: &mut Ask<'_>) -> Vec<Op> {
        match player(dev) {
            true => pcm_open(dev, d, &claimable(dev, self, alt)),
            false => Vec::new(),
        }
    }
    fn opened_starts(&self) -> bool {
        true
    }
    // A player streams to the PCM: URBs of 4 packets, two queued
    // (the model's choice; snd-usb-audio sizes them by the period).
    fn start(&self, ctx: &mut Ctx, d: DevId, alt: &AltDesc, at: u64) {
        let Some(dev) = ctx.dev(d) else {
            return;
        };
        if !player(dev) {
            return;
        }
        if let Some(ep) = stream_endpoint(dev, &claimable(dev, self, alt)) {
            let s = Stream {
                d,
                control: alt.num,
                addr: ep,
                npk: 4,
                nurbs: 2,
            };
            s.start(ctx, at);
        }
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
    // (uvc_probe's own requests are not modelled.) A viewer's
    // VIDIOC_STREAMON at once (uvc_video_start_streaming).
    fn opened_asking(&self, dev: &Device, d: DevId, alt: &AltDesc, ask: &mut Ask<'_>) -> Vec<Op> {
        uvc_stream_on(dev, d, &claimable(dev, self, alt), alt, ask)
    }
    fn opened_starts(&self) -> bool {
        true
    }
    // A viewer's stream (uvc_video_start_transfer): URBs of 32 packets,
    // three queued (the model's choice; uvcvideo keeps UVC_URBS).
    fn start(&self, ctx: &mut Ctx, d: DevId, alt: &AltDesc, at: u64) {
        let Some(dev) = ctx.dev(d) else {
            return;
        };
        if let Some(ep) = stream_endpoint(dev, &claimable(dev, self, alt)) {
            let s = Stream {
                d,
                control: alt.num,
                addr: ep,
                npk: 32,
                nurbs: 3,
            };
            s.start(ctx, at);
        }
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

/// Whether a player opens the PCM of audio device `dev` once snd-usb-audio
/// has probed it (the configuration's `player`, by default one does).
fn player(dev: &Device) -> bool {
    dev.cfg.as_ref().is_none_or(|c| c.player.unwrap_or(true))
}

/// The first isochronous endpoint of the streaming interfaces `claims` of
/// `dev`: the one the driver streams on.
fn stream_endpoint(dev: &Device, claims: &[u8]) -> Option<u8> {
    stream_setting(dev, claims).map(|(_, e)| e.addr)
}

/// The first setting of the streaming interfaces `claims` of `dev` with an
/// isochronous endpoint, and that endpoint.
fn stream_setting<'a>(dev: &'a Device, claims: &[u8]) -> Option<(&'a AltDesc, &'a EpDesc)> {
    dev.desc
        .cfg
        .alts
        .iter()
        .filter(|a| claims.contains(&a.num))
        .find_map(|a| a.eps.iter().find(|e| e.xfer_type() == 1).map(|e| (a, e)))
}

/// usb_string's request for string `i` (English, 255 bytes).
fn string(d: DevId, i: u8) -> Op {
    ctrl(d, setup(0x80, 0x06, 0x0300 | i as u16, 0x0409, 255))
}

/// usb_set_interface's request: setting `alt` of interface `num`.
fn set_interface(d: DevId, num: u8, alt: u8) -> Op {
    ctrl(d, setup(0x01, 0x0b, alt as u16, num as u16, 0))
}

/// A class request to interface `intf` (or an entity of it) with OUT data.
fn ctrl_out(d: DevId, s: [u8; 8], out: Vec<u8>) -> Op {
    Op::Ctrl {
        target: d,
        setup: s,
        out: Some(Arc::from(out)),
        tag: None,
        flags: 0,
    }
}

/// How often snd-usb-audio sends a mixer request that fails before it
/// gives up (get_ctl_value_v1, snd_usb_mixer_set_ctl_value).
const MIXER_TRIES: usize = 10;

/// A feature unit's control as snd-usb-audio's mixer builds it
/// (build_feature_ctl; sound/usb/mixer.c): its requests go to entity
/// `unit` of control interface `intf`, for control selector `selector`
/// on the channels of `cmask` (0: the master channel).
struct MixerCtl<'o, 'a, 'b> {
    d: DevId,
    intf: u8,
    unit: u8,
    selector: u8,
    cmask: u32,
    /// Bytes of a value (1 or 2), and whether they are signed.
    len: u16,
    signed: bool,
    /// Channels whose value the driver knows (it set them).
    cached: u32,
    ops: &'o mut Vec<Op>,
    ask: &'a mut Ask<'b>,
}

impl MixerCtl<'_, '_, '_> {
    /// The setup packet of request `req` on `channel`.
    fn setup(&self, req: u8, channel: u8) -> [u8; 8] {
        let dir = if req & 0x80 != 0 { 0xa1 } else { 0x21 };
        let value = (self.selector as u16) << 8 | channel as u16;
        let index = (self.unit as u16) << 8 | self.intf as u16;
        setup(dir, req, value, index, self.len)
    }

    /// get_ctl_value: the value `req` reads on `channel`, tried up to
    /// [`MIXER_TRIES`] times; None: it failed.
    fn get(&mut self, req: u8, channel: u8) -> Option<i32> {
        let s = self.setup(req, channel);
        for _ in 0..MIXER_TRIES {
            self.ops.push(ctrl(self.d, s));
            let Some(b) = (self.ask)(&s, None) else {
                continue;
            };
            if b.len() < self.len as usize {
                continue;
            }
            return Some(match (self.len, self.signed) {
                (1, false) => b[0] as i32,
                (1, true) => b[0] as i8 as i32,
                (_, false) => u16::from_le_bytes([b[0], b[1]]) as i32,
                (_, true) => i16::from_le_bytes([b[0], b[1]]) as i32,
            });
        }
        None
    }

    /// snd_usb_mixer_set_ctl_value: `req` of `v` on `channel`, tried up
    /// to [`MIXER_TRIES`] times; whether the device took it.
    fn set(&mut self, req: u8, channel: u8, v: i32) -> bool {
        let s = self.setup(req, channel);
        let out = (v as u16).to_le_bytes()[..self.len as usize].to_vec();
        for _ in 0..MIXER_TRIES {
            self.ops.push(ctrl_out(self.d, s, out.clone()));
            if (self.ask)(&s, Some(&out)).is_some() {
                return true;
            }
        }
        false
    }

    /// snd_usb_set_cur_mix_value: SET_CUR, the driver then knows it.
    fn set_cur(&mut self, channel: u8, v: i32) -> bool {
        let ok = self.set(SET_CUR, channel, v);
        if ok {
            self.cached |= 1 << channel;
        }
        ok
    }

    /// get_min_max_with_quirks of a control that is not a switch: the
    /// range and resolution on the first channel; UAC1's halving of the
    /// resolution by SET_RES while the device takes it; then the check of
    /// the resolution against what the device reads back (the current
    /// value plus the resolution, doubled until a value reads back as
    /// set), the current value set back. Returns the range.
    fn min_max(&mut self, minchn: u8) -> Option<(i32, i32)> {
        let max = self.get(GET_MAX, minchn)?;
        let min = self.get(GET_MIN, minchn)?;
        let mut res = match self.get(GET_RES, minchn) {
            None => 1,
            Some(r) => {
                let (last_valid, mut r) = (r, r);
                while r > 1 && self.set(SET_RES, minchn, r / 2) {
                    r /= 2;
                }
                self.get(GET_RES, minchn).unwrap_or(last_valid)
            }
        };
        if res == 0 {
            res = 1;
        }
        if min + res < max {
            let Some(saved) = self.get(GET_CUR, minchn) else {
                return Some((min, max));
            };
            loop {
                let test = if saved < max {
                    saved + res
                } else {
                    saved - res
                };
                if !(min..=max).contains(&test) || !self.set_cur(minchn, test) {
                    break;
                }
                match self.get(GET_CUR, minchn) {
                    Some(check) if check == test => break,
                    Some(_) => res *= 2,
                    None => break,
                }
            }
            self.set_cur(minchn, saved);
        }
        Some((min, max))
    }

    /// The control's requests: its name (`name`, iFeature), its range
    /// (not for a switch), then each channel's current value the driver
    /// does not know yet (init_cur_mix_raw: one it cannot read is set to
    /// the minimum).
    fn build(&mut self, name: u8, switch: bool) {
        if name != 0 {
            self.ops.push(string(self.d, name));
        }
        let minchn = if self.cmask == 0 {
            0
        } else {
            self.cmask.trailing_zeros() as u8 + 1
        };
        let min = if switch {
            0
        } else {
            match self.min_max(minchn) {
                Some((min, _)) => min,
                None => 0,
            }
        };
        let channels: Vec<u8> = if self.cmask == 0 {
            vec![0]
        } else {
            (0..32)
                .filter(|i| self.cmask & 1 << i != 0)
                .map(|i| i + 1)
                .collect()
        };
        for ch in channels {
            if self.cached & 1 << ch == 0 && self.get(GET_CUR, ch).is_none() {
                self.set_cur(ch, min);
            }
        }
    }
}

/// snd-usb-audio's probe of control interface `alt` of `dev`, with the
/// streaming interfaces `claims` (sound/usb/card.c, stream.c, mixer.c):
/// the product and manufacturer strings for the card's names; each
/// streaming interface set to 0, to each of its settings with an endpoint
/// (the core then reads that setting's iInterface string,
/// usb_set_interface's sysfs files) and back to 0; then the mixer: each
/// UAC1 feature unit's mute and volume controls, the master channel's
/// and then those on the logical channels (build_feature_ctl; its other
/// controls are not modelled), reading the device through `ask`.
fn snd_usb_audio_probe(
    dev: &Device,
    d: DevId,
    alt: &AltDesc,
    claims: &[u8],
    ask: &mut Ask<'_>,
) -> Vec<Op> {
    let mut ops = vec![];
    for i in [dev.desc.dev.i_prod, dev.desc.dev.i_mfr] {
        if i != 0 {
            ops.push(string(d, i));
        }
    }
    for &num in claims {
        let settings: Vec<&AltDesc> = dev
            .desc
            .cfg
            .alts
            .iter()
            .filter(|a| a.num == num && a.alt != 0 && (a.class, a.sub) == (1, 2))
            .filter(|a| !a.eps.is_empty())
            .collect();
        if settings.is_empty() {
            continue;
        }
        ops.push(set_interface(d, num, 0));
        for a in settings {
            ops.push(set_interface(d, num, a.alt));
            if a.istr != 0 {
                ops.push(string(d, a.istr));
            }
        }
        ops.push(set_interface(d, num, 0));
    }
    // Feature units (UAC1: bLength, CS_INTERFACE, FEATURE_UNIT, bUnitID,
    // bSourceID, bControlSize, bmaControls of the master channel and each
    // logical channel, iFeature).
    let units = crate::usbcore::abi::descriptors(&alt.extra)
        .filter(|u| u[1] == 0x24 && u.len() >= 7 && u[2] == 0x06 && u[5] > 0);
    for u in units {
        let (unit, csize) = (u[3], u[5] as usize);
        let Some(channels) = (u.len() - 7)
            .checked_div(csize)
            .and_then(|n| n.checked_sub(1))
        else {
            continue;
        };
        let controls = |j: usize| -> u32 {
            u[6 + j * csize..6 + (j + 1) * csize]
                .iter()
                .rev()
                .fold(0, |acc, b| acc << 8 | *b as u32)
        };
        let name = u[u.len() - 1];
        let master = controls(0);
        // Mute (a switch, 1 byte) and volume (signed 16 bit).
        for (bit, switch, len, signed) in [(0u32, true, 1u16, false), (1, false, 2, true)] {
            let ch_bits = (0..channels)
                .filter(|j| controls(j + 1) & 1 << bit != 0)
                .fold(0u32, |m, j| m | 1 << j);
            let masks = [
                (ch_bits & 1 != 0).then_some(ch_bits),
                (master & 1 << bit != 0).then_some(0),
            ];
            for cmask in masks.into_iter().flatten() {
                MixerCtl {
                    d,
                    intf: alt.num,
                    unit,
                    selector: bit as u8 + 1,
                    cmask,
                    len,
                    signed,
                    cached: 0,
                    ops: &mut ops,
                    ask: &mut *ask,
                }
                .build(name, switch);
            }
        }
    }
    ops
}

/// A player opens the PCM of audio device `dev` (snd_usb_hw_params): its
/// streaming interface's setting with the endpoint (a sampling-frequency
/// control of the endpoint is not modelled: qemu's has none).
fn pcm_open(dev: &Device, d: DevId, claims: &[u8]) -> Vec<Op> {
    stream_setting(dev, claims)
        .map(|(a, _)| set_interface(d, a.num, a.alt))
        .into_iter()
        .collect()
}

/// UVC request codes (probe and commit controls, UVC 1.1 4.3.1.1).
const UVC_SET_CUR: u8 = 0x01;
const UVC_GET_CUR: u8 = 0x81;
const UVC_GET_DEF: u8 = 0x87;
/// The streaming interface's control selectors: probe, commit.
const VS_PROBE: u16 = 0x0100;
const VS_COMMIT: u16 = 0x0200;

/// uvcvideo starts a viewer's stream on the first streaming interface of
/// `claims` (control interface `alt`; drivers/media/usb/uvc/uvc_video.c):
/// the parameters it proposes (the probe control's default, which
/// uvc_video_init read at its probe with GET_DEF, asked of the device
/// here without going on the bus; bmHint: keep the frame interval) set
/// on the probe control, the device's choice read back, committed
/// (uvc_probe_video, uvc_commit_video); then the streaming setting whose
/// endpoint carries the payload size the device chose (the smallest that
/// does, else the largest: uvc_video_start_transfer).
fn uvc_stream_on(
    dev: &Device,
    d: DevId,
    claims: &[u8],
    alt: &AltDesc,
    ask: &mut Ask<'_>,
) -> Vec<Op> {
    let Some(&num) = claims.first() else {
        return vec![];
    };
    // The control block's length by the VC header's bcdUVC (UVC 1.0: 26,
    // 1.1: 34, 1.5: 48).
    let bcd = header(&alt.extra)
        .and_then(|h| h.get(3..5))
        .map(|b| u16::from_le_bytes([b[0], b[1]]))
        .unwrap_or(0x0100);
    let len: u16 = match bcd {
        0x0150.. => 48,
        0x0110.. => 34,
        _ => 26,
    };
    let vs = |req: u8, cs: u16| {
        setup(
            if req & 0x80 != 0 { 0xa1 } else { 0x21 },
            req,
            cs,
            num as u16,
            len,
        )
    };
    let Some(mut probe) = ask(&vs(UVC_GET_DEF, VS_PROBE), None) else {
        return vec![];
    };
    probe.resize(len as usize, 0);
    probe[0..2].copy_from_slice(&1u16.to_le_bytes());
    let set = vs(UVC_SET_CUR, VS_PROBE);
    let _ = ask(&set, Some(&probe));
    let get = vs(UVC_GET_CUR, VS_PROBE);
    let mut chosen = ask(&get, None).unwrap_or_else(|| probe.clone());
    chosen.resize(len as usize, 0);
    let commit = vs(UVC_SET_CUR, VS_COMMIT);
    let _ = ask(&commit, Some(&chosen));
    let payload = u32::from_le_bytes([chosen[22], chosen[23], chosen[24], chosen[25]]);
    let mut ops = vec![
        ctrl_out(d, set, probe),
        ctrl(d, get),
        ctrl_out(d, commit, chosen),
    ];
    // Each setting's endpoint bandwidth (wMaxPacketSize with its
    // additional transactions).
    let psize = |e: &EpDesc| (e.mps as u32 & 0x7ff) * (1 + ((e.mps as u32 >> 11) & 3));
    let settings: Vec<(u8, u32)> = dev
        .desc
        .cfg
        .alts
        .iter()
        .filter(|a| a.num == num)
        .filter_map(|a| {
            let e = a.eps.iter().find(|e| e.xfer_type() == 1 && e.dir_in())?;
            Some((a.alt, psize(e)))
        })
        .collect();
    let best = settings
        .iter()
        .filter(|(_, p)| *p >= payload)
        .min_by_key(|(_, p)| *p)
        .or_else(|| settings.iter().max_by_key(|(_, p)| *p));
    if let Some((a, _)) = best {
        ops.push(set_interface(d, num, *a));
    }
    ops
}
