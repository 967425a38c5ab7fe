"""compare(): the confidence sequence against the closed forms it cites, symmetry, the decision rule, merging."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig, Verdict, compare
from monitor.core.canary.sequential import half_width, log_mixture_ratio
from monitor.core.stream.stats import Stats, add

CONFIG = CanaryConfig()


def dcg_stats(values: list[float] | np.ndarray) -> Stats:
    x = np.asarray(values, dtype=np.float64)
    return {"sessions": float(x.size), "dcg": float(x.sum()), "dcg_sq": float((x * x).sum())}


def pnr_stats(positive: list[int] | np.ndarray, negative: list[int] | np.ndarray) -> Stats:
    p, n = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    return {"sessions": float(p.size), "concordant": float(p.sum()), "grade_tied": 0.0,
            "discordant": float(n.sum()), "pnr_pos_sq": float((p * p).sum()),
            "pnr_neg_sq": float((n * n).sum()), "pnr_pos_neg": float((p * n).sum())}


def arms(n: int, base_mean: float, cand_mean: float) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic two-point samples: values mean ± 1 alternately (sd ≈ 1), no randomness."""
    signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return base_mean + signs, cand_mean + signs


# --- the closed forms ---------------------------------------------------------------------------------

def test_interval_is_the_howard_normal_mixture_boundary_on_the_log_ratio() -> None:
    base, cand = arms(1000, 2.0, 1.8)
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    # Delta method, computed here from the raw values (not from the sums compare() sees).
    v = base.var(ddof=1) / (base.size * base.mean() ** 2) + cand.var(ddof=1) / (cand.size * cand.mean() ** 2)
    theta = math.log(cand.mean() / base.mean())
    # Howard et al. (2021) §3.5, two-sided normal mixture on S with intrinsic time V and precision ρ:
    # |S| ≤ √((V + ρ) log((V + ρ) / (ρ α²))). For a mean: S = θ̂ V with V = 1/v, ρ = 1/τ².
    V, rho, alpha = 1.0 / v, 1.0 / CONFIG.mixture_sd**2, CONFIG.alpha
    h = math.sqrt((V + rho) * math.log((V + rho) / (rho * alpha**2))) / V
    assert verdict.estimate == pytest.approx(cand.mean() / base.mean() - 1, rel=1e-12)
    assert verdict.lower == pytest.approx(math.exp(theta - h) - 1, rel=1e-9)
    assert verdict.upper == pytest.approx(math.exp(theta + h) - 1, rel=1e-9)
    assert (verdict.n_baseline, verdict.n_candidate) == (1000, 1000)


@pytest.mark.parametrize(("t", "sigma"), [(50, 1.0), (1000, 0.7), (100_000, 2.5)])
def test_half_width_is_the_waudby_smith_asymptotic_cs(t: int, sigma: float) -> None:
    # Waudby-Smith et al. (2021) Thm 2.2: √(2(tσ²ρ² + 1)/(t²ρ²) · log(√(tσ²ρ² + 1)/α)), with ρ = τ/σ².
    tau, alpha = 0.05, 0.05
    rho = tau / sigma**2
    expected = math.sqrt(2 * (t * sigma**2 * rho**2 + 1) / (t**2 * rho**2)
                         * math.log(math.sqrt(t * sigma**2 * rho**2 + 1) / alpha))
    assert half_width(sigma**2 / t, tau, alpha) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("variance", [1e-6, 1e-4, 1e-2])
def test_evidence_reaches_log_one_over_alpha_exactly_at_the_interval_ends(variance: float) -> None:
    # mSPRT (Johari et al. 2017): the sequence is {θ₀ : Λ(θ₀) < 1/α}.
    h = half_width(variance, 0.05, 0.05)
    for end in (0.3 - h, 0.3 + h):
        assert log_mixture_ratio(0.3, variance, 0.05, null=end) == pytest.approx(math.log(20), rel=1e-10)
    assert log_mixture_ratio(0.3, variance, 0.05, null=0.3) < math.log(20)


def test_evidence_is_the_mixture_likelihood_ratio_against_no_change() -> None:
    base, cand = arms(400, 2.0, 1.9)
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    v = base.var(ddof=1) / (400 * base.mean() ** 2) + cand.var(ddof=1) / (400 * cand.mean() ** 2)
    theta, tau2 = math.log(cand.mean() / base.mean()), CONFIG.mixture_sd**2
    # Λ = √(v/(v+τ²)) exp(τ² θ̂² / (2v(v+τ²))), Johari et al. (2017) for the difference of two means.
    expected = math.log(math.sqrt(v / (v + tau2)) * math.exp(tau2 * theta**2 / (2 * v * (v + tau2))))
    assert verdict.evidence == pytest.approx(expected, rel=1e-10)
    assert (verdict.evidence >= math.log(20)) == (verdict.upper is not None and verdict.upper < 0)


