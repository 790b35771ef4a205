"""usbmon readers that return events, not lines.

* :class:`TextEvent` and :func:`parse_text_line`: one line of ``usb/usbmon/Nu``
  (or ``Nt``), as ``Documentation/usb/usbmon.rst`` defines it;
  :class:`TextReader` reads them from a mount.
* :class:`BinaryEvent`: one ``struct mon_bin_hdr`` with its ISO descriptors and
  data, as ``drivers/usb/mon/mon_bin.c`` stores it; :class:`BinaryReader`
  fetches them with ``MON_IOCX_GETX`` (one ioctl an event, as ``monfs record``
  does), :class:`MmapReader` from the mapped ring with ``MON_IOCX_MFETCH``
  (as libpcap does), and :func:`read_pcap` from a capture file that tcpdump,
  dumpcap or ``monfs record`` wrote (linktypes 220 and 189, pcap and pcapng).

Every reader waits with a deadline (see :class:`monfs.Stream`): ``expect``,
``collect`` and ``next`` raise :class:`monfs.ExpectationFailed` listing what
did arrive.
"""

import ctypes
import fcntl
import mmap
import os
import select
import struct
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterator, List, Optional, Tuple, Union

from ._stream import Stream

__all__ = [
    "TextEvent",
    "IsoDesc",
    "parse_text_line",
    "TextReader",
    "BinaryEvent",
    "BinaryReader",
    "MmapReader",
    "read_pcap",
    "XFER_TYPES",
    "MON_IOCQ_URB_LEN",
    "MON_IOCG_STATS",
    "MON_IOCT_RING_SIZE",
    "MON_IOCQ_RING_SIZE",
    "MON_IOCX_GET",
    "MON_IOCX_MFETCH",
    "MON_IOCH_MFLUSH",
    "MON_IOCX_GETX",
]

# ioctl numbers of drivers/usb/mon/mon_bin.c (64-bit layout).
MON_IOCQ_URB_LEN = 0x00009201
MON_IOCG_STATS = 0x80089203
MON_IOCT_RING_SIZE = 0x00009204
MON_IOCQ_RING_SIZE = 0x00009205
MON_IOCX_GET = 0x40189206
MON_IOCX_MFETCH = 0xC0109207
MON_IOCH_MFLUSH = 0x00009208
MON_IOCX_GETX = 0x4018920A

#: Binary ``xfer_type`` to the text files' letter.
XFER_TYPES = {0: "Z", 1: "I", 2: "C", 3: "B"}

PathLike = Union[str, os.PathLike]


@dataclass(frozen=True)
class IsoDesc:
    """One isochronous packet descriptor: status, offset and length."""

    status: int
    offset: int
    length: int


@dataclass(frozen=True)
class TextEvent:
    """One usbmon text line, field by field.

    ``kind`` is ``S`` (submission), ``C`` (completion) or ``E`` (submission
    error); ``xfer`` the transfer type (``C`` control, ``Z`` isochronous,
    ``I`` interrupt, ``B`` bulk); ``direction`` ``i`` or ``o``. ``bus`` is
    None for an ``Nt`` line. ``status`` is None when the line carries a setup
    packet instead (``setup`` then holds its 8 bytes, in wire order).
    ``data`` is the captured bytes (at most 32) or None, ``data_flag`` the
    letter printed instead of data (``<``, ``>``, ``Z``...), if any.
    """

    tag: str
    timestamp: int
    kind: str
    xfer: str
    direction: str
    bus: Optional[int]
    device: int
    endpoint: int
    status: Optional[int]
    length: int
    setup: Optional[bytes] = None
    interval: Optional[int] = None
    start_frame: Optional[int] = None
    error_count: Optional[int] = None
    iso_count: Optional[int] = None
    iso: Tuple[IsoDesc, ...] = ()
    data: Optional[bytes] = None
    data_flag: Optional[str] = None
    line: str = field(default="", compare=False, repr=False)

    @property
    def is_in(self) -> bool:
        """Whether the endpoint is an IN endpoint."""
        return self.direction == "i"

    @property
    def address(self) -> str:
        """``BUS:DEV:EP`` as in the ``u`` format (``DEV:EP`` for ``t``)."""
        if self.bus is None:
            return "%03d:%02d" % (self.device, self.endpoint)
        return "%d:%03d:%d" % (self.bus, self.device, self.endpoint)

    def __str__(self) -> str:
        return self.line or repr(self)


