#!/usr/bin/env python3
"""A scripted USB keyboard for tests/input.rs: qemu's boot keyboard report
descriptor (monfs.descriptors.keyboard_report) as an `external` device,
with the ids 1209:0004. Once the file named by --go exists, each interrupt
IN URB takes the next report of a fixed script (key A, Shift+W, A and B
together, an ErrorRollOver, all up), then NAKs; every output report
(SET_REPORT: the LEDs) is logged to --log as `output ID HEX`.

  hid_keyboard_peer.py --dump FILE            # its descriptors file
  hid_keyboard_peer.py --go FILE --log FILE   # the peer (monfs's command)
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402

REPORT = d.keyboard_report()

SCRIPT = [
    d.keyboard_input(0, [0x04]),  # A down
    d.keyboard_input(),  # A up
    d.keyboard_input(0x02, [0x1A]),  # Shift, W down
    d.keyboard_input(0x02),  # W up
    d.keyboard_input(),  # Shift up
    d.keyboard_input(0, [0x04, 0x05]),  # A and B down
    d.keyboard_input(0, [0x05]),  # A up
    bytes([0, 0, 1, 1, 1, 1, 1, 1]),  # ErrorRollOver: ignored
    d.keyboard_input(),  # B up
]


def dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0004, bcd_usb=0x0200, manufacturer=1, product=2, serial=3),
        d.configuration(d.interface(0, [d.endpoint(0x81, "interrupt", 8, interval=4)],
                                    cls=3, subclass=1, protocol=1, extra=d.hid(len(REPORT)))),
    )


class Keyboard(peer.HidDevice):
    report_descriptor = REPORT

    def __init__(self, go: str, log: str) -> None:
        super().__init__()
        self.go, self.log, self.next = go, log, 0

    @peer.endpoint(0x81)
    def report(self, length: int):
        if self.next >= len(SCRIPT) or not os.path.exists(self.go):
            return None
        self.next += 1
        return SCRIPT[self.next - 1]

    def on_report(self, kind: str, report_id: int, data: bytes) -> None:
        super().on_report(kind, report_id, data)
        with open(self.log, "a") as f:
            f.write("%s %d %s\n" % (kind, report_id, bytes(data).hex()))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dump"]:
        with open(args[1], "wb") as f:
            f.write(dump())
        sys.exit(0)
    opts = dict(zip(args[0:4:2], args[1:4:2]))
    peer.main(Keyboard(opts["--go"], opts["--log"]), args[4:])
