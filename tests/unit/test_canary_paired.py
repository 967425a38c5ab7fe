"""The paired (shadow) comparison: its sums and estimate against brute force and Monte Carlo, merges, the
edge cases (a shadow at 0, both at 0, identical lists, n < 2), A/A under continuous monitoring and the
sessions a 5% drop takes, paired against the two-arm comparison on the same sessions."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig
from monitor.core.canary.judging import compare
from monitor.core.canary.paired import (
    DCG_FIELDS,
    FIELDS,
    PNR_FIELDS,
    Moments,
    footing_slack,
    log_ratio,
    paired_estimate,
    paired_stats,
)
from monitor.core.canary.paired_paths import judge_paired, paired_path, paired_verdict_path
from monitor.core.canary.sequential import half_widths
from monitor.core.canary.verdict_paths import PASS, REGRESSION
from monitor.core.stream.shadow import FOOTING_FIELDS
from monitor.core.stream.stats import Stats

CONFIG = CanaryConfig()
HEAD_BOUND = CONFIG.dcg_bound["head"]


def world(rng: np.random.Generator, shape: tuple[int, ...], drop: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Per session the served and shadow DCG of the same request: a query difficulty shared by both lists
    (gamma, mean 2.1: most of the variance), 12% of requests with nothing relevant for either list, and
    each list's own noise; the shadow's DCG ``drop`` lower. ρ(x, y) ≈ 0.8."""
    difficulty = rng.gamma(1.5, 1.4, shape)
    found = rng.random(shape) > 0.12
    x = found * np.clip(difficulty + rng.normal(0.0, 0.95, shape), 0.0, HEAD_BOUND)
    y = found * np.clip(difficulty + rng.normal(0.0, 0.95, shape), 0.0, HEAD_BOUND) * (1.0 - drop)
    return x, y


