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

use std::collections::VecDeque;
use std::io::{IoSlice, IoSliceMut, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use nix::sys::socket::{
    getsockopt, recvmsg, sendmsg, sockopt, ControlMessage, ControlMessageOwned, MsgFlags,
};
use nix::sys::stat::{umask, Mode};
use tracing::{info, warn};

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{Caller, FileNode, OpenFile, OpenFlags};
use crate::config::recorded::RecordedDevice;
use crate::config::{CaptureFile, DeviceConfig, DeviceKind, ErrorConfig, PortNumber};
use crate::sim::usb::{replay, Fault, UsbSim};
use crate::sim::zvm::{Fault as ZvmFault, Monitor};
use crate::sim::SimError;
use crate::tracefs::Tracing;

/// Usage text, also what reading `monfs/ctl` shows.
pub const HELP: &str = "\
plug BUS PORTS from-capture FILE DEVADDR [interval_ms=N ...]   (monfs ctl only: it opens FILE)
plug BUS PORTS KIND [vendor_id=N product_id=N manufacturer=S product=S serial=S interval_ms=N transfer_size=N descriptors=FILE]
unplug BUS PORTS
fault BUS PORTS stall|babble|unlink|submit-error|proto|disconnect
pause BUS
resume BUS
zvm sever|reply-fail|overflow
trace SYSTEM:EVENT field=value ...
replay start BUS FILE [speed=F] [loop] [after_ms=N]   (monfs ctl only: it opens FILE)
replay stop BUS
replay status BUS
help
(PORTS: a root port, or a path through hubs such as 4.1; KIND: hub, hid-keyboard,
hid-mouse, hid-tablet, mass-storage, audio, webcam, flood, descriptors, from-capture)
";

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
}

fn parse_bus(s: Option<&str>) -> Result<u16, String> {
    let s = s.ok_or("missing bus number")?;
    s.parse().map_err(|_| format!("bad bus number {s:?}"))
}

fn parse_ports(s: Option<&str>) -> Result<Vec<u8>, String> {
    let s = s.ok_or("missing port path (e.g. 3 or 4.1)")?;
    s.split('.')
        .map(|p| match p.parse::<u8>() {
            Ok(n) if (1..=15).contains(&n) => Ok(n),
            _ => Err(format!(
                "bad port path {s:?}: ports are 1..15 joined by dots"
            )),
        })
        .collect()
}

fn parse_kind(s: Option<&str>) -> Result<DeviceKind, String> {
    let s = s.ok_or("missing device kind")?;
    serde_yaml_ng::from_str::<DeviceKind>(s).map_err(|_| {
        format!("unknown device kind {s:?} (hub, hid-keyboard, hid-mouse, hid-tablet, mass-storage, audio, webcam, flood)")
    })
}

fn parse_num(v: &str) -> Result<u64, String> {
    let r = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| format!("bad number {v:?}"))
}

