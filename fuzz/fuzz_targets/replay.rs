//! The whole capture decoder: pcap/pcapng bytes to replayable URB events
//! (container parsing, then every usbmon packet through the decoder).
#![no_main]
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use monfs::capture::decode::Capture;
use monfs::capture::read::parse_records;

fuzz_target!(|data: &[u8]| {
    let path = Path::new("fuzz.pcap");
    if let Ok((_, records)) = parse_records(path, data) {
        let _ = Capture::from_records(path, &records);
    }
});
