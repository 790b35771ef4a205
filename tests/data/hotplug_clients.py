"""Inside `monfs run`: pyudev's Monitor and GUsb's device signals hear a
plug and an unplug.

Plugs a mouse on bus 1 port 3 with `monfs ctl`, waits until pyudev (a
libudev monitor on group 2, filtered on usb/usb_device) has heard its "add"
and "bind" and GUsb has emitted device-added, then unplugs it and waits for
"remove" and device-removed. Prints what each heard, one line each; exit 1
after 60 s without one.
"""
import subprocess
import sys
import time

import gi
import pyudev

gi.require_version("GUsb", "1.0")
from gi.repository import GLib, GUsb  # noqa: E402

ctx = pyudev.Context()
mon = pyudev.Monitor.from_netlink(ctx)
mon.filter_by(subsystem="usb", device_type="usb_device")
mon.start()

usb = GUsb.Context.new()
heard = []
usb.connect("device-added", lambda _c, d: heard.append(
    f"gusb added {d.get_vid():04x}:{d.get_pid():04x} {d.get_bus()}:{d.get_address()}"))
usb.connect("device-removed", lambda _c, d: heard.append(
    f"gusb removed {d.get_bus()}:{d.get_address()}"))
# GUsb lists what is there first (the keyboard): not a hot-plug.
usb.enumerate()
loop = GLib.MainContext.default()
end = time.monotonic() + 5
while time.monotonic() < end and loop.pending():
    loop.iteration(False)
heard.clear()


def wait(want_udev, want_gusb):
    deadline = time.monotonic() + 60
    got_udev = None
    while time.monotonic() < deadline:
        while loop.pending():
            loop.iteration(False)
        d = mon.poll(timeout=0.05)
        while d is not None:
            heard.append(f"pyudev {d.action} {d.sys_name} {d.get('ID_MODEL')}")
            if d.action == want_udev:
                got_udev = d
            d = mon.poll(timeout=0)
        if got_udev is not None and any(h.startswith(want_gusb) for h in heard):
            return got_udev
    print("timed out:", heard)
    sys.exit(1)


subprocess.run(["monfs", "ctl", "plug", "1", "3", "hid-mouse"], check=True,
               stdout=subprocess.DEVNULL)
d = wait("bind", "gusb added")
# What the device's database entry gives pyudev for the same device.
again = pyudev.Devices.from_sys_path(ctx, d.sys_path)
heard.append(f"from_sys_path {again.get('ID_VENDOR_ID')}:{again.get('ID_MODEL_ID')} "
             f"initialized={again.is_initialized}")
subprocess.run(["monfs", "ctl", "unplug", "1", "3"], check=True, stdout=subprocess.DEVNULL)
wait("remove", "gusb removed")
print("\n".join(heard))
