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

if os.environ.get("MONFS_BIN"):
    os.environ["MONFS_BIN"] = os.path.abspath(os.environ["MONFS_BIN"])  # the docs test changes directory
elif (REPO / "target/debug/monfs").exists():
    os.environ["MONFS_BIN"] = str(REPO / "target/debug/monfs")


@pytest.fixture
def repo() -> Path:
    """The checkout's top directory."""
    return REPO


def pytest_collection_modifyitems(config, items):
    """Tests need FUSE and must fail, never skip, without it."""
    assert Path("/dev/fuse").exists(), "/dev/fuse is missing: these tests need FUSE and must not be skipped"
