"""A realistic simulated world for one bucket: per-session DCG@k and PNR pair counts as real search traffic
gives them, precomputed so that a Monte Carlo draw of a session is a few index look-ups.

**Queries.** A bucket has ``queries`` distinct queries; the query of popularity rank r gets traffic share
∝ r^−``zipf`` (head: few queries searched again and again; tail: many, nearly uniform, so a query rarely
repeats within a day). Each query has a difficulty z_q ~ N(0, 1), independent of its popularity, and a
pool of ``pool`` candidate documents whose grades 0..3 are drawn from the query's own distribution:

    P(relevant) = expit(``relevant_logit`` − ``difficulty_sd`` · z_q)
    P(grade g | relevant) ∝ (0.5, 0.3, 0.2)_g · exp(−``grade_tilt`` · (g − 1) · z_q),   g = 1, 2, 3

so hard queries have few relevant documents, and mostly marginal ones; some have none at all. Gains are
the four-level scale's (:data:`monitor.sim.relevance.LEVELGAINS`: 0, 0.3, 0.7, 1). Every document has a fixed
``doc_noise`` effect (how much better or worse it looks to any ranker than it is).

**Sessions.** In one session of query q a share a_s ~ Beta(``available`` · ``available_spread``,
(1 − ``available``) · ``available_spread``) of the pool is retrievable, each document independently
(filters, stock, location and personalisation differ between sessions: some sessions retrieve almost
everything, some almost nothing), and a ranker orders the retrievable ones by the score

    s = sign · ``weight`` · grade + doc effect + ε,   ε ~ N(0, ``noise``) per session and document

(sign +1 for the *healthy* ranker, −1 for the *broken* one: its relevance signal flipped, as
:class:`monitor.sim.rankers.Ranker` with ``broken=True``). The session's outcome is DCG@k of the top k
(k = ``k``: 40 in head, 20 elsewhere, the labelling depths of :class:`monitor.sim.config.SimConfig`)
and its PNR pair counts P = concordant + grade-tied and N = discordant over the shown list, with the
definitions of :func:`monitor.core.metrics.dcg` and :func:`monitor.core.metrics.pairs.pair_counts`
(computed here vectorised over many sessions; :meth:`World.check_against_core` recomputes sampled
sessions with those functions, and :meth:`World.build` runs it). For each query and ranker variant,
``outcomes`` such sessions are precomputed (M, from the same query and the same documents); a simulated
session draws its query, then one of the query's M outcomes uniformly: two index draws
(:meth:`World.sample`).

**The day.** With ``night_dip`` > 0 the query mix follows the clock: within the bucket the traffic share
of query q in hour-of-day h is

    p_q(h) ∝ p_q · exp(−β_h · u_q),   u_q = (e_q − m) / sd(e)

with e_q the query's expected DCG@k under the healthy ranker (the mean of its M outcomes), m and sd(e) the
traffic-weighted mean and spread of e_q, and β_h solved (bisection) so that the expected mean DCG@k of
hour h is exactly

    m_h = m · (1 − ``night_dip`` · cos(2π (h − ``dip_hour``) / 24))

``night_dip`` lower than the daily mean in the hour starting at ``dip_hour`` (03:00 UTC), as much higher
twelve hours later; the 24 hourly means average to m. At night hard queries are a larger share; the
ranker is the same. :meth:`World.summary` reports the hourly means (exact, from the precomputed
outcomes) and :func:`summarize_sample` those of drawn sessions.

**A worse candidate.** ``draw(..., drop=d)``: a candidate session of hour h is the broken ranker's outcome
(same query, same outcome index) with probability

    q_h = d · m_h / (m_h − mb_h)    (mb_h the broken ranker's expected mean in hour h)

(the same query, and the broken ranker's outcome of the same index: a session of its own, with its own
retrievable documents and noise)

so the candidate's expected mean DCG@k is exactly (1 − d) · m_h in every hour: the same relative drop at
any time of day.

**Which documents.** :attr:`Outcomes.docs` keeps the shown documents of every precomputed session (per
variant, query, outcome and rank: the index of the document in its query's list, −1 for an empty slot;
int16), so a benchmark can tell which (query, document) pairs a session needs judged
(``benchmarks/judgments.py``).

**Documents only the candidate shows** (``new_share`` > 0; off by default). Every query also gets
``new_docs`` documents that only the candidate's ranker retrieves (indices ``pool`` … ``pool + new_docs −
1`` of :attr:`World.levels`), graded like the query's pool but with the relevance logit shifted by
``new_logit_shift`` (< 0: worse than the pool), and scored like pool documents plus ``new_boost`` (the
candidate's ranker likes what it retrieved: they are not all pushed to the bottom of its list). Two more
variants are precomputed, the candidate ranker's sessions, healthy (:data:`NEW`) and broken
(:data:`NEW_BROKEN`): in a session whose healthy list would fill f slots, the candidate shows its best
f − r pool documents and its best r = round(``new_share`` · f) new ones (all retrievable), merged by score:
exactly that share of its shown documents the baseline never shows. With the defaults (shift −1, boost 1)
and ``new_share`` 0.3 the new documents alone lower the candidate's mean DCG@k by 2.3–2.8%.
``draw(..., new=True)``: a candidate session is the candidate ranker's, broken with the
probability

    q_h = (mn_h − (1 − d) · m_h) / (mn_h − mnb_h)    (mn_h, mnb_h: the means of NEW and NEW_BROKEN)

so its expected mean is again exactly (1 − d) · m_h in every hour (which needs (1 − d) · m_h between
mnb_h and mn_h: the new documents alone may not lower the mean by more than d). These variants draw from
their own random stream, so the healthy and broken outcomes (and everything drawn from them) are the same
with or without them.

Pure numpy; no clock, no I/O. The defaults (:data:`DEFAULT_SETTINGS`) give per-session DCG@k a
coefficient of variation near 1.2, 20–26% sessions with DCG 0 and 60–65% of its variance explained by
the query (the traffic-weighted variance of the queries' means over the total): most of the spread of a
session's DCG is which query it was, and the rest, within a query, is still large and zero-inflated.
:meth:`World.summary` gives these figures exactly for a built world (``tests/unit/test_sim_world.py``
checks them and the time-of-day and drop calibrations).

>>> world = World.build("tail", seed=1, settings=WorldSettings(k=20, queries=300, outcomes=8, pool=60))
>>> rng = np.random.default_rng(0)
>>> dcg, pos, neg, query = world.draw(rng, np.zeros(5), np.zeros(5, dtype=bool))
>>> dcg.shape, bool((dcg >= 0).all()), bool((pos + neg <= 190).all())
((5,), True, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from monitor.core.metrics import dcg as core_dcg
from monitor.core.metrics.pairs import pair_counts
from monitor.sim.world_math import (
    GAINS,
    FloatArray,
    IntArray,
    SampleSummary,
    WorldSummary,
    hourly_mix,
    measures,
    query_shares,
    ranked,
    summarize_sample,
    with_new,
)
from monitor.sim.world_settings import DEFAULT_SETTINGS, HOURS, WorldSettings

__all__ = ["BROKEN", "DEFAULT_SETTINGS", "HEALTHY", "HOURS", "NEW", "NEW_BROKEN", "Outcomes", "SampleSummary",
           "World", "WorldSettings", "WorldSummary", "summarize_sample"]

DocArray = npt.NDArray[np.int16]
HEALTHY, BROKEN, NEW, NEW_BROKEN = 0, 1, 2, 3  # NEW, NEW_BROKEN: only with ``new_share`` > 0
_RELEVANT_MIX = np.array([0.5, 0.3, 0.2])
_CHUNK = 1_000_000  # documents × sessions per vectorised block (memory bound)


@dataclass(frozen=True)
class Outcomes:
    """Per variant (healthy, broken; with new documents also NEW, NEW_BROKEN), query and outcome index:
    DCG@k, P, N and C (shape (variants, queries, M)), and the shown documents (shape (variants, queries, M,
    k): per rank the document's index in its query's list, −1 for an empty slot)."""

    dcg: FloatArray
    pos: FloatArray
    neg: FloatArray
    docs: DocArray
    con: FloatArray  # concordant pairs alone (P without the grade-tied ones)


@dataclass(frozen=True)
class World:
    """One bucket's queries, their precomputed session outcomes and the hourly query mix."""

    bucket: str
    settings: WorldSettings
    shares: FloatArray  # p_q, the untilted traffic share of each query
    levels: IntArray  # (queries, pool + new) grades of every query's documents (the pool's, then the new)
    effects: FloatArray  # (queries, pool + new) their doc effects
    outcomes: Outcomes
    expected: FloatArray  # (2, queries): each query's mean DCG@k per variant
    hourly_shares: FloatArray  # (24, queries): p_q(h)
    hourly_cdfs: FloatArray  # (24, queries): their cumulative sums (the last exactly 1), for index draws
    hourly_guides: IntArray  # (24, G): per hour, the first query whose cumulative share exceeds j / G
    betas: FloatArray  # (24,)
    hourly_expected: FloatArray  # (2, 24): expected mean DCG@k per variant and hour of day

    @classmethod
    def build(cls, bucket: str, seed: int, settings: WorldSettings | None = None,
              night_dip: float | None = None) -> World:
        """Draw the bucket's queries and documents and precompute ``outcomes`` sessions per query and
        variant (``settings`` default: :data:`DEFAULT_SETTINGS` of the bucket, else the tail's)."""
        s = settings if settings is not None else DEFAULT_SETTINGS.get(bucket, WorldSettings())
        if night_dip is not None:
            s = replace(s, night_dip=night_dip)
        rng = np.random.default_rng(seed)
        z = rng.normal(0.0, 1.0, s.queries)
        relevant = 1.0 / (1.0 + np.exp(-(s.relevant_logit - s.difficulty_sd * z)))
        mix = _RELEVANT_MIX[None, :] * np.exp(-s.grade_tilt * np.arange(3)[None, :] * z[:, None])
        mix /= mix.sum(axis=1, keepdims=True)
        probabilities = np.concatenate([(1 - relevant)[:, None], relevant[:, None] * mix], axis=1)
        cdf = np.cumsum(probabilities, axis=1)
        u = rng.random((s.queries, s.pool))
        levels = (u[:, :, None] >= cdf[:, None, :3]).sum(axis=2).astype(np.int64)
        effects = rng.normal(0.0, s.doc_noise, (s.queries, s.pool))
        block = max(1, _CHUNK // (s.outcomes * s.pool))
        variants = 4 if s.new_count else 2
        arrays = [np.empty((variants, s.queries, s.outcomes)) for _ in range(4)]
        docs = np.full((variants, s.queries, s.outcomes, s.k), -1, dtype=np.int16)
        for variant, sign in ((HEALTHY, 1.0), (BROKEN, -1.0)):
            for start in range(0, s.queries, block):
                part = slice(start, start + block)
                shown, _, filled, order = ranked(levels[part], effects[part], sign, s, rng, s.outcomes)
                for target, values in zip(arrays, measures(shown, filled), strict=True):
                    target[variant, part] = values
                docs[variant, part, :, :order.shape[2]] = np.where(filled, order, -1)
        if s.new_count:  # their own random stream: the variants above are the same with or without them
            new_rng = np.random.default_rng([seed, 1])
            relevant = 1.0 / (1.0 + np.exp(-(s.relevant_logit + s.new_logit_shift - s.difficulty_sd * z)))
            probabilities = np.concatenate([(1 - relevant)[:, None], relevant[:, None] * mix], axis=1)
            cdf = np.cumsum(probabilities, axis=1)
            u = new_rng.random((s.queries, s.new_count))
            levels = np.concatenate([levels, (u[:, :, None] >= cdf[:, None, :3]).sum(axis=2)], axis=1)
            effects = np.concatenate([effects, new_rng.normal(0.0, s.doc_noise, (s.queries, s.new_count))],
                                     axis=1)
            for variant, sign in ((NEW, 1.0), (NEW_BROKEN, -1.0)):
                for start in range(0, s.queries, block):
                    part = slice(start, start + block)
                    shown, _, filled, order = with_new(levels[part], effects[part], sign, s, new_rng,
                                                        s.outcomes)
                    for target, values in zip(arrays, measures(shown, filled), strict=True):
                        target[variant, part] = values
                    docs[variant, part, :, :order.shape[2]] = np.where(filled, order, -1)
        outcomes = Outcomes(arrays[0], arrays[1], arrays[2], docs, arrays[3])
        world = cls(bucket, s, query_shares(s), levels, effects, outcomes, outcomes.dcg.mean(axis=2),
                    np.empty((HOURS, s.queries)), np.empty((HOURS, s.queries)),
                    np.empty((HOURS, 1), dtype=np.int64), np.zeros(HOURS), np.empty((variants, HOURS)))
        world = world.with_night_dip(s.night_dip)
        world.check_against_core(np.random.default_rng(seed + 1))
        return world

    def with_night_dip(self, night_dip: float, dip_hour: float | None = None) -> World:
        """The same queries and outcomes under another time-of-day mix (cheap: no sessions recomputed)."""
        s = replace(self.settings, night_dip=night_dip,
                    dip_hour=self.settings.dip_hour if dip_hour is None else dip_hour)
        mean = float(self.shares @ self.expected[HEALTHY])
        targets = [mean * (1.0 - s.night_dip * math.cos(2.0 * math.pi * (h - s.dip_hour) / HOURS))
                   for h in range(HOURS)]
        mix = hourly_mix(np.log(self.shares)[None, :].repeat(HOURS, axis=0), self.shares,
                         self.expected[HEALTHY], targets, tilt=s.night_dip != 0)
        return replace(self, settings=s, hourly_shares=mix.shares, hourly_cdfs=mix.cdfs,
                       hourly_guides=mix.guides, betas=mix.betas,
                       hourly_expected=np.einsum("hq,vq->vh", mix.shares, self.expected))

    def with_harder_mix(self, drop: float) -> World:
        """The same queries and outcomes with each hour's query mix tilted further towards hard queries (the
        night dip's tilt, on top of it) so that the healthy ranker's expected mean DCG@k of every hour is
        ``drop`` (relative) lower: a candidate that changes which queries reach it, its own ranking as
        good as the baseline's on every query."""
        if not 0.0 <= drop < 1.0:
            raise ValueError(f"drop: must be in [0, 1), got {drop!r}")
        targets = [(1.0 - drop) * float(self.hourly_expected[HEALTHY, h]) for h in range(HOURS)]
        mix = hourly_mix(np.log(self.hourly_shares), self.shares, self.expected[HEALTHY], targets)
        return replace(self, hourly_shares=mix.shares, hourly_cdfs=mix.cdfs, hourly_guides=mix.guides,
                       hourly_expected=np.einsum("hq,vq->vh", mix.shares, self.expected))

    # -- the pieces a benchmark needs ---------------------------------------------------------------------
    def hourly_means(self, variant: int = HEALTHY) -> FloatArray:
        """Expected mean DCG@k per hour of day (exact)."""
        out: FloatArray = self.hourly_expected[variant]
        return out

    def broken_share(self, drop: float, new: bool = False) -> FloatArray:
        """Per hour of day, the share q_h of broken candidate sessions that lowers the candidate's mean by
        exactly ``drop`` (relative) in that hour; ``new``: of the candidate ranker that shows new documents
        (NEW_BROKEN among NEW, module docstring)."""
        if not 0.0 <= drop < 1.0:
            raise ValueError(f"drop: must be in [0, 1), got {drop!r}")
        healthy = self.hourly_means(HEALTHY)
        if not new:
            broken = self.hourly_means(BROKEN)
            q: FloatArray = drop * healthy / (healthy - broken)
            if (q > 1.0).any():
                raise ValueError(f"drop: even an all-broken candidate cannot lower the mean by {drop:.0%}")
            return q
        if not self.settings.new_count:
            raise ValueError("new: this world has no new documents (new_share = 0)")
        fresh, fresh_broken = self.hourly_means(NEW), self.hourly_means(NEW_BROKEN)
        q = (fresh - (1.0 - drop) * healthy) / (fresh - fresh_broken)
        if (q < 0.0).any():
            alone = float((1.0 - fresh / healthy).max())
            raise ValueError(f"drop: the new documents alone lower the mean by up to {alone:.1%} "
                             f"(more than {drop:.0%})")
        if (q > 1.0).any():
            raise ValueError(f"drop: even an all-broken candidate cannot lower the mean by {drop:.0%}")
        return q

    def new_document_share(self) -> float:
        """The traffic-weighted share of the candidate ranker's shown documents (NEW, a day's mix) that the
        baseline never shows (0 without new documents)."""
        if not self.settings.new_count:
            return 0.0
        docs = self.outcomes.docs[NEW]
        shown = (docs >= 0).sum(axis=2)
        fresh = (docs >= self.settings.pool).sum(axis=2)
        p = self.hourly_shares.mean(axis=0)
        return float(p @ fresh.mean(axis=1)) / float(p @ shown.mean(axis=1))

    def sample(self, rng: np.random.Generator, hours: npt.ArrayLike, candidate: npt.ArrayLike,
               drop: float = 0.0, new: bool = False) -> tuple[IntArray, IntArray]:
        """Which precomputed session each simulated session is: (flat index into the (variant, query,
        outcome) arrays of :attr:`outcomes`, query index), one per element of ``hours`` (hour of day in
        [0, 24); its floor picks the hourly mix). Where ``candidate`` is true the session is the broken
        ranker's with the probability q_h that lowers the candidate's mean by ``drop`` in its hour; with
        ``new``, the candidate ranker's that shows new documents (NEW, or NEW_BROKEN with the probability
        of :meth:`broken_share` for ``new``). Without ``new`` the random numbers drawn are the same as
        before new documents existed."""
        hour = np.floor(np.asarray(hours, dtype=np.float64)).astype(np.int64) % HOURS
        cand = np.broadcast_to(np.asarray(candidate, dtype=bool), hour.shape)
        query = self.queries_at(rng, hour)
        m = self.settings.outcomes
        size = self.settings.queries * m
        flat = query * m + rng.integers(0, m, hour.shape)
        if new:
            q = self.broken_share(drop, new=True)
            flat += cand * (NEW * size) + (cand & (rng.random(hour.shape) < q[hour])) * size
        elif drop > 0.0:
            q = self.broken_share(drop)
            flat += (cand & (rng.random(hour.shape) < q[hour])) * size
        return flat, query

    def draw(self, rng: np.random.Generator, hours: npt.ArrayLike, candidate: npt.ArrayLike,
             drop: float = 0.0, new: bool = False) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
        """One session per element of ``hours`` (:meth:`sample`): (DCG@k, P, N, query index)."""
        flat, query = self.sample(rng, hours, candidate, drop, new)
        o = self.outcomes
        return o.dcg.ravel()[flat], o.pos.ravel()[flat], o.neg.ravel()[flat], query

    def draw_dcg(self, rng: np.random.Generator, hours: npt.ArrayLike, candidate: npt.ArrayLike,
                 drop: float = 0.0, new: bool = False) -> FloatArray:
        """DCG@k only (the fast path of :meth:`draw`, same random numbers)."""
        flat, _ = self.sample(rng, hours, candidate, drop, new)
        out: FloatArray = self.outcomes.dcg.ravel()[flat]
        return out

    def shown_docs(self, flat: npt.ArrayLike) -> DocArray:
        """The shown documents (index in the query's list, −1 for an empty slot; shape (..., k)) of the
        sessions :meth:`sample` returned."""
        out: DocArray = self.outcomes.docs.reshape(-1, self.settings.k)[np.asarray(flat)]
        return out

    def queries_at(self, rng: np.random.Generator, hour: IntArray) -> IntArray:
        """A query index per session from its hour's mix: one uniform draw u each, the first query whose
        cumulative share exceeds u (inverse CDF), found through a guide table (Chen & Asau 1974: the
        search starts at the first query past ⌊u·G⌋ / G), so exact and O(1) per draw on average."""
        q = self.settings.queries
        u = rng.random(hour.shape).ravel()
        h = hour.ravel()
        guides = self.hourly_guides.shape[1]
        index = self.hourly_guides.ravel()[h * guides + np.minimum((u * guides).astype(np.int64), guides - 1)]
        cdf = self.hourly_cdfs.ravel()
        behind = np.flatnonzero(cdf[h * q + index] <= u)
        while behind.size:
            index[behind] += 1
            behind = behind[cdf[h[behind] * q + index[behind]] <= u[behind]]
        out: IntArray = index.reshape(hour.shape)
        return out

    def summary(self) -> WorldSummary:
        """Mean, cv, zero share, query share of variance, PNR and hourly means of the healthy ranker's
        sessions over a day's traffic (the 24 hourly mixes averaged), exact."""
        p = self.hourly_shares.mean(axis=0)
        x = self.outcomes.dcg[HEALTHY]
        e = x.mean(axis=1)
        mean = float(p @ e)
        second = float(p @ (x * x).mean(axis=1))
        total = second - mean * mean
        between = float(p @ (e - mean) ** 2)
        zeros = float(p @ (x == 0).mean(axis=1))
        pnr = float(p @ self.outcomes.pos[HEALTHY].mean(axis=1)) / float(
            p @ self.outcomes.neg[HEALTHY].mean(axis=1))
        hourly = self.hourly_means()
        distinct = float((1.0 - (1.0 - p) ** 48_000).sum())
        return WorldSummary(self.bucket, self.settings.k, mean, float(p @ self.expected[BROKEN]),
                            math.sqrt(max(total, 0.0)) / mean, zeros, between / total, pnr, hourly,
                            1.0 - float(hourly.min()) / float(hourly.mean()), float(p.max()), distinct)

    def check_against_core(self, rng: np.random.Generator, sessions: int = 12) -> None:
        """Recompute ``sessions`` fresh sessions with :func:`monitor.core.metrics.dcg` and
        :func:`~monitor.core.metrics.pairs.pair_counts` and compare them with the vectorised measures
        (raises AssertionError on a difference)."""
        s = self.settings
        for i in range(sessions):
            q = int(rng.integers(0, s.queries))
            sign = 1.0 if rng.random() < 0.5 else -1.0
            if s.new_count and i % 2:  # the candidate ranker with new documents (own random numbers)
                shown, scores, filled, docs = with_new(self.levels[q:q + 1], self.effects[q:q + 1], sign, s,
                                                        np.random.default_rng([i, q]), 1)
                share = (docs[0, 0][filled[0, 0]] >= s.pool).sum()
                if share != round(s.new_share * filled.sum()):
                    raise AssertionError(f"{self.bucket}: {share} new documents in a list of {filled.sum()}")
            else:
                shown, scores, filled, docs = ranked(self.levels[q:q + 1, :s.pool],
                                                      self.effects[q:q + 1, :s.pool], sign, s, rng, 1)
            if not (self.levels[q][docs[0, 0][filled[0, 0]]] == shown[0, 0][filled[0, 0]]).all():
                raise AssertionError(f"{self.bucket}: shown documents and grades disagree (query {q})")
            dcg, pos, neg, con = measures(shown, filled)
            row, score_row = shown[0, 0][filled[0, 0]], scores[0, 0][filled[0, 0]]
            counts = pair_counts(row, score_row)
            expected = core_dcg(GAINS[row], s.k) if row.size else 0.0
            if not (math.isclose(float(dcg[0, 0]), expected, rel_tol=1e-12, abs_tol=1e-12)
                    and float(pos[0, 0]) == counts.concordant + counts.grade_tied
                    and float(neg[0, 0]) == counts.discordant and float(con[0, 0]) == counts.concordant):
                raise AssertionError(f"{self.bucket}: vectorised session measures differ from monitor.core "
                                     f"(query {q})")
