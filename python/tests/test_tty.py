"""cdc_acm's ports from the Python side: a peer.AcmDevice on a socket, the
port found by monfs.tty.find and driven by monfs.tty.Port and by pyserial:
an AT command answered, the line settings and control lines the peer
sees, SERIAL_STATE changes as modem lines, TIOCMIWAIT and TIOCGICOUNT."""

import threading

import serial  # Debian's python3-serial (scripts/setup)

import monfs
from monfs import descriptors as d
from monfs import peer, tty


def acm_dump() -> bytes:
    return d.descriptors_file(
        d.device(0x1209, 0x0006, device_class=2, manufacturer=1, product=2, serial=3),
        d.configuration(d.cdc_acm(0, 1)),
    )


def config(path: str) -> dict:
    dev = {"port": 1, "kind": "external", "descriptors": acm_dump(), "product": "Modem",
           "manufacturer": "monfs", "serial": "9", "socket": path}
    return {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [dev]}]}}


class Modem(peer.AcmDevice):
    """Answers AT with OK."""

    def on_data(self, data):
        super().on_data(data)
        if bytes(self.received).endswith(b"AT\r"):
            self.write(b"\r\nOK\r\n")


def wait_port(m, driver: str, vendor: int, product: int) -> str:
    """The one port of the device with these ids, once ``driver``'s probe
    made it."""
    m.wait_for_text("usb/devices", "Driver=" + driver)
    for _ in range(600):
        ports = tty.find(vendor, product, sys=str(m.path("sys")), dev=str(m.path("dev")))
        if ports:
            break
        threading.Event().wait(0.05)
    assert len(ports) == 1, ports
    return ports[0]


def port_of(m) -> str:
    """The modem's port, once cdc_acm's probe made it."""
    return wait_port(m, "cdc_acm", 0x1209, 0x0006)


def test_a_modem_answers_and_sees_the_line_settings_and_control_lines():
    modem = peer.SocketPeer(Modem)
    with monfs.Mount(config(modem.path), peers=[modem]) as m:
        with tty.Port(port_of(m), baud=115200) as p:
            p.write(b"AT\r")
            assert p.read_until(b"OK\r\n") == b"\r\nOK\r\n"
            assert p.modem_lines() == {"dtr": True, "rts": True, "cts": True, "cd": False, "ri": False,
                                       "dsr": False}
            p.set_lines(dtr=False)
        dev = modem.device
        # The probe's 9600 8N1, then the port's 115200 8N1.
        assert dev.line_codings == [(9600, 0, 0, 8), (115200, 0, 0, 8)]
        # Raised at the open, DTR dropped, both dropped at the close (HUPCL),
        # which FUSE passes on after close(2) returned.
        for _ in range(600):
            if len(dev.control_lines) == 3:
                break
            threading.Event().wait(0.05)
        assert dev.control_lines == [(True, True), (False, True), (False, False)]
        assert bytes(dev.received) == b"AT\r"


def test_serial_state_sets_the_modem_lines_and_wakes_tiocmiwait():
    modem = peer.SocketPeer(Modem)
    with monfs.Mount(config(modem.path), peers=[modem]) as m:
        with tty.Port(port_of(m)) as p:
            woke = threading.Event()

            def wait_ring():
                p.wait_lines("ri")
                woke.set()

            t = threading.Thread(target=wait_ring, daemon=True)
            t.start()
            modem.device.set_serial_state(dcd=True, dsr=True)
            # DCD and DSR come first: not what the waiter asked for.
            for _ in range(600):
                if p.modem_lines()["dsr"]:
                    break
                woke.wait(0.05)
            lines = p.modem_lines()
            assert lines["cd"] and lines["dsr"] and not lines["ri"]
            assert not woke.is_set()
            modem.device.set_serial_state(dcd=True, dsr=True, ri=True)
            assert woke.wait(30)
            counts = p.counters()
            assert (counts["dcd"], counts["dsr"], counts["rng"]) == (1, 1, 1)


def test_pyserial_reads_what_the_device_writes():
    modem = peer.SocketPeer(Modem)
    with monfs.Mount(config(modem.path), peers=[modem]) as m:
        s = serial.Serial(port_of(m), 57600, timeout=30)
        modem.device.write(b"hello from the device\n")
        assert s.readline() == b"hello from the device\n"
        assert modem.device.line_codings[-1] == (57600, 0, 0, 8)
        s.close()


# --- ftdi_sio: an FT232R-style adapter ------------------------------------

def ftdi_config(path: str, chip: str = "FT232R") -> dict:
    dev = {"port": 1, "kind": "external", "descriptors": d.ftdi(chip), "manufacturer": "FTDI",
           "product": "FT232R USB UART", "serial": "A1B2C3", "socket": path}
    return {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [dev]}]}}


def ftdi_port(m) -> str:
    port = wait_port(m, "ftdi_sio", 0x0403, 0x6001)
    assert port.endswith("/ttyUSB0"), port
    return port


class Adapter(peer.FtdiDevice):
    chip = "FT232R"


