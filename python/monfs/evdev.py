"""evdev nodes (``/dev/input/eventN``) through their system calls, as an
input program (libinput, a game, ``evtest``) reaches them: events as
:class:`InputEvent` objects from ``read(2)``, written ones (LEDs, sounds)
with ``write(2)``, and the device's ids, strings, capabilities, state,
axes, key repeat, grab and revoke through the ``EVIOC*`` ioctls of
``linux/input.h`` (drivers/input/evdev.c answers them in the kernel).
Works on the kernel's nodes and on monfs's (inside ``monfs run``, or a
mount's ``dev/input/eventN``).

    with Evdev(find(vendor=0x0627, product=0x0001)[0]) as ev:
        print(ev.name(), ev.id(), ev.bits(EV_KEY) >= {KEY_A, KEY_ENTER})
        for frame in ev.frames(timeout=5):
            print([e.triple for e in frame])    # [(EV_KEY, KEY_A, 1)]

The constants are a small table of ``linux/input-event-codes.h`` (the
event types, the synchronization codes, the common keys, buttons, axes,
LEDs and properties), with the header's names and values.
"""

import ctypes
import fcntl
import os
import select
import struct
import time
from typing import Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Set, Tuple

__all__ = [
    "InputEvent", "InputId", "AbsInfo", "Evdev", "find", "EVENT_SIZE", "EV_VERSION",
    "type_name", "code_name", "bits_to_set", "set_to_bits",
    "EVIOCGVERSION", "EVIOCGID", "EVIOCGREP", "EVIOCSREP", "EVIOCGKEYCODE", "EVIOCSKEYCODE",
    "EVIOCGNAME", "EVIOCGPHYS", "EVIOCGUNIQ", "EVIOCGPROP", "EVIOCGMTSLOTS", "EVIOCGKEY", "EVIOCGLED",
    "EVIOCGSND", "EVIOCGSW", "EVIOCGBIT", "EVIOCGABS", "EVIOCSABS", "EVIOCRMFF", "EVIOCGEFFECTS",
    "EVIOCGRAB", "EVIOCREVOKE", "EVIOCGMASK", "EVIOCSMASK", "EVIOCSCLOCKID",
]

# --- ioctl numbers (linux/input.h), as asm-generic/ioctl.h builds them -----

_IOC_NONE, _IOC_WRITE, _IOC_READ = 0, 1, 2


def _ioc(direction: int, nr: int, size: int) -> int:
    if not 0 <= size < 1 << 14:
        raise ValueError("an ioctl's size is at most 16383 bytes")
    return (direction << 30) | (size << 16) | (ord("E") << 8) | nr


_INPUT_ID = struct.Struct("=HHHH")  # struct input_id
_ABSINFO = struct.Struct("=iiiiii")  # struct input_absinfo
_MASK = struct.Struct("=IIQ")  # struct input_mask: type, codes_size, codes_ptr
_EVENT = struct.Struct("=qqHHi")  # struct input_event, 64-bit: time (sec, usec), type, code, value

#: The size of one ``struct input_event`` (the 64-bit layout): a read
#: returns a multiple of it.
EVENT_SIZE = _EVENT.size

#: EVIOCGVERSION: get the driver's version (an int, :data:`EV_VERSION`).
EVIOCGVERSION = _ioc(_IOC_READ, 0x01, 4)
#: EVIOCGID: get the device's ``struct input_id``.
EVIOCGID = _ioc(_IOC_READ, 0x02, _INPUT_ID.size)
#: EVIOCGREP: get the key repeat's delay and period (``unsigned int[2]``).
EVIOCGREP = _ioc(_IOC_READ, 0x03, 8)
#: EVIOCSREP: set them.
EVIOCSREP = _ioc(_IOC_WRITE, 0x03, 8)
#: EVIOCGKEYCODE: get a scancode's keycode (``unsigned int[2]``).
EVIOCGKEYCODE = _ioc(_IOC_READ, 0x04, 8)
#: EVIOCSKEYCODE: set it.
EVIOCSKEYCODE = _ioc(_IOC_WRITE, 0x04, 8)
#: EVIOCRMFF: erase a force feedback effect.
EVIOCRMFF = _ioc(_IOC_WRITE, 0x81, 4)
#: EVIOCGEFFECTS: how many force feedback effects play at once.
EVIOCGEFFECTS = _ioc(_IOC_READ, 0x84, 4)
#: EVIOCGRAB: grab (1) or release (0) the device; the argument is the value.
EVIOCGRAB = _ioc(_IOC_WRITE, 0x90, 4)
#: EVIOCREVOKE: revoke this file's access (the argument must be 0).
EVIOCREVOKE = _ioc(_IOC_WRITE, 0x91, 4)
#: EVIOCGMASK: get this file's event mask of one type (``struct input_mask``).
EVIOCGMASK = _ioc(_IOC_READ, 0x92, _MASK.size)
#: EVIOCSMASK: set it.
EVIOCSMASK = _ioc(_IOC_WRITE, 0x93, _MASK.size)
#: EVIOCSCLOCKID: the clock of the events' time stamps (a pointer to an int).
EVIOCSCLOCKID = _ioc(_IOC_WRITE, 0xA0, 4)


