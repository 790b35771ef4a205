//! Replay for programs: a device taken from a capture (`from-capture`)
//! answers a program's requests from the capture's transfers, in order,
//! as umockdev's pcap replay does. A cursor per device walks the
//! recorded transfers: a request is answered by the first recorded
//! transfer after the cursor that matches it as umockdev matches a
//! submission (for control: the same setup packet; else the same endpoint
//! and length; an OUT transfer's data too, where the capture holds it),
//! and the cursor moves past it. Standard requests the
//! capture does not have there are answered from the descriptors (the
//! core's own knowledge). Anything else is a request the capture does not
//! have: a log line says so, and the device does not answer it, as a
//! device that stopped answering (it NAKs): the URB stays pending until
//! the program gives up on it (a synchronous transfer's timeout is
//! -ETIMEDOUT, a discarded URB -ENOENT).

use std::sync::Arc;

use super::ctx::*;

/// What a program's request is matched on, as umockdev matches a
/// submission: a control transfer's setup packet, else its endpoint and
/// length; an OUT transfer's data too, where the capture has all of it.
struct Want<'a> {
    ep: u8,
    setup: Option<&'a [u8; 8]>,
    len: u32,
    out: Option<&'a [u8]>,
}

/// The next recorded transfer matching `w` after the device's cursor; the
/// cursor moves past it.
fn next(ctx: &mut Ctx, d: DevId, w: Want<'_>) -> Option<(i32, u32, Arc<[u8]>)> {
    let dev = ctx.dev(d)?;
    let rec = dev.desc.recorded.clone()?;
    let from = dev.core.replay_pos;
    let same_out = |t: &crate::capture::recorded::RecordedTransfer| match (&t.out, w.out) {
        (Some(rec), Some(got)) => &rec[..] == got,
        _ => true,
    };
    let pos = rec.transfers[from.min(rec.transfers.len())..]
        .iter()
        .position(|t| {
            let shape = match w.setup {
                Some(s) => t.setup.as_ref() == Some(s),
                None => t.ep == w.ep && t.setup.is_none() && (t.len == w.len || t.len == u32::MAX),
            };
            shape && same_out(t)
        })?
        + from;
    let t = &rec.transfers[pos];
    if let Some(x) = ctx.dev_mut(d) {
        x.core.replay_pos = pos + 1;
    }
    Some((t.status, t.actual, t.data.clone()))
}

fn unknown(ctx: &Ctx, d: DevId, what: String) {
    let (path, packet) = ctx
        .dev(d)
        .and_then(|x| {
            let r = x.desc.recorded.as_ref()?;
            let at = x
                .core
                .replay_pos
                .checked_sub(1)
                .and_then(|i| r.transfers.get(i));
            Some((r.path.display().to_string(), at.map(|t| t.packet)))
        })
        .unwrap_or_default();
    let after = match packet {
        Some(p) => format!("after packet {p}, the last one answered"),
        None => "from its start".into(),
    };
    tracing::warn!(
        "usb {}: a program's {what} is not in the capture {path} {after}: the device does \
         not answer it (as a device that stopped answering: it stays pending until the \
         program gives up)",
        ctx.dev_name(d)
    );
}

/// Standard requests the core answers from what it knows of the device.
fn standard(s: &[u8; 8]) -> bool {
    matches!(
        (s[0], s[1]),
        (0x80, 0x06)
            | (0x80, 0x00)
            | (0x81, 0x00)
            | (0x82, 0x00)
            | (0x80, 0x08)
            | (0x81, 0x0a)
            | (0x00, 0x09)
            | (0x01, 0x0b)
            | (0x02, 0x01)
    )
}

/// A program's control request to a recorded device: Some((status, IN
/// data)), or None: no answer.
pub(crate) fn control(
    ctx: &mut Ctx,
    d: DevId,
    s: &[u8; 8],
    out: Option<&[u8]>,
) -> Option<(i32, Option<Vec<u8>>)> {
    let ep = if s[0] & 0x80 != 0 { 0x80 } else { 0 };
    let want = Want {
        ep,
        setup: Some(s),
        len: u16::from_le_bytes([s[6], s[7]]) as u32,
        out: out.filter(|_| ep == 0),
    };
    if let Some((status, actual, data)) = next(ctx, d, want) {
        let n = (actual as usize).min(data.len());
        return Some((status, (ep != 0).then(|| data[..n].to_vec())));
    }
    if standard(s) {
        let (st, data) = ctx.handle_ctrl(d, s, out);
        return Some((st, data));
    }
    unknown(
        ctx,
        d,
        format!(
            "control request {}",
            s.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ),
    );
    None
}

/// When and how a replayed transfer completes: time, status, actual
/// length, IN data.
pub(crate) type Replayed = (u64, i32, u32, Option<Arc<[u8]>>);

/// A program's data transfer to a recorded device: Some((when, status,
/// actual, IN data)), or None: no answer.
pub(crate) fn data(
    ctx: &mut Ctx,
    d: DevId,
    urb: &Urb,
    out: Option<&[u8]>,
    now: u64,
) -> Option<Replayed> {
    let ep = urb.ep | if urb.dir_in { 0x80 } else { 0 };
    let want = Want {
        ep,
        setup: None,
        len: urb.len,
        out: out.filter(|_| !urb.dir_in),
    };
    match next(ctx, d, want) {
        Some((status, actual, data)) => {
            let actual = actual.min(urb.len);
            let data = (urb.dir_in && actual > 0)
                .then(|| Arc::from(&data[..(actual as usize).min(data.len())]));
            let lat = ctx.rng.range(50 * US, 300 * US);
            Some((now + lat, status, actual, data))
        }
        None => {
            unknown(ctx, d, format!("transfer on endpoint {ep:02x}"));
            None
        }
    }
}
