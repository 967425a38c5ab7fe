"""``monitor worker --processes N``: N worker processes in one consumer group, from one command.

Four processes on a 16-partition stream (the simulated e2e stream: late, duplicated, corrected and
query-level labels, 2% invalid events) export exactly what the in-process core exports, every relevance
and canary series to 1e-9, from each of their four ``/metrics``; the range assignor gives each the same
partition numbers of the three topics (co-partitioned: a session's impression and labels meet in one
process) and the four hold all 16 between them; a SIGTERM to the command stops every process.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path

import pytest

from monitor.services.ports import free_port
from tests.support.worker_e2e import SESSIONS, assert_same, make_run, new_group
from tests.support.worker_harness import Group, Worker, parse_metrics

pytestmark = pytest.mark.integration

PROCESSES = 4
PARTITIONS = 16


def free_ports(count: int) -> int:
    """A port p such that p, p + 1, ... p + count - 1 are free on loopback now."""
    for _ in range(100):
        base = free_port()
        try:
            for port in range(base, base + count):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise AssertionError(f"no {count} consecutive free ports")


def children(pid: int) -> list[int]:
    return [int(c) for task in Path(f"/proc/{pid}/task").iterdir()
            for c in (task / "children").read_text().split()]


def test_four_processes_on_sixteen_partitions_export_what_the_core_exports(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    run = make_run(kafka_bootstrap, max(SESSIONS // 8, 1500), seed=31, partitions=PARTITIONS)
    group = new_group(run, redis_url, tmp_path, group_factory, "processes")
    group.args = ("--processes", str(PROCESSES))
    base = free_ports(PROCESSES)
    command = group.start(port=base)  # ready: the first process answers /readyz
    workers = [Worker(command.process, base + i, command.log) for i in range(PROCESSES)]
    deadline = time.monotonic() + 120
    while not all(w.ready() for w in workers):
        assert time.monotonic() < deadline, command.log.read_text()[-3000:]
        time.sleep(0.5)
    pids = children(command.process.pid)
    assert len(pids) == PROCESSES
    group.drain()
    exported = [parse_metrics(w.metrics_text()) for w in workers]
    for samples in exported:
        assert_same(samples, run.expected)
    held = [{(dict(labels)["topic"], int(dict(labels)["partition"])) for (name, labels) in samples
             if name == "search_relevance_consumer_lag"} for samples in exported]
    numbers = [{p for _, p in pairs} for pairs in held]
    topics = set(run.stream.topics.values())
    for pairs, mine in zip(held, numbers, strict=True):
        assert mine and pairs == {(t, p) for t in topics for p in mine}  # the same numbers of each topic
    assert sorted(p for mine in numbers for p in mine) == list(range(PARTITIONS))  # all, each once
    consumed = [sum(v for (n, _), v in s.items() if n == "search_relevance_events_total") for s in exported]
    assert all(c > 0 for c in consumed) and sum(consumed) >= run.messages
    command.process.send_signal(signal.SIGTERM)
    assert command.process.wait(timeout=60) == 0
    assert not any(Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text()
                   for pid in pids)
    group.workers.clear()
