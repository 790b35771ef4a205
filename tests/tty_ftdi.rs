//! ftdi_sio's tty inside `monfs run` (as root, and as a user in the
//! rootless leg): an FT232R-style loopback of the tests' own (an `external`
//! peer, examples/ftdi_loopback.py) is `/dev/ttyUSB0` below its usb-serial
//! port device; Debian's pyserial round trips through it at 9600, 115200
//! and 3,000,000 baud, and its calls reach the peer as ftdi_sio's vendor
//! requests, which usbmon shows; `stty -F` sets the line; the port
//! device's `latency_timer` reads and writes the chip's; an unplug hangs
//! the port up.

mod common;

use std::path::Path;

use common::{lines, monfs_run};

/// The loopback (chip `chip`) on port 1 of bus 1 (device 2), its events
/// logged to `DIR/serial`.
fn config(dir: &Path, chip: &str) -> String {
    let peer = common::repo_path("examples/ftdi_loopback.py");
    let dump = dir.join("ftdi.desc");
    common::peer_dump_with("examples/ftdi_loopback.py", &["--chip", chip], &dump);
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          manufacturer: FTDI\n          \
         product: \"{chip} USB UART\"\n          serial: A5XK3RJT\n          \
         command: [/usr/bin/python3, {}, --chip, {chip}, --log, {}]\n",
        dump.display(),
        peer,
        dir.join("serial").display()
    )
}

