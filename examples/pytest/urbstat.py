#!/usr/bin/env python3
"""urbstat: a small usbmon text monitor, the kind of tool a user tests with
monfs (it knows nothing about monfs).

    urbstat.py [USBMON_FILE]      (default /sys/kernel/debug/usb/usbmon/0u)

Prints `watching FILE` once open, then one line per notable completion:
`stall BUS:DEV:EP` (status -32), `error BUS:DEV:EP STATUS` (another error),
`gone BUS:DEV` the first time a device's URB ends with -71/-108 (unplugged);
on SIGINT or SIGTERM, `total N completions, M errors` and exit 0.
"""

import signal
import sys

completions = errors = 0


def summary(*_):
    print("total %d completions, %d errors" % (completions, errors), flush=True)
    sys.exit(0)


def main():
    global completions, errors
    path = sys.argv[1] if len(sys.argv) > 1 else "/sys/kernel/debug/usb/usbmon/0u"
    signal.signal(signal.SIGINT, summary)
    signal.signal(signal.SIGTERM, summary)
    gone = set()
    with open(path, "rb", buffering=0) as f:
        print("watching " + path, flush=True)
        pending = b""
        while True:
            chunk = f.read(4096)
            if not chunk:
                break
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                w = line.decode().split()
                if len(w) < 5 or w[2] != "C":
                    continue
                completions += 1
                _, bus, dev, ep = w[3].split(":")
                status = int(w[4].split(":")[0]) if w[4] != "s" else 0
                if status == 0:
                    continue
                errors += 1
                if status == -32:
                    print("stall %s:%s:%s" % (bus, dev, ep), flush=True)
                elif status in (-71, -108) and (bus, dev) not in gone:
                    gone.add((bus, dev))
                    print("gone %s:%s" % (bus, dev), flush=True)
                else:
                    print("error %s:%s:%s %d" % (bus, dev, ep, status), flush=True)


if __name__ == "__main__":
    main()
