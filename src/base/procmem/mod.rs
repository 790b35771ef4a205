//! Other processes' memory: the one place monfs reads or writes it.
//!
//! Two kinds of target, two rules:
//!
//! * **The caller of a request** ([`ProcessMemory`]): an ioctl argument that
//!   holds pointers. The calling thread is blocked in the request until it is
//!   answered (the kernel waits uninterruptibly once the daemon has read the
//!   request), so its pid cannot be reused or its image replaced meanwhile,
//!   and `process_vm_readv`/`process_vm_writev` on that pid reach exactly it.
//! * **A producer that registered an enable bit** ([`Mm`]): it runs freely
//!   and may fork, exec or exit at any time. Registration pins its address
//!   space (`/proc/<tid>/mem` opened while the registering thread is blocked
//!   in the ioctl, as the kernel takes an `mm` reference). Writes go through
//!   that descriptor: after an exec or exit they write nothing (the old
//!   address space is gone) and are never redirected to a new image or to a
//!   process that reused the pid.
//!
//! Neither may wedge the daemon. A page backed by a FUSE file (this mount or
//! another, perhaps stalled one) can only be faulted in by that file
//! system's daemon, and a userfaultfd page by its handler. So before each
//! access the target range's mappings are checked ([`check_range`], one
//! `PROCMAP_QUERY` ioctl per mapping on Linux 6.11+, `/proc/<pid>/maps`
//! before): unmapped, or backed by a FUSE file system, is EFAULT, as the
//! kernel answers a bad address. Where the kernel refuses monfs the access
//! itself (a daemon without root reaching a process of another user, a
//! non-dumpable one, or any process it is not the ancestor of under Yama's
//! `ptrace_scope` 1 or more: see [`ptrace_restriction`]), the answer is
//! EPERM (`denied`). Writes to registered producers also run on
//! a small worker pool with a deadline ([`run_bounded`]); a worker that is
//! still stuck then is abandoned and its address space marked stuck, so no
//! request thread ever waits on a remote page without bound.

pub use bounded::*;
pub use caller::*;
pub use maps::*;
pub use mm::*;
pub use procfs::*;
pub use watch::*;

