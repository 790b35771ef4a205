//! Replay unit tests: the timing, replays on a simulator, and the control
//! command.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::*;
use crate::base::sync::LockExt;
use crate::capture::decode::Capture;
use crate::capture::sample_events;
use crate::capture::write::{write_events, Format, LinkType, RECORD_RING};
use crate::config::ReplayConfig;
use crate::sim::usb::UsbSim;
use crate::usbmon::event::UrbEvent;
use crate::usbmon::header::encode_event;

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn speed_scaling_and_loop_math() {
    let times = [0u64, 1_000_000, 1_500_000, 4_000_000];
    // Span 4 ms + mean spacing 4/3 ms.
    assert_eq!(loop_period(&times), 4_000_000 + 1_333_333);
    assert_eq!(loop_period(&[0]), 1_000_000);
    assert_eq!(loop_period(&[0, 0, 0]), 1_000);
    assert_eq!(loop_period(&[]), 0);
    assert_eq!(scale(1_000_000, 2.0), 500_000);
    assert_eq!(scale(1_000_000, 0.5), 2_000_000);
    assert_eq!(scale(3, 2.0), 2);
    let per = loop_period(&times);
    assert_eq!(due(&times, 2, 0, per, 1.0), 1_500_000);
    assert_eq!(due(&times, 2, 0, per, 2.0), 750_000);
    assert_eq!(due(&times, 0, 1, per, 1.0), per);
    assert_eq!(due(&times, 3, 2, per, 4.0), 1_000_000 + 2 * scale(per, 4.0));
    // A zero-length pass still advances.
    assert_eq!(due(&[0], 0, 5, 0, 1000.0), 5);
}

struct Collect(Mutex<Vec<UrbEvent>>);
impl crate::usbmon::event::UrbSink for Collect {
    fn urb_event(&self, ev: UrbEvent) {
        self.0.lock_ok().push(ev);
    }
}

fn sim(yaml: &str) -> (UsbSim, Arc<Collect>) {
    let cfg = crate::config::Config::parse(yaml, "t.yaml").unwrap();
    let sink = Arc::new(Collect(Mutex::new(Vec::new())));
    let clock = Arc::new(crate::base::clock::VirtualClock::new());
    let sim = UsbSim::new(&cfg.usb, 1, clock, sink.clone());
    (sim, sink)
}

/// A looping replay at double speed: only replayed events, on the
/// configured bus, original spacing halved, pass after pass.
#[test]
fn replay_bus_loops_at_speed() {
    let d = tmp();
    let p = d.path().join("c.pcapng");
    let evs = sample_events(9);
    write_events(&p, &evs, Format::PcapNg, LinkType::Mmapped).unwrap();
    let n = evs.len() as u64;
    let span = 125_000_000 * (n - 1);
    let per = span + span / (n - 1);
    let (sim, sink) = sim(&format!(
        "usb:\n  buses:\n    - bus: 4\n      replay: {{file: {}, speed: 2, loop: true, after_ms: 3}}\n",
        p.display()
    ));
    // Three passes and the first packet of the fourth.
    sim.run_until(3_000_000 + 3 * per / 2);
    let got = sink.0.lock_ok().clone();
    assert_eq!(got.len() as u64, 3 * n + 1);
    let t0 = got[0].ts.mono_ns;
    assert_eq!(
        t0,
        100_000_000_000 + 3_000_000,
        "after_ms on the virtual clock"
    );
    for (i, e) in got.iter().enumerate() {
        let k = i % evs.len();
        let pass = (i / evs.len()) as u64;
        assert_eq!(e.bus, 4);
        assert_eq!(e.id, evs[k].id);
        assert_eq!(
            e.ts.mono_ns - t0,
            (k as u64 * 125_000_000 + pass * per) / 2,
            "event {i}"
        );
        assert_eq!(e.ts.wall_ns - got[0].ts.wall_ns, e.ts.mono_ns - t0);
    }
    let st = sim.replay_status(4).unwrap().unwrap();
    assert_eq!(
        (st.state, st.events, st.passes),
        (ReplayState::Playing, 3 * n + 1, 3)
    );
    sim.replay_stop(4).unwrap();
    sim.run_until(10_000_000_000);
    assert_eq!(sink.0.lock_ok().len() as u64, 3 * n + 1, "stopped");
    assert_eq!(
        sim.replay_status(4).unwrap().unwrap().state,
        ReplayState::Stopped
    );
    assert!(sim
        .replay_stop(4)
        .unwrap_err()
        .to_string()
        .contains("no replay is running on bus 4"));
    assert!(
        sim.devices_text().contains("Bus=04"),
        "the root hub is listed"
    );
    let dev: crate::config::DeviceConfig =
        serde_yaml_ng::from_str("{port: 1, kind: hid-mouse}").unwrap();
    assert!(sim
        .plug(4, &[1], &dev)
        .unwrap_err()
        .to_string()
        .contains("replays a capture"));
}