/// The control transfers' setup fields of usbmon text `mon` (device 2 of
/// bus 1), without tags and times.
fn control_setups(mon: &str) -> Vec<String> {
    mon.lines()
        .filter(|l| l.contains(" S Co:1:002:0 ") || l.contains(" S Ci:1:002:0 "))
        .map(|l| l.split(' ').skip(4).collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn pyserial_round_trips_and_its_calls_reach_the_device_as_ftdi_sios_requests() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    std::fs::write(dir.join("t.py"), common::pyserial_session("/dev/ttyUSB0")).unwrap();
    let out = monfs_run(
        dir,
        &config(dir, "FT232R"),
        "monfs ctl wait settled >/dev/null; \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         echo driver $(basename $(readlink -f /sys/class/tty/ttyUSB0/device/driver)); \
         echo iface_driver $(basename $(readlink -f /sys/class/tty/ttyUSB0/device/../driver)); \
         echo dev $(cat /sys/class/tty/ttyUSB0/dev); \
         echo by-id $(readlink /dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A5XK3RJT-if00-port0); \
         /usr/bin/python3 t.py; \
         n=0; until [ \"$(grep -c ' C Bi:1:002:1 -2 ' mon)\" -ge 2 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!",
    );
    assert_eq!(lines(&out, "driver"), ["ftdi_sio"], "{out}");
    assert_eq!(lines(&out, "iface_driver"), ["ftdi_sio"], "{out}");
    assert_eq!(lines(&out, "dev"), ["188:0"], "{out}");
    assert_eq!(lines(&out, "by-id"), ["../../ttyUSB0"], "{out}");
    assert_eq!(lines(&out, "read"), ["True", "True", "True"], "{out}");
    // The peer's modem status: CTS and DSR.
    assert_eq!(lines(&out, "modem"), ["True True False False"], "{out}");
    let mon = std::fs::read_to_string(dir.join("mon")).unwrap();
    // ftdi_sio's requests for the same calls, as the kernel sends them
    // (tests/data/kernel_ftdi/ holds the kernel's own for its client):
    // the first open resets the port, sets the line, the rate and IXON's
    // flow control of the initial termios, then raises DTR and RTS;
    // pyserial's raw mode turns flow control off, its open raises DTR and
    // RTS again one by one; each new rate is a divisor (115200: 26; 3M:
    // 0); each TIOCMGET asks the chip; a break waits for the transmitter
    // (GET_MODEM_STATUS's TEMT), then SET_DATA with the break bit and
    // without; the close waits for the transmitter again, turns flow
    // control off and drops DTR and RTS (HUPCL).
    assert_eq!(
        control_setups(&mon),
        [
            "s 40 00 0000 0000 0000 0",
            "s 40 04 0008 0000 0000 0",
            "s 40 03 4138 0000 0000 0",
            "s 40 02 1311 0400 0000 0",
            "s 40 01 0303 0000 0000 0",
            "s 40 02 0000 0000 0000 0",
            "s 40 01 0101 0000 0000 0",
            "s 40 01 0202 0000 0000 0",
            "s 40 03 001a 0000 0000 0",
            "s 40 02 0000 0000 0000 0",
            "s 40 03 0000 0000 0000 0",
            "s 40 02 0000 0000 0000 0",
            "s c0 05 0000 0000 0002 2 <",
            "s c0 05 0000 0000 0002 2 <",
            "s c0 05 0000 0000 0002 2 <",
            "s c0 05 0000 0000 0002 2 <",
            "s 40 01 0100 0000 0000 0",
            "s 40 01 0200 0000 0000 0",
            "s c0 05 0000 0000 0002 2 <",
            "s 40 04 4008 0000 0000 0",
            "s 40 04 0008 0000 0000 0",
            "s c0 05 0000 0000 0002 2 <",
            "s 40 02 0000 0000 0000 0",
            "s 40 01 0300 0000 0000 0",
        ],
        "{mon}"
    );
    // Two read URBs of 512 bytes (the driver's bulk_in_size) in flight
    // while the port is open, killed at the close.
    assert_eq!(
        mon.lines()
            .filter(|l| l.contains(" C Bi:1:002:1 -2 0"))
            .count(),
        2,
        "{mon}"
    );
    assert!(
        mon.lines().any(
            |l| l.split(' ').skip(2).collect::<Vec<_>>().join(" ") == "S Bi:1:002:1 -115 512 <"
        ),
        "{mon}"
    );
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    let data: String = log
        .lines()
        .filter_map(|l| l.strip_prefix("bytes "))
        .collect();
    assert_eq!(
        common::hex_text(&data),
        "hello 9600\nhello 115200\nhello 3000000\n",
        "{log}"
    );
    let events: Vec<&str> = log.lines().filter(|l| !l.starts_with("bytes")).collect();
    assert_eq!(
        events,
        [
            "reset",
            "data 8 0 0 0",
            "baud 9600",
            "flow xonxoff",
            "lines 1 1",
            "flow none",
            "lines 1 -",
            "lines - 1",
            // 3 MHz / 26: the chip's nearest rate to 115200
            "baud 115385",
            "flow none",
            "baud 3000000",
            "flow none",
            "lines 0 -",
            "lines - 0",
            "data 8 0 0 1",
            "data 8 0 0 0",
            "flow none",
            "lines 0 0",
        ],
        "{log}"
    );
}

#[test]
fn stty_sets_the_line_and_the_rates_the_chip_cannot_do_fall_back() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let out = monfs_run(
        dir,
        &config(dir, "FT232R"),
        "stty -F /dev/ttyUSB0 19200 cs7 parenb parodd cstopb crtscts; \
         stty -F /dev/ttyUSB0 speed; \
         stty -F /dev/ttyUSB0 cs6; stty -F /dev/ttyUSB0 -a | grep -o ' cs[5-8] '; \
         stty -F /dev/ttyUSB0 4000000; stty -F /dev/ttyUSB0 speed",
    );
    // CS6 goes back to what it was (the chips have 7 or 8 data bits); a
    // rate above 3 MBd is 9600, as ftdi_sio encodes it back.
    assert_eq!(out, "19200\n cs7 \n9600\n", "{out}");
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    // Seven data bits, odd parity (1), two stop bits (2), RTS/CTS.
    assert!(log.lines().any(|x| x == "data 7 1 2 0"), "{log}");
    assert!(log.lines().any(|x| x == "baud 19200"), "{log}");
    assert!(log.lines().any(|x| x == "flow rtscts"), "{log}");
    assert!(!log.lines().any(|x| x.starts_with("data 6")), "{log}");
}

