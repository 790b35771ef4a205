//! From umockdev's device records to monfs devices: each USB device of a
//! `.umockdev` file (subsystem `usb`, devtype `usb_device`, with a
//! `descriptors` attribute) becomes a device entry of monfs's
//! configuration at the bus, port path and address its record gives
//! (`busnum`, the last component of its `P:` path, `devnum`), with its
//! descriptors, strings and speed; a capture attached to it (`umockdev-run
//! -p SYSFS=FILE`) makes it `kind: from-capture`, answered from the
//! capture. Records monfs does not model (root hubs, whose place monfs's
//! own root hubs take, interfaces, which the descriptors give, other
//! subsystems, SuperSpeed devices) are skipped with a note saying why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_yaml_ng::{Mapping, Value};

use super::DeviceRecord;
use crate::capture::usbdesc::DescriptorDump;

/// One USB device of a recording, placed as monfs will place it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsbDevice {
    /// Its `P:` path (`/devices/.../usb1/1-3`).
    pub path: String,
    /// The line of its `P:` line.
    pub line: usize,
    /// Its bus (`busnum`).
    pub bus: u16,
    /// The ports from the root hub down (`1-3.2`: `[3, 2]`).
    pub ports: Vec<u8>,
    /// Its address (`devnum`), where the record gives a usable one.
    pub devnum: Option<u8>,
    /// The `descriptors` attribute.
    pub descriptors: Vec<u8>,
    /// Its speed as monfs's configuration names it (`low`, `full`, `high`).
    pub speed: Option<&'static str>,
    /// The `manufacturer` attribute.
    pub manufacturer: Option<String>,
    /// The `product` attribute.
    pub product: Option<String>,
    /// The `serial` attribute.
    pub serial: Option<String>,
    /// Its other text attributes that monfs can show (`attributes:`).
    pub attributes: Vec<(String, String)>,
    /// Its `E:` properties that are udev's, not the kernel's uevent's nor
    /// its sysfs path's (`udev_properties:`).
    pub properties: Vec<(String, String)>,
}

/// The properties of a device's uevent (the kernel's), and those udev
/// derives from its sysfs path, which is monfs's: a recording's values of
/// these are not taken.
const NOT_RECORDED: [&str; 21] = [
    "ACTION",
    "BUSNUM",
    "CURRENT_TAGS",
    "DEVLINKS",
    "DEVNAME",
    "DEVNUM",
    "DEVPATH",
    "DEVTYPE",
    "DRIVER",
    "ID_FOR_SEAT",
    "ID_PATH",
    "ID_PATH_TAG",
    "INTERFACE",
    "MAJOR",
    "MINOR",
    "MODALIAS",
    "PRODUCT",
    "SEQNUM",
    "SUBSYSTEM",
    "TAGS",
    "TYPE",
]; // USEC_INITIALIZED is udevd's own (below)

/// Names and values, in order.
type Pairs = Vec<(String, String)>;

/// A record's attributes and properties that monfs takes
/// ([`UsbDevice::attributes`], [`UsbDevice::properties`]).
fn recorded(r: &DeviceRecord) -> (Pairs, Pairs) {
    use crate::config::{recorded_attribute_name, recorded_property_name, MAX_RECORDED_VALUE};
    let ok = |v: &str| v.len() <= MAX_RECORDED_VALUE && !v.contains('\0');
    let mut attrs: Vec<(String, String)> = vec![];
    for (k, v) in &r.attributes {
        let Ok(v) = std::str::from_utf8(v) else {
            continue;
        };
        if k != "descriptors" && recorded_attribute_name(k) && ok(v) {
            attrs.retain(|(n, _)| n != k);
            attrs.push((k.clone(), v.to_string()));
        }
    }
    let mut props: Vec<(String, String)> = vec![];
    for (k, v) in &r.properties {
        if !NOT_RECORDED.contains(&k.as_str())
            && k != "USEC_INITIALIZED"
            && recorded_property_name(k)
            && ok(v)
            && !v.contains('\n')
        {
            props.retain(|(n, _)| n != k);
            props.push((k.clone(), v.clone()));
        }
    }
    attrs.truncate(crate::config::MAX_RECORDED_ENTRIES);
    props.truncate(crate::config::MAX_RECORDED_ENTRIES);
    (attrs, props)
}

