"""cdc_acm's ports from the Python side: a peer.AcmDevice on a socket, the
port found by monfs.tty.find and driven by monfs.tty.Port and by pyserial:
an AT command answered, the line settings and control lines the peer
sees, SERIAL_STATE changes as modem lines, TIOCMIWAIT and TIOCGICOUNT; and
writes that wait for the device to take their bytes (blocking, O_NONBLOCK,
pyserial's write_timeout, a signal, an unplug, TCOFLUSH), on cdc_acm and
on ftdi_sio's write FIFO."""

import errno
import fcntl
import os
import select
import signal
import struct
import termios
import threading

import pytest
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


# --- writes wait for room ---------------------------------------------------
#
# cdc_acm has 16 write buffers of 20 packets (64 bytes here) and no FIFO: a
# write takes what fits in the free ones and waits (n_tty_write) for a URB
# to complete. A peer that takes nothing leaves every buffer in use. The tty
# layer hands a write to n_tty in chunks of 2048 bytes (iterate_tty_write),
# each filling a 1280 byte buffer and a 768 byte one: 8 chunks fit.

#: ACM_NW write buffers of wMaxPacketSize * 20 bytes, TIOCOUTQ when all
#: are in use (acm_tty_chars_in_buffer counts them whole).
ROOM = 16 * 64 * 20
#: What a write takes into them: 8 chunks of 2048.
FITS = 8 * 2048
TIOCOUTQ = 0x5411
#: write(2)'s number, as /proc/PID/task/TID/syscall shows it.
SYS_WRITE = {"x86_64": 1, "aarch64": 64}.get(os.uname().machine, 1)


class Sink(peer.AcmDevice):
    """Takes what the host writes only while :attr:`flowing` is set (its
    bulk OUT URBs stay pending until then)."""

    def __init__(self):
        super().__init__()
        self.flowing = threading.Event()
        self.unlinked = 0
        #: Each bulk OUT URB's bytes.
        self.urbs = []

    def answer(self, urb):
        if urb.type != "C" and urb.ep == self.out_endpoint and not self.flowing.is_set():
            return None
        return super().answer(urb)

    def on_unlink(self, urb_id, status):
        with self._lock:
            self.unlinked += 1

    def on_data(self, data):
        super().on_data(data)
        with self._lock:
            self.urbs.append(bytes(data))


