//! Tests of the binary interface: headers, ioctls, the ring.

use super::*;
use crate::base::clock::Timestamp;
use crate::usbmon::event::{IsoDesc, UrbSink, XferType};

fn ev(kind: EventKind, xfer: XferType, dir_in: bool, len: u32) -> UrbEvent {
    UrbEvent {
        id: 0xffff888009800780,
        kind,
        xfer,
        bus: 1,
        devnum: 2,
        epnum: if xfer == XferType::Control { 0 } else { 1 },
        dir_in,
        ts: Timestamp {
            mono_ns: 5_000_000_000,
            wall_ns: 1_700_000_000_123_456_000,
        },
        status: if kind == EventKind::Submit { -115 } else { 0 },
        transfer_buffer_length: len,
        actual_length: len,
        interval: 8,
        start_frame: 0,
        error_count: 0,
        xfer_flags: if dir_in { 0x200 } else { 0 },
        setup: if xfer == XferType::Control && kind == EventKind::Submit {
            Some([0x80, 6, 0, 1, 0, 0, 18, 0])
        } else {
            None
        },
        iso: vec![],
        data: Some((0..len).map(|i| i as u8).collect::<Vec<u8>>().into()),
        data_capture: Default::default(),
    }
}

static MEM: std::sync::LazyLock<procmem::ProcessMemory> =
    std::sync::LazyLock::new(|| procmem::ProcessMemory(std::process::id()));

fn req(cmd: u32, arg: u64, input: &[u8]) -> IoctlRequest<'_> {
    IoctlRequest {
        mem: &*MEM,
        cmd,
        arg,
        input,
        out_size: 0,
        nonblock: true,
        caller: Caller {
            pid: std::process::id(),
            ..Default::default()
        },
        retry: false,
        file_id: (0, 0),
        compat: false,
    }
}

#[test]
fn compat_commands_and_layouts() {
    let mut get32 = Vec::new();
    for v in [0x1000u32, 0x2000, 0x2000_0000] {
        get32.extend_from_slice(&v.to_ne_bytes());
    }
    let l = BinReader::ioctl_layout(ioc::GETX32, 0x500, &get32, true);
    assert_eq!(l.input, vec![(0x500, 12)]);
    assert_eq!(
        l.output,
        vec![(0x1000, 64), (0x2000, 0x2000_0000)],
        "no allocation limit for 32-bit callers"
    );
    let l = BinReader::ioctl_layout(ioc::MFETCH32, 0x500, &[0u8; 12], true);
    assert_eq!(l.input, vec![(0x500, 12)]);
    assert_eq!(l.output, vec![(0x500, 12), (0, 0)]);
    let r = BinReader::new().unwrap();
    let mut q = req(ioc::GETX, 0, &[0u8; 24]);
    q.compat = true;
    assert_eq!(
        r.ioctl(&q).err(),
        Some(Errno::ENOTTY),
        "64-bit GETX from a 32-bit caller"
    );
    let mut q = req(ioc::GETX32, 0, &get32);
    q.compat = true;
    assert_eq!(r.ioctl(&q).err(), Some(Errno::EAGAIN));
    let mut q = req(ioc::Q_RING_SIZE, 0, &[]);
    q.compat = true;
    assert_eq!(r.ioctl(&q).unwrap().result, BUFF_DFL as i32);
    assert_eq!(
        r.ioctl(&req(ioc::GETX32, 0, &get32)).err(),
        Some(Errno::ENOTTY)
    );
}

#[test]
fn page_set_returns_runs_and_empties() {
    let mut s = PageSet::new(200, false);
    for p in [3, 4, 5, 63, 64, 65, 130, 199] {
        s.insert(p);
    }
    assert_eq!(
        s.take_runs(),
        vec![(3, 6), (63, 66), (130, 131), (199, 200)]
    );
    assert!(s.take_runs().is_empty());
    assert_eq!(PageSet::new(70, true).take_runs(), vec![(0, 70)]);
}

