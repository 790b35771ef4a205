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
use std::process::Command;

use common::{lines, monfs_run};

/// The peer keyboard on port 1 of bus 1 (device 2).
fn peer_config(dir: &Path) -> String {
    let peer = common::repo_path("tests/data/hid_keyboard_peer.py");
    let dump = dir.join("kbd.desc");
    let o = Command::new("/usr/bin/python3")
        .arg(&peer)
        .arg("--dump")
        .arg(&dump)
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
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
    assert_eq!(lines(&out, "info"), ["3 0x1209 0x4 256"], "{out}");
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
