"""The end-to-end worker stream: its config, the in-process expectation, and comparing a worker's /metrics to
it.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from monitor.core.canary import CanaryConfig, comparisons, detect_deploys
from monitor.core.events import Deploy
from monitor.core.grades import SEED_SCALE
from monitor.core.stream.config import StreamConfig, stream_toml
from monitor.export.canary import CanaryCollector
from monitor.export.prometheus import RelevanceCollector
from monitor.pipeline.memory import MemoryPipeline
from monitor.sim import SimConfig, SimResult, simulate
from tests.support.simulated import recompute as recompute_truth
from tests.support.worker_harness import Group, Samples, Stream, flush_events, parse_metrics

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
               "search_relevance_redis_retries_total"}


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


def make_run(kafka_bootstrap: str, sessions: int, seed: int, partitions: int = 4) -> Run:
    """Simulate, compute what the in-process core exports for the stream, produce it to fresh topics of
    ``partitions`` partitions."""
    result = simulate(SimConfig(seed=seed, n_sessions=sessions, duration_s=6 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.02))
    stream = Stream(kafka_bootstrap, partitions=partitions)
    flush = flush_events(stream, max(e.ts for e in result.events) + CONFIG.join_window + 1)
    events = [*result.events, *flush]
    memory = MemoryPipeline(CONFIG, SEED_SCALE, partitions=stream.partitions)
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
