"""Shadow candidates in the simulator: each session's shadow lists, from the served ranker's healthy noise.

A candidate (:class:`~monitor.sim.config.ShadowSpec`) ranks the same pool with the same model family as the
served rankers, ``z = weight × level + u``. The served ranker's ``u`` is the document's effect plus the
session's noise (of its healthy scores, :meth:`~monitor.sim.rankers.Ranker.latent`, before any simulated
regression of the served list); the candidate's is ``agreement`` × that plus √(1 − agreement²) × a draw of
its own with the same spread (√(doc_noise² + session_noise²)): a model that sees the documents partly
otherwise, as good as the served ranker in expectation, sharing more of its top k the higher
``agreement``; ``drop`` degrades it as ``SimConfig.regression`` degrades the canary
(:mod:`monitor.sim.regression`, against its own healthy list, with a budget per bucket).

Each candidate draws from two streams of its own (its share and noise; its regression), both children of
the simulator's ``shadow`` stream: adding a candidate changes nothing of the served traffic or of the
earlier candidates' lists.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from monitor.sim.config import BUCKETS, ShadowSpec, SimConfig
from monitor.sim.rankers import FloatArray, IntArray, Ranker, Ranking
from monitor.sim.regression import RegressionBudget, dcg_of_levels, only_irrelevant


@dataclass(frozen=True, slots=True)
class ShadowRanking:
    """One candidate's list for one session; ``degraded``: its simulated regression chose it."""

    ranker: str
    ranking: Ranking
    degraded: bool


def _child(seed: np.random.SeedSequence, index: int) -> np.random.Generator:
    """The ``index``-th child of ``seed``, without spawning (a SeedSequence's spawn counts its calls)."""
    return np.random.default_rng(np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, index)))


class ShadowRankers:
    """The candidates of one pass over the traffic, with their random streams and regression budgets."""

    def __init__(self, config: SimConfig, seed: np.random.SeedSequence) -> None:
        self.config = config
        self.specs: tuple[ShadowSpec, ...] = config.shadow
        self.rankers = [Ranker(s.ranker, config.score_weight, config.session_noise) for s in self.specs]
        self.rngs = [_child(seed, 2 * i) for i in range(len(self.specs))]
        self.regression_rngs = [_child(seed, 2 * i + 1) for i in range(len(self.specs))]
        self.budgets = [{b: RegressionBudget(s.drop) for b in BUCKETS} for s in self.specs]

    def lists(self, levels: IntArray, doc_effects: FloatArray, served_z: FloatArray, bucket: str
              ) -> list[ShadowRanking]:
        """The shadow lists of one session (those its candidates' shares keep), top ``top_n`` each."""
        weight = self.config.score_weight
        signal = weight * levels
        served_u = served_z - signal
        spread = math.hypot(self.config.doc_noise, self.config.session_noise)
        out = []
        for i, spec in enumerate(self.specs):
            rng = self.rngs[i]
            carried = rng.random() < spec.share
            own = rng.normal(0.0, spread, levels.size)
            if not carried:
                continue
            z = signal + spec.agreement * served_u + math.sqrt(1.0 - spec.agreement ** 2) * own
            ranking, degraded = self._degrade(i, z, levels, doc_effects, bucket)
            out.append(ShadowRanking(spec.ranker, ranking, degraded))
        return out

    def _degrade(self, i: int, z: FloatArray, levels: IntArray, doc_effects: FloatArray, bucket: str
                 ) -> tuple[Ranking, bool]:
        spec, ranker, rng = self.specs[i], self.rankers[i], self.regression_rngs[i]
        top_n = self.config.top_n(bucket)
        if not spec.regressed(bucket):
            return ranker.order(z, top_n), False
        if spec.kind == "irrelevant":
            full = ranker.order(z, levels.size)
            if rng.random() < spec.drop:
                return only_irrelevant(full, levels, top_n), True
            return Ranking(full.indices[:top_n], full.scores[:top_n]), False
        healthy = ranker.order(z, top_n)
        broken = ranker.rank(levels, doc_effects, top_n, rng, broken=True)
        k = self.config.label_k(bucket)
        p = self.budgets[i][bucket].probability(dcg_of_levels(levels[healthy.indices], k),
                                                dcg_of_levels(levels[broken.indices], k))
        if rng.random() < p:
            return broken, True
        return healthy, False
