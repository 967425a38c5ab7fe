"""Latent relevance: every query's candidate documents and their true grades.

Query ``q`` has a pool of ``pool_size(bucket)`` documents ``d-<q>-<n>``. Its grade mix is drawn from a
Dirichlet around the bucket's mix (``concentration × mix``), so queries of one bucket differ (some tail
queries have nothing good at all), and each document's level (0..3 = 无/低/中/高) is drawn from that mix.
The defaults give head queries more good documents than torso, and torso more than tail.

Each document also has a ``doc_effect``: how much better or worse it looks to any ranker than it is
(shared by both rankers, the way two models share features), N(0, ``doc_noise``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from monitor.sim.config import BUCKETS, SimConfig
from monitor.sim.queries import Vocabulary

LEVEL_GAINS = (0.0, 0.3, 0.7, 1.0)  # the four-level scale's gains of levels 0..3

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def doc_id(query_number: int, n: int) -> str:
    return f"d-{query_number}-{n}"


@dataclass
class Pools:
    """Per query number: its documents' latent levels and doc effects (index ``n`` is ``d-<q>-<n>``)."""

    levels: list[IntArray]
    doc_effects: list[FloatArray]
    _ids: dict[int, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def doc_ids(self, query_number: int) -> tuple[str, ...]:
        ids = self._ids.get(query_number)
        if ids is None:
            ids = tuple(doc_id(query_number, n) for n in range(len(self.levels[query_number])))
            self._ids[query_number] = ids
        return ids

    def grades(self, query_number: int) -> dict[str, int]:
        """The true level of every document of the query's pool."""
        return dict(zip(self.doc_ids(query_number), self.levels[query_number].tolist(), strict=True))


def draw_pools(config: SimConfig, vocabulary: Vocabulary, rng: np.random.Generator) -> Pools:
    levels: list[IntArray] = [np.empty(0, np.int64)] * len(vocabulary.texts)
    effects: list[FloatArray] = [np.empty(0, np.float64)] * len(vocabulary.texts)
    for bucket in BUCKETS:
        numbers = vocabulary.of_bucket(bucket)
        size = config.pool_size(bucket)
        mix = np.asarray(config.grade_mix(bucket), dtype=np.float64)
        present = mix > 0
        mixes = np.zeros((len(numbers), 4))
        if present.sum() == 1:
            mixes[:, present] = 1.0
        else:
            mixes[:, present] = rng.dirichlet(config.grade_concentration * mix[present], size=len(numbers))
        cdf = np.cumsum(mixes, axis=1)
        draws = rng.random((len(numbers), size))
        bucket_levels = (draws[:, :, None] >= cdf[:, None, :3]).sum(axis=2).astype(np.int64)
        bucket_effects = rng.normal(0.0, config.doc_noise, (len(numbers), size))
        for row, number in enumerate(numbers):
            levels[number] = bucket_levels[row]
            effects[number] = bucket_effects[row]
    return Pools(levels, effects)
