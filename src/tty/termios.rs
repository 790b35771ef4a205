//! The kernel's termios: `struct ktermios` and its two user-space layouts
//! (`struct termios` and `struct termios2`, asm-generic, as on x86_64), the
//! flag bits and `c_cc` indexes of `include/uapi/asm-generic/termbits*.h`,
//! the termios ioctl numbers of `ioctls.h`, the baud rate helpers of
//! `drivers/tty/tty_baudrate.c` and what `set_termios()` in
//! `drivers/tty/tty_ioctl.c` makes of a user's struct.
//!
//! Everything here is plain data: the device node owns a [`Termios`], hands
//! the user's bytes to [`Termios::apply_user`], gives the result to its
//! driver (which may call [`Termios::encode_baud_rate`] to report the speed
//! it really set) and then to the line discipline
//! ([`crate::tty::ldisc::NTty::set_termios`]).

/// Number of control characters in `c_cc` (asm-generic `NCCS`).
pub const NCCS: usize = 19;

// c_cc indexes.
/// `c_cc` index of the interrupt character (SIGINT).
pub const VINTR: usize = 0;
/// `c_cc` index of the quit character (SIGQUIT).
pub const VQUIT: usize = 1;
/// `c_cc` index of the erase character.
pub const VERASE: usize = 2;
/// `c_cc` index of the kill (erase line) character.
pub const VKILL: usize = 3;
/// `c_cc` index of the end-of-file character.
pub const VEOF: usize = 4;
/// `c_cc` index of the non-canonical read timeout, in deciseconds.
pub const VTIME: usize = 5;
/// `c_cc` index of the non-canonical read minimum byte count.
pub const VMIN: usize = 6;
/// `c_cc` index of the switch character (unused by Linux).
pub const VSWTC: usize = 7;
/// `c_cc` index of the start (XON) character.
pub const VSTART: usize = 8;
/// `c_cc` index of the stop (XOFF) character.
pub const VSTOP: usize = 9;
/// `c_cc` index of the suspend character (SIGTSTP).
pub const VSUSP: usize = 10;
/// `c_cc` index of the additional end-of-line character.
pub const VEOL: usize = 11;
/// `c_cc` index of the reprint character.
pub const VREPRINT: usize = 12;
/// `c_cc` index of the discard character (not acted on by Linux).
pub const VDISCARD: usize = 13;
/// `c_cc` index of the word erase character.
pub const VWERASE: usize = 14;
/// `c_cc` index of the literal-next character.
pub const VLNEXT: usize = 15;
/// `c_cc` index of the second additional end-of-line character.
pub const VEOL2: usize = 16;

/// A `c_cc` value that disables its function (`__DISABLED_CHAR`).
pub const DISABLED_CHAR: u8 = 0;

// c_iflag bits.
/// Ignore a break condition.
pub const IGNBRK: u32 = 0x001;
/// A break raises SIGINT.
pub const BRKINT: u32 = 0x002;
/// Ignore characters with parity errors.
pub const IGNPAR: u32 = 0x004;
/// Mark parity and framing errors.
pub const PARMRK: u32 = 0x008;
/// Enable input parity checking.
pub const INPCK: u32 = 0x010;
/// Strip the eighth bit of input characters.
pub const ISTRIP: u32 = 0x020;
/// Map NL to CR on input.
pub const INLCR: u32 = 0x040;
/// Ignore CR on input.
pub const IGNCR: u32 = 0x080;
/// Map CR to NL on input.
pub const ICRNL: u32 = 0x100;
/// Map upper case to lower case on input (with IEXTEN).
pub const IUCLC: u32 = 0x0200;
/// Enable XON/XOFF flow control on output.
pub const IXON: u32 = 0x0400;
/// Any character restarts stopped output.
pub const IXANY: u32 = 0x800;
/// Enable XON/XOFF flow control on input.
pub const IXOFF: u32 = 0x1000;
/// Ring the bell when the input queue is full (not acted on by Linux).
pub const IMAXBEL: u32 = 0x2000;
/// Input is UTF-8 (erase works on whole characters).
pub const IUTF8: u32 = 0x4000;

