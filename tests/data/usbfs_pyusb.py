#!/usr/bin/env python3
"""pyusb (Debian's python3-usb, libusb backend) drives the usbfs_peer.py
device of tests/usbfs.rs, found by enumeration as on a real machine: run
under `monfs run`, where /dev/bus/usb and the USB part of /sys are the
mount's. Prints one line per step for the test to compare.
"""
import time

import usb.core
import usb.util

# The device enumerates in the mount's first second or so: enumerate
# again until it is there, as a program waiting for a device would.
dev = None
for _ in range(300):
    dev = usb.core.find(idVendor=0x1234, idProduct=0x5679)
    if dev is not None:
        break
    time.sleep(0.1)
if dev is None:
    print("not found")
    raise SystemExit(1)
print("found", dev.bus, dev.address, usb.util.get_string(dev, dev.iProduct))
print("control", bytes(dev.ctrl_transfer(0xC0, 0x01, 0, 0, 16)).hex())
try:
    dev.ctrl_transfer(0xC0, 0x03, 0, 0, 4)
    print("stall missing")
except usb.core.USBError as e:
    print("stall", e.errno)
dev.set_interface_altsetting(interface=1, alternate_setting=1)
print("bulk out", dev.write(0x02, b"\x01\x02\x03\x04"))
print("bulk in", bytes(dev.read(0x81, 64)).hex())
print("interrupt in", bytes(dev.read(0x85, 4)).hex())
try:
    dev.read(0x81, 64, timeout=50)
    print("timeout missing")
except usb.core.USBTimeoutError:
    print("timeout")
usb.util.dispose_resources(dev)
