//! The set_event grammar: tokenising a write and matching a token.
#![no_main]
use libfuzzer_sys::fuzz_target;
use monfs::tracefs::parse::{next_token, parse_match};

fuzz_target!(|data: &[u8]| {
    let mut rest = data;
    while !rest.is_empty() {
        let Ok((used, tok)) = next_token(rest) else {
            break;
        };
        if let Some(t) = tok.and_then(|t| std::str::from_utf8(t).ok()) {
            if let Some(m) = parse_match(t) {
                let _ = m.matches("usb", "usb_urb_submit");
            }
        }
        if used == 0 {
            break;
        }
        rest = &rest[used.min(rest.len())..];
    }
});
