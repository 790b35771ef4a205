//! The walk's rules on hand-written captures: what the differential tests
//! against umockdev (tests/umockdev.rs) cannot check, since umockdev has
//! none of them (passing a submission nobody makes, a completion of a
//! transfer submitted before the capture) or since umockdev gets them
//! only by the program's timing (a discard moving the walk on).

use std::sync::Arc;

use crate::base::clock::Timestamp;
use crate::base::sync::LockExt;
use crate::capture::write::{write_events, Format, LinkType};
use crate::sim::usb::usbfs_port::tests::{Collect, Done, TestClock};
use crate::sim::usb::UsbSim;
use crate::usbcore::device::{TransferType, UrbRequest, UsbCorePort, UsbDevice};
use crate::usbmon::event::{DataCapture, EventKind, UrbEvent, XferType};

const MS: u64 = 1_000_000;

/// A vendor device: interface 0 with bulk IN 0x81, bulk OUT 0x02 and
/// interrupt IN 0x85 (4 bytes).
fn dump() -> Vec<u8> {
    let mut d = vec![
        18, 1, 0, 2, 0xff, 0, 0, 64, 0x34, 0x12, 0x79, 0x56, 1, 0, 0, 0, 0, 1,
    ];
    d.extend([9, 2, 39, 0, 1, 1, 0, 0x80, 50]);
    d.extend([9, 4, 0, 0, 3, 0xff, 0, 0, 0]);
    d.extend([7, 5, 0x81, 2, 0, 2, 0]);
    d.extend([7, 5, 0x02, 2, 0, 2, 0]);
    d.extend([7, 5, 0x85, 3, 4, 0, 4]);
    d
}

/// One record of device 9 on bus 1 (endpoint with its direction bit):
/// `len` is an `S` record's URB length, a `C` record's actual length.
fn rec(id: u64, kind: EventKind, xfer: XferType, ep: u8, len: u32, data: &[u8]) -> UrbEvent {
    UrbEvent {
        id,
        kind,
        xfer,
        bus: 1,
        devnum: 9,
        epnum: ep & 0x0f,
        dir_in: ep & 0x80 != 0,
        ts: Timestamp {
            mono_ns: id,
            wall_ns: 1_700_000_000_000_000_000 + id * 1000,
        },
        status: if kind == EventKind::Submit { -115 } else { 0 },
        transfer_buffer_length: len,
        actual_length: if kind == EventKind::Submit { 0 } else { len },
        interval: if xfer == XferType::Interrupt { 4 } else { 0 },
        start_frame: 0,
        error_count: 0,
        xfer_flags: 0,
        setup: None,
        iso: vec![],
        data: (!data.is_empty()).then(|| Arc::from(data)),
        data_capture: DataCapture::Full,
    }
}

/// A control submission with `setup` (its OUT data `out`).
fn control(id: u64, setup: [u8; 8], out: &[u8]) -> UrbEvent {
    let len = u16::from_le_bytes([setup[6], setup[7]]) as u32;
    let mut e = rec(
        id,
        EventKind::Submit,
        XferType::Control,
        setup[0] & 0x80,
        len,
        out,
    );
    e.setup = Some(setup);
    e
}

/// The device from-capture with `events` as its capture, its interface
/// taken by a program, the bus run 3 s.
fn device(dir: &std::path::Path, events: &[UrbEvent]) -> (UsbSim, UsbDevice) {
    device_with(dir, events, "", Arc::new(Collect::default()))
}

