"""Peers written as classes: socket and command peers, stalls, NAKs,
descriptor builders, and a failing handler as a clear error."""

import sys
import time

import pytest

import monfs
from monfs import descriptors as d
from monfs import peer


def keyboard_dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0001, manufacturer=1, product=2),
        d.configuration(d.interface(0, [d.endpoint(0x81, "interrupt", 8, interval=10)], cls=3, subclass=1,
                                    protocol=1, extra=d.hid(len(d.BOOT_KEYBOARD_REPORT)))),
    )


def vendor_dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0002, product=1),
        d.configuration(d.interface(0, [d.endpoint(0x81, "bulk", 512), d.endpoint(0x02, "bulk", 512)])),
    )


def external(dump: bytes, peer_key: str, peer_value, **extra) -> dict:
    dev = {"port": 1, "kind": "external", "descriptors": dump, "product": "Py", "manufacturer": "monfs",
           peer_key: peer_value}
    dev.update(extra)
    return {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [dev]}]}}


class Keyboard(peer.Device):
    report_descriptor = d.BOOT_KEYBOARD_REPORT


def test_socket_peer_keyboard_answers_queued_reports():
    kbd = peer.SocketPeer(Keyboard())
    with monfs.Mount(external(keyboard_dump(), "socket", kbd.path), peers=[kbd]) as m:
        with m.usbmon_text(1) as r:
            # Queued now, answered to usbhid's interrupt URB whenever it comes.
            kbd.device.send(0x81, bytes([0, 0, 0x0B, 0, 0, 0, 0, 0]))
            e = r.expect(kind="C", xfer="I", endpoint=1, device=lambda n: n != 1)
            assert e.status == 0 and e.data == bytes([0, 0, 0x0B, 0, 0, 0, 0, 0])
        assert kbd.device.plugged is not None and kbd.device.plugged[:2] == (1, "1")
        assert "Driver=usbhid" in m.wait_for_text("usb/devices", "Vendor=1209 ProdID=0001")


class Echo(peer.Device):
    def __init__(self):
        super().__init__()
        self.last = b""
        self.outs = 0

    @peer.endpoint(0x02)
    def take(self, data):
        self.outs += 1
        if self.outs % 3 == 0:
            raise peer.Stall()  # every third OUT transfer stalls
        self.last = data

    @peer.endpoint(0x81)
    def give(self, length):
        return self.last[::-1] or None


def test_endpoint_methods_echo_and_stall():
    echo = peer.SocketPeer(Echo)
    endpoints = [{"ep": 0x02, "data": "0102030405", "every_ms": 10}, {"ep": 0x81, "length": 64}]
    with monfs.Mount(external(vendor_dump(), "socket", echo.path, endpoints=endpoints), peers=[echo]) as m:
        with m.usbmon_text(1) as r:
            back = r.expect(kind="C", xfer="B", direction="i", status=0)
            assert back.data == bytes([5, 4, 3, 2, 1])
            r.expect(kind="C", xfer="B", direction="o", status=-32)


class Ep0Device(peer.Device):
    descriptors = vendor_dump()
    strings = {1: "Answered by Python"}

    def __init__(self):
        super().__init__()
        self.requests = []

    def answer_control(self, setup, data):
        self.requests.append(setup)
        return super().answer_control(setup, data)

    @peer.control(0xC0, 0x01)
    def version(self, setup, data):
        return b"\x02\x01"


def test_ep0_peer_answers_the_enumeration_from_its_descriptors():
    dev = peer.SocketPeer(Ep0Device)
    with monfs.Mount(external(Ep0Device.descriptors, "socket", dev.path, ep0="peer"), peers=[dev]) as m:
        m.wait_for_text("usb/devices", "Vendor=1209 ProdID=0002")  # from the peer's descriptors

        def asked():
            return [(s.request_type, s.request, s.value) for s in dev.device.requests]
        deadline = time.monotonic() + 30
        while (0x00, 0x09, 1) not in asked():  # SET_CONFIGURATION ends the enumeration
            assert time.monotonic() < deadline, asked()
            m.check()
            time.sleep(0.02)
        asked = asked()
        assert (0x80, 0x06, 0x0100) in asked  # GET_DESCRIPTOR(DEVICE)
        assert (0x80, 0x06, 0x0301) in asked  # the product string, index 1
        assert (0x00, 0x09, 1) in asked  # SET_CONFIGURATION 1


class Broken(peer.Device):
    report_descriptor = d.BOOT_KEYBOARD_REPORT

    @peer.endpoint(0x81)
    def report(self, length):
        raise RuntimeError("the handler broke on purpose")


def test_a_socket_peer_that_raises_is_a_peer_error_with_its_traceback():
    bad = peer.SocketPeer(Broken)
    m = monfs.Mount(external(keyboard_dump(), "socket", bad.path), peers=[bad])
    with pytest.raises(monfs.PeerError) as e:
        with m:
            with m.usbmon_text(1) as r:
                r.expect(kind="C", xfer="I", status=0, device=lambda n: n != 1)  # not the root hub
    assert "the handler broke on purpose" in str(e.value)
    assert "monfs daemon log" in str(e.value)
    assert not m.alive() and not monfs.is_mounted(m.root)


PEER_SCRIPT = """
import sys
from monfs import peer, descriptors as d

class Kbd(peer.Device):
    report_descriptor = d.BOOT_KEYBOARD_REPORT

    @peer.endpoint(0x81)
    def report(self, length):
        if %(fail)s:
            raise ValueError("command peer failed on purpose")
        return bytes([0, 0, 0x04, 0, 0, 0, 0, 0])  # "a", held down

peer.main(Kbd)
"""


