//! z/VM monitor records: the 20-byte record header (MRRECHDR), the domain and
//! record catalogue the simulator uses, TOD clock values and EBCDIC text.
//!
//! The header is the z/VM ABI (big-endian): length u16 @0 (header included),
//! zeros u16 @2, domain u8 @4, reserved u8 @5, record number u16 @6, TOD u64
//! @8, reserved u32 @16; record data starts at offset 20.
//!
//! The record *payloads* are the simulator's own compact layouts (described by
//! [`record_fields`]): they carry plausible values under the real domain and
//! record numbers and mnemonics, but are not IBM's field layouts.

use std::fmt::Write as _;

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
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Fewer than 20 bytes left.
    ShortHeader,
    /// MRHDRLEN below 20 or beyond the bytes available.
    BadLength(u16),
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParseError::ShortHeader => {
                write!(f, "fewer than {HDR_LEN} bytes left for a record header")
            }
            ParseError::BadLength(l) => write!(f, "record length {l} is impossible here"),
        }
    }
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

/// How a payload field is encoded (all big-endian).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Unsigned 8 bits.
    U8,
    /// Unsigned 16 bits.
    U16,
    /// Unsigned 32 bits.
    U32,
    /// Unsigned 64 bits.
    U64,
    /// 8 EBCDIC characters (a user ID or name), blank padded.
    E8,
    /// A TOD clock value.
    Tod,
    /// Hundredths of a percent in a u16.
    Pct,
}

impl Kind {
    /// Encoded size.
    pub fn size(self) -> usize {
        match self {
            Kind::U8 => 1,
            Kind::U16 | Kind::Pct => 2,
            Kind::U32 => 4,
            Kind::U64 | Kind::E8 | Kind::Tod => 8,
        }
    }
}

