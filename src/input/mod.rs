//! The input core (`drivers/input/input.c`) with its evdev handler
//! (`drivers/input/evdev.c`, [`evdev`]) and input-leds
//! (`drivers/input/input-leds.c`).
//!
//! A driver ([`crate::hid`]'s hid-input) registers an [`InputDevice`] with
//! its capabilities; the core names it `inputN` (N counts up from 0 and is
//! never reused), gives evdev's node `eventN` (the lowest free minor from
//! 64, major 13 or the one reserved for its character devices) and, for
//! each LED it has, input-leds' class device `inputN::NAME`; writes their
//! sysfs below the driver's device (`name`, `phys`, `uniq`, `modalias`,
//! `properties`, `id/`, `capabilities/`, `eventN/`) with the links of
//! `sys/class/input`, `sys/class/leds` and `sys/dev/char`, and makes the
//! node `dev/input/eventN`. [`InputDevice::event`] is `input_event`: the
//! state kept (keys, LEDs, switches, absolute values), events filtered as
//! `input_get_disposition` filters them, frames passed on at each
//! SYN_REPORT, keys repeated by the software autorepeat (250 ms, then
//! every 33 ms) of devices with EV_REP.
//!
//! Like the HID core, nothing here imports the simulator or the USB core.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::base::sync::LockExt;
use crate::base::vfs::{NodeKind, Tree};
use crate::usbcore::sysfs::{attribute, rel, ATTR_SIZE};

mod client;
pub mod codes;
mod device;
pub mod evdev;

pub use codes::*;
pub use device::{InputDevice, InputDriver, InputSpec, Repeater};

/// `INPUT_FIRST_DYNAMIC_DEV`.
const FIRST_DYNAMIC: u32 = 256;
/// `INPUT_MAX_CHAR_DEVICES`.
const MAX_CHAR_DEVICES: u32 = 1024;

/// Which types' bitmaps `capabilities/` shows, in its order, with their
/// file names.
const CAP_FILES: [(&str, u16); 9] = [
    ("ev", EV_SYN),
    ("key", EV_KEY),
    ("rel", EV_REL),
    ("abs", EV_ABS),
    ("msc", EV_MSC),
    ("led", EV_LED),
    ("snd", EV_SND),
    ("ff", EV_FF),
    ("sw", EV_SW),
];

#[derive(Default)]
struct CoreState {
    /// The last `inputN` given (the first is input0).
    next: u32,
    /// By evdev minor.
    minors: BTreeMap<u32, Arc<InputDevice>>,
}

/// The input core: its devices, their sysfs and evdev nodes.
pub struct InputCore {
    tree: Arc<Tree>,
    st: Mutex<CoreState>,
    major: AtomicU32,
    repeater: Arc<Repeater>,
}

/// Where the sysfs tree starts in the mount.
const SYS: &str = "sys";

impl InputCore {
    /// The core and its fixed directories.
    pub fn install(tree: &Arc<Tree>) -> Arc<InputCore> {
        for d in ["class/input", "class/leds", "dev/char"] {
            tree.add(&format!("{SYS}/{d}"), NodeKind::Dir, 0o755);
        }
        tree.add("dev/input", NodeKind::Dir, 0o755);
        Arc::new(InputCore {
            tree: tree.clone(),
            st: Mutex::new(CoreState::default()),
            major: AtomicU32::new(INPUT_MAJOR),
            repeater: Repeater::new(),
        })
    }