// c_oflag bits.
/// Enable output processing.
pub const OPOST: u32 = 0x01;
/// Map lower case to upper case on output.
pub const OLCUC: u32 = 0x02;
/// Map NL to CR-NL on output.
pub const ONLCR: u32 = 0x04;
/// Map CR to NL on output.
pub const OCRNL: u32 = 0x08;
/// Do not output CR at column 0.
pub const ONOCR: u32 = 0x10;
/// NL performs the CR function.
pub const ONLRET: u32 = 0x20;
/// Use fill characters for delays (ignored by Linux).
pub const OFILL: u32 = 0x40;
/// Fill character is DEL (ignored by Linux).
pub const OFDEL: u32 = 0x80;
/// Newline delay mask (ignored by Linux).
pub const NLDLY: u32 = 0x00100;
/// Carriage return delay mask (ignored by Linux).
pub const CRDLY: u32 = 0x00600;
/// Horizontal tab delay mask; [`XTABS`] expands tabs to spaces.
pub const TABDLY: u32 = 0x01800;
/// Tab delay 0.
pub const TAB0: u32 = 0x00000;
/// Tab delay 1.
pub const TAB1: u32 = 0x00800;
/// Tab delay 2.
pub const TAB2: u32 = 0x01000;
/// Tab delay 3, the same value as [`XTABS`].
pub const TAB3: u32 = 0x01800;
/// Expand tabs to spaces on output.
pub const XTABS: u32 = 0x01800;
/// Backspace delay mask (ignored by Linux).
pub const BSDLY: u32 = 0x02000;
/// Vertical tab delay mask (ignored by Linux).
pub const VTDLY: u32 = 0x04000;
/// Form feed delay mask (ignored by Linux).
pub const FFDLY: u32 = 0x08000;

// c_cflag bits.
/// The output speed field.
pub const CBAUD: u32 = 0x0000_100f;
/// Character size mask.
pub const CSIZE: u32 = 0x0000_0030;
/// Five bit characters.
pub const CS5: u32 = 0x0000_0000;
/// Six bit characters.
pub const CS6: u32 = 0x0000_0010;
/// Seven bit characters.
pub const CS7: u32 = 0x0000_0020;
/// Eight bit characters.
pub const CS8: u32 = 0x0000_0030;
/// Two stop bits.
pub const CSTOPB: u32 = 0x0000_0040;
/// Enable the receiver.
pub const CREAD: u32 = 0x0000_0080;
/// Enable parity.
pub const PARENB: u32 = 0x0000_0100;
/// Odd parity.
pub const PARODD: u32 = 0x0000_0200;
/// Hang up (drop the modem lines) on last close.
pub const HUPCL: u32 = 0x0000_0400;
/// Ignore the modem control lines.
pub const CLOCAL: u32 = 0x0000_0800;
/// The extended speed bit of [`CBAUD`].
pub const CBAUDEX: u32 = 0x0000_1000;
/// The speed is in `c_ospeed` (or `c_ispeed` in [`CIBAUD`]).
pub const BOTHER: u32 = 0x0000_1000;
/// The input speed field ([`CBAUD`] shifted by [`IBSHIFT`]).
pub const CIBAUD: u32 = 0x100f_0000;
/// Shift from [`CBAUD`] to [`CIBAUD`].
pub const IBSHIFT: u32 = 16;
/// Address bit (RS-485; only `rs485_config` changes it).
pub const ADDRB: u32 = 0x2000_0000;
/// Mark or space (stick) parity.
pub const CMSPAR: u32 = 0x4000_0000;
/// RTS/CTS hardware flow control.
pub const CRTSCTS: u32 = 0x8000_0000;

/// Hang up.
pub const B0: u32 = 0x0;
/// 50 baud.
pub const B50: u32 = 0x1;
/// 75 baud.
pub const B75: u32 = 0x2;
/// 110 baud.
pub const B110: u32 = 0x3;
/// 134 baud.
pub const B134: u32 = 0x4;
/// 150 baud.
pub const B150: u32 = 0x5;
/// 200 baud.
pub const B200: u32 = 0x6;
/// 300 baud.
pub const B300: u32 = 0x7;
/// 600 baud.
pub const B600: u32 = 0x8;
/// 1200 baud.
pub const B1200: u32 = 0x9;
/// 1800 baud.
pub const B1800: u32 = 0xa;
/// 2400 baud.
pub const B2400: u32 = 0xb;
/// 4800 baud.
pub const B4800: u32 = 0xc;
/// 9600 baud.
pub const B9600: u32 = 0xd;
/// 19200 baud.
pub const B19200: u32 = 0xe;
/// 38400 baud.
pub const B38400: u32 = 0xf;
/// 57600 baud.
pub const B57600: u32 = 0x1001;
/// 115200 baud.
pub const B115200: u32 = 0x1002;
/// 230400 baud.
pub const B230400: u32 = 0x1003;
/// 460800 baud.
pub const B460800: u32 = 0x1004;
/// 500000 baud.
pub const B500000: u32 = 0x1005;
/// 576000 baud.
pub const B576000: u32 = 0x1006;
/// 921600 baud.
pub const B921600: u32 = 0x1007;
/// 1000000 baud.
pub const B1000000: u32 = 0x1008;
/// 1152000 baud.
pub const B1152000: u32 = 0x1009;
/// 1500000 baud.
pub const B1500000: u32 = 0x100a;
/// 2000000 baud.
pub const B2000000: u32 = 0x100b;
/// 2500000 baud.
pub const B2500000: u32 = 0x100c;
/// 3000000 baud.
pub const B3000000: u32 = 0x100d;
/// 3500000 baud.
pub const B3500000: u32 = 0x100e;
/// 4000000 baud.
pub const B4000000: u32 = 0x100f;

