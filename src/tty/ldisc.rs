//! The n_tty line discipline (`drivers/tty/n_tty.c`) as plain state: input
//! processing and canonical editing of the bytes a device receives, echo,
//! output processing of what a program writes, and the read rules
//! (canonical lines, VMIN/VTIME), for one open tty.
//!
//! [`NTty`] keeps the kernel's own bookkeeping (a 4096 byte circular read
//! buffer with its line marks, the echo buffer with its operation codes, the
//! output column) so that corner cases come out as they do on Linux. The
//! flow control state (`tty->flow.stopped`, `tco_stopped`) lives here too,
//! since nothing else in a user-space tty needs it.
//!
//! The device node drives it:
//! - bytes from the device: [`NTty::receive`]; send [`Received::echo`] to the
//!   device, keep the bytes past [`Received::consumed`] and feed them again
//!   after a read made room (as the kernel's flip buffer does);
//! - write(2): [`NTty::process_output`], send the result to the device
//!   (hold it while [`NTty::stopped`]);
//! - read(2): a [`ReadPlan`] and [`NTty::read_step`], called at the start,
//!   after every [`NTty::receive`] and when the deadline it asked for passes;
//! - poll: [`NTty::available`]; `TIOCINQ`: [`NTty::inq`]; `TCFLSH`:
//!   [`NTty::flush_input`]; `TCXONC`: [`NTty::tcxonc`]; a termios change:
//!   [`NTty::set_termios`] after the new termios is in place.
//!
//! Methods take the tty's current [`Termios`]; the line discipline's derived
//! state (canonical or not, which characters are special) changes only in
//! [`NTty::set_termios`], as in the kernel.

use super::termios::*;

/// Size of the read buffer (`N_TTY_BUF_SIZE`).
pub const N_TTY_BUF_SIZE: usize = 4096;
const MASK: usize = N_TTY_BUF_SIZE - 1;

/// Echo buffer escape: an operation or a `^X` control character follows.
const ECHO_OP_START: u8 = 0xff;
const ECHO_OP_MOVE_BACK_COL: u8 = 0x80;
const ECHO_OP_SET_CANON_COL: u8 = 0x81;
const ECHO_OP_ERASE_TAB: u8 = 0x82;
const ECHO_COMMIT_WATERMARK: usize = 256;
const ECHO_BLOCK: usize = 256;

/// Throttle the device when less room than this is left.
pub const TTY_THRESHOLD_THROTTLE: usize = 128;
/// Unthrottle when no more than this is waiting to be read.
pub const TTY_THRESHOLD_UNTHROTTLE: usize = 128;

/// One VTIME unit, a decisecond, in nanoseconds.
const DECISECOND_NS: u64 = 100_000_000;

/// The kernel's `iscntrl` (lib/ctype.c, Latin-1: 0x80..=0x9f are control
/// characters too).
fn is_cntrl(c: u8) -> bool {
    c < 0x20 || c == 0x7f || (0x80..=0x9f).contains(&c)
}

/// The kernel's `isupper` (Latin-1).
fn is_upper(c: u8) -> bool {
    c.is_ascii_uppercase() || ((0xc0..=0xde).contains(&c) && c != 0xd7)
}

/// The kernel's `islower` (Latin-1).
fn is_lower(c: u8) -> bool {
    c.is_ascii_lowercase() || (c >= 0xdf && c != 0xf7)
}

/// The kernel's `isalnum` (Latin-1).
fn is_alnum(c: u8) -> bool {
    c.is_ascii_digit() || is_upper(c) || is_lower(c)
}

/// The kernel's `tolower`.
fn to_lower(c: u8) -> u8 {
    if is_upper(c) {
        c + 0x20
    } else {
        c
    }
}

/// The kernel's `toupper`.
fn to_upper(c: u8) -> u8 {
    if is_lower(c) {
        c - 0x20
    } else {
        c
    }
}

/// What [`NTty::receive`] did with a block of bytes from the device.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// How many bytes the line discipline took (`n_tty_receive_buf2`'s
    /// return). The rest did not fit: the kernel leaves it in the tty's flip
    /// buffer and feeds it again once a read has made room; a node that
    /// drops it behaves like `n_tty_receive_buf` instead.
    pub consumed: usize,
    /// Bytes to send to the device: echoes (output processed) and anything
    /// else the line discipline wrote, in order.
    pub echo: Vec<u8>,
    /// The ISIG characters seen (VINTR, VQUIT, VSUSP), in order; there is
    /// no process group to signal.
    pub signals: Vec<u8>,
    /// A signal character flushed the queues (no NOFLSH): discard output
    /// queued to the device and not yet sent (`tty_driver_flush_buffer`).
    pub flush_output: bool,
    /// A START character (or IXANY) restarted stopped output.
    pub start_output: bool,
    /// A STOP character stopped output.
    pub stop_output: bool,
    /// The device should be throttled (n_tty_check_throttle: less than
    /// [`TTY_THRESHOLD_THROTTLE`] bytes of room, unless a canonical line
    /// is still open).
    pub throttle: bool,
}

/// What a read that does not wait gets ([`NTty::read`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadOut {
    /// The bytes read.
    pub data: Vec<u8>,
    /// Canonical mode only: a line was taken and it was just the EOF
    /// character, so read(2) returns 0 (end of file).
    pub eof: bool,
}

/// A blocking or non-blocking read(2) in progress, driven by
/// [`NTty::read_step`] (the state of one `n_tty_read` call).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    max: usize,
    nonblock: bool,
    got: Vec<u8>,
    started: bool,
    minimum: usize,
    time_ns: u64,
    deadline: Option<u64>,
}

impl ReadPlan {
    /// A read of up to `max` bytes; `nonblock` for O_NONBLOCK.
    pub fn new(max: usize, nonblock: bool) -> ReadPlan {
        ReadPlan {
            max,
            nonblock,
            got: Vec::new(),
            started: false,
            minimum: 0,
            time_ns: 0,
            deadline: None,
        }
    }

    /// Bytes taken from the line discipline so far (they are no longer in
    /// its buffer).
    pub fn taken(&self) -> &[u8] {
        &self.got
    }
}

/// What to do with a read after [`NTty::read_step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ReadStep {
    /// The read is over: return these bytes. Empty means read(2) returns 0:
    /// end of file (a canonical line that was only EOF), a VTIME timeout,
    /// or VMIN = VTIME = 0 with nothing there (even with O_NONBLOCK).
    Done(Vec<u8>),
    /// O_NONBLOCK and nothing to read: fail with EAGAIN.
    Again,
    /// Sleep until data arrives (call [`NTty::read_step`] after each
    /// [`NTty::receive`]), a signal (EINTR/ERESTARTSYS: return what
    /// [`ReadPlan::taken`] holds if anything, as the kernel does), a
    /// hangup (return what was taken, or 0), or `until` (nanoseconds on
    /// the clock given to `read_step`; `None` = no timeout).
    Wait {
        /// When to call [`NTty::read_step`] again at the latest.
        until: Option<u64>,
    },
}

/// The n_tty state of one tty (`struct n_tty_data` and the tty's flow
/// control flags).
#[derive(Clone)]
pub struct NTty {
    read_buf: Box<[u8; N_TTY_BUF_SIZE]>,
    read_flags: Box<[bool; N_TTY_BUF_SIZE]>,
    read_head: usize,
    read_tail: usize,
    commit_head: usize,
    canon_head: usize,
    line_start: usize,
    /// Echo bytes not yet processed (the kernel's `echo_buf` from
    /// `echo_tail` to `echo_head`); `echo_commit` and `echo_mark` are
    /// offsets into it.
    echo_buf: Vec<u8>,
    echo_commit: usize,
    echo_mark: usize,
    char_map: [bool; 256],
    lnext: bool,
    erasing: bool,
    raw: bool,
    icanon: bool,
    push: bool,
    column: u32,
    canon_column: u32,
    stopped: bool,
    tco_stopped: bool,
    /// Bytes written to the device and not yet handed out.
    out: Vec<u8>,
    report: Received,
}

impl std::fmt::Debug for NTty {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NTty")
            .field("read_head", &self.read_head)
            .field("read_tail", &self.read_tail)
            .field("canon_head", &self.canon_head)
            .field("icanon", &self.icanon)
            .field("column", &self.column)
            .field("stopped", &self.stopped)
            .finish_non_exhaustive()
    }
}

