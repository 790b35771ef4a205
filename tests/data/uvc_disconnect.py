"""Detach uvcvideo from the webcam's control interface with pyusb, as a
program that takes the whole camera does, and show what the driver's
disconnect did on the bus (usbmon's text interface, read from before the
detach): how many of the stream's isochronous URBs ended -2 (uvcvideo
kills them), then the SET_INTERFACE that puts the streaming interface
back to setting 0, and the setting sysfs shows after. Then attach uvcvideo
again: it binds, and its old stream stays over (setting 0)."""

import os

import usb.core

cam = usb.core.find(idVendor=0x046D, idProduct=0x0825)
intf1 = f"/sys/bus/usb/devices/{cam.bus}-{cam.port_number}:1.1/bAlternateSetting"
mon = open(f"/sys/kernel/debug/usb/usbmon/{cam.bus}u")
print("before", open(intf1).read().strip())
cam.detach_kernel_driver(0)
dev = f"{cam.bus}:{cam.address:03d}"
killed, set0 = 0, None
# Bounded in lines, not time: the stream's lines come on if nothing stops it.
for _ in range(20000):
    w = mon.readline().split()
    if len(w) < 5 or not w[3].endswith(dev + ":0") and not w[3].endswith(dev + ":1"):
        continue
    if w[2] == "C" and w[3].startswith("Zi:") and w[4].startswith("-2:"):
        killed += 1
    # The S line of SET_INTERFACE(interface 1, setting 0), then its C.
    if w[2] == "S" and w[3].startswith("Co:") and w[5:10] == ["01", "0b", "0000", "0001", "0000"]:
        set0 = w[0]
    elif set0 == w[0] and w[2] == "C":
        print("killed", "some" if killed else "none", "then set 0:", w[4])
        break
else:
    print("no SET_INTERFACE(1, 0) in 20000 lines")
print("after", open(intf1).read().strip())
cam.attach_kernel_driver(0)
drv = os.path.basename(os.readlink(f"/sys/bus/usb/devices/{cam.bus}-{cam.port_number}:1.0/driver"))
print("attached", drv, "setting", open(intf1).read().strip())
