//! Event filter expressions, parsed against a real event's fields.
#![no_main]
use std::sync::{Arc, LazyLock};

use libfuzzer_sys::fuzz_target;
use monfs::base::clock::VirtualClock;
use monfs::tracefs::{filter, Tracing, TracingConfig};

static TRACING: LazyLock<Arc<Tracing>> =
    LazyLock::new(|| Tracing::new(Arc::new(VirtualClock::new()), &TracingConfig::default()));

fuzz_target!(|data: &[u8]| {
    // Any bytes, as a write to `filter` gives them.
    let text = filter::clean(data);
    let id = TRACING
        .event_id("usb", "usb_urb_complete")
        .expect("built-in event");
    let lookup = filter::event_lookup(id.def());
    match filter::parse(text, &lookup) {
        Ok(_) => {}
        Err(e) => {
            let _ = filter::error_text(text, &e);
        }
    }
});
