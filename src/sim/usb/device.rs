//! Device models: what each device answers on ep0, and the class drivers'
//! data streams (HID interrupt polling, bulk-only mass storage, isochronous
//! audio and video, a bulk flood for benchmarks).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbmon::event::{IsoDesc, XferType, URB_DIR_IN, URB_ISO_ASAP, URB_SHORT_NOT_OK};

use super::bus::{
    iso_urb_size, setup, Ctx, DevId, Kind, Op, Outcome, Runner, Urb, ENODEV, ENOENT, EPIPE, EPROTO,
    EXDEV, URB_NO_TRANSFER_DMA_MAP, URB_SIZE,
};
use super::descriptors;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

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

fn clear_halt(dev: DevId, ep: u8, tag: u64) -> Op {
    Op::Ctrl {
        target: dev,
        setup: setup(0x02, 0x01, 0, ep as u16, 0),
        out: None,
        tag: Some(tag),
    }
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
                let d = match value >> 8 {
                    1 => Some(dev.desc.dev.bytes().to_vec()),
                    2 => Some(dev.desc.cfg.bytes()),
                    3 => dev.desc.string(value as u8),
                    _ => None,
                };
                match d {
                    Some(d) => (0, Some(d)),
                    None => stall,
                }
            }
            (0x80, 0x00) => (0, Some(vec![u8::from(is_hub), 0])),
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
        }
    }

    fn data_urb(&self, d: DevId, addr: u8, len: u32, flags: u32, tag: u64) -> Urb {
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

/// Runs the driver's pending control requests (clear-halt and the like).
/// Returns Some(next) while they run; None once there is nothing to do.
fn run_recovery(runner: &mut Runner, ctx: &mut Ctx, tag: u64, now: u64) -> Option<u64> {
    if !runner.busy() {
        return None;
    }
    let mut t = tag;
    match runner.step(ctx, None, &mut t, now) {
        Some(next) => Some(next),
        None => Some(now + ctx.gap()),
    }
}

const TEXT: &[u8] = b"hello from monfs usbmon\n";

fn hid_usage(c: u8) -> u8 {
    match c {
        b'a'..=b'z' => 4 + (c - b'a'),
        b'1'..=b'9' => 0x1e + (c - b'1'),
        b'0' => 0x27,
        b'\n' => 0x28,
        b' ' => 0x2c,
        b'.' => 0x37,
        _ => 0x2c,
    }
}

/// usbhid's interrupt IN polling: the URB stays submitted and completes when
/// there is input.
pub(crate) struct HidTask {
    dev: DevId,
    kbd: bool,
    /// The absolute pointer: its position (0..=0x7fff each way).
    tablet: Option<(u16, u16)>,
    urb: Urb,
    unit: u64,
    submitted_at: u64,
    waiting: bool,
    outcome: Outcome,
    next_input: u64,
    pressed: bool,
    pos: usize,
    burst: u32,
    click: u8,
    runner: Runner,
    class_tag: u64,
}

impl HidTask {
    pub(crate) fn new(ctx: &mut Ctx, d: DevId, at: u64) -> Option<HidTask> {
        let dev = ctx.dev(d)?;
        let kbd = dev.kind == Kind::Dev(DeviceKind::HidKeyboard);
        let tablet = (dev.kind == Kind::Dev(DeviceKind::HidTablet)).then_some((0x4000, 0x4000));
        let ep = dev.desc.cfg.endpoint(0x81)?.clone();
        let speed = dev.speed();
        let class_tag = dev.class_tag;
        let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        // usbhid's URB is as long as the longest input report (usbhid_start):
        // the tablet's 6 bytes in an 8-byte packet, the others fill theirs.
        let len = if tablet.is_some() { 6 } else { ep.mps as u32 };
        let urb = ctx.data_urb(d, 0x81, len, URB_NO_TRANSFER_DMA_MAP, tag);
        let unit = descriptors::urb_interval(speed, &ep).max(1) as u64
            * descriptors::interval_unit_ns(speed);
        let first = at + ctx.rng.range(100 * MS, 300 * MS);
        Some(HidTask {
            dev: d,
            kbd,
            tablet,
            urb,
            unit,
            submitted_at: at,
            waiting: false,
            outcome: Outcome::Ok,
            next_input: first,
            pressed: false,
            pos: 0,
            burst: 0,
            click: 0,
            runner: Runner::default(),
            class_tag,
        })
    }

    fn report(&mut self, ctx: &mut Ctx, now: u64) -> Vec<u8> {
        if self.kbd {
            if !self.pressed {
                self.pressed = true;
                self.next_input = now + ctx.rng.range(30 * MS, 90 * MS);
                vec![0, 0, hid_usage(TEXT[self.pos % TEXT.len()]), 0, 0, 0, 0, 0]
            } else {
                self.pressed = false;
                let c = TEXT[self.pos % TEXT.len()];
                self.pos += 1;
                let pause = if c == b'\n' {
                    ctx.rng.range(600 * MS, 1200 * MS)
                } else {
                    0
                };
                self.next_input = now + pause + ctx.rng.range(100 * MS, 300 * MS);
                vec![0; 8]
            }
        } else {
            if self.burst == 0 {
                self.burst = ctx.rng.range(8, 30) as u32;
                self.click = if ctx.rng.chance(1, 4) { 2 } else { 0 };
            }
            self.burst -= 1;
            let buttons = if self.click > 0 {
                self.click -= 1;
                u8::from(self.click > 0)
            } else {
                0
            };
            let dx = ctx.rng.range(0, 16) as i8 - 8;
            let dy = ctx.rng.range(0, 16) as i8 - 8;
            self.next_input = if self.burst > 0 {
                now
            } else {
                now + ctx.rng.range(300 * MS, 1500 * MS)
            };
            if let Some((x, y)) = &mut self.tablet {
                // qemu's tablet report: buttons, X and Y (little endian,
                // 0..=0x7fff), wheel.
                let step = |v: u16, d: i8| (v as i32 + d as i32 * 64).clamp(0, 0x7fff) as u16;
                (*x, *y) = (step(*x, dx), step(*y, dy));
                let (x, y) = (x.to_le_bytes(), y.to_le_bytes());
                return vec![buttons, x[0], x[1], y[0], y[1], 0];
            }
            vec![buttons, dx as u8, dy as u8, 0]
        }
    }

    pub(crate) fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        if !self.waiting {
            self.outcome = ctx.take_error(self.dev);
            if self.outcome == Outcome::SubmitError {
                ctx.submit_error(self.dev, self.urb, now, ENODEV);
                return Some(now + ctx.rng.range(10 * MS, 20 * MS));
            }
            let e = ctx.empty.clone();
            ctx.submit(self.dev, self.urb, now, Some(e), Vec::new());
            self.waiting = true;
            self.submitted_at = now;
            let target = if self.outcome != Outcome::Ok {
                now + self.unit * ctx.rng.range(1, 4)
            } else {
                self.next_input.max(now + self.unit)
            };
            let k = (target - now).div_ceil(self.unit);
            return Some(now + k * self.unit + ctx.rng.range(0, 30 * US));
        }
        self.waiting = false;
        let (dev, tag) = (self.dev, self.urb.tag);
        match self.outcome {
            Outcome::Stall => {
                ctx.complete(dev, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                self.runner
                    .q
                    .push_back(clear_halt(dev, 0x81, self.class_tag));
                Some(now + ctx.rng.range(MS, 3 * MS))
            }
            Outcome::Unlink => {
                ctx.complete(dev, tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
                Some(now + ctx.rng.range(50 * US, 300 * US))
            }
            o @ Outcome::Proto(_) => {
                ctx.complete(dev, tag, now, o.status(), 0, None, Vec::new(), 0, 0);
                Some(now + ctx.rng.range(10 * MS, 20 * MS))
            }
            Outcome::Ok | Outcome::SubmitError => {
                let r = self.report(ctx, now);
                let n = r.len() as u32;
                ctx.complete(dev, tag, now, 0, n, Some(Arc::from(r)), Vec::new(), 0, 0);
                Some(now + ctx.rng.range(8 * US, 40 * US))
            }
        }
    }
}

/// A SCSI command of the bulk-only transport.
struct Cmd {
    cdb: Vec<u8>,
    dir_in: bool,
    len: u32,
    resp: Option<Arc<[u8]>>,
    out: Option<Arc<[u8]>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Start,
    Idle,
    CbwC,
    DataS,
    DataC,
    CswS,
    CswC,
}

const CAPACITY: u32 = 0x0040_0000; // 2 GiB in 512-byte blocks

fn sector_data(lba: u32, blocks: u32) -> Vec<u8> {
    let mut v = vec![0u8; blocks as usize * 512];
    for (i, sec) in v.chunks_mut(512).enumerate() {
        let l = lba + i as u32;
        if l == 0 {
            sec[446..450].copy_from_slice(&[0x00, 0x20, 0x21, 0x00]);
            sec[450] = 0x0c;
            sec[454..458].copy_from_slice(&2048u32.to_le_bytes());
            sec[458..462].copy_from_slice(&(CAPACITY - 2048).to_le_bytes());
            sec[510] = 0x55;
            sec[511] = 0xaa;
            continue;
        }
        let head = format!("MONFS-LBA-{l:08x}");
        sec[..head.len()].copy_from_slice(head.as_bytes());
        let mut x = (l as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for b in sec[head.len()..].iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = x as u8;
        }
    }
    v
}

fn pad(s: &str, n: usize) -> Vec<u8> {
    let mut v: Vec<u8> = s
        .bytes()
        .filter(|b| b.is_ascii_graphic() || *b == b' ')
        .take(n)
        .collect();
    v.resize(n, b' ');
    v
}

/// usb-storage: CBW, data stage, CSW, with error handling.
pub(crate) struct StorageTask {
    dev: DevId,
    st: St,
    runner: Runner,
    cbw_tag: u32,
    cmd: Option<Cmd>,
    init: VecDeque<Cmd>,
    interval: u64,
    cbw: Option<Arc<[u8]>>,
    data_tag: u64,
    outcome: Outcome,
    data_stalled: bool,
    csw_retry: bool,
    class_tag: u64,
}

impl StorageTask {
    pub(crate) fn new(ctx: &mut Ctx, d: DevId) -> StorageTask {
        let dev = ctx.dev(d).unwrap();
        let interval = dev
            .cfg
            .as_ref()
            .and_then(|c| c.interval_ms)
            .unwrap_or_else(|| descriptors::default_interval_ms(DeviceKind::MassStorage))
            as u64
            * MS;
        let mut inquiry = vec![0x00, 0x80, 0x05, 0x02, 0x1f, 0x00, 0x00, 0x00];
        inquiry.extend(pad(
            dev.desc.manufacturer.as_deref().unwrap_or("Generic"),
            8,
        ));
        inquiry.extend(pad(dev.desc.product.as_deref().unwrap_or("USB Disk"), 16));
        inquiry.extend(pad("1.00", 4));
        let mut cap = (CAPACITY - 1).to_be_bytes().to_vec();
        cap.extend_from_slice(&512u32.to_be_bytes());
        let init = VecDeque::from(vec![
            Cmd {
                cdb: vec![0x12, 0, 0, 0, 36, 0],
                dir_in: true,
                len: 36,
                resp: Some(Arc::from(inquiry)),
                out: None,
            },
            Cmd {
                cdb: vec![0; 6],
                dir_in: false,
                len: 0,
                resp: None,
                out: None,
            },
            Cmd {
                cdb: vec![0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                dir_in: true,
                len: 8,
                resp: Some(Arc::from(cap)),
                out: None,
            },
            Cmd {
                cdb: vec![0x1a, 0, 0x3f, 0, 192, 0],
                dir_in: true,
                len: 192,
                resp: Some(Arc::from(vec![0x03, 0, 0, 0])),
                out: None,
            },
            Self::rw(true, 0, 8),
        ]);
        StorageTask {
            dev: d,
            st: St::Start,
            runner: Runner::default(),
            cbw_tag: 0,
            cmd: None,
            init,
            interval,
            cbw: None,
            data_tag: 0,
            outcome: Outcome::Ok,
            data_stalled: false,
            csw_retry: false,
            class_tag: dev.class_tag,
        }
    }

    fn rw(read: bool, lba: u32, blocks: u32) -> Cmd {
        let mut cdb = vec![if read { 0x28 } else { 0x2a }, 0];
        cdb.extend_from_slice(&lba.to_be_bytes());
        cdb.push(0);
        cdb.extend_from_slice(&(blocks as u16).to_be_bytes());
        cdb.push(0);
        let data: Arc<[u8]> = Arc::from(sector_data(lba, blocks));
        Cmd {
            cdb,
            dir_in: read,
            len: blocks * 512,
            resp: if read { Some(data.clone()) } else { None },
            out: if read { None } else { Some(data) },
        }
    }

    fn next_cmd(&mut self, ctx: &mut Ctx) -> Cmd {
        if let Some(c) = self.init.pop_front() {
            return c;
        }
        let r = ctx.rng.below(20);
        if r < 2 {
            Cmd {
                cdb: vec![0; 6],
                dir_in: false,
                len: 0,
                resp: None,
                out: None,
            }
        } else {
            let blocks = 8 << ctx.rng.below(4);
            let lba = (ctx.rng.below((CAPACITY - 64) as u64 / 8) * 8) as u32;
            Self::rw(r < 11, lba, blocks as u32)
        }
    }

    fn recover(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let t = self.class_tag;
        let d = self.dev;
        self.runner.q.push_back(Op::Ctrl {
            target: d,
            setup: setup(0x21, 0xff, 0, 0, 0),
            out: None,
            tag: Some(t),
        });
        self.runner.q.push_back(clear_halt(d, 0x81, t));
        self.runner.q.push_back(clear_halt(d, 0x02, t));
        self.cmd = None;
        self.st = St::Idle;
        Some(now + ctx.rng.range(MS, 5 * MS))
    }

    // usb-storage's transfer flags (drivers/usb/storage/transport.c): the
    // CBW and CSW go through its preallocated DMA buffer `us->iobuf`
    // (usb_stor_msg_common sets URB_NO_TRANSFER_DMA_MAP); the data phase goes
    // through usb_sg_init, whose single URB (xHCI/EHCI take sg lists) has
    // URB_SHORT_NOT_OK when it reads. usb_submit_urb adds URB_DIR_IN: CBW
    // 0x004, CSW 0x204, data IN 0x201, data OUT 0x000.
    fn cbw_urb(&self, ctx: &Ctx) -> Urb {
        ctx.data_urb(self.dev, 0x02, 31, URB_NO_TRANSFER_DMA_MAP, self.class_tag)
    }

    fn csw_urb(&self, ctx: &Ctx) -> Urb {
        ctx.data_urb(self.dev, 0x81, 13, URB_NO_TRANSFER_DMA_MAP, self.class_tag)
    }

    fn latency(ctx: &mut Ctx, len: u32, outcome: Outcome) -> u64 {
        if outcome == Outcome::Unlink {
            // usb-storage gives up on the transfer after a timeout.
            return ctx.rng.range(20 * MS, 40 * MS);
        }
        ctx.rng.range(30 * US, 200 * US) + len as u64 * 25
    }

    pub(crate) fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        let d = self.dev;
        match self.st {
            St::Start => {
                self.runner.q.push_back(Op::Ctrl {
                    target: d,
                    setup: setup(0xa1, 0xfe, 0, 0, 1),
                    out: None,
                    tag: Some(self.class_tag),
                });
                self.st = St::Idle;
                Some(now)
            }
            St::Idle => {
                {
                    let c = self.next_cmd(ctx);
                    self.cbw_tag = self.cbw_tag.wrapping_add(1);
                    let mut b = b"USBC".to_vec();
                    b.extend_from_slice(&self.cbw_tag.to_le_bytes());
                    b.extend_from_slice(&c.len.to_le_bytes());
                    b.push(if c.dir_in && c.len > 0 { 0x80 } else { 0 });
                    b.push(0);
                    b.push(c.cdb.len() as u8);
                    b.extend_from_slice(&c.cdb);
                    b.resize(31, 0);
                    self.cbw = Some(Arc::from(b));
                    self.cmd = Some(c);
                    self.data_stalled = false;
                    self.csw_retry = false;
                }
                let urb = self.cbw_urb(ctx);
                self.outcome = ctx.take_error(d);
                if self.outcome == Outcome::SubmitError {
                    ctx.submit_error(d, urb, now, ENODEV);
                    return self.recover(ctx, now);
                }
                ctx.submit(d, urb, now, self.cbw.clone(), Vec::new());
                self.st = St::CbwC;
                Some(now + Self::latency(ctx, 31, self.outcome))
            }
            St::CbwC => {
                let tag = self.class_tag;
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        ctx.complete(d, tag, now, 0, 31, self.cbw.clone(), Vec::new(), 0, 0);
                        let len = self.cmd.as_ref().map(|c| c.len).unwrap_or(0);
                        self.st = if len > 0 { St::DataS } else { St::CswS };
                        Some(now + ctx.rng.range(20 * US, 150 * US))
                    }
                    o => {
                        let status = o.status();
                        ctx.complete(d, tag, now, status, 0, None, Vec::new(), 0, 0);
                        self.recover(ctx, now)
                    }
                }
            }
            St::DataS => {
                let c = self.cmd.as_ref()?;
                let (addr, len, out) = (if c.dir_in { 0x81 } else { 0x02 }, c.len, c.out.clone());
                self.data_tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
                let flags = if c.dir_in { URB_SHORT_NOT_OK } else { 0 };
                let urb = ctx.data_urb(d, addr, len, flags, self.data_tag);
                self.outcome = ctx.take_error(d);
                if self.outcome == Outcome::SubmitError {
                    ctx.submit_error(d, urb, now, ENODEV);
                    ctx.tags.free(self.data_tag, URB_SIZE);
                    return self.recover(ctx, now);
                }
                let data = if urb.dir_in {
                    Some(ctx.empty.clone())
                } else {
                    out
                };
                ctx.submit(d, urb, now, data, Vec::new());
                self.st = St::DataC;
                Some(now + Self::latency(ctx, len, self.outcome))
            }
            St::DataC => {
                let tag = self.data_tag;
                ctx.tags.free(tag, URB_SIZE);
                let c = self.cmd.as_ref()?;
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        let (actual, data) = if c.dir_in {
                            let r = c.resp.clone().unwrap_or_else(|| ctx.empty.clone());
                            (r.len().min(c.len as usize) as u32, Some(r))
                        } else {
                            (c.len, c.out.clone())
                        };
                        ctx.complete(d, tag, now, 0, actual, data, Vec::new(), 0, 0);
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(20 * US, 150 * US))
                    }
                    Outcome::Stall => {
                        let ep = if c.dir_in { 0x81 } else { 0x02 };
                        ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                        self.runner.q.push_back(clear_halt(d, ep, self.class_tag));
                        self.data_stalled = true;
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(50 * US, 300 * US))
                    }
                    o => {
                        let status = o.status();
                        ctx.complete(d, tag, now, status, 0, None, Vec::new(), 0, 0);
                        self.recover(ctx, now)
                    }
                }
            }
            St::CswS => {
                let urb = self.csw_urb(ctx);
                self.outcome = ctx.take_error(d);
                if self.outcome == Outcome::SubmitError {
                    ctx.submit_error(d, urb, now, ENODEV);
                    return self.recover(ctx, now);
                }
                let e = ctx.empty.clone();
                ctx.submit(d, urb, now, Some(e), Vec::new());
                self.st = St::CswC;
                Some(now + Self::latency(ctx, 13, self.outcome))
            }
            St::CswC => {
                let tag = self.class_tag;
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        let c = self.cmd.as_ref()?;
                        let actual = if self.data_stalled {
                            0
                        } else if c.dir_in {
                            c.resp
                                .as_ref()
                                .map(|r| r.len() as u32)
                                .unwrap_or(0)
                                .min(c.len)
                        } else {
                            c.len
                        };
                        let mut b = b"USBS".to_vec();
                        b.extend_from_slice(&self.cbw_tag.to_le_bytes());
                        b.extend_from_slice(&(c.len - actual).to_le_bytes());
                        b.push(u8::from(self.data_stalled));
                        ctx.complete(d, tag, now, 0, 13, Some(Arc::from(b)), Vec::new(), 0, 0);
                        self.cmd = None;
                        self.st = St::Idle;
                        let gap = if self.init.is_empty() {
                            self.interval * 9 / 10 + ctx.rng.below(self.interval / 5 + 1)
                        } else {
                            ctx.rng.range(2 * MS, 8 * MS)
                        };
                        Some(now + gap)
                    }
                    Outcome::Stall => {
                        ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                        if self.csw_retry {
                            return self.recover(ctx, now);
                        }
                        self.csw_retry = true;
                        self.runner.q.push_back(clear_halt(d, 0x81, self.class_tag));
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(50 * US, 300 * US))
                    }
                    o => {
                        let status = o.status();
                        ctx.complete(d, tag, now, status, 0, None, Vec::new(), 0, 0);
                        self.recover(ctx, now)
                    }
                }
            }
        }
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
/// each resubmitted as soon as it completes.
pub(crate) struct IsoTask {
    dev: DevId,
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
    pub(crate) fn new(ctx: &mut Ctx, d: DevId, at: u64) -> Option<IsoTask> {
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
        Some(IsoTask {
            dev: d,
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
            } else if ctx.rng.chance(1, 2) {
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
        let mut outcome = ctx.take_error(self.dev);
        if outcome == Outcome::Stall {
            outcome = Outcome::Proto(EPROTO); // isochronous endpoints do not stall
        }
        let dur = self.npk as u64 * self.pkt_ns;
        let start = self.next_start.max(now + self.pkt_ns);
        self.next_start = start + dur;
        let mut urb = self.urb;
        urb.tag = self.slots[idx].tag;
        let out = if outcome == Outcome::SubmitError {
            // The submission fails; the slot is retried when its turn would
            // have ended.
            ctx.submit_error(self.dev, urb, now, EXDEV);
            None
        } else {
            let iso = (0..self.npk)
                .map(|i| IsoDesc {
                    status: EXDEV,
                    offset: i * self.pkt_len,
                    length: self.pkt_len,
                })
                .collect();
            let data: Arc<[u8]> = if self.video {
                ctx.empty.clone()
            } else {
                Arc::from(self.audio_buffer())
            };
            ctx.submit(self.dev, urb, now, Some(data.clone()), iso);
            if self.video {
                None
            } else {
                Some(data)
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
        let frame = ((start / MS) & 0x7ff) as i32;
        let pl = self.pkt_len;
        match outcome {
            Outcome::SubmitError => {}
            Outcome::Unlink => {
                let iso = (0..self.npk)
                    .map(|i| IsoDesc {
                        status: EXDEV,
                        offset: i * pl,
                        length: 0,
                    })
                    .collect();
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

    pub(crate) fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
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

/// Back-to-back bulk OUT/IN transfers (usbtest-like), for benchmarks.
pub(crate) struct FloodTask {
    dev: DevId,
    out: Urb,
    inn: Urb,
    out_data: Arc<[u8]>,
    in_data: Arc<[u8]>,
    phase: u8,
    outcome: Outcome,
    runner: Runner,
    class_tag: u64,
    /// Simulated time between two events.
    spacing: u64,
    /// A rate was configured: keep it exactly (catch up after a late wake-up)
    /// instead of jumping to the present.
    rated: bool,
}

/// Simulated time between two flood events unless `rate` is configured.
const FLOOD_SPACING: u64 = 250;
/// How far an unrated flood may fall behind the present before it skips
/// ahead. A bound instead of "jump to the present at every step" lets one
/// bus-thread batch (`BATCH` steps) run on one clock reading; the price is
/// timestamps up to this much in the past.
const FLOOD_MAX_LAG: u64 = 1_000_000;

impl FloodTask {
    pub(crate) fn new(ctx: &mut Ctx, d: DevId) -> FloodTask {
        let size = ctx
            .dev(d)
            .and_then(|x| x.cfg.as_ref())
            .and_then(|c| c.transfer_size)
            .map_or(512, |t| t.0)
            .max(1);
        let class_tag = ctx.dev(d).map(|x| x.class_tag).unwrap_or(0);
        let rate = ctx.dev(d).and_then(|x| x.cfg.as_ref()).and_then(|c| c.rate);
        let spacing = rate
            .map(|r| 1_000_000_000 / r.max(1) as u64)
            .unwrap_or(FLOOD_SPACING)
            .max(1);
        let t_out = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let t_in = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        let out = ctx.data_urb(d, 0x02, size, 0, t_out);
        let inn = ctx.data_urb(d, 0x81, size, 0, t_in);
        let out_data: Arc<[u8]> = (0..size).map(|i| i as u8).collect::<Vec<u8>>().into();
        let mut v = vec![0u8; size as usize];
        ctx.rng.fill(&mut v);
        FloodTask {
            dev: d,
            out,
            inn,
            out_data,
            in_data: Arc::from(v),
            phase: 0,
            outcome: Outcome::Ok,
            runner: Runner::default(),
            class_tag,
            spacing,
            rated: rate.is_some(),
        }
    }

    pub(crate) fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        let d = self.dev;
        let is_in = self.phase >= 2;
        let urb = if is_in { self.inn } else { self.out };
        if self.phase % 2 == 0 {
            self.outcome = ctx.take_error(d);
            if self.outcome == Outcome::SubmitError {
                ctx.submit_error(d, urb, now, ENODEV);
                self.phase = (self.phase + 2) % 4;
            } else {
                let data = if is_in {
                    ctx.empty.clone()
                } else {
                    self.out_data.clone()
                };
                ctx.submit(d, urb, now, Some(data), Vec::new());
                self.phase += 1;
            }
        } else {
            match self.outcome {
                Outcome::Ok | Outcome::SubmitError => {
                    let data = if is_in {
                        self.in_data.clone()
                    } else {
                        self.out_data.clone()
                    };
                    ctx.complete(d, urb.tag, now, 0, urb.len, Some(data), Vec::new(), 0, 0);
                }
                Outcome::Stall => {
                    ctx.complete(d, urb.tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                    let ep = if is_in { 0x81 } else { 0x02 };
                    self.runner.q.push_back(clear_halt(d, ep, self.class_tag));
                }
                Outcome::Unlink => {
                    ctx.complete(d, urb.tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
                }
                o @ Outcome::Proto(_) => {
                    ctx.complete(d, urb.tag, now, o.status(), 0, None, Vec::new(), 0, 0);
                }
            }
            self.phase = (self.phase + 1) % 4;
        }
        if self.rated {
            Some(now + self.spacing)
        } else {
            Some((now + self.spacing).max(ctx.floor.saturating_sub(FLOOD_MAX_LAG)))
        }
    }
}
