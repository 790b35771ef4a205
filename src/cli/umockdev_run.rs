//! `monfs umockdev-run -d FILE -p SYSFS=CAPTURE -- CMD`: umockdev-run's
//! command line on monfs. The `.umockdev` files' USB devices become a
//! configuration (src/umockdev/build.rs: each device at its recorded bus,
//! port path and address, a device with a capture `kind: from-capture`,
//! answered from it), which `monfs run` mounts for CMD: the kernel's paths
//! are monfs's in CMD's own mount namespace, without LD_PRELOAD, so static
//! binaries and programs that make their own system calls see the devices
//! too. CMD's exit status is passed on.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::umockdev::build::{config_yaml, find_device, usb_devices, with_recorded_timing};
use crate::umockdev::{parse, MAX_FILE_BYTES};

use super::run::{run, RunOptions};

/// The umockdev release whose behaviour `monfs umockdev-run` follows
/// (Debian 12's), which `--version` prints.
pub const UMOCKDEV_VERSION: &str = "0.17.16";

/// Exit status for bad arguments or input (a file that does not parse, an
/// option monfs does not support).
pub const EXIT_USAGE: u8 = 2;

/// What `monfs umockdev-run` was asked to do.
pub struct UmockdevRunOptions {
    /// The monfs binary (this one), for the daemon.
    pub exe: PathBuf,
    /// `--log-level` for the daemon.
    pub log_level: String,
    /// `-d/--device` files, in order.
    pub devices: Vec<PathBuf>,
    /// `-p/--pcap` arguments (`SYSFS=FILE`), in order.
    pub pcaps: Vec<String>,
    /// The umockdev options given that monfs does not support, as
    /// `-i/--ioctl`.
    pub unsupported: Vec<&'static str>,
    /// `--timing`: when replayed answers complete.
    pub timing: crate::config::ReplayTiming,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

/// Why the devices cannot be set up (exit status [`EXIT_USAGE`]).
#[derive(Debug, thiserror::Error)]
pub enum UmockdevRunError {
    /// An option monfs does not support.
    #[error("{0} is not supported by monfs (it replays USB devices and their usbmon captures only; see docs/umockdev.md)")]
    Unsupported(&'static str),
    /// A file that cannot be read.
    #[error("{0}: {1}")]
    Read(String, std::io::Error),
    /// A device file that does not parse.
    #[error("{0}:{1}")]
    Parse(String, crate::umockdev::ParseError),
    /// A `-p` argument without `=`.
    #[error("--pcap {0:?}: expected SYSFS=FILE")]
    PcapArg(String),
    /// The devices do not make a configuration.
    #[error(transparent)]
    Build(#[from] crate::umockdev::build::BuildError),
    /// The configuration does not load (a capture without the device).
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// No command.
    #[error("no program to run (after --)")]
    NoCommand,
}

/// Read a file the user named, at most `cap` bytes (symbolic links are
/// followed, as umockdev-run follows them; FIFOs and devices refused).
fn read_named(path: &Path, cap: usize) -> Result<Vec<u8>, UmockdevRunError> {
    let name = path.display().to_string();
    let f = std::fs::File::open(path).map_err(|e| UmockdevRunError::Read(name.clone(), e))?;
    let meta = f
        .metadata()
        .map_err(|e| UmockdevRunError::Read(name.clone(), e))?;
    if !meta.is_file() {
        let e = std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file");
        return Err(UmockdevRunError::Read(name, e));
    }
    let mut out = Vec::new();
    f.take(cap as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| UmockdevRunError::Read(name, e))?;
    Ok(out)
}

/// The configuration for `opts`, written into `dir`; the notes about
/// what is skipped.
pub fn prepare(
    opts: &UmockdevRunOptions,
    dir: &Path,
) -> Result<(PathBuf, Vec<String>), UmockdevRunError> {
    if let Some(o) = opts.unsupported.first() {
        return Err(UmockdevRunError::Unsupported(o));
    }
    if opts.command.is_empty() {
        return Err(UmockdevRunError::NoCommand);
    }
    let mut records = vec![];
    let mut notes = vec![];
    for f in &opts.devices {
        let bytes = read_named(f, MAX_FILE_BYTES)?;
        let recs =
            parse(&bytes).map_err(|e| UmockdevRunError::Parse(f.display().to_string(), e))?;
        let (devs, n) = usb_devices(&recs);
        notes.extend(n.into_iter().map(|n| format!("{}: {n}", f.display())));
        records.extend(devs);
    }
    let mut captures = BTreeMap::new();
    for p in &opts.pcaps {
        let (sysfs, file) = p
            .split_once('=')
            .filter(|(s, f)| !s.is_empty() && !f.is_empty())
            .ok_or_else(|| UmockdevRunError::PcapArg(p.clone()))?;
        let i = find_device(&records, sysfs)
            .ok_or_else(|| crate::umockdev::build::BuildError::NoSuchDevice(sysfs.to_string()))?;
        let file = PathBuf::from(file);
        let file = std::path::absolute(&file).unwrap_or(file);
        captures.insert(i, file);
    }
    let mut yaml = config_yaml(&records, &captures, dir, &mut notes)?;
    if opts.timing == crate::config::ReplayTiming::Recorded {
        yaml = with_recorded_timing(&yaml);
    }
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, &yaml)
        .map_err(|e| UmockdevRunError::Read(cfg.display().to_string(), e))?;
    // Load it here, so that a capture without the device fails now, with
    // exit status 2, rather than in the daemon.
    crate::sim::usb::load::load_config(&cfg)?;
    Ok((cfg, notes))
}

/// Run `opts.command` on the devices of `opts`; its exit status (2 for bad
/// input, 125 when monfs cannot start).
pub fn umockdev_run(opts: UmockdevRunOptions) -> ExitCode {
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(std::env::temp_dir);
    let dir = match nix::unistd::mkdtemp(&base.join("monfs-umockdev-XXXXXX")) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("monfs umockdev-run: a directory in {}: {e}", base.display());
            return ExitCode::from(super::run::EXIT_START);
        }
    };
    let code = match prepare(&opts, &dir) {
        Err(e) => {
            eprintln!("monfs umockdev-run: {e}");
            ExitCode::from(EXIT_USAGE)
        }
        Ok((cfg, notes)) => {
            for n in notes {
                eprintln!("monfs umockdev-run: note: {n}");
            }
            run(RunOptions {
                exe: opts.exe.clone(),
                log_level: opts.log_level.clone(),
                mount_args: vec!["--config".into(), cfg.clone().into()],
                log_file: None,
                use_mount: None,
                ns_root: false,
                config: Some(cfg),
                wait: true,
                quiet: false,
                host_network: false,
                command: opts.command.clone(),
            })
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    code
}
