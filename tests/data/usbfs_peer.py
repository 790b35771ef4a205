#!/usr/bin/env python3
"""A vendor device for the usbfs tests, as a monfs `kind: external` peer
(protocol: docs/external-devices.md). Its data endpoints are in setting 1
of interface 1, so no driver submits there but the program:

- control: vendor IN request 0x01 answers b"monfs" (up to wLength); vendor
  OUT request 0x02 takes its data; vendor request 0x03 stalls (-32);
  vendor IN request 0x04 is never answered; vendor IN request 0x05
  answers b"late" after wValue milliseconds;
  SET_INTERFACE succeeds; anything else stalls.
- bulk OUT 0x02 takes everything and keeps it; bulk IN 0x81 answers with
  what OUT took, reversed, once there is some (until then it NAKs: the
  URB stays pending).
- interrupt IN 0x85: 4 bytes, a counter.
- isochronous IN 0x83: each packet full of its index; OUT 0x04 taken.
With an argument, every line it gets is appended to that file.
"""
import sys
import time

log = open(sys.argv[1], "a") if len(sys.argv) > 1 else None
stored = b""
waiting = []  # bulk IN URBs (id, len) not answered yet
count = 0


def out(s):
    print(s, flush=True)


def answer_bulk_in():
    global stored
    while waiting and stored:
        i, ln = waiting.pop(0)
        d = stored[::-1][:ln]
        stored = b""
        out(f"complete {i} 0 {len(d)} {d.hex()}")


for line in sys.stdin:
    if log:
        log.write(line)
        log.flush()
    w = line.split()
    if not w:
        continue
    if w[0] == "unlink":
        waiting = [x for x in waiting if x[0] != w[1]]
        continue
    if w[0] != "submit":
        continue
    i, ep, ty, ln = w[1], w[2], w[3], int(w[4])
    if ty == "C":
        s = bytes.fromhex(w[5])
        rt, req = s[0], s[1]
        if rt == 0xC0 and req == 0x01:
            d = b"monfs"[:ln]
            out(f"complete {i} 0 {len(d)} {d.hex()}")
        elif rt == 0xC0 and req == 0x04:
            pass  # never answered: the URB stays pending
        elif rt == 0xC0 and req == 0x05:
            time.sleep(int.from_bytes(s[2:4], "little") / 1000)
            d = b"late"[:ln]
            out(f"complete {i} 0 {len(d)} {d.hex()}")
        elif rt == 0x40 and req == 0x02:
            out(f"complete {i} 0 {ln}")
        elif rt == 0x01 and req == 0x0B:
            out(f"complete {i} 0 0")
        else:
            out(f"complete {i} -32 0")
    elif ty == "B" and ep == "02":
        stored += bytes.fromhex(w[6]) if w[6] != "-" else b""
        out(f"complete {i} 0 {ln}")
        answer_bulk_in()
    elif ty == "B" and ep == "81":
        waiting.append((i, ln))
        answer_bulk_in()
    elif ty == "I" and ep == "85":
        count += 1
        out(f"complete {i} 0 4 {count:08x}")
    elif ty == "Z" and ep == "83":
        lens = [int(x) for x in w[7:]]
        data = "".join(("%02x" % k) * pl for k, pl in enumerate(lens))
        out(f"complete {i} 0 {sum(lens)} {data} " + " ".join(f"0:{pl}" for pl in lens))
    elif ty == "Z":
        lens = [int(x) for x in w[7:]]
        out(f"complete {i} 0 {sum(lens)} - " + " ".join(f"0:{x}" for x in lens))
