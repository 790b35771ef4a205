//! sysfs and udev: the mount's `sys/` has the kernel's bytes for a device
//! built from a real device's sysfs dump, and inside `monfs run` the real
//! tools enumerate the simulated topology exactly as `usb/devices` (the
//! kernel's debugfs file) describes it: Debian's `lsusb`, `lsusb -t`,
//! `lsusb -v`, `usb-devices`, `udevadm info` (libudev) and a C program on
//! Debian's libusb (udev backend). A device plugged with `monfs ctl plug`
//! is found by enumerating again, and is gone after `unplug`. Root and
//! rootless legs.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{monfs_bin, Mount, HANG};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/sysfs")
        .join(name)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The topology the enumeration tests use: a built-in keyboard, the qemu
/// keyboard from its descriptors dump, a hub with an audio device behind
/// it on an xHCI bus; a mass-storage device on an EHCI bus.
fn topology() -> String {
    format!(
        "usb:\n  buses:\n    - bus: 1\n      controller: xhci\n      ports: 4\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: hid-keyboard\n        - port: 2\n          kind: descriptors\n          descriptors: {}\n          speed: high\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          serial: 68284-0000:00:03.0-1\n        - port: 4\n          kind: hub\n          devices:\n            - port: 1\n              kind: audio\n    - bus: 2\n      controller: ehci\n      ports: 2\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: mass-storage\n",
        data("qemu-usb-kbd/descriptors").display()
    )
}

/// Devices in the topology, root hubs included.
const DEVICES: usize = 7;

/// `monfs run --config CFG -- sh -c SCRIPT` with `env`; its output.
fn run_script(cfg: &str, script: &str, env: &[(&str, &Path)]) -> Output {
    common::require_fuse();
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = dir.path().join("config.yaml");
    std::fs::write(&cfg_path, cfg).unwrap();
    let o = Command::new(monfs_bin())
        .args(["run", "--no-io-uring", "--config"])
        .arg(&cfg_path)
        .args(["--", "sh", "-c", script])
        .env("MONFS_BIN", monfs_bin())
        .env("HANG_TICKS", (HANG.as_millis() / 50).to_string())
        .envs(env.iter().map(|(k, v)| (*k, v.as_os_str())))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    o
}

