"""The pytest plugin (entry point ``pytest11``: loaded once the package is
installed, or with ``-p monfs.pytest_plugin``).

Fixtures:

* ``monfs``: a fresh :class:`monfs.Mount` per test. Its configuration comes
  from the test's ``@pytest.mark.monfs(config=..., args=[...], seed=N,
  timing="fast")`` marker, else from an indirect parameter
  (``@pytest.mark.parametrize("monfs", [cfg1, cfg2], indirect=True)``), else
  from a ``monfs_config`` fixture the suite defines, else the built-in
  default. The daemon's death or a failing peer fails the test, with the log.
* ``monfs_config``: None; override it in a ``conftest.py`` for a suite-wide
  configuration.

A failing test that used a mount gets the daemon's log as a report section
("monfs daemon log"). Waiting helpers are the readers' ``expect`` and
``collect`` (see :class:`monfs.Stream`), and :func:`expect_line` for a
process's output.
"""

import os
import re
import selectors
import subprocess
import time
from typing import Any, Dict, Generator, List, Pattern, Union

import pytest

from ._mount import Mount
from ._stream import HANG
from .errors import ExpectationFailed

__all__ = ["monfs", "monfs_config", "expect_line"]

_MOUNTS = pytest.StashKey[List[Mount]]() if hasattr(pytest, "StashKey") else None


def pytest_configure(config: Any) -> None:
    """Register the ``monfs`` marker."""
    config.addinivalue_line(
        "markers",
        "monfs(config=None, args=(), seed=None, timing=None, env=None, peers=(), peer_errors='raise'): "
        "the configuration and options of the test's `monfs` fixture",
    )


@pytest.fixture
def monfs_config() -> Any:
    """The configuration the ``monfs`` fixture mounts when a test names none
    (override in a conftest.py); None is the built-in default."""
    return None


def _mounts(node: Any) -> List[Mount]:
    if _MOUNTS is not None:
        return node.stash.setdefault(_MOUNTS, [])
    if not hasattr(node, "_monfs_mounts"):
        node._monfs_mounts = []
    return node._monfs_mounts


@pytest.fixture
def monfs(request: Any, monfs_config: Any) -> Generator[Mount, None, None]:
    """A fresh monfs mount for this test (see the module's documentation)."""
    options: Dict[str, Any] = {}
    config = monfs_config
    if hasattr(request, "param"):
        config = request.param
    marker = request.node.get_closest_marker("monfs")
    if marker is not None:
        options = dict(marker.kwargs)
        if marker.args:
            options["config"] = marker.args[0]
        config = options.pop("config", config)
    m = Mount(config, **options)
    _mounts(request.node).append(m)
    m.start()
    try:
        yield m
    finally:
        failed = getattr(request.node, "rep_call", None)
        try:
            if failed is None or not failed.failed:
                m.check()
        finally:
            m.stop()


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Generator[None, Any, None]:
    """Keep each phase's report on the item, and add the daemon's log to a
    failing test's report."""
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
    if rep.failed:
        for k, m in enumerate(_mounts(item)):
            text = m.log()
            if text:
                title = "monfs daemon log" + ("" if k == 0 else " (mount %d)" % (k + 1))
                rep.sections.append((title, text))


def expect_line(proc: "subprocess.Popen[Any]", pattern: Union[str, Pattern[str]], timeout: float = HANG,
                stream: str = "stdout") -> "re.Match[str]":
    """Read ``proc``'s ``stdout`` (or ``stderr``; a pipe) until a line matches
    ``pattern``; the match. After ``timeout`` seconds, or at the end of the
    output, raises :class:`monfs.ExpectationFailed` with the lines that came
    instead. Lines read past the match stay for the next call."""
    rx = re.compile(pattern) if isinstance(pattern, str) else pattern
    f = getattr(proc, stream)
    if f is None:
        raise ValueError("the process's %s is not a pipe" % stream)
    fd = f.fileno()
    key = "_monfs_buf_" + stream
    buf: bytes = getattr(proc, key, b"")
    deadline = time.monotonic() + timeout
    seen: List[str] = []
    ended = False
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while True:
            while b"\n" in buf or (ended and buf):
                raw, sep, buf = buf.partition(b"\n")
                line = raw.decode("utf-8", "replace")
                m = rx.search(line)
                if m:
                    setattr(proc, key, buf)
                    return m
                seen.append(line)
            setattr(proc, key, buf)
            if ended:
                raise ExpectationFailed("a line matching %r (the output ended)" % rx.pattern, timeout, seen)
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise ExpectationFailed("a line matching %r" % rx.pattern, timeout, seen)
            chunk = os.read(fd, 65536)
            if not chunk:
                ended = True
            buf += chunk
