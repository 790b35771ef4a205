//! usb-storage and uas (`drivers/usb/storage/usb.c`, `usual-tables.c`,
//! `uas.c`, `uas-detect.h`): both match a SCSI bulk-only interface; uas
//! takes it when one of its settings speaks UAS, usb-storage otherwise.
//! usb-storage then runs the bulk-only transport (`transport.c`): its
//! GET_MAX_LUN, the SCSI commands of sd's scan and the I/O after it, each
//! a CBW, a data stage and a CSW, with the transport's error recovery; the
//! device's SCSI target ([`Device::target`]) answers them.

use std::collections::VecDeque;
use std::sync::Arc;

use crate::sim::usb::ctx::*;
use crate::sim::usb::descriptors::AltDesc;
use crate::sim::usb::scsi::{self, Bot, CAPACITY};
use crate::usbmon::event::URB_SHORT_NOT_OK;

use super::host::{HostDriver, Probe};
use super::id::UsbDeviceId;
use super::recovery::{clear_halt, run_recovery};

/// USB_CLASS_MASS_STORAGE.
const CLASS: u8 = 0x08;
/// USB_SC_SCSI.
const SCSI: u8 = 0x06;
/// USB_PR_BULK.
const BULK: u8 = 0x50;
/// USB_PR_UAS.
const UAS: u8 = 0x62;

/// usb-storage.
pub(super) struct UsbStorage;

/// The USUAL_DEV entries of `unusual_devs.h`: subclasses RBC, 8020, QIC,
/// UFI, 8070 and SCSI with the CB, CBI and bulk-only transports (its
/// vendor and product entries are not modelled).
static STORAGE_IDS: [UsbDeviceId; 18] = {
    let mut t = [UsbDeviceId::interface_info(0, 0, 0); 18];
    let protos = [0x01, 0x00, BULK];
    let mut i = 0;
    while i < 18 {
        t[i] = UsbDeviceId::interface_info(CLASS, (i % 6) as u8 + 1, protos[i / 6]);
        i += 1;
    }
    t
};

/// uas_use_uas_driver: a setting of the interface speaks UAS.
fn speaks_uas(dev: &Device, num: u8) -> bool {
    dev.desc
        .cfg
        .alts
        .iter()
        .any(|a| a.num == num && a.class == CLASS && a.sub == SCSI && a.proto == UAS)
}

impl HostDriver for UsbStorage {
    fn name(&self) -> &'static str {
        "usb-storage"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &STORAGE_IDS
    }
    fn soft_unbind(&self) -> bool {
        true
    }
    // usb_stor_probe1 leaves a UAS-capable interface to uas (-ENXIO).
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        if speaks_uas(dev, alt.num) {
            Probe::Failed
        } else {
            Probe::Bound
        }
    }
    // usb_stor_probe2: the transport's thread, which scans after
    // `delay_use` (shortened), on a device with a SCSI target behind its
    // bulk endpoints (made now if it is not there yet); one without (a
    // descriptor dump's) gets no transfers.
    fn start(&self, ctx: &mut Ctx, d: DevId, alt: &AltDesc, at: u64) {
        let bulk = |dir_in: bool| {
            alt.eps
                .iter()
                .find(|e| e.xfer_type() == 2 && e.dir_in() == dir_in)
                .map(|e| e.addr)
        };
        let (Some(ep_in), Some(ep_out)) = (bulk(true), bulk(false)) else {
            return;
        };
        (ctx.make_function)(ctx, d, at);
        if ctx.dev(d).is_none_or(|x| x.target.is_none()) {
            return;
        }
        let t = BulkOnly::new(ctx, d, (ep_in, ep_out));
        let wait = ctx.rng.range(200 * MS, 300 * MS);
        ctx.spawn(at + ctx.delay(wait), Box::new(t));
    }
}

/// uas.
pub(super) struct Uas;

static UAS_IDS: [UsbDeviceId; 2] = [
    UsbDeviceId::interface_info(CLASS, SCSI, BULK),
    UsbDeviceId::interface_info(CLASS, SCSI, UAS),
];

impl HostDriver for Uas {
    fn name(&self) -> &'static str {
        "uas"
    }
    fn id_table(&self) -> &'static [UsbDeviceId] {
        &UAS_IDS
    }
    fn probe(&self, dev: &Device, alt: &AltDesc) -> Probe {
        if speaks_uas(dev, alt.num) {
            Probe::Bound
        } else {
            Probe::Failed
        }
    }
}

/// Time between SCSI commands when the configuration gives none, ms.
pub(crate) const DEFAULT_INTERVAL_MS: u32 = 200;

/// A SCSI command usb-storage sends: its CDB, its data stage's direction
/// and length, and the data it writes.
struct Cmd {
    cdb: Vec<u8>,
    dir_in: bool,
    len: u32,
    out: Option<Arc<[u8]>>,
}

impl Cmd {
    /// A command without a data stage (TEST UNIT READY: 0).
    fn no_data(cdb: Vec<u8>) -> Cmd {
        Cmd {
            cdb,
            dir_in: false,
            len: 0,
            out: None,
        }
    }

