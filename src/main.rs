//! The `monfs` command.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand};
use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{dup2, fork, getgid, getuid, pipe2, setsid, ForkResult};
use tracing::{error, info, warn};

use monfs::config::{Config, ConfigError};
use monfs::daemon::Monfs;
use monfs::fuse::{IoUringAvailability, MountOptions, Session, Transport, IO_URING_PARAM};

/// monfs mounts a userspace replica of Linux's usbmon (text and binary),
/// tracefs event tracing, user_events and the z/VM monitor reader, fed by
/// device simulators, so that real tools can be developed and tested against
/// them without root-only kernel features or hardware.
#[derive(Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// Log level: error, warn, info, debug or trace (also MONFS_LOG).
    #[arg(long, global = true, default_value = "info", env = "MONFS_LOG")]
    log_level: String,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Mount monfs at MOUNTPOINT (an existing directory). Needs /dev/fuse; as
    /// root monfs mounts by itself, as any other user through fusermount3
    /// (package fuse3) with auto_unmount, so that even a killed daemon
    /// leaves no mount behind (see docs/rootless.md). Unmounts cleanly on
    /// SIGTERM and SIGINT.
    Mount {
        /// Where to mount.
        mountpoint: PathBuf,
        /// Configuration file (YAML). Without it, the built-in default, which is
        /// config/default.yaml.
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Stay in the foreground (otherwise monfs returns once the mount is up
        /// and serves it from the background).
        #[arg(long, short)]
        foreground: bool,
        /// Serve only processes running as the mounting user. By default other
        /// users are let in (allow_other) and the kernel enforces the file
        /// modes (default_permissions), as on debugfs; tcpdump needs this
        /// because it drops to user `tcpdump` after opening /dev/usbmonN.
        /// Without root, allow_other needs `user_allow_other` in
        /// /etc/fuse.conf; where it is missing the mount is private anyway
        /// (and the log says so).
        #[arg(long)]
        private: bool,
        /// Override the config's seed (URB tags, data, timing).
        #[arg(long)]
        seed: Option<u64>,
        /// Threads serving FUSE requests (at least 2, so that page-cache
        /// updates never wait on the thread that sends them).
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(2..=64))]
        threads: u16,
        /// Also create real character devices /dev/usbmonN and /dev/monreader
        /// through CUSE (needs root and /dev/cuse: `modprobe cuse`). Where
        /// /dev/cuse is missing or cannot be opened, monfs says so and exits
        /// 1 without mounting.
        #[arg(long)]
        cuse: bool,
        /// Control socket path (default NAME.sock, NAME the mountpoint's
        /// absolute path with slashes as dashes, e.g. mnt-monfs.sock for
        /// /mnt/monfs, in /run/monfs for root, else in $XDG_RUNTIME_DIR/monfs
        /// or /tmp/monfs-<uid>; in a directory kept at mode 0700; also named
        /// in MOUNTPOINT/monfs/socket).
        /// Only a stale socket (one nobody listens on) there is replaced;
        /// anything else is an error (exit 2). Removed when the daemon exits.
        #[arg(long)]
        ctl_socket: Option<PathBuf>,
        /// Log file (appended to, mode 0600; also named in
        /// MOUNTPOINT/monfs/log). Messages go to stderr until the mount is up,
        /// then to this file. Default: in the background, the systemd journal
        /// when one is running (`journalctl -t monfs`), else a file next to the
        /// control socket (NAME.log, named as the socket is); with --foreground,
        /// stderr.
        #[arg(long)]
        log_file: Option<PathBuf>,
        /// Refuse shared mappings of dev/usbmonN (mmap gives ENODEV, as on a
        /// CUSE device), so that libpcap uses its read path (linktype 189).
        #[arg(long)]
        no_mmap: bool,
        /// Require FUSE over io_uring: where it cannot be had, monfs says why
        /// and exits 1, leaving nothing mounted. Without this option monfs
        /// uses io_uring wherever the kernel allows it (Linux 6.14+ built
        /// with CONFIG_FUSE_IO_URING, after `echo Y >
        /// /sys/module/fuse/parameters/enable_uring` as root) and /dev/fuse
        /// otherwise, and says at mount which one serves. io_uring has one
        /// queue per CPU, served by a thread on that CPU, which makes each
        /// request several times cheaper (tcpdump's ioctls above all).
        #[arg(long, conflicts_with = "no_io_uring")]
        io_uring: bool,
        /// Take requests through /dev/fuse even where FUSE over io_uring is
        /// available.
        #[arg(long)]
        no_io_uring: bool,
        /// Keep the threads that take requests from /dev/fuse (and /dev/cuse)
        /// on these CPUs (as `taskset -c` takes them: 0, 0,2, 0-3). A request
        /// from a program on one of them is then served on its own CPU, with
        /// no wake-up of another: on VMs where that wake-up is expensive this
        /// makes each request several times cheaper. Run the busy client
        /// there too, e.g. `taskset -c 0 tcpdump ...` with --cpus 0. The
        /// simulators then run on the other CPUs, where there are any. Not
        /// needed where requests come through io_uring, which serves each CPU
        /// on that CPU.
        #[arg(long, value_parser = monfs::fuse::parse_cpu_list)]
        cpus: Option<monfs::fuse::CpuList>,
        /// With --foreground: write one byte to this descriptor once the
        /// mount is up (0) or has failed (the exit status), as the waiting
        /// parent of a background mount is told (`monfs run` uses it).
        #[arg(long, hide = true, requires = "foreground")]
        ready_fd: Option<i32>,
        /// Remove the (then empty) mountpoint directory after unmounting at
        /// exit (`monfs run`'s temporary mountpoint, also when monfs run was
        /// killed).
        #[arg(long, hide = true, requires = "foreground")]
        rmdir_mountpoint: bool,
        /// The memory budget (bytes, or with a K, M, G or T suffix): what
        /// the trace rings of every instance, the snapshot buffers, hist
        /// maps and the simulated USB topology may hold together, charged
        /// when their size is asked for (past it: ENOMEM, or a refused
        /// configuration or plug naming the field). Ordinary users together
        /// get half of it, one user a quarter. Default: half of
        /// MemAvailable at start. See docs/threat-model.md.
        #[arg(long, value_parser = parse_memory)]
        memory: Option<usize>,
    },
    /// Run COMMAND with a monfs of its own where the kernel's USB and
    /// tracing files are: lsusb, libusb programs, tcpdump and trace-cmd
    /// then work on the simulated devices.
    ///
    /// monfs run mounts a monfs that only COMMAND sees and runs COMMAND
    /// where the kernel's paths are monfs's: /dev/usbmonN,
    /// /sys/kernel/debug/usb/usbmon and usb/devices, /sys/kernel/tracing and
    /// /sys/kernel/debug/tracing, /dev/monreader, /dev/bus/usb, /sys/bus/usb
    /// and the USB devices in /sys/devices. So unmodified tools (lsusb, libusb and pyusb programs,
    /// tcpdump, trace-cmd) work on the simulated devices, and nothing
    /// changes outside: the mount and the paths live in a private mount
    /// namespace (as any user but root, in a user namespace too, where
    /// COMMAND still runs as you), and go when COMMAND ends. COMMAND gets
    /// MONFS_MOUNT (the mount's path) and MONFS_SOCKET (its control socket,
    /// which `monfs ctl` then uses by itself) in its environment, and
    /// SYSTEMD_DEVICE_VERIFY_SYSFS=0, with which libudev accepts monfs's
    /// sysfs directories (docs/interfaces.md, "monfs run"). The exit
    /// status is COMMAND's (128+N if signal N killed it); 125 if monfs could
    /// not start (the daemon's last log lines are shown), 126 if COMMAND
    /// could not be run, 127 if it was not found. Example:
    /// `monfs run --config my.yaml -- lsusb -t`.
    Run {
        /// Configuration file (YAML); without it, the built-in default.
        #[arg(long, short, conflicts_with = "use_mount")]
        config: Option<PathBuf>,
        /// Override the config's seed (URB tags, data, timing).
        #[arg(long, conflicts_with = "use_mount")]
        seed: Option<u64>,
        /// Threads serving FUSE requests.
        #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(2..=64))]
        threads: u16,
        /// Refuse shared mappings of dev/usbmonN (see `monfs mount --no-mmap`).
        #[arg(long)]
        no_mmap: bool,
        /// Take requests through /dev/fuse even where FUSE over io_uring is
        /// available.
        #[arg(long)]
        no_io_uring: bool,
        /// Keep the daemon's log in this file (default: a file of no name,
        /// shown if monfs fails).
        #[arg(long, conflicts_with = "use_mount")]
        log_file: Option<PathBuf>,
        /// Mount nothing: use the monfs already mounted at DIR (found by its
        /// file-system type), as the monfs-usbmon-ns and monfs-trace-ns
        /// helpers do.
        #[arg(long = "use", value_name = "DIR")]
        use_mount: Option<PathBuf>,
        /// Start COMMAND at once, without waiting for the simulated devices
        /// to enumerate. By default `monfs run` waits (up to 30 s) until the
        /// devices the configuration plugs at start are listed and their
        /// drivers bound, as on a machine booted with them.
        #[arg(long)]
        no_wait: bool,
        /// Without root: run COMMAND as root of the user namespace (uid 0
        /// there, still you outside), for tools that insist on root, such as
        /// trace-cmd. By default COMMAND runs as your own uid and gid. (As
        /// root this changes nothing.)
        #[arg(long)]
        ns_root: bool,
        /// The command to run, and its arguments (after `--`).
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// Unmount a monfs (or any FUSE) mount at MOUNTPOINT: umount(2) as root,
    /// `fusermount3 -u` otherwise; lazily (detached, gone once unused) if it
    /// is busy. The daemon then exits.
    Umount {
        /// The mountpoint.
        mountpoint: PathBuf,
    },
    /// Send a command to a running daemon's control socket (see `monfs ctl
    /// MOUNTPOINT help`). Exit 0 if it was carried out, 1 if refused. Inside
    /// `monfs run`, where MONFS_SOCKET names the socket, MOUNTPOINT may be
    /// left out: `monfs ctl plug 1 3 mass-storage`.
    Ctl {
        /// The mountpoint of the daemon to talk to (optional where
        /// MONFS_SOCKET is set).
        mountpoint: PathBuf,
        /// The command, e.g. `plug 1 3 mass-storage` or `fault 1 3 stall`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<String>,
        /// Socket path, if the daemon was started with --ctl-socket
        /// (default: MONFS_SOCKET where MOUNTPOINT is left out).
        #[arg(long)]
        socket: Option<PathBuf>,
    },
    /// Decode z/VM monitor data from a monreader device (or a saved stream):
    /// data sets, monitor control elements and records, readably.
    ZvmDump {
        /// Device to read (default /dev/monreader; in a mount: MNT/dev/monreader).
        #[arg(long, conflicts_with = "file")]
        device: Option<PathBuf>,
        /// A saved stream: the bytes read from the device, concatenated.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Read one byte at a time instead of 64 KiB blocks.
        #[arg(long)]
        one_byte: bool,
        /// Stop after this many data sets.
        #[arg(long)]
        sets: Option<u64>,
    },
    /// Record a bus of a running mount to a capture file that Wireshark and
    /// tcpdump open (linktype 220, USB_LINUX_MMAPPED), and that a `replay:`
    /// bus can play back. Reads MOUNTPOINT/dev/usbmonN with MON_IOCX_GETX,
    /// so it works from any process; stops after --duration, or on Ctrl-C.
    Record {
        /// The mountpoint of a running monfs.
        mountpoint: PathBuf,
        /// Bus to record (0: all buses).
        #[arg(long, short, default_value_t = 0, value_parser = clap::value_parser!(u16).range(0..=127))]
        bus: u16,
        /// Output file (`-`: standard output, e.g. `| wireshark -k -i -`).
        #[arg(long, short)]
        output: PathBuf,
        /// Stop after this many seconds (default: until Ctrl-C).
        #[arg(long, short)]
        duration: Option<f64>,
        /// pcapng or pcap (default: pcap if the output ends in .pcap, else pcapng).
        #[arg(long)]
        format: Option<monfs::capture::write::Format>,
    },
    /// Check a configuration file and exit: 0 if valid, 2 with a message that
    /// names the field, line and column if not.
    CheckConfig {
        /// The file to check.
        file: PathBuf,
        /// The memory budget to check the topology against (as `mount
        /// --memory` takes it; default: half of MemAvailable now).
        #[arg(long, value_parser = parse_memory)]
        memory: Option<usize>,
    },
    /// Write the man pages or the shell completions (what the Debian package
    /// installs; after `cargo install`, put them where man and your shell look).
    Generate {
        #[command(subcommand)]
        what: Generate,
    },
}

