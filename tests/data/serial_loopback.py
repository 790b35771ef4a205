#!/usr/bin/env python3
"""A cp210x or ch341 loopback for tests/tty_serial.rs: a
monfs.peer.Cp210xDevice or Ch341Device that sends every byte the host
writes back to its reads and logs what the host sets.

  serial_loopback.py --dump FILE cp210x PART      # the descriptors file
  serial_loopback.py --log FILE [--modem-after N] cp210x PART [counterfeit]
  serial_loopback.py --log FILE [--modem-after N] ch341 [VERSION] [limited]

The log has a line per event: `baud RATE`, `line BITS PARITY STOP`,
`lines DTR RTS` (`-` for a line left alone), `break 0|1`, `data HEX`, and
cp210x's `enable 0|1`, `flow CTL REPL XON XOFF`, `chars HEX`, `purge MASK`,
`events ESC`. With --modem-after N, the device raises DCD and RI (and drops
DSR) once it has looped N bytes back.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402


def note(log, line):
    if log:
        with open(log, "a") as f:
            f.write(line + "\n")


def tri(v):
    return "-" if v is None else str(int(v))


def cp210x(part, counterfeit, log, modem_after):
    class Loopback(peer.Cp210xDevice):
        pass

    Loopback.part = part
    Loopback.counterfeit = counterfeit

    class Logged(Loopback):
        looped = 0

        def on_baud_rate(self, baud, interface=0):
            note(log, "baud %d %d" % (interface, baud))

        def on_line_settings(self, bits, parity, stop, interface=0):
            note(log, "line %d %d %d %d" % (interface, bits, parity, stop))

        def on_control_lines(self, dtr, rts, interface=0):
            note(log, "lines %d %s %s" % (interface, tri(dtr), tri(rts)))

        def on_data(self, data, interface=0):
            note(log, "data %d %s" % (interface, data.hex()))
            self.write(data, interface)
            self.looped += len(data)
            if modem_after and self.looped >= modem_after:
                self.set_modem_lines(cts=True, dsr=False, ri=True, dcd=True, interface=interface)

        def answer_control(self, setup, data):
            got = super().answer_control(setup, data)
            n, v = setup.index, setup.value
            rt, req = setup.request_type, setup.request
            if rt == 0x41 and req == 0x00:
                note(log, "enable %d %d" % (n, v & 1))
            elif rt == 0x41 and req == 0x13:
                note(log, "flow %d %x %x %d %d" % ((n,) + self.ports[n].flow))
            elif rt == 0x41 and req == 0x19:
                note(log, "chars %d %s" % (n, bytes(data or b"").hex()))
            elif rt == 0x41 and req == 0x05:
                note(log, "break %d %d" % (n, v & 1))
            elif rt == 0x41 and req == 0x12:
                note(log, "purge %d %x" % (n, v))
            elif rt == 0x41 and req == 0x15:
                note(log, "events %d %x" % (n, v))
            return got

    return Logged()


def ch341(version, limited, log, modem_after):
    class Logged(peer.Ch341Device):
        looped = 0

        def on_baud_rate(self, baud):
            note(log, "baud %d" % baud)

        def on_line_settings(self, bits, parity, stop):
            note(log, "line %d %d %d" % (bits, parity, stop))

        def on_control_lines(self, dtr, rts):
            note(log, "lines %d %d" % (dtr, rts))

        def on_data(self, data):
            note(log, "data %s" % data.hex())
            self.write(data)
            self.looped += len(data)
            if modem_after and self.looped >= modem_after:
                self.set_modem_lines(cts=True, dsr=False, ri=True, dcd=True)

        def answer_control(self, setup, data):
            got = super().answer_control(setup, data)
            if setup.request_type == 0x40 and setup.request == 0x9A and setup.value == 0x1805:
                note(log, "break %d" % int(self.breaks[-1]))
            return got

    Logged.version = version
    Logged.limited = limited
    return Logged()


def main(argv):
    if argv[:1] == ["--dump"]:
        out, chip = argv[1], argv[2]
        blob = d.cp210x(argv[3]) if chip == "cp210x" else d.ch341()
        with open(out, "wb") as f:
            f.write(blob)
        return
    log, modem_after = None, 0
    while argv and argv[0].startswith("--"):
        if argv[0] == "--log":
            log = argv[1]
        elif argv[0] == "--modem-after":
            modem_after = int(argv[1])
        argv = argv[2:]
    if argv[0] == "cp210x":
        dev = cp210x(argv[1], "counterfeit" in argv[2:], log, modem_after)
    else:
        version = int(argv[1], 16) if len(argv) > 1 and argv[1] != "limited" else 0x31
        dev = ch341(version, "limited" in argv[1:], log, modem_after)
    peer.main(dev, [])


if __name__ == "__main__":
    main(sys.argv[1:])
