//! Where a node of the configuration's YAML is, for errors found after
//! parsing ([`locate`]): a walk follows the path through the document and
//! fails on purpose at its node, so that the parser says where that is.

use serde::de::{DeserializeSeed, Error, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path into the configuration's YAML: a mapping key or a
/// list index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seg {
    /// A key of a mapping.
    Key(&'static str),
    /// An index of a list.
    Index(usize),
}

/// The 1-based line and column of the node at `path` in the YAML `text`
/// (1, 1 if there is none), for errors found after parsing (the loader
/// step's).
pub fn locate(text: &str, path: &[Seg]) -> (usize, usize) {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match Probe(path).deserialize(de) {
        Err(e) if e.to_string().contains(MARK) => e
            .location()
            .map(|l| (l.line(), l.column()))
            .unwrap_or((1, 1)),
        _ => (1, 1),
    }
}

/// The error the walk raises at the node.
const MARK: &str = "monfs-locate-mark";

/// Follows the rest of the path.
struct Probe<'a>(&'a [Seg]);

impl<'de> DeserializeSeed<'de> for Probe<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.0.is_empty() {
            return d.deserialize_any(Here);
        }
        d.deserialize_any(self)
    }
}

/// The node itself: fails once its content starts (a mapping at its
/// first key, as the parser's own errors in a device entry point).
struct Here;

impl<'de> Visitor<'de> for Here {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_map<A: MapAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(A::Error::custom(MARK))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, _: A) -> Result<(), A::Error> {
        Err(A::Error::custom(MARK))
    }
    fn visit_str<E: Error>(self, _: &str) -> Result<(), E> {
        Err(E::custom(MARK))
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<(), E> {
        Err(E::custom(MARK))
    }
    fn visit_i64<E: Error>(self, _: i64) -> Result<(), E> {
        Err(E::custom(MARK))
    }
    fn visit_u64<E: Error>(self, _: u64) -> Result<(), E> {
        Err(E::custom(MARK))
    }
    fn visit_f64<E: Error>(self, _: f64) -> Result<(), E> {
        Err(E::custom(MARK))
    }
    fn visit_unit<E: Error>(self) -> Result<(), E> {
        Err(E::custom(MARK))
    }
}

impl<'de> Visitor<'de> for Probe<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any YAML node")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut m: A) -> Result<(), A::Error> {
        while let Some(key) = m.next_key::<String>()? {
            match self.0.first() {
                Some(Seg::Key(k)) if *k == key => m.next_value_seed(Probe(&self.0[1..]))?,
                _ => {
                    m.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut q: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            let more = match self.0.first() {
                Some(Seg::Index(n)) if *n == i => {
                    q.next_element_seed(Probe(&self.0[1..]))?.is_some()
                }
                _ => q.next_element::<IgnoredAny>()?.is_some(),
            };
            if !more {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_bool<E: Error>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E: Error>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E: Error>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E: Error>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E: Error>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E: Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: Error>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The path as the configuration's errors name fields:
/// `usb.buses[2].devices[0].transfer_size`.
pub fn path_text(path: &[Seg]) -> String {
    let mut s = String::new();
    for seg in path {
        match seg {
            Seg::Key(k) => {
                if !s.is_empty() {
                    s.push('.');
                }
                s.push_str(k);
            }
            Seg::Index(i) => s.push_str(&format!("[{i}]")),
        }
    }
    s
}
