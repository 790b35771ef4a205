//! Tests of the USB simulator, run deterministically (no sleeping).

use std::fmt::Write;
use std::sync::{Arc, Mutex};

use super::UsbSim;
use crate::base::clock::{Clock, Timestamp, VirtualClock};
use crate::base::sync::LockExt;
use crate::config::{Config, DeviceConfig, UsbConfig};
use crate::usbmon::event::{EventKind, UrbEvent, UrbSink, XferType};

#[derive(Default)]
struct Collect(Mutex<Vec<UrbEvent>>);

impl UrbSink for Collect {
    fn urb_event(&self, ev: UrbEvent) {
        self.0.lock_ok().push(ev);
    }
}

/// Keeps the first `cap` bulk events, counts all of them.
struct Capped {
    inner: Collect,
    cap: usize,
    bulk: std::sync::atomic::AtomicUsize,
}

impl UrbSink for Capped {
    fn urb_event(&self, ev: UrbEvent) {
        if ev.xfer == XferType::Bulk
            && self.bulk.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= self.cap
        {
            return;
        }
        self.inner.urb_event(ev);
    }
}

impl Collect {
    fn take(&self) -> Vec<UrbEvent> {
        std::mem::take(&mut *self.0.lock_ok())
    }
}

/// A clock for deterministic runs: simulation time never passes by itself.
struct TestClock;

impl Clock for TestClock {
    fn sim_now(&self) -> u64 {
        0
    }
    fn at(&self, sim_ns: u64) -> Timestamp {
        Timestamp {
            mono_ns: 100_000_000_000 + sim_ns,
            wall_ns: 1_704_067_200_000_000_000 + sim_ns,
        }
    }
}

/// Rough `u`-format line, for matching and debugging only.
fn fmt(ev: &UrbEvent) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "{:x} {} {} {}{}:{}:{:03}:{}",
        ev.id,
        ev.ts.text_usec(),
        ev.kind.letter() as char,
        ev.xfer.letter() as char,
        if ev.dir_in { 'i' } else { 'o' },
        ev.bus,
        ev.devnum,
        ev.epnum
    );
    let setup = ev.has_setup_phase();
    if setup {
        let u = ev.setup.unwrap();
        let w = |i: usize| u16::from_le_bytes([u[i], u[i + 1]]);
        let _ = write!(
            s,
            " s {:02x} {:02x} {:04x} {:04x} {:04x}",
            u[0],
            u[1],
            w(2),
            w(4),
            w(6)
        );
    } else if ev.kind == EventKind::Error {
        let _ = write!(s, " {}", ev.status);
    } else {
        match ev.xfer {
            XferType::Iso => {
                let _ = write!(s, " {}:{}:{}", ev.status, ev.interval, ev.start_frame);
                if ev.kind == EventKind::Complete {
                    let _ = write!(s, ":{}", ev.error_count);
                }
                let _ = write!(s, " {}", ev.iso.len());
                for d in ev.iso.iter().take(5) {
                    let _ = write!(s, " {}:{}:{}", d.status, d.offset, d.length);
                }
            }
            XferType::Interrupt => {
                let _ = write!(s, " {}:{}", ev.status, ev.interval);
            }
            _ => {
                let _ = write!(s, " {}", ev.status);
            }
        }
    }
    let len = if ev.kind == EventKind::Complete && ev.xfer == XferType::Iso && !ev.iso.is_empty() {
        ev.transfer_buffer_length
    } else {
        ev.length()
    };
    let _ = write!(s, " {len}");
    if ev.kind == EventKind::Error {
        return s;
    }
    if len > 0 {
        if ev.dir_in && ev.kind != EventKind::Complete {
            s.push_str(" <");
        } else if !ev.dir_in && ev.kind != EventKind::Submit {
            s.push_str(" >");
        } else {
            s.push_str(" =");
            let d = ev.data.as_deref().unwrap_or(&[]);
            for (i, b) in d.iter().take(len.min(32) as usize).enumerate() {
                if i % 4 == 0 {
                    s.push(' ');
                }
                let _ = write!(s, "{b:02x}");
            }
        }
    }
    s
}

/// The line without tag and timestamp.
fn body(ev: &UrbEvent) -> String {
    fmt(ev).splitn(3, ' ').nth(2).unwrap().to_string()
}

fn default_cfg() -> UsbConfig {
    Config::builtin().usb
}

fn run(cfg: &UsbConfig, seed: u64, ms: u64) -> (UsbSim, Vec<UrbEvent>, Arc<Collect>) {
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::run_for_test(cfg, seed, ms, Arc::new(TestClock), sink.clone());
    let evs = sink.take();
    (sim, evs, sink)
}

/// Check that `wanted` appear in this order among `lines` (as substrings).
fn in_order(lines: &[String], wanted: &[&str]) {
    let mut i = 0;
    for w in wanted {
        match lines[i..].iter().position(|l| l.contains(w)) {
            Some(p) => i += p + 1,
            None => panic!("{w:?} not found in order; lines:\n{}", lines.join("\n")),
        }
    }
}

fn dev_lines(evs: &[UrbEvent], bus: u16, devnum: u8) -> Vec<String> {
    evs.iter()
        .filter(|e| e.bus == bus && e.devnum == devnum)
        .map(body)
        .collect()
}

#[test]
fn timestamps_are_monotonic_per_bus_and_tags_look_like_kernel_addresses() {
    let (_, evs, _) = run(&default_cfg(), 1, 3000);
    assert!(evs.len() > 500, "only {} events", evs.len());
    for bus in [1, 2] {
        let ts: Vec<_> = evs
            .iter()
            .filter(|e| e.bus == bus)
            .map(|e| e.ts.mono_ns)
            .collect();
        assert!(
            ts.windows(2).all(|w| w[0] <= w[1]),
            "bus {bus} out of order"
        );
    }
    let all: Vec<_> = evs.iter().map(|e| e.ts.mono_ns).collect();
    assert!(
        all.windows(2).all(|w| w[0] <= w[1]),
        "buses not merged in time order"
    );
    for e in &evs {
        assert_eq!(e.id >> 32, 0xffff_8880, "{}", fmt(e));
        assert_eq!(e.id % 0x40, 0, "{}", fmt(e));
    }
    // Every C has an S before it with the same tag on the same endpoint.
    let mut open = std::collections::HashMap::new();
    for e in &evs {
        let key = (e.bus, e.id);
        match e.kind {
            EventKind::Submit => {
                assert!(
                    open.insert(key, (e.devnum, e.epnum)).is_none(),
                    "tag in flight twice: {}",
                    fmt(e)
                );
            }
            EventKind::Complete => {
                let o = open.remove(&key);
                assert!(o.is_some(), "completion without submit: {}", fmt(e));
            }
            EventKind::Error => {}
        }
    }
}

#[test]
fn root_hub_enumeration_like_the_kernel() {
    let (_, evs, _) = run(&default_cfg(), 7, 1000);
    let l = dev_lines(&evs, 1, 1);
    assert_eq!(l[0], "S Ci:1:001:0 s 80 06 0100 0000 0012 18 <");
    assert_eq!(
        l[1],
        "C Ci:1:001:0 0 18 = 12010002 09000140 6b1d0200 12060302 0101"
    );
    in_order(
        &l,
        &[
            "S Ci:1:001:0 s 80 06 0200 0000 0009 9 <",
            "C Ci:1:001:0 0 9 = 09021900 010100e0 00",
            "S Ci:1:001:0 s 80 06 0200 0000 0019 25 <",
            "S Ci:1:001:0 s 80 06 0300 0000 00ff 255 <",
            "C Ci:1:001:0 0 4 = 04030904",
            "S Ci:1:001:0 s 80 06 0302 0409 00ff 255 <",
            "S Ci:1:001:0 s 80 06 0303 0409 00ff 255 <",
            "S Ci:1:001:0 s 80 06 0301 0409 00ff 255 <",
            "S Co:1:001:0 s 00 09 0001 0000 0000 0",
            "S Ci:1:001:0 s a0 06 2900 0000 000f 15 <",
            "C Ci:1:001:0 0 15 = 0929040a 000a0000 ffffffff ffffff",
            "S Ci:1:001:0 s 80 00 0000 0000 0002 2 <",
            "C Ci:1:001:0 0 2 = 0100",
            "S Ci:1:001:0 s a0 00 0000 0000 0004 4 <",
            "S Co:1:001:0 s 23 03 0008 0001 0000 0",
            "S Co:1:001:0 s 23 03 0008 0004 0000 0",
            "S Ci:1:001:0 s a3 00 0000 0001 0004 4 <",
            "C Ci:1:001:0 0 4 = 01050100",
            "S Co:1:001:0 s 23 01 0010 0001 0000 0",
            "S Ii:1:001:1 -115:2048 4 <",
            "S Co:1:001:0 s 23 03 0004 0001 0000 0",
            "C Ci:1:001:0 0 4 = 03051000",
            "S Co:1:001:0 s 23 01 0014 0001 0000 0",
        ],
    );
    // Every device on the root ports is high speed, as qemu's keyboard,
    // mouse and stick are (and the hub).
    assert!(
        !l.iter().any(|x| x == "C Ci:1:001:0 0 4 = 01010100"),
        "{l:#?}"
    );
    // Root hub of bus 2 (EHCI, no TT).
    let l2 = dev_lines(&evs, 2, 1);
    assert_eq!(
        l2[1],
        "C Ci:2:001:0 0 18 = 12010002 09000040 6b1d0200 12060302 0101"
    );
}