/// [`device`] with `extra` keys in the device's entry (`, key: value`),
/// its bus's usbmon events into `sink`.
fn device_with(
    dir: &std::path::Path,
    events: &[UrbEvent],
    extra: &str,
    sink: Arc<Collect>,
) -> (UsbSim, UsbDevice) {
    let cap = dir.join("c.pcapng");
    write_events(&cap, events, Format::PcapNg, LinkType::Mmapped).unwrap();
    let desc = dir.join("d.desc");
    std::fs::write(&desc, dump()).unwrap();
    let y = format!(
        "seed: 5\nusb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {{port: 1, kind: from-capture, capture: {}, devaddr: 9, capture_bus: 1, descriptors: {}, devnum: 9{}}}\n",
        cap.display(),
        desc.display(),
        extra
    );
    let cfg = crate::sim::usb::load::parse_config(&y, "/t.yaml").unwrap();
    let sim = UsbSim::run_for_test(&cfg.usb, 5, 3000, Arc::new(TestClock), sink);
    let dev = sim
        .devices()
        .into_iter()
        .find(|d| !d.is_root_hub())
        .unwrap();
    sim.claim_interface(dev.dev, 0, 9).unwrap();
    (sim, dev)
}

fn urb(xfer: TransferType, endpoint: u8, length: u32) -> UrbRequest {
    UrbRequest {
        xfer,
        endpoint,
        setup: None,
        length,
        out: vec![],
        flags: 0,
        iso_lengths: vec![],
        interval: 0,
        stream_id: 0,
        start_frame: 0,
    }
}

/// The tags of the URBs given back so far, in order, with their data.
fn given_back(got: &Done) -> Vec<(u64, Vec<u8>)> {
    got.0
        .lock_ok()
        .iter()
        .map(|(t, r)| (*t, r.data.clone()))
        .collect()
}

/// A capture of a device a kernel driver had holds the driver's class
/// request (SET_IDLE), which no program makes: with no URB it matched
/// waiting, the walk goes on to the next submission a waiting URB matches
/// (umockdev would stay stuck there).
#[test]
fn a_submission_nobody_makes_is_passed_when_no_matched_urb_waits() {
    let td = tempfile::tempdir().unwrap();
    let mut ev = vec![control(1, [0x21, 0x0a, 0, 0, 0, 0, 0, 0], &[])];
    let mut c = rec(1, EventKind::Complete, XferType::Control, 0, 0, &[]);
    c.transfer_buffer_length = 0;
    ev.push(c);
    ev.push(rec(2, EventKind::Submit, XferType::Interrupt, 0x85, 4, &[]));
    ev.push(rec(
        2,
        EventKind::Complete,
        XferType::Interrupt,
        0x85,
        4,
        &[1, 2, 3, 4],
    ));
    let (sim, dev) = device(td.path(), &ev);
    let got = Arc::new(Done::default());
    let t = sim
        .submit(dev.dev, urb(TransferType::Interrupt, 0x85, 4), got.clone())
        .unwrap();
    sim.run_until(3100 * MS);
    assert_eq!(given_back(&got), [(t, vec![1, 2, 3, 4])]);
}

/// With a URB it matched waiting, the walk waits at a submission nobody
/// made yet, as umockdev's does: the bulk IN submitted after the
/// interrupt IN does not complete while the recorded vendor request
/// before it is not made. Once the program discards the interrupt IN, no
/// URB the walk matched waits, and it goes on to the bulk IN.
#[test]
fn a_matched_urb_holds_the_walk_until_the_program_discards_it() {
    let td = tempfile::tempdir().unwrap();
    let ev = vec![
        rec(1, EventKind::Submit, XferType::Interrupt, 0x85, 4, &[]),
        control(2, [0x40, 0x07, 0, 0, 0, 0, 0, 0], &[]),
        rec(3, EventKind::Submit, XferType::Bulk, 0x81, 512, &[]),
        rec(3, EventKind::Complete, XferType::Bulk, 0x81, 3, b"xyz"),
        rec(
            1,
            EventKind::Complete,
            XferType::Interrupt,
            0x85,
            4,
            &[1, 2, 3, 4],
        ),
    ];
    let (sim, dev) = device(td.path(), &ev);
    let got = Arc::new(Done::default());
    let int = sim
        .submit(dev.dev, urb(TransferType::Interrupt, 0x85, 4), got.clone())
        .unwrap();
    let bulk = sim
        .submit(dev.dev, urb(TransferType::Bulk, 0x81, 512), got.clone())
        .unwrap();
    sim.run_until(4000 * MS);
    assert_eq!(given_back(&got), []);
    sim.cancel(dev.dev, int).unwrap();
    sim.run_until(4100 * MS);
    let back = given_back(&got);
    assert_eq!(back.len(), 2, "{back:?}");
    assert_eq!(back[0].0, int);
    assert_eq!(got.0.lock_ok()[0].1.status, -2);
    assert_eq!(back[1], (bulk, b"xyz".to_vec()));
}

