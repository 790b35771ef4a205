//! A device answered by another process (`kind: external`). monfs plays the
//! host: the hub driver enumerates the device from its descriptor dump, and
//! a generic class driver (usbhid's requests for HID interfaces, then one
//! URB kept submitted on every interrupt and bulk IN endpoint) submits the
//! URBs. A peer process plays the device: it gets each URB on its standard
//! input and answers completions on its standard output, one line each (the
//! protocol is in docs/external-devices.md).
//!
//! The peer is not trusted. Its lines are bounded, its answers are checked
//! against the URB they complete, and the bus thread never waits for it: a
//! reader thread parses its output into a bounded inbox that the task drains
//! at its steps (an answer becomes a completion at the endpoint's next poll,
//! so interrupt URBs complete on their bInterval grid), and a writer thread
//! feeds its input from a bounded queue. A peer that exits, closes its
//! output, answers garbage or stops reading its input ends as an unplug of
//! the device (in-flight URBs -71, then -108), with a log line.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{bounded, Sender, TrySendError};

use crate::sync::LockExt;
use crate::usbmon::event::XferType;

use super::super::ctx::*;
use super::super::descriptors::{self, Speed};
use super::recovery::{clear_halt, run_recovery};

/// The protocol version in the `hello` line.
const VERSION: u32 = 1;
/// Largest transfer the generic driver submits on a data endpoint, bytes.
const MAX_DATA: u32 = 16384;
/// Longest line the peer may send: a completion of 64 KiB of control data
/// (wLength's limit) in hex, with room for its words.
const MAX_LINE: usize = 2 * 65535 + 64;
/// Answers the peer may send ahead of the task's next step.
const INBOX: usize = 1024;
/// Lines waiting for the peer to read them.
const OUTBOX: usize = 1024;
/// usb_control_msg's timeout (USB_CTRL_GET_TIMEOUT): then the URB is killed.
const CTRL_TIMEOUT: u64 = 5000 * MS;
/// How often a waiting control request or bulk URB looks for its answer.
const POLL: u64 = MS;
/// Unlinked URB ids remembered, so that late answers to them are ignored.
const UNLINKED: usize = 64;
/// Completion statuses a peer may give: success, stall, protocol errors
/// (CRC/timeout, babble, bit stuffing, no response) and a short packet.
const STATUSES: [i32; 7] = [0, -32, -71, -75, -84, -62, -121];

/// A completion the peer sent.
#[derive(Debug)]
struct Answer {
    id: u64,
    status: i32,
    actual: u32,
    data: Vec<u8>,
}

/// What the reader thread hands to the task.
#[derive(Default)]
struct Inbox {
    q: VecDeque<Answer>,
    /// Why the peer is done (exit, garbage); the device unplugs.
    end: Option<String>,
}

/// The peer process and the threads that talk to it.
struct Peer {
    child: Option<Child>,
    tx: Option<Sender<String>>,
    inbox: Arc<Mutex<Inbox>>,
}

impl Peer {
    fn start(argv: &[String]) -> Result<Peer, String> {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start {:?}: {e}", argv[0]))?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err("no pipes to the peer".into());
            }
        };
        let (tx, rx) = bounded::<String>(OUTBOX);
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let spawned = std::thread::Builder::new()
            .name("usb-peer-write".into())
            .spawn(move || {
                let mut w = stdin;
                for line in rx {
                    if w.write_all(line.as_bytes())
                        .and_then(|_| w.flush())
                        .is_err()
                    {
                        break;
                    }
                }
            })
            .and_then(|_| {
                let inbox = inbox.clone();
                std::thread::Builder::new()
                    .name("usb-peer-read".into())
                    .spawn(move || read_peer(stdout, &inbox))
            });
        let peer = Peer {
            child: Some(child),
            tx: Some(tx),
            inbox,
        };
        spawned.map_err(|e| format!("cannot start a thread for the peer: {e}"))?;
        Ok(peer)
    }

    /// Queue a line for the peer; Err if it does not keep up.
    fn send(&self, line: String) -> Result<(), String> {
        let Some(tx) = &self.tx else {
            return Err("its input is closed".into());
        };
        match tx.try_send(line) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                Err(format!("does not read its input ({OUTBOX} lines waiting)"))
            }
            Err(TrySendError::Disconnected(_)) => Err("closed its input".into()),
        }
    }
}

