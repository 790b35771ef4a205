//! Assembles the facilities, the simulators and the file tree from a config.
//! Plain Rust: the FUSE adapter mounts the resulting [`Tree`].

use std::sync::Arc;

use crate::base::clock::{Clock, RealClock, VirtualClock};
use crate::base::vfs::{NodeKind, SnapshotFile, Tree};
use crate::config::{ClockKind, Config};
use crate::sim::usb::UsbSim;
use crate::usbmon::UsbMon;

/// Everything a mount serves.
pub struct Monfs {
    /// The file tree.
    pub tree: Arc<Tree>,
    /// usbmon.
    pub usbmon: Arc<UsbMon>,
    /// The USB simulator.
    pub usb: Arc<UsbSim>,
    /// usbfs, `dev/bus/usb`.
    pub usbfs: Arc<crate::usbcore::devio::UsbFs>,
    /// The USB part of sysfs, `sys/`.
    pub sysfs: Arc<crate::usbcore::sysfs::UsbSysfs>,
    /// The HID core and hidraw, `dev/hidrawN`.
    pub hid: Arc<crate::hid::HidCore>,
    /// The input core and evdev, `dev/input/eventN`.
    pub input: Arc<crate::input::InputCore>,
    /// The tty layer: cdc_acm's ports, `dev/ttyACMN`.
    pub tty: Arc<crate::tty::TtyCore>,
    /// The clock every producer stamps events with.
    pub clock: Arc<dyn Clock>,
    /// tracefs event tracing under `tracing/`.
    pub tracing: Arc<crate::tracefs::Tracing>,
    /// The z/VM monitor reader, `dev/monreader`.
    pub monreader: Arc<crate::monreader::MonReaderDev>,
    /// The z/VM *MONITOR simulator feeding it.
    pub zvm: Arc<crate::sim::zvm::Monitor>,
    /// Live control of the simulators (`monfs/ctl`, `monfs ctl`).
    pub control: Arc<crate::control::Control>,
    /// What the frontends served, by request type (`monfs/requests`).
    pub requests: Arc<crate::base::reqstats::RequestStats>,
}

impl Monfs {
    /// Build everything for `cfg`; files are owned by `uid:gid`. Simulators are
    /// not started yet (see [`Monfs::start`]). `uevents`, if given, is told
    /// of every topology change after usbfs and sysfs show it.
    pub fn new(
        cfg: &Config,
        uid: u32,
        gid: u32,
        uevents: Option<Arc<crate::usbcore::uevent::UeventQueue>>,
    ) -> Monfs {
        let clock: Arc<dyn Clock> = match cfg.clock {
            ClockKind::Real => Arc::new(RealClock::new()),
            ClockKind::Virtual => Arc::new(VirtualClock::new()),
        };
        let seed = cfg.seed.unwrap_or_else(|| clock.now().wall_ns);
        let bus_numbers: Vec<u16> = cfg.usb.buses.iter().map(|b| b.bus.0).collect();
        let usbmon = Arc::new(UsbMon::new(&bus_numbers));
        // URB events of every bus are put into one order, then go to
        // tracefs (usb:usb_urb_*) and to usbmon.
        let tracing = crate::tracefs::Tracing::new(clock.clone(), &cfg.tracing);
        let sink = Arc::new(crate::usbmon::event::Ordered::new(Arc::new(
            crate::tracefs::UrbTraceSink::new(tracing.clone(), Some(usbmon.clone())),
        )));
        let usb = Arc::new(UsbSim::new(&cfg.usb, seed, clock.clone(), sink.clone()));
        usb.set_timing(cfg.timing);
        let tree = Arc::new(Tree::new(uid, gid));

        crate::usbmon::files::install(&usbmon, &tree);
        let sim = usb.clone();
        tree.add(
            "usb/devices",
            NodeKind::File(Arc::new(SnapshotFile::new(move || {
                sim.devices_text().into_bytes()
            }))),
            0o444,
        );
        tree.add(
            "monfs/null",
            NodeKind::File(Arc::new(crate::base::nullfile::NullNode)),
            0o600,
        );
        // Writes are taken and ignored; an open with O_TRUNC starts the
        // counts again, as tracefs's `trace` is cleared. Mode 0600: the
        // counts and times of every user's requests are the owner's to
        // read (issue 37), as debugfs keeps such statistics to root.
        let requests = Arc::new(crate::base::reqstats::RequestStats::default());
        let (shown, cleared) = (requests.clone(), requests.clone());
        tree.add(
            "monfs/requests",
            NodeKind::File(Arc::new(
                crate::tracefs::Ctl::new(0o600)
                    .rs(move || shown.text())
                    .w(|data, _| Ok(data.len() as u32))
                    .t(move || cleared.reset()),
            )),
            0o600,
        );
        crate::tracefs::add_files(&tracing, &tree);
        let port: Arc<dyn crate::usbcore::device::UsbCorePort> = usb.clone();
        // usbfs: programs drive the simulated devices through the core's port.
        let usbfs = crate::usbcore::devio::UsbFs::install(&tree, usb.clone(), &bus_numbers);
        // sysfs: sys/bus/usb and the device directories, from the same port.
        let sysfs = crate::usbcore::sysfs::UsbSysfs::install(&tree, &port);
        // The HID core: HID devices and hidraw nodes of usbhid's
        // interfaces, shown after the interface directories sysfs writes.
        let input = crate::input::InputCore::install(&tree);
        let hid = crate::hid::HidCore::install(&tree, &port, &input);
        // The tty layer: cdc_acm's ports.
        let tty = crate::tty::TtyCore::install(&tree, &port);
        // uevents go out once usbfs, sysfs, the HID core and the tty layer
        // show the change; their devices among them.
        if let Some(q) = uevents {
            q.children_from(hid.clone());
            q.children_from(tty.clone());
            port.watch(q);
        }
        // usb:usb_device_plug and usb_device_unplug, in the URB events'
        // order.
        port.watch(Arc::new(PlugEvents {
            sink,
            known: Default::default(),
        }));
        // Napping buses are caught up before, and woken after, requests.
        tree.add_request_hooks(usb.clone());
        let monreader = crate::monreader::MonReaderDev::install(
            &tree,
            crate::monreader::PathConfig::from(&cfg.zvm),
            clock.clone(),
        );
        // *MONITOR sends through the reader's port.
        let zvm = Arc::new(crate::sim::zvm::Monitor::new(
            cfg.zvm.clone(),
            seed,
            clock.clone(),
            monreader.clone(),
        ));
        // Its records also go to tracefs (zvm:zvm_sample, zvm:zvm_event).
        zvm.set_tap(tracing.clone());
        let control = Arc::new(crate::control::Control::new(
            usb.clone(),
            zvm.clone(),
            tracing.clone(),
        ));
        tree.add(
            "monfs/ctl",
            NodeKind::File(Arc::new(crate::control::CtlNode(control.clone()))),
            0o600,
        );
        Monfs {
            tree,
            usbmon,
            usb,
            usbfs,
            sysfs,
            hid,
            tty,
            input,
            clock,
            tracing,
            monreader,
            zvm,
            control,
            requests,
        }
    }

