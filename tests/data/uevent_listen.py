"""Inside `monfs run`: print the kernel's uevent broadcasts (netlink group
1, port id 0), COUNT of them, each as its `KEY=VALUE` lines; `ready` is
created in the current directory once the socket listens.

    uevent_listen.py COUNT
"""
import socket
import sys

s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 15)
s.bind((0, 1))
open("ready", "w").close()
for _ in range(int(sys.argv[1])):
    m, a = s.recvfrom(8192)
    if a[0] == 0:
        print("\n".join(m.decode().split("\0")[1:]), flush=True)
