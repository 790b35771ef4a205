#!/usr/bin/env python3
"""A microcontroller board of your own for monfs's `kind: external`: an FTDI
FT232R USB serial adapter (0403:6001, what ftdi_sio binds as /dev/ttyUSB0)
wired to a chip with a serial boot loader, entered as ESP32 and Arduino
boards enter theirs: through DTR and RTS. Written with
monfs.peer.FtdiDevice.

  python3 examples/serial_bootloader.py --dump board.desc   # its descriptors file
  # in the configuration: descriptors: board.desc
  #   command: [python3, examples/serial_bootloader.py]

The board's auto-reset circuit: RTS low (asserted) holds the chip in reset;
DTR asserted while it leaves reset selects the boot loader; otherwise it
runs its application, which prints "app: hello" once and ignores input.
Flashers pulse the lines exactly so (esptool's classic reset: DTR off and
RTS on, then DTR on and RTS off, then DTR off). The boot loader speaks a
line protocol at any baud rate (each command ends with LF):

  sync              OK sync
  version           OK monfs-boot 1.0
  erase             OK erased        (the 1 KiB of flash becomes 0xff)
  write ADDR HEX    OK ADDR N        (N bytes written at ADDR)
  read ADDR LEN     OK HEX
  run               OK run           (leaves the boot loader: "app: hello")
  anything else     ERR what

Run from a checkout (it finds python/monfs beside it) or with the package
installed; python/tests/test_tty.py flashes it with pyserial.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402

FLASH = 1024


class Board(peer.FtdiDevice):
    chip = "FT232R"

    def __init__(self) -> None:
        super().__init__()
        self.dtr = False
        self.rts = False
        self.in_reset = False
        self.mode = "app"
        self.flash = bytearray(b"\xff" * FLASH)
        self.line = b""
        self.boots = []

    def say(self, text: str) -> None:
        self.write(text.encode() + b"\n")

    def on_control_lines(self, dtr, rts) -> None:
        super().on_control_lines(dtr, rts)
        if dtr is not None:
            self.dtr = dtr
        if rts is not None:
            self.rts = rts
        if self.rts and not self.in_reset:
            self.in_reset = True
        elif not self.rts and self.in_reset:
            # Out of reset: the boot strap (DTR) picks what runs.
            self.in_reset = False
            self.mode = "boot" if self.dtr else "app"
            self.boots.append(self.mode)
            self.line = b""
            self.say("boot: waiting for download" if self.mode == "boot" else "app: hello")

    def command(self, cmd: str) -> None:
        w = cmd.split()
        try:
            if w == ["sync"]:
                self.say("OK sync")
            elif w == ["version"]:
                self.say("OK monfs-boot 1.0")
            elif w == ["erase"]:
                self.flash[:] = b"\xff" * FLASH
                self.say("OK erased")
            elif len(w) == 3 and w[0] == "write":
                addr, data = int(w[1], 16), bytes.fromhex(w[2])
                if addr + len(data) > FLASH:
                    raise ValueError("past the end of flash")
                self.flash[addr:addr + len(data)] = data
                self.say("OK %x %d" % (addr, len(data)))
            elif len(w) == 3 and w[0] == "read":
                addr, n = int(w[1], 16), int(w[2])
                if addr + n > FLASH:
                    raise ValueError("past the end of flash")
                self.say("OK " + self.flash[addr:addr + n].hex())
            elif w == ["run"]:
                self.say("OK run")
                self.mode = "app"
                self.say("app: hello")
            else:
                self.say("ERR unknown command")
        except ValueError as e:
            self.say("ERR %s" % e)

    def on_data(self, data: bytes) -> None:
        super().on_data(data)
        if self.mode != "boot" or self.in_reset:
            return
        self.line += data
        while b"\n" in self.line:
            raw, self.line = self.line.split(b"\n", 1)
            cmd = raw.decode(errors="replace").strip()
            if cmd:
                self.command(cmd)


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dump"]:
        with open(args[1], "wb") as f:
            f.write(d.ftdi("FT232R"))
        sys.exit(0)
    peer.main(Board(), args)
