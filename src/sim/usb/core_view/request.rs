//! Core requests of programs (`drivers/usb/core/message.c` and
//! `driver.c` as usbfs calls them): SET_CONFIGURATION, SET_INTERFACE,
//! CLEAR_HALT, reset, driver disconnect and connect, run as control
//! transfers on the bus; and interface claims.

use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbcore::device::{
    CoreError, CoreRequest, DevRef, TransferType, UrbDone, UrbRequest, UrbResult,
};

use crate::sim::usb::ctx::*;
use crate::sim::usb::driver;

use super::*;

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
                        x.alt = [0; MAX_INTERFACES];
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
    /// usb_control_msg's deadline.
    deadline: u64,
}

/// USB_CTRL_SET_TIMEOUT: how long usb_set_configuration, usb_set_interface,
/// usb_clear_halt and the reset's requests wait for their control
/// transfer (ep0 may be held by a URB the device never answers).
const CTRL_SET_TIMEOUT: u64 = 5000 * MS;

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
        if now >= self.deadline {
            // usb_control_msg timed out: usb_kill_urb, -ETIMEDOUT.
            let (d, tag) = (self.inner.dev, self.inner.tag);
            let urb = ctx
                .dev(d)
                .and_then(|x| x.inflight.iter().find(|u| u.tag == tag).copied());
            if let Some(u) = urb {
                ctx.kill(d, &u, now, ENOENT);
            }
            ctx.core.urbs.remove(&tag);
            self.inner.result = Some(ETIMEDOUT);
            return self.inner.step(ctx, now);
        }
        Some((now + 100 * US).min(self.deadline))
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
    let requests = ctx.core.requests.clone();
    requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let counted = Arc::new(CountedDone {
        inner: done,
        requests,
        told: Default::default(),
    });
    let r = run_request(ctx, (dev, d), req, counted.clone(), now);
    if r.is_err() {
        // Refused at once: nothing will be told.
        counted
            .requests
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
    r
}

/// [`request`] of the live device `d` (`dev` to the core).
fn run_request(
    ctx: &mut Ctx,
    (dev, d): (DevRef, DevId),
    req: CoreRequest,
    done: Arc<CountedDone>,
    now: u64,
) -> Result<u64, CoreError> {
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
            let alt = ctx
                .dev(d)
                .and_then(|x| x.alt.get(intf as usize).copied())
                .unwrap_or(0);
            // The driver's disconnect puts the interfaces it claimed back
            // to setting 0 (uvcvideo's), then usb_unbind_interface an
            // interface left in another setting, before the ioctl returns.
            let mut reset = detach(ctx, d, intf, now);
            if alt != 0 {
                reset.push(intf);
            }
            device_changed(ctx, d);
            if reset.is_empty() {
                later(ctx, 0);
                return Ok(id);
            }
            back_to_setting_0(ctx, d, &reset, now, Some((done.clone(), id)));
            return Ok(id);
        }
        CoreRequest::HidReport {
            interface,
            endpoint,
            setup,
            out,
        } => {
            let r = HidReport {
                interface,
                endpoint,
                setup,
                out,
                done,
                id,
            };
            return super::report::queue(ctx, (dev, d), r, now);
        }
        CoreRequest::AttachDriver(intf) => {
            // device_attach: the driver the interface's class binds, if
            // any (1), probing it as at enumeration; none: 0.
            let Some(x) = ctx.dev_mut(d) else {
                return Err(CoreError::NoDevice);
            };
            let refused = driver::refused_again(x, intf);
            x.core.detached.retain(|i| *i != intf);
            // The driver that matches the interface and keeps it: one
            // that only claims it from another interface's probe (the
            // streaming interfaces of snd-usb-audio and uvcvideo) does not
            // come back (CONNECT gives 0, GETDRIVER ENODATA, no request
            // goes out), as on Linux; nor does one whose earlier instance
            // lives on and refuses the probe.
            if refused || !x.may_bind(intf) || driver::attach(x, intf).is_none() {
                x.core.detached.push(intf);
                later(ctx, 0);
                return Ok(id);
            }
            // Its probe claims again what it claims that no program holds.
            if let Some((drv, alt)) = driver::attached(x, intf) {
                let again = driver::claimable(x, drv, &alt);
                x.core.detached.retain(|i| !again.contains(i));
            }
            // The driver's probe requests run again before it submits (an
            // external device's model keeps its own).
            let reprobe = ctx.reprobe;
            let x = ctx.dev(d).expect("just seen");
            let ops = match x.kind {
                Kind::Dev(DeviceKind::External) => Vec::new(),
                _ => reprobe(x, d, intf),
            };
            // An external device's task asks the peer (usbhid's report
            // descriptor, cdc_acm's line coding): the answer waits for that
            // probe too, as the kernel's CONNECT runs it.
            let external = x.kind == Kind::Dev(DeviceKind::External);
            if ops.is_empty() && !external {
                (ctx.rebind)(ctx, d, intf, now);
                device_changed(ctx, d);
                later(ctx, 1);
                return Ok(id);
            }
            spawn_core_ops(
                ctx,
                d,
                ops,
                now,
                (20 * US, 200 * US),
                After::Reprobe(intf),
                Some((done.clone(), id)),
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
        start_frame: 0,
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
            deadline: now + CTRL_SET_TIMEOUT,
        }),
    );
    Ok(id)
}

