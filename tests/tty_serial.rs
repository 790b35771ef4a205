//! The USB serial drivers cp210x and ch341 inside `monfs run` (as root,
//! and as a user in the rootless leg): a loopback of the tests' own (an
//! `external` peer, tests/data/serial_loopback.py, a
//! `monfs.peer.Cp210xDevice` or `Ch341Device`) is `/dev/ttyUSB0`;
//! Debian's pyserial round trips through it at 9600, 115200 and 3,000,000
//! baud (or the part's highest rate, as the driver rounds), the device
//! sees each rate and line setting and the DTR and RTS changes, a modem
//! line change it makes shows in TIOCMGET, and usbmon shows the drivers'
//! control requests as the kernel's drivers send them for the same calls
//! (read from `drivers/usb/serial/cp210x.c` and `ch341.c` of Linux 6.12).
//! The probes' requests, which depend on what the device answers, are
//! seen by plugging the device once usbmon is open.

mod common;

use std::path::Path;

use common::{lines, monfs_run};

/// The loopback on port 1 of bus 1 (device 2), its events logged to
/// `DIR/serial`: `chip` is the dump's `cp210x PART` or `ch341`, `args`
/// the peer's (`cp210x PART [counterfeit]`, `ch341 [VERSION] [limited]`).
fn config(dir: &Path, chip: &[&str], args: &[&str], product: &str) -> String {
    let peer = common::repo_path("tests/data/serial_loopback.py");
    let dump = dir.join("serial.desc");
    let mut c = std::process::Command::new("/usr/bin/python3");
    c.arg(&peer).arg("--dump").arg(&dump).args(chip);
    common::stdout_ok(&mut c, "serial_loopback.py --dump");
    // Once the looped bytes of the three lines are back, the device
    // raises DCD and RI and drops DSR.
    let looped = ["hello 9600\n", "hello 115200\n", "hello 3000000\n"]
        .iter()
        .map(|l| l.len())
        .sum::<usize>();
    let mut cmd = vec![
        "/usr/bin/python3".to_string(),
        peer,
        "--log".into(),
        dir.join("serial").display().to_string(),
        "--modem-after".into(),
        looped.to_string(),
    ];
    cmd.extend(args.iter().map(|a| a.to_string()));
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          \
         manufacturer: Silicon Labs\n          product: \"{product}\"\n          serial: \"0001\"\n          \
         command: [{}]\n",
        dump.display(),
        cmd.join(", ")
    )
}

/// pyserial: the modem lines, three rates with a line each way, the
/// modem lines again once the device changed them, DTR and RTS down, a
/// break (tcsendbreak: TCSBRK, on for 250 ms).
const PYSERIAL: &str = r#"
import serial, termios, time
s = serial.Serial('/dev/ttyUSB0', 9600, timeout=30)
print('modem', s.cts, s.dsr, s.ri, s.cd)
for baud in (9600, 115200, 3000000):
    s.baudrate = baud
    line = b'hello %d\n' % baud
    s.write(line)
    print('read', s.read(len(line)) == line)
n = 0
while not s.cd and n < 1200:
    time.sleep(0.05)
    n += 1
print('modem', s.cts, s.dsr, s.ri, s.cd)
s.dtr = False
s.rts = False
try:
    s.send_break(0.25)
    print('break ok')
except termios.error as e:
    print('break errno', e.args[0])
s.close()
"#;

