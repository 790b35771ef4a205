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
            let mut v: Vec<UsbDevice> = (0..g.ctx.devs.len())
                .filter_map(|i| core_view::usb_device(&g.ctx, i))
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
        for b in &self.buses {
            b.lock().ctx.core.watchers.push(watcher.clone());
        }
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
        self.with_bus(dev.bus, |ctx, _| {
            core_view::release(ctx, dev, interface, owner)
        })
    }
}
