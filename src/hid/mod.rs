//! The HID core above usbhid (`drivers/hid/hid-core.c`, usbhid's probe in
//! `drivers/hid/usbhid/hid-core.c`) and its raw interface, hidraw
//! (`drivers/hid/hidraw.c`, [`hidraw`]).
//!
//! For every interface the USB core shows bound to usbhid with a report
//! descriptor, [`HidCore`] makes the HID device the kernel makes: named
//! `BUS:VVVV:PPPP.NNNN` (the number counts up from 1 and is never reused),
//! under the interface's sysfs directory with its `uevent`, `modalias`,
//! `report_descriptor` and `country` attributes and the `hid-generic`
//! driver's link; and its hidraw node `dev/hidrawN` (the lowest free
//! minor) with `hidraw/hidrawN` below it, `sys/class/hidraw/hidrawN` and
//! `sys/dev/char/MAJOR:N`. The uevents of both come from the uevent queue,
//! between the interface's `add` and its `bind`, as the kernel sends them
//! ([`HidCore`] is its [`ChildDevices`]).
//!
//! Input reports reach hidraw from usbhid's interrupt IN URB (a
//! [`DriverInput`] tap); output, feature and input reports that programs
//! send or ask for go to the device as usbhid sends them, through the same
//! port usbfs uses, so usbmon shows them: hidraw's as new URBs
//! (`usb_control_msg` SET_REPORT and GET_REPORT, `usb_interrupt_msg` on an
//! interrupt OUT endpoint), hid-input's LED changes on usbhid's own URBs
//! (`CoreRequest::HidReport`: usbhid_submit_report).
//!
//! Like usbfs and sysfs, nothing here imports the simulator.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use crate::base::sync::LockExt;
use crate::base::vfs::{NodeKind, Tree};
use crate::usbcore::device::{
    DevRef, DeviceChange, DeviceEvent, DeviceWatcher, DriverInput, Interface, UsbCorePort,
    UsbDevice,
};
use crate::usbcore::sysfs::{
    attribute, device_devpath, interface_name, set_link, set_text, uevent_text, ATTR_SIZE,
};
use crate::usbcore::uevent::{ChildDevice, ChildDevices};

mod device;
pub mod hidraw;
pub mod input;
mod leds;
pub mod report;

pub use device::*;

/// Where the sysfs tree starts in the mount.
const SYS: &str = "sys";

/// What the HID descriptor and the endpoints of interface `ifnum` (its
/// current setting) in configuration `cfg` say: (bcdHID, bCountryCode,
/// interrupt IN endpoint, interrupt OUT endpoint).
fn hid_descriptor(cfg: &[u8], ifnum: u8, alt: u8) -> (u16, u8, Option<u8>, Option<u8>) {
    let (mut bcd, mut country, mut in_ep, mut out_ep) = (0, 0, None, None);
    let mut inside = false;
    for d in crate::usbcore::abi::descriptors(cfg) {
        match d[1] {
            4 if d.len() >= 9 => inside = d[2] == ifnum && d[3] == alt,
            0x21 if inside && d.len() >= 6 => {
                bcd = u16::from_le_bytes([d[2], d[3]]);
                country = d[4];
            }
            5 if inside && d.len() >= 7 && d[3] & 3 == 3 => {
                if d[2] & 0x80 != 0 {
                    in_ep.get_or_insert(d[2]);
                } else {
                    out_ep.get_or_insert(d[2]);
                }
            }
            _ => {}
        }
    }
    (bcd, country, in_ep, out_ep)
}