/// A corrupt capture stops its bus's replay with an error naming file
/// and offset; the other buses run on, and a control start of the same
/// file fails the same way and changes nothing.
#[test]
fn corrupt_capture_leaves_other_buses_running() {
    let d = tmp();
    let good = d.path().join("good.pcap");
    let bad = d.path().join("bad.pcap");
    let evs = sample_events(1);
    write_events(&good, &evs[..2], Format::Pcap, LinkType::Mmapped).unwrap();
    let b = std::fs::read(&good).unwrap();
    std::fs::write(&bad, &b[..b.len() - 1]).unwrap();
    let (sim, sink) = sim(&format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 10\n    - bus: 2\n      replay: {{file: {}}}\n    - bus: 3\n      replay: {{file: {}}}\n",
        bad.display(),
        good.display()
    ));
    sim.run_until(300_000_000);
    let st = sim.replay_status(2).unwrap().unwrap();
    let ReplayState::Failed(msg) = &st.state else {
        panic!("{st}");
    };
    let off = 24 + 16 + encode_event(&evs[0], RECORD_RING).len() + 16;
    assert!(
        msg.contains(&format!(
            "{}: byte offset {off}: packet 1: truncated",
            bad.display()
        )),
        "{msg}"
    );
    let got = sink.0.lock_ok().clone();
    assert!(got.iter().filter(|e| e.bus == 1).count() > 5, "bus 1 runs");
    assert_eq!(got.iter().filter(|e| e.bus == 2).count(), 0);
    assert_eq!(got.iter().filter(|e| e.bus == 3).count(), 2);
    let cfg = |f: &Path| ReplayConfig {
        file: f.to_path_buf(),
        speed: Default::default(),
        looping: false,
        after_ms: 0,
    };
    let start = |bus: u16, f: &Path| {
        let cap = Capture::load(f).map_err(|e| e.to_string())?;
        sim.replay_start(bus, &cfg(f), cap)
            .map_err(|e| e.to_string())
    };
    let e = start(3, &bad).unwrap_err();
    assert!(e.contains("byte offset"), "{e}");
    assert_eq!(
        sim.replay_status(3).unwrap().unwrap().state,
        ReplayState::Finished
    );
    let e = start(3, &d.path().join("missing.pcap")).unwrap_err();
    assert!(
        e.contains("missing.pcap") && e.contains("No such file"),
        "{e}"
    );
    // A control start on a simulated bus mixes in the capture.
    start(1, &good).unwrap();
    sim.run_until(600_000_000);
    let got = sink.0.lock_ok().clone();
    assert!(got.iter().any(|e| e.bus == 1 && e.id == evs[0].id));
    assert_eq!(
        sim.replay_status(1).unwrap().unwrap().state,
        ReplayState::Finished
    );
    assert!(sim.replay_status(5).is_err());
}

#[test]
fn control_commands_on_a_running_sim() {
    let d = tmp();
    let p = d.path().join("c.pcap");
    write_events(&p, &sample_events(1), Format::Pcap, LinkType::Mmapped).unwrap();
    let (sim, sink) = sim("usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n");
    let f = p.display().to_string();
    assert_eq!(
        run_command(&sim, &["status", "1"], None).unwrap(),
        "bus 1: no replay"
    );
    let open = || Some(std::fs::File::open(&p).unwrap());
    let r = run_command(&sim, &["start", "1", &f, "speed=1000", "loop"], open()).unwrap();
    assert!(r.contains("replaying") && r.contains("looping"), "{r}");
    sim.run_until(1_000_000_000);
    let r = run_command(&sim, &["status", "1"], None).unwrap();
    assert!(
        r.starts_with(&format!("bus 1: replay {f}: playing, ")),
        "{r}"
    );
    assert_eq!(
        run_command(&sim, &["stop", "1"], None).unwrap(),
        "bus 1: replay stopped"
    );
    let n = sink.0.lock_ok().len();
    sim.run_until(2_000_000_000);
    assert_eq!(sink.0.lock_ok().len(), n);
    assert!(run_command(&sim, &["stop", "1"], None).is_err());
    assert!(run_command(&sim, &["start", "9", &f], open())
        .unwrap_err()
        .to_string()
        .contains("no USB bus 9"));
    // The FILE word only labels the capture: without a descriptor
    // nothing is opened, whatever it names.
    let e = run_command(&sim, &["start", "1", &f], None).unwrap_err();
    assert_eq!(e.to_string(), NEEDS_DESCRIPTOR);
    // Only a regular file is read: not a device, a FIFO or a directory.
    let fifo = d.path().join("fifo");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let nonblock = |p: &Path| {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(p)
            .unwrap()
    };
    for (what, file) in [
        ("/dev/zero", nonblock(Path::new("/dev/zero"))),
        ("fifo", nonblock(&fifo)),
        ("dir", nonblock(d.path())),
    ] {
        let e = run_command(&sim, &["start", "1", what], Some(file)).unwrap_err();
        assert_eq!(e.to_string(), format!("{what}: not a regular file"));
    }
}

