"""Time-matched comparisons and sticky verdicts: the post-stratified estimator against brute force and the
unmatched one, the running intersection's rule and resets, and the pairing of deploys and canaries by
time strata."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.core.canary import CanaryConfig, comparisons
from monitor.core.canary.matched import fields_of, matched_paths
from monitor.core.canary.verdict import reason
from monitor.core.canary.verdict_paths import (
    INCONCLUSIVE,
    PASS,
    REGRESSION,
    VerdictPath,
    log_mean_path,
    log_pnr_path,
    sticky_path,
    verdict_path,
)
from monitor.core.events import Deploy
from monitor.core.stream.history import History
from monitor.core.stream.stats import Stats

HOUR = 3600.0


def dcg_stats(x: np.ndarray) -> Stats:
    return {"sessions": float(x.size), "dcg": float(x.sum()), "dcg_sq": float((x * x).sum())}


def pnr_stats(p: np.ndarray, n: np.ndarray) -> Stats:
    return {"sessions": float(p.size), "concordant": float(p.sum()), "grade_tied": 0.0,
            "discordant": float(n.sum()), "pnr_pos_sq": float((p * p).sum()),
            "pnr_neg_sq": float((n * n).sum()), "pnr_pos_neg": float((p * n).sum()),
            "pnr_con_sq": float((p * p).sum()), "pnr_con_neg": float((p * n).sum())}


# -- the estimator -------------------------------------------------------------------------------------
def test_one_stratum_is_the_unmatched_comparison() -> None:
    rng = np.random.default_rng(3)
    base, cand = rng.gamma(1.5, 1.0, 700), rng.gamma(1.5, 0.9, 500)
    b, c = matched_paths([fields_of(dcg_stats(base), "dcg")], [fields_of(dcg_stats(cand), "dcg")], "dcg")
    plain_b = log_mean_path(base.size, base.sum(), (base * base).sum())
    plain_c = log_mean_path(cand.size, cand.sum(), (cand * cand).sum())
    for matched, plain in ((b, plain_b), (c, plain_c)):
        assert float(matched.value) == pytest.approx(float(plain.value), rel=1e-12)
        assert float(matched.variance) == pytest.approx(float(plain.variance), rel=1e-9)
    p, n = rng.binomial(150, 0.8, 400).astype(float), rng.binomial(40, 0.3, 400).astype(float)
    b, _ = matched_paths([fields_of(pnr_stats(p, n), "pnr")], [fields_of(pnr_stats(p, n), "pnr")], "pnr")
    plain = log_pnr_path(p.size, p.sum(), n.sum(), (p * p).sum(), (n * n).sum(), (p * n).sum())
    assert float(b.value) == pytest.approx(float(plain.value), rel=1e-12)
    assert float(b.variance) == pytest.approx(float(plain.variance), rel=1e-9)


def test_the_baseline_is_reweighted_to_the_candidates_mix_brute_force() -> None:
    """m_b* = Σ_h w_h m_b,h with the candidate's weights; variances Σ_h w_h² s_h² / n_h, computed here
    from the raw sessions."""
    rng = np.random.default_rng(5)
    means = [3.0, 2.0, 1.0]
    base = [rng.gamma(2.0, m / 2.0, size) for m, size in zip(means, (400, 300, 200), strict=True)]
    cand = [rng.gamma(2.0, 0.9 * m / 2.0, size) for m, size in zip(means, (20, 60, 300), strict=True)]
    b, c = matched_paths([fields_of(dcg_stats(x), "dcg") for x in base],
                         [fields_of(dcg_stats(x), "dcg") for x in cand], "dcg")
    n_c = np.array([x.size for x in cand], dtype=float)
    w = n_c / n_c.sum()
    m_b = float(sum(wi * x.mean() for wi, x in zip(w, base, strict=True)))
    m_c = float(np.concatenate(cand).mean())
    var_b = sum(wi**2 * x.var(ddof=1) / x.size for wi, x in zip(w, base, strict=True))
    var_c = sum(wi**2 * x.var(ddof=1) / x.size for wi, x in zip(w, cand, strict=True))
    assert float(b.value) == pytest.approx(math.log(m_b), rel=1e-12)
    assert float(c.value) == pytest.approx(math.log(m_c), rel=1e-12)
    assert float(b.variance) == pytest.approx(var_b / m_b**2, rel=1e-9)
    assert float(c.variance) == pytest.approx(var_c / m_c**2, rel=1e-9)
    # the true effect is −10% in every stratum: matched finds it, the pooled baseline does not
    assert math.expm1(float(c.value - b.value)) == pytest.approx(-0.10, abs=0.04)
    pooled = np.concatenate(base).mean()
    assert m_c / pooled - 1 < -0.25


def test_strata_only_one_arm_has_are_left_out_of_both() -> None:
    base = [fields_of(dcg_stats(np.array([2.0, 2.5, 1.5])), "dcg"), (0.0, 0.0, 0.0)]
    cand = [fields_of(dcg_stats(np.array([2.0, 2.2, 1.8])), "dcg"),
            fields_of(dcg_stats(np.array([9.0, 9.0, 8.0])), "dcg")]
    b, c = matched_paths(base, cand, "dcg")
    assert (float(b.n), float(c.n)) == (3.0, 3.0)
    assert float(c.value) == pytest.approx(math.log(2.0))


def test_the_matched_pnr_variance_matches_the_spread_of_simulated_estimates() -> None:
    """Two strata with different inversion rates, a candidate mix unlike the baseline's: the delta-method
    variance of the reweighted log PNR is the variance of its estimates over repeated samples."""
    rng = np.random.default_rng(9)
    sizes_b, sizes_c, rates = (300, 100), (50, 250), (0.1, 0.3)
    estimates, variances = [], []
    for _ in range(600):
        arms = []
        for sizes in (sizes_b, sizes_c):
            rows = []
            for size, rate in zip(sizes, rates, strict=True):
                inversions = rng.binomial(45, rng.beta(2, 2 * (1 - rate) / rate, size)).astype(float)
                rows.append(fields_of(pnr_stats(45.0 - inversions, inversions), "pnr"))
            arms.append(rows)
        b, _ = matched_paths(arms[0], arms[1], "pnr")
        estimates.append(float(b.value))
        variances.append(float(b.variance))
    assert np.var(estimates, ddof=1) == pytest.approx(np.mean(variances), rel=0.15)


# -- sticky verdicts ---------------------------------------------------------------------------------------
def path_of(estimate: list[float], lower: list[float], upper: list[float]) -> VerdictPath:
    e, lo, hi = (np.array(a, dtype=float) for a in (estimate, lower, upper))
    config = CanaryConfig()
    code = np.full(e.shape, INCONCLUSIVE, dtype=np.int8)
    code[(hi < 0) & (e <= -config.min_relative_drop)] = REGRESSION
    code[lo > -config.min_relative_drop] = PASS
    return VerdictPath(e, lo, hi, np.zeros(e.shape), code, np.isfinite(lo), np.zeros(e.shape, dtype=np.int64),
                       np.zeros(e.shape, dtype=np.int64))


def test_a_pass_once_reached_is_kept_while_the_current_interval_wanders() -> None:
    raw = path_of([0.0, 0.01, -0.02, 0.0], [-0.03, -0.015, -0.04, -0.025], [0.03, 0.035, 0.0, 0.025])
    assert raw.code.tolist() == [INCONCLUSIVE, PASS, INCONCLUSIVE, INCONCLUSIVE]
    sticky = sticky_path(raw, CanaryConfig())
    assert sticky.code.tolist() == [INCONCLUSIVE, PASS, PASS, PASS]
    assert sticky.lower.tolist() == [-0.03, -0.015, -0.015, -0.015]
    assert sticky.upper.tolist() == pytest.approx([0.03, 0.03, 0.0, 0.0])
    assert sticky.changes.tolist() == [0, 1, 1, 1]
    assert raw.code.tolist() != sticky.code.tolist()


def test_a_regression_holds_while_its_estimate_wanders_above_the_minimum_drop() -> None:
    raw = path_of([-0.06, -0.05, -0.015, -0.03], [-0.10, -0.08, -0.05, -0.06], [-0.02, -0.025, 0.02, -0.005])
    sticky = sticky_path(raw, CanaryConfig())
    assert raw.code.tolist() == [REGRESSION, REGRESSION, INCONCLUSIVE, REGRESSION]
    assert sticky.code.tolist() == [REGRESSION] * 4
    assert sticky.estimate.tolist() == pytest.approx([-0.06, -0.05, -0.025, -0.03])  # moved into the interval
    assert sticky.changes.tolist() == [1, 1, 1, 1]


def test_a_regression_is_final_even_when_later_proven_smaller_than_the_minimum() -> None:
    """The raw rule would pass the second look (its interval rules out a 2% drop); the sticky verdict
    keeps the regression, while its interval narrows as before."""
    raw = path_of([-0.05, -0.012], [-0.09, -0.019], [-0.011, -0.005])
    assert raw.code.tolist() == [REGRESSION, PASS]
    sticky = sticky_path(raw, CanaryConfig())
    assert sticky.code.tolist() == [REGRESSION, REGRESSION]
    assert sticky.lower.tolist() == [-0.09, -0.019] and sticky.changes.tolist() == [1, 1]


def test_a_reset_turns_a_pass_into_a_regression_but_never_a_regression_into_a_pass() -> None:
    """A candidate that breaks during the comparison is caught after a pass (the effect moved: the
    intersection restarts); a regression's comparison whose effect moves up keeps its regression."""
    broke = path_of([0.0, 0.0, -0.2], [-0.01, -0.015, -0.25], [0.01, 0.02, -0.15])
    assert sticky_path(broke, CanaryConfig()).code.tolist() == [PASS, PASS, REGRESSION]
    healed = path_of([-0.2, -0.2, 0.0, 0.0], [-0.25, -0.24, -0.01, -0.005], [-0.15, -0.16, 0.01, 0.004])
    assert raw_codes(healed) == [REGRESSION, REGRESSION, PASS, PASS]
    sticky = sticky_path(healed, CanaryConfig())
    assert sticky.code.tolist() == [REGRESSION] * 4
    assert sticky.resets.tolist() == [0, 0, 1, 1] and sticky.changes.tolist() == [1, 1, 1, 1]