def test_pnr_interval_uses_the_delta_method_of_a_ratio() -> None:
    positive = [10, 12, 8, 15, 9, 11] * 50
    negative = [2, 1, 3, 2, 2, 1] * 50
    verdict = compare(pnr_stats(positive, negative), pnr_stats([p - 1 for p in positive], negative),
                      "pnr", CONFIG)
    p, q = np.asarray(positive, float), np.asarray(negative, float)

    def log_var(p: np.ndarray, q: np.ndarray) -> float:
        cov = np.cov(np.vstack([p, q]), ddof=1)
        pm, qm = p.mean(), q.mean()
        return float((cov[0, 0] / pm**2 + cov[1, 1] / qm**2 - 2 * cov[0, 1] / (pm * qm)) / p.size)

    v = log_var(p, q) + log_var(p - 1, q)
    theta = math.log((p - 1).sum() / q.sum()) - math.log(p.sum() / q.sum())
    h = half_width(v, CONFIG.mixture_sd, CONFIG.alpha)
    assert verdict.estimate == pytest.approx(math.expm1(theta), rel=1e-12)
    assert verdict.lower == pytest.approx(math.expm1(theta - h), rel=1e-9)
    assert verdict.upper == pytest.approx(math.expm1(theta + h), rel=1e-9)


# --- symmetry and merging -----------------------------------------------------------------------------

def test_swapping_the_arms_mirrors_the_log_interval() -> None:
    base, cand = arms(600, 2.0, 1.7)
    forward = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    backward = compare(dcg_stats(cand), dcg_stats(base), "dcg", CONFIG)
    assert forward.lower is not None and forward.upper is not None and forward.estimate is not None
    assert backward.lower is not None and backward.upper is not None and backward.estimate is not None
    assert math.log1p(backward.estimate) == pytest.approx(-math.log1p(forward.estimate), rel=1e-12)
    assert math.log1p(backward.lower) == pytest.approx(-math.log1p(forward.upper), rel=1e-12)
    assert math.log1p(backward.upper) == pytest.approx(-math.log1p(forward.lower), rel=1e-12)
    assert backward.evidence == pytest.approx(forward.evidence, rel=1e-12)
    assert forward.verdict == "regression" and backward.verdict == "pass"


def test_identical_arms_give_an_interval_centred_on_zero() -> None:
    base, _ = arms(800, 2.0, 2.0)
    verdict = compare(dcg_stats(base), dcg_stats(base), "dcg", CONFIG)
    assert verdict.estimate == 0.0
    assert verdict.lower is not None and verdict.upper is not None
    assert math.log1p(verdict.lower) == pytest.approx(-math.log1p(verdict.upper), rel=1e-12)


@pytest.mark.parametrize("metric", ["dcg", "pnr"])
def test_merging_two_halves_gives_the_verdict_of_one_stream(metric: str) -> None:
    rng = np.random.default_rng(7)

    def sessions(size: int, scale: float) -> tuple[np.ndarray, np.ndarray]:
        dcg = np.where(rng.random(size) < 0.3, 0.0, rng.gamma(2.0, scale, size))
        return dcg, rng.integers(0, 40, size) * scale

    def stats(values: tuple[np.ndarray, np.ndarray], negative: np.ndarray) -> Stats:
        return dcg_stats(values[0]) if metric == "dcg" else pnr_stats(values[1], negative)

    base, cand = sessions(2000, 1.0), sessions(1500, 0.9)
    base_neg, cand_neg = rng.integers(1, 10, 2000), rng.integers(1, 10, 1500)
    single = compare(stats(base, base_neg), stats(cand, cand_neg), metric, CONFIG)
    merged_base = stats((base[0][:700], base[1][:700]), base_neg[:700])
    add(merged_base, stats((base[0][700:], base[1][700:]), base_neg[700:]))
    merged_cand = stats((cand[0][:1000], cand[1][:1000]), cand_neg[:1000])
    add(merged_cand, stats((cand[0][1000:], cand[1][1000:]), cand_neg[1000:]))
    merged = compare(merged_base, merged_cand, metric, CONFIG)
    assert (merged.verdict, merged.n_baseline, merged.n_candidate) == (single.verdict, 2000, 1500)
    for field in ("estimate", "lower", "upper", "evidence"):
        assert getattr(merged, field) == pytest.approx(getattr(single, field), rel=1e-9)


# --- the decision rule --------------------------------------------------------------------------------

def test_too_few_sessions_is_inconclusive_even_with_a_huge_drop() -> None:
    base, cand = arms(199, 3.0, 1.5)
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    assert verdict.verdict == "inconclusive"
    assert verdict.reason == "too few sessions: baseline 199, candidate 199 (at least 200 per arm)"
    assert verdict.upper is not None and verdict.upper < 0  # the numbers alone would say regression


def test_too_few_sessions_never_passes() -> None:
    base, _ = arms(150, 2.0, 2.0)
    verdict = compare(dcg_stats(base), dcg_stats(base), "dcg", CanaryConfig(min_sessions=151))
    assert verdict.verdict == "inconclusive"


