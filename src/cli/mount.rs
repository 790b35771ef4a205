//! `monfs mount`: load the configuration, mount the tree over FUSE (and CUSE
//! devices), choose the transport (/dev/fuse or FUSE over io_uring), serve
//! the control socket, go to the background, and unmount on SIGTERM/SIGINT.

use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{getgid, getuid};
use tracing::{error, info, warn};

use crate::config::{Config, ConfigError};
use crate::daemon::Monfs;
use crate::fuse::{IoUringAvailability, MountOptions, Session, Transport, IO_URING_PARAM};

use super::daemonize::{daemonize, journal_stream, open_log, ready_pipe, redirect};

fn load_config(path: &Option<PathBuf>) -> Result<Config, ConfigError> {
    match path {
        Some(p) => crate::sim::usb::load::load_config(p),
        None => Ok(Config::builtin()),
    }
}

/// A simulated topology that does not fit in the memory budget.
#[derive(Debug, thiserror::Error)]
pub enum TopologyError {
    /// The estimate is past what is left: the costliest field named.
    #[error("{file}:{}{error}", if .error.at.is_empty() { " " } else { "" })]
    TooBig {
        /// The configuration file (or `(built-in config)`).
        file: String,
        /// Where and how much.
        error: crate::sim::usb::memory::TooBig,
    },
    /// The budget refused the charge.
    #[error("{file}: the USB topology: {errno}")]
    Refused {
        /// The configuration file.
        file: String,
        /// The budget's errno.
        errno: crate::base::errno::Errno,
    },
}

/// Check that the topology of `cfg` (read from `path`, for positions)
/// fits in the memory budget, and charge it: the error names the field,
/// its line and column.
pub fn topology_charge(
    cfg: &Config,
    path: Option<&std::path::Path>,
) -> Result<crate::base::budget::Grant, TopologyError> {
    use crate::base::budget::MEMORY;
    let text = path.and_then(|p| std::fs::read_to_string(p).ok());
    let file = path.map_or_else(|| "(built-in config)".into(), |p| p.display().to_string());
    let room = MEMORY.limit().saturating_sub(MEMORY.used());
    let need = crate::sim::usb::memory::check(cfg, text.as_deref(), room).map_err(|error| {
        TopologyError::TooBig {
            file: file.clone(),
            error,
        }
    })?;
    MEMORY
        .take(need)
        .map_err(|errno| TopologyError::Refused { file, errno })
}

/// Block SIGINT, SIGTERM and SIGHUP in every thread (those started later
/// inherit the mask); the signal thread takes them with `sigwait`.
fn block_signals() -> SigSet {
    let mut set = SigSet::empty();
    for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(sig);
    }
    if let Err(e) = set.thread_block() {
        warn!("cannot block SIGINT/SIGTERM/SIGHUP: {e}");
    }
    set
}

/// Publish a path as a read-only file in the mount (`monfs/socket`, `monfs/log`).
fn publish_path(fs: &Monfs, name: &str, path: &std::path::Path) {
    let text = format!("{}\n", path.display()).into_bytes();
    fs.tree.add(
        name,
        crate::base::vfs::NodeKind::File(Arc::new(crate::base::vfs::SnapshotFile::new(
            move || text.clone(),
        ))),
        0o444,
    );
}

/// Whether requests are to come through FUSE over io_uring.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum UringMode {
    /// Where the kernel allows it (the default).
    Auto,
    /// Or fail (`--io-uring`).
    Require,
    /// Never (`--no-io-uring`).
    Off,
}

/// How long a mount waits for INIT and the rings to settle the transport
/// (both come at once; this only bounds a kernel that never sends INIT).
const TRANSPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why FUSE over io_uring cannot be had, for the terminal; None if it may.
fn io_uring_unavailable(a: &IoUringAvailability) -> Option<String> {
    match a {
        IoUringAvailability::NotBuilt => Some(
            "this kernel has no FUSE over io_uring (it needs Linux 6.14 or later built with \
             CONFIG_FUSE_IO_URING)"
                .into(),
        ),
        IoUringAvailability::Off => Some(format!(
            "FUSE over io_uring is off in this kernel (as root: echo Y > {IO_URING_PARAM})"
        )),
        IoUringAvailability::Denied(why) => {
            Some(format!("this process may not use io_uring ({why})"))
        }
        IoUringAvailability::Available => None,
    }
}