// c_lflag bits.
/// Generate signals for the INTR, QUIT and SUSP characters.
pub const ISIG: u32 = 0x00001;
/// Canonical (line by line) input.
pub const ICANON: u32 = 0x00002;
/// Upper case terminal (not acted on by Linux).
pub const XCASE: u32 = 0x00004;
/// Echo input.
pub const ECHO: u32 = 0x00008;
/// ERASE erases the previous character on the screen.
pub const ECHOE: u32 = 0x00010;
/// KILL echoes a newline (or erases the line with [`ECHOKE`]).
pub const ECHOK: u32 = 0x00020;
/// Echo NL even without [`ECHO`].
pub const ECHONL: u32 = 0x00040;
/// Do not flush the queues on INTR, QUIT or SUSP.
pub const NOFLSH: u32 = 0x00080;
/// Stop background writers (job control; no process groups here).
pub const TOSTOP: u32 = 0x00100;
/// Echo control characters as `^X`.
pub const ECHOCTL: u32 = 0x00200;
/// Echo erased characters between `\` and `/`.
pub const ECHOPRT: u32 = 0x00400;
/// KILL erases the line on the screen.
pub const ECHOKE: u32 = 0x00800;
/// Output is being flushed (not acted on by Linux).
pub const FLUSHO: u32 = 0x01000;
/// Retype pending input (not acted on by Linux).
pub const PENDIN: u32 = 0x04000;
/// Extended input processing (WERASE, LNEXT, EOL2, REPRINT, IUCLC).
pub const IEXTEN: u32 = 0x08000;
/// External processing (the other end of a pty does the editing).
pub const EXTPROC: u32 = 0x10000;

// tcsetattr actions, tcflow and tcflush arguments.
/// `tcsetattr`: change at once ([`TCSETS`]).
pub const TCSANOW: u32 = 0;
/// `tcsetattr`: change after output drains ([`TCSETSW`]).
pub const TCSADRAIN: u32 = 1;
/// `tcsetattr`: change after output drains, flushing input ([`TCSETSF`]).
pub const TCSAFLUSH: u32 = 2;
/// `TCXONC`: suspend output.
pub const TCOOFF: u32 = 0;
/// `TCXONC`: restart suspended output.
pub const TCOON: u32 = 1;
/// `TCXONC`: send a STOP character.
pub const TCIOFF: u32 = 2;
/// `TCXONC`: send a START character.
pub const TCION: u32 = 3;
/// `TCFLSH`: discard received data not yet read.
pub const TCIFLUSH: u32 = 0;
/// `TCFLSH`: discard written data not yet sent.
pub const TCOFLUSH: u32 = 1;
/// `TCFLSH`: discard both.
pub const TCIOFLUSH: u32 = 2;

/// Size of the user's `struct termios` (4 flags, `c_line`, 19 `c_cc`).
pub const TERMIOS_SIZE: usize = 36;
/// Size of the user's `struct termios2` (`struct termios` and two speeds).
pub const TERMIOS2_SIZE: usize = 44;
/// Offset of `c_line` in both layouts.
pub const OFFSET_LINE: usize = 16;
/// Offset of `c_cc` in both layouts.
pub const OFFSET_CC: usize = 17;
/// Offset of `c_ispeed` in `struct termios2` (after 3 bytes of padding).
pub const OFFSET_ISPEED: usize = 36;
/// Offset of `c_ospeed` in `struct termios2`.
pub const OFFSET_OSPEED: usize = 40;

