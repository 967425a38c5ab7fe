"""The query-difficulty adjustment (monitor/core/canary/adjusted.py): the regression-adjusted, time-matched
estimator against a brute-force per-session computation, β = 0 against the unadjusted one, its variance
against the spread of simulated estimates, no bias under an effect, and an A/A Monte Carlo under
continuous monitoring (false regressions ≤ α)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig
from monitor.core.canary.adjusted import (
    FIELDS,
    CovariateSums,
    adjusted_mean_path,
    adjusted_mean_paths,
    arm_slopes,
    pooled_slope,
    query_covariate,
)
from monitor.core.canary.matched import matched_mean_path, matched_mean_paths
from monitor.core.canary.verdict_paths import (
    REGRESSION,
    EffectPath,
    effect_verdict_path,
    log_mean_path,
    sticky_path,
)

CONFIG = CanaryConfig()


def queries_world(rng: np.random.Generator, queries: int = 300) -> tuple[np.ndarray, np.ndarray]:
    """Per query: its true mean DCG (gamma: most of the variance between queries) and traffic share."""
    means = rng.gamma(0.8, 2.5, queries)
    shares = rng.dirichlet(np.full(queries, 2.0))
    return means, shares


def sessions(rng: np.random.Generator, means: np.ndarray, shares: np.ndarray, shape: tuple[int, ...],
             factor: np.ndarray | float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """DCG of sessions (zero-inflated, around their query's mean times ``factor``; the query explains about
    60% of the variance, as in the realistic world) and their query."""
    q = rng.choice(means.size, size=shape, p=shares)
    x = np.where(rng.random(shape) < 0.15, 0.0, means[q] / 0.85 * rng.gamma(6.0, 1 / 6, shape)) * factor
    return x, q


def history(rng: np.random.Generator, means: np.ndarray, shares: np.ndarray, size: int,
            minimum: int = 2) -> np.ndarray:
    """The covariate of every query from ``size`` past sessions (NaN below ``minimum``)."""
    x, q = sessions(rng, means, shares, (size,))
    return query_covariate(np.bincount(q, minlength=means.size), np.bincount(q, weights=x, minlength=means.size),
                           minimum)


def brute_force(x: np.ndarray, c: np.ndarray, stratum: np.ndarray, arm: np.ndarray, beta: float | None
                ) -> tuple[float, float, dict[bool, float | None]]:
    """θ̂ and its variance session by session: each arm's β (its within-stratum slope, pooled over the
    strata; or the given one for both), the pooled stratum centre of c, each session's u = x − β_a (c − μ_h)
    (u = x without c), per-stratum means of u reweighted to the candidate's strata, and the
    post-stratified variance of u."""
    common = [h for h in np.unique(stratum) if (arm[stratum == h]).any() and (~arm[stratum == h]).any()]
    has = np.isfinite(c)
    betas = {False: beta, True: beta}
    if beta is None:
        for a in (False, True):  # each arm's own slope (Lin 2013's interacted estimator)
            sxc = scc = 0.0
            for h in common:
                m = (stratum == h) & (arm == a) & has
                if m.sum() > 0:
                    dx, dc = x[m] - x[m].mean(), c[m] - c[m].mean()
                    sxc += float(dx @ dc)
                    scc += float(dc @ dc)
            betas[a] = sxc / scc
    u = x.copy()
    for h in common:
        m = (stratum == h) & has
        if m.any():
            centre = c[m].mean()  # both arms' sessions with a covariate
            for a in (False, True):
                ma = m & (arm == a)
                u[ma] = x[ma] - betas[a] * (c[ma] - centre)
    nc = sum(int(((stratum == h) & arm).sum()) for h in common)
    means, variances = {}, {}
    for a in (False, True):
        mean = var = 0.0
        for h in common:
            m = (stratum == h) & (arm == a)
            w = ((stratum == h) & arm).sum() / nc
            mean += w * u[m].mean()
            var += w * w * u[m].var(ddof=1) / m.sum()
        means[a], variances[a] = mean, var / (mean * mean)
    return math.log(means[True]) - math.log(means[False]), variances[False] + variances[True], betas


def arm_sums(x: np.ndarray, c: np.ndarray, stratum: np.ndarray, arm: np.ndarray, strata: int
             ) -> tuple[CovariateSums, CovariateSums]:
    return (CovariateSums.of_sessions(x[~arm], c[~arm], stratum[~arm], strata),
            CovariateSums.of_sessions(x[arm], c[arm], stratum[arm], strata))


@pytest.mark.parametrize("beta", [None, 0.7])
def test_the_estimator_and_its_variance_against_a_session_by_session_computation(beta: float | None) -> None:
    rng = np.random.default_rng(3)
    means, shares = queries_world(rng)
    covariate = history(rng, means, shares, 900)
    size, strata = 3000, 6
    x, q = sessions(rng, means, shares, (size,))
    arm = rng.random(size) < np.linspace(0.2, 0.7, size)  # the candidate's share grows: unequal strata mixes
    stratum = np.minimum(np.arange(size) * strata // size, strata - 1)
    stratum[(stratum == 5) & arm] = 4  # stratum 5: baseline only (left out of both arms)
    x = np.where(arm, 0.9 * x, x)
    c = covariate[q]
    assert np.isnan(c).any() and np.isfinite(c).any()
    expected, variance, slope = brute_force(x, c, stratum, arm, beta)
    base, cand = arm_sums(x, c, stratum, arm, strata)
    if beta is None:
        found = arm_slopes(base, cand)
        assert float(found[0]) == pytest.approx(slope[False], rel=1e-9)
        assert float(found[1]) == pytest.approx(slope[True], rel=1e-9)
    effect = adjusted_mean_path(base, cand, beta)
    assert float(effect.theta) == pytest.approx(expected, rel=1e-9)
    assert float(effect.variance) == pytest.approx(variance, rel=1e-9)
    assert float(effect.n_candidate) == arm[stratum < 5].sum()


def test_slope_zero_is_the_unadjusted_time_matched_comparison() -> None:
    rng = np.random.default_rng(4)
    means, shares = queries_world(rng)
    covariate = history(rng, means, shares, 600)
    looks, per_look, strata = 40, 60, 8
    x, q = sessions(rng, means, shares, (looks, per_look))
    arm = rng.random((looks, per_look)) < 0.5
    c = covariate[q]
    stratum = np.repeat(np.arange(looks) * strata // looks, per_look).reshape(looks, per_look)
    cumulative = []
    for which in (False, True):
        per_look_sums = [CovariateSums.of_sessions(x[i][arm[i] == which], c[i][arm[i] == which],
                                                   stratum[i][arm[i] == which], strata).stack()
                         for i in range(looks)]
        cumulative.append(CovariateSums.of(*np.moveaxis(np.cumsum(per_look_sums, axis=0), -1, 0)))
    base, cand = cumulative
    plain = adjusted_mean_path(base, cand, slope=0.0)
    total = [(s.n + s.n0, s.x + s.x0, s.xx + s.xx0) for s in (base, cand)]
    matched = matched_mean_path(*total[0], *total[1])
    np.testing.assert_allclose(plain.theta, matched.theta, rtol=1e-12, equal_nan=True)
    np.testing.assert_allclose(plain.variance, matched.variance, rtol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(plain.n_candidate, matched.n_candidate)
    # one stratum: the plain comparison of estimates.py
    one = [CovariateSums.of(*(getattr(s, f).sum(axis=-1, keepdims=True) for f in FIELDS)) for s in (base, cand)]
    single = adjusted_mean_paths(one[0], one[1], slope=np.zeros(looks))
    for got, arm_sum in zip(single, one, strict=True):
        want = log_mean_path(arm_sum.n[:, 0] + arm_sum.n0[:, 0], arm_sum.x[:, 0] + arm_sum.x0[:, 0],
                             arm_sum.xx[:, 0] + arm_sum.xx0[:, 0])
        np.testing.assert_allclose(got.value, want.value, rtol=1e-12, equal_nan=True)
        np.testing.assert_allclose(got.variance, want.variance, rtol=1e-12, equal_nan=True)
    # and a covariate that does not vary explains nothing: β̂ = 0
    flat = CovariateSums.of_sessions(x[0], np.full(per_look, 2.0), np.zeros(per_look, dtype=np.int64), 1)
    assert float(pooled_slope(flat, flat)) == 0.0
    base_m, cand_m = matched_mean_paths(*total[0], *total[1])
    assert np.isfinite(base_m.value[-1]) and np.isfinite(cand_m.value[-1])


@pytest.mark.slow
def test_the_variance_matches_the_spread_of_simulated_estimates_and_the_estimate_is_unbiased() -> None:
    """Var(θ̂) from one sample's sums vs the variance of θ̂ over 3,000 simulated canaries (a true drop of 5%,
    two time strata with different query mixes, 15% of sessions without a covariate); and the mean of θ̂
    is the true log ratio."""
    rng = np.random.default_rng(5)
    means, shares = queries_world(rng)
    covariate = history(rng, means, shares, 3000)
    night = shares * np.exp(-0.3 * (means - means.mean()) / means.std())
    night /= night.sum()
    replicates, per_stratum = 3000, 400
    estimates, variances, plain = [], [], []
    for _ in range(replicates):
        xs, qs, hs = [], [], []
        for h, mix in enumerate((shares, night)):
            x, q = sessions(rng, means, mix, (per_stratum,))
            xs.append(x), qs.append(q), hs.append(np.full(per_stratum, h))
        x, q, stratum = np.concatenate(xs), np.concatenate(qs), np.concatenate(hs)
        arm = rng.random(x.size) < 0.5
        x = np.where(arm, 0.95 * x, x)
        base, cand = arm_sums(x, covariate[q], stratum, arm, 2)
        effect = adjusted_mean_path(base, cand)
        estimates.append(float(effect.theta))
        variances.append(float(effect.variance))
        plain.append(float(adjusted_mean_path(base, cand, slope=0.0).variance))
    spread = np.var(estimates, ddof=1)
    assert np.mean(variances) == pytest.approx(spread, rel=0.08)
    assert np.mean(variances) < 0.6 * np.mean(plain)  # the query explains much of the variance
    assert np.mean(estimates) == pytest.approx(math.log(0.95), abs=3 * math.sqrt(spread / replicates) + 1e-3)


@pytest.mark.slow
def test_aa_streams_under_continuous_monitoring_keep_false_regressions_below_alpha() -> None:
    """1,000 identical canaries, looked at after every batch of 50 sessions up to 6,000, adjusted, time
    matched (4 strata) and sticky: the sequence misses the truth (0) in at most α of them."""
    rng = np.random.default_rng(6)
    means, shares = queries_world(rng, 400)
    covariate = history(rng, means, shares, 2000)
    streams, looks, per_look, strata = 1000, 120, 50, 4
    x, q = sessions(rng, means, shares, (streams, looks, per_look))
    c = covariate[q]
    has = np.isfinite(c)
    c0 = np.where(has, c, 0.0)
    arm = rng.random(x.shape) < 0.5
    stratum = np.arange(looks) * strata // looks
    fields = {"n": has * 1.0, "x": x * has, "xx": x * x * has, "c": c0, "cc": c0 * c0, "xc": x * c0,
              "n0": ~has * 1.0, "x0": x * ~has, "xx0": x * x * ~has}
    arms = []
    for which in (False, True):
        mask = arm == which
        per_look = {name: (values * mask).sum(axis=2) for name, values in fields.items()}
        by_stratum = {}
        for name, values in per_look.items():
            out = np.zeros((streams, looks, strata))
            out[:, np.arange(looks), stratum] = values
            by_stratum[name] = np.cumsum(out, axis=1)
        arms.append(CovariateSums(**by_stratum))
    effect = adjusted_mean_path(*arms)
    path = effect_verdict_path(effect, CONFIG)
    missed = (path.eligible & ((path.lower > 0) | (path.upper < 0))).any(axis=1).mean()
    sticky = sticky_path(path, CONFIG)
    false_alarms = (sticky.code == REGRESSION).any(axis=1).mean()
    tolerance = 2.33 * math.sqrt(0.05 * 0.95 / streams)
    assert missed <= CONFIG.alpha + tolerance, missed
    assert false_alarms <= missed
    # the adjustment helps: the sequence is narrower than the unadjusted one at the end
    plain = effect_verdict_path(adjusted_mean_path(*arms, slope=np.zeros((streams, looks))), CONFIG)
    assert np.median((path.upper - path.lower)[:, -1]) < 0.8 * np.median((plain.upper - plain.lower)[:, -1])


def test_sums_merge_by_addition_and_inputs_are_validated() -> None:
    rng = np.random.default_rng(7)
    x, c = rng.gamma(1.0, 1.0, 100), np.where(rng.random(100) < 0.3, np.nan, rng.gamma(1.0, 1.0, 100))
    h = rng.integers(0, 3, 100)
    whole = CovariateSums.of_sessions(x, c, h, 3)
    parts = CovariateSums.of_sessions(x[:40], c[:40], h[:40], 3) + CovariateSums.of_sessions(x[40:], c[40:], h[40:], 3)
    np.testing.assert_allclose(whole.stack(), parts.stack(), rtol=1e-12)
    assert whole.n.sum() + whole.n0.sum() == 100 and whole.n.sum() == np.isfinite(c).sum()
    with pytest.raises(ValueError, match="expected 9 arrays"):
        CovariateSums.of(*([np.zeros(3)] * 8))
    with pytest.raises(ValueError, match="same shape"):
        CovariateSums.of(*([np.zeros(3)] * 8), np.zeros(2))
    with pytest.raises(ValueError, match="one length"):
        CovariateSums.of_sessions(x, c[:50], h, 3)
    with pytest.raises(ValueError, match=r"stratum must be in \[0, 2\)"):
        CovariateSums.of_sessions(x, c, h, 2)
    with pytest.raises(ValueError, match="min_sessions"):
        query_covariate([1.0], [1.0], 0)
    np.testing.assert_array_equal(query_covariate([0, 1, 3], [0.0, 2.0, 3.0], 2), [np.nan, np.nan, 1.0])
    empty = CovariateSums.of(*([np.zeros(2)] * 9))
    effect = adjusted_mean_path(empty, whole.__class__.of(*(v[:2] for v in whole.stack().T)))
    assert isinstance(effect, EffectPath) and math.isnan(float(effect.theta))
