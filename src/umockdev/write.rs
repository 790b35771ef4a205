//! The writer of umockdev's device descriptions: one paragraph per sysfs
//! device, as `umockdev-record` writes them (`P:`, `N:`, the `E:`
//! properties sorted, then the attributes sorted by name: text ones as
//! `A:` with [`escape`], binary ones as `H:` in upper-case hex, links as
//! `L:`), so that umockdev's reader and monfs's ([`super::parse`]) read
//! them back.

use super::escape;

/// One attribute of a device directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attr {
    /// A text attribute (`A:`).
    Text(Vec<u8>),
    /// A binary one (`H:`).
    Binary(Vec<u8>),
    /// A symbolic link (`L:`), its target.
    Link(String),
}

impl Attr {
    /// `bytes` as an attribute: text where it is UTF-8 without NUL bytes,
    /// else binary.
    pub fn of(bytes: Vec<u8>) -> Attr {
        if !bytes.contains(&0) && std::str::from_utf8(&bytes).is_ok() {
            Attr::Text(bytes)
        } else {
            Attr::Binary(bytes)
        }
    }
}

/// One device to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Paragraph {
    /// Its sysfs path from `/devices/`.
    pub path: String,
    /// Its node under /dev (`bus/usb/001/002`).
    pub node: Option<String>,
    /// Its udev properties.
    pub properties: Vec<(String, String)>,
    /// Its attributes, by name.
    pub attributes: Vec<(String, Attr)>,
}

/// The text of `p`, ending with the empty line that ends a paragraph.
/// Names and values with a newline (which no line can hold) are left out,
/// as are properties and attributes whose name has `=`.
pub fn paragraph(p: &Paragraph) -> String {
    let mut s = format!("P: {}\n", p.path);
    if let Some(n) = p.node.as_ref().filter(|n| !n.contains(['\n', '='])) {
        s.push_str(&format!("N: {n}\n"));
    }
    let ok = |k: &str| !k.is_empty() && !k.contains(['\n', '=']);
    let mut props = p.properties.clone();
    props.sort();
    for (k, v) in props.iter().filter(|(k, v)| ok(k) && !v.contains('\n')) {
        s.push_str(&format!("E: {k}={v}\n"));
    }
    let mut attrs: Vec<&(String, Attr)> = p.attributes.iter().filter(|(k, _)| ok(k)).collect();
    attrs.sort_by(|a, b| a.0.cmp(&b.0));
    for (k, a) in attrs {
        match a {
            Attr::Text(b) => s.push_str(&format!("A: {k}={}\n", escape(b))),
            Attr::Binary(b) => {
                let hex: String = b.iter().map(|x| format!("{x:02X}")).collect();
                s.push_str(&format!("H: {k}={hex}\n"));
            }
            Attr::Link(t) if !t.contains('\n') => s.push_str(&format!("L: {k}={t}\n")),
            Attr::Link(_) => {}
        }
    }
    s.push('\n');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::umockdev::parse;

    #[test]
    fn what_is_written_reads_back() {
        let p = Paragraph {
            path: "/devices/platform/monfs_hcd.1/usb1/1-1".into(),
            node: Some("bus/usb/001/002".into()),
            properties: vec![
                ("SUBSYSTEM".into(), "usb".into()),
                ("DEVTYPE".into(), "usb_device".into()),
                ("BAD=KEY".into(), "x".into()),
            ],
            attributes: vec![
                ("product".into(), Attr::of(b"a\\b\tc\n".to_vec())),
                ("descriptors".into(), Attr::Binary(vec![0x12, 1, 0xab])),
                (
                    "driver".into(),
                    Attr::Link("../../../bus/usb/drivers/usb".into()),
                ),
                ("raw".into(), Attr::of(vec![0, 0xff])),
            ],
        };
        let text = paragraph(&p);
        assert!(
            text.starts_with(
                "P: /devices/platform/monfs_hcd.1/usb1/1-1\nN: bus/usb/001/002\nE: DEVTYPE=usb_device\nE: SUBSYSTEM=usb\nH: descriptors=1201AB\nL: driver=../../../bus/usb/drivers/usb\nA: product=a\\\\b\\tc\\n\nH: raw=00FF\n\n"
            ),
            "{text}"
        );
        let two = format!(
            "{text}{}",
            paragraph(&Paragraph {
                path: "/devices/platform/monfs_hcd.1".into(),
                properties: vec![("SUBSYSTEM".into(), "platform".into())],
                ..Paragraph::default()
            })
        );
        let r = parse(two.as_bytes()).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].attribute("product"), Some(&b"a\\b\tc\n"[..]));
        assert_eq!(r[0].attribute("descriptors"), Some(&[0x12, 1, 0xab][..]));
        assert_eq!(r[0].attribute("raw"), Some(&[0, 0xff][..]));
        assert_eq!(r[0].property("BAD"), None);
        assert_eq!(r[1].subsystem(), "platform");
    }
}
