"""Shadow lists for the realistic world (:mod:`monitor.sim.world`): for the same sessions, a candidate
ranker's list beside the served one, with per session what the paired (shadow) comparison sums.

**Sessions.** For each query q and outcome j (``outcomes`` per query, default the world's) one session:
the share of the pool it retrieves and which documents (as :mod:`monitor.sim.world`), and per document
the served ranker's noise ε and an independent ε′ (both N(0, 1)). The served list is the top k of

    s = ``weight`` · grade + doc effect + σ ε                                   (σ: the world's ``noise``)

and a candidate's, over the *same* retrievable documents, the top k of

    s_c = sign · w_c · grade + doc effect + σ (ρ_q ε + √(1 − ρ_q²) ε′)

with ρ_q ~ U(``rho_low``, ``rho_high``) per query: how much of the served ranker's per-document noise the
candidate shares, which sets how many of the top k both lists show (:meth:`ShadowWorld.overlap` reports
the distribution). Candidates (:data:`CANDIDATES`): **equal** (w_c = ``weight``), **d worse** with a
weaker relevance weight w_c calibrated so that the candidate's mean DCG@k over a day's mix is (1 − d)
times the served one (d = 2, 5, 10%), either on every query (*uniform*) or only on a random ``subset``
of the queries holding that share of the day's traffic (the others ranked as by the equal candidate),
and **broken** (sign −1: its relevance signal flipped, as the world's broken ranker). The calibration
(:func:`_calibrate`) interpolates a grid of weights on the first sessions of
every query (as many as ``calibration`` documents × sessions allow, at least 4), the same random numbers as
the build; the built candidate's achieved ratio is
:meth:`ShadowWorld.ratio` (exact over the precomputed sessions).

**Per session** (arrays of shape (queries, outcomes); the candidates' with a leading candidate axis):
both lists' DCG@k and concordant / discordant pair counts (grade-tied pairs left out), with the
definitions of :func:`monitor.core.metrics.dcg` and :func:`monitor.core.metrics.pairs.pair_counts`
(:meth:`ShadowWorld.check_against_core` recomputes sampled sessions with them; :meth:`ShadowWorld.build`
runs it), the documents both show (``shared``) and the union of both top k (``union``: what the
session's annotation request asks for when no grade is kept: a simple model of judgments, without
reuse, as today's session budget asks for every shown document). A simulated session draws its query from
the world's hourly mix and an outcome uniformly (:meth:`ShadowWorld.sample`).

Each query's random numbers come from their own stream (seeded by the shadow seed and the query), so a
session is recomputed from its query and outcome alone. Pure numpy; no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.metrics import dcg as core_dcg
from monitor.core.metrics.pairs import pair_counts
from monitor.sim.world import HOURS, World
from monitor.sim.world_math import GAINS, BoolArray, FloatArray, IntArray, measures

__all__ = ["CANDIDATES", "Candidate", "ShadowSettings", "ShadowWorld"]

_GRID = tuple(round(1.0 - 0.1 * i, 1) for i in range(12))  # relevance weights 1.0 … −0.1 (relative)
_BLOCK = 2_000_000  # documents × sessions per vectorised block (memory bound)


@dataclass(frozen=True)
class Candidate:
    """A shadow candidate: ``drop`` the relative drop of its day's mean DCG@k, on every query or only on
    the ``subset``; ``broken``: its relevance signal flipped."""

    name: str
    drop: float = 0.0
    subset: bool = False
    broken: bool = False


CANDIDATES = (Candidate("equal"), Candidate("2% worse", 0.02), Candidate("5% worse", 0.05),
              Candidate("10% worse", 0.10), Candidate("2% worse (subset)", 0.02, True),
              Candidate("5% worse (subset)", 0.05, True), Candidate("10% worse (subset)", 0.10, True),
              Candidate("broken", broken=True))


@dataclass(frozen=True)
class ShadowSettings:
    """The candidates' noise shared with the served ranker, the subset's traffic share and the sessions."""

    rho_low: float = 0.3
    rho_high: float = 0.9
    subset: float = 0.25
    outcomes: int | None = None
    calibration: int = 6_000_000  # documents × sessions per grid weight in the calibration
    candidates: tuple[Candidate, ...] = CANDIDATES

    def __post_init__(self) -> None:
        if not 0.0 <= self.rho_low <= self.rho_high <= 1.0:
            raise ValueError(f"rho_low, rho_high: need 0 ≤ low ≤ high ≤ 1, got {self.rho_low}, "
                             f"{self.rho_high}")
        if not 0.0 < self.subset <= 1.0:
            raise ValueError(f"subset: must be in (0, 1], got {self.subset!r}")
        if (self.outcomes is not None and self.outcomes < 1) or self.calibration < 1:
            raise ValueError("outcomes, calibration: must be ≥ 1")


@dataclass(frozen=True)
class _Noise:
    present: BoolArray  # (queries, M, pool)
    eps: FloatArray
    other: FloatArray


def _noise(seed: int, queries: range, m: int, world: World, first: int | None = None) -> _Noise:
    """The sessions' random numbers of ``queries`` (``m`` outcomes each; ``first``: only the first so many
    of them, the same numbers), each query from its own stream."""
    cut = slice(0, m if first is None else first)
    s = world.settings
    a = s.available * s.available_spread
    present, eps, other = [], [], []
    for q in queries:
        rng = np.random.default_rng([seed, q])
        share = rng.beta(a, s.available_spread - a, (m, 1)) if s.available < 1 else np.ones((m, 1))
        present.append((rng.random((m, s.pool)) < share)[cut])
        eps.append(rng.standard_normal((m, s.pool))[cut])
        other.append(rng.standard_normal((m, s.pool))[cut])
    return _Noise(np.stack(present), np.stack(eps), np.stack(other))


def _top(scores: FloatArray, present: BoolArray, k: int) -> IntArray:
    """The top k documents by score among the present ones (..., min(k, pool)), −1 for an empty slot."""
    z = np.where(present, scores, -np.inf)
    depth = min(k, z.shape[-1])
    if depth < z.shape[-1]:
        top = np.argpartition(-z, depth - 1, axis=-1)[..., :depth]
        order = np.take_along_axis(top, np.argsort(-np.take_along_axis(z, top, axis=-1), axis=-1,
                                                   kind="stable"), axis=-1)
    else:
        order = np.argsort(-z, axis=-1, kind="stable")
    out: IntArray = np.where(np.isfinite(np.take_along_axis(z, order, axis=-1)), order, -1)
    return out


def _scores(world: World, queries: range, noise: _Noise, weight: FloatArray | float, rho: FloatArray | None,
            sign: float = 1.0) -> FloatArray:
    """Scores of one ranker (``rho`` None: the served ranker's noise ε; else ρ ε + √(1 − ρ²) ε′, per query);
    ``weight`` per query or one."""
    s = world.settings
    rows = slice(queries.start, queries.stop)
    w = np.broadcast_to(np.asarray(weight, dtype=np.float64), (len(queries),))[:, None, None]
    base = sign * w * s.weight * world.levels[rows, None, :s.pool] + world.effects[rows, None, :s.pool]
    if rho is None:
        e = noise.eps
    else:
        r = rho[rows, None, None]
        e = r * noise.eps + np.sqrt(1.0 - r * r) * noise.other
    out: FloatArray = base + s.noise * e
    return out


def _lists(world: World, queries: range, order: IntArray) -> tuple[IntArray, BoolArray]:
    levels = world.levels[queries.start:queries.stop, None, :world.settings.pool]
    filled = order >= 0
    shown = np.take_along_axis(np.broadcast_to(levels, (*order.shape[:2], levels.shape[-1])),
                               np.maximum(order, 0), axis=-1)
    return np.where(filled, shown, 0), filled


def _dcg(world: World, queries: range, order: IntArray) -> FloatArray:
    shown, filled = _lists(world, queries, order)
    return measures(shown, filled)[0]


@dataclass(frozen=True)
class ShadowWorld:
    """The served and shadow lists' per-session values of one bucket's world (module docstring)."""

    world: World
    settings: ShadowSettings
    seed: int
    rho: FloatArray  # (queries,) ρ_q
    subset: npt.NDArray[np.bool_]  # (queries,) the queries a subset candidate is worse on
    weights: FloatArray  # (candidates,) w_c (relative to the served weight; sign included)
    served: FloatArray  # (3, queries, M): DCG@k, concordant, discordant
    shadow: FloatArray  # (candidates, 3, queries, M)
    shared: IntArray  # (candidates, queries, M)
    union: IntArray  # (candidates, queries, M)
    shown: IntArray  # (queries, M): documents the served list shows

    @classmethod
    def build(cls, world: World, seed: int, settings: ShadowSettings | None = None) -> ShadowWorld:
        s = settings if settings is not None else ShadowSettings()
        rng = np.random.default_rng([seed, 1 << 20])
        queries = world.settings.queries
        rho = rng.uniform(s.rho_low, s.rho_high, queries)
        p = world.hourly_shares.mean(axis=0)
        order = rng.permutation(queries)
        subset = np.zeros(queries, dtype=bool)
        subset[order[:int(np.searchsorted(np.cumsum(p[order]), s.subset)) + 1]] = True
        m = s.outcomes or world.settings.outcomes
        first = min(m, max(4, s.calibration // (queries * world.settings.pool)))
        weights = _calibrate(world, seed, s, rho, subset, m, first)
        c = len(s.candidates)
        served = np.empty((3, queries, m))
        shadow = np.empty((c, 3, queries, m))
        shared = np.empty((c, queries, m), dtype=np.int64)
        union = np.empty((c, queries, m), dtype=np.int64)
        shown = np.empty((queries, m), dtype=np.int64)
        block = max(1, _BLOCK // (m * world.settings.pool))
        k = world.settings.k
        for start in range(0, queries, block):
            part = range(start, min(queries, start + block))
            noise = _noise(seed, part, m, world)
            base = _top(_scores(world, part, noise, 1.0, None), noise.present, k)
            values = measures(*_lists(world, part, base))
            served[:, start:part.stop] = values[0], values[3], values[2]
            shown[start:part.stop] = (base >= 0).sum(axis=-1)
            in_base = _members(base, world.settings.pool)
            for i, cand in enumerate(s.candidates):
                w = _weight(cand, weights[i], subset[start:part.stop])
                top = _top(_scores(world, part, noise, np.abs(w), rho, -1.0 if cand.broken else 1.0),
                           noise.present, k)
                values = measures(*_lists(world, part, top))
                shadow[i, :, start:part.stop] = values[0], values[3], values[2]
                in_top = _members(top, world.settings.pool)
                shared[i, start:part.stop] = (in_base & in_top).sum(axis=-1)
                union[i, start:part.stop] = (in_base | in_top).sum(axis=-1)
        out = cls(world, s, seed, rho, subset, weights, served, shadow, shared, union, shown)
        out.check_against_core(np.random.default_rng([seed, 2]))
        return out

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.settings.candidates)

    def index(self, name: str) -> int:
        return self.names.index(name)

    def ratio(self, candidate: int) -> float:
        """The candidate's mean DCG@k over the served one's, a day's mix (exact over the sessions)."""
        p = self.world.hourly_shares.mean(axis=0)
        return float(p @ self.shadow[candidate, 0].mean(axis=1)) / float(p @ self.served[0].mean(axis=1))

    def overlap(self, candidate: int = 0) -> tuple[FloatArray, FloatArray]:
        """Per query, the share of the served list's top k the candidate's also shows (mean over its
        sessions that show anything; NaN without any), and the queries' day shares."""
        with np.errstate(invalid="ignore", divide="ignore"):
            per = np.where(self.shown > 0, self.shared[candidate] / np.maximum(self.shown, 1), np.nan)
            out: FloatArray = np.nanmean(np.where(np.isnan(per).all(axis=1, keepdims=True), 0.0, per), axis=1)
        out[(self.shown == 0).all(axis=1)] = np.nan
        return out, self.world.hourly_shares.mean(axis=0)

    def sample(self, rng: np.random.Generator, hours: npt.ArrayLike) -> tuple[IntArray, IntArray]:
        """(flat index into the (queries, outcomes) arrays, query) per element of ``hours`` (hour of day:
        its floor picks the world's hourly mix)."""
        hour = np.floor(np.asarray(hours, dtype=np.float64)).astype(np.int64) % HOURS
        query = self.world.queries_at(rng, hour)
        m = self.served.shape[-1]
        return query * m + rng.integers(0, m, hour.shape), query

    def check_against_core(self, rng: np.random.Generator, sessions: int = 8) -> None:
        """Recompute ``sessions`` sampled sessions (query, outcome, candidate) list by list with the
        core's :func:`~monitor.core.metrics.dcg` and :func:`~monitor.core.metrics.pairs.pair_counts`
        (raises AssertionError on a difference)."""
        w = self.world
        m = self.served.shape[-1]
        for _ in range(sessions):
            q, j = int(rng.integers(0, w.settings.queries)), int(rng.integers(0, m))
            i = int(rng.integers(0, len(self.settings.candidates)))
            cand = self.settings.candidates[i]
            noise = _noise(self.seed, range(q, q + 1), m, w)
            weight = _weight(cand, self.weights[i], self.subset[q:q + 1])
            lists = []
            for scores in (_scores(w, range(q, q + 1), noise, 1.0, None),
                           _scores(w, range(q, q + 1), noise, np.abs(weight), self.rho,
                                   -1.0 if cand.broken else 1.0)):
                present = np.flatnonzero(noise.present[0, j])
                ranked = present[np.argsort(-scores[0, j, present], kind="stable")][:w.settings.k]
                grades = w.levels[q, ranked]
                counts = pair_counts(grades, scores[0, j, ranked])
                lists.append((set(ranked.tolist()), core_dcg(GAINS[grades], w.settings.k) if ranked.size
                              else 0.0, counts.concordant, counts.discordant))
            (docs_x, *x), (docs_y, *y) = lists
            found = (self.served[:, q, j], self.shadow[i, :, q, j])
            for want, got in zip((x, y), found, strict=True):
                if not (math.isclose(want[0], float(got[0]), rel_tol=1e-12, abs_tol=1e-12)
                        and want[1] == got[1] and want[2] == got[2]):
                    raise AssertionError(f"{w.bucket}: shadow session ({q}, {j}, {cand.name}) differs from "
                                         "monitor.core")
            if (len(docs_x & docs_y), len(docs_x | docs_y)) != (self.shared[i, q, j], self.union[i, q, j]):
                raise AssertionError(f"{w.bucket}: shared or union documents of ({q}, {j}) differ")


def _members(order: IntArray, pool: int) -> BoolArray:
    out = np.zeros((*order.shape[:-1], pool + 1), dtype=bool)
    np.put_along_axis(out, np.where(order >= 0, order, pool), True, axis=-1)
    return out[..., :pool]


def _weight(cand: Candidate, weight: float, subset: npt.NDArray[np.bool_]) -> FloatArray:
    """Per query of a block the candidate's relative weight (its sign: flipped for a broken one)."""
    if cand.broken:
        return np.full(subset.shape, -1.0)
    out: FloatArray = np.where(subset, weight, 1.0) if cand.subset else np.full(subset.shape, weight)
    return out


def _calibrate(world: World, seed: int, s: ShadowSettings, rho: FloatArray, subset: npt.NDArray[np.bool_],
               outcomes: int, m: int) -> FloatArray:
    """Each candidate's relative weight w_c: the grid's per-query mean DCG@k over the first ``m`` sessions
    of every query (the build's random numbers), interpolated to the target ratio (1 − drop)."""
    queries = world.settings.queries
    served = np.empty(queries)
    grid = np.empty((len(_GRID), queries))
    block = max(1, _BLOCK // (m * world.settings.pool * 4))
    for start in range(0, queries, block):
        part = range(start, min(queries, start + block))
        noise = _noise(seed, part, outcomes, world, m)
        served[start:part.stop] = _dcg(world, part, _top(_scores(world, part, noise, 1.0, None),
                                                           noise.present, world.settings.k)).mean(axis=1)
        for g, w in enumerate(_GRID):
            top = _top(_scores(world, part, noise, w, rho), noise.present, world.settings.k)
            grid[g, start:part.stop] = _dcg(world, part, top).mean(axis=1)
    p = world.hourly_shares.mean(axis=0)
    total = float(p @ served)
    out = np.ones(len(s.candidates))
    for i, cand in enumerate(s.candidates):
        if cand.broken:
            out[i] = -1.0
        elif cand.drop > 0:
            inside = subset if cand.subset else np.ones(queries, dtype=bool)
            means = (grid[:, inside] @ p[inside] + grid[0, ~inside] @ p[~inside]) / total  # decreasing in g
            target = 1.0 - cand.drop
            if not means[-1] <= target <= means[0]:
                raise ValueError(f"{cand.name}: a ratio of {target:.3f} is outside the grid's "
                                 f"{means[-1]:.3f} … {means[0]:.3f}")
            out[i] = float(np.interp(target, means[::-1], np.asarray(_GRID)[::-1]))
    return out

