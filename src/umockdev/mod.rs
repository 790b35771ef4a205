//! umockdev's device descriptions (`.umockdev` files, what
//! `umockdev-record` writes and `umockdev-run -d` reads): the reader, which
//! takes them as umockdev 0.17.16's `umockdev_testbed_add_from_string` does,
//! and the writer of the same format.
//!
//! The format: one paragraph per sysfs device, paragraphs separated by one
//! or more empty lines. A paragraph starts with `P: /devices/...` (its
//! sysfs path); then, in any order, `E: KEY=VALUE` (a udev property),
//! `A: NAME=VALUE` (a text attribute, with C escapes: `\\`, `\n`, `\t`,
//! octal `\101`...), `H: NAME=HEX` (a binary attribute, hex pairs),
//! `L: NAME=TARGET` (a symbolic link attribute), `N: NODE` or
//! `N: NODE=HEX` (its node under /dev, with contents in upper-case hex) and
//! `S: LINK` (a node's symlink, which umockdev ignores). Every paragraph
//! needs an `E: SUBSYSTEM=` property. A file that breaks these rules is
//! refused with the line and column of the first fault.
//!
//! Input is hostile: a file is at most [`MAX_FILE_BYTES`], a line at most
//! [`MAX_LINE_BYTES`], at most [`MAX_DEVICES`] paragraphs.

pub mod build;
pub mod write;

/// Largest `.umockdev` file read, bytes.
pub const MAX_FILE_BYTES: usize = 16 << 20;
/// Longest line, bytes (a `descriptors` attribute of 64 KiB in hex fits).
pub const MAX_LINE_BYTES: usize = 256 << 10;
/// Most paragraphs (devices) in one file.
pub const MAX_DEVICES: usize = 4096;

/// One paragraph: a sysfs device as umockdev records it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceRecord {
    /// The line of its `P:` line (1-based).
    pub line: usize,
    /// Its sysfs path, starting with `/devices/`.
    pub path: String,
    /// `N:`: the node under /dev, and its contents when given.
    pub node: Option<(String, Option<Vec<u8>>)>,
    /// `S:` lines, in order.
    pub symlinks: Vec<String>,
    /// `E:` udev properties, in order.
    pub properties: Vec<(String, String)>,
    /// `A:` text attributes (escapes resolved) and `H:` binary ones, in
    /// order.
    pub attributes: Vec<(String, Vec<u8>)>,
    /// `L:` link attributes: name and target.
    pub links: Vec<(String, String)>,
}

impl DeviceRecord {
    /// The value of udev property `key` (the last one given).
    pub fn property(&self, key: &str) -> Option<&str> {
        self.properties
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The bytes of attribute `name` (the last one given).
    pub fn attribute(&self, name: &str) -> Option<&[u8]> {
        self.attributes
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_slice())
    }

    /// Attribute `name` as text, trimmed of surrounding white space.
    pub fn attribute_text(&self, name: &str) -> Option<&str> {
        std::str::from_utf8(self.attribute(name)?)
            .ok()
            .map(str::trim)
    }

    /// The `SUBSYSTEM` property (every record has one).
    pub fn subsystem(&self) -> &str {
        self.property("SUBSYSTEM").unwrap_or("")
    }

    /// The last component of its path (`1-3.2`, `usb1`, `1-3:1.0`).
    pub fn name(&self) -> &str {
        self.path.rsplit('/').next().unwrap_or("")
    }
}

/// What is wrong with a `.umockdev` file, where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{line}:{column}: {kind}")]
pub struct ParseError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (in bytes).
    pub column: usize,
    /// What.
    pub kind: ParseErrorKind,
}

/// The faults a `.umockdev` file can have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// Larger than [`MAX_FILE_BYTES`].
    #[error("the file is larger than {MAX_FILE_BYTES} bytes")]
    TooLarge,
    /// More than [`MAX_DEVICES`] paragraphs.
    #[error("more than {MAX_DEVICES} device descriptions")]
    TooManyDevices,
    /// A line longer than [`MAX_LINE_BYTES`].
    #[error("line longer than {MAX_LINE_BYTES} bytes")]
    LongLine,
    /// Not UTF-8.
    #[error("not UTF-8 text")]
    NotUtf8,
    /// A NUL byte.
    #[error("a NUL byte")]
    Nul,
    /// A paragraph that does not start with `P:`.
    #[error("device descriptions must start with a \"P: /devices/path/...\" line")]
    NoPath,
    /// A `P:` path outside /devices.
    #[error("invalid device path '{0}': must start with /devices/")]
    BadPath(String),
    /// A second `P:` line in a paragraph.
    #[error("invalid P: line in the description of device {0}")]
    SecondPath(String),
    /// A line that is none of the kinds.
    #[error("malformed attribute or property line in the description of device {0}: expected `X: ...` with X one of P N S E A H L, and `E`, `A`, `H`, `L` with KEY=VALUE")]
    Malformed(String),
    /// Hex with an odd number of digits or a character that is not one.
    #[error("malformed hexadecimal value of {0}: {1}")]
    BadHex(String, &'static str),
    /// A text attribute ending in a lone backslash.
    #[error("attribute {0} ends with a lone backslash")]
    TrailingBackslash(String),
    /// Two `SUBSYSTEM` properties.
    #[error("duplicate SUBSYSTEM property in the description of device {0}")]
    DuplicateSubsystem(String),
    /// No `SUBSYSTEM` property.
    #[error("missing SUBSYSTEM property in the description of device {0}")]
    NoSubsystem(String),
}

