"""The paired tests of ``monitor evaluate`` comparing runs (``monitor/core/paired.py``) and the t distribution
under them (``monitor/core/student_t.py``), against scipy and brute force."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.core import student_t
from monitor.core.paired import (
    adjust,
    paired_ratio_t,
    paired_t,
    randomization_p,
    ratio_randomization_p,
)

# ---- the t distribution -----------------------------------------------------------------------------

DEGREES = [1, 2, 3, 4, 5, 7, 10, 19, 30, 99, 500, 5_000, 49_999, 0.5, 2.5]
T_VALUES = [0.0, 1e-8, 0.1, 0.5, 1.0, 1.96, 2.0, 2.5, 3.0, 5.0, 10.0, 30.0, 100.0]


@pytest.mark.parametrize("df", DEGREES)
def test_two_sided_p_and_cdf_agree_with_scipy(df: float) -> None:
    for t in T_VALUES:
        if df == 1 and t == 1e-8:
            continue  # scipy 1.17's t.sf is 3e-9 off there; the closed form below is the reference
        expected = 2 * scipy.stats.t.sf(t, df)
        got = student_t.two_sided_p(t, df)
        assert got == pytest.approx(expected, rel=1e-10, abs=1e-12), (t, df)
        assert student_t.two_sided_p(-t, df) == got
        assert student_t.cdf(t, df) == pytest.approx(scipy.stats.t.cdf(t, df), abs=1e-12)
        assert student_t.cdf(-t, df) == pytest.approx(scipy.stats.t.cdf(-t, df), abs=1e-12)


@pytest.mark.parametrize("df", DEGREES)
def test_quantile_agrees_with_scipy(df: float) -> None:
    for q in (0.5, 0.6, 0.9, 0.95, 0.975, 0.995, 0.999999, 0.025, 1e-6):
        assert student_t.quantile(q, df) == pytest.approx(scipy.stats.t.ppf(q, df), rel=1e-11, abs=1e-12), q


def test_one_and_two_degrees_of_freedom_have_closed_forms() -> None:
    """ν = 1 is Cauchy's distribution, F(t) = ½ + atan(t)/π; ν = 2 has F(t) = ½ + t / (2√(2 + t²))."""
    for t in [*T_VALUES, 1e-12, 1e6]:
        assert student_t.cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, rel=1e-13)
        assert student_t.two_sided_p(t, 1) == pytest.approx(1 - 2 * math.atan(t) / math.pi, rel=1e-12)
        assert student_t.cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), rel=1e-13)
    for q in (0.6, 0.975, 0.999999, 1e-6):  # tan(π(q − ½)) = ∓cot(π · tail), the tail exact in floats
        expected = -1 / math.tan(math.pi * q) if q < 0.5 else 1 / math.tan(math.pi * (1 - q))
        assert student_t.quantile(q, 1) == pytest.approx(expected, rel=1e-13)


def test_a_million_degrees_of_freedom_keep_their_digits() -> None:
    """Without log_beta's Stirling form, lgamma's cancellation costs nine digits at ν = 10⁶."""
    assert student_t.two_sided_p(2.0, 1e6) == pytest.approx(2 * scipy.stats.t.sf(2.0, 1e6), rel=1e-9)
    assert student_t.quantile(0.975, 1e6) == pytest.approx(scipy.stats.t.ppf(0.975, 1e6), rel=1e-11)


@pytest.mark.parametrize(("a", "b"), [(0.5, 0.5), (2.0, 3.0), (0.5, 40.0), (250.0, 0.5), (30.0, 12.0), (1e4, 7.5)])
def test_regularized_beta_agrees_with_scipy(a: float, b: float) -> None:
    for x in (0.0, 1e-9, 0.01, 0.3, 0.5, 0.77, 0.999, 1.0):
        assert student_t.regularized_beta(a, b, x) == pytest.approx(scipy.special.betainc(a, b, x),
                                                                    rel=1e-10, abs=1e-14), x
    assert student_t.log_beta(a, b) == pytest.approx(scipy.special.betaln(a, b), rel=1e-13)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: student_t.two_sided_p(1.0, 0), "degrees of freedom"),
    (lambda: student_t.quantile(1.0, 5), "q must be in"),
    (lambda: student_t.regularized_beta(0.0, 1.0, 0.5), "must be positive"),
    (lambda: student_t.regularized_beta(1.0, 1.0, 1.5), "x must be in"),
    (lambda: student_t.two_sided_p(math.nan, 3), "NaN"),
])
def test_bad_arguments_are_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()  # type: ignore[operator]


