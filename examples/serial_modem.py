#!/usr/bin/env python3
"""A USB modem of your own for monfs's `kind: external`: a CDC ACM device
(ids 1209:0007, what cdc_acm binds as /dev/ttyACM0) that answers Hayes AT
commands as a data modem does, written with monfs.peer.AcmDevice.

  python3 examples/serial_modem.py --dump modem.desc    # its descriptors file
  # in the configuration: descriptors: modem.desc
  #   command: [python3, examples/serial_modem.py]

Commands (each ends with CR; echoed while ATE1, the default):
  AT              OK
  ATE0 / ATE1     echo off / on, OK
  ATI             its identity, OK
  AT+GMR          its firmware version, OK
  AT+CSQ          +CSQ: 23,99 and OK (signal quality)
  ATD<number>     CONNECT 115200, and DCD goes up (a SERIAL_STATE
                  notification: TIOCMGET's TIOCM_CD, TIOCMIWAIT wakes)
  ATH             NO CARRIER when connected, DCD goes down; OK
  anything else   ERROR
Dropping DTR while connected hangs up as ATH does (as `&D2` modems do).
Run from a checkout (it finds python/monfs beside it) or with the package
installed; python/tests/test_tty.py drives it with pyserial.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402

IDENTITY = "monfs example modem"
VERSION = "1.0.0"


def dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0007, device_class=2, manufacturer=1, product=2, serial=3),
        d.configuration(d.cdc_acm(0, 1)),
    )


class Modem(peer.AcmDevice):
    def __init__(self) -> None:
        super().__init__()
        self.echo = True
        self.connected = False
        self.line = b""
        self.dsr = True
        self.set_serial_state(dsr=True)

    def reply(self, *lines: str) -> None:
        self.write(b"".join(b"\r\n" + x.encode() + b"\r\n" for x in lines))

    def carrier(self, on: bool) -> None:
        self.connected = on
        self.set_serial_state(dcd=on, dsr=True)

    def command(self, cmd: str) -> None:
        c = cmd.upper()
        if c == "AT":
            self.reply("OK")
        elif c in ("ATE0", "ATE1"):
            self.echo = c == "ATE1"
            self.reply("OK")
        elif c == "ATI":
            self.reply(IDENTITY, "OK")
        elif c == "AT+GMR":
            self.reply(VERSION, "OK")
        elif c == "AT+CSQ":
            self.reply("+CSQ: 23,99", "OK")
        elif c.startswith("ATD") and len(c) > 3:
            self.reply("CONNECT 115200")
            self.carrier(True)
        elif c == "ATH":
            if self.connected:
                self.carrier(False)
                self.reply("NO CARRIER")
            self.reply("OK")
        else:
            self.reply("ERROR")

    def on_data(self, data: bytes) -> None:
        super().on_data(data)
        if self.echo:
            self.write(data)
        for b in data:
            if b == 0x0D:
                cmd, self.line = self.line.decode(errors="replace").strip(), b""
                if cmd:
                    self.command(cmd)
            elif b != 0x0A:
                self.line += bytes([b])

    def on_control_lines(self, dtr: bool, rts: bool) -> None:
        super().on_control_lines(dtr, rts)
        if not dtr and self.connected:
            self.carrier(False)
            self.reply("NO CARRIER")


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dump"]:
        with open(args[1], "wb") as f:
            f.write(dump())
        sys.exit(0)
    peer.main(Modem(), args)
