//! The peer runner of an external device: the other process that plays
//! the device, started from the device's `command:` or reached on its
//! `socket:`, and the threads that talk to it.
//!
//! The peer is not trusted. Its lines are bounded and parsed by
//! [`protocol`], and the bus thread never waits for it: a reader thread
//! parses its output into a bounded inbox that the device task drains at
//! its steps, and a writer thread feeds its input from a queue bounded in
//! bytes ([`Input`]). A peer is judged by its progress: one that is slow
//! misses isochronous frames, one that takes nothing for [`STALL`] while
//! lines wait, or falls [`OUTBOX_BYTES`] behind, is unplugged.

mod error;
pub(crate) mod protocol;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use crate::base::sync::LockExt;
use crate::config::DeviceConfig;
pub(crate) use error::{AnswerError, PeerError};
use protocol::{parse_answer, Answer, MAX_LINE};

/// Answers the peer may send ahead of the task's next step.
const INBOX: usize = 1024;
/// Bytes of lines that may wait for the peer to read them (counted in the
/// memory an external device is charged, `sim::usb::memory`).
pub(crate) const OUTBOX_BYTES: usize = 1 << 20;
/// What a queued line costs beyond its text: its `String` and its slot.
pub(crate) const LINE_COST: usize = 64;
/// A peer that takes none of its waiting lines for this long does not read.
pub(crate) const STALL: Duration = Duration::from_secs(10);

/// Takes the inbox's answers whose ids the predicate names.
pub(crate) type AnswerTaker = Box<dyn Fn(&mut dyn FnMut(u64) -> bool) -> Vec<Answer> + Send>;

/// What the reader thread hands to the task.
#[derive(Default)]
struct Inbox {
    q: VecDeque<Answer>,
    /// Why the peer is done (exit, garbage); the device unplugs.
    end: Option<PeerError>,
}

/// The peer, over its standard input and output or a Unix socket, and the
/// threads that talk to it.
pub(crate) struct Peer {
    child: Option<Child>,
    tx: Option<Input>,
    inbox: Arc<Mutex<Inbox>>,
    /// A socket peer's connection, shut down when the peer is dropped.
    sock: Option<Arc<Mutex<Sock>>>,
}

/// A socket peer's connection, once made.
#[derive(Default)]
struct Sock {
    stream: Option<UnixStream>,
    /// The device is gone: a connection made now is shut down at once.
    closed: bool,
}

/// A peer's input: the queue its writer thread feeds it from, bounded in
/// bytes, and what the peer has taken of it.
#[derive(Clone)]
pub(crate) struct Input {
    tx: Sender<String>,
    flow: Arc<Flow>,
}

/// The bytes waiting in a peer's input and the peer's progress through it.
#[derive(Default)]
struct Flow {
    /// Bytes queued and not yet written to the peer ([`LINE_COST`] a line
    /// included).
    queued: AtomicUsize,
    /// Bytes written to the peer so far.
    taken: AtomicU64,
    /// The count of bytes taken when it last changed (or the queue was
    /// last found empty), and when.
    seen: Mutex<Option<(u64, Instant)>>,
}

impl Input {
    /// A queue and the receiving end its writer thread drains.
    fn new() -> (Input, Receiver<String>) {
        let (tx, rx) = unbounded();
        let flow = Arc::new(Flow::default());
        (Input { tx, flow }, rx)
    }

    /// Queue a line the peer must get. Err when the peer does not read:
    /// lines have waited for [`STALL`] with nothing taken, or more than
    /// [`OUTBOX_BYTES`] wait.
    pub(crate) fn send(&self, line: String) -> Result<(), PeerError> {
        self.queue(line, OUTBOX_BYTES)?;
        Ok(())
    }

    /// Queue a line the peer can do without (an isochronous frame) if no
    /// more than `backlog` bytes wait before it: Ok(false) when it is left
    /// out, Err as for [`Input::send`] when the peer does not read.
    pub(crate) fn offer(&self, line: String, backlog: usize) -> Result<bool, PeerError> {
        self.queue(line, backlog.min(OUTBOX_BYTES))
    }

    fn queue(&self, line: String, backlog: usize) -> Result<bool, PeerError> {
        let f = &self.flow;
        let waiting = f.queued.load(Ordering::Acquire);
        let taken = f.taken.load(Ordering::Acquire);
        let now = Instant::now();
        {
            let mut seen = f.seen.lock_ok();
            match *seen {
                // The peer took something, or nothing was waiting: it
                // is judged from now on.
                Some((t, _)) if t == taken && waiting > 0 => {}
                _ => *seen = Some((taken, now)),
            }
            if let Some((_, since)) = *seen {
                let idle = now.duration_since(since);
                if waiting > 0 && idle >= STALL {
                    return Err(PeerError::NotReading {
                        bytes: waiting,
                        secs: idle.as_secs(),
                    });
                }
            }
        }
        let cost = line.len() + LINE_COST;
        if waiting + cost > backlog {
            if backlog < OUTBOX_BYTES {
                return Ok(false);
            }
            return Err(PeerError::Behind(waiting));
        }
        f.queued.fetch_add(cost, Ordering::AcqRel);
        match self.tx.send(line) {
            Ok(()) => Ok(true),
            Err(_) => {
                f.queued.fetch_sub(cost, Ordering::AcqRel);
                Err(PeerError::ClosedInput)
            }
        }
    }
}

