//! What systemd-udevd makes of a USB uevent on Debian, for the programs of
//! `monfs run`: the properties its rules give a USB device and interface
//! (`60-persistent-*`, the `usb_id` builtin: `ID_VENDOR`, `ID_MODEL`,
//! `ID_SERIAL`, `ID_USB_INTERFACES`, ...), the database entry
//! (`/run/udev/data/c189:N`, `+usb:B-P:C.I`) libudev reads, and the message
//! it rebroadcasts on netlink group 2 in the "libudev" format
//! (`sd-device/device-monitor.c`: a header with MurmurHash2 hashes of the
//! subsystem and devtype and a bloom filter of the tags, which libudev
//! subscribers' socket filters test, then the properties).
//!
//! Plain functions of a [`Uevent`] and the device it is about; the sockets
//! and files are [`announce`]'s.

pub mod announce;
pub mod hwdb;

use crate::usbcore::device::UsbDevice;
use crate::usbcore::sysfs;
use crate::usbcore::uevent::{Action, Uevent};
use hwdb::Hwdb;

/// `UDEV_MONITOR_MAGIC`, sent in network order.
const MAGIC: u32 = 0xfeed_cafe;
/// The size of `struct monitor_netlink_header`.
const HEADER_SIZE: u32 = 40;

/// MurmurHash2 of `data` with seed 0 (systemd's `murmur_hash2`, the hash
/// libudev's socket filters compare).
pub fn murmur_hash2(data: &[u8]) -> u32 {
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let r = chunks.remainder();
    if r.len() >= 3 {
        h ^= u32::from(r[2]) << 16;
    }
    if r.len() >= 2 {
        h ^= u32::from(r[1]) << 8;
    }
    if !r.is_empty() {
        h ^= u32::from(r[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h
}

/// The bloom filter bits of one tag (`string_bloom64`).
fn bloom64(tag: &str) -> u64 {
    let h = murmur_hash2(tag.as_bytes());
    [0, 6, 12, 18]
        .iter()
        .fold(0u64, |b, s| b | 1u64 << ((h >> s) & 63))
}

/// udev's `*_ENC` encoding of a string (`encode_devnode_name`): bytes
/// outside `[0-9A-Za-z#+-.:=@_]` and valid UTF-8 as `\xNN`.
fn encode(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "#+-.:=@_".contains(c) || !c.is_ascii() {
            out.push(c);
        } else {
            out.push_str(&format!("\\x{:02x}", c as u32));
        }
    }
    out
}

/// The usb_id builtin's cleaning of a string for `ID_VENDOR`/`ID_MODEL`/
/// `ID_SERIAL` (`udev_replace_whitespace` then `udev_replace_chars`):
/// surrounding blanks dropped, inner runs of blanks one `_`, anything
/// outside the allowed characters `_`.
fn clean(s: &str) -> String {
    let mut out = String::new();
    let mut blank = false;
    for c in s.trim().chars() {
        if c.is_whitespace() {
            blank = true;
            continue;
        }
        if blank {
            out.push('_');
            blank = false;
        }
        if c.is_ascii_alphanumeric() || "#+-.:=@_".contains(c) {
            out.push(c);
        } else {
            out.push('_');
        }
    }
    out
}

/// The `ID_USB_INTERFACES` value: `:CCSSPP:` for each distinct interface
/// class triple.
fn usb_interfaces(d: &UsbDevice) -> String {
    let mut seen: Vec<String> = Vec::new();
    for i in &d.interfaces {
        let t = format!("{:02x}{:02x}{:02x}", i.class, i.subclass, i.protocol);
        if !seen.contains(&t) {
            seen.push(t);
        }
    }
    format!(":{}:", seen.join(":"))
}

/// `path_id`'s `ID_PATH_TAG` of `path`: letters, digits and `-` kept,
/// each other run of characters one `_`, none leading or trailing.
fn path_tag(path: &str) -> String {
    let mut t = String::with_capacity(path.len());
    for c in path.chars() {
        if c.is_ascii_alphanumeric() || c == '-' {
            t.push(c);
        } else if !t.is_empty() && !t.ends_with('_') {
            t.push('_');
        }
    }
    while t.ends_with('_') {
        t.pop();
    }
    t
}

/// The path `path_id` gives a device (`ID_PATH`): its controller's
/// platform device, then `usb-0:PORTS`.
fn id_path(d: &UsbDevice, interface: Option<u8>) -> String {
    let ports = d.devpath();
    let mut p = format!(
        "platform-{}-usb-0:{}",
        crate::usbcore::sysfs::controller_name(d.busnum),
        ports
    );
    if let Some(i) = interface {
        p.push_str(&format!(":{}.{}", d.active_config, i));
    }
    p
}

/// The properties udev adds to a USB device's or interface's event (what
/// `udevadm info` and a libudev monitor show after the kernel's), in the
/// order udev's rules set them; `hwdb`'s properties (the `hwdb` builtin's)
/// when there is a database.
pub fn udev_properties(ev: &Uevent, d: &UsbDevice, hwdb: Option<&Hwdb>) -> Vec<(String, String)> {
    match ev.get("SUBSYSTEM") {
        Some("usb") | None => {}
        // The HID device gets nothing of udev's; its hidraw node what the
        // hwdb has for the USB device (the `hwdb` builtin finds no entry
        // for the HID modalias and walks up to the interface's), but not
        // at its removal (Debian's 6.12 and udev 252 in kernel-vm).
        Some("hidraw") if ev.action != Action::Remove && !ev.gone => {
            return hwdb
                .map(|h| hwdb_properties(h, d, ev.interface))
                .unwrap_or_default();
        }
        // An input device, its evdev node and its LEDs: their rules (not
        // at their removal: udev sends the database's entry then).
        Some("input" | "leds") if ev.action != Action::Remove => {
            return input_properties(ev, d);
        }
        // A USB serial port: 60-serial.rules (not at its removal).
        Some("tty") if ev.action != Action::Remove && !ev.gone => {
            return tty_properties(ev, d);
        }
        Some(_) => return Vec::new(),
    }
    let mut p: Vec<(String, String)> = Vec::new();
    // The usb_id builtin runs for a usb_device only (`50-udev-default.rules`:
    // `SUBSYSTEM=="usb", ENV{DEVTYPE}=="usb_device", IMPORT{builtin}="usb_id"`;
    // the other rules that import it match other subsystems): an
    // interface's event gets the hwdb's properties and its path only.
    if ev.interface.is_none() {
        p.extend(usb_id(d, None));
    }
    let mut add = |k: &str, v: String| p.push((k.to_string(), v));
    for (k, v) in hwdb
        .map(|h| hwdb_properties(h, d, ev.interface))
        .unwrap_or_default()
    {
        add(&k, v);
    }
    let path = id_path(d, ev.interface);
    let tag = path_tag(&path);
    add("ID_PATH", path);
    add("ID_PATH_TAG", tag.clone());
    let tags = tags(&p, ev);
    if ev.gone && !ev.after_bind {
        // An unplug's events reach udevd's workers after the device left
        // sysfs: usb_id and the seat rules read attributes that are gone,
        // and an unbind has no MODALIAS for the hwdb; path_id works from
        // the path. The tags are the database's (`TAGS` is sticky), none
        // set by this event (no `CURRENT_TAGS`). The `unbind` writes that
        // to the database, which its `remove` then carries; an interface
        // removed with no `unbind` before (`after_bind`) carries its
        // `bind`'s entry whole.
        p.retain(|(k, _)| k == "ID_PATH" || k == "ID_PATH_TAG");
        if !tags.is_empty() {
            p.push(("TAGS".into(), format!(":{}:", tags.join(":"))));
        }
        return p;
    }
    // A recording's properties (`udev_properties:`): a key udev's rules
    // set takes the recorded value, the others come after them.
    if ev.interface.is_none() {
        for (k, v) in &d.recorded_properties {
            match p.iter_mut().find(|(pk, _)| pk == k) {
                Some(e) => e.1 = v.clone(),
                None => p.push((k.clone(), v.clone())),
            }
        }
    }
    if tags.contains(&"seat") {
        p.push(("ID_FOR_SEAT".into(), format!("usb-{tag}")));
    }
    if !tags.is_empty() {
        let t = format!(":{}:", tags.join(":"));
        p.push(("TAGS".into(), t.clone()));
        p.push(("CURRENT_TAGS".into(), t));
    }
    p
}

/// The `usb_id` builtin's properties of USB device `d`, seen from the
/// device itself or (`iface`) from a device below one of its interfaces
/// (an input device's): the interface's type, number and driver then
/// come too, in systemd 252's order, each value once as `ID_` and once as
/// `ID_USB_`.
fn usb_id(
    d: &UsbDevice,
    iface: Option<&crate::usbcore::device::Interface>,
) -> Vec<(String, String)> {
    let mut p: Vec<(String, String)> = Vec::new();
    let mut add = |k: &str, v: String| p.push((k.to_string(), v));
    let vendor = d.string(d.descriptor[14]).map(str::to_string);
    let product = d.string(d.descriptor[15]).map(str::to_string);
    let serial = d.string(d.descriptor[16]).map(str::to_string);
    let vid = format!("{:04x}", d.vendor_id());
    let pid = format!("{:04x}", d.product_id());
    let vendor_s = vendor
        .clone()
        .map(|v| clean(&v))
        .unwrap_or_else(|| vid.clone());
    let model_s = product
        .clone()
        .map(|v| clean(&v))
        .unwrap_or_else(|| pid.clone());
    let rev = format!(
        "{:04x}",
        u16::from_le_bytes([d.descriptor[12], d.descriptor[13]])
    );
    let serial_s = serial.as_deref().map(clean);
    let id_serial = match &serial_s {
        Some(s) => format!("{vendor_s}_{model_s}_{s}"),
        None => format!("{vendor_s}_{model_s}"),
    };
    let model_enc = encode(product.as_deref().unwrap_or(&pid));
    let vendor_enc = encode(vendor.as_deref().unwrap_or(&vid));
    let ty = iface.map(|i| iface_type(i.class, i.subclass));
    add("ID_BUS", "usb".into());
    // The same values again with an ID_USB_ prefix: systemd 252's usb_id
    // sets both, in this order (as udevd on Debian 12 sends them).
    for prefix in ["ID_", "ID_USB_"] {
        add(&format!("{prefix}MODEL"), model_s.clone());
        add(&format!("{prefix}MODEL_ENC"), model_enc.clone());
        add(&format!("{prefix}MODEL_ID"), pid.clone());
        add(&format!("{prefix}SERIAL"), id_serial.clone());
        if let Some(s) = &serial_s {
            add(&format!("{prefix}SERIAL_SHORT"), s.clone());
        }
        add(&format!("{prefix}VENDOR"), vendor_s.clone());
        add(&format!("{prefix}VENDOR_ENC"), vendor_enc.clone());
        add(&format!("{prefix}VENDOR_ID"), vid.clone());
        add(&format!("{prefix}REVISION"), rev.clone());
        if let Some(t) = ty {
            add(&format!("{prefix}TYPE"), t.into());
        }
    }
    add("ID_USB_INTERFACES", usb_interfaces(d));
    if let Some(i) = iface {
        add("ID_USB_INTERFACE_NUM", format!("{:02x}", i.number));
        if let Some(drv) = &i.driver {
            add("ID_USB_DRIVER", drv.clone());
        }
    }
    p
}

/// usb_id's `ID_TYPE` of an interface class (`set_usb_iftype`).
fn iface_type(class: u8, subclass: u8) -> &'static str {
    match class {
        1 => "audio",
        3 => "hid",
        5 => "physical",
        6 => "media",
        7 => "printer",
        8 => match subclass {
            2 | 5 => "cd",
            4 => "floppy",
            6 => "disk",
            _ => "generic",
        },
        9 => "hub",
        0x0b => "smartcard",
        0x0d => "security",
        0x0e => "video",
        _ => "generic",
    }
}

/// udev's properties of an input device or its evdev node
/// (`60-input-id.rules`, `60-persistent-input.rules`, `71-seat.rules`,
/// `70-power-switch.rules`), and of an input LED (`71-seat.rules`): what
/// `input_id` found ([`Uevent::udev`]), `usb_id` from the interface, the
/// path, the evdev node's `/dev/input/by-id` and `by-path` links, and the
/// seat or power-switch tags.
fn input_properties(ev: &Uevent, d: &UsbDevice) -> Vec<(String, String)> {
    let iface = ev
        .interface
        .and_then(|n| d.interfaces.iter().find(|i| i.number == n));
    let path = id_path(d, ev.interface);
    let tag = path_tag(&path);
    let subsystem = ev.get("SUBSYSTEM").unwrap_or("");
    let mut p: Vec<(String, String)> = Vec::new();
    let seat = |p: &mut Vec<(String, String)>| {
        p.push(("ID_FOR_SEAT".into(), format!("{subsystem}-{tag}")));
        p.push(("TAGS".into(), ":seat:".into()));
        p.push(("CURRENT_TAGS".into(), ":seat:".into()));
    };
    if subsystem == "leds" {
        p.push(("ID_PATH".into(), path));
        p.push(("ID_PATH_TAG".into(), tag.clone()));
        seat(&mut p);
        return p;
    }
    let has = |k: &str| ev.udev.iter().any(|(x, _)| x == k);
    // 60-persistent-input.rules: the class of the links' names.
    let class = if has("ID_INPUT_JOYSTICK") {
        Some("joystick")
    } else if has("ID_INPUT_TABLET") || has("ID_INPUT_TOUCHPAD") || has("ID_INPUT_MOUSE") {
        Some("mouse")
    } else if has("ID_INPUT_KEYBOARD") {
        Some("kbd")
    } else {
        None
    };
    p.extend(ev.udev.iter().cloned());
    p.extend(usb_id(d, iface));
    if let Some(c) = class {
        p.push((".INPUT_CLASS".into(), c.into()));
    }
    p.push(("ID_PATH".into(), path.clone()));
    p.push(("ID_PATH_TAG".into(), tag.clone()));
    let Some(node) = ev.get("DEVNAME") else {
        seat(&mut p);
        return p;
    };
    let kind = node.rsplit('/').next().unwrap_or("");
    let serial = p
        .iter()
        .find(|(k, _)| k == "ID_SERIAL")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| "noserial".into());
    let ifnum = iface.map_or(0, |i| i.number);
    let (by_id, by_path) = match (class, ifnum) {
        (Some(c), 0) => (
            format!("usb-{serial}-{kind_}-{c}", kind_ = "event"),
            format!("{path}-event-{c}"),
        ),
        (Some(c), n) => (
            format!("usb-{serial}-if{n:02x}-event-{c}"),
            format!("{path}-event-{c}"),
        ),
        (None, n) => (
            format!("usb-{serial}-event-if{n:02x}"),
            format!("{path}-event"),
        ),
    };
    if kind.starts_with("event") {
        p.push((
            "DEVLINKS".into(),
            format!("/dev/input/by-id/{by_id} /dev/input/by-path/{by_path}"),
        ));
        if has("ID_INPUT_KEY") || has("ID_INPUT_SWITCH") {
            p.push(("TAGS".into(), ":power-switch:".into()));
            p.push(("CURRENT_TAGS".into(), ":power-switch:".into()));
        }
    }
    p
}

