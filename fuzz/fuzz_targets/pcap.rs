//! pcap and pcapng capture parsing and decoding into URB events.
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use monfs::capture::read::parse_records;

fuzz_target!(|data: &[u8]| {
    let _ = parse_records(Path::new("fuzz.pcap"), data);
});
