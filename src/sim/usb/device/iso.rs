//! Isochronous devices: qemu's usb-audio (a USB audio class 1 speaker,
//! an OUT stream) and a Logitech C270 webcam (UVC, an IN stream): their
//! descriptors, their answers to the class requests (the audio device's
//! feature unit, the webcam's probe and commit controls) and the webcam's
//! frames, what its isochronous IN packets carry (its function). Their
//! drivers' probes and streams are snd-usb-audio's and uvcvideo's
//! (`driver::audio`).

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::uac1::*;
use super::super::descriptors::{AltDesc, ClassDesc, EpDesc, IadDesc, Speed, Where};
use super::super::driver::Ask;
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
            // The resolution is fixed: SET_RES stalls.
            (VOLUME, 1 | 2, SET_RES) => return None,
            _ => return None,
        };
        Some(((0, data), m))
    }
}

/// The feature unit's answer to request `s` with OUT data `out` given the
/// mixer `m`: (status, IN data) and the mixer after it; None: the device
/// stalls it (another entity or interface, the endpoint's requests).
fn feature_unit(m: Mixer, s: &[u8; 8], out: Option<&[u8]>) -> Option<(Answer, Mixer)> {
    let (selector, channel) = (s[3], s[2]);
    if !matches!(s[0], 0x21 | 0xa1) || (s[4], s[5]) != (0, FEATURE_UNIT) {
        return None;
    }
    m.request(s[1], selector, channel, out)
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
        let dev = ctx.dev_mut(d)?;
        let (answer, mixer) = feature_unit(Mixer::of(dev), s, out)?;
        mixer.store(dev);
        Some(answer)
    }

    // snd-usb-audio's probe reads the feature unit as the device answers
    // (a copy of its mixer: the requests then change the device's own as
    // they go out).
    fn answers(&self, dev: &Device) -> Box<Ask<'static>> {
        let mut mixer = Mixer::of(dev);
        Box::new(move |s: &[u8; 8], out: Option<&[u8]>| {
            let ((_, data), m) = feature_unit(mixer, s, out)?;
            mixer = m;
            Some(data.unwrap_or_default())
        })
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

    // The streaming interface's probe and commit controls.
    fn ep0(
        &self,
        _ctx: &mut Ctx,
        _d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        vs_control(s)
    }

    // uvcvideo's viewer reads the probe and commit controls as it goes.
    fn answers(&self, _dev: &Device) -> Box<Ask<'static>> {
        Box::new(|s: &[u8; 8], _out: Option<&[u8]>| {
            let (_, data) = vs_control(s)?;
            Some(data.unwrap_or_default())
        })
    }

    // Its frames, from a moment after uvcvideo's stream starts.
    fn function(&self, _ctx: &mut Ctx, _d: DevId, at: u64) -> Option<Box<dyn InFunction>> {
        Some(Box::new(Frames {
            fid: 0,
            remaining: 0,
            next_frame: at + MS,
            frame_first: false,
            pts: 0,
        }))
    }
}

/// The streaming interface's probe and commit controls' answers to `s`
/// (UVC 1.1 4.3.1.1: both take SET_CUR and the GET requests; commit only
/// SET_CUR and GET_CUR, GET_INFO, GET_LEN). Other selectors and entities
/// stall (None), as a camera's unsupported controls do.
fn vs_control(s: &[u8; 8]) -> Option<Answer> {
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

/// The webcam's frames (MJPEG at 30 fps, each 12 000 to 30 000 bytes of
/// payload) as its isochronous IN packets carry them: UVC payload headers
/// (frame ID, end of frame, presentation time and source clock), a frame's
/// data split over the packets, and between frames header-only or empty
/// packets.
struct Frames {
    /// The frame ID bit, toggled at each frame.
    fid: u8,
    /// Bytes of the current frame still to send.
    remaining: u32,
    /// When the next frame begins.
    next_frame: u64,
    /// The current frame's first packet is next (its JPEG SOI marker).
    frame_first: bool,
    /// The presentation time of the current frame.
    pts: u32,
}

impl InFunction for Frames {
    fn iso(
        &mut self,
        ctx: &mut Ctx,
        start: u64,
        npk: u32,
        len: u32,
        pkt_ns: u64,
    ) -> Option<(Vec<u8>, Vec<u32>)> {
        let pl = len as usize;
        let mut buf = vec![0u8; npk as usize * pl];
        let mut lens = Vec::with_capacity(npk as usize);
        for i in 0..npk as usize {
            let t = start + i as u64 * pkt_ns;
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
        Some((buf, lens))
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