fn err(line: usize, column: usize, kind: ParseErrorKind) -> ParseError {
    ParseError { line, column, kind }
}

/// Parse a `.umockdev` file's bytes into its device records, in order.
pub fn parse(bytes: &[u8]) -> Result<Vec<DeviceRecord>, ParseError> {
    if bytes.len() > MAX_FILE_BYTES {
        return Err(err(1, 1, ParseErrorKind::TooLarge));
    }
    // Check lines before anything else: length, NUL, UTF-8.
    let mut lines: Vec<&str> = Vec::new();
    for (i, raw) in bytes.split(|b| *b == b'\n').enumerate() {
        if raw.len() > MAX_LINE_BYTES {
            return Err(err(i + 1, MAX_LINE_BYTES + 1, ParseErrorKind::LongLine));
        }
        if let Some(c) = raw.iter().position(|b| *b == 0) {
            return Err(err(i + 1, c + 1, ParseErrorKind::Nul));
        }
        let s = std::str::from_utf8(raw)
            .map_err(|e| err(i + 1, e.valid_up_to() + 1, ParseErrorKind::NotUtf8))?;
        lines.push(s);
    }
    // A final newline ends the last line; it starts no empty one.
    if bytes.ends_with(b"\n") || bytes.is_empty() {
        lines.pop();
    }
    let mut out: Vec<DeviceRecord> = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if out.len() == MAX_DEVICES {
            return Err(err(i + 1, 1, ParseErrorKind::TooManyDevices));
        }
        let (rec, next) = paragraph(&lines, i)?;
        out.push(rec);
        i = next;
        while i < lines.len() && lines[i].is_empty() {
            i += 1;
        }
    }
    Ok(out)
}

/// A line's kind and its text after `X: `.
fn kind_of(line: &str) -> Option<(char, &str)> {
    let b = line.as_bytes();
    if b.len() >= 3 && b[1] == b':' && b[2] == b' ' && b[0].is_ascii_uppercase() {
        Some((b[0] as char, &line[3..]))
    } else {
        None
    }
}

/// `KEY=VALUE` with a non-empty key.
fn key_value(rest: &str) -> Option<(&str, &str)> {
    match rest.split_once('=') {
        Some((k, v)) if !k.is_empty() => Some((k, v)),
        _ => None,
    }
}

/// The paragraph starting at line index `start`: its record and the index
/// of the line after it.
fn paragraph(lines: &[&str], start: usize) -> Result<(DeviceRecord, usize), ParseError> {
    let path = match kind_of(lines[start]) {
        Some(('P', p)) => p,
        _ => return Err(err(start + 1, 1, ParseErrorKind::NoPath)),
    };
    if !path.starts_with("/devices/") {
        return Err(err(start + 1, 4, ParseErrorKind::BadPath(path.to_string())));
    }
    let mut rec = DeviceRecord {
        line: start + 1,
        path: path.to_string(),
        ..DeviceRecord::default()
    };
    let mut subsystem = false;
    let mut i = start + 1;
    while i < lines.len() && !lines[i].is_empty() {
        let (n, line) = (i + 1, lines[i]);
        let malformed = || err(n, 1, ParseErrorKind::Malformed(rec.path.clone()));
        let (kind, rest) = kind_of(line).ok_or_else(malformed)?;
        match kind {
            'P' => return Err(err(n, 1, ParseErrorKind::SecondPath(rec.path.clone()))),
            'S' => rec.symlinks.push(rest.to_string()),
            'E' | 'A' | 'H' | 'L' => {
                let (k, v) = key_value(rest).ok_or_else(malformed)?;
                let vcol = 3 + k.len() + 2;
                match kind {
                    'E' => {
                        if k == "SUBSYSTEM" {
                            if subsystem {
                                return Err(err(
                                    n,
                                    4,
                                    ParseErrorKind::DuplicateSubsystem(rec.path.clone()),
                                ));
                            }
                            subsystem = true;
                        }
                        rec.properties.push((k.to_string(), v.to_string()));
                    }
                    'A' => {
                        let bytes = unescape(v).map_err(|_| {
                            err(
                                n,
                                line.len(),
                                ParseErrorKind::TrailingBackslash(k.to_string()),
                            )
                        })?;
                        rec.attributes.push((k.to_string(), bytes));
                    }
                    'H' => {
                        let bytes = decode_hex(v, false)
                            .map_err(|(at, why)| err(n, vcol + at, hex_err(k, why)))?;
                        rec.attributes.push((k.to_string(), bytes));
                    }
                    _ => rec.links.push((k.to_string(), v.to_string())),
                }
            }
            'N' => {
                // `N: NODE` or `N: NODE=HEX` (upper case, non-empty).
                let node = match rest.split_once('=') {
                    None if !rest.is_empty() => (rest.to_string(), None),
                    Some((k, v)) if !k.is_empty() && !v.is_empty() => {
                        let vcol = 3 + k.len() + 2;
                        let bytes = decode_hex(v, true)
                            .map_err(|(at, why)| err(n, vcol + at, hex_err(k, why)))?;
                        (k.to_string(), Some(bytes))
                    }
                    _ => return Err(malformed()),
                };
                rec.node = Some(node);
            }
            _ => return Err(malformed()),
        }
        i += 1;
    }
    if !subsystem {
        return Err(err(
            start + 1,
            1,
            ParseErrorKind::NoSubsystem(rec.path.clone()),
        ));
    }
    Ok((rec, i))
}

