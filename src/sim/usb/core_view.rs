//! A bus as the USB core's users see it (usbfs, sysfs): the devices as
//! [`UsbDevice`]s, and programs' URBs and core requests run through the
//! same bus, devices and events as the simulated drivers' (the kernel's
//! `drivers/usb/core/{usb,message,driver}.c` for the parts usbfs calls).
//!
//! A program's URB is an ordinary URB of the bus: its `S` event now, its
//! `C` event when the device answers, the same tags, faults (`errors:`,
//! `monfs ctl inject`), unplug aborts (-71, then -108) and kills (-2). Who
//! answers it:
//! * ep0: the device's own answers ([`Ctx::handle_ctrl`]: descriptors,
//!   strings, hub and class requests); an external device's peer for the
//!   requests it owns (class, vendor, interface and endpoint requests, or
//!   all with `ep0: peer`); a device from a capture replays the capture.
//! * data endpoints: an external device's peer; a device from a capture
//!   replays its recorded completions in order; a HID device's interrupt
//!   IN gets the model's next report (the model of the detached usbhid
//!   still runs, its URBs off the bus; see [`Ctx::complete`]); other
//!   built-in devices answer as a generic device of their kind (IN:
//!   interrupt endpoints a report of zeros each interval, bulk endpoints
//!   the bytes asked for, isochronous endpoints full packets; OUT:
//!   everything taken); a device with nothing to say (a `descriptors`
//!   device) leaves IN URBs pending, as a device that NAKs.

use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbcore::device::{
    CoreError, CoreRequest, DevRef, DeviceChange, HostController, Interface, IsoResult,
    Speed as CoreSpeed, TransferType, UrbDone, UrbRequest, UrbResult, UsbDevice,
};
use crate::usbmon::event::{IsoDesc, XferType};

use super::ctx::*;
use super::descriptors::{self, Speed};
use super::devices_text::class_driver;

/// The USB core's view of device `id`, if it is registered (or a root hub).
pub(crate) fn usb_device(ctx: &Ctx, id: DevId) -> Option<UsbDevice> {
    let d = ctx.dev(id)?;
    if d.gone || (d.kind != Kind::Root && !d.core.registered) {
        return None;
    }
    let raw = d.desc.raw.as_deref();
    let mut descriptor = [0u8; 18];
    match raw {
        Some(r) => descriptor.copy_from_slice(&r.device()[..18]),
        None => descriptor = d.desc.dev.bytes(),
    }
    let configs: Vec<Vec<u8>> = match raw {
        Some(r) => (0..r.configs.len())
            .filter_map(|i| r.config_bytes(i).map(<[u8]>::to_vec))
            .collect(),
        None if !d.desc.all_cfgs.is_empty() => d.desc.all_cfgs.iter().map(|c| c.bytes()).collect(),
        None => vec![d.desc.cfg.bytes()],
    };
    if raw.is_none() {
        descriptor[17] = configs.len() as u8;
    }
    let mut strings = Vec::new();
    let mut idxs = vec![
        d.desc.dev.i_mfr,
        d.desc.dev.i_prod,
        d.desc.dev.i_ser,
        d.desc.cfg.i_cfg,
    ];
    idxs.extend(d.desc.intf_strings.iter().copied());
    for i in idxs {
        if i == 0 || strings.iter().any(|(x, _)| *x == i) {
            continue;
        }
        if let Some(b) = d.desc.string(i) {
            strings.push((i, decode_string(&b)));
        }
    }
    let mut interfaces: Vec<Interface> = Vec::new();
    if d.configured || d.kind == Kind::Root {
        for a in &d.desc.cfg.alts {
            if interfaces.iter().any(|i| i.number == a.num) {
                continue;
            }
            let cur = d.alt.get(a.num as usize).copied().unwrap_or(0);
            let alt = d
                .desc
                .cfg
                .alts
                .iter()
                .find(|x| x.num == a.num && x.alt == cur)
                .unwrap_or(a);
            interfaces.push(Interface {
                number: a.num,
                alt: alt.alt,
                num_altsetting: d.desc.cfg.alts.iter().filter(|x| x.num == a.num).count() as u8,
                class: alt.class,
                subclass: alt.sub,
                protocol: alt.proto,
                num_endpoints: alt.eps.len() as u8,
                string_index: 0,
                driver: driver_of(d, a.num, alt.class, alt.proto),
            });
        }
    }
    let (busnum, controller) = (ctx.bus, d.kind == Kind::Root);
    Some(UsbDevice {
        dev: DevRef {
            bus: busnum,
            id: id as u64,
        },
        busnum,
        devnum: d.devnum,
        port_path: d.path.clone(),
        parent: d.parent.map(|p| DevRef {
            bus: busnum,
            id: p as u64,
        }),
        level: d.level,
        speed: match d.speed() {
            Speed::Low => CoreSpeed::Low,
            Speed::Full => CoreSpeed::Full,
            Speed::High => CoreSpeed::High,
        },
        descriptor,
        configs,
        strings,
        active_config: if d.configured || d.kind == Kind::Root {
            d.desc.cfg.value
        } else {
            0
        },
        interfaces,
        maxchild: d.hub.as_ref().map(|h| h.ports.len() as u8).unwrap_or(0),
        controller: controller.then(|| HostController {
            driver: d
                .desc
                .manufacturer
                .as_deref()
                .and_then(|m| m.rsplit(' ').next())
                .unwrap_or("")
                .to_string(),
            pci_name: descriptors::pci_name(busnum),
        }),
    })
}

