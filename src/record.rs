//! Recording usbmon traffic to capture files that Wireshark, tcpdump and
//! monfs's own replay open: pcapng (or pcap) with linktype 220
//! (`USB_LINUX_MMAPPED`, the 64-byte header) by default, or 189.
//!
//! Three ways in:
//! * [`Recorder`]: a usbmon reader inside the daemon (like an open of
//!   `dev/usbmonN`) that writes what a bus produces, from a writer thread.
//! * [`write_events`] / [`CaptureWriter`]: events to a file, for tests and
//!   tools that make captures from synthetic [`UrbEvent`]s.
//! * [`record_from_device`]: a separate process reading
//!   `MOUNTPOINT/dev/usbmonN` with `MON_IOCX_GETX` (`monfs record`).
//!
//! Packets hold what a reader with libpcap's ring ([`RECORD_RING`]) captures,
//! so a recording equals what tcpdump would record of the same events.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TrySendError};
use pcap_file::pcap::PcapHeader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

use crate::sync::LockExt;
use crate::usbmon::binary::{encode_event, ioc, PKT_SZ_API0, PKT_SZ_API1};
use crate::usbmon::event::UrbEvent;
use crate::usbmon::{MonReader, Registration, UsbMon};

/// The ring size whose capture limits recordings follow: libpcap's default
/// request, 1200 KiB, so at most 245760 data bytes per event.
pub const RECORD_RING: usize = 1_228_800;
/// Snapshot length written in file headers (tcpdump's default), above the
/// largest packet: 64 + 128 * 16 + RECORD_RING / 5.
pub const SNAPLEN: u32 = 262_144;
/// Packets a [`Recorder`] queues for its writer before it drops.
const QUEUE: usize = 16_384;

/// The file format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// pcapng (Wireshark's default).
    #[default]
    PcapNg,
    /// Classic pcap, microsecond timestamps.
    Pcap,
}

impl Format {
    /// `.pcap` means pcap, anything else pcapng.
    pub fn from_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("pcap") => Format::Pcap,
            _ => Format::PcapNg,
        }
    }
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pcapng" => Ok(Format::PcapNg),
            "pcap" => Ok(Format::Pcap),
            _ => Err(format!("unknown capture format {s:?}: pcapng or pcap")),
        }
    }
}

/// The usbmon link types.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LinkType {
    /// 220, `USB_LINUX_MMAPPED`: the 64-byte header (what tcpdump records).
    #[default]
    Mmapped,
    /// 189, `USB_LINUX`: the 48-byte header (libpcap's read path).
    Linux,
}

impl LinkType {
    fn datalink(self) -> DataLink {
        match self {
            LinkType::Mmapped => DataLink::USB_LINUX_MMAPPED,
            LinkType::Linux => DataLink::USB_LINUX,
        }
    }
    fn header_len(self) -> usize {
        match self {
            LinkType::Mmapped => PKT_SZ_API1,
            LinkType::Linux => PKT_SZ_API0,
        }
    }
}

fn pcap_io(e: PcapError) -> io::Error {
    match e {
        PcapError::IoError(e) => e,
        e => io::Error::new(io::ErrorKind::InvalidData, e.to_string()),
    }
}

enum Inner<W: Write> {
    /// pcap-file 2.0's PcapWriter cannot be flushed in place; the file
    /// header is the crate's, the 16-byte packet records are written here.
    Pcap(W),
    Ng(PcapNgWriter<W>),
}

/// A capture file being written: file header, then one packet per event.
pub struct CaptureWriter<W: Write> {
    inner: Inner<W>,
    link: LinkType,
    packets: u64,
    bytes: u64,
}

