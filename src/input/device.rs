//! An input device as the core keeps it (`struct input_dev`): its
//! state, `input_event` and the dispositions of `input_get_disposition`,
//! frames passed to the open evdev files at each SYN_REPORT, and the
//! software autorepeat.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::base::sync::LockExt;

use super::client::{Client, Stamps};
use super::codes::*;

/// A new input device as its driver describes it.
#[derive(Clone, Debug, Default)]
pub struct InputSpec {
    /// `name`.
    pub name: String,
    /// `phys`.
    pub phys: String,
    /// `uniq`.
    pub uniq: String,
    /// `id`.
    pub id: InputId,
    /// The capabilities.
    pub caps: Capabilities,
    /// Each absolute axis's range (by code).
    pub absinfo: BTreeMap<u16, AbsInfo>,
    /// The path of its parent device below `/sys`.
    pub parent: String,
}

/// The driver side of an input device (`dev->event`): events handlers
/// send to the device (LEDs).
pub trait InputDriver: Send + Sync {
    /// `dev->event(dev, type, code, value)`.
    fn event(&self, ty: u16, code: u16, value: i32);
    /// `dev->getkeycode`: the key map's entry by scan code or by index
    /// ([`KeyLookup`]): (key code, index, scan code). None: no such entry
    /// (EINVAL).
    fn keycode(&self, _by: KeyLookup) -> Option<(u32, u32, u32)> {
        None
    }
}

/// How EVIOCGKEYCODE looks an entry of the key map up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyLookup {
    /// By scan code (a HID usage, page and ID).
    Scancode(u32),
    /// By position (`INPUT_KEYMAP_BY_INDEX`).
    Index(u32),
}

/// The device's state (`dev->key`, `led`, ...), under its event lock.
pub(super) struct State {
    pub(super) key: Bits,
    pub(super) led: Bits,
    pub(super) snd: Bits,
    pub(super) sw: Bits,
    pub(super) abs: BTreeMap<u16, AbsInfo>,
    pub(super) rep: [i32; 2],
    /// Values of the frame being built (`dev->vals`).
    vals: Vec<(u16, u16, i32)>,
    /// The evdev client that grabbed the device.
    pub(super) grab: Option<u64>,
    /// Bumped by every key event: a repeat timer of an older one is void.
    repeat_gen: u64,
    repeat_key: u16,
}

/// A registered input device (`struct input_dev` with evdev's `struct
/// evdev`).
pub struct InputDevice {
    /// N of `inputN`.
    pub number: u32,
    /// evdev's minor.
    pub minor: u32,
    /// evdev's major.
    pub major: u32,
    /// What the driver gave.
    pub spec: InputSpec,
    /// The LEDs input-leds made class devices of (codes).
    pub leds: Vec<u16>,
    pub(super) st: Mutex<State>,
    driver: Weak<dyn InputDriver>,
    exist: AtomicBool,
    pub(super) clients: Mutex<Vec<Weak<Client>>>,
    repeater: Weak<Repeater>,
    me: Weak<InputDevice>,
}

impl State {
    /// The state bitmap of type `ty`: keys, LEDs, sounds, else switches.
    pub(super) fn bits(&self, ty: u16) -> &Bits {
        match ty {
            EV_KEY => &self.key,
            EV_LED => &self.led,
            EV_SND => &self.snd,
            _ => &self.sw,
        }
    }
}

impl InputDevice {
    /// A registered device: `inputN`, evdev's `major`:`minor`, input-leds'
    /// LEDs of those `spec` has, the repeat of a device with EV_REP.
    pub(super) fn new(
        number: u32,
        minor: u32,
        major: u32,
        spec: InputSpec,
        driver: Weak<dyn InputDriver>,
        repeater: Weak<Repeater>,
    ) -> Arc<InputDevice> {
        let rep = if spec.caps.has_type(EV_REP) {
            [250, 33]
        } else {
            [0, 0]
        };
        let leds = spec.caps.bits[EV_LED as usize]
            .ones()
            .filter(|l| *l < LED_NAMES.len())
            .map(|l| l as u16)
            .collect();
        let abs = spec.absinfo.clone();
        Arc::new_cyclic(|me| InputDevice {
            number,
            minor,
            major,
            spec,
            leds,
            st: Mutex::new(State {
                key: Bits::new(0x2ff),
                led: Bits::new(0x0f),
                snd: Bits::new(0x07),
                sw: Bits::new(0x10),
                abs,
                rep,
                vals: Vec::new(),
                grab: None,
                repeat_gen: 0,
                repeat_key: 0,
            }),
            driver,
            exist: AtomicBool::new(true),
            clients: Mutex::new(Vec::new()),
            repeater,
            me: me.clone(),
        })
    }
}