def test_command_peer_from_a_script(tmp_path):
    script = tmp_path / "kbd_peer.py"
    script.write_text(PEER_SCRIPT % {"fail": False})
    with monfs.Mount(external(keyboard_dump(), "command", [sys.executable, str(script)])) as m:
        with m.usbmon_text(1) as r:
            e = r.expect(kind="C", xfer="I", status=0, device=lambda n: n != 1)  # not the root hub
            assert e.data[2] == 0x04


def test_a_command_peer_that_raises_is_a_peer_error_with_the_log(tmp_path):
    script = tmp_path / "bad_peer.py"
    script.write_text(PEER_SCRIPT % {"fail": True})
    m = monfs.Mount(external(keyboard_dump(), "command", [sys.executable, str(script)]))
    with pytest.raises(monfs.PeerError) as e:
        with m:
            with m.usbmon_text(1) as r:
                r.expect(kind="C", xfer="I", status=0, device=lambda n: n != 1)  # not the root hub
    assert "command peer failed on purpose" in e.value.log  # its traceback went to the log
    assert "unplugging the device" in e.value.reason
    assert not m.alive() and not monfs.is_mounted(m.root)


def test_peer_errors_can_be_provoked_on_purpose(tmp_path):
    script = tmp_path / "bad_peer.py"
    script.write_text(PEER_SCRIPT % {"fail": True})
    with monfs.Mount(external(keyboard_dump(), "command", [sys.executable, str(script)]),
                     peer_errors="ignore") as m:
        line = m.wait_for_log("unplugging the device")
        assert "external device's peer" in line
        m.check()  # no PeerError: the test asked for this one
        assert "1209" not in m.read("usb/devices")


class IsoLoop(peer.Device):
    """Isochronous IN 0x83 answers 5 bytes a packet; OUT 0x04 keeps what came."""

    def __init__(self):
        super().__init__()
        self.out_packets = []

    @peer.endpoint(0x83)
    def iso_in(self, lengths):
        return [bytes([k + 1]) * 5 for k in range(len(lengths))]

    @peer.endpoint(0x04)
    def iso_out(self, packets):
        self.out_packets.append(packets)


def test_isochronous_endpoints():
    dump = d.descriptors_file(
        d.device(0x1209, 0x0004),
        d.configuration(
            d.interface(0, []),
            d.interface(0, [d.endpoint(0x83, "iso", 256, interval=1, attributes=0x04),
                            d.endpoint(0x04, "iso", 64, interval=1, attributes=0x04)], alt=1),
        ),
    )
    loop = peer.SocketPeer(IsoLoop)
    endpoints = [{"ep": 0x83, "packets": 4, "urbs": 2}, {"ep": 0x04, "packets": 4, "data": "aa55"}]
    with monfs.Mount(external(dump, "socket", loop.path, endpoints=endpoints), peers=[loop]) as m:
        with m.usbmon_text(1) as r:
            e = r.expect(kind="C", xfer="Z", direction="i", error_count=0)
            assert e.iso_count == 4 and [(x.status, x.length) for x in e.iso] == [(0, 5)] * 4
            assert e.data[:5] == b"\x01" * 5
            r.expect(kind="C", xfer="Z", direction="o", status=0)
        assert loop.device.out_packets and loop.device.out_packets[0] == [b"\xaa\x55" * 32] * 4


def test_command_peer_named_by_module_and_class(tmp_path):
    (tmp_path / "kbd_module.py").write_text(PEER_SCRIPT.replace("peer.main(Kbd)", "") % {"fail": False})
    cfg = external(keyboard_dump(), "command", [sys.executable, "-m", "monfs.peer", "kbd_module:Kbd"])
    with monfs.Mount(cfg, env={"PYTHONPATH": str(tmp_path)}) as m:  # the package is added to it
        with m.usbmon_text(1) as r:
            e = r.expect(kind="C", xfer="I", status=0, device=lambda n: n != 1)
            assert e.data[2] == 0x04


class Vendor(peer.HidDevice):
    report_descriptor = d.vendor_report(input_id=1, output_id=2, feature_id=3, size=4)
    out_endpoint = 0x02
    numbered = True


def test_hid_device_keeps_reports_by_type_and_id():
    v = Vendor()
    v.features[3] = b"\x0a\x0b\x0c\x0d"
    get = peer.Setup(0xA1, 0x01, 0x0303, 0, 16)
    assert v.answer_control(get, None) == b"\x03\x0a\x0b\x0c\x0d"
    with pytest.raises(peer.Stall):
        v.answer_control(peer.Setup(0xA1, 0x01, 0x0309, 0, 16), None)
    # SET_REPORT of a numbered feature report: its ID leads the data
    assert v.answer_control(peer.Setup(0x21, 0x09, 0x0303, 0, 5), b"\x03\x01\x02\x03\x04") is None
    # an output report on the interrupt OUT endpoint
    urb = peer.Urb(7, 0x02, "I", 5, None, b"\x02\xaa\xbb\xcc\xdd", ())
    assert v.answer(urb) == (0, b"", ())
    v.send_report(1, b"\x01\x02\x03\x04")
    assert v.answer(peer.Urb(8, 0x81, "I", 64, None, None, ())) == (0, b"\x01\x01\x02\x03\x04", ())
    assert v.received == [("feature", 3, b"\x01\x02\x03\x04"), ("output", 2, b"\xaa\xbb\xcc\xdd")]
    # the descriptor: vendor page, three numbered 4-byte reports
    r = v.report_descriptor
    assert r.startswith(bytes.fromhex("0600ff0901a101")) and r.endswith(b"\xc0")
    assert [r[i + 1] for i in range(len(r) - 1) if r[i] == 0x85] == [1, 2, 3]