def EVIOCGNAME(length: int) -> int:  # noqa: N802 - the header's name
    """EVIOCGNAME(len): get the device's name into ``length`` bytes."""
    return _ioc(_IOC_READ, 0x06, length)


def EVIOCGPHYS(length: int) -> int:  # noqa: N802
    """EVIOCGPHYS(len): get its physical path (``usb-0000:00:14.0-1/input0``)."""
    return _ioc(_IOC_READ, 0x07, length)


def EVIOCGUNIQ(length: int) -> int:  # noqa: N802
    """EVIOCGUNIQ(len): get its unique identifier (a serial number)."""
    return _ioc(_IOC_READ, 0x08, length)


def EVIOCGPROP(length: int) -> int:  # noqa: N802
    """EVIOCGPROP(len): get its ``INPUT_PROP_*`` bits."""
    return _ioc(_IOC_READ, 0x09, length)


def EVIOCGMTSLOTS(length: int) -> int:  # noqa: N802
    """EVIOCGMTSLOTS(len): get one multitouch axis of every slot
    (``struct input_mt_request_layout`` of ``length`` bytes)."""
    return _ioc(_IOC_READ, 0x0A, length)


def EVIOCGKEY(length: int) -> int:  # noqa: N802
    """EVIOCGKEY(len): get the keys held down (a bitmap)."""
    return _ioc(_IOC_READ, 0x18, length)


def EVIOCGLED(length: int) -> int:  # noqa: N802
    """EVIOCGLED(len): get the LEDs lit (a bitmap)."""
    return _ioc(_IOC_READ, 0x19, length)


def EVIOCGSND(length: int) -> int:  # noqa: N802
    """EVIOCGSND(len): get the sounds playing (a bitmap)."""
    return _ioc(_IOC_READ, 0x1A, length)


def EVIOCGSW(length: int) -> int:  # noqa: N802
    """EVIOCGSW(len): get the switches on (a bitmap)."""
    return _ioc(_IOC_READ, 0x1B, length)


def EVIOCGBIT(ev: int, length: int) -> int:  # noqa: N802
    """EVIOCGBIT(ev, len): get the codes of event type ``ev`` the device
    has (type 0: the event types themselves), a bitmap."""
    return _ioc(_IOC_READ, 0x20 + ev, length)


def EVIOCGABS(axis: int) -> int:  # noqa: N802
    """EVIOCGABS(abs): get an absolute axis's ``struct input_absinfo``."""
    return _ioc(_IOC_READ, 0x40 + axis, _ABSINFO.size)


def EVIOCSABS(axis: int) -> int:  # noqa: N802
    """EVIOCSABS(abs): set it."""
    return _ioc(_IOC_WRITE, 0xC0 + axis, _ABSINFO.size)


# --- event codes (linux/input-event-codes.h), a small table ----------------

#: The evdev protocol version EVIOCGVERSION gives.
EV_VERSION = 0x010001

INPUT_PROP_POINTER = 0x00
INPUT_PROP_DIRECT = 0x01
INPUT_PROP_BUTTONPAD = 0x02
INPUT_PROP_SEMI_MT = 0x03
INPUT_PROP_TOPBUTTONPAD = 0x04
INPUT_PROP_POINTING_STICK = 0x05
INPUT_PROP_ACCELEROMETER = 0x06
INPUT_PROP_MAX = 0x1F