/// A number for `key` within `lo..=hi` (never truncated to fit).
fn parse_in<T: TryFrom<u64>>(key: &str, v: &str, lo: u64, hi: u64) -> Result<T, String> {
    let n = parse_num(v)?;
    if !(lo..=hi).contains(&n) {
        return Err(format!("{key} must be {lo}..={hi}, got {v}"));
    }
    T::try_from(n).map_err(|_| format!("{key}: {v} is out of range"))
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
        Control {
            usb,
            zvm,
            tracing,
            lock: Mutex::new(()),
            fault_inject: AtomicBool::new(false),
            plugged: Mutex::new(Vec::new()),
        }
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
    pub fn execute(&self, line: &str) -> Result<String, SimError> {
        self.execute_with(line, &mut VecDeque::new())
    }

    /// Run one command line; `files` are the descriptors that came with it
    /// on the socket, in order (`replay start` takes the first). Whatever is
    /// slow (loading a capture) happens before the control lock is taken.
    pub fn execute_with(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<String, SimError> {
        let line = line.trim();
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

    /// The slow part of a command, done without locks: a `replay` command
    /// is parsed and its capture loaded from the first of `files`.
    fn prepare(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<Option<replay::Prepared>, SimError> {
        let words = split_words(line)?;
        if words.first().map(String::as_str) != Some("replay") {
            return Ok(None);
        }
        let rest: Vec<&str> = words[1..].iter().map(String::as_str).collect();
        let file = match rest.first() {
            Some(&"start") => files.pop_front().map(std::fs::File::from),
            _ => None,
        };
        replay::prepare(&rest, file).map(Some)
    }

    /// The slow part of `plug BUS PORTS from-capture FILE DEVADDR`, done
    /// without locks: the device taken from the capture passed with it.
    fn prepare_recorded(
        &self,
        line: &str,
        files: &mut VecDeque<OwnedFd>,
    ) -> Result<Option<CaptureFile>, SimError> {
        let words = split_words(line)?;
        if words.first().map(String::as_str) != Some("plug")
            || words.get(3).map(String::as_str) != Some("from-capture")
        {
            return Ok(None);
        }
        let (Some(name), Some(addr)) = (words.get(4), words.get(5)) else {
            return Err("usage: plug BUS PORTS from-capture FILE DEVADDR".into());
        };
        let addr: u8 = parse_in("devaddr", addr, 1, 127)?;
        let Some(file) = files.pop_front().map(std::fs::File::from) else {
            return Err(
                "plug from-capture: no capture came with the command (use monfs ctl, which opens FILE)"
                    .into(),
            );
        };
        let dev = RecordedDevice::load(&file, Path::new(name), addr)
            .map_err(|e| format!("from-capture: {e}"))?;
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
    ) -> Result<Option<crate::config::DescriptorFile>, SimError> {
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
        let cap = crate::config::usbdesc::MAX_DUMP_BYTES;
        let bytes = match files.pop_front().map(std::fs::File::from) {
            Some(f) => crate::capture::read::read_regular(&f, cap),
            None => crate::capture::read::read_regular_path(Path::new(v), cap),
        }
        .map_err(|e| format!("descriptors: {v}: {e}"))?;
        let dump = crate::config::usbdesc::DescriptorDump::parse(bytes)
            .map_err(|e| format!("descriptors: {v}: {e}"))?;
        Ok(Some(crate::config::DescriptorFile {
            path: v.into(),
            dump: std::sync::Arc::new(dump),
        }))
    }

    fn run(
        &self,
        line: &str,
        replay: Option<replay::Prepared>,
        recorded: Option<CaptureFile>,
        mut descriptors: Option<crate::config::DescriptorFile>,
    ) -> Result<String, SimError> {
        let words = split_words(line)?;
        let mut w = words.iter().map(String::as_str);
        let Some(cmd) = w.next() else {
            return Err("empty command; try help".into());
        };
        match cmd {
            "help" => Ok(HELP.to_string()),
            "plug" => {
                let bus = parse_bus(w.next())?;
                let ports = parse_ports(w.next())?;
                let kind = parse_kind(w.next())?;
                if kind == DeviceKind::External {
                    return Err(
                        "kind external is for the configuration file only: ctl starts no programs"
                            .into(),
                    );
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
                    descriptors: None,
                    command: None,
                    socket: None,
                    ep0: Default::default(),
                    ctrl_timeout_ms: None,
                    endpoints: vec![],
                    speed: None,
                    capture: None,
                    devaddr: None,
                    devices: Vec::new(),
                };
                if let Some(c) = recorded {
                    // FILE and DEVADDR were taken by `prepare_recorded`.
                    let addr = w.nth(1).and_then(|a| a.parse().ok());
                    dev.devaddr = addr.map(crate::config::DevAddr);
                    dev.descriptors = c.device.as_ref().map(|r| crate::config::DescriptorFile {
                        path: c.path.clone(),
                        dump: r.dump.clone(),
                    });
                    dev.capture = Some(c);
                }
                for kv in w {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| format!("expected key=value, got {kv:?}"))?;
                    if kind == DeviceKind::FromCapture
                        && matches!(k, "descriptors" | "vendor_id" | "product_id")
                    {
                        return Err(format!("{k} comes from the capture").into());
                    }
                    match k {
                        // Read by `prepare_descriptors`, without the lock.
                        "descriptors" => {
                            dev.descriptors =
                                Some(descriptors.take().ok_or("descriptors=FILE given twice")?)
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
                        "manufacturer" => dev.manufacturer = Some(v.to_string()),
                        "product" => dev.product = Some(v.to_string()),
                        "serial" => dev.serial = Some(v.to_string()),
                        _ => return Err(format!("unknown device setting {k:?}").into()),
                    }
                }
                if kind == DeviceKind::FromCapture && dev.capture.is_none() {
                    return Err("usage: plug BUS PORTS from-capture FILE DEVADDR".into());
                }
                let from_file = matches!(kind, DeviceKind::Descriptors | DeviceKind::FromCapture);
                if from_file != dev.descriptors.is_some() {
                    return Err(
                        "descriptors=FILE goes with kind descriptors, and only with it".into(),
                    );
                }
                // Its memory first: a device that does not fit in the
                // memory budget is refused, naming the field.
                let need = crate::sim::usb::memory::tree_bytes(&dev);
                let grant = crate::base::budget::MEMORY.take(need).map_err(|_| {
                    let field = match (kind, dev.transfer_size) {
                        (DeviceKind::Flood, Some(_)) => "transfer_size",
                        _ => "kind",
                    };
                    format!(
                        "{field}: the device needs {} KiB, more than is left in the memory budget (--memory)",
                        need.div_ceil(1024)
                    )
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
                let what = w.next().ok_or("missing fault kind")?;
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
                    _ => return Err(format!("unknown USB fault {what:?}").into()),
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
                let what = w
                    .next()
                    .ok_or("missing z/VM fault (sever, reply-fail, overflow)")?;
                let f = match what {
                    "sever" => ZvmFault::Sever,
                    "reply-fail" => ZvmFault::ReplyFail,
                    "overflow" => ZvmFault::Overflow,
                    _ => return Err(format!("unknown z/VM fault {what:?}").into()),
                };
                if self.zvm.inject(f) {
                    Ok(format!("z/VM {what} injected"))
                } else {
                    Err(SimError::NotOpen)
                }
            }
            "trace" => {
                let name = w.next().ok_or("missing SYSTEM:EVENT")?;
                let (sys, ev) = name
                    .split_once(':')
                    .ok_or_else(|| format!("expected SYSTEM:EVENT, got {name:?}"))?;
                let id = self
                    .tracing
                    .event_id(sys, ev)
                    .ok_or_else(|| format!("no trace event {name}"))?;
                let rest = line.splitn(3, char::is_whitespace).nth(2).unwrap_or("");
                self.tracing
                    .inject(&id, rest.as_bytes(), std::process::id())
                    .map_err(|e| format!("bad fields for {name}: {e}"))?;
                Ok(format!("recorded {name}"))
            }
            "replay" => match replay {
                Some(p) => replay::run_prepared(&self.usb, p),
                None => Err("replay: not prepared".into()),
            },
            "panic" if self.fault_inject.load(Ordering::Relaxed) => {
                panic!("injected fault: the panic command (MONFS_FAULT_INJECT=1)")
            }
            _ => Err(format!("unknown command {cmd:?}; try help").into()),
        }
    }
}

/// Split a command line into words; double quotes group words (and are
/// removed), so `product="Hot Stick"` is one word.
pub fn split_words(line: &str) -> Result<Vec<String>, String> {
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
        return Err("unbalanced double quote".into());
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
        Ok(crate::base::vfs::slice_at(HELP.as_bytes(), offset, size))
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
    fn mode(&self) -> u32 {
        0o600
    }
    fn open(&self, _flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        Ok(Arc::new(CtlFile(self.0.clone())))
    }
}

/// The default socket for a mountpoint: `<run dir>/<mountpoint with / as
/// ->.sock`, the run directory being [`run_dir`].
pub fn default_socket(mountpoint: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = abs
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    run_dir().join(format!("{name}.sock"))
}

/// The directory of root's default sockets (and logs).
pub const RUN_DIR: &str = "/run/monfs";

/// The directory of the default sockets (and logs), kept private (0700) and
/// owned by us: [`RUN_DIR`] for root; for another user
/// `$XDG_RUNTIME_DIR/monfs` when that variable names an absolute path,
/// else `/tmp/monfs-<uid>`, made now if missing. Another user can create
/// that name first (`/tmp` is everyone's): then it is a fresh directory of
/// a name nobody can guess, `/tmp/monfs-<uid>-<random>`, made by us (issue
/// 37), and clients find the socket through the mount's `monfs/socket`.
/// The same directory for the life of the process.
pub fn run_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let uid = nix::unistd::geteuid();
        if uid.is_root() {
            return PathBuf::from(RUN_DIR);
        }
        match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
            Some(x) if x.is_absolute() => x.join("monfs"),
            _ => tmp_run_dir(Path::new("/tmp"), uid.as_raw()),
        }
    })
    .clone()
}

/// `DIR/monfs-<uid>` if it is ours or we could make it, else a fresh
/// `DIR/monfs-<uid>-<random>` made by us (0700).
pub fn tmp_run_dir(tmp: &Path, uid: u32) -> PathBuf {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let usual = tmp.join(format!("monfs-{uid}"));
    let made = std::fs::DirBuilder::new().mode(0o700).create(&usual);
    let ours = match made {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::symlink_metadata(&usual)
                .is_ok_and(|m| m.is_dir() && !m.file_type().is_symlink() && m.uid() == uid)
        }
        Err(_) => false,
    };
    if ours {
        return usual;
    }
    for _ in 0..16 {
        let mut r = [0u8; 8];
        // SAFETY: getrandom fills the buffer it is given.
        let n = unsafe { libc::getrandom(r.as_mut_ptr().cast(), r.len(), 0) };
        if n != r.len() as isize {
            break;
        }
        let alt = tmp.join(format!("monfs-{uid}-{:016x}", u64::from_ne_bytes(r)));
        // mkdir fails on anything already there: the directory is ours.
        if std::fs::DirBuilder::new().mode(0o700).create(&alt).is_ok() {
            warn!(
                taken = %usual.display(),
                using = %alt.display(),
                "the usual run directory is not ours (made by another user?); using a fresh one"
            );
            return alt;
        }
    }
    usual
}

