//! Allowances for what callers make the daemon hold: memory for open
//! files' text snapshots and usbmon rings, usbmon readers, open files, and
//! the one memory budget of trace rings, hist maps and the simulated
//! topology ([`MEMORY`]).
//! The kernel bounds these by its own memory, charged to the caller (an
//! allocation that fails is ENOMEM; a process past `RLIMIT_NOFILE` gets
//! EMFILE); monfs, one process serving everyone, bounds them explicitly so
//! that no caller can exhaust the daemon's memory, and per user, so that
//! no user can starve another (issue 37).
//!
//! Each [`Budget`] has three limits: the whole (`limit`), what all
//! ordinary users together may hold (`users`, a part of the whole), and
//! what one ordinary user may hold (`per_user`). A request is charged to
//! its caller's uid, as the kernel charges an allocation to `current`: the
//! frontend names the payer for the request's duration ([`charge_to`]).
//! Root, the mount's owner and the daemon itself (work done outside any
//! request) are privileged: they count against the whole only, so
//! whatever ordinary users hold, at least `limit - users` stays for them.
//! Past a limit the request gets the budget's errno (ENOMEM, or EMFILE for
//! open files), and the log says which limit and whose (at most once a
//! second per budget). What a grant holds is given back to the account it
//! was charged to, whoever drops it.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use tracing::warn;

use crate::base::errno::{Errno, SysResult};
use crate::base::sync::LockExt;

/// Who pays for what a request makes the daemon hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payer {
    /// Root, the mount's owner, or the daemon itself: bounded by the
    /// budget's whole limit only.
    Privileged,
    /// An ordinary user, by uid: bounded by the per-user and all-users
    /// limits too.
    User(u32),
}

thread_local! {
    static PAYER: Cell<Payer> = const { Cell::new(Payer::Privileged) };
}

/// While alive, budgets taken on this thread are charged to a payer; the
/// previous payer comes back on drop.
pub struct Charge {
    prev: Payer,
}

/// Charge what this thread takes to the caller `uid` until the returned
/// guard drops; `privileged` for root and the mount's owner. The frontend
/// calls it around each request.
pub fn charge_to(uid: u32, privileged: bool) -> Charge {
    let payer = if privileged || uid == 0 {
        Payer::Privileged
    } else {
        Payer::User(uid)
    };
    Charge {
        prev: PAYER.with(|p| p.replace(payer)),
    }
}

/// The payer charged on this thread now.
pub fn payer() -> Payer {
    PAYER.with(Cell::get)
}

impl Drop for Charge {
    fn drop(&mut self) {
        PAYER.with(|p| p.set(self.prev));
    }
}

/// An allowance of some quantity (bytes, readers or files), whole and per user.
pub struct Budget {
    what: &'static str,
    errno: Errno,
    limit: AtomicUsize,
    users: AtomicUsize,
    per_user: AtomicUsize,
    used: AtomicUsize,
    /// Held by ordinary users: in all, and by uid (an entry goes when its
    /// user holds nothing).
    by_users: Mutex<(usize, Option<HashMap<u32, usize>>)>,
    /// Refusals are logged at most once a second.
    log: LogLimit,
    /// A budget this one's units are also charged to (bytes to
    /// [`MEMORY`]), with the same payer.
    parent: Option<&'static Budget>,
}

/// At most one log line a second for one kind of message (a refusal a
/// caller can repeat at will), counting the lines left out.
pub struct LogLimit {
    /// When a line was last let through (ms since the epoch).
    last_ms: AtomicU64,
    /// Lines left out since.
    suppressed: AtomicU64,
}

