#!/usr/bin/env python3
"""An FTDI USB serial adapter of your own for monfs's `kind: external`: an
FT232R-style loopback (ids 0403:6001, bcdDevice 0x0600, what ftdi_sio binds
as /dev/ttyUSB0), written with the Python package's peer class
(monfs.peer.FtdiDevice). Every byte the host writes comes back to its
reads; each baud rate, line setting, DTR/RTS change and flow control
setting the host sends is logged.

  python3 examples/ftdi_loopback.py --dump ftdi.desc    # its descriptors file
  # in the configuration: descriptors: ftdi.desc
  #   command: [python3, examples/ftdi_loopback.py, --log, /tmp/serial]

--chip NAME (before --dump or --log) picks another chip of
monfs.descriptors.FTDI_CHIPS (FT232B, FT232H, FT2232H, ...). --log FILE
writes a line per event: `baud RATE`, `data BITS PARITY STOP BREAK`,
`lines DTR RTS` (`-` for a line left alone), `flow KIND`, `reset`,
`bytes HEX`. Run from a checkout (it finds python/monfs beside it) or with
the package installed. tests/tty.rs drives it with pyserial and stty.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402


def loopback(chip: str, log=None):
    class Loopback(peer.FtdiDevice):
        def _note(self, line: str) -> None:
            if log:
                with open(log, "a") as f:
                    f.write(line + "\n")

        def on_baud_rate(self, baud):
            self._note("baud %d" % baud)

        def on_line_settings(self, bits, parity, stop, brk):
            self._note("data %d %d %d %d" % (bits, parity, stop, brk))

        def on_control_lines(self, dtr, rts):
            self._note("lines %s %s" % tuple("-" if v is None else str(int(v)) for v in (dtr, rts)))

        def on_flow(self, kind):
            self._note("flow %s" % kind)

        def on_reset(self):
            self._note("reset")

        def on_data(self, data):
            self._note("bytes %s" % data.hex())
            self.write(data)

    Loopback.chip = chip
    return Loopback()


if __name__ == "__main__":
    args = sys.argv[1:]
    chip = "FT232R"
    if args[:1] == ["--chip"]:
        chip, args = args[1], args[2:]
    if args[:1] == ["--dump"]:
        with open(args[1], "wb") as f:
            f.write(d.ftdi(chip))
        sys.exit(0)
    log = args[1] if args[:1] == ["--log"] else None
    peer.main(loopback(chip, log), args[2:] if log else args)