    /// Serve evdev's nodes as character devices too: the major `chardevs`
    /// reserves is evdev's from now on, minor M's device opening whatever
    /// device has minor M then. Whether it could.
    pub fn use_char_devices(
        self: &Arc<Self>,
        chardevs: &dyn crate::base::vfs::CharDevices,
    ) -> bool {
        let core = Arc::downgrade(self);
        let node: crate::base::vfs::MinorNode = Arc::new(move |minor| {
            let core = core.clone();
            Arc::new(evdev::MinorNode {
                lookup: Arc::new(move || core.upgrade()?.by_minor(minor)),
            }) as Arc<dyn crate::base::vfs::FileNode>
        });
        match chardevs.reserve("input", node) {
            Some(m) => {
                self.major.store(m, Ordering::SeqCst);
                tracing::info!(major = m, "evdev: character devices (CUSE)");
                true
            }
            None => false,
        }
    }

    /// The device with evdev minor `minor`.
    pub fn by_minor(&self, minor: u32) -> Option<Arc<InputDevice>> {
        self.st.lock_ok().minors.get(&minor).cloned()
    }

    /// `input_register_device` with evdev's and input-leds' connects: the
    /// device, its node and sysfs. None when every minor is taken.
    pub fn register(
        &self,
        mut spec: InputSpec,
        driver: Weak<dyn InputDriver>,
    ) -> Option<Arc<InputDevice>> {
        let mut st = self.st.lock_ok();
        let minor = (EVDEV_MINOR_BASE..EVDEV_MINOR_BASE + EVDEV_MINORS)
            .chain(FIRST_DYNAMIC..MAX_CHAR_DEVICES)
            .find(|m| !st.minors.contains_key(m))?;
        // Every device sends SYN_REPORT; KEY_RESERVED is never sent; the
        // bitmaps of types it lacks are cleared.
        spec.caps.set(EV_SYN, 0);
        spec.caps.bits[EV_KEY as usize].clear(0);
        for t in 1..EV_CNT as u16 {
            if !spec.caps.has_type(t) {
                spec.caps.bits[t as usize] = Bits::new(max_code(t).unwrap_or(0));
            }
        }
        let number = st.next;
        st.next += 1;
        let dev = InputDevice::new(
            number,
            minor,
            self.major.load(Ordering::SeqCst),
            spec,
            driver,
            Arc::downgrade(&self.repeater),
        );
        st.minors.insert(minor, dev.clone());
        drop(st);
        self.tree.add(
            &format!("dev/input/{}", dev.event_name()),
            NodeKind::File(Arc::new(evdev::EvdevNode {
                dev: Arc::downgrade(&dev),
            })),
            0o600,
        );
        self.show(&dev);
        tracing::debug!(
            input = %dev.dev_name(),
            "input: {} as {}, {}",
            dev.spec.name,
            dev.devpath(),
            dev.event_name()
        );
        Some(dev)
    }