def test_an_ftdi_adapters_status_bytes_are_the_modem_lines_and_counters():
    adapter = peer.SocketPeer(Adapter)
    with monfs.Mount(ftdi_config(adapter.path), peers=[adapter]) as m:
        with tty.Port(ftdi_port(m), baud=115200) as p:
            dev = adapter.device
            # The default status: CTS and DSR; TIOCMGET asks the chip.
            assert p.modem_lines() == {"dtr": True, "rts": True, "cts": True, "cd": False, "ri": False,
                                       "dsr": True}
            woke = threading.Event()

            def wait_cd():
                p.wait_lines("cd")
                woke.set()

            t = threading.Thread(target=wait_cd, daemon=True)
            t.start()
            # A ring is counted when a packet brings it; the waiter wants DCD.
            dev.set_modem_lines(cts=True, dsr=True, ri=True)
            for _ in range(600):
                if p.counters()["rng"] == 1:
                    break
                woke.wait(0.05)
            assert not woke.is_set()
            dev.set_modem_lines(cts=True, dsr=True, ri=True, dcd=True)
            assert woke.wait(30)
            # Data after the status bytes, and errors counted.
            dev.write(b"ping\n")
            assert p.read_until(b"\n") == b"ping\n"
            dev.line_error(b"x", parity=True)
            dev.line_error(b"\0", brk=True)
            for _ in range(600):
                c = p.counters()
                if c["parity"] and c["brk"]:
                    break
                woke.wait(0.05)
            c = p.counters()
            # prev_status started at 0: the first packet counted CTS and DSR
            assert (c["cts"], c["dsr"], c["rng"], c["dcd"]) == (1, 1, 1, 1), c
            assert (c["parity"], c["brk"], c["rx"]) == (1, 1, 7), c
        assert dev.baud_rates[-1] == 115385
        assert dev.flow[-1] == "none"


# --- the examples: an AT modem and a boot loader ---------------------------

def _example(name: str):
    """The device class of examples/NAME.py."""
    import importlib.util
    import os
    path = os.path.join(os.path.dirname(__file__), "..", "..", "examples", name + ".py")
    spec = importlib.util.spec_from_file_location("example_" + name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_modem_example_dials_and_its_carrier_is_dcd():
    ex = _example("serial_modem")
    modem = peer.SocketPeer(ex.Modem)
    dev = {"port": 1, "kind": "external", "descriptors": ex.dump(), "product": "Modem",
           "manufacturer": "monfs", "serial": "7", "socket": modem.path}
    cfg = {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [dev]}]}}
    with monfs.Mount(cfg, peers=[modem]) as m:
        s = serial.Serial(wait_port(m, "cdc_acm", 0x1209, 0x0007), 115200, timeout=30)
        s.write(b"ATE0\r")
        assert s.read_until(b"OK\r\n").endswith(b"\r\nOK\r\n")
        s.write(b"ATI\r")
        assert s.read_until(b"OK\r\n") == b"\r\nmonfs example modem\r\n\r\nOK\r\n"
        assert not s.cd
        s.write(b"ATD5551234\r")
        assert s.read_until(b"CONNECT 115200\r\n") == b"\r\nCONNECT 115200\r\n"
        for _ in range(600):
            if s.cd:
                break
            threading.Event().wait(0.05)
        assert s.cd and s.dsr
        # Dropping DTR hangs up (CLOCAL is set, so the port stays open).
        s.dtr = False
        assert s.read_until(b"NO CARRIER\r\n") == b"\r\nNO CARRIER\r\n"
        s.write(b"ATX\r")
        assert s.read_until(b"ERROR\r\n") == b"\r\nERROR\r\n"
        s.close()


def test_a_flasher_resets_the_board_into_its_boot_loader_and_writes_flash():
    ex = _example("serial_bootloader")
    board = peer.SocketPeer(ex.Board)
    dev = {"port": 1, "kind": "external", "descriptors": d.ftdi("FT232R"), "manufacturer": "FTDI",
           "product": "FT232R USB UART", "serial": "B00T", "socket": board.path}
    cfg = {"usb": {"buses": [{"bus": 1, "hub_poll_ms": 0, "devices": [dev]}]}}
    with monfs.Mount(cfg, peers=[board]) as m:
        s = serial.Serial(ftdi_port(m), 115200, timeout=30)
        # esptool's classic reset into the boot loader (pyserial's dtr and
        # rts setters are TIOCMBIS/TIOCMBIC: ftdi_sio's MODEM_CTRL).
        s.dtr, s.rts = False, True
        s.dtr, s.rts = True, False
        s.dtr = False
        assert s.read_until(b"download\n").endswith(b"boot: waiting for download\n")
        for cmd, answer in [(b"sync", b"OK sync"), (b"version", b"OK monfs-boot 1.0"),
                            (b"erase", b"OK erased"), (b"write 10 c0ffee", b"OK 10 3"),
                            (b"read f 5", b"OK ffc0ffeeff"), (b"read 3ff 2", b"ERR past the end of flash"),
                            (b"run", b"OK run")]:
            s.write(cmd + b"\n")
            assert s.readline() == answer + b"\n", cmd
        assert s.readline() == b"app: hello\n"
        s.close()
        assert board.device.flash[0x10:0x13] == b"\xc0\xff\xee"
        # the port's open ran the application; the reset, the boot loader
        assert board.device.boots[-1] == "boot"