def _int(s: str, what: str, line: str) -> int:
    try:
        return int(s, 10)
    except ValueError:
        raise ValueError("usbmon text: bad %s %r in %r" % (what, s, line)) from None


def parse_text_line(line: str) -> TextEvent:
    """Parse one line of a ``Nu`` or ``Nt`` file (with or without its
    newline). Raises ValueError, naming the field, for a line that is not in
    the kernel's format."""
    line = line.rstrip("\n")
    w = line.split(" ")
    if len(w) < 5:
        raise ValueError("usbmon text: too few words in %r" % line)
    tag, ts, kind, addr = w[0], _int(w[1], "timestamp", line), w[2], w[3]
    if kind not in ("S", "C", "E"):
        raise ValueError("usbmon text: bad event type %r in %r" % (kind, line))
    a = addr.split(":")
    if len(a) == 4:
        xd, bus, dev, ep = a[0], _int(a[1], "bus", line), a[2], a[3]
    elif len(a) == 3:
        xd, bus, dev, ep = a[0], None, a[1], a[2]
    else:
        raise ValueError("usbmon text: bad address %r in %r" % (addr, line))
    if len(xd) != 2 or xd[0] not in "CZIB" or xd[1] not in "io":
        raise ValueError("usbmon text: bad type/direction %r in %r" % (xd, line))
    xfer, direction = xd[0], xd[1]
    device, endpoint = _int(dev, "device", line), _int(ep, "endpoint", line)
    i = 4
    status = interval = start_frame = error_count = iso_count = None
    setup = None
    iso: List[IsoDesc] = []
    if w[i] == "s":
        if len(w) < i + 6:
            raise ValueError("usbmon text: short setup in %r" % line)
        bm, req, val, idx, ln = w[i + 1 : i + 6]
        try:
            setup = bytes([int(bm, 16), int(req, 16)]) + struct.pack(
                "<HHH", int(val, 16), int(idx, 16), int(ln, 16)
            )
        except ValueError:
            raise ValueError("usbmon text: bad setup in %r" % line) from None
        i += 6
    elif len(w[i]) == 1 and not w[i].isdigit():
        i += 6  # another setup flag letter: "Z __ __ ____ ____ ____"
    else:
        parts = w[i].split(":")
        nums = [_int(p, "status", line) for p in parts]
        status = nums[0]
        if len(nums) >= 2:
            interval = nums[1]
        if len(nums) >= 3:
            start_frame = nums[2]
        if len(nums) >= 4:
            error_count = nums[3]
        i += 1
        if xfer == "Z" and bus is not None and kind != "E":
            iso_count = _int(w[i], "iso count", line)
            i += 1
            for _ in range(min(max(iso_count, 0), 5)):
                d = w[i].split(":")
                if len(d) != 3:
                    raise ValueError("usbmon text: bad iso descriptor %r in %r" % (w[i], line))
                iso.append(IsoDesc(_int(d[0], "iso status", line), _int(d[1], "iso offset", line),
                                   _int(d[2], "iso length", line)))
                i += 1
    if i >= len(w):
        raise ValueError("usbmon text: no length in %r" % line)
    length = _int(w[i], "length", line)
    rest = w[i + 1 :]
    data = None
    flag = None
    if rest:
        if rest[0] == "=":
            try:
                data = bytes.fromhex("".join(rest[1:]))
            except ValueError:
                raise ValueError("usbmon text: bad data in %r" % line) from None
        elif len(rest) == 1 and len(rest[0]) == 1:
            flag = rest[0]
        else:
            raise ValueError("usbmon text: bad data words in %r" % line)
    return TextEvent(tag, ts, kind, xfer, direction, bus, device, endpoint, status, length,
                     setup, interval, start_frame, error_count, iso_count, tuple(iso), data, flag, line)


