//! Programs' URBs on the bus (usb_submit_urb and usb_kill_urb of
//! `drivers/usb/core/urb.c` as usbfs calls them): submitted as the bus's own
//! URBs, answered by the device, its external peer or its capture, and
//! completed or cancelled.

use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbcore::device::{CoreError, DevRef, TransferType, UrbDone, UrbRequest};
use crate::usbmon::event::{IsoDesc, XferType};

use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors;

use super::finish::{bus_time, finish_at};
use super::*;

/// Waits for the peer's answer to a program's URB.
struct PeerWait {
    dev: DevId,
    tag: u64,
    id: u64,
    urb: Urb,
    /// Packet lengths of an isochronous URB.
    pkts: Vec<u32>,
    /// An isochronous URB's place on its endpoint's schedule.
    slot: IsoSlot,
    /// When it was submitted.
    since: u64,
}

impl Task for PeerWait {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.core.urbs.contains_key(&self.tag) {
            // Ended another way: its answer holds no other back.
            if let Some(p) = ctx.dev(self.dev).and_then(|d| d.core.peer.as_ref()) {
                match p.answers.lock() {
                    Ok(mut g) => g.forget(self.id),
                    Err(e) => e.into_inner().forget(self.id),
                }
            }
            return None;
        }
        let answer = {
            let p = ctx.dev(self.dev).and_then(|d| d.core.peer.as_ref())?;
            (p.poll)();
            let mut g = match p.answers.lock() {
                Ok(g) => g,
                Err(e) => e.into_inner(),
            };
            g.take(self.id)
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
            errs += late_packets(&mut iso, self.slot.late);
            let total: u32 = iso.iter().map(|p| p.length).sum();
            let data = self.urb.dir_in.then(|| Arc::from(buf));
            // Not before the end of its frames.
            let (frame, at) = (self.slot.start_frame, self.slot.end.max(now));
            finish_at(
                ctx,
                self.dev,
                self.tag,
                at,
                0,
                total,
                data,
                iso,
                (frame, errs),
            );
        } else {
            let data = (self.urb.dir_in && actual > 0)
                .then(|| Arc::from(&data[..(actual as usize).min(data.len())]));
            // The peer's answer is the device's: the bus carries it at the
            // endpoint's next poll or in its bytes' time.
            let at = bus_time(ctx, self.dev, &self.urb, actual, now);
            finish_at(
                ctx,
                self.dev,
                self.tag,
                at,
                status,
                actual,
                data,
                vec![],
                (0, 0),
            );
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
    submit_on(ctx, dev, r, done, now, None)
}

/// [`submit`] on a new URB (`own` None), or on the URB `own` a kernel
/// driver keeps (usbhid's control URB: its address, not freed when it
/// completes; [`ProgramUrb::size`] 0).
pub(super) fn submit_on(
    ctx: &mut Ctx,
    dev: DevRef,
    r: UrbRequest,
    done: Arc<dyn UrbDone>,
    now: u64,
    own: Option<u64>,
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
    if r.xfer == TransferType::Iso {
        // usb_submit_urb: a packet larger than the endpoint carries in one
        // (micro)frame (wMaxPacketSize, times its transactions at high
        // speed) is -EMSGSIZE, before the URB reaches the bus.
        let max = ctx
            .dev(d)
            .and_then(|x| Some(x.active_endpoint(r.endpoint)?.max_per_interval(x.speed())));
        if let Some(max) = max {
            if r.iso_lengths.iter().any(|&l| l > max) {
                return Err(CoreError::Failed(EMSGSIZE));
            }
        }
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
    let (tag, size) = match own {
        Some(tag) => (tag, 0),
        None => (ctx.tags.alloc(&mut ctx.rng, size), size),
    };
    let mut urb = Urb {
        tag,
        xfer: xfer_of(r.xfer),
        ep: r.endpoint & 0x0f,
        dir_in,
        len: r.length,
        interval,
        flags: r.flags,
        setup: r.setup,
        npk,
        start_frame: r.start_frame,
        sched_frame: 0,
    };
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
    let placed = ctx.submit_urb(d, &mut urb, out.clone(), sub_iso.clone(), Place::Hcd, now);
    let (outcome, slot) = match placed {
        Ok(x) => x,
        Err(st) => {
            ctx.core.urbs.remove(&tag);
            if size > 0 {
                ctx.tags.free(tag, size);
            }
            return Err(CoreError::Failed(-st));
        }
    };
    let slot = slot.unwrap_or(IsoSlot {
        start_frame: 0,
        end: now,
        late: 0,
    });
    if outcome != Outcome::Ok {
        // An injected fault ends it a little later.
        let at = now + ctx.rng.range(100 * US, 1000 * US);
        let iso = sub_iso
            .iter()
            .map(|p| IsoDesc {
                status: outcome.status(),
                offset: p.offset,
                length: 0,
            })
            .collect::<Vec<_>>();
        let (status, errs) = if r.xfer == TransferType::Iso {
            (0, iso.len() as i32)
        } else {
            (outcome.status(), 0)
        };
        finish_at(ctx, d, tag, at, status, 0, None, iso, (0, errs));
        return Ok(tag);
    }
    answer(ctx, d, urb, out, pkts, slot, now);
    Ok(tag)
}

/// The first `late` packets of an isochronous URB had their frames pass:
/// each -EXDEV with nothing moved (the status usb_submit_urb gave them).
/// Returns how many of them were not already errors.
fn late_packets(iso: &mut [IsoDesc], late: u32) -> i32 {
    let mut n = 0;
    for p in iso.iter_mut().take(late as usize) {
        if p.status == 0 {
            n += 1;
        }
        p.status = EXDEV;
        p.length = 0;
    }
    n
}

/// -EMSGSIZE, as a positive errno.
const EMSGSIZE: i32 = 90;

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
    // drivers' URBs.
    if (s[0], s[1]) == (0x02, 0x01) && s[2] == 0 && s[3] == 0 {
        return false;
    }
    s[0] & 0x60 != 0 || s[0] & 0x1f != 0
}

/// "A program's URB stays pending" is logged at most once a second.
static PENDING_LOG: crate::base::budget::LogLimit = crate::base::budget::LogLimit::new();

/// Arrange the answer to a program's URB just submitted.
pub(super) fn answer(
    ctx: &mut Ctx,
    d: DevId,
    urb: Urb,
    out: Option<Arc<[u8]>>,
    pkts: Vec<u32>,
    slot: IsoSlot,
    now: u64,
) {
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
            p.tx.send(line)
        };
        if let Err(e) = sent {
            // The peer does not read: as a device that stopped answering.
            if let Some(suppressed) = PENDING_LOG.allow() {
                tracing::warn!(
                    suppressed,
                    "usb {}: external device's peer {e}: a program's URB stays pending",
                    ctx.dev_name(d)
                );
            }
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
                slot,
                since: now,
            }),
        );
        return;
    }
    let kind = dev.kind;
    if dev.desc.recorded.is_some() {
        use crate::sim::usb::replay_program::{submit, Submitted};
        match submit(ctx, d, urb, out.clone(), (pkts.clone(), slot), now) {
            Submitted::Walked(done) => replayed(ctx, d, done, now),
            Submitted::Standard => {
                let setup = urb.setup.unwrap_or_default();
                let (status, data) = ctx.handle_ctrl(d, &setup, out.as_deref());
                let (at, status, actual, data) = control_done(ctx, d, &urb, status, data, now);
                finish_at(ctx, d, urb.tag, at, status, actual, data, vec![], (0, 0));
            }
            Submitted::Unknown if urb.xfer == XferType::Iso => {
                // Isochronous transfers have no handshake: whatever the
                // device does, the controller ends the URB with its
                // frames. OUT packets went out; IN packets got nothing
                // back (a transaction error, -EPROTO).
                let mut iso = Vec::with_capacity(pkts.len());
                let mut off = 0;
                for &l in &pkts {
                    let (status, length) = if urb.dir_in { (EPROTO, 0) } else { (0, l) };
                    iso.push(IsoDesc {
                        status,
                        offset: off,
                        length,
                    });
                    off += l;
                }
                let errs = iso.iter().filter(|p| p.status != 0).count() as i32
                    + late_packets(&mut iso, slot.late);
                let total = iso.iter().map(|p| p.length).sum();
                let sched = (slot.start_frame, errs);
                finish_at(ctx, d, urb.tag, slot.end, 0, total, None, iso, sched);
            }
            Submitted::Unknown => {}
        }
        return;
    }
    if urb.xfer == XferType::Control {
        let setup = urb.setup.unwrap_or_default();
        let (status, data) = ctx.handle_ctrl(d, &setup, out.as_deref());
        let (at, status, actual, data) = control_done(ctx, d, &urb, status, data, now);
        finish_at(ctx, d, urb.tag, at, status, actual, data, vec![], (0, 0));
        return;
    }
    if kind == Kind::Dev(DeviceKind::MassStorage) && urb.xfer == XferType::Bulk {
        super::bot::urb(ctx, d, &urb, out.as_deref(), now);
        return;
    }
    match urb.xfer {
        XferType::Iso => {
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
            let errs = late_packets(&mut iso, slot.late);
            let total = iso.iter().map(|p| p.length).sum();
            let data = urb.dir_in.then(|| {
                let v: Vec<u8> = (0..urb.len).map(|i| (i as u8).wrapping_mul(7)).collect();
                Arc::from(v)
            });
            let (frame, end) = (slot.start_frame, slot.end);
            finish_at(ctx, d, urb.tag, end, 0, total, data, iso, (frame, errs));
        }
        XferType::Bulk if ctx.dev(d).is_some_and(|x| x.function_in.is_some()) => {
            function_bulk(ctx, d, &urb, now);
        }
        _ if !urb.dir_in => {
            let at = bus_time(ctx, d, &urb, urb.len, now);
            finish_at(ctx, d, urb.tag, at, 0, urb.len, None, vec![], (0, 0));
        }
        _ if kind == Kind::Dev(DeviceKind::Descriptors) => {
            // Nothing to say: pending (NAK) until killed or unplugged.
        }
        XferType::Interrupt if ctx.dev(d).is_some_and(|x| x.function_in.is_some()) => {
            // A HID device reports on a change only (usbhid left its idle
            // rate at 0): its next report completes the URB; until one
            // comes, it is pending (NAK).
            ctx.spawn(
                now,
                Box::new(FunctionIn {
                    dev: d,
                    tag: urb.tag,
                    ep: urb.ep,
                    len: urb.len,
                    waiting: false,
                }),
            );
        }
        XferType::Interrupt => {
            let mps = ctx
                .dev(d)
                .and_then(|x| x.desc.cfg.endpoint(urb.ep | 0x80))
                .map(|e| e.mps as u32 & 0x7ff)
                .unwrap_or(8);
            let n = urb.len.min(mps.max(1));
            let data = Some(Arc::from(vec![0u8; n as usize]));
            let at = bus_time(ctx, d, &urb, n, now);
            finish_at(ctx, d, urb.tag, at, 0, n, data, vec![], (0, 0));
        }
        _ => {
            let v: Vec<u8> = (0..urb.len).map(|i| (i as u8) ^ 0x5a).collect();
            let at = bus_time(ctx, d, &urb, urb.len, now);
            finish_at(
                ctx,
                d,
                urb.tag,
                at,
                0,
                urb.len,
                Some(Arc::from(v)),
                vec![],
                (0, 0),
            );
        }
    }
}

