"""The rankers of a flowing stream (:mod:`monitor.sim.flow`): for the realistic world's queries
(:mod:`monitor.sim.world`) every ranker's shown documents, session by session, so that the stream core can
be fed real impressions, shadow lists and grades rather than precomputed sums.

**Sessions.** For each query q and outcome j (``outcomes`` per query) one session: which documents of the
query's pool it retrieves (each independently, with the share a_s ~ Beta the world draws) and per document
the served ranker's noise ε and, per other ranker r, an independent ε′_r (all N(0, 1), from a stream of
their own seeded by the seed, the query and the ranker, so a ranker's lists do not depend on which other
rankers exist). The served ranker (index 0) shows the top k of

    s = ``weight`` · grade + doc effect + σ ε                         (σ: the world's ``noise``)

and ranker r the top k, over the *same* retrieved documents, of

    s_r = w_r · ``weight`` · grade + doc effect + σ (ρ_q ε + √(1 − ρ_q²) ε′_r),   ρ_q ~ U(0.3, 0.9)

(the candidate shares part of the served ranker's view of each document, which sets how many of the top k
both show). With w_r = 1 the two lists are **exchangeable** (a bivariate normal of equal variances is
symmetric), so such a ranker is an exact A/A of the served one: its expected mean DCG@k is the served
one's in every hour, for every query. ``target`` calibrates w_r on the world's day mix so that the
ranker's mean DCG@k is that share of the served one's (0.95: a 5% drop; 1.15: 15% better), by
interpolating a grid of weights on the sessions themselves.

**Documents nobody graded yet** (``fresh``). A share of each query's pool gets a *twin* for the ranker (per
query and document, fixed): where the ranker would show the document it shows the twin instead, a
document with a new id and the same grade (index ``pool + d`` in :attr:`FlowWorld.docs`). So its final
DCG@k is exactly what it would be without twins, but its twins are graded only once its own sessions
have asked for them: the equal candidate "whose list shows a few documents nobody had graded" of
issue 42, with nothing else about it changed.

**Missing lists** (``missing``): the ranker sends no list for the requests of the hardest queries (lowest
expected served DCG@k) holding that share of the day's traffic (a candidate that times out where the
served ranker works hardest). **Harder mix** (``harder``): a canary whose arm gets harder queries (each
hour's mix tilted so the served ranker's mean DCG@k there is that much lower: :meth:`World.with_harder_mix`)
while ranking each of them as well as the served ranker.

Pure numpy; no clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.sim.world import World
from monitor.sim.world_math import GAINS, FloatArray, IntArray, measures

__all__ = ["FlowWorld", "Lister"]

DocArray = npt.NDArray[np.int16]
_BLOCK = 2_000_000  # documents × sessions per vectorised block (memory bound)


@dataclass(frozen=True)
class Lister:
    """One ranker of a flowing world (module docstring). Index 0 of :attr:`FlowWorld.rankers` is the
    served ranker (its ``weight`` 1, no twins)."""

    name: str
    target: float | None = None
    fresh: float = 0.0
    missing: float = 0.0
    harder: float = 0.0

    def __post_init__(self) -> None:
        if self.target is not None and not 0.0 < self.target < 3.0:
            raise ValueError(f"target: expected a ratio in (0, 3), got {self.target!r}")
        for name in ("fresh", "missing", "harder"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"{name}: must be in [0, 1), got {value!r}")


@dataclass(frozen=True)
class FlowWorld:
    """Every ranker's lists over one bucket's world (module docstring)."""

    world: World
    rankers: tuple[Lister, ...]
    seed: int
    weights: FloatArray  # (rankers,) relative relevance weights (1 for the served ranker)
    docs: DocArray  # (rankers, queries, outcomes, k): shown documents (index in the pool), −1 empty
    dcg: FloatArray  # (rankers, queries, outcomes): each list's DCG@k
    hard: npt.NDArray[np.bool_]  # (rankers, queries): the queries a ranker sends no list for
    twins: npt.NDArray[np.bool_]  # (rankers, queries, pool): the documents a ranker shows as their twin
    mixes: dict[float, World] = field(default_factory=dict)  # harder mix → the world tilted so

    @classmethod
    def build(cls, world: World, rankers: tuple[Lister, ...], seed: int, outcomes: int | None = None
              ) -> FlowWorld:
        if not rankers or rankers[0].target is not None or rankers[0].fresh or rankers[0].missing:
            raise ValueError("rankers: the first is the served ranker (no target, twins or missing lists)")
        names = [r.name for r in rankers]
        if len(set(names)) != len(names):
            raise ValueError(f"rankers: a name given twice in {names}")
        s = world.settings
        m = outcomes or s.outcomes
        rho = np.random.default_rng([seed, 1 << 20]).uniform(0.3, 0.9, s.queries)
        weights = _calibrate(world, rankers, seed, rho, m)
        n, k = len(rankers), s.k
        docs = np.full((n, s.queries, m, k), -1, dtype=np.int16)
        block = max(1, _BLOCK // (m * s.pool))
        for start in range(0, s.queries, block):
            part = range(start, min(s.queries, start + block))
            present, eps = _draws(world, seed, part, m, 0)
            for r in range(n):
                noise = eps if r == 0 else _mixed(eps, _draws(world, seed, part, m, r)[1],
                                                  rho[start:part.stop])
                top = _top(_scores(world, part, weights[r], noise), present, k)
                docs[r, start:part.stop, :, :top.shape[2]] = top
        twins = np.stack([np.random.default_rng([seed, r, 1 << 21]).random((s.queries, s.pool)) < ranker.fresh
                          for r, ranker in enumerate(rankers)])
        levels = _levels(world, docs)
        dcg = measures(levels, docs >= 0)[0]
        p = world.hourly_shares.mean(axis=0)
        expected = dcg[0].mean(axis=1)
        hard = np.zeros((n, s.queries), dtype=bool)
        for r, ranker in enumerate(rankers):
            if ranker.missing:
                order = np.argsort(expected, kind="stable")  # hardest first
                hard[r, order[:int(np.searchsorted(np.cumsum(p[order]), ranker.missing)) + 1]] = True
        mixes = {r.harder: world.with_harder_mix(r.harder) for r in rankers if r.harder}
        return cls(world, rankers, seed, weights, docs, dcg, hard, twins, mixes)

    def index(self, name: str) -> int:
        return [r.name for r in self.rankers].index(name)

    def ratio(self, ranker: int) -> float:
        """The ranker's mean DCG@k over the served one's on the day's mix (exact over the sessions)."""
        p = self.world.hourly_shares.mean(axis=0)
        return float(p @ self.dcg[ranker].mean(axis=1)) / float(p @ self.dcg[0].mean(axis=1))

    def level(self, query: int, doc: int) -> int:
        """The grade of a document (a twin's is its original's)."""
        pool = self.world.settings.pool
        return int(self.world.levels[query, doc - pool if doc >= pool else doc])

    def doc_id(self, query: int, doc: int) -> str:
        pool = self.world.settings.pool
        return f"d{query}-{doc - pool}t" if doc >= pool else f"d{query}-{doc}"

    def shown(self, ranker: int, query: int, outcome: int, lists: int | None = None) -> list[int]:
        """The documents ranker ``ranker`` shows in session (``query``, ``outcome``): the list of ranker
        ``lists`` (default its own: another's for an exchanged A/A pair), each as its twin (index ``pool +
        d``) where ``ranker`` twins it."""
        row = self.docs[ranker if lists is None else lists, query, outcome]
        shown = row[row >= 0].astype(np.int64)
        if self.rankers[ranker].fresh:
            shown = np.where(self.twins[ranker, query, shown], shown + self.world.settings.pool, shown)
        return [int(d) for d in shown]

    def check(self, rng: np.random.Generator, sessions: int = 16) -> None:
        """Recompute sampled lists' DCG@k with the core's :func:`monitor.core.metrics.dcg` (AssertionError
        on a difference)."""
        from monitor.core.metrics import dcg as core_dcg

        s = self.world.settings
        for _ in range(sessions):
            r = int(rng.integers(0, len(self.rankers)))
            q, j = int(rng.integers(0, s.queries)), int(rng.integers(0, self.docs.shape[2]))
            gains = GAINS[[self.level(q, d) for d in self.shown(r, q, j)]]
            want = core_dcg(gains, s.k) if gains.size else 0.0
            if not math.isclose(want, float(self.dcg[r, q, j]), rel_tol=1e-12, abs_tol=1e-12):
                raise AssertionError(f"{self.world.bucket}: list ({r}, {q}, {j}) differs from monitor.core")


