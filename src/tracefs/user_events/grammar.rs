//! The command grammar: what `user_reg` names and `dynamic_events` lines say,
//! parsed and checked as the kernel does.

use super::*;

/// One field of a user event as registered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UField {
    /// The type as written (`u32`, `char[20]`, `__data_loc char[]`,
    /// `struct foo`).
    pub ctype: String,
    /// The name.
    pub name: String,
    /// The size word of a `struct` field.
    pub struct_size: Option<u32>,
    /// Size in bytes.
    pub size: usize,
}

/// A parsed `name[:FLAGS] [field[;field...]]` command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// The event name.
    pub name: String,
    /// Text after a `:` in the name, if there was a `:`.
    pub flags: Option<String>,
    /// The fields.
    pub fields: Vec<UField>,
}

/// `kstrtouint(s, 0)`: decimal, `0x` hex or `0` octal, optional `+`, an
/// optional trailing newline.
pub(super) fn kstrtouint0(s: &str) -> Option<u32> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    let (digits, radix) = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    u32::from_str_radix(digits, radix).ok()
}

/// `kstrtou32(s, 10)`.
pub(super) fn kstrtou32_dec(s: &str) -> Option<u32> {
    let s = s.strip_suffix('\n').unwrap_or(s);
    let s = s.strip_prefix('+').unwrap_or(s);
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `char[N]`: N from the text after `[` (at most 7 characters, up to `]`).
pub(super) fn array_len(ty: &str) -> SysResult<usize> {
    let open = ty.find('[').ok_or(Errno::EINVAL)?;
    let inner = &ty[open + 1..];
    if inner.len() > 7 {
        return Err(Errno::EINVAL);
    }
    let close = inner.find(']').ok_or(Errno::EINVAL)?;
    match kstrtouint0(&inner[..close]) {
        Some(n) if n != 0 && n <= MAX_FIELD_ARRAY_SIZE => Ok(n as usize),
        _ => Err(Errno::EINVAL),
    }
}

/// The size of a field type; EINVAL for anything not allowed (`long`).
pub(super) fn type_size(ty: &str, struct_size: Option<u32>) -> SysResult<usize> {
    Ok(match ty {
        "s64" | "u64" => 8,
        "s32" | "u32" | "int" | "unsigned int" => 4,
        "s16" | "u16" | "short" | "unsigned short" => 2,
        "s8" | "u8" | "char" | "unsigned char" => 1,
        _ if ty.starts_with("char[") || ty.starts_with("unsigned char[") => array_len(ty)?,
        _ if ty.starts_with("__data_loc ") || ty.starts_with("__rel_loc ") => 4,
        _ if ty.starts_with("struct ") => struct_size.ok_or(Errno::EINVAL)? as usize,
        _ => return Err(Errno::EINVAL),
    })
}

/// Multi-word type prefixes; the type then runs to the next space.
pub(super) const TYPE_PREFIXES: [&str; 6] = [
    "__data_loc unsigned ",
    "__data_loc ",
    "__rel_loc unsigned ",
    "__rel_loc ",
    "unsigned ",
    "struct ",
];

/// Parse one `;`-separated field; `None` for an empty one.
pub(super) fn parse_field(text: &str) -> SysResult<Option<UField>> {
    let f = text.trim_start_matches(' ');
    if f.is_empty() {
        return Ok(None);
    }
    let (ty, rest) = match TYPE_PREFIXES.iter().find(|p| f.starts_with(**p)) {
        Some(p) => {
            let after = &f[p.len()..];
            let end = after.find(' ').unwrap_or(after.len());
            let rest = &after[end..];
            (
                Some(format!("{p}{}", &after[..end])),
                rest.strip_prefix(' ').unwrap_or(rest),
            )
        }
        None => (None, f),
    };
    // Single spaces separate words: doubled spaces make empty words.
    let mut words = rest.split(' ');
    let ty = match ty {
        Some(t) => t,
        None => words.next().unwrap_or("").to_string(),
    };
    let name = words
        .next()
        .filter(|n| !n.is_empty())
        .ok_or(Errno::EINVAL)?;
    let size_word = words.next();
    if words.next().is_some() {
        return Err(Errno::EINVAL);
    }
    let is_struct = ty.starts_with("struct ");
    let struct_size = match size_word {
        Some(w) if is_struct => match kstrtou32_dec(w) {
            Some(n) if n > 0 => Some(n),
            _ => return Err(Errno::EINVAL),
        },
        Some(_) => return Err(Errno::EINVAL),
        None if is_struct => return Err(Errno::EINVAL),
        None => None,
    };
    let size = type_size(&ty, struct_size)?;
    Ok(Some(UField {
        ctype: ty,
        name: name.to_string(),
        struct_size,
        size,
    }))
}

/// Parse a field list (`u32 a; char[8] b`).
pub fn parse_fields(args: &str) -> SysResult<Vec<UField>> {
    let mut out = Vec::new();
    for part in args.split(';') {
        if let Some(f) = parse_field(part)? {
            out.push(f);
        }
    }
    Ok(out)
}

/// Parse a registration command. The name must be non-empty and (for the
/// tree) free of `/` and not `.`/`..`; the kernel checks no characters.
pub fn parse_command(s: &str) -> SysResult<Command> {
    let (name, args) = match s.find(' ') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (name, flags) = match name.find(':') {
        Some(i) => (&name[..i], Some(name[i + 1..].to_string())),
        None => (name, None),
    };
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(Errno::EINVAL);
    }
    let fields = match args {
        Some(a) => parse_fields(a)?,
        None => Vec::new(),
    };
    Ok(Command {
        name: name.to_string(),
        flags,
        fields,
    })
}

