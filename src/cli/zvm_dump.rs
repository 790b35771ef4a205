//! A monreader decoder: `monfs zvm-dump`. Reads the device the way the driver's
//! documentation tells readers to (buffer a whole data set, a 0-byte read ends
//! it, discard the set on EIO or EFAULT, EOVERFLOW means later data may be
//! missing) and prints data sets, MCEs and records.
//!
//! A saved stream (`--file`) is the concatenation of the bytes read from the
//! device (MCE, record set, MCE, record set, ...); it has no set delimiters,
//! so the whole file decodes as one run of MCEs.

use std::fmt::Write as _;
use std::io::{ErrorKind, Read, Write};
use std::path::Path;

use anyhow::{bail, Context};

use crate::monreader::records::{domain_name, format_tod, Record, FRAME, MCE_EVENT, MCE_SAMPLE};
use crate::sim::zvm::catalog::record_type;

/// A monitor control element.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mce {
    /// Byte 0: record-set type flags (0x80 sample, 0x40 event).
    pub type_byte: u8,
    /// Bytes 1-2: domain bit vector (domain 0 = 0x8000).
    pub domains: u16,
    /// Byte 3 (not examined by the driver).
    pub byte3: u8,
    /// First byte of the record set in the DCSS.
    pub start: u32,
    /// Last byte of the record set (inclusive).
    pub end: u32,
}

impl Mce {
    /// Parse 12 bytes.
    pub fn parse(b: &[u8; 12]) -> Mce {
        Mce {
            type_byte: b[0],
            domains: u16::from_be_bytes([b[1], b[2]]),
            byte3: b[3],
            start: u32::from_be_bytes(b[4..8].try_into().unwrap()),
            end: u32::from_be_bytes(b[8..12].try_into().unwrap()),
        }
    }

    /// Size of the record set, if the addresses make sense.
    pub fn set_len(&self) -> Option<usize> {
        (self.end > self.start).then(|| (self.end - self.start) as usize + 1)
    }

    /// "sample", "event", "sample+event" or the hex byte.
    pub fn type_name(&self) -> String {
        match self.type_byte {
            MCE_SAMPLE => "sample".into(),
            MCE_EVENT => "event".into(),
            b if b == MCE_SAMPLE | MCE_EVENT => "sample+event".into(),
            b => format!("type {b:#04x}"),
        }
    }

    /// Names of the domains in the bit vector.
    pub fn domain_list(&self) -> String {
        let v: Vec<String> = (0..16u8)
            .filter(|d| self.domains & (0x8000 >> d) != 0)
            .map(|d| match domain_name(d) {
                Some(n) => format!("{d} {n}"),
                None => d.to_string(),
            })
            .collect();
        v.join(", ")
    }
}

/// One MCE with its decoded record set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The MCE.
    pub mce: Mce,
    /// The records (end-of-frame records left out), with their DCSS addresses.
    pub records: Vec<(u32, Record)>,
    /// Addresses of the end-of-frame records met.
    pub eofs: Vec<u32>,
    /// Why decoding the set stopped early, if it did.
    pub error: Option<String>,
}

/// Decode the record bytes of one set that starts at DCSS address `start`.
pub fn decode_records(start: u32, bytes: &[u8]) -> (Vec<(u32, Record)>, Vec<u32>, Option<String>) {
    let mut recs = Vec::new();
    let mut eofs = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let addr = start as u64 + pos as u64;
        match Record::parse(&bytes[pos..]) {
            Ok((r, len)) => {
                if r.is_eof() {
                    // Nothing more in this frame.
                    eofs.push(addr as u32);
                    pos += (FRAME as u64 - addr % FRAME as u64) as usize;
                } else {
                    recs.push((addr as u32, r));
                    pos += len;
                }
            }
            Err(e) => return (recs, eofs, Some(format!("at {addr:#010x}: {e}"))),
        }
    }
    (recs, eofs, None)
}

