//! The text interface (`Nt`, `Nu`), like the kernel's `mon_text.c`.
//!
//! Each open is an independent reader with a bounded queue. A read returns at
//! most the rest of the current line; the next event is taken only when the
//! line was fully read.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex, OnceLock};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use super::event::{DataCapture, EventKind, UrbEvent, XferType};
use super::{MonReader, Registration, UsbMon};
use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;
use crate::base::vfs::{Caller, FileNode, OpenFile, OpenFlags, Waker, POLL_READABLE};

/// Queue limit per text reader: `4 * PAGE_SIZE / sizeof(struct mon_event_text)`
/// with 4 KiB pages and the 176-byte x86_64 struct.
pub const EVENT_MAX: usize = 4 * 4096 / 176;
/// At most this many data bytes are printed.
pub const DATA_MAX: usize = 32;
/// At most this many ISO descriptors are printed.
pub const ISODESC_MAX: usize = 5;
/// The kernel formats into a 250-byte buffer with truncating printf.
pub const PRINTF_DFL: usize = 250;

/// Which text file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextFormat {
    /// `Nt`, the old format.
    T,
    /// `Nu`, with the bus number, ISO descriptors and intervals.
    U,
}

/// The setup flag: 0 means captured, `'-'` not applicable, `'Z'` NULL pointer.
fn setup_flag(ev: &UrbEvent) -> u8 {
    if ev.xfer != XferType::Control || ev.kind != EventKind::Submit {
        b'-'
    } else if ev.setup.is_none() {
        b'Z'
    } else {
        0
    }
}

/// The data flag, following `mon_text_get_data` (E events: `'E'`).
fn data_flag(ev: &UrbEvent, len: i64) -> u8 {
    if ev.kind == EventKind::Error {
        return b'E';
    }
    if len <= 0 {
        return b'L';
    }
    if ev.dir_in {
        if ev.kind != EventKind::Complete {
            return b'<';
        }
    } else if ev.kind != EventKind::Submit {
        return b'>';
    }
    if ev.data_capture == DataCapture::Unmapped {
        return b'D';
    }
    if ev.data.is_none() {
        return b'Z';
    }
    0
}

/// The length the text interface prints: ISO completions with packets print
/// the transfer buffer length (ISO input is sparse).
fn text_length(ev: &UrbEvent) -> i64 {
    if ev.kind == EventKind::Complete && ev.xfer == XferType::Iso && !ev.iso.is_empty() {
        ev.transfer_buffer_length as i64
    } else {
        ev.length() as i64
    }
}

fn statset(out: &mut String, ev: &UrbEvent) {
    match (setup_flag(ev), ev.setup) {
        (0, Some(s)) => {
            let _ = write!(
                out,
                " s {:02x} {:02x} {:04x} {:04x} {:04x}",
                s[0],
                s[1],
                u16::from_le_bytes([s[2], s[3]]),
                u16::from_le_bytes([s[4], s[5]]),
                u16::from_le_bytes([s[6], s[7]])
            );
        }
        (b'-', _) => {
            let _ = write!(out, " {}", ev.status);
        }
        (f, _) => {
            let _ = write!(out, " {} __ __ ____ ____ ____", f as char);
        }
    }
}