def _draws(world: World, seed: int, queries: range, m: int, ranker: int) -> tuple[npt.NDArray[np.bool_],
                                                                                     FloatArray]:
    """Per query of ``queries`` (each from its own stream): which documents each of its ``m`` sessions
    retrieves, and one ranker's noise."""
    s = world.settings
    a = s.available * s.available_spread
    present, eps = [], []
    for q in queries:
        rng = np.random.default_rng([seed, q, ranker])
        if ranker == 0:
            share = rng.beta(a, s.available_spread - a, (m, 1)) if s.available < 1 else np.ones((m, 1))
            present.append(rng.random((m, s.pool)) < share)
        eps.append(rng.standard_normal((m, s.pool)))
    return (np.stack(present) if present else np.zeros(0, dtype=bool)), np.stack(eps)


def _mixed(eps: FloatArray, other: FloatArray, rho: FloatArray) -> FloatArray:
    r = rho[:, None, None]
    out: FloatArray = r * eps + np.sqrt(1.0 - r * r) * other
    return out


def _scores(world: World, queries: range, weight: float, noise: FloatArray) -> FloatArray:
    s = world.settings
    rows = slice(queries.start, queries.stop)
    base = weight * s.weight * world.levels[rows, None, :s.pool] + world.effects[rows, None, :s.pool]
    out: FloatArray = base + s.noise * noise
    return out