/// Decode the bytes of a data set (MCE, records, MCE, records, ...).
pub fn decode_set(bytes: &[u8]) -> Vec<Section> {
    let mut out = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let Some(m) = bytes.get(pos..pos + 12) else {
            out.push(Section {
                mce: Mce::parse(&[0; 12]),
                records: Vec::new(),
                eofs: Vec::new(),
                error: Some(format!(
                    "{} stray bytes where an MCE should be",
                    bytes.len() - pos
                )),
            });
            break;
        };
        let mce = Mce::parse(m.try_into().unwrap());
        pos += 12;
        let Some(len) = mce.set_len() else {
            out.push(Section {
                mce,
                records: Vec::new(),
                eofs: Vec::new(),
                error: Some("record end is not after record start".into()),
            });
            break;
        };
        let avail = len.min(bytes.len() - pos);
        let (records, eofs, mut error) = decode_records(mce.start, &bytes[pos..pos + avail]);
        if avail < len && error.is_none() {
            error = Some(format!("set truncated: {avail} of {len} bytes"));
        }
        pos += avail;
        out.push(Section {
            mce,
            records,
            eofs,
            error,
        });
    }
    out
}

/// What one read() gave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadResult {
    /// Bytes (empty: the 0-byte read that ends a data set).
    Data(Vec<u8>),
    /// An errno.
    Error(i32),
}

/// What the reader state machine reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A complete data set (after its 0-byte read).
    Set(Vec<Section>),
    /// EIO or EFAULT: this many bytes read since the last 0-byte read were
    /// discarded.
    Discarded {
        /// The errno.
        errno: i32,
        /// Bytes thrown away.
        bytes: usize,
    },
    /// EOVERFLOW: the message limit was reached; data may be missing.
    Overflow,
}

/// The reader rules as a state machine over read() results.
#[derive(Default)]
pub struct SetReader {
    buf: Vec<u8>,
}

impl SetReader {
    /// Feed one read() result.
    pub fn feed(&mut self, r: ReadResult) -> Option<Event> {
        match r {
            ReadResult::Data(d) if d.is_empty() => {
                Some(Event::Set(decode_set(&std::mem::take(&mut self.buf))))
            }
            ReadResult::Data(d) => {
                self.buf.extend_from_slice(&d);
                None
            }
            ReadResult::Error(e) if e == libc::EIO || e == libc::EFAULT => Some(Event::Discarded {
                errno: e,
                bytes: std::mem::take(&mut self.buf).len(),
            }),
            ReadResult::Error(e) if e == libc::EOVERFLOW => Some(Event::Overflow),
            ReadResult::Error(_) => None,
        }
    }