/// The shell command: record usbmon's bus 1, wait for the port (with
/// `probe`, give the interfaces back to their driver first, as pyusb's
/// detach and attach do, so that the driver's probes are in the recording:
/// the device was plugged before the command ran), run `script`, wait for
/// every control request to complete, and print the drivers' ones
/// (`ctrl SETUP`, enumeration's left out). `script` has `closed K`: wait
/// until the port was closed K times (the last close of a tty of the
/// mount ends after close(2) returned), by `closes`, a pattern of usbmon
/// lines that one close makes once.
fn session(script: &str, closes: &str, probe: bool) -> String {
    let reprobe = if probe {
        "/usr/bin/python3 -c 'import glob, time, usb.core\n\
         d = usb.core.find(bus=1, address=2)\n\
         ifs = [i.bInterfaceNumber for i in d.get_active_configuration()]\n\
         for i in ifs: d.detach_kernel_driver(i)\n\
         n = 0\n\
         while glob.glob(\"/dev/ttyUSB*\") and n < 1200:\n\
         \x20   time.sleep(0.05); n += 1\n\
         for i in ifs: d.attach_kernel_driver(i)'; "
    } else {
        ""
    };
    format!(
        "n=0; until [ -e /dev/ttyUSB0 ] || [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; \
         exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         closed() {{ n=0; until [ \"$(grep -c -- '{closes}' mon)\" -ge $1 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; }}; \
         {reprobe}\
         n=0; until [ -e /dev/ttyUSB0 ] || [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; \
         echo driver $(basename $(readlink -f /sys/class/tty/ttyUSB0/device/driver)); \
         echo usb_driver $(basename $(readlink -f /sys/bus/usb/devices/1-1:1.0/driver)); \
         {script}; \
         n=0; until [ \"$(grep -c ' S C[io]:1:002:0 ' mon)\" = \"$(grep -c ' C C[io]:1:002:0 ' mon)\" ] \
         || [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; kill $!; \
         grep -E ' S C[io]:1:002:0 ' mon | cut -d' ' -f3- | grep -v ' 80 06 \\| 00 09 ' | sed 's/^/ctrl /'"
    )
}

/// What one close of a cp210x port makes once: the UART off.
const CP210X_CLOSE: &str = " s 41 00 0000 ";
/// What one close of a ch341 port makes once: the interrupt URB killed.
const CH341_CLOSE: &str = " C Ii:1:002:1 -2";

/// The setups of the `ctrl` lines: `s 41 00 0001 0000 0000 0`.
fn setups(out: &str) -> Vec<String> {
    lines(out, "ctrl")
        .iter()
        .map(|l| l.split(' ').skip(2).collect::<Vec<_>>().join(" "))
        .collect()
}

/// The peer's log but the data lines, and the data it got, as text.
fn peer_log(dir: &Path) -> (Vec<String>, String) {
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    let events = log
        .lines()
        .filter(|l| !l.starts_with("data"))
        .map(str::to_string)
        .collect();
    let data: String = log
        .lines()
        .filter_map(|l| l.strip_prefix("data "))
        .map(|l| l.rsplit(' ').next().unwrap())
        .collect();
    let text = (0..data.len() / 2)
        .map(|i| u8::from_str_radix(&data[2 * i..2 * i + 2], 16).unwrap() as char)
        .collect();
    (events, text)
}

const LINES: &str = "hello 9600\nhello 115200\nhello 3000000\n";

