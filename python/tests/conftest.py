"""The package's own tests: every test mounts a real monfs (root, or
through fusermount3 in the rootless leg) and drives it with real files,
ioctls, sockets and processes. Run them with scripts/python-tests, or:

    MONFS_BIN=target/debug/monfs PYTHONPATH=python python3 -m pytest -p monfs.pytest_plugin python/tests
"""

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

pytest_plugins = ["pytester"]

if not os.environ.get("MONFS_BIN") and (REPO / "target/debug/monfs").exists():
    os.environ["MONFS_BIN"] = str(REPO / "target/debug/monfs")

#: A keyboard on bus 1, port 1, seeded; the hub polls nothing, so bus 1
#: carries only the keyboard's traffic.
KEYBOARD = {
    "seed": 7,
    "usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [{"port": 1, "kind": "hid-keyboard"}]}]},
}

#: A configured trace event with a number and a string.
TICK = {
    "tracing": {"events": [{"system": "myapp", "name": "tick", "fields": [
        {"name": "count", "type": "u32"}, {"name": "msg", "type": "__data_loc char[]"}]}]},
}


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "needs_monfs_run: uses `monfs run` (issue 36); deselected until it is merged")


@pytest.fixture
def repo() -> Path:
    """The checkout's top directory."""
    return REPO


def pytest_collection_modifyitems(config, items):
    """Tests need FUSE and must fail, never skip, without it."""
    assert Path("/dev/fuse").exists(), "/dev/fuse is missing: these tests need FUSE and must not be skipped"
