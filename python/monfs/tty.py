"""Serial ports of a mount (cdc_acm's ``/dev/ttyACMN``, ftdi_sio's
``/dev/ttyUSBN``) from the program's
side: :func:`find` lists them by the USB ids of their device, as serial
port enumerators read ``/sys/class/tty``, and :class:`Port` opens one raw
with the modem lines at hand (standard library only; pyserial works on the
same nodes too)::

    from monfs import tty
    with tty.Port(tty.find(0x1209, 0x0005)[0], baud=115200) as p:
        p.write(b"AT\\r")
        print(p.read_until(b"OK\\r\\n"))
        print(p.modem_lines())           # {'dtr': True, 'rts': True, 'cts': True, ...}
"""

import fcntl
import os
import select
import struct
import termios
import time
from typing import Dict, List, Optional

__all__ = ["find", "Port", "TIOCM"]

#: The modem line bits of TIOCMGET/TIOCMSET, by name.
TIOCM: Dict[str, int] = {
    "dtr": termios.TIOCM_DTR, "rts": termios.TIOCM_RTS, "cts": termios.TIOCM_CTS,
    "cd": termios.TIOCM_CAR, "ri": termios.TIOCM_RNG, "dsr": termios.TIOCM_DSR,
}

#: TIOCMIWAIT and TIOCGICOUNT (``asm-generic/ioctls.h``).
TIOCMIWAIT = 0x545C
TIOCGICOUNT = 0x545D


def _usb_ids(dev_dir: str) -> Optional[tuple]:
    """The idVendor and idProduct of the USB device above a tty's
    interface directory (or usb-serial port device)."""
    d = os.path.realpath(dev_dir)
    for _ in range(3):
        try:
            with open(os.path.join(d, "idVendor")) as v, open(os.path.join(d, "idProduct")) as p:
                return int(v.read(), 16), int(p.read(), 16)
        except OSError:
            d = os.path.dirname(d)
    return None


def find(vendor: int, product: int, sys: str = "/sys", dev: str = "/dev") -> List[str]:
    """The ``DEV/ttyACMN`` and ``DEV/ttyUSBN`` nodes whose USB device has
    these ids, by name,
    from ``SYS/class/tty`` (a mount's own: ``sys=m.path("sys")``,
    ``dev=m.path("dev")``)."""
    base = os.path.join(sys, "class", "tty")
    out = []
    for name in sorted(os.listdir(base) if os.path.isdir(base) else [], key=lambda n: (len(n), n)):
        if not name.startswith(("ttyACM", "ttyUSB")):
            continue
        if _usb_ids(os.path.join(base, name, "device")) == (vendor, product):
            out.append(os.path.join(dev, name))
    return out


class Port:
    """An open serial port, raw (``cfmakeraw``), at ``baud``."""

    def __init__(self, path: str, baud: int = 9600) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
        attrs = termios.tcgetattr(self.fd)
        attrs[0] = 0  # iflag
        attrs[1] = 0  # oflag
        attrs[2] = (attrs[2] & ~(termios.CSIZE | termios.PARENB)) | termios.CS8 | termios.CREAD | termios.CLOCAL
        attrs[3] = 0  # lflag
        attrs[6][termios.VMIN] = 1
        attrs[6][termios.VTIME] = 0
        self.attrs = attrs
        self.set_baud(baud)

    def set_baud(self, baud: int) -> None:
        """Set the rate (one of termios's ``B`` rates)."""
        speed = getattr(termios, "B%d" % baud, None)
        if speed is None:
            raise ValueError("no termios constant for %d baud" % baud)
        self.attrs[4] = self.attrs[5] = speed
        termios.tcsetattr(self.fd, termios.TCSANOW, self.attrs)

    def close(self) -> None:
        """Close the port (a second close does nothing)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Port":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write(self, data: bytes) -> int:
        """Write all of ``data``."""
        view, done = memoryview(data), 0
        while done < len(data):
            done += os.write(self.fd, view[done:])
        return done

    def read(self, size: int, timeout: float = 10.0) -> bytes:
        """Up to ``size`` bytes: what comes first, b"" after ``timeout``."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return b""
        return os.read(self.fd, size)

    def read_until(self, end: bytes, timeout: float = 10.0) -> bytes:
        """Read until ``end`` has come (or ``timeout`` passed): all of it."""
        got = b""
        deadline = time.monotonic() + timeout
        while end not in got:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            got += self.read(4096, left)
        return got

    def modem_lines(self) -> Dict[str, bool]:
        """TIOCMGET, by line name."""
        bits = struct.unpack("i", fcntl.ioctl(self.fd, termios.TIOCMGET, b"\0" * 4))[0]
        return {name: bool(bits & bit) for name, bit in TIOCM.items()}

    def set_lines(self, **lines: bool) -> None:
        """Raise or drop DTR and RTS (``dtr=True``, ``rts=False``)."""
        for name, on in lines.items():
            cmd = termios.TIOCMBIS if on else termios.TIOCMBIC
            fcntl.ioctl(self.fd, cmd, struct.pack("i", TIOCM[name]))

    def wait_lines(self, *names: str) -> None:
        """TIOCMIWAIT: block until one of these lines (``ri``, ``dsr``,
        ``cd``, ``cts``) changes."""
        mask = 0
        for n in names:
            mask |= TIOCM[n]
        fcntl.ioctl(self.fd, TIOCMIWAIT, mask)

    def counters(self) -> Dict[str, int]:
        """TIOCGICOUNT: how often each line changed and each error came."""
        raw = fcntl.ioctl(self.fd, TIOCGICOUNT, b"\0" * 80)
        names = ["cts", "dsr", "rng", "dcd", "rx", "tx", "frame", "overrun", "parity", "brk", "buf_overrun"]
        return dict(zip(names, struct.unpack_from("11i", raw)))
