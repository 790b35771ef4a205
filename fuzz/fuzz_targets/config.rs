//! The YAML configuration: any input parses or fails with a positioned error.
#![no_main]
use libfuzzer_sys::fuzz_target;
use monfs::config::{Config, ConfigError};

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::parse(text, "fuzz.yaml") {
        Ok(_) => {}
        Err(ConfigError::Invalid { line, column, .. }) => {
            assert!(line >= 1 && column >= 1);
        }
        Err(ConfigError::Io { .. }) => unreachable!("no I/O when parsing text"),
    }
});