#[test]
fn mfetch_stores_pages_only_when_it_hands_out_an_event_on_one() {
    let mon = UsbMon::new(&[1]);
    let r = Arc::new(BinReader::new().unwrap());
    let _reg = mon.attach(1, r.clone()).unwrap();
    // 64-byte header + 18 bytes, 128 bytes a slot: 32 events a page.
    let put = |n: usize| {
        for _ in 0..n {
            mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
        }
    };
    let mut vec = [0u32; 4];
    let mut mfetch = |nfetch: u32, nflush: u32| {
        let mut m = Vec::new();
        m.extend_from_slice(&(vec.as_mut_ptr() as u64).to_ne_bytes());
        m.extend_from_slice(&nfetch.to_ne_bytes());
        m.extend_from_slice(&nflush.to_ne_bytes());
        let rep = r.ioctl(&req(ioc::MFETCH, 0, &m)).unwrap();
        let pages: Vec<(u64, usize)> = rep
            .cache_updates
            .iter()
            .map(|(off, b)| (*off, b.len() / CHUNK_SIZE))
            .collect();
        (vec[0], pages)
    };
    put(1);
    assert_eq!(mfetch(1, 0), (0, vec![(0, 1)]));
    // Pages 0..3 fill; the next event is on page 0, written after the
    // last store: every dirty page goes to the page cache at once.
    put(127);
    assert_eq!(mfetch(1, 1), (128, vec![(0, 4)]));
    // A backlog already stored: nothing to store while the reader works
    // through it, though the producer writes pages 4 and 5 meanwhile.
    put(40);
    for i in 2..128 {
        assert_eq!(mfetch(1, 1), (i * 128, vec![]), "event {i}");
    }
    // The first event on page 4 takes what was written since.
    assert_eq!(mfetch(1, 1), (128 * 128, vec![(CHUNK_SIZE as u64 * 4, 2)]));
}

#[test]
fn mfetch_efault_keeps_pages_dirty_for_the_next_call() {
    let mon = UsbMon::new(&[1]);
    let r = Arc::new(BinReader::new().unwrap());
    let _reg = mon.attach(1, r.clone()).unwrap();
    mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
    let mfetch = |vec: u64| {
        let mut m = Vec::new();
        m.extend_from_slice(&vec.to_ne_bytes());
        m.extend_from_slice(&4u32.to_ne_bytes());
        m.extend_from_slice(&0u32.to_ne_bytes());
        r.ioctl(&req(ioc::MFETCH, 0, &m))
    };
    assert_eq!(mfetch(8).err(), Some(Errno::EFAULT));
    let mut vec = [0u32; 4];
    let rep = mfetch(vec.as_mut_ptr() as u64).unwrap();
    assert_eq!(rep.cache_updates.len(), 1);
    assert_eq!(rep.cache_updates[0].0, 0);
    assert_eq!(rep.cache_updates[0].1[8], b'C', "page 0 holds the event");
    assert!(mfetch(vec.as_mut_ptr() as u64)
        .unwrap()
        .cache_updates
        .is_empty());
}

#[test]
fn header_layout() {
    let e = ev(EventKind::Submit, XferType::Control, true, 18);
    let h = encode_header(&e, 0, b'<', 0);
    assert_eq!(u64_at(&h, 0), 0xffff888009800780);
    assert_eq!((h[8], h[9], h[10], h[11]), (b'S', 2, 0x80, 2));
    assert_eq!(u16::from_ne_bytes([h[12], h[13]]), 1);
    assert_eq!((h[14], h[15]), (0, b'<'));
    assert_eq!(
        i64::from_ne_bytes(h[16..24].try_into().unwrap()),
        1_700_000_000
    );
    assert_eq!(i32::from_ne_bytes(h[24..28].try_into().unwrap()), 123_456);
    assert_eq!(i32::from_ne_bytes(h[28..32].try_into().unwrap()), -115);
    assert_eq!(u32_at(&h, 32), 18);
    assert_eq!(&h[40..48], &[0x80, 6, 0, 1, 0, 0, 18, 0]);
    assert_eq!(u32_at(&h, 56), 0x200);
}

#[test]
fn capture_rules_and_read_continuation() {
    let mon = UsbMon::new(&[1]);
    let r = Arc::new(BinReader::new().unwrap());
    let _reg = mon.attach(1, r.clone()).unwrap();
    assert_eq!(r.read(100).err(), Some(Errno::EAGAIN));
    mon.urb_event(ev(EventKind::Submit, XferType::Control, true, 18));
    mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
    mon.urb_event(ev(EventKind::Complete, XferType::Bulk, false, 31));
    let q = r.ioctl(&req(ioc::URB_LEN, 0, &[])).unwrap();
    assert_eq!(q.result, 0, "IN submit captures nothing");
    let s = r.read(1000).unwrap();
    assert_eq!(s.len(), 48);
    assert_eq!(s[15], b'<');
    // A completion read in two parts: 20 bytes, then the rest.
    let a = r.read(20).unwrap();
    let b = r.read(1000).unwrap();
    let c = [a, b].concat();
    assert_eq!(c.len(), 48 + 18);
    assert_eq!(&c[48..], &(0..18).collect::<Vec<u8>>()[..]);
    let o = r.read(1000).unwrap();
    assert_eq!(
        (o[15], u32_at(&o, 36)),
        (b'>', 0),
        "OUT completion captures nothing"
    );
}

