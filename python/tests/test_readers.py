"""Readers return objects: usbmon text, GETX, the mapped ring, trace_pipe;
waits report what arrived."""

import pytest

import monfs
from configs import KEYBOARD, TICK


def test_text_binary_and_mmap_see_the_same_keyboard():
    with monfs.Mount(KEYBOARD) as m:
        m.pause(1)
        text, getx, ring = m.usbmon_text(1), m.usbmon_binary(1), m.usbmon_mmap(1)
        m.resume(1)
        t = text.collect(10)
        g = getx.collect(10)
        r = ring.collect(10)
        assert [(e.kind, e.xfer, e.device, e.endpoint) for e in t] == \
            [(e.kind, e.xfer, e.devnum, e.endpoint) for e in g] == \
            [(e.kind, e.xfer, e.devnum, e.endpoint) for e in r]
        assert [e.data for e in g] == [e.data for e in r]
        for te, be in zip(t, g):
            assert int(te.tag, 16) == be.id
            if te.kind == "C":
                assert (te.data or b"") == be.data[:32] and te.status == be.status
        queued, dropped = getx.stats()
        assert dropped == 0 and queued >= 0
        assert ring.ring_size == 307200


def test_binary_reader_stall_has_the_kernels_fields():
    with monfs.Mount(KEYBOARD) as m:
        with m.usbmon_binary(1) as b:
            m.fault(1, 1, "stall")
            e = b.expect(kind="C", status=-32)
            assert (e.xfer, e.is_in, e.endpoint, e.len_urb, e.data) == ("I", True, 1, 0, b"")
            assert e.interval > 0 and e.flag_data == 0


def test_ring_size_is_set_and_read_back():
    with monfs.Mount(KEYBOARD) as m:
        with m.usbmon_mmap(1, ring_size=8192 * 4) as r:
            assert r.ring_size == 32768
            r.collect(50)  # the ring wraps with fillers, which are skipped


def test_expect_failure_lists_what_arrived():
    with monfs.Mount(TICK) as m:
        m.enable_event("myapp:tick")
        with m.trace_pipe() as tp:
            for k in range(3):  # recorded before the wait starts: they are there to read
                m.trace("myapp:tick", count=k, msg="m%d" % k)
            with pytest.raises(monfs.ExpectationFailed) as e:
                tp.expect(event="tick", msg="never", timeout=1)
        msg = str(e.value)
        assert "msg='never'" in msg and "3 other item(s) arrived" in msg
        assert "count=2 msg=m2" in msg and [r["msg"] for r in e.value.arrived] == ["m0", "m1", "m2"]
        assert isinstance(e.value, AssertionError)


def test_expect_takes_predicates_for_fields():
    with monfs.Mount(KEYBOARD) as m:
        with m.usbmon_text(1) as r:
            e = r.expect(kind="C", data=lambda d: d is not None and len(d) == 8 and d[2] != 0)  # a key down
            assert e.device != 1 and e.data[2] != 0


def test_trace_pipe_records_usb_events():
    with monfs.Mount(KEYBOARD) as m:
        m.enable_event("usb:usb_urb_complete", filter="status != 0")
        with m.trace_pipe() as tp:
            m.fault(1, 1, "stall")
            rec = tp.expect(event="usb_urb_complete")
            assert rec.int("status") == -32, rec
            assert rec.cpu >= 0 and rec.timestamp > 0


def test_trace_pipe_of_an_instance():
    with monfs.Mount(TICK) as m:
        m.path("tracing/instances/mine").mkdir()
        m.enable_event("myapp:tick", instance="mine")
        with m.trace_pipe(instance="mine") as tp:
            for k in range(3):  # inject writes go to their own instance
                m.write("tracing/instances/mine/events/myapp/tick/inject", 'count=%d msg="n%d"' % (k, k))
            got = tp.collect(3)
        assert [r.int("count") for r in got] == [0, 1, 2]
        assert [r["msg"] for r in got] == ["n0", "n1", "n2"]
        m.path("tracing/instances/mine").rmdir()
