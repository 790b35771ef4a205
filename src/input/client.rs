//! An open evdev file's side of the core (`struct evdev_client`): its
//! ring of events (SYN_DROPPED when it overflows), its masks and clock,
//! and what a frame from the device puts in it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::base::sync::LockExt;
use crate::base::vfs::WakerSlot;

use super::codes::*;

/// `sizeof(struct input_event)` on 64-bit Linux.
pub const EVENT_SIZE: usize = 24;
/// `EVDEV_MIN_BUFFER_SIZE`.
const MIN_BUFFER: usize = 64;
/// `EVDEV_BUF_PACKETS`.
const BUF_PACKETS: usize = 8;

/// Clients' IDs (grab owners).
static CLIENT_IDS: AtomicU64 = AtomicU64::new(1);

/// The time of a frame on each clock (`input_get_timestamp`): real,
/// monotonic, boot.
pub(crate) struct Stamps([(i64, i64); 3]);

impl Stamps {
    pub(crate) fn now() -> Stamps {
        use nix::time::{clock_gettime, ClockId};
        let get = |c| clock_gettime(c).map_or((0, 0), |t| (t.tv_sec(), t.tv_nsec() / 1000));
        Stamps([
            get(ClockId::CLOCK_REALTIME),
            get(ClockId::CLOCK_MONOTONIC),
            get(ClockId::CLOCK_BOOTTIME),
        ])
    }
}

#[derive(Clone, Copy, Default)]
pub(super) struct Event {
    sec: i64,
    usec: i64,
    ty: u16,
    code: u16,
    value: i32,
}

impl Event {
    pub(super) fn bytes(&self) -> [u8; EVENT_SIZE] {
        let mut b = [0u8; EVENT_SIZE];
        b[0..8].copy_from_slice(&self.sec.to_ne_bytes());
        b[8..16].copy_from_slice(&self.usec.to_ne_bytes());
        b[16..18].copy_from_slice(&self.ty.to_ne_bytes());
        b[18..20].copy_from_slice(&self.code.to_ne_bytes());
        b[20..24].copy_from_slice(&self.value.to_ne_bytes());
        b
    }
}

/// An open file's ring (`struct evdev_client`).
pub(super) struct Ring {
    pub(super) buf: Vec<Event>,
    pub(super) head: usize,
    pub(super) tail: usize,
    pub(super) packet_head: usize,
    /// 0 real, 1 monotonic, 2 boot (`enum input_clock_type`).
    pub(super) clk: usize,
    pub(super) masks: Vec<Option<Bits>>,
    /// The time of the last frame passed, for a SYN_DROPPED of its own.
    last: [(i64, i64); 3],
}

impl Ring {
    /// An empty ring of `size` events (a power of two), the real-time
    /// clock's, no masks.
    fn new(size: usize) -> Ring {
        Ring {
            buf: vec![Event::default(); size],
            head: 0,
            tail: 0,
            packet_head: 0,
            clk: 0,
            masks: vec![None; EV_CNT],
            last: [(0, 0); 3],
        }
    }

    pub(super) fn mask(&self) -> usize {
        self.buf.len() - 1
    }

    /// `__evdev_is_filtered`.
    fn filtered(&self, ty: u16, code: u16) -> bool {
        if ty == EV_SYN || ty as usize >= EV_CNT {
            return false;
        }
        if self.masks[0].as_ref().is_some_and(|m| !m.test(ty as usize)) {
            return true;
        }
        let Some(cnt) = mask_count(ty) else {
            return false;
        };
        if code as usize >= cnt {
            return false;
        }
        self.masks[ty as usize]
            .as_ref()
            .is_some_and(|m| !m.test(code as usize))
    }

    /// `__pass_event`.
    fn push(&mut self, e: Event) {
        let m = self.mask();
        self.buf[self.head] = e;
        self.head = (self.head + 1) & m;
        if self.head == self.tail {
            // Overflow: keep the newest event after a SYN_DROPPED.
            self.tail = self.head.wrapping_sub(2) & m;
            self.buf[self.tail] = Event {
                sec: e.sec,
                usec: e.usec,
                ty: EV_SYN,
                code: SYN_DROPPED,
                value: 0,
            };
            self.packet_head = self.tail;
        }
        if e.ty == EV_SYN && e.code == SYN_REPORT {
            self.packet_head = self.head;
        }
    }

    /// `__evdev_queue_syn_dropped`.
    pub(super) fn syn_dropped(&mut self) {
        let (sec, usec) = self.last[self.clk];
        let m = self.mask();
        self.buf[self.head] = Event {
            sec,
            usec,
            ty: EV_SYN,
            code: SYN_DROPPED,
            value: 0,
        };
        self.head = (self.head + 1) & m;
        if self.head == self.tail {
            self.tail = self.head.wrapping_sub(1) & m;
            self.packet_head = self.tail;
        }
    }

