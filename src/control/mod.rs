//! Live control of the simulators: one command per line, from `monfs ctl`
//! (a Unix socket) or from `echo` into `monfs/ctl` in the mount.
//!
//! ```text
//! plug BUS PORTS KIND [key=value...]   hot-plug a device (PORTS like 3 or 4.1)
//! unplug BUS PORTS                     unplug it (in-flight URBs fail)
//! fault BUS PORTS stall|babble|unlink|submit-error|proto|disconnect
//! pause BUS | resume BUS               stop and restart a bus's traffic
//! zvm sever|reply-fail|overflow        z/VM monitor faults
//! trace SYSTEM:EVENT field=value...    record a trace event
//! replay start|stop|status BUS ...     drive a bus from a capture file
//! help
//! ```
//!
//! `replay start BUS FILE` works only on the socket: `monfs ctl` opens FILE
//! with the caller's own rights and passes the open file with the command
//! (SCM_RIGHTS); the daemon reads only that descriptor, only if it is a
//! regular file, and never opens a path for a caller (FILE then only labels
//! the replay). Through `monfs/ctl` it is refused. `plug BUS PORTS
//! from-capture FILE DEVADDR` takes its capture the same way.
//!
//! A bad command changes nothing and is answered with an explanation (EINVAL
//! on the control file, `error: ...` on the socket) and a log line.
//!
//! For tests only, a daemon started with `MONFS_FAULT_INJECT=1` also takes
//! `panic`, which panics while holding the control lock (see
//! [`Control::enable_fault_injection`]); otherwise `panic` is an unknown
//! command.

use std::collections::{HashMap, VecDeque};
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{Caller, FileNode, OpenFile, OpenFlags};
use crate::capture::recorded::RecordedDevice;
use crate::config::{CaptureFile, DeviceConfig, DeviceKind, ErrorConfig, PortNumber};
use crate::sim::usb::{replay, Fault, UsbSim};
use crate::sim::zvm::{Fault as ZvmFault, Monitor};
use crate::sim::SimError;
use crate::tracefs::Tracing;
use crate::usbcore::device::DevRef;
pub use error::{CtlError, SocketError};
pub use socket::{
    default_socket, ensure_private_dir, peer_cred, run_dir, send, send_with_file, tmp_run_dir,
    ControlSocket, SocketFile, MAX_CONNECTIONS, MAX_LINE, MAX_PASSED_FILES, RUN_DIR,
};

mod error;
mod socket;

/// Usage text, also what reading `monfs/ctl` shows (the kinds follow).
const USAGE: &str = "\
plug BUS PORTS from-capture FILE DEVADDR [interval_ms=N ...]   (monfs ctl only: it opens FILE)
plug BUS PORTS KIND [vendor_id=N product_id=N manufacturer=S product=S serial=S interval_ms=N transfer_size=N rate=N descriptors=FILE]
unplug BUS PORTS
fault BUS PORTS stall|babble|unlink|submit-error|proto|disconnect
pause BUS
resume BUS
zvm sever|reply-fail|overflow
trace SYSTEM:EVENT field=value ...
replay start BUS FILE [speed=F] [loop] [after_ms=N]   (monfs ctl only: it opens FILE)
replay stop BUS
replay status BUS
wait BUS PORTS present|gone [timeout_ms=N]   (a device there, enumerated and its drivers bound; or gone)
wait settled [timeout_ms=N]   (no device on a running bus still coming or going)
help
(PORTS: a root port, or a path through hubs such as 4.1)
";

/// The kinds `plug` takes: every kind but `external` (ctl starts no
/// programs), comma-separated.
fn plug_kinds() -> String {
    let kinds: Vec<&str> = DeviceKind::ALL
        .iter()
        .filter(|k| **k != DeviceKind::External)
        .map(|k| k.name())
        .collect();
    kinds.join(", ")
}

/// Usage text, also what reading `monfs/ctl` shows.
pub fn help() -> String {
    format!("{USAGE}(KIND: {})\n", plug_kinds())
}

/// What the commands act on.
pub struct Control {
    usb: Arc<UsbSim>,
    zvm: Arc<Monitor>,
    tracing: Arc<Tracing>,
    /// Serialises commands so a log shows them in the order applied.
    lock: Mutex<()>,
    /// Whether the test-only `panic` command is accepted.
    fault_inject: AtomicBool,
    /// The memory of devices plugged with `plug` (bus, port path), charged
    /// to the memory budget until they are unplugged (issue 37).
    plugged: Mutex<Vec<(u16, Vec<u8>, crate::base::budget::Grant)>>,
    /// Told of every topology change, for `wait`.
    changes: Arc<Changes>,
    /// The uevents being announced (inside `monfs run`): `wait` returns
    /// only once its device's are out.
    uevents: Mutex<Option<Arc<crate::usbcore::uevent::UeventQueue>>>,
}

