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
//! A bad command changes nothing and is answered with an explanation (EINVAL
//! on the control file, `error: ...` on the socket) and a log line.
//!
//! For tests only, a daemon started with `MONFS_FAULT_INJECT=1` also takes
//! `panic`, which panics while holding the control lock (see
//! [`Control::enable_fault_injection`]); otherwise `panic` is an unknown
//! command.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tracing::{info, warn};

use crate::config::{DeviceConfig, DeviceKind, ErrorConfig, PortNumber};
use crate::errno::{Errno, SysResult};
use crate::monreader::{Fault as ZvmFault, MonReaderDev};
use crate::sim::usb::{Fault, UsbSim};
use crate::sync::LockExt;
use crate::tracefs::Tracing;
use crate::vfs::{Caller, FileNode, OpenFile, OpenFlags};

/// Usage text, also what reading `monfs/ctl` shows.
pub const HELP: &str = "\
plug BUS PORTS KIND [vendor_id=N product_id=N manufacturer=S product=S serial=S interval_ms=N transfer_size=N]
unplug BUS PORTS
fault BUS PORTS stall|babble|unlink|submit-error|proto|disconnect
pause BUS
resume BUS
zvm sever|reply-fail|overflow
trace SYSTEM:EVENT field=value ...
replay start BUS FILE [speed=F] [loop] [after_ms=N]
replay stop BUS
replay status BUS
help
(PORTS: a root port, or a path through hubs such as 4.1; KIND: hub, hid-keyboard,
hid-mouse, hid-tablet, mass-storage, audio, webcam, flood)
";

/// What the commands act on.
pub struct Control {
    usb: Arc<UsbSim>,
    monreader: Arc<MonReaderDev>,
    tracing: Arc<Tracing>,
    /// Serialises commands so a log shows them in the order applied.
    lock: Mutex<()>,
    /// Whether the test-only `panic` command is accepted.
    fault_inject: AtomicBool,
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

impl Control {
    /// Control over these facilities and simulators.
    pub fn new(usb: Arc<UsbSim>, monreader: Arc<MonReaderDev>, tracing: Arc<Tracing>) -> Self {
        Control {
            usb,
            monreader,
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

    /// Run one command line; `Ok` carries a short answer.
    pub fn execute(&self, line: &str) -> Result<String, String> {
        let _g = self.lock.lock_ok();
        let r = self.run(line.trim());
        match &r {
            Ok(_) => info!(command = line.trim(), "control"),
            Err(e) => warn!(command = line.trim(), "control command refused: {e}"),
        }
        r
    }

    fn run(&self, line: &str) -> Result<String, String> {
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
                    devices: Vec::new(),
                };
                for kv in w {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| format!("expected key=value, got {kv:?}"))?;
                    match k {
                        "vendor_id" => dev.vendor_id = Some(parse_num(v)? as u16),
                        "product_id" => dev.product_id = Some(parse_num(v)? as u16),
                        "interval_ms" => dev.interval_ms = Some(parse_num(v)? as u32),
                        "transfer_size" => dev.transfer_size = Some(parse_num(v)? as u32),
                        "manufacturer" => dev.manufacturer = Some(v.to_string()),
                        "product" => dev.product = Some(v.to_string()),
                        "serial" => dev.serial = Some(v.to_string()),
                        _ => return Err(format!("unknown device setting {k:?}")),
                    }
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
                let what = w.next().ok_or("missing fault kind")?;
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
                    _ => return Err(format!("unknown USB fault {what:?}")),
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
                    _ => return Err(format!("unknown z/VM fault {what:?}")),
                };
                if self.monreader.inject(f) {
                    Ok(format!("z/VM {what} injected"))
                } else {
                    Err("dev/monreader is not open: no IUCV path to fault".into())
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
            "replay" => crate::sim::usb::replay::run_command(&self.usb, &w.collect::<Vec<_>>()),
            "panic" if self.fault_inject.load(Ordering::Relaxed) => {
                panic!("injected fault: the panic command (MONFS_FAULT_INJECT=1)")
            }
            _ => Err(format!("unknown command {cmd:?}; try help")),
        }
    }
}

/// Split a command line into words; double quotes group words (and are
/// removed), so `product="Hot Stick"` is one word.
fn split_words(line: &str) -> Result<Vec<String>, String> {
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
        Ok(crate::vfs::slice_at(HELP.as_bytes(), offset, size))
    }
    fn write(&self, _offset: u64, data: &[u8]) -> SysResult<u32> {
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

/// The default socket for a mountpoint: `/run/monfs/<mountpoint with / as ->.sock`.
pub fn default_socket(mountpoint: &Path) -> PathBuf {
    let abs = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let name: String = abs
        .to_string_lossy()
        .trim_start_matches('/')
        .chars()
        .map(|c| if c == '/' { '-' } else { c })
        .collect();
    PathBuf::from("/run/monfs").join(format!("{name}.sock"))
}

/// Serve the control socket at `path` (mode 0600) until the process ends.
pub fn serve_socket(ctl: Arc<Control>, path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    std::thread::Builder::new()
        .name("ctl-socket".into())
        .spawn(move || {
            for conn in listener.incoming() {
                match conn {
                    Ok(s) => {
                        let ctl = ctl.clone();
                        let _ = std::thread::Builder::new()
                            .name("ctl-conn".into())
                            .spawn(move || serve_conn(&ctl, s));
                    }
                    Err(e) => warn!("control socket: {e}"),
                }
            }
        })?;
    Ok(())
}

fn serve_conn(ctl: &Control, s: UnixStream) {
    let Ok(mut out) = s.try_clone() else { return };
    let mut answering = true;
    for line in BufReader::new(s).lines() {
        let Ok(line) = line else { return };
        if line.trim().is_empty() {
            continue;
        }
        // A panicking command fails alone; the hook has logged it.
        let reply = match std::panic::catch_unwind(AssertUnwindSafe(|| ctl.execute(&line))) {
            Ok(Ok(msg)) => format!("ok {}\n", msg.trim_end().replace('\n', "\n   ")),
            Ok(Err(e)) => format!("error: {e}\n"),
            Err(_) => "error: internal error (panic; see the daemon log)\n".to_string(),
        };
        // A client that went away still gets every command it sent carried
        // out; only the answers are dropped.
        if answering && out.write_all(reply.as_bytes()).is_err() {
            answering = false;
        }
    }
}

/// Send one command to a daemon's socket; returns its answer line(s).
pub fn send(path: &Path, command: &str) -> std::io::Result<String> {
    let mut s = UnixStream::connect(path)?;
    s.write_all(format!("{command}\n").as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    let mut out = String::new();
    std::io::Read::read_to_string(&mut s, &mut out)?;
    Ok(out)
}
