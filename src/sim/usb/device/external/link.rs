//! The device's side of an external device's peer: the open peer (or why
//! it could not start), the URB ids handed to it and those it must forget.
//! With `ep0: peer` it is the device's [`Ep0Link`] from its plugging until
//! the class driver takes it over (the hub driver's enumeration requests
//! go to it); the class driver then keeps it.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::config::{DeviceKind, Ep0Owner};

use super::super::super::ctx::*;
use super::super::super::descriptors::Speed;
use super::super::super::driver::peer_loop::ctrl_timeout;
use super::super::super::peer::protocol::Answer;
use super::super::super::peer::protocol::{check_answer, hello_line, submit_line, unlink_line};
use super::super::super::peer::{AnswerError, Peer, PeerError, LINE_COST, OUTBOX_BYTES};

/// Unlinked URB ids remembered, so that late answers to them are ignored:
/// as many as lines can wait for the peer ([`OUTBOX_BYTES`] of them, each
/// costing at least [`LINE_COST`]: 16,384), and as many again for the
/// lines in the pipe or socket and the peer's own buffers. 32,768 ids take
/// under 1 MiB with their set, counted in the device's charge.
const UNLINKED: usize = 2 * OUTBOX_BYTES / LINE_COST;

/// The `hello` line for device `d`, and the name the log gives it.
pub(super) fn hello(ctx: &Ctx, d: DevId) -> (String, String) {
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
        hello_line(ctx.bus, &path, speed),
        format!("bus {} port {path}", ctx.bus),
    )
}

/// A device's peer and the URB ids it knows.
pub(crate) struct Link {
    pub(super) peer: Option<Peer>,
    /// Why the peer could not start (reported at the first use).
    start_error: Option<PeerError>,
    /// The next URB id: one counter with the drivers' data URBs
    /// ([`ProgramPeer::ids`]).
    next_id: Arc<AtomicU64>,
    unlinked: RecentIds<UNLINKED>,
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
    let l = Link::open(ctx, d);
    if let Some(dev) = ctx.dev_mut(d) {
        dev.ep0 = Some(Box::new(l));
        dev.remote_ep0 = true;
    }
}

impl Link {
    /// Start (or connect to) the peer of device `d` and greet it.
    pub(super) fn open(ctx: &Ctx, d: DevId) -> Link {
        let cfg = ctx.dev(d).and_then(|x| x.cfg.as_ref());
        let mut l = Link::gone(ctrl_timeout(cfg));
        let (line, _) = hello(ctx, d);
        match Peer::open(cfg) {
            Ok(p) => {
                let _ = p.send(line);
                l.peer = Some(p);
                l.start_error = None;
            }
            Err(e) => l.start_error = Some(e),
        }
        l
    }

    /// A link whose peer is gone.
    pub(super) fn gone(timeout: u64) -> Link {
        Link {
            peer: None,
            start_error: Some(PeerError::Gone),
            next_id: Arc::new(AtomicU64::new(1)),
            unlinked: RecentIds::default(),
            timeout,
        }
    }

    /// Queue a line for the peer.
    pub(super) fn send(&self, line: String) -> Result<(), PeerError> {
        match &self.peer {
            Some(p) => p.send(line),
            None => Err(PeerError::Gone),
        }
    }

    /// A fresh URB id.
    pub(super) fn id(&mut self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The counter of URB ids, shared with the drivers' data URBs.
    pub(super) fn ids(&self) -> Arc<AtomicU64> {
        self.next_id.clone()
    }

    /// URB `id` is no longer in flight: a late answer to it is ignored.
    pub(super) fn forget(&mut self, id: u64) {
        self.unlinked.insert(id);
    }

    /// The host gave up on URB `id`: forget it and tell the peer.
    pub(super) fn give_up(&mut self, id: u64, status: i32) -> Result<(), PeerError> {
        self.forget(id);
        self.send(unlink_line(id, status))
    }

    /// Whether URB `id` was forgotten.
    pub(super) fn forgotten(&self, id: u64) -> bool {
        self.unlinked.contains(id)
    }

    /// The peer's answers so far, and why it is done if it is; Err: it
    /// never started.
    pub(super) fn answers(&mut self) -> Result<(VecDeque<Answer>, Option<PeerError>), PeerError> {
        if let Some(e) = self.start_error.take() {
            return Err(e);
        }
        Ok(match &self.peer {
            Some(p) => p.take(),
            None => (VecDeque::new(), None),
        })
    }

    /// Let the peer go (the device is gone): its input closes.
    pub(super) fn close(&mut self) {
        self.peer = None;
    }
}

impl Ep0Link for Link {
    fn submit(&mut self, urb: &Urb, out: Option<&[u8]>) -> Result<u64, PeerError> {
        if let Some(e) = self.start_error.take() {
            return Err(e);
        }
        let id = self.id();
        self.send(submit_line(id, urb, out))?;
        Ok(id)
    }

    fn poll(&mut self, id: u64, urb: &Urb) -> Result<Option<CtrlResult>, PeerError> {
        let Some(p) = &self.peer else {
            return Err(PeerError::Gone);
        };
        let (answers, end) = p.take();
        let mut got = None;
        for a in answers {
            if a.id == id && got.is_none() {
                check_answer(&a, urb)?;
                let data = urb.dir_in.then(|| Arc::from(a.data));
                got = Some((a.status, a.actual, data));
            } else if !self.forgotten(a.id) {
                return Err(AnswerError::NotInFlight(a.id).into());
            }
        }
        match end {
            Some(e) => Err(e),
            None => Ok(got),
        }
    }

    fn unlink(&mut self, id: u64, status: i32) -> Result<(), PeerError> {
        self.give_up(id, status)
    }

    fn timeout(&self) -> u64 {
        self.timeout
    }

    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}