/// `_IOC(dir, type, nr, size)` of `include/uapi/asm-generic/ioctl.h`.
const fn ioc(dir: u32, ty: u8, nr: u8, size: usize) -> u32 {
    (dir << 30) | ((size as u32) << 16) | ((ty as u32) << 8) | nr as u32
}
const IOC_WRITE: u32 = 1;
const IOC_READ: u32 = 2;

/// Get the termios as a `struct termios`.
pub const TCGETS: u32 = 0x5401;
/// Set the termios from a `struct termios` at once.
pub const TCSETS: u32 = 0x5402;
/// Set the termios from a `struct termios` after output drains.
pub const TCSETSW: u32 = 0x5403;
/// Set the termios from a `struct termios` after output drains, flushing input.
pub const TCSETSF: u32 = 0x5404;
/// Send a break (`tcsendbreak`).
pub const TCSBRK: u32 = 0x5409;
/// Flow control (`tcflow`).
pub const TCXONC: u32 = 0x540A;
/// Flush (`tcflush`).
pub const TCFLSH: u32 = 0x540B;
/// Bytes written but not yet sent.
pub const TIOCOUTQ: u32 = 0x5411;
/// Bytes received and readable ([`FIONREAD`]).
pub const TIOCINQ: u32 = 0x541B;
/// The same number as [`TIOCINQ`].
pub const FIONREAD: u32 = 0x541B;
/// Get the termios as a `struct termios2`: `_IOR('T', 0x2A, struct termios2)`.
pub const TCGETS2: u32 = ioc(IOC_READ, b'T', 0x2A, TERMIOS2_SIZE);
/// Set from a `struct termios2` at once: `_IOW('T', 0x2B, struct termios2)`.
pub const TCSETS2: u32 = ioc(IOC_WRITE, b'T', 0x2B, TERMIOS2_SIZE);
/// Set from a `struct termios2` after output drains: `_IOW('T', 0x2C, ...)`.
pub const TCSETSW2: u32 = ioc(IOC_WRITE, b'T', 0x2C, TERMIOS2_SIZE);
/// Set from a `struct termios2` after drain, flushing input: `_IOW('T', 0x2D, ...)`.
pub const TCSETSF2: u32 = ioc(IOC_WRITE, b'T', 0x2D, TERMIOS2_SIZE);

/// The speeds of the [`CBAUD`] codes, index = code with [`CBAUDEX`] folded
/// to 16.. (`baud_table` of tty_baudrate.c, non-sparc).
const BAUD_TABLE: [u32; 31] = [
    0, 50, 75, 110, 134, 150, 200, 300, 600, 1200, 1800, 2400, 4800, 9600, 19200, 38400, 57600,
    115200, 230400, 460800, 500000, 576000, 921600, 1000000, 1152000, 1500000, 2000000, 2500000,
    3000000, 3500000, 4000000,
];

/// The [`CBAUD`] code of each [`BAUD_TABLE`] entry (`baud_bits`).
const BAUD_BITS: [u32; 31] = [
    B0, B50, B75, B110, B134, B150, B200, B300, B600, B1200, B1800, B2400, B4800, B9600, B19200,
    B38400, B57600, B115200, B230400, B460800, B500000, B576000, B921600, B1000000, B1152000,
    B1500000, B2000000, B2500000, B3000000, B3500000, B4000000,
];

/// The speed of a [`CBAUD`] code other than [`BOTHER`], 0 if unknown: the
/// table lookup shared by tty_termios_baud_rate and
/// tty_termios_input_baud_rate.
fn code_speed(mut code: u32) -> u32 {
    if code & CBAUDEX != 0 {
        code = (code & !CBAUDEX) + 15;
    }
    BAUD_TABLE.get(code as usize).copied().unwrap_or(0)
}

/// Which user-space structure a set or get ioctl carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetKind {
    /// `struct termios` ([`TCSETS`], [`TCSETSW`], [`TCSETSF`]).
    Termios,
    /// `struct termios2` ([`TCSETS2`], [`TCSETSW2`], [`TCSETSF2`]).
    Termios2,
}

impl SetKind {
    /// The size of the structure in user memory.
    pub fn size(self) -> usize {
        match self {
            SetKind::Termios => TERMIOS_SIZE,
            SetKind::Termios2 => TERMIOS2_SIZE,
        }
    }
}

/// Why a user's termios structure could not be taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TermiosError {
    /// The buffer is shorter than the structure (the kernel's
    /// `copy_from_user` failing: `EFAULT`).
    #[error("termios structure needs {need} bytes, got {got}")]
    Short {
        /// Bytes the structure needs.
        need: usize,
        /// Bytes given.
        got: usize,
    },
}

