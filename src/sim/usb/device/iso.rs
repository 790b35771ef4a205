//! Isochronous devices: qemu's usb-audio (a USB audio class 1 speaker,
//! an OUT stream) and a Logitech C270 webcam (UVC, an IN stream): their
//! descriptors, class requests and set-up (sound/usb, drivers/media/usb/uvc),
//! and the stream of isochronous URBs.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbmon::event::{IsoDesc, URB_ISO_ASAP};

use super::super::ctx::*;
use super::super::descriptors::{self, AltDesc, ClassDesc, EpDesc, IadDesc, Speed, Where};
use super::class::DeviceClass;

/// `kind: audio`: qemu's usb-audio as snd-usb-audio sees it (its
/// descriptors, strings and answers read from qemu 7.2's device in
/// kernel-vm): a full-speed USB audio class 1 speaker, a USB streaming
/// input terminal (ID 1), a feature unit (ID 2: mute on the master
/// channel, volume on channels 1 and 2), a speaker output terminal (ID 3),
/// and a 48 kHz 16-bit stereo stream on a synchronous isochronous OUT
/// endpoint without a sampling-frequency control.
pub(super) struct Audio;

/// The feature unit's entity ID.
const FEATURE_UNIT: u8 = 2;
/// The feature unit's name (iFeature) and the stream setting's (the
/// iInterface of interface 1's setting 1), string indexes.
const I_FEATURE: u8 = 7;
const I_STREAM: u8 = 10;
/// UAC1 control selectors of the feature unit: mute, volume.
const MUTE: u8 = 1;
const VOLUME: u8 = 2;
/// UAC1 request codes.
const SET_CUR: u8 = 0x01;
const SET_RES: u8 = 0x04;
const GET_CUR: u8 = 0x81;
const GET_MIN: u8 = 0x82;
const GET_MAX: u8 = 0x83;
const GET_RES: u8 = 0x84;
/// The volume control's range and resolution (1/256 dB) as the device
/// reports them: GET_MIN 0x8001, GET_MAX 0x0800, GET_RES 0x0088.
const VOL_MIN: i32 = -0x7fff;
const VOL_MAX: i32 = 0x0800;
const VOL_RES: i32 = 0x0088;

/// A control request's answer: its status and IN data.
type Answer = (i32, Option<Vec<u8>>);

/// What the device keeps of its feature unit: the mute switch and each
/// channel's volume as one of 256 levels evenly spaced from `VOL_MIN` to
/// `VOL_MAX`, SET_CUR taking the nearest. The levels model what
/// snd-usb-audio's probe read from the device in kernel-vm: a SET_CUR of
/// 0x0088, 0x0110, 0x0220, 0x0440 read back 0x0089, 0x0111, 0x0222,
/// 0x0444, and 0 read back 0 (level 240, where the device starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Mixer {
    mute: u8,
    level: [u8; 2],
}

impl Default for Mixer {
    fn default() -> Self {
        Mixer {
            mute: 0,
            level: [Mixer::level_of(0); 2],
        }
    }
}

impl Mixer {
    /// The level nearest to the volume `v`.
    fn level_of(v: i32) -> u8 {
        let span = VOL_MAX - VOL_MIN;
        let n = ((v.clamp(VOL_MIN, VOL_MAX) - VOL_MIN) * 255 * 2 + span) / (2 * span);
        n as u8
    }

    /// The volume of `level`, as GET_CUR reads it.
    fn volume(level: u8) -> i32 {
        let span = VOL_MAX - VOL_MIN;
        VOL_MIN + (level as i32 * span * 2 + 255) / (2 * 255)
    }

    /// The mixer of `dev` (the initial one until a SET_CUR changed it).
    fn of(dev: &Device) -> Mixer {
        dev.class_state
            .as_ref()
            .and_then(|s| s.downcast_ref::<Mixer>())
            .copied()
            .unwrap_or_default()
    }

    /// Keep `self` as the mixer of `dev`.
    fn store(self, dev: &mut Device) {
        dev.class_state = Some(Box::new(self));
    }