/// udev's properties of a USB serial port (`60-serial.rules`): path_id's
/// path, usb_id's properties of its interface, and the
/// `/dev/serial/by-path` and `by-id` links.
fn tty_properties(ev: &Uevent, d: &UsbDevice) -> Vec<(String, String)> {
    let iface = ev
        .interface
        .and_then(|n| d.interfaces.iter().find(|i| i.number == n));
    let path = id_path(d, ev.interface);
    let mut p: Vec<(String, String)> = vec![
        ("ID_PATH".into(), path.clone()),
        ("ID_PATH_TAG".into(), path_tag(&path)),
    ];
    p.extend(usb_id(d, iface));
    let get = |p: &[(String, String)], k: &str| {
        p.iter()
            .find(|(x, _)| x == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    // A usb-serial port's `.ID_PORT` (its port device's `port_number`:
    // one port per interface, 0) ends both links.
    let port = if ev.get("DEVNAME").is_some_and(|n| n.starts_with("ttyUSB")) {
        "-port0"
    } else {
        ""
    };
    let mut links = vec![format!("/dev/serial/by-path/{path}{port}")];
    let (serial, num) = (get(&p, "ID_SERIAL"), get(&p, "ID_USB_INTERFACE_NUM"));
    if !serial.is_empty() && !num.is_empty() {
        links.push(format!(
            "/dev/serial/by-id/{}-{serial}-if{num}{port}",
            get(&p, "ID_BUS")
        ));
    }
    p.push(("DEVLINKS".into(), links.join(" ")));
    p
}

/// The tags Debian's rules give a USB device (`70-uaccess.rules`,
/// `71-seat.rules`), sorted (udev keeps them in a hash set, so their order
/// is not one to rely on): `uaccess` for a device node whose interfaces or
/// hwdb entry name it as one for the logged-in user (a PTP camera, a
/// software radio, a hardware wallet, ...), `seat` for those and for every
/// device of class 00 (classes given per interface) or 09 (hub). `props` are the
/// event's udev properties so far. An unplug's events carry the tags the
/// database held, which are these.
fn tags(props: &[(String, String)], ev: &Uevent) -> Vec<&'static str> {
    let get = |k: &str| props.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
    let set = |k: &str| get(k).is_some_and(|v| !v.is_empty());
    let one = |k: &str| get(k) == Some("1");
    if ev.interface.is_some() {
        return Vec::new();
    }
    let uaccess = get("ID_USB_INTERFACES").is_some_and(|v| v.contains(":060101:"))
        || [
            "ID_SMARTCARD_READER",
            "ID_SECURITY_TOKEN",
            "ID_PDA",
            "COLOR_MEASUREMENT_DEVICE",
            "DDC_DEVICE",
            "ID_MEDIA_PLAYER",
            "ID_SOFTWARE_RADIO",
            "ID_MAKER_TOOL",
            "ID_SIGNAL_ANALYZER",
        ]
        .iter()
        .any(|k| set(k))
        || [
            "ID_REMOTE_CONTROL",
            "ID_AV_PRODUCTION_CONTROLLER",
            "ID_AV_LIGHTS",
            "ID_HARDWARE_WALLET",
        ]
        .iter()
        .any(|k| one(k));
    let class = ev.device.descriptor[4];
    let mut t = Vec::new();
    if uaccess || class == 0x00 || class == 0x09 {
        t.push("seat");
    }
    if uaccess {
        t.push("uaccess");
    }
    t
}

/// What udev's `hwdb` builtin adds (`50-udev-default.rules`): a device is
/// looked up as `usb:vVVVVpPPPP:PRODUCT` (its `idVendor`, `idProduct` and
/// `product` attributes); an interface by its modalias first and, when
/// that gives nothing, as its device. An interface keeps what it was
/// given at its `add` in later events (udev's database), so its modalias is
/// the interface's, not the event's (an `unbind` carries none).
pub fn hwdb_properties(h: &Hwdb, d: &UsbDevice, interface: Option<u8>) -> Vec<(String, String)> {
    if let Some(i) = interface.and_then(|n| d.interfaces.iter().find(|x| x.number == n)) {
        let found = h.lookup(&sysfs::modalias(d, i));
        if !found.is_empty() {
            return found;
        }
    }
    let product = d.string(d.descriptor[15]).unwrap_or("");
    h.lookup(&format!(
        "usb:v{:04X}p{:04X}:{product}",
        d.vendor_id(),
        d.product_id()
    ))
}

/// Every property of the event as udev sends it: the kernel's (with
/// `DEVNAME` under `/dev`, and the kernel's `SEQNUM`), then udev's (at a
/// `remove` of an input device or LED, what its database entry `db`
/// held), the device number, the links and tags.
pub fn all_properties(
    ev: &Uevent,
    seqnum: u64,
    usec_initialized: u64,
    hwdb: Option<&Hwdb>,
    db: &str,
) -> Vec<(String, String)> {
    let mut p: Vec<(String, String)> = ev
        .env
        .iter()
        .map(|(k, v)| {
            if k == "DEVNAME" && !v.starts_with('/') {
                (k.clone(), format!("/dev/{v}"))
            } else {
                (k.clone(), v.clone())
            }
        })
        .collect();
    // udevd sets the device number last, after its rules' properties
    // and before the links and tags (as Debian's udev 252 sends them).
    let number: Vec<(String, String)> = p
        .iter()
        .filter(|(k, _)| k == "MAJOR" || k == "MINOR")
        .cloned()
        .collect();
    p.retain(|(k, _)| k != "MAJOR" && k != "MINOR");
    p.push(("SEQNUM".into(), seqnum.to_string()));
    p.push(("USEC_INITIALIZED".into(), usec_initialized.to_string()));
    let mut rules = udev_properties(ev, &ev.device, hwdb);
    rules.extend(removed_properties(ev, db));
    let last = |k: &str| ["DEVLINKS", "TAGS", "CURRENT_TAGS"].contains(&k);
    p.extend(rules.iter().filter(|(k, _)| !last(k)).cloned());
    p.extend(number);
    p.extend(rules.into_iter().filter(|(k, _)| last(k)));
    p
}

/// The database file of the event's device (`cMAJOR:MINOR` for a device
/// with a node, `c189:MINOR` for a usb_device; `+SUBSYSTEM:NAME` for the
/// others, `+usb:NAME` for an interface), relative to `/run/udev/data`.
pub fn db_name(ev: &Uevent) -> String {
    match (ev.get("MAJOR"), ev.get("MINOR")) {
        (Some(ma), Some(mi)) => format!("c{ma}:{mi}"),
        _ => format!(
            "+{}:{}",
            ev.get("SUBSYSTEM").unwrap_or("usb"),
            ev.devpath.rsplit('/').next().unwrap_or("")
        ),
    }
}

/// The database entry udev writes (`device_update_db`): the time it was
/// initialised, udev's properties (`E:`), the tags (`G:`, and `Q:` for the
/// current ones), its version line.
pub fn db_text(props: &[(String, String)], usec_initialized: u64, kernel: &Uevent) -> String {
    let mut s = String::new();
    for l in devlinks(props) {
        s.push_str(&format!("S:{l}\n"));
    }
    s.push_str(&format!("I:{usec_initialized}\n"));
    for (k, v) in props {
        let own = [
            "SEQNUM",
            "USEC_INITIALIZED",
            "TAGS",
            "CURRENT_TAGS",
            "DEVLINKS",
        ]
        .contains(&k.as_str())
            // (udev keeps `.`-properties out of its database)
            || k.starts_with('.');
        if kernel.get(k).is_none() && !own {
            s.push_str(&format!("E:{k}={v}\n"));
        }
    }
    for (prefix, key) in [("G", "TAGS"), ("Q", "CURRENT_TAGS")] {
        for t in tags_of(props, key) {
            s.push_str(&format!("{prefix}:{t}\n"));
        }
    }
    s.push_str("V:1\n");
    s
}

/// The event's links below `/dev` (its `DEVLINKS`, without `/dev/`).
pub fn devlinks(props: &[(String, String)]) -> Vec<&str> {
    props
        .iter()
        .find(|(k, _)| k == "DEVLINKS")
        .map(|(_, v)| {
            v.split(' ')
                .filter_map(|l| l.strip_prefix("/dev/"))
                .collect()
        })
        .unwrap_or_default()
}

/// The event's tags (its `TAGS` property, split).
pub fn tag_list(props: &[(String, String)]) -> Vec<&str> {
    tags_of(props, "TAGS")
}

/// The tags of property `key` (`TAGS` or `CURRENT_TAGS`), split.
fn tags_of<'a>(props: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    props
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.split(':').filter(|t| !t.is_empty()).collect())
        .unwrap_or_default()
}