/// UTF-16LE string descriptor bytes as text.
fn decode_string(b: &[u8]) -> String {
    let n = (b.first().copied().unwrap_or(0) as usize).min(b.len());
    let units: Vec<u16> = b
        .get(2..n)
        .unwrap_or(&[])
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    String::from_utf16_lossy(&units)
}

/// The driver bound to interface `num` of `d` now.
fn driver_of(d: &Device, num: u8, class: u8, proto: u8) -> Option<String> {
    if d.core.claims.iter().any(|(i, _)| *i == num) {
        return Some("usbfs".into());
    }
    if d.core.detached.contains(&num) || !d.driver_bound {
        return None;
    }
    let name = match d.kind {
        Kind::Root => "hub",
        Kind::Dev(DeviceKind::External)
        | Kind::Dev(DeviceKind::FromCapture)
        | Kind::Dev(DeviceKind::Descriptors) => class_driver(class, proto),
        Kind::Dev(_) => d.desc.driver,
    };
    (name != "(none)" && !name.is_empty()).then(|| name.to_string())
}

/// Device `id` changed (its driver bindings, configuration or alternate
/// settings): if the core knows it, tell the watchers (sysfs) its new
/// state, as the kernel's sysfs shows new `driver` links and attributes at
/// once.
pub(crate) fn device_changed(ctx: &mut Ctx, id: DevId) {
    if ctx.core.watchers.is_empty() {
        return;
    }
    let Some(u) = usb_device(ctx, id) else {
        return;
    };
    let change = DeviceChange::Changed(u);
    for w in &ctx.core.watchers {
        w.changed(&change);
    }
}

/// A device was registered with the core (`added`) or is going: tell the
/// watchers.
pub(crate) fn device_event(ctx: &mut Ctx, id: DevId, added: bool) {
    let change = if added {
        let Some(d) = ctx.dev_mut(id) else {
            return;
        };
        if d.core.registered {
            return;
        }
        d.core.registered = true;
        match usb_device(ctx, id) {
            Some(u) => DeviceChange::Added(u),
            None => return,
        }
    } else {
        if let Some(d) = ctx.dev_mut(id) {
            d.core.registered = false;
        }
        DeviceChange::Removed(DevRef {
            bus: ctx.bus,
            id: id as u64,
        })
    };
    for w in &ctx.core.watchers {
        w.changed(&change);
    }
}

/// The device `dev` names, alive and registered.
fn live(ctx: &Ctx, dev: DevRef) -> Result<DevId, CoreError> {
    let id = dev.id as DevId;
    match ctx.dev(id) {
        Some(d) if !d.gone && (d.core.registered || d.kind == Kind::Root) => Ok(id),
        _ => Err(CoreError::NoDevice),
    }
}

fn xfer_of(t: TransferType) -> XferType {
    match t {
        TransferType::Iso => XferType::Iso,
        TransferType::Interrupt => XferType::Interrupt,
        TransferType::Control => XferType::Control,
        TransferType::Bulk => XferType::Bulk,
    }
}

/// Completes a program's URB at its step if it is still in flight.
struct Finish {
    dev: DevId,
    tag: u64,
    status: i32,
    actual: u32,
    data: Option<Arc<[u8]>>,
    iso: Vec<IsoDesc>,
    error_count: i32,
}

impl Task for Finish {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let iso = std::mem::take(&mut self.iso);
        ctx.complete(
            self.dev,
            self.tag,
            now,
            self.status,
            self.actual,
            self.data.take(),
            iso,
            0,
            self.error_count,
        );
        None
    }
}

/// Waits for the peer's answer to a program's URB.
struct PeerWait {
    dev: DevId,
    tag: u64,
    id: u64,
    urb: Urb,
    /// Packet lengths of an isochronous URB.
    pkts: Vec<u32>,
    /// When it was submitted.
    since: u64,
}

