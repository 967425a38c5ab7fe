"""The vectorised numerics of :mod:`monitor.sim.world`: many sessions' ranked lists at once, their
DCG@k and PNR pair counts, the queries' traffic shares and their tilt by the hour, and the statistics of
a world and of drawn sessions. :meth:`monitor.sim.world.World.check_against_core` compares the measures
with :mod:`monitor.core`'s."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.sim.relevance import LEVEL_GAINS
from monitor.sim.world_settings import HOURS, WorldSettings

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

GAINS = np.asarray(LEVEL_GAINS, dtype=np.float64)


def ranked(levels: IntArray, effects: FloatArray, sign: float, settings: WorldSettings,
            rng: np.random.Generator, sessions: int) -> tuple[IntArray, FloatArray, BoolArray, IntArray]:
    """``sessions`` rankings of one query's pool per row of ``levels`` (queries, pool): shown grades,
    scores, which of the k slots hold a document and the documents' indices in the pool (shape (queries,
    sessions, min(k, pool)))."""
    q, size = levels.shape
    base = sign * settings.weight * levels + effects  # float64: no two documents tie in score
    noise = rng.standard_normal((q, sessions, size), dtype=np.float32)
    z = base[:, None, :] + settings.noise * noise.astype(np.float64)
    a = settings.available * settings.available_spread
    share = rng.beta(a, settings.available_spread - a, (q, sessions, 1)) if settings.available < 1 else 1.0
    present = rng.random((q, sessions, size), dtype=np.float32) < share
    scores = np.where(present, z, -np.inf)
    depth = min(settings.k, size)
    if depth < size:  # the top k, then their order (faster than sorting the whole pool)
        top = np.argpartition(-scores, depth - 1, axis=2)[:, :, :depth]
        inner = np.argsort(-np.take_along_axis(scores, top, axis=2), axis=2, kind="stable")
        order = np.take_along_axis(top, inner, axis=2)
    else:
        order = np.argsort(-scores, axis=2, kind="stable")
    shown_scores = np.take_along_axis(scores, order, axis=2)
    shown = np.take_along_axis(np.broadcast_to(levels[:, None, :], scores.shape), order, axis=2)
    filled = np.isfinite(shown_scores)
    return (np.where(filled, shown, 0).astype(np.int64), np.where(filled, shown_scores, 0.0), filled,
            order.astype(np.int64))


def with_new(levels: IntArray, effects: FloatArray, sign: float, settings: WorldSettings,
              rng: np.random.Generator, sessions: int) -> tuple[IntArray, FloatArray, BoolArray, IntArray]:
    """The candidate ranker's sessions (module docstring): ``levels`` and ``effects`` hold the pool then
    the new documents (queries, pool + new). Its best f − r pool documents (f: the slots the pool fills,
    r = round(``new_share`` · f)) and its best r new ones, merged by score; as :func:`ranked`."""
    size = settings.pool
    shown, scores, filled, order = ranked(levels[:, :size], effects[:, :size], sign, settings, rng, sessions)
    q, extra = levels.shape[0], levels.shape[1] - size
    f = filled.sum(axis=2, keepdims=True)
    r = np.rint(settings.new_share * f).astype(np.int64)
    base = sign * settings.weight * levels[:, size:] + effects[:, size:] + settings.new_boost
    z = base[:, None, :] + settings.noise * rng.standard_normal((q, sessions, extra))
    top = min(extra, math.ceil(settings.new_share * settings.k))
    new_order = np.argsort(-z, axis=2, kind="stable")[:, :, :top]
    new_scores = np.take_along_axis(z, new_order, axis=2)
    rank = np.arange(shown.shape[2])
    keep_pool = filled & (rank[None, None, :] < f - r)
    keep_new = np.arange(top)[None, None, :] < r
    all_scores = np.concatenate([np.where(keep_pool, scores, -np.inf),
                                 np.where(keep_new, new_scores, -np.inf)], axis=2)
    all_docs = np.concatenate([order, new_order + size], axis=2)
    merged = np.argsort(-all_scores, axis=2, kind="stable")[:, :, :shown.shape[2]]
    merged_scores = np.take_along_axis(all_scores, merged, axis=2)
    docs = np.take_along_axis(all_docs, merged, axis=2)
    out_filled = np.isfinite(merged_scores)
    out_levels = np.take_along_axis(np.broadcast_to(levels[:, None, :], (q, sessions, levels.shape[1])), docs,
                                    axis=2)
    return (np.where(out_filled, out_levels, 0).astype(np.int64), np.where(out_filled, merged_scores, 0.0),
            out_filled, docs)


def measures(shown: IntArray, filled: BoolArray) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """DCG@k (log2 discount, linear gains), (P, N) and C of ranked lists, the last axis the shown order.

    Scores are continuous and distinct, so every pair is ordered: N counts pairs whose lower-shown
    document has the higher grade, P = all pairs − N (concordant + grade-tied), C = P − the pairs of equal
    grades (concordant only: the canary verdict's PNR, C / N)."""
    depth = shown.shape[-1]
    discounts = 1.0 / np.log2(np.arange(2, depth + 2, dtype=np.float64))
    dcg = (np.where(filled, GAINS[shown], 0.0) * discounts).sum(axis=-1)
    onehot = (shown[..., None] == np.arange(4)) & filled[..., None]
    after = np.cumsum(onehot[..., ::-1, :], axis=-2)[..., ::-1, :] - onehot  # strictly below, per grade
    above_grade = np.cumsum(after[..., ::-1], axis=-1)[..., ::-1]  # Σ_{g' ≥ g} after[g']
    better = np.concatenate([above_grade[..., 1:], np.zeros_like(above_grade[..., :1])], axis=-1)
    neg = (np.take_along_axis(better, shown[..., None], axis=-1)[..., 0] * filled).sum(axis=-1)
    n = filled.sum(axis=-1)
    pos = n * (n - 1) // 2 - neg
    per_grade = onehot.sum(axis=-2)
    tied = (per_grade * (per_grade - 1) // 2).sum(axis=-1)
    return dcg, pos.astype(np.float64), neg.astype(np.float64), (pos - tied).astype(np.float64)


def query_shares(settings: WorldSettings) -> FloatArray:
    weights = np.arange(1, settings.queries + 1, dtype=np.float64) ** -settings.zipf
    out: FloatArray = weights / weights.sum()
    return out


def tilted(log_shares: FloatArray, u: FloatArray, beta: float) -> FloatArray:
    logits = log_shares - beta * u
    w = np.exp(logits - logits.max())
    out: FloatArray = w / w.sum()
    return out


def solve_beta(log_shares: FloatArray, u: FloatArray, quality: FloatArray, target: float) -> float:
    """β with Σ p_q(β) e_q = target (the mean falls as β grows), by bisection to machine precision."""

    def mean_at(beta: float) -> float:
        logits = log_shares - beta * u
        w = np.exp(logits - logits.max())
        return float(np.sum(w * quality) / np.sum(w))  # not `@`: BLAS threads are slow on 1-D vectors

    mean0 = mean_at(0.0)
    if target == mean0:
        return 0.0
    sign = 1.0 if target < mean0 else -1.0
    lo, hi = 0.0, sign
    while (mean_at(hi) - target) * sign > 0:
        lo, hi = hi, 2.0 * hi
        if abs(hi) > 1e4:
            raise ValueError(f"night_dip: the queries' mix cannot reach a mean of {target:.4f} "
                             f"(daily mean {mean0:.4f})")
    while abs(hi - lo) > 1e-13 * max(1.0, abs(hi)):
        mid = 0.5 * (lo + hi)
        if (mean_at(mid) - target) * sign > 0:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


@dataclass(frozen=True)
class HourlyMix:
    """Per hour of day the queries' traffic shares, their cumulative sums (the last exactly 1), the guide
    table for index draws (``World.queries_at``) and the tilt β of each hour."""

    shares: FloatArray
    cdfs: FloatArray
    guides: IntArray
    betas: FloatArray


def hourly_mix(log_shares: FloatArray, daily: FloatArray, quality: FloatArray, targets: list[float],
               tilt: bool = True) -> HourlyMix:
    """Each hour's shares ``log_shares[h]`` tilted by β_h u_q (u: each query's expected DCG@k ``quality``
    standardised over the ``daily`` shares) so that the hour's expected mean DCG@k is ``targets[h]``
    (no tilt: β = 0)."""
    mean = float(daily @ quality)
    spread = math.sqrt(float(daily @ (quality - mean) ** 2))
    u = (quality - mean) / spread if spread > 0 else np.zeros_like(quality)
    shares = np.empty_like(log_shares)
    betas = np.zeros(HOURS)
    for h in range(HOURS):
        betas[h] = solve_beta(log_shares[h], u, quality, targets[h]) if tilt else 0.0
        shares[h] = tilted(log_shares[h], u, float(betas[h]))
    cdfs = np.cumsum(shares, axis=1)
    cdfs /= cdfs[:, -1:]
    cdfs[:, -1] = 1.0
    queries = shares.shape[1]
    steps = np.arange(2 * queries, dtype=np.float64) / (2 * queries)
    guides = np.stack([np.searchsorted(c, steps, side="right") for c in cdfs]).astype(np.int64)
    return HourlyMix(shares, cdfs, guides, betas)


@dataclass(frozen=True)
class WorldSummary:
    """Statistics of the world's per-session DCG@k over a day's traffic (exact, from the outcomes)."""

    bucket: str
    k: int
    mean: float
    broken_mean: float
    cv: float
    zeros: float
    query_share: float
    pnr: float
    hourly: FloatArray
    night_dip: float
    top_query_share: float
    distinct_per_day: float

    def line(self) -> str:
        low = int(np.argmin(self.hourly))
        dip = (f"night dip {self.night_dip:.1%} (hour {low:02d}: {self.hourly[low]:.3f})"
               if self.night_dip > 5e-4 else "no night dip")
        return (f"{self.bucket}: mean DCG@{self.k} {self.mean:.3f} (broken {self.broken_mean:.3f}), "
                f"cv {self.cv:.2f}, zeros {self.zeros:.0%}, query share of variance {self.query_share:.0%}, "
                f"PNR {self.pnr:.1f}, {dip}, commonest query {self.top_query_share:.1%} of traffic, "
                f"{self.distinct_per_day:,.0f} distinct queries in 48,000 sessions")


@dataclass(frozen=True)
class SampleSummary:
    """Statistics of drawn sessions (to check the world against its exact summary)."""

    mean: float
    cv: float
    zeros: float
    query_share: float
    hourly: FloatArray


def summarize_sample(dcg: npt.ArrayLike, query: npt.ArrayLike, hours: npt.ArrayLike) -> SampleSummary:
    """Mean, cv, zero share, between-query share of variance (query means of the sample) and hourly means
    of drawn sessions."""
    x = np.asarray(dcg, dtype=np.float64)
    q = np.asarray(query, dtype=np.int64)
    h = np.floor(np.asarray(hours, dtype=np.float64)).astype(np.int64) % HOURS
    mean = float(x.mean())
    total = float(x.var())
    _, inverse, counts = np.unique(q, return_inverse=True, return_counts=True)
    query_means = np.bincount(inverse, weights=x) / counts
    between = float(((query_means[inverse] - mean) ** 2).mean())
    hourly = np.bincount(h, weights=x, minlength=HOURS) / np.maximum(np.bincount(h, minlength=HOURS), 1)
    return SampleSummary(mean, math.sqrt(total) / mean, float((x == 0).mean()), between / total, hourly)