    /// The character devices under `dev/` (name, node, minor), for CUSE.
    /// usbmon devices come first, bus 0 first, so that `usbmon0` can take a
    /// major the others then share, as in the kernel.
    pub fn char_devices(&self) -> Vec<(String, Arc<dyn crate::base::vfs::FileNode>, u32)> {
        let mut out = Vec::new();
        let Ok(dev) = self.tree.resolve("dev") else {
            return out;
        };
        // usbmonN and monreader; class nodes (hidrawN) come and go with
        // their devices and are not made here.
        let fixed = |n: &str| n.starts_with("usbmon") || n == "monreader";
        for (name, ino) in dev.children.iter().filter(|(n, _)| fixed(n)) {
            if let Ok(crate::base::vfs::Node {
                kind: NodeKind::File(f),
                ..
            }) = self.tree.get(*ino)
            {
                let minor = name
                    .strip_prefix("usbmon")
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0);
                out.push((name.clone(), f, minor));
            }
        }
        out.sort_by_key(|(n, _, m)| (!n.starts_with("usbmon"), *m));
        out
    }

    /// Start the simulators.
    pub fn start(&self) {
        self.usb.start();
        self.zvm.start();
    }

    /// Stop the simulators.
    pub fn stop(&self) {
        self.usb.stop();
        self.zvm.stop();
    }
}

/// The stream of topology changes as the sink of URB events takes a device
/// coming and going (`usb:usb_device_plug` when `usb_new_device` has
/// registered it, `usb:usb_device_unplug` when `usb_disconnect` lets it
/// go): through the sink, so that they are stamped in one order with the
/// URB events. Root hubs are not announced.
struct PlugEvents {
    sink: Arc<dyn crate::usbmon::event::UrbSink>,
    /// Each announced device as it was plugged (what its unplug says).
    known: std::sync::Mutex<
        std::collections::HashMap<
            crate::usbcore::device::DevRef,
            crate::usbmon::event::DeviceEvent,
        >,
    >,
}

impl crate::usbcore::device::DeviceWatcher for PlugEvents {
    fn changed(&self, event: &crate::usbcore::device::DeviceEvent) {
        use crate::base::sync::LockExt;
        use crate::usbcore::device::DeviceChange;
        let mut known = self.known.lock_ok();
        match &event.change {
            DeviceChange::Added(d) if !d.is_root_hub() => {
                let ev = crate::usbmon::event::DeviceEvent {
                    ts: event.time,
                    plugged: true,
                    bus: d.busnum,
                    devnum: d.devnum,
                    devpath: d.name(),
                    vendor: d.vendor_id(),
                    product: d.product_id(),
                    // iProduct's string
                    name: d.string(d.descriptor[15]).unwrap_or_default().to_string(),
                };
                self.sink.device_event(&ev);
                known.insert(d.dev, ev);
            }
            DeviceChange::Removed(r) => {
                if let Some(mut ev) = known.remove(r) {
                    ev.ts = event.time;
                    ev.plugged = false;
                    self.sink.device_event(&ev);
                }
            }
            _ => {}
        }
    }
}
