"""Write an external USB device as a Python class.

monfs's ``kind: external`` devices are answered by a *peer* speaking a line
protocol (docs/external-devices.md). Here a peer is a :class:`Device`
subclass with one method per endpoint or control request; it answers with
bytes, returns None to NAK (the URB stays pending and is asked again), or
raises :class:`Stall`::

    from monfs import peer, descriptors as d

    class Echo(peer.Device):
        def __init__(self):
            super().__init__()
            self.last = b""

        @peer.endpoint(0x02)            # bulk OUT
        def take(self, data):
            self.last = data

        @peer.endpoint(0x81)            # bulk IN
        def give(self, length):
            return self.last[:length] or None   # NAK until there is something

        @peer.control(0xC0, 0x01)       # vendor request, device to host
        def version(self, setup, data):
            return b"\\x01\\x02"

Serve it as a ``command:`` peer with :func:`main` at the end of a script
(``command: [python3, echo_peer.py]``), or name the class
(``command: [python3, -m, monfs.peer, "echo_peer:Echo"]``), or from the test itself with
:class:`SocketPeer` (``socket: PATH``), which reports a handler's exception
to the test (:class:`monfs.PeerError`, with the daemon's log).
"""

import os
import select
import socket
import sys
import tempfile
import threading
import traceback
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, NamedTuple, Optional, Sequence, Tuple, Union

from . import descriptors as _d

__all__ = [
    "Device", "HidDevice", "AcmDevice", "Stall", "UrbError", "Setup", "Urb", "endpoint", "control", "serve", "main",
    "SocketPeer", "STALL", "EPROTO", "EOVERFLOW", "EILSEQ", "ETIME", "EREMOTEIO",
]

# Completion statuses a peer may give (negative errnos, as usbmon shows them).
STALL = -32
EPROTO = -71
EOVERFLOW = -75
EILSEQ = -84
ETIME = -62
EREMOTEIO = -121


class UrbError(Exception):
    """Raise from a handler to complete the URB with ``status`` (one of
    -32, -71, -75, -84, -62, -121)."""

    def __init__(self, status: int) -> None:
        super().__init__("URB completes with status %d" % status)
        self.status = status


class Stall(UrbError):
    """Raise from a handler to stall the request (-32, EPIPE)."""

    def __init__(self) -> None:
        super().__init__(STALL)


@dataclass(frozen=True)
class Setup:
    """A control request's setup packet: ``bmRequestType``, ``bRequest``,
    ``wValue``, ``wIndex``, ``wLength``."""

    request_type: int
    request: int
    value: int
    index: int
    length: int

    @classmethod
    def parse(cls, raw: bytes) -> "Setup":
        """From its 8 bytes."""
        return cls(raw[0], raw[1], raw[2] | raw[3] << 8, raw[4] | raw[5] << 8, raw[6] | raw[7] << 8)

    @property
    def is_in(self) -> bool:
        """Device to host."""
        return bool(self.request_type & 0x80)

    @property
    def kind(self) -> str:
        """``standard``, ``class``, ``vendor`` or ``reserved``."""
        return ("standard", "class", "vendor", "reserved")[(self.request_type >> 5) & 3]

    @property
    def recipient(self) -> str:
        """``device``, ``interface``, ``endpoint`` or ``other``."""
        return ("device", "interface", "endpoint", "other")[min(self.request_type & 0x1F, 3)]


class Urb(NamedTuple):
    """A submitted URB as the protocol's ``submit`` line carries it."""

    id: int
    ep: int
    type: str
    length: int
    setup: Optional[Setup]
    data: Optional[bytes]
    packet_lengths: Tuple[int, ...]

    @property
    def is_in(self) -> bool:
        """An IN transfer (for control: by the setup's direction)."""
        if self.setup is not None:
            return self.setup.is_in
        return bool(self.ep & 0x80)