def test_a_pass_is_lost_only_to_a_regression_across_a_reset() -> None:
    """Pass, then a look disjoint from the intersection (a reset) whose interval neither passes nor
    regresses (below 0, but the estimate a drop smaller than d): the pass holds, though the new segment's
    interval no longer rules out a drop of d; it gives way when the new segment reaches a regression."""
    raw = path_of([0.0, 0.0, -0.015, -0.012, -0.05],
                  [-0.01, -0.015, -0.03, -0.035, -0.08],
                  [0.01, 0.02, -0.012, 0.0, -0.02])
    assert raw_codes(raw) == [PASS, PASS, INCONCLUSIVE, INCONCLUSIVE, REGRESSION]
    sticky = sticky_path(raw, CanaryConfig())
    assert sticky.code.tolist() == [PASS, PASS, PASS, PASS, REGRESSION]
    assert sticky.resets.tolist() == [0, 0, 1, 1, 1]
    assert sticky.changes.tolist() == [1, 1, 1, 1, 2]
    # the new segment's intersection is shown, and it no longer rules out the drop: the pass is held
    assert sticky.lower.tolist() == pytest.approx([-0.01, -0.01, -0.03, -0.03, -0.03])
    assert sticky.upper.tolist() == pytest.approx([0.01, 0.01, -0.012, -0.012, -0.02])
    assert sticky.estimate.tolist() == pytest.approx([0.0, 0.0, -0.015, -0.012, -0.03])
    held = reason("pass", -0.012, -0.012, CanaryConfig(), " kept over 4 looks (restarted 1×)", -0.03)
    assert held == ("a drop of 2.0% or more was ruled out at an earlier look, and a pass is kept unless a "
                    "regression is proven; the 95% confidence sequence kept over 4 looks (restarted 1×) no "
                    "longer rules it out")
    assert reason("pass", 0.0, 0.01, CanaryConfig(), "", -0.01).endswith("rules out a drop of 2.0% or more")


