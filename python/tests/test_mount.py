"""Mount's life cycle: configs of every form, failures with the log, and
nothing left behind."""

import os
import signal
import time
from pathlib import Path

import pytest

import monfs
from configs import KEYBOARD
from leftovers import children_of, mounts_left, process_alive


def assert_clean(m: monfs.Mount) -> None:
    assert not m.alive() and m.process.returncode is not None, "the daemon was not reaped"
    assert not monfs.is_mounted(m.root), "the mount was left behind"
    assert not m.workdir.exists(), "the work directory was left behind"
    assert str(m.root) not in "".join(mounts_left())
    assert os.getpid() not in [os.getppid()]  # sanity
    assert m.pid not in children_of(os.getpid())


def test_dict_config_mounts_and_cleans_up():
    with monfs.Mount(KEYBOARD) as m:
        assert m.alive()
        assert "QEMU USB Keyboard" in m.wait_for_text("usb/devices", "Keyboard")
        assert sorted(os.listdir(m.path("usb/usbmon"))) == ["0s", "0u", "1s", "1t", "1u"]
    assert_clean(m)


def test_yaml_text_and_file_configs(tmp_path):
    yaml = "usb:\n  buses:\n    - bus: 3\n      devices:\n        - {port: 2, kind: hid-mouse}\n"
    with monfs.Mount(yaml) as m:
        assert "3u" in os.listdir(m.path("usb/usbmon"))
        m.wait_for_text("usb/devices", "QEMU USB Mouse")
    assert_clean(m)
    f = tmp_path / "c.yaml"
    f.write_text(yaml.replace("bus: 3", "bus: 4"))
    with monfs.Mount(Path(f)) as m:
        assert "4u" in os.listdir(m.path("usb/usbmon"))
    assert_clean(m)


def test_default_config():
    with monfs.Mount() as m:
        assert "2u" in os.listdir(m.path("usb/usbmon"))


def test_bytes_in_a_dict_config_become_files():
    from monfs import descriptors as d
    dump = d.descriptors_file(d.device(0x1209, 0x0001, product=0),
                              d.configuration(d.interface(0, [d.endpoint(0x81, "bulk", 512)])))
    cfg = {"usb": {"buses": [{"bus": 1, "devices": [{"port": 1, "kind": "descriptors", "descriptors": dump}]}]}}
    with monfs.Mount(cfg) as m:
        m.wait_for_text("usb/devices", "Vendor=1209 ProdID=0001")


def test_bad_config_is_a_mount_error_with_the_log():
    m = monfs.Mount({"usb": {"buses": [{"bus": 1, "devices": [{"port": 1, "kind": "toaster"}]}]}})
    with pytest.raises(monfs.MountError) as e:
        m.start()
    assert "toaster" in str(e.value) and "toaster" in e.value.log
    assert e.value.returncode not in (None, 0)
    assert_clean(m)


def test_missing_binary_is_clear(tmp_path):
    with pytest.raises(monfs.MonfsError, match="not an executable"):
        monfs.Mount(binary=tmp_path / "nope")


def test_daemon_that_dies_mid_test_fails_the_wait_with_its_log():
    m = monfs.Mount(KEYBOARD)
    with pytest.raises(monfs.DaemonDied) as e:
        with m:
            r = m.usbmon_text(1)
            r.next()
            os.kill(m.pid, signal.SIGKILL)
            r.expect(kind="nothing")
    assert "exited with status -9" in str(e.value)
    assert "monfs daemon log" in str(e.value) and "mounted" in e.value.log
    assert_clean(m)


def test_daemon_that_dies_unnoticed_fails_at_the_end_of_the_block():
    m = monfs.Mount(KEYBOARD)
    with pytest.raises(monfs.DaemonDied):
        with m:
            os.kill(m.pid, signal.SIGKILL)
            m.process.wait()
    assert_clean(m)


def test_an_exception_in_the_block_cleans_up_and_carries_the_log():
    m = monfs.Mount(KEYBOARD)
    with pytest.raises(ZeroDivisionError) as e:
        with m:
            1 / 0
    assert_clean(m)
    if hasattr(e.value, "__notes__"):
        assert "monfs daemon log" in e.value.__notes__[0] and "mounted" in e.value.__notes__[0]
    assert "unmounted" in m.log()  # the log outlives the directory


def test_an_expectation_that_fails_outside_pytest_carries_the_log():
    m = monfs.Mount(KEYBOARD)
    with pytest.raises(monfs.ExpectationFailed) as e:
        with m:
            m.pause(1)
            with m.usbmon_text(1) as r:
                r.expect(kind="C", timeout=0.2)  # the bus is paused: nothing comes
    assert_clean(m)
    if hasattr(e.value, "__notes__"):
        assert 'control command="pause 1"' in e.value.__notes__[0]


def test_a_busy_mount_is_still_unmounted():
    with monfs.Mount(KEYBOARD) as m:
        held = open(m.path("usb/devices"))
        cwd_holder = os.open(m.path("usb"), os.O_RDONLY)
    for close in (held.close, lambda: os.close(cwd_holder)):
        try:
            close()
        except OSError:
            pass  # ENOTCONN: the daemon is gone
    assert_clean(m)


def test_stop_is_idempotent_and_pid_is_reaped():
    m = monfs.Mount(KEYBOARD).start()
    pid = m.pid
    m.stop()
    m.stop()
    assert not process_alive(pid)
    assert_clean(m)


def test_a_killed_daemon_leaves_no_peer_behind():
    from monfs import descriptors as d
    dump = d.descriptors_file(d.device(0x1209, 0x0003), d.configuration(d.interface(0, [d.endpoint(0x81, "bulk", 64)])))
    # A peer that never reads its input, so it would outlive its daemon.
    cfg = {"usb": {"buses": [{"bus": 1, "devices": [{"port": 1, "kind": "external", "descriptors": dump,
                                                     "command": ["sh", "-c", "exec sleep 600 </dev/null"]}]}]}}
    m = monfs.Mount(cfg)

    def peers_of(pid):
        # The peer only: a mount without root has fusermount3's helper
        # among the daemon's children too.
        out = []
        for c in children_of(pid):
            try:
                with open("/proc/%d/cmdline" % c, "rb") as f:
                    if b"sleep" in f.read():
                        out.append(c)
            except OSError:
                pass
        return out

    with pytest.raises(monfs.DaemonDied):
        with m:
            deadline = time.monotonic() + 30
            while not peers_of(m.pid):
                assert time.monotonic() < deadline, "the peer was never started:\n" + m.log()
                time.sleep(0.02)
            peers = peers_of(m.pid)
            os.kill(m.pid, signal.SIGKILL)
    assert_clean(m)
    # Killed with the daemon's process group; gone once the kernel is done.
    deadline = time.monotonic() + 30
    while [p for p in peers if process_alive(p)]:
        assert time.monotonic() < deadline, "the peer outlived the mount"
        time.sleep(0.02)


def test_a_daemon_that_died_before_stop_is_reported_by_stop():
    # The daemon is killed and has exited by the time stop() looks, but no
    # check() saw it die (as when __exit__'s check runs while a SIGKILL is
    # still being delivered): stop() reports the death (it once said
    # nothing, and `with Mount(...)` raised no DaemonDied).
    m = monfs.Mount(KEYBOARD)
    m.start()
    os.kill(m.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while os.waitid(os.P_PID, m.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        assert time.monotonic() < deadline, "the daemon did not die"
        time.sleep(0.01)
    with pytest.raises(monfs.DaemonDied, match="while mounted"):
        m.stop()
    assert_clean(m)
