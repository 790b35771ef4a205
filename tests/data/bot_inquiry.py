"""Talk SCSI to the first USB flash drive (46f4:0001) over the bulk-only
transport with pyusb, as a mass-storage tool does once it took the interface
from usb-storage: INQUIRY, READ CAPACITY(10), READ(10) of block 1, MODE
SENSE(6) of all pages, and an unknown command with REQUEST SENSE after it.
Prints one line per step."""

import struct

import usb.core

dev = usb.core.find(idVendor=0x46F4, idProduct=0x0001)
if dev.is_kernel_driver_active(0):
    dev.detach_kernel_driver(0)
usb.util.claim_interface(dev, 0)
tag = 0


def command(cdb, length):
    global tag
    tag += 1
    cbw = b"USBC" + struct.pack("<IIBBB", tag, length, 0x80, 0, len(cdb)) + bytes(cdb).ljust(16, b"\0")
    dev.write(0x02, cbw)
    data = bytes(dev.read(0x81, length)) if length else b""
    csw = bytes(dev.read(0x81, 13))
    sig, t, residue, status = struct.unpack("<4sIIB", csw)
    assert sig == b"USBS" and t == tag, csw
    command.residue = residue
    return data, status


data, st = command([0x12, 0, 0, 0, 36, 0], 36)
print("inquiry", st, data[8:16].decode().strip(), data[16:32].decode().strip(), data[32:36].decode(),
      "residue=%d" % command.residue)
data, st = command([0x25] + [0] * 9, 8)
last, block = struct.unpack(">II", data)
print("capacity", st, last + 1, block)
data, st = command([0x28, 0, 0, 0, 0, 1, 0, 0, 1, 0], 512)
print("read", st, data[:18].decode())
data, st = command([0x1A, 0, 0x3F, 0, 192, 0], 192)
print("mode", st, len(data), "%02x" % data[0], "residue=%d" % command.residue)
data, st = command([0xC7, 0, 0, 0, 0, 0], 0)
print("unknown", st)
data, st = command([0x03, 0, 0, 0, 18, 0], 18)
print("sense", st, "key=%x asc=%x" % (data[2], data[12]))
usb.util.release_interface(dev, 0)
dev.attach_kernel_driver(0)
print("attached")