#[test]
fn cp210x_cp2102n_round_trips_and_sends_the_drivers_requests() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    std::fs::write(dir.join("t.py"), PYSERIAL).unwrap();
    let product = "CP2102N USB to UART Bridge Controller";
    let config = config(dir, &["cp210x", "CP2102N"], &["cp210x", "CP2102N"], product);
    let out = monfs_run(
        dir,
        &config,
        &session("/usr/bin/python3 t.py; closed 1", CP210X_CLOSE, false),
    );
    assert_eq!(lines(&out, "driver"), ["cp210x"], "{out}");
    assert_eq!(lines(&out, "usb_driver"), ["cp210x"], "{out}");
    assert_eq!(lines(&out, "read"), ["True", "True", "True"], "{out}");
    // GET_MDMSTS: CTS and DSR (the peer's default), then DCD and RI up,
    // DSR down.
    assert_eq!(
        lines(&out, "modem"),
        ["True True False False", "True False True True"],
        "{out}"
    );
    assert_eq!(lines(&out, "break"), ["ok"], "{out}");
    // cp210x's requests to interface 0, as cp210x.c sends them for the
    // same calls.
    let want = [
        // cp210x_open: the UART on; cp210x_set_termios(NULL): the rate,
        // 8N1, the initial termios' IXON: SET_CHARS (START ^Q, STOP ^S),
        // GET_FLOW and SET_FLOW with DTR and RTS inactive and auto
        // transmit.
        "s 41 00 0001 0000 0000 0",
        "s 41 1e 0000 0000 0004 4 = 80250000",
        "s 41 03 0800 0000 0000 0",
        "s 41 19 0000 0000 0006 6 = 00000000 1113",
        "s c1 14 0000 0000 0010 16 <",
        "s 41 13 0000 0000 0010 16 = 00000000 01000000 00000000 00000000",
        // tty_port_block_til_ready: DTR and RTS up.
        "s 41 07 0303 0000 0000 0",
        // pyserial's raw termios: IXON off, so the line and the flow
        // control again (DTR and RTS active, no auto transmit).
        "s 41 03 0800 0000 0000 0",
        "s c1 14 0000 0000 0010 16 <",
        "s 41 13 0000 0000 0010 16 = 01000000 40000000 00000000 00000000",
        // pyserial's TIOCMBIS of DTR, then RTS.
        "s 41 07 0101 0000 0000 0",
        "s 41 07 0202 0000 0000 0",
        // s.cts, s.dsr, s.ri, s.cd.
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        // 115200 is 115384 with the CP2102N's divisor; 3 M is exact.
        "s 41 1e 0000 0000 0004 4 = b8c20100",
        "s 41 03 0800 0000 0000 0",
        "s 41 1e 0000 0000 0004 4 = c0c62d00",
        "s 41 03 0800 0000 0000 0",
        // The wait for DCD (up at once), then the four lines.
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        "s c1 08 0000 0000 0001 1 <",
        // DTR, then RTS down.
        "s 41 07 0100 0000 0000 0",
        "s 41 07 0200 0000 0000 0",
        // TCSBRK waits until sent (tx_empty: GET_COMM_STATUS), then the
        // break on and, 250 ms later, off.
        "s c1 10 0000 0000 0013 19 <",
        "s 41 05 0001 0000 0000 0",
        "s 41 05 0000 0000 0000 0",
        // The close: tx_empty, HUPCL's DTR and RTS down, cp210x_close's
        // PURGE and the UART off.
        "s c1 10 0000 0000 0013 19 <",
        "s 41 07 0300 0000 0000 0",
        "s 41 12 000f 0000 0000 0",
        "s 41 00 0000 0000 0000 0",
    ];
    assert_eq!(setups(&out), want, "{out}");
    let (events, data) = peer_log(dir);
    assert_eq!(data, LINES);
    let want = [
        "enable 0 1",
        "baud 0 9600",
        "line 0 8 0 0",
        "chars 0 000000001113",
        "flow 0 0 1 0 0",
        "lines 0 1 1",
        "line 0 8 0 0",
        "flow 0 1 40 0 0",
        "lines 0 1 -",
        "lines 0 - 1",
        "baud 0 115384",
        "line 0 8 0 0",
        "baud 0 3000000",
        "line 0 8 0 0",
        "lines 0 0 -",
        "lines 0 - 0",
        "break 0 1",
        "break 0 0",
        "lines 0 0 0",
        "purge 0 f",
        "enable 0 0",
    ];
    assert_eq!(events, want);
}