def _open_nonblock(path: PathLike) -> int:
    return os.open(os.fspath(path), os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)


class TextReader(Stream[TextEvent]):
    """Events of a usbmon text file (``usb/usbmon/Nu`` or ``Nt``).

    Like every text reader, it sees the events from its open on. ``check``
    is called while waiting (a mount's :meth:`~monfs.Mount.check`), so a
    daemon that dies ends the wait at once.
    """

    def __init__(self, path: PathLike, check: Optional[Callable[[], None]] = None) -> None:
        super().__init__(check)
        self.path = os.fspath(path)
        self._fd = _open_nonblock(self.path)
        self._buf = b""

    def _read_some(self) -> List[TextEvent]:
        out: List[TextEvent] = []
        while True:
            try:
                chunk = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buf += chunk
            if b"\n" in chunk:
                break
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            out.append(parse_text_line(line.decode("ascii")))
        return out

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass(frozen=True)
class BinaryEvent:
    """One binary usbmon event: the 64-byte ``struct mon_bin_hdr`` (API 1) by
    field, its ISO descriptors and its captured bytes.

    ``kind`` is ``S``, ``C``, ``E`` (``@`` is a ring filler, which readers
    skip); ``xfer_type`` 0 ISO, 1 interrupt, 2 control, 3 bulk; ``epnum``
    has bit 7 set for IN. ``setup`` holds the 8 setup bytes of a control
    submission (``flag_setup`` 0), else None; for ISO, ``error_count`` and
    ``numdesc`` hold the union instead.
    """

    id: int
    kind: str
    xfer_type: int
    epnum: int
    devnum: int
    busnum: int
    flag_setup: int
    flag_data: int
    ts_sec: int
    ts_usec: int
    status: int
    len_urb: int
    len_cap: int
    setup: Optional[bytes]
    error_count: int
    numdesc: int
    interval: int
    start_frame: int
    xfer_flags: int
    ndesc: int
    iso: Tuple[IsoDesc, ...] = ()
    data: bytes = b""

    HEADER = struct.Struct("<QBBBBHBBqiiII8siiII")

    @property
    def xfer(self) -> str:
        """The transfer type as the text files' letter (C, Z, I, B)."""
        return XFER_TYPES.get(self.xfer_type, "?")

    @property
    def is_in(self) -> bool:
        """Whether the endpoint is an IN endpoint."""
        return bool(self.epnum & 0x80)

    @property
    def endpoint(self) -> int:
        """The endpoint number without the direction bit."""
        return self.epnum & 0x7F

    @classmethod
    def parse(cls, header: bytes, payload: bytes = b"") -> "BinaryEvent":
        """An event from its 64-byte header (a 48-byte API 0 header is padded
        with zeros) and the ``len_cap`` bytes that follow it."""
        if len(header) < 48:
            raise ValueError("usbmon binary: header of %d bytes" % len(header))
        header = bytes(header[:64]).ljust(64, b"\0")
        (id_, typ, xt, ep, dev, bus, fs, fd, sec, usec, status, len_urb, len_cap, union,
         interval, start, flags, ndesc) = cls.HEADER.unpack(header)
        err, numdesc = struct.unpack("<ii", union)
        setup = union if (xt == 2 and fs == 0 and chr(typ) == "S") else None
        nd = min(ndesc, len(payload) // 16)
        iso = tuple(IsoDesc(*struct.unpack_from("<iII", payload, 16 * k)) for k in range(nd))
        return cls(id_, chr(typ), xt, ep, dev, bus, fs, fd, sec, usec, status, len_urb, len_cap,
                   setup, err if xt == 0 else 0, numdesc if xt == 0 else 0, interval, start, flags,
                   ndesc, iso, bytes(payload[16 * nd:]))

    def __str__(self) -> str:
        d = self.data[:16].hex()
        return "%s %s%s:%d:%03d:%d status=%d len_urb=%d len_cap=%d%s" % (
            self.kind, self.xfer, "i" if self.is_in else "o", self.busnum, self.devnum,
            self.endpoint, self.status, self.len_urb, self.len_cap, (" data=" + d) if d else "")


_PR_SET_PTRACER = 0x59616D61


def _let_daemon_in(daemon_pid: Optional[int]) -> None:
    """Under Yama ptrace_scope 1 a daemon without root may reach the memory of
    its descendants only; a test process is its parent. The pointer-carrying
    ioctls need that access (docs/rootless.md), so name the daemon as this
    process's ptracer."""
    if daemon_pid is None or os.geteuid() == 0:
        return
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "1":
                return
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PTRACER, ctypes.c_ulong(daemon_pid), 0, 0, 0)


