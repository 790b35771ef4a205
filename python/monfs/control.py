"""Typed control of a running daemon, over its control socket.

The socket speaks one command line in, one answer out (``ok ...`` or
``error: ...``; ``src/control.rs``). :class:`Control` builds the lines, so a
caller never quotes or joins words, and turns ``error:`` into
:class:`monfs.CommandError` carrying monfs's own message. Files that monfs
must read with the caller's rights (``replay start``, ``plug ...
from-capture``) are opened here and passed with the command (SCM_RIGHTS), as
``monfs ctl`` does.
"""

import os
import socket
from typing import Iterable, Optional, Sequence, Union

from .errors import CommandError, MonfsError

__all__ = ["Control", "Ports", "format_ports", "FAULTS", "ZVM_FAULTS"]

#: What ``fault`` takes: the device's next data transfer ends that way
#: (``disconnect`` unplugs it mid-transfer).
FAULTS = ("stall", "babble", "unlink", "submit-error", "proto", "disconnect")

#: What ``zvm`` takes (needs a reader of ``dev/monreader``).
ZVM_FAULTS = ("sever", "reply-fail", "overflow")

#: A port path: a root port (``3``), a path through hubs (``"4.1"`` or
#: ``(4, 1)``).
Ports = Union[int, str, Sequence[int]]

PathLike = Union[str, os.PathLike]


def format_ports(ports: Ports) -> str:
    """``3``, ``"4.1"`` or ``(4, 1)`` as the command's PORTS word."""
    if isinstance(ports, int):
        return str(ports)
    if isinstance(ports, str):
        return ports
    return ".".join(str(int(p)) for p in ports)


def _word(value: object) -> str:
    """One command word; a value with spaces goes in double quotes."""
    if isinstance(value, bool):
        value = int(value)
    s = os.fspath(value) if isinstance(value, os.PathLike) else str(value)
    if '"' in s or "\n" in s:
        raise ValueError("a control command word cannot hold a double quote or a newline: %r" % s)
    if s == "" or any(c.isspace() for c in s):
        return '"%s"' % s
    return s


def _settings(settings: dict) -> list:
    return ["%s=%s" % (k, _word(v)) for k, v in settings.items() if v is not None]


def _field(value: object) -> str:
    """A trace field's value as ``inject`` takes it: strings in double quotes."""
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    s = str(value)
    if '"' in s or "\n" in s:
        raise ValueError("a trace field cannot hold a double quote or a newline: %r" % s)
    return '"%s"' % s


