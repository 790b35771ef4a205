#!/usr/bin/env python3
"""g_serial's ACM function as a monfs `external` peer, for tests/tty.rs's
comparison with the kernel's measurement (tests/data/kernel_acm/, made by
scripts/kernel-vm's step K4t: g_serial on dummy_hcd, cdc_acm's ttyACM0,
tests/c/tty_acm.c --loopback on the gadget's ttyGS0).

  acm_gserial_peer.py DESCRIPTORS_HEX_FILE

The descriptors are the kernel's g_serial's (its sysfs `descriptors`, in
hex); the interfaces and endpoints come from them, not from
monfs.peer.AcmDevice's defaults. The device side behaves as the measured
one did: when ttyACM0 opened, g_serial had two SERIAL_STATE notifications
waiting for the host's notification URB, one with no lines (from the
configuration's activation) and one with DCD and DSR (the loopback had
ttyGS0 open); every byte the host writes comes back. It does not answer
SEND_BREAK: g_serial's ACM descriptor has no break capability
(bmCapabilities 2), so cdc_acm never sends one.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from monfs import peer  # noqa: E402


def layout(desc: bytes):
    """(control interface, notification IN, bulk IN, bulk OUT) from a
    descriptors file: the CDC communication interface (class 2) and the
    data interface (class 0x0a) of the first configuration."""
    at, cur = 18, None
    ctrl = notify = bulk_in = bulk_out = None
    while at + 2 <= len(desc) and desc[at] >= 2:
        d = desc[at : at + desc[at]]
        if d[1] == 4:
            cur = (d[2], d[5])
            if d[5] == 2 and ctrl is None:
                ctrl = d[2]
        elif d[1] == 5 and cur is not None:
            ep, kind = d[2], d[3] & 3
            if cur[1] == 2 and kind == 3 and ep & 0x80:
                notify = ep
            elif cur[1] == 0x0A and kind == 2:
                if ep & 0x80:
                    bulk_in = bulk_in or ep
                else:
                    bulk_out = bulk_out or ep
        at += desc[at]
    return ctrl, notify, bulk_in, bulk_out


def device_class(desc: bytes):
    ctrl, notify, bulk_in, bulk_out = layout(desc)

    class GSerial(peer.AcmDevice):
        control_interface = ctrl
        notify_endpoint = notify
        in_endpoint = bulk_in
        out_endpoint = bulk_out

        def __init__(self):
            super().__init__()
            self.descriptors = desc
            # what the measured g_serial had queued (usbmon's two C Ii
            # lines after the first open's S Ii): no lines, then DCD and DSR
            self.set_serial_state()
            self.set_serial_state(dcd=True, dsr=True)

        def on_data(self, data):
            self.write(data)

    return GSerial


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        raw = bytes.fromhex(f.read().strip())
    peer.main(device_class(raw)(), sys.argv[2:])