impl<W: Write> CaptureWriter<W> {
    /// Write the file header (pcapng: section and one interface named
    /// `iface`, e.g. `usbmon1`, with nanosecond timestamps).
    pub fn new(w: W, format: Format, link: LinkType, iface: &str) -> io::Result<Self> {
        let inner = match format {
            Format::Pcap => {
                let h = PcapHeader {
                    snaplen: SNAPLEN,
                    datalink: link.datalink(),
                    ts_resolution: TsResolution::MicroSecond,
                    endianness: Endianness::native(),
                    ..Default::default()
                };
                let mut w = w;
                h.write_to(&mut w).map_err(pcap_io)?;
                Inner::Pcap(w)
            }
            Format::PcapNg => {
                let mut ng =
                    PcapNgWriter::with_endianness(w, Endianness::native()).map_err(pcap_io)?;
                let idb = InterfaceDescriptionBlock {
                    linktype: link.datalink(),
                    snaplen: SNAPLEN,
                    options: vec![
                        InterfaceDescriptionOption::IfName(iface.to_string().into()),
                        InterfaceDescriptionOption::IfTsResol(9),
                    ],
                };
                ng.write_pcapng_block(idb).map_err(pcap_io)?;
                Inner::Ng(ng)
            }
        };
        Ok(CaptureWriter {
            inner,
            link,
            packets: 0,
            bytes: 0,
        })
    }

    /// Write one packet: `pkt` is a 64-byte usbmon header and its `len_cap`
    /// bytes (cut to 48 + payload for linktype 189), at `ts_ns` since the
    /// epoch.
    pub fn write_packet(&mut self, ts_ns: u64, pkt: &[u8]) -> io::Result<()> {
        let data: std::borrow::Cow<[u8]> = match self.link {
            LinkType::Mmapped => pkt.into(),
            LinkType::Linux if pkt.len() >= PKT_SZ_API1 => {
                let mut v = pkt[..PKT_SZ_API0].to_vec();
                v.extend_from_slice(&pkt[PKT_SZ_API1..]);
                v.into()
            }
            LinkType::Linux => pkt.into(),
        };
        let orig_len = orig_len(&data, self.link.header_len());
        match &mut self.inner {
            Inner::Pcap(w) => {
                let mut rec = [0u8; 16];
                rec[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_ne_bytes());
                rec[4..8].copy_from_slice(&(((ts_ns % 1_000_000_000) / 1000) as u32).to_ne_bytes());
                rec[8..12].copy_from_slice(&(data.len() as u32).to_ne_bytes());
                rec[12..16].copy_from_slice(&orig_len.to_ne_bytes());
                w.write_all(&rec)?;
                w.write_all(&data)?;
            }
            Inner::Ng(w) => {
                // pcap-file writes the Duration's nanoseconds as the tick
                // count; the interface says ticks are nanoseconds.
                let p = EnhancedPacketBlock {
                    interface_id: 0,
                    timestamp: Duration::from_nanos(ts_ns),
                    original_len: orig_len,
                    data: data.as_ref().into(),
                    options: vec![],
                };
                w.write_pcapng_block(p).map_err(pcap_io)?;
            }
        }
        self.packets += 1;
        self.bytes += data.len() as u64;
        Ok(())
    }

    /// Write one event as [`RECORD_RING`]'s reader captures it; the packet
    /// time is the event's wall clock, to the microsecond as in its header.
    pub fn write_event(&mut self, ev: &UrbEvent) -> io::Result<()> {
        let (sec, usec) = ev.ts.wall_sec_usec();
        let ts = sec as u64 * 1_000_000_000 + usec as u64 * 1000;
        self.write_packet(ts, &encode_event(ev, RECORD_RING))
    }

    /// Packets written.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Flush what was written so far.
    pub fn flush(&mut self) -> io::Result<()> {
        match &mut self.inner {
            Inner::Pcap(w) => w.flush(),
            Inner::Ng(w) => w.get_mut().flush(),
        }
    }

    /// Flush and hand back the writer.
    pub fn finish(self) -> io::Result<W> {
        let mut w = match self.inner {
            Inner::Pcap(w) => w,
            Inner::Ng(w) => w.into_inner(),
        };
        w.flush()?;
        Ok(w)
    }
}

/// The original length libpcap reports: header, descriptors and the URB
/// length (never less than what was captured).
fn orig_len(pkt: &[u8], hl: usize) -> u32 {
    if pkt.len() < hl {
        return pkt.len() as u32;
    }
    let u = |o: usize| u32::from_ne_bytes(pkt[o..o + 4].try_into().unwrap()) as u64;
    let ndesc = if hl == PKT_SZ_API1 { u(60).min(128) } else { 0 };
    let want = hl as u64 + ndesc * 16 + u(32);
    want.max(pkt.len() as u64).min(u32::MAX as u64) as u32
}

