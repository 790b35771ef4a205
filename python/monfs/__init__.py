"""monfs from Python: mount it, steer it, read it, and play its devices.

monfs mounts a userspace replica of Linux's usbmon and tracefs over FUSE,
fed by simulated USB devices. This package drives it from a test suite:

* :class:`Mount` mounts a configuration (a dict, YAML text or a file) in a
  temporary directory, waits until it serves, and on leaving unmounts and
  reaps the daemon; errors carry the daemon's log.
* Control (:class:`Control`, or the same methods on a Mount): ``plug``,
  ``unplug``, ``fault``, ``pause``, ``resume``, ``replay``, ``trace`` ...
  A refused command raises :class:`CommandError` with monfs's reason.
* Readers that return objects: :class:`TextEvent` from ``usb/usbmon/Nu``
  (``Mount.usbmon_text``), :class:`BinaryEvent` through ``MON_IOCX_GETX``
  (``Mount.usbmon_binary``) or the mapped ring (``Mount.usbmon_mmap``),
  :class:`TraceRecord` from ``trace_pipe`` (``Mount.trace_pipe``), and
  :func:`read_pcap` for captures. ``expect``/``collect`` wait with a
  deadline and report what arrived instead (:class:`ExpectationFailed`).
* :func:`run` runs a command under ``monfs run``, where the kernel's paths
  are monfs's.
* :mod:`monfs.peer` writes an external device as a class;
  :mod:`monfs.descriptors` builds its descriptors; :mod:`monfs.hidraw`
  reads and writes hidraw nodes as HID programs do, :mod:`monfs.evdev`
  the input layer's ``/dev/input/eventN`` as input programs do, and
  :mod:`monfs.tty` finds and opens serial ports (``/dev/ttyACMN``).
* The pytest plugin (:mod:`monfs.pytest_plugin`, loaded automatically once
  installed) gives a ``monfs`` fixture: a fresh mount per test.

Standard library only; Python 3.9+. See docs/python.md in monfs's
repository.
"""

from ._mount import Config, Mount, find_binary, find_helper, is_mounted
from ._stream import HANG, Stream
from .control import FAULTS, ZVM_FAULTS, Control, format_ports
from .errors import (
    CommandError,
    DaemonDied,
    ExpectationFailed,
    MonfsError,
    MountError,
    PeerError,
)
from ._run import run
from .tracing import TracePipe, TraceRecord, parse_trace_line
from .usbmon import (
    BinaryEvent,
    BinaryReader,
    IsoDesc,
    MmapReader,
    TextEvent,
    TextReader,
    parse_text_line,
    read_pcap,
)

#: The package's version, which is monfs's (the crate's) version.
__version__ = "0.1.0"

__all__ = [
    "Mount", "Config", "find_binary", "find_helper", "is_mounted", "run", "HANG", "Stream",
    "Control", "FAULTS", "ZVM_FAULTS", "format_ports",
    "MonfsError", "MountError", "DaemonDied", "PeerError", "CommandError", "ExpectationFailed",
    "TextEvent", "IsoDesc", "TextReader", "parse_text_line", "BinaryEvent", "BinaryReader",
    "MmapReader", "read_pcap", "TraceRecord", "TracePipe", "parse_trace_line", "__version__",
]
