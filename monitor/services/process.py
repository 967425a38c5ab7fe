"""Server processes: spawn one with its output in a log file, stop it, and tell whether it still runs.

A server is spawned in a session of its own (so Ctrl-C in the terminal that ran ``monitor services up``
does not reach it) with stdout and stderr appended to a log file in its working folder. It is stopped
with SIGTERM to its process group, then SIGKILL after a grace period. A process that was started by
another command (``up``, then ``down`` later) is *attached* by its pid and its start time (field 22 of
``/proc/<pid>/stat``, recorded at spawn); before any signal is sent the pid must still have that start
time, so a recycled pid is never signalled. (The command line is no identity: ``redis-server`` rewrites
its own process title.)

A server started again by hand (a node of a cluster restarted after a test of failures) has another pid
than the one recorded. :func:`listener_in` finds it: the process listening on the server's port whose
working folder or command line lies in the server's folder (Redis runs in its data folder, Kafka and
Prometheus name their configuration file there), so ``status``, ``up`` and ``down`` treat it as the
server it replaced, and nothing outside the folder is ever taken for one.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ServiceError(RuntimeError):
    """A server could not be installed, started, reached or stopped; the message says why."""


def tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a text file, or a note saying it does not exist."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - 64 * 1024))
            text = handle.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return f"({path} does not exist)"
    return "\n".join(text.splitlines()[-lines:])


def log_tails(paths: Sequence[Path], lines: int = 40) -> str:
    """Tails of several log files, each under a header naming the file."""
    parts = [f"--- last {lines} lines of {path} ---\n{tail(path, lines)}" for path in paths if path.exists()]
    return "\n".join(parts) if parts else "(no log file was written)"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def start_time(pid: int) -> int | None:
    """The start time of a live (not zombie) process in clock ticks since boot, or None if there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 3, starttime 22
    return None if fields[0] in {"Z", "X"} else int(fields[19])


class ServerProcess:
    """One server process: either spawned here (:meth:`spawn`) or found again by pid (:meth:`attach`)."""

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        pid: int,
        started: int | None,
        popen: subprocess.Popen[bytes] | None,
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.pid = pid
        self.started = started
        self._popen = popen

    @classmethod
    def spawn(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        die_with_parent: bool = False,
    ) -> ServerProcess:
        """Start ``argv`` in its own session, appending its output to ``log_path``.

        With ``die_with_parent`` (used by the test fixtures) the kernel sends the server SIGTERM when the
        spawning thread ends, so a test session killed hard does not leave servers behind. It is only
        honoured on the main thread, whose end is the end of the process.
        """
        log_path.parent.mkdir(parents=True, exist_ok=True)
        on_main_thread = threading.current_thread() is threading.main_thread()
        with log_path.open("ab") as log:
            try:
                popen = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=None if env is None else dict(env),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    preexec_fn=_die_with_parent if die_with_parent and on_main_thread else None,
                )
            except OSError as error:
                raise ServiceError(f"{name}: cannot run {argv[0]}: {error}") from error
        return cls(name, argv, popen.pid, start_time(popen.pid), popen)

    @classmethod
    def attach(cls, name: str, argv: Sequence[str], pid: int, started: int | None) -> ServerProcess:
        """A process spawned earlier, by another command, as ``pid`` at ``started`` (:func:`start_time`)."""
        return cls(name, argv, pid, started, None)

    def exit_code(self) -> int | None:
        """The exit status if the process has ended and was spawned here, else None."""
        return None if self._popen is None else self._popen.poll()

    def alive(self) -> bool:
        """True while the process runs and is still the one that was spawned (same pid, same start time)."""
        if self._popen is not None:
            return self._popen.poll() is None
        return self.started is not None and start_time(self.pid) == self.started

    def stop(self, grace_seconds: float = 30.0) -> bool:
        """SIGTERM the process group, wait up to ``grace_seconds``, then SIGKILL it (a Kafka broker whose
        quorum is gone waits for it forever); return True if it took SIGKILL."""
        if not self.alive():
            return False
        self._signal(signal.SIGTERM)
        if self._wait_gone(grace_seconds):
            return False
        self._signal(signal.SIGKILL)
        if not self._wait_gone(10.0):
            raise ServiceError(f"{self.name} (pid {self.pid}) did not exit after SIGKILL")
        return True

    def _signal(self, signum: signal.Signals) -> None:
        """``signum`` to the process group the server leads (its children too), or to the process alone if
        it leads none (a server started again by hand, from a shell script)."""
        try:
            if os.getpgid(self.pid) == self.pid:
                os.killpg(self.pid, signum)
            else:
                os.kill(self.pid, signum)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(self.pid, signum)

    def _wait_gone(self, seconds: float) -> bool:
        if self._popen is not None:
            try:
                self._popen.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                return False
            return True
        return wait_until(lambda: not self.alive(), seconds)


def _listening_inodes(port: int) -> set[str]:
    """The inodes of the sockets listening on TCP ``port`` (IPv4 or IPv6), from ``/proc/net``."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(inode)
    return found


def listening_pid(port: int) -> int | None:
    """The pid of a process (of those this user may inspect) listening on TCP ``port``, or None."""
    inodes = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (entry / "fd").iterdir()):
                return int(entry.name)
        except OSError:  # gone, or not ours to inspect
            continue
    return None


def _within(path: str, folder: Path) -> bool:
    return path == str(folder) or path.startswith(str(folder) + os.sep)


def listener_in(name: str, port: int, folder: Path) -> ServerProcess | None:
    """The process listening on ``port`` if it runs in ``folder`` (its working folder, or an argument of
    its command line, lies there), attached as ``name``; else None."""
    pid = listening_pid(port)
    if pid is None:
        return None
    try:
        cwd = os.readlink(f"/proc/{pid}/cwd")
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    argv = [word.decode(errors="replace") for word in words if word]
    folder = folder.resolve()
    if not (_within(cwd, folder) or any(_within(arg, folder) or f"={folder}{os.sep}" in arg for arg in argv)):
        return None
    started = start_time(pid)
    return None if started is None else ServerProcess.attach(name, argv, pid, started)


def wait_until(condition: Callable[[], bool], seconds: float, interval: float = 0.1) -> bool:
    """Poll ``condition`` until it is true (returns True) or ``seconds`` pass (returns False)."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