/// The message udev sends on group 2: the libudev header, then the
/// properties, each `KEY=VALUE` NUL-terminated.
pub fn udev_message(props: &[(String, String)]) -> Vec<u8> {
    let get = |k: &str| props.iter().find(|(x, _)| x == k).map(|(_, v)| v.as_str());
    let mut body = Vec::new();
    for (k, v) in props {
        body.extend_from_slice(k.as_bytes());
        body.push(b'=');
        body.extend_from_slice(v.as_bytes());
        body.push(0);
    }
    let sub = get("SUBSYSTEM").map_or(0, |s| murmur_hash2(s.as_bytes()));
    let devtype = get("DEVTYPE").map_or(0, |s| murmur_hash2(s.as_bytes()));
    let bloom = tag_list(props).iter().fold(0u64, |b, t| b | bloom64(t));
    let mut out = Vec::with_capacity(HEADER_SIZE as usize + body.len());
    out.extend_from_slice(b"libudev\0");
    out.extend_from_slice(&MAGIC.to_be_bytes());
    out.extend_from_slice(&HEADER_SIZE.to_ne_bytes());
    out.extend_from_slice(&HEADER_SIZE.to_ne_bytes());
    out.extend_from_slice(&(body.len() as u32).to_ne_bytes());
    out.extend_from_slice(&sub.to_be_bytes());
    out.extend_from_slice(&devtype.to_be_bytes());
    out.extend_from_slice(&((bloom >> 32) as u32).to_be_bytes());
    out.extend_from_slice(&(bloom as u32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// The properties udev sends with the `remove` of an input device, its
/// evdev node, an LED or a tty: what its database entry `db` holds (`E:`, the
/// links of `S:`, the tags of `G:` and `Q:`), as udevd reads it back.
pub fn removed_properties(ev: &Uevent, db: &str) -> Vec<(String, String)> {
    if ev.action != Action::Remove || !matches!(ev.get("SUBSYSTEM"), Some("input" | "leds" | "tty"))
    {
        return Vec::new();
    }
    let mut p: Vec<(String, String)> = db
        .lines()
        .filter_map(|l| l.strip_prefix("E:")?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let list =
        |prefix: &str| -> Vec<&str> { db.lines().filter_map(|l| l.strip_prefix(prefix)).collect() };
    let links = list("S:");
    if !links.is_empty() {
        let l: Vec<String> = links.iter().map(|l| format!("/dev/{l}")).collect();
        p.push(("DEVLINKS".into(), l.join(" ")));
    }
    for (prefix, key) in [("G:", "TAGS"), ("Q:", "CURRENT_TAGS")] {
        let t = list(prefix);
        if !t.is_empty() {
            p.push((key.into(), format!(":{}:", t.join(":"))));
        }
    }
    p
}

/// Whether udev removes the database entry for this event.
pub fn removes_entry(ev: &Uevent) -> bool {
    ev.action == Action::Remove
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_tags_keep_dashes_and_squeeze_the_rest() {
        assert_eq!(
            path_tag("pci-0000:00:03.0-usb-0:1:1.0"),
            "pci-0000_00_03_0-usb-0_1_1_0"
        );
        assert_eq!(
            path_tag("platform-monfs_hcd.1-usb-0:1:1.0"),
            "platform-monfs_hcd_1-usb-0_1_1_0"
        );
        assert_eq!(path_tag(":a::b:"), "a_b");
    }

    /// The keys of udev's properties for the events of a keyboard's plug
    /// (add, change, add and bind of its interface, bind).
    fn plug_keys() -> Vec<Vec<String>> {
        let mut d = crate::usbcore::sysfs::tests::keyboard();
        d.port_path = vec![1];
        d.level = 1;
        d.interfaces[0].driver = Some("usbhid".into());
        d.probed = true;
        // with a serial number, as qemu's devices have
        d.descriptor[16] = 3;
        d.strings.push((3, "1-0000:00:04.0-1".into()));
        let (evs, _) = crate::usbcore::uevent::events_between(None, Some(&d), false);
        evs.iter()
            .map(|e| {
                udev_properties(e, &e.device, None)
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect()
            })
            .collect()
    }

    #[test]
    fn usb_id_gives_a_device_both_prefixes_and_an_interface_nothing() {
        let keys = plug_keys();
        // add 1-1: usb_id's properties as Debian 12's udevd sent them for
        // qemu's usb-storage, then the path (and the seat's, class 00).
        assert_eq!(
            keys[0][..20],
            [
                "ID_BUS",
                "ID_MODEL",
                "ID_MODEL_ENC",
                "ID_MODEL_ID",
                "ID_SERIAL",
                "ID_SERIAL_SHORT",
                "ID_VENDOR",
                "ID_VENDOR_ENC",
                "ID_VENDOR_ID",
                "ID_REVISION",
                "ID_USB_MODEL",
                "ID_USB_MODEL_ENC",
                "ID_USB_MODEL_ID",
                "ID_USB_SERIAL",
                "ID_USB_SERIAL_SHORT",
                "ID_USB_VENDOR",
                "ID_USB_VENDOR_ENC",
                "ID_USB_VENDOR_ID",
                "ID_USB_REVISION",
                "ID_USB_INTERFACES",
            ]
        );
        // add and bind of 1-1:1.0 (after the device's change): no usb_id
        // (it runs for usb_device only)
        for k in &keys[2..4] {
            assert_eq!(k, &["ID_PATH", "ID_PATH_TAG"]);
        }
    }

    #[test]
    fn an_unplugs_events_carry_the_path_and_the_databases_tags_only() {
        let mut d = crate::usbcore::sysfs::tests::keyboard();
        d.port_path = vec![1];
        d.level = 1;
        d.interfaces[0].driver = Some("usbhid".into());
        d.probed = true;
        let (evs, _) = crate::usbcore::uevent::events_between(Some(&d), None, true);
        let props: Vec<Vec<(String, String)>> = evs
            .iter()
            .map(|e| udev_properties(e, &e.device, None))
            .collect();
        let keys = |p: &Vec<(String, String)>| p.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        // unbind and remove of 1-1:1.0, as Debian 12's udevd sent them
        for p in &props[..2] {
            assert_eq!(keys(p), ["ID_PATH", "ID_PATH_TAG"]);
        }
        // unbind and remove of 1-1: a class 00 device keeps its seat tag
        for p in &props[2..] {
            assert_eq!(keys(p), ["ID_PATH", "ID_PATH_TAG", "TAGS"]);
            assert_eq!(p[2].1, ":seat:");
        }
        // its database entry in between: the tag, not a current one
        let db = db_text(&all_properties(&evs[2], 9, 1, None, ""), 1, &evs[2]);
        assert!(db.contains("G:seat\n") && !db.contains("Q:"), "{db}");
    }

    #[test]
    fn strings_are_cleaned_and_encoded_as_udev_does() {
        assert_eq!(clean("  QEMU  USB Keyboard "), "QEMU_USB_Keyboard");
        assert_eq!(clean("a/b"), "a_b");
        assert_eq!(encode("QEMU USB"), "QEMU\\x20USB");
    }
}
