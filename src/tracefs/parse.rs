//! Small parsers shared by the control files: the kernel's two ways of
//! reading an unsigned number, `kstrtoul_from_user` (a whole write, base
//! 10: [`kstrtoul_from_user`]) and `kstrtoul` base 0 (a word already taken
//! from a command: [`kstrtoul_base0`]), and the one-token-per-write
//! `set_event` grammar.

use crate::base::errno::{Errno, SysResult};

/// The kernel's `isspace` (lib/ctype.c), which counts 0xA0 a space.
pub fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0xa0)
}

/// [`is_space`] on [`crate::base::bytestr`] text, where 0xA0 is
/// [`crate::base::bytestr::BYTE_A0`].
pub fn is_space_char(c: char) -> bool {
    c == crate::base::bytestr::BYTE_A0 || (c.is_ascii() && is_space(c as u8))
}

/// The kernel's `isalnum` (lib/ctype.c): ASCII letters and digits, and the
/// Latin-1 letters 0xC0..=0xFF but for 0xD7 and 0xF7.
pub fn is_alnum(c: u8) -> bool {
    c.is_ascii_alphanumeric() || (c >= 0xc0 && c != 0xd7 && c != 0xf7)
}

/// `kstrtoul_from_user(buf, count, 10, &val)`: the written bytes up to the
/// first NUL, an optional `+`, decimal digits and one optional trailing
/// newline. Measured: `1`, `1\n`, `01`, `+1`, `1\0x` parse; ` 1`, `1 `,
/// `1\n\n`, `-0`, `0x1` and the empty write give EINVAL.
pub fn kstrtoul_from_user(data: &[u8]) -> SysResult<u64> {
    if data.len() > 66 {
        return Err(Errno::EINVAL);
    }
    let end = data.iter().position(|&c| c == 0).unwrap_or(data.len());
    let mut s = &data[..end];
    if let Some(r) = s.strip_prefix(b"+") {
        s = r;
    }
    if let Some(r) = s.strip_suffix(b"\n") {
        s = r;
    }
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return Err(Errno::EINVAL);
    }
    std::str::from_utf8(s)
        .unwrap()
        .parse::<u64>()
        .map_err(|_| Errno::ERANGE)
}

/// `kstrtoul`/`kstrtoull` with base 0 on a string already taken apart
/// (a trigger's count, a hist attribute, a word of a pid list): `0x` hex,
/// a leading `0` octal, else decimal; `Err(EINVAL)` for no digits or
/// trailing junk (one trailing newline allowed), `Err(ERANGE)` on overflow.
pub fn kstrtoul_base0(s: &str) -> SysResult<u64> {
    let s = s.strip_prefix('+').unwrap_or(s);
    let b = s.as_bytes();
    let (radix, mut i) = if b.first() == Some(&b'0') {
        if b.get(1).map(|c| c.to_ascii_lowercase()) == Some(b'x')
            && b.get(2).is_some_and(|c| c.is_ascii_hexdigit())
        {
            (16, 2)
        } else {
            (8, 0)
        }
    } else {
        (10, 0)
    };
    let start = i;
    let mut v: u64 = 0;
    let mut overflow = false;
    while let Some(d) = b.get(i).and_then(|&c| (c as char).to_digit(radix)) {
        match v
            .checked_mul(radix as u64)
            .and_then(|x| x.checked_add(d as u64))
        {
            Some(x) => v = x,
            None => overflow = true,
        }
        i += 1;
    }
    if i == start {
        return Err(Errno::EINVAL);
    }
    if overflow {
        return Err(Errno::ERANGE);
    }
    if b.get(i) == Some(&b'\n') {
        i += 1;
    }
    if i != b.len() {
        return Err(Errno::EINVAL);
    }
    Ok(v)
}

/// The longest `set_event` token (`EVENT_BUF_SIZE`).
pub const EVENT_BUF_SIZE: usize = 127;

/// One `set_event` token: skip leading whitespace, take bytes up to
/// whitespace or NUL, consume that one delimiter. Returns the bytes consumed
/// and the token (None when there was none).
pub fn next_token(data: &[u8]) -> SysResult<(usize, Option<&[u8]>)> {
    let mut i = 0;
    while i < data.len() && is_space(data[i]) {
        i += 1;
    }
    if i == data.len() {
        return Ok((i, None));
    }
    let start = i;
    while i < data.len() && !is_space(data[i]) && data[i] != 0 {
        i += 1;
        if i - start > EVENT_BUF_SIZE {
            return Err(Errno::EINVAL);
        }
    }
    let tok = &data[start..i];
    let consumed = if i < data.len() { i + 1 } else { i };
    Ok((consumed, (!tok.is_empty()).then_some(tok)))
}

/// A parsed `set_event` request.
#[derive(Debug, PartialEq, Eq)]
pub struct EventMatch<'a> {
    /// False for `!`.
    pub enable: bool,
    /// `Some(system)` to require that system.
    pub system: Option<&'a str>,
    /// `Some(event)` to require that event name.
    pub event: Option<&'a str>,
    /// A bare name matching either a system or an event.
    pub either: Option<&'a str>,
}