/// At most this many control connections are open at once. A new one past
/// it closes the one idle longest (answered `error: idle connection closed
/// for a new one`), so idle clients cannot lock `monfs ctl` out (issue 37);
/// only when every one is carrying out a command is the new one answered
/// `error: too many control connections` and closed.
pub const MAX_CONNECTIONS: usize = 16;

/// The longest command line taken on the socket (bytes, without the newline);
/// a longer one is answered `error: line too long` and the connection closed.
pub const MAX_LINE: usize = 4096;

/// The most descriptors (SCM_RIGHTS) a connection may have passed and not
/// yet used by a command; past it, the connection is answered `error: too
/// many descriptors ...` and closed (and the descriptors with it).
pub const MAX_PASSED_FILES: usize = 4;

/// A connection idle this long is closed, so forgotten clients free their slot.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(300);

/// Make `dir` a private directory: create it with mode 0700, or fix the mode
/// of an existing one; refuse a symlink, a non-directory, or a directory
/// owned by someone else.
pub fn ensure_private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let d = dir.display();
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A minimal system (an initramfs) may lack /run itself.
            if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => std::fs::symlink_metadata(dir),
                // Another daemon starting at the same time made it first:
                // check what is there now like any existing entry.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::symlink_metadata(dir)
                }
                Err(e) => return Err(format!("cannot create {d}: {e}")),
            }
        }
        m => m,
    };
    match meta {
        Err(e) => return Err(format!("{d}: {e}")),
        Ok(m) if m.file_type().is_symlink() => {
            return Err(format!("{d} is a symlink; refusing to use it"))
        }
        Ok(m) if !m.is_dir() => return Err(format!("{d} is not a directory")),
        Ok(m) if m.uid() != nix::unistd::geteuid().as_raw() => {
            return Err(format!(
                "{d} is owned by uid {}, not by us; refusing to use it",
                m.uid()
            ))
        }
        Ok(_) => {}
    }
    // Explicitly, whatever the umask was or the mode an old version left.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| format!("cannot chmod 0700 {d}: {e}"))
}