impl Task for PeerWait {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.core.urbs.contains_key(&self.tag) {
            return None;
        }
        let answer = {
            let p = ctx.dev(self.dev).and_then(|d| d.core.peer.as_ref())?;
            (p.poll)();
            let mut g = match p.answers.lock() {
                Ok(g) => g,
                Err(e) => e.into_inner(),
            };
            g.done.remove(&self.id)
        };
        let Some((status, actual, data, pkts)) = answer else {
            // Look often at first, then less and less (a URB the peer
            // leaves pending, an interrupt URB waiting for a key, costs
            // little; the answer comes at the next look).
            let age = now.saturating_sub(self.since);
            let soon = match age {
                a if a < 5 * MS => 50 * US,
                a if a < 100 * MS => MS,
                a if a < 1000 * MS => 10 * MS,
                _ => 50 * MS,
            };
            return Some(now + soon);
        };
        let (status, actual) = if actual > self.urb.len {
            tracing::warn!(
                "usb {}: peer answered URB {} with {} bytes, more than its {}: -75",
                ctx.dev_name(self.dev),
                self.id,
                actual,
                self.urb.len
            );
            (-75, 0)
        } else {
            (status, actual)
        };
        if self.urb.xfer == XferType::Iso {
            let mut buf = vec![0u8; self.urb.len as usize];
            let mut iso = Vec::new();
            let (mut off, mut src, mut errs) = (0u32, 0usize, 0);
            let got = pkts.unwrap_or_default();
            for (i, len) in self.pkts.iter().enumerate() {
                let (st, n) = got.get(i).copied().unwrap_or((EXDEV, 0));
                let n = n.min(*len);
                if self.urb.dir_in {
                    let end = (src + n as usize).min(data.len());
                    let k = end.saturating_sub(src);
                    buf[off as usize..off as usize + k].copy_from_slice(&data[src..end]);
                    src = end;
                }
                if st != 0 {
                    errs += 1;
                }
                iso.push(IsoDesc {
                    status: st,
                    offset: off,
                    length: n,
                });
                off += len;
            }
            let total: u32 = iso.iter().map(|p| p.length).sum();
            let data = self.urb.dir_in.then(|| Arc::from(buf));
            ctx.complete(self.dev, self.tag, now, 0, total, data, iso, 0, errs);
        } else {
            let data = (self.urb.dir_in && actual > 0)
                .then(|| Arc::from(&data[..(actual as usize).min(data.len())]));
            ctx.complete(self.dev, self.tag, now, status, actual, data, vec![], 0, 0);
        }
        None
    }
}

/// Most programs' URBs in flight on one bus (usbfs_memory_mb allows
/// about 55,000 of the smallest; each one waiting for a peer is looked at
/// now and then, so monfs bounds them).
pub(crate) const MAX_PROGRAM_URBS: usize = 4096;

/// `usb_submit_urb` of a program's URB on device `dev` at `now`.
pub(crate) fn submit(
    ctx: &mut Ctx,
    dev: DevRef,
    r: UrbRequest,
    done: Arc<dyn UrbDone>,
    now: u64,
) -> Result<u64, CoreError> {
    let d = live(ctx, dev)?;
    if ctx.core.urbs.len() >= MAX_PROGRAM_URBS {
        tracing::warn!(
            "usb bus {}: {} programs' URBs in flight already: ENOMEM",
            ctx.bus,
            MAX_PROGRAM_URBS
        );
        return Err(CoreError::NoMem);
    }
    let npk = r.iso_lengths.len() as u32;
    let size = if r.xfer == TransferType::Iso {
        iso_urb_size(npk)
    } else {
        URB_SIZE
    };
    let dir_in = if r.xfer == TransferType::Control {
        r.setup.is_some_and(|s| s[0] & 0x80 != 0) && r.length > 0
    } else {
        r.endpoint & 0x80 != 0
    };
    let interval = if r.interval != 0 {
        r.interval
    } else {
        default_interval(ctx, d, r.endpoint)
    };
    let tag = ctx.tags.alloc(&mut ctx.rng, size);
    let urb = Urb {
        tag,
        xfer: xfer_of(r.xfer),
        ep: r.endpoint & 0x0f,
        dir_in,
        len: r.length,
        interval,
        flags: r.flags,
        setup: r.setup,
        npk,
    };
    // Faults apply to data transfers, as to the drivers'.
    let outcome = if r.endpoint & 0x0f != 0 {
        ctx.take_error(d)
    } else {
        Outcome::Ok
    };
    if outcome == Outcome::SubmitError {
        let st = if r.xfer == TransferType::Iso {
            EXDEV
        } else {
            ENODEV
        };
        ctx.submit_error(d, urb, now, st);
        ctx.tags.free(tag, size);
        return Err(CoreError::Failed(-st));
    }
    let out: Option<Arc<[u8]>> = (!r.out.is_empty()).then(|| Arc::from(&r.out[..]));
    let pkts = r.iso_lengths.clone();
    let sub_iso: Vec<IsoDesc> = {
        let mut off = 0;
        pkts.iter()
            .map(|&l| {
                let p = IsoDesc {
                    status: EXDEV,
                    offset: off,
                    length: l,
                };
                off += l;
                p
            })
            .collect()
    };
    ctx.core.urbs.insert(
        tag,
        ProgramUrb {
            dev: d,
            done,
            size,
            peer_id: None,
        },
    );
    let sdata = if dir_in {
        Some(ctx.empty.clone())
    } else if r.length > 0 {
        out.clone()
    } else {
        None
    };
    ctx.submit(d, urb, now, sdata, sub_iso.clone());
    if outcome != Outcome::Ok {
        // An injected fault ends it a little later.
        let at = now + ctx.rng.range(100 * US, 1000 * US);
        let iso = sub_iso
            .iter()
            .map(|p| IsoDesc {
                status: if outcome == Outcome::Stall {
                    EPROTO
                } else {
                    outcome.status()
                },
                offset: p.offset,
                length: 0,
            })
            .collect::<Vec<_>>();
        let (status, errs) = if r.xfer == TransferType::Iso {
            (0, iso.len() as i32)
        } else {
            (outcome.status(), 0)
        };
        ctx.spawn(
            at,
            Box::new(Finish {
                dev: d,
                tag,
                status,
                actual: 0,
                data: None,
                iso,
                error_count: errs,
            }),
        );
        return Ok(tag);
    }
    answer(ctx, d, urb, out, pkts, now);
    Ok(tag)
}

