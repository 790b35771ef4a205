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
use error::io_err;
pub use error::{CtlError, SocketError};

mod error;

/// Usage text, also what reading `monfs/ctl` shows (the kinds follow).
const USAGE: &str = "\
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
    /// Control over these facilities and simulators.
    pub fn new(usb: Arc<UsbSim>, zvm: Arc<Monitor>, tracing: Arc<Tracing>) -> Self {
        Control {
            usb,
            zvm,
            tracing,
            lock: Mutex::new(()),
            fault_inject: AtomicBool::new(false),
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
        let r = self.prepare(line, files).and_then(|replay| {
            let recorded = self.prepare_recorded(line, files)?;
            let _g = self.lock.lock_ok();
            self.run(line, replay, recorded)
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

    fn run(
        &self,
        line: &str,
        replay: Option<replay::Prepared>,
        recorded: Option<CaptureFile>,
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
                        .ok_or_else(|| CtlError::NotKeyValue(kv.to_string()))?;
                    if kind == DeviceKind::FromCapture
                        && matches!(k, "descriptors" | "vendor_id" | "product_id")
                    {
                        return Err(CtlError::FromCapture(k.to_string()));
                    }
                    match k {
                        "descriptors" => {
                            let bytes =
                                std::fs::read(v).map_err(|source| CtlError::DescriptorsIo {
                                    path: v.to_string(),
                                    source,
                                })?;
                            let dump = crate::config::usbdesc::DescriptorDump::parse(bytes)
                                .map_err(|source| CtlError::DescriptorsBad {
                                    path: v.to_string(),
                                    source,
                                })?;
                            dev.descriptors = Some(crate::config::DescriptorFile {
                                path: v.into(),
                                dump: std::sync::Arc::new(dump),
                            });
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
                self.usb.plug(bus, &ports, &dev)?;
                Ok(format!(
                    "plugged {kind:?} on bus {bus} port {}",
                    fmt_ports(&ports)
                ))
            }
            "unplug" => {
                let bus = parse_bus(w.next())?;
                let ports = parse_ports(w.next())?;
                self.usb.unplug(bus, &ports)?;
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
/// else `/tmp/monfs-<uid>`.
pub fn run_dir() -> PathBuf {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return PathBuf::from(RUN_DIR);
    }
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(x) if x.is_absolute() => x.join("monfs"),
        _ => PathBuf::from(format!("/tmp/monfs-{uid}")),
    }
}

/// At most this many control connections are served at once; past it, a new
/// connection is answered `error: too many control connections` and closed.
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
pub fn ensure_private_dir(dir: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
    let d = dir.display();
    let meta = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // A minimal system (an initramfs) may lack /run itself.
            if let Some(parent) = dir.parent().filter(|p| !p.exists()) {
                std::fs::create_dir_all(parent)
                    .map_err(io_err("cannot create ", parent.display()))?;
            }
            match std::fs::DirBuilder::new().mode(0o700).create(dir) {
                Ok(()) => std::fs::symlink_metadata(dir),
                // Another daemon starting at the same time made it first:
                // check what is there now like any existing entry.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    std::fs::symlink_metadata(dir)
                }
                Err(e) => return Err(io_err("cannot create ", d)(e)),
            }
        }
        m => m,
    };
    match meta {
        Err(e) => return Err(io_err("", d)(e)),
        Ok(m) if m.file_type().is_symlink() => return Err(SocketError::Symlink(d.to_string())),
        Ok(m) if !m.is_dir() => return Err(SocketError::NotDir(d.to_string())),
        Ok(m) if m.uid() != nix::unistd::geteuid().as_raw() => {
            return Err(SocketError::Owner {
                path: d.to_string(),
                uid: m.uid(),
            })
        }
        Ok(_) => {}
    }
    // Explicitly, whatever the umask was or the mode an old version left.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(io_err("cannot chmod 0700 ", d))
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
fn clear_stale_socket(path: &Path) -> Result<(), SocketError> {
    use std::os::unix::fs::FileTypeExt;
    let p = path.display();
    let m = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_err("", p)(e)),
        Ok(m) => m,
    };
    if !m.file_type().is_socket() {
        return Err(SocketError::NotSocket(p.to_string()));
    }
    match UnixStream::connect(path) {
        Ok(_) => Err(SocketError::Listening(p.to_string())),
        Err(e) if e.raw_os_error() == Some(libc::ECONNREFUSED) => {
            info!(socket = %p, "removing a stale control socket");
            std::fs::remove_file(path).map_err(io_err("cannot remove stale ", p))
        }
        Err(source) => Err(SocketError::Probe {
            path: p.to_string(),
            source,
        }),
    }
}

impl ControlSocket {
    /// Bind the control socket at `path` (mode 0600). The default directory
    /// ([`run_dir`]) is made private (0700); a missing parent of another path
    /// is created 0700. Only a stale socket is replaced.
    pub fn bind(path: &Path) -> Result<ControlSocket, SocketError> {
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
                    .map_err(io_err("cannot create ", dir.display()))?;
            }
        }
        clear_stale_socket(path)?;
        // No window with a wider mode: the socket is born 0600.
        let old = umask(Mode::from_bits_truncate(0o077));
        let bound = UnixListener::bind(path);
        umask(old);
        let listener = bound.map_err(io_err("cannot bind ", &p))?;
        let meta = std::fs::symlink_metadata(path).map_err(io_err("", &p))?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err("cannot chmod ", &p))?;
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
        let active = Arc::new(AtomicUsize::new(0));
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
                    if active.load(Ordering::Acquire) >= MAX_CONNECTIONS {
                        warn!(
                            uid,
                            pid,
                            limit = MAX_CONNECTIONS,
                            "control connection refused: too many"
                        );
                        refuse(&mut s, "too many control connections");
                        continue;
                    }
                    active.fetch_add(1, Ordering::AcqRel);
                    let slot = Slot(active.clone());
                    let ctl = ctl.clone();
                    let _ = std::thread::Builder::new()
                        .name("ctl-conn".into())
                        .spawn(move || {
                            let _slot = slot;
                            serve_conn(&ctl, s)
                        });
                }
            })?;
        Ok(())
    }
}

/// One connection's place among [`MAX_CONNECTIONS`]; freed on drop.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
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

fn serve_conn(ctl: &Control, mut s: UnixStream) {
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
            answer(ctl, &mut s, &mut answering, line, &mut files);
        }
        pending.drain(..start);
        if pending.len() > MAX_LINE {
            return close_with(&mut s, "line too long");
        }
        if eof {
            // A last line without a newline still counts.
            answer(ctl, &mut s, &mut answering, &pending, &mut files);
            return;
        }
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