impl EventMatch<'_> {
    /// Whether `system:name` matches.
    pub fn matches(&self, system: &str, name: &str) -> bool {
        if let Some(m) = self.either {
            return m == system || m == name;
        }
        self.system.is_none_or(|s| s == system) && self.event.is_none_or(|e| e == name)
    }
}

/// Split a token into the request. `:mod:` requests name kernel modules,
/// which monfs never has, so they match nothing.
pub fn parse_match(tok: &str) -> Option<EventMatch<'_>> {
    let (enable, rest) = match tok.strip_prefix('!') {
        Some(r) => (false, r),
        None => (true, tok),
    };
    if rest.contains(":mod:") {
        return None;
    }
    let any = |s: &str| s.is_empty() || s == "*";
    Some(match rest.split_once(':') {
        Some((sys, ev)) => EventMatch {
            enable,
            system: (!any(sys)).then_some(sys),
            event: (!any(ev)).then_some(ev),
            either: None,
        },
        None => EventMatch {
            enable,
            system: None,
            event: None,
            either: Some(rest),
        },
    })
}

/// A `0` or `1` written to an `enable` file or an option, as
/// [`kstrtoul_from_user`] reads it (EINVAL for any other number).
pub fn enable_value(data: &[u8]) -> SysResult<bool> {
    match kstrtoul_from_user(data)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Errno::EINVAL),
    }
}

/// A number in `min..=max` from a write, or EINVAL.
pub fn ranged(data: &[u8], min: u64, max: u64) -> SysResult<u64> {
    let v = kstrtoul_from_user(data)?;
    if v < min || v > max {
        return Err(Errno::EINVAL);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kstrtoul_from_user_like_the_kernel() {
        for (s, v) in [
            (&b"1"[..], 1),
            (b"1\n", 1),
            (b"01", 1),
            (b"+1", 1),
            (b"00", 0),
            (b"1\0junk", 1),
            (b"1408", 1408),
        ] {
            assert_eq!(kstrtoul_from_user(s), Ok(v), "{s:?}");
        }
        for s in [&b" 1"[..], b"1 ", b"1\n\n", b"-0", b"0x1", b"", b"x", b"\n"] {
            assert_eq!(kstrtoul_from_user(s), Err(Errno::EINVAL), "{s:?}");
        }
        assert_eq!(
            kstrtoul_from_user(b"99999999999999999999999"),
            Err(Errno::ERANGE)
        );
    }

    #[test]
    fn tokens_like_the_kernel() {
        // (write, consumed, token) as measured on 6.18.
        assert_eq!(
            next_token(b"sched:sched_switch irq").unwrap(),
            (19, Some(&b"sched:sched_switch"[..]))
        );
        assert_eq!(next_token(b"  ").unwrap(), (2, None));
        assert_eq!(next_token(b"").unwrap(), (0, None));
        assert_eq!(next_token(b"  irq").unwrap(), (5, Some(&b"irq"[..])));
        assert_eq!(
            next_token(b"sched:sched_switch\n").unwrap(),
            (19, Some(&b"sched:sched_switch"[..]))
        );
        assert_eq!(
            next_token(b"\tsched:sched_switch\n").unwrap(),
            (20, Some(&b"sched:sched_switch"[..]))
        );
        assert_eq!(
            next_token(b"sched:sched_switch\0irq").unwrap(),
            (19, Some(&b"sched:sched_switch"[..]))
        );
        assert_eq!(next_token(b"\n\n").unwrap(), (2, None));
        assert_eq!(next_token(b"\0abc").unwrap(), (1, None));
        assert!(next_token(&[b'a'; 127]).is_ok());
        assert_eq!(next_token(&[b'a'; 128]), Err(Errno::EINVAL));
    }

    #[test]
    fn matching() {
        let m = |t: &str, s: &str, e: &str| parse_match(t).unwrap().matches(s, e);
        assert!(m("sched:sched_switch", "sched", "sched_switch"));
        assert!(!m("sched:sched_switch", "sched", "sched_wakeup"));
        assert!(m("sched:*", "sched", "x") && m("sched:", "sched", "x"));
        assert!(m("*:x", "a", "x") && m(":x", "b", "x") && !m(":x", "b", "y"));
        assert!(m("*:*", "a", "b") && m(":", "a", "b") && m(":*", "a", "b"));
        assert!(
            m("sched", "sched", "x") && m("x", "sched", "x") && !m("sched_*", "sched", "sched_x")
        );
        assert!(!m("*", "a", "b"));
        assert!(!m("a:b:c", "a", "b"));
        assert!(m("a:b:c", "a", "b:c"));
        assert!(!parse_match("!irq").unwrap().enable);
        assert!(parse_match("sched:x:mod:foo").is_none());
        assert!(!m("!", "a", "b"));
    }
}