/// The interval the kernel's URB gets on endpoint `ep` of `d`.
fn default_interval(ctx: &Ctx, d: DevId, ep: u8) -> i32 {
    let Some(dev) = ctx.dev(d) else {
        return 0;
    };
    match dev.desc.cfg.endpoint(ep) {
        Some(e) if matches!(e.xfer_type(), 1 | 3) => descriptors::urb_interval(dev.speed(), e),
        _ => 0,
    }
}

/// Whether the device's peer answers this URB.
fn peer_answers(dev: &Device, urb: &Urb) -> bool {
    if dev.core.peer.is_none() {
        return false;
    }
    if urb.ep != 0 {
        return true;
    }
    let s = urb.setup.unwrap_or_default();
    if dev.remote_ep0 {
        return true;
    }
    // CLEAR_FEATURE(ENDPOINT_HALT) is monfs's, as after a stall of the
    // model's own URBs.
    if (s[0], s[1]) == (0x02, 0x01) && s[2] == 0 && s[3] == 0 {
        return false;
    }
    s[0] & 0x60 != 0 || s[0] & 0x1f != 0
}

/// Arrange the answer to a program's URB just submitted.
fn answer(ctx: &mut Ctx, d: DevId, urb: Urb, out: Option<Arc<[u8]>>, pkts: Vec<u32>, now: u64) {
    let id = PEER_IDS + ctx.rng.below(1 << 40);
    let Some(dev) = ctx.dev(d) else {
        return;
    };
    if peer_answers(dev, &urb) {
        let line = peer_line(id, &urb, out.as_deref(), &pkts);
        let sent = {
            let p = dev.core.peer.as_ref().unwrap();
            {
                let mut g = match p.answers.lock() {
                    Ok(g) => g,
                    Err(e) => e.into_inner(),
                };
                g.pending.insert(id);
            }
            p.tx.try_send(line).is_ok()
        };
        if !sent {
            // The peer does not read: as a device that stopped answering.
            tracing::warn!(
                "usb {}: the peer does not take a program's URB: it stays pending",
                ctx.dev_name(d)
            );
            return;
        }
        if let Some(p) = ctx.core.urbs.get_mut(&urb.tag) {
            p.peer_id = Some(id);
        }
        ctx.spawn(
            now + 50 * US,
            Box::new(PeerWait {
                dev: d,
                tag: urb.tag,
                id,
                urb,
                pkts,
                since: now,
            }),
        );
        return;
    }
    let kind = dev.kind;
    let speed = dev.speed();
    let recorded = dev.desc.recorded.is_some();
    if urb.xfer == XferType::Control {
        let setup = urb.setup.unwrap_or_default();
        let (status, data) = if recorded {
            match super::replay_program::control(ctx, d, &setup, out.as_deref()) {
                Some(r) => r,
                None => return,
            }
        } else {
            ctx.handle_ctrl(d, &setup, out.as_deref())
        };
        let (actual, data) = if status != 0 {
            (0, None)
        } else if urb.dir_in {
            let v = data.unwrap_or_default();
            let n = v.len().min(urb.len as usize);
            (n as u32, Some(Arc::from(&v[..n])))
        } else {
            (urb.len, None)
        };
        let lat = ctx.rng.range(40 * US, 400 * US) + if urb.len > 64 { 100 * US } else { 0 };
        finish_at(ctx, d, urb.tag, now + lat, status, actual, data, vec![], 0);
        return;
    }
    if recorded {
        if let Some((at, status, actual, data)) =
            super::replay_program::data(ctx, d, &urb, out.as_deref(), now)
        {
            finish_at(ctx, d, urb.tag, at, status, actual, data, vec![], 0);
        }
        return;
    }
    let unit = descriptors::interval_unit_ns(speed);
    match urb.xfer {
        XferType::Iso => {
            let per = (urb.interval.max(1) as u64) * unit;
            let n = pkts.len() as u64;
            let mut iso = Vec::new();
            let mut off = 0;
            for &l in &pkts {
                iso.push(IsoDesc {
                    status: 0,
                    offset: off,
                    length: l,
                });
                off += l;
            }
            let data = urb.dir_in.then(|| {
                let v: Vec<u8> = (0..urb.len).map(|i| (i as u8).wrapping_mul(7)).collect();
                Arc::from(v)
            });
            let at = now + MS + n * per;
            finish_at(ctx, d, urb.tag, at, 0, urb.len, data, iso, 0);
        }
        _ if !urb.dir_in => {
            let lat = ctx.rng.range(30 * US, 200 * US) + urb.len as u64 * 20;
            finish_at(ctx, d, urb.tag, now + lat, 0, urb.len, None, vec![], 0);
        }
        _ if kind == Kind::Dev(DeviceKind::Descriptors) => {
            // Nothing to say: pending (NAK) until killed or unplugged.
        }
        XferType::Interrupt
            if matches!(
                kind,
                Kind::Dev(DeviceKind::HidKeyboard)
                    | Kind::Dev(DeviceKind::HidMouse)
                    | Kind::Dev(DeviceKind::HidTablet)
            ) =>
        {
            // A HID device reports on a change only (usbhid left its idle
            // rate at 0): the model's reports complete it; until one
            // comes, it is pending (NAK).
        }
        XferType::Interrupt => {
            let per = (urb.interval.max(1) as u64) * unit;
            let mps = ctx
                .dev(d)
                .and_then(|x| x.desc.cfg.endpoint(urb.ep | 0x80))
                .map(|e| e.mps as u32 & 0x7ff)
                .unwrap_or(8);
            let n = urb.len.min(mps.max(1));
            let data = Some(Arc::from(vec![0u8; n as usize]));
            finish_at(ctx, d, urb.tag, now + per, 0, n, data, vec![], 0);
        }
        _ => {
            let v: Vec<u8> = (0..urb.len).map(|i| (i as u8) ^ 0x5a).collect();
            let lat = ctx.rng.range(30 * US, 200 * US) + urb.len as u64 * 20;
            finish_at(
                ctx,
                d,
                urb.tag,
                now + lat,
                0,
                urb.len,
                Some(Arc::from(v)),
                vec![],
                0,
            );
        }
    }
}

