//! The input layer inside `monfs run` (as root, and as a user in the
//! rootless leg): a keyboard of the tests' own (an `external` peer with
//! qemu's boot keyboard descriptor, tests/data/hid_keyboard_peer.py) read
//! by Debian's python3-evdev gives, report by report, the events hid-input
//! and the input core give (MSC_SCAN before each key change, array keys
//! released before pressed, an ErrorRollOver ignored, one SYN_REPORT per
//! report); an EV_LED written reaches the keyboard as usbhid's SET_REPORT;
//! evtest reads the built-in keyboard's typing, mouse and tablet; sysfs,
//! the ioctls and hostile calls answer as drivers/input does.

mod common;

use std::path::Path;

use common::{lines, monfs_run};

/// The peer keyboard on port 1 of bus 1 (device 2).
fn peer_config(dir: &Path) -> String {
    let peer = common::repo_path("tests/data/hid_keyboard_peer.py");
    let dump = dir.join("kbd.desc");
    common::peer_dump("tests/data/hid_keyboard_peer.py", &dump);
    format!(
        "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          \
         kind: external\n          descriptors: {}\n          manufacturer: monfs\n          product: Test Keyboard\n          \
         serial: \"42\"\n          command: [/usr/bin/python3, {peer}, --go, {}, --log, {}]\n",
        dump.display(),
        dir.join("go").display(),
        dir.join("leds").display()
    )
}

/// python3-evdev on the peer keyboard: its frames as `type:code:value`
/// lines, then an EV_LED (Caps Lock) written and the LED state read back.
const EVDEV_READER: &str = r#"
import os, select, sys, time
import evdev
from evdev import ecodes as e
# list_devices() takes character devices only: the rootless nodes are
# the mount's files, found here through sysfs as udev finds them.
import glob
paths = ['/dev/input/' + v.split('/')[4]
         for v in glob.glob('/sys/class/input/event*/device/id/vendor') if open(v).read() == '1209\n']
print('listed', [p for p in evdev.list_devices() if p in paths])
dev = evdev.InputDevice(paths[0])
print('path', paths[0])
print('name', dev.name)
print('phys', dev.phys)
print('uniq', dev.uniq)
print('info', dev.info.bustype, hex(dev.info.vendor), hex(dev.info.product), dev.info.version)
print('repeat', *dev.repeat)
print('leds', dev.leds())
caps = dev.capabilities()
print('types', sorted(caps))
print('keys', len(caps[e.EV_KEY]), e.KEY_A in caps[e.EV_KEY], e.KEY_LEFTSHIFT in caps[e.EV_KEY])
print('ledcaps', caps[e.EV_LED])
open(sys.argv[1], 'w').close()
frames, cur = [], []
while len(frames) < 8:
    r, _, _ = select.select([dev], [], [], 20)
    if not r:
        break
    for ev in dev.read():
        if ev.type == e.EV_SYN and ev.code == e.SYN_REPORT:
            frames.append(cur)
            cur = []
        else:
            cur.append('%d:%d:%x' % (ev.type, ev.code, ev.value))
for f in frames:
    print('frame', ' '.join(f))
dev.write(e.EV_LED, e.LED_CAPSL, 1)
dev.write(e.EV_SYN, e.SYN_REPORT, 0)
for _ in range(400):
    if os.path.exists(sys.argv[2]) and '02' in open(sys.argv[2]).read():
        break
    time.sleep(0.05)
print('leds', dev.leds())
for ln in open(sys.argv[2]).read().splitlines():
    print('peer', ln)
"#;