/// The writer thread: feed the peer's lines until the queue closes,
/// counting the bytes the peer takes as it takes them.
fn write_peer(mut w: impl Write, rx: Receiver<String>, flow: Arc<Flow>) {
    for line in rx {
        let mut rest = line.as_bytes();
        let ok = loop {
            if rest.is_empty() {
                break w.flush().is_ok();
            }
            match w.write(rest) {
                Ok(0) => break false,
                Ok(n) => {
                    rest = &rest[n..];
                    flow.taken.fetch_add(n as u64, Ordering::AcqRel);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => break false,
            }
        };
        flow.queued
            .fetch_sub(line.len() + LINE_COST, Ordering::AcqRel);
        if !ok {
            break;
        }
    }
}

impl Peer {
    /// Start the peer the device's configuration names.
    pub(crate) fn open(cfg: Option<&DeviceConfig>) -> Result<Peer, PeerError> {
        match cfg {
            Some(DeviceConfig {
                command: Some(c), ..
            }) => Peer::start(&c.0),
            Some(DeviceConfig {
                socket: Some(s), ..
            }) => Peer::connect(s.0.clone()),
            _ => Err(PeerError::NoPeer),
        }
    }

    /// Connect to a peer listening on a Unix socket, off the bus thread
    /// (connect blocks while the listener's backlog is full): a thread
    /// checks that the path is a socket (not following a symbolic link),
    /// connects, then reads; lines sent meanwhile wait in the queue.
    fn connect(path: PathBuf) -> Result<Peer, PeerError> {
        let (tx, rx) = Input::new();
        let flow = tx.flow.clone();
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let sock = Arc::new(Mutex::new(Sock::default()));
        let (inbox2, sock2) = (inbox.clone(), sock.clone());
        let run = move || {
            let shown = path.display().to_string();
            let socket = |e| PeerError::Socket {
                path: shown.clone(),
                source: Arc::new(e),
            };
            let r = std::fs::symlink_metadata(&path)
                .map_err(|e| PeerError::SocketPath {
                    path: shown.clone(),
                    source: Arc::new(e),
                })
                .and_then(|m| {
                    if m.file_type().is_socket() {
                        Ok(())
                    } else {
                        Err(PeerError::NotSocket {
                            path: shown.clone(),
                        })
                    }
                })
                .and_then(|_| {
                    UnixStream::connect(&path).map_err(|e| PeerError::Connect {
                        path: shown.clone(),
                        source: Arc::new(e),
                    })
                })
                .and_then(|s| {
                    let w = s.try_clone().map_err(socket)?;
                    let mut g = sock2.lock_ok();
                    if g.closed {
                        let _ = s.shutdown(Shutdown::Both);
                        return Err(PeerError::Gone);
                    }
                    g.stream = Some(s.try_clone().map_err(socket)?);
                    Ok((s, w))
                });
            match r {
                Ok((r, w)) => {
                    let spawned = std::thread::Builder::new()
                        .name("usb-peer-write".into())
                        .spawn(move || write_peer(w, rx, flow));
                    match spawned {
                        Ok(_) => read_peer(r, &inbox2),
                        Err(e) => inbox2.lock_ok().end = Some(PeerError::Thread(Arc::new(e))),
                    }
                }
                Err(e) => {
                    let mut g = inbox2.lock_ok();
                    if g.end.is_none() {
                        g.end = Some(e);
                    }
                }
            }
        };
        std::thread::Builder::new()
            .name("usb-peer-read".into())
            .spawn(run)
            .map_err(|e| PeerError::Thread(Arc::new(e)))?;
        Ok(Peer {
            child: None,
            tx: Some(tx),
            inbox,
            sock: Some(sock),
        })
    }

    fn start(argv: &[String]) -> Result<Peer, PeerError> {
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| PeerError::Spawn {
                program: argv[0].clone(),
                source: Arc::new(e),
            })?;
        let (stdin, stdout) = match (child.stdin.take(), child.stdout.take()) {
            (Some(i), Some(o)) => (i, o),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(PeerError::NoPipes);
            }
        };
        let (tx, rx) = Input::new();
        let flow = tx.flow.clone();
        let inbox = Arc::new(Mutex::new(Inbox::default()));
        let spawned = std::thread::Builder::new()
            .name("usb-peer-write".into())
            .spawn(move || write_peer(stdin, rx, flow))
            .and_then(|_| {
                let inbox = inbox.clone();
                std::thread::Builder::new()
                    .name("usb-peer-read".into())
                    .spawn(move || read_peer(stdout, &inbox))
            });
        let peer = Peer {
            child: Some(child),
            tx: Some(tx),
            inbox,
            sock: None,
        };
        spawned.map_err(|e| PeerError::Thread(Arc::new(e)))?;
        Ok(peer)
    }

    /// Queue a line the peer must get ([`Input::send`]).
    pub(crate) fn send(&self, line: String) -> Result<(), PeerError> {
        self.input()?.send(line)
    }

    /// Queue a line the peer can do without ([`Input::offer`]).
    pub(crate) fn offer(&self, line: String, backlog: usize) -> Result<bool, PeerError> {
        self.input()?.offer(line, backlog)
    }

    fn input(&self) -> Result<&Input, PeerError> {
        self.tx.as_ref().ok_or(PeerError::InputClosed)
    }

    /// Its input, for programs' URBs (usbfs), which the device's task
    /// does not track.
    pub(crate) fn sender(&self) -> Option<Input> {
        self.tx.clone()
    }

    /// Takes out of the inbox, at any time, the answers whose ids `want`
    /// names (programs' URBs), leaving the others for the task.
    pub(crate) fn taker(&self) -> AnswerTaker {
        let inbox = self.inbox.clone();
        Box::new(move |want: &mut dyn FnMut(u64) -> bool| {
            let mut g = inbox.lock_ok();
            let (mine, rest): (VecDeque<Answer>, VecDeque<Answer>) = std::mem::take(&mut g.q)
                .into_iter()
                .partition(|a| want(a.id));
            g.q = rest;
            mine.into_iter().collect()
        })
    }

    /// The answers the reader thread has parsed since the last call, and
    /// why the peer is done if it is.
    pub(crate) fn take(&self) -> (VecDeque<Answer>, Option<PeerError>) {
        let mut g = self.inbox.lock_ok();
        (std::mem::take(&mut g.q), g.end.clone())
    }
}

