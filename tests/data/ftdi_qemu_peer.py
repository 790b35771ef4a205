#!/usr/bin/env python3
"""qemu's usb-serial (its FT232BM emulation) as a monfs `external` peer,
for tests/tty_ftdi.rs's comparison with the kernel's measurement
(tests/data/kernel_ftdi/, made by scripts/kernel-vm's step K4f: qemu's
usb-serial hot-plugged, ftdi_sio's ttyUSB0, its chardev a loopback).

  ftdi_qemu_peer.py DESCRIPTORS_HEX_FILE

The descriptors are the measured device's (its sysfs `descriptors`, in
hex). The device side behaves as qemu's did: its latency timer reads 0;
CTS, DSR and DCD are up (modem status 0xb1); data packets carry line
status 0 and GET_MODEM_STATUS answers 0x60 (THRE, TEMT); the IN endpoint
NAKs while it has nothing to send; every byte the host writes comes back.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from monfs import peer  # noqa: E402


class QemuSerial(peer.FtdiDevice):
    chip = "FT232B"
    line_status = 0

    def __init__(self, desc: bytes):
        super().__init__()
        self.descriptors = desc
        self.latency = 0
        self.set_modem_lines(cts=True, dsr=True, dcd=True, notify=False)

    def on_data(self, data):
        self.write(data)


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        raw = bytes.fromhex(f.read().strip())
    peer.main(QemuSerial(raw), sys.argv[2:])
