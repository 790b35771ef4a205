//! Bounded execution: remote writes run on a small worker pool with a
//! deadline; a worker still stuck then is abandoned and its address space
//! marked stuck.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tracing::warn;

/// How long an access to a producer's memory may take before it is
/// abandoned (and the caller told EFAULT).
pub const DEADLINE: Duration = Duration::from_millis(500);
/// Workers at most; stuck ones count until they come back.
const MAX_WORKERS: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

struct Pool {
    tx: crossbeam_channel::Sender<Job>,
    rx: crossbeam_channel::Receiver<Job>,
    /// Workers waiting for a job and not promised to one.
    idle: AtomicUsize,
    total: AtomicUsize,
}

static POOL: OnceLock<Pool> = OnceLock::new();

impl Pool {
    /// Promise a worker to one job: an idle one, or a new one. False when
    /// every worker is stuck.
    fn reserve(&self) -> bool {
        loop {
            let i = self.idle.load(Ordering::SeqCst);
            if i == 0 {
                break;
            }
            if self
                .idle
                .compare_exchange(i, i - 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            {
                return true;
            }
        }
        if self.total.fetch_add(1, Ordering::SeqCst) >= MAX_WORKERS {
            self.total.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        let rx = self.rx.clone();
        let spawned = std::thread::Builder::new()
            .name("procmem".into())
            .spawn(move || {
                let pool = POOL.get().expect("pool");
                while let Ok(job) = rx.recv() {
                    job();
                    pool.idle.fetch_add(1, Ordering::SeqCst);
                }
            });
        if spawned.is_err() {
            self.total.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }
}

/// Why [`run_bounded`] has no result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unfinished {
    /// The job was still running at the deadline; its worker is abandoned
    /// to finish whenever it can.
    TimedOut,
    /// Every worker is stuck: the job did not run.
    NoWorker,
    /// No worker took the job in time (a machine starved of CPU): it may
    /// still run; nobody is to blame.
    NotStarted,
}

/// Run `job` on a worker thread and wait for it until `timeout` has passed
/// since it started (the time it waits for a worker to take it, on a busy
/// machine, is not its fault).
pub fn run_bounded<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
    timeout: Duration,
) -> Result<T, Unfinished> {
    run_watched(job, timeout, &Arc::new(AtomicUsize::new(0)))
}

/// Run `job`, a series of accesses that advances `progress` as it goes, on
/// a worker thread, and wait for it until one access has taken longer than
/// `timeout`: the clock starts when the job starts and again whenever
/// `progress` changes, so that a long series of quick accesses is never
/// taken for a stuck one, and the one that stalls is the one blamed
/// (issue 37).
pub fn run_watched<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
    timeout: Duration,
    progress: &Arc<AtomicUsize>,
) -> Result<T, Unfinished> {
    /// How long a job may wait for the worker promised to it: only a
    /// machine starved of CPU makes it wait at all.
    const START_WAIT: Duration = Duration::from_secs(30);
    let pool = POOL.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded();
        Pool {
            tx,
            rx,
            idle: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
        }
    });
    if !pool.reserve() {
        warn!("every procmem worker is stuck on a page nobody serves; access refused");
        return Err(Unfinished::NoWorker);
    }
    /// How many deadlines in a row a worker that is running (runnable, not
    /// asleep in a page fault) may take: it is slow for want of CPU.
    const RUNNING_GRACE: u32 = 20;
    let (stx, srx) = crossbeam_channel::bounded::<i32>(1);
    let (rtx, rrx) = crossbeam_channel::bounded(1);
    let _ = pool.tx.send(Box::new(move || {
        // SAFETY: gettid has no arguments and cannot fail.
        let _ = stx.send(unsafe { libc::gettid() });
        let _ = rtx.send(job());
    }));
    let Ok(worker) = srx.recv_timeout(START_WAIT) else {
        return Err(Unfinished::NotStarted);
    };
    let mut seen = progress.load(Ordering::SeqCst);
    let mut running = 0;
    loop {
        match rrx.recv_timeout(timeout) {
            Ok(v) => return Ok(v),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                return Err(Unfinished::TimedOut)
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {
                let now = progress.load(Ordering::SeqCst);
                if now != seen {
                    seen = now;
                    running = 0;
                    continue;
                }
                // A page nobody serves leaves the worker asleep (S or D);
                // a runnable one only waits for a CPU.
                if thread_state(worker) == Some('R') && running < RUNNING_GRACE {
                    running += 1;
                    continue;
                }
                return Err(Unfinished::TimedOut);
            }
        }
    }
}

/// The state letter of this process's thread `tid` (`R` running or
/// runnable, `S`, `D`, ...).
pub fn thread_state(tid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}
