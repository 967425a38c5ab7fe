"""Issue 15, defect 4, on the real worker: a flood of labels for sessions never shown is bounded.

World: a simulated stream (``monitor/sim``, 600 sessions over 6 hours, every session sampled) on 4
partitions, sent in two halves; between them, ``FLOOD`` (1,000,000; ``MONITOR_FLOOD_EVENTS`` to change)
annotations of one grade each, for session ids that are never shown (a labelling tool's bug, or a hostile
producer), produced as fast as one aiokafka producer can. Each part is drained before the next is sent,
so the flood never sits between a valid label and its impression (which part of the flood evicts which
real early labels is another test's subject: tests/integration/test_redis_state.py).

Asserted: at most ``max_early_sessions`` (10,000) sessions' early labels per partition are left in Redis;
Redis's ``used_memory`` and the worker's RSS never grew more than ``REDIS_GROWTH_MIB`` and
``RSS_GROWTH_MIB`` above their values before the flood (without the bound, the flood's labels would take
Redis several hundred MiB); every ghost grade is either still waiting or counted in
``search_relevance_labels_dropped_total{reason="evicted"}``; the worker never exited; and the relevance
series equal ``MemoryPipeline``'s on the valid events alone. The figures are printed (``-s``); on the 2-core
machine: the flood produced in 8.5 s, drained at 3,500 messages/s (4.8 min), 40,000 ghost sessions left
in Redis, 960,000 grades counted evicted, Redis +11 MiB, worker RSS +20 MiB; the whole test 5.5 min.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from pathlib import Path

import pytest
from redis import Redis

from monitor.sim import SimConfig, simulate
from monitor.sim.records import SimEvent
from monitor.store.keys import Keys
from tests.support.worker_e2e import CONFIG, CONFIG_TOML, assert_same
from tests.support.worker_harness import Group, Stream, flush_events, parse_metrics
from tests.support.worker_inputs import in_process, relevance
from tests.support.worker_load import produce_burst, rss_mib

pytestmark = pytest.mark.integration

FLOOD = int(os.environ.get("MONITOR_FLOOD_EVENTS", "1000000"))
CAP = 10_000                # StreamConfig.max_early_sessions, the default
REDIS_GROWTH_MIB = 48.0     # 4 partitions × 10,000 sessions' early labels: measured +11.0 MiB
RSS_GROWTH_MIB = 64.0       # measured +20 MiB (the worker holds one batch and Kafka's fetch buffers)


def ghosts(count: int) -> list[SimEvent]:
    out = []
    for i in range(count):
        sid = f"ghost-{i:07d}"
        value = json.dumps({"type": "annotation", "session_id": sid, "doc_id": f"g{i % 97}", "grade": "高"},
                           ensure_ascii=False).encode()
        out.append(SimEvent("annotations", sid.encode(), value, 0.0))
    return out


class Peaks:
    """Redis used_memory and the worker's RSS, sampled every 0.5 s in a thread; the peaks."""

    def __init__(self, redis: Redis, pid: int) -> None:
        self.redis, self.pid = redis, pid
        self.redis_peak, self.rss_peak = 0.0, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def redis_mib(self) -> float:
        return float(self.redis.info("memory")["used_memory"]) / 2**20

    def _run(self) -> None:
        while not self._stop.is_set():
            self.redis_peak = max(self.redis_peak, self.redis_mib())
            self.rss_peak = max(self.rss_peak, rss_mib(self.pid))
            self._stop.wait(0.5)

    def __enter__(self) -> Peaks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def test_a_ghost_label_flood_keeps_redis_and_the_worker_bounded_and_counts_every_dropped_grade(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    began = time.monotonic()
    result = simulate(SimConfig(seed=23, n_sessions=600, duration_s=6 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.0))
    stream = Stream(kafka_bootstrap)
    valid = [*result.events, *flush_events(stream, max(e.ts for e in result.events) + CONFIG.join_window + 1)]
    half = len(valid) // 2
    expected = in_process(valid, stream.partitions)
    flood = ghosts(FLOOD)

    group = Group(stream, redis_url, tmp_path, "flood", CONFIG_TOML)
    redis = Redis.from_url(redis_url)
    try:
        assert stream.send(valid[:half]) == half
        worker = group.start()
        group.drain()
        time.sleep(1.0)
        peaks = Peaks(redis, worker.process.pid)
        redis_before, rss_before = peaks.redis_mib(), rss_mib(worker.process.pid)
        with peaks:
            sent_at = time.monotonic()
            asyncio.run(produce_burst(kafka_bootstrap, stream.topics, flood, 1e9, stream.partitions))
            produced = time.monotonic() - sent_at
            group.drain(timeout=1800)
            drained = time.monotonic() - sent_at
        assert stream.send(valid[half:]) == len(valid) - half
        group.drain()
        got = parse_metrics(worker.metrics_text())
        assert worker.process.poll() is None, worker.log.read_text()[-3000:]
        waiting = [redis.zcard(Keys(group.app_id).p(p, "early")) for p in range(stream.partitions)]
        ghost_keys = sum(1 for _ in redis.scan_iter(match=f"{group.app_id}:*:e:ghost-*", count=10_000))
    finally:
        group.stop()
        redis.close()

    evicted = sum(v for (n, labels), v in got.items()
                  if n == "search_relevance_labels_dropped_total" and dict(labels)["reason"] == "evicted")
    redis_growth, rss_growth = peaks.redis_peak - redis_before, peaks.rss_peak - rss_before
    print(f"\nflood: {FLOOD} ghost labels produced in {produced:.1f} s, drained {drained:.1f} s after the first "
          f"send ({FLOOD / drained:.0f}/s)\n"
          f"early sessions left per partition: {waiting} (cap {CAP}); ghost label keys in Redis: {ghost_keys}\n"
          f"evicted grades counted: {evicted:.0f}\n"
          f"Redis used_memory: {redis_before:.1f} MiB before, peak {peaks.redis_peak:.1f} "
          f"({redis_growth:+.1f}, bound {REDIS_GROWTH_MIB:.0f})\n"
          f"worker RSS: {rss_before:.1f} MiB before, peak {peaks.rss_peak:.1f} ({rss_growth:+.1f}, bound "
          f"{RSS_GROWTH_MIB:.0f})\nwhole test {time.monotonic() - began:.0f} s")
    assert max(waiting) <= CAP and ghost_keys <= stream.partitions * CAP
    assert ghost_keys + evicted == FLOOD, "a ghost grade neither waiting nor counted"
    assert redis_growth < REDIS_GROWTH_MIB and rss_growth < RSS_GROWTH_MIB
    assert_same(relevance(got), expected)