class Control:
    """Commands to the daemon listening on ``socket_path``.

    Each method sends one command and returns monfs's answer (the text after
    ``ok``), or raises :class:`monfs.CommandError` with monfs's reason.
    """

    def __init__(self, socket_path: PathLike, timeout: float = 30.0) -> None:
        self.socket_path = os.fspath(socket_path)
        self.timeout = timeout

    @classmethod
    def from_env(cls) -> "Control":
        """The control of the mount a command runs in under ``monfs run``
        (``$MONFS_SOCKET``)."""
        path = os.environ.get("MONFS_SOCKET")
        if not path:
            raise MonfsError("MONFS_SOCKET is not set: not running under `monfs run`")
        return cls(path)

    def command(self, line: str, file: Optional[PathLike] = None) -> str:
        """Send one raw command line (``file``, if given, is opened for
        reading and passed with it); the answer after ``ok``."""
        fd = os.open(os.fspath(file), os.O_RDONLY | os.O_CLOEXEC) if file is not None else None
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout)
                try:
                    s.connect(self.socket_path)
                except OSError as e:
                    raise MonfsError("cannot reach the control socket %s: %s" % (self.socket_path, e)) from e
                data = (line + "\n").encode()
                if fd is not None:
                    sent = socket.send_fds(s, [data], [fd])
                    data = data[sent:]
                s.sendall(data)
                s.shutdown(socket.SHUT_WR)
                chunks = []
                while True:
                    c = s.recv(65536)
                    if not c:
                        break
                    chunks.append(c)
        finally:
            if fd is not None:
                os.close(fd)
        answer = b"".join(chunks).decode("utf-8", "replace").rstrip("\n")
        if answer.startswith("ok"):
            return answer[2:].strip().replace("\n   ", "\n")
        if answer.startswith("error: "):
            raise CommandError(line, answer[len("error: "):])
        raise MonfsError("control socket %s answered %r to %r" % (self.socket_path, answer, line))

    def help(self) -> str:
        """The daemon's command list."""
        return self.command("help")

    def plug(self, bus: int, ports: Ports, kind: str, wait: bool = True,
             **settings: object) -> str:
        """Hot-plug a device of ``kind`` (``hub``, ``hid-keyboard``,
        ``hid-mouse``, ``hid-tablet``, ``mass-storage``, ``audio``,
        ``webcam``, ``flood``, ``descriptors``) at ``ports`` of ``bus``.
        ``settings`` are the device's (``vendor_id=0x1234``,
        ``product="Hot Stick"``, ``interval_ms=8``, ``transfer_size=512``,
        ``descriptors="/abs/dump"`` for kind ``descriptors``; the daemon
        reads that file itself, so give an absolute path). With ``wait``
        (the default) it returns once the device has enumerated and its
        drivers are bound (:meth:`wait`)."""
        desc = settings.get("descriptors")
        if isinstance(desc, (str, os.PathLike)):
            settings["descriptors"] = os.path.abspath(os.fspath(desc))
        words = ["plug", str(int(bus)), format_ports(ports), _word(kind)] + _settings(settings)
        answer = self.command(" ".join(words))
        if wait:
            self.wait(bus, ports, present=True)
        return answer

    def wait(self, bus: int, ports: Ports, present: bool = True, timeout: float = 30.0) -> str:
        """Return once a device at ``ports`` of ``bus`` has enumerated and
        had its drivers bound (``present``), or none is there; the daemon
        wakes on the bus's changes, nothing polls. :class:`CommandError`
        after ``timeout`` seconds."""
        return self.command("wait %d %s %s timeout_ms=%d" % (
            bus, format_ports(ports), "present" if present else "gone", int(timeout * 1000)))

    def settle(self, timeout: float = 30.0) -> str:
        """Return once no device on a running bus is coming or going:
        every plugged device enumerated with its drivers bound, every
        unplugged one gone (paused buses are not waited for). What
        ``monfs run`` waits for before it starts its command.
        :class:`CommandError` after ``timeout`` seconds."""
        return self.command("wait settled timeout_ms=%d" % int(timeout * 1000))

    def plug_from_capture(self, bus: int, ports: Ports, capture: PathLike, devaddr: int,
                          **settings: object) -> str:
        """Plug the device with address ``devaddr`` of a usbmon capture
        (pcap or pcapng); the file is opened here and passed to monfs."""
        words = ["plug", str(int(bus)), format_ports(ports), "from-capture", _word(capture),
                 str(int(devaddr))] + _settings(settings)
        return self.command(" ".join(words), file=capture)

    def unplug(self, bus: int, ports: Ports, wait: bool = True) -> str:
        """Unplug the device at ``ports`` (its in-flight URBs fail with -71);
        with ``wait`` (the default), return once it is gone."""
        answer = self.command("unplug %d %s" % (bus, format_ports(ports)))
        if wait:
            self.wait(bus, ports, present=False)
        return answer

    def fault(self, bus: int, ports: Ports, kind: str) -> str:
        """Make the device's next data transfer end with ``kind``, one of
        :data:`FAULTS`."""
        return self.command("fault %d %s %s" % (bus, format_ports(ports), _word(kind)))

    def stall(self, bus: int, ports: Ports) -> str:
        """``fault BUS PORTS stall``: the next data transfer completes -32."""
        return self.fault(bus, ports, "stall")

    def pause(self, bus: int) -> str:
        """Stop a bus's traffic (no events until :meth:`resume`)."""
        return self.command("pause %d" % bus)

    def resume(self, bus: int) -> str:
        """Restart a paused bus."""
        return self.command("resume %d" % bus)

    def zvm(self, fault: str) -> str:
        """A z/VM monitor fault, one of :data:`ZVM_FAULTS`."""
        return self.command("zvm " + _word(fault))

    def trace(self, event: str, **fields: object) -> str:
        """Record the configured event ``SYSTEM:EVENT`` with these field
        values (numbers as they are, strings quoted here)."""
        words = ["trace", _word(event)] + ["%s=%s" % (k, _field(v)) for k, v in fields.items()]
        return self.command(" ".join(words))

    def replay(self, bus: int, capture: PathLike, *, speed: Optional[float] = None,
               loop: bool = False, after_ms: Optional[int] = None) -> str:
        """``replay start``: play a capture on ``bus`` (the file is opened
        here, with this process's rights, and passed to monfs)."""
        words = ["replay", "start", str(int(bus)), _word(capture)]
        if speed is not None:
            words.append("speed=%s" % speed)
        if loop:
            words.append("loop")
        if after_ms is not None:
            words.append("after_ms=%d" % after_ms)
        return self.command(" ".join(words), file=capture)

    def replay_stop(self, bus: int) -> str:
        """Stop the replay on ``bus``."""
        return self.command("replay stop %d" % bus)

    def replay_status(self, bus: int) -> str:
        """Where the replay on ``bus`` stands, as monfs says it."""
        return self.command("replay status %d" % bus)

    def batch(self, lines: Iterable[str]) -> list:
        """Several raw commands, one answer each (stops at the first refusal)."""
        return [self.command(line) for line in lines]