/// A bound control socket, not yet served.
pub struct ControlSocket {
    listener: UnixListener,
    file: SocketFile,
}

/// The socket's file, to remove when the daemon exits.
#[derive(Clone)]
pub struct SocketFile {
    path: PathBuf,
    ino: u64,
}

impl SocketFile {
    /// Remove the socket file, if it is still ours (same inode).
    pub fn remove(&self) {
        use std::os::unix::fs::MetadataExt;
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| m.ino() == self.ino) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Make room for a socket at `path`: nothing there, or a stale socket (one
/// nobody listens on), which is removed. Anything else is refused.
fn clear_stale_socket(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let p = path.display();
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("{p}: {e}")),
        Ok(m) => m,
    };
    if !m.file_type().is_socket() {
        return Err(format!(
            "{p} exists and is not a socket; refusing to replace it"
        ));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(format!("{p}: another daemon is listening on this socket")),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            info!(socket = %p, "removing a stale control socket");
            std::fs::remove_file(path).map_err(|e| format!("cannot remove stale {p}: {e}"))
        }
        Err(e) => Err(format!("{p}: exists and cannot be probed: {e}")),
    }
}

impl ControlSocket {
    /// Bind the control socket at `path` (mode 0600). The default directory
    /// ([`run_dir`]) is made private (0700); a missing parent of another path
    /// is created 0700. Only a stale socket is replaced.
    pub fn bind(path: &Path) -> Result<ControlSocket, String> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        let p = path.display();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            if dir == run_dir() {
                ensure_private_dir(dir)?;
            } else if !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
            }
        }
        clear_stale_socket(path)?;
        // No window with a wider mode: the socket is born 0600.
        let old = umask(Mode::from_bits_truncate(0o077));
        let bound = UnixListener::bind(path);
        umask(old);
        let listener = bound.map_err(|e| format!("cannot bind {p}: {e}"))?;
        let meta = std::fs::symlink_metadata(path).map_err(|e| format!("{p}: {e}"))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("cannot chmod {p}: {e}"))?;
        Ok(ControlSocket {
            listener,
            file: SocketFile {
                path: path.to_path_buf(),
                ino: meta.ino(),
            },
        })
    }

    /// The socket's file.
    pub fn file(&self) -> SocketFile {
        self.file.clone()
    }

    /// Serve the socket from a thread until the process ends. Only root and
    /// `owner_uid` (the uid the mount's files belong to) are served; others
    /// get `error: permission denied`.
    pub fn serve(self, ctl: Arc<Control>, owner_uid: u32) -> std::io::Result<()> {
        let conns = Arc::new(Conns::default());
        let listener = self.listener;
        std::thread::Builder::new()
            .name("ctl-socket".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let mut s = match conn {
                        Ok(s) => s,
                        Err(e) => {
                            warn!("control socket: {e}");
                            continue;
                        }
                    };
                    let (uid, pid) = peer_cred(&s).unwrap_or((u32::MAX, 0));
                    if uid != 0 && uid != owner_uid {
                        warn!(uid, pid, "control connection refused: permission denied");
                        refuse(&mut s, "permission denied");
                        continue;
                    }
                    let Some(me) = conns.admit(&s) else {
                        warn!(
                            uid,
                            pid,
                            limit = MAX_CONNECTIONS,
                            "control connection refused: every connection is busy"
                        );
                        refuse(&mut s, "too many control connections");
                        continue;
                    };
                    let ctl = ctl.clone();
                    let conns = conns.clone();
                    let _ = std::thread::Builder::new()
                        .name("ctl-conn".into())
                        .spawn(move || {
                            serve_conn(&ctl, s, &me);
                            conns.leave(&me);
                        });
                }
            })?;
        Ok(())
    }
}