#[test]
fn python_evdev_reads_a_keyboards_reports_as_the_kernels_events_and_sets_its_leds() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let cfg = peer_config(dir);
    std::fs::write(dir.join("reader.py"), EVDEV_READER).unwrap();
    let out = monfs_run(
        dir,
        &cfg,
        &format!(
            "exec 3< /sys/kernel/debug/usb/usbmon/1u; cat <&3 > mon & \
             /usr/bin/python3 reader.py {} {}; kill $!; \
             grep -E ' S Co:1:002:0 s 21 09 ' mon | cut -d' ' -f3-",
            dir.join("go").display(),
            dir.join("leds").display()
        ),
    );
    assert_eq!(lines(&out, "path"), ["/dev/input/event0"], "{out}");
    let listed = if common::class_char_devices() {
        "['/dev/input/event0']"
    } else {
        "[]"
    };
    assert_eq!(lines(&out, "listed"), [listed], "{out}");
    assert_eq!(lines(&out, "name"), ["monfs Test Keyboard"], "{out}");
    assert_eq!(lines(&out, "uniq"), ["42"], "{out}");
    assert_eq!(lines(&out, "info"), ["3 0x1209 0x4 273"], "{out}");
    assert_eq!(lines(&out, "repeat"), ["250 33"], "{out}");
    // EV_SYN, EV_KEY, EV_MSC, EV_LED (python-evdev leaves EV_REP out).
    assert_eq!(lines(&out, "types"), ["[0, 1, 4, 17]"], "{out}");
    assert_eq!(lines(&out, "keys"), ["163 True True"], "{out}");
    assert_eq!(lines(&out, "ledcaps"), ["[0, 1, 2, 3, 4]"], "{out}");
    // Report by report, as hid-input and the input core make them.
    assert_eq!(
        lines(&out, "frame"),
        [
            "4:4:70004 1:30:1",
            "4:4:70004 1:30:0",
            "4:4:700e1 1:42:1 4:4:7001a 1:17:1",
            "4:4:7001a 1:17:0",
            "4:4:700e1 1:42:0",
            "4:4:70004 1:30:1 4:4:70005 1:48:1",
            "4:4:70004 1:30:0",
            "4:4:70005 1:48:0",
        ],
        "{out}"
    );
    // The LED: on in the device's state, sent as the output report by
    // SET_REPORT (no interrupt OUT endpoint), as usbhid sends it.
    assert_eq!(lines(&out, "leds"), ["[]", "[1]"], "{out}");
    // (the first: the LEDs off, as the keyboard was bound)
    assert_eq!(lines(&out, "peer"), ["output 0 00", "output 0 02"], "{out}");
    assert!(
        out.lines()
            .any(|l| l == "S Co:1:002:0 s 21 09 0200 0000 0001 1 = 02"),
        "{out}"
    );
}

/// The built-in keyboard, mouse and tablet (qemu's usb-kbd, usb-mouse and
/// usb-tablet), typing and moving from the start.
const BUILTIN: &str = "seed: 7\nusb:\n  buses:\n    - bus: 1\n      ports: 4\n      devices:\n        \
                       - {port: 1, kind: hid-keyboard}\n        - {port: 2, kind: hid-mouse}\n        \
                       - {port: 3, kind: hid-tablet}\n";

