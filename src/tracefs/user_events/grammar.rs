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

/// C `isspace`: what `skip_spaces` and `argv_split` pass over.
pub(super) use crate::tracefs::parse::is_space_char as is_c_space;

/// `argv_split`: the words parted by runs of `isspace`.
pub(super) fn argv_split(s: &str) -> Vec<&str> {
    s.split(is_c_space).filter(|w| !w.is_empty()).collect()
}

/// `user_event_argv_split`: the arguments of a registration as the kernel
/// compares them with an existing event's fields: a space put after every
/// `;` not followed by one (`a;b` is `a; b`), then [`argv_split`].
pub(super) fn reg_argv(args: &str) -> Vec<String> {
    let mut fixed = String::with_capacity(args.len() + 8);
    let mut it = args.chars().peekable();
    while let Some(c) = it.next() {
        fixed.push(c);
        if c == ';' && !it.peek().is_some_and(|&n| is_c_space(n)) {
            fixed.push(' ');
        }
    }
    argv_split(&fixed).into_iter().map(str::to_string).collect()
}

/// `user_fields_match`: whether `argv` (words of a registration or a
/// deletion) names exactly `fields`, compared as text: for each field the
/// words up to the first holding a `;` (that one included), joined by single
/// spaces, must read `TYPE NAME[ SIZE]` (`SIZE` for `struct` fields) with
/// the `;` at the end if there was one. No words matches no fields only.
pub(super) fn fields_match_argv<S: AsRef<str>>(fields: &[UField], argv: &[S]) -> bool {
    if argv.is_empty() {
        return fields.is_empty();
    }
    let mut i = 0;
    for f in fields {
        if i >= argv.len() {
            return false;
        }
        let mut words = String::new();
        let mut colon = false;
        let start = i;
        while i < argv.len() {
            if i != start {
                words.push(' ');
            }
            let a = argv[i].as_ref();
            words.push_str(a);
            i += 1;
            if a.contains(';') {
                colon = true;
                break;
            }
        }
        let mut want = format!("{} {}", f.ctype, f.name);
        if f.ctype.starts_with("struct ") {
            let _ = write!(want, " {}", f.struct_size.unwrap_or(0) as i32);
        }
        if colon {
            want.push(';');
        }
        if words != want {
            return false;
        }
    }
    i == argv.len()
}

/// Parse one `;`-separated field; `None` for an empty one. As
/// `user_event_parse_field`: leading `isspace` skipped, a multi-word type
/// prefix runs to the next space, then single spaces part the words (so a
/// doubled space makes an empty word, and `u32 ` is a field with an empty
/// name).
pub(super) fn parse_field(text: &str) -> SysResult<Option<UField>> {
    let f = text.trim_start_matches(is_c_space);
    if f.is_empty() {
        return Ok(None);
    }
    let prefix = TYPE_PREFIXES.iter().find(|p| f.starts_with(**p));
    let (ty, rest) = match prefix {
        Some(p) => {
            let after = &f[p.len()..];
            let end = after.find(' ').ok_or(Errno::EINVAL)?;
            (Some(&f[..p.len() + end]), &after[end + 1..])
        }
        None => (None, f),
    };
    let mut words = rest.split(' ');
    let ty = match ty {
        Some(t) => t,
        None => words.next().unwrap_or(""),
    };
    let name = words.next().ok_or(Errno::EINVAL)?;
    let size_word = words.next();
    if words.next().is_some() {
        return Err(Errno::EINVAL);
    }
    let is_struct = prefix == Some(&"struct ");
    let struct_size = match size_word {
        Some(w) if is_struct => match kstrtou32_dec(w) {
            Some(0) | None => return Err(Errno::EINVAL),
            // The kernel keeps the size in an int and returns a negative
            // one as the error: -1 is EPERM, others no errno at all.
            Some(n) if n > i32::MAX as u32 => {
                let e = (n as i32).wrapping_neg();
                return Err(if (1..4096).contains(&e) {
                    Errno(e)
                } else {
                    Errno::EINVAL
                });
            }
            Some(n) => Some(n),
        },
        Some(_) => return Err(Errno::EINVAL),
        None if is_struct => return Err(Errno::EINVAL),
        None => None,
    };
    let size = type_size(ty, struct_size)?;
    Ok(Some(UField {
        ctype: ty.to_string(),
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

/// A registration command split as `user_event_parse_cmd` splits it: the
/// name up to the first space, flags after a `:` in it, the arguments after
/// that space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawCommand<'a> {
    /// The event name.
    pub name: &'a str,
    /// Text after a `:` in the name, if there was a `:`.
    pub flags: Option<&'a str>,
    /// Text after the first space, if there was one.
    pub args: Option<&'a str>,
}

/// Split a registration command (no field is parsed).
pub fn split_command(s: &str) -> RawCommand<'_> {
    let (name, args) = match s.find(' ') {
        Some(i) => (&s[..i], Some(&s[i + 1..])),
        None => (s, None),
    };
    let (name, flags) = match name.find(':') {
        Some(i) => (&name[..i], Some(&name[i + 1..])),
        None => (name, None),
    };
    RawCommand { name, flags, args }
}

/// Parse a registration command.
pub fn parse_command(s: &str) -> SysResult<Command> {
    let raw = split_command(s);
    let fields = match raw.args {
        Some(a) => parse_fields(a)?,
        None => Vec::new(),
    };
    Ok(Command {
        name: raw.name.to_string(),
        flags: raw.flags.map(str::to_string),
        fields,
    })
}

/// `trace_parse_run_command`: run the lines of one `dynamic_events` write
/// as the kernel cuts them. It copies at most 4095 bytes at a time, as a C
/// string (a NUL ends it); a line is cut at its newline, a comment at its
/// `#`. A line that does not end within a copy is read again from its
/// start, and is EINVAL when it already starts the copy (longer than 4094
/// bytes before a newline; the last line may be 4095) or when a NUL cut
/// it. Lines before the failing one have run. `run` gets each line as
/// [`crate::base::bytestr`] text.
pub(super) fn run_commands(
    data: &[u8],
    mut run: impl FnMut(&str) -> SysResult<()>,
) -> SysResult<()> {
    const WRITE_BUFSIZE: usize = 4096;
    let count = data.len();
    let mut done = 0;
    while done < count {
        let size = (count - done).min(WRITE_BUFSIZE - 1);
        let chunk = &data[done..done + size];
        let chunk = &chunk[..chunk.iter().position(|&b| b == 0).unwrap_or(chunk.len())];
        let mut buf = 0;
        loop {
            let rest = &chunk[buf..];
            let (line, used) = match rest.iter().position(|&b| b == b'\n') {
                Some(p) => (&rest[..p], p + 1),
                None if done + rest.len() < count => {
                    if buf != 0 {
                        break;
                    }
                    return Err(Errno::EINVAL);
                }
                None => (rest, rest.len()),
            };
            done += used;
            let line = match line.iter().position(|&b| b == b'#') {
                Some(i) => &line[..i],
                None => line,
            };
            run(&crate::base::bytestr::text(line))?;
            buf += used;
            if done >= count {
                break;
            }
        }
    }
    Ok(())
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
        // (`char msg[]`, size 20): measured on 6.12, where user_events never
        // sets the field's array length. That word is uninitialised heap, so
        // the kernel usually prints `[]` and now and then `[<garbage>]`
        // (seen: `tag[239142534]`); monfs always prints `[]`.
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
