//! usbhid's own URBs for the HID core (`usbhid_submit_report` in
//! `drivers/hid/usbhid/hid-core.c`): the reports hid-input's LED work
//! sends through `hid_hw_request` go out one at a time, in order, on
//! usbhid's control URB (urbctrl: the URB its probe set a boot keyboard's
//! LEDs with, the device's `class_tag`) or, for an output report of an
//! interface with an interrupt OUT endpoint, on its interrupt OUT URB
//! (urbout). Both are usbhid's for as long as it is bound: usbmon shows
//! the same URB address for each report, with URB_NO_TRANSFER_DMA_MAP, as
//! the kernel's. They are answered by the device side, as programs' URBs
//! are, and killed (-2) with usbhid's other URBs when it unbinds.

use crate::usbcore::device::{CoreError, DevRef, TransferType, UrbRequest, UrbResult};
use crate::usbmon::event::URB_DIR_IN;

use crate::sim::usb::ctx::*;

use super::*;

/// HID_CONTROL_FIFO_SIZE (and HID_OUTPUT_FIFO_SIZE): the reports usbhid
/// queues; one more is dropped ("control queue full").
const QUEUE_MAX: usize = 256;

/// Queue `r` for usbhid on interface `r.interface` of the live device `d`
/// (`dev` to the core): the request's id.
pub(super) fn queue(
    ctx: &mut Ctx,
    (dev, d): (DevRef, DevId),
    r: HidReport,
    now: u64,
) -> Result<u64, CoreError> {
    let x = ctx.dev(d).ok_or(CoreError::NoDevice)?;
    if driver_of(x, r.interface).as_deref() != Some("usbhid") {
        return Err(CoreError::NoDriver);
    }
    if let Some(ep) = r.endpoint {
        let ok = x
            .desc
            .cfg
            .interface_of(ep)
            .is_some_and(|i| i == r.interface)
            && ep & 0x80 == 0;
        if !ok {
            return Err(CoreError::Invalid("endpoint"));
        }
    }
    let x = ctx.dev_mut(d).ok_or(CoreError::NoDevice)?;
    if x.core.hid_reports.len() >= QUEUE_MAX {
        tracing::warn!(
            "usb {}-{}: usbhid's report queue is full ({QUEUE_MAX}): a report dropped",
            dev.bus,
            x.devnum
        );
        return Err(CoreError::NoMem);
    }
    let id = r.id;
    x.core.hid_reports.push_back(r);
    if !x.core.hid_sending {
        x.core.hid_sending = true;
        ctx.spawn(now, Box::new(Sender { dev, d }));
    }
    Ok(id)
}

/// Sends a device's queued reports, each once usbhid's URB is back.
struct Sender {
    dev: DevRef,
    d: DevId,
}

impl Sender {
    /// Stop: the queue is empty, or the device is gone and the reports
    /// waiting are told so.
    fn stop(&self, ctx: &mut Ctx) -> Option<u64> {
        let x = ctx.dev_mut(self.d)?;
        x.core.hid_sending = false;
        for r in std::mem::take(&mut x.core.hid_reports) {
            fail(&r, ENODEV);
        }
        None
    }

    /// usbhid's URB of `interface` for a report: its control URB, or with
    /// `out_ep` its interrupt OUT URB (made now if this is its first
    /// report); its address.
    fn urb_of(&self, ctx: &mut Ctx, interface: u8, out_ep: bool) -> Option<u64> {
        let x = ctx.dev(self.d)?;
        if !out_ep {
            return Some(x.class_tag);
        }
        if let Some((_, t)) = x.core.hid_urbout.iter().find(|(i, _)| *i == interface) {
            return Some(*t);
        }
        let tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
        ctx.dev_mut(self.d)?.core.hid_urbout.push((interface, tag));
        Some(tag)
    }
}

/// Tell `r`'s caller it ended with `status` without a URB.
fn fail(r: &HidReport, status: i32) {
    r.done.done(
        r.id,
        UrbResult {
            status,
            ..Default::default()
        },
    );
}