/// What a run of the core's own requests is for.
#[derive(Clone, Copy)]
enum After {
    /// A HID driver bound interface `.0` again (USBDEVFS_CONNECT): its
    /// probe's requests, then its tasks start again (the answer: 1, or
    /// ENODEV if the device went meanwhile).
    Reprobe(u8),
    /// usb_unbind_interface's SET_INTERFACE to setting 0 (the answer: 0).
    Unbind,
}

/// The core's own requests `ops` to `d` (through a [`Runner`]), from a
/// moment in `wait` after `now`, then what they were for, then the answer
/// to the request waiting for them (`done`), if any.
fn spawn_core_ops(
    ctx: &mut Ctx,
    d: DevId,
    ops: Vec<Op>,
    now: u64,
    wait: (u64, u64),
    after: After,
    done: Option<(Arc<dyn UrbDone>, u64)>,
) {
    let mut runner = Runner::default();
    runner.q.extend(ops);
    let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
    let at = now + ctx.rng.range(wait.0, wait.1);
    ctx.spawn(
        at,
        Box::new(CoreOps {
            dev: d,
            runner,
            tag,
            after,
            done,
            rebound: None,
        }),
    );
}

/// See [`spawn_core_ops`].
struct CoreOps {
    dev: DevId,
    runner: Runner,
    tag: u64,
    after: After,
    done: Option<(Arc<dyn UrbDone>, u64)>,
    /// A reprobe's driver was bound again: its probe, when the device's
    /// task runs it (an external device's), is waited for until then.
    rebound: Option<u64>,
}

/// How long USBDEVFS_CONNECT waits for a probe the device's task runs
/// (an external device's usbhid or cdc_acm asking the peer): its requests'
/// timeouts, and then some.
const REPROBE_WAIT: u64 = 30_000 * MS;

impl Task for CoreOps {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if ctx.alive(self.dev) {
            if let Some(t) = self.runner.step(ctx, None, &mut self.tag, now) {
                return Some(t);
            }
        }
        let status = match (self.after, ctx.dev(self.dev)) {
            (After::Reprobe(intf), Some(x)) if !x.gone => {
                let since = match self.rebound {
                    Some(t) => t,
                    None => {
                        (ctx.rebind)(ctx, self.dev, intf, now);
                        device_changed(ctx, self.dev);
                        self.rebound = Some(now);
                        now
                    }
                };
                // The kernel's probe runs inside the ioctl: the answer
                // comes once the driver is bound (or its probe gave up).
                let probing = ctx.dev(self.dev).is_some_and(|x| {
                    matches!(driver::attach(x, intf), Some(driver::Binding::Probing(_)))
                });
                if probing && now < since + REPROBE_WAIT {
                    return Some(now + MS);
                }
                1
            }
            (After::Reprobe(_), _) => ENODEV,
            (After::Unbind, _) => 0,
        };
        ctx.tags.free(self.tag, URB_SIZE);
        if ctx.alive(self.dev) {
            device_changed(ctx, self.dev);
        }
        if let Some((done, id)) = self.done.take() {
            done.done(
                id,
                UrbResult {
                    status,
                    ..Default::default()
                },
            );
        }
        None
    }
}