/// evtest on each node: its description of the device, and the events of
/// a few seconds (key repeats left out: they depend on how long a key is
/// held on this machine's clock).
#[test]
fn evtest_reads_the_builtin_keyboards_typing_and_the_mouse_and_tablet() {
    let td = tempfile::tempdir().unwrap();
    let out = monfs_run(
        td.path(),
        BUILTIN,
        "for n in 0 1 2; do echo \"node $n $(cat /sys/class/input/event$n/device/name)\"; \
         timeout 4 evtest /dev/input/event$n > ev$n 2>&1; done; \
         grep -E '^Input device|^  Event type|^    Event code (30|35|272|276|0|1|8|11) |^  Repeat type' ev0 ev1 ev2; \
         grep -E '^Event:' ev0 | awk '/value 2$/ {r = 1; next} r && /SYN_REPORT/ {r = 0; next} {r = 0; print}' | sed -e 's/time [0-9.]*, //' -e 's/^/kbd /'; \
         grep -cE '^Event:.*(REL_X|REL_Y)' ev1 | sed 's/^/mouse_rel /'; \
         grep -cE '^Event:.*(ABS_X|ABS_Y)' ev2 | sed 's/^/tablet_abs /'",
    );
    assert_eq!(
        lines(&out, "node"),
        [
            "0 QEMU QEMU USB Keyboard",
            "1 QEMU QEMU USB Mouse",
            "2 QEMU QEMU USB Tablet"
        ],
        "{out}"
    );
    for want in [
        "ev0:Input device ID: bus 0x3 vendor 0x627 product 0x1 version 0x111",
        "ev0:Input device name: \"QEMU QEMU USB Keyboard\"",
        "ev0:  Event type 1 (EV_KEY)",
        "ev0:    Event code 30 (KEY_A)",
        "ev0:  Event type 17 (EV_LED)",
        "ev0:  Repeat type 20 (EV_REP)",
        "ev1:Input device ID: bus 0x3 vendor 0x627 product 0x1 version 0x1",
        "ev1:Input device name: \"QEMU QEMU USB Mouse\"",
        "ev1:    Event code 272 (BTN_LEFT)",
        "ev1:    Event code 276 (BTN_EXTRA)",
        "ev1:  Event type 2 (EV_REL)",
        "ev1:    Event code 0 (REL_X)",
        "ev1:    Event code 8 (REL_WHEEL)",
        "ev1:    Event code 11 (REL_WHEEL_HI_RES)",
        "ev2:  Event type 3 (EV_ABS)",
        "ev2:    Event code 0 (ABS_X)",
        "ev2:    Event code 1 (ABS_Y)",
    ] {
        assert!(out.lines().any(|l| l == want), "{want} in {out}");
    }
    // The keyboard types "hello from monfs usbmon\n" from the start: evtest
    // sees some key first (one released before it opened is skipped),
    // then each key as its scan code, press, SYN, scan code, release, SYN,
    // the keys following each other in the text.
    let typed: Vec<&str> = lines(&out, "kbd");
    let text = b"hello from monfs usbmon\n";
    // (key repeats, each a frame of its own, are left out above)
    // (character, HID usage, evtest's code and name)
    let keys: [(u8, u32, &str); 13] = [
        (b'h', 0x0b, "35 (KEY_H)"),
        (b'e', 0x08, "18 (KEY_E)"),
        (b'l', 0x0f, "38 (KEY_L)"),
        (b'o', 0x12, "24 (KEY_O)"),
        (b' ', 0x2c, "57 (KEY_SPACE)"),
        (b'f', 0x09, "33 (KEY_F)"),
        (b'r', 0x15, "19 (KEY_R)"),
        (b'm', 0x10, "50 (KEY_M)"),
        (b'n', 0x11, "49 (KEY_N)"),
        (b's', 0x16, "31 (KEY_S)"),
        (b'u', 0x18, "22 (KEY_U)"),
        (b'b', 0x05, "48 (KEY_B)"),
        (b'\n', 0x28, "28 (KEY_ENTER)"),
    ];
    let frame = |c: u8, v: u8| {
        let (_, usage, name) = keys.iter().find(|k| k.0 == c).unwrap();
        [
            format!(
                "Event: type 4 (EV_MSC), code 4 (MSC_SCAN), value {:x}",
                0x70000 + usage
            ),
            format!("Event: type 1 (EV_KEY), code {name}, value {v}"),
            "Event: -------------- SYN_REPORT ------------".to_string(),
        ]
    };
    let at = if typed.get(1).is_some_and(|l| l.ends_with("value 0")) {
        3
    } else {
        0
    };
    let first = keys
        .iter()
        .find(|k| typed.get(at + 1).is_some_and(|l| l.contains(k.2)))
        .unwrap_or_else(|| panic!("a key of the text first: {out}"))
        .0;
    // Where in the text it can be (the text repeats; 'l' and the like
    // more than once): the next keys decide, two of them at least.
    let starts: Vec<usize> = (0..text.len()).filter(|&i| text[i] == first).collect();
    let mut ok = Vec::new();
    for &s0 in &starts {
        let mut i = at;
        let mut n = 0;
        let mut good = true;
        while i + 6 <= typed.len() && n < 2 {
            let c = text[(s0 + n) % text.len()];
            let want: Vec<String> = frame(c, 1).into_iter().chain(frame(c, 0)).collect();
            good &= typed[i..i + 6] == want[..];
            i += 6;
            n += 1;
        }
        if good && n == 2 {
            ok.push(s0);
        }
    }
    assert!(!ok.is_empty(), "two keys of the text in order: {out}");
    let count = |w: &str| lines(&out, w)[0].parse::<u32>().unwrap();
    assert!(count("mouse_rel") > 0, "{out}");
    assert!(count("tablet_abs") > 0, "{out}");
}

/// Raw calls on the (idle) peer keyboard's node: evdev's answers to short
/// buffers, bad types and clocks, unknown commands; 10,000 opens; grabs
/// and a revoke where the node is a character device (on the mount's
/// file the kernel's FUSE copies EVIOCGRAB's and EVIOCREVOKE's argument
/// as a pointer: EFAULT); after the unplug, what a hung-up node answers.
const HOSTILE: &str = r#"
import ctypes, errno, fcntl, os, select, struct, subprocess, sys
sys.path.insert(0, sys.argv[1])
from monfs import evdev as E
p = '/dev/input/event0'
fd = os.open(p, os.O_RDWR | os.O_NONBLOCK)
def err(f):
    try:
        r = f()
        return 'ok %r' % (r,)
    except OSError as e:
        return errno.errorcode[e.errno]