    /// The answer to the feature unit request `req` for `selector` and
    /// `channel` with OUT data `out`: (status, IN data) and the mixer
    /// after it; None: the device stalls it (other controls, channels and
    /// requests, SET_RES, a short SET_CUR).
    fn request(
        self,
        req: u8,
        selector: u8,
        channel: u8,
        out: Option<&[u8]>,
    ) -> Option<(Answer, Mixer)> {
        let mut m = self;
        let answer = |v: i32| Some(vec![v as u16 as u8, (v as u16 >> 8) as u8]);
        let data = match (selector, channel, req) {
            (MUTE, 0, GET_CUR) => Some(vec![m.mute]),
            (MUTE, 0, SET_CUR) => {
                m.mute = *out?.first()?;
                None
            }
            (VOLUME, 1 | 2, GET_CUR) => answer(Mixer::volume(m.level[channel as usize - 1])),
            (VOLUME, 1 | 2, GET_MIN) => answer(VOL_MIN),
            (VOLUME, 1 | 2, GET_MAX) => answer(VOL_MAX),
            (VOLUME, 1 | 2, GET_RES) => answer(VOL_RES),
            (VOLUME, 1 | 2, SET_CUR) => {
                let b = out.filter(|b| b.len() >= 2)?;
                let v = i16::from_le_bytes([b[0], b[1]]) as i32;
                m.level[channel as usize - 1] = Mixer::level_of(v);
                None
            }
            _ => return None,
        };
        Some(((0, data), m))
    }
}

impl DeviceClass for Audio {
    fn qemu_control(&self) -> bool {
        true // qemu's device
    }
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::Audio]
    }

    fn natural_speed(&self, _kind: DeviceKind) -> Speed {
        Speed::Full
    }

    fn default_interval_ms(&self, _kind: DeviceKind) -> u32 {
        1
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let interval = at.interval(self.default_interval_ms(DeviceKind::Audio));
        // Audio control (bInterfaceProtocol 0x04, which UAC1 does not
        // define: snd-usb-audio logs "unknown interface protocol 0x4,
        // assuming v1"): the header, the USB streaming input terminal
        // (2 channels, left and right front), the feature unit (mute on
        // the master channel, volume on channels 1 and 2), the speaker.
        #[rustfmt::skip]
        let ac = vec![
            9, 0x24, 0x01, 0x00, 0x01, 43, 0x00, 0x01, 0x01, // header, 1 streaming iface
            12, 0x24, 0x02, 0x01, 0x01, 0x01, 0x00, 0x02, 0x03, 0x00, 0x00,
            0x06, // input terminal 1, iTerminal 6
            13, 0x24, 0x06, FEATURE_UNIT, 0x01, 0x02, 0x01, 0x00, 0x02, 0x00, 0x02, 0x00,
            I_FEATURE, // feature unit 2 (source 1), iFeature 7
            9, 0x24, 0x03, 0x03, 0x01, 0x03, 0x00, FEATURE_UNIT,
            0x08, // output terminal 3: speaker (source 2), iTerminal 8
        ];
        let as_general = vec![
            7, 0x24, 0x01, 0x01, 0x00, 0x01, 0x00, // AS general: terminal 1, no delay, PCM
            11, 0x24, 0x02, 0x01, 0x02, 0x02, 0x10, 0x01, 0x80, 0xbb,
            0x00, // type I, 2ch, 16 bit, 48 kHz
        ];
        // Synchronous; the class-specific endpoint descriptor has no
        // sampling-frequency control.
        let mut ep = EpDesc::new(0x01, 0x0d, 192, interval.min(16));
        ep.audio = true;
        ep.extra = vec![7, 0x25, 0x01, 0x00, 0x00, 0x00, 0x00];
        let alts = vec![
            AltDesc {
                num: 0,
                alt: 0,
                class: 1,
                sub: 1,
                proto: 0x04,
                istr: 5,
                extra: ac,
                eps: vec![],
            },
            AltDesc {
                num: 1,
                alt: 0,
                class: 1,
                sub: 2,
                proto: 0,
                istr: 9,
                extra: vec![],
                eps: vec![],
            },
            AltDesc {
                num: 1,
                alt: 1,
                class: 1,
                sub: 2,
                proto: 0,
                istr: I_STREAM,
                extra: as_general,
                eps: vec![ep],
            },
        ];
        Some(ClassDesc {
            ids: (0x46f4, 0x0002, 0x0000),
            mps0: 64,
            attr: 0xc0,
            power: 50,
            mfr: Some("QEMU".to_string()),
            prod: Some("QEMU USB Audio".to_string()),
            ser: Some(format!("1-{}-{}", at.pci(), at.path_s())),
            strings: Some((1, 2, 3, 4, "Audio Configuration")),
            other_strings: AUDIO_STRINGS.to_vec(),
            alts,
            bcd_usb: Some(0x0100),
            ..ClassDesc::default()
        })
    }

    // The feature unit's controls (interface 0, entity 2); everything
    // else, the endpoint's requests too, stalls.
    fn ep0(
        &self,
        ctx: &mut Ctx,
        d: DevId,
        s: &[u8; 8],
        out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        let (selector, channel) = (s[3], s[2]);
        if !matches!(s[0], 0x21 | 0xa1) || (s[4], s[5]) != (0, FEATURE_UNIT) {
            return None;
        }
        let dev = ctx.dev_mut(d)?;
        let (answer, mixer) = Mixer::of(dev).request(s[1], selector, channel, out)?;
        mixer.store(dev);
        Some(answer)
    }

    fn class_ops(&self, dev: &Device, d: DevId) -> Vec<Op> {
        let mut ops = probe_ops(dev, d);
        if player(dev) {
            // A player opens the PCM: the stream's setting (the endpoint
            // has no sampling-frequency control, so no SET_CUR of it),
            // then the stream.
            ops.push(ctrl(d, setup(0x01, 0x0b, 1, 1, 0)));
        }
        ops.push(Op::StartStreams(d));
        ops
    }

    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        if ctx.dev(d).is_some_and(player) {
            start_stream(ctx, d, at);
        }
    }
}

