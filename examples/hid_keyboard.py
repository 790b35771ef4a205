#!/usr/bin/env python3
"""A USB HID boot keyboard for monfs's `kind: external` devices: it types a
string on its interrupt IN endpoint (0x81), one key-down and one key-up
report per character, then stays idle until monfs closes its input.

Run by monfs (`command: [python3, examples/hid_keyboard.py, "hello"]`, with
`descriptors:` a keyboard's sysfs dump such as tests/data/sysfs/qemu-usb-kbd).
The protocol is in docs/external-devices.md ("Simulate your own device in
five minutes"). Standard library only.
"""

import os
import select
import sys
import time

# The standard HID boot keyboard report descriptor: modifiers, a reserved
# byte, 5 LEDs, 6 key codes; 63 bytes.
REPORT_DESCRIPTOR = bytes.fromhex(
    "05010906a101"  # Generic Desktop, Keyboard, Application collection
    "050719e029e7150025017501950881 02".replace(" ", "")  # 8 modifier bits
    + "9501750881 01".replace(" ", "")  # reserved byte
    + "950575010508190129059102"  # 5 LED bits (output)
    + "950175039101"  # LED padding
    + "95067508150025650507190029658100"  # 6 key codes
    + "c0"
)
assert len(REPORT_DESCRIPTOR) == 63, len(REPORT_DESCRIPTOR)

SHIFT = 0x02
PUNCT = {" ": 0x2C, "\n": 0x28, "-": 0x2D, "=": 0x2E, "[": 0x2F, "]": 0x30,
         "\\": 0x31, ";": 0x33, "'": 0x34, "`": 0x35, ",": 0x36, ".": 0x37,
         "/": 0x38, "\t": 0x2B}
SHIFTED = {"!": "1", "@": "2", "#": "3", "$": "4", "%": "5", "^": "6",
           "&": "7", "*": "8", "(": "9", ")": "0", "_": "-", "+": "=",
           "{": "[", "}": "]", "|": "\\", ":": ";", '"': "'", "~": "`",
           "<": ",", ">": ".", "?": "/"}


def usage(c):
    """(modifiers, usage) of character c on a US layout."""
    if "a" <= c <= "z":
        return 0, 4 + ord(c) - ord("a")
    if "A" <= c <= "Z":
        return SHIFT, 4 + ord(c) - ord("A")
    if "1" <= c <= "9":
        return 0, 0x1E + ord(c) - ord("1")
    if c == "0":
        return 0, 0x27
    if c in PUNCT:
        return 0, PUNCT[c]
    if c in SHIFTED:
        return SHIFT, usage(SHIFTED[c])[1]
    return 0, 0x2C  # anything else: a space


def reports(text):
    """Key-down and key-up boot reports that type text."""
    for c in text:
        mod, key = usage(c)
        yield bytes([mod, 0, key, 0, 0, 0, 0, 0])
        yield bytes(8)


def main():
    text = sys.argv[1] if len(sys.argv) > 1 else "hello from python\n"
    gap = float(sys.argv[2]) if len(sys.argv) > 2 else 0.05
    out = sys.stdout
    pending = []  # ids of interrupt IN URBs waiting for a report
    queue = list(reports(text))
    start = None  # typing starts once the host asked for the report descriptor
    next_at = 0.0
    buf = b""

    def send(line):
        out.write(line + "\n")
        out.flush()

    fd = sys.stdin.fileno()
    while True:
        now = time.monotonic()
        if start is not None and pending and queue and now >= next_at:
            send("complete %d 0 8 %s" % (pending.pop(0), queue.pop(0).hex()))
            next_at = now + gap
            continue
        timeout = None
        if start is not None and pending and queue:
            timeout = max(0.0, next_at - now)
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return  # monfs closed our input: the device is gone
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            w = line.decode().split(" ")
            if w[0] == "hello":
                print("hid_keyboard.py: plugged on bus %s port %s" % (w[2], w[3]),
                      file=sys.stderr)
            elif w[0] == "unlink":
                if int(w[1]) in pending:
                    pending.remove(int(w[1]))
            elif w[0] == "submit":
                urb, ep, typ, length, setup = int(w[1]), w[2], w[3], int(w[4]), w[5]
                if typ == "C":
                    s = bytes.fromhex(setup)
                    if s[0] == 0x81 and s[1] == 0x06 and s[3] == 0x22:
                        data = REPORT_DESCRIPTOR[:length]
                        send("complete %d 0 %d %s" % (urb, len(data), data.hex()))
                        start = time.monotonic()
                        next_at = start + 0.3
                    elif s[0] == 0x21 and s[1] in (0x0A, 0x09, 0x0B):
                        send("complete %d 0 %d" % (urb, length))  # SET_IDLE/REPORT/PROTOCOL
                    else:
                        send("complete %d -32 0" % urb)  # stall what we do not know
                elif ep == "81":
                    pending.append(urb)
                else:
                    send("complete %d -32 0" % urb)


if __name__ == "__main__":
    main()