fn hex_err(key: &str, why: &'static str) -> ParseErrorKind {
    ParseErrorKind::BadHex(key.to_string(), why)
}

/// Hex pairs to bytes; `upper`: only upper-case digits (`N:`). The error
/// gives the 0-based offset of the fault.
pub fn decode_hex(s: &str, upper: bool) -> Result<Vec<u8>, (usize, &'static str)> {
    let b = s.as_bytes();
    let digit = |i: usize| -> Result<u8, (usize, &'static str)> {
        let c = b[i];
        match c {
            b'0'..=b'9' => Ok(c - b'0'),
            b'A'..=b'F' => Ok(c - b'A' + 10),
            b'a'..=b'f' if !upper => Ok(c - b'a' + 10),
            _ => Err((i, "not a hex digit")),
        }
    };
    let mut out = Vec::with_capacity(b.len() / 2);
    for i in (0..b.len()).step_by(2) {
        let hi = digit(i)?;
        if i + 1 == b.len() {
            return Err((i, "an odd number of hex digits"));
        }
        out.push(hi << 4 | digit(i + 1)?);
    }
    Ok(out)
}

/// Resolve C escapes as GLib's `g_strcompress` does: `\b \f \n \r \t \v`,
/// octal `\NNN` (one to three digits), and any other escaped character as
/// itself. A lone backslash at the end is an error.
pub fn unescape(s: &str) -> Result<Vec<u8>, TrailingBackslash> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        i += 1;
        let Some(&c) = b.get(i) else {
            return Err(TrailingBackslash);
        };
        match c {
            b'0'..=b'7' => {
                let mut v: u32 = 0;
                let mut n = 0;
                while n < 3 && i < b.len() && (b'0'..=b'7').contains(&b[i]) {
                    v = v * 8 + (b[i] - b'0') as u32;
                    i += 1;
                    n += 1;
                }
                out.push(v as u8);
                continue;
            }
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            other => out.push(other),
        }
        i += 1;
    }
    Ok(out)
}

/// A text ending in a backslash that escapes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a lone backslash at the end")]
pub struct TrailingBackslash;

