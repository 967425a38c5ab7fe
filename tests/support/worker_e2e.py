"""The end-to-end worker stream: its config, the in-process expectation, and comparing a worker's /metrics to
it; the end state every end-to-end and fault test requires (:func:`finish`: the same numbers as in process,
the offline recomputation, the dead letters), and a group's progress read from its offsets in Redis (one
server or a cluster).
"""

from __future__ import annotations

import math
import os
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from monitor.core.canary import CanaryConfig, comparisons, detect_deploys
from monitor.core.events import Deploy
from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.export.prometheus import RelevanceCollector
from monitor.export.verdict_gauges import CanaryCollector
from monitor.sim import SimConfig, SimResult, simulate
from monitor.store.client import cluster_seeds, is_cluster_url
from monitor.store.keys import Keys
from monitor.store.memory import MemoryPipeline
from tests.support.simulated import recompute as recompute_truth
from tests.support.worker_harness import (
    Group,
    Samples,
    Stream,
    Worker,
    flush_events,
    parse_metrics,
    read_topic,
)

SESSIONS = int(os.environ.get("MONITOR_E2E_SESSIONS", "20000"))
# Closing is spread over steps (at most max_closes_per_step per message), and how many steps follow the
# final watermark jump depends on interleaving (the worker also consumes its own fan-outs); a cap above
# the stream's size closes every due session at the flush, in process and in the worker alike.
CONFIG = StreamConfig(join_window=1800, min_coverage=0.8, budget={"head": 1e9, "torso": 1e9, "tail": 1e9},
                      max_closes_per_step=1_000_000)
CONFIG_TOML = stream_toml(CONFIG)
EXACT_COUNTERS = {"search_relevance_impressions_total", "search_relevance_sampled_total",
                  "search_relevance_dead_letters_total"}
INTERLEAVING = {"search_relevance_join_lag_seconds"}


class Run:
    def __init__(self, stream: Stream, result: SimResult, expected: Samples, messages: int) -> None:
        self.stream, self.result, self.expected, self.messages = stream, result, expected, messages


WORKER_ONLY = {"search_relevance_events_total", "search_relevance_consumer_lag",
               "search_relevance_waiting_sessions", "search_relevance_redis_memory_bytes",
               "search_relevance_redis_retries_total",
               # the rollup's: when it was computed and by whom (the exporter's role), not the stream's numbers
               "search_relevance_rollup_timestamp_seconds", "search_relevance_rollup_age_seconds",
               "search_relevance_rollup_duration_seconds", "search_relevance_rollup_exporter"}


def comparable(samples: Samples) -> Samples:
    """The series that depend only on the impressions and the final labels (see the docstring of
    tests/integration/test_worker_e2e.py)."""
    out: Samples = {}
    for (name, labels), value in samples.items():
        if not name.startswith("search_relevance_") or name in INTERLEAVING | WORKER_ONLY:
            continue
        if name in {"search_relevance_stat_added_total", "search_relevance_stat_removed_total"}:
            if dict(labels)["stat"] != "join_lag":
                sign = 1.0 if name.endswith("added_total") else -1.0
                out[("net", labels)] = out.get(("net", labels), 0.0) + sign * value
        elif not name.endswith("_total") or name in EXACT_COUNTERS:
            out[(name, labels)] = value
    # a statistic added and taken back again nets to 0 (to rounding, when other sessions' values were added
    # in between); whether that happened at all depends on the interleaving (a session that expired before
    # a late grade or a shared-grade refresh re-scored it)
    return {key: value for key, value in out.items() if key[0] != "net" or abs(value) > 1e-9}


def assert_same(got: Samples, want: Samples) -> None:
    got, want = comparable(got), comparable(want)
    assert set(got) == set(want), (sorted(set(want) - set(got))[:5], sorted(set(got) - set(want))[:5])
    for key, value in want.items():
        if math.isinf(value) or math.isnan(value):
            assert got[key] == value or (math.isnan(got[key]) and math.isnan(value)), key
        else:
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-9), key


def recompute(result: SimResult) -> dict[str, dict[str, float]]:
    """Per group, from the simulator's truth with the metric functions (no stream code involved)."""
    return recompute_truth(result, CONFIG)


def exported(memory: MemoryPipeline, *more: Collector) -> Samples:
    """What the in-process core exports now (what a worker's /metrics must equal): its relevance series,
    and those of ``more`` collectors."""
    registry = CollectorRegistry()
    snapshot = memory.snapshot()
    for collector in (RelevanceCollector(lambda: snapshot), *more):
        registry.register(collector)
    return parse_metrics(generate_latest(registry).decode())


def make_run(kafka_bootstrap: str, sessions: int, seed: int, partitions: int = 4, replication: int = 1) -> Run:
    """Simulate, compute what the in-process core exports for the stream, produce it to fresh topics of
    ``partitions`` partitions (with ``replication`` replicas)."""
    result = simulate(SimConfig(seed=seed, n_sessions=sessions, duration_s=6 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.02))
    stream = Stream(kafka_bootstrap, partitions=partitions, replication=replication)
    flush = flush_events(stream, max(e.ts for e in result.events) + CONFIG.join_window + 1)
    events = [*result.events, *flush]
    memory = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=stream.partitions)
    for event in events:
        memory.submit(event.topic, event.key, event.value)
    deploys = sorted((d for d in memory.deploys if isinstance(d, Deploy)), key=lambda d: d.ts)
    history = memory.history()
    verdicts = comparisons(history, deploys, CanaryConfig())
    assert {c.kind for c in verdicts} == {"canary"}  # canary vs control in each bucket, per metric
    assert detect_deploys(history, deploys) == []  # the flush ranker serves an instant: not a deploy
    expected = exported(memory, CanaryCollector(lambda: (verdicts, deploys)))
    assert stream.send(events) == len(events)  # every group on these topics consumes it from the start
    return Run(stream, result, expected, len(events))


