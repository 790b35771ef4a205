//! Ctrl-C for the command-line tools (`monfs record`, `monfs zvm-dump`):
//! while a [`CatchInterrupts`] lives, SIGINT and SIGTERM only raise a flag
//! that the tool checks between reads, so it stops cleanly (finishing its
//! file, printing its summary). The handlers are installed without
//! `SA_RESTART`: a read or poll blocked in the kernel returns EINTR and the
//! tool sees the flag at once. The daemon handles its signals differently
//! (blocked, then `sigwait` on a thread; see `cli/mount.rs`).

use std::sync::atomic::{AtomicBool, Ordering};

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT and SIGTERM caught into a flag until dropped (then the previous
/// handlers are back).
pub struct CatchInterrupts {
    old: Vec<(Signal, SigAction)>,
}

impl CatchInterrupts {
    /// Catch SIGINT and SIGTERM from now on; the flag starts clear.
    pub fn install() -> nix::Result<CatchInterrupts> {
        INTERRUPTED.store(false, Ordering::SeqCst);
        let sa = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::empty(),
            SigSet::empty(),
        );
        let mut old = Vec::new();
        for sig in [Signal::SIGINT, Signal::SIGTERM] {
            // SAFETY: the handler only stores to an atomic, which is
            // async-signal-safe.
            old.push((sig, unsafe { sigaction(sig, &sa) }?));
        }
        Ok(CatchInterrupts { old })
    }

    /// Whether SIGINT or SIGTERM came since [`CatchInterrupts::install`].
    pub fn interrupted(&self) -> bool {
        interrupted()
    }
}

/// Whether SIGINT or SIGTERM came while a [`CatchInterrupts`] was installed
/// (false when none ever was).
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

impl Drop for CatchInterrupts {
    fn drop(&mut self) {
        for (sig, sa) in &self.old {
            // SAFETY: putting back the handler that was there before.
            let _ = unsafe { sigaction(*sig, sa) };
        }
    }
}
