//! The simulator's record catalogue: for each domain and record number it
//! produces, a mnemonic and a compact payload layout. The layouts carry
//! plausible values under the real domain and record numbers and
//! mnemonics, but are not IBM's field layouts; `monfs zvm-dump` uses them to
//! describe payloads.

use std::fmt::Write as _;

use crate::monreader::records::{format_tod, from_ebcdic, to_ebcdic8};

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

/// The z/VM user a record is about: its `user` field, if its layout has
/// one and the payload matches the layout.
pub fn user_of(domain: u8, number: u16, data: &[u8]) -> Option<String> {
    let t = record_type(domain, number)?;
    let need: usize = t.fields.iter().map(|(_, k)| k.size()).sum();
    if need != data.len() {
        return None;
    }
    let mut at = 0;
    for (name, kind) in t.fields {
        if *name == "user" && *kind == E8 {
            return Some(from_ebcdic(&data[at..at + 8]).trim_end().to_string());
        }
        at += kind.size();
    }
    None
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monreader::records::HDR_LEN;

    #[test]
    fn payloads() {
        for t in CATALOG {
            let size: usize = t.fields.iter().map(|(_, k)| k.size()).sum();
            assert!(HDR_LEN + size < 200, "{}", t.mnemonic);
        }
        let p = encode_payload(4, 1, &[Value::Text("TCPIP".into()), Value::Int(42)]);
        assert_eq!(
            describe_payload(4, 1, &p).unwrap(),
            "user=TCPIP logged_on=42"
        );
    }
}