impl Drop for Peer {
    /// Close its input, kill it and reap it off the bus thread.
    fn drop(&mut self) {
        self.tx = None;
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = std::thread::Builder::new()
                .name("usb-peer-reap".into())
                .spawn(move || {
                    let _ = c.wait();
                });
        }
    }
}

/// The reader thread: parse the peer's lines into the inbox until it ends.
fn read_peer(out: impl Read, inbox: &Mutex<Inbox>) {
    let mut r = BufReader::new(out);
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        match (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break "closed its output (exited?)".to_string(),
            Ok(_) => {}
            Err(e) => break format!("read error: {e}"),
        }
        if line.last() != Some(&b'\n') {
            break if line.len() > MAX_LINE {
                format!("sent a line longer than {MAX_LINE} bytes")
            } else {
                "closed its output in the middle of a line".to_string()
            };
        }
        line.pop();
        let a = match parse_answer(&line) {
            Ok(a) => a,
            Err(e) => break e,
        };
        let mut g = inbox.lock_ok();
        if g.q.len() >= INBOX {
            break format!("sent more than {INBOX} answers ahead");
        }
        g.q.push_back(a);
    };
    let mut g = inbox.lock_ok();
    if g.end.is_none() {
        g.end = Some(why);
    }
}

/// At most 40 characters of a bad line, for the log.
fn quote(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(40)]);
    format!("{s:?}{}", if b.len() > 40 { "..." } else { "" })
}

/// `complete ID STATUS ACTUAL [DATA]`.
fn parse_answer(line: &[u8]) -> Result<Answer, String> {
    let bad = |what: &str| format!("answered garbage ({what}): {}", quote(line));
    let s = std::str::from_utf8(line).map_err(|_| bad("not UTF-8"))?;
    let mut w = s.split(' ');
    if w.next() != Some("complete") {
        return Err(bad("not a complete line"));
    }
    let mut num = |what: &str| -> Result<i64, String> {
        let v = w.next().ok_or_else(|| bad(&format!("no {what}")))?;
        if v.is_empty() || v.len() > 20 {
            return Err(bad(&format!("bad {what}")));
        }
        v.parse::<i64>().map_err(|_| bad(&format!("bad {what}")))
    };
    let id = num("id")?;
    let status = num("status")?;
    let actual = num("actual length")?;
    let id = u64::try_from(id).map_err(|_| bad("bad id"))?;
    let status = i32::try_from(status)
        .ok()
        .filter(|s| STATUSES.contains(s))
        .ok_or_else(|| bad("status not one of 0 -32 -71 -75 -84 -62 -121"))?;
    let actual = u32::try_from(actual)
        .ok()
        .filter(|a| *a <= 65535)
        .ok_or_else(|| bad("bad actual length"))?;
    let data = match w.next() {
        None | Some("-") => Vec::new(),
        Some(h) => hex(h).ok_or_else(|| bad("bad hex data"))?,
    };
    if w.next().is_some() {
        return Err(bad("words after the data"));
    }
    if !data.is_empty() && data.len() != actual as usize {
        return Err(bad("data length is not the actual length"));
    }
    Ok(Answer {
        id,
        status,
        actual,
        data,
    })
}

fn hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    let d = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
    s.as_bytes()
        .chunks(2)
        .map(|p| Some(d(p[0])? << 4 | d(p[1])?))
        .collect()
}

fn to_hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "-".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One data endpoint the driver keeps a URB submitted on.
struct Ep {
    urb: Urb,
    id: u64,
    inflight: bool,
    /// Time between polls of the endpoint (its interval; bulk: [`POLL`]).
    unit: u64,
    /// When the URB is submitted next, or polled next while in flight.
    due: u64,
    answer: Option<Answer>,
    outcome: Outcome,
}

/// A control request of the driver.
struct CtrlReq {
    setup: [u8; 8],
    out: Option<Arc<[u8]>>,
    /// The URB (usbhid's own for SET_REPORT); None: a fresh one.
    tag: Option<u64>,
}

/// How a control request ends: status, actual length, IN data.
type CtrlResult = (i32, u32, Option<Arc<[u8]>>);