    /// A command that reads `len` bytes.
    fn read(cdb: Vec<u8>, len: u32) -> Cmd {
        Cmd {
            cdb,
            dir_in: true,
            len,
            out: None,
        }
    }

    /// READ(10) or WRITE(10) of `blocks` blocks from `lba`.
    fn rw(read: bool, lba: u32, blocks: u32) -> Cmd {
        let mut cdb = vec![if read { 0x28 } else { 0x2a }, 0];
        cdb.extend_from_slice(&lba.to_be_bytes());
        cdb.push(0);
        cdb.extend_from_slice(&(blocks as u16).to_be_bytes());
        cdb.push(0);
        let len = blocks * scsi::BLOCK;
        if read {
            return Cmd::read(cdb, len);
        }
        Cmd {
            cdb,
            dir_in: false,
            len,
            out: Some(Arc::from(written(lba, blocks))),
        }
    }
}

/// What the file system above sd writes to `blocks` blocks from `lba`:
/// the blocks as it has them, which are the disk's own (the simulated
/// disk keeps no writes and reads back its own pattern, so a writer of
/// other bytes would read back what it did not write).
fn written(lba: u32, blocks: u32) -> Vec<u8> {
    scsi::sector_data(lba, blocks)
}

/// Where usb-storage's transport is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum St {
    /// GET_MAX_LUN next.
    Start,
    /// The next command's CBW next.
    Idle,
    /// The CBW is on the bus.
    CbwC,
    /// The data stage next.
    DataS,
    /// The data stage is on the bus.
    DataC,
    /// The CSW next.
    CswS,
    /// The CSW is on the bus.
    CswC,
}

/// usb-storage's bulk-only transport on one interface
/// (usb_stor_Bulk_transport, usb_stor_Bulk_reset): each command a CBW, a
/// data stage and a CSW, whose bytes the device's SCSI target gives; a
/// stalled data stage or CSW is cleared (usb_stor_clear_halt), any other
/// failure ends in the bulk-only mass storage reset and clear-halts of
/// both endpoints.
pub(crate) struct BulkOnly {
    dev: DevId,
    /// The bulk IN and OUT endpoints.
    eps: (u8, u8),
    st: St,
    runner: Runner,
    cbw_tag: u32,
    cmd: Option<Cmd>,
    /// sd's scan: INQUIRY, TEST UNIT READY, READ CAPACITY(10), MODE
    /// SENSE(6) of all pages, the partition table.
    init: VecDeque<Cmd>,
    interval: u64,
    cbw: Option<Arc<[u8]>>,
    data_tag: u64,
    outcome: Outcome,
    csw_retry: bool,
    class_tag: u64,
    /// usb-storage's binding when it started.
    owner: Option<Owner>,
}

impl BulkOnly {
    fn new(ctx: &mut Ctx, d: DevId, eps: (u8, u8)) -> BulkOnly {
        let owner = ctx.owner(d, eps.0);
        let dev = ctx.dev(d).expect("started on a present device");
        let interval = dev
            .cfg
            .as_ref()
            .and_then(|c| c.interval_ms)
            .unwrap_or(DEFAULT_INTERVAL_MS) as u64
            * MS;
        let init = VecDeque::from(vec![
            Cmd::read(vec![0x12, 0, 0, 0, 36, 0], 36),
            Cmd::no_data(vec![0; 6]),
            Cmd::read(vec![0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0], 8),
            // sd_read_write_protect_flag: usb-storage sets
            // use_192_bytes_for_3f.
            Cmd::read(vec![0x1a, 0, 0x3f, 0, 192, 0], 192),
            Cmd::rw(true, 0, 8),
        ]);
        BulkOnly {
            dev: d,
            eps,
            st: St::Start,
            runner: Runner::default(),
            cbw_tag: 0,
            cmd: None,
            init,
            interval,
            cbw: None,
            data_tag: 0,
            outcome: Outcome::Ok,
            csw_retry: false,
            class_tag: dev.class_tag,
            owner,
        }
    }

    /// The next command: the scan's, then TEST UNIT READY (1 in 10), READ
    /// or WRITE of 8 to 64 blocks somewhere on the disk.
    fn next_cmd(&mut self, ctx: &mut Ctx) -> Cmd {
        if let Some(c) = self.init.pop_front() {
            return c;
        }
        let r = ctx.rng.below(20);
        if r < 2 {
            Cmd::no_data(vec![0; 6])
        } else {
            let blocks = 8 << ctx.rng.below(4);
            let lba = (ctx.rng.below((CAPACITY - 64) as u64 / 8) * 8) as u32;
            Cmd::rw(r < 11, lba, blocks as u32)
        }
    }

    /// The device's SCSI target, lent to `f`; None: the device has none
    /// (any more).
    fn device<R>(&self, ctx: &mut Ctx, f: impl FnOnce(&mut Bot) -> R) -> Option<R> {
        ctx.dev_mut(self.dev)?.target.as_deref_mut().map(f)
    }

