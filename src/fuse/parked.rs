//! Parked requests: a read or ioctl that would block, or a write that waits
//! for room, waits on its handle (the queue is in `handle.rs`) and is
//! retried when the file's waker fires; FUSE_INTERRUPT answers it EINTR (a
//! write that took bytes: their count).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tracing::{debug, error};

use crate::base::errno::Errno;
use crate::base::sync::{panic_message, LockExt};
use crate::base::vfs::{IoctlRequest, WriteRequest, Written};

use super::handle::{write_out, Handle, Parked, Pending};
use super::proto;
use super::state::{Session, Wake, EARLY_INTERRUPTS};

/// Whether a parked request's answer `e` keeps it parked: "would block".
fn waits(e: Errno) -> bool {
    e == Errno::EAGAIN || e == Errno::WAIT_ALWAYS
}

/// Whether a write may wait: its bytes charged to its caller (see
/// [`super::handle::WriteCall::hold`]); other requests hold nothing.
fn holds(what: &Parked) -> bool {
    match what {
        Parked::Write(w) => w.hold(),
        _ => true,
    }
}
use super::watchdog;

impl Session {
    /// Answer every parked (blocked) request with `e`: used when the daemon
    /// goes away while readers still hold files open, so that they get an
    /// error instead of hanging.
    pub fn abort_parked(&self, e: Errno) {
        let parked: Vec<(u64, u64)> = self.parked.lock_ok().drain().collect();
        for (unique, fh) in parked {
            if let Some(hd) = self.handle(fh) {
                let mut pend = hd.pending.lock_ok();
                if let Some(i) = pend.iter().position(|p| p.unique == unique) {
                    pend.remove(i);
                    self.err(unique, e);
                }
            }
        }
    }

    /// Try a request; park it if it would block. No lock is held while it
    /// runs: it may reach into the caller's memory.
    pub(super) fn run_or_park(
        &self,
        hd: &Arc<Handle>,
        fh: u64,
        u: u64,
        what: Parked,
        nonblock: bool,
    ) {
        let mut aside = false;
        let free = hd.pending.lock_ok().iter().all(|p| p.aside);
        if free {
            // Not armed: a request that is answered at once must not make the
            // next event wake the service thread. If it parks, `service` arms
            // the waker before it tries again, so no event is missed.
            let mut nonblock = nonblock;
            let mut res = self.attempt(hd, &what, nonblock, false);
            if res == Err(Errno::EAGAIN) {
                if let Some(live) = self.ioctl_nonblock(hd, &what).filter(|l| *l != nonblock) {
                    nonblock = live;
                    if live {
                        res = self.attempt(hd, &what, true, true);
                    }
                }
            }
            match res {
                Err(e) if e == Errno::EAGAIN && !nonblock => {}
                Err(e) if e == Errno::WAIT_ALWAYS => aside = true,
                res => return self.finish(u, res),
            }
        }
        let mut pend = hd.pending.lock_ok();
        if self.interrupted_early(u, fh) {
            drop(pend);
            return self.finish(u, what.interrupted());
        }
        pend.push_back(Pending {
            unique: u,
            what,
            attempting: false,
            interrupted: false,
            aside,
        });
        drop(pend);
        // Something may have arrived between the attempt and parking.
        self.service(fh);
    }

    /// Whether an interrupt for `u` came before it parked (it is answered
    /// as interrupted then); else it is noted as parked on `fh`. The
    /// caller holds the handle's queue.
    fn interrupted_early(&self, u: u64, fh: u64) -> bool {
        let mut parked = self.parked.lock_ok();
        let mut early = self.early_interrupts.lock_ok();
        match early.iter().position(|&e| e == u) {
            Some(i) => {
                early.remove(i);
                debug!(unique = u, "request interrupted before it parked");
                true
            }
            None => {
                parked.insert(u, fh);
                false
            }
        }
    }