impl TermiosError {
    /// The errno the ioctl fails with (`EFAULT`).
    pub fn errno(self) -> i32 {
        libc::EFAULT
    }
}

/// The kernel's `struct ktermios`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Termios {
    /// Input modes (`c_iflag`).
    pub iflag: u32,
    /// Output modes (`c_oflag`).
    pub oflag: u32,
    /// Control modes (`c_cflag`).
    pub cflag: u32,
    /// Local modes (`c_lflag`).
    pub lflag: u32,
    /// Line discipline (`c_line`, 0 = N_TTY).
    pub line: u8,
    /// Control characters (`c_cc`).
    pub cc: [u8; NCCS],
    /// Input speed (`c_ispeed`).
    pub ispeed: u32,
    /// Output speed (`c_ospeed`).
    pub ospeed: u32,
}

/// `INIT_C_CC`: ^C, ^\, DEL, ^U, ^D, VTIME 0, VMIN 1, ^Q, ^S, ^Z, ^R, ^O,
/// ^W, ^V, everything else disabled.
const INIT_C_CC: [u8; NCCS] = {
    let mut cc = [0u8; NCCS];
    cc[VINTR] = b'C' - 0x40;
    cc[VQUIT] = b'\\' - 0x40;
    cc[VERASE] = 0x7f;
    cc[VKILL] = b'U' - 0x40;
    cc[VEOF] = b'D' - 0x40;
    cc[VMIN] = 1;
    cc[VSTART] = b'Q' - 0x40;
    cc[VSTOP] = b'S' - 0x40;
    cc[VSUSP] = b'Z' - 0x40;
    cc[VREPRINT] = b'R' - 0x40;
    cc[VDISCARD] = b'O' - 0x40;
    cc[VWERASE] = b'W' - 0x40;
    cc[VLNEXT] = b'V' - 0x40;
    cc
};

/// The `c_cflag` cdc_acm and usb-serial give their `init_termios`.
pub const USB_INIT_CFLAG: u32 = B9600 | CS8 | CREAD | HUPCL | CLOCAL;

impl Termios {
    /// `tty_std_termios` (tty_io.c) with the driver's `init_termios.c_cflag`
    /// in place of its own and the speeds taken from that `c_cflag`, as a
    /// driver that sets `init_termios` does (cdc_acm and usb-serial use
    /// [`USB_INIT_CFLAG`], 9600 baud).
    pub fn std(cflag: u32) -> Termios {
        let mut t = Termios {
            iflag: ICRNL | IXON,
            oflag: OPOST | ONLCR,
            cflag,
            lflag: ISIG | ICANON | ECHO | ECHOE | ECHOK | ECHOCTL | ECHOKE | IEXTEN,
            line: 0,
            cc: INIT_C_CC,
            ispeed: 0,
            ospeed: 0,
        };
        t.ispeed = t.input_baud_rate();
        t.ospeed = t.baud_rate();
        t
    }

    /// The user's `struct termios`: the four flags little-endian, `c_line`,
    /// `c_cc` (`kernel_termios_to_user_termios_1`).
    pub fn to_termios(&self) -> [u8; TERMIOS_SIZE] {
        let mut b = [0u8; TERMIOS_SIZE];
        b[0..4].copy_from_slice(&self.iflag.to_le_bytes());
        b[4..8].copy_from_slice(&self.oflag.to_le_bytes());
        b[8..12].copy_from_slice(&self.cflag.to_le_bytes());
        b[12..16].copy_from_slice(&self.lflag.to_le_bytes());
        b[OFFSET_LINE] = self.line;
        b[OFFSET_CC..OFFSET_CC + NCCS].copy_from_slice(&self.cc);
        b
    }

    /// The user's `struct termios2`: [`Termios::to_termios`] and the two
    /// speeds (`kernel_termios_to_user_termios`).
    pub fn to_termios2(&self) -> [u8; TERMIOS2_SIZE] {
        let mut b = [0u8; TERMIOS2_SIZE];
        b[..TERMIOS_SIZE].copy_from_slice(&self.to_termios());
        b[OFFSET_ISPEED..OFFSET_ISPEED + 4].copy_from_slice(&self.ispeed.to_le_bytes());
        b[OFFSET_OSPEED..OFFSET_OSPEED + 4].copy_from_slice(&self.ospeed.to_le_bytes());
        b
    }

