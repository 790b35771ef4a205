//! The USB part of sysfs under the mount's `sys/`: `sys/bus/usb/devices/*`
//! (links to the device and interface directories), `sys/bus/usb/drivers/*`,
//! and under `sys/devices/platform/monfs_hcd.B/usbB/...` one directory per
//! device (root hubs included) with the attributes of the kernel's
//! `drivers/usb/core/sysfs.c` (device and interface attributes, the
//! `descriptors` binary attribute), `endpoint.c` (`ep_XX` directories) and
//! the `uevent` text of `usb.c`/`driver.c`/`message.c`, byte for byte.
//! That is what libudev enumerates, what libusb's sysfs code reads and what
//! `lsusb -t` and `usb-devices` walk; `monfs run` puts `sys/bus/usb` at
//! `/sys/bus/usb` and the `monfs_hcd.B` directories into
//! `/sys/devices/platform`.
//!
//! The tree follows the port: every device [`UsbCorePort::devices`] lists
//! at install, then every plug, change and unplug a [`DeviceWatcher`] is
//! told of. Attribute files are snapshots made when the device was added or
//! last changed (the kernel's are read live, but only change with the
//! device: its configuration, alternate settings and driver bindings, each
//! of which the port reports as a change).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::base::errno::SysResult;
use crate::base::sync::LockExt;
use crate::base::vfs::{Caller, FileNode, NodeKind, OpenFile, OpenFlags, SnapshotFile, Tree};

use super::device::{
    DevRef, DeviceChange, DeviceEvent, DeviceWatcher, Speed, UsbCorePort, UsbDevice,
};

/// The major number of USB devices (`USB_DEVICE_MAJOR`).
pub const USB_DEVICE_MAJOR: u32 = 189;

/// Where the sysfs tree starts in the mount.
const SYS: &str = "sys";

/// The platform device each bus's root hub hangs off (as dummy_hcd's
/// `dummy_hcd.0`), below `sys/devices/platform`.
pub fn controller_name(bus: u16) -> String {
    format!("monfs_hcd.{bus}")
}

/// An interface's name: `B-DEVPATH:CONFIG.IFNUM` (`1-1:1.0`; a root hub's
/// is `1-0:1.0`).
pub fn interface_name(d: &UsbDevice, ifnum: u8) -> String {
    format!("{}-{}:{}.{}", d.busnum, d.devpath(), d.active_config, ifnum)
}

/// The minor number of the device's usb_device node.
pub fn minor(d: &UsbDevice) -> u32 {
    (u32::from(d.busnum).saturating_sub(1)) * 128 + u32::from(d.devnum).saturating_sub(1)
}

/// The sysfs `speed` text (sysfs.c `speed_show`).
pub fn speed_text(s: Speed) -> &'static str {
    match s {
        Speed::Low => "1.5",
        Speed::Unknown | Speed::Full => "12",
        Speed::High => "480",
        Speed::Super => "5000",
        Speed::SuperPlus => "10000",
        Speed::Wireless => "unknown",
    }
}

/// A device's path below `/sys` (its uevents' `DEVPATH`): the chain of its
/// hubs' names below the controller.
pub fn device_devpath(d: &UsbDevice) -> String {
    let mut p = format!(
        "/devices/platform/{}/usb{}",
        controller_name(d.busnum),
        d.busnum
    );
    for n in 1..=d.port_path.len() {
        let ports: Vec<String> = d.port_path[..n].iter().map(|p| p.to_string()).collect();
        p.push_str(&format!("/{}-{}", d.busnum, ports.join(".")));
    }
    p
}

/// A device's directory, relative to the mount; None while its hub is
/// not shown.
fn device_dir(d: &UsbDevice, names: &HashMap<DevRef, String>) -> Option<String> {
    if let Some(parent) = d.parent {
        names.get(&parent)?;
    }
    Some(format!("{SYS}{}", device_devpath(d)))
}

/// A relative symlink target, as sysfs makes them (`kernfs_get_target_path`):
/// from directory `from_dir` up to its common ancestor with `to`'s parent
/// and down to `to` (both relative to the mount); a link to an ancestor
/// goes up past it and names it (`device` of `inputN` is
/// `../../../0003:0627:0001.0001`).
pub(crate) fn rel(from_dir: &str, to: &str) -> String {
    let a: Vec<&str> = from_dir.split('/').filter(|p| !p.is_empty()).collect();
    let b: Vec<&str> = to.split('/').filter(|p| !p.is_empty()).collect();
    let parent = &b[..b.len().saturating_sub(1)];
    let common = a.iter().zip(parent).take_while(|(x, y)| x == y).count();
    format!(
        "{}{}",
        "../".repeat(a.len() - common),
        b[common..].join("/")
    )
}

