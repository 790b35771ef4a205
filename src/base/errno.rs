//! Typed errno results, used all the way down (as in Fuchsia Starnix).

use std::fmt;

/// A positive Linux errno value.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

/// Result with an [`Errno`] error.
pub type SysResult<T> = Result<T, Errno>;

macro_rules! errnos {
    ($($name:ident),* $(,)?) => {
        impl Errno {
            $(
                #[doc = concat!("`", stringify!($name), "`")]
                pub const $name: Errno = Errno(libc::$name);
            )*
        }
    };
}

errnos!(
    EPERM,
    ENOENT,
    ESRCH,
    EINTR,
    EIO,
    EBADF,
    EAGAIN,
    ENOMEM,
    EACCES,
    EFAULT,
    EBUSY,
    EEXIST,
    ENODEV,
    ENOTDIR,
    EISDIR,
    EINVAL,
    ENOSPC,
    ESPIPE,
    ENOTTY,
    E2BIG,
    ENOSYS,
    EOVERFLOW,
    EMFILE,
    EADDRINUSE,
    ENOTSUP,
    ERANGE,
    ENAMETOOLONG,
    EPROTO,
);

impl Errno {
    /// EAGAIN as the caller's final answer, even on a blocking file: a
    /// "would block" the frontend must not wait out (usbfs's
    /// REAPURBNDELAY). The frontend sends it as EAGAIN.
    pub const EAGAIN_FINAL: Errno = Errno(0x4000_0000 | libc::EAGAIN);

    /// "Would block" for a call that waits whatever the caller's
    /// O_NONBLOCK says (a tty's TIOCMIWAIT and tcdrain): the frontend parks
    /// it as it parks EAGAIN on a blocking file, and never answers it.
    pub const WAIT_ALWAYS: Errno = Errno(0x4000_0000 | libc::EINPROGRESS);

    /// The errno number the caller sees.
    pub fn code(self) -> i32 {
        if self == Errno::EAGAIN_FINAL || self == Errno::WAIT_ALWAYS {
            libc::EAGAIN
        } else {
            self.0
        }
    }
}

impl fmt::Debug for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({})",
            self.0,
            std::io::Error::from_raw_os_error(self.0)
        )
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", std::io::Error::from_raw_os_error(self.0))
    }
}

impl std::error::Error for Errno {}