    /// The bytes a get ioctl of `kind` returns ([`TCGETS`] or [`TCGETS2`]).
    pub fn to_user(&self, kind: SetKind) -> Vec<u8> {
        match kind {
            SetKind::Termios => self.to_termios().to_vec(),
            SetKind::Termios2 => self.to_termios2().to_vec(),
        }
    }

    /// This termios with the fields of a user's `struct termios` (`buf`,
    /// at least 36 bytes) copied over it; the speeds stay this termios'
    /// (`user_termios_to_kernel_termios_1` copying into a copy of the
    /// tty's termios).
    pub fn read_termios(&self, buf: &[u8]) -> Option<Termios> {
        let b = buf.get(..TERMIOS_SIZE)?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut cc = [0u8; NCCS];
        cc.copy_from_slice(&b[OFFSET_CC..OFFSET_CC + NCCS]);
        Some(Termios {
            iflag: word(0),
            oflag: word(4),
            cflag: word(8),
            lflag: word(12),
            line: b[OFFSET_LINE],
            cc,
            ispeed: self.ispeed,
            ospeed: self.ospeed,
        })
    }

    /// A user's `struct termios2` (`buf`, at least 44 bytes) as a kernel
    /// termios, speeds included (`user_termios_to_kernel_termios`).
    pub fn read_termios2(buf: &[u8]) -> Option<Termios> {
        let b = buf.get(..TERMIOS2_SIZE)?;
        let word = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut t = Termios::std(0).read_termios(b)?;
        t.ispeed = word(OFFSET_ISPEED);
        t.ospeed = word(OFFSET_OSPEED);
        Some(t)
    }

    /// The termios `set_termios()` (tty_ioctl.c) hands to `tty_set_termios`
    /// for a set ioctl of `kind` whose argument is `buf`, `self` being the
    /// tty's current termios: the user's struct copied over a copy of the
    /// current one, then `c_ispeed` and `c_ospeed` recomputed with
    /// [`Termios::input_baud_rate`] and [`Termios::baud_rate`] (so a
    /// `struct termios` with [`BOTHER`] keeps the current speed, a
    /// `struct termios2` with [`BOTHER`] takes its own `c_ospeed`).
    ///
    /// What happens next is the caller's: wait for output to drain
    /// (TCSETSW*, TCSETSF*), flush the line discipline's input (TCSETSF*),
    /// let the driver adjust the result (its `set_termios`, e.g.
    /// [`Termios::encode_baud_rate`]; a driver without one keeps the old
    /// hardware settings, `tty_termios_copy_hw`), keep the old
    /// [`ADDRB`] bit, then tell the line discipline.
    pub fn apply_user(&self, kind: SetKind, buf: &[u8]) -> Result<Termios, TermiosError> {
        let short = TermiosError::Short {
            need: kind.size(),
            got: buf.len(),
        };
        let mut t = match kind {
            SetKind::Termios => self.read_termios(buf).ok_or(short)?,
            SetKind::Termios2 => Termios::read_termios2(buf).ok_or(short)?,
        };
        t.ispeed = t.input_baud_rate();
        t.ospeed = t.baud_rate();
        Ok(t)
    }

    /// The output speed: `c_ospeed` for [`BOTHER`], else the speed of the
    /// [`CBAUD`] code (0 for an unknown one), as tty_termios_baud_rate does.
    pub fn baud_rate(&self) -> u32 {
        let code = self.cflag & CBAUD;
        if code == BOTHER {
            return self.ospeed;
        }
        code_speed(code)
    }

    /// The input speed: the output speed when [`CIBAUD`] is B0, `c_ispeed`
    /// for [`BOTHER`], else the speed of the code, as
    /// tty_termios_input_baud_rate does.
    pub fn input_baud_rate(&self) -> u32 {
        let code = (self.cflag >> IBSHIFT) & CBAUD;
        if code == B0 {
            return self.baud_rate();
        }
        if code == BOTHER {
            return self.ispeed;
        }
        code_speed(code)
    }

