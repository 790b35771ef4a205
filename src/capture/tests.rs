//! Capture files end to end: events written, read back and decoded.

use std::path::Path;
use std::sync::Arc;

use super::decode::*;
use super::read::*;
use super::sample_events;
use super::write::{write_events, Format, LinkType, RECORD_RING};
use crate::usbmon::event::{DataCapture, EventKind, UrbEvent, XferType};
use crate::usbmon::header::{capture_plan, encode_event};
use crate::usbmon::ring::BUFF_MAX;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Event -> capture bytes -> event, for every container and link type:
/// the packets are what a reader captures and decode to the same events.
#[test]
fn round_trip_every_transfer_type() {
    let evs = sample_events(7);
    let d = tmp();
    for (format, link, name) in [
        (Format::PcapNg, LinkType::Mmapped, "a.pcapng"),
        (Format::Pcap, LinkType::Mmapped, "a.pcap"),
        (Format::PcapNg, LinkType::Linux, "b.pcapng"),
        (Format::Pcap, LinkType::Linux, "b.pcap"),
    ] {
        let p = d.path().join(name);
        assert_eq!(
            write_events(&p, &evs, format, link).unwrap(),
            evs.len() as u64
        );
        let (cont, recs) = read_records(&p).unwrap();
        assert_eq!(cont == Container::Pcap, format == Format::Pcap);
        assert_eq!(recs.len(), evs.len());
        for (r, e) in recs.iter().zip(&evs) {
            let want = encode_event(e, RECORD_RING);
            let want = if link == LinkType::Linux {
                [&want[..48], &want[64..]].concat()
            } else {
                want
            };
            assert_eq!(r.data, want, "{name}: packet {}", r.index);
            assert_eq!(r.ts_ns, e.ts.wall_ns, "{name}");
        }
        let cap = Capture::load(&p).unwrap();
        for (got, want) in cap.events.iter().zip(&evs) {
            let mut want = want.clone();
            if link == LinkType::Linux {
                // Not in the 48-byte header.
                want.interval = 0;
                want.start_frame = 0;
                want.xfer_flags = 0;
            }
            if want.data_capture == DataCapture::Unmapped || want.data.is_none() {
                want.data = None;
            } else if let Some(d) = &want.data {
                let plan = capture_plan(&want, usize::MAX);
                want.data = Some(Arc::from(&d[..plan.copied.min(d.len())]));
            }
            if want.kind == EventKind::Error {
                want.data = None;
                want.transfer_buffer_length = 0;
                want.actual_length = 0;
            }
            if want.kind == EventKind::Submit {
                want.actual_length = 0;
            }
            assert_eq!(got, &want, "{name}");
        }
        assert_eq!(cap.times[1], 125_000_000);
        assert_eq!(cap.snapped, 0);
    }
}

/// The text view of decoded events: 'D', 'Z', and descriptors.
#[test]
fn text_view_of_replayed_events() {
    use crate::usbmon::text::{format_line, TextFormat};
    let d = tmp();
    let p = d.path().join("t.pcapng");
    write_events(&p, &sample_events(2), Format::PcapNg, LinkType::Mmapped).unwrap();
    let cap = Capture::load(&p).unwrap();
    let lines: Vec<String> = cap
        .events
        .iter()
        .map(|e| format_line(e, TextFormat::U))
        .collect();
    let strip = |l: &str| {
        let mut w: Vec<&str> = l.split(' ').collect();
        w.remove(1);
        w.join(" ")
    };
    assert_eq!(
        strip(&lines[0]),
        "ffff88800a000040 S Ci:2:005:0 s 80 06 0100 0000 0012 18 <\n"
    );
    assert_eq!(
        strip(&lines[4]),
        "ffff88800a0000c0 S Co:2:005:0 Z __ __ ____ ____ ____ 0\n"
    );
    assert_eq!(
        strip(&lines[5]),
        "ffff88800a000100 S Bo:2:005:2 -115 31 Z\n"
    );
    assert_eq!(
        strip(&lines[8]),
        "ffff88800a000180 S Bo:2:005:2 -115 4096 D\n"
    );
    assert!(
        lines[14].contains(" 0:1:1234:1 3 0:0:100 -71:100:40 0:200:100 300 ="),
        "{}",
        lines[14]
    );
    assert!(lines[15].contains(" 130 -18:0:4 "), "{}", lines[15]);
}