/// Open `path` for a new capture, as root may be asked to: never through a
/// symlink (O_NOFOLLOW on the last component, ELOOP), never blocking on a
/// FIFO nobody reads (ENXIO), and only a regular file (truncated) or a
/// character device such as /dev/null; anything else is refused (EINVAL)
/// and left untouched.
pub fn create_output(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    let t = f.metadata()?.file_type();
    if t.is_file() {
        f.set_len(0)?;
    } else if !t.is_char_device() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file or a character device",
        ));
    }
    Ok(f)
}

/// Write `events` to a new capture file at `path`. Returns the packet count.
pub fn write_events(
    path: &Path,
    events: &[UrbEvent],
    format: Format,
    link: LinkType,
) -> io::Result<u64> {
    let at = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let f = create_output(path).map_err(at)?;
    let iface = events
        .first()
        .map(|e| format!("usbmon{}", e.bus))
        .unwrap_or_else(|| "usbmon0".into());
    let mut w = CaptureWriter::new(BufWriter::new(f), format, link, &iface).map_err(at)?;
    for ev in events {
        w.write_event(ev).map_err(at)?;
    }
    let n = w.packets();
    w.finish()
        .map_err(at)?
        .into_inner()
        .map_err(|e| at(e.into_error()))?;
    Ok(n)
}

/// Why a recording failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// No such usbmon bus.
    #[error("no usbmon bus {0}")]
    NoBus(u16),
    /// The file could not be created or written (disk full, closed pipe...).
    #[error("recording to {path}: {source} (after {packets} packets)")]
    Io {
        /// The output.
        path: String,
        /// Why.
        source: io::Error,
        /// Packets written before the error.
        packets: u64,
    },
}

/// Counters of a recording.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordStats {
    /// Packets written.
    pub packets: u64,
    /// Packet bytes written.
    pub bytes: u64,
    /// Events dropped because the writer fell behind (or had failed).
    pub dropped: u64,
}

enum Msg {
    Packet(u64, Vec<u8>),
    Stop,
}

struct Shared {
    tx: Sender<Msg>,
    failed: AtomicBool,
    dropped: AtomicU64,
    packets: AtomicU64,
    bytes: AtomicU64,
    error: Mutex<Option<String>>,
}

struct RecReader(Arc<Shared>);

