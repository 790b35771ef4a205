"""tcpdump capturing from /dev/usbmon1 (through monfs's namespace helper)
while a device is unplugged: the capture holds the device's last URB failing
with -71, the other device's traffic goes on, and tcpdump drops nothing."""

import signal
import struct
import subprocess
import time

import pytest
from monfs import read_pcap
from monfs.pytest_plugin import expect_line

KEYBOARD_AND_MOUSE = {
    "usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [
        {"port": 1, "kind": "hid-keyboard"},
        {"port": 2, "kind": "hid-mouse"},
    ]}]},
}


def wait_for_capture(pcap, completions, timeout=30):
    """Wait until the capture `pcap` (written with -U) holds these
    successful completions, as (device, URB id)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            events = read_pcap(pcap)
        except (ValueError, struct.error, IndexError):  # a record half written
            events = []
        if completions <= {(e.devnum, e.id) for e in events if e.kind == "C" and e.status == 0}:
            return
        assert time.monotonic() < deadline, "tcpdump never wrote the completions usbmon showed"
        time.sleep(0.1)


@pytest.mark.monfs(config=KEYBOARD_AND_MOUSE)
def test_tcpdump_captures_an_unplug(monfs, tmp_path):
    pcap = tmp_path / "bus1.pcap"
    # Read bus 1 from the start, so the keyboard's interrupt URB is seen going out.
    with monfs.usbmon_text(1) as usbmon:
        monfs.wait_for_text("usb/devices", "QEMU USB Keyboard")
        monfs.wait_for_text("usb/devices", "QEMU USB Mouse")
        keyboard = int(monfs.read("sys/bus/usb/devices/1-1/devnum"))
        # usbhid is bound and polling: the unplug fails this URB, not a probe request.
        usbmon.expect(kind="S", xfer="I", device=keyboard)
        # -U: write each packet at once, so the file is complete when we stop it.
        tcpdump = subprocess.Popen(monfs.in_namespace(["tcpdump", "-U", "-i", "usbmon1", "-w", str(pcap)]),
                                   stderr=subprocess.PIPE)
        try:
            expect_line(tcpdump, r"^tcpdump: listening on usbmon1", stream="stderr")
            usbmon.collect(4, kind="C", status=0)       # traffic flows
            monfs.unplug(1, 1)                          # the keyboard
            gone = usbmon.expect(kind="C", status=-71)
            after = usbmon.collect(4, kind="C", status=0)  # the mouse goes on
            # tcpdump reads the ring at its own pace (a busy host delays
            # it): stop it once its file holds what usbmon showed.
            wait_for_capture(pcap, {(a.device, int(a.tag, 16)) for a in after})
            tcpdump.send_signal(signal.SIGINT)
            expect_line(tcpdump, r"^\d+ packets captured", stream="stderr")
            expect_line(tcpdump, r"^0 packets dropped by kernel$", stream="stderr")
            assert tcpdump.wait(30) == 0
        finally:
            if tcpdump.poll() is None:
                tcpdump.kill()
                tcpdump.wait()
    events = read_pcap(pcap)  # linktype 220: tcpdump mapped the ring
    failed = [e for e in events if e.kind == "C" and e.status == -71]
    assert [(e.busnum, e.devnum, e.epnum) for e in failed] == [(1, gone.device, 0x81)]
    assert failed[0].id == int(gone.tag, 16)
    later = events[events.index(failed[0]) + 1:]
    assert not [e for e in later if e.devnum == gone.device and e.endpoint != 0]
    assert {(e.devnum, e.id) for e in later if e.kind == "C" and e.status == 0} >= \
        {(a.device, int(a.tag, 16)) for a in after}