/// qemu's usb-audio's strings besides manufacturer, product, serial number
/// and configuration: the interfaces' (5, 9, 10) and the terminals' and
/// the feature unit's (6, 8, 7).
const AUDIO_STRINGS: [(u8, &str); 6] = [
    (5, "Audio Device"),
    (6, "Audio Output Pipe"),
    (7, "Audio Output Volume Control"),
    (8, "Audio Output Terminal"),
    (9, "Audio Output - Disabled"),
    (10, "Audio Output - 48 kHz Stereo"),
];

/// Whether a player streams to audio device `dev` once snd-usb-audio has
/// probed it.
fn player(dev: &Device) -> bool {
    dev.cfg.as_ref().is_none_or(|c| c.player.unwrap_or(true))
}

/// snd-usb-audio's probe of the audio device `dev` (sound/usb/card.c,
/// stream.c, mixer.c), as the 6.12 kernel made it in kernel-vm: the
/// product and manufacturer strings for the card's names; the streaming
/// interface set to 0, to its setting 1 (the core reads that setting's
/// string) and back to 0; then the mixer: the feature unit's name and its
/// master mute, its name again and the volume of channel 1 (maximum,
/// minimum, resolution; SET_RES of half the resolution, which the device
/// stalls and the driver tries 10 times; the resolution again, then the
/// check of it: the current value, and SET_CUR and GET_CUR of it plus the
/// resolution, doubled until a value reads back as set or leaves the
/// range; the saved value set back), and the current volume of channel 2.
fn probe_ops(dev: &Device, d: DevId) -> Vec<Op> {
    let string = |i: u16| ctrl(d, setup(0x80, 0x06, 0x0300 | i, 0x0409, 255));
    let fu = (FEATURE_UNIT as u16) << 8;
    let get = |req: u8, cs: u8, ch: u8, len: u16| {
        ctrl(d, setup(0xa1, req, (cs as u16) << 8 | ch as u16, fu, len))
    };
    let set = |req: u8, ch: u8, v: i32| Op::Ctrl {
        target: d,
        setup: setup(0x21, req, (VOLUME as u16) << 8 | ch as u16, fu, 2),
        out: Some(Arc::from((v as u16).to_le_bytes().to_vec())),
        tag: None,
    };
    let (i_prod, i_mfr) = (dev.desc.dev.i_prod, dev.desc.dev.i_mfr);
    let mut ops = vec![];
    for i in [i_prod, i_mfr] {
        if i != 0 {
            ops.push(string(i as u16));
        }
    }
    ops.extend([
        ctrl(d, setup(0x01, 0x0b, 0, 1, 0)),
        ctrl(d, setup(0x01, 0x0b, 1, 1, 0)),
        string(I_STREAM as u16),
        ctrl(d, setup(0x01, 0x0b, 0, 1, 0)),
        string(I_FEATURE as u16),
        get(GET_CUR, MUTE, 0, 1),
        string(I_FEATURE as u16),
        get(GET_MAX, VOLUME, 1, 2),
        get(GET_MIN, VOLUME, 1, 2),
        get(GET_RES, VOLUME, 1, 2),
    ]);
    // The device stalls SET_RES: snd_usb_mixer_set_ctl_value tries 10
    // times, then the driver keeps the resolution it read.
    ops.extend((0..10).map(|_| set(SET_RES, 1, VOL_RES / 2)));
    ops.push(get(GET_RES, VOLUME, 1, 2));
    ops.push(get(GET_CUR, VOLUME, 1, 2));
    // The resolution check, against what the device will read back.
    let mixer = Mixer::of(dev);
    let saved = Mixer::volume(mixer.level[0]);
    let mut res = VOL_RES;
    if VOL_MIN + res < VOL_MAX {
        loop {
            let test = if saved < VOL_MAX {
                saved + res
            } else {
                saved - res
            };
            if !(VOL_MIN..=VOL_MAX).contains(&test) {
                break;
            }
            ops.push(set(SET_CUR, 1, test));
            ops.push(get(GET_CUR, VOLUME, 1, 2));
            if Mixer::volume(Mixer::level_of(test)) == test {
                break;
            }
            res *= 2;
        }
        ops.push(set(SET_CUR, 1, saved));
    }
    ops.push(get(GET_CUR, VOLUME, 2, 2));
    ops
}

