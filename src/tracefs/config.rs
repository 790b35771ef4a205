//! The `tracing:` section of the configuration: events defined by the
//! user, checked when the configuration is read.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer};

use crate::tracefs::events::builtin;
use crate::tracefs::events::{EventDef, FieldSpec};

/// The first event id monfs hands out. `common_type` is a u16; the kernel
/// numbers its built-in events from about 20 up to a few thousand (2325 on
/// this 6.18 machine) and gives dynamic events (kprobes, user_events) the
/// lowest free id above those, so it would take ~37000 live dynamic events to
/// reach 40000. That leaves 25535 ids for monfs's built-in, configured and
/// future dynamic events, and `perf` or `trace-cmd` reading both trees never
/// see two events with one id.
pub const EVENT_ID_BASE: u16 = 40000;

/// One configured event (`tracing: events:`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, try_from = "RawEventConfig")]
pub struct EventConfig {
    /// The system (`events/<system>/`).
    pub system: String,
    /// The event name.
    pub name: String,
    /// Fields in order.
    pub fields: Vec<FieldSpec>,
    /// The print format (`"fmt", REC->a, __get_str(b)`); generated like
    /// user_events' when absent.
    pub format: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEventConfig {
    system: String,
    name: String,
    #[serde(default)]
    fields: Vec<FieldSpec>,
    #[serde(default)]
    format: Option<String>,
}

impl TryFrom<RawEventConfig> for EventConfig {
    type Error = crate::tracefs::events::EventError;
    fn try_from(r: RawEventConfig) -> Result<Self, Self::Error> {
        EventDef::new(&r.system, &r.name, 0, &r.fields, r.format.as_deref())?;
        Ok(EventConfig {
            system: r.system,
            name: r.name,
            fields: r.fields,
            format: r.format,
        })
    }
}

/// The `tracing:` section of the config.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TracingConfig {
    /// User-defined events, added to the built-in `usb` and `zvm` systems.
    /// They appear at the top of `available_events`, as the kernel lists
    /// dynamically added events.
    #[serde(default, deserialize_with = "unique_events")]
    pub events: Vec<EventConfig>,
}

fn unique_events<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<EventConfig>, D::Error> {
    let v: Vec<EventConfig> = Vec::deserialize(d)?;
    let builtin = builtin::builtin_defs();
    let mut seen = BTreeSet::new();
    for e in &v {
        if !seen.insert((e.system.clone(), e.name.clone()))
            || builtin.iter().any(|b| b.0 == e.system && b.1 == e.name)
        {
            return Err(serde::de::Error::custom(format!(
                "duplicate event {}:{}",
                e.system, e.name
            )));
        }
    }
    if v.len() + builtin.len() > (u16::MAX - EVENT_ID_BASE) as usize {
        return Err(serde::de::Error::custom("too many events"));
    }
    Ok(v)
}