    /// usb_stor_Bulk_reset: the class reset, then clear-halts of both
    /// endpoints, then the next command.
    fn recover(&mut self, ctx: &mut Ctx, now: u64) -> Option<u64> {
        let t = self.class_tag;
        let d = self.dev;
        self.runner.q.push_back(Op::Ctrl {
            target: d,
            setup: setup(0x21, 0xff, 0, 0, 0),
            out: None,
            tag: Some(t),
            flags: 0,
        });
        self.runner.q.push_back(clear_halt(d, self.eps.0, t));
        self.runner.q.push_back(clear_halt(d, self.eps.1, t));
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
        ctx.data_urb(
            self.dev,
            self.eps.1,
            31,
            URB_NO_TRANSFER_DMA_MAP,
            self.class_tag,
        )
    }

    fn csw_urb(&self, ctx: &Ctx) -> Urb {
        ctx.data_urb(
            self.dev,
            self.eps.0,
            13,
            URB_NO_TRANSFER_DMA_MAP,
            self.class_tag,
        )
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
        let lat = Bot::answer_ns(&mut ctx.rng);
        let ready = now + ctx.delay(lat);
        ctx.async_done(self.dev, len, ready) - now
    }

    /// End the URB `tag` that the device left unanswered (it had nothing to
    /// send): usb-storage's command timeout unlinks it, then it resets the
    /// transport.
    fn timed_out(&mut self, ctx: &mut Ctx, tag: u64, now: u64) -> Option<u64> {
        ctx.complete(self.dev, tag, now, ENOENT, 0, None, Vec::new(), 0, 0);
        self.recover(ctx, now)
    }
}

/// Whether `b` is the CSW of the command with tag `tag`
/// (usb_stor_Bulk_transport checks its length, signature and tag).
fn csw_of(b: &[u8], tag: u32) -> bool {
    b.len() == 13 && &b[..4] == b"USBS" && b[4..8] == tag.to_le_bytes()
}

impl Task for BulkOnly {
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
                    flags: URB_NO_TRANSFER_DMA_MAP,
                });
                self.st = St::Idle;
                Some(now)
            }
            St::Idle => {
                {
                    let c = self.next_cmd(ctx);
                    self.cbw_tag = self.cbw_tag.wrapping_add(1);
                    let b = scsi::cbw(self.cbw_tag, c.len, c.dir_in && c.len > 0, &c.cdb);
                    self.cbw = Some(Arc::from(b));
                    self.cmd = Some(c);
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
                        // The device takes the CBW; one it refuses it
                        // stalls.
                        let cbw = self.cbw.clone().unwrap_or_else(|| ctx.empty.clone());
                        if self.device(ctx, |b| b.host_out(&cbw)) != Some(Ok(())) {
                            ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                            return self.recover(ctx, now);
                        }
                        ctx.complete(d, tag, now, 0, 31, Some(cbw), Vec::new(), 0, 0);
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
                let addr = if c.dir_in { self.eps.0 } else { self.eps.1 };
                let (len, out) = (c.len, c.out.clone());
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
                let (dir_in, len, out) = (c.dir_in, c.len, c.out.clone());
                match self.outcome {
                    Outcome::Ok | Outcome::SubmitError => {
                        let (actual, data) = if dir_in {
                            // What the device sends, at most the length.
                            match self.device(ctx, |b| b.host_in(len)).flatten() {
                                Some(r) => (r.len() as u32, Some(Arc::from(r))),
                                None => return self.timed_out(ctx, tag, now),
                            }
                        } else {
                            let w = out.clone().unwrap_or_else(|| ctx.empty.clone());
                            if self.device(ctx, |b| b.host_out(&w)) != Some(Ok(())) {
                                ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                                return self.recover(ctx, now);
                            }
                            (len, out)
                        };
                        ctx.complete(d, tag, now, 0, actual, data, Vec::new(), 0, 0);
                        self.st = St::CswS;
                        Some(now + ctx.rng.range(20 * US, 150 * US))
                    }
                    Outcome::Stall => {
                        // The device stalled the data stage; usb-storage
                        // clears the halt and reads the CSW.
                        self.device(ctx, Bot::stall_data);
                        let ep = if dir_in { self.eps.0 } else { self.eps.1 };
                        ctx.complete(d, tag, now, EPIPE, 0, None, Vec::new(), 0, 0);
                        self.runner.q.push_back(clear_halt(d, ep, self.class_tag));
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
                        let Some(b) = self.device(ctx, |b| b.host_in(13)).flatten() else {
                            return self.timed_out(ctx, tag, now);
                        };
                        let n = b.len() as u32;
                        let good = csw_of(&b, self.cbw_tag);
                        ctx.complete(d, tag, now, 0, n, Some(Arc::from(b)), Vec::new(), 0, 0);
                        self.cmd = None;
                        if !good {
                            // A bad CSW: a transport error, and the reset.
                            return self.recover(ctx, now);
                        }
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
                        self.runner
                            .q
                            .push_back(clear_halt(d, self.eps.0, self.class_tag));
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
