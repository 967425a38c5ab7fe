"""Verdicts at the extremes (issue 26): the exact bound of an arm at 0 against simulation, a candidate
broken in 99% of its sessions no slower with the adjustment than without, the sample-ratio and balance
checks' error rates and power, and the overall verdict."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig, Comparison, Verdict, overall
from monitor.core.canary.adjusted import CovariateSums, adjusted_mean_paths, pooled_slope
from monitor.core.canary.bounds import zero_mean_upper
from monitor.core.canary.checks import Check, Segment, concentration, log_ratio_bf, sample_ratio
from monitor.core.canary.covariates import covariate_sums
from monitor.core.canary.metric_paths import balance_path, dcg_paths, decide
from monitor.core.canary.verdict_paths import REGRESSION, EffectPath

CONFIG = CanaryConfig()


# -- the exact bound ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("zeros", [0.99, 0.995, 0.999])
def test_the_zero_bound_covers_the_mean_at_every_n_at_once(zeros: float) -> None:
    """Sessions in [0, B] that are 0 with probability ``zeros`` (else uniform on (0, B]): the bound is used
    while every session so far is 0; it may miss the mean only when U_n < μ while all n are 0. Over all
    n at once that happens with probability P(all zero up to the first n with U_n < μ) = zeros^n*, which
    must be ≤ α (Ville), computed here exactly."""
    bound, alpha = 10.0, 0.05
    mean = (1 - zeros) * bound / 2
    n = np.arange(1, 200_001)
    misses = np.exp(zero_mean_upper(n, bound, alpha)) < mean
    assert misses.any()
    first = int(n[misses][0])
    assert zeros ** first <= alpha


def test_the_zero_bound_against_simulated_streams() -> None:
    rng = np.random.default_rng(1)
    bound, alpha, streams, length = 7.0, 0.05, 20_000, 400
    missed = 0
    for zeros in (0.98, 0.99, 0.995):
        mean = (1 - zeros) * bound * 0.5
        upper = np.exp(zero_mean_upper(np.arange(1, length + 1), bound, alpha))
        values = np.where(rng.random((streams, length)) < zeros, 0.0, rng.uniform(0, bound, (streams, length)))
        still_zero = np.cumsum(values, axis=1) == 0
        missed += int((still_zero & (upper[None, :] < mean)).any(axis=1).sum())
    assert missed / (3 * streams) <= alpha


# -- near-total breakage and the adjustment -----------------------------------------------------------------
def broken_arms(rng: np.random.Generator, runs: int, looks: int, per_look: int, broken: float
                ) -> tuple[np.ndarray, ...]:
    """A baseline whose DCG follows its query's difficulty c, and a candidate that scores 0 in a share
    ``broken`` of its sessions: per run, look and one stratum, the sums dcg_paths reads (cumulative)."""
    def arm(share_broken: float) -> tuple[np.ndarray, np.ndarray]:
        c = rng.lognormal(0.0, 0.8, (runs, looks, per_look))
        x = c * rng.gamma(4.0, 0.25, c.shape) * (rng.random(c.shape) > 0.2)
        x = np.where(rng.random(c.shape) < share_broken, 0.0, x)
        plain = np.stack([np.full(x.shape[:2], float(per_look)), x.sum(-1), (x * x).sum(-1)], axis=-1)
        cov = np.stack([np.full(x.shape[:2], float(per_look)), x.sum(-1), (x * x).sum(-1), c.sum(-1),
                        (c * c).sum(-1), (x * c).sum(-1)], axis=-1)
        return np.cumsum(plain, axis=1)[:, :, None, :], np.cumsum(cov, axis=1)[:, :, None, :]
    base, base_c = arm(0.0)
    cand, cand_c = arm(broken)
    return base, cand, base_c, cand_c


def first_regression(code: np.ndarray) -> np.ndarray:
    hit = (code == REGRESSION).any(axis=-1)
    return np.where(hit, (code == REGRESSION).argmax(axis=-1), code.shape[-1])


def test_99_percent_broken_is_caught_no_slower_with_the_adjustment_than_without() -> None:
    """Issue 26: with one slope pooled over both arms the adjustment added the covariate's spread to a
    candidate whose DCG no longer follows its query; each arm's own slope (Lin 2013) does not."""
    rng = np.random.default_rng(5)
    base, cand, base_c, cand_c = broken_arms(rng, 60, 40, 50, 0.99)
    adjusted = dcg_paths(base, cand, CONFIG, 7.0, base_c, cand_c)
    plain = dcg_paths(base, cand, CONFIG, 7.0)
    with_adjustment, without = first_regression(adjusted.path.code), first_regression(plain.path.code)
    assert np.median(with_adjustment) <= np.median(without)
    # the pooled slope (before): much slower on the same streams
    sums_b, sums_c = covariate_sums(base, base_c), covariate_sums(cand, cand_c)
    pooled = decide(EffectPath.of(*adjusted_mean_paths(sums_b, sums_c, pooled_slope(sums_b, sums_c))),
                    CanaryConfig(wide_weight=0.0))
    assert np.median(first_regression(pooled.code)) > 2 * np.median(with_adjustment)