def test_a_pass_held_across_resets_in_many_rows_at_once() -> None:
    """Rows are independent: the same looks in a 2-D path, one row passing then reset into an undecided
    segment (held), one reset into a regression (lost to it), one never passing (nothing to hold), one
    reset into a new pass (no change)."""
    estimate = [[0.0, -0.015, -0.012], [0.0, -0.2, -0.2], [0.0, -0.015, -0.012], [0.0, 0.05, 0.05]]
    lower = [[-0.01, -0.03, -0.035], [-0.01, -0.25, -0.24], [-0.03, -0.04, -0.035], [-0.01, 0.03, 0.02]]
    upper = [[0.01, -0.012, 0.0], [0.01, -0.15, -0.16], [0.03, 0.02, 0.01], [0.01, 0.07, 0.08]]
    rows = [path_of(e, lo, hi) for e, lo, hi in zip(estimate, lower, upper, strict=True)]
    stacked = VerdictPath(*(np.stack([getattr(r, f) for r in rows]) for f in VerdictPath.__dataclass_fields__))
    sticky = sticky_path(stacked, CanaryConfig())
    assert sticky.code.tolist() == [[PASS, PASS, PASS], [PASS, REGRESSION, REGRESSION],
                                    [INCONCLUSIVE, INCONCLUSIVE, INCONCLUSIVE], [PASS, PASS, PASS]]
    assert sticky.resets.tolist() == [[0, 1, 1], [0, 1, 1], [0, 0, 0], [0, 1, 1]]
    assert sticky.changes.tolist() == [[1, 1, 1], [1, 2, 2], [0, 0, 0], [1, 1, 1]]
    for r, row in enumerate(rows):  # the same as each row alone
        assert sticky_path(row, CanaryConfig()).code.tolist() == sticky.code[r].tolist()