/// The open control connections (at most [`MAX_CONNECTIONS`]).
#[derive(Default)]
struct Conns(std::sync::Mutex<Vec<Arc<Conn>>>);

/// One open control connection.
struct Conn {
    /// [`CONN_IDLE`], [`CONN_BUSY`] or [`CONN_EVICTED`].
    state: AtomicUsize,
    /// When it last finished a command, or was opened (ms of a monotonic count).
    last: std::sync::atomic::AtomicU64,
    /// Its socket, to shut down when it is evicted.
    stream: Option<UnixStream>,
}

/// Waiting for a command.
const CONN_IDLE: usize = 0;
/// Carrying one out.
const CONN_BUSY: usize = 1;
/// Closed for a new connection: carries out nothing more.
const CONN_EVICTED: usize = 2;

fn mono_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

impl Conns {
    /// A place for a new connection on `s`: a free one, or the one of the
    /// connection idle longest, which is closed. None when every
    /// connection is busy.
    fn admit(&self, s: &UnixStream) -> Option<Arc<Conn>> {
        use crate::base::sync::LockExt;
        let mut all = self.0.lock_ok();
        if all.len() >= MAX_CONNECTIONS {
            let mut idle: Vec<(u64, usize)> = all
                .iter()
                .enumerate()
                .filter(|(_, c)| c.state.load(Ordering::Acquire) == CONN_IDLE)
                .map(|(i, c)| (c.last.load(Ordering::Relaxed), i))
                .collect();
            idle.sort_unstable();
            let victim = idle.into_iter().map(|(_, i)| i).find(|&i| {
                all[i]
                    .state
                    .compare_exchange(CONN_IDLE, CONN_EVICTED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            })?;
            let old = all.swap_remove(victim);
            if let Some(mut st) = old.stream.as_ref() {
                info!(
                    limit = MAX_CONNECTIONS,
                    "control connection idle longest closed for a new one"
                );
                let _ = st.set_nonblocking(true);
                let _ = st.write_all(b"error: idle connection closed for a new one\n");
                let _ = st.shutdown(std::net::Shutdown::Both);
            }
        }
        let me = Arc::new(Conn {
            state: AtomicUsize::new(CONN_IDLE),
            last: std::sync::atomic::AtomicU64::new(mono_ms()),
            stream: s.try_clone().ok(),
        });
        all.push(me.clone());
        Some(me)
    }

    /// The connection `me` is over.
    fn leave(&self, me: &Arc<Conn>) {
        use crate::base::sync::LockExt;
        self.0.lock_ok().retain(|c| !Arc::ptr_eq(c, me));
    }
}

/// The peer's uid and pid (SO_PEERCRED).
pub fn peer_cred(s: &UnixStream) -> std::io::Result<(u32, i32)> {
    let cred = getsockopt(s, sockopt::PeerCredentials)?;
    Ok((cred.uid(), cred.pid()))
}

/// Answer one error line and close, without waiting on the client.
fn refuse(s: &mut UnixStream, why: &str) {
    let _ = s.set_nonblocking(true);
    let _ = s.write_all(format!("error: {why}\n").as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

/// Read what `s` has into `buf`, and the descriptors passed with it
/// (SCM_RIGHTS, received close-on-exec) onto `files`. Returns the byte count
/// and whether descriptors were cut off (more than [`MAX_PASSED_FILES`] in
/// one message; the kernel closes those).
fn recv_with_files(
    s: &UnixStream,
    buf: &mut [u8],
    files: &mut VecDeque<OwnedFd>,
) -> std::io::Result<(usize, bool)> {
    let mut space = nix::cmsg_space!([RawFd; MAX_PASSED_FILES]);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(
        s.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            // SAFETY: SCM_RIGHTS hands us new descriptors that nothing else
            // owns.
            files.extend(
                fds.into_iter()
                    .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
            );
        }
    }
    Ok((msg.bytes, msg.flags.contains(MsgFlags::MSG_CTRUNC)))
}

fn serve_conn(ctl: &Control, mut s: UnixStream, me: &Conn) {
    let _ = s.set_read_timeout(Some(IDLE_TIMEOUT));
    let _ = s.set_write_timeout(Some(std::time::Duration::from_secs(10)));
    let mut answering = true;
    let mut pending: Vec<u8> = Vec::new();
    let mut files = VecDeque::new();
    let mut chunk = [0u8; 4096];
    loop {
        // Never more than MAX_LINE + one chunk buffered.
        let (n, eof) = match recv_with_files(&s, &mut chunk, &mut files) {
            Ok((_, true)) => return close_with(&mut s, "too many descriptors in one message"),
            Ok((0, _)) => (0, true),
            Ok((n, _)) => (n, false),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return,
        };
        if files.len() > MAX_PASSED_FILES {
            return close_with(&mut s, "too many descriptors waiting for commands");
        }
        pending.extend_from_slice(&chunk[..n]);
        let mut start = 0;
        while let Some(nl) = pending[start..].iter().position(|&b| b == b'\n') {
            let line = &pending[start..start + nl];
            start += nl + 1;
            if line.len() > MAX_LINE {
                return close_with(&mut s, "line too long");
            }
            if !me.run(|| answer(ctl, &mut s, &mut answering, line, &mut files)) {
                return;
            }
        }
        pending.drain(..start);
        if pending.len() > MAX_LINE {
            return close_with(&mut s, "line too long");
        }
        if eof {
            // A last line without a newline still counts.
            me.run(|| answer(ctl, &mut s, &mut answering, &pending, &mut files));
            return;
        }
    }
}

impl Conn {
    /// Carry out `f` (a command) unless the connection was evicted; whether
    /// it was carried out.
    fn run(&self, f: impl FnOnce()) -> bool {
        if self
            .state
            .compare_exchange(CONN_IDLE, CONN_BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        f();
        self.last.store(mono_ms(), Ordering::Relaxed);
        let _ =
            self.state
                .compare_exchange(CONN_BUSY, CONN_IDLE, Ordering::AcqRel, Ordering::Acquire);
        true
    }
}

/// Answer `error: WHY`, log it and close the connection (a limit was hit).
fn close_with(s: &mut UnixStream, why: &str) {
    warn!(
        max_line = MAX_LINE,
        max_files = MAX_PASSED_FILES,
        "control connection closed: {why}"
    );
    let _ = s.write_all(format!("error: {why}\n").as_bytes());
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn answer(
    ctl: &Control,
    out: &mut UnixStream,
    answering: &mut bool,
    line: &[u8],
    files: &mut VecDeque<OwnedFd>,
) {
    let Ok(line) = std::str::from_utf8(line) else {
        if *answering && out.write_all(b"error: not UTF-8\n").is_err() {
            *answering = false;
        }
        return;
    };
    if line.trim().is_empty() {
        return;
    }
    // A panicking command fails alone; the hook has logged it.
    let reply = match std::panic::catch_unwind(AssertUnwindSafe(|| ctl.execute_with(line, files))) {
        Ok(Ok(msg)) => format!("ok {}\n", msg.trim_end().replace('\n', "\n   ")),
        Ok(Err(e)) => format!("error: {e}\n"),
        Err(_) => "error: internal error (panic; see the daemon log)\n".to_string(),
    };
    // A client that went away still gets every command it sent carried
    // out; only the answers are dropped.
    if *answering && out.write_all(reply.as_bytes()).is_err() {
        *answering = false;
    }
}

/// Send `data` on `s`, passing `file` (SCM_RIGHTS) with its first bytes.
pub fn send_with_file(
    s: &mut UnixStream,
    data: &[u8],
    file: Option<&std::fs::File>,
) -> std::io::Result<()> {
    let Some(file) = file else {
        return s.write_all(data);
    };
    let fds = [file.as_raw_fd()];
    let n = sendmsg::<()>(
        s.as_raw_fd(),
        &[IoSlice::new(data)],
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?;
    s.write_all(&data[n..])
}

/// Send one command to a daemon's socket, with `file` passed along if given
/// (what `replay start` replays); returns its answer line(s). A daemon that
/// refuses the connection answers and closes at once: its answer is
/// returned even if sending or the end of the read then failed.
pub fn send(path: &Path, command: &str, file: Option<&std::fs::File>) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    let sent = send_with_file(&mut s, format!("{command}\n").as_bytes(), file)
        .and_then(|()| s.shutdown(std::net::Shutdown::Write));
    let mut out = Vec::new();
    let read = s.read_to_end(&mut out);
    match (read, sent) {
        _ if !out.is_empty() => Ok(String::from_utf8_lossy(&out).into_owned()),
        (Err(e), _) | (Ok(_), Err(e)) => Err(e),
        (Ok(_), Ok(())) => Ok(String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_dir_another_user_made_first_is_not_used() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let me = nix::unistd::geteuid().as_raw();
        // Missing: made, private.
        let d = tmp_run_dir(tmp.path(), me);
        assert_eq!(d, tmp.path().join(format!("monfs-{me}")));
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!((m.uid(), m.permissions().mode() & 0o777), (me, 0o700));
        // Ours already: kept.
        assert_eq!(tmp_run_dir(tmp.path(), me), d);
        // Another's (we made monfs-<other>, as an attacker would), or a
        // symlink to ours: a fresh directory of our own instead.
        let other = me + 4242;
        std::fs::create_dir(tmp.path().join(format!("monfs-{other}"))).unwrap();
        std::os::unix::fs::symlink(&d, tmp.path().join(format!("monfs-{}", me + 1))).unwrap();
        for uid in [other, me + 1] {
            let alt = tmp_run_dir(tmp.path(), uid);
            let name = alt.file_name().unwrap().to_str().unwrap().to_string();
            assert!(name.starts_with(&format!("monfs-{uid}-")), "{name}");
            let m = std::fs::symlink_metadata(&alt).unwrap();
            assert!(m.is_dir() && m.permissions().mode() & 0o777 == 0o700);
        }
    }
}