/// A CP2102 clone: its probe asks for the part number twice (the second
/// time two bytes, which a clone answers with one), so cp210x leaves the
/// event insertion mode alone; a CP2102 takes 1 Mbaud at most and AN205's
/// rates below (57000, a BOTHER rate, is 57600), and stty reads back the
/// rate the driver set; stty sets 7E2 and INPCK.
#[test]
fn cp210x_cp2102_clone_probes_its_quirk_and_rounds_the_rates() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    std::fs::write(dir.join("t.py"), PYSERIAL).unwrap();
    let product = "CP2102 USB to UART Bridge Controller";
    let config = config(
        dir,
        &["cp210x", "CP2102"],
        &["cp210x", "CP2102", "counterfeit"],
        product,
    );
    let py = "import serial\nserial.Serial('/dev/ttyUSB0', 57000).close()\n";
    std::fs::write(dir.join("custom.py"), py).unwrap();
    let script = "/usr/bin/python3 t.py; closed 1; \
                  echo speed $(stty -F /dev/ttyUSB0 speed); closed 2; \
                  /usr/bin/python3 custom.py; closed 3; \
                  echo speed $(stty -F /dev/ttyUSB0 speed); closed 4; \
                  stty -F /dev/ttyUSB0 cs7 parenb -parodd cstopb inpck; closed 5";
    let out = monfs_run(dir, &config, &session(script, CP210X_CLOSE, true));
    assert_eq!(lines(&out, "read"), ["True", "True", "True"], "{out}");
    // 3,000,000 was set as 1,000,000 (B1000000); 57000 as 57600.
    assert_eq!(lines(&out, "speed"), ["1000000", "57600"], "{out}");
    let s = setups(&out);
    // The probe: GET_PARTNUM of interface 0, then the quirk's two bytes
    // (index 0).
    assert_eq!(
        s[..2],
        ["s c0 ff 370b 0000 0001 1 <", "s c0 ff 370b 0000 0002 2 <"],
        "{out}"
    );
    let (events, data) = peer_log(dir);
    assert_eq!(data, LINES);
    let bauds: Vec<&str> = events
        .iter()
        .filter_map(|e| e.strip_prefix("baud 0 "))
        .collect();
    // pyserial's three rates (3 M as 1 M); the custom rate's 57600 for
    // the opens after it.
    assert_eq!(bauds[..3], ["9600", "115200", "1000000"], "{events:?}");
    assert_eq!(bauds[bauds.len() - 2..], ["57600", "57600"], "{events:?}");
    // 7 data bits, even parity (2), two stop bits (2).
    assert_eq!(
        events.iter().filter(|e| *e == "line 0 7 2 2").count(),
        1,
        "{events:?}"
    );
    // INPCK, but the clone has no event insertion mode.
    assert!(
        !events.iter().any(|e| e.starts_with("events")),
        "{events:?}"
    );
}

/// A CP2105: two ports, each probed (part number, firmware version, pin
/// mode and port configuration of its interface); the enhanced port takes
/// 2 Mbaud at the divisor's rates, the standard one 921600 through AN205's
/// table and has no break (ENOTTY); INPCK on a genuine part turns the event
/// insertion mode on, which the close ends.
#[test]
fn cp210x_cp2105_has_two_ports_with_their_own_limits() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let py = r#"
import serial, termios
for n in (0, 1):
    s = serial.Serial('/dev/ttyUSB%d' % n, 3000000, timeout=30)
    s.write(b'port %d\n' % n)
    print('read', n, s.read(7) == b'port %d\n' % n)
    # pyserial's send_break is tcsendbreak (TCSBRK).
    try:
        s.send_break(0.25)
        print('break', n, 'ok')
    except termios.error as e:
        print('break', n, e.args[0])
    s.close()