/// `INPUT_PASS_TO_HANDLERS`, `INPUT_PASS_TO_DEVICE`, `INPUT_FLUSH`.
const PASS_HANDLERS: u8 = 1;
const PASS_DEVICE: u8 = 2;
const FLUSH: u8 = 8;

impl InputDevice {
    /// `inputN`.
    pub fn dev_name(&self) -> String {
        format!("input{}", self.number)
    }
    /// `eventN` (`event` and the minor past the legacy ones).
    pub fn event_name(&self) -> String {
        let n = if self.minor < EVDEV_MINOR_BASE + EVDEV_MINORS {
            self.minor - EVDEV_MINOR_BASE
        } else {
            self.minor
        };
        format!("event{n}")
    }
    /// Its path below `/sys`.
    pub fn devpath(&self) -> String {
        format!("{}/input/{}", self.spec.parent, self.dev_name())
    }
    /// evdev's node's path below `/sys`.
    pub fn event_devpath(&self) -> String {
        format!("{}/{}", self.devpath(), self.event_name())
    }
    /// The LED class device of `led`'s path below `/sys`.
    pub fn led_devpath(&self, led: u16) -> String {
        format!("{}/{}", self.devpath(), self.led_name(led))
    }
    /// `inputN::NAME`.
    pub fn led_name(&self, led: u16) -> String {
        format!(
            "{}::{}",
            self.dev_name(),
            LED_NAMES.get(led as usize).unwrap_or(&"misc")
        )
    }
    /// Whether it is still registered.
    pub fn exists(&self) -> bool {
        self.exist.load(Ordering::SeqCst)
    }

    /// `input_dev_uevent`'s variables, in its order.
    pub fn uevent_vars(&self) -> Vec<(String, String)> {
        let s = &self.spec;
        let c = &s.caps;
        let mut v = vec![(
            "PRODUCT".to_string(),
            format!(
                "{:x}/{:x}/{:x}/{:x}",
                s.id.bustype, s.id.vendor, s.id.product, s.id.version
            ),
        )];
        v.push(("NAME".into(), format!("\"{}\"", s.name)));
        v.push(("PHYS".into(), format!("\"{}\"", s.phys)));
        v.push(("UNIQ".into(), format!("\"{}\"", s.uniq)));
        v.push(("PROP".into(), c.prop.print(PROP_MAX)));
        v.push(("EV".into(), c.bits[0].print(0x1f)));
        for (name, ty) in [
            ("KEY", EV_KEY),
            ("REL", EV_REL),
            ("ABS", EV_ABS),
            ("MSC", EV_MSC),
            ("LED", EV_LED),
            ("SND", EV_SND),
            ("FF", EV_FF),
            ("SW", EV_SW),
        ] {
            if c.has_type(ty) {
                v.push((
                    name.into(),
                    c.bits[ty as usize].print(max_code(ty).unwrap_or(0)),
                ));
            }
        }
        v.push(("MODALIAS".into(), c.modalias(&s.id)));
        v
    }

    /// evdev's node's variables.
    pub fn event_vars(&self) -> Vec<(String, String)> {
        vec![
            ("MAJOR".into(), self.major.to_string()),
            ("MINOR".into(), self.minor.to_string()),
            ("DEVNAME".into(), format!("input/{}", self.event_name())),
        ]
    }

    /// `input_event`: an event from the driver.
    pub fn event(&self, ty: u16, code: u16, value: i32) {
        if ty != EV_SYN && !self.spec.caps.has_type(ty) {
            return;
        }
        let mut st = self.st.lock_ok();
        self.handle(&mut st, ty, code, value);
    }

    /// `input_inject_event` from the evdev client `from`: ignored while
    /// another client holds the device grabbed.
    pub(crate) fn inject(&self, from: u64, ty: u16, code: u16, value: i32) {
        if ty != EV_SYN && !self.spec.caps.has_type(ty) {
            return;
        }
        let mut st = self.st.lock_ok();
        if st.grab.is_some_and(|g| g != from) {
            return;
        }
        self.handle(&mut st, ty, code, value);
    }

