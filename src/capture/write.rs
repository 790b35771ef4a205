//! Writing capture files: pcapng (or pcap) with linktype 220
//! (`USB_LINUX_MMAPPED`, the 64-byte header) by default, or 189. Packets
//! hold what a reader with libpcap's ring ([`RECORD_RING`]) captures, so a
//! file made from events equals what tcpdump would record of them.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use pcap_file::pcap::PcapHeader;
use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::PcapNgWriter;
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

use crate::usbmon::event::UrbEvent;
use crate::usbmon::header::{encode_event, PKT_SZ_API0, PKT_SZ_API1};

/// The ring size whose capture limits recordings follow: libpcap's default
/// request, 1200 KiB, so at most 245760 data bytes per event.
pub const RECORD_RING: usize = 1_228_800;
/// Snapshot length written in file headers (tcpdump's default), above the
/// largest packet: 64 + 128 * 16 + RECORD_RING / 5.
pub const SNAPLEN: u32 = 262_144;

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

/// A capture format name that is neither `pcapng` nor `pcap`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown capture format {0:?}: pcapng or pcap")]
pub struct UnknownFormat(pub String);

impl FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, UnknownFormat> {
        match s {
            "pcapng" => Ok(Format::PcapNg),
            "pcap" => Ok(Format::Pcap),
            _ => Err(UnknownFormat(s.to_string())),
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
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
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

    #[test]
    fn format_names() {
        assert_eq!(Format::from_path(Path::new("a.PCAP")), Format::Pcap);
        assert_eq!(Format::from_path(Path::new("a.pcapng")), Format::PcapNg);
        assert_eq!(Format::from_path(Path::new("a")), Format::PcapNg);
        assert_eq!("pcap".parse::<Format>(), Ok(Format::Pcap));
        assert!("x".parse::<Format>().is_err());
    }
}