/// Format one event as a line of the given file, newline included, clipped as
/// the kernel's 250-byte buffer clips it.
pub fn format_line(ev: &UrbEvent, fmt: TextFormat) -> String {
    let mut out = String::with_capacity(128);
    let dir = if ev.dir_in { 'i' } else { 'o' };
    let _ = match fmt {
        TextFormat::T => write!(
            out,
            "{:x} {} {} {}{}:{:03}:{:02}",
            ev.id,
            ev.ts.text_usec(),
            ev.kind.letter() as char,
            ev.xfer.letter() as char,
            dir,
            ev.devnum,
            ev.epnum
        ),
        TextFormat::U => write!(
            out,
            "{:x} {} {} {}{}:{}:{:03}:{}",
            ev.id,
            ev.ts.text_usec(),
            ev.kind.letter() as char,
            ev.xfer.letter() as char,
            dir,
            ev.bus,
            ev.devnum,
            ev.epnum
        ),
    };
    if fmt == TextFormat::T || ev.kind == EventKind::Error {
        statset(&mut out, ev);
    } else {
        match ev.xfer {
            XferType::Iso => {
                if ev.kind == EventKind::Submit {
                    let _ = write!(out, " {}:{}:{}", ev.status, ev.interval, ev.start_frame);
                } else {
                    let _ = write!(
                        out,
                        " {}:{}:{}:{}",
                        ev.status, ev.interval, ev.start_frame, ev.error_count
                    );
                }
                let _ = write!(out, " {}", ev.iso.len());
                for d in ev.iso.iter().take(ISODESC_MAX) {
                    let _ = write!(out, " {}:{}:{}", d.status, d.offset, d.length);
                }
            }
            XferType::Interrupt => {
                let _ = write!(out, " {}:{}", ev.status, ev.interval);
            }
            _ => statset(&mut out, ev),
        }
    }
    let len = text_length(ev);
    let _ = write!(out, " {len}");
    if len > 0 {
        match data_flag(ev, len) {
            0 => {
                out.push_str(" =");
                let n = (len as usize).min(DATA_MAX);
                let data = ev.data.as_deref().unwrap_or(&[]);
                const HEX: &[u8; 16] = b"0123456789abcdef";
                for i in 0..n {
                    if i % 4 == 0 {
                        out.push(' ');
                    }
                    let b = data.get(i).copied().unwrap_or(0);
                    out.push(HEX[(b >> 4) as usize] as char);
                    out.push(HEX[(b & 15) as usize] as char);
                }
                out.push('\n');
            }
            f => {
                let _ = writeln!(out, " {}", f as char);
            }
        }
    } else {
        out.push('\n');
    }
    if out.len() > PRINTF_DFL - 1 {
        out.truncate(PRINTF_DFL - 1);
    }
    out
}

/// The line being read and how much of it was returned.
struct Line {
    text: Vec<u8>,
    pos: usize,
}

/// One open of `Nt` or `Nu`. The queue is a bounded lock-free channel, so
/// the producer never waits for a reader.
pub struct TextReader {
    fmt: TextFormat,
    tx: Sender<Arc<UrbEvent>>,
    rx: Receiver<Arc<UrbEvent>>,
    line: Mutex<Line>,
    waker: OnceLock<Waker>,
    bus: Arc<super::MonBus>,
}

impl MonReader for TextReader {
    fn event(&self, ev: &Arc<UrbEvent>) {
        match self.tx.try_send(Arc::clone(ev)) {
            Ok(()) => {
                if let Some(w) = self.waker.get() {
                    w();
                }
            }
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                self.bus.count_text_lost()
            }
        }
    }
}

impl TextReader {
    /// Take up to `size` bytes of the current line, formatting the next event
    /// when the previous line is used up. EAGAIN when nothing is queued.
    pub fn read_line(&self, size: usize) -> SysResult<Vec<u8>> {
        let mut st = self.line.lock_ok();
        if st.pos >= st.text.len() {
            let ev = self.rx.try_recv().map_err(|_| Errno::EAGAIN)?;
            st.text = format_line(&ev, self.fmt).into_bytes();
            st.pos = 0;
        }
        let n = size.min(st.text.len() - st.pos);
        let out = st.text[st.pos..st.pos + n].to_vec();
        st.pos += n;
        Ok(out)
    }
}

struct TextFile {
    reader: Arc<TextReader>,
    _reg: Registration,
    /// Its place among [`crate::base::budget::USBMON_READERS`].
    _slot: crate::base::budget::Grant,
}

