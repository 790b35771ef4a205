//! The `zvm:` section: the z/VM monitor reader's DCSS and the *MONITOR
//! simulator's schedule, domains, pace and faults.

use std::fmt;

use serde::{Deserialize, Deserializer};

use crate::monreader::records::{domain, domain_bit};

/// A DCSS name: 1 to 8 characters of `A-Z 0-9 @ # $ _ -`, stored in upper
/// case (as the kernel upper-cases the `mondcss=` parameter).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DcssName(pub String);

impl<'de> Deserialize<'de> for DcssName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        let up = s.to_ascii_uppercase();
        if up.is_empty()
            || up.len() > 8
            || !up
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "@#$_-".contains(c))
        {
            return Err(serde::de::Error::custom(format!(
                "mondcss must be 1 to 8 characters of A-Z, 0-9, @, #, $, _ or -, got {s:?}"
            )));
        }
        Ok(DcssName(up))
    }
}

impl fmt::Display for DcssName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A monitor domain that can be enabled.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Domain {
    /// 0: system (sample).
    System,
    /// 1: monitor (configuration; always collected, as on z/VM).
    Monitor,
    /// 2: scheduler (events).
    Scheduler,
    /// 3: storage (sample and events).
    Storage,
    /// 4: user (sample and events).
    User,
    /// 5: processor (sample and events).
    Processor,
    /// 6: I/O (sample and events).
    Io,
    /// 10: application data (sample and events).
    Appldata,
}

impl Domain {
    /// The domain number.
    pub fn number(self) -> u8 {
        match self {
            Domain::System => domain::SYSTEM,
            Domain::Monitor => domain::MONITOR,
            Domain::Scheduler => domain::SCHEDULER,
            Domain::Storage => domain::STORAGE,
            Domain::User => domain::USER,
            Domain::Processor => domain::PROCESSOR,
            Domain::Io => domain::IO,
            Domain::Appldata => domain::APPLDATA,
        }
    }
    /// All of them.
    pub const ALL: [Domain; 8] = [
        Domain::System,
        Domain::Monitor,
        Domain::Scheduler,
        Domain::Storage,
        Domain::User,
        Domain::Processor,
        Domain::Io,
        Domain::Appldata,
    ];
}

/// How messages are paced.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Pace {
    /// Sample data every interval and events as they happen, in real time,
    /// from the moment the device is opened.
    #[default]
    Realtime,
    /// The same seeded timeline (starting at simulation time 0) as fast as the
    /// reader consumes it, keeping `flood_window` messages outstanding. For
    /// benchmarks and byte-exact comparisons.
    Flood,
}

/// Fault injection (all off by default). Message counts are per open.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ZvmFaults {
    /// Refuse the IUCV connection: open gives EIO.
    pub connect_fail: bool,
    /// Sever the IUCV path after this many messages were sent.
    pub sever_after_messages: Option<u64>,
    /// Sever the IUCV path this many milliseconds after open.
    pub sever_after_ms: Option<u64>,
    /// Every Nth reply (0: none) fails: that 0-byte read gives EIO.
    pub reply_fail_every: u64,
    /// After this many messages, pile messages up to the limit of 255.
    pub overflow_after_messages: Option<u64>,
    /// Every Nth message (0: none) carries an invalid MCE.
    pub bad_mce_every: u64,
}

/// The `zvm:` section of the config. An absent section gives a working
/// simulator with the defaults below.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(try_from = "RawZvmConfig")]
pub struct ZvmConfig {
    /// The monitor DCSS name (`mondcss=`), default `MONDCSS`.
    pub mondcss: DcssName,
    /// First byte of the DCSS (page aligned), default 0x02000000.
    pub dcss_start: u32,
    /// Last byte of the DCSS (inclusive, ends a page), default 0x02FFFFFF.
    pub dcss_end: u32,
    /// Sample interval in milliseconds, default 5000.
    pub sample_interval_ms: u64,
    /// Mean events per second, default 2 (0: no event data).
    pub event_rate: f64,
    /// Enabled domains, default all.
    pub domains: Vec<Domain>,
    /// Pacing, default `realtime`.
    pub pace: Pace,
    /// Messages kept outstanding in `flood` pace (1..=254), default 16.
    pub flood_window: u16,
    /// Stop after this many messages per open (default: never).
    pub max_messages: Option<u64>,
    /// Processors (1..=64), default 4.
    pub cpus: u16,
    /// Users logged on at the start (1..=500), default 40.
    pub users: u32,
    /// DASD devices (1..=256), default 8.
    pub devices: u16,
    /// Real storage in MiB (64..=1048576), default 16384.
    pub storage_mb: u32,
    /// Fault injection.
    pub faults: ZvmFaults,
}