#[test]
fn control_command_grammar() {
    let c = ReplayCommand::parse(&["start", "3", "/tmp/a.pcap", "speed=2", "loop"]).unwrap();
    match c {
        ReplayCommand::Start { bus, cfg } => {
            assert_eq!(bus, 3);
            assert_eq!(cfg.file, Path::new("/tmp/a.pcap"));
            assert_eq!(cfg.speed.0, 2.0);
            assert!(cfg.looping);
        }
        c => panic!("{c:?}"),
    }
    assert_eq!(
        ReplayCommand::parse(&["stop", "2"]).unwrap(),
        ReplayCommand::Stop { bus: 2 }
    );
    assert!(ReplayCommand::parse(&["start", "0", "f"]).is_err());
    assert!(ReplayCommand::parse(&["start", "1", "f", "speed=-1"])
        .unwrap_err()
        .to_string()
        .contains("speed"));
    assert!(ReplayCommand::parse(&["start", "1", "f", "lop"])
        .unwrap_err()
        .to_string()
        .contains("lop"));
    assert!(ReplayCommand::parse(&["stop"]).is_err());
    assert!(ReplayCommand::parse(&[]).is_err());
}

/// A replay on a bus with live devices gets device addresses that clash
/// with none of them, as the kernel's allocator hands them out (a free
/// captured address is kept), names them in SET_ADDRESS too, and gives
/// them back when it stops, so a device plugged later never shares one.
#[test]
fn replay_on_a_live_bus_gets_its_own_addresses() {
    use crate::usbmon::event::{EventKind, XferType};
    let d = tmp();
    let p = d.path().join("c.pcap");
    // The sample device is 1:005; a SET_ADDRESS(5) to address 0 first,
    // and a device at address 9 whose address is free on the bus.
    let mut evs = sample_events(1);
    let mut set_addr = evs[0].clone();
    set_addr.devnum = 0;
    set_addr.epnum = 0;
    set_addr.xfer = XferType::Control;
    set_addr.kind = EventKind::Submit;
    set_addr.dir_in = false;
    set_addr.setup = Some([0x00, 0x05, 5, 0, 0, 0, 0, 0]);
    set_addr.data = None;
    set_addr.iso.clear();
    set_addr.transfer_buffer_length = 0;
    set_addr.actual_length = 0;
    evs.insert(0, set_addr);
    let mut other = evs[1].clone();
    other.devnum = 9;
    evs.push(other);
    write_events(&p, &evs, Format::Pcap, LinkType::Mmapped).unwrap();
    // Five devices on the live bus take addresses 2..=6.
    let (sim, sink) = sim(
        "usb:\n  buses:\n    - bus: 1\n      ports: 5\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-mouse}\n        - {port: 2, kind: hid-mouse}\n        - {port: 3, kind: hid-mouse}\n        - {port: 4, kind: hid-mouse}\n        - {port: 5, kind: hid-mouse}\n",
    );
    sim.run_until(3_000_000_000);
    let live: std::collections::BTreeSet<u8> = sink.0.lock_ok().iter().map(|e| e.devnum).collect();
    assert!(live.contains(&5), "{live:?}");
    let n0 = sink.0.lock_ok().len();
    let cfg = ReplayConfig {
        file: p.clone(),
        speed: crate::config::ReplaySpeed::new(1000.0).unwrap(),
        looping: false,
        after_ms: 0,
    };
    sim.replay_start(1, &cfg, Capture::load(&p).unwrap())
        .unwrap();
    sim.run_until(4_000_000_000);
    let got = sink.0.lock_ok()[n0..].to_vec();
    let replayed: Vec<&UrbEvent> = got
        .iter()
        .filter(|e| evs.iter().any(|c| c.id == e.id))
        .collect();
    assert_eq!(replayed.len(), evs.len());
    // The set-address request and the device it names: 1:005 is taken by
    // a mouse, so the capture's device gets the next free address, 7.
    assert_eq!(replayed[0].devnum, 0);
    assert_eq!(replayed[0].setup.unwrap()[2], 7);
    assert!(replayed[1..replayed.len() - 1]
        .iter()
        .all(|e| e.devnum == 7));
    // 1:009 is free on the bus: it stays.
    assert_eq!(replayed.last().unwrap().devnum, 9);
    // Finished: the addresses are the bus's again.
    assert_eq!(
        sim.replay_status(1).unwrap().unwrap().state,
        ReplayState::Finished
    );
    let used = sim.buses[0].lock().ctx.used;
    assert!(!used[7] && !used[9] && used[5], "released");
}