def _top(scores: FloatArray, present: npt.NDArray[np.bool_], k: int) -> IntArray:
    z = np.where(present, scores, -np.inf)
    depth = min(k, z.shape[-1])
    top = np.argpartition(-z, depth - 1, axis=-1)[..., :depth] if depth < z.shape[-1] else np.broadcast_to(
        np.arange(z.shape[-1]), z.shape)
    order = np.take_along_axis(top, np.argsort(-np.take_along_axis(z, top, axis=-1), axis=-1, kind="stable"),
                               axis=-1)
    out: IntArray = np.where(np.isfinite(np.take_along_axis(z, order, axis=-1)), order, -1)
    return out


def _levels(world: World, docs: DocArray) -> IntArray:
    pool = world.settings.pool
    q = np.arange(docs.shape[1])[None, :, None, None]
    base = np.where(docs >= pool, docs - pool, np.maximum(docs, 0)).astype(np.int64)
    out: IntArray = np.where(docs >= 0, world.levels[q, base], 0)
    return out


def _calibrate(world: World, rankers: tuple[Lister, ...], seed: int, rho: FloatArray, m: int) -> FloatArray:
    """Each ranker's relative weight: 1, or for a ``target`` the weight whose day-mix mean DCG@k ratio over
    the first sessions of every query (the build's random numbers) is the target, by bisection (the mean
    grows with the weight: more relevance signal against the same noise)."""
    out = np.ones(len(rankers))
    wanted = [r for r, ranker in enumerate(rankers) if ranker.target is not None]
    if not wanted:
        return out
    s = world.settings
    first = min(m, max(4, 3_000_000 // (s.queries * s.pool)))
    p = world.hourly_shares.mean(axis=0)
    present, eps = _draws(world, seed, range(s.queries), m, 0)
    present, eps = present[:, :first], eps[:, :first]
    levels = world.levels[:, None, :s.pool]
    queries = range(s.queries)

    def mean_dcg(scores: FloatArray) -> float:
        top = _top(scores, present, s.k)
        shown = np.take_along_axis(np.broadcast_to(levels, top.shape[:2] + levels.shape[2:]),
                                   np.maximum(top, 0), axis=2)
        return float(p @ measures(np.where(top >= 0, shown, 0), top >= 0)[0].mean(axis=1))

    total = mean_dcg(_scores(world, queries, 1.0, eps))
    for r in wanted:
        target = rankers[r].target
        assert target is not None
        noise = _mixed(eps, _draws(world, seed, queries, m, r)[1][:, :first], rho)
        lo, hi = 0.0, 3.0
        if not mean_dcg(_scores(world, queries, lo, noise)) / total <= target <= mean_dcg(
                _scores(world, queries, hi, noise)) / total:
            raise ValueError(f"{rankers[r].name}: a ratio of {target:.3f} is not reached by a weight in "
                             "[0, 3]")
        for _ in range(14):
            mid = 0.5 * (lo + hi)
            below = mean_dcg(_scores(world, queries, mid, noise)) / total < target
            lo, hi = (mid, hi) if below else (lo, mid)
        out[r] = 0.5 * (lo + hi)
    return out
