"""The rollup of what ``/metrics`` exports, on a real Redis and real workers (issue 17 part 3).

* The lease (Lua in a real redis-server): one holder at a time; it passes on once its holder stops
  renewing, or gives it up; only the holder stores, and never over a later rollup.
* A scrape's cost: with the same stream's state spread over 4 and over 64 partitions, the rollup's read is
  one round trip and one command at both, while the direct read (what a scrape did before) grows with the
  partitions; and the rollup holds exactly what the direct read gives (the same exposition, byte for
  byte).
* Three workers on 8 partitions: exactly one computes (the exporter gauge and the computed counters);
  each exports the in-process numbers (1e-9); every scrape of every worker reads the rollup's key once and
  no partition's aggregates (each command attributed to its worker by the connection's name in
  ``SLOWLOG``, logging every command for the while); the exporter killed with SIGKILL is replaced by
  another worker within the lease's time to live, whose rollups export the same numbers; meanwhile the
  survivors' ``/readyz`` says not ready because the rollup got older than ``max_rollup_age``, and ready again
  after (issue 31); that one, stopped normally (SIGTERM), gives the lease up as it exits.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from redis.asyncio import Redis

from monitor.core.canary import CanaryConfig
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig
from monitor.export.prometheus import RelevanceCollector
from monitor.export.verdict_gauges import CanaryCollector
from monitor.sim import SimConfig, simulate
from monitor.store.lease import Lease, Stored
from monitor.store.memory import partition_of
from monitor.store.writer import RedisState
from monitor.worker.rollup import RollupBody, compute
from monitor.worker.rollup_lease import RollupLease
from tests.support.redis_counting import RoundTrips, measure
from tests.support.redis_runs import run_through_redis
from tests.support.worker_e2e import assert_same, make_run, new_group, sync_redis
from tests.support.worker_harness import Group, Worker, parse_metrics

pytestmark = pytest.mark.integration

MAX_AGE = 2.0
"""``MONITOR_MAX_ROLLUP_AGE`` of the three workers (their ``rollup_interval``: 1 s, their lease: 3 s)."""
CONFIG = StreamConfig(join_window=1800, budget={"head": 1e9, "torso": 1e9, "tail": 1e9})


async def test_the_lease_has_one_holder_and_passes_on(redis_url: str) -> None:
    redis = Redis.from_url(redis_url)
    tag = uuid.uuid4().hex[:8]
    lease = Lease(redis, f"test-lease-{tag}:{{rollup:x}}:lease", f"test-lease-{tag}:{{rollup:x}}:value")
    try:
        assert await lease.read() is None and await lease.freshness() is None
        assert await lease.hold("a", 0.6) == (True, "a")
        assert await lease.hold("b", 0.6) == (False, "a")  # one holder at a time
        assert await lease.store("b", 0.6, b"two", 11.0, 21.0, 60) == 0  # only the holder stores
        assert await lease.store("a", 0.6, b"one", 10.0, 20.0, 60) == 1
        assert await lease.read() == Stored(b"one", 10.0, 20.0) and await lease.freshness() == (10.0, 20.0)
        assert 0 < await redis.pttl(lease.value_key) <= 60_000
        for _ in range(3):  # renewed within its time to live, it stays
            await asyncio.sleep(0.3)
            assert await lease.hold("a", 0.6) == (True, "a")
            assert await lease.hold("b", 0.6) == (False, "a")
        await asyncio.sleep(0.9)  # a stops renewing: the lease runs out and the next to ask takes it
        assert await lease.holder() is None
        assert await lease.hold("b", 5.0) == (True, "b")
        assert await lease.store("a", 5.0, b"late", 12.0, 22.0, 60) == 0  # a, paused past its lease: refused
        assert await lease.store("b", 5.0, b"older", 9.0, 19.0, 60) == -1  # never over a later rollup
        assert await lease.store("b", 5.0, b"two", 11.0, 21.0, 60) == 1
        assert (await lease.read() or Stored(b"", 0, 0)).data == b"two"
        assert await lease.release("a") is False and await lease.holder() == "b"
        assert await lease.release("b") is True  # given up: taken at once, no time to live to wait out
        assert await lease.hold("a", 5.0) == (True, "a")
    finally:
        await redis.delete(lease.lease_key, lease.value_key)
        await redis.aclose()


def exposition(shared: RollupBody) -> bytes:
    registry = CollectorRegistry()
    registry.register(RelevanceCollector(lambda: shared.snapshot))
    registry.register(CanaryCollector(lambda: (shared.verdicts.comparisons, shared.verdicts.deploys)))
    return generate_latest(registry) + f"{shared.waiting} {shared.redis_memory > 0}".encode()


async def test_a_scrape_costs_one_command_and_a_rollup_the_same_reads_at_4_and_at_64_partitions(redis_url: str) -> None:
    # every impression with its bucket: no sketch reads (a batch spanning more than the sketch keeps of
    # event time trips SketchCache, which evicts a slice the same batch needs)
    result = simulate(SimConfig(seed=43, n_sessions=300, duration_s=3 * 3600, invalid_rate=0.0,
                                bucket_hint_share=1.0))
    events = [(e.topic, e.key, e.value) for e in result.events]
    trips = RoundTrips()
    redis = trips.client(redis_url)
    direct: dict[int, Any] = {}
    prefixes = []
    try:
        await redis.ping()
        for partitions in (4, 64):
            prefixes.append(prefix := f"test-rollup-{uuid.uuid4().hex[:8]}")
            state = RedisState(redis, CONFIG, FOUR_LEVEL_SCALE, partitions, prefix=prefix)
            # each partition's messages in order, in batches of up to 500 (the interleaving of partitions
            # does not matter here: the rollup is compared with a direct read of the same state)
            ordered = sorted(events, key=lambda e, n=partitions: partition_of(e[1], n))
            await run_through_redis(state, ordered, partitions, batch=500)
            assert len(await state.partitions_held()) >= 0.9 * partitions  # spread over (nearly) them all
            exporter = RollupLease(state, CanaryConfig(), 5.0, token="test")
            assert await exporter.round() and exporter.holding and exporter.computed == 1
            cost, computed = await measure(redis, trips, lambda s=state: compute(s, CanaryConfig()))
            direct[partitions] = cost
            reads = [await measure(redis, trips, exporter.read) for _ in range(3)]
            for read_cost, rollup in reads:
                assert rollup is not None
                assert (read_cost.round_trips, read_cost.commands) == (1, 1), (partitions, read_cost)
                # the state did not change since: the rollup holds what the direct read gives now, exactly
                assert exposition(rollup.shared).replace(str(rollup.shared.redis_memory).encode(), b"") == \
                    exposition(computed).replace(str(computed.redis_memory).encode(), b"")
            assert b"search_relevance_canary_verdict{" in exposition(computed)
            print(f"\n{partitions} partitions: direct {cost.round_trips} round trips, {cost.commands} commands; "
                  f"rollup 1 and 1")
        # what the exporter reads does not grow with the partitions: the groups' totals (4 groups at both)
        assert direct[64].commands <= 1.25 * direct[4].commands
        assert direct[64].round_trips == direct[4].round_trips
    finally:
        for prefix in prefixes:
            keys = [key async for key in redis.scan_iter(match=f"{prefix}*", count=1000)]
            for start in range(0, len(keys), 500):
                await redis.delete(*keys[start:start + 500])
        await redis.aclose()


def samples_of(worker: Worker) -> dict[Any, float]:
    return parse_metrics(worker.metrics_text())


def gauge(samples: dict[Any, float], name: str) -> float:
    return samples[(f"search_relevance_{name}", ())]


AGGREGATES = (":agg:", ":ep:", ":qep:", ":cnt", ":add", ":rem", ":seen", ":deploys", ":partitions")
READS = {"HGETALL", "HGET", "HMGET", "LRANGE", "ZCARD", "SMEMBERS"}


def test_one_of_three_workers_computes_scrapes_read_one_key_and_a_killed_exporter_is_replaced(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    run = make_run(kafka_bootstrap, 1500, seed=41, partitions=8)
    group = new_group(run, redis_url, tmp_path, group_factory, "rollup",
                      env={"MONITOR_ROLLUP_INTERVAL": "1", "MONITOR_MAX_ROLLUP_AGE": str(MAX_AGE)})
    workers = [group.start() for _ in range(3)]
    group.drain()  # and every worker exports a rollup computed after the drain
    before = [samples_of(w) for w in workers]
    for samples in before:
        assert_same(samples, run.expected)
    roles = [gauge(s, "rollup_exporter") for s in before]
    assert sorted(roles) == [0.0, 0.0, 1.0], roles
    exporter = workers[roles.index(1.0)]

    # every command of the next scrapes, named by the worker that sent it
    client = sync_redis(redis_url)
    old = client.config_get("slowlog-*")
    client.config_set("slowlog-max-len", 200_000)
    client.config_set("slowlog-log-slower-than", 0)
    client.slowlog_reset()
    try:
        scrapes = 10
        for _ in range(scrapes):
            for worker in workers:
                worker.metrics_text()
            time.sleep(0.5)
        logged = client.slowlog_get(200_000)
    finally:
        client.config_set("slowlog-log-slower-than", old["slowlog-log-slower-than"])
        client.config_set("slowlog-max-len", old["slowlog-max-len"])
    after = [samples_of(w) for w in workers]
    by_worker: dict[int, list[list[str]]] = {w.process.pid: [] for w in workers}
    for entry in logged:
        name = entry.get("client_name", b"") or b""
        pid = int(name.decode().rpartition(":")[2]) if name.startswith(b"monitor-worker:") else None
        if pid in by_worker:
            command = entry["command"]
            by_worker[pid].append((command.decode(errors="replace") if isinstance(command, bytes)
                                   else str(command)).split(" "))
    for worker, was, now in zip(workers, before, after, strict=True):
        sent = by_worker[worker.process.pid]
        rollup_reads = [c for c in sent if c[0].upper() == "HMGET" and "{rollup:" in c[1]]
        # one command per scrape: the rollup's key (the scrapes before and after this window not counted)
        assert scrapes <= len(rollup_reads) <= scrapes + 1, (worker.port, len(rollup_reads))
        aggregate_reads = [c for c in sent if c[0].upper() in READS and any(a in c[1] for a in AGGREGATES)]
        computed = gauge(now, "rollups_computed_total") - gauge(was, "rollups_computed_total")
        if worker is exporter:
            # it computed (every max(1 s, 10 × the computation)), reading every group's totals
            assert computed >= 1 and aggregate_reads, (computed, gauge(now, "rollup_duration_seconds"))
        else:
            assert computed == 0 and aggregate_reads == [], (worker.port, aggregate_reads[:3])

    # the exporter killed: another worker takes the lease once it runs out (3 s) and computes
    killed = time.time()
    group.kill(exporter)
    survivors = [w for w in workers if w is not exporter]
    deadline = time.monotonic() + 60
    too_old: list[tuple[float, str]] = []  # (when, problem): /readyz of a survivor, not ready, the rollup too old
    while True:
        for w in survivors:
            answer = w.request("/readyz", timeout=5)
            if answer.status == 503:
                too_old.extend((time.time(), p) for p in answer.json()["problems"] if "max_rollup_age" in p)
        seen = [samples_of(w) for w in survivors]
        if sum(gauge(s, "rollup_exporter") for s in seen) == 1 and all(
                gauge(s, "rollup_timestamp_seconds") > killed for s in seen):
            break
        assert time.monotonic() < deadline, "no worker took the exporter's place"
        time.sleep(0.1)
    took_over = time.time() - killed
    # while the lease (3 s) outlived the exporter, the values got older than max_rollup_age (2 s) and the
    # survivors said so; with the successor's rollups they are ready again (the bound: docs/worker.md)
    assert too_old and any(when > killed + MAX_AGE - 1.0 for when, _ in too_old), too_old[:3]
    assert f"older than max_rollup_age ({MAX_AGE:g} s)" in too_old[-1][1], too_old[-1]
    ready_by = time.monotonic() + 30
    while not all(w.request("/readyz", timeout=5).status == 200 for w in survivors):
        assert time.monotonic() < ready_by, [w.request("/readyz").json() for w in survivors]
        time.sleep(0.2)
    successor = survivors[[gauge(s, "rollup_exporter") for s in seen].index(1.0)]
    assert gauge(samples_of(successor), "rollups_computed_total") > 0
    for worker in survivors:
        assert_same(samples_of(worker), run.expected)  # its rollups: the same numbers
    # a worker stopped normally gives the lease up on its way out (no time to live to wait out)
    lease_keys = [k for k in client.scan_iter(match=f"{group.app_id}:{{rollup:*}}:lease")]
    assert len(lease_keys) == 1
    successor.process.terminate()
    assert successor.process.wait(timeout=60) == 0
    group.workers.remove(successor)
    holder = client.get(lease_keys[0])
    assert holder is None or holder.decode().split(":")[-2] != str(successor.process.pid), holder
    print(f"\nthe exporter killed: replaced within {took_over:.1f} s (lease: 3 s); a rollup took "
          f"{gauge(before[0], 'rollup_duration_seconds'):.2f} s; scrapes read one key")


def test_a_worker_on_uvloop_exports_the_core_and_one_with_other_groups_than_the_state_refuses(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path, group_factory: list[Group]) -> None:
    """A worker on uvloop (MONITOR_EVENT_LOOP) drains a stream and exports exactly what the in-process core
    computes; then a worker of the same group started with MONITOR_REDIS_GROUPS=2, on state written in the
    default 4 groups, exits with status 2 and the reason before it consumes."""
    run = make_run(kafka_bootstrap, 300, seed=45, partitions=4)
    group = new_group(run, redis_url, tmp_path, group_factory, "layout",
                      env={"MONITOR_EVENT_LOOP": "uvloop", "MONITOR_LOG_LEVEL": "info"})
    worker = group.start()
    group.drain()
    assert "event loop: uvloop.Loop" in worker.log.read_text()
    assert_same(samples_of(worker), run.expected)
    group.stop()
    group.extra_env = {"MONITOR_REDIS_GROUPS": "2"}
    refused = group.spawn()
    assert refused.process.wait(timeout=120) == 2, refused.log.read_text()[-3000:]
    assert "laid out in 4 groups, and this worker was started with MONITOR_REDIS_GROUPS=2" in \
        refused.log.read_text()
