"""Simulated traffic through the in-process pipeline equals an offline recomputation from the truth.

Labels arrive late, early, duplicated, corrected, as query-level judgments, or never; invalid events are
mixed in. Every window's statistics must equal what the metric functions give on the simulator's ground
truth, and the dead letters must be exactly the invalid events, in order, with their reasons.
"""

from __future__ import annotations

import math

import pytest

from monitor.core.grades import FOUR_LEVEL_SCALE
from monitor.core.stream.stats import summarise
from monitor.sim import SimConfig, simulate
from monitor.store.memory import MemoryPipeline
from tests.support.simulated import CONFIG, recompute

pytestmark = pytest.mark.slow  # seconds each: not in the fast loop (pytest -m "not integration and not slow")


@pytest.mark.parametrize("partitions", [1, 4])
def test_simulated_stream_equals_offline_recomputation(partitions: int) -> None:
    result = simulate(SimConfig(seed=4, n_sessions=3000, duration_s=4 * 3600, bucket_hint_share=1.0,
                                invalid_rate=0.03))
    pipeline = MemoryPipeline(CONFIG, FOUR_LEVEL_SCALE, partitions=partitions)
    for event in result.events:
        pipeline.submit(event.topic, event.key, event.value)
    pipeline.advance(math.inf)

    invalid = [e for e in result.events if e.expected_error is not None]
    assert len(invalid) > 100 and len(pipeline.dead_letters) == len(invalid)
    by_bytes = sorted(invalid, key=lambda e: e.value)
    for event, dead in zip(by_bytes, sorted(pipeline.dead_letters, key=lambda d: d.raw), strict=True):
        assert dead.raw == event.value
        assert event.expected_error in f"{dead.field}: {dead.reason}"

    expected = recompute(result)
    windows = pipeline.windows()
    assert {g for (_, g) in windows} == set(expected)
    for group, want in expected.items():
        got = summarise(windows[("all", group)])
        assert (got.sessions, got.expired) == (want["sessions"], want["expired"]), group
        assert got.dcg == pytest.approx(want["dcg"] / want["sessions"], abs=1e-9)
        assert got.ndcg == pytest.approx(want["ndcg"] / want["sessions"], abs=1e-9)
        assert (got.pairs.positive("seed"), got.pairs.discordant) == (want["pos"], want["neg"])
        assert windows[("all", group)]["judged"] == want["judged"]
    assert sum(w["expired"] for w in expected.values()) > 0  # some sessions were never labelled