/// One endpoint descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// bEndpointAddress.
    pub(crate) address: u8,
    /// bmAttributes (its low two bits: the transfer type).
    pub(crate) attributes: u8,
    /// wMaxPacketSize as given.
    pub(crate) max_packet: u16,
    interval: u8,
    length: u8,
}

impl Endpoint {
    /// The packet size (`usb_endpoint_maxp`: wMaxPacketSize's low 11 bits).
    pub(crate) fn packet_size(&self) -> u16 {
        self.max_packet & 0x7ff
    }
}

/// The endpoint descriptors of interface `ifnum`, setting `alt`, in a raw
/// configuration descriptor.
pub(crate) fn endpoints(config: &[u8], ifnum: u8, alt: u8) -> Vec<Endpoint> {
    let mut out = Vec::new();
    let mut current: Option<(u8, u8)> = None;
    for d in super::abi::descriptors(config) {
        match d[1] {
            4 if d.len() >= 9 => current = Some((d[2], d[3])),
            5 if d.len() >= 7 && current == Some((ifnum, alt)) => out.push(Endpoint {
                length: d[0],
                address: d[2],
                attributes: d[3],
                max_packet: u16::from_le_bytes([d[4], d[5]]),
                interval: d[6],
            }),
            _ => {}
        }
    }
    out
}

/// `usb_decode_interval` (drivers/usb/common/common.c), in microseconds.
fn decode_interval(ep: &Endpoint, speed: Speed) -> u32 {
    let high = speed >= Speed::High && speed != Speed::Wireless;
    let exp = |b: u8| 1u32 << (u32::from(b).clamp(1, 16) - 1);
    let v = match ep.attributes & 3 {
        0 if speed == Speed::High => u32::from(ep.interval),
        1 => exp(ep.interval),
        2 if speed == Speed::High && ep.address & 0x80 == 0 => u32::from(ep.interval),
        3 if high => exp(ep.interval),
        3 => u32::from(ep.interval),
        _ => 0,
    };
    v * if high { 125 } else { 1000 }
}

/// The files of an `ep_XX` directory (endpoint.c).
fn endpoint_files(ep: &Endpoint, speed: Speed) -> Vec<(&'static str, String)> {
    let us = decode_interval(ep, speed);
    let interval = if us % 1000 != 0 {
        format!("{us}us\n")
    } else {
        format!("{}ms\n", us / 1000)
    };
    let kind = match ep.attributes & 3 {
        0 => "Control",
        1 => "Isoc",
        2 => "Bulk",
        _ => "Interrupt",
    };
    let direction = if ep.attributes & 3 == 0 {
        "both"
    } else if ep.address & 0x80 != 0 {
        "in"
    } else {
        "out"
    };
    vec![
        ("bLength", format!("{:02x}\n", ep.length)),
        ("bEndpointAddress", format!("{:02x}\n", ep.address)),
        ("bmAttributes", format!("{:02x}\n", ep.attributes)),
        ("bInterval", format!("{:02x}\n", ep.interval)),
        ("wMaxPacketSize", format!("{:04x}\n", ep.max_packet & 0x7ff)),
        ("interval", interval),
        ("type", format!("{kind}\n")),
        ("direction", format!("{direction}\n")),
        ("uevent", "DEVTYPE=usb_endpoint\n".into()),
    ]
}

/// The `uevent` of a usb_device (drivers/base/core.c `dev_uevent`, then
/// driver.c `usb_uevent`, then usb.c `usb_dev_uevent`).
pub fn device_uevent(d: &UsbDevice) -> String {
    let desc = &d.descriptor;
    format!(
        "MAJOR={USB_DEVICE_MAJOR}\nMINOR={}\nDEVNAME=bus/usb/{:03}/{:03}\nDEVTYPE=usb_device\n\
         DRIVER=usb\nPRODUCT={:x}/{:x}/{:x}\nTYPE={}/{}/{}\nBUSNUM={:03}\nDEVNUM={:03}\n",
        minor(d),
        d.busnum,
        d.devnum,
        d.vendor_id(),
        d.product_id(),
        u16::from_le_bytes([desc[12], desc[13]]),
        desc[4],
        desc[5],
        desc[6],
        d.busnum,
        d.devnum,
    )
}