    /// `__evdev_flush_queue`: drop the queued events of type `ty` (and
    /// frames left empty).
    pub(super) fn flush(&mut self, ty: u16) {
        let m = self.mask();
        let mut head = self.tail;
        self.packet_head = self.tail;
        let mut num = 1;
        let mut i = self.tail;
        while i != self.head {
            let e = self.buf[i];
            let report = e.ty == EV_SYN && e.code == SYN_REPORT;
            i = (i + 1) & m;
            if e.ty == ty || (report && num == 0) {
                continue;
            }
            self.buf[head] = e;
            num += 1;
            head = (head + 1) & m;
            if report {
                num = 0;
                self.packet_head = head;
            }
        }
        self.head = head;
    }
}

/// `evdev_get_mask_cnt`: the codes a type's mask has (0: none).
pub(super) fn mask_count(ty: u16) -> Option<usize> {
    match ty {
        EV_SYN => Some(EV_CNT),
        1..=0x1f => max_code(ty).filter(|_| ty != EV_REP).map(|m| m + 1),
        _ => None,
    }
}

/// An open file of the node (`struct evdev_client`).
pub(crate) struct Client {
    pub(crate) id: u64,
    pub(super) ring: Mutex<Ring>,
    pub(super) waker: WakerSlot,
    pub(super) revoked: AtomicBool,
}

impl Client {
    /// `evdev_open`'s client: a ring of `evdev_compute_buffer_size` events
    /// for a device of `caps` (no multi-touch slots).
    pub(super) fn new(caps: &Capabilities) -> Client {
        // input_estimate_events_per_packet
        let mut per_packet = 1 + 7;
        for ty in [EV_ABS, EV_REL] {
            if caps.has_type(ty) {
                per_packet += caps.bits[ty as usize].ones().count();
            }
        }
        let size = (per_packet * BUF_PACKETS)
            .max(MIN_BUFFER)
            .next_power_of_two();
        Client {
            id: CLIENT_IDS.fetch_add(1, Ordering::SeqCst),
            ring: Mutex::new(Ring::new(size)),
            waker: WakerSlot::default(),
            revoked: AtomicBool::new(false),
        }
    }

    /// `evdev_pass_values`.
    pub(crate) fn pass(&self, vals: &[(u16, u16, i32)], now: &Stamps) {
        if self.revoked.load(Ordering::SeqCst) {
            return;
        }
        let mut wake = false;
        {
            let mut r = self.ring.lock_ok();
            let (sec, usec) = now.0[r.clk];
            r.last = now.0;
            for &(ty, code, value) in vals {
                if r.filtered(ty, code) {
                    continue;
                }
                if ty == EV_SYN && code == SYN_REPORT {
                    if r.packet_head == r.head {
                        continue;
                    }
                    wake = true;
                }
                r.push(Event {
                    sec,
                    usec,
                    ty,
                    code,
                    value,
                });
            }
        }
        if wake {
            self.wake();
        }
    }

    pub(crate) fn wake(&self) {
        self.waker.wake();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(ty: u16, code: u16, value: i32) -> Event {
        Event {
            ty,
            code,
            value,
            ..Default::default()
        }
    }

    #[test]
    fn an_overflowing_ring_keeps_the_newest_event_after_syn_dropped() {
        let mut r = Ring::new(4);
        for v in 0..4 {
            r.push(ev(EV_KEY, 30, v));
        }
        let mut got = Vec::new();
        while r.tail != r.head {
            let e = r.buf[r.tail];
            got.push((e.ty, e.code, e.value));
            r.tail = (r.tail + 1) & 3;
        }
        assert_eq!(got, [(EV_SYN, SYN_DROPPED, 0), (EV_KEY, 30, 3)]);
    }

    #[test]
    fn a_flush_drops_one_type_and_the_frames_it_empties_but_the_first() {
        let mut r = Ring::new(16);
        for e in [
            ev(EV_KEY, 30, 1),
            ev(EV_SYN, SYN_REPORT, 0),
            ev(4, 4, 7),
            ev(EV_KEY, 31, 1),
            ev(EV_SYN, SYN_REPORT, 0),
        ] {
            r.push(e);
        }
        r.flush(EV_KEY);
        let mut got = Vec::new();
        let mut i = r.tail;
        while i != r.head {
            got.push((r.buf[i].ty, r.buf[i].code));
            i = (i + 1) & 15;
        }
        // A leading SYN_REPORT stays (the kernel counts from 1).
        assert_eq!(got, [(EV_SYN, SYN_REPORT), (4, 4), (EV_SYN, SYN_REPORT)]);
        assert_eq!(r.packet_head, r.head);
    }
}
