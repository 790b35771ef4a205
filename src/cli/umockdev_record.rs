//! `monfs umockdev-record MOUNTPOINT DEVICE...`: umockdev's device
//! description (`.umockdev`, as `umockdev-record` writes it) of USB devices
//! of a running mount, read from the mount's `sys/`: each device's
//! directory (its uevent properties and `SUBSYSTEM`, its node, its
//! attributes, the `descriptors` in hex, its links) and then its parents up
//! to `/devices`, those with a subsystem, as umockdev-record gives them.
//! `umockdev-run -d` and `monfs umockdev-run -d` read the result.

use std::io::Read;
use std::path::{Path, PathBuf};

use crate::umockdev::write::{paragraph, Attr, Paragraph};

/// Largest attribute read, bytes (a `descriptors` file is at most about
/// 64 KiB).
const MAX_ATTR: u64 = 1 << 20;

/// Why a device cannot be recorded.
#[derive(Debug, thiserror::Error)]
pub enum UmockdevRecordError {
    /// The device is not in the mount's sysfs.
    #[error("{0}: no such device in {1} (give a name in sys/bus/usb/devices, as 1-3.2, or a /sys/devices path)")]
    NoDevice(String, String),
    /// A directory that cannot be read.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// The directory of `dev` in the mount at `mnt`: a name in
/// `sys/bus/usb/devices` (`1-3.2`) or a path from `/sys` (`/sys/devices/...`
/// or `/sys/bus/usb/devices/1-3.2`).
fn device_dir(mnt: &Path, dev: &str) -> Result<PathBuf, UmockdevRecordError> {
    let sys = mnt.join("sys");
    let p = match dev.strip_prefix("/sys/") {
        Some(rest) => sys.join(rest),
        None => sys.join("bus/usb/devices").join(dev),
    };
    let missing = || UmockdevRecordError::NoDevice(dev.to_string(), sys.display().to_string());
    let real = std::fs::canonicalize(&p).map_err(|_| missing())?;
    let sys = std::fs::canonicalize(&sys).map_err(|_| missing())?;
    if !real.starts_with(sys.join("devices")) || !real.join("uevent").is_file() {
        return Err(missing());
    }
    Ok(real)
}

fn read_capped(p: &Path) -> Option<Vec<u8>> {
    let f = std::fs::File::open(p).ok()?;
    let mut out = vec![];
    f.take(MAX_ATTR).read_to_end(&mut out).ok()?;
    Some(out)
}

/// The paragraph of the device directory `dir` (under `sys`), or None for
/// a directory without a subsystem (umockdev needs one).
fn record_dir(sys: &Path, dir: &Path) -> Result<Option<Paragraph>, UmockdevRecordError> {
    let io = |e| UmockdevRecordError::Io(dir.display().to_string(), e);
    let Some(subsystem) = std::fs::read_link(dir.join("subsystem"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    else {
        return Ok(None);
    };
    let mut p = Paragraph {
        path: format!("/{}", dir.strip_prefix(sys).unwrap_or(dir).display()),
        ..Paragraph::default()
    };
    let uevent = read_capped(&dir.join("uevent")).unwrap_or_default();
    for line in String::from_utf8_lossy(&uevent).lines() {
        if let Some((k, v)) = line.split_once('=') {
            if k == "DEVNAME" {
                p.node = Some(v.to_string());
                p.properties.push((k.to_string(), format!("/dev/{v}")));
            } else {
                p.properties.push((k.to_string(), v.to_string()));
            }
        }
    }
    p.properties.push(("SUBSYSTEM".into(), subsystem));
    // udev's DRIVER is the driver link's name (as umockdev-record, through
    // udev, records it).
    if let Some(drv) = std::fs::read_link(dir.join("driver"))
        .ok()
        .and_then(|t| t.file_name().map(|n| n.to_string_lossy().into_owned()))
    {
        p.properties.retain(|(k, _)| k != "DRIVER");
        p.properties.push(("DRIVER".into(), drv));
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(Result::ok)
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_symlink() {
            // `subsystem` is the SUBSYSTEM property; the others (driver,
            // port) are links umockdev makes again.
            if name != "subsystem" {
                if let Ok(t) = std::fs::read_link(e.path()) {
                    p.attributes
                        .push((name, Attr::Link(t.to_string_lossy().into_owned())));
                }
            }
        } else if ft.is_file() && name != "uevent" {
            // Write-only attributes (remove) are recorded empty, as
            // umockdev-record records what it cannot read.
            let bytes = read_capped(&e.path()).unwrap_or_default();
            let a = if name == "descriptors" {
                Attr::Binary(bytes)
            } else {
                Attr::of(bytes)
            };
            p.attributes.push((name, a));
        }
    }
    Ok(Some(p))
}

/// The description of `devices` of the mount at `mnt`: each device, then
/// its parents not yet written.
pub fn umockdev_record(mnt: &Path, devices: &[String]) -> Result<String, UmockdevRecordError> {
    let sys = std::fs::canonicalize(mnt.join("sys"))
        .map_err(|e| UmockdevRecordError::Io(mnt.join("sys").display().to_string(), e))?;
    let top = sys.join("devices");
    let mut out = String::new();
    let mut done: Vec<PathBuf> = vec![];
    for d in devices {
        let mut dir = device_dir(mnt, d)?;
        while dir.starts_with(&top) && dir != top {
            if !done.contains(&dir) {
                if let Some(p) = record_dir(&sys, &dir)? {
                    out.push_str(&paragraph(&p));
                }
                done.push(dir.clone());
            }
            if !dir.pop() {
                break;
            }
        }
    }
    Ok(out)
}
