//! cdc_acm's tty inside `monfs run` (as root, and as a user in the
//! rootless leg): a CDC ACM loopback of the tests' own (an `external` peer,
//! examples/acm_loopback.py) is `/dev/ttyACM0`; Debian's pyserial round
//! trips through it at 9600, 115200 and 3,000,000 baud, and its DTR, RTS
//! and break calls reach the peer as cdc_acm's class requests, which
//! usbmon shows as the kernel's; `stty -F` reads and sets the termios;
//! raw system calls get the tty layer's answers, also after an unplug.

mod common;

use std::path::Path;

use common::{compile_c, lines, monfs_run};

/// The loopback on port 1 of bus 1 (device 2), its events logged to
/// `DIR/serial`.
fn config(dir: &Path) -> String {
    let peer = common::repo_path("examples/acm_loopback.py");
    let dump = dir.join("acm.desc");
    common::peer_dump("examples/acm_loopback.py", &dump);
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: Loopback\n          \
         serial: \"5\"\n          command: [/usr/bin/python3, {peer}, --log, {}]\n",
        dump.display(),
        dir.join("serial").display()
    )
}

#[test]
fn pyserial_round_trips_and_its_calls_reach_the_device_as_cdc_acms_requests() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    std::fs::write(dir.join("t.py"), common::pyserial_session("/dev/ttyACM0")).unwrap();
    let out = monfs_run(
        dir,
        &config(dir),
        "exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
         echo driver $(basename $(readlink -f /sys/class/tty/ttyACM0/device/driver)); \
         echo dev $(cat /sys/class/tty/ttyACM0/dev); \
         echo by-id $(readlink /dev/serial/by-id/usb-monfs_Loopback_5-if00); \
         /usr/bin/python3 t.py; \
         n=0; until [ \"$(grep -c ' C Co:1:002:0 ' mon)\" -ge 8 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!; \
         grep -E ' S Co:1:002:0 ' mon | cut -d' ' -f3- | sed 's/^/ctrl /'",
    );
    assert_eq!(lines(&out, "driver"), ["cdc_acm"], "{out}");
    assert_eq!(lines(&out, "dev"), ["166:0"], "{out}");
    assert_eq!(lines(&out, "by-id"), ["../../ttyACM0"], "{out}");
    assert_eq!(lines(&out, "read"), ["True", "True", "True"], "{out}");
    // No DCD or DSR from a device that sent no SERIAL_STATE; CTS always.
    assert_eq!(lines(&out, "modem"), ["True False False False"], "{out}");
    // cdc_acm's class requests, as the kernel sends them for the same
    // calls: DTR and RTS up at the open, the line coding at each new rate,
    // DTR then RTS down, a 250 ms break on and off, then HUPCL's drop at
    // the close.
    let setups: Vec<String> = lines(&out, "ctrl")
        .iter()
        .map(|l| l.split(' ').skip(2).collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        setups,
        [
            "s 21 22 0003 0000 0000 0",
            "s 21 20 0000 0000 0007 7 = 00c20100 000008",
            "s 21 20 0000 0000 0007 7 = c0c62d00 000008",
            "s 21 22 0002 0000 0000 0",
            "s 21 22 0000 0000 0000 0",
            "s 21 23 ffff 0000 0000 0",
            "s 21 23 0000 0000 0000 0",
            "s 21 22 0000 0000 0000 0",
        ],
        "{out}"
    );
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    let events: Vec<&str> = log.lines().filter(|l| !l.starts_with("data")).collect();
    assert_eq!(
        events,
        [
            "coding 9600 0 0 8",
            "lines 1 1",
            "coding 115200 0 0 8",
            "coding 3000000 0 0 8",
            "lines 0 1",
            "lines 0 0",
            "break 65535",
            "break 0",
            "lines 0 0",
        ],
        "{log}"
    );
    let data: String = log
        .lines()
        .filter_map(|l| l.strip_prefix("data "))
        .collect();
    assert_eq!(
        common::hex_text(&data),
        "hello 9600\nhello 115200\nhello 3000000\n",
        "{log}"
    );
}

