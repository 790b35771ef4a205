//! Terminals: the kernel's termios handling (`termios`) and the n_tty line
//! discipline (`ldisc`), as plain state the tty device nodes drive.

pub mod ldisc;
pub mod termios;
