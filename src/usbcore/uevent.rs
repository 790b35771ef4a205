//! Hot-plug announcements as the kernel's driver core makes them
//! (`lib/kobject_uevent.c`, `drivers/base/core.c` `dev_uevent`,
//! `drivers/base/dd.c` `driver_bound` and `__device_release_driver`): a
//! [`DeviceWatcher`] that compares each device with what it was and queues
//! the uevents the kernel would have sent, in its order:
//! * a device comes: `add` of the usb_device (`device_add` in
//!   `usb_new_device`), then for each interface `add` and, if a driver
//!   takes it, `bind` (`usb_set_configuration` adds them one by one and
//!   each is probed as it is added: while a simulated class driver probes,
//!   only the first is announced, and each next one after the bind of the
//!   one before), then `bind` of the device to `usb`
//!   (the generic driver's probe returns last); between the device's `add`
//!   and its interfaces', a `change` of the device when its configuration
//!   has the remote wakeup bit (its `power/wakeup` attributes appear as
//!   `usb_set_device_state` makes it wakeup-capable);
//! * a driver is bound to or released from an interface (a class driver,
//!   usbfs claiming it for a program, a detach): `bind` or `unbind`;
//! * a configuration change: `unbind` and `remove` of the old interfaces,
//!   the device's `change` if the new configuration has remote wakeup,
//!   `add` and `bind` of the new ones;
//! * a device goes (`usb_disconnect`): for each interface `unbind` (if it
//!   had a driver) and `remove`, then `unbind` and `remove` of the device.
//!
//! An event's variables are the `uevent` file's (see [`super::sysfs`]), after
//! `ACTION`, `DEVPATH` and `SUBSYSTEM`: `DRIVER` only while a driver is
//! bound (a `bind` has it, an `unbind` no longer), and no `MODALIAS` in an
//! `unbind` (`zap_modalias_env`). `SEQNUM` is the kernel's:
//! the one that broadcasts the event appends it. Altsetting changes send
//! nothing, as in the kernel.
//!
//! The watcher runs on a bus's thread: it only queues (at most
//! [`MAX_QUEUED`] events; past that the oldest are dropped and counted), and
//! a consumer takes them with [`UeventQueue::next`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use super::device::{DevRef, DeviceChange, DeviceEvent, DeviceWatcher, Interface, UsbDevice};
use super::sysfs::{device_devpath, device_uevent, interface_name, interface_uevent};
use crate::base::sync::LockExt;

/// Most events queued for a consumer that does not take them.
pub const MAX_QUEUED: usize = 4096;

/// What happened to a kernel object (`enum kobject_action`, the names of
/// `kobject_actions[]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `add`.
    Add,
    /// `remove`.
    Remove,
    /// `bind`: a driver took it.
    Bind,
    /// `unbind`: its driver let it go.
    Unbind,
    /// `change`: here only a device's wakeup attributes appearing.
    Change,
}

impl Action {
    /// The kernel's name for it.
    pub fn name(self) -> &'static str {
        match self {
            Action::Add => "add",
            Action::Remove => "remove",
            Action::Bind => "bind",
            Action::Unbind => "unbind",
            Action::Change => "change",
        }
    }
}

/// One uevent, as the kernel composes it before it appends `SEQNUM`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uevent {
    /// What happened.
    pub action: Action,
    /// The object's path below `/sys`, from `/devices`.
    pub devpath: String,
    /// The variables, in the kernel's order: `ACTION`, `DEVPATH`,
    /// `SUBSYSTEM`, then the `uevent` file's.
    pub env: Vec<(String, String)>,
    /// The device it is about, as it was then (for udev's properties).
    pub device: Box<UsbDevice>,
    /// The interface number, for an interface's event.
    pub interface: Option<u8>,
    /// Whether the device has left sysfs by the time udev handles the
    /// event: an unplug's (`usb_disconnect` removes the interfaces and the
    /// device at once, before udevd's workers read their attributes).
    pub gone: bool,
    /// The `remove` of an interface its driver let go without an `unbind`
    /// (one it claimed from its probe of an earlier interface): udev's
    /// database still holds what its `bind` wrote, and the `remove`
    /// carries that.
    pub after_bind: bool,
    /// What udev's builtins find in sysfs for a driver's device that its
    /// event does not carry (input_id's classification of an input
    /// device), for udev's properties.
    pub udev: Vec<(String, String)>,
}