    /// Bytes of the set being read.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

fn hex(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// Format the sections of one set.
pub fn format_sections(sections: &[Section], out: &mut String) {
    for (i, s) in sections.iter().enumerate() {
        let m = &s.mce;
        let _ = writeln!(
            out,
            "  MCE {}: {} domains {:#06x} ({}) records {:#010x}-{:#010x} ({} bytes)",
            i + 1,
            m.type_name(),
            m.domains,
            m.domain_list(),
            m.start,
            m.end,
            m.set_len().unwrap_or(0)
        );
        let mut eofs = s.eofs.iter().peekable();
        for (addr, r) in &s.records {
            while let Some(e) = eofs.next_if(|e| **e < *addr) {
                let _ = writeln!(out, "    {e:#010x}  1.13  MRMTREOF  end of frame");
            }
            let (mn, title) = record_type(r.domain, r.number)
                .map(|t| (t.mnemonic, t.title))
                .unwrap_or(("?", ""));
            let _ = write!(
                out,
                "    {addr:#010x}  {}.{}  {mn}  {}  len {}",
                r.domain,
                r.number,
                format_tod(r.tod),
                r.len()
            );
            match crate::sim::zvm::catalog::describe_payload(r.domain, r.number, &r.data) {
                Some(d) => {
                    let _ = writeln!(out, "  {title}: {d}");
                }
                None => {
                    let _ = writeln!(out, "  {title} data {}", hex(&r.data));
                }
            }
        }
        for e in eofs {
            let _ = writeln!(out, "    {e:#010x}  1.13  MRMTREOF  end of frame");
        }
        if let Some(e) = &s.error {
            let _ = writeln!(out, "    decode error: {e}");
        }
    }
}

/// Where `zvm_dump` reads from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The monreader device: 0-byte reads end data sets; runs until `sets`
    /// sets were read or the path is severed.
    Device,
    /// A saved stream: read to end of file, decode as one run.
    File,
}

/// Options for [`zvm_dump`].
#[derive(Clone, Copy, Debug)]
pub struct DumpOptions {
    /// Device or saved stream.
    pub source: Source,
    /// Read one byte at a time (as the public reader does) instead of 64 KiB.
    pub one_byte: bool,
    /// Stop after this many data sets (device).
    pub max_sets: Option<u64>,
}

/// Decode `input` and print it to `out`.
pub fn zvm_dump(
    input: &mut dyn Read,
    out: &mut dyn Write,
    opts: DumpOptions,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; if opts.one_byte { 1 } else { 65536 }];
    match opts.source {
        Source::File => {
            let mut all = Vec::new();
            loop {
                match input.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => all.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e).context("reading the saved stream"),
                }
            }
            let secs = decode_set(&all);
            let mut s = format!(
                "saved stream: {} bytes, {} MCEs (no set boundaries)\n",
                all.len(),
                secs.len()
            );
            format_sections(&secs, &mut s);
            let n: usize = secs.iter().map(|x| x.records.len()).sum();
            let _ = writeln!(s, "{n} records");
            out.write_all(s.as_bytes())?;
            if secs.iter().any(|x| x.error.is_some()) {
                bail!("the stream did not decode cleanly");
            }
            Ok(())
        }
        Source::Device => {
            let mut rd = SetReader::default();
            let (mut sets, mut records, mut discarded) = (0u64, 0u64, 0u64);
            let mut last_eio = false;
            loop {
                if opts.max_sets.is_some_and(|m| sets >= m) || super::signals::interrupted() {
                    break;
                }
                let r = match input.read(&mut buf) {
                    Ok(n) => ReadResult::Data(buf[..n].to_vec()),
                    Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                    Err(e) => match e.raw_os_error() {
                        Some(errno) => ReadResult::Error(errno),
                        None => return Err(e).context("reading the device"),
                    },
                };
                let eio = matches!(r, ReadResult::Error(e) if e == libc::EIO);
                let had = rd.pending();
                let mut s = String::new();
                match (&r, rd.feed(r.clone())) {
                    (_, Some(Event::Set(secs))) => {
                        sets += 1;
                        let n: usize = secs.iter().map(|x| x.records.len()).sum();
                        records += n as u64;
                        let _ = writeln!(
                            s,
                            "set {sets}: {} MCEs, {had} bytes, {n} records",
                            secs.len()
                        );
                        format_sections(&secs, &mut s);
                    }
                    (_, Some(Event::Discarded { errno, bytes })) => {
                        discarded += 1;
                        let _ = writeln!(
                            s,
                            "{}: discarding {bytes} bytes read since the last 0-byte read",
                            if errno == libc::EIO {
                                "EIO (reply failed or path severed)"
                            } else {
                                "EFAULT"
                            }
                        );
                    }
                    (_, Some(Event::Overflow)) => {
                        let _ = writeln!(
                            s,
                            "EOVERFLOW: message limit reached; later data may be missing"
                        );
                    }
                    (ReadResult::Error(e), None) if *e == libc::EAGAIN => {
                        // Opened non-blocking by someone else's choice: wait a bit.
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    (ReadResult::Error(e), None) => {
                        bail!("read: {}", std::io::Error::from_raw_os_error(*e));
                    }
                    (_, None) => {}
                }
                out.write_all(s.as_bytes())?;
                if eio && last_eio && had == 0 {
                    // EIO with nothing read in between: the path is severed.
                    out.write_all(b"the IUCV path to *MONITOR is severed\n")?;
                    break;
                }
                last_eio = eio;
            }
            writeln!(out, "{sets} sets, {records} records, {discarded} discarded")?;
            Ok(())
        }
    }
}