def dcg_sums(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-session paired DCG fields (..., sessions, 6), in the order of DCG_FIELDS."""
    return np.stack([np.ones_like(x), x, y, x * x, y * y, x * y], axis=-1)


def totals(sessions: list[dict[str, float]]) -> dict[str, float]:
    out = Stats()
    for s in sessions:
        out.add(s)
    return dict(out)


# -- sums ---------------------------------------------------------------------------------------------------
def test_a_sessions_sums_name_every_field_and_multiply_out() -> None:
    s = paired_stats(2.0, 3.0, (4.0, 1.0), (5.0, 2.0))
    assert tuple(s) == FIELDS and set(DCG_FIELDS) | set(PNR_FIELDS) == set(FIELDS)
    assert (s["pair_n"], s["pair_xx"], s["pair_yy"], s["pair_xy"]) == (1.0, 4.0, 9.0, 6.0)
    assert (s["pair_cx_dy"], s["pair_dx_cy"], s["pair_dy_dy"], s["pair_cx_dx"]) == (8.0, 5.0, 4.0, 4.0)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, True])
def test_a_sessions_sums_refuse_values_that_are_not_finite_and_nonnegative(bad: float) -> None:
    with pytest.raises(ValueError, match="expected a finite number"):
        paired_stats(1.0, bad, (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="shadow discordant"):
        paired_stats(1.0, 1.0, (1.0, 1.0), (1.0, bad))


def test_merged_sums_equal_the_sums_of_the_merged_sessions() -> None:
    rng = np.random.default_rng(3)
    values = [(float(a), float(b), (float(c), float(d)), (float(e), float(f)))
              for a, b, c, d, e, f in zip(*rng.gamma(2.0, 1.0, (2, 300)), *rng.poisson(9.0, (4, 300)), strict=True)]
    sessions = [paired_stats(*v) for v in values]
    whole = totals(sessions)
    parts = [totals(sessions[i::3]) for i in range(3)]  # three workers' partials, merged
    merged = totals(parts)
    assert merged.keys() == whole.keys()
    for name in FIELDS:
        assert merged[name] == pytest.approx(whole[name], rel=1e-12)
    for metric in ("dcg", "pnr"):
        a, b = paired_estimate(merged, metric), paired_estimate(whole, metric)
        assert a.n == b.n == 300
        assert a.value == pytest.approx(b.value, rel=1e-10) and a.variance == pytest.approx(b.variance, rel=1e-8)


# -- the estimate -------------------------------------------------------------------------------------------
def test_the_dcg_estimate_and_its_variance_equal_a_brute_force_computation() -> None:
    rng = np.random.default_rng(11)
    x, y = world(rng, (500,), drop=0.04)
    sessions = [paired_stats(a, b, (1.0, 1.0), (1.0, 1.0)) for a, b in zip(x, y, strict=True)]
    found = paired_estimate(totals(sessions), "dcg")
    mx, my = x.mean(), y.mean()
    s = np.cov(np.stack([x, y]), ddof=1)
    expected = (s[1, 1] / my**2 + s[0, 0] / mx**2 - 2.0 * s[0, 1] / (mx * my)) / x.size
    assert found.n == 500 and found.problem == ""
    assert found.value == pytest.approx(math.log(my / mx), rel=1e-12)
    assert found.variance == pytest.approx(expected, rel=1e-8)
    # the covariance matters: without it the variance is several times larger
    assert (s[1, 1] / my**2 + s[0, 0] / mx**2) / x.size > 3.0 * expected


def test_the_pnr_estimate_and_its_variance_equal_a_brute_force_computation() -> None:
    rng = np.random.default_rng(12)
    load = rng.gamma(2.0, 6.0, 400)  # a query's graded pairs: shared by the four counts
    cx, dx = rng.poisson(load * 0.75), rng.poisson(load * 0.25)
    cy, dy = rng.poisson(load * 0.72), rng.poisson(load * 0.28)
    sessions = [paired_stats(1.0, 1.0, (float(a), float(b)), (float(c), float(d)))
                for a, b, c, d in zip(cx, dx, cy, dy, strict=True)]
    found = paired_estimate(totals(sessions), "pnr")
    v = np.stack([cx, dx, cy, dy]).astype(float)
    mean = v.mean(axis=1)
    gradient = np.array([-1.0, 1.0, 1.0, -1.0]) / mean
    expected = gradient @ np.cov(v, ddof=1) @ gradient / v.shape[1]
    assert found.value == pytest.approx(math.log((mean[2] / mean[3]) / (mean[0] / mean[1])), rel=1e-12)
    assert found.variance == pytest.approx(expected, rel=1e-8)


def test_the_variance_of_the_log_ratio_against_monte_carlo() -> None:
    """Over 4,000 streams of 400 paired sessions, the spread of θ̂ against the mean delta-method variance:
    they agree within the Monte-Carlo error (the sample variance's relative standard error is
    √(2 / (R − 1)) ≈ 2.2%; 4 of them allowed, plus 2% for the delta method's own error at n = 400)."""
    rng = np.random.default_rng(2025)
    runs, n = 4000, 400
    x, y = world(rng, (runs, n), drop=0.05)
    theta, variance = log_ratio(Moments.of(dcg_sums(x, y).sum(axis=-2), "dcg"), (-1.0, 1.0))
    observed, predicted = float(np.var(theta, ddof=1)), float(np.mean(variance))
    assert abs(observed / predicted - 1.0) < 4.0 * math.sqrt(2.0 / (runs - 1)) + 0.02
    rho = np.corrcoef(x.ravel(), y.ravel())[0, 1]
    assert 0.75 < rho < 0.85  # the correlation the world claims


def test_the_pnr_variance_against_monte_carlo() -> None:
    rng = np.random.default_rng(7)
    runs, n = 3000, 300
    load = rng.gamma(2.0, 6.0, (runs, n))
    parts = [rng.poisson(load * share).astype(float) for share in (0.75, 0.25, 0.72, 0.28)]
    cols = [np.ones((runs, n)), *parts]
    cols += [parts[i] * parts[j] for i in range(4) for j in range(i, 4)]
    sums = np.stack(cols, axis=-1).sum(axis=-2)
    theta, variance = log_ratio(Moments.of(sums, "pnr"), (-1.0, 1.0, 1.0, -1.0))
    assert abs(float(np.var(theta, ddof=1)) / float(np.mean(variance)) - 1.0) < 4.0 * math.sqrt(
        2.0 / (runs - 1)) + 0.02


def test_one_session_has_no_variance_and_no_sessions_no_value() -> None:
    one = paired_stats(2.0, 1.0, (3.0, 1.0), (2.0, 1.0))
    found = paired_estimate(one, "dcg")
    assert found.n == 1 and found.value == pytest.approx(math.log(0.5)) and found.variance is None
    assert "fewer than 2" in found.problem
    assert paired_estimate({}, "pnr").value is None
    assert paired_estimate({"pair_n": 5.0, "pair_x": 4.0, "pair_y": 0.0}, "dcg").value is None
    with pytest.raises(ValueError, match="metric"):
        paired_estimate(one, "ndcg")


def test_sums_without_second_moments_have_no_variance() -> None:
    sums = {"pair_n": 10.0, "pair_x": 20.0, "pair_y": 18.0}
    found = paired_estimate(sums, "dcg")
    assert found.value == pytest.approx(math.log(0.9)) and found.variance is None


# -- the verdict --------------------------------------------------------------------------------------------
def test_a_looks_interval_is_the_two_arm_sequence_around_the_paired_estimate() -> None:
    rng = np.random.default_rng(5)
    x, y = world(rng, (600,), drop=0.03)
    sums = dcg_sums(x, y).sum(axis=0)
    found = paired_path(sums[None, :], "dcg", replace(CONFIG, sticky=False), HEAD_BOUND).path
    theta, variance = log_ratio(Moments.of(sums, "dcg"), (-1.0, 1.0))
    below = float(half_widths(float(variance), CONFIG.mixture, 0.05 * 0.99))  # a pass: α · 0.99
    above = float(half_widths(float(variance), CONFIG.mixture, 0.05 / 2 * 0.99))  # a regression: α / 2 · 0.99
    assert found.lower[0] == pytest.approx(math.expm1(float(theta) - below), rel=1e-9)
    assert found.upper[0] == pytest.approx(math.expm1(float(theta) + above), rel=1e-9)


def _epochs(x: np.ndarray, y: np.ndarray, per: int, pairs: tuple[np.ndarray, ...] | None = None
            ) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for i in range(x.size):
        counts = (1.0, 1.0, 1.0, 1.0) if pairs is None else tuple(float(p[i]) for p in pairs)
        into = out.setdefault(i // per, {})
        for name, value in paired_stats(float(x[i]), float(y[i]), counts[:2], counts[2:]).items():
            into[name] = into.get(name, 0.0) + value
    return out


@pytest.mark.filterwarnings("error")
def test_a_shadow_at_zero_is_a_regression_within_tens_of_sessions() -> None:
    rng = np.random.default_rng(8)
    x, _ = world(rng, (300,))
    zero = np.zeros(300)
    quick = replace(CONFIG, min_sessions=20)
    path = paired_verdict_path(_epochs(x, zero, 10), quick, "dcg", "head")
    first = next(i for i, v in enumerate(path) if v.verdict == "regression")
    assert (first + 1) * 10 < 100  # tens of sessions
    assert all(v.verdict == "regression" for v in path[first:])
    assert path[-1].estimate == -1.0 and path[-1].upper is not None and path[-1].upper < 0
    # with the defaults: at the first look with min_sessions
    assert judge_paired(_epochs(x[:200], zero[:200], 200), CONFIG, "dcg", "head").verdict == "regression"
    # PNR: a shadow whose lists have no pair of different grades at all
    c, d = rng.poisson(20.0, 300), rng.poisson(5.0, 300)
    found = judge_paired(_epochs(x, x, 50, (c, d, zero, zero)), CONFIG, "pnr", "head")
    assert found.verdict == "regression"


@pytest.mark.filterwarnings("error")
def test_both_lists_at_zero_are_inconclusive() -> None:
    zero = np.zeros(400)
    found = judge_paired(_epochs(zero, zero, 100), CONFIG, "dcg", "head")
    assert found.verdict == "inconclusive" and found.estimate is None
    assert "both lists' mean DCG at 0" in found.reason


@pytest.mark.filterwarnings("error")
def test_identical_lists_pass_once_enough_sessions_and_never_regress() -> None:
    rng = np.random.default_rng(9)
    x, _ = world(rng, (4000,))
    path = paired_verdict_path(_epochs(x, x, 200), CONFIG, "dcg", "head")
    assert all(v.verdict != "regression" for v in path)
    assert path[-1].verdict == "pass" and path[-1].estimate == 0.0 and "same as the served" in path[-1].reason
    first = next(i for i, v in enumerate(path) if v.verdict == "pass")
    assert all(v.verdict == "pass" for v in path[first:])
    assert path[0].verdict == "inconclusive"  # 200 identical sessions do not yet rule out a 2% drop
    # θ ∈ [log(1 − U/x̄_low), log(1 + U/x̄_low)]: the lower end's U and x̄_low at α/100 / 2 each (a pass),
    # the upper end's at α/2/100 / 2 each (a regression); sticky off, so the last look's own interval
    last = judge_paired(_epochs(x, x, 4000), replace(CONFIG, sticky=False), "dcg", "head")
    n, mean = x.size, x.mean()
    variance = x.var(ddof=1) / (n * mean**2)

    def share(a: float) -> float:  # U / x̄_low at level a
        low = math.log(mean) - float(half_widths(variance, CONFIG.mixture, a))
        return HEAD_BOUND * (1 - a ** (1 / n)) / math.exp(low)

    assert last.lower == pytest.approx(-share(0.05 / 100 / 2), rel=1e-9)
    assert last.upper == pytest.approx(share(0.05 / 2 / 100 / 2), rel=1e-9)
    # without a bound of a session's DCG there is nothing to bound them with: inconclusive, no division by 0
    unbounded = judge_paired(_epochs(x, x, 4000), replace(CONFIG, dcg_bound={}), "dcg")
    assert unbounded.verdict == "inconclusive" and "no bound" in unbounded.reason


def test_too_few_sessions_are_inconclusive() -> None:
    rng = np.random.default_rng(4)
    x, _ = world(rng, (150,))
    found = judge_paired(_epochs(x, x * 0.5, 150), CONFIG, "dcg", "head")
    assert found.verdict == "inconclusive" and found.reason.startswith("too few sessions")


def test_a_five_percent_pnr_drop_is_a_regression_and_an_equal_one_passes() -> None:
    rng = np.random.default_rng(6)
    n = 6000
    load = rng.gamma(2.0, 6.0, n)
    cx, dx = rng.poisson(load * 0.75), rng.poisson(load * 0.25)
    same = judge_paired(_epochs(np.ones(n), np.ones(n), 500, (cx, dx, cx, dx)), CONFIG, "pnr", "head")
    assert same.verdict != "regression"
    # the shadow moves some concordant pairs to discordant (shared noise, same query load)
    moved = rng.binomial(cx, 0.08)
    worse = judge_paired(_epochs(np.ones(n), np.ones(n), 500, (cx, dx, cx - moved, dx + moved)), CONFIG, "pnr",
                         "head")
    assert worse.verdict == "regression" and worse.estimate is not None and worse.estimate < -0.05


# -- continuous monitoring ----------------------------------------------------------------------------------
def _aa_false_regressions(runs: int, n: int, every: int, seed: int) -> tuple[int, int]:
    rng = np.random.default_rng(seed)
    x, y = world(rng, (runs, n))
    sums = np.cumsum(dcg_sums(x, y), axis=-2)[:, every - 1::every]
    path = paired_path(sums, "dcg", CONFIG, HEAD_BOUND).path
    regressed = int(np.count_nonzero((path.code == REGRESSION).any(axis=-1)))
    passed = np.logical_or.accumulate(path.code == PASS, axis=-1)
    lost = int(np.count_nonzero((passed & (path.code != PASS)).any(axis=-1)))  # a pass not kept
    return regressed, lost


def test_aa_false_regressions_fast() -> None:
    regressed, lost = _aa_false_regressions(60, 3000, 100, seed=31)
    assert regressed <= 3 and lost == 0  # α = 5% of 60 runs


@pytest.mark.slow
def test_aa_false_regressions_stay_below_alpha_under_continuous_monitoring() -> None:
    """400 A/A streams of 10,000 paired sessions, a look every 50: a false regression at any look in at
    most α = 5% of them (20); under the null the count is at most Binomial(400, 0.05), so a sequence that
    kept its level fails this with probability < 50%, one at 8% nearly always (P(≤ 20) < 1%)."""
    regressed, lost = _aa_false_regressions(400, 10_000, 50, seed=2025)
    assert regressed <= 20
    assert lost == 0  # a pass, once reached, is kept


def _first(codes: np.ndarray, code: int) -> float:
    hit = np.flatnonzero(codes == code)
    return float(hit[0]) if hit.size else math.inf


@pytest.mark.slow
def test_a_five_percent_drop_takes_far_fewer_sessions_paired_than_in_two_arms() -> None:
    """The same sessions judged two ways: paired (every session's served and shadow DCG) and as a 50/50
    two-arm canary (even sessions in the control arm, served; odd ones in the canary arm, shadow) with
    :func:`.judging.compare`. Sessions counted are requests: the paired test scores two lists per request.
    Measured: the median sessions to a regression, two-arm over paired, is ≈ 10 (docs/canary.md)."""
    rng = np.random.default_rng(77)
    runs, n = 12, 40_000
    x, y = world(rng, (runs, n), drop=0.05)
    sums = np.cumsum(dcg_sums(x, y), axis=-2)
    every = 50
    path = paired_path(sums[:, every - 1::every], "dcg", CONFIG, HEAD_BOUND).path
    paired = [(_first(path.code[r], REGRESSION) + 1) * every for r in range(runs)]
    two_arm = []
    step = 500
    for r in range(runs):
        found = math.inf
        for end in range(step, n + 1, step):
            control = {"sessions": end / 2, "dcg": float(x[r, 0:end:2].sum()),
                       "dcg_sq": float((x[r, 0:end:2] ** 2).sum())}
            canary = {"sessions": end / 2, "dcg": float(y[r, 1:end:2].sum()),
                      "dcg_sq": float((y[r, 1:end:2] ** 2).sum())}
            if compare(control, canary, "dcg", CONFIG, "head").verdict == "regression":
                found = float(end)
                break
        two_arm.append(found)
    assert all(math.isfinite(p) for p in paired)
    ratio = float(np.median(two_arm)) / float(np.median(paired))
    assert ratio > 4.0, (np.median(paired), np.median(two_arm))


# -- one α for the pair -------------------------------------------------------------------------------------
def _pair_regressions(config: CanaryConfig, runs: int, n: int, every: int, seed: int
                      ) -> tuple[np.ndarray, np.ndarray]:
    """A/A: per run, whether the paired DCG and the paired PNR (guarded) verdicts regressed at any look.
    The world's DCG as above; each list's concordant and discordant pairs drawn from the query's load of
    graded pairs (shared by both lists), the shadow's the same in distribution."""
    rng = np.random.default_rng(seed)
    x, y = world(rng, (runs, n))
    load = rng.gamma(2.0, 6.0, (runs, n))
    parts = [rng.poisson(load * share).astype(float) for share in (0.75, 0.25, 0.75, 0.25)]
    products = [parts[i] * parts[j] for i in range(4) for j in range(i, 4)]
    pnr = np.cumsum(np.stack([np.ones_like(x), *parts, *products], axis=-1), axis=-2)[:, every - 1::every]
    dcg = np.cumsum(dcg_sums(x, y), axis=-2)[:, every - 1::every]
    return ((paired_path(dcg, "dcg", config, HEAD_BOUND).path.code == REGRESSION).any(axis=-1),
            (paired_path(pnr, "pnr", config, 190.0).path.code == REGRESSION).any(axis=-1))


@pytest.mark.slow
def test_aa_false_regressions_of_the_pair_stay_below_alpha_with_each_metric_at_half() -> None:
    """The overall verdict calls the pair a regression if DCG or PNR regressed, so its false regressions
    are the union of the metrics': bounded by the sum of their levels. 600 A/A streams of 1,000 paired
    sessions, a look every 5 from 10 sessions on, α = 0.3 and a minimum drop of 0.1% (so that the rates
    are large enough to measure). Each metric regresses at α / 2: the pair stays below α, each metric
    below α / 2 (measured: pair 5.5%, DCG 3.5%, PNR 2.2%). As before (each metric's regression at α: a
    config of 2α, whose regression level is α), the pair raised 2.3× as many (12.8%; DCG 9.0%, PNR 4.5%). The two metrics' false alarms hardly overlap, so the pair's
    rate is close to the sum of theirs, not the larger of them: only the sum of the levels bounds it."""
    alpha, runs = 0.3, 600
    config = CanaryConfig(alpha=alpha, min_relative_drop=0.001, min_sessions=10)
    tolerance = 2.33 * math.sqrt(alpha * (1 - alpha) / runs)
    dcg, pnr = _pair_regressions(config, runs, 1000, 5, seed=41)
    pair = float((dcg | pnr).mean())
    assert pair <= alpha + tolerance, pair
    assert max(dcg.mean(), pnr.mean()) <= alpha / 2 + tolerance, (dcg.mean(), pnr.mean())
    dcg_before, pnr_before = _pair_regressions(replace(config, alpha=2 * alpha), runs, 1000, 5, seed=41)
    before = float((dcg_before | pnr_before).mean())
    assert before > 1.8 * pair, (before, pair)  # the split is what keeps the pair at α (measured: 2.3×)
    for d, p in ((dcg, pnr), (dcg_before, pnr_before)):  # the union: near the sum, not the max
        assert float((d | p).mean()) >= 0.9 * float(d.mean() + p.mean())
        assert float((d | p).mean()) > 1.3 * float(max(d.mean(), p.mean()))


# -- grades in flight: the footing slack (issue 42) -----------------------------------------------------------
def _slack_by_hand(sx: float, sy: float, wx: float, gx: float, wy: float, gy: float) -> float:
    """The slack of the docstring's formula, written out: each ungraded rank valued at the mean gain per
    unit of discount of the graded ranks of both lists."""
    if sx <= 0 or sy <= 0 or gx + gy <= 0:
        return 0.0
    g = (sx + sy) / (gx + gy)
    return math.log((sy + g * wy) / (sx + g * wx)) - math.log(sy / sx)


@pytest.mark.parametrize("sums", [
    (100.0, 90.0, 0.0, 50.0, 5.0, 45.0),  # the shadow lacks grades: > 0, its DCG may rise
    (100.0, 90.0, 5.0, 45.0, 0.0, 50.0),  # the served lists lack them: < 0
    (100.0, 90.0, 3.0, 47.0, 3.0, 47.0),  # both alike: a small shift toward no change only
    (100.0, 90.0, 0.0, 50.0, 0.0, 50.0),  # every rank graded: 0
    (0.0, 90.0, 0.0, 50.0, 5.0, 45.0),  # a sum at 0: nothing to say
    (100.0, 90.0, 4.0, 0.0, 4.0, 0.0),  # nothing graded: 0
])
def test_the_footing_slack_is_its_formula_with_its_signs(sums: tuple[float, ...]) -> None:
    sx, sy, *footing = sums
    got = float(footing_slack(sx, sy, footing))
    assert got == pytest.approx(_slack_by_hand(*sums), abs=1e-12)
    wx, wy, valid = footing[0], footing[2], sx > 0 and sy > 0 and footing[1] + footing[3] > 0
    assert (got > 0) == (valid and wy / sy > wx / sx)  # the shadow lacks more for its DCG: it may rise
    assert (got < 0) == (valid and wy / sy < wx / sx)
    if sums[2:] == (3.0, 47.0, 3.0, 47.0):
        assert 0 < got < 0.01


def test_the_footing_slack_broadcasts_over_looks() -> None:
    sx, sy = np.array([10.0, 20.0, 30.0]), np.array([9.0, 19.0, 29.0])
    footing = np.array([[0.0, 5.0, 1.0, 4.0], [0.0, 10.0, 1.0, 9.0], [0.0, 15.0, 0.0, 15.0]])
    got = footing_slack(sx, sy, footing)
    assert got.shape == (3,)
    assert list(got) == pytest.approx([_slack_by_hand(a, b, *f) for a, b, f in zip(sx, sy, footing, strict=True)])


def _footing(n: int, lacking_x: float, lacking_y: float) -> np.ndarray:
    """Cumulative footing sums of ``n`` sessions of 10 ranks whose first ranks' discount mass ``lacking``
    of each list is without a grade."""
    full = sum(1.0 / math.log2(i + 2.0) for i in range(10))
    per = np.array([lacking_x, full - lacking_x, lacking_y, full - lacking_y])
    return per * float(n)


def test_a_regression_is_not_called_on_shadow_documents_still_without_grades() -> None:
    """A shadow 8% below the served lists because a share of its ranks have no grade yet: without the
    footing the verdict is a regression; with it (the shadow lacks what would make up the gap) not, and the
    reason says why. The served lists lacking them instead: the regression stands."""
    rng = np.random.default_rng(42)
    x, y = world(rng, (4000,), drop=0.08)
    sums = dcg_sums(x, y).sum(axis=0)[None, :]
    plain = paired_path(sums, "dcg", CONFIG, HEAD_BOUND)
    assert plain.path.code[-1] == REGRESSION
    late = paired_path(sums, "dcg", CONFIG, HEAD_BOUND, _footing(4000, 0.0, 0.45)[None, :])
    assert late.slack is not None and float(late.slack[-1]) > 0.08
    assert late.path.code[-1] != REGRESSION
    assert late.path.upper[-1] > 0 and late.path.lower[-1] == pytest.approx(plain.path.lower[-1], rel=1e-12)
    served_late = paired_path(sums, "dcg", CONFIG, HEAD_BOUND, _footing(4000, 0.45, 0.0)[None, :])
    assert served_late.path.code[-1] == REGRESSION
    assert served_late.path.upper[-1] == pytest.approx(plain.path.upper[-1], rel=1e-12)
    assert served_late.path.lower[-1] < plain.path.lower[-1]
    epochs = {0: {**dict(zip(DCG_FIELDS, dcg_sums(x, y).sum(axis=0), strict=True)),
                  **dict(zip(FOOTING_FIELDS, _footing(4000, 0.0, 0.45), strict=True))}}
    found = judge_paired(epochs, CONFIG, "dcg", "head")
    assert found.verdict != "regression" and "grades in flight" in found.reason


def test_a_pass_is_unaffected_when_the_candidate_lacks_grades_and_withheld_when_the_served_lists_do() -> None:
    rng = np.random.default_rng(43)
    x, y = world(rng, (6000,))
    sums = dcg_sums(x, y).sum(axis=0)[None, :]
    assert paired_path(sums, "dcg", CONFIG, HEAD_BOUND).path.code[-1] == PASS
    assert paired_path(sums, "dcg", CONFIG, HEAD_BOUND, _footing(6000, 0.0, 0.45)[None, :]).path.code[-1] == PASS
    withheld = paired_path(sums, "dcg", CONFIG, HEAD_BOUND, _footing(6000, 0.45, 0.0)[None, :])
    assert withheld.path.code[-1] != PASS
    # PNR counts pairs of graded documents only: no slack
    pnr = paired_path(np.ones((1, len(PNR_FIELDS))), "pnr", CONFIG, None, _footing(1, 0.45, 0.0)[None, :])
    assert pnr.slack is not None and not np.any(pnr.slack)