"#;
    std::fs::write(dir.join("t.py"), py).unwrap();
    let product = "CP2105 Dual USB to UART Bridge Controller";
    let config = config(dir, &["cp210x", "CP2105"], &["cp210x", "CP2105"], product);
    let script =
        "n=0; until [ -e /dev/ttyUSB1 ] || [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; \
                  /usr/bin/python3 t.py; closed 2; stty -F /dev/ttyUSB0 inpck; closed 3";
    let out = monfs_run(dir, &config, &session(script, CP210X_CLOSE, true));
    assert_eq!(lines(&out, "read"), ["0 True", "1 True"], "{out}");
    assert_eq!(
        lines(&out, "break"),
        ["0 ok", &format!("1 {}", libc::ENOTTY)],
        "{out}"
    );
    let s = setups(&out);
    assert_eq!(
        s[..8],
        [
            "s c0 ff 370b 0000 0001 1 <",
            "s c0 ff 000e 0000 0003 3 <",
            "s c0 ff 3711 0000 0002 2 <",
            "s c0 ff 370c 0000 000f 15 <",
            "s c0 ff 370b 0001 0001 1 <",
            "s c0 ff 000e 0001 0003 3 <",
            "s c0 ff 3711 0001 0002 2 <",
            "s c0 ff 370c 0001 000f 15 <",
        ],
        "{out}"
    );
    let (events, _) = peer_log(dir);
    let bauds: Vec<&str> = events
        .iter()
        .filter(|e| e.starts_with("baud"))
        .map(String::as_str)
        .collect();
    // Each port's open at 9600, then pyserial's 3 M: the ECI's 2 M, the
    // SCI's 921600; stty's open of port 0 at its 2 M.
    assert_eq!(
        bauds,
        [
            "baud 0 9600",
            "baud 0 2000000",
            "baud 1 9600",
            "baud 1 921600",
            "baud 0 2000000"
        ],
        "{events:?}"
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| e.starts_with("events"))
            .collect::<Vec<_>>(),
        ["events 0 ec"],
        "{events:?}"
    );
    assert_eq!(events.last().map(String::as_str), Some("enable 0 0"));
}

#[test]
fn ch341_round_trips_and_sends_the_drivers_requests() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    std::fs::write(dir.join("t.py"), PYSERIAL).unwrap();
    let config = config(dir, &["ch341"], &["ch341", "31"], "USB Serial");
    let out = monfs_run(
        dir,
        &config,
        &session("/usr/bin/python3 t.py; closed 1", CH341_CLOSE, true),
    );
    assert_eq!(lines(&out, "driver"), ["ch341-uart"], "{out}");
    assert_eq!(lines(&out, "usb_driver"), ["ch341"], "{out}");
    assert_eq!(lines(&out, "read"), ["True", "True", "True"], "{out}");
    // The modem status register at the open (CTS and DSR), then the
    // interrupt packet's DCD and RI, DSR down.
    assert_eq!(
        lines(&out, "modem"),
        ["True True False False", "True False True True"],
        "{out}"
    );
    assert_eq!(lines(&out, "break"), ["ok"], "{out}");
    let want = [
        // ch341_port_probe: ch341_configure (the version, SERIAL_INIT,
        // 9600 baud with bit 7 as version 0x31 wants, the line control
        // register 8N1 with receiver and transmitter on, DTR and RTS low),
        // ch341_detect_quirks' read of the break register.
        "s c0 5f 0000 0000 0002 2 <",
        "s 40 a1 0000 0000 0000 0",
        "s 40 9a 1312 b282 0000 0",
        "s 40 9a 2518 00c3 0000 0",
        "s 40 a4 ffff 0000 0000 0",
        "s c0 95 0005 0000 0002 2 <",
        // ch341_open: ch341_set_termios(NULL), the interrupt URB, the
        // modem status register (0x0706).
        "s 40 9a 1312 b282 0000 0",
        "s 40 9a 2518 00c3 0000 0",
        "s 40 a4 ffff 0000 0000 0",
        "s c0 95 0706 0000 0002 2 <",
        // DTR and RTS up (tty_port_block_til_ready, then pyserial's
        // TIOCMBIS twice; its raw termios changes no hardware setting).
        "s 40 a4 ff9f 0000 0000 0",
        "s 40 a4 ff9f 0000 0000 0",
        "s 40 a4 ff9f 0000 0000 0",
        // 115200 (div 52, fact 0, ps 3) and 3 M (div 2).
        "s 40 9a 1312 cc83 0000 0",
        "s 40 9a 2518 00c3 0000 0",
        "s 40 a4 ff9f 0000 0000 0",
        "s 40 9a 1312 fe83 0000 0",
        "s 40 9a 2518 00c3 0000 0",
        "s 40 a4 ff9f 0000 0000 0",
        // DTR, then RTS down.
        "s 40 a4 ffbf 0000 0000 0",
        "s 40 a4 ffff 0000 0000 0",
        // The break: the break and LCR registers read, break bit and
        // transmitter enable cleared; then set again.
        "s c0 95 1805 0000 0002 2 <",
        "s 40 9a 1805 8300 0000 0",
        "s c0 95 1805 0000 0002 2 <",
        "s 40 9a 1805 c301 0000 0",
        // The close: HUPCL's DTR and RTS down.
        "s 40 a4 ffff 0000 0000 0",
    ];
    let s = setups(&out);
    assert_eq!(s, want, "{out}");
    // The interrupt URB: submitted at the open with the endpoint's 8
    // bytes, killed at the close after the read URBs.
    let mon = std::fs::read_to_string(dir.join("mon")).unwrap();
    let order: Vec<&str> = mon
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w.len() > 4 && w[2] == "C" && w[4].starts_with("-2")).then_some(w[3])
        })
        .collect();
    assert_eq!(order, ["Bi:1:002:2", "Bi:1:002:2", "Ii:1:002:1"], "{mon}");
    let (events, data) = peer_log(dir);
    assert_eq!(data, LINES);
    let want = [
        // the probe at the plug, and again at the attach
        "baud 9615",
        "line 8 0 0",
        "lines 0 0",
        "baud 9615",
        "line 8 0 0",
        "lines 0 0",
        // the open
        "baud 9615",
        "line 8 0 0",
        "lines 0 0",
        "lines 1 1",
        "lines 1 1",
        "lines 1 1",
        "baud 115385",
        "line 8 0 0",
        "lines 1 1",
        "baud 3000000",
        "line 8 0 0",
        "lines 1 1",
        "lines 0 1",
        "lines 0 0",
        "break 1",
        "break 0",
        "lines 0 0",
    ];
    assert_eq!(events, want);
}