impl LogLimit {
    /// A limit that lets the first line through.
    pub const fn new() -> LogLimit {
        LogLimit {
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether a line may be logged now; if so, how many were left out
    /// since the last one.
    pub fn allow(&self) -> Option<u64> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let last = self.last_ms.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 1000
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Default for LogLimit {
    fn default() -> Self {
        LogLimit::new()
    }
}

/// A share of a [`Budget`], given back on drop to the account it came from.
pub struct Grant {
    budget: &'static Budget,
    payer: Payer,
    n: usize,
}

impl Budget {
    /// An allowance of `limit` units of `what` (named in log lines), of
    /// which ordinary users together may hold `users` and each `per_user`;
    /// past a limit, ENOMEM.
    pub const fn new(what: &'static str, limit: usize, users: usize, per_user: usize) -> Budget {
        Budget {
            what,
            errno: Errno::ENOMEM,
            limit: AtomicUsize::new(limit),
            users: AtomicUsize::new(users),
            per_user: AtomicUsize::new(per_user),
            used: AtomicUsize::new(0),
            by_users: Mutex::new((0, None)),
            log: LogLimit::new(),
            parent: None,
        }
    }

    /// The same, each unit also charged to `parent` (a budget of bytes
    /// within [`MEMORY`]): a take fits only if it fits in both.
    pub const fn within(mut self, parent: &'static Budget) -> Budget {
        self.parent = Some(parent);
        self
    }

    /// The same, answering `errno` past a limit.
    pub const fn with_errno(mut self, errno: Errno) -> Budget {
        self.errno = errno;
        self
    }

    /// The whole limit.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// What all ordinary users together may hold.
    pub fn users_limit(&self) -> usize {
        self.users.load(Ordering::Relaxed)
    }

    /// What one ordinary user may hold.
    pub fn per_user(&self) -> usize {
        self.per_user.load(Ordering::Relaxed)
    }

    /// Set the limits (at start, from the configuration): what is held
    /// stays held, and only later takes are checked against the new ones.
    pub fn set_limits(&self, limit: usize, users: usize, per_user: usize) {
        self.limit.store(limit, Ordering::Relaxed);
        self.users.store(users.min(limit), Ordering::Relaxed);
        self.per_user.store(per_user.min(users), Ordering::Relaxed);
    }

    /// Units in use now, by everyone.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// Units held now by ordinary user `uid`.
    pub fn used_by(&self, uid: u32) -> usize {
        let u = self.by_users.lock_ok();
        u.1.as_ref().and_then(|m| m.get(&uid).copied()).unwrap_or(0)
    }

    /// Take `n` units for this thread's payer (see [`charge_to`]), or the
    /// budget's errno (logged) if that would pass a limit.
    pub fn take(&'static self, n: usize) -> SysResult<Grant> {
        let payer = payer();
        self.reserve(payer, n)?;
        Ok(Grant {
            budget: self,
            payer,
            n,
        })
    }

    fn reserve(&self, payer: Payer, n: usize) -> SysResult<()> {
        self.reserve_own(payer, n)?;
        if let Some(p) = self.parent {
            if let Err(e) = p.reserve(payer, n) {
                self.give_back_own(payer, n);
                return Err(e);
            }
        }
        Ok(())
    }

    fn reserve_own(&self, payer: Payer, n: usize) -> SysResult<()> {
        if let Payer::User(uid) = payer {
            let mut u = self.by_users.lock_ok();
            let (all, map) = &mut *u;
            let mine = map.as_ref().and_then(|m| m.get(&uid).copied()).unwrap_or(0);
            let fits = |held: usize, limit| held.checked_add(n).is_some_and(|v| v <= limit);
            if !fits(mine, self.per_user()) {
                drop(u);
                self.refused(payer, n, "one user's share");
                return Err(self.errno);
            }
            if !fits(*all, self.users_limit()) {
                drop(u);
                self.refused(payer, n, "all users' share");
                return Err(self.errno);
            }
            self.reserve_whole(payer, n)?;
            *all += n;
            *map.get_or_insert_with(HashMap::new).entry(uid).or_default() += n;
            return Ok(());
        }
        self.reserve_whole(payer, n)
    }

    fn reserve_whole(&self, payer: Payer, n: usize) -> SysResult<()> {
        let mut cur = self.used.load(Ordering::Relaxed);
        loop {
            let limit = self.limit();
            let next = cur.checked_add(n).filter(|&v| v <= limit);
            let Some(next) = next else {
                self.refused(payer, n, "the whole");
                return Err(self.errno);
            };
            match self
                .used
                .compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(v) => cur = v,
            }
        }
    }

    fn give_back(&self, payer: Payer, n: usize) {
        self.give_back_own(payer, n);
        if let Some(p) = self.parent {
            p.give_back(payer, n);
        }
    }

    fn give_back_own(&self, payer: Payer, n: usize) {
        if n == 0 {
            return;
        }
        self.used.fetch_sub(n, Ordering::AcqRel);
        if let Payer::User(uid) = payer {
            let mut u = self.by_users.lock_ok();
            let (all, map) = &mut *u;
            *all = all.saturating_sub(n);
            if let Some(m) = map.as_mut() {
                if let Some(h) = m.get_mut(&uid) {
                    *h = h.saturating_sub(n);
                    if *h == 0 {
                        m.remove(&uid);
                    }
                }
            }
        }
    }

    fn refused(&self, payer: Payer, n: usize, which: &str) {
        if let Some(suppressed) = self.log.allow() {
            let (limit, uid) = match (payer, which) {
                (Payer::User(uid), "one user's share") => (self.per_user(), Some(uid)),
                (Payer::User(uid), "all users' share") => (self.users_limit(), Some(uid)),
                (Payer::User(uid), _) => (self.limit(), Some(uid)),
                (Payer::Privileged, _) => (self.limit(), None),
            };
            warn!(
                limit,
                in_use = self.used(),
                asked = n,
                uid,
                suppressed,
                "limit of {} reached ({which}): {:?}",
                self.what,
                self.errno
            );
        }
    }
}

impl Grant {
    /// Units held.
    pub fn size(&self) -> usize {
        self.n
    }

    /// Hold `n` units instead, charged to the same account; past a limit
    /// (logged) the grant is unchanged.
    pub fn resize(&mut self, n: usize) -> SysResult<()> {
        if n > self.n {
            self.budget.reserve(self.payer, n - self.n)?;
        } else {
            self.budget.give_back(self.payer, self.n - n);
        }
        self.n = n;
        Ok(())
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.budget.give_back(self.payer, self.n);
        if std::ptr::eq(self.budget, &OPEN_TEXT) {
            trim_after_release(self.n);
        }
    }
}

/// Bytes of text given back since the allocator last returned free memory
/// to the system.
static FREED_SINCE_TRIM: AtomicUsize = AtomicUsize::new(0);

/// After `n` bytes of open text were given back: once 16 MiB have been,
/// ask the allocator to give its free pages back to the system, so that
/// the daemon's RSS returns after a flood of opens is closed (glibc keeps
/// small freed blocks in its heaps otherwise).
fn trim_after_release(n: usize) {
    const TRIM_EVERY: usize = 16 << 20;
    let before = FREED_SINCE_TRIM.fetch_add(n, Ordering::Relaxed);
    if before < TRIM_EVERY && before + n >= TRIM_EVERY {
        FREED_SINCE_TRIM.store(0, Ordering::Relaxed);
        trim();
    }
}

/// Bound the allocator's memory for a long-running daemon (issue 37): at
/// most 2 malloc arenas (glibc makes up to 8 per CPU, one per thread that
/// allocates while another holds an arena, and each keeps its own freed
/// memory: with request threads, replacements and workers coming and
/// going, RSS crept without end), and a thread that gives free memory back
/// to the system every 30 s. Called once by the daemon at mount.
pub fn bound_allocator() {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: mallopt only sets an allocator parameter.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
        let _ = std::thread::Builder::new()
            .name("trim".into())
            .spawn(|| loop {
                std::thread::sleep(std::time::Duration::from_secs(30));
                trim();
            });
    }
}

/// Give the allocator's free memory back to the system.
pub fn trim() {
    // SAFETY: malloc_trim only releases free memory of glibc's heaps.
    #[cfg(target_env = "gnu")]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Bytes of text held by open tracefs files, taken when they were opened
/// (`trace`, `available_events`, `format`, `usb/devices`, ...; as
/// `seq_file` buffers are in the kernel): 512 MiB, of which ordinary users
/// 256 MiB, one user 64 MiB.
pub static OPEN_TEXT: Budget =
    Budget::new("text held by open files", 512 << 20, 256 << 20, 64 << 20).within(&MEMORY);

/// Bytes of usbmon binary readers' rings (`dev/usbmonN`, 300 KiB each by
/// default, up to 64 MiB with MON_IOCT_RING_SIZE): 1 GiB, of which
/// ordinary users 512 MiB, one user 128 MiB.
pub static USBMON_RINGS: Budget =
    Budget::new("usbmon ring memory", 1 << 30, 512 << 20, 128 << 20).within(&MEMORY);

/// usbmon readers, text and binary, on all buses: 4096 (each costs its
/// queue and a share of every event's delivery), of which ordinary users
/// 2048, one user 512.
pub static USBMON_READERS: Budget = Budget::new("usbmon readers", 4096, 2048, 512);

/// Open files of the mount (FUSE handles, each with its open file's
/// state): 1,048,576, of which ordinary users 262,144, one user 16,384;
/// past a limit EMFILE, as for a process past `RLIMIT_NOFILE`.
pub static OPEN_FILES: Budget =
    Budget::new("open files", 1 << 20, 1 << 18, 1 << 14).with_errno(Errno::EMFILE);

/// Bytes of memory that grow with what callers and the configuration ask
/// for, in one budget (issue 37): the trace rings of every array (live
/// and snapshot buffers, every CPU), hist maps, the simulated USB
/// topology, and, within their own limits, open files' text
/// ([`OPEN_TEXT`]) and usbmon rings ([`USBMON_RINGS`]). Each is charged
/// in full when its size is asked for, as the kernel allocates then (an
/// open, `MON_IOCT_RING_SIZE`, a `buffer_size_kb` or `buffer_subbuf_size_kb`
/// write, a snapshot allocation, an instance `mkdir`, a hist trigger, a
/// bus or device at mount or `monfs ctl plug`); past the limit that
/// request gets ENOMEM (or is refused with a message naming the field)
/// and nothing changes. The size is set at start ([`set_memory_total`]);
/// until then 1 GiB. Ordinary users together may hold half of it, one
/// user a quarter.
pub static MEMORY: Budget = Budget::new("memory", 1 << 30, 1 << 29, 1 << 28);

/// The default size of [`MEMORY`]: half of the machine's available memory
/// (`MemAvailable` in /proc/meminfo) now, at least 64 MiB; 1 GiB where it
/// cannot be read.
pub fn default_memory_total() -> usize {
    let avail_kb = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
        line.split_whitespace().nth(1)?.parse::<usize>().ok()
    });
    match avail_kb {
        Some(kb) => (kb.saturating_mul(1024) / 2).max(64 << 20),
        None => 1 << 30,
    }
}

