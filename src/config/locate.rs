//! Where a field is in a configuration file: the line and column of the
//! value at a path such as `usb.buses[2].devices[0].transfer_size`, for
//! checks made after parsing (the topology's memory), so that their
//! errors point where parse errors do.

use std::fmt;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// One step of a path: a mapping's key or a list's index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Seg {
    /// A key of a mapping.
    Key(&'static str),
    /// An index in a list.
    Index(usize),
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

const HERE: &str = "monfs-locate-here";

struct Walk<'a>(&'a [Seg]);

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        if self.0.is_empty() {
            // The error carries the position of the value it stops at.
            return Err(D::Error::custom(HERE));
        }
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(k) = map.next_key::<String>()? {
            if self.0.first() == Some(&Seg::Key(leak_free(&k, self.0))) {
                map.next_value_seed(Walk(&self.0[1..]))?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut i = 0;
        loop {
            if self.0.first() == Some(&Seg::Index(i)) {
                if seq.next_element_seed(Walk(&self.0[1..]))?.is_none() {
                    return Ok(());
                }
            } else if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
            i += 1;
        }
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// `k` as the path's key if they are equal (the path's keys are
/// `'static`), else a key no path has.
fn leak_free(k: &str, path: &[Seg]) -> &'static str {
    match path.first() {
        Some(Seg::Key(p)) if *p == k => p,
        _ => "\u{0}",
    }
}

/// The 1-based line and column of the value at `path` in the YAML `text`,
/// if it is there.
pub fn position_of(text: &str, path: &[Seg]) -> Option<(usize, usize)> {
    let de = serde_yaml_ng::Deserializer::from_str(text);
    match Walk(path).deserialize(de) {
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_nested_values() {
        let y = "usb:\n  buses:\n    - bus: 1\n    - bus: 2\n      devices:\n        - {port: 1, kind: flood, transfer_size: 1048576}\n";
        let p = [
            Seg::Key("usb"),
            Seg::Key("buses"),
            Seg::Index(1),
            Seg::Key("devices"),
            Seg::Index(0),
            Seg::Key("transfer_size"),
        ];
        // In a flow mapping the parser points at the mapping, as for parse
        // errors.
        assert_eq!(position_of(y, &p), Some((6, 11)));
        let bus = [p[0].clone(), p[1].clone(), p[2].clone(), Seg::Key("bus")];
        assert_eq!(position_of(y, &bus).map(|p| p.0), Some(4));
        assert_eq!(position_of(y, &[Seg::Key("zvm")]), None);
        assert_eq!(
            path_text(&p),
            "usb.buses[1].devices[0].transfer_size".to_string()
        );
    }
}