#[test]
fn devices_enumerate_in_order_with_class_setup() {
    let (_, evs, _) = run(&default_cfg(), 3, 2500);
    let std_enum = |bus: u16, dev: u8, cfg_len: &str| {
        let l = dev_lines(&evs, bus, dev);
        in_order(
            &l,
            &[
                &format!("S Ci:{bus}:{dev:03}:0 s 80 06 0100 0000 0012 18 <"),
                &format!("C Ci:{bus}:{dev:03}:0 0 18 = 1201"),
                &format!("S Ci:{bus}:{dev:03}:0 s 80 06 0200 0000 0009 9 <"),
                &format!("S Ci:{bus}:{dev:03}:0 s 80 06 0200 0000 {cfg_len}"),
                &format!("S Ci:{bus}:{dev:03}:0 s 80 06 0300 0000 00ff 255 <"),
                &format!("S Ci:{bus}:{dev:03}:0 s 80 06 030"),
                &format!("S Co:{bus}:{dev:03}:0 s 00 09 0001 0000 0000 0"),
            ],
        );
        l
    };
    // Address 0 first, on both buses.
    let zero = dev_lines(&evs, 1, 0);
    assert_eq!(zero[0], "S Ci:1:000:0 s 80 06 0100 0000 0040 64 <");
    // The keyboard is high speed, with qemu's device descriptor.
    assert!(
        zero[1].starts_with("C Ci:1:000:0 0 18 = 12010002 00000040 27060100"),
        "{}",
        zero[1]
    );
    // xHCI: no SET_ADDRESS URB; EHCI: SET_ADDRESS at address 0.
    assert!(!zero.iter().any(|x| x.contains("s 00 05")));
    let zero2 = dev_lines(&evs, 2, 0);
    in_order(
        &zero2,
        &[
            "S Ci:2:000:0 s 80 06 0100 0000 0040 64 <",
            "S Co:2:000:0 s 00 05 0002 0000 0000 0",
        ],
    );

    // Keyboard (1-1 = address 2), mouse (3), storage (4), hub (5), audio (6).
    let kbd = std_enum(1, 2, "0022 34 <");
    // qemu's keyboard (as the kernel reads it in kernel-vm): strings 4, 1,
    // 0x0b; after SET_CONFIGURATION the configuration string (8), then
    // usbhid's serial read, SET_IDLE, the report descriptor, the LEDs.
    in_order(
        &kbd,
        &[
            "C Ci:1:002:0 0 34 = 09022200 010108a0 32090400 00010301 01000921 11010001 223f0007 05810308",
            "S Ci:1:002:0 s 80 06 0304 0409 00ff 255 <",
            "S Ci:1:002:0 s 80 06 0301 0409 00ff 255 <",
            "S Ci:1:002:0 s 80 06 030b 0409 00ff 255 <",
            "S Co:1:002:0 s 00 09 0001 0000 0000 0",
            "S Ci:1:002:0 s 80 06 0308 0409 00ff 255 <",
            "C Ci:1:002:0 0 26 = 1a034800 49004400 20004b00 65007900 62006f00 61007200 6400",
            "S Ci:1:002:0 s 80 06 030b 0409 00ff 255 <",
            "S Co:1:002:0 s 21 0a 0000 0000 0000 0",
            "S Ci:1:002:0 s 81 06 2200 0000 003f 63 <",
            "C Ci:1:002:0 0 63 = 05010906 a1017501",
            "S Co:1:002:0 s 21 09 0200 0000 0001 1 = 00",
            "S Ii:1:002:1 -115:64 8 <",
        ],
    );
    let mouse = std_enum(1, 3, "0022 34 <");
    // qemu's mouse (as the kernel reads it in kernel-vm): high speed,
    // strings 2, 1, 9, configuration string 6, bInterval 7 (64 microframes).
    in_order(
        &mouse,
        &[
            "C Ci:1:003:0 0 34 = 09022200 010106a0 32090400 00010301 02000921 01000001 22340007 05810304",
            "S Ci:1:003:0 s 80 06 0302 0409 00ff 255 <",
            "S Ci:1:003:0 s 80 06 0301 0409 00ff 255 <",
            "S Ci:1:003:0 s 80 06 0309 0409 00ff 255 <",
            "S Co:1:003:0 s 00 09 0001 0000 0000 0",
            "S Ci:1:003:0 s 80 06 0306 0409 00ff 255 <",
            "C Ci:1:003:0 0 20 = 14034800 49004400 20004d00 6f007500 73006500",
            "S Ci:1:003:0 s 80 06 0309 0409 00ff 255 <",
            "S Co:1:003:0 s 21 0a 0000 0000 0000 0",
            "S Ci:1:003:0 s 81 06 2200 0000 0034 52 <",
            "S Ii:1:003:1 -115:64 4 <",
        ],
    );
    let storage = std_enum(1, 4, "0020 32 <");
    // qemu's usb-storage: self-powered, 0 mA, configuration string 5.
    in_order(
        &storage,
        &[
            "C Ci:1:004:0 0 32 = 09022000 010105c0 00090400 00020806 50000705 81020002 00070502 02000200",
            "S Co:1:004:0 s 00 09 0001 0000 0000 0",
            "S Ci:1:004:0 s 80 06 0305 0409 00ff 255 <",
            "C Ci:1:004:0 0 56 = 38034800 69006700 68002000 73007000 65006500 64002000 63006f00 6e006600",
            "S Ci:1:004:0 s a1 fe 0000 0000 0001 1 <",
        ],
    );
    let hub = std_enum(1, 5, "0019 25 <");
    in_order(
        &hub,
        &[
            "S Ci:1:005:0 s 80 06 0301 0409 00ff 255 <",
            "C Ci:1:005:0 0 22 = 16035500 53004200 32002e00 30002000 48007500 6200",
            "S Ci:1:005:0 s a0 06 2900 0000 000f 15 <",
            "C Ci:1:005:0 0 9 = 092904e0 00326400 ff",
            "S Co:1:005:0 s 23 03 0008 0001 0000 0",
            "S Co:1:005:0 s 23 03 0008 0004 0000 0",
            "C Ci:1:005:0 0 4 = 01010100",
            "S Ii:1:005:1 -115:2048 1 <",
            "S Co:1:005:0 s 23 03 0004 0001 0000 0",
        ],
    );
    let audio = std_enum(1, 6, "0071 113 <");
    // qemu's usb-audio: every request of its enumeration and of
    // snd-usb-audio's probe as the 6.12 kernel sent them in kernel-vm (its
    // usbmon capture of bus 2), then the player's SET_INTERFACE and its
    // stream.
    let setups: Vec<String> = audio
        .iter()
        .filter(|l| l.starts_with("S C") && l.contains(" s "))
        .map(|l| l.split(' ').skip(3).take(5).collect::<Vec<_>>().join(" "))
        .collect();
    let mut want = vec![
        "80 06 0100 0000 0012",
        "80 06 0200 0000 0009",
        "80 06 0200 0000 0071",
        "80 06 0300 0000 00ff",
        "80 06 0302 0409 00ff",
        "80 06 0301 0409 00ff",
        "80 06 0303 0409 00ff",
        "00 09 0001 0000 0000",
        "80 06 0304 0409 00ff",
        "80 06 0305 0409 00ff",
        "80 06 0309 0409 00ff",
        "80 06 0302 0409 00ff",
        "80 06 0301 0409 00ff",
        "01 0b 0000 0001 0000",
        "01 0b 0001 0001 0000",
        "80 06 030a 0409 00ff",
        "01 0b 0000 0001 0000",
        "80 06 0307 0409 00ff",
        "a1 81 0100 0200 0001",
        "80 06 0307 0409 00ff",
        "a1 83 0201 0200 0002",
        "a1 82 0201 0200 0002",
        "a1 84 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "21 04 0201 0200 0002",
        "a1 84 0201 0200 0002",
        "a1 81 0201 0200 0002",
        "21 01 0201 0200 0002",
        "a1 81 0201 0200 0002",
        "21 01 0201 0200 0002",
        "a1 81 0201 0200 0002",
        "21 01 0201 0200 0002",
        "a1 81 0201 0200 0002",
        "21 01 0201 0200 0002",
        "a1 81 0201 0200 0002",
        "21 01 0201 0200 0002",
        "a1 81 0202 0200 0002",
    ];
    want.push("01 0b 0001 0001 0000");
    assert_eq!(setups, want, "{}", audio.join("\n"));
    in_order(
        &audio,
        &[
            "C Ci:1:006:0 0 2 = 0008",
            "C Ci:1:006:0 0 2 = 0180",
            "C Ci:1:006:0 0 2 = 8800",
            "S Co:1:006:0 s 21 04 0201 0200 0002 2 = 4400",
            // qemu's device stalls after the data stage: the stall counts
            // its 2 bytes, as kernel-vm shows.
            "C Co:1:006:0 -32 2 >",
            "S Co:1:006:0 s 21 01 0201 0200 0002 2 = 8800",
            "C Co:1:006:0 0 2 >",
            "C Ci:1:006:0 0 2 = 8900",
            "C Ci:1:006:0 0 2 = 1101",
            "C Ci:1:006:0 0 2 = 2202",
            "C Ci:1:006:0 0 2 = 4404",
            "S Co:1:006:0 s 01 0b 0001 0001 0000 0",
            "S Zo:1:006:1 -115:1:0 4 -18:0:192 -18:192:192 -18:384:192 -18:576:192 768 =",
            "C Zo:1:006:1 0:1:",
        ],
    );
    // Bus 2: webcam (2) and the flaky reader (3).
    let cam = std_enum(2, 2, "0069 105 <");
    in_order(
        &cam,
        &[
            "S Co:2:002:0 s 21 01 0100 0001 001a 26 = 01000101 15160500",
            "S Ci:2:002:0 s a1 81 0100 0001 001a 26 <",
            "S Co:2:002:0 s 21 01 0200 0001 001a 26 =",
            "S Co:2:002:0 s 01 0b 0001 0001 0000 0",
            "S Zi:2:002:1 -115:8:0 32 -18:0:1024 -18:1024:1024",
            "C Zi:2:002:1 0:8:",
        ],
    );
    std_enum(2, 3, "0020 32 <");
}

