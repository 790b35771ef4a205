#!/usr/bin/python3
"""The host side of the kernel-vm guest's hot-plug steps.

scripts/kernel-vm starts this beside qemu. It connects to qemu's QMP socket
and to the socket of the guest's second serial port (/dev/ttyS1), and
serves the guest's requests there, one line each, answering each with one
line that starts with "ok" or "error":

    unplug kbd|stick|audio|serial device_del, then wait for DEVICE_DELETED
    plug kbd|stick|audio|serial   device_add on the device's port (again)
    keys kbd TEXT                 type TEXT (the rest of the line; \\n is
                                  Enter) on the keyboard: each key down,
                                  then up, a pause after each (an upper
                                  case letter: shift down, key down, key
                                  up, shift up)
    rel mouse DX DY               a relative move of the mouse
    btn mouse|tablet BUTTON       press, pause, release (left, right, middle)
    abs tablet X Y                an absolute position of the tablet
                                  (qemu's range: 0..0x7fff)
    bye                           the guest is done: exit

The keyboard is qemu's usb-kbd with id kbd on port 1 of xhci.0; the stick
is usb-storage with id ustick on port 3, first with drive `stick` (-drive
if=none) and after its re-add with the block node `stick2` (-blockdev, its
own image), since a drive of -drive is deleted with the device that used
it. The audio device is usb-audio with id uaudio on port 1 of xhci2.0
(audiodev snd0). The serial device (step K4f) is usb-serial, qemu's FTDI
FT232BM, with id userial on port 5 of xhci.0, which has no device at boot;
its chardev `userial0` is a socket that serial-echo.py serves (a loopback),
and always-plugged keeps it attached whether or not that socket has a
client. device_del leaves the chardev, so it plugs again. The answer to `unplug stick` says whether the drive
`stick` was still there afterwards. Everything is logged to LOG.

Input goes through QMP input-send-event. Its `device` names a display
device (a console), not an input device: qemu routes an event to the
first input handler bound to that console whose kind (key, rel, abs, btn)
matches, and an event without `device` to the first unbound handler that
matches, the last activated first (usb-kbd on its realize, usb-mouse and
usb-tablet when the guest first polls them, i.e. opens their event node).
usb-mouse has no `display` property; usb-tablet (id tablet) is bound to
the console of the VGA card (-device VGA,id=vga0, its head 0), so the
tablet's events name vga0 and no device-less button press can reach it;
the mouse's and the keyboard's name none: the mouse is then the only
unbound USB handler of relative moves and buttons (PS/2's mouse, bound to
nothing either, comes after it once the guest has polled it), the
keyboard the first of keys.

    hotplug.py QMP_SOCKET SERIAL_SOCKET LOG
"""
import json
import os
import socket
import sys
import time

DEVICES = {
    "kbd": {"driver": "usb-kbd", "id": "kbd", "bus": "xhci.0", "port": "1"},
    "stick": {"driver": "usb-storage", "id": "ustick", "bus": "xhci.0", "port": "3", "drive": "stick2"},
    "audio": {"driver": "usb-audio", "id": "uaudio", "bus": "xhci2.0", "port": "1", "audiodev": "snd0",
              "buffer": 393216},
    "serial": {"driver": "usb-serial", "id": "userial", "bus": "xhci.0", "port": "5", "chardev": "userial0",
               "always-plugged": True},
}


# input-send-event's `device` per input device (see above)
CONSOLE = {"kbd": None, "mouse": None, "tablet": "vga0"}
PAUSE = 0.15
QCODES = {" ": "spc", "\n": "ret", ".": "dot", ",": "comma", "-": "minus", "/": "slash"}


def qcode(ch):
    if ch.isascii() and (ch.isdigit() or ch.islower()):
        return ch
    if ch in QCODES:
        return QCODES[ch]
    raise RuntimeError("no qcode for %r" % ch)


def send(qmp, dev, *events):
    args = {"events": list(events)}
    if CONSOLE[dev]:
        args["device"] = CONSOLE[dev]
    qmp.execute("input-send-event", **args)


def key(name, down):
    return {"type": "key", "data": {"down": down, "key": {"type": "qcode", "data": name}}}


def type_text(qmp, text):
    for ch in text.replace("\\n", "\n"):
        shift = ch.isascii() and ch.isupper()
        k = qcode(ch.lower() if shift else ch)
        if shift:
            send(qmp, "kbd", key("shift", True))
            time.sleep(PAUSE)
        send(qmp, "kbd", key(k, True))
        time.sleep(PAUSE)
        send(qmp, "kbd", key(k, False))
        time.sleep(PAUSE)
        if shift:
            send(qmp, "kbd", key("shift", False))
            time.sleep(PAUSE)