#[test]
fn stty_sets_and_reads_the_termios_and_the_line_coding_follows() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let out = monfs_run(
        dir,
        &config(dir),
        "stty -F /dev/ttyACM0 speed; \
         stty -F /dev/ttyACM0 19200 cs7 parenb parodd cstopb -echo raw; \
         stty -F /dev/ttyACM0 speed; \
         stty -F /dev/ttyACM0 -a | tr ';' '\\n' | grep -E '^ ?(speed|line)' ; \
         stty -F /dev/ttyACM0 -g",
    );
    let l: Vec<&str> = out.lines().collect();
    assert_eq!(&l[..2], ["9600", "19200"], "{out}");
    assert!(out.contains("speed 19200 baud"), "{out}");
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    // Odd parity (1), two stop bits (2), seven data bits.
    assert!(log.lines().any(|x| x == "coding 19200 2 1 7"), "{log}");
}

/// Raw calls (Python's os, termios and fcntl, and ctypes for bad
/// pointers): canonical reads with the default termios (ONLCR on the way
/// out, ICRNL on the way in), the modem lines, the tty layer's errnos for
/// hostile arguments; then an unplug during a blocking read: the read
/// returns end of file, and the port answers as a hung-up tty.
const RAW: &str = r#"
import ctypes, errno, fcntl, os, select, struct, subprocess, termios, threading
libc = ctypes.CDLL(None, use_errno=True)
def raw_ioctl(fd, cmd, arg):
    r = libc.ioctl(fd, ctypes.c_ulong(cmd), ctypes.c_void_p(arg))
    return -ctypes.get_errno() if r < 0 else r
def err(f):
    try:
        f()
        return 0
    except OSError as e:
        return -e.errno
    except termios.error as e:
        return -e.args[0]
fd = os.open('/dev/ttyACM0', os.O_RDWR | os.O_NOCTTY)
print('isatty', os.isatty(fd))
t = termios.tcgetattr(fd)
print('termios', t[4] == termios.B9600, t[2] & termios.CSIZE == termios.CS8,
      bool(t[3] & termios.ICANON), bool(t[1] & termios.ONLCR), bool(t[0] & termios.ICRNL))
t[3] &= ~termios.ECHO
termios.tcsetattr(fd, termios.TCSANOW, t)
os.write(fd, b'abc\n')
print('line', os.read(fd, 100))
print('line', os.read(fd, 100))
m = struct.unpack('i', fcntl.ioctl(fd, termios.TIOCMGET, b'\0' * 4))[0]
print('tiocm', hex(m))
fcntl.ioctl(fd, termios.TIOCMBIC, struct.pack('i', termios.TIOCM_DTR))
m = struct.unpack('i', fcntl.ioctl(fd, termios.TIOCMGET, b'\0' * 4))[0]
print('tiocm', hex(m))
print('tcflsh_7', err(lambda: termios.tcflush(fd, 7)))
print('tiocmget_bad', raw_ioctl(fd, termios.TIOCMGET, 8))
print('tcsets_bad', raw_ioctl(fd, termios.TCSETS, 8))
print('unknown', raw_ioctl(fd, 0x54ff, 0))
print('getd', struct.unpack('i', fcntl.ioctl(fd, termios.TIOCGETD, b'\0' * 4))[0])
ser = fcntl.ioctl(fd, termios.TIOCGSERIAL, b'\0' * 72)
print('serial_line', struct.unpack_from('i', ser, 4)[0])
got = []
def reader():
    got.append(os.read(fd, 100))
th = threading.Thread(target=reader)
th.start()
subprocess.run(['monfs', 'ctl', 'unplug', '--wait', '1', '1'], stdout=subprocess.DEVNULL, check=True)
th.join()
print('read_during_unplug', got)
print('read_after', os.read(fd, 100))
print('write_after', err(lambda: os.write(fd, b'x')))
print('ioctl_after', err(lambda: termios.tcgetattr(fd)))
p = select.poll()
p.register(fd, select.POLLIN | select.POLLOUT)
print('poll_hup', bool(p.poll(0)[0][1] & select.POLLHUP))
print('open_after', err(lambda: os.open('/dev/ttyACM0', os.O_RDWR)))
"#;

