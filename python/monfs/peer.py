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
    #: The line status byte of data packets (a chip's: THRE and TEMT;
    #: qemu's usb-serial sends 0).
    line_status: int = 0x60

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

    def on_flow(self, kind: str) -> None:
        """The host set the flow control (as in :attr:`flow`)."""

    def on_reset(self) -> None:
        """The host reset the port (ftdi_sio does at each first open)."""

    # The device --------------------------------------------------------------

    def _status(self) -> bytes:
        return bytes([0x01 | self._modem, self.line_status])

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
                    pkt = bytes([0x01 | self._modem, self.line_status | item[0]]) + item[1][: self._mps - 2]
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
                return bytes([0x01 | self._modem, 0x60])
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
        if rt == 0x40 and req == 0:
            self.on_reset()
        elif rt == 0x40 and req == 1:
            self.on_control_lines(*self.control_lines[-1])
        elif rt == 0x40 and req == 2:
            self.on_flow(self.flow[-1])
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
    :class:`UrbError` propagates.

    As a host controller offers a device only the first URB of each
    endpoint's queue, only the oldest pending URB of an endpoint is asked
    (isochronous URBs, scheduled by frame, each): a later one cannot take
    data an earlier one is still waiting for."""
    pending: Dict[int, Urb] = {}
    buf = b""

    def blocked(urb: Urb, asked: set) -> bool:
        """Whether an older URB of ``urb``'s endpoint waits (or was asked in
        this pass)."""
        return urb.type != "Z" and (urb.type, urb.ep) in asked

    while stop is None or not stop.is_set():
        asked: set = set()
        for uid in list(pending):
            urb = pending.get(uid)
            if urb is None or blocked(urb, asked):
                continue
            got = device.answer(urb)
            if got is not None:
                del pending[uid]
                write((_complete_line(urb, *got) + "\n").encode())
            else:
                asked.add((urb.type, urb.ep))
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
                waiting = {(u.type, u.ep) for u in pending.values()}
                got = None if blocked(urb, waiting) else device.answer(urb)
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


class Cp210xPort:
    """What a :class:`Cp210xDevice` port (one interface) was told and keeps:

    * ``enabled``: the UART as IFC_ENABLE left it;
    * ``baud_rates``: each SET_BAUDRATE's rate (and SET_BAUDDIV's);
    * ``line_settings``: each SET_LINE_CTL as ``(bits, parity, stop)``
      (parity 0 none, 1 odd, 2 even, 3 mark, 4 space; stop 0 one, 1 one
      and a half, 2 two);
    * ``control_lines``: each SET_MHS as ``(dtr, rts)``, None for a line
      it left alone;
    * ``flows``: each SET_FLOW as ``(control_handshake, flow_replace,
      xon_limit, xoff_limit)`` (``flow`` is the current one, which GET_FLOW
      answers); ``chars``: each SET_CHARS's six characters;
    * ``breaks``: each SET_BREAK (True on); ``purges``: each PURGE's mask;
      ``events``: each EMBED_EVENTS's escape character (0: off);
    * ``received``: the bytes the host wrote."""

    def __init__(self, interface: int, flow: Tuple[int, int, int, int]) -> None:
        self.interface = interface
        self.enabled = False
        self.baud_rates: List[int] = []
        self.line_settings: List[Tuple[int, int, int]] = []
        self.control_lines: List[Tuple[Optional[bool], Optional[bool]]] = []
        self.flows: List[Tuple[int, int, int, int]] = []
        self.flow = flow
        self.chars: List[bytes] = []
        self.breaks: List[bool] = []
        self.purges: List[int] = []
        self.events: List[int] = []
        self.received = bytearray()
        self.baud = 9600
        self.line = 0x0800
        self.dtr = False
        self.rts = False
        self.modem = 0
        self.escape = 0
        self.out: Deque[bytes] = deque()

    def mdmsts(self) -> int:
        """GET_MDMSTS's byte: DTR and RTS as set, then CTS, DSR, RI, DCD."""
        return (1 if self.dtr else 0) | (2 if self.rts else 0) | self.modem


