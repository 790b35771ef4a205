//! The simulator as the USB core's port ([`UsbCorePort`]): usbfs and sysfs
//! reach the buses' devices through it. Each call locks the device's bus,
//! acts at the bus's current time (see [`super::core_view`]) and wakes the
//! bus's thread for what it scheduled.

use std::sync::Arc;

use crate::usbcore::device::{
    CoreError, CoreRequest, DevRef, DeviceWatcher, UrbDone, UrbRequest, UsbCorePort, UsbDevice,
};

use super::core_view;
use super::UsbSim;

impl UsbSim {
    fn with_bus<R>(
        &self,
        bus: u16,
        f: impl FnOnce(&mut super::ctx::Ctx, u64) -> Result<R, CoreError>,
    ) -> Result<R, CoreError> {
        let b = self.bus(bus).map_err(|_| CoreError::NoDevice)?;
        let r = b.current(&*self.clock).with_ctx(f);
        b.wake();
        r
    }
}

impl UsbCorePort for UsbSim {
    fn devices(&self) -> Vec<UsbDevice> {
        let mut out = Vec::new();
        for b in &self.buses {
            let g = b.current(&*self.clock);
            let mut v: Vec<UsbDevice> = (g.ctx.devs.iter())
                .filter_map(|(i, _)| core_view::usb_device(&g.ctx, i))
                .collect();
            v.sort_by_key(|d| d.devnum);
            out.extend(v);
        }
        out
    }

    fn device(&self, dev: DevRef) -> Option<UsbDevice> {
        let b = self.bus(dev.bus).ok()?;
        let g = b.lock();
        core_view::usb_device(&g.ctx, dev.id as usize)
    }

    fn watch(&self, watcher: Arc<dyn DeviceWatcher>) {
        self.changes.watch(watcher);
    }

    fn tap_input(&self, tap: Arc<dyn crate::usbcore::device::DriverInput>) {
        self.inputs.tap(tap);
    }

    fn submit(
        &self,
        dev: DevRef,
        urb: UrbRequest,
        done: Arc<dyn UrbDone>,
    ) -> Result<u64, CoreError> {
        self.with_bus(dev.bus, |ctx, now| {
            core_view::submit(ctx, dev, urb, done, now)
        })
    }

    fn cancel(&self, dev: DevRef, urb: u64) -> Result<(), CoreError> {
        self.with_bus(dev.bus, |ctx, now| core_view::cancel(ctx, dev, urb, now))
    }

    fn request(
        &self,
        dev: DevRef,
        req: CoreRequest,
        done: Arc<dyn UrbDone>,
    ) -> Result<u64, CoreError> {
        self.with_bus(dev.bus, |ctx, now| {
            core_view::request(ctx, dev, req, done, now)
        })
    }

    fn claim_interface(&self, dev: DevRef, interface: u8, owner: u64) -> Result<(), CoreError> {
        self.with_bus(dev.bus, |ctx, _| {
            core_view::claim(ctx, dev, interface, owner)
        })
    }