    /// A write ([`Parked::Write`]): in the handle's queue from the start,
    /// aside of its reads and behind its earlier writes (a tty's write
    /// lock, tty_write_lock, held for the whole write). The first in line
    /// is tried at once and waits if the file waits for room; a later one
    /// waits for its turn, or, O_NONBLOCK, answers EAGAIN (the lock's
    /// trylock).
    pub(super) fn write_or_park(
        &self,
        hd: &Arc<Handle>,
        fh: u64,
        u: u64,
        what: Parked,
        nonblock: bool,
    ) {
        let first = {
            let mut pend = hd.pending.lock_ok();
            let first = !pend.iter().any(|p| matches!(p.what, Parked::Write(_)));
            if !first && nonblock {
                drop(pend);
                return self.err(u, Errno::EAGAIN);
            }
            if !first && !holds(&what) {
                drop(pend);
                return self.err(u, Errno::ENOMEM);
            }
            if self.interrupted_early(u, fh) {
                drop(pend);
                return self.finish(u, what.interrupted());
            }
            pend.push_back(Pending {
                unique: u,
                what: what.clone(),
                attempting: first,
                interrupted: false,
                aside: true,
            });
            first
        };
        if !first {
            // Tried when the writes before it are done.
            return self.service(fh);
        }
        // Not armed (as in `run_or_park`).
        let res = self.attempt(hd, &what, nonblock, false);
        let mut pend = hd.pending.lock_ok();
        let Some(i) = pend.iter().position(|p| p.unique == u) else {
            return; // answered meanwhile (the handle was released)
        };
        let res = match res {
            Err(e) if waits(e) && !pend[i].interrupted && holds(&what) => {
                pend[i].attempting = false;
                drop(pend);
                // Room may have come meanwhile.
                return self.service(fh);
            }
            Err(e) if waits(e) && !pend[i].interrupted => what.ended(Errno::ENOMEM),
            Err(e) if waits(e) => pend[i].what.interrupted(),
            res => res,
        };
        pend.remove(i);
        let more = pend.iter().any(|p| matches!(p.what, Parked::Write(_)));
        drop(pend);
        self.parked.lock_ok().remove(&u);
        self.finish(u, res);
        if more {
            self.service(fh);
        }
    }

    /// The caller's current O_NONBLOCK for an ioctl that would block. An
    /// ioctl request does not carry the file flags (a read does), and the
    /// flags seen at open go stale after `fcntl(F_SETFL)`, as libpcap's
    /// `pcap_setnonblock` does; so ask /proc, only on this slow path. None
    /// for reads, CUSE ioctls (the descriptor is on another inode) and when
    /// /proc does not tell.
    pub(super) fn ioctl_nonblock(&self, hd: &Handle, what: &Parked) -> Option<bool> {
        let Parked::Ioctl(c) = what else { return None };
        if c.cuse.is_some() {
            return None;
        }
        let dev = self.dev_id.load(Ordering::Relaxed);
        crate::base::procmem::fd_nonblock(c.caller.pid, dev, hd.nodeid, &mut hd.fd_hint.lock_ok())
    }

    /// Run a request once. A write that took bytes and waits for room
    /// for the rest keeps their count in its [`WriteCall`] and answers
    /// EAGAIN; an error or O_NONBLOCK then answers the count.
    pub(super) fn attempt(
        &self,
        hd: &Handle,
        what: &Parked,
        nonblock: bool,
        retry: bool,
    ) -> Result<Vec<u8>, Errno> {
        match what {
            Parked::Read { offset, size } => hd.file.read_as(*offset, *size, nonblock, retry),
            Parked::Write(w) => {
                let done = w.done();
                let req = WriteRequest {
                    offset: w.offset,
                    data: &w.data,
                    done,
                    caller: &w.caller,
                };
                let took = match hd.file.write_as(&req) {
                    Ok(Written::Done(n)) => return Ok(write_out(n as usize)),
                    Ok(Written::Took(n)) => (n as usize).min(w.data.len() - done),
                    Err(e) if e == Errno::EAGAIN => 0,
                    Err(_) if done > 0 => return Ok(write_out(done)),
                    Err(e) => return Err(e),
                };
                let done = done + took;
                w.done.store(done, Ordering::SeqCst);
                if done == w.data.len() || (w.nonblock && done > 0) {
                    Ok(write_out(done))
                } else if w.nonblock {
                    Err(Errno::EAGAIN_FINAL)
                } else {
                    Err(Errno::EAGAIN)
                }
            }
            Parked::Ioctl(c) => {
                if let Some((layout, data)) = &c.cuse {
                    return self.cuse_ioctl(hd, c, layout, data, nonblock, retry);
                }
                let mem = crate::base::procmem::ProcessMemory(c.caller.pid);
                let req = IoctlRequest {
                    cmd: c.cmd,
                    arg: c.arg,
                    input: &c.input,
                    out_size: c.out_size,
                    nonblock,
                    caller: c.caller,
                    retry,
                    file_id: (self.dev_id.load(Ordering::Relaxed), c.nodeid),
                    mem: &mem,
                    compat: c.compat,
                };
                hd.file.ioctl(&req).map(|rep| {
                    for (off, bytes) in &rep.cache_updates {
                        self.store(c.nodeid, *off, bytes);
                    }
                    let mut w = proto::Writer::default();
                    w.u32(rep.result as u32).u32(0).u32(0).u32(0);
                    let n = rep.output.len().min(c.out_size as usize);
                    w.0.extend_from_slice(&rep.output[..n]);
                    w.0
                })
            }
        }
    }

