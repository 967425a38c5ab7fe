"""The verdict along a whole stream at once: :func:`.compare` vectorised over arrays of cumulative sums.

Element i of every input array is an arm's state after the i-th session (or look) of a stream
(cumulative field sums, e.g. ``np.cumsum``), so one call gives the verdict after *every* look, as
continuous monitoring sees it. Same formulas, same decision rule and the same results as
:func:`.compare` (the tests check it element by element); undefined values are NaN here instead of None.
The comparisons of :mod:`.pairing` run on it (a look per epoch of their period), and so do the benchmark
and the Monte-Carlo tests. Each look's interval is [lower end at α, upper end at α / 2]
(:func:`effect_verdict_path`): a pass reads the lower end, a regression the upper, and the pair's two
metrics share α for regressions (:class:`.CanaryConfig`, :mod:`.overall`).

:func:`sticky_path` keeps the **running intersection** of the confidence sequence over the looks: the
intersection of confidence sequences is itself one, end by end: θ lies below the running max of the
lower ends only if it lies below some look's lower end (probability ≤ α), above the running min of the
upper ends only if above some look's upper end (≤ α / 2). It only narrows, so a verdict it reaches is not
lost to the estimate wandering (see its docstring for the rule and the resets).

Verdict codes: 1 pass, 0 inconclusive, −1 regression (as exported by ``search_relevance_canary_verdict``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.sequential import half_widths, log_ratios

FloatArray = npt.NDArray[np.float64]
PASS, INCONCLUSIVE, REGRESSION = 1, 0, -1


ZERO_MEAN = 1e-12
"""A mean at or below this (per session: DCG, pairs) is 0, the float dust of sessions taken back and
re-added included; the smallest real contribution (one session's DCG or one pair) is far above it."""


@dataclass(frozen=True)
class LogPath:
    """Per element: sessions, log of the arm's metric and its variance (NaN where undefined); ``zero``:
    where the arm has sessions and its mean is 0 (its log is −∞: :mod:`.bounds` bounds it exactly);
    None: not known (no such element)."""

    n: FloatArray
    value: FloatArray
    variance: FloatArray
    zero: npt.NDArray[np.bool_] | None = None


@dataclass(frozen=True)
class VerdictPath:
    """Per look: estimate, confidence sequence, evidence and verdict code; ``eligible``: both arms have
    ``min_sessions`` and an interval exists; ``changes``: how often the code changed up to this look
    (starting from inconclusive); ``resets``: how often a sticky path restarted its intersection."""

    estimate: FloatArray
    lower: FloatArray
    upper: FloatArray
    evidence: FloatArray
    code: npt.NDArray[np.int8]
    eligible: npt.NDArray[np.bool_]
    changes: npt.NDArray[np.int64]
    resets: npt.NDArray[np.int64]


def _f(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64)


def log_mean_path(n: npt.ArrayLike, total: npt.ArrayLike, total_sq: npt.ArrayLike) -> LogPath:
    """log of the mean and s² / (n m²), as :func:`.estimates.log_statistic` for "dcg"."""
    n, total, total_sq = _f(n), _f(total), _f(total_sq)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = total / n
        ok = (n > 0) & (mean > ZERO_MEAN)
        value = np.where(ok, np.log(np.where(ok, mean, 1.0)), np.nan)
        spread = np.maximum(total_sq - n * mean * mean, 0.0) / (n - 1)
        variance = np.where((n >= 2) & ok, spread / (n * mean * mean), np.nan)
    return LogPath(n, value, variance, (n > 0) & ~(mean > ZERO_MEAN))


def log_pnr_path(n: npt.ArrayLike, positive: npt.ArrayLike, negative: npt.ArrayLike, pos_sq: npt.ArrayLike,
                 neg_sq: npt.ArrayLike, pos_neg: npt.ArrayLike) -> LogPath:
    """log(ΣP / ΣN) and its delta-method variance, as :func:`.estimates.log_statistic` for "pnr"."""
    n = _f(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        p, q = _f(positive) / n, _f(negative) / n
        ok = (n > 0) & (p > ZERO_MEAN) & (q > ZERO_MEAN)
        value = np.where(ok, np.log(np.where(ok, p, 1.0)) - np.log(np.where(ok, q, 1.0)), np.nan)
        s_pp = np.maximum(_f(pos_sq) - n * p * p, 0.0) / (n - 1)
        s_nn = np.maximum(_f(neg_sq) - n * q * q, 0.0) / (n - 1)
        s_pn = (_f(pos_neg) - n * p * q) / (n - 1)
        variance = (s_pp / (p * p) + s_nn / (q * q) - 2.0 * s_pn / (p * q)) / n
        variance = np.where(ok & (n >= 2), np.maximum(variance, 0.0), np.nan)
    return LogPath(n, value, variance)


def verdict_path(baseline: LogPath, candidate: LogPath, config: CanaryConfig) -> VerdictPath:
    """Estimate, confidence sequence, evidence and verdict code after every element (as :func:`.compare`)."""
    return effect_verdict_path(EffectPath.of(baseline, candidate), config)


def changes_of(code: npt.NDArray[np.int8]) -> npt.NDArray[np.int64]:
    """How often the code changed up to each look (along the last axis), starting from inconclusive."""
    before = np.concatenate([np.full((*code.shape[:-1], 1), INCONCLUSIVE, dtype=code.dtype),
                             code[..., :-1]], axis=-1)
    return np.cumsum(code != before, axis=-1, dtype=np.int64)


def _sticky_segment(estimate: FloatArray, lower: FloatArray, upper: FloatArray,
                    eligible: npt.NDArray[np.bool_], drop: float
                    ) -> tuple[FloatArray, FloatArray, FloatArray, npt.NDArray[np.int8], int | None]:
    """The sticky rule on one row's looks from a segment's start; the index (relative) of its first
    conflict (an empty intersection), where the next segment starts, or None."""
    lo = np.fmax.accumulate(np.where(eligible, lower, -np.inf))
    hi = np.fmin.accumulate(np.where(eligible, upper, np.inf))
    conflict = np.flatnonzero(lo > hi)
    end = eligible.size if conflict.size == 0 else int(conflict[0])
    lo, hi, eligible, current = lo[:end], hi[:end], eligible[:end], estimate[:end]
    kept = np.where(eligible, np.clip(current, lo, hi), current)
    passed = eligible & (lo > -drop)
    reached = np.logical_or.accumulate(eligible & (hi < 0.0) & (kept <= -drop))
    code = np.full(end, INCONCLUSIVE, dtype=np.int8)
    code[reached & eligible] = REGRESSION
    code[passed] = PASS
    return (kept, np.where(np.isfinite(lo), lo, np.nan), np.where(np.isfinite(hi), hi, np.nan), code,
            None if conflict.size == 0 else end)


def sticky_path(path: VerdictPath, config: CanaryConfig) -> VerdictPath:
    """The verdict on the running intersection [max lower, min upper] of the confidence sequence over the
    eligible looks (along the last axis). The guarantee: **a pass is never lost except to a
    regression, and a regression is final.**

    * **pass** once the intersection rules out a drop of d (max lower > −d); then held until a
      regression is reached: within a segment (below) the intersection only narrows, so its lower end
      stays above −d, and after a reset the pass holds while the new segment is inconclusive or passes,
      and gives way only when the new segment reaches a regression (the candidate broke during the
      comparison);
    * **regression** once the intersection lies below 0 with the estimate (the current one, moved into
      the intersection) at a drop of d or more; then **final** for the period: neither an estimate
      wandering back above −d, nor an intersection that later proves the drop smaller than d, nor a
      reset turns it into a pass. An alert that fired is never recanted by the same comparison (a false
      regression is a probability-α / 2 event per metric; recanting it flipped 0.1-0.2% of A/A paired
      comparisons); a new ``canary_start`` or ``deploy`` starts a new period;
    * **inconclusive** otherwise.

    **Reset**: when a look's interval is disjoint from the intersection so far (the data changed under
    it, or the effect itself moved; with a constant effect some look's interval missed it, below a lower
    end (probability ≤ α) or above an upper end (≤ α / 2): a coverage failure), the intersection restarts
    at that look (a new segment) and the new segment is decided afresh: its regression replaces a pass
    reached before; its pass or inconclusive leaves a pass reached before as it is (a reset does not
    take a pass back: before this rule an A/A comparison went pass → inconclusive → pass after a reset);
    a regression reached before stays. ``resets`` counts the restarts. Looks before an arm has
    ``min_sessions`` take no part. ``estimate``, ``lower`` and ``upper`` become the sticky ones, the
    current segment's intersection (after a regression they go on narrowing, and may come to rule out a
    drop of d: the verdict stays; after a reset under a pass held from before, they may no longer rule it
    out: the verdict stays too); ``evidence`` stays the current look's. ``changes`` counts the changes of
    the resulting verdict.
    """
    shape = path.code.shape
    looks = shape[-1] if shape else 1
    estimate, lower, upper = (np.asarray(a, dtype=np.float64).reshape(-1, looks)
                              for a in (path.estimate, path.lower, path.upper))
    eligible = np.asarray(path.eligible, dtype=bool).reshape(-1, looks)
    kept, lo, hi = (np.empty(estimate.shape) for _ in range(3))
    code = np.empty(estimate.shape, dtype=np.int8)
    resets = np.zeros(estimate.shape, dtype=np.int64)
    for r in range(estimate.shape[0]):
        start: int | None = 0
        count = 0
        while start is not None:
            part = slice(start, None)
            values = _sticky_segment(estimate[r, part], lower[r, part], upper[r, part], eligible[r, part],
                                     config.min_relative_drop)
            following = values[4]
            end = looks if following is None else start + following
            kept[r, start:end], lo[r, start:end], hi[r, start:end], code[r, start:end] = values[:4]
            resets[r, start:end] = count
            count += 1
            start = None if following is None else end
        hit = np.flatnonzero(code[r] == REGRESSION)
        first = int(hit[0]) if hit.size else looks
        passed = np.flatnonzero(code[r, :first] == PASS)
        if passed.size:  # a pass holds until the first regression, across resets
            code[r, passed[0]:first] = PASS
        code[r, first:] = REGRESSION  # final: held to the end of the period
    sticky = code.reshape(shape)
    return VerdictPath(kept.reshape(shape), lo.reshape(shape), hi.reshape(shape), path.evidence, sticky,
                       path.eligible, changes_of(sticky), resets.reshape(shape))


@dataclass(frozen=True)
class EffectPath:
    """Per look: the log ratio θ̂ of the candidate's metric to the (time-matched) baseline's, its variance
    and the sessions each arm contributes (NaN where undefined). ``lower_bound``, ``upper_bound``: where θ̂
    is undefined because an arm's mean is 0, the exact bounds of θ (:mod:`.bounds`; ±inf for an open
    end, NaN where there are none); None: none anywhere."""

    theta: FloatArray
    variance: FloatArray
    n_baseline: FloatArray
    n_candidate: FloatArray
    lower_bound: FloatArray | None = None
    upper_bound: FloatArray | None = None
    slack: FloatArray | None = None
    """Per look, how much θ may still move as grades not yet given come (log scale: > 0 up, < 0 down;
    :func:`.paired.footing_slack`); the interval is widened by it on its side. None: none."""

    @staticmethod
    def of(baseline: LogPath, candidate: LogPath) -> EffectPath:
        return EffectPath(candidate.value - baseline.value, baseline.variance + candidate.variance,
                          baseline.n, candidate.n)


def effect_verdict_path(effect: EffectPath, config: CanaryConfig) -> VerdictPath:
    """Estimate, confidence sequence, evidence and verdict code after every look (the rule of
    :func:`.compare`): where θ̂ and its variance are defined, the normal-mixture sequence, its lower end at
    ``config.sequence_alpha`` (what a pass reads) and its upper end at ``config.regression_sequence_alpha``
    (what a regression reads: α / 2, as the pair's two metrics share α for regressions, see
    :class:`.CanaryConfig`); where they are not because an arm's mean is 0, the exact bounds the effect
    carries, at the same two levels (:func:`.bounds.with_bounds`; the estimate is then −100% for a
    candidate at 0, undefined for a baseline at 0).

    * **regression**: upper < 0 and estimate ≤ −d (d = ``min_relative_drop``), so a false regression
      needs the truth above the upper end at some look: probability ≤ α / 2;
    * **pass**: lower > −d, so a false pass needs the truth below the lower end: probability ≤ α;
    * **inconclusive** otherwise, and wherever an arm has fewer than ``min_sessions`` or there is no
      interval.

    ``evidence`` is log Λ(0) of the mixture, as before: ≥ log(1 / ``sequence_alpha``) when the lower end
    is above 0, ≥ log(1 / ``regression_sequence_alpha``) when the upper end is below 0. With a ``slack``
    (the grades one list still misses more than the other: a paired comparison's) each end is moved by it
    on its side: a regression is not called on documents that may yet prove relevant."""
    theta, v = _f(effect.theta), _f(effect.variance)
    usable = np.isfinite(theta) & np.isfinite(v) & (v > 0)
    variance = np.where(usable, v, np.nan)
    below = half_widths(variance, config.mixture, config.sequence_alpha)
    above = half_widths(variance, config.mixture, config.regression_sequence_alpha)
    slack = np.zeros(theta.shape)
    if effect.slack is not None:  # grades still missing may move θ: the interval widened on that side
        slack = np.where(np.isfinite(_f(effect.slack)), _f(effect.slack), 0.0)
    below, above = below - np.minimum(slack, 0.0), above + np.maximum(slack, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        evidence = np.where(usable, log_ratios(np.where(usable, theta, 0.0), v, config.mixture), np.nan)
        estimate = np.where(np.isposinf(theta), np.nan, np.expm1(theta))
        lower = np.where(usable, np.expm1(theta - below), np.nan)
        upper = np.where(usable, np.expm1(theta + above), np.nan)
    bounded = np.zeros(theta.shape, dtype=bool)
    if effect.lower_bound is not None and effect.upper_bound is not None:
        lo, hi = _f(effect.lower_bound), _f(effect.upper_bound)
        bounded = ~usable & ~np.isnan(lo) & ~np.isnan(hi) & (np.isfinite(lo) | np.isfinite(hi))
        with np.errstate(over="ignore", invalid="ignore"):
            lower = np.where(bounded, np.expm1(lo + np.minimum(slack, 0.0)), lower)
            upper = np.where(bounded, np.expm1(hi + np.maximum(slack, 0.0)), upper)
        # open below: the candidate's statistic is 0, a drop of 100%; open above: no finite estimate
        estimate = np.where(bounded, np.where(np.isneginf(lo), -1.0, np.nan), estimate)
    enough = ((_f(effect.n_baseline) >= config.min_sessions) & (_f(effect.n_candidate) >= config.min_sessions)
              & (usable | bounded))
    drop = config.min_relative_drop
    code = np.full(theta.shape, INCONCLUSIVE, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        code[enough & (upper < 0.0) & (estimate <= -drop)] = REGRESSION
        code[enough & (lower > -drop)] = PASS
    return VerdictPath(estimate, lower, upper, evidence, code, enough, changes_of(code),
                       np.zeros(code.shape, dtype=np.int64))