def raw_codes(path: VerdictPath) -> list[int]:
    return [int(c) for c in path.code]


def test_an_interval_disjoint_from_the_intersection_restarts_it() -> None:
    raw = path_of([0.0, 0.0, -0.2, -0.2], [-0.01, -0.015, -0.25, -0.24], [0.01, 0.02, -0.15, -0.16])
    sticky = sticky_path(raw, CanaryConfig())
    assert sticky.code.tolist() == [PASS, PASS, REGRESSION, REGRESSION]
    assert sticky.resets.tolist() == [0, 0, 1, 1]
    assert sticky.lower.tolist() == pytest.approx([-0.01, -0.01, -0.25, -0.24])


def test_looks_before_min_sessions_take_no_part() -> None:
    raw = path_of([0.0, 0.0], [math.nan, -0.05], [math.nan, 0.05])
    sticky = sticky_path(raw, CanaryConfig())
    assert sticky.code.tolist() == [INCONCLUSIVE, INCONCLUSIVE]
    assert math.isnan(sticky.lower[0]) and sticky.lower[1] == -0.05


def test_sticky_aa_streams_never_lose_a_pass_and_keep_the_error_rate() -> None:
    """300 A/A streams, a look every 50 sessions per arm (a minimum drop of 5%, so that passes come
    within the 6,000 sessions): no pass is lost; false regressions ≤ α."""
    rng = np.random.default_rng(17)
    streams, looks, per = 300, 120, 50
    x = np.where(rng.random((streams, 2, looks * per)) < 0.3, 0.0, rng.gamma(1.2, 1.5, (streams, 2, looks * per)))
    sums = x.reshape(streams, 2, looks, per).sum(axis=3).cumsum(axis=2)
    squares = (x * x).reshape(streams, 2, looks, per).sum(axis=3).cumsum(axis=2)
    n = np.broadcast_to(per * np.arange(1, looks + 1, dtype=float), (streams, looks))
    config = CanaryConfig(min_relative_drop=0.05)
    raw = verdict_path(log_mean_path(n, sums[:, 0], squares[:, 0]), log_mean_path(n, sums[:, 1], squares[:, 1]),
                       config)
    sticky = sticky_path(raw, config)
    reached = np.maximum.accumulate(sticky.code == PASS, axis=1)
    assert ((sticky.code == PASS) | ~reached).all()  # never lost
    assert (raw.code == PASS).any(axis=1).mean() > 0.2  # and there were passes to lose ...
    lost = (np.maximum.accumulate(raw.code == PASS, axis=1) & (raw.code != PASS)).any(axis=1)
    assert lost.mean() > 0.1  # ... which the raw verdict did lose
    assert (sticky.code == REGRESSION).any(axis=1).mean() <= 0.05


