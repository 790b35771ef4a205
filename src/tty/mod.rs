//! The tty layer above the USB serial drivers (`drivers/tty/`,
//! `drivers/usb/class/cdc-acm.c`, `drivers/usb/serial/`): [`TtyCore`]
//! makes a tty port for every interface the USB core shows bound to
//! cdc_acm (its CDC ACM control interfaces) or to a usb-serial driver
//! (ftdi_sio, cp210x, ch341), with its node `dev/ttyACMN` or `dev/ttyUSBN` (the lowest
//! free minor of its major), its class device (`.../INTERFACE/tty/ttyACMN`;
//! `.../INTERFACE/ttyUSBN/tty/ttyUSBN` below the usb-serial port device)
//! with `sys/class/tty/NAME` and `sys/dev/char/MAJOR:N`, and its driver's
//! attributes (cdc_acm's `bmCapabilities` on the control interface,
//! ftdi_sio's `latency_timer` and `event_char` on the port device). Their
//! uevents come between the interface's `add` and `bind`, as the kernel
//! sends them ([`TtyCore`] is a [`ChildDevices`]).
//!
//! A port ([`port::Port`]) opens, closes and hangs up as the tty layer's
//! do, with the URBs of its driver ([`acm`]; [`ftdi`], [`cp210x`] and
//! [`ch341`] on the usb-serial core's [`serial`]): line settings, modem lines and breaks go to the
//! device as the driver's requests, through the same port usbfs uses, so
//! usbmon shows them. What a program reads and writes goes through the
//! n_tty line discipline ([`ldisc`]) with the port's termios
//! ([`termios`]); [`mod@file`] is the node's open file.
//!
//! Like usbfs, sysfs and the HID core, nothing here imports the simulator.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{Caller, FileNode, NodeKind, OpenFile, OpenFlags, SnapshotFile, Tree};
use crate::usbcore::device::{
    DevRef, DeviceChange, DeviceEvent, DeviceWatcher, Interface, UsbCorePort, UsbDevice,
};
use crate::usbcore::sysfs::{device_devpath, interface_name, set_link, set_text, uevent_text};
use crate::usbcore::uevent::{ChildDevice, ChildDevices};

pub mod acm;
pub mod ch341;
pub mod cp210x;
pub mod file;
pub mod ftdi;
pub mod ldisc;
pub mod port;
pub mod serial;
pub mod termios;

use acm::{Acm, AcmLayout};
pub use acm::{ACM_TTY_MAJOR, ACM_TTY_MINORS};
use port::Port;
pub use serial::{USB_SERIAL_TTY_MAJOR, USB_SERIAL_TTY_MINORS};

/// Where the sysfs tree starts in the mount.
const SYS: &str = "sys";

#[derive(Default)]
struct State {
    /// By USB device and interface.
    ports: HashMap<(DevRef, u8), Arc<Port>>,
    /// By major and minor.
    minors: BTreeMap<(u32, u32), Arc<Port>>,
    /// Each USB device's active configuration as last seen: a new one
    /// unbinds every interface's driver.
    configs: HashMap<DevRef, u8>,
}

/// The tty layer: the ports cdc_acm's and the usb-serial drivers'
/// interfaces have, their sysfs and nodes.
pub struct TtyCore {
    tree: Arc<Tree>,
    port: Arc<dyn UsbCorePort>,
    st: Mutex<State>,
    /// The majors new ports show, by their driver's: the driver's own, or
    /// the one reserved for its character devices.
    shown: Mutex<HashMap<u32, u32>>,
}

/// Whether interface `i` has a port: a CDC ACM control interface bound to
/// cdc_acm, or an interface bound to a usb-serial driver.
fn has_port(i: &Interface) -> bool {
    match i.driver.as_deref() {
        Some("cdc_acm") => i.class == 2,
        Some(d) => serial::is_driver(d),
        None => false,
    }
}

/// Whether port `p` is a usb-serial driver's (it has a port device).
fn usb_serial(p: &Port) -> bool {
    p.driver.major() == USB_SERIAL_TTY_MAJOR
}

