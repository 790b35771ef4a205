//! systemd's hardware database (`hwdb.bin`, compiled by `systemd-hwdb
//! update` from `hwdb.d/*.hwdb`), read as udev's `hwdb` builtin reads it:
//! every entry whose glob matches a lookup string gives its properties
//! (`ID_VENDOR_FROM_DATABASE`, `ID_MODEL_FROM_DATABASE`, `ID_AUTOSUSPEND`,
//! ...), and of two entries with the same key the one from the
//! higher-priority file, then the later line, wins.
//!
//! The file is a trie (`hwdb-internal.h`: a header, then nodes of a
//! prefix, children keyed by one character and value entries, all offsets
//! into the file). A lookup follows the literal characters and, at every
//! glob character (`*`, `?`, `[`), matches each complete pattern below it
//! with fnmatch(3). Every offset is checked against the file: a damaged
//! file gives fewer properties, never a crash.

use std::ffi::CString;
use std::io;
use std::path::Path;

/// Where udev looks for the compiled database, first match wins
/// (`sd-hwdb.c`'s search path).
pub const PATHS: &[&str] = &[
    "/etc/systemd/hwdb/hwdb.bin",
    "/etc/udev/hwdb.bin",
    "/usr/lib/systemd/hwdb/hwdb.bin",
    "/usr/lib/udev/hwdb.bin",
];

const SIGNATURE: &[u8; 8] = b"KSLPHHRH";
/// A lookup goes no deeper than this many nodes (a well-formed trie is as
/// deep as its longest pattern).
const MAX_DEPTH: usize = 4096;

/// One loaded database.
pub struct Hwdb {
    data: Vec<u8>,
    node_size: usize,
    child_size: usize,
    value_size: usize,
    root: usize,
}

/// A matched property and what decides between duplicates.
struct Found {
    key: String,
    value: String,
    priority: u16,
    filename: u64,
    line: u32,
}

impl Hwdb {
    /// The first database of [`PATHS`] that exists, if any loads.
    pub fn open_default() -> Option<Hwdb> {
        PATHS.iter().find_map(|p| Hwdb::open(Path::new(p)).ok())
    }

    /// Load `path`; `InvalidData` when it is not a hwdb.bin.
    pub fn open(path: &Path) -> io::Result<Hwdb> {
        Hwdb::from_bytes(std::fs::read(path)?)
    }

    /// A database from its bytes.
    pub fn from_bytes(data: Vec<u8>) -> io::Result<Hwdb> {
        let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("hwdb: {what}"));
        if data.len() < 80 || &data[..8] != SIGNATURE {
            return Err(bad("no KSLPHHRH signature"));
        }
        let u = |o: usize| u64::from_le_bytes(data[o..o + 8].try_into().unwrap()) as usize;
        let (header, node_size, child_size, value_size, root) = (u(24), u(32), u(40), u(48), u(56));
        if header < 80 || node_size < 24 || child_size < 16 || value_size < 16 || root >= data.len()
        {
            return Err(bad("header sizes out of range"));
        }
        Ok(Hwdb {
            data,
            node_size,
            child_size,
            value_size,
            root,
        })
    }

    fn u64_at(&self, off: usize) -> Option<u64> {
        let b = self.data.get(off..off.checked_add(8)?)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// The NUL-terminated string at `off`.
    fn string(&self, off: usize) -> &[u8] {
        let s = self.data.get(off..).unwrap_or(&[]);
        &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
    }

    /// A node's prefix, its children (character, offset) and the offset and
    /// count of its value entries.
    fn node(&self, off: usize) -> Option<Node<'_>> {
        let prefix = self.string(self.u64_at(off)? as usize);
        let children = usize::from(*self.data.get(off + 8)?);
        let values = self.u64_at(off + 16)? as usize;
        let first_child = off + self.node_size;
        let first_value = first_child + children * self.child_size;
        if first_value.checked_add(values.checked_mul(self.value_size)?)? > self.data.len() {
            return None;
        }
        Some(Node {
            prefix,
            children: (0..children)
                .filter_map(|i| {
                    let o = first_child + i * self.child_size;
                    Some((self.data[o], self.u64_at(o + 8)? as usize))
                })
                .collect(),
            values: first_value,
            count: values,
        })
    }

    /// Every property the database gives `search`, in the order udev adds
    /// them (first match of each key; a later winner keeps its place).
    pub fn lookup(&self, search: &str) -> Vec<(String, String)> {
        let mut w = Walk {
            db: self,
            search: search.as_bytes(),
            pattern: Vec::new(),
            found: Vec::new(),
        };
        w.descend(self.root, 0, 0);
        w.found.into_iter().map(|f| (f.key, f.value)).collect()
    }

    /// A node's value entries into `found`: keys stored with a leading
    /// space are properties (others are reserved and skipped).
    fn take(&self, node: &Node<'_>, found: &mut Vec<Found>) {
        for n in 0..node.count {
            let o = node.values + n * self.value_size;
            let (Some(k), Some(v)) = (self.u64_at(o), self.u64_at(o + 8)) else {
                continue;
            };
            let key = self.string(k as usize);
            let Some(key) = key.strip_prefix(b" ") else {
                continue;
            };
            let (filename, line, priority) = if self.value_size >= 32 {
                let line = self
                    .data
                    .get(o + 24..o + 28)
                    .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap_or_default()));
                let prio = self
                    .data
                    .get(o + 28..o + 30)
                    .map_or(0, |b| u16::from_le_bytes(b.try_into().unwrap_or_default()));
                (self.u64_at(o + 16).unwrap_or(0), line, prio)
            } else {
                (0, 0, 0)
            };
            let new = Found {
                key: String::from_utf8_lossy(key).into_owned(),
                value: String::from_utf8_lossy(self.string(v as usize)).into_owned(),
                priority,
                filename,
                line,
            };
            match found.iter_mut().find(|f| f.key == new.key) {
                Some(old) => {
                    let lower = if new.priority == 0 {
                        (new.filename, new.line) < (old.filename, old.line)
                    } else {
                        (new.priority, new.line) < (old.priority, old.line)
                    };
                    if !lower {
                        *old = new;
                    }
                }
                None => found.push(new),
            }
        }
    }
}

