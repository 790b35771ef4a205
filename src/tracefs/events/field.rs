//! An event's fields: their kinds, how the `format` file lists them, how
//! values are read from a record, and their layout after the common
//! header, as the compiler lays out a `TRACE_EVENT`'s `TP_STRUCT__entry`.

use serde::Deserialize;

use super::error::DefError;

/// Size of `struct trace_entry` (type u16, flags u8, preempt_count u8, pid s32).
pub const COMMON_SIZE: usize = 8;

/// What a field holds, for encoding, printing and filtering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// An integer of `size` bytes (1, 2, 4 or 8).
    Int {
        /// Whether the C type is signed.
        signed: bool,
    },
    /// `char name[N]`: a NUL-padded string in place.
    CharArray,
    /// `__data_loc char[] name`: a u32 `(len << 16) | offset` pointing at a
    /// NUL-terminated string after the fixed part.
    DynString,
    /// `__rel_loc char[] name` (user_events): like `DynString`, but the
    /// offset counts from the end of the 4-byte location word.
    RelString,
    /// `__data_loc` of anything but chars (user_events): printed as bytes.
    DynArray,
    /// `__rel_loc` of anything but chars (user_events): printed as bytes.
    RelArray,
    /// `struct name size` (user_events): opaque bytes.
    Opaque,
}

/// One field as the `format` file lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The C type as written (`u16`, `char[16]`, `__data_loc char[]`).
    pub ctype: String,
    /// The field name.
    pub name: String,
    /// Byte offset from the start of the entry (common header included).
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// The `signed:` column.
    pub signed: bool,
    /// How the value is stored.
    pub kind: FieldKind,
}

impl Field {
    /// The `field:` line's declaration: arrays move the brackets after the
    /// name (`char comm[16]`), `__data_loc` types print unchanged.
    pub fn decl(&self) -> String {
        if !self.ctype.starts_with("__data_loc") {
            if let Some(i) = self.ctype.find('[') {
                let base = self.ctype[..i].trim_end();
                return format!("{} {}{}", base, self.name, &self.ctype[i..]);
            }
        }
        format!("{} {}", self.ctype, self.name)
    }

    /// Whether the filter treats this field as a string.
    pub fn is_string(&self) -> bool {
        matches!(
            self.kind,
            FieldKind::CharArray | FieldKind::DynString | FieldKind::RelString
        )
    }

    /// Where the data of a `__data_loc`/`__rel_loc` field lies in `entry`
    /// (start, length), without bounds checks.
    pub fn loc_range(&self, entry: &[u8]) -> (usize, usize) {
        let loc = entry
            .get(self.offset..self.offset + 4)
            .map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()));
        let mut off = (loc & 0xffff) as usize;
        if matches!(self.kind, FieldKind::RelString | FieldKind::RelArray) {
            off += self.offset + 4;
        }
        (off, (loc >> 16) as usize)
    }

    /// Read an integer field from an entry (sign-extended when signed).
    pub fn int_value(&self, entry: &[u8]) -> i128 {
        let Some(b) = entry.get(self.offset..self.offset + self.size) else {
            return 0;
        };
        let signed = matches!(self.kind, FieldKind::Int { signed: true });
        match (self.size, signed) {
            (1, false) => b[0] as i128,
            (1, true) => b[0] as i8 as i128,
            (2, false) => u16::from_le_bytes([b[0], b[1]]) as i128,
            (2, true) => i16::from_le_bytes([b[0], b[1]]) as i128,
            (4, false) => u32::from_le_bytes(b.try_into().unwrap()) as i128,
            (4, true) => i32::from_le_bytes(b.try_into().unwrap()) as i128,
            (8, false) => u64::from_le_bytes(b.try_into().unwrap()) as i128,
            (8, true) => i64::from_le_bytes(b.try_into().unwrap()) as i128,
            _ => 0,
        }
    }

    /// The bytes of a string field up to (not including) its NUL. A
    /// `char name[]` of size 0 (`ftrace:print`'s `buf`) runs to the end of
    /// the entry, as the kernel's filters read it ("len of zero means str
    /// is dynamic and ends with '\0'").
    pub fn str_value<'a>(&self, entry: &'a [u8]) -> &'a [u8] {
        let raw: &[u8] = match self.kind {
            FieldKind::CharArray if self.size == 0 => entry.get(self.offset..).unwrap_or(&[]),
            FieldKind::CharArray => entry
                .get(self.offset..self.offset + self.size)
                .unwrap_or(&[]),
            FieldKind::DynString | FieldKind::RelString => {
                let (off, len) = self.loc_range(entry);
                entry.get(off..off + len).unwrap_or(&[])
            }
            _ => &[],
        };
        let end = raw.iter().position(|&c| c == 0).unwrap_or(raw.len());
        &raw[..end]
    }
}