impl Drop for Peer {
    /// Close its input, kill it and reap it off the bus thread; a socket
    /// peer's connection is shut down (it sees the end of its input).
    fn drop(&mut self) {
        self.tx = None;
        if let Some(s) = self.sock.take() {
            let mut g = s.lock_ok();
            g.closed = true;
            if let Some(st) = g.stream.take() {
                let _ = st.shutdown(Shutdown::Both);
            }
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = std::thread::Builder::new()
                .name("usb-peer-reap".into())
                .spawn(move || {
                    let _ = c.wait();
                });
        }
    }
}

/// The reader thread: parse the peer's lines into the inbox until it ends.
fn read_peer(out: impl Read, inbox: &Mutex<Inbox>) {
    let mut r = BufReader::new(out);
    let mut line = Vec::new();
    let why = loop {
        line.clear();
        match (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
        {
            Ok(0) => break PeerError::ClosedOutput,
            Ok(_) => {}
            Err(e) => break PeerError::Read(Arc::new(e)),
        }
        if line.last() != Some(&b'\n') {
            break if line.len() > MAX_LINE {
                PeerError::LongLine(MAX_LINE)
            } else {
                PeerError::PartLine
            };
        }
        line.pop();
        let a = match parse_answer(&line) {
            Ok(a) => a,
            Err(e) => break e,
        };
        let mut g = inbox.lock_ok();
        if g.q.len() >= INBOX {
            break PeerError::TooFarAhead(INBOX);
        }
        g.q.push_back(a);
    };
    let mut g = inbox.lock_ok();
    if g.end.is_none() {
        g.end = Some(why);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The input is bounded in bytes: a line the peer can do without is
    /// left out past its backlog, one it must get is refused past
    /// [`OUTBOX_BYTES`]; what the writer takes makes room again.
    #[test]
    fn the_input_is_bounded_in_bytes() {
        let (input, rx) = Input::new();
        let line = "x".repeat(1000 - LINE_COST);
        let mut sent = 0;
        while input.offer(line.clone(), 64 << 10).unwrap() {
            sent += 1;
        }
        assert_eq!(
            sent, 65,
            "64 KiB of 1000-byte lines, and the one that reaches it"
        );
        while input.send(line.clone()).is_ok() {
            sent += 1;
        }
        assert_eq!(sent, OUTBOX_BYTES / 1000);
        assert!(matches!(
            input.send(line.clone()),
            Err(PeerError::Behind(n)) if n == sent * 1000
        ));
        // The writer takes the lines: the queue empties, and there is
        // room again.
        let flow = input.flow.clone();
        let writer = std::thread::spawn(move || write_peer(std::io::sink(), rx, flow));
        while input.flow.queued.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            input.flow.taken.load(Ordering::Acquire),
            (sent * (1000 - LINE_COST)) as u64
        );
        assert!(input.offer(line.clone(), 64 << 10).unwrap());
        assert!(input.send(line).is_ok());
        drop(input);
        writer.join().unwrap();
    }
}