#[derive(Subcommand)]
enum Generate {
    /// Write monfs.1, a monfs-SUBCOMMAND.1 for each subcommand and the
    /// helpers' pages (monfs-usbmon-ns.1, monfs-trace-ns.1) into DIR.
    Man {
        /// Directory to write the pages into (created if missing).
        dir: PathBuf,
    },
    /// Write the completions for SHELL into DIR (as `monfs` for bash, `_monfs`
    /// for zsh, `monfs.fish` for fish), or to standard output without DIR.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
        /// Directory to write the file into (created if missing).
        dir: Option<PathBuf>,
    },
}

fn init_logging(level: &str, ansi: bool) {
    let level = level.parse().unwrap_or(tracing::Level::INFO);
    tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_ansi(ansi)
        .with_target(false)
        .init();
    // Panics go to the log, and only end the thread (or, in request paths,
    // the one request: see monfs::fuse), never the process.
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let backtrace = std::backtrace::Backtrace::capture();
        let bt = match backtrace.status() {
            std::backtrace::BacktraceStatus::Captured => format!("\n{backtrace}"),
            _ => String::new(),
        };
        error!(
            thread = thread.name().unwrap_or("<unnamed>"),
            "panic: {info}{bt}"
        );
    }));
}

/// Check that the topology of `cfg` (read from `path`, for positions)
/// fits in the memory budget, and charge it: the message names the field,
/// its line and column.
fn topology_charge(
    cfg: &Config,
    path: Option<&std::path::Path>,
) -> Result<monfs::base::budget::Grant, String> {
    use monfs::base::budget::MEMORY;
    let text = path.and_then(|p| std::fs::read_to_string(p).ok());
    let name = path.map_or_else(|| "(built-in config)".into(), |p| p.display().to_string());
    let room = MEMORY.limit().saturating_sub(MEMORY.used());
    let need = monfs::sim::usb::memory::check(cfg, text.as_deref(), room).map_err(|e| {
        let sep = if e.at.is_empty() { " " } else { "" };
        format!("{name}:{sep}{e}")
    })?;
    MEMORY
        .take(need)
        .map_err(|e| format!("{name}: the USB topology: {e}"))
}

