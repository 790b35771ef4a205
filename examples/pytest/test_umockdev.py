"""A umockdev test suite moved to monfs: a recorded device (umockdev/
beside this file: loop.umockdev, written by umockdev-record, and
loop.pcapng, the usbmon capture of a session with it) replayed to a pyusb
program (umockdev/loop_pyusb.py) by Debian's `umockdev-run` and by `monfs
umockdev-run`, with the same arguments: the same output and exit status.
Under monfs the program sees the device through the kernel's own paths (no
LD_PRELOAD), so a static binary or a Go or Rust program would too.

Needs Debian's umockdev and python3-usb (scripts/setup installs them)."""

import os
import subprocess

import pytest

import monfs

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "umockdev")
DEVICE = "/sys/devices/platform/monfs_hcd.1/usb1/1-1"

EXPECTED = """found 1 2 umockdev loop
control 6d6f6e6673
stall 32
bulk out 4
bulk in 04030201
interrupt in 00000001
interrupt in 00000002
bulk out 5
bulk in 73666e6f6d
"""


@pytest.mark.parametrize("runner", ["umockdev", "monfs"])
def test_the_recording_replays_to_the_program(runner, tmp_path):
    umockdev_run = ["umockdev-run"] if runner == "umockdev" else [monfs.find_binary(), "umockdev-run"]
    out = subprocess.run(
        umockdev_run + [
            "-d", os.path.join(HERE, "loop.umockdev"),
            "-p", DEVICE + "=" + os.path.join(HERE, "loop.pcapng"),
            "--", "/usr/bin/python3", os.path.join(HERE, "loop_pyusb.py"),
        ],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert out.stdout == EXPECTED, out.stderr