/// The control request in flight.
struct CtrlCur {
    id: u64,
    urb: Urb,
    fresh: bool,
    deadline: u64,
    /// How it ends, once known.
    result: Option<CtrlResult>,
}

/// The generic driver of an external device and its peer.
pub(crate) struct ExternalTask {
    dev: DevId,
    name: String,
    peer: Option<Peer>,
    /// Why the peer could not start.
    start_error: Option<String>,
    ctrl: VecDeque<CtrlReq>,
    cur: Option<CtrlCur>,
    eps: Vec<Ep>,
    started: bool,
    next_id: u64,
    unlinked: VecDeque<u64>,
    runner: Runner,
    class_tag: u64,
}

/// Requests that go to the peer: class and vendor requests, and standard
/// ones to an interface or endpoint (a HID report descriptor); standard
/// device requests are answered from the descriptors.
fn to_peer(s: &[u8; 8]) -> bool {
    s[0] & 0x60 != 0 || s[0] & 0x1f != 0
}

/// HID interfaces (setting 0) of a configuration's bytes: (interface,
/// subclass, protocol, report descriptor length).
fn hid_interfaces(cfg: &[u8]) -> Vec<(u8, u8, u8, u16)> {
    let mut out = vec![];
    let mut cur: Option<(u8, u8, u8, u8, u8)> = None;
    let mut i = 0;
    while i + 2 <= cfg.len() {
        let l = cfg[i] as usize;
        if l < 2 || i + l > cfg.len() {
            break;
        }
        let d = &cfg[i..i + l];
        match d[1] {
            4 if l >= 9 => cur = Some((d[2], d[3], d[5], d[6], d[7])),
            0x21 if l >= 9 => {
                if let Some((num, 0, 3, sub, proto)) = cur {
                    if !out.iter().any(|h: &(u8, u8, u8, u16)| h.0 == num) {
                        out.push((num, sub, proto, u16::from_le_bytes([d[7], d[8]])));
                    }
                }
            }
            _ => {}
        }
        i += l;
    }
    out
}

impl ExternalTask {
    pub(crate) fn new(ctx: &mut Ctx, d: DevId, now: u64) -> ExternalTask {
        let class_tag = ctx.dev(d).map(|x| x.class_tag).unwrap_or(0);
        let mut t = ExternalTask {
            dev: d,
            name: String::new(),
            peer: None,
            start_error: None,
            ctrl: VecDeque::new(),
            cur: None,
            eps: vec![],
            started: false,
            next_id: 1,
            unlinked: VecDeque::new(),
            runner: Runner::default(),
            class_tag,
        };
        let Some(dev) = ctx.dev(d) else {
            return t;
        };
        let path: Vec<String> = dev.path.iter().map(|p| p.to_string()).collect();
        let path = path.join(".");
        t.name = format!("bus {} port {}", ctx.bus, path);
        let speed = match dev.speed() {
            Speed::Low => "low",
            Speed::Full => "full",
            Speed::High => "high",
        };
        // usbhid's probe: the serial number, then per HID interface
        // SET_IDLE, the report descriptor and (boot keyboards) the LEDs.
        let raw_cfg = dev.desc.raw.as_ref().and_then(|r| {
            let i = r
                .configs
                .iter()
                .position(|c| c.value == dev.desc.cfg.value)?;
            r.config_bytes(i).map(<[u8]>::to_vec)
        });
        let hids = raw_cfg.as_deref().map(hid_interfaces).unwrap_or_default();
        if !hids.is_empty() && dev.desc.dev.i_ser != 0 {
            let s = setup(0x80, 0x06, 0x0300 | dev.desc.dev.i_ser as u16, 0x0409, 255);
            t.ctrl.push_back(CtrlReq {
                setup: s,
                out: None,
                tag: None,
            });
        }
        for &(intf, sub, proto, len) in &hids {
            let req = |s, out: Option<Vec<u8>>, tag| CtrlReq {
                setup: s,
                out: out.map(Arc::from),
                tag,
            };
            let i = intf as u16;
            t.ctrl
                .push_back(req(setup(0x21, 0x0a, 0, i, 0), None, None));
            t.ctrl
                .push_back(req(setup(0x81, 0x06, 0x2200, i, len), None, None));
            if sub == 1 && proto == 1 {
                t.ctrl.push_back(req(
                    setup(0x21, 0x09, 0x0200, i, 1),
                    Some(vec![0]),
                    Some(class_tag),
                ));
            }
        }
        match ctx
            .dev(d)
            .and_then(|x| x.cfg.clone())
            .and_then(|c| c.command)
        {
            Some(cmd) => match Peer::start(&cmd.0) {
                Ok(p) => {
                    let hello = format!("hello {VERSION} {} {path} {speed}\n", ctx.bus);
                    let _ = p.send(hello);
                    t.peer = Some(p);
                }
                Err(e) => t.start_error = Some(e),
            },
            None => t.start_error = Some("no command".into()),
        }
        let _ = now;
        t
    }