/// `player: false`: the audio device gets snd-usb-audio's probe and is
/// left at setting 0 with no stream, as on a machine where nothing plays
/// (the kernel-vm guest); the default has a player: its setting, then the
/// stream.
#[test]
fn audio_without_a_player_stays_idle_after_the_probe() {
    let yaml = |player: &str| {
        format!("usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {{port: 1, kind: audio{player}}}\n")
    };
    let lines = |player: &str| {
        let cfg = Config::parse(&yaml(player), "t").unwrap().usb;
        let (_, evs, _) = run(&cfg, 5, 2500);
        dev_lines(&evs, 1, 2)
    };
    let idle = lines(", player: false");
    let playing = lines("");
    let last_setup = |l: &[String]| {
        l.iter()
            .rfind(|x| x.starts_with("S C") && x.contains(" s "))
            .cloned()
            .unwrap()
    };
    // The probe ends with GET_CUR of channel 2's volume.
    assert_eq!(
        last_setup(&idle),
        "S Ci:1:002:0 s a1 81 0202 0200 0002 2 <",
        "{idle:#?}"
    );
    assert!(!idle.iter().any(|x| x.contains(" Zo:")), "{idle:#?}");
    assert_eq!(
        last_setup(&playing),
        "S Co:1:002:0 s 01 0b 0001 0001 0000 0"
    );
    assert!(playing.iter().any(|x| x.starts_with("C Zo:1:002:1 0:1:")));
}

#[test]
fn hid_reports_complete_and_resubmit() {
    let (_, evs, _) = run(&default_cfg(), 11, 3000);
    let kbd: Vec<&UrbEvent> = evs
        .iter()
        .filter(|e| e.bus == 1 && e.devnum == 2 && e.epnum == 1)
        .collect();
    let completions: Vec<String> = kbd
        .iter()
        .filter(|e| e.kind == EventKind::Complete)
        .map(|e| body(e))
        .collect();
    assert!(completions.len() >= 4, "{completions:#?}");
    assert!(
        completions
            .iter()
            .any(|c| c.starts_with("C Ii:1:002:1 0:64 8 = 00000b00 00000000")),
        "{completions:#?}"
    ); // 'h'
    assert!(completions
        .iter()
        .any(|c| c == "C Ii:1:002:1 0:64 8 = 00000000 00000000"));
    // Every completion is followed at once by a submission of the same URB.
    for w in kbd.windows(2) {
        if w[0].kind == EventKind::Complete {
            assert_eq!(w[1].kind, EventKind::Submit);
            assert_eq!(w[1].id, w[0].id);
            assert!(w[1].ts.mono_ns - w[0].ts.mono_ns < 100_000);
        }
    }
    // All on one URB; completions fall on the polling grid (8 ms) from their submit.
    assert!(kbd.iter().all(|e| e.id == kbd[0].id));
    // The keyboard starts typing within the first second.
    let first = evs.iter().find(|e| {
        e.bus == 1
            && e.devnum == 2
            && e.xfer == XferType::Interrupt
            && e.kind == EventKind::Complete
    });
    assert!(first.unwrap().ts.mono_ns - 100_000_000_000 < 1_000_000_000);
    let mouse = evs
        .iter()
        .filter(|e| e.bus == 1 && e.devnum == 3 && e.epnum == 1 && e.kind == EventKind::Complete)
        .count();
    assert!(mouse > 5, "mouse moved {mouse} times");
}

#[test]
fn storage_cbw_data_csw() {
    let (_, evs, _) = run(&default_cfg(), 5, 3000);
    let l = dev_lines(&evs, 1, 4);
    in_order(
        &l,
        &[
            "S Ci:1:004:0 s a1 fe 0000 0000 0001 1 <",
            "C Ci:1:004:0 0 1 = 00",
            "S Bo:1:004:2 -115 31 = 55534243 01000000 24000000 80000612 00000024 00000000 00000000 000000",
            "C Bo:1:004:2 0 31 >",
            "S Bi:1:004:1 -115 36 <",
            // qemu's scsi-hd (kernel-vm's oracle, byte for byte).
            "C Bi:1:004:1 0 36 = 00000512 1f000010 51454d55 20202020 51454d55 20484152 44444953 4b202020",
            "S Bi:1:004:1 -115 13 <",
            "C Bi:1:004:1 0 13 = 55534253 01000000 00000000 00",
            "S Bo:1:004:2 -115 31 = 55534243 02000000 00000000 00000600",
            "C Bi:1:004:1 0 13 = 55534253 02000000 00000000 00",
            "C Bi:1:004:1 0 8 = 003fffff 00000200",
            // MODE SENSE(6) of all pages: 100 bytes (the oracle's but for
            // the block count and cylinders of a 2 GiB disk, not 16 MiB),
            // padded with zeros to the CBW's 192; residue 0.
            "C Bi:1:004:1 0 192 = 63000008 00400000 00000200 010a8000 00000000 00000000 04160010 41100010",
            "C Bi:1:004:1 0 13 = 55534253 04000000 00000000 00",
            "S Bo:1:004:2 -115 31 = 55534243 05000000 00100000 80000a28 00000000 00000008",
            "C Bi:1:004:1 0 4096 = 00000000",
        ],
    );
    let writes = l
        .iter()
        .filter(|x| x.starts_with("S Bo:1:004:2 -115 ") && !x.contains(" 31 = "))
        .count();
    let cbws = l
        .iter()
        .filter(|x| x.starts_with("S Bo:1:004:2 -115 31 = 55534243"))
        .count();
    assert!(cbws >= 10, "{cbws} commands");
    assert!(writes >= 1, "no WRITE(10) data stage");
    // CBW and CSW share usb-storage's URB, the data stage has its own.
    let cbw = evs
        .iter()
        .find(|e| e.devnum == 4 && e.bus == 1 && e.epnum == 2)
        .unwrap();
    let csw = evs
        .iter()
        .find(|e| e.devnum == 4 && e.bus == 1 && e.epnum == 1 && e.transfer_buffer_length == 13)
        .unwrap();
    assert_eq!(cbw.id, csw.id);
}