impl Uevent {
    /// The value of variable `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The payload the kernel broadcasts, without its `SEQNUM`:
    /// `ACTION@DEVPATH`, then each `KEY=VALUE`, each NUL-terminated.
    pub fn kernel_payload(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(256);
        out.extend_from_slice(self.action.name().as_bytes());
        out.push(b'@');
        out.extend_from_slice(self.devpath.as_bytes());
        out.push(0);
        for (k, v) in &self.env {
            out.extend_from_slice(k.as_bytes());
            out.push(b'=');
            out.extend_from_slice(v.as_bytes());
            out.push(0);
        }
        out
    }
}

/// A device a driver makes below an interface while it binds it (the HID
/// device usbhid adds, and hidraw's node below that), for its uevents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChildDevice {
    /// Its path below `/sys`.
    pub devpath: String,
    /// Its subsystem (`hid`, `hidraw`).
    pub subsystem: String,
    /// Its `uevent` variables without `DRIVER`, in the kernel's order.
    pub vars: Vec<(String, String)>,
    /// The driver that binds it, if one does (`hid-generic`).
    pub driver: Option<String>,
    /// The variables of a `change` right after its `add` (an LED's
    /// default trigger: `TRIGGER=kbd-numlock`), if one follows.
    pub change_on_add: Option<Vec<(String, String)>>,
    /// The variables of a `change` right before its `remove` (the trigger
    /// let go: `TRIGGER=none`), if one comes.
    pub change_on_remove: Option<Vec<(String, String)>>,
    /// Where it goes among its siblings (lower first; the same: in the
    /// order they came). A driver's `disconnect` takes its devices away
    /// in an order of its own.
    pub remove_rank: u8,
    /// What udev's builtins would read from its sysfs ([`Uevent::udev`]).
    pub udev: Vec<(String, String)>,
}

/// Who knows the devices drivers make below interfaces (the HID core).
/// Asked on the stream's thread after it was told of the same change.
pub trait ChildDevices: Send + Sync {
    /// What the driver of interface `interface` of `d` made, parents
    /// first.
    fn children(&self, d: &UsbDevice, interface: u8) -> Vec<ChildDevice>;
}

fn child_event(action: Action, c: &ChildDevice, like: &Uevent) -> Uevent {
    let mut env = vec![
        ("ACTION".to_string(), action.name().to_string()),
        ("DEVPATH".to_string(), c.devpath.clone()),
        ("SUBSYSTEM".to_string(), c.subsystem.clone()),
    ];
    if action == Action::Change {
        // A change's own variables (an LED's trigger), after its add or
        // before its remove.
        let vars = if like.action == Action::Bind {
            &c.change_on_add
        } else {
            &c.change_on_remove
        };
        env.extend(vars.iter().flatten().cloned());
    } else {
        if action == Action::Bind {
            if let Some(d) = &c.driver {
                env.push(("DRIVER".into(), d.clone()));
            }
        }
        env.extend(
            c.vars
                .iter()
                .filter(|(k, _)| action != Action::Unbind || k != "MODALIAS")
                .cloned(),
        );
    }
    Uevent {
        action,
        devpath: c.devpath.clone(),
        env,
        device: like.device.clone(),
        interface: like.interface,
        gone: like.gone,
        after_bind: false,
        udev: c.udev.clone(),
    }
}

