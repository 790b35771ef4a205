//! A driver's URB to a device answered by a peer process, through the
//! channel programs' URBs take ([`ProgramPeer`]): its `submit` line, the
//! peer's answer (collected in [`PeerAnswers`] apart from programs', and
//! checked against the URB), and its `unlink` when the driver gives up on
//! it.

use crate::base::sync::LockExt;
use crate::sim::usb::ctx::*;
use crate::sim::usb::peer::protocol::{check_answer, submit_line, unlink_line, Answer};
use crate::sim::usb::peer::PeerError;

/// Device `d`'s peer as its drivers reach it; Err: it has none (it is
/// gone).
pub(super) fn peer(ctx: &Ctx, d: DevId) -> Result<&ProgramPeer, PeerError> {
    ctx.dev(d)
        .and_then(|x| x.core.peer.as_ref())
        .ok_or(PeerError::Gone)
}

/// The peer's answer to a driver's URB `id`, if it came: the
/// [`Answer`] it gave.
pub(super) fn take(p: &ProgramPeer, id: u64) -> Option<Answer> {
    (p.poll)();
    let (status, actual, data, pkts) = p.answers.lock_ok().take(id)?;
    Some(Answer {
        id,
        status,
        actual,
        data,
        pkts,
    })
}

/// Send URB `urb` of a driver (OUT data `out`) to device `d`'s peer: its
/// id there.
pub(super) fn send(ctx: &Ctx, d: DevId, urb: &Urb, out: Option<&[u8]>) -> Result<u64, PeerError> {
    let p = peer(ctx, d)?;
    let id = p.id();
    p.answers.lock_ok().drivers.insert(id);
    p.tx.send(submit_line(id, urb, out))?;
    Ok(id)
}

/// The peer's answer to URB `id` (`urb`) of a driver, if it came, checked
/// against the URB.
pub(super) fn answer(ctx: &Ctx, d: DevId, id: u64, urb: &Urb) -> Result<Option<Answer>, PeerError> {
    let p = peer(ctx, d)?;
    let Some(a) = take(p, id) else {
        return Ok(None);
    };
    check_answer(&a, urb).map_err(PeerError::from)?;
    Ok(Some(a))
}

/// One step of a driver's task on device `d`, `run`: when to run next;
/// None once the device is unplugged (its model lets the peer go, the hub
/// driver ends what is in flight) or the peer misbehaved, which unplugs
/// the device ([`Ctx::peer_gone`]).
pub(super) fn step(
    ctx: &mut Ctx,
    d: DevId,
    now: u64,
    run: impl FnOnce(&mut Ctx) -> Result<Option<u64>, PeerError>,
) -> Option<u64> {
    if !ctx.alive(d) {
        return None;
    }
    match run(ctx) {
        Ok(next) => next,
        Err(why) => {
            ctx.peer_gone(d, &why, now);
            None
        }
    }
}

/// The driver gave up on its URB `id` (killed it with `status`): the peer
/// is told, and a late answer to it is let go.
pub(super) fn give_up(ctx: &Ctx, d: DevId, id: u64, status: i32) -> Result<(), PeerError> {
    let Some(p) = ctx.dev(d).and_then(|x| x.core.peer.as_ref()) else {
        return Ok(());
    };
    p.answers.lock_ok().give_up(id);
    p.tx.send(unlink_line(id, status))
}
