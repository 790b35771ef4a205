//! The user_events command grammar `name[:FLAGS] [field[;field...]]`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use monfs::tracefs::user_events::{parse_command, parse_fields};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = parse_command(text);
    let _ = parse_fields(text);
});