impl UsbDevice {
    /// Its kernel name (`1-3.2`).
    pub fn name(&self) -> String {
        let ports: Vec<String> = self.ports.iter().map(u8::to_string).collect();
        format!("{}-{}", self.bus, ports.join("."))
    }
}

/// Why a USB device's name cannot be placed.
enum BadName {
    /// Not `usbN` nor `B-P.P...`.
    NotAName,
    /// A port number monfs's hubs do not have.
    Port(u32),
    /// Deeper than USB's tiers.
    TooDeep,
}

/// A `usbN` or `B-P.P...` name: the bus and the ports (none for a root hub).
fn parse_name(name: &str) -> Result<(u16, Vec<u8>), BadName> {
    let ok_bus = |b: &str| {
        b.parse::<u16>()
            .ok()
            .filter(|b| (1..=127).contains(b))
            .ok_or(BadName::NotAName)
    };
    if let Some(n) = name.strip_prefix("usb") {
        return Ok((ok_bus(n)?, vec![]));
    }
    let (b, rest) = name.split_once('-').ok_or(BadName::NotAName)?;
    let bus = ok_bus(b)?;
    let mut ports = vec![];
    for p in rest.split('.') {
        match p.parse::<u32>() {
            Ok(n @ 1..=15) => ports.push(n as u8),
            Ok(n) if n > 15 => return Err(BadName::Port(n)),
            _ => return Err(BadName::NotAName),
        }
    }
    // USB allows five tiers of hubs below the root hub.
    if ports.len() > 6 {
        return Err(BadName::TooDeep);
    }
    Ok((bus, ports))
}

/// A record's number, from its attribute or else its udev property.
fn number(r: &DeviceRecord, attr: &str, prop: &str) -> Option<u32> {
    r.attribute_text(attr)
        .or_else(|| r.property(prop))
        .and_then(|v| v.trim().parse().ok())
}

/// The USB devices of `records`, with a note for each record skipped.
pub fn usb_devices(records: &[DeviceRecord]) -> (Vec<UsbDevice>, Vec<String>) {
    let mut out = vec![];
    let mut notes = vec![];
    for r in records {
        let note = |why: String| format!("{} (line {}): {why}", r.path, r.line);
        if r.subsystem() != "usb" {
            notes.push(note(format!(
                "subsystem {}: not modelled by monfs (only USB devices are), skipped",
                r.subsystem()
            )));
            continue;
        }
        let devtype = r.property("DEVTYPE").unwrap_or(if r.name().contains(':') {
            "usb_interface"
        } else {
            "usb_device"
        });
        if devtype == "usb_interface" {
            // An interface: its device's descriptors give it.
            continue;
        }
        if devtype != "usb_device" {
            notes.push(note(format!(
                "USB devtype {devtype}: not modelled, skipped"
            )));
            continue;
        }
        let (name_bus, ports) = match parse_name(r.name()) {
            Ok(x) => x,
            Err(BadName::NotAName) => {
                notes.push(note(format!(
                    "{:?} is not a USB device name (BUS-PORT.PORT...), skipped",
                    r.name()
                )));
                continue;
            }
            Err(BadName::Port(n)) => {
                notes.push(note(format!(
                    "port {n}: monfs's hubs have at most 15 ports, skipped"
                )));
                continue;
            }
            Err(BadName::TooDeep) => {
                notes.push(note("more than six tiers of ports, skipped".into()));
                continue;
            }
        };
        if ports.is_empty() {
            notes.push(note(
                "a root hub: monfs's own root hub of the bus stands for it".into(),
            ));
            continue;
        }
        let bus = match number(r, "busnum", "BUSNUM") {
            Some(b) if b as u16 == name_bus => name_bus,
            Some(b) => {
                notes.push(note(format!(
                    "busnum {b} is not the bus of its name; it goes on bus {name_bus}"
                )));
                name_bus
            }
            None => name_bus,
        };
        let devnum = match number(r, "devnum", "DEVNUM") {
            Some(n @ 2..=127) => Some(n as u8),
            Some(n) => {
                notes.push(note(format!(
                    "devnum {n} is not 2..=127; the device gets the next free address"
                )));
                None
            }
            None => None,
        };
        let Some(desc) = r.attribute("descriptors") else {
            notes.push(note("no `H: descriptors` attribute, skipped".into()));
            continue;
        };
        let speed = match r.attribute_text("speed") {
            Some("1.5") => Some("low"),
            Some("12") => Some("full"),
            Some("480") => Some("high"),
            None => None,
            Some(s) => {
                notes.push(note(format!(
                    "speed {s}: monfs's buses are USB 2.0 (no SuperSpeed), skipped"
                )));
                continue;
            }
        };
        if let Err(e) = DescriptorDump::parse(desc.to_vec()) {
            notes.push(note(format!("descriptors: {e}, skipped")));
            continue;
        }
        let text = |a: &str| r.attribute_text(a).map(str::to_string);
        let (attributes, properties) = recorded(r);
        out.push(UsbDevice {
            path: r.path.clone(),
            line: r.line,
            bus,
            ports,
            devnum,
            descriptors: desc.to_vec(),
            speed,
            manufacturer: text("manufacturer"),
            product: text("product"),
            serial: text("serial"),
            attributes,
            properties,
        });
    }
    (out, notes)
}

