//! A device answered by another process (`kind: external`). monfs plays the
//! host: the hub driver enumerates the device from its descriptor dump, and
//! a generic class driver (usbhid's requests for HID interfaces, then one
//! URB kept submitted on every interrupt and bulk IN endpoint, and what the
//! device's `endpoints:` entries add: OUT data, libusb timeouts, other
//! settings, isochronous URBs queued on (micro)frames) submits the URBs. A peer process plays the device: it gets each URB on its standard
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
use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{bounded, Receiver, Sender, TrySendError};

use crate::base::sync::LockExt;
use crate::config::{DeviceConfig, DeviceKind, EndpointConfig, Ep0Owner};
use crate::usbmon::event::{IsoDesc, XferType, URB_ISO_ASAP};

use super::super::ctx::*;
use super::super::descriptors::{self, Speed};
use super::recovery::{clear_halt, run_recovery};

/// The protocol version in the `hello` line.
const VERSION: u32 = 1;
/// Largest transfer the generic driver submits on a data endpoint, bytes.
const MAX_DATA: u32 = 16384;
/// Most packets of an isochronous URB.
const MAX_PACKETS: usize = 64;
/// Longest line the peer may send: a completion of 64 KiB of control data
/// (wLength's limit) in hex, with room for its words and the results of
/// [`MAX_PACKETS`] isochronous packets.
const MAX_LINE: usize = 2 * 65535 + 64 + MAX_PACKETS * 13;
/// Answers the peer may send ahead of the task's next step.
const INBOX: usize = 1024;
/// Lines waiting for the peer to read them.
const OUTBOX: usize = 1024;
/// usb_control_msg's timeout (USB_CTRL_GET_TIMEOUT): then the URB is killed.
const CTRL_TIMEOUT: u64 = 5000 * MS;
/// How often a waiting control request or bulk URB looks for its answer.
const POLL: u64 = MS;
/// Unlinked URB ids remembered, so that late answers to them are ignored.
const UNLINKED: usize = 1024;
/// usb_unlink_urb's status (an asynchronous unlink: libusb's timeout).
const ECONNRESET: i32 = -104;
/// Statuses of an isochronous packet: success, missed (-18), and the
/// protocol errors (-62, -63 buffer error, -70 -71 -75 -84).
const PKT_STATUSES: [i32; 8] = [0, EXDEV, -62, -63, -70, EPROTO, -75, -84];
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
    /// Isochronous: each packet's status and actual length.
    pkts: Option<Vec<(i32, u32)>>,
}

/// What the reader thread hands to the task.
#[derive(Default)]
struct Inbox {
    q: VecDeque<Answer>,
    /// Why the peer is done (exit, garbage); the device unplugs.
    end: Option<String>,
}

/// The peer, over its standard input and output or a Unix socket, and the
/// threads that talk to it.
struct Peer {
    child: Option<Child>,
    tx: Option<Sender<String>>,
    inbox: Arc<Mutex<Inbox>>,
    /// A socket peer's connection, shut down when the peer is dropped.
    sock: Option<Arc<Mutex<Sock>>>,
}

/// A socket peer's connection, once made.
#[derive(Default)]
struct Sock {
    stream: Option<UnixStream>,
    /// The device is gone: a connection made now is shut down at once.
    closed: bool,
}

/// The writer thread: feed the peer's lines until the queue closes.
fn write_peer(mut w: impl Write, rx: Receiver<String>) {
    for line in rx {
        if w.write_all(line.as_bytes())
            .and_then(|_| w.flush())
            .is_err()
        {
            break;
        }
    }
}

impl Peer {
    /// Start the peer the device's configuration names.
    fn open(cfg: Option<&DeviceConfig>) -> Result<Peer, String> {
        match cfg {
            Some(DeviceConfig {
                command: Some(c), ..
            }) => Peer::start(&c.0),
            Some(DeviceConfig {
                socket: Some(s), ..
            }) => Peer::connect(s.0.clone()),
            _ => Err("has no command or socket".into()),
        }
    }