/// A program's bulk URB on a device whose function answers the driver's
/// too (a flood gadget's source and sink, as usbtest's loop sees them):
/// IN gets the bytes asked for, the source's buffer over and over (the
/// gadget queues it again as each one goes), OUT what the sink takes; in
/// their bytes' time on the bus. A function that takes nothing leaves the
/// URB pending (NAK).
fn function_bulk(ctx: &mut Ctx, d: DevId, urb: &Urb, now: u64) {
    let (actual, data) = if urb.dir_in {
        let ep = urb.ep | 0x80;
        let Some((n, src)) = ctx.with_function(d, |f, ctx| f.data(ctx, ep, now)) else {
            return;
        };
        let src = &src[..(n as usize).min(src.len())];
        let v: Vec<u8> = if src.is_empty() {
            Vec::new()
        } else {
            src.iter().copied().cycle().take(urb.len as usize).collect()
        };
        (v.len() as u32, Some(Arc::from(v)))
    } else {
        let len = urb.len;
        match ctx
            .with_function(d, |f, ctx| f.take(ctx, now, len))
            .flatten()
        {
            Some(n) => (n.min(len), None),
            None => return,
        }
    };
    let at = bus_time(ctx, d, urb, actual, now);
    finish_at(ctx, d, urb.tag, at, 0, actual, data, vec![], (0, 0));
}