/// The driver part of the port of interface `i` of `d`, by its driver's
/// name (None: the interfaces are not what the driver needs, or its probe
/// failed). A new USB serial driver is a module of this one and a line
/// here (and its `usb_device_id` table's in the simulator's driver
/// registry).
fn port_driver(d: &UsbDevice, i: &Interface) -> Option<Box<dyn port::PortDriver>> {
    Some(match i.driver.as_deref()? {
        "cdc_acm" => {
            let cfg = d.config(d.active_config).unwrap_or(&[]);
            Box::new(Acm::new(AcmLayout::parse(cfg, i.number, i.alt)?))
        }
        "ftdi_sio" => Box::new(ftdi::port_driver(d, i)?),
        "cp210x" => Box::new(cp210x::port_driver(d, i)?),
        "ch341" => Box::new(ch341::port_driver(d, i)?),
        _ => return None,
    })
}

impl TtyCore {
    /// Make the core, its fixed sysfs directories, and follow `port`'s
    /// devices (register it before the uevent queue, whose
    /// [`ChildDevices`] it is).
    pub fn install(tree: &Arc<Tree>, port: &Arc<dyn UsbCorePort>) -> Arc<TtyCore> {
        let me = Arc::new(TtyCore {
            tree: tree.clone(),
            port: port.clone(),
            st: Mutex::new(State::default()),
            shown: Mutex::new(HashMap::new()),
        });
        for d in ["class/tty", "dev/char", "bus/usb-serial/devices"] {
            tree.add(&format!("{SYS}/{d}"), NodeKind::Dir, 0o755);
        }
        for (_, d) in serial::DRIVERS {
            tree.add(
                &format!("{SYS}/bus/usb-serial/drivers/{d}"),
                NodeKind::Dir,
                0o755,
            );
        }
        port.watch(me.clone());
        let mut devices = port.devices();
        devices.sort_by_key(|d| (d.busnum, d.level, d.port_path.clone()));
        for d in &devices {
            me.update(d);
        }
        me
    }

    /// The port with `major` and `minor`.
    pub fn by_minor(&self, major: u32, minor: u32) -> Option<Arc<Port>> {
        self.st.lock_ok().minors.get(&(major, minor)).cloned()
    }

    /// Serve the ports' nodes as character devices too, cdc_acm's and the
    /// usb-serial core's each on the major `chardevs` reserves for them
    /// (the kernel's 166 and 188 are its own drivers'): minor M's device
    /// opens whatever port has minor M then. Ports made from now on show
    /// that major. Whether any could.
    pub fn use_char_devices(
        self: &Arc<Self>,
        chardevs: &dyn crate::base::vfs::CharDevices,
    ) -> bool {
        let mut any = false;
        for (class, major) in [("ttyACM", ACM_TTY_MAJOR), ("ttyUSB", USB_SERIAL_TTY_MAJOR)] {
            let core = Arc::downgrade(self);
            let node: crate::base::vfs::MinorNode = Arc::new(move |minor| {
                Arc::new(file::MinorNode {
                    lookup: {
                        let core = core.clone();
                        Arc::new(move || core.upgrade()?.by_minor(major, minor))
                    },
                }) as Arc<dyn FileNode>
            });
            if let Some(m) = chardevs.reserve(class, node) {
                self.shown.lock_ok().insert(major, m);
                tracing::info!(major = m, "{class}: character devices (CUSE)");
                any = true;
            }
        }
        any
    }

    /// Bring `d`'s ports in line with its interfaces: make those its
    /// drivers have now, drop those they no longer have, show them again.
    fn update(&self, d: &UsbDevice) {
        let mut st = self.st.lock_ok();
        let want: Vec<&Interface> = d.interfaces.iter().filter(|i| has_port(i)).collect();
        let reconfigured = st.configs.insert(d.dev, d.active_config) != Some(d.active_config);
        let gone: Vec<(DevRef, u8)> = st
            .ports
            .keys()
            .filter(|(r, n)| *r == d.dev && (reconfigured || !want.iter().any(|i| i.number == *n)))
            .copied()
            .collect();
        for k in gone {
            self.remove(&mut st, k);
        }
        for i in want {
            let p = match st.ports.get(&(d.dev, i.number)) {
                Some(p) => p.clone(),
                None => match self.make(&mut st, d, i) {
                    Some(p) => p,
                    None => continue,
                },
            };
            self.show(&p);
        }
    }

