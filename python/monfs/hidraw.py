"""hidraw nodes (``/dev/hidrawN``) through their system calls, as a HID
program reaches them: reports in and out as bytes or :class:`Report`
objects, the report descriptor, the device's ids and strings, feature
and input reports by ID. Works on the kernel's nodes and on monfs's
(inside ``monfs run``, or a mount's ``dev/hidrawN``).

    with Hidraw(find(0x0627, 0x0001)[0]) as h:
        print(h.info(), h.name())
        r = h.read_report(timeout=5)
"""

import fcntl
import os
import select
import struct
from typing import List, NamedTuple, Optional

__all__ = ["Hidraw", "Report", "HidrawInfo", "find"]

_IOC_READ, _IOC_WRITE = 2, 1


def _ioc(direction: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (ord("H") << 8) | nr


HIDIOCGRDESCSIZE = _ioc(_IOC_READ, 0x01, 4)
HIDIOCGRDESC = _ioc(_IOC_READ, 0x02, 4 + 4096)
HIDIOCGRAWINFO = _ioc(_IOC_READ, 0x03, 8)


class Report(NamedTuple):
    """One report: its ID (0 when the device numbers none) and its data
    (without the ID)."""

    report_id: int
    data: bytes


class HidrawInfo(NamedTuple):
    """HIDIOCGRAWINFO: the bus type (3: USB) and the ids."""

    bustype: int
    vendor: int
    product: int


def find(vendor: int, product: int, sys: str = "/sys") -> List[str]:
    """The ``/dev/hidrawN`` nodes whose HID device has these ids, by minor,
    from ``SYS/class/hidraw`` (as hidapi enumerates them)."""
    base = os.path.join(sys, "class", "hidraw")
    want = "HID_ID=%04X:%08X:%08X" % (3, vendor, product)
    out = []
    for name in sorted(os.listdir(base) if os.path.isdir(base) else [], key=lambda n: int(n[6:] or 0)):
        try:
            with open(os.path.join(base, name, "device", "uevent")) as f:
                if want in f.read().split("\n"):
                    out.append("/dev/" + name)
        except OSError:
            continue
    return out


class Hidraw:
    """An open hidraw node. ``numbered``: the device's reports start with
    their ID (its report descriptor has Report ID items)."""

    def __init__(self, path: str, numbered: bool = False) -> None:
        self.path = path
        self.numbered = numbered
        self.fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)

    def close(self) -> None:
        """Close the node (a second close does nothing)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> "Hidraw":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def read(self, size: int = 4096, timeout: Optional[float] = None) -> bytes:
        """The next input report as hidraw gives it (its ID first when
        numbered); TimeoutError after ``timeout`` seconds without one."""
        if timeout is not None:
            ready, _, _ = select.select([self.fd], [], [], timeout)
            if not ready:
                raise TimeoutError("no report from %s in %ss" % (self.path, timeout))
        return os.read(self.fd, size)

    def read_report(self, timeout: Optional[float] = None) -> Report:
        """The next input report as a :class:`Report`."""
        b = self.read(timeout=timeout)
        if self.numbered and b:
            return Report(b[0], b[1:])
        return Report(0, b)

    def write(self, report: bytes) -> int:
        """Send an output report (its ID first; 0 when unnumbered)."""
        return os.write(self.fd, report)

    def report_descriptor(self) -> bytes:
        """HIDIOCGRDESCSIZE and HIDIOCGRDESC."""
        size = struct.unpack("i", fcntl.ioctl(self.fd, HIDIOCGRDESCSIZE, bytes(4)))[0]
        buf = bytearray(struct.pack("I", size) + bytes(4096))
        fcntl.ioctl(self.fd, HIDIOCGRDESC, buf)
        return bytes(buf[4 : 4 + size])

    def info(self) -> HidrawInfo:
        """HIDIOCGRAWINFO."""
        bustype, vendor, product = struct.unpack("Ihh", fcntl.ioctl(self.fd, HIDIOCGRAWINFO, bytes(8)))
        return HidrawInfo(bustype, vendor & 0xFFFF, product & 0xFFFF)

    def _string(self, nr: int) -> str:
        buf = bytearray(256)
        n = fcntl.ioctl(self.fd, _ioc(_IOC_READ, nr, len(buf)), buf)
        return bytes(buf[: max(n - 1, 0)]).decode("utf-8", "replace")

    def name(self) -> str:
        """HIDIOCGRAWNAME: manufacturer and product."""
        return self._string(0x04)

    def phys(self) -> str:
        """HIDIOCGRAWPHYS: ``usb-CONTROLLER-PORTS/inputN``."""
        return self._string(0x05)

    def uniq(self) -> str:
        """HIDIOCGRAWUNIQ: the serial number."""
        return self._string(0x08)

    def _get(self, nr: int, report_id: int, length: int) -> Report:
        buf = bytearray([report_id]) + bytes(length)
        n = fcntl.ioctl(self.fd, _ioc(_IOC_READ | _IOC_WRITE, nr, len(buf)), buf)
        return Report(report_id, bytes(buf[1:n]))

    def _set(self, nr: int, report_id: int, data: bytes) -> int:
        buf = bytearray([report_id]) + bytes(data)
        return fcntl.ioctl(self.fd, _ioc(_IOC_READ | _IOC_WRITE, nr, len(buf)), buf)

    def get_feature(self, report_id: int, length: int) -> Report:
        """HIDIOCGFEATURE: feature report ``report_id``, at most ``length``
        bytes after the ID."""
        return self._get(0x07, report_id, length)

    def set_feature(self, report_id: int, data: bytes) -> int:
        """HIDIOCSFEATURE: send feature report ``report_id``."""
        return self._set(0x06, report_id, data)

    def get_input(self, report_id: int, length: int) -> Report:
        """HIDIOCGINPUT: input report ``report_id`` by GET_REPORT."""
        return self._get(0x0A, report_id, length)

    def set_output(self, report_id: int, data: bytes) -> int:
        """HIDIOCSOUTPUT: output report ``report_id`` by SET_REPORT."""
        return self._set(0x0B, report_id, data)