/// Put the events of the devices drivers make below interfaces among an
/// interface's: before its `bind`, each child's `add` (parents first),
/// then the `bind` of those a driver takes (children first: a driver's
/// probe makes them); before its `unbind`, or its `remove` when no
/// `unbind` came, each child's `unbind` and `remove` in the order of their
/// [`ChildDevice::remove_rank`]. A child's `change` events come right
/// after its `add` and before its `remove`, when it has them.
/// `announced` keeps what each interface's bind announced, which its
/// going takes back.
fn with_children(
    evs: Vec<Uevent>,
    kids: &[std::sync::Arc<dyn ChildDevices>],
    announced: &mut HashMap<(DevRef, u8), Vec<ChildDevice>>,
) -> Vec<Uevent> {
    let mut out = Vec::with_capacity(evs.len());
    for e in evs {
        let Some(n) = e.interface.filter(|_| e.get("SUBSYSTEM") == Some("usb")) else {
            out.push(e);
            continue;
        };
        let key = (e.device.dev, n);
        match e.action {
            Action::Bind => {
                let c: Vec<ChildDevice> =
                    kids.iter().flat_map(|k| k.children(&e.device, n)).collect();
                for x in &c {
                    out.push(child_event(Action::Add, x, &e));
                    if x.change_on_add.is_some() {
                        out.push(child_event(Action::Change, x, &e));
                    }
                }
                for x in c.iter().rev().filter(|x| x.driver.is_some()) {
                    out.push(child_event(Action::Bind, x, &e));
                }
                if !c.is_empty() {
                    announced.insert(key, c);
                }
            }
            Action::Unbind | Action::Remove => {
                let mut c = announced.remove(&key).unwrap_or_default();
                c.sort_by_key(|x| x.remove_rank);
                for x in &c {
                    if x.change_on_remove.is_some() {
                        out.push(child_event(Action::Change, x, &e));
                    }
                    if x.driver.is_some() {
                        out.push(child_event(Action::Unbind, x, &e));
                    }
                    out.push(child_event(Action::Remove, x, &e));
                }
            }
            _ => {}
        }
        out.push(e);
    }
    out
}

/// `uevent` text lines as variables, without the `DRIVER` line when
/// `driver` is false, and without `MODALIAS` in an `unbind`
/// (`zap_modalias_env`: no module is to be loaded for a device a driver
/// let go).
fn vars(text: &str, driver: bool, action: Action) -> impl Iterator<Item = (String, String)> + '_ {
    text.lines()
        .filter_map(|l| l.split_once('='))
        .filter(move |(k, _)| driver || *k != "DRIVER")
        .filter(move |(k, _)| action != Action::Unbind || *k != "MODALIAS")
        .map(|(k, v)| (k.to_string(), v.to_string()))
}

fn event(
    action: Action,
    devpath: String,
    text: &str,
    driver: bool,
    d: &UsbDevice,
    interface: Option<u8>,
) -> Uevent {
    let mut env = vec![
        ("ACTION".to_string(), action.name().to_string()),
        ("DEVPATH".to_string(), devpath.clone()),
        ("SUBSYSTEM".to_string(), "usb".to_string()),
    ];
    env.extend(vars(text, driver, action));
    Uevent {
        action,
        devpath,
        env,
        device: Box::new(d.clone()),
        interface,
        gone: false,
        after_bind: false,
        udev: Vec::new(),
    }
}

fn device_event(action: Action, d: &UsbDevice) -> Uevent {
    // the generic driver is bound from its probe on, which sets the
    // configuration (a `change` comes from there)
    let bound = action == Action::Bind || action == Action::Change;
    event(action, device_devpath(d), &device_uevent(d), bound, d, None)
}

/// Drivers that take the other interfaces of their function from the
/// probe of its first (`usb_driver_claim_interface`): snd-usb-audio its
/// streaming and MIDI interfaces, uvcvideo its streaming ones.
const CLAIMING_DRIVERS: &[&str] = &["snd-usb-audio", "uvcvideo"];

/// Whether interface `i` of `d` is one its driver claimed from the probe
/// of an earlier interface. The claim binds it before it is added, so its
/// `add` already names the driver (then its `bind` follows); when the
/// device goes, the driver has let it go without an `unbind` before it is
/// removed. Both measured on Debian's 6.12 in qemu with usb-audio
/// (`scripts/kernel-vm`).
fn claimed(d: &UsbDevice, i: &Interface) -> bool {
    let Some(driver) = i.driver.as_deref() else {
        return false;
    };
    CLAIMING_DRIVERS.contains(&driver)
        && d.interfaces
            .iter()
            .take_while(|x| x.number != i.number)
            .any(|x| x.driver.as_deref() == Some(driver))
}

fn interface_event(action: Action, d: &UsbDevice, i: &Interface) -> Uevent {
    let path = format!("{}/{}", device_devpath(d), interface_name(d, i.number));
    // An `add` is sent before any driver probes the interface, unless a
    // driver claimed it first.
    let bound = match action {
        Action::Bind => i.driver.is_some(),
        Action::Add => claimed(d, i),
        _ => false,
    };
    event(
        action,
        path,
        &interface_uevent(d, i),
        bound,
        d,
        Some(i.number),
    )
}