/// Shell: wait (hang detection only) until `usb/devices` and sysfs list
/// $1 devices and sysfs has a driver link for every active interface that
/// `usb/devices` shows bound.
const WAIT_SETTLED: &str = r#"
settled() {
    n=0
    while :; do
        t=$(grep -c '^T:' "$MONFS_MOUNT/usb/devices")
        s=$(ls /sys/bus/usb/devices | grep -vc :)
        want=$(grep '^I:\*' "$MONFS_MOUNT/usb/devices" | grep -vc 'Driver=(none)')
        got=0
        for i in /sys/bus/usb/devices/*:*; do [ -L "$i/driver" ] && got=$((got + 1)); done
        [ "$t" = "$1" ] && [ "$s" = "$1" ] && [ "$got" = "$want" ] && return 0
        n=$((n + 1))
        if [ $n -gt "$HANG_TICKS" ]; then
            echo "not settled: usb/devices $t, sysfs $s, drivers $got of $want" >&2
            exit 9
        fi
        sleep 0.05
    done
}
"#;

/// One device of `usb/devices`.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Dev {
    bus: u32,
    lev: u32,
    prnt: u32,
    port: u32,
    dev: u32,
    spd: String,
    mxch: u32,
    vid: String,
    pid: String,
    /// (If#, Cls, Driver) of the active settings.
    ifaces: Vec<(u32, String, String)>,
}

/// `Key=value` fields of a usb/devices line (values may be padded).
fn fields(line: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let body = &line[3.min(line.len())..];
    let parts: Vec<&str> = body.split('=').collect();
    // "Bus=01 Lev=00 Dev#=  1": each part but the first ends with the next key.
    let mut key = parts[0].trim().to_string();
    for (i, p) in parts.iter().enumerate().skip(1) {
        let p = p.trim_start();
        let (val, next) = if i + 1 < parts.len() {
            match p.rfind(' ') {
                Some(at) => (p[..at].trim().to_string(), p[at + 1..].to_string()),
                None => (p.to_string(), String::new()),
            }
        } else {
            (p.trim().to_string(), String::new())
        };
        out.insert(key.clone(), val);
        key = next;
    }
    out
}

fn num(s: &str) -> u32 {
    s.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a number: {s:?}"))
}

/// The devices of a `usb/devices` (or `usb-devices`) text.
fn parse_devices(t: &str) -> Vec<Dev> {
    let mut out: Vec<Dev> = Vec::new();
    for line in t.lines() {
        if line.starts_with("T:") {
            let f = fields(line);
            out.push(Dev {
                bus: num(&f["Bus"]),
                lev: num(&f["Lev"]),
                prnt: num(&f["Prnt"]),
                port: num(&f["Port"]),
                dev: num(&f["Dev#"]),
                spd: f["Spd"].clone(),
                mxch: num(&f["MxCh"]),
                ..Default::default()
            });
        } else if line.starts_with("P:") {
            let f = fields(line);
            let d = out.last_mut().unwrap();
            d.vid = f["Vendor"].clone();
            d.pid = f["ProdID"].clone();
        } else if line.starts_with("I:*") || (line.starts_with("I: ") && !t.contains("I:*")) {
            let f = fields(&line.replacen("I:*", "I: ", 1));
            let cls = f["Cls"].split('(').next().unwrap().to_string();
            let d = out.last_mut().unwrap();
            let drv = match f["Driver"].as_str() {
                "(none)" => String::new(),
                d => d.to_string(),
            };
            d.ifaces.push((num(&f["If#"]), cls, drv));
        }
    }
    out.sort();
    out
}

/// The sections of the script's output, by `== NAME` header.
fn sections(out: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let mut cur = String::new();
    for l in out.lines() {
        if let Some(n) = l.strip_prefix("== ") {
            cur = n.to_string();
            m.insert(cur.clone(), String::new());
        } else if let Some(s) = m.get_mut(&cur) {
            s.push_str(l);
            s.push('\n');
        }
    }
    m
}

/// The port path of each device (bus, devnum) from usb/devices' parent and
/// port fields: `1.4` style, `-` for a root hub.
fn port_paths(devs: &[Dev]) -> BTreeMap<(u32, u32), String> {
    let mut m = BTreeMap::new();
    let by: BTreeMap<(u32, u32), &Dev> = devs.iter().map(|d| ((d.bus, d.dev), d)).collect();
    for d in devs {
        let mut path = Vec::new();
        let mut x = d;
        while x.lev > 0 {
            path.push((x.port + 1).to_string());
            x = by[&(x.bus, x.prnt)];
        }
        path.reverse();
        m.insert(
            (d.bus, d.dev),
            if path.is_empty() {
                "-".into()
            } else {
                path.join(".")
            },
        );
    }
    m
}

#[test]
fn real_tools_enumerate_the_topology_of_usb_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let enum_bin = compile_c_libusb("usb_enum", tmp.path());
    let script = format!(
        r#"{WAIT_SETTLED}
        settled {DEVICES}
        echo '== devices'; cat "$MONFS_MOUNT/usb/devices"
        echo '== lsusb'; lsusb
        echo '== lsusb-t'; lsusb -t
        echo '== usb-devices'; usb-devices
        echo '== enum'; "$ENUM"
        echo '== verbose'; lsusb -v -d 0627:0001 2>&1
        echo '== udev'
        for d in /sys/bus/usb/devices/*; do
            case ${{d##*/}} in *:*) continue;; esac
            name=$(udevadm info -q property "$d" | sed -n 's/^DEVNAME=//p')
            type=$(udevadm info -q property "$d" | sed -n 's/^DEVTYPE=//p')
            same=no
            cmp -n 18 "$name" "$d/descriptors" >/dev/null && same=yes
            echo "${{d##*/}} $type $name $same"
        done
        "#
    );
    let o = run_script(&topology(), &script, &[("ENUM", &enum_bin)]);
    let out = text(&o.stdout);
    let s = sections(&out);
    let devs = parse_devices(&s["devices"]);
    assert_eq!(devs.len(), DEVICES, "{out}");
    let ids: BTreeSet<(u32, u32, String, String)> = devs
        .iter()
        .map(|d| (d.bus, d.dev, d.vid.clone(), d.pid.clone()))
        .collect();

    // lsusb: "Bus 001 Device 002: ID 0627:0001 ...".
    let listed: BTreeSet<(u32, u32, String, String)> = s["lsusb"]
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let (v, p) = w[5].split_once(':').unwrap();
            (
                num(w[1]),
                num(w[3].trim_end_matches(':')),
                v.into(),
                p.into(),
            )
        })
        .collect();
    assert_eq!(listed, ids, "lsusb:\n{}", s["lsusb"]);

    // The C libusb program: address, ids, port path, speed, interfaces.
    let speed = |spd: &str| match spd {
        "1.5" => 1,
        "12" => 2,
        "480" => 3,
        "5000" => 4,
        _ => 0,
    };
    let paths = port_paths(&devs);
    let want: BTreeSet<String> = devs
        .iter()
        .map(|d| {
            let classes: Vec<String> = d.ifaces.iter().map(|i| i.1.clone()).collect();
            format!(
                "{:03} {:03} {}:{} ports={} speed={} ifaces={}",
                d.bus,
                d.dev,
                d.vid,
                d.pid,
                paths[&(d.bus, d.dev)],
                speed(&d.spd),
                classes.join(",")
            )
        })
        .collect();
    let got: BTreeSet<String> = s["enum"]
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            // BUS DEV VID:PID ports= class= speed= configs= active= ifaces=
            format!("{} {} {} {} {} {}", w[0], w[1], w[2], w[3], w[5], w[8])
        })
        .collect();
    assert_eq!(got, want, "libusb:\n{}", s["enum"]);

    // lsusb -t: every interface with its driver and speed, root hubs with
    // their ports.
    let mut tree_ifaces = BTreeSet::new();
    for l in s["lsusb-t"].lines() {
        let l = l.trim_start_matches([' ', '|', '_', '/', ':']);
        let f: Vec<&str> = l.split(", ").collect();
        if l.starts_with("Bus ") {
            // "Bus 01.Port 1: Dev 1, Class=root_hub, Driver=xhci-hcd/4p, 480M"
            let bus = num(&l[4..6]);
            let root = devs.iter().find(|d| d.bus == bus && d.lev == 0).unwrap();
            assert!(f[2].ends_with(&format!("/{}p", root.mxch)), "{l}");
            assert_eq!(f[3], format!("{}M", root.spd), "{l}");
        } else if l.starts_with("Port ") {
            // "Port 1: Dev 2, If 0, Class=Human Interface Device, Driver=usbhid, 12M"
            let dev = num(f[0].rsplit(' ').next().unwrap());
            let ifn = num(f[1].trim_start_matches("If "));
            let drv = f[3].trim_start_matches("Driver=");
            let drv = drv.split('/').next().unwrap();
            tree_ifaces.insert((dev, ifn, drv.to_string(), f[4].to_string()));
        }
    }
    let want_ifaces: BTreeSet<(u32, u32, String, String)> = devs
        .iter()
        .filter(|d| d.lev > 0)
        .flat_map(|d| {
            d.ifaces
                .iter()
                .map(move |i| (d.dev, i.0, i.2.clone(), format!("{}M", d.spd)))
        })
        .collect();
    assert_eq!(tree_ifaces, want_ifaces, "lsusb -t:\n{}", s["lsusb-t"]);

    // usb-devices: the same topology, fields and drivers. (Not Prnt: the
    // script's devnum is global, so a device after a sibling's subtree
    // shows that sibling's number, on the kernel's sysfs too.)
    let ud = parse_devices(&s["usb-devices"]);
    let key = |d: &Dev| {
        (
            d.bus,
            d.lev,
            d.port,
            d.dev,
            d.mxch,
            d.vid.clone(),
            d.pid.clone(),
            d.ifaces.clone(),
        )
    };
    assert_eq!(
        ud.iter().map(key).collect::<Vec<_>>(),
        devs.iter().map(key).collect::<Vec<_>>(),
        "usb-devices:\n{}",
        s["usb-devices"]
    );

    // lsusb -v decodes the device from the dump, strings through usbfs.
    let v = &s["verbose"];
    for want in [
        "idVendor           0x0627",
        "bcdUSB               2.00",
        "68284-0000:00:03.0-1",
        "wTotalLength       0x0022",
        "bInterfaceClass         3 Human Interface Device",
        "bEndpointAddress     0x81  EP 1 IN",
    ] {
        assert!(v.contains(want), "lsusb -v lacks {want:?}:\n{v}");
    }

    // libudev: every device is a usb_device whose devnode is monfs's usbfs
    // node, read() giving the device descriptor.
    let udev: Vec<&str> = s["udev"].lines().collect();
    assert_eq!(udev.len(), DEVICES, "{}", s["udev"]);
    for l in udev {
        let w: Vec<&str> = l.split(' ').collect();
        assert_eq!(w[1], "usb_device", "{l}");
        assert!(w[2].starts_with("/dev/bus/usb/0"), "{l}");
        assert_eq!(w[3], "yes", "the devnode's descriptor differs: {l}");
    }
}

