"""Detach the kernel driver of the audio device's and the webcam's control
interface with pyusb, then look at their streaming interface: its sysfs
`driver` link, whether libusb finds a kernel driver on it (USBDEVFS_GETDRIVER)
and whether it can be claimed (USBDEVFS_CLAIMINTERFACE). snd-usb-audio's
disconnect leaves the streaming interface bound to it until that interface
is detached too; uvcvideo's releases it. The audio device's control
interface given back (USBDEVFS_CONNECT) finds no driver while snd-usb-audio's
card lives on in the streaming interface (libusb: LIBUSB_ERROR_NOT_FOUND),
and binds once that one was let go (claimed here). Prints one line per
step."""

import os

import usb.core
import usb.util


def driver_link(dev, intf):
    path = f"/sys/bus/usb/devices/{dev.bus}-{dev.port_number}:1.{intf}/driver"
    return os.path.basename(os.readlink(path)) if os.path.lexists(path) else "-"


def attach(name, dev, intf):
    try:
        dev.attach_kernel_driver(intf)
        print(name, "attach", intf, 0, driver_link(dev, intf))
    except usb.core.USBError as e:
        print(name, "attach", intf, e.backend_error_code, driver_link(dev, intf))


def claim(name, dev, intf):
    try:
        usb.util.claim_interface(dev, intf)
        print(name, "claim", 0, driver_link(dev, intf))
    except usb.core.USBError as e:
        print(name, "claim", -e.errno if e.errno else "error")


for name, vid, pid in [("uac", 0x46F4, 0x0002), ("uvc", 0x046D, 0x0825)]:
    dev = usb.core.find(idVendor=vid, idProduct=pid)
    dev.detach_kernel_driver(0)
    print(name, "control", driver_link(dev, 0), "streaming", driver_link(dev, 1))
    print(name, "kernel driver active", dev.is_kernel_driver_active(1))
    claim(name, dev, 1)
    if dev.is_kernel_driver_active(1):
        attach(name, dev, 0)
        dev.detach_kernel_driver(1)
        print(name, "detached", driver_link(dev, 1))
        claim(name, dev, 1)
        attach(name, dev, 0)
        print(name, "streaming", driver_link(dev, 1))
    usb.util.dispose_resources(dev)
