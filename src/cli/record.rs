//! `monfs record`: a bus of a running mount (or a real `/dev/usbmonN`) into
//! a capture file, read from any process with `MON_IOCX_GETX` as tcpdump
//! reads it.

use std::io::{self, BufWriter, Write};
use std::os::fd::OwnedFd;
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

/// What a recording wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recorded {
    /// Packets written.
    pub packets: u64,
    /// The output was a pipe (or socket) whose reader went away, which ends
    /// a recording as a normal end (`| head`, `| tshark -c 3`), as tcpdump
    /// ends: the file is as complete as the reader wanted it. Drops are then
    /// logged at debug level only.
    pub reader_gone: bool,
}

/// Whether `e` is, somewhere in its chain, a write to a pipe or socket
/// that nobody reads any more (EPIPE).
fn broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<io::Error>()
            .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    })
}

/// The output `out`: standard output for `-`; a FIFO (a named pipe, or
/// `/dev/stdout` when that is a pipe) opened for blocking writes, through
/// symlinks; anything else as [`create_output`] takes it (a regular file or
/// a character device, never through a symlink). With it, a descriptor to
/// poll for the reader going away where the output is a pipe.
fn open_output(out: &Path) -> io::Result<(Box<dyn Write>, Option<OwnedFd>)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::FileTypeExt;
    let fifo = |fd: std::os::fd::BorrowedFd<'_>| -> io::Result<Option<OwnedFd>> {
        let st = nix::sys::stat::fstat(fd).map_err(io::Error::from)?;
        if st.st_mode & libc::S_IFMT == libc::S_IFIFO {
            Ok(Some(fd.try_clone_to_owned()?))
        } else {
            Ok(None)
        }
    };
    if out == Path::new("-") {
        let watch = fifo(io::stdout().as_fd())?;
        return Ok((Box::new(io::stdout()), watch));
    }
    if std::fs::metadata(out).is_ok_and(|m| m.file_type().is_fifo()) {
        let f = std::fs::OpenOptions::new().write(true).open(out)?;
        let watch = fifo(f.as_fd())?;
        return Ok((Box::new(f), watch));
    }
    Ok((Box::new(create_output(out)?), None))
}

/// Record `dev_path` (a `dev/usbmonN` file of a mount, or a real
/// `/dev/usbmonN`) to `out` (`-`: standard output, e.g. into
/// `wireshark -k -i -`) until `duration` has passed, or until SIGINT or
/// SIGTERM (handled while this runs). Works from any process: it reads with
/// `MON_IOCX_GETX` (64-byte headers) after `poll`, with a 1200 KiB ring.
/// Returns the number of packets written; drops reported by the device are
/// logged. [`record`] tells besides whether a pipe's reader ended it.
pub fn record_from_device(
    dev_path: &Path,
    out: &Path,
    duration: Option<Duration>,
    format: Format,
) -> anyhow::Result<u64> {
    record(dev_path, out, duration, format).map(|r| r.packets)
}

/// [`record_from_device`], which also ends, as a normal end, when the
/// reader of the pipe (or socket) it writes goes away.
pub fn record(
    dev_path: &Path,
    out: &Path,
    duration: Option<Duration>,
    format: Format,
) -> anyhow::Result<Recorded> {
    use anyhow::Context;
    use std::os::fd::{AsFd, AsRawFd};
    use std::os::unix::fs::OpenOptionsExt;

    // A write to a pipe nobody reads must fail with EPIPE, which ends the
    // recording, rather than kill the process: Rust programs start so, and
    // this keeps it so whatever the caller's disposition.
    // SAFETY: ignoring a signal installs no handler.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };

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
    let (f, watch) = open_output(out).with_context(|| format!("creating {}", out.display()))?;
    let gone = Recorded {
        packets: 0,
        reader_gone: true,
    };
    // The file's header at once: a reader of a pipe (wireshark -k -i -)
    // starts with it, before the first packet.
    let mut w = match CaptureWriter::new(
        BufWriter::new(f),
        format,
        LinkType::Mmapped,
        &format!("usbmon{bus}"),
    )
    .and_then(|mut w| w.flush().map(|()| w))
    .with_context(|| format!("writing {}", out.display()))
    {
        Ok(w) => w,
        Err(e) if broken_pipe(&e) => return Ok(gone),
        Err(e) => return Err(e),
    };

    let signals = CatchInterrupts::install().context("catching SIGINT and SIGTERM")?;
    // Ok(true): the reader of the output went away.
    let result = (|| -> anyhow::Result<bool> {
        let deadline = duration.map(|d| Instant::now() + d);
        let mut hdr = [0u8; PKT_SZ_API1];
        let mut data = vec![0u8; RECORD_RING / 5 + 128 * 16];
        loop {
            if signals.interrupted() {
                return Ok(false);
            }
            let wait_ms = match deadline {
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    left.as_millis().min(200) as i32
                }
                None => 200,
            };
            // A pipe's reader going away shows as POLLERR on the output,
            // which ends the recording even while the bus is quiet.
            let mut pfd = vec![PollFd::new(dev.as_fd(), PollFlags::POLLIN)];
            if let Some(o) = &watch {
                pfd.push(PollFd::new(o.as_fd(), PollFlags::empty()));
            }
            match poll(&mut pfd, PollTimeout::from(wait_ms.max(1) as u16)) {
                Err(Errno::EINTR) | Ok(0) => continue,
                Err(e) => return Err(e).context("poll"),
                Ok(_) => {}
            }
            let hangup = PollFlags::POLLERR | PollFlags::POLLHUP;
            if pfd
                .get(1)
                .and_then(|p| p.revents())
                .is_some_and(|r| r.intersects(hangup))
            {
                return Ok(true);
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
    let result = match result {
        Err(e) if broken_pipe(&e) => Ok(true),
        r => r,
    };
    let mut stats = [0u32; 2];
    // SAFETY: MON_IOCG_STATS writes 8 bytes into `stats`.
    if unsafe { mon_stats(fd, &mut stats) }.is_ok() && stats[1] != 0 {
        let what = format!(
            "{}: {} events dropped by the device",
            dev_path.display(),
            stats[1]
        );
        // A reader that left (`| tshark -c 3`) is usually slow to start,
        // and the ring fills while the pipe is full: nobody is left to
        // care, so that end stays quiet.
        if matches!(result, Ok(true)) {
            tracing::debug!("{what} (the reader went away)");
        } else {
            tracing::warn!("{what}");
        }
    }
    let reader_gone = result?;
    let packets = w.packets();
    if reader_gone {
        // Whatever is still buffered has nowhere to go.
        return Ok(Recorded {
            packets,
            reader_gone,
        });
    }
    let finished = w
        .finish()
        .and_then(|b| b.into_inner().map_err(|e| e.into_error()))
        .and_then(|mut f| f.flush());
    match finished {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
            return Ok(Recorded {
                packets,
                reader_gone: true,
            })
        }
        Err(e) => return Err(e).with_context(|| format!("writing {}", out.display())),
    }
    Ok(Recorded {
        packets,
        reader_gone: false,
    })
}
