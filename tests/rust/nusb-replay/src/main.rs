//! Drives the device 1234:5679 of tests/umockdev.rs's recordings with nusb:
//! finds it by enumeration (sysfs), opens it (`/dev/bus/usb`), claims
//! interface 0 and makes a vendor control IN request (bRequest 1, 16
//! bytes), a bulk OUT of 01020304 on 0x02, a bulk IN of 512 bytes on 0x81
//! and an interrupt IN of 4 bytes on 0x85. Prints one line a step; exits 1
//! at the first step that fails (`not found` when there is no such device).

use std::process::exit;
use std::time::Duration;

use nusb::transfer::{Buffer, Bulk, ControlIn, ControlType, In, Interrupt, Out, Recipient};
use nusb::MaybeFuture;

/// How long a step waits for its answer.
const WAIT: Duration = Duration::from_secs(10);

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn fail(what: &str, e: impl std::fmt::Display) -> ! {
    println!("{what} failed: {e}");
    exit(1)
}

fn main() {
    let found = match nusb::list_devices().wait() {
        Ok(mut l) => l.find(|d| d.vendor_id() == 0x1234 && d.product_id() == 0x5679),
        Err(e) => fail("list", e),
    };
    let Some(info) = found else {
        println!("not found");
        exit(1)
    };
    println!("found {} {}", info.busnum(), info.device_address());
    let dev = info.open().wait().unwrap_or_else(|e| fail("open", e));
    let intf = dev
        .claim_interface(0)
        .wait()
        .unwrap_or_else(|e| fail("claim", e));
    let data = intf
        .control_in(
            ControlIn {
                control_type: ControlType::Vendor,
                recipient: Recipient::Device,
                request: 1,
                value: 0,
                index: 0,
                length: 16,
            },
            WAIT,
        )
        .wait()
        .unwrap_or_else(|e| fail("control in", e));
    println!("control in {}", hex(&data));
    let mut out = intf
        .endpoint::<Bulk, Out>(0x02)
        .unwrap_or_else(|e| fail("bulk out", e));
    let c = out.transfer_blocking(Buffer::from(vec![1u8, 2, 3, 4]), WAIT);
    if let Err(e) = c.status {
        fail("bulk out", e);
    }
    println!("bulk out {}", c.actual_len);
    let mut bulk_in = intf
        .endpoint::<Bulk, In>(0x81)
        .unwrap_or_else(|e| fail("bulk in", e));
    let c = bulk_in.transfer_blocking(Buffer::new(512), WAIT);
    if let Err(e) = c.status {
        fail("bulk in", e);
    }
    println!("bulk in {}", hex(&c.buffer));
    let mut int_in = intf
        .endpoint::<Interrupt, In>(0x85)
        .unwrap_or_else(|e| fail("interrupt in", e));
    let c = int_in.transfer_blocking(Buffer::new(4), WAIT);
    if let Err(e) = c.status {
        fail("interrupt in", e);
    }
    println!("interrupt in {}", hex(&c.buffer));
}