impl MonReader for RecReader {
    fn event(&self, ev: &Arc<UrbEvent>) {
        let s = &self.0;
        if s.failed.load(Ordering::Relaxed) {
            s.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let (sec, usec) = ev.ts.wall_sec_usec();
        let ts = sec as u64 * 1_000_000_000 + usec as u64 * 1000;
        match s
            .tx
            .try_send(Msg::Packet(ts, encode_event(ev, RECORD_RING)))
        {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                s.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A recording of one bus (0: all buses) from inside the daemon. Never slows
/// the bus: packets go to a writer thread through a bounded queue, and are
/// counted as dropped when it is full. A write error (disk full, closed
/// pipe) is logged once, stops the recording's writes and is returned by
/// [`Recorder::stop`]; nothing else is affected.
pub struct Recorder {
    shared: Arc<Shared>,
    reg: Option<Registration>,
    thread: Option<JoinHandle<io::Result<()>>>,
    path: String,
}

impl Recorder {
    /// Record bus `bus` of `usbmon` to a new file at `path`.
    pub fn start(
        usbmon: &UsbMon,
        bus: u16,
        path: &Path,
        format: Format,
    ) -> Result<Recorder, RecordError> {
        let io_err = |source| RecordError::Io {
            path: path.display().to_string(),
            source,
            packets: 0,
        };
        if usbmon.bus(bus).is_none() {
            return Err(RecordError::NoBus(bus));
        }
        let f = create_output(path).map_err(io_err)?;
        Self::start_with_writer(
            usbmon,
            bus,
            Box::new(f),
            &path.display().to_string(),
            format,
        )
    }

    /// Record to any writer (buffered here); `name` names it in errors.
    pub fn start_with_writer(
        usbmon: &UsbMon,
        bus: u16,
        out: Box<dyn Write + Send>,
        name: &str,
        format: Format,
    ) -> Result<Recorder, RecordError> {
        let io_err = |source| RecordError::Io {
            path: name.to_string(),
            source,
            packets: 0,
        };
        if usbmon.bus(bus).is_none() {
            return Err(RecordError::NoBus(bus));
        }
        let mut w = CaptureWriter::new(
            BufWriter::new(out),
            format,
            LinkType::Mmapped,
            &format!("usbmon{bus}"),
        )
        .map_err(io_err)?;
        // Bring a full disk or a closed pipe to light now.
        w.flush().map_err(io_err)?;
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let shared = Arc::new(Shared {
            tx,
            failed: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            error: Mutex::new(None),
        });
        let s2 = shared.clone();
        let name2 = name.to_string();
        let thread = std::thread::Builder::new()
            .name(format!("record-bus{bus}"))
            .spawn(move || writer_thread(w, rx, &s2, &name2))
            .map_err(io_err)?;
        let reg = usbmon
            .attach(bus, Arc::new(RecReader(shared.clone())))
            .ok_or(RecordError::NoBus(bus))?;
        Ok(Recorder {
            shared,
            reg: Some(reg),
            thread: Some(thread),
            path: name.to_string(),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> RecordStats {
        RecordStats {
            packets: self.shared.packets.load(Ordering::Relaxed),
            bytes: self.shared.bytes.load(Ordering::Relaxed),
            dropped: self.shared.dropped.load(Ordering::Relaxed),
        }
    }

    /// The write error, if the recording failed.
    pub fn error(&self) -> Option<String> {
        self.shared.error.lock_ok().clone()
    }

    /// Detach, write what is queued, flush and close. Returns the counters,
    /// or the first write error.
    pub fn stop(mut self) -> Result<RecordStats, RecordError> {
        self.finish()
    }

    fn finish(&mut self) -> Result<RecordStats, RecordError> {
        self.reg.take();
        let Some(t) = self.thread.take() else {
            return Ok(self.stats());
        };
        let _ = self.shared.tx.send(Msg::Stop);
        let r = t
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("writer thread panicked")));
        let stats = self.stats();
        r.map(|()| stats.clone()).map_err(|source| RecordError::Io {
            path: self.path.clone(),
            source,
            packets: stats.packets,
        })
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn writer_thread<W: Write>(
    mut w: CaptureWriter<W>,
    rx: Receiver<Msg>,
    s: &Shared,
    name: &str,
) -> io::Result<()> {
    let mut result = Ok(());
    for msg in rx.iter() {
        let (ts, pkt) = match msg {
            Msg::Packet(ts, pkt) => (ts, pkt),
            Msg::Stop => break,
        };
        if result.is_err() {
            continue;
        }
        match w.write_packet(ts, &pkt) {
            Ok(()) => {
                s.packets.fetch_add(1, Ordering::Relaxed);
                s.bytes.fetch_add(pkt.len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                result = Err(e);
            }
        }
        if let Err(e) = &result {
            fail(s, name, e);
        }
    }
    if result.is_ok() {
        result = w.finish().map(|_| ());
        if let Err(e) = &result {
            fail(s, name, e);
        }
    }
    result
}

fn fail(s: &Shared, name: &str, e: &io::Error) {
    s.failed.store(true, Ordering::Relaxed);
    let msg = format!(
        "recording to {name} stopped: {e} (after {} packets)",
        s.packets.load(Ordering::Relaxed)
    );
    tracing::error!("{msg}");
    *s.error.lock_ok() = Some(msg);
}

/// Set by SIGINT/SIGTERM while [`record_from_device`] runs.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// `struct mon_bin_get`.
#[repr(C)]
struct MonBinGet {
    hdr: *mut u8,
    data: *mut u8,
    alloc: libc::size_t,
}

/// Record `dev_path` (a `dev/usbmonN` file of a mount, or a real
/// `/dev/usbmonN`) to `out` (`-`: standard output, e.g. into
/// `wireshark -k -i -`) until `duration` has passed, or until SIGINT or
/// SIGTERM (handled while this runs). Works from any process: it reads with
/// `MON_IOCX_GETX` (64-byte headers) after `poll`, with a 1200 KiB ring.
/// Returns the number of packets written; drops reported by the device are
/// logged.
pub fn record_from_device(
    dev_path: &Path,
    out: &Path,
    duration: Option<Duration>,
    format: Format,
) -> anyhow::Result<u64> {
    use anyhow::Context;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;

    let dev = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(dev_path)
        .with_context(|| format!("opening {}", dev_path.display()))?;
    let fd = dev.as_raw_fd();
    // SAFETY: a by-value ioctl on our own descriptor.
    unsafe { libc::ioctl(fd, ioc::T_RING_SIZE as _, RECORD_RING as libc::c_ulong) };
    let bus = dev_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("usbmon"))
        .unwrap_or("0")
        .to_string();
    let f: Box<dyn Write> = if out == Path::new("-") {
        Box::new(io::stdout())
    } else {
        Box::new(create_output(out).with_context(|| format!("creating {}", out.display()))?)
    };
    let mut w = CaptureWriter::new(
        BufWriter::new(f),
        format,
        LinkType::Mmapped,
        &format!("usbmon{bus}"),
    )
    .with_context(|| format!("writing {}", out.display()))?;

    INTERRUPTED.store(false, Ordering::SeqCst);
    let mut old = [
        // SAFETY: zeroed sigaction structs are valid "empty" values.
        unsafe { std::mem::zeroed::<libc::sigaction>() },
        unsafe { std::mem::zeroed::<libc::sigaction>() },
    ];
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, &mut old[0]);
        libc::sigaction(libc::SIGTERM, &sa, &mut old[1]);
    }
    let result = (|| -> anyhow::Result<()> {
        let deadline = duration.map(|d| Instant::now() + d);
        let mut hdr = [0u8; PKT_SZ_API1];
        let mut data = vec![0u8; RECORD_RING / 5 + 128 * 16];
        loop {
            if INTERRUPTED.load(Ordering::SeqCst) {
                return Ok(());
            }
            let wait_ms = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(());
                    }
                    left.as_millis().min(200) as i32
                }
                None => 200,
            };
            let mut pfd = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut pfd, 1, wait_ms.max(1)) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return Err(e).context("poll");
            }
            if n == 0 {
                continue;
            }
            loop {
                let mut get = MonBinGet {
                    hdr: hdr.as_mut_ptr(),
                    data: data.as_mut_ptr(),
                    alloc: data.len(),
                };
                // SAFETY: the kernel (or monfs) writes at most 64 bytes to
                // hdr and `alloc` bytes to data, both ours.
                let r = unsafe { libc::ioctl(fd, ioc::GETX as _, &mut get as *mut MonBinGet) };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    match e.raw_os_error() {
                        Some(libc::EAGAIN) => break,
                        Some(libc::EINTR) => continue,
                        _ => {
                            return Err(e)
                                .context(format!("MON_IOCX_GETX on {}", dev_path.display()))
                        }
                    }
                }
                let len_cap = u32::from_ne_bytes(hdr[36..40].try_into().unwrap()) as usize;
                let n = len_cap.min(data.len());
                let sec = i64::from_ne_bytes(hdr[16..24].try_into().unwrap());
                let usec = i32::from_ne_bytes(hdr[24..28].try_into().unwrap());
                let ts = (sec.max(0) as u64) * 1_000_000_000 + (usec.max(0) as u64) * 1000;
                let mut pkt = Vec::with_capacity(PKT_SZ_API1 + n);
                pkt.extend_from_slice(&hdr);
                pkt.extend_from_slice(&data[..n]);
                w.write_packet(ts, &pkt)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
            // Readers of a pipe (wireshark -k -i -) see each batch at once.
            w.flush()
                .with_context(|| format!("writing {}", out.display()))?;
        }
    })();
    // SAFETY: restoring the handlers saved above.
    unsafe {
        libc::sigaction(libc::SIGINT, &old[0], std::ptr::null_mut());
        libc::sigaction(libc::SIGTERM, &old[1], std::ptr::null_mut());
    }
    let mut stats = [0u32; 2];
    // SAFETY: MON_IOCG_STATS writes 8 bytes into `stats`.
    if unsafe { libc::ioctl(fd, ioc::STATS as _, stats.as_mut_ptr()) } == 0 && stats[1] != 0 {
        tracing::warn!(
            "{}: {} events dropped by the device",
            dev_path.display(),
            stats[1]
        );
    }
    result?;
    let n = w.packets();
    w.finish()
        .and_then(|b| b.into_inner().map_err(|e| e.into_error()))
        .and_then(|mut f| f.flush())
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_are_never_reached_through_symlinks_or_fifos() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let link = d.path().join("out.pcap");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let e = create_output(&link).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo on a path of our temp dir.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert_eq!(
            create_output(&fifo).unwrap_err().raw_os_error(),
            Some(libc::ENXIO)
        );
        // A regular file is truncated; /dev/null is fine.
        let f = create_output(&victim).unwrap();
        drop(f);
        assert_eq!(std::fs::read(&victim).unwrap(), b"");
        create_output(Path::new("/dev/null")).unwrap();
        assert!(create_output(d.path()).is_err());
    }
    use crate::sim::usb::replay::{read_records, Capture};
    use crate::usbmon::event::UrbSink;

    fn events(bus: u16) -> Vec<UrbEvent> {
        crate::sim::usb::replay::sample_events(bus)
    }

    #[test]
    fn recorder_writes_what_the_bus_produces() {
        let mon = UsbMon::new(&[1, 2]);
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("r.pcapng");
        let rec = Recorder::start(&mon, 1, &p, Format::PcapNg).unwrap();
        let evs = events(1);
        for e in &evs {
            mon.urb_event(e.clone());
            let mut other = e.clone();
            other.bus = 2;
            mon.urb_event(other);
        }
        let st = rec.stop().unwrap();
        assert_eq!(st.packets, evs.len() as u64);
        assert_eq!(st.dropped, 0);
        let (_, recs) = read_records(&p).unwrap();
        assert_eq!(recs.len(), evs.len());
        for (r, e) in recs.iter().zip(&evs) {
            assert_eq!(r.linktype, 220);
            assert_eq!(r.data, encode_event(e, RECORD_RING));
        }
        let cap = Capture::load(&p).unwrap();
        assert_eq!(cap.events.len(), evs.len());
        assert!(matches!(
            Recorder::start(&mon, 9, &p, Format::Pcap),
            Err(RecordError::NoBus(9))
        ));
    }

    /// Fails with ENOSPC after `left` bytes.
    struct Full {
        left: usize,
    }
    impl Write for Full {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.left == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = b.len().min(self.left);
            self.left -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    struct Count(AtomicU64);
    impl MonReader for Count {
        fn event(&self, _: &Arc<UrbEvent>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_full_disk_fails_the_recording_only() {
        let mon = UsbMon::new(&[1]);
        let other = Arc::new(Count(AtomicU64::new(0)));
        let _reg = mon.attach(1, other.clone()).unwrap();
        let rec = Recorder::start_with_writer(
            &mon,
            1,
            Box::new(Full { left: 20_000 }),
            "disk.pcapng",
            Format::PcapNg,
        )
        .unwrap();
        let evs = events(1);
        for _ in 0..200 {
            for e in &evs {
                mon.urb_event(e.clone());
            }
        }
        assert_eq!(other.0.load(Ordering::Relaxed), 200 * evs.len() as u64);
        let err = rec.stop().unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("recording to disk.pcapng: No space left on device"),
            "{msg}"
        );
        // The header fails at once on a device that is full from the start.
        let e = Recorder::start(&mon, 1, Path::new("/dev/full"), Format::Pcap)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("/dev/full") && e.contains("No space left"),
            "{e}"
        );
        mon.urb_event(evs[0].clone());
        assert_eq!(other.0.load(Ordering::Relaxed), 200 * evs.len() as u64 + 1);
        assert_eq!(
            mon.bus(1).unwrap().nreaders(),
            1,
            "the failed ones detached"
        );
    }

    #[test]
    fn format_names() {
        assert_eq!(Format::from_path(Path::new("a.PCAP")), Format::Pcap);
        assert_eq!(Format::from_path(Path::new("a.pcapng")), Format::PcapNg);
        assert_eq!(Format::from_path(Path::new("a")), Format::PcapNg);
        assert_eq!("pcap".parse::<Format>(), Ok(Format::Pcap));
        assert!("x".parse::<Format>().is_err());
    }
}