# ---- the paired t-test --------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [2, 3, 5, 10, 50, 1000])
@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.01])
def test_paired_t_agrees_with_scipy_ttest_rel(n: int, alpha: float) -> None:
    rng = np.random.default_rng(n)
    baseline = rng.random(n)
    candidate = baseline + rng.normal(0.03, 0.1, n)
    expected = scipy.stats.ttest_rel(candidate, baseline)
    interval = expected.confidence_interval(1 - alpha)
    test = paired_t(candidate - baseline, alpha)
    assert test.n == n and test.note is None and test.mean == pytest.approx(np.mean(candidate - baseline))
    assert test.t == pytest.approx(expected.statistic, rel=1e-12)
    assert test.p == pytest.approx(expected.pvalue, abs=1e-9, rel=1e-9)
    assert test.interval is not None
    assert test.interval[0] == pytest.approx(interval.low, abs=1e-9)
    assert test.interval[1] == pytest.approx(interval.high, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=40).filter(lambda d: len(set(d)) > 1))
def test_paired_t_agrees_with_scipy_on_any_differences(differences: list[float]) -> None:
    d = np.array(differences)
    if np.std(d) < 1e-6 * max(1e-300, float(np.abs(d).max())):
        return  # all but equal: scipy's own arithmetic is then the weaker reference
    expected = scipy.stats.ttest_1samp(d, 0.0)
    test = paired_t(d)
    assert test.p == pytest.approx(expected.pvalue, abs=1e-9)
    assert test.interval is not None
    low, high = expected.confidence_interval(0.95)
    assert test.interval == pytest.approx((low, high), abs=1e-9)


def test_identical_runs_differ_by_nothing() -> None:
    test = paired_t(np.zeros(12))
    assert (test.mean, test.t, test.p, test.interval, test.note) == (0.0, 0.0, 1.0, (0.0, 0.0), None)
    assert randomization_p(np.zeros(12)) == 1.0  # every flip is as extreme: exact, 4096 flips
    assert randomization_p(np.zeros(30), iterations=500) == 1.0  # (500 + 1) / (500 + 1)


def test_one_query_has_no_variance() -> None:
    test = paired_t([0.25])
    assert test.mean == 0.25 and test.n == 1
    assert test.t is None and test.p is None and test.interval is None
    assert test.note == "one query: no variance, no t-test"
    assert randomization_p([0.25]) == 1.0  # both flips are as far from 0


def test_equal_differences_have_zero_variance_and_say_so() -> None:
    test = paired_t([0.1] * 8)
    assert test.mean == pytest.approx(0.1) and test.t is None and test.p is None and test.interval is None
    assert test.note is not None and "zero variance" in test.note and "+0.1" in test.note
    assert randomization_p([0.1] * 8) == 2 / 256  # only all-plus and all-minus are as extreme


def test_no_query_is_no_comparison() -> None:
    test = paired_t([])
    assert (test.n, test.mean, test.p, test.note) == (0, None, None, "no query to compare")
    assert randomization_p([]) is None


@pytest.mark.parametrize(("values", "message"), [
    ([[0.1, 0.2]], "one-dimensional"), ([0.1, math.nan], "finite"), ([math.inf], "finite")])