EV_SYN = 0x00
EV_KEY = 0x01
EV_REL = 0x02
EV_ABS = 0x03
EV_MSC = 0x04
EV_SW = 0x05
EV_LED = 0x11
EV_SND = 0x12
EV_REP = 0x14
EV_FF = 0x15
EV_PWR = 0x16
EV_FF_STATUS = 0x17
EV_MAX = 0x1F

SYN_REPORT = 0
SYN_CONFIG = 1
SYN_MT_REPORT = 2
SYN_DROPPED = 3

KEY_RESERVED = 0
KEY_ESC = 1
KEY_1 = 2
KEY_2 = 3
KEY_3 = 4
KEY_4 = 5
KEY_5 = 6
KEY_6 = 7
KEY_7 = 8
KEY_8 = 9
KEY_9 = 10
KEY_0 = 11
KEY_MINUS = 12
KEY_EQUAL = 13
KEY_BACKSPACE = 14
KEY_TAB = 15
KEY_Q = 16
KEY_W = 17
KEY_E = 18
KEY_R = 19
KEY_T = 20
KEY_Y = 21
KEY_U = 22
KEY_I = 23
KEY_O = 24
KEY_P = 25
KEY_LEFTBRACE = 26
KEY_RIGHTBRACE = 27
KEY_ENTER = 28
KEY_LEFTCTRL = 29
KEY_A = 30
KEY_S = 31
KEY_D = 32
KEY_F = 33
KEY_G = 34
KEY_H = 35
KEY_J = 36
KEY_K = 37
KEY_L = 38
KEY_SEMICOLON = 39
KEY_APOSTROPHE = 40
KEY_GRAVE = 41
KEY_LEFTSHIFT = 42
KEY_BACKSLASH = 43
KEY_Z = 44
KEY_X = 45
KEY_C = 46
KEY_V = 47
KEY_B = 48
KEY_N = 49
KEY_M = 50
KEY_COMMA = 51
KEY_DOT = 52
KEY_SLASH = 53
KEY_RIGHTSHIFT = 54
KEY_KPASTERISK = 55
KEY_LEFTALT = 56
KEY_SPACE = 57
KEY_CAPSLOCK = 58
KEY_F1 = 59
KEY_F2 = 60
KEY_F3 = 61
KEY_F4 = 62
KEY_F5 = 63
KEY_F6 = 64
KEY_F7 = 65
KEY_F8 = 66
KEY_F9 = 67
KEY_F10 = 68
KEY_NUMLOCK = 69
KEY_SCROLLLOCK = 70
KEY_KP7 = 71
KEY_KP8 = 72
KEY_KP9 = 73
KEY_KPMINUS = 74
KEY_KP4 = 75
KEY_KP5 = 76
KEY_KP6 = 77
KEY_KPPLUS = 78
KEY_KP1 = 79
KEY_KP2 = 80
KEY_KP3 = 81
KEY_KP0 = 82
KEY_KPDOT = 83
KEY_102ND = 86
KEY_F11 = 87
KEY_F12 = 88
KEY_KPENTER = 96
KEY_RIGHTCTRL = 97
KEY_KPSLASH = 98
KEY_SYSRQ = 99
KEY_RIGHTALT = 100
KEY_HOME = 102
KEY_UP = 103
KEY_PAGEUP = 104
KEY_LEFT = 105
KEY_RIGHT = 106
KEY_END = 107
KEY_DOWN = 108
KEY_PAGEDOWN = 109
KEY_INSERT = 110
KEY_DELETE = 111
KEY_MUTE = 113
KEY_VOLUMEDOWN = 114
KEY_VOLUMEUP = 115
KEY_POWER = 116
KEY_PAUSE = 119
KEY_LEFTMETA = 125
KEY_RIGHTMETA = 126
KEY_COMPOSE = 127
KEY_CALC = 140
KEY_SLEEP = 142
KEY_MAIL = 155
KEY_BACK = 158
KEY_FORWARD = 159
KEY_NEXTSONG = 163
KEY_PLAYPAUSE = 164
KEY_PREVIOUSSONG = 165
KEY_STOPCD = 166
KEY_HOMEPAGE = 172
KEY_SEARCH = 217
KEY_MAX = 0x2FF