/// A device's bus, port path, and whether its probe is over.
type Where = (u16, Vec<u8>, bool);

/// The devices as the core's changes left them (bus, port path, whether
/// probed), the same stream sysfs follows, and a condition to wait for the
/// next change on (`wait` sleeps on it instead of polling).
#[derive(Default)]
struct Changes {
    devices: Mutex<HashMap<DevRef, Where>>,
    /// The number of the last change seen (stored under `devices`'s lock):
    /// a waiter that looked at the buses without that lock sees whether it
    /// missed one.
    seen: AtomicU64,
    cv: std::sync::Condvar,
}

impl crate::usbcore::device::DeviceWatcher for Changes {
    fn changed(&self, event: &crate::usbcore::device::DeviceEvent) {
        use crate::usbcore::device::DeviceChange;
        let mut g = self.devices.lock_ok();
        match &event.change {
            DeviceChange::Added(d) | DeviceChange::Changed(d) => {
                g.insert(d.dev, (d.busnum, d.port_path.clone(), d.probed));
            }
            DeviceChange::Removed(r) => {
                g.remove(r);
            }
        }
        self.seen.store(event.seq, Ordering::SeqCst);
        drop(g);
        self.cv.notify_all();
    }
}

/// The longest `wait` (and its default).
const WAIT_MAX_MS: u64 = 600_000;
const WAIT_DEFAULT_MS: u64 = 30_000;

/// A wait's `timeout_ms=N` (the only key it takes), or the default.
fn wait_timeout<'a>(words: impl Iterator<Item = &'a str>) -> Result<u64, CtlError> {
    let mut ms = WAIT_DEFAULT_MS;
    for kv in words {
        match kv.split_once('=') {
            Some(("timeout_ms", v)) => ms = parse_in("timeout_ms", v, 0, WAIT_MAX_MS)?,
            _ => return Err(CtlError::NotKeyValue(kv.to_string())),
        }
    }
    Ok(ms)
}

fn parse_bus(s: Option<&str>) -> Result<u16, CtlError> {
    let s = s.ok_or(CtlError::Missing("bus number"))?;
    s.parse().map_err(|_| CtlError::BadBus(s.to_string()))
}

fn parse_ports(s: Option<&str>) -> Result<Vec<u8>, CtlError> {
    let s = s.ok_or(CtlError::Missing("port path (e.g. 3 or 4.1)"))?;
    s.split('.')
        .map(|p| match p.parse::<u8>() {
            Ok(n) if (1..=15).contains(&n) => Ok(n),
            _ => Err(CtlError::BadPorts(s.to_string())),
        })
        .collect()
}

fn parse_kind(s: Option<&str>) -> Result<DeviceKind, CtlError> {
    let s = s.ok_or(CtlError::Missing("device kind"))?;
    DeviceKind::ALL
        .iter()
        .copied()
        .find(|k| k.name() == s)
        .ok_or_else(|| CtlError::UnknownKind {
            kind: s.to_string(),
            known: plug_kinds(),
        })
}

fn parse_num(v: &str) -> Result<u64, CtlError> {
    let r = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| CtlError::BadNumber(v.to_string()))
}

/// A number for `key` within `lo..=hi` (never truncated to fit).
fn parse_in<T: TryFrom<u64>>(key: &str, v: &str, lo: u64, hi: u64) -> Result<T, CtlError> {
    let n = parse_num(v)?;
    if !(lo..=hi).contains(&n) {
        return Err(CtlError::OutOfRange {
            key: key.to_string(),
            lo,
            hi,
            value: v.to_string(),
        });
    }
    T::try_from(n).map_err(|_| CtlError::DoesNotFit {
        key: key.to_string(),
        value: v.to_string(),
    })
}

impl Control {
    /// Give back the memory of devices plugged at or behind `ports` of
    /// `bus`, now unplugged.
    fn unplugged(&self, bus: u16, ports: &[u8]) {
        self.plugged
            .lock_ok()
            .retain(|(b, p, _)| !(*b == bus && p.starts_with(ports)));
    }