def new_group(run: Run, redis_url: str, tmp_path: Path, made: list[Group], name: str,
              env: dict[str, str] | None = None) -> Group:
    """A group on ``run``'s topics, stopped at the end by ``group_factory``; ``env``: extra settings."""
    group = Group(run.stream, redis_url, tmp_path, name, CONFIG_TOML, extra_env=dict(env or {}))
    made.append(group)
    return group


def sync_redis(url: str) -> redis.Redis | redis.cluster.RedisCluster:
    """A blocking client for ``url``: one server, or a cluster for a ``redis+cluster://`` URL."""
    if is_cluster_url(url):
        first, seeds = cluster_seeds(url)
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in seeds[1:]]
        return redis.cluster.RedisCluster.from_url(first, startup_nodes=nodes, socket_timeout=5)
    return redis.Redis.from_url(url, socket_timeout=5)


class Progress:
    """How many source messages the group has applied, from its offsets in Redis (all processes)."""

    def __init__(self, redis_url: str, group: Group) -> None:
        self.client = sync_redis(redis_url)
        self.keys = [Keys(group.app_id).p(p, "meta") for p in range(group.stream.partitions)]
        self.fields = [f"off:{topic}" for topic in group.stream.topics.values()]

    def applied(self) -> int:
        try:
            pipe = self.client.pipeline(transaction=False)
            for key in self.keys:
                pipe.hmget(key, self.fields)
            return sum(int(v) + 1 for row in pipe.execute() for v in row if v is not None)
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException):
            return -1

    def wait(self, at_least: float, seconds: float = 300.0) -> int:
        deadline = time.monotonic() + seconds
        while (done := self.applied()) < at_least:
            assert time.monotonic() < deadline, f"only {done} of {at_least:.0f} messages applied"
            time.sleep(0.02)
        return done


def assert_offline(got: dict[Any, float], run: Run) -> int:
    """The 24h window against the recomputation of every session from the simulator's truth; returns the
    sessions scored (more than half the stream's)."""
    scored = 0
    for group_key, want in recompute(run.result).items():
        bucket, ranker, variant = group_key.split("|")
        labels = {"bucket": bucket, "ranker": ranker, "variant": variant, "window": "24h"}
        short = tuple(sorted(labels.items()))
        full = tuple(sorted({**labels, "k": str(CONFIG.k[bucket])}.items()))
        assert got[("search_relevance_sessions_scored", short)] == want["sessions"], group_key
        assert got[("search_relevance_sessions_expired", short)] == want["expired"], group_key
        if want["sessions"]:
            scored += int(want["sessions"])
            assert got[("search_relevance_dcg", full)] == pytest.approx(want["dcg"] / want["sessions"], abs=1e-9)
            assert got[("search_relevance_ndcg", full)] == pytest.approx(want["ndcg"] / want["sessions"], abs=1e-9)
            assert got[("search_relevance_judged_top_k", full)] == pytest.approx(
                want["judged"] / want["sessions"], abs=1e-9)
            pnr = want["pos"] / want["neg"] if want["neg"] else math.inf
            assert got[("search_relevance_pnr", full)] == pytest.approx(pnr, rel=1e-12)
    assert scored > run.result.config.n_sessions // 2
    return scored


def assert_dead_letters(run: Run, group: Group, got: dict[Any, float]) -> int:
    """Dead letters: exactly once in the state (the counter is the number of invalid events), at least once
    on the topic (every invalid event, byte for byte with its reason; copies of one source offset are
    identical; nothing else). Returns how many were published twice."""
    invalid = sorted(e.value for e in run.result.events if e.expected_error is not None)
    assert sum(v for (n, _), v in got.items() if n == "search_relevance_dead_letters_total") == len(invalid)
    copies: dict[tuple[bytes, ...], list[tuple[bytes | None, bytes, dict[str, bytes]]]] = defaultdict(list)
    for key, value, headers in read_topic(run.stream.bootstrap, group.outputs.dead_letters):
        source = tuple(headers[f"monitor.source.{h}"] for h in ("topic", "partition", "offset"))
        copies[source].append((key, value, headers))
    assert all(all(c == same[0] for c in same) for same in copies.values())  # copies are identical
    assert sorted(same[0][1] for same in copies.values()) == invalid  # each invalid event, nothing else
    by_value = {e.value: e for e in run.result.events if e.expected_error is not None}
    for (_, value, headers), *_ in copies.values():
        reason = f"{headers['monitor.error.field'].decode()}: {headers['monitor.error.reason'].decode()}"
        assert str(by_value[value].expected_error) in reason, (by_value[value].expected_error, reason)
    return sum(len(same) for same in copies.values()) - len(copies)


def finish(run: Run, group: Group, worker: Worker) -> int:
    """Drain, then the end state every test requires: the in-process numbers, the offline recomputation
    and the dead letters; returns how many dead letters were published twice."""
    group.drain()
    got = parse_metrics(worker.metrics_text())
    assert_same(got, run.expected)
    assert_offline(got, run)
    return assert_dead_letters(run, group, got)