/// Why a configuration cannot be made of the devices.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Two devices at one place.
    #[error("{0} and {1} are both at {2}")]
    SamePlace(String, String, String),
    /// A capture for a path that names no USB device of the files.
    #[error("--pcap {0}: no USB device of the device files has this sysfs path")]
    NoSuchDevice(String),
    /// A device with a capture but no address.
    #[error(
        "--pcap {0}: the device's record has no devnum, which the capture's packets are found by"
    )]
    NoDevnum(String),
    /// A descriptors file could not be written.
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}

/// A node of the device tree being built: a device of the files (or none:
/// a hub monfs adds to reach the devices behind it) and its children.
#[derive(Default)]
struct Node {
    dev: Option<usize>,
    children: BTreeMap<u8, Node>,
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

/// monfs's configuration (YAML) for `devs`: one bus per bus number, each
/// device at its ports, behind `kind: hub` hubs where its path goes
/// through one (a hub of the files becomes monfs's hub, with a note).
/// `captures` gives, by index into `devs`, the capture replayed to
/// programs. The descriptors are written into `dir`. Notes go to `notes`.
pub fn config_yaml(
    devs: &[UsbDevice],
    captures: &BTreeMap<usize, PathBuf>,
    dir: &Path,
    notes: &mut Vec<String>,
) -> Result<String, BuildError> {
    let mut buses: BTreeMap<u16, Node> = BTreeMap::new();
    for (i, d) in devs.iter().enumerate() {
        let mut n = buses.entry(d.bus).or_default();
        for p in &d.ports {
            n = n.children.entry(*p).or_default();
        }
        if let Some(j) = n.dev {
            return Err(BuildError::SamePlace(
                devs[j].path.clone(),
                d.path.clone(),
                d.name(),
            ));
        }
        n.dev = Some(i);
    }
    let mut bus_list = vec![];
    for (bus, root) in &buses {
        let nports = root.children.keys().max().copied().unwrap_or(1).max(4);
        let mut m = Mapping::new();
        m.insert(s("bus"), Value::from(*bus));
        m.insert(s("ports"), Value::from(nports));
        m.insert(
            s("devices"),
            children(root, devs, captures, dir, *bus, &[], notes)?,
        );
        bus_list.push(Value::Mapping(m));
    }
    let mut usb = Mapping::new();
    usb.insert(s("buses"), Value::Sequence(bus_list));
    let mut top = Mapping::new();
    top.insert(s("usb"), Value::Mapping(usb));
    Ok(serde_yaml_ng::to_string(&Value::Mapping(top)).unwrap_or_default())
}

/// The configuration `yaml` (of [`config_yaml`]) with `replay_timing:
/// recorded` on each device answered from a capture (`monfs umockdev-run
/// --timing recorded`).
pub fn with_recorded_timing(yaml: &str) -> String {
    fn walk(v: &mut Value) {
        match v {
            Value::Mapping(m) => {
                if m.get("kind").and_then(Value::as_str) == Some("from-capture") {
                    m.insert(s("replay_timing"), s("recorded"));
                }
                for (_, x) in m.iter_mut() {
                    walk(x);
                }
            }
            Value::Sequence(l) => l.iter_mut().for_each(walk),
            _ => {}
        }
    }
    let Ok(mut v) = serde_yaml_ng::from_str::<Value>(yaml) else {
        return yaml.to_string();
    };
    walk(&mut v);
    serde_yaml_ng::to_string(&v).unwrap_or_else(|_| yaml.to_string())
}

fn children(
    n: &Node,
    devs: &[UsbDevice],
    captures: &BTreeMap<usize, PathBuf>,
    dir: &Path,
    bus: u16,
    at: &[u8],
    notes: &mut Vec<String>,
) -> Result<Value, BuildError> {
    let mut list = vec![];
    for (port, child) in &n.children {
        let mut path = at.to_vec();
        path.push(*port);
        let name = format!(
            "{bus}-{}",
            path.iter().map(u8::to_string).collect::<Vec<_>>().join(".")
        );
        let mut m = Mapping::new();
        m.insert(s("port"), Value::from(*port));
        if !child.children.is_empty() {
            m.insert(s("kind"), s("hub"));
            match child.dev {
                Some(i) => {
                    notes.push(format!(
                        "{} (line {}): a hub: monfs's own hub takes its place, with monfs's hub descriptors",
                        devs[i].path, devs[i].line
                    ));
                    if let Some(d) = devs[i].devnum {
                        m.insert(s("devnum"), Value::from(d));
                    }
                }
                None => notes.push(format!(
                    "{name}: the files have no device here; monfs puts a hub there for the devices behind it"
                )),
            }
            m.insert(
                s("devices"),
                children(child, devs, captures, dir, bus, &path, notes)?,
            );
        } else if let Some(i) = child.dev {
            let d = &devs[i];
            let file = dir.join(format!("{name}.descriptors"));
            std::fs::write(&file, &d.descriptors)
                .map_err(|e| BuildError::Io(file.display().to_string(), e))?;
            let file = s(&file.display().to_string());
            match captures.get(&i) {
                Some(cap) => {
                    let devnum = d
                        .devnum
                        .ok_or_else(|| BuildError::NoDevnum(d.path.clone()))?;
                    m.insert(s("kind"), s("from-capture"));
                    m.insert(s("descriptors"), file);
                    m.insert(s("capture"), s(&cap.display().to_string()));
                    m.insert(s("devaddr"), Value::from(devnum));
                    m.insert(s("capture_bus"), Value::from(bus));
                }
                None => {
                    m.insert(s("kind"), s("descriptors"));
                    m.insert(s("descriptors"), file);
                }
            }
            if let Some(n) = d.devnum {
                m.insert(s("devnum"), Value::from(n));
            }
            if let Some(sp) = d.speed {
                m.insert(s("speed"), s(sp));
            }
            for (k, v) in [
                ("manufacturer", &d.manufacturer),
                ("product", &d.product),
                ("serial", &d.serial),
            ] {
                if let Some(v) = v {
                    m.insert(s(k), s(v));
                }
            }
            for (k, list) in [
                ("attributes", &d.attributes),
                ("udev_properties", &d.properties),
            ] {
                if !list.is_empty() {
                    let map: Mapping = list.iter().map(|(n, v)| (s(n), s(v))).collect();
                    m.insert(s(k), Value::Mapping(map));
                }
            }
        }
        list.push(Value::Mapping(m));
    }
    Ok(Value::Sequence(list))
}

/// The device of `devs` whose sysfs path is `sysfs` (as `umockdev-run -p`
/// names it: with or without `/sys` in front).
pub fn find_device(devs: &[UsbDevice], sysfs: &str) -> Option<usize> {
    let p = sysfs.strip_prefix("/sys").unwrap_or(sysfs);
    let p = p.trim_end_matches('/');
    devs.iter().position(|d| d.path == p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::umockdev::parse;

    /// A full-speed vendor device's descriptors (one interface, bulk 0x81
    /// and 0x02).
    fn desc_hex() -> String {
        let b: Vec<u8> = [
            &[
                18u8, 1, 0x10, 1, 0xff, 0, 0, 64, 0x34, 0x12, 0x78, 0x56, 0, 1, 1, 2, 3, 1,
            ][..],
            &[9, 2, 32, 0, 1, 1, 0, 0x80, 50],
            &[9, 4, 0, 0, 2, 0xff, 0, 0, 0],
            &[7, 5, 0x81, 2, 64, 0, 0],
            &[7, 5, 0x02, 2, 64, 0, 0],
        ]
        .concat();
        b.iter().map(|x| format!("{x:02X}")).collect()
    }

    fn file() -> String {
        let h = desc_hex();
        format!(
            "P: /devices/pci0000:00/0000:00:14.0/usb1\nE: SUBSYSTEM=usb\nE: DEVTYPE=usb_device\nA: busnum=1\nA: devnum=1\n\n\
             P: /devices/pci0000:00/0000:00:14.0\nE: SUBSYSTEM=pci\n\n\
             P: /devices/pci0000:00/0000:00:14.0/usb1/1-3.2\nE: SUBSYSTEM=usb\nE: DEVTYPE=usb_device\nA: busnum=1\nA: devnum=7\nA: speed=12\nA: manufacturer=ACME\\n\nA: product=Widget\nH: descriptors={h}\n\n\
             P: /devices/pci0000:00/0000:00:14.0/usb1/1-3.2/1-3.2:1.0\nE: SUBSYSTEM=usb\nE: DEVTYPE=usb_interface\n\n\
             P: /devices/pci0000:00/0000:00:14.0/usb1/1-16\nE: SUBSYSTEM=usb\nE: DEVTYPE=usb_device\nH: descriptors={h}\n\n\
             P: /devices/pci0000:00/0000:00:14.0/usb3/3-1\nE: SUBSYSTEM=usb\nE: DEVTYPE=usb_device\nA: busnum=3\nA: devnum=2\nA: speed=5000\nH: descriptors={h}\n"
        )
    }

    #[test]
    fn usb_devices_are_placed_as_recorded_and_the_rest_noted() {
        let recs = parse(file().as_bytes()).unwrap();
        let (devs, notes) = usb_devices(&recs);
        assert_eq!(devs.len(), 1);
        let d = &devs[0];
        assert_eq!((d.bus, d.ports.clone(), d.devnum), (1, vec![3, 2], Some(7)));
        assert_eq!(d.name(), "1-3.2");
        assert_eq!(d.speed, Some("full"));
        assert_eq!(d.manufacturer.as_deref(), Some("ACME"));
        assert_eq!(d.serial, None);
        assert_eq!(notes.len(), 4, "{notes:?}");
        assert!(notes[0].contains("root hub"), "{notes:?}");
        assert!(notes[1].contains("subsystem pci"), "{notes:?}");
        assert!(
            notes[2].contains("1-16 (line 24): port 16: monfs's hubs have at most 15 ports"),
            "{notes:?}"
        );
        assert!(notes[3].contains("speed 5000"), "{notes:?}");
        assert_eq!(
            find_device(&devs, "/sys/devices/pci0000:00/0000:00:14.0/usb1/1-3.2"),
            Some(0)
        );
        assert_eq!(find_device(&devs, "/sys/devices/x"), None);
    }

    #[test]
    fn the_configuration_loads_with_hubs_devnum_and_capture() {
        let recs = parse(file().as_bytes()).unwrap();
        let (devs, _) = usb_devices(&recs);
        let dir = tempfile::tempdir().unwrap();
        let mut notes = vec![];
        let yaml = config_yaml(&devs, &BTreeMap::new(), dir.path(), &mut notes).unwrap();
        assert!(
            notes[0].contains("1-3: the files have no device here"),
            "{notes:?}"
        );
        let cfg = crate::sim::usb::load::parse_config(&yaml, "gen.yaml").unwrap();
        let hub = &cfg.usb.buses[0].devices[0];
        assert_eq!((hub.port.0, hub.kind), (3, crate::config::DeviceKind::Hub));
        let d = &hub.devices[0];
        assert_eq!(d.port.0, 2);
        assert_eq!(d.devnum.map(|n| n.0), Some(7));
        assert_eq!(d.product.as_deref(), Some("Widget"));
        let got = &d.descriptors.as_ref().unwrap().dump.as_ref().unwrap().bytes;
        assert_eq!(got.len(), 50);
        // A capture without the device's address in it is refused.
        let mut caps = BTreeMap::new();
        caps.insert(0, PathBuf::from("/nonexistent.pcapng"));
        let yaml = config_yaml(&devs, &caps, dir.path(), &mut notes).unwrap();
        assert!(yaml.contains("kind: from-capture"), "{yaml}");
        assert!(yaml.contains("capture_bus: 1"), "{yaml}");
        let timed = with_recorded_timing(&yaml);
        assert!(timed.contains("replay_timing: recorded"), "{timed}");
        assert!(!yaml.contains("replay_timing"), "{yaml}");
        let e = crate::sim::usb::load::parse_config(&yaml, "gen.yaml").unwrap_err();
        assert!(e.to_string().contains("/nonexistent.pcapng"), "{e}");
    }
}