/// The uevents of an interface going (`usb_disable_device`): `unbind` if
/// a driver had it (not one that claimed it: see [`claimed`]), then
/// `remove`.
fn interface_gone(d: &UsbDevice, i: &Interface, out: &mut Vec<Uevent>) {
    let claimed = claimed(d, i);
    if i.driver.is_some() && !claimed {
        out.push(interface_event(Action::Unbind, d, i));
    }
    let mut remove = interface_event(Action::Remove, d, i);
    remove.after_bind = claimed;
    out.push(remove);
}

/// The uevents of an interface coming: `add`, then `bind` if a driver
/// takes it.
fn interface_come(d: &UsbDevice, i: &Interface, out: &mut Vec<Uevent>) {
    out.push(interface_event(Action::Add, d, i));
    if i.driver.is_some() {
        out.push(interface_event(Action::Bind, d, i));
    }
}

/// Whether the device can wake the system: not a root hub (its HCD makes
/// it wakeup-capable before it is registered, with no event), and its
/// active configuration has the remote wakeup bit (`usb_set_device_state`
/// makes it wakeup-capable when it is configured, and
/// `device_set_wakeup_capable` of a registered device adds the `power/wakeup`
/// attributes and sends a `change`; it takes them away without one).
fn can_wake(d: Option<&UsbDevice>) -> bool {
    d.is_some_and(|d| {
        !d.is_root_hub()
            && d.active_config != 0
            && d.config(d.active_config).is_some_and(|c| c[7] & 0x20 != 0)
    })
}

/// The interfaces of `d` the kernel has added by now. `usb_set_configuration`
/// adds them one by one, and each `device_add` probes its driver before the
/// next interface is added: while the device's probe is not over, only its
/// first interface is there; the next come with the drivers' binds (a
/// simulated class driver binds every interface at once), each added after
/// the one before it is bound, as in the kernel.
fn added_interfaces(d: &UsbDevice) -> &[Interface] {
    if d.probed || d.is_root_hub() {
        &d.interfaces
    } else {
        &d.interfaces[..d.interfaces.len().min(1)]
    }
}

/// The uevents that take a device from `old` to `new` (None: not there),
/// `bound` saying whether its `bind` to `usb` was sent; and whether it is
/// bound after them. The simulated class drivers bind a while after the
/// device is added, so the device's `bind` waits for them, to come after
/// its interfaces' as in the kernel.
pub fn events_between(
    old: Option<&UsbDevice>,
    new: Option<&UsbDevice>,
    bound: bool,
) -> (Vec<Uevent>, bool) {
    let mut out = Vec::new();
    match (old, new) {
        (None, Some(n)) => {
            out.push(device_event(Action::Add, n));
            if can_wake(new) {
                out.push(device_event(Action::Change, n));
            }
            for i in added_interfaces(n) {
                interface_come(n, i, &mut out);
            }
        }
        (Some(o), None) => {
            for i in added_interfaces(o) {
                interface_gone(o, i, &mut out);
            }
            if bound {
                out.push(device_event(Action::Unbind, o));
            }
            out.push(device_event(Action::Remove, o));
            for e in &mut out {
                e.gone = true;
            }
            return (out, false);
        }
        (Some(o), Some(n)) if o.active_config != n.active_config => {
            for i in added_interfaces(o) {
                interface_gone(o, i, &mut out);
            }
            // usb_disable_device took the old one's state back to Address
            if can_wake(new) {
                out.push(device_event(Action::Change, n));
            }
            for i in added_interfaces(n) {
                interface_come(n, i, &mut out);
            }
        }
        (Some(o), Some(n)) => {
            for i in added_interfaces(n) {
                match added_interfaces(o).iter().find(|x| x.number == i.number) {
                    None => interface_come(n, i, &mut out),
                    Some(was) if was.driver != i.driver => {
                        if was.driver.is_some() {
                            out.push(interface_event(Action::Unbind, o, was));
                        }
                        if i.driver.is_some() {
                            out.push(interface_event(Action::Bind, n, i));
                        }
                    }
                    Some(_) => {}
                }
            }
            for i in added_interfaces(o) {
                if !added_interfaces(n).iter().any(|x| x.number == i.number) {
                    interface_gone(o, i, &mut out);
                }
            }
        }
        (None, None) => return (out, bound),
    }
    let n = new.expect("a device is there");
    if !bound && n.probed {
        out.push(device_event(Action::Bind, n));
        return (out, true);
    }
    (out, bound)
}