/// When and how a control URB of `d` submitted at `now` ends, its device
/// answering `status` and IN `data`: (time, status, actual length, IN
/// data).
fn control_done(
    ctx: &mut Ctx,
    d: DevId,
    urb: &Urb,
    status: i32,
    data: Option<Vec<u8>>,
    now: u64,
) -> (u64, i32, u32, Option<Arc<[u8]>>) {
    let (actual, data) = if status == EPIPE && !urb.dir_in {
        (ctx.refused_out_moved(d, urb.len), None)
    } else if status != 0 {
        (0, None)
    } else if urb.dir_in {
        let v = data.unwrap_or_default();
        let n = v.len().min(urb.len as usize);
        (n as u32, Some(Arc::from(&v[..n])))
    } else {
        (urb.len, None)
    };
    let lat = ctx.rng.range(40 * US, 400 * US) + if urb.len > 64 { 100 * US } else { 0 };
    let lat = ctx.delay(lat);
    // The device's answer, then its bytes' time on the bus.
    let moved = if urb.dir_in { actual } else { urb.len };
    let at = ctx.async_done(d, 8 + moved, now + lat);
    (at, status, actual, data)
}

/// Complete the URBs of the recorded device `d` its replay's walk
/// completed at `now`, in that order (each given back no earlier than
/// the one before): as recorded, on the bus's schedule (an isochronous
/// one not before the end of its frames), and not before the recorded
/// delay where that is asked for.
fn replayed(ctx: &mut Ctx, d: DevId, done: Vec<crate::sim::usb::replay_program::Done>, now: u64) {
    for x in done {
        let urb = x.urb;
        let mut iso = x.iso;
        let mut sched = (0, 0);
        let (at, status, actual, data) = if urb.xfer == XferType::Control {
            let data = x.data.map(|b| b.to_vec());
            control_done(ctx, d, &urb, x.status, data, now)
        } else if urb.xfer == XferType::Iso {
            let errs = iso.iter().filter(|p| p.status != 0).count() as i32
                + late_packets(&mut iso, x.slot.late);
            let actual = iso.iter().map(|p| p.length).sum();
            sched = (x.slot.start_frame, errs);
            (x.slot.end.max(now), x.status, actual, x.data)
        } else {
            let lat = ctx.rng.range(50 * US, 300 * US);
            let at = bus_time(ctx, d, &urb, x.actual, now + lat);
            (at, x.status, x.actual, x.data)
        };
        let Some(dev) = ctx.dev_mut(d) else {
            return;
        };
        let at = at.max(x.not_before).max(dev.core.replay.last_at);
        dev.core.replay.last_at = at;
        finish_at(ctx, d, urb.tag, at, status, actual, data, iso, sched);
    }
}