/// A payload field: name and encoding.
pub type Field = (&'static str, Kind);

/// One catalogue entry.
pub struct RecordType {
    /// Domain.
    pub domain: u8,
    /// Record number.
    pub number: u16,
    /// IBM mnemonic (MRxxxxxx).
    pub mnemonic: &'static str,
    /// What it reports.
    pub title: &'static str,
    /// The simulator's payload layout.
    pub fields: &'static [Field],
}

use Kind::*;

/// The records the simulator produces (plus the end-of-frame record).
pub static CATALOG: &[RecordType] = &[
    RecordType {
        domain: 0,
        number: 2,
        mnemonic: "MRSYTPRP",
        title: "Processor data (per processor)",
        fields: &[
            ("cpu", U16),
            ("busy", Pct),
            ("busy_us", U64),
            ("idle_us", U64),
            ("diagnoses", U32),
        ],
    },
    RecordType {
        domain: 0,
        number: 3,
        mnemonic: "MRSYTRSG",
        title: "Real storage data (global)",
        fields: &[
            ("frames", U32),
            ("available", U32),
            ("user_frames", U32),
            ("system_frames", U32),
        ],
    },
    RecordType {
        domain: 0,
        number: 19,
        mnemonic: "MRSYTSYG",
        title: "System data (global)",
        fields: &[
            ("logged_on", U32),
            ("dispatch_list", U32),
            ("eligible_list", U32),
            ("cpus_online", U16),
            ("busy", Pct),
        ],
    },
    RecordType {
        domain: 1,
        number: 1,
        mnemonic: "MRMTREPR",
        title: "Event profile",
        fields: &[("domains", U16), ("event_rate_x100", U32)],
    },
    RecordType {
        domain: 1,
        number: 4,
        mnemonic: "MRMTRSYS",
        title: "System configuration data",
        fields: &[
            ("system", E8),
            ("dcss", E8),
            ("cpus", U16),
            ("storage_mb", U32),
            ("ipl", Tod),
        ],
    },
    RecordType {
        domain: 1,
        number: 5,
        mnemonic: "MRMTRPRP",
        title: "Processor configuration",
        fields: &[("cpu", U16), ("online", U8), ("type", U8)],
    },
    RecordType {
        domain: 1,
        number: 7,
        mnemonic: "MRMTRMEM",
        title: "Memory configuration data",
        fields: &[("frames", U32), ("dcss_start", U32), ("dcss_end", U32)],
    },
    RecordType {
        domain: 1,
        number: 9,
        mnemonic: "MRMTRSPR",
        title: "Sample profile",
        fields: &[("domains", U16), ("interval_ms", U32)],
    },
    RecordType {
        domain: 1,
        number: 13,
        mnemonic: "MRMTREOF",
        title: "End of frame indicator",
        fields: &[],
    },
    RecordType {
        domain: 1,
        number: 15,
        mnemonic: "MRMTRUSR",
        title: "Logged on user",
        fields: &[("user", E8), ("logon", Tod)],
    },
    RecordType {
        domain: 2,
        number: 4,
        mnemonic: "MRSCLADL",
        title: "Add user to dispatch list",
        fields: &[("user", E8), ("class", U8), ("dispatch_list", U32)],
    },
    RecordType {
        domain: 2,
        number: 5,
        mnemonic: "MRSCLDDL",
        title: "Drop user from dispatch list",
        fields: &[("user", E8), ("resident_us", U32), ("dispatch_list", U32)],
    },
    RecordType {
        domain: 3,
        number: 1,
        mnemonic: "MRSTORSG",
        title: "Real storage management (global)",
        fields: &[
            ("page_ins", U64),
            ("page_outs", U64),
            ("page_in_rate", U32),
            ("page_out_rate", U32),
        ],
    },
    RecordType {
        domain: 3,
        number: 4,
        mnemonic: "MRSTOASP",
        title: "Auxiliary storage management",
        fields: &[("slots", U32), ("slots_used", U32)],
    },
    RecordType {
        domain: 3,
        number: 5,
        mnemonic: "MRSTOSHS",
        title: "NSS/DCSS loaded into storage",
        fields: &[("name", E8), ("pages", U32)],
    },
    RecordType {
        domain: 4,
        number: 1,
        mnemonic: "MRUSELON",
        title: "User logon",
        fields: &[("user", E8), ("logged_on", U32)],
    },
    RecordType {
        domain: 4,
        number: 2,
        mnemonic: "MRUSELOF",
        title: "User logoff data",
        fields: &[
            ("user", E8),
            ("connect_s", U32),
            ("cpu_us", U64),
            ("logged_on", U32),
        ],
    },
    RecordType {
        domain: 4,
        number: 3,
        mnemonic: "MRUSEACT",
        title: "User activity data",
        fields: &[
            ("user", E8),
            ("cpu_us", U64),
            ("resident_pages", U32),
            ("io_count", U32),
        ],
    },
    RecordType {
        domain: 5,
        number: 1,
        mnemonic: "MRPRCVON",
        title: "Vary on processor",
        fields: &[("cpu", U16), ("cpus_online", U16)],
    },
    RecordType {
        domain: 5,
        number: 2,
        mnemonic: "MRPRCVOF",
        title: "Vary off processor",
        fields: &[("cpu", U16), ("cpus_online", U16)],
    },
    RecordType {
        domain: 5,
        number: 3,
        mnemonic: "MRPRCPRP",
        title: "Processor data (per processor)",
        fields: &[
            ("cpu", U16),
            ("online", U8),
            ("sigps", U32),
            ("dispatches", U32),
        ],
    },
    RecordType {
        domain: 6,
        number: 1,
        mnemonic: "MRIODVON",
        title: "Vary on device",
        fields: &[("device", U16)],
    },
    RecordType {
        domain: 6,
        number: 2,
        mnemonic: "MRIODVOF",
        title: "Vary off device",
        fields: &[("device", U16)],
    },
    RecordType {
        domain: 6,
        number: 3,
        mnemonic: "MRIODDEV",
        title: "Device activity",
        fields: &[
            ("device", U16),
            ("online", U8),
            ("ssch", U64),
            ("io_rate", U32),
            ("response_us", U32),
        ],
    },
    RecordType {
        domain: 10,
        number: 1,
        mnemonic: "MRAPLEDT",
        title: "Event application data",
        fields: &[("user", E8), ("event", U32), ("value", U32)],
    },
    RecordType {
        domain: 10,
        number: 2,
        mnemonic: "MRAPLSDT",
        title: "Sample application data",
        fields: &[
            ("user", E8),
            ("load1_x100", U32),
            ("load5_x100", U32),
            ("processes", U32),
        ],
    },
];

/// The catalogue entry for a record.
pub fn record_type(domain: u8, number: u16) -> Option<&'static RecordType> {
    CATALOG
        .iter()
        .find(|t| t.domain == domain && t.number == number)
}

