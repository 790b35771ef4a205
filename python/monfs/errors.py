"""The exceptions monfs's Python package raises.

Every one of them derives from :class:`MonfsError`. Those that carry the
daemon's log (:class:`MountError`, :class:`DaemonDied`, :class:`PeerError`)
end their message with its last lines, so a failing test shows why monfs
failed without a second look.
"""

from typing import Optional, Sequence

__all__ = [
    "MonfsError",
    "MountError",
    "DaemonDied",
    "PeerError",
    "CommandError",
    "ExpectationFailed",
]

#: How many lines of the daemon's log an exception message carries.
LOG_TAIL_LINES = 60


def log_tail(log: str, lines: int = LOG_TAIL_LINES) -> str:
    """The last ``lines`` lines of a log, with a marker if some were left out."""
    all_lines = log.rstrip("\n").splitlines()
    if len(all_lines) <= lines:
        return "\n".join(all_lines)
    left = len(all_lines) - lines
    return "[... %d earlier lines ...]\n%s" % (left, "\n".join(all_lines[-lines:]))


class MonfsError(Exception):
    """Base of every error raised by the monfs package."""


class _WithLog(MonfsError):
    """An error that carries the daemon's log (``.log``)."""

    def __init__(self, message: str, log: str = "") -> None:
        self.message = message
        self.log = log
        text = message
        if log:
            text += "\n--- monfs daemon log (last lines) ---\n" + log_tail(log)
        super().__init__(text)


class MountError(_WithLog):
    """The mount did not come up: the daemon exited, or did not serve in time.

    ``.log`` holds the daemon's whole log, ``.returncode`` its exit status
    (None if it was still running and had to be killed).
    """

    def __init__(self, message: str, log: str = "", returncode: Optional[int] = None) -> None:
        self.returncode = returncode
        super().__init__(message, log)


class DaemonDied(_WithLog):
    """The daemon exited while the mount was in use (``.returncode``)."""

    def __init__(self, message: str, log: str = "", returncode: Optional[int] = None) -> None:
        self.returncode = returncode
        super().__init__(message, log)


class PeerError(_WithLog):
    """An external device's peer failed: a handler raised, or monfs unplugged
    the device because its peer died or answered garbage (``.reason``)."""

    def __init__(self, message: str, log: str = "", reason: str = "") -> None:
        self.reason = reason
        super().__init__(message, log)


class CommandError(MonfsError):
    """monfs refused a control command. ``.command`` is the command line sent,
    ``.reason`` monfs's own explanation (what ``monfs ctl`` prints after
    ``error:``)."""

    def __init__(self, command: str, reason: str) -> None:
        self.command = command
        self.reason = reason
        super().__init__("monfs refused %r: %s" % (command, reason))


class ExpectationFailed(AssertionError, MonfsError):
    """What a test waited for did not arrive before its deadline.

    ``.arrived`` holds what did arrive meanwhile (events, records or lines),
    and the message shows the last of them, so the test's failure says what
    the tool under test saw instead.
    """

    def __init__(self, what: str, timeout: float, arrived: Sequence[object], shown: int = 20) -> None:
        self.what = what
        self.timeout = timeout
        self.arrived = list(arrived)
        lines = ["%s: not seen within %g s; %d other item(s) arrived" % (what, timeout, len(self.arrived))]
        if self.arrived:
            tail = self.arrived[-shown:]
            if len(self.arrived) > shown:
                lines.append("the last %d:" % shown)
            lines.extend("  " + str(a) for a in tail)
        super().__init__("\n".join(lines))