/// `strscpy` into a kernel buffer of `size` bytes: at most `size - 1`
/// bytes, not cutting a character in two.
fn bounded(s: &str, size: usize) -> String {
    let mut end = s.len().min(size - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

#[derive(Default)]
struct State {
    /// The last HID device number given.
    last_id: u32,
    /// By USB device and interface.
    devices: HashMap<(DevRef, u8), Arc<HidDevice>>,
    /// By hidraw minor.
    minors: BTreeMap<u32, Arc<HidDevice>>,
    /// Each bus's controller name (`bus->bus_name`), from its root hub.
    controllers: HashMap<u16, String>,
    /// Each USB device's active configuration as last seen: a new one
    /// unbinds every interface's driver, and usbhid's new probe makes new
    /// HID devices.
    configs: HashMap<DevRef, u8>,
    /// The LED side of each HID device's input devices.
    drivers: HashMap<(DevRef, u8), Arc<dyn crate::input::InputDriver>>,
}

/// The HID core: the HID devices usbhid's interfaces have, their sysfs and
/// hidraw nodes.
pub struct HidCore {
    tree: Arc<Tree>,
    port: Arc<dyn UsbCorePort>,
    input: Arc<crate::input::InputCore>,
    st: Mutex<State>,
    /// hidraw's major ([`HIDRAW_MAJOR`], or the one reserved for its
    /// character devices).
    major: std::sync::atomic::AtomicU32,
}

impl HidCore {
    /// Make the core, its fixed sysfs directories, and follow `port`'s
    /// devices (register it before the uevent queue, whose
    /// [`ChildDevices`] it is).
    pub fn install(
        tree: &Arc<Tree>,
        port: &Arc<dyn UsbCorePort>,
        input: &Arc<crate::input::InputCore>,
    ) -> Arc<HidCore> {
        let me = Arc::new(HidCore {
            tree: tree.clone(),
            port: port.clone(),
            input: input.clone(),
            st: Mutex::new(State::default()),
            major: std::sync::atomic::AtomicU32::new(HIDRAW_MAJOR),
        });
        for d in [
            "bus/hid/devices",
            "bus/hid/drivers/hid-generic",
            "class/hidraw",
            "dev/char",
        ] {
            tree.add(&format!("{SYS}/{d}"), NodeKind::Dir, 0o755);
        }
        for f in ["bind", "unbind", "uevent"] {
            tree.set(
                &format!("{SYS}/bus/hid/drivers/{HID_GENERIC}/{f}"),
                attribute(Vec::new(), ATTR_SIZE),
                0o200,
            );
        }
        port.watch(me.clone());
        port.tap_input(me.clone());
        let mut devices = port.devices();
        devices.sort_by_key(|d| (d.busnum, d.level, d.port_path.clone()));
        for d in &devices {
            me.update(d);
        }
        me
    }

    /// Serve hidraw's nodes as character devices too (before any HID
    /// device is there): the major `chardevs` reserves for them is
    /// hidraw's from now on, and minor N's device opens whatever HID
    /// device has minor N then. Whether it could.
    pub fn use_char_devices(
        self: &Arc<Self>,
        chardevs: &dyn crate::base::vfs::CharDevices,
    ) -> bool {
        let core = Arc::downgrade(self);
        let node: crate::base::vfs::MinorNode = Arc::new(move |minor| {
            Arc::new(MinorNode {
                core: core.clone(),
                minor,
            }) as Arc<dyn crate::base::vfs::FileNode>
        });
        match chardevs.reserve("hidraw", node) {
            Some(m) => {
                self.major.store(m, std::sync::atomic::Ordering::SeqCst);
                tracing::info!(major = m, "hidraw: character devices (CUSE)");
                true
            }
            None => false,
        }
    }

    /// The HID device with hidraw minor `minor`.
    pub fn by_minor(&self, minor: u32) -> Option<Arc<HidDevice>> {
        self.st.lock_ok().minors.get(&minor).cloned()
    }

    /// Bring `d`'s HID devices in line with its interfaces: make those
    /// usbhid has now, drop those it no longer has, show them again (a
    /// change of the USB device rewrites its interface directories).
    fn update(&self, d: &UsbDevice) {
        let mut st = self.st.lock_ok();
        if let Some(c) = &d.controller {
            st.controllers.insert(d.busnum, c.pci_name.clone());
        }
        let want: Vec<&Interface> = d
            .interfaces
            .iter()
            .filter(|i| i.driver.as_deref() == Some("usbhid") && !i.report_descriptor.is_empty())
            .collect();
        let reconfigured = st.configs.insert(d.dev, d.active_config) != Some(d.active_config);
        let gone: Vec<(DevRef, u8)> = st
            .devices
            .keys()
            .filter(|(r, n)| *r == d.dev && (reconfigured || !want.iter().any(|i| i.number == *n)))
            .copied()
            .collect();
        for k in gone {
            self.remove(&mut st, k);
        }
        for i in want {
            let h = match st.devices.get(&(d.dev, i.number)) {
                Some(h) => h.clone(),
                None => match self.make(&mut st, d, i) {
                    Some(h) => h,
                    None => continue,
                },
            };
            self.show(&h);
        }
    }

    /// `usbhid_probe` and `hid_add_device`: a new HID device for interface
    /// `i` of `d`, with the lowest free hidraw minor (None: all 64 taken,
    /// as `hidraw_connect` fails).
    fn make(&self, st: &mut State, d: &UsbDevice, i: &Interface) -> Option<Arc<HidDevice>> {
        let desc = match report::Descriptor::parse(&i.report_descriptor) {
            Ok(desc) => desc,
            Err(e) => {
                tracing::warn!(
                    device = %d.name(),
                    interface = i.number,
                    "usbhid: probe failed: {e}"
                );
                return None;
            }
        };
        let minor = (0..HIDRAW_MAX_DEVICES).find(|m| !st.minors.contains_key(m));
        let Some(minor) = minor else {
            tracing::warn!(
                device = %d.name(),
                interface = i.number,
                "hidraw: all {HIDRAW_MAX_DEVICES} minors taken, no node"
            );
            return None;
        };
        st.last_id += 1;
        let cfg = d.config(d.active_config).unwrap_or(&[]);
        let (bcd_hid, country, in_ep, out_ep) = hid_descriptor(cfg, i.number, i.alt);
        let mfr = d.string(d.descriptor[14]);
        let prod = d.string(d.descriptor[15]);
        let name = match (mfr, prod) {
            (Some(m), Some(p)) => format!("{m} {p}"),
            (Some(m), None) => m.to_string(),
            (None, Some(p)) => p.to_string(),
            (None, None) => format!("HID {:04x}:{:04x}", d.vendor_id(), d.product_id()),
        };
        let controller = st.controllers.get(&d.busnum).cloned().unwrap_or_default();
        let phys = bounded(
            &format!("usb-{controller}-{}/input{}", d.devpath(), i.number),
            64,
        );
        let h = Arc::new(HidDevice {
            id: st.last_id,
            major: self.major.load(std::sync::atomic::Ordering::SeqCst),
            minor,
            dev: d.dev,
            ifnum: i.number,
            vendor: d.vendor_id(),
            product: d.product_id(),
            country,
            name: bounded(&name, 128),
            phys,
            uniq: bounded(d.string(d.descriptor[16]).unwrap_or(""), 64),
            rdesc: i.report_descriptor.clone(),
            desc,
            version: bcd_hid,
            out_ep,
            in_ep: in_ep.unwrap_or(0x81),
            iface_devpath: format!("{}/{}", device_devpath(d), interface_name(d, i.number)),
            exist: AtomicBool::new(true),
            lists: Mutex::new(Vec::new()),
            input: Mutex::new(None),
            leds: Mutex::new(Vec::new()),
            led_work: AtomicBool::new(false),
        });
        // hid_connect: hid-input first, then hidraw.
        let driver: Arc<dyn crate::input::InputDriver> = Arc::new(leds::LedDriver {
            dev: Arc::downgrade(&h),
            port: self.port.clone(),
        });
        let names = input::Names {
            name: &h.name,
            phys: &h.phys,
            uniq: &h.uniq,
            id: crate::input::InputId {
                bustype: BUS_USB,
                vendor: h.vendor,
                product: h.product,
                version: h.version,
            },
            parent: h.devpath(),
        };
        *h.input.lock_ok() =
            input::HidInput::connect(&h.desc, &names, &self.input, Arc::downgrade(&driver));
        st.drivers.insert((d.dev, i.number), driver);
        st.devices.insert((d.dev, i.number), h.clone());
        st.minors.insert(minor, h.clone());
        self.tree.add(
            &format!("dev/hidraw{minor}"),
            NodeKind::File(Arc::new(hidraw::HidrawNode {
                dev: Arc::downgrade(&h),
                port: self.port.clone(),
            })),
            0o600,
        );
        tracing::debug!(
            hid = %h.dev_name(),
            "hid: {} on {} bound, hidraw{minor}",
            h.name,
            d.name()
        );
        Some(h)
    }

    /// Write the sysfs of HID device `h` (again).
    fn show(&self, h: &HidDevice) {
        let dir = format!("{SYS}{}", h.devpath());
        let text = |path: &str, s: String, perm: u32| set_text(&self.tree, path, s, perm);
        let link = |path: &str, to: &str| set_link(&self.tree, path, to);
        let uevent = format!("DRIVER={HID_GENERIC}\n{}", uevent_text(&h.uevent_vars()));
        text(&format!("{dir}/uevent"), uevent, 0o644);
        text(
            &format!("{dir}/modalias"),
            format!("{}\n", h.modalias()),
            0o444,
        );
        text(
            &format!("{dir}/country"),
            format!("{:02x}\n", h.country),
            0o444,
        );
        self.tree.set(
            &format!("{dir}/report_descriptor"),
            attribute(h.rdesc.clone(), HID_MAX_DESCRIPTOR_SIZE as u64),
            0o444,
        );
        link(&format!("{dir}/subsystem"), &format!("{SYS}/bus/hid"));
        link(
            &format!("{dir}/driver"),
            &format!("{SYS}/bus/hid/drivers/{HID_GENERIC}"),
        );
        link(&format!("{SYS}/bus/hid/devices/{}", h.dev_name()), &dir);
        link(
            &format!("{SYS}/bus/hid/drivers/{HID_GENERIC}/{}", h.dev_name()),
            &dir,
        );
        crate::usbcore::sysfs::class_node(
            &self.tree,
            &format!("{SYS}{}", h.hidraw_devpath()),
            &dir,
            "hidraw",
            &format!("hidraw{}", h.minor),
            &h.hidraw_vars(),
            (h.major, h.minor),
        );
        for d in h.input_devices() {
            self.input.show(&d);
        }
    }

    /// `hid_disconnect` and `hid_destroy_device`: HID device `k` goes.
    fn remove(&self, st: &mut State, k: (DevRef, u8)) {
        let Some(h) = st.devices.remove(&k) else {
            return;
        };
        st.minors.remove(&h.minor);
        st.drivers.remove(&k);
        // hid_disconnect: hid-input's devices go before hidraw's node.
        for d in h.input_devices() {
            self.input.unregister(&d);
        }
        h.gone();
        for p in [
            format!("dev/hidraw{}", h.minor),
            format!("{SYS}/class/hidraw/hidraw{}", h.minor),
            format!("{SYS}/dev/char/{}:{}", h.major, h.minor),
            format!("{SYS}/bus/hid/devices/{}", h.dev_name()),
            format!("{SYS}/bus/hid/drivers/{HID_GENERIC}/{}", h.dev_name()),
            format!("{SYS}{}", h.devpath()),
        ] {
            self.tree.remove(&p);
        }
    }
}

/// Minor N of hidraw's character device: opens the HID device that has
/// minor N now (ENODEV when none has), as the kernel's `hidraw_open`
/// looks its table up.
pub struct MinorNode {
    core: std::sync::Weak<HidCore>,
    minor: u32,
}

impl crate::base::vfs::FileNode for MinorNode {
    fn open(
        &self,
        flags: crate::base::vfs::OpenFlags,
        caller: &crate::base::vfs::Caller,
    ) -> crate::base::errno::SysResult<Arc<dyn crate::base::vfs::OpenFile>> {
        let core = self
            .core
            .upgrade()
            .ok_or(crate::base::errno::Errno::ENODEV)?;
        let dev = core
            .by_minor(self.minor)
            .ok_or(crate::base::errno::Errno::ENODEV)?;
        hidraw::HidrawNode {
            dev: Arc::downgrade(&dev),
            port: core.port.clone(),
        }
        .open(flags, caller)
    }
}

impl DeviceWatcher for HidCore {
    fn changed(&self, event: &DeviceEvent) {
        match &event.change {
            DeviceChange::Added(d) | DeviceChange::Changed(d) => self.update(d),
            DeviceChange::Removed(r) => {
                let mut st = self.st.lock_ok();
                st.configs.remove(r);
                let keys: Vec<(DevRef, u8)> =
                    st.devices.keys().filter(|(x, _)| x == r).copied().collect();
                for k in keys {
                    self.remove(&mut st, k);
                }
            }
        }
    }
}

impl DriverInput for HidCore {
    fn listening(&self, bus: u16) -> bool {
        self.st
            .lock_ok()
            .devices
            .values()
            .any(|h| h.dev.bus == bus && h.has_readers())
    }

    fn input(&self, dev: DevRef, endpoint: u8, data: &[u8]) {
        let hits: Vec<Arc<HidDevice>> = self
            .st
            .lock_ok()
            .devices
            .values()
            .filter(|h| h.dev == dev && h.in_ep == endpoint)
            .cloned()
            .collect();
        for h in hits {
            h.report(data);
        }
    }
}

impl ChildDevices for HidCore {
    fn children(&self, d: &UsbDevice, interface: u8) -> Vec<ChildDevice> {
        let Some(h) = self.st.lock_ok().devices.get(&(d.dev, interface)).cloned() else {
            return Vec::new();
        };
        // hid_disconnect: hid-input's devices (rank 0 to 2) go before
        // hidraw's node, the HID device last.
        let mut out = vec![ChildDevice {
            devpath: h.devpath(),
            subsystem: "hid".into(),
            vars: h.uevent_vars(),
            driver: Some(HID_GENERIC.into()),
            change_on_add: None,
            change_on_remove: None,
            remove_rank: 4,
            udev: Vec::new(),
        }];
        for d in h.input_devices() {
            out.extend(self.input.children(&d));
        }
        out.push(ChildDevice {
            devpath: h.hidraw_devpath(),
            subsystem: "hidraw".into(),
            vars: h.hidraw_vars(),
            driver: None,
            change_on_add: None,
            change_on_remove: None,
            remove_rank: 3,
            udev: Vec::new(),
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hid_descriptor_and_endpoints_of_qemus_keyboard() {
        // qemu's usb-kbd configuration (see sim::usb::device tests).
        let cfg = [
            9, 2, 0x22, 0, 1, 1, 8, 0xa0, 0x32, 9, 4, 0, 0, 1, 3, 1, 1, 0, 9, 0x21, 0x11, 1, 0, 1,
            0x22, 0x3f, 0, 7, 5, 0x81, 3, 8, 0, 7,
        ];
        assert_eq!(hid_descriptor(&cfg, 0, 0), (0x0111, 0, Some(0x81), None));
        assert_eq!(hid_descriptor(&cfg, 1, 0), (0, 0, None, None));
    }

    #[test]
    fn names_are_cut_as_strscpy_cuts_them() {
        assert_eq!(bounded("abc", 3), "ab");
        assert_eq!(bounded("aé", 3), "a");
        assert_eq!(bounded("", 64), "");
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;
    use crate::base::clock::Timestamp;
    use crate::usbcore::device::{CoreError, CoreRequest, DeviceChanges, UrbDone, UrbRequest};
    use crate::usbcore::uevent::UeventQueue;
    use std::time::Duration;

    /// A port with no devices of its own: the test sends the changes.
    pub(super) struct NoPort;
    impl UsbCorePort for NoPort {
        fn devices(&self) -> Vec<UsbDevice> {
            Vec::new()
        }
        fn device(&self, _: DevRef) -> Option<UsbDevice> {
            None
        }
        fn watch(&self, _: Arc<dyn DeviceWatcher>) {}
        fn tap_input(&self, _: Arc<dyn DriverInput>) {}
        fn submit(&self, _: DevRef, _: UrbRequest, _: Arc<dyn UrbDone>) -> Result<u64, CoreError> {
            Err(CoreError::NoDevice)
        }
        fn cancel(&self, _: DevRef, _: u64) -> Result<(), CoreError> {
            Err(CoreError::NoDevice)
        }
        fn request(
            &self,
            _: DevRef,
            _: CoreRequest,
            _: Arc<dyn UrbDone>,
        ) -> Result<u64, CoreError> {
            Err(CoreError::NoDevice)
        }
        fn claim_interface(&self, _: DevRef, _: u8, _: u64) -> Result<(), CoreError> {
            Ok(())
        }
        fn release_interface(&self, _: DevRef, _: u8, _: u64) -> Result<(), CoreError> {
            Ok(())
        }
    }

    fn keyboard(driver: Option<&str>) -> UsbDevice {
        let mut k = crate::usbcore::sysfs::tests::keyboard();
        k.interfaces[0].driver = driver.map(str::to_string);
        k.interfaces[0].report_descriptor = if driver == Some("usbhid") {
            vec![0x05, 0x01, 0x09, 0x06, 0xa1, 0x01, 0xc0]
        } else {
            Vec::new()
        };
        k.probed = driver.is_some();
        k
    }

    /// The kernel's order, measured on Debian's 6.12 in kernel-vm with
    /// qemu's usb-kbd (its input and LED devices aside): the HID device's
    /// `add`, hidraw's, the HID device's `bind` before the interface's; at
    /// the unplug hidraw's `remove`, the HID device's `unbind` (no
    /// MODALIAS) and `remove` before the interface's `unbind`. A detach of
    /// usbhid takes them away the same way, and the next HID device has
    /// the next number and the freed minor.
    #[test]
    fn hid_and_hidraw_events_come_inside_the_interfaces() {
        let tree = Arc::new(Tree::new(0, 0));
        let port: Arc<dyn UsbCorePort> = Arc::new(NoPort);
        let hid = HidCore::install(&tree, &port, &crate::input::InputCore::install(&tree));
        let s = DeviceChanges::default();
        let q = Arc::new(UeventQueue::new());
        q.children_from(hid.clone());
        s.watch(hid.clone());
        s.watch(q.clone());
        for c in [
            DeviceChange::Added(keyboard(None)),
            DeviceChange::Changed(keyboard(Some("usbhid"))),
            DeviceChange::Changed(keyboard(None)),
            DeviceChange::Changed(keyboard(Some("usbhid"))),
            DeviceChange::Removed(keyboard(None).dev),
        ] {
            s.send(Timestamp::default(), c);
        }
        let mut got = Vec::new();
        while let Some(e) = q.next(Duration::ZERO) {
            got.push(format!(
                "{} {} {} {}",
                e.action.name(),
                e.devpath.rsplit('/').next().unwrap(),
                e.get("DRIVER").unwrap_or("-"),
                e.get("MODALIAS").map_or("-", |_| "m")
            ));
        }
        let want = [
            "add 1-1.4 - -",
            "change 1-1.4 usb -",
            "add 1-1.4:1.0 - m",
            "add 0003:1D6B:0104.0001 - m",
            "add hidraw0 - -",
            "bind 0003:1D6B:0104.0001 hid-generic m",
            "bind 1-1.4:1.0 usbhid m",
            "bind 1-1.4 usb -",
            "remove hidraw0 - -",
            "unbind 0003:1D6B:0104.0001 - -",
            "remove 0003:1D6B:0104.0001 - m",
            "unbind 1-1.4:1.0 - -",
            "add 0003:1D6B:0104.0002 - m",
            "add hidraw0 - -",
            "bind 0003:1D6B:0104.0002 hid-generic m",
            "bind 1-1.4:1.0 usbhid m",
            "remove hidraw0 - -",
            "unbind 0003:1D6B:0104.0002 - -",
            "remove 0003:1D6B:0104.0002 - m",
            "unbind 1-1.4:1.0 - -",
            "remove 1-1.4:1.0 - m",
            "unbind 1-1.4 - -",
            "remove 1-1.4 - -",
        ];
        assert_eq!(got, want);
        assert!(tree.resolve("dev/hidraw0").is_err());
        assert!(tree.resolve("sys/class/hidraw/hidraw0").is_err());
    }
}

#[cfg(test)]
mod revoke_tests {
    use super::*;
    use crate::base::errno::Errno;
    use crate::base::vfs::{Caller, CallerMemory, IoctlRequest, OpenFile, OpenFlags};

    struct NoMemory;
    impl CallerMemory for NoMemory {
        fn read(&self, _: u64, _: usize) -> crate::base::errno::SysResult<Vec<u8>> {
            Err(Errno::EFAULT)
        }
        fn write(&self, _: u64, _: &[u8]) -> crate::base::errno::SysResult<()> {
            Err(Errno::EFAULT)
        }
    }

    fn ioctl(f: &dyn OpenFile, cmd: u32, arg: u64) -> Result<i32, Errno> {
        let mem = NoMemory;
        let req = IoctlRequest {
            cmd,
            arg,
            input: &[],
            out_size: 4,
            nonblock: false,
            caller: Caller::default(),
            retry: false,
            file_id: (0, 0),
            mem: &mem,
            compat: false,
        };
        f.ioctl(&req).map(|r| r.result)
    }

    /// HIDIOCREVOKE (hidraw.c, Linux 6.12): EINVAL with an argument; with
    /// none the open file is cut off: its queued reports go, reads,
    /// writes and ioctls give ENODEV, poll POLLERR|POLLHUP, new reports
    /// pass it by; other open files go on.
    #[test]
    fn a_revoked_file_reaches_the_device_no_more() {
        let tree = Arc::new(Tree::new(0, 0));
        let port: Arc<dyn UsbCorePort> = Arc::new(super::order_tests::NoPort);
        let hid = HidCore::install(&tree, &port, &crate::input::InputCore::install(&tree));
        let mut k = crate::usbcore::sysfs::tests::keyboard();
        // A vendor device with a 1-byte input report.
        k.interfaces[0].report_descriptor = vec![
            0x06, 0x00, 0xff, 0x09, 0x01, 0xa1, 0x01, 0x09, 0x01, 0x15, 0x00, 0x26, 0xff, 0x00,
            0x75, 0x08, 0x95, 0x01, 0x81, 0x02, 0xc0,
        ];
        hid.update(&k);
        let crate::base::vfs::NodeKind::File(node) = tree.resolve("dev/hidraw0").unwrap().kind
        else {
            panic!("dev/hidraw0 is a file");
        };
        let flags = OpenFlags {
            flags: libc::O_RDWR,
        };
        let (a, b) = (
            node.open(flags, &Caller::default()).unwrap(),
            node.open(flags, &Caller::default()).unwrap(),
        );
        hid.input(k.dev, 0x81, &[1, 2, 3]);
        assert_eq!(ioctl(&*a, hidraw::HIDIOCREVOKE, 8), Err(Errno::EINVAL));
        assert_eq!(ioctl(&*a, hidraw::HIDIOCREVOKE, 0), Ok(0));
        hid.input(k.dev, 0x81, &[4]);
        assert_eq!(a.read(0, 64), Err(Errno::ENODEV));
        assert_eq!(ioctl(&*a, hidraw::HIDIOCGRDESCSIZE, 0), Err(Errno::ENODEV));
        assert_eq!(ioctl(&*a, hidraw::HIDIOCREVOKE, 0), Err(Errno::ENODEV));
        let hup = (libc::POLLERR | libc::POLLHUP) as u32;
        assert_eq!(a.poll() & hup, hup);
        assert_eq!(b.read(0, 64), Ok(vec![1, 2, 3]));
        assert_eq!(b.read(0, 64), Ok(vec![4]));
        assert_eq!(b.poll() & hup, 0);
    }
}
