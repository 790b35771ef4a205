//! The line protocol between monfs and an external device's peer (see
//! docs/external-devices.md): the `hello`, `submit` and `unlink` lines monfs
//! writes, and the `complete` lines it reads, parsed strictly and checked
//! against the URB they complete.

use super::super::ctx::{Urb, EPROTO, EXDEV};
use super::error::{AnswerError, PeerError};
use crate::usbmon::event::XferType;

/// The protocol version in the `hello` line.
pub(crate) const VERSION: u32 = 1;
/// Most packets of an isochronous URB.
pub(crate) const MAX_PACKETS: usize = 64;
/// Longest line the peer may send: a completion of 64 KiB of control data
/// (wLength's limit) in hex, with room for its words and the results of
/// [`MAX_PACKETS`] isochronous packets.
pub(crate) const MAX_LINE: usize = 2 * 65535 + 64 + MAX_PACKETS * 13;
/// Statuses of an isochronous packet: success, missed (-18), and the
/// protocol errors (-62, -63 buffer error, -70 -71 -75 -84).
const PKT_STATUSES: [i32; 8] = [0, EXDEV, -62, -63, -70, EPROTO, -75, -84];
/// Completion statuses a peer may give: success, stall, protocol errors
/// (CRC/timeout, babble, bit stuffing, no response) and a short packet.
const STATUSES: [i32; 7] = [0, -32, -71, -75, -84, -62, -121];

/// A completion the peer sent.
#[derive(Debug)]
pub(crate) struct Answer {
    /// The URB's id in its `submit` line.
    pub id: u64,
    /// Its status.
    pub status: i32,
    /// Its actual length.
    pub actual: u32,
    /// IN data (empty for none).
    pub data: Vec<u8>,
    /// Isochronous: each packet's status and actual length.
    pub pkts: Option<Vec<(i32, u32)>>,
}

/// At most 40 characters of a bad line, for the log.
fn quote(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(40)]);
    format!("{s:?}{}", if b.len() > 40 { "..." } else { "" })
}

/// `complete ID STATUS ACTUAL [DATA [ST:LEN...]]`.
pub(crate) fn parse_answer(line: &[u8]) -> Result<Answer, PeerError> {
    let bad = |what: &'static str| PeerError::Garbage {
        what,
        line: quote(line),
    };
    let s = std::str::from_utf8(line).map_err(|_| bad("not UTF-8"))?;
    let mut w = s.split(' ');
    if w.next() != Some("complete") {
        return Err(bad("not a complete line"));
    }
    let mut num = |none: &'static str, wrong: &'static str| -> Result<i64, PeerError> {
        let v = w.next().ok_or_else(|| bad(none))?;
        if v.is_empty() || v.len() > 20 {
            return Err(bad(wrong));
        }
        v.parse::<i64>().map_err(|_| bad(wrong))
    };
    let id = num("no id", "bad id")?;
    let status = num("no status", "bad status")?;
    let actual = num("no actual length", "bad actual length")?;
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
pub(crate) fn check_iso(a: &Answer, urb: &Urb, pl: u32) -> Result<(), AnswerError> {
    let Some(p) = &a.pkts else {
        return Err(AnswerError::NoPackets(a.id));
    };
    if a.status != 0 {
        return Err(AnswerError::IsoStatus {
            id: a.id,
            status: a.status,
        });
    }
    if p.len() != urb.npk as usize {
        return Err(AnswerError::PacketCount {
            id: a.id,
            got: p.len(),
            want: urb.npk,
        });
    }
    if p.iter().any(|x| x.1 > pl) {
        return Err(AnswerError::PacketTooLong { id: a.id, len: pl });
    }
    if p.iter().map(|x| x.1).sum::<u32>() != a.actual {
        return Err(AnswerError::PacketSum(a.id));
    }
    check_data(a, urb)
}

/// IN data exactly the actual length, no data for OUT.
fn check_data(a: &Answer, urb: &Urb) -> Result<(), AnswerError> {
    if urb.dir_in && a.data.len() != a.actual as usize {
        return Err(AnswerError::NoData(a.id));
    }
    if !urb.dir_in && !a.data.is_empty() {
        return Err(AnswerError::OutData(a.id));
    }
    Ok(())
}

/// A `submit` line of a non-isochronous URB.
pub(crate) fn submit_line(id: u64, urb: &Urb, out: Option<&[u8]>) -> String {
    submit_line_iso(id, urb, out, &[])
}

/// A `submit` line; isochronous URBs add each packet's length.
pub(crate) fn submit_line_iso(id: u64, urb: &Urb, out: Option<&[u8]>, pkts: &[u32]) -> String {
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

/// An `unlink` line: the host gave up on URB `id` with `status`.
pub(crate) fn unlink_line(id: u64, status: i32) -> String {
    format!("unlink {id} {status}\n")
}

/// The `hello` line of the device at `path` (dotted ports) on `bus`.
pub(crate) fn hello_line(bus: u16, path: &str, speed: &str) -> String {
    format!("hello {VERSION} {bus} {path} {speed}\n")
}

/// An answer to a bulk, interrupt or control URB: at most its length, IN
/// data exactly the actual length, no data for OUT, no packet results.
pub(crate) fn check_answer(a: &Answer, urb: &Urb) -> Result<(), AnswerError> {
    if a.actual > urb.len {
        return Err(AnswerError::TooLong {
            id: a.id,
            actual: a.actual,
            len: urb.len,
        });
    }
    check_data(a, urb)?;
    if a.pkts.is_some() {
        return Err(AnswerError::NotIso(a.id));
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
        assert_eq!(
            parse_answer(b"complete x 0 0").unwrap_err().to_string(),
            "answered garbage (bad id): \"complete x 0 0\""
        );
    }
}
