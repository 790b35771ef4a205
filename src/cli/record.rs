//! `monfs record`: a bus of a running mount (or a real `/dev/usbmonN`) into
//! a capture file, read from any process with `MON_IOCX_GETX` as tcpdump
//! reads it.

use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::signals::CatchInterrupts;
use crate::capture::write::{create_output, CaptureWriter, Format, LinkType, RECORD_RING};
use crate::usbmon::binary::ioc;
use crate::usbmon::header::PKT_SZ_API1;

/// `struct mon_bin_get`.
#[repr(C)]
struct MonBinGet {
    hdr: *mut u8,
    data: *mut u8,
    alloc: libc::size_t,
}

nix::ioctl_write_int_bad!(mon_set_ring_size, ioc::T_RING_SIZE);
nix::ioctl_write_ptr_bad!(mon_getx, ioc::GETX, MonBinGet);
nix::ioctl_read_bad!(mon_stats, ioc::STATS, [u32; 2]);

/// Record `dev_path` (a `dev/usbmonN` file of a mount, or a real
/// `/dev/usbmonN`) to `out` (`-`: standard output, e.g. into
/// `wireshark -k -i -`) until `duration` has passed, or until SIGINT or
/// SIGTERM (handled while this runs). Works from any process: it reads with
/// `MON_IOCX_GETX` (64-byte headers) after `poll`, with a 1200 KiB ring.
/// Returns the number of packets written; drops reported by the device are
/// logged.
pub fn record_from_device(
    dev_path: &Path,
    out: &Path,
    duration: Option<Duration>,
    format: Format,
) -> anyhow::Result<u64> {
    use anyhow::Context;
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::fs::OpenOptionsExt;

    let dev = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(dev_path)
        .with_context(|| format!("opening {}", dev_path.display()))?;
    let fd = dev.as_raw_fd();
    // SAFETY: a by-value ioctl on our own descriptor.
    let _ = unsafe { mon_set_ring_size(fd, RECORD_RING as libc::c_int) };
    let bus = dev_path
        .file_name()
        .and_then(|n| n.to_str())
        .and_then(|n| n.strip_prefix("usbmon"))
        .unwrap_or("0")
        .to_string();
    let f: Box<dyn Write> = if out == Path::new("-") {
        Box::new(io::stdout())
    } else {
        Box::new(create_output(out).with_context(|| format!("creating {}", out.display()))?)
    };
    let mut w = CaptureWriter::new(
        BufWriter::new(f),
        format,
        LinkType::Mmapped,
        &format!("usbmon{bus}"),
    )
    .with_context(|| format!("writing {}", out.display()))?;

    let signals = CatchInterrupts::install().context("catching SIGINT and SIGTERM")?;
    let result = (|| -> anyhow::Result<()> {
        let deadline = duration.map(|d| Instant::now() + d);
        let mut hdr = [0u8; PKT_SZ_API1];
        let mut data = vec![0u8; RECORD_RING / 5 + 128 * 16];
        loop {
            if signals.interrupted() {
                return Ok(());
            }
            let wait_ms = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(());
                    }
                    left.as_millis().min(200) as i32
                }
                None => 200,
            };
            let mut pfd = [PollFd::new(dev.as_fd(), PollFlags::POLLIN)];
            match poll(&mut pfd, PollTimeout::from(wait_ms.max(1) as u16)) {
                Err(Errno::EINTR) | Ok(0) => continue,
                Err(e) => return Err(e).context("poll"),
                Ok(_) => {}
            }
            loop {
                let get = MonBinGet {
                    hdr: hdr.as_mut_ptr(),
                    data: data.as_mut_ptr(),
                    alloc: data.len(),
                };
                // SAFETY: the kernel (or monfs) writes at most 64 bytes to
                // hdr and `alloc` bytes to data, both ours.
                match unsafe { mon_getx(fd, &get) } {
                    Ok(_) => {}
                    Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(e).context(format!("MON_IOCX_GETX on {}", dev_path.display()))
                    }
                }
                let len_cap = u32::from_ne_bytes(hdr[36..40].try_into().unwrap()) as usize;
                let n = len_cap.min(data.len());
                let sec = i64::from_ne_bytes(hdr[16..24].try_into().unwrap());
                let usec = i32::from_ne_bytes(hdr[24..28].try_into().unwrap());
                let ts = (sec.max(0) as u64) * 1_000_000_000 + (usec.max(0) as u64) * 1000;
                let mut pkt = Vec::with_capacity(PKT_SZ_API1 + n);
                pkt.extend_from_slice(&hdr);
                pkt.extend_from_slice(&data[..n]);
                w.write_packet(ts, &pkt)
                    .with_context(|| format!("writing {}", out.display()))?;
            }
            // Readers of a pipe (wireshark -k -i -) see each batch at once.
            w.flush()
                .with_context(|| format!("writing {}", out.display()))?;
        }
    })();
    drop(signals);
    let mut stats = [0u32; 2];
    // SAFETY: MON_IOCG_STATS writes 8 bytes into `stats`.
    if unsafe { mon_stats(fd, &mut stats) }.is_ok() && stats[1] != 0 {
        tracing::warn!(
            "{}: {} events dropped by the device",
            dev_path.display(),
            stats[1]
        );
    }
    result?;
    let n = w.packets();
    w.finish()
        .and_then(|b| b.into_inner().map_err(|e| e.into_error()))
        .and_then(|mut f| f.flush())
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(n)
}