    /// `input_handle_event`.
    fn handle(&self, st: &mut State, ty: u16, code: u16, mut value: i32) {
        let caps = &self.spec.caps;
        let mut d = 0u8;
        match ty {
            EV_SYN if code == SYN_REPORT => d = PASS_HANDLERS | FLUSH,
            EV_SYN if code == 2 => d = PASS_HANDLERS,
            EV_SYN if code == 1 => d = PASS_HANDLERS | PASS_DEVICE,
            EV_KEY if caps.has(ty, code) => {
                if value == 2 {
                    d = PASS_HANDLERS;
                } else if st.key.test(code as usize) != (value != 0) {
                    if value != 0 {
                        st.key.set(code as usize);
                    } else {
                        st.key.clear(code as usize);
                    }
                    d = PASS_HANDLERS;
                }
            }
            EV_SW if caps.has(ty, code) && st.sw.test(code as usize) != (value != 0) => {
                flip(&mut st.sw, code, value);
                d = PASS_HANDLERS;
            }
            EV_ABS if caps.has(ty, code) => {
                if let Some(a) = st.abs.get_mut(&code) {
                    value = defuzz(value, a.value, a.fuzz);
                    if a.value != value {
                        a.value = value;
                        d = PASS_HANDLERS;
                    }
                }
            }
            EV_REL if caps.has(ty, code) && value != 0 => d = PASS_HANDLERS,
            EV_MSC if caps.has(ty, code) => d = PASS_HANDLERS | PASS_DEVICE,
            EV_LED if caps.has(ty, code) && st.led.test(code as usize) != (value != 0) => {
                flip(&mut st.led, code, value);
                d = PASS_HANDLERS | PASS_DEVICE;
            }
            EV_SND if caps.has(ty, code) => {
                flip(&mut st.snd, code, value);
                d = PASS_HANDLERS | PASS_DEVICE;
            }
            EV_REP if code <= 1 && value >= 0 && st.rep[code as usize] != value => {
                st.rep[code as usize] = value;
                d = PASS_HANDLERS | PASS_DEVICE;
            }
            EV_FF if value >= 0 => d = PASS_HANDLERS | PASS_DEVICE,
            _ => {}
        }
        if d == 0 {
            return;
        }
        if d & PASS_DEVICE != 0 {
            if let Some(drv) = self.driver.upgrade() {
                drv.event(ty, code, value);
            }
        }
        if d & PASS_HANDLERS != 0 {
            st.vals.push((ty, code, value));
        }
        if d & FLUSH != 0 {
            if st.vals.len() >= 2 {
                let vals = std::mem::take(&mut st.vals);
                self.pass(st, &vals);
            }
            st.vals.clear();
        } else if st.vals.len() >= MAX_VALS - 2 {
            st.vals.push((EV_SYN, SYN_REPORT, 1));
            let vals = std::mem::take(&mut st.vals);
            self.pass(st, &vals);
        }
    }

    /// `input_pass_values`: a frame to the grabbing client or to every
    /// one, then the autorepeat started or stopped by its key events.
    fn pass(&self, st: &mut State, vals: &[(u16, u16, i32)]) {
        let clients: Vec<Arc<Client>> = {
            let mut c = self.clients.lock_ok();
            c.retain(|w| w.strong_count() > 0);
            c.iter().filter_map(Weak::upgrade).collect()
        };
        // The clocks are read once a frame, and only for someone.
        if !clients.is_empty() {
            let now = Stamps::now();
            for c in clients.iter().filter(|c| st.grab.is_none_or(|g| g == c.id)) {
                c.pass(vals, &now);
            }
        }
        if self.spec.caps.has_type(EV_REP) && self.spec.caps.has_type(EV_KEY) {
            for &(ty, code, value) in vals {
                if ty == EV_KEY && value != 2 {
                    st.repeat_gen += 1;
                    if value != 0 && st.rep[0] > 0 && st.rep[1] > 0 {
                        st.repeat_key = code;
                        if let Some(r) = self.repeater.upgrade() {
                            r.schedule(st.rep[0] as u64, st.repeat_gen, &self.me());
                        }
                    }
                }
            }
        }
    }

    fn me(&self) -> Weak<InputDevice> {
        self.me.clone()
    }

    /// `input_repeat_key`: the repeat timer of generation `gen` fired.
    fn repeat(&self, gen: u64) {
        let mut st = self.st.lock_ok();
        let code = st.repeat_key;
        if st.repeat_gen != gen || !self.exists() || !st.key.test(code as usize) {
            return;
        }
        self.handle(&mut st, EV_KEY, code, 2);
        self.handle(&mut st, EV_SYN, SYN_REPORT, 1);
        // The frame's own key event bumped nothing (value 2).
        if st.rep[1] > 0 {
            if let Some(r) = self.repeater.upgrade() {
                r.schedule(st.rep[1] as u64, gen, &self.me());
            }
        }
    }