    fn id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn send(&self, line: String) -> Result<(), String> {
        match &self.peer {
            Some(p) => p.send(line),
            None => Err("is gone".into()),
        }
    }

    fn forget(&mut self, id: u64) {
        if self.unlinked.len() >= UNLINKED {
            self.unlinked.pop_front();
        }
        self.unlinked.push_back(id);
    }

    /// Start the data endpoints: one URB on every interrupt and bulk IN
    /// endpoint of the configuration's settings 0.
    fn start_eps(&mut self, ctx: &mut Ctx, now: u64) {
        let Some(dev) = ctx.dev(self.dev) else {
            return;
        };
        let speed = dev.speed();
        let hid = dev.desc.cfg.alts.iter().any(|a| a.alt == 0 && a.class == 3);
        let eps: Vec<_> = dev
            .desc
            .cfg
            .alts
            .iter()
            .filter(|a| a.alt == 0)
            .flat_map(|a| a.eps.iter())
            .filter(|e| e.dir_in() && matches!(e.xfer_type(), 2 | 3))
            .cloned()
            .collect();
        for e in eps {
            let unit = if e.xfer_type() == 3 {
                descriptors::urb_interval(speed, &e).max(1) as u64
                    * descriptors::interval_unit_ns(speed)
            } else {
                POLL
            };
            let len = ((e.mps & 0x7ff) as u32).clamp(1, MAX_DATA);
            let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
            let flags = if hid { URB_NO_TRANSFER_DMA_MAP } else { 0 };
            let urb = ctx.data_urb(self.dev, e.addr, len, flags, tag);
            self.eps.push(Ep {
                urb,
                id: 0,
                inflight: false,
                unit,
                due: now,
                answer: None,
                outcome: Outcome::Ok,
            });
        }
    }