#[derive(Default)]
struct Inner {
    /// Each registered device as the last event left it, and whether its
    /// `bind` was sent.
    devices: HashMap<DevRef, (UsbDevice, bool)>,
    /// The devices each interface's driver made, as its `bind` announced
    /// them.
    children: HashMap<(DevRef, u8), Vec<ChildDevice>>,
    queue: VecDeque<Uevent>,
    /// Taken by the consumer and not yet [`UeventQueue::done`].
    taken: u64,
    dropped: u64,
}

/// The uevents of the simulated topology, queued for one consumer (the
/// announcer of `monfs run`).
#[derive(Default)]
pub struct UeventQueue {
    inner: Mutex<Inner>,
    cv: Condvar,
    kids: std::sync::RwLock<Vec<std::sync::Arc<dyn ChildDevices>>>,
}

impl UeventQueue {
    /// An empty queue; register it with [`super::device::UsbCorePort::watch`].
    pub fn new() -> UeventQueue {
        UeventQueue::default()
    }

    /// Announce the devices `kids` says drivers make below interfaces, after
    /// those of the sources given before (register `kids` with the port
    /// before this queue).
    pub fn children_from(&self, kids: std::sync::Arc<dyn ChildDevices>) {
        self.kids
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(kids);
    }

    /// The next event, waiting at most `timeout` for one; None on timeout.
    pub fn next(&self, timeout: Duration) -> Option<Uevent> {
        let mut g = self.inner.lock_ok();
        loop {
            if let Some(e) = g.queue.pop_front() {
                g.taken += 1;
                return Some(e);
            }
            let (ng, t) = self
                .cv
                .wait_timeout(g, timeout)
                .unwrap_or_else(|e| e.into_inner());
            g = ng;
            if t.timed_out() && g.queue.is_empty() {
                return None;
            }
        }
    }

    /// The consumer is done with an event [`UeventQueue::next`] gave it.
    pub fn done(&self) {
        let mut g = self.inner.lock_ok();
        g.taken = g.taken.saturating_sub(1);
        drop(g);
        self.cv.notify_all();
    }

