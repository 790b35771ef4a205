"""tracefs records: ``trace_pipe`` (and ``trace``) lines parsed into fields.

A line of the kernel's default output (``kernel/trace/trace_output.c``)::

    monfs-12156   [001] ..... 12343.729834: tick: count=3 msg=hi

becomes a :class:`TraceRecord` with ``comm``, ``pid``, ``cpu``, ``flags``,
``timestamp``, ``event`` and ``fields`` (``{"count": "3", "msg": "hi"}``).
:class:`TracePipe` reads them from a mount with deadlines.
"""

import os
import re
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union

from ._stream import Stream

__all__ = ["TraceRecord", "parse_trace_line", "parse_fields", "TracePipe"]

_LINE = re.compile(
    r"^\s*(?P<comm>.*?)-(?P<pid>\d+)\s+(?:\(\s*(?P<tgid>[-\d]+)\)\s+)?\[(?P<cpu>\d+)\]\s+"
    r"(?:(?P<flags>[^\s]{4,5})\s+)?(?P<ts>\d+(?:\.\d+)?):\s+(?P<event>[^:\s]+):\s?(?P<body>.*)$"
)
_KEY = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_.\[\]]*)=")
_HEXDEC = re.compile(r"^0x[0-9a-fA-F]+ \((-?\d+)\)$")


def parse_fields(body: str) -> Dict[str, str]:
    """``key=value`` pairs of an event's text, a value running up to the next
    `` key=``. Values stay text; :meth:`TraceRecord.int` converts."""
    keys = list(_KEY.finditer(body))
    out: Dict[str, str] = {}
    for k, m in enumerate(keys):
        end = keys[k + 1].start() if k + 1 < len(keys) else len(body)
        out[m.group(1)] = body[m.end() : end].strip()
    return out


@dataclass(frozen=True)
class TraceRecord:
    """One trace line: the task (``comm``, ``pid``), ``cpu``, the latency
    ``flags`` (``.....``), ``timestamp`` in seconds, the ``event`` name (as
    the kernel prints it: without its system), the event's text (``body``)
    and its ``key=value`` fields."""

    comm: str
    pid: int
    cpu: int
    flags: str
    timestamp: float
    event: str
    body: str
    fields: Dict[str, str] = field(compare=False)
    line: str = field(default="", compare=False, repr=False)

    def int(self, name: str) -> int:
        """Field ``name`` as a number: decimal, ``0x`` hex, or the
        ``0x1 (1)`` form a 6.4+ kernel prints for user_events."""
        v = self.fields[name]
        m = _HEXDEC.match(v)
        if m:
            return int(m.group(1))
        return int(v, 0)

    def __getitem__(self, name: str) -> str:
        return self.fields[name]

    def __str__(self) -> str:
        return self.line or repr(self)


def parse_trace_line(line: str) -> Optional[TraceRecord]:
    """Parse one line of ``trace_pipe`` or ``trace``; None for a comment
    (``#``) or a line that is not an event (a ``CPU:N [LOST N EVENTS]``
    notice)."""
    line = line.rstrip("\n")
    if not line.strip() or line.lstrip().startswith("#"):
        return None
    m = _LINE.match(line)
    if m is None:
        return None
    body = m.group("body")
    return TraceRecord(m.group("comm"), int(m.group("pid")), int(m.group("cpu")), m.group("flags") or "",
                       float(m.group("ts")), m.group("event"), body, parse_fields(body), line)


class TracePipe(Stream[TraceRecord]):
    """Records of a ``trace_pipe`` (consumed as read, as in the kernel)."""

    def __init__(self, path: Union[str, os.PathLike], check: Optional[Callable[[], None]] = None) -> None:
        super().__init__(check)
        self.path = os.fspath(path)
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        self._buf = b""

    def _read_some(self) -> List[TraceRecord]:
        try:
            chunk = os.read(self._fd, 65536)
        except BlockingIOError:
            chunk = b""
        self._buf += chunk
        out: List[TraceRecord] = []
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            rec = parse_trace_line(line.decode("utf-8", "replace"))
            if rec is not None:
                out.append(rec)
        return out

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