/// Ids of programs' URBs in the peer protocol start here (the model's own
/// count up from 1).
const PEER_IDS: u64 = 1 << 48;

/// The `submit` line of the peer protocol for a program's URB.
fn peer_line(id: u64, urb: &Urb, out: Option<&[u8]>, pkts: &[u32]) -> String {
    let ep = urb.ep | if urb.dir_in { 0x80 } else { 0 };
    let ty = match urb.xfer {
        XferType::Control => 'C',
        XferType::Interrupt => 'I',
        XferType::Bulk => 'B',
        XferType::Iso => 'Z',
    };
    let setup = urb.setup.map(|s| hex(&s)).unwrap_or_else(|| "-".into());
    let data = match out {
        Some(d) if !urb.dir_in && !d.is_empty() => hex(d),
        _ => "-".into(),
    };
    let mut line = format!("submit {id} {ep:02x} {ty} {} {setup} {data}", urb.len);
    for p in pkts {
        line.push_str(&format!(" {p}"));
    }
    line.push('\n');
    line
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[allow(clippy::too_many_arguments)]
fn finish_at(
    ctx: &mut Ctx,
    d: DevId,
    tag: u64,
    at: u64,
    status: i32,
    actual: u32,
    data: Option<Arc<[u8]>>,
    iso: Vec<IsoDesc>,
    error_count: i32,
) {
    ctx.spawn(
        at,
        Box::new(Finish {
            dev: d,
            tag,
            status,
            actual,
            data,
            iso,
            error_count,
        }),
    );
}

/// `usb_kill_urb` of a program's URB: -ENOENT now (packets of an
/// isochronous URB untransferred).
pub(crate) fn cancel(ctx: &mut Ctx, dev: DevRef, tag: u64, now: u64) -> Result<(), CoreError> {
    let d = dev.id as DevId;
    let Some(p) = ctx.core.urbs.get(&tag) else {
        return Err(CoreError::NoUrb);
    };
    if p.dev != d {
        return Err(CoreError::NoUrb);
    }
    let peer_id = p.peer_id;
    let urb = ctx
        .dev(d)
        .and_then(|x| x.inflight.iter().find(|u| u.tag == tag).copied());
    let Some(urb) = urb else {
        return Err(CoreError::NoUrb);
    };
    let pkt = urb.len.checked_div(urb.npk).unwrap_or(0);
    let iso = (0..urb.npk)
        .map(|i| IsoDesc {
            status: EXDEV,
            offset: i * pkt,
            length: 0,
        })
        .collect();
    ctx.complete(d, tag, now, ENOENT, 0, None, iso, 0, 0);
    if let (Some(id), Some(p)) = (peer_id, ctx.dev(d).and_then(|x| x.core.peer.as_ref())) {
        {
            let mut g = match p.answers.lock() {
                Ok(g) => g,
                Err(e) => e.into_inner(),
            };
            g.pending.remove(&id);
            g.done.remove(&id);
        }
        let _ = p.tx.try_send(format!("unlink {id} {ENOENT}\n"));
    }
    Ok(())
}

/// A core request's answer, delivered at its step.
struct Answered {
    done: Arc<dyn UrbDone>,
    id: u64,
    status: i32,
}

impl Task for Answered {
    fn step(&mut self, _ctx: &mut Ctx, _now: u64) -> Option<u64> {
        self.done.done(
            self.id,
            UrbResult {
                status: self.status,
                ..Default::default()
            },
        );
        None
    }
}

/// A core request that sends a standard request on ep0 and then does
/// `then` with its status.
struct CoreCtrl {
    dev: DevId,
    done: Arc<dyn UrbDone>,
    id: u64,
    then: Then,
    result: Option<i32>,
    tag: u64,
}

#[derive(Clone, Copy)]
enum Then {
    Config(u8),
    Interface(u8, u8, u8),
    Plain,
}

/// Collects the status of the core's own control URB.
struct CtrlStatus(std::sync::Mutex<Option<i32>>);

impl UrbDone for CtrlStatus {
    fn done(&self, _urb: u64, result: UrbResult) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(result.status);
    }
}

