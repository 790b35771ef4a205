use super::*;
use crate::capture::sample_events;
use crate::capture::write::{write_events, Format, LinkType};
use crate::usbmon::event::UrbEvent;

fn kbd_dump() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/sysfs/qemu-usb-kbd/descriptors"
    ))
    .unwrap()
}

/// A control IN submission and its completion with `data` on device 3.
fn get(id: u64, setup: [u8; 8], data: &[u8]) -> Vec<UrbEvent> {
    let proto = sample_events(2)
        .into_iter()
        .filter(|e| e.xfer == XferType::Control && e.dir_in)
        .collect::<Vec<_>>();
    let (mut s, mut c) = (proto[0].clone(), proto[1].clone());
    for e in [&mut s, &mut c] {
        e.id = id;
        e.devnum = 3;
        e.transfer_buffer_length = u16::from_le_bytes([setup[6], setup[7]]) as u32;
    }
    s.setup = Some(setup);
    c.actual_length = data.len() as u32;
    c.data = Some(Arc::from(data));
    vec![s, c]
}

fn load(events: &[UrbEvent]) -> Result<RecordedDevice, RecordedError> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("c.pcapng");
    write_events(&p, events, Format::PcapNg, LinkType::Mmapped).unwrap();
    RecordedDevice::load(&std::fs::File::open(&p).unwrap(), &p, 3)
}

#[test]
fn descriptors_strings_and_interrupt_data_come_from_the_capture() {
    let dump = kbd_dump();
    let mut ev = get(0x40, [0x80, 6, 0, 1, 0, 0, 18, 0], &dump[..18]);
    ev.extend(get(0x80, [0x80, 6, 0, 2, 0, 0, 9, 0], &dump[18..27]));
    ev.extend(get(0xc0, [0x80, 6, 0, 2, 0, 0, 34, 0], &dump[18..]));
    let q = [8u8, 3, b'Q', 0, b'E', 0, b'M', 0];
    ev.extend(get(0x100, [0x80, 6, 1, 3, 9, 4, 255, 0], &q));
    // The interrupt IN of sample_events, moved to device 3, twice.
    let int: Vec<UrbEvent> = sample_events(2)
        .into_iter()
        .filter(|e| e.xfer == XferType::Interrupt)
        .map(|mut e| {
            e.devnum = 3;
            e
        })
        .collect();
    ev.extend(int.iter().cloned());
    ev.extend(int.iter().cloned());
    let r = load(&ev).unwrap();
    assert_eq!(r.dump.bytes, dump);
    assert_eq!(r.string(1), Some(&q[..]));
    assert_eq!(r.string(2), None);
    assert_eq!(r.endpoints.len(), 1);
    let e = &r.endpoints[0];
    assert_eq!((e.addr, e.xfer, e.len), (0x81, XferType::Interrupt, 8));
    assert_eq!(e.completions.len(), 2);
    // From the submission, 125 ms before its completion.
    assert_eq!(e.completions[0].gap_ns, 125_000_000);
    assert_eq!(e.completions[0].data, int[1].data.clone().unwrap());
}