    /// Retry a handle's parked requests: those in its queue in order until
    /// one would still block, then each of those waiting aside. Each runs
    /// without the queue's lock (it may reach into the caller's memory),
    /// so an interrupt or a release never waits for it.
    pub(super) fn retry_parked(&self, hd: &Arc<Handle>) {
        while self.retry_one(hd, None) {}
        let aside: Vec<(u64, bool)> = hd
            .pending
            .lock_ok()
            .iter()
            .filter(|p| p.aside)
            .map(|p| (p.unique, matches!(p.what, Parked::Write(_))))
            .collect();
        let mut writing = false;
        for (u, write) in aside {
            // A write waits for the writes before it (tty_write_lock).
            if write && writing {
                continue;
            }
            if !self.retry_one(hd, Some(u)) && write {
                writing = hd.pending.lock_ok().iter().any(|p| p.unique == u);
            }
        }
    }

    /// Retry the first request of the handle's queue (`which`: that
    /// request waiting aside); whether the queue's next may be tried.
    fn retry_one(&self, hd: &Arc<Handle>, which: Option<u64>) -> bool {
        let (unique, what) = {
            let mut pend = hd.pending.lock_ok();
            let p = match which {
                None => pend.iter_mut().find(|p| !p.aside),
                Some(u) => pend.iter_mut().find(|p| p.unique == u),
            };
            match p {
                Some(p) if !p.attempting => {
                    p.attempting = true;
                    (p.unique, p.what.clone())
                }
                // Empty, or a retry of it never came back (the watchdog
                // has answered it): this handle's queue stays stuck.
                _ => return false,
            }
        };
        hd.armed.store(true, Ordering::SeqCst);
        watchdog::working_on(unique);
        let res = catch_unwind(AssertUnwindSafe(|| self.attempt(hd, &what, false, true)))
            .unwrap_or_else(|e| {
                error!(
                    unique,
                    opcode = what.opcode(),
                    nodeid = hd.nodeid,
                    "parked request panicked on retry, answering EIO: {}",
                    panic_message(&*e)
                );
                Err(Errno::EIO)
            });
        let mut pend = hd.pending.lock_ok();
        let Some(i) = pend.iter().position(|p| p.unique == unique) else {
            // Answered meanwhile (the handle was released).
            return false;
        };
        let res = match res {
            Err(e) if waits(e) && !pend[i].interrupted => {
                pend[i].attempting = false;
                if e == Errno::WAIT_ALWAYS && !pend[i].aside {
                    // It waits whatever else comes: aside from now on,
                    // and the queue goes on.
                    pend[i].aside = true;
                    return true;
                }
                return false;
            }
            Err(e) if waits(e) => pend[i].what.interrupted(),
            res => res,
        };
        pend.remove(i);
        drop(pend);
        self.parked.lock_ok().remove(&unique);
        self.finish(unique, res);
        which.is_none()
    }

    /// Retry the parked requests of a handle, oldest first, then answer a
    /// poll that waits for it. One thread retries a handle at a time; one
    /// that comes meanwhile leaves a note, and the retrying thread looks
    /// again before it stops.
    pub(super) fn service(&self, fh: u64) {
        let Some(hd) = self.handle(fh) else { return };
        hd.again.store(true, Ordering::SeqCst);
        while !hd.servicing.swap(true, Ordering::SeqCst) {
            hd.again.store(false, Ordering::SeqCst);
            self.retry_parked(&hd);
            hd.servicing.store(false, Ordering::SeqCst);
            if !hd.again.load(Ordering::SeqCst) {
                break;
            }
        }
        let kh = *hd.poll_kh.lock_ok();
        if let Some(kh) = kh {
            if hd.file.poll() != 0 {
                *hd.poll_kh.lock_ok() = None;
                let mut w = proto::Writer::default();
                w.u64(kh);
                self.notify(proto::notify::POLL, &w.0);
            } else {
                hd.armed.store(true, Ordering::SeqCst);
            }
        }
    }

