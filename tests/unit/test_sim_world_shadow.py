"""The realistic world's shadow lists (monitor/sim/world_shadow.py): sessions scored as monitor.core scores
them, an equal candidate's paired means agree, a 5% worse candidate is calibrated to a mean DCG ratio of
0.95, and the top-k overlap with the served list stays in the declared 50–90% range.

A tail world with fewer queries and precomputed sessions, to stay fast; ``benchmarks/shadow.py`` prints
the figures of the full defaults."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from monitor.core.canary.paired import FIELDS, paired_estimate, paired_stats
from monitor.sim.world import DEFAULT_SETTINGS, World
from monitor.sim.world_shadow import ShadowSettings, ShadowWorld

SMALL = replace(DEFAULT_SETTINGS["tail"], queries=600, outcomes=8)


@pytest.fixture(scope="module")
def shadow() -> ShadowWorld:
    return ShadowWorld.build(World.build("tail", seed=5, settings=SMALL, night_dip=0.04), seed=11)


def test_shadow_sessions_are_scored_as_the_core_scores_them(shadow: ShadowWorld) -> None:
    shadow.check_against_core(np.random.default_rng(1), sessions=24)
    broken = replace(shadow, union=shadow.union + 1)
    with pytest.raises(AssertionError):
        broken.check_against_core(np.random.default_rng(1), sessions=24)


def test_an_equal_candidate_gives_paired_sums_whose_means_agree(shadow: ShadowWorld) -> None:
    equal = shadow.index("equal")
    assert shadow.ratio(equal) == pytest.approx(1.0, abs=0.01)
    flat, _ = shadow.sample(np.random.default_rng(2), np.random.default_rng(3).uniform(0, 24, 3_000))
    x, y = shadow.served.reshape(3, -1)[:, flat], shadow.shadow[equal].reshape(3, -1)[:, flat]
    sums = dict.fromkeys(FIELDS, 0.0)
    for i in range(flat.size):
        for name, value in paired_stats(x[0, i], y[0, i], (x[1, i], x[2, i]), (y[1, i], y[2, i])).items():
            sums[name] += value
    assert sums["pair_x"] == pytest.approx(x[0].sum()) and sums["pair_xy"] == pytest.approx((x[0] * y[0]).sum())
    estimate = paired_estimate(sums, "dcg")
    assert estimate.value is not None and estimate.variance is not None
    assert abs(estimate.value) < 3 * estimate.variance ** 0.5  # the paired means agree
    assert abs(estimate.value) < 0.03


def test_worse_candidates_are_calibrated_to_their_drop(shadow: ShadowWorld) -> None:
    for name, want in (("5% worse", 0.95), ("5% worse (subset)", 0.95), ("10% worse", 0.90)):
        assert shadow.ratio(shadow.index(name)) == pytest.approx(want, abs=0.01), name
    assert shadow.ratio(shadow.index("broken")) < 0.2
    subset = shadow.index("5% worse (subset)")
    outside = ~shadow.subset
    assert np.array_equal(shadow.shadow[subset][:, outside], shadow.shadow[shadow.index("equal")][:, outside])


def test_the_overlap_with_the_served_list_is_in_the_declared_range(shadow: ShadowWorld) -> None:
    overlap, p = shadow.overlap(shadow.index("equal"))
    ok = ~np.isnan(overlap)
    order = np.argsort(overlap[ok])
    cum = np.cumsum(p[ok][order]) / p[ok].sum()
    low, high = (float(overlap[ok][order][np.searchsorted(cum, q)]) for q in (0.05, 0.95))
    assert 0.5 <= low < high <= 0.9  # 90% of the traffic has 50–90% of its top k shared
    assert (shadow.union >= shadow.shown[None]).all() and (shadow.shared <= shadow.shown[None]).all()


def test_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="rho"):
        ShadowSettings(rho_low=0.9, rho_high=0.3)
    with pytest.raises(ValueError, match="subset"):
        ShadowSettings(subset=0.0)
