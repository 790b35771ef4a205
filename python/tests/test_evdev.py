"""monfs.evdev and the input devices' descriptor builders, without a mount:
the structures and every ioctl number and event code against the kernel's
own header (compiled with gcc), the reads on a FIFO standing in for a node,
find() on a made-up sysfs, and the report descriptors byte for byte against
qemu's."""

import errno
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from monfs import descriptors as d
from monfs import evdev as ev
from monfs.evdev import AbsInfo, Evdev, InputEvent, InputId

# --- the structures ---------------------------------------------------------


def test_input_event_packs_as_the_64_bit_struct():
    e = InputEvent(1700000000, 123456, ev.EV_KEY, ev.KEY_A, 1)
    b = e.pack()
    assert len(b) == ev.EVENT_SIZE == 24
    assert b == struct.pack("=qqHHi", 1700000000, 123456, 1, 30, 1)
    assert InputEvent.unpack(b) == e
    assert e.time == pytest.approx(1700000000.123456)
    assert e.triple == (ev.EV_KEY, ev.KEY_A, 1)
    neg = InputEvent(5, 0, ev.EV_REL, ev.REL_WHEEL, -3)
    assert InputEvent.unpack(neg.pack()).value == -3
    many = e.pack() + neg.pack() + InputEvent(5, 0, 0, ev.SYN_REPORT, 0).pack()
    assert InputEvent.unpack_all(many) == [e, neg, InputEvent(5, 0, 0, 0, 0)]
    with pytest.raises(ValueError, match="whole input events"):
        InputEvent.unpack_all(many[:-1])
    assert e.describe() == "1700000000.123456 EV_KEY KEY_A 1"
    assert InputEvent(0, 7, ev.EV_KEY, ev.BTN_LEFT, 0).describe() == "0.000007 EV_KEY BTN_LEFT 0"
    assert ev.code_name(ev.EV_LED, ev.LED_CAPSL) == "LED_CAPSL"
    assert ev.code_name(ev.EV_SYN, ev.SYN_DROPPED) == "SYN_DROPPED"
    assert ev.code_name(ev.EV_KEY, 0x2FE) == "0x2fe"
    assert ev.type_name(ev.EV_SYN) == "EV_SYN" and ev.type_name(ev.EV_REP) == "EV_REP" and ev.type_name(9) == "0x09"


def test_id_absinfo_and_bitmaps():
    assert InputId(3, 0x0627, 1, 0x0100) == (ev.BUS_USB, 0x627, 1, 0x100)
    assert AbsInfo(5, 0, 0x7FFF) == (5, 0, 32767, 0, 0, 0)
    assert ev.bits_to_set(b"\x03\x00\x80") == {0, 1, 23}
    assert ev.set_to_bits({0, 1, 23}, 3) == b"\x03\x00\x80"
    assert ev.bits_to_set(ev.set_to_bits({ev.KEY_A, ev.BTN_LEFT, ev.KEY_MAX}, 96)) == {30, 0x110, 0x2FF}
    with pytest.raises(ValueError):
        ev.set_to_bits({16}, 2)
    # The buffer EVIOCGBIT gets for each type: the kernel's bitmap of X_MAX bits.
    assert {t: ev._bitmap_size(m) for t, m in ev.MAX_CODE.items()} == {
        0: 4, ev.EV_KEY: 96, ev.EV_REL: 2, ev.EV_ABS: 8, ev.EV_MSC: 1, ev.EV_SW: 3, ev.EV_LED: 2,
        ev.EV_SND: 1, ev.EV_FF: 16}


# --- ioctl numbers and codes against linux/input.h -----------------------------

#: Every ioctl the module computes from arguments, with the arguments to check.
CALLS = [
    ("EVIOCGNAME", (256,)), ("EVIOCGPHYS", (256,)), ("EVIOCGUNIQ", (64,)), ("EVIOCGPROP", (4,)),
    ("EVIOCGMTSLOTS", (4 + 4 * 16,)), ("EVIOCGKEY", (96,)), ("EVIOCGLED", (2,)), ("EVIOCGSND", (1,)),
    ("EVIOCGSW", (3,)), ("EVIOCGBIT", (0, 4)), ("EVIOCGBIT", (ev.EV_KEY, 96)), ("EVIOCGBIT", (ev.EV_REL, 2)),
    ("EVIOCGBIT", (ev.EV_ABS, 8)), ("EVIOCGBIT", (ev.EV_FF, 16)), ("EVIOCGABS", (ev.ABS_X,)),
    ("EVIOCGABS", (ev.ABS_MT_SLOT,)), ("EVIOCGABS", (ev.ABS_MAX,)), ("EVIOCSABS", (ev.ABS_Y,)),
]


