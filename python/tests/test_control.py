"""Typed control: every command through the socket, refusals as exceptions
that carry monfs's reason."""

import pytest

import monfs
from configs import KEYBOARD, TICK


def test_plug_unplug_and_devices():
    with monfs.Mount(KEYBOARD) as m:
        with m.usbmon_text(1) as r:
            assert "plugged" in m.plug(1, 3, "mass-storage", product="Hot Stick", vendor_id=0x1234)
            r.expect(kind="S", xfer="C", device=0)  # enumeration starts at address 0
        r2 = m.usbmon_text(1)
        dev = r2.expect(lambda e: e.xfer == "B", timeout=30)
        assert dev.device >= 2
        m.wait_for_text("usb/devices", "Hot Stick")
        assert m.unplug(1, 3) == "unplugged bus 1 port 3"
        with pytest.raises(monfs.CommandError) as e:
            m.unplug(1, 3)
        assert e.value.command == "unplug 1 3" and e.value.reason


def test_ports_through_a_hub():
    cfg = {"usb": {"buses": [{"bus": 1, "devices": [{"port": 4, "kind": "hub"}]}]}}
    with monfs.Mount(cfg) as m:
        assert m.plug(1, (4, 2), "hid-mouse") == "plugged HidMouse on bus 1 port 4.2"
        assert m.unplug(1, "4.2") == "unplugged bus 1 port 4.2"


def test_faults_reach_usbmon():
    with monfs.Mount(KEYBOARD) as m:
        with m.usbmon_text(1) as r:
            m.fault(1, 1, "stall")
            r.expect(kind="C", endpoint=1, status=-32)
            m.ctl.stall(1, 1)
            r.expect(kind="C", endpoint=1, status=-32)
            m.fault(1, 1, "proto")
            r.expect(kind="C", endpoint=1, status=-71)
        with pytest.raises(monfs.CommandError, match='unknown USB fault "melt"'):
            m.fault(1, 1, "melt")


def test_pause_and_resume():
    with monfs.Mount(KEYBOARD) as m:
        assert m.pause(1) == "bus 1 paused"
        r = m.usbmon_text(1)
        assert m.resume(1) == "bus 1 resumed"
        r.expect(kind="C")
        with pytest.raises(monfs.CommandError, match="bus"):
            m.pause(9)


def test_trace_quotes_strings():
    with monfs.Mount(TICK) as m:
        m.enable_event("myapp:tick")
        with m.trace_pipe() as tp:
            assert m.trace("myapp:tick", count=7, msg="two words") == "recorded myapp:tick"
            rec = tp.expect(event="tick")
            assert rec.int("count") == 7 and rec["msg"] == "two words"
        with pytest.raises(monfs.CommandError, match="no trace event"):
            m.trace("nope:nope", x=1)
        with pytest.raises(ValueError):
            m.trace("myapp:tick", msg='a "quote"')


def test_replay_of_a_recorded_capture(tmp_path):
    cfg = dict(KEYBOARD)
    cfg["usb"] = {"buses": [KEYBOARD["usb"]["buses"][0], {"bus": 2, "hub_poll_ms": 0, "devices": []}]}
    with monfs.Mount(cfg) as m:
        pcap = tmp_path / "kbd.pcap"
        events = []
        with m.usbmon_binary(1) as b:
            events = b.collect(20, devnum=lambda n: n != 1)  # the keyboard, not the root hub
        # Write the events as a pcap (linktype 220) and replay it on bus 2.
        import struct
        with open(pcap, "wb") as f:
            f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 220))
            for e in events:
                hdr = struct.pack("<QBBBBHBBqiiII8siiII", e.id, ord(e.kind), e.xfer_type, e.epnum, e.devnum,
                                  e.busnum, e.flag_setup, e.flag_data, e.ts_sec, e.ts_usec, e.status,
                                  e.len_urb, len(e.data), e.setup or bytes(8), e.interval, e.start_frame,
                                  e.xfer_flags, 0)
                pkt = hdr + e.data
                f.write(struct.pack("<IIII", e.ts_sec & 0xFFFFFFFF, e.ts_usec, len(pkt), len(pkt)) + pkt)
        assert [e.kind for e in monfs.read_pcap(pcap)] == [e.kind for e in events]
        with m.usbmon_text(2) as r:
            assert "replaying" in m.replay(2, pcap)
            got = r.collect(len(events), device=lambda n: n != 1)
        assert [(g.kind, g.xfer, g.length, g.data) for g in got] == [
            (e.kind, e.xfer, e.len_urb, (e.data[:32] or None)) for e in events]
        assert str(pcap) in m.ctl.replay_status(2)
        with pytest.raises(monfs.CommandError):
            m.replay(2, tmp_path)  # a directory is refused


def test_help_lists_the_commands():
    with monfs.Mount(KEYBOARD) as m:
        text = m.ctl.help()
        for word in ("plug BUS PORTS", "unplug", "fault", "pause", "resume", "replay start", "trace"):
            assert word in text


def test_control_from_the_environment(monkeypatch):
    with monfs.Mount(KEYBOARD) as m:
        monkeypatch.setenv("MONFS_SOCKET", str(m.socket))
        assert monfs.Control.from_env().pause(1) == "bus 1 paused"
    monkeypatch.delenv("MONFS_SOCKET")
    with pytest.raises(monfs.MonfsError, match="MONFS_SOCKET"):
        monfs.Control.from_env()


def test_plug_and_unplug_return_when_the_device_is_there_and_gone():
    # The daemon wakes the wait on the bus's changes: right after plug()
    # the device is listed with its driver bound, right after unplug() it
    # is not listed.
    with monfs.Mount(KEYBOARD) as m:
        m.plug(1, 3, "hid-mouse")
        text = m.read("usb/devices")
        assert "Product=QEMU USB Mouse" in text
        assert "Driver=usbhid" in text.split("Product=QEMU USB Mouse", 1)[1]
        m.unplug(1, 3)
        assert "Product=QEMU USB Mouse" not in m.read("usb/devices")
        # An explicit wait for what is not coming ends in a CommandError.
        with pytest.raises(monfs.CommandError) as e:
            m.ctl.wait(1, 3, present=True, timeout=0.2)
        assert "not present within 200 ms" in e.value.reason
        # settle() after a plug that did not wait: the device is up.
        m.plug(1, 3, "hid-mouse", wait=False)
        assert m.ctl.settle() == "settled"
        text = m.read("usb/devices")
        assert "Driver=usbhid" in text.split("Product=QEMU USB Mouse", 1)[1]
