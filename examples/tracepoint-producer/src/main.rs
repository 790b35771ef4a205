//! A user_events producer that uses the `tracepoint` crate unmodified.
//!
//! The crate opens `/sys/kernel/tracing/user_events_data` (falling back to
//! the tracefs line of `/proc/mounts`), registers with the 6.4+ ABI and lets
//! the kernel (here: monfs) flip the enable bit in `TracepointState`. So run
//! it where that path is monfs's tree:
//!
//! ```text
//! scripts/trace-ns MOUNT -- target/release/tracepoint-producer [COUNT] [INTERVAL_MS]
//! ```
//!
//! It registers `tp_rust u32 count; char[16] tag`, then COUNT times (default
//! 10, 0 = forever) checks the enable bit and writes one event only while
//! enabled; a disabled tracepoint costs one load and no syscall.

use std::pin::Pin;
use std::time::Duration;

use tracepoint::{EventDataDescriptor, TracepointState};

static TP: TracepointState = TracepointState::new(0);

fn main() {
    let mut args = std::env::args().skip(1);
    let count: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let interval: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    // SAFETY: TP is a static, so it is never deallocated while registered.
    let err = unsafe { Pin::static_ref(&TP).register(c"tp_rust u32 count; char[16] tag") };
    println!("register={err}");
    if err != 0 {
        std::process::exit(1);
    }
    let mut tag = [0u8; 16];
    tag[..7].copy_from_slice(b"tp-rust");
    let (mut writes, mut skipped) = (0u64, 0u64);
    let mut i = 0u64;
    while count == 0 || i < count {
        if TP.enabled() {
            let n = i as u32;
            let mut data = [
                EventDataDescriptor::zero(),
                EventDataDescriptor::from_value(&n),
                EventDataDescriptor::from_bytes(&tag),
            ];
            let e = TP.write(&mut data);
            if e != 0 {
                eprintln!("write: errno {e}");
            }
            writes += 1;
        } else {
            skipped += 1;
        }
        i += 1;
        std::thread::sleep(Duration::from_millis(interval));
    }
    println!("writes={writes} skipped={skipped}");
}