impl Default for NTty {
    fn default() -> Self {
        NTty::new()
    }
}

impl NTty {
    /// A line discipline opened on a tty with the standard termios
    /// ([`Termios::std`]); use [`NTty::with_termios`] for another one.
    pub fn new() -> NTty {
        NTty::with_termios(&Termios::std(USB_INIT_CFLAG))
    }

    /// A line discipline opened on a tty whose termios is `t`, as n_tty_open
    /// does (`n_tty_set_termios(tty, NULL)`).
    pub fn with_termios(t: &Termios) -> NTty {
        let mut n = NTty {
            read_buf: Box::new([0; N_TTY_BUF_SIZE]),
            read_flags: Box::new([false; N_TTY_BUF_SIZE]),
            read_head: 0,
            read_tail: 0,
            commit_head: 0,
            canon_head: 0,
            line_start: 0,
            echo_buf: Vec::new(),
            echo_commit: 0,
            echo_mark: 0,
            char_map: [false; 256],
            lnext: false,
            erasing: false,
            raw: false,
            icanon: false,
            push: false,
            column: 0,
            canon_column: 0,
            stopped: false,
            tco_stopped: false,
            out: Vec::new(),
            report: Received::default(),
        };
        n.change_termios(None, t);
        n
    }

    fn read_cnt(&self) -> usize {
        self.read_head - self.read_tail
    }

    fn rb(&self, i: usize) -> u8 {
        self.read_buf[i & MASK]
    }

    /// put_tty_queue.
    fn put(&mut self, c: u8) {
        self.read_buf[self.read_head & MASK] = c;
        self.read_head += 1;
    }

    /// reset_buffer_flags.
    fn reset_buffer_flags(&mut self) {
        self.read_head = 0;
        self.canon_head = 0;
        self.read_tail = 0;
        self.commit_head = 0;
        self.line_start = 0;
        self.erasing = false;
        self.read_flags.fill(false);
        self.push = false;
    }

    // ---- flow control (tty_io.c start_tty/stop_tty) ----

    /// __stop_tty.
    fn stop_tty(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        self.report.stop_output = true;
    }

    /// __start_tty.
    fn start_tty(&mut self) {
        if !self.stopped || self.tco_stopped {
            return;
        }
        self.stopped = false;
        self.report.start_output = true;
    }

    /// Whether output is stopped (a STOP character with IXON, or TCOOFF):
    /// hold writes to the device until it is not.
    pub fn stopped(&self) -> bool {
        self.stopped
    }

    /// `TCXONC` with `arg` ([`TCOOFF`], [`TCOON`], [`TCIOFF`], [`TCION`]),
    /// as tty_mode_ioctl does: stop or restart output, or give the STOP or
    /// START character to send to the device at once (`tty_send_xchar`;
    /// nothing when it is disabled). `Err(EINVAL)` for another `arg`.
    pub fn tcxonc(&mut self, t: &Termios, arg: u32) -> Result<Option<u8>, i32> {
        match arg {
            TCOOFF => {
                if !self.tco_stopped {
                    self.tco_stopped = true;
                    self.stop_tty();
                }
                Ok(None)
            }
            TCOON => {
                if self.tco_stopped {
                    self.tco_stopped = false;
                    self.start_tty();
                }
                Ok(None)
            }
            TCIOFF => Ok(Some(t.cc[VSTOP]).filter(|&c| c != DISABLED_CHAR)),
            TCION => Ok(Some(t.cc[VSTART]).filter(|&c| c != DISABLED_CHAR)),
            _ => Err(libc::EINVAL),
        }
    }

    // ---- output (do_output_char and the echo buffer) ----

    /// One character with OPOST processing, as do_output_char does (the
    /// device always has room here).
    fn do_output_char(&mut self, t: &Termios, mut c: u8) {
        match c {
            b'\n' => {
                if t.o(ONLRET) {
                    self.column = 0;
                }
                if t.o(ONLCR) {
                    self.column = 0;
                    self.canon_column = 0;
                    self.out.extend_from_slice(b"\r\n");
                    return;
                }
                self.canon_column = self.column;
            }
            b'\r' => {
                if t.o(ONOCR) && self.column == 0 {
                    return;
                }
                if t.o(OCRNL) {
                    c = b'\n';
                    if t.o(ONLRET) {
                        self.column = 0;
                        self.canon_column = 0;
                    }
                } else {
                    self.column = 0;
                    self.canon_column = 0;
                }
            }
            b'\t' => {
                let spaces = 8 - (self.column & 7);
                self.column += spaces;
                if t.oflag & TABDLY == XTABS {
                    self.out.extend(std::iter::repeat_n(b' ', spaces as usize));
                    return;
                }
            }
            0x08 => self.column = self.column.saturating_sub(1),
            _ => {
                if !is_cntrl(c) {
                    if t.o(OLCUC) {
                        c = to_upper(c);
                    }
                    if !(t.i(IUTF8) && c & 0xc0 == 0x80) {
                        self.column += 1;
                    }
                }
            }
        }
        self.out.push(c);
    }

    /// write(2) of `data`, as n_tty_write does: first the echoes still
    /// pending (process_echoes), then `data`, with OPOST processing
    /// (process_output_block / process_output, which come to
    /// do_output_char for every byte) or as it is. Returns the bytes for
    /// the device. Job control (TOSTOP) and hangups are the caller's.
    pub fn process_output(&mut self, t: &Termios, data: &[u8]) -> Vec<u8> {
        self.process_echoes(t);
        if t.o(OPOST) {
            for &c in data {
                self.do_output_char(t, c);
            }
        } else {
            self.out.extend_from_slice(data);
        }
        std::mem::take(&mut self.out)
    }

    /// The echoes still pending, for the device (process_echoes at the
    /// start of n_tty_write).
    pub fn pending_echoes(&mut self, t: &Termios) -> Vec<u8> {
        self.process_echoes(t);
        std::mem::take(&mut self.out)
    }

    /// process_output_block: how many of `data`'s first bytes, at most
    /// `room`, go to the device as they are (up to one that output
    /// processing changes or must look at alone), the column following
    /// them. Only with OPOST.
    pub fn output_block(&mut self, t: &Termios, data: &[u8], room: usize) -> usize {
        let nr = data.len().min(room);
        let mut i = 0;
        while i < nr {
            let c = data[i];
            match c {
                b'\n' => {
                    if t.o(ONLRET) {
                        self.column = 0;
                    }
                    if t.o(ONLCR) {
                        break;
                    }
                    self.canon_column = self.column;
                }
                b'\r' => {
                    if (t.o(ONOCR) && self.column == 0) || t.o(OCRNL) {
                        break;
                    }
                    self.column = 0;
                    self.canon_column = 0;
                }
                b'\t' => break,
                0x08 => self.column = self.column.saturating_sub(1),
                _ => {
                    if !is_cntrl(c) {
                        if t.o(OLCUC) {
                            break;
                        }
                        if !(t.i(IUTF8) && c & 0xc0 == 0x80) {
                            self.column += 1;
                        }
                    }
                }
            }
            i += 1;
        }
        i
    }

    /// process_output: what character `c` becomes for the device (maybe
    /// nothing: a CR at column 0 with ONOCR), written with one call of the
    /// driver's; None when the `room` the device has is too little (none;
    /// less than 2 for ONLCR's CR NL, than the spaces of an expanded tab).
    /// Only with OPOST.
    pub fn output_char(&mut self, t: &Termios, c: u8, room: usize) -> Option<Vec<u8>> {
        if room == 0 {
            return None;
        }
        if c == b'\n' && t.o(ONLRET) {
            self.column = 0;
        }
        let need = match c {
            b'\n' if t.o(ONLCR) => 2,
            b'\t' if t.oflag & TABDLY == XTABS => (8 - (self.column & 7)) as usize,
            _ => 1,
        };
        if room < need {
            return None;
        }
        let before = self.out.len();
        self.do_output_char(t, c);
        Some(self.out.split_off(before))
    }

