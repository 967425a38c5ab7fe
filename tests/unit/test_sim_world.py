"""The realistic simulated world (monitor/sim/world.py): its per-session DCG looks like real search traffic
(the query explains most but not all of the variance, many zeros, cv above 1), its sessions are scored as
monitor.core scores them, the night dip is the one asked for, and a candidate's drop is exact in every
hour; every session keeps its shown documents, and the option of documents only the candidate shows
keeps the other sessions as they were and its drop exact.

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
    NEW,
    NEW_BROKEN,
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


@pytest.mark.parametrize("drop", [0.05, 0.1])
def test_a_harder_mix_lowers_every_hours_mean_by_the_drop_with_the_same_sessions(worlds: dict[str, World],
                                                                                  drop: float) -> None:
    for world in worlds.values():
        dipped = world.with_night_dip(0.04)
        harder = dipped.with_harder_mix(drop)
        np.testing.assert_allclose(harder.hourly_means(), (1 - drop) * dipped.hourly_means(), rtol=1e-9)
        assert harder.outcomes is dipped.outcomes
        # the queries' mean covariate (their expected DCG) moves with the mix: what the balance check sees
        assert float(harder.hourly_shares.mean(axis=0) @ harder.expected[HEALTHY]) < float(
            dipped.hourly_shares.mean(axis=0) @ dipped.expected[HEALTHY])


def test_settings_are_validated() -> None:
    for field, value in (("available", 0.0), ("night_dip", 0.6), ("k", 0), ("zipf", -1.0),
                         ("dip_hour", 24.0), ("noise", float("nan")), ("outcomes", True)):
        with pytest.raises(ValueError, match=f"^{field}:"):
            WorldSettings(**{field: value})
    with pytest.raises(ValueError, match=r"^drop:"):
        World.build("tail", 0, WorldSettings(queries=50, outcomes=2, pool=30)).broken_share(1.0)


# -- shown documents and documents only the candidate shows ---------------------------------------------
NEW_SETTINGS = replace(DEFAULT_SETTINGS["head"], queries=300, outcomes=16, new_share=0.3)


@pytest.fixture(scope="module")
def overlap() -> World:
    return World.build("head", seed=5, settings=NEW_SETTINGS).with_night_dip(0.04)


def dcg_of(world: World, variant: int) -> np.ndarray:
    """DCG@k recomputed from the kept shown documents and their grades."""
    docs = world.outcomes.docs[variant]
    levels = np.take_along_axis(world.levels[:, None, :], np.where(docs >= 0, docs, 0).astype(np.int64), axis=2)
    gains = np.where(docs >= 0, np.asarray([0.0, 0.3, 0.7, 1.0])[levels], 0.0)
    discounts = 1.0 / np.log2(np.arange(2, docs.shape[-1] + 2))
    return (gains * discounts).sum(axis=-1)


def test_every_session_keeps_its_shown_documents(worlds: dict[str, World]) -> None:
    for world in worlds.values():
        s = world.settings
        docs = world.outcomes.docs
        assert docs.dtype == np.int16 and docs.shape == (2, s.queries, s.outcomes, s.k)
        assert docs.min() >= -1 and docs.max() < s.pool
        shown = docs >= 0
        assert (shown[..., :-1] | ~shown[..., 1:]).all()  # the filled slots come first, then -1
        n = shown.sum(-1)
        assert (world.outcomes.pos + world.outcomes.neg == n * (n - 1) // 2).all()
        assert (world.outcomes.con <= world.outcomes.pos).all() and (world.outcomes.con >= 0).all()
        np.testing.assert_allclose(dcg_of(world, HEALTHY), world.outcomes.dcg[HEALTHY], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(dcg_of(world, BROKEN), world.outcomes.dcg[BROKEN], rtol=1e-12, atol=1e-12)
        # a document appears at most once in a list
        flat = np.sort(np.where(shown, docs, -1 - np.arange(s.k)), axis=-1)
        assert (np.diff(flat, axis=-1) != 0).all()
    # shown_docs follows the flat index sample() returns
    world = worlds["tail"]
    rng = np.random.default_rng(2)
    flat, _ = world.sample(rng, np.full(50, 5.0), np.ones(50, dtype=bool), drop=0.3)
    docs = world.shown_docs(flat)
    np.testing.assert_array_equal(docs, world.outcomes.docs.reshape(-1, world.settings.k)[flat])
    np.testing.assert_allclose(world.outcomes.dcg.ravel()[flat],
                               np.concatenate([dcg_of(world, v) for v in (HEALTHY, BROKEN)]).ravel()[flat])


def test_new_documents_leave_the_healthy_and_broken_sessions_and_their_draws_unchanged(overlap: World) -> None:
    plain = World.build("head", seed=5, settings=replace(NEW_SETTINGS, new_share=0.0)).with_night_dip(0.04)
    assert plain.outcomes.docs.shape[0] == 2 and overlap.outcomes.docs.shape[0] == 4
    for name in ("dcg", "pos", "neg", "docs"):
        np.testing.assert_array_equal(getattr(overlap.outcomes, name)[:2], getattr(plain.outcomes, name))
    np.testing.assert_array_equal(overlap.levels[:, :NEW_SETTINGS.pool], plain.levels)
    hours = np.random.default_rng(0).uniform(0, 24, 5000)
    cand = np.arange(5000) % 2 == 0
    a = overlap.draw_dcg(np.random.default_rng(1), hours, cand, drop=0.05)
    b = plain.draw_dcg(np.random.default_rng(1), hours, cand, drop=0.05)
    np.testing.assert_array_equal(a, b)


def test_the_candidate_shows_its_share_of_new_and_worse_documents(overlap: World) -> None:
    s = overlap.settings
    docs = overlap.outcomes.docs
    assert s.new_count == 60 and overlap.levels.shape == (s.queries, s.pool + 60)
    assert docs[[HEALTHY, BROKEN]].max() < s.pool  # the baseline's rankers never show them
    for variant in (NEW, NEW_BROKEN):
        shown = (docs[variant] >= 0).sum(-1)
        fresh = (docs[variant] >= s.pool).sum(-1)
        np.testing.assert_array_equal(fresh, np.rint(0.3 * shown))  # exactly the share, session by session
        # the candidate fills as many slots as the healthy ranker's sessions of the query do on average
        assert shown.mean() == pytest.approx((docs[HEALTHY] >= 0).sum(-1).mean(), rel=0.05)
        np.testing.assert_allclose(dcg_of(overlap, variant), overlap.outcomes.dcg[variant], rtol=1e-12, atol=1e-12)
    assert overlap.new_document_share() == pytest.approx(0.3, abs=0.01)
    assert overlap.levels[:, s.pool:].mean() < overlap.levels[:, :s.pool].mean()  # worse than the pool
    alone = overlap.hourly_means(NEW) / overlap.hourly_means(HEALTHY) - 1
    assert (alone > -0.05).all() and (alone < 0).all()  # they lower the mean, by less than 5%
    overlap.check_against_core(np.random.default_rng(9), sessions=60)


@pytest.mark.parametrize("drop", [0.05, 0.10])
def test_a_candidate_with_new_documents_has_the_exact_drop_in_every_hour(overlap: World, drop: float) -> None:
    q = overlap.broken_share(drop, new=True)
    assert ((q > 0) & (q < 1)).all()
    fresh, fresh_broken = overlap.hourly_means(NEW), overlap.hourly_means(NEW_BROKEN)
    np.testing.assert_allclose(((1 - q) * fresh + q * fresh_broken) / overlap.hourly_means(HEALTHY), 1 - drop,
                               rtol=1e-12)
    rng = np.random.default_rng(3)
    hours = np.repeat(np.arange(HOURS), 8_000) + 0.5
    flat, _ = overlap.sample(rng, hours, np.ones(hours.size, dtype=bool), drop=drop, new=True)
    variant = flat // (NEW_SETTINGS.queries * NEW_SETTINGS.outcomes)
    assert set(np.unique(variant).tolist()) == {NEW, NEW_BROKEN}
    base = overlap.draw_dcg(np.random.default_rng(3), hours, np.zeros(hours.size, dtype=bool))
    cand = overlap.outcomes.dcg.ravel()[flat]
    assert cand.mean() / base.mean() - 1 == pytest.approx(-drop, abs=0.012)
    with pytest.raises(ValueError, match=r"^drop: the new documents alone"):
        overlap.broken_share(0.01, new=True)
    with pytest.raises(ValueError, match=r"^new: this world has no new documents"):
        World.build("tail", 0, WorldSettings(queries=50, outcomes=2, pool=30)).broken_share(0.05, new=True)


def test_new_document_settings_are_validated() -> None:
    for field, value in (("new_share", 1.0), ("new_share", -0.1), ("new_docs", -1), ("new_boost", float("inf"))):
        with pytest.raises(ValueError, match=f"^{field}:"):
            WorldSettings(**{field: value})
    with pytest.raises(ValueError, match=r"^new_docs: must hold"):
        WorldSettings(k=20, new_share=0.3, new_docs=5)
    assert WorldSettings(new_share=0.0).new_count == 0
    assert WorldSettings(k=20, pool=100, new_share=0.3).new_count == 30