print('read23', err(lambda: os.read(fd, 23)))
print('read24', err(lambda: os.read(fd, 24)))
print('write23', err(lambda: os.write(fd, bytes(23))))
print('write29', err(lambda: os.write(fd, bytes(29))))
print('bit6', err(lambda: fcntl.ioctl(fd, E.EVIOCGBIT(6, 8), bytes(8))))
print('bitff', err(lambda: len(fcntl.ioctl(fd, E.EVIOCGBIT(0x15, 16), bytes(16)))))
print('abs', err(lambda: fcntl.ioctl(fd, E.EVIOCGABS(0), bytes(24))))
print('clock', err(lambda: fcntl.ioctl(fd, E.EVIOCSCLOCKID, struct.pack('i', 2))))
print('clockmono', err(lambda: fcntl.ioctl(fd, E.EVIOCSCLOCKID, struct.pack('i', 1))))
print('tcgets', err(lambda: fcntl.ioctl(fd, 0x5401, bytes(64))))
print('name4', err(lambda: fcntl.ioctl(fd, E.EVIOCGNAME(4), bytes(4))))
print('mask', err(lambda: fcntl.ioctl(fd, E.EVIOCSMASK, struct.pack('IIQ', 0x14, 0, 0))))
print('poll', select.select([fd], [fd], [], 0)[0:2] == ([], [fd]))
# The key map: KEY_A by its usage; the first entry (Left Ctrl) by index.
print('keycode', struct.unpack('II', fcntl.ioctl(fd, 0x80084504, struct.pack('II', 0x70004, 0))))
e = struct.unpack('BBHI4s', fcntl.ioctl(fd, 0x80284504, struct.pack('BBHI32s', 1, 0, 0, 0, b''))[:12])
print('keycode2', e[2], e[3], e[4].hex())
# ErrorRollOver maps to nothing: KEY_RESERVED; a usage the device lacks: EINVAL.
print('keycode_none', struct.unpack('II', fcntl.ioctl(fd, 0x80084504, struct.pack('II', 0x70001, 0))))
print('keycode_bad', err(lambda: fcntl.ioctl(fd, 0x80084504, struct.pack('II', 0x90001, 0))))
# A mask keeps the caller's whole words (MSC has 8 codes, 64 bits given).
ones = ctypes.create_string_buffer(b'\xff' * 8, 8)
back = ctypes.create_string_buffer(8)
fcntl.ioctl(fd, E.EVIOCSMASK, struct.pack('IIQ', 4, 8, ctypes.addressof(ones)))
fcntl.ioctl(fd, E.EVIOCGMASK, struct.pack('IIQ', 4, 8, ctypes.addressof(back)))
print('mask_msc', back.raw.hex())
# The package's reader on the same node.
with E.Evdev(E.find(vendor=0x1209)[0]) as ev:
    print('pkg', ev.name(), tuple(ev.id()), sorted(ev.bits(E.EV_LED)), ev.repeat(), sorted(ev.leds()))
for _ in range(10000):
    os.close(os.open(p, os.O_RDONLY))
if sys.argv[2] == '1':
    g = os.open(p, os.O_RDONLY)
    print('grab', err(lambda: fcntl.ioctl(fd, E.EVIOCGRAB, 1)))
    print('grab2', err(lambda: fcntl.ioctl(g, E.EVIOCGRAB, 1)))
    print('ungrab2', err(lambda: fcntl.ioctl(g, E.EVIOCGRAB, 0)))
    print('ungrab', err(lambda: fcntl.ioctl(fd, E.EVIOCGRAB, 0)))
    print('revoke', err(lambda: fcntl.ioctl(g, E.EVIOCREVOKE, 0)))
    print('revoked', err(lambda: os.read(g, 24)))
else:
    print('grab', err(lambda: fcntl.ioctl(fd, E.EVIOCGRAB, 1)))