    /// Control over these facilities and simulators.
    pub fn new(usb: Arc<UsbSim>, zvm: Arc<Monitor>, tracing: Arc<Tracing>) -> Self {
        let changes = Arc::new(Changes::default());
        crate::usbcore::device::UsbCorePort::watch(&*usb, changes.clone());
        Control {
            changes,
            uevents: Mutex::new(None),
            usb,
            zvm,
            tracing,
            lock: Mutex::new(()),
            fault_inject: AtomicBool::new(false),
            plugged: Mutex::new(Vec::new()),
        }
    }

    /// Have `wait` also wait until the uevents queued so far are announced.
    pub fn set_uevents(&self, q: Arc<crate::usbcore::uevent::UeventQueue>) {
        *self.uevents.lock_ok() = Some(q);
    }

    /// Accept the test-only `panic` command, which panics inside the command
    /// handler with the control lock held: tests use it to check that a
    /// panicking request fails alone (EIO) and the daemon keeps serving. The
    /// daemon enables it only when started with `MONFS_FAULT_INJECT=1`.
    pub fn enable_fault_injection(&self) {
        self.fault_inject.store(true, Ordering::Relaxed);
    }

    /// Run one command line that came without a file (`monfs/ctl`); `Ok`
    /// carries a short answer.
    pub fn execute(&self, line: &str) -> Result<String, CtlError> {
        self.execute_with(line, &mut VecDeque::new())
    }

