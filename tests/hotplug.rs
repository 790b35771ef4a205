//! Hot-plug that programs see inside `monfs run` (as root, and as a user
//! in the rootless leg): each `monfs ctl plug` and `unplug` is announced in
//! the command's network namespace as the kernel and udev announce it, the
//! kernel-format uevents on netlink group 1 in the kernel's order with the
//! kernel's own SEQNUM, udev's after its database entry is written; libusb's
//! hot-plug callback fires for each arrival and departure; nothing reaches
//! the host's namespace; `--host-network` keeps the host's network and
//! announces nothing.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::{compile_c_libs, monfs_bin, repo_path, stdout_ok};

/// One keyboard on bus 1 (four ports: the tests plug a mouse on port 3).
const CONFIG: &str =
    "usb:\n  buses:\n    - bus: 1\n      ports: 4\n      devices:\n        - {port: 1, kind: hid-keyboard}\n";

/// `monfs run --timing fast --config CONFIG ARGS -- CMD`, with the monfs
/// binary first on PATH (for `monfs ctl`).
fn monfs_run(dir: &Path, args: &[&str], cmd: &[&str]) -> Command {
    common::require_fuse();
    let cfg = dir.join("c.yaml");
    std::fs::write(&cfg, CONFIG).unwrap();
    let bin = monfs_bin();
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(&bin);
    c.args(["run", "--timing", "fast", "--config"])
        .arg(&cfg)
        .args(args)
        .arg("--")
        .args(cmd)
        .env("TMPDIR", dir)
        .env("PATH", path)
        .env_remove("XDG_RUNTIME_DIR")
        .stdin(Stdio::null());
    c
}

/// [`monfs_run`], which must succeed: its output.
fn run_ok(dir: &Path, args: &[&str], cmd: &[&str]) -> String {
    stdout_ok(&mut monfs_run(dir, args, cmd), "monfs run")
}

#[test]
fn a_plug_and_an_unplug_are_announced_as_the_kernel_and_udev_announce_them() {
    let td = tempfile::tempdir().unwrap();
    let out = run_ok(
        td.path(),
        &[],
        &["python3", &repo_path("tests/data/hotplug_listen.py")],
    );
    let lines: Vec<&str> = out.lines().collect();
    // The kernel's events: the action, the object, its driver.
    let kernel: Vec<String> = lines[..9]
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().0.to_string())
        .collect();
    assert_eq!(
        kernel,
        [
            "add 1-3 -",
            // its configuration has remote wakeup: power/wakeup appears
            "change 1-3 usb",
            "add 1-3:1.0 -",
            "bind 1-3:1.0 usbhid",
            "bind 1-3 usb",
            "unbind 1-3:1.0 -",
            "remove 1-3:1.0 -",
            "unbind 1-3 -",
            "remove 1-3 -"
        ],
        "{out}"
    );
    // SEQNUM grows from event to event: it is the kernel's own counter,
    // which every namespace's uevents share (another namespace's events
    // between two of ours take the numbers between).
    let seq: Vec<u64> = lines[..9]
        .iter()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse().unwrap())
        .collect();
    for w in seq.windows(2) {
        assert!(w[1] > w[0], "{seq:?}");
    }
    // libudev's monitor, filtered on usb/usb_device (its socket filter
    // checks the libudev header's hashes), hears the device's five.
    assert_eq!(
        lines[9..14],
        [
            "udev: add 1-3",
            "udev: change 1-3",
            "udev: bind 1-3",
            "udev: unbind 1-3",
            "udev: remove 1-3"
        ],
        "{out}"
    );
    // The database entry of the device while it was plugged.
    let db = &lines[14..];
    assert!(db[0].starts_with("I:"), "{out}");
    for want in [
        "E:ID_BUS=usb",
        "E:ID_VENDOR_ID=0627",
        "E:ID_MODEL_ID=0001",
        "E:ID_MODEL=QEMU_USB_Mouse",
        "E:ID_USB_INTERFACES=:030102:",
        // 71-seat.rules: a device of class 00 is for a seat.
        "E:ID_FOR_SEAT=usb-platform-monfs_hcd_1-usb-0_3",
        "G:seat",
        "Q:seat",
    ] {
        assert!(db.contains(&want), "{want} not in {db:?}");
    }
    // What udev's hwdb builtin adds, as systemd's own reader of this
    // machine's hwdb.bin gives it for the device's lookup string.
    let hw = Command::new("systemd-hwdb")
        .args(["query", "usb:v0627p0001:QEMU USB Mouse"])
        .output()
        .expect("systemd-hwdb (Debian's udev) runs");
    let hw = String::from_utf8(hw.stdout).unwrap();
    assert!(hw.contains("ID_VENDOR_FROM_DATABASE="), "{hw}");
    for l in hw.lines() {
        let want = format!("E:{l}");
        assert!(db.contains(&want.as_str()), "{want} not in {db:?}");
    }
    assert_eq!(db.last(), Some(&"V:1"));
}

