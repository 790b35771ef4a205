//! Why an external device's peer is done: it could not be started or
//! reached, it stopped talking, or it answered something the protocol does
//! not allow. The device is unplugged and the text goes to the log after
//! "external device's peer ".

use std::sync::Arc;

/// Why a peer is done, or a line of it was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum PeerError {
    /// The device's configuration names neither a command nor a socket.
    #[error("has no command or socket")]
    NoPeer,
    /// The peer (or the device) went away.
    #[error("is gone")]
    Gone,
    /// A socket path that cannot be examined.
    #[error("cannot use socket {path}: {source}")]
    SocketPath {
        /// The socket's path.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// A socket path that is something else.
    #[error("cannot use socket {path}: not a socket")]
    NotSocket {
        /// The path.
        path: String,
    },
    /// Connecting failed.
    #[error("cannot connect to socket {path}: {source}")]
    Connect {
        /// The socket's path.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// The connection could not be shared between the reader and writer.
    #[error("socket {path}: {source}")]
    Socket {
        /// The socket's path.
        path: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// A thread for the peer's input or output could not start.
    #[error("cannot start a thread for the peer: {0}")]
    Thread(Arc<std::io::Error>),
    /// The command could not be started.
    #[error("cannot start {program:?}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: Arc<std::io::Error>,
    },
    /// The child has no pipes.
    #[error("no pipes to the peer")]
    NoPipes,
    /// Its input was closed by monfs.
    #[error("its input is closed")]
    InputClosed,
    /// It took none of its input for a while.
    #[error("does not read its input ({bytes} bytes waiting, none taken for {secs} s)")]
    NotReading {
        /// Bytes waiting.
        bytes: usize,
        /// Seconds since it last took a line.
        secs: u64,
    },
    /// It reads, but too far behind: this many bytes wait.
    #[error("does not keep up with its input ({0} bytes waiting)")]
    Behind(usize),
    /// It closed its input.
    #[error("closed its input")]
    ClosedInput,
    /// It closed its output.
    #[error("closed its output (exited?)")]
    ClosedOutput,
    /// Reading its output failed.
    #[error("read error: {0}")]
    Read(Arc<std::io::Error>),
    /// A line over the limit (bytes).
    #[error("sent a line longer than {0} bytes")]
    LongLine(usize),
    /// The output ended inside a line.
    #[error("closed its output in the middle of a line")]
    PartLine,
    /// More answers than this not taken yet.
    #[error("sent more than {0} answers ahead")]
    TooFarAhead(usize),
    /// A line that is not a `complete` line of the protocol.
    #[error("answered garbage ({what}): {line}")]
    Garbage {
        /// What is wrong with it.
        what: &'static str,
        /// Its start, quoted.
        line: String,
    },
    /// A well-formed answer that does not fit the URB it completes.
    #[error(transparent)]
    Answer(#[from] AnswerError),
}

/// How an answer does not fit the URB it completes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AnswerError {
    /// Isochronous without packet results.
    #[error("completed isochronous URB {0} without its packet results")]
    NoPackets(u64),
    /// Isochronous with an URB status.
    #[error("completed isochronous URB {id} with status {status} (the packets carry the errors)")]
    IsoStatus {
        /// The URB.
        id: u64,
        /// The status given.
        status: i32,
    },
    /// A packet count other than the URB's.
    #[error("completed URB {id} with {got} packets, not its {want}")]
    PacketCount {
        /// The URB.
        id: u64,
        /// Packets answered.
        got: usize,
        /// Packets submitted.
        want: u32,
    },
    /// A packet longer than the packets submitted.
    #[error("completed URB {id} with a packet longer than its {len} bytes")]
    PacketTooLong {
        /// The URB.
        id: u64,
        /// The packet length submitted.
        len: u32,
    },
    /// Packet lengths and actual length differ.
    #[error("completed URB {0}: its packets do not add up to the actual length")]
    PacketSum(u64),
    /// IN without its data.
    #[error("completed IN URB {0} without its data")]
    NoData(u64),
    /// OUT with data.
    #[error("completed OUT URB {0} with data")]
    OutData(u64),
    /// More bytes than the URB's length.
    #[error("completed URB {id} with {actual} bytes, more than its {len}")]
    TooLong {
        /// The URB.
        id: u64,
        /// The actual length answered.
        actual: u32,
        /// The URB's length.
        len: u32,
    },
    /// Packet results for a non-isochronous URB.
    #[error("gave packet results to URB {0}, which is not isochronous")]
    NotIso(u64),
    /// A second answer.
    #[error("completed URB {0} twice")]
    Twice(u64),
    /// An answer to nothing.
    #[error("completed URB {0}, which is not in flight")]
    NotInFlight(u64),
}