class _BinaryBase(Stream[BinaryEvent]):
    def __init__(self, path: PathLike, check: Optional[Callable[[], None]], daemon_pid: Optional[int]) -> None:
        super().__init__(check)
        _let_daemon_in(daemon_pid)
        self.path = os.fspath(path)
        self._fd = _open_nonblock(self.path)

    def fileno(self) -> int:
        """The open ``dev/usbmonN``."""
        return self._fd

    def stats(self) -> Tuple[int, int]:
        """``MON_IOCG_STATS``: (events queued, events dropped since the last call)."""
        buf = fcntl.ioctl(self._fd, MON_IOCG_STATS, bytes(8))
        return struct.unpack("<II", buf)

    @property
    def ring_size(self) -> int:
        """``MON_IOCQ_RING_SIZE``: the ring's size in bytes."""
        return fcntl.ioctl(self._fd, MON_IOCQ_RING_SIZE, 0)

    def set_ring_size(self, size: int) -> None:
        """``MON_IOCT_RING_SIZE``: a new ring (queued events are discarded)."""
        fcntl.ioctl(self._fd, MON_IOCT_RING_SIZE, size)

    def _ready_now(self) -> bool:
        r, _, _ = select.select([self._fd], [], [], 0)
        return bool(r)

    def close(self) -> None:
        """Close the device file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class BinaryReader(_BinaryBase):
    """Events of ``dev/usbmonN`` through ``MON_IOCX_GETX``, one ioctl each.

    ``alloc`` bounds the payload fetched per event (the rest is cut, as the
    kernel cuts it). ``daemon_pid`` (given by :meth:`monfs.Mount.usbmon_binary`)
    lets a rootless daemon reach this process's memory under Yama.
    """

    def __init__(self, path: PathLike, check: Optional[Callable[[], None]] = None,
                 daemon_pid: Optional[int] = None, alloc: int = 65536) -> None:
        super().__init__(path, check, daemon_pid)
        self._hdr = ctypes.create_string_buffer(64)
        self._data = ctypes.create_string_buffer(alloc)
        self._alloc = alloc

    def _getx(self) -> Optional[BinaryEvent]:
        arg = struct.pack("<QQQ", ctypes.addressof(self._hdr), ctypes.addressof(self._data), self._alloc)
        try:
            fcntl.ioctl(self._fd, MON_IOCX_GETX, arg)
        except BlockingIOError:
            return None
        hdr = self._hdr.raw
        len_cap = struct.unpack_from("<I", hdr, 36)[0]
        return BinaryEvent.parse(hdr, self._data.raw[: min(len_cap, self._alloc)])

    def _read_some(self) -> List[BinaryEvent]:
        out: List[BinaryEvent] = []
        while len(out) < 256:
            ev = self._getx()
            if ev is None:
                break
            if ev.kind != "@":
                out.append(ev)
        return out


class MmapReader(_BinaryBase):
    """Events of ``dev/usbmonN`` from its mapped ring, with ``MON_IOCX_MFETCH``
    (the offsets of the next events) and the count of those handled passed
    back as the next call's ``nflush``, as libpcap reads it. Fillers (``@``)
    are skipped. ``ring_size`` (bytes) sets the ring's size before mapping.
    """

    def __init__(self, path: PathLike, check: Optional[Callable[[], None]] = None,
                 daemon_pid: Optional[int] = None, ring_size: Optional[int] = None,
                 batch: int = 64) -> None:
        super().__init__(path, check, daemon_pid)
        if ring_size is not None:
            self.set_ring_size(ring_size)
        self._size = self.ring_size
        self._map = mmap.mmap(self._fd, self._size, mmap.MAP_SHARED, mmap.PROT_READ)
        self._offvec = (ctypes.c_uint32 * batch)()
        self._batch = batch
        self._flush = 0

    def _read_some(self) -> List[BinaryEvent]:
        arg = bytearray(struct.pack("<QII", ctypes.addressof(self._offvec), self._batch, self._flush))
        try:
            fcntl.ioctl(self._fd, MON_IOCX_MFETCH, arg, True)
        except BlockingIOError:
            self._flush = 0
            return []
        self._flush = 0
        _, nfetch, _ = struct.unpack("<QII", arg)
        out: List[BinaryEvent] = []
        for k in range(nfetch):
            off = self._offvec[k]
            hdr = self._map[off : off + 64]
            len_cap = struct.unpack_from("<I", hdr, 36)[0]
            if chr(hdr[8]) != "@":
                end = min(off + 64 + len_cap, self._size)
                out.append(BinaryEvent.parse(hdr, self._map[off + 64 : end]))
        self._flush = nfetch
        return out

    def close(self) -> None:
        """Unmap the ring and close the device file."""
        if getattr(self, "_map", None) is not None:
            self._map.close()
            self._map = None  # type: ignore[assignment]
        super().close()


def _pcap_packets(f: BinaryIO) -> Iterator[Tuple[int, bytes]]:
    """(linktype, packet bytes) of every packet of a pcap or pcapng file."""
    magic = f.read(4)
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = "<" if magic[0] in (0xD4, 0x4D) else ">"
        rest = f.read(20)
        linktype = struct.unpack(end + "HHiIII", rest)[5] & 0xFFFF
        while True:
            rec = f.read(16)
            if len(rec) < 16:
                return
            _, _, incl, _ = struct.unpack(end + "IIII", rec)
            yield linktype, f.read(incl)
    elif magic == b"\x0a\x0d\x0d\x0a":
        f.seek(0)
        end = "<"
        links: List[int] = []
        while True:
            head = f.read(8)
            if len(head) < 8:
                return
            if head[:4] == b"\x0a\x0d\x0d\x0a":
                bom = f.read(4)
                end = "<" if bom == b"\x4d\x3c\x2b\x1a" else ">"
                blen = struct.unpack(end + "I", head[4:8])[0]
                f.read(blen - 12)
                links = []
                continue
            btype, blen = struct.unpack(end + "II", head)
            body = f.read(blen - 8)
            if btype == 1:
                links.append(struct.unpack_from(end + "H", body, 0)[0])
            elif btype == 6:
                iface, _, _, cap, _ = struct.unpack_from(end + "IIIII", body, 0)
                yield links[iface], body[20 : 20 + cap]
            elif btype == 3:
                yield links[0], body[4:]
    else:
        raise ValueError("not a pcap or pcapng file (magic %s)" % magic.hex())


def read_pcap(path: PathLike) -> List[BinaryEvent]:
    """The usbmon events of a capture file (pcap or pcapng, linktype 220
    ``USB_LINUX_MMAPPED`` or 189 ``USB_LINUX``), fillers left out."""
    out: List[BinaryEvent] = []
    with open(path, "rb") as f:
        for linktype, pkt in _pcap_packets(f):
            if linktype == 220:
                ev = BinaryEvent.parse(pkt[:64], pkt[64:])
            elif linktype == 189:
                ev = BinaryEvent.parse(pkt[:48], pkt[48:])
            else:
                raise ValueError("%s: linktype %d is not usbmon (220 or 189)" % (path, linktype))
            if ev.kind != "@":
                out.append(ev)
    return out