/// A field value while building a payload.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Any unsigned integer kind (U8..U64, Tod).
    Int(u64),
    /// Text for an E8 field.
    Text(String),
    /// A percentage for a Pct field.
    Pct(f64),
}

/// Encode a payload for `(domain, number)` from values in catalogue order.
pub fn encode_payload(domain: u8, number: u16, values: &[Value]) -> Vec<u8> {
    let t = record_type(domain, number).expect("record in catalogue");
    assert_eq!(t.fields.len(), values.len(), "{}", t.mnemonic);
    let mut out = Vec::new();
    for ((_, kind), v) in t.fields.iter().zip(values) {
        match (kind, v) {
            (U8, Value::Int(n)) => out.push(*n as u8),
            (U16, Value::Int(n)) => out.extend_from_slice(&(*n as u16).to_be_bytes()),
            (U32, Value::Int(n)) => out.extend_from_slice(&(*n as u32).to_be_bytes()),
            (U64 | Tod, Value::Int(n)) => out.extend_from_slice(&n.to_be_bytes()),
            (E8, Value::Text(s)) => out.extend_from_slice(&to_ebcdic8(s)),
            (Pct, Value::Pct(p)) => out
                .extend_from_slice(&((p * 100.0).round().clamp(0.0, 10000.0) as u16).to_be_bytes()),
            _ => panic!("{}: value {v:?} does not fit {kind:?}", t.mnemonic),
        }
    }
    out
}

/// Describe a payload field by field (`name=value ...`), or `None` when the
/// record is unknown or its length does not match the layout.
pub fn describe_payload(domain: u8, number: u16, data: &[u8]) -> Option<String> {
    let t = record_type(domain, number)?;
    let need: usize = t.fields.iter().map(|(_, k)| k.size()).sum();
    if need != data.len() {
        return None;
    }
    let mut s = String::new();
    let mut off = 0;
    for (name, kind) in t.fields {
        let b = &data[off..off + kind.size()];
        off += kind.size();
        if !s.is_empty() {
            s.push(' ');
        }
        let be = |b: &[u8]| b.iter().fold(0u64, |a, x| a << 8 | *x as u64);
        let _ = match kind {
            U16 if *name == "domains" => write!(s, "{name}={:#06x}", be(b)),
            U32 if name.starts_with("dcss_") => write!(s, "{name}={:#010x}", be(b)),
            U8 | U16 | U32 | U64 => write!(s, "{name}={}", be(b)),
            E8 => write!(s, "{name}={}", from_ebcdic(b).trim_end()),
            Tod => write!(s, "{name}={}", format_tod(be(b))),
            Pct => write!(s, "{name}={:.2}%", be(b) as f64 / 100.0),
        };
    }
    Some(s)
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
    fn ebcdic_round_trip_and_payloads() {
        assert_eq!(
            to_ebcdic8("MAINT"),
            [0xD4, 0xC1, 0xC9, 0xD5, 0xE3, 0x40, 0x40, 0x40]
        );
        assert_eq!(from_ebcdic(&to_ebcdic8("LINUX01")), "LINUX01 ");
        for t in CATALOG {
            let size: usize = t.fields.iter().map(|(_, k)| k.size()).sum();
            assert!(HDR_LEN + size < 200, "{}", t.mnemonic);
        }
        let p = encode_payload(4, 1, &[Value::Text("TCPIP".into()), Value::Int(42)]);
        assert_eq!(
            describe_payload(4, 1, &p).unwrap(),
            "user=TCPIP logged_on=42"
        );
        assert_eq!(domain_bit(0), 0x8000);
        assert_eq!(domain_bit(10), 0x0020);
    }
}
