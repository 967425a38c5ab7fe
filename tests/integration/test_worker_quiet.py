"""Issue 15, defect 3, on the real worker (Kafka, Redis, ``monitor worker``): a partition whose traffic
stops closes its sessions by the other partitions' event time, as the embedded default does.

World: a hand-made stream on 4 partitions (``tests/unit/test_quiet_and_flood.quiet_stream``): partition 0
gets 20 sessions (10 fully labelled, 10 never labelled) in its first 20 s and then nothing; the other
three get a fully labelled session every 30 s for two hours of event time. Nothing flushes the stream at
the end. The worker runs with ``MONITOR_IDLE_TIMEOUT=2``: once partition 0 has had no impression for 2 s
of wall time, its 10 unlabelled sessions are due by the others' event time minus ``idle_after`` and
expire. Asserted: the worker's relevance series then equal ``MemoryPipeline``'s on the same stream (which
closes them after the impression that makes them due), that differs from what the stream gives without
the rule (the 10 sessions waiting for ever), and the worker counts the 10 closes.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.sim.config import DEFAULT_START_TS
from monitor.sim.records import SimEvent
from monitor.store.memory import MemoryPipeline
from tests.support.quiet_flood import quiet_stream
from tests.support.worker_e2e import CONFIG, CONFIG_TOML, assert_same, comparable, exported
from tests.support.worker_harness import Group, Stream, parse_metrics
from tests.support.worker_inputs import in_process, relevance

pytestmark = pytest.mark.integration


def test_a_quiet_partition_closes_its_sessions_in_the_worker_as_in_process(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    stream = Stream(kafka_bootstrap, partitions=4)
    events, quiet = quiet_stream(stream.partitions, base=DEFAULT_START_TS)  # a worker refuses times before 2000
    records = [SimEvent(topic, key, value, 0.0) for topic, key, value in events]
    expected = in_process(records, stream.partitions)
    stuck = MemoryPipeline(replace(CONFIG, idle_after=1e9), FOUR_LEVEL_SCALE, partitions=stream.partitions)
    for record in records:
        stuck.submit(record.topic, record.key, record.value)
    assert comparable(relevance(exported(stuck))) != comparable(expected), "the rule must change numbers"
    assert stream.send(records) == len(records)
    group = Group(stream, redis_url, tmp_path, "quiet", CONFIG_TOML,
                  extra_env={"MONITOR_IDLE_TIMEOUT": "2"})
    try:
        worker = group.start()
        group.drain()
        deadline, got = time.monotonic() + 60, {}
        while time.monotonic() < deadline:
            got = parse_metrics(worker.metrics_text())
            if sum(v for (n, _), v in got.items() if n == "search_relevance_quiet_closes_total") >= 10:
                break
            time.sleep(0.5)
        got = parse_metrics(worker.metrics_text())
        assert worker.process.poll() is None
    finally:
        group.stop()
    closes = sum(v for (n, _), v in got.items() if n == "search_relevance_quiet_closes_total")
    assert closes == 10, worker.log.read_text()[-3000:]
    assert_same(got, expected)
    expired = sum(v for (n, _), v in expected.items() if n == "search_relevance_sessions_expired")
    assert expired >= 10 and len(quiet) == 20
