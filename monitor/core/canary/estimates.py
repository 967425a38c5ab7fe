"""The log of one arm's statistic and its delta-method variance, from flat Stats (field sums).

Both metrics are tested on the log scale, where a relative change is a difference (log ratio
θ = log m_candidate − log m_baseline, relative change e^θ − 1) and the normal approximation is better.

DCG (mean of per-session DCG@k x₁..xₙ; fields ``sessions``, ``dcg``, ``dcg_sq``, read as a
:class:`~monitor.core.aggregates.Mean`):

    m = Σx / n,   s² = (Σx² − n m²) / (n − 1),   Var(log m) ≈ s² / (n m²)

PNR (ratio of summed positive to negative pairs; per session P = concordant + grade_tied, N = discordant;
fields ``concordant``, ``grade_tied``, ``discordant``, ``pnr_pos_sq`` = ΣP², ``pnr_neg_sq`` = ΣN²,
``pnr_pos_neg`` = ΣPN). With P̄ = ΣP/n and N̄ = ΣN/n, PNR = P̄ / N̄ and by the delta method for a ratio of
means (e.g. Deng, Knoblich & Lu 2018, "Applying the delta method in metric analytics", KDD):

    Var(log P̄ − log N̄) ≈ (1/n) (s_PP / P̄² + s_NN / N̄² − 2 s_PN / (P̄ N̄))

with the sample (co)variances s_PP = (ΣP² − n P̄²)/(n − 1), s_NN, s_PN = (ΣPN − n P̄ N̄)/(n − 1).

A statistic whose log is undefined (no sessions, mean DCG 0, no inversions: PNR = +Inf) has no value;
with fewer than two sessions, or without the second-moment fields, it has no variance.

>>> e = log_statistic({"sessions": 4, "dcg": 8.0, "dcg_sq": 20.0}, "dcg")
>>> round(e.value, 4), round(e.variance, 4)  # log 2; s² = 4/3, Var = (4/3) / (4 · 4)
(0.6931, 0.0833)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from monitor.core.aggregates import Mean

METRICS = ("dcg", "pnr")


@dataclass(frozen=True)
class LogStatistic:
    """``value``: log of the arm's metric (None: undefined); ``variance``: of that log (None: unknown);
    ``problem``: why a value or variance is missing (empty when both are there)."""

    n: int
    value: float | None
    variance: float | None
    problem: str = ""


def _sessions(stats: Mapping[str, float]) -> int:
    n = round(stats.get("sessions", 0.0))
    if n < 0:
        raise ValueError(f"sessions: must be ≥ 0, got {stats.get('sessions')!r}")
    return n


def _log_mean(stats: Mapping[str, float], n: int) -> LogStatistic:
    dcg = Mean(n, stats.get("dcg", 0.0), stats.get("dcg_sq", 0.0))
    mean = dcg.get()
    if mean is None or mean <= 0.0:
        return LogStatistic(n, None, None, "mean DCG is 0, so a relative change is undefined")
    spread = dcg.variance() if "dcg_sq" in stats else None
    if spread is None:
        return LogStatistic(n, math.log(mean), None, "no variance (fewer than 2 sessions or no dcg_sq)")
    return LogStatistic(n, math.log(mean), spread / (n * mean * mean))


def _log_pnr(stats: Mapping[str, float], n: int) -> LogStatistic:
    positive = (stats.get("concordant", 0.0) + stats.get("grade_tied", 0.0)) / n
    negative = stats.get("discordant", 0.0) / n
    if negative <= 0.0:
        return LogStatistic(n, None, None, "no inversions: PNR is +Inf, a relative change is undefined")
    if positive <= 0.0:
        return LogStatistic(n, None, None, "no positive pairs: PNR is 0, a relative change is undefined")
    value = math.log(positive) - math.log(negative)
    moments = ("pnr_pos_sq", "pnr_neg_sq", "pnr_pos_neg")
    if n < 2 or any(name not in stats for name in moments):
        return LogStatistic(n, value, None, "no variance (fewer than 2 sessions or no pnr second moments)")
    s_pp = max(stats["pnr_pos_sq"] - n * positive * positive, 0.0) / (n - 1)
    s_nn = max(stats["pnr_neg_sq"] - n * negative * negative, 0.0) / (n - 1)
    s_pn = (stats["pnr_pos_neg"] - n * positive * negative) / (n - 1)
    variance = (s_pp / positive**2 + s_nn / negative**2 - 2.0 * s_pn / (positive * negative)) / n
    return LogStatistic(n, value, max(variance, 0.0))


def log_statistic(stats: Mapping[str, float], metric: str) -> LogStatistic:
    """log of the arm's mean DCG or PNR, with the delta-method variance of that log."""
    if metric not in METRICS:
        raise ValueError(f"metric: {metric!r} is not one of {', '.join(METRICS)}")
    n = _sessions(stats)
    if n == 0:
        return LogStatistic(0, None, None, "no sessions")
    return _log_mean(stats, n) if metric == "dcg" else _log_pnr(stats, n)