/// `kind: webcam`.
pub(super) struct Webcam;

impl DeviceClass for Webcam {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::Webcam]
    }

    fn default_interval_ms(&self, _kind: DeviceKind) -> u32 {
        1
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let hs = at.hs();
        let interval = at.interval(self.default_interval_ms(DeviceKind::Webcam));
        let vc = vec![
            13, 0x24, 0x01, 0x00, 0x01, 0x26, 0x00, 0x80, 0x8d, 0x5b, 0x00, 0x01,
            0x01, // VC header
            18, 0x24, 0x02, 0x01, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x03,
            0x00, 0x00, 0x00, // camera terminal
            9, 0x24, 0x03, 0x02, 0x01, 0x01, 0x00, 0x01, 0x00, // output terminal
        ];
        let vs = vec![
            14, 0x24, 0x01, 0x01, 0x4d, 0x00, 0x81, 0x00, 0x02, 0x00, 0x00, 0x00, 0x01,
            0x00, // input header
        ];
        let (mps, ival) = if hs {
            (
                1024,
                (interval as u32 * 8).next_power_of_two().trailing_zeros() as u8 + 1,
            )
        } else {
            (1023, 1)
        };
        let alts = vec![
            AltDesc {
                num: 0,
                alt: 0,
                class: 0x0e,
                sub: 1,
                proto: 0,
                istr: 0,
                extra: vc,
                eps: vec![],
            },
            AltDesc {
                num: 1,
                alt: 0,
                class: 0x0e,
                sub: 2,
                proto: 0,
                istr: 0,
                extra: vs,
                eps: vec![],
            },
            AltDesc {
                num: 1,
                alt: 1,
                class: 0x0e,
                sub: 2,
                proto: 0,
                istr: 0,
                extra: vec![],
                eps: vec![EpDesc::new(0x81, 0x05, mps, ival)],
            },
        ];
        Some(ClassDesc {
            ids: (0x046d, 0x0825, 0x0012),
            class: (0xef, 2, 1),
            mps0: 64,
            attr: 0x80,
            power: 250,
            prod: Some("C270 HD WEBCAM".to_string()),
            ser: Some(format!("{:08X}", at.salt as u32)),
            iads: vec![IadDesc {
                first: 0,
                count: 2,
                class: 0x0e,
                sub: 3,
                proto: 0,
            }],
            alts,
            // A USB 2.0 device even on a full-speed port.
            bcd_usb: Some(0x0200),
            ..ClassDesc::default()
        })
    }

    // The streaming interface's probe and commit controls (UVC 1.1 4.3.1.1:
    // both take SET_CUR and the GET requests; commit only SET_CUR and
    // GET_CUR, GET_INFO, GET_LEN). Other selectors and entities stall, as
    // a camera's unsupported controls do.
    fn ep0(
        &self,
        _ctx: &mut Ctx,
        _d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        let (selector, intf) = (s[3], s[4]);
        let probe = match (selector, intf, s[5]) {
            (1, 1, 0) => true,
            (2, 1, 0) => false,
            _ => return None,
        };
        match (s[0], s[1]) {
            (0x21, 0x01) => Some((0, None)),
            (0xa1, 0x81) => Some((0, Some(uvc_probe()))),
            (0xa1, 0x82..=0x84 | 0x87) if probe => Some((0, Some(uvc_probe()))),
            // GET_INFO: supports GET and SET; GET_LEN: the block's length.
            (0xa1, 0x86) => Some((0, Some(vec![0x03]))),
            (0xa1, 0x85) => Some((0, Some(vec![26, 0]))),
            _ => None,
        }
    }

    fn class_ops(&self, _dev: &Device, d: DevId) -> Vec<Op> {
        let ctrl_out = |s: [u8; 8]| Op::Ctrl {
            target: d,
            setup: s,
            out: Some(Arc::from(uvc_probe())),
            tag: None,
        };
        vec![
            ctrl_out(setup(0x21, 0x01, 0x0100, 1, 26)),
            ctrl(d, setup(0xa1, 0x81, 0x0100, 1, 26)),
            ctrl_out(setup(0x21, 0x01, 0x0200, 1, 26)),
            ctrl(d, setup(0x01, 0x0b, 1, 1, 0)),
            Op::StartStreams(d),
        ]
    }

    fn start(&self, ctx: &mut Ctx, d: DevId, _now: u64, at: u64) {
        start_stream(ctx, d, at);
    }
}

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

