"""Parsers and builders, against the kernel's documented examples (no mount)."""

import importlib.util
import struct

import pytest

from monfs import BinaryEvent, parse_text_line, parse_trace_line
from monfs import descriptors as d


def test_text_control_submission_with_setup():
    e = parse_text_line("d5ea89a0 3575914555 S Ci:1:001:0 s a3 00 0000 0003 0004 4 <")
    assert (e.tag, e.timestamp, e.kind, e.xfer, e.direction) == ("d5ea89a0", 3575914555, "S", "C", "i")
    assert (e.bus, e.device, e.endpoint) == (1, 1, 0)
    assert e.setup == bytes([0xA3, 0x00, 0, 0, 3, 0, 4, 0])
    assert e.status is None and e.length == 4 and e.data_flag == "<" and e.data is None


def test_text_bulk_out_data_and_completion():
    e = parse_text_line("dd65f0e8 4128379752 S Bo:1:005:2 -115 31 = 55534243 ad000000 00800000 80010a28 "
                        "20000000 20000040 00000000 000000")
    assert e.status == -115 and e.length == 31 and e.data[:4] == b"USBC" and len(e.data) == 31
    c = parse_text_line("dd65f0e8 4128379808 C Bo:1:005:2 0 31 >")
    assert c.status == 0 and c.data_flag == ">" and not c.is_in and c.address == "1:005:2"


def test_text_interrupt_iso_error_and_t_format():
    i = parse_text_line("ffff9a1c8e3d4c00 1234600000 S Ii:1:002:1 -115:8 4 <")
    assert (i.status, i.interval) == (-115, 8)
    z = parse_text_line("ffff8880d6052600 647311522 C Zi:1:002:3 0:8:1022:1 8 0:0:4 0:256:5 -84:512:0 "
                        "0:768:7 0:1024:8 2048 = 00000000")
    assert (z.status, z.interval, z.start_frame, z.error_count, z.iso_count) == (0, 8, 1022, 1, 8)
    assert len(z.iso) == 5 and z.iso[2].status == -84 and z.length == 2048 and z.data == bytes(4)
    e = parse_text_line("ffff9a1c8e3d4c00 1234700000 E Bo:1:002:2 -19 0")
    assert e.kind == "E" and e.status == -19 and e.length == 0
    t = parse_text_line("ffff9a1c8e3d4c00 1234567890 S Ci:001:00 s 80 06 0100 0000 0012 18 <")
    assert t.bus is None and t.address == "001:00"


def test_text_rejects_garbage_naming_the_field():
    with pytest.raises(ValueError, match="event type"):
        parse_text_line("ffff 1 X Ci:1:001:0 0 0")
    with pytest.raises(ValueError, match="address"):
        parse_text_line("ffff 1 S Ci:1 0 0")


def test_trace_lines_fields_and_numbers():
    r = parse_trace_line("           monfs-12156   [001] ..... 12343.729834: tick: count=3 msg=hi there")
    assert (r.comm, r.pid, r.cpu, r.flags, r.event) == ("monfs", 12156, 1, ".....", "tick")
    assert r.timestamp == pytest.approx(12343.729834)
    assert r.fields == {"count": "3", "msg": "hi there"} and r.int("count") == 3
    u = parse_trace_line(" user_events_pr-77 [000] ...1. 5.000001: example_counter: count=0x2a (42) tag=go")
    assert u.comm == "user_events_pr" and u.int("count") == 42 and u["tag"] == "go"
    assert parse_trace_line("# tracer: nop") is None
    assert parse_trace_line("CPU:1 [LOST 3 EVENTS]") is None


def test_binary_header_round_trip():
    hdr = struct.pack("<QBBBBHBBqiiII8siiII", 0xFFFF1234, ord("S"), 2, 0x80, 3, 1, 0, ord("<"), 1700000000,
                      5, -115, 18, 0, bytes([0x80, 6, 0, 1, 0, 0, 18, 0]), 0, 0, 0x200, 0)
    e = BinaryEvent.parse(hdr)
    assert (e.kind, e.xfer, e.is_in, e.endpoint, e.devnum, e.busnum) == ("S", "C", True, 0, 3, 1)
    assert e.setup == bytes([0x80, 6, 0, 1, 0, 0, 18, 0]) and e.status == -115 and e.xfer_flags == 0x200


def test_descriptor_builders(repo):
    spec = importlib.util.spec_from_file_location("hid_keyboard", repo / "examples/hid_keyboard.py")
    kbd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kbd)
    assert d.BOOT_KEYBOARD_REPORT == kbd.REPORT_DESCRIPTOR
    dev = d.device(0x1234, 0x5678, manufacturer=1, product=2)
    cfg = d.configuration(
        d.interface(0, [d.endpoint(0x81, "interrupt", 8, interval=10)], cls=3, subclass=1, protocol=1,
                    extra=d.hid(len(d.BOOT_KEYBOARD_REPORT))),
        d.interface(1, [d.endpoint(0x82, "bulk", 512), d.endpoint(0x02, "bulk", 512)]),
    )
    dump = d.descriptors_file(dev, cfg)
    assert dump[:2] == b"\x12\x01" and dump[17] == 1
    assert struct.unpack_from("<H", cfg, 2)[0] == len(cfg) == 9 + 9 + 9 + 7 + 9 + 7 + 7
    assert cfg[4] == 2  # bNumInterfaces
    assert d.string("ab") == b"\x06\x03a\x00b\x00"
    # The sysfs dump of QEMU's keyboard has the same layout.
    real = (repo / "tests/data/sysfs/qemu-usb-kbd/descriptors").read_bytes()
    assert real[:2] == b"\x12\x01" and real[18 + 1] == 2


def test_run_builds_the_monfs_run_command_line():
    import os

    from monfs._run import run_argv
    binary = os.environ["MONFS_BIN"]
    assert run_argv(["ls", "-l"], "/c.yaml", args=["--seed", "1"], binary=binary) == [
        binary, "run", "--config", "/c.yaml", "--seed", "1", "--", "ls", "-l"]
    assert run_argv(["true"], None, binary=binary) == [binary, "run", "--", "true"]
