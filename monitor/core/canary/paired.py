"""The paired (shadow) comparison's sums and estimate: each session scored twice, its served list x and the
candidate's shadow list y for the same request, and the log ratio of the paired means with its variance.

**Sums** (per session, :func:`paired_stats`; field sums that merge by addition like every stream
statistic): ``pair_n`` = 1; DCG@k of both lists, ``pair_x`` (served), ``pair_y`` (shadow), ``pair_xx``,
``pair_yy``, ``pair_xy``; the concordant and discordant pairs of both lists (grade-tied pairs left out, as
the two-arm verdict's PNR), ``pair_cx``, ``pair_dx`` (served), ``pair_cy``, ``pair_dy`` (shadow), and every
product of two of them, ``pair_cx_cx``, ``pair_cx_dx``, … ``pair_dy_dy`` (ten: :data:`PNR_FIELDS`).

**Estimate.** With k per-session values v (DCG: x, y; PNR: C_x, D_x, C_y, D_y), their means v̄ and sample
covariance S = (Σ v vᵀ − n v̄ v̄ᵀ) / (n − 1), the statistic is θ = Σ_j w_j log v̄_j and by the delta method

    Var(θ̂) ≈ ∇ᵀ S ∇ / n,   ∇_j = w_j / v̄_j

DCG, w = (−1, +1): θ = log(ȳ / x̄), Var ≈ (s_yy/ȳ² + s_xx/x̄² − 2 s_xy/(x̄ ȳ)) / n: the covariance of the
two lists of one session (the same query, the same judged documents) takes the query's share of the
variance out. PNR, w = (−1, +1, +1, −1): θ = log((C̄_y / D̄_y) / (C̄_x / D̄_x)), the covariances of all
four sums included. ``pairs`` (the guard of PNR: pairs of different grades per session, C + D, shadow over
served) is the same with v = (C_x + D_x, C_y + D_y).

Undefined where a mean is 0 (θ: NaN; :mod:`.paired_paths` bounds it exactly) or n < 1; no variance with
n < 2. A variance of 0 (the shadow scored the same as, or in proportion to, the served list in every
session) is 0 here, never a division by 0; :mod:`.paired_paths` says what it means for the verdict.

>>> s = [paired_stats(x, y, (4.0, 1.0), (4.0, 1.0)) for x, y in ((2.0, 1.9), (1.0, 0.9), (3.0, 2.7))]
>>> e = paired_estimate({f: sum(d[f] for d in s) for f in s[0]}, "dcg")
>>> round(e.value, 4), e.n  # log(5.5 / 6): the shadow is 8.3% lower
(-0.087, 3)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.canary.estimates import LogStatistic
from monitor.core.canary.verdict_paths import ZERO_MEAN, FloatArray
from monitor.core.stream.shadow import paired_fields

DCG_PARTS = ("x", "y")
PNR_PARTS = ("cx", "dx", "cy", "dy")
DCG_FIELDS = ("pair_n", "pair_x", "pair_y", "pair_xx", "pair_yy", "pair_xy")
PNR_PRODUCTS = tuple(f"pair_{a}_{b}" for i, a in enumerate(PNR_PARTS) for b in PNR_PARTS[i:])
PNR_FIELDS = ("pair_n", *(f"pair_{p}" for p in PNR_PARTS), *PNR_PRODUCTS)
FIELDS = (*DCG_FIELDS, *PNR_FIELDS[1:])
"""Every field a paired session contributes (what the stream adds)."""
WEIGHTS = {"dcg": (-1.0, 1.0), "pnr": (-1.0, 1.0, 1.0, -1.0), "pairs": (-1.0, 1.0)}
METRICS = ("dcg", "pnr")


def _value(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value)
                                                                             and value >= 0):
        raise ValueError(f"{name}: expected a finite number ≥ 0, got {value!r}")
    return float(value)


def paired_stats(served_dcg: float, shadow_dcg: float, served_pairs: tuple[float, float],
                 shadow_pairs: tuple[float, float]) -> dict[str, float]:
    """One session's contribution: its served and shadow DCG@k, and each list's (concordant, discordant)
    pair counts (grade-tied pairs left out), checked, as the stream adds them
    (:func:`~monitor.core.stream.shadow.paired_fields`); the fields are :data:`FIELDS`."""
    x, y = _value("served_dcg", served_dcg), _value("shadow_dcg", shadow_dcg)
    if len(served_pairs) != 2 or len(shadow_pairs) != 2:
        raise ValueError("served_pairs, shadow_pairs: expected (concordant, discordant)")
    served = (_value("served concordant", served_pairs[0]), _value("served discordant", served_pairs[1]))
    shadow = (_value("shadow concordant", shadow_pairs[0]), _value("shadow discordant", shadow_pairs[1]))
    return paired_fields(x, y, served, shadow)


def footing_slack(x: npt.ArrayLike, y: npt.ArrayLike, footing: npt.ArrayLike) -> FloatArray:
    """Per element, how much θ = log(ȳ / x̄) may move once the documents the two lists show without a grade
    are graded (issue 42), from the sums Σx, Σy and the footing sums (..., 4) in the order of
    :data:`~monitor.core.stream.shadow.FOOTING_FIELDS`: Σw_x, Σg_x, Σw_y, Σg_y (each list's discount mass of
    ranks without and with a grade). Each missing document is valued at what a graded one brings per unit
    of discount, ĝ = (Σx + Σy) / (Σg_x + Σg_y), so

        c = log((Σy + ĝ Σw_y) / (Σx + ĝ Σw_x)) − log(Σy / Σx):

    > 0 when the candidate's lists lack more for their DCG (Σw_y / Σy > Σw_x / Σx: documents nobody graded
    yet, their grades late), < 0 the reverse, small when both lack alike (a shift toward no change); 0
    where a sum is 0 (nothing to say).

    >>> round(float(footing_slack(100.0, 90.0, [0.0, 50.0, 5.0, 45.0])), 4)  # ĝ = 2: −10.5% may be 0
    0.1054
    """
    sx, sy = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    f = np.asarray(footing, dtype=np.float64)
    wx, gx, wy, gy = (f[..., i] for i in range(4))
    with np.errstate(divide="ignore", invalid="ignore"):
        g = (sx + sy) / (gx + gy)
        c = np.log((sy + g * wy) / (sx + g * wx)) - np.log(sy / sx)
    out: FloatArray = np.where((sx > 0) & (sy > 0) & (gx + gy > 0) & np.isfinite(c), c, 0.0)
    return out


def sums_of(stats: Mapping[str, float], metric: str) -> tuple[float, ...]:
    """The fields ``metric`` ("dcg" or "pnr") reads, in the order of :data:`DCG_FIELDS` or
    :data:`PNR_FIELDS`; a missing second moment of sums with sessions is NaN (no variance, not a wrong
    one)."""
    names = {"dcg": DCG_FIELDS, "pnr": PNR_FIELDS}.get(metric)
    if names is None:
        raise ValueError(f"metric: {metric!r} is not one of {', '.join(METRICS)}")
    first = set(names[: 1 + (2 if metric == "dcg" else 4)])
    sessions = stats.get("pair_n", 0.0)
    return tuple(stats.get(name, math.nan if name not in first and sessions else 0.0) for name in names)


@dataclass(frozen=True)
class Moments:
    """Per element (any leading axes): ``n`` sessions, ``sums`` Σv of k per-session values (..., k) and
    ``products`` Σ v vᵀ (..., k, k)."""

    n: FloatArray
    sums: FloatArray
    products: FloatArray

    @staticmethod
    def of(sums: npt.ArrayLike, metric: str) -> Moments:
        """From sums (..., fields) in the order of :data:`DCG_FIELDS` ("dcg") or :data:`PNR_FIELDS`
        ("pnr"); "pairs": PNR's fields read as the pairs of different grades (C + D) of each list."""
        a = np.asarray(sums, dtype=np.float64)
        if metric == "dcg":
            first, second = a[..., 1:3], a[..., 3:6]
            products = np.stack([np.stack([second[..., 0], second[..., 2]], axis=-1),
                                 np.stack([second[..., 2], second[..., 1]], axis=-1)], axis=-2)
            return Moments(a[..., 0], first, products)
        if metric not in ("pnr", "pairs"):
            raise ValueError(f"metric: {metric!r} is not one of dcg, pnr, pairs")
        k = len(PNR_PARTS)
        products = np.empty((*a.shape[:-1], k, k))
        column = 1 + k
        for i in range(k):
            for j in range(i, k):
                products[..., i, j] = products[..., j, i] = a[..., column]
                column += 1
        found = Moments(a[..., 0], a[..., 1:1 + k], products)
        return found.linear(np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])) if metric == "pairs" \
            else found

    def linear(self, matrix: npt.ArrayLike) -> Moments:
        """The moments of L v (``matrix`` L of shape (m, k))."""
        m = np.asarray(matrix, dtype=np.float64)
        return Moments(self.n, self.sums @ m.T, m @ self.products @ m.T)

    def part(self, j: int) -> tuple[FloatArray, FloatArray, FloatArray]:
        """n, Σv_j, Σv_j² of one value."""
        return self.n, self.sums[..., j], self.products[..., j, j]