class Cp210xDevice(Device):
    """A Silicon Labs CP210x USB to UART bridge (cp210x's ``/dev/ttyUSBN``
    on the host side), laid out as :func:`monfs.descriptors.cp210x` lays it
    out; set :attr:`part` to the same part. Its interfaces are its ports
    (:attr:`ports`, one :class:`Cp210xPort` each; :attr:`baud_rates`,
    :attr:`line_settings`, :attr:`control_lines`, :attr:`flows`,
    :attr:`breaks` and :attr:`received` are the first one's):

    * the vendor requests of cp210x's probe are answered as the part
      answers them: GET_PARTNUM (with :attr:`counterfeit`, the two-byte
      request gets one byte, as the CP2102 clones that lack event insertion
      answer), the firmware version (:attr:`fw_version`), the port and
      device configuration (zeros: no GPIO functions) and the CP2102N's
      configuration array;
    * the interface requests are recorded (see :class:`Cp210xPort`) and the
      hooks :meth:`on_baud_rate`, :meth:`on_line_settings` and
      :meth:`on_control_lines` called; GET_MDMSTS, GET_FLOW, GET_CHARS,
      GET_LINE_CTL, GET_BAUDRATE and GET_COMM_STATUS (an empty transmit
      queue) are answered;
    * bytes the host writes call :meth:`on_data` (default: kept in the
      port's ``received``); :meth:`write` queues bytes for the host's
      reads (with the escape character doubled as ``ESC 0`` while the host
      has event insertion on), :meth:`set_modem_lines` sets CTS, DSR, RI
      and DCD (read by GET_MDMSTS: the chip sends no notification), and
      :meth:`line_error` sends a line status event while event insertion is
      on;
    * an IN endpoint NAKs while there is nothing to send."""

    part: str = "CP2102"
    counterfeit: bool = False
    fw_version: Tuple[int, int, int] = (1, 0, 8)
    #: GET_FLOW's answer before the host set one: DTR and RTS active, no
    #: handshaking, limits 0.
    initial_flow: Tuple[int, int, int, int] = (0x01, 0x40, 0, 0)

    def __init__(self) -> None:
        super().__init__()
        _pid, ports, _usb, self.partnum, _name = _d.CP210X_PARTS[self.part]
        self.ports: List[Cp210xPort] = [Cp210xPort(n, self.initial_flow) for n in range(ports)]
        for n in range(ports):
            self.set_modem_lines(interface=n)
            self._endpoints.setdefault(0x01 + n, lambda data, n=n: self.on_data(bytes(data), n))
            self._endpoints.setdefault(0x81 + n, lambda length, n=n: self._give(n, length))

    # The first port's records ----------------------------------------------

    @property
    def baud_rates(self) -> List[int]:
        """The first port's SET_BAUDRATE rates."""
        return self.ports[0].baud_rates

    @property
    def line_settings(self) -> List[Tuple[int, int, int]]:
        """The first port's SET_LINE_CTL settings."""
        return self.ports[0].line_settings

    @property
    def control_lines(self) -> List[Tuple[Optional[bool], Optional[bool]]]:
        """The first port's SET_MHS changes."""
        return self.ports[0].control_lines

    @property
    def flows(self) -> List[Tuple[int, int, int, int]]:
        """The first port's SET_FLOW structs."""
        return self.ports[0].flows

    @property
    def breaks(self) -> List[bool]:
        """The first port's SET_BREAKs."""
        return self.ports[0].breaks

    @property
    def received(self) -> bytearray:
        """What the host wrote to the first port."""
        return self.ports[0].received

    # The host side's view --------------------------------------------------

    def write(self, data: bytes, interface: int = 0) -> None:
        """Queue ``data`` for the host's reads of port ``interface``
        (thread-safe)."""
        p = self.ports[interface]
        with self._lock:
            data = bytes(data)
            if p.escape:
                data = data.replace(bytes([p.escape]), bytes([p.escape, 0]))
            p.out.append(data)

    def queued(self, interface: int = 0) -> int:
        """How many bytes :meth:`write` queued for port ``interface`` wait
        for the host's reads."""
        with self._lock:
            return sum(len(x) for x in self.ports[interface].out)

    def set_modem_lines(self, cts: bool = True, dsr: bool = True, ri: bool = False, dcd: bool = False,
                        interface: int = 0) -> None:
        """Set the modem status lines of port ``interface``, which GET_MDMSTS
        reads."""
        with self._lock:
            self.ports[interface].modem = (0x10 if cts else 0) | (0x20 if dsr else 0) | \
                (0x40 if ri else 0) | (0x80 if dcd else 0)

    def line_error(self, data: Optional[bytes] = b"\0", *, brk: bool = False, parity: bool = False,
                   framing: bool = False, overrun: bool = False, interface: int = 0) -> None:
        """Send a line status event (with event insertion on): ``data``'s
        first byte with its status (``ESC 1 LSR DATA``), or the status alone
        (``ESC 2 LSR``) for ``data`` None; without event insertion, just
        ``data``."""
        lsr = (0x10 if brk else 0) | (0x04 if parity else 0) | (0x08 if framing else 0) | (0x02 if overrun else 0)
        p = self.ports[interface]
        with self._lock:
            if not p.escape:
                p.out.append(bytes(data or b""))
            elif data:
                p.out.append(bytes([p.escape, 1, lsr, data[0]]))
            else:
                p.out.append(bytes([p.escape, 2, lsr]))

    def on_data(self, data: bytes, interface: int = 0) -> None:
        """Bytes the host wrote to port ``interface``; kept in its
        ``received``."""
        with self._lock:
            self.ports[interface].received += data

    def on_baud_rate(self, baud: int, interface: int = 0) -> None:
        """The host set the rate of port ``interface``."""

    def on_line_settings(self, bits: int, parity: int, stop: int, interface: int = 0) -> None:
        """The host set data bits, parity and stop bits of port
        ``interface``."""

    def on_control_lines(self, dtr: Optional[bool], rts: Optional[bool], interface: int = 0) -> None:
        """The host set DTR and RTS of port ``interface`` (None: left as it
        was)."""

    # The device --------------------------------------------------------------

    def _give(self, n: int, length: int) -> Optional[bytes]:
        p = self.ports[n]
        with self._lock:
            if not p.out:
                return None
            out = b""
            while p.out and len(out) < length:
                room = length - len(out)
                item = p.out.popleft()
                out += item[:room]
                if len(item) > room:
                    p.out.appendleft(item[room:])
            return out

    def _vendor(self, setup: Setup) -> bytes:
        v, n = setup.value, setup.length
        if v == 0x370B:  # GET_PARTNUM
            return bytes([self.partnum]) if self.counterfeit or n == 1 else bytes([self.partnum, 0])
        if v == 0x000E and self.part == "CP2102N":  # READ_2NCONFIG: version 1, no GPIO functions
            cfg = bytearray(0x02A6)
            cfg[2] = 0x01
            return bytes(cfg)
        if v in (0x000E, 0x0010):  # GET_FW_VER, GET_FW_VER_2N
            return bytes(self.fw_version)
        if v in (0x370C, 0x3711, 0x00C2):  # GET_PORTCONFIG, GET_DEVICEMODE, READ_LATCH
            return bytes(n)
        raise Stall()

    def answer_control(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        rt, req, v = setup.request_type, setup.request, setup.value
        if (rt, req) in self._controls or rt not in (0x41, 0xC1, 0xC0, 0x40):
            return super().answer_control(setup, data)
        if rt == 0xC0 and req == 0xFF:
            return self._vendor(setup)
        if rt == 0x40 and req == 0xFF:  # WRITE_LATCH
            return None
        if rt in (0xC0, 0x40) or setup.index >= len(self.ports):
            raise Stall()
        n = setup.index
        p = self.ports[n]
        body = bytes(data or b"")
        hook: Optional[Callable[[], None]] = None
        with self._lock:
            if rt == 0x41 and req == 0x00:  # IFC_ENABLE
                p.enabled = bool(v & 1)
                if not p.enabled:
                    p.escape = 0
            elif rt == 0x41 and req in (0x01, 0x1E):  # SET_BAUDDIV, SET_BAUDRATE
                p.baud = 3686400 // max(v, 1) if req == 0x01 else int.from_bytes(body[:4], "little")
                p.baud_rates.append(p.baud)
                baud = p.baud
                hook = lambda: self.on_baud_rate(baud, n)  # noqa: E731
            elif rt == 0x41 and req == 0x03:  # SET_LINE_CTL
                p.line = v
                setting = ((v >> 8) & 0xF, (v >> 4) & 0xF, v & 0xF)
                p.line_settings.append(setting)
                hook = lambda: self.on_line_settings(*setting, interface=n)  # noqa: E731
            elif rt == 0x41 and req == 0x05:  # SET_BREAK
                p.breaks.append(bool(v & 1))
            elif rt == 0x41 and req == 0x07:  # SET_MHS
                dtr = bool(v & 1) if v & 0x100 else None
                rts = bool(v & 2) if v & 0x200 else None
                if dtr is not None:
                    p.dtr = dtr
                if rts is not None:
                    p.rts = rts
                p.control_lines.append((dtr, rts))
                hook = lambda: self.on_control_lines(dtr, rts, n)  # noqa: E731
            elif rt == 0x41 and req in (0x06, 0x09, 0x0A, 0x0B, 0x0D, 0x11):  # IMM_CHAR, XON, XOFF, EVENTMASK, CHAR, RESET
                pass
            elif rt == 0x41 and req == 0x12:  # PURGE
                p.purges.append(v)
            elif rt == 0x41 and req == 0x13:  # SET_FLOW
                f = tuple(int.from_bytes(body[i:i + 4], "little") for i in range(0, 16, 4))
                p.flow = f  # type: ignore[assignment]
                p.flows.append(p.flow)
                # The lines follow the flow control struct's DTR and RTS.
                p.dtr = p.flow[0] & 3 == 1
                p.rts = (p.flow[1] >> 6) & 3 in (1, 2)
            elif rt == 0x41 and req == 0x15:  # EMBED_EVENTS
                p.escape = v & 0xFF
                p.events.append(p.escape)
            elif rt == 0x41 and req == 0x19:  # SET_CHARS
                p.chars.append(body[:6])
            elif rt == 0xC1 and req == 0x02:  # GET_BAUDDIV
                return (3686400 // max(p.baud, 1)).to_bytes(2, "little")
            elif rt == 0xC1 and req == 0x04:  # GET_LINE_CTL
                return p.line.to_bytes(2, "little")
            elif rt == 0xC1 and req == 0x08:  # GET_MDMSTS
                return bytes([p.mdmsts()])
            elif rt == 0xC1 and req == 0x0E:  # GET_CHARS
                return p.chars[-1] if p.chars else bytes([0, 0, 0, 0, 0x11, 0x13])
            elif rt == 0xC1 and req == 0x10:  # GET_COMM_STATUS: nothing queued
                return bytes(0x13)
            elif rt == 0xC1 and req == 0x14:  # GET_FLOW
                return b"".join(x.to_bytes(4, "little") for x in p.flow)
            elif rt == 0xC1 and req == 0x16:  # GET_EVENTSTATE
                return bytes(setup.length)
            elif rt == 0xC1 and req == 0x1D:  # GET_BAUDRATE
                return p.baud.to_bytes(4, "little")
            else:
                raise Stall()
        if hook is not None:
            hook()
        return None


def _ch341_rate(value: int) -> int:
    """The rate ch341's prescaler and divisor register pair gives."""
    ps, fact, div = value & 3, (value >> 2) & 1, 0x100 - (value >> 8)
    return round(48_000_000 / ((1 << (12 - 3 * ps - fact)) * div))


class Ch341Device(Device):
    """A WCH CH340 or CH341 USB serial adapter (ch341's ``/dev/ttyUSBN`` on
    the host side), laid out as :func:`monfs.descriptors.ch341` lays it out
    (bulk IN 0x82, bulk OUT 0x02, interrupt IN 0x81):

    * its registers are a register file: WRITE_REG sets the two its value
      names (low byte first), READ_REG reads them back; READ_VERSION answers
      :attr:`version`, and register 6 reads the modem status inverted;
    * what the host sets is recorded: each prescaler and divisor pair as the
      rate it gives (:attr:`baud_rates`, the raw pairs in :attr:`divisors`),
      each line control register (:attr:`lcrs`, and as ``(bits, parity,
      stop)`` in :attr:`line_settings`: parity 0 none, 1 odd, 2 even, 3
      mark, 4 space; stop 0 one, 2 two), each MODEM_CTRL as ``(dtr, rts)``
      (:attr:`control_lines`), each break register write (:attr:`breaks`,
      True on), each SERIAL_INIT (:attr:`inits`); the hooks
      :meth:`on_baud_rate`, :meth:`on_line_settings` and
      :meth:`on_control_lines` are called;
    * with :attr:`limited`, READ_REG of the break register stalls, as on
      the chips without a break (ch341 then simulates one: 46 baud and a
      NUL);
    * bytes the host writes call :meth:`on_data` (default: kept in
      :attr:`received`); :meth:`write` queues bytes for the host's reads;
      :meth:`set_modem_lines` sets CTS, DSR, RI and DCD and sends the
      interrupt packet that tells the host;
    * an IN endpoint NAKs while there is nothing to send."""

    chip: str = "CH340"
    version: int = 0x31
    limited: bool = False
    in_endpoint: int = 0x82
    out_endpoint: int = 0x02
    interrupt_endpoint: int = 0x81

    def __init__(self) -> None:
        super().__init__()
        self.baud_rates: List[int] = []
        self.divisors: List[int] = []
        self.lcrs: List[int] = []
        self.line_settings: List[Tuple[int, int, int]] = []
        self.control_lines: List[Tuple[bool, bool]] = []
        self.breaks: List[bool] = []
        self.inits = 0
        self.received = bytearray()
        self.registers: Dict[int, int] = {0x05: 0x01, 0x07: 0x00, 0x18: 0xC3, 0x25: 0x00}
        self._msr = 0
        self._out: Deque[bytes] = deque()
        self.set_modem_lines(notify=False)
        self._endpoints.setdefault(self.out_endpoint, lambda data: self.on_data(bytes(data)))
        self._endpoints.setdefault(self.in_endpoint, self._give)

    def write(self, data: bytes) -> None:
        """Queue ``data`` for the host's reads (thread-safe), sent as the
        read URBs take it."""
        with self._lock:
            self._out.append(bytes(data))

    def queued(self) -> int:
        """How many bytes :meth:`write` queued wait for the host's reads."""
        with self._lock:
            return sum(len(x) for x in self._out)

    def _give(self, length: int) -> Optional[bytes]:
        with self._lock:
            if not self._out:
                return None
            out = b""
            while self._out and len(out) < length:
                item = self._out.popleft()
                room = length - len(out)
                out += item[:room]
                if len(item) > room:
                    self._out.appendleft(item[room:])
            return out

    def set_modem_lines(self, cts: bool = True, dsr: bool = True, ri: bool = False, dcd: bool = False,
                        notify: bool = True) -> None:
        """Set the modem status lines; with ``notify`` an interrupt packet
        tells the host (its third byte the lines inverted)."""
        with self._lock:
            self._msr = (1 if cts else 0) | (2 if dsr else 0) | (4 if ri else 0) | (8 if dcd else 0)
            self.registers[0x06] = ~self._msr & 0xFF
        if notify:
            self.send(self.interrupt_endpoint, bytes([0x08, 0x7D, 0x90 | (~self._msr & 0x0F), 0xEE]))

    def on_data(self, data: bytes) -> None:
        """Bytes the host wrote; kept in :attr:`received`."""
        with self._lock:
            self.received += data

    def on_baud_rate(self, baud: int) -> None:
        """The host set the rate (what the divisor gives)."""

    def on_line_settings(self, bits: int, parity: int, stop: int) -> None:
        """The host set the line control register."""

    def on_control_lines(self, dtr: bool, rts: bool) -> None:
        """The host set DTR and RTS."""

    def answer_control(self, setup: Setup, data: Optional[bytes]) -> Optional[bytes]:
        rt, req, v, i = setup.request_type, setup.request, setup.value, setup.index
        if (rt, req) in self._controls or rt not in (0x40, 0xC0):
            return super().answer_control(setup, data)
        lo, hi = v & 0xFF, v >> 8
        hook: Optional[Callable[[], None]] = None
        with self._lock:
            if rt == 0xC0 and req == 0x5F:  # READ_VERSION
                return bytes([self.version, 0])
            if rt == 0x40 and req == 0xA1:  # SERIAL_INIT
                self.inits += 1
            elif rt == 0xC0 and req == 0x95:  # READ_REG
                if self.limited and 0x05 in (lo, hi):
                    raise Stall()
                return bytes([self.registers.get(lo, 0), self.registers.get(hi, 0)])
            elif rt == 0x40 and req == 0x9A:  # WRITE_REG
                self.registers[lo] = i & 0xFF
                self.registers[hi] = i >> 8
                if (lo, hi) == (0x12, 0x13):
                    pair = self.registers[0x13] << 8 | self.registers[0x12]
                    self.divisors.append(pair)
                    baud = _ch341_rate(pair)
                    self.baud_rates.append(baud)
                    hook = lambda: self.on_baud_rate(baud)  # noqa: E731
                elif (lo, hi) == (0x18, 0x25):
                    lcr = self.registers[0x18]
                    self.lcrs.append(lcr)
                    parity = 0
                    if lcr & 0x08:
                        parity = {0x00: 1, 0x10: 2, 0x20: 3, 0x30: 4}[lcr & 0x30]
                    setting = (5 + (lcr & 3), parity, 2 if lcr & 0x04 else 0)
                    self.line_settings.append(setting)
                    hook = lambda: self.on_line_settings(*setting)  # noqa: E731
                elif (lo, hi) == (0x05, 0x18):
                    self.breaks.append(not self.registers[0x05] & 0x01)
            elif rt == 0x40 and req == 0xA4:  # MODEM_CTRL, inverted
                mcr = ~v & 0xFF
                lines = (bool(mcr & 0x20), bool(mcr & 0x40))
                self.control_lines.append(lines)
                hook = lambda: self.on_control_lines(*lines)  # noqa: E731
            else:
                raise Stall()
        if hook is not None:
            hook()
        return None


__all__ += ["Cp210xPort", "Cp210xDevice", "Ch341Device"]


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
