"""The paired (shadow) comparison's verdict along the looks: the shadow list against the served list of the
same sessions, with the two-arm comparison's confidence sequence, rules, thresholds and levels: a
regression is decided on the upper end at ``CanaryConfig.regression_alpha`` (α / 2: the pair's two metrics
share α for regressions), a pass on the lower end at α.

The effect θ̂ and its variance are :mod:`.paired`'s; the verdict path is
:func:`.verdict_paths.effect_verdict_path` made sticky by :func:`.verdict_paths.sticky_path`
(``CanaryConfig.sticky``), the same decision rule as every two-arm comparison, so the result is a
:class:`.verdict.Verdict` like theirs. No time strata and no adjustment for query difficulty: both
lists of a session share its time and its query. Edge cases:

* **a list's mean at 0** (a shadow ranker returning nothing relevant: every shadow DCG 0): θ̂ is undefined,
  so θ is bounded exactly as :mod:`.bounds` bounds an arm at 0: each list's mean (PNR: each of its four
  pair sums) gets its own interval, [0, B (1 − α^(1/n))] for a mean at 0, its normal-mixture sequence
  otherwise, split among them (θ's lower end at ``bound_alpha``, its upper end at
  ``regression_bound_alpha``), and θ's interval is their sum. The union bound needs no
  independence, so it holds for the paired lists too: a shadow at 0 is a regression at the first look
  with ``min_sessions``; both lists at 0 have no relative change (inconclusive);
* **identical lists** (every session's shadow value equals its served one: Σ(y − x)² = 0; PNR: both pair
  counts): the variance is 0 and the sequence has no width, so θ is bounded exactly instead: |y − x| ≤ B
  and n differences all 0 bound the mean |y − x| below U = B (1 − α^(1/n)) (the bound of :mod:`.bounds`
  for values in [0, B]), so |ȳ − x̄| ≤ U and θ = log(ȳ / x̄) ∈ [log(1 − U/x̄_low), log(1 + U/x̄_low)], with
  x̄_low the served mean's lower confidence bound (for θ's lower end each at ``bound_alpha`` / 2, for its
  upper end at ``regression_bound_alpha`` / 2, split among PNR's two ratios). The estimate is the
  observed 0 and the verdict passes once U is small enough (≈ 2,100 sessions for head DCG@40 at a mean of
  2.2); it can never be a regression;
* **n < 2**, or a variance of 0 without identical lists (every shadow value proportional to its served
  one): no interval, inconclusive.

PNR is guarded by the pairs of different grades per session (:func:`.metric_paths.guarded`): a pass needs
the shadow lists not to have 2% fewer of them either; a shadow without any while the served lists have
them is a regression.

>>> from monitor.core.canary.paired import paired_stats
>>> sessions = [paired_stats(2.0 + i % 3, 0.0, (5.0, 1.0), (0.0, 0.0)) for i in range(300)]
>>> verdict = judge_paired({0: {f: sum(s[f] for s in sessions) for f in sessions[0]}}, CanaryConfig(), "dcg")
>>> verdict.verdict, verdict.estimate  # a shadow ranker returning nothing relevant
('regression', -1.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from monitor.core.canary.bounds import interval, with_bounds, zero_mean_upper
from monitor.core.canary.config import CanaryConfig
from monitor.core.canary.judging import Judged, verdict_of
from monitor.core.canary.metric_paths import guarded
from monitor.core.canary.paired import WEIGHTS, Moments, footing_slack, log_ratio, sums_of
from monitor.core.canary.sequential import Mixture
from monitor.core.canary.verdict import Verdict
from monitor.core.canary.verdict_paths import (
    EffectPath,
    FloatArray,
    LogPath,
    VerdictPath,
    effect_verdict_path,
    log_mean_path,
    sticky_path,
)
from monitor.core.stream.shadow import FOOTING_FIELDS

BoolArray = npt.NDArray[np.bool_]
IDENTICAL = 1e-12  # Σ(y − x)² at or below this share of Σx² + Σy²: float dust, the lists are identical
PAIRS = {"dcg": ((0, 1, 1.0),), "pnr": ((0, 2, 1.0), (1, 3, -1.0)), "pairs": ((0, 1, 1.0),)}
"""Per metric: (served value, its shadow value, sign in θ) of each paired ratio."""
NO_VARIANCE = ("no variance: fewer than two sessions, no variation, the shadow in proportion to the "
               "served list in every session, or sums without their second moments")


@dataclass(frozen=True)
class Paired:
    """One metric's paired comparison along the looks: the (sticky) verdict ``path``, the sessions ``n``,
    ``identical`` (every session's lists scored the same) and the served and shadow lists' components as
    log means (DCG: one each; PNR: concordant, discordant), for the reason of a missing interval."""

    path: VerdictPath
    n: FloatArray
    identical: BoolArray
    served: tuple[LogPath, ...]
    shadow: tuple[LogPath, ...]
    slack: FloatArray | None = None  # how far the grades still missing may move θ (log scale)


def _identical(m: Moments, metric: str) -> BoolArray:
    out = np.asarray(m.n, dtype=np.float64) > 0
    for x, y, _ in PAIRS[metric]:
        xx, yy, xy = m.products[..., x, x], m.products[..., y, y], m.products[..., x, y]
        with np.errstate(invalid="ignore"):
            out = out & (xx - 2.0 * xy + yy <= IDENTICAL * (xx + yy))
    return out


def _identical_ends(m: Moments, pairs: Sequence[tuple[int, int, float]], served: Sequence[LogPath],
                    bound: float, mixture: Mixture, each: float) -> tuple[FloatArray, FloatArray]:
    """θ's interval for identical lists with every U and x̄_low at level ``each`` (module docstring)."""
    shape = np.shape(m.n)
    lower, upper = np.zeros(shape), np.zeros(shape)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        log_u = zero_mean_upper(m.n, bound, each)
        for (_, _, sign), path in zip(pairs, served, strict=True):
            low, _ = interval(path, None, mixture, each)
            share = np.exp(log_u - low)  # U / x̄_low
            lo = np.where(share < 1.0, np.log1p(-np.minimum(share, 1.0)), -np.inf)
            hi = np.log1p(share)
            lower = lower + (lo if sign > 0 else -hi)
            upper = upper + (hi if sign > 0 else -lo)
    return lower, upper


def _identical_bounds(m: Moments, metric: str, served: Sequence[LogPath], bound: float | None,
                      config: CanaryConfig) -> tuple[FloatArray, FloatArray]:
    """θ's interval for identical lists (module docstring): its lower end at ``config.bound_alpha``, its
    upper end at ``config.regression_bound_alpha``, each split among the bounds it rests on (a U and an
    x̄_low per ratio); NaN without a bound or a served interval."""
    shape = np.shape(m.n)
    if bound is None:
        return np.full(shape, np.nan), np.full(shape, np.nan)
    pairs = PAIRS[metric]
    lower, _ = _identical_ends(m, pairs, served, bound, config.mixture, config.bound_alpha / (2 * len(pairs)))
    _, upper = _identical_ends(m, pairs, served, bound, config.mixture,
                               config.regression_bound_alpha / (2 * len(pairs)))
    return lower, upper


def _effect(m: Moments, metric: str, config: CanaryConfig, bound: float | None
            ) -> tuple[EffectPath, BoolArray, tuple[LogPath, ...], tuple[LogPath, ...]]:
    theta, variance = log_ratio(m, WEIGHTS[metric])
    pairs = PAIRS[metric]
    served = tuple(log_mean_path(*m.part(x)) for x, _, _ in pairs)
    shadow = tuple(log_mean_path(*m.part(y)) for _, y, _ in pairs)
    n = np.asarray(m.n, dtype=np.float64)
    effect = with_bounds(EffectPath(theta, variance, n, n),
                         [(path, bound, sign) for path, (_, _, sign) in zip(served, pairs, strict=True)],
                         [(path, bound, sign) for path, (_, _, sign) in zip(shadow, pairs, strict=True)],
                         config)
    same = _identical(m, metric) & np.isfinite(theta)
    if np.any(same):
        low, high = _identical_bounds(m, metric, served, bound, config)
        effect = EffectPath(theta, np.where(same, np.nan, variance), n, n,
                            np.where(same, low, _or_nan(effect.lower_bound, n)),
                            np.where(same, high, _or_nan(effect.upper_bound, n)))
    return effect, same, served, shadow


def _or_nan(values: FloatArray | None, like: FloatArray) -> FloatArray:
    return np.full(np.shape(like), np.nan) if values is None else values


def _decide(effect: EffectPath, same: BoolArray, config: CanaryConfig) -> VerdictPath:
    """The verdict path, the estimate of identical lists being their observed θ̂ (0), sticky with
    ``config.sticky``."""
    path = effect_verdict_path(effect, config)
    path = replace(path, estimate=np.where(same, np.expm1(effect.theta), path.estimate))
    return sticky_path(path, config) if config.sticky else path


def paired_path(sums: npt.ArrayLike, metric: str, config: CanaryConfig, bound: float | None,
                footing: npt.ArrayLike | None = None) -> Paired:
    """The paired verdict along the looks from cumulative sums (..., looks, fields), fields in the order of
    :data:`.paired.DCG_FIELDS` ("dcg") or :data:`.paired.PNR_FIELDS` ("pnr"); ``bound``: the largest DCG@k
    (DCG) or pair count (PNR) of a session (None: no exact bounds); ``footing``: the cumulative footing
    sums (..., looks, 4) (:data:`~monitor.core.stream.shadow.FOOTING_FIELDS`): DCG's interval is widened by
    what the documents one list lacks grades for more than the other could change
    (:func:`.paired.footing_slack`; PNR counts pairs among graded documents only and needs none)."""
    if metric not in ("dcg", "pnr"):
        raise ValueError(f"metric: {metric!r} is not one of dcg, pnr")
    m = Moments.of(sums, metric)
    effect, same, served, shadow = _effect(m, metric, config, bound)
    slack = np.zeros(np.shape(m.n))
    if metric == "dcg" and footing is not None:
        slack = footing_slack(m.sums[..., 0], m.sums[..., 1], footing)
        effect = replace(effect, slack=slack)
    path = _decide(effect, same, config)
    if metric == "pnr":
        pairs = Moments.of(sums, "pairs")
        guard_effect, guard_same, (pairs_x,), (pairs_y,) = _effect(pairs, "pairs", config, bound)
        guard = _decide(guard_effect, guard_same, config)
        none = np.zeros(np.shape(m.n), dtype=bool)
        empty = (none if pairs_y.zero is None else pairs_y.zero) & ~(none if pairs_x.zero is None
                                                                     else pairs_x.zero)
        path, _ = guarded(path, guard, empty)
    return Paired(path, np.asarray(m.n, dtype=np.float64), same, served, shadow, slack)


def _problem(found: Paired, metric: str, has_bound: bool) -> str:
    """Why the last look has no interval (enough sessions aside)."""
    def last_zero(path: LogPath) -> bool:
        return path.zero is not None and bool(np.atleast_1d(path.zero)[-1])

    if float(np.atleast_1d(found.n)[-1]) == 0:
        return "no paired sessions"
    what = "mean DCG" if metric == "dcg" else "concordant or discordant pairs per session"
    served, shadow = any(map(last_zero, found.served)), any(map(last_zero, found.shadow))
    if served and shadow:
        return f"both lists' {what} at 0: no relative change"
    if (served or shadow) and not has_bound:
        return (f"{'served' if served else 'shadow'} list: {what} at 0, and the bucket has no bound of a "
                "session's value to bound it with")
    if bool(np.atleast_1d(found.identical)[-1]) and not has_bound:
        return "the lists scored the same in every session, and the bucket has no bound to bound them with"
    return NO_VARIANCE


def _looks(epochs: Mapping[int, Mapping[str, float]], metric: str,
           looks: Sequence[int] | None) -> tuple[list[int], FloatArray, FloatArray]:
    """The looks' epochs, and per look the cumulative sums ``metric`` reads and the footing sums."""
    indices = sorted(epochs) if looks is None else sorted(looks)
    if not indices:
        indices = [0]
    width = len(sums_of({}, metric))
    out, footing = np.zeros((len(indices), width)), np.zeros((len(indices), len(FOOTING_FIELDS)))
    for e, stats in epochs.items():
        at = int(np.searchsorted(indices, e))
        if at < len(indices):
            out[at] += np.asarray(sums_of(stats, metric), dtype=np.float64)
            footing[at] += [stats.get(f, 0.0) for f in FOOTING_FIELDS]
    return indices, np.cumsum(out, axis=0), np.cumsum(footing, axis=0)


def _slice(path: VerdictPath, end: int) -> VerdictPath:
    return VerdictPath(*(np.atleast_1d(getattr(path, f))[:end] for f in VerdictPath.__dataclass_fields__))


def _head(path: LogPath, end: int) -> LogPath:
    return LogPath(np.atleast_1d(path.n)[:end], np.atleast_1d(path.value)[:end],
                   np.atleast_1d(path.variance)[:end],
                   None if path.zero is None else np.atleast_1d(path.zero)[:end])


def _bound(config: CanaryConfig, metric: str, bucket: str) -> float | None:
    table = config.dcg_bound if metric == "dcg" else config.pairs_bound
    return table.get(bucket, max(table.values(), default=None))


def _verdict_at(found: Paired, end: int, indices: Sequence[int], metric: str, has_bound: bool,
                config: CanaryConfig, width: float, latest: float) -> Verdict:
    """The verdict after the first ``end`` looks of ``found``."""
    head = Paired(_slice(found.path, end), np.atleast_1d(found.n)[:end], np.atleast_1d(found.identical)[:end],
                  tuple(_head(p, end) for p in found.served), tuple(_head(p, end) for p in found.shadow))
    note = ("the shadow list scored the same as the served one in every session: bounded exactly"
            if bool(head.identical[-1]) else "")
    slack = 0.0 if found.slack is None else float(np.atleast_1d(found.slack)[:end][-1])
    if abs(slack) >= 0.001:
        whose = "the shadow lists" if slack > 0 else "the served lists"
        note = (f"{note}; " if note else "") + (
            f"{whose} show more documents without a grade yet (grades in flight), which could move the "
            f"change by {math.expm1(slack):+.1%} once graded: the interval allows for it")
    judged = Judged(head.path, head.n, head.n, note, _problem(head, metric, has_bound))
    total = round(float(head.n[-1]))
    return verdict_of(judged, indices[:end], width, latest, config, total, total)


def paired_verdict_path(epochs: Mapping[int, Mapping[str, float]], config: CanaryConfig, metric: str,
                        bucket: str = "", looks: Sequence[int] | None = None, width: float = 1.0,
                        latest: float = math.inf) -> list[Verdict]:
    """The paired verdict at each look, one per epoch (``looks``: which, sorted; default every epoch of
    ``epochs``, epoch → paired sums; an epoch enters at the first look at or after it, none after the
    last): the sticky :class:`.verdict.Verdict` a look then gives. ``bucket`` picks the bound of a
    session's DCG or pairs (:mod:`.bounds`); ``width`` (an epoch's seconds) and ``latest`` (the last event
    time) date a change, as in :func:`.judging.judge`."""
    indices, sums, footing = _looks(epochs, metric, looks)
    bound = _bound(config, metric, bucket)
    found = paired_path(sums, metric, config, bound, footing)
    return [_verdict_at(found, end, indices, metric, bound is not None, config, width, latest)
            for end in range(1, len(indices) + 1)]


def judge_paired(epochs: Mapping[int, Mapping[str, float]], config: CanaryConfig, metric: str,
                 bucket: str = "", looks: Sequence[int] | None = None, width: float = 1.0,
                 latest: float = math.inf) -> Verdict:
    """The paired verdict of the shadow lists against the served ones on ``metric`` at the last look
    (:func:`paired_verdict_path`)."""
    indices, sums, footing = _looks(epochs, metric, looks)
    bound = _bound(config, metric, bucket)
    found = paired_path(sums, metric, config, bound, footing)
    return _verdict_at(found, len(indices), indices, metric, bound is not None, config, width, latest)
