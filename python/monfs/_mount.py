"""Mount: a monfs mount for the length of a ``with`` block (or a test)."""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Union

from ._stream import HANG
from .control import Control, Ports
from .errors import DaemonDied, ExpectationFailed, MonfsError, MountError, PeerError, log_tail
from .tracing import TracePipe
from .usbmon import BinaryReader, MmapReader, TextReader

__all__ = ["Mount", "Config", "find_binary", "find_helper", "is_mounted", "write_config"]

PathLike = Union[str, os.PathLike]

#: A configuration: None (the built-in default), a mapping (sent to monfs
#: as JSON, which YAML reads; ``bytes`` values become files and their paths),
#: YAML text (a ``str``), or the path of a YAML file (a ``pathlib.Path``).
Config = Union[None, Mapping[str, Any], str, os.PathLike]

#: The prefix of every directory a Mount makes (mountpoint, socket, log).
WORKDIR_PREFIX = "monfs-py-"

_PEER_DEATH = "external device's peer"


def find_binary(binary: Optional[PathLike] = None) -> str:
    """The monfs executable: ``binary``, else ``$MONFS_BIN``, else ``monfs``
    on ``PATH``. Raises :class:`MonfsError` saying where it looked."""
    for cand in (binary, os.environ.get("MONFS_BIN")):
        if cand:
            p = os.fspath(cand)
            if os.access(p, os.X_OK):
                return os.path.abspath(p)
            raise MonfsError("monfs binary %r is not an executable file" % p)
    found = shutil.which("monfs")
    if found:
        return found
    raise MonfsError(
        "monfs not found: pass binary=, set MONFS_BIN, or put monfs on PATH "
        "(cargo install --path . or the Debian package)"
    )


def find_helper(name: str, binary: Optional[PathLike] = None) -> str:
    """The namespace helper ``usbmon-ns`` or ``trace-ns``: ``$MONFS_USBMON_NS``
    / ``$MONFS_TRACE_NS``, ``monfs-usbmon-ns`` / ``monfs-trace-ns`` on
    ``PATH`` (the Debian package's), or ``scripts/NAME`` of the checkout
    the monfs binary was built in."""
    env = os.environ.get("MONFS_%s" % name.upper().replace("-", "_"))
    if env:
        return env
    found = shutil.which("monfs-" + name)
    if found:
        return found
    try:
        exe = Path(find_binary(binary)).resolve()
        for parent in list(exe.parents)[:4]:
            cand = parent / "scripts" / name
            if cand.is_file():
                return str(cand)
    except MonfsError:
        pass
    raise MonfsError("monfs-%s not found (install the Debian package, or set MONFS_%s)"
                     % (name, name.upper().replace("-", "_")))


def _unescape_mountinfo(s: str) -> str:
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def is_mounted(path: PathLike) -> bool:
    """Whether something is mounted at ``path`` (by /proc/self/mountinfo)."""
    want = os.path.realpath(os.fspath(path))
    try:
        with open("/proc/self/mountinfo") as f:
            return any(_unescape_mountinfo(line.split(" ")[4]) == want for line in f)
    except OSError:
        return False


def _blobs_to_files(value: Any, workdir: str, counter: List[int]) -> Any:
    if isinstance(value, (bytes, bytearray)):
        counter[0] += 1
        p = os.path.join(workdir, "blob-%d.bin" % counter[0])
        with open(p, "wb") as f:
            f.write(value)
        return p
    if isinstance(value, Mapping):
        return {k: _blobs_to_files(v, workdir, counter) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_blobs_to_files(v, workdir, counter) for v in value]
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return value


def write_config(config: Config, workdir: PathLike) -> Optional[str]:
    """Write ``config`` where monfs can read it; its path (None for the
    built-in default). A ``pathlib.Path`` is used where it is."""
    if config is None:
        return None
    if isinstance(config, os.PathLike):
        return os.path.abspath(os.fspath(config))
    path = os.path.join(os.fspath(workdir), "config.yaml")
    if isinstance(config, str):
        text = config
    elif isinstance(config, Mapping):
        text = json.dumps(_blobs_to_files(config, os.fspath(workdir), [0]), indent=1)
    else:
        raise TypeError("config must be None, a dict, YAML text (str) or a pathlib.Path, not %s"
                        % type(config).__name__)
    with open(path, "w") as f:
        f.write(text)
    return path