/// Start device `d`'s stream at `at`.
fn start_stream(ctx: &mut Ctx, d: DevId, at: u64) {
    if let Some(t) = IsoTask::new(ctx, d, at) {
        ctx.spawn(at, Box::new(t));
    }
}

struct Slot {
    tag: u64,
    due: u64,
    start: u64,
    outcome: Outcome,
    out: Option<Arc<[u8]>>,
}

/// An isochronous stream: audio OUT or video IN, several URBs queued,
/// each resubmitted as soon as it completes, until the driver is unbound
/// from the control interface or from the streaming one.
struct IsoTask {
    dev: DevId,
    /// The driver's bindings of the control interface and the streaming
    /// interface when the stream began.
    owners: [Option<Owner>; 2],
    urb: Urb,
    npk: u32,
    pkt_len: u32,
    pkt_ns: u64,
    slots: Vec<Slot>,
    inited: usize,
    queue: VecDeque<usize>,
    resubmit: Option<usize>,
    next_start: u64,
    video: bool,
    sample: u32,
    fid: u8,
    remaining: u32,
    next_frame: u64,
    frame_first: bool,
    pts: u32,
}

impl IsoTask {
    fn new(ctx: &mut Ctx, d: DevId, at: u64) -> Option<IsoTask> {
        let dev = ctx.dev(d)?;
        let video = dev.kind == Kind::Dev(DeviceKind::Webcam);
        let addr = if video { 0x81 } else { 0x01 };
        let ep = dev.desc.cfg.endpoint(addr)?.clone();
        let speed = dev.speed();
        let (npk, nurbs) = if video { (32, 3) } else { (4, 2) };
        let pkt_len = ep.mps as u32 & 0x7ff;
        let pkt_ns = descriptors::urb_interval(speed, &ep).max(1) as u64
            * descriptors::interval_unit_ns(speed);
        let size = iso_urb_size(npk);
        let slots = (0..nurbs)
            .map(|_| Slot {
                tag: ctx.tags.alloc(&mut ctx.rng, size),
                due: 0,
                start: 0,
                outcome: Outcome::Ok,
                out: None,
            })
            .collect();
        let flags = URB_ISO_ASAP | URB_NO_TRANSFER_DMA_MAP;
        let mut urb = ctx.data_urb(d, addr, npk * pkt_len, flags, 0);
        urb.npk = npk;
        let owners = [ctx.interface_owner(d, 0), ctx.owner(d, addr)];
        Some(IsoTask {
            dev: d,
            owners,
            urb,
            npk,
            pkt_len,
            pkt_ns,
            slots,
            inited: 0,
            queue: VecDeque::new(),
            resubmit: None,
            next_start: at + MS,
            video,
            sample: 0,
            fid: 0,
            remaining: 0,
            next_frame: at + MS,
            frame_first: false,
            pts: 0,
        })
    }

