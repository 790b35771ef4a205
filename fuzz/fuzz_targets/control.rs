//! Control commands against a complete (unmounted, not started) monfs.
#![no_main]
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use monfs::config::Config;
use monfs::daemon::Monfs;

static FS: LazyLock<Monfs> = LazyLock::new(|| Monfs::new(&Config::builtin(), 0, 0, None));

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    // `replay start` reads files named in the command, and `wait` sleeps
    // (up to its timeout, for devices of a bus that is not started): not
    // what this target tests.
    if text.contains("replay") || text.contains("wait") {
        return;
    }
    let _ = FS.control.execute(text);
});