def pattern(n: int) -> bytes:
    return bytes((i * 7 + i // 251) % 256 for i in range(n))


def until(cond, what: str) -> None:
    """Poll ``cond`` (at most a minute: a hang, not a time limit)."""
    for _ in range(2400):
        if cond():
            return
        threading.Event().wait(0.025)
    raise AssertionError("never: " + what)


def raw_fd(path: str, nonblock: bool = False) -> int:
    """The port opened as a serial program does, its output and input raw."""
    fd = os.open(path, os.O_RDWR | os.O_NOCTTY | (os.O_NONBLOCK if nonblock else 0))
    a = termios.tcgetattr(fd)
    a[1] &= ~termios.OPOST
    a[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG | termios.IEXTEN)
    termios.tcsetattr(fd, termios.TCSANOW, a)
    return fd


def outq(fd: int) -> int:
    return struct.unpack("i", fcntl.ioctl(fd, TIOCOUTQ, b"\0" * 4))[0]


def writable(fd: int) -> bool:
    p = select.poll()
    p.register(fd, select.POLLOUT)
    return bool(p.poll(0))


def in_write(tid: int, fd: int) -> bool:
    """Whether thread ``tid`` of this process is inside write(2) on ``fd``."""
    try:
        with open("/proc/self/task/%d/syscall" % tid) as f:
            w = f.read().split()
    except OSError:
        return False
    return len(w) > 1 and w[0] == str(SYS_WRITE) and int(w[1], 16) == fd


def received(dev) -> bytes:
    with dev._lock:
        return bytes(dev.received)


def test_a_blocking_write_waits_for_the_device_to_take_its_bytes():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        fd = raw_fd(port_of(m))
        data = pattern(3 * ROOM + 1000)
        got = {}

        def writer():
            got["tid"] = threading.get_native_id()
            got["n"] = os.write(fd, data)

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        until(lambda: outq(fd) == ROOM and in_write(got.get("tid", 0), fd), "full write buffers")
        # Every write buffer is in use and the device took nothing: the
        # write has not returned, and poll says the port is not writable.
        assert "n" not in got and received(sink.device) == b""
        assert not writable(fd)
        sink.device.flowing.set()
        t.join(60)
        assert got.get("n") == len(data)
        until(lambda: len(received(sink.device)) >= len(data), "the device has it all")
        assert received(sink.device) == data
        until(lambda: outq(fd) == 0, "an empty output queue")
        assert writable(fd)
        os.close(fd)


def test_a_nonblocking_write_takes_what_fits_then_eagain():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        fd = raw_fd(port_of(m), nonblock=True)
        assert writable(fd)
        data = pattern(FITS + 5000)
        assert os.write(fd, data) == FITS
        with pytest.raises(BlockingIOError):
            os.write(fd, data[FITS:])
        # TIOCOUTQ counts the write buffers in use whole (acm_tty_chars_in_buffer).
        assert outq(fd) == ROOM
        assert not writable(fd)
        sink.device.flowing.set()
        until(lambda: writable(fd), "POLLOUT")
        until(lambda: outq(fd) == 0, "an empty output queue")
        assert received(sink.device) == data[:FITS]
        assert os.write(fd, data[FITS:]) == 5000
        until(lambda: len(received(sink.device)) == len(data), "the rest")
        assert received(sink.device) == data
        os.close(fd)


def test_pyserial_write_timeout_fires_when_the_device_takes_nothing():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        s = serial.Serial(port_of(m), 115200, write_timeout=0.5)
        data = pattern(2 * ROOM)
        with pytest.raises(serial.SerialTimeoutException):
            s.write(data)
        assert s.out_waiting == ROOM
        sink.device.flowing.set()
        until(lambda: s.out_waiting == 0, "an empty output queue")
        assert received(sink.device) == data[:FITS]
        # Without a timeout, pyserial waits for POLLOUT until all is out.
        s.write_timeout = None
        assert s.write(data) == len(data)
        s.flush()
        assert received(sink.device) == data[:FITS] + data
        s.close()


class Interrupted(Exception):
    pass


def test_a_signal_ends_a_blocked_write_with_what_it_wrote_else_eintr():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        fd = raw_fd(port_of(m))
        data = pattern(2 * ROOM)
        me = threading.get_native_id()
        stop = threading.Event()
        signals = []

        def kick(limit):
            """Signal this (the main) thread while it is in write(2) with the
            write buffers full, at most ``limit`` times, until told to stop;
            past 100 signals let the device read (a write that never returned
            would otherwise hang the test)."""
            while not stop.is_set():
                if len(signals) < limit and in_write(me, fd) and outq(fd) == ROOM:
                    signals.append(1)
                    signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
                if len(signals) > 100:
                    sink.device.flowing.set()
                stop.wait(0.05)

        old = signal.signal(signal.SIGUSR1, lambda *_: None)
        signal.siginterrupt(signal.SIGUSR1, True)
        try:
            k = threading.Thread(target=kick, args=(1000,), daemon=True)
            k.start()
            # It took the room there was and waited: a signal makes it return
            # that count (an EINTR, which Python retries, would wait again).
            n = os.write(fd, data)
            stop.set()
            k.join(60)
            assert n == FITS
            assert signals and not sink.device.flowing.is_set()

            # Nothing written: EINTR (here the handler's exception, raised once).
            raised = []

            def interrupt(*_):
                if not raised:
                    raised.append(1)
                    raise Interrupted()

            signal.signal(signal.SIGUSR1, interrupt)
            stop.clear()
            signals.clear()
            k = threading.Thread(target=kick, args=(1,), daemon=True)
            k.start()
            with pytest.raises(Interrupted):
                os.write(fd, b"more")
            stop.set()
            k.join(60)
        finally:
            signal.signal(signal.SIGUSR1, old)
        sink.device.flowing.set()
        until(lambda: outq(fd) == 0, "an empty output queue")
        assert received(sink.device) == data[:FITS]
        os.close(fd)


def test_an_unplug_ends_a_blocked_write_with_what_it_wrote_else_eio():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        path = port_of(m)
        first, second = raw_fd(path), raw_fd(path)
        got = {}

        def writer(name, fd, data):
            got[name + "tid"] = threading.get_native_id()
            try:
                got[name] = os.write(fd, data)
            except OSError as e:
                got[name] = e.errno

        a = threading.Thread(target=writer, args=("a", first, pattern(2 * ROOM)), daemon=True)
        a.start()
        until(lambda: outq(first) == ROOM and in_write(got.get("atid", 0), first), "a full queue")
        b = threading.Thread(target=writer, args=("b", second, b"late"), daemon=True)
        b.start()
        until(lambda: in_write(got.get("btid", 0), second), "a second write")
        assert "a" not in got and "b" not in got
        m.unplug(1, 1)
        a.join(60)
        b.join(60)
        # What the buffers took, maybe some more: the unplug gives their URBs
        # back (-EPROTO), and until the device is gone a write URB may still
        # be submitted, as on Linux; not all of it.
        assert FITS <= got.get("a") < 2 * ROOM, got
        # Nothing written: the refused write URB's ENODEV (acm_tty_write), or
        # EIO once the port hung up; both are Linux's answers, by timing.
        assert got.get("b") in (errno.EIO, errno.ENODEV), got
        with pytest.raises(OSError) as e:
            os.write(first, b"x")
        assert e.value.errno == errno.EIO
        os.close(first)
        os.close(second)


class FtdiSink(peer.FtdiDevice):
    """An FT232R that takes what the host writes only while
    :attr:`flowing` is set."""

    chip = "FT232R"

    def __init__(self):
        super().__init__()
        self.flowing = threading.Event()
        #: Each bulk OUT URB's bytes.
        self.urbs = []

    def on_data(self, data):
        super().on_data(data)
        with self._lock:
            self.urbs.append(bytes(data))

    def answer(self, urb):
        if urb.type != "C" and urb.ep == self.out_endpoint and not self.flowing.is_set():
            return None
        return super().answer(urb)


#: The usb-serial core's write FIFO (a page) and its two write URBs of 256
#: bytes, which take their bytes from it as each write comes: the first
#: 2048 byte chunk leaves 1536 in the FIFO, the second 3584, the third
#: fills it.
FIFO_FITS = 4096 + 2 * 256


def test_an_ftdi_write_fills_the_write_fifo_and_its_urbs():
    sink = peer.SocketPeer(FtdiSink)
    with monfs.Mount(ftdi_config(sink.path), peers=[sink]) as m:
        fd = raw_fd(ftdi_port(m), nonblock=True)
        data = pattern(3 * 4096)
        assert os.write(fd, data) == FIFO_FITS
        with pytest.raises(BlockingIOError):
            os.write(fd, b"x")
        # usb_serial_generic_chars_in_buffer: the FIFO and the URBs' bytes.
        assert outq(fd) == FIFO_FITS
        assert not writable(fd)
        # A blocking write waits for the rest, and it all comes in order.
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        got = {}

        def writer():
            got["tid"] = threading.get_native_id()
            got["n"] = os.write(fd, data[FIFO_FITS:])

        t = threading.Thread(target=writer, daemon=True)
        t.start()
        until(lambda: in_write(got.get("tid", 0), fd), "a blocked write")
        assert "n" not in got and received(sink.device) == b""
        sink.device.flowing.set()
        t.join(60)
        assert got.get("n") == len(data) - FIFO_FITS
        until(lambda: len(received(sink.device)) >= len(data), "all of it")
        assert received(sink.device) == data
        until(lambda: outq(fd) == 0 and writable(fd), "an empty output queue")
        os.close(fd)


def test_tcoflush_drops_what_waits_to_go_out():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        fd = raw_fd(port_of(m), nonblock=True)
        assert os.write(fd, pattern(ROOM)) == FITS
        # cdc_acm unlinks its write URBs (acm_tty_flush_buffer).
        termios.tcflush(fd, termios.TCOFLUSH)
        until(lambda: outq(fd) == 0 and writable(fd), "the URBs unlinked")
        # (Once the device heard of it: it would take the bytes of a URB
        # it still had, though the host gave it up.)
        until(lambda: sink.device.unlinked == 16, "the device told")
        sink.device.flowing.set()
        assert os.write(fd, b"after") == 5
        until(lambda: outq(fd) == 0, "an empty output queue")
        assert received(sink.device) == b"after"
        os.close(fd)


def test_tcoflush_empties_the_write_fifo_of_an_ftdi_port():
    sink = peer.SocketPeer(FtdiSink)
    with monfs.Mount(ftdi_config(sink.path), peers=[sink]) as m:
        fd = raw_fd(ftdi_port(m), nonblock=True)
        data = pattern(3 * 4096)
        assert os.write(fd, data) == FIFO_FITS
        # The FIFO's bytes go; the two URBs in flight stay.
        termios.tcflush(fd, termios.TCOFLUSH)
        assert outq(fd) == 2 * 256
        sink.device.flowing.set()
        until(lambda: outq(fd) == 0, "an empty output queue")
        assert received(sink.device) == data[:2 * 256]
        os.close(fd)


def test_write_urbs_are_cut_as_the_drivers_cut_them():
    sink = peer.SocketPeer(Sink)
    with monfs.Mount(config(sink.path), peers=[sink]) as m:
        sink.device.flowing.set()
        fd = os.open(port_of(m), os.O_RDWR | os.O_NOCTTY)
        # OPOST and ONLCR (the default termios): n_tty writes the plain
        # characters as a block, then CR NL with a write of its own; each
        # write call is a URB of cdc_acm's.
        assert os.write(fd, b"abc\n") == 4
        until(lambda: outq(fd) == 0 and len(sink.device.urbs) >= 2, "the URBs")
        assert sink.device.urbs == [b"abc", b"\r\n"]
        # Raw: tty_write's chunks of 2048, each a URB of 1280 (20 packets)
        # and one of the rest.
        a = termios.tcgetattr(fd)
        a[1] &= ~termios.OPOST
        termios.tcsetattr(fd, termios.TCSANOW, a)
        data = pattern(5000)
        assert os.write(fd, data) == len(data)
        until(lambda: outq(fd) == 0 and len(sink.device.urbs) >= 7, "the URBs")
        assert [len(u) for u in sink.device.urbs[2:]] == [1280, 768, 1280, 768, 904]
        assert b"".join(sink.device.urbs[2:]) == data
        os.close(fd)


def test_ftdi_write_urbs_take_what_the_write_fifo_holds():
    sink = peer.SocketPeer(FtdiSink)
    with monfs.Mount(ftdi_config(sink.path), peers=[sink]) as m:
        sink.device.flowing.set()
        fd = raw_fd(ftdi_port(m))
        # usb_serial_generic_write: the FIFO takes it all, the two free URBs
        # 256 bytes each at once, the rest when one completes.
        data = pattern(600)
        assert os.write(fd, data) == len(data)
        until(lambda: outq(fd) == 0 and len(sink.device.urbs) >= 3, "the URBs")
        assert [len(u) for u in sink.device.urbs] == [256, 256, 88]
        assert b"".join(sink.device.urbs) == data
        os.close(fd)


def test_a_stop_character_holds_back_nothing_on_cdc_acm():
    """With IXON the device's STOP character stops the tty (stop_tty) and
    is taken out of the input, but neither cdc_acm nor the usb-serial core
    has a stop method and n_tty_write does not look at it: what the host
    writes still reaches the device, as on Linux."""
    acm = peer.SocketPeer(peer.AcmDevice)
    with monfs.Mount(config(acm.path), peers=[acm]) as m:
        fd = raw_fd(port_of(m))
        a = termios.tcgetattr(fd)
        a[0] |= termios.IXON
        termios.tcsetattr(fd, termios.TCSANOW, a)
        acm.device.write(b"\x13x")
        # The STOP came before the x, and read(2) does not see it.
        assert os.read(fd, 10) == b"x"
        assert os.write(fd, b"abc") == 3
        until(lambda: received(acm.device) == b"abc", "the device has what was written")
        until(lambda: outq(fd) == 0, "an empty output queue")
        os.close(fd)
