"""``monitor services up | status | down``, for real, in a working folder of its own on free ports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from monitor.services.kafka import metadata_brokers
from monitor.services.ports import free_port
from monitor.services.process import ServerProcess, ServiceError, start_time
from monitor.services.redis_server import RedisServer, ping
from monitor.services.server import LocalServer, http_ok

pytestmark = pytest.mark.integration


def monitor(workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MONITOR_SERVICES_DIR": str(workdir)}
    return subprocess.run(
        [sys.executable, "-m", "monitor", "services", *args],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip


def test_up_status_down(tmp_path: Path) -> None:
    workdir = tmp_path / "services"
    started = monitor(workdir, "up", "--free-ports")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        assert "all ready" in started.stdout

        shown = monitor(workdir, "status", "--json")
        assert shown.returncode == 0, shown.stdout + shown.stderr
        report = json.loads(shown.stdout)
        services = report["services"]
        assert sorted(services) == ["alertmanager", "kafka", "prometheus", "redis"]
        assert all(service["answers"] for service in services.values())
        assert report["last_up"]["seconds_to_all_ready"] > 0
        assert report["last_up"]["kafka_jars"] in {"cached", "downloaded"}

        assert metadata_brokers("127.0.0.1", services["kafka"]["ports"]["kafka"])
        assert ping("127.0.0.1", services["redis"]["ports"]["redis"])
        assert http_ok(services["prometheus"]["address"] + "/-/ready")
        assert http_ok(services["alertmanager"]["address"] + "/-/ready")
        for name in services:
            assert (workdir / name).is_dir(), f"{name} keeps no files in the working folder"
        assert (workdir / "kafka" / "logs" / "server.log").stat().st_size > 0

        again = monitor(workdir, "up", "--free-ports")
        assert again.returncode == 0, again.stdout + again.stderr
        assert again.stdout.count("already running") == 4
    finally:
        stopped = monitor(workdir, "down")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    for name, service in services.items():
        assert start_time(service["pid"]) is None, f"{name} (pid {service['pid']}) still runs after down"
    after = monitor(workdir, "status")
    assert "nothing started" in after.stdout
    assert "last up:" in after.stdout


def test_down_leaves_alone_a_process_it_did_not_start(tmp_path: Path) -> None:
    workdir = tmp_path / "services"
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        workdir.mkdir()
        started = start_time(bystander.pid)
        assert started is not None
        record = {
            "pid": bystander.pid,
            "start_time": started + 1,  # the pid was reused by another process since up recorded it
            "argv": ["sleep", "60"],
            "ports": {"redis": 1},
            "address": "redis://127.0.0.1:1/0",
            "log": "redis.log",
        }
        (workdir / "state.json").write_text(json.dumps({"services": {"redis": record}, "last_up": None}))
        done = monitor(workdir, "down")
        assert done.returncode == 0, done.stdout + done.stderr
        assert "was not running" in done.stderr
        assert bystander.poll() is None, "down signalled a process that up did not start"
        assert not ServerProcess.attach("redis", ["sleep"], bystander.pid, started + 1).alive()
    finally:
        bystander.kill()
        bystander.wait()


def test_up_fails_clearly_when_a_port_is_taken(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = monitor(tmp_path / "services", "up", "--only", "redis", "--redis-port", str(port))
    assert done.returncode == 1
    assert f"port {port} for redis is in use" in done.stderr


class MisconfiguredRedis(RedisServer):
    """redis-server with a directive it rejects: it exits at once."""

    def config(self) -> str:
        return super().config() + "no-such-directive yes\n"


class SilentServer(LocalServer):
    """A process that runs but never answers."""

    name = "silent"

    def write_config(self) -> None:
        pass

    def argv(self) -> list[str]:
        return ["sleep", "30"]

    def answers(self) -> bool:
        return False


def test_a_server_that_exits_fails_with_its_log_tail(tmp_path: Path) -> None:
    server = MisconfiguredRedis(tmp_path, free_port())
    server.start()
    try:
        with pytest.raises(ServiceError) as raised:
            server.wait_ready()
    finally:
        server.stop()
    message = str(raised.value)
    assert message.startswith(f"redis exited with status 1 before it answered on 127.0.0.1:{server.port}")
    assert f"--- last 40 lines of {server.log_path} ---" in message
    assert "no-such-directive" in message


def test_a_server_that_never_answers_fails_after_its_timeout(tmp_path: Path) -> None:
    server = SilentServer(tmp_path, free_port())
    server.start()
    try:
        with pytest.raises(
            ServiceError, match=r"silent did not answer on 127\.0\.0\.1:\d+ within 1 s \(pid \d+"
        ):
            server.wait_ready(timeout=1)
    finally:
        server.stop()
    assert server.process is None
