//! A vendor device doing back-to-back bulk transfers, for benchmarks: a
//! Linux gadget zero's source/sink function (`f_sourcesink.c`), which
//! sends its source's bytes on bulk IN and takes whatever comes on bulk
//! OUT. usbtest's loop that drives it is the driver's
//! (`driver/usbtest.rs`).

use std::sync::Arc;

use crate::config::DeviceKind;

use super::super::ctx::*;
use super::super::descriptors::{AltDesc, ClassDesc, Where};
use super::class::DeviceClass;

/// `kind: flood`.
pub(super) struct Flood;

impl DeviceClass for Flood {
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::Flood]
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let mps = if at.hs() { 512 } else { 64 };
        Some(ClassDesc {
            ids: (0x0525, 0xa4a0, 0x0612),
            mps0: 64,
            attr: 0x80,
            power: 1,
            mfr: Some("monfs".to_string()),
            prod: Some("Flood Gadget".to_string()),
            ser: Some(format!("monfs-flood-{}", at.path_s())),
            alts: vec![AltDesc::bulk_pair((0xff, 0, 0), mps)],
            ..ClassDesc::default()
        })
    }

    // (The class's default start: usbtest binds the gadget and runs its
    // bulk loop, `driver::usbtest`; bound again, a new loop, the gadget's
    // source as it was.)

    // The source/sink function, made when usbtest first starts.
    fn function(&self, ctx: &mut Ctx, d: DevId, _at: u64) -> Option<Box<dyn InFunction>> {
        Some(Box::new(SourceSink::new(ctx, d)))
    }
}

/// Gadget zero's source/sink function: its source queues the same
/// buffer on bulk IN again and again, its sink takes every OUT transfer
/// whole.
struct SourceSink {
    /// The source's buffer (`transfer_size` bytes of noise, made once):
    /// shared with every completion it answers, never copied.
    data: Arc<[u8]>,
}

impl SourceSink {
    /// The function of flood device `d`: a buffer of its
    /// `transfer_size` (512 bytes by default), filled from the run's
    /// random numbers.
    fn new(ctx: &mut Ctx, d: DevId) -> SourceSink {
        let size = ctx.dev(d).map_or(512, Device::transfer_size);
        // The buffer is made in its one block (an iterator of known
        // length collects straight into the Arc): a copy from a Vec would
        // leave the Vec's block with the allocator (`sim/usb/memory.rs`).
        let mut data: Arc<[u8]> = std::iter::repeat_n(0u8, size as usize).collect();
        ctx.rng
            .fill(Arc::get_mut(&mut data).expect("a new buffer has one owner"));
        SourceSink { data }
    }
}

impl InFunction for SourceSink {
    // The source's next buffer is always queued: an IN token gets it at
    // once.
    fn due(&mut self, _ctx: &mut Ctx, _ep: u8, now: u64, _outcome: Outcome) -> Option<u64> {
        Some(now)
    }

    fn data(&mut self, _ctx: &mut Ctx, _ep: u8, _now: u64) -> (u32, Arc<[u8]>) {
        (self.data.len() as u32, self.data.clone())
    }

    // The sink takes all.
    fn take(&mut self, _ctx: &mut Ctx, _now: u64, len: u32) -> Option<u32> {
        Some(len)
    }
}