/// usb_unbind_interface of interfaces `intfs` of `d`, left in a setting
/// other than 0: SET_INTERFACE to setting 0 of each on the bus, then
/// `done` (the detach request waiting for it), if any.
fn back_to_setting_0(
    ctx: &mut Ctx,
    d: DevId,
    intfs: &[u8],
    now: u64,
    done: Option<(Arc<dyn UrbDone>, u64)>,
) {
    let ops = intfs
        .iter()
        .map(|i| ctrl(d, setup(0x01, 0x0b, 0, *i as u16, 0)))
        .collect();
    spawn_core_ops(ctx, d, ops, now, (5 * US, 30 * US), After::Unbind, done);
}

/// The endpoints (address with direction) of interface `intf` of `x`, in
/// any of its settings.
fn endpoints(x: &Device, intf: u8) -> Vec<u8> {
    (x.desc.cfg.alts.iter())
        .filter(|a| a.num == intf)
        .flat_map(|a| a.eps.iter().map(|e| e.addr))
        .collect()
}

/// usb_driver_release_interface of the kernel driver of `intf`: the
/// driver's URBs there end, and its tasks end at their next step, before
/// they submit anything more (`Ctx::unbound`). usb_unbind_interface
/// disables the interface's endpoints before the driver's disconnect, so
/// the host controller flushes them (-108, ESHUTDOWN; the kernel oracle
/// shows it for usbhid), except for a driver with soft_unbind
/// (usb-storage, [`driver::soft_unbind`]), whose disconnect kills them
/// (usb_kill_urb, -2). The disconnect of a driver that claimed other
/// interfaces from its probe may end its URBs there too
/// ([`driver::disconnect`]); returns those of them it puts back to
/// setting 0.
fn detach(ctx: &mut Ctx, d: DevId, intf: u8, now: u64) -> Vec<u8> {
    let Some(x) = ctx.dev_mut(d) else {
        return Vec::new();
    };
    let claimed = driver::disconnect(x, intf);
    let status = if driver::soft_unbind(x, intf) {
        ENOENT
    } else {
        ESHUTDOWN
    };
    if !x.core.detached.contains(&intf) {
        x.core.detached.push(intf);
    }
    if let Some(n) = x.core.unbinds.get_mut(intf as usize) {
        *n = n.wrapping_add(1);
    }
    let class_tag = x.class_tag;
    let eps = endpoints(x, intf);
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
        // A program's URB is the program's; usbhid's own (sent for the HID
        // core) goes with usbhid.
        if ctx.core.urbs.get(&u.tag).is_some_and(|p| p.size > 0) {
            continue;
        }
        ctx.kill(d, &u, now, status);
    }
    let Some((what, claimed)) = claimed else {
        return Vec::new();
    };
    let Some(x) = ctx.dev(d) else {
        return Vec::new();
    };
    let eps: Vec<u8> = claimed.iter().flat_map(|n| endpoints(x, *n)).collect();
    let victims: Vec<Urb> = (x.inflight.iter())
        .filter(|u| u.ep != 0 && eps.contains(&(u.ep | if u.dir_in { 0x80 } else { 0 })))
        .filter(|u| !ctx.core.urbs.contains_key(&u.tag))
        .copied()
        .collect();
    let reset: Vec<u8> = claimed
        .into_iter()
        .filter(|n| what.to_setting_0 && x.alt.get(*n as usize).is_some_and(|a| *a != 0))
        .collect();
    for u in victims {
        ctx.kill(d, &u, now, what.status);
    }
    reset
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
/// Like any driver's unbinding, it puts an interface left in a setting
/// other than 0 back to setting 0 (usb_unbind_interface's SET_INTERFACE,
/// which here follows the release instead of coming before it returns).
pub(crate) fn release(
    ctx: &mut Ctx,
    dev: DevRef,
    intf: u8,
    owner: u64,
    now: u64,
) -> Result<(), CoreError> {
    let d = dev.id as DevId;
    let mut reset = false;
    if let Some(x) = ctx.dev_mut(d) {
        let claimed = x.core.claims.contains(&(intf, owner));
        x.core.claims.retain(|c| *c != (intf, owner));
        // usbfs's release leaves the interface without a driver.
        if !x.core.detached.contains(&intf) && x.kind != Kind::Root {
            x.core.detached.push(intf);
        }
        reset = claimed && !x.gone && x.alt.get(intf as usize).is_some_and(|a| *a != 0);
    }
    if reset {
        back_to_setting_0(ctx, d, &[intf], now, None);
    }
    device_changed(ctx, d);
    Ok(())
}