    /// Bytes the line discipline wrote outside [`NTty::receive`] and
    /// [`NTty::process_output`] (echoes released by [`NTty::set_termios`]
    /// restarting output) for the device.
    pub fn take_output(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// add_echo_byte.
    fn add_echo(&mut self, c: u8) {
        self.echo_buf.push(c);
    }

    /// echo_char_raw: a byte as it is (the op escape doubled).
    fn echo_char_raw(&mut self, c: u8) {
        if c == ECHO_OP_START {
            self.add_echo(ECHO_OP_START);
        }
        self.add_echo(c);
    }

    /// echo_char: control characters tagged to come out as `^X` with
    /// ECHOCTL (not TAB).
    fn echo_char(&mut self, t: &Termios, c: u8) {
        if c == ECHO_OP_START {
            self.add_echo(ECHO_OP_START);
            self.add_echo(ECHO_OP_START);
        } else {
            if t.l(ECHOCTL) && is_cntrl(c) && c != b'\t' {
                self.add_echo(ECHO_OP_START);
            }
            self.add_echo(c);
        }
    }

    /// echo_move_back_col.
    fn echo_move_back_col(&mut self) {
        self.add_echo(ECHO_OP_START);
        self.add_echo(ECHO_OP_MOVE_BACK_COL);
    }

    /// echo_set_canon_col.
    fn echo_set_canon_col(&mut self) {
        self.add_echo(ECHO_OP_START);
        self.add_echo(ECHO_OP_SET_CANON_COL);
    }

    /// echo_erase_tab.
    fn echo_erase_tab(&mut self, num_chars: u32, after_tab: bool) {
        self.add_echo(ECHO_OP_START);
        self.add_echo(ECHO_OP_ERASE_TAB);
        let mut n = (num_chars & 7) as u8;
        if after_tab {
            n |= 0x80;
        }
        self.add_echo(n);
    }

    /// finish_erasing: close an ECHOPRT `\...` with `/`.
    fn finish_erasing(&mut self) {
        if self.erasing {
            self.echo_char_raw(b'/');
            self.erasing = false;
        }
    }

    /// __process_echoes: write the committed echo bytes, running the
    /// column operations (all of them: the device always has room).
    fn run_echoes(&mut self, t: &Termios) {
        let end = self.echo_commit.min(self.echo_buf.len());
        let mut i = 0;
        while i < end {
            let c = self.echo_buf[i];
            if c != ECHO_OP_START {
                if t.o(OPOST) {
                    self.do_output_char(t, c);
                } else {
                    self.out.push(c);
                }
                i += 1;
                continue;
            }
            let op = self.echo_buf.get(i + 1).copied().unwrap_or(ECHO_OP_START);
            match op {
                ECHO_OP_ERASE_TAB => {
                    let mut n = u32::from(self.echo_buf.get(i + 2).copied().unwrap_or(0));
                    if n & 0x80 == 0 {
                        n += self.canon_column;
                    }
                    for _ in 0..8 - (n & 7) {
                        self.out.push(0x08);
                        self.column = self.column.saturating_sub(1);
                    }
                    i += 3;
                }
                ECHO_OP_SET_CANON_COL => {
                    self.canon_column = self.column;
                    i += 2;
                }
                ECHO_OP_MOVE_BACK_COL => {
                    self.column = self.column.saturating_sub(1);
                    i += 2;
                }
                ECHO_OP_START => {
                    self.out.push(ECHO_OP_START);
                    self.column += 1;
                    i += 2;
                }
                _ => {
                    self.out.push(b'^');
                    self.out.push(op ^ 0o100);
                    self.column += 2;
                    i += 2;
                }
            }
        }
        let done = i.min(self.echo_buf.len());
        self.echo_buf.drain(..done);
        self.echo_commit = self.echo_commit.saturating_sub(done);
        self.echo_mark = self.echo_mark.saturating_sub(done);
    }

    /// commit_echoes: mark everything; write only once a block has
    /// accumulated.
    fn commit_echoes(&mut self, t: &Termios) {
        let head = self.echo_buf.len();
        self.echo_mark = head;
        let old = self.echo_commit;
        if head < ECHO_COMMIT_WATERMARK || head % ECHO_BLOCK > old % ECHO_BLOCK {
            return;
        }
        self.echo_commit = head;
        self.run_echoes(t);
    }

    /// process_echoes: write what is marked.
    fn process_echoes(&mut self, t: &Termios) {
        if self.echo_mark == 0 {
            return;
        }
        self.echo_commit = self.echo_mark;
        self.run_echoes(t);
    }

    /// flush_echoes: write everything, if echoing.
    fn flush_echoes(&mut self, t: &Termios) {
        if (!t.l(ECHO) && !t.l(ECHONL)) || self.echo_commit == self.echo_buf.len() {
            return;
        }
        self.echo_commit = self.echo_buf.len();
        self.run_echoes(t);
    }

    // ---- input ----

    /// Bytes `data` received from the device, as n_tty_receive_buf2 does
    /// (n_tty_receive_buf_common): as many as fit in the read buffer (in
    /// raw mode 4095, in canonical mode always one more so that a line
    /// can end; with PARMRK a third of the room), each through the input
    /// processing, canonical editing, signal characters and echo of
    /// n_tty_receive_buf_standard, or straight into the buffer when no
    /// input processing is on (n_tty_receive_buf_raw).
    pub fn receive(&mut self, t: &Termios, data: &[u8]) -> Received {
        self.report = Received::default();
        let mut rest = data;
        let mut consumed = 0;
        loop {
            let tail = self.read_tail;
            let mut room = N_TTY_BUF_SIZE as isize - (self.read_head - tail) as isize;
            if t.i(PARMRK) {
                room = (room + 2).div_euclid(3);
            }
            room -= 1;
            if room <= 0 {
                let overflow = self.icanon && self.canon_head == tail;
                if overflow && room < 0 {
                    self.read_head -= 1;
                }
                room = isize::from(overflow);
            }
            let n = rest.len().min(room as usize);
            if n == 0 {
                break;
            }
            self.receive_block(t, &rest[..n]);
            rest = &rest[n..];
            consumed += n;
        }
        self.report.throttle = self.throttle_wanted();
        let mut r = std::mem::take(&mut self.report);
        r.consumed = consumed;
        r.echo = std::mem::take(&mut self.out);
        r
    }

    /// n_tty_check_throttle's test.
    fn throttle_wanted(&self) -> bool {
        if self.icanon && self.canon_head == self.read_tail {
            return false;
        }
        N_TTY_BUF_SIZE - self.read_cnt() < TTY_THRESHOLD_THROTTLE
    }

    /// Whether a throttled device may be unthrottled after a read
    /// (n_tty_check_unthrottle: no more than [`TTY_THRESHOLD_UNTHROTTLE`]
    /// bytes waiting to be read).
    pub fn unthrottle_wanted(&self) -> bool {
        let head = if self.icanon {
            self.canon_head
        } else {
            self.commit_head
        };
        head - self.read_tail <= TTY_THRESHOLD_UNTHROTTLE
    }

    /// __receive_buf.
    fn receive_block(&mut self, t: &Termios, data: &[u8]) {
        let preops = t.i(ISTRIP) || (t.i(IUCLC) && t.l(IEXTEN));
        if self.raw || (t.l(EXTPROC) && !preops) {
            for &c in data {
                self.put(c);
            }
        } else {
            for &c in data {
                self.receive_standard(t, c);
            }
            self.flush_echoes(t);
        }
        if self.icanon && !t.l(EXTPROC) {
            return;
        }
        self.commit_head = self.read_head;
    }

    /// ISTRIP and IUCLC, as n_tty_receive_buf_standard applies them.
    fn preprocess(t: &Termios, mut c: u8) -> u8 {
        if t.i(ISTRIP) {
            c &= 0x7f;
        }
        if t.i(IUCLC) && t.l(IEXTEN) {
            c = to_lower(c);
        }
        c
    }

    /// One byte of n_tty_receive_buf_standard.
    fn receive_standard(&mut self, t: &Termios, c: u8) {
        if self.lnext {
            // n_tty_receive_char_lnext
            self.lnext = false;
            let c = Self::preprocess(t, c);
            self.receive_char(t, c);
            return;
        }
        let c = Self::preprocess(t, c);
        if t.l(EXTPROC) {
            self.put(c);
            return;
        }
        if self.char_map[usize::from(c)] {
            self.receive_char_special(t, c);
        } else {
            self.receive_char(t, c);
        }
    }

    /// The IXANY restart shared by n_tty_receive_char and
    /// n_tty_receive_char_special.
    fn ixany_restart(&mut self, t: &Termios) {
        if self.stopped && !self.tco_stopped && t.i(IXON) && t.i(IXANY) {
            self.start_tty();
            self.process_echoes(t);
        }
    }

    /// n_tty_receive_char: an ordinary character, echoed and queued.
    fn receive_char(&mut self, t: &Termios, c: u8) {
        self.ixany_restart(t);
        if t.l(ECHO) {
            self.finish_erasing();
            if self.canon_head == self.read_head {
                self.echo_set_canon_col();
            }
            self.echo_char(t, c);
            self.commit_echoes(t);
        }
        if c == 0xff && t.i(PARMRK) {
            self.put(c);
        }
        self.put(c);
    }

    /// n_tty_receive_char_flow_ctrl (no lookahead): whether `c` was a START
    /// or STOP character.
    fn receive_flow_ctrl(&mut self, t: &Termios, c: u8) -> bool {
        if c == t.cc[VSTART] {
            self.start_tty();
            self.process_echoes(t);
            return true;
        }
        if c == t.cc[VSTOP] {
            self.stop_tty();
            return true;
        }
        false
    }

    /// isig: no process group to signal; record the character and flush
    /// unless NOFLSH.
    fn isig(&mut self, t: &Termios, c: u8) {
        self.report.signals.push(c);
        if !t.l(NOFLSH) {
            self.echo_buf.clear();
            self.echo_commit = 0;
            self.echo_mark = 0;
            self.out.clear();
            self.report.flush_output = true;
            self.reset_buffer_flags();
        }
    }

    /// n_tty_receive_signal_char.
    fn receive_signal_char(&mut self, t: &Termios, c: u8) {
        self.isig(t, c);
        if t.i(IXON) {
            self.start_tty();
        }
        if t.l(ECHO) {
            self.echo_char(t, c);
            self.commit_echoes(t);
        } else {
            self.process_echoes(t);
        }
    }

    /// n_tty_receive_char_special: a character in the special map.
    fn receive_char_special(&mut self, t: &Termios, mut c: u8) {
        if t.i(IXON) && self.receive_flow_ctrl(t, c) {
            return;
        }
        if t.l(ISIG) && (c == t.cc[VINTR] || c == t.cc[VQUIT] || c == t.cc[VSUSP]) {
            self.receive_signal_char(t, c);
            return;
        }
        self.ixany_restart(t);
        if c == b'\r' {
            if t.i(IGNCR) {
                return;
            }
            if t.i(ICRNL) {
                c = b'\n';
            }
        } else if c == b'\n' && t.i(INLCR) {
            c = b'\r';
        }
        if self.icanon && self.receive_char_canon(t, c) {
            return;
        }
        if t.l(ECHO) {
            self.finish_erasing();
            if c == b'\n' {
                self.echo_char_raw(b'\n');
            } else {
                if self.canon_head == self.read_head {
                    self.echo_set_canon_col();
                }
                self.echo_char(t, c);
            }
            self.commit_echoes(t);
        }
        if c == 0xff && t.i(PARMRK) {
            self.put(c);
        }
        self.put(c);
    }

    /// n_tty_receive_handle_newline: queue `c` and end the line.
    fn handle_newline(&mut self, c: u8) {
        self.read_flags[self.read_head & MASK] = true;
        self.put(c);
        self.canon_head = self.read_head;
    }

    /// n_tty_receive_char_canon: the editing characters; whether `c` was one.
    fn receive_char_canon(&mut self, t: &Termios, c: u8) -> bool {
        let cc = &t.cc;
        let iexten = t.l(IEXTEN);
        if c == cc[VERASE] || c == cc[VKILL] || (c == cc[VWERASE] && iexten) {
            self.eraser(t, c);
            self.commit_echoes(t);
            return true;
        }
        if c == cc[VLNEXT] && iexten {
            self.lnext = true;
            if t.l(ECHO) {
                self.finish_erasing();
                if t.l(ECHOCTL) {
                    self.echo_char_raw(b'^');
                    self.echo_char_raw(0x08);
                    self.commit_echoes(t);
                }
            }
            return true;
        }
        if c == cc[VREPRINT] && t.l(ECHO) && iexten {
            self.finish_erasing();
            self.echo_char(t, c);
            self.echo_char_raw(b'\n');
            let mut tail = self.canon_head;
            while tail & MASK != self.read_head & MASK {
                let b = self.rb(tail);
                self.echo_char(t, b);
                tail += 1;
            }
            self.commit_echoes(t);
            return true;
        }
        if c == b'\n' {
            if t.l(ECHO) || t.l(ECHONL) {
                self.echo_char_raw(b'\n');
                self.commit_echoes(t);
            }
            self.handle_newline(c);
            return true;
        }
        if c == cc[VEOF] {
            self.handle_newline(DISABLED_CHAR);
            return true;
        }
        if c == cc[VEOL] || (c == cc[VEOL2] && iexten) {
            if t.l(ECHO) {
                if self.canon_head == self.read_head {
                    self.echo_set_canon_col();
                }
                self.echo_char(t, c);
                self.commit_echoes(t);
            }
            if c == 0xff && t.i(PARMRK) {
                self.put(c);
            }
            self.handle_newline(c);
            return true;
        }
        false
    }

    /// eraser: VERASE, VWERASE and VKILL on the open line, with their
    /// echoes (ECHOPRT, ECHOE, tabs, ^X, ECHOK/ECHOKE).
    fn eraser(&mut self, t: &Termios, c: u8) {
        #[derive(PartialEq)]
        enum Kill {
            Erase,
            Werase,
            Line,
        }
        if self.read_head == self.canon_head {
            return;
        }
        let utf8 = t.i(IUTF8);
        let cont = |b: u8| utf8 && b & 0xc0 == 0x80;
        let kind = if c == t.cc[VERASE] {
            Kill::Erase
        } else if c == t.cc[VWERASE] {
            Kill::Werase
        } else {
            if !t.l(ECHO) {
                self.read_head = self.canon_head;
                return;
            }
            if !t.l(ECHOK) || !t.l(ECHOKE) || !t.l(ECHOE) {
                self.read_head = self.canon_head;
                self.finish_erasing();
                self.echo_char(t, t.cc[VKILL]);
                if t.l(ECHOK) {
                    self.echo_char_raw(b'\n');
                }
                return;
            }
            Kill::Line
        };

        let mut seen_alnums = 0;
        while self.read_head & MASK != self.canon_head & MASK {
            let mut head = self.read_head;
            let mut c;
            // One character, all of a UTF-8 sequence.
            loop {
                head -= 1;
                c = self.rb(head);
                if !(cont(c) && head & MASK != self.canon_head & MASK) {
                    break;
                }
            }
            if cont(c) {
                break;
            }
            if kind == Kill::Werase {
                if is_alnum(c) || c == b'_' {
                    seen_alnums += 1;
                } else if seen_alnums > 0 {
                    break;
                }
            }
            let mut cnt = self.read_head - head;
            self.read_head = head;
            if t.l(ECHO) {
                if t.l(ECHOPRT) {
                    if !self.erasing {
                        self.echo_char_raw(b'\\');
                        self.erasing = true;
                    }
                    self.echo_char(t, c);
                    while cnt > 1 {
                        cnt -= 1;
                        head += 1;
                        let b = self.rb(head);
                        self.echo_char_raw(b);
                        self.echo_move_back_col();
                    }
                } else if kind == Kill::Erase && !t.l(ECHOE) {
                    self.echo_char(t, t.cc[VERASE]);
                } else if c == b'\t' {
                    let mut num_chars = 0u32;
                    let mut after_tab = false;
                    let mut tail = self.read_head;
                    while tail & MASK != self.canon_head & MASK {
                        tail -= 1;
                        let b = self.rb(tail);
                        if b == b'\t' {
                            after_tab = true;
                            break;
                        } else if is_cntrl(b) {
                            if t.l(ECHOCTL) {
                                num_chars += 2;
                            }
                        } else if !cont(b) {
                            num_chars += 1;
                        }
                    }
                    self.echo_erase_tab(num_chars, after_tab);
                } else {
                    if is_cntrl(c) && t.l(ECHOCTL) {
                        for b in *b"\x08 \x08" {
                            self.echo_char_raw(b);
                        }
                    }
                    if !is_cntrl(c) || t.l(ECHOCTL) {
                        for b in *b"\x08 \x08" {
                            self.echo_char_raw(b);
                        }
                    }
                }
            }
            if kind == Kill::Erase {
                break;
            }
        }
        if self.read_head == self.canon_head && t.l(ECHO) {
            self.finish_erasing();
        }
    }

    // ---- termios changes and flushes ----

    /// The termios changed from `old` to `new` (already the tty's termios),
    /// as n_tty_set_termios does: switching ICANON (or EXTPROC) forgets the
    /// line marks; pending input becomes one line when ICANON goes on (and
    /// is readable at once), all of it readable when ICANON goes off; the
    /// special characters are recomputed; output stopped by a STOP
    /// character restarts when IXON goes off.
    pub fn set_termios(&mut self, old: &Termios, new: &Termios) {
        self.change_termios(Some(old), new);
    }

    fn change_termios(&mut self, old: Option<&Termios>, t: &Termios) {
        if old.is_none_or(|o| (o.lflag ^ t.lflag) & (ICANON | EXTPROC) != 0) {
            self.read_flags.fill(false);
            self.line_start = self.read_tail;
            if !t.l(ICANON) || self.read_cnt() == 0 {
                self.canon_head = self.read_tail;
                self.push = false;
            } else {
                self.read_flags[(self.read_head - 1) & MASK] = true;
                self.canon_head = self.read_head;
                self.push = true;
            }
            self.commit_head = self.read_head;
            self.erasing = false;
            self.lnext = false;
        }
        self.icanon = t.l(ICANON);

        if t.i(ISTRIP | IUCLC | IGNCR | ICRNL | INLCR | IXON | PARMRK) || t.l(ICANON | ISIG | ECHO)
        {
            self.char_map = [false; 256];
            let mut set = |c: u8| self.char_map[usize::from(c)] = true;
            if t.i(IGNCR | ICRNL) {
                set(b'\r');
            }
            if t.i(INLCR) {
                set(b'\n');
            }
            if t.l(ICANON) {
                set(t.cc[VERASE]);
                set(t.cc[VKILL]);
                set(t.cc[VEOF]);
                set(b'\n');
                set(t.cc[VEOL]);
                if t.l(IEXTEN) {
                    set(t.cc[VWERASE]);
                    set(t.cc[VLNEXT]);
                    set(t.cc[VEOL2]);
                    if t.l(ECHO) {
                        set(t.cc[VREPRINT]);
                    }
                }
            }
            if t.i(IXON) {
                set(t.cc[VSTART]);
                set(t.cc[VSTOP]);
            }
            if t.l(ISIG) {
                set(t.cc[VINTR]);
                set(t.cc[VQUIT]);
                set(t.cc[VSUSP]);
            }
            self.char_map[usize::from(DISABLED_CHAR)] = false;
            self.raw = false;
        } else {
            // Also real_raw for the USB drivers (TTY_DRIVER_REAL_RAW);
            // without per-byte flags the two paths are the same.
            self.raw = true;
        }

        if !t.i(IXON) && old.is_some_and(|o| o.iflag & IXON != 0) && !self.tco_stopped {
            self.start_tty();
            self.process_echoes(t);
        }
        // Flow changes made here are not part of any receive's report.
        self.report.start_output = false;
        self.report.stop_output = false;
    }

    /// Discard the input not yet read (`TCFLSH` with [`TCIFLUSH`], the
    /// flush of TCSETSF, a hangup), as n_tty_flush_buffer does.
    pub fn flush_input(&mut self) {
        self.reset_buffer_flags();
    }

    // ---- reading ----

    /// Whether a read would find something, as input_available_p does:
    /// canonical mode: a complete line; otherwise at least one byte, or
    /// for `poll` with VTIME 0 at least VMIN bytes.
    pub fn available(&self, t: &Termios, poll: bool) -> bool {
        let amt = if poll && t.cc[VTIME] == 0 && t.cc[VMIN] != 0 {
            usize::from(t.cc[VMIN])
        } else {
            1
        };
        if self.icanon && !t.l(EXTPROC) {
            self.canon_head != self.read_tail
        } else {
            self.commit_head - self.read_tail >= amt
        }
    }

    /// `TIOCINQ`/`FIONREAD`, as n_tty_ioctl answers it: in canonical mode
    /// the bytes of complete lines (EOF characters not counted), else all
    /// the bytes in the buffer.
    pub fn inq(&self, t: &Termios) -> usize {
        if !t.l(ICANON) || t.l(EXTPROC) {
            return self.read_cnt();
        }
        if self.canon_head == self.read_tail {
            return 0;
        }
        let mut nr = self.canon_head - self.read_tail;
        let mut tail = self.read_tail;
        while tail & MASK != self.canon_head & MASK {
            if self.read_flags[tail & MASK] && self.rb(tail) == DISABLED_CHAR {
                nr -= 1;
            }
            tail += 1;
        }
        nr
    }

    /// Clear bytes a canonical, non-echoing reader took (zero_buffer:
    /// perhaps a password).
    fn zero(&mut self, t: &Termios, from: usize, n: usize) {
        if t.l(ICANON) && !t.l(ECHO) {
            for i in 0..n {
                self.read_buf[(from + i) & MASK] = 0;
            }
        }
    }

    /// copy_from_read_buf: up to `nr` committed bytes (up to the buffer's
    /// wrap); whether more remain.
    fn copy_raw(&mut self, t: &Termios, kb: &mut Vec<u8>, nr: &mut usize) -> bool {
        let head = self.commit_head;
        let tail = self.read_tail & MASK;
        let n = (head - self.read_tail).min(N_TTY_BUF_SIZE - tail).min(*nr);
        if n == 0 {
            return false;
        }
        let is_eof = n == 1 && self.read_buf[tail] == t.cc[VEOF];
        let bytes = self.read_buf[tail..tail + n].to_vec();
        self.zero(t, tail, n);
        self.read_tail += n;
        if t.l(EXTPROC) && self.icanon && is_eof && head == self.read_tail {
            return false;
        }
        kb.extend_from_slice(&bytes);
        *nr -= n;
        head != self.read_tail
    }

    /// canon_copy_from_read_buf: the rest of the current line, up to `nr`
    /// bytes; the line's end is taken too, and returned unless it is an
    /// EOF. Whether the line goes on.
    fn copy_canon(&mut self, t: &Termios, kb: &mut Vec<u8>, nr: &mut usize) -> bool {
        if *nr == 0 {
            return false;
        }
        let canon_head = self.canon_head;
        let avail = (*nr).min(canon_head - self.read_tail);
        let eol = (0..avail).find(|&i| self.read_flags[(self.read_tail + i) & MASK]);
        let (n, c) = match eol {
            Some(i) if self.rb(self.read_tail + i) == DISABLED_CHAR => (i, i + 1),
            Some(i) => (i + 1, i + 1),
            None => (avail, avail),
        };
        for i in 0..n {
            kb.push(self.rb(self.read_tail + i));
        }
        self.zero(t, self.read_tail, n);
        *nr -= n;
        if let Some(i) = eol {
            self.read_flags[(self.read_tail + i) & MASK] = false;
        }
        self.read_tail += c;
        if eol.is_some() {
            if !self.push {
                self.line_start = self.read_tail;
            } else {
                self.push = false;
            }
            return false;
        }
        self.read_tail != canon_head
    }

    /// canon_skip_eof: a read that filled its buffer with a line's text
    /// also takes the EOF ending it.
    fn canon_skip_eof(&mut self) {
        if self.read_tail == self.canon_head {
            return;
        }
        let tail = self.read_tail & MASK;
        if !self.read_flags[tail] || self.read_buf[tail] != DISABLED_CHAR {
            return;
        }
        self.read_flags[tail] = false;
        self.read_tail += 1;
    }

    /// Copy what the read may take now and finish the read if it is done
    /// (one pass of n_tty_read's loop and, when it returns early with more
    /// to copy, tty_read's continuation calls). `None` when it must go on.
    fn read_pass(&mut self, t: &Termios, plan: &mut ReadPlan, now_ns: u64) -> Option<Vec<u8>> {
        let mut nr = plan.max - plan.got.len();
        if self.icanon && !t.l(EXTPROC) {
            if self.copy_canon(t, &mut plan.got, &mut nr) {
                // More of the line than fits in this chunk: tty_read goes
                // on until the line or the user's buffer ends.
                loop {
                    if nr == 0 {
                        self.canon_skip_eof();
                        break;
                    }
                    if !self.copy_canon(t, &mut plan.got, &mut nr) {
                        break;
                    }
                }
                return Some(std::mem::take(&mut plan.got));
            }
        } else if self.copy_raw(t, &mut plan.got, &mut nr) && plan.got.len() >= plan.minimum {
            while nr > 0 && self.copy_raw(t, &mut plan.got, &mut nr) {}
            return Some(std::mem::take(&mut plan.got));
        }
        if plan.got.len() >= plan.minimum {
            return Some(std::mem::take(&mut plan.got));
        }
        if plan.time_ns > 0 {
            plan.deadline = Some(now_ns + plan.time_ns);
        }
        None
    }

    /// Advance a read, as n_tty_read does, `now_ns` being a monotonic clock.
    ///
    /// Canonical mode: wait for a line and return it (up to the plan's
    /// `max` bytes; the rest of a longer line stays for the next read); a
    /// line that is just EOF returns no bytes. Otherwise, by VMIN and VTIME:
    ///
    /// - both 0: return at once what is there, perhaps nothing;
    /// - VMIN set, VTIME 0: wait for min(VMIN, max) bytes;
    /// - VMIN 0, VTIME set: wait at most VTIME deciseconds from the start
    ///   for one byte;
    /// - both set: wait without limit for the first byte, then at most
    ///   VTIME deciseconds after each arrival (the timer restarts whenever
    ///   the reader takes bytes) until VMIN.
    ///
    /// Whatever is available is returned, up to `max`, once the condition
    /// holds.
    ///
    /// Call it when the read starts, after every [`NTty::receive`] (a
    /// wakeup) and when the asked deadline passes. With O_NONBLOCK it
    /// answers [`ReadStep::Again`] where the kernel fails with EAGAIN. The
    /// caller handles hangups, signals and job control.
    pub fn read_step(&mut self, t: &Termios, plan: &mut ReadPlan, now_ns: u64) -> ReadStep {
        if !plan.started {
            plan.started = true;
            plan.minimum = 0;
            plan.time_ns = 0;
            plan.deadline = None;
            if !self.icanon {
                let vtime = u64::from(t.cc[VTIME]) * DECISECOND_NS;
                plan.minimum = usize::from(t.cc[VMIN]);
                if plan.minimum > 0 {
                    plan.time_ns = vtime;
                } else {
                    plan.deadline = Some(now_ns + vtime);
                    plan.minimum = 1;
                }
            }
        }
        while plan.got.len() < plan.max {
            if !self.available(t, false) {
                if plan.deadline.is_some_and(|d| now_ns >= d) {
                    break;
                }
                if plan.nonblock {
                    if plan.got.is_empty() {
                        return ReadStep::Again;
                    }
                    break;
                }
                return ReadStep::Wait {
                    until: plan.deadline,
                };
            }
            if let Some(data) = self.read_pass(t, plan, now_ns) {
                return ReadStep::Done(data);
            }
        }
        ReadStep::Done(std::mem::take(&mut plan.got))
    }

    /// What a read of up to `max` bytes takes right now, without waiting:
    /// canonical mode at most one line (the EOF character ending it is not
    /// returned; a line of just EOF gives `eof`), otherwise everything
    /// there, up to `max`. Empty and not `eof`: nothing to read (a blocking
    /// reader waits, see [`NTty::read_step`]; O_NONBLOCK gives EAGAIN).
    pub fn read(&mut self, t: &Termios, max: usize) -> ReadOut {
        if max == 0 || !self.available(t, false) {
            return ReadOut::default();
        }
        let mut plan = ReadPlan::new(max, true);
        plan.started = true;
        match self.read_pass(t, &mut plan, 0) {
            Some(data) => ReadOut {
                eof: data.is_empty(),
                data,
            },
            None => ReadOut {
                data: plan.got,
                eof: false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn std_t() -> Termios {
        Termios::std(USB_INIT_CFLAG)
    }

    fn raw_t() -> Termios {
        // cfmakeraw
        let mut t = std_t();
        t.iflag &= !(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
        t.oflag &= !OPOST;
        t.lflag &= !(ECHO | ECHONL | ICANON | ISIG | IEXTEN);
        t.cflag = (t.cflag & !(CSIZE | PARENB)) | CS8;
        t
    }

    fn line(n: &mut NTty, t: &Termios) -> Vec<u8> {
        n.read(t, 4096).data
    }

    #[test]
    fn canonical_editing() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        let r = n.receive(&t, b"helo\x7flo\r");
        assert_eq!(r.consumed, 8);
        assert_eq!(r.echo, b"helo\x08 \x08lo\r\n");
        assert_eq!(line(&mut n, &t), b"hello\n");
        // Nothing until a line ends.
        n.receive(&t, b"abc");
        assert!(!n.available(&t, false));
        assert_eq!(n.inq(&t), 0);
        assert_eq!(n.read(&t, 10), ReadOut::default());
        // Kill the line (ECHOKE: erased on screen).
        let r = n.receive(&t, b"\x15xyz");
        assert_eq!(r.echo, b"\x08 \x08\x08 \x08\x08 \x08xyz");
        // Word erase takes the word and the blanks after it.
        let r = n.receive(&t, b" foo_1 \x17");
        assert_eq!(
            r.echo,
            b" foo_1 \x08 \x08\x08 \x08\x08 \x08\x08 \x08\x08 \x08\x08 \x08"
        );
        let r = n.receive(&t, b"\n");
        assert_eq!(r.echo, b"\r\n");
        assert_eq!(n.inq(&t), 5);
        assert_eq!(line(&mut n, &t), b"xyz \n");
        // Erase at the start of a line does nothing.
        assert_eq!(n.receive(&t, b"\x7f").echo, b"");
    }

    #[test]
    fn kill_without_echoke() {
        let mut t = std_t();
        t.lflag &= !ECHOKE;
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.receive(&t, b"ab\x15").echo, b"ab^U\r\n");
        // Without ECHOE, erase echoes the erase character.
        t.lflag &= !ECHOE;
        n.set_termios(&t, &t);
        assert_eq!(n.receive(&t, b"cd\x7fe\n").echo, b"cd^?e\r\n");
        assert_eq!(line(&mut n, &t), b"ce\n");
    }

    #[test]
    fn echonl_without_echo() {
        let mut t = std_t();
        t.lflag = (t.lflag & !ECHO) | ECHONL;
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.receive(&t, b"secret\n").echo, b"\r\n");
        assert_eq!(line(&mut n, &t), b"secret\n");
    }

    #[test]
    fn echoprt() {
        let mut t = std_t();
        t.lflag |= ECHOPRT;
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.receive(&t, b"abc\x7f\x7fd").echo, b"abc\\cb/d");
    }

    #[test]
    fn eof_handling() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        // EOF at the start of a line: end of file.
        let r = n.receive(&t, b"\x04");
        assert_eq!(r.echo, b"");
        assert!(n.available(&t, false));
        assert_eq!(n.inq(&t), 0);
        assert_eq!(
            n.read(&t, 100),
            ReadOut {
                data: vec![],
                eof: true
            }
        );
        // EOF mid-line: the line without the EOF, no end of file.
        n.receive(&t, b"ab\x04");
        assert_eq!(n.inq(&t), 2);
        assert_eq!(
            n.read(&t, 100),
            ReadOut {
                data: b"ab".to_vec(),
                eof: false
            }
        );
        assert!(!n.available(&t, false));
        // A read that fills its buffer with the text takes the EOF too.
        n.receive(&t, b"abc\x04\x04");
        assert_eq!(n.read(&t, 3).data, b"abc");
        assert_eq!(
            n.read(&t, 3),
            ReadOut {
                data: vec![],
                eof: true
            }
        );
        // A longer line comes in pieces.
        n.receive(&t, b"hello\n");
        assert_eq!(n.read(&t, 2).data, b"he");
        assert_eq!(n.read(&t, 100).data, b"llo\n");
    }