impl Task for CoreCtrl {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if ctx.core.urbs.contains_key(&self.tag) {
            return Some(now + 100 * US);
        }
        let st = self.result.unwrap_or(ENODEV);
        let st = match self.then {
            Then::Interface(intf, alt, nalts) => {
                // usb_set_interface: a stall from a device with only one
                // setting is taken as success.
                let st = if st == EPIPE && nalts == 1 { 0 } else { st };
                if st == 0 {
                    if let Some(x) = ctx
                        .dev_mut(self.dev)
                        .and_then(|d| d.alt.get_mut(intf as usize))
                    {
                        *x = alt;
                    }
                }
                st
            }
            Then::Config(v) => {
                if st == 0 {
                    if let Some(x) = ctx.dev_mut(self.dev) {
                        x.configured = v != 0;
                        x.alt = [0; 4];
                    }
                }
                st
            }
            Then::Plain => st,
        };
        if st == 0 && !matches!(self.then, Then::Plain) {
            device_changed(ctx, self.dev);
        }
        self.done.done(
            self.id,
            UrbResult {
                status: st,
                ..Default::default()
            },
        );
        None
    }
}

/// The waiting half of [`CoreCtrl`]: its status arrives through
/// [`CtrlStatus`] and is picked up here.
struct CoreCtrlWait {
    inner: CoreCtrl,
    status: Arc<CtrlStatus>,
}

impl Task for CoreCtrlWait {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if let Some(st) = *self.status.0.lock().unwrap_or_else(|e| e.into_inner()) {
            self.inner.result = Some(st);
            return self.inner.step(ctx, now);
        }
        if !ctx.alive(self.inner.dev) && !ctx.core.urbs.contains_key(&self.inner.tag) {
            self.inner.result = Some(ENODEV);
            return self.inner.step(ctx, now);
        }
        Some(now + 100 * US)
    }
}