#[test]
fn raw_calls_get_the_tty_layers_answers_also_after_an_unplug() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    std::fs::write(dir.join("t.py"), RAW).unwrap();
    let out = monfs_run(dir, &config(dir), "/usr/bin/python3 t.py");
    let got: Vec<&str> = out.lines().collect();
    let want = [
        "isatty True",
        "termios True True True True True",
        // "abc\n" went out as "abc\r\n" (ONLCR) and came back: ICRNL
        // makes the CR a second line end.
        "line b'abc\\n'",
        "line b'\\n'",
        // DTR, RTS, CTS; then DTR dropped
        "tiocm 0x26",
        "tiocm 0x24",
        "tcflsh_7 -22",
        "tiocmget_bad -14",
        "tcsets_bad -14",
        "unknown -25",
        "getd 0",
        "serial_line 0",
        // the hangup: end of file for the blocked read and after; EIO for
        // writes and ioctls; POLLHUP; the node is gone
        "read_during_unplug [b'']",
        "read_after b''",
        "write_after -5",
        "ioctl_after -5",
        "poll_hup True",
        "open_after -2",
    ];
    assert_eq!(got, want, "{out}");
}

/// picocom under tmux: it opens the port at 115200 baud, what is typed
/// goes to the device, and the device's answer shows on its screen.
#[test]
fn picocom_under_tmux_types_and_shows_the_devices_answer() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let script = "t=\"tmux -L monfs-tty-$$\"; \
        $t new-session -d -x 100 -y 30 'picocom -b 115200 /dev/ttyACM0'; \
        shown() { $t capture-pane -p | grep -c \"$1\"; }; \
        n=0; until [ \"$(shown 'Terminal ready')\" = 1 ] || [ $n = 600 ]; do sleep 0.05; n=$((n+1)); done; \
        $t send-keys 'hello picocom'; \
        n=0; until [ \"$(shown '^hello picocom')\" = 1 ] || [ $n = 600 ]; do sleep 0.05; n=$((n+1)); done; \
        $t capture-pane -p | grep -E '^(Terminal ready|hello)'; \
        $t send-keys C-a C-x; \
        n=0; while $t has-session 2>/dev/null && [ $n -lt 600 ]; do sleep 0.05; n=$((n+1)); done";
    let out = monfs_run(dir, &config(dir), script);
    assert_eq!(out, "Terminal ready\nhello picocom\n", "{out}");
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    let data: String = log
        .lines()
        .filter_map(|l| l.strip_prefix("data "))
        .collect();
    assert_eq!(common::hex_text(&data), "hello picocom", "{log}");
    assert!(log.lines().any(|l| l == "coding 115200 0 0 8"), "{log}");
}

/// The kernel's measurement of tests/c/tty_acm.c's session
/// (tests/data/kernel_acm/, from scripts/kernel-vm's step K4t: Debian's
/// 6.12 kernel, g_serial's ACM function on dummy_hcd's bus 3, cdc_acm's
/// ttyACM0, `tty_acm --loopback` echoing on the gadget's ttyGS0).
fn kernel_acm(name: &str) -> String {
    std::fs::read_to_string(common::repo_path(&format!("tests/data/kernel_acm/{name}"))).unwrap()
}

/// A usbmon text line without its URB tag and time stamp: those are the
/// kernel's pointers and clock, not the session's.
fn usbmon_fields(line: &str) -> String {
    line.split(' ').skip(2).collect::<Vec<_>>().join(" ")
}