#[test]
fn the_port_device_and_its_latency_timer_are_ftdi_sios() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let out = monfs_run(
        dir,
        &config(dir, "FT232R"),
        "monfs ctl wait settled >/dev/null; \
         d=/sys/bus/usb-serial/devices/ttyUSB0; \
         echo port $(readlink -f $d | sed 's|.*/usb1/||'); \
         echo tty $(readlink -f /sys/class/tty/ttyUSB0 | sed 's|.*/usb1/||'); \
         echo uevent $(cat $d/uevent); \
         echo number $(cat $d/port_number); \
         echo latency $(cat $d/latency_timer); \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         echo 1 > $d/latency_timer; echo 0x10d > $d/event_char; \
         echo latency $(cat $d/latency_timer); \
         echo 256 > $d/latency_timer 2>/dev/null || echo store_bad $?; \
         cat $d/event_char 2>/dev/null || echo event_char_read $?; \
         n=0; until [ \"$(grep -c ' C Co:1:002:0 ' mon)\" -ge 2 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!; \
         grep ' S Co:1:002:0 ' mon | cut -d' ' -f5- | sed 's/^/ctrl /'; \
         echo drivers $(ls /sys/bus/usb-serial/drivers/ftdi_sio)",
    );
    assert_eq!(lines(&out, "port"), ["1-1/1-1:1.0/ttyUSB0"], "{out}");
    assert_eq!(
        lines(&out, "tty"),
        ["1-1/1-1:1.0/ttyUSB0/tty/ttyUSB0"],
        "{out}"
    );
    assert_eq!(lines(&out, "uevent"), ["DRIVER=ftdi_sio"], "{out}");
    assert_eq!(lines(&out, "number"), ["0"], "{out}");
    assert_eq!(lines(&out, "latency"), ["16", "1"], "{out}");
    assert_eq!(lines(&out, "store_bad"), ["1"], "{out}");
    assert_eq!(lines(&out, "event_char_read"), ["1"], "{out}");
    assert_eq!(
        lines(&out, "ctrl"),
        ["s 40 09 0001 0000 0000 0", "s 40 06 010d 0000 0000 0"],
        "{out}"
    );
    assert_eq!(lines(&out, "drivers"), ["ttyUSB0"], "{out}");
}

/// An FT2232H: two interfaces, two ports, ttyUSB0 and ttyUSB1, whose
/// requests name their channel (A = 1, B = 2) and whose divisors are the
/// hi-speed chips'.
#[test]
fn an_ft2232h_has_two_ports_on_channels_a_and_b() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let out = monfs_run(
        dir,
        &config(dir, "FT2232H"),
        "monfs ctl wait settled >/dev/null; \
         echo ports $(ls /dev/ttyUSB*); \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         stty -F /dev/ttyUSB1 115200; \
         n=0; until [ \"$(grep -c ' C Co:1:002:0 ' mon)\" -ge 8 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!; \
         grep ' S Co:1:002:0 ' mon | cut -d' ' -f5- | grep ' 40 03 ' | sed 's/^/baud /'",
    );
    assert_eq!(lines(&out, "ports"), ["/dev/ttyUSB0 /dev/ttyUSB1"], "{out}");
    // 115200 on a hi-speed chip: 120 MHz * 8 / 10 / 115200 = 833.3 eighths,
    // 104 and 1/8 (code 3), the 2.5 divider off (0x20000); channel B.
    let b = lines(&out, "baud");
    assert!(b.contains(&"s 40 03 c068 0202 0000 0"), "{out}");
}

