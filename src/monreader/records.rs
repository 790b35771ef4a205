//! z/VM monitor records as the reader sees them: the 20-byte record header
//! (MRRECHDR), domains, TOD clock values, EBCDIC text, and what one IUCV
//! message describes: record sets, each behind a monitor control element
//! (MCE). This is the interface's ABI, as `usbmon/event.rs` is usbmon's.
//!
//! The header is the z/VM ABI (big-endian): length u16 @0 (header included),
//! zeros u16 @2, domain u8 @4, reserved u8 @5, record number u16 @6, TOD u64
//! @8, reserved u32 @16; record data starts at offset 20.
//!
//! Record *payloads* are not described here: the simulator fills them with
//! its own compact layouts (`crate::sim::zvm::catalog`).

/// Size of the record header (`MRHDR_END`).
pub const HDR_LEN: usize = 20;
/// A monitor frame (a 4 KiB page of the DCSS).
pub const FRAME: u32 = 4096;

/// Domain numbers.
pub mod domain {
    /// System.
    pub const SYSTEM: u8 = 0;
    /// Monitor.
    pub const MONITOR: u8 = 1;
    /// Scheduler.
    pub const SCHEDULER: u8 = 2;
    /// Storage.
    pub const STORAGE: u8 = 3;
    /// User.
    pub const USER: u8 = 4;
    /// Processor.
    pub const PROCESSOR: u8 = 5;
    /// I/O.
    pub const IO: u8 = 6;
    /// Application data.
    pub const APPLDATA: u8 = 10;
}

/// The end-of-frame record: domain 1, record 13 (MRMTREOF), header only.
pub const EOF_RECORD: (u8, u16) = (domain::MONITOR, 13);

/// One monitor record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// MRHDRDM.
    pub domain: u8,
    /// MRHDRRC.
    pub number: u16,
    /// MRHDRTOD.
    pub tod: u64,
    /// Record-specific data (after the 20-byte header).
    pub data: Vec<u8>,
}

/// Why a record could not be parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// Fewer than 20 bytes left.
    #[error("fewer than {HDR_LEN} bytes left for a record header")]
    ShortHeader,
    /// MRHDRLEN below 20 or beyond the bytes available.
    #[error("record length {0} is impossible here")]
    BadLength(u16),
}

impl Record {
    /// Encoded length, header included.
    pub fn len(&self) -> usize {
        HDR_LEN + self.data.len()
    }

    /// Never true: a record has at least its header.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether this is an end-of-frame record.
    pub fn is_eof(&self) -> bool {
        (self.domain, self.number) == EOF_RECORD
    }

    /// Append the header and data, big-endian.
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&(self.len() as u16).to_be_bytes());
        out.extend_from_slice(&[0, 0, self.domain, 0]);
        out.extend_from_slice(&self.number.to_be_bytes());
        out.extend_from_slice(&self.tod.to_be_bytes());
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&self.data);
    }

    /// Parse one record at the start of `b`; returns it and its length.
    pub fn parse(b: &[u8]) -> Result<(Record, usize), ParseError> {
        if b.len() < HDR_LEN {
            return Err(ParseError::ShortHeader);
        }
        let len = u16::from_be_bytes([b[0], b[1]]);
        if (len as usize) < HDR_LEN || len as usize > b.len() {
            return Err(ParseError::BadLength(len));
        }
        let rec = Record {
            domain: b[4],
            number: u16::from_be_bytes([b[6], b[7]]),
            tod: u64::from_be_bytes(b[8..16].try_into().unwrap()),
            data: b[HDR_LEN..len as usize].to_vec(),
        };
        Ok((rec, len as usize))
    }
}

/// The bit for domain `d` in an MCE's domain bytes (IBM bit numbering: domain
/// 0 is the high-order bit of byte 1).
pub fn domain_bit(d: u8) -> u16 {
    0x8000 >> (d as u16 & 15)
}