def test_a_large_clear_drop_is_a_regression() -> None:
    base, cand = arms(2000, 2.0, 1.6)  # −20%, standard error ≈ 1.7%
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    assert verdict.verdict == "regression"
    assert verdict.estimate == pytest.approx(-0.2, rel=1e-12)
    assert verdict.upper is not None and verdict.upper < -0.1
    assert verdict.reason == "20.0% lower; the 95% confidence sequence excludes no change"


def test_a_big_sample_without_change_passes() -> None:
    base, cand = arms(200_000, 2.0, 2.0)
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    assert verdict.verdict == "pass"
    assert verdict.lower is not None and -0.02 < verdict.lower < 0 < verdict.upper  # type: ignore[operator]


def test_a_moderate_sample_without_change_is_inconclusive() -> None:
    base, cand = arms(2000, 2.0, 2.0)  # half-width ≈ 5%: a 2% drop is not ruled out yet
    assert compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG).verdict == "inconclusive"


def test_a_proven_small_drop_passes_and_an_unproven_one_waits() -> None:
    base, cand = arms(400_000, 2.0, 1.98)  # −1%, interval ≈ ±0.6%: rules out −2%
    small = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    assert small.verdict == "pass" and small.upper is not None and small.upper < 0
    base, cand = arms(40_000, 2.0, 1.97)  # −1.5%, interval ≈ ±1.5%: below 0, −2% not ruled out
    waiting = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    assert waiting.verdict == "inconclusive"
    assert waiting.upper is not None and waiting.upper < 0
    assert waiting.reason.startswith("lower, but the estimated drop 1.5% is below the minimum of interest 2.0%")


def test_an_improvement_passes() -> None:
    base, cand = arms(5000, 2.0, 2.4)
    assert compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG).verdict == "pass"


# --- undefined values ---------------------------------------------------------------------------------

def test_no_sessions_gives_no_numbers() -> None:
    verdict = compare({}, dcg_stats([1.0, 2.0]), "dcg", CONFIG)
    assert verdict == Verdict("inconclusive", None, None, None, None, 0, 2,
                              "too few sessions: baseline 0, candidate 2 (at least 200 per arm)")


def test_a_baseline_of_zero_has_no_relative_change() -> None:
    verdict = compare(dcg_stats([0.0] * 500), dcg_stats([1.0, 0.0] * 250), "dcg", CONFIG)
    assert (verdict.verdict, verdict.estimate, verdict.lower) == ("inconclusive", None, None)
    assert verdict.reason == "baseline: mean DCG is 0, so a relative change is undefined"


def test_pnr_without_inversions_has_no_relative_change() -> None:
    verdict = compare(pnr_stats([5] * 300, [0] * 300), pnr_stats([5] * 300, [1] * 300), "pnr", CONFIG)
    assert (verdict.verdict, verdict.estimate) == ("inconclusive", None)
    assert verdict.reason == "baseline: no inversions: PNR is +Inf, a relative change is undefined"


def test_stats_without_second_moments_give_an_estimate_but_no_interval() -> None:
    stats = {"sessions": 500.0, "concordant": 4000.0, "discordant": 900.0, "grade_tied": 100.0}
    verdict = compare(stats, stats, "pnr", CONFIG)
    assert (verdict.verdict, verdict.estimate, verdict.lower, verdict.evidence) == ("inconclusive", 0.0, None, None)
    assert "no pnr second moments" in verdict.reason


def test_constant_sessions_have_no_interval() -> None:
    verdict = compare(dcg_stats([1.0] * 300), dcg_stats([1.0] * 300), "dcg", CONFIG)
    assert (verdict.verdict, verdict.lower, verdict.reason) == ("inconclusive", None, "no variation between sessions")


def test_unknown_metric_and_negative_sessions_are_named() -> None:
    with pytest.raises(ValueError) as metric:
        compare({}, {}, "ndcg", CONFIG)
    assert str(metric.value) == "metric: 'ndcg' is not one of dcg, pnr"
    with pytest.raises(ValueError) as sessions:
        compare({"sessions": -3.0}, {}, "dcg", CONFIG)
    assert str(sessions.value) == "sessions: must be ≥ 0, got -3.0"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"alpha": 0.0}, "alpha: must be in (0, 1), got 0.0"),
    ({"alpha": float("nan")}, "alpha: expected a finite number, got nan"),
    ({"min_relative_drop": 1.0}, "min_relative_drop: must be in (0, 1), got 1.0"),
    ({"mixture_sd": -0.1}, "mixture_sd: must be > 0, got -0.1"),
    ({"min_sessions": 1}, "min_sessions: expected an integer ≥ 2, got 1"),
    ({"min_sessions": 2.5}, "min_sessions: expected an integer ≥ 2, got 2.5"),
    ({"alpha": True}, "alpha: expected a finite number, got True"),
])
def test_config_errors_name_the_field(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as error:
        CanaryConfig(**kwargs)  # type: ignore[arg-type]
    assert str(error.value) == message