    /// Record the speeds a driver really set, as
    /// tty_termios_encode_baud_rate does: the speeds go to `c_ispeed` and
    /// `c_ospeed`; [`CBAUD`] gets the code of a standard speed within 2%
    /// (`speed / 50`) of `obaud` (exactly `obaud` if the user asked for
    /// [`BOTHER`]), else [`BOTHER`]; [`CIBAUD`] gets an input code only if
    /// the user gave one or the input speed differs from the output speed.
    pub fn encode_baud_rate(&mut self, mut ibaud: u32, obaud: u32) {
        if obaud == 0 {
            ibaud = 0;
        }
        self.ispeed = ibaud;
        self.ospeed = obaud;
        let mut iclose = ibaud / 50;
        let mut oclose = obaud / 50;
        let ibinput = (self.cflag >> IBSHIFT) & CBAUD != B0;
        if self.cflag & CBAUD == BOTHER {
            oclose = 0;
            if !ibinput {
                iclose = 0;
            }
        }
        if (self.cflag >> IBSHIFT) & CBAUD == BOTHER {
            iclose = 0;
        }
        self.cflag &= !CBAUD;
        self.cflag &= !(CBAUD << IBSHIFT);

        // The kernel compares in unsigned arithmetic: `obaud - oclose` may
        // wrap only when both are 0, which it does not.
        let near = |want: u32, close: u32, speed: u32| {
            want.wrapping_sub(close) <= speed && want.wrapping_add(close) >= speed
        };
        let mut ofound = None;
        let mut ifound = None;
        for (i, (&speed, &bits)) in BAUD_TABLE.iter().zip(BAUD_BITS.iter()).enumerate() {
            if near(obaud, oclose, speed) {
                self.cflag |= bits;
                ofound = Some(i);
            }
            if near(ibaud, iclose, speed) {
                // Input equal to output: no input bits unless the user
                // gave some.
                if ofound != Some(i) || ibinput {
                    self.cflag |= bits << IBSHIFT;
                }
                ifound = Some(i);
            }
        }
        if ofound.is_none() {
            self.cflag |= BOTHER;
        }
        if ifound.is_none() && (ibaud != obaud || ibinput) {
            self.cflag |= BOTHER << IBSHIFT;
        }
    }

    /// Bits in a character (tty_get_char_size).
    pub fn char_size(&self) -> u32 {
        match self.cflag & CSIZE {
            CS5 => 5,
            CS6 => 6,
            CS7 => 7,
            _ => 8,
        }
    }

    /// Whether any bit of `mask` is set in `c_iflag` (the kernel's `I_*`
    /// macros).
    pub fn i(&self, mask: u32) -> bool {
        self.iflag & mask != 0
    }

    /// Whether any bit of `mask` is set in `c_oflag` (`O_*`).
    pub fn o(&self, mask: u32) -> bool {
        self.oflag & mask != 0
    }

