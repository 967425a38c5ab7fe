"""The realistic simulated world (monitor/sim/world.py): its per-session DCG looks like real search traffic
(the query explains most but not all of the variance, many zeros, cv above 1), its sessions are scored as
monitor.core scores them, the night dip is the one asked for, and a candidate's drop is exact in every
hour.

The worlds here are the default settings with fewer precomputed outcomes (head) or queries (tail), to
stay fast; the benchmark prints the statistics of the full defaults."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from monitor.sim.world import (
    BROKEN,
    DEFAULT_SETTINGS,
    HEALTHY,
    HOURS,
    World,
    WorldSettings,
    summarize_sample,
)

SMALL = {"head": replace(DEFAULT_SETTINGS["head"], outcomes=24),
         "tail": replace(DEFAULT_SETTINGS["tail"], queries=4_000)}


@pytest.fixture(scope="module")
def worlds() -> dict[str, World]:
    return {bucket: World.build(bucket, seed=3, settings=settings) for bucket, settings in SMALL.items()}


@pytest.mark.parametrize("bucket", ["head", "tail"])
def test_the_world_looks_like_real_search_traffic(worlds: dict[str, World], bucket: str) -> None:
    summary = worlds[bucket].summary()
    assert 0.55 <= summary.query_share <= 0.70, summary.line()
    assert 0.11 <= summary.zeros <= 0.31, summary.line()
    assert 1.1 <= summary.cv <= 1.3, summary.line()
    assert summary.broken_mean < 0.2 * summary.mean  # the broken ranker is far worse
    # drawn sessions have the statistics the exact summary states
    rng = np.random.default_rng(1)
    hours = rng.uniform(0, 24, 400_000)
    dcg, pos, neg, query = worlds[bucket].draw(rng, hours, np.zeros(hours.size, dtype=bool))
    sample = summarize_sample(dcg, query, hours)
    assert sample.mean == pytest.approx(summary.mean, rel=0.02)
    assert sample.cv == pytest.approx(summary.cv, abs=0.03)
    assert sample.zeros == pytest.approx(summary.zeros, abs=0.005)
    assert sample.query_share == pytest.approx(summary.query_share, abs=0.03)
    assert pos.sum() / neg.sum() == pytest.approx(summary.pnr, rel=0.03)


def test_head_queries_repeat_and_tail_queries_rarely_do(worlds: dict[str, World]) -> None:
    head, tail = worlds["head"].summary(), worlds["tail"].summary()
    assert head.top_query_share > 0.03  # the commonest head query: thousands of sessions a day
    assert 48_000 / head.distinct_per_day > 40  # a day's sessions per distinct head query
    assert tail.top_query_share < 0.002
    assert tail.distinct_per_day > 0.9 * worlds["tail"].settings.queries  # nearly every tail query, once or twice
    full = DEFAULT_SETTINGS["tail"]  # the benchmark's tail: 20,000 queries, ~18,000 distinct a day
    assert full.queries >= 20_000 and full.zipf <= 0.2


def test_sessions_are_scored_as_monitor_core_scores_them(worlds: dict[str, World]) -> None:
    """The vectorised DCG@k and pair counts equal monitor.core.metrics.dcg and pair_counts."""
    for world in worlds.values():
        world.check_against_core(np.random.default_rng(8), sessions=150)


@pytest.mark.parametrize("dip", [0.0, 0.02, 0.04, 0.08])
def test_the_night_dip_is_the_one_asked_for(worlds: dict[str, World], dip: float) -> None:
    world = worlds["tail"].with_night_dip(dip)
    exact = world.summary()
    assert exact.night_dip == pytest.approx(dip, abs=1e-6)
    assert int(np.argmin(exact.hourly)) == 3 or dip == 0
    assert exact.hourly.mean() == pytest.approx(worlds["tail"].summary().mean, rel=1e-9)
    # drawn sessions: the cosine fitted to 24 sampled hourly means has the requested amplitude (±0.5 pt)
    rng = np.random.default_rng(int(dip * 100))
    hours = np.repeat(np.arange(HOURS), 60_000) + 0.5
    sample = summarize_sample(world.draw_dcg(rng, hours, np.zeros(hours.size, dtype=bool)),
                              np.zeros(hours.size, dtype=np.int64), hours)
    relative = sample.hourly / sample.hourly.mean() - 1.0
    fitted = -2.0 / HOURS * float(relative @ np.cos(2 * math.pi * (np.arange(HOURS) - 3) / HOURS))
    assert fitted == pytest.approx(dip, abs=0.005)
    # the mix, not the ranker: the queries' own outcomes are those of the world without the dip
    assert world.outcomes is worlds["tail"].outcomes


@pytest.mark.parametrize("drop", [0.02, 0.05, 0.10])
def test_a_candidates_drop_is_exact_in_every_hour(worlds: dict[str, World], drop: float) -> None:
    world = worlds["head"].with_night_dip(0.08)
    q = world.broken_share(drop)
    healthy, broken = world.hourly_means(HEALTHY), world.hourly_means(BROKEN)
    expected = (1 - q) * healthy + q * broken
    np.testing.assert_allclose(expected / healthy, 1 - drop, rtol=1e-12)
    # drawn: the same random numbers with and without the drop differ only in the broken sessions
    rng_a, rng_b = np.random.default_rng(4), np.random.default_rng(4)
    hours = np.repeat(np.arange(HOURS), 20_000)
    base = world.draw_dcg(rng_a, hours, np.ones(hours.size, dtype=bool))
    cand = world.draw_dcg(rng_b, hours, np.ones(hours.size, dtype=bool), drop=drop)
    assert cand.mean() / base.mean() - 1 == pytest.approx(-drop, abs=0.006)


def test_settings_are_validated() -> None:
    for field, value in (("available", 0.0), ("night_dip", 0.6), ("k", 0), ("zipf", -1.0),
                         ("dip_hour", 24.0), ("noise", float("nan")), ("outcomes", True)):
        with pytest.raises(ValueError, match=f"^{field}:"):
            WorldSettings(**{field: value})
    with pytest.raises(ValueError, match=r"^drop:"):
        World.build("tail", 0, WorldSettings(queries=50, outcomes=2, pool=30)).broken_share(1.0)