/// Run a core request on `dev`.
pub(crate) fn request(
    ctx: &mut Ctx,
    dev: DevRef,
    req: CoreRequest,
    done: Arc<dyn UrbDone>,
    now: u64,
) -> Result<u64, CoreError> {
    let d = live(ctx, dev)?;
    let id = ctx.rng.below(1 << 62) + 1;
    let later = |ctx: &mut Ctx, status: i32| {
        let at = now + ctx.rng.range(5 * US, 30 * US);
        ctx.spawn(
            at,
            Box::new(Answered {
                done: done.clone(),
                id,
                status,
            }),
        );
    };
    let dv = ctx.dev(d).ok_or(CoreError::NoDevice)?;
    let (setup_pkt, then) = match req {
        CoreRequest::ResetEndpoint(_) => {
            later(ctx, 0);
            return Ok(id);
        }
        CoreRequest::SetConfiguration(v) => {
            let value = dv.desc.cfg.value;
            let v = if v < 0 { 0 } else { v };
            if v != 0 && v as u8 != value {
                return Err(CoreError::Invalid("configuration"));
            }
            (setup(0x00, 0x09, v as u16, 0, 0), Then::Config(v as u8))
        }
        CoreRequest::SetInterface { interface, alt } => {
            let nalts = dv
                .desc
                .cfg
                .alts
                .iter()
                .filter(|a| a.num == interface)
                .count() as u8;
            if !dv
                .desc
                .cfg
                .alts
                .iter()
                .any(|a| a.num == interface && a.alt == alt)
            {
                return Err(CoreError::Invalid("setting"));
            }
            (
                setup(0x01, 0x0b, alt as u16, interface as u16, 0),
                Then::Interface(interface, alt, nalts),
            )
        }
        CoreRequest::ClearHalt(ep) => (setup(0x02, 0x01, 0, ep as u16, 0), Then::Plain),
        CoreRequest::ResetDevice => {
            // usb_reset_device: the port reset, then the device descriptor
            // read again and the configuration set again.
            (
                setup(0x00, 0x09, dv.desc.cfg.value as u16, 0, 0),
                Then::Config(dv.desc.cfg.value),
            )
        }
        CoreRequest::DetachDriver(intf) => {
            let u = usb_device(ctx, d).ok_or(CoreError::NoDevice)?;
            let i = u.interface(intf).ok_or(CoreError::Invalid("interface"))?;
            if i.driver.is_none() {
                return Err(CoreError::NoDriver);
            }
            detach(ctx, d, intf, now);
            device_changed(ctx, d);
            later(ctx, 0);
            return Ok(id);
        }
        CoreRequest::AttachDriver(intf) => {
            // device_attach: the driver the interface's class binds, if
            // any (1), probing it as at enumeration; none: 0.
            let Some(x) = ctx.dev_mut(d) else {
                return Err(CoreError::NoDevice);
            };
            x.core.detached.retain(|i| *i != intf);
            let bound = usb_device(ctx, d)
                .and_then(|u| u.interface(intf).map(|i| i.driver.is_some()))
                .unwrap_or(false);
            let x = ctx.dev_mut(d).unwrap();
            if !bound {
                x.core.detached.push(intf);
                later(ctx, 0);
                return Ok(id);
            }
            // usbhid's URB for SET_REPORT may go out again.
            x.core.quiet_class = false;
            let hid = matches!(
                x.kind,
                Kind::Dev(DeviceKind::HidKeyboard)
                    | Kind::Dev(DeviceKind::HidMouse)
                    | Kind::Dev(DeviceKind::HidTablet)
            );
            if !hid {
                unquiet(x);
                device_changed(ctx, d);
                later(ctx, 1);
                return Ok(id);
            }
            // usbhid_probe's requests (the serial number, SET_IDLE, the
            // report descriptor, a keyboard's LEDs), then its URB again.
            let mut ops = ctx.class_ops(d);
            ops.retain(|o| !matches!(o, Op::StartStreams(_)));
            let mut runner = Runner::default();
            runner.q.extend(ops);
            let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
            let at = now + ctx.rng.range(20 * US, 200 * US);
            ctx.spawn(
                at,
                Box::new(Reprobe {
                    dev: d,
                    runner,
                    tag,
                    done: done.clone(),
                    id,
                }),
            );
            return Ok(id);
        }
    };
    let status = Arc::new(CtrlStatus(std::sync::Mutex::new(None)));
    let r = UrbRequest {
        xfer: TransferType::Control,
        endpoint: 0,
        setup: Some(setup_pkt),
        length: 0,
        out: Vec::new(),
        flags: 0,
        iso_lengths: Vec::new(),
        interval: 0,
        stream_id: 0,
    };
    let tag = submit(ctx, dev, r, status.clone(), now)?;
    ctx.spawn(
        now + 50 * US,
        Box::new(CoreCtrlWait {
            inner: CoreCtrl {
                dev: d,
                done,
                id,
                then,
                result: None,
                tag,
            },
            status,
        }),
    );
    Ok(id)
}

/// The drivers of the interfaces not detached submit again.
fn unquiet(x: &mut Device) {
    x.core.quiet_eps.clear();
    x.core.quiet_class = false;
    x.core.suppressed.clear();
    let det = x.core.detached.clone();
    for i in det {
        quiet(x, i);
    }
}