/// An interface's `modalias` (without the newline).
pub fn modalias(d: &UsbDevice, i: &super::device::Interface) -> String {
    let desc = &d.descriptor;
    format!(
        "usb:v{:04X}p{:04X}d{:04X}dc{:02X}dsc{:02X}dp{:02X}ic{:02X}isc{:02X}ip{:02X}in{:02X}",
        d.vendor_id(),
        d.product_id(),
        u16::from_le_bytes([desc[12], desc[13]]),
        desc[4],
        desc[5],
        desc[6],
        i.class,
        i.subclass,
        i.protocol,
        i.number
    )
}

/// The `uevent` of an interface (`dev_uevent`, `usb_uevent`,
/// message.c `usb_if_uevent`).
pub fn interface_uevent(d: &UsbDevice, i: &super::device::Interface) -> String {
    let desc = &d.descriptor;
    let driver = match &i.driver {
        Some(name) => format!("DRIVER={name}\n"),
        None => String::new(),
    };
    format!(
        "DEVTYPE=usb_interface\n{driver}PRODUCT={:x}/{:x}/{:x}\nTYPE={}/{}/{}\n\
         INTERFACE={}/{}/{}\nMODALIAS={}\n",
        d.vendor_id(),
        d.product_id(),
        u16::from_le_bytes([desc[12], desc[13]]),
        desc[4],
        desc[5],
        desc[6],
        i.class,
        i.subclass,
        i.protocol,
        modalias(d, i)
    )
}