#[test]
fn libusb_hotplug_callbacks_fire_for_every_plug_and_unplug() {
    let td = tempfile::tempdir().unwrap();
    let tool = compile_c_libs("libusb_hotplug", td.path(), &["-lusb-1.0"]);
    hotplug_rounds(td.path(), &tool);
}

/// The same program on libusb built with `--disable-udev`, whose backend
/// reads the kernel's group itself and takes only messages from port id
/// 0 (`os/linux_netlink.c`). `scripts/libusb-netlink` builds Debian 12's
/// libusb 1.0.26 so, sets `MONFS_LIBUSB_NETLINK` to the build's tree and
/// runs this test.
#[test]
#[ignore = "needs libusb built with --disable-udev: run by scripts/libusb-netlink"]
fn libusb_built_without_udev_hears_the_kernels_uevents() {
    let tree = std::env::var("MONFS_LIBUSB_NETLINK")
        .expect("MONFS_LIBUSB_NETLINK: the tree of a libusb built with --disable-udev");
    let tree = Path::new(&tree);
    let td = tempfile::tempdir().unwrap();
    let inc = td.path().join("include/libusb-1.0");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::copy(tree.join("libusb/libusb.h"), inc.join("libusb.h")).unwrap();
    let lib = tree.join("libusb/.libs/libusb-1.0.a");
    let nm = Command::new("nm").arg(&lib).output().expect("nm runs");
    let syms = String::from_utf8_lossy(&nm.stdout);
    assert!(
        syms.contains("linux_netlink_start_event_monitor") && !syms.contains("udev_monitor"),
        "{} is not a netlink build",
        lib.display()
    );
    let flags = [format!("-I{}", td.path().join("include").display())];
    let libs = [lib.to_str().unwrap(), "-lpthread"];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let tool = common::compile_c_full("libusb_hotplug", td.path(), "hotplug_nl", &flags, &libs);
    hotplug_rounds(td.path(), &tool);
}