/// The `dynamic_events` text of a field list: ` a; b` (empty for none).
pub(super) fn fields_text(fields: &[UField]) -> String {
    let mut s = String::new();
    for (i, f) in fields.iter().enumerate() {
        s.push_str(if i == 0 { " " } else { "; " });
        let _ = write!(s, "{} {}", f.ctype, f.name);
        if let Some(n) = f.struct_size {
            let _ = write!(s, " {n}");
        }
    }
    s
}

/// Whether two field lists describe the same event: same types as written,
/// names and struct sizes, in order.
pub(super) fn fields_match(a: &[UField], b: &[UField]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.ctype == y.ctype && x.name == y.name && x.struct_size == y.struct_size)
}

/// Lay the fields out packed after the common header and build the print
/// format the kernel generates.
pub(super) fn layout(fields: &[UField]) -> (Vec<Field>, String) {
    let mut off = COMMON_SIZE;
    let mut out = Vec::new();
    let mut fmt = String::new();
    let mut args = String::new();
    for f in fields {
        let ty = f.ctype.as_str();
        let kind = if ty.starts_with("__data_loc") {
            if ty.contains("char") {
                FieldKind::DynString
            } else {
                FieldKind::DynArray
            }
        } else if ty.starts_with("__rel_loc") {
            if ty.contains("char") {
                FieldKind::RelString
            } else {
                FieldKind::RelArray
            }
        } else if ty.contains('[') && ty.contains("char") {
            FieldKind::CharArray
        } else if ty.starts_with("struct ") {
            FieldKind::Opaque
        } else {
            FieldKind::Int {
                signed: !ty.starts_with('u'),
            }
        };
        // `format` shows user_events arrays without their length
        // (`char msg[]`, size 20): measured on 6.12, where user_events leaves
        // the field's array length unset.
        let ctype = if kind == FieldKind::CharArray {
            let base = &ty[..ty.find('[').unwrap_or(ty.len())];
            format!("{base}[]")
        } else {
            ty.to_string()
        };
        out.push(Field {
            ctype,
            name: f.name.clone(),
            offset: off,
            size: f.size,
            signed: !ty.starts_with('u'),
            kind,
        });
        off += f.size;
        let conv = match ty {
            "s64" => "%lld",
            "u64" => "%llu",
            "s32" | "int" => "%d",
            "u32" | "unsigned int" => "%u",
            "s16" | "short" => "%d",
            "u16" | "unsigned short" => "%u",
            "s8" | "char" => "%d",
            "u8" | "unsigned char" => "%u",
            _ if ty.contains("char[") => "%s",
            _ => "%llu",
        };
        if !fmt.is_empty() {
            fmt.push(' ');
        }
        let _ = write!(fmt, "{}={}", f.name, conv);
        if ty.starts_with("__data_loc ") && ty.contains("char") {
            let _ = write!(args, ", __get_str({})", f.name);
        } else if ty.starts_with("__rel_loc ") && ty.contains("char") {
            let _ = write!(args, ", __get_rel_str({})", f.name);
        } else {
            let _ = write!(args, ", REC->{}", f.name);
        }
    }
    (out, format!("\"{fmt}\"{args}"))
}