    /// Connect to a peer listening on a Unix socket, off the bus thread
    /// (connect blocks while the listener's backlog is full): a thread
    /// checks that the path is a socket (not following a symbolic link),
    /// connects, then reads; lines sent meanwhile wait in the queue.
    fn connect(path: PathBuf) -> Result<Peer, String> {
        let (tx, rx) = bounded::<String>(OUTBOX);
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let sock = Arc::new(Mutex::new(Sock::default()));
        let (inbox2, sock2) = (inbox.clone(), sock.clone());
        let run = move || {
            let shown = path.display().to_string();
            let r = std::fs::symlink_metadata(&path)
                .map_err(|e| format!("cannot use socket {shown}: {e}"))
                .and_then(|m| {
                    if m.file_type().is_socket() {
                        Ok(())
                    } else {
                        Err(format!("cannot use socket {shown}: not a socket"))
                    }
                })
                .and_then(|_| {
                    UnixStream::connect(&path)
                        .map_err(|e| format!("cannot connect to socket {shown}: {e}"))
                })
                .and_then(|s| {
                    let w = s.try_clone().map_err(|e| format!("socket {shown}: {e}"))?;
                    let mut g = sock2.lock_ok();
                    if g.closed {
                        let _ = s.shutdown(Shutdown::Both);
                        return Err("is gone".into());
                    }
                    g.stream = Some(s.try_clone().map_err(|e| format!("socket {shown}: {e}"))?);
                    Ok((s, w))
                });
            match r {
                Ok((r, w)) => {
                    let spawned = std::thread::Builder::new()
                        .name("usb-peer-write".into())
                        .spawn(move || write_peer(w, rx));
                    match spawned {
                        Ok(_) => read_peer(r, &inbox2),
                        Err(e) => {
                            inbox2.lock_ok().end =
                                Some(format!("cannot start a thread for the peer: {e}"))
                        }
                    }
                }
                Err(e) => {
                    let mut g = inbox2.lock_ok();
                    if g.end.is_none() {
                        g.end = Some(e);
                    }
                }
            }
        };
        std::thread::Builder::new()
            .name("usb-peer-read".into())
            .spawn(run)
            .map_err(|e| format!("cannot start a thread for the peer: {e}"))?;
        Ok(Peer {
            child: None,
            tx: Some(tx),
            inbox,
            sock: Some(sock),
        })
    }

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
            .spawn(move || write_peer(stdin, rx))
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
            sock: None,
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
    /// Close its input, kill it and reap it off the bus thread; a socket
    /// peer's connection is shut down (it sees the end of its input).
    fn drop(&mut self) {
        self.tx = None;
        if let Some(s) = self.sock.take() {
            let mut g = s.lock_ok();
            g.closed = true;
            if let Some(st) = g.stream.take() {
                let _ = st.shutdown(Shutdown::Both);
            }
        }
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

/// `complete ID STATUS ACTUAL [DATA [ST:LEN...]]`.
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
    let mut pkts = Vec::new();
    for p in w {
        if pkts.len() >= MAX_PACKETS {
            return Err(bad("too many packets"));
        }
        let (st, len) = p
            .split_once(':')
            .ok_or_else(|| bad("words after the data"))?;
        let st = (st.len() <= 4)
            .then(|| st.parse::<i32>().ok())
            .flatten()
            .filter(|s| PKT_STATUSES.contains(s))
            .ok_or_else(|| bad("packet status not one of 0 -18 -62 -63 -70 -71 -75 -84"))?;
        let len = (len.len() <= 5)
            .then(|| len.parse::<u32>().ok())
            .flatten()
            .filter(|l| *l <= 65535)
            .ok_or_else(|| bad("bad packet length"))?;
        pkts.push((st, len));
    }
    if !data.is_empty() && data.len() != actual as usize {
        return Err(bad("data length is not the actual length"));
    }
    Ok(Answer {
        id,
        status,
        actual,
        data,
        pkts: (!pkts.is_empty()).then_some(pkts),
    })
}

/// An answer to an isochronous URB of packets of `pl` bytes: status 0,
/// one result per packet, each at most `pl`, adding up to the actual
/// length; the IN data (the packets' bytes one after the other), none OUT.
fn check_iso(a: &Answer, urb: &Urb, pl: u32) -> Result<(), String> {
    let Some(p) = &a.pkts else {
        return Err(format!(
            "completed isochronous URB {} without its packet results",
            a.id
        ));
    };
    if a.status != 0 {
        return Err(format!(
            "completed isochronous URB {} with status {} (the packets carry the errors)",
            a.id, a.status
        ));
    }
    if p.len() != urb.npk as usize {
        return Err(format!(
            "completed URB {} with {} packets, not its {}",
            a.id,
            p.len(),
            urb.npk
        ));
    }
    if p.iter().any(|x| x.1 > pl) {
        return Err(format!(
            "completed URB {} with a packet longer than its {pl} bytes",
            a.id
        ));
    }
    if p.iter().map(|x| x.1).sum::<u32>() != a.actual {
        return Err(format!(
            "completed URB {}: its packets do not add up to the actual length",
            a.id
        ));
    }
    if urb.dir_in && a.data.len() != a.actual as usize {
        return Err(format!("completed IN URB {} without its data", a.id));
    }
    if !urb.dir_in && !a.data.is_empty() {
        return Err(format!("completed OUT URB {} with data", a.id));
    }
    Ok(())
}

/// A `submit` line of a non-isochronous URB.
fn submit_line(id: u64, urb: &Urb, out: Option<&[u8]>) -> String {
    submit_line_iso(id, urb, out, &[])
}

/// A `submit` line; isochronous URBs add each packet's length.
fn submit_line_iso(id: u64, urb: &Urb, out: Option<&[u8]>, pkts: &[u32]) -> String {
    let ty = match urb.xfer {
        XferType::Control => 'C',
        XferType::Interrupt => 'I',
        XferType::Bulk => 'B',
        XferType::Iso => 'Z',
    };
    let ep = urb.ep | if urb.dir_in { 0x80 } else { 0 };
    let setup = urb.setup.map(|s| to_hex(&s)).unwrap_or_else(|| "-".into());
    let mut l = format!(
        "submit {id} {ep:02x} {ty} {} {setup} {}",
        urb.len,
        to_hex(out.unwrap_or_default())
    );
    for p in pkts {
        l.push_str(&format!(" {p}"));
    }
    l.push('\n');
    l
}

/// An answer to a bulk, interrupt or control URB: at most its length, IN
/// data exactly the actual length, no data for OUT, no packet results.
fn check_answer(a: &Answer, urb: &Urb) -> Result<(), String> {
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
    if a.pkts.is_some() {
        return Err(format!(
            "gave packet results to URB {}, which is not isochronous",
            a.id
        ));
    }
    Ok(())
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

/// One bulk or interrupt endpoint the driver keeps a URB submitted on.
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
    /// OUT: the data each URB carries.
    out: Option<Arc<[u8]>>,
    /// From a completion to the next submission (0: at once).
    every: u64,
    /// libusb's timeout: then the URB is discarded (-104).
    timeout: Option<u64>,
    /// When the URB in flight times out.
    deadline: u64,
}

/// One isochronous URB of an endpoint's queue.
struct IsoSlot {
    tag: u64,
    id: u64,
    inflight: bool,
    /// Submitted next (not in flight) or completed next (in flight).
    due: u64,
    /// Its first (micro)frame.
    start: u64,
    outcome: Outcome,
    answer: Option<Answer>,
}

/// An isochronous endpoint: several URBs queued on consecutive
/// (micro)frames, each resubmitted when it completes.
struct IsoEp {
    urb: Urb,
    pkt_len: u32,
    /// Time per packet: the endpoint's interval.
    pkt_ns: u64,
    /// A frame (full speed) or microframe (high speed).
    unit: u64,
    slots: Vec<IsoSlot>,
    next_start: u64,
    /// OUT: the buffer each URB carries.
    out: Option<Arc<[u8]>>,
}

/// A control request of the driver.
struct CtrlReq {
    setup: [u8; 8],
    out: Option<Arc<[u8]>>,
    /// The URB (usbhid's own for SET_REPORT); None: a fresh one.
    tag: Option<u64>,
}

impl CtrlReq {
    fn new(setup: [u8; 8], out: Option<Vec<u8>>, tag: Option<u64>) -> CtrlReq {
        CtrlReq {
            setup,
            out: out.map(Arc::from),
            tag,
        }
    }
}

/// The control request in flight.
struct CtrlCur {
    id: u64,
    urb: Urb,
    setup: [u8; 8],
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
    isos: Vec<IsoEp>,
    /// Interfaces whose SET_INTERFACE failed: their endpoints stay idle.
    failed: Vec<u8>,
    started: bool,
    next_id: u64,
    unlinked: VecDeque<u64>,
    runner: Runner,
    class_tag: u64,
    /// `ep0: peer`: every control request goes to the peer.
    remote: bool,
    /// usb_control_msg's timeout, ns.
    ctrl_timeout: u64,
    /// Answers to programs' URBs (usbfs), which the core sends the peer.
    program: Arc<Mutex<PeerAnswers>>,
}

/// Move the peer's answers to programs' URBs out of its inbox.
fn take_program_answers(inbox: &Mutex<Inbox>, program: &Mutex<PeerAnswers>) {
    let mut g = program.lock_ok();
    if g.pending.is_empty() {
        return;
    }
    let mut ib = inbox.lock_ok();
    let mut keep = VecDeque::with_capacity(ib.q.len());
    for a in ib.q.drain(..) {
        if g.pending.remove(&a.id) {
            g.done.insert(a.id, (a.status, a.actual, a.data, a.pkts));
        } else {
            keep.push_back(a);
        }
    }
    ib.q = keep;
}

/// The device's control request timeout (`ctrl_timeout_ms`), ns.
fn ctrl_timeout(cfg: Option<&DeviceConfig>) -> u64 {
    cfg.and_then(|c| c.ctrl_timeout_ms)
        .map_or(CTRL_TIMEOUT, |t| t.0 as u64 * MS)
}

/// The `hello` line for device `d`, and the name the log gives it.
fn hello(ctx: &Ctx, d: DevId) -> (String, String) {
    let Some(dev) = ctx.dev(d) else {
        return (String::new(), String::new());
    };
    let path: Vec<String> = dev.path.iter().map(|p| p.to_string()).collect();
    let path = path.join(".");
    let speed = match dev.speed() {
        Speed::Low => "low",
        Speed::Full => "full",
        Speed::High => "high",
    };
    (
        format!("hello {VERSION} {} {path} {speed}\n", ctx.bus),
        format!("bus {} port {path}", ctx.bus),
    )
}

/// The peer of a device with `ep0: peer` from its plugging until its class
/// driver takes it over: the hub driver's enumeration requests go to it
/// (the [`Ep0Link`] of the device).
pub(crate) struct Link {
    peer: Option<Peer>,
    start_error: Option<String>,
    next_id: u64,
    unlinked: VecDeque<u64>,
    timeout: u64,
}

/// Give device `d` (just plugged) its peer if it answers its own ep0.
pub(crate) fn link(ctx: &mut Ctx, d: DevId) {
    let Some(dev) = ctx.dev(d) else {
        return;
    };
    let cfg = dev.cfg.as_ref();
    if dev.kind != Kind::Dev(DeviceKind::External) || cfg.is_none_or(|c| c.ep0 != Ep0Owner::Peer) {
        return;
    }
    let timeout = ctrl_timeout(cfg);
    let (line, _) = hello(ctx, d);
    let mut l = Link {
        peer: None,
        start_error: None,
        next_id: 1,
        unlinked: VecDeque::new(),
        timeout,
    };
    match Peer::open(cfg) {
        Ok(p) => {
            let _ = p.send(line);
            l.peer = Some(p);
        }
        Err(e) => l.start_error = Some(e),
    }
    if let Some(dev) = ctx.dev_mut(d) {
        dev.ep0 = Some(Box::new(l));
        dev.remote_ep0 = true;
    }
}

impl Link {
    fn send(&self, line: String) -> Result<(), String> {
        match &self.peer {
            Some(p) => p.send(line),
            None => Err("is gone".into()),
        }
    }
}

impl Ep0Link for Link {
    fn submit(&mut self, urb: &Urb, out: Option<&[u8]>) -> Result<u64, String> {
        if let Some(e) = self.start_error.take() {
            return Err(e);
        }
        let id = self.next_id;
        self.next_id += 1;
        self.send(submit_line(id, urb, out))?;
        Ok(id)
    }