impl Default for ZvmConfig {
    fn default() -> Self {
        ZvmConfig {
            mondcss: DcssName("MONDCSS".into()),
            dcss_start: 0x0200_0000,
            dcss_end: 0x02FF_FFFF,
            sample_interval_ms: 5000,
            event_rate: 2.0,
            domains: Domain::ALL.to_vec(),
            pace: Pace::Realtime,
            flood_window: 16,
            max_messages: None,
            cpus: 4,
            users: 40,
            devices: 8,
            storage_mb: 16384,
            faults: ZvmFaults::default(),
        }
    }
}

/// The unchecked form, checked into [`ZvmConfig`].
#[derive(Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawZvmConfig {
    mondcss: DcssName,
    dcss_start: u32,
    dcss_end: u32,
    sample_interval_ms: u64,
    event_rate: f64,
    domains: Vec<Domain>,
    pace: Pace,
    flood_window: u16,
    max_messages: Option<u64>,
    cpus: u16,
    users: u32,
    devices: u16,
    storage_mb: u32,
    faults: ZvmFaults,
}

impl Default for RawZvmConfig {
    fn default() -> Self {
        let d = ZvmConfig::default();
        RawZvmConfig {
            mondcss: d.mondcss,
            dcss_start: d.dcss_start,
            dcss_end: d.dcss_end,
            sample_interval_ms: d.sample_interval_ms,
            event_rate: d.event_rate,
            domains: d.domains,
            pace: d.pace,
            flood_window: d.flood_window,
            max_messages: d.max_messages,
            cpus: d.cpus,
            users: d.users,
            devices: d.devices,
            storage_mb: d.storage_mb,
            faults: d.faults,
        }
    }
}

/// Smallest DCSS: the 32 KiB control area plus 64 KiB of record frames.
pub const DCSS_MIN: u64 = 96 * 1024;
/// Largest DCSS the simulator keeps in memory.
pub const DCSS_MAX: u64 = 512 * 1024 * 1024;

/// A `zvm:` section whose values do not fit together or their ranges.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ZvmConfigError {
    /// The DCSS does not start or end on a page.
    #[error(
        "zvm: dcss_start ({start:#x}) must start a 4 KiB page and dcss_end ({end:#x}) must end one"
    )]
    DcssPages {
        /// dcss_start.
        start: u32,
        /// dcss_end.
        end: u32,
    },
    /// The DCSS is at 0, backwards, too small or too big.
    #[error("zvm: the DCSS {start:#x}-{end:#x} must be above address 0 and {} KiB to {} MiB long", DCSS_MIN / 1024, DCSS_MAX >> 20)]
    DcssRange {
        /// dcss_start.
        start: u32,
        /// dcss_end.
        end: u32,
    },
    /// A value out of its range.
    #[error("zvm: {field} must be {range}, got {value}")]
    Range {
        /// The field.
        field: &'static str,
        /// Its range.
        range: String,
        /// What was given.
        value: String,
    },
}

/// `value` of `field` is in `lo..=hi`.
fn range<T: PartialOrd + Copy + std::fmt::Display>(
    field: &'static str,
    value: T,
    lo: T,
    hi: T,
) -> Result<(), ZvmConfigError> {
    if (lo..=hi).contains(&value) {
        Ok(())
    } else {
        Err(ZvmConfigError::Range {
            field,
            range: format!("{lo}..={hi}"),
            value: value.to_string(),
        })
    }
}

