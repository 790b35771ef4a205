//! USB mass storage as qemu's usb-storage is: its descriptors, the
//! bulk-only transport's class requests, and usb-storage's SCSI commands
//! over it (drivers/usb/storage/transport.c).

use std::collections::VecDeque;
use std::sync::Arc;

use crate::config::DeviceKind;
use crate::usbmon::event::URB_SHORT_NOT_OK;

use super::super::ctx::*;
use super::super::descriptors::{AltDesc, ClassDesc, Where};
use super::super::driver::recovery::{clear_halt, run_recovery};
use super::super::scsi::{self, sector_data, CAPACITY};
use super::class::DeviceClass;

/// Time between SCSI commands when the configuration gives none, ms.
const DEFAULT_INTERVAL_MS: u32 = 200;

/// `kind: mass-storage`.
pub(super) struct Storage;

impl DeviceClass for Storage {
    fn qemu_control(&self) -> bool {
        true // qemu's device
    }
    fn kinds(&self) -> &'static [DeviceKind] {
        &[DeviceKind::MassStorage]
    }

    fn default_interval_ms(&self, _kind: DeviceKind) -> u32 {
        DEFAULT_INTERVAL_MS
    }

    fn descriptors(&self, at: &Where<'_>) -> Option<ClassDesc> {
        let hs = at.hs();
        let mps = if hs { 512 } else { 64 };
        Some(ClassDesc {
            ids: (0x46f4, 0x0001, 0x0000),
            mps0: 64,
            // Self-powered, 0 mA, as qemu's usb-storage.
            attr: 0xc0,
            power: 0,
            mfr: Some("QEMU".to_string()),
            prod: Some("QEMU USB HARDDRIVE".to_string()),
            ser: Some(format!("1-{}-{}", at.pci(), at.path_s())),
            // qemu's storage strings: 1, 2, 3, then its full-speed (4) and
            // high-speed (5, read in kernel-vm) configuration names.
            strings: Some(if hs {
                (1, 2, 3, 5, "High speed config (usb 2.0)")
            } else {
                (1, 2, 3, 4, "Full speed config (usb 1.1)")
            }),
            alts: vec![AltDesc::bulk_pair((8, 6, 0x50), mps)],
            ..ClassDesc::default()
        })
    }

    // Bulk-only mass storage: GET_MAX_LUN, reset.
    fn ep0(
        &self,
        _ctx: &mut Ctx,
        _d: DevId,
        s: &[u8; 8],
        _out: Option<&[u8]>,
    ) -> Option<(i32, Option<Vec<u8>>)> {
        match (s[0], s[1]) {
            (0xa1, 0xfe) => Some((0, Some(vec![0]))),
            (0x21, 0xff) => Some((0, None)),
            _ => None,
        }
    }

    fn class_ops(&self, _dev: &Device, d: DevId) -> Vec<Op> {
        vec![Op::StartStreams(d)]
    }

    fn start(&self, ctx: &mut Ctx, d: DevId, now: u64, _at: u64) {
        let t = StorageTask::new(ctx, d);
        // usb-storage waits `delay_use` before scanning (shortened).
        let wait = ctx.rng.range(200 * MS, 300 * MS);
        ctx.spawn(now + ctx.delay(wait), Box::new(t));
    }

    // usb-storage's probe again: GET_MAX_LUN and the SCSI scan.
    fn rebind(&self, ctx: &mut Ctx, d: DevId, _intf: u8, now: u64) {
        self.start(ctx, d, now, now);
    }
}

/// A SCSI command of the bulk-only transport.
struct Cmd {
    cdb: Vec<u8>,
    dir_in: bool,
    len: u32,
    resp: Option<Arc<[u8]>>,
    out: Option<Arc<[u8]>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    Start,
    Idle,
    CbwC,
    DataS,
    DataC,
    CswS,
    CswC,
}

