"""monfs.run on top of `monfs run` (issue 36): the command sees the kernel's
paths, gets MONFS_MOUNT and MONFS_SOCKET, and its exit status is returned."""

import sys

import monfs
from configs import KEYBOARD


def test_the_command_reads_usbmon_at_the_kernels_path():
    out = monfs.run(["grep", "-m", "1", " C Ii:1:002:1 ", "/sys/kernel/debug/usb/usbmon/1u"], KEYBOARD,
                    timeout=120)
    assert out.returncode == 0, out.stderr
    assert monfs.parse_text_line(out.stdout).address == "1:002:1"


def test_exit_status_and_environment():
    out = monfs.run(["sh", "-c", 'test -d "$MONFS_MOUNT/usb" && test -S "$MONFS_SOCKET" && exit 7'], KEYBOARD,
                    timeout=120)
    assert out.returncode == 7, out.stderr


def test_the_command_steers_its_mount_through_the_socket():
    script = "import monfs; print(monfs.Control.from_env().pause(1))"
    out = monfs.run([sys.executable, "-c", script], KEYBOARD, timeout=120,
                    env={"PYTHONPATH": monfs.__path__[0].rsplit("/", 1)[0]})
    assert out.returncode == 0 and out.stdout.strip() == "bus 1 paused", out.stderr


def test_fast_timing_runs_the_command_once_the_devices_are_up():
    # The keyboard is enumerated and bound (monfs run waits for it) in the
    # fast timing as in the realistic one.
    out = monfs.run(["cat", "/sys/kernel/debug/usb/devices"], KEYBOARD, timing="fast", timeout=120)
    assert out.returncode == 0, out.stderr
    assert "Driver=usbhid" in out.stdout, out.stdout
