"""What every local server has in common: a folder, a port, a process, a readiness probe, a log.

A concrete server (:mod:`.kafka`, :mod:`.redis_server`, :mod:`.prometheus`, :mod:`.alertmanager`) says
how to prepare its folder (configuration, storage), which command runs it, and how to ask it whether it
really answers. :meth:`LocalServer.wait_ready` then polls that probe and, if the server exits or does not
answer in time, raises :class:`ServiceError` with the tail of its logs.
"""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from pathlib import Path
from typing import ClassVar

from monitor.services.ports import LOOPBACK
from monitor.services.process import ServerProcess, ServiceError, log_tails, wait_until


def http_ok(url: str, timeout: float = 1.0) -> bool:
    """True if a GET of ``url`` answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return int(response.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


class LocalServer(ABC):
    """A server process on ``127.0.0.1:port`` whose files all live in ``workdir / name``."""

    name: ClassVar[str]
    ready_timeout: ClassVar[float] = 30.0

    def __init__(self, workdir: Path, port: int) -> None:
        self.workdir = workdir
        self.dir = workdir / self.name
        self.port = port
        self.process: ServerProcess | None = None
        self._die_with_parent = False

    @property
    def host_port(self) -> str:
        """``127.0.0.1:<port>``."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def address(self) -> str:
        """What a client is given to connect (a URL or a bootstrap address)."""
        return self.host_port

    @property
    def log_path(self) -> Path:
        """Where the process's stdout and stderr go."""
        return self.dir / f"{self.name}.log"

    def log_paths(self) -> list[Path]:
        """Every log worth showing when the server fails, most useful last."""
        return [self.log_path]

    def ports(self) -> dict[str, int]:
        """Every port the server listens on, by role."""
        return {self.name: self.port}

    @abstractmethod
    def write_config(self) -> None:
        """Write the configuration files and create the data folders in :attr:`dir` (idempotent)."""

    def prepare(self) -> None:
        """Everything before the first start: configuration, and storage where it needs formatting."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.write_config()

    @abstractmethod
    def argv(self) -> list[str]:
        """The command that runs the server in the foreground."""

    @abstractmethod
    def answers(self) -> bool:
        """One readiness probe: True if the server really serves requests now."""

    def start(self, *, die_with_parent: bool = False) -> None:
        """Prepare the folder and spawn the server (does not wait for it)."""
        self.prepare()
        self._die_with_parent = die_with_parent
        self.process = ServerProcess.spawn(
            self.name, self.argv(), log_path=self.log_path, cwd=self.dir, die_with_parent=die_with_parent
        )

    def wait_ready(self, timeout: float | None = None) -> float:
        """Poll :meth:`answers` until True; return the seconds waited, or raise with the log tails."""
        if self.process is None:
            raise ServiceError(f"{self.name} was not started")
        limit = self.ready_timeout if timeout is None else timeout
        started = time.monotonic()
        while True:
            if self.answers():
                return time.monotonic() - started
            if not self.process.alive():
                code = self.process.exit_code()
                status = "exited" if code is None else f"exited with status {code}"
                raise ServiceError(
                    f"{self.name} {status} before it answered on {self.host_port}\n"
                    + log_tails(self.log_paths())
                )
            if time.monotonic() - started > limit:
                raise ServiceError(
                    f"{self.name} did not answer on {self.host_port} within {limit:.0f} s "
                    f"(pid {self.process.pid} still running)\n" + log_tails(self.log_paths())
                )
            time.sleep(0.1)

    def stop(self, grace_seconds: float = 30.0) -> bool:
        """Stop the server if it runs (SIGTERM, then SIGKILL after ``grace_seconds``); True if it took
        SIGKILL."""
        process, self.process = self.process, None
        return process is not None and process.stop(grace_seconds)

    def kill(self) -> None:
        """SIGKILL the server's process group at once, as a crash would: no shutdown, and what it had not
        written to disk yet is lost (the tests of failures use it; :meth:`stop` is the graceful way)."""
        process, self.process = self.process, None
        if process is None or not process.alive():
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        except PermissionError:
            os.kill(process.pid, signal.SIGKILL)
        if not wait_until(lambda: not process.alive(), 10.0, interval=0.02):
            raise ServiceError(f"{self.name} (pid {process.pid}) did not exit after SIGKILL")

    def restart(self, timeout: float | None = None) -> float:
        """Stop, start again on the same port with the same data, and wait until it answers."""
        self.stop()
        self.start(die_with_parent=self._die_with_parent)
        return self.wait_ready(timeout)