/// usb-storage: CBW, data stage, CSW, with error handling.
pub(crate) struct StorageTask {
    dev: DevId,
    st: St,
    runner: Runner,
    cbw_tag: u32,
    cmd: Option<Cmd>,
    init: VecDeque<Cmd>,
    interval: u64,
    cbw: Option<Arc<[u8]>>,
    data_tag: u64,
    outcome: Outcome,
    data_stalled: bool,
    csw_retry: bool,
    class_tag: u64,
    /// usb-storage's binding when it started.
    owner: Option<Owner>,
}

impl StorageTask {
    fn new(ctx: &mut Ctx, d: DevId) -> StorageTask {
        let owner = ctx.owner(d, 0x81);
        let dev = ctx.dev(d).unwrap();
        let interval = dev
            .cfg
            .as_ref()
            .and_then(|c| c.interval_ms)
            .unwrap_or(DEFAULT_INTERVAL_MS) as u64
            * MS;
        let (vendor, product) = scsi::names(
            dev.desc.manufacturer.as_deref(),
            dev.desc.product.as_deref(),
        );
        let inquiry = scsi::inquiry(vendor, product);
        let cap = scsi::capacity10();
        let init = VecDeque::from(vec![
            Cmd {
                cdb: vec![0x12, 0, 0, 0, 36, 0],
                dir_in: true,
                len: 36,
                resp: Some(Arc::from(inquiry)),
                out: None,
            },
            Cmd {
                cdb: vec![0; 6],
                dir_in: false,
                len: 0,
                resp: None,
                out: None,
            },
            Cmd {
                cdb: vec![0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                dir_in: true,
                len: 8,
                resp: Some(Arc::from(cap)),
                out: None,
            },
            Cmd {
                cdb: vec![0x1a, 0, 0x3f, 0, 192, 0],
                dir_in: true,
                len: 192,
                resp: Some(Arc::from(vec![0x03, 0, 0, 0])),
                out: None,
            },
            Self::rw(true, 0, 8),
        ]);
        StorageTask {
            dev: d,
            st: St::Start,
            runner: Runner::default(),
            cbw_tag: 0,
            cmd: None,
            init,
            interval,
            cbw: None,
            data_tag: 0,
            outcome: Outcome::Ok,
            data_stalled: false,
            csw_retry: false,
            class_tag: dev.class_tag,
            owner,
        }
    }

    fn rw(read: bool, lba: u32, blocks: u32) -> Cmd {
        let mut cdb = vec![if read { 0x28 } else { 0x2a }, 0];
        cdb.extend_from_slice(&lba.to_be_bytes());
        cdb.push(0);
        cdb.extend_from_slice(&(blocks as u16).to_be_bytes());
        cdb.push(0);
        let data: Arc<[u8]> = Arc::from(sector_data(lba, blocks));
        Cmd {
            cdb,
            dir_in: read,
            len: blocks * 512,
            resp: if read { Some(data.clone()) } else { None },
            out: if read { None } else { Some(data) },
        }
    }

    fn next_cmd(&mut self, ctx: &mut Ctx) -> Cmd {
        if let Some(c) = self.init.pop_front() {
            return c;
        }
        let r = ctx.rng.below(20);
        if r < 2 {
            Cmd {
                cdb: vec![0; 6],
                dir_in: false,
                len: 0,
                resp: None,
                out: None,
            }
        } else {
            let blocks = 8 << ctx.rng.below(4);
            let lba = (ctx.rng.below((CAPACITY - 64) as u64 / 8) * 8) as u32;
            Self::rw(r < 11, lba, blocks as u32)
        }
    }

    fn recover(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let t = self.class_tag;
        let d = self.dev;
        self.runner.q.push_back(Op::Ctrl {
            target: d,
            setup: setup(0x21, 0xff, 0, 0, 0),
            out: None,
            tag: Some(t),
        });
        self.runner.q.push_back(clear_halt(d, 0x81, t));
        self.runner.q.push_back(clear_halt(d, 0x02, t));
        self.cmd = None;
        self.st = St::Idle;
        let gap = ctx.rng.range(MS, 5 * MS);
        Some(now + ctx.delay(gap))
    }

    // usb-storage's transfer flags (drivers/usb/storage/transport.c): the
    // CBW and CSW go through its preallocated DMA buffer `us->iobuf`
    // (usb_stor_msg_common sets URB_NO_TRANSFER_DMA_MAP); the data phase goes
    // through usb_sg_init, whose single URB (xHCI/EHCI take sg lists) has
    // URB_SHORT_NOT_OK when it reads. usb_submit_urb adds URB_DIR_IN: CBW
    // 0x004, CSW 0x204, data IN 0x201, data OUT 0x000.
    fn cbw_urb(&self, ctx: &Ctx) -> Urb {
        ctx.data_urb(self.dev, 0x02, 31, URB_NO_TRANSFER_DMA_MAP, self.class_tag)
    }

    fn csw_urb(&self, ctx: &Ctx) -> Urb {
        ctx.data_urb(self.dev, 0x81, 13, URB_NO_TRANSFER_DMA_MAP, self.class_tag)
    }

    /// How long after `now` a transfer of `len` bytes completes: the
    /// device's time to answer, then the bytes' time on the bus's
    /// asynchronous schedule, shared with every other control and bulk
    /// transfer of the bus.
    fn latency(&self, ctx: &mut Ctx, len: u32, now: u64) -> u64 {
        if self.outcome == Outcome::Unlink {
            // usb-storage gives up on the transfer after a timeout.
            return ctx.rng.range(20 * MS, 40 * MS);
        }
        let lat = ctx.rng.range(30 * US, 200 * US);
        let ready = now + ctx.delay(lat);
        ctx.async_done(self.dev, len, ready) - now
    }
}

impl Task for StorageTask {
    fn step(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        if !ctx.alive(self.dev) {
            return None;
        }
        // A program detached usb-storage (its disconnect killed the URBs).
        if ctx.unbound(self.dev, self.owner) {
            if self.st == St::DataC {
                ctx.tags.free(self.data_tag, URB_SIZE);
            }
            return None;
        }
        if let Some(t) = run_recovery(&mut self.runner, ctx, self.class_tag, now) {
            return Some(t);
        }
        let d = self.dev;
        match self.st {
            St::Start => {
                self.runner.q.push_back(Op::Ctrl {
                    target: d,
                    setup: setup(0xa1, 0xfe, 0, 0, 1),
                    out: None,
                    tag: Some(self.class_tag),
                });
                self.st = St::Idle;
                Some(now)
            }
            St::Idle => {
                {
                    let c = self.next_cmd(ctx);
                    self.cbw_tag = self.cbw_tag.wrapping_add(1);
                    let mut b = b"USBC".to_vec();
                    b.extend_from_slice(&self.cbw_tag.to_le_bytes());
                    b.extend_from_slice(&c.len.to_le_bytes());
                    b.push(if c.dir_in && c.len > 0 { 0x80 } else { 0 });
                    b.push(0);
                    b.push(c.cdb.len() as u8);
                    b.extend_from_slice(&c.cdb);
                    b.resize(31, 0);
                    self.cbw = Some(Arc::from(b));
                    self.cmd = Some(c);
                    self.data_stalled = false;
                    self.csw_retry = false;
                }
                let mut urb = self.cbw_urb(ctx);
                let cbw = self.cbw.clone();
                self.outcome = match ctx.submit_urb(d, &mut urb, cbw, vec![], Place::Given, now) {
                    Ok((o, _)) => o,
                    Err(_) => return self.recover(ctx, now),
                };
                self.st = St::CbwC;
                Some(now + self.latency(ctx, 31, now))
            }
            St::CbwC => {
                let tag = self.class_tag;
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        ctx.complete(d, tag, now, 0, 31, self.cbw.clone(), Vec::new(), 0, 0);
                        let len = self.cmd.as_ref().map(|c| c.len).unwrap_or(0);
                        self.st = if len > 0 { St::DataS } else { St::CswS };
                        Some(now + ctx.rng.range(20 * US, 150 * US))
                    }
                    o => {
                        let status = o.status();
                        ctx.complete(d, tag, now, status, 0, None, Vec::new(), 0, 0);
                        self.recover(ctx, now)
                    }
                }
            }
            St::DataS => {
                let c = self.cmd.as_ref()?;
                let (addr, len, out) = (if c.dir_in { 0x81 } else { 0x02 }, c.len, c.out.clone());
                self.data_tag = ctx.tags.alloc(&mut ctx.rng, URB_SIZE);
                let flags = if c.dir_in { URB_SHORT_NOT_OK } else { 0 };
                let mut urb = ctx.data_urb(d, addr, len, flags, self.data_tag);
                self.outcome = match ctx.submit_urb(d, &mut urb, out, vec![], Place::Given, now) {
                    Ok((o, _)) => o,
                    Err(_) => {
                        ctx.tags.free(self.data_tag, URB_SIZE);
                        return self.recover(ctx, now);
                    }
                };
                self.st = St::DataC;
                Some(now + self.latency(ctx, len, now))
            }
            St::DataC => {
                let tag = self.data_tag;
                ctx.tags.free(tag, URB_SIZE);
                let c = self.cmd.as_ref()?;
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        let (actual, data) = if c.dir_in {
                            let r = c.resp.clone().unwrap_or_else(|| ctx.empty.clone());
                            (r.len().min(c.len as usize) as u32, Some(r))
                        } else {
                            (c.len, c.out.clone())
                        };
                        ctx.complete(d, tag, now, 0, actual, data, Vec::new(), 0, 0);
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(20 * US, 150 * US))
                    }
                    Outcome::Stall => {
                        let ep = if c.dir_in { 0x81 } else { 0x02 };
                        ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                        self.runner.q.push_back(clear_halt(d, ep, self.class_tag));
                        self.data_stalled = true;
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(50 * US, 300 * US))
                    }
                    o => {
                        let status = o.status();
                        ctx.complete(d, tag, now, status, 0, None, Vec::new(), 0, 0);
                        self.recover(ctx, now)
                    }
                }
            }
            St::CswS => {
                let mut urb = self.csw_urb(ctx);
                self.outcome = match ctx.submit_urb(d, &mut urb, None, vec![], Place::Given, now) {
                    Ok((o, _)) => o,
                    Err(_) => return self.recover(ctx, now),
                };
                self.st = St::CswC;
                Some(now + self.latency(ctx, 13, now))
            }
            St::CswC => {
                let tag = self.class_tag;
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        let c = self.cmd.as_ref()?;
                        let actual = if self.data_stalled {
                            0
                        } else if c.dir_in {
                            c.resp
                                .as_ref()
                                .map(|r| r.len() as u32)
                                .unwrap_or(0)
                                .min(c.len)
                        } else {
                            c.len
                        };
                        let mut b = b"USBS".to_vec();
                        b.extend_from_slice(&self.cbw_tag.to_le_bytes());
                        b.extend_from_slice(&(c.len - actual).to_le_bytes());
                        b.push(u8::from(self.data_stalled));
                        ctx.complete(d, tag, now, 0, 13, Some(Arc::from(b)), Vec::new(), 0, 0);
                        self.cmd = None;
                        self.st = St::Idle;
                        let gap = if self.init.is_empty() {
                            self.interval * 9 / 10 + ctx.rng.below(self.interval / 5 + 1)
                        } else {
                            let gap = ctx.rng.range(2 * MS, 8 * MS);
                            ctx.delay(gap)
                        };
                        Some(now + gap)
                    }
                    Outcome::Stall => {
                        ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                        if self.csw_retry {
                            return self.recover(ctx, now);
                        }
                        self.csw_retry = true;
                        self.runner.q.push_back(clear_halt(d, 0x81, self.class_tag));
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(50 * US, 300 * US))
                    }
                    o => {
                        let status = o.status();
                        ctx.complete(d, tag, now, status, 0, None, Vec::new(), 0, 0);
                        self.recover(ctx, now)
                    }
                }
            }
        }
    }
}
