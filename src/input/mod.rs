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
use crate::usbcore::sysfs::{set_link, set_text, uevent_text};

mod client;
pub mod codes;
mod device;
pub mod evdev;

pub use codes::*;
use device::Repeater;
pub use device::{InputDevice, InputDriver, InputSpec, KeyLookup};

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
        let text = |path: &str, s: String, perm: u32| set_text(&self.tree, path, s, perm);
        let link = |path: &str, to: &str| set_link(&self.tree, path, to);
        let s = &d.spec;
        text(
            &format!("{dir}/uevent"),
            uevent_text(&d.uevent_vars()),
            0o644,
        );
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
        crate::usbcore::sysfs::class_node(
            &self.tree,
            &format!("{SYS}{}", d.event_devpath()),
            &dir,
            "input",
            &d.event_name(),
            &d.event_vars(),
            (d.major, d.minor),
        );
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
            text(
                &format!("{ld}/trigger"),
                format!("{}\n", triggers(l)),
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

    /// The class devices of `d` for the uevent queue, in the order they
    /// come: the input device, input-leds' LEDs (input-leds is built in,
    /// so it connects before evdev; each LED with a default trigger has it
    /// set by a `change`), evdev's node. They go the LEDs first (their
    /// trigger let go), then the node, then the device.
    pub fn children(&self, d: &InputDevice) -> Vec<crate::usbcore::uevent::ChildDevice> {
        use crate::usbcore::uevent::ChildDevice;
        let id = input_id(&d.spec.caps);
        let child = |devpath: String, subsystem: &str, vars, rank, udev| ChildDevice {
            devpath,
            subsystem: subsystem.into(),
            vars,
            driver: None,
            change_on_add: None,
            change_on_remove: None,
            remove_rank: rank,
            udev,
        };
        let mut out = vec![child(d.devpath(), "input", d.uevent_vars(), 2, id.clone())];
        for &l in &d.leds {
            let mut c = child(d.led_devpath(l), "leds", Vec::new(), 0, Vec::new());
            if let Some(t) = led_trigger(l) {
                c.change_on_add = Some(vec![("TRIGGER".into(), t.into())]);
                c.change_on_remove = Some(vec![("TRIGGER".into(), "none".into())]);
            }
            out.push(c);
        }
        out.push(child(d.event_devpath(), "input", d.event_vars(), 1, id));
        out
    }
}

/// What udev's `input_id` builtin says of a device of `caps`, in its
/// order: `ID_INPUT`, the pointer kind (mouse, tablet, joystick), then
/// keys and a full keyboard.
pub fn input_id(caps: &Capabilities) -> Vec<(String, String)> {
    let key = |c: usize| caps.has(EV_KEY, c as u16);
    let abs = |c: usize| caps.has(EV_ABS, c as u16);
    let rel = |c: usize| caps.has(EV_REL, c as u16);
    let mut p = vec![("ID_INPUT".to_string(), "1".to_string())];
    let has_abs = abs(0) && abs(1);
    let has_rel = rel(0) && rel(1);
    let mouse_button = key(0x110);
    let stylus = key(0x14b) || key(0x140);
    let finger = key(0x145) && !stylus;
    let touch = key(0x14a);
    let direct = caps.prop.test(1);
    let joystick = (0x120..0x140).any(key) || (0x2c0..0x2e8).any(key) || abs(2) || abs(6);
    let (mut mouse, mut tablet, mut touchpad, mut touchscreen, mut joy) =
        (false, false, false, false, false);
    if has_abs {
        if stylus {
            tablet = true;
        } else if finger && !direct {
            touchpad = true;
        } else if mouse_button {
            mouse = true;
        } else if touch || direct {
            touchscreen = true;
        } else if joystick {
            joy = true;
        }
    } else if joystick {
        joy = true;
    }
    if !tablet && !touchpad && !joy && mouse_button && (has_rel || !has_abs) {
        mouse = true;
    }
    for (set, name) in [
        (mouse, "ID_INPUT_MOUSE"),
        (touchpad, "ID_INPUT_TOUCHPAD"),
        (touchscreen, "ID_INPUT_TOUCHSCREEN"),
        (joy, "ID_INPUT_JOYSTICK"),
        (tablet, "ID_INPUT_TABLET"),
    ] {
        if set {
            p.push((name.to_string(), "1".to_string()));
        }
    }
    if (1..0x100).any(key) || (0x160..=0x2ff).any(key) {
        p.push(("ID_INPUT_KEY".into(), "1".into()));
    }
    if (1..32).all(key) {
        p.push(("ID_INPUT_KEYBOARD".into(), "1".into()));
    }
    p
}

/// The LED class's `trigger` file: the triggers a Debian 6.12 kernel has
/// (the VT's keyboard locks, the block and MTD ones, one per CPU, panic,
/// USB's), the LED's own in brackets.
fn triggers(led: u16) -> String {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut all: Vec<String> = [
        "none",
        "kbd-scrolllock",
        "kbd-numlock",
        "kbd-capslock",
        "kbd-kanalock",
        "kbd-shiftlock",
        "kbd-altgrlock",
        "kbd-ctrllock",
        "kbd-altlock",
        "kbd-shiftllock",
        "kbd-shiftrlock",
        "kbd-ctrlllock",
        "kbd-ctrlrlock",
        "disk-activity",
        "disk-read",
        "disk-write",
        "mtd",
        "nand-disk",
        "cpu",
    ]
    .iter()
    .map(|t| t.to_string())
    .collect();
    all.extend((0..cpus).map(|c| format!("cpu{c}")));
    all.extend(["panic", "usb-gadget", "usb-host"].map(String::from));
    let own = led_trigger(led).unwrap_or("none");
    all.iter()
        .map(|t| {
            if t == own {
                format!("[{t}]")
            } else {
                t.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// input-leds' default trigger of LED `led` (`input_led_info`): the VT's
/// lock states, none for the others.
pub fn led_trigger(led: u16) -> Option<&'static str> {
    Some(match led {
        0 => "kbd-numlock",
        1 => "kbd-capslock",
        2 => "kbd-scrolllock",
        4 => "kbd-kanalock",
        _ => return None,
    })
}
