"""``monfs.run``: a command where the kernel's paths are monfs's."""

import os
import shutil
import subprocess
import tempfile
from typing import Any, Mapping, Optional, Sequence, Union

from ._mount import WORKDIR_PREFIX, Config, find_binary, write_config

__all__ = ["run", "run_argv"]

PathLike = Union[str, os.PathLike]


def run_argv(cmd: Sequence[str], config_path: Optional[str] = None, *, args: Sequence[str] = (),
             binary: Optional[PathLike] = None, timing: Optional[str] = None) -> list:
    """The ``monfs run`` command line that runs ``cmd`` with a config file."""
    argv = [find_binary(binary), "run"]
    if config_path is not None:
        argv += ["--config", config_path]
    if timing is not None:
        argv += ["--timing", timing]
    return argv + list(args) + ["--"] + list(cmd)


def run(
    cmd: Sequence[str],
    config: Config = None,
    *,
    args: Sequence[str] = (),
    binary: Optional[PathLike] = None,
    timing: Optional[str] = None,
    env: Optional[Mapping[str, str]] = None,
    check: bool = False,
    capture_output: bool = True,
    text: bool = True,
    timeout: Optional[float] = None,
    **popen: Any,
) -> "subprocess.CompletedProcess[Any]":
    """Run ``cmd`` under ``monfs run``: a private mount of ``config`` (see
    :data:`monfs.Config`) at the kernel's own paths (``/sys/kernel/debug/usb/usbmon``,
    ``/dev/usbmonN``, ``/sys/kernel/tracing``, ``/dev/bus/usb``...), so an
    unmodified tool reads monfs where it reads the kernel. ``cmd`` gets
    ``MONFS_MOUNT`` (the mount's path) and ``MONFS_SOCKET`` (its control
    socket) in its environment, so it, or a script it runs, can steer the
    devices (``monfs.Control(os.environ["MONFS_SOCKET"])``).

    Returns a :class:`subprocess.CompletedProcess` whose ``returncode`` is
    ``cmd``'s (``monfs run`` exits with it); ``check=True`` raises
    :class:`subprocess.CalledProcessError` for a non-zero one. Output is
    captured as text unless told otherwise; other keywords go to
    :func:`subprocess.run`. ``args`` are more mount options; ``timing="fast"``
    is ``--timing fast`` (see :class:`monfs.Mount`).
    """
    workdir = tempfile.mkdtemp(prefix=WORKDIR_PREFIX)
    try:
        cfg = write_config(config, workdir)
        full_env = dict(os.environ)
        full_env.update(env or {})
        return subprocess.run(run_argv(cmd, cfg, args=args, binary=binary, timing=timing), env=full_env, check=check,
                              capture_output=capture_output, text=text, timeout=timeout, **popen)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