    /// `input_disconnect_device`: pressed keys released, handlers closed.
    pub(super) fn disconnect(&self) {
        let mut st = self.st.lock_ok();
        let pressed: Vec<usize> = st.key.ones().collect();
        for k in &pressed {
            self.handle(&mut st, EV_KEY, *k as u16, 0);
        }
        if !pressed.is_empty() {
            self.handle(&mut st, EV_SYN, SYN_REPORT, 1);
        }
        st.repeat_gen += 1;
        drop(st);
        self.exist.store(false, Ordering::SeqCst);
        for c in self.clients.lock_ok().iter().filter_map(Weak::upgrade) {
            c.wake();
        }
    }

    /// `input_get_keycode` through its driver.
    pub(super) fn keycode(&self, by: KeyLookup) -> Option<(u32, u32, u32)> {
        self.driver.upgrade()?.keycode(by)
    }

    /// Whether an evdev file of it is open.
    pub fn has_clients(&self) -> bool {
        self.clients.lock_ok().iter().any(|w| w.strong_count() > 0)
    }

    /// Whether key `code` is down (`test_bit(code, dev->key)`).
    pub fn key_down(&self, code: u16) -> bool {
        self.st.lock_ok().key.test(code as usize)
    }

    /// A copy of a state bitmap (`EVIOCGKEY` and the like).
    pub(crate) fn state_bits(&self, ty: u16) -> Bits {
        self.st.lock_ok().bits(ty).clone()
    }
}

fn flip(b: &mut Bits, code: u16, value: i32) {
    if value != 0 {
        b.set(code as usize);
    } else {
        b.clear(code as usize);
    }
}

/// `input_defuzz_abs_event`.
fn defuzz(value: i32, old: i32, fuzz: i32) -> i32 {
    if fuzz != 0 {
        if value > old - fuzz / 2 && value < old + fuzz / 2 {
            return old;
        }
        if value > old - fuzz && value < old + fuzz {
            return (old * 3 + value) / 4;
        }
        if value > old - fuzz * 2 && value < old + fuzz * 2 {
            return (old + value) / 2;
        }
    }
    value
}

/// The most values a frame holds before the core cuts it with a
/// SYN_REPORT of its own (`max_vals`; devices here send fewer).
const MAX_VALS: usize = 64;

/// The software autorepeat's timers, on one thread for the core.
pub struct Repeater {
    timers: Mutex<Vec<(Instant, u64, Weak<InputDevice>)>>,
    cv: Condvar,
    started: AtomicBool,
}

impl Repeater {
    pub(super) fn new() -> Arc<Repeater> {
        Arc::new(Repeater {
            timers: Mutex::new(Vec::new()),
            cv: Condvar::new(),
            started: AtomicBool::new(false),
        })
    }

    fn schedule(self: &Arc<Self>, ms: u64, gen: u64, dev: &Weak<InputDevice>) {
        {
            let mut t = self.timers.lock_ok();
            // One timer per device (`mod_timer`).
            t.retain(|(_, _, d)| !d.ptr_eq(dev));
            t.push((Instant::now() + Duration::from_millis(ms), gen, dev.clone()));
        }
        self.cv.notify_all();
        if !self.started.swap(true, Ordering::SeqCst) {
            let me = Arc::downgrade(self);
            let _ = std::thread::Builder::new()
                .name("input-repeat".into())
                .spawn(move || Repeater::run(me));
        }
    }

    fn run(me: Weak<Repeater>) {
        loop {
            let Some(r) = me.upgrade() else { return };
            let due = {
                let mut t = r.timers.lock_ok();
                let now = Instant::now();
                let due: Vec<(u64, Weak<InputDevice>)> = t
                    .iter()
                    .filter(|(at, _, _)| *at <= now)
                    .map(|(_, g, d)| (*g, d.clone()))
                    .collect();
                t.retain(|(at, _, d)| *at > now && d.strong_count() > 0);
                if due.is_empty() {
                    let wait = t
                        .iter()
                        .map(|(at, _, _)| at.saturating_duration_since(now))
                        .min()
                        .unwrap_or(Duration::from_secs(1));
                    let _ = r.cv.wait_timeout(t, wait);
                    continue;
                }
                due
            };
            for (gen, d) in due {
                if let Some(d) = d.upgrade() {
                    d.repeat(gen);
                }
            }
        }
    }
}