    /// Write the sysfs of `d` (again).
    pub fn show(&self, d: &InputDevice) {
        let dir = format!("{SYS}{}", d.devpath());
        let text = |path: &str, s: String, perm: u32| {
            self.tree
                .set(path, attribute(s.into_bytes(), ATTR_SIZE), perm)
        };
        let link = |path: &str, to: &str| {
            self.tree
                .set(path, NodeKind::Symlink(rel(parent(path), to)), 0o777)
        };
        let s = &d.spec;
        let mut uevent = String::new();
        for (k, v) in d.uevent_vars() {
            uevent.push_str(&format!("{k}={v}\n"));
        }
        text(&format!("{dir}/uevent"), uevent, 0o644);
        text(&format!("{dir}/name"), format!("{}\n", s.name), 0o444);
        text(&format!("{dir}/phys"), format!("{}\n", s.phys), 0o444);
        text(&format!("{dir}/uniq"), format!("{}\n", s.uniq), 0o444);
        text(
            &format!("{dir}/modalias"),
            format!("{}\n", s.caps.modalias(&s.id)),
            0o444,
        );
        text(
            &format!("{dir}/properties"),
            format!("{}\n", s.caps.prop.print(PROP_MAX)),
            0o444,
        );
        text(&format!("{dir}/inhibited"), "0\n".into(), 0o644);
        for (f, v) in [
            ("bustype", s.id.bustype),
            ("vendor", s.id.vendor),
            ("product", s.id.product),
            ("version", s.id.version),
        ] {
            text(&format!("{dir}/id/{f}"), format!("{v:04x}\n"), 0o444);
        }
        for (f, ty) in CAP_FILES {
            text(
                &format!("{dir}/capabilities/{f}"),
                format!(
                    "{}\n",
                    s.caps.bits[ty as usize].print(max_code(ty).unwrap_or(0))
                ),
                0o444,
            );
        }
        link(&format!("{dir}/subsystem"), &format!("{SYS}/class/input"));
        link(&format!("{dir}/device"), &format!("{SYS}{}", s.parent));
        link(&format!("{SYS}/class/input/{}", d.dev_name()), &dir);
        let ev = format!("{SYS}{}", d.event_devpath());
        let mut uevent = String::new();
        for (k, v) in d.event_vars() {
            uevent.push_str(&format!("{k}={v}\n"));
        }
        text(&format!("{ev}/uevent"), uevent, 0o644);
        text(
            &format!("{ev}/dev"),
            format!("{}:{}\n", d.major, d.minor),
            0o444,
        );
        link(&format!("{ev}/subsystem"), &format!("{SYS}/class/input"));
        link(&format!("{ev}/device"), &dir);
        link(&format!("{SYS}/class/input/{}", d.event_name()), &ev);
        link(&format!("{SYS}/dev/char/{}:{}", d.major, d.minor), &ev);
        for &l in &d.leds {
            let ld = format!("{SYS}{}", d.led_devpath(l));
            text(&format!("{ld}/uevent"), String::new(), 0o644);
            text(&format!("{ld}/max_brightness"), "1\n".into(), 0o444);
            let on = d.state_bits(EV_LED).test(l as usize);
            text(
                &format!("{ld}/brightness"),
                format!("{}\n", u8::from(on)),
                0o644,
            );
            link(&format!("{ld}/subsystem"), &format!("{SYS}/class/leds"));
            link(&format!("{ld}/device"), &dir);
            link(&format!("{SYS}/class/leds/{}", d.led_name(l)), &ld);
        }
    }

    /// `input_unregister_device`: keys released, clients hung up, the
    /// node and sysfs gone.
    pub fn unregister(&self, d: &Arc<InputDevice>) {
        if self.st.lock_ok().minors.remove(&d.minor).is_none() {
            return;
        }
        d.disconnect();
        let mut paths = vec![
            format!("dev/input/{}", d.event_name()),
            format!("{SYS}/class/input/{}", d.event_name()),
            format!("{SYS}/class/input/{}", d.dev_name()),
            format!("{SYS}/dev/char/{}:{}", d.major, d.minor),
        ];
        for &l in &d.leds {
            paths.push(format!("{SYS}/class/leds/{}", d.led_name(l)));
        }
        paths.push(format!("{SYS}{}", d.devpath()));
        for p in paths {
            self.tree.remove(&p);
        }
    }

    /// The class devices of `d` for the uevent queue, parents first: the
    /// input device, evdev's node, input-leds' LEDs.
    pub fn children(&self, d: &InputDevice) -> Vec<crate::usbcore::uevent::ChildDevice> {
        use crate::usbcore::uevent::ChildDevice;
        let mut out = vec![
            ChildDevice {
                devpath: d.devpath(),
                subsystem: "input".into(),
                vars: d.uevent_vars(),
                driver: None,
            },
            ChildDevice {
                devpath: d.event_devpath(),
                subsystem: "input".into(),
                vars: d.event_vars(),
                driver: None,
            },
        ];
        for &l in &d.leds {
            out.push(ChildDevice {
                devpath: d.led_devpath(l),
                subsystem: "leds".into(),
                vars: Vec::new(),
                driver: None,
            });
        }
        out
    }
}

/// The directory part of a tree path.
fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(p, _)| p)
}
