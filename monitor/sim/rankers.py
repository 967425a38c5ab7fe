"""The rankers: a model score per candidate document, a noisy function of its latent grade.

    z = sign × weight × level + doc_effect + ε,   ε ~ N(0, session_noise) per session and ranker
    score = 1 / (1 + exp(−(z − 1.5 × weight)))   rounded to 4 decimals

The list is the top ``n`` by score (descending; equal rounded scores keep pool order), positions 1..n.
Control and canary are the same model family (``sign = +1``) with independent noise, so without a
regression their quality is the same in expectation. The *broken* canary (``sign = −1``) has the
relevance signal flipped: it is what a degraded canary serves (see :mod:`monitor.sim.regression`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class Ranking:
    """Indices into the query's pool in shown order, and their scores."""

    indices: IntArray
    scores: FloatArray


@dataclass(frozen=True)
class Ranker:
    name: str
    weight: float = 1.0
    session_noise: float = 0.5

    def latent(self, levels: IntArray, doc_effects: FloatArray, rng: np.random.Generator,
               broken: bool = False) -> FloatArray:
        """Every pool document's ``z`` for one session (one normal draw per document)."""
        sign = -1.0 if broken else 1.0
        z: FloatArray = sign * self.weight * levels + doc_effects + rng.normal(0.0, self.session_noise,
                                                                                levels.size)
        return z

    def order(self, z: FloatArray, top_n: int) -> Ranking:
        """The top ``n`` of the pool by the scores of ``z``."""
        scores = np.round(1.0 / (1.0 + np.exp(-(z - 1.5 * self.weight))), 4)
        order = np.argsort(-scores, kind="stable")[:top_n]
        return Ranking(order.astype(np.int64), scores[order])

    def rank(
        self,
        levels: IntArray,
        doc_effects: FloatArray,
        top_n: int,
        rng: np.random.Generator,
        broken: bool = False,
    ) -> Ranking:
        return self.order(self.latent(levels, doc_effects, rng, broken), top_n)