/// A ttyACM session's usbmon lines (device 2 of bus 3) as compared with
/// the kernel's: (the ordered sequence, each endpoint's own sequence).
///
/// Every line is in its endpoint's sequence, compared in order and field
/// by field. The ordered sequence, compared across endpoints, leaves out
/// the two kinds of line whose place among the others the kernel itself
/// does not fix: the notification URB's completions with the device's
/// SERIAL_STATE and its resubmissions (when the device answers is the
/// device's and the host controller's timing: in one measurement
/// g_serial's second SERIAL_STATE came after the first read URB's
/// submission, in another after the second's) and the read URBs'
/// resubmissions (acm_read_bulk_callback submits a read URB again after
/// it pushed the data to the tty, so the reader may run before or after
/// it). What remains is ordered by the client's system calls and by cause
/// and effect: the first open's notification URB, then its 16 read URBs,
/// before it raises DTR and RTS; a write's completion before its echo;
/// the echo before the next request; the close's SET_CONTROL_LINE_STATE
/// before the killed URBs, the notification URB first.
fn acm_streams(text: &str) -> (Vec<String>, std::collections::BTreeMap<String, Vec<String>>) {
    let mut ordered = vec![];
    let mut per_ep: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let (mut read_completed, mut notify_submitted) = (false, false);
    for l in text.lines() {
        let f = usbmon_fields(l);
        let w: Vec<&str> = f.split(' ').collect();
        let Some(addr) = w.get(1) else { continue };
        if !addr.contains(":3:002:") {
            continue;
        }
        per_ep.entry(addr.to_string()).or_default().push(f.clone());
        let kind = &addr[..2];
        let resubmission = kind == "Bi" && w[0] == "S" && read_completed;
        // the notification URB's first submission, and its killing
        let notify_fixed = kind == "Ii"
            && ((w[0] == "S" && !notify_submitted)
                || (w[0] == "C" && w.get(2).is_some_and(|s| s.starts_with('-'))));
        if kind == "Ii" && w[0] == "S" {
            notify_submitted = true;
        }
        if (kind != "Ii" || notify_fixed) && !resubmission {
            ordered.push(f.clone());
        }
        if kind == "Bi" && w[0] == "C" {
            read_completed = true;
        }
    }
    (ordered, per_ep)
}

