#!/usr/bin/env python3
"""pyusb (Debian's python3-usb, libusb backend) drives the device of
tests/umockdev.rs (tests/data/usbfs_peer.py's protocol, its endpoints in
setting 0), found by enumeration: live under `monfs run`, then replayed
from its recording under Debian's `umockdev-run` and under `monfs
umockdev-run`. Prints one line per step, for the test to compare; with
`--list`, only lists the vendor 0x1234 devices from their descriptors (no
transfer), for a recording without a capture.
"""
import sys

import usb.core
import usb.util

devs = sorted(usb.core.find(find_all=True, idVendor=0x1234), key=lambda d: (d.bus, d.address))
if "--list" in sys.argv:
    for d in devs:
        eps = [f"{e.bEndpointAddress:02x}" for c in d for i in c for e in i]
        print(f"{d.bus} {d.address} {d.idVendor:04x}:{d.idProduct:04x} bcdUSB {d.bcdUSB:04x} "
              f"configs {d.bNumConfigurations} endpoints {' '.join(eps)}")
    sys.exit(0 if devs else 1)
if len(devs) != 1:
    print("found", len(devs))
    sys.exit(1)
dev = devs[0]
print("found", dev.bus, dev.address, usb.util.get_string(dev, dev.iProduct))
print("control", bytes(dev.ctrl_transfer(0xC0, 0x01, 0, 0, 16)).hex())
try:
    dev.ctrl_transfer(0xC0, 0x03, 0, 0, 4)
    print("stall missing")
except usb.core.USBError as e:
    print("stall", e.errno)
print("bulk out", dev.write(0x02, b"\x01\x02\x03\x04"))
print("bulk in", bytes(dev.read(0x81, 64)).hex())
print("interrupt in", bytes(dev.read(0x85, 4)).hex())
print("interrupt in", bytes(dev.read(0x85, 4)).hex())
print("bulk out", dev.write(0x02, b"monfs"))
print("bulk in", bytes(dev.read(0x81, 64)).hex())
usb.util.dispose_resources(dev)