impl TryFrom<RawZvmConfig> for ZvmConfig {
    type Error = ZvmConfigError;
    fn try_from(r: RawZvmConfig) -> Result<Self, ZvmConfigError> {
        let size = (r.dcss_end as u64 + 1).saturating_sub(r.dcss_start as u64);
        if r.dcss_start % 4096 != 0 || (r.dcss_end as u64 + 1) % 4096 != 0 {
            return Err(ZvmConfigError::DcssPages {
                start: r.dcss_start,
                end: r.dcss_end,
            });
        }
        if r.dcss_start == 0 || r.dcss_end <= r.dcss_start || !(DCSS_MIN..=DCSS_MAX).contains(&size)
        {
            return Err(ZvmConfigError::DcssRange {
                start: r.dcss_start,
                end: r.dcss_end,
            });
        }
        range("sample_interval_ms", r.sample_interval_ms, 10, 86_400_000)?;
        if !(r.event_rate.is_finite() && (0.0..=100_000.0).contains(&r.event_rate)) {
            return Err(ZvmConfigError::Range {
                field: "event_rate",
                range: "0..=100000".into(),
                value: r.event_rate.to_string(),
            });
        }
        range("flood_window", r.flood_window, 1, 254)?;
        range("cpus", r.cpus, 1, 64)?;
        range("users", r.users, 1, 500)?;
        range("devices", r.devices, 1, 256)?;
        range("storage_mb", r.storage_mb, 64, 1_048_576)?;
        let mut domains = r.domains;
        domains.sort();
        domains.dedup();
        Ok(ZvmConfig {
            mondcss: r.mondcss,
            dcss_start: r.dcss_start,
            dcss_end: r.dcss_end,
            sample_interval_ms: r.sample_interval_ms,
            event_rate: r.event_rate,
            domains,
            pace: r.pace,
            flood_window: r.flood_window,
            max_messages: r.max_messages,
            cpus: r.cpus,
            users: r.users,
            devices: r.devices,
            storage_mb: r.storage_mb,
            faults: r.faults,
        })
    }
}

impl ZvmConfig {
    /// Whether domain number `d` is enabled (monitor always is).
    pub fn enabled(&self, d: u8) -> bool {
        d == domain::MONITOR || self.domains.iter().any(|x| x.number() == d)
    }
    /// The domain bit vector of enabled domains.
    pub fn domain_bits(&self) -> u16 {
        (0..16u8)
            .filter(|d| self.enabled(*d))
            .fold(0, |a, d| a | domain_bit(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn cfg(yaml: &str) -> ZvmConfig {
        Config::parse(yaml, "t.yaml").map(|c| c.zvm).unwrap()
    }

    #[test]
    fn absent_section_gives_defaults() {
        let c = cfg("usb:\n  buses: []\n");
        assert_eq!(c, ZvmConfig::default());
        assert_eq!(c.mondcss.0, "MONDCSS");
        assert_eq!(
            c.domain_bits(),
            0x8000 | 0x4000 | 0x2000 | 0x1000 | 0x0800 | 0x0400 | 0x0200 | 0x0020
        );
    }

    #[test]
    fn config_fields_and_validation() {
        let c = cfg("zvm:\n  mondcss: mydcss\n  dcss_start: 0x08000000\n  dcss_end: 0x08FFFFFF\n  pace: flood\n  domains: [system, io]\n  faults:\n    reply_fail_every: 3\n");
        assert_eq!(c.mondcss.0, "MYDCSS");
        assert_eq!((c.dcss_start, c.dcss_end), (0x0800_0000, 0x08FF_FFFF));
        assert_eq!(c.pace, Pace::Flood);
        assert_eq!(c.faults.reply_fail_every, 3);
        assert!(c.enabled(1) && c.enabled(0) && c.enabled(6) && !c.enabled(4));
        for bad in [
            "zvm:\n  mondcss: TOOLONGNAME\n",
            "zvm:\n  mondcss: \"A B\"\n",
            "zvm:\n  dcss_start: 4097\n",
            "zvm:\n  dcss_start: 0x03000000\n",
            "zvm:\n  flood_window: 255\n",
            "zvm:\n  cpus: 0\n",
            "zvm:\n  bogus: 1\n",
            "zvm:\n  faults:\n    sever: true\n",
            "zvm:\n  domains: [seeks]\n",
        ] {
            assert!(Config::parse(bad, "t.yaml").is_err(), "{bad}");
        }
        let e = Config::parse("zvm:\n  mondcss: TOOLONGNAME\n", "t.yaml")
            .unwrap_err()
            .to_string();
        assert!(e.contains("t.yaml:2:"), "{e}");
    }
}
