//! The callers: capabilities as the kernel counts them, and strings read from
//! a caller's memory.

use super::*;

/// Whether `pid` has CAP_PERFMON (38) or CAP_SYS_ADMIN (21) as the
/// kernel's `perfmon_capable()` counts them: in the initial user namespace.
/// `CapEff` is relative to the process's own user namespace (a process after
/// `unshare -Ur` has every bit), so the process must also share monfs's
/// user namespace, the initial one when monfs runs as root on the host.
pub(super) fn has_perfmon(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ns = |p: &str| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let same_ns = match (
        ns(&format!("/proc/{pid}/ns/user")),
        ns("/proc/self/ns/user"),
    ) {
        (Some(a), Some(b)) => a == b,
        // A kernel without user namespaces (no CONFIG_USER_NS, as a
        // tinyconfig one): everyone is in the initial namespace.
        (_, None) => true,
        _ => false,
    };
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    same_ns
        && status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .is_some_and(|c| c & ((1 << 38) | (1 << 21)) != 0)
}

/// Read a NUL-terminated string of at most `MAX_EVENT_DESC - 1` bytes, any
/// bytes, as [`crate::base::bytestr`] text: EINVAL when longer, EFAULT when
/// unreadable.
pub(super) fn read_desc(mem: &dyn CallerMemory, addr: u64) -> SysResult<String> {
    read_desc_bytes(mem, addr).map(|b| crate::base::bytestr::text(&b).into_owned())
}

/// [`read_desc`]'s bytes.
fn read_desc_bytes(mem: &dyn CallerMemory, addr: u64) -> SysResult<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < MAX_EVENT_DESC {
        let chunk = (PAGE_SIZE - (at as usize % PAGE_SIZE)).min(MAX_EVENT_DESC - out.len());
        let part = mem.read(at, chunk)?;
        if let Some(p) = part.iter().position(|&b| b == 0) {
            out.extend_from_slice(&part[..p]);
            return Ok(out);
        }
        out.extend_from_slice(&part);
        at += chunk as u64;
    }
    Err(Errno::EINVAL)
}