    fn poll(&mut self, id: u64, urb: &Urb) -> Result<Option<CtrlResult>, String> {
        let Some(p) = &self.peer else {
            return Err("is gone".into());
        };
        let (answers, end) = {
            let mut g = p.inbox.lock_ok();
            (std::mem::take(&mut g.q), g.end.clone())
        };
        let mut got = None;
        for a in answers {
            if a.id == id && got.is_none() {
                check_answer(&a, urb)?;
                let data = urb.dir_in.then(|| Arc::from(a.data));
                got = Some((a.status, a.actual, data));
            } else if !self.unlinked.contains(&a.id) {
                return Err(format!("completed URB {}, which is not in flight", a.id));
            }
        }
        match end {
            Some(e) => Err(e),
            None => Ok(got),
        }
    }

    fn unlink(&mut self, id: u64, status: i32) -> Result<(), String> {
        if self.unlinked.len() >= UNLINKED {
            self.unlinked.pop_front();
        }
        self.unlinked.push_back(id);
        self.send(format!("unlink {id} {status}\n"))
    }

    fn timeout(&self) -> u64 {
        self.timeout
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
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

/// The setting of the device's configuration that holds an `endpoints:`
/// entry's endpoint: (interface, setting, descriptor); the entry's `alt`,
/// or the lowest setting that has it.
fn resolve(dev: &Device, e: &EndpointConfig) -> Option<(u8, u8, descriptors::EpDesc)> {
    dev.desc
        .cfg
        .alts
        .iter()
        .filter(|a| e.alt.is_none_or(|x| x == a.alt))
        .filter_map(|a| {
            let d = a.eps.iter().find(|d| d.addr == e.ep.0)?;
            Some((a.num, a.alt, d.clone()))
        })
        .min_by_key(|r| r.1)
}

/// Bytes per isochronous packet: wMaxPacketSize, times the transactions
/// per microframe of a high-bandwidth high-speed endpoint.
fn iso_packet(speed: Speed, e: &descriptors::EpDesc) -> u32 {
    let mult = if speed == Speed::High {
        1 + ((e.mps >> 11) & 3) as u32
    } else {
        1
    };
    (e.mps as u32 & 0x7ff) * mult
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
            isos: vec![],
            failed: vec![],
            started: false,
            next_id: 1,
            unlinked: VecDeque::new(),
            runner: Runner::default(),
            class_tag,
            remote: false,
            ctrl_timeout: CTRL_TIMEOUT,
            program: Arc::default(),
        };
        let (hello_line, name) = hello(ctx, d);
        t.name = name;
        let Some(dev) = ctx.dev(d) else {
            return t;
        };
        t.remote = dev.remote_ep0;
        t.ctrl_timeout = ctrl_timeout(dev.cfg.as_ref());
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
        let req = CtrlReq::new;
        for &(intf, sub, proto, len) in &hids {
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
        // The settings the `endpoints:` entries need, selected as
        // usb_set_interface does (a standard interface request: the peer's).
        let mut alts: Vec<(u8, u8)> = vec![];
        for e in dev.cfg.iter().flat_map(|c| c.endpoints.iter()) {
            if let Some((num, alt, _)) = resolve(dev, e) {
                if alt != 0 && !alts.contains(&(num, alt)) {
                    alts.push((num, alt));
                }
            }
        }
        for (num, alt) in alts {
            let s = setup(0x01, 0x0b, alt as u16, num as u16, 0);
            t.ctrl.push_back(req(s, None, None));
        }
        if t.remote {
            // The peer has answered the enumeration: take it over.
            let link = ctx
                .dev_mut(d)
                .and_then(|x| x.ep0.take())
                .and_then(|l| l.into_any().downcast::<Link>().ok());
            match link {
                Some(l) => {
                    t.peer = l.peer;
                    t.start_error = l.start_error;
                    t.next_id = l.next_id;
                    t.unlinked = l.unlinked;
                }
                None => t.start_error = Some("is gone".into()),
            }
        } else {
            match Peer::open(ctx.dev(d).and_then(|x| x.cfg.as_ref())) {
                Ok(p) => {
                    let _ = p.send(hello_line);
                    t.peer = Some(p);
                }
                Err(e) => t.start_error = Some(e),
            }
        }
        // Programs' URBs (usbfs) reach the same peer.
        if let Some(p) = t.peer.as_ref() {
            if let (Some(tx), Some(x)) = (p.tx.clone(), ctx.dev_mut(d)) {
                let (inbox, program) = (p.inbox.clone(), t.program.clone());
                x.core.peer = Some(ProgramPeer {
                    tx,
                    answers: t.program.clone(),
                    poll: Box::new(move || take_program_answers(&inbox, &program)),
                });
            }
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
    /// endpoint of the configuration's settings 0 that `endpoints:` does
    /// not list, and what the `endpoints:` entries say.
    fn start_eps(&mut self, ctx: &mut Ctx, now: u64) {
        let Some(dev) = ctx.dev(self.dev) else {
            return;
        };
        let speed = dev.speed();
        let hid = dev.desc.cfg.alts.iter().any(|a| a.alt == 0 && a.class == 3);
        let entries: Vec<EndpointConfig> =
            dev.cfg.iter().flat_map(|c| c.endpoints.clone()).collect();
        let mut plain: Vec<(descriptors::EpDesc, Option<EndpointConfig>)> = dev
            .desc
            .cfg
            .alts
            .iter()
            .filter(|a| a.alt == 0)
            .flat_map(|a| a.eps.iter())
            .filter(|e| e.dir_in() && matches!(e.xfer_type(), 2 | 3))
            .filter(|e| !entries.iter().any(|x| x.ep.0 == e.addr))
            .map(|e| (e.clone(), None))
            .collect();
        let mut isos = vec![];
        for x in &entries {
            let Some((num, _, e)) = resolve(dev, x) else {
                tracing::warn!(
                    "usb {}: endpoint {:#04x} is not in the device's configuration: left idle",
                    self.name,
                    x.ep.0
                );
                continue;
            };
            if self.failed.contains(&num) {
                continue;
            }
            if e.xfer_type() == 1 {
                isos.push((e, x.clone()));
            } else {
                plain.push((e, Some(x.clone())));
            }
        }
        for (e, x) in plain {
            let unit = if e.xfer_type() == 3 {
                descriptors::urb_interval(speed, &e).max(1) as u64
                    * descriptors::interval_unit_ns(speed)
            } else {
                POLL
            };
            let x = x.as_ref();
            let out: Option<Arc<[u8]>> =
                x.and_then(|x| x.data.as_ref()).map(|d| Arc::from(&d.0[..]));
            let len = match (&out, x.and_then(|x| x.length)) {
                (Some(d), _) => d.len() as u32,
                (None, Some(l)) => l.min(MAX_DATA),
                (None, None) => ((e.mps & 0x7ff) as u32).clamp(1, MAX_DATA),
            };
            let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
            let flags = if hid && x.is_none() {
                URB_NO_TRANSFER_DMA_MAP
            } else {
                0
            };
            let mut urb = ctx.data_urb(self.dev, e.addr, len, flags, tag);
            if e.xfer_type() == 3 {
                urb.interval = descriptors::urb_interval(speed, &e);
            }
            self.eps.push(Ep {
                urb,
                id: 0,
                inflight: false,
                unit,
                due: now,
                answer: None,
                outcome: Outcome::Ok,
                out,
                every: x.and_then(|x| x.every_ms).unwrap_or(0) as u64 * MS,
                timeout: x.and_then(|x| x.timeout_ms).map(|t| t as u64 * MS),
                deadline: 0,
            });
        }
        for (e, x) in isos {
            let npk = x.packets.unwrap_or(8);
            let pkt_len = iso_packet(speed, &e);
            let unit = descriptors::interval_unit_ns(speed);
            let pkt_ns = descriptors::urb_interval(speed, &e).max(1) as u64 * unit;
            let size = iso_urb_size(npk);
            let slots = (0..x.urbs.unwrap_or(2))
                .map(|k| IsoSlot {
                    tag: ctx.tags.alloc(&mut ctx.rng, size),
                    id: 0,
                    inflight: false,
                    due: now + k as u64 * ctx.rng.range(3 * US, 12 * US),
                    start: 0,
                    outcome: Outcome::Ok,
                    answer: None,
                })
                .collect();
            let mut urb = ctx.data_urb(self.dev, e.addr, npk * pkt_len, URB_ISO_ASAP, 0);
            urb.npk = npk;
            urb.interval = descriptors::urb_interval(speed, &e);
            let out = (!e.dir_in()).then(|| {
                let pat = x.data.as_ref().map(|d| d.0.clone()).unwrap_or_default();
                let n = (npk * pkt_len) as usize;
                let buf: Vec<u8> = if pat.is_empty() {
                    vec![0; n]
                } else {
                    pat.iter().copied().cycle().take(n).collect()
                };
                Arc::from(buf)
            });
            self.isos.push(IsoEp {
                urb,
                pkt_len,
                pkt_ns,
                unit,
                slots,
                next_start: now + MS,
                out,
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
        let check = check_answer;
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
        for iso in &mut self.isos {
            let (urb, pl) = (iso.urb, iso.pkt_len);
            if let Some(sl) = iso.slots.iter_mut().find(|s| s.inflight && s.id == a.id) {
                check_iso(&a, &urb, pl)?;
                if sl.answer.is_some() {
                    return Err(format!("completed URB {} twice", a.id));
                }
                sl.answer = Some(a);
                return Ok(());
            }
        }
        if self.unlinked.contains(&a.id) {
            return Ok(());
        }
        {
            let mut g = self.program.lock_ok();
            if g.pending.remove(&a.id) {
                g.done.insert(a.id, (a.status, a.actual, a.data, a.pkts));
                return Ok(());
            }
        }
        Err(format!("completed URB {}, which is not in flight", a.id))
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
                let s = c.setup;
                self.cur = None;
                self.set_interface_done(ctx, &s, status);
                return Ok(Some(now + ctx.gap()));
            }
            if now >= c.deadline {
                // usb_control_msg timed out and killed the URB.
                let (id, tag, fresh) = (c.id, c.urb.tag, c.fresh);
                ctx.complete(dev, tag, now, ENOENT, 0, None, vec![], 0, 0);
                if fresh {
                    ctx.tags.free(tag, URB_SIZE);
                }
                let s = c.setup;
                self.cur = None;
                self.set_interface_done(ctx, &s, ENOENT);
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
            setup: s,
            fresh,
            deadline: now + self.ctrl_timeout,
            result: None,
        };
        let next = if self.remote || to_peer(&s) {
            self.send(submit_line(id, &urb, req.out.as_deref()))?;
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

    /// After a SET_INTERFACE of the driver: the interface is in the setting,
    /// or (failed) its endpoints stay idle.
    fn set_interface_done(&mut self, ctx: &mut Ctx, s: &[u8; 8], status: i32) {
        if s[0] != 0x01 || s[1] != 0x0b {
            return;
        }
        let (alt, num) = (s[2], s[4]);
        if status == 0 {
            if let Some(a) = ctx
                .dev_mut(self.dev)
                .and_then(|d| d.alt.get_mut(num as usize))
            {
                *a = alt;
            }
        } else {
            tracing::warn!(
                "usb {}: SET_INTERFACE {num} setting {alt} failed ({status}): its endpoints stay idle",
                self.name
            );
            self.failed.push(num);
        }
    }

    /// CLEAR_FEATURE(ENDPOINT_HALT) after a stall: the peer's with
    /// `ep0: peer`, else answered by monfs.
    fn halt(&mut self, dev: DevId, ep: u8) {
        if self.remote {
            let s = setup(0x02, 0x01, 0, ep as u16, 0);
            self.ctrl
                .push_back(CtrlReq::new(s, None, Some(self.class_tag)));
        } else {
            self.runner.q.push_back(clear_halt(dev, ep, self.class_tag));
        }
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
                        let sdata = e.urb.submit_data(ctx, &e.out);
                        ctx.submit(dev, e.urb, now, sdata, vec![]);
                        let polls = if outcome == Outcome::Ok {
                            1
                        } else {
                            ctx.rng.range(1, 4)
                        };
                        e.due = now + polls * e.unit;
                        if let Some(t) = e.timeout {
                            e.deadline = now + t;
                            e.due = e.due.min(e.deadline);
                        }
                        let e = &self.eps[i];
                        let line = submit_line(id, &e.urb, e.out.as_deref());
                        self.send(line)?;
                    }
                }
            } else if now >= self.eps[i].due {
                let e = &mut self.eps[i];
                let (tag, id) = (e.urb.tag, e.id);
                let again = if e.every > 0 {
                    e.every
                } else {
                    ctx.rng.range(8 * US, 40 * US)
                };
                if e.outcome != Outcome::Ok {
                    // An injected fault ends the URB; the peer forgets it.
                    let st = e.outcome.status();
                    e.inflight = false;
                    e.answer = None;
                    ctx.complete(dev, tag, now, st, 0, None, vec![], 0, 0);
                    if e.outcome == Outcome::Stall {
                        let ep = e.urb.ep | if e.urb.dir_in { 0x80 } else { 0 };
                        self.halt(dev, ep);
                    }
                    self.eps[i].due = now + ctx.rng.range(MS, 3 * MS).max(again);
                    self.forget(id);
                    self.send(format!("unlink {id} {st}\n"))?;
                } else if let Some(a) = e.answer.take() {
                    e.inflight = false;
                    let data = (!a.data.is_empty()).then(|| Arc::from(a.data));
                    ctx.complete(dev, tag, now, a.status, a.actual, data, vec![], 0, 0);
                    if a.status == EPIPE {
                        let ep = e.urb.ep | if e.urb.dir_in { 0x80 } else { 0 };
                        self.halt(dev, ep);
                    }
                    self.eps[i].due = now + again;
                } else if e.timeout.is_some() && now >= e.deadline {
                    // libusb's timeout: the URB is discarded (usb_unlink_urb).
                    e.inflight = false;
                    ctx.complete(dev, tag, now, ECONNRESET, 0, None, vec![], 0, 0);
                    self.eps[i].due = now + again;
                    self.forget(id);
                    self.send(format!("unlink {id} {ECONNRESET}\n"))?;
                } else {
                    // Nothing yet (NAK): poll again next interval.
                    let k = (now - e.due) / e.unit + 1;
                    e.due += k * e.unit;
                    if e.timeout.is_some() {
                        e.due = e.due.min(e.deadline);
                    }
                }
            }
            let due = self.eps[i].due;
            next = Some(next.map_or(due, |n| n.min(due)));
        }
        for k in 0..self.isos.len() {
            for j in 0..self.isos[k].slots.len() {
                let sl = &self.isos[k].slots[j];
                if now >= sl.due {
                    if sl.inflight {
                        self.iso_complete(ctx, k, j, now)?;
                    } else {
                        self.iso_submit(ctx, k, j, now)?;
                    }
                }
                let due = self.isos[k].slots[j].due;
                next = Some(next.map_or(due, |n| n.min(due)));
            }
        }
        Ok(next)
    }

    /// Submit isochronous URB `j` of endpoint `k` for the next free
    /// (micro)frames, as URB_ISO_ASAP does.
    fn iso_submit(&mut self, ctx: &mut Ctx, k: usize, j: usize, now: u64) -> Result<(), String> {
        let dev = self.dev;
        let mut outcome = ctx.take_error(dev);
        if outcome == Outcome::Stall {
            outcome = Outcome::Proto(EPROTO); // isochronous endpoints do not stall
        }
        let iso = &mut self.isos[k];
        let npk = iso.urb.npk;
        let dur = npk as u64 * iso.pkt_ns;
        let earliest = iso.next_start.max(now + iso.pkt_ns);
        let start = earliest.div_ceil(iso.unit) * iso.unit;
        iso.next_start = start + dur;
        let mut urb = iso.urb;
        urb.tag = iso.slots[j].tag;
        let pl = iso.pkt_len;
        let out = iso.out.clone();
        let sl = &mut iso.slots[j];
        sl.outcome = outcome;
        sl.start = start;
        sl.answer = None;
        if outcome == Outcome::SubmitError {
            // Refused; tried again when its frames would have ended.
            ctx.submit_error(dev, urb, now, EXDEV);
            sl.due = start + dur;
            return Ok(());
        }
        let descs = (0..npk)
            .map(|i| IsoDesc {
                status: EXDEV,
                offset: i * pl,
                length: pl,
            })
            .collect();
        let sdata = Some(out.clone().unwrap_or_else(|| ctx.empty.clone()));
        ctx.submit(dev, urb, now, sdata, descs);
        let id = self.next_id;
        self.next_id += 1;
        let sl = &mut self.isos[k].slots[j];
        sl.id = id;
        sl.inflight = true;
        sl.due = start + dur + ctx.rng.range(0, 60 * US);
        let lens = vec![pl; npk as usize];
        let line = submit_line_iso(id, &urb, out.as_deref(), &lens);
        self.send(line)
    }

    /// Isochronous URB `j` of endpoint `k` reaches the end of its frames:
    /// it completes with the peer's packets, or with every packet missed
    /// (-18) if the peer has not answered in time.
    fn iso_complete(&mut self, ctx: &mut Ctx, k: usize, j: usize, now: u64) -> Result<(), String> {
        let dev = self.dev;
        let iso = &mut self.isos[k];
        let (npk, pl, dir_in) = (iso.urb.npk, iso.pkt_len, iso.urb.dir_in);
        let out = iso.out.clone();
        let sl = &mut iso.slots[j];
        sl.inflight = false;
        sl.due = now + ctx.rng.range(5 * US, 40 * US);
        let (tag, id, outcome) = (sl.tag, sl.id, sl.outcome);
        let frame = ((sl.start / MS) & 0x7ff) as i32;
        let answer = sl.answer.take();
        let missed = |st| -> Vec<IsoDesc> {
            (0..npk)
                .map(|i| IsoDesc {
                    status: st,
                    offset: i * pl,
                    length: 0,
                })
                .collect()
        };
        // IN: the buffer as it was (nothing written).
        let untouched = || dir_in.then(|| Arc::from(vec![0u8; (npk * pl) as usize]));
        let unlink = match (outcome, answer) {
            (Outcome::Unlink, _) => {
                // Killed by the driver (usb_kill_urb).
                let d = untouched();
                ctx.complete(dev, tag, now, ENOENT, 0, d, missed(EXDEV), frame, 0);
                Some(ENOENT)
            }
            (_, None) => {
                let (n, d) = (npk as i32, untouched());
                ctx.complete(dev, tag, now, 0, 0, d, missed(EXDEV), frame, n);
                Some(EXDEV)
            }
            (_, Some(a)) => {
                let mut pkts = a.pkts.unwrap_or_default();
                let mut buf = if dir_in {
                    vec![0u8; (npk * pl) as usize]
                } else {
                    vec![]
                };
                let mut at = 0usize;
                for (i, p) in pkts.iter().enumerate() {
                    let n = p.1 as usize;
                    if dir_in {
                        let o = i * pl as usize;
                        buf[o..o + n].copy_from_slice(&a.data[at..at + n]);
                    }
                    at += n;
                }
                if let Outcome::Proto(st) = outcome {
                    // An injected error garbles one packet.
                    let b = ctx.rng.below(npk as u64) as usize;
                    pkts[b] = (st, 0);
                    if dir_in {
                        let o = b * pl as usize;
                        buf[o..o + pl as usize].fill(0);
                    }
                }
                let descs: Vec<IsoDesc> = pkts
                    .iter()
                    .enumerate()
                    .map(|(i, p)| IsoDesc {
                        status: p.0,
                        offset: i as u32 * pl,
                        length: p.1,
                    })
                    .collect();
                let actual = pkts.iter().map(|p| p.1).sum();
                let errs = pkts.iter().filter(|p| p.0 != 0).count() as i32;
                let data = if dir_in { Some(Arc::from(buf)) } else { out };
                ctx.complete(dev, tag, now, 0, actual, data, descs, frame, errs);
                None
            }
        };
        match unlink {
            Some(st) => {
                self.forget(id);
                self.send(format!("unlink {id} {st}\n"))
            }
            None => Ok(()),
        }
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
        // The peer's clear-halt requests (`ep0: peer`).
        let c = if self.cur.is_some() || !self.ctrl.is_empty() {
            self.step_ctrl(ctx, now)?
        } else {
            None
        };
        let e = self.step_eps(ctx, now)?;
        let mut next = match (c, e) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if !self.program.lock_ok().pending.is_empty() {
            // A program's URB waits for the peer: look for its answer soon.
            next = Some(next.map_or(now + POLL, |n| n.min(now + POLL)));
        }
        // Nothing to poll: look for a peer that ends now and then.
        Ok(Some(next.unwrap_or(now + 100 * MS)))
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
        let a = parse_answer(b"complete 9 0 3 0a0b0c 0:2 -84:0 0:1").unwrap();
        assert_eq!(a.pkts, Some(vec![(0, 2), (-84, 0), (0, 1)]));
        let a = parse_answer(b"complete 9 0 8 - 0:4 -18:0 0:4").unwrap();
        assert_eq!((a.data.len(), a.pkts.map(|p| p.len())), (0, Some(3)));
        for bad in [
            &b"complete x 0 0"[..],
            b"complete 1 5 0",
            b"complete 1 0 2 0a",
            b"complete 1 0 1 0g",
            b"complete 1 0 1 0a extra",
            b"complete 1 0 70000",
            b"submit 1 0 0",
            b"complete -1 0 0",
            b"complete 1 0 4 - 0:4 5:0",
            b"complete 1 0 4 - 0:x",
            b"complete 1 0 4 - 0",
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