BTN_0 = 0x100
BTN_MISC = 0x100
BTN_1 = 0x101
BTN_LEFT = 0x110
BTN_MOUSE = 0x110
BTN_RIGHT = 0x111
BTN_MIDDLE = 0x112
BTN_SIDE = 0x113
BTN_EXTRA = 0x114
BTN_FORWARD = 0x115
BTN_BACK = 0x116
BTN_TASK = 0x117
BTN_TRIGGER = 0x120
BTN_JOYSTICK = 0x120
BTN_SOUTH = 0x130
BTN_GAMEPAD = 0x130
BTN_EAST = 0x131
BTN_TOOL_PEN = 0x140
BTN_DIGI = 0x140
BTN_TOOL_FINGER = 0x145
BTN_TOUCH = 0x14A
BTN_STYLUS = 0x14B

REL_X = 0x00
REL_Y = 0x01
REL_Z = 0x02
REL_RX = 0x03
REL_RY = 0x04
REL_RZ = 0x05
REL_HWHEEL = 0x06
REL_DIAL = 0x07
REL_WHEEL = 0x08
REL_MISC = 0x09
REL_WHEEL_HI_RES = 0x0B
REL_HWHEEL_HI_RES = 0x0C
REL_MAX = 0x0F

ABS_X = 0x00
ABS_Y = 0x01
ABS_Z = 0x02
ABS_RX = 0x03
ABS_RY = 0x04
ABS_RZ = 0x05
ABS_THROTTLE = 0x06
ABS_RUDDER = 0x07
ABS_WHEEL = 0x08
ABS_GAS = 0x09
ABS_BRAKE = 0x0A
ABS_HAT0X = 0x10
ABS_HAT0Y = 0x11
ABS_PRESSURE = 0x18
ABS_DISTANCE = 0x19
ABS_TILT_X = 0x1A
ABS_TILT_Y = 0x1B
ABS_VOLUME = 0x20
ABS_MISC = 0x28
ABS_MT_SLOT = 0x2F
ABS_MT_POSITION_X = 0x35
ABS_MT_POSITION_Y = 0x36
ABS_MT_TRACKING_ID = 0x39
ABS_MAX = 0x3F

SW_LID = 0x00
SW_TABLET_MODE = 0x01
SW_HEADPHONE_INSERT = 0x02
SW_MAX = 0x10

MSC_SERIAL = 0x00
MSC_PULSELED = 0x01
MSC_GESTURE = 0x02
MSC_RAW = 0x03
MSC_SCAN = 0x04
MSC_TIMESTAMP = 0x05
MSC_MAX = 0x07

LED_NUML = 0x00
LED_CAPSL = 0x01
LED_SCROLLL = 0x02
LED_COMPOSE = 0x03
LED_KANA = 0x04
LED_SLEEP = 0x05
LED_SUSPEND = 0x06
LED_MUTE = 0x07
LED_MISC = 0x08
LED_MAIL = 0x09
LED_CHARGING = 0x0A
LED_MAX = 0x0F

REP_DELAY = 0x00
REP_PERIOD = 0x01
REP_MAX = 0x01

SND_CLICK = 0x00
SND_BELL = 0x01
SND_TONE = 0x02
SND_MAX = 0x07

FF_MAX = 0x7F

BUS_USB = 0x03
BUS_HIL = 0x04
BUS_BLUETOOTH = 0x05
BUS_VIRTUAL = 0x06
BUS_I2C = 0x18

#: The highest code of each event type that has a bitmap (EVIOCGBIT), by
#: type; type 0 is the event types' own bitmap.
MAX_CODE: Dict[int, int] = {
    0: EV_MAX, EV_KEY: KEY_MAX, EV_REL: REL_MAX, EV_ABS: ABS_MAX, EV_MSC: MSC_MAX, EV_SW: SW_MAX,
    EV_LED: LED_MAX, EV_SND: SND_MAX, EV_FF: FF_MAX,
}

