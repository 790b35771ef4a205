#!/usr/bin/python3
"""The far end of qemu's usb-serial in the kernel-vm guest's step K4f: a loopback.

scripts/kernel-vm starts this beside qemu and hotplug.py. qemu's usb-serial
(an FTDI FT232BM that hotplug.py's `plug serial` adds on port 5 of xhci.0)
has the chardev `userial0`, a unix socket qemu listens on; this connects to
it and writes back every byte it reads, as a loopback plug (TXD to RXD) on a
real FTDI cable would. Each chunk is logged to LOG with its time and bytes.
It ends when qemu closes the socket, or on SIGTERM.

    serial-echo.py SOCKET LOG
"""
import socket
import sys
import time


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    path, log_path = sys.argv[1:]
    logf = open(log_path, "a", buffering=1)
    t0 = time.monotonic()

    def log(s):
        logf.write("%8.3f %s\n" % (time.monotonic() - t0, s))

    deadline = t0 + 60
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(path)
            break
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                log("could not connect to %s" % path)
                return 1
            time.sleep(0.1)
    log("connected to %s" % path)
    total = 0
    while True:
        try:
            data = s.recv(4096)
        except OSError as e:
            log("recv: %s" % e)
            break
        if not data:
            log("closed by qemu")
            break
        s.sendall(data)
        total += len(data)
        log("echoed %d bytes (%d in all): %r" % (len(data), total, data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