#[test]
fn a_plugged_device_is_found_by_enumerating_again() {
    let tmp = tempfile::tempdir().unwrap();
    let enum_bin = compile_c_libusb("usb_enum", tmp.path());
    let script = format!(
        r#"{WAIT_SETTLED}
        settled {DEVICES}
        echo '== before'; "$ENUM"
        "$MONFS_BIN" ctl plug 1 3 mass-storage product="Plugged Reader" >/dev/null
        settled {after}
        echo '== plugged'; "$ENUM"; echo '== lsusb'; lsusb
        "$MONFS_BIN" ctl unplug 1 3 >/dev/null
        settled {DEVICES}
        echo '== unplugged'; "$ENUM"; echo '== lsusb after'; lsusb
        "#,
        after = DEVICES + 1
    );
    // The whole plug and unplug under inotify watches of the places a
    // program would watch: the kernel makes inotify events only for
    // changes made through its own VFS, never for a FUSE server's, and
    // monfs sends no uevent, so nothing is seen (docs: README).
    let (inner, watch) = (tmp.path().join("inner.sh"), tmp.path().join("watch.py"));
    std::fs::write(&inner, script).unwrap();
    std::fs::write(&watch, INOTIFY).unwrap();
    let o = run_script(
        &topology(),
        r#"python3 "$WATCH" sh "$INNER""#,
        &[("ENUM", &enum_bin), ("INNER", &inner), ("WATCH", &watch)],
    );
    let out = text(&o.stdout);
    let s = sections(&out);
    let lines = |k: &str| -> BTreeSet<String> { s[k].lines().map(String::from).collect() };
    let new: Vec<String> = lines("plugged")
        .difference(&lines("before"))
        .cloned()
        .collect();
    assert_eq!(new.len(), 1, "{out}");
    assert!(
        new[0].starts_with("001 ") && new[0].contains(" ports=3 "),
        "{out}"
    );
    assert!(s["lsusb"].contains("Plugged Reader"), "{out}");
    assert_eq!(lines("unplugged"), lines("before"), "{out}");
    assert!(!s["lsusb after"].contains("Plugged Reader"), "{out}");
    assert!(out.ends_with("inotify event bytes: 0\n"), "{out}");
}

