#!/usr/bin/env python3
"""The program under test in test_umockdev.py: pyusb finds the vendor
device 1234:5679 and talks to it (a vendor request, a stalled one, bulk
and interrupt transfers), printing one line per step."""
import usb.core
import usb.util

dev = usb.core.find(idVendor=0x1234, idProduct=0x5679)
if dev is None:
    raise SystemExit("no device")
print("found", dev.bus, dev.address, usb.util.get_string(dev, dev.iProduct))
print("control", bytes(dev.ctrl_transfer(0xC0, 0x01, 0, 0, 16)).hex())
try:
    dev.ctrl_transfer(0xC0, 0x03, 0, 0, 4)
except usb.core.USBError as e:
    print("stall", e.errno)
print("bulk out", dev.write(0x02, b"\x01\x02\x03\x04"))
print("bulk in", bytes(dev.read(0x81, 64)).hex())
print("interrupt in", bytes(dev.read(0x85, 4)).hex())
print("interrupt in", bytes(dev.read(0x85, 4)).hex())
print("bulk out", dev.write(0x02, b"monfs"))
print("bulk in", bytes(dev.read(0x81, 64)).hex())
usb.util.dispose_resources(dev)