/// The attribute files of a device directory (sysfs.c `dev_attrs`,
/// `dev_string_attrs`, root hubs' `usb_bus_attrs`), name and text.
pub fn device_attributes(d: &UsbDevice) -> Vec<(&'static str, String)> {
    let desc = &d.descriptor;
    let bcd_usb = u16::from_le_bytes([desc[2], desc[3]]);
    let active = (d.active_config != 0)
        .then(|| d.config(d.active_config))
        .flatten()
        .filter(|c| c.len() >= 9);
    let mut v: Vec<(&'static str, String)> = Vec::new();
    let actconfig = |f: &dyn Fn(&[u8]) -> String| active.map(f).unwrap_or_default();
    v.push((
        "configuration",
        actconfig(&|c| d.string(c[6]).map(|s| format!("{s}\n")).unwrap_or_default()),
    ));
    v.push(("bNumInterfaces", actconfig(&|c| format!("{:2}\n", c[4]))));
    v.push(("bConfigurationValue", actconfig(&|c| format!("{}\n", c[5]))));
    v.push(("bmAttributes", actconfig(&|c| format!("{:2x}\n", c[7]))));
    let mul = if d.speed >= Speed::Super && d.speed != Speed::Wireless {
        8
    } else {
        2
    };
    v.push((
        "bMaxPower",
        actconfig(&|c| format!("{}mA\n", u32::from(c[8]) * mul)),
    ));
    v.push(("urbnum", "0\n".into()));
    v.push(("idVendor", format!("{:04x}\n", d.vendor_id())));
    v.push(("idProduct", format!("{:04x}\n", d.product_id())));
    v.push((
        "bcdDevice",
        format!("{:04x}\n", u16::from_le_bytes([desc[12], desc[13]])),
    ));
    v.push(("bDeviceClass", format!("{:02x}\n", desc[4])));
    v.push(("bDeviceSubClass", format!("{:02x}\n", desc[5])));
    v.push(("bDeviceProtocol", format!("{:02x}\n", desc[6])));
    v.push(("bNumConfigurations", format!("{}\n", desc[17])));
    v.push(("bMaxPacketSize0", format!("{}\n", desc[7])));
    v.push(("speed", format!("{}\n", speed_text(d.speed))));
    v.push(("rx_lanes", "1\n".into()));
    v.push(("tx_lanes", "1\n".into()));
    v.push(("busnum", format!("{}\n", d.busnum)));
    v.push(("devnum", format!("{}\n", d.devnum)));
    v.push(("devpath", format!("{}\n", d.devpath())));
    v.push((
        "version",
        format!("{:2x}.{:02x}\n", bcd_usb >> 8, bcd_usb & 0xff),
    ));
    v.push(("maxchild", format!("{}\n", d.maxchild)));
    v.push(("quirks", "0x0\n".into()));
    v.push(("avoid_reset_quirk", "0\n".into()));
    v.push(("authorized", "1\n".into()));
    v.push(("ltm_capable", "no\n".into()));
    v.push(("removable", "unknown\n".into()));
    v.push(("dev", format!("{USB_DEVICE_MAJOR}:{}\n", minor(d))));
    for (name, idx) in [
        ("manufacturer", desc[14]),
        ("product", desc[15]),
        ("serial", desc[16]),
    ] {
        if let Some(s) = d.string(idx) {
            v.push((name, format!("{s}\n")));
        }
    }
    if d.is_root_hub() {
        v.push(("authorized_default", "1\n".into()));
        v.push(("interface_authorized_default", "1\n".into()));
    }
    v.push(("uevent", device_uevent(d)));
    v
}

/// The attribute files of an interface directory (sysfs.c `intf_attrs`,
/// `intf_string_attrs`).
pub fn interface_attributes(
    d: &UsbDevice,
    i: &super::device::Interface,
) -> Vec<(&'static str, String)> {
    let mut v: Vec<(&'static str, String)> = vec![
        ("bInterfaceNumber", format!("{:02x}\n", i.number)),
        ("bAlternateSetting", format!("{:2}\n", i.alt)),
        ("bNumEndpoints", format!("{:02x}\n", i.num_endpoints)),
        ("bInterfaceClass", format!("{:02x}\n", i.class)),
        ("bInterfaceSubClass", format!("{:02x}\n", i.subclass)),
        ("bInterfaceProtocol", format!("{:02x}\n", i.protocol)),
        ("modalias", format!("{}\n", modalias(d, i))),
        ("supports_autosuspend", "1\n".into()),
        ("authorized", "1\n".into()),
    ];
    if let Some(s) = d.string(i.string_index) {
        v.push(("interface", format!("{s}\n")));
    }
    v.push(("uevent", interface_uevent(d, i)));
    v
}

/// The size `stat` shows for a text attribute (a page, as sysfs has it).
pub(crate) const ATTR_SIZE: u64 = 4096;
/// The size of the `descriptors` binary attribute (`18 + 65535`).
const DESCRIPTORS_SIZE: u64 = 18 + 65535;

/// An attribute: its bytes as of the device's last change, and the size
/// sysfs reports for it.
struct Attr {
    inner: SnapshotFile,
    size: u64,
}

/// Text attribute `path` of the tree holding `text`, mode `perm`.
pub(crate) fn set_text(tree: &crate::base::vfs::Tree, path: &str, text: String, perm: u32) {
    tree.set(path, attribute(text.into_bytes(), ATTR_SIZE), perm);
}

/// Symlink `path` of the tree to tree path `to`, relative as sysfs writes
/// it ([`rel`]).
pub(crate) fn set_link(tree: &crate::base::vfs::Tree, path: &str, to: &str) {
    let from = path.rsplit_once('/').map_or("", |(p, _)| p);
    tree.set(path, NodeKind::Symlink(rel(from, to)), 0o777);
}

/// A `uevent` file's text: `KEY=VALUE` lines.
pub(crate) fn uevent_text(vars: &[(String, String)]) -> String {
    vars.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// A class device with a node (hidrawN, eventN) at tree path `dir`: its
/// `uevent` (`vars`), `dev`, `subsystem` and `device` links (its parent
/// at tree path `parent`), and the links `sys/class/CLASS/NAME` and
/// `sys/dev/char/MAJOR:MINOR` to it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn class_node(
    tree: &crate::base::vfs::Tree,
    dir: &str,
    parent: &str,
    class: &str,
    name: &str,
    vars: &[(String, String)],
    (major, minor): (u32, u32),
) {
    set_text(tree, &format!("{dir}/uevent"), uevent_text(vars), 0o644);
    set_text(
        tree,
        &format!("{dir}/dev"),
        format!("{major}:{minor}\n"),
        0o444,
    );
    set_link(
        tree,
        &format!("{dir}/subsystem"),
        &format!("sys/class/{class}"),
    );
    set_link(tree, &format!("{dir}/device"), parent);
    set_link(tree, &format!("sys/class/{class}/{name}"), dir);
    set_link(tree, &format!("sys/dev/char/{major}:{minor}"), dir);
}

/// A sysfs attribute file holding `bytes`, of the size `stat` gives sysfs
/// files (`size`: [`ATTR_SIZE`] for text attributes).
pub(crate) fn attribute(bytes: Vec<u8>, size: u64) -> NodeKind {
    let inner = SnapshotFile::new(move || bytes.clone());
    NodeKind::File(Arc::new(Attr { inner, size }))
}

impl FileNode for Attr {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        self.inner.open(flags, caller)
    }
    fn size(&self) -> u64 {
        self.size
    }
}