/// tests/c/tty_acm.c inside `monfs run` against the kernel's g_serial
/// (its descriptors and strings, at high speed, as device 2 of bus 3 as on
/// dummy_hcd; tests/data/acm_gserial_peer.py a loopback with its
/// endpoints and SERIAL_STATE notifications): the client's answers are the
/// kernel's line for line, and the usbmon lines of the session are the
/// kernel's field by field but URB tags and time stamps (see
/// [`acm_streams`] for which lines' order is compared).
#[test]
fn tty_acm_session_is_the_kernels_with_g_serial() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    compile_c("tty_acm", dir);
    let hex = kernel_acm("descriptors.hex");
    let desc: Vec<u8> = (0..hex.trim().len() / 2)
        .map(|i| u8::from_str_radix(&hex.trim()[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    std::fs::write(dir.join("gserial.desc"), &desc).unwrap();
    std::fs::write(dir.join("gserial.hex"), hex.trim()).unwrap();
    let dev = kernel_acm("device.txt");
    let field = |k: &str| {
        dev.lines()
            .find_map(|l| l.strip_prefix(k)?.strip_prefix(' '))
            .unwrap()
            .to_string()
    };
    // g_serial has no serial number string (iSerialNumber 0).
    assert_eq!(field("serial"), "", "{dev}");
    let peer = common::repo_path("tests/data/acm_gserial_peer.py");
    // Bus 3, as dummy_hcd's was (after qemu's two xHCI buses), so that the
    // usbmon addresses need no normalising; the device is the bus's first,
    // number 2, on both.
    let config = format!(
        "usb:\n  buses:\n    - bus: 3\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          speed: high\n          descriptors: {}\n          manufacturer: \"{}\"\n          \
         product: \"{}\"\n          command: [/usr/bin/python3, {}, {}]\n",
        dir.join("gserial.desc").display(),
        field("manufacturer"),
        field("product"),
        peer,
        dir.join("gserial.hex").display(),
    );
    monfs_run(
        dir,
        &config,
        // 3u is open before the client starts, once the device's
        // enumeration and cdc_acm's probe are over; it is read until the
        // close's 16 killed read URBs are in (a minute at most: past that
        // the assertions below show what is missing).
        "monfs ctl wait settled >/dev/null; \
         exec 3< /sys/kernel/debug/usb/usbmon/3u; cat <&3 > mon & \
         tty_acm /dev/ttyACM0 > client 2>&1; \
         n=0; until [ \"$(grep -c ' C Bi:3:002:1 -2 ' mon)\" -ge 16 ] || [ $n = 1200 ]; do \
         sleep 0.05; n=$((n + 1)); done; kill $!; \
         cat /sys/class/tty/ttyACM0/uevent > uevent; \
         ls -l /sys/class/tty/ttyACM0/ > ls_class; \
         cat /sys/class/tty/ttyACM0/device/bmCapabilities > caps; \
         for i in /sys/bus/usb/devices/3-1:*; do \
         echo \"$(basename $i) driver $(basename $(readlink $i/driver))\"; done > drivers",
    );
    let client = std::fs::read_to_string(dir.join("client")).unwrap();
    let want = kernel_acm("tty_acm.txt");
    let got_lines: Vec<&str> = client.lines().collect();
    let want_lines: Vec<&str> = want.lines().collect();
    let mon = std::fs::read_to_string(dir.join("mon")).unwrap();
    let kmon = kernel_acm("usbmon.txt");
    let (got_seq, got_eps) = acm_streams(&mon);
    let (want_seq, want_eps) = acm_streams(&kmon);
    // Each mismatch, so that one run shows all of them.
    let mut diffs = vec![];
    for i in 0..got_lines.len().max(want_lines.len()) {
        let (g, w) = (got_lines.get(i), want_lines.get(i));
        if g != w {
            diffs.push(format!("client line {}: kernel {w:?}, monfs {g:?}", i + 1));
        }
    }
    let eps: std::collections::BTreeSet<&String> = want_eps.keys().chain(got_eps.keys()).collect();
    for ep in eps {
        let (g, w) = (got_eps.get(ep), want_eps.get(ep));
        if g != w {
            diffs.push(format!("usbmon {ep}:\n  kernel {w:#?}\n  monfs {g:#?}"));
        }
    }
    for (file, kept) in [
        ("uevent", "uevent.txt"),
        ("caps", "bmCapabilities.txt"),
        ("drivers", "drivers.txt"),
    ] {
        let (g, w) = (
            std::fs::read_to_string(dir.join(file)).unwrap(),
            kernel_acm(kept),
        );
        if g != w {
            diffs.push(format!("{kept}: kernel {w:?}, monfs {g:?}"));
        }
    }
    let (g, w) = (
        common::ls_entries(
            &std::fs::read_to_string(dir.join("ls_class")).unwrap(),
            common::rootless(),
        ),
        common::ls_entries(&kernel_acm("ls_class_tty_ttyACM0.txt"), false),
    );
    if g != w {
        diffs.push(format!(
            "ls -l /sys/class/tty/ttyACM0/:\n  kernel {w:#?}\n  monfs {g:#?}"
        ));
    }
    if got_seq != want_seq {
        diffs.push(format!(
            "usbmon order:\n  kernel {want_seq:#?}\n  monfs {got_seq:#?}"
        ));
    }
    assert!(
        diffs.is_empty(),
        "{}\n--- monfs's client output:\n{client}\n--- monfs's usbmon:\n{mon}",
        diffs.join("\n")
    );
}

/// pyusb detaches cdc_acm from the communication interface and gives it
/// back: while detached neither interface has a driver (acm_disconnect
/// released the data interface) and there is no port; attached again,
/// cdc_acm probes again (its SET_LINE_CODING reaches the device) and the
/// port is back with the same number.
#[test]
fn a_program_detaches_cdc_acm_and_gives_it_back() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let py = "import os, usb.core\n\
              d = usb.core.find(idVendor=0x1209, idProduct=0x0005)\n\
              d.detach_kernel_driver(0)\n\
              import time\n\
              n = 0\n\
              while os.path.exists('/dev/ttyACM0') and n < 1200:\n\
              \x20   time.sleep(0.05); n += 1\n\
              print('detached', d.is_kernel_driver_active(0), d.is_kernel_driver_active(1), \
              os.path.exists('/dev/ttyACM0'))\n\
              d.attach_kernel_driver(0)\n\
              print('attached', d.is_kernel_driver_active(0), d.is_kernel_driver_active(1))\n";
    std::fs::write(dir.join("t.py"), py).unwrap();
    let out = monfs_run(
        dir,
        &config(dir),
        "/usr/bin/python3 t.py; \
         n=0; until [ -e /dev/ttyACM0 ] || [ $n = 1200 ]; do sleep 0.05; n=$((n + 1)); done; \
         echo port $(ls /dev/ttyACM*)",
    );
    assert_eq!(
        out, "detached False False False\nattached True True\nport /dev/ttyACM0\n",
        "{out}"
    );
    let log = std::fs::read_to_string(dir.join("serial")).unwrap();
    // The first probe's line coding, then the second's.
    assert_eq!(
        log.lines().filter(|l| *l == "coding 9600 0 0 8").count(),
        2,
        "{log}"
    );
}

/// A device that takes what the host writes only once `DIR/flow` exists
/// (its bulk OUT URBs stay pending until then), keeping it in `DIR/got`:
/// the loopback's descriptors (16 write buffers of 20 packets of 512
/// bytes).
const SINK: &str = r#"
import os, sys
here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, sys.argv[1] + "/python")
from monfs import peer
class Sink(peer.AcmDevice):
    def answer(self, urb):
        if urb.type != "C" and urb.ep == self.out_endpoint and not os.path.exists(here + "/flow"):
            return None
        return super().answer(urb)
    def on_data(self, data):
        with open(here + "/got", "ab") as f:
            f.write(data)
