//! The loader step of a configuration: reading the files its USB devices
//! name (descriptor dumps, captures of `kind: from-capture`), which the
//! configuration's schema only names. The mount and `check-config` run it
//! after parsing; its errors name the field and give the line and column
//! of the device entry, as parsing errors do (exit code 2).
//!
//! Files are opened as `replay` opens its captures: a regular file only,
//! not through a symbolic link, never blocking on a FIFO or device, and
//! bounded by the readers' limits (a descriptor dump's `MAX_DUMP_BYTES`).

use std::path::Path;
use std::sync::Arc;

use crate::capture::read::{open_nofollow, read_regular_path, CaptureError};
use crate::capture::recorded::CapturePackets;
use crate::capture::usbdesc::{DescriptorDump, DumpError, MAX_DUMP_BYTES};
use crate::config::{
    check_loaded, locate, Config, ConfigError, DescriptorFile, DeviceConfig, DeviceError,
    ReplayFileError, Seg,
};

/// Why a device entry's files do not load (the text follows its path).
#[derive(Debug, thiserror::Error)]
enum FileError {
    /// The descriptors file cannot be read.
    #[error(": descriptors: {path}: {source}")]
    DescriptorsIo {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Its bytes are not descriptors.
    #[error(": descriptors: {path}: {source}")]
    DescriptorsBad {
        /// The file.
        path: String,
        /// Why.
        source: DumpError,
    },
    /// The capture cannot be opened.
    #[error(": capture: {path}: {source}")]
    CaptureOpen {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The capture does not load.
    #[error(": capture: {0}")]
    Capture(#[from] CaptureError),
    /// The entry does not fit its files.
    #[error("{0}")]
    Device(#[from] DeviceError),
}

/// Read and parse the configuration file at `path`, and load its files.
pub fn load_config(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_config(&text, &path.display().to_string())
}

/// Parse a configuration (`origin` names it; relative paths start from its
/// directory) and load its files.
pub fn parse_config(text: &str, origin: &str) -> Result<Config, ConfigError> {
    let mut cfg = Config::parse(text, origin)?;
    load_files(&mut cfg, text, origin)?;
    Ok(cfg)
}

/// Load the files that `cfg`, parsed from `text`, names.
pub fn load_files(cfg: &mut Config, text: &str, origin: &str) -> Result<(), ConfigError> {
    for (b, bus) in cfg.usb.buses.iter_mut().enumerate() {
        let mut at = vec![
            Seg::Key("usb"),
            Seg::Key("buses"),
            Seg::Index(b),
            Seg::Key("devices"),
        ];
        load_devices(&mut bus.devices, &mut at, text, origin)?;
    }
    Ok(())
}

/// Check what the loader step does not keep: every replay file
/// (`usb.buses[i].replay.file`) must be a readable capture that decodes, as
/// the bus would load it at mount. A mount still starts with a bad one
/// (that bus logs why and replays nothing; the others run); `monfs
/// check-config` reports it instead.
pub fn check_replay_files(cfg: &Config) -> Result<(), ReplayFileError> {
    for (i, b) in cfg.usb.buses.iter().enumerate() {
        if let Some(r) = &b.replay {
            crate::capture::decode::Capture::load(&r.file)
                .map_err(|source| ReplayFileError { bus: i, source })?;
        }
    }
    Ok(())
}

/// `usb.buses[0].devices[1]` for a path.
fn show(at: &[Seg]) -> String {
    let mut s = String::new();
    for seg in at {
        match seg {
            Seg::Key(k) if s.is_empty() => s.push_str(k),
            Seg::Key(k) => {
                s.push('.');
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}

fn load_devices(
    devs: &mut [DeviceConfig],
    at: &mut Vec<Seg>,
    text: &str,
    origin: &str,
) -> Result<(), ConfigError> {
    for (i, dev) in devs.iter_mut().enumerate() {
        at.push(Seg::Index(i));
        if let Err(e) = load_device(dev) {
            let (line, column) = locate(text, at);
            return Err(ConfigError::Invalid {
                path: origin.to_string(),
                line,
                column,
                message: format!("{}{e}", show(at)),
            });
        }
        at.push(Seg::Key("devices"));
        load_devices(&mut dev.devices, at, text, origin)?;
        at.pop();
        at.pop();
    }
    Ok(())
}

/// Load one device entry's descriptors and capture, and check the entry
/// against them.
fn load_device(dev: &mut DeviceConfig) -> Result<(), FileError> {
    if let Some(f) = dev.descriptors.as_mut().filter(|f| f.dump.is_none()) {
        let path = f.full.display().to_string();
        let bytes = read_regular_path(&f.full, MAX_DUMP_BYTES).map_err(|source| {
            FileError::DescriptorsIo {
                path: path.clone(),
                source,
            }
        })?;
        let dump = DescriptorDump::parse(bytes)
            .map_err(|source| FileError::DescriptorsBad { path, source })?;
        f.dump = Some(Arc::new(dump));
    }
    // A from-capture device's own descriptors file (else the capture's).
    let own = dev.descriptors.as_ref().and_then(|f| f.dump.clone());
    let bus = dev.capture_bus.map(|b| b.0);
    if let (Some(cap), Some(addr)) = (dev.capture.as_mut(), dev.devaddr) {
        if cap.device.is_none() {
            let file = open_nofollow(&cap.full).map_err(|source| FileError::CaptureOpen {
                path: cap.full.display().to_string(),
                source,
            })?;
            let packets = CapturePackets::load(&file, &cap.full)?;
            let rec = match own {
                Some(dump) => packets.device_with(addr.0, bus, dump),
                None => packets.device(addr.0),
            }
            .map_err(DeviceError::from)?;
            cap.device = Some(Arc::new(rec));
        }
        if let Some(rec) = &cap.device {
            dev.descriptors = Some(DescriptorFile {
                path: cap.path.clone(),
                full: cap.full.clone(),
                dump: Some(rec.dump.clone()),
            });
        }
    }
    check_loaded(dev)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> (usize, usize, String) {
        match parse_config(text, "t.yaml") {
            Err(ConfigError::Invalid {
                line,
                column,
                message,
                ..
            }) => (line, column, message),
            other => panic!("expected an error, got {other:?}"),
        }
    }

    #[test]
    fn external_endpoints_are_checked_against_the_descriptors() {
        let kbd = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/sysfs/qemu-usb-kbd/descriptors"
        );
        let dev = |eps: &str| {
            format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: external\n          descriptors: {kbd}\n          command: [cat]\n          endpoints:\n{eps}")
        };
        let c = parse_config(
            &dev("            - {ep: 0x81, length: 4, timeout_ms: 5}\n"),
            "c.yaml",
        )
        .unwrap();
        let e = &c.usb.buses[0].devices[0].endpoints[0];
        assert_eq!((e.ep.0, e.length, e.timeout_ms), (0x81, Some(4), Some(5)));
        for (eps, want) in [
            (
                "            - {ep: 0x02, data: \"00\"}\n",
                "devices[0].endpoints[0]: no endpoint 0x02 in",
            ),
            (
                "            - {ep: 0x10}\n",
                "ep must be an endpoint address",
            ),
            (
                "            - {ep: 0x81, packets: 4}\n",
                "endpoints[0]: `packets` is not for this endpoint",
            ),
            (
                "            - {ep: 0x81, data: \"0g\"}\n",
                "data must be hex bytes",
            ),
            (
                "            - {ep: 0x81, length: 0}\n",
                "length must be 1..=16384",
            ),
            (
                "            - {ep: 0x81}\n            - {ep: 0x81}\n",
                "endpoints[1]: endpoint 0x81 is listed twice",
            ),
            (
                "            - {ep: 0x81, alt: 1}\n",
                "no endpoint 0x81 in alternate setting 1",
            ),
            (
                "            - {ep: 0x81, every: 1}\n",
                "unknown field `every`",
            ),
        ] {
            let (line, _, msg) = err(&dev(eps));
            assert!(msg.contains(want), "{eps}: {msg}");
            assert!(line >= 3, "{eps}: {msg}");
        }
    }

    #[test]
    fn descriptors_file_is_read_relative_to_the_config() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/sysfs");
        let dev = |extra: &str| {
            format!("usb:\n  buses:\n    - bus: 1\n      devices:\n        - port: 1\n          kind: descriptors\n{extra}")
        };
        let origin = format!("{dir}/t.yaml");
        let c = parse_config(
            &dev("          descriptors: qemu-usb-kbd/descriptors\n"),
            &origin,
        )
        .unwrap();
        let f = c.usb.buses[0].devices[0].descriptors.as_ref().unwrap();
        assert_eq!(f.dump.as_ref().unwrap().bytes.len(), 52);
        let e = parse_config(&dev("          descriptors: nope\n"), &origin).unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("descriptors: ") && msg.contains("/sysfs/nope"),
            "{msg}"
        );
        assert!(msg.starts_with(&format!("{origin}:5:11: ")), "{msg}");
        let e = parse_config(
            &dev("          descriptors: qemu-usb-storage-ss/descriptors\n"),
            &origin,
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("qemu-usb-storage-ss/descriptors: byte offset 2: bcdUSB 3.00"),
            "{e}"
        );
        let (_, _, msg) = err(&dev(""));
        assert!(msg.contains("needs a `descriptors` file"), "{msg}");
    }
}
