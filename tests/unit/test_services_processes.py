"""``monitor services`` finds a server started again by hand, and stops what does not stop (issue 29).

Plain Python processes stand in for servers: one listening on a port from a server's folder is that
server; one that ignores SIGTERM is a Kafka broker waiting for a quorum that is gone.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.services.process import ServerProcess, listener_in, listening_pid, start_time, wait_until
from monitor.services.stack import down, status, up

LISTEN = """
import signal, socket, sys, time
if sys.argv[2] == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
sock.listen()
open(sys.argv[1], "w").write(str(sock.getsockname()[1]))
time.sleep(120)
"""


@pytest.fixture()
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        process.kill()
        process.wait()


def listen(folder: Path, spawned: list[subprocess.Popen[bytes]], *, ignore_term: bool = False,
           new_session: bool = True) -> tuple[subprocess.Popen[bytes], int]:
    """A process listening on a free port, run in ``folder`` (its own process group if ``new_session``)."""
    folder.mkdir(parents=True, exist_ok=True)
    port_file = folder / f"port-{len(spawned)}"
    process = subprocess.Popen([sys.executable, "-c", LISTEN, str(port_file),
                                "ignore-term" if ignore_term else "-"], cwd=folder,
                               start_new_session=new_session)
    spawned.append(process)
    assert wait_until(lambda: port_file.exists() and port_file.read_text() != "", 10.0, interval=0.02)
    return process, int(port_file.read_text())


def test_the_listener_on_a_port_is_found_and_taken_only_in_its_folder(tmp_path: Path,
                                                                     spawned: list[subprocess.Popen[bytes]]) -> None:
    process, port = listen(tmp_path / "redis", spawned)
    assert listening_pid(port) == process.pid
    found = listener_in("redis", port, tmp_path / "redis")
    assert found is not None and found.pid == process.pid and found.alive()
    assert listener_in("redis", port, tmp_path / "kafka") is None  # another folder's port: not ours
    assert listener_in("redis", port, tmp_path / "red") is None  # a prefix of the name is no folder
    process.kill()
    process.wait()
    assert listening_pid(port) is None and listener_in("redis", port, tmp_path / "redis") is None


def test_sigterm_ignored_is_followed_by_sigkill_after_the_grace(tmp_path: Path,
                                                               spawned: list[subprocess.Popen[bytes]]) -> None:
    process, _ = listen(tmp_path / "kafka", spawned, ignore_term=True, new_session=False)
    attached = ServerProcess.attach("kafka", [], process.pid, start_time(process.pid))
    began = time.monotonic()
    assert attached.stop(grace_seconds=0.5) is True  # it took SIGKILL (it leads no process group)
    assert 0.5 <= time.monotonic() - began < 5.0
    assert process.wait(5) == -9


def record(workdir: Path, name: str, pid: int, started: int | None, port: int) -> None:
    """``state.json`` as ``up`` writes it for a one-process service ``name`` on ``port``."""
    workdir.mkdir(parents=True, exist_ok=True)
    service = {"pid": pid, "processes": [{"pid": pid, "start_time": started, "argv": ["server"]}],
               "options": {}, "ports": {name: port}, "address": f"127.0.0.1:{port}", "log": "x.log",
               "started_at": "2026-01-01T00:00:00+00:00", "ready_seconds": 1.0}
    (workdir / "state.json").write_text(json.dumps({"services": {name: service}, "last_up": None}))


def test_a_server_started_again_by_hand_is_running_for_status_up_and_down(
        tmp_path: Path, spawned: list[subprocess.Popen[bytes]]) -> None:
    workdir = tmp_path / "services"
    first, port = listen(workdir / "redis", spawned)
    started = start_time(first.pid)
    first.kill()
    first.wait()
    record(workdir, "redis", first.pid, started, port)
    assert status(workdir)["services"]["redis"]["running"] is False  # nothing on its port: stopped

    again, port = listen(workdir / "redis", spawned, new_session=False)  # by hand, on a new port
    record(workdir, "redis", first.pid, started, port)
    shown = status(workdir)["services"]["redis"]
    assert shown["running"] is True and shown["pid"] == again.pid
    assert shown["processes"][0]["started_by_up"] is False

    report = up(workdir, ["redis"], {}, lambda _: None)
    assert report.already_running == ["redis"] and report.started == {}
    assert json.loads((workdir / "state.json").read_text())["services"]["redis"]["pid"] == again.pid

    said: list[str] = []
    assert down(workdir, said.append) == ["redis"]
    assert again.wait(10) is not None  # stopped, though `up` did not start it
    assert said == [f"redis         stopped (pid {again.pid})"]  # recorded by the `up` above: its own now


def test_down_stops_a_server_started_again_by_hand_and_says_so(tmp_path: Path,
                                                               spawned: list[subprocess.Popen[bytes]]) -> None:
    workdir = tmp_path / "services"
    again, port = listen(workdir / "kafka", spawned, new_session=False)
    record(workdir, "kafka", 999_999_999, 1, port)  # the recorded broker is long gone
    said: list[str] = []
    assert down(workdir, said.append) == ["kafka"]
    assert again.wait(10) == -15  # SIGTERM, to it alone: it leads no process group
    assert said == [f"kafka         stopped (pid {again.pid}; {again.pid} started again outside `up`)"]
    assert status(workdir)["services"] == {}
