//! What a simulated USB topology costs in memory, counted in the memory
//! budget ([`crate::base::budget::MEMORY`], issue 37): each bus its
//! thread, root hub and queues, each device its state and the buffers its
//! kind keeps in flight (a flood device keeps an OUT and an IN buffer of
//! `transfer_size` each for the life of the device; an external device's
//! peer can queue up to its inbox of 16 KiB transfers, and its input up
//! to 1 MiB of lines, with the ids of the URBs they name).
//!
//! Measured (`tests/limits.rs`, `buses_and_devices_use_what_they_are_charged`):
//! a bus of 15 ports costs 82 to 94 KiB (its root hub's sysfs and usbfs
//! nodes, usbmon files, thread), a HID device 34 to 36 KiB (most of it its
//! sysfs tree: about a hundred nodes). A flood device's two buffers are
//! its cost: each is made in one block (`tests/limits.rs`,
//! `flood_devices_use_what_they_are_charged`, measures it). What a kind
//! keeps in flight is counted at its largest (a mass-storage command's
//! data, a webcam URB's), so those kinds are counted above their average. `check-config`,
//! the mount and `monfs ctl plug` refuse a topology that does not fit,
//! naming the field.

use crate::config::locate::{locate, path_text, Seg};
use crate::config::{BusConfig, Config, DeviceConfig, DeviceKind};

/// A bus: its thread's stack as touched, root hub and its sysfs and usbfs
/// nodes, queues, usbmon state and files (82 to 94 KiB measured).
pub const BUS_BYTES: usize = 96 << 10;
/// A device of any kind: descriptors, enumeration state, tasks, URBs,
/// its `devices` text, its sysfs and usbfs nodes (34 to 36 KiB measured
/// for a HID mouse).
pub const DEVICE_BYTES: usize = 36 << 10;

/// Bytes the device `d` (not what is behind it, for a hub) is counted for.
pub fn device_bytes(d: &DeviceConfig) -> usize {
    let in_flight = match d.kind {
        // The OUT and IN buffers (flood.rs), each transfer_size bytes.
        DeviceKind::Flood => 2 * d.transfer_size.map_or(512, |t| t.0 as usize),
        // Queued peer messages: an inbox of 1024 transfers of 16 KiB at
        // most (external.rs), counted at a quarter full; the lines that
        // may wait for the peer to read them (1 MiB), and the unlinked
        // URB ids remembered for them (under 1 MiB).
        DeviceKind::External => 1024 * 16384 / 4 + 2 * super::peer::OUTBOX_BYTES,
        // An isochronous URB's data, made at its completion: 4 packets
        // of 192 bytes (audio), 32 of 1024 (webcam, high speed).
        DeviceKind::Audio => 4 * 192,
        DeviceKind::Webcam => 32 * 1024,
        // A READ(10) or WRITE(10) of up to 64 blocks of 512 bytes.
        DeviceKind::MassStorage => 64 * 512,
        // Descriptors read from a file (capped at 64 KiB) or a capture's.
        DeviceKind::Descriptors | DeviceKind::FromCapture => 64 << 10,
        DeviceKind::Hub
        | DeviceKind::HidKeyboard
        | DeviceKind::HidMouse
        | DeviceKind::HidTablet => 0,
    };
    DEVICE_BYTES + in_flight
}

/// Bytes a device and everything behind it are counted for.
pub fn tree_bytes(d: &DeviceConfig) -> usize {
    d.devices
        .iter()
        .map(tree_bytes)
        .fold(device_bytes(d), usize::saturating_add)
}

/// Bytes a bus and its devices are counted for.
pub fn bus_bytes(b: &BusConfig) -> usize {
    b.devices
        .iter()
        .map(tree_bytes)
        .fold(BUS_BYTES, usize::saturating_add)
}

/// Bytes the whole configured topology is counted for.
pub fn topology_bytes(cfg: &Config) -> usize {
    cfg.usb
        .buses
        .iter()
        .map(bus_bytes)
        .fold(0, usize::saturating_add)
}