    /// Wait (at most `timeout`) until every event queued so far has been
    /// announced; whether it was.
    pub fn wait_announced(&self, timeout: Duration) -> bool {
        let end = std::time::Instant::now() + timeout;
        let mut g = self.inner.lock_ok();
        while !(g.queue.is_empty() && g.taken == 0) {
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            g = self
                .cv
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }

    /// Events dropped because the consumer fell [`MAX_QUEUED`] behind.
    pub fn dropped(&self) -> u64 {
        self.inner.lock_ok().dropped
    }
}

impl DeviceWatcher for UeventQueue {
    fn changed(&self, event: &DeviceEvent) {
        let change = &event.change;
        let mut g = self.inner.lock_ok();
        let evs = match change {
            DeviceChange::Added(d) | DeviceChange::Changed(d) => {
                let (old, bound) = match g.devices.remove(&d.dev) {
                    Some((o, b)) => (Some(o), b),
                    None => (None, false),
                };
                let (evs, bound) = events_between(old.as_ref(), Some(d), bound);
                g.devices.insert(d.dev, (d.clone(), bound));
                evs
            }
            DeviceChange::Removed(r) => match g.devices.remove(r) {
                Some((old, bound)) => events_between(Some(&old), None, bound).0,
                _ => Vec::new(),
            },
        };
        if evs.is_empty() {
            return;
        }
        let kids = self.kids.read().unwrap_or_else(|e| e.into_inner()).clone();
        let evs = with_children(evs, &kids, &mut g.children);
        for e in evs {
            if g.queue.len() >= MAX_QUEUED {
                g.queue.pop_front();
                g.dropped += 1;
            }
            g.queue.push_back(e);
        }
        drop(g);
        self.cv.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::Timestamp;

    /// sysfs's test keyboard, at root port 1, with `driver` on its
    /// interface (probed once it has one).
    fn keyboard(driver: Option<&str>) -> UsbDevice {
        let mut d = crate::usbcore::sysfs::tests::keyboard();
        d.port_path = vec![1];
        d.level = 1;
        d.interfaces[0].driver = driver.map(str::to_string);
        d.probed = driver.is_some();
        d
    }

    /// The uevents a queue following a stream of `changes` makes of them.
    fn through_stream(changes: Vec<DeviceChange>) -> Vec<Uevent> {
        let s = crate::usbcore::device::DeviceChanges::default();
        let q = std::sync::Arc::new(UeventQueue::new());
        s.watch(q.clone());
        for c in changes {
            s.send(Timestamp::default(), c);
        }
        let mut evs = Vec::new();
        while let Some(e) = q.next(Duration::ZERO) {
            evs.push(e);
        }
        assert_eq!(q.dropped(), 0);
        evs
    }

    fn summary(evs: &[Uevent]) -> Vec<String> {
        evs.iter()
            .map(|e| {
                format!(
                    "{} {} {}",
                    e.action.name(),
                    e.devpath.rsplit('/').next().unwrap(),
                    e.get("DRIVER").unwrap_or("-")
                )
            })
            .collect()
    }

    #[test]
    fn a_plug_and_an_unplug_in_the_kernels_order() {
        let k = keyboard(Some("usbhid"));
        let (plug, bound) = events_between(None, Some(&k), false);
        assert!(bound);
        assert_eq!(
            summary(&plug),
            [
                "add 1-1 -",
                "change 1-1 usb",
                "add 1-1:1.0 -",
                "bind 1-1:1.0 usbhid",
                "bind 1-1 usb"
            ]
        );
        let (unplug, _) = events_between(Some(&k), None, true);
        assert_eq!(
            summary(&unplug),
            [
                "unbind 1-1:1.0 -",
                "remove 1-1:1.0 -",
                "unbind 1-1 -",
                "remove 1-1 -"
            ]
        );
        let p = String::from_utf8(plug[0].kernel_payload()).unwrap();
        assert_eq!(
            p,
            "add@/devices/platform/monfs_hcd.1/usb1/1-1\0ACTION=add\0\
             DEVPATH=/devices/platform/monfs_hcd.1/usb1/1-1\0SUBSYSTEM=usb\0MAJOR=189\0\
             MINOR=1\0DEVNAME=bus/usb/001/002\0DEVTYPE=usb_device\0PRODUCT=1d6b/104/612\0\
             TYPE=0/0/0\0BUSNUM=001\0DEVNUM=002\0"
        );
        assert_eq!(unplug[0].get("MODALIAS"), None);
        assert!(unplug[1].get("MODALIAS").is_some());
        // the change: the device's variables with the generic driver's
        let c = String::from_utf8(plug[1].kernel_payload()).unwrap();
        assert_eq!(
            c,
            "change@/devices/platform/monfs_hcd.1/usb1/1-1\0ACTION=change\0\
             DEVPATH=/devices/platform/monfs_hcd.1/usb1/1-1\0SUBSYSTEM=usb\0MAJOR=189\0\
             MINOR=1\0DEVNAME=bus/usb/001/002\0DEVTYPE=usb_device\0DRIVER=usb\0\
             PRODUCT=1d6b/104/612\0TYPE=0/0/0\0BUSNUM=001\0DEVNUM=002\0"
        );
        let i = String::from_utf8(plug[3].kernel_payload()).unwrap();
        assert_eq!(
            i,
            "bind@/devices/platform/monfs_hcd.1/usb1/1-1/1-1:1.0\0ACTION=bind\0\
             DEVPATH=/devices/platform/monfs_hcd.1/usb1/1-1/1-1:1.0\0SUBSYSTEM=usb\0\
             DEVTYPE=usb_interface\0DRIVER=usbhid\0PRODUCT=1d6b/104/612\0TYPE=0/0/0\0\
             INTERFACE=3/1/1\0MODALIAS=usb:v1D6Bp0104d0612dc00dsc00dp00ic03isc01ip01in00\0"
        );
    }

    #[test]
    fn a_change_only_with_remote_wakeup_also_at_a_configuration_change() {
        // qemu's usb-storage: bmAttributes 0xc0 (Debian 12's 6.12 sent no change)
        let mut k = keyboard(Some("usbhid"));
        k.configs[0][7] = 0xc0;
        let (plug, _) = events_between(None, Some(&k), false);
        assert_eq!(
            summary(&plug),
            [
                "add 1-1 -",
                "add 1-1:1.0 -",
                "bind 1-1:1.0 usbhid",
                "bind 1-1 usb"
            ]
        );
        // a configuration change to one with remote wakeup: change between
        // the old interfaces' removal and the new ones' add
        let w = keyboard(Some("usbhid"));
        let mut u = w.clone();
        u.active_config = 0;
        u.interfaces.clear();
        let (cfg, _) = events_between(Some(&u), Some(&w), true);
        assert_eq!(
            summary(&cfg),
            ["change 1-1 usb", "add 1-1:1.0 -", "bind 1-1:1.0 usbhid"]
        );
    }

    #[test]
    fn a_driver_detached_and_a_claim_are_unbind_and_bind() {
        let evs = through_stream(vec![
            DeviceChange::Added(keyboard(None)),
            DeviceChange::Changed(keyboard(Some("usbhid"))),
            DeviceChange::Changed(keyboard(None)),
            DeviceChange::Changed(keyboard(Some("usbfs"))),
            DeviceChange::Removed(DevRef { bus: 1, id: 2 }),
        ]);
        assert_eq!(
            summary(&evs),
            [
                "add 1-1 -",
                "change 1-1 usb",
                "add 1-1:1.0 -",
                "bind 1-1:1.0 usbhid",
                "bind 1-1 usb",
                "unbind 1-1:1.0 -",
                "bind 1-1:1.0 usbfs",
                "unbind 1-1:1.0 -",
                "remove 1-1:1.0 -",
                "unbind 1-1 -",
                "remove 1-1 -"
            ]
        );
    }

    /// A device of two interfaces whose driver takes both (snd-usb-audio,
    /// uvcvideo, a composite HID device): the second interface is added
    /// only once the first is bound, as `usb_set_configuration` adds each
    /// after probing the one before; they go in the order they came.
    #[test]
    fn each_interface_is_added_after_the_one_before_is_bound() {
        let two = |driver: Option<&str>| {
            let mut d = keyboard(driver);
            let mut second = d.interfaces[0].clone();
            second.number = 1;
            d.interfaces.push(second);
            d
        };
        let evs = through_stream(vec![
            DeviceChange::Added(two(None)),
            DeviceChange::Changed(two(Some("usbhid"))),
            DeviceChange::Removed(DevRef { bus: 1, id: 2 }),
        ]);
        assert_eq!(
            summary(&evs),
            [
                "add 1-1 -",
                "change 1-1 usb",
                "add 1-1:1.0 -",
                "bind 1-1:1.0 usbhid",
                "add 1-1:1.1 -",
                "bind 1-1:1.1 usbhid",
                "bind 1-1 usb",
                "unbind 1-1:1.0 -",
                "remove 1-1:1.0 -",
                "unbind 1-1:1.1 -",
                "remove 1-1:1.1 -",
                "unbind 1-1 -",
                "remove 1-1 -"
            ]
        );
        // The events carry the whole device (udev's ID_USB_INTERFACES
        // reads every interface's class from its descriptors).
        assert!(evs.iter().all(|e| e.device.interfaces.len() == 2));
        // snd-usb-audio claims the streaming interface from its probe of
        // the control interface: its `add` names the driver, and it goes
        // without an `unbind`.
        let audio = |driver: Option<&str>| {
            let mut d = two(driver);
            d.interfaces.iter_mut().for_each(|i| i.class = 0x01);
            d
        };
        let evs = through_stream(vec![
            DeviceChange::Added(audio(None)),
            DeviceChange::Changed(audio(Some("snd-usb-audio"))),
            DeviceChange::Removed(DevRef { bus: 1, id: 2 }),
        ]);
        assert_eq!(
            summary(&evs)[2..11],
            [
                "add 1-1:1.0 -",
                "bind 1-1:1.0 snd-usb-audio",
                "add 1-1:1.1 snd-usb-audio",
                "bind 1-1:1.1 snd-usb-audio",
                "bind 1-1 usb",
                "unbind 1-1:1.0 -",
                "remove 1-1:1.0 -",
                "remove 1-1:1.1 -",
                "unbind 1-1 -",
            ]
        );
        // Its database entry is still its bind's when it goes.
        let after_bind: Vec<bool> = evs.iter().map(|e| e.after_bind).collect();
        assert_eq!(after_bind.iter().filter(|b| **b).count(), 1);
        assert!(evs[9].after_bind && evs[9].action == Action::Remove);
    }
}