fn load_config(path: &Option<PathBuf>) -> Result<Config, ConfigError> {
    match path {
        Some(p) => monfs::sim::usb::load::load_config(p),
        None => Ok(Config::builtin()),
    }
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

/// Fork; the parent waits until the child reports the mount up (or failed) and
/// exits with that status. Returns the pipe the child reports on. The child
/// starts a new session, has stdin and stdout on /dev/null and closes every
/// other descriptor it inherited (so that no caller's pipe is held open);
/// stderr stays until the mount is up, so that errors reach the caller.
fn daemonize() -> std::fs::File {
    let die = |what: &str, e: nix::errno::Errno| -> ! {
        eprintln!("monfs: {what}: {e}");
        std::process::exit(1);
    };
    let (r, w) = pipe2(OFlag::O_CLOEXEC).unwrap_or_else(|e| die("pipe", e));
    // SAFETY: no thread exists yet, so the child may do anything.
    match unsafe { fork() } {
        Err(e) => die("fork", e),
        Ok(ForkResult::Child) => {
            drop(r);
            let _ = setsid();
            // Above stdio, whatever the caller left closed.
            let raw = fcntl(&w, FcntlArg::F_DUPFD_CLOEXEC(3)).unwrap_or_else(|e| die("fcntl", e));
            drop(w);
            // SAFETY: F_DUPFD_CLOEXEC made `raw`, a descriptor nothing else owns.
            let w = unsafe { OwnedFd::from_raw_fd(raw) };
            detach_stdio();
            close_inherited_fds(w.as_raw_fd());
            std::fs::File::from(w)
        }
        Ok(ForkResult::Parent { .. }) => {
            drop(w);
            let mut r = std::fs::File::from(r);
            let mut b = [0u8; 1];
            let code = match r.read(&mut b) {
                Ok(1) => b[0] as i32,
                _ => 1,
            };
            std::process::exit(code);
        }
    }
}

/// The descriptor `--ready-fd` names, kept from whatever this process
/// starts (close-on-exec).
fn ready_pipe(fd: i32) -> Result<std::fs::File, nix::errno::Errno> {
    // SAFETY: F_GETFD on any number is harmless.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    fcntl(borrowed, FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    // SAFETY: the caller handed us this descriptor to own; it is open.
    Ok(std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Close every descriptor from 3 up except `keep`: in the daemon, before it
/// opens any of its own.
fn close_inherited_fds(keep: i32) {
    let keep = keep as libc::c_uint;
    for (lo, hi) in [(3, keep.saturating_sub(1)), (keep + 1, libc::c_uint::MAX)] {
        if lo > hi {
            continue;
        }
        // SAFETY: closes descriptors nothing in this process uses.
        if unsafe { libc::syscall(libc::SYS_close_range, lo, hi, 0) } == 0 {
            continue;
        }
        // No close_range (Linux < 5.9): close what /proc lists.
        let fds: Vec<libc::c_uint> = std::fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect();
        for fd in fds.into_iter().filter(|fd| (lo..=hi).contains(fd)) {
            // SAFETY: as above (the directory's own descriptor is closed already).
            unsafe { libc::close(fd as i32) };
        }
    }
}

/// stdin and stdout on /dev/null.
fn detach_stdio() {
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        redirect(&null, 0);
        redirect(&null, 1);
    }
}

/// Make descriptor `target` (0, 1 or 2) a copy of `to`.
fn redirect(to: &impl AsFd, target: i32) {
    // SAFETY: `target` is one of our standard descriptors, which dup2
    // replaces atomically; nothing holds it as an OwnedFd.
    let mut fd = unsafe { OwnedFd::from_raw_fd(target) };
    let _ = dup2(to, &mut fd);
    // It stays open as the standard descriptor.
    let _ = fd.into_raw_fd();
}

/// Open (append, create 0600, never through a symlink) the log file.
fn open_log(path: &std::path::Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::OpenOptionsExt;
    if path.parent() == Some(monfs::control::run_dir().as_path()) {
        monfs::control::ensure_private_dir(path.parent().unwrap()).map_err(|e| e.to_string())?;
    }
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("log file {}: {e}", path.display()))
}

/// The journal's stream socket, where systemd connects services' stderr.
/// `MONFS_JOURNAL_SOCKET` names another (tests; `/nonexistent` turns the
/// journal off).
fn journal_socket() -> PathBuf {
    std::env::var_os("MONFS_JOURNAL_SOCKET")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/run/systemd/journal/stdout"))
}

/// A stream into the journal, if one is running: connected to its stream
/// socket and introduced with the header systemd-journald expects there
/// (identifier `monfs`, no unit, priority info, no level prefixes, no
/// forwarding), after which every line written is one journal entry.
fn journal_stream() -> Option<std::os::unix::net::UnixStream> {
    let mut s = std::os::unix::net::UnixStream::connect(journal_socket()).ok()?;
    s.write_all(b"monfs\n\n6\n0\n0\n0\n0\n").ok()?;
    let _ = s.shutdown(std::net::Shutdown::Read);
    Some(s)
}

/// Publish a path as a read-only file in the mount (`monfs/socket`, `monfs/log`).
fn publish_path(fs: &Monfs, name: &str, path: &std::path::Path) {
    let text = format!("{}\n", path.display()).into_bytes();
    fs.tree.add(
        name,
        monfs::base::vfs::NodeKind::File(Arc::new(monfs::base::vfs::SnapshotFile::new(
            move || text.clone(),
        ))),
        0o444,
    );
}

/// Whether requests are to come through FUSE over io_uring.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UringMode {
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

#[allow(clippy::too_many_arguments)]
fn mount(
    mountpoint: PathBuf,
    config: Option<PathBuf>,
    foreground: bool,
    mut opts: MountOptions,
    uring: UringMode,
    seed: Option<u64>,
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
    if seed.is_some() {
        cfg.seed = seed;
    }
    // What was asked for and the kernel cannot give fails here, on the
    // terminal and before anything is mounted.
    let avail = match uring {
        UringMode::Off => None,
        UringMode::Auto | UringMode::Require => Some(monfs::fuse::io_uring_availability()),
    };
    if uring == UringMode::Require {
        if let Some(why) = avail.as_ref().and_then(io_uring_unavailable) {
            eprintln!("monfs: --io-uring: {why}; nothing mounted");
            return ExitCode::from(1);
        }
    }
    opts.io_uring = avail == Some(IoUringAvailability::Available);
    if cuse {
        if let Err(e) = monfs::fuse::check_cuse(std::path::Path::new(monfs::fuse::CUSE_DEVICE)) {
            eprintln!("monfs: --cuse: {e}; nothing mounted");
            return ExitCode::from(1);
        }
    }
    let socket_path = ctl_socket.unwrap_or_else(|| monfs::control::default_socket(&mountpoint));
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
    let socket = match monfs::control::ControlSocket::bind(&socket_path) {
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
    monfs::base::budget::bound_allocator();
    let fs = Monfs::new(&cfg, uid, gid);
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
    if let Some(why) = monfs::base::procmem::ptrace_restriction() {
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
        if let Err(e) = monfs::fuse::unmount(&mountpoint) {
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
                    if let Err(e) = monfs::fuse::unmount(&mp) {
                        warn!("unmount: {e}");
                    }
                    // A busy mount is detached lazily and stays served while
                    // files are open. Give it a moment, then fail the blocked
                    // readers (EIO) and leave: closing /dev/fuse aborts the
                    // connection, so nothing hangs.
                    std::thread::sleep(std::time::Duration::from_millis(300));
                    info!("files still open: failing blocked readers and exiting");
                    session.abort_parked(monfs::base::errno::Errno::EIO);
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
    if let Err(e) = monfs::fuse::unmount(&mountpoint) {
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
fn keep_off(cpus: &monfs::fuse::CpuList) {
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
    cpus: Option<&monfs::fuse::CpuList>,
) -> Result<Vec<Arc<Session>>, String> {
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
                return Err(format!("/dev/{name}: {e:#}"));
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
        let sys = format!("/sys/class/cuse/{name}/dev");
        let mut dev = None;
        for _ in 0..200 {
            if let Ok(t) = std::fs::read_to_string(&sys) {
                dev = Some(t.trim().to_string());
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        match dev {
            Some(d) => {
                info!(device = %format!("/dev/{name}"), number = %d, "CUSE device ready");
                if name == "usbmon0" {
                    usbmon_major = d
                        .split(':')
                        .next()
                        .and_then(|m| m.parse().ok())
                        .unwrap_or(0);
                }
            }
            None => error!(device = %name, "CUSE device did not appear in /sys/class/cuse"),
        }
        sessions.push(s);
    }
    Ok(sessions)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Colour only on a terminal, never in a log file.
    let tty = std::io::stderr().is_terminal();
    let to_file = matches!(&cli.cmd, Cmd::Mount { foreground, log_file, .. }
        if !*foreground || log_file.is_some());
    init_logging(&cli.log_level, tty && !to_file);
    match cli.cmd {
        Cmd::Mount {
            mountpoint,
            config,
            foreground,
            private,
            seed,
            threads,
            no_mmap,
            io_uring,
            no_io_uring,
            cpus,
            cuse,
            ctl_socket,
            log_file,
            ready_fd,
            rmdir_mountpoint,
            memory,
        } => {
            monfs::base::budget::set_memory_total(
                memory.unwrap_or_else(monfs::base::budget::default_memory_total),
            );
            mount(
                mountpoint,
                config,
                foreground,
                MountOptions {
                    allow_other: !private,
                    threads: threads as usize,
                    mmap: !no_mmap,
                    io_uring: false,
                    cpus,
                },
                match (io_uring, no_io_uring) {
                    (true, _) => UringMode::Require,
                    (_, true) => UringMode::Off,
                    _ => UringMode::Auto,
                },
                seed,
                cuse,
                ctl_socket,
                log_file,
                ready_fd,
                rmdir_mountpoint,
            )
        }
        Cmd::Run {
            config,
            seed,
            threads,
            no_mmap,
            no_io_uring,
            log_file,
            use_mount,
            ns_root,
            no_wait,
            command,
        } => {
            let config_path = config
                .as_ref()
                .map(|c| std::path::absolute(c).unwrap_or(c.clone()));
            let mut mount_args: Vec<std::ffi::OsString> = Vec::new();
            if let Some(c) = &config_path {
                mount_args.push("--config".into());
                mount_args.push(c.clone().into());
            }
            if let Some(s) = seed {
                mount_args.push("--seed".into());
                mount_args.push(s.to_string().into());
            }
            mount_args.push("--threads".into());
            mount_args.push(threads.to_string().into());
            if no_mmap {
                mount_args.push("--no-mmap".into());
            }
            if no_io_uring {
                mount_args.push("--no-io-uring".into());
            }
            let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
            monfs::cli::run::run(monfs::cli::run::RunOptions {
                exe,
                log_level: cli.log_level.clone(),
                mount_args,
                log_file: log_file.map(|p| std::path::absolute(&p).unwrap_or(p)),
                use_mount,
                ns_root,
                config: config_path,
                wait: !no_wait,
                command,
            })
        }
        Cmd::Umount { mountpoint } => match monfs::fuse::unmount(&mountpoint) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("monfs: cannot unmount {}: {e}", mountpoint.display());
                ExitCode::FAILURE
            }
        },
        Cmd::Ctl {
            mountpoint,
            command,
            socket,
        } => {
            // Inside `monfs run`: no MOUNTPOINT, MONFS_SOCKET names the socket.
            let env_socket = std::env::var_os("MONFS_SOCKET").filter(|s| !s.is_empty());
            let (mountpoint, command, socket) = match env_socket {
                Some(s) if socket.is_none() && !mountpoint.is_dir() => {
                    let mut words = vec![mountpoint.to_string_lossy().into_owned()];
                    words.extend(command);
                    (PathBuf::new(), words, Some(PathBuf::from(s)))
                }
                _ => (mountpoint, command, socket),
            };
            if command.is_empty() {
                eprintln!("monfs ctl: no command given (try `monfs ctl MOUNTPOINT help`)");
                return ExitCode::from(2);
            }
            let socket = socket.unwrap_or_else(|| {
                std::fs::read_to_string(mountpoint.join("monfs/socket"))
                    .map(|s| PathBuf::from(s.trim()))
                    .unwrap_or_else(|_| monfs::control::default_socket(&mountpoint))
            });
            // Words with spaces were one argument: keep them one word.
            let line: Vec<String> = command
                .iter()
                .map(|w| match w.split_once('=') {
                    Some((k, v)) if v.contains(char::is_whitespace) && !v.contains('"') => {
                        format!("{k}=\"{v}\"")
                    }
                    _ => w.clone(),
                })
                .collect();
            let (line, file) = match replay_file(&line.join(" ")) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("monfs ctl: {e}");
                    return ExitCode::from(1);
                }
            };
            match monfs::control::send(&socket, &line, file.as_ref()) {
                Ok(answer) => {
                    print!("{answer}");
                    if answer.starts_with("ok") {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::from(1)
                    }
                }
                Err(e) => {
                    eprintln!("monfs: control socket {}: {e}", socket.display());
                    ExitCode::from(1)
                }
            }
        }
        Cmd::ZvmDump {
            device,
            file,
            one_byte,
            sets,
        } => match monfs::cli::zvm_dump::run(device.as_deref(), file.as_deref(), one_byte, sets) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("monfs: {e:#}");
                ExitCode::from(1)
            }
        },
        Cmd::Record {
            mountpoint,
            bus,
            output,
            duration,
            format,
        } => {
            let dev = mountpoint.join(format!("dev/usbmon{bus}"));
            let format =
                format.unwrap_or_else(|| monfs::capture::write::Format::from_path(&output));
            let duration = match duration {
                Some(s) if s.is_finite() && s > 0.0 => Some(std::time::Duration::from_secs_f64(s)),
                Some(s) => {
                    error!("--duration must be a positive number of seconds, got {s}");
                    return ExitCode::from(2);
                }
                None => None,
            };
            match monfs::cli::record::record(&dev, &output, duration, format) {
                // The reader of the pipe went away (`| head`): a normal end,
                // quiet as tcpdump's.
                Ok(r) if r.reader_gone => ExitCode::SUCCESS,
                Ok(r) => {
                    info!(packets = r.packets, output = %output.display(), "recorded");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    error!("record: {e:#}");
                    ExitCode::FAILURE
                }
            }
        }
        Cmd::CheckConfig { file, memory } => {
            monfs::base::budget::set_memory_total(
                memory.unwrap_or_else(monfs::base::budget::default_memory_total),
            );
            match monfs::sim::usb::load::load_config(&file)
                .map_err(|e| e.to_string())
                .and_then(|c| match monfs::sim::usb::load::check_replay_files(&c) {
                    Ok(()) => Ok(c),
                    Err(e) => Err(format!("{}: {e}", file.display())),
                })
                .and_then(|c| topology_charge(&c, Some(&file)).map(|_| c))
            {
                Ok(c) => {
                    println!(
                        "{}: ok ({} USB bus{})",
                        file.display(),
                        c.usb.buses.len(),
                        if c.usb.buses.len() == 1 { "" } else { "es" }
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("monfs: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Cmd::Generate { what } => generate(what),
    }
}

/// A `--memory` value: bytes, or a number with a K, M, G or T suffix.
fn parse_memory(s: &str) -> Result<usize, String> {
    match monfs::base::budget::parse_size(s) {
        Some(n) if n >= 1 << 20 => Ok(n),
        Some(_) => Err("at least 1M".into()),
        None => Err("a size such as 512M or 4G".into()),
    }
}

/// `monfs generate`: man pages or completions, from this very command line.
fn generate(what: Generate) -> ExitCode {
    use clap::CommandFactory;
    use monfs::cli::generate;
    let written = match what {
        Generate::Man { dir } => generate::man_pages(Cli::command(), &dir),
        Generate::Completions { shell, dir: None } => {
            generate::completions(shell, Cli::command(), "monfs", &mut std::io::stdout());
            return ExitCode::SUCCESS;
        }
        Generate::Completions {
            shell,
            dir: Some(dir),
        } => generate::completions_to(shell, Cli::command(), "monfs", &dir).map(|p| vec![p]),
    };
    match written {
        Ok(paths) => {
            for p in paths {
                println!("{}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("monfs generate: {e}");
            ExitCode::FAILURE
        }
    }
}

/// For `replay start BUS FILE ...`, `plug BUS PORTS from-capture FILE
/// DEVADDR ...` and `plug ... descriptors=FILE`: open FILE with the caller's own rights
/// (without blocking, so a FIFO cannot hang the client) to pass it to the
/// daemon, and name it by its absolute path in the command, where it is only
/// a label. Other commands are returned as they are.
fn replay_file(line: &str) -> Result<(String, Option<std::fs::File>), String> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut words = monfs::control::split_words(line).map_err(|e| e.to_string())?;
    // Which word is FILE: `replay start BUS FILE`, `plug BUS PORTS
    // from-capture FILE DEVADDR`.
    // `plug BUS PORTS KIND ... descriptors=FILE`.
    let (at, prefix) = match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["replay", "start", _, _, ..] => (3, ""),
        ["plug", _, _, "from-capture", _, ..] => (4, ""),
        ["plug", ..] => match words
            .iter()
            .skip(4)
            .position(|w| w.starts_with("descriptors="))
        {
            Some(i) => (4 + i, "descriptors="),
            None => return Ok((line.to_string(), None)),
        },
        _ => return Ok((line.to_string(), None)),
    };
    let path = PathBuf::from(&words[at][prefix.len()..]);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    words[at] = format!(
        "{prefix}{}",
        std::path::absolute(&path).unwrap_or(path).display()
    );
    let quoted: Vec<String> = words
        .iter()
        .map(|w| {
            if w.contains(char::is_whitespace) {
                format!("\"{}\"", w.replace('"', "'"))
            } else {
                w.clone()
            }
        })
        .collect();
    Ok((quoted.join(" "), Some(file)))
}