/// An unplug during a blocking read: the read returns end of file, writes
/// and ioctls are EIO, poll says POLLHUP, and the node and the port device
/// are gone.
#[test]
fn an_unplug_hangs_the_port_up() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let py = "import os, select, subprocess, termios, threading\n\
              def err(f):\n\
              \x20   try:\n\
              \x20       f(); return 0\n\
              \x20   except (OSError, termios.error) as e:\n\
              \x20       return -(e.errno if isinstance(e, OSError) else e.args[0])\n\
              fd = os.open('/dev/ttyUSB0', os.O_RDWR | os.O_NOCTTY)\n\
              got = []\n\
              th = threading.Thread(target=lambda: got.append(os.read(fd, 100)))\n\
              th.start()\n\
              subprocess.run(['monfs', 'ctl', 'unplug', '--wait', '1', '1'], stdout=subprocess.DEVNULL, check=True)\n\
              th.join()\n\
              print('read_during_unplug', got)\n\
              print('write_after', err(lambda: os.write(fd, b'x')))\n\
              print('ioctl_after', err(lambda: termios.tcgetattr(fd)))\n\
              p = select.poll(); p.register(fd, select.POLLIN)\n\
              print('poll_hup', bool(p.poll(0)[0][1] & select.POLLHUP))\n\
              print('open_after', err(lambda: os.open('/dev/ttyUSB0', os.O_RDWR)))\n\
              print('port_device', os.path.exists('/sys/bus/usb-serial/devices/ttyUSB0'))\n";
    std::fs::write(dir.join("t.py"), py).unwrap();
    let out = monfs_run(dir, &config(dir, "FT232R"), "/usr/bin/python3 t.py");
    assert_eq!(
        out,
        "read_during_unplug [b'']\nwrite_after -5\nioctl_after -5\npoll_hup True\n\
         open_after -2\nport_device False\n",
        "{out}"
    );
}

/// The kernel's measurement with qemu's usb-serial (tests/data/kernel_ftdi/,
/// from scripts/kernel-vm's step K4f: Debian's 6.12 kernel, ftdi_sio's
/// ttyUSB0 on qemu's FT232BM emulation at 1-5, its chardev a loopback).
fn kernel_ftdi(name: &str) -> String {
    std::fs::read_to_string(common::repo_path(&format!("tests/data/kernel_ftdi/{name}"))).unwrap()
}

/// A usbmon text line's fields without its tag and time stamp, the device
/// number written DEV (the kernel's device was the ninth of its bus).
fn usbmon_fields(line: &str) -> String {
    let f = line.split(' ').skip(2).collect::<Vec<_>>().join(" ");
    f.replace(":1:009:", ":1:DEV:")
        .replace(":1:002:", ":1:DEV:")
}

/// A session's usbmon lines of the device (not of address 0 or the root
/// hub): (the ordered sequence, each endpoint's own sequence). The read
/// URBs' resubmissions are left out of the ordered sequence:
/// usb_serial_generic_read_bulk_callback submits a read URB again after it
/// pushed the data to the tty, so the reader may run before or after it.
fn ftdi_streams(text: &str) -> (Vec<String>, std::collections::BTreeMap<String, Vec<String>>) {
    let mut ordered = vec![];
    let mut per_ep: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut read_completed = false;
    for l in text.lines() {
        let f = usbmon_fields(l);
        let w: Vec<&str> = f.split(' ').collect();
        let Some(addr) = w.get(1) else { continue };
        if !addr.contains(":1:DEV:") {
            continue;
        }
        per_ep.entry(addr.to_string()).or_default().push(f.clone());
        let resubmission = addr.starts_with("Bi") && w[0] == "S" && read_completed;
        if !resubmission {
            ordered.push(f.clone());
        }
        if addr.starts_with("Bi") && w[0] == "C" {
            read_completed = true;
        }
    }
    (ordered, per_ep)
}

/// The kernel events of `udevadm monitor --kernel --property` text (its
/// `KERNEL[...]` blocks): for each, its action, its path from the USB
/// device on (`1-5` written `DEVICE`), its subsystem and driver.
fn kernel_events(text: &str, device: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur: Vec<String> = vec![];
    let mut kernel = false;
    for l in text.lines().chain(std::iter::once("")) {
        if l.is_empty() {
            if !cur.is_empty() && kernel {
                out.push(cur.join(" "));
            }
            cur.clear();
            kernel = false;
            continue;
        }
        if l.starts_with("KERNEL[") {
            kernel = true;
        }
        for key in ["ACTION=", "DEVPATH=", "SUBSYSTEM=", "DRIVER="] {
            if let Some(v) = l.strip_prefix(key) {
                let v = match v.find(&format!("/{device}")) {
                    Some(at) if key == "DEVPATH=" => {
                        v[at + 1..].replace(device, "DEVICE").to_string()
                    }
                    _ => v.to_string(),
                };
                cur.push(format!("{}{v}", &key[..1]));
            }
        }
    }
    out
}