subprocess.run(['monfs', 'ctl', 'unplug', '--wait', '1', '1'], check=True, stdout=subprocess.DEVNULL)
print('gone_read', err(lambda: os.read(fd, 24)))
print('gone_write', err(lambda: os.write(fd, bytes(24))))
print('gone_ioctl', err(lambda: fcntl.ioctl(fd, E.EVIOCGVERSION, bytes(4))))
po = select.poll()
po.register(fd, select.POLLIN | select.POLLOUT)
print('gone_poll', po.poll(0)[0][1] & (select.POLLERR | select.POLLHUP) == select.POLLERR | select.POLLHUP)
print('gone_open', err(lambda: os.open(p, os.O_RDONLY)))
"#;

#[test]
fn hostile_calls_get_evdevs_errnos_and_an_unplug_hangs_the_node_up() {
    let td = tempfile::tempdir().unwrap();
    let dir = td.path();
    let cfg = peer_config(dir);
    std::fs::write(dir.join("hostile.py"), HOSTILE).unwrap();
    let chr = common::class_char_devices();
    let out = monfs_run(
        dir,
        &cfg,
        &format!(
            "/usr/bin/python3 hostile.py {} {}",
            common::repo_path("python"),
            u8::from(chr)
        ),
    );
    for (word, want) in [
        ("read23", "EINVAL"),
        ("read24", "EAGAIN"),
        ("write23", "EINVAL"),
        ("write29", "ok 24"),
        ("bit6", "EINVAL"),
        ("bitff", "ok 16"),
        ("abs", "EINVAL"),
        ("clock", "EINVAL"),
        ("clockmono", "ok b'\\x01\\x00\\x00\\x00'"),
        ("tcgets", "EINVAL"),
        ("name4", "ok b'monf'"),
        ("mask", "ok b'\\x14\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'"),
        ("poll", "True"),
        ("keycode", "(458756, 30)"),
        ("keycode2", "0 29 e0000700"),
        ("keycode_none", "(458753, 0)"),
        ("keycode_bad", "EINVAL"),
        ("mask_msc", "ffffffffffffffff"),
        ("pkg", "monfs Test Keyboard (3, 4617, 4, 273) [0, 1, 2, 3, 4] (250, 33) []"),
        ("gone_read", "ENODEV"),
        ("gone_write", "ENODEV"),
        ("gone_ioctl", "ENODEV"),
        ("gone_poll", "True"),
        ("gone_open", "ENOENT"),
    ] {
        assert_eq!(lines(&out, word), [want], "{word} in {out}");
    }
    if chr {
        for (word, want) in [
            ("grab", "ok 0"),
            ("grab2", "EBUSY"),
            ("ungrab2", "EINVAL"),
            ("ungrab", "ok 0"),
            ("revoke", "ok 0"),
            ("revoked", "ENODEV"),
        ] {
            assert_eq!(lines(&out, word), [want], "{word} in {out}");
        }
    } else {
        assert_eq!(lines(&out, "grab"), ["EFAULT"], "{out}");
    }
}

