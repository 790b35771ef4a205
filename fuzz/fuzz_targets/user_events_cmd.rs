//! The user_events command grammar `name[:FLAGS] [field[;field...]]`.
#![no_main]
use libfuzzer_sys::fuzz_target;
use monfs::tracefs::user_events::{parse_command, parse_fields};

fuzz_target!(|data: &[u8]| {
    // Any bytes, as the kernel takes them, in monfs's lossless text.
    let text = monfs::base::bytestr::text(data);
    let _ = parse_command(&text);
    let _ = parse_fields(&text);
});