    fn audio_buffer(&mut self) -> Vec<u8> {
        let n = (self.npk * self.pkt_len) as usize;
        let mut v = Vec::with_capacity(n);
        while v.len() + 4 <= n {
            // A 250 Hz triangle wave, both channels.
            let ph = (self.sample % 192) as i32;
            let s = ((if ph < 96 { ph } else { 192 - ph }) - 48) * 600;
            let b = (s as i16).to_le_bytes();
            v.extend_from_slice(&[b[0], b[1], b[0], b[1]]);
            self.sample = self.sample.wrapping_add(1);
        }
        v.resize(n, 0);
        v
    }

    fn video_buffer(&mut self, ctx: &mut Ctx, start: u64) -> (Vec<u8>, Vec<u32>) {
        let pl = self.pkt_len as usize;
        let mut buf = vec![0u8; self.npk as usize * pl];
        let mut lens = Vec::with_capacity(self.npk as usize);
        for i in 0..self.npk as usize {
            let t = start + i as u64 * self.pkt_ns;
            if self.remaining == 0 && t >= self.next_frame {
                self.fid ^= 1;
                self.remaining = ctx.rng.range(12_000, 30_000) as u32;
                self.next_frame += 33_333_333;
                self.pts = self.pts.wrapping_add(1_000_000);
                self.frame_first = true;
            }
            let pkt = &mut buf[i * pl..(i + 1) * pl];
            let len = if self.remaining > 0 {
                let n = (self.remaining as usize).min(pl - 12);
                self.remaining -= n as u32;
                let eof = self.remaining == 0;
                pkt[0] = 12;
                pkt[1] = 0x8c | self.fid | if eof { 0x02 } else { 0 };
                pkt[2..6].copy_from_slice(&self.pts.to_le_bytes());
                let stc = ((t / 1000) as u32).wrapping_mul(48);
                pkt[6..10].copy_from_slice(&stc.to_le_bytes());
                pkt[10..12].copy_from_slice(&(((t / MS) & 0x7ff) as u16).to_le_bytes());
                ctx.rng.fill(&mut pkt[12..12 + n]);
                if self.frame_first {
                    pkt[12..16].copy_from_slice(&[0xff, 0xd8, 0xff, 0xdb]);
                    self.frame_first = false;
                }
                if eof {
                    pkt[12 + n - 2] = 0xff;
                    pkt[12 + n - 1] = 0xd9;
                }
                12 + n
            } else if ctx.rng.chance(0.5) {
                pkt[0] = 12;
                pkt[1] = 0x80 | self.fid;
                12
            } else {
                0
            };
            lens.push(len as u32);
        }
        (buf, lens)
    }

    fn submit(&mut self, ctx: &mut Ctx, idx: usize, now: u64) {
        let dur = self.npk as u64 * self.pkt_ns;
        let start = self.next_start.max(now + self.pkt_ns);
        self.next_start = start + dur;
        let mut urb = self.urb;
        urb.tag = self.slots[idx].tag;
        urb.sched_frame = ctx.start_frame(self.dev, start);
        let iso = iso_packets(self.npk, self.pkt_len, self.pkt_len);
        let sample = self.sample;
        let out = (!self.video).then(|| Arc::from(self.audio_buffer()));
        let placed = ctx.submit_urb(self.dev, &mut urb, out.clone(), iso, Place::Given, now);
        let (outcome, out) = match placed {
            Ok((o, _)) => (o, out),
            // The submission fails (its samples were not sent); the slot is
            // retried when its turn would have ended.
            Err(_) => {
                self.sample = sample;
                (Outcome::SubmitError, None)
            }
        };
        let s = &mut self.slots[idx];
        s.outcome = outcome;
        s.start = start;
        s.due = start + dur + ctx.rng.range(0, 60 * US);
        s.out = out;
        self.queue.push_back(idx);
    }

