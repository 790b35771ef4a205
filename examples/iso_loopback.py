#!/usr/bin/env python3
"""A vendor device with bulk and isochronous endpoints, as a monfs
`kind: external` peer (protocol: docs/external-devices.md; its descriptors
and configuration: tests/external.rs, `iso_config`).

It answers every control request (SET_INTERFACE) with success, takes the
bulk OUT data on 0x02, never answers the bulk IN URB on 0x81 (so the
configured libusb timeout discards it, -104), fills the packets of each
isochronous IN URB on 0x83 with 4, 5, ... bytes of a counter, packet 2 a
CRC error (-84), and takes each isochronous OUT URB on 0x04 whole. With an
argument, it also writes every line it gets to that file.

Standard library only: python3 examples/iso_loopback.py [LOG]
"""
import sys
log = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
n = 0
for line in sys.stdin:
    w = line.split()
    if log:
        log.write(line); log.flush()
    if w[0] != "submit":
        continue
    i, ep, ty, ln = w[1], w[2], w[3], int(w[4])
    if ty == "C":
        print(f"complete {i} 0 0", flush=True)
    elif ty == "B" and ep == "02":
        print(f"complete {i} 0 {ln}", flush=True)
    elif ty == "Z" and ep == "83":
        lens = [int(x) for x in w[7:]]
        pk = []; data = ""
        for k, pl in enumerate(lens):
            if k == 2:
                pk.append("-84:0"); continue
            m = min(pl, 4 + k)
            data += ("%02x" % (n & 255)) * m
            pk.append(f"0:{m}")
        n += 1
        tot = len(data) // 2
        print(f"complete {i} 0 {tot} {data} " + " ".join(pk), flush=True)
    elif ty == "Z":
        lens = [int(x) for x in w[7:]]
        print(f"complete {i} 0 {sum(lens)} - " + " ".join(f"0:{x}" for x in lens), flush=True)