/// A completion of a transfer submitted before the capture started (its
/// `S` record is not in it) completes a waiting URB of its endpoint,
/// whatever its length; umockdev passes over it.
#[test]
fn a_completion_submitted_before_the_capture_answers_a_urb_of_its_endpoint() {
    let td = tempfile::tempdir().unwrap();
    let ev = vec![
        rec(
            1,
            EventKind::Complete,
            XferType::Interrupt,
            0x85,
            4,
            &[9, 8, 7, 6],
        ),
        rec(2, EventKind::Submit, XferType::Interrupt, 0x85, 4, &[]),
        rec(
            2,
            EventKind::Complete,
            XferType::Interrupt,
            0x85,
            4,
            &[1, 2, 3, 4],
        ),
    ];
    let (sim, dev) = device(td.path(), &ev);
    let got = Arc::new(Done::default());
    let a = sim
        .submit(dev.dev, urb(TransferType::Interrupt, 0x85, 8), got.clone())
        .unwrap();
    sim.run_until(3100 * MS);
    let b = sim
        .submit(dev.dev, urb(TransferType::Interrupt, 0x85, 4), got.clone())
        .unwrap();
    sim.run_until(3200 * MS);
    assert_eq!(
        given_back(&got),
        [(a, vec![9, 8, 7, 6]), (b, vec![1, 2, 3, 4])]
    );
}

/// `replay_timing: recorded`: a bulk IN transfer that took 500 ms in the
/// recording completes no earlier than 500 ms after the program submitted
/// it (usbmon's `S` and `C` times, the bus's clock); by default at the
/// bus's pace, well before; under `timing: fast` no earlier than 500 µs
/// (a thousandth, as every latency).
#[test]
fn recorded_timing_keeps_the_recorded_delay() {
    use crate::config::Timing;
    for (extra, timing, least) in [
        ("", Timing::Realistic, None),
        (
            ", replay_timing: recorded",
            Timing::Realistic,
            Some(500 * MS),
        ),
        (", replay_timing: recorded", Timing::Fast, Some(500_000)),
    ] {
        let td = tempfile::tempdir().unwrap();
        let mut c = rec(1, EventKind::Complete, XferType::Bulk, 0x81, 3, b"xyz");
        c.ts.wall_ns += 500 * MS;
        let ev = vec![rec(1, EventKind::Submit, XferType::Bulk, 0x81, 512, &[]), c];
        let sink = Arc::new(Collect::default());
        let (sim, dev) = device_with(td.path(), &ev, extra, sink.clone());
        sim.set_timing(timing);
        let got = Arc::new(Done::default());
        let t = sim
            .submit(dev.dev, urb(TransferType::Bulk, 0x81, 512), got.clone())
            .unwrap();
        sim.run_until(4000 * MS);
        assert_eq!(given_back(&got), [(t, b"xyz".to_vec())], "{extra}");
        // The URB's events: the last of its tag (the enumeration's URBs
        // had it before).
        let at = |kind| {
            let evs = sink.0.lock_ok();
            let e = evs.iter().rfind(|e| e.id == t && e.kind == kind);
            e.map(|e| e.ts.mono_ns).unwrap()
        };
        let took = at(EventKind::Complete) - at(EventKind::Submit);
        match least {
            Some(l) => assert!(took >= l, "{extra} {timing:?}: {took} ns"),
            // The bus's pace: the time of 3 bytes and the device's answer.
            None => assert!(took < 500_000, "{took} ns"),
        }
        if timing == Timing::Fast {
            assert!(took < 500 * MS, "{took} ns");
        }
    }
}