/// Domain name.
pub fn domain_name(d: u8) -> Option<&'static str> {
    Some(match d {
        0 => "System",
        1 => "Monitor",
        2 => "Scheduler",
        3 => "Storage",
        4 => "User",
        5 => "Processor",
        6 => "I/O",
        7 => "Seeks",
        8 => "Virtual Network",
        9 => "ISFC",
        10 => "Application Data",
        11 => "SSI",
        _ => return None,
    })
}

/// Microseconds from the TOD epoch (1900-01-01) to the Unix epoch.
pub const TOD_UNIX_OFFSET_US: u64 = 2_208_988_800_000_000;

/// The TOD clock value for a Unix time in nanoseconds: bit 51 ticks once a
/// microsecond, so the value is microseconds since 1900 shifted left by 12.
pub fn tod_from_unix_ns(ns: u64) -> u64 {
    (ns / 1000 + TOD_UNIX_OFFSET_US) << 12
}

/// Unix microseconds (negative before 1970) of a TOD value.
pub fn tod_to_unix_us(tod: u64) -> i64 {
    (tod >> 12) as i64 - TOD_UNIX_OFFSET_US as i64
}

/// `YYYY-MM-DD HH:MM:SS.uuuuuu` (UTC) for a TOD value.
pub fn format_tod(tod: u64) -> String {
    let us = tod_to_unix_us(tod);
    let secs = us.div_euclid(1_000_000);
    let frac = us.rem_euclid(1_000_000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_date(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{frac:06}",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// Proleptic Gregorian date of a day count relative to 1970-01-01.
fn civil_date(days: i64) -> (i64, u32, u32) {
    // Count in 400-year eras starting 0000-03-01 so that the leap day ends a year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097); // day of era, 0..146096
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365; // 0..399
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100); // 0..365, from March 1
    let mp = (5 * doy + 2) / 153; // month from March, 0..11
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + if m <= 2 { 1 } else { 0 };
    (y, m, d)
}

/// EBCDIC (code page 037) for the characters user IDs and names use.
pub fn ebcdic(c: char) -> u8 {
    match c {
        'A'..='I' => 0xC1 + (c as u8 - b'A'),
        'J'..='R' => 0xD1 + (c as u8 - b'J'),
        'S'..='Z' => 0xE2 + (c as u8 - b'S'),
        'a'..='i' => 0x81 + (c as u8 - b'a'),
        'j'..='r' => 0x91 + (c as u8 - b'j'),
        's'..='z' => 0xA2 + (c as u8 - b's'),
        '0'..='9' => 0xF0 + (c as u8 - b'0'),
        ' ' => 0x40,
        '.' => 0x4B,
        '(' => 0x4D,
        '+' => 0x4E,
        '&' => 0x50,
        '$' => 0x5B,
        '*' => 0x5C,
        ')' => 0x5D,
        '-' => 0x60,
        '/' => 0x61,
        ',' => 0x6B,
        '_' => 0x6D,
        ':' => 0x7A,
        '#' => 0x7B,
        '@' => 0x7C,
        '=' => 0x7E,
        _ => 0x6F, // '?'
    }
}

/// ASCII for an EBCDIC byte (`'.'` for anything outside [`ebcdic`]'s set).
pub fn from_ebcdic_byte(b: u8) -> char {
    match b {
        0xC1..=0xC9 => (b'A' + (b - 0xC1)) as char,
        0xD1..=0xD9 => (b'J' + (b - 0xD1)) as char,
        0xE2..=0xE9 => (b'S' + (b - 0xE2)) as char,
        0x81..=0x89 => (b'a' + (b - 0x81)) as char,
        0x91..=0x99 => (b'j' + (b - 0x91)) as char,
        0xA2..=0xA9 => (b's' + (b - 0xA2)) as char,
        0xF0..=0xF9 => (b'0' + (b - 0xF0)) as char,
        0x40 => ' ',
        0x4B => '.',
        0x4D => '(',
        0x4E => '+',
        0x50 => '&',
        0x5B => '$',
        0x5C => '*',
        0x5D => ')',
        0x60 => '-',
        0x61 => '/',
        0x6B => ',',
        0x6D => '_',
        0x6F => '?',
        0x7A => ':',
        0x7B => '#',
        0x7C => '@',
        0x7E => '=',
        _ => '.',
    }
}

/// Decode EBCDIC text.
pub fn from_ebcdic(b: &[u8]) -> String {
    b.iter().map(|&c| from_ebcdic_byte(c)).collect()
}

/// Eight EBCDIC characters, blank padded (longer text is cut).
pub fn to_ebcdic8(s: &str) -> [u8; 8] {
    let mut out = [0x40u8; 8];
    for (o, c) in out.iter_mut().zip(s.chars()) {
        *o = ebcdic(c);
    }
    out
}

/// MCE byte 0 for sample data.
pub const MCE_SAMPLE: u8 = 0x80;
/// MCE byte 0 for event data.
pub const MCE_EVENT: u8 = 0x40;

/// One record set, to be described by one MCE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSet {
    /// MCE byte 0: [`MCE_SAMPLE`] or [`MCE_EVENT`].
    pub type_byte: u8,
    /// MCE bytes 1-2: the domains of the records in the set.
    pub domains: u16,
    /// The records, never empty.
    pub records: Vec<Record>,
}

impl RecordSet {
    /// A set of `records` (never empty) with MCE type byte `type_byte`; its
    /// domain bits are those of the records.
    pub fn new(type_byte: u8, records: Vec<Record>) -> RecordSet {
        let domains = records.iter().fold(0, |a, r| a | domain_bit(r.domain));
        RecordSet {
            type_byte,
            domains,
            records,
        }
    }
}

/// What one IUCV message from *MONITOR describes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Simulation time it was built at (ns).
    pub time: u64,
    /// Its record sets, in MCA order (never empty).
    pub sets: Vec<RecordSet>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_is_big_endian() {
        let r = Record {
            domain: 4,
            number: 3,
            tod: 0x0102_0304_0506_0708,
            data: vec![0xAA, 0xBB],
        };
        let mut b = Vec::new();
        r.encode_into(&mut b);
        assert_eq!(
            b,
            [0, 22, 0, 0, 4, 0, 0, 3, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0xAA, 0xBB]
        );
        assert_eq!(Record::parse(&b).unwrap(), (r, 22));
        assert_eq!(Record::parse(&b[..19]), Err(ParseError::ShortHeader));
        assert_eq!(Record::parse(&b[..21]), Err(ParseError::BadLength(22)));
    }

    #[test]
    fn tod_epoch_and_formatting() {
        // 2024-01-01T00:00:00Z.
        let tod = tod_from_unix_ns(1_704_067_200_000_000_000);
        assert_eq!(format_tod(tod), "2024-01-01 00:00:00.000000");
        assert_eq!(format_tod(0), "1900-01-01 00:00:00.000000");
        // The TOD value of the Unix epoch is well known: 0x7D91048BCA000000.
        assert_eq!(tod_from_unix_ns(0), 0x7D91_048B_CA00_0000);
        let t = tod_from_unix_ns(951_827_696_123_456_000); // 2000-02-29T12:34:56.123456Z
        assert_eq!(format_tod(t), "2000-02-29 12:34:56.123456");
        assert_eq!(tod_to_unix_us(t), 951_827_696_123_456);
    }

    #[test]
    fn ebcdic_round_trip() {
        assert_eq!(
            to_ebcdic8("MAINT"),
            [0xD4, 0xC1, 0xC9, 0xD5, 0xE3, 0x40, 0x40, 0x40]
        );
        assert_eq!(from_ebcdic(&to_ebcdic8("LINUX01")), "LINUX01 ");
        assert_eq!(domain_bit(0), 0x8000);
        assert_eq!(domain_bit(10), 0x0020);
    }
}