fn swapped(pkt: &[u8], hl: usize) -> Vec<u8> {
    let mut h = [0u8; 64];
    h[..hl].copy_from_slice(&pkt[..hl]);
    let mut payload = pkt[hl..].to_vec();
    swap_header(&mut h, hl, &mut payload, false);
    [&h[..hl], &payload[..]].concat()
}

/// A capture from a machine of the other byte order decodes the same.
#[test]
fn other_byte_order() {
    let evs = sample_events(1);
    for hl in [48, 64] {
        let lt = if hl == 64 { 220 } else { 189 };
        let mut dec = Decoder::new();
        let mut dec2 = Decoder::new();
        for e in &evs {
            let pkt = encode_event(e, RECORD_RING);
            let pkt = if hl == 48 {
                [&pkt[..48], &pkt[64..]].concat()
            } else {
                pkt
            };
            let native = dec
                .decode(lt, cfg!(target_endian = "big"), e.ts.wall_ns, &pkt)
                .unwrap();
            let foreign = dec2
                .decode(
                    lt,
                    !cfg!(target_endian = "big"),
                    e.ts.wall_ns,
                    &swapped(&pkt, hl),
                )
                .unwrap();
            assert_eq!(native, foreign);
        }
    }
}

fn pcap_bytes(evs: &[UrbEvent]) -> Vec<u8> {
    let d = tmp();
    let p = d.path().join("x.pcap");
    write_events(&p, evs, Format::Pcap, LinkType::Mmapped).unwrap();
    std::fs::read(p).unwrap()
}

