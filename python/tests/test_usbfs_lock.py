"""usbfs's ioctls take the device lock, which the kernel's driver core holds
while it probes the interfaces' drivers: a program that opens a device's
node the moment it appears (on its `add` uevent, say) and detaches a driver
finds the driver bound, as on Linux, rather than racing its probe."""

import errno
import fcntl
import os
import struct
import threading

import monfs
from monfs import descriptors as d
from monfs import peer

# _IOWR('U', 18, struct usbdevfs_ioctl) and _IOR('U', 15, unsigned int).
USBDEVFS_IOCTL = 0xC0105512
USBDEVFS_CLAIMINTERFACE = 0x8004550F
USBDEVFS_DISCONNECT = 0x5516  # _IO('U', 22)


def keyboard_dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0001, manufacturer=1, product=2),
        d.configuration(d.interface(0, [d.endpoint(0x81, "interrupt", 8, interval=10)], cls=3, subclass=1,
                                    protocol=1, extra=d.hid(len(d.BOOT_KEYBOARD_REPORT)))),
    )


class SlowKeyboard(peer.HidDevice):
    """Holds its answer to usbhid's report descriptor request until told."""

    report_descriptor = d.BOOT_KEYBOARD_REPORT

    def __init__(self):
        super().__init__()
        self.asked = threading.Event()
        self.release = threading.Event()
        self.order = []

    def answer_control(self, setup, data):
        if setup.request_type == 0x81 and setup.request == 6 and setup.value >> 8 == 0x22:
            self.asked.set()
            self.release.wait(60)
            self.order.append("answered")
        return super().answer_control(setup, data)


def test_a_detach_waits_for_the_drivers_probe():
    kbd = peer.SocketPeer(SlowKeyboard())
    cfg = {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [
        {"port": 1, "kind": "external", "descriptors": keyboard_dump(), "socket": kbd.path}]}]}}
    with monfs.Mount(cfg, peers=[kbd]) as m:
        dev = kbd.device
        assert dev.asked.wait(60), "usbhid never asked for the report descriptor"
        node = m.path("dev/bus/usb/001/002")
        assert os.path.exists(node)  # the node is there while usbhid probes
        fd = os.open(node, os.O_RDWR)
        got = {}

        def detach():
            arg = bytearray(struct.pack("iiP", 0, USBDEVFS_DISCONNECT, 0))
            try:
                got["detach"] = fcntl.ioctl(fd, USBDEVFS_IOCTL, arg)
            except OSError as e:
                got["detach"] = -e.errno
            dev.order.append("detached")

        t = threading.Thread(target=detach)
        t.start()
        t.join(0.5)  # no bound: the detach returns only after the answer
        dev.order.append("releasing")
        dev.release.set()
        t.join(60)
        assert not t.is_alive()
        assert dev.order == ["releasing", "answered", "detached"]
        # usbhid was bound, and detached: the interface is the program's.
        assert got["detach"] == 0, errno.errorcode.get(-got["detach"], got["detach"])
        fcntl.ioctl(fd, USBDEVFS_CLAIMINTERFACE, struct.pack("I", 0))
        os.close(fd)