/// The keyboard's plug and unplug inside `monfs run`: the kernel's
/// uevents of its input device, LEDs (each with its trigger set by a
/// `change`, let go by another before it goes) and evdev node, in the
/// order Debian's 6.12 sends them (scripts/kernel-vm), and what udev's
/// rules make of them: the properties, the tags and the links under
/// /dev/input/by-id and by-path.
#[test]
fn a_keyboards_plug_announces_its_input_leds_and_event_node_as_the_kernel_and_udev_do() {
    let td = tempfile::tempdir().unwrap();
    let listen = common::repo_path("tests/data/uevent_listen.py");
    let cfg = "seed: 7\nusb:\n  buses:\n    - bus: 1\n      ports: 4\n      devices: []\n";
    let out = monfs_run(
        td.path(),
        cfg,
        &format!(
            "/usr/bin/python3 {listen} 37 > ev & L=$!; while [ ! -e ready ]; do sleep 0.05; done; \
         monfs ctl plug --wait 1 1 hid-keyboard >/dev/null; \
         udevadm info /sys/class/input/event0 | sed 's/^/info /'; \
         udevadm info /sys/class/input/input0 | grep -E 'ID_FOR_SEAT|TAGS' | sed 's/^/input /'; \
         udevadm info /sys/class/leds/input0::capslock | grep -E '^E: (ID_FOR|TAGS)' | sed 's/^/led /'; \
         for l in /dev/input/by-id/* /dev/input/by-path/*; do echo \"link $l $(readlink $l)\"; done; \
         udevadm monitor --udev --property --subsystem-match=input > um & M=$!; \
         until grep -q '^UDEV - the event' um; do sleep 0.05; done; \
         monfs ctl unplug --wait 1 1 >/dev/null; wait $L; sleep 0.2; kill $M; \
         awk '/^UDEV.*remove.*event0/,/^$/' um | grep -E '^(ID_INPUT_KEYBOARD|DEVLINKS|TAGS)=' | sed 's/^/removed /'; \
         cat ev; ls /dev/input | sed 's/^/left /'"
        ),
    );
    // Each event: its action, name, subsystem and trigger.
    let got = common::uevent_lines(&out, "TRIGGER");
    let want = [
        "add 1-1 usb -",
        "change 1-1 usb -",
        "add 1-1:1.0 usb -",
        "add 0003:0627:0001.0001 hid -",
        "add input0 input -",
        "add input0::numlock leds -",
        "change input0::numlock leds kbd-numlock",
        "add input0::capslock leds -",
        "change input0::capslock leds kbd-capslock",
        "add input0::scrolllock leds -",
        "change input0::scrolllock leds kbd-scrolllock",
        "add input0::compose leds -",
        "add input0::kana leds -",
        "change input0::kana leds kbd-kanalock",
        "add event0 input -",
        "add hidraw0 hidraw -",
        "bind 0003:0627:0001.0001 hid -",
        "bind 1-1:1.0 usb -",
        "bind 1-1 usb -",
        "change input0::numlock leds none",
        "remove input0::numlock leds -",
        "change input0::capslock leds none",
        "remove input0::capslock leds -",
        "change input0::scrolllock leds none",
        "remove input0::scrolllock leds -",
        "remove input0::compose leds -",
        "change input0::kana leds none",
        "remove input0::kana leds -",
        "remove event0 input -",
        "remove input0 input -",
        "remove hidraw0 hidraw -",
        "unbind 0003:0627:0001.0001 hid -",
        "remove 0003:0627:0001.0001 hid -",
        "unbind 1-1:1.0 usb -",
        "remove 1-1:1.0 usb -",
        "unbind 1-1 usb -",
        "remove 1-1 usb -",
    ];
    assert_eq!(got, want, "{out}");
    for want in [
        "info N: input/event0",
        "info S: input/by-id/usb-QEMU_QEMU_USB_Keyboard_68284-0000:00:04.0-1-event-kbd",
        "info E: ID_INPUT=1",
        "info E: ID_INPUT_KEY=1",
        "info E: ID_INPUT_KEYBOARD=1",
        "info E: ID_SERIAL=QEMU_QEMU_USB_Keyboard_68284-0000:00:04.0-1",
        "info E: ID_TYPE=hid",
        "info E: ID_USB_INTERFACE_NUM=00",
        "info E: ID_USB_DRIVER=usbhid",
        "info E: TAGS=:power-switch:",
        "input E: TAGS=:seat:",
        "led E: TAGS=:seat:",
        "link /dev/input/by-id/usb-QEMU_QEMU_USB_Keyboard_68284-0000:00:04.0-1-event-kbd ../event0",
    ] {
        assert!(out.lines().any(|l| l == want), "{want} in {out}");
    }
    assert!(
        lines(&out, "input")
            .iter()
            .any(|l| l.starts_with("E: ID_FOR_SEAT=input-")),
        "{out}"
    );
    assert!(
        lines(&out, "link")
            .iter()
            .any(|l| l.contains("/dev/input/by-path/")
                && l.ends_with("-usb-0:1:1.0-event-kbd ../event0")),
        "{out}"
    );
    // udev's tag of the path keeps its dashes (path_id).
    assert!(
        lines(&out, "input").contains(&"E: ID_FOR_SEAT=input-platform-monfs_hcd_1-usb-0_1_1_0"),
        "{out}"
    );
    // The node's remove carries what udev's database held.
    let removed = lines(&out, "removed");
    assert_eq!(removed.len(), 3, "{out}");
    assert_eq!(removed[0], "ID_INPUT_KEYBOARD=1", "{out}");
    // (udevadm prints the links in an order of its own: a set)
    assert!(
        removed[1].starts_with("DEVLINKS=/dev/input/")
            && removed[1].contains("/dev/input/by-id/usb-QEMU_QEMU_USB_Keyboard_")
            && removed[1].contains("/dev/input/by-path/"),
        "{out}"
    );
    assert_eq!(removed[2], "TAGS=:power-switch:", "{out}");
    // The node and its links went with the keyboard.
    assert_eq!(lines(&out, "left"), ["by-id", "by-path"], "{out}");
}