    /// Whether any bit of `mask` is set in `c_lflag` (`L_*`).
    pub fn l(&self, mask: u32) -> bool {
        self.lflag & mask != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ioctl_numbers() {
        assert_eq!(TCGETS, 0x5401);
        assert_eq!(TCSETS, 0x5402);
        assert_eq!(TCSETSW, 0x5403);
        assert_eq!(TCSETSF, 0x5404);
        assert_eq!(TCGETS2, 0x802C_542A);
        assert_eq!(TCSETS2, 0x402C_542B);
        assert_eq!(TCSETSW2, 0x402C_542C);
        assert_eq!(TCSETSF2, 0x402C_542D);
        assert_eq!(TIOCINQ, 0x541B);
    }

    #[test]
    fn std_termios() {
        let t = Termios::std(USB_INIT_CFLAG);
        assert_eq!(t.iflag, ICRNL | IXON);
        assert_eq!(t.oflag, 0o5); // OPOST | ONLCR
        assert_eq!(t.cflag, 0x0cbd);
        assert_eq!(t.lflag, 0x8a3b);
        assert_eq!((t.ispeed, t.ospeed), (9600, 9600));
        assert_eq!(
            t.cc,
            [
                3, 0x1c, 0x7f, 0x15, 4, 0, 1, 0, 0x11, 0x13, 0x1a, 0, 0x12, 0x0f, 0x17, 0x16, 0, 0,
                0
            ]
        );
    }

    #[test]
    fn layout() {
        let mut t = Termios::std(USB_INIT_CFLAG);
        t.line = 0xAB;
        t.ispeed = 0x0102_0304;
        t.ospeed = 0x0506_0708;
        let b = t.to_termios2();
        assert_eq!(&b[0..4], &(ICRNL | IXON).to_le_bytes());
        assert_eq!(&b[8..12], &[0xbd, 0x0c, 0, 0]);
        assert_eq!(b[16], 0xAB);
        assert_eq!(b[17], 3); // c_cc[VINTR]
        assert_eq!(b[17 + VMIN], 1);
        assert_eq!(b[35], 0); // c_cc[18]
        assert_eq!(&b[36..40], &[4, 3, 2, 1]);
        assert_eq!(&b[40..44], &[8, 7, 6, 5]);
        assert_eq!(&t.to_termios()[..], &b[..36]);
        assert_eq!(Termios::read_termios2(&b), Some(t));
        assert_eq!(Termios::read_termios2(&b[..43]), None);
        let old = Termios::std(USB_INIT_CFLAG);
        let back = old.read_termios(&t.to_termios()).unwrap();
        assert_eq!((back.line, back.ispeed), (0xAB, 9600));
    }

    #[test]
    fn baud_decode() {
        let mut t = Termios::std(B9600);
        assert_eq!(t.baud_rate(), 9600);
        t.cflag = B115200 | CS8;
        assert_eq!(t.baud_rate(), 115200);
        assert_eq!(t.input_baud_rate(), 115200);
        t.cflag = B3000000;
        assert_eq!(t.baud_rate(), 3_000_000);
        t.cflag = B0;
        assert_eq!(t.baud_rate(), 0);
        t.cflag = BOTHER | (B2400 << IBSHIFT);
        t.ospeed = 250_000;
        assert_eq!(t.baud_rate(), 250_000);
        assert_eq!(t.input_baud_rate(), 2400);
        t.cflag = B50 | (BOTHER << IBSHIFT);
        t.ispeed = 31_250;
        assert_eq!(t.input_baud_rate(), 31_250);
    }

    #[test]
    fn baud_encode() {
        let mut t = Termios::std(B9600 | CS8);
        t.encode_baud_rate(9600, 9600);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B9600);
        // 115000 is within 2% of 115200: reported as B115200.
        t.encode_baud_rate(115_000, 115_000);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B115200);
        assert_eq!(t.ospeed, 115_000);
        t.encode_baud_rate(3_000_000, 3_000_000);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B3000000);
        assert_eq!(t.cflag & CSIZE, CS8);
        // No standard rate near 250000: BOTHER.
        t.encode_baud_rate(250_000, 250_000);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), BOTHER);
        assert_eq!(t.baud_rate(), 250_000);
        // The user asked for BOTHER: exact answers only.
        t.cflag = (t.cflag & !CBAUD) | BOTHER;
        t.encode_baud_rate(115_000, 115_000);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), BOTHER);
        t.cflag = (t.cflag & !CBAUD) | BOTHER;
        t.encode_baud_rate(115_200, 115_200);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B115200);
        // Different input speed: input bits set.
        t.encode_baud_rate(1200, 9600);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B9600 | (B1200 << IBSHIFT));
        t.cflag &= !CIBAUD;
        t.encode_baud_rate(1000, 9600);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B9600 | (BOTHER << IBSHIFT));
        // Hang up.
        t.cflag &= !CIBAUD;
        t.encode_baud_rate(9600, 0);
        assert_eq!(t.cflag & (CBAUD | CIBAUD), B0);
        assert_eq!((t.ispeed, t.ospeed), (0, 0));
    }

    #[test]
    fn apply_user_speeds() {
        let cur = Termios::std(USB_INIT_CFLAG);
        let mut want = cur;
        want.cflag = (want.cflag & !CBAUD) | B115200;
        let t = cur
            .apply_user(SetKind::Termios, &want.to_termios())
            .unwrap();
        assert_eq!((t.ispeed, t.ospeed), (115_200, 115_200));
        // struct termios with BOTHER: keeps the current speed.
        want.cflag = (want.cflag & !CBAUD) | BOTHER;
        want.ospeed = 250_000;
        let t = cur
            .apply_user(SetKind::Termios, &want.to_termios())
            .unwrap();
        assert_eq!(t.ospeed, 9600);
        // struct termios2 with BOTHER: its own speed.
        let t = cur
            .apply_user(SetKind::Termios2, &want.to_termios2())
            .unwrap();
        assert_eq!((t.ispeed, t.ospeed), (250_000, 250_000));
        // struct termios2 with a Bfoo code: c_ospeed ignored.
        want.cflag = (want.cflag & !CBAUD) | B57600;
        let t = cur
            .apply_user(SetKind::Termios2, &want.to_termios2())
            .unwrap();
        assert_eq!(t.ospeed, 57_600);
        assert_eq!(
            cur.apply_user(SetKind::Termios2, &[0; 36]),
            Err(TermiosError::Short { need: 44, got: 36 })
        );
    }
}