# -- pairing by time strata ----------------------------------------------------------------------------
def day_night(rng: np.random.Generator, hours: range, per_hour: int, night: float, scale: float = 1.0
              ) -> dict[int, Stats]:
    """Sessions per hourly epoch; hours 0-5 of each day hold harder queries (mean × (1 − night))."""
    out = {}
    for h in hours:
        mean = 2.0 * scale * (1 - night if h % 24 < 6 else 1.0)
        out[h] = dcg_stats(np.where(rng.random(per_hour) < 0.25, 0.0, rng.gamma(2.0, mean / 1.5, per_hour)))
    return out


def test_a_night_deploy_is_compared_with_the_previous_rankers_night() -> None:
    rng = np.random.default_rng(21)
    before = day_night(rng, range(0, 27), 400, night=0.3)           # a full day, then to 03:00
    after = day_night(rng, range(27, 30), 400, night=0.3)           # 03:00-06:00 the next night, no change
    epochs = {h: {"tail|a|": s} for h, s in before.items()}
    for h, s in after.items():
        epochs[h] = {"tail|b|": s}
    history = History(HOUR, epochs)
    deploy = [Deploy("deploy", "b", 27 * HOUR, previous="a")]
    matched = comparisons(history, deploy, CanaryConfig(baseline_window=24 * HOUR))[0].verdict
    unmatched = comparisons(history, deploy, CanaryConfig(baseline_window=24 * HOUR, time_matched=False))[0].verdict
    assert unmatched.verdict == "regression" and unmatched.estimate < -0.15  # night against a whole day
    assert matched.verdict != "regression" and abs(matched.estimate) < 0.05
    assert matched.n_candidate == 1200 and matched.n_baseline == 1200  # hours 03-05 of the day before


def test_a_canary_whose_share_ramps_up_is_compared_hour_by_hour() -> None:
    """The canary's share grows through the day while the mix gets harder: pooled arms differ by the
    hours they cover (Simpson), matched arms do not."""
    rng = np.random.default_rng(22)
    epochs: dict[int, dict[str, Stats]] = {}
    for h in range(24):
        share = 0.05 + 0.45 * h / 23
        scale = 1.4 - 0.8 * h / 23
        control = day_night(rng, range(h, h + 1), round(800 * (1 - share)), 0.0, scale)[h]
        canary = day_night(rng, range(h, h + 1), round(800 * share), 0.0, scale)[h]
        epochs[h] = {"head|a|control": control, "head|b|canary": canary}
    history = History(HOUR, epochs, {("canary", "b"): (0.0, 24 * HOUR)})
    matched = comparisons(history, [], CanaryConfig())[0].verdict
    pooled = comparisons(history, [], CanaryConfig(time_matched=False, sticky=False))[0].verdict
    assert pooled.verdict == "regression" and pooled.estimate < -0.08
    assert abs(matched.estimate) < 0.04 and matched.verdict != "regression"


def test_a_verdict_reports_how_often_and_when_it_last_changed() -> None:
    rng = np.random.default_rng(23)
    epochs = {}
    for h in range(12):
        epochs[h] = {"tail|a|control": day_night(rng, range(h, h + 1), 600, 0.0)[h],
                     "tail|b|canary": day_night(rng, range(h, h + 1), 600, 0.0, scale=0.8)[h]}
    history = History(HOUR, epochs, {("canary", "b"): (0.0, 11.5 * HOUR)})
    verdict = comparisons(history, [], CanaryConfig())[0].verdict
    assert verdict.verdict == "regression" and verdict.changes == 1
    assert verdict.changed_at is not None and verdict.changed_at <= 11.5 * HOUR
    assert "kept over" in verdict.reason
