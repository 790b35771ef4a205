//! The bus as a host controller (see `ctx::endpoint`): programs' URBs on
//! one endpoint are given back in submission order whoever answers them,
//! bulk URBs take their bytes' time on the bus, isochronous URBs take their
//! frames one after another, and fast timing gives the same events as
//! realistic timing.

use std::sync::Arc;

use super::scsi::cbw;
use super::usbfs_port::tests::{Collect, Done, TestClock};
use super::UsbSim;
use crate::base::sync::LockExt;
use crate::config::{Config, Timing};
use crate::usbcore::device::{CoreRequest, TransferType, UrbRequest, UsbCorePort, UsbDevice};
use crate::usbmon::event::{EventKind, UrbEvent, XferType};

const MS: u64 = 1_000_000;

/// One bus with `devices` (YAML flow maps), run for 3 s: the simulator,
/// its events and its devices but the root hub.
fn bus(devices: &[&str], controller: &str) -> (UsbSim, Arc<Collect>, Vec<UsbDevice>) {
    let mut y = format!(
        "seed: 5\nusb:\n  buses:\n    - bus: 1\n      controller: {controller}\n      devices:\n"
    );
    for d in devices {
        y.push_str(&format!("        - {d}\n"));
    }
    let cfg = super::load::parse_config(&y, "/t.yaml").unwrap();
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::run_for_test(&cfg.usb, 5, 3000, Arc::new(TestClock), sink.clone());
    let devs: Vec<UsbDevice> = sim
        .devices()
        .into_iter()
        .filter(|d| !d.is_root_hub())
        .collect();
    (sim, sink, devs)
}

/// Whether device `dev` of bus 1 has its function (what it sends).
fn has_function(sim: &UsbSim, dev: &UsbDevice) -> bool {
    let bus = sim.bus(1).unwrap();
    let g = bus.lock();
    g.ctx
        .dev(dev.dev.id as usize)
        .is_some_and(|d| d.function_in.is_some())
}

/// Take interface `intf` of `dev` from its driver for a program.
fn take(sim: &UsbSim, dev: &UsbDevice, intf: u8, now_ms: &mut u64) {
    let done = Arc::new(Done::default());
    sim.request(dev.dev, CoreRequest::DetachDriver(intf), done.clone())
        .unwrap();
    *now_ms += 100;
    sim.run_until(*now_ms * MS);
    assert_eq!(done.0.lock_ok().len(), 1);
    sim.claim_interface(dev.dev, intf, 9).unwrap();
}

/// A program's core request `r` on `dev`, run for `ms`: its status.
fn ask(sim: &UsbSim, dev: &UsbDevice, r: CoreRequest, now_ms: &mut u64, ms: u64) -> i32 {
    let done = Arc::new(Done::default());
    sim.request(dev.dev, r, done.clone()).unwrap();
    *now_ms += ms;
    sim.run_until(*now_ms * MS);
    let st = done.0.lock_ok()[0].1.status;
    st
}

/// A program's SET_INTERFACE on `dev`, run for 100 ms: its status.
fn set_interface(sim: &UsbSim, dev: &UsbDevice, interface: u8, alt: u8, now_ms: &mut u64) -> i32 {
    ask(
        sim,
        dev,
        CoreRequest::SetInterface { interface, alt },
        now_ms,
        100,
    )
}

fn urb(xfer: TransferType, endpoint: u8, length: u32, npk: usize) -> UrbRequest {
    let dir_in = endpoint & 0x80 != 0;
    UrbRequest {
        xfer,
        endpoint,
        setup: None,
        length: length * npk.max(1) as u32,
        out: if dir_in {
            vec![]
        } else {
            vec![0x5a; (length * npk.max(1) as u32) as usize]
        },
        flags: if dir_in { 0x200 } else { 0 },
        iso_lengths: vec![length; npk],
        interval: 0,
        stream_id: 0,
        start_frame: 0,
    }
}

/// Submit `n` URBs like `r`; their tags in submission order.
fn submit_n(sim: &UsbSim, dev: &UsbDevice, r: &UrbRequest, n: usize, got: &Arc<Done>) -> Vec<u64> {
    (0..n)
        .map(|_| sim.submit(dev.dev, r.clone(), got.clone()).unwrap())
        .collect()
}

fn done_tags(got: &Done) -> Vec<u64> {
    got.0.lock_ok().iter().map(|(t, _)| *t).collect()
}

/// The first C events of `tags`, in the order they came (the sink
/// cleared before they were submitted: a freed tag is reused).
fn completions(sink: &Collect, tags: &[u64]) -> Vec<UrbEvent> {
    sink.0
        .lock_ok()
        .iter()
        .filter(|e| e.kind == EventKind::Complete && tags.contains(&e.id))
        .take(tags.len())
        .cloned()
        .collect()
}

#[test]
fn queued_interrupt_urbs_get_the_keyboards_reports_in_submission_order() {
    let (sim, sink, devs) = bus(&["{port: 1, kind: hid-keyboard}"], "xhci");
    let mut now = 3000;
    take(&sim, &devs[0], 0, &mut now);
    sink.0.lock_ok().clear();
    let got = Arc::new(Done::default());
    let tags = submit_n(
        &sim,
        &devs[0],
        &urb(TransferType::Interrupt, 0x81, 8, 0),
        4,
        &got,
    );
    sim.run_until((now + 5000) * MS);
    // A device's reports go to the URB at the head of the endpoint's
    // queue (monfs once gave them to #0, #3, #2, #1).
    assert_eq!(done_tags(&got), tags);
    // One report per poll of the endpoint (8 ms at high speed), as the
    // keyboard types: never two in one poll.
    let at: Vec<u64> = completions(&sink, &tags)
        .iter()
        .map(|e| e.ts.mono_ns)
        .collect();
    assert_eq!(at.len(), 4);
    for w in at.windows(2) {
        assert!(w[1] >= w[0] + 8 * MS, "{at:?}");
    }
}

/// usbhid's interrupt IN loop ends when a program detaches it (its URB
/// killed, -108) and one new loop starts when the program attaches it
/// again, however often that happens: one URB on the endpoint, never
/// more, and none while usbhid is away.
#[test]
fn usbhid_detached_and_attached_again_polls_with_one_urb() {
    let (sim, sink, devs) = bus(&["{port: 1, kind: hid-keyboard}"], "xhci");
    let kbd = &devs[0];
    let mut now = 3000;
    let ask = |r: CoreRequest, now: &mut u64, ms: u64| ask(&sim, kbd, r, now, ms);
    let int_in = |e: &UrbEvent| e.devnum == kbd.devnum && e.xfer == XferType::Interrupt;
    for _ in 0..5 {
        assert_eq!(ask(CoreRequest::DetachDriver(0), &mut now, 500), 0);
        let evs: Vec<UrbEvent> = sink.0.lock_ok().drain(..).collect();
        let killed = evs.iter().rposition(|e| int_in(e) && e.status == -108);
        let killed = killed.expect("usbhid's URB killed");
        assert!(
            !evs[killed..]
                .iter()
                .any(|e| int_in(e) && e.kind == EventKind::Submit),
            "usbhid submitted while detached"
        );
        assert_eq!(ask(CoreRequest::AttachDriver(0), &mut now, 500), 1);
    }
    sink.0.lock_ok().clear();
    now += 3000;
    sim.run_until(now * MS);
    let evs: Vec<UrbEvent> = sink.0.lock_ok().drain(..).collect();
    let mut ids: Vec<u64> = evs.iter().filter(|e| int_in(e)).map(|e| e.id).collect();
    assert!(ids.len() > 4, "usbhid does not poll: {ids:?}");
    ids.dedup();
    assert_eq!(ids.len(), 1, "more than one usbhid URB");
}