/// A program's interrupt IN URB on a device whose function sends on its
/// own (a HID device's reports): once it heads its endpoint's queue (the
/// device answers one poll at a time), completed with the function's next
/// data when that is due, unless it ended before.
struct FunctionIn {
    dev: DevId,
    tag: u64,
    ep: u8,
    len: u32,
    waiting: bool,
}

impl Task for FunctionIn {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.core.urbs.contains_key(&self.tag) {
            return None;
        }
        if !self.waiting {
            let head = ctx.dev(self.dev).and_then(|x| {
                x.inflight
                    .iter()
                    .find(|u| u.ep == self.ep && u.dir_in && ctx.core.urbs.contains_key(&u.tag))
                    .map(|u| u.tag)
            });
            if head != Some(self.tag) {
                return Some(now + MS);
            }
            self.waiting = true;
            let ep = self.ep | 0x80;
            return ctx
                .with_function(self.dev, |f, ctx| f.due(ctx, ep, now, Outcome::Ok))
                .flatten();
        }
        let ep = self.ep | 0x80;
        let (n, data) = ctx.with_function(self.dev, |f, ctx| f.data(ctx, ep, now))?;
        let n = n.min(self.len).min(data.len() as u32);
        let data = Some(Arc::from(&data[..n as usize]));
        finish_at(ctx, self.dev, self.tag, now, 0, n, data, vec![], (0, 0));
        None
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
    ctx.kill(d, &urb, now, ENOENT);
    if ctx.dev(d).is_some_and(|x| x.desc.recorded.is_some()) {
        // The replay's walk goes on without it.
        let done = crate::sim::usb::replay_program::discarded(ctx, d, tag);
        replayed(ctx, d, done, now);
    }
    if let (Some(id), Some(p)) = (peer_id, ctx.dev(d).and_then(|x| x.core.peer.as_ref())) {
        {
            let mut g = match p.answers.lock() {
                Ok(g) => g,
                Err(e) => e.into_inner(),
            };
            g.discard(id);
        }
        let _ = p.tx.send(format!("unlink {id} {ENOENT}\n"));
    }
    Ok(())
}