def endpoint(address: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make a method the handler of endpoint ``address`` (``0x81`` IN,
    ``0x02`` OUT).

    * IN (bulk, interrupt): ``method(self, length) -> bytes | None``: the
      data (cut to ``length``), or None to NAK: the URB stays pending and the
      method is called again a few milliseconds later.
    * OUT: ``method(self, data) -> None``: the URB completes with all of
      ``data`` taken.
    * isochronous IN: ``method(self, packet_lengths) -> list of bytes``, one
      per packet; OUT: ``method(self, packets) -> None``.

    Raise :class:`Stall` or :class:`UrbError` to fail the transfer."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn._monfs_endpoint = address  # type: ignore[attr-defined]
        return fn
    return mark


def control(request_type: int, request: int) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make a method the handler of control requests with this
    ``bmRequestType`` and ``bRequest``: ``method(self, setup, data) ->
    bytes | None``, ``setup`` a :class:`Setup`, ``data`` the OUT data (None
    for IN); return the IN data (cut to ``wLength``), None for an OUT
    request; raise :class:`Stall` to refuse."""
    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn._monfs_control = (request_type, request)  # type: ignore[attr-defined]
        return fn
    return mark


class Device:
    """Base class of a peer. Class attributes a subclass may set:

    * ``descriptors``: the sysfs-layout dump (``descriptors.descriptors_file``),
      used to answer standard GET_DESCRIPTOR requests when the device is
      configured with ``ep0: peer`` (with ``ep0: monfs``, the default, monfs
      answers those itself);
    * ``strings``: string descriptors by index, for the same;
    * ``report_descriptor``: a HID report descriptor, answered to usbhid's
      GET_DESCRIPTOR(REPORT); SET_IDLE, SET_PROTOCOL and SET_REPORT are then
      accepted;
    * ``poll_interval``: seconds between two asks of a NAKed URB.

    Without a handler, an IN endpoint answers what :meth:`send` queued for
    it (and NAKs while nothing is queued), an OUT endpoint takes everything,
    and an unknown control request stalls.
    """

    descriptors: Optional[bytes] = None
    strings: Dict[int, str] = {}
    report_descriptor: Optional[bytes] = None
    poll_interval: float = 0.005

    def __init__(self) -> None:
        self._endpoints: Dict[int, Callable[..., Any]] = {}
        self._controls: Dict[Tuple[int, int], Callable[..., Any]] = {}
        for name in dir(type(self)):
            fn = getattr(self, name, None)
            ep = getattr(fn, "_monfs_endpoint", None)
            if ep is not None:
                self._endpoints[ep] = fn  # type: ignore[assignment]
            ctl = getattr(fn, "_monfs_control", None)
            if ctl is not None:
                self._controls[ctl] = fn  # type: ignore[assignment]
        self._queues: Dict[int, Deque[bytes]] = {}
        self._lock = threading.Lock()
        #: ``(bus, port, speed)`` from monfs's ``hello``, once it came.
        self.plugged: Optional[Tuple[int, str, str]] = None

    # Hooks ---------------------------------------------------------------

    def on_hello(self, bus: int, port: str, speed: str) -> None:
        """Called when monfs introduces the device (its bus, port path and
        speed)."""

    def on_unlink(self, urb_id: int, status: int) -> None:
        """Called when the host gave up a URB (see the protocol's ``unlink``)."""

    def send(self, ep: int, data: bytes) -> None:
        """Queue ``data`` for the next URB of IN endpoint ``ep`` (thread-safe:
        a test may call it on a :class:`SocketPeer`'s device)."""
        with self._lock:
            self._queues.setdefault(ep, deque()).append(bytes(data))

    # Dispatch ------------------------------------------------------------

    def answer_control(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        """The answer to a control request: a registered :func:`control`
        handler, else the standard and HID requests this class knows, else a
        stall."""
        fn = self._controls.get((setup.request_type, setup.request))
        if fn is not None:
            return fn(setup, data)
        return self.standard_request(setup, data)

    def standard_request(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        """Standard device requests from :attr:`descriptors` and
        :attr:`strings`, and usbhid's requests from :attr:`report_descriptor`."""
        rt, req, kind, index = setup.request_type, setup.request, setup.value >> 8, setup.value & 0xFF
        if rt == 0x80 and req == 0x06 and self.descriptors is not None:
            if kind == 1:
                return self.descriptors[:18]
            if kind == 2:
                at, n = 18, 0
                while at + 4 <= len(self.descriptors):
                    total = self.descriptors[at + 2] | self.descriptors[at + 3] << 8
                    if n == index:
                        return self.descriptors[at : at + total]
                    at, n = at + total, n + 1
            if kind == 3:
                if index == 0:
                    return bytes([4, 3, 0x09, 0x04])
                if index in self.strings:
                    return _d.string(self.strings[index])
            raise Stall()
        if rt == 0x00 and req in (0x05, 0x09):  # SET_ADDRESS, SET_CONFIGURATION
            return None
        if rt == 0x01 and req == 0x0B:  # SET_INTERFACE
            return None
        if rt in (0x80, 0x81, 0x82) and req == 0x00:  # GET_STATUS
            return bytes(2)
        if self.report_descriptor is not None:
            if rt == 0x81 and req == 0x06 and kind == 0x22:
                return self.report_descriptor
            if rt == 0x21 and req in (0x09, 0x0A, 0x0B):  # SET_REPORT, SET_IDLE, SET_PROTOCOL
                return None
        raise Stall()

    def answer(self, urb: Urb) -> Optional[Tuple[int, bytes, Sequence[Tuple[int, int]]]]:
        """``(status, data, packet results)`` for a URB, or None to leave it
        pending. Handlers' :class:`UrbError` becomes the status; any other
        exception propagates (the peer fails)."""
        try:
            if urb.type == "C":
                assert urb.setup is not None
                got = self.answer_control(urb.setup, urb.data)
                if urb.setup.is_in:
                    return 0, bytes(got or b"")[: urb.length], ()
                return 0, b"", ()
            fn = self._endpoints.get(urb.ep)
            if urb.type == "Z":
                return self._iso(urb, fn)
            if urb.is_in:
                if fn is None:
                    with self._lock:
                        q = self._queues.get(urb.ep)
                        got = q.popleft() if q else None
                else:
                    got = fn(urb.length)
                if got is None:
                    return None
                return 0, bytes(got)[: urb.length], ()
            if fn is not None:
                fn(urb.data or b"")
            return 0, b"", ()
        except UrbError as e:
            return e.status, b"", ()

    def _iso(self, urb: Urb, fn: Optional[Callable[..., Any]]) -> Tuple[int, bytes, Sequence[Tuple[int, int]]]:
        lens = urb.packet_lengths
        if urb.is_in:
            packets = list(fn(list(lens)) if fn is not None else [])
            packets += [b""] * (len(lens) - len(packets))
            packets = [bytes(p)[:n] for p, n in zip(packets, lens)]
            return 0, b"".join(packets), [(0, len(p)) for p in packets]
        data = urb.data or b""
        at, packets = 0, []
        for n in lens:
            packets.append(data[at : at + n])
            at += n
        if fn is not None:
            fn(packets)
        return 0, b"", [(0, len(p)) for p in packets]


class HidDevice(Device):
    """A HID device whose reports are kept by type and ID, as usbhid and
    hidraw reach them (set :attr:`report_descriptor`):

    * :meth:`send_report` queues an input report on the interrupt IN
      endpoint (its ID first when it has one);
    * GET_REPORT of a feature or an input report answers
      :attr:`features` / :attr:`inputs` by report ID (the ID first when
      not 0), and stalls for an ID it has not;
    * SET_REPORT (output, feature, input) and output reports on
      :attr:`out_endpoint` (an interrupt OUT endpoint, if the interface
      has one) call :meth:`on_report`, which records them in
      :attr:`received` as ``(type, report ID, data)``.

    Set :attr:`numbered` when the descriptor numbers its reports: an
    output report on the OUT endpoint then starts with its ID."""

    out_endpoint: Optional[int] = None
    numbered: bool = False

    def __init__(self) -> None:
        super().__init__()
        #: Feature reports by ID, for GET_REPORT.
        self.features: Dict[int, bytes] = {}
        #: Input reports by ID, for GET_REPORT.
        self.inputs: Dict[int, bytes] = {}
        #: What the host sent: ``(type, report ID, data)``, type
        #: ``"output"``, ``"feature"`` or ``"input"``.
        self.received: List[Tuple[str, int, bytes]] = []
        if self.out_endpoint is not None and self.out_endpoint not in self._endpoints:
            self._endpoints[self.out_endpoint] = self._output

    def send_report(self, report_id: int, data: bytes, ep: int = 0x81) -> None:
        """Queue input report ``report_id`` (0: unnumbered) for the host."""
        self.send(ep, (bytes([report_id]) if report_id else b"") + bytes(data))

    def on_report(self, kind: str, report_id: int, data: bytes) -> None:
        """The host sent report ``report_id`` of type ``kind``: recorded in
        :attr:`received`. Override to act on it; raise :class:`Stall` to
        refuse a SET_REPORT."""
        with self._lock:
            self.received.append((kind, report_id, bytes(data)))

    def _output(self, data: bytes) -> None:
        if self.numbered and data:
            self.on_report("output", data[0], data[1:])
        else:
            self.on_report("output", 0, data)

    def answer_control(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        types = {1: "input", 2: "output", 3: "feature"}
        rt, req, kind, rid = setup.request_type, setup.request, setup.value >> 8, setup.value & 0xFF
        if (rt, req) not in self._controls and kind in types:
            if rt == 0x21 and req == 0x09:  # SET_REPORT
                body = data or b""
                if rid and body[:1] == bytes([rid]):
                    body = body[1:]
                self.on_report(types[kind], rid, body)
                return None
            if rt == 0xA1 and req == 0x01 and kind in (1, 3):  # GET_REPORT
                table = self.inputs if kind == 1 else self.features
                if rid not in table:
                    raise Stall()
                return (bytes([rid]) if rid else b"") + table[rid]
        return super().answer_control(setup, data)


class AcmDevice(Device):
    """A CDC ACM serial device (cdc_acm's ``/dev/ttyACMN`` on the host side),
    laid out as :func:`monfs.descriptors.cdc_acm` lays it out:

    * SET_LINE_CODING calls :meth:`on_line_coding` (recorded in
      :attr:`line_codings` as ``(baud, stop bits code, parity code, data
      bits)``), SET_CONTROL_LINE_STATE :meth:`on_control_lines` (recorded in
      :attr:`control_lines` as ``(dtr, rts)``), SEND_BREAK :meth:`on_break`
      (recorded in :attr:`breaks`); GET_LINE_CODING answers the last one;
    * bytes the host writes call :meth:`on_data` (default: kept in
      :attr:`received`); :meth:`write` queues bytes for the host to read;
    * :meth:`set_serial_state` sends a SERIAL_STATE notification (DCD, DSR,
      RI, break and errors), which the host's modem lines follow."""

    control_interface: int = 0
    notify_endpoint: int = 0x83
    in_endpoint: int = 0x81
    out_endpoint: int = 0x02

    def __init__(self) -> None:
        super().__init__()
        self.line_codings: List[Tuple[int, int, int, int]] = []
        self.control_lines: List[Tuple[bool, bool]] = []
        self.breaks: List[int] = []
        self.received = bytearray()
        self._coding = bytes([0x80, 0x25, 0, 0, 0, 0, 8])
        if self.out_endpoint not in self._endpoints:
            self._endpoints[self.out_endpoint] = self._take

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the host's reads (thread-safe)."""
        self.send(self.in_endpoint, data)

    def set_serial_state(self, dcd: bool = False, dsr: bool = False, ri: bool = False,
                         brk: bool = False, framing: bool = False, parity: bool = False,
                         overrun: bool = False) -> None:
        """Send a SERIAL_STATE notification with these lines and errors."""
        bits = sum(b << i for i, b in enumerate((dcd, dsr, brk, ri, framing, parity, overrun)))
        head = bytes([0xA1, 0x20, 0, 0, self.control_interface, 0, 2, 0])
        self.send(self.notify_endpoint, head + bits.to_bytes(2, "little"))

    def on_line_coding(self, baud: int, stop: int, parity: int, bits: int) -> None:
        """The host set the line coding (``stop``: 0 one, 1 one and a half,
        2 two stop bits; ``parity``: 0 none, 1 odd, 2 even, 3 mark, 4 space)."""
        with self._lock:
            self.line_codings.append((baud, stop, parity, bits))

    def on_control_lines(self, dtr: bool, rts: bool) -> None:
        """The host set DTR and RTS."""
        with self._lock:
            self.control_lines.append((dtr, rts))

    def on_break(self, duration: int) -> None:
        """The host sent SEND_BREAK (0xffff: on until 0; 0: off)."""
        with self._lock:
            self.breaks.append(duration)

    def on_data(self, data: bytes) -> None:
        """Bytes the host wrote; kept in :attr:`received`."""
        with self._lock:
            self.received += data

    def _take(self, data: bytes) -> None:
        self.on_data(bytes(data))

    def answer_control(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        rt, req = setup.request_type, setup.request
        if (rt, req) not in self._controls:
            if rt == 0x21 and req == 0x20 and data is not None and len(data) >= 7:
                self._coding = bytes(data[:7])
                self.on_line_coding(int.from_bytes(data[0:4], "little"), data[4], data[5], data[6])
                return None
            if rt == 0xA1 and req == 0x21:
                return self._coding
            if rt == 0x21 and req == 0x22:
                self.on_control_lines(bool(setup.value & 1), bool(setup.value & 2))
                return None
            if rt == 0x21 and req == 0x23:
                self.on_break(setup.value)
                return None
        return super().answer_control(setup, data)


#: ftdi_sio's fraction codes of a divisor, in eighths.
_FTDI_FRACTIONS = (0, 4, 2, 1, 3, 5, 6, 7)


class FtdiDevice(Device):
    """An FTDI USB serial adapter (ftdi_sio's ``/dev/ttyUSBN`` on the host
    side), laid out as :func:`monfs.descriptors.ftdi` lays it out; set
    :attr:`chip` to the same chip name. Per port (interface ``n``: bulk IN
    ``0x81 + 2n``, OUT ``0x02 + 2n``):

    * the vendor requests are recorded: SET_BAUD_RATE as the rate the
      divisor gives (:attr:`baud_rates`, and the raw ``(value, index)`` in
      :attr:`divisors`), SET_DATA as ``(bits, parity, stop, break)``
      (:attr:`line_settings`; parity 0 none, 1 odd, 2 even, 3 mark, 4
      space; stop 0 one, 1 one and a half, 2 two), MODEM_CTRL as ``(dtr,
      rts)`` (:attr:`control_lines`, None for a line left alone),
      SET_FLOW_CTRL as ``"none"``, ``"rtscts"``, ``"dtrdsr"`` or
      ``"xonxoff"`` (:attr:`flow`), RESET, the latency timer and the event
      character; GET_MODEM_STATUS and GET_LATENCY_TIMER are answered;
    * bytes the host writes call :meth:`on_data` (default: kept in
      :attr:`received`); :meth:`write` queues bytes for the host to read,
      sent as the chip sends them: every packet starts with the two status
      bytes (the modem lines :meth:`set_modem_lines` set, and the line
      status), and :meth:`line_error` sends an error status;
    * like qemu's usb-serial (and unlike a chip, which answers every
      latency timer period), the IN endpoint NAKs while there is nothing to
      send."""

    chip: str = "FT232R"
    port: int = 0

    def __init__(self) -> None:
        super().__init__()
        _pid, _bcd, _ports, self._mps, _usb = _d.FTDI_CHIPS[self.chip]
        self.in_endpoint = 0x81 + 2 * self.port
        self.out_endpoint = 0x02 + 2 * self.port
        self.baud_rates: List[int] = []
        self.divisors: List[Tuple[int, int]] = []
        self.line_settings: List[Tuple[int, int, int, bool]] = []
        self.control_lines: List[Tuple[Optional[bool], Optional[bool]]] = []
        self.flow: List[str] = []
        self.resets = 0
        self.latency = 16
        self.event_chars: List[int] = []
        self.received = bytearray()
        self._modem = 0x10 | 0x20  # CTS and DSR, as qemu's usb-serial has them
        self._out: Deque[Union[bytes, Tuple[int, bytes]]] = deque()
        self._endpoints.setdefault(self.out_endpoint, self._take)
        self._endpoints.setdefault(self.in_endpoint, self._give)

    # The host side's view --------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the host's reads (thread-safe)."""
        with self._lock:
            self._out.append(bytes(data))

    def set_modem_lines(self, cts: bool = True, dsr: bool = True, ri: bool = False, dcd: bool = False,
                        notify: bool = True) -> None:
        """Set the modem status lines; with ``notify`` a status-only packet
        tells the host at once."""
        with self._lock:
            self._modem = (0x10 if cts else 0) | (0x20 if dsr else 0) | (0x40 if ri else 0) | (0x80 if dcd else 0)
            if notify:
                self._out.append(b"")

    def line_error(self, data: bytes = b"\0", *, brk: bool = False, parity: bool = False,
                   framing: bool = False, overrun: bool = False) -> None:
        """Send ``data`` with an error in the line status byte."""
        status = (0x10 if brk else 0) | (0x04 if parity else 0) | (0x08 if framing else 0) | (0x02 if overrun else 0)
        with self._lock:
            self._out.append((status, bytes(data)))

    def on_data(self, data: bytes) -> None:
        """Bytes the host wrote; kept in :attr:`received`."""
        with self._lock:
            self.received += data

    def on_baud_rate(self, baud: int) -> None:
        """The host set the baud rate (what the divisor gives)."""

    def on_line_settings(self, bits: int, parity: int, stop: int, brk: bool) -> None:
        """The host set data bits, parity, stop bits and the break."""

    def on_control_lines(self, dtr: Optional[bool], rts: Optional[bool]) -> None:
        """The host set DTR and RTS (None: left as it was)."""

    # The device --------------------------------------------------------------

    def _status(self) -> bytes:
        return bytes([0x01 | self._modem, 0x60])

    def _take(self, data: bytes) -> None:
        self.on_data(bytes(data))

    def _give(self, length: int) -> Optional[bytes]:
        with self._lock:
            if not self._out:
                return None
            out = b""
            while self._out and len(out) + 2 <= length:
                item = self._out[0]
                if isinstance(item, tuple):  # an error status, in a packet of its own
                    pkt = bytes([0x01 | self._modem, 0x60 | item[0]]) + item[1][: self._mps - 2]
                    self._out.popleft()
                else:
                    room = min(self._mps - 2, length - len(out) - 2)
                    pkt = self._status() + item[:room]
                    if len(item) > room:
                        self._out[0] = item[room:]
                    else:
                        self._out.popleft()
                out += pkt
                if len(pkt) < self._mps:
                    break  # a short packet ends the transfer
            return out

    def baud_of(self, value: int, index: int) -> int:
        """The rate a SET_BAUD_RATE's divisor gives on :attr:`chip`."""
        hi = index >> 8 if self.chip in ("FT2232C", "FT232H", "FT2232H", "FT4232H", "FT-X") else index
        eighths = _FTDI_FRACTIONS[((hi & 1) << 2) | (value >> 14)]
        div = (value & 0x3FFF) * 8 + eighths
        if div == 0:
            div = 8
        elif div == 4:  # encoded 1: 1.5
            div = 12
        clock = 12_000_000 if hi & 2 else 3_000_000
        return round(clock * 8 / div)

    def answer_control(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        rt, req, v = setup.request_type, setup.request, setup.value
        if (rt, req) in self._controls or rt not in (0x40, 0xC0):
            return super().answer_control(setup, data)
        with self._lock:
            if rt == 0x40 and req == 0:
                self.resets += 1
            elif rt == 0x40 and req == 1:
                dtr = bool(v & 1) if v & 0x100 else None
                rts = bool(v & 2) if v & 0x200 else None
                self.control_lines.append((dtr, rts))
            elif rt == 0x40 and req == 2:
                kind = setup.index >> 8
                self.flow.append({0: "none", 1: "rtscts", 2: "dtrdsr", 4: "xonxoff"}.get(kind, hex(kind)))
            elif rt == 0x40 and req == 3:
                self.divisors.append((v, setup.index))
                self.baud_rates.append(self.baud_of(v, setup.index))
            elif rt == 0x40 and req == 4:
                self.line_settings.append((v & 0xFF, (v >> 8) & 7, (v >> 11) & 3, bool(v & 0x4000)))
            elif rt == 0xC0 and req == 5:
                return self._status()
            elif rt == 0x40 and req == 6:
                self.event_chars.append(v)
            elif rt == 0x40 and req in (7, 0x0B):
                pass
            elif rt == 0x40 and req == 9:
                self.latency = v & 0xFF
            elif rt == 0xC0 and req == 0x0A:
                return bytes([self.latency])
            elif rt == 0xC0 and req == 0x90:
                return bytes(2)
            else:
                raise Stall()
        if rt == 0x40 and req == 1:
            self.on_control_lines(*self.control_lines[-1])
        elif rt == 0x40 and req == 3:
            self.on_baud_rate(self.baud_rates[-1])
        elif rt == 0x40 and req == 4:
            self.on_line_settings(*self.line_settings[-1])
        return None


def _parse_submit(w: List[str]) -> Urb:
    setup = Setup.parse(bytes.fromhex(w[5])) if w[5] != "-" else None
    data = bytes.fromhex(w[6]) if w[6] != "-" else None
    return Urb(int(w[1]), int(w[2], 16), w[3], int(w[4]), setup, data, tuple(int(x) for x in w[7:]))


def _complete_line(urb: Urb, status: int, data: bytes, packets: Sequence[Tuple[int, int]]) -> str:
    if urb.type == "Z":
        words = ["complete", str(urb.id), "0", str(sum(n for _, n in packets)),
                 data.hex() if urb.is_in and data else "-"]
        words += ["%d:%d" % p for p in packets]
        return " ".join(words)
    if status != 0:
        return "complete %d %d 0" % (urb.id, status)
    if urb.is_in:
        return ("complete %d 0 %d %s" % (urb.id, len(data), data.hex())).rstrip()
    return "complete %d 0 %d" % (urb.id, urb.length)


def serve(device: Device, read_fd: int, write: Callable[[bytes], None],
          stop: Optional[threading.Event] = None) -> None:
    """Serve one connection of the protocol: lines from ``read_fd``, answers
    through ``write``, until the input ends (the device was unplugged or
    monfs stopped) or ``stop`` is set. A handler's exception other than
    :class:`UrbError` propagates."""
    pending: Dict[int, Urb] = {}
    buf = b""
    while stop is None or not stop.is_set():
        # A URB is answered only after the earlier ones of its endpoint, in
        # the order an HCD's queue completes them (monfs holds an answer to
        # a later one until the earlier one's comes).
        waiting = set()
        for uid in list(pending):
            urb = pending.get(uid)
            if urb is None or urb.ep in waiting:
                continue
            got = device.answer(urb)
            if got is None:
                waiting.add(urb.ep)
            else:
                del pending[uid]
                write((_complete_line(urb, *got) + "\n").encode())
        r, _, _ = select.select([read_fd], [], [], device.poll_interval if pending else 0.05)
        if not r:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            return
        buf += chunk
        while b"\n" in buf:
            raw, buf = buf.split(b"\n", 1)
            w = raw.decode("ascii").split(" ")
            if w[0] == "hello":
                device.plugged = (int(w[2]), w[3], w[4])
                device.on_hello(int(w[2]), w[3], w[4])
            elif w[0] == "unlink":
                pending.pop(int(w[1]), None)
                device.on_unlink(int(w[1]), int(w[2]))
            elif w[0] == "submit":
                urb = _parse_submit(w)
                if any(p.ep == urb.ep for p in pending.values()):
                    pending[urb.id] = urb
                    continue
                got = device.answer(urb)
                if got is None:
                    pending[urb.id] = urb
                else:
                    write((_complete_line(urb, *got) + "\n").encode())


def _as_device(device: Union[Device, Callable[[], Device]]) -> Device:
    return device if isinstance(device, Device) else device()


def main(device: Union[Device, Callable[[], Device]], argv: Optional[Sequence[str]] = None) -> None:
    """Run a ``command:`` peer: serve ``device`` (an instance, or a class to
    instantiate) on standard input and output, or with ``--socket PATH`` on
    the one connection monfs makes to PATH. A handler's exception prints its
    traceback to standard error (the daemon's log) and exits 1, which monfs
    answers by unplugging the device."""
    args = list(sys.argv[1:] if argv is None else argv)
    dev = _as_device(device)
    try:
        if args[:1] == ["--socket"]:
            path = args[1]
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
                listener.bind(path)
                listener.listen(1)
                conn, _ = listener.accept()
            with conn:
                serve(dev, conn.fileno(), conn.sendall)
        else:
            out = sys.stdout.fileno()

            def write(b: bytes) -> None:
                while b:
                    b = b[os.write(out, b):]
            serve(dev, sys.stdin.fileno(), write)
    except Exception:
        sys.stderr.write("monfs peer %s failed:\n%s" % (type(dev).__name__, traceback.format_exc()))
        sys.stderr.flush()
        sys.exit(1)


class SocketPeer:
    """A device served from this process on a Unix socket (``socket: PATH``
    in the configuration), each plug a new connection.

    Give it to :class:`monfs.Mount` (``peers=[p]``), which starts it before
    the daemon, stops it after, and raises :class:`monfs.PeerError` (with the
    handler's traceback and the daemon's log) from its waits when a handler
    raised. ``path`` defaults to a fresh temporary directory's ``peer.sock``.
    """

    def __init__(self, device: Union[Device, Callable[[], Device]], path: Optional[str] = None) -> None:
        self.device = _as_device(device)
        self.name = type(self.device).__name__
        self._dir: Optional[str] = None
        if path is None:
            self._dir = tempfile.mkdtemp(prefix="monfs-py-peer-")
            os.chmod(self._dir, 0o755)
            path = os.path.join(self._dir, "peer.sock")
        self.path = path
        #: The traceback of the first handler exception, if any.
        self.error: Optional[str] = None
        #: How many connections (plugs) were served.
        self.connections = 0
        self._stop = threading.Event()
        self._listener: Optional[socket.socket] = None
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "SocketPeer":
        """Listen and serve from a thread. Idempotent."""
        if self._thread is not None:
            return self
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        os.chmod(self.path, 0o666)
        self._listener.listen(4)
        self._listener.settimeout(0.1)
        self._thread = threading.Thread(target=self._run, name="monfs-peer-" + self.name, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            self.connections += 1
            conn.settimeout(None)
            with conn:
                try:
                    serve(self.device, conn.fileno(), conn.sendall, self._stop)
                except Exception:
                    if self.error is None:
                        self.error = traceback.format_exc()
                except BaseException:  # pragma: no cover - interpreter exit
                    return

    def close(self) -> None:
        """Stop serving and remove the socket (and its directory)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self._listener is not None:
            self._listener.close()
        try:
            os.unlink(self.path)
        except OSError:
            pass
        if self._dir is not None:
            try:
                os.rmdir(self._dir)
            except OSError:
                pass

    def __enter__(self) -> "SocketPeer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _cli(argv: Sequence[str]) -> None:
    """``python3 -m monfs.peer MODULE:CLASS [--socket PATH]``: serve a Device
    class from an importable module (the current directory is searched)."""
    import importlib

    from monfs import peer as this  # the module's one copy, not __main__
    if not argv or ":" not in argv[0]:
        sys.exit("usage: python3 -m monfs.peer MODULE:CLASS [--socket PATH]")
    module, _, name = argv[0].partition(":")
    sys.path.insert(0, os.getcwd())
    cls = getattr(importlib.import_module(module), name)
    this.main(cls, list(argv[1:]))


if __name__ == "__main__":
    _cli(sys.argv[1:])
