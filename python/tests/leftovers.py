"""What a test checks was left behind: mounts and processes."""

import os
from typing import List

from monfs._mount import WORKDIR_PREFIX


def mounts_left() -> List[str]:
    """Mountpoints of monfs-py mounts still mounted."""
    with open("/proc/self/mountinfo") as f:
        return [line.split(" ")[4] for line in f if WORKDIR_PREFIX in line.split(" ")[4]]


def process_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def children_of(pid: int) -> List[int]:
    """Live child processes of ``pid``."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                if int(fields[1]) == pid and fields[0] != "Z":
                    out.append(int(name))
            except OSError:
                pass
    return out