/// A CH340 whose break register read stalls: ch341 simulates a break (46
/// baud and a NUL, then the rate back) and halves the base clock below the
/// top prescaler, so 20000 baud (a BOTHER rate) becomes 19737; an old
/// chip (version 0x27) gets no line control register and no bit 7.
#[test]
fn ch341_without_a_break_simulates_one_and_limits_the_prescaler() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let py = r#"
import serial
s = serial.Serial('/dev/ttyUSB0', 20000, timeout=30)
s.write(b'x')
print('read', s.read(1))
s.send_break(0.25)
print('read', s.read(1))
s.close()
"#;
    std::fs::write(dir.join("t.py"), py).unwrap();
    let config = config(dir, &["ch341"], &["ch341", "27", "limited"], "USB Serial");
    let out = monfs_run(
        dir,
        &config,
        &session("/usr/bin/python3 t.py; closed 1", CH341_CLOSE, true),
    );
    // The loopback's x, then the break's NUL.
    assert_eq!(lines(&out, "read"), ["b'x'", "b'\\x00'"], "{out}");
    let s = setups(&out);
    assert_eq!(
        s[..5],
        [
            "s c0 5f 0000 0000 0002 2 <",
            "s 40 a1 0000 0000 0000 0",
            "s 40 9a 1312 b202 0000 0",
            "s 40 a4 ffff 0000 0000 0",
            "s c0 95 0005 0000 0002 2 <",
        ],
        "{out}"
    );
    assert!(!s.iter().any(|x| x.contains(" 2518 ")), "{out}");
    let (events, _) = peer_log(dir);
    let bauds: Vec<&str> = events
        .iter()
        .filter_map(|e| e.strip_prefix("baud "))
        .collect();
    // The probe's and the open's 9600 (9615); pyserial's 20000 with the
    // halved clock (after its termios of BOTHER, which keeps 9600), the
    // break's 46, 20000 again.
    assert_eq!(bauds[..2], ["9615", "9615"], "{events:?}");
    assert_eq!(
        bauds[bauds.len() - 3..],
        ["19737", "46", "19737"],
        "{events:?}"
    );
}
