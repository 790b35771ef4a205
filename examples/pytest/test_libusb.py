"""A libusb program (libusb_echo.c, beside this file) against a device
written in Python, run under `monfs run`, where /dev/bus/usb and sysfs are
monfs's: its control and bulk transfers reach the peer, and a stall is
LIBUSB_ERROR_PIPE.

Needs libusb-1.0-0-dev (and pkg-config) to build the program."""

import shutil
import subprocess

import pytest

import monfs
from monfs import descriptors as d
from monfs import peer

SOURCE = __file__.replace("test_libusb.py", "libusb_echo.c")


class Echo(peer.Device):
    """Vendor-class device: bulk OUT 0x02 takes data, bulk IN 0x81 gives it
    back reversed; vendor request 0x01 is the firmware version. A payload
    starting with 0xff stalls."""

    def __init__(self):
        super().__init__()
        self.last = b""

    @peer.endpoint(0x02)
    def take(self, data):
        if data[:1] == b"\xff":
            raise peer.Stall()
        self.last = data

    @peer.endpoint(0x81)
    def give(self, length):
        return self.last[::-1] or None

    @peer.control(0xC0, 0x01)
    def version(self, setup, data):
        return bytes([1, 4])


DUMP = d.descriptors_file(
    d.device(0x1209, 0x0E40, manufacturer=1, product=2),
    d.configuration(d.interface(0, [d.endpoint(0x81, "bulk", 512), d.endpoint(0x02, "bulk", 512)])),
)


@pytest.fixture
def libusb_echo(tmp_path):
    exe = tmp_path / "libusb_echo"
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libusb-1.0"], check=True, capture_output=True,
                           text=True).stdout.split()
    subprocess.run([shutil.which("cc") or "cc", "-O2", "-Wall", "-o", str(exe), SOURCE] + flags, check=True)
    return exe


def config(path):
    return {"usb": {"buses": [{"bus": 1, "devices": [{
        "port": 1, "kind": "external", "descriptors": DUMP, "manufacturer": "monfs",
        "product": "Echo", "socket": path}]}]}}


@pytest.mark.parametrize("payload, expected", [("0102030405", "echo 0504030201"), ("ff00", "stall")])
def test_libusb_program_against_a_python_peer(libusb_echo, payload, expected):
    with peer.SocketPeer(Echo) as echo:
        out = monfs.run([str(libusb_echo), "1209:0e40", payload], config(echo.path), timeout=120)
        assert echo.error is None, echo.error
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["version 1.4", expected]