impl OpenFile for TextFile {
    fn read(&self, _offset: u64, size: u32) -> SysResult<Vec<u8>> {
        self.reader.read_line(size as usize)
    }
    fn set_waker(&self, waker: Waker) {
        let _ = self.reader.waker.set(waker);
    }
    fn poll(&self) -> u32 {
        // mon_text has no poll method: the VFS reports always readable.
        POLL_READABLE
    }
    fn is_stream(&self) -> bool {
        true
    }
}

/// The `Nt`/`Nu` file node.
pub struct TextNode {
    mon: Arc<UsbMon>,
    bus: u16,
    fmt: TextFormat,
}

impl TextNode {
    /// The node for `bus` in format `fmt`.
    pub fn new(mon: Arc<UsbMon>, bus: u16, fmt: TextFormat) -> Self {
        TextNode { mon, bus, fmt }
    }
}

impl FileNode for TextNode {
    fn open(&self, flags: OpenFlags, _caller: &Caller) -> SysResult<Arc<dyn OpenFile>> {
        if flags.writable() {
            // mon_text has no write method.
            return Err(Errno::EACCES);
        }
        let bus = self.mon.bus(self.bus).ok_or(Errno::ENODEV)?;
        let slot = crate::base::budget::USBMON_READERS.take(1)?;
        let (tx, rx) = crossbeam_channel::bounded(EVENT_MAX);
        let reader = Arc::new(TextReader {
            fmt: self.fmt,
            tx,
            rx,
            line: Mutex::new(Line {
                text: Vec::new(),
                pos: 0,
            }),
            waker: OnceLock::new(),
            bus,
        });
        let reg = self
            .mon
            .attach(self.bus, reader.clone())
            .ok_or(Errno::ENODEV)?;
        Ok(Arc::new(TextFile {
            reader,
            _reg: reg,
            _slot: slot,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::clock::Timestamp;
    use crate::usbmon::event::{IsoDesc, UrbSink, EINPROGRESS};

    fn ts(usec: u64) -> Timestamp {
        Timestamp {
            mono_ns: usec * 1000,
            wall_ns: 0,
        }
    }

    fn base(kind: EventKind, xfer: XferType) -> UrbEvent {
        UrbEvent {
            id: 0xd5ea89a0,
            kind,
            xfer,
            bus: 1,
            devnum: 1,
            epnum: 0,
            dir_in: true,
            ts: ts(3575914555),
            status: if kind == EventKind::Submit {
                EINPROGRESS
            } else {
                0
            },
            transfer_buffer_length: 0,
            actual_length: 0,
            interval: 0,
            start_frame: 0,
            error_count: 0,
            xfer_flags: 0,
            setup: None,
            iso: vec![],
            data: Some(Arc::from(&[][..])),
            data_capture: Default::default(),
        }
    }

    /// The documentation's hub status example.
    #[test]
    fn doc_control_example() {
        let mut s = base(EventKind::Submit, XferType::Control);
        s.setup = Some([0xa3, 0x00, 0x00, 0x00, 0x03, 0x00, 0x04, 0x00]);
        s.transfer_buffer_length = 4;
        assert_eq!(
            format_line(&s, TextFormat::U),
            "d5ea89a0 3575914555 S Ci:1:001:0 s a3 00 0000 0003 0004 4 <\n"
        );
        assert_eq!(
            format_line(&s, TextFormat::T),
            "d5ea89a0 3575914555 S Ci:001:00 s a3 00 0000 0003 0004 4 <\n"
        );
        let mut c = base(EventKind::Complete, XferType::Control);
        c.ts = ts(3575914560);
        c.transfer_buffer_length = 4;
        c.actual_length = 4;
        c.data = Some(Arc::from(&[0x01, 0x05, 0x00, 0x00][..]));
        assert_eq!(
            format_line(&c, TextFormat::U),
            "d5ea89a0 3575914560 C Ci:1:001:0 0 4 = 01050000\n"
        );
    }

    /// The documentation's bulk OUT example: 31 data bytes in groups of 4. (Its
    /// timestamps, 4128379752, come from kernels whose clock overflowed; modern
    /// ones wrap at 4095999999, so 1000000000 less is used here.)
    #[test]
    fn doc_bulk_example() {
        let cbw: [u8; 31] = [
            0x55, 0x53, 0x42, 0x43, 0xad, 0, 0, 0, 0, 0x80, 0, 0, 0x80, 0x01, 0x0a, 0x28, 0x20, 0,
            0, 0, 0x20, 0, 0, 0x40, 0, 0, 0, 0, 0, 0, 0,
        ];
        let mut s = base(EventKind::Submit, XferType::Bulk);
        s.id = 0xdd65f0e8;
        s.ts = ts(3128379752);
        s.devnum = 5;
        s.epnum = 2;
        s.dir_in = false;
        s.transfer_buffer_length = 31;
        s.data = Some(Arc::from(&cbw[..]));
        assert_eq!(
            format_line(&s, TextFormat::U),
            "dd65f0e8 3128379752 S Bo:1:005:2 -115 31 = 55534243 ad000000 00800000 80010a28 20000000 20000040 00000000 000000\n"
        );
        let mut c = s.clone();
        c.kind = EventKind::Complete;
        c.ts = ts(3128379808);
        c.status = 0;
        c.actual_length = 31;
        assert_eq!(
            format_line(&c, TextFormat::U),
            "dd65f0e8 3128379808 C Bo:1:005:2 0 31 >\n"
        );
    }

    /// Measured on 6.12: ISO OUT submit and completion.
    #[test]
    fn measured_iso_out() {
        let mut s = base(EventKind::Submit, XferType::Iso);
        s.id = 0xffff888009845d00;
        s.ts = ts(8818751);
        s.devnum = 5;
        s.epnum = 1;
        s.dir_in = false;
        s.interval = 1;
        s.transfer_buffer_length = 768;
        s.iso = (0..4)
            .map(|i| IsoDesc {
                status: -18,
                offset: i * 192,
                length: 192,
            })
            .collect();
        s.data = Some((0u8..=255).collect::<Vec<_>>().into());
        assert_eq!(
            format_line(&s, TextFormat::U),
            "ffff888009845d00 8818751 S Zo:1:005:1 -115:1:0 4 -18:0:192 -18:192:192 -18:384:192 -18:576:192 768 = 00010203 04050607 08090a0b 0c0d0e0f 10111213 14151617 18191a1b 1c1d1e1f\n"
        );
        assert_eq!(
            format_line(&s, TextFormat::T),
            "ffff888009845d00 8818751 S Zo:005:01 -115 768 = 00010203 04050607 08090a0b 0c0d0e0f 10111213 14151617 18191a1b 1c1d1e1f\n"
        );
        let mut c = s.clone();
        c.kind = EventKind::Complete;
        c.ts = ts(8824927);
        c.status = 0;
        c.start_frame = 834;
        c.actual_length = 768;
        for d in &mut c.iso {
            d.status = 0;
        }
        assert_eq!(
            format_line(&c, TextFormat::U),
            "ffff888009845d00 8824927 C Zo:1:005:1 0:1:834:0 4 0:0:192 0:192:192 0:384:192 0:576:192 768 >\n"
        );
    }

    #[test]
    fn interrupt_error_and_null_setup() {
        let mut s = base(EventKind::Submit, XferType::Interrupt);
        s.epnum = 1;
        s.interval = 2048;
        s.transfer_buffer_length = 4;
        assert_eq!(
            format_line(&s, TextFormat::U),
            "d5ea89a0 3575914555 S Ii:1:001:1 -115:2048 4 <\n"
        );
        assert_eq!(
            format_line(&s, TextFormat::T),
            "d5ea89a0 3575914555 S Ii:001:01 -115 4 <\n"
        );
        let mut e = base(EventKind::Error, XferType::Bulk);
        e.devnum = 2;
        e.epnum = 2;
        e.dir_in = false;
        e.status = -19;
        e.transfer_buffer_length = 512;
        assert_eq!(
            format_line(&e, TextFormat::U),
            "d5ea89a0 3575914555 E Bo:1:002:2 -19 0\n"
        );
        let mut z = base(EventKind::Submit, XferType::Control);
        z.transfer_buffer_length = 8;
        assert_eq!(
            format_line(&z, TextFormat::U),
            "d5ea89a0 3575914555 S Ci:1:001:0 Z __ __ ____ ____ ____ 8 <\n"
        );
        let mut nul = base(EventKind::Complete, XferType::Bulk);
        nul.actual_length = 8;
        nul.data = None;
        assert_eq!(
            format_line(&nul, TextFormat::U),
            "d5ea89a0 3575914555 C Bi:1:001:0 0 8 Z\n"
        );
    }

    #[test]
    fn at_most_five_iso_descriptors_and_count_beyond() {
        let mut s = base(EventKind::Submit, XferType::Iso);
        s.interval = 1;
        s.transfer_buffer_length = 8 * 100;
        s.iso = (0..8)
            .map(|i| IsoDesc {
                status: -18,
                offset: i * 100,
                length: 100,
            })
            .collect();
        let line = format_line(&s, TextFormat::U);
        assert!(
            line.contains(" 8 -18:0:100 -18:100:100 -18:200:100 -18:300:100 -18:400:100 800 <"),
            "{line}"
        );
    }

    /// Events of several buses handed over out of time order come out in
    /// the order given, none stamped earlier than the one before.
    #[test]
    fn ordered_sink_never_stamps_back() {
        struct Collect(std::sync::Mutex<Vec<crate::base::clock::Timestamp>>);
        impl UrbSink for Collect {
            fn urb_event(&self, ev: UrbEvent) {
                self.0.lock().unwrap().push(ev.ts);
            }
        }
        let c = Arc::new(Collect(Default::default()));
        let o = crate::usbmon::event::Ordered::new(c.clone());
        for (bus, t) in [(1, 10), (2, 5), (1, 20), (2, 15), (2, 30)] {
            let mut e = base(EventKind::Submit, XferType::Bulk);
            e.bus = bus;
            e.ts = ts(t);
            o.urb_event(e);
        }
        let got: Vec<u64> = c.0.lock().unwrap().iter().map(|t| t.mono_ns).collect();
        let want: Vec<u64> = [10, 10, 20, 20, 30]
            .iter()
            .map(|&t| ts(t).mono_ns)
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn partial_reads_continue_the_line_and_queue_is_bounded() {
        let mon = Arc::new(UsbMon::new(&[1]));
        let node = TextNode::new(mon.clone(), 1, TextFormat::U);
        let f = node
            .open(
                OpenFlags {
                    flags: libc::O_RDONLY,
                },
                &Caller::default(),
            )
            .unwrap();
        assert_eq!(f.read(0, 4096).err(), Some(Errno::EAGAIN));
        let mut c = base(EventKind::Complete, XferType::Control);
        c.actual_length = 4;
        c.data = Some(Arc::from(&[1, 5, 0, 0][..]));
        for _ in 0..EVENT_MAX + 7 {
            mon.urb_event(c.clone());
        }
        assert_eq!(mon.bus(1).unwrap().text_lost(), 7);
        assert_eq!(mon.bus(1).unwrap().events(), EVENT_MAX as u32 + 7);
        let a = f.read(0, 10).unwrap();
        let b = f.read(0, 4096).unwrap();
        assert_eq!(
            [a, b].concat(),
            b"d5ea89a0 3575914555 C Ci:1:001:0 0 4 = 01050000\n"
        );
        let mut n = 1;
        while f.read(0, 4096).is_ok() {
            n += 1;
        }
        assert_eq!(n, EVENT_MAX);
    }
}