impl Task for Sender {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        loop {
            let x = ctx.dev(self.d)?;
            if x.gone || !x.core.registered {
                return self.stop(ctx);
            }
            let Some(r) = x.core.hid_reports.front() else {
                return self.stop(ctx);
            };
            // usbhid unbound since (its disconnect emptied its rings).
            if driver_of(x, r.interface).as_deref() != Some("usbhid") {
                let r = ctx.dev_mut(self.d)?.core.hid_reports.pop_front()?;
                fail(&r, ENODEV);
                continue;
            }
            let (interface, out_ep) = (r.interface, r.endpoint.is_some());
            let tag = self.urb_of(ctx, interface, out_ep)?;
            // The URB is still out: the next report goes when it is back
            // (hid_ctrl and hid_irq_out restart the queue).
            if ctx.dev(self.d)?.inflight.iter().any(|u| u.tag == tag) {
                let (dev, d) = (self.dev, self.d);
                ctx.wake_on(d, tag, Box::new(Sender { dev, d }));
                return None;
            }
            let r = ctx.dev_mut(self.d)?.core.hid_reports.pop_front()?;
            let req = match r.endpoint {
                // hid_submit_out: the report on urbout.
                Some(ep) => UrbRequest {
                    xfer: TransferType::Interrupt,
                    endpoint: ep,
                    setup: None,
                    length: r.out.len() as u32,
                    out: r.out.clone(),
                    flags: URB_NO_TRANSFER_DMA_MAP,
                    iso_lengths: Vec::new(),
                    interval: 0,
                    stream_id: 0,
                    start_frame: 0,
                },
                // hid_submit_ctrl: the request on urbctrl.
                None => {
                    let dir_in = r.setup[0] & 0x80 != 0;
                    UrbRequest {
                        xfer: TransferType::Control,
                        endpoint: if dir_in { 0x80 } else { 0 },
                        setup: Some(r.setup),
                        length: u32::from(u16::from_le_bytes([r.setup[6], r.setup[7]])),
                        out: if dir_in { Vec::new() } else { r.out.clone() },
                        flags: URB_NO_TRANSFER_DMA_MAP | if dir_in { URB_DIR_IN } else { 0 },
                        iso_lengths: Vec::new(),
                        interval: 0,
                        stream_id: 0,
                        start_frame: 0,
                    }
                }
            };
            if let Err(e) =
                super::urb::submit_on(ctx, self.dev, req, r.done.clone(), now, Some(tag))
            {
                tracing::debug!("usbhid: a report's URB was refused: {e}");
                fail(&r, -e.errno());
                continue;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::base::sync::LockExt;
    use crate::sim::usb::usbfs_port::tests::{keyboard_bus, Collect, Done};
    use crate::sim::usb::UsbSim;
    use crate::usbcore::device::{CoreRequest, UsbCorePort};
    use crate::usbmon::event::{EventKind, XferType};

    const MS: u64 = 1_000_000;

    /// A keyboard bound to usbhid, run for 3 s.
    fn keyboard() -> (UsbSim, Arc<Collect>, crate::usbcore::device::UsbDevice) {
        let (sim, sink) = keyboard_bus();
        let kbd = sim
            .devices()
            .into_iter()
            .find(|d| !d.is_root_hub())
            .unwrap();
        (sim, sink, kbd)
    }

    fn leds(value: u8) -> CoreRequest {
        CoreRequest::HidReport {
            interface: 0,
            endpoint: None,
            setup: [0x21, 0x09, 0x00, 0x02, 0, 0, 1, 0],
            out: vec![value],
        }
    }

    /// The SET_REPORTs on ep0, in order.
    fn set_report_events(sink: &Collect) -> Vec<crate::usbmon::event::UrbEvent> {
        sink.0
            .lock_ok()
            .iter()
            .filter(|e| {
                e.xfer == XferType::Control && e.setup.is_some_and(|s| s[..2] == [0x21, 0x09])
            })
            .cloned()
            .collect()
    }

    /// (kind, tag, flags, data) of the SET_REPORTs on ep0.
    fn set_reports(sink: &Collect) -> Vec<(EventKind, u64, u32, Vec<u8>)> {
        set_report_events(sink)
            .iter()
            .map(|e| {
                (
                    e.kind,
                    e.id,
                    e.xfer_flags,
                    e.data.as_deref().unwrap_or(&[]).to_vec(),
                )
            })
            .collect()
    }

    #[test]
    fn usbhid_sends_the_hid_cores_reports_on_its_own_control_urb_one_at_a_time() {
        let (sim, sink, kbd) = keyboard();
        // The probe's LEDs (off) went out on usbhid's control URB.
        let probe = set_reports(&sink);
        assert_eq!(probe.len(), 2, "{probe:?}");
        let urbctrl = probe[0].1;
        let done = Arc::new(Done::default());
        sim.request(kbd.dev, leds(0x02), done.clone()).unwrap();
        sim.request(kbd.dev, leds(0x00), done.clone()).unwrap();
        sim.run_until(3200 * MS);
        let all = set_reports(&sink);
        let after: Vec<_> = all[2..]
            .iter()
            .map(|(k, t, f, d)| (*k, *t, *f, d.clone()))
            .collect();
        // Both on the same URB as the probe's, the second once the first
        // came back, each with URB_NO_TRANSFER_DMA_MAP.
        assert_eq!(
            after,
            [
                (EventKind::Submit, urbctrl, 0x004, vec![0x02]),
                (EventKind::Complete, urbctrl, 0x004, vec![]),
                (EventKind::Submit, urbctrl, 0x004, vec![0x00]),
                (EventKind::Complete, urbctrl, 0x004, vec![]),
            ],
            "{all:?}"
        );
        // The second goes out from the first's completion (hid_ctrl
        // restarts the queue), at the same moment.
        let evs = set_report_events(&sink);
        assert_eq!(evs[4].ts.mono_ns, evs[3].ts.mono_ns, "{evs:?}");
        let told = done.0.lock_ok();
        assert_eq!(told.len(), 2);
        assert!(
            told.iter().all(|(t, r)| *t == urbctrl && r.status == 0),
            "{told:?}"
        );
    }

    #[test]
    fn a_report_for_an_interface_usbhid_does_not_hold_is_refused() {
        let (sim, _sink, kbd) = keyboard();
        let done = Arc::new(Done::default());
        sim.request(kbd.dev, CoreRequest::DetachDriver(0), done.clone())
            .unwrap();
        sim.run_until(3100 * MS);
        let r = sim.request(kbd.dev, leds(0x02), done.clone());
        assert_eq!(r, Err(crate::usbcore::device::CoreError::NoDriver));
    }
}