def constants() -> Dict[str, int]:
    return {n: getattr(ev, n) for n in ev.__all__
            if isinstance(getattr(ev, n), int) and n not in ("EVENT_SIZE",)}


def kernel_values(tmp_path: Path, expressions: Dict[str, str]) -> Dict[str, int]:
    """The values of C expressions, compiled against the machine's
    linux/input.h; the test fails (it does not skip) without gcc or the
    header."""
    gcc = shutil.which("gcc")
    assert gcc, "gcc is missing: the ioctl numbers are checked against linux/input.h with it"
    assert Path("/usr/include/linux/input.h").exists(), "linux/input.h is missing (linux-libc-dev)"
    lines = ['    printf("%%s %%llu\\n", "%s", (unsigned long long)(%s));' % (k, v) for k, v in expressions.items()]
    src = tmp_path / "values.c"
    src.write_text("#include <stdio.h>\n#include <stddef.h>\n#include <linux/input.h>\n"
                   "int main(void) {\n%s\n    return 0;\n}\n" % "\n".join(lines))
    exe = tmp_path / "values"
    out = subprocess.run([gcc, "-Wall", "-Werror", "-o", str(exe), str(src)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, check=True)
    return {k: int(v) for k, v in (line.rsplit(" ", 1) for line in run.stdout.splitlines())}


def test_ioctl_numbers_and_codes_are_the_kernel_headers(tmp_path):
    ours = constants()
    exprs = {n: n for n in ours}
    for name, args in CALLS:
        key = "%s(%s)" % (name, ",".join(map(str, args)))
        exprs[key] = key
        ours[key] = getattr(ev, name)(*args)
    structs = {
        "sizeof(struct input_event)": 24, "sizeof(struct input_id)": 8, "sizeof(struct input_absinfo)": 24,
        "sizeof(struct input_mask)": 16, "offsetof(struct input_event, type)": 16,
        "offsetof(struct input_event, value)": 20, "offsetof(struct input_mask, codes_ptr)": 8,
    }
    exprs.update({k: k for k in structs})
    ours.update(structs)
    kernel = kernel_values(tmp_path, exprs)
    wrong = {k: (hex(ours[k]), hex(kernel[k])) for k in ours if ours[k] != kernel[k]}
    assert not wrong, "ours, the kernel's: %s" % wrong
    # The numbers the brief and the kernel's documentation spell out, checked by hand too.
    assert ev.EVIOCGVERSION == 0x80044501 and ev.EVIOCGID == 0x80084502
    assert ev.EVIOCGRAB == 0x40044590 and ev.EVIOCGNAME(256) == 0x81004506
    assert ev.EVIOCGBIT(ev.EV_KEY, 96) == 0x80604521 and ev.EVIOCGABS(ev.ABS_X) == 0x80184540
    assert len(kernel) > 250


def test_every_constant_of_the_table_is_checked():
    # The header test above takes the names from __all__: a constant left
    # out of it would go unchecked.
    names = [n for n in dir(ev) if re.fullmatch(r"(EV|SYN|KEY|BTN|REL|ABS|MSC|LED|REP|SW|SND|FF|BUS|INPUT_PROP)_"
                                                r"[A-Z0-9_]+", n)]
    assert names and set(names) <= set(ev.__all__)
    for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789":
        assert "KEY_" + letter in ev.__all__


# --- the node's reads and errors, on a FIFO ------------------------------------

def fifo(tmp_path: Path) -> str:
    path = str(tmp_path / "event0")
    os.mkfifo(path)
    return path


def write(path_fd: int, *events: InputEvent) -> None:
    os.write(path_fd, b"".join(e.pack() for e in events))


def ev_at(sec: int, type_: int, code: int, value: int) -> InputEvent:
    return InputEvent(sec, 0, type_, code, value)


def test_reads_events_and_frames(tmp_path):
    path = fifo(tmp_path)
    with Evdev(path) as node:
        fd = node.fileno()  # a FIFO opened for reading and writing: writes come back to reads
        syn = ev_at(1, ev.EV_SYN, ev.SYN_REPORT, 0)
        scan, key = ev_at(1, ev.EV_MSC, ev.MSC_SCAN, 0x70004), ev_at(1, ev.EV_KEY, ev.KEY_A, 1)
        write(fd, scan, key, syn)
        assert node.read_event(timeout=5) == scan  # one struct a read
        assert node.read_events(timeout=5) == [key, syn]  # what is waiting, in one read
        with pytest.raises(TimeoutError, match="no input event"):
            node.read_event(timeout=0.05)
        # frames: up to each SYN_REPORT, without it; what a read brought past a frame waits for the next
        up = ev_at(2, ev.EV_KEY, ev.KEY_A, 0)
        drop = ev_at(3, ev.EV_SYN, ev.SYN_DROPPED, 0)
        rel = ev_at(4, ev.EV_REL, ev.REL_X, -5)
        write(fd, scan, key, syn, up, syn, drop, syn, rel)
        frames = node.frames(timeout=5)
        assert next(frames) == [scan, key]
        assert next(frames) == [up]
        assert [e.triple for e in next(frames)] == [(ev.EV_SYN, ev.SYN_DROPPED, 0)]
        with pytest.raises(TimeoutError):
            next(frames)  # REL_X came without its SYN_REPORT
        assert node.read_events(timeout=5) == [rel]  # kept, not lost
        assert node.write_event(ev.EV_LED, ev.LED_CAPSL, 1) == 24
        assert node.read_event(timeout=5) == InputEvent(0, 0, ev.EV_LED, ev.LED_CAPSL, 1)
    assert node.fd == -1
    node.close()


def test_nonblocking_read_and_ioctl_errors_are_oserrors(tmp_path):
    path = fifo(tmp_path)
    with Evdev(path, nonblock=True) as node:
        with pytest.raises(BlockingIOError):
            node.read_event()
        # A FIFO answers no EVIOC* ioctl: the error is the ioctl's own.
        for call in (node.version, node.id, node.name, node.properties, node.keys, node.repeat, node.grab,
                     node.revoke, lambda: node.bits(ev.EV_KEY), lambda: node.abs_info(ev.ABS_X),
                     lambda: node.set_clock(1), lambda: node.mask(ev.EV_KEY)):
            with pytest.raises(OSError) as err:
                call()
            assert err.value.errno == errno.ENOTTY
    with pytest.raises(FileNotFoundError):
        Evdev(str(tmp_path / "event9"))


# --- find -----------------------------------------------------------------------

def test_find_reads_sysfs_class_input(tmp_path):
    def add(node: str, name: str, vendor: str, product: str) -> None:
        dev = tmp_path / "class/input" / node / "device"
        (dev / "id").mkdir(parents=True)
        (dev / "name").write_text(name + "\n")
        (dev / "id/vendor").write_text(vendor + "\n")
        (dev / "id/product").write_text(product + "\n")

    add("event10", "QEMU QEMU USB Keyboard", "0627", "0001")
    add("event2", "QEMU QEMU USB Tablet", "0627", "0001")
    add("event3", "Other", "1234", "5678")
    (tmp_path / "class/input/input7").mkdir()  # the input device itself, not a node
    (tmp_path / "class/input/mouse0").mkdir()
    sys = str(tmp_path)
    assert ev.find(sys=sys) == ["/dev/input/event2", "/dev/input/event3", "/dev/input/event10"]
    assert ev.find(vendor=0x0627, product=0x0001, sys=sys) == ["/dev/input/event2", "/dev/input/event10"]
    assert ev.find(name="QEMU QEMU USB Keyboard", sys=sys) == ["/dev/input/event10"]
    assert ev.find(name="Other", vendor=0x0627, sys=sys) == []
    assert ev.find(sys=str(tmp_path / "nothing")) == []


# --- the report descriptors ----------------------------------------------------

QEMU_KBD = ("05 01 09 06 a1 01 75 01 95 08 05 07 19 e0 29 e7 15 00 25 01 81 02 95 01 75 08 81 01 95 05 75 01"
            " 05 08 19 01 29 05 91 02 95 01 75 03 91 01 95 06 75 08 15 00 25 ff 05 07 19 00 29 ff 81 00 c0")
# qemu's usb-mouse as Debian's 6.12 read it in scripts/kernel-vm: 5 buttons.
QEMU_MOUSE = ("05 01 09 02 a1 01 09 01 a1 00 05 09 19 01 29 05 15 00 25 01 95 05 75 01 81 02 95 01 75 03 81 01"
              " 05 01 09 30 09 31 09 38 15 81 25 7f 75 08 95 03 81 06 c0 c0")
QEMU_TABLET = ("05 01 09 02 a1 01 09 01 a1 00 05 09 19 01 29 03 15 00 25 01 95 03 75 01 81 02 95 01 75 05 81 01"
               " 05 01 09 30 09 31 15 00 26 ff 7f 35 00 46 ff 7f 75 10 95 02 81 02 05 01 09 38 15 81 25 7f 35 00"
               " 45 00 75 08 95 01 81 06 c0 c0")


def report_bits(desc: bytes) -> Dict[str, int]:
    """The bits of each main item kind's report, walking the short items
    (a Report ID adds its byte), as hid-core sizes reports."""
    size = count = 0
    numbered = False
    bits = {"input": 0, "output": 0, "feature": 0}
    i, depth = 0, 0
    while i < len(desc):
        prefix = desc[i]
        n = (0, 1, 2, 4)[prefix & 3]
        data = int.from_bytes(desc[i + 1:i + 1 + n], "little")
        tag = prefix & 0xFC
        if tag == 0x74:
            size = data
        elif tag == 0x94:
            count = data
        elif tag == 0x84:
            numbered = True
        elif tag in (0x80, 0x90, 0xB0):
            bits[{0x80: "input", 0x90: "output", 0xB0: "feature"}[tag]] += size * count
        elif tag == 0xA0:
            depth += 1
        elif tag == 0xC0:
            depth -= 1
        i += 1 + n
    assert depth == 0 and i == len(desc)
    return {k: v + (8 if numbered and v else 0) for k, v in bits.items()}


def test_qemus_report_descriptors_byte_for_byte():
    assert d.keyboard_report() == bytes.fromhex(QEMU_KBD)
    assert d.mouse_report() == d.mouse_report(5, wheel=True) == bytes.fromhex(QEMU_MOUSE)
    assert d.tablet_report() == bytes.fromhex(QEMU_TABLET)
    assert (len(d.keyboard_report()), len(d.mouse_report()), len(d.tablet_report())) == (63, 52, 74)
    # Each input helper makes a report of its descriptor's size.
    assert report_bits(d.keyboard_report()) == {"input": 64, "output": 8, "feature": 0}
    assert report_bits(d.mouse_report())["input"] == 8 * len(d.mouse_input()) == 32
    assert report_bits(d.tablet_report())["input"] == 8 * len(d.tablet_input()) == 48
    assert report_bits(d.consumer_report())["input"] == 8 * len(d.consumer_input()) == 16
    assert report_bits(d.consumer_report(2))["input"] == 8 * len(d.consumer_input(0xE9, 2)) == 24


def test_mouse_and_consumer_variants():
    plain = d.mouse_report(wheel=False)
    assert b"\x09\x38" not in plain and b"\x95\x02\x81\x06" in plain
    assert report_bits(plain)["input"] == 24
    three = d.mouse_report(3)
    assert b"\x29\x03" in three and b"\x95\x01\x75\x05\x81\x01" in three and report_bits(three)["input"] == 32
    eight = d.mouse_report(8)
    assert b"\x75\x05" not in eight and report_bits(eight)["input"] == 32
    with pytest.raises(ValueError):
        d.mouse_report(0)
    assert d.consumer_report() == bytes.fromhex("05 0c 09 01 a1 01 15 00 26 ff 03 19 00 2a ff 03 75 10 95 01 81 00 c0")
    assert d.consumer_report(3) == bytes.fromhex(
        "05 0c 09 01 a1 01 85 03 15 00 26 ff 03 19 00 2a ff 03 75 10 95 01 81 00 c0")


def test_item_builders_and_input_reports():
    assert d.physical_minimum(0) == b"\x35\x00" and d.physical_maximum(0x7FFF) == b"\x46\xff\x7f"
    assert d.physical_maximum(-1) == b"\x45\xff"
    assert d.unit_exponent(-2) == b"\x55\x0e" and d.unit(0x11) == b"\x65\x11" and d.unit(0) == b"\x65\x00"
    with pytest.raises(ValueError):
        d.unit_exponent(8)
    assert d.keyboard_input() == bytes(8)
    assert d.keyboard_input(0x02, [0x04, 0x05]) == bytes([2, 0, 4, 5, 0, 0, 0, 0])  # Shift, a, b
    assert d.keyboard_input(keys=range(4, 11)) == bytes([0, 0]) + bytes([1] * 6)  # 7 keys: rollover
    with pytest.raises(ValueError):
        d.keyboard_input(0x100)
    assert d.mouse_input(1, -1, 127, -127) == bytes([1, 0xFF, 0x7F, 0x81])
    with pytest.raises(ValueError):
        d.mouse_input(dx=128)
    assert d.tablet_input(4, 0x7FFF, 1, -1) == bytes([4, 0xFF, 0x7F, 1, 0, 0xFF])
    with pytest.raises(ValueError):
        d.tablet_input(x=0x8000)
    assert d.consumer_input(0xE9) == b"\xe9\x00" and d.consumer_input(0xCD, 1) == b"\x01\xcd\x00"


def names_in(text: str) -> List[str]:
    return re.findall(r"`([a-z_]+)\(", text)


def test_docs_name_the_new_api(repo):
    doc = (repo / "docs/python.md").read_text()
    section = doc.split("## Input devices: monfs.evdev", 1)[1].split("\n## ", 1)[0]
    for name in names_in(section):
        assert any(hasattr(o, name) for o in (d, ev, Evdev, InputEvent)), name
    for name in ("read_event", "frames", "bits", "abs_info", "grab", "revoke", "set_clock", "find",
                 "keyboard_report", "mouse_report", "tablet_report", "consumer_report", "keyboard_input"):
        assert name in names_in(section), name
