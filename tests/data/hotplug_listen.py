"""Inside `monfs run`: hear the uevents of a plug and an unplug.

Listens on netlink group 1 (the kernel's) with its own socket and runs
`udevadm monitor --udev --subsystem-match=usb/usb_device` (libudev's
group-2 monitor, whose socket filter checks the message's hashes), plugs a
mouse on bus 1 port 3 with `monfs ctl`, waits for its events, unplugs it,
waits again. Prints one line per kernel event ("ACTION NAME DRIVER SEQNUM"),
then "udev: ACTION NAME" per udevadm event, then the database entry of the
mouse as it was while plugged. Gives up (exit 1) after 60 s without an
expected event.
"""
import os
import select
import socket
import subprocess
import sys
import time

k = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15)
k.bind((0, 1))
mon = subprocess.Popen(
    ["udevadm", "monitor", "--udev", "--subsystem-match=usb/usb_device"],
    stdout=subprocess.PIPE, text=True)
# Its header comes once its monitor is set up.
while "UDEV - the event" not in mon.stdout.readline():
    pass

kernel = []
db = None


def hear(until_action, name):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([k], [], [], 1)
        if not r:
            continue
        data, (pid, _groups) = k.recvfrom(8192)
        if pid != 0:
            continue
        parts = data.split(b"\0")
        env = dict(p.decode().split("=", 1) for p in parts[1:] if b"=" in p)
        if env.get("SUBSYSTEM") != "usb":
            continue
        n = env["DEVPATH"].rsplit("/", 1)[1]
        kernel.append(f"{env['ACTION']} {n} {env.get('DRIVER', '-')} {env['SEQNUM']}")
        if env["ACTION"] == until_action and n == name:
            return
    print("timed out", kernel)
    sys.exit(1)


subprocess.run(["monfs", "ctl", "plug", "1", "3", "hid-mouse"], check=True,
               stdout=subprocess.DEVNULL)
hear("bind", "1-3")
db = open("/run/udev/data/c189:2").read()
subprocess.run(["monfs", "ctl", "unplug", "1", "3"], check=True, stdout=subprocess.DEVNULL)
hear("remove", "1-3")
udev = []
while len(udev) < 5:
    line = mon.stdout.readline()
    if line.startswith("UDEV"):
        w = line.split()
        udev.append(f"udev: {w[2]} {w[3].rsplit('/', 1)[1]}")
mon.kill()
print("\n".join(kernel))
print("\n".join(udev))
print(db, end="")