    pub(super) fn service_loop(&self, slot: &watchdog::Slot) {
        while let Ok(w) = self.wake_rx.recv() {
            if matches!(w, Wake::Stop) {
                return;
            }
            slot.begin(0);
            let r = catch_unwind(AssertUnwindSafe(|| match w {
                Wake::Handle(fh) => self.service(fh),
                Wake::Store(ino, off, bytes) => self.store(ino, off, &bytes),
                Wake::InvalEntry(parent, name) => self.inval_entry(parent, &name),
                Wake::Stop => {} // returned above
            }));
            slot.end();
            if let Err(p) = r {
                error!("service thread panicked: {}", panic_message(&*p));
            }
            if slot.abandoned() {
                return;
            }
        }
    }

    pub(super) fn interrupt(&self, u: u64, target: u64) {
        let fh = {
            let parked = self.parked.lock_ok();
            let fh = parked.get(&target).copied();
            if fh.is_none() {
                // It may park yet: it is answered then.
                let mut early = self.early_interrupts.lock_ok();
                if early.len() >= EARLY_INTERRUPTS {
                    early.pop_front();
                }
                early.push_back(target);
            }
            fh
        };
        match fh.and_then(|fh| self.handle(fh)) {
            Some(hd) => {
                let mut pend = hd.pending.lock_ok();
                if let Some(i) = pend.iter().position(|p| p.unique == target) {
                    if pend[i].attempting {
                        // Answered when that retry ends: EINTR unless it
                        // completed the request.
                        pend[i].interrupted = true;
                    } else {
                        let p = pend.remove(i).expect("found");
                        self.parked.lock_ok().remove(&target);
                        debug!(target, "interrupted parked request");
                        self.finish(target, p.what.interrupted());
                    }
                }
                // Otherwise it was answered meanwhile: nothing to do.
            }
            // Not parked (yet): ask the kernel to send the interrupt again. If the
            // request was already answered the kernel drops this reply.
            None => self.err(u, Errno::EAGAIN),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Parked requests without a mount: the session's device is one end of
    //! a datagram socket pair (each reply one message, as on /dev/fuse), and
    //! the tree holds a file that has data only when the test says so.

    use std::fs::File;
    use std::os::unix::net::UnixDatagram;
    use std::sync::Mutex as StdMutex;

    use super::*;
    use crate::base::vfs::{
        Caller, FileNode, NodeKind, OpenFile, OpenFlags, Tree, Waker, WriteRequest, Written,
    };

    /// A stream file: EAGAIN until data is put in, and the waker to call then;
    /// writes take what `room` allows into `written`.
    #[derive(Default)]
    struct Gate {
        data: StdMutex<Vec<u8>>,
        waker: StdMutex<Option<Waker>>,
        room: StdMutex<usize>,
        written: StdMutex<Vec<u8>>,
    }

    struct GateNode(Arc<Gate>);
    struct GateFile(Arc<Gate>);

    impl FileNode for GateNode {
        fn open(&self, _f: OpenFlags, _c: &Caller) -> Result<Arc<dyn OpenFile>, Errno> {
            Ok(Arc::new(GateFile(self.0.clone())))
        }
    }

    impl OpenFile for GateFile {
        fn read(&self, _offset: u64, size: u32) -> Result<Vec<u8>, Errno> {
            let mut d = self.0.data.lock_ok();
            if d.is_empty() {
                return Err(Errno::EAGAIN);
            }
            let n = d.len().min(size as usize);
            Ok(d.drain(..n).collect())
        }
        fn write_as(&self, w: &WriteRequest<'_>) -> Result<Written, Errno> {
            let mut room = self.0.room.lock_ok();
            let rest = &w.data[w.done..];
            let n = rest.len().min(*room);
            *room -= n;
            self.0.written.lock_ok().extend_from_slice(&rest[..n]);
            Ok(Written::Took(n as u32))
        }
        fn set_waker(&self, w: Waker) {
            *self.0.waker.lock_ok() = Some(w);
        }
        fn is_stream(&self) -> bool {
            true
        }
    }

    struct Rig {
        s: Arc<Session>,
        kernel: std::os::unix::net::UnixDatagram,
        gate: Arc<Gate>,
        fh: u64,
    }

    /// A reply as the kernel reads it: (unique, error, body).
    fn reply(k: &UnixDatagram) -> Option<(u64, i32, Vec<u8>)> {
        let mut buf = vec![0u8; 4096];
        let n = k.recv(&mut buf).ok()?;
        let err = i32::from_ne_bytes(buf[4..8].try_into().unwrap());
        let unique = u64::from_ne_bytes(buf[8..16].try_into().unwrap());
        Some((unique, err, buf[16..n].to_vec()))
    }

    fn rig() -> Rig {
        use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};
        let (ours, kernel) = UnixDatagram::pair().unwrap();
        kernel.set_nonblocking(true).unwrap();
        // SAFETY: the descriptor comes from `into_raw_fd` and is owned once.
        let dev = File::from(unsafe { OwnedFd::from_raw_fd(ours.into_raw_fd()) });
        let tree = Arc::new(Tree::new(0, 0));
        let gate = Arc::new(Gate::default());
        let ino = tree.add(
            "gate",
            NodeKind::File(Arc::new(GateNode(gate.clone()))),
            0o600,
        );
        let s = Arc::new(Session::new(
            dev,
            tree,
            "/nonexistent".into(),
            false,
            false,
            None,
        ));
        s.open(1, ino, libc::O_RDONLY, &Caller::default());
        let (u, err, body) = reply(&kernel).expect("open answered");
        assert_eq!((u, err), (1, 0));
        let fh = u64::from_ne_bytes(body[..8].try_into().unwrap());
        Rig {
            s,
            kernel,
            gate,
            fh,
        }
    }

    /// Put `data` in the file and let the service thread's work run.
    fn feed(r: &Rig, data: &[u8]) {
        r.gate.data.lock_ok().extend_from_slice(data);
        let w = r.gate.waker.lock_ok().clone().expect("waker set");
        w();
        while let Ok(Wake::Handle(fh)) = r.s.wake_rx.try_recv() {
            r.s.service(fh);
        }
    }

    /// Give the file `n` bytes of write room and let the service thread's
    /// work run.
    fn room(r: &Rig, n: usize) {
        *r.gate.room.lock_ok() += n;
        let w = r.gate.waker.lock_ok().clone().expect("waker set");
        w();
        while let Ok(Wake::Handle(fh)) = r.s.wake_rx.try_recv() {
            r.s.service(fh);
        }
    }

    fn written(n: u32) -> Vec<u8> {
        write_out(n as usize)
    }

    #[test]
    fn a_write_waits_for_room_until_it_is_all_taken() {
        let r = rig();
        *r.gate.room.lock_ok() = 3;
        r.s.write(2, r.fh, 0, b"abcdefgh", Caller::default(), false);
        assert!(reply(&r.kernel).is_none(), "parked with 3 of 8 taken");
        room(&r, 2);
        assert!(reply(&r.kernel).is_none(), "5 of 8");
        // A read on the handle does not wait behind the write.
        r.s.read(3, r.fh, 0, 10, false);
        feed(&r, b"in");
        assert_eq!(reply(&r.kernel), Some((3, 0, b"in".to_vec())));
        room(&r, 10);
        assert_eq!(reply(&r.kernel), Some((2, 0, written(8))));
        assert_eq!(*r.gate.written.lock_ok(), b"abcdefgh");
        assert!(r.s.parked.lock_ok().is_empty());
    }

    #[test]
    fn writes_on_a_handle_take_room_one_after_another() {
        let r = rig();
        r.s.write(2, r.fh, 0, b"abc", Caller::default(), false);
        r.s.write(3, r.fh, 0, b"xyz", Caller::default(), false);
        room(&r, 4);
        assert_eq!(reply(&r.kernel), Some((2, 0, written(3))));
        // The second took its first byte only after the first was done.
        room(&r, 2);
        assert_eq!(reply(&r.kernel), Some((3, 0, written(3))));
        assert_eq!(*r.gate.written.lock_ok(), b"abcxyz");
    }

    #[test]
    fn a_write_behind_another_waits_for_it_or_is_eagain_if_nonblocking() {
        let r = rig();
        r.s.write(2, r.fh, 0, b"abc", Caller::default(), false);
        // The write lock is the first write's: O_NONBLOCK does not wait.
        r.s.write(3, r.fh, 0, b"xyz", Caller::default(), true);
        assert_eq!(reply(&r.kernel), Some((3, -libc::EAGAIN, Vec::new())));
        r.s.write(4, r.fh, 0, b"123", Caller::default(), false);
        room(&r, 1);
        assert!(reply(&r.kernel).is_none());
        room(&r, 5);
        assert_eq!(reply(&r.kernel), Some((2, 0, written(3))));
        assert_eq!(reply(&r.kernel), Some((4, 0, written(3))));
        assert_eq!(*r.gate.written.lock_ok(), b"abc123");
    }

    #[test]
    fn a_nonblocking_write_gets_what_fit_else_eagain() {
        let r = rig();
        *r.gate.room.lock_ok() = 3;
        r.s.write(2, r.fh, 0, b"abcdefgh", Caller::default(), true);
        assert_eq!(reply(&r.kernel), Some((2, 0, written(3))));
        r.s.write(3, r.fh, 0, b"defgh", Caller::default(), true);
        assert_eq!(reply(&r.kernel), Some((3, -libc::EAGAIN, Vec::new())));
        assert!(r.s.parked.lock_ok().is_empty());
    }

    #[test]
    fn an_interrupted_write_answers_what_it_took_else_eintr() {
        let r = rig();
        *r.gate.room.lock_ok() = 3;
        r.s.write(2, r.fh, 0, b"abcdefgh", Caller::default(), false);
        r.s.interrupt(10, 2);
        assert_eq!(reply(&r.kernel), Some((2, 0, written(3))));
        r.s.write(3, r.fh, 0, b"more", Caller::default(), false);
        r.s.interrupt(11, 3);
        assert_eq!(reply(&r.kernel), Some((3, -libc::EINTR, Vec::new())));
        room(&r, 10);
        assert!(reply(&r.kernel).is_none());
        assert_eq!(*r.gate.written.lock_ok(), b"abc");
    }

    #[test]
    fn an_interrupt_that_came_before_its_request_parked_answers_it() {
        let r = rig();
        // The kernel sent the interrupt while the request was being tried.
        r.s.interrupt(10, 2);
        assert_eq!(reply(&r.kernel), Some((10, -libc::EAGAIN, Vec::new())));
        r.s.read(2, r.fh, 0, 100, false);
        assert_eq!(reply(&r.kernel), Some((2, -libc::EINTR, Vec::new())));
        assert!(r.s.parked.lock_ok().is_empty());
    }

    #[test]
    fn a_read_that_would_block_is_parked_and_answered_when_woken() {
        let r = rig();
        r.s.read(2, r.fh, 0, 100, false);
        assert!(reply(&r.kernel).is_none(), "parked, not answered");
        assert_eq!(r.s.parked.lock_ok().get(&2), Some(&r.fh));
        feed(&r, b"hello");
        assert_eq!(reply(&r.kernel), Some((2, 0, b"hello".to_vec())));
        assert!(r.s.parked.lock_ok().is_empty());
    }

    #[test]
    fn parked_requests_are_answered_in_order() {
        let r = rig();
        r.s.read(2, r.fh, 0, 3, false);
        r.s.read(3, r.fh, 0, 3, false);
        feed(&r, b"abcdef");
        assert_eq!(reply(&r.kernel), Some((2, 0, b"abc".to_vec())));
        assert_eq!(reply(&r.kernel), Some((3, 0, b"def".to_vec())));
    }

    #[test]
    fn a_nonblocking_read_is_answered_eagain_at_once() {
        let r = rig();
        r.s.read(2, r.fh, 0, 100, true);
        assert_eq!(reply(&r.kernel), Some((2, -libc::EAGAIN, Vec::new())));
        assert!(r.s.parked.lock_ok().is_empty());
    }

    #[test]
    fn an_interrupt_answers_a_parked_request_eintr_once() {
        let r = rig();
        r.s.read(2, r.fh, 0, 100, false);
        r.s.interrupt(10, 2);
        assert_eq!(reply(&r.kernel), Some((2, -libc::EINTR, Vec::new())));
        // The data that comes later goes to no one: the request is gone.
        feed(&r, b"late");
        assert!(reply(&r.kernel).is_none());
        // An interrupt for a request that is not parked asks for a resend.
        r.s.interrupt(11, 99);
        assert_eq!(reply(&r.kernel), Some((11, -libc::EAGAIN, Vec::new())));
    }

    #[test]
    fn abort_parked_answers_every_parked_request() {
        let r = rig();
        r.s.read(2, r.fh, 0, 100, false);
        r.s.read(3, r.fh, 0, 100, false);
        r.s.abort_parked(Errno::EIO);
        let mut got = vec![reply(&r.kernel).unwrap(), reply(&r.kernel).unwrap()];
        got.sort();
        assert_eq!(
            got,
            vec![(2, -libc::EIO, Vec::new()), (3, -libc::EIO, Vec::new())]
        );
        assert!(r.s.parked.lock_ok().is_empty());
    }
}
