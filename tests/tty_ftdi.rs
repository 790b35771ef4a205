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
    let o = std::process::Command::new("/usr/bin/python3")
        .arg(&peer)
        .args(["--chip", chip, "--dump"])
        .arg(&dump)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
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

/// pyserial: three baud rates, a line each way, the modem lines, then
/// DTR, RTS and a break.
const PYSERIAL: &str = r#"
import serial
s = serial.Serial('/dev/ttyUSB0', 9600, timeout=30)
for baud in (9600, 115200, 3000000):
    s.baudrate = baud
    line = b'hello %d\n' % baud
    s.write(line)
    print('read', s.read(len(line)) == line)
print('modem', s.cts, s.dsr, s.ri, s.cd)
s.dtr = False
s.rts = False
s.send_break(0.25)
s.close()
"#;

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
    std::fs::write(dir.join("t.py"), PYSERIAL).unwrap();
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
        hex_text(&data),
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

fn hex_text(h: &str) -> String {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap() as char)
        .collect()
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