/// usb-storage detached and attached again probes again, as its new
/// probe does in the kernel: GET_MAX_LUN, then the SCSI scan's first
/// command (INQUIRY), on one stream; usbtest's stream starts over.
#[test]
fn usb_storage_attached_again_probes_again() {
    for entry in [
        "{port: 1, kind: mass-storage}",
        "{port: 1, kind: flood, rate: 2000}",
    ] {
        let (sim, sink, devs) = bus(&[entry], "ehci");
        let dev = &devs[0];
        let mut now = 3000;
        let ask = |r: CoreRequest, now: &mut u64| ask(&sim, dev, r, now, 500);
        assert_eq!(ask(CoreRequest::DetachDriver(0), &mut now), 0);
        sink.0.lock_ok().clear();
        assert_eq!(ask(CoreRequest::AttachDriver(0), &mut now), 1);
        now += 1000;
        sim.run_until(now * MS);
        let evs: Vec<UrbEvent> = sink.0.lock_ok().drain(..).collect();
        let mine: Vec<&UrbEvent> = evs.iter().filter(|e| e.devnum == dev.devnum).collect();
        let bulk_out = |e: &UrbEvent| {
            e.kind == EventKind::Submit && e.xfer == XferType::Bulk && e.epnum == 0x02
        };
        if dev.interfaces[0].class == 8 {
            // The flash drive: GET_MAX_LUN first, then a CBW of INQUIRY.
            let lun = mine
                .iter()
                .position(|e| e.setup.is_some_and(|s| s[..2] == [0xa1, 0xfe]));
            let lun = lun.unwrap_or_else(|| {
                panic!(
                    "no GET_MAX_LUN after the attach: {:?}",
                    mine.iter()
                        .take(12)
                        .map(|e| (e.kind, e.xfer, e.epnum, e.setup, e.status))
                        .collect::<Vec<_>>()
                )
            });
            let cbw = mine[lun..].iter().find(|e| bulk_out(e)).expect("no CBW");
            let data = cbw.data.as_deref().unwrap_or(&[]);
            assert_eq!((&data[..4], data.get(15)), (&b"USBC"[..], Some(&0x12)));
        }
        // One stream: never two of the driver's bulk OUT URBs in flight.
        assert!(
            mine.iter().any(|e| bulk_out(e)),
            "no bulk OUT after the attach"
        );
        let mut inflight = 0i32;
        for e in mine
            .iter()
            .filter(|e| e.xfer == XferType::Bulk && e.epnum == 0x02)
        {
            inflight += if e.kind == EventKind::Submit { 1 } else { -1 };
            assert!(inflight <= 1, "two bulk OUT URBs in flight");
        }
    }
}

/// A dump given a report descriptor gets usbhid as a HID device does: its
/// probe's requests (GET_DESCRIPTOR(REPORT) answered with the configured
/// bytes), then one interrupt URB that the device never answers.
#[test]
fn a_dumps_usbhid_probes_and_keeps_an_unanswered_urb() {
    let dump = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/sysfs/qemu-usb-kbd/descriptors"
    );
    let report = "05010906a101750195080507 19e029e715002501810295017508810195057501\
        0508190129059102950175039101950675081500 25ff0507190029ff8100c0";
    let entry = format!(
        "{{port: 1, kind: descriptors, descriptors: {dump}, report_descriptors: {{0: \"{report}\"}}}}"
    );
    let (_sim, sink, devs) = bus(&[&entry], "xhci");
    let kbd = &devs[0];
    let evs: Vec<UrbEvent> = sink.0.lock_ok().clone();
    let mine: Vec<&UrbEvent> = evs.iter().filter(|e| e.devnum == kbd.devnum).collect();
    let at = mine
        .iter()
        .position(|e| e.setup.is_some_and(|s| s[..4] == [0x81, 0x06, 0x00, 0x22]))
        .expect("no GET_DESCRIPTOR(REPORT)");
    let answer = mine[at..]
        .iter()
        .find(|e| e.kind == EventKind::Complete && e.id == mine[at].id)
        .expect("no answer");
    assert_eq!((answer.status, answer.actual_length), (0, 63));
    let int: Vec<&&UrbEvent> = mine
        .iter()
        .filter(|e| e.xfer == XferType::Interrupt)
        .collect();
    assert_eq!(int.len(), 1, "one S, no C: {int:?}");
    assert_eq!((int[0].kind, int[0].length()), (EventKind::Submit, 8));
}

#[test]
fn bulk_urbs_complete_in_order_at_the_rate_of_a_high_speed_bus() {
    let (sim, sink, devs) = bus(&["{port: 1, kind: flood}"], "xhci");
    let mut now = 3000;
    take(&sim, &devs[0], 0, &mut now);
    for (ep, len, n) in [(0x81u8, 16384u32, 8usize), (0x02, 16384, 8), (0x81, 512, 8)] {
        let got = Arc::new(Done::default());
        sink.0.lock_ok().clear();
        let tags = submit_n(
            &sim,
            &devs[0],
            &urb(TransferType::Bulk, ep, len, 0),
            n,
            &got,
        );
        now += 1000;
        sim.run_until(now * MS);
        assert_eq!(done_tags(&got), tags, "ep {ep:02x}");
        let c = completions(&sink, &tags);
        let first = c.first().unwrap().ts.mono_ns;
        let last = c.last().unwrap().ts.mono_ns;
        // n URBs back to back: each one's bytes take their time on a bus
        // carrying 13 x 512 bytes a 125 us microframe (53.2 MB/s), and
        // nothing else slows them.
        let per_urb = (len as u64 * 125_000).div_ceil(13 * 512);
        let span = last - first;
        let want = per_urb * (n as u64 - 1);
        assert!(span >= want, "ep {ep:02x}: {span} ns < {want}");
        assert!(
            span * 9 <= want * 10,
            "ep {ep:02x}: {span} ns, below 90% of the bus"
        );
        assert!(got
            .0
            .lock_ok()
            .iter()
            .all(|(_, r)| r.status == 0 && r.actual_length == len));
    }
}

/// The flood gadget's source answers usbtest's loop and a program alike:
/// usbtest's IN URBs get the device function's buffer, and a program's
/// bulk IN URB (usbtest detached) gets the same bytes, over and over for
/// as many as it asks.
#[test]
fn usbtest_and_a_program_read_the_same_gadget_source() {
    let (sim, sink, devs) = bus(&["{port: 1, kind: flood, rate: 2000}"], "xhci");
    let ins: Vec<Arc<[u8]>> = sink
        .0
        .lock_ok()
        .iter()
        .filter(|e| e.kind == EventKind::Complete && e.xfer == XferType::Bulk && e.dir_in)
        .filter(|e| e.status == 0)
        .map(|e| e.data.clone().expect("IN data"))
        .collect();
    assert!(ins.len() > 100, "{} IN completions", ins.len());
    let src = &ins[0];
    assert_eq!(src.len(), 512);
    assert!(ins.iter().all(|d| d == src), "the source's one buffer");
    let mut now = 3000;
    take(&sim, &devs[0], 0, &mut now);
    let got = Arc::new(Done::default());
    submit_n(
        &sim,
        &devs[0],
        &urb(TransferType::Bulk, 0x81, 1200, 0),
        1,
        &got,
    );
    now += 100;
    sim.run_until(now * MS);
    let r = got.0.lock_ok()[0].1.clone();
    assert_eq!((r.status, r.actual_length), (0, 1200));
    let want: Vec<u8> = src.iter().copied().cycle().take(1200).collect();
    assert_eq!(r.data, want);
}

/// usbtest's URBs carry the flags its simple_alloc_urb and simple_io give
/// them (URB_NO_TRANSFER_DMA_MAP; URB_ZERO_PACKET on OUT, URB_SHORT_NOT_OK
/// on IN), with usb_submit_urb's URB_DIR_IN.
#[test]
fn usbtests_urbs_carry_the_kernels_transfer_flags() {
    let (_sim, sink, _devs) = bus(&["{port: 1, kind: flood, rate: 2000}"], "xhci");
    let flags: std::collections::BTreeSet<(bool, u32)> = sink
        .0
        .lock_ok()
        .iter()
        .filter(|e| e.xfer == XferType::Bulk && e.kind == EventKind::Submit)
        .map(|e| (e.dir_in, e.xfer_flags))
        .collect();
    assert_eq!(
        flags.into_iter().collect::<Vec<_>>(),
        [(false, 0x044), (true, 0x205)]
    );
}

