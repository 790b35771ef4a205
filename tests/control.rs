//! Live control (`monfs ctl` and `monfs/ctl`) and seeded determinism, through
//! the real mount.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{compile_c, Mount};

const ONE_BUS: &str = "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: hid-keyboard\n";

/// `cat FILE` in the background, its output collected as it comes.
struct Watch {
    child: std::process::Child,
    text: Arc<Mutex<String>>,
    reader: Option<std::thread::JoinHandle<()>>,
}

fn watch(m: &Mount, file: &str) -> Watch {
    let mut child = Command::new("cat")
        .arg(m.path(file))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_blocked(child.id());
    let mut out = child.stdout.take().unwrap();
    let text = Arc::new(Mutex::new(String::new()));
    let t = text.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
            if n == 0 {
                break;
            }
            t.lock()
                .unwrap()
                .push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    Watch {
        child,
        text,
        reader: Some(reader),
    }
}

impl Watch {
    /// Wait until a line of the output satisfies `f` (a hang after
    /// [`common::HANG`]).
    fn until(&self, what: &str, f: impl Fn(&str) -> bool) {
        let deadline = Instant::now() + common::HANG;
        while !self.text.lock().unwrap().lines().any(&f) {
            assert!(
                Instant::now() < deadline,
                "no {what}:\n{}",
                self.text.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

fn stop(mut w: Watch) -> String {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(w.child.id() as i32, libc::SIGINT) };
    w.child.wait().unwrap();
    if let Some(r) = w.reader.take() {
        r.join().unwrap();
    }
    let t = w.text.lock().unwrap().clone();
    t
}

fn wait_for(m: &Mount, cmd: &str, what: &str) -> String {
    let deadline = Instant::now() + common::HANG;
    loop {
        let out = m.sh_ok(cmd);
        if out.contains(what) {
            return out;
        }
        assert!(Instant::now() < deadline, "no {what:?} in `{cmd}`:\n{out}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn hot_plug_through_monfs_ctl_enumerates_and_unplug_fails_urbs() {
    let m = Mount::with_config(ONE_BUS);
    let cat = watch(&m, "usb/usbmon/1u");
    let (ok, out) = m.ctl(&["plug", "1", "3", "mass-storage", "product=Hot Stick"]);
    assert!(ok, "{out}");
    assert!(out.starts_with("ok "), "{out}");
    let devices = wait_for(&m, "cat usb/devices", "S:  Product=Hot Stick");
    assert!(
        devices.contains("Port=02"),
        "port 3 shows as Port=02 (0-based):\n{devices}"
    );
    // Let the storage driver start its I/O, then pull the stick.
    cat.until("storage CBW", |l| l.contains("= 55534243"));
    let (ok, out) = m.ctl(&["unplug", "1", "3"]);
    assert!(ok, "{out}");
    // The keyboard always has an interrupt URB in flight: pull it too.
    let (ok, out) = m.ctl(&["unplug", "1", "1"]);
    assert!(ok, "{out}");
    cat.until("failed completion after unplug", |l| {
        l.contains(" C ") && (l.contains(" -71") || l.contains(" -108") || l.contains(" -19"))
    });
    let text = stop(cat);
    // Enumeration of the new device, request by request.
    for req in [
        "s 80 06 0100 0000 0040 64 <",
        "s 80 06 0200 0000 0009 9 <",
        "s 80 06 0300 0000 00ff 255 <",
        "s 00 09 0001 0000 0000 0",
        "s a1 fe 0000 0000 0001 1 <",
    ] {
        assert!(text.contains(req), "no {req:?} in 1u:\n{text}");
    }
    assert!(
        text.contains("= 55534243"),
        "no storage CBW after enumeration"
    );
    // A disconnect fails the in-flight URBs as host controllers report it.
    let failed: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.contains(" C ") && (l.contains(" -71") || l.contains(" -108") || l.contains(" -19"))
        })
        .collect();
    assert!(
        !failed.is_empty(),
        "no -71/-108/-19 completions after unplug:\n{text}"
    );
    let devices = m.sh_ok("cat usb/devices");
    assert!(
        !devices.contains("Hot Stick"),
        "unplugged device still listed:\n{devices}"
    );
}

#[test]
fn the_control_file_takes_echo_commands() {
    let m = Mount::with_config(ONE_BUS);
    m.sh_ok("echo 'plug 1 2 hid-mouse product=CtlMouse' > monfs/ctl");
    wait_for(&m, "cat usb/devices", "S:  Product=CtlMouse");
    m.sh_ok("echo 'unplug 1 2' > monfs/ctl");
    let deadline = Instant::now() + common::HANG;
    while m.sh_ok("cat usb/devices").contains("CtlMouse") {
        assert!(Instant::now() < deadline, "mouse never went away");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(m.sh_ok("cat monfs/ctl").contains("plug BUS PORTS KIND"));
}

/// Out-of-range device values are refused with the range, never truncated
/// to fit (0x1ffff once became vendor 0xffff).
#[test]
fn plug_values_out_of_range_are_refused() {
    let m = Mount::with_config(ONE_BUS);
    for (arg, want) in [
        ("vendor_id=0x1ffff", "vendor_id must be 0..=65535"),
        ("product_id=70000", "product_id must be 0..=65535"),
        ("transfer_size=0", "transfer_size must be 1..=1048576"),
        (
            "transfer_size=4294967296",
            "transfer_size must be 1..=1048576",
        ),
    ] {
        let (ok, out) = m.ctl(&["plug", "1", "2", "flood", arg]);
        assert!(!ok && out.contains(want), "{arg}: {out}");
        let o = m.sh(&format!("echo 'plug 1 2 flood {arg}' > monfs/ctl"));
        assert!(!o.status.success(), "{arg} accepted through monfs/ctl");
    }
    assert!(!m.sh_ok("cat usb/devices").contains("Port=01"));
}

#[test]
fn injected_faults_show_in_usbmon() {
    let m = Mount::with_config(ONE_BUS);
    // Wait for the keyboard to be configured and polling.
    wait_for(&m, "timeout 3 head -n 1 usb/usbmon/1u || true", "Ii:1:");
    let cat = watch(&m, "usb/usbmon/1u");
    let (ok, out) = m.ctl(&["fault", "1", "1", "stall"]);
    assert!(ok, "{out}");
    m.sh_ok("echo 'fault 1 1 babble' > monfs/ctl");
    cat.until("babble", |l| l.contains(" C Ii:1:") && l.contains(" -75:"));
    cat.until("CLEAR_FEATURE(HALT)", |l| {
        l.contains("s 02 01 0000 0081 0000 0")
    });
    let text = stop(cat);
    assert!(
        text.lines()
            .any(|l| l.contains(" C Ii:1:") && l.contains(" -32:")),
        "no stall:\n{text}"
    );
    assert!(
        text.contains("s 02 01 0000 0081 0000 0"),
        "no CLEAR_FEATURE(HALT) after the stall"
    );
    assert!(
        text.lines()
            .any(|l| l.contains(" C Ii:1:") && l.contains(" -75:")),
        "no babble:\n{text}"
    );
}

#[test]
fn bad_commands_are_refused_and_change_nothing() {
    let mut m = Mount::with_config(ONE_BUS);
    // Let the keyboard finish enumerating, so the topology is stable.
    wait_for(&m, "cat usb/devices", "Driver=usbhid");
    std::thread::sleep(Duration::from_millis(300));
    let before = m.sh_ok("cat usb/devices");
    for bad in [
        vec!["plug", "1", "9", "toaster"],
        vec!["plug", "7", "2", "hid-mouse"],
        vec!["plug", "1", "1", "hid-mouse"],
        vec!["unplug", "1", "4"],
        vec!["fault", "1", "1", "explode"],
        vec!["frobnicate"],
        vec!["plug", "1", "x.y", "hub"],
        vec!["zvm", "sever"],
    ] {
        let (ok, out) = m.ctl(&bad);
        assert!(!ok, "{bad:?} was accepted: {out}");
        assert!(out.starts_with("error: "), "{bad:?}: {out}");
    }
    let o = m.sh("echo 'plug 1 9 toaster' > monfs/ctl");
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid argument"));
    assert!(m.alive());
    assert_eq!(
        m.sh_ok("cat usb/devices"),
        before,
        "a refused command changed the topology"
    );
    assert!(
        m.log_text().contains("control command refused"),
        "no log line for refused commands"
    );
}

const SEEDED: &str = "clock: virtual\nusb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-keyboard, plug_after_ms: 4000}\n        - {port: 2, kind: mass-storage, plug_after_ms: 4000}\n";

/// The first `n` lines whose timestamp is at least `from` (so that when the
/// reader happened to open does not matter).
fn window(text: &str, from: u64, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.split(' ')
                .nth(1)
                .and_then(|t| t.parse::<u64>().ok())
                .is_some_and(|t| t >= from)
        })
        .take(n)
        .collect();
    assert_eq!(lines.len(), n, "too few events after {from}:\n{text}");
    lines.join("\n")
}

fn seeded_run(seed: &str) -> (String, String) {
    // Compiled before the mount, so that a slow compiler (a loaded machine)
    // cannot make the readers open after the devices plug.
    let build = tempfile::tempdir().unwrap();
    let bin = compile_c("usbmon_mmap", build.path());
    let m = Mount::start(Some(SEEDED), &["--seed", seed]);
    let text = Command::new("head")
        .args(["-n", "250"])
        .arg(m.path("usb/usbmon/0u"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let binary = Command::new(&bin)
        .arg(m.path("dev/usbmon0"))
        .arg("250")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // The devices plug 4 s into the run: text time 104 s (the virtual
    // monotonic clock starts at 100 s), binary wall time 132 s modulo 4096.
    let t = String::from_utf8(text.wait_with_output().unwrap().stdout).unwrap();
    let b = String::from_utf8(binary.wait_with_output().unwrap().stdout).unwrap();
    (window(&t, 103_900_000, 150), window(&b, 131_900_000, 150))
}

#[test]
fn seeded_runs_with_the_virtual_clock_are_byte_identical() {
    let (t1, b1) = seeded_run("7");
    let (t2, b2) = seeded_run("7");
    assert_eq!(t1, t2, "0u differs between two runs with seed 7");
    assert_eq!(b1, b2, "dev/usbmon0 differs between two runs with seed 7");
    let (t3, _) = seeded_run("8");
    assert_ne!(t1, t3, "seeds 7 and 8 gave the same bytes");
}

/// A client that goes away mid-command (closed socket) disturbs nothing.
#[test]
fn a_closed_control_connection_leaves_the_daemon_serving() {
    use std::io::Write;
    let mut m = Mount::with_config(ONE_BUS);
    let sock = m.sh_ok("cat monfs/socket");
    for _ in 0..20 {
        let mut s = std::os::unix::net::UnixStream::connect(sock.trim()).unwrap();
        // Half a command, then gone; and a whole one whose answer nobody reads.
        let _ = s.write_all(b"plug 1 ");
        drop(s);
        let mut s = std::os::unix::net::UnixStream::connect(sock.trim()).unwrap();
        let _ = s.write_all(b"pause 1\nresume 1\n");
        drop(s);
    }
    assert!(m.alive());
    // Served again once the dropped connections' threads are done (they hold
    // their slots among the 16 until then).
    let deadline = Instant::now() + common::HANG;
    loop {
        let (ok, out) = m.ctl(&["help"]);
        if ok {
            break;
        }
        assert!(
            out.contains("too many control connections") && Instant::now() < deadline,
            "{out}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(m
        .sh_ok("timeout 30 head -n 1 usb/usbmon/1u")
        .ends_with('\n'));
}

/// `usb:usb_device_plug` fires when a hot-plugged device is on the bus
/// (enumerated and configured), `usb:usb_device_unplug` when it leaves it,
/// both in tracefs's `trace` with the device's address, path and ids.
#[test]
fn plug_and_unplug_fire_their_trace_events() {
    let m = Mount::with_config(ONE_BUS);
    m.sh_ok("echo 'usb:usb_device_plug usb:usb_device_unplug' > tracing/set_event");
    let (ok, out) = m.ctl(&["plug", "1", "3", "hid-mouse", "product=Traced Mouse"]);
    assert!(ok, "{out}");
    let mouse = |t: &str, ev: &str| -> Vec<String> {
        t.lines()
            .filter(|l| l.contains(&format!("{ev}:")) && l.contains("devpath=1-3 "))
            .map(str::to_string)
            .collect()
    };
    let plug = wait_for(&m, "cat tracing/trace", "product=Traced Mouse");
    let lines = mouse(&plug, "usb_device_plug");
    assert_eq!(lines.len(), 1, "{plug}");
    let line = &lines[0];
    assert!(
        line.contains("devpath=1-3 id=0627:0001 product=Traced Mouse"),
        "{line}"
    );
    let dev = line
        .split(' ')
        .find_map(|w| w.strip_prefix("dev="))
        .unwrap_or_else(|| panic!("no dev= in {line}"));
    assert!(dev.parse::<u8>().is_ok_and(|d| d > 1), "{line}");
    assert!(mouse(&plug, "usb_device_unplug").is_empty(), "{plug}");
    let (ok, out) = m.ctl(&["unplug", "1", "3"]);
    assert!(ok, "{out}");
    let all = wait_for(&m, "cat tracing/trace", "usb_device_unplug:");
    let lines = mouse(&all, "usb_device_unplug");
    assert_eq!(lines.len(), 1, "{all}");
    assert!(
        lines[0].contains(&format!(
            "bus=1 dev={dev} devpath=1-3 id=0627:0001 product=Traced Mouse"
        )),
        "{all}"
    );
    // A disabled event records nothing.
    m.sh_ok("echo 0 > tracing/events/usb/usb_device_plug/enable");
    let (ok, out) = m.ctl(&["plug", "1", "3", "hid-mouse"]);
    assert!(ok, "{out}");
    // Configured, its driver bound (the keyboard's and the mouse's).
    let deadline = Instant::now() + common::HANG;
    while m.sh_ok("cat usb/devices").matches("Driver=usbhid").count() < 2 {
        assert!(Instant::now() < deadline, "the mouse is not configured");
        std::thread::sleep(Duration::from_millis(20));
    }
    let (ok, out) = m.ctl(&["unplug", "1", "3"]);
    assert!(ok, "{out}");
    let all = wait_for(&m, "cat tracing/trace", "product=QEMU USB Mouse");
    assert_eq!(mouse(&all, "usb_device_plug").len(), 1, "{all}");
    assert_eq!(mouse(&all, "usb_device_unplug").len(), 2, "{all}");
}

/// `wait settled` answers once no device on a running bus is coming or
/// going: a device plugged just before is listed with its driver bound by
/// then. A paused bus's device is not waited for; once the bus is resumed,
/// the next `wait settled` returns with it enumerated too.
#[test]
fn wait_settled_returns_once_every_device_on_a_running_bus_is_up() {
    let cfg = "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: hid-keyboard\n    - bus: 2\n      ports: 2\n      paused: true\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: hid-mouse\n";
    let m = Mount::with_config(cfg);
    let (ok, out) = m.ctl(&["plug", "1", "3", "hid-mouse", "product=Settled Mouse"]);
    assert!(ok, "{out}");
    let (ok, out) = m.ctl(&["wait", "settled"]);
    assert_eq!((ok, out.trim()), (true, "ok settled"));
    let devices = m.sh_ok("cat usb/devices");
    // Bus 1: its root hub, the keyboard and the mouse, both bound; bus 2:
    // its root hub only (the paused bus has not enumerated its mouse).
    assert!(devices.contains("S:  Product=Settled Mouse"), "{devices}");
    assert_eq!(devices.matches("Driver=usbhid").count(), 2, "{devices}");
    assert_eq!(devices.matches("T:  Bus=02").count(), 1, "{devices}");
    let links = m.sh_ok("readlink sys/bus/usb/devices/1-3:1.0/driver");
    assert!(links.trim_end().ends_with("/usbhid"), "{links}");
    let (ok, out) = m.ctl(&["resume", "2"]);
    assert!(ok, "{out}");
    let (ok, out) = m.ctl(&["wait", "settled", "timeout_ms=60000"]);
    assert_eq!((ok, out.trim()), (true, "ok settled"));
    let devices = m.sh_ok("cat usb/devices");
    assert_eq!(devices.matches("T:  Bus=02").count(), 2, "{devices}");
    assert_eq!(devices.matches("Driver=usbhid").count(), 3, "{devices}");
    // A word it does not take changes nothing and says why.
    let (ok, out) = m.ctl(&["wait", "settled", "soon"]);
    assert!(!ok && out.starts_with("error: "), "{out}");
}