#[test]
fn audio_iso_out_stream() {
    let (_, evs, _) = run(&default_cfg(), 9, 3000);
    let iso: Vec<&UrbEvent> = evs
        .iter()
        .filter(|e| e.bus == 1 && e.xfer == XferType::Iso)
        .collect();
    let subs: Vec<_> = iso.iter().filter(|e| e.kind == EventKind::Submit).collect();
    let comps: Vec<_> = iso
        .iter()
        .filter(|e| e.kind == EventKind::Complete)
        .collect();
    assert!(subs.len() > 100);
    for s in &subs {
        assert_eq!(s.iso.len(), 4);
        assert!(s.iso.iter().all(|d| d.status == -18 && d.length == 192));
        assert_eq!(s.data.as_ref().unwrap().len(), 768);
        assert_eq!(s.xfer_flags & 0x2, 0x2, "URB_ISO_ASAP");
        assert_eq!(s.start_frame, 0);
    }
    for c in &comps {
        assert_eq!(c.status, 0);
        assert!(c.iso.iter().all(|d| d.status == 0 && d.length == 192));
        assert_eq!(c.actual_length, 768);
    }
    // Start frames advance by 4 frames per URB, completions every ~4 ms.
    let frames: Vec<i32> = comps.iter().map(|c| c.start_frame).collect();
    for w in frames.windows(2) {
        assert_eq!((w[1] - w[0]).rem_euclid(2048), 4, "{frames:?}");
    }
    let dt = comps[comps.len() - 1].ts.mono_ns - comps[0].ts.mono_ns;
    let per = dt / (comps.len() as u64 - 1);
    assert!((3_900_000..4_100_000).contains(&per), "{per}");
    // Two URBs in flight, alternating.
    let tags: std::collections::BTreeSet<u64> = subs.iter().map(|s| s.id).collect();
    assert_eq!(tags.len(), 2);
}

#[test]
fn webcam_iso_in_payloads() {
    let (_, evs, _) = run(&default_cfg(), 13, 3000);
    let comps: Vec<&UrbEvent> = evs
        .iter()
        .filter(|e| e.bus == 2 && e.xfer == XferType::Iso && e.kind == EventKind::Complete)
        .collect();
    assert!(comps.len() > 20);
    let mut zero = 0;
    let mut eof = 0;
    for c in &comps {
        assert_eq!(c.iso.len(), 32);
        assert_eq!(c.transfer_buffer_length, 32 * 1024);
        let data = c.data.as_ref().unwrap();
        assert_eq!(data.len(), 32 * 1024);
        assert_eq!(c.actual_length, c.iso.iter().map(|d| d.length).sum::<u32>());
        for d in &c.iso {
            if d.length == 0 {
                zero += 1;
                continue;
            }
            let p = &data[d.offset as usize..];
            assert_eq!(p[0], 12, "UVC header length");
            assert_eq!(p[1] & 0x80, 0x80, "EOH");
            if p[1] & 2 != 0 {
                eof += 1;
            }
        }
    }
    assert!(zero > 0 && eof > 10, "zero {zero} eof {eof}");
    // The event rate stays moderate.
    let bus2 = evs.iter().filter(|e| e.bus == 2).count();
    assert!(bus2 < 3 * 400, "{bus2} events on bus 2 in 3 s");
}

#[test]
#[ignore]
fn dump_default() {
    let (sim, evs, _) = run(&default_cfg(), 1, 3000);
    for e in &evs {
        println!("{}", fmt(e));
    }
    println!("{}", sim.devices_text());
}

#[test]
fn same_seed_same_events_different_seed_differs() {
    let cfg = default_cfg();
    let (_, a, _) = run(&cfg, 42, 2000);
    let (_, b, _) = run(&cfg, 42, 2000);
    let (_, c, _) = run(&cfg, 43, 2000);
    assert_eq!(a.len(), b.len());
    assert!(a == b, "same seed gave different events");
    assert!(a != c);
    assert_ne!(a[0].id, c[0].id);
}

#[test]
fn devices_text_format() {
    let (sim, _, _) = run(&default_cfg(), 21, 3000);
    let t = sim.devices_text();
    let expect_root = "
T:  Bus=01 Lev=00 Prnt=00 Port=00 Cnt=00 Dev#=  1 Spd=480  MxCh= 4
B:  Alloc=  0/800 us ( 0%), #Int=  0, #Iso=  0
D:  Ver= 2.00 Cls=09(hub  ) Sub=00 Prot=01 MxPS=64 #Cfgs=  1
P:  Vendor=1d6b ProdID=0002 Rev= 6.12
S:  Manufacturer=Linux 6.12.0-monfs xhci-hcd
S:  Product=xHCI Host Controller
S:  SerialNumber=0000:00:04.0
C:* #Ifs= 1 Cfg#= 1 Atr=e0 MxPwr=  0mA
I:* If#= 0 Alt= 0 #EPs= 1 Cls=09(hub  ) Sub=00 Prot=00 Driver=hub
E:  Ad=81(I) Atr=03(Int.) MxPS=   4 Ivl=256ms

T:  Bus=01 Lev=01 Prnt=01 Port=00 Cnt=01 Dev#=  2 Spd=480  MxCh= 0
D:  Ver= 2.00 Cls=00(>ifc ) Sub=00 Prot=00 MxPS=64 #Cfgs=  1
P:  Vendor=0627 ProdID=0001 Rev= 0.00
S:  Manufacturer=QEMU
S:  Product=QEMU USB Keyboard
S:  SerialNumber=68284-0000:00:04.0-1
C:* #Ifs= 1 Cfg#= 1 Atr=a0 MxPwr=100mA
I:* If#= 0 Alt= 0 #EPs= 1 Cls=03(HID  ) Sub=01 Prot=01 Driver=usbhid
E:  Ad=81(I) Atr=03(Int.) MxPS=   8 Ivl=8ms
";
    assert!(t.starts_with(expect_root), "{t}");
    for needle in [
        "\nT:  Bus=01 Lev=01 Prnt=01 Port=02 Cnt=03 Dev#=  4 Spd=480  MxCh= 0\n",
        "I:* If#= 0 Alt= 0 #EPs= 2 Cls=08(stor.) Sub=06 Prot=50 Driver=usb-storage\nE:  Ad=81(I) Atr=02(Bulk) MxPS= 512 Ivl=0ms\nE:  Ad=02(O) Atr=02(Bulk) MxPS= 512 Ivl=0ms\n",
        "\nT:  Bus=01 Lev=01 Prnt=01 Port=03 Cnt=04 Dev#=  5 Spd=480  MxCh= 4\n",
        "\nT:  Bus=01 Lev=02 Prnt=05 Port=00 Cnt=01 Dev#=  6 Spd=12   MxCh= 0\n",
        "I:* If#= 0 Alt= 0 #EPs= 0 Cls=01(audio) Sub=01 Prot=04 Driver=snd-usb-audio\nI:  If#= 1 Alt= 0 #EPs= 0 Cls=01(audio) Sub=02 Prot=00 Driver=snd-usb-audio\nI:* If#= 1 Alt= 1 #EPs= 1 Cls=01(audio) Sub=02 Prot=00 Driver=snd-usb-audio\nE:  Ad=01(O) Atr=0d(Isoc) MxPS= 192 Ivl=1ms\n",
        "\nT:  Bus=02 Lev=00 Prnt=00 Port=00 Cnt=00 Dev#=  1 Spd=480  MxCh= 2\n",
        "D:  Ver= 2.00 Cls=ef(misc ) Sub=02 Prot=01 MxPS=64 #Cfgs=  1\n",
        "A:  FirstIf#= 0 IfCount= 2 Cls=0e(video) Sub=03 Prot=00\n",
        "E:  Ad=81(I) Atr=05(Isoc) MxPS=1024 Ivl=1ms\n",
        "S:  Product=Flaky Card Reader\n",
    ] {
        assert!(t.contains(needle), "missing {needle:?} in\n{t}");
    }
    // The external hub has no manufacturer or serial string.
    let hub = t.split("\n\n").find(|b| b.contains("Dev#=  5")).unwrap();
    assert!(
        hub.contains("S:  Product=USB2.0 Hub") && !hub.contains("Manufacturer"),
        "{hub}"
    );
    // Every block starts with T:, every line has a known prefix.
    assert!(t.starts_with('\n') && t.ends_with('\n'));
    for line in t.lines().filter(|l| !l.is_empty()) {
        let p = &line[..3];
        assert!(
            ["T: ", "B: ", "D: ", "P: ", "S: ", "C:*", "C: ", "A: ", "I:*", "I: ", "E: "]
                .contains(&p),
            "{line}"
        );
    }
    assert_eq!(t.matches("\nT:  ").count(), 9, "{t}");
    for line in t.lines().filter(|l| l.starts_with("T:")) {
        assert_eq!(
            line.len(),
            "T:  Bus=01 Lev=00 Prnt=00 Port=00 Cnt=00 Dev#=  1 Spd=480  MxCh= 4".len()
        );
    }
}