    /// The probe's tty part: a port for interface `i` of `d` with the
    /// lowest free minor of its driver's major (None: all taken, or the
    /// interfaces are not what the driver needs).
    fn make(&self, st: &mut State, d: &UsbDevice, i: &Interface) -> Option<Arc<Port>> {
        let Some(driver) = port_driver(d, i) else {
            tracing::warn!(
                device = %d.name(),
                interface = i.number,
                "{}: the interface lacks what the driver needs: no tty",
                i.driver.as_deref().unwrap_or("?")
            );
            return None;
        };
        let drv = driver.driver_name();
        let (major, minors) = if driver.major() == ACM_TTY_MAJOR {
            (ACM_TTY_MAJOR, ACM_TTY_MINORS)
        } else {
            (USB_SERIAL_TTY_MAJOR, USB_SERIAL_TTY_MINORS)
        };
        let minor = (0..minors).find(|m| !st.minors.contains_key(&(major, *m)));
        let Some(minor) = minor else {
            tracing::warn!(device = %d.name(), "{drv}: all {minors} minors taken, no tty");
            return None;
        };
        let iface_devpath = format!("{}/{}", device_devpath(d), interface_name(d, i.number));
        let shown = self.shown.lock_ok().get(&major).copied().unwrap_or(major);
        let p = Port::new(
            d.dev,
            i.number,
            (shown, minor),
            iface_devpath,
            driver,
            self.port.clone(),
        );
        st.ports.insert((d.dev, i.number), p.clone());
        st.minors.insert((major, minor), p.clone());
        self.tree.add(
            &format!("dev/{}", p.name()),
            NodeKind::File(Arc::new(file::TtyNode {
                port: Arc::downgrade(&p),
            })),
            0o660,
        );
        tracing::info!(device = %d.name(), "{}: {}", p.name(), p.driver.describe());
        Some(p)
    }

    /// Write port `p`'s sysfs (again).
    fn show(&self, p: &Arc<Port>) {
        let iface = format!("{SYS}{}", p.iface_devpath);
        let mut parent = iface.clone();
        for (a, text) in p.driver.interface_attributes() {
            set_text(&self.tree, &format!("{iface}/{a}"), text, 0o444);
        }
        if usb_serial(p) {
            parent = format!("{SYS}{}", serial::port_devpath(&p.iface_devpath, &p.name()));
            self.show_port_device(p, &parent);
        }
        crate::usbcore::sysfs::class_node(
            &self.tree,
            &format!("{SYS}{}", p.devpath()),
            &parent,
            "tty",
            &p.name(),
            &p.uevent_vars(),
            (p.major, p.minor),
        );
    }

    /// The usb-serial port device at tree path `dir`: its `uevent`,
    /// `port_number`, driver attributes, and the bus's and driver's links.
    fn show_port_device(&self, p: &Arc<Port>, dir: &str) {
        let t = &self.tree;
        let drv = p.driver.driver_name();
        let name = p.name();
        set_text(
            t,
            &format!("{dir}/uevent"),
            uevent_text(&[("DRIVER".into(), drv.into())]),
            0o644,
        );
        // One port per interface: port number 0.
        set_text(t, &format!("{dir}/port_number"), "0\n".into(), 0o444);
        for (a, mode) in p.driver.attributes() {
            t.set(
                &format!("{dir}/{a}"),
                NodeKind::File(Arc::new(PortAttr {
                    port: Arc::downgrade(p),
                    name: a,
                    mode,
                })),
                mode,
            );
        }
        set_link(t, &format!("{dir}/subsystem"), "sys/bus/usb-serial");
        set_link(
            t,
            &format!("{dir}/driver"),
            &format!("sys/bus/usb-serial/drivers/{drv}"),
        );
        set_link(t, &format!("{SYS}/bus/usb-serial/devices/{name}"), dir);
        set_link(
            t,
            &format!("{SYS}/bus/usb-serial/drivers/{drv}/{name}"),
            dir,
        );
    }