    fn release_interface(&self, dev: DevRef, interface: u8, owner: u64) -> Result<(), CoreError> {
        self.with_bus(dev.bus, |ctx, now| {
            core_view::release(ctx, dev, interface, owner, now)
        })
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::base::clock::{Clock, Timestamp};
    use crate::base::sync::LockExt;
    use crate::config::Config;
    use crate::usbcore::device::{TransferType, UrbResult};
    use crate::usbmon::event::{EventKind, UrbEvent, UrbSink, XferType};

    /// Collects a bus's events.
    #[derive(Default)]
    pub(crate) struct Collect(pub Mutex<Vec<UrbEvent>>);
    impl UrbSink for Collect {
        fn urb_event(&self, ev: UrbEvent) {
            self.0.lock_ok().push(ev);
        }
    }

    /// Collects programs' URBs as they complete.
    #[derive(Default)]
    pub(crate) struct Done(pub Mutex<Vec<(u64, UrbResult)>>);
    impl UrbDone for Done {
        fn done(&self, urb: u64, result: UrbResult) {
            self.0.lock_ok().push((urb, result));
        }
    }

    /// A clock at 0: requests act at the bus's local time.
    pub(crate) struct TestClock;
    impl Clock for TestClock {
        fn sim_now(&self) -> u64 {
            0
        }
        fn at(&self, sim_ns: u64) -> Timestamp {
            Timestamp {
                mono_ns: sim_ns,
                wall_ns: sim_ns,
            }
        }
    }

    const MS: u64 = 1_000_000;

    /// A bus with a keyboard bound to usbhid on port 1, run for 3 s
    /// (seed 7), and its events.
    pub(crate) fn keyboard_bus() -> (UsbSim, Arc<Collect>) {
        let cfg = Config::parse(
            "usb:\n  buses:\n    - bus: 1\n      hub_poll_ms: 0\n      devices:\n        - {port: 1, kind: hid-keyboard}\n",
            "t",
        )
        .unwrap();
        let sink = Arc::new(Collect::default());
        let sim = UsbSim::run_for_test(&cfg.usb, 7, 3000, Arc::new(TestClock), sink.clone());
        (sim, sink)
    }

    #[test]
    fn a_program_detaches_usbhid_claims_and_reads_the_keyboard() {
        let (sim, sink) = keyboard_bus();
        let devs = sim.devices();
        assert_eq!(devs.len(), 2, "{devs:?}");
        assert!(devs[0].is_root_hub());
        let kbd = devs[1].clone();
        assert_eq!(
            (kbd.busnum, kbd.devnum, kbd.port_path.clone()),
            (1, 2, vec![1])
        );
        assert_eq!(kbd.interfaces[0].driver.as_deref(), Some("usbhid"));
        assert_eq!(kbd.descriptors_blob()[..2], [18, 1]);
        assert_eq!(
            sim.claim_interface(kbd.dev, 0, 9),
            Err(CoreError::Busy),
            "usbhid holds it"
        );
        let done = Arc::new(Done::default());
        sink.0.lock_ok().clear();
        sim.request(kbd.dev, CoreRequest::DetachDriver(0), done.clone())
            .unwrap();
        // usbhid's URB is flushed at once (usb_disable_interface: -108).
        let killed = sink.0.lock_ok().iter().any(|e| {
            e.kind == EventKind::Complete && e.xfer == XferType::Interrupt && e.status == -108
        });
        assert!(killed);
        sim.run_until(3100 * MS);
        assert_eq!(done.0.lock_ok()[0].1.status, 0);
        assert_eq!(sim.device(kbd.dev).unwrap().interfaces[0].driver, None);
        sim.claim_interface(kbd.dev, 0, 9).unwrap();
        assert_eq!(
            sim.device(kbd.dev).unwrap().interfaces[0].driver.as_deref(),
            Some("usbfs")
        );
        // Nothing else submits on 0x81 now; the program's URB gets the
        // model's next report.
        sink.0.lock_ok().clear();
        let urb = UrbRequest {
            xfer: TransferType::Interrupt,
            endpoint: 0x81,
            setup: None,
            length: 8,
            out: vec![],
            flags: 0x200,
            iso_lengths: vec![],
            interval: 0,
            stream_id: 0,
            start_frame: 0,
        };
        let got = Arc::new(Done::default());
        let tag = sim.submit(kbd.dev, urb, got.clone()).unwrap();
        sim.run_until(6000 * MS);
        let r = got.0.lock_ok();
        assert_eq!(r.len(), 1, "no report in 3 s");
        assert_eq!((r[0].0, r[0].1.status, r[0].1.actual_length), (tag, 0, 8));
        let evs = sink.0.lock_ok();
        let ints: Vec<_> = evs
            .iter()
            .filter(|e| e.xfer == XferType::Interrupt)
            .collect();
        assert_eq!(ints.len(), 2, "only the program's S and C: {ints:?}");
        assert_eq!(ints[0].id, tag);
        assert_eq!(ints[0].interval, 64);
        // Killing a completed URB: no such URB.
        assert_eq!(sim.cancel(kbd.dev, tag), Err(CoreError::NoUrb));
    }
}
