#!/usr/bin/env python3
"""A HID device of your own for monfs's `kind: external`, written with the
Python package's peer class (monfs.peer.HidDevice): a vendor-defined
device (usage page 0xFF00, ids 1209:0003) with numbered 8-byte reports, as
FIDO keys, UPS and relay boards and firmware updaters present:

* input report 1 on interrupt IN 0x81 (bInterval 7: every 8 ms at high
  speed), each poll: a counter byte, then 7 bytes of 0x11;
* output report 2 on interrupt OUT 0x02 (hidraw's write, hidapi's
  hid_write);
* feature report 3 (HIDIOCSFEATURE/HIDIOCGFEATURE, hid_send_feature_report
  and hid_get_feature_report): GET_REPORT answers what was last set.

  python3 examples/hid_vendor.py --dump vendor.desc    # its descriptors file
  # in the configuration: descriptors: vendor.desc
  #   command: [python3, examples/hid_vendor.py, --log, /tmp/reports]

--log FILE writes each report the host sends, a line each: TYPE ID HEX.
Run from a checkout (it finds python/monfs beside it) or with the package
installed. tests/hidraw.rs drives it with hidapi (tests/c/hidraw_vendor.c).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

from monfs import descriptors as d  # noqa: E402
from monfs import peer  # noqa: E402

REPORT = d.vendor_report(input_id=1, output_id=2, feature_id=3, size=8)


def dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0003, bcd_usb=0x0200, manufacturer=1, product=2, serial=3),
        d.configuration(d.interface(0, [d.endpoint(0x81, "interrupt", 64, interval=7),
                                        d.endpoint(0x02, "interrupt", 64, interval=7)],
                                    cls=3, extra=d.hid(len(REPORT)))),
    )


class Vendor(peer.HidDevice):
    report_descriptor = REPORT
    out_endpoint = 0x02
    numbered = True

    def __init__(self, log=None):
        super().__init__()
        self.log = log
        self.count = 0
        self.features[3] = bytes(range(0xF0, 0xF8))

    @peer.endpoint(0x81)
    def report(self, length):
        self.count = (self.count + 1) & 0xFF
        return bytes([1, self.count]) + b"\x11" * 7

    def on_report(self, kind, report_id, data):
        super().on_report(kind, report_id, data)
        if kind == "feature" and report_id == 3:
            self.features[3] = bytes(data)
        if self.log:
            with open(self.log, "a") as f:
                f.write("%s %d %s\n" % (kind, report_id, bytes(data).hex()))


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--dump"]:
        with open(args[1], "wb") as f:
            f.write(dump())
        sys.exit(0)
    log = None
    if args[:1] == ["--log"]:
        log, args = args[1], args[2:]
    peer.main(Vendor(log), args)