/// The recorded attributes a program may write ([`StoredAttr`]): the
/// power attributes the kernel's `power/` group stores (its others are
/// read-only).
const RECORDED_WRITABLE: [&str; 6] = [
    "power/autosuspend",
    "power/autosuspend_delay_ms",
    "power/control",
    "power/level",
    "power/persist",
    "power/wakeup",
];

/// A recorded attribute that keeps what a program writes (at most a page,
/// as a sysfs store takes), for the next read.
struct StoredAttr(Arc<Mutex<Vec<u8>>>);

impl FileNode for StoredAttr {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(StoredAttr(self.0.clone())))
    }
    fn size(&self) -> u64 {
        ATTR_SIZE
    }
}

impl OpenFile for StoredAttr {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        let v = self.0.lock_ok();
        let start = (offset as usize).min(v.len());
        let end = start.saturating_add(size as usize).min(v.len());
        Ok(v[start..end].to_vec())
    }
    // sysfs_kf_write: a store of at most a page (a longer write is cut
    // there), wherever the file offset is; an empty write stores nothing.
    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        let n = data.len().min(ATTR_SIZE as usize);
        if n > 0 {
            *self.0.lock_ok() = data[..n].to_vec();
        }
        Ok(n as u32)
    }
}

/// What the tree holds for one device.
struct Shown {
    /// Its directory (relative to the mount).
    dir: String,
    /// Its name and its interfaces' names, as linked in
    /// `sys/bus/usb/devices`.
    links: Vec<String>,
    /// Its `sys/dev/char/MAJOR:MINOR` link.
    devnode: String,
}

/// The sysfs tree of the USB devices, kept in step with the port.
pub struct UsbSysfs {
    tree: Arc<Tree>,
    shown: Mutex<HashMap<DevRef, Shown>>,
}

impl UsbSysfs {
    /// Build `sys/` for every device the port has, and follow its plugs and
    /// unplugs from now on.
    pub fn install(tree: &Arc<Tree>, port: &Arc<dyn UsbCorePort>) -> Arc<UsbSysfs> {
        let me = Arc::new(UsbSysfs {
            tree: tree.clone(),
            shown: Mutex::new(HashMap::new()),
        });
        let bus = format!("{SYS}/bus/usb");
        tree.add(&format!("{bus}/devices"), NodeKind::Dir, 0o755);
        tree.add(&format!("{SYS}/dev/char"), NodeKind::Dir, 0o755);
        for drv in ["usb", "usbfs", "hub"] {
            me.driver_dir(drv);
        }
        me.file(&format!("{bus}/drivers_autoprobe"), "1\n".into(), 0o644);
        me.file(&format!("{bus}/drivers_probe"), String::new(), 0o200);
        me.file(&format!("{bus}/uevent"), String::new(), 0o200);
        // Watch first, so that nothing plugged meanwhile is missed; a device
        // seen twice is only written twice.
        port.watch(me.clone());
        let mut devices = port.devices();
        // Parents before children.
        devices.sort_by_key(|d| (d.busnum, d.level, d.port_path.clone()));
        for d in &devices {
            me.show(d);
        }
        me
    }

    fn attr(&self, path: &str, bytes: Vec<u8>, perm: u32, size: u64) {
        self.tree.set(path, attribute(bytes, size), perm);
    }

    fn file(&self, path: &str, text: String, perm: u32) {
        self.attr(path, text.into_bytes(), perm, ATTR_SIZE);
    }

    fn bin(&self, path: &str, bytes: Vec<u8>) {
        self.attr(path, bytes, 0o444, DESCRIPTORS_SIZE);
    }

    fn driver_dir(&self, name: &str) {
        let dir = format!("{SYS}/bus/usb/drivers/{name}");
        if self.tree.resolve(&dir).is_err() {
            self.tree.add(&dir, NodeKind::Dir, 0o755);
            self.file(&format!("{dir}/bind"), String::new(), 0o200);
            self.file(&format!("{dir}/unbind"), String::new(), 0o200);
            self.file(&format!("{dir}/uevent"), String::new(), 0o200);
        }
    }

    fn link(&self, path: &str, target: String) {
        self.tree.set(path, NodeKind::Symlink(target), 0o777);
    }