mod bounded;
mod caller;
mod maps;
mod mm;
mod procfs;
mod watch;

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::base::errno::Errno;

    #[test]
    fn stat_cpu_is_field_39_counted_past_the_name() {
        let tail = (4..=52)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(" ");
        // Field 39 holds "39" here; names with spaces and `)` do not shift it.
        for name in ["cat", "a b) c", ")"] {
            let line = format!("123 ({name}) S {tail}\n");
            assert_eq!(parse_stat_cpu(line.as_bytes()), Some(39), "{line}");
        }
        assert_eq!(parse_stat_cpu(b"123 (x) S 1 2"), None);
        assert_eq!(parse_stat_cpu(b""), None);
    }

    #[test]
    fn cpu_of_this_thread_is_where_it_runs() {
        // Pinned, this thread's last CPU is the one it is pinned to.
        let mut set = nix::sched::CpuSet::new();
        let cpu = nix::sched::sched_getcpu().unwrap();
        set.set(cpu).unwrap();
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).unwrap();
        // SAFETY: gettid cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        assert_eq!(cpu_of(tid), Some(cpu as u32));
        assert_eq!(cpu_of(u32::MAX), None);
    }

    #[test]
    fn fd_nonblock_follows_fcntl() {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        let f = tempfile::tempfile_in("/dev/shm").unwrap();
        let md = f.metadata().unwrap();
        let (pid, dev, ino) = (std::process::id(), md.dev(), md.ino());
        let mut hint = None;
        assert_eq!(fd_nonblock(pid, dev, ino, &mut hint), Some(false));
        assert!(hint.is_some());
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(f.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK) };
        // Through the hint, and without it.
        assert_eq!(fd_nonblock(pid, dev, ino, &mut hint), Some(true));
        assert_eq!(fd_nonblock(pid, dev, ino, &mut None), Some(true));
        assert_eq!(fd_nonblock(pid, dev, ino + 1, &mut None), None);
        // A hint whose descriptor now refers to another file is not
        // believed: the file is looked for again.
        let g = tempfile::tempfile_in("/dev/shm").unwrap();
        let gi = g.metadata().unwrap().ino();
        let mut stale = hint.clone();
        assert_eq!(fd_nonblock(pid, dev, gi, &mut stale), Some(false));
        assert_ne!(stale.unwrap().fd, hint.unwrap().fd);
    }

    #[test]
    fn read_and_write_own_memory() {
        let pid = std::process::id();
        let mut target = [0u8; 16];
        write(pid, target.as_mut_ptr() as u64, b"hello").unwrap();
        // SAFETY: volatile read of our own buffer after the kernel wrote it.
        let got = unsafe { std::ptr::read_volatile(&target) };
        assert_eq!(&got[..5], b"hello");
        assert_eq!(read(pid, target.as_ptr() as u64, 5).unwrap(), b"hello");
        assert_eq!(read(pid, 0, 4).err(), Some(Errno::EFAULT));
        assert_eq!(read(pid, 8, 4).err(), Some(Errno::EFAULT));
        assert_eq!(write(pid, 8, b"x").err(), Some(Errno::EFAULT));
    }

    #[test]
    fn check_range_follows_mappings_and_protections() {
        let pid = std::process::id();
        let buf = vec![0u8; 3 * 4096];
        let at = buf.as_ptr() as u64;
        check_range(pid, at, buf.len() as u64, Access::Write).unwrap();
        // Code is readable, not writable.
        let code = check_range_follows_mappings_and_protections as *const () as u64;
        check_range(pid, code, 1, Access::Read).unwrap();
        assert_eq!(check_range(pid, code, 1, Access::Write), Err(Errno::EFAULT));
        assert_eq!(check_range(pid, 4096, 1, Access::Read), Err(Errno::EFAULT));
        assert_eq!(
            check_range(pid, u64::MAX - 1, 4, Access::Read),
            Err(Errno::EFAULT)
        );
        // The /proc/<pid>/maps fallback agrees with PROCMAP_QUERY.
        let v = maps_vmas(pid, at, at + 1).unwrap();
        assert!(v.len() == 1 && v[0].start <= at && v[0].end > at && v[0].writable);
    }

    #[test]
    fn maps_line_parse() {
        let v = parse_maps_line("7f00-7f10 r-xp 00000000 00:2a 1234   /x").unwrap();
        assert_eq!(
            (v.start, v.end, v.readable, v.writable),
            (0x7f00, 0x7f10, true, false)
        );
        assert_eq!((v.dev, v.inode), ((0, 0x2a), 1234));
        assert!(is_fuse_fstype("fuse.sshfs") && is_fuse_fstype("fuse") && !is_fuse_fstype("tmpfs"));
    }

    #[test]
    fn bit_positions() {
        assert_eq!(bit_byte(0x1000, 31, 4), (0x1003, 0x80));
        assert_eq!(bit_byte(0x1000, 0, 8), (0x1000, 1));
        assert_eq!(bit_byte(0x1000, 63, 8), (0x1007, 0x80));
    }

    #[test]
    fn pinned_mm_writes_and_sees_its_end() {
        let mut word = 0u32;
        let addr = &mut word as *mut u32 as u64;
        let mm = Mm::pin(std::process::id()).unwrap();
        assert!(mm.alive());
        mm.set_bit(addr, 5, 4, true).unwrap();
        // SAFETY: volatile read of our own word after the kernel wrote it.
        assert_eq!(unsafe { std::ptr::read_volatile(&word) }, 1 << 5);
        mm.set_bit(addr, 5, 4, false).unwrap();
        assert_eq!(unsafe { std::ptr::read_volatile(&word) }, 0);
        assert_eq!(mm.set_bit(8, 0, 4, true), Err(MmError::Fault));
        // A child that exits: its pinned address space is gone. It is
        // pinned once it says it runs (past its exec, whose new image
        // pinning would otherwise race).
        let mut child = std::process::Command::new("sh")
            .args(["-c", "echo ready; read x"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "ready\n");
        let cm = Mm::pin(child.id()).unwrap();
        assert!(cm.alive());
        drop(child.stdin.take());
        child.wait().unwrap();
        assert!(!cm.alive());
        assert_eq!(cm.set_bit(addr, 0, 4, true), Err(MmError::Gone));
    }

    #[test]
    fn bounded_runs_jobs_and_abandons_slow_ones() {
        assert_eq!(run_bounded(|| 1, Duration::from_secs(5)), Ok(1));
        // A job that cannot finish before it is let go: given up on, not
        // waited for.
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let d = done.clone();
        let slow = run_bounded(
            move || {
                let _ = wait.recv();
                d.store(true, std::sync::atomic::Ordering::SeqCst);
            },
            Duration::from_millis(300),
        );
        assert_eq!(slow, Err(Unfinished::TimedOut));
        assert!(!done.load(std::sync::atomic::Ordering::SeqCst));
        go.send(()).unwrap();
        // Another worker serves the next job meanwhile.
        assert_eq!(run_bounded(|| 3, Duration::from_secs(5)), Ok(3));
    }

    /// Issue 37: the deadline is each step's, not the whole series's, and
    /// a worker that only waits for a CPU (runnable) is not stuck; one
    /// asleep without progress is.
    #[test]
    fn watched_jobs_are_judged_by_their_stalls_alone() {
        let step = Duration::from_millis(100);
        let timeout = Duration::from_millis(300);
        let progress = Arc::new(AtomicUsize::new(0));
        let p = progress.clone();
        // Ten quick steps, a second in all.
        let series = run_watched(
            move || {
                for k in 1..=10 {
                    std::thread::sleep(step);
                    p.store(k, Ordering::SeqCst);
                }
                10
            },
            timeout,
            &progress,
        );
        assert_eq!(series, Ok(10));
        // Busy for a second without progress, but running all along.
        let busy = run_watched(
            || {
                let t = Instant::now();
                let mut x = 0u64;
                while t.elapsed() < Duration::from_secs(1) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                7
            },
            timeout,
            &Arc::new(AtomicUsize::new(0)),
        );
        assert_eq!(busy, Ok(7));
        // Asleep without progress: stuck.
        let asleep = run_watched(
            || std::thread::sleep(Duration::from_secs(2)),
            timeout,
            &Arc::new(AtomicUsize::new(0)),
        );
        assert_eq!(asleep, Err(Unfinished::TimedOut));
    }
}