/// The path of the device that costs the most, and the field that makes
/// it cost (`transfer_size` for a flood device, else `kind`).
fn costliest(cfg: &Config) -> Option<(Vec<Seg>, usize)> {
    fn walk(d: &DeviceConfig, path: &mut Vec<Seg>, best: &mut Option<(Vec<Seg>, usize)>) {
        let n = device_bytes(d);
        if best.as_ref().is_none_or(|b| n > b.1) {
            let field = match (d.kind, d.transfer_size) {
                (DeviceKind::Flood, Some(_)) => "transfer_size",
                _ => "kind",
            };
            let mut p = path.clone();
            p.push(Seg::Key(field));
            *best = Some((p, n));
        }
        for (i, c) in d.devices.iter().enumerate() {
            path.extend([Seg::Key("devices"), Seg::Index(i)]);
            walk(c, path, best);
            path.truncate(path.len() - 2);
        }
    }
    let mut best = None;
    for (bi, b) in cfg.usb.buses.iter().enumerate() {
        for (di, d) in b.devices.iter().enumerate() {
            let mut path = vec![
                Seg::Key("usb"),
                Seg::Key("buses"),
                Seg::Index(bi),
                Seg::Key("devices"),
                Seg::Index(di),
            ];
            walk(d, &mut path, &mut best);
        }
    }
    best
}

/// Why a topology does not fit: the message names the field and, when
/// the text is known, its line and column.
#[derive(Debug, thiserror::Error)]
#[error("{at}{field}: the USB topology needs {need_mib} MiB, more than the {limit_mib} MiB left in the memory budget (--memory); the costliest device needs {dev_kib} KiB")]
pub struct TooBig {
    /// `line:column: ` or nothing.
    pub at: String,
    /// The field named.
    pub field: String,
    /// What the topology needs, MiB (rounded up).
    pub need_mib: usize,
    /// What is left of the budget, MiB.
    pub limit_mib: usize,
    /// The costliest device's own cost, KiB.
    pub dev_kib: usize,
}

/// Check that the topology of `cfg` (its YAML `text`, for positions) fits
/// in `room` bytes; the error names the costliest device's field.
pub fn check(cfg: &Config, text: Option<&str>, room: usize) -> Result<usize, TooBig> {
    let need = topology_bytes(cfg);
    if need <= room {
        return Ok(need);
    }
    let (path, dev) = costliest(cfg).unwrap_or((vec![Seg::Key("usb"), Seg::Key("buses")], 0));
    let at = text
        .map(|t| locate(t, &path))
        .map(|(l, c)| format!("{l}:{c}: "))
        .unwrap_or_default();
    Err(TooBig {
        at,
        field: path_text(&path),
        need_mib: need.div_ceil(1 << 20),
        limit_mib: room >> 20,
        dev_kib: dev.div_ceil(1024),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_topology_too_big_names_the_field() {
        let mut y = String::from("usb:\n  buses:\n");
        for b in 1..=3 {
            y.push_str(&format!(
                "    - bus: {b}\n      ports: 15\n      devices:\n"
            ));
            for p in 1..=15 {
                y.push_str(&format!(
                    "        - {{port: {p}, kind: flood, transfer_size: 1048576}}\n"
                ));
            }
        }
        let cfg: Config = serde_yaml_ng::from_str(&y).unwrap();
        let need = topology_bytes(&cfg);
        assert_eq!(need, 3 * (BUS_BYTES + 15 * (DEVICE_BYTES + (2 << 20))));
        assert_eq!(check(&cfg, Some(&y), need).unwrap(), need);
        let e = check(&cfg, Some(&y), 64 << 20).unwrap_err();
        assert_eq!(e.field, "usb.buses[0].devices[0].transfer_size");
        // The value of the field named.
        assert_eq!(e.at, "6:49: ");
        assert!(e.to_string().contains("needs 92 MiB"), "{e}");
    }
}