peer.main(Sink, [])
"#;

/// Writes that wait for room: a blocking write larger than cdc_acm's 16
/// write buffers waits until the device takes their bytes, and all of it
/// arrives in order; O_NONBLOCK takes what fits (tty_write's chunks of 2048
/// bytes, one per 10240 byte buffer), then EAGAIN; TIOCOUTQ counts the
/// buffers in use whole; POLLOUT waits for them; an unplug ends a write
/// that waits with nothing written (EIO once hung up, ENODEV for a write
/// URB the core refused before: both Linux's answers, by timing).
const WRITES: &str = r#"
import errno, fcntl, os, select, struct, subprocess, termios, threading, time
SYS_WRITE = {'x86_64': 1, 'aarch64': 64}.get(os.uname().machine, 1)
def outq(fd):
    return struct.unpack('i', fcntl.ioctl(fd, termios.TIOCOUTQ, b'\0' * 4))[0]
def in_write(tid, fd):
    try:
        w = open('/proc/self/task/%d/syscall' % tid).read().split()
    except OSError:
        return False
    return len(w) > 1 and w[0] == str(SYS_WRITE) and int(w[1], 16) == fd
def until(cond):
    for _ in range(2400):
        if cond():
            return True
        time.sleep(0.025)
    return False
def writable(fd):
    p = select.poll()
    p.register(fd, select.POLLOUT)
    return bool(p.poll(0))
def got():
    try:
        return open('got', 'rb').read()
    except OSError:
        return b''
