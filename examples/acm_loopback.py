#!/usr/bin/env python3
"""A USB serial device of your own for monfs's `kind: external`: a CDC ACM
loopback (ids 1209:0005, what cdc_acm binds as /dev/ttyACM0), written with
the Python package's peer class (monfs.peer.AcmDevice). Every byte the host
writes comes back to its reads; each line setting, DTR/RTS change and break
the host sends is logged.

  python3 examples/acm_loopback.py --dump acm.desc    # its descriptors file
  # in the configuration: descriptors: acm.desc
  #   command: [python3, examples/acm_loopback.py, --log, /tmp/serial]

--log FILE writes a line per event: `coding BAUD STOP PARITY BITS`,
`lines DTR RTS`, `break DURATION`, `data HEX`. Run from a checkout (it finds
python/monfs beside it) or with the package installed. tests/tty.rs drives
it with pyserial and stty.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402


def dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0005, bcd_usb=0x0200, device_class=2, manufacturer=1, product=2, serial=3),
        d.configuration(d.cdc_acm(0, 1, max_packet_size=512)),
    )


class Loopback(peer.AcmDevice):
    def __init__(self, log=None):
        super().__init__()
        self.log = log

    def _note(self, line: str) -> None:
        if self.log:
            with open(self.log, "a") as f:
                f.write(line + "\n")

    def on_line_coding(self, baud, stop, parity, bits):
        super().on_line_coding(baud, stop, parity, bits)
        self._note("coding %d %d %d %d" % (baud, stop, parity, bits))

    def on_control_lines(self, dtr, rts):
        super().on_control_lines(dtr, rts)
        self._note("lines %d %d" % (dtr, rts))

    def on_break(self, duration):
        super().on_break(duration)
        self._note("break %d" % duration)

    def on_data(self, data):
        self._note("data %s" % data.hex())
        self.write(data)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dump"]:
        with open(args[1], "wb") as f:
            f.write(dump())
        sys.exit(0)
    log = args[1] if args[:1] == ["--log"] else None
    peer.main(Loopback(log), args[2:] if log else args)