    /// Run one command line; `files` are the descriptors that came with it
    /// on the socket, in order (`replay start` takes the first). Whatever is
    /// slow (loading a capture) happens before the control lock is taken.
    pub fn execute_with(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<String, CtlError> {
        let line = line.trim();
        if line.split_whitespace().next() == Some("wait") {
            // It sleeps: never under the control lock.
            let r = self.wait(line);
            if let Err(e) = &r {
                warn!(command = line, "control command refused: {e}");
            }
            return r;
        }
        let r = self.prepare(line, files).and_then(|replay| {
            let recorded = self.prepare_recorded(line, files)?;
            let descriptors = self.prepare_descriptors(line, files)?;
            let _g = self.lock.lock_ok();
            self.run(line, replay, recorded, descriptors)
        });
        match &r {
            Ok(_) => info!(command = line, "control"),
            Err(e) => warn!(command = line, "control command refused: {e}"),
        }
        r
    }

    /// `wait BUS PORTS present|gone [timeout_ms=N]`: return once a device
    /// at that port path has enumerated and had its drivers bound
    /// (`present`), or none is there (`gone`); woken by the core's device
    /// changes, not by polling.
    fn wait(&self, line: &str) -> Result<String, CtlError> {
        let words = split_words(line)?;
        if words.get(1).map(String::as_str) == Some("settled") {
            return self.wait_settled(&words[2..]);
        }
        let mut w = words.iter().skip(1).map(String::as_str);
        let bus = parse_bus(w.next())?;
        let ports = parse_ports(w.next())?;
        let (present, what) = match w.next() {
            Some("present") => (true, "present"),
            Some("gone") => (false, "gone"),
            _ => return Err(CtlError::Missing("present or gone")),
        };
        let ms = wait_timeout(w)?;
        // Present: registered and probed; gone: not registered (the core's
        // usb_disconnect is over: sysfs no longer has it).
        let done = |g: &HashMap<DevRef, Where>| {
            let mut at = g.values().filter(|(b, p, _)| *b == bus && *p == ports);
            if present {
                at.any(|(_, _, probed)| *probed)
            } else {
                at.next().is_none()
            }
        };
        if !self.wait_until(ms, || done(&self.changes.devices.lock_ok())) {
            return Err(CtlError::WaitTimedOut {
                bus,
                ports: fmt_ports(&ports),
                what,
                ms,
            });
        }
        Ok(format!("bus {bus} port {} {what}", fmt_ports(&ports)))
    }

    /// Sleep on the core's changes until `ready` (asked now, then after
    /// each change), then, inside `monfs run`, until the uevents queued by
    /// then are out: programs hear of a device once they are. False: `ms`
    /// passed first. `ready` takes the locks it needs itself (the buses
    /// call the watchers with their own held); a change between its answer
    /// and the sleep shows in `seen`.
    fn wait_until(&self, ms: u64, mut ready: impl FnMut() -> bool) -> bool {
        let end = std::time::Instant::now() + std::time::Duration::from_millis(ms);
        loop {
            let seen = self.changes.seen.load(Ordering::SeqCst);
            if ready() {
                break;
            }
            let g = self.changes.devices.lock_ok();
            if self.changes.seen.load(Ordering::SeqCst) != seen {
                continue;
            }
            let left = end.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            drop(
                self.changes
                    .cv
                    .wait_timeout(g, left)
                    .unwrap_or_else(|e| e.into_inner()),
            );
        }
        let q = self.uevents.lock_ok().clone();
        q.is_none_or(|q| q.wait_announced(end.saturating_duration_since(std::time::Instant::now())))
    }

    /// `wait settled [timeout_ms=N]`: return once no device on a running
    /// bus is coming or going (every plugged device probed, every unplugged
    /// one disconnected) and, inside `monfs run`, their uevents are out:
    /// what `monfs run` waits for before it starts its command. Woken by
    /// the core's device changes, which every probe and disconnect makes.
    fn wait_settled(&self, words: &[String]) -> Result<String, CtlError> {
        let ms = wait_timeout(words.iter().map(String::as_str))?;
        if !self.wait_until(ms, || !self.usb.settling()) {
            return Err(CtlError::NotSettled { ms });
        }
        Ok("settled".into())
    }

    /// The slow part of a command, done without locks: a `replay` command
    /// is parsed and its capture loaded from the first of `files`.
    fn prepare(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<Option<replay::Prepared>, CtlError> {
        let words = split_words(line)?;
        if words.first().map(String::as_str) != Some("replay") {
            return Ok(None);
        }
        let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        let file = match rest.first() {
            Some(&"start") => files.pop_front().map(std::fs::File::from),
            _ => None,
        };
        Ok(Some(replay::prepare(&rest, file)?))
    }

    /// The slow part of `plug BUS PORTS from-capture FILE DEVADDR`, done
    /// without locks: the device taken from the capture passed with it.
    fn prepare_recorded(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<Option<CaptureFile>, CtlError> {
        let words = split_words(line)?;
        if words.first().map(String::as_str) != Some("plug")
            || words.get(3).map(String::as_str) != Some("from-capture")
        {
            return Ok(None);
        }
        let (Some(name), Some(addr)) = (words.get(4), words.get(5)) else {
            return Err(CtlError::FromCaptureUsage);
        };
        let addr: u8 = parse_in("devaddr", addr, 1, 127)?;
        let Some(file) = files.pop_front().map(std::fs::File::from) else {
            return Err(CtlError::NoCaptureFile);
        };
        let dev = RecordedDevice::load(&file, Path::new(name), addr)?;
        Ok(Some(CaptureFile::taken(dev)))
    }

    /// The slow part of `plug ... descriptors=FILE`, done without locks:
    /// the dump read from the descriptor passed with the command (`monfs
    /// ctl` opens FILE with the caller's rights), else from FILE, by the
    /// rules for every file read on a caller's behalf
    /// ([`crate::capture::read::read_regular`]: a regular file of at most
    /// 1 MiB, no FIFO, no symlink).
    fn prepare_descriptors(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<Option<crate::config::DescriptorFile>, CtlError> {
        let words = split_words(line)?;
        if words.first().map(String::as_str) != Some("plug")
            || words.get(3).map(String::as_str) == Some("from-capture")
        {
            return Ok(None);
        }
        let Some(v) = words
            .iter()
            .skip(4)
            .find_map(|w| w.strip_prefix("descriptors="))
        else {
            return Ok(None);
        };
        let cap = crate::capture::usbdesc::MAX_DUMP_BYTES;
        let bytes = match files.pop_front().map(std::fs::File::from) {
            Some(f) => crate::capture::read::read_regular(&f, cap),
            None => crate::capture::read::read_regular_path(Path::new(v), cap),
        }
        .map_err(|source| CtlError::DescriptorsIo {
            path: v.to_string(),
            source,
        })?;
        let dump = crate::capture::usbdesc::DescriptorDump::parse(bytes).map_err(|source| {
            CtlError::DescriptorsBad {
                path: v.to_string(),
                source,
            }
        })?;
        Ok(Some(crate::config::DescriptorFile {
            path: v.into(),
            full: v.into(),
            dump: Some(std::sync::Arc::new(dump)),
        }))
    }

    fn run(
        &self,
        line: &str,
        replay: Option<replay::Prepared>,
        recorded: Option<CaptureFile>,
        mut descriptors: Option<crate::config::DescriptorFile>,
    ) -> Result<String, CtlError> {
        let words = split_words(line)?;
        let mut w = words.iter().map(String::as_str);
        let Some(cmd) = w.next() else {
            return Err(CtlError::Empty);
        };
        match cmd {
            "help" => Ok(help()),
            "plug" => {
                let bus = parse_bus(w.next())?;
                let ports = parse_ports(w.next())?;
                let kind = parse_kind(w.next())?;
                if kind == DeviceKind::External {
                    return Err(CtlError::ExternalKind);
                }
                let mut dev = DeviceConfig {
                    port: PortNumber(*ports.last().unwrap()),
                    kind,
                    plug_after_ms: 0,
                    unplug_after_ms: None,
                    interval_ms: None,
                    vendor_id: None,
                    product_id: None,
                    manufacturer: None,
                    product: None,
                    serial: None,
                    errors: ErrorConfig::default(),
                    transfer_size: None,
                    rate: None,
                    player: None,
                    descriptors: None,
                    report_descriptors: Default::default(),
                    command: None,
                    socket: None,
                    ep0: Default::default(),
                    ctrl_timeout_ms: None,
                    driver: Default::default(),
                    endpoints: vec![],
                    speed: None,
                    capture: None,
                    devaddr: None,
                    capture_bus: None,
                    replay_timing: None,
                    devnum: None,
                    attributes: Default::default(),
                    udev_properties: Default::default(),
                    devices: Vec::new(),
                };
                if let Some(c) = recorded {
                    // FILE and DEVADDR were taken by `prepare_recorded`.
                    let addr = w.nth(1).and_then(|a| a.parse().ok());
                    dev.devaddr = addr.map(crate::config::DevAddr);
                    dev.descriptors = c.device.as_ref().map(|r| crate::config::DescriptorFile {
                        path: c.path.clone(),
                        full: c.path.clone(),
                        dump: Some(r.dump.clone()),
                    });
                    dev.capture = Some(c);
                }
                for kv in w {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| CtlError::NotKeyValue(kv.to_string()))?;
                    if kind == DeviceKind::FromCapture
                        && matches!(k, "descriptors" | "vendor_id" | "product_id")
                    {
                        return Err(CtlError::FromCapture(k.to_string()));
                    }
                    match k {
                        // Read by `prepare_descriptors`, without the lock.
                        "descriptors" => {
                            dev.descriptors =
                                Some(descriptors.take().ok_or(CtlError::DescriptorsTwice)?)
                        }
                        "vendor_id" => dev.vendor_id = Some(parse_in(k, v, 0, 0xffff)?),
                        "product_id" => dev.product_id = Some(parse_in(k, v, 0, 0xffff)?),
                        "interval_ms" => {
                            dev.interval_ms = Some(parse_in(k, v, 0, u32::MAX as u64)?)
                        }
                        "transfer_size" => {
                            dev.transfer_size = Some(crate::config::TransferSize(parse_in(
                                k,
                                v,
                                1,
                                crate::config::MAX_TRANSFER_SIZE as u64,
                            )?))
                        }
                        "rate" => dev.rate = Some(parse_in(k, v, 1, u32::MAX as u64)?),
                        "manufacturer" => dev.manufacturer = Some(v.to_string()),
                        "product" => dev.product = Some(v.to_string()),
                        "serial" => dev.serial = Some(v.to_string()),
                        _ => return Err(CtlError::UnknownSetting(k.to_string())),
                    }
                }
                if kind == DeviceKind::FromCapture && dev.capture.is_none() {
                    return Err(CtlError::FromCaptureUsage);
                }
                let from_file = matches!(kind, DeviceKind::Descriptors | DeviceKind::FromCapture);
                if from_file != dev.descriptors.is_some() {
                    return Err(CtlError::DescriptorsKind);
                }
                // Its memory first: a device that does not fit in the
                // memory budget is refused, naming the field.
                let need = crate::sim::usb::memory::tree_bytes(&dev);
                let grant =
                    crate::base::budget::MEMORY
                        .take(need)
                        .map_err(|_| CtlError::NoMemory {
                            field: match (kind, dev.transfer_size) {
                                (DeviceKind::Flood, Some(_)) => "transfer_size",
                                _ => "kind",
                            },
                            kib: need.div_ceil(1024),
                        })?;
                self.usb.plug(bus, &ports, &dev)?;
                self.plugged.lock_ok().push((bus, ports.clone(), grant));
                Ok(format!(
                    "plugged {kind:?} on bus {bus} port {}",
                    fmt_ports(&ports)
                ))
            }
            "unplug" => {
                let bus = parse_bus(w.next())?;
                let ports = parse_ports(w.next())?;
                self.usb.unplug(bus, &ports)?;
                self.unplugged(bus, &ports);
                Ok(format!("unplugged bus {bus} port {}", fmt_ports(&ports)))
            }
            "fault" => {
                let bus = parse_bus(w.next())?;
                let ports = parse_ports(w.next())?;
                let what = w.next().ok_or(CtlError::Missing("fault kind"))?;
                let fault = match what {
                    "stall" => Fault::Stall,
                    "babble" => Fault::Babble,
                    "unlink" => Fault::Unlink,
                    "submit-error" => Fault::SubmitError,
                    "proto" => Fault::Proto,
                    "disconnect" => {
                        self.usb.unplug(bus, &ports)?;
                        self.unplugged(bus, &ports);
                        return Ok(format!("disconnected bus {bus} port {}", fmt_ports(&ports)));
                    }
                    _ => return Err(CtlError::UnknownFault(what.to_string())),
                };
                self.usb.inject(bus, &ports, fault)?;
                Ok(format!(
                    "{what} queued for bus {bus} port {}",
                    fmt_ports(&ports)
                ))
            }
            "pause" | "resume" => {
                let bus = parse_bus(w.next())?;
                self.usb.set_paused(bus, cmd == "pause")?;
                Ok(format!("bus {bus} {cmd}d"))
            }
            "zvm" => {
                let what = w.next().ok_or(CtlError::Missing(
                    "z/VM fault (sever, reply-fail, overflow)",
                ))?;
                let f = match what {
                    "sever" => ZvmFault::Sever,
                    "reply-fail" => ZvmFault::ReplyFail,
                    "overflow" => ZvmFault::Overflow,
                    _ => return Err(CtlError::UnknownZvmFault(what.to_string())),
                };
                if self.zvm.inject(f) {
                    Ok(format!("z/VM {what} injected"))
                } else {
                    Err(SimError::NotOpen.into())
                }
            }
            "trace" => {
                let name = w.next().ok_or(CtlError::Missing("SYSTEM:EVENT"))?;
                let (sys, ev) = name
                    .split_once(':')
                    .ok_or_else(|| CtlError::NotEventName(name.to_string()))?;
                let id = self
                    .tracing
                    .event_id(sys, ev)
                    .ok_or_else(|| CtlError::NoEvent(name.to_string()))?;
                let rest = line.splitn(3, char::is_whitespace).nth(2).unwrap_or("");
                self.tracing
                    .inject(&id, rest.as_bytes(), std::process::id())
                    .map_err(|e| CtlError::BadFields {
                        name: name.to_string(),
                        reason: e.to_string(),
                    })?;
                Ok(format!("recorded {name}"))
            }
            "replay" => match replay {
                Some(p) => Ok(replay::run_prepared(&self.usb, p)?),
                None => Err(CtlError::NotPrepared),
            },
            "panic" if self.fault_inject.load(Ordering::Relaxed) => {
                panic!("injected fault: the panic command (MONFS_FAULT_INJECT=1)")
            }
            _ => Err(CtlError::UnknownCommand(cmd.to_string())),
        }
    }
}

/// Split a command line into words; double quotes group words (and are
/// removed), so `product="Hot Stick"` is one word.
pub fn split_words(line: &str) -> Result<Vec<String>, CtlError> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let (mut in_word, mut quoted) = (false, false);
    for c in line.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                in_word = true;
            }
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            c => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quoted {
        return Err(CtlError::UnbalancedQuote);
    }
    if in_word {
        out.push(cur);
    }
    Ok(out)
}

fn fmt_ports(p: &[u8]) -> String {
    p.iter()
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(".")
}

/// `monfs/ctl`: write a command (EINVAL if refused); read the usage.
pub struct CtlNode(pub Arc<Control>);

struct CtlFile(Arc<Control>);

impl OpenFile for CtlFile {
    fn read(&self, offset: u64, size: u32) -> SysResult<Vec<u8>> {
        Ok(crate::base::vfs::slice_at(help().as_bytes(), offset, size))
    }
    fn write(&self, _offset: u64, data: &[u8], _caller: &Caller) -> SysResult<u32> {
        let text = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            self.0.execute(line).map_err(|_| Errno::EINVAL)?;
        }
        Ok(data.len() as u32)
    }
}

impl FileNode for CtlNode {
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(CtlFile(self.0.clone())))
    }
}