/// The line under the mount's own when auto chose /dev/fuse and io_uring
/// would have been worth having: how to turn it on, or why it was not used.
/// `why`: what went wrong after the mount, where the kernel offered it.
fn io_uring_note(a: &IoUringAvailability, why: Option<&str>) -> Option<String> {
    match a {
        IoUringAvailability::NotBuilt => None,
        IoUringAvailability::Off => Some(format!(
            "monfs: FUSE over io_uring is off; `echo Y > {IO_URING_PARAM}` (as root) before \
             mounting makes tcpdump-class clients several times faster"
        )),
        IoUringAvailability::Denied(why) => Some(format!(
            "monfs: not using FUSE over io_uring, which this process may not use ({why})"
        )),
        IoUringAvailability::Available => Some(format!(
            "monfs: warning: FUSE over io_uring failed ({}); serving /dev/fuse instead",
            why.unwrap_or("no reason given")
        )),
    }
}

/// Mount monfs at `mountpoint` and serve it until it is unmounted or a
/// What the command line sets over the configuration file.
#[derive(Clone, Copy, Debug, Default)]
pub struct Overrides {
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--timing`.
    pub timing: Option<crate::config::Timing>,
}

impl Overrides {
    /// Set what was given over `cfg`.
    pub fn apply(&self, cfg: &mut Config) {
        if self.seed.is_some() {
            cfg.seed = self.seed;
        }
        if let Some(t) = self.timing {
            cfg.timing = t;
        }
    }
}

/// The variable `monfs run` sets for its daemon: the directory that is
/// the command's `/run/udev`.
pub const UEVENTS_ENV: &str = "MONFS_UEVENTS";
/// Set by `monfs run` (whose namespace has a `/dev` of its own) for the
/// announcer to put class device nodes (`/dev/hidrawN`) into `/dev` as
/// devices come, and take them away as they go.
pub const DEVNODES_ENV: &str = "MONFS_DEVNODES";

/// Character devices (CUSE) for the class nodes (hidrawN, input/eventN,
/// ttyACMN, ttyUSBN), where this daemon can make them: as root with a
/// usable `/dev/cuse`. None: the nodes are the mount's files.
fn class_char_devices(fs: &Monfs) -> Option<Arc<dyn crate::base::vfs::CharDevices>> {
    if !getuid().is_root() {
        return None;
    }
    let c = Arc::new(crate::fuse::CuseClasses::new()?);
    // hidraw's, evdev's and the ttys' majors; any alone is still of use.
    let hid = fs.hid.use_char_devices(&*c);
    let input = fs.input.use_char_devices(&*c);
    let tty = fs.tty.use_char_devices(&*c);
    (hid || input || tty).then_some(c)
}

/// Announce every topology change `queue` (watching `fs`'s devices) is told
/// of as the kernel and udev would, in this process's network namespace
/// (see [`crate::udev::announce`]); control's `wait` waits for them to
/// be out.
fn announce_uevents(
    fs: &Monfs,
    announcer: crate::udev::announce::Announcer,
    queue: Arc<crate::usbcore::uevent::UeventQueue>,
) {
    fs.control.set_uevents(queue.clone());
    if let Err(e) = announcer.spawn(queue) {
        warn!("uevents: no announcer thread: {e}");
    }
}

/// signal ends it (`monfs mount`); the exit code is 0, 1 (failed) or 2
/// (usage: a bad configuration, socket or log path).
#[allow(clippy::too_many_arguments)]
pub fn mount(
    mountpoint: PathBuf,
    config: Option<PathBuf>,
    foreground: bool,
    mut opts: MountOptions,
    uring: UringMode,
    overrides: Overrides,
    cuse: bool,
    ctl_socket: Option<PathBuf>,
    log_file: Option<PathBuf>,
    ready_fd: Option<i32>,
    rmdir_mountpoint: bool,
) -> ExitCode {
    let mut cfg = match load_config(&config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("monfs: {e}");
            return ExitCode::from(2);
        }
    };
    // The simulated topology's memory, charged for the daemon's life: one
    // that does not fit in the memory budget is refused, naming the field.
    let _topology = match topology_charge(&cfg, config.as_deref()) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("monfs: {e}");
            return ExitCode::from(2);
        }
    };
    overrides.apply(&mut cfg);
    // What was asked for and the kernel cannot give fails here, on the
    // terminal and before anything is mounted.
    let avail = match uring {
        UringMode::Off => None,
        UringMode::Auto | UringMode::Require => Some(crate::fuse::io_uring_availability()),
    };
    if uring == UringMode::Require {
        if let Some(why) = avail.as_ref().and_then(io_uring_unavailable) {
            eprintln!("monfs: --io-uring: {why}; nothing mounted");
            return ExitCode::from(1);
        }
    }
    opts.io_uring = avail == Some(IoUringAvailability::Available);
    if cuse {
        if let Err(e) = crate::fuse::check_cuse(std::path::Path::new(crate::fuse::CUSE_DEVICE)) {
            eprintln!("monfs: --cuse: {e}; nothing mounted");
            return ExitCode::from(1);
        }
    }
    let socket_path = ctl_socket.unwrap_or_else(|| crate::control::default_socket(&mountpoint));
    let mut report = if foreground {
        match ready_fd.map(ready_pipe).transpose() {
            Ok(r) => r,
            Err(e) => {
                eprintln!("monfs: --ready-fd: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        Some(daemonize())
    };
    // In the background, the log goes to the journal or next to the socket
    // by default.
    let journal = (log_file.is_none() && !foreground)
        .then(journal_stream)
        .flatten();
    let log_path = log_file.or_else(|| {
        (!foreground && journal.is_none()).then(|| match socket_path.with_extension("log") {
            p if p == socket_path => socket_path.with_extension("log.log"),
            p => p,
        })
    });
    // Tell the waiting parent (if any) how we failed, and exit so.
    let fail = |report: &mut Option<std::fs::File>, code: u8| {
        if let Some(r) = report.as_mut() {
            let _ = r.write_all(&[code]);
        }
        ExitCode::from(code)
    };
    let sigset = block_signals();
    // The socket and the log file before the mount: a bad path is a usage
    // error (exit 2), and nothing is mounted.
    let socket = match crate::control::ControlSocket::bind(&socket_path) {
        Ok(s) => s,
        Err(e) => {
            error!("control socket: {e}");
            return fail(&mut report, 2);
        }
    };
    let socket_file = socket.file();
    let log = match log_path.as_deref().map(open_log).transpose() {
        Ok(l) => l,
        Err(e) => {
            error!("{e}");
            socket_file.remove();
            return fail(&mut report, 2);
        }
    };
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    crate::base::budget::bound_allocator();
    // `monfs run` has its daemon announce the topology's uevents in the
    // command's network namespace, with the udev database in this
    // directory (its /run/udev).
    let uevents = std::env::var_os(UEVENTS_ENV).and_then(|dir| {
        let dir = std::path::PathBuf::from(dir);
        match crate::udev::announce::Announcer::new(&dir) {
            Ok(a) => Some((a, Arc::new(crate::usbcore::uevent::UeventQueue::new()))),
            Err(e) => {
                warn!(
                    "uevents: cannot announce (udev database {}): {e}",
                    dir.display()
                );
                None
            }
        }
    });
    let fs = Monfs::new(&cfg, uid, gid, uevents.as_ref().map(|(_, q)| q.clone()));
    if let Some((mut a, q)) = uevents {
        if std::env::var_os(DEVNODES_ENV).is_some_and(|v| v == "1") {
            a.place_nodes(
                mountpoint.join("dev"),
                "/dev".into(),
                class_char_devices(&fs),
            );
        }
        announce_uevents(&fs, a, q);
    }
    if std::env::var_os("MONFS_FAULT_INJECT").is_some_and(|v| v == "1") {
        info!("MONFS_FAULT_INJECT=1: the test-only `panic` control command is enabled");
        fs.control.enable_fault_injection();
    }
    let session = match Session::mount(fs.tree.clone(), &mountpoint, &opts) {
        Ok(s) => s,
        Err(e) => {
            error!("{e:#}");
            socket_file.remove();
            return fail(&mut report, 1);
        }
    };
    if let Some(why) = crate::base::procmem::ptrace_restriction() {
        warn!("{why}");
    }
    // The files' owner (and root) may use the socket.
    match socket.serve(fs.control.clone(), uid) {
        Ok(()) => publish_path(&fs, "monfs/socket", socket_file.path()),
        Err(e) => error!(socket = %socket_path.display(), "control socket unavailable: {e}"),
    }
    // Give up after the mount: say why on the terminal, and leave nothing
    // mounted.
    let give_up = |why: String, cuse_sessions: &[Arc<Session>], report: &mut Option<_>| {
        eprintln!("monfs: {why}; {} unmounted", mountpoint.display());
        socket_file.remove();
        for c in cuse_sessions {
            c.shutdown();
        }
        fs.stop();
        if let Err(e) = crate::fuse::unmount(&mountpoint) {
            eprintln!("monfs: cannot unmount {}: {e}", mountpoint.display());
        }
        fail(report, 1)
    };
    let cuse_sessions = if cuse {
        match start_cuse(&fs, opts.cpus.as_ref()) {
            Ok(s) => s,
            Err(e) => return give_up(format!("--cuse: {e}"), &[], &mut report),
        }
    } else {
        Vec::new()
    };
    if let Some(cpus) = &opts.cpus {
        keep_off(cpus);
    }
    fs.start();
    // Where stderr goes once the terminal has heard how the mount went: the
    // log file (None) or the journal.
    let log_sink: Option<(OwnedFd, Option<&std::path::Path>)> =
        if let (Some(f), Some(p)) = (log, log_path.as_deref()) {
            publish_path(&fs, "monfs/log", p);
            Some((f.into(), Some(p)))
        } else if let Some(j) = journal {
            publish_path(
                &fs,
                "monfs/log",
                std::path::Path::new("journal (journalctl -t monfs)"),
            );
            Some((j.into(), None))
        } else {
            None
        };
    if let Some(cpus) = &opts.cpus {
        session.set_cpus(cpus.set());
    }
    session.set_request_stats(fs.requests.clone());
    session.start(opts.threads);
    // Which transport serves, on the terminal (stderr is still the caller's).
    let transport = session.transport(TRANSPORT_WAIT);
    let reason = match &transport {
        Transport::DevFuse(why) => why.clone(),
        Transport::Pending => Some(format!(
            "the kernel did not settle it within {} s",
            TRANSPORT_WAIT.as_secs()
        )),
        Transport::IoUring => None,
    };
    if uring == UringMode::Require && transport != Transport::IoUring {
        let why = reason.unwrap_or_default();
        return give_up(
            format!("--io-uring: FUSE over io_uring could not be used ({why})"),
            &cuse_sessions,
            &mut report,
        );
    }
    match &transport {
        Transport::Pending => eprintln!(
            "monfs: {} mounted (which transport serves is not known yet)",
            mountpoint.display()
        ),
        t => eprintln!(
            "monfs: {} mounted, requests through {t}",
            mountpoint.display()
        ),
    }
    if transport != Transport::IoUring {
        if let Some(note) = avail
            .as_ref()
            .and_then(|a| io_uring_note(a, reason.as_deref()))
        {
            eprintln!("{note}");
        }
    }
    match log_sink {
        Some((f, Some(p))) => {
            info!(log = %p.display(), "logging to file from now on");
            redirect(&f, 2);
        }
        Some((j, None)) => {
            info!("logging to the journal from now on (journalctl -t monfs)");
            redirect(&j, 2);
        }
        None => {}
    }
    let buses = fs.usbmon.bus_numbers();
    match reason.as_deref() {
        Some(why) if avail.is_some() => {
            info!(mountpoint = %mountpoint.display(), ?buses, %transport, why, "mounted")
        }
        _ => info!(mountpoint = %mountpoint.display(), ?buses, %transport, "mounted"),
    }
    if let Some(mut r) = report.take() {
        let _ = r.write_all(&[0]);
    }
    {
        let mp = mountpoint.clone();
        let session = Arc::clone(&session);
        let socket_file = socket_file.clone();
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || loop {
                if let Ok(sig) = sigset.wait() {
                    info!(signal = %sig, "unmounting");
                    socket_file.remove();
                    if let Err(e) = crate::fuse::unmount(&mp) {
                        warn!("unmount: {e}");
                    }
                    // A busy mount is detached lazily and stays served while
                    // files are open. Give it a moment, then fail the blocked
                    // readers (EIO) and leave: closing /dev/fuse aborts the
                    // connection, so nothing hangs.
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    info!("files still open: failing blocked readers and exiting");
                    session.abort_parked(crate::base::errno::Errno::EIO);
                    if rmdir_mountpoint {
                        let _ = std::fs::remove_dir(&mp);
                    }
                    std::process::exit(0);
                }
            })
            .expect("spawn signal thread");
    }
    session.wait();
    socket_file.remove();
    for c in &cuse_sessions {
        c.shutdown();
    }
    fs.stop();
    // Usually unmounted already (that is what ended the session).
    if let Err(e) = crate::fuse::unmount(&mountpoint) {
        tracing::debug!("unmount: {e}");
    }
    if rmdir_mountpoint {
        let _ = std::fs::remove_dir(&mountpoint);
    }
    info!("unmounted");
    ExitCode::SUCCESS
}

/// With `--cpus`, move this thread, and so every thread it starts from now
/// on (the simulators above all), to the other CPUs, where there are any.
/// The request threads set their own CPUs. A bus thread woken by a request
/// thread would otherwise be moved to the waker's CPU by the scheduler and
/// stay there for tens of milliseconds, taking a third of the CPU that
/// tcpdump and the request threads need.
fn keep_off(cpus: &crate::fuse::CpuList) {
    let me = nix::unistd::Pid::from_raw(0);
    let rest = nix::sched::sched_getaffinity(me).map(|a| cpus.others(&a));
    if let Ok(Some(rest)) = rest {
        if let Err(e) = nix::sched::sched_setaffinity(me, &rest) {
            warn!("--cpus: cannot keep the simulators off the CPUs asked for: {e}");
        }
    }
}

/// Create the CUSE character devices. usbmon0 gets a dynamic major, which the
/// other usbmon devices then share with minor = bus number, as in the kernel.
/// If one cannot be created, those that were are shut down and the error
/// says why.
fn start_cuse(
    fs: &Monfs,
    cpus: Option<&crate::fuse::CpuList>,
) -> Result<Vec<Arc<Session>>, super::error::CuseStartError> {
    let mut sessions: Vec<Arc<Session>> = Vec::new();
    let mut usbmon_major = 0;
    for (name, node, minor) in fs.char_devices() {
        let major = if name.starts_with("usbmon") {
            usbmon_major
        } else {
            0
        };
        let s = match Session::cuse(node, &name, major, minor) {
            Ok(s) => s,
            Err(e) => {
                for s in &sessions {
                    s.shutdown();
                }
                return Err(super::error::CuseStartError {
                    name,
                    reason: format!("{e:#}"),
                });
            }
        };
        if let Some(cpus) = cpus {
            s.set_cpus(cpus.set());
        }
        s.set_request_stats(fs.requests.clone());
        let runner = Arc::clone(&s);
        std::thread::Builder::new()
            .name(format!("cuse-{name}"))
            .spawn(move || runner.run(2))
            .expect("spawn CUSE thread");
        // Wait for the kernel to create the device, and learn its number.
        match crate::fuse::cuse_device_number(&name, 200) {
            Some((major, minor)) => {
                let number = format!("{major}:{minor}");
                info!(device = %format!("/dev/{name}"), number = %number, "CUSE device ready");
                if name == "usbmon0" {
                    usbmon_major = major;
                }
            }
            None => error!(device = %name, "CUSE device did not appear in /sys/class/cuse"),
        }
        sessions.push(s);
    }
    Ok(sessions)
}