    /// Add or refresh device `d` (its parent must be shown already).
    fn show(&self, d: &UsbDevice) {
        let mut shown = self.shown.lock_ok();
        let names: HashMap<DevRef, String> =
            shown.iter().map(|(k, v)| (*k, v.dir.clone())).collect();
        let Some(dir) = device_dir(d, &names) else {
            tracing::warn!(
                bus = d.busnum,
                devnum = d.devnum,
                "sysfs: a device whose hub is not shown"
            );
            return;
        };
        if d.is_root_hub() {
            let ctl = format!("{SYS}/devices/platform/{}", controller_name(d.busnum));
            // DRIVER is the bound driver's name, the one `driver` links to.
            let drv = d
                .controller
                .as_ref()
                .map_or("monfs_hcd", |hc| hc.driver.as_str());
            self.file(
                &format!("{ctl}/uevent"),
                format!("DRIVER={drv}\nMODALIAS=platform:monfs_hcd\n"),
                0o644,
            );
            self.file(
                &format!("{ctl}/modalias"),
                "platform:monfs_hcd\n".into(),
                0o444,
            );
            self.link(
                &format!("{ctl}/subsystem"),
                rel(&ctl, &format!("{SYS}/bus/platform")),
            );
            // lsusb -t names the root hub's driver after the controller's.
            if let Some(hc) = &d.controller {
                self.link(
                    &format!("{ctl}/driver"),
                    rel(&ctl, &format!("{SYS}/bus/platform/drivers/{}", hc.driver)),
                );
            }
        }
        let own = device_attributes(d);
        // A recording's attributes beyond monfs's own (its power/ files),
        // made once: what a program writes to a writable one stays.
        for (name, text) in &d.recorded_attributes {
            let mine = own.iter().any(|(n, _)| n == name)
                || ["descriptors", "remove", "uevent"].contains(&name.as_str());
            let path = format!("{dir}/{name}");
            if mine || self.tree.resolve(&path).is_ok() {
                continue;
            }
            if RECORDED_WRITABLE.contains(&name.as_str()) {
                let node = StoredAttr(Arc::new(Mutex::new(text.clone().into_bytes())));
                self.tree.set(&path, NodeKind::File(Arc::new(node)), 0o644);
            } else {
                self.file(&path, text.clone(), 0o444);
            }
        }
        for (name, text) in own {
            let perm = match name {
                "uevent"
                | "bConfigurationValue"
                | "authorized"
                | "avoid_reset_quirk"
                | "authorized_default"
                | "interface_authorized_default" => 0o644,
                _ => 0o444,
            };
            self.file(&format!("{dir}/{name}"), text, perm);
        }
        self.file(&format!("{dir}/remove"), String::new(), 0o200);
        self.bin(&format!("{dir}/descriptors"), d.descriptors_blob());
        let bus_usb = format!("{SYS}/bus/usb");
        self.link(&format!("{dir}/subsystem"), rel(&dir, &bus_usb));
        self.link(
            &format!("{dir}/driver"),
            rel(&dir, &format!("{bus_usb}/drivers/usb")),
        );
        // ep_00: the default control endpoint.
        let ep0 = Endpoint {
            length: 7,
            address: 0,
            attributes: 0,
            max_packet: if d.speed >= Speed::Super && d.speed != Speed::Wireless {
                1u16 << d.descriptor[7].min(15)
            } else {
                u16::from(d.descriptor[7])
            },
            interval: 0,
        };
        for (name, text) in endpoint_files(&ep0, d.speed) {
            self.file(&format!("{dir}/ep_00/{name}"), text, 0o444);
        }
        // Interfaces: those gone first (a new configuration), then each.
        let name = d.name();
        let old_links = shown
            .get(&d.dev)
            .map(|s| s.links.clone())
            .unwrap_or_default();
        let mut links = vec![name.clone()];
        let active = d.config(d.active_config).map(|c| c.to_vec());
        for i in &d.interfaces {
            let iname = interface_name(d, i.number);
            let idir = format!("{dir}/{iname}");
            let existed = self.tree.resolve(&idir).is_ok();
            if existed {
                // Endpoints and driver may differ now.
                self.tree.remove(&idir);
            }
            for (n, text) in interface_attributes(d, i) {
                let perm = if n == "uevent" || n == "authorized" {
                    0o644
                } else {
                    0o444
                };
                self.file(&format!("{idir}/{n}"), text, perm);
            }
            self.link(&format!("{idir}/subsystem"), rel(&idir, &bus_usb));
            if let Some(drv) = &i.driver {
                self.driver_dir(drv);
                self.link(
                    &format!("{idir}/driver"),
                    rel(&idir, &format!("{bus_usb}/drivers/{drv}")),
                );
            }
            if let Some(cfg) = &active {
                for ep in endpoints(cfg, i.number, i.alt) {
                    let edir = format!("{idir}/ep_{:02x}", ep.address);
                    for (n, text) in endpoint_files(&ep, d.speed) {
                        self.file(&format!("{edir}/{n}"), text, 0o444);
                    }
                }
            }
            links.push(iname);
        }
        for old in old_links.iter().filter(|l| !links.contains(l)) {
            self.tree.remove(&format!("{bus_usb}/devices/{old}"));
            self.tree.remove(&format!("{dir}/{old}"));
        }
        for l in &links {
            let target = if *l == name {
                dir.clone()
            } else {
                format!("{dir}/{l}")
            };
            self.link(
                &format!("{bus_usb}/devices/{l}"),
                rel(&format!("{bus_usb}/devices"), &target),
            );
        }
        // /sys/dev/char/189:N, which libudev resolves a device number (and
        // so a database or tag entry `c189:N`) through.
        let chardev = format!("{SYS}/dev/char");
        let devnode = format!("{chardev}/{USB_DEVICE_MAJOR}:{}", minor(d));
        self.link(&devnode, rel(&chardev, &dir));
        shown.insert(
            d.dev,
            Shown {
                dir,
                links,
                devnode,
            },
        );
    }