/// `monfs zvm-dump`: decode the device (default) or a saved stream.
pub fn run(
    device: Option<&Path>,
    file: Option<&Path>,
    one_byte: bool,
    sets: Option<u64>,
) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    if let Some(f) = file {
        let mut inp = std::fs::File::open(f).with_context(|| format!("open {}", f.display()))?;
        return zvm_dump(
            &mut inp,
            &mut out,
            DumpOptions {
                source: Source::File,
                one_byte,
                max_sets: None,
            },
        );
    }
    let dev = device.unwrap_or(Path::new("/dev/monreader"));
    let mut inp = std::fs::File::open(dev).with_context(|| format!("open {}", dev.display()))?;
    // Ctrl-C ends the dump with its summary line, as it ends `monfs record`.
    let _signals = super::signals::CatchInterrupts::install().context("catching SIGINT")?;
    zvm_dump(
        &mut inp,
        &mut out,
        DumpOptions {
            source: Source::Device,
            one_byte,
            max_sets: sets,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::{Clock, VirtualClock};
    use crate::config::zvm::{Pace, ZvmConfig};
    use crate::monreader::{MonReaderDev, PathConfig};
    use crate::sim::rng::Rng;
    use crate::sim::zvm::{Generator, Monitor};

    /// A reader with *MONITOR attached.
    fn pair(cfg: &ZvmConfig, seed: u64, clock: Arc<dyn Clock>) -> (Arc<MonReaderDev>, Monitor) {
        let dev = Arc::new(MonReaderDev::new(PathConfig::from(cfg), clock.clone()));
        let mon = Monitor::new(cfg.clone(), seed, clock, dev.clone());
        (dev, mon)
    }
    use crate::base::vfs::{Caller, OpenFlags};
    use std::sync::Arc;

    /// Property: whatever the simulator produces comes back out of the device
    /// (read in random sizes) and the decoder unchanged, set by set.
    #[test]
    fn simulator_streams_round_trip_through_device_and_decoder() {
        for seed in 0..6u64 {
            let mut rng = Rng::new(seed, 99);
            let cfg = ZvmConfig {
                pace: Pace::Flood,
                flood_window: 1 + rng.below(20) as u16,
                event_rate: [0.5, 3.0, 40.0][seed as usize % 3],
                users: 1 + rng.below(300) as u32,
                cpus: 1 + rng.below(16) as u16,
                devices: 1 + rng.below(64) as u16,
                max_messages: Some(60),
                ..ZvmConfig::default()
            };
            let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new());
            let mut expect = Generator::new(&cfg, seed, clock.clone(), 0);
            let (dev, mon) = pair(&cfg, seed, clock);
            let f = dev
                .node()
                .open(
                    OpenFlags {
                        flags: libc::O_RDONLY | libc::O_NONBLOCK,
                    },
                    &Caller::default(),
                )
                .unwrap();
            let mut rd = SetReader::default();
            let mut got = 0;
            while got < 60 {
                mon.pump();
                let size = match rng.below(4) {
                    0 => 1,
                    1 => rng.range(1, 30) as u32,
                    2 => rng.range(1, 5000) as u32,
                    _ => 65536,
                };
                let r = match f.read(0, size) {
                    Ok(d) => {
                        assert!(d.len() <= size as usize);
                        ReadResult::Data(d)
                    }
                    Err(e) => panic!("seed {seed}: read gave {e:?}"),
                };
                if let Some(ev) = rd.feed(r) {
                    let Event::Set(secs) = ev else {
                        panic!("{ev:?}")
                    };
                    let m = expect.next_message();
                    assert_eq!(secs.len(), m.sets.len(), "seed {seed} message {got}");
                    for (s, want) in secs.iter().zip(&m.sets) {
                        assert_eq!(s.error, None);
                        assert_eq!(s.mce.type_byte, want.type_byte);
                        assert_eq!(s.mce.domains, want.domains);
                        let recs: Vec<Record> = s.records.iter().map(|(_, r)| r.clone()).collect();
                        assert_eq!(recs, want.records, "seed {seed} message {got}");
                    }
                    got += 1;
                }
            }
            assert_eq!(f.read(0, 100), Err(crate::base::errno::Errno::EAGAIN));
            f.release();
        }
    }

    #[test]
    fn saved_stream_decodes_and_prints_names() {
        let cfg = ZvmConfig {
            pace: Pace::Flood,
            max_messages: Some(3),
            ..ZvmConfig::default()
        };
        let clock: Arc<dyn Clock> = Arc::new(VirtualClock::new());
        let (dev, mon) = pair(&cfg, 5, clock);
        let f = dev
            .node()
            .open(
                OpenFlags {
                    flags: libc::O_RDONLY | libc::O_NONBLOCK,
                },
                &Caller::default(),
            )
            .unwrap();
        mon.pump();
        let mut raw = Vec::new();
        while let Ok(d) = f.read(0, 65536) {
            raw.extend_from_slice(&d);
        }
        let mut out = Vec::new();
        let opts = DumpOptions {
            source: Source::File,
            one_byte: false,
            max_sets: None,
        };
        zvm_dump(&mut &raw[..], &mut out, opts).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("MRMTRSYS"), "{text}");
        assert!(text.contains("system=ZVMSIM dcss=MONDCSS"), "{text}");
        assert!(text.contains("2024-01-01 00:00:0"), "{text}");
        assert!(
            text.contains("MCE 1: sample domains 0x4000 (1 Monitor)"),
            "{text}"
        );
        // A truncated stream is reported.
        let mut out = Vec::new();
        assert!(zvm_dump(&mut &raw[..raw.len() - 5], &mut out, opts).is_err());
    }
}
