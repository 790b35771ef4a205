"""A usbmon text parser (urbstat.py, beside this file) under stalls and
hot-unplug: what it reports is checked against what monfs itself shows."""

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from monfs.pytest_plugin import expect_line

TOOL = Path(__file__).with_name("urbstat.py")

KEYBOARD_AND_MOUSE = {
    "usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [
        {"port": 1, "kind": "hid-keyboard"},
        {"port": 2, "kind": "hid-mouse"},
    ]}]},
}


@pytest.fixture
def urbstat(monfs):
    """urbstat watching bus 1 of the test's mount, once both devices have
    enumerated (in the mount's first seconds); stopped with SIGINT."""
    monfs.wait_for_text("usb/devices", "QEMU USB Keyboard")
    monfs.wait_for_text("usb/devices", "QEMU USB Mouse")
    p = subprocess.Popen([sys.executable, str(TOOL), str(monfs.path("usb/usbmon/1u"))],
                         stdout=subprocess.PIPE, text=True)
    expect_line(p, "^watching ")
    yield p
    if p.poll() is None:
        p.send_signal(signal.SIGINT)
    p.wait(30)


@pytest.mark.monfs(config=KEYBOARD_AND_MOUSE)
def test_a_stall_is_reported_with_its_endpoint(monfs, urbstat):
    with monfs.usbmon_text(1) as usbmon:
        monfs.fault(1, 1, "stall")  # the keyboard's next report stalls
        stalled = usbmon.expect(kind="C", status=-32)
    assert expect_line(urbstat, r"^stall (\S+)").group(1) == stalled.address


@pytest.mark.monfs(config=KEYBOARD_AND_MOUSE)
def test_hot_unplug_is_reported_once_and_the_other_device_goes_on(monfs, urbstat):
    with monfs.usbmon_text(1) as usbmon:
        monfs.unplug(1, 1)  # the keyboard: its pending interrupt URB ends with -71
        gone = usbmon.expect(kind="C", status=-71)
        usbmon.expect(kind="C", status=0, device=lambda d: d not in (1, gone.device))  # the mouse goes on
    assert expect_line(urbstat, r"^gone (\S+)").group(1) == "%d:%03d" % (gone.bus, gone.device)
    urbstat.send_signal(signal.SIGINT)
    m = expect_line(urbstat, r"^total (\d+) completions, (\d+) errors")
    assert int(m.group(1)) > int(m.group(2)) >= 1
    assert urbstat.wait(30) == 0