def test_bad_differences_are_refused(values: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        paired_t(values)  # type: ignore[arg-type]


def test_alpha_must_be_a_probability() -> None:
    with pytest.raises(ValueError, match="alpha"):
        paired_t([0.1, 0.2], alpha=1.0)


# ---- the randomization test ---------------------------------------------------------------------------


def brute_force_p(d: np.ndarray) -> float:
    """Every one of the 2ⁿ sign flips, counted by itertools."""
    observed = abs(d.sum())
    flips = [abs(sum(s * x for s, x in zip(signs, d, strict=True)))
             for signs in itertools.product((1, -1), repeat=d.size)]
    return sum(f >= observed - 1e-12 for f in flips) / len(flips)


@pytest.mark.parametrize("seed", range(5))
def test_small_samples_are_enumerated_exactly(seed: int) -> None:
    d = np.random.default_rng(seed).normal(0.05, 0.2, 10)
    assert randomization_p(d) == brute_force_p(d)  # 1,024 ≤ 10,000 iterations: every flip, exact
    assert randomization_p(d, seed=seed + 100) == randomization_p(d)  # no randomness in it


def test_ties_in_the_statistic_count_as_extreme() -> None:
    d = np.array([0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.1, 0.4])  # many flips give exactly the observed |Σ|
    assert randomization_p(d) == brute_force_p(d)


def test_monte_carlo_agrees_with_the_exact_enumeration() -> None:
    """n = 16: 65,536 flips, more than 10,000 iterations, so the default draws; within 4.5 standard errors."""
    d = np.random.default_rng(7).normal(0.03, 0.2, 16)
    signs = 1 - 2 * ((np.arange(1 << 16)[:, None] >> np.arange(16)) & 1)
    exact = float(np.mean(np.abs(signs @ d) >= abs(d.sum()) - 1e-12))
    assert randomization_p(d, iterations=1 << 16) == pytest.approx(exact, abs=1e-15)
    drawn = randomization_p(d, iterations=10_000, seed=3)
    assert drawn is not None
    assert abs(drawn - exact) < 4.5 * math.sqrt(exact * (1 - exact) / 10_000)


@pytest.mark.parametrize("seed", [0, 1])
def test_monte_carlo_agrees_with_scipy_permutation_test(seed: int) -> None:
    rng = np.random.default_rng(seed)
    baseline = rng.random(60)
    candidate = baseline + rng.normal(0.01, 0.15, 60)
    reference = scipy.stats.permutation_test(
        (candidate, baseline), lambda x, y: np.mean(x - y), permutation_type="samples",
        n_resamples=100_000, random_state=seed).pvalue
    drawn = randomization_p(candidate - baseline, iterations=10_000, seed=seed)
    assert drawn is not None
    assert abs(drawn - reference) < 4.5 * math.sqrt(reference * (1 - reference) * (1 / 10_000 + 1 / 100_000))


def test_monte_carlo_is_deterministic_given_the_seed_and_never_zero() -> None:
    d = np.random.default_rng(1).normal(0.5, 0.1, 200)  # far from 0: no flip is as extreme
    assert randomization_p(d, seed=4) == randomization_p(d, seed=4) == 1 / 10_001
    wide = np.random.default_rng(2).normal(0.0, 1.0, 200)
    assert randomization_p(wide, seed=1) != randomization_p(wide, seed=2)
    with pytest.raises(ValueError, match="iterations"):
        randomization_p(wide, iterations=0)


# ---- ratio measures (PNR) -------------------------------------------------------------------------------


def test_with_equal_denominators_the_ratio_test_is_the_paired_t_test_of_per_query_ratios() -> None:
    rng = np.random.default_rng(3)
    q = np.full(15, 4.0)
    pa, pb = rng.integers(0, 12, 15).astype(float), rng.integers(0, 12, 15).astype(float)
    ratio, plain = paired_ratio_t((pa, q), (pb, q)), paired_t(pb / 4 - pa / 4)
    assert ratio.mean == pytest.approx(pb.sum() / q.sum() - pa.sum() / q.sum())
    assert ratio.p == pytest.approx(plain.p, abs=1e-12)
    assert ratio.interval == pytest.approx(plain.interval, abs=1e-12)


def test_the_ratio_t_test_is_the_delta_method() -> None:
    """t = (R_c − R_b) / √(gᵀ Σ g / n), Σ the sample covariance of the per-query (p_b, q_b, p_c, q_c) and
    g the gradient of p̄_c / q̄_c − p̄_b / q̄_b (Deng et al., KDD 2018)."""
    rng = np.random.default_rng(11)
    n = 40
    pb, qb = rng.integers(1, 40, n).astype(float), rng.integers(1, 15, n).astype(float)
    pc, qc = pb + rng.integers(-3, 8, n), np.maximum(qb + rng.integers(-4, 3, n), 0.0)
    rb, rc = pb.sum() / qb.sum(), pc.sum() / qc.sum()
    gradient = np.array([-1 / qb.mean(), rb / qb.mean(), 1 / qc.mean(), -rc / qc.mean()])
    variance = gradient @ np.cov(np.vstack([pb, qb, pc, qc])) @ gradient / n
    test = paired_ratio_t((pb, qb), (pc, qc))
    assert test.mean == pytest.approx(rc - rb, rel=1e-12)
    assert test.t == pytest.approx((rc - rb) / math.sqrt(variance), rel=1e-9)
    assert test.p == pytest.approx(2 * scipy.stats.t.sf(abs(test.t), n - 1), abs=1e-12)


def brute_force_ratio_p(pb: np.ndarray, qb: np.ndarray, pc: np.ndarray, qc: np.ndarray) -> float:
    """Every one of the 2ⁿ ways to swap queries' (p, q) between the runs; a swap whose ratio is not
    finite (no discordant pair left in a run) counts as extreme."""
    observed = abs(pc.sum() / qc.sum() - pb.sum() / qb.sum())
    extreme = 0
    for swap in itertools.product((False, True), repeat=pb.size):
        w = np.array(swap)
        b_p, b_q = np.where(w, pc, pb).sum(), np.where(w, qc, qb).sum()
        c_p, c_q = np.where(w, pb, pc).sum(), np.where(w, qb, qc).sum()
        if b_q == 0 or c_q == 0:
            extreme += 1
        else:
            extreme += abs(c_p / c_q - b_p / b_q) >= observed - 1e-12
    return extreme / 2 ** pb.size


@pytest.mark.parametrize("seed", range(4))
def test_ratio_randomization_swaps_whole_queries(seed: int) -> None:
    """Exact for n = 8: every one of the 256 swaps."""
    rng = np.random.default_rng(seed)
    pb, qb = rng.integers(1, 20, 8).astype(float), rng.integers(1, 9, 8).astype(float)
    pc, qc = rng.integers(3, 25, 8).astype(float), rng.integers(1, 9, 8).astype(float)
    assert ratio_randomization_p((pb, qb), (pc, qc)) == brute_force_ratio_p(pb, qb, pc, qc)


def test_identical_ratio_runs_differ_by_nothing() -> None:
    p, q = np.array([3.0, 5.0, 1.0, 4.0]), np.array([1.0, 2.0, 2.0, 0.0])
    test = paired_ratio_t((p, q), (p, q))
    assert (test.mean, test.p, test.interval) == (0.0, 1.0, (0.0, 0.0))
    assert ratio_randomization_p((p, q), (p, q)) == 1.0


def test_an_infinite_ratio_has_no_test() -> None:
    p, q, none = np.array([3.0, 5.0]), np.array([1.0, 2.0]), np.zeros(2)
    test = paired_ratio_t((p, q), (p, none))
    assert test.mean is None and test.p is None and test.note is not None and "+Inf" in test.note
    assert ratio_randomization_p((p, q), (p, none)) is None
    assert paired_ratio_t((none[:0], none[:0]), (none[:0], none[:0])).note == "no query to compare"
    with pytest.raises(ValueError, match="one value per query"):
        paired_ratio_t((p, q), (p[:1], q))


def test_a_swap_to_an_infinite_ratio_counts_as_extreme() -> None:
    # the discordant pairs sit in a few queries, so some swaps leave a run with none (+Inf)
    pb, qb = np.array([4.0, 2.0, 5.0, 1.0, 3.0, 2.0]), np.array([0.0, 2.0, 0.0, 0.0, 1.0, 0.0])
    pc, qc = np.array([4.0, 3.0, 6.0, 2.0, 3.0, 4.0]), np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    p = ratio_randomization_p((pb, qb), (pc, qc))
    assert p == brute_force_ratio_p(pb, qb, pc, qc)
    assert p is not None and 0 < p < 1


# ---- several comparisons ------------------------------------------------------------------------------


def holm_by_definition(p: list[float]) -> list[float]:
    """Holm (1979): reject in ascending order while p_(i) ≤ α / (m − i + 1); adjusted p_(i) is the
    smallest α that rejects it, max over j ≤ i of (m − j + 1) p_(j), capped at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [0.0] * m
    for rank, i in enumerate(order):
        adjusted[i] = min(1.0, max((m - j) * p[order[j]] for j in range(rank + 1)))
    return adjusted


def test_holm_and_bonferroni() -> None:
    p = [0.04, 0.001, 0.03, 0.2, 0.012]
    assert adjust(p, "holm") == pytest.approx(holm_by_definition(p))
    assert adjust(p, "holm") == pytest.approx([0.09, 0.005, 0.09, 0.2, 0.048])
    assert adjust(p, "bonferroni") == pytest.approx([0.2, 0.005, 0.15, 1.0, 0.06])
    assert adjust(p, "none") == p
    assert adjust([0.01, None, 0.04], "holm") == pytest.approx([0.02, None, 0.04])
    assert adjust([], "holm") == []
    with pytest.raises(ValueError, match="correction"):
        adjust(p, "sidak")  # type: ignore[arg-type]