fn err_of(bytes: &[u8]) -> (u64, String) {
    let p = Path::new("/x/cap.pcap");
    let r = parse_records(p, bytes).and_then(|(_, recs)| Capture::from_records(p, &recs));
    match r {
        Err(e @ CaptureError::Corrupt { .. }) => {
            let s = e.to_string();
            assert!(s.starts_with("/x/cap.pcap: byte offset "), "{s}");
            (e.offset().unwrap(), s)
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("accepted"),
    }
}

#[test]
fn truncated_and_corrupt_pcap_name_the_offset() {
    let evs = sample_events(1);
    let b = pcap_bytes(&evs[..3]);
    let first = encode_event(&evs[0], RECORD_RING).len();
    let second = encode_event(&evs[1], RECORD_RING).len();
    let third_at = 24 + 16 + first + 16 + second;
    // Cut in the middle of the third packet's data.
    let (off, msg) = err_of(&b[..b.len() - 5]);
    assert_eq!(off, third_at as u64 + 16, "{msg}");
    assert!(msg.contains("packet 2: truncated"), "{msg}");
    // Cut in its record header.
    let (off, msg) = err_of(&b[..third_at + 7]);
    assert_eq!(off, third_at as u64, "{msg}");
    assert!(
        msg.contains("truncated record header (7 of 16 bytes)"),
        "{msg}"
    );
    let (off, msg) = err_of(&b[..10]);
    assert_eq!(off, 0);
    assert!(msg.contains("truncated pcap file header"), "{msg}");
    let (off, msg) = err_of(b"GIF89a..........................");
    assert_eq!(off, 0);
    assert!(msg.contains("not a pcap or pcapng file"), "{msg}");
    let mut eth = b.clone();
    eth[20..24].copy_from_slice(&1u32.to_ne_bytes());
    let (off, msg) = err_of(&eth);
    assert_eq!(off, 20);
    assert!(msg.contains("link type 1 is not usbmon"), "{msg}");
    // A bad event type in the second packet.
    let mut bad = b.clone();
    let second_at = 24 + 16 + first + 16;
    bad[second_at + 8] = b'X';
    let (off, msg) = err_of(&bad);
    assert_eq!(off, second_at as u64, "{msg}");
    assert!(
        msg.contains("packet 1: event type 'X' is not S, C or E"),
        "{msg}"
    );
    // Bytes the kernel zeroes.
    let mut bad = b.clone();
    bad[second_at + 52] = 1;
    let (_, msg) = err_of(&bad);
    assert!(msg.contains("header byte 52 (start_frame)"), "{msg}");
    // len_cap larger than the packet is a snapshot cut, not an error;
    // smaller is corrupt.
    let mut bad = b.clone();
    bad[second_at + 36] = 2;
    let (_, msg) = err_of(&bad);
    assert!(msg.contains("but len_cap is 2"), "{msg}");
    // An absurd length.
    let mut bad = b.clone();
    bad[24 + 8..24 + 12].copy_from_slice(&u32::MAX.to_ne_bytes());
    let (off, msg) = err_of(&bad);
    assert_eq!(off, 24);
    assert!(msg.contains("not plausible"), "{msg}");
}

#[test]
fn truncated_and_corrupt_pcapng_name_the_offset() {
    let d = tmp();
    let p = d.path().join("x.pcapng");
    let evs = sample_events(1);
    write_events(&p, &evs[..2], Format::PcapNg, LinkType::Mmapped).unwrap();
    let b = std::fs::read(&p).unwrap();
    let epb2_len = 32 + encode_event(&evs[1], RECORD_RING).len().div_ceil(4) * 4;
    let epb2_at = b.len() - epb2_len;
    let (off, msg) = err_of(&b[..b.len() - 3]);
    assert_eq!(off, epb2_at as u64, "{msg}");
    assert!(msg.contains("truncated block"), "{msg}");
    let (off, msg) = err_of(&b[..epb2_at + 5]);
    assert_eq!(off, epb2_at as u64, "{msg}");
    assert!(msg.contains("truncated block header"), "{msg}");
    // A packet of an interface that was never described.
    let mut bad = b.clone();
    bad[epb2_at + 8..epb2_at + 12].copy_from_slice(&3u32.to_ne_bytes());
    let (off, msg) = err_of(&bad);
    assert_eq!(off, epb2_at as u64, "{msg}");
    assert!(msg.contains("interface 3 was never described"), "{msg}");
    // A corrupt usbmon header inside a good block.
    let mut bad = b.clone();
    bad[epb2_at + 28 + 9] = 9;
    let (off, msg) = err_of(&bad);
    assert_eq!(off, epb2_at as u64 + 28, "{msg}");
    assert!(msg.contains("transfer type 9"), "{msg}");
}

/// A classic pcap (native byte order, µs) holding `pkts`.
fn pcap_of(linktype: u32, pkts: &[&[u8]]) -> Vec<u8> {
    let mut b = Vec::new();
    for v in [0xa1b2_c3d4u32, 0x0004_0002, 0, 0, 0x0004_0000, linktype] {
        b.extend_from_slice(&v.to_ne_bytes());
    }
    for (i, p) in pkts.iter().enumerate() {
        for v in [1_700_000_000u32, i as u32, p.len() as u32, p.len() as u32] {
            b.extend_from_slice(&v.to_ne_bytes());
        }
        b.extend_from_slice(p);
    }
    b
}

/// A bulk OUT submission of 4 GiB - 1 whose header claims all of it
/// (`len_cap` 0xffffffff) while only `present` data bytes follow.
fn huge_submit(present: usize) -> Vec<u8> {
    let mut ev = sample_events(1)
        .into_iter()
        .find(|e| e.xfer == XferType::Bulk && e.kind == EventKind::Submit && !e.dir_in)
        .unwrap();
    ev.transfer_buffer_length = u32::MAX;
    ev.data = Some((0..present).map(|i| i as u8).collect::<Vec<_>>().into());
    ev.data_capture = DataCapture::Partial(present as u32);
    let mut pkt = encode_event(&ev, usize::MAX);
    assert_eq!(pkt.len(), 64 + present);
    pkt[36..40].copy_from_slice(&u32::MAX.to_ne_bytes());
    pkt
}

/// A 104-byte capture whose one packet claims 4 GiB: it decodes from the
/// bytes present (snapped), holds none of the claimed rest, and replays
/// as usbmon would show such a URB to a reader.
#[test]
fn four_gib_len_cap_decodes_from_the_bytes_present() {
    let pkt = huge_submit(0);
    let file = pcap_of(LINKTYPE_USB_LINUX_MMAPPED, &[&pkt]);
    assert_eq!(file.len(), 104);
    let p = Path::new("/x/huge.pcap");
    let (_, recs) = parse_records(p, &file).unwrap();
    let cap = Capture::from_records(p, &recs).unwrap();
    assert_eq!((cap.events.len(), cap.snapped), (1, 1));
    let ev = &cap.events[0];
    assert_eq!(ev.transfer_buffer_length, u32::MAX);
    assert_eq!(ev.data.as_deref().map(<[u8]>::len), Some(0));
    // Replayed to a reader with the largest ring: its fifth, zeros.
    let out = encode_event(ev, BUFF_MAX as usize);
    assert_eq!(out.len(), 64 + BUFF_MAX as usize / 5);
    assert!(out[64..].iter().all(|&b| b == 0));
    // Some bytes present, in a 48-byte (189) header too.
    for lt in [LINKTYPE_USB_LINUX_MMAPPED, LINKTYPE_USB_LINUX] {
        let hl = if lt == LINKTYPE_USB_LINUX { 48 } else { 64 };
        let pkt = huge_submit(20);
        let pkt: Vec<u8> = pkt[..hl].iter().chain(&pkt[64..]).copied().collect();
        let d = Decoder::new()
            .decode(lt, cfg!(target_endian = "big"), 0, &pkt)
            .unwrap();
        assert!(d.snapped);
        assert_eq!(d.event.data.as_deref(), Some(&pkt[hl..]));
    }
}

/// A record longer than the rest of the file is truncated, reported
/// with its offset before any of it is copied; one beyond what usbmon
/// can capture is not plausible.
#[test]
fn caplen_beyond_the_file_is_truncated() {
    let pkt = huge_submit(16);
    let mut file = pcap_of(LINKTYPE_USB_LINUX_MMAPPED, &[&pkt]);
    file[24 + 8..24 + 12].copy_from_slice(&(pkt.len() as u32 + 1).to_ne_bytes());
    let (off, msg) = err_of(&file);
    assert_eq!(off, 40, "{msg}");
    assert!(
        msg.contains("packet 0: truncated: 81 bytes announced, 80 present"),
        "{msg}"
    );
    file[24 + 8..24 + 12].copy_from_slice(&(MAX_PACKET as u32).to_ne_bytes());
    let (_, msg) = err_of(&file);
    assert!(msg.contains("packet 0: truncated"), "{msg}");
    file[24 + 8..24 + 12].copy_from_slice(&(MAX_PACKET as u32 + 1).to_ne_bytes());
    let (off, msg) = err_of(&file);
    assert_eq!(off, 24, "{msg}");
    assert!(msg.contains("not plausible"), "{msg}");
    assert_eq!(MAX_PACKET, 64 + 128 * 16 + (64 << 20) / 5);
}

/// The index of the first isochronous completion among `evs` (its
/// submission is the event before).
fn iso_completion(evs: &[UrbEvent]) -> usize {
    evs.iter()
        .position(|e| e.xfer == XferType::Iso && e.kind == EventKind::Complete)
        .unwrap()
}

/// The header's `len_cap` beyond the data: only the data present is
/// kept (an ISO completion cut right after its descriptors too); the
/// header check still applies to the claimed `len_cap`.
#[test]
fn header_len_cap_beyond_the_data_is_clamped() {
    let evs = sample_events(1);
    let native = cfg!(target_endian = "big");
    let iso = iso_completion(&evs);
    let pkt = encode_event(&evs[iso], RECORD_RING);
    let lendesc = evs[iso].iso.len() * 16;
    for cut in [64 + lendesc, 64 + lendesc + 7, pkt.len()] {
        let mut dec = Decoder::new();
        dec.decode(220, native, 0, &encode_event(&evs[iso - 1], RECORD_RING))
            .unwrap();
        let d = dec.decode(220, native, 0, &pkt[..cut]).unwrap();
        assert_eq!(d.snapped, cut < pkt.len(), "cut {cut}");
        let data = d.event.data.as_deref().unwrap();
        assert_eq!(data.len(), cut.saturating_sub(64 + lendesc), "cut {cut}");
        assert_eq!(d.event.iso.len(), evs[iso].iso.len());
        let again = encode_event(&d.event, RECORD_RING);
        assert_eq!(again.len(), pkt.len());
        assert_eq!(&again[36..40], &pkt[36..40], "len_cap kept");
        assert_eq!(&again[64..cut], &pkt[64..cut]);
        assert!(again[cut..].iter().all(|&b| b == 0));
    }
    // A claimed len_cap beyond the URB's length is still corrupt.
    let mut bad = huge_submit(4);
    bad[32..36].copy_from_slice(&100u32.to_ne_bytes());
    let e = Decoder::new()
        .decode(220, native, 0, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("header byte 36 (len_cap)"), "{e}");
}

#[test]
fn snapshot_cut_packets_replay_with_zeros() {
    let evs = sample_events(1);
    let pkt = encode_event(&evs[1], RECORD_RING);
    let mut dec = Decoder::new();
    dec.decode(
        220,
        cfg!(target_endian = "big"),
        0,
        &encode_event(&evs[0], RECORD_RING),
    )
    .unwrap();
    let d = dec
        .decode(220, cfg!(target_endian = "big"), 0, &pkt[..64 + 10])
        .unwrap();
    assert!(d.snapped);
    let mut again = encode_event(&d.event, RECORD_RING);
    again[16..28].copy_from_slice(&pkt[16..28]);
    assert_eq!(&again[..74], &pkt[..74]);
    assert!(again[74..].iter().all(|&b| b == 0));
}

#[test]
fn tsresol_units() {
    assert_eq!(tsresol_to_ns(1_500_000, 6), 1_500_000_000);
    assert_eq!(tsresol_to_ns(7, 9), 7);
    assert_eq!(tsresol_to_ns(12, 10), 1);
    assert_eq!(tsresol_to_ns(1 << 20, 0x80 | 20), 1_000_000_000);
}

/// Packets counted beyond the 128 stored descriptors cost memory as they
/// are decoded: a capture's records may count at most 4,194,304 of them
/// in all (a hostile file of records claiming 65,536 packets each is
/// refused past that, with the packet named).
#[test]
fn packets_counted_beyond_the_descriptors_are_bounded() {
    let evs = sample_events(1);
    let native = cfg!(target_endian = "big");
    let iso = iso_completion(&evs);
    let mut ev = evs[iso].clone();
    ev.iso.resize(1 << 16, Default::default());
    ev.data = None;
    let pkt = encode_event(&ev, RECORD_RING);
    let mut dec = Decoder::new();
    dec.decode(220, native, 0, &encode_event(&evs[iso - 1], RECORD_RING))
        .unwrap();
    let fits = (1u64 << 22) / ((1 << 16) - 128);
    for _ in 0..fits {
        let d = dec.decode(220, native, 0, &pkt).unwrap();
        assert_eq!(d.event.iso.len(), 1 << 16);
    }
    let e = dec.decode(220, native, 0, &pkt).unwrap_err().to_string();
    assert!(e.contains("more than 4194304 ISO packets"), "{e}");
}
