"""The verdict along a whole stream at once: :func:`.compare` vectorised over arrays of cumulative sums.

Element i of every input array is an arm's state after the i-th session of a stream (cumulative field
sums, e.g. ``np.cumsum``), so one call gives the verdict after *every* session, as continuous monitoring
sees it. Same formulas, same decision rule and the same results as :func:`.compare` (the tests check it
element by element); undefined values are NaN here instead of None. Used by the benchmark, the A/A
Monte-Carlo test and for plotting a canary's confidence sequence over time.

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
    estimate: FloatArray
    lower: FloatArray
    upper: FloatArray
    evidence: FloatArray
    code: npt.NDArray[np.int8]


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
    return VerdictPath(estimate, lower, upper, evidence, code)