def log_ratio(moments: Moments, weights: tuple[float, ...]) -> tuple[FloatArray, FloatArray]:
    """θ̂ = Σ w_j log v̄_j and its delta-method variance ∇ᵀ S ∇ / n (module docstring), per element: θ̂
    NaN where n < 1 or a mean is 0, the variance NaN there and where n < 2 (or a moment is NaN)."""
    n = np.asarray(moments.n, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = moments.sums / n[..., None]
        ok = (n > 0) & np.all(mean > ZERO_MEAN, axis=-1)
        safe = np.where(ok[..., None], mean, 1.0)
        theta = np.where(ok, np.log(safe) @ w, np.nan)
        cov = (moments.products - n[..., None, None] * safe[..., :, None] * safe[..., None, :]) / (
            n[..., None, None] - 1.0)
        gradient = w / safe
        variance = np.einsum("...i,...ij,...j->...", gradient, cov, gradient) / n
        variance = np.where(ok & (n >= 2) & np.isfinite(variance), np.maximum(variance, 0.0), np.nan)
    return np.asarray(theta, dtype=np.float64), np.asarray(variance, dtype=np.float64)


def paired_estimate(stats: Mapping[str, float], metric: str) -> LogStatistic:
    """θ̂ of the shadow against the served list on ``metric`` ("dcg", "pnr") from a session's or a merge's
    sums, with its delta-method variance (module docstring); ``problem`` says why either is missing."""
    sums = sums_of(stats, metric)
    n = round(sums[0])
    if n < 0:
        raise ValueError(f"pair_n: must be ≥ 0, got {sums[0]!r}")
    if n == 0:
        return LogStatistic(0, None, None, "no paired sessions")
    theta, variance = (float(a) for a in log_ratio(Moments.of(sums, metric), WEIGHTS[metric]))
    if not math.isfinite(theta):
        return LogStatistic(n, None, None, "a list's mean is 0, so a relative change is undefined")
    if not math.isfinite(variance):
        return LogStatistic(n, theta, None, "no variance (fewer than 2 sessions or no second moments)")
    return LogStatistic(n, theta, variance)