    /// The disconnect: port `k` hangs up and its devices go.
    fn remove(&self, st: &mut State, k: (DevRef, u8)) {
        let Some(p) = st.ports.remove(&k) else {
            return;
        };
        st.minors.remove(&(p.driver.major(), p.minor));
        p.disconnect();
        let name = p.name();
        let mut paths = vec![
            format!("dev/{name}"),
            format!("{SYS}/class/tty/{name}"),
            format!("{SYS}/dev/char/{}:{}", p.major, p.minor),
            format!("{SYS}{}", p.devpath()),
        ];
        for (a, _) in p.driver.interface_attributes() {
            paths.push(format!("{SYS}{}/{a}", p.iface_devpath));
        }
        if usb_serial(&p) {
            let drv = p.driver.driver_name();
            paths.push(format!(
                "{SYS}{}",
                serial::port_devpath(&p.iface_devpath, &name)
            ));
            paths.push(format!("{SYS}/bus/usb-serial/devices/{name}"));
            paths.push(format!("{SYS}/bus/usb-serial/drivers/{drv}/{name}"));
        }
        for path in paths {
            self.tree.remove(&path);
        }
    }
}

impl DeviceWatcher for TtyCore {
    fn changed(&self, event: &DeviceEvent) {
        match &event.change {
            DeviceChange::Added(d) | DeviceChange::Changed(d) => self.update(d),
            DeviceChange::Removed(r) => {
                let mut st = self.st.lock_ok();
                st.configs.remove(r);
                let keys: Vec<(DevRef, u8)> =
                    st.ports.keys().filter(|(x, _)| x == r).copied().collect();
                for k in keys {
                    self.remove(&mut st, k);
                }
            }
        }
    }
}

impl ChildDevices for TtyCore {
    fn children(&self, d: &UsbDevice, interface: u8) -> Vec<ChildDevice> {
        let Some(p) = self.st.lock_ok().ports.get(&(d.dev, interface)).cloned() else {
            return Vec::new();
        };
        let tty = ChildDevice {
            devpath: p.devpath(),
            subsystem: "tty".into(),
            vars: p.uevent_vars(),
            driver: None,
            change_on_add: None,
            change_on_remove: None,
            remove_rank: 0,
            udev: Vec::new(),
        };
        if !usb_serial(&p) {
            return vec![tty];
        }
        // The usb-serial port device, bound to the driver, then its tty;
        // they go the other way round (usb_serial_device_remove
        // unregisters the tty, then the port device is unbound and
        // removed).
        let port_dev = ChildDevice {
            devpath: serial::port_devpath(&p.iface_devpath, &p.name()),
            subsystem: "usb-serial".into(),
            vars: Vec::new(),
            driver: Some(p.driver.driver_name().into()),
            change_on_add: None,
            change_on_remove: None,
            remove_rank: 1,
            udev: Vec::new(),
        };
        vec![port_dev, tty]
    }
}

/// A driver attribute of a port device (ftdi_sio's `latency_timer`): read
/// and written through the driver, a write sending its request.
struct PortAttr {
    /// The port.
    port: Weak<Port>,
    /// The attribute's name.
    name: &'static str,
    /// Its mode.
    mode: u32,
}

impl FileNode for PortAttr {
    fn open(&self, flags: OpenFlags, caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        let p = self.port.upgrade().ok_or(Errno::ENODEV)?;
        // The mount's default_permissions checks the mode against the
        // caller; a mode without the access is refused for root too.
        if flags.writable() {
            if self.mode & 0o200 == 0 {
                return Err(Errno::EACCES);
            }
            return Ok(Arc::new(AttrWrite {
                port: self.port.clone(),
                name: self.name,
            }));
        }
        if self.mode & 0o444 == 0 {
            return Err(Errno::EACCES);
        }
        let text = p.driver.show_attr(self.name).into_bytes();
        SnapshotFile::new(move || text.clone()).open(flags, caller)
    }

    fn size(&self) -> u64 {
        crate::usbcore::sysfs::ATTR_SIZE
    }
}

/// An attribute opened for writing: each write is one store.
struct AttrWrite {
    port: Weak<Port>,
    name: &'static str,
}

impl OpenFile for AttrWrite {
    fn read(&self, _offset: u64, _size: u32) -> SysResult<Vec<u8>> {
        Err(Errno::EINVAL)
    }

    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        // A sysfs store gets at most a page.
        if data.len() >= 4096 {
            return Err(Errno::EINVAL);
        }
        let p = self.port.upgrade().ok_or(Errno::ENODEV)?;
        let text = std::str::from_utf8(data)
            .map_err(|_| Errno::EINVAL)?
            .trim_end_matches('\n');
        p.driver.store_attr(&p, self.name, text)?;
        Ok(data.len() as u32)
    }
}