def test_a_totally_broken_candidate_is_a_regression_at_the_first_look_with_min_sessions() -> None:
    rng = np.random.default_rng(6)
    base, cand, base_c, cand_c = broken_arms(rng, 30, 12, 40, 1.0)
    found = dcg_paths(base, cand, CONFIG, 11.0, base_c, cand_c)
    eligible = np.argmax(np.asarray(cand[..., 0, 0]) >= CONFIG.min_sessions, axis=-1)
    assert (first_regression(found.path.code) == eligible).all()  # look 5: 200 sessions per arm
    assert (found.path.estimate[:, -1] == -1.0).all() and (found.path.upper[:, -1] < -0.5).all()


# -- the sample-ratio check ---------------------------------------------------------------------------------
@pytest.mark.parametrize("share", [0.5, 0.05])
def test_sample_ratio_false_alarms_stay_below_alpha_and_a_10_percent_mismatch_is_found(share: float) -> None:
    """Impressions per look binomial with the declared share (A/A) or with the canary losing 10% of its
    sessions; every look counts. α = 5%: the A/A rate over 400 streams of 96 looks stays below it."""
    rng = np.random.default_rng(11)
    streams, looks, per_look = 400, 96, 1750  # a day of tail traffic (7,000 an hour)
    lost = share * 0.9 / (share * 0.9 + 1 - share)
    flagged = {}
    for name, actual in (("aa", share), ("srm", lost)):
        canary = rng.binomial(per_look, actual, (streams, looks)).astype(float)
        control = per_look - canary
        log_bf = log_ratio_bf(np.cumsum(canary, axis=1), np.cumsum(control, axis=1), share, CONFIG.mixture_sd)
        flagged[name] = float((log_bf >= math.log(1 / CONFIG.check_alpha)).any(axis=1).mean())
    assert flagged["aa"] <= CONFIG.check_alpha
    assert flagged["srm"] >= 0.95


def test_the_beta_binomial_bayes_factor_against_a_brute_force_integral() -> None:
    share, x, y = 0.3, 130.0, 370.0
    kappa = concentration(share, 0.05)
    a, b = kappa * share, kappa * (1 - share)
    p = np.linspace(1e-6, 1 - 1e-6, 400_001)
    log_prior = (a - 1) * np.log(p) + (b - 1) * np.log1p(-p) - (math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b))
    log_like = x * np.log(p) + y * np.log1p(-p) - (x * math.log(share) + y * math.log1p(-share))
    integral = float(np.sum(np.exp(log_prior + log_like)) * (p[1] - p[0]))
    assert float(log_ratio_bf(np.array(x), np.array(y), share, 0.05)) == pytest.approx(math.log(integral),
                                                                                        rel=1e-4)


@pytest.mark.parametrize("share", [5e-324, 1e-12, 1 - 1e-12])
def test_an_extreme_declared_share_gives_a_finite_bayes_factor(share: float) -> None:
    # valid JSON, refused by nothing: taken as at least 1e-9 and at most 1 − 1e-9, never a crash
    assert math.isfinite(float(log_ratio_bf(np.array(50.0), np.array(950.0), share, 0.05)))