#[test]
fn missing_descriptors_are_named() {
    let dump = kbd_dump();
    let e = load(&get(0x40, [0x80, 6, 0, 2, 0, 0, 9, 0], &dump[18..27]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no complete GET_DESCRIPTOR(DEVICE)"), "{e}");
    let mut ev = get(0x40, [0x80, 6, 0, 1, 0, 0, 18, 0], &dump[..18]);
    ev.extend(get(0x80, [0x80, 6, 0, 2, 0, 0, 9, 0], &dump[18..27]));
    let e = load(&ev).unwrap_err().to_string();
    assert!(
        e.contains("configuration descriptor 0 is only partly in the capture (9 of its 34 bytes, packet 3)"),
        "{e}"
    );
    let e = load(&get(0x40, [0x80, 6, 0, 1, 0, 0, 18, 0], &dump[..18]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no GET_DESCRIPTOR(CONFIGURATION, 0)"), "{e}");
    // Bad bytes: the packet that holds them.
    let mut bad = dump.clone();
    bad[31] = 2;
    let mut ev = get(0x40, [0x80, 6, 0, 1, 0, 0, 18, 0], &bad[..18]);
    ev.extend(get(0xc0, [0x80, 6, 0, 2, 0, 0, 34, 0], &bad[18..]));
    let e = load(&ev).unwrap_err().to_string();
    assert!(e.contains("packet 3: descriptor byte offset 13: "), "{e}");
    let e = RecordedDevice::load(
        &std::fs::File::open("/dev/null").unwrap(),
        Path::new("/dev/null"),
        3,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("not a regular file"), "{e}");
}

#[test]
fn a_hid_interfaces_report_descriptor_is_its_longest_complete_answer() {
    let dump = kbd_dump();
    let rep: Vec<u8> = (1..=63).collect();
    let mut ev = get(0x40, [0x80, 6, 0, 1, 0, 0, 18, 0], &dump[..18]);
    ev.extend(get(0xc0, [0x80, 6, 0, 2, 0, 0, 34, 0], &dump[18..]));
    // Part of it (the keyboard's HID descriptor says 63 bytes): not taken.
    ev.extend(get(0x100, [0x81, 6, 0, 0x22, 0, 0, 9, 0], &rep[..9]));
    let r = load(&ev).unwrap();
    assert_eq!(r.report(0), None);
    // The whole of it; and of an interface the configuration does not
    // describe, whatever was answered.
    ev.extend(get(0x140, [0x81, 6, 0, 0x22, 0, 0, 63, 0], &rep));
    ev.extend(get(0x180, [0x81, 6, 0, 0x22, 1, 0, 4, 0], &[1, 2, 3, 4]));
    ev.extend(get(0x1c0, [0x81, 6, 0, 0x22, 0, 0, 9, 0], &rep[..9]));
    let r = load(&ev).unwrap();
    assert_eq!(r.report(0), Some(&rep[..]));
    assert_eq!(r.report(1), Some(&[1, 2, 3, 4][..]));
    assert_eq!(r.reports.len(), 2);
}

/// The walk of a device's records: each submission and completion in
/// capture order, a submission the capture shows failing (`E`) left out, a
/// completion of a URB submitted before the capture without one.
#[test]
fn the_walk_has_the_records_in_capture_order() {
    let int: Vec<UrbEvent> = sample_events(2)
        .into_iter()
        .filter(|e| e.xfer == XferType::Interrupt)
        .collect();
    let (s, c) = (&int[0], &int[1]);
    let with = |e: &UrbEvent, id: u64, kind: EventKind| {
        let mut e = e.clone();
        e.id = id;
        e.kind = kind;
        e
    };
    let events = [
        with(c, 1, EventKind::Complete),
        with(s, 2, EventKind::Submit),
        with(s, 3, EventKind::Submit),
        with(s, 3, EventKind::Error),
        with(s, 4, EventKind::Submit),
        with(c, 4, EventKind::Complete),
        with(c, 2, EventKind::Complete),
    ];
    let packets: Vec<Packet> = events
        .into_iter()
        .enumerate()
        .map(|(index, event)| Packet {
            index,
            ts_ns: 0,
            snapped: false,
            event,
        })
        .collect();
    let (done, subs, steps) = transfers(packets.iter());
    use ReplayStep::*;
    assert_eq!(
        steps,
        [Complete(0), Submit(0), Submit(2), Complete(1), Complete(2)]
    );
    assert_eq!(subs.iter().map(|s| s.packet).collect::<Vec<_>>(), [1, 2, 4]);
    let by = |t: &RecordedTransfer| (t.packet, t.sub, t.len);
    assert_eq!(
        done.iter().map(by).collect::<Vec<_>>(),
        [
            (0, None, u32::MAX),
            (5, Some(2), s.transfer_buffer_length),
            (6, Some(0), s.transfer_buffer_length)
        ]
    );
}