    /// Take the peer's answers; Err: the peer is done or misbehaved.
    fn drain(&mut self) -> Result<(), String> {
        if let Some(e) = self.start_error.take() {
            return Err(e);
        }
        let Some(p) = &self.peer else {
            return Ok(());
        };
        let (answers, end) = {
            let mut g = p.inbox.lock_ok();
            (std::mem::take(&mut g.q), g.end.clone())
        };
        for a in answers {
            self.accept(a)?;
        }
        match end {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    fn accept(&mut self, a: Answer) -> Result<(), String> {
        let check = |a: &Answer, urb: &Urb| -> Result<(), String> {
            if a.actual > urb.len {
                return Err(format!(
                    "completed URB {} with {} bytes, more than its {}",
                    a.id, a.actual, urb.len
                ));
            }
            if urb.dir_in && a.data.len() != a.actual as usize {
                return Err(format!("completed IN URB {} without its data", a.id));
            }
            if !urb.dir_in && !a.data.is_empty() {
                return Err(format!("completed OUT URB {} with data", a.id));
            }
            Ok(())
        };
        if let Some(c) = self
            .cur
            .as_mut()
            .filter(|c| c.id == a.id && c.result.is_none())
        {
            check(&a, &c.urb)?;
            let data = if c.urb.dir_in {
                Some(Arc::from(a.data))
            } else {
                None
            };
            c.result = Some((a.status, a.actual, data));
            return Ok(());
        }
        if let Some(e) = self.eps.iter_mut().find(|e| e.inflight && e.id == a.id) {
            check(&a, &e.urb)?;
            if e.answer.is_some() {
                return Err(format!("completed URB {} twice", a.id));
            }
            e.answer = Some(a);
            return Ok(());
        }
        if self.unlinked.contains(&a.id) {
            return Ok(());
        }
        Err(format!("completed URB {}, which is not in flight", a.id))
    }

    fn submit_line(&self, id: u64, urb: &Urb, out: Option<&[u8]>) -> String {
        let ty = match urb.xfer {
            XferType::Control => 'C',
            XferType::Interrupt => 'I',
            XferType::Bulk => 'B',
            XferType::Iso => 'Z',
        };
        let ep = urb.ep | if urb.dir_in { 0x80 } else { 0 };
        let setup = urb.setup.map(|s| to_hex(&s)).unwrap_or_else(|| "-".into());
        format!(
            "submit {id} {ep:02x} {ty} {} {setup} {}\n",
            urb.len,
            to_hex(out.unwrap_or_default())
        )
    }

    /// The control phase; Some(next) while it runs.
    fn step_ctrl(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, String> {
        let dev = self.dev;
        if let Some(c) = &mut self.cur {
            if let Some((status, actual, data)) = c.result.take() {
                let (actual, data) = if status == 0 || actual > 0 {
                    (actual, data)
                } else {
                    (0, None)
                };
                ctx.complete(dev, c.urb.tag, now, status, actual, data, vec![], 0, 0);
                if c.fresh {
                    ctx.tags.free(c.urb.tag, URB_SIZE);
                }
                self.cur = None;
                return Ok(Some(now + ctx.gap()));
            }
            if now >= c.deadline {
                // usb_control_msg timed out and killed the URB.
                let (id, tag, fresh) = (c.id, c.urb.tag, c.fresh);
                ctx.complete(dev, tag, now, ENOENT, 0, None, vec![], 0, 0);
                if fresh {
                    ctx.tags.free(tag, URB_SIZE);
                }
                self.cur = None;
                self.forget(id);
                self.send(format!("unlink {id} {ENOENT}\n"))?;
                return Ok(Some(now + ctx.gap()));
            }
            return Ok(Some((now + POLL).min(c.deadline)));
        }
        let Some(req) = self.ctrl.pop_front() else {
            return Ok(None);
        };
        let (tag, fresh) = match req.tag {
            Some(t) => (t, false),
            None => (ctx.tags.alloc(&mut ctx.rng, URB_SIZE), true),
        };
        let s = req.setup;
        let urb = Urb::control(tag, s);
        let (dir_in, len) = (urb.dir_in, urb.len);
        let sdata = urb.submit_data(ctx, &req.out);
        ctx.submit(dev, urb, now, sdata, vec![]);
        let id = self.id();
        let mut cur = CtrlCur {
            id,
            urb,
            fresh,
            deadline: now + CTRL_TIMEOUT,
            result: None,
        };
        let next = if to_peer(&s) {
            self.send(self.submit_line(id, &urb, req.out.as_deref()))?;
            now + POLL
        } else {
            let (status, data) = ctx.handle_ctrl(dev, &s, req.out.as_deref());
            let d = data.unwrap_or_default();
            let n = d.len().min(len as usize);
            cur.result = Some(if dir_in {
                (status, n as u32, Some(Arc::from(&d[..n])))
            } else {
                (status, len, req.out.clone())
            });
            now + ctx.rng.range(40 * US, 400 * US)
        };
        self.cur = Some(cur);
        Ok(Some(next))
    }

    /// The data endpoints; returns when to run next.
    fn step_eps(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, String> {
        let dev = self.dev;
        let mut next: Option<u64> = None;
        for i in 0..self.eps.len() {
            if !self.eps[i].inflight {
                if now >= self.eps[i].due {
                    let outcome = ctx.take_error(dev);
                    let e = &mut self.eps[i];
                    e.outcome = outcome;
                    if outcome == Outcome::SubmitError {
                        ctx.submit_error(dev, e.urb, now, ENODEV);
                        e.due = now + ctx.rng.range(10 * MS, 20 * MS);
                    } else {
                        let id = self.next_id;
                        self.next_id += 1;
                        let e = &mut self.eps[i];
                        e.id = id;
                        e.inflight = true;
                        e.answer = None;
                        let sdata = e.urb.dir_in.then(|| ctx.empty.clone());
                        ctx.submit(dev, e.urb, now, sdata, vec![]);
                        let polls = if outcome == Outcome::Ok {
                            1
                        } else {
                            ctx.rng.range(1, 4)
                        };
                        e.due = now + polls * e.unit;
                        let line = self.submit_line(id, &self.eps[i].urb, None);
                        self.send(line)?;
                    }
                }
            } else if now >= self.eps[i].due {
                let e = &mut self.eps[i];
                let (tag, id) = (e.urb.tag, e.id);
                if e.outcome != Outcome::Ok {
                    // An injected fault ends the URB; the peer forgets it.
                    let st = e.outcome.status();
                    e.inflight = false;
                    e.answer = None;
                    ctx.complete(dev, tag, now, st, 0, None, vec![], 0, 0);
                    if e.outcome == Outcome::Stall {
                        let ep = e.urb.ep | if e.urb.dir_in { 0x80 } else { 0 };
                        self.runner.q.push_back(clear_halt(dev, ep, self.class_tag));
                    }
                    self.eps[i].due = now + ctx.rng.range(MS, 3 * MS);
                    self.forget(id);
                    self.send(format!("unlink {id} {st}\n"))?;
                } else if let Some(a) = e.answer.take() {
                    e.inflight = false;
                    let data = (!a.data.is_empty()).then(|| Arc::from(a.data));
                    ctx.complete(dev, tag, now, a.status, a.actual, data, vec![], 0, 0);
                    if a.status == EPIPE {
                        let ep = e.urb.ep | if e.urb.dir_in { 0x80 } else { 0 };
                        self.runner.q.push_back(clear_halt(dev, ep, self.class_tag));
                    }
                    let e = &mut self.eps[i];
                    e.due = now + ctx.rng.range(8 * US, 40 * US);
                } else {
                    // Nothing yet (NAK): poll again next interval.
                    let k = (now - e.due) / e.unit + 1;
                    e.due += k * e.unit;
                }
            }
            let due = self.eps[i].due;
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        Ok(next)
    }

    fn run(&mut self, ctx: &mut Ctx, now: u64) -> Result<Option<u64>, String> {
        self.drain()?;
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Ok(Some(t));
        }
        if !self.started {
            if let Some(t) = self.step_ctrl(ctx, now)? {
                return Ok(Some(t));
            }
            self.started = true;
            self.start_eps(ctx, now);
        }
        // Nothing to poll: look for a peer that ends now and then.
        Ok(Some(self.step_eps(ctx, now)?.unwrap_or(now + 100 * MS)))
    }
}

impl Task for ExternalTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            // Unplugged: the peer is told by the end of its input, and killed.
            self.peer = None;
            return None;
        }
        match self.run(ctx, now) {
            Ok(next) => next,
            Err(why) => {
                tracing::warn!(
                    "usb {}: external device's peer {why}: unplugging the device",
                    self.name
                );
                self.peer = None;
                ctx.unplug_dev(self.dev, now);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_parsed_strictly() {
        let a = parse_answer(b"complete 7 0 2 0a0b").unwrap();
        assert_eq!((a.id, a.status, a.actual, a.data), (7, 0, 2, vec![10, 11]));
        let a = parse_answer(b"complete 8 -32 0").unwrap();
        assert_eq!((a.id, a.status, a.actual), (8, -32, 0));
        for bad in [
            &b"complete x 0 0"[..],
            b"complete 1 5 0",
            b"complete 1 0 2 0a",
            b"complete 1 0 1 0g",
            b"complete 1 0 1 0a extra",
            b"complete 1 0 70000",
            b"submit 1 0 0",
            b"complete -1 0 0",
            b"\xff",
        ] {
            assert!(parse_answer(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn hid_interfaces_of_the_usb_kbd_dump() {
        let dump = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/sysfs/qemu-usb-kbd/descriptors"
        ))
        .unwrap();
        assert_eq!(hid_interfaces(&dump[18..]), vec![(0, 1, 1, 63)]);
        // Truncated or zero-length descriptors end the walk.
        assert_eq!(hid_interfaces(&dump[18..30]), vec![]);
        assert_eq!(hid_interfaces(&[0, 4, 0]), vec![]);
    }
}