    fn complete(&mut self, ctx: &mut Ctx, idx: usize, now: u64) {
        let (tag, start, outcome) = {
            let s = &self.slots[idx];
            (s.tag, s.start, s.outcome)
        };
        let frame = ctx.start_frame(self.dev, start);
        let pl = self.pkt_len;
        match outcome {
            Outcome::SubmitError => {}
            Outcome::Unlink => {
                let iso = iso_packets(self.npk, pl, 0);
                ctx.complete(self.dev, tag, now, ENOENT, 0, None, iso, frame, 0);
            }
            Outcome::Ok | Outcome::Proto(_) | Outcome::Stall => {
                let (data, mut lens) = if self.video {
                    let (b, l) = self.video_buffer(ctx, start);
                    (Some(Arc::from(b)), l)
                } else {
                    (self.slots[idx].out.take(), vec![pl; self.npk as usize])
                };
                let bad = if let Outcome::Proto(st) = outcome {
                    let b = ctx.rng.below(self.npk as u64) as usize;
                    lens[b] = 0;
                    Some((b, st))
                } else {
                    None
                };
                let iso: Vec<IsoDesc> = lens
                    .iter()
                    .enumerate()
                    .map(|(i, &l)| IsoDesc {
                        status: match bad {
                            Some((b, st)) if b == i => st,
                            _ => 0,
                        },
                        offset: i as u32 * pl,
                        length: l,
                    })
                    .collect();
                let actual = lens.iter().sum();
                let errs = i32::from(bad.is_some());
                ctx.complete(self.dev, tag, now, 0, actual, data, iso, frame, errs);
            }
        }
    }
}

impl Task for IsoTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        // Unbound from either interface: the driver's disconnect (or the
        // core's, for the streaming interface) ended the URBs
        // (`driver::disconnect`), and the stream is over: the program
        // that played or watched it got an error and let go.
        if self.owners.iter().any(|o| ctx.unbound(self.dev, *o)) {
            let size = iso_urb_size(self.npk);
            for s in &self.slots {
                ctx.tags.free(s.tag, size);
            }
            return None;
        }
        if self.inited < self.slots.len() {
            let i = self.inited;
            self.inited += 1;
            self.submit(ctx, i, now);
            if self.inited < self.slots.len() {
                return Some(now + ctx.rng.range(3 * US, 12 * US));
            }
        } else if let Some(i) = self.resubmit.take() {
            self.submit(ctx, i, now);
        } else {
            let i = self.queue.pop_front()?;
            self.complete(ctx, i, now);
            self.resubmit = Some(i);
            return Some(now + ctx.rng.range(5 * US, 40 * US));
        }
        let front = *self.queue.front()?;
        Some(self.slots[front].due.max(now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The feature unit answers as qemu's did to snd-usb-audio's probe in
    /// kernel-vm: the volume's range and resolution, the values SET_CUR
    /// leaves (read back by GET_CUR), a stalled SET_RES, the mute switch.
    #[test]
    fn mixer_answers_as_qemu() {
        let m = Mixer::default();
        let get = |m: Mixer, req, cs, ch| m.request(req, cs, ch, None).map(|(a, _)| a);
        assert_eq!(get(m, GET_CUR, MUTE, 0), Some((0, Some(vec![0]))));
        assert_eq!(
            get(m, GET_MAX, VOLUME, 1),
            Some((0, Some(vec![0x00, 0x08])))
        );
        assert_eq!(
            get(m, GET_MIN, VOLUME, 1),
            Some((0, Some(vec![0x01, 0x80])))
        );
        assert_eq!(
            get(m, GET_RES, VOLUME, 2),
            Some((0, Some(vec![0x88, 0x00])))
        );
        assert_eq!(get(m, GET_CUR, VOLUME, 2), Some((0, Some(vec![0, 0]))));
        assert_eq!(m.request(SET_RES, VOLUME, 1, Some(&[0x44, 0])), None);
        assert_eq!(get(m, GET_MIN, MUTE, 0), None);
        assert_eq!(get(m, GET_CUR, VOLUME, 0), None);
        assert_eq!(get(m, GET_CUR, VOLUME, 3), None);
        for (set, back) in [
            (0x0088u16, 0x0089u16),
            (0x0110, 0x0111),
            (0x0220, 0x0222),
            (0x0440, 0x0444),
            (0x0000, 0x0000),
            (0x0800, 0x0800),
            (0x8001, 0x8001),
            (0x8000, 0x8001),
        ] {
            let (a, m2) = m
                .request(SET_CUR, VOLUME, 1, Some(&set.to_le_bytes()))
                .unwrap();
            assert_eq!(a, (0, None));
            assert_eq!(
                get(m2, GET_CUR, VOLUME, 1),
                Some((0, Some(back.to_le_bytes().to_vec()))),
                "{set:#06x}"
            );
            assert_eq!(get(m2, GET_CUR, VOLUME, 2), Some((0, Some(vec![0, 0]))));
        }
        let (_, m2) = m.request(SET_CUR, MUTE, 0, Some(&[1])).unwrap();
        assert_eq!(get(m2, GET_CUR, MUTE, 0), Some((0, Some(vec![1]))));
    }
}
