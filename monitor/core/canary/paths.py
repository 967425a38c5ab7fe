"""The verdict along a whole stream at once: :func:`.compare` vectorised over arrays of cumulative sums.

Element i of every input array is an arm's state after the i-th session (or look) of a stream
(cumulative field sums, e.g. ``np.cumsum``), so one call gives the verdict after *every* look, as
continuous monitoring sees it. Same formulas, same decision rule and the same results as
:func:`.compare` (the tests check it element by element); undefined values are NaN here instead of None.
The comparisons of :mod:`.pairing` run on it (a look per epoch of their period), and so do the benchmark
and the Monte-Carlo tests.

:func:`sticky_path` keeps the **running intersection** of the confidence sequence over the looks: the
intersection of confidence sequences is itself one (it covers θ at every look whenever each of them
does, so with probability ≥ 1 − α), and it only narrows, so a verdict it reaches is not lost to the
estimate wandering (see its docstring for the rule and the resets).

Verdict codes: 1 pass, 0 inconclusive, −1 regression (as exported by ``search_relevance_canary_verdict``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.canary.config import CanaryConfig

FloatArray = npt.NDArray[np.float64]
PASS, INCONCLUSIVE, REGRESSION = 1, 0, -1


@dataclass(frozen=True)
class LogPath:
    """Per element: sessions, log of the arm's metric and its variance (NaN where undefined)."""

    n: FloatArray
    value: FloatArray
    variance: FloatArray


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
        value = np.where((n > 0) & (mean > 0), np.log(np.where(mean > 0, mean, 1.0)), np.nan)
        spread = np.maximum(total_sq - n * mean * mean, 0.0) / (n - 1)
        variance = np.where((n >= 2) & np.isfinite(value), spread / (n * mean * mean), np.nan)
    return LogPath(n, value, variance)


def log_pnr_path(n: npt.ArrayLike, positive: npt.ArrayLike, negative: npt.ArrayLike, pos_sq: npt.ArrayLike,
                 neg_sq: npt.ArrayLike, pos_neg: npt.ArrayLike) -> LogPath:
    """log(ΣP / ΣN) and its delta-method variance, as :func:`.estimates.log_statistic` for "pnr"."""
    n = _f(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        p, q = _f(positive) / n, _f(negative) / n
        ok = (n > 0) & (p > 0) & (q > 0)
        value = np.where(ok, np.log(np.where(ok, p, 1.0)) - np.log(np.where(ok, q, 1.0)), np.nan)
        s_pp = np.maximum(_f(pos_sq) - n * p * p, 0.0) / (n - 1)
        s_nn = np.maximum(_f(neg_sq) - n * q * q, 0.0) / (n - 1)
        s_pn = (_f(pos_neg) - n * p * q) / (n - 1)
        variance = (s_pp / (p * p) + s_nn / (q * q) - 2.0 * s_pn / (p * q)) / n
        variance = np.where(ok & (n >= 2), np.maximum(variance, 0.0), np.nan)
    return LogPath(n, value, variance)


def verdict_path(baseline: LogPath, candidate: LogPath, config: CanaryConfig) -> VerdictPath:
    """Estimate, confidence sequence, evidence and verdict code after every element (as :func:`.compare`)."""
    theta = candidate.value - baseline.value
    v = baseline.variance + candidate.variance
    tau2 = config.mixture_sd**2
    with np.errstate(divide="ignore", invalid="ignore"):
        usable = np.isfinite(v) & (v > 0)
        v = np.where(usable, v, np.nan)
        spread = v + tau2
        h = np.sqrt(v * spread / tau2 * (2.0 * np.log(1.0 / config.alpha) + np.log(spread / v)))
        evidence = 0.5 * np.log(v / spread) + tau2 * theta * theta / (2.0 * v * spread)
    estimate = np.expm1(theta)
    lower, upper = np.expm1(theta - h), np.expm1(theta + h)
    enough = (baseline.n >= config.min_sessions) & (candidate.n >= config.min_sessions) & usable
    drop = config.min_relative_drop
    code = np.full(theta.shape, INCONCLUSIVE, dtype=np.int8)
    code[enough & (upper < 0.0) & (estimate <= -drop)] = REGRESSION
    code[enough & (lower > -drop)] = PASS
    return VerdictPath(estimate, lower, upper, evidence, code, enough, changes_of(code),
                       np.zeros(code.shape, dtype=np.int64))


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
    eligible looks (along the last axis).

    * **pass** once the intersection rules out a drop of d (max lower > −d): it only narrows, so a pass
      is never lost;
    * **regression** once the intersection lies below 0 with the estimate (the current one, moved into
      the intersection) at a drop of d or more, and from then on while the intersection does not rule
      out a drop of d: an estimate wandering back above −d does not end it. A regression can still
      become a pass, when the intersection proves the drop smaller than d;
    * **inconclusive** otherwise.

    **Reset**: when a look's interval is disjoint from the intersection so far (the data changed under
    it, or the effect itself moved: a coverage failure of the whole family is a probability-α event),
    the intersection restarts at that look and the verdict is decided afresh from there; ``resets``
    counts it. Looks before an arm has ``min_sessions`` take no part. ``estimate``, ``lower`` and
    ``upper`` become the sticky ones; ``evidence`` stays the current look's.
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
    sticky = code.reshape(shape)
    return VerdictPath(kept.reshape(shape), lo.reshape(shape), hi.reshape(shape), path.evidence, sticky,
                       path.eligible, changes_of(sticky), resets.reshape(shape))


@dataclass(frozen=True)
class EffectPath:
    """Per look: the log ratio θ̂ of the candidate's metric to the (time-matched) baseline's, its variance
    and the sessions each arm contributes (NaN where undefined)."""

    theta: FloatArray
    variance: FloatArray
    n_baseline: FloatArray
    n_candidate: FloatArray

    @staticmethod
    def of(baseline: LogPath, candidate: LogPath) -> EffectPath:
        return EffectPath(candidate.value - baseline.value, baseline.variance + candidate.variance,
                          baseline.n, candidate.n)


def effect_verdict_path(effect: EffectPath, config: CanaryConfig) -> VerdictPath:
    """:func:`verdict_path` on an :class:`EffectPath` (the same decision rule)."""
    shape = np.shape(effect.theta)
    baseline = LogPath(_f(effect.n_baseline), np.zeros(shape), _f(effect.variance))
    candidate = LogPath(_f(effect.n_candidate), _f(effect.theta),
                        np.where(np.isfinite(effect.variance), 0.0, np.full(shape, np.nan)))
    return verdict_path(baseline, candidate, config)