# Type names, and code names by event type, from the table above: the first
# name of a value wins (BTN_LEFT, defined before its alias BTN_MOUSE).
_PREFIXES: Dict[int, Tuple[str, ...]] = {
    EV_SYN: ("SYN_",), EV_KEY: ("KEY_", "BTN_"), EV_REL: ("REL_",), EV_ABS: ("ABS_",), EV_MSC: ("MSC_",),
    EV_SW: ("SW_",), EV_LED: ("LED_",), EV_SND: ("SND_",), EV_REP: ("REP_",),
}
_TYPE_NAMES: Dict[int, str] = {}
_NAMES: Dict[int, Dict[int, str]] = {t: {} for t in _PREFIXES}
for _name, _value in list(globals().items()):
    if not isinstance(_value, int) or _name.endswith("_MAX"):
        continue
    if _name.startswith("EV_") and _name != "EV_VERSION":
        _TYPE_NAMES.setdefault(_value, _name)
    for _type, _prefixes in _PREFIXES.items():
        if _name.startswith(_prefixes):
            _NAMES[_type].setdefault(_value, _name)
del _name, _value, _type, _prefixes


def type_name(type: int) -> str:  # noqa: A002 - the kernel's word
    """The name of event type ``type`` (``"EV_KEY"``), or the number in
    hex when the table has none."""
    return _TYPE_NAMES.get(type, "0x%02x" % type)


def code_name(type: int, code: int) -> str:  # noqa: A002
    """The table's name of ``code`` of event type ``type``, or the number
    in hex when the table has none: ``code_name(EV_KEY, 30) == "KEY_A"``,
    ``code_name(EV_SYN, 3) == "SYN_DROPPED"``."""
    return _NAMES.get(type, {}).get(code, "0x%02x" % code)


def bits_to_set(bitmap: bytes) -> Set[int]:
    """The numbers of the bits set in a kernel bitmap (an array of longs,
    read as a little-endian machine's, x86-64's or arm64's, lays them
    out: bit ``n`` is bit ``n % 8`` of byte ``n // 8``)."""
    value = int.from_bytes(bitmap, "little")
    return {n for n in range(len(bitmap) * 8) if value >> n & 1}


def set_to_bits(codes: Iterable[int], size: int) -> bytes:
    """The inverse of :func:`bits_to_set`: a bitmap of ``size`` bytes."""
    value = 0
    for c in codes:
        if not 0 <= c < size * 8:
            raise ValueError("code %d does not fit a %d-byte bitmap" % (c, size))
        value |= 1 << c
    return value.to_bytes(size, "little")


def _bitmap_size(max_code: int) -> int:
    return max_code // 8 + 1


# --- the structures -------------------------------------------------------

class InputEvent(NamedTuple):
    """One ``struct input_event``: its time stamp (``sec``, ``usec``: the
    clock EVIOCSCLOCKID chose, CLOCK_REALTIME by default), ``type``
    (``EV_*``), ``code`` and ``value`` (a key's 1 press, 0 release, 2
    autorepeat; an axis's position or motion)."""

    sec: int
    usec: int
    type: int
    code: int
    value: int

    @property
    def time(self) -> float:
        """The time stamp in seconds."""
        return self.sec + self.usec / 1e6

    @property
    def triple(self) -> Tuple[int, int, int]:
        """``(type, code, value)``: what a test compares, without the time."""
        return (self.type, self.code, self.value)

    def pack(self) -> bytes:
        """The 24 bytes of the 64-bit ``struct input_event``."""
        return _EVENT.pack(self.sec, self.usec, self.type, self.code, self.value)

    @classmethod
    def unpack(cls, data: bytes) -> "InputEvent":
        """One event from its 24 bytes."""
        return cls(*_EVENT.unpack(data))

    @classmethod
    def unpack_all(cls, data: bytes) -> List["InputEvent"]:
        """The events of a read (a multiple of 24 bytes; ValueError if not)."""
        if len(data) % EVENT_SIZE:
            raise ValueError("%d bytes are not whole input events of %d" % (len(data), EVENT_SIZE))
        return [cls(*f) for f in _EVENT.iter_unpack(data)]

    def describe(self) -> str:
        """``"12.000345 EV_KEY KEY_A 1"``: the event as evtest prints it."""
        return "%d.%06d %s %s %d" % (self.sec, self.usec, type_name(self.type),
                                     code_name(self.type, self.code), self.value)


class InputId(NamedTuple):
    """``struct input_id`` (EVIOCGID): ``bustype`` (``BUS_USB`` 3), the
    vendor and product ids and the version (a USB device's bcdDevice)."""

    bustype: int
    vendor: int
    product: int
    version: int


