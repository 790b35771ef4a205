"""cp210x's and ch341's ports from the Python side: a peer.Cp210xDevice
or peer.Ch341Device on a socket, laid out by descriptors.cp210x() and
descriptors.ch341(), the port found by monfs.tty.find and driven by
monfs.tty.Port: the rates and line settings the peer sees, its modem lines
in TIOCMGET, cp210x's event insertion (INPCK) with line errors and an
escaped 0xec, ch341's interrupt packets waking TIOCMIWAIT, and the ioctls
each driver lacks."""

import errno
import fcntl
import termios
import threading

import pytest

import monfs
from monfs import descriptors as d
from monfs import peer, tty


def config(dump: bytes, path: str, product: str) -> dict:
    dev = {"port": 1, "kind": "external", "descriptors": dump, "product": product,
           "manufacturer": "Silicon Labs", "serial": "0001", "socket": path}
    return {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [dev]}]}}


def wait_for(cond) -> None:
    """Poll ``cond`` (at most a minute: a hang, not a time limit)."""
    for _ in range(1200):
        if cond():
            return
        threading.Event().wait(0.05)
    assert cond()


def port_of(m, vendor: int, product: int, n: int = 1) -> list:
    ports: list = []

    def found() -> bool:
        ports[:] = tty.find(vendor, product, sys=str(m.path("sys")), dev=str(m.path("dev")))
        return len(ports) == n
    wait_for(found)
    return ports


class Cp2102n(peer.Cp210xDevice):
    part = "CP2102N"


def test_cp210x_rates_lines_and_event_insertion():
    dev = peer.SocketPeer(Cp2102n)
    cfg = config(d.cp210x("CP2102N"), dev.path, "CP2102N USB to UART Bridge Controller")
    with monfs.Mount(cfg, peers=[dev]) as m:
        path = port_of(m, 0x10C4, 0xEA60)[0]
        p0 = dev.device.ports[0]
        with tty.Port(path, baud=115200) as p:
            # The CP2102N's divisor gives 115384; raw 8N1.
            assert dev.device.baud_rates[-1] == 115384
            assert dev.device.line_settings[-1] == (8, 0, 0)
            assert p0.enabled
            # DTR and RTS up at the open, as GET_MDMSTS reads them back
            # with the peer's CTS and DSR.
            assert p.modem_lines() == {"dtr": True, "rts": True, "cts": True, "cd": False, "ri": False,
                                       "dsr": True}
            p.set_lines(rts=False)
            assert dev.device.control_lines[-1] == (None, False)
            dev.device.set_modem_lines(cts=False, dsr=False, ri=True, dcd=True)
            assert p.modem_lines() == {"dtr": True, "rts": False, "cts": False, "cd": True, "ri": True,
                                       "dsr": False}
            # cp210x has no TIOCMIWAIT.
            with pytest.raises(OSError) as e:
                fcntl.ioctl(p.fd, tty.TIOCMIWAIT, tty.TIOCM["cd"])
            assert e.value.errno == errno.ENOTTY
            # 7O2 with INPCK: SET_LINE_CTL, and the event insertion mode.
            attrs = termios.tcgetattr(p.fd)
            attrs[0] |= termios.INPCK
            attrs[2] = (attrs[2] & ~termios.CSIZE) | termios.CS7 | termios.PARENB | termios.PARODD | termios.CSTOPB
            termios.tcsetattr(p.fd, termios.TCSANOW, attrs)
            assert dev.device.line_settings[-1] == (7, 1, 2)
            assert p0.events == [0xEC]
            # An 0xec in the data comes escaped (ESC 0); a parity error
            # comes as ESC 1 LSR DATA and reads as a NUL, counted.
            dev.device.write(b"a\xecb")
            assert p.read_until(b"b") == b"a\xecb"
            dev.device.line_error(b"x", parity=True)
            dev.device.write(b"c")
            assert p.read_until(b"c") == b"\0c"
            assert p.counters()["parity"] == 1
            # Back without INPCK: the mode goes off.
            attrs[0] &= ~termios.INPCK
            termios.tcsetattr(p.fd, termios.TCSANOW, attrs)
            assert p0.events == [0xEC, 0]
        # The close: HUPCL drops both lines, PURGE, the UART off.
        wait_for(lambda: not p0.enabled)
        assert p0.purges == [0x0F]
        assert dev.device.control_lines[-1] == (False, False)


class Ch340(peer.Ch341Device):
    pass


def test_ch341_rates_lines_and_modem_interrupts():
    dev = peer.SocketPeer(Ch340)
    cfg = config(d.ch341(), dev.path, "USB Serial")
    with monfs.Mount(cfg, peers=[dev]) as m:
        path = port_of(m, 0x1A86, 0x7523)[0]
        # The probe: version read, serial init, 9600 8N1, lines low.
        assert dev.device.inits == 1
        with tty.Port(path, baud=57600) as p:
            # 57600: prescaler 3, divisor 104 at the low base clock:
            # 48 MHz / (8 * 104) = 57692 (bit 7 set: version 0x31).
            assert dev.device.divisors[-1] == 0x9883
            assert dev.device.baud_rates[-1] == 57692
            assert dev.device.line_settings[-1] == (8, 0, 0)
            assert dev.device.control_lines[-1] == (True, True)
            assert p.modem_lines() == {"dtr": True, "rts": True, "cts": True, "cd": False, "ri": False,
                                       "dsr": True}
            # ch341 has no TIOCGICOUNT.
            with pytest.raises(OSError) as e:
                p.counters()
            assert e.value.errno == errno.ENOTTY
            p.write(b"ping")
            wait_for(lambda: bytes(dev.device.received) == b"ping")
            dev.device.write(b"pong")
            assert p.read_until(b"pong") == b"pong"
            # DCD from the interrupt endpoint wakes TIOCMIWAIT (toggled
            # until it does: the wait counts changes from its own start).
            woke = threading.Event()

            def wait_cd():
                p.wait_lines("cd")
                woke.set()

            t = threading.Thread(target=wait_cd, daemon=True)
            t.start()
            for i in range(120):
                dev.device.set_modem_lines(dcd=i % 2 == 0)
                if woke.wait(0.5):
                    break
            assert woke.is_set()
            dev.device.set_modem_lines(dcd=True)
            wait_for(lambda: p.modem_lines()["cd"])
            p.set_lines(dtr=False)
            assert dev.device.control_lines[-1] == (False, True)
            # Even parity, 7 bits: the line control register.
            attrs = termios.tcgetattr(p.fd)
            attrs[2] = (attrs[2] & ~termios.CSIZE) | termios.CS7 | termios.PARENB
            termios.tcsetattr(p.fd, termios.TCSANOW, attrs)
            assert dev.device.lcrs[-1] == 0xDA
            assert dev.device.line_settings[-1] == (7, 2, 0)
            termios.tcsendbreak(p.fd, 0)
            assert dev.device.breaks == [True, False]
            # ch341 has no throttle: with nothing read, its read URBs go on
            # past the line discipline's 4095 bytes, until the device has
            # sent everything.
            blob = bytes(range(256)) * 64
            dev.device.write(blob)
            wait_for(lambda: dev.device.queued() == 0)
            got = b""
            while len(got) < len(blob):
                chunk = p.read(len(blob))
                assert chunk, len(got)
                got += chunk
            assert got == blob
        wait_for(lambda: dev.device.control_lines[-1] == (False, False))
