//! Byte strings carried in `String`s, losslessly.
//!
//! The kernel's names and texts are bytes: a user_events name, a tracefs
//! directory entry or a string field of an event may hold any byte but NUL
//! and need not be UTF-8. monfs's tree, registries and generated texts are
//! `str`. This module maps one onto the other without loss, so that bytes
//! that go in through a name or a write come out of a listing or a read as
//! they were.
//!
//! The mapping: valid UTF-8 is kept as it is, except the 128 private-use
//! characters U+F780..=U+F7FF and the characters whose UTF-8 holds the byte
//! 0xA0; each byte that is not part of valid UTF-8, and each byte of one of
//! those characters, becomes the character U+F700 + byte. So [`text`] is
//! injective and [`bytes`] inverts it. Every 0xA0 byte is thus the one
//! character [`BYTE_A0`], which parsers that follow the kernel's `isspace()`
//! count as a space, as the kernel does (lib/ctype.c). Texts that are valid
//! UTF-8 without those characters (all that monfs makes itself) are
//! borrowed unchanged in both directions.

use std::borrow::Cow;

/// The private-use characters that stand for one byte each.
const ESCAPES: std::ops::RangeInclusive<char> = '\u{F780}'..='\u{F7FF}';
const BASE: u32 = 0xF700;

/// The text of the byte 0xA0, a space to the kernel's `isspace()`.
pub const BYTE_A0: char = '\u{F7A0}';

/// Whether `s` holds any of the characters that [`bytes`] turns into a byte.
fn has_escape(s: &str) -> bool {
    // U+F780..=U+F7FF are EF 9E 80..=EF 9F BF in UTF-8.
    s.as_bytes()
        .windows(2)
        .any(|w| w[0] == 0xEF && (w[1] == 0x9E || w[1] == 0x9F))
}

fn escape(b: u8) -> char {
    char::from_u32(BASE + u32::from(b)).expect("U+F780..=U+F7FF are characters")
}

/// The text that stands for the bytes `b`.
pub fn text(b: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(b) {
        if !has_escape(s) && !b.contains(&0xA0) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(b.len() + 8);
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            let mut u = [0; 4];
            let enc = c.encode_utf8(&mut u);
            if ESCAPES.contains(&c) || enc.as_bytes().contains(&0xA0) {
                out.extend(enc.bytes().map(escape));
            } else {
                out.push(c);
            }
        }
        out.extend(chunk.invalid().iter().map(|&b| escape(b)));
    }
    Cow::Owned(out)
}

/// The bytes that the text `s` stands for (the inverse of [`text`]).
pub fn bytes(s: &str) -> Cow<'_, [u8]> {
    if !has_escape(s) {
        return Cow::Borrowed(s.as_bytes());
    }
    let mut out = Vec::with_capacity(s.len());
    for c in s.chars() {
        if ESCAPES.contains(&c) {
            out.push((u32::from(c) - BASE) as u8);
        } else {
            let mut u = [0; 4];
            out.extend_from_slice(c.encode_utf8(&mut u).as_bytes());
        }
    }
    Cow::Owned(out)
}

/// [`bytes`] of an owned text, without a copy when nothing is mapped.
pub fn into_bytes(s: String) -> Vec<u8> {
    match bytes(&s) {
        Cow::Borrowed(_) => s.into_bytes(),
        Cow::Owned(v) => v,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_without_escapes_is_borrowed_both_ways() {
        for s in ["", "sched_switch", "naïve ✓", "\u{F77F}\u{F840}"] {
            assert!(matches!(text(s.as_bytes()), Cow::Borrowed(t) if t == s));
            assert!(matches!(bytes(s), Cow::Borrowed(b) if b == s.as_bytes()));
        }
    }

    #[test]
    fn any_bytes_round_trip_and_distinct_bytes_stay_distinct() {
        let cases: &[&[u8]] = &[
            b"\xff",
            b"ev\x80\xfe",
            "\u{F780}".as_bytes(),
            b"\xef\x9e",
            b"a\xc3",
            b"\xc3\xa9\xed\xa0\x80",
            "à".as_bytes(),
            b"\xc3\xa0\xa0",
            "x\u{F7FF}y\u{F780}".as_bytes(),
        ];
        let mut seen = std::collections::HashSet::new();
        for &b in cases {
            let t = text(b).into_owned();
            assert_eq!(&*bytes(&t), b, "{t:?}");
            assert!(seen.insert(t), "two byte strings map to one text");
        }
        // Every single byte and every pair.
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                let v = [a, b];
                assert_eq!(&*bytes(&text(&v)), &v);
            }
        }
        assert_eq!(text(b"a\xff"), "a\u{F7FF}");
        // 0xA0 is one character wherever it is, alone or inside "à".
        assert_eq!(text(b"\xa0"), BYTE_A0.to_string());
        assert_eq!(text("à".as_bytes()), "\u{F7C3}\u{F7A0}");
        assert_eq!(&*bytes("\u{F7C3}\u{F7A0}"), "à".as_bytes());
        assert_eq!(into_bytes("a\u{F7FF}".into()), b"a\xff");
    }
}