fn flaky_only() -> UsbConfig {
    let mut cfg = default_cfg();
    cfg.buses.retain(|b| b.bus.0 == 2);
    cfg.buses[0].devices.retain(|d| d.port.0 == 2);
    cfg
}

#[test]
fn injected_errors() {
    let (_, evs, _) = run(&flaky_only(), 17, 8000);
    let l: Vec<String> = evs.iter().filter(|e| e.devnum == 2).map(body).collect();
    let stall = l
        .iter()
        .position(|x| x.starts_with("C B") && x.contains(" -32 0"))
        .expect("no stall");
    let ep = if l[stall].starts_with("C Bi") {
        "0081"
    } else {
        "0002"
    };
    assert!(
        l[stall + 1..]
            .iter()
            .take(4)
            .any(|x| x.contains(&format!("s 02 01 0000 {ep} 0000 0"))),
        "no CLEAR_FEATURE(ENDPOINT_HALT) after {}",
        l[stall]
    );
    assert!(
        l.iter()
            .any(|x| x.starts_with("C B") && x.contains(" -2 0")),
        "no unlink"
    );
    let e = evs
        .iter()
        .find(|e| e.kind == EventKind::Error)
        .expect("no submit error");
    assert_eq!(e.status, -19);
    assert!(body(e).starts_with("E B"), "{}", body(e));
    // After an unlink or a failed submission: the bulk-only reset.
    assert!(l.iter().any(|x| x.contains("s 21 ff 0000 0000 0000 0")));
    // The stream continues.
    assert!(l.last().unwrap().contains(":2:002:"));
    let last_t = evs.last().unwrap().ts.mono_ns - 100_000_000_000;
    assert!(last_t > 7_000_000_000, "stream died at {last_t}");
}

#[test]
fn proto_errors_and_hid_stall() {
    let yaml = "usb:\n  buses:\n    - bus: 3\n      devices:\n        - port: 1\n          kind: hid-mouse\n          interval_ms: 1\n          errors: {stall_every: 5, proto_error_every: 7}\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let (_, evs, _) = run(&cfg, 1, 4000);
    let l = dev_lines(&evs, 3, 2);
    in_order(
        &l,
        &[
            "C Ii:3:002:1 -32:8 0",
            "S Co:3:002:0 s 02 01 0000 0081 0000 0",
            "S Ii:3:002:1 -115:8 4 <",
        ],
    );
    assert!(
        l.iter().any(|x| x.starts_with("C Ii:3:002:1 -71:8 0")),
        "{l:#?}"
    );
}

/// usbhid's interrupt IN URB as hid_irq_in takes its statuses: unlinked
/// (-2), it is not resubmitted and the device's input stops there; a
/// babble (-75) is resubmitted at once.
#[test]
fn usbhid_stops_at_an_unlink_and_resubmits_a_babble_at_once() {
    let yaml = "usb:\n  buses:\n    - bus: 3\n      devices:\n        - port: 1\n          kind: hid-mouse\n          interval_ms: 1\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let (sim, _, sink) = run(&cfg, 1, 2000);
    let ep1 = |l: &String| l[2..].starts_with("Ii:3:002:1 ");
    sim.inject(3, &[1], super::ctx::Fault::Babble).unwrap();
    sim.run_until(8_000_000_000);
    let evs = sink.take();
    let at = evs.iter().position(|e| e.status == -75).expect("no babble");
    let next = evs[at + 1..]
        .iter()
        .find(|e| e.devnum == 2 && e.kind == EventKind::Submit)
        .unwrap();
    assert!(next.ts.mono_ns - evs[at].ts.mono_ns < 100_000, "{next:?}");
    sim.inject(3, &[1], super::ctx::Fault::Unlink).unwrap();
    sim.run_until(20_000_000_000);
    let l: Vec<String> = sink.take().iter().map(body).filter(ep1).collect();
    let unlinked = l
        .iter()
        .position(|x| x.starts_with("C Ii:3:002:1 -2:"))
        .expect("no unlink");
    assert_eq!(unlinked, l.len() - 1, "{l:#?}");
}

#[test]
fn unplug_fails_urbs_and_removes_device() {
    let (sim, _, sink) = run(&default_cfg(), 5, 2500);
    assert!(sim.devices_text().contains("QEMU USB Keyboard"));
    sim.unplug(1, &[1]).unwrap();
    sim.unplug(1, &[4]).unwrap(); // the hub with the audio device
    assert!(sim.unplug(1, &[4]).is_err());
    sim.run_until(3_500_000_000);
    let evs = sink.take();
    let l: Vec<String> = evs.iter().filter(|e| e.bus == 1).map(body).collect();
    // The keyboard's interrupt URB fails with EPROTO, the root hub reports ports 1 and 4.
    assert!(l.iter().any(|x| x == "C Ii:1:002:1 -71:64 0"), "{l:#?}");
    assert!(
        l.iter().any(|x| x == "C Ii:1:001:1 0:2048 1 = 12"),
        "{l:#?}"
    );
    in_order(
        &l,
        &[
            "S Ci:1:001:0 s a3 00 0000 0001 0004 4 <",
            "C Ci:1:001:0 0 4 = 00010100",
            "S Co:1:001:0 s 23 01 0010 0001 0000 0",
            "S Ci:1:001:0 s a3 00 0000 0004 0004 4 <",
            "C Ci:1:001:0 0 4 = 00010100",
            "S Co:1:001:0 s 23 01 0010 0004 0000 0",
        ],
    );
    // ISO URBs of the audio device are killed at disconnect, each with the
    // frame its controller had placed it at (4 frames after the one
    // before).
    let killed: Vec<&String> = l
        .iter()
        .filter(|x| x.starts_with("C Zo:1:006:1 -108:1:"))
        .collect();
    assert!(
        killed.len() >= 2 && killed.iter().all(|x| x.contains(":0 4 -18:0:0 -18:192:0")),
        "{l:#?}"
    );
    let frame = |x: &str| -> u32 { x.split(':').nth(5).unwrap().parse().unwrap() };
    assert_eq!(frame(killed[1]), frame(killed[0]) + 4, "{killed:#?}");
    // The hub's own status URB fails with EPROTO.
    assert!(
        l.iter().any(|x| x.starts_with("C Ii:1:005:1 -71:2048 0")),
        "{l:#?}"
    );
    // Nothing from the removed devices after their last completion.
    let t = sim.devices_text();
    assert!(
        !t.contains("QEMU USB Keyboard")
            && !t.contains("QEMU USB Audio")
            && !t.contains("Dev#=  5"),
        "{t}"
    );
    assert!(t.contains("QEMU USB Mouse"));
    let last = evs
        .iter()
        .rposition(|e| e.bus == 1 && [2, 5, 6].contains(&e.devnum))
        .unwrap();
    assert!(evs[last].ts.mono_ns < 100_000_000_000 + 3_000_000_000);
    // Mouse traffic goes on.
    assert!(evs
        .iter()
        .any(|e| e.devnum == 3 && e.ts.mono_ns > 100_000_000_000 + 3_000_000_000));
}

#[test]
fn hotplug_flood_and_api_errors() {
    let cfg = default_cfg();
    let sink = Arc::new(Capped {
        inner: Collect::default(),
        cap: 20_000,
        bulk: Default::default(),
    });
    let sim = UsbSim::run_for_test(&cfg, 8, 2000, Arc::new(TestClock), sink.clone());
    sink.inner.take();
    sink.bulk.store(0, std::sync::atomic::Ordering::Relaxed);
    let flood: DeviceConfig =
        serde_yaml_ng::from_str("{port: 2, kind: flood, transfer_size: 1024}").unwrap();
    assert!(sim.plug(9, &[1], &flood).is_err());
    assert!(sim.plug(1, &[1], &flood).is_err(), "port in use");
    assert!(sim.plug(1, &[2, 1], &flood).is_err(), "not a hub");
    assert!(sim.plug(1, &[4, 9], &flood).is_err(), "no such port");
    assert!(sim.set_paused(9, true).is_err());
    sim.plug(1, &[4, 2], &flood).unwrap();
    sim.run_until(2_800_000_000);
    let evs = sink.inner.take();
    // The external hub reports port 2, the device enumerates at the next address.
    let hub: Vec<String> = dev_lines(&evs, 1, 5);
    assert!(
        hub.iter().any(|x| x == "C Ii:1:005:1 0:2048 1 = 04"),
        "{hub:#?}"
    );
    let l = dev_lines(&evs, 1, 7);
    in_order(
        &l,
        &[
            "S Ci:1:007:0 s 80 06 0100 0000 0012 18 <",
            "C Ci:1:007:0 0 18 = 12010002 00000040 2505a0a4 12060102 0301",
            "S Co:1:007:0 s 00 09 0001 0000 0000 0",
            "S Bo:1:007:2 -115 1024 = 00000000",
            "C Bo:1:007:2 0 1024 >",
            "S Bi:1:007:1 -115 1024 <",
            "C Bi:1:007:1 0 1024 =",
        ],
    );
    let n = sink.bulk.load(std::sync::atomic::Ordering::Relaxed);
    assert!(n > 100_000, "flood produced {n} events");
    assert!(sim
        .devices_text()
        .contains("Cls=ff(vend.) Sub=00 Prot=00 Driver=usbtest"));
}

