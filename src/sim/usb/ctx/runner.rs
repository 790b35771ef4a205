//! The control-request sequencer ([`Runner`]): the hub driver's and the
//! drivers' requests ([`Op`]s: usb_control_msg and the hub driver's steps)
//! run one transfer at a time, each submitted through
//! [`Ctx::submit_urb`] on ep0 and answered by the device, its peer, or
//! monfs.

use std::collections::VecDeque;
use std::sync::Arc;

use super::*;
use crate::sim::usb::peer::PeerError;

/// A control transfer that has been submitted and awaits its completion.
#[derive(Debug)]
struct Pending {
    target: DevId,
    tag: u64,
    status: i32,
    data: Option<Arc<[u8]>>,
    actual: u32,
    /// Answered from outside: (id, deadline, URB).
    remote: Option<(u64, u64, Urb)>,
}

/// Runs a queue of [`Op`]s one transfer at a time.
#[derive(Debug, Default)]
pub(crate) struct Runner {
    pub q: VecDeque<Op>,
    pending: Option<Pending>,
    last: Option<Last>,
}

impl Runner {
    pub(crate) fn busy(&self) -> bool {
        self.pending.is_some() || !self.q.is_empty()
    }

    /// Run one step at `now`; returns when to run next, or None when idle.
    /// `hub` is the hub whose worker runs the queue; `tag` its current URB.
    pub(crate) fn step(
        &mut self,
        ctx: &mut Ctx,
        hub: Option<DevId>,
        tag: &mut u64,
        now: u64,
    ) -> Option<u64> {
        if let Some(mut p) = self.pending.take() {
            if let Some((id, deadline, urb)) = p.remote {
                let mut link = ctx.dev_mut(p.target).and_then(|d| d.ep0.take());
                let r = match link.as_mut() {
                    Some(l) => l.poll(id, &urb),
                    None => Err(PeerError::Gone),
                };
                let put = |ctx: &mut Ctx, link| {
                    if let Some(d) = ctx.dev_mut(p.target) {
                        d.ep0 = link;
                    }
                };
                match r {
                    Ok(Some((st, actual, data))) => {
                        put(ctx, link);
                        p.status = st;
                        if urb.dir_in {
                            p.actual = actual;
                            p.data = data;
                        }
                        if st == 0
                            && matches!(
                                (
                                    urb.setup.unwrap_or_default()[0],
                                    urb.setup.unwrap_or_default()[1]
                                ),
                                (0x00, 0x09) | (0x01, 0x0b)
                            )
                        {
                            // monfs keeps the configuration's bookkeeping.
                            let _ = ctx.handle_ctrl(p.target, &urb.setup.unwrap_or_default(), None);
                        }
                    }
                    Ok(None) if now < deadline => {
                        put(ctx, link);
                        self.pending = Some(p);
                        return Some((now + MS).min(deadline));
                    }
                    Ok(None) => {
                        // usb_control_msg timed out: usb_kill_urb.
                        ctx.complete(p.target, p.tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
                        let r = link.as_mut().map(|l| l.unlink(id, ENOENT));
                        put(ctx, link);
                        if let Some(Err(why)) = r {
                            ctx.peer_gone(p.target, &why, now);
                        }
                        self.last = Some((p.target, ETIMEDOUT, None));
                        return Some(now + ctx.gap());
                    }
                    Err(why) => {
                        put(ctx, link);
                        ctx.peer_gone(p.target, &why, now);
                        self.last = Some((p.target, EPROTO, None));
                        return Some(now + ctx.gap());
                    }
                }
            }
            let data = if p.status == 0 { p.data } else { None };
            // A refused request of a device that stalls after its data
            // stage counts its OUT data (`actual` says what moved).
            let actual = match p.status {
                0 => p.actual,
                EPIPE if p.remote.is_none() => p.actual,
                _ => 0,
            };
            self.last = Some((p.target, p.status, data.clone()));
            ctx.complete(
                p.target,
                p.tag,
                now,
                p.status,
                actual,
                data,
                Vec::new(),
                0,
                0,
            );
            return if self.q.is_empty() {
                None
            } else {
                Some(now + ctx.gap())
            };
        }
        loop {
            let op = self.q.pop_front()?;
            match op {
                Op::Ctrl {
                    target,
                    setup,
                    out,
                    tag: t,
                    flags,
                } => {
                    let tag = t.unwrap_or(*tag);
                    let urb = || Urb::control(tag, setup).with_flags(flags);
                    if !ctx.alive(target) {
                        if ctx.dev(target).is_none() {
                            continue; // disconnected: usb_submit_urb says ENODEV
                        }
                        // Unplugged, not yet disconnected: the host controller
                        // sends the request and the transaction fails.
                        send(ctx, target, urb(), &out, now);
                        self.pending = Some(Pending {
                            target,
                            tag,
                            status: EPROTO,
                            data: None,
                            actual: 0,
                            remote: None,
                        });
                        let lat = ctx.rng.range(100 * US, 1000 * US);
                        return Some(now + ctx.delay(lat));
                    }
                    if let Some(mut link) = ctx.dev_mut(target).and_then(|d| d.ep0.take()) {
                        // Answered from outside: wait for it, polled.
                        let urb = send(ctx, target, urb(), &out, now);
                        let r = link.submit(&urb, out.as_deref());
                        let timeout = link.timeout();
                        if let Some(d) = ctx.dev_mut(target) {
                            d.ep0 = Some(link);
                        }
                        match r {
                            Ok(id) => {
                                self.pending = Some(Pending {
                                    target,
                                    tag,
                                    status: 0,
                                    actual: if urb.dir_in { 0 } else { urb.len },
                                    data: if urb.dir_in { None } else { out },
                                    remote: Some((id, now + timeout, urb)),
                                });
                                return Some(now + MS);
                            }
                            Err(why) => {
                                ctx.peer_gone(target, &why, now);
                                self.last = Some((target, EPROTO, None));
                                return Some(now + ctx.gap());
                            }
                        }
                    }
                    let (status, data) = ctx.handle_ctrl(target, &setup, out.as_deref());
                    let urb = send(ctx, target, urb(), &out, now);
                    let (dir_in, len) = (urb.dir_in, urb.len);
                    let (actual, data) = if dir_in {
                        let d = data.unwrap_or_default();
                        let n = d.len().min(len as usize);
                        (n as u32, Some(Arc::from(&d[..n])))
                    } else if status == EPIPE {
                        (ctx.refused_out_moved(target, len), out)
                    } else {
                        (len, out)
                    };
                    self.pending = Some(Pending {
                        target,
                        tag,
                        status,
                        data,
                        actual,
                        remote: None,
                    });
                    let lat =
                        ctx.rng.range(40 * US, 400 * US) + if len > 64 { 100 * US } else { 0 };
                    return Some(now + ctx.delay(lat));
                }
                Op::Delay(ns) => return Some(now + ctx.delay(ns)),
                Op::NewTag => {
                    ctx.tags.free(*tag, URB_SIZE);
                    *tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
                }
                Op::Addressed(d) => {
                    if let Some(dev) = ctx.dev_mut(d) {
                        dev.devnum = dev.reserved;
                        dev.visible = true;
                    }
                }
                Op::SubmitInt => {
                    if let Some(h) = hub {
                        ctx.submit_hub_int(h, now);
                        return Some(now + ctx.gap());
                    }
                }
                Op::StartStreams(d) => {
                    (ctx.bind_driver)(ctx, d, now);
                }
                Op::Activate(d) => ctx.activate_hub(d, now),
                Op::Disconnect(d) => {
                    ctx.disconnect(d, now);
                    return Some(now + ctx.gap());
                }
                Op::PortEvent(p) => {
                    let ops = hub.map(|h| ctx.port_event_ops(h, p)).unwrap_or_default();
                    self.push_front(ops);
                }
                Op::Connect(p) => {
                    let ops = hub.map(|h| ctx.connect_ops(h, p)).unwrap_or_default();
                    self.push_front(ops);
                }
                Op::Scan => {
                    let ops = hub.map(|h| ctx.scan_ops(h)).unwrap_or_default();
                    self.push_front(ops);
                }
                Op::Enumerate(d) => {
                    let ops = ctx.enumerate_ops(d);
                    self.push_front(ops);
                }
                Op::ClassSetup(d) => {
                    // usb_new_device is done: the device is on the bus.
                    (ctx.core_event)(ctx, d, true);
                    let ops = ctx.class_ops(d);
                    self.push_front(ops);
                }
                Op::Check(d, c) => {
                    let last = self.last.take();
                    match ctx.check(d, c, last) {
                        Next::Go => {}
                        Next::Insert(ops) => self.push_front(ops),
                        Next::Replace(ops) => {
                            while let Some(op) = self.q.pop_front() {
                                if matches!(op, Op::TryEnd(x) if x == d) {
                                    break;
                                }
                            }
                            self.push_front(ops);
                        }
                    }
                }
                Op::TryEnd(_) => {}
                Op::TryFailed(d, err) => {
                    let ops = hub
                        .map(|h| ctx.try_failed_ops(h, d, err))
                        .unwrap_or_default();
                    self.push_front(ops);
                }
            }
        }
    }

    pub(crate) fn push_front(&mut self, ops: Vec<Op>) {
        for op in ops.into_iter().rev() {
            self.q.push_front(op);
        }
    }
}

/// Submit the control request `urb` with `out` to `target`, which is there:
/// ep0 takes no injected fault, so it goes on the bus.
fn send(ctx: &mut Ctx, target: DevId, mut urb: Urb, out: &Option<Arc<[u8]>>, now: u64) -> Urb {
    let _ = ctx.submit_urb(target, &mut urb, out.clone(), Vec::new(), Place::Given, now);
    urb
}