/// Python: watch dev/bus/usb, dev/bus/usb/001 and sys/bus/usb/devices
/// with inotify for what a hot-plug watcher asks (IN_CREATE, IN_DELETE,
/// IN_MOVED_FROM, IN_MOVED_TO; the enumeration's own opens and reads would
/// show as IN_OPEN and IN_ACCESS), run the command given, then print how
/// many events came.
const INOTIFY: &str = r#"
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
for p in ["/dev/bus/usb", "/dev/bus/usb/001", "/sys/bus/usb/devices"]:
    assert libc.inotify_add_watch(fd, p.encode(), 0x100 | 0x200 | 0x40 | 0x80) >= 0, p
rc = subprocess.run(sys.argv[1:]).returncode
assert rc == 0, rc
n = 0
try:
    while True:
        b = os.read(fd, 65536)
        n += len(b)
except BlockingIOError:
    pass
sys.stdout.flush()
print("inotify event bytes: %d" % n)
"#;

/// `descriptors`, `speed`, `version`, `manufacturer`, `product` and
/// `serial` of a device built from a real device's dump are the bytes the
/// kernel gave for it; `uevent` and the links are the kernel's shape.
#[test]
fn attributes_of_a_dump_device_are_the_kernels_bytes() {
    let yaml = format!(
        "usb:\n  buses:\n    - bus: 1\n      controller: xhci\n      hub_poll_ms: 0\n      devices:\n        - port: 1\n          kind: descriptors\n          descriptors: {}\n          speed: high\n          manufacturer: QEMU\n          product: QEMU USB Keyboard\n          serial: 68284-0000:00:03.0-1\n",
        data("qemu-usb-kbd/descriptors").display()
    );
    let m = Mount::with_config(&yaml);
    let dev = m.path("sys/bus/usb/devices/1-1");
    let deadline = std::time::Instant::now() + HANG;
    while !dev.join("descriptors").exists() {
        assert!(std::time::Instant::now() < deadline, "no 1-1 in sys/");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for attr in ["descriptors", "speed", "version", "manufacturer", "product"] {
        assert_eq!(
            std::fs::read(dev.join(attr)).unwrap(),
            std::fs::read(data(&format!("qemu-usb-kbd/{attr}"))).unwrap(),
            "{attr}"
        );
    }
    // The dump's serial names qemu's controller; ours is the configured one.
    assert_eq!(
        std::fs::read_to_string(dev.join("serial")).unwrap(),
        "68284-0000:00:03.0-1\n"
    );
    let read = |p: &str| std::fs::read_to_string(dev.join(p)).unwrap();
    assert_eq!(read("idVendor"), "0627\n");
    assert_eq!(read("bNumInterfaces"), " 1\n");
    assert_eq!(read("bConfigurationValue"), "1\n");
    assert_eq!(read("bMaxPower"), "100mA\n");
    assert_eq!(read("devpath"), "1\n");
    assert_eq!(read("busnum"), "1\n");
    let devnum = read("devnum");
    assert_eq!(
        read("uevent"),
        format!(
            "MAJOR=189\nMINOR={}\nDEVNAME=bus/usb/001/{:03}\nDEVTYPE=usb_device\nDRIVER=usb\n\
             PRODUCT=627/1/0\nTYPE=0/0/0\nBUSNUM=001\nDEVNUM={:03}\n",
            num(&devnum) - 1,
            num(&devnum),
            num(&devnum)
        )
    );
    let link = |p: &Path| std::fs::read_link(p).unwrap().display().to_string();
    assert_eq!(link(&dev), "../../../devices/platform/monfs_hcd.1/usb1/1-1");
    assert_eq!(link(&dev.join("subsystem")), "../../../../../bus/usb");
    let intf = m.path("sys/bus/usb/devices/1-1:1.0");
    assert_eq!(
        std::fs::read_to_string(intf.join("modalias")).unwrap(),
        "usb:v0627p0001d0000dc00dsc00dp00ic03isc01ip01in00\n"
    );
    assert_eq!(
        std::fs::read_to_string(intf.join("ep_81/interval")).unwrap(),
        "8ms\n"
    );
    // The root hub: devpath 0, interface 1-0:1.0 bound to hub.
    let root = m.path("sys/bus/usb/devices/usb1");
    assert_eq!(
        std::fs::read_to_string(root.join("devpath")).unwrap(),
        "0\n"
    );
    assert_eq!(std::fs::read_to_string(root.join("devnum")).unwrap(), "1\n");
    assert!(link(&m.path("sys/bus/usb/devices/1-0:1.0/driver")).ends_with("/drivers/hub"));
}

/// Compile tests/c/NAME.c against Debian's libusb (libusb-1.0-0-dev).
fn compile_c_libusb(name: &str, out: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(format!("{name}.c"));
    let bin = out.join(name);
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-lusb-1.0")
        .output()
        .expect("run cc (install gcc)");
    assert!(
        o.status.success(),
        "compiling {} (needs libusb-1.0-0-dev): {}",
        src.display(),
        text(&o.stderr)
    );
    bin
}