#[test]
fn iso_in_completion_collates_descriptors() {
    let mon = UsbMon::new(&[1]);
    let r = Arc::new(BinReader::new().unwrap());
    let _reg = mon.attach(1, r.clone()).unwrap();
    let mut e = ev(EventKind::Complete, XferType::Iso, true, 3 * 100);
    e.iso = vec![
        IsoDesc {
            status: 0,
            offset: 0,
            length: 100,
        },
        IsoDesc {
            status: 0,
            offset: 100,
            length: 40,
        },
        IsoDesc {
            status: 0,
            offset: 200,
            length: 0,
        },
    ];
    mon.urb_event(e);
    let o = r.read(4096).unwrap();
    assert_eq!(u32_at(&o, 36), 3 * 16 + 140);
    assert_eq!(u32_at(&o, 44), 3, "numdesc in the union");
    assert_eq!(o.len(), 48 + 3 * 16 + 140);
    assert_eq!(u32_at(&o, 48 + 16 + 4), 100, "second descriptor offset");
}

#[test]
fn ring_size_bounds_and_rounding() {
    let r = BinReader::new().unwrap();
    for bad in [0u64, 8191, BUFF_MAX + 1, u64::MAX, 0x1_0000_2000] {
        assert_eq!(
            r.ioctl(&req(ioc::T_RING_SIZE, bad, &[])).err(),
            Some(Errno::EINVAL),
            "{bad}"
        );
    }
    for (set, got) in [
        (10000u64, 12288),
        (1228801, 1232896),
        (8192, 8192),
        (BUFF_MAX, BUFF_MAX as i32),
    ] {
        r.ioctl(&req(ioc::T_RING_SIZE, set, &[])).unwrap();
        assert_eq!(r.ioctl(&req(ioc::Q_RING_SIZE, 0, &[])).unwrap().result, got);
    }
    assert_eq!(r.ioctl(&req(0x9263, 0, &[])).err(), Some(Errno::ENOTTY));
}

#[test]
fn drops_are_counted_and_reset_by_stats() {
    let mon = UsbMon::new(&[1]);
    let r = Arc::new(BinReader::new().unwrap());
    let _reg = mon.attach(1, r.clone()).unwrap();
    r.ioctl(&req(ioc::T_RING_SIZE, 8192, &[])).unwrap();
    for _ in 0..200 {
        mon.urb_event(ev(EventKind::Submit, XferType::Bulk, true, 512));
    }
    let s = r.ioctl(&req(ioc::STATS, 0, &[])).unwrap();
    assert_eq!(u32_at(&s.output, 0), 128);
    assert_eq!(u32_at(&s.output, 4), 72);
    let s = r.ioctl(&req(ioc::STATS, 0, &[])).unwrap();
    assert_eq!(u32_at(&s.output, 4), 0, "dropped resets on read");
    assert_eq!(r.ioctl(&req(ioc::MFLUSH, 100, &[])).unwrap().result, 100);
    assert_eq!(r.ioctl(&req(ioc::MFLUSH, 100, &[])).unwrap().result, 28);
}

#[test]
fn get_and_mfetch_write_through_pointers() {
    let mon = UsbMon::new(&[1]);
    let r = Arc::new(BinReader::new().unwrap());
    let _reg = mon.attach(1, r.clone()).unwrap();
    mon.urb_event(ev(EventKind::Complete, XferType::Control, true, 18));
    mon.urb_event(ev(EventKind::Submit, XferType::Bulk, false, 31));
    let mut hdr = [0u8; 64];
    let mut data = [0u8; 64];
    let mut arg = Vec::new();
    arg.extend_from_slice(&(hdr.as_mut_ptr() as u64).to_ne_bytes());
    arg.extend_from_slice(&(data.as_mut_ptr() as u64).to_ne_bytes());
    arg.extend_from_slice(&10u64.to_ne_bytes());
    r.ioctl(&req(ioc::GETX, 0, &arg)).unwrap();
    // SAFETY: the buffers were written by process_vm_writev.
    let (hdr, data) = unsafe {
        (
            std::ptr::read_volatile(&hdr),
            std::ptr::read_volatile(&data),
        )
    };
    assert_eq!(hdr[8], b'C');
    assert_eq!(u32_at(&hdr, 56), 0x200, "GETX returns the 64-byte header");
    assert_eq!(&data[..10], &(0..10).collect::<Vec<u8>>()[..]);
    assert_eq!(data[10], 0, "only alloc bytes are copied");
    let mut vec = [0u32; 8];
    let mut m = Vec::new();
    m.extend_from_slice(&(vec.as_mut_ptr() as u64).to_ne_bytes());
    m.extend_from_slice(&8u32.to_ne_bytes());
    m.extend_from_slice(&0u32.to_ne_bytes());
    let rep = r.ioctl(&req(ioc::MFETCH, 0, &m)).unwrap();
    // SAFETY: written by process_vm_writev.
    let vec = unsafe { std::ptr::read_volatile(&vec) };
    assert_eq!(u32_at(&rep.output, 8), 1);
    assert_eq!(
        vec[0], 128,
        "the second event starts after the 18-byte one (128 bytes)"
    );
    assert!(!rep.cache_updates.is_empty());
}
