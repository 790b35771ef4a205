//! The `monfs` command.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing::{error, info};

use monfs::cli::mount::{mount, Overrides, UringMode};
use monfs::config::Timing;
use monfs::fuse::MountOptions;

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
        /// Override the config's `timing`: `realistic` (a USB bus's
        /// latencies) or `fast` (the same events in the same order, every
        /// simulated latency a thousandth as long; for test suites).
        #[arg(long, value_enum)]
        timing: Option<Timing>,
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
    /// /sys/kernel/debug/tracing, /dev/monreader, /dev/bus/usb, /sys/bus/usb,
    /// /sys/dev/char (the USB devices' 189:N links) and the USB devices in
    /// /sys/devices. So unmodified tools (lsusb, libusb and pyusb programs,
    /// tcpdump, trace-cmd) work on the simulated devices, and nothing
    /// changes outside: the mount and the paths live in a private mount
    /// namespace (as any user but root, in a user namespace too, where
    /// COMMAND still runs as you), and go when COMMAND ends. COMMAND also
    /// gets a network namespace of its own (loopback only: it gives up the
    /// host's network; see --host-network), where plugs and unplugs are
    /// announced as uevents, with the udev database in /run/udev. COMMAND gets
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
        /// Override the config's `timing` (see `monfs mount --timing`).
        #[arg(long, value_enum, conflicts_with = "use_mount")]
        timing: Option<Timing>,
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
        /// Keep the daemon's warnings and errors off the terminal. By
        /// default `monfs run` shows them as they are logged (`monfs: ...`),
        /// and exits 125 without starting COMMAND when a simulated device
        /// fails while it waits for them (a peer that cannot start or
        /// exits).
        #[arg(long, short)]
        quiet: bool,
        /// Without root: run COMMAND as root of the user namespace (uid 0
        /// there, still you outside), for tools that insist on root, such as
        /// trace-cmd. By default COMMAND runs as your own uid and gid. (As
        /// root this changes nothing.)
        #[arg(long)]
        ns_root: bool,
        /// Keep the host's network for COMMAND. By default COMMAND gets a
        /// network namespace of its own (loopback only, up): uevents belong
        /// to a network namespace, and in its own one COMMAND hears the
        /// simulated devices' hot-plug (kernel uevents on netlink group 1,
        /// udev's on group 2, the udev database in /run/udev) and none of
        /// the host's. With this option COMMAND reaches the host's network
        /// and hears no hot-plug event of monfs's.
        #[arg(long)]
        host_network: bool,
        /// The command to run, and its arguments (after `--`).
        #[arg(
            required = true,
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// umockdev-run's command line on monfs: run COMMAND with the USB
    /// devices of umockdev device files (`umockdev-record`'s `.umockdev`
    /// format) at their recorded bus, port path and address, as `monfs run`
    /// runs it (a private mount namespace, no LD_PRELOAD: static binaries
    /// and programs that make their own system calls see the devices too),
    /// and exit with its status. A device with a usbmon capture (`-p`)
    /// answers programs from it, as umockdev's pcap replay does. Records
    /// monfs does not model are skipped with a note on stderr. Bad files
    /// and arguments exit 2, naming the line and column. See
    /// docs/umockdev.md.
    #[command(disable_version_flag = true)]
    UmockdevRun {
        /// Load a device description made by umockdev-record (repeatable).
        #[arg(short = 'd', long = "device", value_name = "FILE")]
        device: Vec<PathBuf>,
        /// Replay a usbmon capture (pcap or pcapng, linktype 220) to
        /// programs for the device at sysfs path SYSFS (its `P:` path, with
        /// or without /sys) (repeatable).
        #[arg(short = 'p', long = "pcap", value_name = "SYSFS=FILE")]
        pcap: Vec<String>,
        /// umockdev's ioctl dumps: not supported (exit 2).
        #[arg(short = 'i', long = "ioctl", value_name = "DEVNAME=FILE")]
        ioctl: Vec<String>,
        /// umockdev's scripts: not supported (exit 2).
        #[arg(short = 's', long = "script", value_name = "DEVNAME=FILE")]
        script: Vec<String>,
        /// umockdev's Unix stream scripts: not supported (exit 2).
        #[arg(short = 'u', long = "unix-stream", value_name = "PATH=FILE")]
        unix_stream: Vec<String>,
        /// evemu event files: not supported (exit 2).
        #[arg(short = 'e', long = "evemu-events", value_name = "DEVNAME=FILE")]
        evemu_events: Vec<String>,
        /// When a URB answered from a capture completes: `bus` (the
        /// default, as umockdev): at the bus's pace once the replay reaches
        /// its completion; `recorded` (monfs's): besides, no earlier than
        /// the delay between its submission and completion in the capture,
        /// counted from the program's submission (configuration key
        /// `replay_timing`).
        #[arg(long, value_enum, default_value = "bus", value_name = "WHEN")]
        timing: monfs::config::ReplayTiming,
        /// Print the umockdev version whose behaviour this follows
        /// (0.17.16) and exit.
        #[arg(long)]
        version: bool,
        /// The command to run, and its arguments (after `--`).
        #[arg(
            required_unless_present = "version",
            trailing_var_arg = true,
            allow_hyphen_values = true,
            value_name = "COMMAND"
        )]
        command: Vec<std::ffi::OsString>,
    },
    /// Write umockdev's description (`.umockdev`, as umockdev-record
    /// writes it) of USB devices of a running mount to standard output:
    /// each device's sysfs directory (uevent properties, node, attributes,
    /// `descriptors` in hex, links), then its parents. umockdev-run and
    /// `monfs umockdev-run` read it. Exit 2 if a device is not there.
    UmockdevRecord {
        /// The mountpoint of a running monfs.
        mountpoint: PathBuf,
        /// The devices: names in sys/bus/usb/devices (`1-3.2`) or paths
        /// from /sys (`/sys/devices/platform/monfs_hcd.1/usb1/1-3`).
        #[arg(required = true, value_name = "DEVICE")]
        devices: Vec<String>,
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
    /// left out: `monfs ctl plug 1 3 mass-storage`. `plug --wait ...` and
    /// `unplug --wait ...` return once the device is there (enumerated,
    /// drivers bound) or gone (the `wait` command).
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
            timing,
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
                Overrides { seed, timing },
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
            timing,
            threads,
            no_mmap,
            no_io_uring,
            log_file,
            use_mount,
            ns_root,
            host_network,
            no_wait,
            quiet,
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
            if let Some(t) = timing {
                mount_args.push("--timing".into());
                let name = if t == Timing::Fast {
                    "fast"
                } else {
                    "realistic"
                };
                mount_args.push(name.into());
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
                quiet,
                host_network,
                command,
            })
        }
        Cmd::UmockdevRun {
            device,
            pcap,
            ioctl,
            script,
            unix_stream,
            evemu_events,
            timing,
            version,
            command,
        } => {
            use monfs::cli::umockdev_run::{umockdev_run, UmockdevRunOptions, UMOCKDEV_VERSION};
            if version {
                println!("{UMOCKDEV_VERSION}");
                return ExitCode::SUCCESS;
            }
            let mut unsupported = vec![];
            for (given, name) in [
                (!ioctl.is_empty(), "-i/--ioctl"),
                (!script.is_empty(), "-s/--script"),
                (!unix_stream.is_empty(), "-u/--unix-stream"),
                (!evemu_events.is_empty(), "-e/--evemu-events"),
            ] {
                if given {
                    unsupported.push(name);
                }
            }
            let exe = std::env::current_exe().unwrap_or_else(|_| PathBuf::from("/proc/self/exe"));
            umockdev_run(UmockdevRunOptions {
                exe,
                log_level: cli.log_level.clone(),
                devices: device,
                pcaps: pcap,
                unsupported,
                timing,
                command,
            })
        }
        Cmd::UmockdevRecord {
            mountpoint,
            devices,
        } => match monfs::cli::umockdev_record::umockdev_record(&mountpoint, &devices) {
            Ok(text) => {
                use std::io::Write;
                match std::io::stdout().write_all(text.as_bytes()) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("monfs umockdev-record: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
            Err(e) => {
                eprintln!("monfs umockdev-record: {e}");
                ExitCode::from(2)
            }
        },
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
        } => monfs::cli::ctl::ctl(mountpoint, command, socket),
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
                .and_then(|c| {
                    monfs::cli::mount::topology_charge(&c, Some(&file))
                        .map(|_| c)
                        .map_err(|e| e.to_string())
                }) {
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
