//! The peer runner of an external device: the other process that plays
//! the device, started from the device's `command:` or reached on its
//! `socket:`, and the threads that talk to it.
//!
//! The peer is not trusted. Its lines are bounded and parsed by
//! [`protocol`], and the bus thread never waits for it: a reader thread
//! parses its output into a bounded inbox that the device task drains at
//! its steps, and a writer thread feeds its input from a queue bounded in
//! bytes ([`Input`]). A peer is judged by its progress: one that is slow
//! misses isochronous frames, one that takes nothing for [`input::STALL`] while
//! lines wait, or falls [`OUTBOX_BYTES`] behind, is unplugged.

mod error;
pub(crate) mod input;
pub(crate) mod protocol;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::net::Shutdown;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

use crate::base::sync::LockExt;
use crate::config::DeviceConfig;
pub(crate) use error::{AnswerError, PeerError};
use input::write_peer;
pub(crate) use input::{Input, LINE_COST, OUTBOX_BYTES};
use protocol::{parse_answer, Answer, MAX_LINE};

/// Answers the peer may send ahead of the task's next step.
const INBOX: usize = 1024;

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