def test_a_gross_mismatch_is_declared_at_once() -> None:
    # declared 5%, the canary gets half the traffic: one epoch of tail traffic is enough
    assert float(log_ratio_bf(np.array(875.0), np.array(875.0), 0.05, 0.05)) > math.log(1 / CONFIG.check_alpha)


def test_sample_ratio_segments_multiply_and_report_the_observed_share() -> None:
    looks = 4
    first = Segment(0.1, np.array([10.0, 10.0, 0.0, 0.0]), np.array([90.0, 90.0, 0.0, 0.0]))
    second = Segment(0.5, np.array([0.0, 0.0, 60.0, 60.0]), np.array([0.0, 0.0, 40.0, 40.0]))
    check = sample_ratio([first, second], looks, 0.05, 0.05)
    assert check is not None and check.name == "sample_ratio"
    expected = (float(log_ratio_bf(np.array(20.0), np.array(180.0), 0.1, 0.05))
                + float(log_ratio_bf(np.array(120.0), np.array(80.0), 0.5, 0.05)))
    assert check.evidence == pytest.approx(expected, rel=1e-12)
    assert check.expected == pytest.approx((200 * 0.1 + 200 * 0.5) / 400)
    assert check.estimate == pytest.approx((140 / 400) / 0.3 - 1)


# -- the balance check --------------------------------------------------------------------------------------
def test_balance_flags_a_candidate_with_harder_queries_and_not_a_random_split() -> None:
    rng = np.random.default_rng(8)

    def sums(c: np.ndarray) -> CovariateSums:
        x = c * rng.gamma(4.0, 0.25, c.shape)
        zeros = np.zeros(c.shape[:-1])
        fields = [np.full(c.shape[:-1], float(c.shape[-1])), x.sum(-1), (x * x).sum(-1), c.sum(-1),
                  (c * c).sum(-1), (x * c).sum(-1), zeros, zeros, zeros]
        return CovariateSums.of(*(np.cumsum(f, axis=1)[:, :, None] for f in fields))

    runs, looks, per_look = 200, 40, 100
    base = sums(rng.lognormal(0.0, 0.8, (runs, looks, per_look)))
    same = sums(rng.lognormal(0.0, 0.8, (runs, looks, per_look)))
    harder = sums(rng.lognormal(math.log(0.9), 0.8, (runs, looks, per_look)))  # 10% lower covariate
    assert balance_path(base, same, CONFIG).off.any(axis=-1).mean() <= CONFIG.check_alpha
    assert balance_path(base, harder, CONFIG).off.any(axis=-1).mean() >= 0.95


# -- the overall verdict ------------------------------------------------------------------------------------
def verdict(name: str, trusted: bool = True) -> Verdict:
    checks = () if trusted else (Check("sample_ratio", True, -0.1, None, None, 9.0, 0.5, "mismatch"),)
    return Verdict(name, None, None, None, None, 300, 300, "", trusted=trusted,  # type: ignore[arg-type]
                   checks=checks)


@pytest.mark.parametrize(("dcg", "pnr", "expected"), [
    ("regression", "pass", "regression"), ("pass", "regression", "regression"),
    ("regression", "inconclusive", "regression"), ("pass", "pass", "pass"),
    ("pass", "inconclusive", "inconclusive"), ("inconclusive", "inconclusive", "inconclusive"),
])
def test_overall_is_regression_if_any_and_pass_only_if_all(dcg: str, pnr: str, expected: str) -> None:
    found = overall([Comparison("tail", "dcg", "canary", "a", "b", verdict(dcg)),
                     Comparison("tail", "pnr", "canary", "a", "b", verdict(pnr))])
    assert [o.verdict for o in found] == [expected]


def test_overall_keeps_pairs_apart_and_carries_distrust() -> None:
    found = overall([Comparison("tail", "dcg", "canary", "a", "b", verdict("pass", trusted=False)),
                     Comparison("tail", "pnr", "canary", "a", "b", verdict("pass", trusted=False)),
                     Comparison("head", "dcg", "deploy", "a", "c", verdict("regression"))])
    assert [(o.bucket, o.kind, o.candidate, o.verdict, o.trusted) for o in found] == [
        ("tail", "canary", "b", "pass", False), ("head", "deploy", "c", "regression", True)]
    assert "sample ratio" in found[0].reason