def _package_parent() -> str:
    return str(Path(__file__).resolve().parent.parent)


class Mount:
    """A monfs mount in a fresh temporary directory, as root or (through
    fusermount3) as any user.

    ::

        with monfs.Mount({"seed": 1, "usb": {"buses": [{"bus": 1, "devices": [
                {"port": 1, "kind": "hid-keyboard"}]}]}}) as m:
            with m.usbmon_text(1) as r:
                m.fault(1, 1, "stall")
                r.expect(kind="C", status=-32)

    Entering starts ``monfs mount --foreground`` and returns once the mount
    serves; leaving (also on an exception) stops the daemon, waits for it,
    unmounts whatever is left and removes the directory. A mount that does
    not come up raises :class:`MountError` with the daemon's log; a daemon
    that dies, or an external device's peer that fails, raises
    :class:`DaemonDied` or :class:`PeerError` from the next wait on a reader,
    from :meth:`check`, or at the end of the block. An exception leaving the
    block gets the log's last lines as a note.

    ``config``: see :data:`Config`. ``args``: more ``monfs mount`` options
    (``["--no-mmap"]``). ``env``: extra environment for the daemon (and the
    ``command:`` peers it starts, which also find this package on
    ``PYTHONPATH``). ``seed``: the configuration's seed. ``timing``:
    ``"fast"`` cuts every simulated latency a thousandfold (enumeration,
    transfers, frames) with the same events in the same order, for test
    suites; ``"realistic"`` or None: the configuration's. ``peers``: socket peers (:class:`monfs.peer.SocketPeer`)
    to start before the daemon and stop after it. ``peer_errors``: ``"raise"``
    (default) makes a peer that monfs unplugged for dying or answering
    garbage an error; ``"ignore"`` lets a test provoke that.
    """

    def __init__(
        self,
        config: Config = None,
        *,
        binary: Optional[PathLike] = None,
        args: Sequence[str] = (),
        env: Optional[Mapping[str, str]] = None,
        seed: Optional[int] = None,
        timing: Optional[str] = None,
        log_level: str = "debug",
        timeout: float = HANG,
        peers: Iterable[Any] = (),
        peer_errors: str = "raise",
    ) -> None:
        if peer_errors not in ("raise", "ignore"):
            raise ValueError("peer_errors must be 'raise' or 'ignore'")
        if timing not in (None, "realistic", "fast"):
            raise ValueError("timing must be 'realistic' or 'fast'")
        self.config = config
        self.binary = find_binary(binary)
        self.args = list(args)
        self.env = dict(env or {})
        self.seed = seed
        self.timing = timing
        self.log_level = log_level
        self.timeout = timeout
        self.peers = list(peers)
        self.peer_errors = peer_errors
        self.workdir: Optional[Path] = None
        self.process: Optional[subprocess.Popen] = None
        self._log_offset = 0
        self._readers: List[Any] = []
        self._ctl: Optional[Control] = None
        self._stopped = False
        # The mount came up (start() returned): a death after that is
        # reported by check() or stop().
        self._served = False
        self._final_log: Optional[str] = None

    # --- life cycle ---------------------------------------------------

    def __enter__(self) -> "Mount":
        self.start()
        return self

    def __exit__(self, exc_type: Any, exc: Optional[BaseException], tb: Any) -> None:
        pending: Optional[BaseException] = None
        if exc is None:
            try:
                self.check()
            except MonfsError as e:
                pending = e
        try:
            self.stop()
        except MonfsError as e:
            pending = pending or e
        if exc is not None and hasattr(exc, "add_note") and not isinstance(exc, (MountError, DaemonDied, PeerError)):
            exc.add_note("--- monfs daemon log (last lines) ---\n" + log_tail(self.log()))
        if pending is not None:
            raise pending

    def start(self) -> "Mount":
        """Mount and wait until the mount serves (at most ``timeout`` s)."""
        if self.process is not None:
            raise MonfsError("this Mount was already started")
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX))
        os.chmod(self.workdir, 0o755)
        self.root.mkdir()
        try:
            for p in self.peers:
                p.start()
            cfg = write_config(self.config, self.workdir)
            cmd = [self.binary, "--log-level", self.log_level, "mount", str(self.root), "--foreground",
                   "--ctl-socket", str(self.socket)]
            if cfg is not None:
                cmd += ["--config", cfg]
            if self.seed is not None:
                cmd += ["--seed", str(self.seed)]
            if self.timing is not None:
                cmd += ["--timing", self.timing]
            cmd += self.args
            env = dict(os.environ)
            env.pop("MONFS_LOG", None)
            env.update(self.env)
            # The command: peers it starts import this package, whatever
            # else the caller put on PYTHONPATH.
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [env.get("PYTHONPATH"), _package_parent()]))
            with open(self.log_path, "wb") as log:
                self.process = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, env=env,
                                                start_new_session=True)
            self._wait_serving()
            self._served = True
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_serving(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + self.timeout
        while not (self.path("monfs/null").exists() and self.socket.exists()):
            rc = self._status()
            if rc is not None:
                raise MountError("monfs did not mount: the daemon exited with status %d" % rc, self.log(), rc)
            if time.monotonic() > deadline:
                raise MountError("monfs did not mount within %g s" % self.timeout, self.log())
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop the daemon (SIGTERM, SIGKILL after ``timeout`` s), reap it,
        unmount anything left, stop the peers and remove the directory.
        Safe to call twice. Raises :class:`DaemonDied` if the daemon had to be
        killed, exited with an error when asked to stop, or had died with one
        before."""
        if self._stopped:
            return
        self._stopped = True
        problem: Optional[MonfsError] = None
        for r in self._readers:
            try:
                r.close()
            except OSError:
                pass
        self._readers.clear()
        p = self.process
        if p is not None and p.returncode is None:
            asked = False
            if not self._exited():
                asked = True
                p.send_signal(signal.SIGTERM)
                if not self._exited(self.timeout):
                    os.kill(p.pid, signal.SIGKILL)
                    self._exited(self.timeout)
                    problem = DaemonDied("monfs did not stop within %g s of SIGTERM; killed" % self.timeout,
                                         self.log())
            self._kill_group()
            rc = p.wait()
            if asked and rc != 0 and problem is None:
                problem = DaemonDied("monfs exited with status %d when stopped" % rc, self.log(), rc)
            elif not asked and rc != 0 and problem is None and self._served:
                # It died before it was asked to stop, after the last
                # check() saw it running (a SIGKILL takes a moment).
                problem = DaemonDied("monfs (pid %d) exited with status %d while mounted" % (p.pid, rc),
                                     self.log(), rc)
        if self.workdir is not None and is_mounted(self.root):
            if os.geteuid() == 0:
                subprocess.run(["umount", "-l", str(self.root)], stderr=subprocess.DEVNULL)
            else:
                subprocess.run(["fusermount3", "-u", "-z", str(self.root)], stderr=subprocess.DEVNULL)
        for peer in self.peers:
            try:
                peer.close()
            except Exception:  # a peer's own failure is reported by check()
                pass
        if self.workdir is not None and not is_mounted(self.root):
            self._final_log = self.log()  # log() goes on answering with it
            shutil.rmtree(self.workdir, ignore_errors=True)
        if problem is not None:
            raise problem

    def _status(self) -> Optional[int]:
        """The exited daemon's status as ``returncode`` would give it (a
        signal as its negative number), without reaping it; None while it
        runs."""
        assert self.process is not None
        if self.process.returncode is not None:
            return self.process.returncode
        try:
            info = os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return self.process.poll()
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def _exited(self, timeout: float = 0.0) -> bool:
        """Whether the daemon has exited, waiting up to ``timeout`` seconds,
        without reaping it: its pid, and so its process group's id, stay
        taken until :meth:`_kill_group` has run."""
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while True:
            try:
                if os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.01)

    def _kill_group(self) -> None:
        """Kill what is left of the exited daemon's process group (the
        ``command:`` peers it started). Called before the daemon is reaped,
        so the group's id cannot belong to anyone else yet."""
        p = self.process
        if p is None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    # --- state ----------------------------------------------------------

    @property
    def root(self) -> Path:
        """The mountpoint."""
        if self.workdir is None:
            raise MonfsError("the mount is not started")
        return self.workdir / "mnt"

    @property
    def socket(self) -> Path:
        """The control socket."""
        if self.workdir is None:
            raise MonfsError("the mount is not started")
        return self.workdir / "ctl.sock"

    @property
    def log_path(self) -> Path:
        """The daemon's log file (its stderr, and its peers')."""
        if self.workdir is None:
            raise MonfsError("the mount is not started")
        return self.workdir / "monfs.log"

    @property
    def pid(self) -> Optional[int]:
        """The daemon's pid."""
        return self.process.pid if self.process else None

    def path(self, rel: str) -> Path:
        """A path in the mount: ``m.path("usb/devices")``."""
        return self.root / rel

    def read(self, rel: str) -> str:
        """The text of a file in the mount."""
        return self.path(rel).read_text()

    def write(self, rel: str, text: str) -> None:
        """Write ``text`` to a file in the mount, as ``echo TEXT > FILE``."""
        with open(self.path(rel), "w") as f:
            f.write(text)

    def wait_for_text(self, rel: str, text: str, timeout: float = HANG) -> str:
        """Read the file ``rel`` until it contains ``text`` (a device that
        shows up in ``usb/devices`` once enumerated, say); its content. Raises
        :class:`ExpectationFailed` with the last content after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            content = self.read(rel)
            if text in content:
                return content
            self.check()
            if time.monotonic() >= deadline:
                raise ExpectationFailed("%r in %s" % (text, rel), timeout, [content])
            time.sleep(0.02)

    def wait_for_log(self, text: str, timeout: float = HANG) -> str:
        """Wait until the daemon's log holds ``text``; the line that does.
        Raises :class:`ExpectationFailed` with the log's last lines after
        ``timeout``. (Does not check the daemon's health: a test may wait for
        the log line of a failure it provoked.)"""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.log().splitlines():
                if text in line:
                    return line
            if time.monotonic() >= deadline:
                raise ExpectationFailed("%r in the daemon's log" % text, timeout, self.log().splitlines()[-20:])
            time.sleep(0.02)

    def log(self) -> str:
        """The daemon's log so far (after :meth:`stop`, all of it)."""
        if self._final_log is not None:
            return self._final_log
        try:
            return self.log_path.read_text(errors="replace")
        except (OSError, MonfsError):
            return ""

    def alive(self) -> bool:
        """Whether the daemon is running."""
        return self.process is not None and not self._stopped and self._status() is None

    def check(self) -> None:
        """Raise :class:`DaemonDied` if the daemon exited, :class:`PeerError`
        if a socket peer's handler raised or (with ``peer_errors="raise"``)
        monfs unplugged an external device because its peer failed."""
        if self.process is None or self._stopped:
            return
        for peer in self.peers:
            err = getattr(peer, "error", None)
            if err is not None:
                raise PeerError("peer %s failed: %s" % (getattr(peer, "name", peer), err), self.log(),
                                str(err))
        rc = self._status()
        if rc is not None:
            raise DaemonDied("monfs (pid %d) exited with status %d while mounted" % (self.process.pid, rc),
                             self.log(), rc)
        if self.peer_errors == "raise":
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(self._log_offset)
                    new = f.read()
            except OSError:
                return
            cut = new.rfind(b"\n") + 1
            self._log_offset += cut
            for line in new[:cut].decode("utf-8", "replace").splitlines():
                if _PEER_DEATH in line and "unplugging the device" in line:
                    raise PeerError("monfs unplugged an external device: " + line.strip(), self.log(),
                                    line.strip())

    # --- readers ---------------------------------------------------------

    def _track(self, reader: Any) -> Any:
        self._readers.append(reader)
        return reader

    def usbmon_text(self, bus: int = 0, fmt: str = "u") -> TextReader:
        """A reader of ``usb/usbmon/<bus><fmt>`` (``u`` or ``t``); it sees the
        events from now on."""
        return self._track(TextReader(self.path("usb/usbmon/%d%s" % (bus, fmt)), self.check))

    def usbmon_binary(self, bus: int = 0, alloc: int = 65536) -> BinaryReader:
        """A reader of ``dev/usbmon<bus>`` through ``MON_IOCX_GETX``."""
        return self._track(BinaryReader(self.path("dev/usbmon%d" % bus), self.check, self.pid, alloc))

    def usbmon_mmap(self, bus: int = 0, ring_size: Optional[int] = None) -> MmapReader:
        """A reader of ``dev/usbmon<bus>``'s mapped ring (``MON_IOCX_MFETCH``)."""
        return self._track(MmapReader(self.path("dev/usbmon%d" % bus), self.check, self.pid, ring_size))

    def trace_pipe(self, instance: Optional[str] = None) -> TracePipe:
        """A reader of ``tracing/trace_pipe`` (or an instance's)."""
        return self._track(TracePipe(self._tracing(instance) / "trace_pipe", self.check))

    def _tracing(self, instance: Optional[str]) -> Path:
        base = self.path("tracing")
        return base / "instances" / instance if instance else base

    def enable_event(self, event: str, filter: Optional[str] = None, instance: Optional[str] = None) -> None:
        """Enable ``SYSTEM:EVENT`` (or a whole ``SYSTEM``), with an optional
        filter (``"status != 0"``)."""
        d = self._tracing(instance) / "events" / event.replace(":", "/")
        if filter is not None:
            (d / "filter").write_text(filter + "\n")
        (d / "enable").write_text("1\n")

    def disable_event(self, event: str, instance: Optional[str] = None) -> None:
        """Disable ``SYSTEM:EVENT`` (or a whole ``SYSTEM``)."""
        d = self._tracing(instance) / "events" / event.replace(":", "/")
        (d / "enable").write_text("0\n")

    def in_namespace(self, cmd: Sequence[str], helper: str = "usbmon-ns") -> List[str]:
        """``cmd`` wrapped in a namespace helper that puts this mount at the
        kernel's paths: ``usbmon-ns`` (``/dev/usbmonN``, for tcpdump) or
        ``trace-ns`` (``/sys/kernel/tracing``, for trace-cmd)."""
        return [find_helper(helper, self.binary), str(self.root), "--"] + list(cmd)

    # --- control -----------------------------------------------------------

    @property
    def ctl(self) -> Control:
        """The typed control client of this mount's socket."""
        if self._ctl is None:
            self._ctl = Control(self.socket)
        return self._ctl

    def plug(self, bus: int, ports: Ports, kind: str, wait: bool = True,
             **settings: object) -> str:
        """Hot-plug a device; with ``wait``, return once it is there (see
        :meth:`monfs.Control.plug`)."""
        return self.ctl.plug(bus, ports, kind, wait=wait, **settings)

    def unplug(self, bus: int, ports: Ports, wait: bool = True) -> str:
        """Unplug a device; with ``wait``, return once it is gone (see
        :meth:`monfs.Control.unplug`)."""
        return self.ctl.unplug(bus, ports, wait=wait)

    def fault(self, bus: int, ports: Ports, kind: str) -> str:
        """Fault a device's next transfer (see :meth:`monfs.Control.fault`)."""
        return self.ctl.fault(bus, ports, kind)

    def pause(self, bus: int) -> str:
        """Pause a bus (see :meth:`monfs.Control.pause`)."""
        return self.ctl.pause(bus)

    def resume(self, bus: int) -> str:
        """Resume a bus (see :meth:`monfs.Control.resume`)."""
        return self.ctl.resume(bus)

    def replay(self, bus: int, capture: PathLike, **options: Any) -> str:
        """Replay a capture on a bus (see :meth:`monfs.Control.replay`)."""
        return self.ctl.replay(bus, capture, **options)

    def trace(self, event: str, **fields: object) -> str:
        """Record a configured trace event (see :meth:`monfs.Control.trace`)."""
        return self.ctl.trace(event, **fields)

    def __repr__(self) -> str:
        state = "unstarted" if self.workdir is None else ("running" if self.alive() else "stopped")
        return "<monfs.Mount %s at %s>" % (state, self.workdir / "mnt" if self.workdir else "-")




Mount.__module__ = "monfs"