#[test]
fn queued_isochronous_urbs_take_their_frames_one_after_another() {
    // The audio device (full speed): isochronous OUT 0x01 in interface 1,
    // one 192-byte packet a 1 ms frame.
    let (sim, sink, devs) = bus(&["{port: 1, kind: audio}"], "ohci");
    let mut now = 3000;
    take(&sim, &devs[0], 1, &mut now);
    let got = Arc::new(Done::default());
    sink.0.lock_ok().clear();
    let r = urb(TransferType::Iso, 0x01, 192, 8);
    let tags = submit_n(&sim, &devs[0], &r, 60, &got);
    let submitted = sink
        .0
        .lock_ok()
        .iter()
        .find(|e| e.kind == EventKind::Submit && e.id == tags[0])
        .unwrap()
        .ts
        .mono_ns;
    sim.run_until((now + 2000) * MS);
    assert_eq!(done_tags(&got), tags);
    let c = completions(&sink, &tags);
    assert!(c
        .iter()
        .all(|e| e.xfer == XferType::Iso && e.error_count == 0));
    // 60 URBs of 8 packets span 480 frames, one packet a frame.
    let span = c.last().unwrap().ts.mono_ns - submitted;
    assert!(span >= 480 * MS, "{span} ns");
    for w in c.windows(2) {
        assert_eq!(w[1].ts.mono_ns - w[0].ts.mono_ns, 8 * MS);
        assert_eq!(w[1].start_frame, (w[0].start_frame + 8) & 0xffff);
    }
    let results = got.0.lock_ok();
    assert!(results[0]
        .1
        .iso
        .iter()
        .all(|p| p.status == 0 && p.actual_length == 192));
    assert_eq!(results[1].1.start_frame, c[1].start_frame);
}

/// The events of a seeded bus with `device` (a YAML flow map) in `timing`
/// for `run_ms`, with the fields that do not depend on time.
fn seeded_events(device: &str, timing: Timing, run_ms: u64) -> Vec<String> {
    let y = format!(
        "seed: 11\nusb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {device}\n"
    );
    let cfg = Config::parse(&y, "t").unwrap();
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::new(&cfg.usb, 11, Arc::new(TestClock), sink.clone());
    sim.set_timing(timing);
    // In steps, until a class driver's first data URB (a flood gadget
    // makes millions of events a simulated second after it).
    let step = (run_ms / 100).max(1);
    for k in 1..=run_ms / step {
        sim.run_until(k * step * MS);
        if sink
            .0
            .lock_ok()
            .iter()
            .any(|e| e.kind == EventKind::Submit && e.xfer != XferType::Control && e.devnum >= 2)
        {
            break;
        }
    }
    let evs = sink.0.lock_ok();
    evs.iter()
        .map(|e| {
            format!(
                "{:?} {:x} {:?} {} {} {} {} {} {:?} {:?}",
                e.kind,
                e.id,
                e.xfer,
                e.devnum,
                e.epnum,
                e.status,
                e.transfer_buffer_length,
                e.actual_length,
                e.setup,
                e.data
            )
        })
        .collect()
}

#[test]
fn fast_timing_gives_the_same_enumeration_in_a_fraction_of_the_time() {
    // Every built-in kind (and a hub with a device behind it), seeded: the
    // same events, tags, statuses, lengths and bytes in both timings, from
    // the first request to the class driver's first data URB (what follows
    // goes at the pace of the simulated user or stream, not a latency:
    // keys typed, frames sent), in a hundredth of the simulated time.
    for device in [
        "{port: 1, kind: hid-keyboard}",
        "{port: 1, kind: hid-mouse}",
        "{port: 1, kind: hid-tablet}",
        "{port: 1, kind: mass-storage}",
        "{port: 1, kind: audio}",
        "{port: 1, kind: webcam}",
        "{port: 1, kind: flood}",
        "{port: 1, kind: hub, devices: [{port: 1, kind: hid-keyboard}]}",
    ] {
        let real = seeded_events(device, Timing::Realistic, 3000);
        let fast = seeded_events(device, Timing::Fast, 30);
        let upto = |v: &[String]| -> usize {
            v.iter()
                .position(|l| {
                    l.starts_with("Submit")
                        && (l.contains(" Bulk ")
                            || l.contains(" Iso ")
                            || l.contains(" Interrupt 2 1 ")
                            || l.contains(" Interrupt 3 1 "))
                })
                .unwrap_or_else(|| panic!("{device}: no data URB in {v:#?}"))
        };
        let (nr, nf) = (upto(&real), upto(&fast));
        let (real, fast) = (&real[..=nr], &fast[..=nf]);
        assert!(real.len() > 20, "{device}: {}", real.len());
        if let Some(i) = (0..real.len().min(fast.len())).find(|&i| real[i] != fast[i]) {
            panic!("{device}: event {i}: {} != {}", real[i], fast[i]);
        }
        assert_eq!(real.len(), fast.len(), "{device}");
    }
}

#[test]
fn every_interface_keeps_its_altsetting() {
    // A vendor device of six interfaces, each with settings 0 and 1
    // (monfs once kept the first four only, and stalled GET_INTERFACE of
    // the others).
    let td = tempfile::tempdir().unwrap();
    let mut rest = Vec::new();
    for i in 0..6u8 {
        for a in 0..2u8 {
            rest.extend_from_slice(&[9, 4, i, a, 0, 0xff, 0, 0, 0]);
        }
    }
    let total = (9 + rest.len()) as u16;
    let mut dump = vec![
        18, 1, 0, 2, 0, 0, 0, 64, 0x34, 0x12, 0x78, 0x56, 1, 0, 0, 0, 0, 1,
    ];
    dump.extend_from_slice(&[9, 2, total as u8, (total >> 8) as u8, 6, 1, 0, 0x80, 50]);
    dump.extend_from_slice(&rest);
    let path = td.path().join("six.desc");
    std::fs::write(&path, &dump).unwrap();
    let dev = format!(
        "{{port: 1, kind: descriptors, descriptors: {}}}",
        path.display()
    );
    let (sim, _sink, devs) = bus(&[&dev], "xhci");
    let mut now = 3000;
    for i in [1u8, 5] {
        assert_eq!(
            set_interface(&sim, &devs[0], i, 1, &mut now),
            0,
            "SET_INTERFACE {i}"
        );
    }
    let text = sim.devices_text();
    let active: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("I:*") && l.contains("Cls=ff"))
        .collect();
    assert_eq!(active.len(), 6, "{text}");
    for (i, l) in active.iter().enumerate() {
        let want = if i == 1 || i == 5 { "Alt= 1" } else { "Alt= 0" };
        assert!(l.contains(&format!("If#= {i} {want}")), "{l}");
    }
    // GET_INTERFACE of interface 5 answers 1.
    let got = Arc::new(Done::default());
    let mut r = urb(TransferType::Control, 0x80, 1, 0);
    r.setup = Some([0x81, 0x0a, 0, 0, 5, 0, 1, 0]);
    r.out.clear();
    sim.submit(devs[0].dev, r, got.clone()).unwrap();
    sim.run_until((now + 100) * MS);
    let g = got.0.lock_ok();
    assert_eq!((g[0].1.status, g[0].1.data.clone()), (0, vec![1]));
}