def input_request(qmp, req):
    """keys/rel/btn/abs requests; False when REQ is none of them"""
    words = req.split()
    if words[0] == "keys" and len(words) >= 3 and words[1] == "kbd":
        type_text(qmp, req.split(None, 2)[2] if req.count(" ") >= 2 else "")
    elif words[0] == "rel" and len(words) == 4 and words[1] == "mouse":
        send(qmp, "mouse", {"type": "rel", "data": {"axis": "x", "value": int(words[2])}},
             {"type": "rel", "data": {"axis": "y", "value": int(words[3])}})
    elif words[0] == "abs" and len(words) == 4 and words[1] == "tablet":
        send(qmp, "tablet", {"type": "abs", "data": {"axis": "x", "value": int(words[2], 0)}},
             {"type": "abs", "data": {"axis": "y", "value": int(words[3], 0)}})
    elif words[0] == "btn" and len(words) == 3 and words[1] in ("mouse", "tablet"):
        for down in (True, False):
            send(qmp, words[1], {"type": "btn", "data": {"down": down, "button": words[2]}})
            time.sleep(PAUSE)
    else:
        return False
    time.sleep(PAUSE)
    return True


def connect(path, deadline):
    while True:
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(path)
            return s
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class Lines:
    """Lines from a stream socket, with a timeout."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def readline(self, timeout=None):
        end = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self.buf:
            if end is not None:
                left = end - time.monotonic()
                if left <= 0:
                    return None
                self.sock.settimeout(left)
            try:
                data = self.sock.recv(4096)
            except (TimeoutError, socket.timeout):
                return None
            finally:
                self.sock.settimeout(None)
            if not data:
                return b""
            self.buf += data
        ln, _, self.buf = self.buf.partition(b"\n")
        return ln + b"\n"


class Qmp:
    def __init__(self, sock, log):
        self.sock, self.lines, self.log = sock, Lines(sock), log
        self.events = []
        self.log("qmp greeting %s" % self.lines.readline().decode().strip())
        self.execute("qmp_capabilities")

    def read(self, timeout=None):
        ln = self.lines.readline(timeout)
        if ln is None:
            return None
        if not ln:
            raise EOFError("qmp closed")
        self.log("qmp <- %s" % ln.decode().strip())
        return json.loads(ln)

    def execute(self, cmd, **args):
        req = {"execute": cmd}
        if args:
            req["arguments"] = args
        self.log("qmp -> %s" % json.dumps(req))
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        while True:
            msg = self.read()
            if "event" in msg:
                self.events.append(msg)
                continue
            if "error" in msg:
                raise RuntimeError("%s: %s" % (cmd, msg["error"].get("desc")))
            return msg.get("return")

    def wait_event(self, name, device, secs):
        end = time.monotonic() + secs
        while True:
            for i, e in enumerate(self.events):
                if e["event"] == name and e.get("data", {}).get("device") == device:
                    del self.events[i]
                    return True
            left = end - time.monotonic()
            msg = self.read(left) if left > 0 else None
            if msg is None:
                return False
            self.events.append(msg)


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    qmp_path, ser_path, log_path = sys.argv[1:]
    logf = open(log_path, "a", buffering=1)
    t0 = time.monotonic()

    def log(s):
        logf.write("%8.3f %s\n" % (time.monotonic() - t0, s))

    deadline = time.monotonic() + 60
    qmp = Qmp(connect(qmp_path, deadline), log)
    ser = connect(ser_path, deadline)
    log("connected to %s and %s" % (qmp_path, ser_path))
    rf = Lines(ser)
    while True:
        raw = rf.readline()
        if not raw:
            log("serial closed")
            return
        req = raw.decode("ascii", "replace").strip("\r\n")
        if not req:
            continue
        log("guest: %s" % req)
        words = req.split()
        try:
            if words == ["bye"]:
                ser.sendall(b"ok bye\n")
                return
            if words and words[0] in ("keys", "rel", "abs", "btn"):
                if not input_request(qmp, req):
                    raise RuntimeError("unknown request %r" % req)
                answer = "ok"
                log("answer: %s" % answer)
                ser.sendall(answer.encode() + b"\n")
                continue
            if len(words) != 2 or words[0] not in ("plug", "unplug") or words[1] not in DEVICES:
                raise RuntimeError("unknown request %r" % req)
            dev = DEVICES[words[1]]
            if words[0] == "unplug":
                qmp.execute("device_del", id=dev["id"])
                if not qmp.wait_event("DEVICE_DELETED", dev["id"], 20):
                    raise RuntimeError("no DEVICE_DELETED for %s within 20 s" % dev["id"])
                answer = "ok"
                if words[1] == "stick":
                    names = [b.get("device") for b in qmp.execute("query-block") or []]
                    answer += " drive-stick-after-device_del=%s" % ("present" if "stick" in names else "deleted")
            else:
                qmp.execute("device_add", **dev)
                answer = "ok"
        except (RuntimeError, EOFError, OSError, ValueError) as e:
            answer = "error %s" % e
        log("answer: %s" % answer)
        ser.sendall(answer.encode() + b"\n")


if __name__ == "__main__":
    main()