/// Escape bytes for an `A:` line, so that [`unescape`] gives them back:
/// backslash, newline and the other control characters escaped.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for &c in b {
        match c {
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\r' => s.push_str("\\r"),
            0..=31 | 127.. => s.push_str(&format!("\\{c:03o}")),
            _ => s.push(c as char),
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(text: &str) -> (usize, usize, String) {
        let x = parse(text.as_bytes()).unwrap_err();
        (x.line, x.column, x.kind.to_string())
    }

    #[test]
    fn every_line_kind_and_several_paragraphs() {
        let text = "P: /devices/pci0000:00/usb1/1-3\nN: bus/usb/001/005=12010002\nS: link/x\nE: SUBSYSTEM=usb\nE: DEVTYPE=usb_device\nA: busnum=1\\n\nA: odd=a\\\\b\\tc\\101\\q\nH: descriptors=12010002ff\nL: driver=../../../bus/usb/drivers/usb\nA: empty=\n\n\n\nP: /devices/x\nE: SUBSYSTEM=tty\nN: ttyS0\n";
        let r = parse(text.as_bytes()).unwrap();
        assert_eq!(r.len(), 2);
        let d = &r[0];
        assert_eq!((d.line, d.name()), (1, "1-3"));
        assert_eq!(
            d.node,
            Some(("bus/usb/001/005".into(), Some(vec![0x12, 1, 0, 2])))
        );
        assert_eq!(d.symlinks, ["link/x"]);
        assert_eq!(d.subsystem(), "usb");
        assert_eq!(d.property("DEVTYPE"), Some("usb_device"));
        assert_eq!(d.attribute("busnum"), Some(&b"1\n"[..]));
        assert_eq!(d.attribute_text("busnum"), Some("1"));
        assert_eq!(d.attribute("odd"), Some(&b"a\\b\tcAq"[..]));
        assert_eq!(d.attribute("descriptors"), Some(&[0x12, 1, 0, 2, 0xff][..]));
        assert_eq!(d.attribute("empty"), Some(&b""[..]));
        assert_eq!(
            d.links,
            [("driver".into(), "../../../bus/usb/drivers/usb".into())]
        );
        assert_eq!(r[1].line, 14);
        assert_eq!(r[1].node, Some(("ttyS0".into(), None)));
        // No final newline: the same.
        let r2 = parse(text.trim_end().as_bytes()).unwrap();
        assert_eq!(r, r2);
        assert_eq!(parse(b"").unwrap(), vec![]);
    }

    #[test]
    fn faults_give_line_and_column() {
        let p = "P: /devices/d\nE: SUBSYSTEM=usb\n";
        assert_eq!(e("# comment\n").0, 1);
        assert!(e("\nP: /devices/d\nE: SUBSYSTEM=usb\n")
            .2
            .contains("must start with"));
        assert_eq!(e("P: /sys/x\n").1, 4);
        assert!(e(&format!("{p}P: /devices/e\n")).2.contains("invalid P:"));
        let (l, c, m) = e(&format!("{p}X: y\n"));
        assert_eq!((l, c), (3, 1));
        assert!(m.contains("malformed"), "{m}");
        assert!(e(&format!("{p}E: nokey\n")).2.contains("malformed"));
        assert!(e(&format!("{p}E: =v\n")).2.contains("malformed"));
        assert!(e(&format!("{p}A:x=1\n")).2.contains("malformed"));
        assert!(e(&format!("{p}N: \n")).2.contains("malformed"));
        assert!(e(&format!("{p}N: x=\n")).2.contains("malformed"));
        assert_eq!(
            e(&format!("{p}H: descriptors=12g1\n")),
            (
                3,
                18,
                "malformed hexadecimal value of descriptors: not a hex digit".into()
            )
        );
        assert_eq!(e(&format!("{p}H: d=123\n")).1, 8);
        // N: contents are upper-case hex only.
        assert_eq!(e(&format!("{p}N: x=4a\n")).1, 7);
        assert!(e(&format!("{p}A: x=ab\\\n")).2.contains("lone backslash"));
        assert_eq!(
            e("P: /devices/d\nE: SUBSYSTEM=usb\nE: SUBSYSTEM=tty\n").0,
            3
        );
        let (l, _, m) = e("P: /devices/d\nA: x=1\n\nP: /devices/e\n");
        assert_eq!(l, 1);
        assert!(m.contains("missing SUBSYSTEM"), "{m}");
        assert_eq!(e(&format!("{p}A: x=\0\n")), (3, 6, "a NUL byte".into()));
        assert_eq!(e("P: /devices/\u{e9}\n").0, 1);
        let (l, c, _) = parse(b"P: /devices/d\nA: x=\xff\n")
            .map_err(|x| (x.line, x.column, x.kind))
            .unwrap_err();
        assert_eq!((l, c), (2, 6));
    }

    #[test]
    fn limits_hold() {
        let long = format!(
            "P: /devices/d\nE: SUBSYSTEM=usb\nH: d={}\n",
            "00".repeat(MAX_LINE_BYTES)
        );
        assert_eq!(
            e(&long).2,
            format!("line longer than {MAX_LINE_BYTES} bytes")
        );
        let mut many = String::new();
        for i in 0..=MAX_DEVICES {
            many.push_str(&format!("P: /devices/{i}\nE: SUBSYSTEM=usb\n\n"));
        }
        assert!(e(&many).2.starts_with("more than"));
        let big = vec![b'\n'; MAX_FILE_BYTES + 1];
        assert_eq!(parse(&big).unwrap_err().kind, ParseErrorKind::TooLarge);
    }

    #[test]
    fn escape_and_unescape_round_trip() {
        let all: Vec<u8> = (0..=255u8).collect();
        assert_eq!(unescape(&escape(&all)).unwrap(), all);
        assert_eq!(escape(b"a\\b\nc"), "a\\\\b\\nc");
        assert_eq!(unescape("\\0\\12x\\1234").unwrap(), b"\0\nxS4");
    }
}
