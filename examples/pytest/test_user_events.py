"""A user_events producer (examples/user_events_producer.c, the kernel's
6.4+ ABI): registered, enabled, and its fields asserted record by record."""

import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from monfs.pytest_plugin import expect_line

SOURCE = Path(__file__).resolve().parents[1] / "user_events_producer.c"


@pytest.fixture
def producer(tmp_path):
    """The producer, compiled."""
    exe = tmp_path / "user_events_producer"
    subprocess.run([shutil.which("cc") or "cc", "-O2", "-Wall", "-o", str(exe), str(SOURCE)], check=True)
    return exe


def test_producer_fields_reach_trace_pipe(monfs, producer):
    # TRACING_DIR, COUNT 0 (until stopped), a write every 5 ms while enabled.
    p = subprocess.Popen([str(producer), str(monfs.path("tracing")), "0", "5"], stdout=subprocess.PIPE)
    try:
        expect_line(p, r"^registered example_counter write_index=\d+")
        assert "example_counter" in monfs.read("tracing/available_events")
        fmt = monfs.read("tracing/events/user_events/example_counter/format")
        assert "count=%u tag=%s" in fmt
        with monfs.trace_pipe() as pipe:
            monfs.enable_event("user_events:example_counter")
            records = pipe.collect(5, event="example_counter")
        counts = [r.int("count") for r in records]
        assert counts == list(range(counts[0], counts[0] + 5)), counts  # none lost, in order
        assert all(r["tag"] == "example" for r in records)
        assert all(r.pid == p.pid for r in records)
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
