"""One ranked list joined with its judgments, as arrays in rank order: the input of every measure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from monitor.core.grades import Grade

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class JudgedList:
    """A ranked list (rank 1 first) and the judgments of its query.

    ``gains``/``levels``/``relevant`` are 0 for unjudged documents (trec_eval's convention); ``judged`` says
    which positions carry a label (pairwise measures and AUC use only those). ``scores`` are the model's
    scores in rank order (pairwise measures orient pairs by them). ``pool_gains`` are the gains of every
    labelled document of the query, shown or not (the NDCG ideal); ``n_relevant`` counts the relevant ones.
    """

    gains: FloatArray
    levels: FloatArray
    relevant: FloatArray
    judged: BoolArray
    scores: FloatArray
    pool_gains: FloatArray
    n_relevant: int
    max_level: float

    @classmethod
    def build(
        cls,
        doc_ids: Sequence[str],
        scores: Sequence[float] | None,
        labels: Mapping[str, Grade],
        max_level: float,
        pool: Mapping[str, Grade] | None = None,
    ) -> JudgedList:
        """Join ``doc_ids`` (rank order) with ``labels``; ``pool`` (default ``labels``) is the ideal's pool.

        Without scores the shown order stands for the model's (score = −rank).
        """
        n = len(doc_ids)
        grades = [labels.get(doc) for doc in doc_ids]
        pool_grades = list((labels if pool is None else pool).values())
        score_array = (np.asarray(scores, dtype=np.float64) if scores is not None
                       else -np.arange(1, n + 1, dtype=np.float64))
        if score_array.size != n:
            raise ValueError(f"{n} documents but {score_array.size} scores")
        return cls(
            gains=np.array([g.gain if g else 0.0 for g in grades], dtype=np.float64),
            levels=np.array([g.level if g else 0 for g in grades], dtype=np.float64),
            relevant=np.array([1.0 if g and g.relevant else 0.0 for g in grades], dtype=np.float64),
            judged=np.array([g is not None for g in grades], dtype=np.bool_),
            scores=score_array,
            pool_gains=np.array([g.gain for g in pool_grades], dtype=np.float64),
            n_relevant=sum(1 for g in pool_grades if g.relevant),
            max_level=max_level,
        )

    @property
    def size(self) -> int:
        return int(self.gains.size)

    def coverage(self, k: int | None = None) -> float | None:
        """Share of the top k positions that carry a label (None for an empty list)."""
        top = self.judged if k is None else self.judged[:k]
        return float(top.mean()) if top.size else None
