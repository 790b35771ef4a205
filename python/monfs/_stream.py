"""What every reader shares: waiting with a deadline, and matching."""

import time
from typing import Any, Callable, Generic, Iterator, List, Optional, TypeVar, Union

from .errors import ExpectationFailed

T = TypeVar("T")

#: The default deadline of every wait, in seconds. It only turns a hang into
#: a failure; no verdict depends on how fast something arrives.
HANG = 30.0

#: How often a reader with nothing to read looks again, in seconds.
POLL_INTERVAL = 0.005

Matcher = Union[Callable[[Any], bool], None]


def matches(item: object, match: Matcher, fields: dict) -> bool:
    """Whether ``item`` passes ``match`` (a predicate, or None) and has every
    attribute of ``fields`` equal to the value given. A value that is a
    callable is called with the attribute and must return true. A name that
    is not an attribute of a trace record names one of its ``fields`` (its
    text)."""
    if match is not None and not match(item):
        return False
    for k, want in fields.items():
        if hasattr(item, k):
            got = getattr(item, k)
        else:
            # A trace record's own fields: a record without it does not match.
            extra = getattr(item, "fields", None)
            if not isinstance(extra, dict):
                raise AttributeError("%s has no attribute %r" % (type(item).__name__, k))
            if k not in extra:
                return False
            got = extra[k]
        if callable(want) and not isinstance(want, (bytes, str, int)):
            if not want(got):
                return False
        elif got != want:
            return False
    return True


def describe(match: Matcher, fields: dict) -> str:
    """A readable name for what ``expect`` waits for."""
    parts = ["%s=%r" % kv for kv in fields.items()]
    if match is not None:
        parts.insert(0, getattr(match, "__name__", "predicate"))
    return "an item with " + ", ".join(parts) if parts else "an item"


class Stream(Generic[T]):
    """A source of parsed items (events, records) read with deadlines.

    Subclasses implement :meth:`_read_some`, which returns the items ready
    now without blocking (an empty list when there are none).
    """

    def __init__(self, check: Optional[Callable[[], None]] = None) -> None:
        self._check = check
        self._ready: List[T] = []
        #: Every item this stream handed out or skipped, in order.
        self.seen: List[T] = []

    def _read_some(self) -> List[T]:  # pragma: no cover - abstract
        raise NotImplementedError

    def close(self) -> None:
        """Release the underlying file."""

    def __enter__(self) -> "Stream[T]":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def poll(self) -> Optional[T]:
        """The next item if one is ready now, else None (never blocks)."""
        if not self._ready:
            try:
                self._ready.extend(self._read_some())
            except OSError as e:
                self._explain(e)
                raise
        if self._ready:
            item = self._ready.pop(0)
            self.seen.append(item)
            return item
        return None

    def _explain(self, err: OSError) -> None:
        """A read failed (ENOTCONN, ECONNABORTED once the daemon is gone):
        raise the mount's own error instead, if it has one within a moment."""
        if self._check is None:
            return
        deadline = time.monotonic() + 2.0
        while True:
            try:
                self._check()
            except Exception as e:
                raise e from err
            if time.monotonic() >= deadline:
                return
            time.sleep(0.02)

    def next(self, timeout: float = HANG) -> T:
        """The next item; waits up to ``timeout`` seconds for it, then raises
        :class:`ExpectationFailed`. Raises the mount's error (the daemon died,
        a peer failed) as soon as it happens."""
        deadline = time.monotonic() + timeout
        while True:
            item = self.poll()
            if item is not None:
                return item
            if self._check is not None:
                self._check()
            if time.monotonic() >= deadline:
                raise ExpectationFailed("the next item", timeout, [])
            time.sleep(POLL_INTERVAL)

    def expect(self, match: Matcher = None, *, timeout: float = HANG, **fields: Any) -> T:
        """Read until an item matches, and return it.

        ``match`` is a predicate; each keyword names an attribute and the
        value it must have (or a predicate for it): ``expect(kind="C",
        status=-32)``. Items that do not match are skipped (and kept in
        :attr:`seen`). After ``timeout`` seconds without a match this raises
        :class:`ExpectationFailed`, whose message lists what arrived instead.
        On a trace record a keyword may also name one of its fields
        (``expect(event="tick", msg="hi")``, compared as text).
        """
        deadline = time.monotonic() + timeout
        skipped: List[T] = []
        while True:
            item = self.poll()
            if item is not None:
                if matches(item, match, fields):
                    return item
                skipped.append(item)
                continue
            if self._check is not None:
                self._check()
            if time.monotonic() >= deadline:
                raise ExpectationFailed(describe(match, fields), timeout, skipped)
            time.sleep(POLL_INTERVAL)

    def collect(self, count: int, match: Matcher = None, *, timeout: float = HANG, **fields: Any) -> List[T]:
        """The next ``count`` items that match (as :meth:`expect` matches),
        waiting up to ``timeout`` seconds for all of them."""
        deadline = time.monotonic() + timeout
        got: List[T] = []
        while len(got) < count:
            left = deadline - time.monotonic()
            try:
                got.append(self.expect(match, timeout=max(left, 0.0), **fields))
            except ExpectationFailed as e:
                raise ExpectationFailed(
                    "%d of %d (%s)" % (len(got), count, e.what), timeout, got + e.arrived
                ) from None
        return got

    def drain(self) -> List[T]:
        """Every item ready now, without waiting."""
        out: List[T] = []
        while True:
            item = self.poll()
            if item is None:
                return out
            out.append(item)

    def __iter__(self) -> Iterator[T]:
        """Items one by one, each waited for up to the default deadline."""
        while True:
            yield self.next()