/// tests/c/tty_acm.c inside `monfs run` against a peer that answers as
/// qemu's usb-serial did (tests/data/ftdi_qemu_peer.py, its descriptors and
/// strings), then `stty -F /dev/ttyUSB0 115200 cs7 parenb -cstopb crtscts`,
/// then an unplug: the client's answers are the kernel's line for line,
/// the usbmon lines of the probe, the session and the stty are the
/// kernel's field by field but tags, times and the device number, and the
/// port device, its attributes and the unplug's uevents are the kernel's.
#[test]
fn tty_acm_session_is_the_kernels_with_qemus_usb_serial() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    common::compile_c("tty_acm", dir);
    let hex = kernel_ftdi("descriptors.hex");
    let desc: Vec<u8> = (0..hex.trim().len() / 2)
        .map(|i| u8::from_str_radix(&hex.trim()[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    std::fs::write(dir.join("qemu.desc"), &desc).unwrap();
    std::fs::write(dir.join("qemu.hex"), hex.trim()).unwrap();
    let dev = kernel_ftdi("device.txt");
    let field = |k: &str| {
        dev.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(' '))
            .unwrap()
            .to_string()
    };
    let peer = common::repo_path("tests/data/ftdi_qemu_peer.py");
    let config = format!(
        "usb:\n  buses:\n    - bus: 1\n      ports: 5\n      hub_poll_ms: 0\n      devices:\n        - port: 5\n          \
         kind: external\n          speed: full\n          descriptors: {}\n          manufacturer: \"{}\"\n          \
         product: \"{}\"\n          serial: \"{}\"\n          command: [/usr/bin/python3, {}, {}]\n",
        dir.join("qemu.desc").display(),
        field("manufacturer"),
        field("product"),
        field("serial"),
        peer,
        dir.join("qemu.hex").display(),
    );
    monfs_run(
        dir,
        &config,
        "listen() { udevadm monitor --kernel --property > $1 & M=$!; \
         n=0; until grep -q '^KERNEL - the kernel uevent' $1 || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; }; \
         heard() { n=0; until [ \"$(grep -c '^ACTION=' $1)\" -ge $2 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $M; }; \
         monfs ctl wait settled >/dev/null; \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > plug & P=$!; \
         listen rebind; \
         /usr/bin/python3 -c 'import usb.core; d = usb.core.find(idVendor=0x0403); \
         d.detach_kernel_driver(0); d.attach_kernel_driver(0)'; \
         n=0; until [ -e /dev/ttyUSB0 ] || [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; \
         kill $P; heard rebind 8; \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         tty_acm /dev/ttyUSB0 > client 2>&1; \
         n=0; until [ \"$(grep -c ' C Bi:1:002:1 -2 ' mon)\" -ge 2 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!; \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > stty & \
         stty -F /dev/ttyUSB0 115200 cs7 parenb -cstopb crtscts; \
         n=0; until [ \"$(grep -c ' C Bi:1:002:1 -2 ' stty)\" -ge 2 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!; \
         d=/sys/bus/usb-serial/devices/ttyUSB0; \
         cat $d/uevent > port_uevent; cat /sys/class/tty/ttyUSB0/uevent > tty_uevent; \
         ls -l $d/ > ls_port; ls -l /sys/class/tty/ttyUSB0/ > ls_class; \
         cat $d/latency_timer > latency; \
         listen unplug; monfs ctl unplug --wait 1 5 >/dev/null; heard unplug 7",
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let mut diffs = vec![];
    let client = read("client");
    let want = kernel_ftdi("tty_acm.txt");
    for (i, (g, w)) in client.lines().zip(want.lines()).enumerate() {
        if g != w {
            diffs.push(format!("client line {}: kernel {w:?}, monfs {g:?}", i + 1));
        }
    }
    if client.lines().count() != want.lines().count() {
        diffs.push(format!("client: kernel {want:?}, monfs {client:?}"));
    }
    // ftdi_sio's probe: the device's vendor requests at the plug (the
    // kernel's) and when pyusb gives the interface back to it (monfs's: the
    // device was plugged before the command ran; the probe is the same).
    let probe = |t: &str| -> Vec<String> {
        t.lines()
            .map(usbmon_fields)
            .filter(|f| f.contains(":1:DEV:0 s 40") || f.contains(":1:DEV:0 s c0"))
            .collect()
    };
    let (g, w) = (probe(&read("plug")), probe(&kernel_ftdi("plug_1u.txt")));
    if g != w {
        diffs.push(format!("probe:\n  kernel {w:#?}\n  monfs {g:#?}"));
    }
    for (mine, theirs) in [("mon", "session_1u.txt"), ("stty", "stty_1_1u.txt")] {
        let (got_seq, got_eps) = ftdi_streams(&read(mine));
        let (want_seq, want_eps) = ftdi_streams(&kernel_ftdi(theirs));
        if got_eps != want_eps {
            diffs.push(format!(
                "usbmon {theirs} by endpoint:\n  kernel {want_eps:#?}\n  monfs {got_eps:#?}"
            ));
        }
        if got_seq != want_seq {
            diffs.push(format!(
                "usbmon {theirs} order:\n  kernel {want_seq:#?}\n  monfs {got_seq:#?}"
            ));
        }
    }
    for (mine, theirs) in [
        ("port_uevent", "port_uevent.txt"),
        ("tty_uevent", "tty_uevent.txt"),
    ] {
        let (g, w) = (read(mine), kernel_ftdi(theirs));
        if g != w {
            diffs.push(format!("{theirs}: kernel {w:?}, monfs {g:?}"));
        }
    }
    // The latency timer the probe read (qemu's 0).
    let want_latency = kernel_ftdi("port_attrs.txt")
        .lines()
        .find_map(|l| l.strip_prefix("latency_timer 644 "))
        .map(|v| v.trim_end_matches('|').to_string())
        .unwrap();
    if read("latency").trim() != want_latency {
        diffs.push(format!(
            "latency_timer: kernel {want_latency:?}, monfs {:?}",
            read("latency")
        ));
    }
    for (mine, theirs) in [
        ("ls_port", "ls_port_ttyUSB0.txt"),
        ("ls_class", "ls_class_tty_ttyUSB0.txt"),
    ] {
        let (g, w) = (
            common::ls_entries(&read(mine), common::rootless()),
            common::ls_entries(&kernel_ftdi(theirs), false),
        );
        if g != w {
            diffs.push(format!(
                "ls -l ({theirs}):\n  kernel {w:#?}\n  monfs {g:#?}"
            ));
        }
    }
    // A program's detach and attach of the interface: what the kernel
    // sends for the interface and below at an unplug (the first four) and
    // a plug (but the interface's own `add`).
    let plug = kernel_events(&kernel_ftdi("udev_plug.txt"), "1-5");
    let unplug = kernel_events(&kernel_ftdi("udev_unplug.txt"), "1-5");
    let below = |e: &&String| e.contains("DEVICE:1.0");
    let mut want: Vec<String> = unplug.iter().filter(below).cloned().collect();
    want.retain(|e| !e.starts_with("Aremove DDEVICE/DEVICE:1.0 "));
    want.extend(
        plug.iter()
            .filter(below)
            .filter(|e| !e.starts_with("Aadd DDEVICE/DEVICE:1.0 "))
            .cloned(),
    );
    let got = kernel_events(&read("rebind"), "1-5");
    if got != want {
        diffs.push(format!(
            "detach and attach uevents:\n  kernel {want:#?}\n  monfs {got:#?}"
        ));
    }
    // The unplug's kernel events (the measurement's udev events are
    // left out: udevadm ran with --udev there).
    let (g, w) = (
        kernel_events(&read("unplug"), "1-5"),
        kernel_events(&kernel_ftdi("udev_unplug.txt"), "1-5"),
    );
    if g != w {
        diffs.push(format!(
            "unplug's uevents:\n  kernel {w:#?}\n  monfs {g:#?}"
        ));
    }
    assert!(
        diffs.is_empty(),
        "{}\n--- monfs's client output:\n{client}\n--- monfs's usbmon:\n{}",
        diffs.join("\n"),
        read("mon")
    );
}