class AbsInfo(NamedTuple):
    """``struct input_absinfo`` (EVIOCGABS): an absolute axis's current
    value, its range, fuzz and flat (noise filter and dead zone), and its
    resolution (units per millimetre, or per radian for a rotation)."""

    value: int
    minimum: int
    maximum: int
    fuzz: int = 0
    flat: int = 0
    resolution: int = 0


def find(name: Optional[str] = None, vendor: Optional[int] = None, product: Optional[int] = None,
         sys: str = "/sys") -> List[str]:
    """The ``/dev/input/eventN`` nodes, by number, whose input device has
    this name (exactly) and these ids (each one given), from
    ``SYS/class/input/eventN/device/{name,id/vendor,id/product}`` (as
    libinput and udev see them); all of them when nothing is given."""
    base = os.path.join(sys, "class", "input")
    names = os.listdir(base) if os.path.isdir(base) else []
    events = sorted((n for n in names if n.startswith("event") and n[5:].isdigit()), key=lambda n: int(n[5:]))
    out = []
    for node in events:
        dev = os.path.join(base, node, "device")
        try:
            if name is not None and _read(dev, "name") != name:
                continue
            if vendor is not None and int(_read(dev, "id/vendor"), 16) != vendor:
                continue
            if product is not None and int(_read(dev, "id/product"), 16) != product:
                continue
        except (OSError, ValueError):
            continue
        out.append("/dev/input/" + node)
    return out


def _read(directory: str, rel: str) -> str:
    with open(os.path.join(directory, rel)) as f:
        return f.read().rstrip("\n")


# --- the node -------------------------------------------------------------