    #[test]
    fn cr_nl_mapping() {
        let mut t = std_t();
        let mut n = NTty::with_termios(&t);
        n.receive(&t, b"a\r");
        assert_eq!(line(&mut n, &t), b"a\n");
        t.iflag = (t.iflag & !ICRNL) | INLCR;
        n.set_termios(&t, &t);
        // INLCR: NL becomes CR, which does not end a line.
        n.receive(&t, b"b\nc\r");
        assert!(!n.available(&t, false));
        t.iflag |= IGNCR;
        n.set_termios(&t, &t);
        n.receive(&t, b"\rd");
        t.lflag &= !ICANON;
        let old = {
            let mut o = t;
            o.lflag |= ICANON;
            o
        };
        n.set_termios(&old, &t);
        assert_eq!(line(&mut n, &t), b"b\rc\rd");
        // ISTRIP.
        t.iflag = ISTRIP;
        n.set_termios(&t, &t);
        n.receive(&t, &[0xc1]);
        assert_eq!(line(&mut n, &t), b"A");
    }

    #[test]
    fn echoctl() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.receive(&t, b"a\x01\x1b\tb").echo, b"a^A^[\tb");
        // b; the tab (at column 5 after "a^A^[": 3 columns); ^[ (2 columns).
        assert_eq!(
            n.receive(&t, b"\x7f\x7f\x7f").echo,
            b"\x08 \x08\x08\x08\x08\x08 \x08\x08 \x08"
        );
        let mut t2 = t;
        t2.lflag &= !ECHOCTL;
        let mut n = NTty::with_termios(&t2);
        assert_eq!(n.receive(&t2, b"\x01").echo, b"\x01");
    }

    #[test]
    fn signals() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        n.receive(&t, b"done\n");
        let r = n.receive(&t, b"abc\x03");
        assert_eq!(r.signals, vec![3]);
        assert!(r.flush_output);
        // The uncommitted echoes of this block go with the flush.
        assert_eq!(r.echo, b"^C");
        assert_eq!(n.inq(&t), 0);
        let r = n.receive(&t, b"\x1c\x1a");
        assert_eq!(r.signals, vec![0x1c, 0x1a]);
        // The second flush drops the first one's echo, still uncommitted.
        assert_eq!(r.echo, b"^Z");
        // NOFLSH keeps the input.
        let mut t2 = t;
        t2.lflag |= NOFLSH;
        n.set_termios(&t, &t2);
        let r = n.receive(&t2, b"x\n\x03");
        assert!(!r.flush_output);
        assert_eq!(r.echo, b"x\r\n^C");
        assert_eq!(line(&mut n, &t2), b"x\n");
    }

    #[test]
    fn lnext_and_reprint() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        let r = n.receive(&t, b"\x16\x03\x16\x7f");
        assert!(r.signals.is_empty());
        assert_eq!(r.echo, b"^\x08^C^\x08^?");
        let r = n.receive(&t, b"\x12");
        assert_eq!(r.echo, b"^R\r\n^C^?");
        n.receive(&t, b"\n");
        assert_eq!(line(&mut n, &t), b"\x03\x7f\n");
    }

    #[test]
    fn ixon() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        let r = n.receive(&t, b"\x13");
        assert!(r.stop_output && n.stopped());
        assert!(n.receive(&t, b"a").echo == b"a" && n.stopped());
        let r = n.receive(&t, b"\x11");
        assert!(r.start_output && !n.stopped());
        let mut t2 = t;
        t2.iflag |= IXANY;
        n.receive(&t2, b"\x13");
        let r = n.receive(&t2, b"b");
        assert!(r.start_output && !n.stopped());
        // TCOOFF is not undone by START.
        assert_eq!(n.tcxonc(&t, TCOOFF), Ok(None));
        n.receive(&t, b"\x11");
        assert!(n.stopped());
        n.tcxonc(&t, TCOON).unwrap();
        assert!(!n.stopped());
        assert_eq!(n.tcxonc(&t, TCIOFF), Ok(Some(0x13)));
        assert_eq!(n.tcxonc(&t, 9), Err(libc::EINVAL));
        // Turning IXON off restarts output.
        n.receive(&t, b"\x13");
        let mut t3 = t;
        t3.iflag &= !IXON;
        n.set_termios(&t, &t3);
        assert!(!n.stopped());
        // Without IXON the characters are data.
        n.receive(&t3, b"\x13\n");
        assert_eq!(line(&mut n, &t3), b"ab\x13\n");
    }

    /// n_tty_write's OPOST loop over a device with `room` bytes of room per
    /// write call: the writes it makes.
    fn writes(n: &mut NTty, t: &Termios, data: &[u8], mut room: usize) -> (usize, Vec<Vec<u8>>) {
        let mut out = Vec::new();
        let mut i = 0;
        while i < data.len() {
            let k = n.output_block(t, &data[i..], room);
            if k > 0 {
                out.push(data[i..i + k].to_vec());
                room -= k;
            }
            i += k;
            if i == data.len() {
                break;
            }
            let Some(c) = n.output_char(t, data[i], room) else {
                break;
            };
            room -= c.len();
            if !c.is_empty() {
                out.push(c);
            }
            i += 1;
        }
        (i, out)
    }

    #[test]
    fn output_in_blocks_and_characters_as_room_allows() {
        let mut t = std_t();
        let mut n = NTty::with_termios(&t);
        // Plain characters go as a block; NL with ONLCR and a tab alone.
        let (i, w) = writes(&mut n, &t, b"ab\ncd\te", 100);
        assert_eq!(i, 7);
        let w: Vec<&[u8]> = w.iter().map(|v| v.as_slice()).collect();
        assert_eq!(w, [&b"ab"[..], b"\r\n", b"cd", b"\t", b"e"]);
        assert_eq!(n.column, 9);
        // CR NL needs room for both: it waits, not taken.
        let mut n = NTty::with_termios(&t);
        assert_eq!(writes(&mut n, &t, b"abc\n", 4), (3, vec![b"abc".to_vec()]));
        assert_eq!(n.output_char(&t, b'\n', 1), None);
        assert_eq!(n.output_char(&t, b'\n', 2), Some(b"\r\n".to_vec()));
        // No room: nothing.
        assert_eq!(n.output_block(&t, b"xyz", 0), 0);
        assert_eq!(n.output_char(&t, b'x', 0), None);
        // XTABS needs room for the spaces.
        t.oflag |= XTABS;
        let mut n = NTty::with_termios(&t);
        n.column = 5;
        assert_eq!(n.output_char(&t, b'\t', 2), None);
        assert_eq!(n.output_char(&t, b'\t', 3), Some(b"   ".to_vec()));
        // OLCUC: every printable character goes alone.
        t.oflag = OPOST | OLCUC;
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.output_block(&t, b"Ab", 10), 0);
        assert_eq!(n.output_char(&t, b'A', 10), Some(b"A".to_vec()));
        assert_eq!(n.output_char(&t, b'b', 10), Some(b"B".to_vec()));
        // ONOCR: a CR at column 0 is taken and writes nothing.
        t.oflag = OPOST | ONOCR;
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.output_block(&t, b"\r", 10), 0);
        assert_eq!(n.output_char(&t, b'\r', 10), Some(Vec::new()));
        // The same bytes as process_output gives, however they are cut.
        let t = std_t();
        let text = b"one\ttwo\r\nthree\x08\n";
        let whole = NTty::with_termios(&t).process_output(&t, text);
        let mut n = NTty::with_termios(&t);
        let (i, w) = writes(&mut n, &t, text, 1000);
        assert_eq!((i, w.concat()), (text.len(), whole));
    }

    #[test]
    fn output_processing() {
        let mut t = std_t();
        let mut n = NTty::with_termios(&t);
        assert_eq!(n.process_output(&t, b"a\nb\tc"), b"a\r\nb\tc");
        assert_eq!(n.column, 9);
        t.oflag |= XTABS;
        assert_eq!(n.process_output(&t, b"\rab\tc\t"), b"\rab      c       ");
        assert_eq!(n.column, 16);
        t.oflag = OPOST | OCRNL | ONOCR | OLCUC;
        assert_eq!(n.process_output(&t, b"x\r"), b"X\n");
        n.column = 0;
        assert_eq!(n.process_output(&t, b"\r"), b"");
        t.oflag = OPOST | ONLRET;
        assert_eq!(n.process_output(&t, b"ab\n"), b"ab\n");
        assert_eq!(n.column, 0);
        t.oflag = ONLCR;
        assert_eq!(n.process_output(&t, b"a\n\t"), b"a\n\t");
    }

    #[test]
    fn tab_erase() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        // Prompt of 3 columns, then "ab\t" reaches column 8.
        n.process_output(&t, b"$> ");
        let r = n.receive(&t, b"ab\t\x7f");
        // The tab is 3 columns wide: 3 backspaces.
        assert_eq!(r.echo, b"ab\t\x08\x08\x08");
        assert_eq!(n.column, 5);
    }

    #[test]
    fn raw_buffer_limit() {
        let t = raw_t();
        let mut n = NTty::with_termios(&t);
        let data = vec![b'x'; 5000];
        let r = n.receive(&t, &data);
        assert_eq!(r.consumed, 4095);
        assert!(r.throttle);
        assert!(r.echo.is_empty());
        assert_eq!(n.inq(&t), 4095);
        assert_eq!(n.receive(&t, b"y").consumed, 0);
        assert_eq!(n.read(&t, 95).data.len(), 95);
        assert_eq!(n.receive(&t, &data).consumed, 95);
        // Raw: no processing at all.
        let mut n = NTty::with_termios(&t);
        n.receive(&t, b"\x03\r\x04");
        assert_eq!(n.read(&t, 10).data, b"\x03\r\x04");
    }

    #[test]
    fn canonical_buffer_limit() {
        let mut t = std_t();
        t.lflag &= !ECHO;
        let mut n = NTty::with_termios(&t);
        let r = n.receive(&t, &vec![b'a'; 5000]);
        // An open line takes everything, the excess overwriting its end.
        assert_eq!(r.consumed, 5000);
        assert!(!r.throttle);
        n.receive(&t, b"\n");
        let l = line(&mut n, &t);
        assert_eq!(l.len(), 4096);
        assert_eq!(l[4095], b'\n');
        // With a complete line waiting, the rest must wait for a reader.
        n.receive(&t, b"x\n");
        let r = n.receive(&t, &vec![b'b'; 5000]);
        assert_eq!(r.consumed, 4093);
    }

    #[test]
    fn icanon_switching() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        n.receive(&t, b"one\ntw");
        // Off: everything readable, the line end stays a byte.
        let mut raw = t;
        raw.lflag &= !ICANON;
        n.set_termios(&t, &raw);
        assert_eq!(n.inq(&raw), 6);
        assert_eq!(n.read(&raw, 100).data, b"one\ntw");
        // On with pending input: it becomes one line at once.
        n.receive(&raw, b"abc");
        n.set_termios(&raw, &t);
        assert!(n.available(&t, false));
        assert_eq!(n.inq(&t), 3);
        assert_eq!(line(&mut n, &t), b"abc");
        // And the next line is normal.
        n.receive(&t, b"d\n");
        assert_eq!(line(&mut n, &t), b"d\n");
    }

    #[test]
    fn vmin_vtime() {
        const S: u64 = 1_000_000_000;
        let mut t = raw_t();
        // VMIN 0, VTIME 0: at once, maybe nothing (also with O_NONBLOCK).
        t.cc[VMIN] = 0;
        t.cc[VTIME] = 0;
        let mut n = NTty::with_termios(&t);
        let mut p = ReadPlan::new(10, false);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Done(vec![]));
        let mut p = ReadPlan::new(10, true);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Done(vec![]));
        n.receive(&t, b"ab");
        let mut p = ReadPlan::new(10, false);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Done(b"ab".to_vec()));

        // VMIN 3, VTIME 0: until 3 bytes, no timeout.
        t.cc[VMIN] = 3;
        let mut p = ReadPlan::new(10, false);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Wait { until: None });
        n.receive(&t, b"a");
        assert_eq!(
            n.read_step(&t, &mut p, 2 * S),
            ReadStep::Wait { until: None }
        );
        assert_eq!(n.inq(&t), 0);
        n.receive(&t, b"bcd");
        assert_eq!(
            n.read_step(&t, &mut p, 3 * S),
            ReadStep::Done(b"abcd".to_vec())
        );
        // ... or `max` bytes if fewer.
        n.receive(&t, b"xy");
        let mut p = ReadPlan::new(1, false);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Done(b"x".to_vec()));
        n.flush_input();
        let mut p = ReadPlan::new(10, true);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Again);

        // VMIN 0, VTIME 5: half a second from the start for one byte.
        t.cc[VMIN] = 0;
        t.cc[VTIME] = 5;
        let mut p = ReadPlan::new(10, false);
        let until = Some(S + S / 2);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Wait { until });
        assert_eq!(n.read_step(&t, &mut p, S + S / 4), ReadStep::Wait { until });
        assert_eq!(n.read_step(&t, &mut p, S + S / 2), ReadStep::Done(vec![]));
        let mut p = ReadPlan::new(10, false);
        n.read_step(&t, &mut p, S);
        n.receive(&t, b"z");
        assert_eq!(
            n.read_step(&t, &mut p, S + S / 10),
            ReadStep::Done(b"z".to_vec())
        );

        // VMIN 3, VTIME 2: no limit for the first byte, then 0.2 s between.
        t.cc[VMIN] = 3;
        t.cc[VTIME] = 2;
        let mut p = ReadPlan::new(10, false);
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Wait { until: None });
        n.receive(&t, b"a");
        let t1 = 10 * S;
        assert_eq!(
            n.read_step(&t, &mut p, t1),
            ReadStep::Wait {
                until: Some(t1 + S / 5)
            }
        );
        n.receive(&t, b"b");
        let t2 = t1 + S / 10;
        assert_eq!(
            n.read_step(&t, &mut p, t2),
            ReadStep::Wait {
                until: Some(t2 + S / 5)
            }
        );
        assert_eq!(
            n.read_step(&t, &mut p, t2 + S / 5),
            ReadStep::Done(b"ab".to_vec())
        );
        // Reaching VMIN ends it before the timer.
        let mut p = ReadPlan::new(10, false);
        n.receive(&t, b"abc");
        assert_eq!(n.read_step(&t, &mut p, S), ReadStep::Done(b"abc".to_vec()));
    }

    #[test]
    fn canonical_read_step() {
        let t = std_t();
        let mut n = NTty::with_termios(&t);
        let mut p = ReadPlan::new(100, false);
        assert_eq!(n.read_step(&t, &mut p, 0), ReadStep::Wait { until: None });
        n.receive(&t, b"ab");
        assert_eq!(n.read_step(&t, &mut p, 1), ReadStep::Wait { until: None });
        n.receive(&t, b"\nnext\n");
        assert_eq!(n.read_step(&t, &mut p, 2), ReadStep::Done(b"ab\n".to_vec()));
        n.receive(&t, b"\x04");
        let mut p = ReadPlan::new(100, false);
        assert_eq!(
            n.read_step(&t, &mut p, 3),
            ReadStep::Done(b"next\n".to_vec())
        );
        let mut p = ReadPlan::new(100, false);
        assert_eq!(n.read_step(&t, &mut p, 3), ReadStep::Done(vec![]));
        let mut p = ReadPlan::new(100, true);
        assert_eq!(n.read_step(&t, &mut p, 3), ReadStep::Again);
    }

    #[test]
    fn poll_vmin() {
        let mut t = raw_t();
        t.cc[VMIN] = 4;
        t.cc[VTIME] = 0;
        let mut n = NTty::with_termios(&t);
        n.receive(&t, b"abc");
        assert!(n.available(&t, false));
        assert!(!n.available(&t, true));
        t.cc[VTIME] = 1;
        assert!(n.available(&t, true));
    }
}
