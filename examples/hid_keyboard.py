#!/usr/bin/env python3
"""A USB HID boot keyboard for monfs's `kind: external` devices: it types a
string on its interrupt IN endpoint (0x81), one key-down and one key-up
report per character, then stays idle until monfs closes its input.

Run by monfs (`command: [python3, examples/hid_keyboard.py, "hello"]`, with
`descriptors:` a keyboard's sysfs dump such as tests/data/sysfs/qemu-usb-kbd).

Options, before the text:
  --socket PATH    listen on the Unix socket PATH and serve the one
                   connection monfs makes (`socket: PATH`) instead of
                   standard input and output
  --ep0 DUMP       answer the enumeration too (`ep0: peer`): the device and
                   configuration descriptors from the sysfs dump DUMP,
                   SET_ADDRESS and SET_CONFIGURATION
  --string N=TEXT  with --ep0: string descriptor N (repeatable)
  --mute-ep0       with --ep0: never answer GET_DESCRIPTOR (a dead device)
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


def string_descriptor(text):
    b = text.encode("utf-16-le")
    return bytes([2 + len(b), 3]) + b


def standard(s, length, dump, strings):
    """The answer (status, data) to a standard device request, or None."""
    value = s[2] | s[3] << 8
    if s[0] == 0x80 and s[1] == 0x06:
        kind, index = value >> 8, value & 0xFF
        if kind == 1:
            return 0, dump[:18][:length]
        if kind == 2:
            at, n = 18, 0  # the configurations follow the device descriptor
            while at + 4 <= len(dump):
                total = dump[at + 2] | dump[at + 3] << 8
                if n == index:
                    return 0, dump[at:at + total][:length]
                at, n = at + total, n + 1
            return -32, b""
        if kind == 3:
            if index == 0:
                return 0, bytes([4, 3, 0x09, 0x04])[:length]
            if index in strings:
                return 0, string_descriptor(strings[index])[:length]
            return -32, b""
        return -32, b""
    if s[0] == 0x00 and s[1] in (0x05, 0x09):  # SET_ADDRESS, SET_CONFIGURATION
        return 0, b""
    if s[0] == 0x80 and s[1] == 0x00:  # GET_STATUS
        return 0, bytes(2)[:length]
    return None


def main():
    args = sys.argv[1:]
    sock_path, dump, strings, mute = None, None, {}, False
    while args and args[0].startswith("--"):
        opt = args.pop(0)
        if opt == "--socket":
            sock_path = args.pop(0)
        elif opt == "--ep0":
            with open(args.pop(0), "rb") as f:
                dump = f.read()
        elif opt == "--string":
            n, t = args.pop(0).split("=", 1)
            strings[int(n)] = t
        elif opt == "--mute-ep0":
            mute = True
        else:
            sys.exit("hid_keyboard.py: unknown option " + opt)
    text = args[0] if len(args) > 0 else "hello from python\n"
    gap = float(args[1]) if len(args) > 1 else 0.05
    out = sys.stdout
    fd = sys.stdin.fileno()
    if sock_path is not None:
        import socket
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(sock_path)
        listener.listen(1)
        print("hid_keyboard.py: listening on " + sock_path, file=sys.stderr, flush=True)
        conn, _ = listener.accept()
        listener.close()
        out = conn.makefile("w")
        fd = conn.fileno()
    pending = []  # ids of interrupt IN URBs waiting for a report
    queue = list(reports(text))
    start = None  # typing starts once the host asked for the report descriptor
    next_at = 0.0
    buf = b""

    def send(line):
        out.write(line + "\n")
        out.flush()

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
                    std = standard(s, length, dump, strings) if dump else None
                    if std is not None and mute and s[1] == 0x06:
                        pass  # never answered: the host times out
                    elif std is not None:
                        st, data = std
                        send(("complete %d %d %d %s" % (urb, st, len(data), data.hex())).rstrip())
                    elif s[0] == 0x81 and s[1] == 0x06 and s[3] == 0x22:
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