/// A HID driver bound again (USBDEVFS_CONNECT): its probe's requests on
/// the bus, then its model submits again.
struct Reprobe {
    dev: DevId,
    runner: Runner,
    tag: u64,
    done: Arc<dyn UrbDone>,
    id: u64,
}

impl Task for Reprobe {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if ctx.alive(self.dev) {
            if let Some(t) = self.runner.step(ctx, None, &mut self.tag, now) {
                return Some(t);
            }
        }
        ctx.tags.free(self.tag, URB_SIZE);
        let status = match ctx.dev_mut(self.dev) {
            Some(x) if !x.gone => {
                unquiet(x);
                1
            }
            _ => ENODEV,
        };
        if status == 1 {
            device_changed(ctx, self.dev);
        }
        self.done.done(
            self.id,
            UrbResult {
                status,
                ..Default::default()
            },
        );
        None
    }
}

/// Mark interface `intf`'s endpoints quiet for the class driver.
fn quiet(x: &mut Device, intf: u8) {
    let eps: Vec<u8> = x
        .desc
        .cfg
        .alts
        .iter()
        .filter(|a| a.num == intf)
        .flat_map(|a| a.eps.iter().map(|e| e.addr))
        .collect();
    x.core.quiet_eps.extend(eps);
    x.core.quiet_class = true;
}

/// usb_driver_release_interface of the kernel driver of `intf`: the
/// driver's URBs there end and it submits no more. usb_unbind_interface
/// disables the interface's endpoints before the driver's disconnect, so
/// the host controller flushes them (-108, ESHUTDOWN; the kernel oracle
/// shows it for usbhid), except for a driver with soft_unbind
/// (usb-storage), whose disconnect kills them (usb_kill_urb, -2).
fn detach(ctx: &mut Ctx, d: DevId, intf: u8, now: u64) {
    let Some(x) = ctx.dev_mut(d) else {
        return;
    };
    let status = if x.kind == Kind::Dev(DeviceKind::MassStorage) {
        ENOENT
    } else {
        ESHUTDOWN
    };
    if !x.core.detached.contains(&intf) {
        x.core.detached.push(intf);
    }
    quiet(x, intf);
    let class_tag = x.class_tag;
    let eps = x.core.quiet_eps.clone();
    let victims: Vec<Urb> = x
        .inflight
        .iter()
        .filter(|u| {
            let addr = u.ep | if u.dir_in { 0x80 } else { 0 };
            (u.ep != 0 && eps.contains(&addr)) || (u.ep == 0 && u.tag == class_tag)
        })
        .copied()
        .collect();
    for u in victims {
        if ctx.core.urbs.contains_key(&u.tag) {
            continue;
        }
        let pkt = u.len.checked_div(u.npk).unwrap_or(0);
        let iso = (0..u.npk)
            .map(|i| IsoDesc {
                status: EXDEV,
                offset: i * pkt,
                length: 0,
            })
            .collect();
        ctx.complete(d, u.tag, now, status, 0, None, iso, 0, 0);
    }
}

/// `usb_driver_claim_interface` for a program.
pub(crate) fn claim(ctx: &mut Ctx, dev: DevRef, intf: u8, owner: u64) -> Result<(), CoreError> {
    let d = live(ctx, dev)?;
    let u = usb_device(ctx, d).ok_or(CoreError::NoDevice)?;
    let i = u.interface(intf).ok_or(CoreError::Invalid("interface"))?;
    match i.driver.as_deref() {
        None => {}
        Some("usbfs") => {
            let x = ctx.dev(d).unwrap();
            if x.core.claims.contains(&(intf, owner)) {
                return Ok(());
            }
            return Err(CoreError::Busy);
        }
        Some(_) => return Err(CoreError::Busy),
    }
    if let Some(x) = ctx.dev_mut(d) {
        x.core.claims.push((intf, owner));
    }
    device_changed(ctx, d);
    Ok(())
}

/// `usb_driver_release_interface` of a program's claim.
pub(crate) fn release(ctx: &mut Ctx, dev: DevRef, intf: u8, owner: u64) -> Result<(), CoreError> {
    let d = dev.id as DevId;
    if let Some(x) = ctx.dev_mut(d) {
        x.core.claims.retain(|c| *c != (intf, owner));
        // usbfs's release leaves the interface without a driver.
        if !x.core.detached.contains(&intf) && x.kind != Kind::Root {
            x.core.detached.push(intf);
            quiet(x, intf);
        }
    }
    device_changed(ctx, d);
    Ok(())
}

/// Per-packet results of an isochronous completion, for tests.
#[allow(dead_code)]
pub(crate) fn iso_results(iso: &[IsoDesc]) -> Vec<IsoResult> {
    iso.iter()
        .map(|p| IsoResult {
            status: p.status,
            actual_length: p.length,
        })
        .collect()
}