#[test]
fn paused_bus_is_silent() {
    let cfg = default_cfg();
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::new(&cfg, 1, Arc::new(TestClock), sink.clone());
    sim.set_paused(2, true).unwrap();
    sim.run_until(1_000_000_000);
    let evs = sink.take();
    assert!(evs.iter().all(|e| e.bus == 1) && !evs.is_empty());
    sim.set_paused(2, false).unwrap();
    sim.run_until(1_500_000_000);
    assert!(sink.take().iter().any(|e| e.bus == 2));
    assert_eq!(sim.bus_numbers(), vec![1, 2]);
}

#[test]
fn an_empty_bus_settles_only_once_its_root_hub_is_up() {
    // `monfs run` starts its command once nothing is settling: the root
    // hub's own enumeration (and its uevents) must be over by then.
    let yaml = "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      devices: []\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let sim = UsbSim::new(&cfg, 1, Arc::new(TestClock), Arc::new(Collect::default()));
    assert!(sim.settling());
    sim.run_until(1_000_000_000);
    assert!(!sim.settling());
    assert!(sim.devices_text().contains("Driver=hub"));
}

#[test]
fn a_bus_configured_paused_waits_for_its_resume() {
    let yaml = "usb:\n  buses:\n    - bus: 1\n      paused: true\n      devices:\n        - {port: 1, kind: hid-keyboard}\n    - bus: 2\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::new(&cfg, 1, Arc::new(TestClock), sink.clone());
    sim.run_until(3_000_000_000);
    let evs = sink.take();
    assert!(evs.iter().all(|e| e.bus == 2) && !evs.is_empty());
    assert!(!sim.devices_text().contains("QEMU USB Keyboard"));
    // Resumed: the root hub and the keyboard enumerate from the start.
    sim.set_paused(1, false).unwrap();
    sim.run_until(6_000_000_000);
    let l: Vec<String> = sink
        .take()
        .iter()
        .filter(|e| e.bus == 1)
        .map(body)
        .collect();
    in_order(
        &l,
        &[
            "S Ii:1:001:1 -115:2048 4 <",
            "S Ci:1:002:0 s 80 06 0100 0000 0012 18 <",
        ],
    );
    assert!(sim.devices_text().contains("QEMU USB Keyboard"));
}