/// One lookup's walk: the string looked up, the pattern of the path so far
/// and what matched.
struct Walk<'a> {
    db: &'a Hwdb,
    search: &'a [u8],
    pattern: Vec<u8>,
    found: Vec<Found>,
}

impl Walk<'_> {
    /// Follow the search string from position `i` at node `off`.
    fn descend(&mut self, off: usize, mut i: usize, depth: usize) {
        let Some(node) = self.db.node(off).filter(|_| depth <= MAX_DEPTH) else {
            return;
        };
        let start = self.pattern.len();
        for (p, &c) in node.prefix.iter().enumerate() {
            if matches!(c, b'*' | b'?' | b'[') {
                self.pattern.extend_from_slice(&node.prefix[..p]);
                self.glob(off, p, depth);
                self.pattern.truncate(start);
                return;
            }
            if self.search.get(i + p) != Some(&c) {
                return;
            }
        }
        self.pattern.extend_from_slice(node.prefix);
        i += node.prefix.len();
        for &(c, child) in &node.children {
            if matches!(c, b'*' | b'?' | b'[') {
                self.pattern.push(c);
                self.glob(child, 0, depth + 1);
                self.pattern.pop();
            }
        }
        if i == self.search.len() {
            self.db.take(&node, &mut self.found);
            return;
        }
        if let Some(&(c, child)) = node.children.iter().find(|(c, _)| *c == self.search[i]) {
            self.pattern.push(c);
            self.descend(child, i + 1, depth + 1);
        }
    }

    /// Every complete pattern below node `off` (its prefix from position
    /// `p` on), each matched whole against the search string.
    fn glob(&mut self, off: usize, p: usize, depth: usize) {
        let Some(node) = self.db.node(off).filter(|_| depth <= MAX_DEPTH) else {
            return;
        };
        let start = self.pattern.len();
        self.pattern
            .extend_from_slice(node.prefix.get(p..).unwrap_or(&[]));
        for &(c, child) in &node.children {
            self.pattern.push(c);
            self.glob(child, 0, depth + 1);
            self.pattern.pop();
        }
        if node.count > 0 && fnmatch(&self.pattern, self.search) {
            self.db.take(&node, &mut self.found);
        }
        self.pattern.truncate(start);
    }
}

struct Node<'a> {
    prefix: &'a [u8],
    children: Vec<(u8, usize)>,
    values: usize,
    count: usize,
}

/// fnmatch(3) with no flags, as udev matches hwdb patterns.
fn fnmatch(pattern: &[u8], s: &[u8]) -> bool {
    let (Ok(p), Ok(s)) = (CString::new(pattern), CString::new(s)) else {
        return false;
    };
    // SAFETY: two NUL-terminated strings that outlive the call.
    unsafe { libc::fnmatch(p.as_ptr(), s.as_ptr(), 0) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_damaged_file_is_refused_or_gives_nothing() {
        assert!(Hwdb::from_bytes(b"not a hwdb".to_vec()).is_err());
        let mut d = vec![0u8; 200];
        d[..8].copy_from_slice(SIGNATURE);
        for (i, v) in [(24, 80u64), (32, 24), (40, 16), (48, 32), (56, 80)] {
            d[i..i + 8].copy_from_slice(&v.to_le_bytes());
        }
        // The root's prefix offset and value count point past the end.
        d[80..88].copy_from_slice(&u64::MAX.to_le_bytes());
        d[96..104].copy_from_slice(&u64::MAX.to_le_bytes());
        let h = Hwdb::from_bytes(d).unwrap();
        assert!(h.lookup("usb:v1D6Bp0002:").is_empty());
    }

    /// The same answers as systemd's own reader (`systemd-hwdb query`, from
    /// Debian's udev) on this machine's database, for lookups that take the
    /// literal path, globs in a prefix, globs as children, several files
    /// and no match at all.
    #[test]
    fn lookups_agree_with_systemd_hwdb_query() {
        let h = Hwdb::open_default().expect("no hwdb.bin (Debian's udev package makes one)");
        let searches = [
            "usb:v1D6Bp0002:xHCI Host Controller",
            "usb:v0627p0001:QEMU USB Mouse",
            "usb:v0627p0001d0000dc00dsc00dp00ic03isc01ip02in00",
            "usb:v046DpC52B:USB Receiver",
            "usb:v0BDAp8153:",
            "usb:v1050p0407d0512dc00dsc00dp00ic03isc01ip01in00",
            "usb:v0BDAp2838:RTL2838UHIDIR",
            "usb:v05ACp12A8:iPhone",
            "usb:v0000p0000:",
            "usb:vFFFFpFFFF:nothing",
            "pci:v00008086d00001237*",
            "evdev:input:b0003v0627p0001e0001-e0,1,2,4,k110,111,112,r0,1,8,am4,lsfw",
            "",
        ];
        for s in searches {
            let out = std::process::Command::new("systemd-hwdb")
                .args(["query", s])
                .output()
                .expect("systemd-hwdb (Debian's udev) runs");
            let want: Vec<(String, String)> = String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_once('='))
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            assert_eq!(h.lookup(s), want, "lookup {s:?}");
        }
    }
}
