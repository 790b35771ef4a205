//! /proc lookups about open files: which processes map a file, and whether
//! a process's descriptor of it is non-blocking (`/proc/<pid>/fdinfo`).

/// Whether process `pid` has a shared mapping of the file with device `dev`
/// and inode `ino` (read from `/proc/<pid>/maps`).
pub fn has_shared_mapping(pid: u32, dev: u64, ino: u64) -> bool {
    has_mapping_where(pid, dev, ino, true)
}

/// Whether process `pid` has any mapping, shared or private, of the file
/// with device `dev` and inode `ino`.
pub fn has_mapping(pid: u32, dev: u64, ino: u64) -> bool {
    has_mapping_where(pid, dev, ino, false)
}

fn has_mapping_where(pid: u32, dev: u64, ino: u64, shared_only: bool) -> bool {
    // Inode 0 names no file: anonymous mappings show it.
    if ino == 0 {
        return false;
    }
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return false;
    };
    let want_dev = format!("{:02x}:{:02x}", libc::major(dev), libc::minor(dev));
    maps.lines().any(|l| {
        let mut w = l.split_whitespace();
        let (_range, perms, _off, d, i) = (w.next(), w.next(), w.next(), w.next(), w.next());
        perms.is_some_and(|p| !shared_only || p.ends_with('s'))
            && d == Some(want_dev.as_str())
            && i.and_then(|i| i.parse::<u64>().ok()) == Some(ino)
    })
}

/// Whether any process has a shared mapping of the file with device `dev`
/// and inode `ino` (every `/proc/<pid>/maps` is read: for rare questions,
/// such as whether a resize of a mapped trace buffer must be refused).
pub fn any_shared_mapping(dev: u64, ino: u64) -> bool {
    any_process(|pid| has_shared_mapping(pid, dev, ino))
}

/// Whether any process has any mapping, shared or private, of the file
/// with device `dev` and inode `ino` (every `/proc/<pid>/maps` is read).
pub fn any_mapping(dev: u64, ino: u64) -> bool {
    any_process(|pid| has_mapping(pid, dev, ino))
}

fn any_process(f: impl Fn(u32) -> bool) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return false;
    };
    dir.flatten().any(|d| {
        d.file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(&f)
    })
}

/// Where [`fd_nonblock`] found a file last time: the process, the
/// descriptor and the mounts of the device, so that the next question reads
/// one `fdinfo` file instead of the process's mount table and every
/// descriptor (a blocked `MON_IOCX_MFETCH` of tcpdump asks on every batch
/// that finds the ring empty).
#[derive(Clone, Debug, Default)]
pub struct FdHint {
    pid: u32,
    pub(super) fd: std::ffi::OsString,
    mnt_ids: Vec<String>,
}

/// The `O_NONBLOCK` of the descriptor whose `fdinfo` text is `info`, if it
/// is the file `ino` on one of `mnt_ids`.
fn fdinfo_nonblock(info: &str, ino: u64, mnt_ids: &[String]) -> Option<bool> {
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim())
    };
    if field("ino:").and_then(|v| v.parse::<u64>().ok()) != Some(ino)
        || !field("mnt_id:").is_some_and(|m| mnt_ids.iter().any(|id| id == m))
    {
        return None;
    }
    let flags = i32::from_str_radix(field("flags:")?, 8).ok()?;
    Some(flags & libc::O_NONBLOCK != 0)
}

/// The current `O_NONBLOCK` of the open file of device `dev`, inode `ino` in
/// process `pid`: FUSE tells a filesystem the file flags on every read but not
/// on an ioctl, and `fcntl(F_SETFL)` may have changed them since open. Read
/// from `/proc/<pid>/fdinfo` (its `ino:` field needs Linux 5.14) with the
/// mounts of `dev` from `/proc/<pid>/mountinfo`. None if no descriptor of the
/// process refers to the file. `hint` remembers where it was found: while
/// that descriptor still refers to the file, only its `fdinfo` is read.
pub fn fd_nonblock(pid: u32, dev: u64, ino: u64, hint: &mut Option<FdHint>) -> Option<bool> {
    if let Some(h) = hint.as_ref().filter(|h| h.pid == pid) {
        let mut path = std::path::PathBuf::from(format!("/proc/{pid}/fdinfo"));
        path.push(&h.fd);
        if let Some(nb) = std::fs::read_to_string(path)
            .ok()
            .and_then(|info| fdinfo_nonblock(&info, ino, &h.mnt_ids))
        {
            return Some(nb);
        }
    }
    let want_dev = format!("{}:{}", libc::major(dev), libc::minor(dev));
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    let mnt_ids: Vec<String> = mounts
        .lines()
        .filter_map(|l| {
            let mut w = l.split(' ');
            let id = w.next()?;
            (w.nth(1)? == want_dev).then(|| id.to_string())
        })
        .collect();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fdinfo")).ok()? {
        let fd = fd.ok()?;
        let Ok(info) = std::fs::read_to_string(fd.path()) else {
            continue;
        };
        if let Some(nb) = fdinfo_nonblock(&info, ino, &mnt_ids) {
            *hint = Some(FdHint {
                pid,
                fd: fd.file_name(),
                mnt_ids,
            });
            return Some(nb);
        }
    }
    None
}
