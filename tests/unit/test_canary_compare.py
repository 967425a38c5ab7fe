"""compare(): the confidence sequence against the closed forms it cites, symmetry, the decision rule, merging."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig, Verdict, compare
from monitor.core.canary.sequential import half_width, half_widths, log_mixture_ratio, log_ratios
from monitor.core.canary.verdict_paths import INCONCLUSIVE, PASS, REGRESSION, EffectPath, effect_verdict_path
from monitor.core.stream.stats import Stats, add

CONFIG = CanaryConfig()
SINGLE = CanaryConfig(wide_weight=0.0)  # one normal mixture: the closed forms of the papers


def dcg_stats(values: list[float] | np.ndarray) -> Stats:
    x = np.asarray(values, dtype=np.float64)
    return {"sessions": float(x.size), "dcg": float(x.sum()), "dcg_sq": float((x * x).sum())}


def pnr_stats(positive: list[int] | np.ndarray, negative: list[int] | np.ndarray) -> Stats:
    """Sessions with ``positive`` concordant and ``negative`` discordant pairs and no grade-tied ones (so
    the seed's PNR and the verdict's, which leaves ties out, agree)."""
    p, n = np.asarray(positive, dtype=np.float64), np.asarray(negative, dtype=np.float64)
    return {"sessions": float(p.size), "concordant": float(p.sum()), "grade_tied": 0.0,
            "discordant": float(n.sum()), "pnr_pos_sq": float((p * p).sum()),
            "pnr_neg_sq": float((n * n).sum()), "pnr_pos_neg": float((p * n).sum()),
            "pnr_con_sq": float((p * p).sum()), "pnr_con_neg": float((p * n).sum())}


def arms(n: int, base_mean: float, cand_mean: float) -> tuple[np.ndarray, np.ndarray]:
    """Deterministic two-point samples: values mean ± 1 alternately (sd ≈ 1), no randomness."""
    signs = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    return base_mean + signs, cand_mean + signs


# --- the closed forms ---------------------------------------------------------------------------------

def test_interval_is_the_howard_normal_mixture_boundary_on_the_log_ratio() -> None:
    base, cand = arms(1000, 2.0, 1.8)
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", SINGLE)
    # Delta method, computed here from the raw values (not from the sums compare() sees).
    v = base.var(ddof=1) / (base.size * base.mean() ** 2) + cand.var(ddof=1) / (cand.size * cand.mean() ** 2)
    theta = math.log(cand.mean() / base.mean())
    # Howard et al. (2021) §3.5, two-sided normal mixture on S with intrinsic time V and precision ρ:
    # |S| ≤ √((V + ρ) log((V + ρ) / (ρ α²))). For a mean: S = θ̂ V with V = 1/v, ρ = 1/τ². The lower end
    # (a pass) at α · 0.99, the upper end (a regression) at α / 2 · 0.99: the pair's two metrics share α
    # for regressions.
    V, rho = 1.0 / v, 1.0 / CONFIG.mixture_sd**2

    def h(alpha: float) -> float:
        return math.sqrt((V + rho) * math.log((V + rho) / (rho * alpha**2))) / V

    assert (CONFIG.sequence_alpha, CONFIG.regression_sequence_alpha) == pytest.approx((0.0495, 0.02475))
    assert verdict.estimate == pytest.approx(cand.mean() / base.mean() - 1, rel=1e-12)
    assert verdict.lower == pytest.approx(math.exp(theta - h(0.05 * 0.99)) - 1, rel=1e-9)
    assert verdict.upper == pytest.approx(math.exp(theta + h(0.05 / 2 * 0.99)) - 1, rel=1e-9)
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
    verdict = compare(dcg_stats(base), dcg_stats(cand), "dcg", SINGLE)
    v = base.var(ddof=1) / (400 * base.mean() ** 2) + cand.var(ddof=1) / (400 * cand.mean() ** 2)
    theta, tau2 = math.log(cand.mean() / base.mean()), CONFIG.mixture_sd**2
    # Λ = √(v/(v+τ²)) exp(τ² θ̂² / (2v(v+τ²))), Johari et al. (2017) for the difference of two means.
    expected = math.log(math.sqrt(v / (v + tau2)) * math.exp(tau2 * theta**2 / (2 * v * (v + tau2))))
    assert verdict.evidence == pytest.approx(expected, rel=1e-10)
    assert verdict.upper is not None and verdict.upper > 0 and verdict.evidence < math.log(20)


def test_each_end_leaves_zero_exactly_where_the_evidence_reaches_its_level() -> None:
    """The evidence is log Λ(0) at both ends; the lower end (a pass) is at α · 0.99, so it is above 0
    exactly when log Λ(0) ≥ log(1 / (α · 0.99)), the upper end (a regression) at α / 2 · 0.99, so it is
    below 0 exactly when log Λ(0) ≥ log(2 / (α · 0.99)): a drop needs more evidence than a gain."""
    v = np.full(401, 0.02**2)
    theta = np.linspace(-0.12, 0.12, 401)
    path = effect_verdict_path(EffectPath(theta, v, np.full(401, 500.0), np.full(401, 500.0)), CONFIG)
    gain, drop = theta > 0, theta < 0
    assert ((path.lower > 0) == (path.evidence >= math.log(1 / CONFIG.sequence_alpha)))[gain].all()
    assert ((path.upper < 0) == (path.evidence >= math.log(1 / CONFIG.regression_sequence_alpha)))[drop].all()
    # the two levels differ where it shows: some drops as large as some gains are not yet proven
    proven_gain = np.abs(theta[gain & (path.lower > 0)]).min()
    proven_drop = np.abs(theta[drop & (path.upper < 0)]).min()
    assert proven_drop > proven_gain + 0.003  # 6.7% against 6.2% at a standard error of 2%


def test_a_regression_reads_the_upper_end_at_half_alpha_and_a_pass_the_lower_end_at_alpha() -> None:
    """A drop whose (1 − α) sequence excludes no change but whose upper end at α / 2 does not is
    inconclusive; the same size of gain, proven at α, passes."""
    v = 0.02**2
    low, high = (float(half_widths(np.array(v), CONFIG.mixture, a))
                 for a in (CONFIG.sequence_alpha, CONFIG.regression_sequence_alpha))
    assert high > low
    size = (low + high) / 2  # beyond the α half-width, within the α / 2 one
    path = effect_verdict_path(EffectPath(np.array([-size, size]), np.full(2, v), np.full(2, 500.0),
                                          np.full(2, 500.0)), CONFIG)
    assert path.code.tolist() == [INCONCLUSIVE, PASS]
    assert np.log1p(path.upper[0]) == pytest.approx(-size + high, rel=1e-12)
    assert np.log1p(path.lower[1]) == pytest.approx(size - low, rel=1e-12)
    before = effect_verdict_path(EffectPath(np.array([-size]), np.full(1, v), np.full(1, 500.0),
                                            np.full(1, 500.0)), replace(CONFIG, alpha=2 * CONFIG.alpha))
    assert before.code.tolist() == [REGRESSION]  # each metric's regression at α, as before: 2α for the pair


def test_pnr_interval_uses_the_delta_method_of_a_ratio() -> None:
    positive = [10, 12, 8, 15, 9, 11] * 50
    negative = [2, 1, 3, 2, 2, 1] * 50
    verdict = compare(pnr_stats(positive, negative), pnr_stats([p - 1 for p in positive], negative),
                      "pnr", SINGLE)
    p, q = np.asarray(positive, float), np.asarray(negative, float)

    def log_var(p: np.ndarray, q: np.ndarray) -> float:
        cov = np.cov(np.vstack([p, q]), ddof=1)
        pm, qm = p.mean(), q.mean()
        return float((cov[0, 0] / pm**2 + cov[1, 1] / qm**2 - 2 * cov[0, 1] / (pm * qm)) / p.size)

    v = log_var(p, q) + log_var(p - 1, q)
    theta = math.log((p - 1).sum() / q.sum()) - math.log(p.sum() / q.sum())
    assert verdict.estimate == pytest.approx(math.expm1(theta), rel=1e-12)
    assert verdict.lower == pytest.approx(math.expm1(theta - half_width(v, CONFIG.mixture_sd, 0.05 * 0.99)),
                                          rel=1e-9)
    assert verdict.upper == pytest.approx(math.expm1(theta + half_width(v, CONFIG.mixture_sd, 0.05 / 2 * 0.99)),
                                          rel=1e-9)


@pytest.mark.parametrize("variance", [1e-6, 1e-4, 1e-2, 0.3, 5.0])
def test_the_default_two_component_mixture_solves_its_boundary_equation(variance: float) -> None:
    # Λ = 0.95 Λ(τ = 0.05) + 0.05 Λ(τ = 1): the half-width is where Λ reaches 1/α, computed here from the
    # two closed-form ratios; it lies between the components' boundaries at α and at α · w.
    alpha = CONFIG.sequence_alpha
    h = float(half_widths(np.array(variance), CONFIG.mixture, alpha))
    ratio = sum(w * math.exp(log_mixture_ratio(h, variance, tau)) for tau, w in CONFIG.mixture)
    assert ratio == pytest.approx(1 / alpha, rel=1e-9)
    assert float(log_ratios(np.array(h), np.array(variance), CONFIG.mixture)) == pytest.approx(
        math.log(1 / alpha), rel=1e-9)
    low = min(half_width(variance, tau, alpha) for tau, _ in CONFIG.mixture)
    high = min(half_width(variance, tau, alpha * w) for tau, w in CONFIG.mixture)
    assert low <= h <= high


@pytest.mark.parametrize("mixture", [((0.05, 0.95), (1.0, 0.05)), ((0.01, 0.5), (0.2, 0.3), (3.0, 0.2))])
@pytest.mark.parametrize("alpha", [0.2, 0.05, 0.001])
def test_the_mixtures_half_widths_equal_a_bisection_of_the_closed_form_over_sixteen_decades(
        mixture: tuple[tuple[float, float], ...], alpha: float) -> None:
    """Newton's method on h² (``half_widths``) against a scalar bisection of Σ w Λ(τ) = 1/α written with
    ``math`` alone, at variances from 1e-12 to 1e4, in one array with unusable ones (NaN out)."""
    rng = np.random.default_rng(7)
    variances = 10 ** rng.uniform(-12, 4, 400)

    def bisected(variance: float) -> float:
        def ratio(h: float) -> float:
            return sum(w * math.exp(min(700.0, log_mixture_ratio(h, variance, tau))) for tau, w in mixture)
        low, high = 0.0, min(half_width(variance, tau, alpha * w) for tau, w in mixture)
        for _ in range(200):
            middle = 0.5 * (low + high)
            low, high = (low, middle) if ratio(middle) >= 1 / alpha else (middle, high)
        return high

    got = half_widths(np.concatenate([variances, [0.0, -1.0, math.nan, math.inf]]), mixture, alpha)
    assert np.isnan(got[-4:]).all()
    for variance, h in zip(variances, got[:-4], strict=True):
        assert h == pytest.approx(bisected(float(variance)), rel=1e-10), variance


def test_the_wide_component_costs_under_one_percent_where_the_test_is_tuned_and_saves_much_beyond() -> None:
    alpha = CONFIG.sequence_alpha
    for se in (0.005, 0.01, 0.02, 0.03):  # standard errors of the 2–10% drops the first component is for
        single = half_width(se**2, CONFIG.mixture_sd, alpha)
        assert single < float(half_widths(np.array(se**2), CONFIG.mixture, alpha)) < 1.01 * single
    # a candidate broken in 99% of its sessions: a log-scale standard error near 1 at a few hundred
    # sessions; the tuned mixture alone gives a half-width of 49, the two components 5.0
    assert float(half_widths(np.array(1.0), CONFIG.mixture, alpha)) < 0.15 * half_width(1.0, CONFIG.mixture_sd,
                                                                                          alpha)


# --- symmetry and merging -----------------------------------------------------------------------------

def test_swapping_the_arms_mirrors_the_estimate_and_keeps_each_ends_width() -> None:
    """The estimate mirrors; the ends do not swap with the arms: the lower end is always at α (a pass),
    the upper at α / 2 (a regression), so each end keeps its distance from the estimate."""
    base, cand = arms(600, 2.0, 1.7)
    forward = compare(dcg_stats(base), dcg_stats(cand), "dcg", CONFIG)
    backward = compare(dcg_stats(cand), dcg_stats(base), "dcg", CONFIG)
    assert forward.lower is not None and forward.upper is not None and forward.estimate is not None
    assert backward.lower is not None and backward.upper is not None and backward.estimate is not None
    assert math.log1p(backward.estimate) == pytest.approx(-math.log1p(forward.estimate), rel=1e-12)
    below = math.log1p(forward.estimate) - math.log1p(forward.lower)
    above = math.log1p(forward.upper) - math.log1p(forward.estimate)
    assert math.log1p(backward.estimate) - math.log1p(backward.lower) == pytest.approx(below, rel=1e-9)
    assert math.log1p(backward.upper) - math.log1p(backward.estimate) == pytest.approx(above, rel=1e-9)
    assert above > below
    assert backward.evidence == pytest.approx(forward.evidence, rel=1e-12)
    assert forward.verdict == "regression" and backward.verdict == "pass"


def test_identical_arms_give_an_interval_around_zero_wider_above() -> None:
    base, _ = arms(800, 2.0, 2.0)
    verdict = compare(dcg_stats(base), dcg_stats(base), "dcg", CONFIG)
    assert verdict.estimate == 0.0
    assert verdict.lower is not None and verdict.upper is not None
    v = 2 * base.var(ddof=1) / (base.size * base.mean() ** 2)
    assert math.log1p(verdict.lower) == pytest.approx(
        -float(half_widths(np.array(v), CONFIG.mixture, CONFIG.sequence_alpha)), rel=1e-9)
    assert math.log1p(verdict.upper) == pytest.approx(
        float(half_widths(np.array(v), CONFIG.mixture, CONFIG.regression_sequence_alpha)), rel=1e-9)


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


def test_a_candidate_whose_every_session_scored_zero_is_a_regression_at_min_sessions() -> None:
    # A ranker returning nothing relevant: log 0 has no delta method, but 200 sessions at 0 bound the
    # candidate's mean exactly (monitor/core/canary/bounds.py): at most 4.4% of tail's DCG@20 bound.
    base = np.where(np.arange(200) % 4 == 0, 0.0, 1.6)  # tail-like: a mean of 1.2, a quarter at 0
    verdict = compare(dcg_stats(base), dcg_stats([0.0] * 200), "dcg", CONFIG, "tail")
    assert (verdict.verdict, verdict.estimate, verdict.lower) == ("regression", -1.0, -1.0)
    assert verdict.upper is not None and -1.0 < verdict.upper < -0.5
    assert verdict.evidence is None
    assert verdict.reason == "100.0% lower; the 95% confidence sequence excludes no change"
    short = compare(dcg_stats(base[:199]), dcg_stats([0.0] * 199), "dcg", CONFIG, "tail")
    assert short.verdict == "inconclusive" and short.reason.startswith("too few sessions")


def test_the_zero_bound_is_the_betting_bound_and_needs_a_bound_of_a_session() -> None:
    base = np.where(np.arange(400) % 2 == 0, 0.5, 2.5)
    verdict = compare(dcg_stats(base), dcg_stats([0.0] * 300), "dcg", CONFIG, "head")
    # upper (a regression): U / (the baseline's lower end), U = B (1 − a^(1/n)), both at a = α/2/100 / 2
    # (the regression's level, two components); the lower end is open (the candidate's mean may be 0)
    bound = CONFIG.dcg_bound["head"]
    a = 0.05 / 2 / 100 / 2
    assert CONFIG.regression_bound_alpha / 2 == pytest.approx(a)
    u = bound * (1 - a ** (1 / 300))
    mean, var = base.mean(), base.var(ddof=1) / (400 * base.mean() ** 2)
    lower_b = math.log(mean) - float(half_widths(np.array(var), CONFIG.mixture, a))
    assert verdict.upper == pytest.approx(math.expm1(math.log(u) - lower_b), rel=1e-9)
    assert verdict.lower == -1.0
    unbounded = CanaryConfig().with_bounds({"head": 40}, None)
    blind = compare(dcg_stats(base), dcg_stats([0.0] * 300), "dcg", unbounded, "head")
    assert blind.verdict == "inconclusive" and "no bound" in blind.reason


def test_a_baseline_of_zero_against_a_working_candidate_passes_on_the_bound() -> None:
    verdict = compare(dcg_stats([0.0] * 500), dcg_stats([1.0, 0.0] * 250), "dcg", CONFIG, "tail")
    assert (verdict.verdict, verdict.estimate, verdict.upper) == ("pass", None, None)
    # lower (a pass): the candidate's lower end over U of the baseline, both at a = α/100 / 2 (the pass's
    # level, two components)
    a = 0.05 / 100 / 2
    assert CONFIG.bound_alpha / 2 == pytest.approx(a)
    u = CONFIG.dcg_bound["tail"] * (1 - a ** (1 / 500))
    var = 0.25 / (500 * 0.25)  # s² / (n m²): values 1, 0 alternately, s² = 500/499 · 0.25
    lower_c = math.log(0.5) - float(half_widths(np.array(var * 500 / 499), CONFIG.mixture, a))
    assert verdict.lower == pytest.approx(math.expm1(lower_c - math.log(u)), rel=1e-9)
    assert verdict.lower is not None and verdict.lower > 0


def test_both_arms_at_zero_have_no_relative_change() -> None:
    verdict = compare(dcg_stats([0.0] * 500), dcg_stats([0.0] * 500), "dcg", CONFIG, "tail")
    assert (verdict.verdict, verdict.estimate, verdict.lower) == ("inconclusive", None, None)
    assert verdict.reason == "both arms' mean DCG is 0: no relative change"


def test_pnr_without_inversions_is_bounded_and_decided_once_the_bound_is_tight() -> None:
    few = compare(pnr_stats([4, 6] * 150, [0] * 300), pnr_stats([4, 6] * 150, [0, 2] * 150), "pnr", CONFIG,
                  "tail")
    assert few.verdict == "inconclusive" and few.estimate == -1.0  # 5 against +Inf: not yet tight
    assert few.upper is not None and few.upper > 0
    many = compare(pnr_stats([4, 6] * 2500, [0] * 5000), pnr_stats([4, 6] * 2500, [0, 2] * 2500), "pnr", CONFIG,
                   "tail")
    assert many.verdict == "regression" and many.upper is not None and many.upper < 0
    # no inversions, and as many pairs of different grades per session (6) as the baseline: a pass
    perfect = compare(pnr_stats([4, 6] * 2500, [0, 2] * 2500), pnr_stats([5, 7] * 2500, [0] * 5000), "pnr",
                      CONFIG, "tail")
    assert perfect.verdict == "pass" and perfect.estimate is None and perfect.lower is not None


def test_lists_with_nothing_to_order_are_a_pnr_regression_and_never_a_pass() -> None:
    # All-irrelevant lists: every pair grade-tied, so no concordant and no discordant pair (PNR 0/0).
    base = pnr_stats([30, 40, 20] * 100, [3, 5, 2] * 100)
    empty = {**pnr_stats([0] * 300, [0] * 300), "grade_tied": 300 * 190.0}
    verdict = compare(base, empty, "pnr", CONFIG, "tail")
    assert verdict.verdict == "regression"
    assert "no pair of different grades" in verdict.reason


def test_stats_without_second_moments_give_an_estimate_but_no_interval() -> None:
    stats = {"sessions": 500.0, "concordant": 4000.0, "discordant": 900.0, "grade_tied": 100.0}
    verdict = compare(stats, stats, "pnr", CONFIG)
    assert (verdict.verdict, verdict.estimate, verdict.lower, verdict.evidence) == ("inconclusive", 0.0, None, None)
    assert verdict.reason.startswith("no variance")


def test_constant_sessions_have_no_interval() -> None:
    verdict = compare(dcg_stats([1.0] * 300), dcg_stats([1.0] * 300), "dcg", CONFIG)
    assert (verdict.verdict, verdict.lower) == ("inconclusive", None)
    assert verdict.reason.startswith("no variance")


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