/// Set the size of [`MEMORY`] to `total` bytes: ordinary users together
/// get half of it, one user a quarter.
pub fn set_memory_total(total: usize) {
    MEMORY.set_limits(total, total / 2, total / 4);
}

/// Parse a memory size as the `--memory` option takes it: bytes, or a
/// number with a K, M, G or T suffix (powers of 1024; `KiB`, `MB`... and
/// lower case too).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let n: usize = num.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    n.checked_mul(1usize << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    static B: Budget = Budget::new("test units", 10, 10, 10);
    static U: Budget = Budget::new("user units", 100, 50, 20).with_errno(Errno::EMFILE);

    static WHOLE: Budget = Budget::new("whole", 100, 100, 100);
    static PART: Budget = Budget::new("part", 60, 60, 60).within(&WHOLE);

    #[test]
    fn a_part_is_charged_to_the_whole_too() {
        let w = WHOLE.take(50).unwrap();
        let mut p = PART.take(40).unwrap();
        assert_eq!(WHOLE.used(), 90);
        // Fits the part's own limit, not the whole's: nothing is held.
        assert_eq!(PART.take(20).err(), Some(Errno::ENOMEM));
        assert_eq!((PART.used(), WHOLE.used()), (40, 90));
        assert_eq!(p.resize(70).err(), Some(Errno::ENOMEM), "the part's own");
        drop(w);
        p.resize(60).unwrap();
        assert_eq!(WHOLE.used(), 60);
        drop(p);
        assert_eq!((PART.used(), WHOLE.used()), (0, 0));
    }

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("512M"), Some(512 << 20));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("1k"), Some(1024));
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
    }

    #[test]
    fn grants_are_bounded_resized_and_returned() {
        let a = B.take(6).unwrap();
        assert_eq!(B.take(5).err(), Some(Errno::ENOMEM));
        let mut b = B.take(4).unwrap();
        assert_eq!(B.used(), 10);
        assert_eq!(b.resize(5).err(), Some(Errno::ENOMEM));
        assert_eq!(b.size(), 4, "unchanged after a refusal");
        b.resize(1).unwrap();
        assert_eq!(B.used(), 7);
        drop(a);
        b.resize(9).unwrap();
        assert_eq!(B.used(), 9);
        assert_eq!(B.take(usize::MAX).err(), Some(Errno::ENOMEM));
        drop(b);
        assert_eq!(B.used(), 0);
    }

    #[test]
    fn users_are_charged_apart_and_root_is_always_served() {
        let mut held = Vec::new();
        {
            let _c = charge_to(1000, false);
            held.push(U.take(20).unwrap());
            assert_eq!(U.take(1).err(), Some(Errno::EMFILE), "one user's share");
            assert_eq!(U.used_by(1000), 20);
        }
        {
            let _c = charge_to(1001, false);
            held.push(U.take(20).unwrap());
        }
        {
            let _c = charge_to(1002, false);
            assert_eq!(U.take(11).err(), Some(Errno::EMFILE), "all users' share");
            held.push(U.take(10).unwrap());
        }
        assert_eq!(payer(), Payer::Privileged, "the charge ends with its guard");
        {
            // Root, and the mount's owner, still get the rest.
            let _c = charge_to(0, false);
            held.push(U.take(50).unwrap());
            assert_eq!(U.take(1).err(), Some(Errno::EMFILE));
        }
        {
            let _c = charge_to(1000, true);
            let g = held.pop().unwrap();
            assert_eq!(g.payer, Payer::Privileged);
            drop(g);
            held.push(U.take(50).unwrap());
        }
        // A grant goes back to the account it came from, whoever drops it.
        let mut g = held.remove(1);
        g.resize(5).unwrap();
        assert_eq!(U.used_by(1001), 5);
        drop(g);
        assert_eq!(U.used_by(1001), 0);
        held.clear();
        assert_eq!(U.used(), 0);
        assert_eq!(U.used_by(1000), 0);
    }
}