class Evdev:
    """An open evdev node: read and write mode, or read-only where the
    node allows no more (writing then fails with EBADF). ``nonblock``
    opens it O_NONBLOCK: a read with no event waiting raises
    :class:`BlockingIOError` (EAGAIN) instead of waiting. Every ioctl's
    error is the :class:`OSError` it gives (ENODEV once revoked or
    unplugged, EINVAL for a type without codes, ENOENT for a string the
    device has not)."""

    def __init__(self, path: str, nonblock: bool = False) -> None:
        self.path = path
        flags = os.O_CLOEXEC | (os.O_NONBLOCK if nonblock else 0)
        try:
            self.fd = os.open(path, os.O_RDWR | flags)
        except PermissionError:
            self.fd = os.open(path, os.O_RDONLY | flags)
        self._pending: List[InputEvent] = []

    def close(self) -> None:
        """Close the node (a second close does nothing)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def fileno(self) -> int:
        """The file descriptor, for ``select``."""
        return self.fd

    def __enter__(self) -> "Evdev":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # events

    def _wait(self, timeout: Optional[float]) -> None:
        if timeout is not None:
            ready, _, _ = select.select([self.fd], [], [], max(timeout, 0))
            if not ready:
                raise TimeoutError("no input event from %s in %ss" % (self.path, timeout))

    def read_event(self, timeout: Optional[float] = None) -> InputEvent:
        """The next event (a read of one ``struct input_event``);
        TimeoutError after ``timeout`` seconds without one."""
        if self._pending:
            return self._pending.pop(0)
        self._wait(timeout)
        return InputEvent.unpack(os.read(self.fd, EVENT_SIZE))

    def read_events(self, timeout: Optional[float] = None, count: int = 64) -> List[InputEvent]:
        """What one read of up to ``count`` events returns (every event
        waiting, as evdev copies whole events only); TimeoutError after
        ``timeout`` seconds without one. Events :meth:`frames` read past
        its last frame come first."""
        if self._pending:
            out, self._pending = self._pending, []
            return out
        self._wait(timeout)
        return InputEvent.unpack_all(os.read(self.fd, EVENT_SIZE * count))

    def frame(self, timeout: Optional[float] = None) -> List[InputEvent]:
        """The events up to the next SYN_REPORT (without it): what the
        device reported at once, such as ``[EV_MSC MSC_SCAN, EV_KEY KEY_A
        1]``. A SYN_DROPPED (this reader fell behind and the kernel dropped
        the events queued for it) stays in its frame, for the caller to
        see. TimeoutError when no whole frame came within ``timeout``
        seconds (the events of a partial one are kept for the next call)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        got: List[InputEvent] = []
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                events = self.read_events(left)
                for i, e in enumerate(events):
                    if e.type == EV_SYN and e.code == SYN_REPORT:
                        self._pending = events[i + 1:] + self._pending
                        return got
                    got.append(e)
        except BaseException:
            self._pending = got + self._pending
            raise

    def frames(self, timeout: Optional[float] = None) -> Iterator[List[InputEvent]]:
        """:meth:`frame` after :meth:`frame`, each waiting up to
        ``timeout`` seconds (TimeoutError ends the iteration with an
        error); ``for frame in ev.frames(5): ...``."""
        while True:
            yield self.frame(timeout)

    def write_event(self, type: int, code: int, value: int) -> int:  # noqa: A002
        """Write one event to the device (its time is ignored): an LED
        (``EV_LED, LED_CAPSL, 1``), a sound, a repeat setting, or a
        force-feedback play. Returns the bytes written (24)."""
        return os.write(self.fd, InputEvent(0, 0, type, code, value).pack())

    # ids and strings

    def version(self) -> int:
        """EVIOCGVERSION: the evdev protocol's version (0x010001)."""
        return int(struct.unpack("i", fcntl.ioctl(self.fd, EVIOCGVERSION, bytes(4)))[0])

    def id(self) -> InputId:
        """EVIOCGID: bus type, vendor, product and version."""
        return InputId(*_INPUT_ID.unpack(fcntl.ioctl(self.fd, EVIOCGID, bytes(_INPUT_ID.size))))

    def _string(self, request: Callable[[int], int], length: int = 256) -> str:
        buf = bytearray(length)
        n = fcntl.ioctl(self.fd, request(length), buf)
        return bytes(buf[: max(n, 0)]).split(b"\0", 1)[0].decode("utf-8", "replace")

    def name(self) -> str:
        """EVIOCGNAME: the device's name (a USB HID device's: its
        manufacturer and product strings)."""
        return self._string(EVIOCGNAME)

    def phys(self) -> str:
        """EVIOCGPHYS: its physical path, ``usb-CONTROLLER-PORTS/inputN``."""
        return self._string(EVIOCGPHYS)

    def uniq(self) -> str:
        """EVIOCGUNIQ: its unique identifier (the serial number); ENOENT
        when it has none."""
        return self._string(EVIOCGUNIQ)

    # capabilities and state

    def _bitmap(self, request: int, size: int) -> Set[int]:
        buf = bytearray(size)
        fcntl.ioctl(self.fd, request, buf)
        return bits_to_set(bytes(buf))

    def properties(self) -> Set[int]:
        """EVIOCGPROP: the device's ``INPUT_PROP_*``."""
        return self._bitmap(EVIOCGPROP(_bitmap_size(INPUT_PROP_MAX)), _bitmap_size(INPUT_PROP_MAX))

    def bits(self, type: int = 0) -> Set[int]:  # noqa: A002
        """EVIOCGBIT: the codes of event type ``type`` the device has (type
        0: its event types, ``{EV_SYN, EV_KEY, EV_MSC, EV_LED, EV_REP}``
        for a keyboard). A type without codes (EV_REP, EV_SYN's) is the
        kernel's EINVAL."""
        size = _bitmap_size(MAX_CODE.get(type, KEY_MAX))
        return self._bitmap(EVIOCGBIT(type, size), size)

    def keys(self) -> Set[int]:
        """EVIOCGKEY: the keys and buttons held down now."""
        return self._bitmap(EVIOCGKEY(_bitmap_size(KEY_MAX)), _bitmap_size(KEY_MAX))

    def leds(self) -> Set[int]:
        """EVIOCGLED: the LEDs lit now."""
        return self._bitmap(EVIOCGLED(_bitmap_size(LED_MAX)), _bitmap_size(LED_MAX))

    def sounds(self) -> Set[int]:
        """EVIOCGSND: the sounds playing now."""
        return self._bitmap(EVIOCGSND(_bitmap_size(SND_MAX)), _bitmap_size(SND_MAX))

    def switches(self) -> Set[int]:
        """EVIOCGSW: the switches on now."""
        return self._bitmap(EVIOCGSW(_bitmap_size(SW_MAX)), _bitmap_size(SW_MAX))

    def abs_info(self, axis: int) -> AbsInfo:
        """EVIOCGABS: absolute axis ``axis``'s value and range."""
        return AbsInfo(*_ABSINFO.unpack(fcntl.ioctl(self.fd, EVIOCGABS(axis), bytes(_ABSINFO.size))))

    def set_abs_info(self, axis: int, info: AbsInfo) -> None:
        """EVIOCSABS: change axis ``axis``'s value and range."""
        fcntl.ioctl(self.fd, EVIOCSABS(axis), _ABSINFO.pack(*info))

    def mt_slots(self, code: int, slots: Optional[int] = None) -> List[int]:
        """EVIOCGMTSLOTS: multitouch axis ``code`` (``ABS_MT_POSITION_X``)
        of each slot, for ``slots`` slots (default: ABS_MT_SLOT's maximum
        plus one)."""
        if slots is None:
            slots = self.abs_info(ABS_MT_SLOT).maximum + 1
        buf = bytearray(struct.pack("I", code) + bytes(4 * slots))
        fcntl.ioctl(self.fd, EVIOCGMTSLOTS(len(buf)), buf)
        return list(struct.unpack_from("%di" % slots, buf, 4))

    # settings

    def repeat(self) -> Tuple[int, int]:
        """EVIOCGREP: the key repeat's delay and period in milliseconds
        (ENOSYS for a device without EV_REP)."""
        delay, period = struct.unpack("II", fcntl.ioctl(self.fd, EVIOCGREP, bytes(8)))
        return int(delay), int(period)

    def set_repeat(self, delay: int, period: int) -> None:
        """EVIOCSREP: set the key repeat's delay and period (ms)."""
        fcntl.ioctl(self.fd, EVIOCSREP, struct.pack("II", delay, period))

    def grab(self) -> None:
        """EVIOCGRAB 1: this file alone gets the device's events (EBUSY
        if another holds it)."""
        fcntl.ioctl(self.fd, EVIOCGRAB, 1)

    def ungrab(self) -> None:
        """EVIOCGRAB 0: release the grab (EINVAL if this file holds none)."""
        fcntl.ioctl(self.fd, EVIOCGRAB, 0)

    def revoke(self) -> None:
        """EVIOCREVOKE: this file loses the device for good: its reads and
        ioctls fail with ENODEV from now on (a compositor does it to a
        session it leaves)."""
        fcntl.ioctl(self.fd, EVIOCREVOKE, 0)

    def set_clock(self, clockid: int) -> None:
        """EVIOCSCLOCKID: the clock of the events' time stamps:
        ``time.CLOCK_REALTIME`` (the default), ``CLOCK_MONOTONIC`` or
        ``CLOCK_BOOTTIME``; EINVAL for another."""
        fcntl.ioctl(self.fd, EVIOCSCLOCKID, struct.pack("i", clockid))

    def mask(self, type: int) -> Set[int]:  # noqa: A002
        """EVIOCGMASK: the codes of event type ``type`` this file receives
        (type 0: the event types); all of them until :meth:`set_mask`."""
        size = _bitmap_size(MAX_CODE.get(type, KEY_MAX))
        buf = ctypes.create_string_buffer(size)
        fcntl.ioctl(self.fd, EVIOCGMASK, _MASK.pack(type, size, ctypes.addressof(buf)))
        return bits_to_set(buf.raw)

    def set_mask(self, type: int, codes: Iterable[int]) -> None:  # noqa: A002
        """EVIOCSMASK: this file receives only ``codes`` of event type
        ``type`` (type 0: only these event types)."""
        size = _bitmap_size(MAX_CODE.get(type, KEY_MAX))
        buf = ctypes.create_string_buffer(set_to_bits(codes, size), size)
        fcntl.ioctl(self.fd, EVIOCSMASK, _MASK.pack(type, size, ctypes.addressof(buf)))

# The constants, for ``from monfs.evdev import *``.
__all__ += sorted(n for n in dir() if n.split("_", 1)[0] in (
    "EV", "SYN", "KEY", "BTN", "REL", "ABS", "MSC", "LED", "REP", "SW", "SND", "FF", "BUS", "INPUT")
    and n not in __all__) + ["MAX_CODE"]