#[test]
fn threads_run_paced_and_stop() {
    let cfg = default_cfg();
    let sink = Arc::new(Collect::default());
    let begun = std::time::Instant::now();
    let sim = UsbSim::new(&cfg, 1, Arc::new(VirtualClock::new()), sink.clone());
    sim.start();
    sim.start();
    // Until the buses enumerated something (however slow the host).
    while sink.0.lock_ok().len() <= 20 {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    sim.set_paused(1, true).unwrap();
    sim.stop();
    sim.stop();
    let elapsed = begun.elapsed().as_nanos() as u64;
    let evs = sink.take();
    assert!(evs.len() > 20, "{} events", evs.len());
    // Paced: nothing scheduled beyond the real time that passed (+ slack),
    // measured rather than assumed, so that a loaded host cannot fail it.
    let max = evs.iter().map(|e| e.ts.mono_ns).max().unwrap() - 100_000_000_000;
    assert!(max < elapsed + 600_000_000, "{max} after {elapsed} ns");
    assert!(sim.event_count(1).unwrap() > 0);
}

/// Counts events only.
#[derive(Default)]
struct Count(std::sync::atomic::AtomicU64);

impl UrbSink for Count {
    fn urb_event(&self, _ev: UrbEvent) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// `cargo test --release --lib flood_throughput -- --ignored --nocapture`
#[test]
#[ignore]
fn flood_throughput() {
    let yaml = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: flood}\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let sink = Arc::new(Count::default());
    let sim = UsbSim::new(
        &cfg,
        1,
        Arc::new(crate::base::clock::RealClock::new()),
        sink.clone(),
    );
    sim.start();
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let a = sink.0.load(std::sync::atomic::Ordering::Relaxed);
    let t0 = std::time::Instant::now();
    std::thread::sleep(std::time::Duration::from_millis(2000));
    let b = sink.0.load(std::sync::atomic::Ordering::Relaxed);
    let dt = t0.elapsed().as_secs_f64();
    sim.stop();
    let rate = (b - a) as f64 / dt;
    println!("flood: {rate:.0} events/s");
    assert!(rate > 1_000_000.0, "{rate:.0} events/s");
}

#[test]
fn timed_plug_and_unplug_from_config() {
    let yaml = "usb:\n  buses:\n    - bus: 4\n      controller: uhci\n      ports: 2\n      hub_poll_ms: 300\n      devices:\n        - {port: 2, kind: hid-keyboard, plug_after_ms: 600, unplug_after_ms: 2000}\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::run_for_test(&cfg, 3, 500, Arc::new(TestClock), sink.clone());
    let t = sim.devices_text();
    assert!(
        t.contains("T:  Bus=04 Lev=00 Prnt=00 Port=00 Cnt=00 Dev#=  1 Spd=12   MxCh= 2"),
        "{t}"
    );
    assert!(
        t.contains("B:  Alloc=  0/900 us ( 0%), #Int=  0, #Iso=  0"),
        "{t}"
    );
    assert!(
        t.contains("E:  Ad=81(I) Atr=03(Int.) MxPS=   2 Ivl=255ms"),
        "{t}"
    );
    assert!(!t.contains("Keyboard"));
    let early = sink.take();
    // Full-speed root hub: status URB interval 128 frames; port polls every 300 ms.
    assert!(early
        .iter()
        .map(body)
        .any(|l| l == "S Ii:4:001:1 -115:128 2 <"));
    assert!(early
        .iter()
        .map(body)
        .any(|l| l == "S Ci:4:001:0 s a3 00 0000 0001 0004 4 <"));
    sim.run_until(1_600_000_000);
    assert!(sim.devices_text().contains("S:  Product=QEMU USB Keyboard"));
    let l: Vec<String> = sink.take().iter().map(body).collect();
    in_order(
        &l,
        &[
            "C Ii:4:001:1 0:128 1 = 04",
            "S Co:4:000:0 s 00 05 0002 0000 0000 0",
            "S Ii:4:002:1 -115:8 8 <",
        ],
    );
    sim.run_until(2_600_000_000);
    assert!(!sim.devices_text().contains("Keyboard"));
    let l: Vec<String> = sink.take().iter().map(body).collect();
    assert!(l.iter().any(|x| x == "C Ii:4:002:1 -71:8 0"), "{l:#?}");
    in_order(
        &l,
        &[
            "C Ii:4:001:1 0:128 1 = 04",
            "C Ci:4:001:0 0 4 = 00010100",
            "S Co:4:001:0 s 23 01 0010 0002 0000 0",
        ],
    );
}

/// A hub's status URB takes the hub's injected faults as hub_irq sees
/// them: an error ends it and it is resubmitted at once (the hub still
/// sees a device plugged behind it later and enumerates it); an unlink
/// (-2) ends it for good; a refused submission (-19) is not tried again.
#[test]
fn a_hubs_status_urb_takes_its_faults() {
    let hub = |errors: &str, unplug: u32| {
        let yaml = format!(
            "usb:\n  buses:\n    - bus: 5\n      devices:\n        - port: 1\n          kind: hub\n          errors: {{{errors}}}\n          devices:\n            - {{port: 2, kind: hid-keyboard, plug_after_ms: 1500, unplug_after_ms: {unplug}}}\n"
        );
        let cfg = Config::parse(&yaml, "t").unwrap().usb;
        let (sim, evs, _) = run(&cfg, 7, 4000);
        let status: Vec<String> = evs
            .iter()
            .map(body)
            .filter(|l| l[2..].starts_with("Ii:5:002:1 "))
            .collect();
        (sim, status)
    };
    // Every other submission fails -71 (hub_irq: resubmit): the one after
    // the plug's completion does, and the one resubmitted then sees the
    // keyboard's unplug.
    let (_, l) = hub("proto_error_every: 2", 2500);
    let fault = l
        .iter()
        .position(|x| x.starts_with("C Ii:5:002:1 -71:"))
        .expect("no fault");
    assert!(l[fault + 1].starts_with("S Ii:5:002:1 -115:"), "{l:#?}");
    assert!(
        l[fault + 1..]
            .iter()
            .any(|x| x.starts_with("C Ii:5:002:1 0:")),
        "{l:#?}"
    );
    // Ten stalls in a row: still resubmitted (the hub reset that
    // hub_event would do is not modelled).
    let (_, l) = hub("stall_every: 1", 9000);
    let stalls = l
        .iter()
        .filter(|x| x.starts_with("C Ii:5:002:1 -32:"))
        .count();
    assert!(stalls > 10, "{l:#?}");
    // (The last one still out when the run ends.)
    let submits = l.iter().filter(|x| x.starts_with("S ")).count();
    assert_eq!(submits, stalls + 1, "{l:#?}");
    // An unlink: the URB is over, and so is the hub's view of its ports.
    let (sim, l) = hub("unlink_every: 1", 9000);
    assert_eq!(l.len(), 2, "{l:#?}");
    assert!(l[1].starts_with("C Ii:5:002:1 -2:"), "{l:#?}");
    assert!(!sim.devices_text().contains("Keyboard"));
    // A refused submission: its E line, and nothing more.
    let (sim, l) = hub("submit_error_every: 1", 9000);
    assert_eq!(l.len(), 1, "{l:#?}");
    assert!(l[0].starts_with("E Ii:5:002:1 -19"), "{l:#?}");
    assert!(!sim.devices_text().contains("Keyboard"));
}

/// The kernel's `usb/devices` block (without its T: line) of the device
/// whose product is `product`, in `text`.
fn devices_block(text: &str, product: &str) -> Vec<String> {
    let block = text
        .split("\n\n")
        .find(|b| b.contains(&format!("S:  Product={product}\n")))
        .unwrap_or_else(|| panic!("no {product} in\n{text}"));
    block
        .trim()
        .lines()
        .filter(|l| !l.starts_with("T:"))
        .map(str::to_string)
        .collect()
}

#[test]
fn device_from_kernel_descriptor_dump() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sysfs");
    let yaml = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: descriptors, descriptors: qemu-usb-kbd/descriptors, manufacturer: QEMU, product: QEMU USB Keyboard, serial: 68284-0000:00:03.0-1}\n        - {port: 2, kind: descriptors, descriptors: qemu-usb-audio/descriptors, manufacturer: QEMU, product: QEMU USB Audio, serial: 1-0000:00:03.0-4.1}\n";
    let cfg = super::load::parse_config(yaml, &format!("{dir}/t.yaml"))
        .unwrap()
        .usb;
    let (sim, evs, _) = run(&cfg, 1, 3000);
    let kernel = std::fs::read_to_string(format!("{dir}/debugfs_usb_devices.txt")).unwrap();
    let ours = sim.devices_text();
    for product in ["QEMU USB Keyboard", "QEMU USB Audio"] {
        // No class driver binds to a device from a dump.
        let want: Vec<String> = devices_block(&kernel, product)
            .into_iter()
            .map(|l| l.replace("Driver=usbhid", "Driver=(none)"))
            .collect();
        assert_eq!(devices_block(&ours, product), want, "{ours}");
    }
    assert!(ours.contains("Port=00 Cnt=01 Dev#=  2 Spd=480 "), "{ours}");
    assert!(ours.contains("Port=01 Cnt=02 Dev#=  3 Spd=12 "), "{ours}");
    // The enumeration as the 6.12 kernel captured it from qemu's usb-kbd.
    let kbd = dev_lines(&evs, 1, 2);
    in_order(
        &kbd,
        &[
            "S Ci:1:002:0 s 80 06 0100 0000 0012 18 <",
            "C Ci:1:002:0 0 18 = 12010002 00000040 27060100 00000104 0b01",
            "S Ci:1:002:0 s 80 06 0200 0000 0009 9 <",
            "C Ci:1:002:0 0 9 = 09022200 010108a0 32",
            "S Ci:1:002:0 s 80 06 0200 0000 0022 34 <",
            "C Ci:1:002:0 0 34 = 09022200 010108a0 32090400 00010301 01000921 11010001 223f0007 05810308",
            "S Ci:1:002:0 s 80 06 0300 0000 00ff 255 <",
            "C Ci:1:002:0 0 4 = 04030904",
            "S Ci:1:002:0 s 80 06 0304 0409 00ff 255 <",
            "C Ci:1:002:0 0 36 = 24035100 45004d00 55002000 55005300 42002000 4b006500 79006200 6f006100",
            "S Ci:1:002:0 s 80 06 0301 0409 00ff 255 <",
            "C Ci:1:002:0 0 10 = 0a035100 45004d00 5500",
            "S Ci:1:002:0 s 80 06 030b 0409 00ff 255 <",
            "C Ci:1:002:0 0 42 = 2a033600 38003200 38003400 2d003000 30003000 30003a00 30003000 3a003000",
            "S Co:1:002:0 s 00 09 0001 0000 0000 0",
            "C Co:1:002:0 0 0",
            // iConfiguration 8: qemu's "HID Keyboard", which the dump does not carry.
            "S Ci:1:002:0 s 80 06 0308 0409 00ff 255 <",
            "C Ci:1:002:0 -32 0",
        ],
    );
    // Quiet after that: nothing but ep0 traffic, and nothing after the
    // configuration string.
    assert!(kbd.iter().all(|l| l.contains(":1:002:0 ")), "{kbd:#?}");
    assert!(
        kbd.last().unwrap().starts_with("C Ci:1:002:0 -32 0"),
        "{kbd:#?}"
    );
    // The audio device's interface strings (5, then 9 of interface 1).
    let au = dev_lines(&evs, 1, 3);
    in_order(
        &au,
        &[
            "C Ci:1:003:0 0 113 = 09027100 020104c0 32090400 00000101 04050924 0100012b 0001010c 24020101",
            "S Co:1:003:0 s 00 09 0001 0000 0000 0",
            "S Ci:1:003:0 s 80 06 0304 0409 00ff 255 <",
            "S Ci:1:003:0 s 80 06 0305 0409 00ff 255 <",
            "S Ci:1:003:0 s 80 06 0309 0409 00ff 255 <",
        ],
    );
}

#[test]
fn unread_buses_nap_for_a_bounded_number_of_steps() {
    use super::{nap_ns, IDLE_NAP_NS, MIN_NAP_NS, NAP_STEPS};
    // A new bus, or one that ran nothing, doubles its nap from the shortest.
    assert_eq!(nap_ns(0, 0, MIN_NAP_NS), 2 * MIN_NAP_NS);
    assert_eq!(nap_ns(0, 5_000_000, 64_000_000), 128_000_000);
    assert_eq!(nap_ns(0, 0, IDLE_NAP_NS), IDLE_NAP_NS);
    // A flood of 1M steps/s naps long enough for NAP_STEPS of them, so a
    // request that brings it current runs no more than that.
    assert_eq!(
        nap_ns(1_000_000, 1_000_000_000, 8_000_000),
        NAP_STEPS * 1000
    );
    // Never longer than twice the last nap, so a rate that rises during a
    // nap is caught after a few short ones.
    assert_eq!(nap_ns(10, 10_000_000, 4_000_000), 8_000_000);
    // Slow buses (HID polls) reach the full nap; floods faster than
    // NAP_STEPS per MIN_NAP_NS stay at the shortest.
    assert_eq!(nap_ns(500, 1_000_000_000, IDLE_NAP_NS), IDLE_NAP_NS);
    assert_eq!(nap_ns(100_000_000, 1_000_000_000, MIN_NAP_NS), MIN_NAP_NS);
}

#[test]
fn killed_iso_in_urbs_show_their_buffer() {
    let (sim, before, sink) = run(&default_cfg(), 5, 2500);
    sim.unplug(2, &[1]).unwrap(); // the webcam
    sim.run_until(3_500_000_000);
    let l: Vec<String> = before
        .iter()
        .chain(sink.take().iter())
        .filter(|e| e.bus == 2)
        .map(body)
        .collect();
    let killed: Vec<&String> = l
        .iter()
        .filter(|x| x.starts_with("C Zi:2:002:1 -108:"))
        .collect();
    assert!(!killed.is_empty(), "{l:#?}");
    // The whole buffer's length and its first 32 bytes, as the kernel's
    // text prints an ISO completion, not `Z` (no buffer).
    let zeros = " = 00000000 00000000 00000000 00000000 00000000 00000000 00000000 00000000";
    assert!(killed.iter().all(|x| x.ends_with(zeros)), "{killed:#?}");
    // Each killed URB reports the frame its controller had placed it at,
    // as a completed one does: the stream's start frames go on from the
    // last completion's, one URB's frames apart (they were 0).
    let frames: Vec<(i64, bool)> = sink_frames(&l);
    let (done, _) = *frames.iter().rev().find(|(_, k)| !k).expect("a completion");
    let killed: Vec<i64> = frames.iter().filter(|(_, k)| *k).map(|(f, _)| *f).collect();
    let step = frames[1].0 - frames[0].0;
    assert!(step > 0, "{frames:?}");
    for (i, f) in killed.iter().enumerate() {
        assert_eq!(*f, done + step * (i as i64 + 1), "{frames:?}");
    }
}