/// Ten rounds of tests/c/libusb_hotplug.c inside `monfs run`: the arrival
/// (a new address each time, as the kernel gives), the device in the same
/// context's list and opened, the departure; none missed, none doubled.
fn hotplug_rounds(dir: &Path, tool: &Path) {
    let out = run_ok(dir, &[], &[tool.to_str().unwrap(), "10"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "has_hotplug 1");
    assert_eq!(lines.len(), 1 + 10 * 3, "{out}");
    for (i, r) in lines[1..].chunks(3).enumerate() {
        let addr = 3 + i;
        assert_eq!(r[0], format!("arrived 1:{addr} 0627:0001"), "{out}");
        assert_eq!(r[1], "listed 1 opened 1", "{out}");
        assert_eq!(r[2], format!("left 1:{addr}"), "{out}");
    }
}

/// A listener on the host's kernel group while a run plugs and unplugs:
/// none of monfs's uevents (`monfs_hcd` in their path) reach it.
#[test]
fn nothing_reaches_the_hosts_namespace() {
    use std::os::fd::AsRawFd;
    let td = tempfile::tempdir().unwrap();
    // SAFETY: socket(2)/bind(2) of a netlink socket on group 1.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 15) };
    assert!(fd >= 0);
    // SAFETY: fd is the new descriptor.
    let sock = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: sockaddr_nl is plain data.
    let mut a: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    a.nl_family = libc::AF_NETLINK as u16;
    a.nl_groups = 1;
    // SAFETY: bind with a sockaddr_nl of its size.
    let r = unsafe {
        libc::bind(
            sock.as_raw_fd(),
            &a as *const libc::sockaddr_nl as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    assert_eq!(r, 0);
    let out = run_ok(
        td.path(),
        &[],
        &["python3", &repo_path("tests/data/hotplug_listen.py")],
    );
    assert!(out.contains("remove 1-3"), "{out}");
    // Everything the host's group carried meanwhile (the run's events
    // came and went before it ended).
    let mut buf = vec![0u8; 8192];
    loop {
        // SAFETY: a non-blocking recv into buf.
        let n = unsafe {
            libc::recv(
                sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            break;
        }
        let m = String::from_utf8_lossy(&buf[..n as usize]);
        assert!(!m.contains("monfs_hcd"), "the host heard {m:?}");
    }
}

#[test]
fn host_network_keeps_the_hosts_network_and_announces_nothing() {
    let td = tempfile::tempdir().unwrap();
    let o = monfs_run(
        td.path(),
        &["--host-network"],
        &[
            "sh",
            "-c",
            "readlink /proc/self/ns/net; ls /run/udev/data 2>/dev/null | grep -c c189 || true",
        ],
    )
    .output()
    .unwrap();
    assert!(o.status.success(), "{o:?}");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let host = std::fs::read_link("/proc/self/ns/net").unwrap();
    let mut l = out.lines();
    assert_eq!(l.next(), Some(host.to_str().unwrap()));
    assert_eq!(l.next(), Some("0"), "{out}");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--host-network"));
    // Without it the command's namespace is another one.
    let out = run_ok(td.path(), &[], &["readlink", "/proc/self/ns/net"]);
    assert_ne!(out.trim(), host.to_str().unwrap());
}

#[test]
fn pyudev_and_gusb_hear_the_plug_and_the_unplug() {
    let td = tempfile::tempdir().unwrap();
    // Debian's interpreter, where python3-pyudev and GUsb's typelib are.
    let out = run_ok(
        td.path(),
        &[],
        &[
            "/usr/bin/python3",
            &repo_path("tests/data/hotplug_clients.py"),
        ],
    );
    let lines: Vec<&str> = out.lines().collect();
    let pyudev: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("pyudev"))
        .collect();
    assert_eq!(
        pyudev,
        [
            "pyudev add 1-3 QEMU_USB_Mouse",
            "pyudev change 1-3 QEMU_USB_Mouse",
            "pyudev bind 1-3 QEMU_USB_Mouse",
            // an unplug's events: udevd's usb_id finds the device gone
            "pyudev unbind 1-3 None",
            "pyudev remove 1-3 None"
        ],
        "{out}"
    );
    for want in [
        "gusb added 0627:0001 1:3",
        "gusb removed 1:3",
        "from_sys_path 0627:0001 initialized=True",
    ] {
        assert!(lines.contains(&want), "{want} not in:\n{out}");
    }
    assert_eq!(
        lines.iter().filter(|l| l.starts_with("gusb")).count(),
        2,
        "{out}"
    );
}

/// A device of several interfaces that one driver takes (qemu's
/// usb-audio: an AudioControl and an AudioStreaming interface, both
/// snd-usb-audio's): each interface is added after the one before it is
/// bound, as `usb_set_configuration` adds and probes them one by one; the
/// streaming interface, which snd-usb-audio claimed from its probe of the
/// control interface, is added with its driver (as Linux 6.12 does in
/// `scripts/kernel-vm`).
#[test]
fn an_audio_devices_interfaces_are_added_and_bound_one_by_one() {
    let td = tempfile::tempdir().unwrap();
    let out = run_ok(
        td.path(),
        &[],
        &[
            "python3",
            &repo_path("tests/data/interface_uevents.py"),
            "1",
            "3",
            "audio",
        ],
    );
    assert_eq!(
        out,
        "add 1-3 -\nadd 1-3:1.0 -\nbind 1-3:1.0 snd-usb-audio\nadd 1-3:1.1 snd-usb-audio\n\
         bind 1-3:1.1 snd-usb-audio\nbind 1-3 usb\n"
    );
}

/// `monfs ctl plug --wait` returns once the device is there and its
/// uevents are out (its database entry written); `unplug --wait` once the
/// core let it go and its entry is removed (the keyboard at 1-1 keeps its
/// HID device's and hidraw node's).
#[test]
fn plug_and_unplug_wait_until_the_device_is_announced_and_gone() {
    let td = tempfile::tempdir().unwrap();
    let out = run_ok(
        td.path(),
        &[],
        &[
            "sh",
            "-c",
            "monfs ctl plug --wait 1 3 hid-mouse; grep ^E:ID_MODEL= /run/udev/data/c189:2; \
             ls /sys/bus/usb/devices/1-3:1.0/driver >/dev/null && echo bound; \
             monfs ctl unplug --wait 1 3; echo; ls /run/udev/data; echo; ls /sys/bus/usb/devices | grep -c ^1-3 || true; \
             cut -d: -f1 /sys/class/hidraw/hidraw0/dev; cut -d: -f1 /sys/class/input/event0/dev",
        ],
    );
    // hidraw's and evdev's majors: 244 and 13, or their character
    // devices' where root has CUSE.
    let mut parts = out.split("\n\n");
    let (head, data, tail) = (
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    let tail: Vec<&str> = tail.lines().collect();
    let (major, evdev) = (tail[1], tail[2]);
    assert_eq!(
        head,
        "ok plugged HidMouse on bus 1 port 3\nok bus 1 port 3 present\nE:ID_MODEL=QEMU_USB_Mouse\n\
         bound\nok unplugged bus 1 port 3\nok bus 1 port 3 gone"
    );
    assert_eq!(tail[0], "0", "{out}");
    // The keyboard at 1-1 keeps its HID device's, hidraw node's, input
    // device's, LEDs' and evdev node's entries.
    let mut want: Vec<String> = [
        "+hid:0003:0627:0001.0001",
        "+input:input0",
        "+leds:input0::capslock",
        "+leds:input0::compose",
        "+leds:input0::kana",
        "+leds:input0::numlock",
        "+leds:input0::scrolllock",
        "+usb:1-0:1.0",
        "+usb:1-1:1.0",
        "c189:0",
        "c189:1",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([format!("c{major}:0"), format!("c{evdev}:64")])
    .collect();
    want.sort();
    assert_eq!(data.lines().collect::<Vec<_>>(), want, "{out}");
}

/// libudev finds a device through its number (`/sys/dev/char/189:N`, as
/// the kernel links it) and so by tag (`/run/udev/tags/seat/c189:N`):
/// pyudev's enumeration by tag lists the plugged device, and neither it nor
/// the link is left after the unplug.
#[test]
fn libudev_enumerates_by_tag_through_the_device_numbers() {
    let td = tempfile::tempdir().unwrap();
    let seat = "/usr/bin/python3 -c 'import pyudev; \
                print(sorted(d.sys_name for d in pyudev.Context().list_devices(tag=\"seat\")))'";
    let out = run_ok(
        td.path(),
        &[],
        &[
            "sh",
            "-c",
            &format!(
                "monfs ctl plug --wait 1 3 hid-mouse >/dev/null; readlink /sys/dev/char/189:2; {seat}; \
                 monfs ctl unplug --wait 1 3 >/dev/null; ls /sys/dev/char | sort; {seat}; \
                 cat /sys/class/hidraw/hidraw0/dev /sys/class/input/event0/dev"
            ),
        ],
    );
    let (out, evdev) = out.trim_end().rsplit_once('\n').unwrap();
    let (out, hidraw) = out.rsplit_once('\n').unwrap();
    let mut chars = [
        "189:0".to_string(),
        "189:1".into(),
        hidraw.into(),
        evdev.into(),
    ];
    chars.sort();
    // The keyboard's input device and LEDs are the seat's too (71-seat.rules).
    let kbd = "'input0', 'input0::capslock', 'input0::compose', 'input0::kana', \
               'input0::numlock', 'input0::scrolllock'";
    assert_eq!(
        format!("{out}\n"),
        format!(
            "../../devices/platform/monfs_hcd.1/usb1/1-3\n['1-1', '1-3', {kbd}, 'input1', 'usb1']\n{}\n\
             ['1-1', {kbd}, 'usb1']\n",
            chars.join("\n")
        )
    );
}
