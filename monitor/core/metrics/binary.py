"""Binary list metrics: P@k, R@k, AP (trec_eval), AP@k (seed 003) and RR.

``relevant`` is a 0/1 array in rank order; ``n_relevant`` is the number of relevant documents labelled for
the query (retrieved or not).

    P@k  = |relevant in top k| / k                      (k counts even past the list's end, as trec_eval)
    R@k  = |relevant in top k| / n_relevant              (0 when n_relevant = 0)
    AP   = Σ_{i relevant} P@i / n_relevant                (trec_eval "map"; with k: only i ≤ k)
    AP@k = Σ_{i ≤ k relevant} P@i / |relevant in top k|   (seed 003's definition; 0 when none)
    RR   = 1 / rank of the first relevant document, 0 if none

>>> precision([1, 0, 1, 0, 1], 5), recall([1, 0, 1, 0, 1], 5, n_relevant=4)
(0.6, 0.75)
>>> round(seed_average_precision([1, 0, 1, 1, 0], 5), 4), round(seed_average_precision([0, 1, 0, 1, 1], 5), 4)
(0.8056, 0.5333)
"""

from __future__ import annotations

import numpy as np

from monitor.core.metrics._arrays import ArrayLike, FloatArray, as_floats, check_cutoff, head


def _binary(relevant: ArrayLike) -> FloatArray:
    array = as_floats(relevant, "relevant")
    if array.size and not np.all((array == 0.0) | (array == 1.0)):
        raise ValueError("relevant must hold only 0 and 1")
    return array


def precision(relevant: ArrayLike, k: int) -> float:
    check_cutoff(k)
    return float(head(_binary(relevant), k).sum()) / k


def recall(relevant: ArrayLike, k: int | None, n_relevant: int) -> float:
    if n_relevant < 0:
        raise ValueError(f"n_relevant must be ≥ 0, got {n_relevant}")
    if n_relevant == 0:
        return 0.0
    return float(head(_binary(relevant), k).sum()) / n_relevant


def _precisions_at_relevant(relevant: ArrayLike, k: int | None) -> FloatArray:
    top = head(_binary(relevant), k)
    hits = np.cumsum(top)
    ranks = np.arange(1, top.size + 1, dtype=np.float64)
    out: FloatArray = (hits / ranks)[top == 1.0]
    return out


def average_precision(relevant: ArrayLike, n_relevant: int, k: int | None = None) -> float:
    """trec_eval's AP: the denominator is every relevant labelled document of the query."""
    if n_relevant < 0:
        raise ValueError(f"n_relevant must be ≥ 0, got {n_relevant}")
    if n_relevant == 0:
        return 0.0
    return float(_precisions_at_relevant(relevant, k).sum()) / n_relevant


def seed_average_precision(relevant: ArrayLike, k: int | None = None) -> float:
    """Seed 003's AP@k: the mean of P@i over the relevant positions i ≤ k (0 when there are none)."""
    values = _precisions_at_relevant(relevant, k)
    return float(values.mean()) if values.size else 0.0


def reciprocal_rank(relevant: ArrayLike, k: int | None = None) -> float:
    top = head(_binary(relevant), k)
    hits = np.flatnonzero(top)
    return 1.0 / float(hits[0] + 1) if hits.size else 0.0