    /// Remove device `dev` and whatever hangs below it.
    fn hide(&self, dev: DevRef) {
        let mut shown = self.shown.lock_ok();
        let Some(gone) = shown.remove(&dev) else {
            return;
        };
        let below: Vec<DevRef> = shown
            .iter()
            .filter(|(_, s)| s.dir.starts_with(&format!("{}/", gone.dir)))
            .map(|(k, _)| *k)
            .collect();
        let mut all = vec![gone];
        for k in below {
            if let Some(s) = shown.remove(&k) {
                all.push(s);
            }
        }
        for s in &all {
            for l in &s.links {
                self.tree.remove(&format!("{SYS}/bus/usb/devices/{l}"));
            }
            self.tree.remove(&s.devnode);
        }
        self.tree.remove(&all[0].dir);
    }
}

impl DeviceWatcher for UsbSysfs {
    fn changed(&self, event: &DeviceEvent) {
        match &event.change {
            DeviceChange::Added(d) | DeviceChange::Changed(d) => self.show(d),
            DeviceChange::Removed(dev) => self.hide(*dev),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::usbcore::device::Interface;

    /// Links as Debian's 6.12 shows them (scripts/kernel-vm): to a
    /// sibling, across, and to an ancestor (up past it, then its name).
    #[test]
    fn links_are_written_as_kernfs_writes_them() {
        assert_eq!(rel("sys/a/b/input/input9", "sys/a/b"), "../../../b");
        assert_eq!(
            rel("sys/a/b/input/input9/event3", "sys/a/b/input/input9"),
            "../../input9"
        );
        assert_eq!(
            rel("sys/class/input", "sys/a/b/input/input9"),
            "../../a/b/input/input9"
        );
        assert_eq!(rel("sys/a/b/x", "sys/a/b/y"), "../y");
    }

    /// A full-speed HID keyboard at 1-1.4, usbhid bound (also the
    /// uevent tests' device).
    pub(crate) fn keyboard() -> UsbDevice {
        let descriptor = [
            18, 1, 0x00, 0x02, 0, 0, 0, 64, 0x6b, 0x1d, 0x04, 0x01, 0x12, 0x06, 1, 2, 3, 1,
        ];
        let config = vec![
            9, 2, 34, 0, 1, 1, 0, 0xa0, 50, // config
            9, 4, 0, 0, 1, 3, 1, 1, 0, // interface 0
            9, 0x21, 0x11, 0x01, 0, 1, 0x22, 63, 0, // HID
            7, 5, 0x81, 3, 8, 0, 10, // interrupt IN
        ];
        UsbDevice {
            dev: DevRef { bus: 1, id: 2 },
            busnum: 1,
            devnum: 2,
            port_path: vec![1, 4],
            parent: Some(DevRef { bus: 1, id: 1 }),
            level: 2,
            speed: Speed::Full,
            descriptor,
            configs: vec![config],
            strings: vec![(1, "Vendor".into()), (2, "Keyboard".into())],
            active_config: 1,
            interfaces: vec![Interface {
                number: 0,
                alt: 0,
                num_altsetting: 1,
                class: 3,
                subclass: 1,
                protocol: 1,
                num_endpoints: 1,
                string_index: 0,
                driver: Some("usbhid".into()),
                report_descriptor: Vec::new(),
                probe_answers: Vec::new(),
            }],
            maxchild: 0,
            controller: None,
            probed: true,
            recorded_attributes: Vec::new(),
            recorded_properties: Vec::new(),
        }
    }

    fn attr(v: &[(&'static str, String)], name: &str) -> Option<String> {
        v.iter().find(|(n, _)| *n == name).map(|(_, t)| t.clone())
    }

    #[test]
    fn device_attributes_as_sysfs_c_prints_them() {
        let d = keyboard();
        let a = device_attributes(&d);
        assert_eq!(attr(&a, "idVendor").unwrap(), "1d6b\n");
        assert_eq!(attr(&a, "idProduct").unwrap(), "0104\n");
        assert_eq!(attr(&a, "bcdDevice").unwrap(), "0612\n");
        assert_eq!(attr(&a, "version").unwrap(), " 2.00\n");
        assert_eq!(attr(&a, "speed").unwrap(), "12\n");
        assert_eq!(attr(&a, "bNumInterfaces").unwrap(), " 1\n");
        assert_eq!(attr(&a, "bmAttributes").unwrap(), "a0\n");
        assert_eq!(attr(&a, "bMaxPower").unwrap(), "100mA\n");
        assert_eq!(attr(&a, "devpath").unwrap(), "1.4\n");
        assert_eq!(attr(&a, "dev").unwrap(), "189:1\n");
        assert_eq!(attr(&a, "manufacturer").unwrap(), "Vendor\n");
        assert_eq!(attr(&a, "serial"), None);
        assert_eq!(attr(&a, "configuration").unwrap(), "");
        assert_eq!(
            attr(&a, "uevent").unwrap(),
            "MAJOR=189\nMINOR=1\nDEVNAME=bus/usb/001/002\nDEVTYPE=usb_device\nDRIVER=usb\n\
             PRODUCT=1d6b/104/612\nTYPE=0/0/0\nBUSNUM=001\nDEVNUM=002\n"
        );
        assert_eq!(d.name(), "1-1.4");
        assert_eq!(interface_name(&d, 0), "1-1.4:1.0");
    }

    #[test]
    fn interfaces_and_endpoints() {
        let d = keyboard();
        let i = &d.interfaces[0];
        let a = interface_attributes(&d, i);
        assert_eq!(attr(&a, "bAlternateSetting").unwrap(), " 0\n");
        assert_eq!(
            attr(&a, "modalias").unwrap(),
            "usb:v1D6Bp0104d0612dc00dsc00dp00ic03isc01ip01in00\n"
        );
        assert!(attr(&a, "uevent")
            .unwrap()
            .starts_with("DEVTYPE=usb_interface\nDRIVER=usbhid\nPRODUCT=1d6b/104/612\n"));
        let eps = endpoints(&d.configs[0], 0, 0);
        assert_eq!(eps.len(), 1);
        let f = endpoint_files(&eps[0], d.speed);
        assert_eq!(attr(&f, "interval").unwrap(), "10ms\n");
        assert_eq!(attr(&f, "wMaxPacketSize").unwrap(), "0008\n");
        assert_eq!(attr(&f, "direction").unwrap(), "in\n");
        assert_eq!(attr(&f, "type").unwrap(), "Interrupt\n");
        let hs = endpoint_files(&eps[0], Speed::High);
        assert_eq!(attr(&hs, "interval").unwrap(), "64ms\n");
    }

    #[test]
    fn unconfigured_device_shows_empty_config_attributes() {
        let mut d = keyboard();
        d.active_config = 0;
        d.interfaces.clear();
        let a = device_attributes(&d);
        assert_eq!(attr(&a, "bConfigurationValue").unwrap(), "");
        assert_eq!(attr(&a, "bNumInterfaces").unwrap(), "");
    }

    #[test]
    fn relative_links() {
        assert_eq!(
            rel(
                "sys/bus/usb/devices",
                "sys/devices/platform/monfs_hcd.1/usb1"
            ),
            "../../../devices/platform/monfs_hcd.1/usb1"
        );
    }
}