fd = os.open('/dev/ttyACM0', os.O_RDWR | os.O_NOCTTY)
t = termios.tcgetattr(fd)
t[1] &= ~termios.OPOST
t[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG | termios.IEXTEN)
termios.tcsetattr(fd, termios.TCSANOW, t)
data = bytes((i * 7 + i // 251) % 256 for i in range(200000))
res = {}
def write(name, b):
    res[name + 'tid'] = threading.get_native_id()
    try:
        res[name] = os.write(fd, b)
    except OSError as e:
        res[name] = -e.errno
th = threading.Thread(target=write, args=('a', data))
th.start()
print('full', until(lambda: outq(fd) == 16 * 10240 and in_write(res.get('atid', 0), fd)))
print('waiting', 'a' not in res, len(got()), writable(fd))
open('flow', 'w').close()
th.join()
print('wrote', res['a'])
print('drained', until(lambda: outq(fd) == 0), writable(fd))
print('same', got() == data)
os.remove('flow')
os.remove('got')
fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) | os.O_NONBLOCK)
print('nonblock', os.write(fd, data))
try:
    os.write(fd, b'x')
    print('again', 0)
except OSError as e:
    print('again', -e.errno)
print('outq', outq(fd), writable(fd))
fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
th = threading.Thread(target=write, args=('b', b'late'))
th.start()
print('blocked', until(lambda: in_write(res.get('btid', 0), fd)))
subprocess.run(['monfs', 'ctl', 'unplug', '--wait', '1', '1'], stdout=subprocess.DEVNULL, check=True)
th.join()
print('late', res['b'] in (-errno.EIO, -errno.ENODEV), res['b'])
try:
    os.write(fd, b'x')
    print('after', 0)
except OSError as e:
    print('after', -e.errno)
print('received', len(got()))
"#;

#[test]
fn a_write_waits_for_the_device_to_take_its_bytes() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let dump = dir.join("acm.desc");
    common::peer_dump("examples/acm_loopback.py", &dump);
    std::fs::write(dir.join("sink.py"), SINK).unwrap();
    std::fs::write(dir.join("t.py"), WRITES).unwrap();
    let config = format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          command: [/usr/bin/python3, {}, {}]\n",
        dump.display(),
        dir.join("sink.py").display(),
        env!("CARGO_MANIFEST_DIR"),
    );
    let out = monfs_run(dir, &config, "/usr/bin/python3 t.py");
    let got: Vec<&str> = out.lines().filter(|l| !l.starts_with("late ")).collect();
    let want = [
        "full True",
        // The device took nothing: the write has not returned, no POLLOUT.
        "waiting True 0 False",
        "wrote 200000",
        "drained True True",
        "same True",
        // 16 chunks of 2048, one per write buffer.
        "nonblock 32768",
        "again -11",
        "outq 163840 False",
        "blocked True",
        "after -5",
        "received 0",
    ];
    assert_eq!(got, want, "{out}");
    assert!(lines(&out, "late")[0].starts_with("True "), "{out}");
}

/// examples/acm_loopback.c, the C loopback peer (scripts/kernel-vm runs
/// the same session on monfs run's CUSE character device): its descriptors
/// are the Python example's, and tests/c/tty_acm.c's session through it
/// reads back every line it writes, at each rate.
#[test]
fn the_c_acm_loopback_example_echoes_a_tty_acm_session() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    compile_c("tty_acm", dir);
    let peer = compile_c("acm_loopback", dir);
    let dump = dir.join("c.desc");
    common::stdout_ok(
        std::process::Command::new(&peer).arg("--dump").arg(&dump),
        "acm_loopback --dump",
    );
    let py = dir.join("py.desc");
    common::peer_dump("examples/acm_loopback.py", &py);
    assert_eq!(std::fs::read(&dump).unwrap(), std::fs::read(&py).unwrap());
    let config = format!(
        "usb:\n  buses:\n    - bus: 3\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          product: Loopback\n          command: [{}]\n",
        dump.display(),
        peer.display()
    );
    let out = monfs_run(dir, &config, "tty_acm /dev/ttyACM0");
    for want in [
        "open 0",
        "read 9600 11 match",
        "read 115200 13 match",
        "read 3000000 14 match",
        "tiocmget 0x166",
        "icount cts 0 dsr 1 rng 0 dcd 1 rx 0 tx 0 frame 0 overrun 0 parity 0 brk 0 buf_overrun 0",
        "close 0",
    ] {
        assert!(out.lines().any(|l| l == want), "{want} in {out}");
    }
}