#[test]
fn a_streaming_interface_given_back_stays_without_a_driver() {
    // A program takes the webcam's streaming interface, selects setting 0
    // (no bandwidth) and gives it back (USBDEVFS_CONNECT): uvcvideo
    // matches the control interface only and claims the streaming one
    // from its probe, so nothing binds it: CONNECT gives 0, no request
    // goes out, the setting stays 0 and uvcvideo's stream stays stopped,
    // as the kernel does (measured in kernel-vm with snd-usb-audio's
    // streaming interface; monfs once rebound it and restarted the
    // stream).
    let (sim, sink, devs) = bus(&["{port: 1, kind: webcam}"], "ehci");
    let cam = &devs[0];
    let mut now = 3000;
    sink.0.lock_ok().clear();
    take(&sim, cam, 1, &mut now);
    // usb_unbind_interface put the streaming interface, left in setting 1
    // by uvcvideo, back to setting 0 before the detach returned.
    let evs: Vec<UrbEvent> = sink.0.lock_ok().clone();
    let set = evs
        .iter()
        .find(|s| {
            s.kind == EventKind::Submit
                && s.devnum == cam.devnum
                && s.setup == Some([1, 0x0b, 0, 0, 1, 0, 0, 0])
        })
        .expect("no SET_INTERFACE(1, 0)");
    assert!(evs
        .iter()
        .any(|e| e.kind == EventKind::Complete && e.id == set.id && e.status == 0));
    let req = |r: CoreRequest, now: &mut u64| {
        let done = Arc::new(Done::default());
        sim.request(cam.dev, r, done.clone()).unwrap();
        *now += 200;
        sim.run_until(*now * MS);
        let st = done.0.lock_ok()[0].1.status;
        st
    };
    assert_eq!(
        req(
            CoreRequest::SetInterface {
                interface: 1,
                alt: 0
            },
            &mut now
        ),
        0
    );
    let alt = |sim: &UsbSim| -> String {
        let t = sim.devices_text();
        t.lines()
            .find(|l| l.starts_with("I:*") && l.contains("If#= 1"))
            .unwrap()
            .to_string()
    };
    assert!(alt(&sim).contains("Alt= 0"), "{}", alt(&sim));
    sim.release_interface(cam.dev, 1, 9).unwrap();
    sink.0.lock_ok().clear();
    assert_eq!(req(CoreRequest::AttachDriver(1), &mut now), 0);
    assert!(alt(&sim).contains("Alt= 0"), "{}", alt(&sim));
    assert!(alt(&sim).contains("Driver=(none)"), "{}", alt(&sim));
    let evs = sink.0.lock_ok();
    assert!(
        !evs.iter()
            .any(|e| e.devnum == cam.devnum && e.kind == EventKind::Submit),
        "{:?}",
        evs.iter()
            .filter(|e| e.devnum == cam.devnum)
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_core_request_behind_a_control_urb_never_answered_times_out() {
    // An external device whose peer never answers: a program's vendor
    // request holds ep0's queue, so usb_set_configuration's request waits
    // behind it (SET_CONFIGURATION is monfs's to answer, not the peer's),
    // and gives up after USB_CTRL_SET_TIMEOUT (5 s) with
    // -ETIMEDOUT, as usb_control_msg does; the device stays usable.
    let td = tempfile::tempdir().unwrap();
    let mut dump = vec![
        18, 1, 0, 2, 0xff, 0, 0, 64, 0x34, 0x12, 0x78, 0x56, 1, 0, 0, 0, 0, 1,
    ];
    dump.extend_from_slice(&[9, 2, 27, 0, 1, 1, 0, 0x80, 50]);
    dump.extend_from_slice(&[9, 4, 0, 0, 0, 0xff, 0, 0, 0, 9, 4, 0, 1, 0, 0xff, 0, 0, 0]);
    let path = td.path().join("v.desc");
    std::fs::write(&path, &dump).unwrap();
    let dev = format!(
        "{{port: 1, kind: external, descriptors: {}, command: [sleep, '600']}}",
        path.display()
    );
    let (sim, _sink, devs) = bus(&[&dev], "xhci");
    let v = &devs[0];
    let got = Arc::new(Done::default());
    let mut r = urb(TransferType::Control, 0x80, 4, 0);
    r.setup = Some([0xc0, 0x01, 0, 0, 0, 0, 4, 0]);
    r.out.clear();
    let vendor = sim.submit(v.dev, r, got.clone()).unwrap();
    let done = Arc::new(Done::default());
    let req = CoreRequest::SetConfiguration(1);
    sim.request(v.dev, req.clone(), done.clone()).unwrap();
    sim.run_until(7900 * MS);
    assert!(done.0.lock_ok().is_empty(), "it waits for 5 s");
    sim.run_until(8100 * MS);
    assert!(got.0.lock_ok().is_empty(), "the peer never answers");
    assert_eq!(done.0.lock_ok()[0].1.status, -110);
    // The program gives up on its URB; ep0 serves again.
    sim.cancel(v.dev, vendor).unwrap();
    let done = Arc::new(Done::default());
    sim.request(v.dev, req, done.clone()).unwrap();
    sim.run_until(8300 * MS);
    assert_eq!(done.0.lock_ok()[0].1.status, 0);
}

#[test]
fn a_program_that_takes_the_flash_drive_talks_scsi_to_it() {
    let (sim, _sink, devs) = bus(&["{port: 1, kind: mass-storage}"], "xhci");
    let disk = &devs[0];
    let mut now = 3000;
    take(&sim, disk, 0, &mut now);
    // Bulk INs queued first wait (NAK) until a command gives them data.
    let got = Arc::new(Done::default());
    let data_in = sim
        .submit(disk.dev, urb(TransferType::Bulk, 0x81, 36, 0), got.clone())
        .unwrap();
    let csw_in = sim
        .submit(disk.dev, urb(TransferType::Bulk, 0x81, 13, 0), got.clone())
        .unwrap();
    now += 10;
    sim.run_until(now * MS);
    assert!(got.0.lock_ok().is_empty());
    let mut out = urb(TransferType::Bulk, 0x02, 31, 0);
    out.out = cbw(7, 36, true, &[0x12, 0, 0, 0, 36, 0]);
    let cmd = sim.submit(disk.dev, out, got.clone()).unwrap();
    now += 10;
    sim.run_until(now * MS);
    {
        let g = got.0.lock_ok();
        assert_eq!(
            g.iter().map(|(t, _)| *t).collect::<Vec<_>>(),
            [cmd, data_in, csw_in]
        );
        assert_eq!(&g[1].1.data[8..12], b"QEMU", "{:?}", g[1].1.data);
        assert_eq!(g[2].1.data, b"USBS\x07\0\0\0\0\0\0\0\0");
    }
    // READ(10) of block 1, then a command the drive does not know: CHECK
    // CONDITION, and REQUEST SENSE says why.
    let run = |tag: u32, len: u32, cdb: &[u8], now: &mut u64| -> (Vec<u8>, Vec<u8>) {
        let got = Arc::new(Done::default());
        let mut out = urb(TransferType::Bulk, 0x02, 31, 0);
        out.out = cbw(tag, len, true, cdb);
        sim.submit(disk.dev, out, got.clone()).unwrap();
        if len > 0 {
            sim.submit(disk.dev, urb(TransferType::Bulk, 0x81, len, 0), got.clone())
                .unwrap();
        }
        sim.submit(disk.dev, urb(TransferType::Bulk, 0x81, 13, 0), got.clone())
            .unwrap();
        *now += 10;
        sim.run_until(*now * MS);
        let g = got.0.lock_ok();
        assert!(g.iter().all(|(_, r)| r.status == 0));
        let data = if len > 0 { g[1].1.data.clone() } else { vec![] };
        (data, g.last().unwrap().1.data.clone())
    };
    let (sector, status) = run(8, 512, &[0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0], &mut now);
    assert_eq!(&sector[..18], b"MONFS-LBA-00000001");
    assert_eq!(status[12], 0);
    let (_, status) = run(9, 0, &[0xc7, 0, 0, 0, 0, 0], &mut now);
    assert_eq!(status[12], 1, "CHECK CONDITION");
    let (sense, status) = run(10, 18, &[0x03, 0, 0, 0, 18, 0], &mut now);
    assert_eq!((sense[2], sense[12], status[12]), (0x05, 0x20, 0));
    // WRITE(10) of one block: the CBW, its 512 bytes OUT, then the CSW.
    let got = Arc::new(Done::default());
    let mut out = urb(TransferType::Bulk, 0x02, 31, 0);
    out.out = cbw(11, 512, false, &[0x2a, 0, 0, 0, 0, 9, 0, 0, 1, 0]);
    sim.submit(disk.dev, out, got.clone()).unwrap();
    sim.submit(disk.dev, urb(TransferType::Bulk, 0x02, 512, 0), got.clone())
        .unwrap();
    sim.submit(disk.dev, urb(TransferType::Bulk, 0x81, 13, 0), got.clone())
        .unwrap();
    sim.run_until((now + 10) * MS);
    let g = got.0.lock_ok();
    assert_eq!(g.len(), 3);
    assert_eq!(g[2].1.data, b"USBS\x0b\0\0\0\0\0\0\0\0");
}

/// usb-storage's URBs are answered by the flash drive's SCSI target, the
/// one a program that takes the interface talks to: a drive whose target
/// names itself otherwise before usb-storage scans it gives usb-storage's
/// INQUIRY those names, and then the program's.
#[test]
fn usb_storage_and_programs_are_answered_by_the_drives_one_target() {
    let y = "seed: 5\nusb:\n  buses:\n    - bus: 1\n      controller: xhci\n      devices:\n        - {port: 1, kind: mass-storage}\n";
    let cfg = super::load::parse_config(y, "/t.yaml").unwrap();
    let inquiry_data = |evs: &[UrbEvent]| -> Option<Vec<u8>> {
        let e = evs.iter().find(|e| {
            e.kind == EventKind::Complete
                && e.xfer == XferType::Bulk
                && e.dir_in
                && e.actual_length == 36
        })?;
        Some(e.data.as_deref()?.to_vec())
    };
    // usb-storage's GET_MAX_LUN, which comes just before its scan.
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::run_for_test(&cfg.usb, 5, 3000, Arc::new(TestClock), sink.clone());
    let evs = sink.0.lock_ok().clone();
    let lun = evs
        .iter()
        .find(|e| e.kind == EventKind::Submit && e.setup.is_some_and(|s| s[..2] == [0xa1, 0xfe]))
        .expect("no GET_MAX_LUN");
    let lun_at = lun.ts.mono_ns - crate::base::clock::Clock::at(&TestClock, 0).mono_ns;
    assert_eq!(&inquiry_data(&evs).unwrap()[8..12], b"QEMU");
    drop(sim);
    // The same run, the drive's target renamed at the GET_MAX_LUN.
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::new(&cfg.usb, 5, Arc::new(TestClock), sink.clone());
    sim.run_until(lun_at);
    {
        let mut g = sim.bus(1).unwrap().lock();
        let d = g
            .ctx
            .devs
            .iter()
            .find(|(_, x)| x.kind == super::ctx::Kind::Dev(crate::config::DeviceKind::MassStorage))
            .map(|(d, _)| d)
            .unwrap();
        let dev = g.ctx.dev_mut(d).unwrap();
        assert!(dev.target.is_some(), "made when usb-storage started");
        dev.target = Some(Box::new(super::scsi::Bot::new("ACME", "Other Disk")));
    }
    sim.run_until(3000 * MS);
    let evs = sink.0.lock_ok().clone();
    let data = inquiry_data(&evs).unwrap();
    assert_eq!(&data[8..26], b"ACME    Other Disk", "{data:?}");
    // A program that takes the interface asks the same target.
    let disk = sim
        .devices()
        .into_iter()
        .find(|d| !d.is_root_hub())
        .unwrap();
    let mut now = 3000;
    take(&sim, &disk, 0, &mut now);
    let got = Arc::new(Done::default());
    let mut out = urb(TransferType::Bulk, 0x02, 31, 0);
    out.out = cbw(7, 36, true, &[0x12, 0, 0, 0, 36, 0]);
    sim.submit(disk.dev, out, got.clone()).unwrap();
    sim.submit(disk.dev, urb(TransferType::Bulk, 0x81, 36, 0), got.clone())
        .unwrap();
    sim.run_until((now + 10) * MS);
    let g = got.0.lock_ok();
    assert_eq!(&g[1].1.data[8..12], b"ACME");
}

#[test]
fn an_isochronous_packet_larger_than_the_endpoint_carries_is_emsgsize() {
    // The audio device's OUT 0x01 carries 192 bytes a frame (full speed):
    // usb_submit_urb refuses a 193-byte packet with -EMSGSIZE, and nothing
    // reaches the bus (no usbmon event).
    let (sim, sink, devs) = bus(&["{port: 1, kind: audio}"], "ohci");
    let mut now = 3000;
    take(&sim, &devs[0], 1, &mut now);
    sink.0.lock_ok().clear();
    let got = Arc::new(Done::default());
    let r = sim.submit(
        devs[0].dev,
        urb(TransferType::Iso, 0x01, 193, 2),
        got.clone(),
    );
    assert_eq!(r, Err(crate::usbcore::device::CoreError::Failed(90)));
    assert!(sink.0.lock_ok().is_empty());
    assert!(sim
        .submit(devs[0].dev, urb(TransferType::Iso, 0x01, 192, 2), got)
        .is_ok());
}

/// An isochronous URB submitted on the audio device's OUT 0x01 (one
/// 192-byte packet a 1 ms frame) half a frame before the end of the one
/// queued before it, when the stream's next frame is already too close for
/// the controller: its result and the start frames of both.
fn late_on_the_stream(
    controller: &str,
    flags: u32,
    npk: usize,
) -> (
    Result<u64, crate::usbcore::device::CoreError>,
    Vec<UrbEvent>,
    Arc<Done>,
) {
    let (sim, sink, devs) = bus(&["{port: 1, kind: audio}"], controller);
    let mut now = 3000;
    take(&sim, &devs[0], 1, &mut now);
    sink.0.lock_ok().clear();
    let got = Arc::new(Done::default());
    let first = sim
        .submit(
            devs[0].dev,
            urb(TransferType::Iso, 0x01, 192, 8),
            got.clone(),
        )
        .unwrap();
    // It starts at the first frame a frame after its submission and ends 8
    // frames on.
    let t = sink.0.lock_ok()[0].ts.mono_ns;
    let end = (t / MS + 2) * MS + 8 * MS;
    sim.run_until(end - MS / 2);
    let mut r = urb(TransferType::Iso, 0x01, 192, npk);
    r.flags = flags;
    let second = sim.submit(devs[0].dev, r, got.clone());
    sim.run_until((now + 100) * MS);
    let mut tags = vec![first];
    tags.extend(second.clone());
    (second, completions(&sink, &tags), got)
}

#[test]
fn a_late_isochronous_urb_keeps_its_slot_without_asap_and_skips_ahead_with_it() {
    const ASAP: u32 = 0x2;
    // OHCI without URB_ISO_ASAP: the next slot in the stream, no matter
    // what; the packet whose frame passed is -EXDEV, nothing moved.
    let (r, c, got) = late_on_the_stream("ohci", 0, 4);
    assert!(r.is_ok());
    assert_eq!(c.len(), 2);
    assert_eq!(c[1].start_frame, (c[0].start_frame + 8) & 0xffff);
    assert_eq!(c[1].error_count, 1);
    let results = got.0.lock_ok();
    let pk: Vec<(i32, u32)> = results[1]
        .1
        .iso
        .iter()
        .map(|p| (p.status, p.actual_length))
        .collect();
    assert_eq!(pk, [(-18, 0), (0, 192), (0, 192), (0, 192)]);
    assert_eq!(results[1].1.actual_length, 3 * 192);
    drop(results);
    // With it: the stream's first slot still ahead, every packet sent.
    let (r, c, got) = late_on_the_stream("ohci", ASAP, 4);
    assert!(r.is_ok());
    assert_eq!(c[1].start_frame, (c[0].start_frame + 9) & 0xffff);
    assert_eq!(c[1].error_count, 0);
    assert!(got.0.lock_ok()[1].1.iso.iter().all(|p| p.status == 0));
    // EHCI refuses a URB whose every frame has passed: -EXDEV from the
    // submission, an S and an E event on usbmon, nothing reaped.
    let (r, c, got) = late_on_the_stream("ehci", 0, 1);
    assert_eq!(r, Err(crate::usbcore::device::CoreError::Failed(18)));
    assert_eq!(c.len(), 1);
    assert_eq!(got.0.lock_ok().len(), 1);
    // xHCI's frame ID falls outside its window: the packets go ASAP.
    let (r, c, _) = late_on_the_stream("xhci", 0, 1);
    assert!(r.is_ok());
    assert_eq!(c[1].error_count, 0);
    assert_eq!(c[1].start_frame, (c[0].start_frame + 9) & 0x7ff);
}

#[test]
fn bulk_gets_what_the_periodic_schedule_leaves_of_each_microframe() {
    // A high-speed camera-like device (a descriptor dump) streams on a
    // high-bandwidth isochronous IN endpoint, 3 x 1024 bytes every
    // microframe: 3072 of the 6656 bytes a microframe carries. The
    // controller serves it first, so a program's bulk transfers to a
    // flood device on the same bus get the rest of each microframe.
    let td = tempfile::tempdir().unwrap();
    let mut dump = vec![
        18, 1, 0, 2, 0, 0, 0, 64, 0x34, 0x12, 0x78, 0x56, 1, 0, 0, 0, 0, 1,
    ];
    dump.extend_from_slice(&[9, 2, 34, 0, 1, 1, 0, 0x80, 50]);
    dump.extend_from_slice(&[9, 4, 0, 0, 0, 0xff, 0, 0, 0]);
    dump.extend_from_slice(&[9, 4, 0, 1, 1, 0xff, 0, 0, 0]);
    dump.extend_from_slice(&[7, 5, 0x81, 0x05, 0x00, 0x14, 1]);
    let path = td.path().join("hb.desc");
    std::fs::write(&path, &dump).unwrap();
    let cam = format!(
        "{{port: 2, kind: descriptors, descriptors: {}}}",
        path.display()
    );
    let (sim, sink, devs) = bus(&["{port: 1, kind: flood}", &cam], "ehci");
    let (flood, cam) = (&devs[0], &devs[1]);
    let mut now = 3000;
    take(&sim, flood, 0, &mut now);
    sim.claim_interface(cam.dev, 0, 9).unwrap();
    assert_eq!(set_interface(&sim, cam, 0, 1, &mut now), 0);
    let span = |sim: &UsbSim, now: &mut u64, stream: bool| {
        let iso = Arc::new(Done::default());
        if stream {
            // 3 URBs of 64 microframes each: the stream outlasts the bulk.
            submit_n(sim, cam, &urb(TransferType::Iso, 0x81, 3072, 64), 3, &iso);
        }
        let got = Arc::new(Done::default());
        sink.0.lock_ok().clear();
        let tags = submit_n(
            sim,
            flood,
            &urb(TransferType::Bulk, 0x81, 16384, 0),
            8,
            &got,
        );
        *now += 1000;
        sim.run_until(*now * MS);
        assert_eq!(done_tags(&got), tags);
        let c = completions(&sink, &tags);
        c.last().unwrap().ts.mono_ns - c.first().unwrap().ts.mono_ns
    };
    let alone = span(&sim, &mut now, false);
    let shared = span(&sim, &mut now, true);
    // 16 KiB take 307.7 us of a whole microframe's rate; with 3072 of 6656
    // bytes taken by the stream, 571.4 us.
    let per_urb = (16384u64 * 125_000).div_ceil(13 * 512);
    let want = per_urb * 7 * 6656 / (6656 - 3072);
    assert!(alone < want * 6 / 10, "alone {alone} ns");
    assert!(shared >= want, "{shared} ns < {want}");
    assert!(
        shared * 9 <= want * 10,
        "{shared} ns, below 90% of what is left"
    );
}

#[test]
fn an_xhci_without_contiguous_frame_ids_reports_each_urb_by_its_submission() {
    // Three isochronous URBs of 8 packets queued at once on the audio
    // device's 1 ms endpoint. An xHCI with Contiguous Frame ID capability
    // (the default) reports the stream's frames, 8 apart; one without it
    // (qemu's) reports each by MFINDEX at its submission plus the
    // controller's threshold (7 frames) and 10 microframes, rounded up to a
    // frame: all three the same frame here. Either way the packets go out
    // one frame after another, so the URBs complete 8 ms apart.
    for (cfc, same) in [(true, false), (false, true)] {
        let controller = format!("xhci\n      contiguous_frames: {cfc}");
        let (sim, sink, devs) = bus(&["{port: 1, kind: audio}"], &controller);
        let mut now = 3000;
        take(&sim, &devs[0], 1, &mut now);
        sink.0.lock_ok().clear();
        let got = Arc::new(Done::default());
        let tags = submit_n(
            &sim,
            &devs[0],
            &urb(TransferType::Iso, 0x01, 192, 8),
            3,
            &got,
        );
        let submitted = sink.0.lock_ok()[0].ts.mono_ns;
        now += 100;
        sim.run_until(now * MS);
        let c = completions(&sink, &tags);
        assert_eq!(c.len(), 3);
        let frames: Vec<i32> = c.iter().map(|e| e.start_frame).collect();
        if same {
            let uf = (submitted / 125_000) & 0x3fff;
            let want = ((uf + 56 + 10).next_multiple_of(8) >> 3) as i32;
            assert_eq!(frames, [want; 3], "cfc {cfc}");
        } else {
            assert_eq!(frames[1], (frames[0] + 8) & 0x7ff, "cfc {cfc}");
            assert_eq!(frames[2], (frames[1] + 8) & 0x7ff, "cfc {cfc}");
        }
        let ts: Vec<u64> = c.iter().map(|e| e.ts.mono_ns).collect();
        assert_eq!(ts[1] - ts[0], 8 * MS, "cfc {cfc}");
        assert_eq!(ts[2] - ts[1], 8 * MS, "cfc {cfc}");
    }
}

/// A clock the test sets.
struct SetClock(std::sync::atomic::AtomicU64);

impl crate::base::clock::Clock for SetClock {
    fn sim_now(&self) -> u64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
    fn at(&self, sim_ns: u64) -> crate::base::clock::Timestamp {
        crate::base::clock::Timestamp {
            mono_ns: sim_ns,
            wall_ns: sim_ns,
        }
    }
}

#[test]
fn a_submission_to_a_bus_behind_the_clock_comes_after_what_was_due_before_it() {
    // A paced bus whose thread is behind the clock (a batch run on one
    // clock reading) gets a program's URB: the completions due before the
    // request came happen first, at their times, and the submission at the
    // request's, in usbmon's raw order too (monfs once gave the earlier
    // completions back after the submission, as kernel-vm saw).
    let cfg = super::load::parse_config(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: flood, rate: 1000}\n",
        "/t.yaml",
    )
    .unwrap();
    let clock = Arc::new(SetClock(0.into()));
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::run_for_test(&cfg.usb, 5, 3000, clock.clone(), sink.clone());
    let flood = sim
        .devices()
        .into_iter()
        .find(|d| !d.is_root_hub())
        .unwrap();
    let mut now = 3000;
    take(&sim, &flood, 0, &mut now);
    let got = Arc::new(Done::default());
    let r = urb(TransferType::Bulk, 0x81, 16384, 0);
    submit_n(&sim, &flood, &r, 4, &got);
    sink.0.lock_ok().clear();
    // The clock is 5 ms on; the bus has run none of it (its four bulk
    // URBs, 308 us each, are due in the first 1.3 ms).
    sim.bus(1).unwrap().lock().realtime = true;
    clock
        .0
        .store((now + 5) * MS, std::sync::atomic::Ordering::SeqCst);
    let late = sim.submit(flood.dev, r.clone(), got.clone()).unwrap();
    sim.bus(1).unwrap().lock().realtime = false;
    sim.run_until((now + 100) * MS);
    let evs = sink.0.lock_ok();
    let ts: Vec<u64> = evs.iter().map(|e| e.ts.mono_ns).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
    let s = evs
        .iter()
        .position(|e| e.kind == EventKind::Submit && e.id == late)
        .unwrap();
    let earlier = evs[..s]
        .iter()
        .filter(|e| e.kind == EventKind::Complete)
        .count();
    assert_eq!(
        earlier,
        4,
        "the four due completions came first: {:?}",
        &evs[..=s]
    );
    // The submission at the request's time, the clock's.
    assert_eq!(evs[s].ts.mono_ns, (now + 5) * MS);
    assert_eq!(done_tags(&got).len(), 5);
}

#[test]
fn a_program_that_releases_an_interface_in_another_setting_leaves_it_in_setting_0() {
    // usbfs is a driver too: releasing its claim unbinds it, and
    // usb_unbind_interface puts the interface back to setting 0 (libusb
    // programs that stream release without selecting setting 0 first).
    let (sim, sink, devs) = bus(&["{port: 1, kind: audio}"], "ohci");
    let audio = &devs[0];
    let mut now = 3000;
    take(&sim, audio, 1, &mut now);
    assert_eq!(set_interface(&sim, audio, 1, 1, &mut now), 0);
    sink.0.lock_ok().clear();
    sim.release_interface(audio.dev, 1, 9).unwrap();
    now += 100;
    sim.run_until(now * MS);
    let evs: Vec<String> = sink
        .0
        .lock_ok()
        .iter()
        .filter(|e| e.devnum == audio.devnum)
        .map(|e| format!("{:?} {:?} {}", e.kind, e.setup, e.status))
        .collect();
    assert_eq!(
        evs,
        [
            "Submit Some([1, 11, 0, 0, 1, 0, 0, 0]) -115",
            "Complete Some([1, 11, 0, 0, 1, 0, 0, 0]) 0"
        ],
        "{evs:?}"
    );
    let t = sim.devices_text();
    let line = t
        .lines()
        .find(|l| l.starts_with("I:*") && l.contains("If#= 1"))
        .unwrap();
    assert!(line.contains("Alt= 0"), "{line}");
    // A release with nothing claimed sends nothing.
    sink.0.lock_ok().clear();
    sim.release_interface(audio.dev, 1, 9).unwrap();
    now += 100;
    sim.run_until(now * MS);
    assert!(sink.0.lock_ok().iter().all(|e| e.devnum != audio.devnum));
}

/// A program detaches uvcvideo from the webcam's control interface:
/// uvc_disconnect releases the stream's queue, which kills its URBs (-2)
/// and puts the streaming interface back to setting 0 before the ioctl
/// returns; nothing streams while it is unbound, nor once it is bound
/// again (the program that watched let go: a new viewer would start a new
/// stream). snd-usb-audio's disconnect of the audio device's control
/// interface unlinks its stream's URBs (-104); its streaming interface's
/// unbind flushes them (-108); either way its stream is over.
#[test]
fn detaching_the_control_interface_ends_the_stream() {
    for (kind, addr, status) in [("webcam", 0x81u8, -2), ("audio", 0x01, -104)] {
        let (sim, sink, devs) = bus(&[&format!("{{port: 1, kind: {kind}}}")], "ehci");
        let dev = &devs[0];
        let mut now = 3000;
        let ask = |r: CoreRequest, now: &mut u64| ask(&sim, dev, r, now, 300);
        let iso = |e: &UrbEvent| {
            e.devnum == dev.devnum
                && e.xfer == XferType::Iso
                && (e.epnum | if e.dir_in { 0x80 } else { 0 }) == addr
        };
        sink.0.lock_ok().clear();
        assert_eq!(ask(CoreRequest::DetachDriver(0), &mut now), 0, "{kind}");
        let evs: Vec<UrbEvent> = sink.0.lock_ok().drain(..).collect();
        let killed: Vec<&UrbEvent> = evs
            .iter()
            .filter(|e| iso(e) && e.kind == EventKind::Complete && e.status == status)
            .collect();
        assert!(!killed.is_empty(), "{kind}: no URB ended {status}");
        let last_kill = evs
            .iter()
            .rposition(|e| iso(e) && e.status == status)
            .unwrap();
        assert!(
            !evs[last_kill..]
                .iter()
                .any(|e| iso(e) && e.kind == EventKind::Submit),
            "{kind}: the stream went on"
        );
        let set0 = evs.iter().position(|e| {
            e.kind == EventKind::Submit && e.setup == Some([1, 0x0b, 0, 0, 1, 0, 0, 0])
        });
        assert_eq!(set0.is_some(), kind == "webcam", "{kind}");
        if let Some(p) = set0 {
            assert!(p > last_kill, "setting 0 before the URBs were killed");
        }
        now += 1000;
        sim.run_until(now * MS);
        assert!(
            !sink.0.lock_ok().iter().any(iso),
            "{kind}: streams while unbound"
        );
        // Bound again: uvcvideo is back, its old stream is not (the
        // program that watched it let go); snd-usb-audio's card lives on
        // in the streaming interface it kept, and refuses the probe.
        let bound = if kind == "webcam" { 1 } else { 0 };
        assert_eq!(ask(CoreRequest::AttachDriver(0), &mut now), bound, "{kind}");
        now += 1000;
        sim.run_until(now * MS);
        assert!(!sink.0.lock_ok().iter().any(iso), "{kind}: streams again");
    }
    // The streaming interface's own unbind ends the stream too (flushed).
    let (sim, sink, devs) = bus(&["{port: 1, kind: webcam}"], "ehci");
    let mut now = 3000;
    sink.0.lock_ok().clear();
    take(&sim, &devs[0], 1, &mut now);
    let iso = |e: &UrbEvent| e.devnum == devs[0].devnum && e.xfer == XferType::Iso;
    assert!(sink.0.lock_ok().iter().any(|e| iso(e) && e.status == -108));
    sink.0.lock_ok().clear();
    now += 1000;
    sim.run_until(now * MS);
    assert!(!sink.0.lock_ok().iter().any(iso), "streams on");
}

/// A program detaches the control interface: snd-usb-audio's disconnect
/// (usb_audio_disconnect) releases none of the interfaces its probe
/// claimed, so the audio device's streaming interface stays bound to the
/// shut-down driver (its `driver`, GETDRIVER's answer; a claim is EBUSY)
/// until it is detached itself; uvcvideo's last reference goes with its
/// disconnect (no video node is open) and uvc_delete releases the webcam's
/// streaming interface, which a program may then claim.
#[test]
fn a_control_interface_detached_leaves_snd_usb_audio_its_streaming_interface() {
    use crate::usbcore::device::CoreError;
    for (kind, kept) in [("audio", Some("snd-usb-audio")), ("webcam", None)] {
        let (sim, _sink, devs) = bus(&[&format!("{{port: 1, kind: {kind}}}")], "ehci");
        let dev = &devs[0];
        let mut now = 3000;
        let driver = |n: u8| {
            let d = sim.device(dev.dev).unwrap();
            d.interface(n).unwrap().driver.clone()
        };
        assert_eq!(
            ask(&sim, dev, CoreRequest::DetachDriver(0), &mut now, 300),
            0
        );
        assert_eq!(driver(0), None, "{kind}");
        assert_eq!(driver(1).as_deref(), kept, "{kind}");
        let claim = sim.claim_interface(dev.dev, 1, 9);
        if kept.is_none() {
            assert_eq!(claim, Ok(()), "{kind}");
            continue;
        }
        assert_eq!(claim, Err(CoreError::Busy), "{kind}");
        // Its own unbind (usb_audio_disconnect of an unused interface does
        // nothing) leaves it free.
        assert_eq!(
            ask(&sim, dev, CoreRequest::DetachDriver(1), &mut now, 300),
            0
        );
        assert_eq!(driver(1), None, "{kind}");
        assert_eq!(sim.claim_interface(dev.dev, 1, 9), Ok(()), "{kind}");
        assert_eq!(driver(1).as_deref(), Some("usbfs"), "{kind}");
    }
}

/// snd-usb-audio detached from both its interfaces (its card freed) and
/// attached again, five times over: the ended stream's URBs are freed, so
/// the bus holds no more URBs than before, less the stream's.
#[test]
fn detaches_leave_no_urb_behind() {
    let (sim, _sink, devs) = bus(&["{port: 1, kind: audio}"], "ehci");
    let dev = &devs[0];
    let live = |sim: &UsbSim| sim.bus(1).unwrap().lock().ctx.tags.live_count();
    let before = live(&sim);
    let mut now = 3000u64;
    for _ in 0..5 {
        // (Each round as long as the root hub's polling's period, for
        // its own URB to be in the same phase at every count.)
        for (intf, ms) in [(0, 500), (1, 250)] {
            assert_eq!(
                ask(&sim, dev, CoreRequest::DetachDriver(intf), &mut now, ms),
                0
            );
        }
        assert_eq!(
            ask(&sim, dev, CoreRequest::AttachDriver(0), &mut now, 250),
            1
        );
    }
    // The stream's two URBs are gone; nothing else was left.
    assert_eq!(live(&sim), before - 2);
}

/// uvcvideo's stream reads the webcam's frames from the device's own
/// function (what the device sends): it is made when the stream starts,
/// and every isochronous IN completion carries its packets (a UVC payload
/// header each, or nothing). The audio device sends nothing of its own:
/// its stream's data is the host's.
#[test]
fn the_webcams_frames_are_the_devices_function() {
    for (kind, function) in [("webcam", true), ("audio", false)] {
        let (sim, sink, devs) = bus(&[&format!("{{port: 1, kind: {kind}}}")], "ehci");
        let dev = &devs[0];
        assert_eq!(has_function(&sim, dev), function, "{kind}");
        let evs = sink.0.lock_ok();
        let iso: Vec<&UrbEvent> = evs
            .iter()
            .filter(|e| e.devnum == dev.devnum && e.xfer == XferType::Iso)
            .filter(|e| e.kind == EventKind::Complete && e.status == 0)
            .collect();
        assert!(iso.len() > 10, "{kind}");
        if function {
            for e in iso {
                let data = e.data.as_ref().unwrap();
                for p in e.iso.iter().filter(|p| p.length > 0) {
                    assert_eq!(data[p.offset as usize], 12, "{kind}: a UVC header");
                }
            }
        }
    }
}

/// A keyboard from a capture sends what the recording has: its recorded
/// reports are the device's function, made when usbhid starts, and
/// usbhid's interrupt IN loop reads them in recorded order.
#[test]
fn a_recorded_keyboards_reports_are_its_function() {
    let (_sim, sink, devs) = bus(&["{port: 1, kind: hid-keyboard}"], "ehci");
    let devnum = devs[0].devnum;
    let reports = |evs: &[UrbEvent], devnum: u8| -> Vec<Vec<u8>> {
        evs.iter()
            .filter(|e| e.devnum == devnum && e.xfer == XferType::Interrupt && e.dir_in)
            .filter(|e| e.kind == EventKind::Complete && e.status == 0)
            .map(|e| e.data.as_deref().unwrap_or_default().to_vec())
            .collect()
    };
    let recorded = reports(&sink.0.lock_ok(), devnum);
    assert!(recorded.len() > 4);
    let td = tempfile::tempdir().unwrap();
    let cap = td.path().join("kbd.pcapng");
    use crate::capture::write::{write_events, Format, LinkType};
    write_events(&cap, &sink.0.lock_ok(), Format::PcapNg, LinkType::Mmapped).unwrap();
    let entry = format!(
        "{{port: 1, kind: from-capture, capture: {}, devaddr: {devnum}}}",
        cap.display()
    );
    let (sim, sink, devs) = bus(&[&entry], "ehci");
    assert!(
        has_function(&sim, &devs[0]),
        "the recorded device has its function"
    );
    let got = reports(&sink.0.lock_ok(), devs[0].devnum);
    assert!(got.len() > 4);
    let n = got.len().min(recorded.len());
    assert_eq!(got[..n], recorded[..n]);
}

/// The class requests (type class or vendor, or to an interface or
/// endpoint) `dev` was sent among `evs`, as setup packets, in order.
fn class_setups(evs: &[UrbEvent], dev: &UsbDevice) -> Vec<[u8; 8]> {
    evs.iter()
        .filter(|e| e.kind == EventKind::Submit && e.devnum == dev.devnum)
        .filter_map(|e| e.setup)
        .filter(|s| s[0] & 0x60 != 0 || s[0] & 0x1f != 0)
        .collect()
}

/// The driver `usb/devices` shows on interface `intf` of the one device
/// behind bus 1's root hub.
fn driver_shown(sim: &UsbSim, intf: u8) -> String {
    let t = sim.devices_text();
    let l = t
        .lines()
        .rfind(|l| l.starts_with("I:*") && l.contains(&format!("If#={intf:>2}")))
        .unwrap();
    l.split("Driver=").nth(1).unwrap().to_string()
}

#[test]
fn snd_usb_audio_bound_again_fails_while_its_card_lives_on() {
    // snd-usb-audio's disconnect of the control interface keeps the
    // streaming interface, and with it the shut-down card: its probe of
    // the control interface given back refuses the device (-EIO, "USB
    // device is in the shutdown state"): CONNECT gives 0 and nothing goes
    // out. Once the streaming interface is let go too, the card is freed
    // and CONNECT probes anew: the probe's requests as at enumeration
    // (the streaming interface's settings, the mixer), the streaming
    // interface claimed again; the player that opened the old card's PCM
    // is gone with it (no SET_INTERFACE to its setting, no stream).
    let (sim, sink, devs) = bus(&["{port: 1, kind: audio}"], "ehci");
    let snd = &devs[0];
    let mut now = 3000;
    let first = class_setups(&sink.0.lock_ok(), snd);
    assert!(!first.is_empty());
    assert_eq!(
        ask(&sim, snd, CoreRequest::DetachDriver(0), &mut now, 100),
        0
    );
    assert_eq!(driver_shown(&sim, 1), "snd-usb-audio");
    sink.0.lock_ok().clear();
    assert_eq!(
        ask(&sim, snd, CoreRequest::AttachDriver(0), &mut now, 300),
        0
    );
    let evs = sink.0.lock_ok().clone();
    assert!(
        !evs.iter()
            .any(|e| e.kind == EventKind::Submit && e.devnum == snd.devnum && e.epnum == 0),
        "{evs:?}"
    );
    assert_eq!(driver_shown(&sim, 0), "(none)");
    assert_eq!(
        ask(&sim, snd, CoreRequest::DetachDriver(1), &mut now, 100),
        0
    );
    assert_eq!(driver_shown(&sim, 1), "(none)");
    sink.0.lock_ok().clear();
    assert_eq!(
        ask(&sim, snd, CoreRequest::AttachDriver(0), &mut now, 300),
        1
    );
    let evs = sink.0.lock_ok().clone();
    let (pcm_open, probe) = first.split_last().unwrap();
    assert_eq!(pcm_open, &[1, 0x0b, 1, 0, 1, 0, 0, 0]);
    assert_eq!(class_setups(&evs, snd), probe);
    assert!(!evs
        .iter()
        .any(|e| e.devnum == snd.devnum && e.xfer == XferType::Iso));
    assert_eq!(driver_shown(&sim, 0), "snd-usb-audio");
    assert_eq!(driver_shown(&sim, 1), "snd-usb-audio");
}