/// The `common_*` fields every event starts with.
pub fn common_fields() -> Vec<Field> {
    let f = |ctype: &str, name: &str, offset, size, signed| Field {
        ctype: ctype.into(),
        name: name.into(),
        offset,
        size,
        signed,
        kind: FieldKind::Int { signed },
    };
    vec![
        f("unsigned short", "common_type", 0, 2, false),
        f("unsigned char", "common_flags", 2, 1, false),
        f("unsigned char", "common_preempt_count", 3, 1, false),
        f("int", "common_pid", 4, 4, true),
    ]
}

/// A field in the config (`tracing: events: [{fields: [{name, type}]}]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FieldSpec {
    /// Field name (C identifier).
    pub name: String,
    /// C type: `u8`..`u64`, `s8`..`s64`, `char`, `short`, `int`, `long`,
    /// `unsigned int`, `pid_t`, `bool`, `char[N]` or `__data_loc char[]`.
    #[serde(rename = "type")]
    pub ctype: String,
}

/// Size and signedness of a scalar C type (kernels since 6.2 build with
/// `-funsigned-char`, so `char` is unsigned).
fn scalar(t: &str) -> Option<(usize, bool)> {
    Some(match t {
        "u8" | "__u8" | "unsigned char" | "char" | "bool" => (1, false),
        "s8" | "__s8" | "signed char" => (1, true),
        "u16" | "__u16" | "unsigned short" => (2, false),
        "s16" | "__s16" | "short" => (2, true),
        "u32" | "__u32" | "unsigned int" | "unsigned" => (4, false),
        "s32" | "__s32" | "int" | "pid_t" => (4, true),
        "u64" | "__u64" | "unsigned long" | "unsigned long long" | "size_t" => (8, false),
        "s64" | "__s64" | "long" | "long long" | "loff_t" => (8, true),
        _ => return None,
    })
}

/// Whether `s` is a C identifier.
pub(crate) fn is_ident(s: &str) -> bool {
    let mut c = s.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// Lay out fields after the common header, each naturally aligned, as the
/// compiler lays out the `TP_STRUCT__entry` struct.
pub fn layout(specs: &[FieldSpec]) -> Result<Vec<Field>, DefError> {
    let mut off = COMMON_SIZE;
    let mut out: Vec<Field> = Vec::new();
    for s in specs {
        if !is_ident(&s.name) {
            return Err(DefError::FieldName(s.name.clone()));
        }
        if s.name.starts_with("common_") || common_fields().iter().any(|c| c.name == s.name) {
            return Err(DefError::ReservedField(s.name.clone()));
        }
        if out.iter().any(|f| f.name == s.name) {
            return Err(DefError::DuplicateField(s.name.clone()));
        }
        let t = s.ctype.split_whitespace().collect::<Vec<_>>().join(" ");
        let (size, align, signed, kind) = if t == "__data_loc char[]" {
            (4, 4, false, FieldKind::DynString)
        } else if let Some(rest) = t.strip_prefix("char[").and_then(|r| r.strip_suffix(']')) {
            let n: usize = rest
                .trim()
                .parse()
                .ok()
                .filter(|n| (1..=4096).contains(n))
                .ok_or_else(|| DefError::ArrayLength(s.ctype.clone()))?;
            (n, 1, false, FieldKind::CharArray)
        } else if let Some((size, signed)) = scalar(&t) {
            (size, size, signed, FieldKind::Int { signed })
        } else {
            return Err(DefError::FieldType(s.ctype.clone()));
        };
        off = off.div_ceil(align) * align;
        out.push(Field {
            ctype: t,
            name: s.name.clone(),
            offset: off,
            size,
            signed,
            kind,
        });
        off += size;
    }
    if off > 0xffff {
        return Err(DefError::TooLarge);
    }
    Ok(out)
}