/// The start frames of bus 2's webcam's isochronous completions in the
/// lines `l` (`C Zi:2:002:1 STATUS:INTERVAL:FRAME:ERRORS ...`), and whether
/// each was killed.
fn sink_frames(l: &[String]) -> Vec<(i64, bool)> {
    l.iter()
        .filter(|x| x.starts_with("C Zi:2:002:1 "))
        .map(|x| {
            let f: Vec<&str> = x.split(' ').nth(2).unwrap().split(':').collect();
            (f[2].parse().unwrap(), f[0] == "-108")
        })
        .collect()
}

/// A device unplugged at any point of its enumeration leaves its port free
/// (the hub driver lets a device that went away mid-enumeration go, as
/// hub_port_connect does): a later plug on the same port succeeds.
#[test]
fn unplug_during_enumeration_frees_the_port() {
    let yaml = "usb:\n  buses:\n    - bus: 1\n      ports: 15\n      hub_poll_ms: 0\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let flood: DeviceConfig =
        serde_yaml_ng::from_str("{port: 1, kind: flood, transfer_size: 4096, rate: 100}").unwrap();
    for delay_us in [
        0u64, 100, 500, 1_000, 5_000, 20_000, 60_000, 110_000, 150_000, 200_000, 300_000,
    ] {
        let sink = Arc::new(Collect::default());
        // Plugged while the root hub is still coming up, as a mount's
        // first commands are.
        let sim = UsbSim::run_for_test(&cfg, 3, 0, Arc::new(TestClock), sink.clone());
        for p in 1..=6 {
            sim.plug(1, &[p], &flood).unwrap();
        }
        sim.run_until(delay_us * 1000);
        sim.unplug(1, &[1]).unwrap();
        sim.run_until(5_000_000_000);
        assert!(
            sim.plug(1, &[1], &flood).is_ok(),
            "unplugged {delay_us} us after the plug: the port stays in use"
        );
    }
}

/// A keyboard unplugged while usbhid probes it (between or during its
/// requests) gets every request it is sent afterwards failed by the host
/// controller (-71), as a device that no longer answers does: no URB of it
/// is left without a completion, and none is silently dropped.
#[test]
fn requests_to_an_unplugged_device_fail_until_it_is_disconnected() {
    let yaml = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-keyboard}\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let (_, evs, _) = run(&cfg, 7, 2000);
    let set_idle = evs
        .iter()
        .find(|e| body(e).starts_with("S Co:1:002:0 s 21 0a"))
        .expect("usbhid's SET_IDLE")
        .ts
        .mono_ns
        - 100_000_000_000;
    for step in 0..40u64 {
        let at = set_idle - 500_000 + step * 50_000;
        let sink = Arc::new(Collect::default());
        let sim = UsbSim::run_for_test(&cfg, 7, 0, Arc::new(TestClock), sink.clone());
        sim.run_until(at);
        sim.unplug(1, &[1]).unwrap();
        sim.run_until(3_000_000_000);
        let kbd: Vec<String> = sink
            .take()
            .iter()
            .filter(|e| e.devnum == 2 && e.ts.mono_ns >= 100_000_000_000 + at)
            .map(body)
            .collect();
        let (s, c) = (
            kbd.iter().filter(|x| x.starts_with("S ")).count(),
            kbd.iter().filter(|x| x.starts_with("C ")).count(),
        );
        assert!(c >= s, "unplugged at {at} ns: {kbd:#?}");
        assert!(
            kbd.iter()
                .any(|x| x.starts_with("C ") && x.contains(":0 -71 ")
                    || x.contains(":1 -71:")
                    || x.contains(":1 -108:")),
            "unplugged at {at} ns: nothing failed: {kbd:#?}"
        );
    }
}

/// An unplugged device gives its slot back: a bus that has a keyboard
/// plugged and unplugged 200 times keeps as many slots as it had devices
/// at once, and the name of a device that went (an open usbfs file's, a
/// task's) finds nothing, not the device now in its slot.
#[test]
fn unplugged_devices_give_their_slots_back() {
    use crate::usbcore::device::UsbCorePort;
    let yaml = "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-keyboard}\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let sink = Arc::new(Collect::default());
    let sim = UsbSim::run_for_test(&cfg, 3, 2000, Arc::new(TestClock), sink.clone());
    let kbd = |sim: &UsbSim| {
        sim.devices()
            .into_iter()
            .find(|d| d.port_path == [1])
            .expect("the keyboard")
    };
    let first = kbd(&sim);
    let slots = sim.bus(1).unwrap().lock().ctx.devs.slots();
    assert_eq!(slots, 2, "the root hub and the keyboard");
    let dev: DeviceConfig = serde_yaml_ng::from_str("{port: 1, kind: hid-keyboard}").unwrap();
    let mut t = 2_000_000_000;
    for _ in 0..200 {
        sim.unplug(1, &[1]).unwrap();
        t += 1_000_000_000;
        sim.run_until(t);
        assert!(sim.device(first.dev).is_none(), "a gone device is found");
        sim.plug(1, &[1], &dev).unwrap();
        t += 2_000_000_000;
        sim.run_until(t);
        sink.take();
    }
    let last = kbd(&sim);
    assert_ne!(last.dev, first.dev, "a reused slot names its device anew");
    assert!(sim.device(first.dev).is_none());
    assert!(sim.device(last.dev).is_some());
    assert_eq!(sim.bus(1).unwrap().lock().ctx.devs.slots(), slots);
}

/// The topology's changes form one stream across the buses: numbered 1, 2,
/// 3... in the order every watcher hears them, each stamped with its bus's
/// time (never earlier on a bus than the change before it), a device's
/// `Added` before its `Changed` (its driver bound) and its `Removed` last.
#[test]
fn topology_changes_are_one_numbered_stream_across_buses() {
    use crate::usbcore::device::{DeviceChange, DeviceEvent, DeviceWatcher, UsbCorePort};
    #[derive(Default)]
    struct Heard(Mutex<Vec<DeviceEvent>>);
    impl DeviceWatcher for Heard {
        fn changed(&self, event: &DeviceEvent) {
            self.0.lock_ok().push(event.clone());
        }
    }
    let yaml = "usb:\n  buses:\n    - bus: 1\n      devices:\n        - {port: 1, kind: hid-keyboard}\n    - bus: 2\n      devices:\n        - {port: 1, kind: mass-storage}\n";
    let cfg = Config::parse(yaml, "t").unwrap().usb;
    let sim = UsbSim::new(&cfg, 1, Arc::new(TestClock), Arc::new(Collect::default()));
    let heard = Arc::new(Heard::default());
    sim.watch(heard.clone());
    sim.run_until(3_000_000_000);
    sim.unplug(2, &[1]).unwrap();
    sim.run_until(4_000_000_000);
    let evs = heard.0.lock_ok().clone();
    let seqs: Vec<u64> = evs.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=evs.len() as u64).collect::<Vec<_>>());
    let bus_of = |c: &DeviceChange| match c {
        DeviceChange::Added(d) | DeviceChange::Changed(d) => d.busnum,
        DeviceChange::Removed(r) => r.bus,
    };
    for bus in [1, 2] {
        let times: Vec<u64> = evs
            .iter()
            .filter(|e| bus_of(&e.change) == bus)
            .map(|e| e.time.mono_ns)
            .collect();
        assert!(!times.is_empty(), "bus {bus} sent nothing");
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
        // TestClock: monotonic time is 100 s plus the bus's local time.
        assert!(times.iter().all(|t| *t > 100_000_000_000), "{times:?}");
    }
    // The stick: added, bound (changed), removed, in that order.
    let stick: Vec<&str> = evs
        .iter()
        .filter(|e| bus_of(&e.change) == 2)
        .filter_map(|e| match &e.change {
            DeviceChange::Added(d) if !d.is_root_hub() => Some("added"),
            DeviceChange::Changed(d) if !d.is_root_hub() && d.probed => Some("bound"),
            DeviceChange::Removed(_) => Some("removed"),
            _ => None,
        })
        .collect();
    assert_eq!(stick.first(), Some(&"added"), "{stick:?}");
    assert_eq!(stick.last(), Some(&"removed"), "{stick:?}");
    assert!(stick.contains(&"bound"), "{stick:?}");
}
