"""A new user's walk-through (issue 29): the README's worker block as written, with the defaults, and the
services' sub-commands as a user types them, on clusters too.

Everything runs as the commands a user runs (``python -m monitor ...`` in subprocesses) in a working
folder of its own on free ports: ``monitor services up --free-ports --workdir DIR`` (the option after the
sub-command), then the worker, produce and canary with no address exported: ``MONITOR_SERVICES_DIR``
says where the services run, as it does for ``monitor services`` itself (the README's ``.services/`` is
the repository's, which a developer's own services may use). The worker's HTTP port is a free one rather
than 9464, and its data folder a temporary one, so that the test shares nothing with the machine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from monitor.cli import COMMANDS
from monitor.services.ports import free_port
from monitor.services.process import start_time, wait_until

pytestmark = pytest.mark.integration


def user_env(workdir: Path, **more: str) -> dict[str, str]:
    """A shell with no ``MONITOR_*`` exported but where the services run (and ``more``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MONITOR_")}
    return {**env, "MONITOR_SERVICES_DIR": str(workdir), **more}


def monitor(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "monitor", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    return done.stdout


@pytest.fixture()
def workdir(tmp_path: Path) -> Iterator[Path]:
    """The services' working folder; whatever was started there is stopped at the end."""
    folder = tmp_path / "services"
    yield folder
    monitor(user_env(folder), "services", "down", "--workdir", str(folder))


def metrics(port: int) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            return str(response.read().decode())
    except OSError:
        return ""


def test_the_readme_worker_block_runs_with_the_defaults(workdir: Path, tmp_path: Path) -> None:
    env = user_env(workdir)
    started = ok(monitor(env, "services", "up", "--free-ports", "--workdir", str(workdir)))
    assert "all ready" in started
    state = json.loads((workdir / "state.json").read_text())["services"]
    kafka, redis = state["kafka"]["address"], state["redis"]["address"]

    checked = json.loads(ok(monitor(env, "worker", "--check")))
    assert (checked["kafka"], checked["redis"]) == (kafka, redis)  # found, not 9092 and 6379
    assert checked["found"] == {"settings": ["kafka_bootstrap", "redis_url"], "in": str(workdir / "state.json")}

    port = free_port()
    log = tmp_path / "worker.log"
    worker_env = {**env, "MONITOR_HTTP_PORT": str(port), "MONITOR_DATADIR": str(tmp_path / "worker-data")}
    with log.open("wb") as out:
        worker = subprocess.Popen([sys.executable, "-m", "monitor", "worker"], env=worker_env, stdout=out,
                                  stderr=subprocess.STDOUT, start_new_session=True)
    try:
        now = int(time.time())  # four hours of sessions ending now: longer than the join window (1 h)
        sent = monitor(env, "produce", "--sessions", "400", "--duration", "14400", "--start", str(now - 14400),
                       "--invalid-rate", "0.02")
        ok(sent)
        assert re.search(rf"run 0: \d+ messages to {re.escape(kafka)}$", sent.stderr.strip()), sent.stderr
        assert wait_until(lambda: re.search(r"^search_relevance_dcg\{", metrics(port), re.M) is not None, 120.0,
                          interval=1.0), log.read_text()[-3000:]
        verdicts = monitor(env, "canary", "--candidate", "ranker-b")
        assert verdicts.returncode in (0, 1), verdicts.stdout + verdicts.stderr  # 2: no comparison, or no Redis
        assert "ranker-b" in verdicts.stdout and "Traceback" not in verdicts.stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(60)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
    text = log.read_text()
    assert "Traceback" not in text, text[-3000:]
    drift = Counter(re.findall(r"Timer (\S+) woke up too", text))
    assert all(count == 1 for count in drift.values()), drift  # one per timer per ten minutes

    shown = ok(monitor(env, "services", "status", "--workdir", str(workdir)))
    assert shown.count(" answers ") == 4
    again = ok(monitor(env, "services", "up", "--free-ports", "--workdir", str(workdir)))
    assert again.count("already running") == 4



def test_clusters_status_up_twice_nodes_started_again_and_down(workdir: Path) -> None:
    env = user_env(workdir)
    ok(monitor(env, "services", "up", "--workdir", str(workdir), "--free-ports", "--only", "kafka,redis",
               "--redis-cluster", "--kafka-cluster"))
    shown = ok(monitor(env, "services", "status", "--workdir", str(workdir)))
    assert re.search(r"^redis-cluster +answers ", shown, re.M) and re.search(r"^kafka-cluster +answers ", shown, re.M)
    assert "stopped" not in shown
    again = monitor(env, "services", "up", "--workdir", str(workdir), "--free-ports", "--only", "kafka,redis",
                    "--redis-cluster", "--kafka-cluster")
    assert again.stdout.count("already running") == 2 and "in use" not in again.stderr, again.stdout + again.stderr
    ok(again)

    services = json.loads(ok(monitor(env, "services", "status", "--json", "--workdir", str(workdir))))["services"]
    checked = json.loads(ok(monitor(env, "worker", "--check")))
    assert checked["kafka"] == services["kafka-cluster"]["address"] and len(checked["kafka"].split(",")) == 3
    assert checked["redis"] == services["redis-cluster"]["address"] and checked["replication_factor"] == 3

    broker = services["kafka-cluster"]["processes"][1]  # stopped, then started again by hand, elsewhere
    os.kill(broker["pid"], signal.SIGTERM)
    assert wait_until(lambda: start_time(broker["pid"]) is None, 60.0)
    stopped = monitor(env, "services", "status", "--workdir", str(workdir))
    assert stopped.returncode == 1 and re.search(r"^kafka-cluster +2 of 3 nodes running", stopped.stdout, re.M)
    by_hand = subprocess.Popen(broker["argv"], cwd="/", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: monitor(env, "services", "status", "--workdir", str(workdir)).returncode == 0,
                          90.0, interval=1.0)
        shown = ok(monitor(env, "services", "status", "--workdir", str(workdir)))
        assert f"{by_hand.pid}*" in shown and "started again outside" in shown
        assert ok(monitor(env, "services", "up", "--workdir", str(workdir), "--only", "kafka,redis",
                          "--redis-cluster", "--kafka-cluster")).count("already running") == 2
        node = services["redis-cluster"]["processes"][2]  # a Redis node crashes: up starts it again
        os.kill(node["pid"], signal.SIGKILL)
        assert wait_until(lambda: start_time(node["pid"]) is None, 10.0)
        resumed = ok(monitor(env, "services", "up", "--workdir", str(workdir), "--only", "kafka,redis",
                             "--redis-cluster", "--kafka-cluster"))
        assert "node-2 started again (the other nodes were running)" in resumed, resumed
        assert resumed.count("already running") == 1
        ok(monitor(env, "services", "status", "--workdir", str(workdir)))  # every node answers again
        began = time.monotonic()
        done = monitor(env, "services", "down", "--workdir", str(workdir))
        ok(done)
        assert by_hand.wait(5) is not None  # down stopped it too (up recorded it as the broker's)
        assert re.search(rf"^kafka-cluster stopped \(pid \d+,{by_hand.pid},\d+\)$", done.stderr, re.M), done.stderr
        assert time.monotonic() - began < 60.0
    finally:
        if by_hand.poll() is None:
            by_hand.kill()
            by_hand.wait()
    pids = [p["pid"] for s in services.values() for p in s["processes"]]
    assert all(start_time(pid) is None for pid in pids)


SERVICES_COMMANDS = ("up", "down", "status", "install")


def test_every_sub_command_answers_help(tmp_path: Path) -> None:
    env = user_env(tmp_path / "services")
    for command in sorted(COMMANDS):
        shown = ok(monitor(env, command, "--help", timeout=60))
        assert shown.startswith(f"usage: monitor {command}"), shown
    for command in SERVICES_COMMANDS:
        shown = ok(monitor(env, "services", command, "--help", timeout=60))
        assert "--workdir" in shown
