"""Inside `monfs run`: plug a device with `monfs ctl plug --wait BUS PORTS
KIND` (it returns once the device's uevents are out) and print the kernel's
uevents (netlink group 1) it caused, one "ACTION NAME DRIVER" line each."""
import socket
import subprocess
import sys

k = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15)
k.bind((0, 1))
subprocess.run(["monfs", "ctl", "plug", "--wait"] + sys.argv[1:], check=True,
               stdout=subprocess.DEVNULL)
k.setblocking(False)
while True:
    try:
        data = k.recv(8192)
    except BlockingIOError:
        break
    env = dict(p.decode().split("=", 1) for p in data.split(b"\0")[1:] if b"=" in p)
    print(env["ACTION"], env["DEVPATH"].rsplit("/", 1)[1], env.get("DRIVER", "-"))
