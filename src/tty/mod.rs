//! The tty layer above the USB serial drivers (`drivers/tty/`,
//! `drivers/usb/class/cdc-acm.c`): [`TtyCore`] makes a tty port for every
//! CDC ACM control interface the USB core shows bound to cdc_acm, with its
//! node `dev/ttyACMN` (the lowest free minor of [`ACM_TTY_MAJOR`]), its
//! class device `.../INTERFACE/tty/ttyACMN` with `sys/class/tty/ttyACMN`
//! and `sys/dev/char/166:N`, and cdc_acm's `bmCapabilities` attribute on
//! the control interface. Its uevent comes between the interface's `add`
//! and `bind`, as the kernel sends it ([`TtyCore`] is a [`ChildDevices`]).
//!
//! A port ([`acm::Acm`]) is cdc_acm's: opening it submits the notification
//! URB and the read URBs and raises DTR and RTS, and its line settings,
//! modem lines and breaks go to the device as cdc_acm's class requests,
//! through the same port usbfs uses, so usbmon shows them. What a program
//! reads and writes goes through the n_tty line discipline ([`ldisc`])
//! with the port's termios ([`termios`]); [`mod@file`] is the node's open
//! file.
//!
//! Like usbfs, sysfs and the HID core, nothing here imports the simulator.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::base::sync::LockExt;
use crate::base::vfs::{NodeKind, Tree};
use crate::usbcore::device::{
    DevRef, DeviceChange, DeviceEvent, DeviceWatcher, Interface, UsbCorePort, UsbDevice,
};
use crate::usbcore::sysfs::{device_devpath, interface_name, set_text};
use crate::usbcore::uevent::{ChildDevice, ChildDevices};

pub mod acm;
pub mod file;
pub mod ldisc;
pub mod termios;

use acm::{Acm, AcmLayout};
pub use acm::{ACM_TTY_MAJOR, ACM_TTY_MINORS};

/// Where the sysfs tree starts in the mount.
const SYS: &str = "sys";

#[derive(Default)]
struct State {
    /// By USB device and control interface.
    ports: HashMap<(DevRef, u8), Arc<Acm>>,
    /// By minor.
    minors: BTreeMap<u32, Arc<Acm>>,
    /// Each USB device's active configuration as last seen: a new one
    /// unbinds every interface's driver.
    configs: HashMap<DevRef, u8>,
}

/// The tty layer: the ports cdc_acm's interfaces have, their sysfs and
/// nodes.
pub struct TtyCore {
    tree: Arc<Tree>,
    port: Arc<dyn UsbCorePort>,
    st: Mutex<State>,
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
        });
        for d in ["class/tty", "dev/char"] {
            tree.add(&format!("{SYS}/{d}"), NodeKind::Dir, 0o755);
        }
        port.watch(me.clone());
        let mut devices = port.devices();
        devices.sort_by_key(|d| (d.busnum, d.level, d.port_path.clone()));
        for d in &devices {
            me.update(d);
        }
        me
    }

    /// The port with minor `minor`.
    pub fn by_minor(&self, minor: u32) -> Option<Arc<Acm>> {
        self.st.lock_ok().minors.get(&minor).cloned()
    }

    /// Bring `d`'s ports in line with its interfaces: make those cdc_acm
    /// has now, drop those it no longer has, show them again.
    fn update(&self, d: &UsbDevice) {
        let mut st = self.st.lock_ok();
        let want: Vec<&Interface> = d
            .interfaces
            .iter()
            .filter(|i| i.driver.as_deref() == Some("cdc_acm") && i.class == 2)
            .collect();
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
            let a = match st.ports.get(&(d.dev, i.number)) {
                Some(a) => a.clone(),
                None => match self.make(&mut st, d, i) {
                    Some(a) => a,
                    None => continue,
                },
            };
            self.show(&a);
        }
    }

    /// acm_probe's tty part: a port for control interface `i` of `d` with
    /// the lowest free minor (None: all taken, or the interfaces are not
    /// what cdc_acm needs).
    fn make(&self, st: &mut State, d: &UsbDevice, i: &Interface) -> Option<Arc<Acm>> {
        let cfg = d.config(d.active_config).unwrap_or(&[]);
        let Some(layout) = AcmLayout::parse(cfg, i.number, i.alt) else {
            tracing::warn!(
                device = %d.name(),
                interface = i.number,
                "cdc_acm: the interfaces lack the endpoints it needs: no tty"
            );
            return None;
        };
        let minor = (0..ACM_TTY_MINORS).find(|m| !st.minors.contains_key(m));
        let Some(minor) = minor else {
            tracing::warn!(
                device = %d.name(),
                "cdc_acm: all {ACM_TTY_MINORS} minors taken, no tty"
            );
            return None;
        };
        let iface_devpath = format!("{}/{}", device_devpath(d), interface_name(d, i.number));
        let a = Acm::new(d.dev, minor, layout, iface_devpath, self.port.clone());
        st.ports.insert((d.dev, i.number), a.clone());
        st.minors.insert(minor, a.clone());
        self.tree.add(
            &format!("dev/{}", a.name()),
            NodeKind::File(Arc::new(file::TtyNode {
                port: Arc::downgrade(&a),
            })),
            0o660,
        );
        tracing::info!(device = %d.name(), "{}: USB ACM device", a.name());
        Some(a)
    }

    /// Write port `a`'s sysfs (again).
    fn show(&self, a: &Acm) {
        let iface = format!("{SYS}{}", a.iface_devpath);
        set_text(
            &self.tree,
            &format!("{iface}/bmCapabilities"),
            // (no newline: cdc_acm's show function prints none)
            a.layout.caps.to_string(),
            0o444,
        );
        crate::usbcore::sysfs::class_node(
            &self.tree,
            &format!("{SYS}{}", a.devpath()),
            &iface,
            "tty",
            &a.name(),
            &a.uevent_vars(),
            (ACM_TTY_MAJOR, a.minor),
        );
    }

    /// acm_disconnect: port `k` hangs up and its device goes.
    fn remove(&self, st: &mut State, k: (DevRef, u8)) {
        let Some(a) = st.ports.remove(&k) else {
            return;
        };
        st.minors.remove(&a.minor);
        a.disconnect();
        for p in [
            format!("dev/{}", a.name()),
            format!("{SYS}/class/tty/{}", a.name()),
            format!("{SYS}/dev/char/{ACM_TTY_MAJOR}:{}", a.minor),
            format!("{SYS}{}", a.devpath()),
            format!("{SYS}{}/bmCapabilities", a.iface_devpath),
        ] {
            self.tree.remove(&p);
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
        let Some(a) = self.st.lock_ok().ports.get(&(d.dev, interface)).cloned() else {
            return Vec::new();
        };
        vec![ChildDevice {
            devpath: a.devpath(),
            subsystem: "tty".into(),
            vars: a.uevent_vars(),
            driver: None,
            change_on_add: None,
            change_on_remove: None,
            remove_rank: 0,
            udev: Vec::new(),
        }]
    }
}
